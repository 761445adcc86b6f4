"""Watching a plan as it runs: event observers and the log wrapper that feeds them.

An observer sees every event of a plan as it is appended (before it is stored), which is
all a progress display or a tracer needs: the supervisor and the engine know nothing of
them.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Protocol

import click

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._eventlog import EventLog

__all__ = ["EventObserver", "ObservedEventLog", "PlainProgress"]


class EventObserver(Protocol):
    """Sees each event of a plan as it is appended."""

    def on_event(self, event: Any) -> None:
        """Called once per event, synchronously; must be quick and should not raise."""


class PlainProgress:
    """Prints one plain line per step of a plan (for logs, pipes and CI)."""

    def __init__(self, *, err: bool = False) -> None:
        self.err = err

    def on_event(self, event: Any) -> None:
        line = progress_line(event)
        if line is not None:
            click.echo(line, err=self.err)


class ObservedEventLog:
    """An event log that shows each event to its observers, then stores it.

    Observers run synchronously, in order, before the event is stored: they must be quick
    and must not raise (an observer's error is reported once and the observer dropped, so a
    broken display never stops a plan).
    """

    def __init__(self, inner: EventLog, *observers: EventObserver) -> None:
        self.inner = inner
        self.observers = list(observers)
        self.appends_immediately = getattr(inner, "appends_immediately", False)

    def _show(self, event: Any) -> None:
        for observer in list(self.observers):
            try:
                observer.on_event(event)
            except Exception as exc:
                self.observers.remove(observer)
                warnings.warn(
                    f"event observer {observer!r} failed and was removed: "
                    f"{type(exc).__name__}: {exc}",
                    RuntimeWarning,
                    stacklevel=2,
                )

    async def append(self, event: Any) -> None:
        self._show(event)
        await self.inner.append(event)

    async def append_many(self, events: Sequence[Any]) -> None:
        for event in events:
            self._show(event)
        await self.inner.append_many(events)

    def append_nowait(self, event: Any) -> None:
        self._show(event)
        self.inner.append_nowait(event)

    async def flush(self, plan_id: str | None = None) -> None:
        await self.inner.flush(plan_id)

    async def read(self, plan_id: str, *, after: int = 0) -> Any:
        return await self.inner.read(plan_id, after=after)

    async def plans(self) -> Any:
        return await self.inner.plans()


def progress_line(event: Any) -> str | None:
    """The line shown for ``event``, or None for events not shown."""
    tag = type(event).__struct_config__.tag
    if tag == "plan_started":
        return f"plan {event.plan_id} ({event.graph}): started"
    if tag == "strategy_produced":
        return f"strategize, revision {event.revision}: {event.summary}"
    if tag == "artifact_validation_started":
        return f"round {event.round}: validating (attempt {event.attempt})"
    if tag == "validation_completed":
        mark = "ok  " if event.result.passed else "FAIL"
        message = f": {event.result.message}" if event.result.message else ""
        return f"  {mark} {event.node}{message}"[:160]
    if tag == "artifact_rejected":
        return f"round {event.round}: rejected at the {event.layer} layer"
    if tag == "artifact_validated":
        return f"round {event.round}: every layer passed"
    if tag == "retry_decided":
        return (
            f"  -> {event.decision} ({event.fault_kind}, {event.classification}; "
            f"retries used {event.budget_used} of {event.budget_limit})"
        )
    if tag == "fix_requested":
        return f"fix: the rejection goes back to the executor (attempt {event.attempt})"
    if tag == "strategy_revision_requested":
        return f"strategy revision {event.revision}: {event.reason}"[:160]
    if tag == "escalation_requested":
        return f"escalated to a person ({event.reason}): {event.message}"[:160]
    if tag == "escalation_decided":
        return f"decision: {event.action}" + (f" ({event.note})" if event.note else "")
    if tag == "apply_completed":
        return "apply: " + ", ".join(f"{k}: {v}" for k, v in event.changes.items())
    if tag == "plan_finished":
        return f"plan {event.plan_id}: {event.status}"
    return None
