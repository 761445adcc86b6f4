"""The supervisor: Strategize → Execute → Apply, the pipeline, and seed 000's failure ladder."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime import Catalog, MemoryEventLog, Validation, load_graph
from gategraph.runtime._base._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._lifecycle._supervisor import PlanStatus, run_plan

pytestmark = pytest.mark.anyio


async def run(text: str, **kwargs: Any) -> tuple[Any, list[Any], InMemoryAuditLog]:
    log = MemoryEventLog()
    audit = InMemoryAuditLog()
    outcome = await run_plan(load_graph(text), event_log=log, audit=audit, **kwargs)
    return outcome, await log.read(outcome.plan_id), audit


def types_of(events: list[Any]) -> list[str]:
    return [type(e).__struct_config__.tag for e in events]


async def test_happy_path_applies(tmp_path: Path) -> None:
    """A plan whose required validations pass is applied, and every step is an event."""
    root = repo(tmp_path)
    outcome, events, audit = await run(plan(root, [GOOD]))
    assert outcome.status is PlanStatus.APPLIED
    assert (
        root / "src" / "greet.py"
    ).read_text() == "def greet(name):\n    return 'hello ' + name\n"
    assert outcome.changes == {"repo": "1 added, 0 modified, 0 deleted"}
    assert outcome.verdict is not None and outcome.verdict["verdict"] == "attest"
    kinds = types_of(events)
    assert kinds[:2] == ["plan_started", "strategy_produced"]
    assert kinds[-3:] == ["apply_started", "apply_completed", "plan_finished"]
    assert kinds.index("artifact_validated") < kinds.index("apply_started")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    # Informational failures are recorded and shown, never blocking nor failing findings.
    advice = next(v for v in outcome.validations if v.node == "advice")
    assert not advice.result.passed
    assert all(f["status"] == "pass" for f in outcome.verdict["findings"])
    assert [a["retryDecision"] for a in outcome.attempts] == ["attested"]
    assert len(audit.read(outcome.plan_id)) == 1
    assert outcome.statistics.rounds == 1 and outcome.statistics.pipeline_completions == 1


async def test_an_applied_plan_whose_markers_cannot_go_yet_stays_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once Apply is logged, a resource that cannot clear its own markers (its journal's
    lock is held elsewhere) leaves them, which keeps the plan from being applied twice: the
    plan is applied all the same, with a warning saying so."""
    from gategraph.runtime import ApplyConflictError
    from gategraph.runtime._storage._resources import DirectoryResource

    def held(self: DirectoryResource, *, plan_id: str) -> None:
        raise ApplyConflictError("resource 'repo': its journal's lock is held", resource="repo")

    monkeypatch.setattr(DirectoryResource, "release", held)
    root = repo(tmp_path)
    with pytest.warns(RuntimeWarning, match=r"applied, but resource 'repo': its journal"):
        outcome, _, _ = await run(plan(root, [GOOD]))
    assert outcome.status is PlanStatus.APPLIED
    assert (root / "src" / "greet.py").exists()


async def test_fix_then_revalidate(tmp_path: Path) -> None:
    """A required failure goes to the executor with the rejection, is fixed, revalidated, applied."""
    root = repo(tmp_path)
    outcome, events, _ = await run(plan(root, [BAD, GOOD]))
    assert outcome.status is PlanStatus.APPLIED
    assert [a["retryDecision"] for a in outcome.attempts] == ["fix", "attested"]
    assert outcome.attempts[0]["faultKind"] == "rejected"
    kinds = types_of(events)
    assert kinds.count("artifact_rejected") == 1 and kinds.count("fix_requested") == 1
    rejected = next(e for e in events if type(e).__struct_config__.tag == "artifact_rejected")
    assert rejected.layer == "semantic" and rejected.verdict["verdict"] == "reject"
    # Named by the criterion's UUID (the plan's roster), its alias in the summary.
    assert uuid.UUID(rejected.verdict["findings"][0]["acId"])
    assert rejected.verdict["summary"].endswith("do not pass: AC1")
    assert (
        "parse" in (root / "src" / "greet.py").read_text() or (root / "src" / "greet.py").exists()
    )
    assert outcome.statistics.fixes == 1


async def test_the_whole_ladder_ends_in_terminal_failure(tmp_path: Path) -> None:
    """seed 000: fix → revalidate → retry limit → strategy revision → escalation → terminal."""
    root = repo(tmp_path)
    before = sorted(p.name for p in (root / "src").iterdir())
    asked: list[EscalationRequest] = []

    async def person(request: EscalationRequest) -> EscalationDecision:
        asked.append(request)
        return EscalationDecision(action="abort", note="not worth it")

    outcome, events, audit = await run(
        plan(root, [BAD], retry_limit=2, strategy_revisions=1), escalation=person
    )
    assert outcome.status is PlanStatus.FAILED
    assert "not worth it" in outcome.message
    decisions = [a["retryDecision"] for a in outcome.attempts]
    # Per strategy: 2 fixes on the budget, then the budget is spent.
    assert decisions == ["fix", "fix", "escalate-exhausted"] * 2
    kinds = types_of(events)
    assert kinds.count("strategy_produced") == 2
    assert kinds.count("strategy_revision_requested") == 1
    assert kinds.count("escalation_requested") == 1
    assert kinds.count("escalation_decided") == 1
    assert kinds[-1] == "plan_finished" and events[-1].status == "failed"
    # Each rung happens in order.
    order = [
        kinds.index("fix_requested"),
        kinds.index("strategy_revision_requested"),
        kinds.index("escalation_requested"),
        kinds.index("plan_finished"),
    ]
    assert order == sorted(order)
    assert asked[0].reason == "exhausted" and asked[0].verdict["verdict"] == "reject"
    assert len(asked[0].history) == 6
    # Invariant: nothing was applied.
    assert "apply_started" not in kinds
    assert sorted(p.name for p in (root / "src").iterdir()) == before
    assert len(audit.read(outcome.plan_id)) == 6


async def test_without_a_person_the_plan_waits(tmp_path: Path) -> None:
    """With no escalation handler the plan pauses as awaiting_decision, nothing applied."""
    root = repo(tmp_path)
    outcome, events, _ = await run(plan(root, [BAD], retry_limit=0, strategy_revisions=0))
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert events[-1].status == "awaiting_decision"
    assert not (root / "src" / "greet.py").exists()


async def test_escalation_retry_with_a_note(tmp_path: Path) -> None:
    """A person's retry gives a fresh budget; the note reaches the executor's fix."""
    root = repo(tmp_path)

    async def person(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="retry", note="close the parenthesis")

    outcome, events, _ = await run(
        plan(root, [BAD, GOOD], retry_limit=0, strategy_revisions=0), escalation=person
    )
    assert outcome.status is PlanStatus.APPLIED
    fixes = [e for e in events if type(e).__struct_config__.tag == "fix_requested"]
    assert fixes[0].note == "close the parenthesis"


async def test_infra_fault_retries_only_the_validator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash of a validation is retried alone, with backoff; the executor is not asked again."""
    calls = {"flaky": 0}

    def flaky(**_: Any) -> dict[str, Any]:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ConnectionError("linter service unreachable")
        return {"passed": True, "message": "fine now"}

    mod = fake_module(monkeypatch, "gg_sup_flaky", flaky=flaky)
    root = repo(tmp_path)
    text = plan(root, [GOOD]).replace(
        "nodes:\n",
        '  - {name: flaky, entrypoint: "'
        + mod
        + ':flaky"}\nnodes:\n  - {id: flaky, validation: flaky, isolation: thread}\n',
    )
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    from gategraph.runtime._lifecycle._supervisor import Supervisor

    log = MemoryEventLog()
    supervisor = Supervisor(
        load_graph(text), event_log=log, audit=InMemoryAuditLog(), sleep=fake_sleep
    )
    outcome = await supervisor.run()
    assert outcome.status is PlanStatus.APPLIED
    assert [a["retryDecision"] for a in outcome.attempts] == ["retry-validator", "attested"]
    assert outcome.attempts[0]["faultKind"] == "exception"
    assert calls["flaky"] == 2
    assert len(slept) == 1 and slept[0] > 0
    executor = supervisor.execution_actor
    assert len(executor.calls) == 1  # type: ignore[attr-defined]
    assert outcome.statistics.validator_retries == 1


async def test_permanent_fault_escalates_at_once(tmp_path: Path) -> None:
    """A read-only violation is permanent: no fix, no retry, straight to a person."""
    root = repo(tmp_path)
    text = plan(root, [GOOD]).replace(
        "nodes:\n",
        "  - {name: writer, entrypoint: gategraph.runtime.testing:writing, resource_slots: [root]}\n"
        "nodes:\n  - {id: writer, validation: writer}\n",
    )
    outcome, events, _ = await run(text)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    assert [a["retryDecision"] for a in outcome.attempts] == ["escalate-permanent"]
    assert outcome.attempts[0]["faultKind"] == "read_only_violation"
    assert "fix_requested" not in types_of(events)


async def test_payload_schema_rejects_before_semantic(tmp_path: Path) -> None:
    """The payload layer rejects an artifact that breaks the declared schema; semantic is skipped."""
    root = repo(tmp_path)
    text = plan(root, [GOOD], retry_limit=0, strategy_revisions=0).replace(
        "lifecycle:\n",
        "lifecycle:\n  artifact_schema: {type: object, required: [version]}\n",
    )
    outcome, events, _ = await run(text)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    rejected = next(e for e in events if type(e).__struct_config__.tag == "artifact_rejected")
    assert rejected.layer == "payload"
    assert "'version' is a required property" in rejected.reasons[0]
    assert "run_started" not in types_of(events)  # the semantic layer never ran


@pytest.mark.parametrize(
    ("rule", "auto", "status"),
    [
        ("{match: 'syn*', action: deny}", False, PlanStatus.AWAITING_DECISION),
        ("{match: 'syn*', action: require, tier: high}", False, PlanStatus.AWAITING_APPROVAL),
        ("{match: 'syn*', action: require, tier: high}", True, PlanStatus.APPLIED),
        ("{match: 'nothing*', action: deny}", False, PlanStatus.APPLIED),
    ],
)
async def test_approval_layer(tmp_path: Path, rule: str, auto: bool, status: PlanStatus) -> None:
    """Approval rules: deny rejects, require needs a person unless auto-approved."""
    root = repo(tmp_path)
    text = plan(root, [GOOD], retry_limit=0, strategy_revisions=0) + (
        f"  approval: {{rules: [{rule}]}}\n"
    )
    text = text.replace(
        "policy:\n  retry_limit: 0\n  strategy_revisions: 0\n",
        "policy:\n  retry_limit: 0\n  strategy_revisions: 0\n",
    )
    outcome, _, _ = await run(text, auto_approve=auto)
    assert outcome.status is status
    assert (root / "src" / "greet.py").exists() is (status is PlanStatus.APPLIED)


async def test_catalog_attachments_gate_the_plan(tmp_path: Path) -> None:
    """A required validation attached to the resource in the catalog blocks the plan too."""
    root = repo(tmp_path)
    catalog = Catalog.in_memory()
    catalog.add(
        Validation.from_config({"name": "nope", "entrypoint": "gategraph.runtime.testing:failing"})
    )
    attachment = catalog.attach("repo", "nope")
    outcome, _, _ = await run(
        plan(root, [GOOD], retry_limit=0, strategy_revisions=0), catalog=catalog
    )
    assert outcome.status is PlanStatus.AWAITING_DECISION
    failing = [f for f in outcome.verdict["findings"] if f["status"] != "pass"]
    assert failing == []  # the criterion AC1 binds only `syntax` ...
    assert any(v.attachment_id == attachment.id and v.blocking for v in outcome.validations)


async def test_executor_crash_is_a_routing_rejection(tmp_path: Path) -> None:
    """An execution actor that raises is rejected at routing, and the ladder goes on."""
    root = repo(tmp_path)
    text = plan(root, [GOOD], retry_limit=0, strategy_revisions=0).replace(
        '- files: {"src/greet.py": "' + GOOD + '"}', "- {raise_: out of disk}"
    )
    outcome, events, _ = await run(text)
    assert outcome.status is PlanStatus.AWAITING_DECISION
    rejected = next(e for e in events if type(e).__struct_config__.tag == "artifact_rejected")
    assert rejected.layer == "routing" and "out of disk" in rejected.reasons[0]


async def test_a_retry_reruns_everything_after_the_failed_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a validator-only retry must not skip the required validations after it."""
    calls = {"x": 0}

    def flaky_tool(**_: Any) -> dict[str, Any]:
        calls["x"] += 1
        if calls["x"] == 1:
            raise OSError("disk hiccup")
        return {"ok": True}

    mod = fake_module(monkeypatch, "gg_sup_chain", flaky_tool=flaky_tool)
    root = repo(tmp_path)
    text = plan(root, [GOOD], retry_limit=2, strategy_revisions=0).replace(
        "nodes:\n",
        "  - {name: never, entrypoint: gategraph.runtime.testing:failing}\n"
        "tools:\n"
        f'  - {{name: x, entrypoint: "{mod}:flaky_tool"}}\n'
        "nodes:\n"
        # A module of this process only: its isolation declared (trusted).
        "  - {id: after, tool: x, needs: [syntax], isolation: thread}\n"
        "  - {id: v2, validation: never, needs: [after]}\n",
    )

    async def no_sleep(seconds: float) -> None:
        return None

    from gategraph.runtime._lifecycle._supervisor import Supervisor

    supervisor = Supervisor(
        load_graph(text), event_log=MemoryEventLog(), audit=InMemoryAuditLog(), sleep=no_sleep
    )
    outcome = await supervisor.run()
    # Invariant: v2 fails every time it runs, so the plan is never applied.
    assert outcome.status is not PlanStatus.APPLIED
    assert not (root / "src" / "greet.py").exists()
    assert any(v.node == "v2" and v.blocking for v in outcome.validations)
