"""The catalog: the registry of tools, validations and attachments, on SQLite.

It also keeps the record of flaky validations: each time a run found that a validation gave
different outcomes on identical inputs (the same files, the same arguments).

One file holds everything (``.gategraph/gategraph.db`` under the working directory, or
``$GATEGRAPH_HOME/gategraph.db``). Every write runs in a ``BEGIN IMMEDIATE`` transaction in
WAL mode with a busy timeout, so several processes may add and attach at the same time
without corrupting the file or losing a write.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, Self

import msgspec
from gategraph.runtime._base._exceptions import (
    CatalogError,
    ConfigError,
    ConfigIssue,
    DuplicateError,
    IntegrityError,
    NotFoundError,
)
from gategraph.runtime._base._home import BUSY_TIMEOUT_MS, default_catalog_path, enable_wal
from gategraph.runtime._base._kernel import keep_out, let_in
from gategraph.runtime._base._yaml import format_path
from gategraph.runtime._calls._mcp import McpServer
from gategraph.runtime._data._models import (
    Attachment,
    AttachmentId,
    Scope,
    Tool,
    ToolSource,
    ToolType,
    Validation,
)
from gategraph.runtime._storage._postgres import CatalogConnection, is_postgres_url, shown_url
from pydantic import ValidationError

from ._evidence import COVERAGE, Coverage, PlanCriterion, Refusal, Verdicts, atom_id, binding_id
from ._plugins import shipped
from ._skills import Skill

if TYPE_CHECKING:
    import builtins
    from collections.abc import Iterator, Mapping, Sequence

    from ._evidence import PlanRoster

__all__ = ["Catalog", "FlakeRecord"]


class _Connection(Protocol):
    """What the catalog uses of a database connection: ``sqlite3``'s, or a PostgreSQL one
    that speaks it (:class:`CatalogConnection`)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...

    def close(self) -> None: ...


# Each entry upgrades the schema by one version; never edit a shipped entry, append one.
_MIGRATIONS: Final[tuple[str, ...]] = (
    """
    CREATE TABLE tools (
        name       TEXT PRIMARY KEY,
        tool_type  TEXT NOT NULL CHECK (tool_type IN ('tool', 'validation')),
        wraps      TEXT,
        config     TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX tools_wraps ON tools (wraps);
    CREATE TABLE attachments (
        seq        INTEGER PRIMARY KEY,
        id         TEXT NOT NULL UNIQUE,
        validation TEXT NOT NULL REFERENCES tools (name),
        resource   TEXT NOT NULL,
        scope      TEXT NOT NULL CHECK (scope IN ('direct', 'project', 'plan')),
        project    TEXT,
        plan       TEXT,
        arguments  TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX attachments_resource ON attachments (resource);
    CREATE INDEX attachments_validation ON attachments (validation);
    """,
    # 2: MCP servers, named by the `mcp_server` of MCP tools.
    """
    CREATE TABLE mcp_servers (
        name       TEXT PRIMARY KEY,
        config     TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    """,
    # 3: flakes, one row per time a validation was found flaky. By name, not a reference to
    # `tools`: a graph's own validation, or a built-in used by name, can be flaky too. The
    # unique key makes recording the same flake again (a resumed plan) a no-op.
    """
    CREATE TABLE flakes (
        seq        INTEGER PRIMARY KEY,
        validation TEXT NOT NULL,
        plan_id    TEXT NOT NULL,
        round      INTEGER NOT NULL,
        node       TEXT NOT NULL,
        detail     TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (validation, plan_id, round, node)
    );
    """,
    # 4: evidence (seed 003). A plan's roster of acceptance criteria, registered when it
    # starts so a validator outside the plan can pull it by the plan's id; and the
    # bindings of evidence to criteria, unique per (atom, criterion, type) so binding again
    # collapses into the row there (its time is updated: coverage counts from a moment).
    """
    CREATE TABLE evidence_plans (
        plan_id    TEXT PRIMARY KEY,
        criteria   INTEGER NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE TABLE acceptance_criteria (
        id          TEXT PRIMARY KEY,
        plan_id     TEXT NOT NULL REFERENCES evidence_plans (plan_id),
        ordinal     INTEGER NOT NULL,
        alias       TEXT NOT NULL,
        key         TEXT NOT NULL,
        text        TEXT NOT NULL,
        validations TEXT NOT NULL,
        UNIQUE (plan_id, ordinal)
    );
    CREATE TABLE evidence_ac_bindings (
        id               TEXT PRIMARY KEY,
        evidence_atom_id TEXT NOT NULL,
        ac_id            TEXT NOT NULL REFERENCES acceptance_criteria (id),
        binding_type     TEXT NOT NULL,
        plan_id          TEXT NOT NULL,
        validator_id     TEXT NOT NULL,
        bound_at         REAL NOT NULL,
        UNIQUE (evidence_atom_id, ac_id, binding_type)
    );
    CREATE INDEX evidence_ac_bindings_plan ON evidence_ac_bindings (plan_id);
    """,
    # 5: skills (seed 000), named compositions of tools and validations. The members by
    # name, not as references to `tools`: a built-in or a plugin's validation can be one.
    # The skill's config holds their order; `skill_members` answers "which skills have X".
    """
    CREATE TABLE skills (
        name       TEXT PRIMARY KEY,
        config     TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE TABLE skill_members (
        skill TEXT NOT NULL REFERENCES skills (name),
        tool  TEXT NOT NULL,
        PRIMARY KEY (skill, tool)
    );
    CREATE INDEX skill_members_tool ON skill_members (tool);
    """,
    # 6: outside validators' credentials (only their digests: the file never holds one
    # that can be used), each one's latest verdict on a plan (a rejection stands until the
    # same validator attests), and the verdicts refused for want of a valid credential.
    """
    CREATE TABLE validator_credentials (
        digest       TEXT PRIMARY KEY,
        validator_id TEXT NOT NULL,
        plan_id      TEXT,
        created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX validator_credentials_id ON validator_credentials (validator_id);
    CREATE TABLE validator_verdicts (
        plan_id      TEXT NOT NULL,
        validator_id TEXT NOT NULL,
        verdict      TEXT NOT NULL CHECK (verdict IN ('attest', 'reject')),
        given_at     REAL NOT NULL,
        PRIMARY KEY (plan_id, validator_id)
    );
    CREATE TABLE validator_refusals (
        seq          INTEGER PRIMARY KEY,
        plan_id      TEXT NOT NULL,
        validator_id TEXT NOT NULL,
        reason       TEXT NOT NULL,
        refused_at   REAL NOT NULL
    );
    CREATE INDEX validator_refusals_plan ON validator_refusals (plan_id);
    """,
)
SCHEMA_VERSION: Final = len(_MIGRATIONS)


class FlakeRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One time a validation gave different outcomes on identical inputs."""

    plan_id: str
    """The plan it happened in."""
    round: int
    """The plan's validation round (1 for the first)."""
    node: str
    """The node the validation checked."""
    detail: str
    """What differed, in a few words: "passed, then failed on the same inputs"."""
    at: str
    """When it was recorded, ISO 8601 in UTC (``2025-01-31T12:00:00.000Z``)."""


def _canonical(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), allow_nan=False)


class Catalog:
    """The registry of tools, validations and attachments.

    Open one with :meth:`open` (a SQLite file) or :meth:`in_memory`. Methods are
    synchronous and thread-safe; use the catalog as a context manager to close it.
    """

    def __init__(
        self, connection: _Connection, path: Path | None, *, url: str | None = None
    ) -> None:
        self._db = connection
        self._path = path
        self._url = url
        self._lock = threading.RLock()
        self._migrate()
        self._kept_out = path is not None
        if path is not None:
            keep_out(path)  # no sandboxed call may lock it (and stall its writers)

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None) -> Self:
        """Open (creating if needed) the catalog at ``path``, by default :func:`default_catalog_path`.

        ``path`` may be a PostgreSQL URL (``postgresql://USER@HOST/DATABASE``, with the
        ``postgres`` extra): the catalog's tables are then made in that database, shared
        by every host that reaches it.

        Raises :class:`ConfigError` if the file cannot be used as a catalog.
        """
        if is_postgres_url(path):
            assert isinstance(path, str)
            return cls(CatalogConnection(path), None, url=path)
        file = Path(path) if path is not None else default_catalog_path()
        source = os.fspath(file)
        try:
            file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"cannot create the catalog folder: {exc.strerror or exc}", source=source
            ) from None
        if file.is_dir():
            raise ConfigError("is a directory, not a catalog file", source=source)
        try:
            connection = sqlite3.connect(
                file, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise ConfigError(f"cannot open the catalog: {exc}", source=source) from None
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = enable_wal(connection)
            if str(mode).lower() != "wal":  # pragma: no cover - e.g. a read-only medium
                raise ConfigError(
                    f"cannot switch the catalog to WAL mode (got {mode})", source=source
                )
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA foreign_keys = ON")
            return cls(connection, file)
        except sqlite3.DatabaseError as exc:
            connection.close()
            raise ConfigError(f"not a gategraph catalog ({exc})", source=source) from None
        except BaseException:
            connection.close()
            raise

    @classmethod
    def in_memory(cls) -> Self:
        """Open a private catalog that lives in memory, for embedding and tests."""
        connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        connection.execute("PRAGMA foreign_keys = ON")
        return cls(connection, None)

    @property
    def path(self) -> Path | None:
        """The catalog's file, or ``None`` for an in-memory or PostgreSQL catalog."""
        return self._path

    @property
    def url(self) -> str | None:
        """The PostgreSQL database the catalog is in (as it was given), or ``None``."""
        return self._url

    @property
    def where(self) -> str:
        """Where the catalog is, for messages: its file, its database (no password), or
        ``:memory:``."""
        if self._url is not None:
            return shown_url(self._url)
        return os.fspath(self._path) if self._path else ":memory:"

    def close(self) -> None:
        """Close the database connection. The catalog cannot be used afterwards."""
        with self._lock:
            self._db.close()
            if self._kept_out:
                self._kept_out = False
                let_in(self._path)  # type: ignore[arg-type]  # kept out: it has a path

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Catalog {self.where}>"

    @contextmanager
    def _write(self) -> Iterator[_Connection]:
        # BEGIN IMMEDIATE takes the write lock up front, so a check-then-insert cannot
        # race another process (it waits on the busy timeout instead).
        with self._refused(), self._transaction() as db:
            yield db

    @contextmanager
    def _transaction(self) -> Iterator[_Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                with contextlib.suppress(sqlite3.Error):  # rolled back already, if it failed
                    self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    @contextmanager
    def _refused(self) -> Iterator[None]:
        """What the database refuses (read-only, full, locked past the busy timeout) as one
        :class:`CatalogError` line, naming the catalog (a PostgreSQL catalog's connection
        says it so already)."""
        try:
            yield
        except sqlite3.Error as exc:
            raise CatalogError(f"catalog {self.where}: {' '.join(str(exc).split())}") from None

    def _migrate(self) -> None:
        # Not _write: what SQLite refuses here means the file is no catalog (open says so).
        with self._transaction() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema_version").fetchone()
            version = 0 if row is None else int(row[0])
            if version > SCHEMA_VERSION:
                raise ConfigError(
                    f"the catalog has schema version {version}, newer than this gategraph "
                    f"understands ({SCHEMA_VERSION}); upgrade gategraph",
                    source=None if self._path is None and self._url is None else self.where,
                )
            for script in _MIGRATIONS[version:]:
                for statement in script.split(";"):
                    if statement.strip():
                        db.execute(statement)
            if row is None:
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            elif version != SCHEMA_VERSION:
                db.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION,))

    @property
    def schema_version(self) -> int:
        """The schema version of the open catalog."""
        with self._lock:
            return int(self._db.execute("SELECT version FROM schema_version").fetchone()[0])

    # -- tools and validations -------------------------------------------------------------

    def _load(self, db: _Connection, name: str) -> Tool | None:
        row = db.execute("SELECT tool_type, config FROM tools WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        return self._decode(name, row[0], row[1])

    def _find(self, db: _Connection, name: str) -> Tool | None:
        """A registered entry, else the built-in validation of that name, else ``None``."""
        found = self._load(db, name)
        return found if found is not None else shipped(name)

    def _decode(self, name: str, tool_type: str, config: str) -> Tool:
        model: type[Tool] = Validation if tool_type == ToolType.VALIDATION.value else Tool
        try:
            return model.model_validate_json(config)
        except ValidationError as exc:
            problem = self._unreadable(
                f"catalog entry {name!r}",
                exc,
                f"remove it (gategraph tool remove {name}) or add it again "
                "(gategraph tool add --config FILE --update)",
            )
            raise CatalogError(problem) from None

    def _resolved(self, db: _Connection, tool: Tool) -> Tool:
        """Apply wrapping inheritance along the ``wraps`` chain (seed 000, "Tool Wrapping")."""
        if not isinstance(tool, Validation) or tool.wraps is None:
            return tool
        seen = {tool.name}
        wrapped = self._find(db, tool.wraps)
        if wrapped is None:  # pragma: no cover - removal of a wrapped tool is refused
            raise CatalogError(f"{tool.name!r} wraps {tool.wraps!r}, which is missing")
        if isinstance(wrapped, Validation) and wrapped.wraps is not None:
            if wrapped.name in seen:  # pragma: no cover - cycles are refused on add
                raise CatalogError(f"wrapping cycle through {wrapped.name!r}")
            wrapped = self._resolved(db, wrapped)
        return tool.inherit_from(wrapped)

    def add(self, tool: Tool, *, update: bool = False) -> Tool:
        """Register ``tool`` (or a :class:`Validation`); return it as stored, with inheritance.

        Raises :class:`DuplicateError` if the name exists and ``update`` is false,
        :class:`IntegrityError` if an update would change a validation's mode or the
        entry's type, or make a wrapped tool write, :class:`NotFoundError` if a
        validation wraps a tool that does not exist, and :class:`ConfigError` if an MCP
        tool names a server the catalog does not have.
        """
        with self._write() as db:
            return self._add(db, tool, update)

    def add_many(self, tools: builtins.list[Tool], *, update: bool = False) -> builtins.list[Tool]:
        """Register several tools at once, as :meth:`add` does each: all of them, or (when
        one is refused) none."""
        with self._write() as db:
            return [self._add(db, tool, update) for tool in tools]

    def _add(self, db: _Connection, tool: Tool, update: bool) -> Tool:
        from gategraph.runtime._data._validator_declarations import VALIDATOR_TOOLS

        if tool.name in VALIDATOR_TOOLS:
            # How outside validators reach plans: a name that must mean one thing.
            raise ConfigError.at(
                "name", f"{tool.name!r} is the name of a built-in validator tool: pick another"
            )
        config = tool.model_dump_json(exclude_defaults=True)
        if tool.source is ToolSource.MCP and tool.mcp_server is not None:
            if self._server(db, tool.mcp_server) is None:
                raise ConfigError.at(
                    "mcp_server",
                    f"no MCP server named {tool.mcp_server!r} in the catalog "
                    "(add it first: gategraph mcp add)",
                )
        existing = self._load(db, tool.name)
        if existing is not None:
            self._check_update(db, existing, tool, update)
        if isinstance(tool, Validation) and tool.wraps is not None:
            self._check_wraps(db, tool)
        if existing is None:
            db.execute(
                "INSERT INTO tools (name, tool_type, wraps, config) VALUES (?, ?, ?, ?)",
                (tool.name, tool.tool_type.value, getattr(tool, "wraps", None), config),
            )
        else:
            db.execute(
                "UPDATE tools SET wraps = ?, config = ?, "
                "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE name = ?",
                (getattr(tool, "wraps", None), config, tool.name),
            )
        return self._resolved(db, tool)

    def _check_update(self, db: _Connection, existing: Tool, tool: Tool, update: bool) -> None:
        kind = existing.tool_type.value
        if not update:
            raise DuplicateError(
                f"a {kind} named {tool.name!r} exists already (update=True replaces it)",
                name=tool.name,
            )
        if existing.tool_type is not tool.tool_type:
            raise IntegrityError(
                f"{tool.name!r} is a {kind}; it cannot become a {tool.tool_type.value} "
                "(remove it and add it again)",
                name=tool.name,
            )
        if isinstance(existing, Validation) and isinstance(tool, Validation):
            # seed 000: "Mode is set at registration time and cannot be overridden".
            if existing.mode is not tool.mode:
                raise IntegrityError(
                    f"the mode of {tool.name!r} is {existing.mode.value!r} and is fixed at "
                    f"registration; remove it and add it again to make it {tool.mode.value!r}",
                    name=tool.name,
                )
        if tool.capability.writes:
            wrapper = db.execute(
                "SELECT name FROM tools WHERE wraps = ? ORDER BY name LIMIT 1", (tool.name,)
            ).fetchone()
            if wrapper is not None:
                raise IntegrityError(
                    f"{tool.name!r} is wrapped by the validation {wrapper[0]!r}, "
                    "which must stay read-only; it cannot be made to write",
                    name=tool.name,
                )

    def _check_wraps(self, db: _Connection, validation: Validation) -> None:
        assert validation.wraps is not None
        target = self._find(db, validation.wraps)
        if target is None:
            raise NotFoundError(
                f"{validation.name!r} wraps {validation.wraps!r}, which is not in the catalog",
                name=validation.wraps,
            )
        if target.capability.writes:
            # An imported MCP tool writes unless its server declared it read-only.
            why = (
                " (its MCP server does not declare it read-only)"
                if target.source is ToolSource.MCP
                else ""
            )
            raise IntegrityError(
                f"{validation.name!r} cannot wrap {target.name!r}: it writes{why}, and a "
                "validation is always read-only",
                name=validation.name,
            )
        # Walk the chain to refuse a cycle that an update could otherwise create.
        current: Tool | None = target
        while isinstance(current, Validation) and current.wraps is not None:
            if current.wraps == validation.name:
                raise IntegrityError(
                    f"{validation.name!r} cannot wrap {target.name!r}: that makes a wrapping cycle",
                    name=validation.name,
                )
            current = self._find(db, current.wraps)

    def remove(self, name: str, *, force: bool = False) -> Tool | None:
        """Remove a tool or validation and return what was removed (``None`` for an entry
        whose stored config could not be read: removing it is how it is repaired).

        A tool wrapped by a validation cannot be removed. A validation with attachments is
        removed only with ``force=True``, which detaches them too.
        """
        with self._write() as db:
            try:
                tool = self._load(db, name)
            except CatalogError:
                tool = None  # unreadable, but there: removed below like any other
                unreadable = True
            else:
                unreadable = False
            if tool is None and not unreadable:
                found = shipped(name)
                if found is not None:
                    origin = (
                        f"comes from plugin {found.plugin} (uninstall the package to remove it)"
                        if found.plugin
                        else f"is a built-in {found.tool_type.value}"
                    )
                    raise IntegrityError(f"{name!r} {origin}: it cannot be removed", name=name)
                raise NotFoundError(f"no tool or validation named {name!r}", name=name)
            wrapper = db.execute(
                "SELECT name FROM tools WHERE wraps = ? ORDER BY name LIMIT 1", (name,)
            ).fetchone()
            if wrapper is not None:
                raise IntegrityError(
                    f"{name!r} is wrapped by {wrapper[0]!r}; remove that first", name=name
                )
            count = db.execute(
                "SELECT count(*) FROM attachments WHERE validation = ?", (name,)
            ).fetchone()[0]
            if count and not force:
                raise IntegrityError(
                    f"{name!r} has {count} attachment(s); detach them first or force the removal",
                    name=name,
                )
            skills = self._skills_with(db, name)
            if skills and not force:
                raise IntegrityError(
                    f"{name!r} is in the skill(s) {', '.join(skills)}; take it out of them "
                    "first (add each skill again without it) or force the removal",
                    name=name,
                )
            for skill in skills:
                self._drop_member(db, skill, name)
            db.execute("DELETE FROM attachments WHERE validation = ?", (name,))
            db.execute("DELETE FROM tools WHERE name = ?", (name,))
            return tool

    def get(self, name: str) -> Tool:
        """Return the tool or validation named ``name``, with wrapping inheritance applied."""
        with self._lock:
            tool = self._find(self._db, name)
            if tool is None:
                raise NotFoundError(f"no tool or validation named {name!r}", name=name)
            return self._resolved(self._db, tool)

    def registered(self, name: str) -> bool:
        """Whether ``name`` is registered here (a built-in that is not is in the catalog,
        but not registered)."""
        with self._lock:
            return (
                self._db.execute("SELECT 1 FROM tools WHERE name = ?", (name,)).fetchone()
                is not None
            )

    def names(self) -> builtins.list[str]:
        """The names registered here, sorted: read without decoding any entry (a name is
        all "did you mean" and listings of what a name would shadow need)."""
        with self._lock:
            return [row[0] for row in self._db.execute("SELECT name FROM tools ORDER BY name")]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        with self._lock:
            found = self._db.execute("SELECT 1 FROM tools WHERE name = ?", (name,)).fetchone()
        return found is not None or shipped(name) is not None

    def list(self, type: ToolType | str | None = None) -> builtins.list[Tool]:
        """Return every tool and validation, by name, or only those of ``type``."""
        try:
            kind = ToolType(type).value if type is not None else None
        except ValueError:
            raise ConfigError.at("type", f"must be 'tool' or 'validation', not {type!r}") from None
        with self._lock:
            if kind is None:
                rows = self._db.execute("SELECT name, tool_type, config FROM tools ORDER BY name")
            else:
                rows = self._db.execute(
                    "SELECT name, tool_type, config FROM tools WHERE tool_type = ? ORDER BY name",
                    (kind,),
                )
            tools = [self._decode(*row) for row in rows.fetchall()]
            return [self._resolved(self._db, tool) for tool in tools]

    # -- skills ----------------------------------------------------------------------------

    def add_skill(self, skill: Skill, *, update: bool = False) -> Skill:
        """Register a skill; return it.

        Every tool and validation it lists must be in the catalog (registered, built in or
        from a plugin): :class:`ConfigError` at ``tools[i]`` otherwise. Raises
        :class:`DuplicateError` if a skill of that name exists and ``update`` is false
        (with ``update`` it is replaced).
        """
        with self._write() as db:
            missing = [
                ConfigIssue(f"no tool or validation named {name!r} in the catalog", f"tools[{i}]")
                for i, name in enumerate(skill.tools)
                if self._find(db, name) is None
            ]
            if missing:
                raise ConfigError(missing)
            # By its row: an unreadable stored skill can still be replaced.
            existing = (
                db.execute("SELECT 1 FROM skills WHERE name = ?", (skill.name,)).fetchone()
                is not None
            )
            if existing and not update:
                raise DuplicateError(
                    f"a skill named {skill.name!r} exists already (update=True replaces it)",
                    name=skill.name,
                )
            config = json.dumps(skill.as_config(), separators=(",", ":"))
            if existing:
                db.execute(
                    "UPDATE skills SET config = ?, "
                    "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE name = ?",
                    (config, skill.name),
                )
                db.execute("DELETE FROM skill_members WHERE skill = ?", (skill.name,))
            else:
                db.execute("INSERT INTO skills (name, config) VALUES (?, ?)", (skill.name, config))
            db.executemany(
                "INSERT INTO skill_members (skill, tool) VALUES (?, ?)",
                [(skill.name, tool) for tool in skill.tools],
            )
        return skill

    def _skill(self, db: _Connection, name: str) -> Skill | None:
        row = db.execute("SELECT config FROM skills WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        found = self._skill_problem(name, row[0])
        if isinstance(found, str):
            raise CatalogError(found)
        return found

    def _skill_problem(self, name: str, config: str) -> Skill | str:
        """The stored skill, or why it cannot be read (one line naming the catalog file and
        the skill, and how to repair it)."""
        try:
            return Skill.model_validate_json(config)
        except ValidationError as exc:
            return self._unreadable(
                f"skill {name!r}",
                exc,
                f"remove it (gategraph skill remove {name}) or add it again "
                f"(gategraph skill add {name} ... --update)",
            )

    def get_skill(self, name: str) -> Skill:
        """Return the skill named ``name``; raise :class:`NotFoundError` if there is none."""
        with self._lock:
            skill = self._skill(self._db, name)
        if skill is None:
            raise NotFoundError(f"no skill named {name!r}", name=name)
        return skill

    def list_skills(self) -> builtins.list[Skill]:
        """Return every skill, by name; one whose stored config cannot be read is left out
        (:meth:`unreadable_skills` says which, and why)."""
        found = self._stored_skills()
        return [skill for skill in found.values() if isinstance(skill, Skill)]

    def unreadable_skills(self) -> dict[str, str]:
        """The skills whose stored config cannot be read (a hand-edited file), by name,
        each with why, in one line."""
        found = self._stored_skills()
        return {name: problem for name, problem in found.items() if isinstance(problem, str)}

    def _stored_skills(self) -> dict[str, Skill | str]:
        with self._lock:
            rows = self._db.execute("SELECT name, config FROM skills ORDER BY name").fetchall()
        return {name: self._skill_problem(name, config) for name, config in rows}

    def skills_with(self, name: str) -> builtins.list[str]:
        """The names of the skills that list the tool or validation ``name``, sorted."""
        with self._lock:
            return self._skills_with(self._db, name)

    def _skills_with(self, db: _Connection, name: str) -> builtins.list[str]:
        rows = db.execute(
            "SELECT skill FROM skill_members WHERE tool = ? ORDER BY skill", (name,)
        ).fetchall()
        return [row[0] for row in rows]

    def _drop_member(self, db: _Connection, skill_name: str, name: str) -> None:
        """Take ``name`` out of a skill (a forced removal of the tool); a skill left with
        nothing is removed."""
        db.execute("DELETE FROM skill_members WHERE skill = ? AND tool = ?", (skill_name, name))
        try:
            skill = self._skill(db, skill_name)
        except CatalogError:
            return  # unreadable: left for `skill remove` or `skill add --update` to repair
        rest = [tool for tool in skill.tools if tool != name] if skill is not None else []
        if not rest:
            db.execute("DELETE FROM skills WHERE name = ?", (skill_name,))
            return
        assert skill is not None
        config = json.dumps(
            skill.model_copy(update={"tools": tuple(rest)}).as_config(), separators=(",", ":")
        )
        db.execute("UPDATE skills SET config = ? WHERE name = ?", (config, skill_name))

    def remove_skill(self, name: str) -> Skill | None:
        """Remove a skill and return it (``None`` for one whose stored config could not be
        read); its tools and validations stay in the catalog."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM skills WHERE name = ?", (name,)).fetchone() is None:
                raise NotFoundError(f"no skill named {name!r}", name=name)
            try:
                skill = self._skill(db, name)
            except CatalogError:
                skill = None  # unreadable: removing it is how it is repaired
            db.execute("DELETE FROM skill_members WHERE skill = ?", (name,))
            db.execute("DELETE FROM skills WHERE name = ?", (name,))
        return skill

    # -- MCP servers -----------------------------------------------------------------------

    def _server(self, db: _Connection, name: str) -> McpServer | None:
        row = db.execute("SELECT config FROM mcp_servers WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        problem = self._server_problem(name, row[0])
        if isinstance(problem, str):
            raise CatalogError(problem)
        return problem

    def _server_problem(self, name: str, config: str) -> McpServer | str:
        """The stored server, or why it cannot be read (one line naming the catalog file
        and the server, and how to repair it)."""
        try:
            return McpServer.model_validate_json(config)
        except ValidationError as exc:
            return self._unreadable(
                f"MCP server {name!r}",
                exc,
                f"remove it (gategraph mcp remove {name}) or declare it again "
                f"(gategraph mcp add {name} --update ...)",
            )

    def _unreadable(self, what: str, exc: ValidationError, repair: str) -> str:
        """Why a stored entry cannot be read, in one line naming the catalog file, the
        entry and how to repair it (a hand-edited file, a downgrade)."""
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"])
        why = f"{field}: {error['msg']}" if field else str(error["msg"])
        where = "the in-memory catalog" if self.where == ":memory:" else self.where
        return f"{where}: {what} is unreadable ({' '.join(why.split())[:200]}): {repair}"

    def _server_exists(self, db: _Connection, name: str) -> bool:
        return (
            db.execute("SELECT 1 FROM mcp_servers WHERE name = ?", (name,)).fetchone() is not None
        )

    def add_server(self, server: McpServer, *, update: bool = False) -> McpServer:
        """Register an MCP server; return it as stored.

        Raises :class:`DuplicateError` if a server of that name exists and ``update`` is
        false (with ``update`` it is replaced; the tools that name it use the new one).
        """
        config = server.model_dump_json(exclude_defaults=True)
        with self._write() as db:
            # By its row: an unreadable stored declaration can still be replaced.
            existing = self._server_exists(db, server.name)
            if existing and not update:
                raise DuplicateError(
                    f"an MCP server named {server.name!r} exists already (update=True replaces it)",
                    name=server.name,
                )
            if not existing:
                db.execute(
                    "INSERT INTO mcp_servers (name, config) VALUES (?, ?)", (server.name, config)
                )
            else:
                db.execute(
                    "UPDATE mcp_servers SET config = ?, "
                    "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE name = ?",
                    (config, server.name),
                )
        return server

    def get_server(self, name: str) -> McpServer:
        """Return the MCP server named ``name``; raise :class:`NotFoundError` if there is none."""
        with self._lock:
            server = self._server(self._db, name)
        if server is None:
            raise NotFoundError(f"no MCP server named {name!r}", name=name)
        return server

    def list_servers(self) -> builtins.list[McpServer]:
        """Return every MCP server, by name; one whose stored declaration cannot be read is
        left out (:meth:`unreadable_servers` says which, and why)."""
        with self._lock:
            rows = self._db.execute("SELECT name, config FROM mcp_servers ORDER BY name")
            found = [self._server_problem(name, config) for name, config in rows.fetchall()]
        return [server for server in found if isinstance(server, McpServer)]

    def unreadable_servers(self) -> dict[str, str]:
        """The MCP servers whose stored declaration cannot be read (a hand-edited file), by
        name, each with why, in one line."""
        with self._lock:
            rows = self._db.execute("SELECT name, config FROM mcp_servers ORDER BY name")
            found = {name: self._server_problem(name, config) for name, config in rows.fetchall()}
        return {name: problem for name, problem in found.items() if isinstance(problem, str)}

    def server_users(self, name: str) -> builtins.list[str]:
        """The names of the tools and validations that name MCP server ``name``, sorted."""
        with self._lock:
            return self._server_users(self._db, name)

    def _server_users(self, db: _Connection, name: str) -> builtins.list[str]:
        rows = db.execute(
            "SELECT name FROM tools WHERE json_extract(config, '$.mcp_server') = ? ORDER BY name",
            (name,),
        ).fetchall()
        return [row[0] for row in rows]

    def remove_server(self, name: str) -> McpServer | None:
        """Remove an MCP server and return it (``None`` for one whose stored declaration
        could not be read). A server that tools still name cannot be removed
        (:class:`IntegrityError`): remove them first."""
        with self._write() as db:
            if not self._server_exists(db, name):
                raise NotFoundError(f"no MCP server named {name!r}", name=name)
            try:
                server = self._server(db, name)
            except CatalogError:
                server = None  # unreadable: removing it is how it is repaired
            users = self._server_users(db, name)
            if users:
                shown = ", ".join(users[:5]) + (
                    f" and {len(users) - 5} more" if len(users) > 5 else ""
                )
                raise IntegrityError(
                    f"MCP server {name!r} is used by {shown}; remove those first", name=name
                )
            db.execute("DELETE FROM mcp_servers WHERE name = ?", (name,))
            return server

    # -- attachments -----------------------------------------------------------------------

    def attach(
        self,
        resource: str,
        validation: str,
        *,
        project: str | None = None,
        plan: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Attachment:
        """Attach ``validation`` to ``resource`` and return the new attachment.

        With ``project`` the attachment is project-scoped, with ``plan`` plan-scoped, with
        neither direct; giving both is a :class:`ConfigError`. Attaching the same validation
        with the same arguments at the same scope twice raises :class:`DuplicateError`.
        """
        if project is not None and plan is not None:
            raise ConfigError.at("plan", "give either a project or a plan, not both")
        for field, value in (("project", project), ("plan", plan)):
            if value is not None and not value.strip():
                raise ConfigError.at(field, "must not be empty")
        if not resource or not resource.strip():
            raise ConfigError.at("resource", "must not be empty")
        scope = (
            Scope.PLAN
            if plan is not None
            else Scope.PROJECT
            if project is not None
            else Scope.DIRECT
        )
        args = dict(arguments or {})
        try:
            canonical = _canonical(args)
        except (TypeError, ValueError) as exc:
            raise ConfigError.at("arguments", f"must be JSON-compatible ({exc})") from None
        from ulid import ULID  # only attaching needs it: keeps importing the runtime light

        attachment_id = AttachmentId(str(ULID()))
        try:
            attachment = Attachment(
                id=attachment_id,
                validation=validation,
                resource=resource,
                scope=scope,
                project=project,
                plan=plan,
                arguments=args,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "attachment"
            raise ConfigError.at(field, str(first["msg"])) from None
        with self._write() as db:
            target = self._find(db, validation)
            if target is None:
                raise NotFoundError(f"no validation named {validation!r}", name=validation)
            if not isinstance(target, Validation):
                raise IntegrityError(
                    f"{validation!r} is a tool, not a validation; only validations can be attached",
                    name=validation,
                )
            if self._load(db, validation) is None:
                # A built-in attached by name: registered now, so the attachment refers to
                # a row like any other (and `tool list` shows what is attached).
                db.execute(
                    "INSERT INTO tools (name, tool_type, wraps, config) VALUES (?, ?, ?, ?)",
                    (
                        target.name,
                        target.tool_type.value,
                        None,
                        target.model_dump_json(exclude_defaults=True),
                    ),
                )
            checked = self._resolved(db, target)
            if not (isinstance(checked, Validation) and checked.argument_mapping):
                problems = checked.argument_problems(args)
                if problems:
                    raise ConfigError(
                        [
                            ConfigIssue(message, format_path(("arguments", *path)))
                            for path, message in problems
                        ]
                    )
            duplicate = db.execute(
                "SELECT id FROM attachments WHERE validation = ? AND resource = ? AND scope = ? "
                "AND project IS ? AND plan IS ? AND arguments = ?",
                (validation, resource, scope.value, project, plan, canonical),
            ).fetchone()
            if duplicate is not None:
                raise DuplicateError(
                    f"{validation!r} is attached to {resource!r} with these arguments at this "
                    f"scope already (attachment {duplicate[0]})",
                    name=duplicate[0],
                )
            db.execute(
                "INSERT INTO attachments (id, validation, resource, scope, project, plan, arguments)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (attachment_id, validation, resource, scope.value, project, plan, canonical),
            )
        return attachment

    def detach(self, attachment_id: str) -> Attachment:
        """Remove an attachment and return it."""
        with self._write() as db:
            attachment = self._attachment(db, attachment_id)
            db.execute("DELETE FROM attachments WHERE id = ?", (attachment_id,))
            return attachment

    def get_attachment(self, attachment_id: str) -> Attachment:
        """Return the attachment with this id."""
        with self._lock:
            return self._attachment(self._db, attachment_id)

    def _attachment(self, db: _Connection, attachment_id: str) -> Attachment:
        row = db.execute(
            f"SELECT {self._COLUMNS} FROM attachments WHERE id = ?", (attachment_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no attachment with id {attachment_id!r}", name=attachment_id)
        return self._row_attachment(row)

    _COLUMNS: Final = "id, validation, resource, scope, project, plan, arguments"

    @staticmethod
    def _row_attachment(row: tuple[Any, ...]) -> Attachment:
        return Attachment(
            id=AttachmentId(row[0]),
            validation=row[1],
            resource=row[2],
            scope=Scope(row[3]),
            project=row[4],
            plan=row[5],
            arguments=json.loads(row[6]),
        )

    def attachments(
        self, *, resource: str | None = None, validation: str | None = None
    ) -> builtins.list[Attachment]:
        """Return attachments in the order they were made, optionally filtered."""
        query = f"SELECT {self._COLUMNS} FROM attachments"
        clauses, params = [], []
        if resource is not None:
            clauses.append("resource = ?")
            params.append(resource)
        if validation is not None:
            clauses.append("validation = ?")
            params.append(validation)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY seq", params).fetchall()
        return [self._row_attachment(row) for row in rows]

    def resolve(
        self, resource: str, *, project: str | None = None, plan: str | None = None
    ) -> builtins.list[Attachment]:
        """Return the attachments that apply to ``resource`` under ``project`` and ``plan``.

        The union of the direct attachments, those scoped to ``project`` and those scoped
        to ``plan``; where the same validation is attached with identical arguments at
        several of these scopes, only the most specific (plan > project > direct) is kept
        (seed 000, "Attachment Scoping"). Attachments with different arguments are all
        kept. The result is in the order the attachments were made.
        """
        with self._lock:
            rows = self._db.execute(
                f"SELECT {self._COLUMNS}, seq FROM attachments WHERE resource = ? AND ("
                "scope = 'direct' OR (scope = 'project' AND project IS ?) "
                "OR (scope = 'plan' AND plan IS ?)) ORDER BY seq",
                (resource, project, plan),
            ).fetchall()
        best: dict[tuple[str, str], tuple[Attachment, int]] = {}
        for row in rows:
            attachment = self._row_attachment(row)
            key = (attachment.validation, row[6])
            kept = best.get(key)
            if kept is None or attachment.specificity > kept[0].specificity:
                best[key] = (attachment, row[7])
        return [a for a, _ in sorted(best.values(), key=lambda pair: pair[1])]

    # -- evidence (seed 003) ---------------------------------------------------------------

    def register_roster(self, roster: PlanRoster) -> None:
        """Keep the acceptance criteria of ``roster``'s plan, for validators that pull
        them by the plan's id. Registering the same roster again (a resumed plan) changes
        nothing; another roster under the same plan id (a new plan reusing an id) replaces
        it, and the bindings of the old one go: they were not about this plan."""
        with self._write() as db:
            added = db.execute(
                "INSERT INTO evidence_plans (plan_id, criteria) VALUES (?, ?) "
                "ON CONFLICT (plan_id) DO NOTHING",
                (roster.plan_id, len(roster)),
            ).rowcount
            if not added:
                kept = db.execute(
                    "SELECT id, key FROM acceptance_criteria WHERE plan_id = ? ORDER BY ordinal",
                    (roster.plan_id,),
                ).fetchall()
                if [tuple(row) for row in kept] == [(c.id, c.key) for c in roster.criteria]:
                    return
                for table in (
                    "evidence_ac_bindings",
                    "acceptance_criteria",
                    "validator_verdicts",
                    "validator_refusals",
                ):
                    db.execute(f"DELETE FROM {table} WHERE plan_id = ?", (roster.plan_id,))
                db.execute(
                    "UPDATE evidence_plans SET criteria = ? WHERE plan_id = ?",
                    (len(roster), roster.plan_id),
                )
            db.executemany(
                "INSERT INTO acceptance_criteria "
                "(id, plan_id, ordinal, alias, key, text, validations) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        c.id,
                        roster.plan_id,
                        c.ordinal,
                        c.alias,
                        c.key,
                        c.text,
                        json.dumps(c.validations),
                    )
                    for c in roster.criteria
                ],
            )

    def roster(self, plan_id: str) -> builtins.list[PlanCriterion] | None:
        """The acceptance criteria of plan ``plan_id`` in order, or None for a plan this
        catalog never registered."""
        with self._lock:
            known = self._db.execute(
                "SELECT 1 FROM evidence_plans WHERE plan_id = ?", (plan_id,)
            ).fetchone()
            rows = self._db.execute(
                "SELECT id, ordinal, alias, key, text, validations FROM acceptance_criteria "
                "WHERE plan_id = ? ORDER BY ordinal",
                (plan_id,),
            ).fetchall()
        if known is None:
            return None
        return [
            PlanCriterion(
                id=id_,
                ordinal=int(ordinal),
                alias=alias,
                key=key,
                text=text,
                validations=tuple(json.loads(validations)),
            )
            for id_, ordinal, alias, key, text, validations in rows
        ]

    def bind_coverage(
        self, plan_id: str, validator_id: str, criteria: Sequence[str] | None = None
    ) -> None:
        """Write one coverage binding per criterion id of plan ``plan_id`` for
        ``validator_id``'s attestation (None: every criterion of the plan's roster), in one
        transaction; binding again changes nothing but when it happened."""
        atom = atom_id(validator_id, plan_id)
        now = time.time()
        with self._write() as db:
            if criteria is None:
                criteria = [
                    row[0]
                    for row in db.execute(
                        "SELECT id FROM acceptance_criteria WHERE plan_id = ? ORDER BY ordinal",
                        (plan_id,),
                    )
                ]
            db.executemany(
                "INSERT INTO evidence_ac_bindings (id, evidence_atom_id, ac_id, binding_type, "
                "plan_id, validator_id, bound_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (evidence_atom_id, ac_id, binding_type) "
                "DO UPDATE SET bound_at = excluded.bound_at",
                [
                    (binding_id(atom, c), atom, c, COVERAGE, plan_id, validator_id, now)
                    for c in criteria
                ],
            )

    def coverage(self, plan_id: str, *, since: float = 0.0) -> Coverage:
        """The coverage bindings of plan ``plan_id`` written at ``since`` (seconds since
        the epoch) or after."""
        with self._lock:
            rows = self._db.execute(
                "SELECT ac_id, validator_id FROM evidence_ac_bindings "
                "WHERE plan_id = ? AND binding_type = ? AND bound_at >= ?",
                (plan_id, COVERAGE, since),
            ).fetchall()
        by: dict[str, set[str]] = {}
        for criterion, validator in rows:
            by.setdefault(criterion, set()).add(validator)
        return Coverage(by={c: frozenset(v) for c, v in by.items()}, complete=frozenset())

    def add_credential(self, validator_id: str, digest: str, plan_id: str | None = None) -> None:
        """Keep the digest of a credential of ``validator_id`` (only the digest: see
        :func:`~gategraph.runtime.credential_digest`), good for plan ``plan_id`` only, or
        for every plan (None)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO validator_credentials (digest, validator_id, plan_id) "
                "VALUES (?, ?, ?)",
                (digest, validator_id, plan_id),
            )

    def credentials(self, validator_id: str, plan_id: str) -> builtins.list[str]:
        """The digests of the credentials ``validator_id`` may sign plan ``plan_id`` with."""
        with self._lock:
            rows = self._db.execute(
                "SELECT digest FROM validator_credentials WHERE validator_id = ? "
                "AND (plan_id IS NULL OR plan_id = ?)",
                (validator_id, plan_id),
            ).fetchall()
        return [row[0] for row in rows]

    def revoke_credentials(self, validator_id: str, digest: str | None = None) -> int:
        """Forget ``validator_id``'s credential of ``digest`` (None: all of them); how
        many were forgotten."""
        with self._write() as db:
            if digest is None:
                cursor = db.execute(
                    "DELETE FROM validator_credentials WHERE validator_id = ?", (validator_id,)
                )
            else:
                cursor = db.execute(
                    "DELETE FROM validator_credentials WHERE validator_id = ? AND digest = ?",
                    (validator_id, digest),
                )
            return int(cursor.rowcount)

    def record_verdict(
        self, plan_id: str, validator_id: str, verdict: Literal["attest", "reject"]
    ) -> None:
        """``validator_id``'s verdict on plan ``plan_id``, now: it replaces the one before."""
        with self._write() as db:
            db.execute(
                "INSERT INTO validator_verdicts (plan_id, validator_id, verdict, given_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (plan_id, validator_id) "
                "DO UPDATE SET verdict = excluded.verdict, given_at = excluded.given_at",
                (plan_id, validator_id, verdict, time.time()),
            )
            # In a shared database, a process that waits on the plan wakes at once.
            announce = getattr(db, "announce", None)
            if announce is not None:
                announce(plan_id)

    def verdicts(self, plan_id: str, *, since: float = 0.0) -> Verdicts:
        """Each validator's latest verdict on plan ``plan_id``, given at ``since`` or after."""
        with self._lock:
            rows = self._db.execute(
                "SELECT validator_id, verdict FROM validator_verdicts "
                "WHERE plan_id = ? AND given_at >= ?",
                (plan_id, since),
            ).fetchall()
        return Verdicts(latest=dict(rows))

    def record_refusal(self, plan_id: str, validator_id: str, reason: str) -> None:
        """Keep that a verdict of ``validator_id`` on plan ``plan_id`` was refused."""
        with self._write() as db:
            db.execute(
                "INSERT INTO validator_refusals (plan_id, validator_id, reason, refused_at) "
                "VALUES (?, ?, ?, ?)",
                (plan_id, validator_id, reason, time.time()),
            )

    def refusals(self, plan_id: str, *, since: float = 0.0) -> builtins.list[Refusal]:
        """The verdicts on plan ``plan_id`` refused at ``since`` or after, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT validator_id, reason, refused_at FROM validator_refusals "
                "WHERE plan_id = ? AND refused_at >= ? ORDER BY seq",
                (plan_id, since),
            ).fetchall()
        return [Refusal(validator_id=who, reason=why, at=at) for who, why, at in rows]

    # -- flakes ----------------------------------------------------------------------------

    def record_flake(
        self, validation: str, *, plan_id: str, round: int, node: str, detail: str
    ) -> None:
        """Record that ``validation`` gave different outcomes on identical inputs.

        Any name is accepted, registered here or not (a graph's own validation can be
        flaky too). Recording the same flake again, the same validation at the same
        ``plan_id``, ``round`` and ``node`` (a resumed plan does), changes nothing: it is
        counted once, with its first ``detail``. Raises :class:`ConfigError` for an empty
        name, plan id or node, or a round below 1.
        """
        for field, value in (("validation", validation), ("plan_id", plan_id), ("node", node)):
            if not value.strip():
                raise ConfigError.at(field, "must not be empty")
        if isinstance(round, bool) or round < 1:
            raise ConfigError.at("round", f"must be a round number from 1, not {round!r}")
        with self._write() as db:
            db.execute(
                "INSERT INTO flakes (validation, plan_id, round, node, detail) "
                "VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (validation, plan_id, round, node) DO NOTHING",
                (validation, plan_id, round, node, detail),
            )

    def flakes(self, validation: str) -> int:
        """How many times ``validation`` was found flaky (0 for a name never recorded)."""
        with self._lock:
            row = self._db.execute(
                "SELECT count(*) FROM flakes WHERE validation = ?", (validation,)
            ).fetchone()
        return int(row[0])

    def flake_counts(self) -> dict[str, int]:
        """Every validation found flaky at least once, by name, with how many times."""
        with self._lock:
            rows = self._db.execute(
                "SELECT validation, count(*) FROM flakes GROUP BY validation ORDER BY validation"
            ).fetchall()
        return {name: int(count) for name, count in rows}

    def flake_records(self, validation: str, limit: int = 20) -> builtins.list[FlakeRecord]:
        """The last ``limit`` flakes of ``validation``, the most recent first."""
        if isinstance(limit, bool) or limit < 0:
            raise ConfigError.at("limit", f"must be 0 or more, not {limit!r}")
        with self._lock:
            rows = self._db.execute(
                "SELECT plan_id, round, node, detail, created_at FROM flakes "
                "WHERE validation = ? ORDER BY seq DESC LIMIT ?",
                (validation, limit),
            ).fetchall()
        return [
            FlakeRecord(plan_id=plan_id, round=int(number), node=node, detail=detail, at=at)
            for plan_id, number, node, detail, at in rows
        ]
