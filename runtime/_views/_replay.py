"""Replay: the supervisor run against a plan's event log, running nothing.

Seed 002 §13: during replay, validation outcomes are read from events, never re-executed,
so the pipeline's decision is deterministic from history (§5.3). :func:`replay_plan` runs
the plan's own :class:`Supervisor` — the one state machine of the lifecycle — with a
:class:`ReplayJournal`, a journal that never turns live:

* every fact is read from the log: strategies, artifacts, each validation's result, a
  person's answers, what the approval layer decided;
* every decision the supervisor takes is compared with the one the log records — a
  round's outcome and verdict, each Max-N decision, each rung of the failure ladder,
  Apply — and a difference is reported with its seq, both sides, and the plan goes on as
  the log does (so one tampered event is one line);
* where the supervisor would have to run something the log does not hold (a validation,
  an actor, a person), the replay stops there: a log that ends is a plan running or
  crashed, a log that holds something else has diverged.

Nothing runs: the journal never turns live, so no validation, actor, resource or file is
reached; the lifecycle's coroutine is stepped to its end without an event loop.

What the log does not hold the inputs of is taken from it, and the report says so:
routing rejections of validations that could not be prepared, payload rejections of an
artifact that was not JSON, and a person's answers (seed 002 §19: a replay never asks
again). The approval layer is derived from the graph's policy and the run's recorded
``auto_approve``, as the run derived it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

import msgspec
from gategraph.runtime._base._exceptions import CatalogError
from gategraph.runtime._base._protocols import Applicable
from gategraph.runtime._data._events import (
    ApprovalRequired,
    ArtifactRejected,
    Event,
    EventBase,
    NodeCompleted,
    NodeSkipped,
    PlanResumed,
    PlanStarted,
    ValidationCompleted,
    ValidationStarted,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._data._models import Validation, ValidationMode
from gategraph.runtime._running._journal import ENGINE_TAGS, PlanJournal, event_tag
from gategraph.runtime._running._pipeline import (
    ATTACHMENT,
    LAYERS,
    NeedsApproval,
    Passed,
    Reason,
    Rejected,
    ValidationOutcome,
    applicable_validations,
    payload_reason,
    routing_reason,
)
from gategraph.runtime._storage._resources import MemoryResource

if TYPE_CHECKING:
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._lifecycle._supervisor import PlanOutcome
    from gategraph.runtime._running._engine import NodeResult

__all__ = ["ReplayJournal", "ReplayReport", "graph_applicable", "replay_plan"]


class ReplayReport(msgspec.Struct, kw_only=True):
    """What a replay found: whether every decision the log records follows from its facts."""

    plan_id: str
    matches: bool
    """True when no decision, outcome or transition differs from what the log says."""
    events: int = 0
    """Events replayed."""
    rounds: int = 0
    """Validation rounds (``artifact_validation_started``) replayed."""
    decisions_checked: int = 0
    """Round outcomes, Max-N decisions and ladder transitions compared with the log."""
    mismatches: list[str] = msgspec.field(default_factory=list)
    """One line each, in ``seq`` order: ``seq N (event type): expected X, log says Y``."""
    notes: list[str] = msgspec.field(default_factory=list)
    """What was taken from the log as given, and anything else worth knowing."""


def graph_applicable(graph: PlanGraph) -> list[Applicable]:
    """The graph's validation nodes as :class:`Applicable` (mode, bound criteria)."""
    return applicable_validations(graph, None, "")


_NOTE_ROUTING: Final = (
    "routing rejections for validations that could not be prepared are taken from the log "
    "(what could be prepared then is not recorded)"
)
_NOTE_PAYLOAD: Final = (
    "payload rejections of an artifact that was not JSON are taken from the log (such an "
    "artifact is not recorded)"
)
_NOTE_PERSON: Final = "a person's escalation decisions are taken from the log"
_NOTE_APPROVER: Final = "a person's approval decisions are taken from the log"
_NOTE_BACKOFF: Final = "the waits before validator re-runs are not logged, so not checked"
_ROUND_ENDS: Final = frozenset({"artifact_rejected", "artifact_validated", "approval_required"})
_PAUSED: Final = {
    "awaiting_approval": "paused for approval",
    "awaiting_decision": "paused for a decision",
    "awaiting_attestation": "paused for outside validators' attestations",
}

# What a replay compares of each decision the supervisor logs (the rest of an event is a
# fact, or says when). The field's text in a mismatch line is ``name value``.
_COMPARED: Final[Mapping[str, tuple[str, ...]]] = {
    "strategy_produced": ("revision",),
    "work_finished": ("attempt",),
    "artifact_rejected": ("round",),
    "artifact_validated": ("round",),
    "approval_required": ("round",),
    "confirmation_started": ("round", "nodes"),
    "fix_requested": ("attempt", "note"),
    "strategy_revision_requested": ("revision",),
    "escalation_requested": ("reason",),
    "attestation_required": ("round", "needed", "criteria", "policy"),
    "attestations_received": ("round", "policy"),
    "plan_finished": ("status",),
}
_DECISION_FIELDS: Final = (
    "decision",
    "fault_kind",
    "classification",
    "budget_used",
    "budget_limit",
    "round",
    "attempt",
)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _findings(
    verdict: Mapping[str, Any] | None, keys: Mapping[str, str]
) -> tuple[Any, list[tuple[str, str]]]:
    """The verdict and its findings, each criterion named by its key in the graph (a log
    written before criteria had ids names them so: it replays all the same)."""
    if not verdict:
        return None, []
    findings = verdict.get("findings") or []
    return verdict.get("verdict"), sorted(
        (keys.get(str(f.get("acId")), str(f.get("acId"))), str(f.get("status")))
        for f in findings
        if isinstance(f, Mapping)
    )


def _verdict_text(kind: Any, findings: list[tuple[str, str]]) -> str:
    if kind is None:
        return "no verdict"
    shown = ", ".join(f"{ac} {status}" for ac, status in findings)
    return f"verdict {kind} ({shown})"


def _logged_reasons(layer: str, texts: Sequence[str]) -> tuple[Reason, ...]:
    """Reasons of a routing, payload or approval rejection, rebuilt from their text.

    Only whether a routing reason names a node matters (the execution actor's failure
    names none); node ids cannot contain spaces, so the text tells them apart.
    """
    if layer == "routing":
        return tuple(routing_reason(text) for text in texts)
    if layer == "payload":
        return tuple(payload_reason(text) for text in texts)
    return tuple(Reason(layer=layer, message=text.removeprefix(f"{layer}: ")) for text in texts)


def _approval_text(outcome: ValidationOutcome) -> str:
    if isinstance(outcome, NeedsApproval):
        return f"approval_required ({outcome.message})"
    if isinstance(outcome, Rejected):
        return "artifact_rejected at the approval layer: " + _short(_reasons_text(outcome), 120)
    return "the approval layer to pass"


def _reasons_text(outcome: ValidationOutcome) -> str:
    return "; ".join(str(r) for r in outcome.reasons) if isinstance(outcome, Rejected) else ""


class _LogEnds(Exception):
    """The supervisor needs a step the log does not hold, and the log holds no more."""


class _Diverged(Exception):
    """The supervisor needs a step (``wanted``) where the log holds another (``recorded``)."""

    def __init__(self, recorded: Event, wanted: str) -> None:
        super().__init__(wanted)
        self.recorded = recorded
        self.wanted = wanted


class _Nobody:
    """The actors of a replay: never called, since a replay's journal never turns live."""

    async def _never(self, request: Any) -> NoReturn:  # pragma: no cover
        raise AssertionError("a replay calls no actor")

    strategize = execute = fix = escalate = _never


async def _no_wait(seconds: float) -> None:
    """A replay does not wait out the backoffs the run waited."""


class ReplayJournal(PlanJournal):
    """A plan's recorded events, walked by the supervisor with nothing appended and nothing
    run: each difference between what the supervisor decides and what the log says is
    recorded (``found``), and the plan goes on as the log does."""

    offline = True

    def __init__(self, plan_id: str, recorded: Sequence[Event], graph: PlanGraph) -> None:
        from gategraph.runtime._storage._eventlog import MemoryEventLog

        super().__init__(MemoryEventLog(), plan_id, recorded)
        self.replaying = True  # also for a log with no step: where it ends, the plan ends
        self.graph = graph
        self.found: list[tuple[int, int, str]] = []
        """(seq, order, line) of each mismatch."""
        self.notes: list[str] = []
        self.decisions = 0
        """Decisions of the supervisor compared with the log."""
        self.criterion_keys: Mapping[str, str] = {}
        """The plan's acceptance criteria's keys in the graph, by id."""
        self._flagged = False
        """Whether the engine events before the round's outcome were reported already."""
        self.ended_early = False
        """Whether the plan ended where the log goes on (its plan_finished missing)."""
        self._wanted = ""
        self._end: tuple[int, Event | None, str | None, Event | None] | None = None
        self._gate_checked = False
        self._none_ran = False
        self._round_failing: str | None = None
        self._last_round: tuple[int, bool, str] | None = None
        """The last round: its number, whether it passed as replayed, and why not."""

    # -- reporting ------------------------------------------------------------------------

    def mismatch(self, event: EventBase, expected: str, found: str) -> None:
        """Record one line: ``seq N (tag): expected X, log says Y``."""
        line = f"seq {event.seq} ({event_tag(event)}): expected {expected}, log says {found}"
        self.found.append((event.seq, len(self.found), line))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def differs(self, recorded: Event, expected: str, logged: str) -> None:
        self.mismatch(recorded, expected, logged)

    def _next_step(self) -> Event | None:
        """The next step, as for a resumed plan; an engine event skipped on the way is one
        no run accounts for (the work's own are before its ``work_finished``)."""
        while self._recorded:
            event = self._recorded[0]
            tag = event_tag(event)
            if tag not in ENGINE_TAGS and not isinstance(event, PlanResumed):
                return event
            self._recorded.popleft()
            self._advance(event)
            if tag in ENGINE_TAGS and self._wanted != "work_finished" and not self._flagged:
                self.mismatch(event, f"{self._wanted or 'a step'} (no run is under way)", tag)
        return None

    def leftovers(self) -> list[Event]:
        """What the log holds that the supervisor never reached (markers aside)."""
        return [e for e in self._recorded if not isinstance(e, PlanResumed)]

    # -- the supervisor's steps -----------------------------------------------------------

    async def emit(self, event_type: type[EventBase], **fields: Any) -> str:
        want = str(event_type.__struct_config__.tag)
        self._wanted = want
        while True:
            recorded = self._next_step()
            if recorded is None:
                raise _LogEnds
            got = event_tag(recorded)
            if got == want:
                break
            if want == "plan_finished" and any(event_tag(e) == want for e in self._recorded):
                # The plan ends here; the log goes on to its end: all that is out of place.
                while event_tag(self._recorded[0]) != want:
                    extra = self._recorded.popleft()
                    self._advance(extra)
                    if not isinstance(extra, PlanResumed):
                        self.mismatch(extra, want, event_tag(extra))
                continue
            after = self.peek_after()
            if after is not None and event_tag(after) == want:
                # Out of place: the step the supervisor takes comes right after it.
                self.mismatch(recorded, self._instead(got, want), got)
                self._recorded.popleft()
                self._advance(recorded)
                continue
            # Missing: the supervisor goes on as if the log held it.
            self.decisions += 1
            if want == "plan_finished":
                self.ended_early = True  # what the log holds after this is out of place
            else:
                self.mismatch(recorded, self._expected(want), f"{got} ({want} is missing)")
            return ""
        self.decisions += 1
        self._compare(recorded, want, fields)
        self._recorded.popleft()
        self._advance(recorded)
        return recorded.id

    def take(self, tag: str, **expect: Any) -> Any:
        self._wanted = tag
        recorded = super().take(tag, **expect)
        if recorded is not None:
            self.decisions += 1
            if tag == "escalation_decided":
                self.note(_NOTE_PERSON)
            elif tag == "approval_decided":
                self.note(_NOTE_APPROVER)
        return recorded

    async def go_live(self) -> None:
        recorded = self._next_step()
        if recorded is None:
            raise _LogEnds
        raise _Diverged(recorded, self._wanted)

    def _check(
        self, recorded: Event, event_type: type[EventBase], fields: Mapping[str, Any]
    ) -> None:
        logged = msgspec.structs.asdict(recorded)
        for name, value in fields.items():
            if logged.get(name) != value:
                self.mismatch(recorded, f"{name} {value!r}", f"{name} {logged.get(name)!r}")

    def _expected(self, want: str) -> str:
        return f"{want} (the round's outcome)" if want in _ROUND_ENDS else want

    def _instead(self, got: str, want: str) -> str:
        """What the log should show instead of ``got``, where the supervisor takes ``want``."""
        if got != "apply_started":
            return self._expected(want)
        why = "no round has ended yet"
        if self._last_round is not None:
            number, passed, failing = self._last_round
            why = (
                f"round {number} was rejected: {_short(failing, 100)}"
                if not passed
                else f"round {number} passed, but {want} comes first"
            )
        return (
            "no apply_started: Apply follows only an artifact_validated round with no "
            f"required validation failing, and {why}"
        )

    def _compare(self, recorded: Event, tag: str, fields: Mapping[str, Any]) -> None:
        """Compare the decision the supervisor logs now with the recorded one."""
        if tag == "plan_started":
            want = (fields["graph"], fields["project"])
            got = (getattr(recorded, "graph", None), getattr(recorded, "project", None))
            if want != got:
                self.mismatch(
                    recorded,
                    "graph {!r} (project {!r})".format(*want),
                    "graph {!r} (project {!r})".format(*got),
                )
            return
        if tag == "artifact_validation_started":
            names = ("round", "attempt", "revision")
            now = [fields[name] for name in names]
            then = [getattr(recorded, name) for name in names]
            if now != then:
                text = "round {}, attempt {}, revision {}"
                self.mismatch(recorded, text.format(*now), text.format(*then))
            return
        if tag == "retry_decided":
            differ = [n for n in _DECISION_FIELDS if fields[n] != getattr(recorded, n)]
            if differ:
                self.mismatch(
                    recorded,
                    " ".join(f"{n}={fields[n]}" for n in differ),
                    " ".join(f"{n}={getattr(recorded, n)}" for n in differ),
                )
            if fields["decision"] == "retry-validator":
                self.note(_NOTE_BACKOFF)
            return
        if tag == "apply_started":
            if self._last_round is not None and not self._last_round[1]:
                number, _, failing = self._last_round
                self.mismatch(
                    recorded,
                    f"no Apply: a required validation is failing in round {number} "
                    f"({_short(failing, 100)})",
                    "apply_started",
                )
            logged = sorted(getattr(recorded, "resources", ()))
            if fields["resources"] != logged:
                self.mismatch(recorded, f"resources {fields['resources']}", f"resources {logged}")
            return
        for name in _COMPARED.get(tag, ()):
            value, logged_value = fields.get(name), getattr(recorded, name, None)
            if value != logged_value:
                self.mismatch(recorded, f"{name} {value!r}", f"{name} {logged_value!r}")
        verdict = fields.get("verdict")
        if tag in ("artifact_rejected", "artifact_validated") and verdict and not self._none_ran:
            want_findings = _findings(verdict, self.criterion_keys)
            logged_verdict = getattr(recorded, "verdict", None)
            got_findings = _findings(
                logged_verdict if isinstance(logged_verdict, Mapping) else None,
                self.criterion_keys,
            )
            if want_findings != got_findings:
                self.mismatch(recorded, _verdict_text(*want_findings), _verdict_text(*got_findings))

    # -- a round --------------------------------------------------------------------------

    def _round_end(self, round_number: int) -> tuple[Event | None, str | None, Event | None]:
        """The round's recorded outcome (not consumed): the event (None if the log's next
        step is not one), the layer it names, and the first engine event before it."""
        if self._end is None or self._end[0] != round_number:
            end: Event | None = None
            first_engine: Event | None = None
            for event in self._recorded:
                tag = event_tag(event)
                if isinstance(event, PlanResumed) or tag == "confirmation_started":
                    continue  # within the round
                if tag in _ROUND_ENDS:
                    end = event
                    break
                if tag.startswith(("node_", "validation_", "run_", "artifact_produced")):
                    first_engine = first_engine or event
                    continue
                break
            layer = end.layer if isinstance(end, ArtifactRejected) else None
            if isinstance(end, ArtifactRejected) and layer not in LAYERS:
                self.mismatch(end, "a layer of " + ", ".join(LAYERS), f"layer {layer!r}")
                layer = "payload"
            self._end = (round_number, end, layer, first_engine)
        _, end, layer, first_engine = self._end
        return end, layer, first_engine

    def settle(
        self, layer: str, outcome: ValidationOutcome, artifact: Any, round_number: int
    ) -> ValidationOutcome:
        """Compare a layer's outcome with the round's recorded one, and go on with the
        log's: a rejection where the log has one, else the supervisor's own."""
        if layer == LAYERS[0]:
            self._gate_checked = False
            self._flagged = False
            self._round_failing = None
        end, logged_layer, first_engine = self._round_end(round_number)
        settled = outcome
        if end is not None:
            if layer in ("routing", "payload"):
                settled = self._gate(layer, outcome, artifact, end, logged_layer, first_engine)
            elif layer == "semantic":
                settled = self._semantic(outcome, end, logged_layer)
        if isinstance(outcome, Rejected) and self._round_failing is None:
            self._round_failing = _reasons_text(outcome)
        failing = self._round_failing
        self._last_round = (
            round_number,
            failing is None,
            failing if failing is not None else _reasons_text(settled),
        )
        return settled

    def _gate(
        self,
        layer: str,
        outcome: ValidationOutcome,
        artifact: Any,
        end: Event,
        logged_layer: str | None,
        first_engine: Event | None,
    ) -> ValidationOutcome:
        """Routing and payload: re-derived from the recorded artifact where the log has it."""
        if self._gate_checked:
            return outcome
        rejected = isinstance(outcome, Rejected)
        stub = isinstance(artifact, Mapping) and set(artifact) == {"unencodable", "repr"}
        logged = list(end.reasons) if isinstance(end, ArtifactRejected) else []
        at_gate = logged_layer in ("routing", "payload")
        if layer == "routing" and not rejected:
            if logged_layer != "routing":
                return outcome  # compared at the payload layer
            # A validation that could not be prepared: its inputs are not in the log.
            self._gate_checked = True
            self.note(_NOTE_ROUTING)
            return self._gate_rejection(end, logged_layer, logged, first_engine)
        self._gate_checked = True
        if layer == "payload" and stub:
            if logged_layer == "payload":
                self.note(_NOTE_PAYLOAD)
                return self._gate_rejection(end, logged_layer, logged, first_engine)
            return Passed()
        want = _reasons_text(outcome)
        if at_gate:
            assert logged_layer is not None
            mine = [str(r) for r in outcome.reasons] if isinstance(outcome, Rejected) else []
            if (layer if rejected else "", mine) != (logged_layer, logged):
                self.mismatch(
                    end,
                    f"{layer} rejection: {_short(want, 100)}"
                    if rejected
                    else "the artifact to pass routing and payload",
                    f"{logged_layer} rejection: " + _short("; ".join(logged), 100),
                )
            return self._gate_rejection(end, logged_layer, logged, first_engine)
        if rejected:
            self.mismatch(
                end,
                f"a {layer} rejection: {_short(want, 100)}",
                f"{event_tag(end)} (the round went past the {layer} layer)",
            )
        return Passed()

    def _gate_rejection(
        self, end: Event, layer: str, logged: list[str], first_engine: Event | None
    ) -> Rejected:
        """The log's routing or payload rejection, which no validation may follow."""
        if first_engine is not None:
            self._flagged = True
            self.mismatch(
                end,
                f"no validation in round {getattr(end, 'round', '?')} (the {layer} layer "
                "rejects before the semantic layer runs)",
                f"the semantic layer ran from seq {first_engine.seq}",
            )
        return Rejected(layer, _logged_reasons(layer, logged))

    def _semantic(
        self, outcome: ValidationOutcome, end: Event, logged_layer: str | None
    ) -> ValidationOutcome:
        """The semantic layer: re-derived from the round's recorded results."""
        if self._none_ran:
            outcome = Passed()
        failing = _reasons_text(outcome)
        if isinstance(end, ArtifactRejected) and logged_layer == "semantic":
            if not isinstance(outcome, Rejected):
                self.mismatch(
                    end,
                    "the round to pass the semantic layer (every required validation ran "
                    "and passed)",
                    "artifact_rejected at the semantic layer: "
                    + _short("; ".join(end.reasons), 120),
                )
                return Rejected("semantic", ())
            if sorted(str(r) for r in outcome.reasons) != sorted(end.reasons):
                self.mismatch(
                    end,
                    "reasons " + _short(failing, 120),
                    "reasons " + _short("; ".join(end.reasons), 120),
                )
            return outcome
        if isinstance(outcome, Rejected):
            # The log went past the semantic layer: so does the replay.
            self.mismatch(
                end,
                "artifact_rejected at the semantic layer: " + _short(failing, 120),
                event_tag(end) + ("" if logged_layer is None else f" at the {logged_layer} layer"),
            )
            return Passed()
        return outcome

    def approval(self, outcome: ValidationOutcome) -> ValidationOutcome:
        """The approval layer, derived from the graph's policy and the run's recorded
        ``auto_approve`` as the run derived it, and compared with the round's outcome."""
        end = next((e for e in self._recorded if event_tag(e) in _ROUND_ENDS), None)
        if end is None:
            return outcome
        if isinstance(end, ApprovalRequired):
            logged: ValidationOutcome = NeedsApproval(end.tier, end.message)
        elif isinstance(end, ArtifactRejected) and end.layer == "approval":
            logged = Rejected("approval", _logged_reasons("approval", end.reasons))
        else:
            logged = Passed()
        if type(logged) is not type(outcome):
            self.mismatch(end, _approval_text(outcome), event_tag(end))
            if not isinstance(outcome, Passed) and self._round_failing is None:
                self._round_failing = _approval_text(outcome)
        return logged

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
        """A retry re-runs only the failed nodes and those after them; a full round runs
        every applicable validation; every validation is one of the plan's."""
        selected = set(select)
        ended: set[str] = set()
        for event in events:
            node = getattr(event, "node", None)
            if isinstance(event, ValidationCompleted | NodeCompleted | NodeSkipped):
                if event.node in ended:
                    self.mismatch(
                        event,
                        f"one result for {event.node} in round {round_number} (a node that "
                        "ended does not run again)",
                        f"{event.node} ended again",
                    )
                ended.add(event.node)
            if (
                retry
                and node is not None
                and node not in selected
                and isinstance(event, ValidationCompleted | NodeCompleted | NodeSkipped)
            ):
                self.mismatch(
                    event,
                    "only the failed nodes and those after them to re-run ("
                    + ", ".join(sorted(selected))
                    + ")",
                    f"{node} ran too",
                )
            if isinstance(event, ValidationCompleted) and event.node not in modes:
                self.mismatch(
                    event,
                    f"a validation node of graph {self.graph.name!r} or an attachment",
                    f"{event.node}, which is neither",
                )
        end, layer, _ = self._round_end(round_number)
        self._none_ran = not events and (retry or bool(modes))
        if end is None:
            return
        if self._none_ran:
            self.mismatch(
                end,
                f"the semantic layer's validations in round {round_number} (the "
                f"{layer or 'semantic'} layer comes after it)",
                "none ran",
            )
        elif not retry:
            missing = [node for node in modes if node not in done]
            if missing:
                self.mismatch(
                    end,
                    f"every applicable validation to run in round {round_number}",
                    "no result for " + ", ".join(missing),
                )


def _attachments(
    graph: PlanGraph,
    catalog: Catalog | None,
    plan_id: str,
    events: Sequence[Event],
    journal: ReplayJournal,
) -> list[Applicable]:
    """The applicable validations: the graph's, and the attachments the log shows running,
    with their modes (from the catalog, else the graph)."""
    by_name: dict[str, list[str]] = {}
    for criterion in graph.acceptance:
        for name in criterion.validations:
            by_name.setdefault(name, []).append(criterion.id)
    applicable = graph_applicable(graph)
    seen: dict[str, tuple[ValidationStarted | ValidationCompleted, str | None]] = {}
    for event in events:
        if not isinstance(event, ValidationStarted | ValidationCompleted):
            continue
        if event.attachment_id is None and not event.node.startswith(ATTACHMENT):
            continue
        if event.node not in seen:
            seen[event.node] = (event, event.attachment_id)
    for node, (event, attachment_id) in seen.items():
        mode = _attachment_mode(graph, catalog, event.validation)
        if mode is None:
            where = (
                "neither the catalog nor the graph defines"
                if catalog is not None
                else "the graph does not define, and no catalog was given"
            )
            journal.mismatch(
                event,
                f"a validation whose mode is known, for {node}",
                f"{event.validation!r}, which {where} (assumed required; replay with the "
                "catalog the plan ran with)",
            )
            mode = ValidationMode.REQUIRED.value
        applicable.append(
            Applicable(
                id=node,
                validation=event.validation,
                mode=mode,
                attachment_id=attachment_id or node.removeprefix(ATTACHMENT),
                criteria=tuple(by_name.get(event.validation, [])),
            )
        )
    if seen:
        journal.note(
            "attachment modes come from the catalog"
            if catalog is not None
            else "attachment modes come from the graph: no catalog was given"
        )
    if catalog is not None:
        current = {
            f"{ATTACHMENT}{a.id}"
            for name in graph.resources
            for a in catalog.resolve(name, project=graph.project, plan=plan_id)
        }
        if current != set(seen):
            journal.note(
                "the catalog's attachments differ from those the log shows running "
                "(changed since the run?); replay follows the log"
            )
    return applicable


def _attachment_mode(graph: PlanGraph, catalog: Catalog | None, validation: str) -> str | None:
    tool: Any = None
    if catalog is not None:
        try:
            tool = catalog.get(validation)
        except CatalogError:
            tool = None
    if tool is None:
        try:
            tool = graph.get_tool(validation)
        except KeyError:
            return None
    return tool.mode.value if isinstance(tool, Validation) else None


def replay_plan(
    events: Sequence[Event], graph: PlanGraph, *, catalog: Catalog | None = None
) -> ReplayReport:
    """Run the plan's supervisor against its events and compare every decision with the log.

    ``events`` are the plan's events (any order: they are sorted by ``seq``); ``graph`` is
    the plan graph it ran, ``catalog`` the catalog it ran with, for the modes of attached
    validations. Nothing runs: no validation, actor, resource or file is touched (seed 002
    §13). Raises :class:`ValueError` when there are no events.
    """
    from gategraph.runtime._definitions._evidence import MemoryEvidence
    from gategraph.runtime._lifecycle._supervisor import Supervisor

    if not events:
        raise ValueError("no events to replay")
    ordered = sorted(events, key=lambda e: e.seq)
    started = next((e for e in ordered if isinstance(e, PlanStarted)), ordered[0])
    plan_id = started.plan_id
    journal = ReplayJournal(plan_id, (), graph)
    mine: list[Event] = []
    next_seq = 1
    for event in ordered:
        if event.plan_id != plan_id:
            journal.mismatch(event, f"an event of plan {plan_id}", f"plan {event.plan_id}")
            continue
        if event.seq != next_seq:
            found = (
                f"seq {event.seq} (events {next_seq}..{event.seq - 1} are missing)"
                if event.seq > next_seq
                else f"seq {event.seq} again"
            )
            journal.mismatch(event, f"seq {next_seq}", found)
        next_seq = max(next_seq, event.seq + 1)
        if isinstance(event, PlanResumed):
            journal.note(
                f"the plan was resumed after seq {event.after_seq} ({event.reason}); what "
                "the earlier run left unfinished was taken up, not redone"
            )
        mine.append(event)
    applicable = _attachments(graph, catalog, plan_id, mine, journal)
    walked = ReplayJournal(plan_id, mine, graph)
    walked.found, walked.notes = journal.found, journal.notes
    options = started.options if isinstance(started, PlanStarted) else {}
    nobody = _Nobody()
    supervisor = Supervisor(
        graph,
        # Stand-ins: a replay touches no resource (its events name the real ones).
        resources={name: MemoryResource(name) for name in graph.resources},
        escalation=nobody,
        audit=InMemoryAuditLog(),
        auto_approve=bool(options.get("auto_approve", False)),
        sleep=_no_wait,
        strategy_actor=nobody,
        execution_actor=nobody,
        evidence=MemoryEvidence(),  # never touched: a replay is offline
    )
    supervisor.plan_id = plan_id
    supervisor.applicable = applicable
    supervisor.journal = walked
    walked.criterion_keys = {c.id: c.key for c in supervisor.roster.criteria}
    outcome = _walk(supervisor, walked, mine)
    if outcome is not None:
        pause = _PAUSED.get(outcome.status.value)
        if pause is not None:
            walked.note(f"the plan is {pause}: the log ends at its pause")
        after = (
            "plan_finished"
            if walked.ended_early
            else f"nothing after plan_finished (seq {walked.seq})"
        )
        for event in walked.leftovers():
            walked.mismatch(event, after, event_tag(event))
    mismatches = [line for _, _, line in sorted(walked.found)]
    return ReplayReport(
        plan_id=plan_id,
        matches=not mismatches,
        events=len(ordered),
        rounds=supervisor.round,
        decisions_checked=walked.decisions,
        mismatches=mismatches,
        notes=list(walked.notes),
    )


def _walk(supervisor: Any, journal: ReplayJournal, events: Sequence[Event]) -> PlanOutcome | None:
    """Step the supervisor's lifecycle to its end: its outcome, or None where the log ends
    or diverges first. No event loop is needed: nothing it awaits suspends, since the journal
    never turns live (one that would is a bug, and raises)."""
    coroutine = supervisor.replay()
    try:
        coroutine.send(None)
    except StopIteration as finished:
        outcome: PlanOutcome = finished.value
        return outcome
    except _LogEnds:
        if events:
            last = events[-1]
            journal.note(
                f"the log ends at seq {last.seq} ({event_tag(last)}) without plan_finished: "
                "the plan is running or crashed; what is there was replayed"
            )
        return None
    except _Diverged as diverged:
        recorded = diverged.recorded
        journal.mismatch(recorded, diverged.wanted, event_tag(recorded))
        journal.note(
            f"replay stops at seq {recorded.seq}: the plan needs {diverged.wanted} there, "
            "which the log does not hold"
        )
        return None
    coroutine.close()
    raise RuntimeError("replay awaited something that suspends: a replay runs nothing")
