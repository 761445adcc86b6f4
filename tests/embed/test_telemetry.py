"""OpenTelemetry: a plan's events as a span tree, timed by the events themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import run_process
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime import MemoryEventLog, load_graph, run_plan
from gategraph.runtime._data._events import (
    ApplyCompleted,
    ArtifactRejected,
    ArtifactValidationStarted,
    EscalationDecided,
    EscalationRequested,
    EventBase,
    PlanFinished,
    PlanStarted,
    RetryDecided,
    RunFinished,
    StrategyProduced,
    StrategyRevisionRequested,
    ValidationCompleted,
    ValidationStarted,
)
from gategraph.runtime._data._events import ApprovalDecided as _ApprovalDecided
from gategraph.runtime._data._events import ApprovalRequired as _ApprovalRequired
from gategraph.runtime._data._events import PlanResumed as _PlanResumed
from gategraph.runtime._data._events import WorkFinished as _WorkFinished
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._data._results import ValidationResult
from gategraph.runtime._embed._telemetry import (
    OpenTelemetryObserver,
    record_statistics,
    telemetry_available,
)
from gategraph.runtime._lifecycle._supervisor import PlanStatistics
from gategraph.runtime._running._observe import ObservedEventLog

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def observer(exporter: InMemorySpanExporter) -> OpenTelemetryObserver:
    """An observer on a private provider (the global one is left alone)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryObserver(provider.get_tracer("tests"))


async def traced(text: str, observer: OpenTelemetryObserver) -> Any:
    outcome = await run_plan(
        load_graph(text),
        event_log=ObservedEventLog(MemoryEventLog(), observer),
        audit=InMemoryAuditLog(),
    )
    observer.finish(outcome)
    return outcome


def named(spans: list[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def ev(kind: type[EventBase], at: float = 1000.0, **fields: Any) -> Any:
    return kind(id="e", plan_id="P1", at=at, **fields)


@pytest.mark.anyio
async def test_a_passing_plan_is_one_tree(
    tmp_path: Path, observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """plan → strategize, round → validations, apply; statistics on the plan span."""
    outcome = await traced(plan(repo(tmp_path), [GOOD]), observer)
    spans = list(exporter.get_finished_spans())
    (root,) = named(spans, "gategraph.plan")
    assert root.parent is None
    assert root.attributes is not None
    assert root.attributes["gategraph.plan.id"] == outcome.plan_id
    assert root.attributes["gategraph.graph"] == "greet"
    assert root.attributes["gategraph.plan.status"] == "applied"
    assert root.attributes["gategraph.stats.rounds"] == 1
    assert root.attributes["gategraph.stats.pipeline_completions"] == 1
    assert root.attributes["gategraph.stats.semantic_invocations"] == 2
    assert "gategraph.stats.layer_seconds.semantic" in root.attributes
    assert root.status.status_code is StatusCode.OK
    root_id = root.context.span_id
    (round_,) = named(spans, "gategraph.round")
    assert parent_of(round_) == root_id
    assert round_.attributes == {
        "gategraph.round": 1,
        "gategraph.attempt": 1,
        "gategraph.revision": 0,
        "gategraph.outcome": "validated",
    }
    checks = {s.attributes["gategraph.node"]: s for s in named(spans, "gategraph.validation")}  # type: ignore[index]
    assert set(checks) == {"syntax", "advice"}
    assert {parent_of(s) for s in checks.values()} == {round_.context.span_id}
    assert checks["syntax"].attributes["gategraph.passed"] is True  # type: ignore[index]
    # The informational check failed: its span says so, and the plan still applied.
    advice = checks["advice"]
    assert advice.attributes["gategraph.passed"] is False  # type: ignore[index]
    assert advice.status.status_code is StatusCode.ERROR
    assert advice.status.description == "failed on purpose"
    (apply,) = named(spans, "gategraph.apply")
    assert parent_of(apply) == root_id
    assert apply.attributes["gategraph.changes.repo"] == "1 added, 0 modified, 0 deleted"  # type: ignore[index]
    (strategize,) = named(spans, "gategraph.strategize")
    assert parent_of(strategize) == root_id
    # Children nest in time inside the plan; nothing is left marked incomplete.
    assert all(root.start_time <= s.start_time <= s.end_time <= root.end_time for s in spans)  # type: ignore[operator]
    assert not any((s.attributes or {}).get("gategraph.incomplete") for s in spans)


@pytest.mark.anyio
async def test_a_fix_round_is_a_rejected_round_and_plan_events(
    tmp_path: Path, observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """A rejected first round fails its span; the retry decision and fix are plan events."""
    await traced(plan(repo(tmp_path), [BAD, GOOD]), observer)
    spans = list(exporter.get_finished_spans())
    first, second = sorted(named(spans, "gategraph.round"), key=lambda s: s.start_time or 0)
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["gategraph.outcome"] == "rejected"
    assert first.attributes["gategraph.layer"] == "semantic"
    assert first.attributes["gategraph.reasons"] == 1
    assert first.status.status_code is StatusCode.ERROR
    assert second.attributes["gategraph.outcome"] == "validated"
    assert second.attributes["gategraph.attempt"] == 2
    failed = [
        s
        for s in named(spans, "gategraph.validation")
        if parent_of(s) == first.context.span_id
        and (s.attributes or {}).get("gategraph.node") == "syntax"
    ]
    (syntax,) = failed
    assert syntax.attributes is not None and syntax.attributes["gategraph.passed"] is False
    assert syntax.status.status_code is StatusCode.ERROR
    (root,) = named(spans, "gategraph.plan")
    assert root.attributes is not None and root.attributes["gategraph.stats.fixes"] == 1
    assert root.attributes["gategraph.stats.rejections.semantic"] == 1
    events = {e.name: e for e in root.events}
    assert events["gategraph.retry_decided"].attributes == {
        "gategraph.round": 1,
        "gategraph.attempt": 1,
        "gategraph.fault_kind": "rejected",
        "gategraph.classification": "transient",
        "gategraph.decision": "fix",
        "gategraph.budget_used": 1,
        "gategraph.budget_limit": 3,
    }
    assert events["gategraph.fix_requested"].attributes == {"gategraph.attempt": 2}


def test_spans_take_the_events_times(
    observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """Start and end times are the events' ``at``, in nanoseconds."""
    result = ValidationResult(passed=False, message="boom", data={"error": "timeout"})
    for event in [
        ev(PlanStarted, 100.0, graph="g"),
        ev(ArtifactValidationStarted, 101.0, round=1, attempt=1, revision=0),
        ev(ValidationStarted, 102.0, node="n", validation="v", attachment_id="A1"),
        ev(ValidationCompleted, 104.5, node="n", validation="v", result=result, duration=2.5),
        ev(PlanFinished, 110.0, status="failed", message="gave up"),
    ]:
        observer.on_event(event)
    observer.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    check = spans["gategraph.validation"]
    assert (check.start_time, check.end_time) == (102_000_000_000, 104_500_000_000)
    assert check.attributes is not None
    assert check.attributes["gategraph.error"] == "timeout"
    assert check.attributes["gategraph.attachment_id"] == "A1"
    assert check.attributes["gategraph.duration"] == 2.5
    plan_span = spans["gategraph.plan"]
    assert (plan_span.start_time, plan_span.end_time) == (100_000_000_000, 110_000_000_000)
    assert plan_span.status.status_code is StatusCode.ERROR
    # The round never ended in the log: it is closed and marked so.
    assert spans["gategraph.round"].attributes["gategraph.incomplete"] is True  # type: ignore[index]


def test_a_crash_leaves_spans_marked_incomplete(
    observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """Closing mid-plan ends every open span at the last event's time, marked incomplete."""
    for event in [
        ev(PlanStarted, 100.0, graph="g"),
        ev(ArtifactValidationStarted, 101.0, round=1, attempt=1, revision=0),
        ev(ValidationStarted, 102.0, node="n", validation="v"),
    ]:
        observer.on_event(event)
    observer.close()
    observer.close()
    spans = list(exporter.get_finished_spans())
    assert sorted(s.name for s in spans) == [
        "gategraph.plan",
        "gategraph.round",
        "gategraph.strategize",
        "gategraph.validation",
    ]
    for span in spans:
        assert span.attributes is not None and span.attributes["gategraph.incomplete"] is True
        assert span.end_time == 102_000_000_000
    # A closed observer ignores what comes after.
    observer.on_event(ev(PlanFinished, 120.0, status="failed"))
    assert len(exporter.get_finished_spans()) == 4


def test_approval_spans_show_the_wait(
    observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """approval_required ends the round and opens an approval span that the decision ends;
    a decision whose request another run saw is placed by its recorded wait."""
    with observer:
        for event in [
            ev(PlanStarted, 100.0, graph="g"),
            ev(_WorkFinished, 101.0, attempt=1, error="executor crashed"),
            ev(ArtifactValidationStarted, 102.0, round=1, attempt=1, revision=0),
            ev(_ApprovalRequired, 103.0, round=1, tier="high", message="deploys"),
            ev(_ApprovalDecided, 130.0, approved=True, note="fine", waited=27.0),
            ev(_ApprovalDecided, 150.0, approved=False, waited=5.0),
            ev(PlanFinished, 151.0, status="failed"),
        ]:
            observer.on_event(event)
    spans = list(exporter.get_finished_spans())
    (round_,) = named(spans, "gategraph.round")
    assert round_.attributes is not None
    assert round_.attributes["gategraph.outcome"] == "needs_approval"
    first, second = sorted(named(spans, "gategraph.approval"), key=lambda s: s.start_time or 0)
    assert first.attributes == {
        "gategraph.round": 1,
        "gategraph.tier": "high",
        "gategraph.message": "deploys",
        "gategraph.approved": True,
        "gategraph.note": "fine",
        "gategraph.waited": 27.0,
    }
    assert (first.start_time, first.end_time) == (103_000_000_000, 130_000_000_000)
    assert (second.start_time, second.end_time) == (145_000_000_000, 150_000_000_000)
    (work,) = named(spans, "gategraph.work")
    assert work.status.status_code is StatusCode.ERROR
    assert work.attributes is not None and work.attributes["gategraph.error"] == "executor crashed"


def test_the_failure_ladder(
    observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """Revision and escalation: strategize and escalation spans, decisions as plan events;
    a validation the run never completed is closed when the run finishes."""
    for event in [
        ev(PlanStarted, 100.0, graph="g"),
        ev(StrategyProduced, 101.0, revision=0, summary="first"),
        ev(_WorkFinished, 102.0, attempt=1),
        ev(ArtifactValidationStarted, 103.0, round=1, attempt=1, revision=0),
        ev(ValidationStarted, 104.0, node="n", validation="v"),
        ev(RunFinished, 105.0, status="failed", duration=1.0),
        ev(ArtifactRejected, 106.0, round=1, layer="semantic", reasons=[]),
        ev(
            RetryDecided,
            107.0,
            round=1,
            attempt=1,
            fault_kind="rejected",
            classification="transient",
            decision="escalate-exhausted",
            budget_used=3,
            budget_limit=3,
        ),
        ev(StrategyRevisionRequested, 108.0, revision=1, reason="3 attempts spent"),
        ev(StrategyProduced, 109.0, revision=1, summary="second"),
        ev(StrategyProduced, 109.5, revision=1, summary="again"),
        ev(EscalationRequested, 110.0, reason="exhausted", message="still failing"),
        ev(EscalationDecided, 120.0, action="retry", note="once more"),
        ev(EscalationDecided, 121.0, action="abort"),
        ev(_PlanResumed, 122.0, after_seq=40, reason="decision"),
        ev(ApplyCompleted, 123.0, changes={}),
        ev(PlanFinished, 124.0, status="awaiting_decision", message="waiting"),
    ]:
        observer.on_event(event)
    observer.close()
    spans = list(exporter.get_finished_spans())
    (validation_span,) = named(spans, "gategraph.validation")
    assert validation_span.end_time == 105_000_000_000
    assert validation_span.attributes is not None
    assert validation_span.attributes["gategraph.incomplete"] is True
    (round_,) = named(spans, "gategraph.round")
    assert round_.status.description == "rejected at the semantic layer"
    strategize = sorted(named(spans, "gategraph.strategize"), key=lambda s: s.start_time or 0)
    assert [s.attributes["gategraph.revision"] for s in strategize] == [0, 1]  # type: ignore[index]
    assert (strategize[1].start_time, strategize[1].end_time) == (108_000_000_000, 109_000_000_000)
    (work,) = named(spans, "gategraph.work")
    assert (work.start_time, work.end_time) == (101_000_000_000, 102_000_000_000)
    assert work.status.status_code is StatusCode.UNSET
    (escalation,) = named(spans, "gategraph.escalation")
    assert escalation.attributes == {
        "gategraph.reason": "exhausted",
        "gategraph.message": "still failing",
        "gategraph.action": "retry",
        "gategraph.note": "once more",
    }
    (root,) = named(spans, "gategraph.plan")
    assert [e.name for e in root.events] == [
        "gategraph.retry_decided",
        "gategraph.strategy_revision_requested",
        "gategraph.strategy_produced",
        "gategraph.escalation_decided",
        "gategraph.plan_resumed",
    ]
    assert root.attributes is not None
    assert root.attributes["gategraph.plan.status"] == "awaiting_decision"
    assert root.attributes["gategraph.resumed_after_seq"] == 40
    assert "gategraph.incomplete" not in root.attributes
    assert root.status.status_code is StatusCode.UNSET


def test_a_resumed_plan_without_its_start_still_has_a_root(
    observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """Events without a plan_started (a resumed run) open the plan span at the first one;
    a completion without a start is placed by its duration; other plans are ignored."""
    result = ValidationResult(passed=True)
    observer.on_event(
        ev(ValidationCompleted, 10.0, node="n", validation="v", result=result, duration=4.0)
    )
    other = PlanStarted(id="x", plan_id="P2", at=11.0, graph="other")
    observer.on_event(other)
    observer.on_event(ev(PlanFinished, 12.0, status="applied"))
    observer.close()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"gategraph.plan", "gategraph.validation"}
    assert spans["gategraph.validation"].start_time == 6_000_000_000
    assert spans["gategraph.plan"].attributes["gategraph.plan.id"] == "P1"  # type: ignore[index]


def test_a_reused_result_is_a_span_of_no_length_that_says_so(
    observer: OpenTelemetryObserver, exporter: InMemorySpanExporter
) -> None:
    """A result a round reused was no call: its span starts and ends at its event, with
    the round it came from (not the earlier call's duration)."""
    result = ValidationResult(passed=True)
    observer.on_event(
        ev(
            ValidationCompleted,
            10.0,
            node="n",
            validation="v",
            result=result,
            duration=4.0,
            reused_from=1,
        )
    )
    observer.close()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "gategraph.validation"]
    assert span.start_time == span.end_time == 10_000_000_000
    assert span.attributes["gategraph.reused_from"] == 1  # type: ignore[index]


def test_record_statistics_on_any_span(exporter: InMemorySpanExporter) -> None:
    """Seed 002 §16 figures go on a span of the caller's own, too."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("tests").start_span("mine")
    stats = PlanStatistics(
        rounds=2,
        layer_seconds={"routing": 0.5, "semantic": 1.25},
        rejection_reasons={"semantic": 1},
        approval_wait_seconds=3.0,
    )
    record_statistics(span, stats)
    span.end()
    (done,) = exporter.get_finished_spans()
    assert done.attributes is not None
    assert done.attributes["gategraph.stats.layer_seconds.semantic"] == 1.25
    assert done.attributes["gategraph.stats.rejections.semantic"] == 1
    assert done.attributes["gategraph.stats.approval_wait_seconds"] == 3.0
    assert done.attributes["gategraph.stats.rounds"] == 2


def test_without_opentelemetry_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No opentelemetry-api: telemetry_available() is False and the observer says what to do."""
    assert telemetry_available()
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    assert not telemetry_available()
    with pytest.raises(ImportError, match=r"gategraph\[otel\]"):
        OpenTelemetryObserver()


def test_the_default_tracer_comes_from_the_global_provider() -> None:
    """Without a tracer the global provider's ``gategraph`` tracer is used (a no-op one
    here, since no provider is set)."""
    observer = OpenTelemetryObserver()
    observer.on_event(ev(PlanStarted, 1.0, graph="g"))
    observer.close()
    assert observer.plan_span is None


# -- --otel: the SDK from the OTEL_* variables -----------------------------------------------

TINY = """\
version: 1
name: tiny
validations:
  - {name: ok, entrypoint: "gategraph.runtime.testing:passing"}
nodes:
  - {id: check, validation: ok}
"""


def _otel_run(
    tmp_path: Path, env: dict[str, str], *args: str, prelude: str = ""
) -> subprocess.CompletedProcess[str]:
    """``gategraph run tiny.yaml --otel ARGS`` in a fresh interpreter (the global tracer
    provider can be set once per process), with ``env`` over a clean OTEL_* environment."""
    (tmp_path / "tiny.yaml").write_text(TINY)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(env)
    code = f"{prelude}\nfrom gategraph.runtime._cli import main\nmain()\n"
    return run_process(
        [sys.executable, "-c", code, "run", "tiny.yaml", "--otel", *args], cwd=tmp_path, env=environ
    )


def test_otel_with_the_console_exporter_prints_the_spans(tmp_path: Path) -> None:
    """OTEL_TRACES_EXPORTER=console with only the SDK: the spans are printed, with the
    service name of OTEL_SERVICE_NAME, and nothing is warned about."""
    done = _otel_run(tmp_path, {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "ci"})
    assert done.returncode == 0, done.stderr
    assert '"name": "gategraph.plan"' in done.stdout
    assert '"name": "gategraph.validation"' in done.stdout
    assert '"service.name": "ci"' in done.stdout
    assert "warning" not in done.stderr


def test_otel_with_json_keeps_stdout_for_the_json(tmp_path: Path) -> None:
    """With --json, printed spans go to stderr and stdout holds the outcome alone."""
    done = _otel_run(tmp_path, {"OTEL_TRACES_EXPORTER": "console"}, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "applied"
    assert '"name": "gategraph.plan"' in done.stderr


@pytest.mark.parametrize(
    ("env", "prelude", "expected"),
    [
        ({"OTEL_TRACES_EXPORTER": "none"}, "", "no span is exported: OTEL_TRACES_EXPORTER=none"),
        (
            {"OTEL_TRACES_EXPORTER": ", ,"},
            "",
            "no span is exported: OTEL_TRACES_EXPORTER=', ,' names no exporter; "
            "OTEL_TRACES_EXPORTER=console prints spans instead",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "nope"},
            "",
            "no installed package provides the trace exporter 'nope'",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "console"},
            "import sys; sys.modules['opentelemetry.sdk'] = None",
            "the OpenTelemetry SDK is not installed (pip install opentelemetry-sdk)",
        ),
    ],
    ids=["none", "only-separators", "unknown-exporter", "api-only"],
)
def test_otel_warns_when_no_exporter_would_receive_anything(
    tmp_path: Path, env: dict[str, str], prelude: str, expected: str
) -> None:
    """One warning line on stderr says why nothing is exported; the plan still runs."""
    done = _otel_run(tmp_path, env, prelude=prelude)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, done.stderr
    assert warnings[0].startswith("warning: --otel: no span is exported: ")
    assert expected in warnings[0]
    assert "gategraph.plan" not in done.stdout


class _Entry:
    """A stand-in for an installed exporter's entry point."""

    def __init__(self, factory: Any) -> None:
        self.factory = factory

    def load(self) -> Any:
        if isinstance(self.factory, Exception):
            raise self.factory
        return self.factory


def _installed(monkeypatch: pytest.MonkeyPatch, **exporters: Any) -> None:
    """Make ``exporters`` (entry point name → class, or the error loading it raises) the
    only trace exporters installed."""
    import importlib.metadata

    def entry_points(*, group: str, name: str) -> list[_Entry]:
        assert group == "opentelemetry_traces_exporter"
        return [_Entry(exporters[name])] if name in exporters else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_exporter_names_follow_the_specification(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset means otlp (gRPC unless the protocol variables say HTTP); names are
    comma-separated; what is not installed is named with the package to install."""
    from gategraph.runtime._embed._telemetry import _trace_exporters
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    class Grpc(InMemorySpanExporter):
        pass

    class Http(InMemorySpanExporter):
        pass

    _installed(monkeypatch, console=ConsoleSpanExporter, otlp_proto_grpc=Grpc, otlp_proto_http=Http)
    made, warning = _trace_exporters({}, None)
    assert warning is None and [type(e) for e in made.values()] == [Grpc]
    made, warning = _trace_exporters(
        {"OTEL_TRACES_EXPORTER": " otlp , console", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
        sys.stderr,
    )
    assert warning is None and [type(e) for e in made.values()] == [Http, ConsoleSpanExporter]
    assert made["console"].out is sys.stderr  # type: ignore[attr-defined]
    made, warning = _trace_exporters(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, None
    )
    assert [type(e) for e in made.values()] == [Grpc]

    _installed(monkeypatch, console=ConsoleSpanExporter)
    made, warning = _trace_exporters({}, None)
    assert not made
    assert warning == (
        "no span is exported: OTEL_TRACES_EXPORTER is not set, so it is otlp, and the otlp "
        "exporter is not installed (pip install opentelemetry-exporter-otlp-proto-grpc); "
        "OTEL_TRACES_EXPORTER=console prints spans instead"
    )
    made, warning = _trace_exporters({"OTEL_TRACES_EXPORTER": "console,zipkin"}, None)
    assert list(made) == ["console"]
    assert warning == (
        "spans go to console only: no installed package provides the trace exporter 'zipkin'"
    )
    made, warning = _trace_exporters(
        {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, None
    )
    assert not made
    assert warning is not None and "the OTLP protocol 'http/json' is not supported" in warning


def test_an_exporter_that_fails_to_load_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed exporter that cannot be imported or built is a warning, not a crash."""
    from gategraph.runtime._embed._telemetry import _trace_exporters

    def broken() -> Any:
        raise ValueError("bad endpoint")

    _installed(monkeypatch, grpcless=ImportError("No module named 'grpc'"), strict=broken)
    made, warning = _trace_exporters({"OTEL_TRACES_EXPORTER": "grpcless,strict"}, None)
    assert not made
    assert warning == (
        "no span is exported: the grpcless exporter failed to start: ImportError: No module "
        "named 'grpc'; the strict exporter failed to start: ValueError: bad endpoint; "
        "OTEL_TRACES_EXPORTER=console prints spans instead"
    )


def test_a_tracer_provider_set_by_the_program_is_left_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A provider set already (the program's, opentelemetry-instrument's) is used as it is:
    nothing is configured and nothing warned about."""
    from gategraph.runtime._embed._telemetry import configure_from_environment
    from opentelemetry import trace

    mine = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: mine)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    setup = configure_from_environment()
    assert (setup.provider, setup.warning) == (None, None)
    setup.flush()  # nothing to flush: no error either


def test_a_disabled_sdk_is_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """OTEL_SDK_DISABLED=true: nothing is set up, and the warning says why."""
    from gategraph.runtime._embed._telemetry import configure_from_environment
    from opentelemetry import trace

    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "True")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    setup = configure_from_environment()
    assert (setup.provider, setup.warning) == (None, "no span is exported: OTEL_SDK_DISABLED=true")


def test_no_observer_is_made_without_a_program_s_own_set_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's stand-in providers (nothing set up) and OTEL_SDK_DISABLED make none; a
    provider of the program's own makes one."""
    from gategraph.runtime._embed._telemetry import OpenTelemetryObserver, auto_observer
    from opentelemetry import metrics, trace

    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(metrics, "get_meter_provider", metrics.NoOpMeterProvider)
    assert auto_observer() is None
    mine = TracerProvider()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: mine)
    assert isinstance(auto_observer(), OpenTelemetryObserver)
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert auto_observer() is None


@pytest.mark.anyio
async def test_runs_trace_themselves_when_a_set_up_program_gives_no_observer(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the program's own set-up makes (here: observers on a private provider, as
    auto_observer would on the global one): a paused plan's spans end with its run, its
    resume is traced afresh and ends too, and validate()'s round ends with the call."""
    from gategraph.runtime import EscalationDecision, Supervisor, validate
    from gategraph.runtime._embed import _validate
    from gategraph.runtime._lifecycle import _supervisor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made: list[OpenTelemetryObserver] = []

    def auto() -> OpenTelemetryObserver:
        made.append(OpenTelemetryObserver(provider.get_tracer("auto")))
        return made[-1]

    monkeypatch.setattr(_supervisor, "auto_tracing", auto)
    monkeypatch.setattr(_validate, "auto_tracing", auto)
    graph = load_graph(plan(repo(tmp_path), [BAD, GOOD], retry_limit=0, strategy_revisions=0))
    log = MemoryEventLog()
    paused = await Supervisor(graph, event_log=log, audit=InMemoryAuditLog()).run()
    assert paused.status == "awaiting_decision"
    names = [s.name for s in exporter.get_finished_spans()]
    assert names.count("gategraph.plan") == 1  # ended with the run: no close by hand
    again = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), plan_id=paused.plan_id)
    done = await again.resume(decision=EscalationDecision(action="retry"))
    assert done.status == "applied"
    assert [s.name for s in exporter.get_finished_spans()].count("gategraph.plan") == 2
    assert len(made) == 4  # one per supervisor, and a fresh one ready after each run
    verdict = await validate({"a.py": "def (:\n"}, ["python_syntax"])
    runs = [s for s in exporter.get_finished_spans() if s.name == "gategraph.run"]
    assert not verdict.passed and runs[-1].status.status_code is StatusCode.ERROR
    assert runs[-1].attributes is not None and runs[-1].attributes["gategraph.passed"] is False
