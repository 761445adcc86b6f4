"""Error paths of MCP server declarations and the ``gategraph mcp`` commands that need no
running server: each bad input is one clear line (or one ConfigError issue per field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from click.testing import CliRunner, Result
from gategraph.runtime import Catalog, ConfigError, tool_from_config
from gategraph.runtime._base._exceptions import ConfigIssue
from gategraph.runtime._calls._mcp import (
    McpCall,
    McpServer,
    McpServerRef,
    McpSessions,
    McpToolInfo,
    McpUse,
    _canonical,
    _deduplicated,
)
from gategraph.runtime._cli import cli
from gategraph.runtime._cli._mcp import _type_of

# -- declarations ------------------------------------------------------------------------------


def problems(config: Any, **kwargs: Any) -> list[str]:
    """The rendered issues of a declaration that must be refused."""
    with pytest.raises(ConfigError) as caught:
        McpServer.from_config(config, **kwargs)
    return [f"{issue.field}: {issue.message}" for issue in caught.value.issues]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"command": "  "}, "command: must not be empty"),
        ({"url": "http://h/mcp", "headers": {"bad header": "x"}}, "is not an HTTP header name"),
        ({"url": "http://h/mcp", "headers": {"X-A": "a\nb"}}, "header 'X-A' spans lines"),
        ({"url": "http://h:99999/mcp"}, "'http://h:99999/mcp' has an invalid port"),
        ({"command": "x", "headers": {"X-A": "1"}}, "`headers` are only for a server reached"),
        ({"url": "http://h/mcp", "args": ["a"], "cwd": "/"}, "`args`, `cwd` are only for a"),
    ],
)
def test_a_bad_field_is_named(config: dict[str, Any], expected: str) -> None:
    found = problems(config, name="s")
    assert len(found) == 1 and expected in found[0], found


def test_a_declaration_that_is_not_a_mapping() -> None:
    with pytest.raises(ConfigError) as caught:
        McpServer.from_config(["command", "x"], name="s", source="plan.yaml")  # type: ignore[arg-type]
    text = str(caught.value)
    assert text.count("\n") == 0 and text.startswith("plan.yaml")
    assert "an MCP server is a mapping of fields" in text


def test_a_name_that_is_not_the_key() -> None:
    assert problems({"name": "other", "command": "x"}, name="s") == [
        "name: must be 's', the server's key"
    ]


def test_an_unknown_field_far_from_any_is_not_guessed() -> None:
    found = problems({"command": "x", "zzzzzz": 1}, name="s")
    assert found == ["zzzzzz: unknown field"]


# -- schemas, issue lists -------------------------------------------------------------------------


def test_a_schema_gategraph_cannot_read_is_left_to_the_server() -> None:
    tool = McpToolInfo({"name": "t", "inputSchema": {"type": 12}})
    assert McpToolInfo.checkable(tool.input_schema) is False
    assert tool.argument_problem({"a": 1}) is None
    assert tool.argument_problem({"a": 2}) is None  # the verdict is kept


def test_a_readable_schema_checks_arguments() -> None:
    tool = McpToolInfo(
        {"name": "t", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    )
    assert tool.argument_problem({"n": 1}) is None
    assert tool.argument_problem({"n": "x"}) == "'x' is not of type 'integer' (at n)"


def test_issues_are_said_once_and_at_most_a_few() -> None:
    issues = [ConfigIssue(f"problem {i}", f"nodes[{i}]") for i in range(25)]
    issues.append(ConfigIssue("problem 0", "nodes[99]"))  # the same message: said once
    out = _deduplicated(issues)
    assert [issue.message for issue in out[:20]] == [f"problem {i}" for i in range(20)]
    assert out[-1].message == "and 5 more problem(s) of the same kind" and len(out) == 21


def test_arguments_that_are_not_json_have_a_canonical_form() -> None:
    looped: dict[str, Any] = {}
    looped["self"] = looped
    assert _canonical(looped) == repr(looped)
    assert _canonical({"b": 1, "a": 2}) == '{"a": 2, "b": 1}'


@pytest.mark.anyio
async def test_sessions_outside_their_block_are_refused() -> None:
    with pytest.raises(RuntimeError, match="McpSessions is used outside its `async with`"):
        await McpSessions().connect([McpServer(name="s", command="x")])


@pytest.mark.anyio
async def test_bind_names_an_unknown_server_once_at_its_first_use() -> None:
    calls = [
        McpCall(tool_from_config({"name": f"t{i}", "mcp_server": "gone", "mcp_tool_name": "a"}))
        for i in range(2)
    ]
    uses = [McpUse(call, f"nodes[{i}].tool") for i, call in enumerate(calls)]
    async with McpSessions() as sessions:
        with pytest.raises(ConfigError) as caught:
            await sessions.bind(uses, lambda name: None, source="plan.yaml")
    issues = caught.value.issues
    assert len(issues) == 1 and issues[0].field == "nodes[0].tool"
    assert issues[0].message.startswith("unknown MCP server 'gone': declare it under")


async def binding_refused() -> list[ConfigIssue]:
    """Bind a call to a server that could not start: the issues of the refusal, which
    started nothing (the call holds no connection)."""
    call = McpCall(tool_from_config({"name": "t", "mcp_server": "s", "mcp_tool_name": "a"}))
    server = McpServer(name="s", command="gategraph-no-such-mcp-server")
    async with McpSessions() as sessions:
        with pytest.raises(ConfigError) as caught:
            await sessions.bind(
                [McpUse(call, "nodes[0].tool")], lambda name: McpServerRef(server, "graph")
            )
    assert call.connection is None
    return caught.value.issues


@pytest.mark.anyio
async def test_bind_without_the_sdk_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    issues = await binding_refused()
    assert [(i.field, i.message) for i in issues] == [
        ("nodes[0].tool", "calling MCP tools needs the mcp extra: pip install 'gategraph[mcp]'")
    ]


# -- the command line -------------------------------------------------------------------------------


def invoke(catalog: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--catalog", str(catalog), "mcp", *args], prog_name="gategraph")


def one_line_error(result: Result, exit_code: int, text: str) -> None:
    assert result.exit_code == exit_code, result.output
    assert result.stderr.count("\n") == 1 and text in result.stderr, result.stderr
    assert "Traceback" not in result.output


def test_cli_a_key_given_twice(tmp_path: Path) -> None:
    done = invoke(tmp_path / "c.db", "add", "x", "--command", "c", "--env", "A=1", "--env", "A=2")
    one_line_error(done, 2, "--env A: given twice")
    assert not (tmp_path / "c.db").exists()


def test_cli_adding_a_server_twice_is_refused_without_update(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    assert invoke(db, "add", "x", "--command", "c").exit_code == 0
    one_line_error(invoke(db, "add", "x", "--command", "d"), 1, "exists already")
    updated = invoke(db, "add", "x", "--update", "--command", "d")
    assert updated.exit_code == 0 and updated.stdout.startswith("updated MCP server x (stdio: d)")


def test_cli_lists_servers_as_a_table(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    invoke(db, "add", "a", "--command", "c", "--arg", "-v", "--description", "first\nsecond")
    invoke(db, "add", "b", "--url", "http://127.0.0.1:1/mcp")
    listed = invoke(db, "list")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["NAME", "TRANSPORT", "TOOLS", "TARGET", "DESCRIPTION"]
    assert lines[1].split() == ["a", "stdio", "0", "c", "-v", "first"]
    assert lines[2].split() == ["b", "http", "0", "http://127.0.0.1:1/mcp"]


def test_cli_a_server_its_tools_use_is_not_removed(tmp_path: Path) -> None:
    db = tmp_path / "c.db"
    with Catalog.open(db) as catalog:
        catalog.add_server(McpServer(name="s", command="c"))
        catalog.add(tool_from_config({"name": "s.t", "mcp_server": "s", "mcp_tool_name": "t"}))
    one_line_error(invoke(db, "remove", "s"), 1, "'s' is used by s.t; remove those first")


def test_cli_without_the_sdk_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    db = tmp_path / "c.db"
    invoke(db, "add", "s", "--command", "c")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a)
    )
    one_line_error(invoke(db, "tools", "s"), 2, "calling MCP tools needs the mcp extra")


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        ("not a schema", "any"),
        ({"type": ["string", "null"]}, "string | null"),
        ({"enum": ["a", 1]}, 'one of "a", 1'),
        (
            {"anyOf": [{"type": "integer"}, {"type": "array", "items": {}}]},
            "integer | array of any",
        ),
        ({}, "any"),
    ],
)
def test_argument_types_as_tools_shows_them(schema: Any, shown: str) -> None:
    assert _type_of(schema) == shown
