"""Replay flags each field of a lifecycle event that differs from what the supervisor would
have decided (seed 002 §13: any difference is a divergence), and replays plans whose work
could not be called, or that an escalation sent back, to a match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime import ConfigError, MemoryEventLog, load_graph
from gategraph.runtime._maxn import InMemoryAuditLog
from gategraph.runtime._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._replay import replay_plan
from gategraph.runtime._supervisor import PlanStatus, Supervisor


async def recorded(text: str, **kwargs: Any) -> tuple[Any, list[Any], Any]:
    """Run the plan on a memory log; return its outcome, its events and its graph."""
    graph = load_graph(text)
    log = MemoryEventLog()
    supervisor = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), **kwargs)
    outcome = await supervisor.run()
    return outcome, await log.read(outcome.plan_id), graph


def tag(event: Any) -> str:
    return str(type(event).__struct_config__.tag)


def first(events: list[Any], kind: str) -> Any:
    return next(e for e in events if tag(e) == kind)


def tampered(events: list[Any], kind: str, **changes: Any) -> tuple[list[Any], int]:
    """The log with the first ``kind`` event changed; and that event's seq."""
    import msgspec

    target = first(events, kind)
    changed = [msgspec.structs.replace(e, **changes) if e is target else e for e in events]
    return changed, target.seq


async def retry_then_abort(tmp_path: Path) -> tuple[Any, list[Any], Any]:
    """A plan escalated once (a person retries with a note), fixed, then aborted."""
    answers = iter(
        [EscalationDecision(action="retry", note="try harder"), EscalationDecision(action="abort")]
    )

    async def person(request: EscalationRequest) -> EscalationDecision:
        return next(answers)

    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    return await recorded(text, escalation=person)


# -- fields that must agree ---------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("kind", "changes", "expected", "logged"),
    [
        ("strategy_produced", {"revision": 4}, "revision 0", "revision 4"),
        ("work_finished", {"attempt": 9}, "attempt 1", "attempt 9"),
        (
            "artifact_validation_started",
            {"round": 7},
            "round 1, attempt 1, revision 0",
            "round 7, attempt 1, revision 0",
        ),
        ("artifact_validated", {"round": 5}, "round 1", "round 5"),
        (
            "apply_started",
            {"resources": ["elsewhere"]},
            "resources ['repo']",
            "resources ['elsewhere']",
        ),
        ("plan_finished", {"status": "failed"}, "status 'applied'", "status 'failed'"),
    ],
)
async def test_a_changed_field_of_an_applied_plan_is_a_mismatch(
    tmp_path: Path, kind: str, changes: dict[str, Any], expected: str, logged: str
) -> None:
    """Revision, attempt, round, resources and final status are each re-derived."""
    outcome, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))
    assert outcome.status is PlanStatus.APPLIED
    assert replay_plan(events, graph).matches
    changed, seq = tampered(events, kind, **changes)
    report = replay_plan(changed, graph)
    assert not report.matches
    assert report.mismatches[0] == f"seq {seq} ({kind}): expected {expected}, log says {logged}"


@pytest.mark.anyio
async def test_a_changed_fix_or_escalation_is_a_mismatch(tmp_path: Path) -> None:
    """A fix's attempt and note, and an escalation's reason, are re-derived from the ladder."""
    outcome, events, graph = await retry_then_abort(tmp_path)
    assert outcome.status is PlanStatus.FAILED
    report = replay_plan(events, graph)
    assert report.matches, report.mismatches
    assert any("person" in note for note in report.notes)

    changed, seq = tampered(events, "fix_requested", attempt=5)
    assert replay_plan(changed, graph).mismatches[0] == (
        f"seq {seq} (fix_requested): expected attempt 2, log says attempt 5"
    )
    changed, seq = tampered(events, "fix_requested", note="something else")
    assert replay_plan(changed, graph).mismatches[0] == (
        f"seq {seq} (fix_requested): expected note 'try harder', log says note 'something else'"
    )
    changed, seq = tampered(events, "escalation_requested", reason="permanent")
    assert replay_plan(changed, graph).mismatches[0] == (
        f"seq {seq} (escalation_requested): expected reason 'exhausted', log says reason "
        "'permanent'"
    )
    changed, seq = tampered(events, "escalation_decided", action="shrug")
    assert replay_plan(changed, graph).mismatches[0] == (
        f"seq {seq} (escalation_decided): expected action 'retry' or 'abort', log says "
        "action 'shrug'"
    )


@pytest.mark.anyio
async def test_a_changed_strategy_revision_is_a_mismatch(tmp_path: Path) -> None:
    """A revision request must name the next revision."""

    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort")

    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=1)
    _, events, graph = await recorded(text, escalation=person)
    assert replay_plan(events, graph).matches
    changed, seq = tampered(events, "strategy_revision_requested", revision=3)
    assert replay_plan(changed, graph).mismatches[0] == (
        f"seq {seq} (strategy_revision_requested): expected revision 1, log says revision 3"
    )


@pytest.mark.anyio
async def test_a_rejection_at_an_unknown_layer_is_a_mismatch(tmp_path: Path) -> None:
    """A layer that is not one of the pipeline's is flagged, then read as payload."""
    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    _, events, graph = await recorded(text)
    changed, seq = tampered(events, "artifact_rejected", layer="vibes")
    mismatches = replay_plan(changed, graph).mismatches
    assert mismatches[0] == (
        f"seq {seq} (artifact_rejected): expected a layer of routing, payload, semantic, "
        "approval, log says layer 'vibes'"
    )


@pytest.mark.anyio
async def test_a_semantic_rejection_with_other_reasons_is_a_mismatch(tmp_path: Path) -> None:
    """The reasons of a semantic rejection are re-derived from the round's results."""
    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    _, events, graph = await recorded(text)
    changed, seq = tampered(events, "artifact_rejected", reasons=["syntax: made up"])
    line = replay_plan(changed, graph).mismatches[0]
    assert line.startswith(f"seq {seq} (artifact_rejected): expected reasons semantic: syntax: ")
    assert line.endswith("log says reasons syntax: made up")


# -- work that cannot be called ------------------------------------------------------------------


class Misconfigured:
    """An execution actor whose work cannot be called: a configuration error, every time."""

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, request: Any) -> Any:
        self.calls += 1
        raise ConfigError.at("nodes[0].tool", "cannot import 'gg_missing_tool'")

    async def fix(self, request: Any) -> Any:
        raise AssertionError("a misconfigured plan is never sent back to be fixed")


def misconfigured_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    module = fake_module(monkeypatch, "gg_replay_misconfigured", Misconfigured=Misconfigured)
    text = plan(repo(tmp_path), [GOOD])
    return (
        text[: text.index("lifecycle:")]
        + f"lifecycle:\n  executor: {{uses: '{module}:Misconfigured'}}\n"
    )


@pytest.mark.anyio
async def test_work_that_cannot_be_called_escalates_at_once_and_replays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configuration error from the execution actor is a permanent routing fault (no fix),
    and replay re-derives that routing rejection from the recorded work."""
    outcome, events, graph = await recorded(misconfigured_plan(tmp_path, monkeypatch))
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert [a["retryDecision"] for a in outcome.attempts] == ["escalate-permanent"]
    assert outcome.attempts[0]["faultKind"] == "misconfigured"
    rejected = first(events, "artifact_rejected")
    assert rejected.layer == "routing"
    assert "cannot import 'gg_missing_tool'" in rejected.reasons[0]
    report = replay_plan(events, graph)
    assert report.matches, report.mismatches
    changed, seq = tampered(events, "artifact_rejected", reasons=["routing: something else"])
    line = replay_plan(changed, graph).mismatches[0]
    assert line.startswith(f"seq {seq} (artifact_rejected): expected routing rejection: ")
    assert line.endswith("log says routing rejection: routing: something else")
