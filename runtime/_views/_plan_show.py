"""One plan, looked at: its verdict, the findings per acceptance criterion, the ladder it
went through, its statistics and the change it validated, worked out from its event log
and the content store beside it. ``gategraph show`` prints it; ``gategraph report`` draws
it.

The change is the last round's: what each sandbox started from (the real resource as the
sandbox copied it, kept in the store when the sandbox opened) against what the round's
validations saw. For an applied plan that is what Apply committed; for a paused one, what
it would commit.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec
from gategraph.runtime._data._events import (
    ApprovalDecided,
    ApprovalRequired,
    ArtifactRejected,
    ArtifactValidated,
    ArtifactValidationStarted,
    EscalationRequested,
    FixRequested,
    RetryDecided,
    StrategyRevisionRequested,
    ValidationCompleted,
    ValidationStarted,
)
from gategraph.runtime._data._results import enforcement
from gategraph.runtime._lifecycle._plan import PlanStatistics

from ._plan_views import PlanSummary

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gategraph.runtime._data._events import Event
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._storage._store import ContentStore

__all__ = ["FileChange", "PlanView", "RoundView", "plan_view", "statistics_of"]

_DIFF_LIMIT: Final = 2_000_000
"""Bytes of either version of a file beyond which its diff is not shown."""
_LINES_LIMIT: Final = 20_000
"""Lines of a file's two versions together beyond which its diff is not worked out: the
diff's cost grows faster than the files (a file whose lines were shuffled is the worst)."""


class FileChange(msgspec.Struct, kw_only=True, frozen=True):
    """One file the plan's change adds, modifies or deletes."""

    resource: str
    path: str
    kind: str
    """``added``, ``modified`` or ``deleted``."""
    diff: str | None = None
    """The unified diff (``--- a/PATH`` / ``+++ b/PATH``), or None for a binary or large file
    (``note`` says which)."""
    note: str = ""


class RoundView(msgspec.Struct, kw_only=True, frozen=True):
    """One validation round: how it went and what it ran."""

    round: int
    attempt: int
    revision: int
    passed: bool | None
    """None for a round that did not finish."""
    layer: str | None = None
    """The layer that rejected it."""
    started_at: float
    seconds: float | None = None
    """From its start to its verdict (a person's wait for an approval included)."""
    layers: dict[str, float] = msgspec.field(default_factory=dict)
    """Seconds spent in each pipeline layer, where the log has them."""
    validations: tuple[dict[str, Any], ...] = ()
    """Each validation call: ``node``, ``validation``, ``passed``, ``message``,
    ``duration``, ``isolation``, ``enforced_by`` (what held it to read-only:
    ``kernel``, ``guard`` or ``server``; None where the log does not say),
    ``network`` (whether it declared ``network: true``) and ``reused_from`` (the round
    whose call's result this is, when nothing the validation is given had changed since;
    None for a call of this round)."""


class PlanView(msgspec.Struct, kw_only=True, frozen=True):
    """What ``gategraph show`` prints of one plan."""

    summary: PlanSummary
    verdict: dict[str, Any] | None
    """The last round's verdict envelope (an attestation or a rejection)."""
    criteria: tuple[dict[str, Any], ...]
    """Each acceptance criterion with its finding in the last verdict: ``id`` (its UUID),
    ``name`` (the plan's own: its acceptance id, or the validation it stands for),
    ``alias`` (``AC`` and its ordinal, as outside validators know it), ``text``,
    ``status`` (``pass``, ``fail`` or ``unknown``), ``reasoning``."""
    ladder: tuple[str, ...]
    """What the plan went through, a line per step (as ``gategraph run`` prints it)."""
    rounds: tuple[RoundView, ...]
    statistics: PlanStatistics
    changes: tuple[FileChange, ...] | None
    """The change the last round validated, by file; None when it is not known (a plan
    from before it was kept, or an in-memory store)."""
    changes_note: str = ""
    """Why ``changes`` is None, or what it is (``applied`` / ``would apply``)."""


def statistics_of(events: Sequence[Event]) -> PlanStatistics:
    """A plan's statistics (seed 002 §16) from its events, as the supervisor counted them
    while it ran. The time per pipeline layer is each round's own measure where the log
    has it."""
    stats = PlanStatistics()
    rounds = {e.round for e in events if isinstance(e, ArtifactValidationStarted)}
    stats.rounds = len(rounds)
    for event in events:
        if isinstance(event, ArtifactValidated):
            stats.pipeline_completions += 1
            _add_seconds(stats, event.seconds)
        elif isinstance(event, ArtifactRejected):
            stats.rejection_reasons[event.layer] = stats.rejection_reasons.get(event.layer, 0) + 1
            _add_seconds(stats, event.seconds)
        elif isinstance(event, ValidationStarted):
            stats.semantic_invocations += 1
        elif isinstance(event, FixRequested):
            stats.fixes += 1
        elif isinstance(event, RetryDecided) and event.decision == "retry-validator":
            stats.validator_retries += 1
        elif isinstance(event, StrategyRevisionRequested):
            stats.revisions += 1
        elif isinstance(event, EscalationRequested):
            stats.escalations += 1
        elif isinstance(event, ApprovalDecided):
            stats.approval_wait_seconds += event.waited
    return stats


def _add_seconds(stats: PlanStatistics, seconds: dict[str, float]) -> None:
    for layer, spent in seconds.items():
        stats.layer_seconds[layer] = stats.layer_seconds.get(layer, 0.0) + spent


def _rounds(events: Sequence[Event]) -> tuple[RoundView, ...]:
    out: list[RoundView] = []
    current: dict[str, Any] | None = None
    calls: dict[str, dict[str, Any]] = {}

    def close(
        passed: bool | None, layer: str | None, at: float | None, layers: dict[str, float]
    ) -> None:
        nonlocal current
        if current is None:
            return
        seconds = None if at is None else max(at - current["started_at"], 0.0)
        out.append(
            RoundView(
                **current,
                passed=passed,
                layer=layer,
                seconds=seconds,
                layers=dict(layers),
                validations=tuple(calls.values()),
            )
        )
        current = None

    for event in events:
        if isinstance(event, ArtifactValidationStarted):
            close(None, None, None, {})
            calls = {}
            current = {
                "round": event.round,
                "attempt": event.attempt,
                "revision": event.revision,
                "started_at": event.at,
            }
        elif current is not None and isinstance(event, ValidationStarted):
            calls[event.node] = {
                "node": event.node,
                "validation": event.validation,
                "passed": None,
                "message": "",
                "duration": None,
            }
        elif current is not None and isinstance(event, ValidationCompleted):
            call = calls.setdefault(event.node, {"node": event.node, "validation": ""})
            call.update(
                validation=event.validation,
                passed=event.result.passed,
                message=event.result.message,
                duration=round(event.duration, 6),
                isolation=event.isolation,
                enforced_by=enforcement(event.isolation),
                network=event.network,
                reused_from=event.reused_from,
            )
        elif isinstance(event, ArtifactValidated):
            close(True, None, event.at, event.seconds)
        elif isinstance(event, ArtifactRejected):
            close(False, event.layer, event.at, event.seconds)
    close(None, None, None, {})
    return tuple(out)


def _criteria(
    verdict: dict[str, Any] | None, roster: Sequence[Any] | None
) -> tuple[dict[str, Any], ...]:
    findings = {
        f.get("acId"): f for f in (verdict or {}).get("findings", []) if isinstance(f, dict)
    }
    out: list[dict[str, Any]] = []
    if roster:
        for criterion in roster:
            finding = findings.pop(criterion.id, None) or {}
            out.append(
                {
                    "id": criterion.id,
                    "name": criterion.key,
                    "alias": criterion.alias,
                    "text": criterion.text,
                    "status": finding.get("status", "unknown"),
                    "reasoning": finding.get("reasoning", ""),
                }
            )
    for ac_id, finding in findings.items():  # no roster to name them: by their ids
        out.append(
            {
                "id": ac_id,
                "name": "",
                "alias": "",
                "text": "",
                "status": finding.get("status", "unknown"),
                "reasoning": finding.get("reasoning", ""),
            }
        )
    return tuple(out)


def _ladder(events: Sequence[Event]) -> tuple[str, ...]:
    from gategraph.runtime._running._observe import progress_line

    lines: list[str] = []
    for event in events:
        if isinstance(event, ValidationCompleted) and event.result.passed:
            continue  # counted in the rounds, not listed: a fan-out would bury the rest
        line = progress_line(event)
        if line is not None:
            lines.append(line)
    return tuple(lines)


def changes_between(
    store: ContentStore, resource: str, base: str, after: str, *, diffs: bool = True
) -> list[FileChange]:
    """The files that differ between two manifests of ``store``, each with its diff (with
    ``diffs``)."""
    before = {entry.path: entry for entry in store.manifest(base)}
    now = {entry.path: entry for entry in store.manifest(after)}
    out: list[FileChange] = []
    for field in sorted(before.keys() | now.keys()):
        old, new = before.get(field), now.get(field)
        if old is not None and new is not None and old.sha256 == new.sha256:
            continue
        kind = "added" if old is None else "deleted" if new is None else "modified"
        path = _readable(field)
        if diffs:
            out.append(_file_change(store, resource, path, kind, old, new))
        else:
            out.append(FileChange(resource=resource, path=path, kind=kind))
    return out


def _readable(field: str) -> str:
    """A manifest's path as a person reads it: a name that is not UTF-8 (kept as NUL and
    hex) with its odd bytes as ``\\xNN``."""
    if not field.startswith("\0"):
        return field
    try:
        return bytes.fromhex(field[1:]).decode("utf-8", "backslashreplace")
    except ValueError:
        return field[1:]


def _file_change(
    store: ContentStore, resource: str, path: str, kind: str, old: Any, new: Any
) -> FileChange:
    largest = max(entry.size for entry in (old, new) if entry is not None)
    if largest > _DIFF_LIMIT:
        return FileChange(resource=resource, path=path, kind=kind, note="over 2 MB: no diff")
    texts: list[list[str]] = []
    for entry in (old, new):
        if entry is None:
            texts.append([])
            continue
        data = store.get(entry.sha256)
        if entry.kind == "link":
            data = data.removeprefix(b"symlink\0")
            texts.append([f"-> {data.decode('utf-8', 'replace')}\n"])
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return FileChange(resource=resource, path=path, kind=kind, note="binary")
        if "\0" in text:
            return FileChange(resource=resource, path=path, kind=kind, note="binary")
        texts.append(_lines(text))
    if len(texts[0]) + len(texts[1]) > _LINES_LIMIT:
        return FileChange(
            resource=resource, path=path, kind=kind, note=f"over {_LINES_LIMIT:,} lines: no diff"
        )
    a = "/dev/null" if old is None else f"a/{path}"
    b = "/dev/null" if new is None else f"b/{path}"
    lines = list(difflib.unified_diff(texts[0], texts[1], a, b))
    diff = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    return FileChange(resource=resource, path=path, kind=kind, diff=diff)


def _lines(text: str) -> list[str]:
    """``text``'s lines as ``diff`` and ``git`` count them: ended by ``\n`` alone (a form
    feed or a lone carriage return is part of its line)."""
    lines = [line + "\n" for line in text.split("\n")]
    if text.endswith("\n") or not text:
        lines.pop()
    else:
        lines[-1] = lines[-1][:-1]
    return lines


def _changes(
    events: Sequence[Event], store: ContentStore | None, status: str, *, diffs: bool = True
) -> tuple[tuple[FileChange, ...] | None, str]:
    last = next((e for e in reversed(events) if isinstance(e, ArtifactValidationStarted)), None)
    if last is None:
        return None, "no round ran yet: nothing was changed"
    if store is None or not store.keeps_copies:
        return None, "the change is not kept: the plan's content store is in memory"
    if not last.bases or not last.inputs:
        return None, "the change is not recorded for this plan (its log predates it)"
    found: list[FileChange] = []
    from gategraph.runtime._storage._store import StoreError

    try:
        for resource in sorted(last.inputs):
            base, after = last.bases.get(resource), last.inputs[resource]
            if base is None or after.startswith("changes:"):
                continue  # a resource of its own kind: the store holds no copy of it
            found.extend(changes_between(store, resource, base, after, diffs=diffs))
    except StoreError as exc:
        return None, f"the change cannot be read from the store: {exc}"
    what = {
        "applied": "what Apply committed",
        "failed": "what the last round validated (nothing was applied)",
    }.get(status, "what Apply would commit")
    return tuple(found), f"round {last.round}: {what}"


def plan_view(
    log_path: str | Path,
    plan_id: str,
    *,
    catalog: Catalog | None = None,
    store: ContentStore | None = None,
    diffs: bool = True,
    events: Sequence[Event] | None = None,
) -> PlanView | None:
    """The view of plan ``plan_id`` of the event log at ``log_path`` (a SQLite file or a
    PostgreSQL URL; None when the log has no such plan). ``catalog`` names its acceptance
    criteria (the roster the plan registered); ``store`` holds its rounds' files (default:
    the store beside the log, or in its database). Without ``diffs`` the changed files are
    listed, their diffs not worked out; ``events`` are the plan's, when the caller has read
    them already."""
    from gategraph.runtime._storage._database import events_at, log_exists
    from gategraph.runtime._storage._postgres import is_postgres_url
    from gategraph.runtime._storage._store import ContentStore

    from ._plan_views import held_lease, summarize

    if events is None:
        events = events_at(log_path, plan_id) if log_exists(log_path) else []
    summary = summarize(plan_id, events, running=held_lease(log_path, plan_id))
    if summary is None:
        return None
    if store is None:
        in_database = is_postgres_url(log_path)
        beside = ContentStore(log_path if in_database else Path(log_path).with_name("store"))
        try:
            return plan_view(
                log_path, plan_id, catalog=catalog, store=beside, diffs=diffs, events=events
            )
        finally:
            beside.close()
    verdict = next(
        (
            e.verdict
            for e in reversed(events)
            if isinstance(e, ArtifactValidated | ArtifactRejected | ApprovalRequired) and e.verdict
        ),
        None,
    )
    roster = catalog.roster(plan_id) if catalog is not None else None
    changes, note = _changes(events, store, summary.status, diffs=diffs)
    return PlanView(
        summary=summary,
        verdict=verdict,
        criteria=_criteria(verdict, roster),
        ladder=_ladder(events),
        rounds=_rounds(events),
        statistics=statistics_of(events),
        changes=changes,
        changes_note=note,
    )
