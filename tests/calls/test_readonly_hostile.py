"""The read-only guard against validations that try to get round it, and its known limits.

Each limit test pins what the guard does NOT see, exactly as docs/readonly.md lists it: a
real assertion of today's behaviour, so a change to what the guard sees is a conscious one.
"""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import functools
import multiprocessing
import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _helpers import fake_module, run_process
from gategraph.runtime import ReadOnlyViolationError, ToolContext
from gategraph.runtime._calls._readonly import Guard, allow, guarded
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import execute_graph

ORIGINAL = "x = 1\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_text(ORIGINAL)
    return root


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under ``root``: its mode and, for a regular file, its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(path.relative_to(root))] = (st.st_mode, data)
    return out


def two_step_graph(
    module: str, repo: Path, first: str, second: str | None, isolation: str = "inline"
) -> Any:
    """``first`` runs, then ``second`` (it needs ``first``), on one worker, both in this
    process (``isolation``: ``inline`` for async functions, ``thread`` for sync ones)."""
    nodes = f"  - {{id: first, validation: first, isolation: {isolation}}}\n"
    validations = f'  - {{name: first, entrypoint: "{module}:{first}", resource_slots: [root]}}\n'
    if second is not None:
        nodes += f"  - {{id: second, validation: second, needs: [first], isolation: {isolation}}}\n"
        validations += f'  - {{name: second, entrypoint: "{module}:{second}"}}\n'
    text = (
        "version: 1\nname: hostile\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        f"validations:\n{validations}nodes:\n{nodes}"
    )
    return load_graph(text)


# -- 1. descriptors --------------------------------------------------------------------------


def test_command_with_stdin_pipe_runs_in_a_disposable_copy(tree: Path) -> None:
    """A command in scratch may be fed through stdin: opening the pipe is no write."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        copy = context.disposable_copy()
        done = run_process(
            [sys.executable, "-c", "import sys; open('got', 'w').write(sys.stdin.read())"],
            cwd=copy,
            input="fed through stdin",
            check=True,
        )
    assert done.returncode == 0
    assert (copy / "got").read_text() == "fed through stdin"
    assert guard.violation is None
    context.cleanup()


def test_descriptors_are_judged_by_what_they_refer_to(tree: Path) -> None:
    """A pipe may be opened for writing; a descriptor of a resource file may not."""
    read_end, write_end = os.pipe()
    fd = os.open(tree / "pkg" / "a.py", os.O_RDWR)
    guard = Guard("validation 'v'")
    try:
        with guarded(guard):
            with open(write_end, "wb") as pipe:
                pipe.write(b"through a pipe")
            assert guard.violation is None
            with pytest.raises(ReadOnlyViolationError, match=r"a\.py"):
                open(fd, "w", closefd=False)
    finally:
        os.close(fd)
        os.close(read_end)
    assert guard.violation is not None and "a.py" in guard.violation
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
async def test_sync_validation_feeds_a_command_in_its_copy(
    monkeypatch: pytest.MonkeyPatch, tree: Path
) -> None:
    """Through the engine, in a worker thread: subprocess.run(input=...) in a copy passes."""

    def feeds(root: Path, context: ToolContext, **_: Any) -> dict[str, Any]:
        copy = context.disposable_copy(root)
        out = run_process(
            [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
            cwd=copy,
            input="ok",
            check=True,
        )
        return {"passed": out.stdout.strip() == "OK", "message": out.stdout.strip()}

    module = fake_module(monkeypatch, "hostile_feeds", feeds=feeds)
    run = await execute_graph(two_step_graph(module, tree, "feeds", None, "thread"))
    result = run.validations[0].result
    assert result.passed, result


# -- 2. writes a call leaves behind ----------------------------------------------------------


class Deferred:
    """A validation that leaves a write behind, and an innocent one during which it fires."""

    def __init__(self) -> None:
        self.outcome: str | None = None
        self.go = anyio.Event()  # when the write may fire
        self.fired = anyio.Event()
        self.keep: list[Any] = []  # tasks must not be collected before they run

    def write(self, target: Path) -> None:
        try:
            target.write_text("overwritten\n")
        except PermissionError as exc:
            self.outcome = f"refused: {exc}"
        else:
            self.outcome = "wrote"
        self.fired.set()

    async def innocent(self, **_: Any) -> dict[str, Any]:
        self.go.set()
        await self.fired.wait()
        return {"passed": True, "message": "did nothing"}


def schedule_call_later(state: Deferred, target: Path) -> None:
    import asyncio

    loop = asyncio.get_running_loop()

    def tick() -> None:
        # Rescheduled from inside the callback: the copied context travels along.
        if state.go.is_set():
            state.write(target)
        else:
            loop.call_later(0.001, tick)

    loop.call_later(0.001, tick)


def schedule_call_soon(state: Deferred, target: Path) -> None:
    import asyncio

    loop = asyncio.get_running_loop()

    def tick() -> None:
        if state.go.is_set():
            state.write(target)
        else:
            loop.call_soon(tick)

    loop.call_soon(tick)


async def _wait_then_write(state: Deferred, target: Path) -> None:
    await state.go.wait()
    state.write(target)


def schedule_create_task(state: Deferred, target: Path) -> None:
    import asyncio

    state.keep.append(asyncio.get_running_loop().create_task(_wait_then_write(state, target)))


def schedule_outer_nursery(state: Deferred, target: Path) -> None:
    import trio

    # The task group the engine runs its workers in: it outlives the call.
    nursery = trio.lowlevel.current_task().parent_nursery
    assert nursery is not None
    nursery.start_soon(_wait_then_write, state, target)


TRICKS = [
    pytest.param("asyncio", schedule_call_later, id="asyncio-call_later"),
    pytest.param("asyncio", schedule_call_soon, id="asyncio-call_soon"),
    pytest.param("asyncio", schedule_create_task, id="asyncio-create_task"),
    pytest.param("trio", schedule_outer_nursery, id="trio-outer-nursery"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("anyio_backend", "schedule"), TRICKS)
async def test_deferred_write_fails_no_innocent_call(
    monkeypatch: pytest.MonkeyPatch, tree: Path, schedule: Any
) -> None:
    """A write a finished call left behind is refused, and the call running then passes."""
    state = Deferred()

    async def leaves_a_write(root: Path, **_: Any) -> dict[str, Any]:
        schedule(state, Path(root) / "pkg" / "a.py")
        return {"passed": True, "message": "looks read-only"}

    module = fake_module(
        monkeypatch, "hostile_deferred", leaves=leaves_a_write, innocent=state.innocent
    )
    run = await execute_graph(two_step_graph(module, tree, "leaves", "innocent"), max_concurrency=1)
    results = {v.node: v.result for v in run.validations}
    assert results["second"].passed, results["second"]  # the innocent call is not blamed
    assert state.outcome is not None and state.outcome.startswith("refused")
    assert "has ended" in state.outcome
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
@pytest.mark.parametrize(("anyio_backend", "schedule"), TRICKS)
async def test_deferred_write_while_the_call_runs_fails_that_call(
    monkeypatch: pytest.MonkeyPatch, tree: Path, schedule: Any
) -> None:
    """Code a call spawned writes while the call still runs: the call itself fails."""
    state = Deferred()

    async def waits_for_its_write(root: Path, **_: Any) -> dict[str, Any]:
        state.go.set()
        schedule(state, Path(root) / "pkg" / "a.py")
        await state.fired.wait()
        return {"passed": True, "message": "looks read-only"}

    module = fake_module(monkeypatch, "hostile_owner", waits=waits_for_its_write)
    run = await execute_graph(two_step_graph(module, tree, "waits", None))
    result = run.validations[0].result
    assert not result.passed and result.data["error"] == "read_only_violation"
    assert state.outcome is not None and "is read-only" in state.outcome
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_write_deferred_past_the_run_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, tree: Path
) -> None:
    """A callback that fires once no validation runs at all is still refused."""
    state = Deferred()

    async def leaves_a_write(root: Path, **_: Any) -> dict[str, Any]:
        schedule_call_later(state, Path(root) / "pkg" / "a.py")
        return {"passed": True}

    module = fake_module(monkeypatch, "hostile_late", leaves=leaves_a_write)
    run = await execute_graph(two_step_graph(module, tree, "leaves", None))
    assert run.validations[0].result.passed
    state.go.set()
    await state.fired.wait()
    assert state.outcome is not None and "has ended" in state.outcome
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


LEAVES_AN_UNHANDLED_WRITE = """
import asyncio, sys, types
from pathlib import Path
import anyio
from gategraph.runtime._running._engine import execute_graph
from gategraph.runtime._definitions._graph import load_graph

keep = []

async def write_later(target):
    await asyncio.sleep(0.05)
    target.write_text("overwritten")

async def leaves(root, **_):
    target = Path(root) / "pkg" / "a.py"
    if sys.argv[1] == "create_task":
        keep.append(asyncio.get_running_loop().create_task(write_later(target)))
    else:
        asyncio.get_running_loop().call_later(0.05, target.write_text, "overwritten")
    return {"passed": True}

sys.modules["leaves_module"] = types.SimpleNamespace(leaves=leaves)
graph = load_graph(
    "version: 1\\nname: unhandled\\n"
    f"resources: {{repo: {{kind: directory, path: {sys.argv[2]!r}}}}}\\n"
    "validations: [{name: v, entrypoint: 'leaves_module:leaves', resource_slots: [root]}]\\n"
    "nodes: [{id: n, validation: v, isolation: inline}]\\n"
)

async def main():
    run = await execute_graph(graph)
    print("passed" if run.validations[0].result.passed else "failed", flush=True)
    await asyncio.sleep(0.3)  # the write fires once the call has ended

anyio.run(main)
"""


@pytest.mark.parametrize(
    ("how", "report"),
    [
        ("create_task", "Task exception was never retrieved"),
        ("call_later", "Exception in callback"),
    ],
)
def test_asyncio_reports_an_unhandled_refusal_left_behind(
    tree: Path, how: str, report: str
) -> None:
    """A refused write that nothing handles, in code a call left running, is reported by
    asyncio on stderr (it is the truth: that code raised); the run and stdout are not
    touched, and the file is unchanged (docs/readonly.md)."""
    done = run_process([sys.executable, "-c", LEAVES_AN_UNHANDLED_WRITE, how, str(tree)])
    assert done.returncode == 0, done.stderr
    assert done.stdout == "passed\n"
    assert report in done.stderr and "ReadOnlyViolationError" in done.stderr
    assert "has ended" in done.stderr
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
async def test_thread_abandoned_at_its_timeout_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tree: Path
) -> None:
    """A sync validation's thread runs on after its timeout; its late write is refused."""
    release, attempted = threading.Event(), threading.Event()
    outcome: list[str] = []

    def overstays(root: Path, **_: Any) -> dict[str, Any]:
        release.wait(60)
        try:
            (Path(root) / "pkg" / "a.py").write_text("overwritten\n")
        except PermissionError as exc:
            outcome.append(str(exc))
        else:
            outcome.append("wrote")
        attempted.set()
        return {"passed": True}

    module = fake_module(monkeypatch, "hostile_overstays", overstays=overstays)
    text = (
        "version: 1\nname: overstays\n"
        f'resources: {{repo: {{kind: directory, path: "{tree}"}}}}\n'
        f'validations: [{{name: v, entrypoint: "{module}:overstays", resource_slots: [root]}}]\n'
        "nodes: [{id: n, validation: v, timeout: 0.2, isolation: thread}]\n"
    )
    run = await execute_graph(load_graph(text))
    assert run.validations[0].result.data["error"] == "timeout"
    release.set()
    assert await anyio.to_thread.run_sync(attempted.wait, 60)
    assert len(outcome) == 1 and "has ended" in outcome[0]
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


def test_a_context_copied_during_a_call_is_refused_after_it(tree: Path) -> None:
    """The mechanism: an ended call's lease refuses and charges neither it nor the next."""
    before = snapshot(tree)
    first, second = Guard("validation 'first'"), Guard("validation 'second'")
    with guarded(first):
        left_behind = contextvars.copy_context()
    with guarded(second), pytest.raises(PermissionError, match="'first' has ended"):
        left_behind.run((tree / "pkg" / "a.py").write_text, "overwritten")
    with pytest.raises(PermissionError, match="has ended"):
        left_behind.run(os.mkdir, tree / "made-late")
    assert first.violation is None and second.violation is None
    assert snapshot(tree) == before


def test_an_ended_call_may_not_write_even_its_scratch(tree: Path) -> None:
    """Scratch is removed when the call ends; late code may not bring it back."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        scratch = context.scratch
        left_behind = contextvars.copy_context()
    context.cleanup()
    with pytest.raises(PermissionError, match="has ended"):
        left_behind.run(os.makedirs, scratch / "again")
    assert not scratch.exists()


# -- 3. the record -------------------------------------------------------------------------


def test_violation_record_cannot_be_cleared(tree: Path) -> None:
    """A validation that catches the refusal cannot clear the record or widen its scope."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        with pytest.raises(PermissionError):
            (tree / "pkg" / "a.py").write_text("x")
        held = context.guard
        assert held is guard
        attempts = [
            lambda: setattr(held, "violation", None),
            lambda: delattr(held, "violation"),
            lambda: setattr(held, "_violation", None),
            lambda: object.__setattr__(held, "_violation", None),
            lambda: setattr(held, "allowed", (str(tree) + os.sep,)),
            lambda: setattr(held, "_allowed", (str(tree) + os.sep,)),
            lambda: held.allow(tree),  # type: ignore[attr-defined]
        ]
        for attempt in attempts:
            with pytest.raises(AttributeError):
                attempt()
        with pytest.raises(PermissionError):
            (tree / "pkg" / "a.py").write_text("x")
    assert guard.violation is not None and "a.py" in guard.violation
    assert guard.allowed == ()
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
async def test_clearing_the_record_does_not_pass_the_validation(
    monkeypatch: pytest.MonkeyPatch, tree: Path
) -> None:
    """Through the engine: catch the refusal, try every way to clear it, still fail."""

    def clears(root: Path, context: ToolContext, **_: Any) -> dict[str, Any]:
        try:
            (Path(root) / "pkg" / "a.py").write_text("x")
        except PermissionError:
            for name in ("violation", "_violation"):
                try:
                    setattr(context.guard, name, None)
                except AttributeError:
                    pass
        return {"passed": True, "message": "nothing to see"}

    module = fake_module(monkeypatch, "hostile_clears", clears=clears)
    graph = two_step_graph(module, tree, "clears", None, "thread")
    result = (await execute_graph(graph)).validations[0]
    assert result.result.data["error"] == "read_only_violation"
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL


# -- 4. ways round the path checks ---------------------------------------------------------


def test_mkfifo_and_mknod_are_refused(tree: Path) -> None:
    """os.mkfifo and os.mknod raise no audit event of their own; the guard still sees them."""
    before = snapshot(tree)
    guard = Guard("validation 'v'")
    with guarded(guard):
        with pytest.raises(ReadOnlyViolationError, match="mkfifo"):
            os.mkfifo(tree / "fifo")
        with pytest.raises(ReadOnlyViolationError, match="mknod"):
            os.mknod(tree / "node", stat.S_IFREG | 0o600)
        folder = os.open(tree, os.O_RDONLY)
        try:
            with pytest.raises(ReadOnlyViolationError):
                os.mkfifo("fifo", dir_fd=folder)
        finally:
            os.close(folder)
    assert snapshot(tree) == before


def test_mkfifo_and_mknod_work_in_scratch(tree: Path) -> None:
    """In scratch they are allowed, except a device node, which is refused everywhere."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        os.mkfifo(context.scratch / "fifo")
        os.mknod(context.scratch / "plain", stat.S_IFREG | 0o600)
        assert guard.violation is None
        with pytest.raises(ReadOnlyViolationError, match="device"):
            os.mknod(context.scratch / "disk", stat.S_IFBLK | 0o600, os.makedev(8, 0))
    assert stat.S_ISFIFO((context.scratch / "fifo").lstat().st_mode)
    context.cleanup()


def test_hard_link_into_scratch_is_refused(tree: Path) -> None:
    """A hard link from a resource file into scratch would share the file's data."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="hard-linking"):
        os.link(tree / "pkg" / "a.py", context.scratch / "a.py")
    assert (tree / "pkg" / "a.py").stat().st_nlink == 1
    context.cleanup()


def test_writing_a_shared_inode_in_scratch_is_refused(tree: Path) -> None:
    """A file in scratch that shares its inode with one outside (linked by other code, a
    `git clone --local` for example) may not be written, truncated or chmod-ed."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    linked = context.scratch / "a.py"
    os.link(tree / "pkg" / "a.py", linked)  # made outside the guard
    before = snapshot(tree)
    with guarded(guard):
        for write in (
            lambda: linked.write_text("overwritten"),
            lambda: open(linked, "a").close(),
            lambda: os.truncate(linked, 0),
            lambda: os.chmod(linked, 0o777),
            lambda: os.utime(linked, (0, 0)),
        ):
            with pytest.raises(ReadOnlyViolationError):
                write()
        fd = os.open(linked, os.O_RDONLY)
        try:
            with pytest.raises(ReadOnlyViolationError):
                os.chmod(fd, 0o777)
        finally:
            os.close(fd)
        linked.unlink()  # removing scratch's own name is fine
    assert snapshot(tree) == before


def test_hard_links_within_scratch_are_fine(tree: Path) -> None:
    """Linking one scratch file to another, then writing it, stays the call's business."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        (context.scratch / "one").write_text("1")
        os.link(context.scratch / "one", context.scratch / "two")
        (context.scratch / "two").write_text("2")
    assert guard.violation is None
    assert (context.scratch / "one").read_text() == "2"
    context.cleanup()


def test_chdir_is_refused_and_relative_paths_cannot_use_dir_fd(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.chdir is refused; and with the working directory in scratch (moved there by other
    code), os.open(relative, dir_fd=<a resource folder>) still cannot write the resource."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    scratch = context.scratch
    with guarded(guard):
        with pytest.raises(ReadOnlyViolationError, match="working directory"):
            os.chdir(scratch)
        folder = os.open(tree / "pkg", os.O_RDONLY)
        with pytest.raises(ReadOnlyViolationError, match="working directory"):
            os.fchdir(folder)
    assert Path.cwd() != scratch
    monkeypatch.chdir(scratch)
    (scratch / "a.py").write_text("scratch's own\n")
    before = snapshot(tree)
    try:
        with guarded(guard):
            with pytest.raises(ReadOnlyViolationError):
                os.close(os.open("a.py", os.O_WRONLY | os.O_TRUNC, dir_fd=folder))
            with pytest.raises(ReadOnlyViolationError):
                open("a.py", "w", opener=functools.partial(os.open, dir_fd=folder))
    finally:
        os.close(folder)
    assert snapshot(tree) == before
    context.cleanup()


def test_multiprocessing_fork_is_refused(tree: Path) -> None:
    """multiprocessing's fork start method is refused, as os.fork is."""
    guard = Guard("validation 'v'")
    target = tree / "by-forked-process"
    process = multiprocessing.get_context("fork").Process(
        target=functools.partial(Path.write_text, target, "x")
    )
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="fork"):
        process.start()
    assert not target.exists() and guard.violation is not None


unix_only = pytest.mark.skipif(not hasattr(socket, "AF_UNIX"), reason="no Unix sockets")


@unix_only
@pytest.mark.parametrize(
    "address",
    [
        pytest.param(lambda root: os.path.join(root, "sock"), id="str"),
        pytest.param(lambda root: os.fsencode(root / "sock"), id="bytes"),
        pytest.param(lambda root: bytearray(os.fsencode(root / "sock")), id="bytearray"),
        pytest.param(lambda root: os.fsencode(root / "sock") + b"\0/elsewhere", id="nul"),
    ],
)
def test_binding_a_unix_socket_in_a_resource_is_refused(tree: Path, address: Any) -> None:
    """bind() to a path makes a file there: outside scratch it is a write, in any spelling."""
    guard = Guard("validation 'v'")
    before = snapshot(tree)
    with guarded(guard), socket.socket(socket.AF_UNIX) as sock:
        with pytest.raises(ReadOnlyViolationError, match="binding a Unix socket"):
            sock.bind(address(tree))
    assert snapshot(tree) == before
    assert guard.violation is not None and "sock" in guard.violation


@unix_only
def test_binding_a_relative_unix_socket_path_is_judged_where_it_lands(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative socket path is created in the working directory, and judged there."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    scratch = context.scratch
    monkeypatch.chdir(tree)
    with guarded(guard), socket.socket(socket.AF_UNIX) as sock:
        with pytest.raises(ReadOnlyViolationError):
            sock.bind("sock")
    assert not (tree / "sock").exists()
    monkeypatch.chdir(scratch)
    with guarded(guard), socket.socket(socket.AF_UNIX) as sock:
        sock.bind("sock")
    assert (scratch / "sock").is_socket() and guard.violation is not None  # the first one
    context.cleanup()


@unix_only
def test_unix_sockets_that_make_no_file_outside_scratch_are_fine(tree: Path) -> None:
    """Binding in scratch, in the abstract namespace, or to an internet address, and
    connecting to a socket in the resource (reading), are no writes."""
    server_path = tree / "server.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(os.fspath(server_path))
        server.listen()
        guard = Guard("validation 'v'")
        context = ToolContext(resources={"root": tree}, guard=guard)
        with guarded(guard):
            with socket.socket(socket.AF_UNIX) as own:
                own.bind(os.fspath(context.scratch / "own.sock"))
            if sys.platform == "linux":
                with socket.socket(socket.AF_UNIX) as abstract:
                    abstract.bind(b"\0gategraph-test-" + os.urandom(8).hex().encode())
                with socket.socket(socket.AF_UNIX) as autobound:
                    autobound.bind("")
            with socket.socket(socket.AF_INET) as inet:
                inet.bind(("127.0.0.1", 0))
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(os.fspath(server_path))
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as datagram:
                datagram.bind(os.fspath(context.scratch / "dgram.sock"))
        assert guard.violation is None
        context.cleanup()


@unix_only
def test_a_transform_may_bind_no_socket_at_all(tree: Path) -> None:
    """A transform is pure: even an abstract Unix socket is network access."""
    guard = Guard("transform of 'v'", pure=True)
    with guarded(guard), socket.socket(socket.AF_UNIX) as sock:
        with pytest.raises(ReadOnlyViolationError, match="transform"):
            sock.bind(b"\0gategraph-test-pure")
    assert guard.violation is not None


def test_the_hook_refuses_what_it_cannot_judge_with_a_reason(tree: Path) -> None:
    """No operation breaks with the hook's own error: it is refused, saying why."""
    guard = Guard("validation 'v'")
    with guarded(guard):
        with pytest.raises(ReadOnlyViolationError, match=r"os\.remove"):
            sys.audit("os.remove", object(), -1)  # a path argument of no known shape
        with pytest.raises(ReadOnlyViolationError, match="could not be judged"):
            sys.audit("open", "x")  # the wrong number of arguments
    assert guard.violation is not None


# -- 5. transforms are pure ----------------------------------------------------------------


def test_transform_may_not_change_the_environment_or_directory(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """os.environ, os.putenv, os.unsetenv and os.chdir are refused in a transform."""
    monkeypatch.setenv("GATEGRAPH_HOSTILE", "before")
    environ_before = dict(os.environ)
    cwd = Path.cwd()
    guard = Guard("transform of 'v'", pure=True)
    with guarded(guard):
        for change in (
            lambda: os.environ.__setitem__("GATEGRAPH_HOSTILE", "after"),
            lambda: os.environ.__delitem__("GATEGRAPH_HOSTILE"),
            lambda: os.environ.setdefault("GATEGRAPH_NEW", "x"),
            lambda: os.putenv("GATEGRAPH_HOSTILE", "after"),
            lambda: os.unsetenv("GATEGRAPH_HOSTILE"),
            lambda: os.chdir(tree),
        ):
            with pytest.raises(ReadOnlyViolationError):
                change()
    assert guard.violation is not None and "environment" in guard.violation
    assert dict(os.environ) == environ_before
    assert Path.cwd() == cwd


def test_no_validation_can_poison_the_environment_of_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The environment is the whole process's: a validation's change is refused (and
    recorded), so no later validation, nor gategraph, sees it; a command gets its own
    environment with env=."""
    monkeypatch.setenv("GATEGRAPH_HOSTILE", "before")
    guard = Guard("validation 'v'")
    context = ToolContext(resources={}, guard=guard)
    with guarded(guard):
        with pytest.raises(ReadOnlyViolationError, match="GATEGRAPH_HOSTILE"):
            os.environ["GATEGRAPH_HOSTILE"] = "after"
        with pytest.raises(ReadOnlyViolationError):
            del os.environ["GATEGRAPH_HOSTILE"]
        done = run_process(
            [sys.executable, "-c", "import os; print(os.environ['GATEGRAPH_HOSTILE'])"],
            env={**os.environ, "GATEGRAPH_HOSTILE": "for the command"},
            cwd=context.scratch,
            check=True,
        )
    context.cleanup()
    assert done.stdout == "for the command\n"
    assert guard.violation is not None and "GATEGRAPH_HOSTILE" in guard.violation
    assert os.environ["GATEGRAPH_HOSTILE"] == "before"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "transform",
    [
        "__import__('os').environ.__setitem__('GATEGRAPH_IMPURE', '1') or {'passed': True}",
        "__import__('os').chdir('/') or {'passed': True}",
    ],
)
async def test_impure_transform_fails_through_the_engine(transform: str) -> None:
    """A wrapped validation whose transform changes process state fails as not pure."""
    cwd = Path.cwd()
    text = textwrap.dedent(f"""
        version: 1
        name: impure
        tools:
          - name: count
            code: |
              def run(**_):
                  return {{"count": 1}}
        validations:
          - {{name: v, wraps: count, transform: "{transform}"}}
        nodes: [{{id: n, validation: v}}]
        """)
    result = (await execute_graph(load_graph(text))).validations[0].result
    assert result.data["error"] == "read_only_violation"
    assert "not pure" in result.message
    assert "GATEGRAPH_IMPURE" not in os.environ
    assert Path.cwd() == cwd


# -- 6. threads a validation starts carry its guard --------------------------------------------


def test_a_thread_the_validation_starts_carries_its_guard(tree: Path) -> None:
    """threading.Thread and _thread.start_new_thread: the thread answers to the call."""
    import _thread

    guard = Guard("validation 'v'")
    outcomes: list[BaseException | None] = []
    done = threading.Semaphore(0)

    def write(target: Path) -> None:
        try:
            target.write_text("x")
        except BaseException as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
        done.release()

    with guarded(guard):
        thread = threading.Thread(target=write, args=(tree / "by-thread",))
        thread.start()
        thread.join()
        _thread.start_new_thread(write, (tree / "by-start-new-thread",))
        assert done.acquire(timeout=60) and done.acquire(timeout=60)
    assert len(outcomes) == 2
    assert all(isinstance(o, ReadOnlyViolationError) for o in outcomes), outcomes
    assert not (tree / "by-thread").exists() and not (tree / "by-start-new-thread").exists()
    assert guard.violation is not None and "by-thread" in guard.violation


def test_a_thread_left_running_is_refused_once_the_call_ended(tree: Path) -> None:
    """A thread the call started and left behind writes nothing, and blames no one."""
    release = threading.Event()
    outcome: list[str] = []

    def later() -> None:
        release.wait(60)
        try:
            (tree / "late").write_text("x")
        except PermissionError as exc:
            outcome.append(str(exc))

    guard = Guard("validation 'v'")
    with guarded(guard):
        thread = threading.Thread(target=later)
        thread.start()
    release.set()
    thread.join(60)
    assert outcome and "has ended" in outcome[0]
    assert not (tree / "late").exists() and guard.violation is None


def test_executor_work_answers_to_whoever_submitted_it(tree: Path) -> None:
    """A ThreadPoolExecutor's work runs under its submitter's guard: in a pool the call
    made, in one whose thread was started before the call, and (unguarded) in a pool the
    call started once the call is over."""
    from concurrent.futures import ThreadPoolExecutor

    guard = Guard("validation 'v'")
    with ThreadPoolExecutor(max_workers=1) as before:
        before.submit(lambda: None).result()  # its thread runs already
        with guarded(guard):
            with pytest.raises(ReadOnlyViolationError):
                before.submit((tree / "by-old-pool").write_text, "x").result()
            made = ThreadPoolExecutor(max_workers=1)
            with pytest.raises(ReadOnlyViolationError):
                made.submit((tree / "by-new-pool").write_text, "x").result()
        # The pool the call started serves unguarded code afterwards: not refused.
        made.submit((tree / "after-the-call").write_text, "x").result()
        made.shutdown()
    assert not (tree / "by-old-pool").exists() and not (tree / "by-new-pool").exists()
    assert (tree / "after-the-call").exists()
    assert guard.violation is not None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_run_in_executor_carries_the_guard(tree: Path) -> None:
    """loop.run_in_executor, its default executor's thread started before the call, and
    anyio.to_thread: each refuses the write."""
    import asyncio

    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: None)  # the default executor's thread runs
    guard = Guard("validation 'v'")
    with guarded(guard):
        with pytest.raises(ReadOnlyViolationError):
            await loop.run_in_executor(None, (tree / "by-executor").write_text, "x")
        with pytest.raises(PermissionError):
            await anyio.to_thread.run_sync((tree / "by-to-thread").write_text, "x")
    await loop.run_in_executor(None, (tree / "unguarded").write_text, "x")
    assert not (tree / "by-executor").exists() and not (tree / "by-to-thread").exists()
    assert (tree / "unguarded").exists()


@pytest.mark.anyio
async def test_a_thread_cannot_poison_the_next_validation(
    monkeypatch: pytest.MonkeyPatch, tree: Path
) -> None:
    """A validation's thread that changes os.environ or the working directory is refused:
    the next validation (and gategraph) sees both as they were."""
    monkeypatch.setenv("GATEGRAPH_POISON", "before")
    cwd = os.getcwd()
    seen: dict[str, Any] = {}

    async def poisons(root: Path, **_: Any) -> dict[str, Any]:
        refused: list[str] = []

        def change() -> None:
            for attempt in (
                lambda: os.environ.__setitem__("GATEGRAPH_POISON", "after"),
                lambda: os.environ.__delitem__("GATEGRAPH_POISON"),
                lambda: os.chdir(root),
            ):
                try:
                    attempt()
                except ReadOnlyViolationError:
                    refused.append("refused")

        thread = threading.Thread(target=change)
        thread.start()
        await anyio.to_thread.run_sync(thread.join)
        return {"passed": True, "message": ",".join(refused)}

    async def looks(**_: Any) -> dict[str, Any]:
        seen["env"] = os.environ.get("GATEGRAPH_POISON")
        seen["cwd"] = os.getcwd()
        return {"passed": True}

    module = fake_module(monkeypatch, "hostile_poison", poisons=poisons, looks=looks)
    run = await execute_graph(two_step_graph(module, tree, "poisons", "looks"))
    first = {v.node: v.result for v in run.validations}["first"]
    assert first.data["error"] == "read_only_violation", first
    assert "GATEGRAPH_POISON" in first.message
    assert seen == {"env": "before", "cwd": cwd}
    assert os.environ["GATEGRAPH_POISON"] == "before" and os.getcwd() == cwd


# -- 7. gategraph's own: unguarded(), the garbage collector, SQLite -----------------------------


def test_unguarded_is_gategraphs_own(tree: Path) -> None:
    """Validation code cannot lift its guard with gategraph's unguarded(): refused and
    recorded; gategraph's own housekeeping (scratch, a disposable copy) still lifts it."""
    from gategraph.runtime._calls._readonly import unguarded

    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        copy = context.disposable_copy()  # gategraph's own code lifts the guard to copy
        with pytest.raises(ReadOnlyViolationError, match="unguarded"):
            with unguarded():
                (tree / "lifted").write_text("x")
        left_behind = contextvars.copy_context()
    assert copy.is_dir() and not (tree / "lifted").exists()
    assert guard.violation is not None and "unguarded" in guard.violation
    with pytest.raises(ReadOnlyViolationError, match="has ended"):
        left_behind.run(unguarded)
    with unguarded():  # outside any call: nothing to lift
        pass
    context.cleanup()


@pytest.mark.parametrize("name", [None, "gategraph.runtime._calls._readonly"])
def test_unguarded_cannot_be_called_from_code_posing_as_gategraphs(
    tree: Path, name: str | None
) -> None:
    """Code compiled under the file name of gategraph's own module, and run with globals
    that bear a gategraph module's name, is still not gategraph's: refused."""
    import gategraph.runtime._calls._readonly as readonly

    forged = compile(
        "from gategraph.runtime._calls._readonly import unguarded\n"
        "with unguarded():\n"
        "    open(target, 'w').close()\n",
        readonly.__file__,
        "exec",
    )
    namespace: dict[str, Any] = {"target": str(tree / "lifted")}
    if name is not None:
        namespace["__name__"] = name
    guard = Guard("validation 'v'")
    with guarded(guard), pytest.raises(ReadOnlyViolationError, match="unguarded"):
        exec(forged, namespace)
    assert not (tree / "lifted").exists()
    assert guard.violation is not None and "unguarded" in guard.violation


def test_no_wrapper_leads_back_to_the_function_it_wraps(tree: Path) -> None:
    """The functions gategraph wraps to see threads start, ``os.mkfifo`` and ``os.mknod``,
    and SQLite connections, carry no ``__wrapped__``: no unwrapped original to call."""
    import _thread
    import concurrent.futures

    import gategraph.runtime._calls._readonly as readonly

    readonly.install_hook()
    wrappers = [
        _thread.start_new_thread,
        threading._start_new_thread,  # type: ignore[attr-defined]
        concurrent.futures.ThreadPoolExecutor.submit,
        os.mkfifo,
        sqlite3.connect,
    ]
    if hasattr(os, "mknod"):
        wrappers.append(os.mknod)
    for wrapper in wrappers:
        assert not hasattr(wrapper, "__wrapped__"), wrapper
    written = tree / "escaped"
    outcome: list[str] = []

    def write() -> None:
        try:
            written.write_text("x")
            outcome.append("written")
        except ReadOnlyViolationError as exc:
            outcome.append(str(exc))

    guard = Guard("validation 'v'")
    with guarded(guard):
        done = threading.Event()
        start = getattr(_thread.start_new_thread, "__wrapped__", _thread.start_new_thread)
        start(lambda: (write(), done.set()), ())
        done.wait(10)
    assert outcome and "read-only" in outcome[0] and not written.exists()
    assert guard.violation is not None


def test_a_library_thread_first_started_in_a_call_names_itself_once_refused(
    tree: Path,
) -> None:
    """A library's background thread first started during a call keeps that call's lease:
    once the call has ended, what it does for anyone is refused, and the refusal names
    the thread, to find it by (warm the library up before, or start it under
    ``unguarded()`` from host code)."""
    import queue

    jobs: queue.Queue[tuple[Path, list[str], threading.Event]] = queue.Queue()

    def serve() -> None:
        while True:
            path, out, done = jobs.get()
            try:
                path.write_text("x")
                out.append("written")
            except ReadOnlyViolationError as exc:
                out.append(str(exc))
            done.set()

    def log(path: Path) -> str:
        out: list[str] = []
        done = threading.Event()
        jobs.put((path, out, done))
        done.wait(10)
        return out[0]

    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        threading.Thread(target=serve, name="lib-logger", daemon=True).start()
        assert log(context.scratch / "log") == "written"
    outcome = log(tree / "host-log")  # host code, unguarded, after the call
    assert "has ended" in outcome and "'lib-logger'" in outcome, outcome
    assert not (tree / "host-log").exists()
    assert guard.violation is None
    context.cleanup()


def test_the_garbage_collector_is_refused(tree: Path) -> None:
    """gc.get_objects, get_referrers and get_referents reach every object of the process,
    gategraph's database connections and the guard's record included: refused."""
    import gc

    guard = Guard("validation 'v'")
    with guarded(guard):
        for reach in (
            gc.get_objects,
            lambda: gc.get_referrers(guard),
            lambda: gc.get_referents(guard),
        ):
            with pytest.raises(ReadOnlyViolationError, match=r"gc\.get_"):
                reach()
    assert guard.violation is not None


def test_sqlite_creates_databases_only_in_scratch(tree: Path) -> None:
    """Connecting creates a SQLite database that is not there: outside scratch, refused.
    An existing database opens (to read it); in scratch and in memory, it is the call's."""
    existing = tree / "data.db"
    with sqlite3.connect(existing) as made:
        made.execute("create table t (x)")
        made.execute("insert into t values (1)")
    made.close()
    before = snapshot(tree)
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        for database in (tree / "new.db", f"file:{tree / 'new.db'}?mode=rwc", tree / "no" / "x"):
            with pytest.raises(ReadOnlyViolationError, match="creating the SQLite database"):
                sqlite3.connect(database, uri=True)
        assert guard.violation is not None
        for reader in (
            sqlite3.connect(f"file:{existing}?mode=ro", uri=True),
            sqlite3.connect(existing),
        ):
            assert reader.execute("select x from t").fetchall() == [(1,)]
            reader.close()
        own = sqlite3.connect(context.scratch / "own.db")
        own.execute("create table t (x)")
        own.commit()
        own.close()
        sqlite3.connect(":memory:").close()
    assert snapshot(tree) == before
    context.cleanup()


def test_sqlite_uris_cannot_smuggle_a_new_database_out(tree: Path) -> None:
    """A URI is judged as SQLite reads it: percent-escapes decoded (a ``..%2F`` climbing out
    of scratch), every ``mode`` read-only, ``immutable`` no permission to create, a
    fragment ending it; the name is also judged as a plain file name (without
    ``uri=True``)."""
    outside = tree / "outside"
    outside.mkdir()
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        scratch = context.scratch
        for database in (
            f"file:{scratch}/{'..%2F' * 40}{str(outside).lstrip('/').replace('/', '%2F')}%2Fb.db",
            f"file:{scratch}/..%2Fb.db",
            f"file:{outside}/c.db?mode=rwc&immutable=1",
            f"file:{outside}/c.db?immutable=1",
            f"file:{outside}/c.db?mode=ro&mode=rwc",
            f"file:{outside}/c.db#?mode=ro",
            f"file:{outside}/c.db?m%6Fde=rwc",
        ):
            with pytest.raises(ReadOnlyViolationError, match="creating the SQLite database"):
                sqlite3.connect(database, uri=True).execute("create table t (x)")
        for relative in ("file:plain.db", "file:plain.db?mode=ro"):
            with pytest.raises(ReadOnlyViolationError, match="creating the SQLite database"):
                sqlite3.connect(relative)  # a file named so in the working directory
        own = sqlite3.connect(f"file:{scratch}/own.db?mode=rwc", uri=True)
        own.execute("create table t (x)")
        own.close()
    assert guard.violation is not None
    assert list(outside.iterdir()) == []
    context.cleanup()


@pytest.mark.parametrize("statement", ["attach database '{}' as x", "vacuum into '{}'"])
def test_sqlite_attaches_no_new_database_outside_scratch(tree: Path, statement: str) -> None:
    """``ATTACH DATABASE`` and ``VACUUM INTO`` create the file they name: a connection made
    during the call is denied one outside scratch (SQLite's error; the guard records it),
    and may attach an existing database, or one in scratch."""
    existing = tree / "data.db"
    sqlite3.connect(existing).close()
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    with guarded(guard):
        connection = sqlite3.connect(":memory:")
        connection.execute("create table t (x)")
        with pytest.raises(sqlite3.DatabaseError, match="authoriz"):
            connection.execute(statement.format(tree / "new.db"))
        assert guard.violation is not None and "new.db" in guard.violation
        connection.execute(statement.format(context.scratch / "copy.db"))
        if statement.startswith("attach"):
            connection.execute(statement.format(existing).replace(" x", " y"))
        connection.close()
    assert not (tree / "new.db").exists()
    context.cleanup()


# -- 6. known limits: what the guard does NOT see (docs/readonly.md) ---------------------------
# Each test asserts that the write gets through. A test here that starts failing means the
# guard now sees more: move the case up, and take it off the list in docs/readonly.md.


def test_limit_a_fresh_context(tree: Path) -> None:
    """KNOWN LIMIT: code run in a context not copied from the call's."""
    guard = Guard("validation 'v'")
    with guarded(guard):
        contextvars.Context().run((tree / "fresh").write_text, "x")
    assert (tree / "fresh").exists() and guard.violation is None


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_limit_a_trio_system_task(tree: Path) -> None:
    """KNOWN LIMIT: trio runs system tasks in its own context, not the caller's."""
    import trio

    done = trio.Event()

    async def writer() -> None:
        (tree / "by-system-task").write_text("x")
        done.set()

    guard = Guard("validation 'v'")
    with guarded(guard):
        trio.lowlevel.spawn_system_task(writer)
        await done.wait()
    assert (tree / "by-system-task").exists() and guard.violation is None


def test_limit_work_handed_to_a_thread_already_running(tree: Path) -> None:
    """KNOWN LIMIT: a thread that was running before the call (not a ThreadPoolExecutor's)
    does what it is handed through a queue of its own under its own context: unguarded."""
    import queue

    jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
    done = threading.Event()

    def serve() -> None:
        jobs.get()()
        done.set()

    server = threading.Thread(target=serve)
    server.start()
    guard = Guard("validation 'v'")
    with guarded(guard):
        jobs.put(functools.partial((tree / "by-a-running-thread").write_text, "x"))
        assert done.wait(60)
    server.join(60)
    assert (tree / "by-a-running-thread").exists() and guard.violation is None


def test_limit_compiled_code_and_ctypes(tree: Path) -> None:
    """KNOWN LIMIT: C code (an extension, or libc through ctypes) writes unseen."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    target = tree / "pkg" / "a.py"
    guard = Guard("validation 'v'")
    with guarded(guard):
        fd = libc.open(os.fsencode(target), os.O_WRONLY | os.O_TRUNC)
        assert fd >= 0
        libc.write(fd, b"by C\n", 5)
        libc.close(fd)
    assert target.read_text() == "by C\n" and guard.violation is None


def test_limit_standard_modules_that_write_in_c(tree: Path) -> None:
    """KNOWN LIMIT: a standard-library module written in C that opens files itself, such
    as readline's history files, writes without an audit event."""
    readline = pytest.importorskip("readline")
    target = tree / "history"
    guard = Guard("validation 'v'")
    with guarded(guard):
        readline.write_history_file(os.fspath(target))
    assert target.exists() and guard.violation is None


def test_limit_a_descriptor_opened_before_the_call(tree: Path) -> None:
    """KNOWN LIMIT: the guard judges opening a file, not each write to an open descriptor."""
    fd = os.open(tree / "pkg" / "a.py", os.O_WRONLY | os.O_APPEND)
    guard = Guard("validation 'v'")
    try:
        with guarded(guard):
            os.write(fd, b"appended\n")
    finally:
        os.close(fd)
    assert (tree / "pkg" / "a.py").read_text() == ORIGINAL + "appended\n"
    assert guard.violation is None


def test_limit_a_command_once_started_in_its_copy(tree: Path) -> None:
    """KNOWN LIMIT: a command run in a disposable copy is not watched: it writes anywhere,
    and reaches the network though the validation does not declare it."""
    guard = Guard("validation 'v'")
    context = ToolContext(resources={"root": tree}, guard=guard)
    target = tree / "pkg" / "a.py"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with guarded(guard):
            copy = context.disposable_copy()
            subprocess.run(
                [sys.executable, "-c", f"open({str(target)!r}, 'w').write('by a child')"],
                cwd=copy,
                check=True,
            )
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    f"import socket; socket.create_connection(('127.0.0.1', {port})).close()",
                ],
                cwd=copy,
                check=True,
            )
        listener.settimeout(10)
        listener.accept()[0].close()
    assert target.read_text() == "by a child" and guard.violation is None
    context.cleanup()


def test_limit_multiprocessing_spawn(tree: Path) -> None:
    """KNOWN LIMIT: multiprocessing's spawn and forkserver start processes without an audit
    event (its fork method is refused, as os.fork)."""
    guard = Guard("validation 'v'")
    target = tree / "by-spawned-process"
    with guarded(guard):
        process = multiprocessing.get_context("spawn").Process(
            target=functools.partial(Path.write_text, target, "x")
        )
        process.start()
        process.join(60)
    assert process.exitcode == 0
    assert target.exists() and guard.violation is None


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX only")
def test_limit_posixsubprocess_fork_exec(tree: Path) -> None:
    """KNOWN LIMIT: the C function under subprocess starts a command without an audit event,
    in whatever working directory it is given (here the resource)."""
    import _posixsubprocess

    script = "open('by-fork-exec', 'w').write('x')"
    argv = [os.fsencode(sys.executable), b"-c", script.encode()]
    guard = Guard("validation 'v'")
    errpipe_read, errpipe_write = os.pipe()
    try:
        with guarded(guard):
            # The arguments multiprocessing.util.spawnv_passfds passes (3.11 to 3.13), with
            # a working directory.
            pid = _posixsubprocess.fork_exec(
                argv, [argv[0]], True, (), os.fsencode(tree), None,
                -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write,
                False, False, -1, None, None, None, -1, None,
                subprocess._USE_VFORK,  # type: ignore[attr-defined]
            )  # fmt: skip
    finally:
        os.close(errpipe_read)
        os.close(errpipe_write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert (tree / "by-fork-exec").read_text() == "x" and guard.violation is None


def test_os_level_starts_that_have_an_audit_event_are_refused(tree: Path) -> None:
    """os.posix_spawnp, os.fork, os.forkpty and pty.fork raise events of their own: refused."""
    import pty

    guard = Guard("validation 'v'")
    with guarded(guard):
        with pytest.raises(ReadOnlyViolationError, match="posix_spawn"):
            os.posix_spawnp("true", ["true"], dict(os.environ))
        with pytest.raises(ReadOnlyViolationError, match=r"os\.fork"):
            os.fork()
        with pytest.raises(ReadOnlyViolationError, match="forkpty"):
            os.forkpty()
        with pytest.raises(ReadOnlyViolationError, match=r"os\.fork"):
            pty.fork()  # tries os.forkpty, then os.fork
    assert guard.violation is not None


def test_limit_sqlite_writes_to_an_existing_database(tree: Path) -> None:
    """KNOWN LIMIT: SQLite writes in C: an existing database (opened during the call, or
    a connection held from before it) is written unseen."""
    with sqlite3.connect(tree / "held.db") as made:
        made.execute("create table t (x)")
    made.close()
    held = sqlite3.connect(tree / "held.db")
    guard = Guard("validation 'v'")
    try:
        with guarded(guard):
            held.execute("insert into t values (1)")
            held.commit()
            opened = sqlite3.connect(tree / "held.db")
            opened.execute("insert into t values (2)")
            opened.commit()
            opened.close()
    finally:
        held.close()
    with sqlite3.connect(tree / "held.db") as check:
        assert check.execute("select x from t order by x").fetchall() == [(1,), (2,)]
    check.close()
    assert guard.violation is None


def test_limit_sqlite_attach_through_an_authorizer_of_its_own(tree: Path) -> None:
    """KNOWN LIMIT: a connection's authorizer is what denies ``ATTACH`` and ``VACUUM INTO``
    outside scratch: one the validation replaces (``set_authorizer``), or a connection made
    by ``sqlite3.Connection(...)`` itself or through a ``connect`` taken before gategraph
    first guarded a call, attaches anywhere unseen."""
    import sqlite3.dbapi2

    guard = Guard("validation 'v'")
    try:
        with guarded(guard):
            replaced = sqlite3.connect(":memory:")
            replaced.set_authorizer(None)
            replaced.execute(f"vacuum into '{tree / 'replaced.db'}'")
            replaced.close()
            direct = sqlite3.Connection(":memory:")
            direct.execute(f"attach database '{tree / 'direct.db'}' as x")
            direct.execute("create table x.t (a)")
            direct.close()
    finally:
        assert sqlite3.dbapi2.connect is sqlite3.connect
    assert (tree / "replaced.db").exists() and (tree / "direct.db").exists()
    assert guard.violation is None


def test_limit_code_written_to_defeat_the_guard(tree: Path) -> None:
    """KNOWN LIMIT: code that sets the guard's context variable itself, or runs in a fresh
    context, where it reaches every object of the process through the garbage collector
    (here a database connection standing for gategraph's own), acts unguarded."""
    import gc

    from gategraph.runtime._calls._readonly import LEASE

    owned = sqlite3.connect(":memory:")  # gategraph's event log, say
    owned.execute("create table events (x)")
    guard = Guard("validation 'v'")

    def through_the_collector() -> None:
        found = [o for o in gc.get_objects() if isinstance(o, sqlite3.Connection)]
        for connection in found:
            if connection is owned:
                connection.execute("insert into events values (1)")

    with guarded(guard):
        contextvars.Context().run(through_the_collector)
        token = LEASE.set(None)
        try:
            (tree / "lease-lifted").write_text("x")
        finally:
            LEASE.reset(token)
    assert owned.execute("select count(*) from events").fetchone() == (1,)
    assert (tree / "lease-lifted").exists() and guard.violation is None
    owned.close()


def test_allow_is_the_runtimes_own(tree: Path) -> None:
    """The runtime widens a guard with allow(); a guard has no method for it."""
    guard = Guard("validation 'v'")
    assert not hasattr(guard, "allow")
    allow(guard, tree)
    assert guard.allowed == (str(tree.resolve()) + os.sep,)


# -- 10. scratch left behind by a killed process ------------------------------------------------

MAKES_SCRATCH = """
import sys, time
from gategraph.runtime import ToolContext
context = ToolContext()
(context.scratch / "work.txt").write_text("in progress")
print(context.scratch, flush=True)
if sys.argv[1] == "wait":
    time.sleep(120)
"""


def start_maker(tmpdir: Path) -> tuple[subprocess.Popen[str], Path]:
    """A process that makes a scratch folder, says where, and waits to be killed."""
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    child = subprocess.Popen(
        [sys.executable, "-c", MAKES_SCRATCH, "wait"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    return child, Path(child.stdout.readline().strip())


def make_and_exit(tmpdir: Path) -> Path:
    """A process that makes a scratch folder and exits normally; where it was."""
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    done = run_process(
        [sys.executable, "-c", MAKES_SCRATCH, "exit"], env=env, check=True, timeout=60
    )
    return Path(done.stdout.strip())


def stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait(60)
    assert child.stdout is not None
    child.stdout.close()


def parents(tmpdir: Path) -> set[str]:
    return {p.name for p in tmpdir.iterdir() if p.name.startswith("gategraph-scratch-")}


def test_scratch_of_a_killed_process_is_swept(tmp_path: Path) -> None:
    """SIGKILL leaves scratch behind; the next process to make scratch removes it, and
    never the scratch of a process that is still alive."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    killed, killed_scratch = start_maker(tmpdir)
    alive, alive_scratch = start_maker(tmpdir)
    try:
        assert killed_scratch.parent.name.startswith(f"gategraph-scratch-{killed.pid}-")
        killed.send_signal(signal.SIGKILL)
        killed.wait(60)
        assert (killed_scratch / "work.txt").exists()  # what a kill leaves

        sweeper_scratch = make_and_exit(tmpdir)
        assert not killed_scratch.parent.exists()  # swept
        assert (alive_scratch / "work.txt").read_text() == "in progress"  # alive: kept
        assert not sweeper_scratch.parent.exists()  # a clean exit removes its own
        assert parents(tmpdir) == {alive_scratch.parent.name}
    finally:
        stop(killed)
        stop(alive)
    make_and_exit(tmpdir)
    assert parents(tmpdir) == set()


def test_a_parent_without_its_lock_yet_is_kept_while_its_process_lives(tmp_path: Path) -> None:
    """A parent folder whose owner has not locked it yet is judged by its process id."""
    from gategraph.runtime._calls._context import _sweep

    mine = tmp_path / f"gategraph-scratch-{os.getpid()}-abc123"
    mine.mkdir()
    gone = run_process([sys.executable, "-c", "import os; print(os.getpid())"], check=True)
    dead = tmp_path / f"gategraph-scratch-{gone.stdout.strip()}-abc123"
    dead.mkdir()
    older_release = tmp_path / "gategraph-scratch-k2j4h1x0"
    older_release.mkdir()
    assert _sweep(str(tmp_path)) == [str(dead)]
    assert mine.exists() and older_release.exists() and not dead.exists()


def test_honest_sqlite_uris_open_as_they_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `uri=True` a name is read as SQLite reads it: an existing database opened
    read-only by a relative URI, and a database in shared memory, open; the same names
    without `uri=True` would create files of those names, and are refused."""
    import sqlite3

    folder = tmp_path / "project"
    folder.mkdir()
    sqlite3.connect(folder / "ro.db").close()
    monkeypatch.chdir(folder)
    guard = Guard("validation 'v'")
    with guarded(guard):
        for name in ("file:ro.db?mode=ro", "file:memdb1?mode=memory&cache=shared"):
            sqlite3.connect(name, uri=True).close()
        sqlite3.connect("file::memory:?cache=shared", uri=True).close()
    assert guard.violation is None, guard.violation
    with guarded(Guard("validation 'v'")), pytest.raises(ReadOnlyViolationError, match="creating"):
        sqlite3.connect("file:ro.db?mode=ro")
    assert sorted(p.name for p in folder.iterdir()) == ["ro.db"]
