"""Where gategraph keeps what outlasts a process, chosen by one setting.

By default, SQLite files in gategraph's folder (``$GATEGRAPH_HOME``, else ``./.gategraph``):
the event log, the catalog and the content store, on this host. With a PostgreSQL URL, one
database holds all three, so every host that reaches it lists, approves, resumes and audits
the same plans. The URL comes from the caller (``--db``, or the Python API), else
``GATEGRAPH_DATABASE``, else ``database:`` in ``config.yaml`` in gategraph's folder.

Everything that reads a log by where it is (a file or a URL) goes through here, so the
commands behave the same on both.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._home import default_catalog_path

from ._eventlog import (
    EVENTS_FILE,
    SQLiteEventLog,
    default_event_log_path,
    list_plans,
    read_events,
)
from ._postgres import (
    PostgresEventLog,
    every_plan,
    is_postgres_url,
    plan_drivers,
    plan_ids,
    read_plan_events,
    shown_url,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from gategraph.runtime._data._events import Event

__all__ = [
    "CONFIG_FILE",
    "DATABASE_ENV",
    "LogAt",
    "check_event_log",
    "configured_database",
    "drivers_at",
    "events_at",
    "log_at",
    "log_exists",
    "log_where",
    "open_event_log",
    "opened_log",
    "plans_at",
    "plans_with_events",
    "shown",
]

DATABASE_ENV: Final = "GATEGRAPH_DATABASE"
"""The environment variable naming the PostgreSQL database (a URL)."""
CONFIG_FILE: Final = "config.yaml"
"""The settings file in gategraph's folder; ``database:`` is its one setting."""
_HOW: Final = "write postgresql://USER@HOST:PORT/DATABASE"

LogAt = Path | str
"""Where an event log is: a SQLite file, or a PostgreSQL URL."""


def configured_database(given: str | None = None, *, folder: Path | None = None) -> str | None:
    """The PostgreSQL database to use: ``given`` (``--db``, the Python API), else
    ``GATEGRAPH_DATABASE``, else ``database:`` in gategraph's ``config.yaml``; None for the
    SQLite files in gategraph's folder (``folder``: another one's, such as a project's
    ``.gategraph``). A value that is not a PostgreSQL URL is one :class:`ConfigError` line
    naming where it came from (never echoing it: it may hold a password)."""
    if given:
        return _checked(given, "--db", None)
    found = os.environ.get(DATABASE_ENV)
    if found:
        return _checked(found, DATABASE_ENV, None)
    return _from_config((folder or default_catalog_path().parent) / CONFIG_FILE)


def _checked(value: str, field: str, source: str | None) -> str:
    if not is_postgres_url(value):
        raise ConfigError.at(field, f"not a PostgreSQL URL: {_HOW}", source=source)
    return value


def _from_config(file: Path) -> str | None:
    from gategraph.runtime._base._yaml import read_document

    if not file.is_file():
        return None
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    if not any(line.strip() and not line.lstrip().startswith("#") for line in lines):
        return None  # nothing set (empty, or comments only)
    document = read_document(file)
    data = document.data
    if data is None:
        return None
    if not isinstance(data, dict):
        raise document.error((), "must be a mapping of settings (database: URL)")
    for key in data:
        if key != "database":
            raise ConfigError(
                [
                    document.issue(
                        (key,), "unknown setting: the one setting is database", at_key=True
                    )
                ],
                source=document.source,
            )
    value = data.get("database")
    if value is None or value == "":
        return None
    if not is_postgres_url(value):
        raise document.error(("database",), f"not a PostgreSQL URL: {_HOW}")
    return value


def log_at(database: str | None, catalog_path: Path | None = None) -> LogAt:
    """The event log: in ``database`` when there is one, else ``events.db`` beside the
    catalog file ``catalog_path`` (by default in gategraph's folder)."""
    if database:
        return database
    return Path(catalog_path).with_name(EVENTS_FILE) if catalog_path else default_event_log_path()


def log_where(value: str | os.PathLike[str]) -> LogAt:
    """Where a log given as a string or a path is: a PostgreSQL URL as it is, anything
    else as the path of a SQLite file."""
    return value if is_postgres_url(value) else Path(value)


def shown(where: LogAt) -> str:
    """Where a log is, for messages: its file, or its database without the password."""
    return shown_url(where) if is_postgres_url(where) else str(where)


def open_event_log(where: LogAt) -> SQLiteEventLog | PostgresEventLog:
    """The event log at ``where``, to use as an async context manager."""
    if is_postgres_url(where):
        return PostgresEventLog(where)
    return SQLiteEventLog(where)


def log_exists(where: LogAt) -> bool:
    """Whether anything can be read there yet (a database always can: an empty one reads
    as no plans)."""
    return is_postgres_url(where) or Path(where).is_file()


def events_at(where: LogAt, plan_id: str, after: int = 0) -> list[Event]:
    """A plan's events with ``seq > after``, read once (synchronously). A log file that
    is not there is a :class:`ConfigError` (callers that expect none ask
    :func:`log_exists` first)."""
    if is_postgres_url(where):
        return read_plan_events(where, plan_id, after)
    return read_events(where, plan_id, after)


def plans_at(where: LogAt) -> list[str]:
    """The ids of every plan in the log, oldest first."""
    if is_postgres_url(where):
        return plan_ids(where)
    return list_plans(where) if Path(where).is_file() else []


def plans_with_events(where: LogAt) -> list[tuple[str, list[Event]]]:
    """Every plan of the log with its events, oldest first (in a database: one query)."""
    if is_postgres_url(where):
        return every_plan(where)
    return [(plan_id, read_events(where, plan_id)) for plan_id in plans_at(where)]


def drivers_at(where: LogAt, plans: Iterable[str]) -> dict[str, str] | None:
    """Of ``plans``, those a process drives now and where it runs, for a log in a database
    (from its lease); None for a log file (see ``_plan_views._held_leases``)."""
    if is_postgres_url(where):
        return plan_drivers(where, plans)
    return None


def check_event_log(value: Any, field: str, *, source: str | None = None) -> None:
    """Refuse, as one :class:`ConfigError` line at ``field``, what is neither nothing, a
    path (a SQLite log), a PostgreSQL URL (both opened per call by :func:`opened_log`),
    nor an event log."""
    if value is None or isinstance(value, str | os.PathLike):
        return
    if callable(getattr(value, "append", None)) and callable(getattr(value, "read", None)):
        return
    raise ConfigError.at(
        field,
        f"a {type(value).__name__} is not an event log: give a path (a SQLite log), a "
        "postgresql:// URL, or an EventLog such as MemoryEventLog()",
        source=source,
    )


@asynccontextmanager
async def opened_log(value: Any) -> AsyncIterator[Any]:
    """The event log of one call: a path or a PostgreSQL URL is opened for the call (an
    open log belongs to the event loop that opened it, and a sync caller runs a loop per
    call); a log object, or None, is used as it is."""
    if not isinstance(value, str | os.PathLike):
        yield value
        return
    async with open_event_log(log_where(value)) as log:
        yield log
