"""The durable SQLite event log against the in-memory one, on N no-op validations.

    python benchmarks/bench_eventlog.py [--quick] [--n 1000,10000]

``gategraph`` runs with a fresh ``SQLiteEventLog`` file per run (synchronous=FULL, group
commit) and its clock stops only once the log is closed, i.e. every event is committed;
``gategraph_memory`` is the same graph with a ``MemoryEventLog``. The baselines keep no log
at all (they are the no-op floors). Target (issue 5): SQLite at least 50% of the in-memory
throughput (``extra.sqlite_share_of_memory``).
"""

from __future__ import annotations

import statistics
import tempfile
from itertools import count
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import engine, fanout_graph
from gategraph.benchmarks.harness import Scenario

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection, Mapping, Sequence

    from gategraph.benchmarks.harness import Case, Contender, Sample
    from gategraph.runtime import SQLiteEventLog

__all__ = ["SCENARIOS", "build"]


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of N no-op validations with a durable log, an in-memory one, none."""
    from gategraph.runtime import SQLiteEventLog
    from gategraph.runtime.testing import passing

    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    graph = (
        fanout_graph(n, concurrency=c) if {"gategraph", "gategraph_memory"} & set(names) else None
    )
    if "gategraph" in names:
        assert graph is not None
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gategraph-bench-")))
        numbers = count()

        def open_log() -> SQLiteEventLog:
            # The previous run's files go before the clock starts, not inside it.
            for old in folder.iterdir():
                old.unlink()
            return SQLiteEventLog(folder / f"events-{next(numbers)}.db")

        built["gategraph"] = engine(graph, n=n, concurrency=c, open_log=open_log)
    if "gategraph_memory" in names:
        assert graph is not None
        built["gategraph_memory"] = engine(graph, n=n, concurrency=c, name="gategraph_memory")
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: passing(), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: passing(), c)
    return built


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    sqlite = [s.wall for s in samples.get("gategraph", ())]
    memory = [s.wall for s in samples.get("gategraph_memory", ())]
    if not sqlite or not memory:
        return {"sqlite_share_of_memory": None}
    # Throughput is N / wall: the share is the inverse ratio of the median walls.
    return {"sqlite_share_of_memory": statistics.median(memory) / statistics.median(sqlite)}


SCENARIOS = (
    Scenario(
        name="eventlog",
        title="SQLite event log (gategraph) against the in-memory log, no-op validations",
        build=build,
        contenders=("gategraph", "gategraph_memory", "asyncio_gather", "anyio_taskgroup"),
        sizes=(1_000, 10_000),
        quick_sizes=(10_000,),
        extra=_extra,
        notes=(
            "LangGraph's durable counterpart is a checkpointer package outside the bench "
            "extra: no LangGraph figure here",
        ),
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("eventlog")
