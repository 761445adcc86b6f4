"""Run-time read-only enforcement (seed 000, "Read-Only Enforcement").

One ``sys.addaudithook`` hook, installed once, watches every audited operation of the
process. It acts only while a *guard* is set in the current context (a context variable,
so it follows a validation into the worker thread anyio runs it in, and is invisible to
everything else running at the same time):

- a validation guard refuses writes — opening a file for writing, remove, rename, mkdir,
  rmdir, chmod, chown, link, truncate, utime, rmtree — outside the call's own scratch
  folder, and refuses to start an external command whose working directory is not inside
  that scratch folder (so commands run against a disposable copy);
- a transform guard (``pure=True``) also refuses every external command and every network
  connection: a transform is a pure data transformation (seed 000, "Tool Wrapping").

A refused operation raises :class:`ReadOnlyViolationError` (a ``PermissionError``) where it
was attempted, and the guard remembers it, so a validation that catches the error still
fails with ``read_only_violation``.
"""

from __future__ import annotations

import contextvars
import os
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "Guard",
    "ReadOnlyViolationError",
    "enter",
    "guarded",
    "install_hook",
    "leave",
    "own_slot",
    "run_guarded",
    "unguarded",
]

_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Audit events (CPython's audit events table) that change the file system; the first
# argument is the path.
_FS_EVENTS: Final[dict[str, tuple[tuple[int, int | None], ...]]] = {
    "os.remove": ((0, 1),),
    "os.rmdir": ((0, 1),),
    "os.mkdir": ((0, 2),),
    "os.chmod": ((0, 2),),
    "os.chown": ((0, 3),),
    "os.rename": ((0, 2), (1, 3)),
    "os.link": ((1, 3),),
    "os.symlink": ((1, 2),),
    "os.truncate": ((0, None),),
    "os.utime": ((0, 3),),
    "os.chflags": ((0, None),),
    "os.lchflags": ((0, None),),
    "os.setxattr": ((0, None),),
    "os.removexattr": ((0, None),),
    "shutil.rmtree": ((0, 1),),
    "shutil.chown": ((0, None),),
}
_EXEC_EVENTS: Final = frozenset(
    {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"}
)
_NET_EVENTS: Final = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})
_HARMLESS_TARGETS: Final = frozenset({os.devnull})


class ReadOnlyViolationError(PermissionError):
    """A validation or transform attempted an operation its read-only guard forbids."""


class Guard:
    """What one guarded call may do, and the first thing it tried that it may not."""

    __slots__ = ("allowed", "pure", "violation", "what")

    def __init__(self, what: str, *, pure: bool = False) -> None:
        self.what = what
        """Who is guarded, for messages: ``validation 'x'`` or ``transform of 'x'``."""
        self.pure = pure
        """Also refuse external commands and network connections."""
        self.allowed: tuple[str, ...] = ()
        """Folders (absolute, normalised, with a trailing separator) writes may go to."""
        self.violation: str | None = None
        """The first refused operation, described."""

    def allow(self, folder: str | os.PathLike[str]) -> None:
        """Let the guarded call write inside ``folder`` (its scratch space)."""
        path = os.path.realpath(os.fspath(folder))
        self.allowed = (*self.allowed, path.rstrip(os.sep) + os.sep)

    def _inside_allowed(self, target: Any, dir_fd: Any = None) -> bool:
        if isinstance(target, int):
            # A file descriptor: judge the file it refers to.
            path = _fd_path(target)
            if path is None:
                return False
        else:
            try:
                path = os.fsdecode(target)
            except TypeError:
                return False
            if path in _HARMLESS_TARGETS:
                return True
            if isinstance(dir_fd, int) and not os.path.isabs(path):
                # Relative to an open folder (shutil.rmtree works this way).
                folder = _fd_path(dir_fd)
                if folder is None:
                    return False
                path = os.path.join(folder, path)
        full = os.path.realpath(path) + os.sep
        return any(full.startswith(root) for root in self.allowed)

    def refuse(self, description: str) -> None:
        if self.violation is None:
            self.violation = description
        raise ReadOnlyViolationError(f"{self.what} is read-only: {description} refused")


class _Slot:
    """The guard of one context. Workers keep one slot and swap the guard in it per call:
    setting a context variable costs microseconds, an attribute store nanoseconds."""

    __slots__ = ("guard",)

    def __init__(self, guard: Guard | None = None) -> None:
        self.guard = guard


_current: Final[contextvars.ContextVar[_Slot | None]] = contextvars.ContextVar(
    "gategraph_read_only_guard", default=None
)
_installed = False
_install_lock = threading.Lock()


def _fd_path(fd: int) -> str | None:
    """The path an open file descriptor refers to (Linux), or None if it cannot be told."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _is_bytecode_cache(path: Any) -> bool:
    try:
        text = os.fsdecode(path)
    except TypeError:
        return False
    return f"{os.sep}__pycache__{os.sep}" in text


def _hook(event: str, args: tuple[Any, ...]) -> None:
    slot = _current.get()
    if slot is None:
        return
    guard = slot.guard
    if guard is None:
        return
    if event == "open":
        path, mode, flags = args
        writing = (mode is not None and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & _WRITE_FLAGS
        )
        if writing and not guard._inside_allowed(path):
            if _is_bytecode_cache(path):
                # The import system caches bytecode and ignores a failure to; refusing
                # is right, recording it as the validation's fault is not.
                raise ReadOnlyViolationError("bytecode cache writes are off while guarded")
            guard.refuse(f"opening {os.fsdecode(path)!r} for writing")
    elif event in _FS_EVENTS:
        # (path index, dir_fd index) of what the operation changes, per CPython's audit
        # events table; a link's or a symlink's source is only read.
        for index, fd_index in _FS_EVENTS[event]:
            target = args[index] if index < len(args) else None
            dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
            if target is not None and not guard._inside_allowed(target, dir_fd):
                guard.refuse(f"{event} on {target!r}")
    elif event == "subprocess.Popen":
        _executable, argv, cwd, _env = args
        command = argv if isinstance(argv, str | bytes) else " ".join(map(str, argv or ()))
        if guard.pure:
            guard.refuse(f"running {command!r} (a transform must be pure)")
        if cwd is None or not guard._inside_allowed(cwd):
            guard.refuse(
                f"running {command!r} outside a disposable copy "
                "(use context.disposable_copy() and run the command there)"
            )
    elif event in _EXEC_EVENTS:
        # posix_spawn and spawn take no working directory: no way to hold them to a copy.
        if guard.pure or event in {
            "os.system",
            "os.exec",
            "os.fork",
            "os.forkpty",
            "os.posix_spawn",
            "os.spawn",
        }:
            guard.refuse(f"{event} {args[0]!r}" if args else event)
    elif event in _NET_EVENTS and guard.pure:
        guard.refuse(f"network access ({event}) in a transform")


def install_hook() -> None:
    """Install the audit hook once per process (hooks cannot be removed)."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if not _installed:
            sys.addaudithook(_hook)
            _installed = True


def own_slot() -> None:
    """Give the current task a guard slot of its own (engine workers call this once)."""
    install_hook()
    _current.set(_Slot())


def enter(guard: Guard) -> tuple[_Slot | None, contextvars.Token[_Slot | None] | None]:
    """Start applying ``guard`` in this context; pass the result to :func:`leave`."""
    slot = _current.get()
    if slot is not None and slot.guard is None:
        slot.guard = guard
        return slot, None
    install_hook()
    return None, _current.set(_Slot(guard))


def leave(state: tuple[_Slot | None, contextvars.Token[_Slot | None] | None]) -> None:
    """Stop applying the guard :func:`enter` applied."""
    slot, token = state
    if slot is not None:
        slot.guard = None
    elif token is not None:
        _current.reset(token)


@contextmanager
def guarded(guard: Guard) -> Iterator[Guard]:
    """Apply ``guard`` to everything run in this context until the block exits."""
    state = enter(guard)
    try:
        yield guard
    finally:
        leave(state)


@contextmanager
def unguarded() -> Iterator[None]:
    """Lift the guard for runtime housekeeping (creating or removing scratch space)."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


def run_guarded(guard: Guard, func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call ``func(**kwargs)`` under ``guard`` in a slot of its own (for worker threads).

    A thread abandoned at a timeout keeps running; its own slot keeps it guarded after the
    worker that started it has moved on to other calls.
    """
    token = _current.set(_Slot(guard))
    try:
        return func(**kwargs)
    finally:
        _current.reset(token)
