"""The kernel sandbox: validations in worker processes confined by the kernel.

Every technique that gets round the in-process guard (docs/readonly.md) is run here
through a real plan graph on the default settings, with no ``isolation:`` written, where
code that is not gategraph's own runs in the sandbox: nothing changes on disk, in the
process or on the network, and the validation does not pass — while the same things done
honestly pass.
The hostile validations live in tests/sandbox_hostile.py (workers import them from disk).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import assert_gone as helpers_assert_gone
from _helpers import python_prints, run_process, running
from gategraph.runtime import ConfigError
from gategraph.runtime._base._kernel import SandboxLimits, support
from gategraph.runtime._calls._sandbox import sandbox_pool
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import GraphRun, execute_graph

pytestmark = [
    pytest.mark.skipif(
        support().missing is not None, reason=f"no sandbox here: {support().missing}"
    ),
    pytest.mark.timeout(120),
]

ORIGINAL = "x = 1\n"
MODULE = "sandbox_hostile"


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1]))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text(ORIGINAL)
    with sqlite3.connect(root / "data.db") as db:
        db.execute("create table t (a)")
        db.execute("insert into t values (1)")
    return root


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    out: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (
            st.st_mode,
            path.read_bytes() if path.is_file() and not path.is_symlink() else None,
        )
    return out


def graph_text(
    repo: Path,
    *names: str,
    arguments: dict[str, dict[str, Any]] | None = None,
    timeouts: dict[str, float] | None = None,
) -> str:
    arguments = arguments or {}
    timeouts = timeouts or {}
    validations = "".join(
        f'  - {{name: {name}, entrypoint: "{MODULE}:{name}", resource_slots: [root]}}\n'
        for name in dict.fromkeys(names)
    )
    nodes = ""
    for index, name in enumerate(names):
        extra = f", arguments: {arguments[name]!r}" if name in arguments else ""
        extra += f", timeout: {timeouts[name]}" if name in timeouts else ""
        # No isolation: the default is what is tested.
        nodes += f"  - {{id: n{index}-{name}, validation: {name}{extra}}}\n"
    text = (
        "version: 1\nname: sandboxed\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        f"validations:\n{validations}nodes:\n{nodes}"
    )
    return text


def graph(repo: Path, *names: str, **kwargs: Any) -> Any:
    return load_graph(graph_text(repo, *names, **kwargs))


async def run(repo: Path, *names: str, **kwargs: Any) -> GraphRun:
    artifact = kwargs.pop("artifact", None)
    done = await execute_graph(graph(repo, *names, **kwargs), artifact=artifact)
    assert {(r.isolation, r.enforced_by) for r in done.validations} <= {("sandbox", "kernel")}
    return done


def sandboxed_validation(name: str) -> Any:
    """The hostile module's ``name``, prepared to run sandboxed, outside any plan."""
    from gategraph.runtime._calls._invoke import prepare
    from gategraph.runtime._data._models import Validation

    validation = Validation.model_validate(
        {
            "name": name,
            "source": "python",
            "entrypoint": f"{MODULE}:{name}",
            "resource_slots": ["root"],
        }
    )
    return prepare(validation, lambda name: None, isolation="sandbox")  # type: ignore[arg-type,return-value]


def result_of(done: GraphRun, name: str) -> Any:
    [record] = [r for r in done.validations if r.validation == name]
    return record.result


def assert_refused(done: GraphRun, name: str, *errors: str) -> None:
    result = result_of(done, name)
    assert not result.passed, result
    assert result.data.get("error") in (errors or ("read_only_violation", "exception")), result


# -- honest validations pass ------------------------------------------------------------------


@pytest.mark.anyio
async def test_honest_validations_pass_and_their_output_is_captured(repo: Path) -> None:
    before = snapshot(repo)
    done = await run(repo, "honest", "honest_async", "honest_sqlite")
    for name in ("honest", "honest_async", "honest_sqlite"):
        assert result_of(done, name).passed, result_of(done, name)
    [record] = [r for r in done.validations if r.validation == "honest"]
    assert "checked 6 bytes" in (record.captured or {}).get("stdout", "")
    assert snapshot(repo) == before


@pytest.mark.anyio
async def test_gategraph_never_runs_the_code_itself(repo: Path) -> None:
    """The parent neither imports a sandboxed entrypoint nor runs sandboxed inline code: a
    module that does harm when imported does it in the sandbox, where nothing comes of it."""
    text = (
        "version: 1\nname: loads\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "validations:\n"
        '  - {name: imported, entrypoint: "sandbox_on_import:check", resource_slots: [root]}\n'
        "  - name: inline\n"
        "    resource_slots: [root]\n"
        "    code: |\n"
        "      import os\n"
        "      try:\n"
        f"          open({str(repo / 'inline.txt')!r}, 'w').write('loaded')\n"
        "      except OSError:\n"
        "          pass\n"
        "      def run(root):\n"
        "          return {'passed': True}\n"
        "nodes:\n"
        "  - {id: a, validation: imported}\n"
        "  - {id: b, validation: inline}\n"
    )
    done = await execute_graph(load_graph(text))
    assert "sandbox_on_import" not in sys.modules
    assert result_of(done, "imported").passed
    assert result_of(done, "imported").data["pid"] != os.getpid()
    # The write its top level attempted (and caught) is refused by the kernel, and fails
    # its call as it would in any isolation: a validation's code only reads.
    assert_refused(done, "inline", "read_only_violation")
    assert "inline.txt" in result_of(done, "inline").message
    assert not (repo / "inline.txt").exists()


def test_a_misspelled_entrypoint_is_refused_without_importing_it(repo: Path) -> None:
    """The loader reads the module's source to find the name (nothing of it runs here):
    a callable it does not define is a config error before the plan starts."""
    sys.modules.pop("sandbox_on_import", None)
    text = (
        "version: 1\nname: loads\nvalidations:\n"
        '  - {name: missing, entrypoint: "sandbox_on_import:no_such_function"}\n'
        '  - {name: nowhere, entrypoint: "gategraph_no_such_module:run"}\n'
        "nodes:\n  - {id: c, validation: missing}\n  - {id: d, validation: nowhere}\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_graph(text)
    message = str(raised.value)
    assert "'sandbox_on_import' has no attribute 'no_such_function'" in message
    assert "cannot import 'gategraph_no_such_module'" in message
    assert "sandbox_on_import" not in sys.modules


@pytest.mark.anyio
async def test_an_entrypoint_that_fails_to_import_is_a_misconfiguration_of_its_call(
    repo: Path,
) -> None:
    """What only importing can tell (here: the module raises as it loads) the sandbox
    reports, as that call's misconfiguration."""
    module = repo / "gg_breaks_on_import.py"
    module.write_text(
        "raise ImportError('needs a package this machine lacks')\ndef run():\n    pass\n"
    )
    text = (
        "version: 1\nname: loads\nvalidations:\n"
        '  - {name: broken, entrypoint: "gg_breaks_on_import:run"}\n'
        "nodes:\n  - {id: a, validation: broken}\n"
    )
    sys.path.insert(0, str(repo))
    try:
        done = await execute_graph(load_graph(text))
    finally:
        sys.path.remove(str(repo))
    broken = result_of(done, "broken")
    assert broken.data["error"] == "misconfigured" and "lacks" in broken.message


def test_inline_code_without_run_is_refused_before_the_plan_starts(repo: Path) -> None:
    text = (
        "version: 1\nname: bad\nvalidations:\n"
        "  - {name: nothing, code: 'x = 1'}\n"
        "nodes:\n  - {id: a, validation: nothing, isolation: sandbox}\n"
    )
    with pytest.raises(ConfigError, match=r"must define `run\(...\)`"):
        anyio.run(execute_graph, load_graph(text))


# -- 1. threads -------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["thread_now", "executor_write"])
async def test_a_thread_of_the_call_is_guarded_too(
    repo: Path, name: str, anyio_backend: str
) -> None:
    if name == "executor_write" and anyio_backend != "asyncio":
        pytest.skip("run_in_executor is asyncio's (the call runs on its caller's backend)")
    done = await run(repo, name)
    assert_refused(done, name, "read_only_violation")
    assert (repo / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
async def test_a_thread_that_writes_after_the_call_returned_fails_it(repo: Path) -> None:
    done = await run(repo, "thread_late", "honest")
    result = result_of(done, "thread_late")
    assert not result.passed and result.data["error"] == "read_only_violation"
    assert "after the call returned" in result.message
    assert result_of(done, "honest").passed
    assert (repo / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
async def test_a_thread_left_running_fails_the_call_and_its_worker_is_replaced(repo: Path) -> None:
    done = await run(repo, "thread_forever", "reads_env", "reads_env")
    result = result_of(done, "thread_forever")
    assert result.data["error"] == "read_only_violation"
    assert "1 thread running" in result.message
    assert all(r.result.passed for r in done.validations if r.validation == "reads_env")


# -- 2. native code -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_ctypes_writes_fail_and_change_nothing(repo: Path) -> None:
    before = snapshot(repo)
    done = await run(repo, "ctypes_write")
    assert_refused(done, "ctypes_write", "read_only_violation")
    assert "through ctypes" in result_of(done, "ctypes_write").message
    assert snapshot(repo) == before


@pytest.mark.anyio
async def test_the_kernel_stops_what_a_defeated_guard_lets_through(repo: Path) -> None:
    """With the in-process guard switched off, a native unlink whose error code is ignored:
    the call may pass (it saw nothing fail), but the file is still there."""
    before = snapshot(repo)
    await run(repo, "defeats_guard_then_native")
    assert snapshot(repo) == before


# -- 3. sqlite ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_sqlite_cannot_change_or_create_a_database(repo: Path) -> None:
    before = snapshot(repo)
    done = await run(repo, "sqlite_insert", "sqlite_new")
    assert_refused(done, "sqlite_insert", "exception")
    assert_refused(done, "sqlite_new", "exception")
    assert snapshot(repo) == before
    with sqlite3.connect(repo / "data.db") as db:
        assert db.execute("select count(*) from t").fetchone() == (1,)


@pytest.mark.anyio
async def test_the_event_log_is_out_of_reach(repo: Path, tmp_path: Path) -> None:
    from gategraph.runtime import SQLiteEventLog

    path = tmp_path / "events.db"
    async with SQLiteEventLog(path) as log:
        done = await execute_graph(
            graph(repo, "sqlite_event_log", arguments={"sqlite_event_log": {"log": str(path)}}),
            event_log=log,
        )
    assert_refused(done, "sqlite_event_log", "exception")
    with sqlite3.connect(path) as db:
        assert db.execute("select count(*) from event_segments").fetchone()[0] > 0


def metadata(path: Path) -> tuple[int, int, int, int, list[str]]:
    st = path.stat()
    return st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, os.listxattr(path)


@pytest.mark.anyio
async def test_file_metadata_cannot_change_from_a_command(repo: Path) -> None:
    """Permissions, timestamps and owners, which Landlock does not cover: every mount the
    worker sees is read-only, so a command's chmod, touch and chown fail and change
    nothing, while changing its own scratch file works."""
    before = metadata(repo / "a.py")
    done = await run(repo, "command_changes_metadata")
    codes = result_of(done, "command_changes_metadata").data
    assert codes == {"chmod": 1, "touch": 1, "chown": 1, "own": 0}, codes
    assert metadata(repo / "a.py") == before


@pytest.mark.anyio
async def test_file_metadata_cannot_change_natively_with_the_guard_off(repo: Path) -> None:
    before = metadata(repo / "a.py")
    done = await run(repo, "native_metadata")
    assert result_of(done, "native_metadata").data == {"chmod": -1, "utimes": -1, "setxattr": -1}
    assert metadata(repo / "a.py") == before


@pytest.mark.anyio
async def test_the_event_log_cannot_be_locked(repo: Path, tmp_path: Path) -> None:
    """A read lock on the log's files would stall the run's writer: the sandbox sees
    gategraph's open databases as empty devices, so the lock takes nothing and the run
    ends with every event written."""
    from gategraph.runtime import SQLiteEventLog

    path = tmp_path / "events.db"
    arguments = {"locks_the_log": {"log": str(path)}}
    async with SQLiteEventLog(path) as log:
        with anyio.fail_after(60):
            done = await execute_graph(
                graph(repo, "locks_the_log", arguments=arguments), event_log=log
            )
    seen = result_of(done, "locks_the_log").data
    assert seen == {"db": "device", "-wal": "device", "-shm": "device"}, seen
    with sqlite3.connect(path) as db:
        assert db.execute("select count(*) from event_segments").fetchone()[0] > 0


@pytest.mark.anyio
async def test_a_log_opened_again_is_hidden_again(repo: Path, tmp_path: Path) -> None:
    """Closing a log removes its -wal and -shm files (and so what hid them in a worker);
    opened again, workers started before do not run calls: the new files are hidden too."""
    from gategraph.runtime import SQLiteEventLog

    path = tmp_path / "events.db"
    arguments = {"locks_the_log": {"log": str(path)}}
    async with sandbox_pool():
        for _ in range(2):
            async with SQLiteEventLog(path) as log:
                done = await execute_graph(
                    graph(repo, "locks_the_log", arguments=arguments), event_log=log
                )
            seen = result_of(done, "locks_the_log").data
            assert seen == {"db": "device", "-wal": "device", "-shm": "device"}, seen


@pytest.mark.anyio
async def test_plans_leases_are_out_of_reach(repo: Path, tmp_path: Path) -> None:
    """A lock on a plan's lease file would refuse that plan to every supervisor: the
    folder of leases is empty in the sandbox."""
    from gategraph.runtime import SQLiteEventLog

    path = tmp_path / "events.db"
    arguments = {"locks_the_leases": {"log": str(path)}}
    async with SQLiteEventLog(path) as log:
        with log.lease("another-plan"):
            done = await execute_graph(
                graph(repo, "locks_the_leases", arguments=arguments), event_log=log
            )
        assert result_of(done, "locks_the_leases").data == {"leases": []}
        with log.lease("another-plan"):
            pass  # not held by anyone


@pytest.mark.anyio
async def test_a_resource_folders_journal_is_out_of_reach(repo: Path) -> None:
    """A lock on a folder's journal would keep every apply into it waiting: the journal
    (here, as another plan's apply leaves it midway) is an empty folder in the sandbox."""
    journal = repo / ".gategraph-journal"
    journal.mkdir()
    (journal / "lock").write_text("")
    done = await run(repo, "locks_the_journal")
    assert result_of(done, "locks_the_journal").data == {"journal": []}


@pytest.mark.anyio
async def test_an_error_inside_a_pool_comes_out_as_itself() -> None:
    with pytest.raises(KeyError, match="mine"):
        async with sandbox_pool(prewarm=1):
            raise KeyError("mine")


@pytest.mark.anyio
async def test_a_worker_started_before_a_log_opened_does_not_see_it(
    repo: Path, tmp_path: Path
) -> None:
    """Workers started ahead of need, before gategraph opened a database, are spares: they
    confine themselves when a call takes one, and hide what is open then."""
    from gategraph.runtime import SQLiteEventLog

    path = tmp_path / "late.db"
    arguments = {"locks_the_log": {"log": str(path)}}
    async with sandbox_pool() as pool:
        await pool.fill(2)
        started = {w.process.pid for w in pool._idle}
        async with SQLiteEventLog(path) as log:
            done = await execute_graph(
                graph(repo, "locks_the_log", arguments=arguments), event_log=log
            )
        assert result_of(done, "locks_the_log").data["db"] == "device"
        # A spare ran the call, and was kept for the validation's next.
        assert any(w.confined and w.process.pid in started for w in pool._idle)


@pytest.mark.anyio
async def test_the_folder_is_limited_in_size_and_leaves_nothing_on_disk(repo: Path) -> None:
    from gategraph.runtime._calls._invoke import to_result

    prepared = sandboxed_validation("fills_the_disk")
    async with sandbox_pool(limits=SandboxLimits(disk=4 << 20)) as pool:
        outcome = await prepared.call({}, {"root": repo})
        folders = [w.folder for w in pool._idle]
        assert folders and all(os.listdir(f) == [] for f in folders)
    result = to_result(outcome)
    assert not result.passed and "No space left on device" in result.message, result


@pytest.mark.anyio
async def test_one_plans_artifact_never_reaches_another_plans_call(repo: Path) -> None:
    """Runs that share a pool share its workers, which load the validation once; each
    plan's calls run in a process of their own, so what a call keeps in its module stays
    with its plan."""
    async with sandbox_pool():
        first = await run(repo, "remembers", artifact="plan one's")
        second = await run(repo, "remembers", artifact="plan two's")
    one, two = (result_of(done, "remembers").data for done in (first, second))
    assert one["seen"] == ["plan one's"] and two["seen"] == ["plan two's"], (one, two)
    assert one["loaded_in"] == two["loaded_in"]  # loaded once, by the same worker


@pytest.mark.anyio
async def test_no_new_namespace_and_no_mount(repo: Path) -> None:
    """A nested user namespace would hold every capability inside it: unshare, mount and
    the unshare command all fail."""
    done = await run(repo, "new_namespace")
    found = result_of(done, "new_namespace").data
    assert found["unshare"] == -1 and found["mount"] == -1, found
    assert found["command"] != 0, found


# -- 4. network -----------------------------------------------------------------------------


class Listener:
    def __init__(self, kind: int = socket.SOCK_STREAM) -> None:
        self.sock = socket.socket(socket.AF_INET, kind)
        self.sock.bind(("127.0.0.1", 0))
        if kind == socket.SOCK_STREAM:
            self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.kind = kind

    def heard(self) -> bool:
        try:
            if self.kind == socket.SOCK_STREAM:
                self.sock.accept()[0].close()
            else:
                self.sock.recv(16)
        except TimeoutError:
            return False
        return True


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "kind"),
    [("connects", socket.SOCK_STREAM), ("fetches", socket.SOCK_STREAM), ("udp", socket.SOCK_DGRAM)],
)
async def test_no_network(repo: Path, name: str, kind: int) -> None:
    listener = Listener(kind)
    try:
        done = await run(repo, name, arguments={name: {"port": listener.port}})
        assert_refused(done, name, "exception")
        assert not listener.heard()
    finally:
        listener.sock.close()


# -- 5. commands ----------------------------------------------------------------------------


async def assert_gone(marker: str) -> None:
    """Every process whose command line has ``marker`` ends."""
    await anyio.to_thread.run_sync(helpers_assert_gone, marker)


@pytest.mark.anyio
async def test_a_command_cannot_write_outside_its_scratch(repo: Path) -> None:
    done = await run(repo, "command_writes_absolute")
    assert_refused(done, "command_writes_absolute", "exception")
    assert (repo / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["command_left_running", "command_new_session"])
async def test_a_command_left_running_fails_the_call_and_is_killed(repo: Path, name: str) -> None:
    marker = f"gg-{uuid.uuid4().hex}"
    done = await run(repo, name, arguments={name: {"marker": marker}})
    assert_refused(done, name)
    await assert_gone(marker)


@pytest.mark.anyio
async def test_a_timeout_kills_the_worker_and_what_it_started(repo: Path) -> None:
    marker = f"gg-{uuid.uuid4().hex}"
    # Only the sleeper is timed: an honest call's own worker start may take over a second
    # on a loaded machine.
    done = await run(
        repo,
        "sleeps",
        "honest",
        arguments={"sleeps": {"marker": marker}},
        timeouts={"sleeps": 1.0},
    )
    assert_refused(done, "sleeps", "timeout")
    assert result_of(done, "honest").passed
    await assert_gone(marker)


# -- 6. special files and links -----------------------------------------------------------


@pytest.mark.anyio
async def test_no_fifo_device_or_hard_link(repo: Path) -> None:
    before = snapshot(repo)
    done = await run(repo, "fifo", "node", "hard_link")
    for name in ("fifo", "node", "hard_link"):
        assert_refused(done, name)
    assert snapshot(repo) == before


# -- 7. the artifact ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_artifact_arrives_as_a_copy_and_changing_it_fails(repo: Path) -> None:
    artifact = {"files": ["a.py"]}
    done = await run(repo, "mutates_artifact", "reads_artifact", artifact=artifact)
    assert_refused(done, "mutates_artifact", "read_only_violation")
    assert result_of(done, "reads_artifact").passed
    assert artifact == {"files": ["a.py"]}


# -- 8. process state ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_environment_and_working_directory_stay_as_they_were(repo: Path) -> None:
    cwd = os.getcwd()
    done = await run(repo, "sets_env", "sets_env_natively", "changes_directory", "reads_env")
    for name in ("sets_env", "sets_env_natively", "changes_directory"):
        assert_refused(done, name, "read_only_violation")
    assert result_of(done, "reads_env").passed
    assert "GG_EVIL" not in os.environ and os.getcwd() == cwd


@pytest.mark.anyio
async def test_the_parents_secrets_stay_out(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GG_SECRET", "sk-not-for-validations")
    done = await run(repo, "sees_no_secrets", "sees_secrets")
    assert result_of(done, "sees_no_secrets").passed
    assert_refused(done, "sees_secrets", "exception")  # the parent's environ is unreadable


# -- 9. the guard itself ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_patching_the_guard_leaves_the_kernel(repo: Path) -> None:
    done = await run(repo, "patches_guard", "honest")
    assert_refused(done, "patches_guard", "exception")
    assert result_of(done, "honest").passed
    assert (repo / "a.py").read_text() == ORIGINAL


@pytest.mark.anyio
async def test_a_forged_answer_sways_no_other_validation(repo: Path) -> None:
    """A call owns its worker and can write any answer into its pipe: it decides its own
    verdict anyway. A worker that ran one validation runs no other, so the forged answers
    it left in the pipe reach no one else's call."""
    text = graph_text(repo, "forges_answers", "fails", "fails").replace(
        "nodes:\n", "policy: {max_concurrency: 1}\nnodes:\n"
    )
    done = await execute_graph(load_graph(text))
    others = [r.result for r in done.validations if r.validation == "fails"]
    assert [r.message for r in others] == ["an honest failure"] * 2
    assert not any(r.passed for r in others)


@pytest.mark.anyio
async def test_an_answer_that_is_no_outcome_fails_the_call_not_the_run(repo: Path) -> None:
    done = await run(repo, "forges_a_bad_outcome", "honest")
    assert_refused(done, "forges_a_bad_outcome", "malformed")
    assert "answer channel" in result_of(done, "forges_a_bad_outcome").message
    assert result_of(done, "honest").passed


@pytest.mark.anyio
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the test's clone is x86-64's")
async def test_no_process_escapes_the_worker_and_no_memory_or_ipc_outside_it(repo: Path) -> None:
    done = await run(repo, "sibling", "memfd", "sysv")
    for name in ("sibling", "memfd", "sysv"):
        assert_refused(done, name, "exception")


# -- 10. signals and deaths -------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_worker_that_dies_is_an_infrastructure_fault_of_that_call_only(repo: Path) -> None:
    done = await run(repo, "kills_itself", "exits", "honest")
    for name in ("kills_itself", "exits"):
        result = result_of(done, name)
        assert result.data["error"] == "unavailable", result
    assert "SIGTERM" in result_of(done, "kills_itself").message
    assert "status 3" in result_of(done, "exits").message
    assert result_of(done, "honest").passed


@pytest.mark.anyio
async def test_signals_cannot_leave_the_sandbox(repo: Path) -> None:
    done = await run(repo, "kills_parent", arguments={"kills_parent": {"target": os.getpid()}})
    assert_refused(done, "kills_parent", "exception")
    assert "Operation not permitted" in result_of(done, "kills_parent").message


@pytest.mark.anyio
async def test_a_call_that_kills_its_own_worker_fails_alone(repo: Path) -> None:
    """Inside the sandbox a call may signal its own worker: that ends the worker, an
    infrastructure fault of that call only."""
    done = await run(repo, "kills_parent", "honest")
    result = result_of(done, "kills_parent")
    assert result.data.get("error") == "unavailable" and "SIGTERM" in result.message, result
    assert result_of(done, "honest").passed


# -- limits and results -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_memory_is_limited(repo: Path) -> None:
    done = await run(repo, "big_memory")
    assert_refused(done, "big_memory", "exception")
    assert "MemoryError" in result_of(done, "big_memory").message


@pytest.mark.anyio
async def test_file_size_is_limited(repo: Path) -> None:
    from gategraph.runtime._calls._invoke import to_result

    prepared = sandboxed_validation("big_file")
    async with sandbox_pool(limits=SandboxLimits(file_size=1 << 20)):
        outcome = await prepared.call({}, {"root": repo})
    result = to_result(outcome)
    assert not result.passed and "File too large" in result.message


@pytest.mark.anyio
async def test_output_is_bounded(repo: Path) -> None:
    done = await run(repo, "chatty")
    [record] = done.validations
    stdout = (record.captured or {})["stdout"]
    assert "line 19999" in stdout and "earlier characters not kept" in stdout
    dropped = int(stdout.split(" earlier", 1)[0].lstrip("["))
    assert dropped > 200_000  # the worker's count of what it did not keep carries over
    assert len(stdout) < 10_000


@pytest.mark.anyio
async def test_a_result_that_is_not_plain_data_is_malformed(repo: Path) -> None:
    done = await run(repo, "not_plain_data")
    assert_refused(done, "not_plain_data", "malformed")


# -- failing closed ----------------------------------------------------------------------------


def test_a_machine_without_the_sandbox_refuses_a_plan_that_asks_for_it(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gategraph.runtime._base import _kernel

    monkeypatch.setattr(
        _kernel,
        "_support",
        _kernel.Support(
            4, True, "x86_64", "the sandbox needs Landlock ABI 6; this kernel has ABI 4"
        ),
    )
    asked = graph_text(repo, "honest").replace(
        "validation: honest", "validation: honest, isolation: sandbox"
    )
    with pytest.raises(ConfigError, match="Landlock ABI 6"):
        anyio.run(execute_graph, load_graph(asked))


def test_no_thread_is_left_behind_by_the_pool(repo: Path) -> None:
    before = threading.active_count()
    anyio.run(run, repo, "honest")
    assert threading.active_count() <= before + 1  # anyio's idle worker thread at most


# -- policy, untrusted code, and the record of what ran a call ----------------------------------


def policy_graph(repo: Path, *, isolation: str | None = None, extra: str = "") -> str:
    node_isolation = f", isolation: {isolation}" if isolation else ""
    return (
        "version: 1\nname: required\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "policy: {require_sandbox: true}\n"
        "validations:\n"
        f'  - {{name: honest, entrypoint: "{MODULE}:honest", resource_slots: [root]}}\n'
        f"{extra}"
        "nodes:\n"
        f"  - {{id: a, validation: honest{node_isolation}}}\n"
    )


@pytest.mark.anyio
async def test_a_policy_can_require_the_sandbox_for_every_validation(repo: Path) -> None:
    done = await execute_graph(load_graph(policy_graph(repo)))
    [record] = done.validations
    assert record.result.passed and record.isolation == "sandbox"


def test_a_policy_that_requires_the_sandbox_refuses_another_isolation(repo: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_graph(policy_graph(repo, isolation="thread"))
    message = str(caught.value)
    assert "nodes[0].isolation" in message and "require_sandbox" in message


def test_a_policy_that_requires_the_sandbox_refuses_an_mcp_validation(repo: Path) -> None:
    text = policy_graph(
        repo,
        extra="  - {name: remote, mcp_server: s, mcp_tool_name: t, trust_read_only: true}\n",
    ).replace(
        "nodes:\n",
        "mcp_servers: {s: {command: python}}\nnodes:\n  - {id: r, validation: remote}\n",
    )
    with pytest.raises(ConfigError, match="outside any sandbox"):
        load_graph(text)


def untrusted_graph(repo: Path, node: str) -> str:
    wrapper = (
        "  - {name: wrapper, wraps: vendor, transform: output, untrusted: true}\n"
        if "wrapper" in node
        else ""
    )
    return (
        "version: 1\nname: untrusted\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "validations:\n"
        '  - {name: vendor, entrypoint: "sandbox_on_import:check", untrusted: true,'
        " resource_slots: [root]}\n"
        f"{wrapper}nodes:\n  - {node}\n"
    )


@pytest.mark.anyio
async def test_untrusted_code_always_runs_in_the_sandbox_and_never_here(repo: Path) -> None:
    sys.modules.pop("sandbox_on_import", None)
    graph = load_graph(untrusted_graph(repo, "{id: a, validation: vendor}"))
    done = await execute_graph(graph)
    [record] = done.validations
    assert record.result.passed and record.isolation == "sandbox"
    assert record.result.data["pid"] != os.getpid()
    assert "sandbox_on_import" not in sys.modules  # not even to check the graph


@pytest.mark.parametrize(
    ("node", "words"),
    [
        ("{id: a, validation: vendor, isolation: process}", "is untrusted"),
        ("{id: a, validation: wrapper, isolation: thread}", "is untrusted"),
    ],
)
def test_untrusted_code_cannot_be_run_anywhere_else(repo: Path, node: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_graph(untrusted_graph(repo, node))


@pytest.mark.anyio
async def test_the_record_says_what_ran_each_call(repo: Path, tmp_path: Path) -> None:
    from gategraph.runtime import MemoryEventLog
    from gategraph.runtime._data._events import ValidationCompleted

    text = (
        "version: 1\nname: where\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "validations:\n"
        f'  - {{name: sync, entrypoint: "{MODULE}:reads_env", resource_slots: [root]}}\n'
        f'  - {{name: async, entrypoint: "{MODULE}:honest_async", resource_slots: [root]}}\n'
        "nodes:\n"
        "  - {id: t, validation: sync, isolation: thread}\n"
        "  - {id: p, validation: sync, isolation: process}\n"
        "  - {id: s, validation: sync, isolation: sandbox}\n"
        "  - {id: i, validation: async, isolation: inline}\n"
        "  - {id: d, validation: async}\n"
    )
    log = MemoryEventLog()
    done = await execute_graph(load_graph(text), event_log=log)
    ran = {r.node: r.isolation for r in done.validations}
    assert ran == {"t": "thread", "p": "process", "s": "sandbox", "i": "inline", "d": "sandbox"}
    held = {r.node: r.enforced_by for r in done.validations}
    assert held == {"t": "guard", "p": "guard", "s": "kernel", "i": "guard", "d": "kernel"}
    events = [e for e in await log.read(done.plan_id) if isinstance(e, ValidationCompleted)]
    assert {e.node: e.isolation for e in events} == ran


def test_check_refuses_a_plan_that_needs_the_sandbox_where_there_is_none(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner
    from gategraph.runtime._base import _kernel
    from gategraph.runtime._cli import cli

    monkeypatch.setattr(
        _kernel,
        "_support",
        _kernel.Support(0, True, "x86_64", "the sandbox needs Linux (Landlock); this is darwin"),
    )
    path = tmp_path / "plan.yaml"
    path.write_text(policy_graph(repo))
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "sandbox needs Linux" in lines[0] and "plan.yaml" in lines[0]
    assert "Traceback" not in result.output


def test_the_pages_example_runs_as_written(tmp_path: Path) -> None:
    """docs/isolation.md's program, run as a user runs it, prints what the page says."""
    import re

    page = (Path(__file__).parents[2] / "docs" / "isolation.md").read_text(encoding="utf-8")
    [program] = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    script = tmp_path / "example.py"
    script.write_text(program)
    done = run_process([sys.executable, str(script)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True attested", "False fix"]
    assert "which prints `True attested` then `False fix`" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["example.py"]


def _kill_gategraph_once(
    graph: str, tmp_path: Path, started: Callable[[int], bool], settle: float = 0.0
) -> Callable[[], None]:
    """Run ``graph`` in a gategraph process of its own until ``started(its pid)`` (then
    ``settle`` seconds more), SIGKILL it, and return what waits for the aftermath."""
    import signal
    import subprocess
    import time

    path = tmp_path / "plan.yaml"
    path.write_text(graph)
    script = (
        "import sys, anyio\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from gategraph.runtime import execute_graph, load_graph\n"
        f"anyio.run(execute_graph, load_graph(open({str(path)!r}).read()))\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script], cwd=tmp_path)
    try:
        for _ in range(200):
            if started(runner.pid):
                break
            time.sleep(0.05)
        assert started(runner.pid), "the sandboxed call never started"
        time.sleep(settle)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()

    def until(gone: Callable[[], bool], what: Callable[[], Any]) -> None:
        for _ in range(200):
            if gone():
                return
            time.sleep(0.05)
        raise AssertionError(f"left running: {what()}")

    return lambda: until(lambda: not _workers_of(runner.pid), lambda: _workers_of(runner.pid))


def test_a_killed_gategraph_takes_its_sandboxed_workers_and_their_processes(
    repo: Path, tmp_path: Path
) -> None:
    """gategraph killed (SIGKILL) mid-call: the worker and the command its call started
    end too, rather than running on as orphans."""
    marker = f"gg-{uuid.uuid4().hex}"
    graph = graph_text(repo, "starts_and_waits", arguments={"starts_and_waits": {"marker": marker}})
    workers_gone = _kill_gategraph_once(graph, tmp_path, lambda pid: bool(running(marker)))
    workers_gone()
    helpers_assert_gone(marker)


def _workers_of(parent: int) -> list[int]:
    """The live sandboxed workers started by gategraph process ``parent``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"_sandbox_worker" in b" ".join(argv) and str(parent).encode() in argv and state != "Z":
            found.append(int(entry))
    return found


def test_a_killed_gategraph_takes_a_worker_that_is_loading_the_code(
    repo: Path, tmp_path: Path
) -> None:
    """gategraph killed while its worker loads the validation's code (an import that
    takes a minute): the worker ends too."""
    graph = (
        "version: 1\nname: slow\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "validations:\n"
        '  - {name: slow, entrypoint: "sandbox_slow_import:check", resource_slots: [root]}\n'
        "nodes:\n  - {id: slow, validation: slow, isolation: sandbox}\n"
    )
    # Confined and loading a second after the worker appeared.
    _kill_gategraph_once(graph, tmp_path, lambda pid: bool(_workers_of(pid)), settle=1.0)()


def test_gategraph_run_never_loads_sandbox_only_code(repo: Path, tmp_path: Path) -> None:
    """`gategraph check` and `gategraph run` of a plan whose only node that calls a
    validation runs it sandboxed: the validation's module is never imported by gategraph."""

    marks = tmp_path / "marks"
    marks.mkdir()
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\nname: marks\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "validations:\n"
        '  - {name: v, entrypoint: "sandbox_marks_import:check", resource_slots: [root]}\n'
        "nodes:\n  - {id: a, validation: v, isolation: sandbox}\n"
    )
    gategraph = Path(sys.executable).with_name("gategraph")
    env = {
        **os.environ,
        "GG_MARK_DIR": str(marks),
        "PYTHONPATH": str(Path(__file__).parents[1]),
        "GATEGRAPH_HOME": str(tmp_path / "home"),
    }
    for command in (["check", str(plan)], ["run", str(plan)]):
        done = run_process([str(gategraph), *command], cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
    assert list(marks.iterdir()) == []


@pytest.mark.parametrize(
    ("validation", "words"),
    [
        (
            "{name: hooked, mcp_server: files, mcp_tool_name: read, untrusted: true,"
            ' hooks: {setup: "sandbox_hostile:honest"}}',
            "an untrusted MCP tool cannot have hooks",
        ),
    ],
)
def test_nothing_of_sandboxed_code_runs_in_gategraph(
    repo: Path, validation: str, words: str
) -> None:
    """An untrusted MCP validation's hooks (its calls run in its server, its hooks would
    here) would run in gategraph's own process: refused."""
    text = (
        "version: 1\nname: refused\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        "policy: {require_sandbox: true}\n"
        "tools:\n"
        f'  - {{name: lister, entrypoint: "{MODULE}:honest", resource_slots: [root]}}\n'
        f"validations:\n  - {validation}\n"
        "nodes:\n  - {id: a, validation: hooked}\n"
    )
    with pytest.raises(ConfigError, match=words):
        load_graph(text)


@pytest.mark.anyio
async def test_a_worker_that_cannot_be_started_is_an_infrastructure_fault_leaving_nothing(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of processes (the fork fails): that call is ``unavailable``, retried on the
    plan's budget, and the worker's folder is not left behind."""
    import errno

    from gategraph.runtime._calls import _context, _sandbox
    from gategraph.runtime._calls._invoke import to_result

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(_sandbox.anyio, "open_process", refused)
    parent = _context._scratch_parent()
    before = set(os.listdir(parent))
    async with sandbox_pool() as pool:
        outcome = await sandboxed_validation("honest").call({}, {"root": repo})
        assert not pool._idle
    result = to_result(outcome)
    assert result.data.get("error") == "unavailable", result
    assert result.message == (
        "no sandboxed worker could be started for honest: Resource temporarily unavailable"
    )
    assert set(os.listdir(parent)) == before


@pytest.mark.anyio
async def test_arguments_that_cannot_be_copied_fail_the_call(repo: Path) -> None:
    from gategraph.runtime._calls._invoke import to_result

    outcome = await sandboxed_validation("honest").call({}, {"root": lambda: None})
    result = to_result(outcome)
    assert not result.passed and "cannot be copied into the sandbox" in result.message, result


def test_the_probe_started_ahead_answers_support_and_leaves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The probe the command line starts ahead gives the answer a probe started then would;
    it is reaped, its folder removed, as soon as it ends; one nobody waits for is stopped
    at exit."""

    from gategraph.runtime._base import _kernel

    if _kernel._without_mounts().missing is not None:
        pytest.skip("a cheap check rules the sandbox out here: nothing is started ahead")
    fresh = _kernel._probe_mounts()
    monkeypatch.setattr(_kernel, "_support", None)
    monkeypatch.setattr(_kernel, "_ahead", None)
    _kernel.probe_ahead()
    ahead = _kernel._ahead
    assert ahead is not None
    _kernel.probe_ahead()  # once
    assert _kernel._ahead is ahead
    ahead.reaper.join(30)
    assert not os.path.exists(ahead.folder)  # reaped as it ended, before anyone asked
    assert _kernel._probe_mounts() == fresh
    assert _kernel._ahead is None
    _kernel._stop_ahead()  # nothing left to stop
    # Another process's copy (a forked child's) is left to its owner.
    ahead.owner = os.getpid() + 1
    monkeypatch.setattr(_kernel, "_ahead", ahead)
    assert _kernel._probe_mounts() == fresh  # not its own: a probe of its own
    code = (
        "import time; from gategraph.runtime._base import _kernel; _kernel.probe_ahead(); "
        "print(_kernel._ahead.folder)"
    )
    assert not os.path.exists(python_prints(code))  # stopped at exit


def test_a_probe_that_never_ends_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe past its time is killed, and says so; stopping one that is over is a no-op."""
    import subprocess

    from gategraph.runtime._base import _kernel

    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], stderr=subprocess.PIPE
    )
    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"gategraph-probe-test-{os.getpid()}")
    os.makedirs(folder, exist_ok=True)
    ahead = _kernel._Ahead(sleeper, folder)
    monkeypatch.setattr(ahead.reaper, "join", _joining(ahead.reaper))
    assert ahead.answer() == "the probe did not end within 60 s"
    assert sleeper.returncode is not None and not os.path.exists(folder)
    ahead.stop()


def _joining(thread: threading.Thread) -> Callable[..., None]:
    """``thread.join`` that gives up at once the first time (a probe that overran)."""
    real = thread.join
    calls = iter([0.0])

    def join(timeout: float | None = None) -> None:
        real(next(calls, None))

    return join


def test_a_probe_that_cannot_start_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """No process for the probe (here: no interpreter at that path): a reason, no folder."""
    import tempfile

    from gategraph.runtime._base import _kernel

    def probes() -> set[str]:
        return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("gategraph-probe-")}

    before = probes()
    monkeypatch.setattr(_kernel, "_ahead", None)
    monkeypatch.setattr(_kernel, "_support", None)
    monkeypatch.setattr(_kernel.sys, "executable", "/nonexistent/python")
    _kernel.probe_ahead()
    assert _kernel._ahead is None
    assert _kernel._probe_mounts().startswith("the probe could not run")
    assert probes() <= before


def test_a_probe_that_overruns_is_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe started when asked that does not end in time is killed, and says so; its
    folder is removed."""
    import subprocess

    from gategraph.runtime._base import _kernel

    class Stuck:
        returncode = None

        def __init__(self) -> None:
            self.killed = False

        def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
            if timeout is not None:
                raise subprocess.TimeoutExpired("probe", timeout)
            return b"", b""

        def kill(self) -> None:
            self.killed = True

    stuck = Stuck()
    made: list[str] = []
    monkeypatch.setattr(_kernel, "_ahead", None)
    monkeypatch.setattr(_kernel, "_start_probe", lambda folder: made.append(folder) or stuck)
    assert _kernel._probe_mounts() == "the probe did not end within 60 s"
    assert stuck.killed and made and not os.path.exists(made[0])


@pytest.mark.anyio
async def test_a_call_and_fill_wait_for_the_same_spare_without_reading_its_answers_twice(
    repo: Path,
) -> None:
    """A spare still importing, waited for by ``fill`` while a call takes the pool's spares:
    each is read by one of them only, and both end well."""
    from gategraph.runtime._calls._invoke import to_result

    prepared = sandboxed_validation("honest")
    async with sandbox_pool() as pool:
        pool._idle.append(await pool._spawn())  # a spare, still importing
        outcomes: list[Any] = []

        async def call() -> None:
            outcomes.append(await prepared.call({}, {"root": repo}))

        async with anyio.create_task_group() as group:
            group.start_soon(pool.fill, 1)
            group.start_soon(call)
        assert to_result(outcomes[0]).passed, outcomes
        assert pool._starting == 0


@pytest.mark.anyio
async def test_a_call_whose_worker_ends_with_it_starts_the_next_expected_call_s_spare(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker with views runs one call and ends: with more calls expected, the next one's
    spare starts as the call ends, though the pool has room for one worker only."""
    import msgspec
    from gategraph.runtime._calls import _sandbox
    from gategraph.runtime._calls._invoke import to_result

    given = _sandbox.SandboxPool.call

    async def with_views(self: Any, name: str, request: Any) -> Any:
        return await given(self, name, msgspec.structs.replace(request, views=(str(repo),)))

    monkeypatch.setattr(_sandbox.SandboxPool, "call", with_views)
    prepared = sandboxed_validation("honest")
    async with _sandbox.SandboxPool(size=1) as pool:
        token = _sandbox._pool.set(pool)
        try:
            pool.prewarm(3)
            for left in (2, 1, 0):
                assert to_result(await prepared.call({}, {"root": repo})).passed
                coming = pool._starting + sum(not w.confined for w in pool._idle)
                assert coming == min(left, 1), (left, coming)
        finally:
            _sandbox._pool.reset(token)


@pytest.mark.anyio
async def test_a_call_waits_for_a_spare_on_its_way_no_longer_than_a_start_may_take(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spare said to be on its way that never comes: the call waits as long as a start
    may take, then starts a worker of its own."""
    from gategraph.runtime._calls import _sandbox
    from gategraph.runtime._calls._invoke import to_result

    monkeypatch.setattr(_sandbox, "_SPARE_WAIT", 0.2)
    prepared = sandboxed_validation("honest")
    async with sandbox_pool() as pool:
        pool._starting += 1
        try:
            outcome = await prepared.call({}, {"root": repo})
        finally:
            pool._starting -= 1
    assert to_result(outcome).passed, outcome
