"""Run-time read-only enforcement (seed 000, "Read-Only Enforcement") at the guard level."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from _helpers import write_tree
from gategraph.runtime import ReadOnlyViolationError, ToolContext
from gategraph.runtime._calls._readonly import Guard, guarded


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "repo", {"pkg/a.py": "x = 1\n"})


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


WRITES: dict[str, Callable[[Path], object]] = {
    "open-w": lambda r: (r / "new.txt").write_text("x"),
    "open-a": lambda r: open(r / "pkg" / "a.py", "a").close(),
    "open-r+": lambda r: open(r / "pkg" / "a.py", "r+").close(),
    "os.open": lambda r: os.close(os.open(r / "t", os.O_WRONLY | os.O_CREAT)),
    "touch": lambda r: (r / "t").touch(),
    "unlink": lambda r: (r / "pkg" / "a.py").unlink(),
    "rename": lambda r: (r / "pkg" / "a.py").rename(r / "b.py"),
    "replace": lambda r: os.replace(r / "pkg" / "a.py", r / "b.py"),
    "mkdir": lambda r: (r / "d").mkdir(),
    "rmdir": lambda r: (r / "pkg").rmdir(),
    "chmod": lambda r: (r / "pkg" / "a.py").chmod(0o777),
    "utime": lambda r: os.utime(r / "pkg" / "a.py"),
    "rmtree": lambda r: shutil.rmtree(r / "pkg"),
    "symlink": lambda r: os.symlink(r / "pkg", r / "link"),
    "truncate": lambda r: os.truncate(r / "pkg" / "a.py", 0),
    "copy-into": lambda r: shutil.copy(r / "pkg" / "a.py", r / "copy.py"),
    "link": lambda r: os.link(r / "pkg" / "a.py", r / "b.py"),
    "mkfifo": lambda r: os.mkfifo(r / "fifo"),
    "mknod": lambda r: os.mknod(r / "node", stat.S_IFREG | 0o600),
    "chdir": lambda r: os.chdir(r),
}


@pytest.mark.parametrize("name", sorted(WRITES))
def test_every_kind_of_write_is_refused(name: str, tree: Path) -> None:
    """Each write operation raises ReadOnlyViolationError and is recorded; nothing changes."""
    before = snapshot(tree)
    guard = Guard("validation 'v'")
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="read-only"):
        WRITES[name](tree)
    assert guard.violation is not None
    assert snapshot(tree) == before


def test_caught_violation_is_still_recorded(tree: Path) -> None:
    """A validation that swallows the error does not escape the verdict."""
    guard = Guard("validation 'v'")
    with guarded(guard):
        try:
            (tree / "x").write_text("sneaky")
        except PermissionError:
            pass
    assert guard.violation is not None and "opening" in guard.violation


def test_reads_are_fine(tree: Path) -> None:
    """Reading, listing and stat-ing are never refused."""
    guard = Guard("validation 'v'")
    with guarded(guard):
        assert (tree / "pkg" / "a.py").read_text() == "x = 1\n"
        assert [p.name for p in tree.iterdir()] == ["pkg"]
        with open(os.devnull, "w") as sink:  # /dev/null is harmless
            sink.write("x")
    assert guard.violation is None


def test_scratch_and_disposable_copy_are_writable(tree: Path) -> None:
    """The call's own scratch folder, and copies made in it, may be written."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        copy = context.disposable_copy()
        (copy / "pkg" / "a.py").write_text("changed")
        (context.scratch / "report.txt").write_text("ok")
        result = subprocess.run(
            [sys.executable, "-c", "open('made-by-child', 'w').close()"], cwd=copy, check=True
        )
    assert result.returncode == 0 and (copy / "made-by-child").exists()
    assert guard.violation is None
    assert (tree / "pkg" / "a.py").read_text() == "x = 1\n"
    context.cleanup()
    assert not copy.exists()


def test_disposable_copy_needs_one_folder(tree: Path, tmp_path: Path) -> None:
    """Without a source, exactly one folder resource must be there to copy."""
    context = ToolContext(resources={"a": tree, "b": tmp_path})
    with pytest.raises(ValueError, match="exactly one"):
        context.disposable_copy()
    assert context.disposable_copy(tree).name == "repo"
    assert context.disposable_copy(tree).name == "repo-2"
    context.cleanup()


def test_commands_outside_a_copy_are_refused(tree: Path) -> None:
    """An external command must run inside a disposable copy."""
    guard = Guard("validation 'v'")
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="disposable copy"):
        subprocess.run([sys.executable, "-c", "pass"], cwd=tree, check=False)
    with guarded(Guard("validation 'v'")), pytest.raises(ReadOnlyViolationError):
        os.system("true")


def test_pure_guard_refuses_commands_and_network(tree: Path) -> None:
    """A transform may not run commands or open connections, even in scratch."""
    guard = Guard("transform of 'v'", pure=True)
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="must be pure"):
        subprocess.run([sys.executable, "-c", "pass"], cwd=context.scratch, check=False)
    context.cleanup()
    guard = Guard("transform of 'v'", pure=True)
    with socket.socket() as sock, guarded(guard), pytest.raises(ReadOnlyViolationError):
        sock.connect(("127.0.0.1", 9))
    assert guard.violation is not None and "network" in guard.violation


def test_guard_is_scoped_to_its_context(tree: Path) -> None:
    """Code outside the guarded block, and after it, writes freely."""
    with guarded(Guard("validation 'v'")):
        pass
    (tree / "after.txt").write_text("fine")
    assert (tree / "after.txt").exists()


@pytest.mark.anyio
async def test_guard_follows_into_worker_threads_but_not_other_tasks(tree: Path) -> None:
    """The guard reaches the thread a sync validation runs in, and no concurrent task."""
    guard = Guard("validation 'v'")
    entered = anyio.Event()
    release = anyio.Event()
    outcome: dict[str, bool] = {}

    async def guarded_task() -> None:
        with guarded(guard):
            entered.set()
            try:
                await anyio.to_thread.run_sync((tree / "in-thread").write_text, "x")
            except PermissionError:
                outcome["thread_refused"] = True
            await release.wait()

    async def free_task() -> None:
        await entered.wait()
        (tree / "free.txt").write_text("ok")
        outcome["free_wrote"] = True
        release.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(guarded_task)
        tg.start_soon(free_task)
    assert outcome == {"thread_refused": True, "free_wrote": True}
    assert not (tree / "in-thread").exists()


def test_disposable_copy_keeps_symlinks_and_rmtree_in_scratch_works(tree: Path) -> None:
    """Regression: copying a tree with a symlink, and rmtree inside scratch, are allowed."""
    (tree / "README").symlink_to("pkg/a.py")
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        copy = context.disposable_copy()
        assert (copy / "README").is_symlink()
        shutil.rmtree(copy / "pkg")
    assert guard.violation is None
    assert (tree / "pkg" / "a.py").exists()
    context.cleanup()


def test_fd_operations_are_judged_by_their_file(tree: Path) -> None:
    """chmod through a descriptor of a file outside scratch is refused."""
    fd = os.open(tree / "pkg" / "a.py", os.O_RDONLY)
    try:
        guard = Guard("validation 'v'")
        with guarded(guard), pytest.raises(ReadOnlyViolationError):
            os.chmod(fd, 0o600)
    finally:
        os.close(fd)


def test_posix_spawn_is_refused(tree: Path) -> None:
    """posix_spawn has no working directory, so it cannot be held to a copy."""
    with guarded(Guard("validation 'v'")), pytest.raises(ReadOnlyViolationError):
        os.posix_spawn(sys.executable, [sys.executable, "-c", "pass"], dict(os.environ))
