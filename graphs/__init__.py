"""Declarative plan graphs shipped with gategraph (package data)."""
