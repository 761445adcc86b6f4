"""What a plan's event log says about it at a glance: its status, its rounds, what it waits
for. Read by ``gategraph plans`` and by the MCP server's ``gategraph.plans_waiting``.

Everything here is worked out from the log alone (a plan's events are its whole story), so
it is the same in every process and after a crash. One thing the log cannot say is whether
a plan that never finished is being run right now or was interrupted (a killed process):
the plan's lease says that (see ``SQLiteEventLog.lease``), read without taking it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

import msgspec
from gategraph.runtime._base._statuses import INTERRUPTED, RUNNING, PlanStatus
from gategraph.runtime._data._events import (
    ApprovalRequired,
    ArtifactValidationStarted,
    AttestationRequired,
    EscalationRequested,
    PlanFinished,
    PlanResumed,
    PlanStarted,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from gategraph.runtime._data._events import Event
    from gategraph.runtime._storage._eventlog import EventLog

__all__ = [
    "PERSON_STATUSES",
    "PlanSummary",
    "list_plans",
    "list_plans_sync",
    "plan_summaries",
    "summarize",
]

PERSON_STATUSES: Final = frozenset(s.value for s in PlanStatus if s.for_a_person)
"""The statuses of a plan that waits for a person."""


class PlanSummary(msgspec.Struct, kw_only=True, frozen=True):
    """One plan of an event log, as ``gategraph plans`` lists it."""

    plan_id: str
    name: str
    """The plan graph's name."""
    status: str
    """``applied``, ``failed``, ``awaiting_decision``, ``awaiting_approval``,
    ``awaiting_attestation``, ``running`` or ``interrupted``."""
    rounds: int
    """Validation rounds so far."""
    started_at: float
    """When the plan started, in seconds since the epoch."""
    last_at: float
    """When its last event happened."""
    waiting_for: str | None = None
    """What a paused plan waits for, in words (``None`` when it does not wait)."""
    message: str = ""
    """How it ended or paused, in its own words."""
    project: str | None = None
    graph_path: str | None = None
    """The graph file it ran, when it ran from one."""
    host: str | None = None
    """Where it runs: the host (and process) that drives it now, as its lease says in a
    database; else the host that took it on last (None in logs that did not say)."""

    @property
    def for_a_person(self) -> bool:
        """Whether a person must answer before the plan goes on."""
        return self.status in PERSON_STATUSES


def summarize(
    plan_id: str,
    events: Sequence[Event],
    *,
    running: bool | None = None,
    driver: str | None = None,
) -> PlanSummary | None:
    """The summary of one plan from its events (None without a ``plan_started``: a run of
    the engine alone, ``gategraph execute``, is not a plan). ``running`` says whether a
    supervisor holds the plan now (None: not known), ``driver`` where it runs."""
    started = next((e for e in events if isinstance(e, PlanStarted)), None)
    if started is None:
        return None
    rounds = sum(1 for e in events if isinstance(e, ArtifactValidationStarted))
    last = events[-1]
    status, waiting, message = _where(events, last, running)
    return PlanSummary(
        plan_id=plan_id,
        name=started.graph,
        status=status,
        rounds=rounds,
        started_at=events[0].at,
        last_at=last.at,
        waiting_for=waiting,
        message=message,
        project=started.project,
        graph_path=started.graph_path,
        host=driver or _last_host(events),
    )


def _last_host(events: Sequence[Event]) -> str | None:
    """The host that took the plan on last (its start, or its latest resumption)."""
    for event in reversed(events):
        if isinstance(event, PlanStarted | PlanResumed) and event.host:
            return event.host
    return None


def _where(
    events: Sequence[Event], last: Event, running: bool | None
) -> tuple[str, str | None, str]:
    """The plan's status, what it waits for and its message."""
    if not isinstance(last, PlanFinished):
        if running is False:
            return INTERRUPTED, None, "its run stopped before it finished: resume it"
        return RUNNING, None, ""
    status = last.status
    if status == "awaiting_approval":
        asked = _last(events, ApprovalRequired)
        tier = f" (tier {asked.tier})" if asked is not None else ""
        return status, f"a person's approval{tier}", last.message
    if status == "awaiting_decision":
        escalated = _last(events, EscalationRequested)
        why = f" ({escalated.reason})" if escalated is not None else ""
        return status, f"a person's decision{why}", last.message
    if status == "awaiting_attestation":
        required = _last(events, AttestationRequired)
        count = required.needed if required is not None else 0
        who = f"{count} outside validator{'s' if count != 1 else ''}"
        return status, who, last.message
    return status, None, last.message


_E = TypeVar("_E")


def _last(events: Sequence[Event], kind: type[_E]) -> _E | None:
    for event in reversed(events):
        if isinstance(event, kind):
            return event
    return None


def order(summaries: Iterable[PlanSummary]) -> list[PlanSummary]:
    """Those waiting for a person first, then the other paused and unfinished ones, then
    the rest; newest first within each."""

    def rank(summary: PlanSummary) -> int:
        if summary.for_a_person:
            return 0
        if summary.status in ("awaiting_attestation", RUNNING, INTERRUPTED):
            return 1
        return 2

    return sorted(summaries, key=lambda s: (rank(s), -s.last_at))


def plan_summaries(log_path: str | os.PathLike[str]) -> list[PlanSummary]:
    """Every plan of the event log at ``log_path`` (a SQLite file or a PostgreSQL URL), in
    :func:`order` (none when there is no log yet). In a database, a plan a process drives
    now says where that process runs (``driver``)."""
    from gategraph.runtime._storage._database import drivers_at, log_where, plans_with_events

    where = log_where(log_path)
    every = plans_with_events(where)
    drivers = drivers_at(where, [plan_id for plan_id, _ in every])
    held = _held_leases(Path(where)) if drivers is None else None
    found = []
    for plan_id, events in every:
        if drivers is not None:
            summary = summarize(
                plan_id, events, running=plan_id in drivers, driver=drivers.get(plan_id)
            )
        else:
            running = None if held is None else _lease_name(plan_id) in held
            summary = summarize(plan_id, events, running=running)
        if summary is not None:
            found.append(summary)
    return order(found)


def held_lease(log_path: str | os.PathLike[str], plan_id: str) -> bool | None:
    """Whether a supervisor holds plan ``plan_id`` of the log now (None: not known here)."""
    from gategraph.runtime._storage._database import drivers_at, log_where

    where = log_where(log_path)
    drivers = drivers_at(where, [plan_id])
    if drivers is not None:
        return plan_id in drivers
    held = _held_leases(Path(where))
    return None if held is None else _lease_name(plan_id) in held


def _lease_name(plan_id: str) -> str:
    # As SQLiteEventLog.lease names the file: a digest, so any plan id is a safe name.
    return hashlib.sha256(plan_id.encode()).hexdigest()[:32]


def _held_leases(log_path: Path) -> set[str] | None:
    """The names of the lease files someone holds now, read from the kernel's table of
    locks without taking one (taking it, even briefly, could turn a supervisor away);
    None where that table cannot be read (not Linux)."""
    folder = Path(f"{log_path}.locks")
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            locks = table.read().splitlines()
    except OSError:
        return None
    if not folder.is_dir():
        return set()
    held: set[str] = set()
    inodes: dict[str, str] = {}
    for entry in os.scandir(folder):
        info = entry.stat(follow_symlinks=False)
        key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
        inodes[key] = entry.name
    for line in locks:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234567 0 EOF" (a blocked waiter: "->").
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] in inodes:
            held.add(inodes[parts[5]])
    return held


async def list_plans(
    event_log: EventLog | str | os.PathLike[str] | None = None,
    *,
    status: str | Iterable[str] | None = None,
    name: str | None = None,
) -> list[PlanSummary]:
    """The plans of an event log, each with its status, rounds and what it waits for, as
    ``gategraph plans`` lists them: those waiting for a person first, then the other
    paused and unfinished ones, then the rest, newest first in each.

    ``event_log`` is an event log (``MemoryEventLog``, an open ``SQLiteEventLog``), the
    path of a SQLite event log file, a PostgreSQL URL, or None for the default one
    (``events.db`` in ``GATEGRAPH_HOME``). ``status`` keeps only plans with that status (or those statuses);
    ``name`` only those whose graph name matches the glob. A run of the engine alone
    (``execute_graph``, ``validate``) is no plan, and is not listed. Whether an unfinished
    plan is ``running`` or ``interrupted`` is known for a log file on Linux (its lease is
    read, never taken); elsewhere it is ``running``.
    """
    import anyio.to_thread

    known = {s.value for s in PlanStatus} | {RUNNING, INTERRUPTED}
    asked = {status} if isinstance(status, str) else set(status or ())
    unknown = sorted(asked - known)
    if unknown:
        raise ValueError(
            f"no plan has the status {unknown[0]!r}: the statuses are {', '.join(sorted(known))}"
        )
    if event_log is None or isinstance(event_log, str | os.PathLike):
        from gategraph.runtime._storage._database import log_where
        from gategraph.runtime._storage._eventlog import default_event_log_path

        where = log_where(event_log) if event_log is not None else default_event_log_path()
        found = await anyio.to_thread.run_sync(plan_summaries, where)
    else:
        log_path = getattr(event_log, "path", None)
        held = _held_leases(Path(log_path)) if isinstance(log_path, str | os.PathLike) else None
        found = []
        for plan_id in await event_log.plans():
            events = await event_log.read(plan_id)
            running = None if held is None else _lease_name(plan_id) in held
            summary = summarize(plan_id, events, running=running)
            if summary is not None:
                found.append(summary)
        found = order(found)
    return select(found, status=status, name=name)


def select(
    summaries: Iterable[PlanSummary],
    *,
    status: str | Iterable[str] | None = None,
    name: str | None = None,
) -> list[PlanSummary]:
    """The summaries with ``status`` (one, or any of several) whose graph name matches the
    glob ``name``; None keeps every one."""
    import fnmatch

    wanted = {status} if isinstance(status, str) else set(status) if status is not None else None
    return [
        s
        for s in summaries
        if (wanted is None or s.status in wanted)
        and (name is None or fnmatch.fnmatchcase(s.name, name))
    ]


def list_plans_sync(
    event_log: EventLog | str | os.PathLike[str] | None = None,
    *,
    status: str | Iterable[str] | None = None,
    name: str | None = None,
) -> list[PlanSummary]:
    """:func:`list_plans` for code without an event loop."""
    from gategraph.runtime._running._sync import run_sync

    return run_sync(list_plans, event_log, status=status, name=name)
