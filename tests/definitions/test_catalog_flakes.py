"""Flaky validations in the catalog: recording, counting, the migration that adds them, and
how `tool list` and `tool show` show them.

A validation is flaky when it gave different outcomes on identical inputs (the same content,
the same arguments); the catalog keeps one row per flake, by validation name.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from gategraph.runtime import Catalog, ConfigError, Tool, ToolSource, Validation, ValidationMode
from gategraph.runtime._cli import cli
from gategraph.runtime._definitions import _catalog as catalog_module
from gategraph.runtime._definitions._catalog import FlakeRecord

CODE = "def run(**kw):\n    return {'passed': True}"
PASSED_THEN_FAILED = "passed, then failed on the same inputs"
TOOLS_LINE = (
    "built-in tools, usable by name without registering: spawn.validator (may write), "
    "validator.ac-pull (read-only), validator.attest (may write), validator.reject (may write)\n"
)
BUILTINS_LINE = (
    "built-in validations, usable by name without registering: json_schema, paths_exist, "
    "pytest_suite, python_syntax, regex, unittest_suite, unsafe_command\n"
    "built-in tools, usable by name without registering: spawn.validator (may write), "
    "validator.ac-pull (read-only), validator.attest (may write), validator.reject (may write)"
)
# The schema version that added the flakes table: a catalog file one version older is what
# an earlier gategraph left behind.
FLAKES_VERSION = 1 + next(
    i for i, script in enumerate(catalog_module._MIGRATIONS) if "CREATE TABLE flakes" in script
)


def flake(
    catalog: Catalog, name: str, *, plan: str = "P1", round: int = 1, node: str = "n"
) -> None:
    """Record one flake of ``name``."""
    catalog.record_flake(name, plan_id=plan, round=round, node=node, detail=PASSED_THEN_FAILED)


# -- recording and counting ----------------------------------------------------------------------


def test_a_name_never_recorded_has_no_flakes(catalog: Catalog) -> None:
    """flakes() is 0, flake_records() empty and flake_counts() empty before any flake."""
    assert catalog.flakes("tests-pass") == 0
    assert catalog.flake_records("tests-pass") == []
    assert catalog.flake_counts() == {}


def test_record_then_count(catalog: Catalog) -> None:
    """Each distinct flake counts one; flake_counts() has every flaky name, sorted."""
    flake(catalog, "tests-pass", round=1)
    flake(catalog, "tests-pass", round=2)
    flake(catalog, "tests-pass", round=2, node="other")
    flake(catalog, "tests-pass", plan="P2", round=2)
    flake(catalog, "lint")
    assert catalog.flakes("tests-pass") == 4
    assert catalog.flakes("lint") == 1
    assert catalog.flake_counts() == {"lint": 1, "tests-pass": 4}
    assert list(catalog.flake_counts()) == ["lint", "tests-pass"]


def test_records_are_newest_first_with_what_was_recorded(catalog: Catalog) -> None:
    """flake_records() returns FlakeRecords, the most recent first, with the given fields."""
    catalog.record_flake("v", plan_id="P1", round=1, node="a", detail="first")
    catalog.record_flake("v", plan_id="P1", round=2, node="b", detail="second")
    catalog.record_flake("w", plan_id="P1", round=1, node="a", detail="another validation")
    records = catalog.flake_records("v")
    assert [(r.plan_id, r.round, r.node, r.detail) for r in records] == [
        ("P1", 2, "b", "second"),
        ("P1", 1, "a", "first"),
    ]
    assert all(isinstance(r, FlakeRecord) for r in records)
    assert all(r.at.endswith("Z") and r.at[4] == "-" and "T" in r.at for r in records)


def test_records_are_limited(catalog: Catalog) -> None:
    """flake_records(limit=N) returns the N most recent; 0 returns none."""
    for number in range(1, 31):
        flake(catalog, "v", round=number)
    assert len(catalog.flake_records("v")) == 20  # the default
    assert [r.round for r in catalog.flake_records("v", limit=3)] == [30, 29, 28]
    assert catalog.flake_records("v", limit=0) == []
    assert catalog.flakes("v") == 30


def test_the_same_flake_recorded_again_counts_once(catalog: Catalog) -> None:
    """Recording the same (plan, round, node) again, as a resumed plan does, changes nothing:
    the first detail stays."""
    catalog.record_flake("v", plan_id="P1", round=2, node="n", detail="first seen")
    catalog.record_flake("v", plan_id="P1", round=2, node="n", detail="seen again")
    assert catalog.flakes("v") == 1
    assert [r.detail for r in catalog.flake_records("v")] == ["first seen"]


def test_two_validations_flaky_at_the_same_node_both_count(catalog: Catalog) -> None:
    """Idempotence is per validation: two validations flaky in one node and round are two."""
    flake(catalog, "a", round=3, node="n")
    flake(catalog, "b", round=3, node="n")
    assert catalog.flake_counts() == {"a": 1, "b": 1}


def test_any_name_can_be_flaky(catalog: Catalog) -> None:
    """A name that is not registered (a graph's own validation, a built-in) is counted, and
    recording it does not register it."""
    flake(catalog, "graph-local-check")
    flake(catalog, "python_syntax")
    assert catalog.flake_counts() == {"graph-local-check": 1, "python_syntax": 1}
    assert "graph-local-check" not in catalog
    assert not catalog.registered("python_syntax")
    assert catalog.list() == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"validation": ""}, "validation"),
        ({"validation": "  "}, "validation"),
        ({"plan_id": ""}, "plan_id"),
        ({"node": ""}, "node"),
        ({"round": 0}, "round"),
        ({"round": -1}, "round"),
        ({"round": True}, "round"),
    ],
)
def test_a_bad_flake_is_refused(catalog: Catalog, fields: dict[str, Any], field: str) -> None:
    """An empty name, plan or node, or a round below 1, is a ConfigError naming the field,
    and records nothing."""
    arguments: dict[str, Any] = {"plan_id": "P1", "round": 1, "node": "n", "detail": "d"}
    arguments.update(fields)
    validation = arguments.pop("validation", "v")
    with pytest.raises(ConfigError) as info:
        catalog.record_flake(validation, **arguments)
    assert [issue.field for issue in info.value.issues] == [field]
    assert catalog.flake_counts() == {}


def test_a_negative_limit_is_refused(catalog: Catalog) -> None:
    """flake_records(limit=-1) is a ConfigError, not every record."""
    flake(catalog, "v")
    with pytest.raises(ConfigError):
        catalog.flake_records("v", limit=-1)


def test_a_flake_record_is_frozen() -> None:
    """FlakeRecord is immutable."""
    record = FlakeRecord(plan_id="P", round=1, node="n", detail="d", at="2025-01-01T00:00:00Z")
    with pytest.raises(AttributeError):
        record.round = 2  # type: ignore[misc]


def test_flakes_are_kept_in_the_file(tmp_path: Path) -> None:
    """Flakes recorded before closing are there after reopening, and a second catalog on the
    same file recording the same flake does not count it twice."""
    path = tmp_path / "c.db"
    with Catalog.open(path) as first:
        flake(first, "v", round=1)
        with Catalog.open(path) as second:
            flake(second, "v", round=1)
            flake(second, "v", round=2)
    with Catalog.open(path) as reopened:
        assert reopened.flakes("v") == 2
        assert [r.round for r in reopened.flake_records("v")] == [2, 1]


def test_threads_recording_at_once_lose_nothing_and_double_nothing() -> None:
    """Threads sharing one catalog record flakes (each also twice) at the same time: every
    distinct flake is counted exactly once."""
    with Catalog.in_memory() as catalog:
        errors: list[BaseException] = []
        start = threading.Barrier(8)

        def work(worker: int) -> None:
            try:
                start.wait()
                for number in range(1, 26):
                    for _ in range(2):
                        flake(catalog, f"v{worker % 2}", node=f"w{worker}", round=number)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert catalog.flake_counts() == {"v0": 100, "v1": 100}


# -- the migration -------------------------------------------------------------------------------


def old_catalog(path: Path) -> None:
    """Write a catalog file as the gategraph before flakes did: its migrations, its version,
    a tool and a validation in it."""
    db = sqlite3.connect(path)
    try:
        with db:
            db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            for script in catalog_module._MIGRATIONS[: FLAKES_VERSION - 1]:
                for statement in script.split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (FLAKES_VERSION - 1,))
            db.execute(
                "INSERT INTO tools (name, tool_type, config) VALUES (?, ?, ?)",
                (
                    "lint",
                    "validation",
                    json.dumps({"name": "lint", "source": "code", "code": CODE}),
                ),
            )
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        assert "flakes" not in tables
    finally:
        db.close()


def test_an_older_catalog_gains_the_flakes_table(tmp_path: Path) -> None:
    """A catalog file at the schema version before flakes opens at the current version,
    keeps what it held, and records flakes."""
    path = tmp_path / "old.db"
    old_catalog(path)
    with Catalog.open(path) as catalog:
        assert catalog.schema_version == catalog_module.SCHEMA_VERSION
        assert [t.name for t in catalog.list()] == ["lint"]
        assert catalog.flake_counts() == {}
        flake(catalog, "lint")
        flake(catalog, "lint")
    with Catalog.open(path) as reopened:
        assert reopened.flakes("lint") == 1
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [
            (catalog_module.SCHEMA_VERSION,)
        ]
    finally:
        db.close()


# -- the command line ----------------------------------------------------------------------------


def invoke(catalog: Path, *args: str) -> Result:
    """Run ``gategraph --catalog CATALOG ARGS`` in-process; it must succeed, quietly."""
    result = CliRunner().invoke(
        cli, ["--catalog", str(catalog), *args], prog_name="gategraph", catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    return result


def json_out(catalog: Path, *args: str) -> Any:
    """The JSON a command prints."""
    return json.loads(invoke(catalog, *args, "--json").stdout)


@pytest.fixture
def populated(tmp_path: Path) -> Path:
    """A catalog file with a tool, a wrapping and an inline validation, and no flakes."""
    path = tmp_path / "state" / "c.db"
    with Catalog.open(path) as opened:
        opened.add(Tool(name="pytest", source=ToolSource.CODE, code=CODE, description="Run it"))
        opened.add(
            Validation(
                name="tests-pass", wraps="pytest", transform="output", description="It passes"
            )
        )
        opened.add(
            Validation(
                name="lint", source=ToolSource.CODE, code=CODE, mode=ValidationMode.INFORMATIONAL
            )
        )
    return path


@pytest.fixture
def flaky(populated: Path) -> Path:
    """The populated catalog, where tests-pass was flaky twice."""
    with Catalog.open(populated) as opened:
        flake(opened, "tests-pass", round=1)
        flake(opened, "tests-pass", round=2)
    return populated


def test_tool_list_without_flakes_has_no_flakes_column(populated: Path) -> None:
    """Until a validation is flaky, tool list prints the table it always did."""
    assert invoke(populated, "tool", "list").stdout == (
        "NAME        TYPE        MODE           ACCESS     SOURCE   DESCRIPTION\n"
        "lint        validation  informational  read-only  code\n"
        "pytest      tool        -              may write  code     Run it\n"
        "tests-pass  validation  required       read-only  wrapped  It passes\n"
        f"{BUILTINS_LINE}\n"
    )


def test_tool_list_shows_the_flakes_column(flaky: Path) -> None:
    """With a flaky validation, tool list has a FLAKES column: the count per validation (0
    when none), '-' for a tool."""
    assert invoke(flaky, "tool", "list").stdout == (
        "NAME        TYPE        MODE           ACCESS     SOURCE   FLAKES  DESCRIPTION\n"
        "lint        validation  informational  read-only  code     0\n"
        "pytest      tool        -              may write  code     -       Run it\n"
        "tests-pass  validation  required       read-only  wrapped  2       It passes\n"
        f"{BUILTINS_LINE}\n"
    )


def test_tool_list_of_tools_has_no_flakes(flaky: Path) -> None:
    """tool list --type tool shows no FLAKES column: a tool cannot be flaky."""
    assert invoke(flaky, "tool", "list", "--type", "tool").stdout == (
        "NAME    TYPE  MODE  ACCESS     SOURCE  DESCRIPTION\n"
        "pytest  tool  -     may write  code    Run it\n" + TOOLS_LINE
    )


def test_tool_list_names_flaky_validations_it_has_no_row_for(flaky: Path) -> None:
    """A flaky built-in used by name, or a graph's own validation, is named on a last line;
    a tool's name recorded as flaky is listed there too, not in the tool's row."""
    with Catalog.open(flaky) as opened:
        flake(opened, "python_syntax")
        flake(opened, "graph-local", round=1)
        flake(opened, "graph-local", round=2)
        flake(opened, "pytest")
    lines = invoke(flaky, "tool", "list").stdout.splitlines()
    assert lines[-1] == (
        "flaky validations not registered here: graph-local (2), pytest (1), python_syntax (1)"
    )
    assert "\n".join(lines[-3:-1]) == BUILTINS_LINE
    assert lines[2].split() == ["pytest", "tool", "-", "may", "write", "code", "-", "Run", "it"]


def test_an_empty_catalog_still_names_its_flaky_validations(tmp_path: Path) -> None:
    """With no entry but flakes of a graph's own validation, tool list says both."""
    path = tmp_path / "c.db"
    with Catalog.open(path) as opened:
        flake(opened, "graph-local")
    assert invoke(path, "tool", "list").stdout == (
        f"no tools\n{BUILTINS_LINE}\nflaky validations not registered here: graph-local (1)\n"
    )
    assert invoke(path, "tool", "list", "--type", "tool").stdout == "no tools\n" + TOOLS_LINE


def test_tool_list_json_adds_flakes_to_flaky_validations(flaky: Path) -> None:
    """tool list --json lists what the text lists: each entry its as_cli_dict, where it
    comes from, what it may do to what it is given, and, for a flaky validation, a last
    key, flakes."""
    listed = json_out(flaky, "tool", "list")
    with Catalog.open(flaky) as opened:
        expected = [
            {**opened.get(name).as_cli_dict(), "origin": "catalog", "access": access}
            for name, access in [
                ("lint", "read-only"),
                ("pytest", "may write"),
                ("tests-pass", "read-only"),
            ]
        ]
    expected[2]["flakes"] = 2
    assert listed[:3] == expected
    assert list(listed[2])[-1] == "flakes"
    # Then the built-ins, usable by name, as the text's last lines name them.
    builtins = {entry["name"]: entry for entry in listed[3:]}
    assert all(entry["origin"] == "builtin" for entry in builtins.values())
    assert BUILTINS_LINE == (
        "built-in validations, usable by name without registering: "
        + ", ".join(n for n, e in builtins.items() if e["tool_type"] == "validation")
        + "\nbuilt-in tools, usable by name without registering: "
        + ", ".join(f"{n} ({e['access']})" for n, e in builtins.items() if e["tool_type"] == "tool")
    )
    validations = json_out(flaky, "tool", "list", "--type", "validation")
    assert validations[:2] == [expected[0], expected[2]]
    assert {entry["tool_type"] for entry in validations} == {"validation"}
    assert {entry["access"] for entry in validations} == {"read-only"}


def test_validation_list_is_still_tool_list_of_validations(flaky: Path) -> None:
    """validation list shows the flakes as `tool list --type validation` does."""
    for extra in ([], ["--json"]):
        a = invoke(flaky, "validation", "list", *extra)
        b = invoke(flaky, "tool", "list", "--type", "validation", *extra)
        assert a.stdout == b.stdout
        assert ('"flakes": 2' if extra else "FLAKES") in a.stdout


def test_tool_show_json_has_the_count_and_the_records(flaky: Path) -> None:
    """tool show --json of a flaky validation adds flakes and flake_records, newest first."""
    shown = json_out(flaky, "tool", "show", "tests-pass")
    with Catalog.open(flaky) as opened:
        expected = opened.get("tests-pass").as_cli_dict()
        at = [r.at for r in opened.flake_records("tests-pass")]
    assert list(shown) == [*expected, "flakes", "flake_records"]
    assert {key: shown[key] for key in expected} == expected
    assert shown["flakes"] == 2
    assert shown["flake_records"] == [
        {"plan_id": "P1", "round": 2, "node": "n", "detail": PASSED_THEN_FAILED, "at": at[0]},
        {"plan_id": "P1", "round": 1, "node": "n", "detail": PASSED_THEN_FAILED, "at": at[1]},
    ]


def test_tool_show_text_lists_the_flakes(flaky: Path) -> None:
    """tool show prints the count and the records as YAML that reads back as the JSON form."""
    text = invoke(flaky, "tool", "show", "tests-pass").stdout
    assert "\nflakes: 2\nflake_records:\n- plan_id: P1\n  round: 2\n  node: n\n" in text
    assert f"  detail: {PASSED_THEN_FAILED}\n" in text
    loaded = yaml.safe_load(text)
    as_json = json_out(flaky, "tool", "show", "tests-pass")
    assert loaded == as_json
    assert list(loaded) == list(as_json)


def test_tool_show_lists_the_five_most_recent(populated: Path) -> None:
    """Of many flakes, tool show counts all and lists the five most recent."""
    with Catalog.open(populated) as opened:
        for number in range(1, 9):
            flake(opened, "lint", round=number)
    shown = json_out(populated, "tool", "show", "lint")
    assert shown["flakes"] == 8
    assert [r["round"] for r in shown["flake_records"]] == [8, 7, 6, 5, 4]


def test_tool_show_without_flakes_is_unchanged(flaky: Path) -> None:
    """A validation never flaky, and a tool, show no flakes fields, in JSON or text."""
    with Catalog.open(flaky) as opened:
        flake(opened, "pytest")  # a tool's name: not shown, only validations are flaky
        for name in ["lint", "pytest"]:
            expected = opened.get(name).as_cli_dict()
            assert json_out(flaky, "tool", "show", name) == expected
            text = invoke(flaky, "tool", "show", name).stdout
            assert "flake" not in text
            assert yaml.safe_load(text) == expected


def test_tool_show_of_a_flaky_built_in(tmp_path: Path) -> None:
    """A built-in validation used by name, never registered, shows its flakes."""
    path = tmp_path / "c.db"
    with Catalog.open(path) as opened:
        flake(opened, "python_syntax", plan="P9", round=4, node="edit")
    shown = json_out(path, "tool", "show", "python_syntax")
    assert shown["flakes"] == 1
    assert [(r["plan_id"], r["round"], r["node"]) for r in shown["flake_records"]] == [
        ("P9", 4, "edit")
    ]
