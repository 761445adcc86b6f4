"""MCP servers' tools as gategraph tools and validations, against a real MCP server.

The server is tests/mcp_test_server.py (the official SDK's MCPServer), run with this
Python over stdio, and over streamable HTTP on 127.0.0.1. Plans run against it through
execute_graph, run_plan and the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from _helpers import run_process, write_tree

pytest.importorskip("mcp")

from gategraph.runtime import (
    Catalog,
    ConfigError,
    MemoryEventLog,
    NodeCompleted,
    NodeStatus,
    PlanStatus,
    Supervisor,
    Validation,
    ValidationCompleted,
    execute_graph,
    load_graph,
    run_plan,
    tool_from_config,
)
from gategraph.runtime._base._exceptions import DuplicateError, IntegrityError, NotFoundError
from gategraph.runtime._base._protocols import EscalationDecision
from gategraph.runtime._calls._mcp import McpServer, McpSessions
from gategraph.runtime._data._maxn import FAULT_CATALOGUE
from gategraph.runtime._definitions._catalog import SCHEMA_VERSION
from gategraph.runtime._running._engine import open_plan_mcp_sessions

ROOT = Path(__file__).parents[2]
SERVER = Path(__file__).parents[1] / "mcp_test_server.py"
GATEGRAPH = [sys.executable, "-m", "gategraph.runtime"]

pytestmark = pytest.mark.timeout(240)


def stdio_server(**extra: Any) -> dict[str, Any]:
    """The test server over stdio, as a graph or catalog declares it."""
    return {"command": sys.executable, "args": [str(SERVER), "stdio"], **extra}


def start_http_server(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start the test server on streamable HTTP; return it and its URL once it listens."""
    port_file = folder / f"port-{time.monotonic_ns()}"
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the HTTP test server did not start")
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{port_file.read_text()}/mcp"


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def http_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, url = start_http_server(tmp_path_factory.mktemp("mcp-http"))
    yield url
    stop(process)


# Under trio, the SDK's HTTP client (httpx2) leaves its response and event-stream async
# generators to the garbage collector, and trio warns for each: the SDK's, not gategraph's.
TRIO_HTTP_LEAKS = [
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
    ),
    pytest.mark.filterwarnings("ignore:Async generator 'http:ResourceWarning"),
]


@pytest.fixture(params=["stdio", pytest.param("http", marks=TRIO_HTTP_LEAKS)])
def declaration(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The test server's declaration, over each transport."""
    if request.param == "http":
        return {"url": request.getfixturevalue("http_url")}
    return stdio_server()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = write_tree(
        tmp_path / "project", {"a.py": "x = 1\n", "b.py": "y = 2\n", "notes.md": "notes\n"}
    )
    return folder


def graph(
    server: dict[str, Any],
    nodes: list[dict[str, Any]],
    *,
    validations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    tools: list[dict[str, Any]] = (),  # type: ignore[assignment]
    project: Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A plan graph over the test server ``t``."""
    data: dict[str, Any] = {
        "version": 1,
        "name": "mcp-plan",
        "mcp_servers": {"t": server},
        "validations": list(validations),
        "tools": list(tools),
        "nodes": nodes,
        **extra,
    }
    if project is not None:
        data["resources"] = {"repo": {"kind": "directory", "path": str(project)}}
    return data


WORDS = {"name": "words", "mcp_server": "t", "mcp_tool_name": "no_forbidden_words"}
FILES = {
    "name": "files",
    "mcp_server": "t",
    "mcp_tool_name": "count_files",
    "resource_slots": ["root"],
    "read_only": True,
}
FEW_FILES = {
    "name": "few-files",
    "wraps": "files",
    "argument_mapping": {"suffix": "$suffix"},
    "transform": "{'passed': output['count'] <= 2, 'message': ', '.join(output['names'])}",
}


async def no_sleep(seconds: float) -> None:
    """The Max-N backoff, without the wait."""


# -- running tools and validations ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_plan_calls_mcp_validations_and_tools(
    declaration: dict[str, Any], project: Path
) -> None:
    """A direct validation passes and fails by the server's structured result, a wrapped one
    reads a tool's JSON text through its transform, and a work tool's text is its output."""
    plan = load_graph(
        graph(
            declaration,
            [
                {
                    "id": "clean",
                    "validation": "words",
                    "arguments": {"text": "ok", "forbidden": ["x"]},
                },
                {
                    "id": "dirty",
                    "validation": "words",
                    "arguments": {"text": "a x b", "forbidden": ["x"]},
                },
                {"id": "py", "validation": "few-files", "arguments": {"suffix": ".py"}},
                {"id": "all", "validation": "few-files", "arguments": {"suffix": ""}},
                {"id": "loud", "tool": "shout", "arguments": {"text": "quiet"}},
            ],
            validations=[WORDS, FEW_FILES],
            tools=[FILES, {"name": "shout", "mcp_server": "t", "mcp_tool_name": "shout"}],
            project=project,
        )
    )
    log = MemoryEventLog()
    run = await execute_graph(plan, event_log=log)
    results = {r.node: r.result for r in run.validations}
    assert results["clean"].passed and results["clean"].message == "clean"
    assert not results["dirty"].passed and results["dirty"].message == "found x"
    assert results["dirty"].data["found"] == ["x"]
    # The log shows where the result came from, and why a validation may trust it.
    reached = (
        {"url": declaration["url"]}
        if "url" in declaration
        else {"command": " ".join([declaration["command"], *declaration["args"]])}
    )
    assert results["dirty"].data["mcp"] == {
        "server": "t",
        "tool": "no_forbidden_words",
        "declared_in": "graph",
        **reached,
        "read_only": "declared",
    }
    # The fields docs/mcp.md shows in its example result.
    page = (ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
    shown = yaml.safe_load(page.split("```yaml\npassed: false\n", 1)[1].split("```", 1)[0])
    recorded = {"command" if k == "url" else k for k in results["dirty"].data["mcp"]}
    assert set(shown["data"]["mcp"]) == recorded  # the page shows `command`, or `url`
    assert results["py"].passed and results["py"].message == "a.py, b.py"
    # A validation that wraps an MCP tool records it the same way.
    assert results["py"].data["mcp"] == {**results["dirty"].data["mcp"], "tool": "count_files"}
    assert not results["all"].passed  # three files
    assert run.nodes["loud"].status is NodeStatus.OK and run.nodes["loud"].output == "QUIET"
    completed = [e for e in await log.read(run.plan_id) if isinstance(e, ValidationCompleted)]
    assert {e.node for e in completed} == {"clean", "dirty", "py", "all"}


@pytest.mark.anyio
async def test_an_error_result_is_a_failed_call(declaration: dict[str, Any]) -> None:
    """isError: a validation fails with the server's text; a work tool's node fails."""
    tool = {"name": "refuse", "mcp_server": "t", "mcp_tool_name": "fail_loudly"}
    check = {**tool, "name": "refuse-check", "tool_type": "validation"}
    plan = load_graph(
        graph(
            declaration,
            [
                {"id": "v", "validation": "refuse-check", "arguments": {"reason": "no"}},
                {"id": "w", "tool": "refuse", "arguments": {"reason": "never"}},
                {"id": "after", "tool": "refuse", "arguments": {"reason": "x"}, "needs": "w"},
            ],
            validations=[check],
            tools=[tool],
        )
    )
    run = await execute_graph(plan)
    result = run.validations[0].result
    assert not result.passed and "refused: no" in result.message
    assert result.data["error"] == "exception" and result.data["mcp"]["is_error"] is True
    assert run.nodes["w"].status is NodeStatus.FAILED
    assert "returned an error" in (run.nodes["w"].error or "")
    assert "refused: never" in (run.nodes["w"].error or "")
    assert run.nodes["after"].status is NodeStatus.SKIPPED


@pytest.mark.anyio
async def test_one_session_per_server_per_run_shared_by_concurrent_calls() -> None:
    """Twelve concurrent calls reach one server process; the next run opens its own, unless
    both run inside one McpSessions, which keeps its session across runs."""
    who = {"name": "who", "mcp_server": "t", "mcp_tool_name": "whoami"}
    plan = load_graph(
        graph(
            stdio_server(),
            [{"id": f"n{i}", "tool": "who"} for i in range(12)],
            tools=[who],
            policy={"max_concurrency": 12},
        )
    )

    def pids(run: Any) -> set[int]:
        return {r.output["pid"] for r in run.nodes.values()}

    first, second = await execute_graph(plan), await execute_graph(plan)
    assert len(pids(first)) == 1 and len(pids(second)) == 1
    assert pids(first) != pids(second)
    async with McpSessions():
        third, fourth = await execute_graph(plan), await execute_graph(plan)
    assert len(pids(third) | pids(fourth)) == 1
    assert pids(third) != pids(first)


@pytest.mark.anyio
async def test_environment_references_are_expanded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`${NAME}` in env takes the variable from gategraph's environment. One that is not
    set is a configuration error, not an unreachable server: refused before the run, and
    `misconfigured` (never retried) when a holder finds it only at a later check."""
    monkeypatch.setenv("GG_MCP_TEST_GREETING", "hello there")
    who = {"name": "who", "mcp_server": "t", "mcp_tool_name": "whoami"}
    check = {**who, "name": "who-check", "tool_type": "validation"}
    server = stdio_server(env={"GREETING": "${GG_MCP_TEST_GREETING}!"})
    plan = load_graph(
        graph(
            server,
            [
                {"id": "w", "tool": "who", "arguments": {"variable": "GREETING"}},
                {"id": "v", "validation": "who-check"},
            ],
            tools=[who],
            validations=[check],
        )
    )
    async with McpSessions() as sessions:
        run = await execute_graph(plan, mcp_sessions=sessions)
        assert run.nodes["w"].output["value"] == "hello there!"
        monkeypatch.delenv("GG_MCP_TEST_GREETING")
        # The holder's session is up: this run reuses it, whatever the environment now.
        run = await execute_graph(plan, mcp_sessions=sessions)
        assert run.nodes["w"].status is NodeStatus.OK
        for connection in sessions._connections.values():
            connection.fail("gone")  # lost: the next run opens the server again
        run = await execute_graph(plan, mcp_sessions=sessions)
    assert run.nodes["w"].status is NodeStatus.FAILED
    assert "GG_MCP_TEST_GREETING, which is not set" in (run.nodes["w"].error or "")
    (record,) = run.validations
    assert record.result.data["error"] == "misconfigured"
    assert FAULT_CATALOGUE["misconfigured"].classification.value == "permanent"
    with pytest.raises(ConfigError, match="GG_MCP_TEST_GREETING, which is not set"):
        await execute_graph(plan)  # a holder of its own: the first check of these uses


@pytest.mark.anyio
async def test_a_node_timeout_ends_an_mcp_call() -> None:
    """A call past its node's timeout is a timeout; the run ends and closes the server."""
    slow = {
        "name": "slow",
        "mcp_server": "t",
        "mcp_tool_name": "slow_check",
        "tool_type": "validation",
    }
    plan = load_graph(
        graph(
            stdio_server(),
            [
                {"id": "late", "validation": "slow", "arguments": {"seconds": 60}, "timeout": 0.5},
                {"id": "quick", "validation": "slow", "arguments": {"seconds": 0}},
            ],
            validations=[slow],
        )
    )
    run = await execute_graph(plan)
    results = {r.node: r.result for r in run.validations}
    assert results["late"].data["error"] == "timeout"
    assert results["quick"].passed


@pytest.mark.anyio
async def test_a_tool_whose_schema_names_the_artifact_gets_it() -> None:
    """`artifact` in the input schema is passed, and checked when the call is made: an
    artifact the schema refuses fails the node as bad arguments."""
    keys = {"name": "keys", "mcp_server": "t", "mcp_tool_name": "artifact_keys"}
    make = {"name": "make", "code": "def run(value):\n    return value\n"}
    plan = load_graph(
        graph(
            stdio_server(),
            [
                {"id": "obj", "tool": "make", "arguments": {"value": {"b": 1, "a": 2}}},
                {"id": "text", "tool": "make", "arguments": {"value": "not an object"}},
                {"id": "good", "tool": "keys", "needs": "obj"},
                {"id": "bad", "tool": "keys", "needs": "text"},
            ],
            tools=[keys, make],
        )
    )
    run = await execute_graph(plan)
    assert run.nodes["good"].output == ["a", "b"]
    assert run.nodes["bad"].status is NodeStatus.FAILED
    assert "the arguments break the input schema of MCP tool 'artifact_keys'" in (
        run.nodes["bad"].error or ""
    )


@pytest.mark.anyio
async def test_a_cancelled_run_ends_its_calls_and_closes_its_servers() -> None:
    slow = {**WORDS, "name": "slow", "mcp_tool_name": "slow_check"}
    plan = load_graph(
        graph(
            stdio_server(),
            [{"id": "s", "validation": "slow", "arguments": {"seconds": 600}}],
            validations=[slow],
        )
    )
    with anyio.move_on_after(3) as scope:
        await execute_graph(plan)
    assert scope.cancelled_caught


@pytest.mark.anyio
async def test_an_attached_mcp_validation_runs_from_the_catalog(project: Path) -> None:
    """A validation imported into the catalog and attached to a resource runs with the
    catalog's server (resolved for the attachment, which the graph does not name)."""
    catalog = Catalog.in_memory()
    catalog.add_server(McpServer.from_config(stdio_server(), name="t"))
    catalog.add(tool_from_config({**FILES, "name": "t.files"}))
    catalog.add(
        Validation.from_config(
            {
                **FEW_FILES,
                "name": "t.few",
                "wraps": "t.files",
                "argument_mapping": {"suffix": ".md"},
            }
        )
    )
    attachment = catalog.attach("repo", "t.few")
    plan = load_graph(
        {
            "version": 1,
            "name": "attached",
            "resources": {"repo": {"kind": "directory", "path": str(project)}},
            "tools": [{"name": "noop", "code": "def run():\n    return 1\n"}],
            "nodes": [{"id": "work", "tool": "noop"}],
        },
        catalog=catalog,
    )
    run = await execute_graph(plan, catalog=catalog)
    (record,) = run.validations
    assert record.attachment_id == attachment.id
    assert record.result.passed and record.result.message == "notes.md"


@pytest.mark.anyio
async def test_tools_are_listed_across_pages() -> None:
    """A server that pages its tool list (nextCursor) is read to the end."""
    from gategraph.runtime._calls._mcp import _list_tools
    from mcp import types

    pages = {
        None: types.ListToolsResult(
            tools=[types.Tool(name="a", input_schema={"type": "object"})], next_cursor="2"
        ),
        "2": types.ListToolsResult(tools=[types.Tool(name="b", input_schema={"type": "object"})]),
    }

    class Paging:
        async def list_tools(self, *, params: Any = None) -> Any:
            return pages[params.cursor if params is not None else None]

    assert list(await _list_tools(Paging())) == ["a", "b"]


# -- what goes wrong with a server ----------------------------------------------------------


@pytest.mark.anyio
async def test_a_server_that_crashes_mid_plan_is_retried(tmp_path: Path) -> None:
    """The server dies during a call: the validation is unavailable (an infra fault), the
    Max-N runtime retries it on a new session, and the plan is applied; the log and the
    audit record the fault."""
    crash = {
        "name": "crash",
        "mcp_server": "t",
        "mcp_tool_name": "crash_once",
        "tool_type": "validation",
    }
    marker = tmp_path / "crashed"
    plan = load_graph(
        graph(
            stdio_server(),
            [{"id": "c", "validation": "crash", "arguments": {"marker": str(marker)}}],
            validations=[crash],
        )
    )
    log = MemoryEventLog()
    outcome = await Supervisor(plan, event_log=log, sleep=no_sleep).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert marker.exists()
    completed = [e for e in await log.read(outcome.plan_id) if isinstance(e, ValidationCompleted)]
    assert [e.result.passed for e in completed] == [False, True]
    first = completed[0].result
    assert first.data["error"] == "unavailable" and FAULT_CATALOGUE["unavailable"].retries
    assert "lost the connection to MCP server 't'" in first.message
    assert [a["faultKind"] for a in outcome.attempts][:1] == ["unavailable"]


@pytest.mark.anyio
@pytest.mark.filterwarnings(*TRIO_HTTP_LEAKS[0].args)
@pytest.mark.filterwarnings(*TRIO_HTTP_LEAKS[1].args)
async def test_a_crash_over_http_is_unavailable_and_retried(tmp_path: Path) -> None:
    """Over HTTP nothing restarts the server: each retry finds it gone, every attempt is
    recorded as unavailable, and the plan escalates instead of applying."""
    process, url = start_http_server(tmp_path)
    try:
        crash = {
            "name": "crash",
            "mcp_server": "t",
            "mcp_tool_name": "crash_once",
            "tool_type": "validation",
        }
        plan = load_graph(
            graph(
                {"url": url, "timeout": 10},
                [{"id": "c", "validation": "crash", "arguments": {"marker": str(tmp_path / "m")}}],
                validations=[crash],
                policy={"strategy_revisions": 0},
            )
        )
        outcome = await Supervisor(plan, sleep=no_sleep).run()
    finally:
        stop(process)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    kinds = [a["faultKind"] for a in outcome.attempts]
    assert kinds[0] == "unavailable" and len(kinds) > 1 and set(kinds) == {"unavailable"}
    assert outcome.validations[0].result.data["error"] == "unavailable"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("server", "says"),
    [
        ({"command": "gategraph-no-such-mcp-server"}, "did not start: FileNotFoundError"),
        (
            {"command": sys.executable, "args": ["-c", "import sys; sys.exit('no config here')"]},
            "its stderr ends: no config here",
        ),
        (
            {
                "command": sys.executable,
                "args": ["-c", "import time; time.sleep(600)"],
                "timeout": 1,
            },
            "did not start within 1 s",
        ),
        ({"url": "http://127.0.0.1:9/mcp", "timeout": 10}, "did not start"),
    ],
    ids=["no-command", "exits", "silent", "no-listener"],
)
async def test_a_server_that_never_starts_makes_its_calls_unavailable(
    server: dict[str, Any], says: str
) -> None:
    """A validation over it fails as unavailable (retried by Max-N), a work tool's node
    fails; both say why, and the run goes on."""
    check = {**WORDS, "tool_type": "validation"}
    plan = load_graph(
        graph(
            server,
            [
                {"id": "v", "validation": "words", "arguments": {"text": "a", "forbidden": []}},
                {"id": "w", "tool": "shout", "arguments": {"text": "a"}},
            ],
            validations=[check],
            tools=[{"name": "shout", "mcp_server": "t", "mcp_tool_name": "shout"}],
        )
    )
    log = MemoryEventLog()
    run = await execute_graph(plan, event_log=log)
    result = run.validations[0].result
    assert not result.passed and result.data["error"] == "unavailable"
    assert says in result.message and "MCP server 't'" in result.message
    assert FAULT_CATALOGUE["unavailable"].classification.value == "transient"
    assert run.nodes["w"].status is NodeStatus.FAILED and says in (run.nodes["w"].error or "")
    events = await log.read(run.plan_id)
    assert any(isinstance(e, ValidationCompleted) for e in events)
    assert any(isinstance(e, NodeCompleted) and not e.ok for e in events)


@pytest.mark.anyio
async def test_a_tool_the_server_lacks_is_refused_before_anything_runs(
    declaration: dict[str, Any],
) -> None:
    """ConfigError naming the node, the tool and what the server has; no event logged."""
    plan = load_graph(
        graph(
            declaration,
            [
                {"id": "fine", "tool": "shout", "arguments": {"text": "a"}},
                {"id": "gone", "validation": "gone"},
            ],
            validations=[{"name": "gone", "mcp_server": "t", "mcp_tool_name": "no_such_tool"}],
            tools=[{"name": "shout", "mcp_server": "t", "mcp_tool_name": "shout"}],
        )
    )
    log = MemoryEventLog()
    with pytest.raises(ConfigError) as caught:
        await execute_graph(plan, event_log=log, plan_id="p1")
    (issue,) = caught.value.issues
    assert issue.field == "nodes[1].validation"
    assert "MCP server 't' has no tool 'no_such_tool'" in issue.message
    assert "shout" in issue.message  # what it does have
    assert await log.read("p1") == []


@pytest.mark.anyio
async def test_arguments_that_break_the_input_schema_are_refused(
    declaration: dict[str, Any], project: Path
) -> None:
    """Checked against the listed inputSchema before anything runs, at the node's arguments;
    a resource slot the run passes itself is not asked for."""
    plan = load_graph(
        graph(
            declaration,
            [
                {"id": "a", "validation": "words", "arguments": {"text": "a", "forbidden": "x"}},
                {"id": "b", "validation": "words", "arguments": {"forbidden": []}},
                {"id": "c", "validation": "few-files", "arguments": {"suffix": 3}},
                {"id": "d", "validation": "few-files", "arguments": {"suffix": ".md"}},
            ],
            validations=[WORDS, FEW_FILES],
            tools=[FILES],
            project=project,
        )
    )
    with pytest.raises(ConfigError) as caught:
        await execute_graph(plan)
    fields = [(i.field, i.message) for i in caught.value.issues]
    assert [f for f, _ in fields] == [
        "nodes[0].arguments",
        "nodes[1].arguments",
        "nodes[2].arguments",
    ]
    assert "'x' is not of type 'array'" in fields[0][1] and "(at forbidden)" in fields[0][1]
    assert "'text' is a required property" in fields[1][1]
    assert "3 is not of type 'string'" in fields[2][1]
    assert all("input schema of MCP tool" in m for _, m in fields)


@pytest.mark.anyio
async def test_a_validation_over_a_tool_not_declared_read_only(declaration: dict[str, Any]) -> None:
    """Refused before anything runs, unless trusted; a trusted one runs, and its results
    record the trust, in the log too."""
    unmarked = {"name": "unmarked", "mcp_server": "t", "mcp_tool_name": "unmarked_check"}
    refused = load_graph(
        graph(
            declaration,
            [{"id": "u", "validation": "unmarked", "arguments": {"text": "a"}}],
            validations=[unmarked],
        )
    )
    with pytest.raises(ConfigError) as caught:
        await execute_graph(refused)
    assert caught.value.field == "nodes[0].validation"
    assert "not declared read-only by its server" in str(caught.value)
    assert "trust_read_only: true" in str(caught.value)

    trusted = load_graph(
        graph(
            declaration,
            [{"id": "u", "validation": "unmarked", "arguments": {"text": "a"}}],
            validations=[{**unmarked, "trust_read_only": True}],
        )
    )
    log = MemoryEventLog()
    run = await execute_graph(trusted, event_log=log)
    result = run.validations[0].result
    assert result.passed and result.data["mcp"]["read_only"] == "trusted"
    (completed,) = [e for e in await log.read(run.plan_id) if isinstance(e, ValidationCompleted)]
    assert completed.result.data["mcp"]["read_only"] == "trusted"


@pytest.mark.anyio
async def test_a_plan_over_mcp_validations_applies_or_is_rejected_with_findings(
    declaration: dict[str, Any], project: Path
) -> None:
    """run_plan: clean work is applied; a finding rejects it, with the finding in the
    verdict, and nothing is applied."""
    write = {
        "name": "write",
        "code": "def run(repo, text):\n    (repo / 'out.txt').write_text(text)\n    return text\n",
        "resource_slots": ["repo"],
        "writes": True,
    }
    words_over_file = {
        "name": "out-is-clean",
        "wraps": "files",
        "argument_mapping": {"suffix": ".txt"},
        "transform": "{'passed': output['count'] == 1, 'message': str(output['names'])}",
    }

    def plan_with(text: str) -> Any:
        return load_graph(
            graph(
                declaration,
                [
                    {"id": "work", "tool": "write", "arguments": {"text": text}},
                    {
                        "id": "words",
                        "validation": "words",
                        "arguments": {"text": text, "forbidden": ["TODO"]},
                        "needs": "work",
                    },
                    {"id": "one-file", "validation": "out-is-clean", "needs": "work"},
                ],
                validations=[WORDS, words_over_file],
                tools=[FILES, write],
                project=project,
                policy={"retry_limit": 0, "strategy_revisions": 0},
            )
        )

    applied = await run_plan(plan_with("all done"))
    assert applied.status is PlanStatus.APPLIED, applied.message
    assert (project / "out.txt").read_text() == "all done"
    (project / "out.txt").unlink()

    async def abort(request: Any) -> EscalationDecision:
        return EscalationDecision(action="abort", note="has a TODO")

    rejected = await run_plan(plan_with("TODO later"), escalation=abort)
    assert rejected.status is PlanStatus.FAILED
    assert not (project / "out.txt").exists()
    assert rejected.verdict is not None and rejected.verdict["verdict"] == "reject"
    failing = [f for f in rejected.verdict["findings"] if f["status"] != "pass"]
    assert len(failing) == 1 and "found TODO" in json.dumps(failing[0])


@pytest.mark.anyio
async def test_a_whole_plan_can_hold_one_session_per_server(tmp_path: Path) -> None:
    """open_plan_mcp_sessions checks the plan's MCP tools before it starts (a missing tool:
    nothing logged), holds one session per server for the plan's runs, and opens a lost
    one again for the retry."""
    crash = {**WORDS, "name": "crash", "mcp_tool_name": "crash_once", "tool_type": "validation"}
    missing = load_graph(
        graph(
            stdio_server(),
            [{"id": "m", "validation": "gone"}],
            validations=[{**WORDS, "name": "gone", "mcp_tool_name": "nope"}],
        )
    )
    with pytest.raises(ConfigError, match=r"nodes\[0\]\.validation: MCP server 't' has no tool"):
        async with open_plan_mcp_sessions(missing):
            raise AssertionError("the body runs only once the tools are checked")

    plan = load_graph(
        graph(
            stdio_server(),
            [{"id": "c", "validation": "crash", "arguments": {"marker": str(tmp_path / "m")}}],
            validations=[crash],
        )
    )
    log = MemoryEventLog()
    async with open_plan_mcp_sessions(plan) as sessions:
        assert sessions is McpSessions.current() is not None
        outcome = await Supervisor(plan, event_log=log, sleep=no_sleep).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert [a["retryDecision"] for a in outcome.attempts] == ["retry-validator", "attested"]
    plain = {"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}
    without = load_graph(
        graph(stdio_server(), [{"id": "n", "validation": "ok"}], validations=[plain])
    )
    async with open_plan_mcp_sessions(without) as none:
        assert none is None and McpSessions.current() is None  # nothing to open


# -- declaring servers ---------------------------------------------------------------------------


def test_server_declarations_are_checked_with_positions(tmp_path: Path) -> None:
    """Every problem of the `mcp_servers:` section is one line with file, line, column and
    field; a tool naming an undeclared server is reported where it names it."""
    path = tmp_path / "plan.yaml"
    path.write_text(
        """\
version: 1
name: p
mcp_servers:
  both: {command: x, url: "http://h/mcp"}
  neither: {args: [a]}
  badurl: {url: "ftp://h/x"}
  typo: {comand: x}
  mixed: {url: "http://h/mcp", env: {A: b}}
  "2bad": {command: x}
  good: {command: x, env: {"not ok": b}}
tools:
  - {name: t1, mcp_server: good, mcp_tool_name: a}
  - {name: t2, mcp_server: godo, mcp_tool_name: a}
  - {name: t3, mcp_server: both, mcp_tool_name: a}
nodes:
  - {id: n1, tool: t1}
  - {id: n2, tool: t2}
  - {id: n3, tool: t3}
"""
    )
    with pytest.raises(ConfigError) as caught:
        load_graph(path)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{path}:") for line in lines)
    text = "\n".join(lines)
    assert (
        ":4:" in lines[0]
        and "mcp_servers.both: give either `command` or `url`, not both" in lines[0]
    )
    assert "mcp_servers.neither: say how to reach the server" in text
    assert "mcp_servers.badurl.url: 'ftp://h/x' is not an HTTP URL" in text
    assert "mcp_servers.typo.comand: unknown field (did you mean 'command'?)" in text
    assert "mcp_servers.mixed: `env` is only for a server run by `command`" in text
    assert "mcp_servers.2bad: '2bad' is not a valid server name" in text
    assert "mcp_servers.good.env: 'not ok' is not an environment variable name" in text
    assert "tools[1].mcp_server: unknown MCP server 'godo'" in text and "'good'?" in text
    # A broken declaration is reported once, where it is: not again at the tools naming it.
    assert "tools[2]" not in text and "tools[0]" not in text


def test_relative_cwd_is_relative_to_the_graph_file(tmp_path: Path) -> None:
    (tmp_path / "srv").mkdir()
    path = tmp_path / "plan.yaml"
    path.write_text(
        "version: 1\nname: p\nmcp_servers:\n  s: {command: run-it, cwd: srv}\n"
        "tools: [{name: t, mcp_server: s, mcp_tool_name: a}]\nnodes: [{id: n, tool: t}]\n"
    )
    plan = load_graph(path)
    assert plan.get_mcp_server("s").cwd == str(tmp_path / "srv")
    assert plan.get_mcp_server("s").transport == "stdio"


def test_the_catalog_holds_servers() -> None:
    """add, get, list, replace, and remove; a server its tools use cannot be removed; an
    MCP tool naming a server the catalog lacks is refused; the schema is migrated."""
    catalog = Catalog.in_memory()
    assert catalog.schema_version == SCHEMA_VERSION >= 2
    server = McpServer.from_config(stdio_server(), name="t")
    catalog.add_server(server)
    assert catalog.get_server("t") == server
    with pytest.raises(DuplicateError):
        catalog.add_server(server)
    other = McpServer(name="t", url="http://127.0.0.1:1/mcp")
    assert catalog.add_server(other, update=True) == catalog.get_server("t") == other
    catalog.add_server(McpServer(name="a", command="x"))
    assert [s.name for s in catalog.list_servers()] == ["a", "t"]
    catalog.add(tool_from_config({"name": "t.shout", "mcp_server": "t", "mcp_tool_name": "shout"}))
    with pytest.raises(ConfigError, match=r"mcp_server: no MCP server named 'nope' in the catalog"):
        catalog.add(tool_from_config({"name": "x", "mcp_server": "nope", "mcp_tool_name": "y"}))
    assert "x" not in catalog
    with pytest.raises(IntegrityError, match=r"'t' is used by t.shout; remove those first"):
        catalog.remove_server("t")
    catalog.remove("t.shout")
    assert catalog.remove_server("t") == other
    with pytest.raises(NotFoundError):
        catalog.get_server("t")


def test_an_old_catalog_gains_the_servers_table(tmp_path: Path) -> None:
    import sqlite3

    from gategraph.runtime._definitions import _catalog

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # as the first schema left it
        db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for statement in _catalog._MIGRATIONS[0].split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute("INSERT INTO schema_version (version) VALUES (1)")
    with Catalog.open(path) as catalog:
        assert catalog.schema_version == SCHEMA_VERSION
        catalog.add_server(McpServer(name="s", command="x"))
        assert catalog.list_servers()[0].name == "s"


@pytest.mark.anyio
async def test_a_graph_cannot_replace_a_catalog_server(tmp_path: Path) -> None:
    """A catalog tool finds its server in the catalog. A graph declaring another server
    under the catalog's name is refused where it declares it (at load, and by a run given
    a catalog the graph was not loaded with); the same declaration is accepted."""
    catalog = Catalog.in_memory()
    catalog.add_server(McpServer(name="t", command="gategraph-no-such-mcp-server"))
    catalog.add(tool_from_config({"name": "shout", "mcp_server": "t", "mcp_tool_name": "shout"}))
    nodes = [{"id": "s", "tool": "shout", "arguments": {"text": "a"}}]
    from_catalog = load_graph({"version": 1, "name": "p", "nodes": nodes}, catalog=catalog)
    run = await execute_graph(from_catalog, catalog=catalog)
    assert "did not start" in (run.nodes["s"].error or "")
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps(graph(stdio_server(), nodes)))
    with pytest.raises(ConfigError) as caught:
        load_graph(path, catalog=catalog)
    (issue,) = caught.value.issues
    assert issue.field == "mcp_servers.t"
    assert issue.message.startswith("differs from the catalog's MCP server 't' (")
    assert "another name (e.g. 't-graph')" in issue.message
    assert str(caught.value).startswith(f"{path}:") and "\n" not in str(caught.value)
    loaded_alone = load_graph(
        graph(
            stdio_server(),
            nodes,
            tools=[{"name": "shout", "mcp_server": "t", "mcp_tool_name": "shout"}],
        )
    )
    with pytest.raises(ConfigError, match=r"mcp_servers\.t of the graph differs from the catalog"):
        await execute_graph(loaded_alone, catalog=catalog)
    same = load_graph(
        graph({"command": "gategraph-no-such-mcp-server", "description": "x"}, nodes),
        catalog=catalog,
    )
    run = await execute_graph(same, catalog=catalog)
    assert "did not start" in (run.nodes["s"].error or "")


def test_a_catalog_tool_with_no_server_is_reported_at_its_node() -> None:
    catalog = Catalog.in_memory()
    catalog.add_server(McpServer(name="t", command="x"))
    catalog.add(tool_from_config({"name": "shout", "mcp_server": "t", "mcp_tool_name": "shout"}))
    nodes = [{"id": "s", "tool": "shout"}]
    assert load_graph({"version": 1, "name": "p", "nodes": nodes}, catalog=catalog)
    with pytest.raises(ConfigError, match=r"nodes\[0\]\.tool: unknown tool 'shout'"):
        load_graph({"version": 1, "name": "p", "nodes": nodes})


def test_trust_read_only_is_only_for_mcp_validations() -> None:
    with pytest.raises(ConfigError, match="only for a validation over an MCP tool"):
        Validation.from_config({"name": "v", "code": "def run(): pass", "trust_read_only": True})
    wrapping = Validation.from_config(
        {"name": "w", "wraps": "s.t", "transform": "output", "trust_read_only": True}
    )
    assert wrapping.trust_read_only
    trusted = Validation.from_config(
        {"name": "v", "mcp_server": "s", "mcp_tool_name": "t", "trust_read_only": True}
    )
    assert list(trusted.as_cli_dict())[:8] == [
        "name",
        "tool_type",
        "mode",
        "source",
        "mcp_server",
        "mcp_tool_name",
        "trust_read_only",
        "capability",
    ]


def test_importing_the_runtime_does_not_import_the_sdk(tmp_path: Path) -> None:
    """Loading and checking a graph with MCP servers needs no SDK: only calling does."""
    path = tmp_path / "plan.yaml"
    path.write_text(
        "version: 1\nname: p\nmcp_servers:\n  s: {command: x}\n"
        "tools: [{name: t, mcp_server: s, mcp_tool_name: a}]\nnodes: [{id: n, tool: t}]\n"
    )
    code = (
        "import sys\n"
        "from gategraph.runtime import load_graph, Catalog\n"
        f"load_graph({str(path)!r})\n"
        "Catalog.in_memory().list_servers()\n"
        "assert 'mcp' not in sys.modules, 'mcp was imported'\n"
    )
    done = run_process([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr


# -- the command line ------------------------------------------------------------------------------


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user does, in a subprocess (the catalog under $GATEGRAPH_HOME)."""
    return run_process([*GATEGRAPH, *args], cwd=cwd, timeout=180)


def test_cli_registers_a_server_lists_and_imports_its_tools_and_runs_a_plan(
    tmp_path: Path, project: Path
) -> None:
    """mcp add, mcp tools, mcp import, then check and run plans over the imported tools: one
    applied, one rejected with its finding."""
    done = run_cli("mcp", "add", "t", "--", sys.executable, str(SERVER), "stdio", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("added MCP server t (stdio: ")
    listed = run_cli("mcp", "list", "--json", cwd=tmp_path)
    assert json.loads(listed.stdout)[0]["args"] == [str(SERVER), "stdio"]

    tools = run_cli("mcp", "tools", "t", "--json", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    by_name = {tool["name"]: tool for tool in json.loads(tools.stdout)}
    assert by_name["count_files"]["annotations"] == {"readOnlyHint": True}
    assert by_name["unmarked_check"]["annotations"] == {}
    assert by_name["no_forbidden_words"]["inputSchema"]["required"] == ["text", "forbidden"]
    text = run_cli("mcp", "tools", "t", cwd=tmp_path).stdout
    assert "unmarked_check  (not declared read-only)" in text
    assert "    forbidden: array of string, required" in text

    imported = run_cli(
        "mcp", "import", "t", "--tool", "count_files", "--as-validation",
        "no_forbidden_words", "--slot", "root", cwd=tmp_path,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert "validation t.no_forbidden_words ← no_forbidden_words" in imported.stdout
    refused = run_cli("mcp", "import", "t", "--as-validation", "unmarked_check", cwd=tmp_path)
    assert refused.returncode == 1 and "not declared read-only" in refused.stderr
    trusted = run_cli(
        "mcp", "import", "t", "--as-validation", "unmarked_check", "--trust-read-only",
        cwd=tmp_path,
    )  # fmt: skip
    assert trusted.returncode == 0 and "(trusted read-only)" in trusted.stdout
    shown = run_cli("tool", "show", "t.count_files", "--json", cwd=tmp_path)
    entry = json.loads(shown.stdout)
    assert entry["resource_slots"] == [{"name": "root"}] and entry["source"] == "mcp"
    assert entry["capability"]["read_only"] is True
    throwaway = run_cli(
        "mcp", "import", "t", "--prefix", "copy", "--tool", "count_files", "--tool", "shout",
        "--disposable-slot", "count_files:root", cwd=tmp_path,
    )  # fmt: skip
    assert throwaway.returncode == 0, throwaway.stderr
    shown = json.loads(run_cli("tool", "show", "copy.count_files", "--json", cwd=tmp_path).stdout)
    assert shown["resource_slots"] == [{"name": "root", "disposable": True}]
    shout = json.loads(run_cli("tool", "show", "copy.shout", "--json", cwd=tmp_path).stdout)
    assert shout.get("resource_slots", []) == []

    def plan(text: str, nodes: str) -> Path:
        path = tmp_path / f"plan-{len(list(tmp_path.glob('plan-*')))}.yaml"
        path.write_text(
            f"version: 1\nname: cli-plan\nresources:\n  repo: {{kind: directory, path: {project}}}\n"
            "policy: {retry_limit: 0, strategy_revisions: 0}\n"
            "validations:\n"
            "  - name: two-py\n    wraps: t.count_files\n    argument_mapping: {suffix: .py}\n"
            "    transform: \"{'passed': output['count'] == 2, 'message': str(output['count'])}\"\n"
            f"nodes:\n  - {{id: words, validation: t.no_forbidden_words, arguments: {{text: {text!r}, forbidden: [TODO]}}}}\n"
            f"{nodes}"
        )
        return path

    checked = run_cli("check", str(plan("fine", "")), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    broken = plan("fine", "  - {id: bad, validation: t.no_forbidden_words, arguments: {text: 3}}\n")
    checked = run_cli("check", str(broken), cwd=tmp_path)
    assert checked.returncode == 2 and "Traceback" not in checked.stderr
    assert "nodes[1].arguments.text: 3 is not of type 'string'" in checked.stderr
    assert "nodes[1].arguments.forbidden: missing argument" in checked.stderr

    applied = run_cli(
        "run", str(plan("all clean", "  - {id: py, validation: two-py}\n")), cwd=tmp_path
    )
    assert applied.returncode == 0, applied.stdout + applied.stderr
    rejected = run_cli(
        "run",
        "--json",
        str(plan("a TODO left", "  - {id: py, validation: two-py}\n")),
        cwd=tmp_path,
    )
    assert rejected.returncode == 3, rejected.stderr
    outcome = json.loads(rejected.stdout)
    assert outcome["status"] == "awaiting_decision"
    failing = [f for f in outcome["verdict"]["findings"] if f["status"] != "pass"]
    assert len(failing) == 1 and "found TODO" in json.dumps(failing)


def test_cli_over_http_and_bad_input(tmp_path: Path, http_url: str) -> None:
    """A --url server lists its tools; bad input is one line, exit 2, and writes nothing."""
    added = run_cli("mcp", "add", "h", "--url", http_url, "--header", "X-Test=1", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    tools = run_cli("mcp", "tools", "h", "--json", cwd=tmp_path)
    assert tools.returncode == 0, tools.stderr
    assert "shout" in {tool["name"] for tool in json.loads(tools.stdout)}
    bad = [
        (["add", "x", "--url", "ftp://h/x"], "--url: 'ftp://h/x' is not an HTTP URL"),
        (
            ["add", "x", "--command", "c", "--url", http_url],
            "give either --command or --url, not both",
        ),
        (
            ["add", "x", "--url", http_url, "--arg", "a"],
            "--arg is only for a server run by --command",
        ),
        (["add", "x", "--command", "c", "--env", "A"], "--env 'A': expected KEY=VALUE"),
        (["add", "x", "--command", "c", "--cwd", str(tmp_path / "no")], "--cwd: no such directory"),
        (["add", "x y", "--command", "c"], "NAME: 'x y' is not a valid name"),
        (["add", "x"], "say how to reach the server"),
        (["tools", "nope"], "no MCP server named 'nope' in the catalog (it has: h)"),
        (["import", "h", "--tool", "nope"], "--tool 'nope': MCP server 'h' has no such tool"),
        (["import", "h", "--slot", "nothing"], "--slot nothing: none of the imported tools"),
        (
            ["import", "h", "--tool", "shout", "--slot", "count_files:root"],
            "--slot count_files:root: 'count_files' is not among the tools imported",
        ),
        (
            ["import", "h", "--disposable-slot", "shout:root"],
            "--disposable-slot shout:root: the tool 'shout' takes no argument 'root'",
        ),
    ]
    for args, message in bad:
        done = run_cli("mcp", *args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, (args, done.stderr)
    servers = json.loads(run_cli("mcp", "list", "--json", cwd=tmp_path).stdout)
    assert [s["name"] for s in servers] == ["h"] and servers[0]["tools"] == []
    listed = json.loads(run_cli("tool", "list", "--json", cwd=tmp_path).stdout)
    assert [t for t in listed if t["origin"] != "builtin"] == []
    removed = run_cli("mcp", "remove", "h", cwd=tmp_path)
    assert removed.returncode == 0 and run_cli("mcp", "list", cwd=tmp_path).stdout.startswith(
        "no MCP servers"
    )


def test_cli_a_server_that_will_not_start(tmp_path: Path) -> None:
    run_cli("mcp", "add", "dead", "--command", "gategraph-no-such-mcp-server", cwd=tmp_path)
    done = run_cli("mcp", "tools", "dead", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "error: MCP server 'dead' did not start: FileNotFoundError" in done.stderr
