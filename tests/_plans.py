"""Plans the supervisor and replay tests share: a tiny repository and a scripted plan."""

from __future__ import annotations

import textwrap
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
