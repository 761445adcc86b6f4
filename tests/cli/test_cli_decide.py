"""Decisions and approvals across processes: `gategraph run` pauses (exit 3), and another
process answers with `gategraph decide` or `gategraph approve`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import run_process
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime._storage._eventlog import read_events


def gategraph(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_process(
        [sys.executable, "-m", "gategraph.runtime._cli", *args],
        env={**os.environ, "GATEGRAPH_HOME": str(home)},
    )


def tags(home: Path, plan_id: str) -> list[str]:
    return [type(e).__struct_config__.tag for e in read_events(home / "events.db", plan_id)]


def test_decide_retry_then_applied(tmp_path: Path) -> None:
    root = repo(tmp_path)
    graph = tmp_path / "plan.yaml"
    graph.write_text(plan(root, [BAD, BAD, GOOD], retry_limit=1, strategy_revisions=0))
    home = tmp_path / "home"
    paused = gategraph(home, "run", str(graph), "--plan-id", "p1")
    assert paused.returncode == 3, paused.stderr
    assert "gategraph decide p1 --retry" in paused.stdout
    # Still paused: resume shows it and changes nothing.
    before = tags(home, "p1")
    still = gategraph(home, "resume", "p1")
    assert still.returncode == 3 and tags(home, "p1") == before
    wrong = gategraph(home, "approve", "p1", "--approve")
    assert wrong.returncode == 1 and "not waiting for an approval" in wrong.stderr
    missing = gategraph(home, "decide", "p1")
    assert missing.returncode == 2
    assert missing.stderr == "error: give --retry or --abort (see 'gategraph decide --help')\n"
    both = gategraph(home, "decide", "p1", "--abort", "--retry")
    assert both.returncode == 2 and both.stdout == ""
    assert both.stderr == (
        "error: --retry and --abort contradict each other: give one "
        "(see 'gategraph decide --help')\n"
    )
    assert tags(home, "p1") == before  # neither answer was taken
    moved = graph.rename(tmp_path / "moved.yaml")
    lost = gategraph(home, "decide", "p1", "--retry")
    assert lost.returncode == 2 and "pass the graph file" in lost.stderr
    done = gategraph(
        home, "decide", "p1", str(moved), "--retry", "--note", "use the colon", "--json"
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "applied" and outcome["plan_id"] == "p1"
    assert (root / "src" / "greet.py").read_text().startswith("def greet(name):")
    after = tags(home, "p1")
    assert after[len(before) : len(before) + 2] == ["plan_resumed", "escalation_decided"]
    assert gategraph(home, "replay", "p1", str(moved)).returncode == 0


def _waiting_for_approval(
    tmp_path: Path, plan_id: str
) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """``gategraph run`` of a plan whose validation needs a person's approval: it stops,
    waiting. The project, gategraph's folder and the run."""
    root = repo(tmp_path)
    graph = tmp_path / "plan.yaml"
    graph.write_text(
        plan(root, [GOOD])
        + "policy:\n  approval:\n    rules: [{match: 'syn*', action: require, tier: high}]\n"
    )
    home = tmp_path / "home"
    paused = gategraph(home, "run", str(graph), "--plan-id", plan_id)
    assert paused.returncode == 3, paused.stderr
    return root, home, paused


@pytest.mark.parametrize(("answer", "code"), [("--approve", 0), ("--deny", 1)])
def test_approve_or_deny(tmp_path: Path, answer: str, code: int) -> None:
    root, home, paused = _waiting_for_approval(tmp_path, "p2")
    assert "gategraph approve p2 --approve | --deny" in paused.stdout
    assert tags(home, "p2")[-2:] == ["approval_required", "plan_finished"]
    done = gategraph(home, "approve", "p2", answer, "--note", "checked by hand")
    assert done.returncode == code, done.stderr
    assert (root / "src" / "greet.py").exists() is (code == 0)
    assert "approval_decided" in tags(home, "p2")
    assert gategraph(home, "replay", "p2").returncode == 0
    again = gategraph(home, "approve", "p2", answer)
    assert again.returncode == 1 and "not waiting for an approval" in again.stderr


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["approve", "p3", "--approve", "--deny"],
            "error: --approve and --deny contradict each other: give one "
            "(see 'gategraph approve --help')",
        ),
        (
            ["approve", "p3", "--deny", "--approve", "--note", "x"],
            "error: --approve and --deny contradict each other: give one "
            "(see 'gategraph approve --help')",
        ),
        (["approve", "p3"], "error: give --approve or --deny (see 'gategraph approve --help')"),
    ],
)
def test_contradictory_or_missing_answers_are_usage_errors(
    tmp_path: Path, args: list[str], line: str
) -> None:
    """`approve --approve --deny` neither approves nor denies: exit 2, one line; the plan
    still waits and nothing is applied."""
    root, home, _ = _waiting_for_approval(tmp_path, "p3")
    before = tags(home, "p3")
    done = gategraph(home, *args)
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == line + "\n"
    assert tags(home, "p3") == before
    assert not (root / "src" / "greet.py").exists()
    still = gategraph(home, "resume", "p3")
    assert still.returncode == 3 and "awaiting_approval" in still.stdout


def test_an_executor_beside_the_graph_file_imports_from_any_shell(tmp_path: Path) -> None:
    """`uses: agent:Coder` names agent.py beside plan.yaml: the run, and a decision given
    later from another folder by a new process, import it with no PYTHONPATH; a module
    there named as an installed package (yaml.py) does not hide the package."""
    folder = tmp_path / "plans"
    folder.mkdir()
    (folder / "agent.py").write_text(
        "from gategraph.runtime.testing import ScriptedExecutor as Coder\n"
    )
    (folder / "yaml.py").write_text("raise ImportError('the plan folder hid PyYAML')\n")
    root = repo(tmp_path)
    text = plan(root, [BAD, GOOD], retry_limit=0, strategy_revisions=0)
    assert "gategraph.runtime.testing:ScriptedExecutor" in text
    graph = folder / "plan.yaml"
    graph.write_text(text.replace("gategraph.runtime.testing:ScriptedExecutor", "agent:Coder"))
    home = tmp_path / "home"
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    environment["GATEGRAPH_HOME"] = str(home)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_process(
            [sys.executable, "-m", "gategraph.runtime._cli", *args], env=environment, cwd=elsewhere
        )

    paused = cli("run", str(graph), "--plan-id", "p1")
    assert paused.returncode == 3, paused.stdout + paused.stderr
    done = cli("decide", "p1", "--retry")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "p1: applied" in done.stdout
    assert (root / "src" / "greet.py").read_text() == GOOD.replace("\\n", "\n")
