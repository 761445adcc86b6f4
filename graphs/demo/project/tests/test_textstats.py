"""Text statistics."""

from __future__ import annotations

from textstats import most_common, word_count, words


def test_words_are_lower_cased() -> None:
    assert words("The cat's hat") == ["the", "cat's", "hat"]


def test_word_count() -> None:
    assert word_count("") == 0
    assert word_count("one two, three!") == 3


def test_most_common() -> None:
    assert most_common("a b a c a b", 2) == [("a", 3), ("b", 2)]
