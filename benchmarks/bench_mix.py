"""A realistic mix: 10% of the validations fail and 1% time out, the rest pass at once.

    python benchmarks/bench_mix.py [--quick] [--n 1000,10000]

Validation ``i`` times out when ``i % 100 == 0`` (it sleeps 10 s under a 20 ms timeout),
fails when ``i % 10 == 5`` and passes otherwise; so N=1,000 has 10 timeouts and 100
failures. The engine turns a timeout into ``passed: false`` with ``data.error = "timeout"``;
the baselines do the same with ``asyncio.timeout`` and ``anyio.move_on_after``. Every run's
wall time includes at least one 20 ms timeout, which dominates at small N.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import anyio
from gategraph.benchmarks import baselines
from gategraph.benchmarks.fanout import FAIL, NOOP, SLEEP, engine, fanout_graph
from gategraph.benchmarks.harness import Scenario

if TYPE_CHECKING:
    import contextlib
    from collections.abc import Collection

    from gategraph.benchmarks.harness import Case, Contender

__all__ = ["SCENARIOS", "TIMEOUT", "build", "role"]

TIMEOUT = 0.02
"""Seconds before a slow validation times out."""
_SLEEP = 10.0

_PASSED = {"passed": True, "message": "ok"}
_FAILED = {"passed": False, "message": "failed on purpose"}
_TIMED_OUT = {"passed": False, "message": "timed out", "data": {"error": "timeout"}}


def role(i: int) -> str:
    """What validation ``i`` does: ``timeout``, ``fail`` or ``pass``."""
    if i % 100 == 0:
        return "timeout"
    return "fail" if i % 10 == 5 else "pass"


def _node(i: int) -> dict[str, Any]:
    kind = role(i)
    if kind == "timeout":
        return {
            "id": f"n{i}",
            "validation": "slow",
            "timeout": TIMEOUT,
            "arguments": {"seconds": _SLEEP},
        }
    return {"id": f"n{i}", "validation": "bad" if kind == "fail" else "ok"}


async def _on_asyncio(i: int) -> dict[str, Any]:
    kind = role(i)
    if kind == "timeout":
        try:
            async with asyncio.timeout(TIMEOUT):
                await asyncio.sleep(_SLEEP)
        except TimeoutError:
            return _TIMED_OUT
    return _FAILED if kind == "fail" else _PASSED


async def _on_anyio(i: int) -> dict[str, Any]:
    kind = role(i)
    if kind == "timeout":
        with anyio.move_on_after(TIMEOUT):
            await anyio.sleep(_SLEEP)
        return _TIMED_OUT
    return _FAILED if kind == "fail" else _PASSED


def build(case: Case, stack: contextlib.ExitStack, names: Collection[str]) -> dict[str, Contender]:
    """The contenders of an N-wide mix of passing, failing and timing-out validations."""
    n, c = case.n, case.concurrency
    built: dict[str, Contender] = {}
    if "gategraph" in names:
        graph = fanout_graph(
            n,
            concurrency=c,
            validations=[
                {"name": "ok", "entrypoint": NOOP},
                {"name": "bad", "entrypoint": FAIL},
                {"name": "slow", "entrypoint": SLEEP},
            ],
            nodes=[_node(i) for i in range(n)],
        )
        passed = sum(1 for i in range(n) if role(i) == "pass")
        built["gategraph"] = engine(graph, n=n, concurrency=c, passed=passed)
    if "asyncio_gather" in names:
        built["asyncio_gather"] = baselines.asyncio_gather(n, _on_asyncio, c)
    if "anyio_taskgroup" in names:
        built["anyio_taskgroup"] = baselines.anyio_taskgroup(n, _on_anyio, c)
    if "langgraph" in names:
        built["langgraph"] = baselines.langgraph(n, _on_asyncio, c)
    return built


SCENARIOS = (
    Scenario(
        name="mix",
        title=f"10% failing, 1% timing out ({TIMEOUT * 1000:g} ms timeout), unbounded",
        build=build,
        contenders=("gategraph", "asyncio_gather", "anyio_taskgroup", "langgraph"),
        sizes=(100, 1_000, 10_000),
        quick_sizes=(1_000,),
    ),
)

if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("mix")
