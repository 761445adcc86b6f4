"""Sandboxed validations (``isolation: sandbox``) beside process isolation.

    python benchmarks/bench_sandbox.py [--quick] [--n 20,100]

Every validation is :func:`~gategraph.benchmarks.bench_cpu.spin`: ``rounds=0`` for a
no-op (nothing to do: the figure is the cost of a call), the default ~20 ms of pure-Python
CPU work for a CPU-bound one. The same graph, N and concurrency run under each isolation:

- ``gategraph``: CPU-bound, ``isolation: sandbox``; ``gategraph_process``: the same graph,
  ``isolation: process`` (anyio's worker processes, one per core);
- ``gategraph_noop`` and ``gategraph_process_noop``: the no-op graph under each;
- ``one_core``: the same N spins one after another in this process; ``asyncio_gather`` and
  ``anyio_taskgroup``: spin offloaded to a spawn ``ProcessPoolExecutor`` / ``anyio.to_process``
  (as in the ``cpu-process`` scenario).

Fair starts: anyio's worker processes persist across the runs of one event loop, so after the
warm-up round the process contenders run on warm workers. The sandboxed contenders get the
same: one pool (``sandbox_pool``) kept for all their runs, whose workers the warm-up run
starts; each worker loads the validation's code once, and runs every call in a child it
forks for it. Each clock covers the ``execute_graph`` call only.

Figures (``extra``): ``sandbox_vs_process_noop`` and ``sandbox_vs_process_cpu``, the
sandboxed median wall over the process one (per-call time; target: the no-op ratio ≤ 1.2),
``speedup_vs_one_core`` (``one_core``'s median wall over the sandboxed CPU-bound one;
target ≥ 1.7 on two cores), ``process_speedup_vs_one_core`` for comparison, and ``cpus``.
Where this machine cannot sandbox, the sandboxed contenders are skipped and the scenario's
notes and ``extra.sandbox_unavailable`` say what is missing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from gategraph.benchmarks import bench_cpu
from gategraph.benchmarks.bench_cpu import CPU_ROUNDS, SPIN
from gategraph.benchmarks.fanout import engine, fanout_graph
from gategraph.benchmarks.harness import Contender, Sample, Scenario, median_wall

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Case
    from gategraph.runtime import PlanGraph

__all__ = ["SANDBOXED", "build", "sandbox_unavailable", "sandboxed"]

SANDBOXED = ("gategraph", "gategraph_noop")
"""The contenders that need the sandbox."""

_CONTENDERS = (
    "gategraph",
    "gategraph_process",
    "gategraph_noop",
    "gategraph_process_noop",
    "one_core",
    "asyncio_gather",
    "anyio_taskgroup",
)


def sandbox_unavailable() -> str | None:
    """What this machine lacks for the sandbox, or ``None`` when it can sandbox."""
    # Private: the runtime has no public name for its probe of the kernel.
    from gategraph.runtime import sandbox_support

    return sandbox_support().missing


def sandboxed(graph: PlanGraph, *, n: int, concurrency: int, name: str) -> Contender:
    """``execute_graph`` over ``graph`` with ``isolation: sandbox``, inside a pool whose
    workers are started before the clock starts."""
    from gategraph.runtime import sandbox_pool

    timed = engine(graph, n=n, concurrency=concurrency, isolation="sandbox", name=name)

    # One pool for all the contender's runs, as anyio keeps its worker processes for the
    # runs of one event loop: the warm-up run starts its workers, each of which loads the
    # validation's code once; every later call forks from one of them.
    return Contender(name, timed.run, keeps=sandbox_pool)


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of N no-op and N CPU-bound calls, sandboxed and in worker processes
    (the sandboxed ones only where this machine can sandbox)."""
    n, c = case.n, case.concurrency
    wanted = set(names)
    if sandbox_unavailable() is not None:
        wanted -= set(SANDBOXED)
    built: dict[str, Contender] = {}
    cpu = fanout_graph(n, entrypoint=SPIN, arguments={"rounds": CPU_ROUNDS}, concurrency=c)
    noop = fanout_graph(n, entrypoint=SPIN, arguments={"rounds": 0}, concurrency=c)
    if "gategraph" in wanted:
        built["gategraph"] = sandboxed(cpu, n=n, concurrency=c, name="gategraph")
    if "gategraph_noop" in wanted:
        built["gategraph_noop"] = sandboxed(noop, n=n, concurrency=c, name="gategraph_noop")
    if "gategraph_process" in wanted:
        built["gategraph_process"] = engine(
            cpu, n=n, concurrency=c, isolation="process", name="gategraph_process"
        )
    if "gategraph_process_noop" in wanted:
        built["gategraph_process_noop"] = engine(
            noop, n=n, concurrency=c, isolation="process", name="gategraph_process_noop"
        )
    # One core and the two floors: exactly the cpu-process scenario's.
    built |= bench_cpu.build_process(
        case, stack, wanted & {"one_core", "asyncio_gather", "anyio_taskgroup"}
    )
    return built


def _over(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    sandbox_cpu = median_wall(samples, "gategraph")
    process_cpu = median_wall(samples, "gategraph_process")
    serial = median_wall(samples, "one_core")
    # Same N on both sides: the ratio of median walls is the ratio of per-call times.
    return {
        "sandbox_vs_process_noop": _over(
            median_wall(samples, "gategraph_noop"), median_wall(samples, "gategraph_process_noop")
        ),
        "sandbox_vs_process_cpu": _over(sandbox_cpu, process_cpu),
        "speedup_vs_one_core": _over(serial, sandbox_cpu),
        "process_speedup_vs_one_core": _over(serial, process_cpu),
        "cpus": os.cpu_count(),
        "sandbox_unavailable": sandbox_unavailable(),
    }


def _scenario() -> Scenario:
    missing = sandbox_unavailable()
    notes = [
        "gategraph is the CPU-bound graph sandboxed; vs gategraph_process is "
        "sandbox ÷ process per-call time (vs the no-op contenders compares unlike work)",
        "timed: the execute_graph call only. Both kinds of worker are started in the "
        "warm-up round and kept for the case (anyio's process workers; one sandbox pool "
        "per sandboxed contender); a sandboxed call runs in a child its worker forks for it",
        "peak RSS is the parent's only (the worker processes are not counted)",
        "LangGraph has no sandbox: no LangGraph figure here",
    ]
    contenders: tuple[str, ...] = _CONTENDERS
    if missing is not None:
        # The harness lists the engine first whatever runs: its figures stay null.
        contenders = tuple(name for name in _CONTENDERS if name not in SANDBOXED)
        notes.insert(0, f"skipped: the sandboxed contenders, as {missing}")
    return Scenario(
        name="sandbox",
        title="sandboxed validations beside process isolation: no-op and CPU-bound (~20 ms)",
        build=build,
        contenders=contenders,
        sizes=(20, 100),
        quick_sizes=(20,),
        extra=_extra,
        notes=tuple(notes),
    )


def __getattr__(name: str) -> Any:
    # Built when the harness asks (PEP 562), not at import: what this machine can sandbox
    # decides the contenders, and a test can change that answer.
    if name == "SCENARIOS":
        return (_scenario(),)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("sandbox")
