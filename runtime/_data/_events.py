"""Events: every decision of a plan, appended before the transition it causes.

Events are msgspec Structs in one tagged union (the ``type`` field), so a log encodes and
decodes them without a schema lookup. Each carries a ULID ``id``, the ``plan_id``, a
per-plan sequence number ``seq`` (assigned by the log on append), a timestamp ``at``
(seconds since the epoch) and the ``causation_id`` of the event that caused it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import msgspec

from ._results import ValidationResult

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "ApplyCompleted",
    "ApplyStarted",
    "ApprovalDecided",
    "ApprovalRequired",
    "ArtifactProduced",
    "ArtifactRejected",
    "ArtifactValidated",
    "ArtifactValidationStarted",
    "AttestationRequired",
    "AttestationsReceived",
    "ConfirmationStarted",
    "EscalationDecided",
    "EscalationRequested",
    "Event",
    "EventBase",
    "FixRequested",
    "NodeCompleted",
    "NodeSkipped",
    "NodeStarted",
    "PlanFinished",
    "PlanResumed",
    "PlanStarted",
    "RetryDecided",
    "RunFinished",
    "RunStarted",
    "StrategyProduced",
    "StrategyRevisionRequested",
    "ValidationCompleted",
    "ValidationStarted",
    "WorkFinished",
    "decode_event",
    "encode_event",
]


class EventBase(msgspec.Struct, tag_field="type", kw_only=True, frozen=True, gc=False):
    """Fields every event has.

    ``gc=False``: an event refers to no other event, and a plan keeps hundreds of
    thousands of them; untracked structs are smaller and cheaper to make.
    """

    id: str
    """A ULID."""
    plan_id: str
    """The plan this event belongs to."""
    seq: int = 0
    """Position in the plan's log, from 1; assigned when the event is appended."""
    at: float
    """When it happened, in seconds since the epoch."""
    causation_id: str | None = None
    """The id of the event that caused this one."""


class RunStarted(EventBase, tag="run_started", kw_only=True, frozen=True, gc=False):
    """A run of a plan graph's nodes began."""

    graph: str
    """The plan graph's name."""
    project: str | None = None
    """The project the plan runs under."""
    attempt: int = 1
    """Which run of the graph this is within the plan (revalidations count up)."""


class RunFinished(EventBase, tag="run_finished", kw_only=True, frozen=True, gc=False):
    """A run of a plan graph's nodes ended."""

    status: str
    """``completed`` (every node ran) or ``failed`` (a node failed or was skipped)."""
    duration: float
    """Seconds the run took."""


class NodeStarted(EventBase, tag="node_started", kw_only=True, frozen=True, gc=False):
    """A node of the graph started."""

    node: str
    """The node id."""
    attempt: int = 1
    """1 for the first run of this node in the plan, then 2, 3, ..."""


class NodeCompleted(EventBase, tag="node_completed", kw_only=True, frozen=True, gc=False):
    """A node finished, with its output or its error."""

    node: str
    attempt: int = 1
    ok: bool
    """Whether the node succeeded."""
    duration: float
    """Seconds the node took."""
    output: Any = None
    """The node's output (JSON-compatible), if it succeeded."""
    error: str | None = None
    """What went wrong, if it did not."""
    captured: dict[str, str] | None = None
    """What the node's tool printed (``stdout`` / ``stderr``, their ends), if anything."""


class NodeSkipped(EventBase, tag="node_skipped", kw_only=True, frozen=True, gc=False):
    """A node did not run because a node it needs failed or was skipped."""

    node: str
    reason: str


class ValidationStarted(EventBase, tag="validation_started", kw_only=True, frozen=True, gc=False):
    """A validation call started."""

    node: str
    """The validation node (or the attachment's pseudo-node)."""
    validation: str
    """The validation's name."""
    attachment_id: str | None = None
    """The attachment that made it apply, if any."""
    attempt: int = 1


class ValidationCompleted(
    EventBase, tag="validation_completed", kw_only=True, frozen=True, gc=False
):
    """A validation call finished, with the full result."""

    node: str
    validation: str
    attachment_id: str | None = None
    attempt: int = 1
    result: ValidationResult
    """The structured result, exactly as recorded for replay."""
    duration: float
    """Seconds the call took."""
    isolation: str | None = None
    """What ran the call: ``inline``, ``thread``, ``process``, ``sandbox``, ``ray``, or
    ``mcp`` (its server); absent in logs written before it was recorded."""
    network: bool | None = None
    """Whether the validation declared ``network: true`` (the call was let use the
    network); absent (None) in logs written before it was recorded."""
    reused_from: int | None = None
    """The round whose call gave this result, when the validation was not called again
    because nothing it is given had changed since (its ``duration`` is that call's);
    None for a call made in this round."""


class ArtifactProduced(EventBase, tag="artifact_produced", kw_only=True, frozen=True, gc=False):
    """A node produced an artifact to be validated (seed 002 §11)."""

    node: str
    artifact: Any
    """The artifact (JSON-compatible)."""


class PlanStarted(EventBase, tag="plan_started", kw_only=True, frozen=True, gc=False):
    """The supervisor took a plan on."""

    graph: str
    project: str | None = None
    graph_path: str | None = None
    """The graph file the plan runs (absolute), when it came from one: what resume reloads."""
    graph_sha256: str | None = None
    """The graph file's digest when the plan started: resume refuses a changed file."""
    applicable: list[str] = msgspec.field(default_factory=list)
    """The ids of the validations that apply (graph nodes and attachments), in order."""
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    """How the plan was run (auto-approve, resource folders): what resume runs it with."""
    host: str | None = None
    """The host whose process took the plan on (``socket.gethostname()``); None in logs
    written before it was recorded."""

    def graph_unchanged(self, file: Path) -> bool:
        """Whether ``file`` still holds the graph the plan started with (True when the
        plan recorded no digest)."""
        import hashlib

        return (
            self.graph_sha256 is None
            or hashlib.sha256(file.read_bytes()).hexdigest() == self.graph_sha256
        )


class PlanResumed(EventBase, tag="plan_resumed", kw_only=True, frozen=True, gc=False):
    """Another run of the supervisor took the plan on where the log ends (a crash, or a
    person's decision on a paused plan). Events before it that no step finished (a
    crashed fan-out's partial run) stay in the log; what they completed is not redone."""

    after_seq: int
    """The seq of the last event before the resumption."""
    reason: str
    """``crashed``, ``decision`` or ``approval``."""
    host: str | None = None
    """The host whose process took the plan on this time (another than the one before,
    for a plan in a shared database); None in logs written before it was recorded."""


class StrategyProduced(EventBase, tag="strategy_produced", kw_only=True, frozen=True, gc=False):
    """Strategize ended: the strategy actor's strategy for this revision."""

    revision: int
    summary: str = ""
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    """The strategy's data (JSON-compatible), as a resumed plan gets it back."""


class WorkFinished(EventBase, tag="work_finished", kw_only=True, frozen=True, gc=False):
    """The execution actor returned (or raised): the artifact the pipeline validates next."""

    attempt: int
    artifact: Any = None
    """The artifact (JSON-compatible; anything else is described, not kept)."""
    error: str | None = None
    """Why the execution actor failed; then there is no artifact."""
    fault: str | None = None
    """When it failed for a reason the work cannot fix: ``misconfigured`` (a work tool
    cannot be called) or ``runtime_fault`` (gategraph itself failed); ``withdrawn`` when
    the execution actor gave the plan up (the plan fails next); else ``None``."""
    sandboxes: dict[str, str] | None = None
    """Which copy the work was done in, by folder resource: the copy's own id (made with
    it, kept beside it), so a resume on another host can tell an older copy it has from
    the one that holds this work. None in logs written before it was recorded."""


WITHDRAWN: Final = "withdrawn"
"""``WorkFinished.fault`` of an execution actor that gave its plan up (``WorkWithdrawn``)."""


class ArtifactValidationStarted(
    EventBase, tag="artifact_validation_started", kw_only=True, frozen=True, gc=False
):
    """The pipeline began validating an artifact (seed 002 §10)."""

    round: int
    """1 for the plan's first validation round, then 2, 3, ..."""
    attempt: int
    """The attempt within the current strategy (1, then one more per fix or retry)."""
    revision: int
    inputs: dict[str, str] | None = None
    """What each sandbox held as the round's validations saw it, by resource: the digest of
    its manifest in the plan's content store (``changes:`` and a digest of its changes, for
    a resource the store cannot hold). None before any sandbox is open."""
    bases: dict[str, str] | None = None
    """What each sandbox started from, by resource (the real resource as the sandbox copied
    it): the digest of its manifest in the content store. With ``inputs``, the change the
    round validated, which Apply commits. None where the store keeps no copies (in memory),
    and in logs written before it was recorded."""
    exclusions: dict[str, str] | None = None
    """What each folder sandbox leaves out, by resource (the rules it read as it was
    copied): the digest of a manifest in the content store holding them. With ``inputs``
    and ``bases``, what a host that lacks the sandbox needs to make it again (a plan resumed
    elsewhere). None where the store keeps no copies, and in logs written before it was
    recorded."""


class ArtifactValidated(EventBase, tag="artifact_validated", kw_only=True, frozen=True, gc=False):
    """Every layer passed: the artifact may advance (seed 002 §10)."""

    round: int
    verdict: dict[str, Any]
    """The seed 003 attestation."""
    seconds: dict[str, float] = msgspec.field(default_factory=dict)
    """Seconds the round spent in each pipeline layer (empty in logs written before it was
    recorded)."""


class ArtifactRejected(EventBase, tag="artifact_rejected", kw_only=True, frozen=True, gc=False):
    """A layer rejected the artifact; later layers were skipped (seed 002 §5.2)."""

    round: int
    layer: str
    """``routing``, ``payload``, ``semantic`` or ``approval``."""
    reasons: list[str]
    verdict: dict[str, Any] | None = None
    """The seed 003 rejection, for a semantic rejection."""
    seconds: dict[str, float] = msgspec.field(default_factory=dict)
    """Seconds the round spent in each pipeline layer up to the one that rejected it
    (empty in logs written before it was recorded)."""


class RetryDecided(EventBase, tag="retry_decided", kw_only=True, frozen=True, gc=False):
    """The Max-N runtime's decision about a rejected round (seed 003)."""

    round: int
    attempt: int
    fault_kind: str
    classification: str
    decision: str
    """``fix``, ``retry-validator``, ``escalate-exhausted`` or ``escalate-permanent``."""
    budget_used: int
    budget_limit: int


class ConfirmationStarted(
    EventBase, tag="confirmation_started", kw_only=True, frozen=True, gc=False
):
    """The round's failing required validations run once more on the same inputs before a
    fix is asked for (``policy.confirm_failures``); their calls follow. One that passes now
    is flaky: the round fails it as an infrastructure fault, kind ``flaky``."""

    round: int
    nodes: list[str]
    """The validation nodes run again, in the order they failed."""


class FixRequested(EventBase, tag="fix_requested", kw_only=True, frozen=True, gc=False):
    """The rejection went back to the execution actor (seed 000, self-fix attempt)."""

    attempt: int
    note: str | None = None


class StrategyRevisionRequested(
    EventBase, tag="strategy_revision_requested", kw_only=True, frozen=True, gc=False
):
    """The retry budget is spent: back to Strategize with the history (seed 000 step 5)."""

    revision: int
    reason: str


class EscalationRequested(
    EventBase, tag="escalation_requested", kw_only=True, frozen=True, gc=False
):
    """The plan needs a person (seed 000 step 6)."""

    reason: str
    """``exhausted`` or ``permanent``."""
    message: str


class EscalationDecided(EventBase, tag="escalation_decided", kw_only=True, frozen=True, gc=False):
    """A person's decision on an escalation: retry or abort."""

    action: str
    note: str | None = None


class ApprovalRequired(EventBase, tag="approval_required", kw_only=True, frozen=True, gc=False):
    """The approval layer needs a person (seed 002 §8: NeedsApproval)."""

    round: int
    tier: str
    message: str
    verdict: dict[str, Any] | None = None
    """The round's seed 003 attestation, which the person is asked to approve (absent in
    logs written before it was recorded)."""


class AttestationRequired(
    EventBase, tag="attestation_required", kw_only=True, frozen=True, gc=False
):
    """The round passed, and the plan waits for outside validators to attest every one of
    its acceptance criteria before it is applied (``policy.outside_validators``)."""

    round: int
    needed: int
    """How many validators besides gategraph's own round must attest each criterion."""
    criteria: int
    """How many acceptance criteria the plan has."""
    policy: str = "no-rejection"
    """How their verdicts combine (``policy.attestation``): ``no-rejection`` or
    ``any-attests``."""


class AttestationsReceived(
    EventBase, tag="attestations_received", kw_only=True, frozen=True, gc=False
):
    """Every acceptance criterion is attested by enough outside validators: on to Apply."""

    round: int
    validators: list[str]
    """The outside validators whose attestations cover the plan, sorted."""
    policy: str = "no-rejection"
    """How their verdicts combined (``policy.attestation``)."""


class ApprovalDecided(EventBase, tag="approval_decided", kw_only=True, frozen=True, gc=False):
    """A person's answer to :class:`ApprovalRequired` (seed 002: ApprovalDecision)."""

    approved: bool
    note: str | None = None
    waited: float = 0.0
    """Seconds between the request and the answer."""


class ApplyStarted(EventBase, tag="apply_started", kw_only=True, frozen=True, gc=False):
    """Apply began: the point of no return (seed 000)."""

    resources: list[str]


class ApplyCompleted(EventBase, tag="apply_completed", kw_only=True, frozen=True, gc=False):
    """Every resource's changeset is committed."""

    changes: dict[str, str]
    """A summary of the changes, by resource."""


class PlanFinished(EventBase, tag="plan_finished", kw_only=True, frozen=True, gc=False):
    """The plan ended, or paused waiting for a person."""

    status: str
    """``applied``, ``failed``, ``awaiting_decision``, ``awaiting_approval`` or
    ``awaiting_attestation``."""
    message: str = ""


Event = (
    PlanStarted
    | StrategyProduced
    | ArtifactValidationStarted
    | ArtifactValidated
    | ArtifactRejected
    | RetryDecided
    | ConfirmationStarted
    | FixRequested
    | StrategyRevisionRequested
    | EscalationRequested
    | EscalationDecided
    | ApprovalRequired
    | ApprovalDecided
    | AttestationRequired
    | AttestationsReceived
    | ApplyStarted
    | ApplyCompleted
    | PlanFinished
    | PlanResumed
    | WorkFinished
    | RunStarted
    | RunFinished
    | NodeStarted
    | NodeCompleted
    | NodeSkipped
    | ValidationStarted
    | ValidationCompleted
    | ArtifactProduced
)
"""Any event."""

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(Event)


def encode_event(event: EventBase) -> bytes:
    """Encode an event as JSON bytes."""
    return _encoder.encode(event)


def decode_event(data: bytes | str) -> Event:
    """Decode JSON produced by :func:`encode_event`."""
    return _decoder.decode(data)
