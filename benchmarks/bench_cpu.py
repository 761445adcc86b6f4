"""CPU-bound sync validations, run in worker threads and in worker processes.

    python benchmarks/bench_cpu.py [--quick] [--n 100,400]

Each validation is :func:`spin`, a pure-Python loop of about 20 ms that holds the GIL.
``cpu-thread`` runs it with ``isolation: thread`` (the default for sync validations),
``cpu-process`` with ``isolation: process`` (anyio's worker processes, one per core). The
baselines offload the same function the same way: ``asyncio.to_thread`` or a spawn-context
``ProcessPoolExecutor`` with one worker per core under gather (and LangGraph, whose nodes
await it), ``anyio.to_thread`` / ``anyio.to_process`` in the task group.

``one_core`` is the honest single-core baseline: the same N calls run one after the other
in this process, in the same rounds as the others. Target (issue 5): with process isolation,
at least 1.7x its throughput on two cores (``extra.speedup_vs_one_core``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_process
import anyio.to_thread
from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import engine, fanout_graph
from gategraph.benchmarks.harness import Contender, Sample, Scenario

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Case

__all__ = ["CPU_ROUNDS", "SCENARIOS", "build_process", "build_thread", "spin"]

CPU_ROUNDS = 400_000
"""Loop rounds per call: about 20 ms on a 2020s x86-64 core, like a real CPU-bound check
(parsing or linting a file), long enough that handing a call to a worker process
(pickling, a pipe, the parent's own share of the cores) is a small part of it. At about
5 ms a call (100,000 rounds) that hand-off costs ~0.5 ms and process isolation reaches
~1.65x one core on two cores, not 1.7x."""

SPIN = "gategraph.benchmarks.bench_cpu:spin"


def spin(rounds: int = CPU_ROUNDS) -> dict[str, Any]:
    """Burn CPU in pure Python (holding the GIL), then pass."""
    total = 0
    for i in range(rounds):
        total += i * i % 7
    return {"passed": True, "message": f"spun {rounds} rounds ({total})"}


def one_core(n: int) -> Contender:
    """The same N calls, one after another, in this process: one core's throughput."""

    async def run() -> Sample:
        started = time.perf_counter()
        for _ in range(n):
            spin(CPU_ROUNDS)
        return Sample(time.perf_counter() - started)

    return Contender("one_core", run)


def _build(
    case: Case, stack: contextlib.ExitStack, names: Collection[str], isolation: str
) -> dict[str, Contender]:
    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    if "gategraph" in names:
        graph = fanout_graph(n, entrypoint=SPIN, arguments={"rounds": CPU_ROUNDS}, concurrency=c)
        built["gategraph"] = engine(graph, n=n, concurrency=c, isolation=isolation)
    if "one_core" in names:
        built["one_core"] = one_core(n)
    if isolation == "thread":

        def on_asyncio(i: int) -> Any:
            return asyncio.to_thread(spin, CPU_ROUNDS)

        def on_anyio(i: int) -> Any:
            return anyio.to_thread.run_sync(spin, CPU_ROUNDS)

    else:
        # Spawned like anyio's workers (a fresh interpreter), one per core; it lives as
        # long as the case, and is shut down with it.
        pool = stack.enter_context(
            ProcessPoolExecutor(os.cpu_count(), mp_context=multiprocessing.get_context("spawn"))
        )

        def on_asyncio(i: int) -> Any:
            return asyncio.get_running_loop().run_in_executor(pool, spin, CPU_ROUNDS)

        def on_anyio(i: int) -> Any:
            return anyio.to_process.run_sync(spin, CPU_ROUNDS)

    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, on_asyncio, c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, on_anyio, c)
    if "langgraph" in names:
        built["langgraph"] = baselines.langgraph(n, on_asyncio, c)
    return built


def build_thread(
    case: Case, stack: contextlib.ExitStack, names: Collection[str]
) -> dict[str, Contender]:
    """The contenders of N CPU-bound calls in worker threads."""
    return _build(case, stack, names, "thread")


def build_process(
    case: Case, stack: contextlib.ExitStack, names: Collection[str]
) -> dict[str, Contender]:
    """The contenders of N CPU-bound calls in worker processes."""
    return _build(case, stack, names, "process")


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    engine_walls = [s.wall for s in samples.get("gategraph", ())]
    serial = [s.wall for s in samples.get("one_core", ())]
    if not engine_walls or not serial:
        return {"speedup_vs_one_core": None, "one_core_ms_per_call": None, "cpus": os.cpu_count()}
    return {
        "speedup_vs_one_core": statistics.median(serial) / statistics.median(engine_walls),
        "one_core_ms_per_call": statistics.median(serial) / case.n * 1000,
        "cpus": os.cpu_count(),
    }


_CONTENDERS = ("gategraph", "asyncio_gather", "anyio_taskgroup", "langgraph", "one_core")

SCENARIOS = (
    Scenario(
        name="cpu-thread",
        title="CPU-bound sync validations (~20 ms each), thread isolation",
        build=build_thread,
        contenders=_CONTENDERS,
        sizes=(10, 40, 100),
        quick_sizes=(10,),
        extra=_extra,
        notes=("threads share the GIL: expect about one core's throughput",),
    ),
    Scenario(
        name="cpu-process",
        title="CPU-bound sync validations (~20 ms each), process isolation",
        build=build_process,
        contenders=_CONTENDERS,
        sizes=(10, 40, 100),
        quick_sizes=(20,),
        extra=_extra,
        notes=(
            "peak RSS is the parent's only (the worker processes are not counted)",
            "LangGraph has no process isolation: its node awaits the gather baseline's pool",
        ),
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("cpu-thread", "cpu-process")
