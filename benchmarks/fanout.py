"""The engine's side of a case: an N-wide fan-out graph and the contender that runs it.

Graphs are built from a mapping with :func:`gategraph.runtime.load_graph`, outside the timed
region; a timed run is one :func:`gategraph.runtime.execute_graph` call (and, for a durable
log, until the log has committed every event). Each run is checked after its clock stops —
N validation records, the expected number passed — so a benchmark never times a run that did
something else.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from .harness import Backend, Contender, Sample

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from gategraph.runtime import EventLog, PlanGraph

__all__ = ["FAIL", "NOOP", "SLEEP", "engine", "fanout_graph"]

NOOP = "gategraph.runtime.testing:passing"
FAIL = "gategraph.runtime.testing:failing"
SLEEP = "gategraph.runtime.testing:sleeping"


def fanout_graph(
    n: int,
    *,
    entrypoint: str = NOOP,
    arguments: dict[str, Any] | None = None,
    concurrency: int = 1000,
    nodes: Sequence[dict[str, Any]] | None = None,
    validations: Sequence[dict[str, Any]] | None = None,
) -> PlanGraph:
    """N independent validation nodes running validation ``v`` (``entrypoint``), or the
    given ``nodes`` over the given ``validations``."""
    from gategraph.runtime import load_graph

    if nodes is None:
        node: dict[str, Any] = {"validation": "v"}
        if arguments:
            node["arguments"] = arguments
        nodes = [{"id": f"n{i}", **node} for i in range(n)]
    return load_graph(
        {
            "version": 1,
            "name": f"bench-{n}",
            "validations": list(validations or [{"name": "v", "entrypoint": entrypoint}]),
            "nodes": list(nodes),
            "policy": {"max_concurrency": max(1, concurrency), "default_timeout": 600},
        }
    )


def engine(
    graph: PlanGraph,
    *,
    n: int,
    concurrency: int,
    passed: int | None = None,
    isolation: Any = None,
    open_log: Callable[[], AbstractAsyncContextManager[EventLog]] | None = None,
    backend: Backend = "asyncio",
    name: str = "gategraph",
    artifact: Any = None,
) -> Contender:
    """``execute_graph`` over ``graph``, with a fresh in-memory log per run (or one from
    ``open_log``, opened before the clock starts and closed before it stops), each
    validation given ``artifact`` (frozen once per run, inside the clock).

    ``passed``: how many validations must pass (default: all of them).
    """
    from gategraph.runtime import MemoryEventLog, execute_graph

    expected = n if passed is None else passed

    async def run() -> Sample:
        async with contextlib.AsyncExitStack() as stack:
            log: EventLog = (
                MemoryEventLog()
                if open_log is None
                else await stack.enter_async_context(open_log())
            )
            started = time.perf_counter()
            result = await execute_graph(
                graph,
                event_log=log,
                max_concurrency=concurrency,
                isolation=isolation,
                artifact=artifact,
            )
            # A durable log counts until it is durable: closing drains what is queued.
            await stack.aclose()
            wall = time.perf_counter() - started
        records = result.validations
        ok = sum(1 for r in records if r.result.passed)
        if len(records) != n or ok != expected:
            first = next((r.result.message for r in records if not r.result.passed), "")
            raise AssertionError(
                f"{name}: {len(records)} validations ran and {ok} passed; expected {n} and "
                f"{expected} ({first})"
            )
        return Sample(wall, [r.duration for r in records])

    return Contender(name, run, backend)
