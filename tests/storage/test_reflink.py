"""Copies that share blocks: the plan's copy of a folder and the content store's objects are
reflinks where the file system can make them (btrfs, XFS), plain copies elsewhere, and what
each is named after is always what it holds.

The logic runs everywhere, with the kernel's clone played by a stand-in; the real thing runs
on a file system that clones, named by ``GATEGRAPH_TEST_REFLINK_DIR`` (CI mounts an XFS image
there, and sets ``GATEGRAPH_REQUIRE_REFLINK`` so that it cannot skip), and skips elsewhere.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gategraph.runtime._storage import _resources
from gategraph.runtime._storage._resources import DirectoryResource, _copy_digest, _Digest
from gategraph.runtime._storage._store import ContentStore

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FICLONE is Linux's")


def digest_of(data: bytes) -> _Digest:
    return _Digest(hashlib.sha256(data).hexdigest(), len(data))


@pytest.fixture
def clones(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """Every clone succeeds, played by copying the source's bytes as they are then; the
    (source, target) pairs asked for, in order."""
    asked: list[tuple[int, int]] = []
    real = _resources.fcntl.ioctl

    def ioctl(fd: int, request: int, arg: int, *rest: object) -> object:
        if request != _resources._FICLONE:
            return real(fd, request, arg, *rest)
        asked.append((arg, fd))
        data = os.pread(arg, 1 << 30, 0)
        os.pwrite(fd, data, 0)
        return 0

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    monkeypatch.setattr(_resources, "_unclonable", set())
    yield asked


def files(tmp_path: Path, data: bytes) -> tuple[int, int, Path]:
    source = tmp_path / "source"
    source.write_bytes(data)
    fd = os.open(source, os.O_RDONLY)
    out = os.open(tmp_path / "copy", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    return fd, out, source


def test_a_clone_is_named_by_what_it_holds(tmp_path: Path, clones: list[tuple[int, int]]) -> None:
    fd, out, _ = files(tmp_path, b"print('hello')\n")
    try:
        assert _copy_digest(fd, out) == digest_of(b"print('hello')\n")
        assert clones == [(fd, out)]
    finally:
        os.close(fd)
        os.close(out)
    assert (tmp_path / "copy").read_bytes() == b"print('hello')\n"


def test_a_source_that_changes_after_its_clone_leaves_the_copy_named_by_its_own_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As a write through a memory map does, which leaves the source's times as they were:
    # only reading the copy tells what it holds.
    monkeypatch.setattr(_resources, "_unclonable", set())
    fd, out, source = files(tmp_path, b"old\n")

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        assert request == _resources._FICLONE
        os.pwrite(target, os.pread(arg, 100, 0), 0)  # the clone: the old bytes
        with open(source, "r+b") as mapped:  # then the source changes
            mapped.write(b"new\n")
        return 0

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    try:
        assert _copy_digest(fd, out) == digest_of(b"old\n")
    finally:
        os.close(fd)
        os.close(out)


def test_a_file_system_that_cannot_clone_is_asked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_resources, "_unclonable", set())
    asked: list[int] = []

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        asked.append(target)
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    (tmp_path / "tree").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "tree" / name).write_bytes(name.encode() * 1000)
    box = DirectoryResource("repo", tmp_path / "tree").open_sandbox(tmp_path / "box")
    assert len(asked) == 1
    assert {path: d.sha256 for path, d in box._base.items()} == {
        name: hashlib.sha256(name.encode() * 1000).hexdigest() for name in ("a", "b", "c")
    }
    assert (tmp_path / "box" / "b").read_bytes() == b"b" * 1000


@pytest.mark.parametrize("error", [errno.EINVAL, errno.EPERM, errno.EIO, errno.ENOSPC])
def test_a_file_that_cannot_be_cloned_is_copied_and_the_next_is_cloned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: int
) -> None:
    # btrfs refuses a file that must not be copied on write (EINVAL): that file's, not
    # the file system's. A clone that failed part way leaves nothing in the copy.
    monkeypatch.setattr(_resources, "_unclonable", set())
    asked: list[int] = []

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        asked.append(target)
        os.pwrite(target, b"a partial clone, longer than the file", 0)
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    (tmp_path / "tree").mkdir()
    for name in ("a", "b"):
        (tmp_path / "tree" / name).write_text(name)
    box = DirectoryResource("repo", tmp_path / "tree").open_sandbox(tmp_path / "box")
    assert len(asked) == 2
    assert (tmp_path / "box" / "a").read_text() == "a"
    assert box._base["b"] == digest_of(b"b")


def test_the_store_clones_what_it_keeps_and_rebuilds_it_exactly(
    tmp_path: Path, clones: list[tuple[int, int]]
) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "mod.py").write_text("x = 1\n")
    (tree / "README").write_text("read me\n")
    store = ContentStore(tmp_path / "store")
    digest = store.snapshot_folder(tree)
    kept = len(clones)
    assert kept >= 2  # each file's object (the manifest is written, not cloned)
    store.restore(digest, tmp_path / "again")
    assert len(clones) > kept  # restored by clones too
    assert (tmp_path / "again" / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (tmp_path / "again" / "README").read_text() == "read me\n"


def test_a_file_that_changes_between_the_stores_hash_and_its_clone_is_named_by_the_clone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store hashes a file first (one read, when it holds those bytes already); a new
    # one is cloned, and the name is the clone's, never the first hash's.
    monkeypatch.setattr(_resources, "_unclonable", set())
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "data").write_bytes(b"A" * 8192)

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        (tree / "data").write_bytes(b"B" * 8192)  # changed after the first hash
        os.pwrite(target, os.pread(arg, 1 << 20, 0), 0)
        return 0

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    store = ContentStore(tmp_path / "store")
    digest = store.snapshot_folder(tree)
    (entry,) = store.manifest(digest)
    assert entry.sha256 == hashlib.sha256(b"B" * 8192).hexdigest()
    monkeypatch.undo()
    store.restore(digest, tmp_path / "again")
    assert (tmp_path / "again" / "data").read_bytes() == b"B" * 8192
    # The bytes first seen are stored under their own name when they come back.
    (tree / "data").write_bytes(b"A" * 8192)
    again = store.snapshot_folder(tree)
    store.restore(again, tmp_path / "first")
    assert (tmp_path / "first" / "data").read_bytes() == b"A" * 8192


# -- on a file system that clones


@pytest.fixture
def cloning() -> Path:
    found = os.environ.get("GATEGRAPH_TEST_REFLINK_DIR")
    if not found:
        if os.environ.get("GATEGRAPH_REQUIRE_REFLINK"):
            pytest.fail("GATEGRAPH_REQUIRE_REFLINK is set, GATEGRAPH_TEST_REFLINK_DIR is not")
        pytest.skip("no file system that clones (GATEGRAPH_TEST_REFLINK_DIR)")
    return Path(found)


def used(folder: Path) -> int:
    os.sync()
    info = os.statvfs(folder)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


@pytest.fixture
def place(cloning: Path) -> Iterator[Path]:
    folder = cloning / f"test-{os.getpid()}-{time.monotonic_ns()}"
    folder.mkdir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def tree_of(folder: Path, count: int, size: int) -> int:
    for index in range(count):
        (folder / f"f{index}.bin").write_bytes(os.urandom(size))
    return count * size


def measured(place: Path, make: Callable[[], object]) -> int:
    before = used(place)
    make()
    return used(place) - before


def test_the_plans_copy_and_the_store_share_the_trees_blocks(place: Path) -> None:
    tree = place / "tree"
    tree.mkdir()
    size = tree_of(tree, 20, 256 * 1024)  # 5 MiB
    box = DirectoryResource("repo", tree).open_sandbox(place / "box")
    store = ContentStore(place / "store")
    # The plan's copy, then the store's snapshot of it: a reflink each, so together far
    # less than the tree (their own metadata only), where plain copies take it twice.
    grew = measured(place, lambda: store.snapshot_folder(place / "box", exclusion=box.exclusion))
    assert grew < size / 4
    again = place / "again"
    grew = measured(place, lambda: DirectoryResource("repo", tree).open_sandbox(again))
    assert grew < size / 4
    for index in range(20):
        name = f"f{index}.bin"
        assert (again / name).read_bytes() == (tree / name).read_bytes()
        assert box._base[name].sha256 == hashlib.sha256((tree / name).read_bytes()).hexdigest()
    # A change to the copy is the copy's alone.
    with open(again / "f0.bin", "r+b") as changed:
        changed.write(b"changed")
    assert (tree / "f0.bin").read_bytes()[:7] != b"changed"
    assert (place / "box" / "f0.bin").read_bytes() == (tree / "f0.bin").read_bytes()
