"""The ``gategraph`` command line: every command, its output, exit codes and errors.

Exit codes: 0 done, 1 refused, 2 usage or configuration error. Errors are ``error: ...``
lines on standard error naming the file and the field, without a traceback, and a command
that fails writes nothing.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from _helpers import run_process
from click.testing import CliRunner, Result
from gategraph.runtime import (
    Capability,
    Catalog,
    NotFoundError,
    ResourceSlot,
    Scope,
    Tool,
    ToolSource,
    Validation,
    ValidationMode,
    __version__,
)
from gategraph.runtime._cli import _main as cli_module
from gategraph.runtime._cli import cli

ULID_LINE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}\n$")
CODE = "def run(**kw):\n    return {'passed': True}"
ATTACHMENT_KEYS = ["id", "validation", "resource", "scope", "project", "plan", "arguments"]

TOOL_YAML = """\
name: pytest
description: Run the test suite
code: |
  def run(**kw):
      return {'passed': True}
input_schema:
  type: object
resource_slots: [repo]
timeout: 30
"""

WRAPPER_YAML = """\
name: tests-pass
description: The tests pass
wraps: pytest
transform: "{'passed': output['passed']}"
"""

INLINE_YAML = """\
name: lint
mode: informational
code: |
  def run(**kw):
      return {'passed': True}
"""


# -- helpers ---------------------------------------------------------------------------------


def invoke(
    catalog: Path | None, *args: str, input: str | None = None, env: dict[str, str] | None = None
) -> Result:
    """Run the CLI in-process, as ``gategraph [--catalog CATALOG] ARGS``."""
    prefix = ["--catalog", str(catalog)] if catalog is not None else []
    return CliRunner().invoke(
        cli,
        [*prefix, *args],
        input=input,
        env=env,
        prog_name="gategraph",
        catch_exceptions=False,
    )


def assert_ok(result: Result) -> None:
    """The command succeeded and printed nothing on standard error."""
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


def assert_error(result: Result, exit_code: int, *needles: str) -> list[str]:
    """The command failed with ``exit_code``; stderr is only ``error:`` lines with needles."""
    assert result.exit_code == exit_code, (result.stdout, result.stderr)
    assert "Traceback" not in result.output
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines, "no error message"
    assert all(line.startswith("error: ") for line in lines), lines
    for needle in needles:
        assert needle in result.stderr, (needle, result.stderr)
    return lines


def snapshot(catalog: Path) -> Any:
    """What a failed command must leave alone: the catalog's folder and file, byte for byte."""
    if not catalog.parent.exists():
        return None
    files = {p.name: p.read_bytes() for p in sorted(catalog.parent.iterdir()) if p.is_file()}
    return files


def write(folder: Path, name: str, text: str | bytes) -> Path:
    """Write a config file and return its path."""
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def json_out(result: Result) -> Any:
    """Parse the command's standard output as JSON."""
    assert_ok(result)
    return json.loads(result.stdout)


@pytest.fixture(autouse=True)
def _no_catalog_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads a catalog named by the developer's environment."""
    monkeypatch.delenv("GATEGRAPH_CATALOG", raising=False)


@pytest.fixture
def catalog(tmp_path: Path) -> Path:
    """Where the catalog goes: a file in a folder that does not exist yet."""
    return tmp_path / "state" / "c.db"


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A folder for config files."""
    folder = tmp_path / "configs"
    folder.mkdir()
    return folder


@pytest.fixture
def populated(catalog: Path) -> Path:
    """A catalog with a tool, a wrapping and an inline validation, a writing tool, one attachment."""
    with Catalog.open(catalog) as opened:
        opened.add(
            Tool(
                name="pytest",
                source=ToolSource.CODE,
                code=CODE,
                input_schema={"type": "object"},
                resource_slots=(ResourceSlot(name="repo"),),
                timeout=30,
            )
        )
        opened.add(
            Tool(
                name="deploy",
                source=ToolSource.CODE,
                code=CODE,
                capability=Capability(writes=True),
            )
        )
        opened.add(Validation(name="tests-pass", wraps="pytest", transform="output"))
        opened.add(Validation(name="outer", wraps="tests-pass", transform="output"))
        opened.add(
            Validation(
                name="lint",
                source=ToolSource.CODE,
                code=CODE,
                mode=ValidationMode.INFORMATIONAL,
            )
        )
        opened.attach("repo", "lint", arguments={"strict": True})
    return catalog


def attachments(catalog: Path) -> list[dict[str, Any]]:
    """The catalog's attachments, as `validation attachments --json` prints them."""
    result: list[dict[str, Any]] = json_out(invoke(catalog, "validation", "attachments", "--json"))
    return result


# -- version, help, no command ------------------------------------------------------------------


def _command_paths(command: click.Command, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _command_paths(sub, (*path, name))


COMMAND_PATHS = list(_command_paths(cli))


def test_every_expected_command_exists() -> None:
    """The CLI offers exactly the seed 004 tool and validation commands, the skill
    commands, and the engine's."""
    assert COMMAND_PATHS == [
        (),
        ("approve",),
        ("check",),
        ("decide",),
        ("demo",),
        ("events",),
        ("execute",),
        ("graph",),
        ("mcp",),
        ("mcp", "add"),
        ("mcp", "import"),
        ("mcp", "list"),
        ("mcp", "remove"),
        ("mcp", "serve"),
        ("mcp", "tools"),
        ("plans",),
        ("replay",),
        ("report",),
        ("resume",),
        ("run",),
        ("schema",),
        ("show",),
        ("skill",),
        ("skill", "add"),
        ("skill", "list"),
        ("skill", "remove"),
        ("skill", "show"),
        ("tool",),
        ("tool", "add"),
        ("tool", "list"),
        ("tool", "remove"),
        ("tool", "show"),
        ("validation",),
        ("validation", "add"),
        ("validation", "attach"),
        ("validation", "attachments"),
        ("validation", "detach"),
        ("validation", "list"),
        ("validation", "resolve"),
        ("validator",),
        ("validator", "register"),
        ("validator", "revoke"),
    ]


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "gategraph")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_on_every_command(path: tuple[str, ...], flag: str, catalog: Path) -> None:
    """--help and -h print usage for every command, exit 0 and write nothing."""
    result = invoke(None, *path, flag)
    assert_ok(result)
    assert result.stdout.startswith(f"Usage: gategraph {' '.join(path)}".rstrip())
    assert "Traceback" not in result.output
    assert not catalog.parent.exists()


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str) -> None:
    """--version prints the package version and exits 0."""
    result = invoke(None, flag)
    assert_ok(result)
    assert result.stdout == f"gategraph, version {__version__}\n"


@pytest.mark.parametrize(
    "path", [(), ("tool",), ("validation",)], ids=["root", "tool", "validation"]
)
def test_a_group_without_a_command_is_a_usage_error(path: tuple[str, ...]) -> None:
    """A group without a subcommand exits 2 with one error line, not the help page as errors."""
    result = invoke(None, *path)
    lines = assert_error(result, 2, "missing a command", "--help")
    assert len(lines) == 1
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["tool", "frobnicate"], "No such command"),
        (["tool", "list", "--bogus"], "--bogus"),
        (["tool", "list", "--type", "widget"], "--type"),
        (["tool", "show"], "NAME"),
        (["validation", "attach", "repo"], "VALIDATION"),
        (["validation", "add"], "--config"),
    ],
)
def test_click_usage_errors_exit_2(args: list[str], needle: str, catalog: Path) -> None:
    """Unknown commands and options, bad choices and missing arguments exit 2 and write nothing."""
    result = invoke(catalog, *args)
    lines = assert_error(result, 2, needle, "--help")
    assert len(lines) == 1
    assert not catalog.parent.exists()


# -- tool add / list / show / remove -------------------------------------------------------------


def test_tool_add_then_update(catalog: Path, configs: Path) -> None:
    """tool add registers a tool and --update replaces it, each saying so on one line."""
    config = write(configs, "t.yaml", TOOL_YAML)
    result = invoke(catalog, "tool", "add", "--config", str(config))
    assert_ok(result)
    assert result.stdout == "added tool pytest\n"
    write(configs, "t.yaml", TOOL_YAML.replace("timeout: 30", "timeout: 45"))
    result = invoke(catalog, "tool", "add", "--config", str(config), "--update")
    assert_ok(result)
    assert result.stdout == "updated tool pytest\n"
    with Catalog.open(catalog) as opened:
        assert opened.get("pytest").timeout == 45


def test_tool_add_reads_json(catalog: Path, configs: Path) -> None:
    """A JSON config file is accepted as well as YAML."""
    config = write(
        configs, "t.json", json.dumps({"name": "fmt", "entrypoint": "tools.fmt:run", "timeout": 3})
    )
    assert_ok(invoke(catalog, "tool", "add", "--config", str(config)))
    shown = json_out(invoke(catalog, "tool", "show", "fmt", "--json"))
    assert shown["source"] == "python"
    assert shown["entrypoint"] == "tools.fmt:run"


def test_tool_add_of_a_validation_config(catalog: Path, configs: Path) -> None:
    """tool add registers a validation when the file says tool_type: validation."""
    config = write(configs, "v.yaml", "tool_type: validation\n" + INLINE_YAML)
    result = invoke(catalog, "tool", "add", "--config", str(config))
    assert_ok(result)
    assert result.stdout == "added validation lint\n"


def test_catalog_from_gategraph_home(
    tmp_path: Path, configs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --catalog the catalog is $GATEGRAPH_HOME/gategraph.db."""
    home = tmp_path / "home"
    monkeypatch.setenv("GATEGRAPH_HOME", str(home))
    config = write(configs, "t.yaml", TOOL_YAML)
    assert_ok(invoke(None, "tool", "add", "--config", str(config)))
    assert (home / "gategraph.db").is_file()
    listed = json_out(invoke(None, "tool", "list", "--json"))
    assert [t["name"] for t in listed if t["origin"] == "catalog"] == ["pytest"]


def test_catalog_from_the_working_directory(
    tmp_path: Path, configs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --catalog or GATEGRAPH_HOME the catalog is ./.gategraph/gategraph.db."""
    monkeypatch.delenv("GATEGRAPH_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    config = write(configs, "t.yaml", TOOL_YAML)
    assert_ok(invoke(None, "tool", "add", "--config", str(config)))
    assert (tmp_path / ".gategraph" / "gategraph.db").is_file()


def test_catalog_from_gategraph_catalog_env(tmp_path: Path, configs: Path) -> None:
    """GATEGRAPH_CATALOG names the catalog file like --catalog does."""
    path = tmp_path / "env" / "x.db"
    config = write(configs, "t.yaml", TOOL_YAML)
    env = {"GATEGRAPH_CATALOG": str(path)}
    assert_ok(invoke(None, "tool", "add", "--config", str(config), env=env))
    assert path.is_file()


def test_tool_list_text(populated: Path) -> None:
    """tool list prints a table sorted by name with type, mode, what each may do to what it
    is given, and source."""
    result = invoke(populated, "tool", "list")
    assert_ok(result)
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "MODE", "ACCESS", "SOURCE", "DESCRIPTION"]
    rows = [[cell.strip() for cell in line.split("  ") if cell.strip()][:5] for line in lines[1:-2]]
    assert rows == [
        ["deploy", "tool", "-", "writes", "code"],
        ["lint", "validation", "informational", "read-only", "code"],
        ["outer", "validation", "required", "read-only", "wrapped"],
        ["pytest", "tool", "-", "may write", "code"],
        ["tests-pass", "validation", "required", "read-only", "wrapped"],
    ]
    assert lines[-2].startswith("built-in validations, usable by name without registering: ")
    assert lines[-1].startswith("built-in tools, usable by name without registering: spawn.")


@pytest.mark.parametrize(
    ("args", "names"),
    [
        ([], ["deploy", "lint", "outer", "pytest", "tests-pass"]),
        (["--type", "tool"], ["deploy", "pytest"]),
        (["--type", "validation"], ["lint", "outer", "tests-pass"]),
    ],
)
def test_tool_list_json(populated: Path, args: list[str], names: list[str]) -> None:
    """tool list --json is the as_cli_dict of each entry, in name order and key order, with
    where it comes from and what it may do; then the built-ins the text names."""
    listed = json_out(invoke(populated, "tool", "list", "--json", *args))
    access = {"deploy": "writes", "pytest": "may write"}  # the validations: read-only
    with Catalog.open(populated) as opened:
        expected = [
            {
                **opened.get(name).as_cli_dict(),
                "origin": "catalog",
                "access": access.get(name, "read-only"),
            }
            for name in names
        ]
    assert listed[: len(names)] == expected
    assert [list(item) for item in listed[: len(names)]] == [list(item) for item in expected]
    kinds = {"tool": {"tool"}, "validation": {"validation"}}.get(args[-1] if args else "")
    rest = listed[len(names) :]
    assert rest and {item["origin"] for item in rest} == {"builtin"}
    assert {item["tool_type"] for item in rest} == (kinds or {"tool", "validation"})


def test_access_says_what_holds_an_entry_to_what_it_declares() -> None:
    """A validation is read-only; one over an MCP tool whose server is only trusted to
    read says so; a tool is what its capability declares, or `may write`."""
    access = cli_module._access
    trusted = Validation(
        name="lint.check",
        source=ToolSource.MCP,
        mcp_server="s",
        mcp_tool_name="t",
        trust_read_only=True,
    )
    assert [
        access(trusted),
        access(Validation(name="v", source=ToolSource.CODE, code=CODE)),
        access(Tool(name="t", source=ToolSource.CODE, code=CODE)),
        access(
            Tool(name="w", source=ToolSource.CODE, code=CODE, capability=Capability(writes=True))
        ),
        access(
            Tool(name="r", source=ToolSource.CODE, code=CODE, capability=Capability(read_only=True))
        ),
    ] == ["read-only (trusted)", "read-only", "may write", "writes", "read-only"]


def test_a_catalog_entry_shadows_a_built_in_of_either_type(catalog: Path) -> None:
    """A catalog tool named like a built-in validation is what the name means: the
    built-in is not offered as usable by name, in the text or the JSON, even when only
    validations are listed."""
    with Catalog.open(catalog) as opened:
        opened.add(Tool(name="regex", source=ToolSource.CODE, code=CODE))
        assert opened.names() == ["regex"]
    text = invoke(catalog, "tool", "list", "--type", "validation").stdout
    assert "no validations" in text and " regex," not in text and "regex" not in text
    listed = json_out(invoke(catalog, "tool", "list", "--type", "validation", "--json"))
    assert "regex" not in {item["name"] for item in listed}
    everything = json_out(invoke(catalog, "tool", "list", "--json"))
    assert [(i["name"], i["origin"]) for i in everything if i["name"] == "regex"] == [
        ("regex", "catalog")
    ]


def test_empty_lists(catalog: Path) -> None:
    """Listing an empty (or missing) catalog says so, names the built-ins that are usable
    all the same, and creates nothing."""
    validations = (
        "built-in validations, usable by name without registering: json_schema, paths_exist, "
        "pytest_suite, python_syntax, regex, unittest_suite, unsafe_command\n"
    )
    tools = (
        "built-in tools, usable by name without registering: spawn.validator (may write), "
        "validator.ac-pull (read-only), validator.attest (may write), validator.reject "
        "(may write)\n"
    )
    builtins = validations
    for args, text in [
        (["tool", "list"], "no tools\n" + validations + tools),
        (["tool", "list", "--type", "tool"], "no tools\n" + tools),
        (["tool", "list", "--type", "validation"], "no validations\n" + builtins),
        (["validation", "list"], "no validations\n" + builtins),
        (["validation", "attachments"], "no attachments\n"),
        (["validation", "resolve", "repo"], "no attachments\n"),
    ]:
        result = invoke(catalog, *args)
        assert_ok(result)
        assert result.stdout == text
    # In JSON too: only what is usable without registering.
    for args in [["tool", "list"], ["validation", "list"]]:
        listed = json_out(invoke(catalog, *args, "--json"))
        assert listed and {item["origin"] for item in listed} == {"builtin"}
    assert json_out(invoke(catalog, "validation", "attachments", "--json")) == []
    assert not catalog.parent.exists()


def test_validation_list_equals_tool_list_of_validations(populated: Path) -> None:
    """validation list is `tool list --type validation`, in text and JSON."""
    for extra in ([], ["--json"]):
        a = invoke(populated, "validation", "list", *extra)
        b = invoke(populated, "tool", "list", "--type", "validation", *extra)
        assert_ok(a)
        assert a.stdout == b.stdout


def test_tool_show_json_has_the_stable_key_order(populated: Path) -> None:
    """tool show --json prints as_cli_dict, with inherited fields, in its key order."""
    shown = json_out(invoke(populated, "tool", "show", "tests-pass", "--json"))
    with Catalog.open(populated) as opened:
        expected = opened.get("tests-pass").as_cli_dict()
    assert list(shown) == list(expected)
    assert shown == expected
    assert shown["timeout"] == 30  # inherited from pytest
    assert shown["resource_slots"] == [{"name": "repo"}]
    assert list(shown)[:4] == ["name", "tool_type", "mode", "source"]


def test_tool_show_text_is_yaml_of_the_same_fields(populated: Path) -> None:
    """tool show prints YAML that reads back as the JSON form, keys in the same order."""
    text = invoke(populated, "tool", "show", "outer")
    assert_ok(text)
    as_json = json_out(invoke(populated, "tool", "show", "outer", "--json"))
    loaded = yaml.safe_load(text.stdout)
    assert loaded == as_json
    assert list(loaded) == list(as_json)


def test_tool_remove_with_yes(populated: Path) -> None:
    """tool remove --yes removes the entry and says so."""
    result = invoke(populated, "tool", "remove", "deploy", "--yes")
    assert_ok(result)
    assert result.stdout == "removed tool deploy\n"
    names = [t["name"] for t in json_out(invoke(populated, "tool", "list", "--json"))]
    assert "deploy" not in names


def test_tool_remove_force_detaches(populated: Path) -> None:
    """tool remove --force removes an attached validation and its attachments."""
    result = invoke(populated, "tool", "remove", "lint", "--force", "-y")
    assert_ok(result)
    assert result.stdout == "removed validation lint\n"
    assert attachments(populated) == []


@pytest.mark.parametrize(("answer", "removed"), [("y\n", True), ("n\n", False), ("\n", False)])
def test_tool_remove_asks_on_a_terminal(
    populated: Path, monkeypatch: pytest.MonkeyPatch, answer: str, removed: bool
) -> None:
    """On a terminal, tool remove asks; only 'y' removes, anything else refuses with 1."""
    monkeypatch.setattr(cli_module, "_stdin_is_interactive", lambda: True)
    before = snapshot(populated)
    result = invoke(populated, "tool", "remove", "deploy", input=answer)
    assert "Remove tool deploy? [y/N]" in result.stdout
    if removed:
        assert_ok(result)
        assert "removed tool deploy" in result.stdout
    else:
        assert_error(result, 1, "not confirmed")
        assert snapshot(populated) == before


# -- validation add ------------------------------------------------------------------------------


def test_validation_add_wrapping(catalog: Path, configs: Path) -> None:
    """validation add registers a wrapping validation that shows what it inherits."""
    assert_ok(invoke(catalog, "tool", "add", "--config", str(write(configs, "t.yaml", TOOL_YAML))))
    result = invoke(
        catalog, "validation", "add", "--config", str(write(configs, "v.yaml", WRAPPER_YAML))
    )
    assert_ok(result)
    assert result.stdout == "added validation tests-pass\n"
    shown = json_out(invoke(catalog, "tool", "show", "tests-pass", "--json"))
    assert shown["source"] == "wrapped"
    assert shown["wraps"] == "pytest"
    assert shown["timeout"] == 30
    assert shown["input_schema"] == {"type": "object"}
    assert shown["capability"] == {"read_only": True, "writes": False, "checkpointable": False}
    assert shown["mode"] == "required"


def test_validation_add_update_keeping_the_mode(populated: Path, configs: Path) -> None:
    """validation add --update with the same mode replaces the validation."""
    config = write(configs, "v.yaml", INLINE_YAML + "description: stricter\n")
    result = invoke(populated, "validation", "add", "--config", str(config), "--update")
    assert_ok(result)
    assert result.stdout == "updated validation lint\n"
    shown = json_out(invoke(populated, "tool", "show", "lint", "--json"))
    assert shown["description"] == "stricter"
    assert attachments(populated)[0]["validation"] == "lint"


def test_remove_then_add_changes_the_mode(populated: Path, configs: Path) -> None:
    """Removing and adding again is how a validation's mode changes."""
    assert_ok(invoke(populated, "tool", "remove", "lint", "--force", "--yes"))
    config = write(configs, "v.yaml", INLINE_YAML.replace("informational", "required"))
    assert_ok(invoke(populated, "validation", "add", "--config", str(config)))
    assert json_out(invoke(populated, "tool", "show", "lint", "--json"))["mode"] == "required"


def test_several_mistakes_are_reported_at_once(catalog: Path, configs: Path) -> None:
    """A config with several mistakes gets one error line per mistake, in file order."""
    config = write(
        configs,
        "v.yaml",
        "name: 5bad\ncode: 1\ntimeout: fast\nbogus: 1\nwrites: true\nmode: sometimes\n",
    )
    result = invoke(catalog, "validation", "add", "--config", str(config))
    lines = assert_error(result, 2)
    fields = ["name", "code", "timeout", "bogus", "writes", "mode"]
    assert len(lines) == len(fields)
    for line, (number, field) in zip(lines, enumerate(fields, start=1), strict=True):
        assert line.startswith(f"error: {config}:{number}:"), line
        assert f": {field}: " in line, line
    assert not catalog.parent.exists()


def test_unknown_field_suggests_a_name(catalog: Path, configs: Path) -> None:
    """A misspelt field is reported with its line, column and the likely name."""
    config = write(configs, "v.yaml", INLINE_YAML + "timout: 3\n")
    result = invoke(catalog, "validation", "add", "--config", str(config))
    (line,) = assert_error(result, 2)
    assert re.fullmatch(
        rf"error: {re.escape(str(config))}:6:\d+: timout: unknown field \(did you mean 'timeout'\?\)",
        line,
    )


# -- bad input writes nothing ----------------------------------------------------------------------

# (id, config text or None (no file) or "<dir>", command, exit code, needles; "{config}" in a
# needle is replaced by the config path). Each runs against a missing and a populated catalog.
BAD_CONFIGS: list[Any] = [
    pytest.param(
        INLINE_YAML + "timout: 3\n",
        "validation add",
        2,
        ["{config}:6:", ": timout: unknown field"],
        id="unknown-field",
    ),
    pytest.param(
        INLINE_YAML + "timeout: fast\n",
        "validation add",
        2,
        ["{config}:6:10: timeout: "],
        id="wrong-type",
    ),
    pytest.param(
        INLINE_YAML + "resource_slots: yes\n",
        "tool add",
        2,
        ["{config}:6:17: resource_slots: "],
        id="wrong-type-tool-add",
    ),
    pytest.param(
        "name: lint\ncode: [1, 2\nmode: required\n",
        "validation add",
        2,
        ["{config}:", "invalid YAML"],
        id="bad-yaml",
    ),
    pytest.param(
        "name: lint\nname: other\ncode: 'x = 1'\n",
        "validation add",
        2,
        ["{config}:2:1: name: duplicate key 'name'"],
        id="duplicate-key",
    ),
    pytest.param(None, "validation add", 2, ["{config}: no such file"], id="missing-file"),
    pytest.param("<dir>", "tool add", 2, ["{config}: is a directory"], id="directory"),
    pytest.param(
        "- name: lint\n- code: x\n",
        "validation add",
        2,
        ["{config}:", "mapping"],
        id="top-level-list",
    ),
    pytest.param("", "tool add", 2, ["{config}: the file is empty"], id="empty-file"),
    pytest.param(
        "# only a comment\n",
        "validation add",
        2,
        ["{config}: the file is empty"],
        id="comment-only",
    ),
    pytest.param(b"name: \xff\xfe\n", "tool add", 2, ["{config}:1:7: not UTF-8"], id="not-utf8"),
    pytest.param(
        INLINE_YAML + "writes: true\n",
        "validation add",
        2,
        ["{config}:6:9: writes: a validation is always read-only"],
        id="writes-true",
    ),
    pytest.param(
        INLINE_YAML + "capability:\n  writes: true\n",
        "validation add",
        2,
        ["{config}:", "capability.writes: a validation is always read-only"],
        id="capability-writes-true",
    ),
    pytest.param(
        "name: checker\nwraps: ghost\ntransform: output\n",
        "validation add",
        2,
        ["{config}:2:8: wraps: no tool named 'ghost' in the catalog"],
        id="wraps-unknown",
    ),
    pytest.param(
        "name: checker\nwraps: pytest\ncode: 'x = 1'\n",
        "validation add",
        2,
        ["{config}:", "mutually exclusive"],
        id="wraps-and-code",
    ),
    pytest.param(
        '{"name": "lint", "code": "x = 1", "timeout": -1}',
        "validation add",
        2,
        ["{config}:1:", "timeout: "],
        id="json-bad-value",
    ),
    pytest.param(
        "name: lint\nmode: required\n",
        "validation add",
        2,
        ["{config}:", "code"],
        id="no-implementation",
    ),
]


@pytest.mark.parametrize("state", ["missing", "populated"])
@pytest.mark.parametrize(("text", "command", "exit_code", "needles"), BAD_CONFIGS)
def test_bad_config_writes_nothing(
    request: pytest.FixtureRequest,
    catalog: Path,
    configs: Path,
    state: str,
    text: str | bytes | None,
    command: str,
    exit_code: int,
    needles: list[str],
) -> None:
    """A bad config exits 2 with `error:` lines naming the file and field; nothing is written."""
    if state == "populated":
        request.getfixturevalue("populated")
    if text is None:
        config = configs / "absent.yaml"
    elif text == "<dir>":
        config = configs
    else:
        config = write(configs, "bad.json" if str(text).startswith("{") else "bad.yaml", text)
    before = snapshot(catalog)
    result = invoke(catalog, *command.split(), "--config", str(config))
    assert_error(result, exit_code, *(n.replace("{config}", str(config)) for n in needles))
    assert result.stdout == ""
    assert snapshot(catalog) == before
    if state == "missing":
        assert not catalog.exists()
        assert not catalog.parent.exists()


BAD_COMMANDS: list[Any] = [
    pytest.param(["validation", "attach", "repo", "ghost"], 2, ["'ghost'"], id="attach-unknown"),
    pytest.param(["validation", "attach", "repo", "pytest"], 2, ["'pytest'"], id="attach-a-tool"),
    pytest.param(
        ["validation", "attach", "--project", "p", "--plan", "q", "repo", "lint"],
        2,
        ["--project", "--plan"],
        id="project-and-plan",
    ),
    pytest.param(
        ["validation", "attach", "--arg", "strict", "repo", "lint"],
        2,
        ["--arg 'strict'", "KEY=VALUE"],
        id="arg-without-equals",
    ),
    pytest.param(
        ["validation", "attach", "--arg", "=1", "repo", "lint"], 2, ["--arg"], id="arg-without-key"
    ),
    pytest.param(
        ["validation", "attach", "--arg", "a=1", "--arg", "a=2", "repo", "lint"],
        2,
        ["--arg a: given twice"],
        id="arg-twice",
    ),
    pytest.param(
        ["validation", "detach", "--yes", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        2,
        ["01ARZ3NDEKTSV4RRFFQ69G5FAV"],
        id="detach-unknown",
    ),
    pytest.param(["tool", "show", "ghost"], 2, ["'ghost'"], id="show-unknown"),
    pytest.param(["tool", "remove", "ghost", "--yes"], 2, ["'ghost'"], id="remove-unknown"),
]


@pytest.mark.parametrize("state", ["missing", "populated"])
@pytest.mark.parametrize(("args", "exit_code", "needles"), BAD_COMMANDS)
def test_bad_command_writes_nothing(
    request: pytest.FixtureRequest,
    catalog: Path,
    state: str,
    args: list[str],
    exit_code: int,
    needles: list[str],
) -> None:
    """Unknown names and bad options exit 2 with `error:` lines and write nothing."""
    if state == "populated":
        request.getfixturevalue("populated")
    before = snapshot(catalog)
    result = invoke(catalog, *args)
    assert_error(result, exit_code, *needles)
    assert result.stdout == ""
    assert snapshot(catalog) == before
    if state == "missing":
        assert not catalog.parent.exists()


def test_empty_project_is_a_config_error(populated: Path) -> None:
    """An empty --project is a usage error naming the field, and attaches nothing."""
    before = snapshot(populated)
    result = invoke(populated, "validation", "attach", "--project", "", "repo", "lint")
    assert_error(result, 2, "project: must not be empty")
    assert snapshot(populated) == before


REFUSALS: list[Any] = [
    pytest.param(INLINE_YAML, "validation add", [], ["'lint' exists already"], id="name-exists"),
    pytest.param(
        TOOL_YAML.replace("name: pytest", "name: lint"),
        "tool add",
        [],
        ["'lint' exists already"],
        id="name-exists-across-types",
    ),
    pytest.param(
        INLINE_YAML.replace("informational", "required"),
        "validation add",
        ["--update"],
        ["{config}:2:7: mode: the mode of 'lint' is 'informational'"],
        id="mode-change",
    ),
    pytest.param(
        INLINE_YAML.replace("mode: informational\n", ""),
        "validation add",
        ["--update"],
        ["{config}:", ": mode: the mode of 'lint'"],
        id="mode-change-by-default",
    ),
    pytest.param(
        TOOL_YAML.replace("name: pytest", "name: lint"),
        "tool add",
        ["--update"],
        ["{config}:", "tool_type: 'lint' is a validation; it cannot become a tool"],
        id="validation-to-tool",
    ),
    pytest.param(
        INLINE_YAML.replace("name: lint", "name: pytest").replace("mode: informational\n", ""),
        "validation add",
        ["--update"],
        ["tool_type: 'pytest' is a tool"],
        id="tool-to-validation",
    ),
    pytest.param(
        TOOL_YAML + "writes: true\n",
        "tool add",
        ["--update"],
        ["{config}:", "capability.writes: 'pytest' is wrapped by the validation 'tests-pass'"],
        id="wrapped-tool-made-to-write",
    ),
    pytest.param(
        "name: checker\nwraps: deploy\ntransform: output\n",
        "validation add",
        [],
        ["{config}:2:8: wraps: 'checker' cannot wrap 'deploy'"],
        id="wraps-a-writing-tool",
    ),
    pytest.param(
        "name: tests-pass\nwraps: outer\ntransform: output\n",
        "validation add",
        ["--update"],
        ["{config}:2:8: wraps: ", "cycle"],
        id="wrapping-cycle",
    ),
]


@pytest.mark.parametrize(("text", "command", "extra", "needles"), REFUSALS)
def test_refusals_exit_1_and_write_nothing(
    populated: Path,
    configs: Path,
    text: str,
    command: str,
    extra: list[str],
    needles: list[str],
) -> None:
    """Refused adds (name exists, mode or type change, write rules) exit 1 and change nothing."""
    config = write(configs, "v.yaml", text)
    before = snapshot(populated)
    result = invoke(populated, *command.split(), "--config", str(config), *extra)
    assert_error(result, 1, *(n.replace("{config}", str(config)) for n in needles))
    assert result.stdout == ""
    assert snapshot(populated) == before


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["tool", "remove", "pytest", "--yes"], ["'pytest' is wrapped by 'tests-pass'"]),
        (["tool", "remove", "lint", "--yes"], ["'lint' has 1 attachment"]),
        (["validation", "attach", "--arg", "strict=true", "repo", "lint"], ["already"]),
    ],
    ids=["remove-wrapped", "remove-attached", "duplicate-attachment"],
)
def test_catalog_refusals_exit_1(populated: Path, args: list[str], needles: list[str]) -> None:
    """Catalog rules (wrapped tool, attachments, duplicate) refuse with exit 1, nothing changed."""
    before = snapshot(populated)
    result = invoke(populated, *args)
    assert_error(result, 1, *needles)
    assert snapshot(populated) == before


@pytest.mark.parametrize("kind", ["garbage", "directory"])
def test_an_unusable_catalog_is_a_config_error(tmp_path: Path, kind: str) -> None:
    """A --catalog that is not SQLite, or a directory, exits 2 naming it and is left alone."""
    if kind == "garbage":
        path = write(tmp_path, "c.db", b"definitely not sqlite" * 100)
    else:
        path = tmp_path
    before = sorted(p.name for p in tmp_path.iterdir())
    result = invoke(path, "tool", "list")
    assert_error(result, 2, str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if kind == "garbage":
        assert path.read_bytes() == b"definitely not sqlite" * 100


# -- attach / attachments / resolve / detach -----------------------------------------------------


def test_attach_prints_only_the_ulid(populated: Path) -> None:
    """validation attach prints the new attachment's ULID and nothing else."""
    result = invoke(populated, "validation", "attach", "repo", "tests-pass")
    assert_ok(result)
    assert ULID_LINE.match(result.stdout)
    made = attachments(populated)[-1]
    assert made["id"] == result.stdout.strip()
    assert made["scope"] == "direct"


@pytest.mark.parametrize(
    ("options", "scope", "project", "plan"),
    [
        ([], Scope.DIRECT, None, None),
        (["--project", "alpha"], Scope.PROJECT, "alpha", None),
        (["--plan", "01PLAN"], Scope.PLAN, None, "01PLAN"),
    ],
)
def test_attach_scopes(
    populated: Path, options: list[str], scope: Scope, project: str | None, plan: str | None
) -> None:
    """--project and --plan choose the attachment's scope."""
    result = invoke(populated, "validation", "attach", *options, "docs", "tests-pass")
    assert_ok(result)
    (made,) = json_out(
        invoke(populated, "validation", "attachments", "--resource", "docs", "--json")
    )
    assert made["id"] == result.stdout.strip()
    assert (made["scope"], made["project"], made["plan"]) == (scope.value, project, plan)


def test_attach_arguments_are_json_else_text(populated: Path) -> None:
    """--arg values are read as JSON when they parse, else kept as text (NaN, and numbers
    too large for a float, stay text)."""
    result = invoke(
        populated,
        "validation",
        "attach",
        "--arg", "n=3",
        "--arg", "ratio=0.5",
        "--arg", "flag=true",
        "--arg", "none=null",
        "--arg", 'obj={"k": [1, 2]}',
        "--arg", 'quoted="3"',
        "--arg", "word=hello",
        "--arg", "eq=a=b",
        "--arg", "empty=",
        "--arg", "nan=NaN",
        "--arg", "inf=-Infinity",
        "--arg", "huge=1e400",
        "--arg", "dotted.key-1=x",
        "repo",
        "tests-pass",
    )  # fmt: skip
    assert_ok(result)
    (made,) = json_out(
        invoke(populated, "validation", "attachments", "--validation", "tests-pass", "--json")
    )
    assert made["arguments"] == {
        "n": 3,
        "ratio": 0.5,
        "flag": True,
        "none": None,
        "obj": {"k": [1, 2]},
        "quoted": "3",
        "word": "hello",
        "eq": "a=b",
        "empty": "",
        "nan": "NaN",
        "inf": "-Infinity",
        "huge": "1e400",
        "dotted.key-1": "x",
    }


def test_attach_same_validation_with_other_arguments(populated: Path) -> None:
    """The same validation may be attached again with other arguments."""
    first = invoke(populated, "validation", "attach", "--arg", "strict=false", "repo", "lint")
    second = invoke(populated, "validation", "attach", "repo", "lint")
    assert_ok(first)
    assert_ok(second)
    assert first.stdout != second.stdout
    assert len(attachments(populated)) == 3


def test_attachments_filters_and_text(populated: Path) -> None:
    """validation attachments filters by resource and validation, in creation order."""
    ids = [
        invoke(populated, "validation", "attach", *args).stdout.strip()
        for args in (
            ["docs", "lint"],
            ["--project", "alpha", "repo", "tests-pass"],
            ["--plan", "01PLAN", "--arg", "x=1", "docs", "tests-pass"],
        )
    ]
    listed = attachments(populated)
    assert [a["id"] for a in listed][1:] == ids
    assert all(list(a) == ATTACHMENT_KEYS for a in listed)
    docs = json_out(invoke(populated, "validation", "attachments", "--resource", "docs", "--json"))
    assert [a["id"] for a in docs] == [ids[0], ids[2]]
    both = json_out(
        invoke(
            populated,
            "validation",
            "attachments",
            "--resource",
            "docs",
            "--validation",
            "tests-pass",
            "--json",
        )
    )
    assert [a["id"] for a in both] == [ids[2]]
    text = invoke(populated, "validation", "attachments")
    assert_ok(text)
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["ID", "VALIDATION", "RESOURCE", "SCOPE", "ARGUMENTS"]
    assert [line.split()[0] for line in lines[1:]] == [a["id"] for a in listed]
    assert "project alpha" in lines[3]
    assert "plan 01PLAN" in lines[4]
    assert '{"x": 1}' in lines[4]


def test_resolve_applies_scoping(populated: Path) -> None:
    """validation resolve shows direct + matching project + plan, the most specific winning."""

    def attach(*args: str) -> str:
        result = invoke(populated, "validation", "attach", *args)
        assert_ok(result)
        return result.stdout.strip()

    (direct,) = [a["id"] for a in attachments(populated)]  # lint on repo, strict=true
    project = attach("--project", "alpha", "--arg", "strict=true", "repo", "lint")
    plan = attach("--plan", "01PLAN", "--arg", "strict=true", "repo", "lint")
    other = attach("--project", "beta", "repo", "tests-pass")

    def resolved(*options: str) -> list[str]:
        found = json_out(invoke(populated, "validation", "resolve", *options, "repo", "--json"))
        assert all(list(a) == ATTACHMENT_KEYS for a in found)
        return [a["id"] for a in found]

    assert resolved() == [direct]
    assert resolved("--project", "alpha") == [project]
    assert resolved("--project", "beta") == [direct, other]
    assert resolved("--plan", "01PLAN") == [plan]
    assert resolved("--project", "alpha", "--plan", "01PLAN") == [plan]
    assert resolved("--project", "gamma", "--plan", "02PLAN") == [direct]
    text = invoke(populated, "validation", "resolve", "--project", "beta", "repo")
    assert_ok(text)
    assert [line.split()[0] for line in text.stdout.splitlines()[1:]] == [direct, other]


def test_detach_with_yes(populated: Path) -> None:
    """validation detach --yes removes the attachment and says so."""
    (made,) = attachments(populated)
    result = invoke(populated, "validation", "detach", "--yes", made["id"])
    assert_ok(result)
    assert result.stdout == f"detached {made['id']}\n"
    assert attachments(populated) == []


def test_detach_without_a_terminal_refuses(
    populated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --yes and without a terminal, detach refuses with 1 and changes nothing."""
    monkeypatch.setattr(cli_module, "_stdin_is_interactive", lambda: False)
    (made,) = attachments(populated)
    before = snapshot(populated)
    result = invoke(populated, "validation", "detach", made["id"], input="y\n")
    assert_error(result, 1, "not a terminal", "--yes")
    assert result.stdout == ""
    assert snapshot(populated) == before


def test_remove_without_a_terminal_refuses(
    populated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --yes and without a terminal, tool remove refuses with 1 and changes nothing."""
    monkeypatch.setattr(cli_module, "_stdin_is_interactive", lambda: False)
    before = snapshot(populated)
    result = invoke(populated, "tool", "remove", "deploy")
    assert_error(result, 1, "not a terminal")
    assert snapshot(populated) == before


@pytest.mark.parametrize(
    ("answer", "detached", "message"),
    [
        ("y\n", True, ""),
        ("yes\n", True, ""),
        ("n\n", False, "not confirmed"),
        ("\n", False, "not confirmed"),
        ("", False, "aborted"),
    ],
    ids=["y", "yes", "n", "default-no", "eof"],
)
def test_detach_asks_on_a_terminal(
    populated: Path,
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    detached: bool,
    message: str,
) -> None:
    """On a terminal detach asks; yes detaches, no (the default) or end of input refuses."""
    monkeypatch.setattr(cli_module, "_stdin_is_interactive", lambda: True)
    (made,) = attachments(populated)
    before = snapshot(populated)
    result = invoke(populated, "validation", "detach", made["id"], input=answer)
    assert "Detach lint from repo (direct)? [y/N]" in result.stdout
    if detached:
        assert_ok(result)
        assert result.stdout.endswith(f"detached {made['id']}\n")
        assert attachments(populated) == []
    else:
        assert_error(result, 1, message)
        assert snapshot(populated) == before


def test_detach_prompt_names_the_scope(populated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The confirmation question says which project or plan the attachment belongs to."""
    monkeypatch.setattr(cli_module, "_stdin_is_interactive", lambda: True)
    project = invoke(populated, "validation", "attach", "--project", "alpha", "docs", "lint")
    plan = invoke(populated, "validation", "attach", "--plan", "01PLAN", "docs", "lint")
    for made, scope in ((project, "project alpha"), (plan, "plan 01PLAN")):
        result = invoke(populated, "validation", "detach", made.stdout.strip(), input="n\n")
        assert f"Detach lint from docs ({scope})?" in result.stdout


# -- as a real process -----------------------------------------------------------------------------


def run_module(*args: str, home: Path, stdin: int | None = subprocess.DEVNULL) -> Any:
    """Run ``python -m gategraph.runtime ARGS`` as a real process with GATEGRAPH_HOME=home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEGRAPH_")}
    env["GATEGRAPH_HOME"] = str(home)
    return run_process([sys.executable, "-m", "gategraph.runtime", *args], stdin=stdin, env=env)


def test_process_version(tmp_path: Path) -> None:
    """`python -m gategraph.runtime --version` prints the version and exits 0."""
    done = run_module("--version", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"gategraph, version {__version__}\n"
    assert done.stderr == ""


def test_process_round_trip(tmp_path: Path, configs: Path) -> None:
    """A real process adds, attaches, resolves and, without a terminal, refuses to detach."""
    home = tmp_path / "home"
    for command, text in (("tool", TOOL_YAML), ("validation", WRAPPER_YAML)):
        config = write(configs, f"{command}.yaml", text)
        done = run_module(command, "add", "--config", str(config), home=home)
        assert done.returncode == 0, done.stderr
    done = run_module(
        "validation", "attach", "--plan", "01PLAN", "--arg", "k=1", "repo", "tests-pass", home=home
    )
    assert done.returncode == 0, done.stderr
    assert ULID_LINE.match(done.stdout)
    attachment_id = done.stdout.strip()
    done = run_module("validation", "resolve", "--plan", "01PLAN", "repo", "--json", home=home)
    assert done.returncode == 0, done.stderr
    (resolved,) = json.loads(done.stdout)
    assert resolved["id"] == attachment_id
    assert resolved["arguments"] == {"k": 1}
    done = run_module("validation", "detach", attachment_id, home=home)  # stdin: /dev/null
    assert done.returncode == 1
    assert done.stderr.startswith("error: refusing without confirmation")
    done = run_module("validation", "detach", "--yes", attachment_id, home=home)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"detached {attachment_id}\n"


def test_process_bad_config(tmp_path: Path, configs: Path) -> None:
    """A real process given a bad config exits 2 with error lines only and creates nothing."""
    home = tmp_path / "home"
    config = write(configs, "v.yaml", INLINE_YAML + "timout: 3\nwrites: true\n")
    done = run_module("validation", "add", "--config", str(config), home=home)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"error: {config}:6:")
    assert lines[0].endswith(": timout: unknown field (did you mean 'timeout'?)")
    assert lines[1] == (
        f"error: {config}:7:9: writes: a validation is always read-only; remove `writes: true`"
    )
    assert not home.exists()


# -- entry points and embedding ------------------------------------------------------------------


def test_main_exits_with_the_command_code(capsys: pytest.CaptureFixture[str]) -> None:
    """main(argv), the console-script entry point, exits with the command's code."""
    with pytest.raises(SystemExit) as info:
        cli_module.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"gategraph, version {__version__}\n"
    with pytest.raises(SystemExit) as info:
        cli_module.main(["tool", "show", "ghost"])
    assert info.value.code == 2
    assert capsys.readouterr().err == "error: no tool or validation named 'ghost'\n"


def test_embedded_non_standalone_mode_raises(catalog: Path) -> None:
    """With standalone_mode=False the CLI raises gategraph's exceptions instead of exiting."""
    from gategraph.runtime import NotFoundError

    with pytest.raises(NotFoundError):
        cli.main(["--catalog", str(catalog), "tool", "show", "ghost"], standalone_mode=False)
    assert not catalog.parent.exists()


def test_interrupt_exits_130(populated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during a command prints one error line and exits 130, without a traceback."""

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Catalog, "list", interrupted)
    result = invoke(populated, "tool", "list")
    assert result.exit_code == 130
    assert result.stdout == ""
    # click itself ends the interrupted line with a newline before the error.
    assert result.stderr.strip() == "error: interrupted"
    assert "Traceback" not in result.output


def _raising(exc: BaseException) -> Any:
    def raise_it(*_args: object, **_kwargs: object) -> None:
        raise exc

    return raise_it


@pytest.mark.parametrize(
    ("exc", "code", "line"),
    [
        (
            TypeError("bad\nsecond line"),
            1,
            "error: internal error: TypeError: bad (a bug in gategraph; set GATEGRAPH_DEBUG=1 "
            "for the traceback)",
        ),
        (
            PermissionError(13, "Permission denied", "/some/file"),
            2,
            "error: /some/file: Permission denied",
        ),
        (
            ExceptionGroup("task group", [ValueError("inner")]),
            1,
            "error: internal error: ValueError: inner (a bug in gategraph; set "
            "GATEGRAPH_DEBUG=1 for the traceback)",
        ),
        (
            ExceptionGroup(
                "task group", [NotFoundError("no tool or validation named 'x'", name="x")]
            ),
            2,
            "error: no tool or validation named 'x'",
        ),
    ],
    ids=["bug", "os-error", "group-of-a-bug", "group-of-a-config-error"],
)
def test_unexpected_exceptions_are_one_line(
    populated: Path, monkeypatch: pytest.MonkeyPatch, exc: BaseException, code: int, line: str
) -> None:
    """Whatever a command raises reaches the user as one `error:` line, never a traceback:
    a bug exits 1, a file system error 2, an exception group as what it holds."""
    monkeypatch.delenv("GATEGRAPH_DEBUG", raising=False)
    monkeypatch.setattr(Catalog, "list", _raising(exc))
    result = invoke(populated, "tool", "list")
    lines = assert_error(result, code)
    assert lines == [line]
    assert result.stdout == ""


def test_an_interrupt_inside_an_exception_group_exits_130(
    populated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C wrapped by a task group is still an interrupt."""
    group = BaseExceptionGroup("task group", [ValueError("x"), KeyboardInterrupt()])
    monkeypatch.setattr(Catalog, "list", _raising(group))
    result = invoke(populated, "tool", "list")
    assert result.exit_code == 130
    assert result.stderr.strip() == "error: interrupted"


def test_gategraph_debug_adds_the_traceback_of_an_internal_error(
    populated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GATEGRAPH_DEBUG=1 prints an internal error's traceback before its error line."""
    monkeypatch.setenv("GATEGRAPH_DEBUG", "1")
    monkeypatch.setattr(Catalog, "list", _raising(TypeError("bad")))
    result = invoke(populated, "tool", "list")
    assert result.exit_code == 1
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert result.stderr.splitlines()[-1].startswith("error: internal error: TypeError: bad")


CITATION = re.compile(r"\b(seed|issue|ADR)[ -]?#?0*\d|§", re.IGNORECASE)


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "gategraph")
def test_help_texts_cite_no_spec(path: tuple[str, ...]) -> None:
    """Help is written for users: no "seed 002 §13" or "issue 5" (those belong in code)."""
    result = invoke(None, *path, "--help")
    assert_ok(result)
    assert not CITATION.search(result.stdout), result.stdout


CLI_DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_cli_guide_covers_every_command() -> None:
    """docs/cli.md names every command, each exit code, `warn`, and the completion lines
    the tests below run."""
    text = CLI_DOC.read_text(encoding="utf-8")
    leaves = [p for p in COMMAND_PATHS if p and not isinstance(_command(p), click.Group)]
    missing = [" ".join(p) for p in leaves if f"`{' '.join(p)} " not in text]
    assert not missing
    assert "`bench " in text
    for code in ("`0`", "`1`", "`2`", "`3`", "`130`"):
        assert f"| {code} |" in text
    assert "- `warn` — an **informational** validation did not pass." in text
    for shell in ("bash", "zsh"):
        assert f'eval "$(_GATEGRAPH_COMPLETE={shell}_source gategraph)"' in text
    assert "_GATEGRAPH_COMPLETE=fish_source gategraph | source" in text
    assert not CITATION.search(text)


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    return command


# -- shell completion ------------------------------------------------------------------------

SCRIPT = Path(sys.executable).with_name("gategraph")
needs_script = pytest.mark.skipif(
    not SCRIPT.exists(), reason="the gategraph console script is not installed beside python"
)


def complete(*env: tuple[str, str], home: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed console script with completion variables set."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEGRAPH_", "_GATEGRAPH"))}
    return run_process(
        [str(SCRIPT)], env={**base, "GATEGRAPH_HOME": str(home), **dict(env)}, timeout=60
    )


@needs_script
@pytest.mark.parametrize(
    ("shell", "needle"),
    [
        ("bash", "complete -o nosort -F _gategraph_completion gategraph"),
        ("zsh", "#compdef gategraph"),
        ("fish", "complete --no-files --command gategraph"),
    ],
)
def test_completion_scripts(tmp_path: Path, shell: str, needle: str) -> None:
    """`_GATEGRAPH_COMPLETE=<shell>_source gategraph` prints the shell's completion script."""
    done = complete(("_GATEGRAPH_COMPLETE", f"{shell}_source"), home=tmp_path)
    assert done.returncode == 0, done.stderr
    assert needle in done.stdout
    assert done.stderr == ""
    assert not tmp_path.joinpath("gategraph.db").exists()


@needs_script
def test_completion_of_command_names(tmp_path: Path) -> None:
    """Completing `gategraph de` offers decide and demo; `gategraph validation at`, its two."""
    done = complete(
        ("_GATEGRAPH_COMPLETE", "bash_complete"),
        ("COMP_WORDS", "gategraph de"),
        ("COMP_CWORD", "1"),
        home=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["plain,decide", "plain,demo"]
    done = complete(
        ("_GATEGRAPH_COMPLETE", "bash_complete"),
        ("COMP_WORDS", "gategraph validation at"),
        ("COMP_CWORD", "2"),
        home=tmp_path,
    )
    assert done.stdout.splitlines() == ["plain,attach", "plain,attachments"]


@needs_script
def test_completion_of_plan_ids_from_the_event_log(tmp_path: Path) -> None:
    """A PLAN_ID completes from the event log, newest first; without a log, to nothing."""
    env = (("_GATEGRAPH_COMPLETE", "bash_complete"), ("COMP_CWORD", "2"))
    done = complete(*env, ("COMP_WORDS", "gategraph resume "), home=tmp_path)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "", "")
    graph = Path(__file__).resolve().parents[2] / "graphs" / "release-check.yaml"
    for plan_id in ("alpha-1", "alpha-2", "beta"):
        ran = run_module("execute", str(graph), "--plan-id", plan_id, home=tmp_path)
        assert ran.returncode == 0, ran.stderr
    done = complete(*env, ("COMP_WORDS", "gategraph events al"), home=tmp_path)
    assert done.stdout.splitlines() == ["plain,alpha-2", "plain,alpha-1"]


@needs_script
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_with_the_sourced_script(tmp_path: Path) -> None:
    """The script bash sources really completes: `gategraph de<TAB>` offers decide, demo."""
    code = (
        'eval "$(_GATEGRAPH_COMPLETE=bash_source gategraph)"\n'
        "COMP_WORDS=(gategraph de); COMP_CWORD=1\n"
        "_gategraph_completion gategraph\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GATEGRAPH_", "_GATEGRAPH"))}
    done = run_process(
        ["bash", "--norc", "--noprofile", "-c", code],
        env={**base, "GATEGRAPH_HOME": str(tmp_path), "PATH": f"{SCRIPT.parent}:{base['PATH']}"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["decide", "demo"]


def test_stdin_is_interactive_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Confirmation is possible only when standard input is a terminal."""

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert cli_module._stdin_is_interactive() is False
    monkeypatch.setattr(sys, "stdin", None)
    assert cli_module._stdin_is_interactive() is False
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert cli_module._stdin_is_interactive() is True
