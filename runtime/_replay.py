"""Replay: re-derive every decision of a plan from its event log, running nothing.

Seed 002 §13: during replay, validation outcomes are read from events, never re-executed,
so the pipeline's decision is deterministic from history (§5.3). :func:`replay_plan`
walks one plan's events in ``seq`` order and, with no validation, actor, resource or file
touched:

* rebuilds each round's semantic outcome from its recorded ``validation_completed``,
  ``node_completed`` and ``node_skipped`` events (a validator-only retry re-runs the
  failed nodes and those after them, and merges into the round before, as the supervisor
  does) and recomputes the round's verdict with :func:`build_verdict`;
* re-runs the Max-N budget over the rejected rounds, classifying each round's faults as
  the supervisor does, and compares every ``retry_decided``;
* follows the failure ladder (fix, strategy revision, a person) and Apply, and flags any
  step the decisions do not lead to: above all an Apply after a round with a required
  validation failing.

What the log does not hold the inputs of is taken from the log, and the report says so:
routing and payload rejections (the artifact is not recorded), the approval layer (seed
002 §19 forbids re-executing approval decisions; auto-approval is not recorded either),
and a person's escalation decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._engine import NodeResult, ValidationRecord
from ._events import (
    WITHDRAWN,
    ApplyStarted,
    ApprovalDecided,
    ApprovalRequired,
    ArtifactRejected,
    ArtifactValidated,
    ArtifactValidationStarted,
    EscalationDecided,
    EscalationRequested,
    Event,
    EventBase,
    FixRequested,
    NodeCompleted,
    NodeSkipped,
    PlanFinished,
    PlanResumed,
    PlanStarted,
    RetryDecided,
    StrategyProduced,
    StrategyRevisionRequested,
    ValidationCompleted,
    ValidationStarted,
    WorkFinished,
)
from ._exceptions import CatalogError
from ._journal import ENGINE_TAGS
from ._maxn import FaultKind, MaxNPolicy, RetryBudget, RetryDecision, primary_fault
from ._models import Validation, ValidationMode
from ._pipeline import (
    ATTACHMENT,
    LAYERS,
    Passed,
    Reason,
    Rejected,
    applicable_validations,
    check_payload,
    logged_result,
    retry_only_nodes,
    round_faults,
    routing_reason,
    semantic_outcome,
    with_descendants,
    work_failed_reason,
)
from ._protocols import Applicable

if TYPE_CHECKING:
    from ._catalog import Catalog
    from ._graph import PlanGraph

__all__ = ["ReplayReport", "graph_applicable", "replay_plan"]


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


# -- the supervisor's rules, shared --------------------------------------------------------
# The supervisor has its own copies of these (Supervisor._faults, _runtime_error, the end of
# _semantic, _with_descendants, _retry_only in _decide); it should call these,
# so that replay and the run cannot drift apart.


def _criteria_by_name(graph: PlanGraph) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = {}
    for criterion in graph.acceptance:
        for name in criterion.validations:
            by_name.setdefault(name, []).append(criterion.id)
    return by_name


def graph_applicable(graph: PlanGraph) -> list[Applicable]:
    """The graph's validation nodes as :class:`Applicable` (mode, bound criteria)."""
    return applicable_validations(graph, None, "")


# -- the replay ----------------------------------------------------------------------------


class _Phase(enum.Enum):
    """Where the plan is, as far as the log got: what it may do next."""

    START = "start"
    STRATEGIZE = "strategize"
    WORK = "work"
    VALIDATE = "validate"
    ROUND = "round"
    APPROVAL = "approval"
    PAUSED_APPROVAL = "paused for approval"
    APPROVED = "approved"
    DENIED = "denied"
    DECIDE = "decide"
    FIX = "fix"
    REVISE = "revise"
    ESCALATE = "escalate"
    ESCALATED = "escalated"
    PAUSED_DECISION = "paused for a decision"
    ABORTED = "aborted"
    APPLY = "apply"
    APPLYING = "applying"
    APPLIED = "applied"
    FINISHED = "finished"


_EXPECTS: Final[Mapping[_Phase, tuple[str, ...]]] = {
    _Phase.START: ("plan_started",),
    _Phase.STRATEGIZE: ("strategy_produced",),
    _Phase.WORK: ("work_finished",),
    _Phase.VALIDATE: ("artifact_validation_started",),
    _Phase.ROUND: ("artifact_rejected", "artifact_validated", "approval_required"),
    _Phase.APPROVAL: ("approval_decided", "plan_finished"),
    _Phase.PAUSED_APPROVAL: ("approval_decided",),
    _Phase.APPROVED: ("artifact_validated",),
    _Phase.DENIED: ("artifact_rejected",),
    _Phase.DECIDE: ("retry_decided",),
    _Phase.FIX: ("fix_requested",),
    _Phase.REVISE: ("strategy_revision_requested",),
    _Phase.ESCALATE: ("escalation_requested",),
    _Phase.ESCALATED: ("escalation_decided", "plan_finished"),
    _Phase.PAUSED_DECISION: ("escalation_decided",),
    _Phase.ABORTED: ("plan_finished",),
    # Apply may be refused: the sandboxes changed while validated, or the plan was withdrawn.
    _Phase.APPLY: ("apply_started", "plan_finished"),
    _Phase.APPLYING: ("apply_completed", "plan_finished"),  # a resource may refuse
    _Phase.APPLIED: ("plan_finished",),
    _Phase.FINISHED: (),
}
"""The supervisor's events each phase may be followed by."""

_FINISHED_STATUS: Final[Mapping[_Phase, str]] = {
    _Phase.APPROVAL: "awaiting_approval",
    _Phase.ESCALATED: "awaiting_decision",
    _Phase.ABORTED: "failed",
    _Phase.APPLY: "failed",
    _Phase.APPLYING: "failed",
    _Phase.APPLIED: "applied",
}

_PAUSES: Final[Mapping[_Phase, _Phase]] = {
    _Phase.APPROVAL: _Phase.PAUSED_APPROVAL,
    _Phase.ESCALATED: _Phase.PAUSED_DECISION,
}
"""A ``plan_finished`` in these phases pauses the plan for a person; a later run of the
supervisor (``gategraph decide`` / ``approve``) continues the same log."""

_NOTE_ROUTING: Final = (
    "routing rejections for validations that could not be prepared are taken from the log "
    "(what could be prepared then is not recorded)"
)
_NOTE_PAYLOAD: Final = (
    "payload rejections of an artifact that was not JSON are taken from the log (such an "
    "artifact is not recorded)"
)
_NOTE_APPROVAL: Final = (
    "approval outcomes are taken from the log: a replay never re-executes approval "
    "decisions, and whether the run auto-approved is not recorded"
)  # seed 002 §19
_NOTE_PERSON: Final = "a person's escalation decisions are taken from the log"
_NOTE_APPROVER: Final = "a person's approval decisions are taken from the log"
_NOTE_BACKOFF: Final = "the waits before validator re-runs are not logged, so not checked"


def _tag(event: EventBase) -> str:
    return str(type(event).__struct_config__.tag)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _findings(verdict: Mapping[str, Any] | None) -> tuple[Any, list[tuple[str, str]]]:
    if not verdict:
        return None, []
    findings = verdict.get("findings") or []
    return verdict.get("verdict"), sorted(
        (str(f.get("acId")), str(f.get("status"))) for f in findings if isinstance(f, Mapping)
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
    return tuple(Reason(layer=layer, message=text.removeprefix(f"{layer}: ")) for text in texts)


class _Round:
    """One validation round's engine events, as the log recorded them."""

    __slots__ = ("engine", "nodes", "number", "retry_only", "selected")

    def __init__(self, number: int, retry_only: list[str] | None, selected: set[str]) -> None:
        self.number = number
        self.retry_only = retry_only
        """The nodes whose failure a ``retry-validator`` decision re-runs, if any."""
        self.selected = selected
        """What a retry re-runs: those nodes and every node after them."""
        self.engine: list[Event] = []
        self.nodes: dict[str, NodeResult] = {}
        """The run's nodes, validations included, in the order they ended."""


class _Semantic:
    """A round's semantic layer, re-derived: its records, results, outcome and verdict."""

    __slots__ = ("outcome", "records", "results", "verdict")

    def __init__(
        self,
        records: dict[str, ValidationRecord],
        results: dict[str, NodeResult],
        outcome: Passed | Rejected,
        verdict: dict[str, Any],
    ) -> None:
        self.records = records
        self.results = results
        self.outcome = outcome
        self.verdict = verdict

    @property
    def reasons(self) -> tuple[Reason, ...]:
        return self.outcome.reasons if isinstance(self.outcome, Rejected) else ()

    @property
    def failing(self) -> str:
        return "; ".join(str(r) for r in self.reasons)


class _Replayer:
    def __init__(
        self, graph: PlanGraph, catalog: Catalog | None, plan_id: str, events: Sequence[Event]
    ) -> None:
        self.graph = graph
        self.catalog = catalog
        self.plan_id = plan_id
        self.found: list[tuple[int, int, str]] = []
        self.notes: list[str] = []
        self.decisions = 0
        self.rounds = 0
        self.phase = _Phase.START
        self.budget = RetryBudget(MaxNPolicy(limit=graph.policy.retry_limit))
        self.revision = 0
        self.attempt = 0
        self.round_no = 0
        self.round: _Round | None = None
        self.records: dict[str, ValidationRecord] = {}
        self.results: dict[str, NodeResult] = {}
        self.retry_only: list[str] | None = None
        self.last_round: tuple[int, bool, str] | None = None
        """The last round ended: its number, whether replay says it passed, and why not."""
        self.pending: tuple[RetryDecision, FaultKind, int] | None = None
        self.pending_round = 0
        self.fix_note: str | None = None
        self.work: WorkFinished | None = None
        """The last recorded artifact (or execution actor's failure)."""
        self.denied = False
        self.finished_at = 0
        self.modes: dict[str, str] = {}
        self.applicable = graph_applicable(graph)
        for item in self.applicable:
            self.modes[item.id] = item.mode
        self._attachments(events)

    # -- reporting ------------------------------------------------------------------------

    def mismatch(self, event: EventBase, expected: str, found: str) -> None:
        line = f"seq {event.seq} ({_tag(event)}): expected {expected}, log says {found}"
        self.found.append((event.seq, len(self.found), line))

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    # -- what applies ---------------------------------------------------------------------

    def _attachments(self, events: Sequence[Event]) -> None:
        """The attachments the log shows running, with their modes (catalog, else graph)."""
        by_name = _criteria_by_name(self.graph)
        seen: dict[str, tuple[ValidationStarted | ValidationCompleted, str | None]] = {}
        for event in events:
            if not isinstance(event, ValidationStarted | ValidationCompleted):
                continue
            if event.attachment_id is None and not event.node.startswith(ATTACHMENT):
                continue
            if event.node not in seen:
                seen[event.node] = (event, event.attachment_id)
        for node, (event, attachment_id) in seen.items():
            mode = self._attachment_mode(event.validation)
            if mode is None:
                where = (
                    "neither the catalog nor the graph defines"
                    if self.catalog is not None
                    else "the graph does not define, and no catalog was given"
                )
                self.mismatch(
                    event,
                    f"a validation whose mode is known, for {node}",
                    f"{event.validation!r}, which {where} (assumed required; replay with the "
                    "catalog the plan ran with)",
                )
                mode = ValidationMode.REQUIRED.value
            self.modes[node] = mode
            self.applicable.append(
                Applicable(
                    id=node,
                    validation=event.validation,
                    mode=mode,
                    attachment_id=attachment_id or node.removeprefix(ATTACHMENT),
                    criteria=tuple(by_name.get(event.validation, [])),
                )
            )
        if seen:
            self.note(
                "attachment modes come from the catalog"
                if self.catalog is not None
                else "attachment modes come from the graph: no catalog was given"
            )
        if self.catalog is not None:
            current = {
                f"{ATTACHMENT}{a.id}"
                for name in self.graph.resources
                for a in self.catalog.resolve(name, project=self.graph.project, plan=self.plan_id)
            }
            if current != set(seen):
                self.note(
                    "the catalog's attachments differ from those the log shows running "
                    "(changed since the run?); replay follows the log"
                )

    def _attachment_mode(self, validation: str) -> str | None:
        tool: Any = None
        if self.catalog is not None:
            try:
                tool = self.catalog.get(validation)
            except CatalogError:
                tool = None
        if tool is None:
            try:
                tool = self.graph.get_tool(validation)
            except KeyError:
                return None
        return tool.mode.value if isinstance(tool, Validation) else None

    # -- the walk -------------------------------------------------------------------------

    def run(self, events: Sequence[Event]) -> None:
        next_seq = 1
        for event in events:
            if event.plan_id != self.plan_id:
                self.mismatch(event, f"an event of plan {self.plan_id}", f"plan {event.plan_id}")
                continue
            if event.seq != next_seq:
                found = (
                    f"seq {event.seq} (events {next_seq}..{event.seq - 1} are missing)"
                    if event.seq > next_seq
                    else f"seq {event.seq} again"
                )
                self.mismatch(event, f"seq {next_seq}", found)
            next_seq = max(next_seq, event.seq + 1)
            self.step(event)
        if self.phase in (_Phase.PAUSED_APPROVAL, _Phase.PAUSED_DECISION):
            self.note(f"the plan is {self.phase.value}: the log ends at its pause")
        elif self.phase is not _Phase.FINISHED and events:
            last = events[-1]
            self.note(
                f"the log ends at seq {last.seq} ({_tag(last)}) without plan_finished: the "
                "plan is running or crashed; what is there was replayed"
            )

    def step(self, event: Event) -> None:
        tag = _tag(event)
        if tag in ENGINE_TAGS and self.phase is _Phase.ROUND:
            self.engine_event(event)
            return
        if tag in ENGINE_TAGS and self.phase is _Phase.WORK:
            return  # the execution actor's own run: its artifact is in work_finished
        if tag == "plan_resumed":
            assert isinstance(event, PlanResumed)
            self.note(
                f"the plan was resumed after seq {event.after_seq} ({event.reason}); what "
                "the earlier run left unfinished was taken up, not redone"
            )
            return
        if tag in _EXPECTS[self.phase]:
            self.apply(tag, event)
            return
        # An event missing? If the one expected here would lead to this one, say it is
        # missing and go on from there; otherwise this one is out of place: skip it.
        missing = self.main_expected()
        if missing is not None:
            after = self.phase_after(missing)
            if after is not None and (
                tag in _EXPECTS[after] or (after is _Phase.ROUND and tag in ENGINE_TAGS)
            ):
                self.mismatch(event, self.expected_text(None), f"{tag} ({missing} is missing)")
                self.apply(missing, None)
                self.step(event)
                return
        self.mismatch(event, self.expected_text(tag), tag)

    def expected_text(self, tag: str | None) -> str:
        """What the log should show here (instead of ``tag``, when given)."""
        if self.phase is _Phase.FINISHED:
            return f"nothing after plan_finished (seq {self.finished_at})"
        if tag == "apply_started":
            why = "no round has ended yet"
            if self.phase is _Phase.ROUND and self.round is not None:
                why = f"round {self.round.number} has no outcome yet"
            elif self.last_round is not None:
                number, passed, failing = self.last_round
                why = (
                    f"round {number} was rejected: {_short(failing, 100)}"
                    if not passed
                    else f"round {number} passed, but {self.phase.value} comes first"
                )
            return (
                "no apply_started: Apply follows only an artifact_validated round with no "
                f"required validation failing, and {why}"
            )
        if self.phase is _Phase.ROUND:
            return f"{self.main_expected()} (the round's outcome)"
        return " or ".join(_EXPECTS[self.phase])

    def main_expected(self) -> str | None:
        """The one event the log should show next, if there is exactly one."""
        if self.phase is _Phase.ROUND:
            # What the semantic layer says; a pass may still meet the approval layer, whose
            # outcome only the log knows.
            semantic = self.semantic()
            passed = semantic is not None and isinstance(semantic.outcome, Passed)
            return "artifact_validated" if passed else "artifact_rejected"
        expects = _EXPECTS[self.phase]
        return expects[0] if len(expects) == 1 else None

    def phase_after(self, tag: str) -> _Phase | None:
        """The phase ``tag`` leads to from here, when it does not depend on its fields."""
        simple = {
            "plan_started": _Phase.STRATEGIZE,
            "strategy_produced": _Phase.WORK,
            "work_finished": _Phase.VALIDATE,
            "artifact_validation_started": _Phase.ROUND,
            "approval_required": _Phase.APPROVAL,
            "artifact_rejected": _Phase.DECIDE,
            "artifact_validated": _Phase.APPLY,
            "fix_requested": _Phase.WORK,
            "strategy_revision_requested": _Phase.STRATEGIZE,
            "escalation_requested": _Phase.ESCALATED,
            "apply_started": _Phase.APPLYING,
            "apply_completed": _Phase.APPLIED,
        }
        if tag == "retry_decided":
            return self.after_decision()
        return simple.get(tag)

    def after_decision(self) -> _Phase | None:
        if self.pending is None:
            return None
        decision = self.pending[0]
        if decision is RetryDecision.FIX:
            return _Phase.FIX
        if decision is RetryDecision.RETRY_VALIDATOR:
            return _Phase.VALIDATE
        if (
            decision is RetryDecision.ESCALATE_EXHAUSTED
            and self.revision < self.graph.policy.strategy_revisions
        ):
            return _Phase.REVISE
        return _Phase.ESCALATE

    def apply(self, tag: str, event: Event | None) -> None:
        """Take the transition ``tag`` (``event`` is None when the log is missing it)."""
        handler = getattr(self, f"on_{tag}")
        handler(event)

    # -- the lifecycle's events -----------------------------------------------------------

    def on_plan_started(self, event: PlanStarted | None) -> None:
        if event is not None and (event.graph, event.project) != (
            self.graph.name,
            self.graph.project,
        ):
            self.mismatch(
                event,
                f"graph {self.graph.name!r} (project {self.graph.project!r})",
                f"graph {event.graph!r} (project {event.project!r})",
            )
        self.phase = _Phase.STRATEGIZE

    def on_strategy_produced(self, event: StrategyProduced | None) -> None:
        if event is not None and event.revision != self.revision:
            self.mismatch(event, f"revision {self.revision}", f"revision {event.revision}")
        self.attempt += 1  # the execution actor's first attempt on this strategy
        self.phase = _Phase.WORK

    def on_work_finished(self, event: WorkFinished | None) -> None:
        if event is not None and event.attempt != self.attempt:
            self.mismatch(event, f"attempt {self.attempt}", f"attempt {event.attempt}")
        self.work = event
        # An execution actor that gave the plan up: the plan ends, nothing is validated.
        withdrawn = event is not None and event.fault == WITHDRAWN
        self.phase = _Phase.ABORTED if withdrawn else _Phase.VALIDATE

    def expected_gate(self) -> tuple[str, list[str]] | None:
        """What the routing and payload layers say about the recorded artifact: the layer
        that rejects it and why, ``("", [])`` when both pass; None if the log cannot tell
        (no ``work_finished``, or an artifact that was not JSON and so is not recorded)."""
        work = self.work
        if work is None:
            return None
        if work.error is not None:
            return "routing", [str(work_failed_reason(work.error, work.fault))]
        artifact = work.artifact
        if isinstance(artifact, Mapping) and set(artifact) == {"unencodable", "repr"}:
            return None
        reasons = check_payload(artifact, self.graph.lifecycle.artifact_schema)
        return ("payload", [str(r) for r in reasons]) if reasons else ("", [])

    def _check_gate(self, layer: str | None, event: Event | None) -> bool:
        """Compare a round's routing / payload outcome with the recorded artifact's; False
        when the log cannot tell (the outcome is then taken from the log)."""
        gate = self.expected_gate()
        if gate is None or event is None:
            return False
        want_layer, want = gate
        if layer in ("routing", "payload"):
            assert isinstance(event, ArtifactRejected)
            if layer == "routing" and want_layer != "routing":
                # A validation that could not be prepared: its inputs are not in the log.
                return False
            if (want_layer, want) != (layer, list(event.reasons)):
                expected = f"{want_layer} rejection: {_short('; '.join(want), 100)}"
                self.mismatch(
                    event,
                    expected if want_layer else "the artifact to pass routing and payload",
                    f"{layer} rejection: " + _short("; ".join(event.reasons), 100),
                )
            return True
        if want_layer:
            self.mismatch(
                event,
                f"a {want_layer} rejection: {_short('; '.join(want), 100)}",
                f"{_tag(event)} (the round went past the {want_layer} layer)",
            )
        return True

    def on_approval_required(self, event: ApprovalRequired | None) -> None:
        """The approval layer wants a person: the semantic layer must have passed."""
        current = self.round
        assert current is not None
        semantic = self.semantic()
        if event is not None:
            if event.round != current.number:
                self.mismatch(event, f"round {current.number}", f"round {event.round}")
            if semantic is None or not isinstance(semantic.outcome, Passed):
                failing = semantic.failing if semantic is not None else "no validation ran"
                self.mismatch(
                    event,
                    "artifact_rejected at the semantic layer: " + _short(failing, 120),
                    "approval_required",
                )
        self.note(_NOTE_APPROVAL)
        self.phase = _Phase.APPROVAL

    def on_approval_decided(self, event: ApprovalDecided | None) -> None:
        assert event is not None  # a person's decision is never implied
        self.note(_NOTE_APPROVER)
        self.denied = not event.approved
        self.phase = _Phase.APPROVED if event.approved else _Phase.DENIED

    def on_artifact_validation_started(self, event: ArtifactValidationStarted | None) -> None:
        self.round_no += 1
        self.rounds += 1
        if event is not None:
            want = (self.round_no, self.attempt, self.revision)
            got = (event.round, event.attempt, event.revision)
            if want != got:
                self.mismatch(
                    event,
                    "round {}, attempt {}, revision {}".format(*want),
                    "round {}, attempt {}, revision {}".format(*got),
                )
        retry = self.retry_only
        selected = set(with_descendants(self.graph, retry)) if retry else set()
        self.round = _Round(self.round_no, retry, selected)
        self.phase = _Phase.ROUND

    def engine_event(self, event: Event) -> None:
        current = self.round
        assert current is not None
        current.engine.append(event)
        node = getattr(event, "node", None)
        if current.retry_only and node is not None and node not in current.selected:
            if isinstance(event, ValidationCompleted | NodeCompleted | NodeSkipped):
                self.mismatch(
                    event,
                    "only the failed nodes and those after them to re-run ("
                    + ", ".join(sorted(current.selected))
                    + ")",
                    f"{node} ran too",
                )
        if isinstance(event, ValidationCompleted) and event.node not in self.modes:
            self.mismatch(
                event,
                f"a validation node of graph {self.graph.name!r} or an attachment",
                f"{event.node}, which is neither",
            )
        node = getattr(event, "node", None)
        if node is not None:
            result = logged_result(event, self._kind(node), self.modes.get(node))
            if result is not None:
                current.nodes[node] = result

    def _kind(self, node: str) -> str:
        try:
            return self.graph.node(node).kind.value
        except KeyError:
            return "validation" if node.startswith(ATTACHMENT) else "work"

    def semantic(self) -> _Semantic | None:
        """The current round's semantic layer re-derived from its events, as the supervisor
        derives it; None if it did not run (no engine events though something was to run)."""
        current = self.round
        assert current is not None
        ran_something = bool(current.retry_only) or bool(self.modes)
        if ran_something and not current.engine:
            return None
        if current.retry_only:
            records, results = dict(self.records), dict(self.results)
        else:
            records, results = {}, {}
        results.update(current.nodes)
        records.update({n: r for n, r in current.nodes.items() if isinstance(r, ValidationRecord)})
        outcome, verdict = semantic_outcome(
            self.plan_id, self.graph, self.applicable, records, results
        )
        return _Semantic(records, results, outcome, verdict)

    def _check_verdict(self, event: Event, expected: Mapping[str, Any], logged: Any) -> None:
        want = _findings(expected)
        got = _findings(logged if isinstance(logged, Mapping) else None)
        if want != got:
            self.mismatch(event, _verdict_text(*want), _verdict_text(*got))

    def _end_round(self, tag: str, event: Event | None) -> None:
        """The round's outcome: re-derived where the log has its inputs, else taken."""
        current = self.round
        assert current is not None
        self.decisions += 1
        if isinstance(event, ArtifactRejected | ArtifactValidated) and (
            event.round != current.number
        ):
            self.mismatch(event, f"round {current.number}", f"round {event.round}")
        layer = event.layer if isinstance(event, ArtifactRejected) else None
        if tag == "artifact_rejected" and layer is None:  # missing from the log
            layer = "semantic" if current.engine else "payload"
        if layer is not None and layer not in LAYERS:
            assert event is not None
            self.mismatch(event, "a layer of " + ", ".join(LAYERS), f"layer {layer!r}")
            layer = "payload"
        checked = self._check_gate(layer, event)
        if layer in ("routing", "payload"):
            assert isinstance(event, ArtifactRejected) or event is None
            if not checked:
                self.note(_NOTE_ROUTING if layer == "routing" else _NOTE_PAYLOAD)
            if current.engine and event is not None:
                self.mismatch(
                    event,
                    f"no validation in round {current.number} (the {layer} layer rejects "
                    "before the semantic layer runs)",
                    f"the semantic layer ran from seq {current.engine[0].seq}",
                )
            texts = event.reasons if event is not None else []
            outcome = Rejected(layer, _logged_reasons(layer, texts))
            self.round = None
            self.last_round = (current.number, False, "; ".join(texts) or f"{layer} layer")
            self.decide(outcome)
            return
        semantic = self.semantic()
        self.retry_only = None  # the semantic layer was reached: the re-run list is used up
        if semantic is None:
            assert event is not None
            self.mismatch(
                event,
                f"the semantic layer's validations in round {current.number} (the "
                f"{layer or 'semantic'} layer comes after it)",
                "none ran",
            )
            semantic = _Semantic(self.records, self.results, Passed(), {})
        else:
            self.records, self.results = semantic.records, semantic.results
            if not current.retry_only:
                self._check_full(current, event)
        self.round = None
        passed = isinstance(semantic.outcome, Passed)
        self.last_round = (current.number, passed, semantic.failing)
        if tag == "artifact_rejected" and layer == "semantic":
            if event is not None:
                assert isinstance(event, ArtifactRejected)
                if passed:
                    self.mismatch(
                        event,
                        "the round to pass the semantic layer (every required validation "
                        "ran and passed)",
                        "artifact_rejected at the semantic layer: "
                        + _short("; ".join(event.reasons), 120),
                    )
                elif sorted(str(r) for r in semantic.reasons) != sorted(event.reasons):
                    self.mismatch(
                        event,
                        "reasons " + _short(semantic.failing, 120),
                        "reasons " + _short("; ".join(event.reasons), 120),
                    )
                if semantic.verdict:
                    self._check_verdict(event, semantic.verdict, event.verdict)
            rejected = semantic.outcome
            self.decide(rejected if isinstance(rejected, Rejected) else Rejected("semantic", ()))
            return
        if event is not None and not passed:
            self.mismatch(
                event,
                "artifact_rejected at the semantic layer: " + _short(semantic.failing, 120),
                (f"{tag} ({event.status})" if isinstance(event, PlanFinished) else tag)
                + ("" if layer is None else f" at the {layer} layer"),
            )
        if tag == "artifact_rejected":  # the approval layer denied it
            assert isinstance(event, ArtifactRejected)
            self.note(_NOTE_APPROVAL)
            self.last_round = (current.number, False, "; ".join(event.reasons))
            if self.denied:  # by a person: the plan fails, no retry
                self.denied = False
                self.phase = _Phase.ABORTED
                return
            self.decide(Rejected("approval", _logged_reasons("approval", event.reasons)))
            return
        if tag == "artifact_validated":
            if isinstance(event, ArtifactValidated) and semantic.verdict:
                self._check_verdict(event, semantic.verdict, event.verdict)
            self.note(_NOTE_APPROVAL)
            self.phase = _Phase.APPLY
            return

    def _check_full(self, current: _Round, event: Event | None) -> None:
        """A full round runs every applicable validation (or records why one was skipped)."""
        if event is None:
            return
        ran = set(current.nodes)
        missing = [a.id for a in self.applicable if a.id not in ran]
        if missing:
            self.mismatch(
                event,
                f"every applicable validation to run in round {current.number}",
                "no result for " + ", ".join(missing),
            )

    def on_artifact_rejected(self, event: ArtifactRejected | None) -> None:
        self._end_round("artifact_rejected", event)

    def on_artifact_validated(self, event: ArtifactValidated | None) -> None:
        self._end_round("artifact_validated", event)

    def decide(self, outcome: Rejected) -> None:
        """Max-N (seed 003): the budget's decision about a rejected round."""
        faults = round_faults(outcome)
        decision = self.budget.decide_round(faults)
        fault = primary_fault(faults) or faults[0]
        self.pending = (decision, fault, self.budget.used)
        self.pending_round = self.round_no
        if decision is RetryDecision.RETRY_VALIDATOR:
            nodes = retry_only_nodes(outcome)
            self.retry_only = nodes
            self.note(_NOTE_BACKOFF)
        self.phase = _Phase.DECIDE

    def on_retry_decided(self, event: RetryDecided | None) -> None:
        assert self.pending is not None
        decision, fault, used = self.pending
        self.decisions += 1
        if event is not None:
            want = {
                "decision": decision.value,
                "fault_kind": fault.kind,
                "classification": fault.classification.value,
                "budget_used": used,
                "budget_limit": self.budget.limit,
                "round": self.pending_round,
                "attempt": self.attempt,
            }
            got = {name: getattr(event, name) for name in want}
            differ = [name for name in want if want[name] != got[name]]
            if differ:
                self.mismatch(
                    event,
                    " ".join(f"{name}={want[name]}" for name in differ),
                    " ".join(f"{name}={got[name]}" for name in differ),
                )
        after = self.after_decision()
        assert after is not None
        self.fix_note = None
        self.phase = after

    def on_fix_requested(self, event: FixRequested | None) -> None:
        self.decisions += 1
        self.attempt += 1
        if event is not None:
            if event.attempt != self.attempt:
                self.mismatch(event, f"attempt {self.attempt}", f"attempt {event.attempt}")
            if event.note != self.fix_note:
                self.mismatch(event, f"note {self.fix_note!r}", f"note {event.note!r}")
        self.fix_note = None
        self.phase = _Phase.WORK

    def on_strategy_revision_requested(self, event: StrategyRevisionRequested | None) -> None:
        self.decisions += 1
        self.revision += 1
        if event is not None and event.revision != self.revision:
            self.mismatch(event, f"revision {self.revision}", f"revision {event.revision}")
        self.budget.reset()  # a revised strategy is new work: a fresh budget
        self.phase = _Phase.STRATEGIZE

    def on_escalation_requested(self, event: EscalationRequested | None) -> None:
        self.decisions += 1
        assert self.pending is not None
        reason = "permanent" if self.pending[0] is RetryDecision.ESCALATE_PERMANENT else "exhausted"
        if event is not None and event.reason != reason:
            self.mismatch(event, f"reason {reason!r}", f"reason {event.reason!r}")
        self.phase = _Phase.ESCALATED

    def on_escalation_decided(self, event: EscalationDecided | None) -> None:
        assert event is not None  # a person's decision is never implied
        self.note(_NOTE_PERSON)
        if event.action == "retry":
            self.budget.reset()
            self.fix_note = event.note
            self.phase = _Phase.FIX
            return
        if event.action != "abort":
            self.mismatch(event, "action 'retry' or 'abort'", f"action {event.action!r}")
        self.phase = _Phase.ABORTED

    def on_apply_started(self, event: ApplyStarted | None) -> None:
        self.decisions += 1
        if event is not None:
            if self.last_round is not None and not self.last_round[1]:
                number, _, failing = self.last_round
                self.mismatch(
                    event,
                    f"no Apply: a required validation is failing in round {number} "
                    f"({_short(failing, 100)})",
                    "apply_started",
                )
            resources = sorted(self.graph.resources)
            if event.resources != resources:
                self.mismatch(
                    event, f"resources {resources}", f"resources {sorted(event.resources)}"
                )
        self.phase = _Phase.APPLYING

    def on_apply_completed(self, event: Event | None) -> None:
        self.decisions += 1
        self.phase = _Phase.APPLIED

    def on_plan_finished(self, event: PlanFinished | None) -> None:
        self.decisions += 1
        status = _FINISHED_STATUS.get(self.phase)
        if isinstance(event, PlanFinished):
            if status is not None and event.status != status:
                self.mismatch(event, f"status {status!r}", f"status {event.status!r}")
            self.finished_at = event.seq
        self.phase = _PAUSES.get(self.phase, _Phase.FINISHED)

    # -- the report -----------------------------------------------------------------------

    def report(self, events: int) -> ReplayReport:
        mismatches = [line for _, _, line in sorted(self.found)]
        return ReplayReport(
            plan_id=self.plan_id,
            matches=not mismatches,
            events=events,
            rounds=self.rounds,
            decisions_checked=self.decisions,
            mismatches=mismatches,
            notes=list(self.notes),
        )


def replay_plan(
    events: Sequence[Event], graph: PlanGraph, *, catalog: Catalog | None = None
) -> ReplayReport:
    """Re-derive every decision of one plan from its events and compare with the log.

    ``events`` are the plan's events (any order: they are sorted by ``seq``); ``graph`` is
    the plan graph it ran, ``catalog`` the catalog it ran with, for the modes of attached
    validations. Nothing runs: no validation, actor, resource or file is touched (seed 002
    §13). Raises :class:`ValueError` when there are no events.
    """
    if not events:
        raise ValueError("no events to replay")
    ordered = sorted(events, key=lambda e: e.seq)
    started = next((e for e in ordered if isinstance(e, PlanStarted)), ordered[0])
    replayer = _Replayer(graph, catalog, started.plan_id, ordered)
    replayer.run(ordered)
    return replayer.report(len(ordered))
