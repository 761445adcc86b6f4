"""Resume: a plan whose process died continues from its log, and a paused plan continues
with a person's decision — completed validations are never re-run, Apply never doubles,
and the resumed log replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _plans import BAD, GOOD, per_round, plan, repo
from gategraph.runtime import MemoryEventLog, load_graph
from gategraph.runtime._base._exceptions import PlanBusyError, ResumeError
from gategraph.runtime._base._protocols import EscalationDecision
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._lifecycle._supervisor import PlanStatus, Supervisor, resume_plan, run_plan
from gategraph.runtime._storage._resources import DirectoryResource, MemoryResource
from gategraph.runtime._views._replay import replay_plan

pytestmark = pytest.mark.anyio


class Crash(BaseException):
    """The process dies (a BaseException: no handler of the runtime catches it)."""


class DyingLog:
    """Keeps the first ``keep`` events, then dies at the next append: what a process killed
    right after its ``keep``-th durable event leaves behind."""

    appends_immediately = True

    def __init__(self, inner: MemoryEventLog, keep: int) -> None:
        self.inner = inner
        self.keep = keep

    def _store(self, event: Any) -> None:
        if len(self.inner) >= self.keep:
            raise Crash
        self.inner.append_nowait(event)

    async def append(self, event: Any) -> None:
        self._store(event)

    async def append_many(self, events: Any) -> None:
        for event in events:
            self._store(event)

    def append_nowait(self, event: Any) -> None:
        self._store(event)

    async def flush(self, plan_id: str | None = None) -> None:
        return None

    async def read(self, plan_id: str, *, after: int = 0) -> Any:
        return await self.inner.read(plan_id, after=after)

    async def plans(self) -> Any:
        return await self.inner.plans()


def tags(events: list[Any]) -> list[str]:
    return [type(e).__struct_config__.tag for e in events]


def _crashed(exc: BaseException) -> bool:
    if isinstance(exc, Crash):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return all(_crashed(e) for e in exc.exceptions)
    return isinstance(exc.__cause__ or exc.__context__, Crash)


async def crash_then_resume(
    text: str, keep: int, resource: Any, home: Path, audit: InMemoryAuditLog | None = None
) -> tuple[Any, list[Any], list[Any]]:
    """Run until the log holds ``keep`` events, die, resume; return the outcome, the events
    before the crash and the whole log."""
    graph = load_graph(text)
    log = MemoryEventLog()
    audit = audit if audit is not None else InMemoryAuditLog()
    first = Supervisor(
        graph,
        event_log=DyingLog(log, keep),  # type: ignore[arg-type]
        resources={"repo": resource},
        audit=audit,
        home=home,
    )
    try:
        outcome = await first.run()
    except BaseException as exc:
        assert _crashed(exc), exc
    else:
        return outcome, await log.read(outcome.plan_id), await log.read(outcome.plan_id)
    before = await log.read(first.plan_id)
    second = Supervisor(
        graph,
        event_log=log,
        resources={"repo": resource},
        plan_id=first.plan_id,
        audit=audit,
        home=home,
    )
    outcome = await second.resume()
    return outcome, before, await log.read(first.plan_id)


async def test_crash_at_every_event_then_resume(tmp_path: Path) -> None:
    """Killed after any one of its events, a plan that fixes a failure and applies is
    resumed to the same end: applied once, each validation of a round run once, and the
    resumed log replays with every decision matching."""
    reference_root = repo(tmp_path / "reference")
    reference_log = MemoryEventLog()
    reference = await run_plan(
        load_graph(plan(reference_root, [BAD, GOOD])),
        event_log=reference_log,
        audit=InMemoryAuditLog(),
    )
    assert reference.status is PlanStatus.APPLIED
    total = len(await reference_log.read(reference.plan_id))
    expected = (reference_root / "src" / "greet.py").read_text()
    for keep in range(1, total):
        root = repo(tmp_path / f"k{keep}")
        resource = DirectoryResource("repo", root)
        home = tmp_path / f"home{keep}"
        audit = InMemoryAuditLog()
        outcome, before, events = await crash_then_resume(
            plan(root, [BAD, GOOD]), keep, resource, home, audit
        )
        where = f"crashed after event {keep} ({tags(before)[-1]})"
        assert outcome.status is PlanStatus.APPLIED, where
        assert (root / "src" / "greet.py").read_text() == expected, where
        assert tags(events).count("apply_completed") == 1, where
        assert tags(events).count("plan_started") == 1, where
        assert set(per_round(events, "validation_completed").values()) == {1}, where
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), where
        assert events[keep].__struct_config__.tag == "plan_resumed", where
        report = replay_plan(events, load_graph(plan(root, [BAD, GOOD])))
        assert report.matches, (where, report.mismatches)
        assert outcome.statistics.rounds == reference.statistics.rounds, where
        assert [a["retryDecision"] for a in outcome.attempts] == ["fix", "attested"], where
        # One audit line per round, whether its run died before or after writing it.
        lines = [a.decision.value for a in audit.read(outcome.plan_id)]
        assert lines == ["fix", "attested"], where
        # A finished plan leaves no sandbox behind.
        assert not (home / "sandboxes" / outcome.plan_id).exists(), where


async def test_resuming_a_finished_plan_changes_nothing(tmp_path: Path) -> None:
    root = repo(tmp_path)
    log = MemoryEventLog()
    graph = load_graph(plan(root, [GOOD]))
    outcome = await run_plan(graph, event_log=log, audit=InMemoryAuditLog())
    events = await log.read(outcome.plan_id)
    again = await resume_plan(outcome.plan_id, graph, event_log=log)
    assert again.status is PlanStatus.APPLIED
    assert again.changes == outcome.changes
    assert len(await log.read(outcome.plan_id)) == len(events)


async def test_resume_refuses_a_changed_graph(tmp_path: Path) -> None:
    """The log's decisions are checked, not followed blindly: a graph whose retry limit
    changed decides differently, and resume says where."""
    root = repo(tmp_path)
    resource = MemoryResource("repo", {"src/app.py": "x = 1\n"})
    log = MemoryEventLog()
    graph = load_graph(plan(root, [BAD], retry_limit=1))
    outcome = await run_plan(
        graph, event_log=log, resources={"repo": resource}, audit=InMemoryAuditLog()
    )
    assert outcome.status is PlanStatus.AWAITING_DECISION
    changed = load_graph(plan(root, [BAD], retry_limit=2))
    with pytest.raises(ResumeError, match=r"at seq \d+ the log has .*retry_decided"):
        await resume_plan(outcome.plan_id, changed, event_log=log, resources={"repo": resource})


async def test_resume_needs_events(tmp_path: Path) -> None:
    graph = load_graph(plan(repo(tmp_path), [GOOD]))
    with pytest.raises(ResumeError, match="no events"):
        await resume_plan("01NOPE", graph, event_log=MemoryEventLog())


async def test_decision_resumes_a_paused_plan(tmp_path: Path) -> None:
    """Escalated and paused: a person's retry (with a note) goes back to the executor with
    a fresh budget; the fix passes and the plan is applied. The log replays."""
    root = repo(tmp_path)
    resource = DirectoryResource("repo", root)
    log = MemoryEventLog()
    text = plan(root, [BAD, BAD, GOOD], retry_limit=1, strategy_revisions=0)
    outcome = await run_plan(
        load_graph(text), event_log=log, resources={"repo": resource}, audit=InMemoryAuditLog()
    )
    assert outcome.status is PlanStatus.AWAITING_DECISION
    paused = len(await log.read(outcome.plan_id))
    # Resuming without a decision leaves it paused, and appends nothing.
    still = await resume_plan(
        outcome.plan_id, load_graph(text), event_log=log, resources={"repo": resource}
    )
    assert still.status is PlanStatus.AWAITING_DECISION
    assert len(await log.read(outcome.plan_id)) == paused
    with pytest.raises(ResumeError, match="not waiting for an approval"):
        await resume_plan(
            outcome.plan_id,
            load_graph(text),
            event_log=log,
            resources={"repo": resource},
            decision=EscalationDecision(action="approve"),
        )
    done = await resume_plan(
        outcome.plan_id,
        load_graph(text),
        event_log=log,
        resources={"repo": resource},
        decision=EscalationDecision(action="retry", note="try the other signature"),
    )
    events = await log.read(outcome.plan_id)
    assert done.status is PlanStatus.APPLIED, done.message
    assert "def greet(name):" in (root / "src" / "greet.py").read_text()
    after = tags(events)[paused:]
    assert after[:3] == ["plan_resumed", "escalation_decided", "fix_requested"]
    decided = events[paused + 1]
    assert decided.action == "retry" and decided.note == "try the other signature"
    assert events[paused].reason == "decision"
    report = replay_plan(events, load_graph(text))
    assert report.matches, report.mismatches
    # Decided once: the plan is no longer waiting.
    with pytest.raises(ResumeError, match="not waiting for a decision: it is applied"):
        await resume_plan(
            outcome.plan_id,
            load_graph(text),
            event_log=log,
            resources={"repo": resource},
            decision=EscalationDecision(action="abort"),
        )


async def test_abort_decision_fails_the_plan(tmp_path: Path) -> None:
    resource = MemoryResource("repo", {})
    log = MemoryEventLog()
    text = plan(repo(tmp_path), [BAD], retry_limit=1, strategy_revisions=0)
    outcome = await run_plan(
        load_graph(text), event_log=log, resources={"repo": resource}, audit=InMemoryAuditLog()
    )
    done = await resume_plan(
        outcome.plan_id,
        load_graph(text),
        event_log=log,
        resources={"repo": resource},
        decision=EscalationDecision(action="abort", note="not worth it"),
    )
    assert done.status is PlanStatus.FAILED
    assert "not worth it" in done.message
    assert resource.files == {}
    assert replay_plan(await log.read(outcome.plan_id), load_graph(text)).matches


def approval_plan(root: Path) -> str:
    return plan(root, [GOOD]) + (
        "policy:\n  approval:\n    rules: [{match: 'syn*', action: require, tier: high}]\n"
    )


@pytest.mark.parametrize("approve", [True, False])
async def test_approval_pauses_then_a_person_decides(tmp_path: Path, approve: bool) -> None:
    """The approval layer needs a person: the plan pauses durably (``approval_required``,
    then ``awaiting_approval``); an approval applies it, a denial fails it. Both replay."""
    root = repo(tmp_path)
    text = approval_plan(root)
    resource = DirectoryResource("repo", root)
    log = MemoryEventLog()
    outcome = await run_plan(
        load_graph(text), event_log=log, resources={"repo": resource}, audit=InMemoryAuditLog()
    )
    assert outcome.status is PlanStatus.AWAITING_APPROVAL
    assert tags(await log.read(outcome.plan_id))[-2:] == ["approval_required", "plan_finished"]
    with pytest.raises(ResumeError, match="not waiting for a decision: it is awaiting_approval"):
        await resume_plan(
            outcome.plan_id,
            load_graph(text),
            event_log=log,
            resources={"repo": resource},
            decision=EscalationDecision(action="retry"),
        )
    done = await resume_plan(
        outcome.plan_id,
        load_graph(text),
        event_log=log,
        resources={"repo": resource},
        decision=EscalationDecision(action="approve" if approve else "deny", note="looked"),
    )
    events = await log.read(outcome.plan_id)
    decided = next(e for e in events if type(e).__struct_config__.tag == "approval_decided")
    assert decided.approved is approve and decided.note == "looked"
    assert decided.waited >= 0 and done.statistics.approval_wait_seconds == decided.waited
    if approve:
        assert done.status is PlanStatus.APPLIED
        assert (root / "src" / "greet.py").exists()
    else:
        assert done.status is PlanStatus.FAILED
        assert "denied by a person: looked" in done.message
        assert not (root / "src" / "greet.py").exists()
    report = replay_plan(events, load_graph(text))
    assert report.matches, report.mismatches


async def test_escalation_handler_answers_approvals(tmp_path: Path) -> None:
    root = repo(tmp_path)
    text = approval_plan(root)
    asked: list[Any] = []

    async def person(request: Any) -> EscalationDecision:
        asked.append(request)
        return EscalationDecision(action="approve")

    log = MemoryEventLog()
    outcome = await run_plan(
        load_graph(text),
        event_log=log,
        escalation=person,
        audit=InMemoryAuditLog(),
    )
    assert outcome.status is PlanStatus.APPLIED
    assert [(r.reason, r.tier) for r in asked] == [("approval", "high")]
    assert replay_plan(await log.read(outcome.plan_id), load_graph(text)).matches

    async def confused(request: Any) -> EscalationDecision:
        return EscalationDecision(action="retry")

    with pytest.raises(Exception, match=r"answered .*retry.* to an approval"):
        await run_plan(
            load_graph(text),
            escalation=confused,
            audit=InMemoryAuditLog(),
        )


async def test_one_supervisor_per_plan(tmp_path: Path) -> None:
    """A second supervisor of a running plan is refused: the same artifact is never
    validated twice at once."""
    text = plan(repo(tmp_path), [GOOD])
    log = MemoryEventLog()
    gate = anyio.Event()
    started = anyio.Event()

    async def slow(request: Any) -> EscalationDecision:
        return EscalationDecision(action="approve")

    first = Supervisor(
        load_graph(text),
        event_log=log,
        resources={"repo": MemoryResource("repo", {})},
        audit=InMemoryAuditLog(),
        sleep=None,
    )

    class Holding:
        async def strategize(self, request: Any) -> Any:
            started.set()
            await gate.wait()
            from gategraph.runtime._base._protocols import Strategy

            return Strategy(summary="held")

    first.strategy_actor = Holding()
    async with anyio.create_task_group() as tg:
        tg.start_soon(first.run)
        await started.wait()
        second = Supervisor(
            load_graph(text),
            event_log=log,
            plan_id=first.plan_id,
            resources={"repo": MemoryResource("repo", {})},
        )
        with pytest.raises(PlanBusyError, match="one supervisor per plan"):
            await second.resume()
        gate.set()


async def test_memory_sandbox_lost_with_its_process(tmp_path: Path) -> None:
    """A memory resource's sandbox does not outlive its process: resuming work recorded in
    it says so, instead of validating an empty copy."""
    text = plan(repo(tmp_path), [BAD, GOOD])
    log = MemoryEventLog()
    first = Supervisor(
        load_graph(text),
        event_log=DyingLog(log, 12),  # type: ignore[arg-type]
        resources={"repo": MemoryResource("repo", {})},
        audit=InMemoryAuditLog(),
    )
    with pytest.raises(BaseException):  # noqa: B017 - the simulated death
        await first.run()
    assert "work_finished" in tags(await log.read(first.plan_id))
    with pytest.raises(ResumeError, match="memory resource's sandbox lives only as long"):
        await resume_plan(
            first.plan_id,
            load_graph(text),
            event_log=log,
            resources={"repo": MemoryResource("repo", {})},  # a new process's object
        )


_HOLD: list[anyio.Event] = []
"""Set when the held validation starts, then awaited by it: the test's two gates."""


async def held(**_: Any) -> dict[str, Any]:
    """A validation that says it started, then waits until the test lets it go."""
    _HOLD[0].set()
    await _HOLD[1].wait()
    return {"passed": True, "message": "let go"}


async def test_a_cancelled_plan_resumes(tmp_path: Path) -> None:
    """A running pipeline can be cancelled: the cancellation propagates (never swallowed),
    nothing is applied, the sandbox stays, and the plan resumes to its end later, running
    only what had not completed."""
    root = repo(tmp_path)
    text = (
        plan(root, [GOOD])
        .replace(
            "  - {id: advice, validation: advice}",
            "  - {id: advice, validation: advice}\n  - {id: hold, validation: hold, isolation: inline}",
        )
        .replace(
            "validations:\n", "validations:\n  - name: hold\n    entrypoint: test_resume:held\n"
        )
    )
    graph = load_graph(text)
    log = MemoryEventLog()
    home = tmp_path / "home"
    _HOLD[:] = [anyio.Event(), anyio.Event()]
    supervisor = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), home=home)
    cancelled = False
    async with anyio.create_task_group() as tg:

        async def run() -> None:
            nonlocal cancelled
            try:
                await supervisor.run()
            except anyio.get_cancelled_exc_class():
                cancelled = True
                raise

        tg.start_soon(run)
        await _HOLD[0].wait()  # mid fan-out: the held validation is running
        tg.cancel_scope.cancel()
    assert cancelled  # the cancellation reached the supervisor and went on out
    events = await log.read(supervisor.plan_id)
    assert "artifact_validation_started" in tags(events)
    assert "apply_started" not in tags(events)
    assert not (root / "src" / "greet.py").exists()
    assert (home / "sandboxes" / supervisor.plan_id).is_dir()
    completed = {n for (_, n) in per_round(events, "validation_completed")}
    assert "hold" not in completed
    _HOLD[1].set()
    again = Supervisor(
        graph, event_log=log, plan_id=supervisor.plan_id, audit=InMemoryAuditLog(), home=home
    )
    outcome = await again.resume()
    assert outcome.status is PlanStatus.APPLIED
    events = await log.read(supervisor.plan_id)
    assert set(per_round(events, "validation_completed").values()) == {1}
    assert completed < {n for (_, n) in per_round(events, "validation_completed")}
    assert (root / "src" / "greet.py").exists()


async def test_a_decision_run_that_dies_can_be_decided_again(tmp_path: Path) -> None:
    """A `decide` whose process dies right after its plan_resumed leaves the plan waiting
    for the decision still, not wedged."""
    root = repo(tmp_path)
    text = plan(root, [BAD, BAD, GOOD], retry_limit=1, strategy_revisions=0)
    log = MemoryEventLog()
    outcome = await run_plan(load_graph(text), event_log=log, audit=InMemoryAuditLog())
    paused = len(await log.read(outcome.plan_id))
    dying = Supervisor(
        load_graph(text),
        event_log=DyingLog(log, paused + 1),  # type: ignore[arg-type]
        plan_id=outcome.plan_id,
        audit=InMemoryAuditLog(),
    )
    with pytest.raises(BaseException):  # noqa: B017 - the simulated death
        await dying.resume(decision=EscalationDecision(action="retry"))
    assert tags(await log.read(outcome.plan_id))[-2:] == ["plan_finished", "plan_resumed"]
    done = await resume_plan(
        outcome.plan_id,
        load_graph(text),
        event_log=log,
        decision=EscalationDecision(action="retry"),
    )
    assert done.status is PlanStatus.APPLIED
    assert replay_plan(await log.read(outcome.plan_id), load_graph(text)).matches


class Appending:
    """An execution actor that appends to CHANGELOG, and dies midway the first time."""

    runs = 0

    async def execute(self, request: Any) -> Any:
        changelog = request.resources["repo"] / "CHANGELOG"
        with changelog.open("a") as handle:
            handle.write("- add greet\n")
        (request.resources["repo"] / "src" / "greet.py").write_text("def greet():\n    pass\n")
        Appending.runs += 1
        if Appending.runs == 1:
            raise Crash
        return {"files": ["CHANGELOG"]}

    async def fix(self, request: Any) -> Any:
        raise AssertionError("nothing to fix")


async def test_a_crashed_first_execute_starts_again_on_a_fresh_copy(tmp_path: Path) -> None:
    root = repo(tmp_path)
    graph = load_graph(plan(root, [GOOD]))
    log = MemoryEventLog()
    Appending.runs = 0
    first = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), home=tmp_path / "h")
    first.execution_actor = Appending()
    with pytest.raises(BaseException):  # noqa: B017 - the simulated death
        await first.run()
    again = Supervisor(
        graph, event_log=log, plan_id=first.plan_id, audit=InMemoryAuditLog(), home=tmp_path / "h"
    )
    again.execution_actor = Appending()
    outcome = await again.resume()
    assert outcome.status is PlanStatus.APPLIED
    assert (root / "CHANGELOG").read_text() == "- add greet\n"


async def test_a_lost_sandbox_is_refused_before_anything_is_logged(tmp_path: Path) -> None:
    """A retry needs the sandbox the log's work was done in: with it gone, the decision is
    refused and nothing is appended; an abort needs no sandbox and still works."""
    text = plan(repo(tmp_path), [BAD], retry_limit=1, strategy_revisions=0).replace(
        'resources: {repo: {kind: directory, path: "' + str(tmp_path / "repo") + '"}}',
        'resources: {repo: {kind: memory, files: {"a.txt": "a"}}}',
    )
    graph = load_graph(text)
    log = MemoryEventLog()
    outcome = await run_plan(graph, event_log=log, audit=InMemoryAuditLog())
    assert outcome.status is PlanStatus.AWAITING_DECISION
    count = len(await log.read(outcome.plan_id))
    with pytest.raises(ResumeError, match="nothing was changed"):
        await resume_plan(
            outcome.plan_id, graph, event_log=log, decision=EscalationDecision(action="retry")
        )
    assert len(await log.read(outcome.plan_id)) == count
    done = await resume_plan(
        outcome.plan_id, graph, event_log=log, decision=EscalationDecision(action="abort")
    )
    assert done.status is PlanStatus.FAILED


async def test_resume_checks_the_options_it_ran_with(tmp_path: Path) -> None:
    """Auto-approval and resource folders come from the log by default; a resume given
    others is refused rather than applying a sandbox of one folder to another."""
    root = repo(tmp_path)
    text = plan(root, [GOOD]) + (
        "policy:\n  approval:\n    rules: [{match: 'syn*', action: require, tier: high}]\n"
    )
    log = MemoryEventLog()
    outcome = await run_plan(load_graph(text), event_log=log, audit=InMemoryAuditLog())
    assert outcome.status is PlanStatus.AWAITING_APPROVAL
    with pytest.raises(ResumeError, match="auto_approve"):
        await resume_plan(outcome.plan_id, load_graph(text), event_log=log, auto_approve=True)
    other = repo(tmp_path / "other")
    with pytest.raises(ResumeError, match="options"):
        await resume_plan(
            outcome.plan_id,
            load_graph(text),
            event_log=log,
            resources={"repo": DirectoryResource("repo", other)},
        )
    still = await resume_plan(outcome.plan_id, load_graph(text), event_log=log)
    assert still.status is PlanStatus.AWAITING_APPROVAL


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_plan_paused_on_one_host_is_approved_and_applied_on_another(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Host A runs the plan until it waits for approval; host B (another home: none of
    A's sandboxes) approves it on the same log: B makes A's sandbox again from the store
    (the round's inputs, what it started from, what it left out) and applies exactly the
    change the round validated."""
    import shutil

    from gategraph.runtime._storage._eventlog import SQLiteEventLog
    from gategraph.runtime._storage._postgres import PostgresEventLog

    root = repo(tmp_path)
    (root / ".gitignore").write_text("*.log\n")
    text = approval_plan(root)

    def opened() -> Any:
        if backend == "postgres":
            return PostgresEventLog(request.getfixturevalue("postgres_url"))
        return SQLiteEventLog(tmp_path / "shared" / "events.db")

    async with opened() as log:
        paused = await run_plan(
            load_graph(text), event_log=log, home=tmp_path / "host-a", audit=InMemoryAuditLog()
        )
    assert paused.status is PlanStatus.AWAITING_APPROVAL
    assert not (root / "src" / "greet.py").exists()
    shutil.rmtree(tmp_path / "host-a")  # host A is gone, and its sandboxes with it
    (root / "build.log").write_text("host B's own\n")
    async with opened() as log:
        done = await resume_plan(
            paused.plan_id,
            load_graph(text),
            event_log=log,
            home=tmp_path / "host-b",
            audit=InMemoryAuditLog(),
            decision=EscalationDecision(action="approve"),
        )
        events = await log.read(paused.plan_id)
    assert done.status is PlanStatus.APPLIED, done.message
    assert (
        root / "src" / "greet.py"
    ).read_text() == "def greet(name):\n    return 'hello ' + name\n"
    assert (root / "build.log").read_text() == "host B's own\n"  # left out, as on host A
    assert not (tmp_path / "host-b" / "sandboxes").exists()  # discarded once applied
    assert replay_plan(events, load_graph(text)).matches
