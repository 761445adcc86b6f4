"""Kill a real `gategraph run` with SIGKILL — mid fan-out, between phases, mid-Apply — and
continue it with `gategraph resume`: validations that completed are not run again, Apply
happens once, and the log replays.

The kill points are set with a ``sitecustomize`` module put on the child's path: it wraps
the SQLite log's commit (kill once the n-th event of a kind is durable) or the directory
resource's apply steps, and sends the process SIGKILL there. Nothing in the runtime knows.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _helpers import run_process
from _plans import fan_out_plan, per_round
from gategraph.runtime._storage._eventlog import read_events

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"
)

HOOK = textwrap.dedent("""\
    import os, signal

    def _die():
        os.kill(os.getpid(), signal.SIGKILL)

    _at = os.environ.get("GG_KILL_AT")
    if _at:
        _tag, _, _count = _at.partition(":")
        _seen = [0]
        from gategraph.runtime._storage import _eventlog

        _original = _eventlog.SQLiteEventLog._commit

        def _commit(self, by_plan):
            refused = _original(self, by_plan)
            for events in by_plan.values():
                _seen[0] += sum(type(e).__struct_config__.tag == _tag for e in events)
            if _seen[0] >= int(_count or 1):
                _die()  # right after the event is durable
            return refused

        _eventlog.SQLiteEventLog._commit = _commit

    _apply = os.environ.get("GG_KILL_APPLY")
    if _apply:
        _phase, _, _index = _apply.partition(":")
        from gategraph.runtime._storage import _resources

        def _point(phase, index):
            if phase == _phase and index == int(_index or 0):
                _die()

        _resources._crash_point = _point
    """)

WIDTH = 6
"""Slow validations beside the syntax check: a fan-out to be killed in the middle of."""


def graph_text(root: Path) -> str:
    return fan_out_plan(root, width=WIDTH, seconds=0.2)


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "repo"
        (self.root / "src").mkdir(parents=True)
        (self.root / "src" / "app.py").write_text("x = 1\n")
        self.graph = tmp_path / "plan.yaml"
        self.graph.write_text(graph_text(self.root))
        self.home = tmp_path / "home"
        hooks = tmp_path / "hooks"
        hooks.mkdir()
        (hooks / "sitecustomize.py").write_text(HOOK)
        self.hooks = hooks
        self.plan_id = "killed-plan"

    def gategraph(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environment = {**os.environ, "GATEGRAPH_HOME": str(self.home), **env}
        if env:
            environment["PYTHONPATH"] = os.pathsep.join(
                [str(self.hooks), *filter(None, [os.environ.get("PYTHONPATH")])]
            )
        return run_process([sys.executable, "-m", "gategraph.runtime._cli", *args], env=environment)

    def events(self) -> list[Any]:
        return read_events(self.home / "events.db", self.plan_id)


def tags(events: list[Any]) -> list[str]:
    return [type(e).__struct_config__.tag for e in events]


def kill_then_resume(setup: Setup, **kill: str) -> tuple[list[Any], list[Any]]:
    """Run until killed at ``kill``; resume to the end; return the log before and after."""
    died = setup.gategraph("run", str(setup.graph), "--plan-id", setup.plan_id, **kill)
    assert died.returncode == -signal.SIGKILL, (died.returncode, died.stdout, died.stderr)
    before = setup.events()
    resumed = setup.gategraph("resume", setup.plan_id)
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    assert "applied — verdict attest" in resumed.stdout
    after = setup.events()
    # The plan ends as it would have: fixed, applied once, the file in place.
    assert (setup.root / "src" / "greet.py").read_text().startswith("def greet(name):")
    assert tags(after).count("apply_completed") == 1
    assert tags(after).count("plan_resumed") == 1
    assert set(per_round(after, "validation_completed").values()) == {1}
    assert [e.seq for e in after] == list(range(1, len(after) + 1))
    replay = setup.gategraph("replay", setup.plan_id)
    assert replay.returncode == 0, (replay.stdout, replay.stderr)
    assert not (setup.home / "sandboxes" / setup.plan_id).exists()
    return before, after


def test_kill_mid_fan_out(tmp_path: Path) -> None:
    """Killed with 3 of round 1's 7 validations durable: the resumed run starts only the
    other 4, and never the 3 again."""
    setup = Setup(tmp_path)
    before, after = kill_then_resume(setup, GG_KILL_AT="validation_completed:3")
    done_before = {node for (rnd, node) in per_round(before, "validation_completed") if rnd == 1}
    assert 3 <= len(done_before) < WIDTH + 1  # really in the middle
    started = per_round(after, "validation_started")
    for node in done_before:
        assert started[(1, node)] == 1, node  # started once, before the kill, never again
    assert len({n for (r, n) in per_round(after, "validation_completed") if r == 1}) == WIDTH + 1


@pytest.mark.parametrize("event", ["strategy_produced", "work_finished", "artifact_rejected"])
def test_kill_between_phases(tmp_path: Path, event: str) -> None:
    """Killed right after a phase ends: the next phase runs on resume; nothing before it."""
    setup = Setup(tmp_path)
    before, after = kill_then_resume(setup, GG_KILL_AT=f"{event}:1")
    assert tags(before)[-1] == event
    # The log goes on right where it stopped, and the phase is not done twice: a plan that
    # fixes once strategizes once, works twice and is rejected once.
    assert tags(after)[: len(before) + 1] == [*tags(before), "plan_resumed"]
    assert tags(after).count(event) == {"work_finished": 2}.get(event, 1)


@pytest.mark.parametrize(
    "kill",
    [
        {"GG_KILL_AT": "apply_started:1"},
        {"GG_KILL_APPLY": "prepared:0"},
        {"GG_KILL_APPLY": "applying:0"},
        {"GG_KILL_APPLY": "committed:0"},
    ],
    ids=["after-apply-started", "journal-prepared", "mid-apply", "committed"],
)
def test_kill_mid_apply(tmp_path: Path, kill: dict[str, str]) -> None:
    """Killed during Apply (before the resource is touched, with its journal prepared, in
    the middle of renaming, or committed but not recorded): resume finishes it, once."""
    setup = Setup(tmp_path)
    before, _ = kill_then_resume(setup, **kill)
    assert "apply_started" in tags(before)
    assert "apply_completed" not in tags(before)


def test_resume_cli_errors(tmp_path: Path) -> None:
    """Unknown plan, a changed graph file, a decision for a plan not waiting for one: one
    line each, no traceback."""
    setup = Setup(tmp_path)
    unknown = setup.gategraph("resume", "no-such-plan")
    assert unknown.returncode == 2 and "no events for plan 'no-such-plan'" in unknown.stderr
    died = setup.gategraph(
        "run", str(setup.graph), "--plan-id", setup.plan_id, GG_KILL_AT="artifact_rejected:1"
    )
    assert died.returncode == -signal.SIGKILL
    decided = setup.gategraph("decide", setup.plan_id, "--retry")
    assert decided.returncode == 1
    assert decided.stderr.strip().splitlines()[-1].startswith("error:")
    assert "not waiting for a decision" in decided.stderr
    setup.graph.write_text(setup.graph.read_text() + "\n# edited\n")
    changed = setup.gategraph("resume", setup.plan_id)
    assert changed.returncode == 1 and "changed since plan killed-plan started" in changed.stderr
    for result in (unknown, decided, changed):
        assert "Traceback" not in result.stderr
