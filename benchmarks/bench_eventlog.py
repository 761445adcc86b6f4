"""The durable SQLite event log against the in-memory one, on N no-op validations.

    python benchmarks/bench_eventlog.py [--quick] [--n 1000,10000]

``gategraph`` runs with a fresh ``SQLiteEventLog`` file per run (synchronous=FULL, group
commit) and its clock stops only once the log is closed, i.e. every event is committed;
``gategraph_memory`` is the same graph with a ``MemoryEventLog``; ``gategraph_postgres``,
where ``GATEGRAPH_BENCH_POSTGRES`` names a server the bench may write to, a
``PostgresEventLog`` in a schema of the bench's own (``gategraph_bench``), made afresh per
run. The baselines keep no log at all (they
are the no-op floors). Targets: SQLite at least 50% of the in-memory throughput
(``extra.sqlite_share_of_memory``), PostgreSQL at least 50% of SQLite's
(``extra.postgres_share_of_sqlite``).
"""

from __future__ import annotations

import os
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
    from gategraph.runtime._storage._postgres import PostgresEventLog

__all__ = ["SCENARIOS", "build"]


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of N no-op validations with a durable log, an in-memory one, none."""
    from gategraph.runtime import SQLiteEventLog
    from gategraph.runtime.testing import passing

    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    graph = (
        fanout_graph(n, concurrency=c)
        if {"gategraph", "gategraph_memory", "gategraph_postgres"} & set(names)
        else None
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
    if "gategraph_postgres" in names:
        assert graph is not None
        built["gategraph_postgres"] = engine(
            graph, n=n, concurrency=c, open_log=_postgres_log, name="gategraph_postgres"
        )
    if "gategraph_memory" in names:
        assert graph is not None
        built["gategraph_memory"] = engine(graph, n=n, concurrency=c, name="gategraph_memory")
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, lambda i: passing(), c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, lambda i: passing(), c)
    return built


_BENCH_SCHEMA = "gategraph_bench"


def _postgres_log() -> PostgresEventLog:
    """A log on the bench's server in a schema of the bench's own (``gategraph_bench``),
    made afresh before the clock starts: the database's own tables are never touched."""
    from gategraph.runtime._base._exceptions import ConfigError
    from gategraph.runtime._storage._postgres import PostgresEventLog, _connect, is_postgres_url

    url = os.environ["GATEGRAPH_BENCH_POSTGRES"]
    if not is_postgres_url(url):  # not echoed: it may hold a password
        raise ConfigError.at(
            "GATEGRAPH_BENCH_POSTGRES",
            "not a PostgreSQL URL: write postgresql://USER@HOST:PORT/DATABASE",
        )
    with _connect(url, "bench database", autocommit=True) as db:
        db.execute(f"DROP SCHEMA IF EXISTS {_BENCH_SCHEMA} CASCADE")
        db.execute(f"CREATE SCHEMA {_BENCH_SCHEMA}")
    joined = "&" if "?" in url else "?"
    return PostgresEventLog(f"{url}{joined}options=-csearch_path%3D{_BENCH_SCHEMA}")


def _share(samples: Mapping[str, Sequence[Sample]], of: str, against: str) -> float | None:
    # Throughput is N / wall: the share is the inverse ratio of the median walls.
    one = [s.wall for s in samples.get(of, ())]
    other = [s.wall for s in samples.get(against, ())]
    return statistics.median(other) / statistics.median(one) if one and other else None


def _extra(case: Case, samples: Mapping[str, Sequence[Sample]]) -> dict[str, Any]:
    return {
        "sqlite_share_of_memory": _share(samples, "gategraph", "gategraph_memory"),
        "postgres_share_of_sqlite": _share(samples, "gategraph_postgres", "gategraph"),
    }


SCENARIOS = (
    Scenario(
        name="eventlog",
        title="SQLite event log (gategraph) against the in-memory log, no-op validations",
        build=build,
        contenders=(
            "gategraph",
            "gategraph_memory",
            "gategraph_postgres",
            "asyncio_gather",
            "anyio_taskgroup",
        ),
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
