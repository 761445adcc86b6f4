"""Helpers several test modules share: graphs from indented text, modules of test tools."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
import types
from typing import TYPE_CHECKING, Any

from gategraph.runtime._definitions._graph import load_graph

if TYPE_CHECKING:
    from pathlib import Path

    import pytest
    from gategraph.runtime._definitions._graph import PlanGraph


def graph(text: str) -> PlanGraph:
    """Load a graph written as an indented YAML block."""
    return load_graph(textwrap.dedent(text).strip() + "\n")


def fake_module(monkeypatch: pytest.MonkeyPatch, name: str, **attrs: Any) -> str:
    """Install a module of test tools (removed after the test) and return its name."""
    module = types.ModuleType(name)
    for key, value in attrs.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def cli_env(
    home: Path, pythonpath: Path | None = None, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """This process's environment for a gategraph process of its own: its home (catalog,
    event log) at ``home``, ``pythonpath`` first on its path, and ``extra`` set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEGRAPH_")}
    env["GATEGRAPH_HOME"] = str(home)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    env.update(extra or {})
    return env


def run_gategraph(
    home: Path,
    *args: str,
    cwd: Path,
    pythonpath: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m gategraph.runtime ARGS`` as a user would, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "gategraph.runtime", *args],
        capture_output=True,
        text=True,
        env=cli_env(home, pythonpath, env),
        cwd=cwd,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def plugin_project(tmp_path: Path, text: str) -> Path:
    """A project folder holding ``app.py`` and a plan graph that runs the test plugin's
    ``no_todo`` validation on it; returns the graph's path."""
    (tmp_path / "repo").mkdir(exist_ok=True)
    (tmp_path / "repo" / "app.py").write_text(text)
    graph = tmp_path / "plan.yaml"
    graph.write_text(
        "version: 1\nname: plugged\nresources: {repo: {kind: directory, path: repo}}\n"
        "nodes:\n  - {id: todo, validation: no_todo}\n"
    )
    return graph


# What an outside validator sends: its role, an attestation and a rejection of a plan.
VALIDATOR = {"role": "validator"}


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def findings(acs: list[dict[str, Any]], status: str = "pass") -> list[dict[str, Any]]:
    return [
        {
            "acId": ac["id"],
            "status": status,
            "reasoning": f"checked {ac['alias']}",
            "checkedAt": now(),
        }
        for ac in acs
    ]


def attestation(
    plan_id: str, acs: list[dict[str, Any]], who: str = "validator-eve"
) -> dict[str, Any]:
    return {
        "verdict": "attest",
        "taskId": plan_id,
        "validatorId": who,
        "findings": findings(acs),
        "attestedAt": now(),
        "schemaVersion": "1",
    }


def rejection(
    plan_id: str, acs: list[dict[str, Any]], who: str = "validator-mallory"
) -> dict[str, Any]:
    return {
        "verdict": "reject",
        "taskId": plan_id,
        "validatorId": who,
        "findings": findings(acs[:1], "fail") + findings(acs[1:]),
        "summary": "the first criterion does not hold",
        "rejectedAt": now(),
        "schemaVersion": "1",
    }
