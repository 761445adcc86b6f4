"""Text statistics (unittest style: the standard library's runner and pytest both run it)."""

from __future__ import annotations

import unittest

from textstats import most_common, word_count, words


class TextStatsTest(unittest.TestCase):
    def test_words_are_lower_cased(self) -> None:
        self.assertEqual(words("The cat's hat"), ["the", "cat's", "hat"])

    def test_word_count(self) -> None:
        self.assertEqual(word_count(""), 0)
        self.assertEqual(word_count("one two, three!"), 3)

    def test_most_common(self) -> None:
        self.assertEqual(most_common("a b a c a b", 2), [("a", 3), ("b", 2)])
