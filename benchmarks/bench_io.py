"""I/O-bound validations: each awaits a 10 ms sleep; and a sweep over the concurrency.

    python benchmarks/bench_io.py [--quick] [--n 1000,10000] [--concurrency 10,100,1000]

``io``: N validations (``gategraph.runtime.testing:sleeping``, on ``anyio.sleep``) at
concurrency min(N, 1,000), against the ideal wall time ⌈N / concurrency⌉ × 10 ms. The
baselines sleep the same way: ``asyncio.sleep`` under gather, ``anyio.sleep`` in the task
group and LangGraph (``max_concurrency`` in its config).

``sweep``: N = 1,000 sleeps at several concurrency levels (``--concurrency``), the same
contenders: how close each gets to the ideal as the bound loosens.

Both add ``anyio_workers``: the same sleeps in ``concurrency`` bare tasks, no engine —
what the event loop alone costs over the ideal (``extra.loop_floor_vs_ideal``). Target
(issue 16): the engine's wall within 1.15x of that floor's, at N=10,000 and at N=1,000.
``gategraph_uvloop`` and ``anyio_workers_uvloop`` are the engine and the floor on uvloop's
loop (skipped without uvloop); ``extra.uvloop_vs_anyio_workers`` compares them.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

import anyio
from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import SLEEP, engine, fanout_graph
from gategraph.benchmarks.harness import (
    Contender,
    Sample,
    Scenario,
    Settings,
    median_wall,
    uvloop_figures,
)

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Backend, Case

__all__ = ["SCENARIOS", "SLEEP_SECONDS", "build"]

SLEEP_SECONDS = 0.01
CONCURRENCY = 1_000
SWEEP_LEVELS = (10, 100, 1_000)
QUICK_SWEEP_LEVELS = (100, 1_000)


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of N sleeping validations at the case's concurrency."""
    n, c, s = case.n, case.concurrency, SLEEP_SECONDS
    built: dict[str, Contender] = {}
    if "gategraph" in names:
        graph = fanout_graph(n, entrypoint=SLEEP, arguments={"seconds": s}, concurrency=c)
        built["gategraph"] = engine(graph, n=n, concurrency=c)
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: asyncio.sleep(s), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: anyio.sleep(s), c)
    if "langgraph" in names:
        built["langgraph"] = baselines.langgraph(n, lambda i: asyncio.sleep(s), c)
    if "anyio_workers" in names:
        built["anyio_workers"] = workers(n, c)
    if "gategraph_uvloop" in names:
        graph = fanout_graph(n, entrypoint=SLEEP, arguments={"seconds": s}, concurrency=c)
        built["gategraph_uvloop"] = engine(
            graph, n=n, concurrency=c, backend="uvloop", name="gategraph_uvloop"
        )
    if "anyio_workers_uvloop" in names:
        built["anyio_workers_uvloop"] = workers(n, c, backend="uvloop", name="anyio_workers_uvloop")
    return built


def workers(
    n: int, concurrency: int, *, backend: Backend = "asyncio", name: str = "anyio_workers"
) -> Contender:
    """The same sleeps in ``concurrency`` bare anyio tasks, no engine, no limiter: what the
    event loop alone costs, the floor under every contender."""
    per_task, extra = divmod(n, concurrency)

    async def worker(count: int) -> None:
        for _ in range(count):
            await anyio.sleep(SLEEP_SECONDS)

    async def run() -> Sample:
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(concurrency):
                tg.start_soon(worker, per_task + (1 if i < extra else 0))
        return Sample(time.perf_counter() - started)

    return Contender(name, run, backend)


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    best = math.ceil(case.n / case.concurrency) * SLEEP_SECONDS
    wall = median_wall(samples, "gategraph")
    floor = median_wall(samples, "anyio_workers")
    return {
        "ideal_s": best,
        "wall_vs_ideal": wall / best if wall else None,
        "loop_floor_vs_ideal": floor / best if floor else None,
        **uvloop_figures(samples, "anyio_workers"),
    }


def _io_levels(n: int, settings: Settings) -> tuple[int, ...]:
    return (min(n, CONCURRENCY),)


def _sweep_levels(n: int, settings: Settings) -> tuple[int, ...]:
    levels = settings.concurrency or (QUICK_SWEEP_LEVELS if settings.quick else SWEEP_LEVELS)
    return tuple(dict.fromkeys(min(n, level) for level in levels))


_CONTENDERS = (
    "gategraph",
    "asyncio_gather",
    "anyio_taskgroup",
    "langgraph",
    "anyio_workers",
    "gategraph_uvloop",
    "anyio_workers_uvloop",
)

SCENARIOS = (
    Scenario(
        name="io",
        title=f"I/O-bound: each validation awaits {SLEEP_SECONDS * 1000:g} ms, concurrency ≤ {CONCURRENCY:,}",
        build=build,
        contenders=_CONTENDERS,
        sizes=(10, 100, 1_000, 10_000),
        # The target's case; the quick sweep covers N=1,000.
        quick_sizes=(10_000,),
        levels=_io_levels,
        extra=_extra,
    ),
    Scenario(
        name="sweep",
        title=f"concurrency sweep: {SLEEP_SECONDS * 1000:g} ms sleeps at several bounds",
        build=build,
        contenders=_CONTENDERS,
        sizes=(1_000,),
        quick_sizes=(1_000,),
        levels=_sweep_levels,
        extra=_extra,
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("io", "sweep")
