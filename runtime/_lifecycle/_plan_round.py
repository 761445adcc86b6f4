"""One validation round of a plan: routing → payload → semantic → approval (seed 002 §6).

The last step of Execute. The round records what it validates (a digest of each sandbox,
their content kept in the store), runs the four layers in their fixed order (the first
rejection ends the round, seed 002 §5.2) and keeps the round's records, node results and
verdict for the failure ladder, the next fix and Apply. Resuming, what the log holds of a
round is taken from it and only the rest runs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import CatalogError, ConfigError
from gategraph.runtime._base._protocols import EscalationRequest, RoundSummary
from gategraph.runtime._calls._context import EARLIER, STANDS_FOR
from gategraph.runtime._calls._invoke import prepare
from gategraph.runtime._data._events import (
    ApprovalRequired,
    ArtifactRejected,
    ArtifactValidated,
    ArtifactValidationStarted,
    ConfirmationStarted,
    NodeSkipped,
    ValidationCompleted,
)
from gategraph.runtime._data._maxn import FLAKY
from gategraph.runtime._data._results import ValidationResult
from gategraph.runtime._running._engine import (
    NodeResult,
    NodeStatus,
    ValidationRecord,
    execute_graph,
)
from gategraph.runtime._running._pipeline import (
    ATTACHMENT,
    LAYERS,
    NeedsApproval,
    Passed,
    Reason,
    Rejected,
    ValidationOutcome,
    check_approval,
    check_payload,
    logged_result,
    retry_only_nodes,
    semantic_outcome,
    uncallable_reason,
    with_descendants,
    work_failed_reason,
)

from ._plan import WorkFailed
from ._plan_reuse import RoundSeen, arguments_of, reusable_tools, same_read, tools_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from gategraph.runtime._base._protocols import EscalationDecision

    from ._plan import PlanContext

    # Asks a person (the request, asked at seconds since the epoch): their answer, or None
    # when there is nobody to ask and the plan pauses.
    Ask = Callable[[EscalationRequest, float], Awaitable[EscalationDecision | None]]

__all__ = ["RoundPipeline", "callable_problem", "given_outputs"]


def given_outputs(work: Sequence[str], artifact: Any) -> dict[str, Any]:
    """What the work phase's nodes ``work`` gave a round's validations: the artifact's
    entry for each node when it has one for every node, else the artifact itself."""
    if isinstance(artifact, Mapping) and work and set(work) <= set(artifact):
        return {node: artifact[node] for node in work}
    return dict.fromkeys(work, artifact)


def callable_problem(context: PlanContext, attached: bool, name: str) -> str | None:
    """Why validation (or tool) ``name`` cannot be called now (removed or broken since the
    plan started: a missing capability), or None."""
    graph = context.graph
    getter = context.catalog.get if attached and context.catalog else graph.get_tool
    # Code that only runs sandboxed is checked without being loaded here.
    runs: frozenset[str | None] = graph.isolations_of(name) or frozenset({None})
    isolation = context.executor.isolation if runs == {None} else None
    if runs == frozenset({"sandbox"}) or isolation == "sandbox":
        where: str | None = "sandbox"
    elif runs - {None, "sandbox"}:
        where = "thread"  # a node declared it trusted: loaded, as that node loads it
    else:
        where = isolation  # the run's, else where it runs by default
    try:
        prepare(
            getter(name),
            getter,
            isolation=where,  # type: ignore[arg-type]
            sandboxed=graph.policy.require_sandbox,
            tell=False,
        )
    except (ConfigError, CatalogError, KeyError) as exc:
        return str(exc)
    return None


class RoundPipeline:
    """The validation rounds of the plan of ``context``.

    ``ask`` asks a person for an approval; ``attest`` records a round that passed (its
    audit line, written before the event that says so); ``auto_approve`` lets every
    approval tier pass unasked.
    """

    def __init__(
        self,
        context: PlanContext,
        *,
        ask: Ask,
        attest: Callable[[], Awaitable[None]],
        auto_approve: bool = False,
    ) -> None:
        self.context = context
        self._ask = ask
        self._attest = attest
        self.auto_approve = auto_approve
        self.summaries: list[RoundSummary] = []
        """One summary per round, in order."""
        self.records: dict[str, ValidationRecord] = {}
        """The last round's validation records, by node (and attachment) id."""
        self.results: dict[str, NodeResult] = {}
        """Every node result of the last round, by id."""
        self.verdict: dict[str, Any] | None = None
        """The last semantic layer's seed 003 envelope."""
        self.outcome: ValidationOutcome | None = None
        """The last round's outcome."""
        self.validated: dict[str, str] | None = None
        """What the last round validated: each sandbox's manifest digest, by resource."""
        self.denied = False
        """Whether a person denied the last round's approval (the plan fails)."""
        self._retry_only: list[str] | None = None
        self._changed: dict[str, frozenset[str]] = {}
        # What each validation found the last time it ran, in an earlier round (its data):
        # `context.earlier` of its next call.
        self._earlier: dict[str, dict[str, Any]] = {}
        self._found: dict[str, dict[str, Any]] = {}
        # Each validation's last passing call: what its round read, its round, its record.
        # (and its arguments' JSON form then: code may change a node's mapping in place).
        self._passing: dict[str, tuple[RoundSeen, int, ValidationRecord, bytes | None]] = {}
        # What each node calls, where its result may be reused at all (None: never).
        self._tools: dict[str, tuple[str, ...] | None] = {}
        self._code_tools: frozenset[str] | None = None
        self._nodes = {node.id: node for node in context.graph.nodes}

    # -- the round -------------------------------------------------------------------------

    async def run(self, artifact: Any) -> ValidationOutcome:
        """One round on ``artifact``: its four layers, and the events that say how it went."""
        context = self.context
        journal, stats = context.journal, context.stats
        # What the round validates; Apply commits only that (see PlanApply.refusal).
        recorded = journal.peek()
        bases: dict[str, str] | None = None
        exclusions: dict[str, str] | None = None
        if isinstance(recorded, ArtifactValidationStarted):
            inputs = recorded.inputs  # what the round saw when it ran (resuming or replaying)
            bases, exclusions = recorded.bases, recorded.exclusions
        elif recorded is None and not journal.offline:
            await context.boxes.ensure()  # resuming, the round may be the first live step
            inputs = await context.boxes.inputs(pin=True)
            bases, exclusions = context.boxes.bases(), context.boxes.left_out()
        else:
            inputs = None  # the log holds something else here: the emit below says what
        if self._retry_only is not None and inputs != self.validated:
            # The sandboxes changed since the round this one re-runs part of: what the other
            # validations saw is not what is there now, so every validation runs again.
            self._retry_only = None
        self.validated = inputs
        # What the change touched, for validations that judge only that (`scope: change`).
        self._changed = (
            await anyio.to_thread.run_sync(context.boxes.changed, bases, inputs)
            if not journal.offline
            else {}
        )
        context.round += 1
        stats.rounds += 1
        await journal.emit(
            ArtifactValidationStarted,
            round=context.round,
            attempt=context.attempt,
            revision=context.revision,
            inputs=inputs,
            bases=bases,
            exclusions=exclusions,
        )
        layers = {
            "routing": self.routing,
            "payload": self.payload,
            "semantic": self.semantic,
            "approval": self.approval,
        }
        outcome: ValidationOutcome = Passed()
        seconds: dict[str, float] = {}
        for layer in LAYERS:  # seed 002 §5.2: a fixed order; the first rejection ends it
            began = time.perf_counter()
            outcome = journal.settle(layer, await layers[layer](artifact), artifact, context.round)
            seconds[layer] = round(time.perf_counter() - began, 6)
            stats.layer_seconds[layer] = stats.layer_seconds.get(layer, 0.0) + seconds[layer]
            if not isinstance(outcome, Passed):
                break
        self.summaries.append(
            RoundSummary(
                revision=context.revision,
                attempt=context.attempt,
                passed=isinstance(outcome, Passed),
                failures=tuple(str(r) for r in outcome.reasons)
                if isinstance(outcome, Rejected)
                else (),
            )
        )
        self.outcome = outcome
        if isinstance(outcome, Rejected):
            stats.rejection_reasons[outcome.layer] = (
                stats.rejection_reasons.get(outcome.layer, 0) + 1
            )
            await journal.emit(
                ArtifactRejected,
                round=context.round,
                layer=outcome.layer,
                reasons=[str(r) for r in outcome.reasons],
                # The semantic layer's verdict, also when a person denied it afterwards.
                verdict=self.verdict if outcome.layer in ("semantic", "approval") else None,
                seconds=seconds,
            )
        elif isinstance(outcome, Passed):
            stats.pipeline_completions += 1
            await self._attest()
            await journal.emit(
                ArtifactValidated, round=context.round, verdict=self.verdict or {}, seconds=seconds
            )
        return outcome

    def rerun_failed(self, outcome: Rejected) -> None:
        """Let the next round re-run only what an infrastructure fault failed in
        ``outcome`` (and every node after it); the rest of this round's outputs are given."""
        self._retry_only = retry_only_nodes(outcome)

    def failures(self) -> tuple[dict[str, Any], ...]:
        """The last round's blocking failures, as a fix request lists them."""
        return tuple(
            {
                "node": r.node,
                "validation": r.validation,
                "message": r.result.message,
                "data": r.result.data,
            }
            for r in self.records.values()
            if r.blocking
        )

    # -- the layers --------------------------------------------------------------------------

    async def routing(self, artifact: Any) -> ValidationOutcome:
        """The transition Execute → Apply needs an artifact, and every applicable validation
        callable (seed 002 §8: "required capabilities are available")."""
        context = self.context
        if isinstance(artifact, WorkFailed):
            return Rejected("routing", (work_failed_reason(str(artifact), artifact.fault),))
        if context.journal.offline:
            # Whether each validation could be prepared then is not recorded (preparing it
            # now would import its code): a replay takes such a rejection from the log.
            return Passed()
        reasons = []
        # Once per distinct validation, not per node: a fan-out of 100,000 nodes running one
        # validation prepares it once.
        problems: dict[tuple[bool, str], str | None] = {}
        for item in context.applicable:
            key = (item.attachment_id is not None, item.validation)
            if key not in problems:
                problems[key] = callable_problem(context, *key)
            problem = problems[key]
            if problem is not None:
                reasons.append(uncallable_reason(item.id, problem))
        return Rejected("routing", tuple(reasons)) if reasons else Passed()

    async def payload(self, artifact: Any) -> ValidationOutcome:
        """The artifact against the graph's artifact schema, when it declares one."""
        reasons = check_payload(artifact, self.context.graph.lifecycle.artifact_schema)
        return Rejected("payload", reasons) if reasons else Passed()

    async def semantic(self, artifact: Any) -> ValidationOutcome:
        """The attached and graph validations, fanned out concurrently (seed 000, Execute).

        A validator-only retry (an infrastructure fault) re-runs the failed nodes and every
        node after them; the rest of the round's outputs are given. Resuming, what the log
        shows completed in this round is taken from it and only the rest runs.
        """
        context = self.context
        given = given_outputs(context.work_phase, artifact)
        retry_only, self._retry_only = self._retry_only, None
        # What each validation found in the rounds before this one, as their first results
        # in the log say (what `replay --rerun` gives too): not a confirmation's.
        self._earlier.update(self._found)
        self._found = {}
        if retry_only:
            select: Sequence[str] = with_descendants(context.graph, retry_only)
            given.update(
                {
                    node: result.output
                    for node, result in self.results.items()
                    if node not in select and result.status is NodeStatus.OK
                }
            )
        else:
            work = set(context.work_phase)
            select = [n.id for n in context.graph.nodes if n.id not in work]
            select += [a.id for a in context.applicable if a.attachment_id]
            self.results = {}
            self.records = {}
        done, records = await self._fan_out(select, given, artifact, retry=bool(retry_only))
        self._found = {node: record.result.data for node, record in records.items()}
        self.results.update(done)
        self.records.update(records)
        outcome, self.verdict = semantic_outcome(
            context.plan_id, context.graph, context.applicable, self.records, self.results
        )
        if isinstance(outcome, Rejected) and context.graph.policy.confirm_failures:
            return await self._confirm(outcome, artifact)
        return outcome

    async def approval(self, artifact: Any) -> ValidationOutcome:
        """The graph's approval tiers for what ran (seed 002 §6): passed, or a person's
        answer; ``NeedsApproval`` when nobody is there to ask (the plan pauses)."""
        context = self.context
        journal = context.journal
        ran = [*context.work_phase, *self.records]
        outcome = journal.approval(
            check_approval(context.graph, ran, auto_approve=self.auto_approve)
        )
        if not isinstance(outcome, NeedsApproval):
            return outcome
        await journal.emit(
            ApprovalRequired,
            round=context.round,
            tier=outcome.tier,
            message=outcome.message,
            verdict=self.verdict,
        )
        request = EscalationRequest(
            plan_id=context.plan_id,
            reason="approval",
            message=outcome.message,
            verdict=self.verdict,
            history=tuple(self.summaries),
            tier=outcome.tier,
        )
        answer = await self._ask(request, journal.last_at)
        if answer is None:
            return outcome  # nobody to ask: the plan pauses, durably
        if answer.action == "approve":
            return Passed()
        self.denied = True
        message = f"denied by a person: {answer.note or 'no note'}"
        return Rejected("approval", (Reason(layer="approval", message=message),))

    # -- the semantic layer's fan-out ----------------------------------------------------------

    async def _fan_out(
        self, select: Sequence[str], given: dict[str, Any], artifact: Any, *, retry: bool
    ) -> tuple[dict[str, NodeResult], dict[str, ValidationRecord]]:
        """Run the validation nodes ``select`` concurrently: what the log holds of them is
        taken from it (resuming), the rest runs. Returns every node that ended, and the
        validation records among them, by id."""
        context = self.context
        journal = context.journal
        # What the validations are given, before anything runs (a confirmation re-runs what
        # failed on purpose: it reuses nothing, and is not reused).
        seen: RoundSeen | None = None
        if self._code_tools is None:
            self._code_tools = tools_of(context.graph)
        # Only where a validation may be reused: none, and a round takes no note at all
        # (a folder's listing is a stat of every file).
        if not retry and context.boxes.ready and self._code_tools:
            unseen = await anyio.to_thread.run_sync(context.boxes.unseen)
            seen = RoundSeen(
                context.graph, given, artifact, self.validated, unseen, self._code_tools
            )
        done: dict[str, NodeResult] = {}
        if journal.replaying:
            done, select = await self._from_log(select, given, retry=retry)
        # A logged result ran with the code of its day, which may not be today's: what this
        # round took note of cannot vouch for it, so it is not reused later.
        logged = set(done)
        records = {n: r for n, r in done.items() if isinstance(r, ValidationRecord)}
        if select and seen is not None:
            select = await self._reuse(select, seen, given, done, records)
        if select:
            # Read by each call's `context.earlier`, in the run's tasks.
            token = EARLIER.set(self._earlier)
            # Read by an MCP call, which maps a path given in a real folder to its copy.
            standing = STANDS_FOR.set(context.boxes.stands_for())
            try:
                run = await execute_graph(
                    context.graph,
                    catalog=context.catalog,
                    resources=await context.boxes.views(),
                    max_concurrency=context.executor.max_concurrency,
                    isolation=context.executor.isolation,
                    select=select,
                    given=given,
                    artifact=artifact,
                    attempt=context.attempt,
                    changed=self._changed,
                    **journal.engine_arguments(),
                )
            finally:
                STANDS_FOR.reset(standing)
                EARLIER.reset(token)
            journal.advance(run)
            done.update(run.nodes)
            records.update((r.node, r) for r in run.validations)
        if seen is not None:
            for node, record in records.items():
                if node not in logged and record.reused_from is None and record.result.passed:
                    arguments = arguments_of(self._nodes.get(node))
                    self._passing[node] = (seen, context.round, record, arguments)
        # Calls made: a reused result was not called again.
        context.stats.semantic_invocations += sum(r.reused_from is None for r in records.values())
        return done, records

    async def _reuse(
        self,
        select: Sequence[str],
        seen: RoundSeen,
        given: dict[str, Any],
        done: dict[str, NodeResult],
        records: dict[str, ValidationRecord],
    ) -> list[str]:
        """Take the passing results of earlier rounds whose validations read then what
        those of ``select`` read now (``seen``), each logged as reused; return what is left
        to run."""
        context = self.context
        graph = context.graph
        left: list[str] = []
        for node in select:
            earlier = self._passing.get(node)
            if earlier is None:  # the common case, and a dict lookup: no earlier pass
                left.append(node)
                continue
            if node not in self._tools:
                self._tools[node] = reusable_tools(graph, node)
            tools = self._tools[node]
            if (
                tools is None
                or earlier[3] is None
                or earlier[3] != arguments_of(self._nodes.get(node))
                or not same_read(graph, node, tools, earlier[0], seen)
            ):
                left.append(node)
                continue
            _, first, record, _ = earlier
            await context.journal.emit(
                ValidationCompleted,
                node=node,
                validation=record.validation,
                attachment_id=record.attachment_id,
                attempt=context.attempt,
                result=record.result,
                duration=record.duration,
                isolation=record.isolation,
                network=record.network,
                reused_from=first,
            )
            again = msgspec.structs.replace(record, attempt=context.attempt, reused_from=first)
            done[node] = records[node] = again
            given[node] = again.output  # for a validation that needs it
        return left

    async def _confirm(self, outcome: Rejected, artifact: Any) -> Passed | Rejected:
        """Run the failing required validations once more on the same inputs before a fix
        is asked for (seed 000, Risks: flaky validations). One that passes now is flaky:
        its failure becomes an infrastructure fault (kind ``flaky``), re-run on the shared
        budget; one that fails again is confirmed. Neither is ever skipped."""
        context = self.context
        failing = [
            r.node
            for r in outcome.reasons
            if r.node is not None
            and r.error is None
            and (record := self.records.get(r.node)) is not None
            and record.blocking
        ]
        if not failing:
            return outcome
        await context.journal.emit(ConfirmationStarted, round=context.round, nodes=failing)
        given = given_outputs(context.work_phase, artifact)
        given.update({n: r.output for n, r in self.results.items() if r.status is NodeStatus.OK})
        _, again = await self._fan_out(failing, given, artifact, retry=True)
        flaky = [node for node in failing if node in again and again[node].result.passed]
        if not flaky:
            return outcome
        for node in flaky:
            first = self.records[node]
            marked = msgspec.structs.replace(
                first,
                result=ValidationResult.failure(
                    FLAKY,
                    f"failed ({first.result.message or 'no message'}), then passed when "
                    "run again on the same inputs",
                ),
            )
            self.records[node] = marked
            self.results[node] = marked
            flakes = context.stats.flakes
            flakes[first.validation] = flakes.get(first.validation, 0) + 1
            if context.catalog is not None and not context.journal.offline:
                await anyio.to_thread.run_sync(
                    functools.partial(
                        context.catalog.record_flake,
                        first.validation,
                        plan_id=context.plan_id,
                        round=context.round,
                        node=node,
                        detail="failed, then passed when run again on the same inputs",
                    )
                )
        outcome_now, self.verdict = semantic_outcome(
            context.plan_id, context.graph, context.applicable, self.records, self.results
        )
        return outcome_now

    async def _from_log(
        self, select: Sequence[str], given: dict[str, Any], *, retry: bool
    ) -> tuple[dict[str, NodeResult], list[str]]:
        """Take the round's results the log holds; return them, and what is left to run
        (nothing if the log shows the round ended). Completed nodes' outputs go into
        ``given``."""
        context = self.context
        journal = context.journal
        modes = {a.id: a.mode for a in context.applicable}
        done: dict[str, NodeResult] = {}
        events = journal.engine_events()
        for event in events:
            node = getattr(event, "node", None)
            if node is None:
                continue
            result = logged_result(event, self._kind(node), modes.get(node))
            if result is not None:
                done[node] = result
        if journal.peek() is not None:
            journal.check_round(context.round, events, done, select, modes, retry=retry)
            return done, []  # the log goes on past this round: its fan-out finished
        # The log ends inside this round: the process died mid fan-out.
        await journal.go_live()
        given.update({n: r.output for n, r in done.items() if r.status is NodeStatus.OK})
        failed = [n for n, r in done.items() if r.status is not NodeStatus.OK]
        doomed = set(with_descendants(context.graph, failed)) - set(done) if failed else set()
        for node in select:
            if node in doomed:
                # Its skip was not logged before the crash: log it now, as the engine would.
                cause = next(n for n in failed if node in with_descendants(context.graph, [n]))
                reason = f"skipped: {cause} {done[cause].status.value}"
                await journal.emit(NodeSkipped, node=node, reason=reason)
                done[node] = NodeResult(
                    node=node,
                    kind=self._kind(node),
                    status=NodeStatus.SKIPPED,
                    error=reason,
                    attempt=context.attempt,
                )
        return done, [n for n in select if n not in done and n not in doomed]

    def _kind(self, node: str) -> str:
        try:
            return self.context.graph.node(node).kind.value
        except KeyError:
            return "validation" if node.startswith(ATTACHMENT) else "work"
