"""The layered validation pipeline (seed 002) and the verdict envelope of each round (seed 003).

Layers run in a fixed order — routing, payload, semantic, approval — and the first
rejection skips the rest (seed 002 §5.2). Outcomes are :class:`Passed`,
:class:`Rejected` and :class:`NeedsApproval` (seed 002 §9).
"""

from __future__ import annotations

import datetime as dt
import fnmatch
from typing import TYPE_CHECKING, Any, Final

import msgspec
from gategraph.runtime._base._protocols import Applicable
from gategraph.runtime._data._maxn import (
    BAD_ARGUMENTS,
    FLAKY,
    MISCONFIGURED,
    NO_ACCEPTANCE_CRITERIA,
    RUNTIME_FAULT,
    UNAVAILABLE,
    WORK_ERROR,
    FaultKind,
    classify,
)
from gategraph.runtime._data._models import Validation, ValidationMode
from gategraph.runtime._data._results import ResultError, ValidationResult, enforcement
from gategraph.runtime._data._verdicts import VALIDATOR_ID
from gategraph.runtime._definitions._evidence import PlanRoster

from ._engine import ATTACHMENT_PREFIX as ATTACHMENT
from ._engine import NodeResult, NodeStatus, ValidationRecord

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph

__all__ = [
    "ATTACHMENT",
    "LAYERS",
    "RUNTIME_ERRORS",
    "NeedsApproval",
    "Passed",
    "Reason",
    "Rejected",
    "ValidationOutcome",
    "applicable_validations",
    "build_verdict",
    "check_approval",
    "check_payload",
    "logged_result",
    "payload_reason",
    "retry_only_nodes",
    "round_faults",
    "routing_reason",
    "runtime_error",
    "semantic_outcome",
    "semantic_reasons",
    "uncallable_reason",
    "with_descendants",
    "work_failed_reason",
]

LAYERS: Final = ("routing", "payload", "semantic", "approval")
"""The pipeline's layers, in the order they run (seed 002 §5.2; immutable, §12)."""


class Reason(msgspec.Struct, kw_only=True, frozen=True):
    """Why a layer rejected an artifact."""

    layer: str
    message: str
    node: str | None = None
    """The validation node (or attachment) that failed, for a semantic reason."""
    error: str | None = None
    """The failed result's ``data.error`` (``timeout``, ``exception`` ...), if any."""

    def __str__(self) -> str:
        where = f"{self.node}: " if self.node else ""
        return f"{self.layer}: {where}{self.message}"


# How a routing reason reads, by its fault kind. The log keeps reasons as text; replay
# reads the kind back from it (routing_reason), so the two cannot drift.
_WORK_FAILED: Final[dict[str | None, str]] = {
    None: "the execution actor failed: ",
    MISCONFIGURED: "the work cannot run as configured: ",
    RUNTIME_FAULT: "gategraph itself failed (please report this): ",
    WORK_ERROR: "the execution actor failed the same way twice: ",
}
# The payload reason of an artifact that is not JSON: no attempt of the same code encodes.
_NOT_JSON: Final = "the artifact is not JSON-compatible: "
_UNCALLABLE: Final = "cannot be called: "


def work_failed_reason(error: str, fault: str | None) -> Reason:
    """The routing reason for an execution actor that produced no artifact.

    ``fault`` is ``misconfigured`` (a work tool cannot be called), ``runtime_fault`` (a
    failure inside gategraph) or ``None`` (the execution actor's own failure: a fix).
    """
    return Reason(layer="routing", message=_WORK_FAILED[fault] + error, error=fault)


def payload_reason(text: str) -> Reason:
    """A payload reason rebuilt from its logged text (``str(reason)``)."""
    message = text.removeprefix("payload: ")
    return Reason(
        layer="payload",
        message=message,
        error=WORK_ERROR if message.startswith(_NOT_JSON) else None,
    )


def uncallable_reason(node: str, problem: str) -> Reason:
    """The routing reason for an applicable validation that cannot be called."""
    return Reason(layer="routing", node=node, message=_UNCALLABLE + problem, error=MISCONFIGURED)


def routing_reason(text: str) -> Reason:
    """A routing reason rebuilt from its logged text (``str(reason)``)."""
    body = text.removeprefix("routing: ")
    for fault, prefix in _WORK_FAILED.items():
        if body.startswith(prefix):
            return Reason(layer="routing", message=body, error=fault)
    # Node ids cannot contain ": ", so the first one ends the node.
    node, _, message = body.partition(": ")
    error = MISCONFIGURED if message.startswith(_UNCALLABLE) else None
    return Reason(layer="routing", node=node, message=message, error=error)


class Passed(msgspec.Struct, frozen=True):
    """Every layer accepted the artifact."""


class Rejected(msgspec.Struct, frozen=True):
    """A layer rejected the artifact, for these reasons."""

    layer: str
    reasons: tuple[Reason, ...]


class NeedsApproval(msgspec.Struct, frozen=True):
    """The approval layer wants a person's decision before the artifact may advance."""

    tier: str
    message: str


ValidationOutcome = Passed | Rejected | NeedsApproval


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def check_payload(artifact: Any, schema: Mapping[str, Any] | None) -> tuple[Reason, ...]:
    """The payload layer: the artifact is JSON and matches the declared schema, if any."""
    try:
        msgspec.json.encode(artifact)
    except (TypeError, ValueError, OverflowError) as exc:
        return (Reason(layer="payload", message=f"{_NOT_JSON}{exc}", error=WORK_ERROR),)
    if schema is None:
        return ()
    from jsonschema import validators

    validator = validators.validator_for(schema)(schema)
    reasons = []
    for error in sorted(validator.iter_errors(artifact), key=lambda e: list(e.absolute_path)):
        where = "/".join(str(p) for p in error.absolute_path) or "(the artifact)"
        reasons.append(Reason(layer="payload", message=f"{where}: {error.message}"))
    return tuple(reasons[:20])


def check_approval(
    graph: PlanGraph, ran: Sequence[str], *, auto_approve: bool
) -> ValidationOutcome:
    """The approval layer: the first rule matching a node that ran decides (seed 002 §8).

    ``approve`` passes; ``deny`` rejects; ``require`` and ``escalate`` need a person unless
    the rule's tier is auto-approved by the policy, or the session auto-approves.
    """
    policy = graph.policy.approval
    for rule in policy.rules:
        matched = [node for node in ran if fnmatch.fnmatchcase(node, rule.match)]
        if not matched:
            continue
        if rule.action == "approve":
            return Passed()
        if rule.action == "deny":
            return Rejected(
                "approval",
                (
                    Reason(
                        layer="approval",
                        message=f"denied by policy: {rule.match!r} matches {matched[0]}",
                    ),
                ),
            )
        if rule.tier in policy.auto_approve or auto_approve:
            return Passed()
        verb = "needs approval" if rule.action == "require" else "is escalated"
        return NeedsApproval(rule.tier, f"{matched[0]} {verb} (tier {rule.tier})")
    return Passed()


def applicable_validations(
    graph: PlanGraph, catalog: Catalog | None, plan_id: str
) -> list[Applicable]:
    """The validations that apply to a plan: its graph's validation nodes, then the
    catalog's attachments to its resources (under its project and ``plan_id``), each with
    the acceptance criteria it is bound to."""
    found: list[Applicable] = []
    by_name: dict[str, list[str]] = {}
    for criterion in graph.acceptance:
        for name in criterion.validations:
            by_name.setdefault(name, []).append(criterion.id)
    modes: dict[str, str] = {}  # one lookup per validation, not per node
    for node in graph.validation_nodes():
        target = node.validation
        assert target is not None  # a validation node's
        mode = modes.get(target)
        if mode is None:
            tool = graph.get_tool(target)
            mode = modes[target] = tool.mode.value if isinstance(tool, Validation) else "required"
        criteria = tuple(by_name.get(node.id, []) + by_name.get(target, [])) if by_name else ()
        found.append(Applicable(id=node.id, validation=target, mode=mode, criteria=criteria))
    if catalog is not None:
        for name in graph.resources:
            for att in catalog.resolve(name, project=graph.project, plan=plan_id):
                validation = catalog.get(att.validation)
                assert isinstance(validation, Validation)
                found.append(
                    Applicable(
                        id=f"{ATTACHMENT}{att.id}",
                        validation=att.validation,
                        mode=validation.mode.value,
                        attachment_id=att.id,
                        criteria=tuple(by_name.get(att.validation, [])),
                    )
                )
    return found


def build_verdict(
    plan_id: str,
    graph: PlanGraph,
    applicable: Sequence[Applicable],
    records: Mapping[str, ValidationRecord],
    roster: PlanRoster | None = None,
    *,
    validator_id: str = VALIDATOR_ID,
) -> dict[str, Any]:
    """The round's seed 003 envelope: one finding per acceptance criterion of ``roster``
    (the plan's, by default), each named by the criterion's UUID, signed ``validator_id``.

    With no criteria declared, each required validation is its own criterion. Informational
    results never count against a criterion (seed 000). A required validation that failed
    because of an infrastructure fault (timeout, exception, malformed ...) makes its
    criterion ``inconclusive`` rather than ``fail``: nothing was decided.
    """
    now = _now()
    roster = roster or PlanRoster(plan_id, graph, applicable)
    findings: list[dict[str, Any]] = []
    failing_names: list[str] = []
    prefix = roster.id_prefix
    found = records.get
    add = findings.append
    for ordinal, (key, bound) in enumerate(roster.keys(), start=1):
        criterion_id = f"{prefix}{ordinal:012x}"  # roster.id_of(ordinal), without the call
        if len(bound) == 1 and (one := found(bound[0].id)) is not None:
            result = one.result
            if result.passed:
                # The common case, worked out without the general case's lists: a plan of
                # 100,000 validations has as many criteria when it declares none.
                node = one.node
                add(
                    {
                        "acId": criterion_id,
                        "status": "pass",
                        "reasoning": f"{node}: {result.message or 'passed'}",
                        "evidenceRefs": ["validation:" + node],
                        "checkedAt": now,
                    }
                )
                continue
        failed = [
            records[a.id] for a in bound if a.id in records and not records[a.id].result.passed
        ]
        missing = [a.id for a in bound if a.id not in records]
        if not failed and not missing:
            status = "pass"
            reasoning = (
                "; ".join(f"{a.id}: {records[a.id].result.message or 'passed'}" for a in bound)
                or "no required validation is bound to this criterion"
            )
        else:
            infra = all(r.result.data.get("error") for r in failed)
            status = "inconclusive" if (failed and infra) or (missing and not failed) else "fail"
            parts = [f"{r.node}: {r.result.message or 'failed'}" for r in failed]
            parts += [f"{m}: did not run" for m in missing]
            reasoning = "; ".join(parts)
            # The plan's own name for it (its acceptance id, or the validation it stands
            # for): what its author wrote, and what `gategraph show` lists.
            failing_names.append(key)
        findings.append(
            {
                "acId": criterion_id,
                "status": status,
                "reasoning": reasoning,
                "evidenceRefs": [f"validation:{a.id}" for a in bound],
                "checkedAt": now,
            }
        )
    if not findings:
        # seed 003: an empty roster is never auto-attested, unless the plan says so.
        ungated = graph.policy.allow_ungated
        failing_names = [] if ungated else ["plan"]
        findings.append(
            {
                "acId": "plan",
                "status": "pass" if ungated else "inconclusive",
                "reasoning": "the plan has no required validation"
                + (" (its policy allows an ungated plan)" if ungated else ": nothing gates it"),
                "checkedAt": now,
            }
        )
    failing = [f for f in findings if f["status"] != "pass"]
    if not failing:
        return {
            "verdict": "attest",
            "taskId": plan_id,
            "validatorId": validator_id,
            "findings": findings,
            "summary": f"All {len(findings)} acceptance criteria pass.",
            "attestedAt": now,
            "schemaVersion": "1",
        }
    return {
        "verdict": "reject",
        "taskId": plan_id,
        "validatorId": validator_id,
        "findings": findings,
        "summary": (
            f"{len(failing)} of {len(findings)} acceptance criteria do not pass: "
            + ", ".join(failing_names)
        ),
        "remediationHints": [f["reasoning"] for f in failing][:10],
        "rejectedAt": now,
        "schemaVersion": "1",
    }


RUNTIME_ERRORS: Final = frozenset(
    {
        ResultError.MALFORMED,
        ResultError.EXCEPTION,
        ResultError.TIMEOUT,
        ResultError.TOO_LARGE,
        ResultError.READ_ONLY_VIOLATION,
        # A built-in's word that its configuration is wrong: it decided nothing.
        BAD_ARGUMENTS,
        # An MCP server that would not start, went away or did not answer.
        UNAVAILABLE,
        # A validation that cannot be called as configured, found only when it runs (an
        # MCP tool its server no longer has, a sandboxed entrypoint that does not import).
        MISCONFIGURED,
        # A failure that did not hold when run again on the same inputs.
        FLAKY,
    }
)
"""The ``data.error`` kinds gategraph itself gives a failed call: infrastructure faults."""


def runtime_error(result: ValidationResult) -> str | None:
    """The result's ``data.error`` if gategraph made it (an infrastructure fault), else None.

    An ``error`` a validation reports itself is its verdict, not a fault of the machinery.
    """
    error = result.data.get("error")
    return error if error in RUNTIME_ERRORS else None


def semantic_reasons(
    records: Mapping[str, ValidationRecord],
    results: Iterable[NodeResult] = (),
    applicable: Iterable[Applicable] = (),
) -> tuple[Reason, ...]:
    """The semantic layer's reasons, as the supervisor gives them.

    Each required validation that did not pass (``records``); each node of the validation
    phase that failed or was skipped (``results``: the round's nodes, any status); each
    required ``applicable`` validation with neither a record nor a result ("did not run").
    """
    results = list(results)
    # (`ValidationRecord.blocking` and the status test, inline: a round of 100,000
    # validations reads them all.)
    blocks = ValidationMode.REQUIRED
    reasons = [
        Reason(
            layer="semantic",
            node=r.node,
            message=r.result.message or "failed",
            error=runtime_error(r.result),
        )
        for r in records.values()
        if r.mode is blocks and not r.result.passed
    ]
    ok = NodeStatus.OK
    reasons += [
        Reason(layer="semantic", node=n.node, message=n.error or n.status.value, error="exception")
        for n in results
        if n.status is not ok
    ]
    seen = {n.node for n in results}
    required = ValidationMode.REQUIRED.value
    reasons += [
        Reason(layer="semantic", node=a.id, message="did not run", error="exception")
        for a in applicable
        if a.mode == required and a.id not in records and a.id not in seen
    ]
    return tuple(reasons)


def semantic_outcome(
    plan_id: str,
    graph: PlanGraph,
    applicable: Sequence[Applicable],
    records: Mapping[str, ValidationRecord],
    results: Mapping[str, NodeResult],
) -> tuple[Passed | Rejected, dict[str, Any]]:
    """The semantic layer's outcome and the round's verdict envelope.

    Invariant: ``Passed`` only with an attestation: every required validation ran and
    passed. A verdict that does not attest rejects even without a reason of its own.
    """
    verdict = build_verdict(plan_id, graph, applicable, records)
    reasons = semantic_reasons(records, results.values(), applicable)
    if not graph.policy.allow_ungated and not any(
        a.mode == ValidationMode.REQUIRED.value for a in applicable
    ):
        reasons = (
            *reasons,
            Reason(
                layer="semantic",
                message="no required validation gates this plan (every validation is "
                "informational, or there is none): add a required validation or an "
                "acceptance criterion, or allow it (`policy.allow_ungated: true` in a graph, "
                "allow_ungated=True for validate())",
                error=NO_ACCEPTANCE_CRITERIA,
            ),
        )
    if reasons or verdict.get("verdict") != "attest":
        summary = str(verdict.get("summary", "rejected"))
        return Rejected(
            "semantic", reasons or (Reason(layer="semantic", message=summary),)
        ), verdict
    return Passed(), verdict


def with_descendants(graph: PlanGraph, nodes: Iterable[str]) -> list[str]:
    """``nodes`` and every graph node after them (attachments have none): what a
    validator-only retry re-runs."""
    found: list[str] = []
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if node in found:
            continue
        found.append(node)
        if not node.startswith(ATTACHMENT):
            pending.extend(graph.dependents(node))
    return found


def round_faults(outcome: Rejected) -> list[FaultKind]:
    """Classify a rejected round's faults (Max-N, seed 003), one per reason.

    Semantic reasons by their runtime error (none: ``rejected``); every routing, payload
    or approval reason is a rejection — including the execution actor's own failure: only
    the execution actor can do something about it, so it goes back to it as a fix
    (re-running the validators on the same missing artifact would not help). Never empty.
    """
    faults: list[FaultKind] = []
    for reason in outcome.reasons:
        # A routing reason carries an error when the cause is not the work's: a validation
        # that cannot be called (misconfigured), or the runtime's own failure.
        fault = classify(reason.error, False)
        if fault is not None:
            faults.append(fault)
    if not faults:
        rejected = classify(None, False)
        assert rejected is not None  # Invariant: a failed result always has a row.
        faults.append(rejected)
    return faults


def retry_only_nodes(outcome: Rejected) -> list[str] | None:
    """The nodes a ``retry-validator`` decision re-runs: those failed by a runtime error."""
    return [r.node for r in outcome.reasons if r.node is not None and r.error is not None] or None


def logged_result(event: Any, kind: str, mode: str | None) -> NodeResult | None:
    """A node's result as its ``validation_completed``, ``node_completed`` or
    ``node_skipped`` event records it; None for any other event.

    ``kind`` is the node's kind (``work``, ``validation``, ``actor``), ``mode`` a
    validation's mode (``required`` when unknown). Replay and a resumed supervisor both
    read a round's results this way, so they cannot read them differently.
    """
    tag = type(event).__struct_config__.tag
    if tag == "validation_completed":
        return ValidationRecord(
            node=event.node,
            kind="validation",
            status=NodeStatus.OK,
            output=event.result,
            duration=event.duration,
            attempt=event.attempt,
            validation=event.validation,
            mode=ValidationMode(mode or ValidationMode.REQUIRED.value),
            attachment_id=event.attachment_id,
            result=event.result,
            isolation=event.isolation,
            enforced_by=enforcement(event.isolation),
            network=event.network,
            reused_from=event.reused_from,
        )
    if tag == "node_completed":
        return NodeResult(
            node=event.node,
            kind=kind,
            status=NodeStatus.OK if event.ok else NodeStatus.FAILED,
            output=event.output,
            error=event.error,
            duration=event.duration,
            attempt=event.attempt,
            captured=event.captured,
        )
    if tag == "node_skipped":
        return NodeResult(node=event.node, kind=kind, status=NodeStatus.SKIPPED, error=event.reason)
    return None
