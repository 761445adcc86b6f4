"""Greetings for people, one or several at a time."""

from __future__ import annotations


def greet(name: str, punctuation: str = "!") -> str:
    """Return a greeting for ``name``."""
    name = name.strip()
    if not name:
        raise ValueError("name must not be empty")
    return f"Hello, {name}{punctuation}"


def greet_all(names: list[str]) -> list[str]:
    """Return a greeting for each name, in order."""
    # TODO: greet a group with a single line once the style guide says how.
    return [greet(name) for name in names]
