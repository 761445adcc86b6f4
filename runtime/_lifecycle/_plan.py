"""What the parts of a plan's lifecycle share: where the plan is, and what it has cost.

The supervisor drives the lifecycle; the sandboxes (``_plan_sandboxes``), a validation
round's pipeline (``_plan_round``), the failure ladder (``_plan_ladder``) and Apply
(``_plan_apply``) each do one part of it on one :class:`PlanContext`, the way a
pydantic_graph node gets its run's context.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Self

import msgspec

if TYPE_CHECKING:
    from gategraph.runtime._base._protocols import Applicable
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._running._journal import PlanJournal
    from gategraph.runtime._storage._eventlog import EventLog

    from ._executors import Executor
    from ._plan_sandboxes import PlanSandboxes

from gategraph.runtime._base._statuses import PlanStatus

__all__ = ["PlanContext", "PlanStatistics", "PlanStatus", "WorkFailed"]


class PlanStatistics(msgspec.Struct, kw_only=True):
    """What a plan cost and what it ran into (seed 002 §16)."""

    rounds: int = 0
    """Validation rounds (pipeline runs)."""
    pipeline_completions: int = 0
    """Rounds that got through every layer."""
    semantic_invocations: int = 0
    """Validation calls made by the semantic layer."""
    layer_seconds: dict[str, float] = msgspec.field(default_factory=dict)
    """Time spent in each pipeline layer, summed over the rounds."""
    rejection_reasons: dict[str, int] = msgspec.field(default_factory=dict)
    """How often each layer (and fault kind) rejected."""
    approval_wait_seconds: float = 0.0
    fixes: int = 0
    validator_retries: int = 0
    revisions: int = 0
    escalations: int = 0
    flakes: dict[str, int] = msgspec.field(default_factory=dict)
    """Validations found flaky (failed, then passed on the same inputs), by name: how often."""


@dataclasses.dataclass(kw_only=True, slots=True)
class PlanContext:
    """One plan's shared state. ``journal`` is replaced when the plan resumes (or replays):
    every part reads it from here, never keeps its own."""

    plan_id: str
    graph: PlanGraph
    catalog: Catalog | None
    log: EventLog
    journal: PlanJournal
    boxes: PlanSandboxes
    executor: Executor
    applicable: list[Applicable]
    """The validations that apply to the plan (its graph's and the catalog's attached)."""
    work_phase: list[str]
    """The graph's nodes before any validation: the execution actor's part."""
    stats: PlanStatistics = dataclasses.field(default_factory=PlanStatistics)
    revision: int = 0
    """The strategy revision the plan is on."""
    attempt: int = 0
    """The work attempt the plan is on (its first Execute is 1; each fix adds one)."""
    round: int = 0
    """The validation round the plan is on (the first is 1)."""
    withdrawal: str | None = None
    """Why the plan was given up from outside, or None."""


class WorkFailed(str):
    """The execution actor raised: the pipeline's routing layer rejects its non-artifact.

    ``fault`` is the fault kind when the work cannot fix it (``misconfigured``,
    ``runtime_fault``); ``None`` sends it back to the execution actor as a fix.
    """

    fault: str | None

    def __new__(cls, text: str, fault: str | None = None) -> Self:
        failed = super().__new__(cls, text)
        failed.fault = fault
        return failed
