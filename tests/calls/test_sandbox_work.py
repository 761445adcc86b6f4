"""Work tools and lifecycle hooks in the kernel sandbox, on the default settings.

A work tool changes the candidate: by default it runs in a sandboxed worker that may
change the folders of its resources (the plan's copies) and nothing else on the machine.
Its hooks run where its calls run. The tools live in tests/sandbox_work_tools.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import write_tree
from gategraph.runtime import ConfigError, RuntimeFault
from gategraph.runtime._base._kernel import support
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import GraphRun, execute_graph

pytestmark = [
    pytest.mark.skipif(
        support().missing is not None, reason=f"no sandbox here: {support().missing}"
    ),
    pytest.mark.timeout(120),
]

MODULE = "sandbox_work_tools"
TESTS = Path(__file__).parents[1]


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(TESTS))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "repo", {"a.py": "x = 1\n"})


def work_graph(
    repo: Path,
    name: str,
    *,
    arguments: dict[str, Any] | None = None,
    tool: str = "",
    node: str = "",
    extra: str = "",
) -> str:
    return (
        "version: 1\nname: work\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}{extra}}}\n'
        "tools:\n"
        f'  - {{name: {name}, entrypoint: "{MODULE}:{name}", resource_slots: [root]{tool}}}\n'
        f"nodes:\n  - {{id: w, tool: {name}, resources: [repo], "
        f"arguments: {arguments or {}}{node}}}\n"
    )


def gated(text: str) -> str:
    """A work graph's text with a required validation after its work node (a plan needs
    one to apply)."""
    return (
        text + "  - {id: syntax, validation: syntax, needs: [w]}\n"
        "validations:\n"
        "  - {name: syntax, entrypoint: gategraph.validators:python_syntax,"
        " resource_slots: [root]}\n"
    )


def gategraph_cli(
    tmp_path: Path, text: str, command: str, *options: str, **run: Any
) -> subprocess.CompletedProcess[str]:
    """The command line, as a user runs it, on a plan file holding ``text``."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    return subprocess.run(
        [str(Path(sys.executable).with_name("gategraph")), command, str(plan), *options],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS), "GATEGRAPH_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **run,
    )


def run_plan_file(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """``gategraph run`` on the work graph ``text``, gated by a required validation."""
    return gategraph_cli(tmp_path, gated(text), "run")


async def run_work(repo: Path, name: str, **kwargs: Any) -> GraphRun:
    return await execute_graph(load_graph(work_graph(repo, name, **kwargs)))


@pytest.mark.anyio
async def test_a_work_tool_changes_its_folder_and_nothing_else(repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    done = await run_work(repo, "edits", arguments={"outside": str(outside)})
    result = done.nodes["w"]
    assert result.status == "ok", result
    assert result.output["refused"] == "Read-only file system"
    assert result.output["pid"] != os.getpid()  # not in gategraph's own process
    assert not outside.exists()
    assert (repo / "a.py").read_text() == "x = 2\n"
    moved = repo / "pkg" / "deep" / "moved.py"
    assert moved.read_text() == "y = 2\n"
    assert moved.stat().st_mode & 0o777 == 0o600
    assert moved.stat().st_uid == os.getuid()  # the user's own files, as ever


@pytest.mark.anyio
async def test_a_work_tool_takes_a_spare_started_ahead_and_is_confined_all_the_same(
    repo: Path, tmp_path: Path
) -> None:
    """A worker started ahead of need (a spare) serves a work tool too: it was told
    nothing of the tool's folders until the call took it, then confined itself to them,
    so the call waits for no process to start and may change its folder, nothing else."""
    from gategraph.runtime._calls._sandbox import sandbox_pool

    outside = tmp_path / "outside.txt"
    async with sandbox_pool() as pool:
        await pool.fill(1)
        spares = {w.process.pid for w in pool._idle}
        assert spares and not any(w.confined for w in pool._idle)
        done = await run_work(repo, "edits", arguments={"outside": str(outside)})
    result = done.nodes["w"]
    assert result.status == "ok", result
    assert result.output["worker"] in spares
    assert result.output["refused"] == "Read-only file system"
    assert not outside.exists()
    assert (repo / "a.py").read_text() == "x = 2\n"


@pytest.mark.anyio
async def test_a_link_in_the_folder_leads_nowhere_writable(repo: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / "link").symlink_to(elsewhere)
    done = await run_work(repo, "through_a_link")
    assert done.nodes["w"].output == {"refused": "Read-only file system"}
    assert list(elsewhere.iterdir()) == []


@pytest.mark.anyio
async def test_a_file_outside_cannot_be_linked_in_to_be_written(repo: Path, tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("mine")
    done = await run_work(repo, "hard_links_out", arguments={"target": str(target)})
    assert done.nodes["w"].output["refused"]  # another mount: "Invalid cross-device link"
    assert not (repo / "linked").exists()
    assert target.stat().st_nlink == 1


@pytest.mark.anyio
async def test_a_process_a_work_tool_leaves_running_fails_it_and_dies(repo: Path) -> None:
    from test_sandbox import assert_gone

    marker = f"gg-{uuid.uuid4().hex}"
    done = await run_work(repo, "detaches", arguments={"marker": marker})
    result = done.nodes["w"]
    assert result.status == "failed"
    assert "left 1 process running" in (result.error or ""), result
    await assert_gone(marker)


@pytest.mark.anyio
async def test_a_work_tool_has_the_network_only_when_it_declares_it(repo: Path) -> None:
    done = await run_work(repo, "connects")
    assert done.nodes["w"].output.startswith("refused"), done.nodes["w"]
    declared = await run_work(repo, "connects", tool=", network: true")
    assert declared.nodes["w"].output == "opened", declared.nodes["w"]


@pytest.mark.anyio
async def test_a_memory_resource_stays_a_mapping_no_call_changes(repo: Path) -> None:
    text = (
        "version: 1\nname: memory\n"
        "resources: {notes: {kind: memory, files: {a.txt: hi}}}\n"
        f'tools:\n  - {{name: reads_memory, entrypoint: "{MODULE}:reads_memory",'
        " resource_slots: [{name: notes, kind: memory}]}\n"
        "nodes:\n  - {id: w, tool: reads_memory}\n"
    )
    done = await execute_graph(load_graph(text))
    assert done.nodes["w"].status == "failed"
    assert "does not support item assignment" in (done.nodes["w"].error or "")


@pytest.mark.anyio
async def test_a_declared_isolation_runs_it_here_as_before(repo: Path, tmp_path: Path) -> None:
    """`isolation: thread` is a choice to trust the tool: it runs in this process."""
    outside = tmp_path / "outside.txt"
    done = await run_work(
        repo, "edits", arguments={"outside": str(outside)}, node=", isolation: thread"
    )
    output = done.nodes["w"].output
    assert (output["refused"], output["pid"]) == ("", os.getpid())
    assert outside.read_text() == "escaped"


@pytest.fixture
def no_kernel_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    from gategraph.runtime._base import _kernel

    monkeypatch.setattr(
        _kernel, "support", lambda: _kernel.Support(0, False, "x86_64", "no Landlock here")
    )


@pytest.mark.usefixtures("no_kernel_sandbox")
def test_without_the_kernel_sandbox_a_work_tool_runs_here_and_says_so(repo: Path) -> None:
    with pytest.warns(RuntimeWarning, match="work tools that would run in it run in gategraph"):
        done = anyio.run(run_work, repo, "edits")
    assert done.nodes["w"].output["pid"] == os.getpid()


@pytest.mark.usefixtures("no_kernel_sandbox")
def test_a_policy_that_requires_the_sandbox_refuses_the_fallback(repo: Path) -> None:
    with pytest.raises(ConfigError, match="sandbox: no Landlock here"):
        load_graph(work_graph(repo, "edits"), require_sandbox=True)
    # A declared isolation is a choice to trust the tool: the policy lets it run so.
    load_graph(work_graph(repo, "edits", node=", isolation: thread"), require_sandbox=True)


@pytest.mark.anyio
async def test_hooks_run_where_their_tool_runs(repo: Path) -> None:
    import sandbox_work_tools

    done = await run_work(
        repo,
        "edits",
        tool=', hooks: {setup: "sandbox_work_tools:hook_says", '
        'teardown: "sandbox_work_tools:hook_says"}',
    )
    assert done.nodes["w"].status == "ok"
    said = done.hook_output["edits.hooks.setup"]["stdout"]
    assert said.startswith("hook in ") and said != f"hook in {os.getpid()}\n"
    try:
        with pytest.raises(RuntimeFault, match=r"setup hook of 'edits' failed.*Read-only"):
            await run_work(repo, "edits", tool=', hooks: {setup: "sandbox_work_tools:hook_writes"}')
        assert not sandbox_work_tools.HOOK_TARGET.exists()
    finally:
        sandbox_work_tools.HOOK_TARGET.unlink(missing_ok=True)


@pytest.mark.anyio
async def test_a_work_tool_s_hook_may_change_the_folders_its_nodes_are_given() -> None:
    """A work tool's hook runs in the sandbox with the folders of the resources its nodes
    are given writable, as the tool's calls are: it may prepare them."""
    import sandbox_work_tools

    folder = sandbox_work_tools.HOOK_FOLDER
    folder.mkdir()
    try:
        done = await run_work(
            folder, "edits", tool=', hooks: {setup: "sandbox_work_tools:hook_writes_its_folder"}'
        )
        assert done.nodes["w"].status == "ok"
        assert (folder / "prepared-by-hook.txt").read_text() == "prepared"
    finally:
        shutil.rmtree(folder)


@pytest.mark.anyio
async def test_an_untrusted_tool_may_have_hooks_now_that_they_run_in_the_sandbox(
    repo: Path,
) -> None:
    done = await run_work(
        repo,
        "edits",
        tool=', untrusted: true, hooks: {setup: "sandbox_work_tools:hook_says"}',
    )
    assert done.nodes["w"].status == "ok"
    assert done.hook_output["edits.hooks.setup"]["stdout"] != f"hook in {os.getpid()}\n"


def test_a_misspelled_hook_of_a_sandboxed_tool_is_found_without_importing_it(
    repo: Path,
) -> None:
    text = work_graph(repo, "edits", tool=', hooks: {setup: "sandbox_work_tools:nothing"}')
    with pytest.raises(ConfigError, match=r"hooks\.setup.*has no attribute 'nothing'"):
        load_graph(text)


def test_gategraph_run_applies_the_change_and_refuses_the_escape(
    repo: Path, tmp_path: Path
) -> None:
    """Through the command line, as a user runs it: the work tool's change is applied;
    its write outside the plan's copy never happened."""
    outside = tmp_path / "outside.txt"
    done = run_plan_file(tmp_path, work_graph(repo, "edits", arguments={"outside": str(outside)}))
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": applied" in done.stdout
    assert not outside.exists()
    assert (repo / "a.py").read_text() == "x = 2\n"
    assert (repo / "pkg" / "deep" / "moved.py").read_text() == "y = 2\n"


@pytest.mark.anyio
async def test_a_validation_moves_files_between_folders_of_its_scratch(repo: Path) -> None:
    """Refusing the network must not refuse moving a file into another folder (the
    kernel refuses that in every layer that does not grant it)."""
    text = (
        "version: 1\nname: moves\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        f'validations:\n  - {{name: moves_in_scratch, entrypoint: "{MODULE}:moves_in_scratch",'
        " resource_slots: [root]}\n"
        "nodes:\n  - {id: v, validation: moves_in_scratch}\n"
    )
    done = await execute_graph(load_graph(text))
    [record] = done.validations
    assert record.isolation == "sandbox"
    assert record.result.passed, record.result


# -- a wrapped validation's transform ---------------------------------------------------------


def transform_graph(repo: Path, transform: str, *, tool: str = "", policy: str = "") -> str:
    return (
        "version: 1\nname: transforms\n"
        f'resources: {{repo: {{kind: directory, path: "{repo}"}}}}\n'
        f"{policy}"
        "tools:\n"
        f'  - {{name: counts, entrypoint: "{MODULE}:counts", resource_slots: [root]{tool}}}\n'
        "validations:\n"
        "  - name: judged\n    wraps: counts\n    transform: |\n"
        + "".join(f"      {line}\n" for line in transform.splitlines())
        + "nodes:\n  - {id: v, validation: judged}\n"
    )


PIDS = "{'passed': True, 'data': {'tool': output['pid'], 'transform': __import__('os').getpid()}}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "policy"),
    [("", ""), (", untrusted: true", ""), ("", "policy: {require_sandbox: true}\n")],
    ids=["default", "untrusted", "required"],
)
async def test_a_transform_runs_in_the_sandbox_with_its_tool(
    repo: Path, tool: str, policy: str
) -> None:
    """The graph's transform is its code as much as its tool is: it runs in the tool's
    sandboxed process, never in gategraph's (an untrusted validation, or one the policy
    sandboxes, may now have one)."""
    done = await execute_graph(load_graph(transform_graph(repo, PIDS, tool=tool, policy=policy)))
    [record] = done.validations
    assert record.result.passed, record.result
    pids = record.result.data
    assert pids["tool"] == pids["transform"] != os.getpid()
    assert (record.isolation, record.enforced_by) == ("sandbox", "kernel")


@pytest.mark.anyio
async def test_an_impure_transform_fails_in_the_sandbox_too(repo: Path, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    code = f"def transform(output):\n    open({str(mark)!r}, 'w')\n    return {{'passed': True}}"
    done = await execute_graph(load_graph(transform_graph(repo, code)))
    [record] = done.validations
    assert not record.result.passed
    assert record.result.data["error"] == "read_only_violation"
    assert "transform of 'judged' is not pure" in record.result.message
    assert not mark.exists()


@pytest.mark.anyio
async def test_an_async_transform_and_a_failing_tool(repo: Path) -> None:
    done = await execute_graph(
        load_graph(
            transform_graph(repo, "async def transform(output):\n    return {'passed': True}")
        )
    )
    assert done.validations[0].result.passed, done.validations[0].result
    failing = transform_graph(repo, "{'passed': True}").replace(
        "nodes:\n  - {id: v, validation: judged}",
        "nodes:\n  - {id: v, validation: judged, arguments: {nothing: 1}}",
    )
    done = await execute_graph(load_graph(failing, require_sandbox=False))
    result = done.validations[0].result
    assert not result.passed
    assert result.message.startswith("wrapped tool 'counts': "), result


@pytest.mark.anyio
async def test_the_transform_of_a_tool_that_runs_here_runs_in_the_sandbox(
    repo: Path,
) -> None:
    """gategraph's own tool runs in its process; the graph's transform of its output runs
    in a sandboxed call of its own (held pure there too). gategraph's own pass-through
    transform (what `mcp serve` wraps a tool in) runs here, whoever declares it."""
    text = (
        "version: 1\nname: echoes\n"
        'tools:\n  - {name: echoer, entrypoint: "gategraph.runtime.testing:echo"}\n'
        "validations:\n  - {name: judged, wraps: echoer, transform: "
        "\"{'passed': True, 'data': {'pid': __import__('os').getpid()}}\"}\n"
        "nodes:\n  - {id: v, validation: judged}\n"
    )
    done = await execute_graph(load_graph(text))
    result = done.validations[0].result
    assert result.passed, result
    assert result.data["pid"] != os.getpid()
    impure = text.replace("__import__('os').getpid()", "open('x', 'w')")
    result = (await execute_graph(load_graph(impure))).validations[0].result
    assert result.data["error"] == "read_only_violation", result
    assert "transform of 'judged' is not pure" in result.message
    own = text.replace(
        "\"{'passed': True, 'data': {'pid': __import__('os').getpid()}}\"",
        "\"{'passed': True, 'data': {'output': output}}\"",
    )
    prepared = load_graph(own)
    from gategraph.runtime._calls._invoke import prepare

    validation = prepared.get_tool("judged")
    assert callable(prepare(validation, prepared.get_tool).transform)  # loaded here


def test_check_never_runs_a_sandboxed_transform(repo: Path, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    code = f"open({str(mark)!r}, 'w').close()\ndef transform(output):\n    return True"
    load_graph(transform_graph(repo, code))
    assert not mark.exists()
    with pytest.raises(ConfigError, match="transform: must be an expression over `output`"):
        load_graph(transform_graph(repo, "x = 1"))


@pytest.mark.anyio
async def test_a_transform_that_fails_to_load_is_a_misconfiguration(repo: Path) -> None:
    code = "raise ValueError('boom')\ndef transform(output):\n    return {'passed': True}"
    done = await execute_graph(load_graph(transform_graph(repo, code)))
    result = done.validations[0].result
    assert not result.passed
    assert result.data["error"] == "misconfigured", result
    assert "the transform of 'judged' failed to load: ValueError: boom" in result.message


def test_a_descriptor_gategraph_inherited_does_not_reach_the_sandbox(
    repo: Path, tmp_path: Path
) -> None:
    """A file the shell had open when it started gategraph (`exec 987>>file`): the command
    line's event loop may start workers without closing it; the worker closes it before
    any code of the plan's runs."""
    outside = tmp_path / "outside.txt"
    opened = os.open(outside, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    fd = os.dup2(opened, 987)  # a number the test process does not use
    os.close(opened)
    try:
        text = work_graph(repo, "writes_descriptor", arguments={"fd": 987})
        done = gategraph_cli(tmp_path, text, "execute", "--json", pass_fds=(fd,))
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"refused: Bad file descriptor"' in done.stdout, done.stdout
    assert outside.read_bytes() == b""


def test_check_never_imports_the_hooks_of_a_tool_no_node_calls_here(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("GG_MARK_DIR", str(marks))
    monkeypatch.delitem(sys.modules, "sandbox_marks_import", raising=False)
    hooks = ', hooks: {setup: "sandbox_marks_import:check"}'
    unused = work_graph(repo, "edits").replace(
        "nodes:",
        f'  - {{name: unused, entrypoint: "{MODULE}:edits"{hooks}}}\nnodes:',
    )
    load_graph(unused)
    load_graph(work_graph(repo, "edits", tool=hooks))
    assert list(marks.iterdir()) == []


@pytest.mark.anyio
async def test_a_folder_replaced_by_a_link_is_refused_to_the_next_tool(
    tmp_path: Path,
) -> None:
    """Nested resources, changed in place: a tool given the outer folder replaces the
    inner one with a link to a folder elsewhere; the tool given the inner folder fails,
    and nothing is written elsewhere. The run goes on."""
    outer = tmp_path / "outer"
    (outer / "inner").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    text = (
        "version: 1\nname: nested\n"
        f'resources: {{outer: {{kind: directory, path: "{outer}"}},'
        f' inner: {{kind: directory, path: "{outer / "inner"}"}}}}\n'
        "tools:\n"
        f'  - {{name: replaces_with_link, entrypoint: "{MODULE}:replaces_with_link",'
        " resource_slots: [root]}\n"
        f'  - {{name: edits, entrypoint: "{MODULE}:edits", resource_slots: [root]}}\n'
        "nodes:\n"
        "  - {id: a, tool: replaces_with_link, resources: [outer],"
        f' arguments: {{name: inner, target: "{elsewhere}"}}}}\n'
        "  - {id: b, tool: edits, resources: [inner], needs: [a]}\n"
    )
    done = await execute_graph(load_graph(text))
    assert done.nodes["a"].status == "ok", done.nodes["a"]
    b = done.nodes["b"]
    assert b.status == "failed"
    assert "cannot be given the folder it changes" in (b.error or ""), b
    assert "it is a link, or its path passes through one" in (b.error or ""), b
    assert list(elsewhere.iterdir()) == []
    # The link stays for the next run: which refuses the resource before anything runs.
    with pytest.raises(ConfigError, match=r"resources\.inner: its path passes through a link"):
        await execute_graph(load_graph(text))
    assert list(elsewhere.iterdir()) == []


def test_apply_never_makes_a_set_uid_program(repo: Path, tmp_path: Path) -> None:
    done = run_plan_file(tmp_path, work_graph(repo, "makes_set_uid"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": applied" in done.stdout
    mode = (repo / "helper").stat().st_mode
    assert mode & 0o777 == 0o755
    assert not mode & 0o6000


def test_apply_refuses_a_journal_lock_that_is_a_link(repo: Path, tmp_path: Path) -> None:
    """What a tool run in place could leave: the folder's journal lock as a link to a file
    elsewhere. Apply follows no link: it refuses, and nothing is made there."""
    journal = repo / ".gategraph-journal"
    journal.mkdir()
    target = tmp_path / "elsewhere" / "created-by-apply"
    target.parent.mkdir()
    (journal / "lock").symlink_to(target)
    done = run_plan_file(tmp_path, work_graph(repo, "edits"))
    assert done.returncode != 0, done.stdout + done.stderr
    assert "is a link, which gategraph never makes" in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not target.exists()
    assert (repo / "a.py").read_text() == "x = 1\n"


@pytest.mark.anyio
@pytest.mark.parametrize("where", ["log", "catalog"])
async def test_a_folder_holding_gategraph_s_home_is_refused_to_a_work_tool(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A folder changed in place that holds gategraph's home (its event log, its catalog
    and credentials, other plans' copies): a tool changing the folder could move the home
    aside and put its own in its place. The call fails, saying why; nothing is written."""
    from gategraph.runtime._storage._eventlog import MemoryEventLog, SQLiteEventLog

    home = repo / "sub" / ".gategraph"
    home.mkdir(parents=True)
    text = work_graph(repo, "writes_under", arguments={"rel": "mine.txt"})
    if where == "log":
        monkeypatch.setenv("GATEGRAPH_HOME", str(tmp_path / "elsewhere"))
        async with SQLiteEventLog(home / "events.db") as log:
            done = await execute_graph(load_graph(text), event_log=log)
    else:
        monkeypatch.setenv("GATEGRAPH_HOME", str(home))
        done = await execute_graph(load_graph(text), event_log=MemoryEventLog())
    result = done.nodes["w"]
    assert result.status == "failed", result
    assert f"holds gategraph's own files ({home})" in (result.error or ""), result
    assert not (repo / "mine.txt").exists()
