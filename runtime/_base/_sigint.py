"""Whether a ``KeyboardInterrupt`` is a person's Ctrl-C: a SIGINT that was delivered.

Python raises the ``KeyboardInterrupt`` of a Ctrl-C from the SIGINT handler, in the main
thread, wherever that thread is: inside a validation's own frames, or inside the methods
of a value it returned while gategraph reads it. Code can raise one too. Where it was
raised does not tell the two apart: trio raises a Ctrl-C that lands in a protected frame
later, at a checkpoint, from a frame of its own, and under Python's default handler (in
C) there is no handler frame at all. So while a run lasts, :func:`watching_sigint` puts a
handler in front of whichever one is installed (asyncio's, trio's, Python's default) that
counts each SIGINT before passing it on; :func:`is_ctrl_c` then asks whether one came.

A SIGINT arriving between two runs is counted by neither: each run's watch starts at
zero. Outside a watch (a graph being loaded before any run), the innermost frame of the
exception's traceback is still the best guess: a handler written in Python raises from
its own frame, and under one written in C every ``KeyboardInterrupt`` is taken for a
Ctrl-C.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import signal
import threading
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["is_ctrl_c", "watching_sigint"]


class _Watch:
    """The counting handler while runs watch SIGINT (in the main thread only)."""

    depth = 0
    """How many watches are open: the handler is installed by the first, removed by the last."""
    delivered = 0
    """SIGINTs delivered since the first watch opened."""
    handler: Any = None
    """The counting handler installed, or None."""
    inner: Any = None
    """The handler it passes each SIGINT on to (and that is put back)."""


_watch = _Watch()

# The C functions under `signal`'s (which has no stubs of its own): `signal.signal` and
# `signal.getsignal` turn the handler they return into a `Handlers` enum where they can,
# formatting its repr when that fails, and asyncio's handler holds the main task, whose
# repr took a tenth of a second in a run of 10,000 validations.
_signal: Final[Any] = importlib.import_module("_signal")


def _counting(inner: Any, signum: int, frame: FrameType | None) -> Any:
    # Counted before the inner handler raises (asyncio's and Python's) or defers (trio's):
    # the count is up before any KeyboardInterrupt of this SIGINT exists.
    _watch.delivered += 1
    return inner(signum, frame)


@contextlib.contextmanager
def watching_sigint() -> Iterator[None]:
    """Count the SIGINTs delivered while this is open (nested and concurrent runs share
    one count). Only in the main thread, where Python runs signal handlers; with SIGINT
    ignored, or left to the system, nothing is installed: no signal raises
    ``KeyboardInterrupt`` then."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _watch.depth == 0:
        inner = _signal.getsignal(signal.SIGINT)
        if callable(inner):
            handler = functools.partial(_counting, inner)
            _signal.signal(signal.SIGINT, handler)
            _watch.handler, _watch.inner, _watch.delivered = handler, inner, 0
    _watch.depth += 1
    try:
        yield
    finally:
        _watch.depth -= 1
        if _watch.depth == 0 and _watch.handler is not None:
            # Put back only our own: a handler the run's code installed since stays.
            if _signal.getsignal(signal.SIGINT) is _watch.handler:
                _signal.signal(signal.SIGINT, _watch.inner)
            _watch.handler = _watch.inner = None


def is_ctrl_c(exc: KeyboardInterrupt) -> bool:
    """Whether ``exc`` is a person's Ctrl-C (it propagates) rather than raised by code."""
    if threading.current_thread() is not threading.main_thread():
        return False  # Python runs signal handlers in the main thread only
    handler: Any = signal.getsignal(signal.SIGINT)  # rare: only for a KeyboardInterrupt
    if _watch.handler is not None and handler is _watch.handler:
        return _watch.delivered > 0
    if handler == signal.SIG_IGN or handler == signal.SIG_DFL:
        return False  # no signal raises KeyboardInterrupt
    while isinstance(handler, functools.partial):
        handler = handler.func
    code = getattr(getattr(handler, "__func__", handler), "__code__", None)
    if not isinstance(code, CodeType):
        return True  # a handler in C (or none of Python's): cannot tell, so it is a Ctrl-C
    tb = exc.__traceback__
    if tb is None:
        return True
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code is code
