"""Sync twins of the main entry points, for code that has no event loop."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["run_sync"]

_T = TypeVar("_T")


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
    import anyio

    from ._eventlog import SQLiteEventLog

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

    anyio.run(call)
    return found[0]
