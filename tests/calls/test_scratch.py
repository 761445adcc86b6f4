"""Scratch folders: one parent per process, removed at exit, swept when their owner died
(issue 9, item 10), and made again when a temporary-files cleaner removed them; the
runtime's private folders in that parent; and worker processes that die with their parent."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from gategraph.runtime import ReadOnlyViolationError, ToolContext
from gategraph.runtime._calls import _context as context_module
from gategraph.runtime._calls._context import (
    _PARENT_PREFIX,
    _alive,
    _Parent,
    _remove_parent,
    _sweep,
    private_folder,
    sweep,
)
from gategraph.runtime._calls._readonly import Guard, guarded
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import execute_graph


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of this test's own, and no scratch parent made yet in it."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setattr(context_module, "_parent", None)
    return folder


def parents(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.name.startswith("gategraph-scratch-"))


def test_scratch_lives_in_one_locked_parent_per_process(own_tmp: Path) -> None:
    """Two calls' scratch share this process's parent, which holds a lock while it lives."""
    first, second = ToolContext(), ToolContext()
    a, b = first.scratch, second.scratch
    assert a != b and a.parent == b.parent
    (parent,) = parents(own_tmp)
    assert parent == a.parent and parent.name.startswith(f"gategraph-scratch-{os.getpid()}-")
    fd = os.open(parent / ".owner.lock", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)
    assert _sweep(str(own_tmp)) == []  # a live owner's parent is never swept
    first.cleanup()
    second.cleanup()
    assert not a.exists() and parent.exists()


def test_a_parent_removed_under_us_is_made_again(own_tmp: Path) -> None:
    """A temporary-files cleaner that removed the parent does not break the next call."""
    first = ToolContext()
    old_parent = first.scratch.parent
    shutil.rmtree(old_parent)
    second = ToolContext()
    scratch = second.scratch
    assert scratch.is_dir() and scratch.parent != old_parent
    assert parents(own_tmp) == [scratch.parent]
    second.cleanup()


def test_a_parent_is_removed_at_exit_only_by_its_own_process(tmp_path: Path) -> None:
    """A forked child exiting leaves its parent process's folder alone; the owner removes
    it, and a descriptor that is already closed is no error."""
    folder = tmp_path / "gategraph-scratch-1-abc"
    (folder / "call-x").mkdir(parents=True)
    inherited = _Parent(str(folder), -1, str(tmp_path))
    inherited.pid = os.getpid() + 1  # as a forked child sees its parent's record
    _remove_parent(inherited)
    assert folder.exists()
    fd = os.open(tmp_path, os.O_RDONLY)
    _remove_parent(_Parent(str(folder), fd, str(tmp_path)))
    assert not folder.exists()
    with pytest.raises(OSError):
        os.fstat(fd)  # closed by _remove_parent
    _remove_parent(_Parent(str(folder), -1, str(tmp_path)))  # nothing left: no error


def test_alive_tells_a_live_process_from_a_gone_one() -> None:
    """This process is alive; a pid no process has is not."""
    assert _alive(os.getpid())
    assert not _alive(2**22 + 12345)  # above Linux's pid_max default


def test_sweeping_skips_what_is_not_a_dead_owner_s_parent(tmp_path: Path) -> None:
    """A file with a parent's name, a lock that is a link, and a missing folder are left."""
    assert _sweep(str(tmp_path / "missing")) == []
    lookalike = tmp_path / "gategraph-scratch-999999-file"
    lookalike.write_text("not a folder")
    linked = tmp_path / "gategraph-scratch-999998-link"
    linked.mkdir()
    (linked / ".owner.lock").symlink_to(tmp_path / "elsewhere")
    assert _sweep(str(tmp_path)) == []
    assert lookalike.exists() and linked.exists()


def test_a_parent_whose_lock_is_free_is_swept(tmp_path: Path) -> None:
    """An unlocked lock file means its owner died (the kernel freed the lock): removed."""
    dead = tmp_path / "gategraph-scratch-999997-dead"
    (dead / "call-1").mkdir(parents=True)
    (dead / ".owner.lock").write_text("")
    assert _sweep(str(tmp_path)) == [str(dead)]
    assert not dead.exists()


# -- private folders for the runtime's own copies ----------------------------------------------


def test_a_private_folder_lives_in_this_process_s_parent(own_tmp: Path) -> None:
    """private_folder() makes a new folder beside the calls' scratch, for this user only;
    it goes with the parent when the process exits."""
    first = private_folder("execute")
    second = private_folder("execute")
    context = ToolContext()
    assert first != second and first.is_dir() and not any(first.iterdir())
    assert first.parent == second.parent == context.scratch.parent
    assert first.name.startswith("execute-") and first.stat().st_mode & 0o077 == 0
    (parent,) = parents(own_tmp)
    assert parent == first.parent and parent.name.startswith(f"gategraph-scratch-{os.getpid()}-")
    context.cleanup()
    assert first.is_dir()  # a call's cleanup leaves it
    assert context_module._parent is not None
    _remove_parent(context_module._parent)  # what happens at exit
    assert not first.exists() and parents(own_tmp) == []


def test_a_private_folder_is_made_again_after_a_cleaner(own_tmp: Path) -> None:
    """A parent removed by a temporary-files cleaner is made again for the next folder."""
    old = private_folder("sandboxes")
    shutil.rmtree(old.parent)
    new = private_folder("sandboxes")
    assert new.is_dir() and new.parent != old.parent


@pytest.mark.parametrize("kind", ["", "Execute", "../up", "a/b", "-x", "x" * 41, 3])
def test_a_private_folder_s_kind_is_a_plain_word(own_tmp: Path, kind: Any) -> None:
    """A kind that could name another place, or no word at all, is refused."""
    with pytest.raises(ValueError, match="lowercase word"):
        private_folder(kind)
    assert parents(own_tmp) == []


def test_a_private_folder_is_made_under_a_guard(own_tmp: Path) -> None:
    """Making it is the runtime's doing, even from a guarded context; writing there from
    the guarded call is not the call's to do."""
    guard = Guard("validation 'v'")
    with guarded(guard):
        folder = private_folder("execute")
        with pytest.raises(ReadOnlyViolationError):
            (folder / "x").write_text("x")
    assert folder.is_dir()


MAKES_A_PRIVATE_FOLDER = """
import sys, time
from gategraph.runtime._calls._context import private_folder
folder = private_folder("execute")
(folder / "copy.txt").write_text("a copy")
print(folder, flush=True)
if sys.argv[1] == "wait":
    time.sleep(120)
"""


def _python(code: str, *args: str, tmpdir: Path, **options: Any) -> Any:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE, text=True, **options
    )


def test_a_killed_process_s_private_folder_is_swept_by_a_later_one(tmp_path: Path) -> None:
    """SIGKILL leaves a private folder behind; the next process to make one removes it,
    and never a live process's."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    killed = _python(MAKES_A_PRIVATE_FOLDER, "wait", tmpdir=tmpdir)
    alive = _python(MAKES_A_PRIVATE_FOLDER, "wait", tmpdir=tmpdir)
    try:
        assert killed.stdout is not None and alive.stdout is not None
        killed_folder = Path(killed.stdout.readline().strip())
        alive_folder = Path(alive.stdout.readline().strip())
        killed.kill()
        killed.wait(60)
        assert (killed_folder / "copy.txt").exists()  # what a kill leaves
        later = _python(MAKES_A_PRIVATE_FOLDER, "exit", tmpdir=tmpdir)
        out, _ = later.communicate(timeout=60)
        assert later.returncode == 0
        assert not killed_folder.parent.exists()  # swept
        assert (alive_folder / "copy.txt").read_text() == "a copy"  # alive: kept
        assert not Path(out.strip()).exists()  # a clean exit removes its own
        assert parents(tmpdir) == [alive_folder.parent]
    finally:
        for child in (killed, alive):
            child.kill()
            child.wait(60)
            assert child.stdout is not None
            child.stdout.close()
    assert [Path(p) for p in sweep(tmpdir)] == [alive_folder.parent]
    assert parents(tmpdir) == []


# -- sweep(): scratch of worker processes killed at their timeout ------------------------------


def test_sweep_removes_only_dead_owners_parents(own_tmp: Path) -> None:
    """sweep() in the default temporary directory: the dead go, this live process stays."""
    mine = ToolContext().scratch.parent
    dead = own_tmp / "gategraph-scratch-999996-dead"
    dead.mkdir()
    (dead / ".owner.lock").write_text("")
    assert sweep() == [dead]
    assert sweep() == [] and mine.is_dir()


HANGS_IN_ITS_SCRATCH = """
import time

def run(context):
    (context.scratch / "work.txt").write_text("in progress")
    time.sleep(120)
    return {"passed": True}
"""


@pytest.mark.anyio
async def test_a_timed_out_worker_s_scratch_is_swept_after_the_run(
    own_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process-isolated validation that writes into its scratch and hangs is killed at
    its timeout; the run's sweep removes what the worker left."""
    monkeypatch.setenv("TMPDIR", str(own_tmp))  # the worker process's temporary directory
    graph = load_graph(
        "version: 1\nname: hangs\n"
        f"validations: [{{name: v, code: {json.dumps(HANGS_IN_ITS_SCRATCH)}}}]\n"
        "nodes: [{id: n, validation: v, isolation: process, timeout: 2}]\n"
    )
    run = await execute_graph(graph)
    assert run.validations[0].result.data["error"] == "timeout"
    (left,) = (
        p for p in parents(own_tmp) if not p.name.startswith(f"{_PARENT_PREFIX}{os.getpid()}-")
    )
    worker = int(left.name.split("-")[2])
    assert worker != os.getpid() and not _alive(worker)
    assert any(left.glob("call-*/work.txt"))  # what the kill left
    assert sweep() == [left]
    assert not any(p.name.startswith(f"{_PARENT_PREFIX}{worker}-") for p in parents(own_tmp))


# -- die_with_parent(): a worker never outlives the gategraph process -------------------------


def _ended(pid: int) -> bool:
    """True once ``pid`` has exited (a zombie nobody has reaped yet counts as ended)."""
    if not _alive(pid):
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return not _alive(pid)
    return state in {"Z", "X"}


def _wait_ended(pid: int) -> bool:
    for _ in range(600):
        if _ended(pid):
            return True
        time.sleep(0.05)
    return False


STARTS_A_LOOPING_WORKER = """
import os, subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid())],
                          stdout=subprocess.PIPE, text=True)
print(worker.stdout.readline().strip(), flush=True)
time.sleep(120)
"""

LOOPS_IN_USER_CODE = {
    "pidfd": """
import os, sys
from gategraph.runtime._calls._context import die_with_parent
die_with_parent(int(sys.argv[1]))
die_with_parent(int(sys.argv[1]))  # once is enough: no second watcher
import threading
assert sum(t.name == "gategraph-parent-watch" for t in threading.enumerate()) == 1
print(os.getpid(), flush=True)
while True:
    pass
""",
    "polling": """
import os, sys, threading
from gategraph.runtime._calls._context import _watch_parent
threading.Thread(target=_watch_parent, args=(int(sys.argv[1]), -1), daemon=True).start()
print(os.getpid(), flush=True)
while True:
    pass
""",
}


def _kill_and_see_the_worker_end(parent: subprocess.Popen[Any], worker: int) -> None:
    """The worker runs; SIGKILL its parent, and it ends too."""
    assert not _ended(worker)
    parent.kill()
    parent.wait(60)
    assert _wait_ended(worker)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
@pytest.mark.parametrize("how", sorted(LOOPS_IN_USER_CODE))
def test_a_looping_worker_dies_with_its_killed_parent(tmp_path: Path, how: str) -> None:
    """The parent is SIGKILLed while its worker loops in user code: the worker dies too."""
    parent = _python(STARTS_A_LOOPING_WORKER, LOOPS_IN_USER_CODE[how], tmpdir=tmp_path)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    try:
        _kill_and_see_the_worker_end(parent, worker)
    finally:
        parent.kill()
        parent.wait(60)
        parent.stdout.close()
        if not _ended(worker):
            os.kill(worker, signal.SIGKILL)


def test_a_worker_whose_parent_is_already_gone_is_killed_at_once(tmp_path: Path) -> None:
    """Told a parent it does not have, the worker is killed before running the call."""
    code = (
        "import os, time\n"
        "from gategraph.runtime._calls._context import die_with_parent\n"
        "die_with_parent(os.getppid() + 1)\n"
        "time.sleep(120)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL


ANYIO_WORKER_MODULE = """
import os, time
from gategraph.runtime._calls._context import die_with_parent

def loop(parent, pid_file):
    die_with_parent(parent)
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)
"""

RUNS_AN_ANYIO_WORKER = """
import os, sys
import anyio, anyio.to_process
import looping_worker

async def main():
    await anyio.to_process.run_sync(looping_worker.loop, os.getpid(), sys.argv[2])

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_anyio_worker_process_dies_with_its_killed_parent(tmp_path: Path, backend: str) -> None:
    """anyio's worker process, started by either backend, is killed with its parent."""
    (tmp_path / "looping_worker.py").write_text(ANYIO_WORKER_MODULE)
    pid_file = tmp_path / "worker.pid"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    parent = subprocess.Popen(
        [sys.executable, "-c", RUNS_AN_ANYIO_WORKER, backend, str(pid_file)], env=env
    )
    try:
        for _ in range(1200):
            if pid_file.exists() and pid_file.read_text():
                break
            assert parent.poll() is None
            time.sleep(0.05)
        _kill_and_see_the_worker_end(parent, int(pid_file.read_text()))
    finally:
        parent.kill()
        parent.wait(60)


# The same watch, measured in this process: the process it watches is a short-lived child,
# and "killing this process" is recorded instead.


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polling"])
def test_the_watch_ends_its_process_once_the_parent_ended(
    monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    import subprocess

    from gategraph.runtime._calls import _context

    killed: list[bool] = []
    monkeypatch.setattr(_context, "_kill_self", lambda: killed.append(True))
    parent = subprocess.Popen(["sleep", "0.2"])
    try:
        if pidfd:
            fd = os.pidfd_open(parent.pid)
            try:
                _context._watch_parent(parent.pid, fd)
            finally:
                os.close(fd)
        else:
            # Polling follows this process's parent id: it "changes" on the second look.
            looks = iter([parent.pid, 1, 1])
            monkeypatch.setattr(_context.os, "getppid", lambda: next(looks))
            monkeypatch.setattr(_context.time, "sleep", lambda seconds: None)
            _context._watch_parent(parent.pid, -1)
    finally:
        parent.wait()
    assert killed == [True]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
def test_a_worker_whose_parent_is_already_gone_ends_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gategraph.runtime._calls import _context

    class Ended(Exception):
        pass

    def kill() -> None:
        raise Ended

    monkeypatch.setattr(_context, "_kill_self", kill)
    monkeypatch.setattr(_context, "_watched", None)
    with pytest.raises(Ended):
        _context.die_with_parent(os.getpid())  # not this process's parent
    assert _context._watched is None


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
def test_the_watch_starts_once_per_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from gategraph.runtime._calls import _context

    watched: list[tuple[int, int]] = []
    done = threading.Event()

    def watch(parent: int, pidfd: int) -> None:
        watched.append((parent, pidfd))
        if pidfd >= 0:
            os.close(pidfd)
        done.set()

    monkeypatch.setattr(_context, "_watch_parent", watch)
    monkeypatch.setattr(_context, "_watched", None)
    _context.die_with_parent(os.getppid())
    _context.die_with_parent(os.getppid())  # once is enough
    assert done.wait(10)
    assert [parent for parent, _ in watched] == [os.getppid()]
    assert _context._watched == os.getppid()
