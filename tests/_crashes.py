"""A crash campaign: a real `gategraph run` SIGKILLed right after its k-th durable event,
for every k, then resumed with `gategraph resume`, itself SIGKILLed at random points, until
the plan is done; each resume on another "host" (its own GATEGRAPH_HOME and TMPDIR) where it
can, on the one that did the work where only it can. Each plan must end as a run never
killed does: applied once, every validation of a round completed once, no event lost or
doubled (seqs 1..n), the file in place, a replay that matches.

The kill point is set with a ``sitecustomize`` module on the child's path: it wraps the
event log's commit and sends SIGKILL once the k-th event of the process is durable.
Nothing in the runtime knows.

Run on its own for the full campaign (``python tests/_crashes.py postgresql://... [SEED]``);
the test suite runs a sample of it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _plans import fan_out_plan

HOOK = textwrap.dedent("""\
    import os, signal

    _at = os.environ.get("GG_KILL_EVENT")
    if _at:
        from gategraph.runtime._storage import _eventlog

        _original = _eventlog.BatchedEventLog._commit
        _seen = [0]

        def _commit(self, by_plan):
            refused = _original(self, by_plan)
            _seen[0] += sum(len(events) for events in by_plan.values())
            if _seen[0] >= int(_at):
                os.kill(os.getpid(), signal.SIGKILL)  # right after the event is durable
            return refused

        _eventlog.BatchedEventLog._commit = _commit
    """)

WIDTH = 4


def graph_text(root: Path) -> str:
    return fan_out_plan(root, width=WIDTH, seconds=0.05, name="crashed")


@dataclass
class Tally:
    """What a campaign did and found."""

    plans: int = 0
    kills: int = 0
    resumes: int = 0
    elsewhere: int = 0
    """Resumes on a host other than the one that worked last."""
    refused_elsewhere: int = 0
    """Resumes another host refused (work after the last round, only where it was done)."""
    violations: list[str] = field(default_factory=list)


class Campaign:
    def __init__(self, folder: Path, database: str) -> None:
        self.folder = folder
        self.database = database
        hooks = folder / "hooks"
        hooks.mkdir(parents=True, exist_ok=True)
        (hooks / "sitecustomize.py").write_text(HOOK)
        self.hooks = hooks

    def gategraph(
        self, host: str, *args: str, kill: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        tmp = self.folder / host / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "GATEGRAPH_HOME": str(self.folder / host / "home"),
            "TMPDIR": str(tmp),
            "GATEGRAPH_DATABASE": self.database,
            "PYTHONPATH": os.pathsep.join(
                [str(self.hooks), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        env.pop("GG_KILL_EVENT", None)
        if kill is not None:
            env["GG_KILL_EVENT"] = str(kill)
        return subprocess.run(
            [sys.executable, "-m", "gategraph.runtime._cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def events(self, plan_id: str) -> list[dict[str, Any]]:
        done = self.gategraph("observer", "events", plan_id, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else []

    def one(self, kill_at: int, rng: random.Random, tally: Tally) -> None:
        """Kill a run after its ``kill_at``-th event, then resume until done."""
        plan_id = f"crash-{kill_at}-{rng.randrange(1 << 30):x}"
        root = self.folder / plan_id / "repo"
        (root / "src").mkdir(parents=True)
        (root / "src" / "app.py").write_text("x = 1\n")
        graph = self.folder / plan_id / "plan.yaml"
        graph.write_text(graph_text(root))
        tally.plans += 1
        hosts = [f"{plan_id}-a", f"{plan_id}-b", f"{plan_id}-c"]
        worked = hosts[0]
        run = self.gategraph(worked, "run", str(graph), "--plan-id", plan_id, kill=kill_at)
        resumes = 0
        if run.returncode == -signal.SIGKILL:
            tally.kills += 1
        elif run.returncode != 0:
            tally.violations.append(f"{plan_id}: the run exited {run.returncode}: {run.stderr}")
            return
        else:
            resumes = -1  # it finished before the kill point: nothing to resume
        while resumes >= 0:
            resumes += 1
            if resumes > 12:
                tally.violations.append(f"{plan_id}: not done after 12 resumes")
                return
            elsewhere = [h for h in hosts if h != worked]
            host = rng.choice(elsewhere)
            # Killed again during the resume, at a random point, half of the time.
            kill = rng.randint(1, 12) if rng.random() < 0.5 else None
            done = self.gategraph(host, "resume", plan_id, kill=kill)
            tally.resumes += 1
            if done.returncode == 1 and "only there" in done.stderr:
                tally.refused_elsewhere += 1
                host = worked  # work after the last round: only the host that did it
                done = self.gategraph(host, "resume", plan_id, kill=kill)
                tally.resumes += 1
            else:
                tally.elsewhere += 1
            if done.returncode == -signal.SIGKILL:
                tally.kills += 1
                worked = host
                continue
            if done.returncode != 0:
                said = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
                tally.violations.append(
                    f"{plan_id}: resume on {host} exited {done.returncode}: {' | '.join(said)}"
                )
                return
            break
        self.check(plan_id, root, tally)

    def check(self, plan_id: str, root: Path, tally: Tally) -> None:
        events = self.events(plan_id)
        found = [e["type"] for e in events]
        problems = []
        if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
            problems.append("seqs are not 1..n")
        if found.count("apply_completed") != 1:
            problems.append(f"applied {found.count('apply_completed')} times")
        if found[-1:] != ["plan_finished"] or events[-1].get("status") != "applied":
            problems.append(f"ends with {found[-1:]}")
        completed: Counter[tuple[int, str]] = Counter()
        current = 0
        for event in events:
            if event["type"] == "artifact_validation_started":
                current = event["round"]
            elif event["type"] == "validation_completed":
                completed[(current, event["node"])] += 1
        if set(completed.values()) != {1}:
            twice = sorted(k for k, v in completed.items() if v != 1)
            problems.append(f"validations completed more than once: {twice}")
        greet = root / "src" / "greet.py"
        if not greet.is_file() or not greet.read_text().startswith("def greet(name):"):
            problems.append("the fixed file is not in place")
        replay = self.gategraph("observer", "replay", plan_id)
        if replay.returncode != 0 or "all match" not in replay.stdout:
            problems.append(f"replay: {replay.stdout.strip()} {replay.stderr.strip()}")
        tally.violations += [f"{plan_id}: {p}" for p in problems]

    def events_of_a_clean_run(self) -> int:
        tally = Tally()
        probe = self.folder / "probe"
        (probe / "repo" / "src").mkdir(parents=True)
        (probe / "repo" / "src" / "app.py").write_text("x = 1\n")
        (probe / "plan.yaml").write_text(graph_text(probe / "repo"))
        done = self.gategraph("probe-host", "run", str(probe / "plan.yaml"), "--plan-id", "probe")
        assert done.returncode == 0, done.stderr
        self.check("probe", probe / "repo", tally)
        assert not tally.violations, tally.violations
        return len(self.events("probe"))


def campaign(database: str, points: list[int] | None = None, seed: int = 0) -> Tally:
    """Kill a run after each of ``points`` events (default: every event of a clean run)."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="gategraph-crashes-") as scratch:
        runs = Campaign(Path(scratch), database)
        total = runs.events_of_a_clean_run()
        tally = Tally()
        for k in points or range(1, total + 1):
            runs.one(k, rng, tally)
        return tally


if __name__ == "__main__":
    found = campaign(sys.argv[1], seed=int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(json.dumps(found.__dict__, indent=2))
