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

import functools
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
from gategraph.runtime._base._protocols import EscalationDecision

from ._eventlog import _connect as _sqlite_connect
from ._postgres import ANSWERS_CHANNEL as CHANNEL
from ._postgres import (
    _driver,
    _held_connection,
    _reason,
    _with_tables,
    is_postgres_url,
    shown_url,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

__all__ = [
    "MOVED",
    "WOKEN",
    "Answer",
    "AnswerTakenError",
    "WaitLost",
    "answer_for",
    "record_answer",
    "wait_for_answer",
]

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

    def as_decision(self) -> EscalationDecision:
        """The answer as the supervisor takes it."""
        return EscalationDecision(action=self.action, note=self.note)  # type: ignore[arg-type]


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
    if is_postgres_url(where):
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
    if is_postgres_url(where):
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
        raise ConfigError(
            f"cannot keep answers: {_reason(exc, url)}", source=shown_url(url)
        ) from None
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


class WaitLost(GategraphError):
    """The connection a process waited on lost (the server restarted, the network cut):
    the plan stays as it was."""


MOVED: Final = "moved"
""":func:`wait_for_answer`'s word for a plan that moved on without this process (another
one continued it)."""
WOKEN: Final = "woken"
""":func:`wait_for_answer`'s word for what else the plan waits for having changed."""


async def wait_for_answer(
    where: Path | str,
    plan_id: str,
    paused_seq: int,
    *,
    woken: Callable[[], bool] | None = None,
) -> Answer | str:
    """Wait until the pause at ``paused_seq`` of plan ``plan_id`` has an answer, and return
    it; :data:`MOVED` when the plan's log goes past that pause without one (another
    process continued it); :data:`WOKEN` when ``woken()`` (what else the plan waits for,
    such as its attestations, has changed) says so. In a PostgreSQL database one
    connection listens, and a notification wakes it at once; a SQLite log is read five
    times a second. :class:`WaitLost` when the database connection is lost."""
    if is_postgres_url(where):
        return await _listen(where, plan_id, paused_seq, woken)
    state = functools.partial(_sqlite_state, where, plan_id, paused_seq)
    return await _until_answered(state, functools.partial(anyio.sleep, _POLL), paused_seq, woken)


async def _until_answered(
    state: Callable[[], tuple[Answer | None, int]],
    pause: Callable[[], Awaitable[object]],
    paused_seq: int,
    woken: Callable[[], bool] | None,
) -> Answer | str:
    """Read ``state()`` (the answer, the plan's last seq) until it says how the wait ends,
    with ``pause()`` between two reads."""
    while True:
        found, last = await anyio.to_thread.run_sync(state)
        if found is not None:
            return found
        if last > paused_seq:
            return MOVED
        if woken is not None and await anyio.to_thread.run_sync(woken):
            return WOKEN
        await pause()


def _sqlite_state(where: Path | str, plan_id: str, paused_seq: int) -> tuple[Answer | None, int]:
    """The answer to the pause, and the plan's last seq, read at once from a SQLite log."""
    with _sqlite(where) as lite:
        row = lite.execute(_SELECT.format(p="?"), (plan_id, paused_seq)).fetchone()
        last = lite.execute(_LAST, (plan_id,)).fetchone()[0]
    return (None if row is None else _row(row)), int(last or 0)


_LAST: Final = "SELECT max(last_seq) FROM event_segments WHERE plan_id = ?"


async def _listen(
    url: str, plan_id: str, paused_seq: int, woken: Callable[[], bool] | None
) -> Answer | str:
    try:
        # One connection for the whole wait: it listens, and reads between notifications.
        listener = await anyio.to_thread.run_sync(_held_connection, url)
    except ConfigError as exc:
        raise WaitLost(str(exc)) from None
    try:
        await anyio.to_thread.run_sync(_listening, listener, url)
        # Read after LISTEN: an answer given before it is found at once, one given after
        # it ends the wait for a notification.
        state = functools.partial(_postgres_state, listener, url, plan_id, paused_seq)
        notice = functools.partial(_next_notice, listener, url, plan_id)
        return await _until_answered(
            state, functools.partial(anyio.to_thread.run_sync, notice), paused_seq, woken
        )
    finally:
        listener.close()


def _lost(url: str, exc: Exception) -> WaitLost:
    return WaitLost(f"the connection to {shown_url(url)} was lost: {_reason(exc, url)}")


def _listening(listener: Any, url: str) -> None:
    try:
        listener.execute(f"LISTEN {CHANNEL}")
    except _driver().Error as exc:
        raise _lost(url, exc) from None


def _postgres_state(
    listener: Any, url: str, plan_id: str, paused_seq: int
) -> tuple[Answer | None, int]:
    def one(query: str, arguments: tuple[Any, ...]) -> Any:
        try:
            return listener.execute(query, arguments).fetchone()
        except _driver().errors.UndefinedTable:
            return None  # nothing of the kind was ever written in this database

    try:
        row = one(_SELECT.format(p="%s"), (plan_id, paused_seq))
        last = one(_LAST.replace("?", "%s"), (plan_id,))
    except _driver().Error as exc:
        raise _lost(url, exc) from None
    return (None if row is None else _row(row)), int(last[0] or 0) if last else 0


def _next_notice(listener: Any, url: str, plan_id: str) -> None:
    """Block until a notification for ``plan_id`` arrives, or a slice of time passes."""
    try:
        for notice in listener.notifies(timeout=_LISTEN_SLICE):
            if notice.payload == plan_id:
                return
    except _driver().Error as exc:
        raise _lost(url, exc) from None
