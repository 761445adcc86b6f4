"""Copies that share blocks: the plan's copy of a folder and the content store's objects are
reflinks where the file system can make them (btrfs, XFS), plain copies elsewhere, and what
each is named after is always what it holds.

The logic runs everywhere, with the kernel's clone played by a stand-in; the real thing runs
on a file system that clones, named by ``GATEGRAPH_TEST_REFLINK_DIR`` (CI mounts an XFS image
there when it can), and skips elsewhere.
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
from gategraph.runtime import _resources
from gategraph.runtime._resources import DirectoryResource, _copy_digest, _Digest
from gategraph.runtime._store import ContentStore

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


def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file counts as last changed long ago."""
    monkeypatch.setattr(_resources, "_SETTLED_NS", -(10**18))


def files(tmp_path: Path, data: bytes) -> tuple[int, int, Path]:
    source = tmp_path / "source"
    source.write_bytes(data)
    fd = os.open(source, os.O_RDONLY)
    out = os.open(tmp_path / "copy", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    return fd, out, source


def test_a_clone_of_a_settled_file_is_named_by_the_source_it_read(
    tmp_path: Path, clones: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(monkeypatch)
    fd, out, _ = files(tmp_path, b"print('hello')\n")
    try:
        assert _copy_digest(fd, out) == digest_of(b"print('hello')\n")
        assert clones == [(fd, out)]
    finally:
        os.close(fd)
        os.close(out)
    assert (tmp_path / "copy").read_bytes() == b"print('hello')\n"


def test_a_source_changed_while_it_was_cloned_is_named_by_what_the_copy_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(monkeypatch)
    monkeypatch.setattr(_resources, "_unclonable", set())
    fd, out, source = files(tmp_path, b"old\n")
    time.sleep(0.05)  # a change later than the clock's tick: a time of change of its own

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        assert request == _resources._FICLONE
        os.pwrite(target, os.pread(arg, 100, 0), 0)  # the clone: the old bytes
        with open(source, "ab") as more:  # then the source changes
            more.write(b"new\n")
        return 0

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    try:
        assert _copy_digest(fd, out) == digest_of(b"old\n")
    finally:
        os.close(fd)
        os.close(out)


def test_a_source_changed_just_before_is_named_by_the_copy_it_cloned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Changed within the last seconds: its time of change proves nothing (a second change
    # in the same tick of the clock leaves it as it was), so the copy itself is read.
    monkeypatch.setattr(_resources, "_unclonable", set())
    fd, out, _ = files(tmp_path, b"the source\n")

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        os.pwrite(target, b"what the copy holds\n", 0)
        return 0

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    try:
        assert _copy_digest(fd, out) == digest_of(b"what the copy holds\n")
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
    for name in ("a", "b", "c"):
        (tmp_path / "tree" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "tree" / name).write_bytes(name.encode() * 1000)
    box = DirectoryResource("repo", tmp_path / "tree").open_sandbox(tmp_path / "box")
    assert len(asked) == 1
    assert {path: d.sha256 for path, d in box._base.items()} == {
        name: hashlib.sha256(name.encode() * 1000).hexdigest() for name in ("a", "b", "c")
    }
    assert (tmp_path / "box" / "b").read_bytes() == b"b" * 1000


def test_another_failure_copies_that_file_and_asks_again_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_resources, "_unclonable", set())
    asked: list[int] = []

    def ioctl(target: int, request: int, arg: int, *rest: object) -> object:
        asked.append(target)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(_resources.fcntl, "ioctl", ioctl)
    (tmp_path / "tree").mkdir()
    for name in ("a", "b"):
        (tmp_path / "tree" / name).write_text(name)
    DirectoryResource("repo", tmp_path / "tree").open_sandbox(tmp_path / "box")
    assert len(asked) == 2
    assert (tmp_path / "box" / "a").read_text() == "a"


def test_the_store_clones_what_it_keeps_and_rebuilds_it_exactly(
    tmp_path: Path, clones: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    settled(monkeypatch)
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


# -- on a file system that clones


@pytest.fixture
def cloning() -> Path:
    found = os.environ.get("GATEGRAPH_TEST_REFLINK_DIR")
    if not found:
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
