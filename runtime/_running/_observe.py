"""Watching a plan as it runs: event observers and the log wrapper that feeds them.

An observer sees every event of a plan as it is appended (before it is stored), which is
all a progress display or a tracer needs: the supervisor and the engine know nothing of
them.

Two progress displays: :class:`PlainProgress` prints a line per step (logs, pipes, CI);
:class:`LiveProgress` keeps a small live panel on a terminal. :func:`progress_for` picks
one. rich is imported only when a live display starts, so importing the runtime stays
light.

Both show a failed informational validation as a warning (``warn``), not a failure
(``FAIL``): it never blocks a plan (seed 000, "Validation Mode"). Events do not carry the
mode, so a display is told which validations are informational (``informational=``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Protocol, cast

import click

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from types import TracebackType

    from gategraph.runtime._base._spans import SpanActivator
    from gategraph.runtime._storage._eventlog import EventLog
    from rich.console import Console, RenderableType
    from rich.live import Live

__all__ = [
    "EventObserver",
    "LiveProgress",
    "ObservedEventLog",
    "PlainProgress",
    "ProgressState",
    "progress_for",
    "progress_line",
]


class EventObserver(Protocol):
    """Sees each event of a plan as it is appended."""

    def on_event(self, event: Any) -> None:
        """Called once per event, synchronously; must be quick and should not raise."""


class PlainProgress:
    """Prints one plain line per step of a plan (for logs, pipes and CI).

    It has the same ``start``/``stop`` and context-manager use as :class:`LiveProgress`
    (they do nothing here), so a caller treats the two alike. A failed validation named in
    ``informational`` is a ``warn`` line, and the round's summary counts the warnings.
    """

    def __init__(self, *, err: bool = False, informational: Collection[str] = ()) -> None:
        self.err = err
        """Write to stderr instead of stdout."""
        self.informational = frozenset(informational)
        """The names of the informational validations: their failures are warnings."""
        self._warnings = 0

    def on_event(self, event: Any) -> None:
        """Print the event's line, if it has one."""
        tag = type(event).__struct_config__.tag
        if tag == "artifact_validation_started":
            self._warnings = 0
        elif (
            tag == "validation_completed"
            and not event.result.passed
            and _is_warning(event, self.informational)
        ):
            self._warnings += 1
        line = progress_line(event, informational=self.informational, warnings=self._warnings)
        if line is not None:
            click.echo(line, err=self.err)

    def start(self) -> None:
        """Nothing to start: lines are printed as events come."""

    def stop(self) -> None:
        """Nothing to stop."""

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


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

    def span_activator(self) -> SpanActivator | None:
        """The first observer that can make a plan's spans current while user code runs
        (a tracing observer), here or in the log this one wraps; None if there is none."""
        for observer in self.observers:
            if hasattr(observer, "activate_span"):
                return cast("SpanActivator", observer)
        inner = getattr(self.inner, "span_activator", None)
        return cast("SpanActivator | None", inner()) if inner is not None else None

    def lease(self, plan_id: str) -> contextlib.AbstractContextManager[Any]:
        """The inner log's writer lease for the plan (none if the inner log has none)."""
        lease = getattr(self.inner, "lease", None)
        return contextlib.nullcontext() if lease is None else lease(plan_id)

    def __getattr__(self, name: str) -> Any:
        # Anything else a log offers (now or later) is the inner log's: a wrapper that hid
        # it would make an observed plan behave differently from an unobserved one.
        if name == "inner":  # not set yet (unpickling, a failed __init__): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


@dataclasses.dataclass(slots=True)
class ProgressState:
    """What :class:`LiveProgress` knows of a plan so far, counted from its events."""

    plan_id: str = ""
    graph: str = ""
    phase: str = "starting"
    """``strategize``, ``execute``, ``validate``, ``fix``, ``revise``, ``escalated``,
    ``approval``, ``apply`` or ``finished``."""
    round: int = 0
    """The current validation round (0 before the first)."""
    started: int = 0
    """Validations started in the current round."""
    done: int = 0
    """Validations completed in the current round."""
    failed: int = 0
    """Validations of the current round that did not pass and block (all but warnings)."""
    warned: int = 0
    """Informational validations of the current round that did not pass: warnings, which
    never block."""
    retries_used: int = 0
    """Retries spent of the current budget (the Max-N retry budget)."""
    retries_limit: int | None = None
    """The budget, once the first retry decision told it."""
    fixes: int = 0
    revisions: int = 0
    escalations: int = 0
    status: str | None = None
    """How the plan ended (``applied``, ``failed``, ``awaiting_*``), once it has."""
    began_at: float | None = None
    ended_at: float | None = None

    @property
    def running(self) -> int:
        """Validations of the current round started and not yet completed."""
        return max(self.started - self.done, 0)

    @property
    def phase_text(self) -> str:
        """The phase as shown: ``validate round 2``, ``finished: applied`` ..."""
        if self.phase == "validate":
            return f"validate round {self.round}"
        if self.phase == "finished" and self.status:
            return f"finished: {self.status}"
        return self.phase


class LiveProgress:
    """A live panel of one plan on a terminal: phase, validation counts, retries, fixes,
    revisions and the last few notable lines.

    ``on_event`` only updates counters (a fan-out of 10,000 validations calls it ~20,000
    times); rich redraws the panel on its own refresh thread, ``refresh_per_second`` times a
    second. Call :meth:`start` before the plan and :meth:`stop` after it, or use it as a
    context manager; after ``stop`` the final state stays on the screen. A failed
    validation named in ``informational`` counts as a warning, not a failure.
    """

    def __init__(
        self,
        *,
        err: bool = False,
        console: Console | None = None,
        refresh_per_second: float = 8,
        lines: int = 6,
        informational: Collection[str] = (),
    ) -> None:
        self.err = err
        """Write to stderr instead of stdout (ignored when ``console`` is given)."""
        self.informational = frozenset(informational)
        """The names of the informational validations: their failures are warnings."""
        self.console = console
        """The rich console to draw on; by default one on stdout or stderr."""
        self.refresh_per_second = refresh_per_second
        self.state = ProgressState()
        """The counters, as of the last event."""
        self.errors = 0
        """Events this display failed to take in (it never raises; a count is kept)."""
        self._lines: collections.deque[str] = collections.deque(maxlen=lines)
        # The refresh thread reads the lines while the event loop appends to them.
        self._lines_lock = threading.Lock()
        self._live: Live | None = None
        self._handlers: dict[str, Callable[[Any], None]] = {
            "plan_started": self._plan_started,
            "plan_resumed": self._plan_resumed,
            "strategy_produced": self._strategy_produced,
            "artifact_validation_started": self._round_started,
            "validation_completed": self._validation_completed,
            "retry_decided": self._retry_decided,
            "fix_requested": self._fix_requested,
            "strategy_revision_requested": self._revision_requested,
            "escalation_requested": self._escalation_requested,
            "escalation_decided": self._escalation_decided,
            "approval_required": self._approval_required,
            "apply_started": self._apply_started,
            "plan_finished": self._plan_finished,
        }

    # -- events (the hot path: counters only) ---------------------------------------------

    def on_event(self, event: Any) -> None:
        """Count the event in; never raises (a display must not stop a plan)."""
        try:
            tag = type(event).__struct_config__.tag
            if tag == "validation_started":
                self.state.started += 1
                return
            handler = self._handlers.get(tag)
            if handler is not None:
                handler(event)
            # Passing validations are counted, not listed: they would push every notable
            # line off a fan-out's panel.
            if tag != "validation_completed":
                self._note(event)
        except Exception:
            self.errors += 1

    def _note(self, event: Any) -> None:
        line = progress_line(event, informational=self.informational, warnings=self.state.warned)
        if line is not None:
            with self._lines_lock:
                self._lines.append(line)

    def _plan_started(self, event: Any) -> None:
        state = self.state
        state.plan_id, state.graph = event.plan_id, event.graph
        state.phase = "strategize"
        state.began_at = event.at

    def _plan_resumed(self, event: Any) -> None:
        state = self.state
        state.plan_id = state.plan_id or event.plan_id
        if state.began_at is None:
            state.began_at = event.at

    def _strategy_produced(self, event: Any) -> None:
        self.state.phase = "execute"

    def _round_started(self, event: Any) -> None:
        state = self.state
        state.phase, state.round = "validate", event.round
        state.started = state.done = state.failed = state.warned = 0

    def _validation_completed(self, event: Any) -> None:
        state = self.state
        state.done += 1
        if getattr(event, "reused_from", None) is not None:
            state.started += 1  # no start of its own: nothing ran, nothing is running
        if not event.result.passed:
            if _is_warning(event, self.informational):
                state.warned += 1
            else:
                state.failed += 1
            self._note(event)

    def _retry_decided(self, event: Any) -> None:
        self.state.retries_used = event.budget_used
        self.state.retries_limit = event.budget_limit

    def _fix_requested(self, event: Any) -> None:
        self.state.phase = "fix"
        self.state.fixes += 1

    def _revision_requested(self, event: Any) -> None:
        state = self.state
        state.phase = "revise"
        state.revisions += 1
        # A revision starts a fresh budget (seed 003: one budget per strategy).
        state.retries_used = 0

    def _escalation_requested(self, event: Any) -> None:
        self.state.phase = "escalated"
        self.state.escalations += 1

    def _escalation_decided(self, event: Any) -> None:
        if event.action == "retry":
            # A person's retry gives a fresh budget.
            self.state.retries_used = 0

    def _approval_required(self, event: Any) -> None:
        self.state.phase = "approval"

    def _apply_started(self, event: Any) -> None:
        self.state.phase = "apply"

    def _plan_finished(self, event: Any) -> None:
        state = self.state
        state.phase, state.status, state.ended_at = "finished", event.status, event.at

    # -- the display ----------------------------------------------------------------------

    def start(self) -> None:
        """Show the panel (imports rich); a second call does nothing."""
        if self._live is not None:
            return
        from rich.console import Console
        from rich.live import Live

        console = self.console or Console(stderr=self.err)
        self.console = console
        self._live = Live(
            self, console=console, refresh_per_second=self.refresh_per_second, transient=False
        )
        self._live.start()

    def stop(self) -> None:
        """Draw the final state once more and leave it on the screen."""
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def __enter__(self) -> LiveProgress:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __rich__(self) -> RenderableType:
        """The panel as of now (rich calls this on each refresh, off the event loop)."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        state = self.state
        with self._lines_lock:
            lines = list(self._lines)
        finished = state.phase == "finished"
        title = Text("gategraph ", style="bold")
        title.append(state.graph or "plan")
        if state.plan_id:
            title.append(f" · {state.plan_id}", style="dim")
        title.append(" · ")
        phase_style = "bold cyan"
        if finished:
            phase_style = "bold green" if state.status == "applied" else "bold red"
        title.append(state.phase_text, style=phase_style)
        if state.began_at is not None:
            spent = (state.ended_at if finished and state.ended_at else time.time()) - (
                state.began_at
            )
            title.append(f" · {max(spent, 0.0):.1f}s", style="dim")

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim")
        grid.add_column()
        counts = Text(f"{state.done} done · {state.running} running · ")
        counts.append(f"{state.failed} failed", style="red" if state.failed else "")
        if state.warned:
            counts.append(" · ")
            counts.append(_plural(state.warned, "warning", "warnings"), style="yellow")
        grid.add_row(f"validations (round {state.round})" if state.round else "validations", counts)
        retries = (
            f"{state.retries_used} of {state.retries_limit} used"
            if state.retries_limit is not None
            else "none used"
        )
        grid.add_row(
            "retries",
            f"{retries} · fixes {state.fixes} · revisions {state.revisions}"
            + (f" · escalations {state.escalations}" if state.escalations else ""),
        )
        shown = [Text(line, style=_line_style(line), overflow="ellipsis") for line in lines]
        return Group(title, grid, *shown)


def _line_style(line: str) -> str:
    mark = line[:8]
    if "FAIL" in mark:
        return "red"
    if "warn" in mark:
        return "yellow"
    return "dim"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _is_warning(event: Any, informational: Collection[str]) -> bool:
    """Whether a failed validation's completion is a warning: an informational one."""
    return event.validation in informational or getattr(event, "mode", None) == "informational"


def progress_for(
    stream_is_tty: bool, *, err: bool, informational: Collection[str] = ()
) -> LiveProgress | PlainProgress:
    """The progress display for a stream: a live panel on a terminal, plain lines otherwise.

    Both have ``start``/``stop`` and work as context managers::

        with progress_for(sys.stderr.isatty(), err=True) as progress:
            await run_plan(graph, event_log=ObservedEventLog(log, progress))

    ``informational`` names the validations whose failures are warnings.
    """
    if stream_is_tty:
        return LiveProgress(err=err, informational=informational)
    return PlainProgress(err=err, informational=informational)


def progress_line(
    event: Any, *, informational: Collection[str] = (), warnings: int = 0
) -> str | None:
    """The line shown for ``event``, or None for events not shown.

    A failed validation named in ``informational`` is a ``warn`` line, not ``FAIL``;
    ``warnings`` is how many the round had, for its closing ``artifact_validated`` line.
    """
    tag = type(event).__struct_config__.tag
    if tag == "plan_started":
        return f"plan {event.plan_id} ({event.graph}): started"
    if tag == "plan_resumed":
        return f"resumed after seq {event.after_seq}: {event.reason}"
    if tag == "strategy_produced":
        return f"strategize, revision {event.revision}: {event.summary}"
    if tag == "work_finished":
        if event.error:
            return f"work (attempt {event.attempt}) failed: {event.error}"[:160]
        return None
    if tag == "artifact_validation_started":
        return f"round {event.round}: validating (attempt {event.attempt})"
    if tag == "validation_completed":
        if event.result.passed:
            mark = "ok  "
        elif _is_warning(event, informational):
            mark = "warn"
        else:
            mark = "FAIL"
        message = f": {event.result.message}" if event.result.message else ""
        reused = getattr(event, "reused_from", None)
        again = f" (reused from round {reused})" if reused is not None else ""
        return f"  {mark} {event.node}{message}"[: 160 - len(again)] + again
    if tag == "artifact_rejected":
        line = f"round {event.round}: rejected at the {event.layer} layer"
        if event.layer == "semantic" or not event.reasons:
            return line  # the semantic layer's reasons are the FAIL lines above it
        # The other layers have no lines of their own: the first reason says why.
        more = len(event.reasons) - 1
        suffix = f" (and {more} more)" if more else ""
        # A reason is kept as "<layer>: <message>": the line names the layer already.
        first = event.reasons[0].removeprefix(f"{event.layer}: ")
        first = " ".join(first.split()) or "no reason given"
        room = 160 - len(line) - len(suffix) - 2
        return f"{line}: {first if len(first) <= room else first[: room - 1] + '…'}{suffix}"
    if tag == "artifact_validated":
        if warnings:
            return (
                f"round {event.round}: every layer passed, with "
                f"{_plural(warnings, 'warning', 'warnings')}"
            )
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
    if tag == "approval_required":
        return f"approval needed (tier {event.tier}): {event.message}"[:160]
    if tag == "approval_decided":
        verdict = "approved" if event.approved else "denied"
        note = f" ({event.note})" if event.note else ""
        return f"approval: {verdict}{note}, after {event.waited:.1f}s"[:160]
    if tag == "apply_completed":
        if not event.changes:
            return "apply: no resources to change"
        return "apply: " + ", ".join(f"{k}: {v}" for k, v in event.changes.items())
    if tag == "plan_finished":
        return f"plan {event.plan_id}: {event.status}"
    return None
