"""A person's answers to paused plans, kept where the plan's log is, for whoever continues it.

A plan that waits for a person (``awaiting_approval``, ``awaiting_decision``) is answered
with ``gategraph approve`` or ``decide``. When that command does not continue the plan
itself (a process on another host waits on the plan, or the person only records the
answer), the answer is kept here: one row per pause, named by the plan and the seq of the
event that paused it, so an answer never outlives the pause it answers, and a second answer
to the same pause is refused rather than silently replacing the first.

In a PostgreSQL database, recording an answer sends ``NOTIFY gategraph_answers`` with the
plan's id, and a process that waits on the plan (``--wait``) ``LISTEN``s: it wakes the
moment the answer commits. A SQLite log has no such signal: a waiting process reads the
table a few times a second (one indexed read of a local file).
"""

from __future__ import annotations

import socket
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import ConfigError, GategraphError

from ._eventlog import _connect as _sqlite_connect
from ._postgres import ANSWERS_CHANNEL as CHANNEL
from ._postgres import (
    _driver,
    _held_connection,
    _secret_free,
    _with_tables,
    is_postgres_url,
    shown_url,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["Answer", "AnswerTakenError", "answer_for", "record_answer", "wait_for_answer"]

_SQLITE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS plan_answers (
    plan_id    TEXT NOT NULL,
    paused_seq INTEGER NOT NULL,
    action     TEXT NOT NULL,
    note       TEXT,
    given_at   REAL NOT NULL,
    host       TEXT NOT NULL,
    PRIMARY KEY (plan_id, paused_seq)
)
"""
_POSTGRES_SCHEMA: Final = _SQLITE_SCHEMA.replace("INTEGER", "BIGINT").replace(
    "REAL", "DOUBLE PRECISION"
)
_POLL: Final = 0.2
"""How often a process that waits on a plan in a SQLite log reads for its answer."""
_LISTEN_SLICE: Final = 1.0
"""How long one blocking wait for a notification lasts: between two, the wait can be
cancelled (the thread is never left behind)."""


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """A person's answer to one pause of a plan."""

    plan_id: str
    paused_seq: int
    """The seq of the ``plan_finished`` event that paused the plan: the pause answered."""
    action: str
    """``approve``, ``deny``, ``retry`` or ``abort``."""
    note: str | None = None
    given_at: float
    """When it was given, in seconds since the epoch."""
    host: str
    """The host it was given from."""


class AnswerTakenError(GategraphError):
    """The pause has an answer already (the first answer stands)."""

    def __init__(self, answer: Answer) -> None:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(answer.given_at))
        super().__init__(
            f"plan {answer.plan_id} has an answer already: {answer.action}, given from "
            f"{answer.host} at {when}; the first answer stands"
        )
        self.answer = answer


def _row(row: Any) -> Answer:
    plan_id, paused_seq, action, note, given_at, host = row
    return Answer(
        plan_id=plan_id,
        paused_seq=int(paused_seq),
        action=action,
        note=note,
        given_at=float(given_at),
        host=host,
    )


_SELECT: Final = (
    "SELECT plan_id, paused_seq, action, note, given_at, host FROM plan_answers"
    " WHERE plan_id = {p} AND paused_seq = {p}"
)


def record_answer(
    where: Path | str, plan_id: str, paused_seq: int, action: str, note: str | None
) -> Answer:
    """Keep the answer ``action`` to the pause at ``paused_seq`` of plan ``plan_id``, in the
    log at ``where`` (a file or a PostgreSQL URL), and announce it. Raises
    :class:`AnswerTakenError` when that pause has an answer already."""
    answer = Answer(
        plan_id=plan_id,
        paused_seq=paused_seq,
        action=action,
        note=note,
        given_at=time.time(),
        host=socket.gethostname(),
    )
    values = (plan_id, paused_seq, action, note, answer.given_at, answer.host)
    insert = (
        "INSERT INTO plan_answers (plan_id, paused_seq, action, note, given_at, host)"
        " VALUES ({p}, {p}, {p}, {p}, {p}, {p}) ON CONFLICT (plan_id, paused_seq) DO NOTHING"
    )
    if isinstance(where, str) and is_postgres_url(where):
        with _postgres(where) as db:
            with db.transaction():
                added = db.execute(insert.format(p="%s"), values).rowcount
                if added:
                    # Delivered when the transaction commits, never before the row is there.
                    db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, plan_id))
                else:
                    row = db.execute(_SELECT.format(p="%s"), (plan_id, paused_seq)).fetchone()
        if not added:
            raise AnswerTakenError(_row(row))
        return answer
    with _sqlite(where) as lite:
        added = lite.execute(insert.format(p="?"), values).rowcount
        row = (
            None if added else lite.execute(_SELECT.format(p="?"), (plan_id, paused_seq)).fetchone()
        )
    if not added:
        raise AnswerTakenError(_row(row))
    return answer


def answer_for(where: Path | str, plan_id: str, paused_seq: int) -> Answer | None:
    """The answer kept for the pause at ``paused_seq`` of plan ``plan_id``, or None."""
    if isinstance(where, str) and is_postgres_url(where):
        with _postgres(where) as db:
            row = db.execute(_SELECT.format(p="%s"), (plan_id, paused_seq)).fetchone()
        return None if row is None else _row(row)
    if not Path(where).is_file():
        return None
    with _sqlite(where) as lite:
        row = lite.execute(_SELECT.format(p="?"), (plan_id, paused_seq)).fetchone()
    return None if row is None else _row(row)


@contextmanager
def _postgres(url: str) -> Iterator[Any]:
    """A connection to the database ``url`` with its answers' table; what the server
    refuses (read-only, gone) is one line naming the database."""
    db = _with_tables(url, "answer store", "plan_answers", _POSTGRES_SCHEMA)
    try:
        yield db
    except _driver().Error as exc:
        reason = _secret_free(" ".join(str(exc).split()), url)
        raise ConfigError(f"cannot keep answers: {reason}", source=shown_url(url)) from None
    finally:
        db.close()


@contextmanager
def _sqlite(where: Path | str) -> Iterator[sqlite3.Connection]:
    """The SQLite log at ``where``, with its answers' table, in one transaction; what
    SQLite refuses (a read-only file, a full disk) is one line naming the file."""
    db = _sqlite_connect(Path(where))
    try:
        with db:
            db.execute(_SQLITE_SCHEMA)
            yield db
    except sqlite3.Error as exc:
        raise ConfigError(
            f"cannot keep answers in the event log: {' '.join(str(exc).split())}",
            source=str(where),
        ) from None
    finally:
        db.close()


async def wait_for_answer(
    where: Path | str,
    plan_id: str,
    paused_seq: int,
    *,
    changed: Callable[[], object] | None = None,
) -> Answer | None:
    """Wait until the pause at ``paused_seq`` of plan ``plan_id`` has an answer, and return
    it; or, with ``changed`` (a reading of something else the plan waits for, such as its
    attestations), until that reading differs from what it was (None). In a PostgreSQL
    database a notification wakes it at once; a SQLite log is read every 0.2 s."""
    seen = await anyio.to_thread.run_sync(changed) if changed is not None else None
    if isinstance(where, str) and is_postgres_url(where):
        return await _listen(where, plan_id, paused_seq, changed, seen)
    while True:
        found = await anyio.to_thread.run_sync(answer_for, where, plan_id, paused_seq)
        if found is not None:
            return found
        if changed is not None and await anyio.to_thread.run_sync(changed) != seen:
            return None
        await anyio.sleep(_POLL)


async def _listen(
    url: str,
    plan_id: str,
    paused_seq: int,
    changed: Callable[[], object] | None,
    seen: object,
) -> Answer | None:
    listener = await anyio.to_thread.run_sync(_held_connection, url)
    try:
        await anyio.to_thread.run_sync(listener.execute, f"LISTEN {CHANNEL}")
        while True:
            # Read after LISTEN: an answer given before it is found here, one given after
            # it wakes the wait below.
            found = await anyio.to_thread.run_sync(answer_for, url, plan_id, paused_seq)
            if found is not None:
                return found
            if changed is not None and await anyio.to_thread.run_sync(changed) != seen:
                return None
            await anyio.to_thread.run_sync(_next_notice, listener, plan_id)
    finally:
        listener.close()


def _next_notice(listener: Any, plan_id: str) -> None:
    """Block until a notification for ``plan_id`` arrives, or a slice of time passes."""
    for notice in listener.notifies(timeout=_LISTEN_SLICE):
        if notice.payload == plan_id:
            return
