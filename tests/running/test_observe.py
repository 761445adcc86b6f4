"""Watching a plan: the live and plain progress displays and the observed event log."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime import MemoryEventLog, load_graph, run_plan
from gategraph.runtime._data._events import (
    ApplyCompleted,
    ApplyStarted,
    ArtifactRejected,
    ArtifactValidated,
    ArtifactValidationStarted,
    EscalationDecided,
    EscalationRequested,
    EventBase,
    FixRequested,
    PlanFinished,
    PlanStarted,
    RetryDecided,
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
from gategraph.runtime._running._observe import (
    LiveProgress,
    ObservedEventLog,
    PlainProgress,
    progress_for,
    progress_line,
)
from rich.console import Console


class _Unknown(EventBase, tag="something_new", kw_only=True, frozen=True):
    detail: str = ""


class _Broken(EventBase, tag="retry_decided", kw_only=True, frozen=True):
    """A retry decision without its budget fields: a display must survive it."""


def ev(kind: type[EventBase], **fields: Any) -> Any:
    fields.setdefault("seq", 1)
    return kind(id="e", plan_id="P1", at=1000.0, **fields)


def validation(node: str, passed: bool = True, message: str = "") -> list[Any]:
    result = ValidationResult(passed=passed, message=message)
    return [
        ev(ValidationStarted, node=node, validation=node),
        ev(ValidationCompleted, node=node, validation=node, result=result, duration=0.1),
    ]


def story() -> list[Any]:
    """A plan that is rejected once, fixed, revised, escalated, approved and applied."""
    return [
        ev(PlanStarted, graph="greet"),
        ev(StrategyProduced, revision=0, summary="run it"),
        ev(ArtifactValidationStarted, round=1, attempt=1, revision=0),
        *validation("a"),
        *validation("b", passed=False, message="does not parse"),
        ev(ValidationStarted, node="c", validation="c"),
        ev(ArtifactRejected, round=1, layer="semantic", reasons=["b: does not parse"]),
        ev(
            RetryDecided,
            round=1,
            attempt=1,
            fault_kind="rejected",
            classification="transient",
            decision="fix",
            budget_used=1,
            budget_limit=3,
        ),
        ev(FixRequested, attempt=2),
        ev(ArtifactValidationStarted, round=2, attempt=2, revision=0),
        *validation("a"),
    ]


def test_live_progress_counts_the_current_round() -> None:
    """Counters follow the events: validations per round, retries, fixes, the phase."""
    progress = LiveProgress()
    events = story()
    for event in events[:9]:
        progress.on_event(event)
    state = progress.state
    assert (state.phase_text, state.done, state.running, state.failed) == (
        "validate round 1",
        2,
        1,
        1,
    )
    for event in events[9:11]:
        progress.on_event(event)
    assert (state.retries_used, state.retries_limit, state.fixes, state.phase) == (1, 3, 1, "fix")
    for event in events[11:]:
        progress.on_event(event)
    # A new round starts the validation counts afresh.
    assert (state.round, state.started, state.done, state.failed) == (2, 1, 1, 0)
    progress.on_event(ev(StrategyRevisionRequested, revision=1, reason="spent"))
    assert (state.phase, state.revisions, state.retries_used) == ("revise", 1, 0)
    progress.on_event(ev(EscalationRequested, reason="exhausted", message="still broken"))
    assert (state.phase, state.escalations) == ("escalated", 1)
    progress.on_event(ev(EscalationDecided, action="retry", note="try harder"))
    progress.on_event(ev(_ApprovalRequired, round=3, tier="high", message="deploys"))
    assert state.phase == "approval"
    progress.on_event(ev(ApplyStarted, resources=["repo"]))
    assert state.phase == "apply"
    progress.on_event(ev(PlanFinished, status="applied"))
    assert state.phase_text == "finished: applied"
    assert progress.errors == 0


def test_live_progress_lists_notable_lines_only() -> None:
    """Failures and steps are listed; passing validations are only counted."""
    progress = LiveProgress(lines=20)
    for event in story():
        progress.on_event(event)
    lines = list(progress._lines)
    assert any("FAIL b: does not parse" in line for line in lines)
    assert not any(line.strip().startswith("ok") for line in lines)
    assert "round 1: rejected at the semantic layer" in lines


def test_live_progress_never_raises() -> None:
    """An unknown tag is ignored; a malformed event or non-event is counted, not raised."""
    progress = LiveProgress()
    progress.on_event(ev(_Unknown))
    assert progress.errors == 0
    progress.on_event(ev(_Broken))
    progress.on_event(object())
    assert progress.errors == 2


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, color_system=None, width=120), out


def test_live_progress_draws_and_leaves_the_final_state() -> None:
    """Between start and stop rich draws the panel; the final state stays printed."""
    console, out = _console()
    with LiveProgress(console=console) as progress:
        for event in story():
            progress.on_event(event)
        progress.on_event(ev(PlanFinished, status="applied"))
    text = out.getvalue()
    assert "finished: applied" in text
    assert "1 done · 0 running · 0 failed" in text
    assert "1 of 3 used · fixes 1 · revisions 0" in text
    assert "FAIL b: does not parse" in text
    progress.stop()  # a second stop does nothing


def test_live_progress_renders_as_a_rich_object() -> None:
    """The panel is a rich renderable of the current state, shown without a live display."""
    console, out = _console()
    progress = LiveProgress()
    for event in story()[:9]:
        progress.on_event(event)
    console.print(progress)
    text = out.getvalue()
    assert "greet · P1 · validate round 1" in text
    assert "2 done · 1 running · 1 failed" in text


def test_progress_for_picks_by_terminal() -> None:
    """A terminal gets the live panel; a pipe or file gets plain lines; both are told the
    informational validations."""
    plain = progress_for(False, err=True, informational=["todos"])
    assert isinstance(plain, PlainProgress) and plain.err
    assert plain.informational == frozenset({"todos"})
    live = progress_for(True, err=False, informational=["todos"])
    assert isinstance(live, LiveProgress) and not live.err
    assert live.informational == frozenset({"todos"})
    with plain:  # the same start/stop as the live panel, doing nothing
        pass


def test_progress_lines_for_approval_resumption_and_work() -> None:
    """The events of approvals, resumption and failed work have their own lines."""
    assert (
        progress_line(ev(_ApprovalRequired, round=1, tier="high", message="deploys"))
        == "approval needed (tier high): deploys"
    )
    assert (
        progress_line(ev(_ApprovalDecided, approved=True, note="ok", waited=2.5))
        == "approval: approved (ok), after 2.5s"
    )
    assert progress_line(ev(_ApprovalDecided, approved=False)) == "approval: denied, after 0.0s"
    assert (
        progress_line(ev(_PlanResumed, after_seq=12, reason="crashed"))
        == "resumed after seq 12: crashed"
    )
    assert progress_line(ev(_WorkFinished, attempt=2, error="boom")) == (
        "work (attempt 2) failed: boom"
    )
    assert progress_line(ev(_WorkFinished, attempt=2)) is None
    assert progress_line(ev(_Unknown)) is None
    assert progress_line(ev(ApplyCompleted, changes={})) == "apply: no resources to change"


def test_a_rejection_before_the_validations_says_why_on_its_line() -> None:
    """A round rejected at the routing, payload or approval layer has no FAIL lines: its
    own line gives the first reason (and how many more), cut to the line's width. A
    semantic rejection's reasons are the FAIL lines above it."""
    payload = ev(
        ArtifactRejected,
        round=2,
        layer="payload",
        reasons=[
            "payload: artifact.path: a PosixPath cannot be encoded",
            "payload: artifact.when: a datetime",
        ],
    )
    assert progress_line(payload) == (
        "round 2: rejected at the payload layer: artifact.path: a PosixPath cannot be "
        "encoded (and 1 more)"
    )
    # One line, however the reason is laid out; cut to the line's width.
    routing = ev(ArtifactRejected, round=1, layer="routing", reasons=["routing: \n" + "x" * 300])
    line = progress_line(routing)
    assert line is not None and len(line) == 160 and line.endswith("x…")
    assert line.startswith("round 1: rejected at the routing layer: xxx")
    blank = ev(ArtifactRejected, round=5, layer="payload", reasons=["payload:  \n "])
    assert progress_line(blank) == "round 5: rejected at the payload layer: no reason given"
    semantic = ev(ArtifactRejected, round=3, layer="semantic", reasons=["b: does not parse"])
    assert progress_line(semantic) == "round 3: rejected at the semantic layer"
    assert progress_line(ev(ArtifactRejected, round=4, layer="approval", reasons=[])) == (
        "round 4: rejected at the approval layer"
    )


def test_plain_progress_prints_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """Plain progress prints each shown event's line, to stderr when told."""
    progress = PlainProgress(err=True)
    for event in story()[:5]:
        progress.on_event(event)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "round 1: validating (attempt 1)" in captured.err
    assert "  ok   a" in captured.err


class _Boom:
    def on_event(self, event: Any) -> None:
        raise ValueError("display broke")


class _Recorder:
    def __init__(self) -> None:
        self.tags: list[str] = []

    def on_event(self, event: Any) -> None:
        self.tags.append(type(event).__struct_config__.tag)


@pytest.mark.anyio
async def test_a_raising_observer_is_removed_with_a_warning() -> None:
    """A broken observer is dropped once, with a RuntimeWarning; the plan and the others go on."""
    inner = MemoryEventLog()
    recorder = _Recorder()
    log = ObservedEventLog(inner, _Boom(), recorder)
    with pytest.warns(RuntimeWarning, match="display broke"):
        await log.append(ev(PlanStarted, graph="greet"))
    assert len(log.observers) == 1
    await log.append(ev(StrategyProduced, revision=0))
    assert recorder.tags == ["plan_started", "strategy_produced"]
    assert len(await inner.read("P1")) == 2


class _LogWithExtras(MemoryEventLog):
    def compact(self) -> str:
        return "compacted"


def test_the_observed_log_passes_on_what_it_does_not_wrap() -> None:
    """The inner log's lease and other methods stay reachable through the wrapper."""
    log = ObservedEventLog(_LogWithExtras())
    with log.lease("P1"):
        pass
    assert log.appends_immediately is True
    assert log.compact() == "compacted"
    with pytest.raises(AttributeError):
        _ = log.no_such_thing


@pytest.mark.anyio
async def test_live_progress_follows_a_real_plan(tmp_path: Path) -> None:
    """A plan rejected once, fixed and applied ends with the panel's counts matching."""
    console, out = _console()
    progress = LiveProgress(console=console)
    with progress:
        outcome = await run_plan(
            load_graph(plan(repo(tmp_path), [BAD, GOOD])),
            event_log=ObservedEventLog(MemoryEventLog(), progress),
            audit=InMemoryAuditLog(),
        )
    state = progress.state
    assert outcome.status == "applied"
    assert (state.phase_text, state.round, state.fixes, state.plan_id) == (
        "finished: applied",
        2,
        1,
        outcome.plan_id,
    )
    # Told nothing of modes, the informational `advice` counts as a failure ...
    assert state.done == state.started == 2 and state.failed == 1
    assert state.retries_used == 1 and progress.errors == 0
    assert "finished: applied" in out.getvalue()


@pytest.mark.anyio
async def test_live_progress_of_a_real_plan_warns_for_informational(tmp_path: Path) -> None:
    """... told that `advice` is informational, the panel counts it as a warning."""
    console, out = _console()
    progress = LiveProgress(console=console, informational={"advice"})
    with progress:
        outcome = await run_plan(
            load_graph(plan(repo(tmp_path), [BAD, GOOD])),
            event_log=ObservedEventLog(MemoryEventLog(), progress),
            audit=InMemoryAuditLog(),
        )
    assert outcome.status == "applied"
    assert (progress.state.failed, progress.state.warned) == (0, 1)
    text = out.getvalue()
    assert "2 done · 0 running · 0 failed · 1 warning" in text
    assert "warn advice: failed on purpose" in text
    assert "FAIL advice" not in text
    assert "round 2: every layer passed, with 1 warning" in text


def warned_round(round_: int = 2) -> list[Any]:
    """A round with one required pass and one informational failure (`todos`)."""
    return [
        ev(ArtifactValidationStarted, round=round_, attempt=round_, revision=0),
        *validation("syntax"),
        *validation("todos", passed=False, message="1 TODO"),
        ev(ArtifactValidated, round=round_, verdict={"verdict": "attest"}),
    ]


def test_progress_line_marks_informational_failures_as_warnings() -> None:
    """A failed informational validation is `warn`, a failed required one `FAIL`."""
    failed = validation("todos", passed=False, message="1 TODO")[1]
    assert progress_line(failed) == "  FAIL todos: 1 TODO"
    assert progress_line(failed, informational={"todos"}) == "  warn todos: 1 TODO"
    assert progress_line(failed, informational={"other"}) == "  FAIL todos: 1 TODO"
    passed = validation("todos")[1]
    assert progress_line(passed, informational={"todos"}) == "  ok   todos"
    validated = ev(ArtifactValidated, round=3, verdict={})
    assert progress_line(validated) == "round 3: every layer passed"
    assert progress_line(validated, warnings=1) == "round 3: every layer passed, with 1 warning"
    assert progress_line(validated, warnings=2) == "round 3: every layer passed, with 2 warnings"


def test_plain_progress_counts_warnings_per_round(capsys: pytest.CaptureFixture[str]) -> None:
    """Plain lines say `warn`, and each round's closing line counts only its own warnings."""
    progress = PlainProgress(informational=["todos"])
    for event in [
        *warned_round(1),
        *warned_round(2)[:3],
        ev(ArtifactValidated, round=2, verdict={}),
    ]:
        progress.on_event(event)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "round 1: validating (attempt 1)",
        "  ok   syntax",
        "  warn todos: 1 TODO",
        "round 1: every layer passed, with 1 warning",
        "round 2: validating (attempt 2)",
        "  ok   syntax",
        "round 2: every layer passed",
    ]


def test_a_passing_informational_validation_is_no_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Only a failed informational validation counts as a warning."""
    progress = PlainProgress(informational=["todos"])
    for event in [
        ev(ArtifactValidationStarted, round=1, attempt=1, revision=0),
        *validation("todos"),
        ev(ArtifactValidated, round=1, verdict={}),
    ]:
        progress.on_event(event)
    assert capsys.readouterr().out.splitlines()[-1] == "round 1: every layer passed"


def test_live_progress_counts_warnings_apart_from_failures() -> None:
    """The panel counts an informational failure as a warning and lists it as `warn`."""
    console, out = _console()
    progress = LiveProgress(informational=frozenset({"todos"}), lines=20)
    for event in warned_round():
        progress.on_event(event)
    state = progress.state
    assert (state.done, state.failed, state.warned) == (2, 0, 1)
    assert list(progress._lines)[-2:] == [
        "  warn todos: 1 TODO",
        "round 2: every layer passed, with 1 warning",
    ]
    console.print(progress)
    assert "2 done · 0 running · 0 failed · 1 warning" in out.getvalue()
    progress.on_event(ev(ArtifactValidationStarted, round=3, attempt=3, revision=0))
    assert state.warned == 0  # a new round counts afresh


class _ModedCompleted(EventBase, tag="validation_completed", kw_only=True, frozen=True, gc=False):
    """A completion that names its mode itself (what a display also honours)."""

    node: str
    validation: str
    result: ValidationResult
    duration: float = 0.0
    mode: str = "required"


def test_an_event_that_names_its_mode_is_honoured() -> None:
    """An event carrying ``mode="informational"`` is a warning without being told."""
    result = ValidationResult(passed=False, message="meh")
    informational = ev(
        _ModedCompleted, node="n", validation="v", result=result, mode="informational"
    )
    required = ev(_ModedCompleted, node="n", validation="v", result=result)
    assert progress_line(informational) == "  warn n: meh"
    assert progress_line(required) == "  FAIL n: meh"


def test_importing_the_runtime_leaves_rich_and_opentelemetry_out() -> None:
    """rich and OpenTelemetry are imported only when a live display or a tracer is made."""
    code = (
        "import gategraph.runtime, sys\n"
        "from gategraph.runtime._running import _observe; from gategraph.runtime._embed import _telemetry\n"
        "_observe.progress_for(True, err=True); _observe.PlainProgress()\n"
        "_telemetry.record_statistics\n"
        "assert 'rich' not in sys.modules, 'rich'\n"
        "assert 'opentelemetry' not in sys.modules, 'opentelemetry'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
