"""What users plug into the supervisor: strategy and execution actors, escalation handlers.

Each is a small protocol; ``gategraph.runtime.testing`` has scripted implementations, and
the defaults (:class:`GraphStrategy`, :class:`GraphExecutor`) run the plan graph itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

__all__ = [
    "Applicable",
    "EscalationDecision",
    "EscalationHandler",
    "EscalationRequest",
    "Escalator",
    "ExecuteRequest",
    "ExecutionActor",
    "FixRequest",
    "RoundSummary",
    "Strategy",
    "StrategyActor",
    "StrategyRequest",
    "ValidatorRequest",
]


class Applicable(msgspec.Struct, kw_only=True, frozen=True):
    """A validation that applies to the plan: a graph node or a catalog attachment."""

    id: str
    """The node id, or ``attachment:ULID``."""
    validation: str
    mode: str
    """``required`` or ``informational``."""
    attachment_id: str | None = None
    criteria: tuple[str, ...] = ()
    """The acceptance criteria it is bound to."""


class RoundSummary(msgspec.Struct, kw_only=True, frozen=True):
    """One validation round, as strategy and execution actors see the history."""

    revision: int
    attempt: int
    passed: bool
    failures: tuple[str, ...] = ()
    """``node: message`` for each required validation that did not pass."""


class StrategyRequest(msgspec.Struct, kw_only=True):
    """Asks the strategy actor for a strategy (seed 000: Strategize is not validated, but
    the strategy actor knows which validations apply)."""

    plan_id: str
    graph: Any
    """The :class:`PlanGraph`."""
    applicable: tuple[Applicable, ...]
    revision: int
    """0 for the first strategy, then 1, 2, ... for each revision."""
    history: tuple[RoundSummary, ...] = ()
    """The rounds of earlier strategies, for a revision."""


class Strategy(msgspec.Struct, kw_only=True):
    """What the strategy actor decided; passed on to the execution actor."""

    summary: str = ""
    data: dict[str, Any] = msgspec.field(default_factory=dict)


class ExecuteRequest(msgspec.Struct, kw_only=True):
    """Asks the execution actor to do the work, on sandboxed resources."""

    plan_id: str
    graph: Any
    strategy: Strategy
    resources: Mapping[str, Any]
    """The sandboxes' views by resource name: a folder ``Path`` or a mutable mapping."""
    attempt: int
    revision: int
    journal: Any = None
    """The plan's :class:`PlanJournal`: log the work's own runs into the plan's sequence
    (``execute_graph(..., **journal.engine_arguments())``, then ``journal.advance(run)``).
    Optional; a resumed plan never asks again for work the log shows finished."""
    skills: Any = None
    """The plan's skills as :class:`SkillTools` over these sandboxes: ``await
    request.skills.call("python_syntax")`` runs a skill's validation (or tool) on them now
    and returns its result, as a self-check. Never part of the verdict: only the plan's
    validation nodes and attached validations gate it."""


class FixRequest(ExecuteRequest, kw_only=True):
    """Asks the execution actor to fix a rejected artifact (seed 000: self-fix attempt)."""

    artifact: Any
    """The artifact that was rejected."""
    rejection: dict[str, Any]
    """The seed 003 rejection envelope: findings per acceptance criterion."""
    failures: tuple[dict[str, Any], ...]
    """Each failing required validation: node, validation, message, data."""
    note: str | None = None
    """A person's note, when the retry came from an escalation decision."""
    fix: int = 1
    """1 for the first fix of the current strategy, then 2, 3 ... (a revised strategy
    starts over): a deterministic actor keys its steps on it, so a resumed plan gets the
    same fix again."""


@runtime_checkable
class StrategyActor(Protocol):
    """Produces a strategy for a plan, and revisions of it."""

    async def strategize(self, request: StrategyRequest) -> Strategy:
        """Return the strategy for this revision."""
        ...


@runtime_checkable
class ExecutionActor(Protocol):
    """Does the plan's work on sandboxed resources and fixes rejected artifacts."""

    async def execute(self, request: ExecuteRequest) -> Any:
        """Do the work; return the artifact (JSON-compatible) to be validated."""
        ...

    async def fix(self, request: FixRequest) -> Any:
        """Fix the rejected artifact (the sandbox keeps the earlier work); return the new one."""
        ...


class EscalationRequest(msgspec.Struct, kw_only=True):
    """A plan that needs a person: its retries and revisions are spent, or a fault is
    permanent (seed 000, Required Validation Failure Handling, step 6) — answer ``retry``
    or ``abort``; or the approval layer needs a person (seed 002 §8, ``reason="approval"``)
    — answer ``approve`` or ``deny``."""

    plan_id: str
    reason: Literal["exhausted", "permanent", "approval"]
    message: str
    verdict: dict[str, Any] | None
    history: tuple[RoundSummary, ...]
    tier: str | None = None
    """The approval tier, for an approval."""


class ValidatorRequest(msgspec.Struct, kw_only=True):
    """Asks a validator, spawned new for this pass, to check every acceptance criterion of
    a plan's candidate (seed 003): answer with one envelope, an attestation (every finding
    ``pass``) or a rejection, naming criteria by their ``id``."""

    plan_id: str
    validator_id: str
    """The id to sign the envelope with (``validator-...``)."""
    graph: Any
    """The plan's :class:`PlanGraph`."""
    criteria: tuple[Any, ...]
    """The plan's acceptance criteria (:class:`PlanCriterion`), in order."""
    resources: dict[str, Any]
    """The candidate, by resource: a folder (a copy of it, unless the spawn asked for none)
    or a memory resource's texts. Read it only: a validator that writes to the plan's own
    sandboxes (a spawn without a copy) gives no verdict."""
    changed: dict[str, frozenset[str]] = msgspec.field(default_factory=dict)
    """The files the plan's change added or modified, by folder resource (what the plan's
    own round told its validations: ``context.changed``); a folder left out is judged
    whole."""
    artifact: Any = None
    """What the plan's work handed over."""
    applicable: tuple[Applicable, ...] = ()
    """The validations that apply to the plan."""
    catalog: Any = None
    """The catalog the plan ran with (its attached validations), or None."""


class EscalationDecision(msgspec.Struct, kw_only=True, frozen=True):
    """A person's answer: to an escalation, try again (with a fresh budget) or give up; to
    an approval, approve or deny."""

    action: Literal["retry", "abort", "approve", "deny"]
    note: str | None = None

    @property
    def for_approval(self) -> bool:
        """Whether this answers an approval (``approve`` / ``deny``)."""
        return self.action in ("approve", "deny")

    @property
    def answers(self) -> str:
        """The status of the pause it answers: ``awaiting_approval`` or
        ``awaiting_decision``."""
        return "awaiting_approval" if self.for_approval else "awaiting_decision"

    def not_awaited(self, plan_id: str, state: str) -> str:
        """Why plan ``plan_id``, being ``state``, takes no such answer."""
        what = "an approval" if self.for_approval else "a decision"
        return f"plan {plan_id} is not waiting for {what}: it is {state}"


EscalationHandler = Callable[[EscalationRequest], Awaitable[EscalationDecision]]
"""An async callable deciding escalations and approvals; without one the plan pauses
(``awaiting_decision`` / ``awaiting_approval``) for ``gategraph decide`` / ``approve``."""


@runtime_checkable
class Escalator(Protocol):
    """An escalation handler as an object: one that keeps state between questions (a
    chat session, a ticket queue) has the answer in a method."""

    async def escalate(self, request: EscalationRequest) -> EscalationDecision:
        """Answer an escalation (``retry`` / ``abort``) or an approval (``approve`` /
        ``deny``)."""
        ...
