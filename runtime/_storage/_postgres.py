"""The event log on PostgreSQL: a plan's events where every host can read them.

The same segments as the SQLite log (one row per committed batch of one plan, its events a
JSON array), written by the same batching writer; a plan's lease is a PostgreSQL advisory
lock, which the server frees when its holder's connection ends, however it ends.

The driver is psycopg 3, used synchronously in worker threads as the SQLite log uses
``sqlite3``: it runs under any anyio backend (asyncpg and psycopg's async connections need
asyncio's loop, and the runtime runs on trio too), and ``executemany`` sends a batch's rows
in one pipeline. It is the ``postgres`` extra, imported only when a PostgreSQL log opens.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeGuard
from urllib.parse import urlsplit, urlunsplit

import anyio.to_thread
from gategraph.runtime._base._exceptions import CatalogError, ConfigError, PlanBusyError

from ._eventlog import BatchedEventLog, _busy, _segment_decoder

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    import psycopg
    from gategraph.runtime._data._events import Event

__all__ = [
    "ANSWERS_CHANNEL",
    "CatalogConnection",
    "PostgresEventLog",
    "is_postgres_url",
    "shown_url",
]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS event_segments (
    plan_id   TEXT NOT NULL,
    first_seq BIGINT NOT NULL,
    last_seq  BIGINT NOT NULL,
    first_id  TEXT NOT NULL,
    count     INTEGER NOT NULL,
    body      BYTEA NOT NULL,
    PRIMARY KEY (plan_id, first_seq)
)
"""
# Taken while the schema is made: two processes opening a new database at once would
# otherwise race in CREATE TABLE IF NOT EXISTS (it is not atomic in PostgreSQL).
_SCHEMA_LOCK: Final = 0x6761_7465_6772_6170  # "gategrap"
_READ: Final = (
    "SELECT body FROM event_segments WHERE plan_id = %s AND last_seq > %s ORDER BY first_seq"
)
_PLANS: Final = "SELECT plan_id FROM event_segments GROUP BY plan_id ORDER BY min(first_id)"
_INSERT: Final = (
    "INSERT INTO event_segments (plan_id, first_seq, last_seq, first_id, count, body)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)


def is_postgres_url(value: object) -> TypeGuard[str]:
    """Whether ``value`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return isinstance(value, str) and value.startswith(("postgresql://", "postgres://"))


def shown_url(url: str) -> str:
    """``url`` without its password (in the address or as a ``password=`` parameter), for
    messages and logs."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "postgresql://***"
    netloc = parts.netloc
    if "@" in netloc:
        user, _, hosts = netloc.rpartition("@")
        if ":" in user:
            user = user.split(":", 1)[0] + ":***"
        netloc = f"{user}@{hosts}"
    query = re.sub(r"(?i)(^|&)(password)=[^&]*", r"\1\2=***", parts.query)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _secret_free(text: str, url: str) -> str:
    """``text`` (a driver's message) without the password ``url`` carries, if it echoes it."""
    try:
        parts = urlsplit(url)
        secrets = [parts.password or ""]
        secrets += re.findall(r"(?i)(?:^|&)password=([^&]*)", parts.query)
    except ValueError:
        return "the URL cannot be read"
    for secret in filter(None, secrets):
        text = text.replace(secret, "***")
    return text


def _reason(exc: BaseException, url: str) -> str:
    """A driver's error on one line, without the password ``url`` carries."""
    return _secret_free(" ".join(str(exc).split()) or type(exc).__name__, url)


def _driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ConfigError(
            "a PostgreSQL database needs the postgres extra: pip install 'gategraph[postgres]'"
        ) from None
    return psycopg


def _connect(url: str, what: str = "event log", **options: Any) -> psycopg.Connection[Any]:
    psycopg = _driver()
    if "connect_timeout" not in url:
        options.setdefault("connect_timeout", 10)  # the URL's own, when it says
    try:
        return psycopg.connect(url, **options)  # type: ignore[no-any-return]
    except (psycopg.Error, ValueError) as exc:
        raise ConfigError(
            f"cannot open the PostgreSQL {what}: {_reason(exc, url)}", source=shown_url(url)
        ) from None


def _with_tables(url: str, what: str, table: str, schema: str) -> psycopg.Connection[Any]:
    """A connection to ``url`` once its tables are there: made unless ``table`` is (a role
    that may only read and write the tables, with no CREATE on the schema, uses them as
    they are). ConfigError, one line, when it cannot connect or make them."""
    db = _connect(url, what)
    try:
        with db.transaction():
            row = db.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
            if row is None or not row[0]:
                db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                db.execute(schema)
    except Exception as exc:
        db.close()
        raise ConfigError(
            f"cannot use the {what}'s table: {_reason(exc, url)}", source=shown_url(url)
        ) from None
    return db


def _driver_name() -> str:
    """How a lease's connection names itself (``application_name``, at most 63 bytes):
    the host and process that drive the plan."""
    return f"gategraph {socket.gethostname()} {os.getpid()}"[:63]


def _held_connection(url: str) -> psycopg.Connection[Any]:
    """A connection that holds something for as long as it lives (a lease, a ``LISTEN``):
    named for whoever lists the plans (the host and process), exempt from the server's
    ``idle_session_timeout`` (which would end it, and free the lease, while the plan
    waits), and kept alive over TCP (keepalives), so a peer or a network that dropped it
    is noticed."""
    db = _connect(
        url,
        application_name=_driver_name(),
        keepalives=1,
        keepalives_idle=30,
        keepalives_interval=10,
        keepalives_count=3,
    )
    db.autocommit = True
    try:
        db.execute("SET idle_session_timeout = 0")
    except _driver().Error:
        pass  # a server before PostgreSQL 14 has no such timeout
    return db


def read_plan_events(url: str, plan_id: str, after: int = 0) -> list[Event]:
    """A plan's committed events with ``seq > after``, read once from the database
    ``url`` (synchronously, on a connection of the call's own)."""
    with _connect(url) as db:
        return _after(_rows(db, _READ, (plan_id, after)), after)


def plan_ids(url: str) -> list[str]:
    """The ids of every plan in the database ``url``'s event log, oldest first."""
    with _connect(url) as db:
        rows = _rows(db, _PLANS, ())
    return [row[0] for row in rows]


def every_plan(url: str) -> list[tuple[str, list[Event]]]:
    """Every plan in the database ``url``'s event log with its events, oldest plan first,
    read on one connection in one query (``gategraph plans``)."""
    with _connect(url) as db:
        rows = _rows(
            db,
            "SELECT plan_id, first_id, body FROM event_segments ORDER BY plan_id, first_seq",
            (),
        )
    found: dict[str, list[Event]] = {}
    first: dict[str, str] = {}
    for plan_id, first_id, body in rows:
        found.setdefault(plan_id, []).extend(_segment_decoder.decode(bytes(body)))
        first.setdefault(plan_id, first_id)
    return sorted(found.items(), key=lambda item: first[item[0]])


def plan_drivers(url: str, plans: Iterable[str]) -> dict[str, str]:
    """Which of ``plans`` a process holds the lease of now, and where it runs (the host
    and process its lease's connection names): read from the server's table of locks,
    never by taking one (which could turn a supervisor away)."""
    keys = {_lock_key(plan_id) & 0xFFFF_FFFF_FFFF_FFFF: plan_id for plan_id in plans}
    if not keys:
        return {}
    with _connect(url) as db:
        rows = db.execute(
            "SELECT l.classid::bigint, l.objid::bigint, coalesce(a.application_name, '')"
            " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchall()
    found: dict[str, str] = {}
    for high, low, name in rows:
        plan_id = keys.get((int(high) << 32) | int(low))
        if plan_id is not None:
            found[plan_id] = str(name).removeprefix("gategraph ") or "another process"
    return found


def _after(rows: Iterable[Any], after: int) -> list[Event]:
    """The events of segment rows (``body`` first) with ``seq > after``."""
    return [e for row in rows for e in _segment_decoder.decode(bytes(row[0])) if e.seq > after]


def _lock_key(plan_id: str) -> int:
    """A plan's advisory lock: 64 bits of a digest of its id (any id, any length)."""
    return int.from_bytes(hashlib.sha256(plan_id.encode()).digest()[:8], "big", signed=True)


def _rows(db: psycopg.Connection[Any], query: str, arguments: tuple[Any, ...]) -> list[Any]:
    try:
        return db.execute(query, arguments).fetchall()
    except _driver().errors.UndefinedTable:
        # A database no plan has written to yet: no events, as for a new SQLite file.
        if not db.autocommit:
            db.rollback()
        return []


class PostgresEventLog(BatchedEventLog):
    """A durable event log in a PostgreSQL database, written by one batching writer task.

    Use it as an async context manager, as :class:`SQLiteEventLog`::

        async with PostgresEventLog("postgresql://gategraph@db.internal/gategraph") as log:
            await run_plan(graph, event_log=log)
    """

    _kind: ClassVar[str] = "PostgreSQL"

    def __init__(self, url: str, *, max_batch: int = 4096) -> None:
        if not is_postgres_url(url):
            # Not echoed: a connection string may hold a password.
            raise ConfigError(
                "the event log's database is not a PostgreSQL URL: write "
                "postgresql://USER@HOST:PORT/DATABASE"
            )
        super().__init__(max_batch=max_batch)
        self._url = url
        self._db: psycopg.Connection[Any] | None = None
        self._reader: psycopg.Connection[Any] | None = None
        self._reader_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The database, without its password."""
        return shown_url(self._url)

    @property
    def store_location(self) -> str:
        """Where a plan on this log keeps its content store: the same database."""
        return self._url

    def _store_open(self) -> None:
        self._db = _with_tables(self._url, "event log", "event_segments", _SCHEMA)

    def _store_close(self) -> None:
        with self._reader_lock:
            for name in ("_db", "_reader"):
                db = getattr(self, name)
                setattr(self, name, None)
                if db is not None:
                    db.close()

    def _last_seq_stored(self, plan_id: str) -> int:
        assert self._db is not None
        row = self._db.execute(
            "SELECT max(last_seq) FROM event_segments WHERE plan_id = %s", (plan_id,)
        ).fetchone()
        return int(row[0]) if row is not None and row[0] is not None else 0

    @contextmanager
    def _store(self, rows: list[tuple[Any, ...]]) -> Iterator[None]:
        assert self._db is not None
        with self._db.transaction():
            yield
            if rows:
                # One pipeline for the batch's rows: a round trip per batch, not per row.
                with self._db.cursor() as cursor:
                    cursor.executemany(_INSERT, rows)

    @contextmanager
    def lease(self, plan_id: str) -> Iterator[None]:
        """Hold the plan's one writer slot, across processes and hosts: a second
        supervisor of the same plan gets :class:`PlanBusyError`.

        A session advisory lock on a connection of its own: the server frees it when that
        connection ends, so a holder that dies (or loses the network) never blocks the
        plan's resumption elsewhere.
        """
        holder = _held_connection(self._url)
        try:
            row = holder.execute(
                "SELECT pg_try_advisory_lock(%s)", (_lock_key(plan_id),)
            ).fetchone()
            if row is None or not row[0]:
                raise PlanBusyError(_busy(plan_id))
            yield
        finally:
            holder.close()

    def _read(self, query: str, arguments: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """Rows of ``query``: on the log's reader connection while it is open, else on one
        of the call's own (nothing would close a connection kept for a closed log)."""
        with self._reader_lock:
            if not self._open:
                with _connect(self._url) as db:
                    return _rows(db, query, arguments)
            if self._reader is None:
                self._reader = _connect(self._url)
                self._reader.autocommit = True
            return _rows(self._reader, query, arguments)

    async def read(self, plan_id: str, *, after: int = 0) -> list[Event]:
        """Return the plan's committed events with ``seq > after``."""
        rows = await anyio.to_thread.run_sync(self._read, _READ, (plan_id, after))
        return _after(rows, after)

    async def plans(self) -> list[str]:
        """Return the ids of every plan in the log, oldest first."""
        rows = await anyio.to_thread.run_sync(self._read, _PLANS, ())
        return [row[0] for row in rows]


# -- the catalog ------------------------------------------------------------------------------

_CATALOG_LOCK: Final = _SCHEMA_LOCK + 1
"""The catalog's write lock, held for each write transaction: what SQLite's ``BEGIN
IMMEDIATE`` gives the catalog there (a check-then-insert that no other writer can race)."""
_SQLITE_NOW: Final = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"
_POSTGRES_NOW: Final = "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
_JSON_FIELD: Final = re.compile(r"json_extract\((\w+), '\$\.(\w+)'\)")
_MADE_IF_MISSING: Final = re.compile(r"\s*CREATE TABLE IF NOT EXISTS (\w+)", re.IGNORECASE)


def _postgres_dialect(sql: str) -> str:
    """The catalog's SQL (written for SQLite) as PostgreSQL reads it: the few forms the two
    spell differently, and ``?`` parameters as ``%s``. The catalog writes no literal ``?``
    or ``%``, so the rewrite is exact."""
    sql = sql.replace(_SQLITE_NOW, _POSTGRES_NOW)
    sql = _JSON_FIELD.sub(r"(\1::jsonb ->> '\2')", sql)
    sql = sql.replace("INTEGER PRIMARY KEY", "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY")
    sql = re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)
    sql = sql.replace(" IS ?", " IS NOT DISTINCT FROM ?")  # SQLite's IS matches NULL too
    return sql.replace("?", "%s")


class _NoRows:
    """The result of a statement that had nothing to do."""

    rowcount = 0

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def __iter__(self) -> Iterator[Any]:
        return iter(())


ANSWERS_CHANNEL: Final = "gategraph_answers"
"""The notification channel a person's answer or an outside validator's verdict on a plan
is announced on (its payload: the plan's id), for a process that waits on the plan."""


class CatalogConnection:
    """A PostgreSQL connection that the catalog uses as it uses ``sqlite3``'s: its SQL is
    rewritten (:func:`_postgres_dialect`), ``BEGIN IMMEDIATE`` is a transaction holding
    the catalog's write lock, and what the server refuses (it is gone, read-only, full) is
    one :class:`CatalogError` line (one that cannot be reached at all: a
    :class:`ConfigError` line)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._db = _connect(url, "catalog")
        self._db.autocommit = True  # transactions are the catalog's own BEGIN and COMMIT

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if sql == "BEGIN IMMEDIATE":
            self._run("BEGIN", ())
            return self._run("SELECT pg_advisory_xact_lock(%s)", (_CATALOG_LOCK,))
        made = _MADE_IF_MISSING.match(sql)
        if made is not None and self._exists(made.group(1)):
            # Not run at all: a role without CREATE on the schema uses the table as it is.
            return _NoRows()
        return self._run(_postgres_dialect(sql), parameters)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Any:
        try:
            with self._db.cursor() as cursor:
                cursor.executemany(_postgres_dialect(sql), list(rows))
                return cursor
        except _driver().Error as exc:
            raise self._lost(exc) from None

    def close(self) -> None:
        self._db.close()

    def announce(self, plan_id: str) -> None:
        """Wake a process that waits on plan ``plan_id`` (a verdict on it was recorded):
        sent when the transaction commits, so it never arrives before the verdict."""
        self._run("SELECT pg_notify(%s, %s)", (ANSWERS_CHANNEL, plan_id))

    def _exists(self, table: str) -> bool:
        row = self._run("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
        return bool(row and row[0])

    def _run(self, sql: str, parameters: Sequence[Any]) -> Any:
        try:
            return self._db.execute(sql, parameters)
        except _driver().Error as exc:
            # A lost server, a read-only one, a full disk, a role without the right: the
            # server's own words, on one line.
            raise self._lost(exc) from None

    def _lost(self, exc: Exception) -> CatalogError:
        reason = _reason(exc, self._url)
        return CatalogError(f"PostgreSQL catalog {shown_url(self._url)}: {reason}")
