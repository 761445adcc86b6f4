"""LangGraph adapter: gate a StateGraph's proposed change with gategraph validations.

::

    builder.add_node("gate", GateNode(["python_syntax"]))
    builder.add_conditional_edges(
        "gate", route, {"pass": END, "fix": "propose", "retry": "gate", "escalate": END}
    )

- :class:`GateNode` validates the change a node proposed (``state["change"]``: a mapping
  of files or a folder; or ``state["artifact"]``) and writes the verdict into
  ``state["verdict"]``; :func:`route` turns the verdict into a conditional edge.
- :class:`ApprovalNode` applies the change to a folder through a gategraph plan that asks a
  person first, with LangGraph's ``interrupt()``; ``Command(resume="approve")`` continues
  the same plan.
- :class:`ValidationNode` runs one validation over a state key; :class:`GraphTool` makes a
  compiled graph a gategraph tool.

Every node is sync (``invoke``, and ``ainvoke`` runs it in a thread) and has an async
twin, ``node.acall``, for ``ainvoke``. What a node writes into the state is plain JSON,
so any checkpointer stores it. Install with ``pip install 'gategraph[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import anyio
import anyio.to_thread
import msgspec
from gategraph.runtime._eventlog import SQLiteEventLog, default_event_log_path
from gategraph.runtime._events import ApprovalDecided, PlanFinished
from gategraph.runtime._exceptions import ConfigError
from gategraph.runtime._maxn import MaxNPolicy, RetryBudget, RetryDecision, primary_fault
from gategraph.runtime._models import Validation
from gategraph.runtime._pipeline import Reason
from gategraph.runtime._protocols import EscalationDecision
from gategraph.runtime._supervisor import PlanStatus, resume_plan, run_plan
from gategraph.runtime._sync import _running_loop, run_sync
from gategraph.runtime._validate import Verdict, graph_spec, load_spec, validate
from typing_extensions import TypedDict

try:
    from langgraph.types import interrupt
except ImportError as error:  # pragma: no cover - a base install; tested by hiding langgraph
    raise ImportError(
        "gategraph.runtime.integrations.langgraph needs LangGraph: "
        f"pip install 'gategraph[langgraph]' ({error})"
    ) from error

if TYPE_CHECKING:
    from pathlib import Path

    from gategraph.runtime._catalog import Catalog
    from gategraph.runtime._eventlog import EventLog
    from gategraph.runtime._maxn import FaultKind
    from gategraph.runtime._protocols import ExecuteRequest
    from gategraph.runtime._supervisor import PlanOutcome

__all__ = [
    "ApprovalNode",
    "GateNode",
    "GateState",
    "GraphTool",
    "Route",
    "ValidationNode",
    "route",
    "thread_plan_prefix",
]

Route = Literal["pass", "fix", "retry", "escalate"]
"""Where :func:`route` sends a graph after a verdict."""

# LangGraph hands a node its run's config when the node's `config` parameter is annotated
# `RunnableConfig` — it reads the annotation's text — so this alias carries that name.
RunnableConfig = Mapping[str, Any]

_ROUTES: Final[Mapping[str, Route]] = {
    RetryDecision.ATTESTED.value: "pass",
    RetryDecision.FIX.value: "fix",
    RetryDecision.RETRY_VALIDATOR.value: "retry",
    RetryDecision.ESCALATE_EXHAUSTED.value: "escalate",
    RetryDecision.ESCALATE_PERMANENT.value: "escalate",
}
_SLUG: Final = re.compile(r"[^A-Za-z0-9_-]+")
# Where a ValidationNode's change is mounted: a name no attachment uses, so a catalog gives
# the node its validation's definition and nothing more (attachments are a GateNode's).
_NODE_RESOURCE: Final = "langgraph-validation-node"
_ANSWERS: Final = "'approve' or 'deny', or {'action': 'approve' | 'deny', 'note': '...'}"
_DENIED: Final = "denied"  # the fault of a verdict whose change a person denied


class GateState(TypedDict, total=False):
    """The state keys the nodes of this module read and write by default: extend it with
    your own (``class State(GateState): messages: ...``) or declare the same keys."""

    change: dict[str, str | bytes] | str
    """The proposed change: relative path → text or bytes, or a folder's path."""
    artifact: Any
    """A value to judge instead of (or beside) files: what validations get as ``artifact``."""
    verdict: dict[str, Any] | None
    """The last verdict (see :class:`GateNode`); it also carries the retry budget."""


# -- the verdict in the state --------------------------------------------------------------


def _budget_of(
    policy: MaxNPolicy, previous: Any, where: str
) -> tuple[RetryBudget, list[list[str]]]:
    """The thread's budget, rebuilt from the previous verdict in the state: the fault kinds
    of each retried round, replayed. Nothing is kept in memory, so the budget is whatever
    the checkpoint holds: a new process, a resumed thread, a fresh node object all agree.
    A verdict that passed ends its budget; the next round starts a fresh one."""
    budget = RetryBudget(policy)
    if previous is None:
        return budget, []
    if not isinstance(previous, Mapping):
        raise ConfigError.at(where, f"is a {type(previous).__name__}, not a verdict")
    if previous.get("passed") is True or previous.get("budget") is None:
        return budget, []
    block = previous["budget"]
    rounds = block.get("rounds") if isinstance(block, Mapping) else None
    if not isinstance(rounds, list) or not all(
        isinstance(kinds, list) and all(isinstance(kind, str) for kind in kinds) for kinds in rounds
    ):
        raise ConfigError.at(
            f"{where}.budget",
            "is not a budget a gategraph node wrote: set the verdict to None to start over",
        )
    for kinds in rounds:
        faults = [policy.catalogue[kind] for kind in kinds if kind in policy.catalogue]
        if faults:
            budget.decide_round(faults)
    return budget, [list(kinds) for kinds in rounds]


def _spent(budget: RetryBudget, before: int, used_by: Mapping[str, int]) -> list[str] | None:
    """The fault kinds of the round just decided, if it consumed a slot."""
    if budget.used == before:
        return None
    return [kind for kind, used in used_by.items() if budget.used_by(kind) > used]


class _Ledger:
    """One round's view of the thread's budget: restored from the state, then recorded."""

    __slots__ = ("before", "budget", "rounds", "used_by")

    def __init__(self, policy: MaxNPolicy, previous: Any, where: str) -> None:
        self.budget, self.rounds = _budget_of(policy, previous, where)
        self.before = self.budget.used
        self.used_by = {kind: self.budget.used_by(kind) for kind in policy.catalogue}

    def block(self) -> dict[str, Any]:
        """The budget as the verdict carries it."""
        kinds = _spent(self.budget, self.before, self.used_by)
        rounds = self.rounds if kinds is None else [*self.rounds, kinds]
        return {"used": self.budget.used, "limit": self.budget.limit, "rounds": rounds}


def _state_verdict(verdict: Verdict, ledger: _Ledger, **extra: Any) -> dict[str, Any]:
    """A verdict as plain JSON, for the state (and so for any checkpointer)."""
    failures = [
        {
            "validation": record.validation,
            "node": record.node,
            "message": record.result.message,
            "error": record.result.data.get("error"),
        }
        for record in verdict.failures
    ]
    state = {
        "passed": verdict.passed,
        "decision": verdict.decision.value,
        "fault": verdict.fault,
        "feedback": verdict.feedback,
        "findings": verdict.findings,
        "failures": failures,
        "plan_id": verdict.plan_id,
        "retry_after": verdict.retry_after,
        "budget": ledger.block(),
        **extra,
    }
    return msgspec.to_builtins(state)  # type: ignore[no-any-return]


def route(state: Mapping[str, Any], key: str = "verdict") -> Route:
    """Where to go after a gate: ``pass`` (attested), ``fix`` (back to whoever made the
    change, with ``verdict["feedback"]``), ``retry`` (a validation could not decide: run
    the gate again, the change is not at fault) or ``escalate`` (the retry budget is spent,
    retrying cannot help, or a person denied the change).

    For ``add_conditional_edges(gate, route, {"pass": ..., "fix": ..., "retry": ...,
    "escalate": ...})``; ``key`` is the state key the verdict is in.
    """
    verdict = state.get(key)
    if not isinstance(verdict, Mapping):
        raise ConfigError.at(
            f"state[{key!r}]", "holds no verdict: route after a gategraph gate node"
        )
    decision = verdict.get("decision")
    found = _ROUTES.get(decision) if isinstance(decision, str) else None
    if found is None:
        raise ConfigError.at(
            f"state[{key!r}].decision", f"{decision!r} is not a decision of a gategraph verdict"
        )
    return found


# -- event logs ------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _opened(event_log: Any) -> AsyncIterator[EventLog | None]:
    """The event log of one node call: a path is opened (SQLite) for the call, since a sync
    node runs each call on an event loop of its own; a log object is used as it is."""
    if event_log is None or not isinstance(event_log, str | os.PathLike):
        yield event_log
        return
    async with SQLiteEventLog(event_log) as log:
        yield log


def _check_log(event_log: Any, where: str) -> None:
    if event_log is None or isinstance(event_log, str | os.PathLike):
        return
    if not callable(getattr(event_log, "read", None)) or not callable(
        getattr(event_log, "append", None)
    ):
        raise ConfigError.at(
            where,
            f"a {type(event_log).__name__} is not an event log: give a path (a SQLite log) "
            "or an EventLog such as MemoryEventLog()",
        )


# -- the change in the state -----------------------------------------------------------------


def _checked_files(value: Any, where: str) -> Mapping[str, str | bytes] | str | os.PathLike[str]:
    """The change in the state, checked before anything runs: a folder, or a mapping of
    relative paths (that stay inside the folder) to text or bytes."""
    if isinstance(value, str | os.PathLike):
        return value
    if isinstance(value, Mapping):
        for key, content in value.items():
            if not isinstance(key, str) or not isinstance(content, str | bytes):
                raise ConfigError.at(
                    where,
                    f"a change maps relative paths to text or bytes; {key!r} maps to "
                    f"{type(content).__name__}",
                )
            parts = PurePosixPath(key.replace("\\", "/")).parts
            if not parts or parts[0] == "/" or ".." in parts:
                raise ConfigError.at(where, f"{key!r} is not a relative path inside the folder")
        return value
    raise ConfigError.at(
        where,
        f"a change is a mapping of files (relative path → text) or a folder, "
        f"not {type(value).__name__}",
    )


def _write_change(root: Path, change: Mapping[str, str | bytes] | str | os.PathLike[str]) -> None:
    """Write the change into a sandbox folder: the files of a mapping, or a folder's tree."""
    if not isinstance(change, Mapping):
        shutil.copytree(os.fspath(change), root, dirs_exist_ok=True)
        return
    base = root.resolve()
    for relative, content in change.items():
        target = (base / relative).resolve()
        if target == base or base not in target.parents:
            raise ConfigError.at("change", f"{relative!r} is not a relative path inside the folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")


# -- plan ids from threads -------------------------------------------------------------------


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def thread_plan_prefix(thread_id: str) -> str:
    """The prefix of the ids of the plans an :class:`ApprovalNode` ran for a thread: list a
    thread's plans with ``[p for p in await log.plans() if p.startswith(prefix)]``."""
    text = str(thread_id)
    return f"lg-{_SLUG.sub('_', text)[:60]}-{_digest(text, 8)}-"


def _plan_id(config: RunnableConfig | None) -> str:
    """The plan of this node's task: the same on every run of the task, and so on the run
    LangGraph makes when the task resumes after ``interrupt()``; another for each new task
    (the next round, another node, a fork of the thread)."""
    configurable = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    if thread is None or thread == "":
        raise ConfigError.at(
            "config.configurable.thread_id",
            "an approval node needs a thread: compile the graph with a checkpointer and "
            "invoke it with config={'configurable': {'thread_id': ...}}",
        )
    # `node:task-id` (a subgraph's task: its parents' first, `|`-separated). The task id is
    # derived from the checkpoint the task started from, so a resumed task keeps it.
    namespace = configurable.get("checkpoint_ns")
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError.at(
            "config.configurable.checkpoint_ns",
            "names no task: an approval node runs as a node of a LangGraph graph",
        )
    node = namespace.rsplit("|", 1)[-1].split(":", 1)[0]
    slug = _SLUG.sub("_", node)[:40] or "node"
    return f"{thread_plan_prefix(str(thread))}{slug}-{_digest(namespace, 12)}"


# -- the gate node ---------------------------------------------------------------------------


def _forget_async_library() -> None:
    sniffio = sys.modules.get("sniffio")  # anyio asks it only when it is imported
    if sniffio is not None:
        sniffio.current_async_library_cvar.set(None)


class _Node:
    """Shared by the nodes: the sync call (on an event loop of its own) and its twin."""

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        raise NotImplementedError

    def __call__(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """Run the node (for ``invoke``; under ``ainvoke`` LangGraph runs it in a thread)."""
        running = _running_loop()
        if running is not None:
            raise RuntimeError(
                f"the sync {type(self).__name__} was called on a thread that runs a {running} "
                "event loop (invoke() inside async code): use `await graph.ainvoke(...)` "
                "there, with the node added as `node.acall`"
            )
        # No loop runs in this thread, but under ainvoke the thread runs in a copy of the
        # loop's context, whose "current async library" would make anyio refuse to start
        # one: forget it in a copy of the context (LangGraph's own variables stay).
        context = contextvars.copy_context()
        context.run(_forget_async_library)
        return context.run(run_sync, self._run, state, config)

    async def acall(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """Run the node on the running event loop: add ``node.acall`` for ``ainvoke``."""
        return await self._run(state, config)


def _listed(validations: Iterable[Any]) -> list[Any]:
    """The validations as a list (one on its own is the obvious meaning), read once: a node
    runs them round after round."""
    if isinstance(validations, str | Mapping | Validation):
        return [validations]
    return list(validations)


class GateNode(_Node):
    """A StateGraph node that validates the proposed change in the state and writes the
    verdict into it.

    ``validations`` take every form :func:`gategraph.runtime.validate` takes: names (from
    ``catalog`` or the built-ins), inline configs, :class:`~gategraph.runtime.Validation`
    objects, or ``{"validation": ..., "arguments": {...}}``; with a ``catalog``, the
    validations attached to ``resource`` run too. The change is ``state[change_key]`` (a
    mapping of files or a folder) and/or ``state[artifact_key]`` (any value).

    ``state[verdict_key]`` becomes a JSON mapping: ``passed``, ``decision`` (``attested``,
    ``fix``, ``retry-validator``, ``escalate-exhausted``, ``escalate-permanent``),
    ``fault``, ``feedback`` (the rejection as text for a model), ``findings`` (one per
    acceptance criterion), ``failures``, ``plan_id``, ``retry_after`` and ``budget``. The
    retry budget (``policy``, three retries by default) is shared by the rounds of a thread
    until a verdict passes: it lives in the verdict, so it survives checkpoints. A round
    after ``retry-validator`` first waits ``retry_after`` seconds. Events go to
    ``event_log`` (a path, for a SQLite log, or an EventLog) when given.
    """

    def __init__(
        self,
        validations: Iterable[Any] = (),
        *,
        catalog: Catalog | None = None,
        change_key: str = "change",
        artifact_key: str | None = "artifact",
        verdict_key: str = "verdict",
        policy: MaxNPolicy | None = None,
        resource: str = "change",
        project: str | None = None,
        event_log: EventLog | str | os.PathLike[str] | None = None,
        default_timeout: float | None = None,
    ) -> None:
        _check_log(event_log, "event_log")
        self.validations = _listed(validations)
        """What the gate runs (see the class docstring)."""
        self.catalog = catalog
        self.change_key = change_key
        self.artifact_key = artifact_key
        self.verdict_key = verdict_key
        self.policy = policy if policy is not None else MaxNPolicy()
        """The limit and fault catalogue of the thread's retry budget."""
        self.resource = resource
        self.project = project
        self.event_log = event_log
        self.default_timeout = default_timeout

    def route(self, state: Mapping[str, Any]) -> Route:
        """:func:`route` on this gate's verdict key."""
        return route(state, self.verdict_key)

    def _change(self, state: Mapping[str, Any]) -> tuple[Any, Any]:
        change = state.get(self.change_key)
        artifact = state.get(self.artifact_key) if self.artifact_key is not None else None
        if change is None and artifact is None:
            keys = repr(self.change_key)
            if self.artifact_key is not None:
                keys += f" or {self.artifact_key!r}"
            raise ConfigError.at(
                f"state[{self.change_key!r}]", f"the state has no {keys} to validate"
            )
        if change is not None:
            change = _checked_files(change, f"state[{self.change_key!r}]")
        return change, artifact

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        previous = state.get(self.verdict_key)
        where = f"state[{self.verdict_key!r}]"
        ledger = _Ledger(self.policy, previous, where)
        change, artifact = self._change(state)
        if isinstance(previous, Mapping) and previous.get("decision") == "retry-validator":
            # The supervisor waits the fault's backoff before re-running the validations.
            wait = previous.get("retry_after")
            if isinstance(wait, int | float) and wait > 0:
                await anyio.sleep(wait)
        async with _opened(self.event_log) as log:
            verdict = await validate(
                change,
                self.validations,
                artifact=artifact,
                catalog=self.catalog,
                resource=self.resource,
                project=self.project,
                budget=ledger.budget,
                event_log=log,
                default_timeout=self.default_timeout,
            )
        return {self.verdict_key: _state_verdict(verdict, ledger)}


# -- the approval bridge ---------------------------------------------------------------------


# A plan's escalation is answered at once: the LangGraph graph decides what comes next (its
# own fix loop, on the verdict's budget), not a second ladder inside the plan. Not through
# an escalation handler: one would be asked the approvals too, and they must pause.
_HANDED_BACK: Final = EscalationDecision(action="abort", note="handed back to the LangGraph graph")


def _decision(answer: Any) -> EscalationDecision:
    """A person's answer, as ``Command(resume=...)`` gave it."""
    if isinstance(answer, EscalationDecision) and answer.for_approval:
        return answer
    if answer is True or answer is False:
        return EscalationDecision(action="approve" if answer else "deny")
    if answer in ("approve", "deny"):
        return EscalationDecision(action=answer)
    if isinstance(answer, Mapping) and answer.get("action") in ("approve", "deny"):
        note = answer.get("note")
        if note is None or isinstance(note, str):
            return EscalationDecision(action=answer["action"], note=note)
    raise ConfigError.at(
        "Command(resume=...)", f"{answer!r} does not answer an approval: {_ANSWERS}"
    )


class ApprovalNode(_Node):
    """A StateGraph node that applies the proposed change to ``folder`` once its
    validations pass and a person approves, through a gategraph plan.

    The plan writes ``state[change_key]`` (a mapping of files, or a folder to copy) into a
    sandbox of ``folder``, runs ``validations`` (the forms :class:`GateNode` takes), asks
    for approval (tier ``tier``) and applies atomically. Asking is LangGraph's
    ``interrupt()``, whose value says what is asked (``plan_id``, ``message``, ``files``,
    ``findings``); resume the thread with ``Command(resume="approve")`` or ``"deny"`` (or
    ``{"action": "deny", "note": "..."}``). LangGraph runs the node again from its start
    then: the node finds its paused plan in ``event_log`` — its id comes from the thread id
    and the task — and continues it, so one plan per task, and the folder changes only
    after approval. The log must outlive the wait: a path (SQLite; by default gategraph's
    own log, where ``gategraph plans`` lists them) or an EventLog shared by every run.

    ``state[verdict_key]`` gets a verdict as :class:`GateNode` writes it, with ``status``
    (the plan's), ``approved`` and ``changes`` (what was applied). A rejection is routed
    like a gate's (``fix``, ``retry``, ``escalate``) on the thread's one budget; a denial
    ends the loop (``escalate``, fault ``denied``, the note in ``feedback``).
    """

    def __init__(
        self,
        validations: Iterable[Any] = (),
        *,
        folder: str | os.PathLike[str],
        catalog: Catalog | None = None,
        change_key: str = "change",
        artifact_key: str | None = "artifact",
        verdict_key: str = "verdict",
        tier: str = "default",
        policy: MaxNPolicy | None = None,
        resource: str = "repo",
        project: str | None = None,
        event_log: EventLog | str | os.PathLike[str] | None = None,
        default_timeout: float | None = None,
    ) -> None:
        _check_log(event_log, "event_log")
        validations = _listed(validations)
        if not validations and catalog is None:
            raise ConfigError.at(
                "validations",
                "no validation given, and no catalog whose attachments would gate the change",
            )
        plan_policy: dict[str, Any] = {
            # One round per plan: a rejection goes back to the LangGraph graph's own loop.
            "retry_limit": 0,
            "strategy_revisions": 0,
            "approval": {"rules": [{"match": "*", "action": "require", "tier": tier}]},
        }
        if default_timeout is not None:
            plan_policy["default_timeout"] = default_timeout
        spec = graph_spec(
            validations,
            {resource: {"kind": "directory", "path": os.path.abspath(folder)}},
            name="langgraph-approval",
            project=project,
            policy=plan_policy,
        )
        self.graph = load_spec(spec, catalog)
        """The plan graph every round runs (built once: resume needs the same graph)."""
        self.catalog = catalog
        self.change_key = change_key
        self.artifact_key = artifact_key
        self.verdict_key = verdict_key
        self.tier = tier
        self.policy = policy if policy is not None else MaxNPolicy()
        """The limit and fault catalogue of the thread's retry budget."""
        self.resource = resource
        self.event_log: Any = event_log if event_log is not None else default_event_log_path()
        """Where the plans are logged (a path is opened for each call)."""

    def route(self, state: Mapping[str, Any]) -> Route:
        """:func:`route` on this node's verdict key."""
        return route(state, self.verdict_key)

    def _actor(self, change: Any, artifact: Any) -> Any:
        async def write(request: ExecuteRequest) -> Any:
            root = request.resources[self.resource]
            await anyio.to_thread.run_sync(_write_change, root, change)
            if artifact is not None:
                return artifact
            return {"files": sorted(change) if isinstance(change, Mapping) else []}

        return write

    async def _advance(
        self, plan_id: str, change: Any, artifact: Any, decision: EscalationDecision | None
    ) -> tuple[PlanOutcome, ApprovalDecided | None]:
        """Start the task's plan, or continue it from the log (with the answer, when it
        waits for one); return its outcome and the person's answer, if any."""
        actor = self._actor(change, artifact)
        async with _opened(self.event_log) as log:
            assert log is not None
            events = await log.read(plan_id)
            if not events:
                outcome = await run_plan(
                    self.graph,
                    catalog=self.catalog,
                    event_log=log,
                    plan_id=plan_id,
                    execution_actor=actor,
                )
            else:
                last = events[-1]
                waiting = (
                    isinstance(last, PlanFinished)
                    and last.status == PlanStatus.AWAITING_APPROVAL.value
                )
                outcome = await resume_plan(
                    plan_id,
                    self.graph,
                    event_log=log,
                    catalog=self.catalog,
                    execution_actor=actor,
                    decision=decision if waiting else None,
                )
            if outcome.status == PlanStatus.AWAITING_DECISION:
                outcome = await resume_plan(
                    plan_id,
                    self.graph,
                    event_log=log,
                    catalog=self.catalog,
                    execution_actor=actor,
                    decision=_HANDED_BACK,
                )
            answered = [e for e in await log.read(plan_id) if isinstance(e, ApprovalDecided)]
        return outcome, answered[-1] if answered else None

    def _question(self, outcome: PlanOutcome, change: Any) -> dict[str, Any]:
        envelope = outcome.verdict or {}
        return msgspec.to_builtins(  # type: ignore[no-any-return]
            {
                "kind": "gategraph.approval",
                "plan_id": outcome.plan_id,
                "tier": self.tier,
                "message": outcome.message,
                "files": sorted(change) if isinstance(change, Mapping) else [os.fspath(change)],
                "findings": list(envelope.get("findings", ())),
                "answers": _ANSWERS,
            }
        )

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        where = f"state[{self.change_key!r}]"
        value = state.get(self.change_key)
        if value is None:
            raise ConfigError.at(where, "the state has no change to apply")
        change = _checked_files(value, where)
        plan_id = _plan_id(config)
        artifact = state.get(self.artifact_key) if self.artifact_key is not None else None
        ledger = _Ledger(self.policy, state.get(self.verdict_key), f"state[{self.verdict_key!r}]")
        outcome, answer = await self._advance(plan_id, change, artifact, None)
        if outcome.status == PlanStatus.AWAITING_APPROVAL:
            # The first run raises here and the thread pauses; the run after
            # Command(resume=...) gets the answer and continues the same plan.
            decision = _decision(interrupt(self._question(outcome, change)))
            outcome, answer = await self._advance(plan_id, change, artifact, decision)
        # Invariant: the plan's escalation is answered at once (_HANDED_BACK) and its
        # approval has been, so it has ended.
        assert outcome.status in (PlanStatus.APPLIED, PlanStatus.FAILED), outcome.status
        return {self.verdict_key: self._verdict(outcome, answer, ledger)}

    def _verdict(
        self, outcome: PlanOutcome, answer: ApprovalDecided | None, ledger: _Ledger
    ) -> dict[str, Any]:
        envelope = outcome.verdict or {}
        records = list(outcome.validations)
        extra: dict[str, Any] = {
            "status": outcome.status.value,
            "approved": answer.approved if answer is not None else None,
            "changes": dict(outcome.changes),
        }
        budget = ledger.budget
        if outcome.status == PlanStatus.APPLIED:
            verdict = Verdict(
                passed=True,
                decision=RetryDecision.ATTESTED,
                fault=None,
                envelope=envelope,
                records=records,
                plan_id=outcome.plan_id,
                budget_used=budget.used,
                budget_limit=budget.limit,
            )
            return _state_verdict(verdict, ledger, **extra)
        if answer is not None and not answer.approved:
            verdict = Verdict(
                passed=False,
                decision=RetryDecision.ESCALATE_PERMANENT,
                fault=_DENIED,
                envelope=envelope,
                records=records,
                plan_id=outcome.plan_id,
                budget_used=budget.used,
                budget_limit=budget.limit,
            )
            extra["feedback"] = f"denied by a person: {answer.note or 'no note'}"
            return _state_verdict(verdict, ledger, **extra)
        # Rejected in the plan's one round: the thread's budget decides, as a gate's would.
        reasons = tuple(
            Reason(
                layer="semantic",
                message=r.result.message,
                node=r.node,
                error=r.result.data.get("error"),
            )
            for r in records
            if r.blocking
        ) or (Reason(layer="semantic", message=outcome.message or "rejected"),)
        faults: list[FaultKind] = []
        for reason in reasons:
            fault = self.policy.classify(reason.error, False)
            if fault is not None:
                faults.append(fault)
        decision = budget.decide_round(faults)
        kind = primary_fault(faults) or faults[0]
        retry_after = 0.0
        if decision is RetryDecision.RETRY_VALIDATOR and kind.backoff is not None:
            retry_after = kind.backoff.delay(budget.used_by(kind.kind))
        verdict = Verdict(
            passed=False,
            decision=decision,
            fault=kind.kind,
            envelope=envelope,
            records=records,
            reasons=reasons,
            plan_id=outcome.plan_id,
            budget_used=budget.used,
            budget_limit=budget.limit,
            retry_after=retry_after,
        )
        return _state_verdict(verdict, ledger, **extra)


# -- one validation as a node ----------------------------------------------------------------


class ValidationNode(_Node):
    """A StateGraph node that runs one gategraph validation over ``state[key]`` and
    stores its result in ``state[result_key]``: ``validation``, ``passed``, ``message``
    and ``data``.

    ``validation`` is any one form :class:`GateNode` takes (a name, an inline config, a
    :class:`~gategraph.runtime.Validation`, or ``{"validation": ..., "arguments": ...}``).
    The value is the validation's ``artifact``; with ``change=True`` it is a change (a
    mapping of files or a folder) the validation gets as its folder. A ``catalog`` supplies
    definitions only: the attachments it holds are a :class:`GateNode`'s business.
    """

    def __init__(
        self,
        validation: Any,
        *,
        key: str = "artifact",
        result_key: str = "validation",
        change: bool = False,
        catalog: Catalog | None = None,
        default_timeout: float | None = None,
    ) -> None:
        self.validation = validation
        self.key = key
        self.result_key = result_key
        self.change = change
        self.catalog = catalog
        self.default_timeout = default_timeout

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        value = state.get(self.key)
        change: Any = None
        if self.change:
            if value is None:
                raise ConfigError.at(f"state[{self.key!r}]", "the state has no change to validate")
            change, value = _checked_files(value, f"state[{self.key!r}]"), None
        verdict = await validate(
            change,
            [self.validation],
            artifact=value,
            catalog=self.catalog,
            resource=_NODE_RESOURCE,
            default_timeout=self.default_timeout,
            allow_ungated=True,  # an informational validation alone is fine: it is its result
        )
        (record,) = [r for r in verdict.records if r.attachment_id is None]
        result = {
            "validation": record.validation,
            "passed": record.result.passed,
            "message": record.result.message,
            "data": record.result.data,
        }
        return {self.result_key: msgspec.to_builtins(result)}


# -- a compiled graph as a gategraph tool ----------------------------------------------------


class _Invocable(Protocol):
    def invoke(self, input: Any, config: Any = None) -> Any: ...

    async def ainvoke(self, input: Any, config: Any = None) -> Any: ...


def _json_value(value: Any) -> Any:
    """A pydantic model (a LangChain message) as its JSON form; anything else is refused."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise TypeError(
        f"the graph's output holds a {type(value).__name__}, which is not JSON: "
        "name the keys to return with output_keys"
    )


class GraphTool:
    """A compiled LangGraph graph as a gategraph tool: calling it invokes the graph with the
    tool's arguments as input and returns the output state (as JSON).

    Name it in a tool config as an entrypoint — ``{"name": "summarize", "entrypoint":
    "myapp.tools:summarize"}`` with ``summarize = GraphTool(graph)`` in ``myapp/tools.py``
    (:meth:`tool_config` writes that config, schemas included) — or from inline code:
    ``run = GraphTool(graph)``. ``config`` is passed to every invocation (a checkpointed
    graph needs its ``thread_id`` there); ``output_keys`` keeps only those keys of the
    output. gategraph calls it in a worker thread; ``use_async=True`` runs the graph with
    ``ainvoke`` there (for graphs with async nodes), on an event loop of its own. The
    values gategraph adds to a call (``artifact``, ``inputs``, ``context``) are not input.
    """

    def __init__(
        self,
        graph: _Invocable,
        *,
        config: Mapping[str, Any] | None = None,
        output_keys: Iterable[str] | None = None,
        use_async: bool = False,
    ) -> None:
        if not callable(getattr(graph, "invoke", None)):
            raise ConfigError.at(
                "graph", f"a {type(graph).__name__} is not a compiled graph: call .compile()"
            )
        self.graph = graph
        self.config = dict(config) if config is not None else None
        self.output_keys = tuple(output_keys) if output_keys is not None else None
        self.use_async = use_async

    def __call__(
        self, *, artifact: Any = None, inputs: Any = None, context: Any = None, **arguments: Any
    ) -> Any:
        """Invoke the graph with ``arguments``; return its output state."""
        if self.use_async:
            # LangGraph's async API is asyncio's; gategraph calls a sync tool in a worker
            # thread of its own, where no loop runs (nor may anyio start one there).
            output = asyncio.run(self.graph.ainvoke(arguments, self.config))
        else:
            output = self.graph.invoke(arguments, self.config)
        if self.output_keys is not None and isinstance(output, Mapping):
            output = {key: output[key] for key in self.output_keys if key in output}
        return msgspec.to_builtins(output, enc_hook=_json_value)

    def tool_config(self, name: str, entrypoint: str, *, description: str = "") -> dict[str, Any]:
        """A gategraph tool config naming this object at ``entrypoint``
        (``"package.module:attribute"``), with the graph's input and output JSON Schemas
        when it can give them: for ``Tool.from_config`` or ``gategraph tool add --config``."""
        config: dict[str, Any] = {"name": name, "entrypoint": entrypoint}
        if description:
            config["description"] = description
        for field, method in (
            ("input_schema", "get_input_jsonschema"),
            ("output_schema", "get_output_jsonschema"),
        ):
            schema = _schema(self.graph, method)
            if schema is not None:
                if field == "input_schema":
                    schema.pop("required", None)  # a graph's input may set any of its keys
                config[field] = schema
        return config


def _schema(graph: Any, method: str) -> dict[str, Any] | None:
    """A graph's JSON Schema, or None when it cannot give one (pydantic refuses
    ``typing.TypedDict`` states before Python 3.12: the schema is optional)."""
    get = getattr(graph, method, None)
    if not callable(get):
        return None
    try:
        schema = get()
    except Exception:
        return None
    return dict(schema) if isinstance(schema, Mapping) else None
