"""No-op validations: what the engine costs per node when the validations cost nothing.

    python benchmarks/bench_noop.py [--quick] [--n 10,1000] [--json FILE]

Each of the N validations is ``gategraph.runtime.testing:passing`` (an async function that
returns a passing result at once); the baselines await the same function, unbounded. The
engine's figure includes two events and one result per validation, kept in memory.
``gategraph_uvloop`` and ``asyncio_gather_uvloop`` are the same two on uvloop's loop
(skipped without uvloop); ``extra`` compares them. ``gategraph_artifact`` gives every
validation an artifact (:data:`ARTIFACT`, a plan's change as an agent describes it), which
the engine freezes once per run: ``extra["artifact_vs_gather"]`` is its ratio. Targets: N=10,000 within 1.3x
``asyncio.gather`` (issue 16; 2x in issue 5); N=5,000 at least 50x less overhead than
LangGraph's Send; N=100,000 under 150 MiB peak RSS in a fresh process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import engine, fanout_graph
from gategraph.benchmarks.harness import Scenario, median_wall, uvloop_figures

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Case, Contender, Sample

__all__ = ["ARTIFACT", "SCENARIOS", "build"]

ARTIFACT: Final = {
    "summary": "Rename the config loader and update its callers",
    "files": [{"path": f"src/app/module_{i}.py", "lines": [i, i + 10]} for i in range(20)],
    "commands": ["python -m pytest -q", "ruff check ."],
}
"""What ``gategraph_artifact``'s validations are given: a plan's change, as plain data."""


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of an N-wide no-op fan-out."""
    from gategraph.runtime.testing import passing

    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    if "gategraph" in names:
        built["gategraph"] = engine(fanout_graph(n, concurrency=c), n=n, concurrency=c)
    if "gategraph_artifact" in names:
        built["gategraph_artifact"] = engine(
            fanout_graph(n, concurrency=c),
            n=n,
            concurrency=c,
            name="gategraph_artifact",
            artifact=ARTIFACT,
        )
    # The coroutine itself, not a wrapper: the floor pays for nothing the engine skips.
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: passing(), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: passing(), c)
    if "langgraph" in names:
        built["langgraph"] = baselines.langgraph(n, lambda i: passing(), c)
    # The same two on uvloop's loop (the command line's when it is installed).
    if "gategraph_uvloop" in names:
        built["gategraph_uvloop"] = engine(
            fanout_graph(n, concurrency=c),
            n=n,
            concurrency=c,
            backend="uvloop",
            name="gategraph_uvloop",
        )
    if "asyncio_gather_uvloop" in names:
        built["asyncio_gather_uvloop"] = baselines.asyncio_gather(
            n, lambda i: passing(), c, backend="uvloop", name="asyncio_gather_uvloop"
        )
    return built


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    extra = uvloop_figures(samples, "asyncio_gather")
    given = median_wall(samples, "gategraph_artifact")
    floor = median_wall(samples, "asyncio_gather")
    if given is not None and floor:
        extra["artifact_vs_gather"] = round(given / floor, 3)
    return extra


SCENARIOS = (
    Scenario(
        name="noop",
        title="no-op validations, unbounded",
        build=build,
        contenders=(
            "gategraph",
            "gategraph_artifact",
            "asyncio_gather",
            "anyio_taskgroup",
            "langgraph",
            "gategraph_uvloop",
            "asyncio_gather_uvloop",
        ),
        sizes=(10, 100, 1_000, 5_000, 10_000, 100_000),
        quick_sizes=(10, 1_000, 10_000),
        extra=_extra,
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("noop")
