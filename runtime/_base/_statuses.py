"""Where a plan stands, by name: light enough for the command line to load at start-up
(its options list the statuses), with nothing else imported."""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["INTERRUPTED", "RUNNING", "STATUSES", "PlanStatus"]


class PlanStatus(enum.StrEnum):
    """Where a plan ended (or paused)."""

    APPLIED = "applied"
    FAILED = "failed"
    AWAITING_DECISION = "awaiting_decision"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_ATTESTATION = "awaiting_attestation"

    @property
    def waiting(self) -> bool:
        """Whether the plan is paused (for a person, or for outside validators): resumed,
        it goes on."""
        return self not in (PlanStatus.APPLIED, PlanStatus.FAILED)

    @property
    def for_a_person(self) -> bool:
        """Whether a person must answer before the plan goes on (``approve``, ``decide``)."""
        return self in (PlanStatus.AWAITING_DECISION, PlanStatus.AWAITING_APPROVAL)


RUNNING: Final = "running"
"""A plan that has not finished and whose lease is held: a supervisor runs it now."""
INTERRUPTED: Final = "interrupted"
"""A plan that has not finished and that nobody runs: its process died (resume it)."""
STATUSES: Final = (*(status.value for status in PlanStatus), RUNNING, INTERRUPTED)
"""Every status a plan of the log can have: how it ended or paused, or that it has not."""
