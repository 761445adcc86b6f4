"""OpenTelemetry spans from a plan's events (the ``otel`` extra).

:class:`OpenTelemetryObserver` is an event observer: wrap a plan's event log with
:class:`~gategraph.runtime._running._observe.ObservedEventLog` and it turns the events into a span
tree, timed by the events' own timestamps (so a stored log can be turned into a trace
later, too)::

    gategraph.plan                 plan_started → plan_finished
    ├── gategraph.strategize       plan_started / revision → strategy_produced
    ├── gategraph.work             strategy_produced / fix_requested → work_finished
    ├── gategraph.round            artifact_validation_started → validated / rejected / approval
    │   └── gategraph.validation   validation_started → validation_completed (per node)
    ├── gategraph.escalation       escalation_requested → escalation_decided
    ├── gategraph.approval         approval_required → approval_decided
    └── gategraph.apply            apply_started → apply_completed

Retry decisions, fixes and strategy revisions are span events on the plan span.
:meth:`OpenTelemetryObserver.finish` puts the plan's seed 002 §16 figures on the plan span
and ends it. opentelemetry-api is imported only when an observer is made.

While user code runs — a validation, the nodes of a graph run, a lifecycle actor — the
observer makes the span it belongs to the current span (:meth:`activate_span`, asked by the
engine and the supervisor through :mod:`.._base._spans`), so spans the user opens nest under it.

:func:`configure_from_environment` sets the OpenTelemetry SDK up from the standard
``OTEL_*`` variables (the CLI's ``--otel``).
"""

from __future__ import annotations

import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from gategraph.runtime._base._spans import NO_SPAN

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from contextlib import AbstractContextManager
    from types import TracebackType
    from typing import TextIO

    from gategraph.runtime._base._spans import SpanKind
    from gategraph.runtime._lifecycle._supervisor import PlanOutcome, PlanStatistics
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

__all__ = [
    "OpenTelemetryObserver",
    "TracingSetup",
    "auto_observer",
    "configure_from_environment",
    "record_statistics",
    "telemetry_available",
]

_INSTALL_HINT = (
    "OpenTelemetry support needs the opentelemetry-api package: "
    "install it with `pip install 'gategraph[otel]'`"
)

# Attribute values kept short: a message can be a whole traceback, and a backend truncates
# (or drops) long attributes anyway.
_TEXT_LIMIT = 500


# The instruments, as docs/observability.md lists them: attribute, kind, name, unit and
# what each counts.
_INSTRUMENTS: Final = (
    ("invocations", "counter", "gategraph.semantic.invocations", "{call}",
     "Validation calls made by the semantic layer"),
    ("validation_duration", "histogram", "gategraph.validation.duration", "s",
     "Seconds a validation took"),
    ("layer_duration", "histogram", "gategraph.layer.duration", "s",
     "Seconds spent in a pipeline layer by a plan (or a run outside one)"),
    ("rejections", "counter", "gategraph.rejections", "{round}", "Rounds rejected, by layer"),
    ("completions", "counter", "gategraph.pipeline.completions", "{round}",
     "Rounds that got through every layer"),
    ("approval_wait", "histogram", "gategraph.approval.wait", "s",
     "Seconds a person took to approve"),
    ("rounds", "counter", "gategraph.rounds", "{round}", "Validation rounds"),
    ("fixes", "counter", "gategraph.fixes", "{fix}", "Work sent back to be fixed"),
    ("validator_retries", "counter", "gategraph.validator_retries", "{retry}",
     "Validations run again after an infrastructure fault"),
    ("revisions", "counter", "gategraph.revisions", "{revision}", "Strategy revisions"),
    ("escalations", "counter", "gategraph.escalations", "{escalation}",
     "Plans sent to a person"),
)  # fmt: skip


class _Metrics:
    """The figures of seed 002 §16 (and the ladder's) as OpenTelemetry instruments of the
    global meter provider: nothing is kept or sent unless the program set one up."""

    invocations: Any
    validation_duration: Any
    layer_duration: Any
    rejections: Any
    completions: Any
    approval_wait: Any
    rounds: Any
    fixes: Any
    validator_retries: Any
    revisions: Any
    escalations: Any

    def __init__(self) -> None:
        from gategraph.runtime._version import __version__
        from opentelemetry import metrics

        meter = metrics.get_meter("gategraph", __version__)
        for attribute, kind, name, unit, description in _INSTRUMENTS:
            make = meter.create_counter if kind == "counter" else meter.create_histogram
            setattr(self, attribute, make(name, unit=unit, description=description))

    @classmethod
    def of_provider(cls) -> _Metrics:
        """The instruments of the global meter provider now, made once per provider: a
        tracer is made for every plan and every validate() round."""
        from opentelemetry import metrics

        provider = metrics.get_meter_provider()
        found = _MADE.get(provider)
        if found is None:
            found = _MADE[provider] = cls()
        return found


# The instruments made, by meter provider (a provider that goes away takes them along).
_MADE: Final[weakref.WeakKeyDictionary[Any, _Metrics]] = weakref.WeakKeyDictionary()


def auto_observer() -> OpenTelemetryObserver | None:
    """A tracing observer for a run given none, when this program has set OpenTelemetry
    up: a tracer provider or a meter provider of its own (not the API's stand-ins, and
    not with ``OTEL_SDK_DISABLED``). None otherwise."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        from opentelemetry import metrics, trace
    except ImportError:
        return None
    tracing = type(trace.get_tracer_provider()).__name__
    measuring = type(metrics.get_meter_provider()).__name__
    stand_ins = {
        "ProxyTracerProvider",
        "NoOpTracerProvider",
        "_ProxyMeterProvider",
        "NoOpMeterProvider",
    }
    if tracing in stand_ins and measuring in stand_ins:
        return None
    return OpenTelemetryObserver()


def telemetry_available() -> bool:
    """Whether opentelemetry-api is installed (imports it to find out)."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        return False
    return True


def _ns(at: float) -> int:
    return int(at * 1e9)


def _text(value: Any) -> str:
    return str(value)[:_TEXT_LIMIT]


def _attributes(**values: Any) -> dict[str, AttributeValue]:
    """``gategraph.``-prefixed attributes, leaving out None (OpenTelemetry has no null)."""
    return {f"gategraph.{key}": value for key, value in values.items() if value is not None}


class OpenTelemetryObserver:
    """Turns one plan's events into OpenTelemetry spans (see the module's span tree).

    Pass a ``tracer`` (default: the global tracer provider's ``gategraph`` tracer). After
    the plan, call :meth:`finish` with its outcome (or :meth:`close`): the plan span ends
    then, at the ``plan_finished`` event's time, so the statistics can still be put on it.
    Spans still open at :meth:`close` (a crash, or a plan paused for a person) are ended
    with ``gategraph.incomplete = true``. Validation spans are forgotten as they end, so a
    fan-out of any size holds only the running ones.

    It is also the log's span activator (see :meth:`activate_span`): while user code runs,
    the span it belongs to is the current span.

    Raises :class:`ImportError` when opentelemetry-api is not installed.
    """

    def __init__(self, tracer: Tracer | None = None) -> None:
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError(_INSTALL_HINT, name="opentelemetry") from exc
        from opentelemetry import context
        from opentelemetry.trace import Status, StatusCode

        if tracer is None:
            from gategraph.runtime._version import __version__

            tracer = trace.get_tracer("gategraph", __version__)
        self.tracer = tracer
        """The tracer spans are started with."""
        self._in_context = trace.set_span_in_context
        self._attach = context.attach
        self._detach = context.detach
        self._status = Status
        self._error = StatusCode.ERROR
        self._ok = StatusCode.OK
        self.plan_id: str | None = None
        """The plan being traced (the first plan seen; events of others are ignored)."""
        self.plan_span: Span | None = None
        """The root span, until it ends."""
        self._plan_context: Context | None = None
        self._plan_end: int | None = None
        self._round: Span | None = None
        self._round_context: Context | None = None
        self._validations: dict[tuple[str, int], Span] = {}
        self._others: dict[str, Span] = {}
        """Open phase spans by name (strategize, work, escalation, approval, apply)."""
        self._work_began: int | None = None
        self._work: Span | None = None
        """The work phase's span, once started (on demand: see :meth:`_work_span`)."""
        self._last_at = 0
        self._closed = False
        self._run: Span | None = None
        """A run of a graph's nodes outside a plan's rounds (``validate``, an adapter's
        round), until it ends."""
        self._run_done: tuple[Span, int] | None = None
        """Such a run that ended, and when: its span ends once its verdict is known
        (:meth:`record_verdict`), or at the next run, or at :meth:`close`."""
        self.metrics = _Metrics.of_provider()
        """The run's figures as OpenTelemetry metrics, from the global meter provider."""
        self._approval_asked: int | None = None
        self._handlers: dict[str, Callable[[Any, int], None]] = {
            "run_started": self._run_started,
            "plan_started": self._plan_started,
            "plan_resumed": self._plan_resumed,
            "strategy_produced": self._strategy_produced,
            "work_finished": self._work_finished,
            "artifact_validation_started": self._round_started,
            "validation_started": self._validation_started,
            "validation_completed": self._validation_completed,
            "run_finished": self._run_finished,
            "artifact_validated": self._round_validated,
            "artifact_rejected": self._round_rejected,
            "retry_decided": self._retry_decided,
            "fix_requested": self._fix_requested,
            "strategy_revision_requested": self._revision_requested,
            "escalation_requested": self._escalation_requested,
            "escalation_decided": self._escalation_decided,
            "approval_required": self._approval_required,
            "approval_decided": self._approval_decided,
            "apply_started": self._apply_started,
            "apply_completed": self._apply_completed,
            "plan_finished": self._plan_finished,
        }

    # -- the observer ---------------------------------------------------------------------

    def on_event(self, event: Any) -> None:
        """Start, annotate or end the spans the event concerns; other tags are ignored."""
        if self._closed:
            return
        handler = self._handlers.get(type(event).__struct_config__.tag)
        if handler is None:
            return
        if self.plan_id is None:
            self.plan_id = event.plan_id
        elif event.plan_id != self.plan_id:
            return
        at = _ns(event.at)
        self._last_at = max(self._last_at, at)
        handler(event, at)

    def finish(self, outcome: PlanOutcome) -> None:
        """Put the outcome's statistics on the plan span (and the time in each layer in
        the ``gategraph.layer.duration`` metric), then end every span."""
        record_statistics(self, outcome.statistics)
        for layer, seconds in outcome.statistics.layer_seconds.items():
            self.metrics.layer_duration.record(seconds, {"gategraph.layer": layer})
        if self.plan_span is not None:
            self.plan_span.set_attribute("gategraph.plan.status", str(outcome.status))
        self.close()

    def close(self) -> None:
        """End every span still open; those whose end event never came are marked
        ``gategraph.incomplete``. A second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self._end_run()
        at = self._last_at or time.time_ns()
        still_open = [
            *self._validations.values(),
            self._round,
            *self._others.values(),
            self._work,
            self._run,
        ]
        for span in still_open:
            if span is not None:
                self._incomplete(span, at)
        self._validations.clear()
        self._others.clear()
        self._round = self._work = self._run = None
        if self.plan_span is not None:
            if self._plan_end is None:
                self._incomplete(self.plan_span, at)
            else:
                self.plan_span.end(end_time=self._plan_end)
            self.plan_span = None

    def __enter__(self) -> OpenTelemetryObserver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the current span -----------------------------------------------------------------

    def activate_span(
        self, plan_id: str, kind: SpanKind, key: tuple[str, int] | None = None
    ) -> AbstractContextManager[object]:
        """A context manager under which the plan's ``kind`` span (see
        :data:`~gategraph.runtime._base._spans.SpanKind`) is the current OpenTelemetry span, so
        spans opened inside nest under it. Nothing happens for a span that is not open (a
        resumed plan's phase whose start this observer never saw), another plan, or once
        the observer closed."""
        if plan_id != self.plan_id or self._closed:
            return NO_SPAN
        span: Span | None
        if kind == "validation":
            span = self._validations.get(key) if key is not None else None
        elif kind == "run":
            span = self._round if self._round is not None else self._work_span()
        elif kind == "work":
            span = self._work_span()
        else:
            span = self._others.get(kind)
        return NO_SPAN if span is None else _Current(self, span)

    def _work_span(self) -> Span | None:
        """The work phase's span, started now (at the phase's start event's time) if the
        phase began and none was: only a span that exists can be a parent. Without an
        activation it is made at ``work_finished``, as a stored log replays it."""
        if self._work is None and self._work_began is not None:
            self._work = self.tracer.start_span(
                "gategraph.work", context=self._plan_context, start_time=self._work_began
            )
        return self._work

    def _begin_work(self, at: int) -> None:
        if self._work is not None:  # a work phase that never finished
            self._incomplete(self._work, at)
            self._work = None
        self._work_began = at

    # -- helpers --------------------------------------------------------------------------

    def _incomplete(self, span: Span, at: int) -> None:
        span.set_attribute("gategraph.incomplete", True)
        span.end(end_time=at)

    def _fail(self, span: Span, description: str) -> None:
        span.set_status(self._status(self._error, _text(description)))

    def _plan(self, event: Any, at: int) -> Context | None:
        """The plan span's context, starting the span at this event if none is open (a
        resumed plan's events begin without ``plan_started``)."""
        if self.plan_span is None:
            self._start_plan(event.plan_id, at, graph=getattr(event, "graph", None))
        return self._plan_context

    def _start_plan(self, plan_id: str, at: int, **attributes: Any) -> None:
        self.plan_span = self.tracer.start_span(
            "gategraph.plan",
            start_time=at,
            attributes=_attributes(**{"plan.id": plan_id}, **attributes),
        )
        self._plan_context = self._in_context(self.plan_span)

    def _open(self, key: str, name: str, at: int, attributes: Mapping[str, Any]) -> Span:
        """Start a phase span under the plan, ending one of the same key left open."""
        old = self._others.pop(key, None)
        if old is not None:
            self._incomplete(old, at)
        span = self.tracer.start_span(
            name, context=self._plan_context, start_time=at, attributes=attributes
        )
        self._others[key] = span
        return span

    def _plan_event(self, name: str, at: int, attributes: Mapping[str, Any]) -> None:
        if self.plan_span is not None:
            self.plan_span.add_event(name, attributes=attributes, timestamp=at)

    def _end_validations(self, at: int) -> None:
        """End validation spans whose completion never came (a cancelled fan-out)."""
        for span in self._validations.values():
            self._incomplete(span, at)
        self._validations.clear()

    def _end_round(self, at: int, **attributes: Any) -> Span | None:
        self._end_validations(at)
        span, self._round, self._round_context = self._round, None, None
        if span is not None:
            span.set_attributes(_attributes(**attributes))
        return span

    # -- the plan -------------------------------------------------------------------------

    def _plan_started(self, event: Any, at: int) -> None:
        if self.plan_span is not None:
            return
        self._start_plan(event.plan_id, at, graph=event.graph, project=event.project)
        self._open("strategize", "gategraph.strategize", at, _attributes(revision=0))

    def _plan_resumed(self, event: Any, at: int) -> None:
        self._plan(event, at)
        assert self.plan_span is not None
        self.plan_span.set_attribute("gategraph.resumed_after_seq", event.after_seq)
        self._plan_event(
            "gategraph.plan_resumed",
            at,
            _attributes(after_seq=event.after_seq, reason=event.reason),
        )

    def _plan_finished(self, event: Any, at: int) -> None:
        self._plan(event, at)
        assert self.plan_span is not None
        self.plan_span.set_attributes(
            _attributes(**{"plan.status": event.status, "plan.message": _text(event.message)})
        )
        if event.status == "failed":
            self._fail(self.plan_span, event.message or "failed")
        elif event.status == "applied":
            self.plan_span.set_status(self._status(self._ok))
        # The plan span ends at finish() or close(): the statistics go on it first.
        self._plan_end = at

    # -- strategize and work --------------------------------------------------------------

    def _strategy_produced(self, event: Any, at: int) -> None:
        self._plan(event, at)
        span = self._others.pop("strategize", None)
        attributes = _attributes(revision=event.revision, summary=_text(event.summary))
        if span is None:
            self._plan_event("gategraph.strategy_produced", at, attributes)
        else:
            span.set_attributes(attributes)
            span.end(end_time=at)
        self._begin_work(at)

    def _work_finished(self, event: Any, at: int) -> None:
        self._plan(event, at)
        attributes = _attributes(attempt=event.attempt, error=_text_or_none(event.error))
        span, self._work = self._work, None
        if span is None:
            began = self._work_began if self._work_began is not None else at
            span = self.tracer.start_span(
                "gategraph.work",
                context=self._plan_context,
                start_time=began,
                attributes=attributes,
            )
        else:
            span.set_attributes(attributes)
        if event.error:
            self._fail(span, event.error)
        span.end(end_time=at)
        self._work_began = None

    def _fix_requested(self, event: Any, at: int) -> None:
        self.metrics.fixes.add(1)
        self._plan(event, at)
        self._plan_event(
            "gategraph.fix_requested",
            at,
            _attributes(attempt=event.attempt, note=_text_or_none(event.note)),
        )
        self._begin_work(at)

    def _revision_requested(self, event: Any, at: int) -> None:
        self.metrics.revisions.add(1)
        self._plan(event, at)
        attributes = _attributes(revision=event.revision, reason=_text(event.reason))
        self._plan_event("gategraph.strategy_revision_requested", at, attributes)
        self._open("strategize", "gategraph.strategize", at, attributes)

    # -- validation rounds ----------------------------------------------------------------

    def _round_started(self, event: Any, at: int) -> None:
        self.metrics.rounds.add(1)
        context = self._plan(event, at)
        old = self._end_round(at, outcome="superseded")
        if old is not None:
            self._incomplete(old, at)
        self._round = self.tracer.start_span(
            "gategraph.round",
            context=context,
            start_time=at,
            attributes=_attributes(
                round=event.round, attempt=event.attempt, revision=event.revision
            ),
        )
        self._round_context = self._in_context(self._round)

    def _round_validated(self, event: Any, at: int) -> None:
        self.metrics.completions.add(1)
        span = self._end_round(at, outcome="validated")
        if span is not None:
            span.set_status(self._status(self._ok))
            span.end(end_time=at)

    def _round_rejected(self, event: Any, at: int) -> None:
        self.metrics.rejections.add(1, {"gategraph.layer": event.layer})
        span = self._end_round(
            at, outcome="rejected", layer=event.layer, reasons=len(event.reasons)
        )
        if span is not None:
            first = event.reasons[0] if event.reasons else f"rejected at the {event.layer} layer"
            self._fail(span, first)
            span.end(end_time=at)

    def _validation_started(self, event: Any, at: int) -> None:
        context = self._round_context or self._plan(event, at)
        key = (event.node, event.attempt)
        old = self._validations.pop(key, None)
        if old is not None:
            self._incomplete(old, at)
        self._validations[key] = self.tracer.start_span(
            "gategraph.validation",
            context=context,
            start_time=at,
            attributes=_attributes(
                node=event.node,
                validation=event.validation,
                attachment_id=event.attachment_id,
                attempt=event.attempt,
            ),
        )

    def _validation_completed(self, event: Any, at: int) -> None:
        span = self._validations.pop((event.node, event.attempt), None)
        reused = getattr(event, "reused_from", None)
        if span is None:
            # No start seen (the observer joined mid-run): the duration places the span. A
            # reused result has no call of its own: a span of no length, at the moment.
            context = self._round_context or self._plan(event, at)
            span = self.tracer.start_span(
                "gategraph.validation",
                context=context,
                start_time=at if reused is not None else at - int(event.duration * 1e9),
                attributes=_attributes(
                    node=event.node,
                    validation=event.validation,
                    attachment_id=event.attachment_id,
                    attempt=event.attempt,
                ),
            )
        result = event.result
        data = result.data if isinstance(result.data, dict) else {}
        error = data.get("error")
        if reused is None:  # a reused result was no call
            measured = {"gategraph.validation": event.validation, "gategraph.passed": result.passed}
            self.metrics.invocations.add(1, measured)
            self.metrics.validation_duration.record(float(event.duration), measured)
        span.set_attributes(
            _attributes(
                passed=result.passed,
                error=_text_or_none(error),
                duration=float(event.duration),
                message=_text(result.message) if result.message else None,
                reused_from=reused,
            )
        )
        if not result.passed:
            self._fail(span, result.message or str(error or "failed"))
        span.end(end_time=at)

    def _run_started(self, event: Any, at: int) -> None:
        if self.plan_span is not None or self._run is not None:
            return  # a plan's round (its spans are the round's), or a run already open
        self._end_run()
        # A run on its own (validate(), an adapter's round): its root span, which its
        # validations nest under.
        self._run = self.tracer.start_span(
            "gategraph.run",
            start_time=at,
            attributes=_attributes(
                **{"plan.id": event.plan_id}, graph=event.graph, project=event.project
            ),
        )
        self._round_context = self._in_context(self._run)

    def _run_finished(self, event: Any, at: int) -> None:
        self._end_validations(at)
        span, self._run = self._run, None
        if span is None:
            return
        self._round_context = None
        self.metrics.layer_duration.record(float(event.duration), {"gategraph.layer": "semantic"})
        self.metrics.rounds.add(1)
        span.set_attributes(_attributes(**{"run.status": event.status}))
        if event.status != "completed":
            self._fail(span, f"the run {event.status}")
        self._run_done = (span, at)
        # The next run (the next round of a change, under a plan id of its own) is
        # followed in turn.
        self.plan_id = None

    def _end_run(self) -> None:
        if self._run_done is not None:
            span, at = self._run_done
            self._run_done = None
            span.end(end_time=at)

    def record_verdict(self, passed: bool, layer: str | None = None) -> None:
        """A run's outcome, for a run outside a plan (``validate`` knows whether its round
        passed; the run's events do not say): counted as the pipeline's, and on the run's
        span, which ends now."""
        if passed:
            self.metrics.completions.add(1)
        else:
            self.metrics.rejections.add(1, {"gategraph.layer": layer or "semantic"})
        if self._run_done is not None:
            span = self._run_done[0]
            span.set_attribute("gategraph.passed", passed)
            if not passed:
                self._fail(span, f"rejected at the {layer or 'semantic'} layer")
        self._end_run()

    def _retry_decided(self, event: Any, at: int) -> None:
        if event.decision == "retry-validator":
            self.metrics.validator_retries.add(1, {"gategraph.fault_kind": event.fault_kind})
        self._plan(event, at)
        self._plan_event(
            "gategraph.retry_decided",
            at,
            _attributes(
                round=event.round,
                attempt=event.attempt,
                fault_kind=event.fault_kind,
                classification=event.classification,
                decision=event.decision,
                budget_used=event.budget_used,
                budget_limit=event.budget_limit,
            ),
        )

    # -- people ---------------------------------------------------------------------------

    def _escalation_requested(self, event: Any, at: int) -> None:
        self.metrics.escalations.add(1)
        self._plan(event, at)
        self._open(
            "escalation",
            "gategraph.escalation",
            at,
            _attributes(reason=event.reason, message=_text(event.message)),
        )

    def _escalation_decided(self, event: Any, at: int) -> None:
        self._plan(event, at)
        attributes = _attributes(action=event.action, note=_text_or_none(event.note))
        span = self._others.pop("escalation", None)
        if span is None:
            self._plan_event("gategraph.escalation_decided", at, attributes)
            return
        span.set_attributes(attributes)
        span.end(end_time=at)

    def _approval_required(self, event: Any, at: int) -> None:
        self._plan(event, at)
        round_span = self._end_round(at, outcome="needs_approval", layer="approval")
        if round_span is not None:
            round_span.end(end_time=at)
        self._open(
            "approval",
            "gategraph.approval",
            at,
            _attributes(round=event.round, tier=event.tier, message=_text(event.message)),
        )

    def _approval_decided(self, event: Any, at: int) -> None:
        self._plan(event, at)
        waited = float(event.waited)
        self.metrics.approval_wait.record(waited)
        attributes = _attributes(
            approved=bool(event.approved), note=_text_or_none(event.note), waited=waited
        )
        span = self._others.pop("approval", None)
        if span is None:
            # The request was seen by another run (the plan paused, then resumed): the
            # recorded wait places the span.
            span = self.tracer.start_span(
                "gategraph.approval",
                context=self._plan_context,
                start_time=at - int(waited * 1e9),
            )
        span.set_attributes(attributes)
        span.end(end_time=at)

    # -- apply ----------------------------------------------------------------------------

    def _apply_started(self, event: Any, at: int) -> None:
        self._plan(event, at)
        self._open(
            "apply", "gategraph.apply", at, _attributes(resources=[str(r) for r in event.resources])
        )

    def _apply_completed(self, event: Any, at: int) -> None:
        self._plan(event, at)
        span = self._others.pop("apply", None)
        if span is None:
            return
        span.set_attributes(
            {f"gategraph.changes.{name}": _text(change) for name, change in event.changes.items()}
        )
        span.set_status(self._status(self._ok))
        span.end(end_time=at)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else _text(value)


def record_statistics(target: OpenTelemetryObserver | Span, statistics: PlanStatistics) -> None:
    """Put a plan's seed 002 §16 figures on a span as ``gategraph.stats.*`` attributes:
    seconds per pipeline layer, rejections per layer, approval wait, semantic invocations,
    pipeline completions, rounds, fixes, retries, revisions and escalations.

    ``target`` is a span, or an observer (its plan span; nothing happens once it ended).
    """
    span = target.plan_span if isinstance(target, OpenTelemetryObserver) else target
    if span is None:
        return
    attributes: dict[str, AttributeValue] = {
        "gategraph.stats.rounds": statistics.rounds,
        "gategraph.stats.pipeline_completions": statistics.pipeline_completions,
        "gategraph.stats.semantic_invocations": statistics.semantic_invocations,
        "gategraph.stats.approval_wait_seconds": float(statistics.approval_wait_seconds),
        "gategraph.stats.fixes": statistics.fixes,
        "gategraph.stats.validator_retries": statistics.validator_retries,
        "gategraph.stats.revisions": statistics.revisions,
        "gategraph.stats.escalations": statistics.escalations,
    }
    for layer, seconds in statistics.layer_seconds.items():
        attributes[f"gategraph.stats.layer_seconds.{layer}"] = float(seconds)
    for reason, count in statistics.rejection_reasons.items():
        attributes[f"gategraph.stats.rejections.{reason}"] = count
    span.set_attributes(attributes)


class _Current:
    """Makes one span the current span while entered: its context is attached on enter and
    detached on exit, in the same task (OpenTelemetry tokens are detached last in, first
    out, in the context they were attached in)."""

    __slots__ = ("_observer", "_span", "_token")

    def __init__(self, observer: OpenTelemetryObserver, span: Span) -> None:
        self._observer = observer
        self._span = span

    def __enter__(self) -> Span:
        observer = self._observer
        # On top of the context of the moment, so the caller's baggage stays.
        self._token = observer._attach(observer._in_context(self._span))
        return self._span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._observer._detach(self._token)


# -- configuring the SDK from the environment (the CLI's --otel) ------------------------------

_EXPORTER_GROUP = "opentelemetry_traces_exporter"
"""The entry point group trace exporters register under (the SDK's own ``console``, the
OTLP exporters' ``otlp_proto_grpc`` and ``otlp_proto_http`` ...)."""
_OTLP_BY_PROTOCOL = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
_PACKAGES = {
    "otlp_proto_grpc": "opentelemetry-exporter-otlp-proto-grpc",
    "otlp_proto_http": "opentelemetry-exporter-otlp-proto-http",
}


class TracingSetup(NamedTuple):
    """What :func:`configure_from_environment` did."""

    provider: Any
    """The tracer provider it set, or None (one was set already, or none would export)."""
    warning: str | None
    """Why no span, or not every span, will be exported (one line); None when all will."""

    def flush(self) -> None:
        """Export what the provider it set still holds (the spans of a plan just ended)."""
        if self.provider is not None:
            self.provider.force_flush()


def configure_from_environment(*, console: TextIO | None = None) -> TracingSetup:
    """Set the OpenTelemetry SDK up as the standard ``OTEL_*`` environment variables say,
    unless the program set a tracer provider already (its own, or ``opentelemetry-instrument``'s).

    ``OTEL_TRACES_EXPORTER`` names the exporters (comma-separated; ``otlp`` when not set, as
    the OpenTelemetry specification says; ``none`` for none), each found by its
    ``opentelemetry_traces_exporter`` entry point; ``otlp`` is gRPC or HTTP as
    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` or ``OTEL_EXPORTER_OTLP_PROTOCOL`` say. The SDK
    itself reads the rest: the resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``),
    the sampler (``OTEL_TRACES_SAMPLER``), the batch processor's and each exporter's own
    variables, and ``OTEL_SDK_DISABLED``. ``console`` is where the ``console`` exporter
    writes (default: standard output).

    Never raises for a setting: what would keep spans from being exported (no SDK, no
    exporter, one that is not installed) is the returned ``warning``.
    """
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return TracingSetup(None, None)
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return TracingSetup(
            None,
            "no span is exported: the OpenTelemetry SDK is not installed "
            "(pip install opentelemetry-sdk)",
        )
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TracingSetup(None, "no span is exported: OTEL_SDK_DISABLED=true")
    exporters, warning = _trace_exporters(os.environ, console)
    if not exporters:
        return TracingSetup(None, warning)
    provider = TracerProvider(resource=Resource.create())
    for exporter in exporters.values():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return TracingSetup(provider, warning)


def _trace_exporters(
    environ: Mapping[str, str], console: TextIO | None
) -> tuple[dict[str, Any], str | None]:
    """The span exporters ``OTEL_TRACES_EXPORTER`` names, made, by name; and a one-line
    warning for those that cannot be (None when every one could).

    The names are parsed here, not by the SDK: its parser and configurator are private
    (``opentelemetry.sdk._configuration``, whose configurator must not be instantiated),
    and they would also set up metrics and logs. The entry point group is the exporters'
    public contract with the SDK.
    """
    from importlib.metadata import entry_points

    raw = (environ.get("OTEL_TRACES_EXPORTER") or "").strip()
    if raw.lower() == "none":
        return {}, "no span is exported: OTEL_TRACES_EXPORTER=none"
    names = [name.strip() for name in (raw or "otlp").split(",") if name.strip()]
    if not names:
        # Set, but only separators or blanks: as silent as `none` would be, so say so.
        return {}, (
            f"no span is exported: OTEL_TRACES_EXPORTER={raw!r} names no exporter; "
            "OTEL_TRACES_EXPORTER=console prints spans instead"
        )
    exporters: dict[str, Any] = {}
    problems: list[str] = []
    for name in names:
        entry_name = name
        if name == "otlp":
            protocol = (
                environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
                or "grpc"  # the Python SDK's default
            ).strip()
            if protocol not in _OTLP_BY_PROTOCOL:
                problems.append(
                    f"the OTLP protocol {protocol!r} is not supported (grpc or http/protobuf)"
                )
                continue
            entry_name = _OTLP_BY_PROTOCOL[protocol]
        found = next(iter(entry_points(group=_EXPORTER_GROUP, name=entry_name)), None)
        if found is None:
            package = _PACKAGES.get(entry_name)
            problems.append(
                f"the {name} exporter is not installed (pip install {package})"
                if package is not None
                else f"no installed package provides the trace exporter {name!r}"
            )
            continue
        try:
            factory = found.load()
            args = {"out": console} if console is not None and name == "console" else {}
            exporters[name] = factory(**args)
        except Exception as exc:
            problems.append(f"the {name} exporter failed to start: {type(exc).__name__}: {exc}")
    if not problems:
        return exporters, None
    why = "; ".join(problems)
    if not raw:
        why = f"OTEL_TRACES_EXPORTER is not set, so it is otlp, and {why}"
    if exporters:
        return exporters, f"spans go to {', '.join(exporters)} only: {why}"
    hint = "; OTEL_TRACES_EXPORTER=console prints spans instead" if "console" not in names else ""
    return exporters, f"no span is exported: {why}{hint}"
