"""Greetings (unittest style: the standard library's runner and pytest both run it)."""

from __future__ import annotations

import unittest

from greeting import greet, greet_all


class GreetTest(unittest.TestCase):
    def test_greet(self) -> None:
        self.assertEqual(greet("Ada"), "Hello, Ada!")
        self.assertEqual(greet(" Ada ", "."), "Hello, Ada.")

    def test_greet_refuses_an_empty_name(self) -> None:
        with self.assertRaisesRegex(ValueError, "empty"):
            greet("  ")

    def test_greet_all_keeps_the_order(self) -> None:
        self.assertEqual(greet_all(["Ada", "Grace"]), ["Hello, Ada!", "Hello, Grace!"])
