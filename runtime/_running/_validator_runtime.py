"""The standalone Max-N runtime of seed 003: a lead's validate → fix loop, on one budget.

:func:`run_validator_max_n` drives one task (a plan) through the loop a lead runs with
independent validators: spawn a validator; an attestation ends it (``attested``); a
rejection goes back to the worker (``respawn_worker``) and a new validator is spawned;
a validator that could not decide (it raised, timed out, answered something that is not
an envelope) is spawned again after its fault's backoff, without bothering the worker.
Every round consumes one slot of the one shared budget (``validator_retry_max``) whatever
its fault, so alternating faults cannot get past it; a permanent fault (an empty roster:
``no_acceptance_criteria``) escalates at once. Each round is one attempt, kept in the
result and mirrored to the JSONL audit.

The budget, the fault catalogue, the backoff and the audit lines are the supervisor's
own (:func:`~gategraph.runtime._data._maxn.decide_attempt`): the supervisor's failure ladder
and this runtime decide the same way, from the same code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import anyio.to_thread
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._data._maxn import (
    AUDIT_FILE,
    DEFAULT_RETRY_LIMIT,
    FAULT_CATALOGUE,
    AuditLog,
    AuditRecorder,
    FaultFamily,
    FaultKind,
    MaxNPolicy,
    RetryBudget,
    RetryDecision,
    decide_attempt,
    wait_backoff,
)
from gategraph.runtime._data._results import ResultError
from gategraph.runtime._data._verdicts import (
    ValidatorAttestation,
    ValidatorRejection,
    parse_verdict,
)

if TYPE_CHECKING:
    import os

__all__ = [
    "ValidatorFault",
    "ValidatorRuntimeDeps",
    "ValidatorRuntimeOptions",
    "ValidatorRuntimeResult",
    "ValidatorSpawnRequest",
    "run_validator_max_n",
]

RuntimeOutcome = Literal["attested", "escalate-exhausted", "escalate-permanent"]

_ESCALATIONS: Final = {
    RetryDecision.ESCALATE_EXHAUSTED: "escalate-exhausted",
    RetryDecision.ESCALATE_PERMANENT: "escalate-permanent",
}


class ValidatorFault(Exception):
    """Raised by a ``spawn_validator`` whose validator could not reach a verdict: an
    infrastructure fault of ``kind`` (a row of the fault catalogue: ``timeout``,
    ``unavailable``, ``no_acceptance_criteria`` ...). An unknown kind, or a semantic one
    (``rejected``, ``inconclusive``: a validator that decided answers with its envelope),
    counts as ``exception``."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(message or kind)
        self.kind = kind


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValidatorSpawnRequest:
    """What ``spawn_validator`` is asked for: a new, independent validator of ``task_id``."""

    task_id: str
    attempt: int
    """The round, from 1."""
    project_root: Path | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValidatorRuntimeDeps:
    """What the loop calls (each injectable, so a test needs no validator and never waits).

    ``spawn_validator`` returns the new validator's envelope (a
    :class:`ValidatorAttestation` or :class:`ValidatorRejection`, or its JSON: a mapping or
    text) or raises :class:`ValidatorFault`; ``respawn_worker(task_id, rejection,
    attempt)`` sends the rejection back to the worker and returns when it is fixed.
    """

    spawn_validator: Callable[[ValidatorSpawnRequest], Awaitable[Any]]
    respawn_worker: Callable[[str, ValidatorRejection, int], Awaitable[object]]
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep
    now: Callable[[], datetime] = dataclasses.field(default=lambda: datetime.now(UTC))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValidatorRuntimeOptions:
    """How the loop runs."""

    validator_retry_max: int = DEFAULT_RETRY_LIMIT
    """The shared budget: rounds that may be retried, whatever their fault."""
    project_root: str | os.PathLike[str] | None = None
    """Whose audit the attempts go to (``.gategraph/audit/validator-retries.jsonl``
    below it); by default the one beside the catalog."""
    suppress_audit: bool = False
    """Keep the attempts in the result only (tests)."""
    audit: AuditRecorder | None = None
    """Where the attempts go instead of the JSONL file."""

    def __post_init__(self) -> None:
        limit = self.validator_retry_max
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError.at(
                "validator_retry_max", f"must be a whole number, 0 or more, not {limit!r}"
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValidatorRuntimeResult:
    """How the loop ended: ``attested`` (with the attestation), or escalated to a person
    (``escalate-exhausted``: the budget or a fault's own retries are spent;
    ``escalate-permanent``: a fault no retry can help), with every attempt."""

    outcome: RuntimeOutcome
    task_id: str
    attestation: ValidatorAttestation | None = None
    rejection: ValidatorRejection | None = None
    """The last rejection, when one was given."""
    fault_kind: str | None = None
    """The fault that ended an escalated loop."""
    detail: str | None = None
    attempts: tuple[dict[str, Any], ...] = ()
    """One seed 003 audit line per round, in order."""


def _audit_for(options: ValidatorRuntimeOptions) -> AuditRecorder | None:
    if options.audit is not None:
        return options.audit
    if options.suppress_audit:
        return None
    if options.project_root is not None:
        from gategraph.runtime._base._home import DEFAULT_FOLDER

        return AuditLog(Path(options.project_root) / DEFAULT_FOLDER / "audit" / AUDIT_FILE)
    return AuditLog()


def _fault(kind: str) -> FaultKind:
    return FAULT_CATALOGUE.get(kind) or FAULT_CATALOGUE[ResultError.EXCEPTION]


def _infra(kind: str) -> FaultKind:
    """The row of a :class:`ValidatorFault`'s ``kind``: ``exception`` for one the catalogue
    does not have, or for a semantic kind (a validator that decided answers an envelope)."""
    found = _fault(kind)
    return _fault(ResultError.EXCEPTION) if found.family is FaultFamily.SEMANTIC else found


async def _verdict(
    deps: ValidatorRuntimeDeps, request: ValidatorSpawnRequest
) -> tuple[ValidatorAttestation | ValidatorRejection | None, FaultKind | None, str]:
    """The spawned validator's envelope, or the fault that kept it from one."""
    try:
        answer = await deps.spawn_validator(request)
    except ValidatorFault as exc:
        return None, _infra(exc.kind), str(exc)
    except TimeoutError as exc:
        return None, _fault(ResultError.TIMEOUT), f"the validator timed out: {exc}"
    except Exception as exc:
        return None, _fault(ResultError.EXCEPTION), f"the validator raised {exc!r}"
    if isinstance(answer, ValidatorAttestation | ValidatorRejection):
        answer = answer.to_json_dict()
    if not isinstance(answer, Mapping | str | bytes):
        return None, _fault(ResultError.MALFORMED), f"not a verdict envelope: {answer!r}"[:300]
    try:
        verdict = parse_verdict(answer)
    except ConfigError as exc:
        problems = "; ".join(f"{i.field}: {i.message}" for i in exc.issues)
        return None, _fault(ResultError.MALFORMED), f"not a verdict envelope: {problems}"
    if verdict.task_id != request.task_id:
        detail = f"the verdict is about task {verdict.task_id!r}, not {request.task_id!r}"
        return None, _fault(ResultError.MALFORMED), detail
    if isinstance(verdict, ValidatorAttestation):
        return verdict, None, ""
    failing = [f for f in verdict.findings if f.status != "pass"]
    kind = "inconclusive" if all(f.status == "inconclusive" for f in failing) else "rejected"
    return verdict, _fault(kind), verdict.summary


async def run_validator_max_n(
    task_id: str,
    deps: ValidatorRuntimeDeps,
    options: ValidatorRuntimeOptions | None = None,
) -> ValidatorRuntimeResult:
    """Drive ``task_id`` through validate → fix rounds until a validator attests it or the
    loop escalates (see the module's documentation). Cancellation propagates."""
    if not isinstance(task_id, str) or not task_id.strip():
        raise ConfigError.at("task_id", "must be a task's (a plan's) id")
    options = options or ValidatorRuntimeOptions()
    budget = RetryBudget(MaxNPolicy(limit=options.validator_retry_max))
    audit = _audit_for(options)
    root = Path(options.project_root) if options.project_root is not None else None
    attempts: list[dict[str, Any]] = []
    rejection: ValidatorRejection | None = None
    number = 0
    while True:
        number += 1
        request = ValidatorSpawnRequest(task_id=task_id, attempt=number, project_root=root)
        verdict, fault, detail = await _verdict(deps, request)
        if isinstance(verdict, ValidatorRejection):
            rejection = verdict
        decision, decided, attempt = decide_attempt(
            budget, task_id, number, [fault] if fault is not None else [], detail, now=deps.now
        )
        if audit is not None:
            await anyio.to_thread.run_sync(audit.record, attempt)
        attempts.append(attempt.to_audit())
        if decision is RetryDecision.ATTESTED and isinstance(verdict, ValidatorAttestation):
            return ValidatorRuntimeResult(
                outcome="attested",
                task_id=task_id,
                attestation=verdict,
                rejection=rejection,
                attempts=tuple(attempts),
            )
        if decided is None:  # pragma: no cover - a fault-free round is an attestation
            raise RuntimeError("Max-N: a round without a fault that is not an attestation")
        if decision is RetryDecision.FIX and isinstance(verdict, ValidatorRejection):
            # Only a rejection's faults are semantic (_fault keeps the others infra).
            await deps.respawn_worker(task_id, verdict, number)
            continue
        if decision is RetryDecision.RETRY_VALIDATOR:
            await wait_backoff(decided, budget.used_by(decided.kind), sleep=deps.sleep)
            continue
        return ValidatorRuntimeResult(
            outcome=_ESCALATIONS[decision],  # type: ignore[arg-type]
            task_id=task_id,
            rejection=rejection,
            fault_kind=decided.kind,
            detail=detail or None,
            attempts=tuple(attempts),
        )
