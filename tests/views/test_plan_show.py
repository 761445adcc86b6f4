"""`gategraph show PLAN_ID`: a plan's verdict, its findings per acceptance criterion, its
steps, its statistics and the change it validated, on an applied plan and a paused one."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _helpers import run_gategraph, run_process
from gategraph.runtime import (
    Catalog,
    EscalationDecision,
    SQLiteEventLog,
    load_graph,
    read_events,
    run_plan,
)
from gategraph.runtime._views._plan_show import plan_view, statistics_of

EDIT = """
version: 1
name: change
resources: {repo: {kind: directory, path: repo}}
tools:
  - name: edit
    code: |
      from pathlib import Path
      def run(root):
          p = Path(root) / "hello.py"
          p.write_text(p.read_text().replace("hi", "hello") + "x = 1")
          (Path(root) / "old.txt").unlink()
          (Path(root) / "new.bin").write_bytes(b"\\0\\1")
          return {"files": ["hello.py"]}
    resource_slots: [root]
validations: [{name: ok, entrypoint: "gategraph.runtime.testing:passing"}]
nodes:
  - {id: work, tool: edit}
  - {id: check, validation: ok, needs: [work]}
acceptance: [{id: AC1, text: The edit is fine., validations: [check]}]
policy: {approval: {rules: [{match: check, tier: high, action: require}]}}
"""

DIFF = """\
--- a/hello.py
+++ b/hello.py
@@ -1 +1,2 @@
-print('hi')
+print('hello')
+x = 1
\\ No newline at end of file
"""


STUCK = {
    "version": 1,
    "name": "stuck",
    "resources": {"repo": {"kind": "directory", "path": "repo"}},
    "validations": [{"name": "bad", "entrypoint": "gategraph.runtime.testing:failing"}],
    "nodes": [{"id": "check", "validation": "bad"}],
    "policy": {"retry_limit": 0, "strategy_revisions": 0},
}
"""A plan that fails every round and has no retries: it waits for a person's decision."""


def project(folder: Path) -> None:
    (folder / "repo").mkdir()
    (folder / "repo" / "hello.py").write_text("print('hi')\n")
    (folder / "repo" / "old.txt").write_text("gone soon\n")
    (folder / "plan.yaml").write_text(textwrap.dedent(EDIT).lstrip())


def test_show_a_paused_plan_then_the_applied_one(tmp_path: Path) -> None:
    project(tmp_path)
    home = tmp_path / "home"
    paused = run_gategraph(home, "run", "plan.yaml", "--json", cwd=tmp_path)
    assert paused.returncode == 3, paused.stderr
    plan_id = json.loads(paused.stdout)["plan_id"]

    shown = run_gategraph(home, "show", plan_id, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.startswith(
        f"plan {plan_id} (change): awaiting_approval — waits for a person's approval (tier high)\n"
    )
    assert "verdict: attest — All 1 acceptance criteria pass." in text  # what is asked
    assert "  approval needed (tier high): check needs approval (tier high)" in text
    assert "changes (round 1: what Apply would commit):" in text
    assert "  added    repo: new.bin (binary)" in text
    assert "  deleted  repo: old.txt" in text
    assert "  modified repo: hello.py" in text
    assert DIFF in text
    assert "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone soon\n" in text
    assert (tmp_path / "repo" / "old.txt").exists()  # looking changed nothing

    assert run_gategraph(home, "approve", plan_id, "--approve", cwd=tmp_path).returncode == 0
    data = json.loads(run_gategraph(home, "show", plan_id, "--json", cwd=tmp_path).stdout)
    assert data["status"] == "applied" and data["verdict"]["verdict"] == "attest"
    assert data["criteria"] == [
        {
            "id": data["verdict"]["findings"][0]["acId"],
            "name": "AC1",
            "alias": "AC1",
            "text": "The edit is fine.",
            "status": "pass",
            "reasoning": data["verdict"]["findings"][0]["reasoning"],
        }
    ]
    assert data["changes_note"] == "round 1: what Apply committed"
    assert {c["path"]: c["kind"] for c in data["changes"]} == {
        "hello.py": "modified",
        "new.bin": "added",
        "old.txt": "deleted",
    }
    assert next(c for c in data["changes"] if c["path"] == "hello.py")["diff"] == DIFF
    stats = data["statistics"]
    assert stats["rounds"] == 1 and stats["pipeline_completions"] == 1
    assert set(stats["layer_seconds"]) == {"routing", "payload", "semantic", "approval"}
    assert stats["approval_wait_seconds"] > 0
    assert [r["passed"] for r in data["timeline"]] == [True]
    assert data["timeline"][0]["validations"][0]["node"] == "check"
    short = run_gategraph(home, "show", plan_id, "--no-diff", cwd=tmp_path).stdout
    assert "--- a/hello.py" not in short and "  modified repo: hello.py" in short

    missing = run_gategraph(home, "show", "nope", cwd=tmp_path)
    assert missing.returncode == 2
    assert (
        missing.stderr.startswith("error: no plan 'nope' in ")
        and "gategraph plans" in missing.stderr
    )


FLAKY_FIX = """
version: 1
name: fixes
resources: {repo: {kind: directory, path: repo}}
validations:
  - name: second-time
    code: |
      from pathlib import Path
      def run(root):
          marker = Path(root).parent.parent.parent.parent / "seen"
          if marker.exists():
              return {"passed": True}
          marker.write_text("1")
          return {"passed": False, "message": "not yet"}
nodes: [{id: check, validation: second-time}]
"""


@pytest.mark.anyio
async def test_the_statistics_from_the_log_are_the_plan_s_own(tmp_path: Path) -> None:
    """What `show` counts from the events is what the supervisor counted while it ran."""
    (tmp_path / "repo").mkdir()
    graph = load_graph(
        {
            "version": 1,
            "name": "counted",
            "resources": {"repo": {"kind": "directory", "path": str(tmp_path / "repo")}},
            "validations": [
                {"name": "bad", "entrypoint": "gategraph.runtime.testing:failing"},
                {"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"},
            ],
            "nodes": [{"id": "a", "validation": "bad"}, {"id": "b", "validation": "ok"}],
            "policy": {"retry_limit": 1, "strategy_revisions": 1},
        }
    )
    answers = iter([EscalationDecision(action="retry"), EscalationDecision(action="abort")])

    async def person(request: Any) -> EscalationDecision:
        return next(answers)

    log_path = tmp_path / "events.db"
    async with SQLiteEventLog(log_path) as log:
        outcome = await run_plan(graph, event_log=log, escalation=person)
    events = read_events(log_path, outcome.plan_id)
    counted = statistics_of(events)
    live = outcome.statistics
    for field in (
        "rounds",
        "pipeline_completions",
        "semantic_invocations",
        "rejection_reasons",
        "fixes",
        "validator_retries",
        "revisions",
        "escalations",
    ):
        assert getattr(counted, field) == getattr(live, field), field
    assert counted.rounds == 6 and counted.escalations == 2  # a retry, then an abort
    assert set(counted.layer_seconds) <= set(live.layer_seconds)
    view = plan_view(log_path, outcome.plan_id)
    assert view is not None and view.summary.status == "failed"
    assert [r.passed for r in view.rounds] == [False] * 6
    assert view.rounds[0].layer == "semantic"
    assert view.criteria and view.criteria[0]["status"] == "fail"  # named by id: no catalog


def test_a_plan_from_an_in_memory_store_says_why_it_has_no_change(tmp_path: Path) -> None:
    import anyio
    from gategraph.runtime import ContentStore

    (tmp_path / "repo").mkdir()
    graph = load_graph(
        {
            "version": 1,
            "name": "memory",
            "resources": {"repo": {"kind": "directory", "path": str(tmp_path / "repo")}},
            "validations": [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
            "nodes": [{"id": "a", "validation": "ok"}],
        }
    )
    log_path = tmp_path / "events.db"

    async def main() -> str:
        async with SQLiteEventLog(log_path) as log:
            outcome = await run_plan(graph, event_log=log, store=ContentStore(None))
        return outcome.plan_id

    plan_id = anyio.run(main)
    with Catalog.in_memory() as catalog:
        view = plan_view(log_path, plan_id, catalog=catalog)
    assert view is not None and view.changes is None
    assert "in memory" in view.changes_note or "not recorded" in view.changes_note


# -- asked at a terminal ------------------------------------------------------------------


def _on_a_terminal(
    home: Path, cwd: Path, args: list[str], answers: list[tuple[str, str]]
) -> tuple[int, str]:
    """Run gategraph with a pseudo-terminal for its standard streams; each time its output
    ends with one of ``answers``' prompts, type the answer. Returns the exit code and all
    it wrote."""
    import os
    import select
    import subprocess
    import sys
    import time

    from _helpers import cli_env

    master, slave = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "gategraph.runtime", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env={**cli_env(home), "COLUMNS": "200"},
        close_fds=True,
    )
    os.close(slave)
    seen = b""
    pending = list(answers)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break  # the other side closed: the process is done
                if not chunk:
                    break
                seen += chunk
            if pending and seen.rstrip().endswith(pending[0][0].encode()):
                os.write(master, pending.pop(0)[1].encode() + b"\n")
            if process.poll() is not None and not ready:
                break
        code = process.wait(timeout=30)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    return code, seen.decode("utf-8", "replace").replace("\r\n", "\n")


def test_at_a_terminal_the_approval_is_asked_with_the_change_in_view(tmp_path: Path) -> None:
    project(tmp_path)
    home = tmp_path / "home"
    code, output = _on_a_terminal(
        home,
        tmp_path,
        ["run", "plan.yaml"],
        [("approve it? [a]pprove, [d]eny, [l]ater:", "a"), ("(enter for none):", "looks right")],
    )
    assert code == 0, output
    assert "-print('hi')\n+print('hello')" in output  # the diff, before the question
    assert output.index("+print('hello')") < output.index("approve it?")
    assert ": applied" in output
    assert (tmp_path / "repo" / "hello.py").read_text() == "print('hello')\nx = 1"
    data = json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout)
    assert data[0]["status"] == "applied"


def test_at_a_terminal_later_leaves_the_plan_waiting(tmp_path: Path) -> None:
    project(tmp_path)
    home = tmp_path / "home"
    code, output = _on_a_terminal(
        home, tmp_path, ["run", "plan.yaml"], [("approve it? [a]pprove, [d]eny, [l]ater:", "l")]
    )
    assert code == 3, output
    assert "approve with: gategraph approve" in output
    assert (tmp_path / "repo" / "old.txt").exists()


def test_at_a_terminal_a_decision_is_asked_with_the_failing_findings(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "stuck.yaml").write_text(json.dumps(STUCK))
    question = "what now? [r]etry (with a note), [a]bort, [l]ater:"
    code, output = _on_a_terminal(
        tmp_path / "home",
        tmp_path,
        ["run", "stuck.yaml"],
        [
            (question, "r"),
            ("(enter for none):", "try harder"),
            (question, "a"),
            ("(enter for none):", ""),
        ],
    )
    assert code == 1, output  # aborted: the plan failed
    # No acceptance declared: the criterion is the validation node it stands for.
    assert "FAIL check: check: failed on purpose" in output
    assert output.count(question) == 2
    assert "stuck" in output and ": failed" in output


def test_without_a_terminal_nothing_is_asked(tmp_path: Path) -> None:
    project(tmp_path)
    done = run_gategraph(tmp_path / "home", "run", "plan.yaml", cwd=tmp_path)
    assert done.returncode == 3 and "approve it?" not in done.stdout + done.stderr


def test_diffs_are_git_s_and_bounded(tmp_path: Path) -> None:
    """Lines end at `\\n` alone (a form feed is part of its line), so `git apply` takes
    the diff; a file too long to diff is listed without one; `--no-diff` works none out."""
    import shutil

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "m.py").write_text("a\n\x0c\nb\nc\n")
    (tmp_path / "repo" / "long.txt").write_text("".join(f"v{i % 97}\n" for i in range(30_000)))
    plan = EDIT.replace(
        """          p = Path(root) / "hello.py"
          p.write_text(p.read_text().replace("hi", "hello") + "x = 1")
          (Path(root) / "old.txt").unlink()
          (Path(root) / "new.bin").write_bytes(b"\\0\\1")""",
        """          m = Path(root) / "m.py"
          m.write_text(m.read_text().replace("c\\n", "C\\n"))
          long = Path(root) / "long.txt"
          long.write_text(long.read_text()[::-1])""",
    )
    (tmp_path / "plan.yaml").write_text(textwrap.dedent(plan).lstrip())
    home = tmp_path / "home"
    paused = run_gategraph(home, "run", "plan.yaml", "--json", cwd=tmp_path)
    assert paused.returncode == 3, paused.stdout + paused.stderr
    plan_id = json.loads(paused.stdout)["plan_id"]
    data = json.loads(run_gategraph(home, "show", plan_id, "--json", cwd=tmp_path).stdout)
    by_path = {c["path"]: c for c in data["changes"]}
    assert by_path["long.txt"]["diff"] is None
    assert by_path["long.txt"]["note"] == "over 20,000 lines: no diff"
    diff = by_path["m.py"]["diff"]
    assert "@@ -1,4 +1,4 @@" in diff and "No newline" not in diff
    if shutil.which("git"):
        (tmp_path / "m.diff").write_text(diff)
        checked = run_process(
            ["git", "apply", "--check", "--directory=repo", "m.diff"], cwd=tmp_path
        )
        assert checked.returncode == 0, checked.stderr
    listed = json.loads(
        run_gategraph(home, "show", plan_id, "--json", "--no-diff", cwd=tmp_path).stdout
    )
    assert all(c["diff"] is None and c["note"] == "" for c in listed["changes"])


def test_at_a_terminal_ctrl_d_leaves_the_plan_waiting(tmp_path: Path) -> None:
    project(tmp_path)
    code, output = _on_a_terminal(
        tmp_path / "home",
        tmp_path,
        ["run", "plan.yaml"],
        [("approve it? [a]pprove, [d]eny, [l]ater:", "\x04")],
    )
    assert code == 3, output
    assert "aborted" not in output


def test_at_a_terminal_the_graph_given_is_the_one_resumed(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "stuck.yaml").write_text(json.dumps(STUCK))
    home = tmp_path / "home"
    paused = run_gategraph(home, "run", "stuck.yaml", "--json", cwd=tmp_path)
    plan_id = json.loads(paused.stdout)["plan_id"]
    (tmp_path / "stuck.yaml").rename(tmp_path / "moved.yaml")
    question = "what now? [r]etry (with a note), [a]bort, [l]ater:"
    code, output = _on_a_terminal(
        home,
        tmp_path,
        ["decide", plan_id, "moved.yaml", "--retry"],
        [(question, "r"), ("(enter for none):", ""), (question, "l")],
    )
    assert code == 3, output
    assert output.count(question) == 2 and "is not there" not in output


def test_show_and_report_of_plans_with_little_to_show(tmp_path: Path) -> None:
    """A plan that stopped before any round, and one whose work changed nothing; a link
    the work made is shown as its target."""
    import anyio
    from gategraph.runtime._data._events import PlanFinished, PlanStarted

    home = tmp_path / "home"

    async def write() -> None:
        async with SQLiteEventLog(home / "events.db") as log:
            for seq, event in enumerate(
                (
                    PlanStarted(
                        id="01J0000000000000000000000A", plan_id="early", at=1.0, graph="g"
                    ),
                    PlanFinished(
                        id="01J0000000000000000000000B",
                        plan_id="early",
                        at=2.0,
                        status="failed",
                        message="gave up before any round",
                    ),
                ),
                start=1,
            ):
                await log.append(msgspec.structs.replace(event, seq=seq))

    anyio.run(write)
    text = run_gategraph(home, "show", "early", cwd=tmp_path).stdout
    assert "verdict: none yet" in text
    assert "changes: no round ran yet: nothing was changed" in text
    assert run_gategraph(home, "report", "early", "--html", "e.html", cwd=tmp_path).returncode == 0
    page = (tmp_path / "e.html").read_text(encoding="utf-8")
    assert "No validation round ran." in page and "No verdict yet." in page
    assert "not at hand" in page  # a plan started from Python: no graph file to draw

    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "hello.py").write_text("x = 1\n")
    linking = (
        EDIT.split("tools:")[0]
        + textwrap.dedent(
            """
        tools:
          - name: edit
            code: |
              from pathlib import Path
              def run(root):
                  (Path(root) / "link.py").symlink_to("hello.py")
                  return {"files": ["link.py"]}
            resource_slots: [root]
        """
        )
        + "validations:"
        + EDIT.split("validations:", 1)[1]
    )
    (tmp_path / "plan.yaml").write_text(linking.lstrip())
    paused = run_gategraph(home, "run", "plan.yaml", "--json", cwd=tmp_path)
    plan_id = json.loads(paused.stdout)["plan_id"]
    shown = run_gategraph(home, "show", plan_id, cwd=tmp_path).stdout
    assert "+-> hello.py" in shown and "  added    repo: link.py" in shown

    (tmp_path / "still.yaml").write_text(
        json.dumps(
            {
                "version": 1,
                "name": "still",
                "resources": {"repo": {"kind": "directory", "path": "repo"}},
                "validations": [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
                "nodes": [{"id": "a", "validation": "ok"}],
            }
        )
    )
    done = run_gategraph(home, "run", "still.yaml", "--report", "html", "s.html", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    still = json.loads(
        run_gategraph(home, "plans", "--name", "still", "--json", cwd=tmp_path).stdout
    )
    text = run_gategraph(home, "show", still[0]["plan_id"], cwd=tmp_path).stdout
    assert "changes (round 1: what Apply committed): none" in text
    assert "nothing changed" in (tmp_path / "s.html").read_text(encoding="utf-8")
