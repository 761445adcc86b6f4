"""Re-run a plan's rounds on their recorded inputs: the second replay mode (seed 002 §13).

The default replay (:func:`~.._views._replay.replay_plan`) runs nothing. This one rebuilds chosen
rounds exactly — every sandbox as the round's validations saw it, from the content store
beside the event log (the manifest digests each ``artifact_validation_started`` records),
the artifact the round validated, the same validation nodes — runs those validations again,
and reports each one whose outcome now differs from the recorded one. The recorded outcome
stays the one that decided: nothing is appended to the plan's log, nothing is applied.

A validation that passes on the same inputs where it failed (or fails where it passed) is
*flaky* (seed 000, Risks): given a catalog, each one found is counted in it.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import CatalogError, ConfigError
from gategraph.runtime._calls._context import EARLIER
from gategraph.runtime._data._events import (
    ArtifactValidationStarted,
    ConfirmationStarted,
    Event,
    NodeCompleted,
    PlanStarted,
    ValidationCompleted,
    WorkFinished,
)
from gategraph.runtime._running._journal import event_tag
from gategraph.runtime._storage._eventlog import MemoryEventLog

if TYPE_CHECKING:
    from gategraph.runtime._data._results import ValidationResult
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._storage._store import ContentStore

__all__ = ["RerunDifference", "RerunReport", "rerun_rounds"]

_ROUND_ENDS = frozenset({"artifact_rejected", "artifact_validated", "approval_required"})


class RerunDifference(msgspec.Struct, kw_only=True, frozen=True):
    """One validation whose outcome on a round's recorded inputs is not the recorded one."""

    round: int
    node: str
    validation: str
    recorded: str
    """``passed``, ``failed`` or ``error <kind>``: what the round recorded (and decided on)."""
    now: str
    """The same, for the re-run."""
    flaky: bool
    """Passed one time and failed the other (an error on either side is not a flake: it
    is the call that failed, not the check)."""


class RerunReport(msgspec.Struct, kw_only=True):
    """What re-running a plan's rounds found."""

    plan_id: str
    rounds: list[int] = msgspec.field(default_factory=list)
    """The rounds re-run."""
    validations: int = 0
    """Validation calls made."""
    differences: list[RerunDifference] = msgspec.field(default_factory=list)
    skipped: list[str] = msgspec.field(default_factory=list)
    """Rounds that could not be rebuilt, and why: one line each."""

    @property
    def matches(self) -> bool:
        """True when every re-run validation gave its recorded outcome."""
        return not self.differences

    @property
    def flaky(self) -> list[str]:
        """The validations found flaky, by name."""
        return sorted({d.validation for d in self.differences if d.flaky})


def outcome_text(result: ValidationResult) -> str:
    """``passed``, ``failed`` or ``error <kind>``: how a result compares across runs."""
    if result.passed:
        return "passed"
    error = result.data.get("error") if isinstance(result.data, Mapping) else None
    return f"error {error}" if error else "failed"


class _Round(msgspec.Struct, kw_only=True):
    number: int
    inputs: dict[str, str] | None
    bases: dict[str, str] | None
    work: WorkFinished | None
    results: dict[str, ValidationCompleted]
    outputs: dict[str, Any]
    """What the round's other nodes (not validations) gave, by node."""
    confirming: bool = False


def _rounds(events: Sequence[Event]) -> list[_Round]:
    """Each round of the log: its inputs, the work it validated, its validations' results."""
    found: list[_Round] = []
    work: WorkFinished | None = None
    current: _Round | None = None
    for event in sorted(events, key=lambda e: e.seq):
        if isinstance(event, WorkFinished):
            work = event
        elif isinstance(event, ArtifactValidationStarted):
            current = _Round(
                number=event.round,
                inputs=event.inputs,
                bases=event.bases,
                work=work,
                results={},
                outputs={},
            )
            found.append(current)
        elif event_tag(event) in _ROUND_ENDS:
            current = None
        elif current is None or current.confirming:
            continue
        elif isinstance(event, ConfirmationStarted):
            current.confirming = True  # the calls after it confirm; the round's are before
        elif isinstance(event, ValidationCompleted):
            current.results.setdefault(event.node, event)
        elif isinstance(event, NodeCompleted) and event.ok:
            current.outputs[event.node] = event.output
    return found


def _given(graph: PlanGraph, artifact: Any) -> dict[str, Any]:
    from ._plan_round import given_outputs

    return given_outputs(graph.work_phase(), artifact)


async def rerun_rounds(
    events: Sequence[Event],
    graph: PlanGraph,
    *,
    store: ContentStore,
    rounds: Collection[int] | None = None,
    catalog: Catalog | None = None,
) -> RerunReport:
    """Run the validations of the plan's ``rounds`` (default: every round) again on their
    recorded inputs and report where an outcome differs from the recorded one.

    ``events`` are the plan's events, ``graph`` and ``catalog`` those it ran with, ``store``
    the content store its rounds' inputs were kept in. A round is skipped, with the reason
    in :attr:`RerunReport.skipped`, when its inputs were not kept (or no longer are), when it
    validated no artifact (the work failed), or when none of its validations ran. Each
    flaky validation found is counted in ``catalog`` when one is given.
    """
    from gategraph.runtime._running._engine import execute_graph
    from gategraph.runtime._storage._store import StoreError

    from ._plan_sandboxes import changed_files

    if not events:
        raise ValueError("no events to re-run")
    started = next((e for e in events if isinstance(e, PlanStarted)), events[0])
    report = RerunReport(plan_id=started.plan_id)
    wanted = set(rounds) if rounds is not None else None
    recorded = _rounds(events)
    if wanted is not None:
        unknown = sorted(wanted - {r.number for r in recorded})
        if unknown:
            raise ValueError(
                f"plan {started.plan_id} has no round {', '.join(map(str, unknown))} "
                f"(it has {len(recorded)})"
            )
    # What each validation found in the rounds before (`context.earlier`), as they had it.
    earlier: dict[str, dict[str, Any]] = {}
    for current in recorded:
        before = dict(earlier)
        earlier.update((node, r.result.data) for node, r in current.results.items())
        if wanted is not None and current.number not in wanted:
            continue
        why = _cannot_rebuild(current, graph, store)
        if why is not None:
            report.skipped.append(f"round {current.number}: {why}")
            continue
        assert current.inputs is not None and current.work is not None
        with tempfile.TemporaryDirectory(prefix="gategraph-rerun-") as scratch:
            try:
                views = await anyio.to_thread.run_sync(
                    _rebuild, store, current.inputs, graph, Path(scratch)
                )
            except StoreError as exc:
                # Let go by the store's retention, most likely; the store says what it lacks.
                report.skipped.append(
                    f"round {current.number}: its inputs are no longer kept ({exc})"
                )
                continue
            artifact = current.work.artifact
            given = _given(graph, artifact) | {
                node: output
                for node, output in current.outputs.items()
                if node not in current.results
            }
            token = EARLIER.set(before)
            try:
                run = await execute_graph(
                    graph,
                    catalog=catalog,
                    resources=views,
                    select=list(current.results),
                    given=given,
                    artifact=artifact,
                    event_log=MemoryEventLog(),
                    plan_id=started.plan_id,
                    attempt=current.work.attempt,
                    # What the round's change touched, as the round had it: a check of
                    # the change judges the same files again.
                    changed=changed_files(
                        store,
                        [n for n, r in graph.resources.items() if r.kind == "directory"],
                        current.bases,
                        current.inputs,
                    ),
                )
            except (ConfigError, CatalogError) as exc:
                # The graph or the catalog no longer has what the round ran (a validation
                # removed, an attachment detached): that round cannot be run again as it was.
                report.skipped.append(f"round {current.number}: cannot be run again: {exc}")
                continue
            finally:
                EARLIER.reset(token)
        report.rounds.append(current.number)
        report.validations += len(run.validations)
        for record in run.validations:
            logged = current.results.get(record.node)
            if logged is None:
                continue
            then, now = outcome_text(logged.result), outcome_text(record.result)
            if then == now:
                continue
            flaky = "error" not in then and "error" not in now
            report.differences.append(
                RerunDifference(
                    round=current.number,
                    node=record.node,
                    validation=record.validation,
                    recorded=then,
                    now=now,
                    flaky=flaky,
                )
            )
            if flaky and catalog is not None:
                await anyio.to_thread.run_sync(
                    functools.partial(
                        catalog.record_flake,
                        record.validation,
                        plan_id=started.plan_id,
                        round=current.number,
                        node=record.node,
                        detail=f"{then}, then {now} on the same inputs (re-run)",
                    )
                )
    return report


def _cannot_rebuild(current: _Round, graph: PlanGraph, store: ContentStore) -> str | None:
    if current.inputs is None:
        return "its inputs were not kept (no sandbox was open, or the log predates them)"
    held = [name for name, digest in current.inputs.items() if digest.startswith("changes:")]
    if held:
        return f"resource {held[0]!r} is of a kind the content store cannot hold"
    if current.work is None or current.work.error is not None:
        return "it validated no artifact (the work failed)"
    if not current.results:
        return "none of its validations ran"
    missing = sorted(set(graph.resources) - set(current.inputs))
    if missing:
        return f"its inputs do not include resource {missing[0]!r}"
    folders = [
        n for n in current.inputs if n in graph.resources and graph.resources[n].kind != "memory"
    ]
    if not store.keeps_copies and folders:
        return (
            f"resource {folders[0]!r} is a folder, and an in-memory store keeps only its "
            "digest (run the plan with a file event log, or a store on disk, to re-run it)"
        )
    return None


def _rebuild(
    store: ContentStore, inputs: Mapping[str, str], graph: PlanGraph, scratch: Path
) -> dict[str, Any]:
    """Each resource's sandbox as the round saw it: a folder below ``scratch``, or texts."""
    views: dict[str, Any] = {}
    for name, digest in inputs.items():
        spec = graph.resources.get(name)
        if spec is not None and spec.kind == "memory":
            views[name] = store.texts(digest)
        else:
            folder = scratch / name
            store.restore(digest, folder)
            views[name] = folder
    return views
