"""The gate: a framework that owns its loop writes into a sandbox, submits, and the change
is applied atomically only when its validations pass — with a plan's events, replay and
resume."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import run_process
from gategraph.runtime import (
    ConfigError,
    EscalationDecision,
    EscalationRequest,
    GateClosedError,
    MemoryEventLog,
    MemoryResource,
    PlanBusyError,
    SQLiteEventLog,
    open_gate,
    replay_plan,
    resume_gate,
    run_plan,
)
from gategraph.runtime._embed._gate import is_gate

BROKEN, FIXED = "def f(:\n", "def f():\n    return 1\n"


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    return repo


def _tags(events: list[Any]) -> list[str]:
    return [type(e).__struct_config__.tag for e in events]


def _files(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


@pytest.mark.anyio
async def test_a_change_is_fixed_then_applied(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    async with open_gate({"repo": repo}, ["python_syntax"], event_log=log) as gate:
        sandbox = gate.sandbox()
        (sandbox / "new.py").write_text(BROKEN)
        first = await gate.submit({"files": ["new.py"]})
        assert (first.passed, first.decision, gate.applied) == (False, "fix", False)
        assert "new.py:1" in first.feedback
        assert _files(repo) == {"app.py": "x = 1\n"}  # nothing reaches the folder yet
        (sandbox / "new.py").write_text(FIXED)
        second = await gate.submit({"files": ["new.py"]})
        assert (second.passed, second.decision, gate.applied) == (True, "attested", True)
    assert _files(repo) == {"app.py": "x = 1\n", "new.py": FIXED}
    assert gate.outcome is not None and gate.outcome.status == "applied"
    assert gate.verdicts == [first, second]
    events = await log.read(gate.plan_id)
    tags = _tags(events)
    assert tags[0] == "plan_started" and tags[-1] == "plan_finished"
    assert tags.count("artifact_validation_started") == 2 and "apply_completed" in tags
    assert replay_plan(events, gate.graph).matches


@pytest.mark.anyio
async def test_leaving_the_block_or_raising_discards(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    async with open_gate({"repo": repo}, ["python_syntax"]) as gate:
        (gate.sandbox("repo") / "new.py").write_text(FIXED)
    assert gate.outcome is not None and gate.outcome.status == "failed"
    assert "discarded" in gate.outcome.message and not gate.applied
    with pytest.raises(GateClosedError, match="is failed"):
        await gate.submit()
    with pytest.raises(ZeroDivisionError):
        async with open_gate({"repo": repo}, ["python_syntax"]) as raising:
            (raising.sandbox() / "new.py").write_text(FIXED)
            1 / 0  # noqa: B018 - the program fails inside the block
    assert raising.outcome is not None and "ZeroDivisionError" in raising.outcome.message
    assert _files(repo) == {"app.py": "x = 1\n"}
    async with open_gate({"repo": repo}, ["python_syntax"]) as explicit:
        outcome = await explicit.discard("the model gave up")
    assert outcome.status == "failed" and "the model gave up" in outcome.message


@pytest.mark.anyio
async def test_the_budget_runs_out_then_a_person_decides(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    async with open_gate({"repo": repo}, ["python_syntax"], retry_limit=1) as gate:
        (gate.sandbox() / "new.py").write_text(BROKEN)
        assert (await gate.submit()).decision == "fix"
        last = await gate.submit()
        assert last.decision == "escalate-exhausted"
        assert gate.outcome is not None and gate.outcome.status == "awaiting_decision"
        with pytest.raises(GateClosedError):
            gate.sandbox()
    asked: list[str] = []

    async def person(request: EscalationRequest) -> EscalationDecision:
        asked.append(request.reason)
        return EscalationDecision(action="retry", note="one more go")

    async with open_gate(
        {"repo": repo}, ["python_syntax"], retry_limit=1, escalation=person
    ) as gate:
        (gate.sandbox() / "new.py").write_text(BROKEN)
        await gate.submit()
        again = await gate.submit()
        assert again.decision == "escalate-exhausted" and gate.outcome is None  # retried
        (gate.sandbox() / "new.py").write_text(FIXED)
        assert (await gate.submit()).passed and gate.applied
    assert asked == ["exhausted"]


NO_TODO = {  # files in memory: what a validation of a memory resource reads
    "name": "no-todo",
    "code": "def run(root, **_):\n    return {'passed': not any('TODO' in t for t in root.values())}\n",
    "resource_slots": [{"name": "root", "kind": "memory"}],
}


@pytest.mark.anyio
async def test_a_memory_resource_and_an_approval_policy() -> None:
    notes = MemoryResource("notes", {"a.py": "x = 1\n"})
    async with open_gate({"notes": notes}, [NO_TODO]) as gate:
        gate.sandbox()["b.txt"] = "done\n"
        assert (await gate.submit()).passed and gate.applied
    assert dict(notes.files) == {"a.py": "x = 1\n", "b.txt": "done\n"}
    policy = {"approval": {"rules": [{"match": "no-todo", "action": "require", "tier": "high"}]}}
    async with open_gate({"repo": {"a.py": "x = 1\n"}}, [NO_TODO], policy=policy) as paused:
        verdict = await paused.submit()
        assert verdict.passed and not paused.applied
        assert paused.outcome is not None and paused.outcome.status == "awaiting_approval"

    async def approve(request: EscalationRequest) -> EscalationDecision:
        assert request.reason == "approval" and request.tier == "high"
        return EscalationDecision(action="approve")

    async with open_gate({"notes": notes}, [NO_TODO], policy=policy, escalation=approve) as gate:
        gate.sandbox()["c.txt"] = "approved\n"
        assert (await gate.submit()).passed and gate.applied
    assert notes.files["c.txt"] == "approved\n"


@pytest.mark.anyio
async def test_bad_arguments_are_one_line() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"resources": {}}, r"resources: a gate needs at least one resource"),
        ({"resources": {"r": "/no/such/folder"}}, r"resources\.r: .* is not a folder"),
        ({"resources": {"r": 3}}, r"resources\.r: a resource is a folder path"),
        ({"resources": {"r": {"a": "b"}}, "validations": []}, r"validations: no validation given"),
        ({"resources": {"r": {"a": "b"}}, "validations": ["nope"]}, r"validations\[0\]"),
    ]
    for arguments, message in cases:
        with pytest.raises(ConfigError, match=message) as caught:
            async with open_gate(**arguments):
                pass
        assert "\n" not in str(caught.value)


_CRASHING = """
import os, sys, anyio
from gategraph.runtime import SQLiteEventLog, open_gate
from gategraph.runtime._embed import _gate

if len(sys.argv) > 3:  # the executor's path as an older gategraph wrote it
    _gate._EXECUTOR = sys.argv[3]

async def main():
    async with SQLiteEventLog(sys.argv[1]) as log:
        async with open_gate({"repo": sys.argv[2]}, ["python_syntax"], event_log=log) as gate:
            print(gate.plan_id, flush=True)
            (gate.sandbox() / "new.py").write_text("def f(:\\n")
            assert (await gate.submit()).decision == "fix"
            (gate.sandbox() / "new.py").write_text("def f():\\n    return 1\\n")
            os._exit(9)  # the program dies before it submits the fix

anyio.run(main)
"""


@pytest.mark.anyio
@pytest.mark.parametrize("written", ["now", "before the modules moved"])
async def test_a_gate_is_resumed_after_its_program_died(tmp_path: Path, written: str) -> None:
    """A gate whose program died is resumed by the program and replayed by the command
    line, also from a graph file that names its executor by the path it had before the
    runtime's modules moved into subpackages."""
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    db = home / "events.db"
    executor = {
        "now": "gategraph.runtime._embed._gate:DETACHED",
        "before the modules moved": "gategraph.runtime._gate:DETACHED",
    }[written]
    died = run_process(
        [sys.executable, "-c", textwrap.dedent(_CRASHING), str(db), str(repo), executor]
    )
    assert died.returncode == 9, died.stderr
    plan_id = died.stdout.strip()
    written_as = (home / "gates" / f"{plan_id}.yaml").read_text(encoding="utf-8")
    assert f"uses: {executor}" in written_as
    async with SQLiteEventLog(db) as log:
        async with resume_gate(plan_id, event_log=log) as gate:
            assert is_gate(gate.graph)
            assert gate.verdicts[-1].decision == "fix"  # where the dead program left it
            assert (gate.sandbox() / "new.py").read_text().startswith("def f():")
            assert (await gate.submit()).passed and gate.applied
        events = await log.read(plan_id)
        assert "plan_resumed" in _tags(events)
        assert replay_plan(events, gate.graph).matches
    assert (repo / "new.py").read_text() == FIXED
    # The command line sees the gate like any plan: its graph was written beside the log.
    env = {**os.environ, "GATEGRAPH_HOME": str(home)}
    replayed = run_process(
        [sys.executable, "-m", "gategraph.runtime", "replay", plan_id], env=env, cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stderr
    assert "all match" in replayed.stdout


@pytest.mark.anyio
async def test_the_command_line_leaves_a_gates_work_to_its_program(tmp_path: Path) -> None:
    """`gategraph resume` on a gate is refused before anything is appended: only its
    program can do its work, and that program can still resume it."""
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    died = run_process(
        [sys.executable, "-c", textwrap.dedent(_CRASHING), str(home / "events.db"), str(repo)]
    )
    plan_id = died.stdout.strip()
    resumed = run_process(
        [sys.executable, "-m", "gategraph.runtime", "resume", plan_id],
        env={**os.environ, "GATEGRAPH_HOME": str(home)},
        cwd=tmp_path,
    )
    assert resumed.returncode != 0 and "resume it there (resume_gate)" in resumed.stderr
    assert resumed.stderr.count("\n") == 1  # one line, no traceback
    async with SQLiteEventLog(home / "events.db") as log:
        before = len(await log.read(plan_id))
        async with resume_gate(plan_id, event_log=log) as gate:
            assert gate.verdicts[-1].decision == "fix"  # still the program's to resume
            await gate.discard("not needed after all")
        assert len(await log.read(plan_id)) > before
    assert not (repo / "new.py").exists()


SLOW = {"name": "slow", "entrypoint": "gategraph.runtime.testing:sleeping"}


def _slow(seconds: float) -> dict[str, Any]:
    return {"validation": SLOW, "arguments": {"seconds": seconds}}


@pytest.mark.anyio
async def test_what_is_written_while_a_round_runs_is_never_applied(tmp_path: Path) -> None:
    """The validations saw one content; the sandbox holds another by Apply: nothing is
    applied, the plan fails saying why, and replay follows the log."""
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    async with open_gate({"repo": repo}, [_slow(0.3)], event_log=log) as gate:
        sandbox = gate.sandbox()
        (sandbox / "new.py").write_text(FIXED)
        async with anyio.create_task_group() as group:

            async def sneak() -> None:
                await anyio.sleep(0.1)
                (sandbox / "new.py").write_text(BROKEN)  # written while validated

            group.start_soon(sneak)
            verdict = await gate.submit()
        assert verdict.passed and not gate.applied
        assert gate.outcome is not None and gate.outcome.status == "failed"
        assert "changed while they were being validated" in gate.outcome.message
    assert _files(repo) == {"app.py": "x = 1\n"}
    assert replay_plan(await log.read(gate.plan_id), gate.graph).matches


@pytest.mark.anyio
async def test_a_cancelled_submit_or_a_discard_mid_round_applies_nothing(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    async with open_gate({"repo": repo}, [_slow(0.3)]) as gate:
        (gate.sandbox() / "new.py").write_text(FIXED)
        with anyio.move_on_after(0.05):
            await gate.submit()
        with pytest.raises(GateClosedError):
            await gate.submit()
    assert gate.outcome is not None and gate.outcome.status == "failed"
    assert "cancelled" in gate.outcome.message
    with pytest.raises(TimeoutError):
        async with open_gate({"repo": repo}, [_slow(0.3)]) as timed:
            (timed.sandbox() / "new.py").write_text(FIXED)
            with anyio.fail_after(0.05):
                await timed.submit()
    assert timed.outcome is not None and timed.outcome.status == "failed"
    async with open_gate({"repo": repo}, [_slow(0.3)]) as other:
        (other.sandbox() / "new.py").write_text(FIXED)
        async with anyio.create_task_group() as group:

            async def give_up() -> None:
                await anyio.sleep(0.05)
                await other.discard("changed my mind")

            group.start_soon(give_up)
            await other.submit()
    assert other.outcome is not None and "changed my mind" in other.outcome.message
    assert _files(repo) == {"app.py": "x = 1\n"}


@pytest.mark.anyio
async def test_the_plans_own_failure_is_raised_as_itself(tmp_path: Path) -> None:
    """Two gates on one folder: the second Apply is refused (the plan fails, nothing is
    applied); a gate busy elsewhere is refused on entry with PlanBusyError itself."""
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    async with open_gate({"repo": repo}, ["python_syntax"]) as first:
        async with open_gate({"repo": repo}, ["python_syntax"], event_log=log) as second:
            (first.sandbox() / "app.py").write_text("x = 2\n")
            (second.sandbox() / "app.py").write_text("x = 3\n")
            assert (await first.submit()).passed and first.applied
            verdict = await second.submit()  # validated, then refused by the folder
            assert verdict.passed and not second.applied
            assert second.outcome is not None and second.outcome.status == "failed"
            assert "not applied: resource 'repo': 1 path(s) changed" in second.outcome.message
    assert replay_plan(await log.read(second.plan_id), second.graph).matches
    db = tmp_path / "events.db"
    async with SQLiteEventLog(db) as log:
        async with open_gate({"repo": repo}, ["python_syntax"], event_log=log) as open_one:
            async with SQLiteEventLog(db) as other_log:
                with pytest.raises(PlanBusyError):
                    async with resume_gate(open_one.plan_id, event_log=other_log):
                        pytest.fail("a gate open elsewhere was handed out")


@pytest.mark.anyio
async def test_misuse_is_refused_up_front(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    async with open_gate({"repo": repo}, ["python_syntax"], event_log=log, plan_id="g-1") as gate:
        await gate.discard()
    with pytest.raises(ConfigError, match=r"plan_id: plan g-1 is in this event log already"):
        async with open_gate({"repo": repo}, ["python_syntax"], event_log=log, plan_id="g-1"):
            pass
    with pytest.raises(ConfigError, match=r"policy\.strategy_revisions: a gate has no strategy"):
        async with open_gate({"repo": repo}, ["python_syntax"], policy={"strategy_revisions": 1}):
            pass
    with pytest.raises(ConfigError, match=r"open_gate\(\): validations\[1\]\.id: 'x' names"):
        async with open_gate(
            {"repo": repo},
            [
                {"validation": "python_syntax", "id": "x"},
                {"validation": "python_syntax", "id": "x"},
            ],
        ):
            pass
    async with open_gate({"repo": repo}, [PASSING_INLINE], name="my-gate") as named:
        assert named.graph.name == "my-gate"
    plan = await run_plan(_repo_graph(repo), event_log=log)
    with pytest.raises(ConfigError, match=r"resume_gate\(\): plan_id: .* is not a gate"):
        async with resume_gate(plan.plan_id, event_log=log, graph=_repo_graph(repo)):
            pass
    async with open_gate({"notes": {"a.txt": "x"}}, [PASSING_INLINE]) as files:
        files.sandbox()["../escape.txt"] = "z"
        with pytest.raises(ConfigError, match=r"submit\(\): sandbox 'notes': '../escape.txt'"):
            await files.submit()
        del files.sandbox()["../escape.txt"]
        files.sandbox()["b.txt"] = 5
        with pytest.raises(ConfigError, match=r"'b.txt' holds int"):
            await files.submit()
        files.sandbox()["b.txt"] = "five"
        assert (await files.submit()).passed and files.applied
    notes = files.resources["notes"]
    assert isinstance(notes, MemoryResource) and notes.files["b.txt"] == "five"


PASSING_INLINE = {"name": "always", "entrypoint": "gategraph.runtime.testing:passing"}


def _repo_graph(repo: Path) -> Any:
    from gategraph.runtime import load_graph

    return load_graph(
        f"version: 1\nname: plain\nresources: {{repo: {{kind: directory, path: '{repo}'}}}}\n"
        "nodes: [{id: syntax, validation: python_syntax}]\n"
    )


@pytest.mark.anyio
async def test_a_paused_gate_is_resumed_with_a_decision(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    async with open_gate({"repo": repo}, ["python_syntax"], retry_limit=0, event_log=log) as gate:
        (gate.sandbox() / "new.py").write_text(BROKEN)
        assert (await gate.submit()).decision == "escalate-exhausted"
        assert gate.outcome is not None and gate.outcome.status == "awaiting_decision"
    retry = EscalationDecision(action="retry", note="try once more")
    async with resume_gate(gate.plan_id, event_log=log, graph=gate.graph, decision=retry) as again:
        assert again.outcome is None and again.verdicts[-1].decision == "escalate-exhausted"
        (again.sandbox() / "new.py").write_text(FIXED)
        assert (await again.submit()).passed and again.applied
    assert (repo / "new.py").read_text() == FIXED


@pytest.mark.anyio
async def test_a_round_the_resume_finishes_has_its_verdict(tmp_path: Path) -> None:
    """The block was cancelled mid-round: the plan stays where it was; resumed, the round
    finishes and its verdict is the gate's last."""
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    with anyio.move_on_after(0.2):
        async with open_gate({"repo": repo}, [_slow(0.5)], event_log=log) as gate:
            (gate.sandbox() / "new.py").write_text(FIXED)
            await gate.submit()
    assert gate.outcome is None
    with pytest.raises(GateClosedError, match=r"block has ended: .* waits to be resumed"):
        await gate.submit()
    async with resume_gate(gate.plan_id, event_log=log, graph=gate.graph) as resumed:
        pass
    assert resumed.verdicts and resumed.verdicts[-1].passed and resumed.applied
    assert (repo / "new.py").read_text() == FIXED


@pytest.mark.anyio
async def test_an_approved_change_the_folder_no_longer_fits_is_not_applied(
    tmp_path: Path,
) -> None:
    """Paused for approval; meanwhile the real file changed. Approved, the folder refuses
    the changeset: the plan fails ('not applied'), changing nothing; replay follows."""
    repo = _repo(tmp_path)
    log = MemoryEventLog()
    policy = {
        "approval": {"rules": [{"match": "python_syntax", "action": "require", "tier": "high"}]}
    }
    async with open_gate({"repo": repo}, ["python_syntax"], policy=policy, event_log=log) as gate:
        (gate.sandbox() / "app.py").write_text("x = 2\n")
        assert (await gate.submit()).passed
        assert gate.outcome is not None and gate.outcome.status == "awaiting_approval"
    (repo / "app.py").write_text("x = 3\n")  # someone else's edit while it waited
    approve = EscalationDecision(action="approve")
    async with resume_gate(
        gate.plan_id, event_log=log, graph=gate.graph, decision=approve
    ) as again:
        pass
    assert again.outcome is not None and again.outcome.status == "failed"
    assert again.outcome.message.startswith("not applied: resource 'repo'")
    assert (repo / "app.py").read_text() == "x = 3\n"
    assert replay_plan(await log.read(gate.plan_id), gate.graph).matches
    # Resumed once more, it follows its log to the same end (the refusal came after
    # Apply began), appending nothing and changing nothing.
    events = await log.read(gate.plan_id)
    async with resume_gate(gate.plan_id, event_log=log, graph=gate.graph) as third:
        pass
    assert third.outcome is not None and third.outcome.status == "failed"
    assert third.outcome.message == again.outcome.message
    assert [type(e) for e in await log.read(gate.plan_id)][: len(events)] == [
        type(e) for e in events
    ]
    assert (repo / "app.py").read_text() == "x = 3\n"
