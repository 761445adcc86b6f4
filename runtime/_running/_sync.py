"""Sync twins of the main entry points, for code that has no event loop."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["choose_loop", "run_loop", "run_sync", "use_uvloop", "uses_uvloop"]

_T = TypeVar("_T")

_NEEDS_UVLOOP = "uvloop is not installed: pip install 'gategraph[uvloop]' (not on Windows)"
_LOOP = {"uvloop": False}
"""Whether the event loops gategraph starts itself (its sync entry points, the command
line) are uvloop's."""


def _uvloop_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def use_uvloop(enabled: bool = True) -> None:
    """Run the event loops gategraph starts itself on uvloop from now on, in this process:
    those of the sync entry points (``execute_graph_sync``, ``run_plan_sync``,
    ``validate_sync`` ...). ``enabled=False`` goes back to asyncio's own loop.

    The command line does this when ``GATEGRAPH_LOOP=uvloop`` says so. Async code runs on whatever loop it runs on: to put it on uvloop,
    start it with ``anyio.run(main, backend_options={"use_uvloop": True})`` or
    ``uvloop.run(main())``. Raises :class:`ModuleNotFoundError` if uvloop is not
    installed (``pip install 'gategraph[uvloop]'``).
    """
    if enabled and not _uvloop_installed():
        raise ModuleNotFoundError(_NEEDS_UVLOOP, name="uvloop")
    _LOOP["uvloop"] = bool(enabled)


def uses_uvloop() -> bool:
    """Whether the loops gategraph starts itself are uvloop's now."""
    return _LOOP["uvloop"]


LOOP_CHOICES = ("auto", "asyncio", "uvloop")
"""What ``GATEGRAPH_LOOP`` may say: ``auto`` (the default) is asyncio's loop. gategraph is
no faster on uvloop's (the engine's time is its own Python) and was measured slower on
I/O-bound fan-outs (``gategraph bench --scenario noop,io`` compares them)."""


def choose_loop(choice: str | None) -> str | None:
    """Take the command line's loop from ``GATEGRAPH_LOOP``'s value ``choice``; return why
    it cannot be taken (one line), or ``None``."""
    wanted = (choice or "auto").strip().lower()
    if wanted not in LOOP_CHOICES:
        return f"GATEGRAPH_LOOP={choice}: say one of {', '.join(LOOP_CHOICES)}"
    if wanted == "uvloop" and not _uvloop_installed():
        return f"GATEGRAPH_LOOP=uvloop, but {_NEEDS_UVLOOP}"
    _LOOP["uvloop"] = wanted == "uvloop"
    return None


def run_loop(function: Callable[..., Awaitable[_T]], /, *args: Any) -> _T:
    """``anyio.run(function, *args)`` on the loop gategraph starts (asyncio's, or uvloop's:
    :func:`use_uvloop`)."""
    import anyio

    options = {"use_uvloop": True} if _LOOP["uvloop"] else {}
    return anyio.run(function, *args, backend="asyncio", backend_options=options)


def _running_loop() -> str | None:
    """The event loop running in this thread, if any (``asyncio`` or ``trio``)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        return "asyncio"
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            return None
        return "trio"
    return None


def run_sync(function: Callable[..., Awaitable[_T]], /, *args: Any, **kwargs: Any) -> _T:
    """Run ``await function(*args, **kwargs)`` on an event loop of its own, in this thread.

    Safe from any thread that runs no event loop itself, also while other threads run
    theirs. Inside a running loop it raises :class:`RuntimeError` naming the async twin:
    a loop cannot wait for a second one in its own thread. An ``event_log`` that is a
    SQLite log not yet open is opened on that loop for the call, and closed after it.
    """
    running = _running_loop()
    if running is not None:
        name = getattr(function, "__name__", "the function")
        raise RuntimeError(
            f"called from inside a running {running} event loop: use `await {name}(...)` "
            "there (the sync twin is for code without an event loop)"
        )
    from gategraph.runtime._storage._eventlog import SQLiteEventLog

    log = kwargs.get("event_log")
    found: list[_T] = []

    async def call() -> None:
        # The result is kept here, not returned: asyncio's runner formats its main task
        # (result included) while it restores the signal handlers, and a plan's outcome
        # with 10,000 validations takes tens of milliseconds to format.
        if isinstance(log, SQLiteEventLog) and not log._open:
            # A SQLite log belongs to the loop that opened it: this call's own.
            async with log:
                found.append(await function(*args, **kwargs))
        else:
            found.append(await function(*args, **kwargs))

    run_loop(call)
    return found[0]
