"""The catalog: opening, tools and validations, wrapping, attachments and their resolution.

Seed 000 ("Relationship to Tool", "Tool Wrapping", "Attachment Scoping", Compliance:
"Attachment scoping tests") and seed 004 ("Wraps Semantics").
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from gategraph.runtime import (
    Attachment,
    Capability,
    Catalog,
    CatalogError,
    ConfigError,
    DuplicateError,
    IntegrityError,
    NotFoundError,
    ResourceSlot,
    Scope,
    Tool,
    ToolSource,
    ToolType,
    Validation,
    ValidationMode,
    default_catalog_path,
)
from gategraph.runtime._base import _home as home_module
from gategraph.runtime._definitions import _catalog as catalog_module
from hypothesis import given, settings
from hypothesis import strategies as st
from ulid import ULID

CODE = "def run(**kw):\n    return {'passed': True}"
ULID_RE = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}


def make_tool(name: str = "pytest", **fields: Any) -> Tool:
    """A plain inline-code tool."""
    return Tool(name=name, source=ToolSource.CODE, code=CODE, **fields)


def make_validation(name: str = "tests-pass", **fields: Any) -> Validation:
    """An inline-code validation, or a wrapping one when ``wraps`` is given."""
    if "wraps" in fields:
        fields.setdefault("transform", "{'passed': bool(output)}")
    else:
        fields.setdefault("source", ToolSource.CODE)
        fields.setdefault("code", CODE)
    return Validation(name=name, **fields)


@pytest.fixture
def wrapped(catalog: Catalog) -> Catalog:
    """A catalog with a tool ``pytest`` (schema, slots, timeout) and nothing else."""
    catalog.add(
        make_tool(
            "pytest",
            input_schema=SCHEMA,
            resource_slots=(ResourceSlot(name="repo"),),
            timeout=30,
        )
    )
    return catalog


# -- opening ---------------------------------------------------------------------------------


class TestOpen:
    """Catalog.open, Catalog.in_memory and default_catalog_path."""

    def test_open_creates_parent_folders_and_file(self, tmp_path: Path) -> None:
        """Opening a path under missing folders creates them and the catalog file."""
        path = tmp_path / "a" / "b" / "gategraph.db"
        with Catalog.open(path) as catalog:
            assert catalog.path == path
        assert path.is_file()

    def test_open_uses_wal_mode(self, tmp_path: Path) -> None:
        """The catalog file is in WAL journal mode, as seen by an unrelated connection."""
        path = tmp_path / "c.db"
        Catalog.open(path).close()
        other = sqlite3.connect(path)
        try:
            assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            other.close()

    def test_open_records_the_schema_version(self, tmp_path: Path) -> None:
        """A schema_version table holds the version the catalog reports."""
        path = tmp_path / "c.db"
        with Catalog.open(path) as catalog:
            version = catalog.schema_version
        assert version == catalog_module.SCHEMA_VERSION >= 1
        other = sqlite3.connect(path)
        try:
            rows = other.execute("SELECT version FROM schema_version").fetchall()
        finally:
            other.close()
        assert rows == [(version,)]

    def test_reopening_keeps_the_data(self, tmp_path: Path) -> None:
        """Tools and attachments written before closing are there after reopening."""
        path = tmp_path / "c.db"
        with Catalog.open(path) as catalog:
            catalog.add(make_tool())
            catalog.add(make_validation())
            attachment = catalog.attach("repo", "tests-pass", arguments={"k": 1})
        with Catalog.open(path) as catalog:
            assert [t.name for t in catalog.list()] == ["pytest", "tests-pass"]
            assert catalog.attachments() == [attachment]
            assert catalog.schema_version == catalog_module.SCHEMA_VERSION

    def test_newer_schema_version_is_refused(self, tmp_path: Path) -> None:
        """A catalog written by a newer gategraph raises ConfigError naming the file."""
        path = tmp_path / "c.db"
        Catalog.open(path).close()
        other = sqlite3.connect(path)
        newer = catalog_module.SCHEMA_VERSION + 1
        with other:
            other.execute("UPDATE schema_version SET version = ?", (newer,))
        other.close()
        with pytest.raises(ConfigError) as info:
            Catalog.open(path)
        assert str(path) in str(info.value)
        assert f"schema version {newer}" in str(info.value)

    def test_non_sqlite_file_is_refused_and_left_alone(self, tmp_path: Path) -> None:
        """A file that is not SQLite raises ConfigError naming it and is not modified."""
        path = tmp_path / "c.db"
        garbage = b"this is not a database\x00\xff" * 200
        path.write_bytes(garbage)
        with pytest.raises(ConfigError) as info:
            Catalog.open(path)
        assert str(path) in str(info.value)
        assert path.read_bytes() == garbage

    def test_directory_is_refused(self, tmp_path: Path) -> None:
        """A directory given as the catalog path raises ConfigError naming it."""
        with pytest.raises(ConfigError) as info:
            Catalog.open(tmp_path)
        assert str(tmp_path) in str(info.value)
        assert "directory" in str(info.value)

    def test_a_file_in_the_way_of_the_folder_is_refused(self, tmp_path: Path) -> None:
        """A parent 'folder' that is a file raises ConfigError naming the catalog path."""
        (tmp_path / "blocker").write_text("a file, not a folder")
        path = tmp_path / "blocker" / "c.db"
        with pytest.raises(ConfigError) as info:
            Catalog.open(path)
        assert str(path) in str(info.value)
        assert "folder" in str(info.value)

    def test_another_sqlite_database_is_refused(self, tmp_path: Path) -> None:
        """A SQLite file with a conflicting table of its own is not taken for a catalog."""
        path = tmp_path / "other.db"
        other = sqlite3.connect(path)
        with other:
            other.execute("CREATE TABLE tools (id INTEGER)")
        other.close()
        with pytest.raises(ConfigError) as info:
            Catalog.open(path)
        assert str(path) in str(info.value)

    def test_an_older_schema_is_upgraded(self, tmp_path: Path) -> None:
        """A catalog at schema version 0 is migrated to the current version on open."""
        path = tmp_path / "old.db"
        other = sqlite3.connect(path)
        with other:
            other.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
            other.execute("INSERT INTO schema_version (version) VALUES (0)")
        other.close()
        with Catalog.open(path) as catalog:
            assert catalog.schema_version == catalog_module.SCHEMA_VERSION
            catalog.add(make_tool())
            assert "pytest" in catalog

    def test_default_path_is_under_the_working_directory(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without GATEGRAPH_HOME the catalog is ./.gategraph/gategraph.db."""
        monkeypatch.delenv("GATEGRAPH_HOME", raising=False)
        monkeypatch.chdir(tmp_path)
        assert default_catalog_path() == tmp_path / ".gategraph" / "gategraph.db"

    def test_default_path_follows_gategraph_home(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """GATEGRAPH_HOME moves the catalog to $GATEGRAPH_HOME/gategraph.db."""
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("GATEGRAPH_HOME", str(tmp_path / "home"))
        assert default_catalog_path() == tmp_path / "home" / "gategraph.db"

    def test_open_without_a_path_uses_the_default(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Catalog.open() creates the catalog at default_catalog_path()."""
        monkeypatch.delenv("GATEGRAPH_HOME", raising=False)
        monkeypatch.chdir(tmp_path)
        with Catalog.open() as catalog:
            assert catalog.path == tmp_path / ".gategraph" / "gategraph.db"
        assert (tmp_path / ".gategraph" / "gategraph.db").is_file()

    def test_in_memory_catalog_works(self) -> None:
        """An in-memory catalog has no path, a schema version, and stores entries."""
        with Catalog.in_memory() as catalog:
            assert catalog.path is None
            assert catalog.schema_version == catalog_module.SCHEMA_VERSION
            catalog.add(make_tool())
            assert "pytest" in catalog
            assert "other" not in catalog
            assert repr(catalog) == "<Catalog :memory:>"

    def test_in_memory_catalogs_are_private(self) -> None:
        """Two in-memory catalogs do not share entries."""
        with Catalog.in_memory() as first, Catalog.in_memory() as second:
            first.add(make_tool())
            assert second.list() == []

    def test_wal_switch_retries_while_the_file_is_busy(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A busy error while switching to WAL is retried (SQLite skips the busy handler)."""
        busy = sqlite3.OperationalError("database is locked")
        busy.sqlite_errorcode = sqlite3.SQLITE_BUSY
        outcomes: list[Any] = [busy, busy, [("wal",)]]

        class Connection:
            def execute(self, sql: str) -> Any:
                assert sql == "PRAGMA journal_mode = WAL"
                outcome = outcomes.pop(0)
                if isinstance(outcome, BaseException):
                    raise outcome

                class Cursor:
                    def fetchone(self) -> tuple[str]:
                        return outcome[0]

                return Cursor()

        monkeypatch.setattr(home_module.time, "sleep", lambda _seconds: None)
        assert home_module.enable_wal(Connection()) == "wal"  # type: ignore[arg-type]
        assert outcomes == []

    def test_wal_switch_does_not_retry_other_errors(self) -> None:
        """Errors other than busy/locked from the WAL switch are raised at once."""
        broken = sqlite3.OperationalError("disk I/O error")
        broken.sqlite_errorcode = sqlite3.SQLITE_IOERR
        calls = 0

        class Connection:
            def execute(self, sql: str) -> Any:
                nonlocal calls
                calls += 1
                raise broken

        with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
            home_module.enable_wal(Connection())  # type: ignore[arg-type]
        assert calls == 1


# -- tools and validations ---------------------------------------------------------------------


class TestAddGetList:
    """One namespace for tools and validations; update rules; listing."""

    def test_add_returns_what_get_returns(self, catalog: Catalog) -> None:
        """add returns the stored entry, equal to what get and list give back."""
        stored = catalog.add(make_tool(description="runs tests", timeout=5))
        assert stored == catalog.get("pytest") == make_tool(description="runs tests", timeout=5)
        assert catalog.list() == [stored]

    def test_validation_round_trips_with_its_type_and_mode(self, catalog: Catalog) -> None:
        """A validation comes back as a Validation with its mode and forced read-only flags."""
        catalog.add(make_validation(mode=ValidationMode.INFORMATIONAL))
        found = catalog.get("tests-pass")
        assert isinstance(found, Validation)
        assert found.tool_type is ToolType.VALIDATION
        assert found.mode is ValidationMode.INFORMATIONAL
        assert found.capability == Capability(read_only=True, writes=False, checkpointable=False)

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            pytest.param(make_tool("same"), make_validation("same"), id="tool-then-validation"),
            pytest.param(make_validation("same"), make_tool("same"), id="validation-then-tool"),
            pytest.param(make_tool("same"), make_tool("same", timeout=3), id="tool-twice"),
            pytest.param(make_validation("same"), make_validation("same"), id="validation-twice"),
        ],
    )
    def test_one_namespace_duplicate_names_fail(
        self, catalog: Catalog, first: Tool, second: Tool
    ) -> None:
        """Tools and validations share one namespace: a second entry of a name is refused."""
        catalog.add(first)
        with pytest.raises(DuplicateError) as info:
            catalog.add(second)
        assert info.value.name == "same"
        assert isinstance(info.value, CatalogError)
        assert catalog.get("same") == first

    def test_update_replaces(self, catalog: Catalog) -> None:
        """update=True replaces an existing entry of the same type."""
        catalog.add(make_tool(description="old", timeout=5))
        stored = catalog.add(make_tool(description="new"), update=True)
        assert stored.description == "new"
        assert catalog.get("pytest").description == "new"
        assert catalog.get("pytest").timeout is None
        assert len(catalog.list()) == 1

    def test_update_of_a_missing_name_adds_it(self, catalog: Catalog) -> None:
        """update=True on a name not yet in the catalog simply adds the entry."""
        catalog.add(make_tool(), update=True)
        assert "pytest" in catalog

    def test_update_cannot_change_a_validation_mode(self, catalog: Catalog) -> None:
        """The mode is fixed at registration: an update with another mode is refused."""
        catalog.add(make_validation(mode=ValidationMode.REQUIRED))
        with pytest.raises(IntegrityError) as info:
            catalog.add(make_validation(mode=ValidationMode.INFORMATIONAL), update=True)
        assert "mode" in str(info.value)
        assert info.value.name == "tests-pass"
        found = catalog.get("tests-pass")
        assert isinstance(found, Validation)
        assert found.mode is ValidationMode.REQUIRED

    def test_update_keeping_the_mode_is_allowed(self, catalog: Catalog) -> None:
        """An update that keeps the mode may change other fields."""
        catalog.add(make_validation(mode=ValidationMode.INFORMATIONAL))
        catalog.add(
            make_validation(mode=ValidationMode.INFORMATIONAL, description="d"), update=True
        )
        assert catalog.get("tests-pass").description == "d"

    @pytest.mark.parametrize(
        ("first", "second"),
        [
            pytest.param(make_tool("same"), make_validation("same"), id="tool-to-validation"),
            pytest.param(make_validation("same"), make_tool("same"), id="validation-to-tool"),
        ],
    )
    def test_update_cannot_change_the_type(
        self, catalog: Catalog, first: Tool, second: Tool
    ) -> None:
        """An update cannot turn a tool into a validation or back."""
        catalog.add(first)
        with pytest.raises(IntegrityError):
            catalog.add(second, update=True)
        assert catalog.get("same") == first

    def test_list_is_sorted_by_name(self, catalog: Catalog) -> None:
        """list() returns every entry sorted by name, whatever the insertion order."""
        for name in ["zeta", "alpha", "mid.dle", "Beta"]:
            catalog.add(make_tool(name))
        catalog.add(make_validation("gamma"))
        names = [t.name for t in catalog.list()]
        assert names == sorted(names)
        assert set(names) == {"zeta", "alpha", "mid.dle", "Beta", "gamma"}

    @pytest.mark.parametrize(
        ("kind", "expected"),
        [
            ("validation", ["v1", "v2"]),
            (ToolType.VALIDATION, ["v1", "v2"]),
            ("tool", ["t1", "t2"]),
            (ToolType.TOOL, ["t1", "t2"]),
            (None, ["t1", "t2", "v1", "v2"]),
        ],
    )
    def test_list_filters_by_type(
        self, catalog: Catalog, kind: ToolType | str | None, expected: list[str]
    ) -> None:
        """list(type=...) returns only tools or only validations."""
        catalog.add(make_validation("v2"))
        catalog.add(make_tool("t2"))
        catalog.add(make_validation("v1"))
        catalog.add(make_tool("t1"))
        assert [t.name for t in catalog.list(kind)] == expected
        assert [t.name for t in catalog.list(type=kind)] == expected

    def test_list_of_an_empty_catalog(self, catalog: Catalog) -> None:
        """An empty catalog lists nothing."""
        assert catalog.list() == []
        assert catalog.list("validation") == []

    def test_an_unreadable_entry_is_a_catalog_error(self, tmp_path: Path) -> None:
        """An entry whose stored config no longer validates raises CatalogError naming it."""
        path = tmp_path / "c.db"
        with Catalog.open(path) as catalog:
            catalog.add(make_tool())
        other = sqlite3.connect(path)
        with other:
            other.execute("UPDATE tools SET config = '{\"name\": 1}' WHERE name = 'pytest'")
        other.close()
        with Catalog.open(path) as catalog, pytest.raises(CatalogError, match="'pytest'"):
            catalog.get("pytest")

    def test_get_unknown_is_not_found(self, catalog: Catalog) -> None:
        """get of an unknown name raises NotFoundError, which is also a LookupError."""
        with pytest.raises(NotFoundError) as info:
            catalog.get("ghost")
        assert isinstance(info.value, LookupError)
        assert info.value.name == "ghost"
        assert "ghost" in str(info.value)


# -- wrapping ----------------------------------------------------------------------------------


class TestWrapping:
    """seed 000, "Tool Wrapping"; seed 004, "Wraps Semantics"."""

    def test_wrapper_inherits_schema_slots_and_timeout(self, wrapped: Catalog) -> None:
        """A wrapping validation inherits input_schema, resource_slots and timeout."""
        added = wrapped.add(make_validation("wrapper", wraps="pytest"))
        got = wrapped.get("wrapper")
        (listed,) = wrapped.list("validation")
        for found in (added, got, listed):
            assert isinstance(found, Validation)
            assert found.source is ToolSource.WRAPPED
            assert found.input_schema == SCHEMA
            assert found.resource_slots == (ResourceSlot(name="repo"),)
            assert found.timeout == 30

    def test_values_set_on_the_wrapper_win(self, wrapped: Catalog) -> None:
        """input_schema, resource_slots and timeout set on the validation are kept."""
        own = {"type": "object"}
        wrapped.add(
            make_validation(
                "wrapper",
                wraps="pytest",
                input_schema=own,
                resource_slots=["docs"],
                timeout=5,
            )
        )
        found = wrapped.get("wrapper")
        assert found.input_schema == own
        assert found.resource_slots == (ResourceSlot(name="docs"),)
        assert found.timeout == 5

    def test_inherited_values_are_not_stored(self, wrapped: Catalog) -> None:
        """A change to the wrapped tool's timeout is seen by the wrapper on the next get."""
        wrapped.add(make_validation("wrapper", wraps="pytest"))
        wrapped.add(
            make_tool("pytest", input_schema=SCHEMA, resource_slots=["repo"], timeout=90),
            update=True,
        )
        assert wrapped.get("wrapper").timeout == 90
        wrapped.add(make_tool("pytest"), update=True)
        found = wrapped.get("wrapper")
        assert found.timeout is None
        assert found.input_schema is None
        assert found.resource_slots == ()

    def test_wrapping_an_unknown_tool_is_not_found(self, catalog: Catalog) -> None:
        """A validation wrapping a name not in the catalog raises NotFoundError."""
        with pytest.raises(NotFoundError) as info:
            catalog.add(make_validation("wrapper", wraps="ghost"))
        assert info.value.name == "ghost"
        assert "wrapper" not in catalog

    def test_wrapping_a_writing_tool_is_refused(self, catalog: Catalog) -> None:
        """A validation cannot wrap a tool whose capability says it writes."""
        catalog.add(make_tool("deploy", capability=Capability(writes=True)))
        with pytest.raises(IntegrityError):
            catalog.add(make_validation("wrapper", wraps="deploy"))
        assert "wrapper" not in catalog

    def test_a_wrapped_tool_cannot_be_made_to_write(self, wrapped: Catalog) -> None:
        """Updating a wrapped tool to writes=True is refused and changes nothing."""
        wrapped.add(make_validation("wrapper", wraps="pytest"))
        before = wrapped.get("pytest")
        with pytest.raises(IntegrityError) as info:
            wrapped.add(make_tool("pytest", capability=Capability(writes=True)), update=True)
        assert "wrapper" in str(info.value)
        assert wrapped.get("pytest") == before

    def test_an_unwrapped_tool_may_be_made_to_write(self, catalog: Catalog) -> None:
        """Only wrapped tools are held read-only; others may be updated to write."""
        catalog.add(make_tool())
        catalog.add(make_tool(capability=Capability(writes=True)), update=True)
        assert catalog.get("pytest").capability.writes is True

    def test_a_cycle_through_an_update_is_refused(self, wrapped: Catalog) -> None:
        """Updating a validation to wrap its own wrapper is refused."""
        wrapped.add(make_validation("first", wraps="pytest"))
        wrapped.add(make_validation("second", wraps="first"))
        wrapped.add(make_validation("third", wraps="second"))
        with pytest.raises(IntegrityError) as info:
            wrapped.add(make_validation("first", wraps="third"), update=True)
        assert "cycle" in str(info.value)
        first = wrapped.get("first")
        assert isinstance(first, Validation)
        assert first.wraps == "pytest"

    def test_a_validation_cannot_wrap_itself(self) -> None:
        """wraps naming the validation itself is refused by the model already."""
        with pytest.raises(ValueError, match="itself"):
            make_validation("self-ref", wraps="self-ref")

    def test_several_validations_wrap_one_tool(self, wrapped: Catalog) -> None:
        """Several validations may wrap the same tool with different transforms."""
        wrapped.add(make_validation("all-pass", wraps="pytest", transform="output['ok']"))
        wrapped.add(
            make_validation(
                "fast-enough",
                wraps="pytest",
                transform="def transform(output):\n    return {'passed': output['t'] < 9}",
            )
        )
        found = {t.name: t for t in wrapped.list("validation")}
        assert set(found) == {"all-pass", "fast-enough"}
        transforms = {getattr(t, "transform", None) for t in found.values()}
        assert len(transforms) == 2
        assert all(t.timeout == 30 for t in found.values())

    def test_inheritance_follows_a_chain(self, wrapped: Catalog) -> None:
        """A validation wrapping a wrapping validation inherits through the chain."""
        wrapped.add(make_validation("middle", wraps="pytest", timeout=10))
        wrapped.add(make_validation("outer", wraps="middle"))
        outer = wrapped.get("outer")
        assert outer.timeout == 10  # from the middle link, which overrides the tool
        assert outer.input_schema == SCHEMA  # from the tool, through the middle link
        assert outer.resource_slots == (ResourceSlot(name="repo"),)

    def test_wrapping_an_inline_validation(self, catalog: Catalog) -> None:
        """A validation may wrap another validation that has its own code."""
        catalog.add(make_validation("inner", timeout=7))
        catalog.add(make_validation("outer", wraps="inner"))
        assert catalog.get("outer").timeout == 7


# -- remove ------------------------------------------------------------------------------------


class TestRemove:
    """Catalog.remove and its guards."""

    def test_remove_returns_the_entry(self, catalog: Catalog) -> None:
        """remove returns what it removed, and the name is gone."""
        catalog.add(make_tool())
        removed = catalog.remove("pytest")
        assert removed == make_tool()
        assert "pytest" not in catalog
        with pytest.raises(NotFoundError):
            catalog.get("pytest")

    def test_remove_unknown_is_not_found(self, catalog: Catalog) -> None:
        """Removing an unknown name raises NotFoundError."""
        with pytest.raises(NotFoundError):
            catalog.remove("ghost")

    def test_a_wrapped_tool_cannot_be_removed(self, wrapped: Catalog) -> None:
        """A tool wrapped by a validation stays until the wrapper is removed."""
        wrapped.add(make_validation("wrapper", wraps="pytest"))
        with pytest.raises(IntegrityError) as info:
            wrapped.remove("pytest", force=True)
        assert "wrapper" in str(info.value)
        assert "pytest" in wrapped
        wrapped.remove("wrapper")
        wrapped.remove("pytest")
        assert wrapped.list() == []

    def test_a_validation_with_attachments_needs_force(self, catalog: Catalog) -> None:
        """Removing an attached validation needs force=True, which also detaches it."""
        catalog.add(make_validation("checked"))
        catalog.add(make_validation("other"))
        catalog.attach("repo", "checked")
        catalog.attach("docs", "checked", project="p")
        kept = catalog.attach("repo", "other")
        with pytest.raises(IntegrityError) as info:
            catalog.remove("checked")
        assert "2 attachment" in str(info.value)
        assert len(catalog.attachments()) == 3
        catalog.remove("checked", force=True)
        assert "checked" not in catalog
        assert catalog.attachments() == [kept]

    def test_remove_then_add_may_change_the_mode(self, catalog: Catalog) -> None:
        """The way to change a mode is to remove the validation and add it again."""
        catalog.add(make_validation(mode=ValidationMode.REQUIRED))
        catalog.remove("tests-pass")
        catalog.add(make_validation(mode=ValidationMode.INFORMATIONAL))
        found = catalog.get("tests-pass")
        assert isinstance(found, Validation)
        assert found.mode is ValidationMode.INFORMATIONAL

    def test_remove_then_add_may_change_the_type(self, catalog: Catalog) -> None:
        """After removal the name is free for an entry of the other type."""
        catalog.add(make_tool("same"))
        catalog.remove("same")
        catalog.add(make_validation("same"))
        assert isinstance(catalog.get("same"), Validation)


# -- attachments -------------------------------------------------------------------------------


class TestAttach:
    """Catalog.attach, detach and attachments."""

    @pytest.fixture
    def catalog(self, catalog: Catalog) -> Catalog:
        """The catalog with two validations and a tool."""
        catalog.add(make_tool("pytest"))
        catalog.add(make_validation("check"))
        catalog.add(make_validation("other"))
        return catalog

    @pytest.mark.parametrize(
        ("kwargs", "scope"),
        [
            ({}, Scope.DIRECT),
            ({"project": "alpha"}, Scope.PROJECT),
            ({"plan": "01PLAN"}, Scope.PLAN),
        ],
    )
    def test_attach_returns_an_attachment(
        self, catalog: Catalog, kwargs: dict[str, str], scope: Scope
    ) -> None:
        """attach returns an Attachment with a fresh ULID id and the scope asked for."""
        attachment = catalog.attach("repo", "check", arguments={"min": 3}, **kwargs)
        assert isinstance(attachment, Attachment)
        assert ULID_RE.match(attachment.id)
        assert str(ULID.from_str(attachment.id)) == attachment.id
        assert attachment.scope is scope
        assert attachment.validation == "check"
        assert attachment.resource == "repo"
        assert attachment.project == kwargs.get("project")
        assert attachment.plan == kwargs.get("plan")
        assert attachment.arguments == {"min": 3}
        assert catalog.get_attachment(attachment.id) == attachment
        assert catalog.attachments() == [attachment]

    def test_project_and_plan_together_are_refused(self, catalog: Catalog) -> None:
        """Giving both a project and a plan is a ConfigError and stores nothing."""
        with pytest.raises(ConfigError):
            catalog.attach("repo", "check", project="alpha", plan="01PLAN")
        assert catalog.attachments() == []

    @pytest.mark.parametrize(
        ("resource", "kwargs", "field"),
        [
            ("", {}, "resource"),
            ("   ", {}, "resource"),
            ("repo", {"project": ""}, "project"),
            ("repo", {"plan": " "}, "plan"),
        ],
    )
    def test_empty_names_are_refused(
        self, catalog: Catalog, resource: str, kwargs: dict[str, str], field: str
    ) -> None:
        """An empty resource, project or plan is a ConfigError naming the field."""
        with pytest.raises(ConfigError) as info:
            catalog.attach(resource, "check", **kwargs)
        assert info.value.field == field
        assert catalog.attachments() == []

    @pytest.mark.parametrize(
        ("resource", "validation", "field"),
        [("r" * 1025, "check", "resource"), ("repo", "not a name", "validation")],
        ids=["resource-too-long", "bad-validation-name"],
    )
    def test_invalid_attachment_fields_are_config_errors(
        self, catalog: Catalog, resource: str, validation: str, field: str
    ) -> None:
        """A resource over 1024 characters or a malformed name is a ConfigError on its field."""
        with pytest.raises(ConfigError) as info:
            catalog.attach(resource, validation)
        assert info.value.field == field
        assert catalog.attachments() == []

    def test_attaching_a_plain_tool_is_refused(self, catalog: Catalog) -> None:
        """Only validations can be attached; a tool raises IntegrityError."""
        with pytest.raises(IntegrityError):
            catalog.attach("repo", "pytest")
        assert catalog.attachments() == []

    def test_attaching_an_unknown_validation_is_not_found(self, catalog: Catalog) -> None:
        """Attaching a name not in the catalog raises NotFoundError."""
        with pytest.raises(NotFoundError) as info:
            catalog.attach("repo", "ghost")
        assert info.value.name == "ghost"
        assert catalog.attachments() == []

    @pytest.mark.parametrize(
        "kwargs", [{}, {"project": "alpha"}, {"plan": "01PLAN"}], ids=["direct", "project", "plan"]
    )
    def test_identical_attachment_at_one_scope_is_duplicate(
        self, catalog: Catalog, kwargs: dict[str, str]
    ) -> None:
        """The same validation, resource, scope and arguments twice raises DuplicateError."""
        first = catalog.attach("repo", "check", arguments={"a": 1, "b": 2}, **kwargs)
        with pytest.raises(DuplicateError) as info:
            catalog.attach("repo", "check", arguments={"b": 2, "a": 1}, **kwargs)
        assert info.value.name == first.id
        assert catalog.attachments() == [first]

    def test_same_validation_with_different_arguments_many_times(self, catalog: Catalog) -> None:
        """The same validation may be attached many times with different arguments."""
        made = [catalog.attach("repo", "check", arguments={"n": n}) for n in range(5)]
        made.append(catalog.attach("repo", "check"))
        assert catalog.attachments() == made
        assert len({a.id for a in made}) == len(made)

    def test_same_arguments_at_other_scopes_or_resources_are_allowed(
        self, catalog: Catalog
    ) -> None:
        """Identical arguments are fine at another scope, project, plan or resource."""
        made = [
            catalog.attach("repo", "check"),
            catalog.attach("repo", "check", project="alpha"),
            catalog.attach("repo", "check", project="beta"),
            catalog.attach("repo", "check", plan="01PLAN"),
            catalog.attach("repo", "check", plan="02PLAN"),
            catalog.attach("docs", "check"),
            catalog.attach("repo", "other"),
        ]
        assert catalog.attachments() == made

    @pytest.mark.parametrize(
        "arguments",
        [
            {"x": object()},
            {"x": float("nan")},
            {"x": float("inf")},
            {"x": {1, 2}},
            {"x": b"bytes"},
        ],
        ids=["object", "nan", "inf", "set", "bytes"],
    )
    def test_non_json_arguments_are_refused(
        self, catalog: Catalog, arguments: dict[str, Any]
    ) -> None:
        """Arguments that JSON cannot carry are a ConfigError on the arguments field."""
        with pytest.raises(ConfigError) as info:
            catalog.attach("repo", "check", arguments=arguments)
        assert info.value.field == "arguments"
        assert catalog.attachments() == []

    def test_nested_arguments_round_trip(self, catalog: Catalog) -> None:
        """Nested JSON arguments come back equal from the catalog."""
        arguments = {"paths": ["a", "b"], "limits": {"max": 3, "strict": True}, "none": None}
        made = catalog.attach("repo", "check", arguments=arguments)
        assert catalog.get_attachment(made.id).arguments == arguments

    def test_detach_returns_and_removes(self, catalog: Catalog) -> None:
        """detach returns the attachment and it is gone afterwards."""
        first = catalog.attach("repo", "check", project="alpha", arguments={"k": "v"})
        second = catalog.attach("repo", "other")
        assert catalog.detach(first.id) == first
        assert catalog.attachments() == [second]
        with pytest.raises(NotFoundError):
            catalog.get_attachment(first.id)

    def test_detach_unknown_is_not_found(self, catalog: Catalog) -> None:
        """Detaching an unknown id raises NotFoundError and removes nothing."""
        kept = catalog.attach("repo", "check")
        with pytest.raises(NotFoundError) as info:
            catalog.detach(str(ULID()))
        assert isinstance(info.value, LookupError)
        assert catalog.attachments() == [kept]

    def test_after_detach_the_same_attachment_can_be_made_again(self, catalog: Catalog) -> None:
        """Detaching frees the identity: the same attachment is accepted with a new id."""
        first = catalog.attach("repo", "check")
        catalog.detach(first.id)
        again = catalog.attach("repo", "check")
        assert again.id != first.id

    def test_attachments_filter_in_creation_order(self, catalog: Catalog) -> None:
        """attachments(resource=, validation=) filters and keeps creation order."""
        a = catalog.attach("repo", "other", arguments={"n": 1})
        b = catalog.attach("docs", "check")
        c = catalog.attach("repo", "check", plan="01PLAN")
        d = catalog.attach("repo", "other", project="alpha")
        e = catalog.attach("docs", "other")
        assert catalog.attachments() == [a, b, c, d, e]
        assert catalog.attachments(resource="repo") == [a, c, d]
        assert catalog.attachments(validation="other") == [a, d, e]
        assert catalog.attachments(resource="docs", validation="check") == [b]
        assert catalog.attachments(resource="nowhere") == []


# -- resolve -----------------------------------------------------------------------------------


class TestResolve:
    """seed 000, "Attachment Scoping": direct + project + plan, most specific scope wins."""

    @pytest.fixture
    def catalog(self, catalog: Catalog) -> Catalog:
        """The catalog with validations ``check`` and ``other``."""
        catalog.add(make_validation("check"))
        catalog.add(make_validation("other"))
        return catalog

    def test_union_of_direct_project_and_plan(self, catalog: Catalog) -> None:
        """The matching direct, project and plan attachments are all returned."""
        direct = catalog.attach("repo", "check", arguments={"level": 1})
        project = catalog.attach("repo", "check", project="alpha", arguments={"level": 2})
        plan = catalog.attach("repo", "other", plan="01PLAN")
        assert catalog.resolve("repo", project="alpha", plan="01PLAN") == [direct, project, plan]

    @pytest.mark.parametrize(
        ("project", "plan", "expected"),
        [
            (None, None, ["direct"]),
            ("alpha", None, ["direct", "alpha"]),
            ("beta", None, ["direct", "beta"]),
            ("gamma", None, ["direct"]),
            (None, "01PLAN", ["direct", "plan1"]),
            (None, "03PLAN", ["direct"]),
            ("alpha", "02PLAN", ["direct", "alpha", "plan2"]),
            ("beta", "01PLAN", ["direct", "beta", "plan1"]),
        ],
    )
    def test_non_matching_scopes_are_excluded(
        self, catalog: Catalog, project: str | None, plan: str | None, expected: list[str]
    ) -> None:
        """Only the project and plan asked for apply; other resources never do."""
        made = {
            "direct": catalog.attach("repo", "check", arguments={"t": "direct"}),
            "alpha": catalog.attach("repo", "check", project="alpha", arguments={"t": "alpha"}),
            "beta": catalog.attach("repo", "check", project="beta", arguments={"t": "beta"}),
            "plan1": catalog.attach("repo", "check", plan="01PLAN", arguments={"t": "plan1"}),
            "plan2": catalog.attach("repo", "check", plan="02PLAN", arguments={"t": "plan2"}),
        }
        catalog.attach("docs", "check", arguments={"t": "direct"})
        catalog.attach("docs", "check", project="alpha")
        catalog.attach("docs", "other", plan="01PLAN")
        assert catalog.resolve("repo", project=project, plan=plan) == [made[k] for k in expected]

    def test_unknown_resource_resolves_to_nothing(self, catalog: Catalog) -> None:
        """A resource without attachments resolves to an empty list."""
        catalog.attach("repo", "check")
        assert catalog.resolve("elsewhere", project="alpha", plan="01PLAN") == []

    @pytest.mark.parametrize(
        ("scopes", "winner"),
        [
            (["direct", "project", "plan"], "plan"),
            (["plan", "project", "direct"], "plan"),
            (["direct", "project"], "project"),
            (["project", "direct"], "project"),
            (["direct", "plan"], "plan"),
            (["project", "plan"], "plan"),
            (["plan", "direct"], "plan"),
        ],
    )
    def test_most_specific_scope_wins_for_identical_arguments(
        self, catalog: Catalog, scopes: list[str], winner: str
    ) -> None:
        """Identical (validation, arguments) at several scopes: only the most specific stays."""
        where = {"direct": {}, "project": {"project": "alpha"}, "plan": {"plan": "01PLAN"}}
        made = {s: catalog.attach("repo", "check", arguments={"x": 1}, **where[s]) for s in scopes}
        assert catalog.resolve("repo", project="alpha", plan="01PLAN") == [made[winner]]

    def test_the_winner_is_only_chosen_among_matching_scopes(self, catalog: Catalog) -> None:
        """A non-matching plan attachment does not hide the matching project one."""
        catalog.attach("repo", "check", plan="01PLAN", arguments={"x": 1})
        project = catalog.attach("repo", "check", project="alpha", arguments={"x": 1})
        catalog.attach("repo", "check", arguments={"x": 1})
        assert catalog.resolve("repo", project="alpha", plan="02PLAN") == [project]

    def test_different_arguments_are_all_kept(self, catalog: Catalog) -> None:
        """The same validation with different arguments at several scopes is kept each time."""
        made = [
            catalog.attach("repo", "check", arguments={"x": 1}),
            catalog.attach("repo", "check", project="alpha", arguments={"x": 2}),
            catalog.attach("repo", "check", plan="01PLAN", arguments={"x": 3}),
            catalog.attach("repo", "check", plan="01PLAN"),
        ]
        assert catalog.resolve("repo", project="alpha", plan="01PLAN") == made

    def test_different_validations_with_identical_arguments_are_kept(
        self, catalog: Catalog
    ) -> None:
        """Identity is (validation, arguments): another validation is not shadowed."""
        first = catalog.attach("repo", "check", arguments={"x": 1})
        second = catalog.attach("repo", "other", plan="01PLAN", arguments={"x": 1})
        assert catalog.resolve("repo", plan="01PLAN") == [first, second]

    def test_argument_identity_ignores_key_order(self, catalog: Catalog) -> None:
        """{"a":1,"b":2} and {"b":2,"a":1} are the same arguments: the plan one wins."""
        catalog.attach("repo", "check", arguments={"a": 1, "b": {"c": 3, "d": 4}})
        plan = catalog.attach(
            "repo", "check", plan="01PLAN", arguments={"b": {"d": 4, "c": 3}, "a": 1}
        )
        assert catalog.resolve("repo", plan="01PLAN") == [plan]

    def test_result_is_in_creation_order(self, catalog: Catalog) -> None:
        """The resolved attachments come in the order they were made, not by scope."""
        plan = catalog.attach("repo", "other", plan="01PLAN")
        project = catalog.attach("repo", "check", project="alpha")
        direct = catalog.attach("repo", "check", arguments={"late": True})
        assert catalog.resolve("repo", project="alpha", plan="01PLAN") == [plan, project, direct]

    def test_winner_keeps_its_own_position(self, catalog: Catalog) -> None:
        """A winning plan attachment made last is listed where it was made, after the others."""
        direct = catalog.attach("repo", "check", arguments={"x": 1})
        other = catalog.attach("repo", "other")
        plan = catalog.attach("repo", "check", plan="01PLAN", arguments={"x": 1})
        resolved = catalog.resolve("repo", plan="01PLAN")
        assert resolved == [other, plan]
        assert direct not in resolved


# -- resolve against a reference implementation ------------------------------------------------

VALIDATIONS = ("check", "other")
PROJECTS = ("alpha", "beta")
PLANS = ("01PLAN", "02PLAN")
RESOURCES = ("repo", "docs")

small_arguments = st.dictionaries(
    st.sampled_from(["a", "b", "c"]), st.integers(min_value=0, max_value=1), max_size=2
)


@st.composite
def attachment_specs(draw: st.DrawFn) -> dict[str, Any]:
    """One attachment request: validation, resource, scope and arguments (key order random)."""
    scope = draw(st.sampled_from(list(Scope)))
    arguments = draw(small_arguments)
    if draw(st.booleans()):
        arguments = dict(reversed(arguments.items()))
    return {
        "validation": draw(st.sampled_from(VALIDATIONS)),
        "resource": draw(st.sampled_from(RESOURCES)),
        "project": draw(st.sampled_from(PROJECTS)) if scope is Scope.PROJECT else None,
        "plan": draw(st.sampled_from(PLANS)) if scope is Scope.PLAN else None,
        "arguments": arguments,
    }


queries = st.tuples(
    st.sampled_from(RESOURCES),
    st.one_of(st.none(), st.sampled_from((*PROJECTS, "gamma"))),
    st.one_of(st.none(), st.sampled_from((*PLANS, "03PLAN"))),
)

SPECIFICITY = {Scope.DIRECT: 0, Scope.PROJECT: 1, Scope.PLAN: 2}


def reference_resolve(
    made: list[Attachment], resource: str, project: str | None, plan: str | None
) -> list[Attachment]:
    """Seed 000 read literally: collect, union, most specific wins per identical arguments."""
    applicable = [
        a
        for a in made
        if a.resource == resource
        and (
            a.scope is Scope.DIRECT
            or (a.scope is Scope.PROJECT and a.project == project)
            or (a.scope is Scope.PLAN and a.plan == plan)
        )
    ]
    kept = []
    for a in applicable:
        rivals = [
            b
            for b in applicable
            if b.validation == a.validation
            and b.arguments == a.arguments
            and SPECIFICITY[b.scope] > SPECIFICITY[a.scope]
        ]
        if not rivals:
            kept.append(a)
    return kept  # already in creation order


@settings(deadline=None, max_examples=150)
@given(specs=st.lists(attachment_specs(), max_size=25), asked=st.lists(queries, min_size=1))
def test_resolve_matches_a_reference_implementation(
    specs: list[dict[str, Any]], asked: list[tuple[str, str | None, str | None]]
) -> None:
    """For random attachments and queries, resolve equals a straightforward reference."""
    with Catalog.in_memory() as catalog:
        for name in VALIDATIONS:
            catalog.add(make_validation(name))
        made: list[Attachment] = []
        for spec in specs:
            same = [
                a
                for a in made
                if (a.validation, a.resource, a.project, a.plan, a.arguments)
                == (
                    spec["validation"],
                    spec["resource"],
                    spec["project"],
                    spec["plan"],
                    spec["arguments"],
                )
            ]
            if same:
                with pytest.raises(DuplicateError):
                    catalog.attach(**spec)
            else:
                made.append(catalog.attach(**spec))
        assert catalog.attachments() == made
        for resource, project, plan in asked:
            expected = reference_resolve(made, resource, project, plan)
            assert catalog.resolve(resource, project=project, plan=plan) == expected


# -- several processes at once -----------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import pathlib, sys, time
    from gategraph.runtime import Catalog, Validation

    path, worker, ready, go = sys.argv[1:5]
    pathlib.Path(ready).touch()
    deadline = time.monotonic() + 120  # only so that a lost start signal cannot hang CI
    while not pathlib.Path(go).exists():
        if time.monotonic() > deadline:
            sys.exit("never told to start")
        time.sleep(0.001)
    code = "def run(**kw):\\n    return {'passed': True}"
    with Catalog.open(path) as catalog:
        for i in range(COUNT):
            name = f"w{worker}-check-{i}"
            catalog.add(Validation(name=name, source="code", code=code))
            for attachment in (
                catalog.attach("repo", name, arguments={"worker": worker, "i": i}),
                catalog.attach("repo", name, plan="01PLAN", arguments={"i": i}),
            ):
                print(attachment.id, flush=True)
    """
)
WORKERS = 3
PER_WORKER = 40


def test_concurrent_processes_lose_no_write(tmp_path: Path) -> None:
    """Real processes adding and attaching into one new catalog file all succeed, losing nothing."""
    path = tmp_path / "shared" / "gategraph.db"
    go = tmp_path / "go"
    script = WORKER.replace("COUNT", str(PER_WORKER))
    workers = []
    for worker in range(WORKERS):
        ready = tmp_path / f"ready-{worker}"
        args = [sys.executable, "-c", script, str(path), str(worker), str(ready), str(go)]
        workers.append(
            subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    try:
        # No deadline here: pytest-timeout guards against a hang, and no speed is assumed.
        while not all((tmp_path / f"ready-{w}").exists() for w in range(WORKERS)):
            assert all(p.poll() is None for p in workers), "a worker died before the start"
            time.sleep(0.01)
        go.touch()  # every worker is waiting: release them together
        outputs = [p.communicate(timeout=120) for p in workers]
    finally:
        for p in workers:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_out, err) in zip(workers, outputs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    printed = [line for out, _err in outputs for line in out.split()]
    assert len(printed) == WORKERS * PER_WORKER * 2
    assert len(set(printed)) == len(printed), "attachment ids are not unique"

    with Catalog.open(path) as catalog:
        names = {t.name for t in catalog.list("validation")}
        assert names == {f"w{w}-check-{i}" for w in range(WORKERS) for i in range(PER_WORKER)}
        attachments = catalog.attachments()
        assert sorted(a.id for a in attachments) == sorted(printed)
        for w in range(WORKERS):
            for i in range(PER_WORKER):
                assert len(catalog.attachments(validation=f"w{w}-check-{i}")) == 2
    other = sqlite3.connect(path)
    try:
        assert other.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert other.execute("SELECT count(*) FROM attachments").fetchone()[0] == len(printed)
    finally:
        other.close()


def test_attachment_ids_are_unique_and_json_serialisable(catalog: Catalog) -> None:
    """Ids from many attachments in one process are distinct ULIDs; model_dump is JSON."""
    catalog.add(make_validation("check"))
    made = [catalog.attach("repo", "check", arguments={"n": n}) for n in range(200)]
    assert len({a.id for a in made}) == 200
    assert all(ULID_RE.match(a.id) for a in made)
    json.dumps([a.model_dump(mode="json") for a in made])


def test_names_membership_and_a_bad_type() -> None:
    """`names()` is what is registered, sorted (not the built-ins `in` also knows); `in` of
    what is not a name is False; listing an unknown type is one ConfigError naming it."""
    catalog = Catalog.in_memory()
    catalog.add(Tool(name="zeta", source=ToolSource.CODE, code="def run(**_): pass"))
    catalog.add(Tool(name="alpha", source=ToolSource.CODE, code="def run(**_): pass"))
    assert catalog.names() == ["alpha", "zeta"]
    assert "regex" in catalog and 7 not in catalog
    with pytest.raises(ConfigError, match="type: must be 'tool' or 'validation', not 'widget'"):
        catalog.list("widget")


def test_a_write_the_database_refuses_is_one_catalog_line(tmp_path: Path) -> None:
    """A catalog file that takes no writes (a read-only medium, say): the refusal names
    the catalog, on one line, and the catalog still reads."""
    with Catalog.open(tmp_path / "gategraph.db") as catalog:
        catalog.add(make_tool("kept"))
        catalog._db.execute("PRAGMA query_only = ON")  # what a read-only file does
        with pytest.raises(CatalogError) as caught:
            catalog.add(make_tool("refused"))
        assert str(caught.value) == (
            f"catalog {tmp_path / 'gategraph.db'}: attempt to write a readonly database"
        )
        assert catalog.names() == ["kept"]
