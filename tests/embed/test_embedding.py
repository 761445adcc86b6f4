"""Embedding: actors passed as objects or plain async callables, and the sync twins."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import fake_module
from gategraph.runtime import (
    ConfigError,
    EscalationDecision,
    EscalationRequest,
    ExecuteRequest,
    FixRequest,
    MemoryEventLog,
    PlanGraph,
    Strategy,
    StrategyRequest,
    execute_graph_sync,
    load_graph,
    resume_plan,
    resume_plan_sync,
    run_plan,
    run_plan_sync,
)


def _graph(tmp_path: Path, *, approval: bool = False) -> PlanGraph:
    """A folder resource and a required syntax check of it; no work nodes of its own."""
    repo = tmp_path / "repo"
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "a.py").write_text("x = 1\n")
    text = (
        f"version: 1\nname: embedded\nresources: {{repo: {{kind: directory, path: '{repo}'}}}}\n"
        "nodes: [{id: syntax, validation: python_syntax}]\n"
    )
    if approval:
        text += "policy: {approval: {rules: [{match: syntax, action: require, tier: high}]}}\n"
    return load_graph(text)


@pytest.mark.anyio
async def test_an_async_callable_is_the_execution_actor(tmp_path: Path) -> None:
    """The callable writes into the sandbox; a rejection calls it again with a FixRequest;
    the fixed change is applied to the real folder."""
    seen: list[str] = []

    async def edit(request: ExecuteRequest) -> Any:
        seen.append(type(request).__name__)
        broken = not isinstance(request, FixRequest)
        (request.resources["repo"] / "b.py").write_text("def f(:\n" if broken else "y = 2\n")
        return {"files": ["b.py"]}

    outcome = await run_plan(_graph(tmp_path), event_log=MemoryEventLog(), execution_actor=edit)
    assert outcome.status == "applied", outcome.message
    assert seen == ["ExecuteRequest", "FixRequest"]
    assert (tmp_path / "repo" / "b.py").read_text() == "y = 2\n"


@pytest.mark.anyio
async def test_actor_instances_and_a_strategy_callable(tmp_path: Path) -> None:
    """An instance with execute/fix, and a strategy callable returning a summary."""

    class Editor:
        def __init__(self) -> None:
            self.fixes = 0

        async def execute(self, request: ExecuteRequest) -> Any:
            (request.resources["repo"] / "c.py").write_text("z = 3\n")
            return {"files": ["c.py"]}

        async def fix(self, request: FixRequest) -> Any:
            self.fixes += 1
            return {"files": []}

    async def plan(request: StrategyRequest) -> str:
        return f"add c.py (revision {request.revision})"

    log = MemoryEventLog()
    editor = Editor()
    outcome = await run_plan(
        _graph(tmp_path), event_log=log, execution_actor=editor, strategy_actor=plan
    )
    assert outcome.status == "applied"
    assert editor.fixes == 0
    produced = [
        e for e in await log.read(outcome.plan_id) if type(e).__name__ == "StrategyProduced"
    ]
    assert produced[0].summary == "add c.py (revision 0)"


@pytest.mark.anyio
async def test_a_strategy_callable_may_return_a_strategy_or_data(tmp_path: Path) -> None:
    """Strategy objects and mappings are accepted as they are."""

    async def as_object(request: StrategyRequest) -> Strategy:
        return Strategy(summary="object", data={"k": 1})

    async def as_mapping(request: StrategyRequest) -> dict[str, Any]:
        return {"summary": "mapping", "steps": 2}

    for strategy, summary in ((as_object, "object"), (as_mapping, "mapping")):
        log = MemoryEventLog()
        outcome = await run_plan(_graph(tmp_path), event_log=log, strategy_actor=strategy)
        assert outcome.status == "applied"
        (event,) = [
            e for e in await log.read(outcome.plan_id) if type(e).__name__ == "StrategyProduced"
        ]
        assert event.summary == summary


@pytest.mark.anyio
async def test_what_is_not_an_actor_is_refused_up_front(tmp_path: Path) -> None:
    """A sync function, or an object without the methods: one ConfigError, nothing run."""

    def not_async(request: Any) -> Any:
        return {}

    with pytest.raises(ConfigError, match=r"execution_actor: .* neither an execution actor"):
        await run_plan(_graph(tmp_path), execution_actor=not_async)
    with pytest.raises(ConfigError, match=r"strategy_actor: .* neither a strategy actor"):
        await run_plan(_graph(tmp_path), strategy_actor=object())  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_resume_with_the_same_actors_passed_again(tmp_path: Path) -> None:
    """A plan paused for approval continues when resumed with its actors and the answer."""
    calls: list[str] = []

    async def edit(request: ExecuteRequest) -> Any:
        calls.append("work")
        (request.resources["repo"] / "d.py").write_text("w = 4\n")
        return {"files": ["d.py"]}

    log = MemoryEventLog()
    graph = _graph(tmp_path, approval=True)
    paused = await run_plan(graph, event_log=log, execution_actor=edit)
    assert paused.status == "awaiting_approval"
    done = await resume_plan(
        paused.plan_id,
        graph,
        event_log=log,
        execution_actor=edit,
        decision=EscalationDecision(action="approve"),
    )
    assert done.status == "applied"
    assert calls == ["work"]  # taken from the log when resumed, not done again
    assert (tmp_path / "repo" / "d.py").read_text() == "w = 4\n"


def test_the_sync_twins_run_without_an_event_loop(tmp_path: Path) -> None:
    """run_plan_sync / resume_plan_sync / execute_graph_sync from plain code."""
    log = MemoryEventLog()
    graph = _graph(tmp_path, approval=True)
    paused = run_plan_sync(graph, event_log=log)
    assert paused.status == "awaiting_approval"
    done = resume_plan_sync(
        paused.plan_id, graph, event_log=log, decision=EscalationDecision(action="approve")
    )
    assert done.status == "applied"
    run = execute_graph_sync(_graph(tmp_path / "again"))
    assert run.passed


@pytest.mark.anyio
async def test_a_sync_twin_inside_a_running_loop_says_what_to_do(tmp_path: Path) -> None:
    """Called on a thread running a loop: RuntimeError naming the async twin; from a
    worker thread while the loop runs, it works."""
    graph = _graph(tmp_path)
    with pytest.raises(RuntimeError, match=r"use `await run_plan\(...\)` there"):
        run_plan_sync(graph)
    outcome = await anyio.to_thread.run_sync(lambda: run_plan_sync(graph))
    assert outcome.status == "applied"


def _failing_graph(tmp_path: Path, lifecycle: str = "") -> PlanGraph:
    """A required validation that always fails, one retry, no revision: it escalates."""
    text = (
        "version: 1\nname: escalating\n"
        "validations: [{name: never, entrypoint: 'gategraph.runtime.testing:failing'}]\n"
        "nodes: [{id: gate, validation: never}]\n"
        "policy: {retry_limit: 1, strategy_revisions: 0}\n" + lifecycle
    )
    return load_graph(text)


@pytest.mark.anyio
async def test_an_escalation_handler_object_answers_with_its_method(tmp_path: Path) -> None:
    """An object with `async escalate(request)` keeps its state between questions."""

    class Desk:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def escalate(self, request: EscalationRequest) -> EscalationDecision:
            self.asked.append(request.reason)
            return EscalationDecision(action="abort", note="not today")

    desk = Desk()
    outcome = await run_plan(_failing_graph(tmp_path), escalation=desk)
    assert outcome.status == "failed"
    assert "not today" in outcome.message
    assert desk.asked == ["exhausted"]
    with pytest.raises(ConfigError, match=r"escalation: .* neither an escalation handler"):
        await run_plan(_failing_graph(tmp_path), escalation=object())  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_lifecycle_import_paths_may_name_objects_and_functions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lifecycle.<role>.uses` names a class (built with arguments), an instance or an
    async function; `check` refuses what cannot play the role, and arguments to an object."""

    class Desk:
        async def escalate(self, request: EscalationRequest) -> EscalationDecision:
            return EscalationDecision(action="abort", note="desk says no")

    async def decide(request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort", note="function says no")

    module = fake_module(monkeypatch, "gg_roles", desk=Desk(), decide=decide, Desk=Desk)
    for uses, note in (("desk", "desk says no"), ("decide", "function says no"), ("Desk", "")):
        graph = _failing_graph(
            tmp_path, f"lifecycle: {{escalation: {{uses: '{module}:{uses}'}}}}\n"
        )
        outcome = await run_plan(graph)
        assert outcome.status == "failed", uses
        assert (note or "desk says no") in outcome.message
    with pytest.raises(ConfigError, match=r"lifecycle\.escalation\.uses: .* used as it is"):
        _failing_graph(
            tmp_path, f"lifecycle: {{escalation: {{uses: '{module}:desk', arguments: {{a: 1}}}}}}\n"
        )
    with pytest.raises(ConfigError, match=r"lifecycle\.executor\.uses: .* has no `async execute"):
        _failing_graph(tmp_path, f"lifecycle: {{executor: {{uses: '{module}:Desk'}}}}\n")
    with pytest.raises(ConfigError, match=r"lifecycle\.strategy\.uses: .* neither a strategy"):
        _failing_graph(tmp_path, f"lifecycle: {{strategy: {{uses: '{module}:desk'}}}}\n")


class Esc:
    async def escalate(self, request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort")


class Planner:
    async def strategize(self, request: StrategyRequest) -> Strategy:
        return Strategy(summary="plan")


class Editor:
    async def execute(self, request: ExecuteRequest) -> Any:
        return {}

    async def fix(self, request: FixRequest) -> Any:
        return {}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("argument", "cls"),
    [("strategy_actor", Planner), ("execution_actor", Editor), ("escalation", Esc)],
)
async def test_a_class_passed_for_an_object_is_refused_up_front(
    tmp_path: Path, argument: str, cls: type
) -> None:
    """The class itself, not an instance: one line naming the argument, before any run."""
    with pytest.raises(ConfigError) as caught:
        await run_plan(_failing_graph(tmp_path), **{argument: cls})
    name = cls.__name__
    assert (
        str(caught.value) == f"{argument}: <class {name}> is a class: pass an instance ({name}())"
    )


class SyncDesk:
    def escalate(self, request: EscalationRequest) -> EscalationDecision:
        return EscalationDecision(action="abort")


class SyncEditor:
    def execute(self, request: ExecuteRequest) -> Any:
        return {}

    def fix(self, request: FixRequest) -> Any:
        return {}


class HalfSyncEditor(Editor):
    def fix(self, request: FixRequest) -> Any:  # type: ignore[override]
        return {}


@pytest.mark.anyio
async def test_an_object_with_a_sync_role_method_is_refused_up_front(tmp_path: Path) -> None:
    """A plain `def` where the role awaits: one line naming the method to make async."""
    cases: list[tuple[str, Any, str]] = [
        (
            "escalation",
            SyncDesk(),
            "escalation: <SyncDesk object> has a sync `escalate`: "
            "it must be `async def escalate(self, request)`",
        ),
        (
            "execution_actor",
            SyncEditor(),
            "execution_actor: <SyncEditor object> has a sync `execute` and `fix`: "
            "they must be `async def`",
        ),
        (
            "execution_actor",
            HalfSyncEditor(),
            "execution_actor: <HalfSyncEditor object> has a sync `fix`: "
            "it must be `async def fix(self, request)`",
        ),
    ]
    for argument, actor, expected in cases:
        with pytest.raises(ConfigError) as caught:
            await run_plan(_failing_graph(tmp_path), **{argument: actor})
        assert str(caught.value) == expected


@pytest.mark.anyio
async def test_async_role_methods_in_other_shapes_are_accepted(tmp_path: Path) -> None:
    """A decorated method whose wrapper returns the coroutine, async static methods on a
    class, and an async callable object as the method all answer the escalation."""

    def logged(method: Any) -> Any:
        @functools.wraps(method)
        def wrapper(*args: Any) -> Any:
            return method(*args)

        return wrapper

    class Decorated:
        @logged
        async def escalate(self, request: EscalationRequest) -> EscalationDecision:
            return EscalationDecision(action="abort", note="decorated")

    class Static:
        @staticmethod
        async def escalate(request: EscalationRequest) -> EscalationDecision:
            return EscalationDecision(action="abort", note="static")

    class Answer:
        async def __call__(self, request: EscalationRequest) -> EscalationDecision:
            return EscalationDecision(action="abort", note="callable attribute")

    class Holder:
        escalate = Answer()

    for handler, note in (
        (Decorated(), "decorated"),
        (Static, "static"),
        (Holder(), "callable attribute"),
    ):
        outcome = await run_plan(_failing_graph(tmp_path), escalation=handler)
        assert outcome.status == "failed"
        assert note in outcome.message


def test_lifecycle_import_paths_with_sync_role_methods_fail_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A class to build or an object whose role method is a plain `def`: the graph does
    not load, with one line naming the field and the method."""
    module = fake_module(
        monkeypatch, "gg_sync_roles", SyncDesk=SyncDesk, desk=SyncDesk(), SyncEditor=SyncEditor
    )
    must = "it must be `async def escalate(self, request)`"
    cases = [
        ("escalation", "SyncDesk", f"has a sync `escalate`: {must}"),
        ("escalation", "desk", f"has a sync `escalate`: {must}"),
        ("executor", "SyncEditor", "has a sync `execute` and `fix`: they must be `async def`"),
    ]
    for role, name, problem in cases:
        lifecycle = f"lifecycle: {{{role}: {{uses: '{module}:{name}'}}}}\n"
        with pytest.raises(ConfigError) as caught:
            _failing_graph(tmp_path, lifecycle)
        expected = f"lifecycle.{role}.uses: '{module}:{name}' {problem}"
        (issue,) = caught.value.issues
        assert issue.render() == expected
        assert str(caught.value) == issue.render(caught.value.source)  # one line, with where


def test_a_sync_twin_opens_a_sqlite_log_for_the_call(tmp_path: Path) -> None:
    """A SQLite log is opened on the loop that uses it: the sync twin's own."""
    from gategraph.runtime import SQLiteEventLog, read_events, validate_sync

    db = tmp_path / "events.db"
    verdict = validate_sync(
        validations=[{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
        event_log=SQLiteEventLog(db),
        plan="sync-1",
    )
    assert verdict.passed
    assert read_events(db, "sync-1")[0].plan_id == "sync-1"
    outcome = run_plan_sync(_graph(tmp_path), event_log=SQLiteEventLog(db))
    assert outcome.status == "applied"


def test_a_sync_call_never_formats_its_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync twins keep the result out of the event loop's main task: asyncio's runner
    formats that task while it restores the signal handlers, which for a large plan's
    outcome would cost tens of milliseconds."""
    from gategraph.runtime import PlanOutcome, run_plan_sync

    formatted: list[int] = []

    def counted(self: Any) -> str:
        formatted.append(1)
        return "PlanOutcome(...)"

    monkeypatch.setattr(PlanOutcome, "__repr__", counted)
    outcome = run_plan_sync(_graph(tmp_path))
    assert outcome.status.value == "applied"
    assert formatted == []
