"""The whole lifecycle (``run_plan``) beside the engine alone, on N no-op validations.

    python benchmarks/bench_plan.py [--quick] [--n 1000,10000]

A plan runs Strategize → Execute (the validations fanned out through the four layers of the
pipeline) → the verdict → Apply. Here the plan's one resource is a memory resource with one
file, there is no work to do, and its N validation nodes are the no-op
``gategraph.runtime.testing:passing``, so what is measured is what the supervisor adds to
the engine:

- ``gategraph``: ``run_plan`` with a fresh ``MemoryEventLog`` per run;
- ``gategraph_sqlite``: the same with a fresh ``SQLiteEventLog`` file per run, opened before
  the clock starts and closed (every event committed) before it stops;
- ``gategraph_engine``: ``execute_graph`` over the same graph, a fresh ``MemoryEventLog``
  per run (the engine alone: the fan-out, its events and records);
- ``asyncio_gather`` and ``anyio_taskgroup``: the no-op floors.

Every run is checked: the plan applied, every validation ran and passed.

Figures (``extra``): ``plan_vs_engine``, the lifecycle's median wall over the engine's (per
validation, lower is better; target: ≤ 1.5 at N=10,000), and ``plan_sqlite_vs_engine``.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import NOOP, engine
from gategraph.benchmarks.harness import Contender, Sample, Scenario, median_wall

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Case
    from gategraph.runtime import EventLog, PlanGraph

__all__ = ["SCENARIOS", "build", "plan_graph"]


def plan_graph(n: int, concurrency: int) -> PlanGraph:
    """N no-op validation nodes over a plan whose one resource is a small memory one."""
    from gategraph.runtime import load_graph

    return load_graph(
        {
            "version": 1,
            "name": f"bench-plan-{n}",
            "resources": {"notes": {"kind": "memory", "files": {"notes.md": "# Notes\n"}}},
            "validations": [{"name": "v", "entrypoint": NOOP}],
            "nodes": [{"id": f"n{i}", "validation": "v"} for i in range(n)],
            "policy": {"max_concurrency": max(1, concurrency), "default_timeout": 600},
        }
    )


def lifecycle(
    graph: PlanGraph,
    *,
    n: int,
    open_log: Callable[[], contextlib.AbstractAsyncContextManager[EventLog]] | None = None,
    name: str = "gategraph",
) -> Contender:
    """``run_plan`` over ``graph``, with a fresh in-memory log per run (or one from
    ``open_log``, opened before the clock starts and closed before it stops)."""
    from gategraph.runtime import MemoryEventLog, run_plan

    async def run() -> Sample:
        async with contextlib.AsyncExitStack() as stack:
            log: EventLog = (
                MemoryEventLog()
                if open_log is None
                else await stack.enter_async_context(open_log())
            )
            started = time.perf_counter()
            outcome = await run_plan(graph, event_log=log)
            if open_log is not None:
                await stack.aclose()  # every event committed, inside the clock
            wall = time.perf_counter() - started
        passed = sum(1 for record in outcome.validations if record.result.passed)
        if outcome.status != "applied" or passed != n:
            raise AssertionError(
                f"{name}: the plan ended {outcome.status} with {passed} of {n} validations "
                f"passed: {outcome.message}"
            )
        latencies = [r.duration for r in outcome.validations if r.duration is not None]
        return Sample(wall=wall, latencies=latencies)

    return Contender(name, run)


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of a plan of N no-op validations, and of the engine alone."""
    from gategraph.runtime import SQLiteEventLog
    from gategraph.runtime.testing import passing

    n, c = case.n, case.concurrency
    graph = plan_graph(n, c)
    built: dict[str, Contender] = {}
    if "gategraph" in names:
        built["gategraph"] = lifecycle(graph, n=n)
    if "gategraph_sqlite" in names:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gategraph-bench-")))
        numbers = count()

        def open_log() -> SQLiteEventLog:
            return SQLiteEventLog(folder / f"plan-{next(numbers)}.db")

        built["gategraph_sqlite"] = lifecycle(
            graph, n=n, open_log=open_log, name="gategraph_sqlite"
        )
    if "gategraph_engine" in names:
        built["gategraph_engine"] = engine(graph, n=n, concurrency=c, name="gategraph_engine")
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: passing(), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: passing(), c)
    return built


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    plan = median_wall(samples, "gategraph")
    durable = median_wall(samples, "gategraph_sqlite")
    alone = median_wall(samples, "gategraph_engine")
    # Same N on every side: the ratio of median walls is the ratio of per-validation times.
    return {
        "plan_vs_engine": plan / alone if plan and alone else None,
        "plan_sqlite_vs_engine": durable / alone if durable and alone else None,
    }


SCENARIOS = (
    Scenario(
        name="plan",
        title="the whole lifecycle (run_plan) beside the engine alone, no-op validations",
        build=build,
        contenders=(
            "gategraph",
            "gategraph_sqlite",
            "gategraph_engine",
            "asyncio_gather",
            "anyio_taskgroup",
        ),
        sizes=(1_000, 10_000),
        quick_sizes=(1_000,),
        extra=_extra,
        notes=(
            "gategraph is run_plan (a memory log), gategraph_sqlite the same with a SQLite "
            "log (closed inside the clock), gategraph_engine execute_graph alone: vs "
            "gategraph_engine is the lifecycle's cost over the engine's",
            "LangGraph has no plan lifecycle to compare: no LangGraph figure here",
        ),
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("plan")
