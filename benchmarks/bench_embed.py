"""One-call validation: what :func:`gategraph.runtime.validate` costs per call, over
running its validations by hand.

    python benchmarks/bench_embed.py [--quick] [--repeat 15]

A framework that embeds gategraph calls ``validate`` once per proposed change, so its fixed
cost is paid on every step of an agent's loop. Each call here runs the same two no-op
validations (``gategraph.runtime.testing:passing``), on asyncio, in one process:

- ``direct_ms``: the two validation coroutines awaited by hand, one after the other (the
  floor: what the validations themselves cost);
- ``validate_ms``: ``await validate(None, [two inline validations], artifact={...})``;
- ``validate_files_ms``: the same with a one-file change (``{"a.py": "x = 1\\n"}``), so the
  difference is the cost of writing the change out to a folder and removing it;
- ``execute_graph_ms``: ``execute_graph`` over the equivalent graph, loaded once outside the
  clock (the engine alone: what ``validate`` adds on top of it is building and loading the
  graph and judging the round).

A sample is ``calls`` calls in a row (200, 50 with ``--quick``), reported per call. Each
measure runs one sample as a warm-up, then ``repeats`` rounds (15, 5 with ``--quick``), the
order rotating from round to round, with ``gc.collect()`` before each sample; figures are
min / median / max over the rounds. Every call's result is checked (both validations ran and
passed), the count compared after the clock stops.

Target (issue 10): median(validate) − median(direct) under 1 ms per call (it was 25 ms when
each caller built a one-node graph with ``load_graph`` and ran ``execute_graph`` itself).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

import anyio
from gategraph.benchmarks.fanout import NOOP
from gategraph.benchmarks.harness import Contender, Sample, interleave, spread

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gategraph.benchmarks.harness import Settings

__all__ = ["MEASURES", "embed_contenders", "measure_embed"]

MEASURES: Final = ("direct", "validate", "validate_files", "execute_graph")
"""What is timed, in the order of the first round; each is reported as ``<name>_ms``."""

CALLS: Final = 200
QUICK_CALLS: Final = 50
REPEATS: Final = 15
QUICK_REPEATS: Final = 5

VALIDATIONS: Final = (
    {"name": "a", "entrypoint": NOOP},
    {"name": "b", "entrypoint": NOOP},
)
ARTIFACT: Final = {"proposal": "x = 1", "step": 1}
FILES: Final = {"a.py": "x = 1\n"}


def _timed(name: str, calls: int, call: Callable[[], Awaitable[int]]) -> Contender:
    """``calls`` calls of ``call`` (which returns how many validations passed) as one sample;
    the run fails, after its clock stops, unless every call passed both."""

    async def run() -> Sample:
        passed = 0
        started = time.perf_counter()
        for _ in range(calls):
            passed += await call()
        wall = time.perf_counter() - started
        if passed != 2 * calls:
            raise AssertionError(
                f"embed {name}: {passed} of {2 * calls} validations passed in {calls} calls"
            )
        return Sample(wall)

    return Contender(name, run)


def embed_contenders(calls: int) -> list[Contender]:
    """The four measures, each a contender whose sample is ``calls`` calls."""
    from gategraph.runtime import execute_graph, load_graph, validate
    from gategraph.runtime.testing import passing

    validations = [dict(v) for v in VALIDATIONS]
    artifact = dict(ARTIFACT)
    files = dict(FILES)
    # The graph validate() builds for these validations, loaded once: the engine's share.
    graph = load_graph(
        {
            "version": 1,
            "name": "validate",
            "nodes": [{"id": v["name"], "validation": v["name"]} for v in validations],
            "validations": validations,
            "policy": {"allow_ungated": False},
        }
    )

    async def direct() -> int:
        # The coroutine itself, awaited in turn, as a framework's own loop would: no task.
        first = await passing(artifact=artifact)
        second = await passing(artifact=artifact)
        return int(first["passed"] is True) + int(second["passed"] is True)

    async def one_call() -> int:
        verdict = await validate(None, validations, artifact=artifact)
        return sum(r.result.passed for r in verdict.records) if verdict.passed else 0

    async def with_files() -> int:
        verdict = await validate(files, validations, artifact=artifact)
        return sum(r.result.passed for r in verdict.records) if verdict.passed else 0

    async def engine() -> int:
        run = await execute_graph(graph, artifact=artifact)
        return sum(r.result.passed for r in run.validations)

    bodies = {
        "direct": direct,
        "validate": one_call,
        "validate_files": with_files,
        "execute_graph": engine,
    }
    return [_timed(name, calls, bodies[name]) for name in MEASURES]


def _ratio(value: float, floor: float) -> float | None:
    # A clock too coarse to see the floor at all gives no ratio rather than a division error.
    return value / floor if floor > 0 else None


def measure_embed(settings: Settings) -> dict[str, Any]:
    """Per-call milliseconds of each measure (min / median / max) and the overhead."""
    repeats = settings.repeats or (QUICK_REPEATS if settings.quick else REPEATS)
    calls = settings.calls or (QUICK_CALLS if settings.quick else CALLS)
    contenders = embed_contenders(calls)
    samples, _ = anyio.run(interleave, contenders, repeats, False, backend="asyncio")
    per_call = {name: spread([s.wall / calls * 1000 for s in samples[name]]) for name in MEASURES}
    median = {name: figures["median"] for name, figures in per_call.items()}
    return {
        "backend": "asyncio",
        "validations": len(VALIDATIONS),
        "calls": calls,
        "repeats": repeats,
        **{f"{name}_ms": per_call[name] for name in MEASURES},
        "overhead_ms": median["validate"] - median["direct"],
        "files_ms": median["validate_files"] - median["validate"],
        "over_engine_ms": median["validate"] - median["execute_graph"],
        "ratios": {
            "validate_vs_direct": _ratio(median["validate"], median["direct"]),
            "validate_vs_execute_graph": _ratio(median["validate"], median["execute_graph"]),
        },
    }


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("embed")
