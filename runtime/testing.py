"""Helpers for testing plans and validations (like ``trio.testing``).

Fake validations with predictable behaviour, to use as entrypoints in plan graphs::

    validations:
      - name: always-passes
        entrypoint: gategraph.runtime.testing:passing
      - name: slow
        entrypoint: gategraph.runtime.testing:sleeping

Each accepts and ignores arguments it does not use, so it can stand in anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

__all__ = ["echo", "failing", "passing", "raising", "returning", "sleeping", "writing"]


async def passing(**_: Any) -> dict[str, Any]:
    """Pass at once."""
    return {"passed": True, "message": "ok"}


async def failing(message: str = "failed on purpose", **_: Any) -> dict[str, Any]:
    """Fail at once with ``message``."""
    return {"passed": False, "message": message}


def returning(value: Any = None, **_: Any) -> Any:
    """Return ``value`` as it is: a way to produce malformed results."""
    return value


async def sleeping(seconds: float = 0.0, passed: bool = True, **_: Any) -> dict[str, Any]:
    """Sleep ``seconds`` (on the event loop), then pass (or fail, with ``passed=False``)."""
    await anyio.sleep(seconds)
    return {"passed": passed, "message": f"slept {seconds:g} s"}


def raising(message: str = "raised on purpose", **_: Any) -> Any:
    """Raise ``RuntimeError(message)``."""
    raise RuntimeError(message)


def writing(root: Path, name: str = "written-by-validation.txt", **_: Any) -> dict[str, Any]:
    """Try to write a file into ``root``: a misbehaving validation, to test enforcement."""
    (Path(root) / name).write_text("a validation must not write\n", encoding="utf-8")
    return {"passed": True, "message": "wrote a file"}


def echo(*, artifact: Any = None, inputs: Any = None, **arguments: Any) -> dict[str, Any]:
    """Pass, and report what it was called with (arguments, artifact, inputs)."""
    arguments.pop("context", None)
    shown = {
        k: str(v) if isinstance(v, Path) else dict(v) if isinstance(v, Mapping) else v
        for k, v in arguments.items()
    }
    return {
        "passed": True,
        "message": "echo",
        "data": {"arguments": shown, "artifact": artifact, "inputs": inputs},
    }
