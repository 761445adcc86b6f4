"""Fan-out throughput of the engine, as ratios against baselines run in the same process.

    python benchmarks/bench_fanout.py            # the full table (about a minute)
    python benchmarks/bench_fanout.py --quick    # smaller N, fewer repeats
    python benchmarks/bench_fanout.py --json out.json

What it measures (issue 3's budget in brackets):

- per-node overhead of ``execute_graph`` over N no-op validations (results and events kept
  in memory), against ``asyncio.gather`` of N no-op coroutines (the floor) and one anyio
  task per node [engine ≤ 2x gather];
- 10,000 validations that each await 10 ms, at concurrency 1,000, against the ideal
  10,000 / 1,000 × 10 ms = 100 ms [≤ 1.25x];
- the SQLite event log's throughput against the in-memory log [≥ 50%];
- peak RSS of a fresh process running 100,000 no-op validations [< 150 MiB].

Runs are interleaved (engine, gather, anyio, engine, ...) after a warm-up, and each figure
is reported as min / median / max so the noise is visible. Nothing here is asserted: the
numbers depend on the machine, the ratios much less.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from gategraph.runtime import (
    MemoryEventLog,
    PlanGraph,
    SQLiteEventLog,
    execute_graph,
    load_graph,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

NOOP = "gategraph.runtime.testing:passing"
SLEEP = "gategraph.runtime.testing:sleeping"


def fanout_graph(
    n: int,
    *,
    entrypoint: str = NOOP,
    arguments: dict[str, Any] | None = None,
    concurrency: int = 1000,
) -> PlanGraph:
    """N independent validation nodes running the same validation."""
    node: dict[str, Any] = {"validation": "v"}
    if arguments:
        node["arguments"] = arguments
    return load_graph(
        {
            "version": 1,
            "name": f"fanout-{n}",
            "validations": [{"name": "v", "entrypoint": entrypoint}],
            "nodes": [{"id": f"n{i}", **node} for i in range(n)],
            "policy": {"max_concurrency": concurrency, "default_timeout": 600},
        }
    )


async def noop() -> dict[str, Any]:
    return {"passed": True, "message": "ok"}


async def run_engine(graph: PlanGraph, n: int) -> float:
    log = MemoryEventLog()
    start = time.perf_counter()
    run = await execute_graph(graph, event_log=log)
    elapsed = time.perf_counter() - start
    assert len(run.validations) == n and len(log) == 2 * n + 2
    return elapsed


async def run_gather(n: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(noop() for _ in range(n)))
    return time.perf_counter() - start


async def run_anyio_tasks(n: int) -> float:
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(noop)
    return time.perf_counter() - start


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


async def interleave(
    runs: dict[str, Callable[[], Awaitable[float]]], repeats: int
) -> dict[str, list[float]]:
    """Run each contender once as warm-up, then `repeats` rounds in turn."""
    for run in runs.values():
        await run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            gc.collect()
            times[name].append(await run())
    return times


async def per_node_overhead(sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    rows = []
    for n in sizes:
        graph = fanout_graph(n)
        rounds = max(2, repeats if n <= 10_000 else repeats // 3)
        times = await interleave(
            {
                "gategraph": lambda g=graph, n=n: run_engine(g, n),  # type: ignore[misc]
                "asyncio_gather": lambda n=n: run_gather(n),  # type: ignore[misc]
                "anyio_taskgroup": lambda n=n: run_anyio_tasks(n),  # type: ignore[misc]
            },
            rounds,
        )
        per_node = {k: spread([t / n * 1e6 for t in v]) for k, v in times.items()}
        rows.append(
            {
                "n": n,
                "per_node_us": per_node,
                "ratio_vs_gather": per_node["gategraph"]["median"]
                / per_node["asyncio_gather"]["median"],
                "ratio_vs_anyio": per_node["gategraph"]["median"]
                / per_node["anyio_taskgroup"]["median"],
            }
        )
        del graph
    return rows


async def sleep_floor(n: int, concurrency: int, seconds: float, sleep: Any) -> float:
    """The same sleeps in `concurrency` bare tasks, no engine: what the loop alone costs."""
    per_task, extra = divmod(n, concurrency)

    async def worker(count: int) -> None:
        for _ in range(count):
            await sleep(seconds)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(concurrency):
            tg.start_soon(worker, per_task + (1 if i < extra else 0))
    return time.perf_counter() - start


async def io_bound(n: int, concurrency: int, seconds: float, repeats: int) -> dict[str, Any]:
    graph = fanout_graph(
        n, entrypoint=SLEEP, arguments={"seconds": seconds}, concurrency=concurrency
    )
    ideal = n / concurrency * seconds
    times = await interleave(
        {
            "gategraph": lambda: run_engine(graph, n),
            "floor_asyncio_sleep": lambda: sleep_floor(n, concurrency, seconds, asyncio.sleep),
            "floor_anyio_sleep": lambda: sleep_floor(n, concurrency, seconds, anyio.sleep),
        },
        repeats,
    )
    walls = times["gategraph"]
    return {
        "n": n,
        "concurrency": concurrency,
        "sleep_s": seconds,
        "ideal_s": ideal,
        "wall_s": spread(walls),
        "floor_asyncio_sleep_s": spread(times["floor_asyncio_sleep"]),
        "floor_anyio_sleep_s": spread(times["floor_anyio_sleep"]),
        "ratio_vs_ideal": statistics.median(walls) / ideal,
        "ratio_vs_anyio_floor": statistics.median(walls)
        / statistics.median(times["floor_anyio_sleep"]),
    }


async def sqlite_vs_memory(n: int, repeats: int) -> dict[str, Any]:
    graph = fanout_graph(n)
    folder = Path(tempfile.mkdtemp(prefix="gategraph-bench-"))

    async def sqlite_run() -> float:
        path = folder / f"events-{time.perf_counter_ns()}.db"
        async with SQLiteEventLog(path) as log:
            start = time.perf_counter()
            await execute_graph(graph, event_log=log)
            elapsed = time.perf_counter() - start
        path.unlink()
        return elapsed

    times = await interleave(
        {"memory": lambda: run_engine(graph, n), "sqlite": sqlite_run}, repeats
    )
    rate = {k: spread([n / t for t in v]) for k, v in times.items()}
    return {
        "n": n,
        "validations_per_s": rate,
        "sqlite_share_of_memory": rate["sqlite"]["median"] / rate["memory"]["median"],
    }


# The child reads its high-water mark from /proc: ru_maxrss survives fork+exec on Linux and
# would report the parent's peak instead.
_RSS_CHILD = """
import gc, anyio
from benchmarks.bench_fanout import fanout_graph, run_engine
n = {n}
graph = fanout_graph(n)
gc.collect()
anyio.run(run_engine, graph, n)
with open("/proc/self/status") as status:
    print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


def peak_rss(n: int) -> dict[str, Any]:
    """Peak RSS of a fresh process that builds and runs an N-wide fan-out."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", _RSS_CHILD.format(n=n)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    kib = int(out.stdout.strip().splitlines()[-1])
    return {"n": n, "peak_rss_mib": kib / 1024}


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }


def _cell(figures: dict[str, float]) -> str:
    return f"{figures['median']:.2f} ({figures['min']:.2f}–{figures['max']:.2f})"


def table(report: dict[str, Any]) -> str:
    lines = [
        "| N | gategraph µs/node | asyncio.gather µs/node | anyio task µs/node | vs gather | vs anyio |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for row in report["per_node"]:
        p = row["per_node_us"]
        lines.append(
            f"| {row['n']:,} | {_cell(p['gategraph'])} | {_cell(p['asyncio_gather'])} | "
            f"{_cell(p['anyio_taskgroup'])} | {row['ratio_vs_gather']:.2f}x | {row['ratio_vs_anyio']:.2f}x |"
        )
    io = report["io_bound"]
    wall = io["wall_s"]
    lines += [
        "",
        f"I/O-bound: {io['n']:,} validations × {io['sleep_s'] * 1000:.0f} ms at concurrency "
        f"{io['concurrency']:,}: {wall['median'] * 1000:.0f} ms median "
        f"({wall['min'] * 1000:.0f}–{wall['max'] * 1000:.0f}), ideal {io['ideal_s'] * 1000:.0f} ms "
        f"→ {io['ratio_vs_ideal']:.2f}x; the same sleeps in bare tasks, no engine: "
        f"asyncio.sleep {io['floor_asyncio_sleep_s']['median'] * 1000:.0f} ms, anyio.sleep "
        f"{io['floor_anyio_sleep_s']['median'] * 1000:.0f} ms "
        f"(engine {io['ratio_vs_anyio_floor']:.2f}x the anyio floor)",
    ]
    sq = report["sqlite"]
    rate = sq["validations_per_s"]
    lines.append(
        f"SQLite event log: {rate['sqlite']['median']:,.0f} validations/s vs memory "
        f"{rate['memory']['median']:,.0f}/s at N={sq['n']:,} → "
        f"{sq['sqlite_share_of_memory'] * 100:.0f}% of in-memory"
    )
    if report.get("rss"):
        rss = report["rss"]
        lines.append(
            f"Peak RSS, {rss['n']:,} no-op validations (fresh process): {rss['peak_rss_mib']:.0f} MiB"
        )
    return "\n".join(lines)


async def measure(quick: bool) -> dict[str, Any]:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    repeats = 3 if quick else 7
    return {
        "machine": machine(),
        "per_node": await per_node_overhead(sizes, repeats),
        "io_bound": await io_bound(
            2_000 if quick else 10_000, 200 if quick else 1_000, 0.01, 2 if quick else 5
        ),
        "sqlite": await sqlite_vs_memory(2_000 if quick else 10_000, repeats),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller N and fewer repeats")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    report = asyncio.run(measure(args.quick))
    report["rss"] = peak_rss(10_000 if args.quick else 100_000)
    print(table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
