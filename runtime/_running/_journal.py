"""A plan's place in its event log, live or replayed.

Every step of the supervisor goes through a :class:`PlanJournal`. A fresh plan's journal
appends each event. A resumed plan's journal starts with the plan's recorded events and
walks them in step with the supervisor, which runs its lifecycle again from the start:
each decision the supervisor makes is checked against the event the log holds for it
(so a graph or catalog changed since the plan ran is caught, not silently followed), and
each result of the outside world — a strategy, an artifact, a validation's result, a
person's answer — is read from the log instead of being produced again. Where the log
ends, the journal turns live: it appends a ``plan_resumed`` event, and from there on the
plan runs as any other. This is how a resumed plan never re-runs a validation that
completed, and never applies twice (seed 002 §13: history decides, not re-execution).
"""

from __future__ import annotations

import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import msgspec
from gategraph.runtime._base._exceptions import ResumeError
from gategraph.runtime._base._ids import new_ulid
from gategraph.runtime._data._events import Event, EventBase, PlanResumed

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from gategraph.runtime._storage._eventlog import EventLog

    from ._engine import GraphRun, NodeResult
    from ._pipeline import ValidationOutcome

__all__ = ["ENGINE_TAGS", "PASSING_TAGS", "PlanJournal", "event_tag", "steps_of"]

ENGINE_TAGS: Final = frozenset(
    {
        "run_started",
        "run_finished",
        "node_started",
        "node_completed",
        "node_skipped",
        "validation_started",
        "validation_completed",
        "artifact_produced",
    }
)
"""Events of the engine (a work phase's or a semantic layer's run), not of the supervisor."""

# Fields a recorded decision is not compared on: when it happened, envelopes that carry
# their own timestamps (their findings are compared through the reasons beside them), and
# where the graph file was (its content is compared, by digest), and the digests of a
# round's inputs (facts of the files, read again where the plan goes on).
_VOLATILE: Final = frozenset(
    {
        "id",
        "seq",
        "at",
        "causation_id",
        "verdict",
        "graph_path",
        "inputs",
        "bases",
        "exclusions",
        "sandboxes",
        "seconds",
        "host",
    }
)
"""Fields that say where and when, not what was decided: a replay elsewhere, or a resume on
another host, records other values for them."""
PASSING_TAGS: Final = frozenset({"plan_resumed"})
"""Recorded events the journal steps over wherever they are: markers, not decisions."""
_NOT_STEPS: Final = ENGINE_TAGS | PASSING_TAGS


def event_tag(event: EventBase) -> str:
    """An event's ``type`` tag (``plan_started``, ``validation_completed`` ...)."""
    return str(type(event).__struct_config__.tag)


def steps_of(events: Iterable[Event]) -> list[Event]:
    """The supervisor's steps among ``events``, in seq order: no engine events, no markers."""
    return [e for e in sorted(events, key=lambda e: e.seq) if event_tag(e) not in _NOT_STEPS]


class PlanJournal:
    """Where a plan's next event goes, what caused it, and (when resuming) what the log
    already holds for the steps ahead.

    Execution actors get one in their request (``request.journal``): a work phase run with
    :func:`execute_graph` logs into the plan's own sequence with :meth:`engine_arguments`
    and :meth:`advance`.

    A replay's journal (``_replay.ReplayJournal``) is one that never turns live: the same
    supervisor runs against it, and the hooks below (identities here) are where it compares
    and reports instead of going on.
    """

    offline: bool = False
    """True for a journal that never appends (a replay): where the log ends, the plan ends."""

    def __init__(
        self, log: EventLog, plan_id: str, recorded: Iterable[Event] = (), *, reason: str = ""
    ) -> None:
        self.log = log
        """The plan's event log."""
        self.plan_id = plan_id
        self.seq = 0
        """The seq of the last event (recorded or appended)."""
        self.last_event = ""
        """The id of the last event: the cause of the next one."""
        self.last_at = 0.0
        """When the last event happened (seconds since the epoch)."""
        self._recorded: deque[Event] = deque(sorted(recorded, key=lambda e: e.seq))
        self.replaying = bool(self._recorded)
        """True while the journal walks recorded events; False once it appends."""
        self.resumed = self.replaying
        """True for a journal that started from a log (a resumed plan)."""
        self.reason = reason or "crashed"
        """Why the plan resumes, for the ``plan_resumed`` event."""

    # -- appending -------------------------------------------------------------------------

    async def emit(self, event_type: type[EventBase], **fields: Any) -> str:
        """Record a decision: append it, or, while replaying, check it against the log.

        Returns the event's id. Raises :class:`ResumeError` when the log holds a different
        decision at this point.
        """
        if self.replaying:
            recorded = self._next_step()
            if recorded is not None:
                self._check(recorded, event_type, fields)
                self._recorded.popleft()
                self._advance(recorded)
                return recorded.id
            await self.go_live()
        return await self._append(event_type, **fields)

    async def _append(self, event_type: type[EventBase], **fields: Any) -> str:
        self.seq += 1
        event_id = new_ulid()
        at = time.time()
        event = event_type(
            id=event_id,
            plan_id=self.plan_id,
            seq=self.seq,
            at=at,
            causation_id=self.last_event or None,
            **fields,
        )
        await self.log.append(event)
        self.last_event = event_id
        self.last_at = at
        return event_id

    def engine_arguments(self) -> dict[str, Any]:
        """What :func:`execute_graph` needs to log a run into this plan's sequence."""
        return {
            "event_log": self.log,
            "plan_id": self.plan_id,
            "first_seq": self.seq + 1,
            "causation_id": self.last_event or None,
        }

    def advance(self, run: GraphRun) -> None:
        """Continue after a run that :meth:`engine_arguments` logged into this plan."""
        self.seq = max(self.seq, run.last_seq)

    # -- replaying -------------------------------------------------------------------------

    def take(self, tag: str, **expect: Any) -> Any:
        """The recorded result of a step (``strategy_produced``, ``work_finished`` ...) if
        the log's next step is one, consumed; else None (the step must run). ``expect``
        are fields it must have (a different value is a :class:`ResumeError`)."""
        if not self.replaying:
            return None
        recorded = self._next_step()
        if recorded is None or event_tag(recorded) != tag:
            return None
        type_ = type(recorded)
        self._check(recorded, type_, expect)
        self._recorded.popleft()
        self._advance(recorded)
        return recorded

    def peek(self) -> Event | None:
        """The log's next recorded step (not consumed), or None where the log ends."""
        return self._next_step() if self.replaying else None

    @property
    def recorded_ahead(self) -> bool:
        """Whether the log holds the next step: what leads to it (an audit line, a backoff)
        happened already, when it was recorded."""
        return self.peek() is not None

    def peek_after(self) -> Event | None:
        """The recorded step after the next one (not consumed)."""
        steps = [e for e in self._recorded if event_tag(e) not in _NOT_STEPS]
        return steps[1] if len(steps) > 1 else None

    def engine_events(self) -> list[Event]:
        """The recorded engine events up to the next step, consumed: a round's fan-out (or
        what of it completed before a crash)."""
        found: list[Event] = []
        while self._recorded:
            tag = event_tag(self._recorded[0])
            if tag not in _NOT_STEPS:
                break
            event = self._recorded.popleft()
            self._advance(event)
            if tag in ENGINE_TAGS:
                found.append(event)
        return found

    async def go_live(self) -> None:
        """Stop replaying: the log holds no more steps. Appends ``plan_resumed``."""
        if not self.replaying:
            return
        # What is left are engine events no step finished (a crashed run's partial events):
        # they stay in the log; the plan continues after them.
        for event in self._recorded:
            assert event_tag(event) in _NOT_STEPS, event
            self._advance(event)
        self._recorded.clear()
        self.replaying = False
        await self._append(
            PlanResumed, after_seq=self.seq, reason=self.reason, host=socket.gethostname()
        )

    # -- where a replay compares (identities for a plan that runs) -------------------------

    def settle(
        self, layer: str, outcome: ValidationOutcome, artifact: Any, round_number: int
    ) -> ValidationOutcome:
        """The outcome of pipeline layer ``layer`` the plan goes on with: its own."""
        return outcome

    def approval(self, outcome: ValidationOutcome) -> ValidationOutcome:
        """The approval layer's outcome the plan goes on with: the one it derived."""
        return outcome

    def check_round(
        self,
        round_number: int,
        events: Sequence[Event],
        done: Mapping[str, NodeResult],
        select: Sequence[str],
        modes: Mapping[str, str],
        *,
        retry: bool,
    ) -> None:
        """Look over a round's recorded fan-out (``events``, whose results are ``done``)
        before its results are used; ``select`` is what the round runs."""

    def differs(self, recorded: Event, expected: str, logged: str) -> None:
        """The log holds ``logged`` at ``recorded`` where the plan now has ``expected``:
        raises :class:`ResumeError`."""
        raise self._diverged(recorded, logged, expected)

    def _next_step(self) -> Event | None:
        """Skip recorded engine events (a work phase's run) to the next supervisor step."""
        while self._recorded:
            event = self._recorded[0]
            if event_tag(event) not in _NOT_STEPS:
                return event
            self._recorded.popleft()
            self._advance(event)
        return None

    def _advance(self, event: EventBase) -> None:
        self.seq = max(self.seq, event.seq)
        self.last_event = event.id
        self.last_at = event.at

    def _check(
        self, recorded: Event, event_type: type[EventBase], fields: Mapping[str, Any]
    ) -> None:
        want = str(event_type.__struct_config__.tag)
        got = event_tag(recorded)
        if want != got:
            raise self._diverged(recorded, got, want)
        logged = msgspec.structs.asdict(recorded)
        for name, value in fields.items():
            if name in _VOLATILE:
                continue
            if msgspec.to_builtins(logged.get(name)) != msgspec.to_builtins(value):
                raise self._diverged(
                    recorded, f"{got} {name}={logged.get(name)!r}", f"{want} {name}={value!r}"
                )

    def _diverged(self, recorded: Event, logged: str, now: str) -> ResumeError:
        return ResumeError(
            f"cannot resume plan {self.plan_id}: at seq {recorded.seq} the log has "
            f"{_short(logged)}, but the plan now decides {_short(now)}; the graph, the "
            "catalog or a validation changed since the plan ran"
        )


def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
