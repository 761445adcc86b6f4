"""Plans the supervisor and replay tests share: a tiny repository and a scripted plan."""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

SYNTAX = "gategraph.validators:python_syntax"
GOOD = "def greet(name):\\n    return 'hello ' + name\\n"
BAD = "def greet(name:\\n"


def repo(tmp_path: Path) -> Path:
    """A folder with src/app.py, to be the plan's directory resource."""
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("x = 1\n")
    return root


def plan(root: Path, steps: list[str], **policy: Any) -> str:
    """A plan on ``root``: a required syntax check, an informational one, one criterion,
    and a scripted executor writing src/greet.py with each step's text."""
    step_lines = "\n".join(f'            - files: {{"src/greet.py": "{text}"}}' for text in steps)
    policy_lines = "\n".join(f"  {k}: {v}" for k, v in policy.items())
    return (
        textwrap.dedent(f"""\
        version: 1
        name: greet
        resources: {{repo: {{kind: directory, path: "{root}"}}}}
        validations:
          - name: syntax
            entrypoint: {SYNTAX}
            resource_slots: [root]
          - name: advice
            entrypoint: gategraph.runtime.testing:failing
            mode: informational
        nodes:
          - {{id: syntax, validation: syntax}}
          - {{id: advice, validation: advice}}
        acceptance:
          - {{id: AC1, text: The code parses., validations: [syntax]}}
        lifecycle:
          executor:
            uses: gategraph.runtime.testing:ScriptedExecutor
            arguments:
              steps:
        """)
        + step_lines
        + ("\npolicy:\n" + policy_lines if policy else "")
        + "\n"
    )


def per_round(events: list[Any], tag: str) -> Counter[tuple[int, str]]:
    """How often an event tagged ``tag`` came for each node in each round of validations."""
    found: Counter[tuple[int, str]] = Counter()
    current = 0
    for event in events:
        kind = type(event).__struct_config__.tag
        if kind == "artifact_validation_started":
            current = event.round
        elif kind == tag:
            found[(current, event.node)] += 1
    return found


class WaitingOnTheCli:
    """``gategraph run`` of the shared plan, one outside validator policy: the run stops,
    the plan waits for an attestation."""

    def __init__(self, tmp_path: Path) -> None:
        from _helpers import run_gategraph

        self.root = repo(tmp_path)
        self.graph_file = tmp_path / "plan.yaml"
        self.graph_file.write_text(plan(self.root, [GOOD], outside_validators=1))
        self.home = tmp_path / "home"
        self.ran = run_gategraph(self.home, "run", str(self.graph_file), cwd=tmp_path)
        assert self.ran.returncode == 3, self.ran.stdout + self.ran.stderr
        [self.plan_id] = set(re.findall(r"plan (\S+): awaiting_attestation", self.ran.stdout))


def fan_out_plan(root: Path, *, width: int, seconds: float, name: str = "killed") -> str:
    """A plan that fixes once (BAD, then GOOD) with ``width`` validations that sleep
    ``seconds`` beside its syntax check, two at a time: a fan-out to be killed in."""
    slow = "\n".join(
        f"  - {{id: slow{i}, validation: nap, arguments: {{seconds: {seconds}}}}}"
        for i in range(width)
    )
    return (
        textwrap.dedent(f"""\
        version: 1
        name: {name}
        resources: {{repo: {{kind: directory, path: "{root}"}}}}
        validations:
          - name: syntax
            entrypoint: {SYNTAX}
            resource_slots: [root]
          - name: nap
            entrypoint: gategraph.runtime.testing:sleeping
        nodes:
          - {{id: syntax, validation: syntax}}
        """)
        + slow
        + textwrap.dedent(f"""
        lifecycle:
          executor:
            uses: gategraph.runtime.testing:ScriptedExecutor
            arguments:
              steps:
                - files: {{"src/greet.py": "{BAD}"}}
                - files: {{"src/greet.py": "{GOOD}"}}
        policy:
          max_concurrency: 2
        """)
    )
