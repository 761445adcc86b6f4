"""A person's answers kept beside a plan's log, and the wait for them: one answer per
pause, the first stands, and a waiting process wakes when it commits (in PostgreSQL, by a
notification; an outside validator's verdict on the plan wakes it too)."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from gategraph.runtime import Catalog
from gategraph.runtime._storage._answers import (
    WOKEN,
    AnswerTakenError,
    answer_for,
    record_answer,
    wait_for_answer,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return tmp_path / "events.db"


async def test_one_answer_per_pause_and_the_first_stands(where: Path | str) -> None:
    assert answer_for(where, "P1", 7) is None
    given = record_answer(where, "P1", 7, "approve", "looked at it")
    assert answer_for(where, "P1", 7) == given and given.note == "looked at it"
    with pytest.raises(AnswerTakenError, match=r"approve, given from .* the first answer stands"):
        record_answer(where, "P1", 7, "deny", None)
    assert answer_for(where, "P1", 7) == given
    # Another pause of the same plan, or another plan, is answered on its own.
    assert answer_for(where, "P1", 12) is None and answer_for(where, "P2", 7) is None
    assert record_answer(where, "P1", 12, "retry", None).action == "retry"


@pytest.fixture
def notified_only(where: Path | str, monkeypatch: pytest.MonkeyPatch) -> float:
    """In PostgreSQL, a listener that would not look again for 30 s unless notified: a
    wait that ends within 20 s was woken by the notification. Its deadline (SQLite: for a
    hang only)."""
    from gategraph.runtime._storage import _answers

    if isinstance(where, str):
        monkeypatch.setattr(_answers, "_LISTEN_SLICE", 30.0)
        return 20.0
    return 120.0


async def test_a_waiting_process_wakes_when_the_answer_commits(
    where: Path | str, notified_only: float
) -> None:
    found = []

    async def waits() -> None:
        found.append(await wait_for_answer(where, "P1", 3))

    with anyio.fail_after(notified_only):
        async with anyio.create_task_group() as group:
            group.start_soon(waits)
            await anyio.sleep(0.3)
            assert found == []  # nothing answered: it waits
            given = await anyio.to_thread.run_sync(record_answer, where, "P1", 3, "abort", None)
    assert found == [given]
    # An answer given before the wait began is found at once.
    assert await wait_for_answer(where, "P1", 3) == given


async def test_a_verdict_on_the_plan_wakes_a_wait_for_attestations(
    where: Path | str, tmp_path: Path, notified_only: float
) -> None:
    """What else the plan waits for (its attestations) is read again when woken: in
    PostgreSQL the catalog's verdict announces itself; a SQLite log is read again."""
    catalog = Catalog.open(where if isinstance(where, str) else tmp_path / "gategraph.db")
    with catalog:
        woke: list[object] = []

        async def waits() -> None:
            given = lambda: bool(catalog.verdicts("P9").latest)  # noqa: E731
            woke.append(await wait_for_answer(where, "P9", 5, woken=given))

        with anyio.fail_after(notified_only):
            async with anyio.create_task_group() as group:
                group.start_soon(waits)
                await anyio.sleep(0.3)
                assert woke == []
                await anyio.to_thread.run_sync(
                    catalog.record_verdict, "P9", "validator-a", "attest"
                )
        assert woke == [WOKEN]


async def test_a_wait_is_cancelled_cleanly(where: Path | str) -> None:
    with anyio.move_on_after(0.5) as scope:
        await wait_for_answer(where, "P1", 1)
    assert scope.cancelled_caught


async def test_an_answer_the_database_refuses_is_one_line(
    where: Path | str, tmp_path: Path
) -> None:
    """A log that takes no answer (a SQLite file whose table is something else, a
    PostgreSQL database gone read-only): one ConfigError line naming it."""
    from gategraph.runtime import ConfigError

    if isinstance(where, str):
        from urllib.parse import urlsplit

        import psycopg

        answer_for(where, "P1", 1)  # the table is made
        name = urlsplit(where).path.lstrip("/")
        with psycopg.connect(where, autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
        said = "cannot keep answers: cannot execute INSERT in a read-only transaction"
    else:
        import sqlite3

        with sqlite3.connect(where) as db:
            db.execute("CREATE VIEW plan_answers AS SELECT 1 AS plan_id")
        said = "cannot keep answers in the event log: cannot modify plan_answers"
    with pytest.raises(ConfigError) as caught:
        record_answer(where, "P1", 1, "approve", None)
    assert said in str(caught.value) and "\n" not in str(caught.value)
    if isinstance(where, str):
        with psycopg.connect(where, autocommit=True) as admin:
            admin.execute("SET default_transaction_read_only = off")
            admin.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")


async def test_a_plan_that_moves_on_without_an_answer_ends_the_wait(where: Path | str) -> None:
    """Another process continued the plan (its log goes past the pause): the wait ends."""
    from _helpers import validation_completed as event
    from gategraph.runtime._storage._answers import MOVED
    from gategraph.runtime._storage._database import open_event_log

    async with open_event_log(where) as log:
        await log.append_many([event("P1", 1), event("P1", 2)])
    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            ended: list[object] = []

            async def waits() -> None:
                ended.append(await wait_for_answer(where, "P1", 2))

            group.start_soon(waits)
            await anyio.sleep(0.3)
            assert ended == []
            async with open_event_log(where) as log:
                await log.append(event("P1", 3))
    assert ended == [MOVED]
