"""The resources a plan changes, their sandboxes, and Apply (seed 000; DESIGN "Resources").

Execute works on a sandbox: a private copy of a resource that work nodes change at will.
Its :class:`Changeset` (every file added, modified or deleted, with content hashes) is what
validations judge. Apply commits that changeset to the real resource atomically and
crash-safely, or not at all. It is the point of no return and happens at most once per plan.

A directory resource applies through a journal kept inside the resource, on its own file
system, so every move is a same-file-system ``os.replace``::

    <root>/.gategraph-journal/
        lock                     flock: one apply or recovery at a time, across processes
        applied/<plan_id>        marker: the plan's apply committed
        <plan_id>/journal.json   the ops and the state: prepared, applying, committed
        <plan_id>/staged/<n>     the new content of op n, durable before ``prepared``
        <plan_id>/backup/<n>     what op n replaced or deleted, until the apply commits

``prepared`` means nothing in the tree was touched: recovery drops the journal. ``applying``
is the point of no return: recovery rolls every op forward. ``committed`` only needs the
marker and the clean-up. The journal folder is never copied into a sandbox nor diffed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path, PurePath
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Protocol, runtime_checkable

import msgspec
from gategraph.runtime._base._exceptions import (
    ApplyConflictError,
    ApplyTwiceError,
    ConfigError,
    RuntimeFault,
)
from gategraph.runtime._base._ids import PLAN_ID_PATTERN
from gategraph.runtime._base._kernel import gone, keep_out, let_in_later

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

__all__ = [
    "ApplyReport",
    "Change",
    "Changeset",
    "DirectoryResource",
    "DirectorySandbox",
    "MemoryResource",
    "MemorySandbox",
    "Resource",
    "Sandbox",
]

JOURNAL: Final = ".gategraph-journal"
"""The folder, in a directory resource's root, of its apply journal (and its lock)."""
_JOURNAL_WAIT: Final = 60.0
"""Seconds an apply waits for the journal's lock before it gives up, changing nothing."""
_APPLIED: Final = "applied"
_LOCK: Final = "lock"
_CHUNK: Final = 1 << 20
# A symbolic link's digest covers its target text, prefixed so that a link and a file
# whose content is that text never hash alike.
_LINK_PREFIX: Final = b"symlink\0"
_NOFOLLOW: Final[int] = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY_FLAG: Final[int] = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC: Final[int] = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS: Final = os.O_RDONLY | _DIRECTORY_FLAG | _CLOEXEC
_PLAN_ID: Final = re.compile(PLAN_ID_PATTERN)

# What a path below a root is, besides the sha256 of a file or link (never a hex digest).
_FOLDER: Final = "<folder>"
_BLOCKED: Final = "<blocked>"  # an ancestor is a file or a symbolic link
_SPECIAL: Final = "<special>"  # a FIFO, socket or device: not content

ChangeKind = Literal["added", "modified", "deleted"]

_crash_point: Callable[[str, int], None] | None = None
"""Test-only hook, called with ``(phase, index)`` at each step of a directory apply or
recovery, so a test can kill the process there. Phases: ``staging`` (before op n's content is
staged), ``prepared``, ``applying`` (before op n), ``backup`` (op n's old file moved away,
its new one not yet in place), ``committed``, ``marked`` (marker written, journal not yet
removed)."""


def _crash(phase: str, index: int = 0) -> None:
    hook = _crash_point
    if hook is not None:
        hook(phase, index)


# --- errors ---------------------------------------------------------------------------


# --- records --------------------------------------------------------------------------


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """One file added, modified or deleted in a sandbox."""

    path: str
    """The file's path, relative to the resource root, with ``/`` separators."""
    kind: ChangeKind
    """``added``, ``modified`` or ``deleted``."""
    size: int
    """The size of the new content in bytes (0 for a deletion)."""
    sha256: str | None
    """The sha256 of the new content; ``None`` for a deletion."""
    base_sha256: str | None
    """The sha256 of the content the sandbox started from; ``None`` for an addition."""


class Changeset(msgspec.Struct, frozen=True, kw_only=True):
    """Every change of one sandbox against the snapshot it started from, by path."""

    resource: str
    """The resource the sandbox belongs to."""
    changes: tuple[Change, ...] = ()
    """The changes, sorted by path."""

    @property
    def empty(self) -> bool:
        """Whether nothing changed."""
        return not self.changes

    def summary(self) -> str:
        """Count the changes by kind: ``"2 added, 1 modified, 0 deleted"``."""
        counts = dict.fromkeys(("added", "modified", "deleted"), 0)
        for change in self.changes:
            counts[change.kind] += 1
        return ", ".join(f"{count} {kind}" for kind, count in counts.items())


class ApplyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What an apply, or the recovery of an interrupted one, did."""

    resource: str
    """The resource applied to."""
    plan_id: str
    """The plan applied."""
    changes: int
    """How many changes were applied (0 when a recovery found nothing was touched)."""
    recovered: bool = False
    """Whether :meth:`Resource.recover` finished (or dropped) an interrupted apply."""


# --- protocols ------------------------------------------------------------------------


@runtime_checkable
class Sandbox(Protocol):
    """What work nodes change during Execute: a private copy of one resource."""

    @property
    def view(self) -> Any:
        """The copy: a folder ``Path``, or a ``dict[str, str]`` of files that may be mutated."""
        ...

    def changeset(self) -> Changeset:
        """Diff the sandbox against the snapshot it started from."""
        ...

    def discard(self) -> None:
        """Throw the sandbox away."""
        ...


@runtime_checkable
class Resource(Protocol):
    """Something a plan changes: sandboxes for Execute, an atomic at-most-once Apply.

    The methods are synchronous and thread-safe; async callers run them in a worker thread.
    """

    name: str
    """The resource's name in the plan graph."""
    kind: str
    """``directory``, ``memory``, or a kind of your own."""

    def open_sandbox(self, folder: Path) -> Sandbox:
        """Copy the resource into a sandbox; ``folder`` is a private, empty work folder."""
        ...

    def reopen_sandbox(self, folder: Path) -> Sandbox | None:
        """The sandbox :meth:`open_sandbox` made in ``folder``, with the work done in it
        since; None when it is gone (never opened, discarded, or lost with its process).

        A resumed plan continues on it.
        """
        ...

    def apply(self, sandbox: Sandbox, changeset: Changeset, *, plan_id: str) -> ApplyReport:
        """Commit ``changeset`` (taken from ``sandbox``) to the real resource, all or nothing.

        Raises :class:`ApplyConflictError` (changing nothing) when it cannot, and
        :class:`ApplyTwiceError` when the plan was applied already.
        """
        ...

    def recover(self, *, plan_id: str) -> ApplyReport | None:
        """Finish (or drop) an apply of ``plan_id`` interrupted by a crash; ``None`` if none was."""
        ...

    def applied(self, plan_id: str) -> bool:
        """Whether the plan's apply passed its point of no return already."""
        ...


# --- digests and safe file-system walking --------------------------------------------


class _Digest(NamedTuple):
    sha256: str
    size: int


def _link_digest(target: str) -> _Digest:
    data = os.fsencode(target)
    return _Digest(hashlib.sha256(_LINK_PREFIX + data).hexdigest(), len(data))


def _text_digest(text: str) -> _Digest:
    data = text.encode("utf-8", "surrogatepass")
    return _Digest(hashlib.sha256(data).hexdigest(), len(data))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _digest_fd(fd: int, copy_to: int | None = None) -> _Digest:
    """Hash what ``fd`` reads, writing it to ``copy_to`` on the way (one read of the source)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
        size += len(chunk)
        if copy_to is not None:
            _write_all(copy_to, chunk)
    return _Digest(digest.hexdigest(), size)


_FICLONE: Final = 0x40049409
"""Linux's ioctl that makes one file share another's blocks (``_IOW(0x94, 9, int)``)."""
_NEVER_CLONES: Final = frozenset({errno.EOPNOTSUPP, errno.ENOTTY, errno.ENOSYS, errno.EXDEV})
"""What a file system says when it cannot share blocks at all (ext4, tmpfs), or not between
these two (two file systems). Any other error (btrfs's EINVAL for a file that must not be
copied on write, say) is that file's: it is copied, and the next file is cloned."""
_unclonable: set[tuple[int, int]] = set()
"""Pairs of devices (source, target) found unable to share blocks: not asked again."""


def _clone(source: int, target: int) -> bool:
    """Make the empty file ``target`` share ``source``'s blocks (a reflink, on btrfs, XFS,
    bcachefs, ...): a copy that takes no disk until one of the two changes. False where the
    file system cannot (ext4, tmpfs, two file systems), remembered for that pair of devices
    so a tree's other files do not ask again."""
    if sys.platform != "linux":
        return False
    devices = (os.fstat(source).st_dev, os.fstat(target).st_dev)
    if devices in _unclonable:
        return False
    try:
        fcntl.ioctl(target, _FICLONE, source)
    except OSError as exc:
        if exc.errno in _NEVER_CLONES:
            _unclonable.add(devices)
        return False
    return True


def _copy_digest(fd: int, out: int) -> _Digest:
    """Copy what ``fd`` reads, from its start, into ``out`` (a new, empty file of the
    caller's own, open for reading and writing), sharing its blocks where the file system
    can; the digest of what the copy holds, even if the source changes meanwhile."""
    if _clone(fd, out):
        # The copy is read, not the source: a clone is the source at one instant, and a
        # write through a memory map changes the source without a trace in its times.
        return _digest_fd(out)
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(out, 0)  # a clone that failed part way may have left some behind
    return _digest_fd(fd, out)


def _file_digest(path: str) -> _Digest:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        return _digest_fd(fd)
    finally:
        os.close(fd)


def _relative(path: str, root: str) -> str:
    return PurePath(os.path.relpath(path, root)).as_posix()


_RULES_LIMIT: Final = 1 << 20
"""The most of a ``.gitignore`` file read (a larger one is not a list of patterns)."""


class Exclusion:
    """What a directory resource leaves out of its sandboxes, snapshots and changesets:
    the paths its ``exclude`` patterns match, and with ``gitignore`` (the default) every
    ``.git`` and what the folder's ``.gitignore`` files (and ``.git/info/exclude``) ignore.
    Patterns are ``.gitignore``'s (``*.log``, ``build/``, ``/top-only``, ``!keep.log``).

    A file git tracks is never left out by ``.gitignore`` (one added before the rule, or
    with ``git add -f``): where the folder holds a ``.git`` and ``git`` is installed, its
    index says which files those are. Lines git would skip (a lone ``!``) are skipped.

    The ``.gitignore`` files are read from the real folder as a sandbox is copied, and the
    rules are then fixed for that sandbox (kept beside it, for a plan resumed after a
    crash): a plan that edits ``.gitignore`` changes what is applied of it, never what is
    tracked. A path left out is neither copied, nor snapshotted, nor reported as a change,
    so Apply never touches it in the real folder."""

    __slots__ = (
        "_folders",
        "_reading",
        "_rules",
        "_specs",
        "_tracked",
        "_user",
        "gitignore",
        "patterns",
    )

    def __init__(
        self,
        patterns: Iterable[str] = (),
        *,
        gitignore: bool = True,
        rules: Mapping[str, list[str]] | None = None,
        tracked: Iterable[str] | None = None,
    ) -> None:
        from pathspec import GitIgnoreSpec

        self.patterns = tuple(patterns)
        """The resource's own ``exclude`` patterns."""
        self.gitignore = gitignore
        """Whether ``.git`` and what ``.gitignore`` files ignore are left out too."""
        self._user = GitIgnoreSpec.from_lines(self.patterns) if self.patterns else None
        self._reading = rules is None
        self._rules: dict[str, list[str]] = {k: list(v) for k, v in (rules or {}).items()}
        self._specs = {k: GitIgnoreSpec.from_lines(v) for k, v in self._rules.items()}
        self._tracked: frozenset[str] | None = None
        self._folders: frozenset[str] = frozenset()
        self._track(tracked)

    def _track(self, tracked: Iterable[str] | None) -> None:
        """Keep the files git tracks (and the folders holding them) in: None for none."""
        if tracked is None:
            return
        self._tracked = frozenset(tracked)
        self._folders = frozenset(
            path.rsplit("/", depth)[0]
            for path in self._tracked
            for depth in range(1, path.count("/") + 1)
        )

    def fixed(self) -> Exclusion:
        """A copy whose rules are the ones read so far, never read again."""
        return Exclusion(
            self.patterns, gitignore=self.gitignore, rules=self._rules, tracked=self._tracked
        )

    def enter(self, folder: str, prefix: str) -> None:
        """Read the rules of the folder ``folder`` (``prefix``: its path below the root,
        ``""`` or ending in ``/``), unless they are fixed."""
        if not (self._reading and self.gitignore):
            return
        lines = _rule_lines(os.path.join(folder, ".gitignore"))
        if not prefix:
            # Lowest first: in one list of patterns, the last that matches decides.
            lines = _rule_lines(os.path.join(folder, ".git", "info", "exclude")) + lines
            if os.path.lexists(os.path.join(folder, ".git")):
                self._track(_git_tracked(folder))
        if lines:
            from pathspec import GitIgnoreSpec

            self._rules[prefix] = lines
            self._specs[prefix] = GitIgnoreSpec.from_lines(lines)

    def excludes(self, rel: str, folder: bool) -> bool:
        """Whether the path ``rel`` (POSIX, below the root) is left out; ``folder`` says it
        is a folder (``build/`` matches folders only; a link is never one)."""
        probe = rel + "/" if folder else rel
        if self._user is not None and self._user.match_file(probe):
            return True
        if not self.gitignore:
            return False
        parts = rel.split("/")
        if parts[-1] == ".git":
            return True
        if self._tracked is not None and rel in (self._folders if folder else self._tracked):
            return False
        # The deepest .gitignore with a pattern that matches decides, as in git.
        for depth in range(len(parts) - 1, -1, -1):
            prefix = "/".join(parts[:depth]) + "/" if depth else ""
            spec = self._specs.get(prefix)
            if spec is not None:
                found = spec.check_file(probe[len(prefix) :]).include
                if found is not None:
                    return bool(found)
        return False

    def encode(self) -> bytes:
        """The exclusion, as kept beside a sandbox (:meth:`decode` reads it back, fixed)."""
        return msgspec.json.encode(
            {
                "exclude": list(self.patterns),
                "gitignore": self.gitignore,
                "rules": self._rules,
                "tracked": None if self._tracked is None else sorted(self._tracked),
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Exclusion:
        found = _EXCLUSION_DECODER.decode(data)
        return cls(
            found.exclude, gitignore=found.gitignore, rules=found.rules, tracked=found.tracked
        )

    def describe(self) -> str:
        """What is left out, in a few words (``gategraph check``)."""
        parts = [".git and what .gitignore ignores"] if self.gitignore else []
        if self.patterns:
            parts.append("exclude: " + ", ".join(self.patterns))
        return "leaves out " + "; ".join(parts) if parts else "leaves out nothing"


class _KeptExclusion(msgspec.Struct):
    exclude: list[str]
    gitignore: bool
    rules: dict[str, list[str]]
    tracked: list[str] | None = None


_EXCLUSION_DECODER: Final = msgspec.json.Decoder(_KeptExclusion)


def _rule_lines(path: str) -> list[str]:
    """The lines of a rules file, or none: missing, a link (never followed), not a file,
    or unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = os.read(fd, _RULES_LIMIT)
    except OSError:
        return []
    finally:
        os.close(fd)
    from pathspec import GitIgnoreSpec

    lines = []
    for line in data.decode("utf-8", "replace").removeprefix("\ufeff").splitlines():
        try:
            GitIgnoreSpec.from_lines([line])
        except Exception:  # pathspec refuses what git skips (a lone `!`): skipped, as git does
            continue
        lines.append(line)
    return lines


_GIT_TIMEOUT: Final = 60.0


def _git_tracked(root: str) -> list[str] | None:
    """The files git tracks in the repository at ``root`` (its index, as ``git ls-files``
    reads it); None where git is missing or says no (not a repository it trusts)."""
    import subprocess

    git = shutil.which("git")
    if git is None:
        return None
    # No fsmonitor: a repository's configuration could name a program to run for it.
    command = [git, "-c", "core.fsmonitor=false", "-C", root, "ls-files", "-z", "--cached"]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return [os.fsdecode(path) for path in done.stdout.split(b"\0") if path]


def _walk(
    root: str, exclusion: Exclusion | None = None
) -> Iterator[tuple[str, os.DirEntry[str], bool]]:
    """Every file and symbolic link below ``root`` (its relative path, its entry, whether
    it is a link), never entering a link: what a sandbox holds, for a changeset and for a
    snapshot alike. The journal folder at the top is left out; so are FIFOs, sockets and
    devices, and what ``exclusion`` leaves out (a folder it leaves out is not entered)."""
    stack = [(root, "")]
    while stack:
        folder, prefix = stack.pop()
        if exclusion is not None:
            exclusion.enter(folder, prefix)
        with os.scandir(folder) as entries:
            for entry in entries:
                if not prefix and entry.name == JOURNAL:
                    continue
                rel = prefix + entry.name
                link = entry.is_symlink()
                is_folder = not link and entry.is_dir(follow_symlinks=False)
                if exclusion is not None and exclusion.excludes(rel, is_folder):
                    continue
                if link:
                    yield rel, entry, True
                elif is_folder:
                    stack.append((entry.path, rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    yield rel, entry, False


def _scan(root: str, exclusion: Exclusion | None = None) -> dict[str, _Digest]:
    """Digest every file and symbolic link below ``root`` (see :func:`_walk`)."""
    return {
        rel: _link_digest(os.readlink(entry.path)) if link else _file_digest(entry.path)
        for rel, entry, link in _walk(root, exclusion)
    }


def _diff(resource: str, base: Mapping[str, _Digest], now: Mapping[str, _Digest]) -> Changeset:
    changes: list[Change] = []
    for path in sorted(base.keys() | now.keys()):
        old, new = base.get(path), now.get(path)
        if old is None and new is not None:
            changes.append(
                Change(path=path, kind="added", size=new.size, sha256=new.sha256, base_sha256=None)
            )
        elif new is None and old is not None:
            changes.append(
                Change(path=path, kind="deleted", size=0, sha256=None, base_sha256=old.sha256)
            )
        elif old is not None and new is not None and old.sha256 != new.sha256:
            changes.append(
                Change(
                    path=path,
                    kind="modified",
                    size=new.size,
                    sha256=new.sha256,
                    base_sha256=old.sha256,
                )
            )
    return Changeset(resource=resource, changes=tuple(changes))


def _open_folder(
    root_fd: int, rel: str, *, create: bool = False, made: set[str] | None = None
) -> int | None:
    """Open the folder ``rel`` below ``root_fd`` without following any symbolic link.

    Returns ``None`` when it is missing (and not ``create``); raises ``NotADirectoryError``
    when a part of it is a file or a symbolic link. Folders it creates are noted in ``made``
    by their parent, for a later fsync.
    """
    fd = os.dup(root_fd)
    done: list[str] = []
    keep = False
    try:
        for part in rel.split("/") if rel else ():
            try:
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    return None
                os.mkdir(part, dir_fd=fd)
                if made is not None:
                    made.add("/".join(done))
                child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    where = "/".join([*done, part])
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder", where) from None
                raise
            os.close(fd)
            fd = child
            done.append(part)
        keep = True
        return fd
    finally:
        if not keep:
            os.close(fd)


def _entry_state(parent_fd: int, name: str, copy_to: tuple[int, str] | None) -> str | None:
    """The sha256 of the file or link ``name`` (copied to ``copy_to`` on the way), or a marker."""
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        target = os.readlink(name, dir_fd=parent_fd)
        if copy_to is not None:
            os.symlink(target, copy_to[1], dir_fd=copy_to[0])
        return _link_digest(target).sha256
    if stat.S_ISDIR(info.st_mode):
        return _FOLDER
    if not stat.S_ISREG(info.st_mode):
        return _SPECIAL
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC, dir_fd=parent_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a link since the stat
            return _SPECIAL
        raise
    try:
        if copy_to is None:
            return _digest_fd(fd).sha256
        out = os.open(
            copy_to[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o600, dir_fd=copy_to[0]
        )
        try:
            digest = _digest_fd(fd, out)
            # Never set-user-ID or set-group-ID: a program the plan made would run with
            # the rights of whoever applied it (root, say) for anyone who starts it.
            os.fchmod(out, stat.S_IMODE(os.fstat(fd).st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
            os.utime(out, ns=(info.st_atime_ns, info.st_mtime_ns))
            os.fsync(out)
        finally:
            os.close(out)
        return digest.sha256
    finally:
        os.close(fd)


def _probe(root: str, rel: str, copy_to: tuple[int, str] | None = None) -> tuple[str | None, str]:
    """What ``rel`` is below ``root``, never following a symbolic link.

    Returns ``(state, blocker)``: state is the sha256 of a file or link, ``None`` when
    absent, or ``_FOLDER``, ``_SPECIAL``, or ``_BLOCKED`` with ``blocker`` the ancestor
    that is a file or link.
    """
    parent_rel, _, name = rel.rpartition("/")
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        parent = _open_folder(root_fd, parent_rel)
    except NotADirectoryError as exc:
        return _BLOCKED, str(exc.filename)
    finally:
        os.close(root_fd)
    if parent is None:
        return None, ""
    try:
        return _entry_state(parent, name, copy_to), ""
    finally:
        os.close(parent)


def _list_folder(root: str, rel: str) -> list[tuple[str, bool]] | None:
    """``(name, is_folder)`` of each entry of the real folder ``rel``; ``None`` if it is not one."""
    root_fd = os.open(root, _DIR_FLAGS)
    try:
        fd = _open_folder(root_fd, rel)
    except NotADirectoryError:
        return None
    finally:
        os.close(root_fd)
    if fd is None:
        return None
    try:
        with os.scandir(fd) as entries:
            return [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in entries]
    finally:
        os.close(fd)


def _fsync_folder(path: str | os.PathLike[str]) -> None:
    if sys.platform == "win32":  # pragma: no cover - folders cannot be opened there
        return
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_folder(path: Path) -> None:
    """Create ``path`` (not following a link in its place) and make its entry durable."""
    try:
        path.mkdir()
    except FileExistsError:
        if not stat.S_ISDIR(path.lstat().st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(path)) from None
        return
    _fsync_folder(path.parent)


def _write_durably(path: Path, data: bytes) -> None:
    """Write to a temporary file, fsync it, ``os.replace`` it into place, fsync the folder."""
    temporary = path.with_name(f".{path.name}.tmp")
    # Never through a link: gategraph makes none in its journal, and one left there (by
    # code that changed the folder in place) would lead the write anywhere.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    _fsync_folder(path.parent)


# --- checks shared by both resources ---------------------------------------------------


def _check_plan_id(plan_id: str) -> None:
    if (
        not isinstance(plan_id, str)
        or not _PLAN_ID.fullmatch(plan_id)
        or plan_id.lower() in {_APPLIED, _LOCK}
    ):
        raise ConfigError.at(
            "plan_id",
            f"{plan_id!r} cannot name a journal folder: use letters, digits, '.', '_' and '-' "
            f"(a ULID fits), and not {_APPLIED!r} or {_LOCK!r}",
        )


def _path_problem(path: object, *, strict: bool) -> str | None:
    if not isinstance(path, str) or not path:
        return "is empty or not text"
    if "\0" in path:
        return "contains a NUL character"
    if path.startswith("/"):
        return "is absolute"
    parts = path.split("/")
    if ".." in parts:
        return "escapes the root"
    if strict and any(part in {"", "."} for part in parts):
        return "is not a normalised relative path"
    if strict and parts[0] == JOURNAL:
        return "is inside the journal folder"
    if strict:
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid UTF-8 (the journal cannot record it)"
    return None


def _check_changeset(changeset: Changeset, resource: str, plan_id: str, *, folders: bool) -> None:
    """Refuse a changeset that is not a well-formed changeset of ``resource``."""

    def refuse(message: str, paths: Iterable[str] = ()) -> ApplyConflictError:
        return ApplyConflictError(
            f"resource {resource!r}: {message}", resource=resource, plan_id=plan_id, paths=paths
        )

    if changeset.resource != resource:
        raise refuse(f"the changeset belongs to resource {changeset.resource!r}")
    seen: set[str] = set()
    for change in changeset.changes:
        problem = _path_problem(change.path, strict=folders)
        if problem is not None:
            raise refuse(f"path {change.path!r} {problem}", [str(change.path)])
        if change.path in seen:
            raise refuse(f"path {change.path!r} appears twice in the changeset", [change.path])
        seen.add(change.path)
        expected = {"added": (True, False), "modified": (True, True), "deleted": (False, True)}
        if expected.get(change.kind) != (change.sha256 is not None, change.base_sha256 is not None):
            raise refuse(
                f"change of {change.path!r} is malformed (kind and hashes disagree)", [change.path]
            )
    if folders:
        written = {c.path for c in changeset.changes if c.kind != "deleted"}
        for path in written:
            parts = path.split("/")
            for i in range(1, len(parts)):
                ancestor = "/".join(parts[:i])
                if ancestor in written:
                    raise refuse(
                        f"{ancestor!r} cannot be both a file and the folder of {path!r}",
                        [ancestor, path],
                    )


# --- directory resource ---------------------------------------------------------------


class _Op(msgspec.Struct, frozen=True, array_like=True):
    path: str
    kind: ChangeKind
    staged: str | None  # the name under staged/; None for a deletion
    backup: str  # the name under backup/ the current file moves to


class _Journal(msgspec.Struct, frozen=True, kw_only=True):
    version: int = 1
    plan_id: str
    resource: str
    state: Literal["prepared", "applying", "committed"]
    ops: tuple[_Op, ...]
    """Deletions first, then additions and modifications; run in this order."""
    prune: tuple[str, ...] = ()
    """Folders the plan empties and the sandbox no longer has, deepest first: removed after
    the deletions, before anything is written."""


class _Marker(msgspec.Struct, frozen=True, kw_only=True):
    plan_id: str
    resource: str
    changes: int


_ROOT_LOCKS: dict[str, threading.Lock] = {}
_ROOT_LOCKS_GUARD = threading.Lock()


def _root_lock(root: Path) -> threading.Lock:
    # One lock per real folder, shared by every DirectoryResource of that folder.
    key = os.path.realpath(root)
    with _ROOT_LOCKS_GUARD:
        return _ROOT_LOCKS.setdefault(key, threading.Lock())


class DirectorySandbox:
    """A private copy of a directory resource; work nodes change the folder ``view``."""

    __slots__ = ("_base", "_discarded", "_owner", "exclusion", "resource", "root")

    def __init__(
        self,
        owner: DirectoryResource,
        root: Path,
        base: dict[str, _Digest],
        exclusion: Exclusion | None = None,
    ) -> None:
        self._owner = owner
        self._base = base
        self.exclusion = exclusion
        """What the copy leaves out (fixed when it was made): its changesets and
        snapshots leave out the same."""
        self._discarded = False
        self.resource = owner.name
        """The name of the resource copied."""
        self.root = root
        """The copy's root folder."""

    @property
    def view(self) -> Path:
        """The copy's root folder."""
        return self.root

    def changeset(self) -> Changeset:
        """Diff the copy against the resource as it was copied (files and links, not folders)."""
        if self._discarded:
            raise RuntimeFault(f"the sandbox of resource {self.resource!r} was discarded")
        return _diff(self.resource, self._base, _scan(os.fspath(self.root), self.exclusion))

    def discard(self) -> None:
        """Remove the copy (the whole work folder) and its snapshot."""
        self._discarded = True
        # The snapshot first: a folder without one is never reopened, even half removed.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_base_path(self.root))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_exclusion_path(self.root))
        shutil.rmtree(self.root, ignore_errors=True)


def _base_path(root: Path) -> Path:
    """Where a sandbox's base snapshot is kept: beside the copy, not in it (the copy is
    the work's; a snapshot inside would show up in its changeset)."""
    return root.with_name(root.name + ".base")


def _exclusion_path(root: Path) -> Path:
    """Where a sandbox's :class:`Exclusion` is kept (beside the copy, as its snapshot)."""
    return root.with_name(root.name + ".exclude")


_BASE_DECODER: Final = msgspec.json.Decoder(dict[str, _Digest])


class DirectoryResource:
    """A folder on disk. Sandboxes are copies; Apply is journaled and crash-safe.

    Symbolic links are content: they are copied, diffed and applied as links, and never
    followed, so no change can reach outside the root. Folders are not tracked on their own:
    an empty folder in a sandbox is not applied, and a folder a plan empties (and the
    sandbox no longer has) is removed.
    """

    def __init__(
        self,
        name: str,
        root: str | os.PathLike[str],
        *,
        exclude: Iterable[str] = (),
        gitignore: bool = True,
    ) -> None:
        self.name = name
        """The resource's name in the plan graph."""
        self.kind = "directory"
        """Always ``directory``."""
        self.root = Path(os.path.abspath(root))
        """The real folder."""
        self.exclusion = Exclusion(exclude, gitignore=gitignore)
        """What its sandboxes leave out (:class:`Exclusion`): ``exclude``'s patterns, and
        with ``gitignore`` every ``.git`` and what the folder's ``.gitignore`` files
        ignore."""
        self._journal = self.root / JOURNAL
        self._lock = _root_lock(self.root)
        # No sandboxed call may lock the journal (an apply would wait for it): hidden from
        # workers while it exists, as long as this resource does.
        keep_out(self._journal)
        weakref.finalize(self, let_in_later, self._journal)

    def __repr__(self) -> str:
        return f"DirectoryResource({self.name!r}, {os.fspath(self.root)!r})"

    # -- sandboxes

    def open_sandbox(self, folder: str | os.PathLike[str]) -> DirectorySandbox:
        """Copy the tree into ``folder`` (outside the root; created if missing, else empty).

        Each file is read once, hashed as it is copied, so the base snapshot is exactly what
        the sandbox starts from. Links are copied as links; the journal folder is left out,
        and so is what :attr:`exclusion` leaves out (with the rules it read then, kept for
        the sandbox's changesets).
        """
        target = self._empty_sandbox_folder(folder)
        source = os.fspath(self.root)
        base: dict[str, _Digest] = {}
        reading = Exclusion(self.exclusion.patterns, gitignore=self.exclusion.gitignore)

        def copy(src: str, dst: str) -> str:
            if not stat.S_ISREG(os.lstat(src).st_mode):
                return dst  # FIFOs, sockets and devices are not content
            fd = os.open(src, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
            try:
                out = os.open(dst, os.O_RDWR | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o600)
                try:
                    base[_relative(src, source)] = _copy_digest(fd, out)
                finally:
                    os.close(out)
            finally:
                os.close(fd)
            shutil.copystat(src, dst)
            return dst

        def ignore(folder: str, names: list[str]) -> set[str]:
            prefix = "" if folder == source else _relative(folder, source) + "/"
            reading.enter(folder, prefix)
            left = {JOURNAL} if not prefix else set()
            for name in names:
                path = os.path.join(folder, name)
                is_folder = stat.S_ISDIR(os.lstat(path).st_mode)
                if reading.excludes(prefix + name, is_folder):
                    left.add(name)
            return left

        try:
            shutil.copytree(
                source, target, symlinks=True, ignore=ignore, copy_function=copy, dirs_exist_ok=True
            )
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        exclusion = reading.fixed()
        # Links are copied by copytree itself: take their digests from the copy.
        for rel, digest in _scan(os.fspath(target), exclusion).items():
            if rel not in base:
                base[rel] = digest
        _write_durably(_exclusion_path(target), exclusion.encode())
        # Written last, durably: a snapshot on disk means the copy beside it is complete, so
        # a plan resumed after a crash can reopen it (and never one half copied).
        _write_durably(_base_path(target), msgspec.json.encode(base))
        return DirectorySandbox(self, target, base, exclusion)

    def _empty_sandbox_folder(self, folder: str | os.PathLike[str]) -> Path:
        """``folder``, made if missing, once it is known to be empty and outside the root,
        with no snapshot of an earlier sandbox beside it."""
        target = Path(os.path.abspath(folder))
        real_root = os.path.realpath(self.root)
        real_target = os.path.realpath(target)
        if os.path.commonpath([real_root, real_target]) == real_root:
            raise ValueError(
                f"the sandbox folder {os.fspath(target)!r} is inside resource {self.name!r}"
            )
        if not self.root.is_dir():
            raise NotADirectoryError(
                errno.ENOTDIR, f"resource {self.name!r} is not a folder", os.fspath(self.root)
            )
        target.mkdir(parents=True, exist_ok=True)
        if any(target.iterdir()):
            raise ValueError(f"the sandbox folder {os.fspath(target)!r} is not empty")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_base_path(target))
        return target

    def remake_sandbox(
        self,
        folder: str | os.PathLike[str],
        fill: Callable[[Path], None],
        base: Mapping[str, tuple[str, int]],
        exclusion: Exclusion,
    ) -> DirectorySandbox:
        """A sandbox made again in ``folder`` where the one a plan worked in is gone (the
        plan resumes on another host): ``fill`` writes into the empty folder what the
        sandbox held (a round's inputs, from the content store), ``base`` is what it had
        started from (path to sha256 and size, as its base snapshot) and ``exclusion`` what
        it left out. Its changesets are then the ones the lost sandbox would have given,
        and a plan resumed after a crash here reopens it as any other."""
        target = self._empty_sandbox_folder(folder)
        try:
            fill(target)
            self._modes_onto(target)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        fixed = exclusion.fixed()
        kept = {path: _Digest(*digest) for path, digest in base.items()}
        _write_durably(_exclusion_path(target), fixed.encode())
        # Last, as open_sandbox: a snapshot on disk means the folder beside it is complete.
        _write_durably(_base_path(target), msgspec.json.encode(kept))
        return DirectorySandbox(self, target, kept, fixed)

    def _modes_onto(self, target: Path) -> None:
        """Give each file made again in ``target`` the permissions of the real folder's
        file at its path (a store keeps contents, not modes): an executable stays one.
        A file the real folder does not have keeps the default."""
        for rel, entry, link in _walk(os.fspath(target)):
            if link:
                continue
            try:
                real = os.stat(self.root / rel, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(real.st_mode):
                os.chmod(entry.path, stat.S_IMODE(real.st_mode), follow_symlinks=False)

    def reopen_sandbox(self, folder: str | os.PathLike[str]) -> DirectorySandbox | None:
        """The sandbox :meth:`open_sandbox` made in ``folder``, as the work left it, or
        None if it was never completed or was discarded."""
        target = Path(os.path.abspath(folder))
        try:
            data = _base_path(target).read_bytes()
        except FileNotFoundError:
            return None
        if not target.is_dir():
            return None
        try:
            base = _BASE_DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise RuntimeFault(
                f"the sandbox snapshot {os.fspath(_base_path(target))!r} is damaged: {exc}"
            ) from None
        try:
            exclusion = Exclusion.decode(_exclusion_path(target).read_bytes())
        except FileNotFoundError:
            # A copy made before sandboxes left anything out: it left out nothing.
            exclusion = Exclusion(gitignore=False, rules={})
        except msgspec.DecodeError as exc:
            raise RuntimeFault(
                f"the sandbox's exclusions {os.fspath(_exclusion_path(target))!r} are "
                f"damaged: {exc}"
            ) from None
        return DirectorySandbox(self, target, base, exclusion)

    # -- apply

    def applied(self, plan_id: str) -> bool:
        """Whether the plan's apply passed its point of no return (``applying``) already.

        An apply that crashed after that point counts: :meth:`recover` finishes it.
        """
        _check_plan_id(plan_id)
        # The journal before the marker: a commit writes the marker, then removes the journal,
        # so this order never misses an apply that commits meanwhile.
        journal = self._read_journal(plan_id)
        if journal is not None and journal.state != "prepared":
            return True
        return os.path.lexists(self._journal / _APPLIED / plan_id)

    def release(self, *, plan_id: str) -> None:
        """Forget the plan's applied marker once the plan's own log records the apply.

        The marker keeps Apply at most once until then; afterwards the log does. When no
        other plan's apply is pending or marked, the journal folder goes too, so a finished
        plan leaves nothing in the user's folder.
        """
        _check_plan_id(plan_id)
        if not os.path.lexists(self._journal):
            return
        with self._locked():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._journal / _APPLIED / plan_id)
            with contextlib.suppress(OSError):  # not empty: another plan's marker
                os.rmdir(self._journal / _APPLIED)
            if {entry.name for entry in os.scandir(self._journal)} <= {_LOCK}:
                # Under the lock: waiters check the lock file is still there (`_locked`).
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._journal / _LOCK)
                with contextlib.suppress(OSError):
                    os.rmdir(self._journal)
                    gone(self._journal)  # made again, it is new to every sandboxed worker

    def apply(self, sandbox: Sandbox, changeset: Changeset, *, plan_id: str) -> ApplyReport:
        """Commit ``changeset`` from ``sandbox`` to the real folder: journal first, then rename.

        Refuses (:class:`ApplyConflictError`, nothing changed) when a path the changeset
        touches changed in the real folder since the sandbox was taken, when the sandbox no
        longer holds what the changeset says, or when an earlier apply of the plan did not
        finish; :class:`ApplyTwiceError` when the plan was applied already. An ``OSError``
        after the point of no return becomes a :class:`RuntimeFault`: :meth:`recover`
        finishes the apply.
        """
        _check_plan_id(plan_id)
        box = self._own(sandbox, plan_id)
        _check_changeset(changeset, self.name, plan_id, folders=True)
        plan_dir = self._journal / plan_id
        with self._locked():
            if self.applied(plan_id):
                raise ApplyTwiceError(resource=self.name, plan_id=plan_id)
            if os.path.lexists(plan_dir):
                raise ApplyConflictError(
                    f"resource {self.name!r}: an earlier apply of plan {plan_id!r} did not finish; "
                    f"`gategraph resume {plan_id}` (or recover(plan_id=...)) finishes it first",
                    resource=self.name,
                    plan_id=plan_id,
                )
            box_root = os.fspath(box.root)
            prune = self._prune(box_root, changeset)
            self._refuse_conflicts(changeset, prune, plan_id)
            try:
                journal = self._stage(box_root, changeset, prune, plan_id)
                _crash("prepared")
                # Checked again right before the point of no return: staging takes time.
                self._refuse_conflicts(changeset, prune, plan_id)
            except BaseException:
                shutil.rmtree(plan_dir, ignore_errors=True)
                raise
            try:
                # Invariant: from this write on, the apply is committed to; recovery rolls forward.
                journal = msgspec.structs.replace(journal, state="applying")
                _write_durably(plan_dir / "journal.json", msgspec.json.encode(journal))
                self._roll_forward(plan_dir, journal)
            except OSError as exc:
                raise self._stopped(plan_id, exc) from exc
        return ApplyReport(resource=self.name, plan_id=plan_id, changes=len(journal.ops))

    def recover(self, *, plan_id: str) -> ApplyReport | None:
        """Finish an apply of ``plan_id`` interrupted by a crash; ``None`` if there is none.

        ``prepared`` (or less): nothing was touched; the journal is dropped and the report
        says 0 changes. ``applying``: every op is redone idempotently, then committed.
        ``committed``: the marker is written and the journal removed. Calling it again is a
        no-op.
        """
        _check_plan_id(plan_id)
        plan_dir = self._journal / plan_id
        if not os.path.lexists(plan_dir):
            return None
        with self._locked():
            if not os.path.lexists(plan_dir):
                return None
            marker = self._journal / _APPLIED / plan_id
            if os.path.lexists(marker):  # committed; only the clean-up was left
                changes = self._read_marker(marker).changes
                self._remove(plan_dir)
            elif (journal := self._read_journal(plan_id)) is None or journal.state == "prepared":
                changes = 0  # nothing in the tree was touched
                self._remove(plan_dir)
            else:
                changes = len(journal.ops)
                try:
                    if journal.state == "applying":
                        self._roll_forward(plan_dir, journal)
                    else:
                        self._commit(plan_dir, journal)
                except OSError as exc:
                    raise self._stopped(plan_id, exc) from exc
        return ApplyReport(resource=self.name, plan_id=plan_id, changes=changes, recovered=True)

    # -- internals

    def _own(self, sandbox: Sandbox, plan_id: str) -> DirectorySandbox:
        if not isinstance(sandbox, DirectorySandbox):
            raise TypeError(
                f"resource {self.name!r} applies only its own DirectorySandbox, not {sandbox!r}"
            )
        if os.path.realpath(sandbox._owner.root) != os.path.realpath(self.root):
            raise ApplyConflictError(
                f"resource {self.name!r}: the sandbox is a copy of another resource ({sandbox.resource!r})",
                resource=self.name,
                plan_id=plan_id,
            )
        if sandbox._discarded:
            raise ApplyConflictError(
                f"resource {self.name!r}: the sandbox was discarded",
                resource=self.name,
                plan_id=plan_id,
            )
        return sandbox

    def _flock(self, fd: int) -> None:
        """Take the journal's lock, waiting at most :data:`_JOURNAL_WAIT` seconds: another
        gategraph applying into this folder holds it for moments only, and any process
        that can read the folder can take it (a read lock would block this forever)."""
        deadline = time.monotonic() + _JOURNAL_WAIT
        delay = 0.005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise ApplyConflictError(
                        f"resource {self.name!r}: its journal's lock "
                        f"({self._journal / _LOCK}) has been held by another process for "
                        f"{_JOURNAL_WAIT:.0f} s; gave up without changing the folder",
                        resource=self.name,
                    ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _open_lock(self) -> int:
        """The journal's lock file, never through a link (gategraph makes none there: one
        would lead its write anywhere)."""
        lock = self._journal / _LOCK
        try:
            return os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise RuntimeFault(
                f"resource {self.name!r}: its journal's lock ({os.fspath(lock)}) is a link, "
                "which gategraph never makes; remove it, then apply again"
            ) from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the per-folder thread lock and an flock on the journal's lock file."""
        with self._lock:
            while True:
                _make_folder(self._journal)
                fd = self._open_lock()
                if sys.platform == "win32":
                    break
                self._flock(fd)
                # `release` removes the journal folder, lock file and all, while holding the
                # lock: a waiter that then gets a lock on the unlinked file tries again.
                try:
                    if os.stat(self._journal / _LOCK).st_ino == os.fstat(fd).st_ino:
                        break
                except FileNotFoundError:
                    pass
                os.close(fd)
            try:
                yield
            finally:
                os.close(fd)  # releases the flock

    def _read_journal(self, plan_id: str) -> _Journal | None:
        try:
            data = (self._journal / plan_id / "journal.json").read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            return msgspec.json.decode(data, type=_Journal)
        except msgspec.DecodeError as exc:
            # journal.json is only ever replaced whole: this was not written by gategraph.
            raise RuntimeFault(
                f"resource {self.name!r}: the journal of plan {plan_id!r} is unreadable ({exc}); "
                f"inspect {os.fspath(self._journal / plan_id)!r} by hand"
            ) from exc

    def _read_marker(self, marker: Path) -> _Marker:
        try:
            return msgspec.json.decode(marker.read_bytes(), type=_Marker)
        except msgspec.DecodeError:
            return _Marker(plan_id=marker.name, resource=self.name, changes=0)

    def _stopped(self, plan_id: str, exc: OSError) -> RuntimeFault:
        return RuntimeFault(
            f"resource {self.name!r}: the apply of plan {plan_id!r} stopped after its point of no "
            f"return ({exc}); `gategraph resume {plan_id}` finishes it (from Python: "
            f"resume_plan, or this resource's recover(plan_id={plan_id!r}))"
        )

    def _prune(self, box_root: str, changeset: Changeset) -> tuple[str, ...]:
        """Folders the deletions empty and the sandbox no longer has, deepest first."""
        deleted = {c.path for c in changeset.changes if c.kind == "deleted"}
        candidates = {
            "/".join(p.split("/")[:i]) for p in deleted for i in range(1, p.count("/") + 1)
        }
        root = os.fspath(self.root)
        prune: set[str] = set()
        for folder in sorted(candidates, key=lambda p: (-p.count("/"), p)):
            if _probe(box_root, folder)[0] == _FOLDER:
                continue  # the sandbox keeps the folder
            entries = _list_folder(root, folder)
            if entries is None:
                continue
            if all(
                f"{folder}/{name}" in (prune if is_folder else deleted)
                for name, is_folder in entries
            ):
                prune.add(folder)
        return tuple(sorted(prune, key=lambda p: (-p.count("/"), p)))

    def _refuse_conflicts(self, changeset: Changeset, prune: tuple[str, ...], plan_id: str) -> None:
        """Refuse when a path the changeset touches changed in the real folder since the snapshot."""
        deleted = {c.path for c in changeset.changes if c.kind == "deleted"}
        root = os.fspath(self.root)
        conflicts: list[str] = []
        for change in changeset.changes:
            state, blocker = _probe(root, change.path)
            if state == change.base_sha256:
                continue
            if change.base_sha256 is None and (
                # An added file may go where the plan deletes a file (a/x where a was a file)
                # or removes a folder (a where a/x was).
                (state == _BLOCKED and blocker in deleted)
                or (state == _FOLDER and change.path in prune)
            ):
                continue
            conflicts.append(change.path)
        if conflicts:
            shown = ", ".join(conflicts[:5]) + (
                f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else ""
            )
            raise ApplyConflictError(
                f"resource {self.name!r}: {len(conflicts)} path(s) changed in the real folder since "
                f"the sandbox was taken: {shown}",
                resource=self.name,
                plan_id=plan_id,
                paths=conflicts,
            )

    def _stage(
        self, box_root: str, changeset: Changeset, prune: tuple[str, ...], plan_id: str
    ) -> _Journal:
        """Copy the new contents into the journal, fsynced, and write the ``prepared`` journal."""
        plan_dir = self._journal / plan_id
        for folder in (plan_dir, plan_dir / "staged", plan_dir / "backup"):
            _make_folder(folder)
        deletions = [c for c in changeset.changes if c.kind == "deleted"]
        writes = [c for c in changeset.changes if c.kind != "deleted"]
        ops: list[_Op] = []
        stale: list[str] = []
        for change in deletions:
            if _probe(box_root, change.path)[0] not in {None, _BLOCKED, _FOLDER}:
                stale.append(change.path)
            ops.append(_Op(change.path, change.kind, None, str(len(ops))))
        staged_fd = os.open(plan_dir / "staged", _DIR_FLAGS)
        try:
            for change in writes:
                name = str(len(ops))
                _crash("staging", len(ops))
                state, _ = _probe(box_root, change.path, copy_to=(staged_fd, name))
                if state != change.sha256:
                    stale.append(change.path)
                ops.append(_Op(change.path, change.kind, name, name))
            os.fsync(staged_fd)
        finally:
            os.close(staged_fd)
        if stale:
            raise ApplyConflictError(
                f"resource {self.name!r}: the sandbox no longer holds what the changeset says at "
                f"{', '.join(stale[:5])}; take a new changeset",
                resource=self.name,
                plan_id=plan_id,
                paths=stale,
            )
        journal = _Journal(
            plan_id=plan_id, resource=self.name, state="prepared", ops=tuple(ops), prune=prune
        )
        _write_durably(plan_dir / "journal.json", msgspec.json.encode(journal))
        return journal

    def _roll_forward(self, plan_dir: Path, journal: _Journal) -> None:
        """Run (or redo) every op of an ``applying`` journal, then commit.

        Each op is idempotent: a staged file still present means its op is not done; a
        deletion whose backup exists is done.
        """
        touched: set[str] = set()
        root_fd = os.open(self.root, _DIR_FLAGS)
        staged_fd = os.open(plan_dir / "staged", _DIR_FLAGS)
        backup_fd = os.open(plan_dir / "backup", _DIR_FLAGS)
        try:
            pruned = False
            for index, op in enumerate(journal.ops):
                if op.staged is not None and not pruned:
                    self._remove_folders(root_fd, journal.prune, touched)
                    pruned = True
                _crash("applying", index)
                self._redo(root_fd, staged_fd, backup_fd, index, op, touched)
            if not pruned:
                self._remove_folders(root_fd, journal.prune, touched)
            # Every rename durable before the journal says committed.
            for rel in sorted(touched):
                try:
                    fd = _open_folder(root_fd, rel)
                except NotADirectoryError:
                    continue  # a folder that became a file or link: its parent was fsynced
                if fd is not None:
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            os.fsync(staged_fd)
            os.fsync(backup_fd)
        finally:
            for fd in (root_fd, staged_fd, backup_fd):
                os.close(fd)
        journal = msgspec.structs.replace(journal, state="committed")
        _write_durably(plan_dir / "journal.json", msgspec.json.encode(journal))
        _crash("committed")
        self._commit(plan_dir, journal)

    def _redo(
        self, root_fd: int, staged_fd: int, backup_fd: int, index: int, op: _Op, touched: set[str]
    ) -> None:
        parent_rel, _, name = op.path.rpartition("/")

        def present(fd: int, entry: str) -> bool:
            try:
                os.stat(entry, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return False
            return True

        def move_away(parent: int) -> None:
            # The current file (or link) goes to backup/<n>; a folder is never moved.
            if present(parent, name) and not present(backup_fd, op.backup):
                if stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
                    raise IsADirectoryError(errno.EISDIR, "a folder is in the way", op.path)
                os.replace(name, op.backup, src_dir_fd=parent, dst_dir_fd=backup_fd)
            _crash("backup", index)

        if op.staged is None:
            if present(backup_fd, op.backup):
                return  # done
            try:
                parent = _open_folder(root_fd, parent_rel)
            except NotADirectoryError:
                return  # an ancestor was deleted or replaced by a file: nothing here to delete
            if parent is None:
                return
            try:
                move_away(parent)
            finally:
                os.close(parent)
            touched.add(parent_rel)
            return
        if not present(staged_fd, op.staged):
            return  # done
        parent = _open_folder(root_fd, parent_rel, create=True, made=touched)
        assert parent is not None
        try:
            move_away(parent)
            os.replace(op.staged, name, src_dir_fd=staged_fd, dst_dir_fd=parent)
        finally:
            os.close(parent)
        touched.add(parent_rel)

    def _remove_folders(self, root_fd: int, folders: tuple[str, ...], touched: set[str]) -> None:
        for folder in folders:  # deepest first
            parent_rel, _, name = folder.rpartition("/")
            try:
                parent = _open_folder(root_fd, parent_rel)
            except NotADirectoryError:
                continue
            if parent is None:
                continue
            try:
                os.rmdir(name, dir_fd=parent)  # never follows a link: ENOTDIR
            except OSError as exc:
                if exc.errno not in {errno.ENOENT, errno.ENOTDIR, errno.ENOTEMPTY, errno.EEXIST}:
                    raise
            finally:
                os.close(parent)
            touched.add(parent_rel)

    def _commit(self, plan_dir: Path, journal: _Journal) -> None:
        """Write the durable marker, then remove the plan's journal (backups and all)."""
        applied = self._journal / _APPLIED
        _make_folder(applied)
        marker = _Marker(plan_id=journal.plan_id, resource=self.name, changes=len(journal.ops))
        _write_durably(applied / journal.plan_id, msgspec.json.encode(marker))
        _crash("marked")
        self._remove(plan_dir)

    def _remove(self, plan_dir: Path) -> None:
        shutil.rmtree(plan_dir)
        _fsync_folder(self._journal)


# --- memory resource ------------------------------------------------------------------


class MemorySandbox:
    """A private copy of a memory resource: ``view`` is a plain dict work nodes may mutate."""

    __slots__ = ("_base", "_discarded", "_owner", "resource", "view")

    def __init__(
        self, owner: MemoryResource, files: dict[str, str], base: dict[str, _Digest]
    ) -> None:
        self._owner = owner
        self._base = base
        self._discarded = False
        self.resource = owner.name
        """The name of the resource copied."""
        self.view = files
        """The copy: relative path to text."""

    def changeset(self) -> Changeset:
        """Diff ``view`` against the files as they were copied."""
        if self._discarded:
            raise RuntimeFault(f"the sandbox of resource {self.resource!r} was discarded")
        now: dict[str, _Digest] = {}
        for path, text in list(self.view.items()):
            if not isinstance(path, str) or not isinstance(text, str):
                raise TypeError(
                    f"memory resource {self.resource!r} holds text by path, not {path!r}: {text!r}"
                )
            now[path] = _text_digest(text)
        return _diff(self.resource, self._base, now)

    def discard(self) -> None:
        """Drop the copy."""
        self._discarded = True
        self.view.clear()
        self._owner._forget(self)


class MemoryResource:
    """Files held in memory: relative path to text.

    Apply swaps in the new contents with one assignment, so readers see the old files or
    the new ones, never a mix. Nothing is durable: at-most-once holds within this object
    (this process) only, and :meth:`recover` has nothing to recover.
    """

    def __init__(self, name: str, files: Mapping[str, str] | None = None) -> None:
        self.name = name
        """The resource's name in the plan graph."""
        self.kind = "memory"
        """Always ``memory``."""
        self._files: dict[str, str] = dict(files or {})
        self._applied: set[str] = set()
        self._lock = threading.Lock()
        self._sandboxes: dict[str, MemorySandbox] = {}

    def __repr__(self) -> str:
        return f"MemoryResource({self.name!r}, {len(self._files)} files)"

    @property
    def files(self) -> Mapping[str, str]:
        """The current files, read-only. Apply replaces them; a view taken before keeps the old."""
        # Invariant: self._files is never mutated in place, only replaced.
        return MappingProxyType(self._files)

    def open_sandbox(self, folder: str | os.PathLike[str] | None = None) -> MemorySandbox:
        """Copy the files into a sandbox; ``folder`` only names it, for :meth:`reopen_sandbox`."""
        files = dict(self._files)
        sandbox = MemorySandbox(
            self, files, {path: _text_digest(text) for path, text in files.items()}
        )
        if folder is not None:
            with self._lock:
                self._sandboxes[os.fspath(folder)] = sandbox
        return sandbox

    def reopen_sandbox(self, folder: str | os.PathLike[str]) -> MemorySandbox | None:
        """The sandbox opened under the name ``folder`` by this object (this process), or
        None: memory sandboxes do not outlive their process."""
        with self._lock:
            return self._sandboxes.get(os.fspath(folder))

    def _forget(self, sandbox: MemorySandbox) -> None:
        with self._lock:
            for name, known in list(self._sandboxes.items()):
                if known is sandbox:
                    del self._sandboxes[name]

    def applied(self, plan_id: str) -> bool:
        """Whether this object applied the plan already."""
        _check_plan_id(plan_id)
        return plan_id in self._applied

    def apply(self, sandbox: Sandbox, changeset: Changeset, *, plan_id: str) -> ApplyReport:
        """Replace the files with the changeset applied, in one assignment, or refuse.

        Refuses (:class:`ApplyConflictError`) when a path the changeset touches changed
        since the sandbox was taken or the sandbox no longer holds what the changeset says;
        :class:`ApplyTwiceError` when this object applied the plan already.
        """
        _check_plan_id(plan_id)
        if not isinstance(sandbox, MemorySandbox):
            raise TypeError(
                f"resource {self.name!r} applies only its own MemorySandbox, not {sandbox!r}"
            )
        if sandbox._owner is not self or sandbox._discarded:
            why = (
                "was discarded" if sandbox._owner is self else f"is a copy of {sandbox.resource!r}"
            )
            raise ApplyConflictError(
                f"resource {self.name!r}: the sandbox {why}", resource=self.name, plan_id=plan_id
            )
        _check_changeset(changeset, self.name, plan_id, folders=False)

        def sha(files: Mapping[str, object], path: str) -> str | None:
            if path not in files:
                return None
            text = files[path]
            return _text_digest(text).sha256 if isinstance(text, str) else _SPECIAL

        with self._lock:
            if plan_id in self._applied:
                raise ApplyTwiceError(resource=self.name, plan_id=plan_id)
            current = self._files
            new = dict(current)
            conflicts: list[str] = []
            stale: list[str] = []
            for change in changeset.changes:
                if sha(current, change.path) != change.base_sha256:
                    conflicts.append(change.path)
                if sha(sandbox.view, change.path) != change.sha256:
                    stale.append(change.path)
                elif change.sha256 is None:
                    new.pop(change.path, None)
                else:
                    new[change.path] = sandbox.view[change.path]
            if conflicts or stale:
                problem = (
                    f"{len(conflicts)} path(s) changed since the sandbox was taken: {', '.join(conflicts[:5])}"
                    if conflicts
                    else f"the sandbox no longer holds what the changeset says at {', '.join(stale[:5])}"
                )
                raise ApplyConflictError(
                    f"resource {self.name!r}: {problem}",
                    resource=self.name,
                    plan_id=plan_id,
                    paths=conflicts or stale,
                )
            self._files = new  # the atomic step
            self._applied.add(plan_id)
        return ApplyReport(resource=self.name, plan_id=plan_id, changes=len(changeset.changes))

    def recover(self, *, plan_id: str) -> ApplyReport | None:
        """Nothing to recover: a memory apply is one assignment. Always ``None``."""
        _check_plan_id(plan_id)
        return None
