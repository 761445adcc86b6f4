"""Events and event logs: ULIDs, the tagged union, memory and SQLite logs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest
from _helpers import validation_completed
from gategraph.runtime import ConfigError, RuntimeFault, ValidationResult
from gategraph.runtime._base._ids import new_ulid
from gategraph.runtime._data._events import (
    ArtifactProduced,
    NodeCompleted,
    RunStarted,
    ValidationCompleted,
    decode_event,
    encode_event,
)
from gategraph.runtime._storage._eventlog import (
    MemoryEventLog,
    SQLiteEventLog,
    default_event_log_path,
    list_plans,
    read_events,
)
from ulid import ULID


def test_ulids_are_real_sorted_and_unique() -> None:
    """new_ulid makes valid ULIDs that sort in creation order."""
    ids = [new_ulid() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for value in ids[:: len(ids) // 10]:
        assert str(ULID.from_str(value)) == value
        assert len(value) == 26


def test_ulids_carry_their_millisecond_and_a_forked_child_draws_other_bits() -> None:
    """The time part is the moment made; a child forked in the same millisecond as its
    parent's last id does not make the parent's next ids (its random bits are its own)."""
    import os
    import time
    import warnings

    before = time.time()
    value = new_ulid()
    made = ULID.from_str(value).timestamp
    assert before - 0.002 <= made <= time.time() + 0.002
    read, write = os.pipe()
    with warnings.catch_warnings():
        # Python 3.12+ warns of fork() in a process with threads (earlier tests' idle ones);
        # the child here only makes ids and exits.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, ",".join(new_ulid() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    ours = [new_ulid() for _ in range(3)]
    # The same millisecond gives the same time prefix; the random part must differ.
    assert {c[10:20] for c in child}.isdisjoint({o[10:20] for o in ours} | {value[10:20]})


def test_events_round_trip_as_a_tagged_union() -> None:
    """Each event encodes with its type tag and decodes back to the same struct."""
    events = [
        RunStarted(id=new_ulid(), plan_id="p", seq=1, at=1.0, graph="g"),
        validation_completed("p", 2, passed=False),
        NodeCompleted(
            id=new_ulid(), plan_id="p", seq=3, at=1.0, node="w", ok=True, duration=0.1, output=[1]
        ),
        ArtifactProduced(id=new_ulid(), plan_id="p", seq=4, at=1.0, node="w", artifact={"a": 1}),
    ]
    for event in events:
        data = encode_event(event)
        assert decode_event(data) == event
    assert b'"type":"validation_completed"' in encode_event(events[1])


@pytest.mark.anyio
async def test_memory_log_keeps_order_per_plan() -> None:
    """The memory log returns a plan's events in order, filtered by seq."""
    log = MemoryEventLog()
    await log.append_many([validation_completed("a", i, passed=False) for i in range(1, 4)])
    await log.append(validation_completed("b", 1, passed=False))
    assert [e.seq for e in await log.read("a")] == [1, 2, 3]
    assert [e.seq for e in await log.read("a", after=2)] == [3]
    assert await log.plans() == ["a", "b"]
    assert len(log) == 4


@pytest.mark.anyio
async def test_sqlite_log_is_durable_and_batched(tmp_path: Path) -> None:
    """Concurrent appends are committed (readable from another connection) when append returns."""
    path = tmp_path / "events.db"
    async with SQLiteEventLog(path) as log:
        async with anyio.create_task_group() as tg:
            for i in range(1, 201):
                tg.start_soon(log.append, validation_completed("p", i, passed=False))
        # Durable now: a separate reader sees all of them.
        assert len(read_events(path, "p")) == 200
        assert [e.seq for e in await log.read("p", after=198)] == [199, 200]
        assert await log.plans() == ["p"]
    events = read_events(path, "p")
    assert [e.seq for e in events] == list(range(1, 201))
    assert isinstance(events[0], ValidationCompleted)
    assert events[0].result == ValidationResult(False, "bad", {"error": "timeout"})
    assert list_plans(path) == ["p"]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.anyio
async def test_sqlite_log_reports_write_failures(tmp_path: Path) -> None:
    """A duplicate (plan, seq) cannot be written, and the appender hears about it."""
    async with SQLiteEventLog(tmp_path / "e.db") as log:
        await log.append(validation_completed("p", 1, passed=False))
        with pytest.raises(RuntimeFault, match="could not be written"):
            await log.append(validation_completed("p", 1, passed=False))


@pytest.mark.anyio
async def test_sqlite_log_must_be_opened(tmp_path: Path) -> None:
    """Appending outside `async with` is a clear error."""
    log = SQLiteEventLog(tmp_path / "e.db")
    with pytest.raises(RuntimeFault, match="not open"):
        await log.append(validation_completed("p", 1, passed=False))


def test_bad_event_log_files(tmp_path: Path) -> None:
    """Reading a missing or non-SQLite file is a one-line ConfigError naming it."""
    with pytest.raises(ConfigError, match="no event log here"):
        read_events(tmp_path / "none.db", "p")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ConfigError, match="not a gategraph event log"):
        read_events(garbage, "p")


def test_default_path_is_beside_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded event log lives in the catalog's folder."""
    monkeypatch.setenv("GATEGRAPH_HOME", str(tmp_path))
    assert default_event_log_path() == tmp_path / "events.db"


@pytest.mark.anyio
async def test_sqlite_log_passes_the_bodys_error_through(tmp_path: Path) -> None:
    """An error raised inside `async with SQLiteEventLog` comes out as itself, not a group."""
    with pytest.raises(ConfigError, match="bad input"):
        async with SQLiteEventLog(tmp_path / "e.db"):
            raise ConfigError("bad input")


@pytest.mark.anyio
async def test_a_refused_plan_does_not_poison_the_log(tmp_path: Path) -> None:
    """A plan whose seq does not follow on is refused alone; other plans keep writing."""
    async with SQLiteEventLog(tmp_path / "e.db") as log:
        await log.append(validation_completed("a", 1, passed=False))
        log.append_nowait(validation_completed("a", 1, passed=False))  # the same seq again: refused
        await log.append(
            validation_completed("b", 1, passed=False)
        )  # another plan in the same batch: fine
        with pytest.raises(RuntimeFault, match="does not follow"):
            await log.flush("a")
        await log.flush("b")
        await log.append(validation_completed("b", 2, passed=False))
    assert [e.seq for e in read_events(tmp_path / "e.db", "b")] == [1, 2]
    assert [e.seq for e in read_events(tmp_path / "e.db", "a")] == [1]
