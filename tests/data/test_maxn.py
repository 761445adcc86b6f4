"""Max-N (seed 003): the fault catalogue, the shared retry budget, backoff and the audit log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import anyio
import msgspec
import pytest
from gategraph.runtime import ConfigError, ResultError, RuntimeFault
from gategraph.runtime._data._maxn import (
    AUDIT_FILE,
    DEFAULT_RETRY_LIMIT,
    FAULT_CATALOGUE,
    Attempt,
    AuditLog,
    AuditRecorder,
    Backoff,
    FaultClass,
    FaultFamily,
    FaultKind,
    InMemoryAuditLog,
    MaxNPolicy,
    RetryBudget,
    RetryDecision,
    classify,
    default_audit_path,
    primary_fault,
    read_audit,
    wait_backoff,
)
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

ROW = FAULT_CATALOGUE
REJECTED, INCONCLUSIVE = ROW["rejected"], ROW["inconclusive"]
TIMEOUT, EXCEPTION, MALFORMED = ROW["timeout"], ROW["exception"], ROW["malformed"]
UNAVAILABLE, TOO_LARGE = ROW["unavailable"], ROW["too_large"]
READ_ONLY, NO_ACS, EVENT_LOG = (
    ROW["read_only_violation"],
    ROW["no_acceptance_criteria"],
    ROW["event_log"],
)
D = RetryDecision
FIXED_NOW = datetime(2026, 5, 25, 12, 0, 0, 123456, tzinfo=UTC)


def _attempt(plan: str, number: int, decision: RetryDecision = D.FIX, **kw: object) -> Attempt:
    fault = kw.pop("fault", REJECTED)
    assert fault is None or isinstance(fault, FaultKind)
    detail = kw.pop("detail", None)
    assert detail is None or isinstance(detail, str)
    return Attempt.create(plan, number, decision, fault, detail, now=lambda: FIXED_NOW)


# --- the catalogue -----------------------------------------------------------------------


EXPECTED_ROWS = {
    # kind: (family, class)
    "rejected": ("semantic", "transient"),
    "inconclusive": ("semantic", "transient"),
    "timeout": ("infra", "transient"),
    "exception": ("infra", "transient"),
    "malformed": ("infra", "transient"),
    "too_large": ("infra", "permanent"),
    "read_only_violation": ("infra", "permanent"),
    "no_acceptance_criteria": ("infra", "permanent"),
    "unavailable": ("infra", "transient"),
    "flaky": ("infra", "transient"),
    "event_log": ("infra", "permanent"),
    "misconfigured": ("infra", "permanent"),
    "bad_arguments": ("infra", "permanent"),
    "runtime_fault": ("infra", "permanent"),
    "work_error": ("infra", "permanent"),
}


def test_catalogue_has_the_documented_rows() -> None:
    """Every required row is there with its family and class."""
    assert {k: (r.family, r.classification) for k, r in ROW.items()} == EXPECTED_ROWS


@pytest.mark.parametrize("kind", sorted(EXPECTED_ROWS))
def test_catalogue_row_invariants(kind: str) -> None:
    """Each row: keyed by its kind, described, permanent ⇒ no retries, semantic ⇒ no wait."""
    row = ROW[kind]
    assert row.kind == kind
    assert len(row.description) > 40
    assert row.permanent is (row.classification is FaultClass.PERMANENT)
    if row.permanent:
        assert row.retries == 0
        assert row.backoff is None
    else:
        assert 1 <= row.retries <= DEFAULT_RETRY_LIMIT
    if row.family is FaultFamily.SEMANTIC:
        assert row.backoff is None
        assert not row.permanent


def test_backoff_rows() -> None:
    """Timeouts, exceptions and unreachable validators wait; malformed output does not."""
    assert TIMEOUT.backoff is not None
    assert EXCEPTION.backoff is not None
    assert UNAVAILABLE.backoff is not None
    assert MALFORMED.backoff is None


def test_every_result_error_is_a_row() -> None:
    """Each ResultError kind has a catalogue row of the same name."""
    kinds = {v for k, v in vars(ResultError).items() if k.isupper()}
    assert kinds == {"malformed", "exception", "timeout", "too_large", "read_only_violation"}
    assert kinds <= set(ROW)


def test_catalogue_is_read_only() -> None:
    """The catalogue cannot be changed in place."""
    with pytest.raises(TypeError):
        ROW["timeout"] = REJECTED  # type: ignore[index]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"classification": "permanent", "retries": 1}, "retries=0"),
        ({"classification": "permanent", "retries": 0}, "no backoff"),
        ({"retries": 0}, "retries >= 1"),
        ({"retries": -1}, "greater than or equal"),
        ({"kind": "Time Out"}, "pattern"),
        ({"description": ""}, "at least 1 character"),
    ],
)
def test_fault_kind_is_validated(changes: dict[str, object], message: str) -> None:
    """A row that breaks an invariant is refused."""
    fields = TIMEOUT.model_dump() | changes
    with pytest.raises(ValidationError, match=message):
        FaultKind.model_validate(fields)


def test_fault_kind_is_frozen() -> None:
    """Rows are frozen."""
    with pytest.raises(ValidationError):
        TIMEOUT.retries = 9  # type: ignore[misc]


# --- classification ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ResultError.MALFORMED, "malformed"),
        (ResultError.EXCEPTION, "exception"),
        (ResultError.TIMEOUT, "timeout"),
        (ResultError.TOO_LARGE, "too_large"),
        (ResultError.READ_ONLY_VIOLATION, "read_only_violation"),
        ("unavailable", "unavailable"),
        ("no_acceptance_criteria", "no_acceptance_criteria"),
        (None, "rejected"),
        ("something-new", "exception"),
    ],
)
def test_classify_failed_results(error: str | None, expected: str) -> None:
    """A failed result maps to its row; no error is a rejection; unknown errors are exceptions."""
    row = classify(error, False)
    assert row is not None
    assert row.kind == expected


@pytest.mark.parametrize("error", [None, ResultError.TIMEOUT])
def test_classify_passed_result(error: str | None) -> None:
    """A passed result is not a fault."""
    assert classify(error, True) is None


def test_policy_classifies_with_its_catalogue() -> None:
    """A policy's own catalogue decides the row."""
    strict = TIMEOUT.model_copy(update={"retries": 1})
    policy = MaxNPolicy(catalogue=dict(ROW) | {"timeout": strict})
    assert policy.classify("timeout", False) is strict
    assert policy.classify(None, True) is None


# --- the policy ----------------------------------------------------------------------------


def test_policy_defaults() -> None:
    """Default limit 3 and the built-in catalogue, read-only."""
    policy = MaxNPolicy()
    assert policy.limit == DEFAULT_RETRY_LIMIT == 3
    assert dict(policy.catalogue) == dict(ROW)
    with pytest.raises(TypeError):
        policy.catalogue["x"] = REJECTED  # type: ignore[index]


def test_policy_catalogue_is_copied_read_only() -> None:
    """A dict given as catalogue is copied: changing it later changes nothing."""
    rows = dict(ROW)
    policy = MaxNPolicy(catalogue=rows)
    rows.pop("timeout")
    assert "timeout" in policy.catalogue
    with pytest.raises(TypeError):
        policy.catalogue["x"] = REJECTED  # type: ignore[index]


@pytest.mark.parametrize(
    ("catalogue", "message"),
    [
        ({"x": TIMEOUT, "rejected": REJECTED, "exception": EXCEPTION}, "key 'x' names row"),
        ({"rejected": REJECTED}, "'exception' is missing"),
        ({"exception": EXCEPTION}, "'rejected' is missing"),
    ],
)
def test_policy_catalogue_is_checked(catalogue: dict[str, FaultKind], message: str) -> None:
    """Keys must name their rows and classify()'s fallbacks must be there."""
    with pytest.raises(ValidationError, match=message):
        MaxNPolicy(catalogue=catalogue)


def test_policy_limit_is_checked() -> None:
    """A negative limit is refused."""
    with pytest.raises(ValidationError):
        MaxNPolicy(limit=-1)


def test_policy_round_trips_json() -> None:
    """A policy dumps to JSON and reads back equal."""
    policy = MaxNPolicy(limit=5)
    assert MaxNPolicy.model_validate_json(policy.model_dump_json()) == policy


# --- the shared budget -----------------------------------------------------------------------


def test_mixed_faults_share_one_budget() -> None:
    """timeout, rejected, timeout use the three slots; the fourth fault escalates."""
    budget = RetryBudget(MaxNPolicy())
    assert budget.decide(TIMEOUT) is D.RETRY_VALIDATOR
    assert budget.decide(REJECTED) is D.FIX
    assert (budget.used, budget.remaining) == (2, 1)
    assert budget.decide(TIMEOUT) is D.RETRY_VALIDATOR
    assert (budget.used, budget.remaining) == (3, 0)
    assert budget.decide(REJECTED) is D.ESCALATE_EXHAUSTED
    assert budget.used == 3


def test_permanent_escalates_at_once_without_a_slot() -> None:
    """A permanent fault escalates on first sight and consumes nothing."""
    for row in (TOO_LARGE, READ_ONLY, NO_ACS, EVENT_LOG):
        budget = RetryBudget()
        assert budget.decide(row) is D.ESCALATE_PERMANENT
        assert budget.used == 0


def test_permanent_escalates_even_with_budget_spent() -> None:
    """Once the budget is spent, a permanent fault still says permanent."""
    budget = RetryBudget(MaxNPolicy(limit=0))
    assert budget.decide(READ_ONLY) is D.ESCALATE_PERMANENT
    assert budget.decide(REJECTED) is D.ESCALATE_EXHAUSTED


def test_alternating_kinds_cannot_pass_the_limit() -> None:
    """Alternating between kinds with retries left still stops at the shared limit."""
    budget = RetryBudget(MaxNPolicy(limit=4))
    kinds = [REJECTED, UNAVAILABLE, EXCEPTION, TIMEOUT, INCONCLUSIVE, MALFORMED]
    decisions = [budget.decide(kind) for kind in kinds]
    assert decisions[:4] == [D.FIX, D.RETRY_VALIDATOR, D.RETRY_VALIDATOR, D.RETRY_VALIDATOR]
    assert decisions[4:] == [D.ESCALATE_EXHAUSTED] * 2
    assert budget.used == 4


def test_per_kind_retries_cap() -> None:
    """A kind escalates once its own retries are spent, though the shared budget is not."""
    budget = RetryBudget(MaxNPolicy(limit=10))
    assert budget.decide(MALFORMED) is D.RETRY_VALIDATOR
    assert budget.decide(MALFORMED) is D.ESCALATE_EXHAUSTED
    assert budget.used == 1
    assert budget.used_by("malformed") == 1
    # Other kinds keep their own allowance.
    assert [budget.decide(TIMEOUT) for _ in range(3)] == [
        D.RETRY_VALIDATOR,
        D.RETRY_VALIDATOR,
        D.ESCALATE_EXHAUSTED,
    ]
    assert budget.remaining == 7


def test_limit_zero_escalates_the_first_fault() -> None:
    """With no retries at all, the first fault escalates exhausted."""
    budget = RetryBudget(MaxNPolicy(limit=0))
    assert budget.decide(REJECTED) is D.ESCALATE_EXHAUSTED


def test_reset_starts_a_fresh_budget() -> None:
    """reset() (a revised strategy) clears the shared and the per-kind counts."""
    budget = RetryBudget()
    for _ in range(3):
        budget.decide(REJECTED)
    assert budget.decide(REJECTED) is D.ESCALATE_EXHAUSTED
    budget.reset()
    assert (budget.used, budget.remaining, budget.used_by("rejected")) == (0, 3, 0)
    assert budget.decide(REJECTED) is D.FIX


def test_budget_repr() -> None:
    """The repr shows the counts."""
    assert repr(RetryBudget()) == "RetryBudget(used=0, limit=3)"


# --- rounds ------------------------------------------------------------------------------


def test_round_without_faults_is_attested() -> None:
    """An empty round is attested and costs nothing."""
    budget = RetryBudget()
    assert budget.decide_round([]) is D.ATTESTED
    assert budget.used == 0


def test_round_with_a_permanent_fault_escalates() -> None:
    """Any permanent fault in a round escalates it, whatever else failed."""
    budget = RetryBudget()
    assert budget.decide_round([REJECTED, TIMEOUT, TOO_LARGE]) is D.ESCALATE_PERMANENT
    assert budget.used == 0


def test_round_with_a_semantic_fault_fixes_for_one_slot() -> None:
    """A rejection among infra faults sends the round to the fixer, for one slot."""
    budget = RetryBudget()
    assert budget.decide_round([TIMEOUT, REJECTED, EXCEPTION, REJECTED]) is D.FIX
    assert budget.used == 1
    assert {k: budget.used_by(k) for k in ("timeout", "rejected", "exception")} == dict.fromkeys(
        ("timeout", "rejected", "exception"), 1
    )


def test_round_with_only_infra_faults_retries_validators() -> None:
    """A round of infra faults only re-runs the validators, for one slot."""
    budget = RetryBudget()
    assert budget.decide_round([TIMEOUT, EXCEPTION, TIMEOUT]) is D.RETRY_VALIDATOR
    assert budget.used == 1


def test_round_escalates_when_any_kind_is_spent() -> None:
    """A round escalates if one of its kinds has no retries left."""
    budget = RetryBudget()
    assert budget.decide_round([MALFORMED]) is D.RETRY_VALIDATOR
    assert budget.decide_round([REJECTED, MALFORMED]) is D.ESCALATE_EXHAUSTED
    assert budget.used == 1


def test_primary_fault() -> None:
    """The deciding fault of a round: permanent first, then semantic, then the first."""
    assert primary_fault([]) is None
    assert primary_fault([TIMEOUT, EXCEPTION]) is TIMEOUT
    assert primary_fault([TIMEOUT, INCONCLUSIVE, REJECTED]) is INCONCLUSIVE
    assert primary_fault([TIMEOUT, REJECTED, EVENT_LOG]) is EVENT_LOG


def test_decision_properties() -> None:
    """Each decision either retries, escalates, or (attested) neither."""
    assert {d for d in D if d.escalates} == {D.ESCALATE_EXHAUSTED, D.ESCALATE_PERMANENT}
    assert {d for d in D if d.retries} == {D.FIX, D.RETRY_VALIDATOR}
    assert not D.ATTESTED.escalates
    assert not D.ATTESTED.retries


_rows = st.sampled_from(sorted(ROW.values(), key=lambda row: row.kind))


@given(limit=st.integers(0, 6), rounds=st.lists(st.lists(_rows, max_size=4), max_size=30))
def test_budget_property(limit: int, rounds: list[list[FaultKind]]) -> None:
    """Retries never exceed the limit; a permanent fault always escalates, consuming nothing."""
    budget = RetryBudget(MaxNPolicy(limit=limit))
    retried = 0
    for faults in rounds:
        before = budget.used
        decision = budget.decide_round(faults)
        if any(f.permanent for f in faults):
            assert decision is D.ESCALATE_PERMANENT
        if decision.retries:
            retried += 1
            assert budget.used == before + 1
        else:
            assert budget.used == before
        if not faults:
            assert decision is D.ATTESTED
        assert 0 <= budget.used <= limit
    assert retried == budget.used <= limit
    for row in ROW.values():
        assert budget.used_by(row.kind) <= row.retries


@given(faults=st.lists(_rows, max_size=20))
def test_single_fault_property(faults: list[FaultKind]) -> None:
    """decide() one fault at a time: at most the limit retries, permanent escalates at once."""
    budget = RetryBudget()
    decisions = [budget.decide(fault) for fault in faults]
    assert sum(d.retries for d in decisions) <= DEFAULT_RETRY_LIMIT
    for fault, decision in zip(faults, decisions, strict=True):
        if fault.permanent:
            assert decision is D.ESCALATE_PERMANENT
        elif decision.retries:
            assert decision is (
                D.FIX if fault.family is FaultFamily.SEMANTIC else D.RETRY_VALIDATOR
            )


# --- backoff -------------------------------------------------------------------------------


def test_backoff_defaults() -> None:
    """Defaults like temporalio's: 0.5 s, doubling, at most 30 s, 10% jitter."""
    assert Backoff() == Backoff(initial=0.5, factor=2.0, maximum=30.0, jitter=0.1)


def test_backoff_is_exponential_and_capped() -> None:
    """Without jitter: initial · factor^(n-1), capped at maximum."""
    backoff = Backoff(initial=1.0, factor=2.0, maximum=10.0, jitter=0.0)
    assert [backoff.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_constant() -> None:
    """Factor 1 waits the same every time."""
    backoff = Backoff(initial=2.0, factor=1.0, maximum=2.0, jitter=0.0)
    assert {backoff.delay(n) for n in range(1, 50)} == {2.0}


def test_backoff_huge_attempt_is_capped() -> None:
    """An attempt number that would overflow a float waits the maximum."""
    assert Backoff(jitter=0.0).delay(100_000) == 30.0


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 4.0), (0.5, 3.8), (1.0, 3.6)])
def test_backoff_jitter_bounds(draw: float, expected: float) -> None:
    """Jitter takes up to `jitter` of the delay away: 10% of 4 s waits 3.6 s to 4 s."""
    backoff = Backoff(initial=1.0, factor=2.0, maximum=30.0, jitter=0.1)
    assert backoff.delay(3, random=lambda: draw) == pytest.approx(expected)


@given(attempt=st.integers(1, 200), draw=st.floats(0.0, 1.0))
def test_backoff_never_exceeds_maximum(attempt: int, draw: float) -> None:
    """With any draw, a delay stays within [(1 - jitter) · base, maximum]."""
    backoff = Backoff()
    delay = backoff.delay(attempt, random=lambda: draw)
    assert backoff.initial * (1 - backoff.jitter) <= delay <= backoff.maximum


def test_backoff_bad_arguments() -> None:
    """Attempt 0 and a random() outside [0, 1] are refused."""
    with pytest.raises(ValueError, match="attempt must be 1"):
        Backoff().delay(0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        Backoff().delay(1, random=lambda: 1.5)


@pytest.mark.parametrize(
    "fields",
    [
        {"initial": 0},
        {"initial": -1},
        {"maximum": 0},
        {"factor": 0.5},
        {"jitter": -0.1},
        {"jitter": 1.0},
        {"initial": 5.0, "maximum": 1.0},
        {"initial": float("inf")},
        {"maximum": float("nan")},
    ],
)
def test_backoff_is_validated(fields: dict[str, float]) -> None:
    """Delays are positive and finite, factor ≥ 1, maximum ≥ initial, 0 ≤ jitter < 1."""
    with pytest.raises(ValidationError):
        Backoff(**fields)


@pytest.mark.anyio
async def test_wait_backoff_sleeps_the_delay() -> None:
    """wait_backoff sleeps the row's delay through the injected sleep."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    waited = await wait_backoff(TIMEOUT, 2, sleep=sleep, random=lambda: 0.0)
    assert waited == 2.0
    assert slept == [2.0]


@pytest.mark.anyio
async def test_wait_backoff_without_backoff_does_not_sleep() -> None:
    """A row without backoff (a rejection) returns at once, without calling sleep."""

    async def sleep(seconds: float) -> None:  # pragma: no cover - must not run
        raise AssertionError("slept")

    assert await wait_backoff(REJECTED, 1, sleep=sleep) == 0.0


@pytest.mark.anyio
async def test_wait_backoff_cancellation_propagates() -> None:
    """Cancelling the wait cancels it: nothing catches the cancellation."""
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await wait_backoff(TIMEOUT, 1, random=lambda: 0.0)
        reached = True  # pragma: no cover - the wait is cancelled
    assert scope.cancelled_caught
    assert not reached


@pytest.mark.anyio
async def test_wait_backoff_without_backoff_is_a_checkpoint() -> None:
    """Even a no-wait row is a cancellation point."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        await wait_backoff(REJECTED, 1)
    assert scope.cancelled_caught


# --- attempts ------------------------------------------------------------------------------


def test_audit_fields_are_the_seed_names() -> None:
    """to_audit() uses seed 003's names, the plan under taskId and planId."""
    attempt = _attempt("plan-1", 2, D.RETRY_VALIDATOR, fault=TIMEOUT, detail="lint timed out")
    assert attempt.to_audit() == {
        "timestamp": "2026-05-25T12:00:00.123Z",
        "taskId": "plan-1",
        "planId": "plan-1",
        "attemptNumber": 2,
        "faultKind": "timeout",
        "classification": "transient",
        "retryDecision": "retry-validator",
        "detail": "lint timed out",
    }


def test_audit_detail_is_optional() -> None:
    """Without detail there is no detail key; a passing round has null fault fields."""
    line = _attempt("p", 1, D.ATTESTED, fault=None).to_audit()
    assert "detail" not in line
    assert line["faultKind"] is None
    assert line["classification"] is None
    assert line["retryDecision"] == "attested"


def test_attempt_timestamps_are_utc_with_z() -> None:
    """Timestamps are converted to UTC and end in Z; naive times are refused."""
    moment = datetime(2026, 5, 25, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    attempt = Attempt.create("p", 1, D.FIX, REJECTED, now=lambda: moment)
    assert attempt.timestamp == "2026-05-25T12:00:00.000Z"
    assert Attempt.create("p", 1, D.FIX, REJECTED).timestamp.endswith("Z")
    with pytest.raises(ValueError, match="timezone"):
        Attempt.create("p", 1, D.FIX, now=lambda: datetime(2026, 1, 1))


def test_attempt_number_starts_at_one() -> None:
    """Attempt numbers are 1-based."""
    with pytest.raises(ValueError, match="1 or more"):
        Attempt.create("p", 0, D.FIX)


# --- the audit log -------------------------------------------------------------------------


def test_default_audit_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit file lives in audit/ beside the catalog, under GATEGRAPH_HOME."""
    monkeypatch.setenv("GATEGRAPH_HOME", str(tmp_path))
    assert default_audit_path() == tmp_path / "audit" / AUDIT_FILE
    assert AuditLog().path == tmp_path / "audit" / "validator-retries.jsonl"


def test_audit_log_one_line_per_attempt(tmp_path: Path) -> None:
    """Each record appends exactly one JSON line with the seed's field names."""
    log = AuditLog(tmp_path / "nested" / "retries.jsonl")
    attempts = [
        _attempt("p", 1, D.RETRY_VALIDATOR, fault=TIMEOUT, detail="slow"),
        _attempt("p", 2, D.FIX, fault=REJECTED),
        _attempt("p", 3, D.ATTESTED, fault=None),
    ]
    for attempt in attempts:
        log.record(attempt)
    lines = log.path.read_text().splitlines()
    assert len(lines) == 3
    assert [json.loads(line) for line in lines] == [a.to_audit() for a in attempts]
    assert list(json.loads(lines[0])) == [
        "timestamp",
        "taskId",
        "planId",
        "attemptNumber",
        "faultKind",
        "classification",
        "retryDecision",
        "detail",
    ]
    assert log.read() == attempts


def test_audit_log_reads_by_plan(tmp_path: Path) -> None:
    """read() filters by plan id and keeps file order."""
    log = AuditLog(tmp_path / "a.jsonl")
    for number in (1, 2):
        for plan in ("a", "b"):
            log.record(_attempt(plan, number))
    assert [(a.plan_id, a.attempt) for a in log.read("a")] == [("a", 1), ("a", 2)]
    assert [a.plan_id for a in read_audit(log.path, plan_id="b")] == ["b", "b"]
    assert len(read_audit(log.path)) == 4
    assert read_audit(log.path, plan_id="c") == []


def test_read_audit_default_path_and_missing_file() -> None:
    """read_audit() reads the default file; a missing file reads as empty."""
    assert read_audit() == []
    AuditLog().record(_attempt("p", 1))
    assert [a.plan_id for a in read_audit()] == ["p"]


def test_read_audit_accepts_seed_lines_without_plan_id(tmp_path: Path) -> None:
    """A line with taskId only (seed 003's format) reads with plan_id = taskId."""
    path = tmp_path / "seed.jsonl"
    path.write_text(
        '{"timestamp":"2026-05-25T12:00:00Z","taskId":"T1","attemptNumber":1,'
        '"faultKind":"timeout","classification":"transient","retryDecision":"retry-validator"}\n'
    )
    [attempt] = read_audit(path, plan_id="T1")
    assert attempt.plan_id == "T1"
    assert attempt.decision is D.RETRY_VALIDATOR
    assert attempt.detail is None


def test_read_audit_skips_a_torn_last_line(tmp_path: Path) -> None:
    """A last line cut short by a crash (no newline) is skipped."""
    log = AuditLog(tmp_path / "a.jsonl")
    log.record(_attempt("p", 1))
    with log.path.open("ab") as file:
        file.write(b'{"timestamp":"2026-')
    assert len(log.read()) == 1


def test_read_audit_reports_corrupt_lines(tmp_path: Path) -> None:
    """A corrupt line in the middle raises ConfigError naming the file and line."""
    path = tmp_path / "a.jsonl"
    good = msgspec.json.encode(_attempt("p", 1).to_audit()).decode()
    path.write_text(f'{good}\n\nnot json\n{{"taskId": 1}}\n{good}\n')
    with pytest.raises(ConfigError) as info:
        read_audit(path)
    assert [issue.line for issue in info.value.issues] == [3, 4]
    assert str(path) in str(info.value)


def test_audit_log_suppress(tmp_path: Path) -> None:
    """suppress=True writes nothing."""
    log = AuditLog(tmp_path / "a.jsonl", suppress=True)
    log.record(_attempt("p", 1))
    assert not log.path.exists()
    assert log.read() == []
    assert "suppress=True" in repr(log)


def test_audit_log_write_failure_is_a_runtime_fault(tmp_path: Path) -> None:
    """A log that cannot be written raises RuntimeFault (the event_log row)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    log = AuditLog(blocker / "audit.jsonl")
    with pytest.raises(RuntimeFault, match="cannot write the audit log"):
        log.record(_attempt("p", 1))


def test_in_memory_audit_log() -> None:
    """The in-memory log keeps attempts in order and filters by plan."""
    log = InMemoryAuditLog()
    log.record(_attempt("a", 1))
    log.record(_attempt("b", 1))
    log.record(_attempt("a", 2))
    assert [(a.plan_id, a.attempt) for a in log.read("a")] == [("a", 1), ("a", 2)]
    assert len(log.read()) == len(log.attempts) == 3


def test_both_logs_are_audit_recorders(tmp_path: Path) -> None:
    """Both logs satisfy the AuditRecorder protocol."""
    assert isinstance(InMemoryAuditLog(), AuditRecorder)
    assert isinstance(AuditLog(tmp_path / "a.jsonl"), AuditRecorder)


_WRITER = textwrap.dedent(
    """
    import sys
    from gategraph.runtime._data._maxn import FAULT_CATALOGUE, Attempt, AuditLog, RetryDecision

    path, plan, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.stdin.read()  # wait for the go: all writers start together
    log = AuditLog(path)
    for number in range(1, count + 1):
        detail = f"{plan}:{number}:" + plan * 3000  # lines far above a pipe buffer
        log.record(
            Attempt.create(
                plan, number, RetryDecision.RETRY_VALIDATOR, FAULT_CATALOGUE["timeout"], detail
            )
        )
    """
)


def test_concurrent_writers_keep_lines_intact(tmp_path: Path) -> None:
    """Three processes appending at once: every line parses, none is interleaved or lost."""
    path = tmp_path / "audit" / "shared.jsonl"
    count = 150
    plans = ("x", "y", "z")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), plan, str(count)],
            stdin=subprocess.PIPE,
        )
        for plan in plans
    ]
    for writer in writers:
        assert writer.stdin is not None
        writer.stdin.close()
    for writer in writers:
        assert writer.wait(timeout=60) == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    assert len(lines) - 1 == count * len(plans)
    for line in lines[:-1]:
        record = json.loads(line)
        plan, number, body = record["detail"].split(":")
        assert body == plan * 3000
        assert record["taskId"] == plan
        assert record["attemptNumber"] == int(number)
    for plan in plans:
        assert [a.attempt for a in read_audit(path, plan_id=plan)] == list(range(1, count + 1))


def test_audit_log_short_write_is_a_runtime_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write cut short raises RuntimeFault instead of finishing the line in a second write."""
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data)[:10]))
    log = AuditLog(tmp_path / "a.jsonl")
    with pytest.raises(RuntimeFault, match="short write"):
        log.record(_attempt("p", 1))
    monkeypatch.undo()
    assert log.path.read_bytes() == msgspec.json.encode(_attempt("p", 1).to_audit())[:10]


DOCS = Path(__file__).resolve().parents[2] / "docs" / "maxn.md"


def test_docs_table_matches_the_catalogue() -> None:
    """docs/maxn.md lists every row with the catalogue's family, class, retries and backoff."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[1:5]
    expected = {
        kind: [
            row.family,
            row.classification,
            str(row.retries),
            "—"
            if row.backoff is None
            else f"{row.backoff.initial:g} s ×{row.backoff.factor:g}, ≤ {row.backoff.maximum:g} s, "
            f"−{row.backoff.jitter:.0%}",
        ]
        for kind, row in ROW.items()
    }
    assert rows == expected


def test_docs_worked_example(tmp_path: Path) -> None:
    """The worked example and the example audit line in docs/maxn.md hold."""
    budget = RetryBudget()
    rounds = [[TIMEOUT], [REJECTED], [TIMEOUT, REJECTED], [REJECTED]]
    assert [(budget.decide_round(r), budget.used) for r in rounds] == [
        (D.RETRY_VALIDATOR, 1),
        (D.FIX, 2),
        (D.FIX, 3),
        (D.ESCALATE_EXHAUSTED, 3),
    ]
    [example] = [line for line in DOCS.read_text().splitlines() if line.startswith('{"timestamp"')]
    path = tmp_path / "a.jsonl"
    path.write_text(example + "\n")
    [attempt] = read_audit(path)
    assert attempt.to_audit() == json.loads(example)
