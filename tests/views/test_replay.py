"""Replay: every decision of a plan re-derived from its event log, nothing re-executed."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import time
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _plans import BAD, GOOD, plan, repo
from click.testing import CliRunner
from gategraph.runtime import Catalog, MemoryEventLog, Validation, load_graph
from gategraph.runtime._base._ids import new_ulid
from gategraph.runtime._base._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._cli import cli
from gategraph.runtime._data._events import ApplyStarted, ArtifactValidated, ValidationCompleted
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._data._results import ValidationResult
from gategraph.runtime._lifecycle._plan_round import RoundPipeline
from gategraph.runtime._lifecycle._supervisor import PlanStatus, Supervisor
from gategraph.runtime._running._pipeline import Reason, Rejected, round_faults
from gategraph.runtime._storage._eventlog import read_events
from gategraph.runtime._views._replay import ReplayReport, replay_plan

DEMO = Path(__file__).resolve().parents[2] / "graphs" / "demo"


async def recorded(text: str, **kwargs: Any) -> tuple[Any, list[Any], Any]:
    """Run the plan on a memory log; return its outcome, its events and its graph."""
    graph = load_graph(text)
    sleep = kwargs.pop("sleep", None)
    log = MemoryEventLog()
    supervisor = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), sleep=sleep, **kwargs)
    outcome = await supervisor.run()
    return outcome, await log.read(outcome.plan_id), graph


def tag(event: Any) -> str:
    return str(type(event).__struct_config__.tag)


def seq_of(events: list[Any], kind: str, nth: int = 0) -> int:
    return [e.seq for e in events if tag(e) == kind][nth]


def renumber(events: list[Any]) -> list[Any]:
    return [msgspec.structs.replace(e, seq=i) for i, e in enumerate(events, start=1)]


def replace_at(events: list[Any], seq: int, **changes: Any) -> list[Any]:
    return [msgspec.structs.replace(e, **changes) if e.seq == seq else e for e in events]


def assert_matches(report: ReplayReport, events: list[Any]) -> None:
    assert report.matches, report.mismatches
    assert report.mismatches == []
    assert report.events == len(events)
    assert report.decisions_checked > 0


def first_mismatch(report: ReplayReport) -> str:
    assert not report.matches
    return report.mismatches[0]


async def flaky_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    calls = {"n": 0}

    def flaky(**_: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("linter service unreachable")
        return {"passed": True, "message": "fine now"}

    module = types.ModuleType(name)
    module.flaky = flaky  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    return plan(repo(tmp_path), [GOOD]).replace(
        "nodes:\n",
        f'  - {{name: flaky, entrypoint: "{name}:flaky"}}\nnodes:\n'
        "  - {id: flaky, validation: flaky, isolation: thread}\n",
    )


# -- real plans replay to a match --------------------------------------------------------


@pytest.mark.anyio
async def test_happy_path_matches(tmp_path: Path) -> None:
    """A plan applied on its first round replays to a match."""
    outcome, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))
    assert outcome.status is PlanStatus.APPLIED
    report = replay_plan(events, graph)
    assert_matches(report, events)
    assert report.plan_id == outcome.plan_id and report.rounds == 1


@pytest.mark.anyio
async def test_fix_then_pass_matches(tmp_path: Path) -> None:
    """A rejected round, a fix and a passing round replay to a match."""
    outcome, events, graph = await recorded(plan(repo(tmp_path), [BAD, GOOD]))
    assert [a["retryDecision"] for a in outcome.attempts] == ["fix", "attested"]
    report = replay_plan(events, graph)
    assert_matches(report, events)
    assert report.rounds == 2


@pytest.mark.anyio
async def test_whole_ladder_matches(tmp_path: Path) -> None:
    """Fixes, a spent budget, a strategy revision and an aborting person replay to a match."""

    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort", note="not worth it")

    text = plan(repo(tmp_path), [BAD], retry_limit=2, strategy_revisions=1)
    outcome, events, graph = await recorded(text, escalation=person)
    assert outcome.status is PlanStatus.FAILED
    report = replay_plan(events, graph)
    assert_matches(report, events)
    assert report.rounds == 6
    assert any("person" in note for note in report.notes)


@pytest.mark.anyio
async def test_escalation_retry_matches(tmp_path: Path) -> None:
    """A person's retry (a fresh budget, the note in the fix) replays to a match."""

    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="retry", note="close the parenthesis")

    text = plan(repo(tmp_path), [BAD, GOOD], retry_limit=0, strategy_revisions=0)
    outcome, events, graph = await recorded(text, escalation=person)
    assert outcome.status is PlanStatus.APPLIED
    assert_matches(replay_plan(events, graph), events)


@pytest.mark.anyio
async def test_waiting_for_a_person_matches(tmp_path: Path) -> None:
    """A plan paused as awaiting_decision replays to a match."""
    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    outcome, events, graph = await recorded(text)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert_matches(replay_plan(events, graph), events)


@pytest.mark.anyio
async def test_permanent_fault_matches(tmp_path: Path) -> None:
    """A read-only violation escalated at once replays to a match."""
    text = plan(repo(tmp_path), [GOOD]).replace(
        "nodes:\n",
        "  - {name: writer, entrypoint: gategraph.runtime.testing:writing, resource_slots: [root]}\n"
        "nodes:\n  - {id: writer, validation: writer}\n",
    )
    outcome, events, graph = await recorded(text)
    assert [a["retryDecision"] for a in outcome.attempts] == ["escalate-permanent"]
    assert_matches(replay_plan(events, graph), events)


@pytest.mark.anyio
async def test_infra_retry_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A validator re-run alone after a backoff (a fake sleep) replays to a match."""
    text = await flaky_plan(tmp_path, monkeypatch, "gg_replay_flaky")
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    outcome, events, graph = await recorded(text, sleep=fake_sleep)
    assert [a["retryDecision"] for a in outcome.attempts] == ["retry-validator", "attested"]
    assert len(slept) == 1
    # The second round re-ran only the flaky validation: replay merges it into the first.
    second = seq_of(events, "artifact_validation_started", 1)
    assert [e.node for e in events if tag(e) == "validation_completed" and e.seq > second] == [
        "flaky"
    ]
    report = replay_plan(events, graph)
    assert_matches(report, events)
    assert any("waits" in note for note in report.notes)


@pytest.mark.anyio
async def test_retry_of_a_chain_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retry re-running a failed tool and the validation after it replays to a match."""
    calls = {"n": 0}

    def flaky_tool(**_: Any) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError("disk hiccup")
        return {"ok": True}

    module = types.ModuleType("gg_replay_chain")
    module.flaky_tool = flaky_tool  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gg_replay_chain", module)
    text = plan(repo(tmp_path), [GOOD], retry_limit=2, strategy_revisions=0).replace(
        "nodes:\n",
        "  - {name: never, entrypoint: gategraph.runtime.testing:failing}\n"
        "tools:\n"
        '  - {name: x, entrypoint: "gg_replay_chain:flaky_tool"}\n'
        "nodes:\n"
        # A module of this process only: its isolation declared (trusted).
        "  - {id: after, tool: x, needs: [syntax], isolation: thread}\n"
        "  - {id: v2, validation: never, needs: [after]}\n",
    )

    async def no_sleep(seconds: float) -> None:
        pass

    outcome, events, graph = await recorded(text, sleep=no_sleep)
    assert outcome.status is not PlanStatus.APPLIED
    assert outcome.attempts[0]["retryDecision"] == "retry-validator"
    assert "node_skipped" in [tag(e) for e in events]
    assert_matches(replay_plan(events, graph), events)


@pytest.mark.anyio
async def test_payload_rejection_matches(tmp_path: Path) -> None:
    """A payload rejection is re-derived from the recorded artifact (work_finished), and
    the ladder after it checked; a tampered artifact or rejection is a mismatch."""
    text = plan(repo(tmp_path), [GOOD], retry_limit=0, strategy_revisions=0).replace(
        "lifecycle:\n", "lifecycle:\n  artifact_schema: {type: object, required: [version]}\n"
    )
    outcome, events, graph = await recorded(text)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    report = replay_plan(events, graph)
    assert_matches(report, events)
    assert not any(note.startswith("payload") for note in report.notes)
    work = next(e for e in events if tag(e) == "work_finished")
    fixed = replace_at(events, work.seq, artifact={"files": [], "version": 1})
    report = replay_plan(fixed, graph)
    assert not report.matches
    assert "expected the artifact to pass routing and payload" in report.mismatches[0]
    rejected = next(e for e in events if tag(e) == "artifact_rejected")
    reworded = replace_at(events, rejected.seq, reasons=["payload: something else"])
    assert "expected payload rejection" in replay_plan(reworded, graph).mismatches[0]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("rule", "status"),
    [
        ("{match: 'syn*', action: require, tier: high}", PlanStatus.AWAITING_APPROVAL),
        ("{match: 'syn*', action: deny}", PlanStatus.AWAITING_DECISION),
    ],
)
async def test_approval_outcomes_match(tmp_path: Path, rule: str, status: PlanStatus) -> None:
    """An approval pause or denial is derived from the graph's policy, as the run derived
    it, and replays to a match; a log whose round got past a denial does not."""
    text = plan(repo(tmp_path), [GOOD], retry_limit=0, strategy_revisions=0)
    outcome, events, graph = await recorded(text + f"  approval: {{rules: [{rule}]}}\n")
    assert outcome.status is status
    report = replay_plan(events, graph)
    assert_matches(report, events)
    end = next(e for e in events if tag(e) in ("approval_required", "artifact_rejected"))
    forged = [
        ArtifactValidated(
            id=new_ulid(), plan_id=end.plan_id, seq=end.seq, at=end.at, round=1, verdict={}
        )
        if e is end
        else e
        for e in events
        if e.seq <= end.seq
    ]
    expected = (
        "approval_required (syntax needs approval (tier high))"
        if "require" in rule
        else "artifact_rejected at the approval layer: approval: denied by policy: 'syn*' "
        "matches syntax"
    )
    assert replay_plan(forged, graph).mismatches[0] == (
        f"seq {end.seq} (artifact_validated): expected {expected}, log says artifact_validated"
    )


@pytest.mark.anyio
async def test_executor_crash_retried_matches(tmp_path: Path) -> None:
    """An execution actor that raises is a routing rejection sent back as a fix; the same
    error again goes to a person (work_error); replays match."""
    text = plan(repo(tmp_path), [GOOD], retry_limit=3, strategy_revisions=0).replace(
        '- files: {"src/greet.py": "' + GOOD + '"}', "- {raise_: out of disk}"
    )
    outcome, events, graph = await recorded(text)
    decisions = [a["retryDecision"] for a in outcome.attempts]
    assert decisions == ["fix", "escalate-permanent"]
    assert [a["faultKind"] for a in outcome.attempts] == ["rejected", "work_error"]
    assert_matches(replay_plan(events, graph), events)


@pytest.mark.anyio
async def test_attachments_need_the_catalog(tmp_path: Path) -> None:
    """Attachment modes come from the catalog; without it replay says which it cannot know."""
    catalog = Catalog.in_memory()
    catalog.add(
        Validation.from_config({"name": "nope", "entrypoint": "gategraph.runtime.testing:failing"})
    )
    attachment = catalog.attach("repo", "nope")
    text = plan(repo(tmp_path), [GOOD], retry_limit=1, strategy_revisions=0)
    outcome, events, graph = await recorded(text, catalog=catalog)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert_matches(replay_plan(events, graph, catalog=catalog), events)
    alone = replay_plan(events, graph)
    started = next(
        e for e in events if tag(e) == "validation_started" and e.attachment_id == attachment.id
    )
    line = first_mismatch(alone)
    assert line == (
        f"seq {started.seq} (validation_started): expected a validation whose mode is known, "
        f"for attachment:{attachment.id}, log says 'nope', which the graph does not define, "
        "and no catalog was given (assumed required; replay with the catalog the plan ran with)"
    )


@pytest.mark.anyio
async def test_replay_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay calls no validation: with every validator broken it still matches."""
    _, events, graph = await recorded(plan(repo(tmp_path), [BAD, GOOD]))

    def broken(**_: Any) -> Any:
        raise AssertionError("replay ran a validation")

    import gategraph.runtime.testing as testing
    import gategraph.validators as validators

    monkeypatch.setattr(validators, "python_syntax", broken)
    monkeypatch.setattr(testing, "failing", broken)
    assert_matches(replay_plan(events, graph), events)


class _Suspends:
    """An awaitable that suspends once: what any real I/O or wait does."""

    def __await__(self) -> Any:
        yield


@pytest.mark.anyio
async def test_replay_is_the_supervisor_and_suspends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay runs the supervisor's own lifecycle (each round through its pipeline), and no
    step of it reaches a thread, a sleep or the event loop: it is stepped to its end."""

    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort")

    text = plan(repo(tmp_path), [BAD], retry_limit=2, strategy_revisions=1)
    _, events, graph = await recorded(text, escalation=person)
    import anyio

    def refused(*_: Any, **__: Any) -> Any:
        raise AssertionError("replay reached a thread or a sleep")

    monkeypatch.setattr(anyio.to_thread, "run_sync", refused)
    monkeypatch.setattr(anyio, "sleep", refused)
    rounds: list[int] = []
    validate = RoundPipeline.run

    async def counted(self: RoundPipeline, artifact: Any) -> Any:
        rounds.append(self.context.round)
        return await validate(self, artifact)

    monkeypatch.setattr(RoundPipeline, "run", counted)
    report = replay_plan(events, graph)
    assert_matches(report, events)
    assert rounds == list(range(report.rounds)) and report.rounds == 6


@pytest.mark.anyio
async def test_a_replay_that_would_suspend_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step that would wait on something live is a bug in the replay, not a pass."""
    _, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))

    async def waits(self: Supervisor) -> Any:
        await _Suspends()

    monkeypatch.setattr(Supervisor, "_strategize", waits)
    with pytest.raises(RuntimeError, match="a replay runs nothing"):
        replay_plan(events, graph)


@pytest.mark.anyio
async def test_events_after_the_end_are_out_of_place(tmp_path: Path) -> None:
    """Each event after plan_finished is flagged."""
    _, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))
    last = events[-1]
    extra = msgspec.structs.replace(events[-2], seq=last.seq + 1)
    report = replay_plan([*events, extra], graph)
    assert report.mismatches == [
        f"seq {last.seq + 1} ({tag(extra)}): expected nothing after plan_finished "
        f"(seq {last.seq}), log says {tag(extra)}"
    ]


# -- tampered logs ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_flipped_result_in_a_rejected_round(tmp_path: Path) -> None:
    """A failing required result flipped to passing: the round's rejection no longer follows."""
    _, events, graph = await recorded(plan(repo(tmp_path), [BAD, GOOD]))
    failed = next(e for e in events if tag(e) == "validation_completed" and e.node == "syntax")
    assert not failed.result.passed
    tampered = replace_at(events, failed.seq, result=ValidationResult(True, "fine"))
    report = replay_plan(tampered, graph)
    rejected = seq_of(events, "artifact_rejected")
    assert first_mismatch(report) == (
        f"seq {rejected} (artifact_rejected): expected the round to pass the semantic layer "
        "(every required validation ran and passed), log says artifact_rejected at the semantic layer: "
        + events[rejected - 1].reasons[0]
    )
    assert all(line.startswith(f"seq {rejected} ") for line in report.mismatches)


@pytest.mark.anyio
async def test_flipped_result_in_an_applied_round(tmp_path: Path) -> None:
    """A passing required result flipped to failing: validation and Apply are both flagged."""
    _, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))
    passed = next(e for e in events if tag(e) == "validation_completed" and e.node == "syntax")
    tampered = replace_at(events, passed.seq, result=ValidationResult(False, "does not parse"))
    report = replay_plan(tampered, graph)
    validated, apply = seq_of(events, "artifact_validated"), seq_of(events, "apply_started")
    assert report.mismatches[0].startswith(
        f"seq {validated} (artifact_validated): expected artifact_rejected at the semantic "
        "layer: semantic: syntax: does not parse, log says artifact_validated"
    )
    assert any(
        line.startswith(f"seq {apply} (apply_started): expected no Apply: a required validation")
        for line in report.mismatches
    )


@pytest.mark.anyio
async def test_changed_retry_decision(tmp_path: Path) -> None:
    """A retry_decided whose decision was changed is flagged at its seq, and only there."""
    _, events, graph = await recorded(plan(repo(tmp_path), [BAD, GOOD]))
    decided = seq_of(events, "retry_decided")
    tampered = replace_at(events, decided, decision="escalate-exhausted")
    report = replay_plan(tampered, graph)
    assert report.mismatches == [
        f"seq {decided} (retry_decided): expected decision=fix, log says "
        "decision=escalate-exhausted"
    ]


@pytest.mark.anyio
async def test_changed_budget_used(tmp_path: Path) -> None:
    """A retry_decided that misstates the budget is flagged."""
    _, events, graph = await recorded(plan(repo(tmp_path), [BAD, GOOD]))
    decided = seq_of(events, "retry_decided")
    report = replay_plan(replace_at(events, decided, budget_used=3), graph)
    assert report.mismatches == [
        f"seq {decided} (retry_decided): expected budget_used=1, log says budget_used=3"
    ]


@pytest.mark.anyio
async def test_apply_after_a_rejected_round(tmp_path: Path) -> None:
    """An apply_started inserted after a rejected round breaks the invariant and is flagged."""
    outcome, events, graph = await recorded(
        plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    )
    rejected = seq_of(events, "artifact_rejected")
    forged = ApplyStarted(
        id=new_ulid(), plan_id=outcome.plan_id, seq=0, at=time.time(), resources=["repo"]
    )
    tampered = renumber([*events[:rejected], forged, *events[rejected:]])
    report = replay_plan(tampered, graph)
    assert report.mismatches == [
        f"seq {rejected + 1} (apply_started): expected no apply_started: Apply follows only "
        "an artifact_validated round with no required validation failing, and round 1 was "
        "rejected: " + events[rejected - 1].reasons[0] + ", log says apply_started"
    ]


@pytest.mark.anyio
async def test_dropped_strategy_revision(tmp_path: Path) -> None:
    """A strategy_revision_requested dropped from the log is flagged where it belonged."""

    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort")

    text = plan(repo(tmp_path), [BAD], retry_limit=2, strategy_revisions=1)
    _, events, graph = await recorded(text, escalation=person)
    revision = seq_of(events, "strategy_revision_requested")
    kept = [e for e in events if e.seq != revision]
    report = replay_plan(renumber(kept), graph)
    assert report.mismatches == [
        f"seq {revision} (strategy_produced): expected strategy_revision_requested, log says "
        "strategy_produced (strategy_revision_requested is missing)"
    ]
    # Without renumbering, the gap itself is flagged too.
    gap = replay_plan(kept, graph)
    assert gap.mismatches[0] == (
        f"seq {revision + 1} (strategy_produced): expected seq {revision}, log says seq "
        f"{revision + 1} (events {revision}..{revision} are missing)"
    )


@pytest.mark.anyio
async def test_extra_validation_in_a_retry_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retry of the failed validations alone that shows another validation is flagged."""
    text = await flaky_plan(tmp_path, monkeypatch, "gg_replay_flaky_extra")

    async def no_sleep(seconds: float) -> None:
        pass

    _, events, graph = await recorded(text, sleep=no_sleep)
    rerun = [e for e in events if tag(e) == "validation_completed"][-1]
    assert rerun.node == "flaky"
    tampered = replace_at(events, rerun.seq, node="syntax", validation="syntax")
    line = first_mismatch(replay_plan(tampered, graph))
    assert line == (
        f"seq {rerun.seq} (validation_completed): expected only the failed nodes and those "
        "after them to re-run (flaky), log says syntax ran too"
    )


@pytest.mark.anyio
async def test_wrong_graph_and_foreign_events(tmp_path: Path) -> None:
    """A graph of another name, and events of another plan, are mismatches."""
    outcome, events, graph = await recorded(plan(repo(tmp_path), [GOOD]))
    other = load_graph(plan(repo(tmp_path / "other"), [GOOD]).replace("name: greet", "name: hi"))
    assert first_mismatch(replay_plan(events, other)).startswith(
        "seq 1 (plan_started): expected graph 'hi'"
    )
    stray = msgspec.structs.replace(events[-1], plan_id="another", seq=len(events) + 1)
    assert replay_plan([*events, stray], graph).mismatches == [
        f"seq {len(events) + 1} (plan_finished): expected an event of plan {outcome.plan_id}, "
        "log says plan another"
    ]
    with pytest.raises(ValueError, match="no events"):
        replay_plan([], graph)


@pytest.mark.anyio
async def test_truncated_log_is_a_noted_prefix(tmp_path: Path) -> None:
    """A log cut short (a running or crashed plan) matches so far, and says where it ends."""
    _, events, graph = await recorded(plan(repo(tmp_path), [BAD, GOOD]))
    cut = seq_of(events, "fix_requested")
    report = replay_plan(events[:cut], graph)
    assert report.matches
    assert any(
        f"ends at seq {cut} (fix_requested) without plan_finished" in n for n in report.notes
    )


def test_round_faults_classify_by_layer() -> None:
    """Semantic reasons by their runtime error; every other layer's reason is a rejection."""
    kinds = [
        [f.kind for f in round_faults(outcome)]
        for outcome in [
            Rejected("semantic", (Reason(layer="semantic", node="a", message="no"),)),
            Rejected(
                "semantic",
                (
                    Reason(layer="semantic", node="a", message="t", error="timeout"),
                    Reason(layer="semantic", node="b", message="w", error="read_only_violation"),
                ),
            ),
            Rejected(
                "routing", (Reason(layer="routing", message="the execution actor failed: x"),)
            ),
            Rejected("routing", (Reason(layer="routing", node="a", message="cannot be called"),)),
            Rejected("payload", (Reason(layer="payload", message="bad"),)),
            Rejected("approval", ()),
        ]
    ]
    assert kinds == [
        ["rejected"],
        ["timeout", "read_only_violation"],
        ["rejected"],
        ["rejected"],
        ["rejected"],
        ["rejected"],
    ]


# -- the command line ---------------------------------------------------------------------


def invoke(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--catalog", str(tmp_path / "c.db"), *args])
    return result.exit_code, result.stdout, result.stderr


def run_demo(tmp_path: Path) -> tuple[Path, str]:
    copy = tmp_path / "demo"
    shutil.copytree(DEMO, copy)
    code, out, err = invoke(tmp_path, "run", str(copy / "plan.yaml"), "--json")
    assert code == 0, err
    return copy / "plan.yaml", json.loads(out)["plan_id"]


def test_cli_replay_matches(tmp_path: Path) -> None:
    """`gategraph replay PLAN_ID GRAPH` on a real run exits 0 and says everything matches."""
    graph, plan_id = run_demo(tmp_path)
    code, out, err = invoke(tmp_path, "replay", plan_id, str(graph))
    assert code == 0, (out, err)
    count = len(read_events(tmp_path / "events.db", plan_id))
    assert f"replayed {count} events, " in out and out.rstrip().endswith(": all match")
    code, out, _ = invoke(tmp_path, "replay", plan_id, str(graph), "--json")
    report = json.loads(out)
    assert code == 0 and report["matches"] is True and report["rounds"] == 2
    assert report["plan_id"] == plan_id and report["mismatches"] == []


def test_cli_replay_reruns_rounds_on_their_kept_inputs(tmp_path: Path) -> None:
    """`replay --rerun` rebuilds rounds from the store beside the log and runs their
    validations again; bad round lists are usage errors."""
    graph, plan_id = run_demo(tmp_path)
    assert (tmp_path / "store" / "objects").is_dir()
    code, out, err = invoke(tmp_path, "replay", plan_id, str(graph), "--rerun", "all")
    assert code == 0, (out, err)
    assert out.rstrip().endswith("in 2 rounds: all as recorded")
    code, out, _ = invoke(tmp_path, "replay", plan_id, str(graph), "--rerun", "2", "--json")
    rerun = json.loads(out)["rerun"]
    assert code == 0 and rerun["rounds"] == [2] and rerun["matches"] is True
    assert rerun["flaky"] == [] and rerun["validations"] > 0
    for rounds, message in [
        ("x", "--rerun: 'x' is not 'all' or round numbers such as '1,3'"),
        ("9", f"--rerun: plan {plan_id} has no round 9 (it has 2)"),
    ]:
        code, out, err = invoke(tmp_path, "replay", plan_id, str(graph), "--rerun", rounds)
        assert (code, err.strip()) == (2, f"error: {message}")


def test_cli_replay_tampered_log_exits_1(tmp_path: Path) -> None:
    """A segment of the SQLite log rewritten to another decision: replay exits 1 naming it."""
    graph, plan_id = run_demo(tmp_path)
    db = sqlite3.connect(tmp_path / "events.db")
    try:
        rows = db.execute(
            "SELECT first_seq, body FROM event_segments WHERE plan_id = ?", (plan_id,)
        ).fetchall()
        first_seq, body = next(
            (seq, bytes(b)) for seq, b in rows if b'"decision":"fix"' in bytes(b)
        )
        forged = body.replace(b'"decision":"fix"', b'"decision":"retry-validator"')
        with db:
            db.execute(
                "UPDATE event_segments SET body = ? WHERE plan_id = ? AND first_seq = ?",
                (forged, plan_id, first_seq),
            )
    finally:
        db.close()
    decided = next(
        e for e in read_events(tmp_path / "events.db", plan_id) if tag(e) == "retry_decided"
    )
    code, out, _ = invoke(tmp_path, "replay", plan_id, str(graph))
    assert code == 1
    assert (
        f"seq {decided.seq} (retry_decided): expected decision=fix, log says "
        "decision=retry-validator"
    ) in out
    assert "replayed" in out and "1 mismatch" in out


def test_cli_replay_usage_errors(tmp_path: Path) -> None:
    """The graph file defaults to the one the log names; an unknown plan, a graph of
    another name, a graph file gone: one error line, exit code 2."""
    graph, plan_id = run_demo(tmp_path)
    code, out, err = invoke(tmp_path, "replay", plan_id)
    assert code == 0 and "all match" in out, err
    code, _, err = invoke(tmp_path, "replay", "nope", str(graph))
    assert code == 2 and "no events for plan 'nope'" in err
    other = graph.with_name("other.yaml")
    other.write_text(graph.read_text().replace("name: demo-fix", "name: other"))
    code, _, err = invoke(tmp_path, "replay", plan_id, str(other))
    assert code == 2 and "ran graph 'demo-fix'" in err
    code, _, err = invoke(tmp_path, "replay", plan_id, str(tmp_path / "missing.yaml"))
    assert code == 2 and "Traceback" not in err
    graph.rename(graph.with_name("moved.yaml"))
    code, _, err = invoke(tmp_path, "replay", plan_id)
    assert code == 2 and "no such graph file" in err and "Traceback" not in err


def test_cli_replay_without_a_log(tmp_path: Path) -> None:
    """With no event log at all, replay is a usage error."""
    code, _, err = invoke(tmp_path, "replay", "nope", str(DEMO / "plan.yaml"))
    assert code == 2 and "no event log" in err


def test_events_are_replayable_records(tmp_path: Path) -> None:
    """A validation_completed carries the full result replay reads (seed 002 §13)."""
    event = ValidationCompleted(
        id=new_ulid(),
        plan_id="p",
        seq=1,
        at=0.0,
        node="n",
        validation="v",
        result=ValidationResult(False, "no", {"error": "timeout"}),
        duration=0.1,
    )
    assert msgspec.json.decode(msgspec.json.encode(event), type=ValidationCompleted) == event
