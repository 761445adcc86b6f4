"""The engine: run a plan graph's nodes once, fanning validations out concurrently.

A node starts as soon as the nodes it ``needs`` are done — there is no global step
barrier. Ready nodes go to a bounded pool of worker tasks (``max_concurrency`` of them)
that pull from one ready queue; a node is a small slotted record, not a task or an object
graph of its own, so a fan-out of 100,000 validations costs about what 100,000 awaited
coroutines cost. Timeouts are kept by one watchdog task instead of a cancel scope per
call (a scope per call would cost more than the call itself).

Every transition is an event, appended before it is acted on: a validation's
``ValidationStarted`` is in the log before the validation runs, and a node's completion
is in the log before the nodes that need it are released.
"""

from __future__ import annotations

import contextlib
import enum
import math
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from time import perf_counter
from time import time as wall_clock
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

import anyio
import anyio.lowlevel
import msgspec
from gategraph.runtime._base._exceptions import (
    CatalogError,
    ConfigError,
    GategraphError,
    NotFoundError,
    RuntimeFault,
)
from gategraph.runtime._base._ids import new_ulid
from gategraph.runtime._base._sigint import watching_sigint
from gategraph.runtime._base._spans import NO_SPAN, span_activator
from gategraph.runtime._calls._call import (
    Outcome,
    changed_what_it_judges,
    exception_outcome,
    resolve_entrypoint,
)
from gategraph.runtime._calls._context import CHANGED, ToolContext
from gategraph.runtime._calls._frozen import changed, freeze, held, own_copy
from gategraph.runtime._calls._invoke import (
    PENDING,
    Isolation,
    Prepared,
    call_hook,
    check_entrypoint,
    ended,
    folders_of,
    install_output_router,
    own_capture,
    prepare,
    propagates,
    to_result,
)
from gategraph.runtime._calls._readonly import LEASE, Guard, own_slot
from gategraph.runtime._data._events import (
    ArtifactProduced,
    EventBase,
    NodeCompleted,
    NodeSkipped,
    NodeStarted,
    RunFinished,
    RunStarted,
    ValidationCompleted,
    ValidationStarted,
)
from gategraph.runtime._data._models import Validation, ValidationMode
from gategraph.runtime._data._results import (
    Enforcement,
    ResultError,
    ValidationResult,
    coerce_result,
)
from gategraph.runtime._storage._eventlog import EventLog, MemoryEventLog

from ._actors import Actor, ActorRef, ActorScope, open_actor_scope

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from gategraph.runtime._calls._invoke import _CaptureSlot
    from gategraph.runtime._calls._mcp import McpCall, McpServerRef, McpSessions, McpUse
    from gategraph.runtime._data._models import Tool
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import Node, PlanGraph

__all__ = [
    "GraphRun",
    "NodeRequest",
    "NodeResult",
    "NodeStatus",
    "ValidationRecord",
    "execute_graph",
    "execute_graph_sync",
    "open_plan_mcp_sessions",
]

ATTACHMENT_PREFIX: Final = "attachment:"
"""The prefix of an attachment's pseudo-node id (``attachment:ULID``)."""
# A worker that never has to wait (no-op validations) yields to the loop this often.
_YIELD_EVERY: Final = 64


class NodeStatus(enum.StrEnum):
    """How a node ended."""

    OK = "ok"
    """It ran; for a validation node, whatever its result said."""
    FAILED = "failed"
    """A work or actor node raised, timed out or could not run."""
    SKIPPED = "skipped"
    """A node it needs failed or was skipped, so it did not run."""


_context_of_call: Final = ToolContext._of_call  # bound once: it is made per validation
_OK: Final = NodeStatus.OK
"""Read once per validation: a global costs less than the enum's class attribute."""


class NodeResult(msgspec.Struct, kw_only=True, gc=False):
    """What one node (or attachment) did in a run."""

    node: str
    """The node id (``attachment:ULID`` for an attachment)."""
    kind: str
    """``work``, ``validation`` or ``actor``."""
    status: NodeStatus
    output: Any = None
    """The node's output; a validation node's is its :class:`ValidationResult`."""
    error: str | None = None
    """Why a failed or skipped node did not produce an output."""
    duration: float = 0.0
    """Seconds the node ran."""
    attempt: int = 1
    captured: dict[str, str] | None = None
    """What the call wrote to ``sys.stdout`` and ``sys.stderr``: ``{"stdout": ..., "stderr":
    ...}``, the last 8 KiB of each stream it wrote to, or ``None`` if it wrote nothing. A
    validation's is in its result's ``data["captured"]`` too, so the event log keeps it."""


class ValidationRecord(NodeResult, kw_only=True, gc=False):
    """A validation node's (or attachment's) result: which validation, its mode, its result.

    It is the node's :class:`NodeResult` too, so a fan-out keeps one record per validation.
    """

    validation: str
    mode: ValidationMode
    attachment_id: str | None = None
    result: ValidationResult
    isolation: str | None = None
    """What ran the call: ``inline``, ``thread``, ``process``, ``sandbox``, ``ray``, or
    ``mcp`` (its server)."""
    enforced_by: Enforcement | None = None
    """What held the call to read-only: ``kernel`` (the sandbox), ``guard`` (the in-process
    guard, where the validation runs by default because it is gategraph's own, or where
    its node or the run declared an isolation: a choice to trust it) or ``server`` (an MCP
    tool's server)."""
    network: bool | None = None
    """Whether the validation declared ``network: true``: the call was let use the network
    (else the guard, and in the sandbox the kernel, refused it every connection); None
    where the event log does not say (written before it was recorded)."""
    reused_from: int | None = None
    """The round whose call gave this result, when a later round reused it (nothing the
    validation is given had changed); None for a call of its own round."""

    @property
    def blocking(self) -> bool:
        """A required validation that did not pass (informational ones never block)."""
        return self.mode is ValidationMode.REQUIRED and not self.result.passed


class GraphRun(msgspec.Struct, kw_only=True):
    """The outcome of :func:`execute_graph`: per node and per attachment."""

    plan_id: str
    graph: str
    attempt: int
    nodes: dict[str, NodeResult]
    """Every node and attachment, by id, in completion order."""
    validations: list[ValidationRecord]
    """Every validation call (nodes and attachments), in completion order."""
    duration: float
    last_seq: int = 0
    """The seq of the run's last event: a caller logging more events continues after it."""
    hook_errors: list[str] = msgspec.field(default_factory=list)
    """Teardown hooks that failed (a failed setup hook fails the run before it starts)."""
    hook_output: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    """What lifecycle hooks wrote, by ``TOOL.hooks.setup`` (or ``.teardown``): like a call's
    ``captured``, only for the hooks that wrote something."""
    selected: int
    """How many nodes and attachments the run was to run: it passes only with a result for
    every one of them."""

    @property
    def passed(self) -> bool:
        """Every selected node has a result, no work node failed and no required validation
        failed."""
        # Invariant: a run that lost a node never passes, whatever the others did.
        return (
            len(self.nodes) == self.selected
            and not self.required_failures
            and all(r.status is not NodeStatus.FAILED for r in self.nodes.values())
        )

    @property
    def required_failures(self) -> list[ValidationRecord]:
        """Required validations that did not pass."""
        return [v for v in self.validations if v.blocking]


class NodeRequest(msgspec.Struct, kw_only=True):
    """The message an actor node receives: run this node with these inputs."""

    node: str
    inputs: dict[str, Any]
    """Outputs of the nodes it needs, by node id."""
    arguments: dict[str, Any]
    """The node's configured arguments."""
    context: ToolContext
    """Where the node runs (plan id, attempt, resources)."""


class _Spec:
    """What nodes running the same target the same way share: built once per target."""

    __slots__ = ("actor", "kind", "mcp", "mode", "prepared", "resources", "timeout", "validation")

    def __init__(
        self,
        kind: str,
        prepared: Prepared | None,
        resources: Mapping[str, Any],
        *,
        validation: str | None = None,
        mode: ValidationMode = ValidationMode.REQUIRED,
        actor: type[Actor] | None = None,
        timeout: float = math.inf,
    ) -> None:
        self.kind = kind
        self.prepared = prepared
        self.resources = resources
        self.validation = validation
        self.mode = mode
        self.actor = actor
        self.timeout = prepared.timeout if prepared is not None else timeout
        self.mcp: McpCall | None = None
        """The MCP call a validation ends in (itself, or the tool it wraps): its record
        goes into each result (set when the run binds its MCP tools)."""


class _Unit(msgspec.Struct, gc=False):
    """One schedulable node or attachment. A struct, small and made in C: a fan-out holds
    100,000, and compiling one costs half what a slotted class's ``__init__`` does.

    ``gc=False``: the collector never scans units (a fan-out's 100,000 would make every
    full collection slower). A unit can be in no reference cycle: it refers to the units
    that need it (the graph is acyclic), its spec and its result, none of which refers
    back to a unit.
    """

    id: str
    spec: _Spec
    arguments: Mapping[str, Any]
    needs: tuple[str, ...]
    pending: int
    """How many of ``needs`` are not done yet."""
    attachment_id: str | None = None
    dependents: list[_Unit] | None = None
    result: NodeResult | None = None


class _Worker:
    __slots__ = ("capture", "current", "deadline", "done", "scope", "timed_out", "wake")

    def __init__(self) -> None:
        self.done = 0
        # Set by the worker's own task: a cancel scope made here would be a second one per
        # worker, and a thousand of them cost milliseconds.
        self.scope: anyio.CancelScope | None = None
        self.deadline = math.inf
        self.current: _Unit | None = None
        self.timed_out = False
        self.wake: anyio.Event | None = None
        # Set by the worker's own task, like `scope`: a capture slot in its context.
        self.capture: _CaptureSlot | None = None


def _backend_clock() -> Callable[[], float]:
    """The running backend's clock, looked up once (``anyio.current_time`` costs ~2 µs a call).

    It is the same clock anyio uses, so a test's fake clock (trio's ``MockClock``) applies.
    """
    # Not sniffio: it is no dependency of ours (nor of anyio since 4.16). Under trio there
    # is no running asyncio loop.
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        import trio

        return trio.current_time
    if type(loop).time is asyncio.BaseEventLoop.time:
        # What that method returns, without its Python frame (read once per call).
        return time.monotonic
    return loop.time


def _keep_journals_out(stack: contextlib.AsyncExitStack, values: Mapping[str, Any]) -> None:
    """Hide the journal of each folder the run's validations see from its sandboxed
    workers, for the run: another plan applying into the folder holds its lock, and a
    sandboxed call that took it too would keep that apply waiting."""
    from gategraph.runtime._base._kernel import keep_out, let_in
    from gategraph.runtime._storage._resources import JOURNAL

    for value in values.values():
        if isinstance(value, Path):
            journal = value / JOURNAL
            keep_out(journal)
            stack.callback(let_in, journal)


def _resource_values(graph: PlanGraph, overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """The run's resources: each folder resolved once, before any node runs (a sandboxed
    work tool is given its folders by these paths, and refused one that a link has
    replaced since: code changing a folder around it could have put the link there)."""
    values: dict[str, Any] = {}
    for name, spec in graph.resources.items():
        if spec.kind == "directory":
            values[name] = spec.path
        else:
            values[name] = MappingProxyType(dict(spec.files))
    for name, value in (overrides or {}).items():
        if name not in graph.resources:
            raise ConfigError.at(f"resources.{name}", "not a resource of the graph")
        if isinstance(value, str):
            value = Path(value)
        elif isinstance(value, Mapping) and not isinstance(value, MappingProxyType):
            value = MappingProxyType(dict(value))
        values[name] = value
    folders = {k: os.path.realpath(v) for k, v in values.items() if isinstance(v, os.PathLike)}
    for name, value in values.items():
        if name in folders:
            _no_link_inside_another(name, os.path.abspath(value), folders)
    return {k: Path(folders[k]) if k in folders else v for k, v in values.items()}


def _no_link_inside_another(name: str, path: str, folders: Mapping[str, str]) -> None:
    """Refuse a folder reached through a link that lies inside another folder resource:
    code changing that one (a work tool, in place) could have put the link there, in this
    run or an earlier one, to lead this one's writes anywhere."""
    prefix = os.sep
    for part in Path(path).parts[1:]:
        prefix = os.path.join(prefix, part)
        if not os.path.islink(prefix):
            continue
        parent = os.path.realpath(os.path.dirname(prefix))
        for other, folder in folders.items():
            if other != name and (parent == folder or parent.startswith(folder + os.sep)):
                raise ConfigError.at(
                    f"resources.{name}",
                    f"its path passes through a link inside resource {other!r} ({prefix}), "
                    f"which a plan changing {other!r} could have put there; give the folder "
                    "itself",
                )


def _load_actor(target: str) -> type[Actor]:
    cls = resolve_entrypoint(target)
    if not (isinstance(cls, type) and callable(getattr(cls, "receive", None))):
        raise ConfigError.at("uses", f"{target!r} is not an actor class (it needs receive())")
    return cls


class _Compiler:
    """Turn a :class:`PlanGraph` (and the catalog's attachments) into units."""

    def __init__(
        self,
        graph: PlanGraph,
        resources: dict[str, Any],
        *,
        catalog: Catalog | None,
        plan_id: str,
        isolation: Isolation | None,
        select: Collection[str] | None = None,
        given: Mapping[str, Any] | None = None,
    ) -> None:
        self.graph = graph
        self.resources = resources
        self.catalog = catalog
        self.select = frozenset(select) if select is not None else None
        self.given = given or {}
        self.plan_id = plan_id
        self.isolation = isolation
        self.prepared: dict[tuple[str, str | None, float | None], Prepared] = {}
        self.has_mcp = False
        """Whether a unit calls an MCP tool (found per prepared tool, not per unit)."""
        self.has_sandbox = False
        """Whether a unit runs in the sandbox (likewise: a run without one pays nothing)."""

    def _prepare(self, name: str, isolation: str | None, timeout: float | None) -> Prepared:
        key = (name, isolation, timeout)
        found = self.prepared.get(key)
        if found is None:
            tool = self.graph.get_tool(name)
            found = self.prepared[key] = prepare(
                tool,
                self.graph.get_tool,
                isolation=isolation or self.isolation,  # type: ignore[arg-type]
                timeout=timeout,
                default_timeout=self.graph.policy.default_timeout,
                sandboxed=self.graph.policy.require_sandbox,
            )
            self.has_mcp = self.has_mcp or _calls_mcp(found)
            self.has_sandbox = self.has_sandbox or found.needs_sandbox
        return found

    def mcp_uses(self, units: Sequence[_Unit]) -> list[McpUse]:
        """Where the units call MCP tools, with the arguments known before the run."""
        from gategraph.runtime._calls._mcp import McpUse

        uses: list[McpUse] = []
        index: dict[str, int] | None = None
        for unit in units:
            prepared = unit.spec.prepared
            if prepared is None or not _calls_mcp(prepared):
                continue
            if unit.attachment_id is None:
                if index is None:
                    index = {node.id: i for i, node in enumerate(self.graph.nodes)}
                at = f"nodes[{index[unit.id]}]"
                where = f"{at}.{'tool' if unit.spec.kind == 'work' else 'validation'}"
                arguments_at = f"{at}.arguments"
            else:
                where = f"attachment {unit.attachment_id}"
                arguments_at = f"{where}.arguments"
            arguments: Mapping[str, Any] | None = unit.arguments
            wrappers: list[Tool] = []
            while prepared is not None:
                if prepared.mcp is not None:
                    uses.append(
                        McpUse(
                            prepared.mcp,
                            where,
                            arguments,
                            arguments_at,
                            frozenset(prepared.slots),
                            tuple(wrappers),
                        )
                    )
                    if unit.spec.validation is not None:
                        unit.spec.mcp = prepared.mcp
                    break
                # A validation the tool is wrapped by relies on it: it must be read-only.
                wrappers.append(prepared.tool)
                mapping = getattr(prepared.tool, "argument_mapping", None)
                if mapping is not None and arguments is not None:
                    arguments = _mapped(mapping, arguments)
                prepared = prepared.wrapped
        return uses

    def mcp_server(self, name: str) -> McpServerRef | str | None:
        """The server an MCP tool names: the catalog's, which its tools and attachments
        always use, else the graph's declaration; a text when the graph declares another
        server under a name of the catalog's."""
        from gategraph.runtime._calls._mcp import McpServerRef, same_declaration

        own = self.graph.mcp_servers.get(name)
        if self.catalog is not None:
            try:
                server = self.catalog.get_server(name)
            except NotFoundError:
                pass
            except CatalogError as exc:
                return " ".join(str(exc).split())
            else:
                if own is not None and not same_declaration(own, server):
                    return (
                        f"mcp_servers.{name} of the graph differs from the catalog's MCP "
                        f"server {name!r}, which the catalog's tools and attachments use: "
                        "give the graph's another name"
                    )
                return McpServerRef(server, "catalog")
        if own is not None:
            return McpServerRef(own, "graph")
        try:
            # A catalog's server the loader resolved (the run is given no catalog).
            return McpServerRef(self.graph.get_mcp_server(name), "catalog")
        except KeyError:
            return None

    def _node_resources(self, names: tuple[str, ...] | None) -> Mapping[str, Any]:
        if names is None:
            return self.resources
        return {name: self.resources[name] for name in names}

    def compile(self) -> list[_Unit]:
        units: list[_Unit] = []
        errors: list[ConfigError] = []
        work_ids: list[str] = []
        specs: dict[tuple[Any, ...], _Spec] = {}
        for index, node in enumerate(self.graph.nodes):
            key = (
                node.tool,
                node.validation,
                node.uses,
                node.isolation,
                node.timeout,
                node.resources,
            )
            spec = specs.get(key)
            if spec is None:
                try:
                    spec = specs[key] = self._spec(node)
                except ConfigError as exc:
                    errors.append(exc.prefixed(f"nodes[{index}]"))
                    continue
            needs = node.needs
            units.append(_Unit(node.id, spec, node.arguments, needs, len(needs)))
            if spec.kind == "work":
                work_ids.append(node.id)
        if errors:
            raise ConfigError(
                [issue for error in errors for issue in error.issues], source=self.graph.source
            )
        if self.catalog is not None:
            units.extend(self._attachment_units(tuple(work_ids)))
        if self.select is not None:
            units = self._selected(units)
        if not any(unit.needs for unit in units):
            return units  # a fan-out: nothing to link
        by_id = {unit.id: unit for unit in units}
        for unit in units:
            for need in unit.needs:
                needed = by_id.get(need)
                if needed is None:  # given: done before this run
                    unit.pending -= 1
                    continue
                if needed.dependents is None:
                    needed.dependents = []
                needed.dependents.append(unit)
        return units

    def _selected(self, units: list[_Unit]) -> list[_Unit]:
        """Keep the selected units; their other needs must be given."""
        select = self.select
        assert select is not None
        kept = [unit for unit in units if unit.id in select]
        if len(kept) != len(select):
            unknown = sorted(select - {unit.id for unit in kept})
            raise ConfigError.at("select", f"no node or attachment {', '.join(unknown)}")
        for unit in kept:
            if not unit.needs:
                continue
            missing = [n for n in unit.needs if n not in select and n not in self.given]
            if missing:
                raise ConfigError.at(
                    "given",
                    f"{unit.id} needs {', '.join(missing)}, which neither runs nor is given",
                )
        return kept

    def _spec(self, node: Node) -> _Spec:
        kind = node.kind.value
        resources = self._node_resources(node.resources)
        if kind == "actor":
            return _Spec(
                kind,
                None,
                resources,
                actor=_load_actor(node.target),
                timeout=node.timeout or self.graph.policy.default_timeout,
            )
        prepared = self._prepare(node.target, node.isolation, node.timeout)
        tool = prepared.tool
        return _Spec(
            kind,
            prepared,
            resources,
            validation=tool.name if kind == "validation" else None,
            mode=tool.mode if isinstance(tool, Validation) else ValidationMode.REQUIRED,
        )

    def _attachment_units(self, work_ids: tuple[str, ...]) -> list[_Unit]:
        assert self.catalog is not None
        units = []
        for name in self.graph.resources:
            for attachment in self.catalog.resolve(
                name, project=self.graph.project, plan=self.plan_id
            ):
                validation = self.catalog.get(attachment.validation)
                assert isinstance(validation, Validation)
                prepared = prepare(
                    validation,
                    self.catalog.get,
                    isolation=self.isolation,
                    default_timeout=self.graph.policy.default_timeout,
                    sandboxed=self.graph.policy.require_sandbox,
                )
                self.has_mcp = self.has_mcp or _calls_mcp(prepared)
                self.has_sandbox = self.has_sandbox or prepared.needs_sandbox
                spec = _Spec(
                    "validation",
                    prepared,
                    {name: self.resources[name]},
                    validation=validation.name,
                    mode=validation.mode,
                )
                units.append(
                    _Unit(
                        f"{ATTACHMENT_PREFIX}{attachment.id}",
                        spec,
                        attachment.arguments,
                        work_ids,
                        len(work_ids),
                        attachment_id=attachment.id,
                    )
                )
        return units


class _Engine:
    def __init__(
        self,
        graph: PlanGraph,
        units: list[_Unit],
        *,
        plan_id: str,
        log: EventLog,
        max_concurrency: int,
        attempt: int,
        given: Mapping[str, Any] | None = None,
        first_seq: int = 1,
        causation_id: str | None = None,
        artifact: Any = None,
    ) -> None:
        self.given = given or {}
        # One frozen projection for the round's validations: none can change what another
        # judges, nor the caller's own object (a copy). Work and actor nodes get the
        # artifact as it was given: theirs to change.
        self.artifact = freeze(artifact)
        # An object of another class in it is a copy no container refuses to change: each
        # call gets a copy of its own then, judged for a change once it returns.
        self.artifact_held = held(self.artifact)
        self.given_artifact = artifact
        # The frozen projection of each output a validation needs, made once for the run
        # and shared (by node and by what a refusal calls it), and whether it is held.
        self.frozen_outputs: dict[tuple[str, str], tuple[Any, bool]] = {}
        self.cause = causation_id
        self.graph = graph
        self.units = units
        self.plan_id = plan_id
        self.log = log
        self.attempt = attempt
        self.max_workers = max(1, min(max_concurrency, len(units)))
        self.workers: list[_Worker] = []
        self.limiter = anyio.CapacityLimiter(self.max_workers)
        # Ready units, and the idle workers waiting for one (each on its own event). A
        # deque, not a memory object stream: a fan-out passes every unit through it, and a
        # stream's send and receive cost ten times a deque's append and pop.
        self.ready: deque[_Unit] = deque()
        self.sleepers: list[_Worker] = []
        # Worker accounting for growing the pool on demand (see `_grow`).
        self.idle = 0
        self.starting = 0
        self.busy = 0
        # What the run needs of each way of running a node, read once per spec (a fan-out
        # of 10,000 validations has one), not once per unit.
        specs = list(dict.fromkeys(unit.spec for unit in units))
        self.hooks = _collect_hooks(specs, graph.policy.default_timeout)
        self.has_actors = any(spec.actor is not None for spec in specs)
        self.hook_errors: list[str] = []
        self.hook_output: dict[str, dict[str, str]] = {}
        self.pool: TaskGroup | None = None
        # How the run queues an event (a start, say) without waiting for it; a memory
        # log's own list once the run has started (see `_run`).
        self.append: Callable[[EventBase], None] = log.append_nowait
        # A log that stores on append needs no wait before releasing dependents.
        self.immediate = bool(getattr(log, "appends_immediately", False))
        self.unreleased: list[_Unit] = []
        self.wake = anyio.Event()
        self.remaining = self.selected = len(units)
        # Units taken by a worker and not yet released. Once every unit left is one of
        # them, nothing can become ready again, and an idle worker may leave.
        self.in_flight = 0
        self.results: dict[str, NodeResult] = {}
        self.failed = False
        """Whether a node failed or was skipped (a validation's result is its own)."""
        self.validations: list[ValidationRecord] = []
        self.seq = first_seq - 1
        self.start_id = ""
        self.actors: dict[str, ActorRef] = {}
        self.actor_errors: dict[str, Exception] = {}
        # A tracing observer on the log makes each call's span current while it runs (see
        # `_spans`); asked once per run, so without one a node pays a None check.
        self.spans = span_activator(log)
        timeouts = [spec.timeout for spec in specs if spec.timeout != math.inf]
        shortest = min(timeouts, default=1.0)
        # Timeouts are enforced within a tick: a twentieth of the shortest, 1 ms to 100 ms.
        self.tick = min(0.1, max(0.001, shortest / 20))

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    async def run(self) -> GraphRun:
        torn_down: list[str] = []
        ready: list[_Hooks] = []
        try:
            for hooks in self.hooks:
                if hooks.setup is not None:
                    # What a hook raises (`sys.exit()` included) or a hook that does not
                    # return within the tool's timeout fails the run before it starts.
                    outcome = await self._call_hook(hooks, "setup")
                    if not outcome.ok:
                        raise RuntimeFault(outcome.message)
                if hooks.teardown is not None:
                    ready.append(hooks)
            return await self._run()
        finally:
            # Teardown runs even when the run failed or was cancelled (shielded), last set up
            # first; its failures are reported on the run, not raised over its results.
            with anyio.CancelScope(shield=True):
                for hooks in reversed(ready):
                    outcome = await self._call_hook(hooks, "teardown")
                    if not outcome.ok:
                        torn_down.append(outcome.message)
            self.hook_errors.extend(torn_down)

    async def _call_hook(self, hooks: _Hooks, which: Literal["setup", "teardown"]) -> Outcome:
        hook = hooks.setup if which == "setup" else hooks.teardown
        assert hook is not None
        name = hooks.tool.name
        outcome = await call_hook(
            f"the {which} hook of {name!r}",
            hook,
            hooks.timeout,
            tool=hooks.tool,
            plan=self.plan_id,
            writable=hooks.writable,
        )
        if outcome.captured:
            # Kept on the run like a call's output: never mixed into the program's own.
            self.hook_output[f"{name}.hooks.{which}"] = outcome.captured
        return outcome

    async def _run(self) -> GraphRun:
        self.clock = _backend_clock()
        # What validations and tools print is theirs, kept in their records; it never
        # mixes into the output of the program running the plan.
        install_output_router()
        started = perf_counter()
        event_id = new_ulid()
        self.start_id = event_id
        await self.log.append(
            RunStarted(
                id=event_id,
                plan_id=self.plan_id,
                seq=self._next(),
                causation_id=self.cause,
                at=wall_clock(),
                graph=self.graph.name,
                project=self.graph.project,
                attempt=self.attempt,
            )
        )
        if type(self.log) is MemoryEventLog:
            # Its plan's list exists now (no run makes an empty plan appear in the log).
            self.append = self.log.appender(self.plan_id)
        # The run's enclosing span (the round, or the work phase) is current for its nodes
        # and actors: the tasks they run in copy this context.
        spans = self.spans
        with NO_SPAN if spans is None else spans.activate_span(self.plan_id, "run"):
            await self._run_units()
        if len(self.results) != self.selected:
            # Invariant: every selected unit ends with a result (run, failed, timed out or
            # skipped). One without is gategraph's bug, never a passing run.
            raise RuntimeFault(
                f"graph {self.graph.name!r}: {self.selected - len(self.results)} of "
                f"{self.selected} nodes ended without a result (a bug in gategraph)"
            )
        duration = perf_counter() - started
        failed = self.failed
        await self.log.append(
            RunFinished(
                id=new_ulid(),
                plan_id=self.plan_id,
                seq=self._next(),
                at=wall_clock(),
                causation_id=self.start_id,
                status="failed" if failed else "completed",
                duration=duration,
            )
        )
        return GraphRun(
            plan_id=self.plan_id,
            graph=self.graph.name,
            attempt=self.attempt,
            nodes=self.results,
            validations=self.validations,
            duration=duration,
            last_seq=self.seq,
            hook_errors=self.hook_errors,
            hook_output=self.hook_output,
            selected=self.selected,
        )

    async def _run_units(self) -> None:
        async with open_actor_scope(self._actor_failed) as actors:
            if self.has_actors:
                self._spawn_actors(actors)
            self.ready.extend(unit for unit in self.units if unit.pending == 0)
            # From here a unit is held only by the queue or by the units that need it, so
            # each is freed once it is done: a wide fan-out does not keep them all.
            self.units = []
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watchdog)
                if not self.immediate:
                    outer.start_soon(self._releaser)
                async with anyio.create_task_group() as pool:
                    self.pool = pool
                    self._spawn_workers(1)
                outer.cancel_scope.cancel()
            actors.stop_all()

    def _queue(self, unit: _Unit) -> None:
        self.ready.append(unit)
        if self.sleepers:
            self._wake(self.sleepers.pop())

    def _wake(self, worker: _Worker) -> None:
        assert worker.wake is not None
        worker.wake.set()
        worker.wake = None

    def _spawn_workers(self, count: int) -> None:
        assert self.pool is not None
        for _ in range(count):
            worker = _Worker()
            self.workers.append(worker)
            self.starting += 1
            self.pool.start_soon(self._work, worker)

    def _grow(self) -> None:
        """Start more workers when ready units wait and no worker is free to take them.

        Workers start on demand rather than all at once: a fan-out of no-op validations is
        best served by one worker that never waits, and starting 1,000 tasks costs more than
        running 10,000 no-ops. A worker that is inside a call while another one runs is
        suspended in it (one thread runs the loop), so ``busy`` counts the calls that are
        waiting on I/O; the pool then doubles, reaching 1,000 workers in ten rounds.
        """
        waiting = len(self.ready) - self.idle - self.starting
        room = self.max_workers - len(self.workers)
        if waiting > 0 and room > 0:
            # Nothing suspended: keep one spare worker at most. Calls suspended: grow the
            # pool to twice their number, plus one (it doubles while every call waits).
            # Bounded by the suspended calls, not by what is ready: a few slow calls among
            # many quick ones (a fan-out where 1% time out) must not start a worker per
            # quick one.
            suspended = self.busy
            want = (
                1 - self.starting
                if not suspended
                else min(waiting, room, 2 * suspended + 1 - len(self.workers))
            )
            if want > 0:
                self._spawn_workers(want)

    def _actor_failed(self, ref: ActorRef, error: Exception) -> None:
        # An actor that failed outside an ask (its on_start) fails its node, not the run.
        self.actor_errors[ref.name] = error

    def _spawn_actors(self, scope: ActorScope) -> None:
        for unit in self.units:
            if unit.spec.actor is not None:
                self.actors[unit.id] = scope.spawn(unit.spec.actor(), name=unit.id)

    async def _watchdog(self) -> None:
        workers = self.workers
        while True:
            await anyio.sleep(self.tick)
            now = self.clock()
            for worker in workers:
                if worker.deadline < now and worker.scope is not None:
                    worker.timed_out = True
                    worker.deadline = math.inf
                    worker.scope.cancel()

    async def _work(self, worker: _Worker) -> None:
        own_slot()
        worker.capture = own_capture()
        self.starting -= 1
        ready = self.ready
        while True:
            with anyio.CancelScope() as worker.scope:
                while True:
                    # Take what is ready without a trip through the event loop; wait only
                    # when nothing is. A fan-out of no-op validations then costs one loop
                    # iteration per batch instead of one per validation.
                    if not ready:
                        if self.remaining == self.in_flight:
                            # Every unit left is running: none can become ready, and a
                            # worker gone now costs nothing at the end of a fan-out.
                            return
                        worker.wake = wake = anyio.Event()
                        self.sleepers.append(worker)
                        self.idle += 1
                        try:
                            await wake.wait()
                        finally:
                            self.idle -= 1
                        continue
                    unit = ready.popleft()
                    self.in_flight += 1
                    if (
                        len(ready) > self.idle + self.starting
                        and (self.busy or not self.starting)
                        and len(self.workers) < self.max_workers
                    ):
                        # (With no call suspended and a worker starting, there is nothing
                        # to grow: see `_grow`.)
                        self._grow()
                    worker.current = unit
                    # Busy from taking the unit to logging its end: a worker waiting on
                    # the call or on the event log is one the pool should not count on.
                    self.busy += 1
                    try:
                        if unit.spec.validation is not None:
                            done = await self._validate(worker, unit)
                        else:
                            outcome, duration, cause = await self._execute(worker, unit)
                            done = not worker.timed_out
                            if done:
                                self._finish(unit, outcome, duration, cause)
                        if not done:
                            # The watchdog fired as the call returned; leave the cancelled
                            # scope before awaiting anything, and count it as a timeout.
                            break
                    finally:
                        self.busy -= 1
                    worker.done += 1
                    if not worker.done % _YIELD_EVERY:
                        # Let the watchdog, other workers and cancellation in.
                        await anyio.lowlevel.checkpoint()
            # Only the watchdog cancels this scope: the current unit ran out of time.
            late = worker.current
            assert late is not None and worker.timed_out
            worker.timed_out = False
            self._timed_out(late, worker.capture.take() if worker.capture else None)

    # -- one unit ----------------------------------------------------------------------------

    def _inputs(self, unit: _Unit) -> tuple[dict[str, Any], Any]:
        """What a work or actor node that needs nodes is given: their outputs, and its
        artifact (the one output it needs, or all of them)."""
        inputs = {need: self._output(need) for need in unit.needs}
        return inputs, next(iter(inputs.values())) if len(inputs) == 1 else inputs

    def _frozen_inputs(self, unit: _Unit) -> tuple[dict[str, Any], Any, bool]:
        """:meth:`_inputs` for a validation, frozen like the artifact, each output once
        for the run (the validations that need it share it); and whether all of it is
        held (see ``_frozen.held``)."""
        inputs = {}
        whole = True
        for need in unit.needs:
            # One output is the unit's artifact too, and named so.
            named = "artifact" if len(unit.needs) == 1 else f"inputs[{need!r}]"
            known = self.frozen_outputs.get((need, named))
            if known is None:
                output = freeze(self._output(need), named)
                known = self.frozen_outputs[need, named] = (output, held(output))
            inputs[need] = known[0]
            whole = whole and known[1]
        return inputs, next(iter(inputs.values())) if len(inputs) == 1 else inputs, whole

    def _output(self, need: str) -> Any:
        result = self.results.get(need)
        output = result.output if result is not None else self.given[need]
        if isinstance(output, ValidationResult):
            return msgspec.structs.asdict(output)
        return output

    async def _validate(self, worker: _Worker, unit: _Unit) -> bool:
        """Run one validation and record its result; False if its time ran out as it
        returned (the worker then counts it as a timeout).

        The fan-out's hot path, so written flat: one frame between the worker and the
        validation, the run's constants read once. An async validation with nothing
        wrapped is awaited right here, under the guard ``Prepared.call`` applies to the
        others (the same envelope: a lease of its own, the worker's capture slot).
        """
        spec = unit.spec
        prepared = spec.prepared
        assert prepared is not None and spec.validation is not None
        # (The call only for a unit that needs nodes: a fan-out's validations need none.)
        inputs, artifact, whole = (
            self._frozen_inputs(unit) if unit.needs else (None, self.artifact, self.artifact_held)
        )
        given: bytes | None = None
        if not whole and (prepared.wrapped is not None or prepared.ran_in in ("inline", "thread")):
            # Not all of it frozen, and judged in this process: a copy of its own, so no
            # other call sees what it does. (A worker process, the sandbox and Ray each get
            # a copy anyway, and judge it there.)
            (inputs, artifact), given = own_copy((inputs, artifact))
        plan_id = self.plan_id
        attempt = self.attempt
        start_id = new_ulid()
        self.seq += 1
        # A start causes nothing that must survive a crash (a lost start only means the
        # validation runs again on resume), so it is queued, not awaited; the completion
        # that follows commits it too.
        self.append(
            ValidationStarted(
                id=start_id,
                plan_id=plan_id,
                seq=self.seq,
                at=wall_clock(),
                causation_id=self.start_id,
                node=unit.id,
                validation=spec.validation,
                attachment_id=unit.attachment_id,
                attempt=attempt,
            )
        )
        begin = perf_counter()
        worker.deadline = self.clock() + spec.timeout
        try:
            if prepared.awaited and self.spans is None:
                capture = worker.capture
                assert capture is not None and prepared.func is not None
                assert prepared.guard_label is not None  # a validation's
                capture.captured = PENDING
                guard = Guard(prepared.guard_label, network=prepared.network)
                context = _context_of_call(plan_id, unit.id, attempt, spec.resources, guard)
                # `enter` and `leave`, inline (the worker made the hook ready: `own_slot`).
                lease = [guard, True]
                token = LEASE.set(lease)
                try:
                    value = await prepared.func(
                        **prepared.bind(unit.arguments, spec.resources, artifact, inputs, context)
                    )
                except BaseException as exc:
                    if propagates(exc):
                        raise
                    outcome = exception_outcome(prepared.tool.name, exc)
                else:
                    outcome = Outcome(True, value)
                finally:
                    lease[1] = False
                    LEASE.reset(token)
                    if context._scratch is not None:
                        context.cleanup()
                if guard.violation is not None or capture.captured is not PENDING:
                    outcome = ended(outcome, guard, capture)
                else:
                    capture.captured = None  # wrote nothing, refused nothing
            else:
                call = prepared.call(
                    unit.arguments,
                    spec.resources,
                    artifact,
                    inputs,
                    plan_id,
                    unit.id,
                    attempt,
                    self.limiter,
                )
                if self.spans is None:
                    outcome = await call
                else:
                    # Its span (opened by the start event above) is current while it runs.
                    with self.spans.activate_span(plan_id, "validation", (unit.id, attempt)):
                        outcome = await call
        except anyio.get_cancelled_exc_class():
            outcome = self._stray_cancellation(worker, unit)
        finally:
            worker.deadline = math.inf
        if worker.timed_out:
            return False
        if given is not None and outcome.ok and changed((inputs, artifact), given):
            outcome = changed_what_it_judges(prepared.tool.name, outcome)
        self._record(unit, outcome, perf_counter() - begin, start_id)
        return True

    async def _execute(self, worker: _Worker, unit: _Unit) -> tuple[Outcome, float, str]:
        """Run one work or actor node (a validation is :meth:`_validate`'s)."""
        spec = unit.spec
        inputs, artifact = self._inputs(unit) if unit.needs else (None, self.given_artifact)
        event_id = new_ulid()
        self.seq += 1
        self.append(
            NodeStarted(
                id=event_id,
                plan_id=self.plan_id,
                seq=self.seq,
                at=wall_clock(),
                causation_id=self.start_id,
                node=unit.id,
                attempt=self.attempt,
            )
        )
        begin = perf_counter()
        worker.deadline = self.clock() + spec.timeout
        try:
            if spec.actor is not None:
                outcome = await self._ask_actor(unit, inputs or {})
            else:
                assert spec.prepared is not None
                outcome = await spec.prepared.call(
                    unit.arguments,
                    spec.resources,
                    artifact,
                    inputs,
                    self.plan_id,
                    unit.id,
                    self.attempt,
                    self.limiter,
                )
        except anyio.get_cancelled_exc_class():
            outcome = self._stray_cancellation(worker, unit)
        finally:
            worker.deadline = math.inf
        return outcome, perf_counter() - begin, event_id

    def _stray_cancellation(self, worker: _Worker, unit: _Unit) -> Outcome:
        """The outcome of a call that cancelled the task it ran in; re-raises any other
        cancellation (a timeout, the watchdog's; or the run being cancelled). Only in an
        ``except`` of the cancellation."""
        if not _withdraw_stray_cancellation():
            raise
        # Uncaught, that would end this worker, and anyio would end the pool with it,
        # every unit left unfinished.
        spec = unit.spec
        name = spec.prepared.tool.name if spec.prepared is not None else f"actor {unit.id!r}"
        return Outcome(
            False,
            error=ResultError.EXCEPTION,
            message=f"{name} cancelled the task it ran in (Task.cancel()); "
            "nothing else cancelled the call",
            detail={"exception_type": "CancelledError"},
            captured=worker.capture.take() if worker.capture is not None else None,
        )

    async def _ask_actor(self, unit: _Unit, inputs: dict[str, Any]) -> Outcome:
        context = ToolContext(
            plan_id=self.plan_id, node=unit.id, attempt=self.attempt, resources=unit.spec.resources
        )
        request = NodeRequest(
            node=unit.id, inputs=inputs, arguments=dict(unit.arguments), context=context
        )
        try:
            value = await self.actors[unit.id].ask(request)
        except Exception as exc:
            cause = self.actor_errors.get(unit.id, exc)
            return Outcome(
                False,
                error=ResultError.EXCEPTION,
                message=f"actor {unit.id!r} raised {type(cause).__name__}: {cause}",
            )
        finally:
            context.cleanup()
        return Outcome(True, value)

    def _timed_out(self, unit: _Unit, captured: dict[str, str] | None) -> None:
        # A sync call in a worker thread runs on in the background, abandoned (nothing can
        # stop a thread); one in a worker process was killed with it.
        outcome = Outcome(
            False,
            error=ResultError.TIMEOUT,
            message=f"{unit.id} timed out after {unit.spec.timeout:g} s",
            detail={"timeout": unit.spec.timeout},
            captured=captured,
        )
        self._finish(unit, outcome, unit.spec.timeout, self.start_id)

    def _finish(self, unit: _Unit, outcome: Outcome, duration: float, cause: str) -> None:
        if unit.spec.validation is not None:
            self._record(unit, outcome, duration, cause)
            return
        captured = outcome.captured
        events: list[EventBase] = []
        completed_id = new_ulid()
        if outcome.ok:
            output = outcome.value
            node_result = NodeResult(
                node=unit.id,
                kind=unit.spec.kind,
                status=NodeStatus.OK,
                output=output,
                duration=duration,
                attempt=self.attempt,
                captured=captured,
            )
        else:
            self.failed = True
            node_result = NodeResult(
                node=unit.id,
                kind=unit.spec.kind,
                status=NodeStatus.FAILED,
                error=outcome.message,
                duration=duration,
                attempt=self.attempt,
                captured=captured,
            )
        events.append(
            NodeCompleted(
                id=completed_id,
                plan_id=self.plan_id,
                seq=self._next(),
                at=wall_clock(),
                causation_id=cause,
                node=unit.id,
                attempt=self.attempt,
                ok=outcome.ok,
                duration=duration,
                output=_jsonable(outcome.value) if outcome.ok else None,
                error=None if outcome.ok else outcome.message,
                captured=captured,
            )
        )
        if outcome.ok and unit.spec.kind == "work":
            events.append(
                ArtifactProduced(
                    id=new_ulid(),
                    plan_id=self.plan_id,
                    seq=self._next(),
                    at=wall_clock(),
                    causation_id=completed_id,
                    node=unit.id,
                    artifact=_jsonable(outcome.value),
                )
            )
        for event in events:
            self.append(event)
        unit.result = node_result
        self.results[unit.id] = node_result
        self._settle(unit)

    def _record(self, unit: _Unit, outcome: Outcome, duration: float, cause: str) -> None:
        """Record a validation's result: its record, and its completion event."""
        spec = unit.spec
        validation = spec.validation
        assert validation is not None
        captured = outcome.captured
        prepared = spec.prepared
        ran_in = prepared.ran_in if prepared is not None else None
        enforced_by = prepared.enforced_by if prepared is not None else None
        network = prepared.network if prepared is not None else False
        # (`to_result`, without its frame for a call that returned.)
        result = coerce_result(outcome.value) if outcome.ok else to_result(outcome)
        if spec.mcp is not None:
            result = spec.mcp.recorded(result, outcome)
        if captured is not None and "captured" not in result.data:
            result = ValidationResult(
                passed=result.passed,
                message=result.message,
                data={**result.data, "captured": captured},
            )
        self.seq += 1
        self.append(
            ValidationCompleted(
                id=new_ulid(),
                plan_id=self.plan_id,
                seq=self.seq,
                at=wall_clock(),
                causation_id=cause,
                node=unit.id,
                validation=validation,
                attachment_id=unit.attachment_id,
                attempt=self.attempt,
                result=result,
                duration=duration,
                isolation=ran_in,
                network=network,
            )
        )
        record = ValidationRecord(
            node=unit.id,
            kind=spec.kind,
            status=_OK,
            output=result,
            duration=duration,
            attempt=self.attempt,
            captured=captured,
            validation=validation,
            mode=spec.mode,
            attachment_id=unit.attachment_id,
            result=result,
            isolation=ran_in,
            enforced_by=enforced_by,
            network=network,
        )
        self.validations.append(record)
        unit.result = record
        self.results[unit.id] = record
        if self.immediate and not unit.dependents:
            # `_release` of a leaf, inline: a fan-out's every validation is one, and the
            # two calls cost 2-3% of its time.
            self.remaining -= 1
            self.in_flight -= 1
            if self.remaining == self.in_flight:
                self._release_sleepers()
        else:
            self._settle(unit)

    def _settle(self, unit: _Unit) -> None:
        """Release a unit whose result is stored, once its completion is durable."""
        if self.immediate:
            self._release(unit)
        else:
            # Invariant: the nodes that need this one start only once its completion is
            # durable; the releaser lets them go after the log confirms it.
            self.unreleased.append(unit)
            self.wake.set()

    async def _releaser(self) -> None:
        """Release completed units in batches, each once the log says it is durable."""
        while True:
            await self.wake.wait()
            self.wake = anyio.Event()
            batch, self.unreleased = self.unreleased, []
            await self.log.flush(self.plan_id)
            for unit in batch:
                self._release(unit)

    def _release(self, unit: _Unit) -> None:
        """Count ``unit`` done; queue dependents whose needs are all done, skip the doomed."""
        self.remaining -= 1
        self.in_flight -= 1
        dependents = unit.dependents
        if dependents:
            result = unit.result
            if result is not None and result.status is not NodeStatus.OK:
                self._skip_after(unit, result.status)
            else:
                for dependent in dependents:
                    dependent.pending -= 1
                    if dependent.pending == 0 and dependent.result is None:
                        self._queue(dependent)
        if self.remaining == self.in_flight:
            self._release_sleepers()

    def _release_sleepers(self) -> None:
        """Nothing can become ready any more: let the idle workers go."""
        while self.sleepers:
            self._wake(self.sleepers.pop())

    def _skip_after(self, failed: _Unit, status: NodeStatus) -> None:
        """Skip everything that needs ``failed``, directly or not (iteratively: a failure
        before a long chain must not recurse once per node)."""
        pending = [(failed, status)]
        while pending:
            done, done_status = pending.pop()
            for dependent in done.dependents or ():
                dependent.pending -= 1
                if dependent.result is None:
                    self._skip(dependent, f"skipped: {done.id} {done_status.value}")
                    dependent.pending = 0
                    self.remaining -= 1
                    pending.append((dependent, NodeStatus.SKIPPED))

    def _skip(self, unit: _Unit, reason: str) -> None:
        self.failed = True
        unit.result = NodeResult(
            node=unit.id,
            kind=unit.spec.kind,
            status=NodeStatus.SKIPPED,
            error=reason,
            attempt=self.attempt,
        )
        self.results[unit.id] = unit.result
        self.append(
            NodeSkipped(
                id=new_ulid(),
                plan_id=self.plan_id,
                seq=self._next(),
                at=wall_clock(),
                causation_id=self.start_id,
                node=unit.id,
                reason=reason,
            )
        )


class _Hooks(NamedTuple):
    """One tool's lifecycle hooks, resolved, and how long each may take."""

    tool: Tool
    setup: Callable[[], Any] | str | None
    teardown: Callable[[], Any] | str | None
    """A callable, or where the tool runs in the sandbox, its entrypoint (never imported
    here: it runs in the sandbox, as the tool's calls do)."""
    timeout: float
    """The tool's timeout (else the graph policy's default)."""
    writable: tuple[str, ...] = ()
    """A sandboxed work tool's: the folders of its nodes' resources."""


def _collect_hooks(specs: Sequence[_Spec], default_timeout: float) -> list[_Hooks]:
    """Each tool's setup and teardown hooks, once per tool, in the order tools first appear
    (``specs`` in the order units first use them). A hook runs where its tool's calls do:
    in the sandbox (a work tool's with the folders of its resources writable there), or
    in gategraph's own process."""
    seen: dict[str, _Hooks | None] = {}
    folders: dict[str, set[str]] = {}
    for spec in specs:
        prepared = spec.prepared
        while prepared is not None:
            tool = prepared.tool
            sandboxed = prepared.isolation == "sandbox" and prepared.mcp is None
            if sandboxed and not prepared.is_validation and prepared is spec.prepared:
                folders.setdefault(tool.name, set()).update(folders_of(spec.resources))
            if tool.name not in seen:
                setup = _resolve_hook(tool.name, tool.hooks.setup, "setup", sandboxed)
                teardown = _resolve_hook(tool.name, tool.hooks.teardown, "teardown", sandboxed)
                seen[tool.name] = (
                    _Hooks(tool, setup, teardown, tool.timeout or default_timeout)
                    if setup is not None or teardown is not None
                    else None
                )
            prepared = prepared.wrapped
    return [
        hooks._replace(writable=tuple(sorted(folders.get(hooks.tool.name, ()))))
        for hooks in seen.values()
        if hooks is not None
    ]


def _resolve_hook(
    tool: str, entrypoint: str | None, which: str, sandboxed: bool
) -> Callable[[], Any] | str | None:
    if not entrypoint:
        return None
    try:
        if sandboxed:
            check_entrypoint(entrypoint, field=f"hooks.{which}")
            return entrypoint
        return resolve_entrypoint(entrypoint, field=f"hooks.{which}")
    except ConfigError as exc:
        issue = exc.issues[0]
        raise ConfigError.at(issue.field, f"{issue.message} (a hook of {tool!r})") from None


def _withdraw_stray_cancellation() -> bool:
    """Whether a cancellation that reached an engine worker came from no cancel scope, and
    if so, withdraw it so the worker can go on.

    Every cancellation gategraph makes is a cancel scope's (the watchdog's, the run's), and
    a cancellation from outside anyio (``asyncio.timeout()`` around ``execute_graph``)
    reaches the workers through the task groups' scopes too. One that comes from no scope
    is a native ``Task.cancel()`` of the worker's own task, which only the code that task
    runs can make. Trio has no such thing.
    """
    if anyio.current_effective_deadline() == -math.inf:
        return False
    import asyncio

    try:
        task = asyncio.current_task()
    except RuntimeError:
        return False
    if task is None or not task.cancelling():
        return False
    task.uncancel()
    return True


def _calls_mcp(prepared: Prepared) -> bool:
    """Whether calling ``prepared`` calls an MCP tool (itself, or a tool it wraps)."""
    current: Prepared | None = prepared
    while current is not None:
        if current.mcp is not None:
            return True
        current = current.wrapped
    return False


def _mapped(mapping: Mapping[str, Any], arguments: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A wrapped tool's arguments by a validation's ``argument_mapping`` (as the call maps
    them); ``None`` when a ``$name`` is missing (the call reports that)."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, str) and value.startswith("$"):
            if value[1:] not in arguments:
                return None
            out[key] = arguments[value[1:]]
        else:
            out[key] = value
    return out


def _jsonable(value: Any) -> Any:
    """Keep an output in events only if it encodes as JSON; describe it otherwise."""
    try:
        msgspec.json.encode(value)
    except (TypeError, ValueError, OverflowError):
        return {"unencodable": type(value).__name__, "repr": repr(value)[:200]}
    return value


async def execute_graph(
    graph: PlanGraph,
    *,
    catalog: Catalog | None = None,
    resources: Mapping[str, Any] | None = None,
    event_log: EventLog | None = None,
    max_concurrency: int | None = None,
    plan_id: str | None = None,
    attempt: int = 1,
    isolation: Isolation | None = None,
    select: Collection[str] | None = None,
    given: Mapping[str, Any] | None = None,
    first_seq: int = 1,
    causation_id: str | None = None,
    artifact: Any = None,
    mcp_sessions: McpSessions | None = None,
    changed: Mapping[str, Iterable[str]] | None = None,
) -> GraphRun:
    """Run every node of ``graph`` once and return what each node and attachment did.

    Nodes start as soon as their ``needs`` are done; ready nodes run concurrently, at most
    ``max_concurrency`` at a time (default: the graph policy's). With a ``catalog``, the
    validations attached to the graph's resources (resolved under the graph's project and
    ``plan_id``) run too, once every work node is done. ``resources`` replaces the graph's
    resources by name (a folder ``Path`` or a mapping of files), for example with a sandbox.
    Events go to ``event_log`` (default: a new :class:`MemoryEventLog`), numbered from
    ``first_seq``; the first one's cause is ``causation_id`` (the supervisor's event).
    ``artifact`` is what nodes that need nothing receive as their artifact (the plan's
    artifact, when the supervisor validates it).

    ``select`` runs only those nodes (node ids, or ``attachment:ULID``); the outputs of the
    nodes they need that do not run come from ``given`` (node id → output). The supervisor
    uses this to run the work before the validations, and to re-run only a failed
    validation.

    MCP tools are called over one session per server for the run, opened before any node
    runs and closed when it ends; ``mcp_sessions`` (or an :class:`McpSessions` the call
    runs inside) keeps them open across runs instead.

    ``changed`` names, by folder resource, the files a plan's change added or modified
    there (relative to it, with ``/``): what each call's ``context.changed()`` answers, so
    that a validation of the change may judge only those (``scope: change``). Without it,
    a call cannot know, and judges the whole folder.

    A failing tool or validation never raises here: it is a failed node or a failed
    result (an MCP server that cannot be reached makes its calls ``unavailable``).
    :class:`ConfigError` is raised, before anything runs, for a node that cannot be
    prepared (a missing entrypoint, an MCP tool its server does not have), a selection
    that cannot run, or arguments that break an MCP tool's input schema.
    """
    # From loading on: a KeyboardInterrupt is a Ctrl-C only if a SIGINT came meanwhile.
    with watching_sigint():
        run_id = plan_id or new_ulid()
        values = _resource_values(graph, resources)
        folders_changed = _changed_folders(values, changed) if changed is not None else None
        compiler = _Compiler(
            graph,
            values,
            catalog=catalog,
            plan_id=run_id,
            isolation=isolation,
            select=select,
            given=given,
        )
        units = compiler.compile()
        engine = _Engine(
            graph,
            units,
            plan_id=run_id,
            log=event_log if event_log is not None else MemoryEventLog(),
            max_concurrency=max_concurrency or graph.policy.max_concurrency,
            attempt=attempt,
            given=given,
            first_seq=first_seq,
            causation_id=causation_id,
            artifact=artifact,
        )
        uses = compiler.mcp_uses(units) if compiler.has_mcp else None
        sandboxed = _sandboxed(units) if compiler.has_sandbox else 0
        async with contextlib.AsyncExitStack() as stack:
            if compiler.has_sandbox:
                from gategraph.runtime._calls._sandbox import current_pool, sandbox_pool

                # Sandboxed workers started while the run begins: in the pool this runs inside
                # (a plan's, or an embedder's), else in one of the run's own.
                prewarm = min(sandboxed, max_concurrency or graph.policy.max_concurrency)
                _keep_journals_out(stack, values)
                pool = current_pool()
                if pool is None:
                    await stack.enter_async_context(sandbox_pool(prewarm=prewarm))
                else:
                    pool.prewarm(prewarm)
            if folders_changed is not None:
                # Each call's context reads it as it is made, in the run's tasks.
                token = CHANGED.set(folders_changed)
                stack.callback(CHANGED.reset, token)
            if uses:
                return await _run_with_mcp(
                    engine, uses, compiler.mcp_server, graph.source, mcp_sessions
                )
            return await _run_engine(engine)
    raise AssertionError("unreachable")  # pragma: no cover - mypy: the stack may swallow


def _changed_folders(
    values: Mapping[str, Any], changed: Mapping[str, Iterable[str]]
) -> dict[str, frozenset[str]]:
    """``changed`` by the folder each resource resolved to; a name that is no folder
    resource of the run, or paths given as one string, is a :class:`ConfigError`."""
    found: dict[str, frozenset[str]] = {}
    for name, paths in changed.items():
        folder = values.get(name)
        if not isinstance(folder, Path):
            why = "not a resource of the graph" if name not in values else "not a folder"
            raise ConfigError.at(f"changed.{name}", why)
        if isinstance(paths, str | bytes):
            raise ConfigError.at(
                f"changed.{name}", "give a list of paths relative to the folder, not one text"
            )
        found[os.fspath(folder)] = frozenset(paths)
    return found


def _sandboxed(units: Sequence[_Unit]) -> int:
    """How many of ``units`` call something in the sandbox (directly, or wrapped)."""
    return sum(
        1
        for unit in units
        if unit.spec.prepared is not None
        and (unit.spec.prepared.ran_in == "sandbox" or unit.spec.prepared.needs_sandbox)
    )


async def _run_with_mcp(
    engine: _Engine,
    uses: list[McpUse],
    resolve: Callable[[str], McpServerRef | str | None],
    source: str,
    given: McpSessions | None,
) -> GraphRun:
    """Run with the MCP servers ``uses`` name open: the holder given (or the one this
    runs inside), else one of the run's own, closed when the run ends."""
    from gategraph.runtime._calls._mcp import McpSessions

    holder = given if given is not None else McpSessions.current()
    async with contextlib.AsyncExitStack() as stack:
        if holder is None:
            holder = await stack.enter_async_context(McpSessions())
        # Before any node runs: a missing tool or a refused validation is a ConfigError.
        await holder.bind(uses, resolve, source=source)
        return await _run_engine(engine)


async def _run_engine(engine: _Engine) -> GraphRun:
    try:
        return await engine.run()
    except BaseExceptionGroup as group:
        # A runtime failure (the event log could not be written) surfaces from inside the
        # run's task groups; the caller gets it as itself, not wrapped in groups.
        error = _single_error(group)
        if error is None:
            raise
        raise error from None


def _single_error(group: BaseExceptionGroup[BaseException]) -> GategraphError | None:
    """The one gategraph error in a group of otherwise only cancellations, if that is all."""
    cancelled = anyio.get_cancelled_exc_class()
    errors: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        elif not isinstance(exc, cancelled):
            errors.append(exc)

    walk(group)
    if len(errors) == 1 and isinstance(errors[0], GategraphError):
        return errors[0]
    return None


@contextlib.asynccontextmanager
async def open_plan_mcp_sessions(
    graph: PlanGraph,
    *,
    catalog: Catalog | None = None,
    plan_id: str | None = None,
    isolation: Isolation | None = None,
) -> AsyncIterator[McpSessions | None]:
    """Hold the MCP sessions of a whole plan: every run inside shares them.

    Opens the servers that ``graph``'s nodes and the validations attached to its
    resources (for ``plan_id``) call, and checks their tools, before the body runs: a tool
    a server does not have, a refused validation or bad arguments raise
    :class:`ConfigError` here, before the plan starts. Yields ``None`` (and costs nothing)
    for a plan that calls no MCP tool. A session lost during the plan is opened again by
    the next run that needs it (a retry, a later round).
    """
    from gategraph.runtime._calls._mcp import McpSessions

    run_id = plan_id or new_ulid()
    if not _plan_calls_mcp(graph, catalog, run_id):
        yield None
        return
    compiler = _Compiler(
        graph,
        _resource_values(graph, None),
        catalog=catalog,
        plan_id=run_id,
        isolation=isolation,
    )
    units = compiler.compile()
    uses = compiler.mcp_uses(units) if compiler.has_mcp else []
    if not uses:
        yield None
        return
    async with McpSessions() as sessions:
        await sessions.bind(uses, compiler.mcp_server, source=graph.source)
        yield sessions


def _plan_calls_mcp(graph: PlanGraph, catalog: Catalog | None, plan_id: str) -> bool:
    """Whether a node of ``graph`` or a validation attached to its resources calls an MCP
    tool: one look at the tools, without compiling the plan."""
    from gategraph.runtime._data._models import ToolSource

    if any(tool.source is ToolSource.MCP for tool in graph.registry.values()):
        return True
    if catalog is None:
        return False
    for name in graph.resources:
        for attachment in catalog.resolve(name, project=graph.project, plan=plan_id):
            tool: Any = catalog.get(attachment.validation)
            while tool is not None:
                if tool.source is ToolSource.MCP:
                    return True
                wraps = getattr(tool, "wraps", None)
                tool = catalog.get(wraps) if wraps is not None else None
    return False


def execute_graph_sync(graph: PlanGraph, **options: Any) -> GraphRun:
    """:func:`execute_graph` for code without an event loop (the same keyword arguments;
    see :func:`gategraph.runtime.run_plan_sync` for where it may be called)."""
    from ._sync import run_sync

    return run_sync(execute_graph, graph, **options)
