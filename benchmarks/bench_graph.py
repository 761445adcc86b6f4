"""A user's own plan graph: validations per second, latency and time per pipeline layer.

    gategraph bench GRAPH.yaml [--repeat 20] [--concurrency 1,8,64] [--json FILE]
    python benchmarks/bench_graph.py GRAPH.yaml --repeat 5

Each run is the whole plan through the supervisor — Strategize, Execute, the validation
pipeline, Apply — as ``gategraph run --auto-approve`` would run it, with three differences
that keep the user's files untouched: every directory resource is a fresh temporary copy of
its folder, the event log and the retry audit are in memory, and the supervisor's home (its
sandboxes) is a temporary folder. The catalog is not opened: the graph file's own
validations run, not the catalog's attachments. Approval rules are auto-approved so that no
run waits for a person.

The concurrency levels (``LocalExecutor(max_concurrency=c)``) are interleaved: one warm-up
run per level, then ``repeat`` rounds of one run per level, the order rotating. Copying the
folders happens before the clock starts.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from gategraph.benchmarks.harness import percentiles, spread

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gategraph.runtime import PlanGraph

__all__ = ["benchmark_graph", "render_graph_table"]


def _resources(graph: PlanGraph, folder: Path) -> dict[str, Any]:
    """Fresh copies of the graph's directory resources under ``folder``."""
    from gategraph.runtime import DirectoryResource

    copies: dict[str, Any] = {}
    for name, spec in graph.resources.items():
        if spec.kind == "directory" and spec.path is not None:
            target = folder / "resources" / name
            shutil.copytree(spec.path, target, symlinks=True)
            copies[name] = DirectoryResource(name, target)
    return copies


async def _run_once(graph: PlanGraph, concurrency: int, scratch: Path) -> dict[str, Any]:
    from gategraph.runtime import (
        InMemoryAuditLog,
        LocalExecutor,
        MemoryEventLog,
        PlanStatus,
        Supervisor,
    )

    folder = Path(tempfile.mkdtemp(prefix="run-", dir=scratch))
    try:
        supervisor = Supervisor(
            graph,
            event_log=MemoryEventLog(),
            resources=_resources(graph, folder),
            executor=LocalExecutor(max_concurrency=concurrency),
            audit=InMemoryAuditLog(),
            auto_approve=True,
            home=folder / "home",
        )
        started = time.perf_counter()
        outcome = await supervisor.run()
        wall = time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stats = outcome.statistics
    return {
        "wall": wall,
        "status": outcome.status.value,
        "applied": outcome.status is PlanStatus.APPLIED,
        "message": outcome.message,
        "validations": stats.semantic_invocations or len(outcome.validations),
        "latencies": [record.duration for record in outcome.validations],
        "layer_seconds": dict(stats.layer_seconds),
        "rounds": stats.rounds,
    }


def benchmark_graph(
    path: Path,
    *,
    repeat: int,
    concurrency: Sequence[int],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the plan in ``path`` ``repeat`` times at each concurrency level; the figures.

    Raises :class:`gategraph.runtime.ConfigError` for a graph that does not load.
    """
    from gategraph.runtime import LAYERS, load_graph

    graph = load_graph(path)
    levels = list(dict.fromkeys(concurrency))
    runs: dict[int, list[dict[str, Any]]] = {c: [] for c in levels}

    async def measure(scratch: Path) -> None:
        for level in levels:
            if progress is not None:
                progress(f"{graph.name}: warm-up at concurrency {level}")
            await _run_once(graph, level, scratch)
        for round_ in range(repeat):
            if progress is not None:
                progress(f"{graph.name}: round {round_ + 1} of {repeat}")
            shift = round_ % len(levels)
            for level in [*levels[shift:], *levels[:shift]]:
                runs[level].append(await _run_once(graph, level, scratch))

    with tempfile.TemporaryDirectory(prefix="gategraph-bench-") as scratch:
        anyio.run(measure, Path(scratch))

    results = []
    for level in levels:
        done = runs[level]
        latencies = [x for run in done for x in run["latencies"]]
        layers = {
            layer: spread([run["layer_seconds"].get(layer, 0.0) for run in done])
            for layer in (*LAYERS, *sorted({k for run in done for k in run["layer_seconds"]}))
        }
        statuses: dict[str, int] = {}
        for run in done:
            statuses[run["status"]] = statuses.get(run["status"], 0) + 1
        results.append(
            {
                "concurrency": level,
                "runs": len(done),
                "wall_s": spread([run["wall"] for run in done]),
                "validations_per_run": spread([float(run["validations"]) for run in done]),
                "validations_per_s": spread([run["validations"] / run["wall"] for run in done]),
                "latency_ms": (
                    {k: v * 1000 for k, v in percentiles(latencies).items()} if latencies else None
                ),
                "layer_seconds": layers,
                "rounds_per_run": spread([float(run["rounds"]) for run in done]),
                "statuses": statuses,
                "not_applied": sorted(
                    {f"{run['status']}: {run['message']}" for run in done if not run["applied"]}
                ),
            }
        )
    return {
        "file": str(path),
        "name": graph.name,
        "repeat": repeat,
        "warmup": 1,
        "applied": all(not result["not_applied"] for result in results),
        "results": results,
    }


def render_graph_table(figures: dict[str, Any]) -> str:
    """The graph's figures as a Markdown table, one row per concurrency level."""
    layers = list(figures["results"][0]["layer_seconds"]) if figures["results"] else []
    # Every time in the table is in milliseconds (the JSON keeps seconds unless a key
    # says _ms): the header and the footnote must say the same unit.
    head = ["concurrency", "wall ms", "validations/s", "p50 / p99 ms"]
    head += [f"{layer} ms" for layer in layers]
    head += ["applied"]
    lines = [
        f"### plan {figures['name']} ({figures['file']}) — median (min–max) of "
        f"{figures['repeat']} runs per level after a warm-up",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * (len(head) - 1) + "---|",
    ]

    def ms(figure: dict[str, float]) -> str:
        """A spread given in seconds, shown in milliseconds."""
        low, mid, high = (figure[k] * 1000 for k in ("min", "median", "max"))
        return f"{mid:.1f} ({low:.1f}–{high:.1f})"

    for result in figures["results"]:
        rate = result["validations_per_s"]
        latency = result["latency_ms"]
        applied = result["statuses"].get("applied", 0)
        row = [
            f"{result['concurrency']:,}",
            ms(result["wall_s"]),
            f"{rate['median']:,.0f} ({rate['min']:,.0f}–{rate['max']:,.0f})",
            f"{latency['p50']:.2f} / {latency['p99']:.2f}" if latency else "—",
        ]
        row += [ms(result["layer_seconds"][layer]) for layer in layers]
        row.append(f"{applied} of {result['runs']}")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines.append(
        "All times in milliseconds. Latency: each validation call of a run's last round. "
        "Layers: the time spent in each pipeline layer per run, summed over its rounds "
        "(PlanStatistics.layer_seconds, which holds seconds)."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for()
