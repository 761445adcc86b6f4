"""Max-N: one retry budget shared by every fault of a plan, and the catalogue of faults.

Seed 003 ("Max-N Runtime") drives the execute → validate loop with one retry counter that
spans both semantic faults (the validator decided: a rejection) and infrastructure faults
(the validator could not decide: a timeout, a crash). Each fault is a row of
:data:`FAULT_CATALOGUE`; a row says its family, whether it is transient or permanent, how
often it may be retried and how long to wait first. The seed leaves the rows to us
(DESIGN.md, "Decisions"); ``docs/maxn.md`` lists them with the reason for each.

The rules, in short (``docs/maxn.md`` has a worked example):

* every round with a fault consumes ONE slot of the shared budget, whatever its family,
  so alternating fault kinds cannot get past the limit;
* a permanent fault escalates at once (``escalate-permanent``) and consumes nothing;
* a fault that finds the budget, or its own row's ``retries``, spent escalates
  (``escalate-exhausted``);
* otherwise a semantic fault goes back to the execution actor (``fix``) and an infra fault
  re-runs only the validation that failed (``retry-validator``).

Nothing here knows about graphs or the supervisor: the supervisor classifies each failed
validation with :func:`classify`, asks a :class:`RetryBudget` what to do, waits with
:func:`wait_backoff` and writes one :class:`Attempt` per round to an :class:`AuditLog`::

    budget = RetryBudget(MaxNPolicy())
    faults = [f for r in results if (f := classify(r.data.get("error"), r.passed))]
    decision = budget.decide_round(faults)
    audit.record(Attempt.create(plan_id, attempt, decision, primary_fault(faults)))
"""

from __future__ import annotations

import enum
import os
import random as _random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Final, Protocol, Self, runtime_checkable

import anyio
import anyio.lowlevel
import msgspec
from gategraph.runtime._base._exceptions import ConfigError, ConfigIssue, RuntimeFault
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    model_validator,
)

from ._results import ResultError

__all__ = [
    "AUDIT_FILE",
    "BAD_ARGUMENTS",
    "DEFAULT_RETRY_LIMIT",
    "FAULT_CATALOGUE",
    "FLAKY",
    "MISCONFIGURED",
    "NO_ACCEPTANCE_CRITERIA",
    "RUNTIME_FAULT",
    "WORK_ERROR",
    "Attempt",
    "AuditLog",
    "AuditRecorder",
    "Backoff",
    "FaultClass",
    "FaultFamily",
    "FaultKind",
    "InMemoryAuditLog",
    "MaxNPolicy",
    "RetryBudget",
    "RetryDecision",
    "classify",
    "decide_attempt",
    "default_audit_path",
    "primary_fault",
    "read_audit",
    "wait_backoff",
]

DEFAULT_RETRY_LIMIT: Final = 3
"""Retries shared by all faults of a plan (seed 003: ``DEFAULT_VALIDATOR_RETRY_MAX``)."""
AUDIT_FILE: Final = "validator-retries.jsonl"
"""The audit file's name, in the ``audit`` folder beside the catalog (seed 003)."""


class FaultFamily(enum.StrEnum):
    """Who is at fault: the work (semantic) or the machinery that checks it (infra)."""

    SEMANTIC = "semantic"
    """The validator decided, and the work does not pass: a finding for the worker to fix."""
    INFRA = "infra"
    """The validator could not decide: its process, transport or output failed."""


class FaultClass(enum.StrEnum):
    """Whether trying again can help."""

    TRANSIENT = "transient"
    """Trying again may succeed; retried within the budget."""
    PERMANENT = "permanent"
    """Trying again gives the same answer; escalated at once, never retried."""


class RetryDecision(enum.StrEnum):
    """What happens after a validation round (the ``retryDecision`` of an audit line)."""

    RETRY_VALIDATOR = "retry-validator"
    """Infra fault: re-run only the validation that failed; the worker is not disturbed."""
    FIX = "fix"
    """Semantic fault: back to the execution actor with the findings, then revalidate."""
    ESCALATE_EXHAUSTED = "escalate-exhausted"
    """The shared budget, or the fault kind's own retries, are spent."""
    ESCALATE_PERMANENT = "escalate-permanent"
    """A permanent fault: retrying cannot help."""
    ATTESTED = "attested"
    """The round passed: nothing to retry."""

    @property
    def escalates(self) -> bool:
        """Whether the loop stops here and hands the plan up (revision, then a person)."""
        return self in (RetryDecision.ESCALATE_EXHAUSTED, RetryDecision.ESCALATE_PERMANENT)

    @property
    def retries(self) -> bool:
        """Whether the loop goes round again (``fix`` or ``retry-validator``)."""
        return self in (RetryDecision.FIX, RetryDecision.RETRY_VALIDATOR)


class _Frozen(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
        allow_inf_nan=False,
    )


class Backoff(_Frozen):
    """How long to wait before the n-th retry: exponential, capped, with jitter.

    The base delay of retry ``n`` (1-based) is ``initial * factor ** (n - 1)``, capped at
    ``maximum``; jitter then takes up to ``jitter`` of it away at random, so callers that
    failed together do not retry together, and ``maximum`` stays a true ceiling.
    (temporalio's ``RetryPolicy``, with jitter added.)
    """

    initial: Annotated[float, Field(gt=0)] = 0.5
    """Seconds before the first retry."""
    factor: Annotated[float, Field(ge=1)] = 2.0
    """How much longer each wait is than the one before; 1 waits the same every time."""
    maximum: Annotated[float, Field(gt=0)] = 30.0
    """The longest wait, in seconds; at least ``initial``."""
    jitter: Annotated[float, Field(ge=0, lt=1)] = 0.1
    """Fraction of a delay taken away at random: 0.1 waits between 90% and 100% of it."""

    @model_validator(mode="after")
    def _maximum_covers_initial(self) -> Self:
        if self.maximum < self.initial:
            raise ValueError(f"maximum ({self.maximum}) must be at least initial ({self.initial})")
        return self

    def delay(self, attempt: int, *, random: Callable[[], float] = _random.random) -> float:
        """Return the seconds to wait before retry ``attempt`` (1-based).

        ``random`` returns a float in ``[0, 1)``; inject a fixed one to get a fixed delay.
        """
        if attempt < 1:
            raise ValueError(f"attempt must be 1 or more, got {attempt}")
        try:
            base = min(self.maximum, self.initial * self.factor ** (attempt - 1))
        except OverflowError:  # factor ** 10_000: far past the cap anyway
            base = self.maximum
        draw = random()
        if not 0.0 <= draw <= 1.0:
            raise ValueError(f"random() must return a float in [0, 1], got {draw!r}")
        return base * (1.0 - self.jitter * draw)


_KIND_PATTERN: Final = r"^[a-z][a-z0-9_]*$"


class FaultKind(_Frozen):
    """One row of the fault catalogue: a kind of fault and how the loop treats it."""

    kind: Annotated[str, Field(pattern=_KIND_PATTERN)]
    """The row's name (``timeout``); the ``faultKind`` of audit lines."""
    family: FaultFamily
    """``semantic`` (back to the worker) or ``infra`` (re-run the validation only)."""
    classification: FaultClass
    """``transient`` (may be retried) or ``permanent`` (escalated at once)."""
    retries: Annotated[int, Field(ge=0)]
    """How often this kind may be retried at most, within the shared budget; 0 if permanent."""
    backoff: Backoff | None = None
    """How long to wait before a retry; ``None`` retries at once (a fix is the wait)."""
    description: Annotated[str, Field(min_length=1)]
    """What the fault is and why the row says what it says."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        # Invariant: a permanent row is never retried, so it has no retries and no wait.
        if self.classification is FaultClass.PERMANENT:
            if self.retries != 0:
                raise ValueError("a permanent fault kind has retries=0")
            if self.backoff is not None:
                raise ValueError("a permanent fault kind has no backoff")
        elif self.retries < 1:
            raise ValueError("a transient fault kind has retries >= 1 (else make it permanent)")
        return self

    @property
    def permanent(self) -> bool:
        """Whether this kind escalates at once."""
        return self.classification is FaultClass.PERMANENT


def _row(
    kind: str,
    family: FaultFamily,
    classification: FaultClass,
    retries: int,
    backoff: Backoff | None,
    description: str,
) -> FaultKind:
    return FaultKind(
        kind=kind,
        family=family,
        classification=classification,
        retries=retries,
        backoff=backoff,
        description=description,
    )


_SEMANTIC, _INFRA = FaultFamily.SEMANTIC, FaultFamily.INFRA
_TRANSIENT, _PERMANENT = FaultClass.TRANSIENT, FaultClass.PERMANENT
_SLOW: Final = Backoff(initial=1.0, factor=2.0, maximum=30.0, jitter=0.1)

_REJECTED: Final = "rejected"
_INCONCLUSIVE: Final = "inconclusive"
UNAVAILABLE: Final = "unavailable"
"""The fault kind of a validator or executor that could not be reached (an MCP server
that will not start or went away, a dead worker)."""
NO_ACCEPTANCE_CRITERIA: Final = "no_acceptance_criteria"
"""The fault kind of a plan with nothing to check: no required validation gates it."""
_EVENT_LOG: Final = "event_log"
BAD_ARGUMENTS: Final = "bad_arguments"
"""The fault kind of a validation that says its own configured arguments are wrong."""
MISCONFIGURED: Final = "misconfigured"
"""The fault kind of a validation or work tool that cannot be called as configured."""
RUNTIME_FAULT: Final = "runtime_fault"
"""The fault kind of a failure inside gategraph itself (a bug, not the plan's fault)."""
WORK_ERROR: Final = "work_error"
"""The fault kind of work whose failure repeats itself: an artifact that cannot be encoded,
the same error from the execution actor twice in a row."""
FLAKY: Final = "flaky"
"""The fault kind of a validation that gave different outcomes on the same inputs."""

# The rows are ours (DESIGN.md, "Decisions"); docs/maxn.md is the table of record, keep both
# in step. Descriptions are shown to users, so they cite nothing: seed 003 decides that
# rejections loop to the worker, inconclusive forces a rejection and an empty roster is a
# permanent infra fault; seed 000 that a validation that writes is never retried. The per-kind ``retries`` only ever lower the shared budget, never raise it.
FAULT_CATALOGUE: Final[Mapping[str, FaultKind]] = MappingProxyType(
    {
        row.kind: row
        for row in (
            _row(
                _REJECTED,
                _SEMANTIC,
                _TRANSIENT,
                3,
                None,
                "A required validation returned passed=False on its own: a real finding. "
                "It goes back to the worker to fix; "
                "only the shared budget limits it.",
            ),
            _row(
                _INCONCLUSIVE,
                _SEMANTIC,
                _TRANSIENT,
                2,
                None,
                "A finding could not be decided, which counts as a rejection. "
                "The worker is asked for clearer evidence; two rounds without a decision "
                "mean a person should look.",
            ),
            _row(
                ResultError.TIMEOUT,
                _INFRA,
                _TRANSIENT,
                2,
                _SLOW,
                "The validation ran past its timeout: a loaded machine or a slow dependency. "
                "Wait, then re-run only the validation; a check that times out three times "
                "needs a longer timeout, which a person sets.",
            ),
            _row(
                ResultError.EXCEPTION,
                _INFRA,
                _TRANSIENT,
                2,
                Backoff(),
                "The validation raised: flaky I/O, a network hiccup. Re-run only the "
                "validation after a short wait; a deterministic bug raises again and "
                "escalates once its retries are spent.",
            ),
            _row(
                ResultError.MALFORMED,
                _INFRA,
                _TRANSIENT,
                1,
                None,
                "The validation's output broke the result format: the validator's bug, not "
                "the worker's. One immediate re-run covers a garbled stream (a truncated pipe, "
                "a model's stray text); waiting changes nothing.",
            ),
            _row(
                ResultError.TOO_LARGE,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "The result was larger than the runtime accepts. Re-running returns the "
                "same bytes.",
            ),
            _row(
                ResultError.READ_ONLY_VIOLATION,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "The validation tried to write. A validation that writes is broken and is "
                "never retried: running it again would write again.",
            ),
            _row(
                NO_ACCEPTANCE_CRITERIA,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "No required validation gates the plan (no acceptance criterion, every "
                "validation informational or none at all), so no verdict is possible until "
                "a person adds one or allows an ungated plan: an empty set of checks is never "
                "taken as a pass.",
            ),
            _row(
                FLAKY,
                _INFRA,
                _TRANSIENT,
                2,
                Backoff(),
                "A required validation failed, then passed when run again on the same files "
                "and arguments: its verdict cannot be trusted either way. Re-run only the "
                "validation after a short wait, on the shared budget; one that keeps "
                "disagreeing goes to a person. It is never skipped.",
            ),
            _row(
                UNAVAILABLE,
                _INFRA,
                _TRANSIENT,
                3,
                _SLOW,
                "A validator or executor could not be reached: a worker process died, a "
                "cluster node or an MCP server went away. Restarts take a while, so it "
                "waits longer and may use the whole budget.",
            ),
            _row(
                MISCONFIGURED,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "A validation or a work tool cannot be called as configured: its entrypoint "
                "does not import, its inline code defines no `run`, it names an MCP tool this "
                "version cannot call, its MCP server refuses its call. Neither a fix of the "
                "work nor a re-run changes that; a person corrects the graph or the catalog.",
            ),
            _row(
                BAD_ARGUMENTS,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "The validation says its configured arguments are wrong (a pattern that "
                "does not compile, a schema that is not a JSON Schema, a resource of the "
                "wrong kind). It cannot decide anything until a person corrects them; a fix "
                "of the work would change nothing.",
            ),
            _row(
                WORK_ERROR,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "The execution actor's code, not its work, is at fault, and another attempt "
                "would do the same: its artifact cannot be encoded (a path or an object of its "
                "own where JSON is needed), or it raised the same error twice in a row within "
                "one strategy (an `OSError` or a timeout excepted: a network may recover). Each "
                "attempt may be a paid model call; a person corrects the code.",
            ),
            _row(
                RUNTIME_FAULT,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "gategraph itself failed (a bug in the runtime, not in the plan or its "
                "validations). Retrying would hide it; a person looks, and reports it.",
            ),
            _row(
                _EVENT_LOG,
                _INFRA,
                _PERMANENT,
                0,
                None,
                "The event or audit log cannot be written (disk full, permissions). Every "
                "decision is recorded before it is acted on, so the run cannot go on.",
            ),
        )
    }
)
"""The fault kinds the runtime knows, by name (read-only); ``docs/maxn.md`` explains each."""

# classify() falls back on these two rows; a custom catalogue must have them.
_REQUIRED_ROWS: Final = (_REJECTED, ResultError.EXCEPTION)


def classify(
    result_error: str | None,
    passed: bool,
    *,
    catalogue: Mapping[str, FaultKind] = FAULT_CATALOGUE,
) -> FaultKind | None:
    """Return the catalogue row of one validation result, or ``None`` if it passed.

    ``result_error`` is the result's ``data["error"]`` (a :class:`ResultError` kind), or
    ``None`` when it has none. A failed result without an error is ``rejected``; an error
    that is a catalogue row is that row; any other error is ``exception``.
    """
    if passed:
        return None
    if result_error is None:
        return catalogue[_REJECTED]
    row = catalogue.get(result_error)
    return row if row is not None else catalogue[ResultError.EXCEPTION]


def _read_only_catalogue(value: Mapping[str, FaultKind]) -> Mapping[str, FaultKind]:
    issues = [
        f"key {key!r} names row {row.kind!r}" for key, row in value.items() if key != row.kind
    ]
    issues += [f"row {name!r} is missing" for name in _REQUIRED_ROWS if name not in value]
    if issues:
        raise ValueError("; ".join(issues))
    return value if isinstance(value, MappingProxyType) else MappingProxyType(dict(value))


class MaxNPolicy(_Frozen):
    """The retry policy of one plan: the shared limit and the catalogue of fault kinds."""

    limit: Annotated[int, Field(ge=0)] = DEFAULT_RETRY_LIMIT
    """Retries shared by every fault of the plan; 0 escalates the first fault."""
    catalogue: Annotated[
        Mapping[str, FaultKind],
        AfterValidator(_read_only_catalogue),
        PlainSerializer(dict, return_type=dict[str, FaultKind]),
    ] = Field(default_factory=lambda: FAULT_CATALOGUE)
    """The fault kinds, by name; must hold ``rejected`` and ``exception``. Read-only."""

    def classify(self, result_error: str | None, passed: bool) -> FaultKind | None:
        """:func:`classify` with this policy's catalogue."""
        return classify(result_error, passed, catalogue=self.catalogue)


def primary_fault(faults: Sequence[FaultKind]) -> FaultKind | None:
    """Return the fault that decides a round: the first permanent, else semantic, else any.

    It is the ``faultKind`` of the round's audit line; ``None`` for a round without faults.
    """
    for fault in faults:
        if fault.permanent:
            return fault
    for fault in faults:
        if fault.family is FaultFamily.SEMANTIC:
            return fault
    return faults[0] if faults else None


class RetryBudget:
    """The shared retry counter of one plan (seed 003, "Retry-counter accounting").

    Every round that is retried consumes ONE slot, whatever the family of its faults, so
    three faults of any mix use up the default budget and the next one escalates. A
    permanent fault escalates without consuming; an escalation never consumes. After an
    escalation the caller stops asking; a revised strategy starts a fresh budget with
    :meth:`reset` (the fixes so far were for the old strategy).
    """

    __slots__ = ("_by_kind", "_used", "policy")

    def __init__(self, policy: MaxNPolicy | None = None) -> None:
        self.policy: Final = policy if policy is not None else MaxNPolicy()
        """The limit and catalogue this budget applies."""
        self._used = 0
        self._by_kind: dict[str, int] = {}

    @property
    def limit(self) -> int:
        """The number of slots in all."""
        return self.policy.limit

    @property
    def used(self) -> int:
        """Slots consumed: rounds that were retried (``fix`` or ``retry-validator``)."""
        return self._used

    @property
    def remaining(self) -> int:
        """Slots left."""
        return self.limit - self._used

    def used_by(self, kind: str) -> int:
        """Rounds retried in which a fault of ``kind`` occurred."""
        return self._by_kind.get(kind, 0)

    def decide(self, fault: FaultKind) -> RetryDecision:
        """Decide what to do about one fault (a round with a single failed validation)."""
        return self.decide_round((fault,))

    def decide_round(self, faults: Sequence[FaultKind]) -> RetryDecision:
        """Decide one validation round from all its faults; consume one slot if it retries.

        No fault: ``attested``. Any permanent fault: ``escalate-permanent``. Budget spent,
        or the own ``retries`` of any fault kind in the round spent: ``escalate-exhausted``.
        Otherwise one slot is consumed and the round gets ``fix`` if any fault is semantic
        (the infra faults of that round are re-run with the fix anyway), else
        ``retry-validator``.
        """
        if not faults:
            return RetryDecision.ATTESTED
        if any(fault.permanent for fault in faults):
            return RetryDecision.ESCALATE_PERMANENT
        kinds = {fault.kind: fault for fault in faults}
        if self._used >= self.limit or any(
            self._by_kind.get(kind, 0) >= fault.retries for kind, fault in kinds.items()
        ):
            return RetryDecision.ESCALATE_EXHAUSTED
        # Invariant: used never exceeds the limit; each retried round adds exactly one.
        self._used += 1
        for kind in kinds:
            self._by_kind[kind] = self._by_kind.get(kind, 0) + 1
        if any(fault.family is FaultFamily.SEMANTIC for fault in faults):
            return RetryDecision.FIX
        return RetryDecision.RETRY_VALIDATOR

    def reset(self) -> None:
        """Start a fresh budget, for a revised strategy."""
        self._used = 0
        self._by_kind.clear()

    def __repr__(self) -> str:
        return f"RetryBudget(used={self._used}, limit={self.limit})"


def _utc_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise ValueError("the timestamp needs a timezone")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One validation round of a plan, as the audit log records it."""

    timestamp: str
    """When the round was decided: ISO-8601 in UTC, ending in ``Z``."""
    plan_id: str
    """The plan (seed 003's ``taskId``)."""
    attempt: int
    """The round's number within the plan, from 1."""
    fault_kind: str | None = None
    """The deciding fault's catalogue row (:func:`primary_fault`); ``None`` if it passed."""
    classification: str | None = None
    """``transient`` or ``permanent``; ``None`` if it passed."""
    decision: RetryDecision
    """What the budget decided."""
    detail: str | None = None
    """Free text: what failed, which validations, the error message."""

    @classmethod
    def create(
        cls,
        plan_id: str,
        attempt: int,
        decision: RetryDecision,
        fault: FaultKind | None = None,
        detail: str | None = None,
        *,
        now: Callable[[], datetime] | None = None,
    ) -> Attempt:
        """Build the record of a round, stamped with ``now()`` (the current UTC time)."""
        if attempt < 1:
            raise ValueError(f"attempt must be 1 or more, got {attempt}")
        moment = now() if now is not None else datetime.now(UTC)
        return cls(
            timestamp=_utc_timestamp(moment),
            plan_id=plan_id,
            attempt=attempt,
            fault_kind=fault.kind if fault is not None else None,
            classification=str(fault.classification) if fault is not None else None,
            decision=decision,
            detail=detail,
        )

    def to_audit(self) -> dict[str, Any]:
        """Return the audit line's fields, named as in seed 003 (``detail`` only if set).

        The plan id is under ``taskId`` (the seed's name) and ``planId`` (ours).
        """
        line: dict[str, Any] = {
            "timestamp": self.timestamp,
            "taskId": self.plan_id,
            "planId": self.plan_id,
            "attemptNumber": self.attempt,
            "faultKind": self.fault_kind,
            "classification": self.classification,
            "retryDecision": str(self.decision),
        }
        if self.detail is not None:
            line["detail"] = self.detail
        return line


def decide_attempt(
    budget: RetryBudget,
    plan_id: str,
    number: int,
    faults: Sequence[FaultKind],
    detail: str | None = None,
    *,
    now: Callable[[], datetime] | None = None,
) -> tuple[RetryDecision, FaultKind | None, Attempt]:
    """Decide round ``number`` of ``plan_id`` from its ``faults`` on ``budget``: the
    decision, the fault that decides it (:func:`primary_fault`) and the round's audit line.
    The supervisor's failure ladder and the standalone runtime both decide through here."""
    decision = budget.decide_round(faults)
    fault = primary_fault(faults)
    return (
        decision,
        fault,
        Attempt.create(plan_id, number, decision, fault, detail or None, now=now),
    )


class _AuditLine(msgspec.Struct, frozen=True, rename="camel"):
    """The wire form of an :class:`Attempt` (seed 003's names), decoded with type checks."""

    timestamp: str
    task_id: str
    attempt_number: int
    fault_kind: str | None
    classification: str | None
    retry_decision: RetryDecision
    detail: str | None = None
    plan_id: str | None = None

    def to_attempt(self) -> Attempt:
        return Attempt(
            timestamp=self.timestamp,
            plan_id=self.plan_id if self.plan_id is not None else self.task_id,
            attempt=self.attempt_number,
            fault_kind=self.fault_kind,
            classification=self.classification,
            decision=self.retry_decision,
            detail=self.detail,
        )


_encoder: Final = msgspec.json.Encoder()
_line_decoder: Final = msgspec.json.Decoder(_AuditLine)


def default_audit_path() -> Path:
    """The audit file: ``audit/validator-retries.jsonl`` beside the catalog."""
    from gategraph.runtime._base._home import default_catalog_path

    return default_catalog_path().parent / "audit" / AUDIT_FILE


def read_audit(
    path: str | os.PathLike[str] | None = None, *, plan_id: str | None = None
) -> list[Attempt]:
    """Return the attempts in an audit file, in file order; only ``plan_id``'s if given.

    A missing file reads as empty. A last line without its newline (a write cut short by
    a crash) is skipped; any other line that is not an audit record raises
    :class:`ConfigError` naming the file and the line.
    """
    file = Path(path) if path is not None else default_audit_path()
    try:
        content = file.read_bytes()
    except FileNotFoundError:
        return []
    lines = content.split(b"\n")
    # The piece after the last newline is empty, or a line torn by a crash.
    attempts: list[Attempt] = []
    issues: list[ConfigIssue] = []
    for number, raw in enumerate(lines[:-1], start=1):
        if not raw.strip():
            continue
        try:
            line = _line_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            issues.append(ConfigIssue(f"not an audit line: {exc}", line=number))
            continue
        attempt = line.to_attempt()
        if plan_id is None or attempt.plan_id == plan_id:
            attempts.append(attempt)
    if issues:
        raise ConfigError(issues, source=str(file))
    return attempts


@runtime_checkable
class AuditRecorder(Protocol):
    """Where attempts go: :class:`AuditLog` (a JSONL file) or :class:`InMemoryAuditLog`."""

    def record(self, attempt: Attempt) -> None:
        """Store one attempt."""

    def read(self, plan_id: str | None = None) -> list[Attempt]:
        """Return the stored attempts in order; only ``plan_id``'s if given."""


class AuditLog:
    """The audit trail as a JSONL file, one line per attempt (seed 003).

    Each line is written with a single ``os.write`` on a file opened with ``O_APPEND``, then
    fsynced, so processes appending to the same file at once never interleave lines. A
    write blocks for one fsync; call it from a worker thread where that matters.
    """

    __slots__ = ("path", "suppress")

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, suppress: bool = False
    ) -> None:
        self.path: Final = Path(path) if path is not None else default_audit_path()
        """The file; by default ``audit/validator-retries.jsonl`` beside the catalog."""
        self.suppress: Final = suppress
        """Write nothing (seed 003's ``suppressAudit``, for tests)."""

    def record(self, attempt: Attempt) -> None:
        """Append one line for ``attempt`` and make it durable.

        Raises :class:`RuntimeFault` if the file cannot be written: the ``event_log`` row of
        the catalogue (permanent).
        """
        if self.suppress:
            return
        data = _encoder.encode(attempt.to_audit()) + b"\n"
        try:
            fd = self._open()
            try:
                written = os.write(fd, data)
                if written != len(data):
                    # Another write for the rest could land after someone else's line.
                    raise OSError(f"short write: {written} of {len(data)} bytes")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise RuntimeFault(f"cannot write the audit log {self.path}: {exc}") from exc

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        try:
            return os.open(self.path, flags)
        except FileNotFoundError:
            pass
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, flags | os.O_CREAT, 0o644)
        # A new directory entry is durable only once its directory is synced.
        _fsync_directory(self.path.parent)
        return fd

    def read(self, plan_id: str | None = None) -> list[Attempt]:
        """Return the attempts in the file (see :func:`read_audit`)."""
        return read_audit(self.path, plan_id=plan_id)

    def __repr__(self) -> str:
        return f"AuditLog({str(self.path)!r}, suppress={self.suppress})"


def _fsync_directory(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms that cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - filesystems that refuse it
        pass
    finally:
        os.close(fd)


class InMemoryAuditLog:
    """The audit trail in memory, for embedding and tests."""

    __slots__ = ("attempts",)

    def __init__(self) -> None:
        self.attempts: Final[list[Attempt]] = []
        """Every attempt recorded, in order."""

    def record(self, attempt: Attempt) -> None:
        """Keep one attempt."""
        self.attempts.append(attempt)

    def read(self, plan_id: str | None = None) -> list[Attempt]:
        """Return the attempts in order; only ``plan_id``'s if given."""
        return [a for a in self.attempts if plan_id is None or a.plan_id == plan_id]


async def wait_backoff(
    fault: FaultKind,
    retry: int,
    *,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
    random: Callable[[], float] = _random.random,
) -> float:
    """Wait before retry number ``retry`` (1-based) of ``fault``; return the seconds waited.

    A row without backoff does not wait, but is still a checkpoint. ``sleep`` and ``random``
    are injectable so tests never wait. Cancellation propagates.
    """
    if fault.backoff is None:
        await anyio.lowlevel.checkpoint()
        return 0.0
    delay = fault.backoff.delay(retry, random=random)
    await sleep(delay)
    return delay
