"""The coverage gate: a plan is applied only when every acceptance criterion is covered.

Seed 003's AC-coverage gate, before Apply. When a round passes, gategraph's own round
attests every criterion (its verdict did: one coverage binding each, validator
``validator-gategraph``). A plan whose policy asks for outside validators
(``policy.outside_validators``) then waits, durably, until that many other validators
attested every criterion with ``validator.attest`` after the round passed; resumed once
they have, it goes on to Apply. Only verdicts given with the validator's credential are
there to count (the validator tools refuse the others, and keep the refusal). A
rejection binds nothing; under the default ``policy.attestation`` (``no-rejection``) the
plan is not applied while one stands, whatever other validators attest.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from gategraph.runtime._data._events import AttestationRequired, AttestationsReceived, PlanFinished
from gategraph.runtime._data._verdicts import VALIDATOR_ID
from gategraph.runtime._running._journal import event_tag

from ._plan import PlanStatus

if TYPE_CHECKING:
    from gategraph.runtime._definitions._evidence import (
        Coverage,
        EvidenceStore,
        PlanRoster,
        Verdicts,
    )

    from ._plan import PlanContext

__all__ = ["CoverageGate"]

_PAUSE = PlanStatus.AWAITING_ATTESTATION.value


class CoverageGate:
    """The coverage gate of the plan of ``context``, on ``evidence``, for its ``roster``."""

    def __init__(self, context: PlanContext, evidence: EvidenceStore, roster: PlanRoster) -> None:
        self.context = context
        self.evidence = evidence
        self.roster = roster
        self.note = ""
        """Why a plan still waits, beyond what its log records (the standing rejections and
        the refused verdicts): shown to whoever resumes it, never logged, since it changes
        while the plan waits."""

    async def register(self) -> None:
        """Keep the plan's roster where validators pull it (a replay touches nothing)."""
        if not self.context.journal.offline:
            await anyio.to_thread.run_sync(self.evidence.register_roster, self.roster)

    async def check(self) -> tuple[PlanStatus, str] | None:
        """After a round passed: None when every criterion is covered (on to Apply), else
        how the plan ends for now — waiting for outside validators, or failed."""
        context = self.context
        journal = context.journal
        needed = context.graph.policy.outside_validators
        policy = context.graph.policy.attestation
        self.note = ""
        since = journal.last_at  # when the round passed: only what was attested since counts
        if not journal.offline:
            # The round that passed attested every criterion: gategraph's own attestation.
            bind = self.evidence.bind_coverage
            await anyio.to_thread.run_sync(bind, context.plan_id, VALIDATOR_ID)
        if needed == 0:
            if journal.offline:
                return None  # what was covered then is not recorded: Apply, as the log shows
            missing = self._uncovered(await self._coverage(since))
            if not missing:
                return None
            # Only a store that lost what the round wrote gets here.
            return PlanStatus.FAILED, (
                f"not applied: {len(missing)} acceptance criteria have no coverage binding "
                f"({', '.join(missing[:5])})"
            )
        if not len(self.roster):
            # seed 003: an empty roster is never attested; no validator could cover it.
            return PlanStatus.FAILED, (
                "not applied: the plan has no acceptance criteria, so no outside validator "
                "can attest it (policy.outside_validators)"
            )
        received = journal.take("attestations_received")
        if received is not None:
            return None  # attested then (resuming, or replaying): the log says by whom
        if not isinstance(journal.peek(), AttestationRequired):
            if await self._received(since, needed):
                return None
        await journal.emit(
            AttestationRequired,
            round=context.round,
            needed=needed,
            criteria=len(self.roster),
            policy=policy,
        )
        ahead = journal.peek()
        if isinstance(ahead, PlanFinished) and ahead.status == _PAUSE:
            after = journal.peek_after()
            if after is not None and event_tag(after) == "attestations_received":
                journal.take("plan_finished")  # the pause, and the attestations that ended it
                journal.take("attestations_received")
                return None
            if after is None and not journal.offline:
                if await self._received(since, needed, waited=True):
                    return None
        if not journal.offline:
            self.note = await self._why_waiting(since)
        who = "validator" if needed == 1 else "validators, each"
        return PlanStatus.AWAITING_ATTESTATION, (
            f"waiting for {needed} outside {who} to attest all {len(self.roster)} of its "
            "acceptance criteria"
        )

    async def _coverage(self, since: float) -> Coverage:
        coverage = functools.partial(self.evidence.coverage, self.context.plan_id, since=since)
        return await anyio.to_thread.run_sync(coverage)

    async def _verdicts(self, since: float) -> Verdicts:
        verdicts = functools.partial(self.evidence.verdicts, self.context.plan_id, since=since)
        return await anyio.to_thread.run_sync(verdicts)

    async def _why_waiting(self, since: float) -> str:
        """The standing rejections (when they hold the plan back) and the verdicts refused
        since the round passed, in one line; empty when there are none."""
        parts = []
        rejecting = (await self._verdicts(since)).rejecting
        if rejecting and self.context.graph.policy.attestation == "no-rejection":
            parts.append(
                f"not applied while a rejection stands: {', '.join(rejecting)} rejected it "
                "(until the same validator attests; policy.attestation: any-attests lets "
                "other validators' attestations outweigh it)"
            )
        refusals = functools.partial(self.evidence.refusals, self.context.plan_id, since=since)
        refused = await anyio.to_thread.run_sync(refusals)
        if refused:
            count = "1 verdict" if len(refused) == 1 else f"{len(refused)} verdicts"
            parts.append(f"{count} refused, the last: {refused[-1].reason}")
        return "; ".join(parts)

    async def _received(self, since: float, needed: int, *, waited: bool = False) -> bool:
        """Whether the outside validators cover the plan now; if they do, the attestations
        are recorded (after the pause they ended, when the plan ``waited`` for them)."""
        validators = await self._covering(since, needed)
        if validators is None:
            return False
        journal = self.context.journal
        if waited:
            journal.take("plan_finished")  # attested while the plan waited
        await journal.emit(
            AttestationsReceived,
            round=self.context.round,
            validators=validators,
            policy=self.context.graph.policy.attestation,
        )
        return True

    async def _covering(self, since: float, needed: int) -> list[str] | None:
        """The outside validators that each attested every criterion, sorted, when there
        are ``needed`` of them and — under ``policy.attestation: no-rejection`` — no
        rejection stands; else None. Partial attestations by several validators do not
        add up: each validator's verdict is about the whole plan. A validator whose latest
        verdict is a rejection has taken its attestation back."""
        verdicts = await self._verdicts(since)
        rejecting = set(verdicts.rejecting)
        if rejecting and self.context.graph.policy.attestation == "no-rejection":
            return None
        coverage = await self._coverage(since)
        whole: set[str] | None = None
        for ordinal in range(1, len(self.roster) + 1):
            covering = coverage.validators_of(self.roster.id_of(ordinal))
            whole = set(covering) if whole is None else whole & covering
            if not whole - {VALIDATOR_ID}:
                return None
        outside = sorted((whole or set()) - {VALIDATOR_ID} - rejecting)
        return outside if len(outside) >= needed else None

    def _uncovered(self, coverage: Coverage) -> list[str]:
        """The aliases of the criteria no validator covers."""
        if coverage.complete:
            return []  # one attestation covers all of them: no need to look at each
        return [
            f"AC{ordinal}"
            for ordinal in range(1, len(self.roster) + 1)
            if not coverage.validators_of(self.roster.id_of(ordinal))
        ]
