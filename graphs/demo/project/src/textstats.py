"""Small statistics over a text."""

from __future__ import annotations

import re
from collections import Counter

_WORD = re.compile(r"[A-Za-z']+")


def words(text: str) -> list[str]:
    """Return the words of ``text``, lower-cased."""
    return [word.lower() for word in _WORD.findall(text)]


def word_count(text: str) -> int:
    """Return how many words ``text`` has."""
    return len(words(text))


def most_common(text: str, n: int = 3) -> list[tuple[str, int]]:
    """Return the ``n`` most frequent words with their counts, most frequent first."""
    return Counter(words(text)).most_common(n)
