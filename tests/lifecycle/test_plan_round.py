"""A validation round on its own: routing → payload → semantic → approval, the events it
logs, the records and verdict it keeps for the ladder, a validator-only retry and the
confirmation of a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module
from _plan_parts import context_for, folder, parts_graph, tags
from gategraph.runtime._base._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._lifecycle._plan import WorkFailed
from gategraph.runtime._lifecycle._plan_round import RoundPipeline, given_outputs
from gategraph.runtime._running._pipeline import NeedsApproval, Passed, Rejected

PASS = {"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}
FAIL = {"name": "bad", "entrypoint": "gategraph.runtime.testing:failing"}


class Desk:
    """The pipeline's two callbacks: a person (answering ``answer``) and the attestation."""

    def __init__(self, answer: EscalationDecision | None = None) -> None:
        self.answer = answer
        self.asked: list[EscalationRequest] = []
        self.attested = 0

    async def ask(self, request: EscalationRequest, asked_at: float) -> EscalationDecision | None:
        assert asked_at > 0  # when the approval was asked for: its event's time
        self.asked.append(request)
        return self.answer

    async def attest(self) -> None:
        self.attested += 1


def in_this_process(validations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes parts_graph makes, each declaring it runs in a thread of this process
    (their validations are sync functions of a module that exists only here)."""
    return [{"id": v["name"], "validation": v["name"], "isolation": "thread"} for v in validations]


def pipeline(context: Any, desk: Desk, **options: Any) -> RoundPipeline:
    return RoundPipeline(context, ask=desk.ask, attest=desk.attest, **options)


@pytest.mark.anyio
async def test_a_round_that_passes(tmp_path: Path) -> None:
    """Every layer passes: the round records what it validated, attests, says so."""
    context = await context_for(parts_graph(folder(tmp_path), [PASS]), tmp_path)
    desk = Desk()
    rounds = pipeline(context, desk)
    outcome = await rounds.run({"any": "artifact"})
    assert isinstance(outcome, Passed) and rounds.outcome is outcome
    assert await tags(context) == [
        "artifact_validation_started",
        "run_started",
        "validation_started",
        "validation_completed",
        "run_finished",
        "artifact_validated",
    ]
    assert context.round == 1 and context.stats.rounds == 1
    assert context.stats.pipeline_completions == 1 and context.stats.semantic_invocations == 1
    assert desk.attested == 1 and list(rounds.records) == ["ok"]
    assert rounds.validated is not None and set(rounds.validated) == {"repo"}
    assert [s.passed for s in rounds.summaries] == [True] and rounds.failures() == ()
    assert set(context.stats.layer_seconds) == {"routing", "payload", "semantic", "approval"}


@pytest.mark.anyio
async def test_a_required_failure_rejects_the_round(tmp_path: Path) -> None:
    context = await context_for(parts_graph(folder(tmp_path), [PASS, FAIL]), tmp_path)
    desk = Desk()
    rounds = pipeline(context, desk)
    outcome = await rounds.run(None)
    assert isinstance(outcome, Rejected) and outcome.layer == "semantic"
    assert [r.node for r in outcome.reasons] == ["bad"]
    assert (await tags(context))[-1] == "artifact_rejected"
    assert desk.attested == 0 and context.stats.rejection_reasons == {"semantic": 1}
    assert [f["node"] for f in rounds.failures()] == ["bad"]
    assert rounds.verdict is not None
    assert rounds.summaries[0].failures == (str(outcome.reasons[0]),)


@pytest.mark.anyio
async def test_failed_work_is_rejected_at_routing_and_nothing_runs(tmp_path: Path) -> None:
    context = await context_for(parts_graph(folder(tmp_path), [PASS]), tmp_path)
    outcome = await pipeline(context, Desk()).run(WorkFailed("boom", "misconfigured"))
    assert isinstance(outcome, Rejected) and outcome.layer == "routing"
    assert await tags(context) == ["artifact_validation_started", "artifact_rejected"]


@pytest.mark.anyio
async def test_a_validation_that_cannot_be_called_is_rejected_at_routing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removed since the plan started: a missing capability, named with its node."""
    name = fake_module(monkeypatch, "gg_round_gone", check=lambda **_: {"passed": True})
    gone = [{"name": "gone", "entrypoint": f"{name}:check"}]
    graph = parts_graph(folder(tmp_path), gone, nodes=in_this_process(gone))
    context = await context_for(graph, tmp_path)
    monkeypatch.delitem(__import__("sys").modules, name)
    outcome = await pipeline(context, Desk()).run(None)
    assert isinstance(outcome, Rejected) and outcome.layer == "routing"
    assert outcome.reasons[0].node == "gone" and "gg_round_gone" in str(outcome.reasons[0])


@pytest.mark.anyio
async def test_an_artifact_against_the_schema_is_rejected_at_payload(tmp_path: Path) -> None:
    graph = parts_graph(
        folder(tmp_path),
        [PASS],
        lifecycle={"artifact_schema": {"type": "object", "required": ["patch"]}},
    )
    context = await context_for(graph, tmp_path)
    outcome = await pipeline(context, Desk()).run({"other": 1})
    assert isinstance(outcome, Rejected) and outcome.layer == "payload"
    assert "patch" in str(outcome.reasons[0])
    assert "validation_started" not in await tags(context)


@pytest.mark.anyio
async def test_a_validator_retry_reruns_only_what_the_fault_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An infrastructure fault re-runs the failed node; the passing one is not called again
    — unless the sandboxes changed since, when every validation runs again."""
    calls = {"ok": 0, "shaky": 0}

    def ok(**_: Any) -> dict[str, Any]:
        calls["ok"] += 1
        return {"passed": True}

    def shaky(**_: Any) -> dict[str, Any]:
        calls["shaky"] += 1
        if calls["shaky"] == 1:
            raise ConnectionError("the service is down")
        return {"passed": True}

    name = fake_module(monkeypatch, "gg_round_retry", ok=ok, shaky=shaky)
    validations = [
        {"name": "ok", "entrypoint": f"{name}:ok"},
        {"name": "shaky", "entrypoint": f"{name}:shaky"},
    ]
    graph = parts_graph(folder(tmp_path), validations, nodes=in_this_process(validations))
    context = await context_for(graph, tmp_path)
    rounds = pipeline(context, Desk())
    first = await rounds.run(None)
    assert isinstance(first, Rejected) and first.reasons[0].error is not None
    rounds.rerun_failed(first)
    assert isinstance(await rounds.run(None), Passed)
    assert calls == {"ok": 1, "shaky": 2} and set(rounds.records) == {"ok", "shaky"}
    # The same retry after the sandboxes changed: everything runs again.
    calls.update(ok=0, shaky=0)
    third = await rounds.run(None)
    assert isinstance(third, Rejected)
    rounds.rerun_failed(third)
    (await context.boxes.views())["repo"].joinpath("a.txt").write_text("changed\n")
    assert isinstance(await rounds.run(None), Passed)
    assert calls == {"ok": 2, "shaky": 2}


@pytest.mark.anyio
async def test_a_failure_that_does_not_hold_is_flaky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}

    def coin(**_: Any) -> dict[str, Any]:
        calls["n"] += 1
        return {"passed": calls["n"] > 1, "message": f"call {calls['n']}"}

    name = fake_module(monkeypatch, "gg_round_coin", coin=coin)
    validations = [{"name": "coin", "entrypoint": f"{name}:coin"}]
    graph = parts_graph(
        folder(tmp_path),
        validations,
        nodes=in_this_process(validations),
        policy={"confirm_failures": True},
    )
    context = await context_for(graph, tmp_path)
    rounds = pipeline(context, Desk())
    outcome = await rounds.run(None)
    assert isinstance(outcome, Rejected) and outcome.reasons[0].error == "flaky"
    assert "confirmation_started" in await tags(context)
    assert context.stats.flakes == {"coin": 1} and calls["n"] == 2
    assert context.stats.semantic_invocations == 2


@pytest.mark.anyio
async def test_a_failure_that_holds_is_confirmed(tmp_path: Path) -> None:
    graph = parts_graph(folder(tmp_path), [FAIL], policy={"confirm_failures": True})
    context = await context_for(graph, tmp_path)
    outcome = await pipeline(context, Desk()).run(None)
    assert isinstance(outcome, Rejected) and outcome.reasons[0].error is None
    assert context.stats.flakes == {}


APPROVE = {"rules": [{"match": "ok", "tier": "release", "action": "require"}]}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answer", "passed", "denied"),
    [(None, None, False), ("approve", True, False), ("deny", False, True)],
)
async def test_an_approval_asks_a_person(
    tmp_path: Path, answer: str | None, passed: bool | None, denied: bool
) -> None:
    context = await context_for(
        parts_graph(folder(tmp_path), [PASS], policy={"approval": APPROVE}), tmp_path
    )
    desk = Desk(EscalationDecision(action=answer, note="n") if answer else None)  # type: ignore[arg-type]
    rounds = pipeline(context, desk)
    outcome = await rounds.run(None)
    [request] = desk.asked
    assert request.reason == "approval" and request.tier == "release"
    assert "approval_required" in await tags(context)
    if passed is None:
        assert isinstance(outcome, NeedsApproval)
    else:
        assert isinstance(outcome, Passed) is passed
    assert rounds.denied is denied


@pytest.mark.anyio
async def test_auto_approve_asks_nobody(tmp_path: Path) -> None:
    context = await context_for(
        parts_graph(folder(tmp_path), [PASS], policy={"approval": APPROVE}), tmp_path
    )
    desk = Desk()
    assert isinstance(await pipeline(context, desk, auto_approve=True).run(None), Passed)
    assert desk.asked == []


def test_given_outputs() -> None:
    """Each work node's entry of an artifact that has one for every node, else the whole."""
    assert given_outputs(["a", "b"], {"a": 1, "b": 2, "c": 3}) == {"a": 1, "b": 2}
    assert given_outputs(["a", "b"], {"a": 1}) == {"a": {"a": 1}, "b": {"a": 1}}
    assert given_outputs([], {"a": 1}) == {}
