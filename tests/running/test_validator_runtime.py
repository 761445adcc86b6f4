"""The standalone Max-N runtime, with injected fakes and no sleeping: a lead's validate →
fix loop on one shared budget, its three endings, its attempts and their audit."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from gategraph.runtime import (
    ConfigError,
    ValidatorFault,
    ValidatorRejection,
    ValidatorRuntimeDeps,
    ValidatorRuntimeOptions,
    ValidatorSpawnRequest,
    run_validator_max_n,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog, RetryBudget, RetryDecision
from gategraph.runtime._lifecycle._plan_ladder import FailureLadder
from gategraph.runtime._running._pipeline import Reason, Rejected

TASK = "T1234"
MOMENT = dt.datetime(2026, 5, 25, 22, 18, tzinfo=dt.UTC)


def envelope(verdict: str, status: str = "pass", task: str = TASK) -> dict[str, Any]:
    finding = {
        "acId": "550e8400-e29b-41d4-a716-446655440000",
        "status": status,
        "reasoning": "re-ran the suite",
        "checkedAt": "2026-05-25T22:18:00Z",
    }
    body: dict[str, Any] = {
        "verdict": verdict,
        "taskId": task,
        "validatorId": "validator-prime",
        "findings": [finding],
        "schemaVersion": "1",
    }
    if verdict == "attest":
        body["attestedAt"] = "2026-05-25T22:23:42Z"
    else:
        body.update(summary="AC1 fails", rejectedAt="2026-05-25T22:22:18Z")
    return body


ATTEST = envelope("attest")
REJECT = envelope("reject", "fail")
UNSURE = envelope("reject", "inconclusive")


class Script:
    """A lead's fakes: validators that answer in turn, a worker that records its fixes, a
    sleep that only records."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.spawned: list[ValidatorSpawnRequest] = []
        self.fixes: list[tuple[str, ValidatorRejection, int]] = []
        self.slept: list[float] = []

    async def spawn(self, request: ValidatorSpawnRequest) -> Any:
        self.spawned.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def respawn(self, task_id: str, rejection: ValidatorRejection, attempt: int) -> None:
        self.fixes.append((task_id, rejection, attempt))

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def deps(self) -> ValidatorRuntimeDeps:
        return ValidatorRuntimeDeps(
            spawn_validator=self.spawn,
            respawn_worker=self.respawn,
            sleep=self.sleep,
            now=lambda: MOMENT,
        )


QUIET = ValidatorRuntimeOptions(suppress_audit=True)


def decisions(result: Any) -> list[str]:
    return [a["retryDecision"] for a in result.attempts]


@pytest.mark.anyio
async def test_a_first_attestation_ends_it() -> None:
    script = Script(ATTEST)
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "attested" and result.attestation is not None
    assert result.attestation.validator_id == "validator-prime"
    assert decisions(result) == ["attested"] and script.fixes == [] and script.slept == []
    assert result.attempts[0] == {
        "timestamp": "2026-05-25T22:18:00.000Z",
        "taskId": TASK,
        "planId": TASK,
        "attemptNumber": 1,
        "faultKind": None,
        "classification": None,
        "retryDecision": "attested",
    }


@pytest.mark.anyio
async def test_rejections_go_back_to_the_worker_then_a_new_validator_attests() -> None:
    script = Script(REJECT, UNSURE, ATTEST)
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "attested"
    assert decisions(result) == ["fix", "fix", "attested"]
    assert [(t, n) for t, _, n in script.fixes] == [(TASK, 1), (TASK, 2)]
    assert script.fixes[0][1].summary == "AC1 fails"
    assert [a["faultKind"] for a in result.attempts] == ["rejected", "inconclusive", None]
    assert [r.attempt for r in script.spawned] == [1, 2, 3]  # a new validator each round


@pytest.mark.anyio
async def test_an_infrastructure_fault_reruns_the_validator_only_after_its_backoff() -> None:
    script = Script(TimeoutError("slow"), ValidatorFault("unavailable", "gone"), ATTEST)
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "attested" and script.fixes == []
    assert decisions(result) == ["retry-validator", "retry-validator", "attested"]
    assert len(script.slept) == 2 and all(s > 0 for s in script.slept)


@pytest.mark.anyio
async def test_alternating_faults_share_one_budget() -> None:
    """Three faults of any mix spend the default budget; the fourth escalates."""
    script = Script(TimeoutError(), REJECT, RuntimeError("boom"), REJECT)
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "escalate-exhausted" and result.fault_kind == "rejected"
    assert decisions(result) == ["retry-validator", "fix", "retry-validator", "escalate-exhausted"]
    assert result.rejection is not None


@pytest.mark.anyio
async def test_an_empty_roster_escalates_at_once() -> None:
    script = Script(ValidatorFault("no_acceptance_criteria", "the plan has no criteria"))
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "escalate-permanent"
    assert result.fault_kind == "no_acceptance_criteria"
    assert result.detail == "the plan has no criteria"
    assert decisions(result) == ["escalate-permanent"] and script.fixes == []


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"verdict": "attest"}, "taskId: is required"),
        (42, "not a verdict envelope: 42"),
        (envelope("attest", task="T9"), "about task 'T9'"),
    ],
)
async def test_what_is_not_an_envelope_is_a_malformed_answer(answer: Any, said: str) -> None:
    """The validator could not give a verdict: it is spawned again, the worker is not told."""
    script = Script(answer, ATTEST)
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "attested" and script.fixes == []
    assert decisions(result) == ["retry-validator", "attested"]
    assert result.attempts[0]["faultKind"] == "malformed" and said in result.attempts[0]["detail"]


@pytest.mark.anyio
async def test_the_attempts_are_mirrored_to_the_audit(tmp_path: Path) -> None:
    script = Script(REJECT, ATTEST)
    result = await run_validator_max_n(
        TASK, script.deps(), ValidatorRuntimeOptions(project_root=tmp_path)
    )
    file = tmp_path / ".gategraph" / "audit" / "validator-retries.jsonl"
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert lines == list(result.attempts)
    memory = InMemoryAuditLog()
    await run_validator_max_n(TASK, Script(ATTEST).deps(), ValidatorRuntimeOptions(audit=memory))
    assert [a.decision for a in memory.read(TASK)] == [RetryDecision.ATTESTED]
    quiet = tmp_path / "quiet"
    await run_validator_max_n(
        TASK,
        Script(ATTEST).deps(),
        ValidatorRuntimeOptions(project_root=quiet, suppress_audit=True),
    )
    assert not quiet.exists()


@pytest.mark.anyio
async def test_cancellation_propagates() -> None:
    async def forever(request: ValidatorSpawnRequest) -> Any:
        await anyio.sleep_forever()

    deps = ValidatorRuntimeDeps(spawn_validator=forever, respawn_worker=Script().respawn)
    with anyio.move_on_after(0.05) as scope:
        await run_validator_max_n(TASK, deps, QUIET)
    assert scope.cancelled_caught


def test_bad_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="validator_retry_max: must be a whole number"):
        ValidatorRuntimeOptions(validator_retry_max=-1)
    with pytest.raises(ConfigError, match="validator_retry_max"):
        ValidatorRuntimeOptions(validator_retry_max=True)
    with pytest.raises(ConfigError, match="task_id"):
        anyio.run(run_validator_max_n, "", Script().deps())


@pytest.mark.anyio
@pytest.mark.parametrize(
    "faults",
    [
        ["rejected", "rejected", "rejected", "rejected"],
        ["timeout", "rejected", "exception", "rejected"],
        ["inconclusive", "inconclusive", "inconclusive"],
        ["timeout", "timeout", "timeout"],
        ["no_acceptance_criteria"],
    ],
)
async def test_the_supervisors_ladder_decides_as_the_runtime_does(
    tmp_path: Path, faults: list[str]
) -> None:
    """One budget logic: the same faults give the same decisions in both."""
    from _plan_parts import context_for, folder, parts_graph

    answers: list[Any] = []
    for kind in faults:
        if kind == "rejected":
            answers.append(REJECT)
        elif kind == "inconclusive":
            answers.append(UNSURE)
        else:
            answers.append(ValidatorFault(kind))
    runtime = await run_validator_max_n(TASK, Script(*answers).deps(), QUIET)
    check = [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}]
    context = await context_for(parts_graph(folder(tmp_path), check), tmp_path)
    ladder = FailureLadder(context, audit=InMemoryAuditLog(), escalation=None)
    laddered = []
    for number, kind in enumerate(faults, start=1):
        context.round = number
        error = None if kind == "rejected" else kind
        outcome = Rejected("semantic", (Reason(layer="semantic", message="x", error=error),))
        decision, _ = await ladder.decide(outcome)
        laddered.append(decision.value)
        if decision.value.startswith("escalate"):
            break
    assert laddered == decisions(runtime)
    assert isinstance(ladder.budget, RetryBudget)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["rejected", "inconclusive", "no-such-kind"])
async def test_a_fault_is_an_infrastructure_fault_whatever_kind_it_names(kind: str) -> None:
    script = Script(ValidatorFault(kind, "could not decide"), ATTEST)
    result = await run_validator_max_n(TASK, script.deps(), QUIET)
    assert result.outcome == "attested" and script.fixes == []
    assert result.attempts[0]["faultKind"] == "exception"
