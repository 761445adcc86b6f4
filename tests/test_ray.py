"""The Ray executor, against a local Ray instance: validation calls run as Ray tasks in
Ray's worker processes, under the same read-only guard, with timeouts and failures as on
this machine. Skipped when Ray is not installed (``pip install -e ".[ray]"``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _plans import GOOD, plan, repo
from gategraph.runtime import MemoryEventLog, execute_graph, load_graph
from gategraph.runtime._maxn import InMemoryAuditLog
from gategraph.runtime._supervisor import PlanStatus, RayExecutor, resume_plan, run_plan

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def graph_of(nodes: str, root: Path) -> Any:
    return load_graph(f"""
version: 1
name: on-ray
resources: {{repo: {{kind: directory, path: "{root}"}}}}
validations:
  - {{name: where, entrypoint: "gategraph.runtime.testing:whereami"}}
  - {{name: nap, entrypoint: "gategraph.runtime.testing:sleeping"}}
  - {{name: boom, entrypoint: "gategraph.runtime.testing:raising"}}
  - {{name: scribble, entrypoint: "gategraph.runtime.testing:writing", resource_slots: [root]}}
  - name: inline
    code: "def run(**_):\\n    import os\\n    return {{'passed': True, 'data': {{'pid': os.getpid()}}}}\\n"
nodes:
{nodes}
""")


async def test_validations_run_as_ray_tasks(tmp_path: Path) -> None:
    nodes = "\n".join(
        [f"  - {{id: w{i}, validation: where}}" for i in range(4)]
        + ["  - {id: nap, validation: nap, arguments: {seconds: 0.01}}"]
        + ["  - {id: inline, validation: inline}"]
    )
    run = await execute_graph(graph_of(nodes, repo(tmp_path)), isolation="ray")
    results = {r.node: r.result for r in run.validations}
    assert all(r.passed for r in results.values()), results
    pids = {results[f"w{i}"].data["pid"] for i in range(4)} | {results["inline"].data["pid"]}
    assert os.getpid() not in pids  # not this process: Ray's workers
    assert results["nap"].message == "slept 0.01 s"  # an async validation, on Ray too


async def test_failures_on_ray_are_the_usual_ones(tmp_path: Path) -> None:
    """An exception, a write (the read-only guard holds in the Ray worker) and a timeout
    (the Ray task is cancelled) fail their validations as they would locally."""
    root = repo(tmp_path)
    nodes = "\n".join(
        [
            "  - {id: boom, validation: boom}",
            "  - {id: scribble, validation: scribble}",
            "  - {id: slow, validation: nap, arguments: {seconds: 30}, timeout: 1}",
        ]
    )
    run = await execute_graph(graph_of(nodes, root), isolation="ray")
    errors = {r.node: r.result.data.get("error") for r in run.validations}
    assert errors == {
        "boom": "exception",
        "scribble": "read_only_violation",
        "slow": "timeout",
    }, {r.node: r.result.message for r in run.validations}
    assert not (root / "written-by-validation.txt").exists()
    boom = next(r for r in run.validations if r.node == "boom")
    assert "RuntimeError: raised on purpose" in boom.result.message


async def test_a_plan_on_ray_is_applied_and_resumes_on_ray(tmp_path: Path) -> None:
    root = repo(tmp_path)
    log = MemoryEventLog()
    text = plan(root, [GOOD])
    outcome = await run_plan(
        load_graph(text), event_log=log, executor=RayExecutor(), audit=InMemoryAuditLog()
    )
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    started = (await log.read(outcome.plan_id))[0]
    assert started.options["executor"] == {"kind": "ray", "address": None}
    again = await resume_plan(outcome.plan_id, load_graph(text), event_log=log)
    assert again.status is PlanStatus.APPLIED


def test_gategraph_run_on_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gategraph run --ray local` runs the plan's validations on Ray (connected already
    here: the command reuses the connection)."""
    from click.testing import CliRunner
    from gategraph.runtime._cli import cli

    root = repo(tmp_path)
    graph = tmp_path / "plan.yaml"
    graph.write_text(plan(root, [GOOD]))
    monkeypatch.setenv("GATEGRAPH_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(cli, ["run", str(graph), "--ray", "local", "--json"])
    assert result.exit_code == 0, result.output
    assert '"status":"applied"' in result.stdout.replace(" ", "")
