"""The gate: a framework that owns its loop writes into a sandbox, submits, and the change
is applied atomically only when its validations pass — with a plan's events, replay and
resume."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from gategraph.runtime import (
    ConfigError,
    EscalationDecision,
    EscalationRequest,
    GateClosedError,
    MemoryEventLog,
    MemoryResource,
    SQLiteEventLog,
    open_gate,
    replay_plan,
    resume_gate,
)

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
async def test_a_gate_is_resumed_after_its_program_died(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    db = home / "events.db"
    died = subprocess.run(  # noqa: ASYNC221 - the program that dies
        [sys.executable, "-c", textwrap.dedent(_CRASHING), str(db), str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert died.returncode == 9, died.stderr
    plan_id = died.stdout.strip()
    async with SQLiteEventLog(db) as log:
        async with resume_gate(plan_id, event_log=log) as gate:
            assert gate.verdicts[-1].decision == "fix"  # where the dead program left it
            assert (gate.sandbox() / "new.py").read_text().startswith("def f():")
            assert (await gate.submit()).passed and gate.applied
        events = await log.read(plan_id)
        assert "plan_resumed" in _tags(events)
        assert replay_plan(events, gate.graph).matches
    assert (repo / "new.py").read_text() == FIXED
    # The command line sees the gate like any plan: its graph was written beside the log.
    env = {**os.environ, "GATEGRAPH_HOME": str(home)}
    replayed = subprocess.run(  # noqa: ASYNC221 - the command line, as a user runs it
        [sys.executable, "-m", "gategraph.runtime", "replay", plan_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert "all match" in replayed.stdout


@pytest.mark.anyio
async def test_the_command_line_leaves_a_gates_work_to_its_program(tmp_path: Path) -> None:
    """`gategraph resume` on a gate is refused before anything is appended: only its
    program can do its work, and that program can still resume it."""
    repo = _repo(tmp_path)
    home = tmp_path / "home"
    died = subprocess.run(  # noqa: ASYNC221 - the program that dies
        [sys.executable, "-c", textwrap.dedent(_CRASHING), str(home / "events.db"), str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    plan_id = died.stdout.strip()
    resumed = subprocess.run(  # noqa: ASYNC221 - the command line, as a user runs it
        [sys.executable, "-m", "gategraph.runtime", "resume", plan_id],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
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
