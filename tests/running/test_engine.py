"""The engine: execute_graph's scheduling, invocation, failure kinds, events and attachments."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import fake_module, graph
from gategraph.runtime import Catalog, ConfigError, RuntimeFault, ValidationResult
from gategraph.runtime._data._events import (
    ArtifactProduced,
    NodeCompleted,
    NodeSkipped,
    NodeStarted,
    RunFinished,
    RunStarted,
    ValidationCompleted,
    ValidationStarted,
)
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import NodeRequest, NodeStatus, execute_graph
from gategraph.runtime._storage._eventlog import MemoryEventLog, SQLiteEventLog, read_events

pytestmark = pytest.mark.anyio
T = "gategraph.runtime.testing"


FANOUT = f"""
version: 1
name: fanout
validations:
  - {{name: ok, entrypoint: "{T}:passing"}}
  - {{name: bad, entrypoint: "{T}:failing"}}
  - {{name: advisory, entrypoint: "{T}:failing", mode: informational}}
tools:
  - name: make
    code: |
      def run(**_):
          return {{"files": ["a.py"]}}
nodes:
  - {{id: make, tool: make}}
  - {{id: v1, validation: ok, needs: [make]}}
  - {{id: v2, validation: ok, needs: [make]}}
  - {{id: v3, validation: advisory, needs: [make]}}
  - {{id: v4, validation: bad, needs: [make]}}
"""


async def test_fanout_results_per_node() -> None:
    """Every node runs once; results come back per node with status, duration and attempt."""
    run = await execute_graph(graph(FANOUT), attempt=2)
    assert set(run.nodes) == {"make", "v1", "v2", "v3", "v4"}
    assert run.nodes["make"].output == {"files": ["a.py"]}
    assert all(r.status is NodeStatus.OK for r in run.nodes.values())
    assert all(r.attempt == 2 for r in run.nodes.values())
    by_node = {v.node: v for v in run.validations}
    assert by_node["v1"].result.passed and by_node["v2"].result.passed
    assert not by_node["v3"].blocking  # informational failures never block
    assert by_node["v4"].blocking
    assert [v.node for v in run.required_failures] == ["v4"]
    assert not run.passed


async def test_events_tell_the_whole_story() -> None:
    """Each transition is an event with a ULID, per-plan seq, and causation."""
    log = MemoryEventLog()
    run = await execute_graph(graph(FANOUT), event_log=log, plan_id="plan-1")
    events = await log.read("plan-1")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert run.plan_id == "plan-1"
    kinds = [type(e) for e in events]
    assert kinds.count(ValidationStarted) == kinds.count(ValidationCompleted) == 4
    assert NodeStarted in kinds and NodeCompleted in kinds and ArtifactProduced in kinds
    started = {e.node: e for e in events if isinstance(e, ValidationStarted)}
    for event in events:
        if isinstance(event, ValidationCompleted):
            # The start is logged before the completion it causes.
            assert event.causation_id == started[event.node].id
            assert started[event.node].seq < event.seq
    produced = next(e for e in events if isinstance(e, ArtifactProduced))
    completed = next(e for e in events if isinstance(e, NodeCompleted))
    assert produced.causation_id == completed.id
    assert produced.artifact == {"files": ["a.py"]}
    # The work node's completion is logged before any validation that needs it starts.
    assert completed.seq < min(e.seq for e in started.values())


async def test_no_global_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node starts as soon as its own needs are done, while unrelated nodes still run."""
    gate = anyio.Event()
    order: list[str] = []

    async def slow(**_: Any) -> dict[str, Any]:
        await gate.wait()
        order.append("slow")
        return {"passed": True}

    async def quick(**_: Any) -> dict[str, Any]:
        order.append("quick")
        return {"passed": True}

    async def after_quick(**_: Any) -> dict[str, Any]:
        order.append("after_quick")
        gate.set()  # only reachable if it did not wait for `slow`
        return {"passed": True}

    mod = fake_module(monkeypatch, "gg_barrier", slow=slow, quick=quick, after_quick=after_quick)
    g = graph(f"""
        version: 1
        name: barrier
        validations:
          - {{name: slow, entrypoint: "{mod}:slow"}}
          - {{name: quick, entrypoint: "{mod}:quick"}}
          - {{name: after, entrypoint: "{mod}:after_quick"}}
        nodes:
          - {{id: s, validation: slow, isolation: inline}}
          - {{id: q, validation: quick, isolation: inline}}
          - {{id: a, validation: after, needs: [q], isolation: inline}}
        """)
    with anyio.fail_after(10):
        await execute_graph(g)
    assert order == ["quick", "after_quick", "slow"]


async def test_concurrency_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most max_concurrency validations run at once, and that many do run at once."""
    state = {"now": 0, "peak": 0}

    async def tracked(**_: Any) -> dict[str, Any]:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await anyio.sleep(0.01)
        state["now"] -= 1
        return {"passed": True}

    mod = fake_module(monkeypatch, "gg_bound", tracked=tracked)
    nodes = "\n".join(f"  - {{id: n{i}, validation: t, isolation: inline}}" for i in range(40))
    g = load_graph(
        f"version: 1\nname: bound\nvalidations:\n  - {{name: t, entrypoint: '{mod}:tracked'}}\n"
        f"nodes:\n{nodes}\n"
    )
    run = await execute_graph(g, max_concurrency=7)
    assert len(run.validations) == 40
    assert state["peak"] == 7


async def test_outputs_flow_downstream() -> None:
    """A node receives the outputs it needs: one need is the artifact, several a mapping."""
    g = graph(f"""
        version: 1
        name: flow
        tools:
          - {{name: a, code: "def run(**_):\\n    return {{'n': 1}}\\n"}}
          - {{name: b, code: "def run(**_):\\n    return [2]\\n"}}
        validations:
          - {{name: echo, entrypoint: "{T}:echo"}}
        nodes:
          - {{id: a, tool: a}}
          - {{id: b, tool: b}}
          - {{id: one, validation: echo, needs: [a], arguments: {{x: 1}}}}
          - {{id: two, validation: echo, needs: [a, b]}}
          - {{id: three, validation: echo, needs: [one]}}
        """)
    run = await execute_graph(g)
    one = run.nodes["one"].output
    assert isinstance(one, ValidationResult)
    assert one.data["artifact"] == {"n": 1}
    assert one.data["arguments"] == {"x": 1}
    two = run.nodes["two"].output
    assert isinstance(two, ValidationResult)
    assert two.data["artifact"] == {"a": {"n": 1}, "b": [2]}
    three = run.nodes["three"].output
    assert isinstance(three, ValidationResult)
    # A validation's structured result is an input like any other output.
    assert three.data["artifact"]["passed"] is True


@pytest.mark.parametrize(
    ("entry", "arguments", "error", "message"),
    [
        ("raising", {}, "exception", "RuntimeError: raised on purpose"),
        ("returning", {"value": {"ok": True}}, "malformed", "'passed' is missing"),
        ("returning", {}, "malformed", "returned None"),
        ("returning", {"value": {"passed": "yes"}}, "malformed", "must be a bool"),
        ("returning", {"value": "not json"}, "malformed", "not valid JSON"),
        ("sleeping", {"seconds": 30}, "timeout", "timed out after 0.05 s"),
    ],
)
async def test_failure_kinds(
    entry: str, arguments: dict[str, Any], error: str, message: str
) -> None:
    """Exceptions, malformed returns and timeouts become failed results, never crashes."""
    # Only the call that sleeps has a short timeout: on a loaded machine any call may take
    # longer than 0.05 s, and the others must not end in a timeout.
    timeout = 0.05 if entry == "sleeping" else 30
    g = load_graph(
        "version: 1\nname: f\n"
        f"validations:\n  - {{name: v, entrypoint: '{T}:{entry}', timeout: {timeout}}}\n"
        "nodes:\n  - id: n\n    validation: v\n"
        f"    arguments: {arguments!r}\n".replace("'", '"')
        if arguments
        else "version: 1\nname: f\n"
        f"validations:\n  - {{name: v, entrypoint: '{T}:{entry}', timeout: {timeout}}}\n"
        "nodes:\n  - {id: n, validation: v}\n"
    )
    with anyio.fail_after(60):
        run = await execute_graph(g)
    result = run.validations[0].result
    assert result.passed is False
    assert result.data["error"] == error
    assert message in result.message


async def test_too_large_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """A result over the size limit fails as too_large."""
    mod = fake_module(
        monkeypatch, "gg_large", big=lambda **_: {"passed": True, "data": {"x": "a" * (2 << 20)}}
    )
    g = graph(f"""
        version: 1
        name: large
        validations: [{{name: big, entrypoint: "{mod}:big"}}]
        nodes: [{{id: n, validation: big, isolation: thread}}]
        """)
    result = (await execute_graph(g)).validations[0].result
    assert result.data["error"] == "too_large"
    assert result.data["size"] > 2 << 20


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    return repo


async def test_read_only_violation(tmp_path: Path) -> None:
    """A validation that writes is blocked and fails with read_only_violation."""
    repo = _repo(tmp_path)
    g = graph(f"""
        version: 1
        name: ro
        resources: {{repo: {{kind: directory, path: "{repo}"}}}}
        validations:
          - name: writer
            entrypoint: "{T}:writing"
            resource_slots: [root]
        nodes: [{{id: n, validation: writer, resources: [repo]}}]
        """)
    result = (await execute_graph(g)).validations[0].result
    assert result.data["error"] == "read_only_violation"
    assert "written-by-validation.txt" in result.message
    assert sorted(p.name for p in repo.iterdir()) == ["a.py"]


async def test_read_only_violation_inline_async(tmp_path: Path) -> None:
    """The guard covers async validations and inline code too, even if they catch the error."""
    repo = _repo(tmp_path)
    code = (
        "async def run(root, **_):\\n"
        "    try:\\n"
        "        (root / 'x').write_text('x')\\n"
        "    except OSError:\\n"
        "        pass\\n"
        "    return {'passed': True}\\n"
    )
    g = graph(f"""
        version: 1
        name: ro2
        resources: {{repo: {{kind: directory, path: "{repo}"}}}}
        validations:
          - {{name: sneaky, code: "{code}", resource_slots: [root]}}
        nodes: [{{id: n, validation: sneaky}}]
        """)
    result = (await execute_graph(g)).validations[0].result
    assert result.data["error"] == "read_only_violation"
    assert not (repo / "x").exists()


WRAPPED = """
version: 1
name: wrapped
tools:
  - name: count
    read_only: true
    code: |
      def run(words, **_):
          return {{"count": len(words)}}
validations:
  - name: few-words
    wraps: count
    argument_mapping: {{words: $text}}
    transform: {transform}
nodes:
  - {{id: n, validation: few-words, arguments: {{text: [a, b, c]}}}}
"""


@pytest.mark.parametrize(
    ("transform", "passed", "error"),
    [
        ("\"{'passed': output['count'] < 5, 'data': output}\"", True, None),
        ("\"{'passed': output['count'] < 2}\"", False, None),
        ('"1 / 0"', False, "exception"),
        ("\"__import__('os').system('true')\"", False, "read_only_violation"),
        ("\"open('/tmp/gategraph-impure-transform', 'w')\"", False, "read_only_violation"),
    ],
)
async def test_wrapped_validation(transform: str, passed: bool, error: str | None) -> None:
    """The wrapped tool's output goes through the transform, which must be pure."""
    run = await execute_graph(graph(WRAPPED.format(transform=transform)))
    result = run.validations[0].result
    assert result.passed is passed
    assert result.data.get("error") == error
    if passed:
        assert result.data == {"count": 3}


@pytest.mark.parametrize(
    "transform",
    [
        "{'passed': tool_output['count'] == 3}",
        "{'passed': output['count'] == 3 and tool_output is output}",
        "def transform(tool_output):\n    return {'passed': tool_output['count'] == 3}\n",
        "def transform(output):\n    return {'passed': output['count'] == 3}\n",
        "def transform(result):\n    return {'passed': result['count'] == 3}\n",
        "async def transform(tool_output):\n    return {'passed': tool_output['count'] == 3}\n",
    ],
)
async def test_transform_receives_tool_output(transform: str) -> None:
    """seed 000: the transform receives `tool_output` (an expression sees `output` too; a
    `def transform` gets it under its parameter's name, or first)."""
    g = load_graph(
        {
            "version": 1,
            "name": "tool-output",
            "tools": [
                {
                    "name": "count",
                    "read_only": True,
                    "code": "def run(words, **_):\n    return {'count': len(words)}\n",
                }
            ],
            "validations": [{"name": "v", "wraps": "count", "transform": transform}],
            "nodes": [{"id": "n", "validation": "v", "arguments": {"words": ["a", "b", "c"]}}],
        }
    )
    result = (await execute_graph(g)).validations[0].result
    assert result.passed, result


async def test_wrapped_missing_mapped_argument() -> None:
    """argument_mapping naming an absent argument is a clear failure."""
    text = WRAPPED.format(transform="output").replace("arguments: {text: [a, b, c]}", "")
    result = (await execute_graph(graph(text))).validations[0].result
    assert result.data["error"] == "exception"
    assert "no argument 'text'" in result.message


async def test_sync_isolation_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sync callables run in threads or in worker processes, async ones inline, alike."""
    g = graph(f"""
        version: 1
        name: iso
        validations:
          - {{name: v, entrypoint: "{T}:returning"}}
          - {{name: a, entrypoint: "{T}:passing"}}
        nodes:
          - {{id: inline, validation: a, isolation: inline}}
          - {{id: thread, validation: v, isolation: thread, arguments: {{value: {{passed: true}}}}}}
          - {{id: proc, validation: v, isolation: process, arguments: {{value: {{passed: true}}}}}}
        """)
    run = await execute_graph(g)
    assert len(run.validations) == 3
    assert all(v.result.passed for v in run.validations), run.validations


async def test_process_isolation_is_guarded(tmp_path: Path) -> None:
    """A write from a validation in a worker process is refused there too."""
    repo = _repo(tmp_path)
    g = graph(f"""
        version: 1
        name: iso-ro
        resources: {{repo: {{kind: directory, path: "{repo}"}}}}
        validations:
          - {{name: w, entrypoint: "{T}:writing", resource_slots: [root]}}
        nodes: [{{id: n, validation: w, isolation: process}}]
        """)
    result = (await execute_graph(g)).validations[0].result
    assert result.data["error"] == "read_only_violation"
    assert sorted(p.name for p in repo.iterdir()) == ["a.py"]


async def test_failed_work_node_skips_dependents() -> None:
    """A failing work node fails; everything that needs it, directly or not, is skipped."""
    log = MemoryEventLog()
    g = graph(f"""
        version: 1
        name: skip
        tools:
          - {{name: boom, entrypoint: "{T}:raising"}}
        validations:
          - {{name: ok, entrypoint: "{T}:passing"}}
        nodes:
          - {{id: w, tool: boom}}
          - {{id: v, validation: ok, needs: [w]}}
          - {{id: v2, validation: ok, needs: [v]}}
          - {{id: free, validation: ok}}
        """)
    run = await execute_graph(g, event_log=log, plan_id="p")
    assert run.nodes["w"].status is NodeStatus.FAILED
    assert "RuntimeError" in (run.nodes["w"].error or "")
    assert run.nodes["v"].status is NodeStatus.SKIPPED
    assert run.nodes["v2"].status is NodeStatus.SKIPPED
    assert run.nodes["free"].status is NodeStatus.OK
    skipped = [e.node for e in await log.read("p") if isinstance(e, NodeSkipped)]
    assert skipped == ["v", "v2"]
    assert not run.passed


class Doubler:
    """An actor node: replies with twice the sum of its inputs' counts."""

    async def receive(self, message: NodeRequest) -> Any:
        assert message.context.node == message.node
        total = sum(v["count"] for v in message.inputs.values())
        return {"doubled": total * message.arguments.get("factor", 2)}


class Broken:
    async def receive(self, message: NodeRequest) -> Any:
        raise KeyError("nope")


async def test_actor_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """An actor node is asked to run with its inputs; a failing actor fails its node."""
    mod = fake_module(monkeypatch, "gg_actors", Doubler=Doubler, Broken=Broken)
    g = graph(f"""
        version: 1
        name: actors
        tools:
          - {{name: c, code: "def run(**_):\\n    return {{'count': 3}}\\n"}}
        nodes:
          - {{id: c, tool: c}}
          - {{id: d, uses: "{mod}:Doubler", needs: [c], arguments: {{factor: 3}}}}
          - {{id: b, uses: "{mod}:Broken"}}
        """)
    run = await execute_graph(g)
    assert run.nodes["d"].output == {"doubled": 9}
    assert run.nodes["b"].status is NodeStatus.FAILED
    assert "KeyError" in (run.nodes["b"].error or "")


async def test_attachments_run_per_attachment(tmp_path: Path) -> None:
    """With a catalog, the resources' attachments run after the work nodes, one per attachment."""
    repo = _repo(tmp_path)
    catalog = Catalog.in_memory()
    from gategraph.runtime import Validation

    catalog.add(Validation.from_config({"name": "echo", "entrypoint": f"{T}:echo"}))
    catalog.add(
        Validation.from_config(
            {"name": "advice", "entrypoint": f"{T}:failing", "mode": "informational"}
        )
    )
    direct = catalog.attach("repo", "echo", arguments={"level": 1})
    scoped = catalog.attach("repo", "echo", project="web", arguments={"level": 2})
    catalog.attach("repo", "advice", plan="the-plan")
    catalog.attach("repo", "echo", project="other")
    g = graph(f"""
        version: 1
        name: att
        project: web
        resources: {{repo: {{kind: directory, path: "{repo}"}}}}
        tools:
          - {{name: w, code: "def run(**_):\\n    return {{'done': True}}\\n"}}
        nodes: [{{id: w, tool: w}}]
        """)
    run = await execute_graph(g, catalog=catalog, plan_id="the-plan")
    records = {v.attachment_id: v for v in run.validations}
    assert set(records) == {direct.id, scoped.id, catalog.attachments(validation="advice")[0].id}
    assert records[direct.id].result.data["arguments"]["level"] == 1
    assert records[scoped.id].result.data["artifact"] == {"done": True}
    assert run.nodes[f"attachment:{direct.id}"].status is NodeStatus.OK
    assert run.passed  # the failing attachment is informational


async def test_sqlite_log_durable_run(tmp_path: Path) -> None:
    """With the SQLite log, every event of the run is on disk when execute_graph returns."""
    path = tmp_path / "events.db"
    async with SQLiteEventLog(path) as log:
        run = await execute_graph(graph(FANOUT), event_log=log, plan_id="durable")
        on_disk = read_events(path, "durable")
    assert len(on_disk) == 2 + 2 * 5 + 1
    completed = [e for e in on_disk if isinstance(e, ValidationCompleted)]
    assert {e.node for e in completed} == {v.node for v in run.validations}


async def test_cancellation_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling execute_graph from outside cancels the validations; nothing swallows it."""
    g = graph(f"""
        version: 1
        name: cancel
        validations: [{{name: s, entrypoint: "{T}:sleeping"}}]
        nodes:
          - {{id: a, validation: s, arguments: {{seconds: 60}}}}
          - {{id: b, validation: s, arguments: {{seconds: 60}}}}
        """)
    with anyio.move_on_after(0.1) as scope:
        await execute_graph(g)
    assert scope.cancelled_caught


async def test_unpreparable_node_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node whose entrypoint cannot be imported is refused before anything runs."""
    # load_graph checks entrypoints too; the module goes away between loading and running.
    mod = fake_module(monkeypatch, "gg_vanishing", run=lambda **_: {"passed": True})
    g = graph(f"""
        version: 1
        name: bad
        validations: [{{name: v, entrypoint: "{mod}:run"}}]
        nodes: [{{id: n, validation: v, isolation: thread}}]
        """)
    monkeypatch.delitem(sys.modules, mod)
    log = MemoryEventLog()
    with pytest.raises(ConfigError, match="cannot import 'gg_vanishing'"):
        await execute_graph(g, event_log=log)
    assert len(log) == 0


async def test_resource_overrides(tmp_path: Path) -> None:
    """resources= replaces a graph resource (e.g. with a sandbox); unknown names are refused."""
    repo = _repo(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    g = graph(f"""
        version: 1
        name: over
        resources: {{repo: {{kind: directory, path: "{repo}"}}}}
        validations: [{{name: e, entrypoint: "{T}:echo", resource_slots: [root]}}]
        nodes: [{{id: n, validation: e}}]
        """)
    run = await execute_graph(g, resources={"repo": str(other)})
    assert run.validations[0].result.data["arguments"]["root"] == str(other)
    with pytest.raises(ConfigError, match="not a resource of the graph"):
        await execute_graph(g, resources={"nope": other})


class GatedLog(MemoryEventLog):
    """A log whose durability the test controls: flush waits for the gate."""

    appends_immediately = False

    def __init__(self) -> None:
        super().__init__()
        self.gate = anyio.Event()
        self.flushes = 0

    async def flush(self, plan_id: str | None = None) -> None:
        await self.gate.wait()
        self.flushes += 1


async def test_dependents_wait_until_the_completion_is_durable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node that needs another starts only after the log says that completion is durable."""
    started: list[str] = []
    first_started = anyio.Event()

    async def record(**kwargs: Any) -> dict[str, Any]:
        started.append(kwargs["name"])
        first_started.set()
        return {"passed": True}

    mod = fake_module(monkeypatch, "gg_durable", record=record)
    g = graph(f"""
        version: 1
        name: durable
        validations: [{{name: r, entrypoint: "{mod}:record"}}]
        nodes:
          - {{id: first, validation: r, arguments: {{name: first}}, isolation: inline}}
          - {{id: second, validation: r, needs: [first], arguments: {{name: second}}, isolation: inline}}
        """)
    log = GatedLog()
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: execute_graph(g, event_log=log, plan_id="d"))
        with anyio.fail_after(5):
            await first_started.wait()
        await anyio.wait_all_tasks_blocked()
        assert started == ["first"]  # `second` is held back: `first` is not durable yet
        log.gate.set()
    assert started == ["first", "second"]
    assert log.flushes >= 1


async def test_lifecycle_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """setup runs once before a tool's first call, teardown once after its last, even on failure."""
    calls: list[str] = []

    async def setup() -> None:
        calls.append("setup")

    def teardown() -> None:
        calls.append("teardown")

    def broken_teardown() -> None:
        raise OSError("disk gone")

    async def check(**_: Any) -> dict[str, Any]:
        calls.append("check")
        return {"passed": True}

    mod = fake_module(
        monkeypatch,
        "gg_hooks",
        setup=setup,
        teardown=teardown,
        check=check,
        broken_teardown=broken_teardown,
        broken_setup=lambda: 1 / 0,
    )
    g = graph(f"""
        version: 1
        name: hooks
        validations:
          - name: v
            entrypoint: "{mod}:check"
            hooks: {{setup: "{mod}:setup", teardown: "{mod}:teardown"}}
        nodes:
          - {{id: a, validation: v, isolation: inline}}
          - {{id: b, validation: v, isolation: inline}}
        """)
    run = await execute_graph(g)
    assert calls == ["setup", "check", "check", "teardown"]
    assert run.hook_errors == []

    bad_teardown = graph(f"""
        version: 1
        name: hooks2
        validations:
          - {{name: v, entrypoint: "{mod}:check", hooks: {{teardown: "{mod}:broken_teardown"}}}}
        nodes: [{{id: a, validation: v, isolation: inline}}]
        """)
    run = await execute_graph(bad_teardown)
    assert run.validations[0].result.passed
    assert run.hook_errors == ["the teardown hook of 'v' failed: OSError: disk gone"]

    bad_setup = graph(f"""
        version: 1
        name: hooks3
        validations:
          - name: v
            entrypoint: "{mod}:check"
            hooks: {{setup: "{mod}:broken_setup", teardown: "{mod}:teardown"}}
        nodes: [{{id: a, validation: v, isolation: inline}}]
        """)
    calls.clear()
    with pytest.raises(RuntimeFault, match="setup hook of 'v' failed: ZeroDivisionError"):
        await execute_graph(bad_setup)
    assert calls == []  # nothing ran, and a tool that never set up is not torn down


async def test_a_hook_calling_sys_exit_is_a_failed_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """sys.exit() in a setup hook fails the run as a RuntimeFault; in a teardown, it is a
    hook error of the run, not a crash."""

    def exiting() -> None:
        sys.exit(4)

    mod = fake_module(monkeypatch, "gg_exit_hooks", exiting=exiting)
    setup = graph(f"""
        version: 1
        name: exit-setup
        validations:
          - {{name: v, entrypoint: "{T}:passing", hooks: {{setup: "{mod}:exiting"}}}}
        nodes: [{{id: a, validation: v}}]
        """)
    with pytest.raises(RuntimeFault, match="setup hook of 'v' failed: SystemExit: 4"):
        await execute_graph(setup)
    teardown = graph(f"""
        version: 1
        name: exit-teardown
        validations:
          - {{name: v, entrypoint: "{T}:passing", hooks: {{teardown: "{mod}:exiting"}}}}
        nodes: [{{id: a, validation: v}}]
        """)
    run = await execute_graph(teardown)
    assert run.validations[0].result.passed
    assert run.hook_errors == ["the teardown hook of 'v' failed: SystemExit: 4"]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of the test: lets a hook that was abandoned at its timeout end."""
    event = threading.Event()
    yield event
    event.set()


def hook_graph(mod: str, *, timeout: float = 0.2, **hooks: str) -> Any:
    listed = ", ".join(f'{which}: "{mod}:{name}"' for which, name in hooks.items())
    return graph(f"""
        version: 1
        name: hooked
        validations:
          - {{name: v, entrypoint: "{T}:passing", timeout: {timeout}, hooks: {{{listed}}}}}
        nodes: [{{id: a, validation: v}}]
        """)


async def test_a_setup_hook_that_never_returns_fails_the_run_at_the_tool_s_timeout(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> None:
    """A sync or async setup hook has its tool's timeout: past it, the run fails with a
    RuntimeFault naming the hook; nothing runs, and the sync one is left on a daemon thread."""
    daemon: list[bool] = []

    def stuck() -> None:
        daemon.append(threading.current_thread().daemon)
        release.wait(60)

    async def sleeps() -> None:
        await anyio.sleep_forever()

    mod = fake_module(monkeypatch, "gg_stuck_hooks", stuck=stuck, sleeps=sleeps)
    for name in ("stuck", "sleeps"):
        with anyio.fail_after(30):
            with pytest.raises(
                RuntimeFault, match=r"^the setup hook of 'v' did not return within 0.2 s$"
            ):
                await execute_graph(hook_graph(mod, setup=name))
    assert daemon == [True]


async def test_a_teardown_hook_that_never_returns_is_a_hook_error(
    monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> None:
    """A teardown past its timeout is reported on the run; the results stand."""
    mod = fake_module(monkeypatch, "gg_stuck_teardown", stuck=lambda: release.wait(60))
    with anyio.fail_after(30):
        run = await execute_graph(hook_graph(mod, teardown="stuck"))
    assert run.validations[0].result.passed
    assert run.hook_errors == ["the teardown hook of 'v' did not return within 0.2 s"]


async def test_what_hooks_print_is_captured(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hook's stdout and stderr are kept on the run, never written to the real streams."""

    def setup() -> None:
        print("setting up")
        print("careful", file=sys.stderr)

    async def teardown() -> None:
        print("tearing down")

    mod = fake_module(monkeypatch, "gg_loud_hooks", setup=setup, teardown=teardown)
    run = await execute_graph(hook_graph(mod, timeout=30, setup="setup", teardown="teardown"))
    assert run.hook_output == {
        "v.hooks.setup": {"stdout": "setting up\n", "stderr": "careful\n"},
        "v.hooks.teardown": {"stdout": "tearing down\n"},
    }
    assert capsys.readouterr() == ("", "")


async def test_a_hook_that_does_not_import_is_a_config_error_at_its_field(
    tmp_path: Path,
) -> None:
    """An attached validation's hook that cannot be imported is a ConfigError at
    `hooks.setup` (or `hooks.teardown`) naming the validation, before anything runs."""
    catalog = Catalog.in_memory()
    from gategraph.runtime import Validation

    catalog.add(
        Validation.from_config(
            {"name": "v", "entrypoint": f"{T}:passing", "hooks": {"teardown": "gg_no_hooks:x"}}
        )
    )
    catalog.attach("repo", "v")
    g = graph(f"""
        version: 1
        name: att
        resources: {{repo: {{kind: directory, path: "{_repo(tmp_path)}"}}}}
        tools:
          - {{name: w, code: "def run(**_):\\n    return 1\\n"}}
        nodes: [{{id: w, tool: w}}]
        """)
    with pytest.raises(ConfigError) as caught:
        await execute_graph(g, catalog=catalog)
    assert caught.value.field == "hooks.teardown"
    assert str(caught.value) == (
        "hooks.teardown: cannot import 'gg_no_hooks': ModuleNotFoundError: "
        "No module named 'gg_no_hooks' (a hook of 'v')"
    )


EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "graphs").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
async def test_examples_run_through_execute_graph(path: Path) -> None:
    """Every example graph runs end to end and passes; informational failures do not block."""
    run = await execute_graph(load_graph(path))
    assert run.passed, [(v.node, v.result.message) for v in run.required_failures]
    assert all(r.status is NodeStatus.OK for r in run.nodes.values())
    assert len(run.validations) >= 3


async def test_select_and_given() -> None:
    """Only the selected nodes run; the outputs they need come from `given`."""
    g = graph(FANOUT)
    first = await execute_graph(g, select={"make"})
    assert set(first.nodes) == {"make"}
    second = await execute_graph(
        g, select={"v1", "v4"}, given={"make": first.nodes["make"].output}, attempt=2
    )
    assert set(second.nodes) == {"v1", "v4"}
    assert [v.node for v in second.required_failures] == ["v4"]
    with pytest.raises(ConfigError, match="v1 needs make, which neither runs nor is given"):
        await execute_graph(g, select={"v1"})
    with pytest.raises(ConfigError, match="no node or attachment nope"):
        await execute_graph(g, select={"nope"})


async def test_wrapped_tool_in_a_worker_process_is_guarded(tmp_path: Path) -> None:
    """Regression: a validation wrapping a writing tool is guarded in a worker process too."""
    repo = _repo(tmp_path)
    g = graph(f"""
        version: 1
        name: wrapped-process
        resources: {{repo: {{kind: directory, path: "{repo}"}}}}
        tools:
          - {{name: w, entrypoint: "{T}:writing", resource_slots: [root]}}
        validations:
          - {{name: v, wraps: w, transform: output}}
        nodes: [{{id: n, validation: v, isolation: process}}]
        """)
    result = (await execute_graph(g)).validations[0].result
    assert result.data["error"] == "read_only_violation"
    assert sorted(p.name for p in repo.iterdir()) == ["a.py"]


class FailsToStart:
    async def on_start(self) -> None:
        raise ValueError("no licence")

    async def receive(self, message: NodeRequest) -> Any:
        return "never"


async def test_actor_failing_to_start_fails_its_node_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """An actor whose on_start raises fails its node; the other nodes still run."""
    mod = fake_module(monkeypatch, "gg_start", FailsToStart=FailsToStart)
    g = graph(f"""
        version: 1
        name: start
        validations: [{{name: ok, entrypoint: "{T}:passing"}}]
        nodes:
          - {{id: a, uses: "{mod}:FailsToStart"}}
          - {{id: v, validation: ok}}
        """)
    run = await execute_graph(g)
    assert run.nodes["a"].status is NodeStatus.FAILED
    assert "ValueError: no licence" in (run.nodes["a"].error or "")
    assert run.nodes["v"].status is NodeStatus.OK


class BrokenLog(MemoryEventLog):
    """A log whose flush fails, like a disk that filled up."""

    appends_immediately = False

    async def flush(self, plan_id: str | None = None) -> None:
        raise RuntimeFault("the event log could not be written: disk full")


async def test_event_log_failure_surfaces_as_itself() -> None:
    """A failing event log stops the run with RuntimeFault, not an exception group."""
    with pytest.raises(RuntimeFault, match="disk full"):
        await execute_graph(graph(FANOUT), event_log=BrokenLog())


async def test_a_failure_skips_a_long_chain() -> None:
    """A failure before a chain of 2,000 nodes skips them all (no recursion limit)."""
    nodes = [{"id": "w", "tool": "boom"}] + [
        {"id": f"v{i}", "validation": "ok", "needs": ["w" if i == 0 else f"v{i - 1}"]}
        for i in range(2000)
    ]
    g = load_graph(
        {
            "version": 1,
            "name": "chain",
            "tools": [{"name": "boom", "entrypoint": f"{T}:raising"}],
            "validations": [{"name": "ok", "entrypoint": f"{T}:passing"}],
            "nodes": nodes,
        }
    )
    run = await execute_graph(g)
    assert sum(r.status is NodeStatus.SKIPPED for r in run.nodes.values()) == 2000


@pytest.mark.parametrize("log_kind", ["memory", "sqlite"])
async def test_idle_workers_serve_work_that_becomes_ready_late(
    log_kind: str, tmp_path: Path
) -> None:
    # The first fan-out ends while the gate still runs: its workers go idle (or leave),
    # and the second fan-out, released by the gate, must still find workers.
    g = load_graph(
        {
            "version": 1,
            "name": "late",
            "validations": [{"name": "quick", "entrypoint": f"{T}:sleeping"}],
            "nodes": [
                {"id": "gate", "validation": "quick", "arguments": {"seconds": 0.05}},
                *({"id": f"a{i}", "validation": "quick"} for i in range(20)),
                *({"id": f"b{i}", "validation": "quick", "needs": ["gate"]} for i in range(20)),
            ],
            "policy": {"max_concurrency": 8},
        }
    )
    if log_kind == "sqlite":
        async with SQLiteEventLog(tmp_path / "events.db") as log:
            run = await execute_graph(g, event_log=log)
    else:
        run = await execute_graph(g, event_log=MemoryEventLog())
    assert len(run.validations) == 41
    assert all(r.status is NodeStatus.OK for r in run.nodes.values())


async def test_each_call_is_told_the_change_it_validates(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``changed`` reaches every call's context, awaited on the loop or run in a thread,
    by the folder each resource resolved to; after the run, a context knows nothing."""
    from gategraph.runtime import ToolContext

    seen: dict[str, Any] = {}

    async def on_loop(root: Path, context: ToolContext, **_: Any) -> dict[str, Any]:
        seen["loop"] = context.changed(root)
        return {"passed": True}

    def in_thread(root: Path, context: ToolContext, **_: Any) -> dict[str, Any]:
        seen["thread"] = context.changed()
        seen["other"] = context.changed(tmp_path)
        return {"passed": True}

    (tmp_path / "repo").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "repo")
    mod = fake_module(monkeypatch, "gg_changed", on_loop=on_loop, in_thread=in_thread)
    slot = "resource_slots: [{name: root, kind: directory}]"
    g = graph(f"""
        version: 1
        name: changed
        resources:
          repo: {{kind: directory, path: "{tmp_path / "link"}"}}
        validations:
          - {{name: loop, entrypoint: "{mod}:on_loop", {slot}}}
          - {{name: thread, entrypoint: "{mod}:in_thread", {slot}}}
        nodes:
          - {{id: l, validation: loop, resources: [repo], isolation: inline}}
          - {{id: t, validation: thread, resources: [repo], isolation: thread}}
        """)
    run = await execute_graph(g, changed={"repo": ["a.py", "b/c.py"]})
    assert all(r.result.passed for r in run.validations)
    assert seen == {
        "loop": frozenset({"a.py", "b/c.py"}),
        "thread": frozenset({"a.py", "b/c.py"}),
        "other": None,
    }
    assert ToolContext(resources={"root": tmp_path / "repo"}).changed() is None


async def test_a_change_named_wrongly_is_one_error(tmp_path: Path) -> None:
    """``changed`` names folder resources of the graph, each with a list of paths: anything
    else is a one-line ConfigError naming the field, before anything runs."""
    (tmp_path / "repo").mkdir()
    g = graph(f"""
        version: 1
        name: changed
        resources:
          repo: {{kind: directory, path: "{tmp_path / "repo"}"}}
          notes: {{kind: memory, files: {{a.md: hi}}}}
        nodes:
          - {{id: s, validation: python_syntax, resources: [repo]}}
        """)
    for changed, message in (
        ({"nowhere": ["a.py"]}, "changed.nowhere: not a resource of the graph"),
        ({"notes": ["a.md"]}, "changed.notes: not a folder"),
        ({"repo": "a.py"}, "changed.repo: give a list of paths relative to the folder"),
    ):
        with pytest.raises(ConfigError, match=message) as raised:
            await execute_graph(g, changed=changed)
        assert "\n" not in str(raised.value)
