"""`gategraph mcp serve`: the catalog's validations and read-only tools as MCP tools, called
with the `mcp` SDK's own client session — in process, over stdio and over streamable HTTP."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import write_tree

pytest.importorskip("mcp")

import anyio
import anyio.lowlevel
from _mcp_session import call, session_with
from click.testing import CliRunner
from gategraph.runtime import Catalog, McpServer, Tool, Validation
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._kernel import support
from gategraph.runtime._cli import cli
from gategraph.runtime._serve._mcp_serve import (
    PLAN_TOOLS,
    PLANS_WAITING,
    RESULT_SCHEMA,
    RUN_PLAN,
    bind,
    create_mcp_server,
    mcp_tool_name,
    parse_address,
    serve_http,
)
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.timeout(120)

DEMO = Path(__file__).resolve().parents[2] / "graphs" / "demo"

# What holds a validation of the catalog to read-only: the kernel sandbox, where there is one.
HELD = "kernel" if support().missing is None else "guard"

HAS_README = """\
def run(root, name="README.md"):
    import pathlib
    found = (pathlib.Path(root) / name).exists()
    return {"passed": found, "message": f"{name} {'found' if found else 'missing'}"}
"""
WRITER = """\
def run(root):
    (root / "sneaky.txt").write_text("written")
    return {"passed": True}
"""
SLOW = """\
async def run():
    import anyio
    await anyio.sleep(60)
    return {"passed": True}
"""
NOT_EMPTY = """\
def run(files, minimum: int):
    return {"passed": len(files) >= minimum, "message": f"{len(files)} file(s)",
            "data": {"files": sorted(files)}}
"""
STRAY = """\
def run():
    import threading, time

    def later():
        time.sleep(0.2)
        print("printed later")

    threading.Thread(target=later, daemon=True).start()
    return {"passed": True}
"""
COUNT = """\
def run(root):
    return {"files": sorted(p.name for p in root.iterdir())}
"""
TOUCH = """\
def run(root):
    (root / "touched").write_text("")
"""


def fill(catalog: Catalog) -> Catalog:
    """Validations of every shape, a read-only tool, one that writes, and a writing tool."""
    slot = {"name": "root", "kind": "directory", "description": "The folder to check."}
    catalog.add(
        Validation.from_config(
            {
                "name": "has-readme",
                "description": "The folder has a README.",
                "code": HAS_README,
                "resource_slots": [slot],
            }
        )
    )
    catalog.add(
        Validation.from_config({"name": "writer", "code": WRITER, "resource_slots": [slot]})
    )
    catalog.add(Validation.from_config({"name": "slow", "code": SLOW, "timeout": 0.5}))
    catalog.add(
        Validation.from_config(
            {
                "name": "not-empty",
                "code": NOT_EMPTY,
                "mode": "informational",
                "resource_slots": [{"name": "files", "kind": "memory"}],
            }
        )
    )
    catalog.add(
        Tool.from_config(
            {"name": "count", "code": COUNT, "resource_slots": ["root"], "read_only": True}
        )
    )
    catalog.add(
        Tool.from_config(
            {"name": "sneaky-count", "code": TOUCH, "resource_slots": ["root"], "read_only": True}
        )
    )
    catalog.add(
        Tool.from_config(
            {"name": "touch", "code": TOUCH, "resource_slots": ["root"], "writes": True}
        )
    )
    catalog.add(Tool.from_config({"name": "plain", "code": "def run():\n    return 1\n"}))
    return catalog


@pytest.fixture(autouse=True)
def _serve_the_test_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server serves the working directory it starts in: here, the test's own folder."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def catalog() -> Iterator[Catalog]:
    with Catalog.in_memory() as opened:
        yield fill(opened)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "project", {"README.md": "hello\n", "ok.py": "x = 1\n"})


# -- listing ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_lists_validations_and_read_only_tools_with_their_schemas(catalog: Catalog) -> None:
    """Validations, built-ins and read-only tools are listed, each with its input schema
    (slots first, then its arguments), the result's output schema and readOnlyHint; a
    tool that writes, or that does not say it only reads, is not."""
    async with session_with(create_mcp_server(catalog)) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert {"has-readme", "writer", "slow", "not-empty", "count", "sneaky-count"} <= set(tools)
    assert {"python_syntax", "regex", "json_schema"} <= set(tools)
    assert "touch" not in tools and "plain" not in tools
    assert RUN_PLAN not in tools and PLANS_WAITING not in tools

    readme = tools["has-readme"]
    assert readme.input_schema == {
        "type": "object",
        "properties": {
            "root": {
                "type": "string",
                "description": "The folder to check. A folder's path inside the served root "
                "(relative to the root, or absolute).",
            },
            "name": {"type": "string", "default": "README.md"},
        },
        "required": ["root"],
        "additionalProperties": False,
    }
    assert readme.output_schema == RESULT_SCHEMA
    assert readme.description is not None and readme.description.startswith(
        "The folder has a README."
    )
    assert readme.annotations is not None
    assert readme.annotations.read_only_hint is True
    assert readme.annotations.idempotent_hint is True
    assert readme.annotations.destructive_hint is False
    assert readme.meta == {
        "gategraph": {"kind": "validation", "source": "code", "mode": "required"}
    }

    # Typed parameters, a memory slot, informational mode.
    not_empty = tools["not-empty"]
    assert not_empty.input_schema["properties"]["minimum"] == {"type": "integer"}
    assert not_empty.input_schema["properties"]["files"]["type"] == "object"
    assert not_empty.input_schema["required"] == ["files", "minimum"]
    assert not_empty.meta is not None and not_empty.meta["gategraph"]["mode"] == "informational"

    # A built-in: its own input_schema after its slot; `artifact` where it judges one.
    regex = tools["regex"]
    assert list(regex.input_schema["properties"])[:3] == ["root", "artifact", "pattern"]
    assert regex.input_schema["required"] == ["pattern"]  # its folder is optional
    assert regex.input_schema["additionalProperties"] is False
    assert "artifact" not in tools["python_syntax"].input_schema["properties"]

    # A read-only tool: any resource kind, its output under `output`.
    count = tools["count"]
    assert set(count.input_schema["properties"]["root"]) == {"anyOf", "description"}
    assert count.output_schema is not None and count.output_schema["required"] == ["output"]
    assert count.annotations is not None and count.annotations.read_only_hint is True


@pytest.mark.anyio
async def test_without_builtins_and_with_what_is_registered_meanwhile(catalog: Catalog) -> None:
    """builtins=False leaves the built-ins out (a call of one is an unknown tool); what is
    registered while the server runs is listed at the next request."""
    async with session_with(create_mcp_server(catalog, builtins=False)) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert "python_syntax" not in names and "has-readme" in names
        result, text = await call(session, "python_syntax", {"root": "."})
        assert result.is_error and text == "Unknown tool: python_syntax"
        catalog.add(
            Validation.from_config(
                {"name": "late", "code": "def run():\n    return {'passed': True}\n"}
            )
        )
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert "late" in names
        result, text = await call(session, "late", {})
        assert not result.is_error and result.structured_content["passed"] is True


def test_tool_names_that_mcp_refuses_get_a_stable_spelling() -> None:
    """A name MCP allows stays as it is; any other is spelled with allowed characters and a
    digest, the same each time."""
    assert mcp_tool_name("lint.ruff") == "lint.ruff"
    assert mcp_tool_name("no-hallucinated_paths") == "no-hallucinated_paths"
    odd = mcp_tool_name("check files/ü")
    assert re.fullmatch(r"check_files__-[0-9a-f]{8}", odd)
    assert mcp_tool_name("check files/ü") == odd != mcp_tool_name("check files/u")
    assert len(mcp_tool_name("x" * 200)) <= 128


# -- calling ---------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_passing_and_a_failing_validation(catalog: Catalog, project: Path) -> None:
    """A pass and a failure are both normal results with structured content; the text is
    the same result as JSON."""
    async with session_with(create_mcp_server(catalog)) as session:
        result, text = await call(session, "has-readme", {"root": str(project)})
        assert not result.is_error
        assert result.structured_content == {
            "passed": True,
            "message": "README.md found",
            "data": {},
            "enforced_by": HELD,
        }
        assert json.loads(text) == result.structured_content
        result, _ = await call(session, "has-readme", {"root": str(project), "name": "NEWS"})
        assert not result.is_error
        assert result.structured_content == {
            "passed": False,
            "message": "NEWS missing",
            "data": {},
            "enforced_by": HELD,
        }
        # A built-in, by name.
        (project / "bad.py").write_text("def (:\n")
        result, _ = await call(session, "python_syntax", {"root": str(project)})
        assert not result.is_error and result.structured_content["passed"] is False
        assert result.structured_content["data"]["error_count"] == 1


@pytest.mark.anyio
async def test_relative_folders_files_and_artifacts(
    catalog: Catalog, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative folder is the served root's; a memory slot takes files; a
    validation that judges an artifact takes it as `artifact`."""
    monkeypatch.chdir(project.parent)
    async with session_with(create_mcp_server(catalog)) as session:
        result, _ = await call(session, "has-readme", {"root": "project"})
        assert result.structured_content["passed"] is True
        result, _ = await call(session, "not-empty", {"files": {"a.txt": "1"}, "minimum": 2})
        assert result.structured_content == {
            "passed": False,
            "message": "1 file(s)",
            "data": {"files": ["a.txt"]},
            "enforced_by": HELD,
        }
        schema = {"type": "object", "required": ["title"]}
        result, _ = await call(session, "json_schema", {"schema": schema, "artifact": {"t": 1}})
        assert result.structured_content["passed"] is False
        result, _ = await call(session, "json_schema", {"schema": schema, "artifact": {"title": 1}})
        assert result.structured_content["passed"] is True


@pytest.mark.anyio
async def test_a_read_only_tool_returns_its_output(catalog: Catalog, project: Path) -> None:
    """A read-only tool's return value is the structured content's `output`."""
    async with session_with(create_mcp_server(catalog)) as session:
        result, text = await call(session, "count", {"root": str(project)})
    assert not result.is_error
    assert result.structured_content == {"output": {"files": ["README.md", "ok.py"]}}
    assert json.loads(text) == result.structured_content


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("has-readme", {}, "missing argument 'root' (The folder to check)"),
        (
            "has-readme",
            {"root": "no/such/folder"},
            "argument 'root': no such folder: no/such/folder",
        ),
        (
            "has-readme",
            {"root": 3},
            "argument 'root': must be a folder's path (a string), not a number",
        ),
        (
            "has-readme",
            {"root": ".", "nmae": "x"},
            "unknown argument 'nmae' (did you mean 'name'?); 'has-readme' takes: name",
        ),
        ("has-readme", {"root": ".", "context": 1}, "'context' is not an argument of 'has-readme'"),
        (
            "not-empty",
            {"files": {"a": "1"}},
            "missing argument 'minimum' (required by 'not-empty')",
        ),
        (
            "not-empty",
            {"files": {"../up": "1"}, "minimum": 1},
            "argument 'files': '../up' is not a relative path inside the files",
        ),
        (
            "not-empty",
            {"files": {"a": 1}, "minimum": 1},
            "argument 'files': the file 'a' must be text, not int",
        ),
        (
            "regex",
            {"patern": "x"},
            "unknown argument 'patern' (did you mean 'pattern'?); 'regex' takes: pattern, "
            "files, exclude, mode, scope, flags",
        ),
        ("regex", {"pattern": 5}, "argument 'pattern': 5 is not of type 'string'"),
        ("python_syntax", {"root": ".", "artifact": 1}, "'artifact' is not an argument of"),
        ("touch", {"root": "."}, "Unknown tool: touch"),
        ("no-such-tool", {}, "Unknown tool: no-such-tool"),
    ],
)
async def test_bad_arguments_are_one_line_errors(
    catalog: Catalog, name: str, arguments: dict[str, Any], message: str
) -> None:
    """Arguments a call cannot run with, and unknown tools, are isError results of one line."""
    async with session_with(create_mcp_server(catalog)) as session:
        result, text = await call(session, name, arguments)
    assert result.is_error and result.structured_content is None
    assert text.startswith(message), text
    assert "\n" not in text


@pytest.mark.anyio
async def test_a_validation_that_writes_fails_read_only_violation(
    catalog: Catalog, project: Path
) -> None:
    """The read-only guard runs as in a plan: the write is stopped and the result says so."""
    async with session_with(create_mcp_server(catalog)) as session:
        result, _ = await call(session, "writer", {"root": str(project)})
    assert not result.is_error
    assert result.structured_content["passed"] is False
    assert result.structured_content["data"]["error"] == "read_only_violation"
    assert not (project / "sneaky.txt").exists()


@pytest.mark.anyio
async def test_a_read_only_tool_that_writes_is_stopped(catalog: Catalog, project: Path) -> None:
    """A tool that says it only reads runs in the sandbox too: its write fails the call."""
    async with session_with(create_mcp_server(catalog)) as session:
        result, text = await call(session, "sneaky-count", {"root": str(project)})
    assert result.is_error
    assert text.startswith("sandboxed tool 'sneaky-count' attempted a write"), text
    assert not (project / "touched").exists()


@pytest.mark.anyio
async def test_a_validation_past_its_timeout_fails_timeout(catalog: Catalog) -> None:
    """A validation's own timeout holds: the result is a failure with data.error timeout."""
    async with session_with(create_mcp_server(catalog)) as session:
        result, _ = await call(session, "slow", {})
    assert not result.is_error
    assert result.structured_content["passed"] is False
    assert result.structured_content["data"]["error"] == "timeout"


@pytest.mark.anyio
async def test_attachments_of_the_same_resource_name_do_not_run(
    catalog: Catalog, project: Path
) -> None:
    """A call runs the one validation asked for: validations attached to a resource named
    like the slot (one that fails, one that cannot even be loaded) do not join it."""
    catalog.attach("root", "writer")
    catalog.add(Validation.from_config({"name": "broken", "entrypoint": "gategraph_nope:run"}))
    catalog.attach("root", "broken")
    async with session_with(create_mcp_server(catalog)) as session:
        result, _ = await call(session, "has-readme", {"root": str(project)})
    assert result.structured_content["passed"] is True


@pytest.mark.anyio
async def test_wrapping_and_keyword_validations(catalog: Catalog, project: Path) -> None:
    """A wrapping validation with an argument mapping takes the arguments it maps; one that
    takes **kwargs accepts any argument and the artifact; a catalog entry named like a
    built-in is served instead of it."""
    catalog.add(
        Validation.from_config(
            {
                "name": "few-files",
                "wraps": "count",
                "argument_mapping": {},
                "transform": "{'passed': len(output['files']) <= 5}",
            }
        )
    )
    catalog.add(
        Validation.from_config(
            {
                "name": "limit",
                "wraps": "count",
                "argument_mapping": {"root": "$folder"},
                "transform": "{'passed': True}",
            }
        )
    )
    keywords = "def run(**given):\n    return {'passed': True, 'data': {'given': sorted(given)}}\n"
    catalog.add(Validation.from_config({"name": "anything", "code": keywords}))
    catalog.add(
        Validation.from_config(
            {
                "name": "regex",
                "description": "Mine.",
                "code": "def run():\n    return {'passed': True}\n",
            }
        )
    )
    async with session_with(create_mcp_server(catalog)) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert tools["few-files"].input_schema["properties"].keys() == {"root"}
        assert tools["limit"].input_schema["required"] == ["root", "folder"]
        assert tools["anything"].input_schema == {
            "type": "object",
            "properties": {
                "artifact": {
                    "description": tools["anything"].input_schema["properties"]["artifact"][
                        "description"
                    ]
                }
            },
        }
        assert (tools["regex"].description or "").startswith("Mine.")
        result, _ = await call(session, "few-files", {"root": str(project)})
        assert result.structured_content["passed"] is True
        result, text = await call(session, "limit", {"root": str(project)})
        assert result.is_error and text == "missing argument 'folder' (required by 'limit')"
        result, _ = await call(session, "anything", {"a": 1, "artifact": {"x": 1}})
        assert result.structured_content["data"]["given"] == ["a", "artifact", "context", "inputs"]
        result, _ = await call(session, "regex", {})
        assert result.structured_content["passed"] is True


@pytest.mark.anyio
async def test_a_hook_that_fails_is_an_error_result(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A validation whose setup hook fails does not run; the call is an error of one line.
    (The hook runs where the validation does, in the sandbox: from a module on disk.)"""
    (tmp_path / "gategraph_test_hooks.py").write_text(
        "def boom():\n    raise RuntimeError('no database')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    catalog.add(
        Validation.from_config(
            {
                "name": "hooked",
                "code": "def run():\n    return {'passed': True}\n",
                "hooks": {"setup": "gategraph_test_hooks:boom"},
            }
        )
    )
    async with session_with(create_mcp_server(catalog)) as session:
        result, text = await call(session, "hooked", {})
    assert result.is_error, text
    assert "no database" in text and "\n" not in text, text


@pytest.mark.anyio
async def test_an_uncallable_entry_is_left_out_and_said_once(catalog: Catalog) -> None:
    """An entry whose callable cannot be prepared is not listed; the reason is told once."""
    catalog.add(Validation.from_config({"name": "broken", "entrypoint": "gategraph_nope:run"}))
    told: list[str] = []
    async with session_with(create_mcp_server(catalog, warn=told.append)) as session:
        for _ in range(2):
            names = {tool.name for tool in (await session.list_tools()).tools}
            assert "broken" not in names and "has-readme" in names
        result, text = await call(session, "broken", {})
    assert result.is_error and text == "Unknown tool: broken"
    assert len(told) == 1 and told[0].startswith("not serving broken: ")


# -- plans -----------------------------------------------------------------------------------


def demo_copy(tmp_path: Path, *, broken: bool = False) -> Path:
    target = tmp_path / ("broken" if broken else "demo")
    shutil.copytree(DEMO, target)
    plan = target / "plan.yaml"
    if broken:
        # Only the broken step: the executor never fixes it, and nobody is asked.
        text = plan.read_text()
        text = text[
            : text.index(
                "        - files:\n            src/farewell.py: |\n              def farewell(name):"
            )
        ]
        plan.write_text(text + "policy:\n  retry_limit: 1\n  strategy_revisions: 0\n")
    return plan


@pytest.mark.anyio
async def test_plans_run_and_wait_for_a_person(tmp_path: Path) -> None:
    """With plans: run_plan runs a graph file to its status and verdict, and plans_waiting
    lists the plan that waits for a decision (and not the applied one)."""
    log = tmp_path / "events.db"
    good, broken = demo_copy(tmp_path), demo_copy(tmp_path, broken=True)
    with Catalog.in_memory() as catalog:
        server = create_mcp_server(catalog, plans=True, event_log_path=log)
        async with session_with(server) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert tools[RUN_PLAN].annotations is not None
            assert tools[RUN_PLAN].annotations.read_only_hint is False
            assert tools[PLANS_WAITING].annotations is not None
            assert tools[PLANS_WAITING].annotations.read_only_hint is True
            result, _ = await call(session, PLANS_WAITING, {})
            assert result.structured_content == {"plans": []}
            result, _ = await call(session, RUN_PLAN, {"graph": str(good)})
            assert not result.is_error
            applied = result.structured_content
            assert applied["status"] == "applied" and applied["verdict"]["verdict"] == "attest"
            result, _ = await call(session, RUN_PLAN, {"graph": str(broken)})
            waiting = result.structured_content
            assert waiting["status"] == "awaiting_decision"
            assert waiting["verdict"]["verdict"] == "reject"
            result, _ = await call(session, PLANS_WAITING, {})
            (listed,) = result.structured_content["plans"]
            assert listed["plan_id"] == waiting["plan_id"] != applied["plan_id"]
            assert listed["status"] == "awaiting_decision"
            assert listed["graph_path"] == str(broken)
            result, text = await call(session, RUN_PLAN, {"graph": str(tmp_path / "nope.yaml")})
            assert result.is_error and text.startswith("argument 'graph': no such file: ")
            result, text = await call(session, RUN_PLAN, {"graph": str(good), "x": 1})
            assert result.is_error and text.startswith("unknown argument 'x'")
            result, text = await call(session, PLANS_WAITING, {"x": 1})
            assert result.is_error


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "missing argument 'graph' (the plan graph file)"),
        ({"graph": "PLAN", "resources": ["x"]}, "argument 'resources': an object of resource name"),
        (
            {"graph": "PLAN", "resources": {"nope": "."}},
            "argument 'resources': 'nope' is not a resource of",
        ),
        (
            {"graph": "PLAN", "resources": {"project": "no/such"}},
            "argument 'resources': project: no such folder: no/such",
        ),
        ({"graph": "BAD"}, "argument 'graph': bad.yaml:1:1: version: field required"),
    ],
)
async def test_run_plan_refuses_what_it_cannot_run(
    tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    """run_plan's arguments are checked before anything runs: one line, isError."""
    plan = demo_copy(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: 3\n")
    given = {
        k: str(plan) if v == "PLAN" else str(bad) if v == "BAD" else v for k, v in arguments.items()
    }
    with Catalog.in_memory() as catalog:
        async with session_with(create_mcp_server(catalog, plans=True)) as session:
            result, text = await call(session, RUN_PLAN, given)
    assert result.is_error
    assert text.startswith(message), text
    assert "\n" not in text


@pytest.mark.anyio
async def test_run_plan_on_another_folder(tmp_path: Path) -> None:
    """`resources` runs the plan on another folder, as --resource does; with no event log
    file given, it is the default one beside the catalog."""
    plan = demo_copy(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(plan.parent / "project", other)
    with Catalog.in_memory() as catalog:
        async with session_with(create_mcp_server(catalog, plans=True)) as session:
            result, _ = await call(
                session, RUN_PLAN, {"graph": str(plan), "resources": {"project": str(other)}}
            )
            assert result.structured_content["status"] == "applied"
            result, _ = await call(session, PLANS_WAITING, {})
            assert result.structured_content == {"plans": []}
    assert (other / "src" / "farewell.py").exists()
    assert not (plan.parent / "project" / "src" / "farewell.py").exists()
    assert (Path(os.environ["GATEGRAPH_HOME"]) / "events.db").exists()


# -- the command line ------------------------------------------------------------------------


def make_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    with Catalog.open(home / "gategraph.db") as catalog:
        fill(catalog)
    return home


def server_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEGRAPH_")}
    env["GATEGRAPH_HOME"] = str(home)
    return env


async def exercise(session: ClientSession, project: Path) -> None:
    """What each transport must carry: the listing, a pass, a failure, an error, a write."""
    await session.initialize()
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert {"has-readme", "count", "python_syntax"} <= names and "touch" not in names
    result, _ = await call(session, "has-readme", {"root": str(project)})
    assert result.structured_content == {
        "passed": True,
        "message": "README.md found",
        "data": {},
        "enforced_by": HELD,
    }
    result, _ = await call(session, "has-readme", {"root": str(project), "name": "NEWS"})
    assert not result.is_error and result.structured_content["passed"] is False
    result, text = await call(session, "has-readme", {"root": str(project / "gone")})
    assert result.is_error and text.startswith("argument 'root': no such folder")
    result, _ = await call(session, "writer", {"root": str(project)})
    assert result.structured_content["data"]["error"] == "read_only_violation"
    result, _ = await call(session, "slow", {})
    assert result.structured_content["data"]["error"] == "timeout"
    assert not (project / "sneaky.txt").exists()


@pytest.mark.anyio
async def test_serve_over_stdio(tmp_path: Path, project: Path) -> None:
    """`gategraph mcp serve` speaks MCP on stdin/stdout, with the catalog of GATEGRAPH_HOME;
    what validations print does not reach the wire. The catalog's validations run in the
    sandbox: what one writes, to sys.stdout or to file descriptor 1, is in its record, and
    what a thread it leaves running prints stays in its worker."""
    home = make_home(tmp_path)
    with Catalog.open(home / "gategraph.db") as catalog:
        noisy = "def run():\n    import os\n    print('to stdout')\n    os.write(1, b'to fd 1\\n')\n    return {'passed': True}\n"
        catalog.add(Validation.from_config({"name": "noisy", "code": noisy}))
        catalog.add(Validation.from_config({"name": "stray", "code": STRAY}))
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gategraph.runtime", "mcp", "serve"],
        env=server_env(home),
        cwd=str(tmp_path),
    )
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await exercise(session, project)
                result, _ = await call(session, "noisy", {})
                assert result.structured_content["passed"] is True
                captured = result.structured_content["data"]["captured"]["stdout"]
                assert captured == "to stdout\nto fd 1\n"
                result, _ = await call(session, "stray", {})
                # Its thread ends within the grace its worker gives it: what it prints
                # stays in the worker.
                assert result.structured_content["passed"] is True
                await anyio.sleep(0.5)
                result, _ = await call(session, "has-readme", {"root": str(project)})
                assert result.structured_content["passed"] is True
        errlog.seek(0)
        diagnostics = errlog.read()
    assert "to fd 1" not in diagnostics and "printed later" not in diagnostics
    assert "Traceback" not in diagnostics


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`gategraph mcp serve --http 127.0.0.1:0` in a process of its own; its URL and a
    project folder."""
    tmp_path = tmp_path_factory.mktemp("http")
    home = make_home(tmp_path)
    project = tmp_path / "project"
    project.mkdir()
    (project / "README.md").write_text("hello\n")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "gategraph.runtime", "mcp", "serve"),
            *("--http", "127.0.0.1:0", "--root", str(tmp_path)),
        ],
        env=server_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        match = re.fullmatch(
            r"gategraph mcp serve: listening on (http://127\.0\.0\.1:\d+/mcp)\n", line
        )
        assert match, line
        yield match.group(1), project
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a server that hangs on SIGTERM
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.anyio
# Under trio, the SDK's HTTP client (httpx2) leaves async generators of its connection pool
# for the garbage collector to finalize, which trio reports as unraisable ResourceWarnings;
# the calls themselves are what this test pins.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_serve_over_streamable_http(http_server: tuple[str, Path]) -> None:
    """`--http 127.0.0.1:0` serves streamable HTTP on a free port it names on stderr."""
    url, project = http_server
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, project)


def test_http_refuses_other_hosts_and_origins(http_server: tuple[str, Path]) -> None:
    """On a loopback address, a request naming another host or coming from another origin
    is refused (no DNS rebinding from a web page)."""
    import http.client
    from urllib.parse import urlsplit

    url, _ = http_server
    where = urlsplit(url)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for extra, status in (
        ({"Host": "attacker.example"}, 421),
        ({"Origin": "http://attacker.example"}, 403),
    ):
        connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
        try:
            connection.request("POST", where.path, body, {**headers, **extra})
            assert connection.getresponse().status == status
        finally:
            connection.close()


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # uvicorn runs on asyncio only
@pytest.mark.anyio
async def test_serve_http_in_process_stops_when_cancelled(catalog: Catalog, project: Path) -> None:
    """serve_http serves on the socket bind() gives it and shuts down cleanly when the task
    that runs it is cancelled."""
    sock = bind("127.0.0.1", 0)
    urls: list[str] = []
    with sock:
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: serve_http(
                    create_mcp_server(catalog), sock, host="127.0.0.1", ready=urls.append
                )
            )
            await anyio.lowlevel.checkpoint()
            (url,) = urls
            assert url == f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write) as session:
                    await exercise(session, project)
            tg.cancel_scope.cancel()


def test_bind_names_what_it_cannot_have() -> None:
    """A host that does not resolve is one line too."""
    with pytest.raises(ConfigError, match=r"--http: cannot resolve 'no-such-host\.invalid'"):
        bind("no-such-host.invalid", 80)


def run_cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("address", "message"),
    [
        (
            "0.0.0.0:8000",
            "error: --http: 0.0.0.0 is not a loopback address: anyone who can reach it could "
            "run the validations; serve on 127.0.0.1 (or add --allow-remote)\n",
        ),
        ("example.com:80", "error: --http: example.com is not a loopback address"),
        ("localhost", "error: --http: 'localhost' is not HOST:PORT (e.g. 127.0.0.1:8765)\n"),
        ("127.0.0.1:70000", "error: --http: 70000 is not a port (0 to 65535)\n"),
    ],
)
def test_serve_refuses_addresses(address: str, message: str) -> None:
    """An address that is not HOST:PORT, or that other machines could reach, is refused
    in one line with exit code 2."""
    code, out, err = run_cli("mcp", "serve", "--http", address)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_addresses() -> None:
    """Loopback hosts (IPv4, IPv6, localhost) are served; others with allow_remote."""
    assert parse_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_address("[::1]:0") == ("::1", 0)
    assert parse_address("localhost:9000") == ("localhost", 9000)
    assert parse_address("0.0.0.0:8000", allow_remote=True) == ("0.0.0.0", 8000)


def test_serve_on_a_port_in_use_is_one_line() -> None:
    """A port another server holds is one line naming the address, exit code 2."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        code, _, err = run_cli("mcp", "serve", "--http", f"127.0.0.1:{port}")
    assert code == 2
    assert err.startswith(f"error: --http: cannot listen on 127.0.0.1:{port}: ")
    assert err.count("\n") == 1


def test_serve_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the mcp package, the command says which extra to install, exit code 2."""
    monkeypatch.setitem(sys.modules, "mcp", None)
    code, out, err = run_cli("mcp", "serve")
    assert code == 2 and out == ""
    assert err == "error: gategraph mcp serve needs the mcp extra: pip install 'gategraph[mcp]'\n"


def test_serve_with_an_sdk_too_old(monkeypatch: pytest.MonkeyPatch) -> None:
    """An mcp SDK older than 2.0 is named, with the extra to install, exit code 2."""
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "1.27.0" if name == "mcp" else real(name)
    )
    code, _, err = run_cli("mcp", "serve")
    assert code == 2
    assert err == (
        "error: gategraph mcp serve needs mcp 2.0 or newer (found 1.27.0): "
        "pip install -U 'gategraph[mcp]'\n"
    )


def test_serve_help_names_the_transports() -> None:
    """The group and its command are there, with help that says what they do."""
    code, out, _ = run_cli("mcp", "--help")
    assert code == 0 and "serve gategraph's validations over MCP" in out
    code, out, _ = run_cli("mcp", "serve", "--help")
    assert code == 0 and "--http HOST:PORT" in out and "--allow-remote" in out


def test_the_page_shows_a_client_configuration() -> None:
    """docs/mcp-serve.md's client configuration is JSON that starts `gategraph mcp serve`."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "mcp-serve.md").read_text()
    blocks = re.findall(r"```json\n(.*?)```", page, re.DOTALL)
    configs = [json.loads(block) for block in blocks]
    servers = [c["mcpServers"]["gategraph"] for c in configs if "mcpServers" in c]
    assert servers and servers[0]["command"] == "gategraph"
    args = servers[0]["args"]
    assert args[args.index("mcp") :] == ["mcp", "serve", "--root", "/home/me/project"]


# -- a hostile client: the served root, the advertised schema, reserved names -------------

SECRET = "root:$6$secrethash:19000:0:99999:7:::"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The served root, with a project in it; beside it (outside) a folder with a secret
    and a link to it from inside. The working directory is elsewhere, so a relative path
    can only mean the root's."""
    root = tmp_path / "served"
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "README.md").write_text("hello\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "shadow").write_text(SECRET + "\n")
    (outside / "README.md").write_text("not yours\n")
    (root / "link").symlink_to(outside, target_is_directory=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    return root


def assert_refused(result: Any, text: str, argument: str) -> None:
    assert result.is_error and result.structured_content is None, text
    assert text.startswith(f"argument {argument!r}: ") and "outside" in text, text
    assert "\n" not in text and "secrethash" not in text, text


# -- 4: the served root ----------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("regex", {"root": "OUTSIDE", "files": "shadow", "pattern": "root:.*"}),
        ("regex", {"root": "link", "files": "shadow", "pattern": "root:.*"}),
        ("regex", {"root": "proj/../../outside", "files": "shadow", "pattern": "root:.*"}),
        ("has-readme", {"root": "/", "name": "OUTSIDE/shadow"}),
        ("has-readme", {"root": "..", "name": "outside/README.md"}),
        ("count", {"root": "link"}),
    ],
)
async def test_a_folder_outside_the_root_is_refused(
    catalog: Catalog, served: Path, name: str, arguments: dict[str, Any]
) -> None:
    """A slot's folder outside the served root — absolute, through `..` or through a
    link inside the root — is refused in one line naming the argument, before it runs."""
    outside = str(served.parent / "outside")
    given = {k: v.replace("OUTSIDE", outside) for k, v in arguments.items()}
    async with session_with(create_mcp_server(catalog, root=served)) as session:
        result, text = await call(session, name, given)
    assert_refused(result, text, "root")
    assert text.endswith("is outside the served root"), text


@pytest.mark.anyio
async def test_relative_folders_are_the_roots_and_inside_it_runs(
    catalog: Catalog, served: Path
) -> None:
    """A relative folder is relative to the served root (not the working directory), and
    a folder inside the root runs as before; one that is not there is not probed outside."""
    async with session_with(create_mcp_server(catalog, root=served)) as session:
        result, _ = await call(session, "has-readme", {"root": "proj"})
        assert result.structured_content["passed"] is True
        result, _ = await call(session, "has-readme", {"root": str(served / "proj")})
        assert result.structured_content["passed"] is True
        result, text = await call(session, "has-readme", {"root": "gone"})
        assert result.is_error and text == "argument 'root': no such folder: gone"
        result, text = await call(session, "has-readme", {"root": "/no/such/folder"})
        assert_refused(result, text, "root")


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "arguments", "argument"),
    [
        ("regex", {"root": "proj", "pattern": "x", "files": "../../outside/shadow"}, "files"),
        ("regex", {"root": "proj", "pattern": "x", "files": "/etc/*"}, "files"),
        ("regex", {"root": "proj", "pattern": "x", "exclude": ["ok", "../x"]}, "exclude"),
        ("python_syntax", {"root": "proj", "include": "src/../../x.py"}, "include"),
        ("unittest_suite", {"root": "proj", "start": "/etc"}, "start"),
        ("unittest_suite", {"root": "proj", "paths": ["src", "../../outside"]}, "paths"),
        ("pytest_suite", {"root": "proj", "args": ["-q", "--basetemp=/home/me"]}, "args"),
        ("pytest_suite", {"root": "proj", "args": ["--rootdir", "../.."]}, "args"),
        ("pytest_suite", {"root": "proj", "args": ["-o", "cache_dir=/tmp/x"]}, "args"),
        ("pytest_suite", {"root": "proj", "args": ["-c/etc/passwd"]}, "args"),
    ],
)
async def test_path_arguments_of_built_ins_stay_in_their_folder(
    catalog: Catalog, served: Path, name: str, arguments: dict[str, Any], argument: str
) -> None:
    """The built-ins' arguments that name paths inside the folder (globs, test folders,
    pytest's options) may not lead out of it: refused before the validation runs."""
    async with session_with(create_mcp_server(catalog, root=served)) as session:
        result, text = await call(session, name, arguments)
    assert_refused(result, text, argument)
    assert "leads outside the folder it checks" in text


@pytest.mark.anyio
async def test_a_wrapping_validation_keeps_the_path_arguments_it_maps(
    catalog: Catalog, served: Path
) -> None:
    """A validation that wraps a built-in and renames its glob argument is checked under
    the name the call gives it."""
    catalog.add(
        Validation.from_config(
            {
                "name": "search",
                "wraps": "regex",
                "argument_mapping": {"pattern": "$what", "files": "$where"},
                "transform": "{'passed': output['passed']}",
            }
        )
    )
    async with session_with(create_mcp_server(catalog, root=served)) as session:
        result, text = await call(
            session, "search", {"root": "proj", "what": "x", "where": "../../outside/*"}
        )
    assert_refused(result, text, "where")


@pytest.mark.anyio
@pytest.mark.parametrize("builtins", [True, False])
async def test_run_plan_refuses_a_graph_outside_the_root(served: Path, builtins: bool) -> None:
    """A graph file outside the root is refused without being read: no line of it comes
    back, with or without the built-ins."""
    with Catalog.in_memory() as catalog:
        server = create_mcp_server(catalog, plans=True, builtins=builtins, root=served)
        async with session_with(server) as session:
            for graph in (str(served.parent / "outside" / "shadow"), "link/shadow"):
                result, text = await call(session, RUN_PLAN, {"graph": graph})
                assert_refused(result, text, "graph")


@pytest.mark.anyio
async def test_a_file_that_is_no_graph_is_not_echoed(served: Path) -> None:
    """A file inside the root that is not a plan graph is one short line: the file
    relative to the root and its first problem, none of its lines."""
    secrets = served / "notes.txt"
    secrets.write_text("\n".join(f"{name}: {SECRET}" for name in ("root", "daemon", "bin")) + "\n")
    shadow = served / "shadow"
    shadow.write_text("\n".join([SECRET, "bin:*:19000:0:99999:7:::"]) + "\n")
    broken = served / "broken.yaml"
    broken.write_text(f"nodes: [\n  {SECRET}\n")
    with Catalog.in_memory() as catalog:
        async with session_with(create_mcp_server(catalog, plans=True, root=served)) as session:
            for path in (secrets, shadow, broken):
                result, text = await call(session, RUN_PLAN, {"graph": str(path)})
                assert result.is_error, text
                assert text.startswith(f"argument 'graph': {path.name}:"), text
                assert "\n" not in text and "secrethash" not in text and "19000" not in text
                assert len(text) < 300, text


def plan_in(served: Path) -> Path:
    shutil.copytree(DEMO, served / "demo")
    return served / "demo" / "plan.yaml"


@pytest.mark.anyio
async def test_run_plan_applies_nothing_outside_the_root(served: Path) -> None:
    """A plan may not run on a folder outside the root, whether the call names it in
    `resources` or the graph declares it: refused, and nothing is written there."""
    plan = plan_in(served)
    victim = served.parent / "victim"
    shutil.copytree(DEMO / "project", victim)
    own = served / "demo" / "own.yaml"
    own.write_text(plan.read_text().replace("path: project", f"path: {victim}"))
    with Catalog.in_memory() as catalog:
        server = create_mcp_server(
            catalog, plans=True, root=served, event_log_path=served.parent / "events.db"
        )
        async with session_with(server) as session:
            for folder in (str(victim), "link", "demo/../.."):
                result, text = await call(
                    session, RUN_PLAN, {"graph": str(plan), "resources": {"project": folder}}
                )
                assert_refused(result, text, "resources")
            result, text = await call(session, RUN_PLAN, {"graph": "demo/own.yaml"})
            assert_refused(result, text, "graph")
            assert "resource 'project'" in text
            # Inside the root, the same plan runs to the end.
            inside = served / "copy"
            shutil.copytree(DEMO / "project", inside)
            result, _ = await call(
                session, RUN_PLAN, {"graph": "demo/plan.yaml", "resources": {"project": "copy"}}
            )
            assert result.structured_content["status"] == "applied"
    assert not (victim / "src" / "farewell.py").exists()
    assert (inside / "src" / "farewell.py").exists()


def test_root_option_is_documented_and_checked(tmp_path: Path) -> None:
    """`--root` is in the command's help, and one that is not a folder is one line."""
    runner = CliRunner()
    result = runner.invoke(cli, ["mcp", "serve", "--help"])
    assert result.exit_code == 0 and "--root DIR" in result.stdout
    result = runner.invoke(cli, ["mcp", "serve", "--root", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert result.stderr == f"error: --root: no such folder: {tmp_path / 'nope'}\n"


@pytest.mark.anyio
async def test_serve_root_over_stdio(tmp_path: Path, served: Path) -> None:
    """`gategraph mcp serve --root DIR` over stdio: relative folders are the root's, and a
    folder outside it is refused."""
    home = make_home(tmp_path)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gategraph.runtime", "mcp", "serve", "--root", str(served)],
        env=server_env(home),
        cwd=str(tmp_path),
    )
    with (tmp_path / "stderr.txt").open("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result, _ = await call(session, "has-readme", {"root": "proj"})
                assert result.structured_content["passed"] is True
                result, text = await call(
                    session,
                    "regex",
                    {"root": str(served.parent / "outside"), "pattern": "root:.*"},
                )
                assert_refused(result, text, "root")


# -- 8: the advertised schema is the one checked -----------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "arguments", "lines"),
    [
        ("has-readme", {"root": "proj", "name": 5}, ["argument 'name': 5 is not of type 'string'"]),
        (
            "not-empty",
            {"files": {}, "minimum": "3"},
            ["argument 'minimum': '3' is not of type 'integer'"],
        ),
        (
            "has-readme",
            {"root": "gone", "name": [], "nmae": 1},
            [
                "argument 'root': no such folder: gone",
                "argument 'name': [] is not of type 'string'",
                "unknown argument 'nmae' (did you mean 'name'?); 'has-readme' takes: name",
            ],
        ),
    ],
)
async def test_arguments_are_checked_against_the_advertised_schema(
    catalog: Catalog, served: Path, name: str, arguments: dict[str, Any], lines: list[str]
) -> None:
    """A value the listed inputSchema refuses is an isError result before anything runs,
    one line per problem, each naming its argument."""
    async with session_with(create_mcp_server(catalog, root=served)) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        properties = tools[name].input_schema["properties"]
        assert all(
            "type" in properties[line.split("'")[1]] for line in lines if "is not of" in line
        )
        result, text = await call(session, name, arguments)
    assert result.is_error and result.structured_content is None, text
    assert text.splitlines() == lines


@pytest.mark.anyio
async def test_a_long_value_is_not_said_at_length(catalog: Catalog, served: Path) -> None:
    """A refused value is quoted, cut short: the error stays a line, not the value."""
    async with session_with(create_mcp_server(catalog, root=served)) as session:
        result, text = await call(session, "has-readme", {"root": "proj", "name": ["x" * 10_000]})
    assert result.is_error and text.startswith("argument 'name': ['xxx")
    assert "\n" not in text and len(text) <= 300


# -- 10: the plan tools' names are reserved ------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("plans", [True, False])
async def test_a_catalog_entry_cannot_take_a_plan_tools_name(
    catalog: Catalog, served: Path, plans: bool
) -> None:
    """A catalog entry named like a plan tool is not served, with --plans or without, and
    the server says so once; with --plans the name is the plan tool's, listed and called."""
    for name in (RUN_PLAN, PLANS_WAITING):
        catalog.add(
            Validation.from_config(
                {"name": name, "code": "def run():\n    return {'passed': True}\n"}
            )
        )
    told: list[str] = []
    server = create_mcp_server(catalog, plans=plans, root=served, warn=told.append)
    async with session_with(server) as session:
        for _ in range(2):
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        result, text = await call(session, RUN_PLAN, {})
        if plans:
            assert "graph" in tools[RUN_PLAN].input_schema["properties"]
            assert tools[PLANS_WAITING].output_schema is not None
            assert "plans" in tools[PLANS_WAITING].output_schema["properties"]
            assert result.is_error and text == "missing argument 'graph' (the plan graph file)"
        else:
            assert RUN_PLAN not in tools and PLANS_WAITING not in tools
            assert result.is_error and text == f"Unknown tool: {RUN_PLAN}"
    assert sorted(told) == [
        f"not serving {name}: the name is reserved for the plan tool (--plans)"
        for name in sorted(PLAN_TOOLS)
    ]


# -- 1: read-only claims that rest on nobody's word ----------------------------------------


@pytest.mark.anyio
async def test_a_validation_over_an_undeclared_mcp_tool_is_not_served(
    catalog: Catalog, served: Path
) -> None:
    """A validation that wraps (directly or through another) an MCP tool whose record does
    not say it only reads is not offered as read-only: not listed, said once, unknown to a
    call; one over a tool recorded read-only is served."""
    catalog.add_server(McpServer.from_config({"command": "true"}, name="h"))
    catalog.add(Tool.from_config({"name": "rmrf", "mcp_server": "h", "mcp_tool_name": "destroy"}))
    catalog.add(
        Tool.from_config(
            {"name": "peek", "mcp_server": "h", "mcp_tool_name": "peek", "read_only": True}
        )
    )
    catalog.add(
        Validation.from_config({"name": "harmless", "wraps": "rmrf", "transform": "output"})
    )
    catalog.add(
        Validation.from_config({"name": "harmless-2", "wraps": "harmless", "transform": "output"})
    )
    catalog.add(Validation.from_config({"name": "looks", "wraps": "peek", "transform": "output"}))
    catalog.add(
        Validation.from_config(
            {"name": "trusted", "wraps": "rmrf", "transform": "output", "trust_read_only": True}
        )
    )
    told: list[str] = []
    async with session_with(create_mcp_server(catalog, root=served, warn=told.append)) as session:
        for _ in range(2):
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert "harmless" not in tools and "harmless-2" not in tools
        assert tools["looks"].annotations is not None
        assert tools["looks"].annotations.read_only_hint is True
        assert "trusted" in tools  # the validation vouches for the tool, knowingly
        result, text = await call(session, "harmless", {})
        assert result.is_error and text == "Unknown tool: harmless"
    reason = (
        "it calls the MCP tool 'destroy' of server 'h', which neither its server declares "
        "read-only (readOnlyHint) nor the validation trusts (trust_read_only), so it cannot "
        "be offered as read-only"
    )
    assert sorted(told) == [f"not serving harmless-2: {reason}", f"not serving harmless: {reason}"]


# -- 12 and 15: what a user reads ----------------------------------------------------------


@pytest.mark.anyio
async def test_errors_do_not_speak_pydantic(served: Path) -> None:
    """A graph field of the wrong type reads as plain words, not pydantic's."""
    (served / "g.yaml").write_text(
        "version: 1\nname: g\nnodes:\n  - {id: a, validation: regex, arguments: {pattern: x}}\n"
        "policy: {retry_limit: lots}\n"
    )
    with Catalog.in_memory() as catalog:
        async with session_with(create_mcp_server(catalog, plans=True, root=served)) as session:
            result, text = await call(session, RUN_PLAN, {"graph": "g.yaml"})
    assert result.is_error
    assert text.startswith("argument 'graph': g.yaml:5:"), text
    assert "policy.retry_limit: must be a valid integer" in text
    assert "Input should" not in text and "pydantic" not in text


@pytest.mark.anyio
async def test_what_a_client_reads_cites_no_spec(catalog: Catalog, served: Path) -> None:
    """Tool descriptions, the server's instructions and the command's help cite neither
    the specification's seeds nor issues."""
    words = ("seed", "issue", "adr-")
    async with session_with(create_mcp_server(catalog, plans=True, root=served)) as session:
        tools = (await session.list_tools()).tools
    texts = [tool.description or "" for tool in tools]
    texts += [str(tool.input_schema) + str(tool.output_schema) for tool in tools]
    server = create_mcp_server(catalog, root=served)
    texts.append(server.instructions or "")
    texts.append(CliRunner().invoke(cli, ["mcp", "serve", "--help"]).stdout)
    for text in texts:
        assert not any(word in text.lower() for word in words), text


def test_the_page_documents_the_root() -> None:
    """docs/mcp-serve.md lists --root with the options."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "mcp-serve.md").read_text()
    assert "| `--root DIR` |" in page


# -- what holds a served validation ---------------------------------------------------------

CTYPES_WRITER = """\
def run(root):
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    path = os.path.join(str(root), "by-ctypes.txt").encode()
    fd = libc.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    if fd >= 0:
        libc.write(fd, b"written", 7)
        libc.close(fd)
    return {"passed": True, "message": "wrote nothing, it says"}
"""


@pytest.mark.anyio
@pytest.mark.skipif(support().missing is not None, reason="no sandbox here")
async def test_a_write_the_guard_cannot_see_does_not_happen(
    catalog: Catalog, project: Path
) -> None:
    """Native code the in-process guard cannot see (ctypes): a catalog validation served
    runs in the kernel sandbox, so the write never happens, and the result says what held
    it."""
    slot = {"name": "root", "kind": "directory"}
    catalog.add(
        Validation.from_config({"name": "native", "code": CTYPES_WRITER, "resource_slots": [slot]})
    )
    async with session_with(create_mcp_server(catalog)) as session:
        result, _ = await call(session, "native", {"root": str(project)})
    assert not (project / "by-ctypes.txt").exists()
    assert result.structured_content["enforced_by"] == "kernel"


@pytest.fixture
def no_kernel_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    from gategraph.runtime._base import _kernel

    monkeypatch.setattr(
        _kernel, "support", lambda: _kernel.Support(0, False, "x86_64", "no Landlock here")
    )


@pytest.mark.anyio
@pytest.mark.usefixtures("no_kernel_sandbox")
async def test_required_the_sandbox_refuses_where_there_is_none(
    catalog: Catalog, project: Path
) -> None:
    """Where the machine cannot sandbox, a server that requires it runs no validation
    (one line says why); without the requirement, the guard holds it and the result says
    so."""
    async with session_with(create_mcp_server(catalog, require_sandbox=True)) as session:
        result, text = await call(session, "has-readme", {"root": str(project)})
        assert result.is_error and "sandbox: no Landlock here" in text, text
        # Required, it holds for every validation, gategraph's own built-ins too.
        result, text = await call(session, "python_syntax", {"root": str(project)})
        assert result.is_error and "sandbox: no Landlock here" in text, text
    with pytest.warns(RuntimeWarning):
        async with session_with(create_mcp_server(catalog)) as session:
            result, _ = await call(session, "has-readme", {"root": str(project)})
    assert result.structured_content["enforced_by"] == "guard"


@pytest.mark.usefixtures("no_kernel_sandbox")
def test_mcp_serve_require_sandbox_refuses_to_start_where_there_is_none() -> None:
    result = CliRunner().invoke(cli, ["mcp", "serve", "--require-sandbox"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --require-sandbox: this machine cannot sandbox (no Landlock here): nothing served"
    ]


@pytest.mark.anyio
async def test_a_served_plan_is_held_to_the_sandbox_when_it_is_required(tmp_path: Path) -> None:
    """With --plans, a plan a client names is loaded as if its policy required the
    sandbox: a node that declares another isolation is refused before anything runs."""
    plan = demo_copy(tmp_path)
    text = plan.read_text()
    trusting = plan.with_name("trusting.yaml")
    trusting.write_text(
        text.replace(
            "{id: syntax, validation: syntax}",
            "{id: syntax, validation: syntax, isolation: thread}",
        )
    )
    with Catalog.in_memory() as catalog:
        served = create_mcp_server(catalog, plans=True, require_sandbox=True)
        async with session_with(served) as session:
            result, said = await call(session, RUN_PLAN, {"graph": str(trusting)})
    assert result.is_error and "isolation" in said, said
