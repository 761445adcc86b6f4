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
import enum
import functools
import hashlib
import os
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Self

import anyio
import anyio.to_thread
import msgspec

from ._context import private_folder
from ._engine import (
    GraphRun,
    NodeResult,
    NodeStatus,
    ValidationRecord,
    _jsonable,
    execute_graph,
    open_plan_mcp_sessions,
)
from ._eventlog import EventLog, MemoryEventLog
from ._events import (
    WITHDRAWN,
    ApplyCompleted,
    ApplyStarted,
    ApprovalDecided,
    ApprovalRequired,
    ArtifactRejected,
    ArtifactValidated,
    ArtifactValidationStarted,
    ConfirmationStarted,
    EscalationDecided,
    EscalationRequested,
    FixRequested,
    NodeSkipped,
    PlanFinished,
    PlanStarted,
    RetryDecided,
    StrategyProduced,
    StrategyRevisionRequested,
    WorkFinished,
)
from ._exceptions import (
    ApplyConflictError,
    ApplyTwiceError,
    CatalogError,
    ConfigError,
    ConfigIssue,
    ResumeError,
    RuntimeFault,
    WorkWithdrawn,
)
from ._ids import check_plan_id, new_ulid
from ._invoke import Isolation, prepare, propagates
from ._journal import PlanJournal, event_tag, steps_of
from ._maxn import (
    AUDIT_FILE,
    FLAKY,
    MISCONFIGURED,
    RUNTIME_FAULT,
    Attempt,
    AuditLog,
    AuditRecorder,
    FaultKind,
    InMemoryAuditLog,
    MaxNPolicy,
    RetryBudget,
    RetryDecision,
    primary_fault,
    wait_backoff,
)
from ._pipeline import (
    ATTACHMENT,
    LAYERS,
    NeedsApproval,
    Passed,
    Reason,
    Rejected,
    ValidationOutcome,
    applicable_validations,
    check_approval,
    check_payload,
    logged_result,
    retry_only_nodes,
    round_faults,
    semantic_outcome,
    uncallable_reason,
    with_descendants,
    work_failed_reason,
)
from ._plan_sandboxes import PlanSandboxes
from ._protocols import (
    Applicable,
    EscalationDecision,
    EscalationHandler,
    EscalationRequest,
    Escalator,
    ExecuteRequest,
    ExecutionActor,
    FixRequest,
    RoundSummary,
    Strategy,
    StrategyActor,
    StrategyRequest,
)
from ._resources import (
    DirectoryResource,
    MemoryResource,
    Resource,
)
from ._results import ValidationResult
from ._roles import as_role, build_role
from ._spans import current_span
from ._store import ContentStore, StoreError, StoreRetention
from ._sync import run_sync

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractContextManager

    from ._catalog import Catalog
    from ._graph import PlanGraph

__all__ = [
    "Executor",
    "GraphExecutor",
    "GraphStrategy",
    "LocalExecutor",
    "PlanOutcome",
    "PlanStatistics",
    "PlanStatus",
    "RayExecutor",
    "Supervisor",
    "resume_plan",
    "resume_plan_sync",
    "run_plan",
    "run_plan_sync",
]


class PlanStatus(enum.StrEnum):
    """Where a plan ended (or paused)."""

    APPLIED = "applied"
    FAILED = "failed"
    AWAITING_DECISION = "awaiting_decision"
    AWAITING_APPROVAL = "awaiting_approval"


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


class LocalExecutor(msgspec.Struct, kw_only=True, frozen=True):
    """Runs validation actors on this machine, on anyio (the default executor)."""

    max_concurrency: int | None = None
    """At most this many at once (default: the graph's policy)."""
    isolation: Isolation | None = None
    """How validations run: ``thread`` (default) or ``process``, sync and async callables
    alike (an async one on an event loop of its own there); ``inline`` runs on the event
    loop and is refused for a sync callable, which no timeout could stop there."""

    def connect(self) -> None:
        """Nothing to connect to."""

    def describe(self) -> dict[str, Any]:
        """What a plan's log records of its executor (resume runs it the same way)."""
        return {"kind": "local"}


class RayExecutor(msgspec.Struct, kw_only=True, frozen=True):
    """Runs validation actors as Ray tasks: on a Ray cluster, or a local Ray instance.

    Needs ``gategraph[ray]``. Each validation call is one Ray task running the same entry
    as process isolation — under the same read-only guard, in the Ray worker — whose
    result comes back as the call's; a timeout or a cancelled plan cancels the task. The
    resources a validation reads (a directory resource's sandbox folder) must be reachable
    from the Ray workers: a local instance, or a file system the cluster shares. A node
    that sets ``isolation`` itself keeps it.
    """

    address: str | None = None
    """The cluster (``ray://host:10001``, ``auto``); ``None`` starts a local instance if
    Ray is not connected yet."""
    max_concurrency: int | None = None
    """At most this many tasks in flight (default: the graph's policy)."""
    init_options: dict[str, Any] = msgspec.field(default_factory=dict)
    """More keyword arguments for ``ray.init`` (``num_cpus``, ``runtime_env`` ...)."""

    @property
    def isolation(self) -> Isolation:
        """Always ``ray``."""
        return "ray"

    def connect(self) -> None:
        """Connect to Ray (``ray.init``) unless this process is connected already."""
        try:
            import ray
        except ImportError:
            raise ConfigError.at(
                "executor", "the Ray executor needs Ray: pip install 'gategraph[ray]'"
            ) from None
        if not ray.is_initialized():
            options = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
            ray.init(address=self.address, **options)

    def describe(self) -> dict[str, Any]:
        """What a plan's log records of its executor (resume runs it the same way)."""
        return {"kind": "ray", "address": self.address}


Executor = LocalExecutor | RayExecutor
"""Where validation actors run."""


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


def given_outputs(work: Sequence[str], artifact: Any) -> dict[str, Any]:
    """What the work phase's nodes ``work`` gave a round's validations: the artifact's
    entry for each node when it has one for every node, else the artifact itself."""
    if isinstance(artifact, Mapping) and work and set(work) <= set(artifact):
        return {node: artifact[node] for node in work}
    return dict.fromkeys(work, artifact)


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
    :func:`resume_plan`."""

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
    ) -> None:
        self.graph = graph
        self.catalog = catalog
        self.log: EventLog = event_log if event_log is not None else MemoryEventLog()
        self.executor = executor or LocalExecutor()
        self.plan_id = check_plan_id(plan_id or new_ulid())
        # Sandboxes and the audit follow the event log: beside a log file, in the temporary
        # folder (sandboxes) and in memory (audit) for an in-memory log. An embedding
        # program that did not ask for files in its working folder gets none there.
        log_path = getattr(self.log, "path", None)
        log_folder = Path(log_path).parent if isinstance(log_path, str | os.PathLike) else None
        self._home = home or log_folder
        if audit is None:
            audit = (
                AuditLog(log_folder / "audit" / AUDIT_FILE)
                if log_folder is not None
                else InMemoryAuditLog()
            )
        self.audit: AuditRecorder = audit
        self.store = store or ContentStore(log_folder / "store" if log_folder else None)
        """Where each round's inputs are kept (beside the event log), so a round can be
        rebuilt and its validations run again."""
        self.store_retention = store_retention or StoreRetention()
        self.auto_approve = auto_approve
        self.sleep = sleep or anyio.sleep
        self.resources: dict[str, Resource] = dict(resources or {})
        for name, spec in graph.resources.items():
            if name in self.resources:
                continue
            if spec.kind == "directory":
                assert spec.path is not None
                self.resources[name] = DirectoryResource(name, spec.path)
            else:
                self.resources[name] = MemoryResource(name, dict(spec.files))
        unknown = sorted(set(self.resources) - set(graph.resources))
        if unknown:
            raise ConfigError.at("resources", f"not resources of the graph: {', '.join(unknown)}")
        # Actors passed as objects win over the graph's import paths (`lifecycle:`).
        self.strategy_actor: StrategyActor = _role(
            graph, strategy_actor, "strategy", GraphStrategy()
        )
        self.execution_actor: ExecutionActor = _role(
            graph, execution_actor, "executor", GraphExecutor()
        )
        handler = _role(graph, escalation, "escalation", None)
        self.escalation: EscalationHandler | None = (
            handler.escalate if handler is not None else None
        )
        self.work_phase = _work_phase(graph)
        """The graph's nodes before any validation: the execution actor's part."""
        self.journal = PlanJournal(self.log, self.plan_id)
        """Where the plan's events go (and, resuming, what the log holds for the steps ahead)."""
        self.boxes = PlanSandboxes(
            self.resources, plan_id=self.plan_id, home=lambda: self.home, store=self.store
        )
        """The plan's sandboxes."""
        self.round = 0
        self.revision = 0
        self.attempt = 0
        self.budget = RetryBudget(MaxNPolicy(limit=graph.policy.retry_limit))
        self.stats = PlanStatistics()
        self.rounds: list[RoundSummary] = []
        self.attempts: list[dict[str, Any]] = []
        self.records: dict[str, ValidationRecord] = {}
        self.results: dict[str, NodeResult] = {}
        self.verdict: dict[str, Any] | None = None
        self.outcome: ValidationOutcome | None = None
        """The last round's pipeline outcome."""
        self.applicable = self._applicable()
        self._retry_only: list[str] | None = None
        self._denied = False
        self._decision: EscalationDecision | None = None
        self._withdrawal: str | None = None
        self._validated: dict[str, str] | None = None
        self._fix_number = 0
        self._audit_lines: set[tuple[int, RetryDecision]] | None = None

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

    # -- what applies ---------------------------------------------------------------------

    def _applicable(self) -> list[Applicable]:
        return applicable_validations(self.graph, self.catalog, self.plan_id)

    # -- the lifecycle --------------------------------------------------------------------

    async def run(self) -> PlanOutcome:
        """Run the plan to an outcome: applied, failed, or paused for a person."""
        self._check_callable()
        with self._lease():
            # Its MCP servers open once for the whole plan; a tool one lacks is refused here,
            # before the plan starts.
            async with self._mcp_sessions():
                await anyio.to_thread.run_sync(self.executor.connect)
                await self.journal.emit(PlanStarted, **await self._started())
                return await self._drive()

    @contextlib.asynccontextmanager
    async def _mcp_sessions(self) -> AsyncIterator[None]:
        """What the plan's rounds share: its MCP sessions, and its sandboxed workers (so a
        round does not start them again)."""
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(
                open_plan_mcp_sessions(
                    self.graph,
                    catalog=self.catalog,
                    plan_id=self.plan_id,
                    isolation=self.executor.isolation,
                )
            )
            if (
                self.executor.isolation == "sandbox"
                or self.graph.policy.require_sandbox
                or any(node.isolation == "sandbox" for node in self.graph.nodes)
                or any(tool.untrusted for tool in self.graph.registry.values())
            ):
                from ._sandbox import current_pool, sandbox_pool

                # The embedder's pool where it opened one (its workers are warm), else the
                # plan's own, for all its rounds.
                if current_pool() is None:
                    await stack.enter_async_context(sandbox_pool())
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
            problem = self._callable_problem(*key)
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
            problem = self._callable_problem(False, node.tool)
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
        with self._lease():
            # Read under the lease: a log read before it may have grown since.
            mine = [e for e in await self.log.read(self.plan_id) if e.plan_id == self.plan_id]
            if not mine:
                raise ResumeError(f"plan {self.plan_id} has no events to resume from")
            steps = steps_of(mine)
            last = steps[-1] if steps else None
            paused = last.status if isinstance(last, PlanFinished) else None
            if decision is not None:
                wanted = "awaiting_approval" if decision.for_approval else "awaiting_decision"
                if paused != wanted:
                    state = paused or "running (or crashed)"
                    raise ResumeError(
                        f"plan {self.plan_id} is not waiting for "
                        f"{'an approval' if decision.for_approval else 'a decision'}: "
                        f"it is {state}"
                    )
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
                self._decision = decision
                await self.journal.emit(PlanStarted, **await self._started())
                return await self._drive()

    async def replay(self) -> PlanOutcome:
        """Run the lifecycle against the log its journal holds, never live (see
        :func:`replay_plan`): each decision is compared with the log's, each fact is read
        from it, and nothing runs, since the journal never turns live."""
        await self.journal.emit(PlanStarted, **self._started_fields(None, None))
        return await self._lifecycle()

    async def _started(self) -> dict[str, Any]:
        path, digest = await anyio.to_thread.run_sync(_graph_file, self.graph)
        return self._started_fields(path, digest)

    def _started_fields(self, path: str | None, digest: str | None) -> dict[str, Any]:
        resources = {
            name: {"kind": resource.kind, "root": os.fspath(resource.root)}
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

    def _lease(self) -> AbstractContextManager[None]:
        lease = getattr(self.log, "lease", None)
        return lease(self.plan_id) if lease is not None else contextlib.nullcontext()

    async def _drive(self) -> PlanOutcome:
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
        note: str | None = None
        while True:
            strategy = await self._strategize()
            await self.boxes.open(self.revision, replaying=self.journal.replaying)
            artifact = await self._work(strategy, None, note)
            while True:
                if _withdrawn(artifact):
                    return await self._finish(PlanStatus.FAILED, str(artifact))
                outcome = await self._validate(artifact)
                if isinstance(outcome, Passed):
                    return await self._apply()
                if isinstance(outcome, NeedsApproval):
                    return await self._finish(PlanStatus.AWAITING_APPROVAL, outcome.message)
                if self._denied:
                    return await self._finish(
                        PlanStatus.FAILED, f"denied at approval: {self._failure_text(outcome)}"
                    )
                decision, fault = await self._decide(outcome)
                if decision is RetryDecision.FIX:
                    artifact = await self._work(strategy, outcome, None, previous=artifact)
                    continue
                if decision is RetryDecision.RETRY_VALIDATOR:
                    self.stats.validator_retries += 1
                    if not self.journal.recorded_ahead:  # a recorded retry waited then
                        await wait_backoff(fault, self.budget.used_by(fault.kind), sleep=self.sleep)
                    continue
                # The budget is spent, or the fault is permanent: up the ladder.
                if (
                    decision is RetryDecision.ESCALATE_EXHAUSTED
                    and self.revision < self.graph.policy.strategy_revisions
                ):
                    self.revision += 1
                    self.stats.revisions += 1
                    await self.journal.emit(
                        StrategyRevisionRequested,
                        revision=self.revision,
                        reason=f"{self.budget.used} attempts spent: {self._failure_text(outcome)}",
                    )
                    self.budget.reset()
                    break
                escalated = await self._escalate(decision, outcome)
                if escalated is None:
                    return await self._finish(
                        PlanStatus.AWAITING_DECISION, "waiting for a person's decision"
                    )
                if escalated.action == "abort":
                    return await self._finish(
                        PlanStatus.FAILED,
                        f"aborted after escalation: {escalated.note or 'no note'}",
                    )
                self.budget.reset()
                note = escalated.note
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
        self.attempt += 1
        fix = rejection is not None or previous is not None
        self._fix_number = self._fix_number + 1 if fix else 0
        if fix:
            self.stats.fixes += 1
            await self.journal.emit(FixRequested, attempt=self.attempt, note=note)
        recorded = self.journal.take("work_finished", attempt=self.attempt)
        if recorded is not None:
            self.boxes.work_from_log = True
            if recorded.error is not None:
                return _WorkFailed(recorded.error, recorded.fault)
            return recorded.artifact
        await self.journal.go_live()
        if not fix:
            # A first Execute always starts on a fresh copy, also after a crash midway.
            await self.boxes.ensure(fresh=True)
        request = ExecuteRequest(
            plan_id=self.plan_id,
            graph=self.graph,
            strategy=strategy,
            resources=await self.boxes.views(),
            attempt=self.attempt,
            revision=self.revision,
            journal=self.journal,
        )
        artifact: Any
        try:
            if self._withdrawal is not None:
                raise WorkWithdrawn(self._withdrawal)  # given up from outside: no more work
            if not fix:
                with current_span(self.log, self.plan_id, "work"):
                    artifact = await self.execution_actor.execute(request)
            else:
                failures = tuple(
                    {
                        "node": r.node,
                        "validation": r.validation,
                        "message": r.result.message,
                        "data": r.result.data,
                    }
                    for r in self.records.values()
                    if r.blocking
                )
                with current_span(self.log, self.plan_id, "work"):
                    artifact = await self.execution_actor.fix(
                        FixRequest(
                            **msgspec.structs.asdict(request),
                            artifact=previous,
                            rejection=self.verdict or {},
                            failures=failures,
                            note=note,
                            fix=self._fix_number,
                        )
                    )
        except WorkWithdrawn as exc:
            artifact = _WorkFailed(f"withdrawn: {exc}", WITHDRAWN)
        except ConfigError as exc:
            # A work tool that cannot be called: no fix of the work changes that.
            artifact = _WorkFailed(str(exc), MISCONFIGURED)
        except RuntimeFault as exc:
            artifact = _WorkFailed(f"{type(exc).__name__}: {exc}", RUNTIME_FAULT)
        except Exception as exc:
            artifact = _WorkFailed(f"{type(exc).__name__}: {exc}")
        except BaseException as exc:
            if not _actor_failure(exc):
                raise
            # From the execution actor: its failure; the program goes on (exit code 3 means
            # "waiting for a person" to our CLI, and a plan must not end as that silently).
            artifact = _WorkFailed(f"the execution actor raised {exc!r}")
        failed = isinstance(artifact, _WorkFailed)
        await self.journal.emit(
            WorkFinished,
            attempt=self.attempt,
            artifact=None if failed else _jsonable(artifact),
            error=str(artifact) if failed else None,
            fault=artifact.fault if isinstance(artifact, _WorkFailed) else None,
        )
        return artifact

    def withdraw(self, reason: str) -> None:
        """Give the plan up from outside (a gate's program left, or was cancelled): a round
        under way is not applied, and the plan fails at its next step, saying ``reason``."""
        self._withdrawal = reason

    async def _apply_refusal(self) -> str | None:
        """Why the round that passed must not be applied, or None: the plan was withdrawn,
        or its sandboxes changed while they were validated (a write after the artifact was
        handed over). Invariant: only what the validations saw is applied."""
        if self._withdrawal is not None:
            return f"withdrawn before Apply: {self._withdrawal}"
        if self._validated is None or self.journal.offline:
            return None  # nothing recorded to compare with (a replay has no sandboxes)
        await self.boxes.ensure()  # resuming, Apply may be the first live step
        if await self.boxes.inputs(pin=False) != self._validated:
            return (
                "the sandboxes changed while they were being validated (written after the "
                "work was handed over): nothing applied"
            )
        return None

    async def _validate(self, artifact: Any) -> ValidationOutcome:
        """One pipeline round: routing → payload → semantic → approval (seed 002 §6)."""
        # What the round validates; Apply commits only that (see _apply_refusal).
        recorded = self.journal.peek()
        if isinstance(recorded, ArtifactValidationStarted):
            inputs = recorded.inputs  # what the round saw when it ran (resuming or replaying)
        elif recorded is None and not self.journal.offline:
            await self.boxes.ensure()  # resuming, the round may be the first live step
            inputs = await self.boxes.inputs(pin=True)
        else:
            inputs = None  # the log holds something else here: the emit below says what
        if self._retry_only is not None and inputs != self._validated:
            # The sandboxes changed since the round this one re-runs part of: what the other
            # validations saw is not what is there now, so every validation runs again.
            self._retry_only = None
        self._validated = inputs
        self.round += 1
        self.stats.rounds += 1
        await self.journal.emit(
            ArtifactValidationStarted,
            round=self.round,
            attempt=self.attempt,
            revision=self.revision,
            inputs=inputs,
        )
        layers = {
            "routing": self._routing,
            "payload": self._payload,
            "semantic": self._semantic,
            "approval": self._approval,
        }
        outcome: ValidationOutcome = Passed()
        for layer in LAYERS:  # seed 002 §5.2: a fixed order; the first rejection ends it
            began = time.perf_counter()
            outcome = self.journal.settle(
                layer, await layers[layer](artifact), artifact, self.round
            )
            spent = self.stats.layer_seconds.get(layer, 0.0) + time.perf_counter() - began
            self.stats.layer_seconds[layer] = spent
            if not isinstance(outcome, Passed):
                break
        summary = RoundSummary(
            revision=self.revision,
            attempt=self.attempt,
            passed=isinstance(outcome, Passed),
            failures=tuple(str(r) for r in outcome.reasons)
            if isinstance(outcome, Rejected)
            else (),
        )
        self.rounds.append(summary)
        self.outcome = outcome
        if isinstance(outcome, Rejected):
            self.stats.rejection_reasons[outcome.layer] = (
                self.stats.rejection_reasons.get(outcome.layer, 0) + 1
            )
            await self.journal.emit(
                ArtifactRejected,
                round=self.round,
                layer=outcome.layer,
                reasons=[str(r) for r in outcome.reasons],
                verdict=self.verdict if outcome.layer == "semantic" else None,
            )
        elif isinstance(outcome, Passed):
            self.stats.pipeline_completions += 1
            await self._audit(RetryDecision.ATTESTED, None, "")
            await self.journal.emit(ArtifactValidated, round=self.round, verdict=self.verdict or {})
        return outcome

    async def _routing(self, artifact: Any) -> ValidationOutcome:
        """The transition Execute → Apply needs an artifact, and every applicable validation
        callable (seed 002 §8: "required capabilities are available")."""
        if isinstance(artifact, _WorkFailed):
            return Rejected("routing", (work_failed_reason(str(artifact), artifact.fault),))
        if self.journal.offline:
            # Whether each validation could be prepared then is not recorded (preparing it
            # now would import its code): a replay takes such a rejection from the log.
            return Passed()
        reasons = []
        # Once per distinct validation, not per node: a fan-out of 100,000 nodes running one
        # validation prepares it once.
        problems: dict[tuple[bool, str], str | None] = {}
        for item in self.applicable:
            key = (item.attachment_id is not None, item.validation)
            if key not in problems:
                problems[key] = self._callable_problem(*key)
            problem = problems[key]
            if problem is not None:
                reasons.append(uncallable_reason(item.id, problem))
        return Rejected("routing", tuple(reasons)) if reasons else Passed()

    def _callable_problem(self, attached: bool, name: str) -> str | None:
        """Why the validation cannot be called now (removed or broken since the plan
        started: a missing capability), or None."""
        getter = self.catalog.get if attached and self.catalog else self.graph.get_tool
        # Code that only runs sandboxed is checked without being loaded here.
        runs = {n.isolation for n in self.graph.nodes if n.target == name} or {None}
        isolation = self.executor.isolation if runs == {None} else None
        sandboxed_only = runs == {"sandbox"} or isolation == "sandbox"
        try:
            prepare(
                getter(name),
                getter,
                isolation="sandbox" if sandboxed_only else None,
                sandboxed=self.graph.policy.require_sandbox,
            )
        except (ConfigError, CatalogError, KeyError) as exc:
            return str(exc)
        return None

    async def _payload(self, artifact: Any) -> ValidationOutcome:
        reasons = check_payload(artifact, self.graph.lifecycle.artifact_schema)
        return Rejected("payload", reasons) if reasons else Passed()

    def _given(self, artifact: Any) -> dict[str, Any]:
        return given_outputs(self.work_phase, artifact)

    async def _semantic(self, artifact: Any) -> ValidationOutcome:
        """The attached and graph validations, fanned out concurrently (seed 000, Execute).

        A validator-only retry (an infrastructure fault) re-runs the failed nodes and every
        node after them; the rest of the round's outputs are given. Resuming, what the log
        shows completed in this round is taken from it and only the rest runs.
        """
        given = self._given(artifact)
        retry_only = self._retry_only
        self._retry_only = None
        if retry_only:
            select: Sequence[str] = with_descendants(self.graph, retry_only)
            given.update(
                {
                    node: result.output
                    for node, result in self.results.items()
                    if node not in select and result.status.value == "ok"
                }
            )
        else:
            select = list(self._validation_phase()) + [
                a.id for a in self.applicable if a.attachment_id
            ]
            self.results = {}
            self.records = {}
        done = await self._fan_out(select, given, artifact, retry=bool(retry_only))
        self.results.update(done)
        self.records.update({n: r for n, r in done.items() if isinstance(r, ValidationRecord)})
        outcome, self.verdict = semantic_outcome(
            self.plan_id, self.graph, self.applicable, self.records, self.results
        )
        if isinstance(outcome, Rejected) and self.graph.policy.confirm_failures:
            return await self._confirm(outcome, artifact)
        return outcome

    async def _fan_out(
        self, select: Sequence[str], given: dict[str, Any], artifact: Any, *, retry: bool
    ) -> dict[str, NodeResult]:
        """Run the validation nodes ``select`` concurrently: what the log holds of them is
        taken from it (resuming), the rest runs. Returns every node that ended, by id."""
        done: dict[str, NodeResult] = {}
        if self.journal.replaying:
            done, select = await self._from_log(select, given, retry=retry)
        if select:
            run: GraphRun = await execute_graph(
                self.graph,
                catalog=self.catalog,
                resources=await self.boxes.views(),
                max_concurrency=self.executor.max_concurrency,
                isolation=self.executor.isolation,
                select=select,
                given=given,
                artifact=artifact,
                attempt=self.attempt,
                **self.journal.engine_arguments(),
            )
            self.journal.advance(run)
            done.update(run.nodes)
        self.stats.semantic_invocations += sum(
            isinstance(r, ValidationRecord) for r in done.values()
        )
        return done

    async def _confirm(self, outcome: Rejected, artifact: Any) -> Passed | Rejected:
        """Run the failing required validations once more on the same inputs before a fix
        is asked for (seed 000, Risks: flaky validations). One that passes now is flaky:
        its failure becomes an infrastructure fault (kind ``flaky``), re-run on the shared
        budget; one that fails again is confirmed. Neither is ever skipped."""
        failing = [
            r.node
            for r in outcome.reasons
            if r.node is not None
            and r.error is None
            and isinstance(self.records.get(r.node), ValidationRecord)
            and self.records[r.node].blocking
        ]
        if not failing:
            return outcome
        await self.journal.emit(ConfirmationStarted, round=self.round, nodes=failing)
        given = self._given(artifact)
        given.update({n: r.output for n, r in self.results.items() if r.status is NodeStatus.OK})
        again = await self._fan_out(failing, given, artifact, retry=True)
        flaky = [
            node
            for node in failing
            if isinstance(record := again.get(node), ValidationRecord) and record.result.passed
        ]
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
            self.stats.flakes[first.validation] = self.stats.flakes.get(first.validation, 0) + 1
            if self.catalog is not None and not self.journal.offline:
                await anyio.to_thread.run_sync(
                    functools.partial(
                        self.catalog.record_flake,
                        first.validation,
                        plan_id=self.plan_id,
                        round=self.round,
                        node=node,
                        detail="failed, then passed when run again on the same inputs",
                    )
                )
        outcome_now, self.verdict = semantic_outcome(
            self.plan_id, self.graph, self.applicable, self.records, self.results
        )
        return outcome_now

    async def _from_log(
        self, select: Sequence[str], given: dict[str, Any], *, retry: bool
    ) -> tuple[dict[str, NodeResult], list[str]]:
        """Take the round's results the log holds; return them, and what is left to run
        (nothing if the log shows the round ended). Completed nodes' outputs go into
        ``given``."""
        modes = {a.id: a.mode for a in self.applicable}
        done: dict[str, NodeResult] = {}
        events = self.journal.engine_events()
        for event in events:
            node = getattr(event, "node", None)
            if node is None:
                continue
            result = logged_result(event, self._kind(node), modes.get(node))
            if result is not None:
                done[node] = result
        if self.journal.peek() is not None:
            self.journal.check_round(self.round, events, done, select, modes, retry=retry)
            return done, []  # the log goes on past this round: its fan-out finished
        # The log ends inside this round: the process died mid fan-out.
        await self.journal.go_live()
        given.update({n: r.output for n, r in done.items() if r.status is NodeStatus.OK})
        failed = [n for n, r in done.items() if r.status is not NodeStatus.OK]
        doomed = set(with_descendants(self.graph, failed)) - set(done) if failed else set()
        for node in select:
            if node in doomed:
                # Its skip was not logged before the crash: log it now, as the engine would.
                cause = next(n for n in failed if node in with_descendants(self.graph, [n]))
                reason = f"skipped: {cause} {done[cause].status.value}"
                await self.journal.emit(NodeSkipped, node=node, reason=reason)
                done[node] = NodeResult(
                    node=node,
                    kind=self._kind(node),
                    status=NodeStatus.SKIPPED,
                    error=reason,
                    attempt=self.attempt,
                )
        return done, [n for n in select if n not in done and n not in doomed]

    def _kind(self, node: str) -> str:
        try:
            return self.graph.node(node).kind.value
        except KeyError:
            return "validation" if node.startswith(ATTACHMENT) else "work"

    def _validation_phase(self) -> list[str]:
        work = set(self.work_phase)
        return [n.id for n in self.graph.nodes if n.id not in work]

    async def _approval(self, artifact: Any) -> ValidationOutcome:
        ran = [*self.work_phase, *self.records]
        outcome = self.journal.approval(
            check_approval(self.graph, ran, auto_approve=self.auto_approve)
        )
        if not isinstance(outcome, NeedsApproval):
            return outcome
        await self.journal.emit(
            ApprovalRequired, round=self.round, tier=outcome.tier, message=outcome.message
        )
        asked_at = self.journal.last_at
        answer = await self._person(
            EscalationRequest(
                plan_id=self.plan_id,
                reason="approval",
                message=outcome.message,
                verdict=self.verdict,
                history=tuple(self.rounds),
                tier=outcome.tier,
            ),
            asked_at=asked_at,
        )
        if answer is None:
            return outcome  # nobody to ask: the plan pauses, durably
        if answer.action == "approve":
            return Passed()
        self._denied = True
        return Rejected(
            "approval",
            (
                Reason(
                    layer="approval",
                    message=f"denied by a person: {answer.note or 'no note'}",
                ),
            ),
        )

    async def _person(
        self, request: EscalationRequest, *, asked_at: float = 0.0
    ) -> EscalationDecision | None:
        """A person's answer to an escalation or an approval: from the log (resuming), from
        the decision given to :meth:`resume`, or from the escalation handler; None when
        there is nobody to ask, and the plan pauses."""
        approval = request.reason == "approval"
        tag = "approval_decided" if approval else "escalation_decided"
        pause = (PlanStatus.AWAITING_APPROVAL if approval else PlanStatus.AWAITING_DECISION).value
        journal = self.journal
        recorded = journal.take(tag)
        if recorded is None:
            ahead = journal.peek()
            if isinstance(ahead, PlanFinished) and ahead.status == pause:
                after = journal.peek_after()
                if after is not None and event_tag(after) == tag:
                    journal.take("plan_finished")  # the pause, answered by a later run
                    recorded = journal.take(tag)
                elif after is None and self._decision is not None:
                    journal.take("plan_finished")
                else:
                    return None  # still paused: the pause is the log's next step
        if recorded is not None:
            if isinstance(recorded, ApprovalDecided):
                self.stats.approval_wait_seconds += recorded.waited
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
        if self._decision is not None and self._decision.for_approval == approval:
            answer, self._decision = self._decision, None
            await journal.go_live()
        elif self.escalation is not None:
            await journal.go_live()
            with current_span(self.log, self.plan_id, "approval" if approval else "escalation"):
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
            self.stats.approval_wait_seconds += waited
            await journal.emit(
                ApprovalDecided,
                approved=answer.action == "approve",
                note=answer.note,
                waited=waited,
            )
        else:
            await journal.emit(EscalationDecided, action=answer.action, note=answer.note)
        return answer

    # -- the failure ladder ---------------------------------------------------------------

    async def _decide(self, outcome: Rejected) -> tuple[RetryDecision, FaultKind]:
        """Max-N (seed 003): one shared budget across rejections and infrastructure faults."""
        faults = round_faults(outcome)
        decision = self.budget.decide_round(faults)
        fault = primary_fault(faults) or faults[0]
        await self._audit(decision, fault, self._failure_text(outcome))
        await self.journal.emit(
            RetryDecided,
            round=self.round,
            attempt=self.attempt,
            fault_kind=fault.kind,
            classification=fault.classification.value,
            decision=decision.value,
            budget_used=self.budget.used,
            budget_limit=self.budget.limit,
        )
        if decision is RetryDecision.RETRY_VALIDATOR:
            self._retry_only = retry_only_nodes(outcome)
        return decision, fault

    async def _audit(self, decision: RetryDecision, fault: FaultKind | None, detail: str) -> None:
        """One seed 003 audit line per round (the file write blocks: a worker thread)."""
        attempt = Attempt.create(self.plan_id, self.round, decision, fault, detail or None)
        journal = self.journal
        if not (journal.recorded_ahead or journal.offline) and not await self._audited(attempt):
            await anyio.to_thread.run_sync(self.audit.record, attempt)
        self.attempts.append(attempt.to_audit())

    async def _audited(self, attempt: Attempt) -> bool:
        """Whether an earlier run wrote this round's line before it died (resuming only:
        the line is written before the event that follows it, so a crash between leaves
        the line and not the event)."""
        if not self.journal.resumed:
            return False
        if self._audit_lines is None:
            found = await anyio.to_thread.run_sync(self.audit.read, self.plan_id)
            self._audit_lines = {(a.attempt, a.decision) for a in found}
        return (attempt.attempt, attempt.decision) in self._audit_lines

    def _failure_text(self, outcome: ValidationOutcome) -> str:
        if isinstance(outcome, Rejected):
            return "; ".join(str(r) for r in outcome.reasons)[:500]
        return ""

    async def _escalate(
        self, decision: RetryDecision, outcome: Rejected
    ) -> EscalationDecision | None:
        reason = "permanent" if decision is RetryDecision.ESCALATE_PERMANENT else "exhausted"
        message = self._failure_text(outcome)
        self.stats.escalations += 1
        await self.journal.emit(EscalationRequested, reason=reason, message=message)
        return await self._person(
            EscalationRequest(
                plan_id=self.plan_id,
                reason=reason,  # type: ignore[arg-type]
                message=message,
                verdict=self.verdict,
                history=tuple(self.rounds),
            )
        )

    # -- Apply ----------------------------------------------------------------------------

    async def _apply(self) -> PlanOutcome:
        """Commit every sandbox's changeset (seed 000: Apply is never validated)."""
        # Invariant: reached only from a Passed pipeline outcome.
        ahead = self.journal.peek()
        if isinstance(ahead, PlanFinished) and self.journal.recorded_ahead:
            # Refused then, before Apply began (a refusal always fails the plan: a log that
            # says otherwise does not match, and the resume stops there).
            return await self._finish(PlanStatus.FAILED, ahead.message)
        refusal = None if self.journal.recorded_ahead else await self._apply_refusal()
        if refusal is not None:
            return await self._finish(PlanStatus.FAILED, refusal)
        names = sorted(self.resources)
        await self.journal.emit(ApplyStarted, resources=names)
        recorded = self.journal.take("apply_completed")
        refused = self.journal.peek() if recorded is None else None
        if isinstance(refused, PlanFinished) and self.journal.recorded_ahead:
            # A resource refused its changeset once Apply had begun, changing nothing.
            return await self._finish(PlanStatus.FAILED, refused.message)
        if recorded is not None:
            changes = dict(recorded.changes)
        else:
            await self.journal.go_live()
            try:
                changes = await self._commit(names, interrupted=isinstance(ahead, ApplyStarted))
            except _Refused as refused:
                # The real resource changed since the sandbox was taken (or the changeset
                # cannot apply): it refused, changing nothing, before any resource applied.
                return await self._finish(PlanStatus.FAILED, f"not applied: {refused.error}")
            await self.journal.emit(ApplyCompleted, changes=changes)
        # The log holds the apply now: the resources' own markers of it may go (a replay's
        # resources are stand-ins: it touches none).
        for name in [] if self.journal.offline else names:
            release = getattr(self.resources[name], "release", None)
            if release is None:
                continue
            try:
                await anyio.to_thread.run_sync(functools.partial(release, plan_id=self.plan_id))
            except ApplyConflictError as kept:
                # Applied all the same: the markers stay (they keep the plan from being
                # applied twice), and the next resume of the plan removes them.
                warnings.warn(
                    f"plan {self.plan_id}: applied, but {kept}", RuntimeWarning, stacklevel=1
                )
        return await self._finish(PlanStatus.APPLIED, "applied", changes=changes)

    async def _commit(self, names: Sequence[str], *, interrupted: bool) -> dict[str, str]:
        """Apply each resource's changeset; ``interrupted``: a crash during an earlier
        Apply (its log holds ``apply_started``), which each resource recovers first."""
        changes: dict[str, str] = {}
        resumed = self.journal.resumed
        if resumed:
            # A crash during Apply: each resource finishes (or drops) its own interrupted
            # apply; one that passed its point of no return is done, never applied again.
            for name in names:
                resource = self.resources[name]
                await anyio.to_thread.run_sync(
                    functools.partial(resource.recover, plan_id=self.plan_id)
                )
        await self.boxes.ensure()
        for name in names:
            sandbox = self.boxes.held[name]
            resource = self.resources[name]
            changeset = await anyio.to_thread.run_sync(sandbox.changeset)
            if resumed and await anyio.to_thread.run_sync(resource.applied, self.plan_id):
                changes[name] = changeset.summary()
                continue
            # Applied even when empty: the resource then records the plan as applied, so
            # Apply stays at most once.
            try:
                await anyio.to_thread.run_sync(
                    functools.partial(resource.apply, sandbox, changeset, plan_id=self.plan_id)
                )
            except ApplyConflictError as exc:
                if changes or interrupted or isinstance(exc, ApplyTwiceError):
                    raise  # another resource applied already: resume recovers, never half
                raise _Refused(exc) from exc
            changes[name] = changeset.summary()
        return changes

    async def _finish(
        self, status: PlanStatus, message: str, *, changes: dict[str, str] | None = None
    ) -> PlanOutcome:
        await self.journal.emit(PlanFinished, status=status.value, message=message)
        return PlanOutcome(
            plan_id=self.plan_id,
            status=status,
            message=message,
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
    return isinstance(artifact, _WorkFailed) and artifact.fault == WITHDRAWN


class _Refused(Exception):
    """The first resource refused its changeset (:class:`ApplyConflictError`): nothing was
    applied anywhere."""

    def __init__(self, error: ApplyConflictError) -> None:
        super().__init__(str(error))
        self.error = error


class _WorkFailed(str):
    """The execution actor raised: the pipeline's routing layer rejects its non-artifact.

    ``fault`` is the fault kind when the work cannot fix it (``misconfigured``,
    ``runtime_fault``); ``None`` sends it back to the execution actor as a fix.
    """

    fault: str | None

    def __new__(cls, text: str, fault: str | None = None) -> Self:
        failed = super().__new__(cls, text)
        failed.fault = fault
        return failed


async def run_plan(
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
    strategy_actor: StrategyActor | Callable[[StrategyRequest], Awaitable[Any]] | None = None,
    execution_actor: ExecutionActor | Callable[[ExecuteRequest], Awaitable[Any]] | None = None,
    store: ContentStore | None = None,
    store_retention: StoreRetention | None = None,
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
    """
    supervisor = Supervisor(
        graph,
        catalog=catalog,
        event_log=event_log,
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
    )
    return await supervisor.run()


async def resume_plan(
    plan_id: str,
    graph: PlanGraph,
    *,
    event_log: EventLog,
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
) -> PlanOutcome:
    """Continue plan ``plan_id`` from its log in ``event_log`` (see :meth:`Supervisor.resume`).

    A plan that ran with actors passed as objects (``strategy_actor``,
    ``execution_actor``) needs the same actors passed again here.

    Use it after the plan's process died, or with ``decision`` to answer a plan paused for a
    person: ``EscalationDecision(action="retry" | "abort")`` for ``awaiting_decision``,
    ``EscalationDecision(action="approve" | "deny")`` for ``awaiting_approval``. ``graph``
    and ``catalog`` must be those the plan ran with; ``resources`` and ``auto_approve``
    default to what the log records (the folders of its directory resources). The log's
    decisions and options are checked against them: :class:`ResumeError` when they differ.
    """
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
        catalog=catalog,
        event_log=event_log,
        resources=resources,
        escalation=escalation,
        executor=executor,
        plan_id=plan_id,
        audit=audit,
        auto_approve=auto_approve,
        home=home,
        strategy_actor=strategy_actor,
        execution_actor=execution_actor,
        store=store,
        store_retention=store_retention,
    )
    return await supervisor.resume(decision=decision)


def run_plan_sync(graph: PlanGraph, **options: Any) -> PlanOutcome:
    """:func:`run_plan` for code without an event loop (the same keyword arguments).

    It runs its own event loop (asyncio) in the calling thread, so it may be called from
    any thread that is not running one — also while another thread's loop runs. Called
    from inside a running event loop it raises :class:`RuntimeError`: ``await run_plan``
    there instead.
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
            found[name] = DirectoryResource(name, spec["root"])
    return found or None
