"""The content store: sandbox snapshots, deduplicated, rebuilt exactly, kept by retention."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from gategraph.runtime import ConfigError, GategraphError
from gategraph.runtime._storage import _store as store_module
from gategraph.runtime._storage._resources import _link_digest, _scan, _text_digest
from gategraph.runtime._storage._store import (
    CollectReport,
    ContentStore,
    ManifestEntry,
    StoreError,
    StoreRetention,
    StoreStatistics,
)
from pydantic import ValidationError
from ulid import ULID

JOURNAL = ".gategraph-journal"
NOW = 1_700_000_000.0
DAY = 86_400.0
KEEP_ALL = StoreRetention(keep_plans=None)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ulid_at(seconds: float) -> str:
    """A plan id made at ``seconds`` (Unix time)."""
    return str(ULID.from_timestamp(seconds))


@pytest.fixture(params=["disk", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ContentStore:
    """A store on disk, one in memory and one in a PostgreSQL database (a real server, see
    tests/_postgres.py): the same behaviour is pinned for all three."""
    if request.param == "postgres":
        opened = ContentStore(request.getfixturevalue("postgres_url"))
        request.addfinalizer(opened.close)  # before its database is dropped
        return opened
    return ContentStore(tmp_path / "store" if request.param == "disk" else None)


def in_database(store: ContentStore, query: str, *arguments: Any) -> list[Any]:
    """Run ``query`` on a PostgreSQL store's database, behind the store's back."""
    import psycopg

    with psycopg.connect(store._backend.url, autocommit=True) as db:  # type: ignore[attr-defined]
        cursor = db.execute(query, arguments)
        return cursor.fetchall() if cursor.description else []


def where(store: ContentStore) -> str:
    """How the store's messages name it."""
    return store.where


def stored(store: ContentStore) -> set[str]:
    """The objects the store holds, read from its folder (or its dict) directly."""
    if store.where.startswith("postgresql"):
        return {row[0] for row in in_database(store, "SELECT digest FROM store_objects")}
    if store.root is None:
        return set(store._backend._objects)  # type: ignore[attr-defined]
    return {
        path.parent.name + path.name
        for path in (store.root / "objects").glob("??/*")
        if not path.name.startswith(".")
    }


def files_below(root: Path) -> list[Path]:
    """Every file (not folder) below root."""
    return [path for path in root.rglob("*") if not path.is_dir()]


def corrupt(store: ContentStore, digest: str, data: bytes) -> None:
    """Replace the bytes of an object behind the store's back."""
    if store.where.startswith("postgresql"):
        in_database(store, "UPDATE store_objects SET data = %s WHERE digest = %s", data, digest)
        return
    if store.root is None:
        store._backend._objects[digest] = data  # type: ignore[attr-defined]
        return
    path = store.root / "objects" / digest[:2] / digest[2:]
    path.chmod(0o644)
    path.write_bytes(data)


def remove(store: ContentStore, digest: str) -> None:
    """Lose an object behind the store's back."""
    if store.where.startswith("postgresql"):
        in_database(store, "DELETE FROM store_objects WHERE digest = %s", digest)
        return
    if store.root is None:
        del store._backend._objects[digest]  # type: ignore[attr-defined]
    else:
        (store.root / "objects" / digest[:2] / digest[2:]).unlink()


Entry = bytes | tuple[str, str]


def tree(root: Path) -> dict[str, Entry]:
    """Files (bytes) and links (("link", target)) below root, as a snapshot should see them."""
    found: dict[str, Entry] = {}
    for folder, dirs, names in os.walk(root):
        rel_folder = Path(folder).relative_to(root)
        if rel_folder == Path():
            dirs[:] = [d for d in dirs if d != JOURNAL]
        for name in [*dirs, *names]:
            path = Path(folder) / name
            rel = (rel_folder / name).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(path.lstat().st_mode):
                found[rel] = path.read_bytes()
    return found


def make_tree(root: Path) -> None:
    """Nested folders, an empty file, links (to a file, a folder, nowhere), a journal, a FIFO."""
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_bytes(b"print('hi')\n")
    (root / "src" / "pkg" / "__init__.py").write_bytes(b"")
    (root / "README.md").write_bytes(b"# readme\n")
    (root / "empty-folder").mkdir()
    os.symlink("README.md", root / "readme-link")
    os.symlink("src/pkg", root / "pkg-link")
    os.symlink("/nowhere/at/all", root / "dangling")
    (root / JOURNAL).mkdir()
    (root / JOURNAL / "lock").write_bytes(b"not content")
    os.mkfifo(root / "pipe")


def wire(store: ContentStore, entries: list[list[Any]]) -> str:
    """Store a hand-made manifest (for manifests no snapshot would write)."""
    return store.put(msgspec.json.encode(entries))


# --- objects ----------------------------------------------------------------------------


def test_put_get_has(store: ContentStore) -> None:
    """put returns the sha256, has sees the object, get returns its bytes."""
    digest = store.put(b"some bytes")
    assert digest == sha(b"some bytes")
    assert store.has(digest) and not store.has(sha(b"other"))
    assert store.get(digest) == b"some bytes"
    assert store.put(b"some bytes") == digest
    assert stored(store) == {digest}


def test_nothing_is_created_until_something_is_stored(tmp_path: Path) -> None:
    """Reading, collecting and counting an empty store leave no folder behind."""
    root = tmp_path / "deep" / "store"
    store = ContentStore(root)
    assert not store.has(sha(b""))
    assert store.pinned("plan") == frozenset()
    assert store.collect(KEEP_ALL) == CollectReport()
    assert store.statistics() == StoreStatistics(objects=0, bytes=0, plans=0)
    with pytest.raises(StoreError, match="is missing"):
        store.get(sha(b""))
    assert not root.parent.exists()
    store.put(b"")
    assert sorted(p.name for p in root.iterdir()) == ["lock", "objects"]


def test_a_folder_with_no_store_in_it_is_an_empty_store(tmp_path: Path) -> None:
    """An existing, empty folder is a store with nothing in it."""
    store = ContentStore(tmp_path)
    assert store.collect(KEEP_ALL) == CollectReport()
    assert store.statistics() == StoreStatistics(objects=0, bytes=0, plans=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]


def test_an_object_present_is_never_rewritten(tmp_path: Path) -> None:
    """A second put of the same bytes, even one that misses the presence check, keeps the file."""
    store = ContentStore(tmp_path / "store")
    digest = store.put(b"once")
    path = tmp_path / "store" / "objects" / digest[:2] / digest[2:]
    before = path.stat()
    assert stat.S_IMODE(before.st_mode) & 0o222 == 0  # objects are read-only
    store.put(b"once")
    # As if another writer stored it between the check and the link.
    backend = store._backend
    original = type(backend).size
    try:
        type(backend).size = lambda self, digest: None  # type: ignore[method-assign]
        store.put(b"once")
    finally:
        type(backend).size = original  # type: ignore[method-assign]
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert files_below(tmp_path / "store" / "objects") == [path]


def test_without_hard_links_objects_are_renamed_into_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system that refuses hard links still gets whole objects and no temporaries."""

    def no_links(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EPERM, "no hard links here")

    monkeypatch.setattr(os, "link", no_links)
    store = ContentStore(tmp_path / "store")
    digest = store.put(b"renamed")
    assert store.get(digest) == b"renamed"
    assert files_below(tmp_path / "store" / "objects") == [
        tmp_path / "store" / "objects" / digest[:2] / digest[2:]
    ]


@pytest.mark.parametrize("bad", ["abc", "A" * 64, "g" * 64, "../" + "a" * 61, 42])
def test_a_digest_must_be_a_sha256(store: ContentStore, bad: Any) -> None:
    """A malformed digest is refused by name, before any file is touched."""
    where = store.where
    message = f"content store {where}: {bad!r} is not a sha256 digest (64 lowercase hex digits)"
    for call in (store.has, store.get, store.manifest, store.texts):
        with pytest.raises(StoreError) as caught:
            call(bad)
        assert str(caught.value) == message
    with pytest.raises(StoreError, match="is not a sha256 digest"):
        store.pin("plan", [bad])


def test_store_error_is_a_gategraph_error_with_context(tmp_path: Path) -> None:
    """StoreError names the store and the digest, as attributes too."""
    store = ContentStore(tmp_path / "store")
    digest = sha(b"absent")
    with pytest.raises(GategraphError) as caught:
        store.get(digest)
    error = caught.value
    assert isinstance(error, StoreError)
    assert str(error) == f"content store {tmp_path / 'store'}: object {digest} is missing"
    assert (error.store, error.digest) == (os.fspath(tmp_path / "store"), digest)
    assert error.reason == f"object {digest} is missing"
    assert repr(store) == f"ContentStore({os.fspath(tmp_path / 'store')!r})"
    assert repr(ContentStore(None)) == "ContentStore(None)"


def test_corruption_is_detected(store: ContentStore) -> None:
    """Bytes that no longer hash to their object's name are an error naming both digests."""
    digest = store.put(b"original")
    corrupt(store, digest, b"tampered")
    where = store.where
    with pytest.raises(StoreError) as caught:
        store.get(digest)
    assert str(caught.value) == (
        f"content store {where}: object {digest} is corrupt: its bytes hash to {sha(b'tampered')}"
    )
    assert store.has(digest)  # present, if broken


def test_a_broken_fanout_folder_means_missing(tmp_path: Path) -> None:
    """A file where an object's folder should be is no object."""
    store = ContentStore(tmp_path / "store")
    store.put(b"x")
    digest = sha(b"y")
    (tmp_path / "store" / "objects" / digest[:2]).write_bytes(b"")
    assert not store.has(digest)
    with pytest.raises(StoreError, match="is missing"):
        store.get(digest)


# --- atomicity ----------------------------------------------------------------------------


def test_a_failed_put_leaves_no_partial_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails half-way leaves neither a temporary file nor an object."""
    real = store_module._write_all

    def half(fd: int, data: bytes) -> None:
        real(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_module, "_write_all", half)
    store = ContentStore(tmp_path / "store")
    with pytest.raises(OSError, match="No space left"):
        store.put(b"0123456789")
    assert files_below(tmp_path / "store" / "objects") == []
    assert not store.has(sha(b"0123456789"))
    monkeypatch.undo()
    assert store.get(store.put(b"0123456789")) == b"0123456789"


def test_a_failed_copy_leaves_no_partial_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose copy fails mid-way, or whose fsync fails, leaves nothing in the store."""
    folder = tmp_path / "box"
    folder.mkdir()
    (folder / "big.bin").write_bytes(b"x" * 100_000)

    def broken(fd: int, copy_to: int, hashed: Any = None) -> Any:
        os.write(copy_to, b"partial")
        raise OSError(errno.EIO, "Input/output error")

    store = ContentStore(tmp_path / "store")
    monkeypatch.setattr(store_module, "_copy_digest", broken)
    with pytest.raises(OSError, match="Input/output"):
        store.snapshot_folder(folder)
    assert files_below(tmp_path / "store" / "objects") == []
    monkeypatch.undo()

    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "fsync failed")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    monkeypatch.setattr(store_module, "_syncfs", lambda path: False)  # no syncfs: each file
    with pytest.raises(OSError, match="fsync failed"):
        store.snapshot_folder(folder)
    assert files_below(tmp_path / "store" / "objects") == []
    monkeypatch.undo()

    def failing_syncfs(path: Path) -> bool:
        raise OSError(errno.EIO, "syncfs failed")

    monkeypatch.setattr(store_module, "_syncfs", failing_syncfs)
    with pytest.raises(OSError, match="syncfs failed"):
        store.snapshot_folder(folder)
    assert files_below(tmp_path / "store" / "objects") == []
    monkeypatch.undo()
    digest = store.snapshot_folder(folder)
    assert [entry.path for entry in store.manifest(digest)] == ["big.bin"]


def test_collect_removes_what_a_dead_writer_left(tmp_path: Path) -> None:
    """Temporary files (their writer died) go; files that are not the store's stay."""
    store = ContentStore(tmp_path / "store")
    digest = store.put(b"kept? no: unpinned")
    objects = tmp_path / "store" / "objects"
    (objects / ".0123456789abcdef.tmp").write_bytes(b"12345")
    (objects / digest[:2] / ".fedcba9876543210.tmp").write_bytes(b"123")
    (objects / "README").write_bytes(b"not ours")
    (objects / digest[:2] / "not-a-digest").write_bytes(b"not ours")
    assert store.statistics() == StoreStatistics(objects=1, bytes=18, plans=0)
    report = store.collect(KEEP_ALL)
    assert report == CollectReport(objects_removed=1, bytes_freed=len(b"kept? no: unpinned") + 8)
    assert sorted(p.name for p in files_below(objects)) == ["README", "not-a-digest"]


# --- snapshots of memory sandboxes -----------------------------------------------------------


TEXTS = {
    "a.txt": "hi",
    "src/app.py": "print('hé')\n",
    "empty": "",
    "lone-surrogate": "x\ud800y",
    "dir/pa\udcffth": "a path that is not UTF-8",
    "\0starts-with-nul": "NUL cannot be in a file name, but it can be a key",
}


def test_texts_round_trip(store: ContentStore) -> None:
    """Every text, every path (surrogates and NUL included) comes back exactly."""
    digest = store.snapshot_texts(TEXTS)
    assert store.texts(digest) == TEXTS
    entries = store.manifest(digest)
    assert {entry.path for entry in entries} == set(TEXTS)
    for entry in entries:
        # The digests a memory sandbox's changeset shows.
        expected = _text_digest(TEXTS[entry.path])
        assert (entry.kind, entry.sha256, entry.size) == ("text", expected.sha256, expected.size)


def test_a_text_manifest_is_the_documented_json(store: ContentStore) -> None:
    """The manifest of {"a.txt": "hi"} is exactly the module docstring's, with a fixed digest."""
    literal = (
        b'[["a.txt","text","8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4",2]]'
    )
    digest = store.snapshot_texts({"a.txt": "hi"})
    assert store.get(digest) == literal
    assert digest == sha(literal)
    assert digest == "b7d03020f846fb4eff8d40ff9bafb9b5cc1f1f4eff09cbe7db728af26eaa5b3a"
    assert store.manifest(digest) == [ManifestEntry("a.txt", "text", sha(b"hi"), 2)]


def test_a_manifest_digest_is_stable(store: ContentStore, tmp_path: Path) -> None:
    """Insertion order, the store, and the run do not change a snapshot's digest."""
    forward = store.snapshot_texts(TEXTS)
    backward = store.snapshot_texts(dict(reversed(TEXTS.items())))
    elsewhere = ContentStore(tmp_path / "other").snapshot_texts(TEXTS)
    assert forward == backward == elsewhere
    raw = store.get(forward)
    # Escaped paths: NUL then the hex of the bytes; they sort first.
    assert raw.startswith(b'[["\\u000000' + b"starts-with-nul".hex().encode() + b'","text"')
    assert b'"\\u0000' + "dir/pa\udcffth".encode("utf-8", "surrogatepass").hex().encode() in raw


def test_texts_must_be_text(store: ContentStore) -> None:
    """A memory sandbox holds text by path; anything else is a TypeError."""
    with pytest.raises(TypeError, match="holds text by path"):
        store.snapshot_texts({"a": b"bytes"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="holds text by path"):
        store.snapshot_texts({1: "one"})  # type: ignore[dict-item]


# --- snapshots of folders ------------------------------------------------------------------


def test_folder_round_trip(store: ContentStore, tmp_path: Path) -> None:
    """Files, empty files, nested folders and links come back exactly; the journal and the
    FIFO are left out; the entries are the digests a changeset shows (``_scan``)."""
    source = tmp_path / "source"
    make_tree(source)
    digest = store.snapshot_folder(source)
    entries = store.manifest(digest)
    assert [entry.path for entry in entries] == sorted(tree(source))
    assert {entry.path: (entry.sha256, entry.size) for entry in entries} == {
        path: (found.sha256, found.size) for path, found in _scan(os.fspath(source)).items()
    }
    assert {entry.path: entry.kind for entry in entries}["pkg-link"] == "link"
    target = tmp_path / "restored" / "here"
    store.restore(digest, target)
    assert tree(target) == tree(source)
    assert not (target / JOURNAL).exists() and not (target / "pipe").exists()
    assert not (target / "empty-folder").exists()  # folders are not entries
    assert (target / "pkg-link").is_symlink() and (target / "src" / "pkg").is_dir()


def test_a_folder_manifest_is_hand_computable(store: ContentStore, tmp_path: Path) -> None:
    """A file and a link: the manifest is the JSON one would write by hand."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.txt").write_bytes(b"hi")
    os.symlink("a.txt", source / "l")
    link = sha(b"symlink\0a.txt")
    assert link == _link_digest("a.txt").sha256
    literal = f'[["a.txt","file","{sha(b"hi")}",2],["l","link","{link}",5]]'.encode()
    digest = store.snapshot_folder(source)
    assert digest == sha(literal)
    assert store.get(digest) == literal
    assert store.get(link) == b"symlink\0a.txt"


def test_non_utf8_file_names_round_trip(store: ContentStore, tmp_path: Path) -> None:
    """A file name that is not UTF-8 keeps its bytes through a snapshot and a restore."""
    source = tmp_path / "source"
    source.mkdir()
    raw = b"caf\xe9"
    try:
        fd = os.open(os.path.join(os.fsencode(source), raw), os.O_WRONLY | os.O_CREAT, 0o644)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    os.write(fd, b"latin-1")
    os.close(fd)
    os.symlink(os.fsdecode(b"caf\xe9"), source / "to-cafe")
    digest = store.snapshot_folder(source)
    assert b'"\\u0000' + raw.hex().encode() + b'","file"' in store.get(digest)
    assert [entry.path for entry in store.manifest(digest)] == [os.fsdecode(raw), "to-cafe"]
    target = tmp_path / "restored"
    store.restore(digest, target)
    assert sorted(os.listdir(os.fsencode(target))) == [raw, b"to-cafe"]
    assert (target / os.fsdecode(raw)).read_bytes() == b"latin-1"
    assert os.readlink(os.fsencode(target / "to-cafe")) == raw


def test_one_changed_file_stores_one_blob_and_one_manifest(
    store: ContentStore, tmp_path: Path
) -> None:
    """Deduplication: the second snapshot after a one-file fix adds exactly two objects."""
    source = tmp_path / "source"
    (source / "pkg").mkdir(parents=True)
    for name in ("a.py", "b.py", "pkg/c.py", "pkg/d.py"):
        (source / name).write_text(f"# {name}\n")
    os.symlink("a.py", source / "alias")
    first = store.snapshot_folder(source)
    before = stored(store)
    assert len(before) == 4 + 1 + 1  # four files, one link, one manifest
    (source / "pkg" / "c.py").write_text("# fixed\n")
    second = store.snapshot_folder(source)
    assert stored(store) - before == {sha(b"# fixed\n"), second}
    assert len(stored(store)) == len(before) + 2
    assert store.snapshot_folder(source) == second
    assert len(stored(store)) == len(before) + 2
    assert first != second


def test_known_digests_spare_reading_stored_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``known``, a stored file of the right size is not opened; a wrong size is read."""
    store = ContentStore(tmp_path / "store")
    source = tmp_path / "source"
    source.mkdir()
    for name in ("one", "two", "three"):
        (source / name).write_text(name * 100)
    first = store.snapshot_folder(source)
    known = {path: found.sha256 for path, found in _scan(os.fspath(source)).items()}
    (source / "two").write_text("changed: longer than before")
    known["three"] = "not a digest"
    opened: list[str] = []
    real_open = os.open

    def spy(path: Any, *args: Any, **kwargs: Any) -> int:
        opened.append(os.fsdecode(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    second = store.snapshot_folder(source, known)
    monkeypatch.undo()
    read = {Path(path).name for path in opened if Path(path).parent == source}
    assert read == {"two", "three"}  # "one" was trusted; "two" changed size; "three" unknown
    assert {entry.path: entry.sha256 for entry in store.manifest(second)} == {
        path: found.sha256 for path, found in _scan(os.fspath(source)).items()
    }
    assert first != second


def test_restore_refuses_a_folder_that_is_not_empty(store: ContentStore, tmp_path: Path) -> None:
    """The target must be empty or absent; a file is no target either."""
    digest = store.snapshot_texts({})
    (tmp_path / "empty").mkdir()
    assert store.snapshot_folder(tmp_path / "empty") == digest  # [] either way
    target = tmp_path / "busy"
    target.mkdir()
    (target / "already").write_bytes(b"")
    where = store.where
    with pytest.raises(StoreError) as caught:
        store.restore(digest, target)
    assert str(caught.value) == (
        f"content store {where}: cannot restore into {os.fspath(target)!r}: the folder is not empty"
    )
    with pytest.raises(StoreError, match="not a folder"):
        store.restore(digest, target / "already")
    (target / "already").unlink()
    store.restore(digest, target)
    assert list(target.iterdir()) == []


# --- manifests that are not what a snapshot writes --------------------------------------------


def test_what_is_not_a_manifest_is_refused(store: ContentStore) -> None:
    """Bad JSON, bad entries, unsorted or mixed entries, unsafe paths: one line naming why."""
    blob = sha(b"x")
    store.put(b"x")
    cases = [
        ("JSON is malformed", store.put(b"not json")),
        ("Expected `str` matching regex", wire(store, [["a", "file", "F" * 64, 1]])),
        ("Invalid enum value 'dir'", wire(store, [["a", "dir", blob, 1]])),
        (
            "not sorted and unique at entry 1",
            wire(store, [["b", "file", blob, 1], ["a", "file", blob, 1]]),
        ),
        ("unique at entry 1", wire(store, [["a", "file", blob, 1], ["a", "file", blob, 1]])),
        ("mixes texts with files", wire(store, [["a", "file", blob, 1], ["b", "text", blob, 1]])),
        (
            "path '../up' is not a normalised relative path",
            wire(store, [["../up", "file", blob, 1]]),
        ),
        ("path 'a//b' is not a normalised", wire(store, [["a//b", "file", blob, 1]])),
        ("path '/abs' is not a normalised", wire(store, [["/abs", "file", blob, 1]])),
        (
            f"path '{JOURNAL}/lock' is inside the journal folder",
            wire(store, [[f"{JOURNAL}/lock", "file", blob, 1]]),
        ),
        ("path 'a\\x00b' contains NUL", wire(store, [["a\0b", "file", blob, 1]])),
        # Not hex; hex of a name that needs no escape; a text path that is not UTF-8.
        ("entry 0 has a malformed path", wire(store, [["\0zz", "file", blob, 1]])),
        ("entry 0 has a malformed path", wire(store, [["\0" + b"plain".hex(), "file", blob, 1]])),
        ("entry 0 has a malformed path", wire(store, [["\0ff", "text", blob, 1]])),
    ]
    for why, digest in cases:
        with pytest.raises(StoreError) as caught:
            store.manifest(digest)
        message = str(caught.value)
        assert f"object {digest} is not a manifest: " in message
        assert why in message
        assert "\n" not in message


def test_texts_and_folders_are_not_confused(store: ContentStore, tmp_path: Path) -> None:
    """A folder manifest is no memory sandbox, and a text manifest no folder."""
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "f").write_bytes(b"f")
    folder = store.snapshot_folder(tmp_path / "source")
    texts = store.snapshot_texts({"f": "f"})
    with pytest.raises(StoreError, match=f"manifest {folder} holds a folder, not texts"):
        store.texts(folder)
    with pytest.raises(StoreError, match=f"manifest {texts} holds texts, not a folder"):
        store.restore(texts, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_manifests_that_disagree_with_their_objects(store: ContentStore, tmp_path: Path) -> None:
    """A wrong size, a link object without its prefix, or a text that is not UTF-8 is refused."""
    blob = store.put(b"four")
    latin = store.put(b"\xff")
    for entries, why in [
        ([["t", "text", blob, 5]], "lists 't' as 5 bytes of text"),
        ([["t", "text", latin, 1]], f"object {latin} is not UTF-8"),
    ]:
        with pytest.raises(StoreError, match=why):
            store.texts(wire(store, entries))
    for number, (entries, why) in enumerate(
        [
            ([["l", "link", blob, 0]], "lists 'l' as 0 bytes of link"),
            ([["f", "file", blob, 3]], "lists 'f' as 3 bytes of file"),
        ]
    ):
        with pytest.raises(StoreError, match=why):
            store.restore(wire(store, entries), tmp_path / f"out{number}")


def test_restore_detects_missing_and_corrupt_objects(store: ContentStore, tmp_path: Path) -> None:
    """Restore checks every object as it copies it."""
    (tmp_path / "source").mkdir()
    (tmp_path / "source" / "f").write_bytes(b"content")
    os.symlink("f", tmp_path / "source" / "l")
    digest = store.snapshot_folder(tmp_path / "source")
    corrupt(store, sha(b"content"), b"CONTENT")
    with pytest.raises(StoreError, match=f"object {sha(b'content')} is corrupt: its bytes hash to"):
        store.restore(digest, tmp_path / "one")
    remove(store, sha(b"content"))
    with pytest.raises(StoreError, match=f"object {sha(b'content')} is missing"):
        store.restore(digest, tmp_path / "two")
    remove(store, _link_digest("f").sha256)
    only_link = wire(store, [["l", "link", _link_digest("f").sha256, 1]])
    with pytest.raises(StoreError, match="is missing"):
        store.restore(only_link, tmp_path / "three")
    remove(store, digest)
    with pytest.raises(StoreError, match=f"object {digest} is missing"):
        store.restore(digest, tmp_path / "four")


def test_restore_never_writes_through_a_link(store: ContentStore, tmp_path: Path) -> None:
    """An entry below a link in a crafted manifest is refused; nothing lands outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    link = store.put(b"symlink\0" + os.fsencode(outside))
    blob = store.put(b"escaped")
    digest = wire(
        store,
        [["a", "link", link, len(os.fsencode(outside))], ["a/b", "file", blob, 7]],
    )
    with pytest.raises(StoreError, match=f"manifest {digest} lists 'a/b' below a file or link"):
        store.restore(digest, tmp_path / "target")
    assert list(outside.iterdir()) == []


# --- retention -------------------------------------------------------------------------------


def three_plans(store: ContentStore) -> dict[str, Any]:
    """Three plans a day apart: each with a blob of its own, all sharing one."""
    plans = [ulid_at(NOW - days * DAY) for days in (10, 3, 1)]
    manifests = [
        store.snapshot_texts({"shared.txt": "shared", "own.txt": f"plan {n}"}, plan_id=plan)
        for n, plan in enumerate(plans)
    ]
    garbage = store.put(b"reachable from no plan")
    return {"plans": plans, "manifests": manifests, "garbage": garbage}


def test_retention_by_count(store: ContentStore) -> None:
    """keep_plans=2 drops the oldest plan: its manifest and own blob go, the shared blob stays."""
    made = three_plans(store)
    before = stored(store)
    assert len(before) == 1 + 3 + 3 + 1
    oldest, *newer = made["plans"]
    gone = {made["manifests"][0], sha(b"plan 0"), made["garbage"]}
    freed = sum(len(store.get(digest)) for digest in gone)
    report = store.collect(StoreRetention(keep_plans=2), now=NOW)
    assert report == CollectReport(
        plans_kept=2, plans_dropped=1, objects_kept=5, objects_removed=3, bytes_freed=freed
    )
    assert stored(store) == before - gone
    assert store.pinned(oldest) == frozenset()
    for plan, manifest in zip(newer, made["manifests"][1:], strict=True):
        assert store.pinned(plan) == {manifest}
        assert store.texts(manifest)["shared.txt"] == "shared"
    assert store.collect(StoreRetention(keep_plans=2), now=NOW) == CollectReport(
        plans_kept=2, objects_kept=5
    )
    assert store.statistics().plans == 2
    store.collect(StoreRetention(keep_plans=0), now=NOW)
    assert stored(store) == set()


def test_retention_by_age(store: ContentStore) -> None:
    """max_age_days=5 drops the plan of ten days ago and keeps those of three and one."""
    made = three_plans(store)
    report = store.collect(StoreRetention(keep_plans=None, max_age_days=5), now=NOW)
    assert (report.plans_kept, report.plans_dropped, report.objects_removed) == (2, 1, 3)
    assert stored(store) == {
        sha(b"shared"),
        sha(b"plan 1"),
        sha(b"plan 2"),
        *made["manifests"][1:],
    }
    # Both limits: the newest only by count, and the age limit then drops nothing more.
    report = store.collect(StoreRetention(keep_plans=1, max_age_days=5), now=NOW)
    assert (report.plans_kept, report.plans_dropped, report.objects_removed) == (1, 1, 2)
    report = store.collect(StoreRetention(keep_plans=1, max_age_days=0.5), now=NOW)
    assert (report.plans_kept, report.plans_dropped) == (0, 1)
    assert stored(store) == set()


def test_a_plan_id_that_is_not_a_ulid_is_dated_by_its_last_pin(store: ContentStore) -> None:
    """A user-given plan id ages from when it was last pinned."""
    digest = store.snapshot_texts({"a": "a"}, plan_id="nightly-build")
    now = time.time()
    week = StoreRetention(keep_plans=None, max_age_days=7)
    assert store.collect(week, now=now + 6 * DAY).plans_kept == 1
    assert store.has(digest)
    assert store.collect(week, now=now + 8 * DAY).plans_dropped == 1
    assert not store.has(digest)


def test_an_unpinned_snapshot_is_collected(store: ContentStore) -> None:
    """A snapshot nobody pins is garbage; pinning it after the collect fails loudly."""
    digest = store.snapshot_texts({"a": "a"})
    assert store.collect(KEEP_ALL).objects_removed == 2
    with pytest.raises(StoreError, match=f"object {digest} is missing"):
        store.pin(ulid_at(NOW), [digest])


def test_pins_add_up(store: ContentStore) -> None:
    """A plan pinned again keeps its earlier manifests; a repeated pin adds nothing."""
    plan = ulid_at(NOW)
    first = store.snapshot_texts({"round": "1"})
    second = store.snapshot_texts({"round": "2"})
    store.pin(plan, [first])
    store.pin(plan, [second, first, second])
    store.pin(plan, [])
    store.pin(plan, [first])
    assert store.pinned(plan) == {first, second}
    assert store.collect(KEEP_ALL).objects_kept == 4
    assert store.texts(first) == {"round": "1"} and store.texts(second) == {"round": "2"}
    if store.root is not None:
        assert (store.root / "refs" / plan).read_text() == f"{first}\n{second}\n"


def test_pin_refuses_what_is_not_a_pinnable_manifest(store: ContentStore) -> None:
    """A bad plan id is a ConfigError; a blob or a missing object a StoreError."""
    blob = store.put(b"not a manifest")
    with pytest.raises(ConfigError, match="is not a plan id"):
        store.pin("../escape", [])
    with pytest.raises(ConfigError, match="is not a plan id"):
        store.snapshot_texts({}, plan_id="no/slashes")
    with pytest.raises(ConfigError, match="is not a plan id"):
        store.snapshot_folder(".", plan_id="")
    with pytest.raises(StoreError, match=f"object {blob} is not a manifest"):
        store.pin("plan", [blob])
    assert store.pinned("plan") == frozenset()


def test_collect_refuses_a_kept_pin_it_cannot_read(store: ContentStore) -> None:
    """A pinned manifest that is gone stops the collect before anything is removed."""
    plan = ulid_at(NOW)
    digest = store.snapshot_texts({"a": "a"}, plan_id=plan)
    garbage = store.put(b"garbage")
    remove(store, digest)
    where = store.where
    with pytest.raises(StoreError) as caught:
        store.collect(KEEP_ALL)
    assert str(caught.value) == (
        f"content store {where}: plan {plan} pins a manifest that cannot be read "
        f"(object {digest} is missing); nothing was collected"
    )
    assert store.has(garbage) and store.pinned(plan) == {digest}


def test_refs_survive_an_append_cut_short(tmp_path: Path) -> None:
    """A torn last line (a crash mid-pin) is skipped and never glued to the next pin."""
    store = ContentStore(tmp_path / "store")
    plan = ulid_at(NOW)
    first = store.snapshot_texts({"a": "1"}, plan_id=plan)
    second = store.snapshot_texts({"a": "2"})
    refs = tmp_path / "store" / "refs" / plan
    refs.write_text(f"{first}\n{second[:20]}")
    assert store.pinned(plan) == {first}
    store.pin(plan, [second])
    assert refs.read_text() == f"{first}\n{second[:20]}\n{second}\n"
    assert store.pinned(plan) == {first, second}
    (tmp_path / "store" / "refs" / ".not-a-plan").write_text("ignored")
    assert store.collect(KEEP_ALL).plans_kept == 1
    refs.write_text(f"{first}\nthis is no digest\n")
    with pytest.raises(StoreError) as caught:
        store.pinned(plan)
    assert str(caught.value) == (
        f"content store {tmp_path / 'store'}: the refs of plan {plan} are unreadable: "
        "line 2 is not a digest"
    )


def test_statistics(store: ContentStore) -> None:
    """Objects, their bytes and the plans with pins are counted."""
    store.snapshot_texts({"a": "abc"}, plan_id=ulid_at(NOW))
    manifest = store.snapshot_texts({"a": "abc"})
    size = len(store.get(manifest)) + 3
    assert store.statistics() == StoreStatistics(objects=2, bytes=size, plans=1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"keep_plans": -1},
            "Value error, keep_plans must be 0 or more (None keeps every plan), got -1",
        ),
        ({"keep_plans": True}, "Input should be a valid integer"),
        ({"keep_plans": "5"}, "Input should be a valid integer"),
        ({"keep_plans": 2.0}, "Input should be a valid integer"),
        (
            {"max_age_days": 0},
            "Value error, max_age_days must be more than 0 (None keeps plans of any age), got 0.0",
        ),
        (
            {"max_age_days": -3.5},
            "Value error, max_age_days must be more than 0 (None keeps plans of any age), got -3.5",
        ),
        ({"max_age_days": float("inf")}, "Input should be a finite number"),
        ({"max_age_days": "7"}, "Input should be a valid number"),
        ({"keep": 3}, "Extra inputs are not permitted"),
    ],
)
def test_bad_retention_is_one_clear_line(arguments: dict[str, Any], message: str) -> None:
    """Each bad retention value is one error, one line, saying what is allowed."""
    with pytest.raises(ValidationError) as caught:
        StoreRetention(**arguments)
    errors = caught.value.errors()
    assert len(errors) == 1
    assert errors[0]["msg"] == message


def test_retention_defaults_and_is_frozen() -> None:
    """By default the 100 most recent plans are kept, at any age; a retention is immutable."""
    retention = StoreRetention()
    assert (retention.keep_plans, retention.max_age_days) == (100, None)
    assert StoreRetention(max_age_days=3).max_age_days == 3.0
    with pytest.raises(ValidationError, match="frozen"):
        retention.keep_plans = 5  # type: ignore[misc]


# --- concurrency -----------------------------------------------------------------------------


class Pausing:
    """A manifest encoder that stops a snapshot after its blobs are stored, before its
    manifest is: the moment a collect must not see."""

    def __init__(self) -> None:
        self.real = store_module._MANIFEST_ENCODER
        self.paused = threading.Event()
        self.go = threading.Event()

    def encode(self, entries: object) -> bytes:
        self.paused.set()
        assert self.go.wait(30)
        return self.real.encode(entries)


def test_collect_waits_for_a_snapshot_in_another_thread(
    store: ContentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collect started mid-snapshot waits, then keeps everything the snapshot pinned."""
    garbage = store.put(b"garbage")
    pausing = Pausing()
    monkeypatch.setattr(store_module, "_MANIFEST_ENCODER", pausing)
    plan = ulid_at(NOW)
    files = {"a.py": "new in this round", "b.py": "also new"}
    results: dict[str, Any] = {}
    writer = threading.Thread(
        target=lambda: results.setdefault("digest", store.snapshot_texts(files, plan_id=plan))
    )
    collector = threading.Thread(
        target=lambda: results.setdefault("report", store.collect(KEEP_ALL))
    )
    writer.start()
    assert pausing.paused.wait(30)
    collector.start()
    collector.join(0.3)
    assert collector.is_alive()  # held off by the writer's shared lock
    pausing.go.set()
    writer.join(30)
    collector.join(30)
    assert store.texts(results["digest"]) == files
    assert results["report"] == CollectReport(
        plans_kept=1,
        objects_kept=3,
        objects_removed=1,
        bytes_freed=len(b"garbage"),
    )
    assert not store.has(garbage)


CHILD = """
import sys
from gategraph.runtime._storage import _store

real = _store._MANIFEST_ENCODER


class Pausing:
    def encode(self, entries):
        print("paused", flush=True)
        sys.stdin.readline()
        return real.encode(entries)


_store._MANIFEST_ENCODER = Pausing()
store = _store.ContentStore(sys.argv[1])
print(store.snapshot_texts({"a.py": "from the child", "b.py": "too"}, plan_id=sys.argv[2]))
"""


def test_collect_waits_for_a_snapshot_in_another_process(tmp_path: Path) -> None:
    """Two processes share a store: a collect waits for the other's snapshot to be pinned."""
    root = tmp_path / "store"
    store = ContentStore(root)
    garbage = store.put(b"garbage")
    plan = ulid_at(NOW)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, os.fspath(root), plan],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline() == "paused\n"
        results: dict[str, CollectReport] = {}
        collector = threading.Thread(
            target=lambda: results.setdefault("report", store.collect(KEEP_ALL))
        )
        collector.start()
        collector.join(0.3)
        assert collector.is_alive()
        child.stdin.write("go\n")
        child.stdin.flush()
        digest = child.stdout.readline().strip()
        assert child.wait(30) == 0
    finally:
        if child.poll() is None:  # pragma: no cover - only when the test fails
            child.kill()
        child.stdin.close()
        child.stdout.close()
    collector.join(30)
    assert store.texts(digest) == {"a.py": "from the child", "b.py": "too"}
    assert results["report"].objects_removed == 1
    assert not store.has(garbage) and store.pinned(plan) == {digest}


def test_writers_in_many_threads_agree(store: ContentStore) -> None:
    """Threads storing the same and different content at once get whole, shared objects."""
    barrier = threading.Barrier(8)
    digests: list[str] = []
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            barrier.wait(30)
            digests.append(
                store.snapshot_texts({"same": "same", f"own{n % 2}": "x"}, plan_id=ulid_at(NOW + n))
            )
        except BaseException as exc:  # pragma: no cover - only when the test fails
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and len(set(digests)) == 2
    assert store.collect(KEEP_ALL) == CollectReport(plans_kept=8, objects_kept=4)
    if store.root is not None:
        assert all(not p.name.startswith(".") for p in files_below(store.root / "objects"))


@pytest.fixture
def held(store: ContentStore, tmp_path: Path) -> Iterator[ContentStore]:
    """The store, its lock held exclusively by someone else (another process's collect)."""
    if store.where.startswith("postgresql"):
        import psycopg
        from gategraph.runtime._storage._store import _STORE_LOCK

        store.put(b"make the tables")
        with psycopg.connect(store._backend.url, autocommit=True) as other:  # type: ignore[attr-defined]
            other.execute("SELECT pg_advisory_lock(%s)", (_STORE_LOCK,))
            yield store
        return
    if store.root is None:
        with store._backend.locked(exclusive=True):  # type: ignore[attr-defined]
            yield store
        return
    store.put(b"make the folder")
    fd = os.open(store.root / "lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield store
    finally:
        os.close(fd)


def test_what_a_store_keeps_and_where(tmp_path: Path, postgres_url: str) -> None:
    """On disk and in a database it keeps the files; in memory only folders' digests. A
    database is named without its password; closing holds nothing open after."""
    memory, disk = ContentStore(None), ContentStore(tmp_path / "s")
    assert not memory.keeps_copies and memory.where == "in memory"
    assert disk.keeps_copies and disk.where == os.fspath(tmp_path / "s")
    disk.close()  # nothing to let go of
    secret = postgres_url.replace("postgres@", "postgres:hunter2@", 1)
    database = ContentStore(secret)
    assert database.keeps_copies and "hunter2" not in repr(database) + database.where
    database.close()
    digest = database.put(b"after a close, it opens again")
    database.close()
    reopened = ContentStore(postgres_url)
    assert reopened.get(digest) == b"after a close, it opens again"
    reopened.close()


def test_a_database_whose_tables_cannot_be_made_is_one_line(postgres_url: str) -> None:
    """A role with no CREATE on the schema, and no tables yet: one ConfigError naming the
    database (without its password) and the reason; nothing half made."""
    import psycopg
    from gategraph.runtime import ConfigError

    role = f"reader_{os.urandom(4).hex()}"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'hunter2'")
        db.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    try:
        store = ContentStore(postgres_url.replace("postgres@", f"{role}:hunter2@", 1))
        with pytest.raises(
            ConfigError, match=r"cannot use the content store's table: .*permission"
        ) as caught:
            store.put(b"x")
        assert "hunter2" not in str(caught.value) and "\n" not in str(caught.value)
        store.close()
        assert in_database(ContentStore(postgres_url), "SELECT to_regclass('store_pins')") == [
            (None,)
        ]
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute(f"DROP ROLE {role}")


def test_a_large_snapshot_is_written_as_it_goes(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the bytes a database store holds in memory, new objects are written before the
    snapshot ends; the snapshot is whole either way."""
    monkeypatch.setattr(store_module, "_ROWS_HELD", 10)
    store = ContentStore(postgres_url)
    source = tmp_path / "source"
    source.mkdir()
    for number in range(5):
        (source / f"f{number}").write_bytes(b"content %d, more than ten bytes" % number)
    written: list[int] = []
    real = store._backend._write  # type: ignore[attr-defined]
    monkeypatch.setattr(
        store._backend, "_write", lambda batch: (written.append(len(batch.rows)), real(batch))
    )
    digest = store.snapshot_folder(source)
    assert len([n for n in written if n]) >= 5  # one object at a time, then the manifest
    store.restore(digest, tmp_path / "out")
    assert tree(tmp_path / "out") == tree(source)
    store.close()


def test_a_lock_held_too_long_is_an_error(
    held: ContentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer gives up on a lock that stays taken, with a one-line error."""
    monkeypatch.setattr(store_module, "_LOCK_WAIT", 0.05)
    where = held.where
    with pytest.raises(StoreError) as caught:
        held.put(b"waits")
    assert str(caught.value) == (
        f"content store {where}: its lock has been held by another writer or collect for 0 s; "
        "gave up"
    )
    with pytest.raises(StoreError, match="gave up"):
        held.collect(KEEP_ALL)


def test_a_collect_is_due_for_a_batch_of_plans_or_an_aged_one(tmp_path: Path) -> None:
    """collect_due: more plans pinned than kept by a tenth (at least one), or a plan a day
    past the age limit; never for an empty store."""
    from gategraph.runtime._base._ids import new_ulid

    store = ContentStore(tmp_path / "s")
    keep = StoreRetention(keep_plans=10)
    assert not store.collect_due(keep)
    plans = [new_ulid() for _ in range(12)]
    for number, plan_id in enumerate(plans):
        store.snapshot_texts({"a": str(number)}, plan_id=plan_id)
        assert store.collect_due(keep) is (number + 1 > 11)
    aged = StoreRetention(keep_plans=None, max_age_days=1.0)
    now = time.time()
    assert not store.collect_due(aged, now=now)
    assert store.collect_due(aged, now=now + 2.5 * 86_400)


def test_a_snapshot_makes_its_new_objects_durable_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ``syncfs`` for all the new objects of a snapshot (and one for their names), not
    an ``fsync`` each: a large tree's first snapshot costs two flushes, not thousands."""
    folder = tmp_path / "box"
    folder.mkdir()
    for n in range(60):
        (folder / f"f{n}.txt").write_text(f"file {n}\n")
    (folder / "same.txt").write_text("file 0\n")  # the same bytes: one object
    calls = {"syncfs": 0, "file_fsyncs": 0}
    real_syncfs, real_fsync = store_module._syncfs, os.fsync

    def counting_syncfs(path: Path) -> bool:
        calls["syncfs"] += 1
        return real_syncfs(path)

    def counting_fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            calls["file_fsyncs"] += 1
        real_fsync(fd)

    monkeypatch.setattr(store_module, "_syncfs", counting_syncfs)
    monkeypatch.setattr(os, "fsync", counting_fsync)
    store = ContentStore(tmp_path / "store")
    digest = store.snapshot_folder(folder)
    if sys.platform.startswith("linux"):
        # The objects, then the manifest: two batches, each synced before and after naming;
        # each new object's own fsync then finds its pages clean, and says if its write
        # failed (what a file system's syncfs may not say of one file).
        assert calls == {"syncfs": 4, "file_fsyncs": 61}
    assert len(files_below(tmp_path / "store" / "objects")) == 61  # 60 contents, 1 manifest
    restored = tmp_path / "restored"
    store.restore(digest, restored)
    assert (restored / "same.txt").read_text() == "file 0\n"


def test_a_snapshot_that_cannot_name_its_objects_leaves_none_behind(tmp_path: Path) -> None:
    """A failure while the new objects are named (a fan folder that is a file) leaves no
    temporary file in the store: those not named yet go too."""
    folder = tmp_path / "box"
    folder.mkdir()
    for n in range(20):
        (folder / f"f{n}.txt").write_text(f"file {n}\n")
    digest = hashlib.sha256(b"file 7\n").hexdigest()
    objects = tmp_path / "store" / "objects"
    objects.mkdir(parents=True)
    (objects / digest[:2]).write_text("not a folder")
    with pytest.raises(NotADirectoryError):
        ContentStore(tmp_path / "store").snapshot_folder(folder)
    assert [p.name for p in objects.iterdir() if p.name.endswith(".tmp")] == []


def test_syncfs_is_used_where_linux_has_it_and_says_a_failed_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without syncfs (not Linux, no such call, ENOSYS) each file's fsync does it all; a
    write the file system reports failed is an error."""
    import ctypes

    if not sys.platform.startswith("linux"):
        pytest.skip("syncfs is Linux's")
    assert store_module._syncfs(tmp_path) is True

    class NoSyncfs:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

    monkeypatch.setattr(ctypes, "CDLL", NoSyncfs)
    assert store_module._syncfs(tmp_path) is False

    def failing_with(code: int) -> type:
        class Libc:
            def __init__(self, *args: object, **kwargs: object) -> None:
                pass

            @staticmethod
            def syncfs(fd: int) -> int:
                ctypes.set_errno(code)
                return -1

        return Libc

    monkeypatch.setattr(ctypes, "CDLL", failing_with(errno.ENOSYS))
    assert store_module._syncfs(tmp_path) is False
    monkeypatch.setattr(ctypes, "CDLL", failing_with(errno.EIO))
    with pytest.raises(OSError, match="syncfs"):
        store_module._syncfs(tmp_path)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert store_module._syncfs(tmp_path) is False
