"""The supervisor: a plan's lifecycle, Strategize → Execute → Apply (seed 000).

Strategize is not validated, but the strategy actor is told which validations apply.
Execute runs on sandboxes; its last step is the validation pipeline (routing → payload →
semantic → approval, seed 002). A required failure climbs the failure ladder: fix and
revalidate on one shared Max-N budget (seed 003), then a strategy revision, then a person,
then terminal failure. Apply commits the sandboxes' changesets atomically; it is never
validated and happens at most once.

Invariant: no path reaches Apply while a required validation is failing.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import socket
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import (
    ConfigError,
    ConfigIssue,
    ResumeError,
    RuntimeFault,
    WorkWithdrawn,
)
from gategraph.runtime._base._ids import check_plan_id, new_ulid
from gategraph.runtime._base._protocols import (
    Applicable,
    EscalationDecision,
    EscalationHandler,
    Escalator,
    ExecuteRequest,
    ExecutionActor,
    FixRequest,
    RoundSummary,
    Strategy,
    StrategyActor,
    StrategyRequest,
)
from gategraph.runtime._base._spans import auto_tracing, current_span, span_activator
from gategraph.runtime._calls._context import private_folder
from gategraph.runtime._calls._invoke import propagates
from gategraph.runtime._data._events import (
    WITHDRAWN,
    FixRequested,
    PlanFinished,
    PlanStarted,
    StrategyProduced,
    WorkFinished,
)
from gategraph.runtime._data._maxn import (
    AUDIT_FILE,
    MISCONFIGURED,
    RUNTIME_FAULT,
    WORK_ERROR,
    AuditLog,
    AuditRecorder,
    InMemoryAuditLog,
    RetryBudget,
    RetryDecision,
)
from gategraph.runtime._definitions._evidence import EvidenceStore, MemoryEvidence, PlanRoster
from gategraph.runtime._definitions._roles import as_role, build_role
from gategraph.runtime._definitions._validator_tools import current_evidence
from gategraph.runtime._running._engine import (
    ValidationRecord,
    _jsonable,
    execute_graph,
    open_plan_mcp_sessions,
)
from gategraph.runtime._running._journal import PlanJournal, steps_of
from gategraph.runtime._running._observe import ObservedEventLog
from gategraph.runtime._running._pipeline import (
    NeedsApproval,
    Passed,
    Rejected,
    ValidationOutcome,
    applicable_validations,
)
from gategraph.runtime._running._skill_tools import SkillTools
from gategraph.runtime._running._sync import run_sync
from gategraph.runtime._storage._database import check_event_log, opened_log
from gategraph.runtime._storage._eventlog import EventLog, MemoryEventLog, holding_lease
from gategraph.runtime._storage._resources import DirectoryResource, Resource
from gategraph.runtime._storage._store import ContentStore, StoreError, StoreRetention

from ._executors import Executor, LocalExecutor, RayExecutor
from ._plan import PlanContext, PlanStatistics, PlanStatus, WorkFailed
from ._plan_apply import PlanApply
from ._plan_coverage import CoverageGate
from ._plan_ladder import FailureLadder, failure_text
from ._plan_round import RoundPipeline, callable_problem
from ._plan_sandboxes import PlanSandboxes
from ._validator_spawn import register_worker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph

__all__ = [
    "GraphExecutor",
    "GraphStrategy",
    "PlanOutcome",
    "PlanStatistics",
    "PlanStatus",
    "Supervisor",
    "resume_plan",
    "resume_plan_sync",
    "run_plan",
    "run_plan_sync",
]


class PlanOutcome(msgspec.Struct, kw_only=True):
    """How a plan ended: its status, last verdict, attempts and statistics."""

    plan_id: str
    status: PlanStatus
    message: str = ""
    verdict: dict[str, Any] | None = None
    """The last round's seed 003 envelope."""
    attempts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """One seed 003 audit line per attempt."""
    rounds: list[RoundSummary] = msgspec.field(default_factory=list)
    validations: list[ValidationRecord] = msgspec.field(default_factory=list)
    """The last round's validation records, per node and attachment."""
    changes: dict[str, str] = msgspec.field(default_factory=dict)
    """What Apply committed, by resource."""
    statistics: PlanStatistics = msgspec.field(default_factory=PlanStatistics)


class GraphStrategy:
    """The default strategy actor: the plan graph itself is the strategy."""

    async def strategize(self, request: StrategyRequest) -> Strategy:
        """Return the graph's description as the strategy, noting a revision."""
        graph = request.graph
        summary = graph.description or f"run the nodes of {graph.name}"
        if request.revision:
            summary += f" (revision {request.revision})"
        return Strategy(summary=summary, data={"applicable": len(request.applicable)})


class GraphExecutor:
    """The default execution actor: runs the graph's work nodes on the sandboxes.

    A fix runs them again; tools see the rejection through their ``context``.
    """

    async def execute(self, request: ExecuteRequest) -> Any:
        """Run the work phase; the artifact maps each work node to its output."""
        work = _work_phase(request.graph)
        if not work:
            return {}
        journal = request.journal
        # Logged into the plan's own sequence, so the plan's log shows the work too.
        logging = (
            journal.engine_arguments() if journal is not None else {"plan_id": request.plan_id}
        )
        try:
            run = await execute_graph(
                request.graph,
                resources=request.resources,
                select=work,
                attempt=request.attempt,
                **logging,
            )
        except (ConfigError, RuntimeFault):
            raise
        except Exception as exc:
            # The tools' own failures are in the run's results, never raised: anything
            # raised here is gategraph's, and no fix of the work can help.
            raise RuntimeFault(f"the default executor failed: {type(exc).__name__}: {exc}") from exc
        if journal is not None:
            journal.advance(run)
        failed = [r for r in run.nodes.values() if r.status.value != "ok"]
        if failed:
            raise RuntimeError("; ".join(f"{r.node}: {r.error}" for r in failed))
        return {node: result.output for node, result in run.nodes.items()}

    async def fix(self, request: FixRequest) -> Any:
        """Run the work phase again (a tool that can fix reads the rejection itself)."""
        return await self.execute(request)


def _work_phase(graph: PlanGraph) -> list[str]:
    """The graph's work phase (:meth:`PlanGraph.work_phase`, worked out once per graph)."""
    return graph.work_phase()


def _role(graph: PlanGraph, given: Any, role: str, default: Any) -> Any:
    """The object playing ``role``: the one passed (an object or an async callable) wins
    over the graph's ``lifecycle:`` import path, which wins over ``default``."""
    if given is not None:
        return as_role(given, role, field=_ROLE_ARGUMENTS[role])
    spec = getattr(graph.lifecycle, role)
    if spec is None:
        return default
    field = f"lifecycle.{role}.uses"
    try:
        return build_role(spec.uses, spec.arguments, role, field=field)
    except ConfigError as exc:
        raise ConfigError.at(field, exc.issues[0].message, source=graph.source) from None


_ROLE_ARGUMENTS: Final = {
    "strategy": "strategy_actor",
    "executor": "execution_actor",
    "escalation": "escalation",
}
"""The keyword argument that passes each role as an object."""


class Supervisor:
    """Drives one plan through its lifecycle. Most callers want :func:`run_plan` or
    :func:`resume_plan`.

    The lifecycle (:meth:`_lifecycle`) is the ADR's sequence; its parts each do one thing
    on the plan's :class:`PlanContext`: :attr:`boxes` (the sandboxes), :attr:`pipeline`
    (a validation round's four layers), :attr:`ladder` (what a rejected round leads to)
    and :attr:`applier` (Apply).
    """

    def __init__(
        self,
        graph: PlanGraph,
        *,
        catalog: Catalog | None = None,
        event_log: EventLog | None = None,
        resources: Mapping[str, Resource] | None = None,
        escalation: EscalationHandler | Escalator | None = None,
        executor: Executor | None = None,
        plan_id: str | None = None,
        audit: AuditRecorder | None = None,
        auto_approve: bool = False,
        home: Path | None = None,
        sleep: Any = None,
        strategy_actor: StrategyActor | Callable[[StrategyRequest], Awaitable[Any]] | None = None,
        execution_actor: ExecutionActor | Callable[[ExecuteRequest], Awaitable[Any]] | None = None,
        store: ContentStore | None = None,
        store_retention: StoreRetention | None = None,
        evidence: EvidenceStore | None = None,
    ) -> None:
        self.graph = graph
        self.catalog = catalog
        self.log: EventLog = event_log if event_log is not None else MemoryEventLog()
        self.executor = executor or LocalExecutor()
        plan_id = check_plan_id(plan_id or new_ulid())
        # Sandboxes and the audit follow the event log: beside a log file, in the temporary
        # folder (sandboxes) and in memory (audit) for an in-memory log. An embedding
        # program that did not ask for files in its working folder gets none there. A
        # log in a database has no folder: the host's files go where ``home`` says.
        log_path = getattr(self.log, "path", None)
        log_folder = Path(log_path).parent if isinstance(log_path, str | os.PathLike) else None
        self._home = home or log_folder
        if audit is None:
            audit = (
                AuditLog(self._home / "audit" / AUDIT_FILE)
                if self._home is not None
                else InMemoryAuditLog()
            )
        self.audit: AuditRecorder = audit
        # A log in a database keeps the store in the same database (store_location), so
        # every host that reaches the log reaches the round's inputs too.
        beside = getattr(self.log, "store_location", None)
        self.store = store or ContentStore(log_folder / "store" if log_folder else beside)
        """Where each round's inputs are kept (beside the event log), so a round can be
        rebuilt and its validations run again."""
        self.store_retention = store_retention or StoreRetention()
        self.auto_approve = auto_approve
        self.resources: dict[str, Resource] = dict(resources or {})
        for name, spec in graph.resources.items():
            if name in self.resources:
                continue
            self.resources[name] = spec.resource(name)
        unknown = sorted(set(self.resources) - set(graph.resources))
        if unknown:
            raise ConfigError.at("resources", f"not resources of the graph: {', '.join(unknown)}")
        # Traced by itself when the program has set OpenTelemetry up and the log has no
        # tracing observer of the caller's: the spans and metrics end with each run.
        self._tracing: Any = None
        if span_activator(self.log) is None:
            tracing = auto_tracing()
            if tracing is not None:
                self.log = ObservedEventLog(self.log, tracing)
                self._tracing = tracing
        # Actors passed as objects win over the graph's import paths (`lifecycle:`).
        self.strategy_actor: StrategyActor = _role(
            graph, strategy_actor, "strategy", GraphStrategy()
        )
        self.execution_actor: ExecutionActor = _role(
            graph, execution_actor, "executor", GraphExecutor()
        )
        handler = _role(graph, escalation, "escalation", None)
        self.boxes = PlanSandboxes(
            self.resources, plan_id=plan_id, home=lambda: self.home, store=self.store
        )
        """The plan's sandboxes."""
        self.context = PlanContext(
            plan_id=plan_id,
            graph=graph,
            catalog=catalog,
            log=self.log,
            journal=PlanJournal(self.log, plan_id),
            boxes=self.boxes,
            executor=self.executor,
            applicable=applicable_validations(graph, catalog, plan_id),
            work_phase=_work_phase(graph),
        )
        """What the parts of the lifecycle share: where the plan is, and what it cost."""
        self.ladder = FailureLadder(
            self.context,
            audit=audit,
            escalation=handler.escalate if handler is not None else None,
            sleep=sleep or anyio.sleep,
        )
        """What a rejected round leads to: the budget, a revised strategy, a person."""
        self.pipeline = RoundPipeline(
            self.context, ask=self.ladder.ask, attest=self.ladder.attest, auto_approve=auto_approve
        )
        """The validation rounds: routing → payload → semantic → approval."""
        if evidence is None:
            if catalog is None and graph.policy.outside_validators:
                # A store of this process alone: no validator outside it could attest.
                raise ConfigError.at(
                    "policy.outside_validators",
                    "outside validators attest a plan in an evidence store they can reach: "
                    "run it with a catalog (catalog=), or give the store (evidence=)",
                    source=graph.source,
                )
            evidence = catalog if catalog is not None else MemoryEvidence()
        self.evidence: EvidenceStore = evidence
        """Where the plan's acceptance criteria and the evidence bound to them are kept:
        the catalog's, where validators outside the plan reach them."""
        self.gate = CoverageGate(self.context, self.evidence, self._roster())
        """The coverage gate before Apply: every acceptance criterion attested."""
        self.applier = PlanApply(self.context, self.resources)
        """Apply: the changesets of a round that passed, committed at most once."""
        self._fix_number = 0
        self._last_error: str | None = None
        """The execution actor's error at the attempt before, when it raised."""

    # The plan's state, as the parts keep it (read by gates, replays and tests).

    @property
    def plan_id(self) -> str:
        return self.context.plan_id

    @plan_id.setter
    def plan_id(self, value: str) -> None:
        self.context.plan_id = self.boxes.plan_id = value
        self.gate.roster = self._roster()

    @property
    def journal(self) -> PlanJournal:
        """Where the plan's events go (and, resuming, what the log holds for the steps
        ahead)."""
        return self.context.journal

    @journal.setter
    def journal(self, value: PlanJournal) -> None:
        self.context.journal = value

    @property
    def applicable(self) -> list[Applicable]:
        return self.context.applicable

    @applicable.setter
    def applicable(self, value: list[Applicable]) -> None:
        self.context.applicable = value
        self.gate.roster = self._roster()

    @property
    def roster(self) -> PlanRoster:
        """The plan's acceptance criteria, each with its UUID and alias."""
        return self.gate.roster

    def _roster(self) -> PlanRoster:
        context = self.context
        return PlanRoster(context.plan_id, context.graph, context.applicable)

    @property
    def work_phase(self) -> list[str]:
        return self.context.work_phase

    @property
    def stats(self) -> PlanStatistics:
        return self.context.stats

    @property
    def round(self) -> int:
        return self.context.round

    @property
    def revision(self) -> int:
        return self.context.revision

    @property
    def attempt(self) -> int:
        return self.context.attempt

    @property
    def budget(self) -> RetryBudget:
        return self.ladder.budget

    @property
    def attempts(self) -> list[dict[str, Any]]:
        return self.ladder.attempts

    @property
    def rounds(self) -> list[RoundSummary]:
        return self.pipeline.summaries

    @property
    def records(self) -> dict[str, ValidationRecord]:
        return self.pipeline.records

    @property
    def verdict(self) -> dict[str, Any] | None:
        return self.pipeline.verdict

    @property
    def outcome(self) -> ValidationOutcome | None:
        """The last round's pipeline outcome."""
        return self.pipeline.outcome

    @property
    def home(self) -> Path:
        """The folder of the plan's sandboxes (``sandboxes/PLAN/rN/NAME`` below it)."""
        if self._home is None:
            self._home = _process_home()
        return self._home

    @property
    def seq(self) -> int:
        """The seq of the plan's last event."""
        return self.journal.seq

    # -- the lifecycle --------------------------------------------------------------------

    async def run(self) -> PlanOutcome:
        """Run the plan to an outcome: applied, failed, or paused for a person."""
        outcome = None
        try:
            outcome = await self._run()
            return outcome
        finally:
            self._end_tracing(outcome)

    def _end_tracing(self, outcome: PlanOutcome | None) -> None:
        """End the spans of a run traced by itself (the outcome's statistics on the plan
        span), and have a later run of this supervisor (a resume) traced afresh."""
        tracing = self._tracing
        if tracing is None:
            return
        if outcome is not None:
            tracing.finish(outcome)
        else:
            tracing.close()
        fresh = auto_tracing()
        observers = getattr(self.log, "observers", None)
        if isinstance(observers, list) and tracing in observers:
            observers.remove(tracing)
            if fresh is not None:
                observers.append(fresh)
        self._tracing = fresh

    async def _run(self) -> PlanOutcome:
        self._check_callable()
        async with self._lease():
            # Its MCP servers open once for the whole plan; a tool one lacks is refused here,
            # before the plan starts.
            async with self._mcp_sessions():
                await anyio.to_thread.run_sync(self.executor.connect)
                await self.journal.emit(PlanStarted, **await self._started())
                await self.gate.register()
                return await self._drive()

    def _sandboxed_nodes(self) -> int:
        """How many nodes of the plan (validations and work) run in the sandbox: all where
        the plan or the run asks for it, else those that declare it and those that run
        there with no isolation declared (the default for code that is not gategraph's
        own)."""
        from gategraph.runtime._calls._invoke import default_isolation
        from gategraph.runtime._data._models import Validation

        if self.executor.isolation == "sandbox" or self.graph.policy.require_sandbox:
            return len(self.graph.nodes)
        found = 0
        for node in self.graph.nodes:
            isolation = node.isolation or self.executor.isolation
            if isolation is not None:
                found += isolation == "sandbox"
                continue
            try:
                tool = self.graph.get_tool(node.target)
                if isinstance(tool, Validation) and tool.wraps is not None:
                    tool = self.graph.get_tool(tool.wraps)
            except KeyError:
                continue  # an import path (`uses`): gategraph's own process
            found += tool.untrusted or default_isolation(tool, tell=False) == "sandbox"
        return found

    @contextlib.asynccontextmanager
    async def _mcp_sessions(self) -> AsyncIterator[None]:
        """What the plan's rounds share: its MCP sessions, and its sandboxed workers (so a
        round does not start them again)."""
        async with contextlib.AsyncExitStack() as stack:
            sandboxed = self._sandboxed_nodes()
            await stack.enter_async_context(
                open_plan_mcp_sessions(
                    self.graph,
                    catalog=self.catalog,
                    plan_id=self.plan_id,
                    isolation=self.executor.isolation,
                )
            )
            # (Every node the plan or the run sends to the sandbox is counted.)
            if sandboxed or any(tool.untrusted for tool in self.graph.registry.values()):
                from gategraph.runtime._calls._sandbox import current_pool, sandbox_pool

                # The embedder's pool where it opened one (its workers are warm), else the
                # plan's own, for all its rounds: its first workers start now, and import
                # what a call needs while the plan's folders are copied.
                if current_pool() is None:
                    prewarm = min(sandboxed, self.graph.policy.max_concurrency)
                    await stack.enter_async_context(sandbox_pool(prewarm=prewarm))
            yield

    def _check_callable(self) -> None:
        """Refuse, before anything is logged, a plan whose validations or work tools
        cannot be called: no fix, retry or revised strategy could change that."""
        issues: list[ConfigIssue] = []
        index = {node.id: i for i, node in enumerate(self.graph.nodes)}
        seen: set[tuple[bool, str]] = set()
        for item in self.applicable:
            key = (item.attachment_id is not None, item.validation)
            if key in seen:
                continue
            seen.add(key)
            problem = callable_problem(self.context, *key)
            if problem is None:
                continue
            if item.attachment_id is not None:
                where = f"attachment {item.attachment_id}"
                problem = f"the attached validation {item.validation!r} cannot be called: {problem}"
            else:
                where = f"nodes[{index[item.id]}].validation"
            issues.append(ConfigIssue(problem, where))
        for node_id in self.work_phase:
            node = self.graph.node(node_id)
            if node.tool is None:
                continue
            problem = callable_problem(self.context, False, node.tool)
            if problem is not None:
                issues.append(ConfigIssue(problem, f"nodes[{index[node_id]}].tool"))
        if issues:
            raise ConfigError(issues, source=self.graph.source)

    async def resume(self, *, decision: EscalationDecision | None = None) -> PlanOutcome:
        """Continue the plan whose events are ``events`` (its whole log) from where they end.

        The lifecycle runs again from the start against the log: every step the log shows
        finished is taken from it — strategies, artifacts, each validation's result, a
        person's answers — and every decision is checked against it; where the log ends the
        plan goes on live. A plan that crashed mid fan-out runs only the validations that
        had not completed; one that crashed during Apply has each resource recovered and
        applies the rest, never twice. ``decision`` answers a plan paused for a person: an
        escalation (``retry`` / ``abort``) or an approval (``approve`` / ``deny``).

        A finished plan returns its outcome and appends nothing; so does a paused plan
        resumed without a decision. Raises :class:`ResumeError` when the log and the plan
        disagree, and :class:`PlanBusyError` when the plan is running elsewhere.
        """
        outcome = None
        try:
            outcome = await self._resume(decision)
            return outcome
        finally:
            self._end_tracing(outcome)

    async def _resume(self, decision: EscalationDecision | None) -> PlanOutcome:
        async with self._lease():
            # Read under the lease: a log read before it may have grown since.
            mine = [e for e in await self.log.read(self.plan_id) if e.plan_id == self.plan_id]
            if not mine:
                raise ResumeError(f"plan {self.plan_id} has no events to resume from")
            steps = steps_of(mine)
            last = steps[-1] if steps else None
            paused = last.status if isinstance(last, PlanFinished) else None
            if decision is not None and paused != decision.answers:
                state = paused or "running (or crashed)"
                raise ResumeError(decision.not_awaited(self.plan_id, state))
            finished = paused in (PlanStatus.APPLIED.value, PlanStatus.FAILED.value)
            needs_sandboxes = not finished and (
                decision is None or decision.action in ("retry", "approve")
            )
            if needs_sandboxes:
                await self.boxes.check_kept(steps)
            reason = "crashed"
            if decision is not None:
                reason = "approval" if decision.for_approval else "decision"
            # A finished plan calls nothing: its servers need not be there any more.
            opened = contextlib.nullcontext() if finished else self._mcp_sessions()
            async with opened:
                await anyio.to_thread.run_sync(self.executor.connect)
                self.journal = PlanJournal(self.log, self.plan_id, mine, reason=reason)
                self.boxes.resumed = True
                self.ladder.decision = decision
                await self.journal.emit(PlanStarted, **await self._started())
                await self.gate.register()  # a plan started before rosters were kept
                return await self._drive()

    async def replay(self) -> PlanOutcome:
        """Run the lifecycle against the log its journal holds, never live (see
        :func:`replay_plan`): each decision is compared with the log's, each fact is read
        from it, and nothing runs, since the journal never turns live."""
        await self.journal.emit(PlanStarted, **self._started_fields(None, None))
        return await self._lifecycle()

    async def _started(self) -> dict[str, Any]:
        path, digest = await anyio.to_thread.run_sync(_graph_file, self.graph)
        return {**self._started_fields(path, digest), "host": socket.gethostname()}

    def _started_fields(self, path: str | None, digest: str | None) -> dict[str, Any]:
        resources = {
            name: {
                "kind": resource.kind,
                "root": os.fspath(resource.root),
                "exclude": list(resource.exclusion.patterns),
                "gitignore": resource.exclusion.gitignore,
            }
            if isinstance(resource, DirectoryResource)
            else {"kind": resource.kind}
            for name, resource in self.resources.items()
        }
        return {
            "graph": self.graph.name,
            "project": self.graph.project,
            "graph_path": path,
            "graph_sha256": digest,
            "applicable": [a.id for a in self.applicable],
            "options": {
                "auto_approve": self.auto_approve,
                "resources": resources,
                "executor": self.executor.describe(),
            },
        }

    def _lease(self) -> AbstractAsyncContextManager[None]:
        return holding_lease(self.log, self.plan_id)

    async def _drive(self) -> PlanOutcome:
        # The plan's own nodes that call the validator tools work on the plan's evidence;
        # its worker may never be spawned as its validator.
        register_worker(self.plan_id, getattr(self.execution_actor, "work", self.execution_actor))
        with current_evidence(self.evidence):
            outcome = await self._lifecycle()
        if outcome.status in (PlanStatus.APPLIED, PlanStatus.FAILED):
            # Only a finished plan lets its sandboxes go: a paused, crashed or cancelled one
            # continues on them when resumed.
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.boxes.discard, True)
                await anyio.to_thread.run_sync(self._collect)
        return outcome

    def _collect(self) -> None:
        """Let the store go of what its retention no longer keeps (the plans before): for a
        batch of plans at a time, since a collect reads every manifest it keeps."""
        try:
            if self.store.collect_due(self.store_retention):
                self.store.collect(self.store_retention)
        except (StoreError, OSError) as exc:
            # The plan's outcome stands; what could not be collected waits for the next one.
            warnings.warn(f"plan {self.plan_id}: {exc}", RuntimeWarning, stacklevel=1)

    async def _lifecycle(self) -> PlanOutcome:
        """Strategize → Execute (its last step a validation round) → Apply, with the
        failure ladder between a rejected round and the next (seed 000)."""
        pipeline, ladder = self.pipeline, self.ladder
        note: str | None = None
        while True:
            strategy = await self._strategize()
            await self.boxes.open(self.revision, replaying=self.journal.replaying)
            artifact = await self._work(strategy, None, note)
            while True:
                if _withdrawn(artifact):
                    return await self._finish(PlanStatus.FAILED, str(artifact))
                outcome = await pipeline.run(artifact)
                if isinstance(outcome, Passed):
                    held = await self.gate.check()
                    if held is not None:
                        return await self._finish(*held, detail=self.gate.note)
                    applied, message, changes = await self.applier.apply(pipeline.validated)
                    status = PlanStatus.APPLIED if applied else PlanStatus.FAILED
                    return await self._finish(status, message, changes=changes)
                if isinstance(outcome, NeedsApproval):
                    return await self._finish(PlanStatus.AWAITING_APPROVAL, outcome.message)
                assert isinstance(outcome, Rejected)
                if pipeline.denied:
                    return await self._finish(
                        PlanStatus.FAILED, f"denied at approval: {failure_text(outcome)}"
                    )
                decision, fault = await ladder.decide(outcome)
                if decision is RetryDecision.FIX:
                    artifact = await self._work(strategy, outcome, None, previous=artifact)
                    continue
                if decision is RetryDecision.RETRY_VALIDATOR:
                    pipeline.rerun_failed(outcome)
                    await ladder.wait(fault)
                    continue
                # The budget is spent, or the fault is permanent: up the ladder.
                if await ladder.revise(decision, outcome):
                    break
                answer = await ladder.escalate(
                    decision, outcome, verdict=pipeline.verdict, history=pipeline.summaries
                )
                if answer is None:
                    return await self._finish(
                        PlanStatus.AWAITING_DECISION, "waiting for a person's decision"
                    )
                if answer.action == "abort":
                    return await self._finish(
                        PlanStatus.FAILED, f"aborted after escalation: {answer.note or 'no note'}"
                    )
                note = answer.note
                artifact = await self._work(strategy, outcome, note, previous=artifact)

    async def _strategize(self) -> Strategy:
        recorded = self.journal.take("strategy_produced", revision=self.revision)
        if recorded is not None:
            return Strategy(summary=recorded.summary, data=dict(recorded.data))
        await self.journal.go_live()
        try:
            with current_span(self.log, self.plan_id, "strategize"):
                strategy = await self.strategy_actor.strategize(
                    StrategyRequest(
                        plan_id=self.plan_id,
                        graph=self.graph,
                        applicable=tuple(self.applicable),
                        revision=self.revision,
                        history=tuple(self.rounds),
                    )
                )
        except BaseException as exc:
            if not _actor_failure(exc):
                raise
            # It would end the whole program with its code (3 means "waiting for a person"
            # to our CLI), or as a cancellation: the strategy actor failed, and says so.
            raise RuntimeFault(f"the strategy actor raised {exc!r}") from exc
        data = _jsonable(strategy.data)
        await self.journal.emit(
            StrategyProduced,
            revision=self.revision,
            summary=strategy.summary,
            data=data if isinstance(data, dict) else {"data": data},
        )
        return strategy

    # -- Execute --------------------------------------------------------------------------

    async def _work(
        self,
        strategy: Strategy,
        rejection: ValidationOutcome | None,
        note: str | None,
        *,
        previous: Any = None,
    ) -> Any:
        self.context.attempt += 1
        fix = rejection is not None or previous is not None
        self._fix_number = self._fix_number + 1 if fix else 0
        if not fix:
            self._last_error = None  # a new strategy's first attempt repeats nothing
        if fix:
            self.stats.fixes += 1
            await self.journal.emit(FixRequested, attempt=self.attempt, note=note)
        recorded = self.journal.take("work_finished", attempt=self.attempt)
        if recorded is not None:
            self.boxes.work_from_log = True
            if recorded.error is not None:
                self._last_error = recorded.error if recorded.fault is None else None
                return WorkFailed(recorded.error, recorded.fault)
            self._last_error = None
            return recorded.artifact
        await self.journal.go_live()
        if not fix:
            # A first Execute always starts on a fresh copy, also after a crash midway.
            await self.boxes.ensure(fresh=True)
        views = await self.boxes.views()
        request = ExecuteRequest(
            plan_id=self.plan_id,
            graph=self.graph,
            strategy=strategy,
            resources=views,
            attempt=self.attempt,
            revision=self.revision,
            journal=self.journal,
            skills=SkillTools(self.graph, views, isolation=self.executor.isolation),
        )
        artifact: Any
        try:
            if self.context.withdrawal is not None:
                raise WorkWithdrawn(self.context.withdrawal)  # given up from outside: no more work
            if not fix:
                with current_span(self.log, self.plan_id, "work"):
                    artifact = await self.execution_actor.execute(request)
            else:
                with current_span(self.log, self.plan_id, "work"):
                    artifact = await self.execution_actor.fix(
                        FixRequest(
                            **msgspec.structs.asdict(request),
                            artifact=previous,
                            rejection=self.verdict or {},
                            failures=self.pipeline.failures(),
                            note=note,
                            fix=self._fix_number,
                        )
                    )
        except WorkWithdrawn as exc:
            artifact = WorkFailed(f"withdrawn: {exc}", WITHDRAWN)
        except ConfigError as exc:
            # A work tool that cannot be called: no fix of the work changes that.
            artifact = WorkFailed(str(exc), MISCONFIGURED)
        except RuntimeFault as exc:
            artifact = WorkFailed(f"{type(exc).__name__}: {exc}", RUNTIME_FAULT)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            # The same error as the attempt before: the code's, not the work's, and each
            # attempt may be a paid model call (a person decides, not the budget). Not a
            # network's or the machine's (an OSError: a connection refused, a timeout),
            # which may well pass at the next attempt.
            again = error == self._last_error and not isinstance(exc, OSError | TimeoutError)
            artifact = WorkFailed(error, WORK_ERROR if again else None)
        except BaseException as exc:
            if not _actor_failure(exc):
                raise
            # From the execution actor: its failure; the program goes on (exit code 3 means
            # "waiting for a person" to our CLI, and a plan must not end as that silently).
            artifact = WorkFailed(f"the execution actor raised {exc!r}")
        failed = isinstance(artifact, WorkFailed)
        self._last_error = (
            str(artifact) if isinstance(artifact, WorkFailed) and artifact.fault is None else None
        )
        # Which copies hold this work: a resume on a host with older copies refuses them.
        listed = {n: c for n, c in self.boxes.copies.items() if c} if self.boxes.ready else {}
        await self.journal.emit(
            WorkFinished,
            attempt=self.attempt,
            artifact=None if failed else _jsonable(artifact),
            error=str(artifact) if failed else None,
            fault=artifact.fault if isinstance(artifact, WorkFailed) else None,
            sandboxes=listed or None,
        )
        return artifact

    def withdraw(self, reason: str) -> None:
        """Give the plan up from outside (a gate's program left, or was cancelled): a round
        under way is not applied, and the plan fails at its next step, saying ``reason``."""
        self.context.withdrawal = reason

    async def _finish(
        self,
        status: PlanStatus,
        message: str,
        *,
        changes: dict[str, str] | None = None,
        detail: str = "",
    ) -> PlanOutcome:
        await self.journal.emit(PlanFinished, status=status.value, message=message)
        # `detail` is shown, not logged: it changes while the plan waits, and a resume
        # must find the log's decision unchanged.
        return PlanOutcome(
            plan_id=self.plan_id,
            status=status,
            message=f"{message}; {detail}" if detail else message,
            verdict=self.verdict,
            attempts=self.attempts,
            rounds=self.rounds,
            validations=list(self.records.values()),
            changes=changes or {},
            statistics=self.stats,
        )


def _actor_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised by a lifecycle actor, is its own failure: ``SystemExit``,
    ``GeneratorExit`` or an ``asyncio.CancelledError`` that nothing cancelled. A real
    cancellation, a person's Ctrl-C and anything else propagate."""
    import asyncio  # only its exception class: nothing here runs on asyncio itself

    return not propagates(exc) and isinstance(
        exc, SystemExit | GeneratorExit | asyncio.CancelledError
    )


_PROCESS_HOME_LOCK: Final = threading.Lock()


def _process_home() -> Path:
    """Where plans with an in-memory log keep their sandboxes: one private temporary folder
    per process, made on first use. Such a plan can only be resumed by this process, and
    the folder is gone when the process is, even after a kill (it is swept then)."""
    with _PROCESS_HOME_LOCK:  # two threads' first plans would each make one, and lose one
        return _made_process_home()


@functools.cache
def _made_process_home() -> Path:
    return private_folder("sandboxes")


def _graph_file(graph: PlanGraph) -> tuple[str | None, str | None]:
    """The graph's file (absolute) and its digest, when it was loaded from one."""
    source = graph.source
    if source.startswith("<") or not os.path.isfile(source):
        return None, None
    with open(source, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    return os.path.abspath(source), digest


def _withdrawn(artifact: Any) -> bool:
    """Whether the execution actor gave the plan up (the plan fails; nothing validates)."""
    return isinstance(artifact, WorkFailed) and artifact.fault == WITHDRAWN


async def run_plan(
    graph: PlanGraph,
    *,
    catalog: Catalog | None = None,
    event_log: EventLog | str | os.PathLike[str] | None = None,
    resources: Mapping[str, Resource] | None = None,
    escalation: EscalationHandler | Escalator | None = None,
    executor: Executor | None = None,
    plan_id: str | None = None,
    audit: AuditRecorder | None = None,
    auto_approve: bool = False,
    strategy_actor: StrategyActor | Callable[[StrategyRequest], Awaitable[Any]] | None = None,
    execution_actor: ExecutionActor | Callable[[ExecuteRequest], Awaitable[Any]] | None = None,
    store: ContentStore | None = None,
    store_retention: StoreRetention | None = None,
    evidence: EvidenceStore | None = None,
    home: Path | None = None,
) -> PlanOutcome:
    """Run ``graph`` as a plan: Strategize → Execute (validated) → Apply.

    Returns when the plan is applied, has failed, or waits for a person (``escalation``
    decides escalations when given; otherwise the plan pauses as ``awaiting_decision``).

    ``strategy_actor`` and ``execution_actor`` are the plan's actors as objects: an
    instance with ``async strategize(request)`` (``async execute(request)`` and
    ``async fix(request)``), or one async callable taking the request (a strategy callable
    may return a :class:`Strategy`, a summary or a mapping; an execution callable is called
    for the work and for each fix). They win over the graph's ``lifecycle:`` import paths.
    Resuming the plan needs the same actors passed again to :func:`resume_plan`.

    Each round's inputs (what every sandbox held as its validations saw it) are kept in
    ``store``, by default a :class:`ContentStore` in the folder ``store`` beside a file event
    log, in memory beside an in-memory one; ``store_retention`` says how many plans' inputs
    it keeps (default: the last 100 plans).

    ``evidence`` keeps the plan's acceptance criteria and the attestations bound to them:
    by default the ``catalog`` (where validators outside the plan reach them with
    ``validator.ac-pull`` and ``validator.attest``), else a :class:`MemoryEvidence`. A
    plan whose ``policy.outside_validators`` is above 0 waits there for their attestations
    (``awaiting_attestation``) and is applied when resumed after they arrived.

    ``event_log`` may be the path of a SQLite log or a PostgreSQL URL
    (``postgresql://USER@HOST/DATABASE``), opened for the call: with a URL, the plan's
    events and its content store are in that database, where any host can resume it.

    ``home`` is the folder its sandboxes are kept below: by default beside a file event
    log, else a private temporary folder of this process. A plan resumed where they are
    not (another host, the same log) makes them again from the store.
    """
    check_event_log(event_log, "event_log")
    async with opened_log(event_log) as log:
        return await Supervisor(
            graph,
            catalog=catalog,
            event_log=log,
            resources=resources,
            escalation=escalation,
            executor=executor,
            plan_id=plan_id,
            audit=audit,
            auto_approve=auto_approve,
            strategy_actor=strategy_actor,
            execution_actor=execution_actor,
            store=store,
            store_retention=store_retention,
            evidence=evidence,
            home=home,
        ).run()


async def resume_plan(
    plan_id: str,
    graph: PlanGraph,
    *,
    event_log: EventLog | str | os.PathLike[str],
    catalog: Catalog | None = None,
    resources: Mapping[str, Resource] | None = None,
    escalation: EscalationHandler | Escalator | None = None,
    executor: Executor | None = None,
    decision: EscalationDecision | None = None,
    audit: AuditRecorder | None = None,
    auto_approve: bool | None = None,
    home: Path | None = None,
    strategy_actor: StrategyActor | Callable[[StrategyRequest], Awaitable[Any]] | None = None,
    execution_actor: ExecutionActor | Callable[[ExecuteRequest], Awaitable[Any]] | None = None,
    store: ContentStore | None = None,
    store_retention: StoreRetention | None = None,
    evidence: EvidenceStore | None = None,
) -> PlanOutcome:
    """Continue plan ``plan_id`` from its log in ``event_log`` (see :meth:`Supervisor.resume`).

    A plan that ran with actors passed as objects (``strategy_actor``,
    ``execution_actor``) needs the same actors passed again here.

    Use it after the plan's process died, or with ``decision`` to answer a plan paused for a
    person: ``EscalationDecision(action="retry" | "abort")`` for ``awaiting_decision``,
    ``EscalationDecision(action="approve" | "deny")`` for ``awaiting_approval``. A plan
    ``awaiting_attestation`` needs no decision: resumed, it is applied when its outside
    validators attested every acceptance criterion, and waits on otherwise. ``graph``
    and ``catalog`` must be those the plan ran with; ``resources`` and ``auto_approve``
    default to what the log records (the folders of its directory resources). The log's
    decisions and options are checked against them: :class:`ResumeError` when they differ.
    ``event_log`` may be a path or a PostgreSQL URL, as for :func:`run_plan`.
    """
    check_event_log(event_log, "event_log")
    async with opened_log(event_log) as log:
        return await _resume_on(
            plan_id,
            graph,
            log,
            catalog=catalog,
            resources=resources,
            escalation=escalation,
            executor=executor,
            decision=decision,
            audit=audit,
            auto_approve=auto_approve,
            home=home,
            strategy_actor=strategy_actor,
            execution_actor=execution_actor,
            store=store,
            store_retention=store_retention,
            evidence=evidence,
        )


async def _resume_on(
    plan_id: str,
    graph: PlanGraph,
    event_log: EventLog,
    *,
    decision: EscalationDecision | None,
    resources: Mapping[str, Resource] | None,
    auto_approve: bool | None,
    executor: Executor | None,
    **given: Any,
) -> PlanOutcome:
    started = next((e for e in await event_log.read(plan_id) if isinstance(e, PlanStarted)), None)
    options = started.options if started is not None else {}
    if resources is None:
        resources = _recorded_resources(options)
    if auto_approve is None:
        auto_approve = bool(options.get("auto_approve", False))
    if executor is None:
        ran_on = options.get("executor") or {}
        if isinstance(ran_on, Mapping) and ran_on.get("kind") == "ray":
            executor = RayExecutor(address=ran_on.get("address"))
    supervisor = Supervisor(
        graph,
        event_log=event_log,
        resources=resources,
        executor=executor,
        plan_id=plan_id,
        auto_approve=auto_approve,
        **given,
    )
    return await supervisor.resume(decision=decision)


def run_plan_sync(graph: PlanGraph, **options: Any) -> PlanOutcome:
    """:func:`run_plan` for code without an event loop (the same keyword arguments).

    It runs its own event loop (asyncio's, or uvloop's after :func:`use_uvloop`) in the
    calling thread, so it may be called from any thread that is not running one — also
    while another thread's loop runs. Called from inside a running event loop it raises
    :class:`RuntimeError`: ``await run_plan`` there instead.
    """
    return run_sync(run_plan, graph, **options)


def resume_plan_sync(plan_id: str, graph: PlanGraph, **options: Any) -> PlanOutcome:
    """:func:`resume_plan` for code without an event loop (see :func:`run_plan_sync`)."""
    return run_sync(resume_plan, plan_id, graph, **options)


def _recorded_resources(options: Mapping[str, Any]) -> dict[str, Resource] | None:
    """The directory resources a plan ran on, as its ``plan_started`` event records them
    (memory resources come from the graph again)."""
    found: dict[str, Resource] = {}
    for name, spec in (options.get("resources") or {}).items():
        if isinstance(spec, Mapping) and spec.get("kind") == "directory" and spec.get("root"):
            found[name] = DirectoryResource(
                name,
                spec["root"],
                exclude=spec.get("exclude") or (),
                gitignore=spec.get("gitignore", True),
            )
    return found or None
