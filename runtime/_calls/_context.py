"""What a tool or validation call may know about where it runs: :class:`ToolContext`.

A callable receives the context when its signature has a parameter named ``context``.

Scratch folders live under one parent folder per process, ``gategraph-scratch-<pid>-…``
in the temporary directory, which holds a lock (``flock``) for as long as the process
lives. The kernel releases the lock when the process dies, however it dies, so the first
scratch a process makes sweeps away the parents whose lock is free: those of processes
killed before they could clean up (issue 9). A live process's parent is never swept.

The runtime keeps its own process-lifetime copies there too (:func:`private_folder`),
sweeps on demand (:func:`sweep`, for workers killed at their timeout), and binds a worker
process's life to its parent's (:func:`die_with_parent`).
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import os
import re
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from ._frozen import freeze
from ._readonly import Guard, allow, unguarded

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["ToolContext", "die_with_parent", "private_folder", "sweep"]

_PARENT_PREFIX: Final = "gategraph-scratch-"
# `<prefix><pid>-<mkdtemp's random part>`: the random part has no `-`, so an older
# release's per-call folders (`<prefix><random>`) never match and are left alone.
_PARENT_NAME: Final = re.compile(re.escape(_PARENT_PREFIX) + r"(\d+)-[A-Za-z0-9_]+")
_LOCK_NAME: Final = ".owner.lock"
# A private folder's kind: a plain word, so the folder's name never leaves the parent.
_KIND: Final = re.compile(r"[a-z][a-z0-9-]{0,39}")


class _Parent:
    """This process's parent folder of scratch folders, and the descriptor holding its lock."""

    __slots__ = ("fd", "path", "pid", "tempdir")

    def __init__(self, path: str, fd: int, tempdir: str) -> None:
        self.path = path
        self.fd = fd
        self.pid = os.getpid()
        self.tempdir = tempdir


_parent: _Parent | None = None
_parent_lock: Final = threading.Lock()
_swept: set[tuple[int, str]] = set()


def _lock_parent(path: str) -> int:
    """Create the lock file in ``path`` and hold an exclusive lock on it until exit."""
    fd = os.open(os.path.join(path, _LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    if sys.platform != "win32":
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def _remove_parent(parent: _Parent) -> None:
    if os.getpid() != parent.pid:
        return  # a forked child exiting: the folder is its parent process's
    shutil.rmtree(parent.path, ignore_errors=True)
    try:
        os.close(parent.fd)
    except OSError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: alive
    return True


def _sweep(tempdir: str) -> list[str]:
    """Remove the scratch parents in ``tempdir`` whose owner has died; return their paths."""
    if sys.platform == "win32":
        return []
    removed: list[str] = []
    uid = os.getuid()
    try:
        entries = list(os.scandir(tempdir))
    except OSError:
        return removed
    for entry in entries:
        match = _PARENT_NAME.fullmatch(entry.name)
        if match is None:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != uid:
                continue
            fd = os.open(
                os.path.join(entry.path, _LOCK_NAME), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
            )
        except FileNotFoundError:
            # No lock yet: its owner is between creating the folder and the lock, or
            # died right there. Only a process that is gone cannot be the former.
            if not _alive(int(match[1])):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(entry.path)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass  # held: its owner is alive
        else:
            # Free: the owner is dead. Holding the lock while removing keeps a second
            # sweeper off the same folder.
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
        finally:
            os.close(fd)
    return removed


def _scratch_parent(renew: bool = False) -> str:
    """This process's parent of scratch folders, made (and the dead swept) on first use."""
    global _parent
    tempdir = tempfile.gettempdir()
    pid = os.getpid()
    parent = _parent
    if not renew and parent is not None and parent.pid == pid and parent.tempdir == tempdir:
        return parent.path
    with _parent_lock:
        parent = _parent
        if not renew and parent is not None and parent.pid == pid and parent.tempdir == tempdir:
            return parent.path
        if (pid, tempdir) not in _swept:
            _swept.add((pid, tempdir))
            _sweep(tempdir)
        path = tempfile.mkdtemp(prefix=f"{_PARENT_PREFIX}{pid}-", dir=tempdir)
        parent = _Parent(path, _lock_parent(path), tempdir)
        atexit.register(_remove_parent, parent)
        _parent = parent
        return path


def _new_folder(prefix: str) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=_scratch_parent()))
    except FileNotFoundError:
        # The parent was removed under us (a temporary-files cleaner): make another.
        return Path(tempfile.mkdtemp(prefix=prefix, dir=_scratch_parent(renew=True)))


def _new_scratch() -> Path:
    return _new_folder("call-")


def private_folder(kind: str) -> Path:
    """Make a new, empty folder for the runtime's own temporary files; return its path.

    It lives in this process's scratch parent (``<kind>-<random>``, readable and writable by
    this user only), so it is gone once this process is: removed at a normal exit, and
    swept after a kill or a crash by the next gategraph process that makes scratch or
    calls :func:`sweep`. It is never removed while this process lives: remove it yourself
    (``shutil.rmtree``) when done with it, to free the space sooner.

    It is meant for copies that are of no use to any other process, such as the copies
    ``gategraph execute`` runs a plan on, or the sandboxes of a plan whose event log is in
    memory (no other process can resume it). A plan with a durable log keeps its sandboxes
    beside the log instead, so that ``resume`` finds them.

    ``kind`` names what the folder holds (lowercase letters, digits and ``-``, starting
    with a letter). The read-only guard does not let a validation write there: only
    ``context.scratch`` is a call's own. Making the folder is the runtime's doing, so the
    guard of a call running in this context is lifted while it is made.
    """
    if not isinstance(kind, str) or _KIND.fullmatch(kind) is None:
        raise ValueError(
            f"a private folder's kind must be a lowercase word (letters, digits, '-'), not {kind!r}"
        )
    with unguarded():
        return _new_folder(f"{kind}-")


def sweep(tempdir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the scratch parents of gategraph processes that have died; return them.

    ``tempdir`` is the temporary directory to look in (by default ``tempfile.gettempdir()``).
    A process sweeps once by itself, when it makes its first scratch folder. Call this when
    processes may have died since: at the end of a run whose worker processes were killed
    at their timeout (the kernel releases a dead worker's lock at once), so that their
    scratch does not wait for the next gategraph process. A live process's parent, this
    process's included, is never removed.
    """
    folder = os.fspath(tempdir) if tempdir is not None else tempfile.gettempdir()
    with unguarded():
        return [Path(path) for path in _sweep(folder)]


_watched: int | None = None
_watch_lock: Final = threading.Lock()


def die_with_parent(parent: int) -> None:
    """Make this worker process be killed (``SIGKILL``) as soon as ``parent`` dies.

    For the worker side of process isolation: call it with the pid of the gategraph
    process that started the worker (``os.getpid()`` there) before running a call. A worker
    killed with its parent never runs on as an orphan in a call that loops, and its scratch
    is left to the next sweep (see :func:`sweep`). If ``parent`` is not this process's
    parent any more (it died before the call arrived), the worker is killed at once: no one
    waits for its answer.

    The first call starts a daemon thread that waits for the parent to end: on a pidfd
    (Linux 5.3 and later), elsewhere by checking ``os.getppid()`` every second. Later calls
    with the same parent cost one comparison. (``prctl(PR_SET_PDEATHSIG)`` would follow the
    *thread* that started the worker, and trio starts processes from its thread cache,
    whose threads end after ten idle seconds: it would kill workers in the middle of calls.)
    """
    global _watched
    if _watched == parent:
        return
    with _watch_lock:
        if _watched == parent:
            return
        pidfd = -1
        if hasattr(os, "pidfd_open"):
            try:
                pidfd = os.pidfd_open(parent)
            except OSError:
                pass  # an older kernel (ENOSYS), or the parent is gone (ESRCH)
        # Checked once the pidfd is open, and before the call runs: a parent that died
        # before is told apart by our own parent pid (an orphan is adopted by another
        # process), not by its pid, which may be reused.
        if os.getppid() != parent:
            _kill_self()
        threading.Thread(
            target=_watch_parent, args=(parent, pidfd), name="gategraph-parent-watch", daemon=True
        ).start()
        _watched = parent


def _watch_parent(parent: int, pidfd: int) -> None:
    """Wait for ``parent`` to end (on ``pidfd``, or by polling when it is -1), then kill
    this process."""
    if pidfd >= 0:
        import select

        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while not poller.poll():
            pass  # readable once the process has ended
    else:
        while os.getppid() == parent:
            time.sleep(1.0)
    _kill_self()


def _kill_self() -> None:
    # Windows has no SIGKILL; there os.kill with SIGTERM ends the process outright.
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


_views: Final[dict[str, list[str]]] = {}
"""The copy-on-write views a sandboxed worker was given (:func:`.._base._kernel.confine`): folder
to views. A call is handed each view once (a copy of the same folder past them is a
copy); a worker with views runs one call."""


def set_views(views: dict[str, list[str]]) -> None:
    """Hand :meth:`ToolContext.disposable_copy` the views of this process's folders."""
    _views.clear()
    _views.update(views)


def special_files(folder: str, names: list[str]) -> set[str]:
    """The entries of ``folder`` that are neither files, folders nor links (a FIFO, whose
    read would wait forever; a socket; a device): a copy leaves them out. A file hidden
    behind ``/dev/null`` (the sandbox hides gategraph's databases so) is none of them: it
    copies as the empty file it shows."""
    found = set()
    for name in names:
        try:
            info = os.lstat(os.path.join(folder, name))
        except OSError:
            continue
        mode = info.st_mode
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
            continue
        if stat.S_ISCHR(mode) and info.st_rdev == _null_device():
            continue
        found.add(name)
    return found


@functools.cache
def _null_device() -> int:
    try:
        return os.stat(os.devnull).st_rdev
    except OSError:
        return -1


def copy_tree(origin: Path, target: Path) -> None:
    """Copy a folder, its links as links. Not ``copytree(symlinks=True)``: that sets a
    copied link's times through the link's path, which the read-only guard judges where the
    link leads (out of the tree: a project's ``.venv/bin/python``) and refuses."""
    links: list[str] = []

    def ignore(folder: str, names: list[str]) -> set[str]:
        found = {name for name in names if os.path.islink(os.path.join(folder, name))}
        links.extend(os.path.join(folder, name) for name in found)
        return found | special_files(folder, names)

    shutil.copytree(origin, target, ignore=ignore)
    for link in links:
        os.symlink(os.readlink(link), target / os.path.relpath(link, origin))


CHANGED: Final[contextvars.ContextVar[Mapping[str, frozenset[str]]]] = contextvars.ContextVar(
    "gategraph_changed", default=MappingProxyType({})
)
"""The files a plan's change added or modified, by folder (its absolute path): set by the
run of a plan round's validations (``execute_graph(changed=...)``), read by each call's
:class:`ToolContext` as it is made."""


EARLIER: Final[contextvars.ContextVar[Mapping[str, Any]]] = contextvars.ContextVar(
    "gategraph_earlier", default=MappingProxyType({})
)
"""What each validation of a plan found the last time it ran in an earlier round (its
result's ``data``), by node id: set by a plan round for its calls, read by
:attr:`ToolContext.earlier` when asked."""

STANDS_FOR: Final[contextvars.ContextVar[Mapping[str, str]]] = contextvars.ContextVar(
    "gategraph_stands_for", default=MappingProxyType({})
)
"""The real folder each of a plan's sandbox folders stands for, both absolute: set by a
plan round for its calls, read by an MCP call to map a path the node gives in the real
folder to the same path in the plan's copy (the server must read the change, not the
folder as it was)."""

# `ToolContext._earlier` before anyone said: the run's `EARLIER`, read when asked.
_ASK_THE_RUN: Final[Any] = object()


class ToolContext:
    """The run-time context of one tool or validation call.

    ``scratch`` is a private folder the call may write to, even as a read-only validation;
    it is removed when the call ends. ``disposable_copy`` copies a resource folder into it
    (in the kernel sandbox: gives a copy-on-write view of it, nothing copied), so an
    external command (a test runner, a linter) can run against a copy that it may change at
    will, never against the sandbox or the real resource.

    ``changed`` (folder path → the files a plan's change added or modified there) is what
    :meth:`changed` tells; by default, what the run the call belongs to was told
    (``execute_graph(changed=...)``, which a plan's validation round gives). ``earlier``
    is what :attr:`earlier` tells; by default, what the plan's round says.
    """

    __slots__ = (
        "_changed",
        "_earlier",
        "_guard",
        "_scratch",
        "_viewed",
        "attempt",
        "node",
        "plan_id",
        "resources",
    )

    def __init__(
        self,
        *,
        plan_id: str = "",
        node: str = "",
        attempt: int = 1,
        resources: Mapping[str, Any] | None = None,
        guard: Guard | None = None,
        changed: Mapping[Any, Iterable[str]] | None = None,
        earlier: Any = _ASK_THE_RUN,  # a mapping or None: what `earlier` tells
    ) -> None:
        self.plan_id = plan_id
        """The plan the call belongs to."""
        self.node = node
        """The graph node (or attachment) being run."""
        self.attempt = attempt
        """1 for the first call of this node in the plan, then 2, 3, ..."""
        self.resources: Mapping[str, Any] = resources or {}
        """The resources given to the call, by slot name (folders as ``Path``)."""
        self._guard = guard
        self._scratch: Path | None = None
        self._viewed: tuple[str, ...] = ()
        self._changed: Mapping[str, frozenset[str]] = (
            {os.path.abspath(k): frozenset(v) for k, v in changed.items()}
            if changed is not None
            else CHANGED.get()
        )
        self._earlier = earlier

    @classmethod
    def _of_call(
        cls,
        plan_id: str,
        node: str,
        attempt: int,
        resources: Mapping[str, Any],
        guard: Guard | None,
    ) -> ToolContext:
        """The runtime's constructor, one per call: positional arguments and no defaults to
        fill make it about half the cost of ``ToolContext(...)`` with keywords."""
        context = object.__new__(cls)
        context.plan_id = plan_id
        context.node = node
        context.attempt = attempt
        context.resources = resources
        context._guard = guard
        context._scratch = None
        context._viewed = ()
        context._changed = CHANGED.get()
        context._earlier = _ASK_THE_RUN
        return context

    @property
    def earlier(self) -> Mapping[str, Any] | None:
        """What this validation found the last time it ran in this plan, in an earlier
        round: that result's ``data``, read-only; ``None`` in a plan's first round, for a
        validation that has not run before, or outside a plan.

        A check may use it to get its answer sooner (run first the tests that failed
        then, order its work by the times it took), never to answer differently: a
        call that uses it must pass or fail as a fresh one would. Resumed or replayed, a
        round gives the same as when it first ran (the log holds the earlier rounds)."""
        data = self._earlier_data()
        return freeze(data, "earlier") if data is not None else None

    def _earlier_data(self) -> Mapping[str, Any] | None:
        """:attr:`earlier`, as it is kept (for another process, which freezes its own)."""
        if self._earlier is _ASK_THE_RUN:
            found: Mapping[str, Any] | None = EARLIER.get().get(self.node)
            return found
        return self._earlier  # type: ignore[no-any-return]

    @property
    def guard(self) -> Guard | None:
        """The read-only guard of the call (``None`` for a tool that may write)."""
        return self._guard

    @property
    def scratch(self) -> Path:
        """A private, writable temporary folder, created on first use."""
        if self._scratch is None:
            with unguarded():
                self._scratch = _new_scratch()
            if self._guard is not None:
                allow(self._guard, self._scratch)
        return self._scratch

    def disposable_copy(self, source: str | os.PathLike[str] | None = None) -> Path:
        """Copy a folder (by default the only folder resource) into scratch; return the copy."""
        if source is None:
            folders = [v for v in self.resources.values() if isinstance(v, Path) and v.is_dir()]
            if len(folders) != 1:
                raise ValueError(
                    "name the folder to copy: the call has "
                    f"{len(folders)} folder resources, not exactly one"
                )
            source = folders[0]
        origin = Path(source)
        view = next(iter(self._free_views(origin)), None)
        if view is not None:
            # A sandboxed call's copy-on-write view: the folder as it is, nothing copied,
            # and what the call writes there stays in its worker (which runs no other call).
            self._viewed += (view,)
            if self._guard is not None:
                allow(self._guard, Path(view))
            return Path(view)
        target = self.scratch / (origin.name or "copy")
        counter = 1
        while target.exists():
            counter += 1
            target = self.scratch / f"{origin.name or 'copy'}-{counter}"
        copy_tree(origin, target)
        return target

    def changed(self, source: str | os.PathLike[str] | None = None) -> frozenset[str] | None:
        """The files of the folder ``source`` (by default the only folder resource) that
        the plan's change added or modified, as paths relative to it with ``/``; ``None``
        when the call cannot know (it is not a validation of a plan's change, or the folder
        is not the plan's copy): judge the whole folder then.

        A validation that judges each file on its own (a syntax check, a pattern search)
        need judge only these: the files nobody changed were there before the plan. What
        the change deleted is not among them."""
        if source is None:
            folders = [v for v in self.resources.values() if isinstance(v, Path)]
            if len(folders) != 1:
                return None
            source = folders[0]
        return self._changed.get(os.path.abspath(source))

    def free_copies(self, source: str | os.PathLike[str]) -> int:
        """How many more copies of the folder ``source`` :meth:`disposable_copy` makes at
        no cost: copy-on-write views, in the kernel sandbox (0 elsewhere: each copy there
        copies the folder). A validation that could use several (a test suite run in
        shards) asks how many it may take for free."""
        return len(self._free_views(Path(source)))

    def _free_views(self, origin: Path) -> list[str]:
        views = _views.get(os.path.abspath(origin), ())
        return [view for view in views if view not in self._viewed]

    def cleanup(self) -> None:
        """Remove the scratch folder (the runtime calls this when the call ends)."""
        if self._scratch is not None:
            with unguarded():
                shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
