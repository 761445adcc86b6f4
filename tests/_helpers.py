"""Helpers several test modules share: graphs from indented text, modules of test tools."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gategraph.runtime._definitions._graph import load_graph

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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


def run_process(
    command: Sequence[str | os.PathLike[str]], *, timeout: float = 120, **options: Any
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in a process of its own, its output captured as text; a process that
    never ends fails the test (``timeout`` is a deadline for a hang, never for speed)."""
    options.setdefault("check", False)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **options)


def python_prints(code: str) -> str:
    """What ``python -c CODE`` prints (stripped), in a fresh interpreter; it must succeed."""
    return run_process([sys.executable, "-c", code], check=True).stdout.strip()


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    """``root`` holding ``files`` (relative path to text), folders made as needed."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def running(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                continue
    return found


def assert_gone(marker: str) -> None:
    """Every process whose command line holds ``marker`` ends (a deadline for a hang: a
    loaded machine may take seconds to reap one)."""
    deadline = time.monotonic() + 60
    while running(marker):
        if time.monotonic() > deadline:
            raise AssertionError(f"still running: {running(marker)}")
        time.sleep(0.05)


def suite_plan(folder: Path, project: Path, validation: str = "pytest_suite") -> Path:
    """``folder/plan.yaml``: one node that runs ``validation`` (and what follows it in the
    node's mapping) on the folder ``project``."""
    path = folder / "plan.yaml"
    path.write_text(
        textwrap.dedent(f"""\
            version: 1
            name: suite
            resources:
              repo: {{kind: directory, path: "{project}"}}
            nodes:
              - {{id: tests, validation: {validation}, resources: [repo]}}
            """)
    )
    return path


def run_gategraph(
    home: Path,
    *args: str,
    cwd: Path,
    pythonpath: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m gategraph.runtime ARGS`` as a user would, in a process of its own."""
    return run_process(
        [sys.executable, "-m", "gategraph.runtime", *args],
        env=cli_env(home, pythonpath, env),
        cwd=cwd,
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


def _envelope(
    verdict: str, plan_id: str, who: str, found: list[Any], **more: Any
) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "taskId": plan_id,
        "validatorId": who,
        "findings": found,
        **more,
        f"{verdict}edAt": now(),
        "schemaVersion": "1",
    }


def attestation(
    plan_id: str, acs: list[dict[str, Any]], who: str = "validator-eve"
) -> dict[str, Any]:
    """An attestation of every criterion in ``acs``, as ``who``."""
    return _envelope("attest", plan_id, who, findings(acs))


def rejection(
    plan_id: str, acs: list[dict[str, Any]], who: str = "validator-mallory"
) -> dict[str, Any]:
    """A rejection, as ``who``: the first criterion fails."""
    found = findings(acs[:1], "fail") + findings(acs[1:])
    summary = "the first criterion does not hold"
    return _envelope("reject", plan_id, who, found, summary=summary)


def validation_completed(plan: str, seq: int, passed: bool = True) -> Any:
    """A plan's ``validation_completed`` event at ``seq``, as a log stores it."""
    from gategraph.runtime import ValidationCompleted, ValidationResult, new_ulid

    if passed:
        result, duration = ValidationResult(True, "ok", {}), 0.1
    else:
        result, duration = ValidationResult(False, "bad", {"error": "timeout"}), 0.5
    return ValidationCompleted(
        id=new_ulid(),
        plan_id=plan,
        seq=seq,
        at=1.0,
        node="n",
        validation="v",
        result=result,
        duration=duration,
    )


def git(folder: Path, *arguments: str) -> str:
    """What ``git ARGUMENTS`` prints in ``folder`` (as a user of no name commits); it must
    succeed."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments],
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
