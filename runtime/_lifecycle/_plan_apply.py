"""Apply: commit every sandbox's changeset, atomically and at most once (seed 000).

Apply is never validated; it is reached only from a round that passed, and commits only
what that round's validations saw. A resource that refuses its changeset before any
other applied changes nothing and fails the plan; a crash during Apply is recovered by
each resource when the plan resumes, never applied twice. Once the log holds the apply,
the resources' own markers of it are released.
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
from gategraph.runtime._base._exceptions import ApplyConflictError, ApplyTwiceError
from gategraph.runtime._data._events import ApplyCompleted, ApplyStarted, PlanFinished
from gategraph.runtime._storage._store import StoreError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gategraph.runtime._storage._resources import Resource

    from ._plan import PlanContext

__all__ = ["PlanApply"]


class PlanApply:
    """Apply for the plan of ``context``, on its real ``resources``."""

    def __init__(self, context: PlanContext, resources: Mapping[str, Resource]) -> None:
        self.context = context
        self.resources = resources

    async def apply(self, validated: dict[str, str] | None) -> tuple[bool, str, dict[str, str]]:
        """Apply the round that passed, whose validations saw the sandboxes ``validated``
        (their manifest digests): whether it applied, the message the plan finishes with,
        and what changed, by resource."""
        journal = self.context.journal
        ahead = journal.peek()
        if isinstance(ahead, PlanFinished) and journal.recorded_ahead:
            # Refused then, before Apply began (a refusal always fails the plan: a log that
            # says otherwise does not match, and the resume stops there).
            return False, ahead.message, {}
        refusal = None if journal.recorded_ahead else await self.refusal(validated)
        if refusal is not None:
            return False, refusal, {}
        names = sorted(self.resources)
        await journal.emit(ApplyStarted, resources=names)
        recorded = journal.take("apply_completed")
        refused = journal.peek() if recorded is None else None
        if isinstance(refused, PlanFinished) and journal.recorded_ahead:
            # A resource refused its changeset once Apply had begun, changing nothing.
            return False, refused.message, {}
        if recorded is not None:
            changes = dict(recorded.changes)
        else:
            await journal.go_live()
            try:
                changes = await self._commit(names, interrupted=isinstance(ahead, ApplyStarted))
            except _Refused as refused_now:
                # The real resource changed since the sandbox was taken (or the changeset
                # cannot apply): it refused, changing nothing, before any resource applied.
                return False, f"not applied: {refused_now.error}", {}
            await journal.emit(ApplyCompleted, changes=changes)
        if not journal.offline:  # a replay's resources are stand-ins: it touches none
            await self._release(names)
        return True, "applied", changes

    async def refusal(self, validated: dict[str, str] | None) -> str | None:
        """Why the round that passed must not be applied, or None: the plan was withdrawn,
        or its sandboxes changed while they were validated (a write after the artifact was
        handed over). Invariant: only what the validations saw is applied."""
        context = self.context
        if context.withdrawal is not None:
            return f"withdrawn before Apply: {context.withdrawal}"
        if validated is None or context.journal.offline:
            return None  # nothing recorded to compare with (a replay has no sandboxes)
        await context.boxes.ensure()  # resuming, Apply may be the first live step
        now = await context.boxes.inputs(pin=False)
        if now != validated:
            return (
                "the sandboxes changed while they were being validated (written after the "
                f"work was handed over{self._written(validated, now or {})}): nothing applied"
            )
        return None

    def _written(self, validated: Mapping[str, str], now: Mapping[str, str]) -> str:
        """What changed after the hand-over, and who could have changed it: the files of
        each resource whose manifests the store holds, and the validations given it."""
        store = self.context.boxes.store
        graph = self.context.graph
        parts = []
        for name in sorted(set(validated) | set(now)):
            if validated.get(name) == now.get(name):
                continue
            files: list[str] = []
            try:
                before = {e.path: (e.kind, e.sha256) for e in store.manifest(validated[name])}
                after = {e.path: (e.kind, e.sha256) for e in store.manifest(now[name])}
                files = sorted(
                    p for p in before.keys() | after.keys() if before.get(p) != after.get(p)
                )
            except (KeyError, StoreError):
                pass  # an in-memory store keeps no manifests: the resource is all it says
            shown = ", ".join(f"{name}/{path}" for path in files[:5])
            if len(files) > 5:
                shown += f" and {len(files) - 5} more"
            given = sorted(
                node.id
                for node in graph.nodes
                if node.kind == "validation" and (node.resources is None or name in node.resources)
            )
            parts.append(
                (shown or f"resource {name!r}")
                + (f" (the validations given it: {', '.join(given)})" if given else "")
            )
        return ": " + "; ".join(parts) if parts else ""

    async def _commit(self, names: Sequence[str], *, interrupted: bool) -> dict[str, str]:
        """Apply each resource's changeset; ``interrupted``: a crash during an earlier
        Apply (its log holds ``apply_started``), which each resource recovers first."""
        context = self.context
        plan_id = context.plan_id
        changes: dict[str, str] = {}
        resumed = context.journal.resumed
        if resumed:
            # A crash during Apply: each resource finishes (or drops) its own interrupted
            # apply; one that passed its point of no return is done, never applied again.
            for name in names:
                recover = functools.partial(self.resources[name].recover, plan_id=plan_id)
                await anyio.to_thread.run_sync(recover)
        await context.boxes.ensure()
        for name in names:
            sandbox = context.boxes.held[name]
            resource = self.resources[name]
            changeset = await anyio.to_thread.run_sync(sandbox.changeset)
            if resumed and await anyio.to_thread.run_sync(resource.applied, plan_id):
                changes[name] = changeset.summary()
                continue
            # Applied even when empty: the resource then records the plan as applied, so
            # Apply stays at most once.
            try:
                await anyio.to_thread.run_sync(
                    functools.partial(resource.apply, sandbox, changeset, plan_id=plan_id)
                )
            except ApplyConflictError as exc:
                if changes or interrupted or isinstance(exc, ApplyTwiceError):
                    raise  # another resource applied already: resume recovers, never half
                raise _Refused(exc) from exc
            changes[name] = changeset.summary()
        return changes

    async def _release(self, names: Sequence[str]) -> None:
        """The log holds the apply now: let the resources' own markers of it go."""
        plan_id = self.context.plan_id
        for name in names:
            release = getattr(self.resources[name], "release", None)
            if release is None:
                continue
            try:
                await anyio.to_thread.run_sync(functools.partial(release, plan_id=plan_id))
            except ApplyConflictError as kept:
                # Applied all the same: the markers stay (they keep the plan from being
                # applied twice), and the next resume of the plan removes them.
                warnings.warn(f"plan {plan_id}: applied, but {kept}", RuntimeWarning, stacklevel=1)


class _Refused(Exception):
    """The first resource refused its changeset (:class:`ApplyConflictError`): nothing was
    applied anywhere."""

    def __init__(self, error: ApplyConflictError) -> None:
        super().__init__(str(error))
        self.error = error
