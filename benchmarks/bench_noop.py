"""No-op validations: what the engine costs per node when the validations cost nothing.

    python benchmarks/bench_noop.py [--quick] [--n 10,1000] [--json FILE]

Each of the N validations is ``gategraph.runtime.testing:passing`` (an async function that
returns a passing result at once); the baselines await the same function, unbounded. The
engine's figure includes two events and one result per validation, kept in memory.
Targets (issue 5): N=10,000 within 2x ``asyncio.gather``; N=5,000 at least 50x less
overhead than LangGraph's Send; N=100,000 under 150 MiB peak RSS in a fresh process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import engine, fanout_graph
from gategraph.benchmarks.harness import Scenario

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection

    from gategraph.benchmarks.harness import Case, Contender

__all__ = ["SCENARIOS", "build"]


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of an N-wide no-op fan-out."""
    from gategraph.runtime.testing import passing

    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    if "gategraph" in names:
        built["gategraph"] = engine(fanout_graph(n, concurrency=c), n=n, concurrency=c)
    # The coroutine itself, not a wrapper: the floor pays for nothing the engine skips.
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: passing(), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: passing(), c)
    if "langgraph" in names:
        built["langgraph"] = baselines.langgraph(n, lambda i: passing(), c)
    return built


SCENARIOS = (
    Scenario(
        name="noop",
        title="no-op validations, unbounded",
        build=build,
        contenders=("gategraph", "asyncio_gather", "anyio_taskgroup", "langgraph"),
        sizes=(10, 100, 1_000, 5_000, 10_000, 100_000),
        quick_sizes=(10, 1_000, 10_000),
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("noop")
