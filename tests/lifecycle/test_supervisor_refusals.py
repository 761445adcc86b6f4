"""What the supervisor refuses before a plan starts (issue 9, item 3): validations and work
tools that cannot be called, lifecycle actors that cannot be built, plan ids that are not
ids. Each is a ConfigError naming the field, and nothing is logged."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from _helpers import fake_module
from gategraph.runtime import ConfigError, MemoryEventLog, load_graph, run_plan, testing
from gategraph.runtime._lifecycle._supervisor import Supervisor

OK = {"name": "ok", "code": "def run(**_):\n    return {'passed': True}\n"}


def graph(
    nodes: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] = (),  # type: ignore[assignment]
    validations: list[dict[str, Any]] = (OK,),  # type: ignore[assignment]
    **extra: Any,
) -> Any:
    return load_graph(
        {
            "version": 1,
            "name": "g",
            "resources": {"notes": {"kind": "memory", "files": {"a.txt": "hi"}}},
            "tools": list(tools),
            "validations": list(validations),
            "nodes": nodes,
            **extra,
        }
    )


def vanishing(monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    """A module of tools that imports while the graph is loaded and is gone afterwards (an
    environment changed between loading a graph and running it)."""

    def run(**_: Any) -> dict[str, Any]:
        return {"passed": True}

    fake_module(monkeypatch, name, run=run)
    return name


@pytest.mark.anyio
async def test_a_work_tool_that_cannot_be_called_refuses_the_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A work tool that no longer imports is a ConfigError at ``nodes[i].tool``, before
    anything is logged: no fix could make it callable. An actor node is not a tool."""
    module = vanishing(monkeypatch, "gg_refusals_work")
    g = graph(
        [
            {"id": "helper", "uses": "collections:OrderedDict"},
            {"id": "make", "tool": "make", "isolation": "thread"},
            {"id": "ok", "validation": "ok", "needs": ["make"]},
        ],
        tools=[{"name": "make", "entrypoint": f"{module}:run"}],
    )
    monkeypatch.delitem(sys.modules, module)
    log = MemoryEventLog()
    with pytest.raises(ConfigError) as caught:
        await run_plan(g, event_log=log, plan_id="refused-work")
    issues = caught.value.issues
    assert [issue.field for issue in issues] == ["nodes[1].tool"]
    assert "cannot import 'gg_refusals_work'" in issues[0].message
    assert await log.read("refused-work") == []


@pytest.mark.anyio
async def test_every_uncallable_node_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken validation node and a broken work tool are reported together, each at its
    node; a validation used by two nodes is reported once."""
    module = vanishing(monkeypatch, "gg_refusals_both")
    g = graph(
        [
            {"id": "make", "tool": "make", "isolation": "thread"},
            {"id": "first", "validation": "broken", "needs": ["make"], "isolation": "thread"},
            {"id": "second", "validation": "broken", "needs": ["make"], "isolation": "thread"},
        ],
        tools=[{"name": "make", "entrypoint": f"{module}:run"}],
        validations=[{"name": "broken", "entrypoint": f"{module}:run"}],
    )
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ConfigError) as caught:
        await run_plan(g, event_log=MemoryEventLog())
    fields = [issue.field for issue in caught.value.issues]
    assert fields == ["nodes[1].validation", "nodes[0].tool"]
    assert all("cannot import 'gg_refusals_both'" in i.message for i in caught.value.issues)


@pytest.mark.anyio
async def test_a_lifecycle_actor_that_cannot_be_built_is_a_config_error() -> None:
    """An actor whose constructor raises is reported at ``lifecycle.<role>.uses`` with why."""
    g = graph(
        [{"id": "ok", "validation": "ok"}],
        lifecycle={
            "executor": {
                "uses": "gategraph.runtime.testing:ScriptedExecutor",
                "arguments": {"steps": []},
            }
        },
    )
    with pytest.raises(ConfigError) as caught:
        Supervisor(g)
    issue = caught.value.issues[0]
    assert issue.field == "lifecycle.executor.uses"
    assert issue.message == (
        "cannot build gategraph.runtime.testing:ScriptedExecutor: ValueError: a script needs "
        "at least one step"
    )


def test_a_lifecycle_actor_that_no_longer_resolves_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An actor whose module is gone by the time the plan runs keeps the resolver's
    message, at the field that names it."""
    module = fake_module(monkeypatch, "gg_refusals_strategy", Strategy=testing.ScriptedStrategy)
    g = graph(
        [{"id": "ok", "validation": "ok"}],
        lifecycle={"strategy": {"uses": f"{module}:Strategy"}},
    )
    monkeypatch.delitem(sys.modules, module)
    with pytest.raises(ConfigError) as caught:
        Supervisor(g)
    issue = caught.value.issues[0]
    assert issue.field == "lifecycle.strategy.uses"
    assert issue.message.startswith("cannot import 'gg_refusals_strategy'")


@pytest.mark.parametrize("plan_id", ["", "has space", "-leading-dash", "x" * 201, "a/b"])
def test_a_plan_id_that_is_not_an_id_is_refused(plan_id: str) -> None:
    """A plan id becomes file names and log keys: only safe ids are taken."""
    with pytest.raises(ConfigError) as caught:
        Supervisor(graph([{"id": "ok", "validation": "ok"}]), plan_id=plan_id or "-")
    assert caught.value.issues[0].field == "plan_id"
    assert "is not a plan id" in caught.value.issues[0].message


@pytest.mark.anyio
async def test_the_supervisor_s_seq_follows_its_log() -> None:
    """``seq`` is the seq of the plan's last event, 0 before it starts."""
    supervisor = Supervisor(graph([{"id": "ok", "validation": "ok"}]), event_log=MemoryEventLog())
    assert supervisor.seq == 0
    outcome = await supervisor.run()
    events = await supervisor.log.read(outcome.plan_id)
    assert supervisor.seq == events[-1].seq == len(events)
