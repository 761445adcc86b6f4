"""The baselines the engine is measured against, doing the same work per node.

- ``asyncio_gather``: ``asyncio.gather`` of N coroutines (bounded by a semaphore when the
  case is) — the floor: no events, no results kept beyond gather's list;
- ``anyio_taskgroup``: one anyio task per node in one task group (bounded by a capacity
  limiter when the case is);
- ``langgraph``: LangGraph's ``Send`` fan-out of N branches, results gathered with the
  ``operator.add`` reducer of its map-reduce pattern (the ``bench`` extra; imported only
  when this baseline is built).

Each baseline takes a *call*, ``call(i)``: what node ``i`` does (no-op, sleep, CPU work ...),
written once per scenario for asyncio and once for anyio so that neither baseline pays for
the other's library.
"""

from __future__ import annotations

import asyncio
import operator
import time
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

import anyio

from .harness import Backend, Contender, Sample

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine

    Call = Callable[[int], Awaitable[Any]]
    """What node ``i`` does, under asyncio (a coroutine or a future)."""
    TaskCall = Callable[[int], Coroutine[Any, Any, Any]]
    """What node ``i`` does, as an anyio task (a coroutine)."""

__all__ = ["anyio_taskgroup", "asyncio_gather", "langgraph"]


def _timed(call: Call, into: list[float]) -> TaskCall:
    """``call``, recording each call's latency: for the one untimed, instrumented run."""

    async def timed(i: int) -> Any:
        started = time.perf_counter()
        value = await call(i)
        into.append(time.perf_counter() - started)
        return value

    return timed


async def _gather(n: int, call: Call, concurrency: int) -> None:
    if concurrency >= n:
        await asyncio.gather(*(call(i) for i in range(n)))
        return
    semaphore = asyncio.Semaphore(concurrency)

    async def bounded(i: int) -> Any:
        async with semaphore:
            return await call(i)

    await asyncio.gather(*(bounded(i) for i in range(n)))


def asyncio_gather(
    n: int,
    call: Call,
    concurrency: int,
    *,
    backend: Backend = "asyncio",
    name: str = "asyncio_gather",
) -> Contender:
    """``asyncio.gather`` of N coroutines, each awaiting ``call(i)`` (on asyncio's loop, or
    on uvloop's: ``backend="uvloop"``)."""

    async def run() -> Sample:
        started = time.perf_counter()
        await _gather(n, call, concurrency)
        return Sample(time.perf_counter() - started)

    async def instrumented() -> list[float]:
        latencies: list[float] = []
        await _gather(n, _timed(call, latencies), concurrency)
        return latencies

    return Contender(name, run, backend, instrumented)


async def _task_group(n: int, call: TaskCall, concurrency: int) -> None:
    if concurrency >= n:
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(call, i)
        return
    limiter = anyio.CapacityLimiter(concurrency)

    async def bounded(i: int) -> None:
        async with limiter:
            await call(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(bounded, i)


def anyio_taskgroup(
    n: int,
    call: TaskCall,
    concurrency: int,
    *,
    backend: Backend = "asyncio",
    name: str = "anyio_taskgroup",
) -> Contender:
    """One anyio task per node, in one task group, each awaiting ``call(i)``."""

    async def run() -> Sample:
        started = time.perf_counter()
        await _task_group(n, call, concurrency)
        return Sample(time.perf_counter() - started)

    async def instrumented() -> list[float]:
        latencies: list[float] = []
        await _task_group(n, _timed(call, latencies), concurrency)
        return latencies

    return Contender(name, run, backend, instrumented)


# The state LangGraph reads, with its reducer. LangGraph resolves these (string)
# annotations in this module's globals: `operator`, `Annotated` and `Any` must stay
# imported at run time.
class _FanState(TypedDict):
    n: int
    results: Annotated[list[Any], operator.add]


class _Branch(TypedDict):
    i: int


def _compile(call: Call) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Send

    async def validate(state: _Branch) -> dict[str, Any]:
        return {"results": [await call(state["i"])]}

    def fan_out(state: _FanState) -> list[Any]:
        return [Send("validate", {"i": i}) for i in range(state["n"])]

    builder = StateGraph(_FanState)
    builder.add_node("validate", validate)
    builder.add_conditional_edges(START, fan_out, ["validate"])
    builder.add_edge("validate", END)
    return builder.compile()


def langgraph(n: int, call: Call, concurrency: int) -> Contender:
    """LangGraph's ``Send`` fan-out: N branches of one node awaiting ``call(i)``.

    The graph is compiled here, outside the timed runs. Raises ``ModuleNotFoundError``
    when LangGraph is not installed; the harness checks before building it.
    """
    graph = _compile(call)
    config: dict[str, Any] = {"max_concurrency": concurrency} if concurrency < n else {}

    async def run() -> Sample:
        started = time.perf_counter()
        out = await graph.ainvoke({"n": n, "results": []}, config=config)
        wall = time.perf_counter() - started
        if len(out["results"]) != n:
            raise AssertionError(f"LangGraph ran {len(out['results'])} branches, not {n}")
        return Sample(wall)

    async def instrumented() -> list[float]:
        latencies: list[float] = []
        await _compile(_timed(call, latencies)).ainvoke({"n": n, "results": []}, config=config)
        return latencies

    return Contender("langgraph", run, "asyncio", instrumented)
