"""Run-time read-only enforcement (seed 000, "Read-Only Enforcement").

One ``sys.addaudithook`` hook, installed once, watches every audited operation of the
process. It acts only where a *lease* is the value of a context variable: a guarded call
takes one when it starts (:func:`enter`) and ends it when it stops (:func:`leave`). A
context variable follows the call into the worker thread anyio runs it in, and into every
task, callback and thread it hands work to through a copy of its context, and is invisible
to everything else running at the same time.

- a validation guard refuses writes — opening a file for writing, remove, rename, mkdir,
  mkfifo, mknod, rmdir, chmod, chown, link, symlink, truncate, utime, xattrs, rmtree,
  binding a Unix socket to a path (it creates a file) — outside the call's own scratch
  folder, a hard link that would share a file's data between scratch and the rest of
  the file system, changing the working directory or the environment (they are the whole
  process's: refused rather than restored, since everything running at the same time
  would see a change before it could be undone), starting an external command whose
  working directory is not inside scratch (so commands run against a disposable copy),
  creating a SQLite database outside scratch, the garbage collector's view of every
  object, ``unguarded()`` called from outside gategraph, and the network (connecting,
  sending a datagram, looking a name up) unless the validation declares it;
- a transform guard (``pure=True``) also refuses every external command and all network
  access, declared or not: a transform is a pure data transformation (seed 000,
  Constraints).

Threads a guarded call starts carry its lease (the functions that start threads are
wrapped: Python before 3.14 passes no context to a new thread), and work handed to a
``ThreadPoolExecutor`` runs under the lease of whoever submitted it.

A refused operation raises :class:`ReadOnlyViolationError` (a ``PermissionError``) where
it was attempted, and the guard records the first one. The record, and the folders the
call may write to, are sealed: their slot descriptors live only in this module, and the
hook writes the record once. A validation that catches the error cannot clear the record,
nor widen what it may write, through the guard it is handed (``context.guard``).

Attribution (issue 9): code a call leaves behind — a callback scheduled with
``call_later``, a task spawned into a task group that outlives it, a thread abandoned at
its timeout — carries the call's lease. While the call runs, what that code attempts is
charged to the call. Once the call has ended, its lease refuses every write and command
and charges no one: a deferred write never changes a resource, and never fails an
innocent call that happens to run later in the same worker.

What the hook cannot see is listed in docs/readonly.md, each item pinned by a test in
tests/calls/test_readonly_hostile.py.
"""

from __future__ import annotations

import _socket
import contextlib
import contextvars
import functools
import operator
import os
import stat
import sys
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, NoReturn

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "Guard",
    "ReadOnlyViolationError",
    "allow",
    "enter",
    "enter_process",
    "guard_process",
    "guarded",
    "install_hook",
    "late",
    "leave",
    "own_slot",
    "refuse",
    "release_process",
    "run_guarded",
    "unguarded",
]

_WRITE_FLAGS: Final = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_HARMLESS_TARGETS: Final = frozenset({os.devnull})
_AF_UNIX: Final = getattr(_socket, "AF_UNIX", None)  # None where there is none (Windows)
# File types whose data lives in a folder of the file system (a block device's is a disk).
_STORED: Final = frozenset({stat.S_IFREG, stat.S_IFDIR, stat.S_IFBLK, stat.S_IFLNK})


class ReadOnlyViolationError(PermissionError):
    """A validation or transform attempted an operation its read-only guard forbids."""


class _GuardFields:
    """The storage of a :class:`Guard`. The slot descriptors of the record and of the
    allowance are taken out of the class below and kept in ``_FIELD``: no attribute
    assignment, ``object.__setattr__`` included, reaches them from outside."""

    __slots__ = ("_allowed", "_links", "_network", "_pure", "_violation", "_what")
    _allowed: tuple[str, ...]
    _links: set[tuple[int, int]]
    _network: bool
    _pure: bool
    _violation: str | None
    _what: str


_SEALED: Final = ("_allowed", "_links", "_network", "_violation")
_FIELD: Final = {name: _GuardFields.__dict__[name] for name in _SEALED}
for _name in _SEALED:
    delattr(_GuardFields, _name)
_set_violation: Final = _FIELD["_violation"].__set__
_violation_of: Final = _FIELD["_violation"].__get__
_set_allowed: Final = _FIELD["_allowed"].__set__
_set_links: Final = _FIELD["_links"].__set__
_set_network: Final = _FIELD["_network"].__set__


def _allowed_of(guard: Guard) -> tuple[str, ...]:
    # Unset until the call makes scratch: one descriptor call fewer for every call.
    try:
        return _FIELD["_allowed"].__get__(guard)  # type: ignore[no-any-return]
    except AttributeError:
        return ()


def _network_of(guard: Guard) -> bool:
    # Unset unless the call declared the network: nothing more to do for every other call.
    try:
        return _FIELD["_network"].__get__(guard)  # type: ignore[no-any-return]
    except AttributeError:
        return False


def _links_of(guard: Guard) -> set[tuple[int, int]] | None:
    try:
        return _FIELD["_links"].__get__(guard)  # type: ignore[no-any-return]
    except AttributeError:
        return None


class Guard(_GuardFields):
    """What one guarded call may do, and the first thing it tried that it may not.

    Its fields are read-only properties. The record of the violation is written once, by
    the hook; neither it nor the folders the call may write to can be changed through the
    guard (issue 9: a validation that caught the refusal used to clear the record).
    """

    __slots__ = ()

    def __init__(self, what: str, *, pure: bool = False, network: bool = False) -> None:
        self._what = what
        self._pure = pure
        _set_violation(self, None)
        if network and not pure:  # a transform never reaches the network
            _set_network(self, True)

    if TYPE_CHECKING:

        @property
        def what(self) -> str:
            """Who is guarded, for messages: ``validation 'x'`` or ``transform of 'x'``."""

        @property
        def pure(self) -> bool:
            """Also refuse external commands, network connections and environment changes."""

        @property
        def violation(self) -> str | None:
            """The first refused operation, described; once set, it stays."""

    else:
        # C-level getters: `guard.violation`, read after every call, costs a slot read.
        what = property(operator.attrgetter("_what"), doc="Who is guarded, for messages.")
        pure = property(
            operator.attrgetter("_pure"), doc="Also refuse commands, network and environment."
        )
        violation = property(_violation_of, doc="The first refused operation; once set, it stays.")

    @property
    def network(self) -> bool:
        """Whether the call may use the network (its validation declares ``network: true``)."""
        return _network_of(self)

    @property
    def allowed(self) -> tuple[str, ...]:
        """Folders (absolute, resolved, with a trailing separator) writes may go to."""
        return _allowed_of(self)

    def __repr__(self) -> str:
        network = ", network=True" if self.network else ""
        return f"Guard({self.what!r}, pure={self.pure}{network}, violation={self.violation!r})"


def allow(guard: Guard, folder: str | os.PathLike[str]) -> None:
    """Let the call guarded by ``guard`` write inside ``folder`` (its scratch space).

    The runtime's to call (``ToolContext.scratch``); a guard has no method for it, so a
    validation cannot widen its own allowance through the guard it is handed.
    """
    path = os.path.realpath(os.fspath(folder))
    _set_allowed(guard, (*_allowed_of(guard), path.rstrip(os.sep) + os.sep))


# The value of the context variable is a *lease*: one guarded stretch of one call, the
# two-item list ``[guard, open]`` (a list rather than a class: ~50 ns less per call).
# Contexts copied while the call runs share it; `leave` sets ``open`` to False, so what
# they attempt afterwards is refused and charged to no one.
_current: Final[contextvars.ContextVar[list[Any] | None]] = contextvars.ContextVar(
    "gategraph_read_only_guard", default=None
)
LEASE: Final = _current
"""The context variable :func:`enter` and :func:`leave` set: the engine's hot path sets
and resets it itself, a frame less per validation."""
# The lease `unguarded()` sets: empty, so the hooks' one truthiness test skips it, and it
# hides a sandboxed worker's process lease from the worker's own housekeeping.
_UNGUARDED: Final[list[Any]] = []
_installed = False
_install_lock = threading.Lock()


# -- judging ---------------------------------------------------------------------------------


def _show(target: Any) -> str:
    """A target for a message; never raises, whatever the argument is."""
    try:
        return repr(os.fsdecode(target))
    except Exception:
        try:
            return repr(target)[:200]
        except Exception:
            return f"<{type(target).__name__}>"


def _describe_target(target: Any) -> str:
    if isinstance(target, int):
        path = _fd_path(target)
        return f"descriptor {target}" + (f" ({path!r})" if path is not None else "")
    return _show(target)


def refuse(lease: list[Any], description: str) -> NoReturn:
    """Refuse ``description`` to the call of ``lease``: recorded as its violation (its
    first, which it cannot clear), raised as :class:`ReadOnlyViolationError`."""
    guard = lease[0]
    if not lease[1]:
        # The call this code came from has ended: refuse, and blame no one (the call's
        # result is out; any call running now is innocent). A sandboxed worker's lease
        # keeps a note: no other call runs there, so the worker can still blame its own.
        if len(lease) > 2 and not lease[2]:
            lease[2].append(description)
        raise ReadOnlyViolationError(
            f"{guard.what} has ended: {description} refused in thread "
            f"{threading.current_thread().name!r} (it came from code the call left running: "
            "a callback, a task, or a thread first started during the call, a library's "
            "background thread included)"
        )
    if _violation_of(guard) is None:
        _set_violation(guard, description)
    raise ReadOnlyViolationError(f"{guard.what} is read-only: {description} refused")


def _fd_path(fd: int) -> str | None:
    """The path an open file descriptor refers to (Linux), or None if it cannot be told."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except (OSError, ValueError):
        return None


def _inside(lease: list[Any], full: str) -> bool:
    if not lease[1]:
        return False
    full += os.sep
    return any(full.startswith(root) for root in _allowed_of(lease[0]))


def _shares_data(lease: list[Any], st: os.stat_result) -> bool:
    """True when changing this inode may change something outside scratch: a regular file
    with another hard link the call did not make itself, or a device."""
    kind = stat.S_IFMT(st.st_mode)
    if kind == stat.S_IFBLK:
        return True
    if kind != stat.S_IFREG or st.st_nlink <= 1:
        return False
    links = _links_of(lease[0])
    return links is None or (st.st_dev, st.st_ino) not in links


def _path_allowed(lease: list[Any], target: Any, dir_fd: Any, changes_data: bool) -> bool:
    """May the call change ``target`` (a path, relative to ``dir_fd`` if one is given)?"""
    if isinstance(target, int):
        return _fd_allowed(lease, target, changes_data)
    try:
        path = os.fsdecode(target)
    except TypeError:
        return False
    if path in _HARMLESS_TARGETS:
        return True
    if not os.path.isabs(path) and isinstance(dir_fd, int) and dir_fd >= 0:
        # Relative to an open folder (shutil.rmtree works this way); -1 is "none".
        folder = _fd_path(dir_fd)
        if folder is None:
            return False
        path = os.path.join(folder, path)
    full = os.path.realpath(path)
    if not _inside(lease, full):
        return False
    if changes_data:
        try:
            st = os.stat(full)
        except OSError:
            return True  # nothing there yet: a new file has no other name
        return not _shares_data(lease, st)
    return True


def _fd_allowed(lease: list[Any], fd: int, changes_data: bool) -> bool:
    """May the call change what descriptor ``fd`` refers to? A pipe, a socket or a
    terminal holds no resource's data; a file is judged by its path."""
    try:
        st = os.fstat(fd)
    except (OSError, OverflowError):
        return True  # not open: nothing can be changed through it, and the call fails
    kind = stat.S_IFMT(st.st_mode)
    if kind not in _STORED:
        return True
    if kind == stat.S_IFREG and st.st_nlink == 0:
        return True  # deleted, or anonymous (memfd): in no folder any more
    path = _fd_path(fd)
    if path is None or not os.path.isabs(path):
        return False
    if not _inside(lease, os.path.realpath(path)):
        return False
    return not (changes_data and _shares_data(lease, st))


def _judge_open(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    path, mode, flags = args
    if mode is not None:
        writing = isinstance(mode, str) and any(c in mode for c in "wax+")
    else:
        writing = isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
    if not writing:
        return
    if isinstance(path, int):
        allowed = _fd_allowed(lease, path, True)
    else:
        allowed = _path_allowed(lease, path, None, True)
        if allowed and not os.path.isabs(os.fsdecode(path)):
            # The event does not carry `os.open`'s dir_fd: a relative path judged inside
            # scratch (against a working directory in scratch, or by climbing into it)
            # may name a file in any folder. chdir is refused while guarded; this holds
            # when other code has moved the working directory into scratch.
            allowed = False
    if not allowed:
        _refuse_bytecode_cache(path)
        refuse(lease, f"opening {_describe_target(path)} for writing")


def _judge_link(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    src, dst = args[0], args[1]
    src_fd, dst_fd = (args[2], args[3]) if len(args) >= 4 else (None, None)
    if not _path_allowed(lease, dst, dst_fd, False):
        refuse(lease, f"os.link to {_show(dst)}")
    if not _path_allowed(lease, src, src_fd, False):
        # A hard link shares the file's data: writing scratch's name would write the
        # original (issue 9).
        refuse(lease, f"hard-linking {_show(src)} (outside scratch) into scratch")
    source = os.fsdecode(src)
    if not os.path.isabs(source) and isinstance(src_fd, int) and src_fd >= 0:
        source = os.path.join(_fd_path(src_fd) or "", source)
    try:
        st = os.stat(source)
    except OSError:
        return  # the link fails by itself
    links = _links_of(lease[0])
    if links is None:
        links = set()
        _set_links(lease[0], links)
    if st.st_nlink == 1 or (st.st_dev, st.st_ino) in links:
        # Both names are in scratch: writing either is the call's own business. A file
        # already shared with a name elsewhere stays unwritable.
        links.add((st.st_dev, st.st_ino))


def _judge_fs(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # (path index, dir_fd index, changes the file's data or metadata rather than only a
    # folder's entries), per CPython's audit events table.
    for index, fd_index, changes_data in _FS_EVENTS[event]:
        target = args[index] if index < len(args) else None
        dir_fd = args[fd_index] if fd_index is not None and fd_index < len(args) else None
        if target is not None and not _path_allowed(lease, target, dir_fd, changes_data):
            if event == "os.mkdir":  # the folder of a first cache there
                _refuse_bytecode_cache(target)
            refuse(lease, f"{event} on {_describe_target(target)}")


def _judge_mknod(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    mode = args[1] if len(args) > 1 else 0
    if isinstance(mode, int) and (stat.S_ISBLK(mode) or stat.S_ISCHR(mode)):
        # A device node is a window onto a disk or a device, wherever it is made.
        refuse(lease, f"os.mknod of a device at {_show(args[0])}")
    _judge_fs(lease, event, args)


def _judge_popen(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    _executable, argv, cwd, _env = args
    if isinstance(argv, str | bytes):
        command = _show(argv)
    else:
        command = repr(" ".join(map(str, argv or ())))
    if lease[0]._pure:
        refuse(lease, f"running {command} (a transform must be pure)")
    if cwd is None or not _path_allowed(lease, cwd, None, False):
        refuse(
            lease,
            f"running {command} outside a disposable copy "
            "(use context.disposable_copy() and run the command there)",
        )


def _judge_exec(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # posix_spawn and spawn take no working directory, and exec, system and fork give the
    # command the process's own: no way to hold them to a copy.
    # os.spawn's event starts with the mode: the program comes second.
    program = args[1:2] if event == "os.spawn" else args[:1]
    refuse(lease, f"{event} {_show(program[0])}" if program else event)


def _judge_chdir(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    refuse(
        lease,
        f"changing the working directory to {_show(args[0]) if args else '?'} (it is "
        "shared by the whole process; pass cwd= to the command instead)",
    )


def _network_allowed(lease: list[Any]) -> bool:
    """The call declared the network (``network: true``) and still runs."""
    return bool(lease[1]) and _network_of(lease[0])


def _is_unix(sock: Any) -> bool:
    return _AF_UNIX is not None and getattr(sock, "family", None) == _AF_UNIX


_UNDECLARED: Final = " (a validation that uses the network declares `network: true`)"


def _judge_network(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # connect, sendto, sendmsg. Reaching a Unix socket by its path creates nothing and
    # never leaves the machine: the guard does not count it as the network.
    if lease[0]._pure:
        refuse(lease, f"network access ({event}) in a transform")
    if _network_allowed(lease) or _is_unix(args[0]):
        return
    refuse(lease, f"network access ({event} to {_show(args[1])}){_UNDECLARED}")


def _judge_lookup(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # A name lookup asks the system's resolver, which may ask a DNS server: that is the
    # network too. An address written out, or the local host's name, asks no one.
    if lease[0]._pure:
        refuse(lease, f"network access ({event}) in a transform")
    if _network_allowed(lease):
        return
    target = args[0] if args else None
    if event == "socket.getnameinfo" and isinstance(target, tuple) and target:
        target = target[0]
    reverse = event in ("socket.gethostbyaddr", "socket.getnameinfo")
    if not _asks_no_one(target, reverse=reverse):
        refuse(lease, f"looking up {_show(target)} ({event}){_UNDECLARED}")


def _asks_no_one(host: Any, *, reverse: bool) -> bool:
    """True when resolving ``host`` cannot leave the machine."""
    import ipaddress

    if host is None:
        return True
    try:
        name = host if isinstance(host, str) else os.fsdecode(host)
    except TypeError:
        return False
    if name.lower() in ("", "localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return False  # a name: the resolver may ask a server
    # An address asks no one forwards; backwards (its name) only the loopback's does not.
    return not reverse or address.is_loopback


def _judge_bind(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    if lease[0]._pure:
        refuse(lease, f"network access ({event}) in a transform")
    sock, address = args[0], args[1]
    if not _is_unix(sock):
        # An internet address names no file, and binding one sends nothing (libraries
        # bind the loopback to learn what the machine supports): connecting is judged.
        return
    if isinstance(address, str):
        raw = os.fsencode(address)
    else:
        try:
            raw = bytes(memoryview(address))
        except TypeError:
            return  # not an address at all: bind refuses it by itself
    if not raw or raw[0] == 0:
        return  # the abstract namespace (or an address the kernel picks): no file
    # The kernel reads a path address up to its first NUL; judge what it will create. It
    # has no dir_fd: a relative path is relative to the working directory, as judged here.
    path = raw.split(b"\0", 1)[0]
    if not _path_allowed(lease, path, None, False):
        refuse(lease, f"binding a Unix socket at {_show(path)} (it creates a file)")


def _judge_gc(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # Every object of the process, gategraph's own included (its database connections,
    # the guard's record, other calls' artifacts): none of a validation's business.
    refuse(lease, f"{event}() (it reaches every object of the process, gategraph's own too)")


def _judge_sqlite(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # SQLite opens, creates and writes its files in C, unseen by the hook: a database is
    # judged when it is connected to. Connecting creates a database that is not there (a
    # write); an existing one opens (to read it, as honest code does), and what is then
    # written to it goes unseen. Read-only is asked for in a URI; the event does not say
    # whether `uri=True` was passed (the wrapped `connect` does), and a name that reads as
    # one where that is not known is judged both ways.
    database = args[0] if args else None
    if isinstance(database, int) or database is None:
        refuse(lease, f"opening a SQLite database ({_show(database)})")
    name = _sqlite_creates(lease, os.fsdecode(database), _SQLITE_URI.get())
    if name is not None:
        refuse(lease, f"creating the SQLite database {_show(name)}")


def _sqlite_creates(lease: list[Any], name: str, uri: bool | None = None) -> str | None:
    """The file opening ``name`` (a SQLite file name, or a URI where ``uri`` is not False)
    may create outside scratch, or None when it creates none there."""
    if name in ("", ":memory:"):
        return None  # private to the connection: no file
    if not name.startswith("file:") or uri is False:
        return None if _path_allowed(lease, name, None, True) or os.path.isfile(name) else name
    # Without `uri=True` the whole name is a file's, relative to the working directory.
    plain = os.path.dirname(name)
    if (
        uri is None
        and not (_path_allowed(lease, name, None, True) or os.path.isfile(name))
        and os.path.isdir(plain or os.curdir)
    ):
        return name
    from urllib.parse import unquote  # SQLite decodes %XX in the path and the query

    # A URI ends at "#"; its query, after "?", holds `key=value` pairs. SQLite reads each
    # `mode`: only read-only (or memory) for every one of them creates nothing. (`immutable`
    # says the file cannot change, not that it may not be made.)
    path, _, query = name[5:].partition("#")[0].partition("?")
    modes = [
        unquote(value)
        for key, _, value in (part.partition("=") for part in query.split("&") if part)
        if unquote(key) == "mode"
    ]
    if modes and all(mode in ("ro", "memory") for mode in modes):
        return None
    if path.startswith("//"):  # file://host/path, the host empty or localhost
        path = "/" + path[2:].partition("/")[2]
    path = unquote(path)
    if path == ":memory:" or _path_allowed(lease, path, None, True) or os.path.isfile(path):
        return None  # (`file::memory:?cache=shared`: a database in memory, shared)
    return path


def _sqlite_authorizer(lease: list[Any], action: int, first: Any, *_: Any) -> int:
    # Asked by SQLite before it runs each statement of a connection made under a lease.
    import sqlite3

    if action != sqlite3.SQLITE_ATTACH:
        return sqlite3.SQLITE_OK
    name = _sqlite_creates(lease, first) if isinstance(first, str) else "?"
    if name is None:
        return sqlite3.SQLITE_OK
    try:  # SQLite ignores the error an authorizer raises: record it, and deny
        refuse(lease, f"creating the SQLite database {_show(name)} (ATTACH or VACUUM INTO)")
    except ReadOnlyViolationError:
        pass
    return sqlite3.SQLITE_DENY


def _judge_environment(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    # The environment belongs to the whole process: a value one validation set would reach
    # every validation after it (and gategraph's own commands).
    name = _show(args[0]) if args else "?"
    if lease[0]._pure:
        refuse(lease, f"changing the environment variable {name} in a transform")
    refuse(
        lease,
        f"changing the environment variable {name} (it is the whole process's; pass env= "
        "to the command instead)",
    )


_FS_EVENTS: Final[dict[str, tuple[tuple[int, int | None, bool], ...]]] = {
    "os.remove": ((0, 1, False),),
    "os.rmdir": ((0, 1, False),),
    "os.mkdir": ((0, 2, False),),
    "os.mkfifo": ((0, 2, False),),  # raised by our wrapper (CPython raises none)
    "os.mknod": ((0, 3, False),),  # ditto
    "os.chmod": ((0, 2, True),),
    "os.chown": ((0, 3, True),),
    "os.rename": ((0, 2, False), (1, 3, False)),
    "os.symlink": ((1, 2, False),),  # the source is only where the link points
    "os.truncate": ((0, None, True),),
    "os.utime": ((0, 3, True),),
    "os.chflags": ((0, None, True),),
    "os.lchflags": ((0, None, True),),
    "os.setxattr": ((0, None, True),),
    "os.removexattr": ((0, None, True),),
    "shutil.rmtree": ((0, 1, False),),
    "shutil.chown": ((0, None, True),),
}
_JUDGES: Final[dict[str, Callable[[list[Any], str, tuple[Any, ...]], None]]] = {
    "open": _judge_open,
    "os.link": _judge_link,
    "os.mknod": _judge_mknod,
    **{event: _judge_fs for event in _FS_EVENTS if event != "os.mknod"},
    "subprocess.Popen": _judge_popen,
    **dict.fromkeys(
        ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty"),
        _judge_exec,
    ),
    "os.chdir": _judge_chdir,
    "socket.bind": _judge_bind,
    **dict.fromkeys(("socket.connect", "socket.sendto", "socket.sendmsg"), _judge_network),
    **dict.fromkeys(
        ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"), _judge_lookup
    ),
    "socket.getnameinfo": _judge_lookup,
    **dict.fromkeys(("gc.get_objects", "gc.get_referrers", "gc.get_referents"), _judge_gc),
    "sqlite3.connect": _judge_sqlite,
    "os.putenv": _judge_environment,
    "os.unsetenv": _judge_environment,
}


def _refuse_bytecode_cache(path: Any) -> None:
    """Refuse a write of the import system's bytecode cache (its file or its folder)
    without charging the guarded code: the import system caches on its own account and
    goes on without the cache when it cannot write it."""
    if _is_bytecode_cache(path):
        raise ReadOnlyViolationError("bytecode cache writes are off while guarded")


def _is_bytecode_cache(path: Any) -> bool:
    """Whether ``path`` is where the import system caches bytecode: in or of a
    ``__pycache__`` folder, or under ``sys.pycache_prefix`` where one is set."""
    try:
        text = os.fsdecode(path)
    except TypeError:
        return False
    if f"{os.sep}__pycache__{os.sep}" in text or os.path.basename(text) == "__pycache__":
        return True
    prefix = sys.pycache_prefix
    return prefix is not None and (text + os.sep).startswith(prefix.rstrip(os.sep) + os.sep)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    # Invariant: with no lease in the context (every task that is not a guarded call),
    # this costs one context-variable read. `unguarded()` sets an empty lease (falsy too).
    lease = _current.get()
    if not lease:
        return
    judge = _JUDGES.get(event)
    if judge is None:
        return
    _judge(judge, lease, event, args)


def _judge(
    judge: Callable[[list[Any], str, tuple[Any, ...]], None],
    lease: list[Any],
    event: str,
    args: tuple[Any, ...],
) -> None:
    try:
        judge(lease, event, args)
    except ReadOnlyViolationError:
        raise
    except Exception as exc:
        # Fail closed, and say why: an operation the guard cannot judge is refused, never
        # broken by the hook's own error (issue 9: `open(fd)` raised TypeError here).
        refuse(lease, f"{event} (it could not be judged: {type(exc).__name__}: {exc})")


# -- a whole process guarded: the sandbox's worker processes ----------------------------------

# The lease of the call a sandboxed worker runs: every thread of the worker answers to it,
# not only those that copied the call's context (a thread the call starts gets an empty
# context). One item, set by `guard_process`; `unguarded()` still exempts the worker's own
# housekeeping.
_process_lease: list[Any] = [None]

# Functions that change files, processes or the network: resolved through ctypes by a
# sandboxed call, they are the call trying to do natively what the guard refuses. The
# kernel refuses them anyway (Landlock, seccomp); refusing them here makes the call fail
# for it rather than pass on an error code it ignored.
_NATIVE_WRITES: Final = frozenset(
    {
        *("open", "open64", "openat", "openat64", "creat", "creat64", "fopen", "fopen64"),
        *("freopen", "write", "pwrite", "pwrite64", "writev", "pwritev", "fwrite", "fputs"),
        *("unlink", "unlinkat", "remove", "rename", "renameat", "renameat2", "mkdir"),
        *("mkdirat", "rmdir", "link", "linkat", "symlink", "symlinkat", "chmod", "fchmod"),
        *("fchmodat", "chown", "fchown", "lchown", "fchownat", "truncate", "ftruncate"),
        *("mknod", "mknodat", "mkfifo", "mkfifoat", "utime", "utimes", "utimensat"),
        *("setxattr", "lsetxattr", "fsetxattr", "removexattr", "kill", "tgkill", "killpg"),
        *("socket", "connect", "bind", "sendto", "sendmsg", "syscall", "system", "popen"),
        *("execve", "execv", "execvp", "fork", "vfork", "posix_spawn", "setenv", "putenv"),
        *("unsetenv", "clearenv", "chdir", "fchdir", "ptrace"),
    }
)


def _judge_native(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    name = args[1] if len(args) > 1 else None
    if isinstance(name, bytes):
        name = name.decode("ascii", "replace")
    if isinstance(name, str) and name in _NATIVE_WRITES:
        refuse(lease, f"calling the C function {name}() through ctypes")


def _judge_sandboxed_environment(lease: list[Any], event: str, args: tuple[Any, ...]) -> None:
    name = _show(args[0]) if args else "?"
    refuse(
        lease,
        f"changing the environment variable {name} (pass env= to the command instead)",
    )


# Not `socket.__new__`: making a socket is not the network (libraries probe with one as
# they load: urllib3 binds an IPv6 socket to learn whether the machine has IPv6, and
# catches the kernel's refusal). Where the kernel refuses the socket, nothing is sent.


_PROCESS_JUDGES: Final[dict[str, Callable[[list[Any], str, tuple[Any, ...]], None]]] = {
    # Not the garbage collector (a sandboxed worker holds nothing of gategraph's to reach),
    # nor SQLite (its read-only mounts refuse a database's creation, in C as in Python).
    **{event: judge for event, judge in _JUDGES.items() if judge not in (_judge_gc, _judge_sqlite)},
    "ctypes.dlsym": _judge_native,
    "os.putenv": _judge_sandboxed_environment,
    "os.unsetenv": _judge_sandboxed_environment,
}


def _process_hook(event: str, args: tuple[Any, ...]) -> None:
    lease = _current.get()
    if lease is None:
        lease = _process_lease[0]
    if not lease:
        return
    judge = _PROCESS_JUDGES.get(event)
    if judge is not None:
        _judge(judge, lease, event, args)


def guard_process() -> None:
    """Make every thread of this process answer to the guard of the call it runs (for a
    sandboxed worker process, which runs one call at a time and nothing else): see
    :func:`enter_process`. Also refuses what a worker's call must not do even to itself:
    changing the environment (the next call would inherit it) and resolving C functions
    that write through ctypes."""
    if _process_lease[0] is None and not install_hook(_process_hook):
        # The ordinary hook came first: it would judge only the call's own threads.
        raise RuntimeError("this process already guards calls one context at a time")
    _process_lease[0] = _UNGUARDED


def enter_process(guard: Guard) -> tuple[list[Any], contextvars.Token[list[Any] | None]]:
    """:func:`enter`, for every thread of the process (after :func:`guard_process`). The
    lease stays the process's once the call has left it: a thread the call left running
    is refused everything, and charged to no one."""
    if _process_lease[0] is None:
        raise RuntimeError("guard_process() has not been called in this process")
    state = enter(guard)
    state[0].append([])  # what code it left running attempts once it ended: `late`
    _process_lease[0] = state[0]
    return state


def late() -> str | None:
    """The first operation refused to code the last call guarded by :func:`enter_process`
    left running, once that call had ended; None if there was none."""
    lease = _process_lease[0]
    notes = lease[2] if lease and len(lease) > 2 else None
    return notes[0] if notes else None


def release_process() -> None:
    """Between a sandboxed worker's calls, once nothing of the last call runs on: the
    worker's own code is unguarded again."""
    _process_lease[0] = _UNGUARDED


def _wraps(original: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """:func:`functools.wraps` without ``__wrapped__``: a wrapper of gategraph's gives no
    way back to the function it wraps (``_thread.start_new_thread.__wrapped__`` would
    start a thread that carries no lease)."""

    def wrap(wrapper: Callable[..., Any]) -> Callable[..., Any]:
        functools.update_wrapper(wrapper, original, updated=())
        del wrapper.__wrapped__  # type: ignore[attr-defined]
        return wrapper

    return wrap


# -- os.mkfifo and os.mknod raise no audit event: these wrappers raise one. --------------


def _audited_mkfifo(original: Callable[..., None]) -> Callable[..., None]:
    @_wraps(original)
    def mkfifo(path: Any, mode: int = 0o666, *, dir_fd: int | None = None) -> None:
        sys.audit("os.mkfifo", path, mode, -1 if dir_fd is None else dir_fd)
        original(path, mode, dir_fd=dir_fd)

    return mkfifo


def _audited_mknod(original: Callable[..., None]) -> Callable[..., None]:
    @_wraps(original)
    def mknod(path: Any, mode: int = 0o600, device: int = 0, *, dir_fd: int | None = None) -> None:
        sys.audit("os.mknod", path, mode, device, -1 if dir_fd is None else dir_fd)
        original(path, mode, device, dir_fd=dir_fd)

    return mknod


# -- a SQLite connection made under a lease attaches no database outside scratch ----------
# `ATTACH DATABASE` and `VACUUM INTO` (which attaches the file it writes) create files in C,
# and the connection's own audit event comes before it can take an authorizer: the
# functions that connect are wrapped to give it one.


_SQLITE_URI: Final[contextvars.ContextVar[bool | None]] = contextvars.ContextVar(
    "gategraph_sqlite_uri", default=None
)
"""Whether the `sqlite3.connect` being judged was passed ``uri=True`` (None: not known,
when it was reached by a reference taken before the guard wrapped it)."""


def _authorizing_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    @_wraps(original)
    def connect(*args: Any, **kwargs: Any) -> Any:
        # `uri` is connect's eighth parameter: the audit event does not carry it.
        token = _SQLITE_URI.set(bool(kwargs.get("uri", args[7] if len(args) > 7 else False)))
        try:
            connection = original(*args, **kwargs)
        finally:
            _SQLITE_URI.reset(token)
        lease = _current.get()
        if lease:
            connection.set_authorizer(functools.partial(_sqlite_authorizer, lease))
        return connection

    return connect


def _wrap_sqlite_connect() -> None:
    import sqlite3
    import sqlite3.dbapi2

    wrapped = _authorizing_connect(sqlite3.dbapi2.connect)
    for module in (sqlite3, sqlite3.dbapi2):
        setattr(module, "connect", wrapped)  # noqa: B010 - typeshed has no dbapi2.connect


# -- threads a guarded call starts carry its lease ---------------------------------------------
# A new thread starts in an empty context: without this, a thread the call starts itself
# (threading.Thread, _thread.start_new_thread, an executor's worker) would run unguarded.
# Python 3.14 can pass the context on by itself (`sys.flags.thread_inherit_context`);
# 3.11 to 3.13 raise no event a hook could act on, so the functions that start threads
# are wrapped. Only the lease is passed on, not the whole context: what a thread sees of
# anything else stays as Python has it.


def _carried(lease: list[Any], function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    # The thread's own context: it ends with the thread, nothing to reset.
    _current.set(lease)
    return function(*args, **kwargs)


def _leasing_start(original: Callable[..., Any]) -> Callable[..., Any]:
    @_wraps(original)
    def start(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        lease = _current.get()
        if lease:  # not for unguarded code, nor gategraph's housekeeping (`unguarded()`)
            function = functools.partial(_carried, lease, function)
        return original(function, *args, **kwargs)

    return start


def _as_submitted(
    lease: list[Any] | None, function: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> Any:
    # A pool's thread runs one submitter's work after another's, in its own context.
    token = _current.set(lease)
    try:
        return function(*args, **kwargs)
    finally:
        _current.reset(token)


def _leasing_submit(original: Callable[..., Any]) -> Callable[..., Any]:
    # Work handed to a ThreadPoolExecutor (loop.run_in_executor's default executor is
    # one) runs under the lease of whoever submitted it, whichever thread of the pool
    # takes it: one started before the call included, and one a call started (whose own
    # context carries that call's lease) running an unguarded submitter's work.
    @_wraps(original)
    def submit(self: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return original(self, functools.partial(_as_submitted, _current.get(), fn), *args, **kwargs)

    return submit


def _wrap_thread_starts() -> None:
    import _thread
    import concurrent.futures.thread

    for module in (_thread, threading):
        # threading keeps its own reference to the function Thread.start calls.
        for name in (
            "start_new_thread",
            "start_new",
            "start_joinable_thread",
            "_start_new_thread",
            "_start_joinable_thread",
        ):
            original = module.__dict__.get(name)
            if original is not None:
                setattr(module, name, _leasing_start(original))
    pool = concurrent.futures.thread.ThreadPoolExecutor
    pool.submit = _leasing_submit(pool.submit)  # type: ignore[method-assign]


def install_hook(hook: Callable[[str, tuple[Any, ...]], None] | None = None) -> bool:
    """Install the audit hook once per process (hooks cannot be removed); True if this
    call installed it. ``hook`` is for :func:`guard_process` only.

    It also wraps ``os.mkfifo`` and ``os.mknod``, which raise no audit event of their own,
    so that the hook sees them, and the functions that start threads (and
    ``ThreadPoolExecutor.submit``), so that a thread or pool started during a call works
    under the call's lease; a reference taken before (``from os import mkfifo``) is not
    seen.
    """
    global _installed
    if _installed:
        return False
    with _install_lock:
        installing = not _installed  # another thread may have installed it meanwhile
        if installing:
            for name, wrap in (("mkfifo", _audited_mkfifo), ("mknod", _audited_mknod)):
                original = getattr(os, name, None)
                if original is not None:
                    setattr(os, name, wrap(original))
            _wrap_thread_starts()
            if hook is None:  # in a sandboxed worker, its read-only mounts refuse them
                _wrap_sqlite_connect()
            sys.addaudithook(hook or _hook)
            _installed = True
    return installing


def own_slot() -> None:
    """Make the current task ready to run guarded calls (engine workers call this once).

    A call takes a lease of its own in :func:`enter`; nothing is kept per worker, so code
    a call leaves behind can never act under the next call's guard.
    """
    if not _installed:
        install_hook()


def enter(guard: Guard) -> tuple[list[Any], contextvars.Token[list[Any] | None]]:
    """Start applying ``guard`` in this context; pass the result to :func:`leave`."""
    if not _installed:
        install_hook()
    lease = [guard, True]
    return lease, _current.set(lease)


def leave(state: tuple[list[Any], contextvars.Token[list[Any] | None]]) -> None:
    """Stop applying the guard :func:`enter` applied, here and in every context copied
    from this one meanwhile (what runs there later is refused and charged to no one)."""
    lease, token = state
    lease[1] = False
    _current.reset(token)


@contextmanager
def guarded(guard: Guard) -> Iterator[Guard]:
    """Apply ``guard`` to everything run in this context until the block exits."""
    state = enter(guard)
    try:
        yield guard
    finally:
        leave(state)


def unguarded() -> contextlib.AbstractContextManager[None]:
    """Lift the guard for runtime housekeeping (creating or removing scratch space).

    gategraph's own code only: called under a call's lease (while the call runs, or in code
    it left running) from code outside gategraph's package, it is refused like a write.
    """
    lease = _current.get()
    if lease and not _is_own(sys._getframe(1).f_globals):
        refuse(lease, "lifting the guard (unguarded() is gategraph's own)")
    return _lifted()


def _is_own(namespace: dict[str, Any]) -> bool:
    """Whether code running in ``namespace`` is gategraph's: the globals of one of its
    loaded modules, whatever file name the code was compiled with and wherever gategraph
    is installed. (A file name is forged with ``compile``, a module's name by the globals
    handed to ``exec``; a module's own dictionary is only had by reaching into it.)"""
    name = namespace.get("__name__")
    if type(name) is not str or not name.startswith("gategraph."):
        return False
    module = sys.modules.get(name)
    return module is not None and getattr(module, "__dict__", None) is namespace


@contextmanager
def _lifted() -> Iterator[None]:
    token = _current.set(_UNGUARDED)
    try:
        yield
    finally:
        _current.reset(token)


def run_guarded(guard: Guard, func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call ``func(**kwargs)`` under ``guard`` (for worker threads).

    A thread runs in a copy of its caller's context, so it normally holds the call's
    lease already; it then keeps it, and a thread abandoned at a timeout is refused
    everything once the call has ended. Called from elsewhere, it takes a lease of its own.
    """
    lease = _current.get()
    if lease and lease[0] is guard and lease[1]:
        return func(**kwargs)
    token = _current.set([guard, True])
    try:
        return func(**kwargs)
    finally:
        _current.reset(token)
