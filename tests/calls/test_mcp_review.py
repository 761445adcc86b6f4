"""MCP client side, where a server or a hand-edited catalog would lead gategraph astray.

A validation that wraps a tool its server does not declare read-only, a graph that swaps
the server behind a catalog gate, a reply that forges gategraph's record, a missing tool
found mid-plan, a server that writes junk to its stdout, a broken catalog row, a holder
used after it closed, and the messages a person reads when a server cannot be reached.
The hostile server is tests/mcp_test_server.py's ``raw`` mode (the SDK's low-level API).
"""

from __future__ import annotations

import http.server
import importlib.metadata
import json
import logging
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import run_process
from test_mcp_edges import binding_refused

pytest.importorskip("mcp")

from gategraph.runtime import (
    Catalog,
    ConfigError,
    McpSessions,
    MemoryEventLog,
    NodeStatus,
    PlanFinished,
    PlanStatus,
    Supervisor,
    ValidationCompleted,
    execute_graph,
    load_graph,
    run_plan,
    tool_from_config,
)
from gategraph.runtime._base._exceptions import CatalogError
from gategraph.runtime._base._protocols import EscalationDecision
from gategraph.runtime._calls._mcp import (
    McpCall,
    McpServer,
    McpToolInfo,
    _Connection,
    read_only_claim,
    sdk_problem,
)

SERVER = Path(__file__).parents[1] / "mcp_test_server.py"
GATEGRAPH = [sys.executable, "-m", "gategraph.runtime"]

pytestmark = pytest.mark.timeout(240)

TRIO_HTTP_LEAKS = [
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
    ),
    pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning"),
]


def raw(*options: str) -> dict[str, Any]:
    """The hostile server over stdio, as a graph declares it."""
    return {"command": sys.executable, "args": [str(SERVER), "raw", *options]}


def real() -> dict[str, Any]:
    """The well-behaved test server over stdio."""
    return {"command": sys.executable, "args": [str(SERVER), "stdio"]}


def graph(
    server: dict[str, Any] | None,
    nodes: list[dict[str, Any]],
    **sections: Any,
) -> dict[str, Any]:
    data: dict[str, Any] = {"version": 1, "name": "review", "nodes": nodes, **sections}
    if server is not None:
        data["mcp_servers"] = {"h": server}
    return data


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_process([*GATEGRAPH, *args], cwd=cwd, timeout=180)


async def no_sleep(seconds: float) -> None:
    """The Max-N backoff, without the wait."""


RMRF = {"name": "rmrf", "mcp_server": "h", "mcp_tool_name": "destroy"}
LOOKS_SAFE = {"name": "looks-safe", "wraps": "rmrf", "transform": "output"}


# -- a validation that wraps an MCP tool ---------------------------------------------------------


@pytest.mark.anyio
async def test_a_wrapping_validation_needs_the_server_s_read_only_declaration() -> None:
    """Wrapping a tool its server does not declare read-only (destructive here, or saying
    nothing) is refused before anything runs, directly and through a chain; over a tool
    the server declares read-only it runs, and its result records the call."""
    for tool, chain in (("destroy", []), ("plain", []), ("destroy", [1])):
        validations: list[dict[str, Any]] = [LOOKS_SAFE]
        target = "looks-safe"
        if chain:
            validations.append({"name": "outer", "wraps": "looks-safe", "transform": "output"})
            target = "outer"
        plan = load_graph(
            graph(
                raw(),
                [{"id": "n", "validation": target}],
                tools=[{**RMRF, "mcp_tool_name": tool}],
                validations=validations,
            )
        )
        with pytest.raises(ConfigError) as caught:
            await execute_graph(plan)
        (issue,) = caught.value.issues
        assert issue.field == "nodes[0].validation"
        assert f"the validation {target!r} wraps MCP tool {tool!r} of server 'h'" in issue.message
        assert "not declared read-only by its server (readOnlyHint)" in issue.message
    safe = load_graph(
        graph(
            raw(),
            [{"id": "n", "validation": "looks-safe"}],
            tools=[{**RMRF, "mcp_tool_name": "safe"}],
            validations=[LOOKS_SAFE],
        )
    )
    (record,) = (await execute_graph(safe)).validations
    assert record.result.passed
    assert record.result.data["mcp"]["tool"] == "safe"
    assert record.result.data["mcp"]["read_only"] == "declared"


@pytest.mark.anyio
async def test_a_trusted_wrapping_validation_is_recorded_and_never_over_a_destructive_tool() -> (
    None
):
    """`trust_read_only` on the wrapping validation lets it wrap a tool its server says
    nothing of, recorded as `trusted`; over a tool the server marks destructive, no trust
    helps."""
    for tool in ("plain", "destroy"):
        plan = load_graph(
            graph(
                raw(),
                [{"id": "n", "validation": "looks-safe"}],
                tools=[{**RMRF, "mcp_tool_name": tool}],
                validations=[LOOKS_SAFE],
            )
        )
        (validation,) = plan.validations
        # As the validation's config `trust_read_only: true` gives it.
        trusted = plan.model_copy(
            update={"validations": (validation.model_copy(update={"trust_read_only": True}),)}
        )
        if tool == "destroy":
            with pytest.raises(ConfigError, match="marks destructive"):
                await execute_graph(trusted)
            continue
        log = MemoryEventLog()
        run = await execute_graph(trusted, event_log=log)
        (record,) = run.validations
        assert record.result.passed and record.result.data["mcp"]["read_only"] == "trusted"
        (done,) = [e for e in await log.read(run.plan_id) if isinstance(e, ValidationCompleted)]
        assert done.result.data["mcp"]["read_only"] == "trusted"


@pytest.mark.anyio
async def test_trust_cannot_make_a_destructive_tool_a_direct_validation() -> None:
    direct = {"name": "v", "mcp_server": "h", "mcp_tool_name": "destroy", "trust_read_only": True}
    plan = load_graph(graph(raw(), [{"id": "n", "validation": "v"}], validations=[direct]))
    with pytest.raises(ConfigError) as caught:
        await execute_graph(plan)
    message = caught.value.issues[0].message
    assert "marks destructive (destructiveHint)" in message
    assert "`trust_read_only` cannot make it read-only" in message


def test_read_only_claim_of_a_validation_without_starting_its_server() -> None:
    """What `gategraph mcp serve` can say of a validation's claim before any call."""
    tools = {
        t["name"]: tool_from_config(t)
        for t in (
            {"name": "unmarked", "mcp_server": "h", "mcp_tool_name": "a"},
            {"name": "marked", "mcp_server": "h", "mcp_tool_name": "a", "read_only": True},
            {"name": "direct", "mcp_server": "h", "mcp_tool_name": "a", "tool_type": "validation"},
            {
                "name": "trusted",
                "mcp_server": "h",
                "mcp_tool_name": "a",
                "tool_type": "validation",
                "trust_read_only": True,
            },
            {"name": "over-unmarked", "wraps": "unmarked", "transform": "output"},
            {"name": "over-marked", "wraps": "marked", "transform": "output"},
            {"name": "over-trusted", "wraps": "trusted", "transform": "output"},
            {"name": "chain", "wraps": "over-unmarked", "transform": "output"},
            {"name": "code", "code": "def run():\n    return {'passed': True}\n"},
            {"name": "over-code", "wraps": "code", "transform": "output"},
        )
    }
    claims = {name: read_only_claim(tool, tools.__getitem__) for name, tool in tools.items()}
    assert claims == {
        "unmarked": "absent",
        "marked": "declared",
        "direct": "declared",
        "trusted": "trusted",
        "over-unmarked": "absent",
        "over-marked": "declared",
        "over-trusted": "trusted",
        "chain": "absent",
        "code": None,
        "over-code": None,
    }


def test_cli_import_marks_what_writes_and_a_wrap_over_it_is_refused(tmp_path: Path) -> None:
    """`mcp import` records that a tool writes when its server does not declare it
    read-only (destructive, or saying nothing), so `validation add` refuses to wrap it;
    `--as-validation` of a destructive tool is refused even with --trust-read-only."""
    command = ["--", sys.executable, str(SERVER), "raw"]
    assert run_cli("mcp", "add", "h", *command, cwd=tmp_path).returncode == 0
    refused = run_cli(
        "mcp", "import", "h", "--as-validation", "destroy", "--trust-read-only", cwd=tmp_path
    )
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "'destroy' is marked destructive by MCP server 'h'" in refused.stderr
    imported = run_cli(
        "mcp", "import", "h", "--tool", "destroy", "--tool", "plain", "--tool", "safe", cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr
    listed = run_cli("tool", "list", "--json", cwd=tmp_path)
    imported_tools = [t for t in json.loads(listed.stdout) if t["origin"] == "catalog"]
    capability = {t["name"]: t["capability"] for t in imported_tools}
    access = {t["name"]: t["access"] for t in imported_tools}
    assert (access["h.destroy"], access["h.plain"], access["h.safe"]) == (
        "writes",
        "writes",
        "read-only",
    )
    assert capability["h.destroy"]["writes"] and capability["h.plain"]["writes"]
    assert capability["h.safe"]["read_only"] and not capability["h.safe"].get("writes")
    assert not capability["h.destroy"].get("read_only")
    config = tmp_path / "v.yaml"
    config.write_text("{name: looks-safe, wraps: h.destroy, transform: output}\n")
    added = run_cli("validation", "add", "--config", str(config), cwd=tmp_path)
    assert added.returncode == 1 and added.stderr.count("\n") == 1, added.stderr
    assert "cannot wrap 'h.destroy': it writes (its MCP server does not declare it" in added.stderr


@pytest.mark.anyio
async def test_a_catalog_validation_wrapping_an_unmarked_mcp_tool_is_refused_at_plan_start(
    tmp_path: Path,
) -> None:
    """A tool registered by hand (neither read-only nor writing) can be wrapped; the plan
    it gates is refused before it starts, at the attachment, and nothing is applied."""
    catalog = Catalog.in_memory()
    catalog.add_server(McpServer.from_config(raw(), name="h"))
    catalog.add(tool_from_config({**RMRF, "name": "h.rmrf"}))
    catalog.add(tool_from_config({**LOOKS_SAFE, "wraps": "h.rmrf"}))
    work = tmp_path / "work"
    work.mkdir()
    attachment = catalog.attach("work", "looks-safe")
    plan = load_graph(
        graph(
            None,
            [{"id": "t", "tool": "touch"}],
            resources={"work": {"kind": "directory", "path": str(work)}},
            tools=[TOUCH],
        ),
        catalog=catalog,
    )
    with pytest.raises(ConfigError) as caught:
        await run_plan(plan, catalog=catalog)
    assert caught.value.issues[0].field == f"attachment {attachment.id}"
    assert "wraps MCP tool 'destroy'" in caught.value.issues[0].message
    assert not (work / "f.txt").exists()


# -- a graph cannot swap the server behind a catalog gate ----------------------------------------

TOUCH = {
    "name": "touch",
    "writes": True,
    "resource_slots": ["work"],
    "code": "def run(work):\n    (work / 'f.txt').write_text('changed')\n    return {}\n",
}


@pytest.mark.anyio
async def test_a_catalog_gate_always_calls_the_catalog_s_server(tmp_path: Path) -> None:
    """A graph that declares a stand-in under the name of the catalog's server is refused
    (at load, and at the start of a plan whose graph was loaded without the catalog);
    the attached gate calls the catalog's server, fails, and its record says so."""
    catalog = Catalog.in_memory()
    catalog.add_server(McpServer.from_config(real(), name="h"))
    catalog.add(
        tool_from_config(
            {
                "name": "gate.words",
                "mcp_server": "h",
                "mcp_tool_name": "no_forbidden_words",
                "tool_type": "validation",
            }
        )
    )
    catalog.attach("work", "gate.words", arguments={"text": "TODO", "forbidden": ["TODO"]})
    work = tmp_path / "work"
    work.mkdir()
    sections = {
        "resources": {"work": {"kind": "directory", "path": str(work)}},
        "tools": [TOUCH],
        "policy": {"retry_limit": 0, "strategy_revisions": 0},
    }
    sneaky = graph(raw(), [{"id": "t", "tool": "touch"}], **sections)
    path = tmp_path / "sneaky.yaml"
    path.write_text(json.dumps(sneaky))
    with pytest.raises(ConfigError) as caught:
        load_graph(path, catalog=catalog)
    assert str(caught.value).startswith(f"{path}:") and "\n" not in str(caught.value)
    assert "mcp_servers.h: differs from the catalog's MCP server 'h'" in str(caught.value)
    with pytest.raises(ConfigError, match="differs from the catalog's MCP server 'h'"):
        await run_plan(load_graph(sneaky), catalog=catalog)
    assert not (work / "f.txt").exists()

    async def abort(request: Any) -> EscalationDecision:
        return EscalationDecision(action="abort", note="gated")

    honest = load_graph(graph(None, [{"id": "t", "tool": "touch"}], **sections), catalog=catalog)
    outcome = await run_plan(honest, catalog=catalog, escalation=abort)
    assert outcome.status is PlanStatus.FAILED
    assert not (work / "f.txt").exists()
    (finding,) = [f for f in outcome.verdict["findings"] if f["status"] != "pass"]
    assert "found TODO" in json.dumps(finding)
    log = MemoryEventLog()
    again = await run_plan(honest, catalog=catalog, escalation=abort, event_log=log)
    events = await log.read(again.plan_id)
    (done,) = [e for e in events if isinstance(e, ValidationCompleted)]
    assert done.result.data["mcp"] == {
        "server": "h",
        "tool": "no_forbidden_words",
        "declared_in": "catalog",
        "command": f"{sys.executable} {SERVER} stdio",
        "read_only": "declared",
    }


# -- a server cannot forge gategraph's record ----------------------------------------------------


@pytest.mark.anyio
async def test_a_reply_cannot_forge_the_record_of_its_call() -> None:
    forge = {"name": "v", "mcp_server": "h", "mcp_tool_name": "forge", "tool_type": "validation"}
    plan = load_graph(graph(raw(), [{"id": "n", "validation": "v"}], validations=[forge]))
    (record,) = (await execute_graph(plan)).validations
    assert record.result.passed
    assert record.result.data["mine"] == 1  # the rest of its data is its own
    assert record.result.data["mcp"]["server"] == "h"
    assert record.result.data["mcp"]["tool"] == "forge"
    assert record.result.data["mcp"]["declared_in"] == "graph"


# -- what is found only after the plan started ---------------------------------------------------


def flaky_plan(marker: Path, tool: str) -> Any:
    return load_graph(
        graph(
            raw("fail-once", str(marker)),
            [{"id": "n", "validation": "v"}],
            validations=[{"name": "v", "mcp_server": "h", "mcp_tool_name": tool}],
            policy={"retry_limit": 2, "strategy_revisions": 0},
        )
    )


@pytest.mark.anyio
async def test_a_missing_tool_found_mid_plan_fails_the_validation(tmp_path: Path) -> None:
    """The server does not start for the plan's check, so its tools are checked only when
    the first round opens it: the missing tool fails the validation as `misconfigured`,
    and the plan ends with its events instead of raising."""
    log = MemoryEventLog()

    async def abort(request: Any) -> EscalationDecision:
        return EscalationDecision(action="abort", note="misconfigured")

    plan = flaky_plan(tmp_path / "marker", "nope")
    outcome = await Supervisor(plan, event_log=log, escalation=abort, sleep=no_sleep).run()
    assert outcome.status is PlanStatus.FAILED
    events = await log.read(outcome.plan_id)
    assert isinstance(events[-1], PlanFinished)
    results = [e.result for e in events if isinstance(e, ValidationCompleted)]
    assert results and all(r.data["error"] == "misconfigured" for r in results)
    assert "MCP server 'h' has no tool 'nope'" in results[0].message


@pytest.mark.anyio
async def test_a_missing_tool_found_mid_plan_is_a_permanent_fault(tmp_path: Path) -> None:
    """...and the Max-N runtime treats it as what it is: permanent, never retried."""
    outcome = await Supervisor(flaky_plan(tmp_path / "marker", "nope"), sleep=no_sleep).run()
    assert [a["faultKind"] for a in outcome.attempts] == ["misconfigured"]
    assert outcome.attempts[-1]["retryDecision"] == "escalate-permanent"


@pytest.mark.anyio
async def test_a_holder_s_later_check_fails_calls_instead_of_raising(tmp_path: Path) -> None:
    """Inside one holder: the first check of a use raises; a later one (the server did
    not start the first time) makes the calls say what is wrong."""
    async with McpSessions() as sessions:
        plan = flaky_plan(tmp_path / "marker", "nope")
        run = await execute_graph(plan, mcp_sessions=sessions)  # did not start: unavailable
        assert run.validations[0].result.data["error"] == "unavailable"
        run = await execute_graph(plan, mcp_sessions=sessions)
        assert run.validations[0].result.data["error"] == "misconfigured"
    with pytest.raises(ConfigError, match="has no tool 'nope'"):
        await execute_graph(plan)  # a holder of its own: the first check raises


# -- a server that writes junk to its stdout -----------------------------------------------------


@pytest.mark.anyio
async def test_junk_on_a_server_s_stdout_is_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Lines that are not MCP messages, at start and mid-session: the run goes on, and the
    user sees one warning naming the server, never the SDK's traceback."""
    caplog.set_level(logging.DEBUG)
    check = {"name": "v", "mcp_server": "h", "mcp_tool_name": "junk", "tool_type": "validation"}
    plan = load_graph(
        graph(
            raw("junk"),
            [{"id": "a", "validation": "v"}, {"id": "b", "validation": "v", "needs": "a"}],
            validations=[check],
        )
    )
    run = await execute_graph(plan)
    assert all(record.result.passed for record in run.validations)
    ours = [r for r in caplog.records if r.name == "gategraph.mcp"]
    assert len(ours) == 1 and ours[0].levelno == logging.WARNING
    assert "MCP server 'h' wrote a line to its standard output" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.name.startswith("mcp")]


@pytest.mark.anyio
async def test_bytes_that_are_not_utf8_do_not_end_the_session() -> None:
    """Such a line is skipped like any junk: the reply after it arrives, and so do the
    next calls."""
    check = {"name": "v", "mcp_server": "h", "mcp_tool_name": "garble", "tool_type": "validation"}
    plan = load_graph(
        graph(
            raw(),
            [
                {"id": "a", "validation": "v", "timeout": 20},
                {"id": "b", "validation": "v", "needs": "a", "timeout": 20},
            ],
            validations=[check],
        )
    )
    run = await execute_graph(plan)
    assert [r.result.passed for r in run.validations] == [True, True], run.validations


def test_cli_junk_on_stdout_is_no_traceback(tmp_path: Path) -> None:
    command = ["--", sys.executable, str(SERVER), "raw", "junk"]
    assert run_cli("mcp", "add", "junk", *command, cwd=tmp_path).returncode == 0
    done = run_cli("mcp", "tools", "junk", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "safe  (read-only)" in done.stdout
    assert done.stderr.count("\n") == 1 and "'junk' wrote a line" in done.stderr, done.stderr


# -- a broken row of the catalog -------------------------------------------------------------------


def test_one_unreadable_server_does_not_block_the_others(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with Catalog.open(db) as catalog:
        catalog.add_server(McpServer(name="a", command="x"))
        catalog.add_server(McpServer(name="b", command="y"))
    with sqlite3.connect(db) as raw_db:
        raw_db.execute("UPDATE mcp_servers SET config = 'not json' WHERE name = 'a'")
    with Catalog.open(db) as catalog:
        assert [s.name for s in catalog.list_servers()] == ["b"]
        (problem,) = catalog.unreadable_servers().values()
        assert problem.startswith(f"{db}: MCP server 'a' is unreadable (") and "\n" not in problem
        with pytest.raises(CatalogError) as caught:
            catalog.get_server("a")
        assert str(caught.value) == problem
    cli = ["--catalog", str(db), "mcp"]
    listed = run_cli(*cli, "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.count("\n") == 1 and f"{db}: MCP server 'a'" in listed.stderr
    rows = [line.split()[:2] for line in listed.stdout.splitlines()[1:]]
    assert rows == [["a", "?"], ["b", "stdio"]]
    as_json = json.loads(run_cli(*cli, "list", "--json", cwd=tmp_path).stdout)
    assert [s["name"] for s in as_json] == ["a", "b"] and "unreadable" in as_json[0]
    tools = run_cli(*cli, "tools", "a", cwd=tmp_path)
    assert tools.returncode == 1 and tools.stderr.count("\n") == 1, tools.stderr
    assert f"{db}: MCP server 'a' is unreadable" in tools.stderr
    updated = run_cli(*cli, "add", "a", "--update", "--command", "z", cwd=tmp_path)
    assert updated.returncode == 0 and updated.stdout.startswith("updated MCP server a"), updated
    with sqlite3.connect(db) as raw_db:
        raw_db.execute("UPDATE mcp_servers SET config = '{}' WHERE name = 'b'")
    removed = run_cli(*cli, "remove", "b", cwd=tmp_path)
    assert removed.returncode == 0 and removed.stdout == "removed MCP server b\n", removed
    with Catalog.open(db) as catalog:
        assert [s.name for s in catalog.list_servers()] == ["a"]
        assert catalog.unreadable_servers() == {}


# -- a holder that closed ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_task_that_outlives_its_holder_opens_its_own() -> None:
    """A task started inside `async with McpSessions()` that runs after the block sees no
    holder (`current()`), and its run opens the server itself."""
    plan = load_graph(
        graph(
            real(),
            [{"id": "n", "tool": "who"}],
            tools=[
                {"name": "who", "mcp_server": "h", "mcp_tool_name": "whoami", "read_only": True}
            ],
        )
    )
    done = anyio.Event()
    seen: list[Any] = []
    closed = anyio.Event()

    async def later() -> None:
        await closed.wait()
        seen.append(McpSessions.current())
        run = await execute_graph(plan)
        seen.append(run.nodes["n"].status)
        done.set()

    async with anyio.create_task_group() as group:
        async with McpSessions() as holder:
            group.start_soon(later)
            assert McpSessions.current() is holder
        closed.set()
        await done.wait()
    assert seen == [None, NodeStatus.OK]
    with pytest.raises(RuntimeError, match="not entered yet, or closed"):
        await holder.connect([McpServer(name="h", command="x")])


# -- what a person reads ---------------------------------------------------------------------------


class _Refusing(http.server.BaseHTTPRequestHandler):
    def _refuse(self) -> None:
        self.send_response(501)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET = do_DELETE = _refuse

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_url() -> Iterator[str]:
    """An HTTP endpoint that answers every request with 501."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    server.shutdown()
    server.server_close()


@pytest.mark.anyio
@TRIO_HTTP_LEAKS[0]
@TRIO_HTTP_LEAKS[1]
async def test_an_http_error_status_is_named_with_its_address(refusing_url: str) -> None:
    check = {"name": "v", "mcp_server": "h", "mcp_tool_name": "x", "tool_type": "validation"}
    plan = load_graph(
        graph({"url": refusing_url}, [{"id": "n", "validation": "v"}], validations=[check])
    )
    (record,) = (await execute_graph(plan)).validations
    assert record.result.data["error"] == "unavailable"
    assert "did not start" in record.result.message
    assert f"HTTP 501 Not Implemented from {refusing_url}" in record.result.message


@pytest.mark.parametrize(
    ("declaration", "expected"),
    [
        (
            {"command": "python", "args": "a b"},
            "args: must be a list of arguments, not a text: write [a, b]",
        ),
        ({"command": ["python", "x.py"]}, "command: must be the program alone, not a list"),
        ({"command": "python", "cwd": 5}, "cwd: must be a text, not a number"),
        ({"command": "python", "env": ["A=1"]}, "env: must be a mapping {NAME: value}, not a list"),
        (
            {"command": "python", "env": {"A": True}},
            "env: the value of 'A' must be a text, not true/false",
        ),
        ({"url": "http://exa mple.com/mcp"}, "has a space or a control character"),
        ({"url": "http://a..b/mcp"}, "has an invalid host 'a..b'"),
        ({"url": "http://ho%st/mcp"}, "has an invalid host 'ho%st'"),
    ],
)
def test_declaration_problems_are_plain(declaration: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        McpServer.from_config(declaration, name="s")
    (issue,) = caught.value.issues
    assert expected in f"{issue.field}: {issue.message}"
    assert "Input should be" not in issue.message


def test_numbers_in_args_and_env_are_their_text() -> None:
    server = McpServer.from_config(
        {"command": "srv", "args": ["-p", 8080], "env": {"N": 2}}, name="s"
    )
    assert server.args == ("-p", "8080") and server.env == {"N": "2"}


def test_a_servers_section_that_is_not_a_mapping_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(
        "version: 1\nname: p\nmcp_servers: [a, b]\n"
        "tools:\n  - {name: t, mcp_server: a, mcp_tool_name: x, read_only: true}\n"
        "nodes:\n  - {id: n, tool: t}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_graph(path)
    (issue,) = caught.value.issues
    assert issue.field == "mcp_servers"
    assert issue.message.startswith("must be a mapping of server names to their declarations")
    assert issue.message.endswith("not a list")


def test_cli_an_option_for_the_other_transport_is_named_as_an_option(tmp_path: Path) -> None:
    done = run_cli(
        "mcp", "add", "x", "--url", "http://127.0.0.1:1/mcp", "--env", "A=1", cwd=tmp_path
    )
    assert (
        done.returncode == 2
        and done.stderr == "error: --env is only for a server run by --command\n"
    )


@pytest.mark.anyio
async def test_structured_content_that_breaks_its_schema_is_malformed() -> None:
    check = {"name": "v", "mcp_server": "h", "mcp_tool_name": "mismatch", "tool_type": "validation"}
    plan = load_graph(graph(raw(), [{"id": "n", "validation": "v"}], validations=[check]))
    (record,) = (await execute_graph(plan)).validations
    assert record.result.data["error"] == "malformed"
    assert "breaks its outputSchema" in record.result.message
    assert "'yes' is not of type 'boolean'" in record.result.message
    assert "RuntimeError" not in record.result.message and "\n" not in record.result.message


class _TimingOut:
    async def call_tool(self, name: str, arguments: Any) -> Any:
        raise TimeoutError("the SDK's own read timeout")


@pytest.mark.anyio
async def test_a_timeout_inside_the_sdk_without_a_limit_is_a_lost_connection() -> None:
    """No `timeout` declared: a TimeoutError the SDK raises is the connection's failure,
    said in words (not a crash formatting a limit that is not there)."""
    call = McpCall(tool_from_config({"name": "t", "mcp_server": "s", "mcp_tool_name": "a"}))
    connection = _Connection(McpServer(name="s", command="x"))
    connection.session = _TimingOut()
    connection.tools = {"a": McpToolInfo({"name": "a"})}
    assert call.bind(connection) is None
    outcome = await call.call((), {}, {}, None, None)
    assert not outcome.ok and outcome.error == "unavailable"
    assert outcome.message.startswith("lost the connection to MCP server 's': ")
    assert "the SDK's own read timeout" in outcome.message


# -- the SDK's version -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_sdk_older_than_2_is_said_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_version = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "1.26.0" if name == "mcp" else real_version(name),
    )
    expected = (
        "calling MCP tools needs mcp 2.0 or newer (found 1.26.0): pip install -U 'gategraph[mcp]'"
    )
    assert sdk_problem() == expected
    assert sdk_problem("gategraph mcp serve").startswith("gategraph mcp serve needs mcp 2.0")
    assert (await binding_refused())[0].message == expected
