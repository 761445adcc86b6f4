"""Spans a user opens inside gategraph's calls nest under the gategraph span they belong to."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from _helpers import fake_module, python_prints
from gategraph.runtime import (
    EscalationDecision,
    EscalationRequest,
    ExecuteRequest,
    FixRequest,
    MemoryEventLog,
    NodeRequest,
    ObservedEventLog,
    OpenTelemetryObserver,
    PlainProgress,
    Strategy,
    StrategyRequest,
    execute_graph,
    load_graph,
    run_plan,
)
from gategraph.runtime._base._spans import NO_SPAN, current_span, span_activator
from gategraph.runtime._data._maxn import InMemoryAuditLog

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.anyio

MODULE = "gg_traced_tools"


class Traced:
    """A private tracer provider (the global one is left alone) and its finished spans."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = provider.get_tracer("user-code")
        self.observer = OpenTelemetryObserver(provider.get_tracer("tests"))

    def log(self) -> ObservedEventLog:
        return ObservedEventLog(MemoryEventLog(), self.observer)

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def one(self, name: str) -> ReadableSpan:
        (span,) = [s for s in self.spans() if s.name == name]
        return span

    def parent(self, name: str) -> ReadableSpan:
        """The finished span that is the parent of the one span called ``name``."""
        child = self.one(name)
        assert child.parent is not None, f"{name} has no parent"
        by_id = {s.context.span_id: s for s in self.spans()}
        return by_id[child.parent.span_id]


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> Traced:
    """Tracing, and a module of tools, validations and an actor that open spans of their own."""
    setup = Traced()
    tracer = setup.tracer

    def make() -> dict[str, Any]:
        with tracer.start_as_current_span("user.work-node"):
            return {"files": ["a.py"]}

    def sync_check() -> dict[str, Any]:
        with tracer.start_as_current_span("user.sync-check"):
            return {"passed": True}

    async def async_check() -> dict[str, Any]:
        with tracer.start_as_current_span("user.async-check"):
            await anyio.lowlevel.checkpoint()
            return {"passed": True}

    async def threaded_async_check() -> dict[str, Any]:
        with tracer.start_as_current_span("user.threaded-async-check"):
            return {"passed": True}

    async def hanging_check() -> dict[str, Any]:
        with tracer.start_as_current_span("user.hanging-check"):
            await anyio.sleep_forever()
        raise AssertionError("unreachable")

    def raising_check() -> dict[str, Any]:
        with tracer.start_as_current_span("user.raising-check"):
            raise ValueError("broken on purpose")

    def parses(artifact: Any) -> dict[str, Any]:
        try:
            compile(artifact["code"], "code", "exec")
        except SyntaxError as exc:
            return {"passed": False, "message": str(exc)}
        return {"passed": True}

    def never() -> dict[str, Any]:
        return {"passed": False, "message": "never passes"}

    class Reviewer:
        async def receive(self, message: NodeRequest) -> Any:
            with tracer.start_as_current_span("user.actor-node"):
                return {"reviewed": sorted(message.inputs)}

    fake_module(
        monkeypatch,
        MODULE,
        make=make,
        sync_check=sync_check,
        async_check=async_check,
        threaded_async_check=threaded_async_check,
        raising_check=raising_check,
        hanging_check=hanging_check,
        parses=parses,
        never=never,
        Reviewer=Reviewer,
    )
    return setup


GRAPH = f"""
version: 1
name: nested
tools:
  - {{name: make, entrypoint: "{MODULE}:make"}}
validations:
  - {{name: sync-check, entrypoint: "{MODULE}:sync_check"}}
  - {{name: async-check, entrypoint: "{MODULE}:async_check"}}
  - {{name: threaded-async-check, entrypoint: "{MODULE}:threaded_async_check"}}
  - {{name: raising-check, entrypoint: "{MODULE}:raising_check", mode: informational}}
nodes:
  - {{id: make, tool: make, isolation: thread}}
  - {{id: sync, validation: sync-check, needs: [make], isolation: thread}}
  - {{id: async, validation: async-check, needs: [make], isolation: inline}}
  - {{id: threaded, validation: threaded-async-check, needs: [make], isolation: thread}}
  - {{id: raising, validation: raising-check, needs: [make], isolation: thread}}
  - {{id: review, uses: "{MODULE}:Reviewer", needs: [sync, async]}}
"""


def _attribute(span: ReadableSpan, key: str) -> Any:
    assert span.attributes is not None
    return span.attributes[f"gategraph.{key}"]


async def test_user_spans_nest_under_the_node_they_run_in(traced: Traced) -> None:
    """A sync validation (a worker thread), an async one (on the loop, and on a loop of its
    own in a thread) and a raising one nest under their validation span, under the round,
    under the plan; the work node under the work phase; the actor node under the round."""
    outcome = await run_plan(load_graph(GRAPH), event_log=traced.log(), audit=InMemoryAuditLog())
    traced.observer.finish(outcome)
    assert outcome.status == "applied", outcome.message
    plan_span = traced.one("gategraph.plan")
    round_span = traced.one("gategraph.round")
    for user, node in [
        ("user.sync-check", "sync"),
        ("user.async-check", "async"),
        ("user.threaded-async-check", "threaded"),
        ("user.raising-check", "raising"),
    ]:
        validation = traced.parent(user)
        assert validation.name == "gategraph.validation", user
        assert _attribute(validation, "node") == node
        assert traced.parent(user).parent.span_id == round_span.context.span_id  # type: ignore[union-attr]
        # One trace: the plan's.
        assert traced.one(user).context.trace_id == plan_span.context.trace_id
    assert traced.parent("gategraph.round").context.span_id == plan_span.context.span_id
    assert traced.parent("user.work-node").name == "gategraph.work"
    assert traced.parent("user.actor-node").name == "gategraph.round"
    # The event-derived attributes are as before: the work span says which attempt it was.
    assert _attribute(traced.one("gategraph.work"), "attempt") == 1
    assert not any((s.attributes or {}).get("gategraph.incomplete") for s in traced.spans())


async def test_the_callers_span_is_current_again_afterwards(traced: Traced) -> None:
    """Every activation is undone: the caller's span is current after the plan, and its
    spans are the plan span's parent, not a gategraph span's."""
    with traced.tracer.start_as_current_span("caller") as caller:
        outcome = await run_plan(
            load_graph(GRAPH), event_log=traced.log(), audit=InMemoryAuditLog()
        )
        assert trace.get_current_span() is caller
    traced.observer.finish(outcome)
    assert traced.parent("gategraph.plan").name == "caller"


async def test_a_timed_out_or_raising_call_leaves_no_span_current(traced: Traced) -> None:
    """A validation cancelled at its timeout and one that raised: each user span ends under
    its validation span, the next call on the same worker gets its own, and the caller's
    span is current again after the run."""
    graph = load_graph(f"""
        version: 1
        name: rough
        validations:
          - {{name: hang, entrypoint: "{MODULE}:hanging_check"}}
          - {{name: boom, entrypoint: "{MODULE}:raising_check"}}
          - {{name: fine, entrypoint: "{MODULE}:async_check"}}
        nodes:
          - {{id: hang, validation: hang, timeout: 0.05, isolation: inline}}
          - {{id: boom, validation: boom, isolation: thread}}
          - {{id: fine, validation: fine, isolation: inline}}
        policy: {{max_concurrency: 1}}
        """)
    with traced.tracer.start_as_current_span("caller") as caller:
        run = await execute_graph(graph, event_log=traced.log())
        assert trace.get_current_span() is caller
    traced.observer.close()
    by_node = {record.node: record for record in run.validations}
    assert by_node["hang"].result.data["error"] == "timeout"
    assert by_node["boom"].result.data["error"] == "exception"
    for user, node in [
        ("user.hanging-check", "hang"),
        ("user.raising-check", "boom"),
        ("user.async-check", "fine"),
    ]:
        validation = traced.parent(user)
        assert validation.name == "gategraph.validation", user
        assert _attribute(validation, "node") == node
    assert traced.parent("gategraph.run").name == "caller"


async def test_lifecycle_actors_as_objects_run_under_their_phase_span(traced: Traced) -> None:
    """A strategy actor under gategraph.strategize; an execution actor's execute and fix,
    each under the work span of its attempt."""
    tracer = traced.tracer

    class Editor:
        async def execute(self, request: ExecuteRequest) -> Any:
            with tracer.start_as_current_span("user.execute"):
                return {"code": "def f(:\n"}

        async def fix(self, request: FixRequest) -> Any:
            with tracer.start_as_current_span("user.fix"):
                return {"code": "x = 1\n"}

    async def strategize(request: StrategyRequest) -> Strategy:
        with tracer.start_as_current_span("user.strategize"):
            return Strategy(summary="write f")

    graph = load_graph(
        "version: 1\nname: edited\n"
        f"validations: [{{name: parses, entrypoint: '{MODULE}:parses'}}]\n"
        "nodes: [{id: parses, validation: parses, isolation: thread}]\n"
    )
    outcome = await run_plan(
        graph,
        event_log=traced.log(),
        audit=InMemoryAuditLog(),
        execution_actor=Editor(),
        strategy_actor=strategize,
    )
    traced.observer.finish(outcome)
    assert outcome.status == "applied", outcome.message
    assert traced.parent("user.strategize").name == "gategraph.strategize"
    execute, fix = traced.parent("user.execute"), traced.parent("user.fix")
    assert execute.name == fix.name == "gategraph.work"
    assert (_attribute(execute, "attempt"), _attribute(fix, "attempt")) == (1, 2)
    # Each work span is timed by its events: it starts when the phase began, before the
    # user's span, and ends after it.
    for work, user in [(execute, "user.execute"), (fix, "user.fix")]:
        inner = traced.one(user)
        assert work.start_time <= inner.start_time <= inner.end_time <= work.end_time  # type: ignore[operator]


async def test_an_escalation_handler_runs_under_the_escalation_span(traced: Traced) -> None:
    """Asked to escalate, the handler's spans nest under gategraph.escalation."""
    tracer = traced.tracer

    async def person(request: EscalationRequest) -> EscalationDecision:
        with tracer.start_as_current_span("user.escalate"):
            return EscalationDecision(action="abort", note="not today")

    graph = load_graph(
        "version: 1\nname: stuck\n"
        f"validations: [{{name: never, entrypoint: '{MODULE}:never'}}]\n"
        "nodes: [{id: gate, validation: never, isolation: thread}]\n"
        "policy: {retry_limit: 0, strategy_revisions: 0}\n"
    )
    outcome = await run_plan(
        graph, event_log=traced.log(), audit=InMemoryAuditLog(), escalation=person
    )
    traced.observer.finish(outcome)
    assert outcome.status == "failed"
    escalation = traced.parent("user.escalate")
    assert escalation.name == "gategraph.escalation"
    assert _attribute(escalation, "action") == "abort"


async def test_an_approval_asked_of_the_handler_runs_under_the_approval_span(
    traced: Traced,
) -> None:
    """Asked to approve, the handler's spans nest under gategraph.approval."""
    tracer = traced.tracer

    async def approver(request: EscalationRequest) -> EscalationDecision:
        with tracer.start_as_current_span("user.approve"):
            return EscalationDecision(action="approve")

    graph = load_graph(
        "version: 1\nname: approved\n"
        f"validations: [{{name: ok, entrypoint: '{MODULE}:sync_check'}}]\n"
        "nodes: [{id: gate, validation: ok, isolation: thread}]\n"
        "policy: {approval: {rules: [{match: gate, action: require, tier: high}]}}\n"
    )
    outcome = await run_plan(
        graph, event_log=traced.log(), audit=InMemoryAuditLog(), escalation=approver
    )
    traced.observer.finish(outcome)
    assert outcome.status == "applied", outcome.message
    approval = traced.parent("user.approve")
    assert approval.name == "gategraph.approval"
    assert _attribute(approval, "approved") is True


async def test_a_validation_in_a_worker_process_runs_and_keeps_its_span(traced: Traced) -> None:
    """A span cannot follow a call into a worker process: the call just runs there, and its
    validation span is made as always."""
    graph = load_graph(
        "version: 1\nname: isolated\n"
        "validations: [{name: ok, entrypoint: 'gategraph.runtime.testing:passing'}]\n"
        "nodes: [{id: gate, validation: ok, isolation: process}]\n"
    )
    outcome = await run_plan(graph, event_log=traced.log(), audit=InMemoryAuditLog())
    traced.observer.finish(outcome)
    assert outcome.status == "applied", outcome.message
    validation = traced.one("gategraph.validation")
    assert _attribute(validation, "passed") is True
    assert traced.parent("gategraph.validation").name == "gategraph.round"


async def test_a_graph_run_on_its_own_nests_validation_spans_too(traced: Traced) -> None:
    """execute_graph without a plan: each validation's span is current while it runs."""
    run = await execute_graph(load_graph(GRAPH), event_log=traced.log())
    traced.observer.close()
    assert run.passed
    validation = traced.parent("user.sync-check")
    assert validation.name == "gategraph.validation"
    assert _attribute(validation, "node") == "sync"


async def test_without_a_tracing_observer_there_is_nothing_to_activate() -> None:
    """A plain log, or one watched only by a display, has no span activator, and the
    helper's activation is the shared no-op."""
    assert span_activator(MemoryEventLog()) is None
    assert span_activator(ObservedEventLog(MemoryEventLog(), PlainProgress())) is None
    assert current_span(MemoryEventLog(), "P", "work") is NO_SPAN
    observer = Traced().observer
    nested = ObservedEventLog(ObservedEventLog(MemoryEventLog(), observer), PlainProgress())
    assert span_activator(nested) is observer
    # A traced log, but no such plan or span (yet): nothing to make current.
    assert current_span(nested, "P", "work") is NO_SPAN


def test_importing_the_runtime_imports_no_opentelemetry() -> None:
    """The engine and supervisor, which activate spans, import no OpenTelemetry."""
    code = (
        "import sys, gategraph.runtime, gategraph.runtime._running._engine, "
        "gategraph.runtime._lifecycle._supervisor, gategraph.runtime._running._observe; "
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    assert python_prints(code) == "[]"
