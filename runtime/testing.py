"""Helpers for testing plans and validations (like ``trio.testing``).

Fake validations with predictable behaviour, to use as entrypoints in plan graphs::

    validations:
      - name: always-passes
        entrypoint: gategraph.runtime.testing:passing
      - name: slow
        entrypoint: gategraph.runtime.testing:sleeping

Each accepts and ignores arguments it does not use, so it can stand in anywhere.

And scripted, deterministic actors for the supervisor (seed 000's lifecycle)::

    lifecycle:
      executor:
        uses: gategraph.runtime.testing:ScriptedExecutor
        arguments:
          steps:
            - files: {"src/app.py": "def greet(:\n"}                  # first try: broken
            - files: {"src/app.py": "def greet():\n    return 1\n"}  # the fix
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio

__all__ = [
    "ScriptedExecutor",
    "ScriptedStrategy",
    "echo",
    "event_loop",
    "failing",
    "passing",
    "raising",
    "returning",
    "sleeping",
    "whereami",
    "writing",
]


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


async def event_loop(**_: Any) -> dict[str, Any]:
    """Pass, saying which event loop awaited it (``data.loop``): ``asyncio``, ``uvloop``
    or ``trio``."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return {"passed": True, "message": "trio", "data": {"loop": "trio"}}
    name = "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    return {"passed": True, "message": name, "data": {"loop": name}}


def whereami(**_: Any) -> dict[str, Any]:
    """Pass, saying which process ran it (``data.pid``): where did the executor send it?"""
    import os

    return {"passed": True, "message": f"pid {os.getpid()}", "data": {"pid": os.getpid()}}


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


class ScriptedStrategy:
    """A strategy actor that records what it was asked and answers with a fixed summary."""

    def __init__(self, summary: str = "scripted strategy") -> None:
        self.summary = summary
        self.requests: list[Any] = []
        """Every :class:`StrategyRequest`, in order (revision, history ...)."""

    async def strategize(self, request: Any) -> Any:
        """Record the request; return ``summary`` (with the revision number)."""
        from ._base._protocols import Strategy

        self.requests.append(request)
        return Strategy(summary=f"{self.summary} (revision {request.revision})")


class ScriptedExecutor:
    """An execution actor that follows a script, one step per attempt.

    Each step may write ``files`` (path → text, or ``None`` to delete) into a resource's
    sandbox (``resource``: its name; by default the only one), ``raise_`` an error with
    that message, and return ``artifact`` (by default ``{"files": [the paths]}``). The
    first step is the work; each fix takes the next step (by the request's ``fix``
    number, so a resumed plan takes the same step again); past the end, the last step
    repeats — so a one-step script is an executor that never fixes anything. A revised
    strategy starts the script over.
    """

    def __init__(self, steps: list[dict[str, Any]]) -> None:
        if not steps:
            raise ValueError("a script needs at least one step")
        self.steps = steps
        self.calls: list[Any] = []
        """Every request, in order (an ``ExecuteRequest`` then ``FixRequest``s)."""

    async def execute(self, request: Any) -> Any:
        """Take the first step."""
        self.calls.append(request)
        return self._step(self.steps[0], request.resources)

    async def fix(self, request: Any) -> Any:
        """Take the next step (the last one again past the end of the script)."""
        self.calls.append(request)
        return self._step(self.steps[min(request.fix, len(self.steps) - 1)], request.resources)

    def _step(self, step: Mapping[str, Any], resources: Mapping[str, Any]) -> Any:
        if step.get("raise_"):
            raise RuntimeError(str(step["raise_"]))
        files: Mapping[str, str | None] = step.get("files") or {}
        if files:
            name = step.get("resource")
            if name is None:
                if len(resources) != 1:
                    raise ValueError("say which resource the step writes to (`resource`)")
                name = next(iter(resources))
            view = resources[name]
            for path, text in files.items():
                if isinstance(view, Path):
                    target = view / path
                    if text is None:
                        target.unlink(missing_ok=True)
                    else:
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_text(text, encoding="utf-8")
                elif text is None:
                    view.pop(path, None)
                else:
                    view[path] = text
        return step.get("artifact", {"files": sorted(files)})
