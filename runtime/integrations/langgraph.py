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
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NamedTuple, Protocol, cast

import anyio
import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import (
    ApplyConflictError,
    ApplyTwiceError,
    ConfigError,
    ConfigIssue,
    PlanBusyError,
)
from gategraph.runtime._base._protocols import EscalationDecision
from gategraph.runtime._data._events import ApprovalDecided, PlanFinished
from gategraph.runtime._data._maxn import MaxNPolicy, RetryBudget, RetryDecision, primary_fault
from gategraph.runtime._data._models import Validation
from gategraph.runtime._embed._validate import (
    Verdict,
    graph_spec,
    load_spec,
    validate,
    write_files_into,
)
from gategraph.runtime._lifecycle._supervisor import PlanStatus, resume_plan, run_plan
from gategraph.runtime._running._pipeline import Reason
from gategraph.runtime._running._sync import _running_loop, run_sync
from gategraph.runtime._storage._database import check_event_log, opened_log
from gategraph.runtime._storage._eventlog import default_event_log_path
from pydantic_core import to_jsonable_python
from typing_extensions import TypedDict

try:
    from langchain_core.messages import AnyMessage, ToolMessage
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.graph.message import add_messages
    from langgraph.types import interrupt
except ImportError as error:  # pragma: no cover - a base install; tested by hiding langgraph
    raise ImportError(
        "gategraph.runtime.integrations.langgraph needs LangGraph: "
        f"pip install 'gategraph[langgraph]' ({error})"
    ) from error

if TYPE_CHECKING:
    from gategraph.runtime._base._protocols import ExecuteRequest
    from gategraph.runtime._data._maxn import FaultKind
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._lifecycle._supervisor import PlanOutcome
    from gategraph.runtime._storage._eventlog import EventLog

__all__ = [
    "ApprovalNode",
    "GateNode",
    "GateState",
    "GraphTool",
    "Route",
    "ToolCallGate",
    "ToolGateState",
    "ValidationNode",
    "route",
    "thread_plan_prefix",
    "write_file",
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
_ANSWERS: Final = (
    "'approve' or 'deny', {'action': 'approve' | 'deny', 'note': '...'}, or a LangGraph "
    "human-interrupt response (alone or in a list): {'type': 'accept'}, {'type': 'ignore'}, "
    "{'type': 'response', 'args': 'why'}, or {'type': 'edit', 'args': {'action': 'apply', "
    "'args': {'files': {path: text}}}}"
)
_DENIED: Final = "denied"  # the fault of a verdict whose change a person denied
_CONFLICT: Final = "conflict"  # the fault of a verdict whose approved change could not apply
# The tail of a plan id after its thread, node and step: `<step digest>-<task digest>`.
_TASK_TAIL: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{12}")


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


# -- the change in the state -----------------------------------------------------------------


def _checked_files(value: Any, where: str) -> Mapping[str, str | bytes] | str | os.PathLike[str]:
    """The change in the state, checked before anything runs: a folder, or a mapping of
    relative paths (that stay inside the folder, and are files, not also folders of other
    paths) to text or bytes."""
    if isinstance(value, str | os.PathLike):
        if not os.path.isdir(value):
            raise ConfigError.at(where, f"{os.fspath(value)!r} is not a folder")
        return value
    if isinstance(value, Mapping):
        files: dict[tuple[str, ...], str] = {}
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
            files[parts] = key
        for parts, key in files.items():
            for end in range(1, len(parts)):
                if parts[:end] in files:
                    raise ConfigError.at(
                        where,
                        f"{key!r} needs {files[parts[:end]]!r} to be a folder, and the change "
                        "makes it a file",
                    )
        return value
    raise ConfigError.at(
        where,
        f"a change is a mapping of files (relative path → text) or a folder, "
        f"not {type(value).__name__}",
    )


def _write_change(
    root: Path, change: Mapping[str, str | bytes] | str | os.PathLike[str], where: str
) -> None:
    """Write the change into a sandbox folder: the files of a mapping, or a folder's tree.
    What the folder cannot take (a file where the change needs a folder, a link out of
    it, a name too long) is a :class:`ConfigError` at ``where``."""
    if not isinstance(change, Mapping):
        try:
            shutil.copytree(os.fspath(change), root, dirs_exist_ok=True)
        except OSError as exc:  # shutil.Error too: one line per file it could not copy
            raise ConfigError.at(where, f"cannot be copied into the folder: {exc}") from None
        return
    write_files_into(root, change, where=where, source=None, inside="the folder")


def _files_of(change: Mapping[str, str | bytes] | str | os.PathLike[str]) -> list[str]:
    """The files a change writes, as relative paths: a mapping's keys, a folder's tree."""
    if isinstance(change, Mapping):
        return sorted(change)
    root = os.fspath(change)
    found: list[str] = []
    for folder, folders, names in os.walk(root):
        links = [name for name in folders if os.path.islink(os.path.join(folder, name))]
        found.extend(
            Path(os.path.relpath(os.path.join(folder, name), root)).as_posix()
            for name in (*names, *links)
        )
    return sorted(found)


def _jsonable(value: Any, where: str) -> Any:
    """An artifact as JSON, as validations judge it and the plan's log records it: a
    pydantic model (a LangChain message) as its dump, a set as a list, and so on."""
    if value is None:
        return None
    try:
        return to_jsonable_python(value)
    except ValueError as exc:  # pydantic's PydanticSerializationError, bytes that are not UTF-8
        raise ConfigError.at(
            where, f"a {type(value).__name__} is not JSON, as an artifact must be ({exc})"
        ) from None


# -- plan ids from threads -------------------------------------------------------------------


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:size]


def thread_plan_prefix(thread_id: str) -> str:
    """The prefix of the ids of the plans an :class:`ApprovalNode` ran for a thread: list a
    thread's plans with ``[p for p in await log.plans() if p.startswith(prefix)]``."""
    text = str(thread_id)
    return f"lg-{_SLUG.sub('_', text)[:60]}-{_digest(text, 8)}-"


def _plan_id(config: RunnableConfig | None) -> tuple[str, str]:
    """The plan of this node's task: the same on every run of the task, and so on the run
    LangGraph makes when the task resumes after ``interrupt()``; another for each new task
    (the next round, another node, a fork of the thread). And the prefix of the plans of
    the same thread and node (``<prefix><step>-<task>``, the step the task started from)."""
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
    # The checkpoints the task started from (its graph's and its parents'): the tasks of
    # one step share them, so a plan of another step is one the thread went on without.
    started = configurable.get("checkpoint_map")
    step = repr(sorted(started.items())) if isinstance(started, Mapping) else ""
    node_prefix = f"{thread_plan_prefix(str(thread))}{slug}-"
    return f"{node_prefix}{_digest(step, 8)}-{_digest(namespace, 12)}", node_prefix


# -- the gate node ---------------------------------------------------------------------------


def _forget_async_library() -> None:
    sniffio = sys.modules.get("sniffio")  # anyio asks it only when it is imported
    if sniffio is not None:
        sniffio.current_async_library_cvar.set(None)


class _Node:
    """Shared by the nodes: the sync call (on an event loop of its own) and its twin."""

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        raise NotImplementedError

    # `state: Any`: LangGraph types a node's input by the graph's state class (a TypedDict,
    # a dataclass, a pydantic model), and a node that takes any of them types-checks as a
    # node of every graph under `mypy --strict`.
    def __call__(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
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

    async def acall(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """Run the node on the running event loop: add ``node.acall`` for ``ainvoke``."""
        return await self._run(state, config)


def _listed(validations: Iterable[Any]) -> list[Any]:
    """The validations as a list (one on its own is the obvious meaning), read once: a node
    runs them round after round."""
    if isinstance(validations, str | Mapping | Validation):
        return [validations]
    return list(validations)


def _check_validations(
    validations: list[Any],
    catalog: Catalog | None,
    *,
    resource: str | None,
    project: str | None = None,
    policy: Mapping[str, Any],
    source: str,
) -> None:
    """Load the validations once, as every round will, so that a typo'd name or argument
    is an error of the constructor, not of the first round. The change's folder is not
    known yet: any folder stands in for it (``resource`` None: the node has none)."""
    if not validations and catalog is None:
        raise ConfigError.at(
            "validations",
            "no validation given, and no catalog whose attachments would gate the change",
            source=source,
        )
    stand_in = {"kind": "directory", "path": tempfile.gettempdir()}
    resources = {resource: stand_in} if resource is not None else {}
    spec = graph_spec(validations, resources, project=project, policy=dict(policy), source=source)
    load_spec(spec, catalog, source=source)


def _at_state(error: ConfigError, where: str) -> ConfigError:
    """validate()'s problems with the change it was given, named as the state key."""
    if not all(issue.field == "change" for issue in error.issues):
        return error
    return ConfigError([ConfigIssue(issue.message, where) for issue in error.issues])


class GateNode(_Node):
    """A StateGraph node that validates the proposed change in the state and writes the
    verdict into it.

    ``validations`` take every form :func:`gategraph.runtime.validate` takes: names (from
    ``catalog`` or the built-ins), inline configs, :class:`~gategraph.runtime.Validation`
    objects, or ``{"validation": ..., "arguments": {...}}``; with a ``catalog``, the
    validations attached to ``resource`` run too. The change is ``state[change_key]`` (a
    mapping of files or a folder) and/or ``state[artifact_key]`` (any value).

    With ``base`` (a folder: the repository the edit is to), the validations judge the
    change laid over a copy of it, removed after each round: a test suite runs with the
    rest of the repository.

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
        base: str | os.PathLike[str] | None = None,
    ) -> None:
        check_event_log(event_log, "event_log")
        if base is not None and not Path(os.fspath(base)).is_dir():
            raise ConfigError.at(
                "base", f"{os.fspath(base)!r} is not a folder", source="GateNode()"
            )
        self.validations = _listed(validations)
        """What the gate runs (see the class docstring)."""
        self.base = base
        """The folder (the repository) the change is laid over, so validations that need
        the rest of it (a test suite) see it; None: the change alone."""
        policy_spec: dict[str, Any] = {}
        if default_timeout is not None:
            policy_spec["default_timeout"] = default_timeout
        _check_validations(
            self.validations,
            catalog,
            resource=resource,
            project=project,
            policy=policy_spec,
            source="GateNode()",
        )
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
        if artifact is not None:
            artifact = _jsonable(artifact, f"state[{self.artifact_key!r}]")
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
        async with opened_log(self.event_log) as log:
            try:
                verdict = await validate(
                    change,
                    self.validations,
                    artifact=artifact,
                    base=self.base,
                    catalog=self.catalog,
                    resource=self.resource,
                    project=self.project,
                    budget=ledger.budget,
                    event_log=log,
                    default_timeout=self.default_timeout,
                )
            except ConfigError as error:
                raise _at_state(error, f"state[{self.change_key!r}]") from None
        return {self.verdict_key: _state_verdict(verdict, ledger)}


# -- the approval bridge ---------------------------------------------------------------------


# A plan's escalation is answered at once: the LangGraph graph decides what comes next (its
# own fix loop, on the verdict's budget), not a second ladder inside the plan. Not through
# an escalation handler: one would be asked the approvals too, and they must pause.
_HANDED_BACK: Final = EscalationDecision(action="abort", note="handed back to the LangGraph graph")
_UNANSWERED: Final = EscalationDecision(
    action="deny", note="the thread went on without an answer: a later step asked again"
)


def _waits(events: list[Any]) -> bool:
    """Whether a plan's log ends waiting for a person's approval."""
    last = events[-1] if events else None
    return isinstance(last, PlanFinished) and last.status == PlanStatus.AWAITING_APPROVAL.value


def _check_log_outside(folder: str | os.PathLike[str], event_log: Any, *, default: bool) -> None:
    """A plan keeps its sandboxes (copies of the folder) beside a log file: the log's
    folder must not be inside the folder the plans change."""
    path = (
        event_log if isinstance(event_log, str | os.PathLike) else getattr(event_log, "path", None)
    )
    if not isinstance(path, str | os.PathLike):
        return  # a memory log: the sandboxes go to a private temporary folder
    home = Path(os.path.realpath(path)).parent  # as the sandboxes' check sees them: links resolved
    root = Path(os.path.realpath(folder))
    if home != root and root not in home.parents:
        return
    fix = "pass event_log= a path outside the folder"
    if default:
        fix += ", or set GATEGRAPH_HOME"
    raise ConfigError.at(
        "folder",
        f"{os.fspath(folder)!r} holds the event log's folder {str(home)!r}, where the plans "
        f"would copy the folder: {fix}",
    )


class _Edited(NamedTuple):
    """A person's answer that changes the change: the files to apply instead, which are
    validated again before anything is applied."""

    files: Mapping[str, str | bytes]


_EDITED: Final = EscalationDecision(
    action="deny", note="edited by a person: the edited change is validated and applied instead"
)


def _decision(answer: Any) -> EscalationDecision | _Edited:
    """A person's answer, as ``Command(resume=...)`` gave it: gategraph's own forms, or
    LangGraph's human-interrupt responses (``accept``, ``ignore``, ``response``,
    ``edit``), alone or as the one-item list an agent inbox sends."""
    if isinstance(answer, list | tuple) and len(answer) == 1:
        answer = answer[0]
    if isinstance(answer, EscalationDecision) and answer.for_approval:
        return answer
    if isinstance(answer, Mapping) and "type" in answer:
        found = _human_response(answer)
        if found is not None:
            return found
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


def _human_response(answer: Mapping[str, Any]) -> EscalationDecision | _Edited | None:
    """LangGraph's human-interrupt response as an answer, or None when it is not one."""
    kind, args = answer.get("type"), answer.get("args")
    if kind == "accept":
        return EscalationDecision(action="approve")
    if kind == "ignore":
        return EscalationDecision(action="deny", note="ignored by a person")
    if kind == "response" and isinstance(args, str):
        return EscalationDecision(action="deny", note=args)
    if kind == "edit" and isinstance(args, Mapping):
        inner = args.get("args")
        files = inner.get("files") if isinstance(inner, Mapping) else None
        if (
            isinstance(files, Mapping)
            and files
            and all(
                isinstance(k, str) and isinstance(v, str | bytes) and _path_problem(k) is None
                for k, v in files.items()
            )
        ):
            return _Edited(dict(files))
    return None


class ApprovalNode(_Node):
    """A StateGraph node that applies the proposed change to ``folder`` once its
    validations pass and a person approves, through a gategraph plan (``ask=False``: once
    they pass, with no person asked).

    The plan writes ``state[change_key]`` (a mapping of files, or a folder to copy) into a
    sandbox of ``folder``, runs ``validations`` (the forms :class:`GateNode` takes), asks
    for approval (tier ``tier``) and applies atomically. Asking is LangGraph's
    ``interrupt()``, whose value says what is asked (``plan_id``, ``message``, ``files``,
    ``findings``); resume the thread with ``Command(resume="approve")`` or ``"deny"`` (or
    ``{"action": "deny", "note": "..."}``). A resume value that is none of these is asked
    about again, with ``error`` in the question. LangGraph runs the node again from its
    start then: the node finds its paused plan in ``event_log`` — its id comes from the
    thread id and the task — and continues it, so one plan per task, and the folder
    changes only after approval. The log must outlive the wait: a path (SQLite; by default
    gategraph's own log, where ``gategraph plans`` lists them) or an EventLog shared by
    every run. The plans' sandboxes go beside a log file, so it must not be in ``folder``.
    A thread that goes on without answering (new input instead of ``Command(resume=...)``)
    leaves the question unanswered: the node's next plan on the thread denies it.

    ``state[verdict_key]`` gets a verdict as :class:`GateNode` writes it, with ``status``
    (the plan's), ``approved`` and ``changes`` (what was applied). A rejection is routed
    like a gate's (``fix``, ``retry``, ``escalate``) on the thread's one budget; a denial
    ends the loop (``escalate``, fault ``denied``, the note in ``feedback``). An approved
    change that cannot apply because the folder changed meanwhile is a ``fix`` (fault
    ``conflict``, what changed in ``feedback``), to be made again on the folder as it is.
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
        ask: bool = True,
    ) -> None:
        check_event_log(event_log, "event_log")
        source = "ApprovalNode()"
        validations = _listed(validations)
        if not validations and catalog is None:
            raise ConfigError.at(
                "validations",
                "no validation given, and no catalog whose attachments would gate the change",
                source=source,
            )
        if not os.path.isdir(folder):
            raise ConfigError.at("folder", f"{os.fspath(folder)!r} is not a folder")
        log: Any = event_log if event_log is not None else default_event_log_path()
        _check_log_outside(folder, log, default=event_log is None)
        plan_policy: dict[str, Any] = {
            # One round per plan: a rejection goes back to the LangGraph graph's own loop.
            "retry_limit": 0,
            "strategy_revisions": 0,
        }
        if ask:
            plan_policy["approval"] = {"rules": [{"match": "*", "action": "require", "tier": tier}]}
        if default_timeout is not None:
            plan_policy["default_timeout"] = default_timeout
        spec = graph_spec(
            validations,
            {resource: {"kind": "directory", "path": os.path.abspath(folder)}},
            name="langgraph-approval",
            project=project,
            policy=plan_policy,
            source=source,
        )
        self.graph = load_spec(spec, catalog, source=source)
        """The plan graph every round runs (built once: resume needs the same graph)."""
        self.catalog = catalog
        self.change_key = change_key
        self.artifact_key = artifact_key
        self.verdict_key = verdict_key
        self.tier = tier
        self.policy = policy if policy is not None else MaxNPolicy()
        """The limit and fault catalogue of the thread's retry budget."""
        self.resource = resource
        self.event_log: Any = log
        """Where the plans are logged (a path is opened for each call)."""

    def route(self, state: Mapping[str, Any]) -> Route:
        """:func:`route` on this node's verdict key."""
        return route(state, self.verdict_key)

    def _actor(self, change: Any, artifact: Any, refused: list[ConfigError]) -> Any:
        where = f"state[{self.change_key!r}]"

        async def write(request: ExecuteRequest) -> Any:
            root = request.resources[self.resource]
            try:
                await anyio.to_thread.run_sync(_write_change, root, change, where)
            except ConfigError as error:
                refused.append(error)  # the node raises it once the plan has ended
                raise
            if artifact is not None:
                return artifact
            return {"files": sorted(change) if isinstance(change, Mapping) else []}

        return write

    async def _advance(
        self,
        plan_id: str,
        node_prefix: str,
        actor: Any,
        decision: EscalationDecision | None,
        *,
        approve: bool = False,
    ) -> tuple[PlanOutcome, ApprovalDecided | None]:
        """Start the task's plan, or continue it from the log (with the answer, when it
        waits for one); return its outcome and the person's answer, if any."""
        async with opened_log(self.event_log) as log:
            assert log is not None
            events = await log.read(plan_id)
            if not events:
                await self._deny_unanswered(log, plan_id, node_prefix)
                outcome = await run_plan(
                    self.graph,
                    catalog=self.catalog,
                    event_log=log,
                    plan_id=plan_id,
                    execution_actor=actor,
                    auto_approve=approve,
                )
            else:
                outcome = await resume_plan(
                    plan_id,
                    self.graph,
                    event_log=log,
                    catalog=self.catalog,
                    execution_actor=actor,
                    decision=decision if _waits(events) else None,
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

    async def _deny_unanswered(self, log: EventLog, plan_id: str, node_prefix: str) -> None:
        """Deny the plans of this thread and node that still wait for an answer from an
        earlier step: the thread went on without one (new input, not Command(resume=...)),
        so nobody will answer them, and each holds its sandboxes. The tasks of this step
        (a fan-out with Send) wait side by side: theirs are left alone."""
        step = plan_id[: len(plan_id) - 12]  # `<node prefix><step digest>-`
        unused = self._actor(None, None, [])  # their work is in the log: never called
        for other in await log.plans():
            tail = other[len(node_prefix) :]
            if (
                not other.startswith(node_prefix)
                or other.startswith(step)
                or not _TASK_TAIL.fullmatch(tail)
                or not _waits(await log.read(other))
            ):
                continue
            with contextlib.suppress(PlanBusyError):  # being answered right now
                await resume_plan(
                    other,
                    self.graph,
                    event_log=log,
                    catalog=self.catalog,
                    execution_actor=unused,
                    decision=_UNANSWERED,
                )

    def _question(self, outcome: PlanOutcome, change: Any) -> dict[str, Any]:
        envelope = outcome.verdict or {}
        # The change itself, for a person to read and edit (a folder given as the change
        # is listed, not edited).
        texts = (
            {k: v for k, v in change.items() if isinstance(v, str)}
            if isinstance(change, Mapping)
            else None
        )
        return msgspec.to_builtins(  # type: ignore[no-any-return]
            {
                "kind": "gategraph.approval",
                "plan_id": outcome.plan_id,
                "tier": self.tier,
                "message": outcome.message,
                "files": _files_of(change),
                "findings": list(envelope.get("findings", ())),
                "answers": _ANSWERS,
                # LangGraph's human-interrupt request: what an agent inbox shows.
                "action_request": {
                    "action": "apply",
                    "args": {"files": texts if texts is not None else _files_of(change)},
                },
                "config": {
                    "allow_accept": True,
                    "allow_ignore": True,
                    "allow_respond": True,
                    "allow_edit": texts is not None and len(texts) == len(change),
                },
                "description": outcome.message,
            }
        )

    def _answer(self, question: dict[str, Any]) -> EscalationDecision | _Edited:
        """Ask with ``interrupt()`` until the answer is one. LangGraph keeps each resume
        value for the interrupt it answered, and numbers a node's interrupts in the order
        they are made: asking again is a new question, so one bad value never blocks the
        thread (the run after the next resume replays the bad one, then gets the new)."""
        while True:
            try:
                return _decision(interrupt(question))
            except ConfigError as error:
                question = {**question, "error": str(error)}

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        where = f"state[{self.change_key!r}]"
        value = state.get(self.change_key)
        if value is None:
            raise ConfigError.at(where, "the state has no change to apply")
        change = _checked_files(value, where)
        artifact = None
        if self.artifact_key is not None:
            artifact = _jsonable(state.get(self.artifact_key), f"state[{self.artifact_key!r}]")
        plan_id, node_prefix = _plan_id(config)
        ledger = _Ledger(self.policy, state.get(self.verdict_key), f"state[{self.verdict_key!r}]")
        refused: list[ConfigError] = []
        actor = self._actor(change, artifact, refused)
        answer: ApprovalDecided | None = None
        edited = f"{plan_id}-edited"
        try:
            if await self._started(edited):
                # A person edited the change on an earlier run of this task: its plan is
                # the task's now.
                plan_id = edited
                actor = self._actor(None, artifact, refused)
            outcome, answer = await self._advance(plan_id, node_prefix, actor, None)
            if outcome.status == PlanStatus.AWAITING_APPROVAL:
                # The first run raises in interrupt() and the thread pauses; the run after
                # Command(resume=...) gets the answer and continues the same plan.
                decision = self._answer(self._question(outcome, change))
                if isinstance(decision, _Edited):
                    # The person's change instead: the asked plan is denied, and the edit
                    # is validated in a plan of its own, applied if it passes (the
                    # person's edit is the person's approval).
                    await self._advance(plan_id, node_prefix, actor, _EDITED)
                    plan_id, change = edited, decision.files
                    actor = self._actor(change, artifact, refused)
                    outcome, answer = await self._advance(
                        plan_id, node_prefix, actor, None, approve=True
                    )
                else:
                    outcome, answer = await self._advance(plan_id, node_prefix, actor, decision)
        except ApplyConflictError as error:
            if isinstance(error, ApplyTwiceError):
                raise  # applied already: not a conflict with the folder
            # The folder changed while the plan waited (a person's edit, another thread's
            # apply): nothing was applied.
            return {self.verdict_key: self._conflict(plan_id, f"not applied: {error}", ledger)}
        if refused:
            raise refused[0]  # the folder cannot take the change: the plan failed on it
        # Invariant: the plan's escalation is answered at once (_HANDED_BACK) and its
        # approval has been, so it has ended.
        assert outcome.status in (PlanStatus.APPLIED, PlanStatus.FAILED), outcome.status
        if outcome.status == PlanStatus.FAILED and answer is not None and answer.approved:
            # Approved, and refused at Apply: the folder changed while the plan waited.
            return {
                self.verdict_key: self._conflict(
                    plan_id,
                    outcome.message,
                    ledger,
                    envelope=outcome.verdict or {},
                    records=list(outcome.validations),
                )
            }
        verdict = self._verdict(outcome, answer, ledger)
        if plan_id == edited:
            verdict["edited"] = True
            if outcome.status == PlanStatus.APPLIED:
                verdict["approved"] = True
        return {self.verdict_key: verdict}

    async def _started(self, plan_id: str) -> bool:
        async with opened_log(self.event_log) as log:
            assert log is not None
            return bool(await log.read(plan_id))

    def _conflict(
        self,
        plan_id: str,
        message: str,
        ledger: _Ledger,
        *,
        envelope: dict[str, Any] | None = None,
        records: list[Any] | None = None,
    ) -> dict[str, Any]:
        """The verdict of an approved change the folder refused: a fix, for whoever made the
        change to make it again on the folder as it is now. It spends no retry: the change
        was not at fault, and each new change is put to a person again."""
        verdict = Verdict(
            passed=False,
            decision=RetryDecision.FIX,
            fault=_CONFLICT,
            envelope=envelope or {},
            records=records or [],
            plan_id=plan_id,
            budget_used=ledger.budget.used,
            budget_limit=ledger.budget.limit,
        )
        return _state_verdict(
            verdict,
            ledger,
            status=PlanStatus.FAILED.value,
            approved=True,
            changes={},
            feedback=f"{message}; redo the change on the folder as it is now",
        )

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

        def ended(decision: RetryDecision, fault: str | None) -> Verdict:
            return Verdict(
                passed=decision is RetryDecision.ATTESTED,
                decision=decision,
                fault=fault,
                envelope=envelope,
                records=records,
                plan_id=outcome.plan_id,
                budget_used=budget.used,
                budget_limit=budget.limit,
            )

        if outcome.status == PlanStatus.APPLIED:
            return _state_verdict(ended(RetryDecision.ATTESTED, None), ledger, **extra)
        if answer is not None and not answer.approved:
            verdict = ended(RetryDecision.ESCALATE_PERMANENT, _DENIED)
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


# -- a gate over an agent's tool calls -------------------------------------------------------


def _path_problem(path: str) -> str | None:
    """What is wrong with a path an edit names, for the model to read; None for a path
    relative to the repository and inside it."""
    if not path or "\0" in path or path.endswith(("/", "\\")):
        return f"{path!r} is not a file path: give a file's path relative to the repository"
    pure = PurePosixPath(path.replace("\\", "/"))
    if pure.is_absolute() or ".." in pure.parts:
        return f"{path!r} is outside the repository: give a path relative to it, without `..`"
    return None


def _applied_text(verdict: Mapping[str, Any]) -> str:
    """What an applied edit's answer says: what Apply changed, by resource."""
    changes = verdict.get("changes") or {}
    done = "; ".join(f"{name}: {summary}" for name, summary in sorted(changes.items()))
    edited = " (as a person edited it)" if verdict.get("edited") else ""
    return f"applied{edited}: {done or 'nothing changed'}"


def _answers_of_last_turn(messages: Sequence[Any]) -> list[Any]:
    """The tool answers after the last message that called tools."""
    found: list[Any] = []
    for message in reversed(messages):
        if getattr(message, "tool_calls", None):
            break
        found.append(message)
    return found


def _write_file(path: str, content: str) -> str:
    """Write ``content`` to the file at ``path``, relative to the repository. The edit is
    validated (with the repository present) before it is applied; the answer says whether
    it was, or what to fix."""
    raise RuntimeError("write_file is answered by the ToolCallGate, never run on its own")


write_file: Final[BaseTool] = StructuredTool.from_function(_write_file, name="write_file")
"""The edit tool a :class:`ToolCallGate` answers: bind it to the model with your other
tools (``model.bind_tools([write_file, ...])``)."""


class _Messages(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    """The conversation, as LangGraph's ``MessagesState`` keeps it (messages are added)."""


class ToolGateState(_Messages, total=False):
    """A tool-calling agent's state (LangGraph's ``messages``) with the gate's verdict."""

    verdict: dict[str, Any] | None
    """The last edit's verdict (see :class:`GateNode`), which the gate's budget lives in."""


class ToolCallGate(_Node):
    r"""A node that stands in for a ``ToolNode``: it answers the tool calls of the last
    message with ``ToolMessage`` objects, and gates the edits among them.

    The calls of the edit tool (``edit_tool``, default :data:`write_file`: ``path`` and
    ``content``) are one change: laid over a copy of ``folder`` (the repository), checked
    with ``validations`` (the forms :class:`GateNode` takes), and applied to the folder
    atomically when they pass — after a person approves, with ``ask=True``, through
    LangGraph's ``interrupt()`` as :class:`ApprovalNode` asks (its human-interrupt
    answers included: an edit of the change is validated again). Each edit call's answer
    says what was applied, or what to fix: the model reads it and edits again, on the
    thread's retry budget (in ``state[verdict_key]``). The other calls run their tool
    from ``tools``, as a ``ToolNode`` would (an unknown tool, or one that raises, is an
    error answer for the model).

    ``route`` sends the graph on after the gate: ``pass`` and ``fix`` back to the agent,
    ``escalate`` out (the budget is spent, a person denied).
    """

    def __init__(
        self,
        validations: Iterable[Any] = (),
        *,
        folder: str | os.PathLike[str],
        tools: Iterable[BaseTool] = (),
        ask: bool = False,
        edit_tool: str = "write_file",
        catalog: Catalog | None = None,
        verdict_key: str = "verdict",
        tier: str = "default",
        policy: MaxNPolicy | None = None,
        resource: str = "repo",
        project: str | None = None,
        event_log: EventLog | str | os.PathLike[str] | None = None,
        default_timeout: float | None = None,
    ) -> None:
        self.tools = {tool.name: tool for tool in tools}
        """The tools the other calls run, by name."""
        if edit_tool in self.tools:
            raise ConfigError.at(
                "tools",
                f"{edit_tool!r} is the edit tool, which the gate answers itself",
                source="ToolCallGate()",
            )
        self.edit_tool = edit_tool
        self.verdict_key = verdict_key
        self.applier = ApprovalNode(
            validations,
            folder=folder,
            catalog=catalog,
            change_key="change",
            artifact_key=None,
            verdict_key=verdict_key,
            tier=tier,
            policy=policy,
            resource=resource,
            project=project,
            event_log=event_log,
            default_timeout=default_timeout,
            ask=ask,
        )
        """What validates and applies the edits (and asks, with ``ask``)."""

    def route(self, state: Mapping[str, Any]) -> Route:
        """Where the graph goes after the gate: ``pass`` (back to the agent) when the
        gate's last turn made no edit; else :func:`route` on the edit's verdict, with a
        validation that could not decide (``retry``) sent back as ``fix``: the agent calls
        ``write_file`` again, and the edit is judged afresh."""
        answered = _answers_of_last_turn(state.get("messages") or [])
        if not any(getattr(m, "name", None) == self.edit_tool for m in answered):
            return "pass"
        where = route(state, self.verdict_key)
        return "fix" if where == "retry" else where

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        messages = state.get("messages") or []
        calls = list(getattr(messages[-1], "tool_calls", None) or []) if messages else []
        if not calls:
            raise ConfigError.at("state['messages']", "the last message calls no tool")
        edits = [c for c in calls if c.get("name") == self.edit_tool]
        answers: dict[str, ToolMessage] = {}
        update: dict[str, Any] = {}
        if edits:
            change: dict[str, str] = {}
            for call in edits:
                args = call.get("args") or {}
                path, content = args.get("path"), args.get("content")
                problem = (
                    "give `path` and `content`, both text"
                    if not isinstance(path, str) or not isinstance(content, str)
                    else _path_problem(path)
                )
                if problem is not None:
                    answers[call["id"]] = self._answer(call, problem, error=True)
                    continue
                assert isinstance(path, str) and isinstance(content, str)
                change[path] = content  # a later write of the same file wins
            if change:
                try:
                    verdict = (
                        await self.applier._run(
                            {"change": change, self.verdict_key: state.get(self.verdict_key)},
                            config,
                        )
                    )[self.verdict_key]
                except ConfigError as error:  # the folder cannot take the change
                    text, applied = f"not applied: {error}", False
                else:
                    update[self.verdict_key] = verdict
                    applied = verdict.get("status") == "applied"
                    text = (
                        _applied_text(verdict)
                        if applied
                        else (f"not applied ({verdict.get('decision')}): {verdict.get('feedback')}")
                    )
                for call in edits:
                    answers.setdefault(call["id"], self._answer(call, text, error=not applied))
        for call in calls:
            if call["id"] not in answers:
                answers[call["id"]] = await self._call(call, config)
        update["messages"] = [answers[call["id"]] for call in calls]
        return update

    @staticmethod
    def _answer(call: Mapping[str, Any], text: str, *, error: bool = False) -> ToolMessage:
        return ToolMessage(
            content=text,
            tool_call_id=call["id"],
            name=call.get("name"),
            status="error" if error else "success",
        )

    async def _call(self, call: Mapping[str, Any], config: RunnableConfig | None) -> ToolMessage:
        tool = self.tools.get(call.get("name", ""))
        if tool is None:
            known = ", ".join(sorted([*self.tools, self.edit_tool]))
            return self._answer(
                call, f"no tool {call.get('name')!r} (the tools: {known})", error=True
            )
        try:
            # (LangGraph's run config, which the tool's own config type describes.)
            result = await tool.ainvoke(call.get("args") or {}, cast("Any", config))
        except Exception as exc:  # the model's to read, as a ToolNode answers it
            return self._answer(call, f"{type(exc).__name__}: {exc}", error=True)
        if isinstance(result, ToolMessage):
            return result
        text = result if isinstance(result, str) else json.dumps(_json_value(result))
        return self._answer(call, text)


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
        policy: dict[str, Any] = {"allow_ungated": True}
        if default_timeout is not None:
            policy["default_timeout"] = default_timeout
        _check_validations(
            [validation],
            catalog,
            resource=_NODE_RESOURCE if change else None,
            policy=policy,
            source="ValidationNode()",
        )
        self.validation = validation
        self.key = key
        self.result_key = result_key
        self.change = change
        self.catalog = catalog
        self.default_timeout = default_timeout

    async def _run(self, state: Mapping[str, Any], config: RunnableConfig | None) -> dict[str, Any]:
        where = f"state[{self.key!r}]"
        value = state.get(self.key)
        change: Any = None
        if self.change:
            if value is None:
                raise ConfigError.at(where, "the state has no change to validate")
            change, value = _checked_files(value, where), None
        else:
            value = _jsonable(value, where)
        try:
            verdict = await validate(
                change,
                [self.validation],
                artifact=value,
                catalog=self.catalog,
                resource=_NODE_RESOURCE,
                default_timeout=self.default_timeout,
                allow_ungated=True,  # an informational validation alone is fine: it is its result
            )
        except ConfigError as error:
            raise _at_state(error, where) from None
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
