"""The Ray executor, measured against Ray itself and against local process isolation.

    python benchmarks/bench_ray.py [--quick] [--repeat 5]

Needs the ``ray`` extra (``pip install 'gategraph[ray]'``); without it the report says so.
A local Ray instance is started with one CPU per core (or the one this process is
connected to already is used). Three measures:

- ``overhead``: N no-op validations (:func:`gategraph.benchmarks.bench_cpu.spin` with no
  rounds) with ``isolation: ray``, against bare Ray tasks running the same function
  (``ray.get`` of N ``remote`` calls, the way Ray is used without gategraph). Both run
  every call at once; the figure is µs per validation, and ``ratio`` the first over the
  second. Target (issue 16): at most 1.2x.
- ``crossover``: the same validations doing CPU work of 0 to 20 ms a call (``spin``), 4
  calls per core, with ``isolation: ray`` and with ``isolation: process`` (anyio's worker
  processes, one per core): µs per call of each, and the first call cost at which Ray is
  as fast as process isolation on this machine (``None``: not within the costs measured).
  On one machine Ray adds no cores, only its own scheduling; it pays off once the cluster
  has machines this one lacks.
- ``cancellation``: one validation per core that would sleep 30 s, with a 0.5 s timeout:
  the run's wall time, that each ended as a timeout, and how long after the run the Ray
  workers gave their CPUs back (the tasks were cancelled with ``ray.cancel(force=True)``,
  so their processes ended).

Interleaved repeats after a warm-up, min / median / max, as in every scenario.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
from gategraph.benchmarks.bench_cpu import spin
from gategraph.benchmarks.fanout import fanout_graph
from gategraph.benchmarks.harness import Contender, Sample, interleave, spread

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gategraph.benchmarks.harness import Settings
    from gategraph.runtime._calls._invoke import Isolation

__all__ = ["measure_ray", "ray_unavailable"]

SPIN: Final = "gategraph.benchmarks.bench_cpu:spin"
ROUNDS_PER_MS: Final = 20_000
"""``spin`` rounds per millisecond, about (``bench_cpu.CPU_ROUNDS`` is ~20 ms)."""
N: Final = 200
QUICK_N: Final = 40
COSTS_MS: Final = (0, 1, 5, 20)
QUICK_COSTS_MS: Final = (0, 5)
CALLS_PER_CORE: Final = 4
TIMEOUT: Final = 0.5
RELEASE_WAIT: Final = 30.0
"""Seconds the cancellation measure waits for Ray's CPUs to come back before it says
they did not."""


def ray_unavailable() -> str | None:
    """Why the Ray measures cannot run here, or ``None``."""
    if importlib.util.find_spec("ray") is None:
        return "Ray is not installed (pip install 'gategraph[ray]')"
    return None


@contextlib.contextmanager
def _local_ray(cpus: int) -> Iterator[Any]:
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def _engine(n: int, rounds: int, isolation: Isolation, name: str) -> Contender:
    from gategraph.runtime import MemoryEventLog, execute_graph

    graph = fanout_graph(n, entrypoint=SPIN, arguments={"rounds": rounds}, concurrency=n)

    async def run() -> Sample:
        started = time.perf_counter()
        result = await execute_graph(
            graph, event_log=MemoryEventLog(), max_concurrency=n, isolation=isolation
        )
        wall = time.perf_counter() - started
        passed = sum(1 for r in result.validations if r.result.passed)
        if passed != n:
            first = next((r.result.message for r in result.validations if not r.result.passed), "")
            raise AssertionError(f"{name}: {passed} of {n} validations passed ({first})")
        return Sample(wall)

    return Contender(name, run)


def _bare(ray: Any, n: int, rounds: int) -> Contender:
    task = ray.remote(max_retries=0)(spin)

    def all_at_once() -> list[Any]:
        return list(ray.get([task.remote(rounds) for _ in range(n)]))

    async def run() -> Sample:
        started = time.perf_counter()
        # In a worker thread, so this loop stays free: one hop per sample, not per task.
        results = await anyio.to_thread.run_sync(all_at_once)
        wall = time.perf_counter() - started
        if sum(1 for r in results if r["passed"]) != n:
            raise AssertionError(f"ray_tasks: not every one of {n} tasks passed")
        return Sample(wall)

    return Contender("ray_tasks", run)


def _per_call_us(samples: list[Sample], n: int) -> dict[str, float]:
    return spread([s.wall / n * 1e6 for s in samples])


async def _overhead(ray: Any, n: int, repeats: int) -> dict[str, Any]:
    contenders = [_engine(n, 0, "ray", "gategraph_ray"), _bare(ray, n, 0)]
    samples, _ = await interleave(contenders, repeats, False)
    figures = {name: _per_call_us(runs, n) for name, runs in samples.items()}
    return {
        "n": n,
        "repeats": repeats,
        "per_validation_us": figures,
        "ratio": figures["gategraph_ray"]["median"] / figures["ray_tasks"]["median"],
    }


async def _crossover(costs: tuple[int, ...], cpus: int, repeats: int) -> dict[str, Any]:
    n = CALLS_PER_CORE * cpus
    rows: list[dict[str, Any]] = []
    for cost in costs:
        rounds = cost * ROUNDS_PER_MS
        contenders = [
            _engine(n, rounds, "process", "gategraph_process"),
            _engine(n, rounds, "ray", "gategraph_ray"),
        ]
        samples, _ = await interleave(contenders, repeats, False)
        figures = {name: _per_call_us(runs, n) for name, runs in samples.items()}
        rows.append(
            {
                "call_ms": cost,
                "per_call_us": figures,
                "ray_vs_process": figures["gategraph_ray"]["median"]
                / figures["gategraph_process"]["median"],
            }
        )
    crossover = next((row["call_ms"] for row in rows if row["ray_vs_process"] <= 1.0), None)
    return {"calls": n, "repeats": repeats, "costs": rows, "crossover_call_ms": crossover}


async def _cancellation(ray: Any, cpus: int) -> dict[str, Any]:
    from gategraph.runtime import MemoryEventLog, execute_graph, load_graph

    graph = load_graph(
        {
            "version": 1,
            "name": "ray-cancellation",
            "validations": [{"name": "nap", "entrypoint": "gategraph.runtime.testing:sleeping"}],
            "nodes": [
                {"id": f"nap{i}", "validation": "nap", "arguments": {"seconds": 30}}
                for i in range(cpus)
            ],
            "policy": {"default_timeout": TIMEOUT, "max_concurrency": cpus},
        }
    )
    total = float(ray.cluster_resources().get("CPU", 0.0))
    started = time.perf_counter()
    result = await execute_graph(graph, event_log=MemoryEventLog(), isolation="ray")
    wall = time.perf_counter() - started
    ended = time.perf_counter()
    released: float | None = None
    while time.perf_counter() - ended < RELEASE_WAIT:
        if ray.available_resources().get("CPU", 0.0) >= total:
            released = time.perf_counter() - ended
            break
        await anyio.sleep(0.005)
    errors = sorted({str(r.result.data.get("error")) for r in result.validations})
    return {
        "tasks": cpus,
        "timeout_s": TIMEOUT,
        "wall_s": wall,
        "errors": errors,
        "cpus_released_after_s": released,
    }


def measure_ray(settings: Settings) -> dict[str, Any]:
    """The three measures, or why they could not run (``not_measured``)."""
    missing = ray_unavailable()
    if missing is not None:
        return {"not_measured": missing}
    quick = settings.quick
    repeats = settings.repeats or (3 if quick else 5)
    n = settings.sizes[0] if settings.sizes else (QUICK_N if quick else N)
    cpus = os.cpu_count() or 1

    async def main() -> dict[str, Any]:
        with _local_ray(cpus) as ray:
            return {
                "cpus": cpus,
                "ray": ray.__version__,
                "overhead": await _overhead(ray, n, repeats),
                "crossover": await _crossover(QUICK_COSTS_MS if quick else COSTS_MS, cpus, repeats),
                "cancellation": await _cancellation(ray, cpus),
            }

    return anyio.run(main)


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("ray")
