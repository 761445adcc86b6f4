"""MCP servers that judge a plan's copy of a folder: roots, paths inside a folder slot, a
disposable copy for tools that write caches, a server's refusal, a write after hand-over.

The server is tests/mcp_test_server.py; its `read_under_roots` reads only inside the
client's roots, as the official filesystem server does. The real servers themselves run in
tests/integrations/test_real_mcp_servers.py.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import git, run_gategraph, write_tree

pytest.importorskip("mcp")

from gategraph.runtime import ContentStore, PlanStatus, Supervisor, load_graph
from gategraph.runtime._calls._context import private_folder
from gategraph.runtime._calls._mcp import _copy_with_git, _inside

SERVER = Path(__file__).parents[1] / "mcp_test_server.py"

pytestmark = pytest.mark.timeout(240)


def plan(
    project: Path,
    validations: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    steps: list[dict[str, str]],
    *,
    tools: list[dict[str, Any]] = (),  # type: ignore[assignment]
    server: dict[str, Any] | None = None,
) -> Any:
    """A plan over ``project`` whose scripted executor writes ``steps``, with the test
    server's tools as ``t.read``, ``t.scribble``."""
    return load_graph(
        {
            "version": 1,
            "name": "roots",
            "resources": {"repo": {"kind": "directory", "path": str(project)}},
            "mcp_servers": {
                "t": server or {"command": sys.executable, "args": [str(SERVER), "stdio"]}
            },
            "tools": [
                {
                    "name": "t.read",
                    "mcp_server": "t",
                    "mcp_tool_name": "read_under_roots",
                    "read_only": True,
                    "resource_slots": ["path"],
                },
                *tools,
            ],
            "validations": validations,
            "nodes": nodes,
            "lifecycle": {
                "executor": {
                    "uses": "gategraph.runtime.testing:ScriptedExecutor",
                    "arguments": {"steps": [{"files": files} for files in steps]},
                }
            },
            "policy": {"retry_limit": 1, "strategy_revisions": 0},
        }
    )


NOTES_SAY_DONE = {
    "name": "notes-done",
    "wraps": "t.read",
    "transform": "{'passed': 'done' in output, 'message': output}",
}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "/box/repo"),
        ("", "/box/repo"),
        (".", "/box/repo"),
        ("notes.md", "/box/repo/notes.md"),
        ("src/../notes.md", "/box/repo/notes.md"),
        ("/srv/project/notes.md", "/box/repo/notes.md"),  # the real folder's path: mapped
        ("/srv/project", "/box/repo"),
        ("/box/repo/src/a.py", "/box/repo/src/a.py"),  # already the copy's
        ("../elsewhere", "!the argument 'path' (../elsewhere) leads out of its resource's folder"),
        (
            "/etc/passwd",
            "!the argument 'path' (/etc/passwd) is outside its resource's folder "
            "(/srv/project): give a path inside it, or relative to it",
        ),
        (
            "/srv/projectx/a",  # a prefix of the name is not inside it
            "!the argument 'path' (/srv/projectx/a) is outside its resource's folder "
            "(/srv/project): give a path inside it, or relative to it",
        ),
    ],
)
def test_a_path_given_for_a_folder_slot_is_the_same_path_in_the_plans_copy(
    given: str | None, expected: str
) -> None:
    assert _inside("/box/repo", "path", given, {"/box/repo": "/srv/project"}) == expected


@pytest.mark.anyio
async def test_a_server_that_reads_only_its_roots_judges_the_plans_copy(tmp_path: Path) -> None:
    """The node names a file of the project; the server, allowed only its client's roots,
    reads the plan's copy of it (offered as a root), which holds the change."""
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    graph = plan(
        project,
        [NOTES_SAY_DONE],
        [{"id": "notes", "validation": "notes-done", "arguments": {"path": "notes.md"}}],
        [{"notes.md": "done\n"}],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert (project / "notes.md").read_text() == "done\n"


@pytest.mark.anyio
async def test_the_real_folders_path_is_mapped_and_a_bad_change_is_rejected(
    tmp_path: Path,
) -> None:
    """An absolute path in the real folder reads the copy: a change that leaves the notes
    undone is rejected, and the real folder keeps what it had."""
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    graph = plan(
        project,
        [NOTES_SAY_DONE],
        [
            {
                "id": "notes",
                "validation": "notes-done",
                "arguments": {"path": str(project / "notes.md")},
            }
        ],
        [{"notes.md": "still to do\n"}, {"notes.md": "still to do, again\n"}],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.AWAITING_DECISION, outcome.message
    (finding,) = outcome.verdict["findings"]
    assert "still to do, again" in str(finding)
    assert (project / "notes.md").read_text() == "to do\n"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "kinds", "said"),
    [
        # Out of the folder: the call fails at once, never sent.
        ("../secret", ["bad_arguments"], "leads out of its resource's folder"),
        # A file the work has not written (yet): the server's error is no refusal of
        # access, so it is retried on the budget like any exception.
        (
            "missing.md",
            ["exception", "exception"],
            "returned an error: Error executing tool read_under_roots",
        ),
    ],
)
async def test_a_path_the_call_cannot_read(
    tmp_path: Path, path: str, kinds: list[str], said: str
) -> None:
    project = write_tree(tmp_path / "project", {"notes.md": "done\n"})
    graph = plan(
        project,
        [NOTES_SAY_DONE],
        [{"id": "notes", "validation": "notes-done", "arguments": {"path": path}}],
        [{"notes.md": "done\n"}],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert [a["faultKind"] for a in outcome.attempts] == kinds
    (finding,) = outcome.verdict["findings"]
    assert said in str(finding)


@pytest.mark.anyio
async def test_a_servers_refusal_goes_to_a_person_at_once(tmp_path: Path) -> None:
    """A server that refuses access would refuse again: permanent, not retried."""
    project = write_tree(tmp_path / "project", {"notes.md": "done\n"})
    outside = write_tree(tmp_path / "outside", {"secret.md": "done\n"})
    anywhere = {
        "name": "t.read-anywhere",
        "mcp_server": "t",
        "mcp_tool_name": "read_under_roots",
        "tool_type": "validation",
    }
    graph = plan(
        project,
        [anywhere],
        [
            {
                "id": "notes",
                "validation": "t.read-anywhere",
                "arguments": {"path": str(outside / "secret.md")},
            }
        ],
        [{"notes.md": "done\n"}],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert [a["faultKind"] for a in outcome.attempts] == ["misconfigured"]
    (finding,) = outcome.verdict["findings"]
    assert "Access denied - path outside allowed directories" in str(finding)


@pytest.mark.anyio
async def test_a_tool_that_writes_while_it_reads_is_named_with_the_file(tmp_path: Path) -> None:
    """A validation whose server says it only reads but writes into the plan's copy: the
    plan is not applied, and the message names the file and the validation given it."""
    project = write_tree(tmp_path / "project", {"notes.md": "done\n"})
    scribble = {
        "name": "t.scribble",
        "mcp_server": "t",
        "mcp_tool_name": "scribble",
        "tool_type": "validation",
        "resource_slots": ["root"],
    }
    graph = plan(
        project,
        [scribble],
        [{"id": "cache", "validation": "t.scribble"}],
        [{"notes.md": "done!\n"}],
    )
    # A store on disk keeps each round's manifest, which names the file.
    outcome = await Supervisor(graph, store=ContentStore(tmp_path / "store")).run()
    assert outcome.status is PlanStatus.FAILED
    assert "repo/.tool-cache (the validations given it: cache)" in outcome.message
    assert (project / "notes.md").read_text() == "done\n"
    assert not (project / ".tool-cache").exists()


@pytest.mark.anyio
async def test_a_disposable_slot_takes_the_writes_of_a_tool_that_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same lying tool on a disposable slot writes into a copy that is thrown away:
    the plan is applied, and no copy is left behind."""
    project = write_tree(tmp_path / "project", {"notes.md": "done\n"})
    scribble = {
        "name": "t.scribble",
        "mcp_server": "t",
        "mcp_tool_name": "scribble",
        "tool_type": "validation",
        "resource_slots": [{"name": "root", "disposable": True}],
    }
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    graph = plan(
        project,
        [scribble],
        [{"id": "cache", "validation": "t.scribble"}],
        [{"notes.md": "done!\n"}],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert (project / "notes.md").read_text() == "done!\n"
    assert not (project / ".tool-cache").exists()
    # The copy is gone (copies live in this process's scratch folder, which its first
    # use made in the temporary folder: that may be `temp`).
    assert [p.name for p in temp.rglob("*") if p.name.startswith("copy-")] == []
    probe = private_folder("probe")  # this process's scratch parent, where copies go
    probe.rmdir()
    assert not list(probe.parent.glob("copy-*"))


def test_a_disposable_copy_carries_the_repository_without_copying_its_objects(
    tmp_path: Path,
) -> None:
    """The copy of a plan's folder gets the real folder's git state, its objects read where
    they are: git diffs the change against the history, and what git writes in the copy
    (an index refresh, even a commit) never reaches the real repository."""
    real = write_tree(tmp_path / "real", {"a.txt": "one\n"})
    git(real, "init", "-q")
    git(real, "add", ".")
    git(real, "commit", "-qm", "first")
    box = write_tree(tmp_path / "box", {"a.txt": "two\n"})  # the plan's copy: no .git
    copy = tmp_path / "copy"
    _copy_with_git(str(box), str(copy), str(real))
    assert sorted(p.name for p in (copy / ".git" / "objects").iterdir()) == ["info"]
    assert (copy / ".git/objects/info/alternates").read_text() == f"{real / '.git/objects'}\n"
    assert "+two" in git(copy, "diff")
    git(copy, "status")
    git(copy, "commit", "-qam", "in the copy")
    assert git(real, "log", "--format=%s").split() == ["first"]
    assert git(real, "status", "--porcelain") == ""
    assert (real / "a.txt").read_text() == "one\n"
    assert (box / "a.txt").read_text() == "two\n" and not (box / ".git").exists()


# -- the roots a connection offers ------------------------------------------------------------


class _Server:
    """A session whose server asks for its roots a moment after each change notice (or
    never, ``asks=False``); ``told`` counts the notices."""

    def __init__(self, connection: Any, group: Any, *, asks: bool = True) -> None:
        self.connection = connection
        self.group = group
        self.asks = asks
        self.told = 0

    async def send_notification(self, notification: Any) -> None:
        self.told += 1
        if self.asks:

            async def ask() -> None:
                await anyio.sleep(0.01)
                self.connection.list_roots()

            self.group.start_soon(ask)


def _connection() -> Any:
    from gategraph.runtime._calls._mcp import McpServer, _Connection

    connection = _Connection(McpServer(name="s", command="x"))
    connection.list_roots()  # as a server that reads its roots does at start
    return connection


@pytest.mark.anyio
async def test_every_call_waits_until_the_server_has_its_folder() -> None:
    """Three calls on one new folder: the server is told once, and none of them calls
    before it has asked for the folder, each told it is new (a refusal is asked again)."""
    connection = _connection()
    seen: list[tuple[bool, frozenset[str]]] = []

    async def call() -> None:
        async with connection.offering(["/box/a"]) as told:
            seen.append((told, connection.roots_given))

    async with anyio.create_task_group() as group:
        connection.session = server = _Server(connection, group)
        for _ in range(3):
            group.start_soon(call)
    assert server.told == 1
    assert seen == [(True, frozenset({"/box/a"}))] * 3
    assert connection.roots == {}
    async with connection.offering(["/box/a"]) as told:  # given already: no notice
        assert not told and server.told == 1


@pytest.mark.anyio
async def test_a_cancelled_call_leaves_no_folder_behind() -> None:
    connection = _connection()
    async with anyio.create_task_group() as group:
        connection.session = _Server(connection, group, asks=False)
        with anyio.move_on_after(0.05):
            async with connection.offering(["/box/a"]):
                pytest.fail("the server never asked")  # pragma: no cover
    assert connection.roots == {} and connection._telling == set()


@pytest.mark.anyio
async def test_a_server_that_reads_its_roots_once_is_waited_for_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gategraph.runtime._calls import _mcp

    monkeypatch.setattr(_mcp, "_ROOTS_WAIT", 0.05)
    connection = _connection()
    async with anyio.create_task_group() as group:
        connection.session = server = _Server(connection, group, asks=False)
        async with connection.offering(["/box/a"]) as told:
            assert not told
        assert connection.roots_ignored
        async with connection.offering(["/box/b"]) as told:
            assert not told and server.told == 1


@pytest.mark.anyio
async def test_concurrent_validations_on_one_new_folder_all_read_it(tmp_path: Path) -> None:
    """Four validations read the plan's copy at once through a server that applies new
    roots a moment after it asks for them: none is refused."""
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    graph = plan(
        project,
        [NOTES_SAY_DONE],
        [
            {"id": f"notes{n}", "validation": "notes-done", "arguments": {"path": "notes.md"}}
            for n in range(4)
        ],
        [{"notes.md": "done\n"}],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert outcome.attempts == [] or all(a["faultKind"] is None for a in outcome.attempts)


def test_a_git_folder_the_plan_wrote_never_reaches_a_git_server(tmp_path: Path) -> None:
    """The plan's copy leaves the real `.git` out: one in it is the plan's writing, whose
    config could make git run the plan's program for the server (core.fsmonitor). The
    disposable copy has the real repository's state instead."""
    real = write_tree(tmp_path / "real", {"a.txt": "one\n"})
    git(real, "init", "-q")
    git(real, "add", ".")
    git(real, "commit", "-qm", "first")
    box = write_tree(
        tmp_path / "box",
        {"a.txt": "two\n", ".git/config": "[core]\n\tfsmonitor = touch PWNED\n"},
    )
    copy = tmp_path / "copy"
    _copy_with_git(str(box), str(copy), str(real))
    assert "fsmonitor" not in (copy / ".git" / "config").read_text()
    assert "+two" in git(copy, "diff")
    assert not list(tmp_path.rglob("PWNED"))


def test_a_disposable_copy_shows_git_the_copy_whatever_the_config_says(tmp_path: Path) -> None:
    """core.worktree pointing at the real folder would diff it, not the change; a FIFO in
    .git (which a copy would wait on forever) is left out."""
    real = write_tree(tmp_path / "real", {"a.txt": "one\n"})
    git(real, "init", "-q")
    git(real, "add", ".")
    git(real, "commit", "-qm", "first")
    git(real, "config", "core.worktree", str(real))
    os.mkfifo(real / ".git" / "a-pipe")
    box = write_tree(tmp_path / "box", {"a.txt": "two\n"})
    copy = tmp_path / "copy"
    _copy_with_git(str(box), str(copy), str(real))
    assert "+two" in git(copy, "diff")
    assert not (copy / ".git" / "a-pipe").exists()
    assert git(real, "config", "core.worktree").strip() == str(real)


@pytest.mark.anyio
async def test_a_disposable_slot_maps_the_real_folders_path_too(tmp_path: Path) -> None:
    """An absolute path in the real folder reads the same file in the call's copy."""
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    read = {
        "name": "t.read-copy",
        "mcp_server": "t",
        "mcp_tool_name": "read_under_roots",
        "read_only": True,
        "resource_slots": [{"name": "path", "disposable": True}],
    }
    graph = plan(
        project,
        [{**NOTES_SAY_DONE, "wraps": "t.read-copy"}],
        [
            {
                "id": "notes",
                "validation": "notes-done",
                "arguments": {"path": str(project / "notes.md")},
            }
        ],
        [{"notes.md": "done\n"}],
        tools=[read],
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message


@pytest.mark.anyio
async def test_a_connection_lost_while_telling_the_server_is_left_to_the_call() -> None:
    """The notice cannot be sent (the server went away): the call goes on and finds out
    why itself; nothing is left offered."""
    connection = _connection()

    class Gone:
        async def send_notification(self, notification: Any) -> None:
            raise ConnectionError("the server went away")

    connection.session = Gone()
    async with connection.offering(["/box/a"]) as told:
        assert not told
    assert connection.roots == {} and connection._telling == set()


# -- a server whose folder is fixed ------------------------------------------------------


def fixed_server(project: Path, **extra: Any) -> dict[str, Any]:
    """The test server started on ``project`` alone (it never asks for roots)."""
    return {"command": sys.executable, "args": [str(SERVER), "fixed", str(project)], **extra}


@pytest.mark.anyio
async def test_a_server_whose_folder_is_fixed_judges_the_plans_copy_there(
    tmp_path: Path,
) -> None:
    """`folder:` names the folder the server was started on: each call starts it where that
    folder shows the plan's copy, so it judges the change. A bad change is rejected; a good
    one applied; the real folder is never shown to the server while a change is judged."""
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    node = [{"id": "notes", "validation": "notes-done", "arguments": {"path": "notes.md"}}]
    server = fixed_server(project, folder=str(project))
    bad = plan(project, [NOTES_SAY_DONE], node, [{"notes.md": "to do, still\n"}] * 2, server=server)
    rejected = await Supervisor(bad).run()
    assert rejected.status is PlanStatus.AWAITING_DECISION, rejected.message
    assert "to do, still" in str(rejected.verdict["findings"])  # what the copy holds
    assert (project / "notes.md").read_text() == "to do\n"
    good = plan(project, [NOTES_SAY_DONE], node, [{"notes.md": "done\n"}], server=server)
    outcome = await Supervisor(good).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert (project / "notes.md").read_text() == "done\n"


@pytest.mark.anyio
async def test_without_folder_a_fixed_server_refuses_the_copy_as_a_misconfiguration(
    tmp_path: Path,
) -> None:
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    node = [{"id": "notes", "validation": "notes-done", "arguments": {"path": "notes.md"}}]
    graph = plan(
        project, [NOTES_SAY_DONE], node, [{"notes.md": "done\n"}], server=fixed_server(project)
    )
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert [a["faultKind"] for a in outcome.attempts] == ["misconfigured"]
    assert "path outside allowed directories" in str(outcome.verdict["findings"])


@pytest.mark.anyio
async def test_a_fixed_server_that_cannot_be_shown_the_copy_is_a_misconfiguration(
    tmp_path: Path,
) -> None:
    """Its folder is not there: the launcher says so, and the call is a configuration
    fault (no retry would change it), with that line."""
    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    node = [{"id": "notes", "validation": "notes-done", "arguments": {"path": "notes.md"}}]
    server = fixed_server(project, folder=str(tmp_path / "gone"))
    graph = plan(project, [NOTES_SAY_DONE], node, [{"notes.md": "done\n"}], server=server)
    outcome = await Supervisor(graph).run()
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert [a["faultKind"] for a in outcome.attempts] == ["misconfigured"]
    assert "is not a folder" in str(outcome.verdict["findings"])


@pytest.mark.anyio
async def test_a_tool_of_a_fixed_server_needs_a_folder_slot(tmp_path: Path) -> None:
    """Without one it would read the real folder, where the change is not: refused before
    anything runs."""
    from gategraph.runtime import ConfigError

    project = write_tree(tmp_path / "project", {"notes.md": "to do\n"})
    blind = {"name": "t.blind", "mcp_server": "t", "mcp_tool_name": "shout", "read_only": True}
    graph = plan(
        project,
        [],
        [{"id": "shout", "tool": "t.blind", "arguments": {"text": "hi"}}],
        [{"notes.md": "done\n"}],
        tools=[blind],
        server=fixed_server(project, folder=str(project)),
    )
    with pytest.raises(ConfigError, match="has no resource slot to give it the plan's copy"):
        await Supervisor(graph).run()


@pytest.mark.anyio
async def test_a_fixed_server_is_given_one_folder_per_call(tmp_path: Path) -> None:
    """Its one folder can show one copy: a call that would give it two (a tool with two
    folder slots) is a configuration fault, and the other arguments pass as they are."""
    from gategraph.runtime import execute_graph

    one = write_tree(tmp_path / "one", {"notes.md": "done\n"})
    two = write_tree(tmp_path / "two", {"notes.md": "done\n"})
    graph = load_graph(
        {
            "version": 1,
            "name": "two-folders",
            "resources": {
                "root": {"kind": "directory", "path": str(one)},
                "suffix": {"kind": "directory", "path": str(two)},
            },
            "mcp_servers": {"t": fixed_server(one, folder=str(one))},
            "tools": [
                {
                    "name": "t.count",
                    "mcp_server": "t",
                    "mcp_tool_name": "count_files",
                    "read_only": True,
                    "resource_slots": ["root", "suffix"],
                }
            ],
            "validations": [
                {"name": "counted", "wraps": "t.count", "transform": "{'passed': True}"}
            ],
            "nodes": [{"id": "c", "validation": "counted"}],
        }
    )
    run = await execute_graph(graph)
    [record] = run.validations
    assert record.result.data["error"] == "misconfigured"
    assert "this call gives it 2 folders: give the tool one folder slot" in record.result.message


def test_the_launcher_says_when_this_machine_gives_no_mounts_of_ones_own(tmp_path: Path) -> None:
    """Where unshare is refused (user namespaces off), one line says what it needs."""
    import subprocess

    real = write_tree(tmp_path / "real", {"f": "real\n"})
    copy = write_tree(tmp_path / "copy", {"f": "copy\n"})
    code = (
        "import sys\n"
        "import gategraph.runtime._calls._mcp_view as view\n"
        "def refused(copy, at):\n"
        "    raise PermissionError(1, 'unshare: Operation not permitted')\n"
        "view.show_folder_at = refused\n"
        "sys.exit(view.main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(copy), str(real), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "unprivileged user namespaces turned on" in done.stderr, done.stderr


def test_folder_is_for_a_server_run_by_command_and_relative_to_the_graph(tmp_path: Path) -> None:
    from gategraph.runtime import ConfigError
    from gategraph.runtime._calls._mcp import McpServer

    found = McpServer.from_config({"command": "x", "folder": "repo"}, name="s", base_dir=tmp_path)
    assert found.folder == str(tmp_path / "repo")
    with pytest.raises(ConfigError, match="`folder` is only for a server run by `command`"):
        McpServer.from_config({"url": "http://127.0.0.1:1/mcp", "folder": "/x"}, name="s")


def test_the_launcher_shows_the_copy_at_the_folder_and_says_why_it_cannot(tmp_path: Path) -> None:
    """What the server started through the launcher reads at its folder is the copy; a
    folder that is not there is one line on its stderr."""
    import subprocess

    real = write_tree(tmp_path / "real", {"f": "real\n"})
    copy = write_tree(tmp_path / "copy", {"f": "copy\n"})
    launcher = [sys.executable, "-m", "gategraph.runtime._calls._mcp_view"]
    shown = subprocess.run(
        [*launcher, str(copy), str(real), "--", "cat", str(real / "f")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (shown.returncode, shown.stdout) == (0, "copy\n"), shown.stderr
    assert (real / "f").read_text() == "real\n"
    missing = subprocess.run(
        [*launcher, str(copy), str(tmp_path / "gone"), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert missing.stderr == (
        "gategraph cannot show the plan's copy to this MCP server: its folder "
        f"{tmp_path / 'gone'} is not a folder\n"
    )
    unknown = subprocess.run(
        [*launcher, str(copy), str(real), "--", str(tmp_path / "no-such-server")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unknown.returncode == 1 and "cannot start" in unknown.stderr
    usage = subprocess.run([*launcher, str(copy)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: ")
    # A copy reached through a link could lead anywhere: refused, saying so.
    (tmp_path / "link").symlink_to(copy)
    linked = subprocess.run(
        [*launcher, str(tmp_path / "link"), str(real), "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert linked.returncode == 1 and "it is a link" in linked.stderr, linked.stderr


def test_a_disposable_copy_shown_at_the_folder_reads_the_real_history_read_only(
    tmp_path: Path,
) -> None:
    """A disposable copy reads its git objects where they are (alternates naming the real
    folder's): shown at the real folder, it still finds them, and cannot write them."""
    import subprocess

    real = write_tree(tmp_path / "real", {"a.txt": "one\n"})
    git(real, "init", "-q")
    git(real, "add", ".")
    git(real, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    plan_copy = write_tree(tmp_path / "copy", {"a.txt": "two\n"})  # a plan's copy: no .git
    disposable = tmp_path / "disposable"
    _copy_with_git(str(plan_copy), str(disposable), str(real))
    script = "git diff --stat && git log --format=%s && touch .git/objects/x"
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "gategraph.runtime._calls._mcp_view",
            str(disposable),
            str(real),
            "--",
            "sh",
            "-c",
            f"cd {real} && {script}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "a.txt | 2 +-" in shown.stdout and "first" in shown.stdout, shown.stderr
    assert "Read-only file system" in shown.stderr and shown.returncode != 0
    assert not (real / ".git" / "objects" / "x").exists()
    assert (real / "a.txt").read_text() == "one\n"


def test_mcp_add_takes_the_servers_folder(tmp_path: Path) -> None:
    """`mcp add --folder DIR` registers it, absolute; a folder that is not there is one
    line, and nothing is registered."""
    import json

    project = write_tree(tmp_path / "project", {"notes.md": "x\n"})
    home = tmp_path / "home"
    server = ["--", sys.executable, str(SERVER), "fixed", str(project)]
    added = run_gategraph(home, "mcp", "add", "t", "--folder", "project", *server, cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    [listed] = json.loads(run_gategraph(home, "mcp", "list", "--json", cwd=tmp_path).stdout)
    assert listed["folder"] == str(project)
    gone = run_gategraph(home, "mcp", "add", "u", "--folder", "nowhere", *server, cwd=tmp_path)
    assert gone.returncode == 2
    assert gone.stderr == f"error: --folder: no such directory: {tmp_path / 'nowhere'}\n"
