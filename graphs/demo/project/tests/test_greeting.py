"""Greetings."""

from __future__ import annotations

import pytest
from greeting import greet, greet_all


def test_greet() -> None:
    assert greet("Ada") == "Hello, Ada!"
    assert greet(" Ada ", ".") == "Hello, Ada."


def test_greet_refuses_an_empty_name() -> None:
    with pytest.raises(ValueError, match="empty"):
        greet("  ")


def test_greet_all_keeps_the_order() -> None:
    assert greet_all(["Ada", "Grace"]) == ["Hello, Ada!", "Hello, Grace!"]
