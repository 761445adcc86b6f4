"""A plan's context on its own, for testing the parts of the lifecycle one at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gategraph.runtime import ContentStore, DirectoryResource, MemoryEventLog, load_graph
from gategraph.runtime._base._ids import new_ulid
from gategraph.runtime._data._events import Event
from gategraph.runtime._lifecycle._executors import LocalExecutor
from gategraph.runtime._lifecycle._plan import PlanContext
from gategraph.runtime._lifecycle._plan_sandboxes import PlanSandboxes
from gategraph.runtime._running._journal import PlanJournal, event_tag
from gategraph.runtime._running._pipeline import applicable_validations


def parts_graph(root: Path, validations: list[dict[str, Any]], **extra: Any) -> Any:
    """A graph on the folder ``root`` with one node per validation (node id = its name)."""
    return load_graph(
        {
            "version": 1,
            "name": "parts",
            "resources": {"repo": {"kind": "directory", "path": str(root)}},
            "validations": validations,
            "nodes": [{"id": v["name"], "validation": v["name"]} for v in validations],
            **extra,
        }
    )


def folder(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir(exist_ok=True)
    (root / "a.txt").write_text("one\n")
    return root


async def context_for(
    graph: Any,
    tmp_path: Path,
    *,
    recorded: list[Event] = (),
    **fields: Any,  # type: ignore[assignment]
) -> PlanContext:
    """The context of a fresh plan on ``graph`` (sandboxes open), or of one resuming from
    ``recorded``."""
    log = MemoryEventLog()
    plan_id = recorded[0].plan_id if recorded else new_ulid()
    resources = {name: DirectoryResource(name, spec.path) for name, spec in graph.resources.items()}
    boxes = PlanSandboxes(
        resources,
        plan_id=plan_id,
        home=lambda: tmp_path / "home",
        store=ContentStore(tmp_path / "store"),
    )
    await boxes.open(0, replaying=False)
    return PlanContext(
        plan_id=plan_id,
        graph=graph,
        catalog=None,
        log=log,
        journal=PlanJournal(log, plan_id, recorded),
        boxes=boxes,
        executor=LocalExecutor(),
        applicable=applicable_validations(graph, None, plan_id),
        work_phase=graph.work_phase(),
        **fields,
    )


async def tags(context: PlanContext) -> list[str]:
    """The tags of the events the plan appended, in order."""
    return [event_tag(e) for e in await context.log.read(context.plan_id)]
