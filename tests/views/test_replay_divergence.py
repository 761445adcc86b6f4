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
from gategraph.runtime._base._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._lifecycle._supervisor import PlanStatus, Supervisor
from gategraph.runtime._views._replay import replay_plan


async def recorded(text: str, **kwargs: Any) -> tuple[Any, list[Any], Any]:
    """Run the plan on a memory log; return its outcome, its events and its graph."""
    graph = load_graph(text)
    log = MemoryEventLog()
    supervisor = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), **kwargs)
    outcome = await supervisor.run()
    return outcome, await log.read(outcome.plan_id), graph


def tag(event: Any) -> str:
    return str(type(event).__struct_config__.tag)


def renumber(events: list[Any]) -> list[Any]:
    import msgspec

    return [msgspec.structs.replace(e, seq=i) for i, e in enumerate(events, start=1)]


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


@pytest.mark.anyio
async def test_a_log_that_holds_something_else_stops_the_replay_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the supervisor needs a fact the log does not hold (here: the work of a fix the
    tampered log never asked for), the replay stops, says where, and runs nothing."""
    _, events, graph = await recorded(misconfigured_plan(tmp_path, monkeypatch))
    changed, _ = tampered(events, "artifact_rejected", reasons=["routing: something else"])
    report = replay_plan(changed, graph)
    escalated = first(events, "escalation_requested").seq
    assert report.mismatches[-1] == (
        f"seq {escalated} (escalation_requested): expected work_finished, log says "
        "escalation_requested"
    )
    assert (
        f"replay stops at seq {escalated}: the plan needs work_finished there, which the log "
        "does not hold"
    ) in report.notes


@pytest.mark.anyio
async def test_resume_refuses_an_answer_that_is_neither_retry_nor_abort(tmp_path: Path) -> None:
    """The supervisor checks a recorded person's answer, resuming as replaying: a log whose
    escalation_decided says 'shrug' is not followed as a retry."""
    from gategraph.runtime import ResumeError
    from gategraph.runtime._lifecycle._supervisor import resume_plan

    outcome, events, graph = await retry_then_abort(tmp_path)
    changed, seq = tampered(events, "escalation_decided", action="shrug")
    log = MemoryEventLog()
    for event in changed:
        await log.append(event)
    with pytest.raises(ResumeError, match=f"at seq {seq} the log has action 'shrug'"):
        await resume_plan(outcome.plan_id, graph, event_log=log, audit=InMemoryAuditLog())
    assert await log.read(outcome.plan_id) == changed  # nothing appended


@pytest.mark.anyio
async def test_a_plan_that_ends_where_the_log_goes_on(tmp_path: Path) -> None:
    """An answer read as an abort ends the plan; every step the log holds after it is out
    of place, up to the log's own plan_finished."""
    _, events, graph = await retry_then_abort(tmp_path)
    changed, seq = tampered(events, "escalation_decided", action="shrug")
    mismatches = replay_plan(changed, graph).mismatches
    after = [e for e in changed if e.seq > seq]
    assert mismatches[1:] == [
        f"seq {e.seq} ({tag(e)}): expected plan_finished, log says {tag(e)}" for e in after[:-1]
    ]
    assert tag(after[-1]) == "plan_finished"


# -- rounds whose record is incomplete or out of order ------------------------------------------


@pytest.mark.anyio
async def test_a_round_whose_results_are_gone_or_short(tmp_path: Path) -> None:
    """A round with no recorded validation ran none; a full round missing one result did
    not run every applicable validation."""
    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    _, events, graph = await recorded(text)
    rejected = first(events, "artifact_rejected").seq
    engine = {"run_started", "run_finished", "validation_started", "validation_completed"}
    start = first(events, "artifact_validation_started").seq
    in_round = [e for e in events if start < e.seq < rejected and tag(e) in engine]
    gone = renumber([e for e in events if e not in in_round])
    assert replay_plan(gone, graph).mismatches[0] == (
        f"seq {rejected - len(in_round)} (artifact_rejected): expected the semantic layer's "
        "validations in round 1 (the semantic layer comes after it), log says none ran"
    )
    completed = [e for e in in_round if tag(e) == "validation_completed"]
    short = renumber([e for e in events if e is not completed[-1]])
    assert replay_plan(short, graph).mismatches[0] == (
        f"seq {rejected - 1} (artifact_rejected): expected every applicable validation to run "
        f"in round 1, log says no result for {completed[-1].node}"
    )


@pytest.mark.anyio
async def test_a_routing_rejection_the_log_alone_knows(tmp_path: Path) -> None:
    """A routing rejection of work that was done (a validation that could not be prepared
    then) is taken from the log; validations recorded after it are flagged."""
    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    _, events, graph = await recorded(text)
    changed, seq = tampered(events, "artifact_rejected", layer="routing", reasons=["x: gone"])
    report = replay_plan(changed, graph)
    ran = next(e for e in events if tag(e) == "run_started" and e.seq > 4)
    assert report.mismatches[0] == (
        f"seq {seq} (artifact_rejected): expected no validation in round 1 (the routing "
        f"layer rejects before the semantic layer runs), log says the semantic layer ran "
        f"from seq {ran.seq}"
    )
    assert any(note.startswith("routing rejections for validations") for note in report.notes)


@pytest.mark.anyio
async def test_work_that_failed_yet_went_past_routing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work that failed is a routing rejection: a log whose round went on is flagged."""
    _, events, graph = await recorded(misconfigured_plan(tmp_path, monkeypatch))
    changed, seq = tampered(events, "artifact_rejected", layer="semantic")
    line = replay_plan(changed, graph).mismatches[0]
    assert line.startswith(f"seq {seq} (artifact_rejected): expected a routing rejection: ")
    assert line.endswith("log says artifact_rejected (the round went past the routing layer)")


@pytest.mark.anyio
async def test_an_artifact_that_was_not_json(tmp_path: Path) -> None:
    """An artifact recorded only as its repr: its payload rejection is taken from the log."""
    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    _, events, graph = await recorded(text)
    stub = {"unencodable": True, "repr": "<object>"}
    changed, _ = tampered(events, "work_finished", artifact=stub)
    changed, _ = tampered(changed, "artifact_rejected", layer="payload", reasons=["p: no"])
    engine = {"run_started", "run_finished", "validation_started", "validation_completed"}
    start = first(events, "artifact_validation_started").seq
    changed = renumber([e for e in changed if not (e.seq > start and tag(e) in engine)])
    report = replay_plan(changed, graph)
    assert report.matches, report.mismatches
    assert any(note.startswith("payload rejections of an artifact") for note in report.notes)


@pytest.mark.anyio
async def test_a_node_that_ends_twice_or_a_run_outside_a_round(tmp_path: Path) -> None:
    """A validation completed twice in one round (a failure hidden under a pass), or a
    validation's result where no run is under way, does not replay."""
    import msgspec

    _, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))
    passed = next(e for e in events if tag(e) == "validation_completed" and e.node == "syntax")
    from gategraph.runtime._data._results import ValidationResult

    failed = msgspec.structs.replace(passed, result=ValidationResult(False, "no"))
    at = events.index(passed)
    twice = renumber([*events[:at], failed, *events[at:]])
    assert replay_plan(twice, graph).mismatches == [
        f"seq {passed.seq + 1} (validation_completed): expected one result for syntax in "
        "round 1 (a node that ended does not run again), log says syntax ended again"
    ]
    applying = first(events, "apply_started")
    at = events.index(applying) + 1
    outside = renumber([*events[:at], failed, *events[at:]])
    assert replay_plan(outside, graph).mismatches == [
        f"seq {applying.seq + 1} (validation_completed): expected apply_completed (no run "
        "is under way), log says validation_completed"
    ]
