"""asyncio against trio: the same no-op fan-out on each of anyio's backends.

    python benchmarks/bench_backends.py [--quick] [--n 1000,10000]

Every run gets a fresh event loop (``anyio.run(..., backend=...)``), the contenders on both
backends alike, so neither pays for a loop the other reuses. ``gategraph`` and
``anyio_taskgroup`` run on asyncio, ``gategraph_trio`` and ``anyio_taskgroup_trio`` the same
code on trio; ``asyncio.gather`` and LangGraph exist on asyncio only.
``extra.trio_vs_asyncio`` is the engine's per-node time on trio over that on asyncio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import engine, fanout_graph
from gategraph.benchmarks.harness import Scenario, median_wall

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Case, Contender, Sample

__all__ = ["SCENARIOS", "build"]


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of an N-wide no-op fan-out, on asyncio and on trio."""
    from gategraph.runtime.testing import passing

    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    graph = fanout_graph(n, concurrency=c) if {"gategraph", "gategraph_trio"} & set(names) else None
    if graph is not None:
        if "gategraph" in names:
            built["gategraph"] = engine(graph, n=n, concurrency=c)
        if "gategraph_trio" in names:
            built["gategraph_trio"] = engine(
                graph, n=n, concurrency=c, backend="trio", name="gategraph_trio"
            )
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: passing(), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: passing(), c)
    if "anyio_taskgroup_trio" in names:
        built["anyio_taskgroup_trio"] = baselines.anyio_taskgroup(
            n, lambda i: passing(), c, backend="trio", name="anyio_taskgroup_trio"
        )
    if "langgraph" in names:
        built["langgraph"] = baselines.langgraph(n, lambda i: passing(), c)
    return built


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    on_asyncio = median_wall(samples, "gategraph")
    on_trio = median_wall(samples, "gategraph_trio")
    return {"trio_vs_asyncio": on_trio / on_asyncio if on_trio and on_asyncio else None}


SCENARIOS = (
    Scenario(
        name="backends",
        title="no-op fan-out on asyncio and on trio (a fresh loop per run)",
        build=build,
        contenders=(
            "gategraph",
            "gategraph_trio",
            "asyncio_gather",
            "anyio_taskgroup",
            "anyio_taskgroup_trio",
            "langgraph",
        ),
        sizes=(1_000, 10_000),
        quick_sizes=(1_000,),
        extra=_extra,
        backend="asyncio and trio",
        loop_per_run=True,
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("backends")
