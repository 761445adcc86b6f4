"""MCP where it goes wrong: servers that answer oddly, CLI commands over odd servers, and
the corners of `gategraph mcp serve`.

The odd server is written here (the SDK's low-level server, so it can say what a server
made with the high-level one never would): replies without content, JSON-RPC errors, a
result that brings its own `data.mcp`, a tool list that never ends, a line on its stdout
that is not JSON, a byte that is not UTF-8. Plans run against it through execute_graph and
the CLI; the served side is called with the SDK's own client session.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio
from _helpers import fake_module, run_process
from _mcp_session import session_with
from click.testing import CliRunner, Result
from gategraph.runtime import (
    Catalog,
    McpServer,
    MemoryEventLog,
    NodeStatus,
    Validation,
    execute_graph,
    load_graph,
)
from gategraph.runtime._cli import cli
from gategraph.runtime._serve._mcp_serve import create_mcp_server

pytestmark = pytest.mark.timeout(90)

TEST_SERVER = Path(__file__).parents[1] / "mcp_test_server.py"
GATEGRAPH = [sys.executable, "-m", "gategraph.runtime"]

ODD_SERVER = '''\
"""An MCP server that answers oddly, as its arguments ask."""

import json
import os
import sys

import anyio
import mcp.types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

MODES = set(sys.argv[1:])
# The SDK points descriptor 1 at stderr while it serves: this copy is the wire itself.
WIRE = os.dup(1)
ANY = {"type": "object"}
TOOLS = [
    {"name": "echo", "description": "The arguments, as JSON text.", "inputSchema": ANY},
    {"name": "files", "inputSchema": {"type": "object", "properties": {"files": ANY}}},
    {"name": "artifact", "inputSchema": {"type": "object", "properties": {"artifact": {}}}},
    {"name": "nothing", "inputSchema": ANY},
    {"name": "refuse", "inputSchema": ANY},
    {"name": "odd-schema", "inputSchema": {"type": "object", "properties": {"n": {"type": "nonsense"}}}},
    {"name": "breaks-output", "inputSchema": ANY, "outputSchema": {"type": "object", "required": ["passed"]}},
    {"name": "own-record", "inputSchema": ANY, "outputSchema": ANY, "annotations": {}},
    {"name": "banner", "inputSchema": ANY},
    {"name": "garble", "inputSchema": ANY},
    {"name": "garble-exit", "inputSchema": ANY},
]
if "long-name" in MODES:
    TOOLS.append({"name": "n" * 127, "inputSchema": ANY})


async def list_tools(ctx, params):
    tools = [] if "no-tools" in MODES else [{"annotations": {"readOnlyHint": True}, **t} for t in TOOLS]
    page = {"tools": tools}
    if "loop-pages" in MODES:
        page["nextCursor"] = "again"  # the same page, for ever
    return types.ListToolsResult.model_validate(page)


def text(value):
    return types.CallToolResult.model_validate({"content": [{"type": "text", "text": json.dumps(value)}]})


async def call_tool(ctx, params):
    name, arguments = params.name, params.arguments or {}
    if name in ("echo", "files", "artifact", "odd-schema", "n" * 127):
        return text(arguments)
    if name == "nothing":
        return types.CallToolResult.model_validate({"content": []})
    if name == "refuse":
        raise MCPError(code=-32602, message="the server refuses these arguments")
    if name == "breaks-output":
        return text({"passed": True})  # no structuredContent, though it has an outputSchema
    if name == "own-record":
        result = {"passed": True, "message": "mine", "data": {"mcp": {"read_only": "declared"}}}
        return types.CallToolResult.model_validate(
            {"content": [{"type": "text", "text": json.dumps(result)}], "structuredContent": result}
        )
    if name == "banner":
        os.write(WIRE, b"Server ready! (not JSON)\\n")
        return text({"passed": True, "message": "after a banner"})
    if name == "garble":
        os.write(WIRE, b"\\xff\\xfe not UTF-8\\n")
        return text({"passed": True, "message": "after the garbage"})
    if name == "garble-exit":
        os.write(WIRE, b"\\xff\\xfe not UTF-8\\n")
        await anyio.sleep(0.2)
        os._exit(3)
    raise MCPError(code=-32601, message=f"no tool {name}")


server = Server("odd", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
'''


@pytest.fixture(scope="module")
def odd_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("odd-server") / "odd_server.py"
    path.write_text(ODD_SERVER)
    return path


def odd(script: Path, *modes: str, **extra: Any) -> dict[str, Any]:
    """The odd server's declaration, run over stdio with ``modes``."""
    return {"command": sys.executable, "args": [str(script), *modes], **extra}


def plan_over(
    server: dict[str, Any],
    nodes: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] = (),  # type: ignore[assignment]
    validations: list[dict[str, Any]] = (),  # type: ignore[assignment]
    **extra: Any,
) -> Any:
    return load_graph(
        {
            "version": 1,
            "name": "odd-plan",
            "mcp_servers": {"t": server},
            "tools": list(tools),
            "validations": list(validations),
            "nodes": nodes,
            **extra,
        }
    )


def on_t(name: str, **extra: Any) -> dict[str, Any]:
    """A catalog entry calling tool ``name`` of server ``t``, named after it."""
    return {"name": name, "mcp_server": "t", "mcp_tool_name": name, **extra}


MAKE = """\
def run(kind):
    import datetime, pathlib, types
    if kind == "odd":
        return {
            "path": pathlib.Path("/srv/x"),
            "proxy": types.MappingProxyType({"a": 1}),
            "when": datetime.date(2024, 5, 1),
            "set": {3},
        }
    return object()
"""


# -- replies that are not what a plan expects ---------------------------------------------------


@pytest.mark.anyio
async def test_odd_replies_and_arguments(odd_script: Path) -> None:
    """What each odd reply becomes, and what a call is sent: no content is no output (and
    no result: malformed); a JSON-RPC error and structured content missing despite an
    outputSchema are failed calls, not an unavailable server; arguments a schema gategraph
    cannot read are left to the server; a memory resource goes as its files, an artifact
    that is not JSON as the nearest JSON (or its repr)."""
    plan = plan_over(
        odd(odd_script),
        [
            {"id": "empty", "tool": "nothing"},
            {"id": "empty-check", "validation": "nothing-check"},
            {"id": "refused", "tool": "refuse", "arguments": {"a": 1}},
            {"id": "refused-check", "validation": "refuse-check"},
            {"id": "broken", "tool": "breaks-output"},
            {"id": "odd-schema", "tool": "odd-schema", "arguments": {"n": "x"}},
            {"id": "files", "tool": "files"},
            # In this process (declared): what they return is no plain data, which a
            # sandboxed tool's answer could not carry.
            {"id": "make-odd", "tool": "make", "arguments": {"kind": "odd"}, "isolation": "thread"},
            {
                "id": "make-object",
                "tool": "make",
                "arguments": {"kind": "object"},
                "isolation": "thread",
            },
            {"id": "odd-artifact", "tool": "artifact", "needs": "make-odd"},
            {"id": "object-artifact", "tool": "artifact", "needs": "make-object"},
        ],
        tools=[
            on_t("nothing"),
            on_t("refuse"),
            on_t("breaks-output"),
            on_t("odd-schema"),
            on_t("files", resource_slots=["files"]),
            on_t("artifact"),
            {"name": "make", "code": MAKE},
        ],
        validations=[
            {**on_t("nothing"), "name": "nothing-check"},
            {**on_t("refuse"), "name": "refuse-check"},
        ],
        resources={"notes": {"kind": "memory", "files": {"a.txt": "hi"}}},
        policy={"max_concurrency": 4},
    )
    run = await execute_graph(plan, event_log=MemoryEventLog())
    nodes = run.nodes
    results = {record.node: record.result for record in run.validations}

    assert nodes["empty"].status is NodeStatus.OK and nodes["empty"].output is None
    empty = results["empty-check"]
    assert not empty.passed and empty.data["error"] == "malformed"

    assert nodes["refused"].status is NodeStatus.FAILED
    assert nodes["refused"].error == (
        "MCP tool 'refuse' of server 't' failed: the server refuses these arguments"
    )
    refused = results["refused-check"]
    # The server answered: its error is the tool's failure, not an unreachable server.
    assert not refused.passed and refused.data["error"] == "exception"
    record = refused.data["mcp"]
    assert (record["server"], record["tool"], record["read_only"]) == ("t", "refuse", "declared")

    assert nodes["broken"].status is NodeStatus.FAILED
    assert "MCP tool 'breaks-output' of server 't'" in (nodes["broken"].error or "")
    assert "did not return structured content" in (nodes["broken"].error or "")

    assert nodes["odd-schema"].output == {"n": "x"}
    assert nodes["files"].output == {"files": {"a.txt": "hi"}}
    assert nodes["odd-artifact"].output == {
        "artifact": {"path": "/srv/x", "proxy": {"a": 1}, "when": "2024-05-01", "set": [3]}
    }
    sent = nodes["object-artifact"].output["artifact"]
    assert isinstance(sent, str) and sent.startswith("<object object at ")


@pytest.mark.anyio
async def test_a_result_cannot_write_its_own_record(odd_script: Path) -> None:
    """The record of an MCP validation's call (server, tool, and whether its read-only
    claim was declared or trusted) is gategraph's: a result that brings a `data.mcp` of its
    own (here claiming `declared` for a tool its server did not declare read-only) does
    not replace it."""
    plan = plan_over(
        odd(odd_script),
        [{"id": "own", "validation": "own-record"}],
        validations=[on_t("own-record", trust_read_only=True)],
    )
    run = await execute_graph(plan)
    result = run.validations[0].result
    assert result.passed and result.message == "mine"
    assert result.data["mcp"]["read_only"] == "trusted"
    assert result.data["mcp"]["server"] == "t" and result.data["mcp"]["tool"] == "own-record"


@pytest.mark.anyio
async def test_a_tool_list_that_never_ends(odd_script: Path) -> None:
    """A server whose every page of tools names a next one is read up to a bound, not for
    ever: the run starts and its tools are called."""
    plan = plan_over(
        odd(odd_script, "loop-pages"),
        [{"id": "e", "tool": "echo", "arguments": {"a": 1}}],
        tools=[on_t("echo")],
    )
    with anyio.fail_after(60):
        run = await execute_graph(plan)
    assert run.nodes["e"].output == {"a": 1}


# -- a server that writes what is not a message ---------------------------------------------------


@pytest.mark.anyio
async def test_garbage_then_a_crash_is_unavailable(odd_script: Path) -> None:
    """A server that writes a byte that is not UTF-8 and dies: the call is unavailable (an
    infrastructure fault, retried by Max-N), and so is the next call of the run, each saying
    that the connection to the server was lost."""
    plan = plan_over(
        odd(odd_script),
        [
            {"id": "g", "validation": "garble-exit", "timeout": 30},
            {"id": "after", "tool": "echo", "needs": "g", "arguments": {"x": 1}, "timeout": 30},
        ],
        tools=[on_t("echo")],
        validations=[on_t("garble-exit")],
    )
    run = await execute_graph(plan)
    result = run.validations[0].result
    assert not result.passed and result.data["error"] == "unavailable"
    assert "lost the connection to MCP server 't'" in result.message
    assert run.nodes["after"].status is NodeStatus.FAILED
    assert "MCP server 't'" in (run.nodes["after"].error or "")


@pytest.mark.anyio
async def test_a_byte_that_is_not_utf8_does_not_stall_the_session(odd_script: Path) -> None:
    """A stray byte a server writes before its reply is noise on the wire: the reply that
    follows still arrives (here the node would otherwise hang until its timeout)."""
    plan = plan_over(
        odd(odd_script),
        [{"id": "g", "validation": "garble", "timeout": 10}],
        validations=[on_t("garble")],
    )
    run = await execute_graph(plan)
    result = run.validations[0].result
    assert result.passed, result.message
    assert result.message == "after the garbage"


def test_cli_a_server_banner_is_no_traceback(tmp_path: Path, odd_script: Path) -> None:
    """A stdio server that prints a line that is not JSON (a banner) on its stdout: the
    plan still runs to `applied`, and what the user sees has no traceback."""
    path = tmp_path / "plan.yaml"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "name": "banner",
                "mcp_servers": {"odd": odd(odd_script)},
                "validations": [
                    {"name": "after-banner", "mcp_server": "odd", "mcp_tool_name": "banner"}
                ],
                "nodes": [{"id": "b", "validation": "after-banner"}],
            }
        )
    )
    done = run_process([*GATEGRAPH, "run", str(path)], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied" in done.stdout
    assert "Traceback" not in done.stderr, done.stderr


# -- the command line over odd servers --------------------------------------------------------------


def invoke(catalog: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--catalog", str(catalog), "mcp", *args], prog_name="gategraph")


def test_cli_a_server_without_tools(tmp_path: Path, odd_script: Path) -> None:
    """`mcp tools` of a server that lists no tools says so, exit code 0."""
    db = tmp_path / "c.db"
    added = invoke(db, "add", "odd", "--", sys.executable, str(odd_script), "no-tools")
    assert added.exit_code == 0, added.output
    listed = invoke(db, "tools", "odd")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout == "MCP server odd has no tools\n"


def test_cli_tools_of_bare_tools_and_an_import_refused(tmp_path: Path, odd_script: Path) -> None:
    """`mcp tools` shows a tool with no description and no arguments as its name and
    annotations only; `mcp import` leaves a schema gategraph cannot read to the server, and
    refuses, in one line and importing nothing, a tool whose catalog name would be too long."""
    db = tmp_path / "c.db"
    added = invoke(db, "add", "odd", "--", sys.executable, str(odd_script), "long-name")
    assert added.exit_code == 0, added.output
    listed = invoke(db, "tools", "odd")
    assert listed.exit_code == 0, listed.output
    blocks = {block.split("  (")[0]: block for block in listed.stdout.split("\n\n")}
    assert blocks["nothing"] == "nothing  (read-only)\n  annotations: readOnlyHint=true"
    assert blocks["echo"].splitlines()[1] == "  The arguments, as JSON text."
    assert "  arguments:\n    n: nonsense" in blocks["odd-schema"]

    imported = invoke(db, "import", "odd", "--tool", "odd-schema", "--tool", "echo")
    assert imported.exit_code == 0, imported.output
    with Catalog.open(db) as catalog:
        assert catalog.get("odd.odd-schema").input_schema in (None, {})
        assert catalog.get("odd.echo").input_schema == {"type": "object"}

    refused = invoke(db, "import", "odd", "--update")
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.output
    assert refused.stderr.startswith(f"error: cannot import {'n' * 127!r}: name: ")
    with Catalog.open(db) as catalog:
        assert not catalog.registered("odd.nothing")  # all of them or none


# -- serving -----------------------------------------------------------------------------------------


def reply_text(result: Any) -> str:
    return str(result.content[0].text)


@pytest.mark.anyio
async def test_serving_validations_over_an_mcp_server() -> None:
    """A catalog validation that is a tool of a catalog MCP server is served too: its
    arguments are the server's (an open schema when none was recorded), a call goes through
    to the server and comes back as the structured result; a validation over a tool the
    server lacks is a one-line error."""
    with Catalog.in_memory() as catalog:
        catalog.add_server(
            McpServer(name="t", command=sys.executable, args=(str(TEST_SERVER), "stdio"))
        )
        catalog.add(
            Validation.from_config(
                {"name": "t.words", "mcp_server": "t", "mcp_tool_name": "no_forbidden_words"}
            )
        )
        catalog.add(
            Validation.from_config({"name": "t.gone", "mcp_server": "t", "mcp_tool_name": "nope"})
        )
        async with session_with(create_mcp_server(catalog, builtins=False)) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert tools["t.words"].input_schema["properties"] == {}
            result = await session.call_tool("t.words", {"text": "a x b", "forbidden": ["x"]})
            assert not result.is_error, reply_text(result)
            assert result.structured_content is not None
            assert result.structured_content["passed"] is False
            assert result.structured_content["message"] == "found x"
            assert result.structured_content["data"]["mcp"]["server"] == "t"
            gone = await session.call_tool("t.gone", {})
    assert gone.is_error
    text = reply_text(gone)
    assert "MCP server 't' has no tool 'nope'" in text and "\n" not in text


@pytest.mark.anyio
async def test_serving_plans_beside_a_catalog_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With plans and no event log named, a file catalog's server keeps its plans' events
    beside the catalog; a plan that cannot run (a setup hook fails) and an event log that
    cannot be opened fail the call, each in one line."""

    def boom() -> None:
        raise RuntimeError("no database")

    fake_module(monkeypatch, "gategraph_fault_hooks", boom=boom)
    monkeypatch.chdir(tmp_path)  # the served plan files are the working directory's
    hooked = tmp_path / "hooked.yaml"
    hooked.write_text(
        "version: 1\nname: hooked\nvalidations:\n"
        "  - name: ok\n    code: \"def run():\\n    return {'passed': True}\\n\"\n"
        "    hooks: {setup: 'gategraph_fault_hooks:boom'}\n"
        # Its hook is a module of this process only: declared to run here (trusted).
        "nodes:\n  - {id: n, validation: ok, isolation: thread}\n"
    )
    graph = tmp_path / "plan.yaml"
    graph.write_text(
        "version: 1\nname: tiny\nvalidations:\n"
        "  - {name: ok, code: \"def run():\\n    return {'passed': True}\\n\"}\n"
        "nodes:\n  - {id: n, validation: ok}\n"
    )
    with Catalog.open(tmp_path / "cat" / "catalog.db") as catalog:
        async with session_with(create_mcp_server(catalog, plans=True)) as session:
            result = await session.call_tool("gategraph.run_plan", {"graph": str(graph)})
            assert not result.is_error, reply_text(result)
            assert result.structured_content is not None
            assert result.structured_content["status"] == "applied"
            waiting = await session.call_tool("gategraph.plans_waiting", {})
            assert waiting.structured_content == {"plans": []}
            failed = await session.call_tool("gategraph.run_plan", {"graph": str(hooked)})
    assert (tmp_path / "cat" / "events.db").is_file()
    assert failed.is_error
    assert reply_text(failed) == "the setup hook of 'ok' failed: RuntimeError: no database"

    (tmp_path / "not-a-log.db").write_text("this is not a database\n" * 100)
    with Catalog.in_memory() as catalog:
        server = create_mcp_server(catalog, plans=True, event_log_path=tmp_path / "not-a-log.db")
        async with session_with(server) as session:
            result = await session.call_tool("gategraph.run_plan", {"graph": str(graph)})
    assert result.is_error
    assert "\n" not in reply_text(result) and "Traceback" not in reply_text(result)


@pytest.mark.anyio
async def test_served_arguments_at_the_edges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder argument that is empty, or too long for the system, and arguments that break
    a rule of the schema as a whole, are one-line errors naming what is wrong."""
    monkeypatch.chdir(tmp_path)  # the served folders are the working directory's
    slot = {"name": "root", "kind": "directory"}
    with Catalog.in_memory() as catalog:
        catalog.add(
            Validation.from_config(
                {
                    "name": "has-root",
                    "code": "def run(root):\n    return {'passed': root.is_dir()}\n",
                    "resource_slots": [slot],
                }
            )
        )
        catalog.add(
            Validation.from_config(
                {
                    "name": "one-of-them",
                    "code": "def run(**given):\n    return {'passed': True}\n",
                    "input_schema": {
                        "type": "object",
                        "properties": {"a": {}, "b": {}},
                        "minProperties": 1,
                    },
                }
            )
        )
        async with session_with(create_mcp_server(catalog, builtins=False)) as session:
            empty = await session.call_tool("has-root", {"root": ""})
            long = await session.call_tool("has-root", {"root": "x" * 5000})
            none = await session.call_tool("one-of-them", {})
            some = await session.call_tool("one-of-them", {"a": 1})
    for result in (empty, long, none):
        assert result.is_error and "\n" not in reply_text(result), reply_text(result)
    assert reply_text(empty).startswith("argument 'root': not a ")
    assert reply_text(long).startswith("argument 'root': cannot use ")
    assert "should be non-empty" in reply_text(none)
    assert not some.is_error and some.structured_content is not None
    assert some.structured_content["passed"] is True


@pytest.mark.anyio
async def test_an_uncallable_entry_is_told_once_across_updates() -> None:
    """An entry that cannot be served is told once, and not again when it is updated and
    still cannot be; an entry whose callable has no signature is served with open
    arguments and runs."""
    told: list[str] = []
    with Catalog.in_memory() as catalog:
        broken = {"name": "broken", "entrypoint": "gategraph_nope:run"}
        catalog.add(Validation.from_config(broken))
        catalog.add(Validation.from_config({"name": "smallest", "entrypoint": "builtins:min"}))
        async with session_with(
            create_mcp_server(catalog, builtins=False, warn=told.append)
        ) as session:
            names = {tool.name for tool in (await session.list_tools()).tools}
            catalog.add(
                Validation.from_config({**broken, "description": "Still broken."}), update=True
            )
            again = {tool.name: tool for tool in (await session.list_tools()).tools}
            result = await session.call_tool("smallest", {})
    assert "broken" not in names and "broken" not in again
    assert len(told) == 1 and told[0].startswith("not serving broken: "), told
    assert again["smallest"].input_schema == {"type": "object", "properties": {}}
    # min() with no arguments raises: a failed check, reported as a result.
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["passed"] is False
    assert result.structured_content["data"]["error"] == "exception"


class HeldInput(io.RawIOBase):
    """Standard input that gives ``data``, then ends only once ``replies`` lines are on
    standard output (a client that closes its end before the answers come gets none),
    or after a bound."""

    def __init__(self, data: bytes, replies: int) -> None:
        self.data = data
        self.replies = replies

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.data:
            out = sys.stdout.buffer  # the runner's, read by the server's reader thread
            deadline = time.monotonic() + 60
            while out.getvalue().count(b"\n") < self.replies and time.monotonic() < deadline:  # type: ignore[attr-defined]
                time.sleep(0.01)
            return 0
        size = min(len(buffer), len(self.data))
        buffer[:size] = self.data[:size]
        self.data = self.data[size:]
        return size


def test_cli_serve_stdio_without_the_sdk_s_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """An SDK importable without its package metadata (vendored) is let serve; over the
    stdio the command line is given (no file descriptor behind it) it answers MCP."""
    real = importlib.metadata.version

    def version(name: str) -> str:
        if name == "mcp":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    data = "".join(json.dumps(m) + "\n" for m in messages).encode()
    done = CliRunner().invoke(cli, ["mcp", "serve"], input=io.BufferedReader(HeldInput(data, 2)))
    assert done.exit_code == 0, done.output
    replies = {reply["id"]: reply for reply in map(json.loads, done.stdout.splitlines())}
    assert replies[1]["result"]["serverInfo"]["name"] == "gategraph"
    names = {tool["name"] for tool in replies[2]["result"]["tools"]}
    assert "python_syntax" in names
    assert "no catalog file yet" in done.stderr


def test_cli_serve_http_stops_on_ctrl_c(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) stops `gategraph mcp serve --http`: it says it was interrupted, exit
    code 130, no traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEGRAPH_")}
    env["GATEGRAPH_HOME"] = str(tmp_path)
    process = subprocess.Popen(
        [*GATEGRAPH, "mcp", "serve", "--http", "127.0.0.1:0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a runner started in the background (`pytest &`) passes
        # SIGINT on ignored, and Python then leaves it ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline() for _ in range(2)]
        assert lines[1].startswith("gategraph mcp serve: listening on http://127.0.0.1:"), lines
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert err.strip() == "error: interrupted" and out == ""
