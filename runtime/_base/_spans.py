"""Making a plan's gategraph span the current OpenTelemetry span while user code runs.

The tracing observer (:class:`~gategraph.runtime._embed._telemetry.OpenTelemetryObserver`) builds
its spans from events, so it knows which span a call belongs to only once the call's start
event was shown to it. The code that calls user code — the engine around a validation and
around a run's nodes, the supervisor around a lifecycle actor — asks the event log, through
this module, to make that span current for the call: a span the user opens inside then
nests under it instead of under whatever span the caller had current.

Without a tracing observer on the log there is nothing to ask and nothing to pay: the
engine looks once per run, and a node costs it a ``None`` check. This module imports no
OpenTelemetry; the observer that does is the one that attaches contexts.

The activation is a context manager around the awaited call, so a context is attached
and detached in the same task, last in first out (OpenTelemetry's rule for context
tokens). Worker threads run in a copy of the calling task's context, so a sync call sees
the span too; a worker process cannot (a span does not cross a process), and just runs.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

__all__ = [
    "NO_SPAN",
    "SpanActivator",
    "SpanKind",
    "auto_tracing",
    "current_span",
    "set_auto_tracing",
    "span_activator",
]

SpanKind = Literal["run", "validation", "strategize", "work", "escalation", "approval"]
"""Which of a plan's spans to make current:

- ``validation``: one validation's span (the key is ``(node, attempt)``);
- ``run``: a graph run's enclosing span — the validation round while one is open, else
  the work phase's span — for the nodes of the run that have no span of their own;
- ``strategize``, ``work``, ``escalation``, ``approval``: the lifecycle phase's span, around
  the strategy actor, the execution actor, and the escalation handler (asked to escalate
  or to approve)."""

NO_SPAN: Final[AbstractContextManager[object]] = contextlib.nullcontext()
"""The activation of no span: entering it changes nothing (and it may be reused)."""


class SpanActivator(Protocol):
    """What can make a plan's spans current: a tracing observer."""

    def activate_span(
        self, plan_id: str, kind: SpanKind, key: tuple[str, int] | None = None
    ) -> AbstractContextManager[object]:
        """A context manager under which the plan's ``kind`` span is the current span;
        :data:`NO_SPAN` when there is none (not traced, not open yet, another plan)."""


def span_activator(log: object) -> SpanActivator | None:
    """The span activator of an event log's observers, or None (no tracing observer: the
    common case, and the caller then skips tracing altogether)."""
    find = getattr(log, "span_activator", None)
    return cast("SpanActivator | None", find()) if find is not None else None


def current_span(
    log: object, plan_id: str, kind: SpanKind, key: tuple[str, int] | None = None
) -> AbstractContextManager[object]:
    """A context manager making the plan's ``kind`` span current while it is entered, if a
    tracing observer watches ``log``; :data:`NO_SPAN` otherwise. For calls made once per
    phase (a lifecycle actor); a hot path keeps :func:`span_activator`'s answer instead."""
    activator = span_activator(log)
    if activator is None:
        return NO_SPAN
    return activator.activate_span(plan_id, kind, key)


_auto: list[Callable[[], Any]] = []


def set_auto_tracing(factory: Callable[[], Any]) -> None:
    """Register what makes a tracing observer for a run when the program has set
    OpenTelemetry up (``gategraph.runtime`` registers its own, which imports the layer
    that knows spans only when it is called)."""
    _auto[:] = [factory]


def auto_tracing() -> Any:
    """A tracing observer for a run that was given none, when the program has set
    OpenTelemetry up (a tracer or meter provider of its own), else None. A program that
    set it up has imported it: one that has not pays a dictionary lookup."""
    if not _auto or "opentelemetry" not in sys.modules:
        return None
    return _auto[0]()
