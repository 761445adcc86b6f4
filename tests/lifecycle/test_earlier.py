"""``context.earlier``: what a validation found the last time it ran in the plan, given to
its next call in a later round, wherever that call runs, and the same when the plan is run
again from its log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gategraph.runtime import (
    ExecuteRequest,
    FixRequest,
    MemoryEventLog,
    PlanGraph,
    ReadOnlyViolationError,
    ToolContext,
    load_graph,
    rerun_rounds,
    run_plan,
)
from gategraph.runtime._base._kernel import support
from gategraph.runtime._data._events import ValidationCompleted
from gategraph.runtime._storage._store import ContentStore

pytestmark = pytest.mark.anyio

# Fails in the plan's first round (it has found nothing before), passes after; says what
# it was told.
REMEMBERS = """
def run(root, context):
    earlier = context.earlier
    seen = None if earlier is None else {key: earlier[key] for key in sorted(earlier)}
    return {"passed": earlier is not None, "message": "told" if earlier else "new",
            "data": {"saw": seen, "files": sorted(p.name for p in root.iterdir())}}
"""

WHERE = [
    pytest.param(
        "",
        id="default",
        marks=pytest.mark.skipif(support().missing is not None, reason="no sandbox here"),
    ),
    pytest.param(", isolation: process", id="process"),
    pytest.param(", isolation: thread", id="thread"),
]


def _graph(tmp_path: Path, node: str) -> PlanGraph:
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "a.py").write_text("x = 1\n")
    code = REMEMBERS.replace("\n", "\\n").replace('"', '\\"')
    return load_graph(
        f"""
version: 1
name: earlier
resources:
  repo: {{kind: directory, path: '{repo}'}}
validations:
  - {{name: remembers, resource_slots: [root], code: "{code}"}}
nodes:
  - {{id: check, validation: remembers, resources: [repo]{node}}}
"""
    )


async def _edit(request: ExecuteRequest) -> Any:
    """A change, then another: the fix adds a file, so the check is not reused."""
    name = "fix.py" if isinstance(request, FixRequest) else "b.py"
    (request.resources["repo"] / name).write_text("y = 2\n")
    return {"files": [name]}


@pytest.mark.parametrize("node", WHERE)
async def test_a_fix_round_s_call_is_told_what_the_first_found(tmp_path: Path, node: str) -> None:
    log = MemoryEventLog()
    store = ContentStore(tmp_path / "store")
    graph = _graph(tmp_path, node)
    outcome = await run_plan(graph, event_log=log, execution_actor=_edit, store=store)
    assert outcome.status == "applied", outcome.message
    events = await log.read(outcome.plan_id)
    first, second = [e.result for e in events if isinstance(e, ValidationCompleted)]
    assert (first.passed, first.data["saw"]) == (False, None)
    assert second.passed and second.data["saw"] == {"files": ["a.py", "b.py"], "saw": None}
    # Run again from the log, each round's call is told what it was told then.
    again = await rerun_rounds(events, graph, store=store)
    assert again.rounds == [1, 2] and again.differences == [], again.differences


def test_what_a_call_is_told_is_read_only() -> None:
    context = ToolContext(earlier={"failed_ids": ["t::a"]})
    told = context.earlier
    assert told is not None and told["failed_ids"] == ["t::a"]
    with pytest.raises(ReadOnlyViolationError, match="earlier"):
        told["failed_ids"].append("t::b")
    assert ToolContext().earlier is None


# Fails once, passes when confirmed (flaky: the round is run again), then passes; says what
# it was told. Its count is kept in this process (the node declares `isolation: thread`).
FLAKY_ONCE = """
import sys
def run(root, context):
    calls = sys.__dict__.setdefault("_gategraph_test_calls", {})
    n = calls[str(root)] = calls.get(str(root), 0) + 1
    earlier = context.earlier
    return {"passed": n != 1, "data": {"n": n, "saw": None if earlier is None else earlier["n"]}}
"""


async def test_a_round_run_again_is_told_the_first_results_of_the_round_before(
    tmp_path: Path,
) -> None:
    """A flaky failure (it passed when confirmed) runs the round again: that round's call
    is told what the round before first found (as the log's first results say, which is
    what `replay --rerun` gives), not the confirmation's."""
    repo = tmp_path / "repo"
    repo.mkdir()
    code = FLAKY_ONCE.replace("\n", "\\n").replace('"', '\\"')
    graph = load_graph(
        f"""
version: 1
name: flaky
policy: {{confirm_failures: true}}
resources:
  repo: {{kind: directory, path: '{repo}'}}
validations:
  - {{name: flaky, resource_slots: [root], code: "{code}"}}
nodes:
  - {{id: check, validation: flaky, resources: [repo], isolation: thread}}
"""
    )
    log = MemoryEventLog()
    outcome = await run_plan(graph, event_log=log, execution_actor=_edit)
    assert outcome.status == "applied", outcome.message
    events = await log.read(outcome.plan_id)
    seen = [e.result.data for e in events if isinstance(e, ValidationCompleted)]
    # Round 1 (failed), its confirmation (passed: flaky), round 2 (told round 1's first).
    assert seen == [{"n": 1, "saw": None}, {"n": 2, "saw": None}, {"n": 3, "saw": 1}]
