"""The failure ladder on its own: one shared budget, its audit lines and events, a revised
strategy, a person, and a resume's answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _plan_parts import context_for, folder, parts_graph, tags
from gategraph.runtime import RuntimeFault
from gategraph.runtime._base._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._data._events import FixRequested, PlanFinished
from gategraph.runtime._data._maxn import InMemoryAuditLog, RetryDecision
from gategraph.runtime._lifecycle._plan_ladder import FailureLadder, failure_text
from gategraph.runtime._running._pipeline import Passed, Reason, Rejected

CHECK = [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}]
FOUND = Rejected("semantic", (Reason(layer="semantic", message="it is wrong", node="ok"),))
DOWN = Rejected(
    "semantic",
    (Reason(layer="semantic", message="down", node="ok", error="timeout"),),
)


async def ladder(tmp_path: Path, **options: Any) -> tuple[Any, FailureLadder]:
    policy = options.pop("policy", {"retry_limit": 2, "strategy_revisions": 1})
    context = await context_for(parts_graph(folder(tmp_path), CHECK, policy=policy), tmp_path)
    options.setdefault("audit", InMemoryAuditLog())
    options.setdefault("escalation", None)
    context.round = context.attempt = 1
    return context, FailureLadder(context, **options)


@pytest.mark.anyio
async def test_rejections_share_one_budget_until_it_is_spent(tmp_path: Path) -> None:
    context, rungs = await ladder(tmp_path)
    decisions = []
    for round_number in (1, 2, 3):
        context.round = context.attempt = round_number
        decision, fault = await rungs.decide(FOUND)
        decisions.append(decision)
        assert fault.kind == "rejected"
    assert decisions == [RetryDecision.FIX, RetryDecision.FIX, RetryDecision.ESCALATE_EXHAUSTED]
    assert rungs.budget.used == 2 and await tags(context) == ["retry_decided"] * 3
    lines = rungs.audit.read(context.plan_id)
    assert [(a.attempt, a.decision) for a in lines] == [
        (1, RetryDecision.FIX),
        (2, RetryDecision.FIX),
        (3, RetryDecision.ESCALATE_EXHAUSTED),
    ]
    assert [a["retryDecision"] for a in rungs.attempts] == ["fix", "fix", "escalate-exhausted"]


@pytest.mark.anyio
async def test_an_infrastructure_fault_waits_out_its_backoff(tmp_path: Path) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    context, rungs = await ladder(tmp_path, sleep=sleep)
    decision, fault = await rungs.decide(DOWN)
    assert decision is RetryDecision.RETRY_VALIDATOR and fault.kind == "timeout"
    await rungs.wait(fault)
    assert len(slept) == 1 and slept[0] > 0 and context.stats.validator_retries == 1


@pytest.mark.anyio
async def test_a_revised_strategy_only_while_revisions_remain(tmp_path: Path) -> None:
    context, rungs = await ladder(tmp_path)
    await rungs.decide(FOUND)
    exhausted = RetryDecision.ESCALATE_EXHAUSTED
    assert await rungs.revise(RetryDecision.ESCALATE_PERMANENT, FOUND) is False
    assert await rungs.revise(exhausted, FOUND) is True
    assert context.revision == 1 and context.stats.revisions == 1 and rungs.budget.used == 0
    assert await rungs.revise(exhausted, FOUND) is False  # one revision allowed
    assert (await tags(context))[-1] == "strategy_revision_requested"


@pytest.mark.anyio
async def test_a_person_answers_and_a_retry_starts_the_budget_again(tmp_path: Path) -> None:
    asked: list[EscalationRequest] = []

    async def person(request: EscalationRequest) -> EscalationDecision:
        asked.append(request)
        return EscalationDecision(action="retry", note="try the other way")

    context, rungs = await ladder(tmp_path, escalation=person)
    await rungs.decide(FOUND)
    answer = await rungs.escalate(
        RetryDecision.ESCALATE_PERMANENT, FOUND, verdict={"v": 1}, history=()
    )
    assert answer is not None and answer.note == "try the other way"
    assert rungs.budget.used == 0 and context.stats.escalations == 1
    [request] = asked
    assert (request.reason, request.message, request.verdict) == (
        "permanent",
        "semantic: ok: it is wrong",
        {"v": 1},
    )
    assert (await tags(context))[-2:] == ["escalation_requested", "escalation_decided"]


@pytest.mark.anyio
async def test_with_nobody_to_ask_the_plan_pauses(tmp_path: Path) -> None:
    context, rungs = await ladder(tmp_path)
    answer = await rungs.escalate(RetryDecision.ESCALATE_EXHAUSTED, FOUND, verdict=None, history=())
    assert answer is None and await tags(context) == ["escalation_requested"]


@pytest.mark.anyio
async def test_a_handler_answering_the_wrong_question_is_a_runtime_fault(tmp_path: Path) -> None:
    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="approve")

    _, rungs = await ladder(tmp_path, escalation=person)
    with pytest.raises(RuntimeFault, match="expected 'retry' or 'abort'"):
        await rungs.escalate(RetryDecision.ESCALATE_PERMANENT, FOUND, verdict=None, history=())


@pytest.mark.anyio
async def test_a_resume_answers_the_pause_it_was_given_for(tmp_path: Path) -> None:
    """A plan paused at an escalation, resumed with a decision: the recorded pause is
    stepped over, the decision is logged, and it is used once."""
    first, rungs = await ladder(tmp_path)
    await rungs.escalate(RetryDecision.ESCALATE_PERMANENT, FOUND, verdict=None, history=())
    await first.journal.emit(PlanFinished, status="awaiting_decision", message="waiting")
    recorded = await first.log.read(first.plan_id)
    context, again = await ladder(
        tmp_path, decision=EscalationDecision(action="abort", note="enough")
    )
    context.journal = type(context.journal)(context.log, first.plan_id, recorded)
    context.plan_id = first.plan_id
    answer = await again.escalate(RetryDecision.ESCALATE_PERMANENT, FOUND, verdict=None, history=())
    assert answer == EscalationDecision(action="abort", note="enough") and again.decision is None
    appended = [type(e).__name__ for e in await context.log.read(first.plan_id)]
    assert appended == ["PlanResumed", "EscalationDecided"]


@pytest.mark.anyio
async def test_a_round_that_passed_is_attested_once_across_a_crash(tmp_path: Path) -> None:
    """Resuming, a line an earlier run wrote before it died is not written again."""
    audit = InMemoryAuditLog()
    first, rungs = await ladder(tmp_path, audit=audit)
    await first.journal.emit(FixRequested, attempt=1, note=None)
    await rungs.attest()  # and the run dies before the event that follows the line
    recorded = await first.log.read(first.plan_id)
    context, again = await ladder(tmp_path, audit=audit)
    context.plan_id = first.plan_id
    context.journal = type(context.journal)(context.log, first.plan_id, recorded)
    await context.journal.emit(FixRequested, attempt=1, note=None)  # as recorded
    await again.attest()
    assert [a.decision for a in audit.read(first.plan_id)] == [RetryDecision.ATTESTED]
    assert len(again.attempts) == 1


def test_failure_text() -> None:
    assert failure_text(FOUND) == "semantic: ok: it is wrong"
    assert failure_text(Passed()) == ""
    many = Rejected(
        "semantic", tuple(Reason(layer="semantic", message="x" * 100) for _ in range(9))
    )
    assert len(failure_text(many)) == 500
