"""Event logs: append-only, per plan; in memory or durable on SQLite.

:class:`SQLiteEventLog` batches writes through one writer task (group commit): every
``append`` returns only once its event is committed, so an event is durable before the
transition it causes is acted on, while a fan-out of thousands of validations shares a
few commits instead of paying one each.
"""

from __future__ import annotations

import hashlib
import itertools
import operator
import os
import sqlite3
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, Self, runtime_checkable

import anyio
import anyio.lowlevel
import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import ConfigError, PlanBusyError, RuntimeFault
from gategraph.runtime._base._home import BUSY_TIMEOUT_MS, default_catalog_path, enable_wal
from gategraph.runtime._base._kernel import keep_out, let_in
from gategraph.runtime._data._events import Event, EventBase

if TYPE_CHECKING:
    from types import TracebackType

    from anyio.abc import TaskGroup

__all__ = [
    "BatchedEventLog",
    "EventLog",
    "MemoryEventLog",
    "SQLiteEventLog",
    "default_event_log_path",
    "holding_lease",
    "read_events",
]

EVENTS_FILE: Final = "events.db"
_segment_encoder: Final = msgspec.json.Encoder()
_segment_decoder: Final = msgspec.json.Decoder(list[Event])
# Events are stored in segments: each committed batch of one plan is one row holding a
# JSON array of its events. A fan-out commits thousands of events at a time; one row per
# event cost ~5 µs of SQLite work each, one row per batch costs next to nothing per event.
# The array is plain JSON, so `SELECT value FROM event_segments, json_each(body)` reads it.
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS event_segments (
    plan_id   TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq  INTEGER NOT NULL,
    first_id  TEXT NOT NULL,
    count     INTEGER NOT NULL,
    body      BLOB NOT NULL,
    PRIMARY KEY (plan_id, first_seq)
) WITHOUT ROWID
"""


def default_event_log_path() -> Path:
    """The embedded event log: ``events.db`` beside the catalog."""
    return default_catalog_path().with_name(EVENTS_FILE)


@runtime_checkable
class EventLog(Protocol):
    """Where a plan's events go. Implementations keep them in ``seq`` order per plan."""

    async def append(self, event: EventBase) -> None:
        """Store one event; return once it is as durable as this log makes anything."""

    async def append_many(self, events: Sequence[EventBase]) -> None:
        """Store several events at once, in order."""

    def append_nowait(self, event: EventBase) -> None:
        """Queue one event without waiting for it to be durable.

        For events nothing acts on (a start): it is stored before any event appended
        after it, so the next awaited ``append`` makes it durable too.
        """

    async def flush(self, plan_id: str | None = None) -> None:
        """Return once every event appended so far is durable; raise if ``plan_id``'s (or,
        without one, any plan's) events could not be written."""

    async def read(self, plan_id: str, *, after: int = 0) -> list[Event]:
        """Return the plan's events with ``seq > after``, in order."""

    async def plans(self) -> list[str]:
        """Return the ids of every plan with events, oldest first."""


class MemoryEventLog:
    """An event log in memory, for embedding, tests and benchmarks."""

    appends_immediately: ClassVar[bool] = True
    """An appended event is stored at once: there is nothing to wait for."""

    def __init__(self) -> None:
        self._events: dict[str, list[EventBase]] = {}
        self._leased: set[str] = set()

    @contextmanager
    def lease(self, plan_id: str) -> Iterator[None]:
        """Hold the plan's one writer slot in this log (this process): a second supervisor
        of the same plan gets :class:`PlanBusyError` while the first one runs."""
        if plan_id in self._leased:
            raise PlanBusyError(_busy(plan_id))
        self._leased.add(plan_id)
        try:
            yield
        finally:
            self._leased.discard(plan_id)

    async def append(self, event: EventBase) -> None:
        """Store one event."""
        self.append_nowait(event)

    async def append_many(self, events: Sequence[EventBase]) -> None:
        """Store several events, in order."""
        for event in events:
            self.append_nowait(event)

    async def flush(self, plan_id: str | None = None) -> None:
        """Nothing to wait for: appends are stored at once."""

    def appender(self, plan_id: str) -> Callable[[EventBase], None]:
        """``append_nowait`` for the events of one plan, as the plan's list's own
        ``append``: a run of 10,000 validations appends 20,000 events."""
        if type(self).append_nowait is not MemoryEventLog.append_nowait:
            return self.append_nowait  # a subclass that does more per event
        return self._events.setdefault(plan_id, []).append

    def append_nowait(self, event: EventBase) -> None:
        """Store one event (a memory log has nothing to wait for)."""
        events = self._events.get(event.plan_id)
        if events is None:
            events = self._events[event.plan_id] = []
        events.append(event)

    async def read(self, plan_id: str, *, after: int = 0) -> list[Event]:
        """Return the plan's events with ``seq > after``."""
        return [e for e in self._events.get(plan_id, ()) if e.seq > after]  # type: ignore[misc]

    async def plans(self) -> list[str]:
        """Return the plan ids in the order their first event arrived."""
        return list(self._events)

    def __len__(self) -> int:
        return sum(len(v) for v in self._events.values())


def _busy(plan_id: str) -> str:
    return (
        f"plan {plan_id} is being run by another process or task right now; one supervisor "
        "per plan: wait for it to finish or pause"
    )


def _connect(path: Path) -> sqlite3.Connection:
    source = os.fspath(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise ConfigError(f"cannot open the event log: {exc}", source=source) from None
    try:
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        enable_wal(db)
        # FULL: a commit is on disk when it returns, so an event acted on survives a power
        # loss too (group commit keeps this to one fsync per batch).
        db.execute("PRAGMA synchronous = FULL")
        db.execute(_SCHEMA)
        db.commit()
    except sqlite3.DatabaseError as exc:
        db.close()
        raise ConfigError(f"not a gategraph event log ({exc})", source=source) from None
    return db


_Pending = EventBase | tuple[Sequence[EventBase], anyio.Event]
"""What the writer's queue holds: an event queued without waiting (``append_nowait``, two
per validation: nothing wraps it), or events an appender waits for, with its event."""


class BatchedEventLog:
    """A durable event log written by one batching writer task (group commit); a backend
    says how a batch is stored (:meth:`_store_open`, :meth:`_store_close`,
    :meth:`_last_seq_stored`, :meth:`_store`), in a worker thread.

    Use it as an async context manager; the writer runs inside it, so nothing outlives it.
    """

    def __init__(self, *, max_batch: int = 4096) -> None:
        self._max_batch = max_batch
        self._last_seq: dict[str, int] = {}
        # A deque and an event rather than a memory object stream: a fan-out queues two
        # events per validation, and a stream's send and receive cost ten times an append.
        self._queue: deque[_Pending] = deque()
        self._wakeup: anyio.Event | None = None
        self._open = False
        self._task_group: TaskGroup | None = None
        self._failures: dict[str, Exception] = {}

    # -- the backend -------------------------------------------------------------------

    def _store_open(self) -> None:
        """Connect and make the tables (in a worker thread); ConfigError if it cannot."""
        raise NotImplementedError

    def _store_close(self) -> None:
        """Close what :meth:`_store_open` opened."""
        raise NotImplementedError

    def _last_seq_stored(self, plan_id: str) -> int:
        """The plan's last stored seq (0 for none), within the batch's transaction."""
        raise NotImplementedError

    def _store(self, rows: list[tuple[Any, ...]]) -> AbstractContextManager[None]:
        """A transaction that stores ``rows`` (plan_id, first_seq, last_seq, first_id,
        count, body) when its block ends without an error, and stores nothing otherwise."""
        raise NotImplementedError

    def _not_open(self) -> RuntimeFault:
        return RuntimeFault(f"the {self._kind} event log is not open: use `async with` on it")

    _kind: ClassVar[str] = "durable"

    # -- the writer --------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await anyio.to_thread.run_sync(self._store_open)
        self._entered()
        self._open = True
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._writer)
        return self

    def _entered(self) -> None:
        """Once the store is open, before the writer starts."""

    def _left(self) -> None:
        """Once the store is closed."""

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._open and self._task_group is not None
        # Closed: the writer drains what is queued, then stops.
        self._open = False
        self._signal()
        try:
            return await self._task_group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The writer never fails on its own (it records failures for the appenders), so
            # a group here carries the body's own error: give the caller that error, not a
            # group it did not start.
            if exc is not None and group.subgroup(lambda e: e is exc) is not None:
                raise exc from None
            raise
        finally:
            try:
                # Closed even when the block was cancelled: a cancelled close would leave
                # the connection open.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._store_close)
            finally:
                self._left()

    def _put(self, item: _Pending) -> None:
        if not self._open:
            raise self._not_open()
        self._queue.append(item)
        self._signal()

    def _signal(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    async def _writer(self) -> None:
        queue = self._queue
        while True:
            if not queue:
                if not self._open:
                    return
                self._wakeup = wakeup = anyio.Event()
                await wakeup.wait()
                continue
            # Let the tasks that can run now append first: concurrent appenders of one plan
            # then land in one batch, where a segment sorts them (across batches, seq must
            # only grow). One trip through the loop per batch.
            await anyio.lowlevel.checkpoint()
            # Take everything already queued: one commit for the whole burst.
            by_plan: dict[str, list[EventBase]] = {}
            waiting: list[anyio.Event] = []
            size = 0
            plan_id: str | None = None
            bucket: list[EventBase] = []
            while queue and size < self._max_batch:
                item = queue.popleft()
                if isinstance(item, EventBase):
                    size += 1
                    # One plan's events in a row, as a run appends them: one lookup each
                    # time the plan changes, not one per event.
                    if item.plan_id != plan_id:
                        plan_id = item.plan_id
                        bucket = by_plan.setdefault(plan_id, [])
                    bucket.append(item)
                    continue
                events, done = item
                waiting.append(done)
                size += len(events)
                for event in events:
                    by_plan.setdefault(event.plan_id, []).append(event)
                plan_id = None
            try:
                failures = await anyio.to_thread.run_sync(self._commit, by_plan)
            except Exception as exc:
                failures = dict.fromkeys(by_plan, exc)
            self._failures.update(failures)
            for done in waiting:
                done.set()

    def _commit(self, by_plan: dict[str, list[EventBase]]) -> dict[str, Exception]:
        """Commit each plan's events as one segment; a plan whose seq does not follow on is
        refused alone, without costing the other plans of the batch their events."""
        refused: dict[str, Exception] = {}
        rows: list[tuple[Any, ...]] = []
        committed: dict[str, int] = {}
        with self._store(rows):
            for plan_id, events in by_plan.items():
                if plan_id in self._failures:
                    refused[plan_id] = self._failures[plan_id]
                    continue
                previous = self._last_seq.get(plan_id)
                if previous is None:
                    # Asked once per plan: after that this writer knows (the plan's lease
                    # keeps other writers out), and every query is a trip for the GIL.
                    previous = self._last_seq_stored(plan_id)
                # Concurrent appenders may queue a plan's events out of order within a
                # batch; a segment keeps them sorted. Across batches, seq must only grow.
                # (Loops in C: this thread holds the GIL the event loop's thread wants.)
                seqs = list(map(_seq, events))
                if seqs != sorted(seqs):
                    events.sort(key=_seq)
                    seqs.sort()
                conflict = _out_of_order(seqs, previous)
                if conflict is not None:
                    seq, before = conflict
                    refused[plan_id] = RuntimeFault(
                        f"plan {plan_id}: event seq {seq} does not follow {before}"
                        " (is the plan id used twice?)"
                    )
                    continue
                rows.append(
                    (
                        plan_id,
                        events[0].seq,
                        events[-1].seq,
                        events[0].id,
                        len(events),
                        _segment_encoder.encode(events),
                    )
                )
                committed[plan_id] = events[-1].seq
        # Known only once the transaction committed: a failed one leaves the cache as it was.
        self._last_seq.update(committed)
        return refused

    async def append(self, event: EventBase) -> None:
        """Store one event; return once it is committed."""
        await self.append_many((event,))

    async def append_many(self, events: Sequence[EventBase]) -> None:
        """Store several events in one transaction; return once they are committed."""
        await self._wait(events)
        for plan_id in {event.plan_id for event in events}:
            self._raise_for(plan_id)

    async def _wait(self, events: Sequence[EventBase]) -> None:
        done = anyio.Event()
        self._put((events, done))
        await done.wait()

    def _raise_for(self, plan_id: str | None) -> None:
        if plan_id is None:
            failure = next(iter(self._failures.values()), None)
        else:
            failure = self._failures.get(plan_id)
        if failure is not None:
            raise RuntimeFault(f"the event log could not be written: {failure}")

    async def flush(self, plan_id: str | None = None) -> None:
        """Return once every event appended so far is committed."""
        await self._wait(())
        self._raise_for(plan_id)

    def append_nowait(self, event: EventBase) -> None:
        """Queue one event; it is committed with (or before) the next awaited append."""
        # `_put`, inline: a fan-out queues two events per validation.
        if not self._open:
            raise self._not_open()
        self._queue.append(event)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()


class SQLiteEventLog(BatchedEventLog):
    """A durable event log in one SQLite file (WAL), written by one batching writer task.

    Use it as an async context manager; the writer runs inside it, so nothing outlives it::

        async with SQLiteEventLog(path) as log:
            await execute_graph(graph, event_log=log)
    """

    _kind: ClassVar[str] = "SQLite"

    def __init__(self, path: str | os.PathLike[str] | None = None, *, max_batch: int = 4096):
        super().__init__(max_batch=max_batch)
        self._path = Path(path) if path is not None else default_event_log_path()
        self._db: sqlite3.Connection | None = None

    @property
    def path(self) -> Path:
        """The log's file."""
        return self._path

    @property
    def _leases(self) -> Path:
        """The folder of its plans' lease files (see :meth:`lease`)."""
        return Path(f"{self._path}.locks")

    def _store_open(self) -> None:
        self._db = _connect(self._path)

    def _entered(self) -> None:
        # No sandboxed call may lock it (and stall the writer), or a plan's lease.
        keep_out(self._path)
        keep_out(self._leases)

    def _store_close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()

    def _left(self) -> None:
        let_in(self._path)
        let_in(self._leases)

    def _last_seq_stored(self, plan_id: str) -> int:
        assert self._db is not None
        last = self._db.execute(
            "SELECT max(last_seq) FROM event_segments WHERE plan_id = ?", (plan_id,)
        ).fetchone()[0]
        return int(last) if last is not None else 0

    @contextmanager
    def _store(self, rows: list[tuple[Any, ...]]) -> Iterator[None]:
        assert self._db is not None
        with self._db:
            yield
            # One statement for the batch: each call into SQLite gives the GIL up and must
            # win it back from the event loop's thread, which holds it while the engine runs.
            self._db.executemany(
                "INSERT INTO event_segments (plan_id, first_seq, last_seq, first_id, count,"
                " body) VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

    @contextmanager
    def lease(self, plan_id: str) -> Iterator[None]:
        """Hold the plan's one writer slot, across processes: a second supervisor of the
        same plan (another ``gategraph resume``, say) gets :class:`PlanBusyError`.

        An advisory ``flock`` on a file beside the database: the kernel releases it when its
        holder dies, so a killed run never blocks its own resumption.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: no cross-process lease
            yield
            return
        folder = self._leases
        folder.mkdir(parents=True, exist_ok=True)
        # A digest, not the id itself: any plan id makes a safe file name.
        name = hashlib.sha256(plan_id.encode()).hexdigest()[:32]
        fd = os.open(folder / name, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise PlanBusyError(_busy(plan_id)) from None
            yield
        finally:
            os.close(fd)

    async def read(self, plan_id: str, *, after: int = 0) -> list[Event]:
        """Return the plan's committed events with ``seq > after``."""
        return await anyio.to_thread.run_sync(read_events, self._path, plan_id, after)

    async def plans(self) -> list[str]:
        """Return the ids of every plan in the log, oldest first."""
        return await anyio.to_thread.run_sync(list_plans, self._path)


_seq: Final = operator.attrgetter("seq")


def _out_of_order(seqs: list[int], previous: int) -> tuple[int, int] | None:
    """The first of the sorted ``seqs`` that does not follow on, with the seq it should
    have followed (``previous`` for the first one, else the one before it), or ``None``."""
    if seqs[0] <= previous:
        return seqs[0], previous
    if len(set(seqs)) == len(seqs):
        return None
    return next((b, a) for a, b in itertools.pairwise(seqs) if b <= a)


def _reader(path: Path) -> sqlite3.Connection | None:
    """A connection that only reads the log (None when the file holds no events yet): a
    reader never writes, not even the table a writer makes."""
    source = os.fspath(path)
    if not path.exists():
        raise ConfigError("no event log here", source=source)
    db: sqlite3.Connection | None = None
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'event_segments'"
        ).fetchone()
    except sqlite3.Error as exc:
        if db is not None:
            db.close()
        raise ConfigError(f"not a gategraph event log ({exc})", source=source) from None
    if found is None:
        db.close()
        return None
    return db


def read_events(path: str | os.PathLike[str], plan_id: str, after: int = 0) -> list[Event]:
    """Read a plan's events from a SQLite event log file (synchronously)."""
    db = _reader(Path(path))
    if db is None:
        return []
    try:
        rows: Iterable[tuple[bytes]] = db.execute(
            "SELECT body FROM event_segments WHERE plan_id = ? AND last_seq > ? ORDER BY first_seq",
            (plan_id, after),
        )
        return [e for row in rows for e in _segment_decoder.decode(row[0]) if e.seq > after]
    finally:
        db.close()


def list_plans(path: str | os.PathLike[str]) -> list[str]:
    """Return the plan ids in a SQLite event log file, oldest first."""
    db = _reader(Path(path))
    if db is None:
        return []
    try:
        rows = db.execute(
            "SELECT plan_id FROM event_segments GROUP BY plan_id ORDER BY min(first_id)"
        )
        return [row[0] for row in rows]
    finally:
        db.close()


@asynccontextmanager
async def holding_lease(log: Any, plan_id: str) -> AsyncIterator[None]:
    """Hold ``log``'s lease of plan ``plan_id`` (see :meth:`SQLiteEventLog.lease`), taken
    and given back in a worker thread: a lease in a database connects first (up to its
    connect timeout against a server that does not answer), and the event loop must not
    stall meanwhile. Taking it is shielded: a lease taken as its caller is cancelled is
    given back, never left held. A log without leases holds nothing."""
    lease = getattr(log, "lease", None)
    if lease is None:
        yield
        return
    held = lease(plan_id)
    with anyio.CancelScope(shield=True):
        await anyio.to_thread.run_sync(held.__enter__)
    try:
        await anyio.lowlevel.checkpoint()
        yield
    except BaseException as exc:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(held.__exit__, type(exc), exc, exc.__traceback__)
        raise
    else:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(held.__exit__, None, None, None)
