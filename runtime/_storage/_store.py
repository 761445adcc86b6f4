"""A content-addressed store of sandbox snapshots, kept beside the event log (DESIGN "Events
and replay"; seed 002 §13, the second replay mode).

Each validation round records, for every sandbox it validated, the digest of a *manifest*:
the list of the sandbox's files as the validations saw them. The files' bytes are *objects*
named by their sha256, so a fix that changes one file stores one new object and one new
manifest. Any round can be rebuilt exactly (:meth:`ContentStore.restore` for a folder,
:meth:`ContentStore.texts` for a memory sandbox) and its validators run again.

On disk::

    <root>/
        lock                    flock: shared while something is stored, exclusive for collect
        objects/ab/cdef…        the object whose sha256 is ``abcdef…`` (2 + 62 hex digits)
        objects/.<hex>.tmp      a file being stored (also ``objects/ab/.<hex>.tmp``)
        refs/<plan_id>          the manifests the plan's rounds use, one digest a line

Nothing is created until something is stored. An object is written to a temporary file in
the objects folder; the temporary files of one snapshot are made durable together (one
``syncfs`` of the store's file system on Linux, else an fsync each), then hard-linked to
their names (renamed, on a file system without hard links), so no half-written object is
ever visible under a name; an object present is never rewritten. Its folder is durable
before a manifest names it, and a manifest before a ref names it.

What an object holds is what it is named after: a file's content; a symbolic link's target
prefixed with ``symlink\\0``, exactly what :mod:`._resources` hashes for a link, so every
sha256 in a manifest is the one a :class:`~._resources.Changeset` shows for that path; a
text's UTF-8 encoding (lone surrogates kept as ``surrogatepass`` encodes them, like a memory
sandbox's digests).

A manifest is an object too: the compact msgspec JSON of the list of its entries,
``[[path, kind, sha256, size], ...]``, sorted by ``path`` as written (by code point). ``kind``
is ``"file"``, ``"link"`` or ``"text"``; ``size`` counts the bytes of the content (a link's
target, without the prefix). ``path`` is ``/``-separated and relative: the text of the name's
bytes (a file's name as the file system holds it; a text's path in UTF-8, ``surrogatepass``).
Bytes that are not valid UTF-8, and a path that starts with NUL, are written as NUL followed
by the bytes in hex instead, so every name survives the round trip. Nothing else goes in (no
times, modes, owners or host), so the same content has the same manifest digest in every run
on every machine. The memory sandbox ``{"a.txt": "hi"}`` is the manifest::

    [["a.txt","text","8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4",2]]

A folder snapshot walks the tree as a changeset does: files and symbolic links (never
followed), not the journal folder at the top, not FIFOs, sockets or devices. Folders are not
entries: an empty folder is not kept, nor are file modes and times.

Retention: ``refs/<plan_id>`` lists the manifests pinned for the plan, appended to (never
rewritten) by each pin. :meth:`ContentStore.collect` drops the refs of the plans a
:class:`StoreRetention` does not keep, then every object no kept ref reaches (its manifests
and the objects they list). A plan is as old as the time in its ULID; a plan id that is not a
ULID is dated by its last pin.

Concurrency: writers (``put``, the snapshots, ``pin``) hold a shared ``flock`` on
``<root>/lock`` while they write; ``collect`` holds it exclusively. So a collect never runs
while an object is half stored, nor between a snapshot storing its objects and pinning its
manifest, when the snapshot is given ``plan_id`` (it pins under the same lock). Each
acquisition opens the lock file anew, and an ``flock`` belongs to an open file description,
so the same lock orders the threads of one process too. A collect that runs between a
snapshot without ``plan_id`` and its :meth:`~ContentStore.pin` removes what the snapshot
stored; ``pin`` then fails with :class:`StoreError` (never silently). A lock held for longer
than a minute (a process stopped while holding it) is an error, not a hang. The in-memory
store has the same methods over dicts, with a reader-writer lock in place of ``flock``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import sys
import threading
import time
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Protocol

import msgspec
from gategraph.runtime._base._exceptions import GategraphError
from gategraph.runtime._base._ids import PLAN_ID_PATTERN, check_plan_id
from gategraph.runtime._data._maxn import _Frozen
from pydantic import Field, field_validator

from ._postgres import _with_tables, is_postgres_url, shown_url
from ._resources import (
    _CHUNK,
    _CLOEXEC,
    _DIR_FLAGS,
    _LINK_PREFIX,
    _NOFOLLOW,
    JOURNAL,
    Exclusion,
    _copy_digest,
    _Digest,
    _digest_fd,
    _fsync_folder,
    _make_folder,
    _open_folder,
    _walk,
    _write_all,
)

if sys.platform != "win32":
    import fcntl

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from contextlib import AbstractContextManager

__all__ = [
    "CollectReport",
    "ContentStore",
    "ManifestEntry",
    "StoreError",
    "StoreRetention",
    "StoreStatistics",
    "folder_digest",
]

_LOCK_WAIT: Final = 60.0
"""Seconds a writer or a collect waits for the store's lock before it gives up."""
_LOCK: Final = "lock"
_OBJECTS: Final = "objects"
_REFS: Final = "refs"
_DIGEST: Final = re.compile(r"[0-9a-f]{64}")
_HEX: Final = re.compile(r"[0-9a-f]*")
_FANOUT: Final = re.compile(r"[0-9a-f]{2}")
_TEMPORARY: Final = re.compile(r"\.[0-9a-f]{16}\.tmp")
# NUL cannot be in a file name, so a path field starting with it is unambiguous.
_ESCAPE: Final = "\0"
_PLAN_ID: Final = re.compile(PLAN_ID_PATTERN)
_DAY: Final = 86_400.0
_IN_MEMORY: Final = "in memory"

EntryKind = Literal["file", "link", "text"]
"""What a manifest entry is: a file's bytes, a symbolic link's target, or a memory text."""


# --- records --------------------------------------------------------------------------


class StoreError(GategraphError):
    """The content store cannot do what was asked: an object is missing or corrupt, a
    manifest or ref is unreadable, a restore target is not empty, or its lock is stuck.

    ``str(error)`` is one line: ``content store ROOT: what is wrong``.
    """

    def __init__(self, store: str, reason: str, *, digest: str | None = None) -> None:
        super().__init__(f"content store {store}: {reason}")
        self.store = store
        """The store's root folder, or ``in memory``."""
        self.reason = reason
        """What is wrong, without the store's name."""
        self.digest = digest
        """The object concerned, when there is one."""


class ManifestEntry(msgspec.Struct, frozen=True, array_like=True):
    """One file of a snapshot: ``[path, kind, sha256, size]`` in its manifest."""

    path: str
    """The path below the snapshot's root, ``/``-separated. A file name that is not UTF-8
    holds its bytes as surrogate escapes, as :func:`os.fsdecode` gives them."""
    kind: EntryKind
    """``file``, ``link`` or ``text``."""
    sha256: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{64}$")]
    """The digest of the content, which names its object."""
    size: Annotated[int, msgspec.Meta(ge=0)]
    """The content's size in bytes (a link's target, without the prefix)."""


class CollectReport(msgspec.Struct, frozen=True, kw_only=True):
    """What :meth:`ContentStore.collect` kept and removed."""

    plans_kept: int = 0
    """Plans whose refs the retention kept."""
    plans_dropped: int = 0
    """Plans whose refs were removed."""
    objects_kept: int = 0
    """Objects a kept ref still reaches."""
    objects_removed: int = 0
    """Objects removed: no kept ref reached them."""
    bytes_freed: int = 0
    """The size of the objects removed, and of temporary files left by a writer that died."""


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """How much a content store holds."""

    objects: int
    """Objects stored (manifests included)."""
    bytes: int
    """Their total size."""
    plans: int
    """Plans with pinned manifests."""


class StoreRetention(_Frozen):
    """Which plans' snapshots :meth:`ContentStore.collect` keeps: a plan is kept when both
    limits keep it. ``StoreRetention(keep_plans=None)`` keeps every plan."""

    keep_plans: Annotated[int, Field(strict=True)] | None = 100
    """Keep the most recent this many plans (by the time in their ULID); ``None``: no limit
    by count. 0 keeps none."""
    max_age_days: Annotated[float, Field(strict=True)] | None = None
    """Drop the plans older than this many days; ``None``: no limit by age."""

    @field_validator("keep_plans")
    @classmethod
    def _count(cls, value: int | None) -> int | None:
        if value is not None and value < 0:
            raise ValueError(f"keep_plans must be 0 or more (None keeps every plan), got {value}")
        return value

    @field_validator("max_age_days")
    @classmethod
    def _age(cls, value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError(
                f"max_age_days must be more than 0 (None keeps plans of any age), got {value}"
            )
        return value


# --- manifests -------------------------------------------------------------------------

_MANIFEST_ENCODER: Final = msgspec.json.Encoder()
_MANIFEST_DECODER: Final = msgspec.json.Decoder(list[ManifestEntry])


def _path_field(name: bytes) -> str:
    """A path's bytes as a manifest writes them: the text, or NUL and hex (module docstring)."""
    if not name.startswith(b"\0"):
        try:
            return name.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return _ESCAPE + name.hex()


def _path_bytes(field: str) -> bytes:
    """The bytes a manifest's path field stands for; ``ValueError`` if it is not canonical."""
    name = bytes.fromhex(field[1:]) if field.startswith(_ESCAPE) else field.encode("utf-8")
    if _path_field(name) != field:
        raise ValueError("escaped without need")
    return name


def _text_bytes(text: str) -> bytes:
    # The encoding _resources._text_digest hashes, so the digests agree.
    return text.encode("utf-8", "surrogatepass")


def _folder_path_problem(path: str) -> str | None:
    if "\0" in path:
        return "contains NUL"
    parts = path.split("/")
    if any(part in {"", ".", ".."} for part in parts):
        return "is not a normalised relative path"
    if parts[0] == JOURNAL:
        return "is inside the journal folder"
    return None


def _plan_time(plan_id: str, fallback: float) -> float:
    """When a plan was made, in Unix seconds: its ULID's time, else ``fallback`` (its last pin)."""
    from ulid import ULID  # only collect needs it: keeps importing the runtime light

    try:
        return ULID.from_str(plan_id).milliseconds / 1000
    except ValueError:
        return fallback


def _retained(retention: StoreRetention, times: Mapping[str, float], now: float) -> set[str]:
    newest = sorted(times, key=lambda plan: (times[plan], plan), reverse=True)
    if retention.keep_plans is not None:
        newest = newest[: retention.keep_plans]
    if retention.max_age_days is not None:
        oldest = now - retention.max_age_days * _DAY
        newest = [plan for plan in newest if times[plan] >= oldest]
    return set(newest)


def _parse_refs(data: bytes, where: str, plan_id: str) -> set[str]:
    found: set[str] = set()
    for number, line in enumerate(data.split(b"\n"), 1):
        text = line.decode("ascii", "replace")
        if _DIGEST.fullmatch(text):
            found.add(text)
        # A shorter run of hex is an append cut short by a crash: that pin never returned.
        elif len(text) >= 64 or not _HEX.fullmatch(text):
            raise StoreError(
                where, f"the refs of plan {plan_id} are unreadable: line {number} is not a digest"
            )
    return found


# --- locks ------------------------------------------------------------------------------


def _busy(where: str) -> StoreError:
    return StoreError(
        where,
        f"its lock has been held by another writer or collect for {_LOCK_WAIT:.0f} s; gave up",
    )


def _flock(fd: int, *, exclusive: bool, where: str) -> None:
    """Take the lock file's flock, polling, for at most :data:`_LOCK_WAIT` seconds."""
    if sys.platform == "win32":  # pragma: no cover - no flock: no cross-process lock there
        return
    mode = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
    deadline = time.monotonic() + _LOCK_WAIT
    delay = 0.001
    while True:
        try:
            fcntl.flock(fd, mode)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise _busy(where) from None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


class _SharedLock:
    """A reader-writer lock for the threads of one process (the in-memory store's flock)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextmanager
    def hold(self, *, exclusive: bool, where: str) -> Iterator[None]:
        deadline = time.monotonic() + _LOCK_WAIT
        with self._condition:
            while self._exclusive or (exclusive and self._shared):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _busy(where)
                self._condition.wait(left)
            if exclusive:
                self._exclusive = True
            else:
                self._shared += 1
        try:
            yield
        finally:
            with self._condition:
                if exclusive:
                    self._exclusive = False
                else:
                    self._shared -= 1
                self._condition.notify_all()


# --- backends -----------------------------------------------------------------------------


class _Batch:
    """What one write to the store made: objects written but not named yet, and folders
    whose new names are not durable yet. :meth:`_Backend.flush` makes the objects durable
    together (one ``syncfs`` for all of them where Linux has it, not one ``fsync`` each),
    then names them: a name in the store is always a whole, durable object."""

    __slots__ = ("folders", "pending", "row_bytes", "rows")

    def __init__(self) -> None:
        self.folders: set[str] = set()
        self.pending: dict[str, Path] = {}
        """Digest to the temporary file that holds it, written but not durable."""
        self.rows: dict[str, bytes] = {}
        """Digest to the bytes a database store writes with the batch."""
        self.row_bytes = 0
        """How many bytes ``rows`` holds."""


class _Backend(Protocol):
    """Where a store keeps its objects and refs. Digests given to it are checked already.

    ``batch`` collects what a write made, made durable by :meth:`flush`.
    """

    where: str

    def exists(self) -> bool: ...
    def locked(self, *, exclusive: bool) -> AbstractContextManager[None]: ...
    def size(self, digest: str) -> int | None: ...
    def read(self, digest: str) -> bytes | None: ...
    def copy_out(self, digest: str, fd: int) -> _Digest | None: ...
    def store(self, data: bytes, batch: _Batch) -> str: ...
    def ingest(self, fd: int, batch: _Batch) -> _Digest: ...
    def flush(self, batch: _Batch) -> None: ...
    def census(self) -> tuple[int, int]: ...
    def sweep(self, keep: set[str]) -> tuple[int, int, int]: ...
    def pins(self) -> dict[str, tuple[set[str], float]]: ...
    def pinned(self, plan_id: str) -> set[str]: ...
    def add_pins(self, plan_id: str, digests: list[str]) -> None: ...
    def drop_pins(self, plan_ids: list[str]) -> None: ...


class _DiskBackend:
    """Objects and refs in a folder; see the module docstring for the layout."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.where = os.fspath(root)
        self._objects = root / _OBJECTS
        self._refs = root / _REFS

    def exists(self) -> bool:
        return self.root.is_dir()

    @contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        if not self.root.is_dir():
            self.root.parent.mkdir(parents=True, exist_ok=True)
            _make_folder(self.root)
            # Copies of the sandboxes' files, private ones too: for this user alone.
            os.chmod(self.root, 0o700)
        fd = os.open(self.root / _LOCK, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
        try:
            _flock(fd, exclusive=exclusive, where=self.where)
            yield
        finally:
            os.close(fd)  # releases the flock

    def _path(self, digest: str) -> Path:
        return self._objects / digest[:2] / digest[2:]

    def _open(self, digest: str) -> int | None:
        try:
            return os.open(self._path(digest), os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def size(self, digest: str) -> int | None:
        try:
            return os.lstat(self._path(digest)).st_size
        except (FileNotFoundError, NotADirectoryError):
            return None

    def read(self, digest: str) -> bytes | None:
        fd = self._open(digest)
        if fd is None:
            return None
        try:
            chunks: list[bytes] = []
            while chunk := os.read(fd, _CHUNK):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def copy_out(self, digest: str, fd: int) -> _Digest | None:
        source = self._open(digest)
        if source is None:
            return None
        try:
            return _copy_digest(source, fd)
        finally:
            os.close(source)

    def _temporary(self, folder: Path, fill: Callable[[int], str]) -> tuple[Path, str]:
        """Write a new temporary file in ``folder`` with ``fill`` (made durable by the
        batch's :meth:`flush`); never left behind on an error."""
        path = folder / f".{secrets.token_hex(8)}.tmp"
        # Read and write: a copy that shares its source's blocks is hashed from itself.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o400)
        try:
            try:
                digest = fill(fd)
            finally:
                os.close(fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        return path, digest

    def _place(self, temporary: Path, digest: str, batch: _Batch) -> None:
        """Give the temporary file its object's name, unless that object is there already."""
        folder = self._objects / digest[:2]
        try:
            try:
                folder.mkdir()
            except FileExistsError:
                if not folder.is_dir() or folder.is_symlink():
                    raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(folder)) from None
            else:
                batch.folders.add(os.fspath(self._objects))  # its new entry, durable in flush
            final = folder / digest[2:]
            try:
                os.link(temporary, final)  # fails, rather than rewrites, when present
            except FileExistsError:
                pass  # another writer stored the same bytes first
            except OSError:
                # A file system without hard links: rename instead. A race then rewrites
                # an object with the same bytes, atomically.
                os.replace(temporary, final)
            batch.folders.add(os.fspath(folder))
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)

    def store(self, data: bytes, batch: _Batch) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest in batch.pending or self.size(digest) is not None:
            return digest
        _make_folder(self._objects)

        def fill(fd: int) -> str:
            _write_all(fd, data)
            return digest

        batch.pending[digest], _ = self._temporary(self._objects, fill)
        return digest

    def ingest(self, fd: int, batch: _Batch) -> _Digest:
        # Hash first: a file stored already costs one read and no write. A new one is
        # copied (its blocks shared where the file system can) and the copy hashed: what
        # the copy holds is what it is named after, even if the file changed in between.
        first = _digest_fd(fd)
        if first.sha256 in batch.pending or self.size(first.sha256) is not None:
            return first
        _make_folder(self._objects)
        copied: list[_Digest] = []

        def fill(out: int) -> str:
            copied.append(_copy_digest(fd, out))
            return copied[0].sha256

        temporary, digest = self._temporary(self._objects, fill)
        if digest in batch.pending:  # the file changed while it was read: its new bytes
            os.unlink(temporary)
        else:
            batch.pending[digest] = temporary
        return copied[0]

    def flush(self, batch: _Batch) -> None:
        if batch.pending:
            pending = sorted(batch.pending.items())
            batch.pending.clear()
            try:
                # syncfs first, then an fsync of each file, whose pages are clean by then:
                # cheap, and it reports a failed write of that file, which syncfs reports
                # for the whole file system at most once (not at all before Linux 5.8).
                synced = _syncfs(self._objects)
                for _, temporary in pending:
                    _fsync_file(temporary)
            except BaseException:
                # Not durable: never named, and not left behind.
                for _, temporary in pending:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temporary)
                raise
            try:
                for digest, temporary in pending:
                    self._place(temporary, digest, batch)
            finally:
                # Those a failure left unnamed: not left behind either (a named one's
                # temporary file is gone already).
                for _, temporary in pending:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(temporary)
            if synced and _syncfs(self._objects):
                batch.folders.clear()  # the new names are durable with the rest
        for folder in sorted(batch.folders):
            _fsync_folder(folder)
        batch.folders.clear()

    def _walk(self) -> Iterator[tuple[str | None, os.DirEntry[str]]]:
        """Every object (with its digest) and every temporary file (``None``)."""
        try:
            top = os.scandir(self._objects)
        except FileNotFoundError:
            return
        with top:
            for fan in top:
                if _TEMPORARY.fullmatch(fan.name):
                    yield None, fan
                elif _FANOUT.fullmatch(fan.name) and fan.is_dir(follow_symlinks=False):
                    with os.scandir(fan.path) as names:
                        for entry in names:
                            if _TEMPORARY.fullmatch(entry.name):
                                yield None, entry
                            elif _DIGEST.fullmatch(fan.name + entry.name):
                                yield fan.name + entry.name, entry

    def census(self) -> tuple[int, int]:
        count = size = 0
        for digest, entry in self._walk():
            if digest is not None:
                count += 1
                size += entry.stat(follow_symlinks=False).st_size
        return count, size

    def sweep(self, keep: set[str]) -> tuple[int, int, int]:
        kept = removed = freed = 0
        for digest, entry in self._walk():
            if digest is not None and digest in keep:
                kept += 1
                continue
            # Unreachable, or a temporary file: no writer runs while collect holds the lock,
            # so its writer died.
            freed += entry.stat(follow_symlinks=False).st_size
            os.unlink(entry.path)
            removed += digest is not None
        return kept, removed, freed

    def _read_refs(self, plan_id: str) -> bytes | None:
        try:
            return (self._refs / plan_id).read_bytes()
        except FileNotFoundError:
            return None

    def pins(self) -> dict[str, tuple[set[str], float]]:
        found: dict[str, tuple[set[str], float]] = {}
        try:
            listing = os.scandir(self._refs)
        except FileNotFoundError:
            return found
        with listing:
            for entry in listing:
                # Only plan ids name refs; anything else is not ours and is left alone.
                if _PLAN_ID.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
                    data = Path(entry.path).read_bytes()
                    mtime = entry.stat(follow_symlinks=False).st_mtime
                    found[entry.name] = (_parse_refs(data, self.where, entry.name), mtime)
        return found

    def pinned(self, plan_id: str) -> set[str]:
        data = self._read_refs(plan_id)
        return set() if data is None else _parse_refs(data, self.where, plan_id)

    def add_pins(self, plan_id: str, digests: list[str]) -> None:
        _make_folder(self._refs)
        path = self._refs / plan_id
        # Append-only: a second writer pinning for the same plan adds its lines, it never
        # replaces the file, so nothing needs a lock of its own.
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | _NOFOLLOW | _CLOEXEC, 0o644)
        existing = b""
        try:
            while chunk := os.read(fd, _CHUNK):
                existing += chunk
            have = _parse_refs(existing, self.where, plan_id)
            new = [digest for digest in dict.fromkeys(digests) if digest not in have]
            if new:
                # After an append cut short, start a new line: the fragment stays on its own.
                lead = "\n" if existing and not existing.endswith(b"\n") else ""
                _write_all(fd, (lead + "".join(f"{digest}\n" for digest in new)).encode())
                os.fsync(fd)
        finally:
            os.close(fd)
        if not existing:
            _fsync_folder(self._refs)  # the file is new: its name must be durable too

    def drop_pins(self, plan_ids: list[str]) -> None:
        for plan_id in plan_ids:
            os.unlink(self._refs / plan_id)
        if plan_ids:
            # Durable before any object goes: a ref back after a crash would name nothing.
            _fsync_folder(self._refs)


class _WholeObjects:
    """What a backend that holds each object's bytes whole (in memory, in a database row)
    does alike: copying an object out, and taking a file in, through its own ``read`` and
    ``store``."""

    def read(self, digest: str) -> bytes | None:
        raise NotImplementedError

    def store(self, data: bytes, batch: _Batch) -> str:
        raise NotImplementedError

    def copy_out(self, digest: str, fd: int) -> _Digest | None:
        data = self.read(digest)
        if data is None:
            return None
        _write_all(fd, data)
        return _Digest(hashlib.sha256(data).hexdigest(), len(data))

    def ingest(self, fd: int, batch: _Batch) -> _Digest:
        chunks: list[bytes] = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        data = b"".join(chunks)
        return _Digest(self.store(data, batch), len(data))


class _MemoryBackend(_WholeObjects):
    """Objects and refs in dicts, for in-memory event logs."""

    where = _IN_MEMORY

    def __init__(self) -> None:
        self._objects: dict[str, bytes] = {}
        self._pins: dict[str, tuple[set[str], float]] = {}
        self._data = threading.Lock()
        self._lock = _SharedLock()

    def exists(self) -> bool:
        return True

    def locked(self, *, exclusive: bool) -> AbstractContextManager[None]:
        return self._lock.hold(exclusive=exclusive, where=self.where)

    def size(self, digest: str) -> int | None:
        data = self._objects.get(digest)
        return None if data is None else len(data)

    def read(self, digest: str) -> bytes | None:
        return self._objects.get(digest)

    def store(self, data: bytes, batch: _Batch) -> str:
        digest = hashlib.sha256(data).hexdigest()
        with self._data:
            self._objects.setdefault(digest, bytes(data))
        return digest

    def flush(self, batch: _Batch) -> None:
        batch.folders.clear()

    def census(self) -> tuple[int, int]:
        with self._data:
            return len(self._objects), sum(map(len, self._objects.values()))

    def sweep(self, keep: set[str]) -> tuple[int, int, int]:
        with self._data:
            gone = [digest for digest in self._objects if digest not in keep]
            freed = sum(len(self._objects.pop(digest)) for digest in gone)
            return len(self._objects), len(gone), freed

    def pins(self) -> dict[str, tuple[set[str], float]]:
        with self._data:
            return {plan: (set(digests), at) for plan, (digests, at) in self._pins.items()}

    def pinned(self, plan_id: str) -> set[str]:
        with self._data:
            return set(self._pins.get(plan_id, (set(), 0.0))[0])

    def add_pins(self, plan_id: str, digests: list[str]) -> None:
        with self._data:
            have = self._pins.get(plan_id, (set(), 0.0))[0]
            if not have.issuperset(digests):
                self._pins[plan_id] = (have | set(digests), time.time())

    def drop_pins(self, plan_ids: list[str]) -> None:
        with self._data:
            for plan_id in plan_ids:
                del self._pins[plan_id]


# --- a backend in PostgreSQL --------------------------------------------------------------

_STORE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS store_objects (
    digest TEXT PRIMARY KEY,
    data   BYTEA NOT NULL
);
CREATE TABLE IF NOT EXISTS store_pins (
    plan_id   TEXT NOT NULL,
    digest    TEXT NOT NULL,
    pinned_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (plan_id, digest)
)
"""
# The store's own lock (shared while storing, exclusive for collect), as the disk store's
# flock: an advisory lock, held on the connection of the thread that stores.
_STORE_LOCK: Final = 0x6761_7465_7374_6F72  # "gatestor"
_LOCK_POLL: Final = 0.05
# Bytes of new objects a snapshot holds in memory before it writes them to the database.
_ROWS_HELD: Final = 32 << 20


def _close_all(opened: list[Any], lock: threading.Lock) -> None:
    with lock:
        connections = list(opened)
        opened.clear()
    for db in connections:
        db.close()


class _PostgresBackend(_WholeObjects):
    """A content store's objects and pins in a PostgreSQL database (the ``_Backend`` of
    :class:`~._store.ContentStore`): every host that reaches the database reads the same
    snapshots. Objects are rows named by their digest, written once (a conflict keeps the
    first), each batch in one transaction; pins are rows too."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.where = shown_url(url)
        self._local = threading.local()
        self._making = threading.Lock()
        self._opened: list[Any] = []
        # The store has no `close` its callers must remember: its connections close with
        # it (or at `close`), whichever thread opened them.
        self._finalizer = weakref.finalize(self, _close_all, self._opened, self._making)

    def close(self) -> None:
        """Close every connection the store opened (it opens new ones if used again)."""
        _close_all(self._opened, self._making)
        self._local = threading.local()

    def _db(self) -> Any:
        """This thread's connection (a psycopg connection is for one thread at a time)."""
        db: Any = getattr(self._local, "db", None)
        if db is None or db.closed:
            db = _with_tables(self.url, "content store", "store_pins", _STORE_SCHEMA)
            db.autocommit = True
            with self._making:
                self._opened.append(db)
            self._local.db = db
        return db

    def exists(self) -> bool:
        return True

    @contextmanager
    def locked(self, *, exclusive: bool) -> Iterator[None]:
        db = self._db()
        take = "pg_try_advisory_lock" if exclusive else "pg_try_advisory_lock_shared"
        give = "pg_advisory_unlock" if exclusive else "pg_advisory_unlock_shared"
        deadline = time.monotonic() + _LOCK_WAIT
        while True:
            row = db.execute(f"SELECT {take}(%s)", (_STORE_LOCK,)).fetchone()
            if row is not None and row[0]:
                break
            if time.monotonic() > deadline:
                raise _busy(self.where)
            time.sleep(_LOCK_POLL)
        try:
            yield
        finally:
            db.execute(f"SELECT {give}(%s)", (_STORE_LOCK,))

    def size(self, digest: str) -> int | None:
        row = (
            self._db()
            .execute("SELECT length(data) FROM store_objects WHERE digest = %s", (digest,))
            .fetchone()
        )
        return None if row is None else int(row[0])

    def read(self, digest: str) -> bytes | None:
        row = (
            self._db()
            .execute("SELECT data FROM store_objects WHERE digest = %s", (digest,))
            .fetchone()
        )
        return None if row is None else bytes(row[0])

    def store(self, data: bytes, batch: _Batch) -> str:
        digest = hashlib.sha256(data).hexdigest()
        if digest not in batch.rows:
            batch.rows[digest] = bytes(data)
            batch.row_bytes += len(data)
            if batch.row_bytes > _ROWS_HELD:
                # A large snapshot is written as it goes, not held in memory whole: an
                # object may be stored before the manifest that names it, never after.
                self._write(batch)
        return digest

    def flush(self, batch: _Batch) -> None:
        batch.folders.clear()
        self._write(batch)

    def _write(self, batch: _Batch) -> None:
        if not batch.rows:
            return
        rows = sorted(batch.rows.items())
        batch.rows.clear()
        batch.row_bytes = 0
        db = self._db()
        # One transaction, one pipeline: durable together, before any manifest names them.
        with db.transaction(), db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO store_objects (digest, data) VALUES (%s, %s)"
                " ON CONFLICT (digest) DO NOTHING",
                rows,
            )

    def census(self) -> tuple[int, int]:
        row = (
            self._db()
            .execute("SELECT count(*), coalesce(sum(length(data)), 0) FROM store_objects")
            .fetchone()
        )
        assert row is not None
        return int(row[0]), int(row[1])

    def sweep(self, keep: set[str]) -> tuple[int, int, int]:
        db = self._db()
        with db.transaction():
            row = db.execute(
                "WITH gone AS (DELETE FROM store_objects WHERE NOT (digest = ANY(%s))"
                " RETURNING length(data) AS size) SELECT count(*), coalesce(sum(size), 0)"
                " FROM gone",
                (sorted(keep),),
            ).fetchone()
            kept = db.execute("SELECT count(*) FROM store_objects").fetchone()
        assert row is not None and kept is not None
        return int(kept[0]), int(row[0]), int(row[1])

    def pins(self) -> dict[str, tuple[set[str], float]]:
        found: dict[str, tuple[set[str], float]] = {}
        rows = (
            self._db()
            .execute(
                "SELECT plan_id, array_agg(digest), max(pinned_at) FROM store_pins GROUP BY plan_id"
            )
            .fetchall()
        )
        for plan_id, digests, at in rows:
            found[plan_id] = (set(digests), float(at))
        return found

    def pinned(self, plan_id: str) -> set[str]:
        rows = (
            self._db()
            .execute("SELECT digest FROM store_pins WHERE plan_id = %s", (plan_id,))
            .fetchall()
        )
        return {row[0] for row in rows}

    def add_pins(self, plan_id: str, digests: list[str]) -> None:
        db = self._db()
        with db.transaction(), db.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO store_pins (plan_id, digest, pinned_at) VALUES (%s, %s, %s)"
                " ON CONFLICT (plan_id, digest) DO NOTHING",
                [(plan_id, digest, time.time()) for digest in dict.fromkeys(digests)],
            )

    def drop_pins(self, plan_ids: list[str]) -> None:
        if plan_ids:
            self._db().execute("DELETE FROM store_pins WHERE plan_id = ANY(%s)", (plan_ids,))


# --- the store ---------------------------------------------------------------------------


def _syncfs(path: Path) -> bool:
    """Make everything written to the file system holding ``path`` durable, with one call
    (Linux's ``syncfs``); False where there is no such call (then: one ``fsync`` per
    file). Raises :class:`OSError` when the file system reports a write that failed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return False
    fd = os.open(path, os.O_RDONLY | _CLOEXEC)
    try:
        if syncfs(fd) == 0:
            return True
        err = ctypes.get_errno()
    finally:
        os.close(fd)
    if err == errno.ENOSYS:
        return False
    raise OSError(err, f"syncfs: {os.strerror(err)}", os.fspath(path))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def folder_digest(root: str | os.PathLike[str], exclusion: Exclusion | None = None) -> str:
    """The digest of the manifest :meth:`ContentStore.snapshot_folder` would make of the
    folder ``root``, storing nothing: what an in-memory store records of a folder, whose
    content it does not copy."""
    entries: list[ManifestEntry] = []
    for rel, entry, link in _walk(os.fspath(root), exclusion):
        field = _path_field(os.fsencode(rel))
        if link:
            target = os.fsencode(os.readlink(entry.path))
            digest = hashlib.sha256(_LINK_PREFIX + target).hexdigest()
            entries.append(ManifestEntry(field, "link", digest, len(target)))
        else:
            fd = os.open(entry.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
            try:
                found = _digest_fd(fd)
            finally:
                os.close(fd)
            entries.append(ManifestEntry(field, "file", found.sha256, found.size))
    entries.sort(key=lambda entry: entry.path)
    return hashlib.sha256(_MANIFEST_ENCODER.encode(entries)).hexdigest()


class ContentStore:
    """Sandbox snapshots, content-addressed and deduplicated, with retention by plan.

    ``root`` is the store's folder (created when something is first stored); ``None`` keeps
    everything in this object, for in-memory event logs. The methods are synchronous and
    thread-safe, and several processes may share one folder; async callers run them in a
    worker thread (``anyio.to_thread.run_sync``).
    """

    def __init__(self, root: str | os.PathLike[str] | None) -> None:
        self.root: Path | None = None
        """The store's folder; ``None`` for a store held in memory or in a database."""
        self._backend: _Backend
        if is_postgres_url(root):
            assert isinstance(root, str)
            self._backend = _PostgresBackend(root)
        elif root is None:
            self._backend = _MemoryBackend()
        else:
            self.root = Path(os.path.abspath(root))
            self._backend = _DiskBackend(self.root)

    @property
    def keeps_copies(self) -> bool:
        """Whether it keeps the files themselves (a folder or a database), not only the
        digests of folders (in memory): what a later look at a round, or a re-run, needs."""
        return self._backend.where != _IN_MEMORY

    @property
    def where(self) -> str:
        """The store's folder, database (without its password) or ``in memory``."""
        return self._backend.where

    def close(self) -> None:
        """Let go of what the store holds open (a database's connections); it opens them
        again if used after. A store on disk or in memory holds nothing open."""
        close = getattr(self._backend, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        if isinstance(self._backend, _DiskBackend | _MemoryBackend):
            return f"ContentStore({None if self.root is None else os.fspath(self.root)!r})"
        return f"ContentStore({self.where!r})"

    def _error(self, reason: str, digest: str | None = None) -> StoreError:
        return StoreError(self._backend.where, reason, digest=digest)

    def _check(self, digest: object) -> str:
        if isinstance(digest, str) and _DIGEST.fullmatch(digest):
            return digest
        raise self._error(f"{digest!r} is not a sha256 digest (64 lowercase hex digits)")

    @contextmanager
    def _writing(self) -> Iterator[_Batch]:
        """Hold the shared lock while storing, and make the folders written to durable on the
        way out, even after an error: a later snapshot trusts an object it sees."""
        batch = _Batch()
        with self._backend.locked(exclusive=False):
            try:
                yield batch
            finally:
                self._backend.flush(batch)

    # -- objects

    def put(self, data: bytes) -> str:
        """Store ``data`` (unless it is stored already) and return its sha256.

        No manifest lists it: the next :meth:`collect` removes it. Snapshots are what keep
        content; this is the primitive under them.
        """
        with self._writing() as batch:
            return self._backend.store(bytes(data), batch)

    def has(self, digest: str) -> bool:
        """Whether the object ``digest`` is stored (its bytes are not checked)."""
        return self._backend.size(self._check(digest)) is not None

    def get(self, digest: str) -> bytes:
        """The bytes of the object ``digest``, checked against it.

        Raises :class:`StoreError` when it is missing or its bytes no longer hash to it.
        """
        data = self._backend.read(self._check(digest))
        if data is None:
            raise self._error(f"object {digest} is missing", digest)
        actual = hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise self._error(f"object {digest} is corrupt: its bytes hash to {actual}", digest)
        return data

    # -- snapshots

    def snapshot_texts(self, files: Mapping[str, str], *, plan_id: str | None = None) -> str:
        """Store a memory sandbox (path to text) and its manifest; return the manifest's digest.

        With ``plan_id``, the manifest is pinned for that plan under the same lock, so no
        :meth:`collect` can come between; without, :meth:`pin` it before one runs.
        """
        if plan_id is not None:
            check_plan_id(plan_id)
        with self._writing() as batch:
            entries: list[ManifestEntry] = []
            for path, text in files.items():
                if not isinstance(path, str) or not isinstance(text, str):
                    raise TypeError(f"a memory sandbox holds text by path, not {path!r}: {text!r}")
                data = _text_bytes(text)
                digest = self._backend.store(data, batch)
                entries.append(
                    ManifestEntry(_path_field(_text_bytes(path)), "text", digest, len(data))
                )
            return self._finish(entries, batch, plan_id)

    def snapshot_folder(
        self,
        root: str | os.PathLike[str],
        known: Mapping[str, str] | None = None,
        *,
        plan_id: str | None = None,
        exclusion: Exclusion | None = None,
    ) -> str:
        """Store a folder's files and links and its manifest; return the manifest's digest.

        The walk is a changeset's: files and symbolic links (stored as their targets, never
        followed), not the journal folder at the top, not FIFOs, sockets or devices. A file
        is read once when it is stored already, twice when it is new.

        ``known`` maps paths to the sha256 their files hold *now* (a sandbox's base snapshot
        with its changeset applied, say). A file whose digest it gives and whose object is
        stored, with the same size, is not read at all: the store trusts ``known``, and a
        wrong digest there makes a wrong snapshot. ``plan_id`` pins the manifest, as for
        :meth:`snapshot_texts`. ``exclusion`` leaves out what a sandbox's changesets leave
        out (:attr:`DirectorySandbox.exclusion`).
        """
        if plan_id is not None:
            check_plan_id(plan_id)
        base = os.fspath(root)
        with self._writing() as batch:
            entries: list[ManifestEntry] = []
            # The walk of a changeset, so a snapshot lists exactly what a changeset diffs.
            for rel, entry, link in _walk(base, exclusion):
                field = _path_field(os.fsencode(rel))
                if link:
                    target = os.fsencode(os.readlink(entry.path))
                    digest = self._backend.store(_LINK_PREFIX + target, batch)
                    entries.append(ManifestEntry(field, "link", digest, len(target)))
                else:
                    found = self._file(entry, known.get(rel) if known else None, batch)
                    entries.append(ManifestEntry(field, "file", found.sha256, found.size))
            return self._finish(entries, batch, plan_id)

    def _file(self, entry: os.DirEntry[str], known: str | None, batch: _Batch) -> _Digest:
        if known is not None and _DIGEST.fullmatch(known):
            size = entry.stat(follow_symlinks=False).st_size
            if self._backend.size(known) == size:
                return _Digest(known, size)
        fd = os.open(entry.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
        try:
            return self._backend.ingest(fd, batch)
        finally:
            os.close(fd)

    def _finish(self, entries: list[ManifestEntry], batch: _Batch, plan_id: str | None) -> str:
        """Store the manifest of ``entries`` after their objects are durable, then pin it."""
        entries.sort(key=lambda entry: entry.path)
        self._backend.flush(batch)
        digest = self._backend.store(_MANIFEST_ENCODER.encode(entries), batch)
        self._backend.flush(batch)
        if plan_id is not None:
            self._backend.add_pins(plan_id, [digest])
        return digest

    # -- reading snapshots back

    def manifest(self, digest: str) -> list[ManifestEntry]:
        """The entries of the manifest ``digest``, sorted by path.

        Raises :class:`StoreError` when it is missing, corrupt, or not a manifest.
        """
        data = self.get(digest)

        def refuse(why: str) -> StoreError:
            return self._error(f"object {digest} is not a manifest: {why}", digest)

        try:
            wire = _MANIFEST_DECODER.decode(data)
        except msgspec.DecodeError as exc:
            raise refuse(str(exc)) from None
        entries: list[ManifestEntry] = []
        for index, entry in enumerate(wire):
            if index and entry.path <= wire[index - 1].path:
                raise refuse(f"its paths are not sorted and unique at entry {index}")
            try:
                name = _path_bytes(entry.path)
                path = (
                    name.decode("utf-8", "surrogatepass")
                    if entry.kind == "text"
                    else os.fsdecode(name)
                )
            except ValueError:
                raise refuse(f"entry {index} has a malformed path") from None
            problem = None if entry.kind == "text" else _folder_path_problem(path)
            if problem is not None:
                raise refuse(f"path {path!r} {problem}")
            entries.append(msgspec.structs.replace(entry, path=path))
        if len({entry.kind == "text" for entry in entries}) > 1:
            raise refuse("it mixes texts with files")
        return entries

    def _content(self, digest: str, entry: ManifestEntry) -> bytes:
        data = self.get(entry.sha256)
        prefix = _LINK_PREFIX if entry.kind == "link" else b""
        if len(data) != len(prefix) + entry.size or not data.startswith(prefix):
            raise self._error(
                f"manifest {digest} lists {entry.path!r} as {entry.size} bytes of {entry.kind}, "
                f"which object {entry.sha256} does not hold",
                digest,
            )
        return data[len(prefix) :]

    def texts(self, digest: str) -> dict[str, str]:
        """Rebuild the memory sandbox the manifest ``digest`` snapshotted: path to text."""
        files: dict[str, str] = {}
        for entry in self.manifest(digest):
            if entry.kind != "text":
                raise self._error(f"manifest {digest} holds a folder, not texts", digest)
            data = self._content(digest, entry)
            try:
                files[entry.path] = data.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise self._error(
                    f"manifest {digest} lists {entry.path!r} as text, but object "
                    f"{entry.sha256} is not UTF-8",
                    digest,
                ) from None
        return files

    def restore(self, digest: str, into: str | os.PathLike[str]) -> None:
        """Rebuild the folder the manifest ``digest`` snapshotted, in ``into``.

        ``into`` must be an empty folder, or absent (it is then created). Files get their
        bytes (checked against their digests as they are copied) with the default mode;
        links their targets. On an error, ``into`` holds what was restored until then.
        """
        entries = self.manifest(digest)
        if any(entry.kind == "text" for entry in entries):
            raise self._error(f"manifest {digest} holds texts, not a folder", digest)
        target = Path(into)
        try:
            target.mkdir(parents=True)
        except FileExistsError:
            if not target.is_dir():
                raise self._error(
                    f"cannot restore into {os.fspath(target)!r}: not a folder", digest
                ) from None
            if any(target.iterdir()):
                raise self._error(
                    f"cannot restore into {os.fspath(target)!r}: the folder is not empty", digest
                ) from None
        root_fd = os.open(target, _DIR_FLAGS)
        try:
            for entry in entries:
                self._restore_entry(digest, root_fd, entry)
        finally:
            os.close(root_fd)

    def _restore_entry(self, digest: str, root_fd: int, entry: ManifestEntry) -> None:
        parent_rel, _, name = entry.path.rpartition("/")
        try:
            # Never follows a link: an entry below a link cannot write outside ``into``.
            parent = _open_folder(root_fd, parent_rel, create=True)
        except NotADirectoryError:
            raise self._error(
                f"manifest {digest} lists {entry.path!r} below a file or link", digest
            ) from None
        assert parent is not None  # created
        try:
            if entry.kind == "link":
                target = self._content(digest, entry)
                os.symlink(os.fsdecode(target), name, dir_fd=parent)
                return
            out = os.open(  # read too: a copy that shares the object's blocks is hashed
                name,
                os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
                0o666,
                dir_fd=parent,
            )
            try:
                copied = self._backend.copy_out(entry.sha256, out)
            finally:
                os.close(out)
        finally:
            os.close(parent)
        if copied is None:
            raise self._error(f"object {entry.sha256} is missing", entry.sha256)
        if copied.sha256 != entry.sha256:
            raise self._error(
                f"object {entry.sha256} is corrupt: its bytes hash to {copied.sha256}",
                entry.sha256,
            )
        if copied.size != entry.size:
            raise self._error(
                f"manifest {digest} lists {entry.path!r} as {entry.size} bytes of file, "
                f"which object {entry.sha256} does not hold",
                digest,
            )

    # -- retention

    def pin(self, plan_id: str, digests: Iterable[str]) -> None:
        """Record, durably, that the plan's rounds use the manifests ``digests``.

        Pins add up: pinning more manifests for a plan later keeps the earlier ones. Raises
        :class:`StoreError` when a digest is not a stored manifest.
        """
        check_plan_id(plan_id)
        wanted = [self._check(digest) for digest in digests]
        with self._backend.locked(exclusive=False):
            for digest in wanted:
                self.manifest(digest)  # collect cannot remove it now, until the pin is written
            if wanted:
                self._backend.add_pins(plan_id, wanted)

    def pinned(self, plan_id: str) -> frozenset[str]:
        """The manifests pinned for the plan (empty when none are)."""
        check_plan_id(plan_id)
        return frozenset(self._backend.pinned(plan_id))

    def collect(self, retention: StoreRetention, *, now: float | None = None) -> CollectReport:
        """Drop the pins of the plans ``retention`` does not keep, then every object no kept
        pin reaches; also temporary files a writer that died left behind.

        ``now`` is the time the plans' ages are measured at, in Unix seconds (default: the
        clock). Waits for writers in progress, here and in other processes. Raises
        :class:`StoreError`, removing nothing, when a kept pin names a manifest that cannot
        be read (its objects could not be told apart from garbage).
        """
        if not self._backend.exists():
            return CollectReport()
        clock = time.time() if now is None else now
        with self._backend.locked(exclusive=True):
            pins = self._backend.pins()
            times = {plan: _plan_time(plan, at) for plan, (_, at) in pins.items()}
            kept = _retained(retention, times, clock)
            reachable: set[str] = set()
            for plan in sorted(kept):
                for digest in sorted(pins[plan][0]):
                    try:
                        entries = self.manifest(digest)
                    except StoreError as exc:
                        raise self._error(
                            f"plan {plan} pins a manifest that cannot be read ({exc.reason}); "
                            "nothing was collected",
                            digest,
                        ) from None
                    reachable.add(digest)
                    reachable.update(entry.sha256 for entry in entries)
            dropped = sorted(pins.keys() - kept)
            self._backend.drop_pins(dropped)
            objects_kept, removed, freed = self._backend.sweep(reachable)
        return CollectReport(
            plans_kept=len(kept),
            plans_dropped=len(dropped),
            objects_kept=objects_kept,
            objects_removed=removed,
            bytes_freed=freed,
        )

    def collect_due(self, retention: StoreRetention, *, now: float | None = None) -> bool:
        """Whether a :meth:`collect` would be worth its cost now: more plans are pinned than
        ``retention`` keeps, by a tenth (a collect reads every kept manifest, so it runs
        for a batch of plans, not for each), or a plan is a day past its age limit."""
        if not self._backend.exists():
            return False
        pins = self._backend.pins()
        if retention.keep_plans is not None:
            if len(pins) > retention.keep_plans + max(1, retention.keep_plans // 10):
                return True
        if retention.max_age_days is not None and pins:
            clock = time.time() if now is None else now
            oldest = min(_plan_time(plan, at) for plan, (_, at) in pins.items())
            return clock - oldest > (retention.max_age_days + 1) * _DAY
        return False

    def statistics(self) -> StoreStatistics:
        """Count the objects stored, their size, and the plans with pins."""
        if not self._backend.exists():
            return StoreStatistics(objects=0, bytes=0, plans=0)
        objects, size = self._backend.census()
        return StoreStatistics(objects=objects, bytes=size, plans=len(self._backend.pins()))
