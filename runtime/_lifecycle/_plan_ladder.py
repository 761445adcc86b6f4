"""The failure ladder of a plan (seed 000): what a rejected round leads to.

A required failure goes back to be fixed and revalidated on one shared Max-N budget
(seed 003; an infrastructure fault re-runs the validations it failed, after a backoff),
then to a revised strategy, then to a person, then to terminal failure. Each round's
decision is one audit line (written before the event that says so) and one
``retry_decided`` event. A person's answers (to an escalation or an approval) come from
the log when it holds them, from the decision a resume was given, or from the escalation
handler; with nobody to ask, the plan pauses.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from gategraph.runtime._base._exceptions import RuntimeFault
from gategraph.runtime._base._protocols import EscalationDecision, EscalationRequest
from gategraph.runtime._base._spans import current_span
from gategraph.runtime._data._events import (
    ApprovalDecided,
    EscalationDecided,
    EscalationRequested,
    PlanFinished,
    RetryDecided,
    StrategyRevisionRequested,
)
from gategraph.runtime._data._maxn import (
    MaxNPolicy,
    RetryBudget,
    RetryDecision,
    decide_attempt,
    wait_backoff,
)
from gategraph.runtime._running._journal import event_tag
from gategraph.runtime._running._pipeline import Rejected, round_faults

from ._plan import PlanStatus

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from gategraph.runtime._base._protocols import RoundSummary
    from gategraph.runtime._data._maxn import Attempt, AuditRecorder, FaultKind
    from gategraph.runtime._running._pipeline import ValidationOutcome

    from ._plan import PlanContext

__all__ = ["FailureLadder", "failure_text"]


def failure_text(outcome: ValidationOutcome) -> str:
    """A rejected round's reasons on one line (at most 500 characters), else ``""``."""
    if isinstance(outcome, Rejected):
        return "; ".join(str(r) for r in outcome.reasons)[:500]
    return ""


class FailureLadder:
    """The rungs above a rejected round of the plan of ``context``.

    ``audit`` keeps the seed 003 audit lines; ``escalation`` asks a person (None: nobody
    can be asked, and the plan pauses); ``decision`` is a person's answer given to a resume,
    used at the pause it answers; ``sleep`` waits out a retry's backoff.
    """

    def __init__(
        self,
        context: PlanContext,
        *,
        audit: AuditRecorder,
        escalation: Callable[[EscalationRequest], Awaitable[EscalationDecision]] | None,
        decision: EscalationDecision | None = None,
        sleep: Callable[[float], Awaitable[Any]] = anyio.sleep,
    ) -> None:
        self.context = context
        self.audit = audit
        self.escalation = escalation
        self.decision = decision
        """A person's answer given to a resume, until the pause it answers is reached."""
        self.sleep = sleep
        self.budget = RetryBudget(MaxNPolicy(limit=context.graph.policy.retry_limit))
        """The one budget that fixes and validator retries share (seed 003)."""
        self.attempts: list[dict[str, Any]] = []
        """One seed 003 audit line per round, as written."""
        self._audit_lines: set[tuple[int, RetryDecision]] | None = None

    # -- the budget ------------------------------------------------------------------------

    async def decide(self, outcome: Rejected) -> tuple[RetryDecision, FaultKind]:
        """Max-N (seed 003): what the rejected round leads to, on one shared budget across
        rejections and infrastructure faults; audited and logged."""
        context = self.context
        faults = round_faults(outcome)
        decision, fault, attempt = decide_attempt(
            self.budget, context.plan_id, context.round, faults, failure_text(outcome)
        )
        assert fault is not None  # Invariant: a rejected round has a fault (round_faults).
        await self._keep(attempt)
        await context.journal.emit(
            RetryDecided,
            round=context.round,
            attempt=context.attempt,
            fault_kind=fault.kind,
            classification=fault.classification.value,
            decision=decision.value,
            budget_used=self.budget.used,
            budget_limit=self.budget.limit,
        )
        return decision, fault

    async def attest(self) -> None:
        """Record a round that passed (its audit line)."""
        _, _, attempt = decide_attempt(self.budget, self.context.plan_id, self.context.round, [])
        await self._keep(attempt)

    async def _keep(self, attempt: Attempt) -> None:
        """One seed 003 audit line per round (the file write blocks: a worker thread)."""
        journal = self.context.journal
        if not (journal.recorded_ahead or journal.offline) and not await self._audited(attempt):
            await anyio.to_thread.run_sync(self.audit.record, attempt)
        self.attempts.append(attempt.to_audit())

    async def _audited(self, attempt: Attempt) -> bool:
        """Whether an earlier run wrote this round's line before it died (resuming only:
        the line is written before the event that follows it, so a crash between leaves
        the line and not the event)."""
        if not self.context.journal.resumed:
            return False
        if self._audit_lines is None:
            found = await anyio.to_thread.run_sync(self.audit.read, self.context.plan_id)
            self._audit_lines = {(a.attempt, a.decision) for a in found}
        return (attempt.attempt, attempt.decision) in self._audit_lines

    async def wait(self, fault: FaultKind) -> None:
        """Wait out a validator retry's backoff (not again for a retry the log holds: it
        waited then)."""
        self.context.stats.validator_retries += 1
        if not self.context.journal.recorded_ahead:
            await wait_backoff(fault, self.budget.used_by(fault.kind), sleep=self.sleep)

    # -- the rungs above the budget --------------------------------------------------------

    async def revise(self, decision: RetryDecision, outcome: Rejected) -> bool:
        """Ask for a revised strategy when the budget is spent and the graph allows one
        more revision (the budget starts again); False when this rung is passed."""
        context = self.context
        if (
            decision is not RetryDecision.ESCALATE_EXHAUSTED
            or context.revision >= context.graph.policy.strategy_revisions
        ):
            return False
        context.revision += 1
        context.stats.revisions += 1
        await context.journal.emit(
            StrategyRevisionRequested,
            revision=context.revision,
            reason=f"{self.budget.used} attempts spent: {failure_text(outcome)}",
        )
        self.budget.reset()
        return True

    async def escalate(
        self,
        decision: RetryDecision,
        outcome: Rejected,
        *,
        verdict: dict[str, Any] | None,
        history: Sequence[RoundSummary],
    ) -> EscalationDecision | None:
        """Ask a person about a plan the budget and revisions could not fix: their answer,
        or None (the plan pauses). A ``retry`` starts the budget again."""
        reason = "permanent" if decision is RetryDecision.ESCALATE_PERMANENT else "exhausted"
        message = failure_text(outcome)
        self.context.stats.escalations += 1
        await self.context.journal.emit(EscalationRequested, reason=reason, message=message)
        answer = await self.ask(
            EscalationRequest(
                plan_id=self.context.plan_id,
                reason=reason,  # type: ignore[arg-type]
                message=message,
                verdict=verdict,
                history=tuple(history),
            )
        )
        if answer is not None and answer.action == "retry":
            self.budget.reset()
        return answer

    # -- a person ----------------------------------------------------------------------------

    async def ask(
        self, request: EscalationRequest, asked_at: float = 0.0
    ) -> EscalationDecision | None:
        """A person's answer to an escalation or an approval: from the log (resuming), from
        the decision given to the resume, or from the escalation handler; None when there
        is nobody to ask, and the plan pauses."""
        context = self.context
        approval = request.reason == "approval"
        tag = "approval_decided" if approval else "escalation_decided"
        pause = (PlanStatus.AWAITING_APPROVAL if approval else PlanStatus.AWAITING_DECISION).value
        journal = context.journal
        recorded = journal.take(tag)
        if recorded is None:
            ahead = journal.peek()
            if isinstance(ahead, PlanFinished) and ahead.status == pause:
                after = journal.peek_after()
                if after is not None and event_tag(after) == tag:
                    journal.take("plan_finished")  # the pause, answered by a later run
                    recorded = journal.take(tag)
                elif after is None and self.decision is not None:
                    journal.take("plan_finished")
                else:
                    return None  # still paused: the pause is the log's next step
        if recorded is not None:
            if isinstance(recorded, ApprovalDecided):
                context.stats.approval_wait_seconds += recorded.waited
                return EscalationDecision(
                    action="approve" if recorded.approved else "deny", note=recorded.note
                )
            if recorded.action not in ("retry", "abort"):
                journal.differs(
                    recorded, "action 'retry' or 'abort'", f"action {recorded.action!r}"
                )
                return EscalationDecision(action="abort", note=recorded.note)
            return EscalationDecision(action=recorded.action, note=recorded.note)
        answer: EscalationDecision
        if self.decision is not None and self.decision.for_approval == approval:
            answer, self.decision = self.decision, None
            await journal.go_live()
        elif self.escalation is not None:
            await journal.go_live()
            with current_span(
                context.log, context.plan_id, "approval" if approval else "escalation"
            ):
                answer = await self.escalation(request)
            if not isinstance(answer, EscalationDecision) or answer.for_approval != approval:
                wanted = "'approve' or 'deny'" if approval else "'retry' or 'abort'"
                raise RuntimeFault(
                    f"the escalation handler answered {answer!r} to "
                    f"{'an approval' if approval else 'an escalation'}; expected {wanted}"
                )
        else:
            return None
        if approval:
            waited = max(0.0, time.time() - asked_at)
            context.stats.approval_wait_seconds += waited
            await journal.emit(
                ApprovalDecided,
                approved=answer.action == "approve",
                note=answer.note,
                waited=waited,
            )
        else:
            await journal.emit(EscalationDecided, action=answer.action, note=answer.note)
        return answer
