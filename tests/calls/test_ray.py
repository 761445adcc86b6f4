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
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._lifecycle._executors import RayExecutor
from gategraph.runtime._lifecycle._supervisor import PlanStatus, resume_plan, run_plan

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


async def _cpus_back(total: float, within: float = 30.0) -> bool:
    """Whether every CPU of the local instance is free again (polled: a killed worker
    process gives its CPU back a moment after ``ray.cancel``)."""
    import anyio

    for _ in range(int(within / 0.01)):
        if ray.available_resources().get("CPU", 0.0) >= total:
            return True
        await anyio.sleep(0.01)
    return False


async def test_what_a_validation_reads_reaches_the_ray_workers(tmp_path: Path) -> None:
    """A directory resource is read where the Ray task runs (a local instance shares this
    machine's files): the syntax check finds the broken file there."""
    root = repo(tmp_path)
    (root / "src" / "broken.py").write_text("def f(:\n")
    graph = load_graph(f"""
version: 1
name: reads-on-ray
resources: {{repo: {{kind: directory, path: "{root}"}}}}
validations:
  - {{name: syntax, entrypoint: "gategraph.validators:python_syntax", resource_slots: [root]}}
nodes:
  - {{id: syntax, validation: syntax}}
""")
    run = await execute_graph(graph, isolation="ray")
    (record,) = run.validations
    assert record.isolation == "ray"
    assert not record.result.passed
    assert "broken.py" in record.result.message, record.result.message


async def test_a_timeout_and_a_cancelled_run_both_end_the_remote_tasks(tmp_path: Path) -> None:
    """The Ray task itself is cancelled, not only the wait for it: its worker process
    ends and gives its CPU back, whether the validation timed out or the whole run was
    cancelled from outside."""
    total = ray.cluster_resources()["CPU"]
    nodes = "\n".join(
        f"  - {{id: nap{i}, validation: nap, arguments: {{seconds: 60}}, timeout: 0.5}}"
        for i in range(2)
    )
    root = repo(tmp_path)
    run = await execute_graph(graph_of(nodes, root), isolation="ray")
    assert {r.result.data.get("error") for r in run.validations} == {"timeout"}
    assert await _cpus_back(total)
    # Cancelled from outside, long before the validations' own timeouts.
    import anyio

    long = "  - {id: nap, validation: nap, arguments: {seconds: 60}, timeout: 120}"
    with anyio.move_on_after(2) as scope:
        await execute_graph(graph_of(long, root), isolation="ray")
    assert scope.cancelled_caught
    assert await _cpus_back(total)


async def test_many_tasks_at_once_share_one_waiter_which_then_ends(tmp_path: Path) -> None:
    import threading

    import anyio

    nodes = "\n".join(f"  - {{id: w{i}, validation: where}}" for i in range(40))
    run = await execute_graph(graph_of(nodes, repo(tmp_path)), isolation="ray")
    assert len(run.validations) == 40
    assert all(r.result.passed for r in run.validations)
    # Nothing left to wait for: the waiter's thread has ended (it ends by itself).
    for _ in range(1000):  # 10 s at most
        if not any(t.name == "gategraph-ray-waiter" for t in threading.enumerate()):
            break
        await anyio.sleep(0.01)
    else:
        raise AssertionError("the Ray waiter thread did not end")


async def test_ray_failing_while_waiting_fails_the_validations_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If Ray itself fails (its cluster gone), every validation waiting on it fails with
    Ray's error rather than waiting for good."""

    def gone(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the Ray cluster went away")

    monkeypatch.setattr(ray, "wait", gone)
    nodes = "\n".join(f"  - {{id: w{i}, validation: where}}" for i in range(3))
    run = await execute_graph(graph_of(nodes, repo(tmp_path)), isolation="ray")
    assert [r.result.passed for r in run.validations] == [False] * 3
    assert all("the Ray cluster went away" in r.result.message for r in run.validations)


def test_the_ray_benchmark_measures_overhead_crossover_and_cancellation() -> None:
    """`gategraph bench --scenario ray`, tiny: every figure is there (none is asserted)."""
    from gategraph.benchmarks.bench_ray import measure_ray
    from gategraph.benchmarks.harness import Settings

    report = measure_ray(Settings(quick=True, repeats=1, sizes=(6,), rss=False))
    overhead = report["overhead"]
    assert overhead["n"] == 6 and overhead["ratio"] > 0
    assert set(overhead["per_validation_us"]) == {"gategraph_ray", "ray_tasks"}
    assert [row["call_ms"] for row in report["crossover"]["costs"]] == [0, 5]
    assert all(row["ray_vs_process"] > 0 for row in report["crossover"]["costs"])
    cancel = report["cancellation"]
    assert cancel["errors"] == ["timeout"]
    assert cancel["cpus_released_after_s"] is not None


async def test_an_outcome_of_a_class_defined_in_inline_code_comes_back_from_ray() -> None:
    """What a call returns crosses as Ray's own task results do (cloudpickle): a result
    of a class its inline code defines, which no module here could import."""
    graph = load_graph("""
version: 1
name: own-class
validations:
  - name: own
    code: "class Result(dict):\\n    pass\\n\\ndef run(**_):\\n    return Result(passed=True, message='mine')\\n"
nodes:
  - {id: own, validation: own}
""")
    run = await execute_graph(graph, isolation="ray")
    (record,) = run.validations
    assert record.result.passed and record.result.message == "mine", record.result
