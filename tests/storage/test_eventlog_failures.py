"""The SQLite event log when writing fails: a plan whose events cannot be stored stays
refused (a gap in its log would make it lie), other plans go on, and the file and lease
errors a user meets are one line each."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module
from _helpers import validation_completed as event
from gategraph.runtime import ConfigError, RuntimeFault
from gategraph.runtime._base._exceptions import PlanBusyError
from gategraph.runtime._storage._eventlog import SQLiteEventLog, read_events


@pytest.mark.anyio
async def test_a_plan_refused_once_stays_refused_and_others_go_on(tmp_path: Path) -> None:
    """After a seq that does not follow on, the plan's later events are refused with the
    first reason; a flush says so; another plan's events are committed all along."""
    path = tmp_path / "events.db"
    async with SQLiteEventLog(path) as log:
        await log.append(event("p", 1))
        with pytest.raises(RuntimeFault, match="event seq 1 does not follow 1"):
            await log.append(event("p", 1))
        with pytest.raises(RuntimeFault, match="event seq 1 does not follow 1"):
            await log.append(event("p", 2))  # would follow on, but the log has a hole
        await log.append(event("other", 1))
        with pytest.raises(RuntimeFault, match="could not be written"):
            await log.flush()
        with pytest.raises(RuntimeFault, match="does not follow"):
            await log.flush("p")
        await log.flush("other")
    assert [e.seq for e in read_events(path, "p")] == [1]
    assert [e.seq for e in read_events(path, "other")] == [1]


@pytest.mark.anyio
async def test_a_failed_commit_fails_every_plan_of_its_batch(tmp_path: Path) -> None:
    """A database error (disk full, say) is reported to each appender of the batch."""
    async with SQLiteEventLog(tmp_path / "events.db") as log:

        def disk_full(by_plan: dict[str, Any]) -> dict[str, Exception]:
            raise sqlite3.OperationalError("database or disk is full")

        log._commit = disk_full  # type: ignore[method-assign]
        with pytest.raises(RuntimeFault, match="database or disk is full"):
            await log.append_many([event("a", 1), event("b", 1)])
        with pytest.raises(RuntimeFault, match="database or disk is full"):
            await log.flush("b")


@pytest.mark.anyio
async def test_a_log_that_cannot_be_opened_is_a_config_error(tmp_path: Path) -> None:
    """A path under a file is refused in one line naming the file."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where a folder should be")
    with pytest.raises(ConfigError, match="cannot open the event log") as caught:
        async with SQLiteEventLog(blocker / "events.db"):
            pass
    assert str(blocker / "events.db") in str(caught.value)


def test_a_second_lease_on_a_plan_is_refused_until_the_first_ends(tmp_path: Path) -> None:
    """One supervisor per plan: a second lease (another run of the same plan) is busy;
    another plan, or the same one after the first lease, is free."""
    log = SQLiteEventLog(tmp_path / "events.db")
    with log.lease("p1"):
        with pytest.raises(PlanBusyError, match="plan p1 is being run by another process"):
            with log.lease("p1"):
                pass
        with log.lease("p2"):
            pass
    with log.lease("p1"):
        pass


@pytest.mark.anyio
async def test_a_log_that_fails_midway_stops_a_fan_out_of_leaves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the log says it cannot be written, the run stops with its error, rather than
    running every other validation while their completions are lost.

    The log's commits run on the loop here, not in its writer thread: when a thread gets
    the GIL from a busy event loop's thread is up to the interpreter, and what is tested
    is what the engine does once the log has said so."""
    from gategraph.runtime._storage import _eventlog

    async def at_once(func: Any, *args: Any, **_: Any) -> Any:
        return func(*args)

    monkeypatch.setattr(_eventlog.anyio.to_thread, "run_sync", at_once)
    import anyio
    from gategraph.runtime import execute_graph, load_graph

    ran: list[int] = []

    async def nap(**_: Any) -> dict[str, Any]:
        ran.append(1)
        await anyio.sleep(0.001)
        return {"passed": True}

    module = fake_module(monkeypatch, "leaves_module", nap=nap)
    n = 2000
    graph = load_graph(
        {
            "version": 1,
            "name": "leaves",
            "validations": [{"name": "nap", "entrypoint": f"{module}:nap"}],
            "nodes": [
                {"id": f"v{i}", "validation": "nap", "isolation": "inline"} for i in range(n)
            ],
            "policy": {"max_concurrency": 50},
        }
    )
    async with SQLiteEventLog(tmp_path / "events.db") as log:
        real = log._commit
        commits: list[int] = []

        def fails_after_the_first(by_plan: dict[str, Any]) -> dict[str, Exception]:
            commits.append(1)
            if len(commits) > 1:
                raise sqlite3.OperationalError("database or disk is full")
            return real(by_plan)

        log._commit = fails_after_the_first  # type: ignore[method-assign]
        with pytest.raises(RuntimeFault, match="database or disk is full"):
            await execute_graph(graph, event_log=log, plan_id="p")
    assert len(ran) < n / 2
