"""Helpers several test modules share: graphs from indented text, modules of test tools."""

from __future__ import annotations

import sys
import textwrap
import types
from typing import TYPE_CHECKING, Any

from gategraph.runtime._graph import load_graph

if TYPE_CHECKING:
    import pytest
    from gategraph.runtime._graph import PlanGraph


def graph(text: str) -> PlanGraph:
    """Load a graph written as an indented YAML block."""
    return load_graph(textwrap.dedent(text).strip() + "\n")


def fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: Any) -> str:
    """Install a module of test tools (removed after the test) and return its name."""
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return name
