"""The benchmark harness: scenarios, interleaved repeats, statistics, JSON, table and plot.

A *scenario* (``bench_<topic>.py``) builds, for one *case* (a width N and a concurrency),
a set of *contenders*: the engine (``gategraph``) and the baselines doing the same work
(:mod:`gategraph.benchmarks.baselines`), plus whatever else the scenario compares
(the in-memory event log, one core, trio ...). The harness runs each contender once as a
warm-up, then ``repeats`` rounds in which every contender runs once, the order rotating
from round to round, and reports min / median / max of each figure so the noise shows.
Peak RSS is measured in a fresh process per contender (``VmHWM``), and latencies of the
baselines in one extra, instrumented run, so that timing them never slows their floor.

Nothing here asserts a speed: the targets of issues 5 and 10 are measured and shown as met or
missed. ``docs/benchmarks.md`` documents the JSON layout this module writes.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import importlib
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import anyio

__all__ = [
    "BASELINES",
    "ENGINE",
    "SCENARIO_ORDER",
    "SCHEMA_VERSION",
    "TARGETS",
    "Case",
    "Contender",
    "Sample",
    "Scenario",
    "Settings",
    "Target",
    "evaluate_targets",
    "get_scenario",
    "interleave",
    "machine",
    "measure_scenario",
    "median_wall",
    "peak_rss",
    "percentiles",
    "plot_report",
    "render_table",
    "run_benchmarks",
    "scenario_names",
    "spread",
    "uvloop_figures",
    "write_json",
]

SCHEMA_VERSION: Final = 1
"""The version of the JSON layout (``docs/benchmarks.md``); it rises when a key changes."""

ENGINE: Final = "gategraph"
BASELINES: Final = ("asyncio_gather", "anyio_taskgroup", "langgraph")
"""The baselines every width scenario reports, in this order (``langgraph`` may be null)."""

Backend = Literal["asyncio", "uvloop", "trio"]
"""The loop a contender runs on: ``uvloop`` is asyncio on uvloop's loop."""


def run_on(backend: Backend, function: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    """``anyio.run(function, *args)`` on ``backend``'s loop."""
    if backend == "uvloop":
        return anyio.run(function, *args, backend="asyncio", backend_options={"use_uvloop": True})
    return anyio.run(function, *args, backend=backend)


def postgres_missing() -> str | None:
    """Why no PostgreSQL contender runs (``None`` when one can): it needs a server the
    bench may write to, named by ``GATEGRAPH_BENCH_POSTGRES``, and psycopg."""
    if not os.environ.get("GATEGRAPH_BENCH_POSTGRES"):
        return "no PostgreSQL server: set GATEGRAPH_BENCH_POSTGRES=postgresql://... to one"
    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed (pip install 'gategraph[postgres]')"
    return None


def uvloop_missing() -> str | None:
    """Why the ``*_uvloop`` contenders cannot run here, or ``None``."""
    if importlib.util.find_spec("uvloop") is None:
        return "uvloop is not installed (pip install 'gategraph[uvloop]')"
    return None


# Scenario name → the module that defines it. The modules load only when asked for, so that
# `gategraph bench --help` and a single scenario stay cheap.
_MODULES: Final = {
    "noop": "bench_noop",
    "io": "bench_io",
    "sweep": "bench_io",
    "cpu-thread": "bench_cpu",
    "cpu-process": "bench_cpu",
    "sandbox": "bench_sandbox",
    "mix": "bench_mix",
    "eventlog": "bench_eventlog",
    "plan": "bench_plan",
    "backends": "bench_backends",
}
SCENARIO_ORDER: Final = (*_MODULES, "ray", "startup", "embed", "suite", "project")
"""Every scenario, in the order a full run measures them; ``ray``, ``startup``, ``embed``,
``suite`` and ``project`` are not width-based (each has a top-level key of the report
instead)."""
ON_REQUEST: Final = ("suite", "project")
"""Scenarios measured only when named: ``suite`` and ``project`` run real projects' tests
(fetched once by pip unless ``--project`` names one), minutes rather than seconds."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed run of a contender."""

    wall: float
    """Seconds, from the first call started to the last one finished."""
    latencies: Sequence[float] = ()
    """Seconds per validation call, when the contender records them anyway (the engine)."""


@dataclass(slots=True)
class Contender:
    """One way of doing a case's work: the engine, a baseline, or a variant of either."""

    name: str
    run: Callable[[], Awaitable[Sample]]
    """One timed run."""
    backend: Backend = "asyncio"
    instrumented: Callable[[], Awaitable[list[float]]] | None = None
    """One untimed run that returns each call's latency (for baselines that do not record
    them in their timed runs)."""
    keeps: Callable[[], contextlib.AbstractAsyncContextManager[object]] | None = None
    """What the contender keeps across its runs on one event loop, as anyio keeps its
    worker processes (a pool of its own): entered before its warm-up run, left after its
    last; entered around each run where every run has a loop of its own."""


@dataclass(frozen=True, slots=True)
class Case:
    """One measurement point of a scenario."""

    scenario: str
    n: int
    """Validations per run."""
    concurrency: int
    """At most this many at once (``n`` when unbounded)."""


Builder = Callable[[Case, contextlib.ExitStack, Collection[str]], dict[str, Contender]]
"""Builds the named contenders of a case; resources they share (a process pool) go on the
stack, which is closed once the case is measured."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """A width-based benchmark: what runs, at which N, against whom."""

    name: str
    title: str
    build: Builder
    contenders: tuple[str, ...]
    """Every contender, the engine first; ``gategraph`` and the three baselines always."""
    sizes: tuple[int, ...]
    quick_sizes: tuple[int, ...]
    levels: Callable[[int, Settings], tuple[int, ...]] = lambda n, _: (n,)
    """The concurrency levels to measure at width N (one for most scenarios)."""
    repeats: int = 5
    quick_repeats: int = 3
    langgraph_max_n: int = 5_000
    """LangGraph's Send fan-out is superlinear in N: above this it is skipped."""
    quick_langgraph_max_n: int = 1_000
    extra: Callable[[Case, Mapping[str, Sequence[Sample]]], dict[str, Any]] | None = None
    """Figures of its own (an ideal wall time, a share, a speed-up)."""
    notes: tuple[str, ...] = ()
    backend: str = "asyncio"
    loop_per_run: bool = False
    """Every run on a fresh loop (contenders on different backends compared run by run);
    else each backend's contenders share one loop, interleaved there."""


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure."""

    quick: bool = False
    repeats: int | None = None
    """Rounds after the warm-up (default: the scenario's)."""
    sizes: tuple[int, ...] | None = None
    """Widths instead of the scenarios' own."""
    concurrency: tuple[int, ...] | None = None
    """Levels for the ``sweep`` scenario instead of its own."""
    rss: bool = True
    """Measure peak RSS in fresh processes."""
    calls: int | None = None
    """Calls per sample of the ``embed`` scenario (default: its own, 200 or 50 quick)."""
    project: str | None = None
    """The project folder of the ``suite`` and ``project`` scenarios (default: their own,
    fetched once)."""
    progress: Callable[[str], None] | None = field(default=None, compare=False)


# -- statistics ------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, float]:
    """Min, median and max of ``values``."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50 and p99 of ``values`` (nearest rank)."""
    ordered = sorted(values)

    def at(q: float) -> float:
        # Nearest rank: the figure is one of the measured latencies, never an interpolation.
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return {"p50": at(0.50), "p99": at(0.99)}


def uvloop_figures(samples: Mapping[str, Sequence[Sample]], floor: str) -> dict[str, Any]:
    """The engine on uvloop against ``floor`` on uvloop, and against itself on asyncio
    (medians of wall times; ``None`` where uvloop did not run)."""
    on_uvloop = median_wall(samples, "gategraph_uvloop")
    floor_uvloop = median_wall(samples, f"{floor}_uvloop")
    on_asyncio = median_wall(samples, "gategraph")
    return {
        f"uvloop_vs_{floor}": on_uvloop / floor_uvloop if on_uvloop and floor_uvloop else None,
        "uvloop_speedup": on_asyncio / on_uvloop if on_uvloop and on_asyncio else None,
    }


def median_wall(samples: Mapping[str, Sequence[Sample]], name: str) -> float | None:
    """The median wall time of contender ``name``'s samples (``None`` if it did not run)."""
    walls = [s.wall for s in samples.get(name, ())]
    return statistics.median(walls) if walls else None


# -- running ---------------------------------------------------------------------------------


async def interleave(
    contenders: Sequence[Contender], repeats: int, instrument: bool
) -> tuple[dict[str, list[Sample]], dict[str, list[float]]]:
    """Warm up each contender, run ``repeats`` rotating rounds, then the instrumented runs
    (when ``instrument``): each contender's samples, and the instrumented latencies."""
    async with contextlib.AsyncExitStack() as kept:
        for contender in contenders:
            if contender.keeps is not None:
                await kept.enter_async_context(contender.keeps())
        for contender in contenders:
            await contender.run()
        samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
        for round_ in range(repeats):
            # Rotating the order keeps a contender from always running after the same one
            # (a warm cache, a pending collection).
            shift = round_ % len(contenders)
            for contender in [*contenders[shift:], *contenders[:shift]]:
                gc.collect()
                samples[contender.name].append(await contender.run())
        latencies: dict[str, list[float]] = {}
        for contender in contenders:
            if contender.instrumented is not None and instrument:
                gc.collect()
                latencies[contender.name] = await contender.instrumented()
    return samples, latencies


def _interleave_across_loops(
    contenders: Sequence[Contender], repeats: int, instrument: bool
) -> tuple[dict[str, list[Sample]], dict[str, list[float]]]:
    """The same, with a fresh event loop per run: contenders on different backends."""

    def once(contender: Contender, call: Callable[[], Awaitable[Any]]) -> Any:
        async def main() -> Any:
            async with contextlib.AsyncExitStack() as kept:
                if contender.keeps is not None:
                    await kept.enter_async_context(contender.keeps())
                return await call()

        return run_on(contender.backend, main)

    for contender in contenders:
        once(contender, contender.run)
    samples: dict[str, list[Sample]] = {c.name: [] for c in contenders}
    for round_ in range(repeats):
        shift = round_ % len(contenders)
        for contender in [*contenders[shift:], *contenders[:shift]]:
            gc.collect()
            samples[contender.name].append(once(contender, contender.run))
    latencies: dict[str, list[float]] = {}
    for contender in contenders:
        if contender.instrumented is not None and instrument:
            latencies[contender.name] = once(contender, contender.instrumented)
    return samples, latencies


_NO_COUNTERPART: Final = "no LangGraph counterpart in this scenario"


def _langgraph_installed() -> bool:
    return importlib.util.find_spec("langgraph") is not None


def _skipped(scenario: Scenario, case: Case, settings: Settings) -> dict[str, str]:
    """Contenders that do not run in this case, with why."""
    skipped: dict[str, str] = {}
    if importlib.util.find_spec("trio") is None:
        for name in scenario.contenders:
            if name.endswith("_trio"):
                skipped[name] = "trio is not installed"
    no_uvloop = uvloop_missing()
    if no_uvloop is not None:
        for name in scenario.contenders:
            if name.endswith("_uvloop"):
                skipped[name] = no_uvloop
    no_postgres = postgres_missing()
    if no_postgres is not None:
        for name in scenario.contenders:
            if name.endswith("_postgres"):
                skipped[name] = no_postgres
    if "langgraph" not in scenario.contenders:
        skipped["langgraph"] = _NO_COUNTERPART
    elif not _langgraph_installed():
        skipped["langgraph"] = "LangGraph is not installed (pip install 'gategraph[bench]')"
    else:
        limit = scenario.quick_langgraph_max_n if settings.quick else scenario.langgraph_max_n
        if case.n > limit:
            skipped["langgraph"] = f"N above {limit:,}: LangGraph's Send fan-out is superlinear"
    return skipped


def measure_case(
    scenario: Scenario, case: Case, settings: Settings, *, largest: bool = True
) -> dict[str, Any]:
    """Measure one case of ``scenario``; return its JSON record. ``largest``: the case has
    the scenario's largest N (``--quick`` measures peak RSS there only)."""
    repeats = settings.repeats or (scenario.quick_repeats if settings.quick else scenario.repeats)
    if settings.repeats is None and case.n >= 100_000:
        repeats = min(repeats, 3)
    skipped = _skipped(scenario, case, settings)
    names = [name for name in scenario.contenders if name not in skipped]
    with contextlib.ExitStack() as stack:
        built = scenario.build(case, stack, names)
        contenders = [built[name] for name in names]
        # --quick leaves out what costs a run or a process per contender: the baselines'
        # instrumented runs (their latencies) and their peak RSS.
        instrument = not settings.quick
        if scenario.loop_per_run:
            samples, instrumented = _interleave_across_loops(contenders, repeats, instrument)
        else:
            samples, instrumented = {}, {}
            for backend in dict.fromkeys(c.backend for c in contenders):
                # One loop per backend: asyncio's contenders beside asyncio's floor, uvloop's
                # beside uvloop's.
                group = [c for c in contenders if c.backend == backend]
                found, timed = run_on(backend, interleave, group, repeats, instrument)
                samples.update(found)
                instrumented.update(timed)
    rss: dict[str, float | None] = {}
    if settings.rss and (not settings.quick or largest):
        # A fresh process per contender costs half a second or more: --quick measures the
        # engine alone, at each scenario's largest N.
        for name in names if not settings.quick else [ENGINE]:
            rss[name] = peak_rss(case, name)
    return _case_record(scenario, case, repeats, samples, instrumented, rss, skipped)


def _case_record(
    scenario: Scenario,
    case: Case,
    repeats: int,
    samples: Mapping[str, Sequence[Sample]],
    instrumented: Mapping[str, Sequence[float]],
    rss: Mapping[str, float | None],
    skipped: Mapping[str, str],
) -> dict[str, Any]:
    keys = list(dict.fromkeys([ENGINE, *BASELINES, *scenario.contenders]))
    n = case.n
    wall: dict[str, dict[str, float] | None] = {}
    per_node: dict[str, dict[str, float] | None] = {}
    rate: dict[str, dict[str, float] | None] = {}
    latency: dict[str, dict[str, float] | None] = {}
    for key in keys:
        runs = samples.get(key)
        if not runs:
            wall[key] = per_node[key] = rate[key] = latency[key] = None
            continue
        walls = [s.wall for s in runs]
        wall[key] = spread(walls)
        per_node[key] = spread([w / n * 1e6 for w in walls])
        rate[key] = spread([n / w for w in walls])
        pooled = [x for s in runs for x in s.latencies] or list(instrumented.get(key, ()))
        latency[key] = {k: v * 1e6 for k, v in percentiles(pooled).items()} if pooled else None
    medians = {k: (v["median"] if v is not None else None) for k, v in per_node.items()}
    engine = medians[ENGINE]
    ratios = {
        key: (engine / value if engine is not None and value else None)
        for key, value in medians.items()
        if key != ENGINE
    }
    return {
        "n": n,
        "concurrency": case.concurrency,
        "repeats": repeats,
        "per_node_us": medians,
        "validations_per_s": {k: (v["median"] if v else None) for k, v in rate.items()},
        "latency_us": latency,
        "peak_rss_mib": {k: rss.get(k) for k in keys},
        "ratios": ratios,
        "min_median_max": {"wall_s": wall, "per_node_us": per_node, "validations_per_s": rate},
        "extra": scenario.extra(case, samples) if scenario.extra is not None else {},
        "skipped": dict(skipped),
    }


# -- peak RSS in a fresh process ----------------------------------------------------------------

_RSS_CHILD: Final = (
    "from gategraph.benchmarks.harness import _rss_child; _rss_child({scenario!r}, {n}, "
    "{concurrency}, {name!r})"
)


def peak_rss(case: Case, name: str) -> float | None:
    """Peak RSS (MiB) of a fresh process that builds and runs contender ``name`` once.

    The child reads its own high-water mark, ``VmHWM`` in ``/proc/self/status``:
    ``ru_maxrss`` survives fork+exec on Linux and would report the parent's peak instead.
    ``None`` where ``/proc`` is missing (not Linux) or the child failed.
    """
    if not Path("/proc/self/status").exists():
        return None
    code = _RSS_CHILD.format(
        scenario=case.scenario, n=case.n, concurrency=case.concurrency, name=name
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=900
    )
    if done.returncode != 0 or not done.stdout.strip():
        return None
    return int(done.stdout.strip().splitlines()[-1]) / 1024


def _rss_child(scenario_name: str, n: int, concurrency: int, name: str) -> None:
    """In the child: run one contender once, print VmHWM in KiB."""
    scenario = get_scenario(scenario_name)
    with contextlib.ExitStack() as stack:
        contender = scenario.build(Case(scenario_name, n, concurrency), stack, [name])[name]

        async def main() -> None:
            await contender.run()

        run_on(contender.backend, main)
    with open("/proc/self/status", encoding="ascii") as status:
        print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))


# -- scenarios --------------------------------------------------------------------------------


def scenario_names() -> tuple[str, ...]:
    """Every scenario ``--scenario`` accepts."""
    return SCENARIO_ORDER


def get_scenario(name: str) -> Scenario:
    """The width scenario called ``name`` (``KeyError`` for an unknown one)."""
    module = importlib.import_module(f"gategraph.benchmarks.{_MODULES[name]}")
    scenarios: Sequence[Scenario] = module.SCENARIOS
    return next(s for s in scenarios if s.name == name)


def measure_scenario(scenario: Scenario, settings: Settings) -> dict[str, Any]:
    """Every case of ``scenario``; its JSON record."""
    began = time.perf_counter()
    sizes = settings.sizes or (scenario.quick_sizes if settings.quick else scenario.sizes)
    cases: list[dict[str, Any]] = []
    for n in sizes:
        for level in scenario.levels(n, settings):
            case = Case(scenario.name, n, level)
            if settings.progress is not None:
                settings.progress(f"{scenario.name}: N={n:,} concurrency={level:,}")
            cases.append(measure_case(scenario, case, settings, largest=n == max(sizes)))
    return {
        "title": scenario.title,
        "backend": scenario.backend,
        "contenders": list(dict.fromkeys([ENGINE, *BASELINES, *scenario.contenders])),
        "notes": list(scenario.notes),
        "cases": cases,
        "seconds": time.perf_counter() - began,
    }


def run_benchmarks(names: Sequence[str], settings: Settings) -> dict[str, Any]:
    """Measure the scenarios ``names`` (in the harness's order); return the whole report."""
    began = time.perf_counter()
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "machine": machine(),
        "settings": {
            "quick": settings.quick,
            "repeats": settings.repeats,
            "warmup": 1,
            "sizes": list(settings.sizes) if settings.sizes else None,
            "concurrency": list(settings.concurrency) if settings.concurrency else None,
            "scenarios": [name for name in SCENARIO_ORDER if name in names],
        },
        "baselines": _baselines_info(),
        "scenarios": {},
        "ray": None,
        "startup": None,
        "embed": None,
        "suite": None,
        "project": None,
    }
    for name in SCENARIO_ORDER:
        if name not in names:
            continue
        if name == "ray":
            from .bench_ray import measure_ray

            if settings.progress is not None:
                settings.progress("ray: the Ray executor against bare Ray tasks")
            report["ray"] = measure_ray(settings)
        elif name == "startup":
            from .bench_startup import measure_startup

            if settings.progress is not None:
                settings.progress("startup: import time and gategraph --help")
            report["startup"] = measure_startup(settings)
        elif name == "embed":
            from .bench_embed import measure_embed

            if settings.progress is not None:
                settings.progress("embed: one-call validation, per-call overhead")
            report["embed"] = measure_embed(settings)
        elif name == "suite":
            from .bench_suite import measure_suite

            if settings.progress is not None:
                settings.progress("suite: a real project's tests, sandboxed, in a process, by hand")
            report["suite"] = measure_suite(settings)
        elif name == "project":
            from .bench_project import measure_project

            if settings.progress is not None:
                settings.progress("project: an agent's edit gated by gategraph run, and by hand")
            report["project"] = measure_project(settings)
        else:
            report["scenarios"][name] = measure_scenario(get_scenario(name), settings)
    report["targets"] = evaluate_targets(report)
    report["seconds"] = time.perf_counter() - began
    return report


def _baselines_info() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    langgraph: str | None = None
    installed = _langgraph_installed()
    if installed:
        try:
            langgraph = version("langgraph")
        except PackageNotFoundError:  # importable without metadata: a source checkout
            langgraph = "unknown version"
    return {
        "asyncio_gather": "asyncio.gather of N coroutines doing the same work (the floor)",
        "anyio_taskgroup": "one anyio task per node, in one task group",
        "langgraph": "LangGraph's Send fan-out of N branches"
        + (f" (langgraph {langgraph})" if langgraph else ""),
        "langgraph_installed": installed,
        "langgraph_note": None
        if installed
        else "LangGraph is not installed: its baseline is skipped (pip install 'gategraph[bench]')",
    }


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    from importlib.metadata import PackageNotFoundError, version

    def package(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "processor": _cpu_model() or platform.processor() or platform.machine(),
        "memory_gib": _memory_gib(),
        "gategraph": package("gategraph"),
        "anyio": package("anyio"),
        "trio": package("trio"),
        "uvloop": package("uvloop"),
        "langgraph": package("langgraph"),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return None


def _memory_gib() -> float | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024**2, 1)
    return None


# -- targets ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """One goal: a figure of the report and the bound it should meet."""

    id: str
    text: str
    figure: Callable[[Mapping[str, Any]], float | None]
    """Reads the measured figure from the report; ``None`` when the run did not measure it."""
    bound: float
    better: Literal["lower", "higher"]
    unit: str
    needs: str
    """What run measures it, for the "not measured" note."""


def _case(report: Mapping[str, Any], scenario: str, n: int, concurrency: int | None = None) -> Any:
    found = report["scenarios"].get(scenario)
    if found is None:
        return None
    for case in found["cases"]:
        if case["n"] == n and (concurrency is None or case["concurrency"] == concurrency):
            return case
    return None


def _figure(
    scenario: str,
    n: int | None,
    read: Callable[[Any], float | None],
    concurrency: int | None = None,
) -> Callable[[Mapping[str, Any]], float | None]:
    def figure(report: Mapping[str, Any]) -> float | None:
        if n is None:
            cases = (report["scenarios"].get(scenario) or {}).get("cases") or []
            case = max(cases, key=lambda c: c["n"], default=None)
        else:
            case = _case(report, scenario, n, concurrency)
        if case is None:
            return None
        try:
            return read(case)
        except (KeyError, TypeError, ZeroDivisionError):
            return None

    return figure


def _startup(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    def figure(report: Mapping[str, Any]) -> float | None:
        startup = report.get("startup")
        if startup is None:
            return None
        value = startup[key]
        return float(value["median"] if isinstance(value, Mapping) else value)

    return figure


def _ray(
    read: Callable[[Mapping[str, Any]], float | None],
) -> Callable[[Mapping[str, Any]], float | None]:
    def figure(report: Mapping[str, Any]) -> float | None:
        ray = report.get("ray")
        if ray is None or "not_measured" in ray:
            return None
        return read(ray)

    return figure


def _suite(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    def figure(report: Mapping[str, Any]) -> float | None:
        suite = report.get("suite")
        if suite is None or suite["project"] is None:
            return None
        value = suite["ratios"][key]
        return None if value is None else float(value)

    return figure


def _project(key: str, part: str = "ratios") -> Callable[[Mapping[str, Any]], float | None]:
    def figure(report: Mapping[str, Any]) -> float | None:
        # The large project, or the one --project named: the run's real-sized work.
        project = report.get("project")
        for entry in [] if project is None else project["projects"]:
            if entry["size"] in ("large", "given") and entry["project"] is not None:
                value = (entry.get(part) or {}).get(key)
                return None if value is None else float(value)
        return None

    return figure


def _embed(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    def figure(report: Mapping[str, Any]) -> float | None:
        embed = report.get("embed")
        return None if embed is None else float(embed[key])

    return figure


TARGETS: Final = (
    # Issue 16: the engine at the event loop's own limit (issue 5 asked for 2x, 1.25x).
    Target(
        "noop-vs-gather",
        "N=10,000 no-op validations: per-validation time ≤ 1.3x asyncio.gather's",
        _figure("noop", 10_000, lambda c: c["ratios"]["asyncio_gather"]),
        1.3,
        "lower",
        "x",
        "scenario noop at N=10,000",
    ),
    Target(
        "noop-artifact",
        "the same with an artifact every validation is given (frozen once per run): ≤ 1.3x"
        " asyncio.gather's",
        _figure("noop", 10_000, lambda c: c["extra"]["artifact_vs_gather"]),
        1.3,
        "lower",
        "x",
        "scenario noop at N=10,000",
    ),
    Target(
        "vs-langgraph",
        "N=5,000 no-op: ≥ 50x less per-node overhead than LangGraph's Send",
        _figure(
            "noop", 5_000, lambda c: c["per_node_us"]["langgraph"] / c["per_node_us"]["gategraph"]
        ),
        50.0,
        "higher",
        "x",
        "scenario noop at N=5,000, full run, LangGraph installed",
    ),
    Target(
        "io-floor",
        "10,000 validations awaiting 10 ms at concurrency 1,000: wall ≤ 1.15x the bare-worker"
        " loop floor's",
        _figure("io", 10_000, lambda c: c["ratios"]["anyio_workers"], concurrency=1_000),
        1.15,
        "lower",
        "x",
        "scenario io at N=10,000",
    ),
    Target(
        "io-floor-1k",
        "the same at N=1,000 (concurrency 1,000): wall ≤ 1.15x the loop floor's",
        _figure("io", 1_000, lambda c: c["ratios"]["anyio_workers"], concurrency=1_000),
        1.15,
        "lower",
        "x",
        "scenario io at N=1,000",
    ),
    Target(
        "ray-overhead",
        "the Ray executor, no-op validations: per-validation time ≤ 1.2x bare Ray tasks'",
        _ray(lambda r: r["overhead"]["ratio"]),
        1.2,
        "lower",
        "x",
        "scenario ray, with the ray extra installed",
    ),
    Target(
        "sqlite-share",
        "SQLite event log: ≥ 50% of the in-memory log's throughput (N=10,000)",
        _figure("eventlog", 10_000, lambda c: c["extra"]["sqlite_share_of_memory"] * 100),
        50.0,
        "higher",
        "%",
        "scenario eventlog at N=10,000",
    ),
    Target(
        "postgres-share",
        "PostgreSQL event log: ≥ 50% of the SQLite log's throughput (N=10,000)",
        _figure("eventlog", 10_000, lambda c: c["extra"]["postgres_share_of_sqlite"] * 100),
        50.0,
        "higher",
        "%",
        "scenario eventlog at N=10,000, with GATEGRAPH_BENCH_POSTGRES naming a server",
    ),
    Target(
        "rss-100k",
        "100,000 no-op validations: peak RSS < 150 MiB (fresh process, VmHWM)",
        _figure("noop", 100_000, lambda c: c["peak_rss_mib"]["gategraph"]),
        150.0,
        "lower",
        " MiB",
        "scenario noop at N=100,000",
    ),
    Target(
        "cpu-process",
        "CPU-bound, process isolation: ≥ 1.7x the throughput of one core (2 cores)",
        _figure("cpu-process", None, lambda c: c["extra"]["speedup_vs_one_core"]),
        1.7,
        "higher",
        "x",
        "scenario cpu-process",
    ),
    # Issue 12: the sandbox's cost beside process isolation, and its scaling.
    Target(
        "sandbox-overhead",
        "sandboxed no-op validations: per-call time ≤ 1.2x process isolation's",
        _figure("sandbox", None, lambda c: c["extra"]["sandbox_vs_process_noop"]),
        1.2,
        "lower",
        "x",
        "scenario sandbox, on a machine that can sandbox",
    ),
    Target(
        "sandbox-cpu",
        "CPU-bound, sandbox isolation: ≥ 1.7x the throughput of one core (2 cores)",
        _figure("sandbox", None, lambda c: c["extra"]["speedup_vs_one_core"]),
        1.7,
        "higher",
        "x",
        "scenario sandbox, on a machine that can sandbox",
    ),
    # Issue 13: what the supervisor adds to the engine.
    Target(
        "plan-overhead",
        "the whole lifecycle (run_plan), N=10,000 no-op validations: ≤ 1.5x execute_graph"
        " alone per validation",
        _figure("plan", 10_000, lambda c: c["extra"]["plan_vs_engine"]),
        1.5,
        "lower",
        "x",
        "scenario plan at N=10,000",
    ),
    Target(
        "import",
        "import gategraph.runtime < 150 ms",
        _startup("import_ms"),
        150.0,
        "lower",
        " ms",
        "scenario startup",
    ),
    Target(
        "import-engine",
        "the same bound for the first real use: from gategraph.runtime import execute_graph"
        " (not a target; names load on first use)",
        _startup("import_engine_ms"),
        150.0,
        "lower",
        " ms",
        "scenario startup",
    ),
    Target(
        "help",
        "gategraph --help < 300 ms",
        _startup("help_ms"),
        300.0,
        "lower",
        " ms",
        "scenario startup",
    ),
    # Issue 27 item 5: the fixed costs a user pays on every command and every plan.
    Target(
        "check",
        "gategraph check of a small plan within 5x the bare interpreter's start-up",
        _startup("check_vs_python"),
        5.0,
        "lower",
        "x",
        "scenario startup",
    ),
    Target(
        "first-run",
        "the first execute_graph in a fresh process (import included) < 150 ms",
        _startup("first_run_ms"),
        150.0,
        "lower",
        " ms",
        "scenario startup",
    ),
    Target(
        "run-overhead",
        "gategraph run of a plan with no work in it < 300 ms beyond the interpreter's start",
        _startup("run_beyond_python_ms"),
        300.0,
        "lower",
        " ms",
        "scenario startup",
    ),
    # Issue 10: a framework pays validate()'s fixed cost on every step of its loop.
    Target(
        "validate-overhead",
        "one-call validation of two no-op validations: overhead < 1 ms per call",
        _embed("overhead_ms"),
        1.0,
        "lower",
        " ms",
        "scenario embed",
    ),
    # Issue 26: the sandbox is the default for a suite of the candidate's own code, so a
    # real project's tests must not notice it.
    Target(
        "suite-sandbox",
        "a real project's test suite (pytest_suite), sandboxed by default: wall ≤ 1.1x "
        "the same validation with isolation: process",
        _suite("sandbox_vs_process"),
        1.1,
        "lower",
        "x",
        "scenario suite",
    ),
    # Gating an agent's change must be worth it against checking it by hand: faster than
    # a person running the checks one after the other, hardly slower than both at once.
    Target(
        "project-vs-sequential",
        "an agent's edit of a large real project (or --project's), gated by gategraph run "
        "on its syntax and tests: wall ≤ 0.8x the same checks by hand, one after the other",
        _project("gated_vs_sequential"),
        0.8,
        "lower",
        "x",
        "scenario project",
    ),
    Target(
        "project-vs-parallel",
        "the same: wall ≤ 1.1x the same checks by hand, started at once",
        _project("gated_vs_parallel"),
        1.1,
        "lower",
        "x",
        "scenario project",
    ),
    Target(
        "project-disk",
        "the same, a first run's peak disk beyond the tree ≤ 1.5x the change plus the content"
        " store's first snapshot",
        _project("first_peak_vs_change_and_snapshot", "disk"),
        1.5,
        "lower",
        "x",
        "scenario project",
    ),
)
"""The targets of issues 5, 10, 12, 13, 16 and 26: measured on every run, never asserted."""


def evaluate_targets(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each target with the measured figure and whether it is met (``None``: not measured)."""
    rows = []
    for target in TARGETS:
        value = target.figure(report)
        met = (
            None
            if value is None
            else value <= target.bound
            if target.better == "lower"
            else value >= target.bound
        )
        rows.append(
            {
                "id": target.id,
                "target": target.text,
                "bound": target.bound,
                "better": target.better,
                "unit": target.unit.strip(),
                "measured": value,
                "met": met,
                "needs": target.needs,
            }
        )
    return rows


# -- table ------------------------------------------------------------------------------------

_LABELS: Final = {
    "gategraph": "gategraph",
    "asyncio_gather": "asyncio.gather",
    "anyio_taskgroup": "anyio tasks",
    "langgraph": "LangGraph Send",
    "gategraph_memory": "gategraph, memory log",
    "gategraph_postgres": "gategraph, PostgreSQL log",
    "gategraph_trio": "gategraph on trio",
    "anyio_taskgroup_trio": "anyio tasks on trio",
    "one_core": "one core, serial",
    "anyio_workers": "bare anyio workers (loop floor)",
    "gategraph_process": "gategraph, process",
    "gategraph_noop": "gategraph no-op",
    "gategraph_process_noop": "gategraph no-op, process",
    "gategraph_uvloop": "gategraph on uvloop",
    "asyncio_gather_uvloop": "asyncio.gather on uvloop",
    "anyio_workers_uvloop": "loop floor on uvloop",
}


def _label(name: str) -> str:
    return _LABELS.get(name, name)


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cell(figures: Mapping[str, float] | None) -> str:
    if figures is None:
        return "—"
    return f"{_num(figures['median'])} ({_num(figures['min'])}–{_num(figures['max'])})"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _scenario_table(name: str, scenario: Mapping[str, Any]) -> list[str]:
    cases = scenario["cases"]
    shown = [
        key
        for key in scenario["contenders"]
        if any(case["per_node_us"].get(key) is not None for case in cases)
    ]
    # The engine on uvloop is compared with the floors on uvloop, in the case's extra line.
    others = [key for key in shown if key != ENGINE and not key.endswith("_uvloop")]
    head = ["N", "conc."]
    head += [f"{_label(key)} µs/node" for key in shown]
    head += [f"vs {_label(key)}" for key in others]
    head += ["validations/s", "p50 / p99 µs", "peak RSS MiB"]
    lines = [
        f"### {name} — {scenario['title']}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    for case in cases:
        spreads = case["min_median_max"]["per_node_us"]
        rate = case["validations_per_s"][ENGINE]
        latency = case["latency_us"][ENGINE]
        rss = case["peak_rss_mib"][ENGINE]
        row = [f"{case['n']:,}", f"{case['concurrency']:,}"]
        row += [_cell(spreads.get(key)) for key in shown]
        row += [_ratio(case["ratios"].get(key)) for key in others]
        row += [
            f"{rate:,.0f}" if rate else "—",
            f"{_num(latency['p50'])} / {_num(latency['p99'])}" if latency else "—",
            f"{rss:.0f}" if rss is not None else "—",
        ]
        lines.append("| " + " | ".join(row) + " |")
    extras = [_extra_line(case) for case in cases]
    lines += [line for line in extras if line]
    notes = list(scenario["notes"])
    # A baseline the scenario has no counterpart for is explained in its notes already.
    skipped = sorted(
        {why for case in cases for why in case["skipped"].values() if why != _NO_COUNTERPART}
    )
    notes += [f"skipped: {why}" for why in skipped]
    if notes:
        lines.append("")
        lines += [f"- {note}" for note in notes]
    return lines


def _extra_line(case: Mapping[str, Any]) -> str:
    extra = case["extra"]
    if not extra:
        return ""
    parts = []
    for key, value in extra.items():
        if isinstance(value, float):
            parts.append(f"{key} {value:.3g}")
        elif value is not None:
            parts.append(f"{key} {value}")
    return f"\nN={case['n']:,} concurrency={case['concurrency']:,}: " + ", ".join(parts)


def _target_rows(report: Mapping[str, Any]) -> list[str]:
    lines = ["| target | measured | result |", "|---|---:|---|"]
    for row in report["targets"]:
        value = row["measured"]
        unit = row["unit"]
        if value is None:
            shown, result = "—", f"not measured (needs {row['needs']})"
        else:
            shown = f"{value:,.2f}{unit if unit in ('x', '%') else ' ' + unit}"
            result = "met" if row["met"] else "**missed**"
        lines.append(f"| {row['target']} | {shown} | {result} |")
    return lines


def render_table(report: Mapping[str, Any]) -> str:
    """The report as Markdown tables: one per scenario, start-up, one-call validation, then
    the targets."""
    m = report["machine"]
    lines = [
        f"gategraph bench — {m['processor']}, {m['cpus']} CPUs, "
        f"{m['memory_gib']} GiB, Python {m['python']}, {m['platform']}"
        + (" (--quick)" if report["settings"]["quick"] else ""),
        "Figures: median (min–max) of interleaved repeats after a warm-up; "
        "vs X = gategraph µs/node ÷ X µs/node (below 1: gategraph is faster).",
    ]
    note = report["baselines"].get("langgraph_note")
    if note:
        lines.append(f"Note: {note}")
    for name, scenario in report["scenarios"].items():
        lines += ["", *_scenario_table(name, scenario)]
    startup = report.get("startup")
    if startup is not None:
        lines += [
            "",
            "### startup — fresh processes, milliseconds",
            "",
            "| measure | median (min–max) |",
            "|---|---:|",
            f"| import gategraph.runtime | {_cell(startup['import_ms'])} |",
            f"| … and load execute_graph (first use) | {_cell(startup['import_engine_ms'])} |",
            f"| … and load every public name | {_cell(startup['import_all_ms'])} |",
            f"| gategraph --help (whole process) | {_cell(startup['help_ms'])} |",
            f"| python -c pass (the interpreter alone) | {_cell(startup['python_ms'])} |",
            f"| gategraph check plan.yaml (whole process) | {_cell(startup['check_ms'])} |",
            f"| first execute_graph, import included | {_cell(startup['first_run_ms'])} |",
            f"| gategraph run plan.yaml (whole process) | {_cell(startup['run_ms'])} |",
        ]
    ray = report.get("ray")
    if ray is not None:
        lines += ["", *_ray_table(ray)]
    embed = report.get("embed")
    if embed is not None:
        lines += ["", *_embed_table(embed)]
    suite = report.get("suite")
    if suite is not None:
        from .bench_suite import suite_table

        lines += ["", *suite_table(suite)]
    project = report.get("project")
    if project is not None:
        from .bench_project import project_table

        lines += ["", *project_table(project)]
    lines += ["", "### targets", "", *_target_rows(report)]
    return "\n".join(lines)


def _us(value_ms: float) -> str:
    # The floor is below a µs, validate() a fraction of a ms: µs with three significant
    # digits shows both (_num's two decimals of ms would print the floor as 0.00).
    value = value_ms * 1000
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _ray_table(ray: Mapping[str, Any]) -> list[str]:
    if "not_measured" in ray:
        return ["### ray — the Ray executor", "", f"- not measured: {ray['not_measured']}"]
    overhead = ray["overhead"]
    figures = overhead["per_validation_us"]
    crossover = ray["crossover"]
    found = crossover["crossover_call_ms"]
    cancel = ray["cancellation"]
    released = cancel["cpus_released_after_s"]
    lines = [
        f"### ray — the Ray executor (Ray {ray['ray']}, a local instance of {ray['cpus']} CPUs)",
        "",
        f"{overhead['n']:,} no-op validations at once, µs per validation: gategraph on Ray "
        f"{_cell(figures['gategraph_ray'])}, bare Ray tasks {_cell(figures['ray_tasks'])}: "
        f"{overhead['ratio']:.2f}x",
        "",
        "| call cost | process isolation µs/call | Ray µs/call | Ray vs process |",
        "|---:|---:|---:|---:|",
    ]
    for row in crossover["costs"]:
        per_call = row["per_call_us"]
        lines.append(
            f"| {row['call_ms']} ms | {_cell(per_call['gategraph_process'])} | "
            f"{_cell(per_call['gategraph_ray'])} | {row['ray_vs_process']:.2f}x |"
        )
    lines += [
        "",
        f"- crossover ({crossover['calls']} calls, one worker per core): "
        + (
            f"Ray is as fast as process isolation from {found} ms a call"
            if found is not None
            else "none within these call costs: on one machine Ray adds scheduling, no cores"
        ),
        f"- cancellation: {cancel['tasks']} validations sleeping 30 s with a "
        f"{cancel['timeout_s']:g} s timeout ended in {cancel['wall_s']:.2f} s as "
        f"{', '.join(cancel['errors'])}; Ray's CPUs were free again "
        + (f"{released * 1000:.0f} ms later" if released is not None else "not within 30 s"),
    ]
    return lines


def _embed_table(embed: Mapping[str, Any]) -> list[str]:
    def cell(key: str) -> str:
        figures = embed[key]
        return f"{_us(figures['median'])} ({_us(figures['min'])}–{_us(figures['max'])})"

    ratio = embed["ratios"]["validate_vs_direct"]
    return [
        f"### embed — one-call validation of {embed['validations']} no-op validations, "
        f"µs per call ({embed['calls']:,} calls a sample, {embed['repeats']} rounds, "
        f"{embed['backend']})",
        "",
        "| measure | median (min–max) |",
        "|---|---:|",
        f"| the validations awaited directly (the floor) | {cell('direct_ms')} |",
        f"| validate(None, validations, artifact=...) | {cell('validate_ms')} |",
        f"| … with a one-file change | {cell('validate_files_ms')} |",
        f"| execute_graph on the same graph, loaded once | {cell('execute_graph_ms')} |",
        "",
        f"overhead (validate − floor) {_us(embed['overhead_ms'])} µs"
        + (f" ({ratio:,.0f}x the floor)" if ratio is not None else "")
        + f"; writing the change out {_us(embed['files_ms'])} µs; "
        f"on top of execute_graph {_us(embed['over_engine_ms'])} µs",
    ]


# -- plot -------------------------------------------------------------------------------------


def plot_report(report: Mapping[str, Any], path: Path) -> None:
    """Per-node time and throughput against N, log scales, one row per width scenario.

    Needs matplotlib (the ``bench`` extra); raises ``ModuleNotFoundError`` without it.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display needed; must come before pyplot
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    rows = [
        (name, scenario)
        for name, scenario in report["scenarios"].items()
        if len({case["n"] for case in scenario["cases"]}) > 1
    ]
    if not rows:
        rows = list(report["scenarios"].items())
    # One colour per contender across every row, the engine's the boldest.
    palette = plt.get_cmap("tab10").colors
    names = list(dict.fromkeys(k for _, s in rows for k in s["contenders"]))
    colours = {name: palette[i % len(palette)] for i, name in enumerate(names)}
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    figure, axes = plt.subplots(
        len(rows), 2, figsize=(11, 3.3 * max(1, len(rows))), squeeze=False, layout="constrained"
    )
    for (name, scenario), (left, right) in zip(rows, axes, strict=True):
        for key in scenario["contenders"]:
            # One point per N: the first concurrency level measured at that N.
            points: dict[int, Mapping[str, Any]] = {}
            for case in scenario["cases"]:
                points.setdefault(case["n"], case)
            xs = [n for n, case in sorted(points.items()) if case["per_node_us"].get(key)]
            if not xs:
                continue
            style = {
                "color": colours[key],
                "label": _label(key),
                "linewidth": 2.8 if key == ENGINE else 1.2,
                "zorder": 3 if key == ENGINE else 2,
            }
            left.plot(xs, [points[n]["per_node_us"][key] for n in xs], "o-", **style)
            right.plot(xs, [points[n]["validations_per_s"][key] for n in xs], "o-", **style)
        for axis, ylabel in ((left, "µs per node (wall / N)"), (right, "validations / s")):
            axis.set_xscale("log")
            axis.set_yscale("log")
            axis.xaxis.set_major_formatter(plain)
            axis.yaxis.set_major_formatter(plain)
            low, high = axis.get_ylim()
            # Within one decade there may be no major tick: label the minor ones then.
            axis.yaxis.set_minor_formatter(plain if high / low < 10 else NullFormatter())
            axis.set_xlabel("N (validations per run)")
            axis.set_ylabel(ylabel)
            axis.set_title(f"{name}: {scenario['title']}", fontsize=8)
            axis.grid(True, which="both", alpha=0.3)
        left.legend(fontsize=7)
    m = report["machine"]
    figure.suptitle(
        f"gategraph bench — {m['cpus']} CPUs, Python {m['python']}; medians of interleaved repeats",
        fontsize=11,
    )
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_json(report: Mapping[str, Any], path: Path) -> None:
    """Write the report as indented JSON."""
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
