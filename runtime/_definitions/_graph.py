"""Plan graphs: the versioned YAML format, its loader and its checker.

A plan graph file (format version 1) names the resources a plan works on, the tools and
validations it defines inline, the nodes that call them, the acceptance criteria that bind
validations, and the policy the supervisor follows. :func:`load_graph` reads one, checks it
as a whole and returns a :class:`PlanGraph`. Every problem of a file is reported at once, as
one :class:`ConfigError` whose lines read ``FILE:LINE:COL: field.path: what is wrong``.

The models check each part on its own (types, ranges, exactly one target per node); the
loader checks how the parts fit together (names resolve, no cycle, criteria are bound,
folders exist). A graph built in Python rather than loaded is not cross-checked.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import inspect
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Self, TypeVar

from gategraph.runtime._base._exceptions import CatalogError, ConfigError, ConfigIssue
from gategraph.runtime._base._yaml import (
    Document,
    format_path,
    load_document,
    read_document,
    require_mapping,
)
from gategraph.runtime._calls._invoke import Isolation, default_isolation
from gategraph.runtime._calls._mcp import McpServer
from gategraph.runtime._data._models import (
    ENTRYPOINT_PATTERN,
    NAME_PATTERN,
    Tool,
    ToolName,
    ToolSource,
    Validation,
    ValidationMode,
    _Model,
    tool_from_config,
)
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ._plugins import shipped, shipped_names
from ._skills import Skill

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

    from gategraph.runtime._storage._resources import DirectoryResource, Resource
    from pydantic import ValidationInfo

    from ._catalog import Catalog

__all__ = [
    "AcceptanceCriterion",
    "ActorSpec",
    "ApprovalPolicy",
    "ApprovalRule",
    "Lifecycle",
    "Node",
    "NodeKind",
    "PlanGraph",
    "Policy",
    "ResourceSpec",
    "load_graph",
]

# One shared, read-only empty mapping for every node without arguments.
_NO_ARGUMENTS: Final[Mapping[str, Any]] = MappingProxyType({})

Arguments = Annotated[Mapping[str, Any], PlainSerializer(dict, return_type=dict[str, Any])]

FORMAT_VERSION: Final = 1
"""The plan graph format this module reads."""

NODE_ID_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_-]*$"
"""Node ids and resource names: a letter or ``_``, then letters, digits, ``_`` and ``-``."""

_ID_RE: Final = re.compile(NODE_ID_PATTERN)
_USES_RE: Final = re.compile(ENTRYPOINT_PATTERN)

PathKey = tuple[str | int, ...]
_M = TypeVar("_M")


def _check_id(value: str) -> str:
    if not 1 <= len(value) <= 128 or not _ID_RE.fullmatch(value):
        raise ValueError(
            f"{value[:60]!r} is not a valid id: use letters, digits, '_' and '-', starting "
            "with a letter or '_' (at most 128 characters)"
        )
    return value


GATE_EXECUTOR: Final = "gategraph.runtime._embed._gate:DETACHED"
"""What a gate's graph file names as its executor (``gategraph.runtime._embed._gate``)."""
# A gate's graph file (`gates/PLAN.yaml`, beside its durable log) names its executor by an
# import path, and files written before the runtime's modules moved into subpackages name
# the old one: read them as the path they meant.
_MOVED_USES: Final = {"gategraph.runtime._gate:DETACHED": GATE_EXECUTOR}


def _check_uses(value: str) -> str:
    if len(value) > 512 or not _USES_RE.fullmatch(value):
        raise ValueError(f"{value[:60]!r} is not an import path: write 'package.module:Class'")
    return _MOVED_USES.get(value, value)


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _one_or_many(value: Any) -> Any:
    # `needs: build` reads as well as `needs: [build]`.
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list | tuple):
        raise ValueError(f"must be a name or a list of names, not {_kind_of(value)}")
    return value


def _kind_of(value: Any) -> str:
    """How a YAML value reads to the person who wrote it."""
    if value is None:
        return "empty"
    names = {bool: "true/false", int: "a number", float: "a number", dict: "a mapping"}
    return names.get(type(value), f"a {type(value).__name__}")


NodeId = Annotated[str, AfterValidator(_check_id)]
NonBlank = Annotated[str, AfterValidator(_not_blank)]
Names = Annotated[tuple[NonBlank, ...], BeforeValidator(_one_or_many)]
Timeout = Annotated[float, Field(gt=0, le=86_400)]


class ResourceSpec(_Model):
    """A resource the plan works on: a folder on disk, or files held in memory."""

    kind: Literal["directory", "memory"]
    """``directory`` (a folder on disk) or ``memory`` (files held in memory)."""
    path: Path | None = None
    """The folder of a ``directory`` resource. A relative path is relative to the graph
    file's folder (the current directory for a graph given as text); the loaded graph
    holds it absolute, and the loader checks the folder exists."""
    files: dict[str, str] = Field(default_factory=dict)
    """The initial files of a ``memory`` resource: relative path to text."""
    description: str = ""
    """What the resource is, for people and for strategy actors."""
    exclude: Names = ()
    """Paths a ``directory`` resource leaves out of its plans' copies, snapshots and
    changes, as ``.gitignore`` patterns (``*.log``, ``build/``, ``/data``)."""
    gitignore: bool = True
    """Whether a ``directory`` resource also leaves out every ``.git`` and what its
    ``.gitignore`` files ignore (``false``: everything is copied)."""

    def resource(self, name: str) -> Resource:
        """The resource this describes, called ``name``."""
        from gategraph.runtime._storage._resources import MemoryResource

        if self.kind == "memory":
            return MemoryResource(name, dict(self.files))
        return self.directory(name)

    def directory(
        self, name: str, folder: str | os.PathLike[str] | None = None
    ) -> DirectoryResource:
        """The directory resource this describes, called ``name``, on ``folder`` in place
        of :attr:`path` where one is given (a folder named on the command line), with this
        one's exclusions."""
        from gategraph.runtime._storage._resources import DirectoryResource

        root = folder if folder is not None else self.path
        assert root is not None  # a directory resource has a path (checked on load)
        return DirectoryResource(name, root, exclude=self.exclude, gitignore=self.gitignore)

    @field_validator("exclude")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from pathspec import GitIgnoreSpec

        for pattern in value:
            if pattern.startswith("#"):
                raise ValueError(
                    f"{pattern!r} is a comment in .gitignore's language (it matches nothing): "
                    "write \\# for a name that starts with #"
                )
            try:
                GitIgnoreSpec.from_lines([pattern])
            except Exception as exc:  # pathspec's own error types differ by release
                raise ValueError(f"{pattern!r} is not a .gitignore pattern: {exc}") from None
        return value

    @field_validator("path", mode="before")
    @classmethod
    def _path_given(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty")
        return value

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        context = info.context
        base = context.get("base_dir") if isinstance(context, Mapping) else None
        # normpath folds `..` without following symlinks: the path stays the one written.
        return Path(os.path.normpath(Path(base or Path.cwd()) / value))

    @field_validator("files")
    @classmethod
    def _relative_files(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            parts = PurePosixPath(name).parts
            if not name or name.startswith("/") or ".." in parts:
                raise ValueError(f"{name!r} must be a relative path inside the resource")
        return value

    @model_validator(mode="after")
    def _kind_fields(self) -> Self:
        if self.kind == "directory":
            if self.path is None:
                raise ValueError("a directory resource needs `path`")
            if self.files:
                raise ValueError("`files` is only for memory resources")
        elif self.path is not None:
            raise ValueError("a memory resource has no `path` (give its `files`)")
        elif self.exclude or "gitignore" in self.model_fields_set:
            raise ValueError("`exclude` and `gitignore` are only for directory resources")
        return self


class NodeKind(enum.StrEnum):
    """What a node runs."""

    WORK = "work"
    """A tool (``tool:``), on sandboxed resources."""
    VALIDATION = "validation"
    """A validation (``validation:``): read-only, fanned out with its peers."""
    ACTOR = "actor"
    """An actor class (``uses: "package.module:Class"``)."""


@pydantic_dataclass(
    frozen=True,
    slots=True,
    config=ConfigDict(extra="forbid"),
)
class Node:
    """One step of a plan: a work node, a validation node or an actor node.

    A slotted dataclass rather than a model: a plan may hold 100,000 of them, and this
    keeps each to about 180 bytes instead of about 700.
    """

    id: NodeId
    """Unique within the graph: a letter or ``_``, then letters, digits, ``_`` and ``-``."""
    tool: ToolName | None = None
    """The tool a work node calls (a validation is a tool too)."""
    validation: ToolName | None = None
    """The validation a validation node runs."""
    uses: Annotated[str, AfterValidator(_check_uses)] | None = None
    """The actor class an actor node runs: ``"package.module:Class"``."""
    needs: Names = ()
    """Ids of the nodes that must finish first; their outputs are this node's inputs."""
    arguments: Arguments = Field(default_factory=lambda: _NO_ARGUMENTS)
    """Arguments for the tool, validation or actor."""
    resources: Names | None = None
    """Names of the graph's resources this node is given; ``None`` gives it every one."""
    timeout: Timeout | None = None
    """Seconds the node may take; ``None`` uses the tool's timeout, then the policy's."""
    isolation: Isolation | None = None
    """How a synchronous callable runs: in the event loop, in a worker thread, in a
    worker process, or as a Ray task (sync or async; needs ``gategraph[ray]``); ``None``
    means the executor's (``thread`` by default)."""
    description: str = ""
    """What the node does, for people and for strategy actors."""

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        given = [f"`{f}`" for f in ("tool", "validation", "uses") if getattr(self, f) is not None]
        if not given:
            raise ValueError("say what the node runs: give one of `tool`, `validation` or `uses`")
        if len(given) > 1:
            raise ValueError(
                f"give only one of `tool`, `validation` or `uses`, not {' and '.join(given)}"
            )
        return self

    @property
    def kind(self) -> NodeKind:
        """``work``, ``validation`` or ``actor``, by which target is given."""
        if self.tool is not None:
            return NodeKind.WORK
        if self.validation is not None:
            return NodeKind.VALIDATION
        return NodeKind.ACTOR

    @property
    def target(self) -> str:
        """The tool or validation name, or the ``uses`` import path."""
        target = self.tool or self.validation or self.uses
        assert target is not None  # Invariant: the model allows exactly one target.
        return target


class AcceptanceCriterion(_Model):
    """A statement the plan must satisfy, bound to the validations that show it."""

    id: NonBlank
    """Unique within the graph, e.g. ``AC1``."""
    text: NonBlank
    """The criterion, in one or two sentences."""
    validations: Names
    """Validation node ids or validation names; the criterion holds when all of them pass."""

    @field_validator("validations")
    @classmethod
    def _some_validations(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("name at least one validation")
        return value


class ApprovalRule(_Model):
    """How artifacts of matching nodes are approved (seed 002, "approval validation")."""

    match: NonBlank
    """An ``fnmatch`` glob over node ids, e.g. ``deploy*``."""
    tier: NonBlank = "default"
    """The approval tier of matching nodes."""
    action: Literal["approve", "require", "deny", "escalate"]
    """``approve`` without asking, ``require`` a decision, ``deny`` outright, or
    ``escalate`` to a person."""


class ApprovalPolicy(_Model):
    """The approval layer's policy: auto-approved tiers and per-node rules."""

    auto_approve: Names = ()
    """Tiers approved without asking."""
    rules: tuple[ApprovalRule, ...] = ()
    """Rules in order; the first whose glob matches a node id applies."""


class Policy(_Model):
    """What the supervisor allows a plan (seed 000, "Required Validation Failure Handling")."""

    retry_limit: Annotated[int, Field(ge=0)] = 3
    """Fix-and-revalidate rounds shared by all failures, before a strategy revision."""
    strategy_revisions: Annotated[int, Field(ge=0)] = 1
    """Returns to Strategize once the retries are spent, before escalating to a person."""
    max_concurrency: Annotated[int, Field(ge=1)] = 64
    """Nodes running at the same time, at most."""
    default_timeout: Timeout = 60.0
    """Seconds a node may take when neither the node nor its tool says."""
    approval: ApprovalPolicy = ApprovalPolicy()
    """The approval layer's tiers and rules."""
    allow_ungated: bool = False
    """Apply a plan that no required validation gates (all of its validations are
    informational, or it has none). Off by default: such a plan is refused as a permanent
    fault, since nothing would stand between its work and Apply."""
    confirm_failures: bool = False
    """Run a failing required validation once more, on the same inputs, before the work is
    sent back to be fixed. One that passes the second time is flaky: its verdict cannot be
    trusted either way, so the round fails it as an infrastructure fault (kind ``flaky``)
    and it is re-run on the shared retry budget, then escalated; it is never skipped."""
    outside_validators: Annotated[int, Field(ge=0, le=100)] = 0
    """How many validators besides gategraph's own validation round must attest every
    acceptance criterion before the plan is applied. Above 0, a plan whose round passed
    waits (status ``awaiting_attestation``) until that many outside validators attested it
    (``validator.attest``), and applies when resumed after."""
    attestation: Literal["no-rejection", "any-attests"] = "no-rejection"
    """How outside validators' verdicts combine. ``no-rejection`` (the default): the plan
    is not applied while a rejection of any outside validator stands (its latest verdict
    on the candidate is a rejection), whatever others attest. ``any-attests``: enough
    attestations apply it, rejections notwithstanding."""
    require_sandbox: bool = False
    """Run every validation of the plan (its nodes and the attached ones) in the sandbox,
    confined by the kernel (``isolation: sandbox``). A validation node that asks for
    another isolation, or that calls an MCP tool (its server runs it, outside any
    sandbox), is refused; on a machine without the sandbox the plan does not start."""


class ActorSpec(_Model):
    """An actor the supervisor uses: ``uses`` names a class (built with ``arguments``) or,
    for the lifecycle's roles, an object or async function used as it is."""

    uses: Annotated[str, AfterValidator(_check_uses)]
    """``"package.module:Class"`` (or ``"package.module:object"``)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the class."""


class Lifecycle(_Model):
    """Who strategizes and executes the plan, and what its artifact must look like."""

    strategy: ActorSpec | None = None
    """The strategy actor; by default the graph itself is the strategy."""
    executor: ActorSpec | None = None
    """The execution actor; by default the graph's work nodes run on the sandboxes."""
    escalation: ActorSpec | None = None
    """Who answers escalations and approvals; by default nobody, and the plan pauses for
    ``gategraph decide`` / ``gategraph approve``."""
    validator: ActorSpec | None = None
    """The class of the plan's independent validators (``spawn.validator`` builds one new
    for every pass); by default one that runs the plan's validations again on a copy of
    its candidate."""
    artifact_schema: dict[str, Any] | None = None
    """A JSON Schema the artifact must match (the pipeline's payload layer)."""


class PlanGraph(_Model):
    """A plan as a graph of nodes, with its resources, tools, criteria and policy.

    Load one with :func:`load_graph`, which checks the graph as a whole and resolves every
    tool and validation its nodes name.
    """

    version: Literal[1]
    """The format version: ``1``."""
    name: ToolName
    """The plan's name (letters, digits, ``_``, ``-``, dot-separated parts)."""
    project: NonBlank | None = None
    """The project the plan runs in; selects project-scoped attachments."""
    description: str = ""
    """What the plan is for."""
    resources: dict[str, ResourceSpec] = Field(default_factory=dict)
    """The resources the plan works on, by name."""
    tools: tuple[Tool, ...] = ()
    """Tools defined in the graph; they win over catalog entries of the same name."""
    validations: tuple[Validation, ...] = ()
    """Validations defined in the graph; they win over catalog entries of the same name."""
    mcp_servers: dict[str, McpServer] = Field(default_factory=dict)
    """MCP servers the graph's tools name (``mcp_server``), by name. A name the catalog
    has must declare the same server: the catalog's tools and attachments always use the
    catalog's (the loader refuses another declaration under its name)."""
    nodes: tuple[Node, ...]
    """The steps of the plan; at least one."""
    acceptance: tuple[AcceptanceCriterion, ...] = ()
    """Acceptance criteria, each bound to validation nodes."""
    skills: tuple[Skill, ...] = ()
    """Skills the plan hands its execution actor (``request.skills``): their tools and
    validations are callable on the sandboxes, and never gate the plan."""
    policy: Policy = Policy()
    """Retries, concurrency, timeouts and approval."""
    lifecycle: Lifecycle = Lifecycle()
    """The supervisor's actors and the artifact's schema."""

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _named_servers(cls, value: Any) -> Any:
        # `name` is the key: a declaration need not repeat it (the loader checks both agree).
        if isinstance(value, Mapping):
            return {
                key: {**spec, "name": key}
                if isinstance(spec, Mapping) and "name" not in spec
                else spec
                for key, spec in value.items()
            }
        return value

    @model_validator(mode="after")
    def _server_keys(self) -> Self:
        for key, server in self.mcp_servers.items():
            if server.name != key:
                raise ValueError(f"mcp_servers: {key!r} declares a server named {server.name!r}")
        return self

    @field_validator("nodes", mode="before")
    @classmethod
    def _node_list(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise ValueError(f"must be a list of nodes (each `- id: ...`), not {_kind_of(value)}")
        return value

    @field_validator("nodes")
    @classmethod
    def _some_nodes(cls, value: tuple[Node, ...], info: ValidationInfo) -> tuple[Node, ...]:
        # An `after` validator: it does not run, and so does not pile on, when a node is bad.
        # The one-call validation's graph may have none: its catalog's attachments gate it.
        if not value and not (info.context or {}).get("attachments_only"):
            raise ValueError("a plan graph needs at least one node")
        return value

    _source: str = PrivateAttr(default="<string>")
    _base_dir: Path | None = PrivateAttr(default=None)
    _registry: dict[str, Tool] | None = PrivateAttr(default=None)
    _servers: dict[str, McpServer] | None = PrivateAttr(default=None)
    _digraph: Any = PrivateAttr(default=None)
    _by_id: dict[str, Node] | None = PrivateAttr(default=None)
    _order: tuple[str, ...] | None = PrivateAttr(default=None)
    _work: tuple[str, ...] | None = PrivateAttr(default=None)
    _isolations: dict[str, frozenset[str | None]] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PlanGraph):
            return NotImplemented
        # The private attributes are caches and the loader's resolution: two loads of one
        # file are equal graphs.
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """Return a copy; what is derived from changed fields is worked out again."""
        copied = super().model_copy(update=update, deep=deep)
        if update:
            copied._by_id = copied._order = copied._digraph = copied._work = None
            if {"tools", "validations"} & set(update):
                copied._registry = None
            if "mcp_servers" in update:
                copied._servers = None
        return copied

    @property
    def source(self) -> str:
        """The file the graph was loaded from, or ``<string>``."""
        return self._source

    @property
    def base_dir(self) -> Path:
        """The folder relative resource paths were resolved against."""
        return self._base_dir if self._base_dir is not None else Path.cwd()

    @property
    def registry(self) -> Mapping[str, Tool]:
        """Every tool and validation the graph defines or names, resolved, by name."""
        if self._registry is None:
            # A graph built in Python knows only its inline definitions.
            inline = {t.name: t for t in (*self.tools, *self.validations)}
            self._registry = {
                name: _inherit_inline(tool, inline, ()) for name, tool in inline.items()
            }
        return MappingProxyType(self._registry)

    def get_mcp_server(self, name: str) -> McpServer:
        """Return the MCP server a tool of the graph names: declared in the graph, else
        (for a loaded graph) the catalog's, which a graph cannot replace. Raises
        :class:`KeyError` for an unknown name."""
        servers = self._servers if self._servers is not None else self.mcp_servers
        try:
            return servers[name]
        except KeyError:
            raise KeyError(f"plan graph {self.name!r} uses no MCP server named {name!r}") from None

    @property
    def digraph(self) -> Any:
        """The ``networkx.DiGraph`` of ``needs``: an edge ``a → b`` when ``b`` needs ``a``."""
        if self._digraph is None:
            self._digraph = _dependency_graph(self.nodes)
        return self._digraph

    def node(self, node_id: str) -> Node:
        """Return the node with this id; raise :class:`KeyError` if there is none."""
        if self._by_id is None:
            self._by_id = {n.id: n for n in self.nodes}
        try:
            return self._by_id[node_id]
        except KeyError:
            raise KeyError(f"no node {node_id!r} in plan graph {self.name!r}") from None

    def get_tool(self, name: str) -> Tool:
        """Return a tool or validation a node names or wraps, inline definitions first.

        A wrapped validation comes with what it inherits from the tool it wraps.
        Raises :class:`KeyError` for a name the graph does not use.
        """
        try:
            return self.registry[name]
        except KeyError:
            raise KeyError(f"plan graph {self.name!r} uses no tool named {name!r}") from None

    def topological_order(self) -> list[str]:
        """Return the node ids, each after the nodes it needs; ties keep the file's order."""
        if self._order is None:
            import networkx as nx  # type: ignore[import-untyped,unused-ignore]

            position = {n.id: i for i, n in enumerate(self.nodes)}
            try:
                order = nx.lexicographical_topological_sort(self.digraph, key=position.get)
                self._order = tuple(order)
            except nx.NetworkXUnfeasible:
                raise ConfigError.at("nodes", "the graph has a cycle") from None
        return list(self._order)

    def work_phase(self) -> list[str]:
        """The nodes that come before any validation (not validations, and not after one),
        in the file's order: the execution actor's part of a plan. Worked out once."""
        if self._work is None:
            after: dict[str, bool] = {}
            by_id = {node.id: node for node in self.nodes}

            def after_validation(node_id: str) -> bool:
                known = after.get(node_id)
                if known is None:
                    node = by_id[node_id]
                    after[node_id] = False  # the graph is acyclic; this only guards the walk
                    known = after[node_id] = node.kind.value == "validation" or any(
                        after_validation(need) for need in node.needs
                    )
                return known

            self._work = tuple(node.id for node in self.nodes if not after_validation(node.id))
        return list(self._work)

    def dependents(self, node_id: str) -> tuple[str, ...]:
        """Return the ids of the nodes that need ``node_id``, in the file's order."""
        self.node(node_id)
        # Edges are added node by node in the file's order, so successors keep it.
        return tuple(self.digraph.successors(node_id))

    def isolations_of(self, target: str) -> frozenset[str | None]:
        """The isolations the nodes calling ``target`` (a tool or validation) ask for
        (None: the executor's); empty when no node calls it. Worked out once."""
        if self._isolations is None:
            found: dict[str, set[str | None]] = {}
            for node in self.nodes:
                found.setdefault(node.target, set()).add(node.isolation)
            self._isolations = {name: frozenset(kinds) for name, kinds in found.items()}
        return self._isolations.get(target, frozenset())

    def validation_nodes(self) -> list[Node]:
        """Return the validation nodes, in the file's order."""
        # `validation is not None` is `kind is VALIDATION` without the property, per node.
        return [n for n in self.nodes if n.validation is not None]

    def criteria_for(self, node_id: str) -> list[AcceptanceCriterion]:
        """Return the acceptance criteria naming this node's id or its validation's name."""
        node = self.node(node_id)
        names = {node.id} if node.validation is None else {node.id, node.validation}
        return [c for c in self.acceptance if names.intersection(c.validations)]

    def _bind(
        self,
        source: str,
        base_dir: Path,
        registry: dict[str, Tool],
        servers: dict[str, McpServer] | None = None,
    ) -> Self:
        self._source = source
        self._base_dir = base_dir
        self._registry = registry
        self._servers = servers
        return self


def _own_modules(folder: Path) -> bool:
    """Let a graph file's own modules import (an executor in ``agent.py`` beside
    ``plan.yaml``), as Python lets a script's: its folder joins the import path, after
    what is there, so an installed package of the same name still wins. Every later run
    of the plan (resume, approve, decide, from any shell) loads the file again, and so
    finds them too; worker processes get the same path. Returns whether the folder holds
    modules (a folder with none is not added: a process that loads many graphs keeps its
    import path short)."""
    entry = os.fspath(folder)
    if not _holds_modules(entry):
        return False
    if entry not in sys.path:
        sys.path.append(entry)
        importlib.invalidate_caches()
    return True


def _shadowed_modules(doc: Document, folder: Path) -> list[ConfigIssue]:
    """A graph's ``uses:`` and ``entrypoint:`` that name a module beside the graph file,
    which Python imports from elsewhere: another graph's folder loaded first in this
    process (``gategraph check a/plan.yaml b/plan.yaml``, both with an ``agent.py``), or an
    installed package of the same name. The graph would run that other module."""
    import importlib.util

    found: list[ConfigIssue] = []

    def visit(value: Any, path: tuple[str | int, ...]) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if key in ("uses", "entrypoint") and isinstance(inner, str) and ":" in inner:
                    check(inner.split(":", 1)[0].split(".", 1)[0], (*path, key))
                else:
                    visit(inner, (*path, key))
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                visit(inner, (*path, index))

    def check(name: str, path: tuple[str | int, ...]) -> None:
        own = folder / f"{name}.py"
        if not own.is_file() and not (folder / name / "__init__.py").is_file():
            return
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            return  # its import fails: the check of the field says how
        origin = spec.origin if spec is not None else None
        mine = {os.path.realpath(own), os.path.realpath(folder / name / "__init__.py")}
        if origin is None or os.path.realpath(origin) in mine:
            return
        found.append(
            doc.issue(
                path,
                f"the module {name!r} beside the graph file is not the one Python imports, "
                f"which is {origin} (another graph's folder loaded first, or an installed "
                "package): give the graph's module a name of its own",
            )
        )

    visit(doc.data, ())
    return found


def _holds_modules(folder: str) -> bool:
    """Whether ``folder`` has a module or a package of its own to import."""
    try:
        with os.scandir(folder) as entries:
            return any(
                entry.name.endswith(".py")
                or (entry.is_dir() and os.path.exists(os.path.join(entry.path, "__init__.py")))
                for entry in entries
            )
    except OSError:
        return False


def load_graph(
    source: str | os.PathLike[str] | bytes | Mapping[str, Any],
    *,
    catalog: Catalog | None = None,
    require_sandbox: bool = False,
) -> PlanGraph:
    """Load and check a plan graph; return it with every name it uses resolved.

    ``require_sandbox`` loads it as if its policy said ``require_sandbox: true`` (the
    command line's ``--require-sandbox``): every validation must run in the kernel sandbox,
    and a plan that cannot is refused here, before anything runs.

    ``source`` is a path to a YAML (or JSON) file, the YAML text itself (a ``str``
    holding a newline, or ``bytes``), or the already-parsed mapping. Tools and validations are looked up in the graph's
    own ``tools`` and ``validations`` first, then in ``catalog``; without a catalog only
    the graph's own exist. Raises :class:`ConfigError` listing every problem of the file,
    each as ``FILE:LINE:COL: field.path: what is wrong``. Nothing else escapes.
    """
    if isinstance(source, Mapping):
        # Built in Python (an embedding framework, a benchmark): no file, no positions.
        doc = Document(dict(source), "<mapping>")
        base_dir = Path.cwd()
    elif isinstance(source, bytes) or (isinstance(source, str) and "\n" in source):
        doc = load_document(source, "<string>")
        base_dir = Path.cwd()
    elif isinstance(source, str | os.PathLike):
        doc = read_document(source)
        base_dir = Path(os.path.abspath(source)).parent
        # Only a folder with modules of its own can have one shadowed: the rest skip the
        # walk of the document (a graph may hold 100,000 nodes).
        shadowed = _shadowed_modules(doc, base_dir) if _own_modules(base_dir) else []
        if shadowed:
            raise ConfigError(shadowed, source=doc.source)
    else:
        raise TypeError(f"source must be a path or YAML text, not {type(source).__name__}")
    return _Loader(doc, base_dir, catalog, require_sandbox=require_sandbox).load()


# -- the loader ------------------------------------------------------------------------------

# The field that names a node's target, by the node's kind.
_TARGET_FIELD: Final = {
    NodeKind.WORK: "tool",
    NodeKind.VALIDATION: "validation",
    NodeKind.ACTOR: "uses",
}

# Field names by model, for "did you mean" on unknown fields (by the path's shape).
_FIELDS_BY_PATH: Final[tuple[tuple[re.Pattern[str], type[Any]], ...]] = (
    (re.compile(r"^[^.\[]+$"), PlanGraph),
    (re.compile(r"^nodes\[\d+\]\.[^.]+$"), Node),
    (re.compile(r"^acceptance\[\d+\]\.[^.]+$"), AcceptanceCriterion),
    (re.compile(r"^resources\.[^.]+\.[^.]+$"), ResourceSpec),
    (re.compile(r"^policy\.[^.]+$"), Policy),
    (re.compile(r"^policy\.approval\.[^.]+$"), ApprovalPolicy),
    (re.compile(r"^policy\.approval\.rules\[\d+\]\.[^.]+$"), ApprovalRule),
    (re.compile(r"^lifecycle\.[^.]+$"), Lifecycle),
    (re.compile(r"^lifecycle\.(strategy|executor)\.[^.]+$"), ActorSpec),
)


@dataclass(slots=True)
class _Parts:
    """The parts of a graph that passed their own validation, with their indices."""

    resources: dict[str, ResourceSpec]
    tools: list[tuple[PathKey, Tool]]
    nodes: list[tuple[int, Node]]
    acceptance: list[tuple[int, AcceptanceCriterion]]
    skills: list[tuple[int, Skill]]


@dataclass(slots=True)
class _Broken:
    """Names whose own definition failed: references to them are not reported again."""

    nodes: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    resources: set[str] = field(default_factory=set)
    servers: set[str] = field(default_factory=set)
    server_section: bool = False
    """The whole ``mcp_servers:`` section is unreadable: no server name is known."""


class _Loader:
    """Validates one document as a plan graph, collecting every problem."""

    def __init__(
        self,
        doc: Document,
        base_dir: Path,
        catalog: Catalog | None,
        *,
        attachments_only: bool = False,
        require_sandbox: bool = False,
    ) -> None:
        self.attachments_only = attachments_only
        self.require_sandbox = require_sandbox
        self.doc = doc
        self.base_dir = base_dir
        self.catalog = catalog
        self.issues: list[ConfigIssue] = []
        self.broken = _Broken()
        self.inline: dict[str, tuple[PathKey, Tool]] = {}
        self.registry: dict[str, Tool] = {}
        self.catalog_errors: dict[str, str] = {}
        self.known: list[str] | None = None
        """The names outside the graph a misspelt name may have meant (read on the first)."""
        self.imports: dict[str, str | None] = {}
        self.servers: dict[str, McpServer] = {}
        """The graph's own MCP servers, then the catalog's that its tools name."""
        self.named_skills: set[int] = set()
        """The indices of ``skills:`` items that name a catalog skill (not define one)."""

    def add(self, path: Sequence[str | int], message: str, *, at_key: bool = False) -> None:
        path = tuple(path)
        # `needs: build` is a list of one that the file does not write as a list.
        while path and isinstance(path[-1], int) and path not in self.doc.marks:
            path = path[:-1]
        self.issues.append(self.doc.issue(path, message, at_key=at_key))

    def where(self, path: Sequence[str | int]) -> str:
        line, _ = self.doc.position(path)
        return f"line {line}" if line is not None else format_path(path)

    # -- phases ------------------------------------------------------------------------------

    def load(self) -> PlanGraph:
        data = dict(require_mapping(self.doc, "plan graph"))
        policy = data.get("policy")
        if self.require_sandbox and (policy is None or isinstance(policy, Mapping)):
            # Anything else is the policy's own mistake, reported as such below.
            data["policy"] = {**(policy or {}), "require_sandbox": True}
        self._check_version(data)
        self._inline_servers(data)
        tools = self._inline_tools(data)
        skills = self._inline_skills(data)
        context = {"base_dir": self.base_dir, "attachments_only": self.attachments_only}
        graph: PlanGraph | None = None
        try:
            graph = PlanGraph.model_validate(data, context=context)
        except ValidationError as exc:
            self.issues.extend(self.doc.errors_from(exc).issues)
        except (TypeError, RecursionError) as exc:  # unhashable or absurd input
            self.add([], f"cannot read the plan graph: {exc}")
        if graph is not None:
            parts = _Parts(
                dict(graph.resources),
                tools,
                list(enumerate(graph.nodes)),
                list(enumerate(graph.acceptance)),
                skills,
            )
        else:
            parts = self._salvage(data, tools, skills, context)
        self._check(parts, data.get("resources"))
        self._check_servers(parts)
        if graph is not None:
            self._check_callable(parts, graph.policy.default_timeout, graph.policy.require_sandbox)
            self._check_lifecycle(graph.lifecycle)
        if self.issues or graph is None:
            raise ConfigError(self._explained(), source=self.doc.source)
        # The full networkx graph is built again only if someone asks for it (`digraph`).
        return graph._bind(self.doc.source, self.base_dir, self.registry, self.servers)

    def _check_version(self, data: dict[str, Any]) -> None:
        if "version" not in data:
            self.add(
                ["version"],
                f"field required: the format version (write `version: {FORMAT_VERSION}`)",
            )
        else:
            version = data["version"]
            exact = type(version) is int and version == FORMAT_VERSION
            if type(version) is int and not exact:
                # Another format: its fields would all read as errors, so say only this.
                raise self.doc.error(
                    ["version"],
                    f"unsupported format version {version}: this gategraph reads version "
                    f"{FORMAT_VERSION}",
                )
            if not exact:
                self.add(["version"], f"must be {FORMAT_VERSION} (the format version)")
        data["version"] = FORMAT_VERSION

    def _inline_tools(self, data: dict[str, Any]) -> list[tuple[PathKey, Tool]]:
        """Build inline tools and validations as ``gategraph tool add`` would."""
        built: list[tuple[PathKey, Tool]] = []
        sections: tuple[tuple[str, Callable[[Document], Tool]], ...] = (
            ("tools", tool_from_config),
            ("validations", Validation.from_config),
        )
        parts = _item_marks(self.doc, (section for section, _ in sections))
        for section, build in sections:
            items = data.get(section)
            if not isinstance(items, list):
                continue  # the model reports what is wrong with the section itself
            models = []
            for index, item in enumerate(items):
                path: PathKey = (section, index)
                part = parts.get(path) or Document(None, self.doc.source)
                part.data = item
                try:
                    model = build(part)
                except ConfigError as exc:
                    self._adopt(exc, path)
                    if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                        self.broken.tools.add(item["name"])
                else:
                    built.append((path, model))
                    models.append(model)
            data[section] = models
        return built

    def _inline_skills(self, data: dict[str, Any]) -> list[tuple[int, Skill]]:
        """Build the ``skills:`` items: a definition, or the name of a catalog skill."""
        items = data.get("skills")
        if not isinstance(items, list | tuple):
            return []  # absent, or the model reports what is wrong with the section
        built: list[tuple[int, Skill]] = []
        parts = _item_marks(self.doc, ("skills",))
        for index, item in enumerate(items):
            skill: Skill | None = None
            if isinstance(item, str):
                skill = self._catalog_skill(index, item)
                if skill is not None:
                    self.named_skills.add(index)
            elif isinstance(item, Mapping | Skill):
                part = parts.get(("skills", index)) or Document(None, self.doc.source)
                part.data = item.as_config() if isinstance(item, Skill) else item
                try:
                    skill = Skill.from_config(part)
                except ConfigError as exc:
                    self._adopt(exc, ("skills", index))
            else:
                self.add(
                    ["skills", index],
                    "must be a skill ({name, description, tools}) or the name of a skill of "
                    f"the catalog, not {_kind_of(item)}",
                )
            if skill is not None:
                built.append((index, skill))
        data["skills"] = [skill for _, skill in built]
        return built

    def _catalog_skill(self, index: int, name: str) -> Skill | None:
        where: PathKey = ("skills", index)
        if self.catalog is None:
            self.add(where, f"unknown skill {name!r}: no catalog was given (define it here)")
            return None
        try:
            return self.catalog.get_skill(name)
        except CatalogError as exc:
            if isinstance(exc, LookupError):
                known = [skill.name for skill in self.catalog.list_skills()]
                hint = _did_you_mean(name, known)
                self.add(where, f"unknown skill {name!r}: not in the catalog{hint}")
            else:
                self.add(where, f"cannot read skill {name!r} from the catalog: {_one_line(exc)}")
            return None

    def _check_skills(self, skills: list[tuple[int, Skill]]) -> None:
        """Skill names are unique and every member is a tool or validation of the plan."""
        first: dict[str, int] = {}
        for index, skill in skills:
            named = index in self.named_skills  # written as a catalog skill's name
            if skill.name in first:
                where: PathKey = ("skills", index) if named else ("skills", index, "name")
                self.add(
                    where,
                    f"duplicate skill {skill.name!r} "
                    f"(first at {self.where(['skills', first[skill.name]])})",
                )
                continue
            first[skill.name] = index
            for j, name in enumerate(skill.tools):
                if self._resolve(name, ()) is None and name not in self.broken.tools:
                    if named:
                        message = self._unknown("tool", name)
                        self.add(
                            ["skills", index], f"the catalog's skill {skill.name!r} lists {message}"
                        )
                    else:
                        self.add(["skills", index, "tools", j], self._unknown("tool", name))

    def _skill_members(
        self, parts: _Parts, done: set[str]
    ) -> Iterator[tuple[list[str | int], Tool]]:
        """Each resolved member of the skills not in ``done`` (then added to it) and not
        defined in the graph (said where it is defined), with where it is written: in its
        skill's ``tools``, or (a catalog skill the graph names) at the name."""
        for index, skill in parts.skills:
            for j, name in enumerate(skill.tools):
                tool = self.registry.get(name)
                if tool is None or name in done or name in self.inline:
                    continue
                done.add(name)
                yield (
                    (
                        ["skills", index]
                        if index in self.named_skills
                        else ["skills", index, "tools", j]
                    ),
                    tool,
                )

    def _inline_servers(self, data: dict[str, Any]) -> None:
        """Build the ``mcp_servers:`` declarations, each with its key as its name."""
        declared = data.get("mcp_servers")
        if declared is None:
            return
        if not isinstance(declared, Mapping):
            self.add(
                ["mcp_servers"],
                f"must be a mapping of server names to their declarations (NAME: {{command: "
                f"...}} or NAME: {{url: ...}}), not {_kind_of(declared)}",
            )
            self.broken.server_section = True  # the tools' `mcp_server` is not judged
            data.pop("mcp_servers")
            return
        parts = _item_marks(self.doc, ["mcp_servers"])
        built: dict[str, McpServer] = {}
        for key, spec in declared.items():
            path: PathKey = ("mcp_servers", key)
            if not isinstance(key, str) or not re.fullmatch(NAME_PATTERN, key) or len(key) > 128:
                self.add(
                    path,
                    f"{str(key)[:60]!r} is not a valid server name: use letters, digits, '_' "
                    "and '-' in dot-separated parts that each start with a letter or '_'",
                    at_key=True,
                )
                self.broken.servers.add(str(key))
                continue
            part = parts.get(path) or Document(None, self.doc.source)
            part.data = spec
            try:
                server = McpServer.from_config(part, name=key, base_dir=self.base_dir)
            except ConfigError as exc:
                self._adopt(exc, path)
                self.broken.servers.add(key)
            else:
                problem = self._catalog_conflict(server)
                if problem is not None:
                    self.add(path, problem, at_key=True)
                    self.broken.servers.add(key)
                else:
                    built[key] = server
        data["mcp_servers"] = built
        self.servers.update(built)

    def _catalog_conflict(self, server: McpServer) -> str | None:
        """Why the graph cannot declare ``server``: the catalog has another server of its
        name (whose tools and attachments always use the catalog's), or ``None``."""
        if self.catalog is None:
            return None
        from gategraph.runtime._base._exceptions import NotFoundError
        from gategraph.runtime._calls._mcp import same_declaration

        try:
            theirs = self.catalog.get_server(server.name)
        except NotFoundError:
            return None
        except CatalogError:
            return None  # said where a tool names it (`_server_problem`)
        if same_declaration(server, theirs):
            return None
        taken = {*self.servers, *self.broken.servers}
        other = next(
            f"{server.name}-{suffix}"
            for suffix in ("graph", "local", *range(2, 1000))
            if f"{server.name}-{suffix}" not in taken
        )
        return (
            f"differs from the catalog's MCP server {server.name!r} ({theirs.target}), which "
            "the catalog's tools and attachments always use: give the graph's server "
            f"another name (e.g. {other!r}) and name that in its tools' `mcp_server`"
        )

    def _adopt(self, exc: ConfigError, path: PathKey) -> None:
        """Keep a part's issues, with the part's path in front of each field."""
        prefix = format_path(path)
        for issue in exc.issues:
            known = issue.line is not None
            # The field's own position when the part's error does not carry one.
            line, column = self.doc.position((*path, *issue.field.split(".")))
            self.issues.append(
                ConfigIssue(
                    issue.message,
                    f"{prefix}.{issue.field}" if issue.field else prefix,
                    issue.line if known else line,
                    issue.column if known else column,
                )
            )

    def _salvage(
        self,
        data: dict[str, Any],
        tools: list[tuple[PathKey, Tool]],
        skills: list[tuple[int, Skill]],
        context: dict[str, Any],
    ) -> _Parts:
        """Validate each part on its own, so the cross-checks still see the valid ones."""
        resources: dict[str, ResourceSpec] = {}
        raw = data.get("resources")
        if isinstance(raw, dict):
            for name, spec in raw.items():
                try:
                    resources[name] = ResourceSpec.model_validate(spec, context=context)
                except (ValidationError, TypeError):
                    self.broken.resources.add(name)
        nodes = _valid_items(data.get("nodes"), Node, self.broken.nodes)
        acceptance = _valid_items(data.get("acceptance"), AcceptanceCriterion, set())
        return _Parts(resources, tools, nodes, acceptance, skills)

    def _check(self, parts: _Parts, raw_resources: Any) -> None:
        if isinstance(raw_resources, dict):
            for name in raw_resources:
                try:
                    _check_id(name)
                except ValueError as exc:
                    self.add(["resources", name], str(exc), at_key=True)
        for name, spec in parts.resources.items():
            self._check_directory(name, spec)
        self._register_inline(parts.tools)
        ids = self._check_ids(parts.nodes)
        for index, node in parts.nodes:
            self._check_node(index, node, ids, parts.resources)
        nodes = [n for _, n in parts.nodes]
        if _has_cycle(nodes, ids):
            # Only now pay for networkx: it names every cycle, each from its first node.
            self._check_cycles(_dependency_graph(nodes, edges_only=True), ids)
        self._check_acceptance(parts.acceptance, [node for _, node in parts.nodes])
        self._check_skills(parts.skills)

    def _explained(self) -> list[ConfigIssue]:
        """Order issues as they stand in the file and suggest names for unknown fields."""
        out = []
        for issue in self.issues:
            if issue.message == "unknown field":
                issue = _suggest_field(issue)
            out.append(issue)
        return sorted(out, key=lambda i: (i.line or 0, i.column or 0))

    # -- resources ---------------------------------------------------------------------------

    def _check_directory(self, name: str, spec: ResourceSpec) -> None:
        if spec.kind != "directory" or spec.path is None:
            return
        path = ["resources", name, "path"]
        try:
            if spec.path.is_dir():
                return
            exists = spec.path.exists()
        except OSError as exc:
            self.add(path, f"cannot use {os.fspath(spec.path)!r}: {exc.strerror or exc}")
            return
        what = "not a directory" if exists else "no such directory"
        self.add(path, f"{what}: {os.fspath(spec.path)}")

    # -- tools and validations ---------------------------------------------------------------

    def _register_inline(self, tools: list[tuple[PathKey, Tool]]) -> None:
        for path, tool in tools:
            first = self.inline.get(tool.name)
            if first is not None:
                self.add(
                    [*path, "name"],
                    f"duplicate name {tool.name!r}: tools and validations share one "
                    f"namespace (first defined at {self.where(first[0])})",
                )
            else:
                self.inline[tool.name] = (path, tool)
        for name in self.inline:
            self._resolve(name, ())

    def _resolve(self, name: str, chain: tuple[str, ...]) -> Tool | None:
        """Return the tool ``name`` with its wrapping applied; ``None`` if it is unknown."""
        if name in self.registry:
            return self.registry[name]
        if name in self.inline:
            path, tool = self.inline[name]
            if isinstance(tool, Validation) and tool.wraps is not None:
                tool = self._wrap(path, tool, (*chain, name))
            self.registry[name] = tool
            return tool
        if self.catalog is None:
            found_builtin = shipped(name)
            if found_builtin is not None:
                self.registry[name] = found_builtin
            return found_builtin
        if name in self.catalog_errors:
            return None
        try:
            if name not in self.catalog:  # the catalog knows the built-ins too
                return None
            found = self.catalog.get(name)  # comes with its inheritance applied
        except CatalogError as exc:
            self.catalog_errors[name] = _one_line(exc)
            return None
        self.registry[name] = found
        if isinstance(found, Validation) and found.wraps is not None:
            # The engine calls the wrapped tool to run this validation.
            self._resolve(found.wraps, (*chain, name))
        return found

    def _wrap(self, path: PathKey, validation: Validation, chain: tuple[str, ...]) -> Validation:
        wraps = validation.wraps
        assert wraps is not None
        where = [*path, "wraps"]
        if wraps in chain:
            cycle = " → ".join([*chain[chain.index(wraps) :], wraps])
            self.add(where, f"wrapping cycle {cycle}")
            return validation
        wrapped = self._resolve(wraps, chain)
        if wrapped is None:
            if wraps not in self.broken.tools:
                self.add(where, self._unknown("tool", wraps, validation.name))
            return validation
        if wrapped.capability.writes:
            # An imported MCP tool writes unless its server declared it read-only.
            why = (
                " (its MCP server does not declare it read-only)"
                if wrapped.source is ToolSource.MCP
                else ""
            )
            self.add(
                where,
                f"cannot wrap {wraps!r}: it writes{why}, and a validation is always read-only",
            )
            return validation
        return validation.inherit_from(wrapped)

    def _check_servers(self, parts: _Parts) -> None:
        """Every MCP tool the graph defines or calls names a server of the graph or of the
        catalog: an inline tool's is reported where it is written, a catalog tool's at the
        node that calls it."""
        for name, (path, tool) in self.inline.items():
            if tool.source is ToolSource.MCP and name not in self.broken.tools:
                problem = self._server_problem(tool)
                if problem is not None:
                    self.add([*path, "mcp_server"], problem)
        reported: set[str] = set()
        for index, node in parts.nodes:
            if node.kind is NodeKind.ACTOR:
                continue
            current: Tool | None = self.registry.get(node.target)
            while current is not None and current.name not in reported:
                reported.add(current.name)
                if current.source is ToolSource.MCP and current.name not in self.inline:
                    problem = self._server_problem(current)
                    if problem is not None:
                        self.add(
                            ["nodes", index, _TARGET_FIELD[node.kind]],
                            f"{current.name!r} cannot be called: {problem}",
                        )
                wraps = current.wraps if isinstance(current, Validation) else None
                current = self.registry.get(wraps) if wraps is not None else None
        for where, member in self._skill_members(parts, reported):
            if member.source is ToolSource.MCP:
                problem = self._server_problem(member)
                if problem is not None:
                    self.add(where, f"{member.name!r} cannot be called: {problem}")

    def _server_problem(self, tool: Tool) -> str | None:
        """What is wrong with the server ``tool`` names (``None``: it is known)."""
        name = tool.mcp_server
        assert name is not None
        if name in self.servers or name in self.broken.servers or self.broken.server_section:
            return None  # declared (a broken declaration is reported where it is)
        if self.catalog is not None:
            from gategraph.runtime._base._exceptions import NotFoundError

            try:
                self.servers[name] = self.catalog.get_server(name)
            except NotFoundError:
                pass
            except CatalogError as exc:
                return f"cannot read MCP server {name!r} from the catalog: {_one_line(exc)}"
            else:
                return None
        where = (
            "in this graph's `mcp_servers` nor in the catalog"
            if self.catalog is not None
            else "in this graph's `mcp_servers` (no catalog was given)"
        )
        hint = _did_you_mean(name, [*self.servers, *self.broken.servers])
        return f"unknown MCP server {name!r}: not declared {where}{hint}"

    def _unknown(self, kind: str, name: str, asking: str = "") -> str:
        if name in self.catalog_errors:
            return f"cannot read {kind} {name!r} from the catalog: {self.catalog_errors[name]}"
        where = (
            "in this graph nor in the catalog"
            if self.catalog is not None
            else "in this graph (no catalog was given)"
        )
        return f"unknown {kind} {name!r}: not defined {where}{self._hint(name, asking)}"

    def _hint(self, name: str, asking: str) -> str:
        """A "did you mean" among every name the graph could have meant: its own, the
        catalog's, the built-ins' and installed plugins' (a misspelt built-in is the
        likeliest)."""
        if self.known is None:
            # Read once per graph, names only: a graph with many misspelt names, or a
            # large catalog, costs one query.
            self.known = [*shipped_names(), *(self.catalog.names() if self.catalog else ())]
        names = [n for n in self.inline if n != asking] + self.known
        return _did_you_mean(name, dict.fromkeys(names))

    # -- nodes -------------------------------------------------------------------------------

    def _check_ids(self, nodes: list[tuple[int, Node]]) -> dict[str, int]:
        ids: dict[str, int] = {}
        for index, node in nodes:
            if node.id in ids:
                first = self.where(["nodes", ids[node.id], "id"])
                self.add(
                    ["nodes", index, "id"], f"duplicate node id {node.id!r} (first at {first})"
                )
            else:
                ids[node.id] = index
        return ids

    def _check_node(
        self, index: int, node: Node, ids: Mapping[str, int], resources: Mapping[str, Any]
    ) -> None:
        base: PathKey = ("nodes", index)
        for j, need in _listed(self, [*base, "needs"], node.needs):
            if need == node.id:
                self.add([*base, "needs", j], "a node cannot need itself")
            elif need not in ids and need not in self.broken.nodes:
                self.add([*base, "needs", j], f"unknown node {need!r}{_did_you_mean(need, ids)}")
        for j, name in _listed(self, [*base, "resources"], node.resources or ()):
            if name not in resources and name not in self.broken.resources:
                # A resource whose own definition is broken is still declared.
                declared = ", ".join(sorted({*resources, *self.broken.resources}))
                hint = f"the graph declares: {declared}" if declared else "the graph declares none"
                self.add([*base, "resources", j], f"unknown resource {name!r} ({hint})")
        kind = node.kind
        field = _TARGET_FIELD[kind]
        where = [*base, field]
        if kind is NodeKind.ACTOR:
            message = self._import_class(node.target)
            if message is not None:
                self.add(where, message)
            return
        tool = self._resolve(node.target, ())
        if tool is None:
            if node.target not in self.broken.tools:
                self.add(where, self._unknown(field, node.target))
        elif kind is NodeKind.VALIDATION and not isinstance(tool, Validation):
            if tool.capability.writes:
                self.add(
                    where,
                    f"a validation node cannot run a tool that writes ({node.target!r} "
                    "has capability.writes)",
                )
            else:
                self.add(
                    where,
                    f"{node.target!r} names a tool, not a validation (call it from a work "
                    "node with `tool:`, or wrap it in a validation)",
                )
        if tool is not None:
            self._check_slots(base, node, tool, resources)
            self._check_arguments(base, node, tool)

    def _check_slots(
        self, base: PathKey, node: Node, tool: Tool, resources: Mapping[str, Any]
    ) -> None:
        """Each required resource slot is bound as the engine binds it: by a resource of
        the slot's name, the node's only resource for a tool's only slot, or an argument."""
        given = list(node.resources) if node.resources is not None else list(resources)
        if any(name in self.broken.resources for name in given):
            return  # the broken resource is reported where it is defined
        slots = tool.resource_slots
        for slot in slots:
            if not slot.required or slot.name in given or slot.name in node.arguments:
                continue
            if len(given) == 1 and len(slots) == 1:
                continue
            what = f" ({slot.description})" if slot.description else ""
            if not given:
                how = "the node is given no resource"
            else:
                how = f"the node is given {', '.join(given)}, none named {slot.name!r}"
            field = "resources" if node.resources is not None else _TARGET_FIELD[node.kind]
            self.add(
                [*base, field],
                f"{tool.name!r} needs a resource for its slot {slot.name!r}{what}: {how} "
                f"(give the node one resource, or one named {slot.name!r})",
            )

    def _check_arguments(self, base: PathKey, node: Node, tool: Tool) -> None:
        if isinstance(tool, Validation) and tool.argument_mapping:
            return  # its arguments are mapped onto the wrapped tool's; checked there
        for path, message in tool.argument_problems(node.arguments):
            # A misspelled name is the key's fault, not its value's.
            self.add(
                [*base, "arguments", *path],
                message,
                at_key=message.startswith("unknown argument"),
            )

    def _check_callable(
        self, parts: _Parts, default_timeout: float, required: bool = False
    ) -> None:
        """Prepare every tool as the engine will (import the entrypoint, run the inline
        code's definitions, build the transform), so what cannot be called is reported
        here rather than found by a plan at run time. An inline definition's problem is
        reported where it is written, once; a catalog or built-in one's at the node."""
        from gategraph.runtime._calls._invoke import prepare

        reported: set[str] = set()
        seen: set[tuple[str, str | None, float | None]] = set()

        def problem(tool: Tool, isolation: Any, timeout: float | None) -> ConfigError | None:
            try:
                prepare(
                    tool,
                    self.registry.__getitem__,
                    isolation=isolation,
                    timeout=timeout,
                    default_timeout=default_timeout,
                    sandboxed=required,
                    tell=False,
                )
            except ConfigError as exc:
                return exc
            except (KeyError, RecursionError):
                return None  # an unknown name or a wrapping cycle: reported already
            return None

        sandboxed, trusted = self._where_called(parts, required)
        for name, (path, _) in self.inline.items():
            tool = self.registry.get(name)
            if tool is None or name in self.broken.tools:
                continue
            wraps = tool.wraps if isinstance(tool, Validation) else None
            if wraps is not None and wraps in reported:
                reported.add(name)  # its wrapped tool's problem is reported where it is
                continue
            # Code that runs only in the sandbox (or, by default, outside this process) is
            # checked where it runs by default, without running it here; code a node
            # declared trusted is loaded, as that node will load it.
            found = problem(tool, "thread" if name in trusted else None, None)
            if found is not None and wraps is not None and found.issues[0].field != "transform":
                # The wrapped tool (from the catalog) cannot be called: say so at `wraps`.
                message = found.issues[0].message
                self.add([*path, "wraps"], f"{wraps!r} cannot be called: {message}")
                reported.add(name)
            elif found is not None:
                self._adopt(found, path)
                reported.add(name)
            # Imported only for a tool some node calls outside the sandbox.
            for hook, message in _hook_problems(tool, name not in trusted):
                self.add([*path, "hooks", hook], message)
        for index, node in parts.nodes:
            if node.kind is NodeKind.ACTOR or node.target in reported:
                continue
            tool = self.registry.get(node.target)
            key = (node.target, node.isolation, node.timeout)
            inline = node.target in self.inline
            if tool is None or key in seen:
                continue
            seen.add(key)
            found = problem(tool, node.isolation, node.timeout)
            if found is None:
                if not inline:
                    for hook, message in _hook_problems(tool, node.target in sandboxed):
                        what = f"{node.target!r} cannot be called: hooks.{hook}: "
                        self.add(["nodes", index, _TARGET_FIELD[node.kind]], what + message)
                self._check_parameters(
                    index, node, tool, imported=node.target not in sandboxed and not tool.untrusted
                )
                continue
            for issue in found.issues:
                # A field of the node (its isolation, say), else of what it calls.
                field = issue.field if issue.field in ("isolation", "timeout") else None
                where: list[str | int] = ["nodes", index, field or _TARGET_FIELD[node.kind]]
                what = "" if field or inline else f"{node.target!r} cannot be called: "
                self.add(where, what + issue.message)
        # A skill's members are called as the plan's nodes are: what cannot be, is said at
        # the skill (once per name; an inline one's problem is said where it is defined).
        reported.update(node.target for _, node in parts.nodes)  # checked at the nodes
        for where, tool in self._skill_members(parts, reported):
            untrusted = tool.untrusted or (required and isinstance(tool, Validation))
            found = problem(tool, "sandbox" if untrusted else None, None)
            if found is not None:
                message = found.issues[0].message
                self.add(where, f"{tool.name!r} cannot be called: {message}")

    def _where_called(self, parts: _Parts, required: bool) -> tuple[set[str], set[str]]:
        """The tools that only sandboxed nodes call (directly or wrapped), every
        validation's when the policy requires the sandbox: gategraph never imports or
        runs their code in its own process, not even to check it; and the tools some node
        calls outside the sandbox."""

        def closure(names: Iterable[str]) -> set[str]:
            found: set[str] = set()
            pending = list(names)
            while pending:
                name = pending.pop()
                if name in found:
                    continue
                found.add(name)
                tool = self.registry.get(name)
                if isinstance(tool, Validation) and tool.wraps is not None:
                    pending.append(tool.wraps)
            return found

        calls = [node for _, node in parts.nodes if node.kind is not NodeKind.ACTOR]

        def sandboxed(node: Node) -> bool:
            if node.isolation == "sandbox" or (required and node.kind is NodeKind.VALIDATION):
                return True
            if node.isolation is not None:
                return False
            # No isolation declared: where the validation runs by default (a wrapped one's
            # own code is only a transform; the tool it calls is judged on its own).
            tool = self.registry.get(node.target)
            if tool is None:
                return False
            if node.kind is not NodeKind.VALIDATION:
                return default_isolation(tool, tell=False, work=True) is not None
            # Where the kernel cannot sandbox, that is a worker process: loaded there, not
            # here, all the same.
            if isinstance(tool, Validation) and tool.wraps is not None:
                inner = self.registry.get(tool.wraps)
                return inner is not None and default_isolation(inner, tell=False) is not None
            return default_isolation(tool, tell=False) is not None

        outside = closure(n.target for n in calls if not sandboxed(n))
        return closure(n.target for n in calls if sandboxed(n)) - outside, outside

    def _check_parameters(self, index: int, node: Node, tool: Tool, *, imported: bool) -> None:
        """A parameter the callable requires must be given: by the node's arguments, a
        resource slot or the runtime (``artifact``, ``context``, ``inputs``). Code that
        runs in the sandbox is not ``imported``: its signature is read from its source."""
        from gategraph.runtime._calls._call import _inline_function, resolve_entrypoint
        from gategraph.runtime._calls._invoke import static_signature

        if tool.input_schema:
            return  # the schema says what is required (checked against the arguments)
        if not imported:
            signature = static_signature(tool)
            if signature is not None:
                self._report_missing(index, node, tool, signature.parameters.values())
            return
        try:
            if tool.entrypoint is not None:
                func = resolve_entrypoint(tool.entrypoint)
            elif tool.code is not None:
                func = _inline_function(tool.name, tool.code, "run")
            else:
                return  # wrapped or MCP: the arguments are mapped or the server's
            parameters = inspect.signature(func).parameters.values()
        except (ConfigError, TypeError, ValueError):
            return  # reported by prepare, or a callable without a readable signature
        self._report_missing(index, node, tool, parameters)

    def _report_missing(
        self, index: int, node: Node, tool: Tool, parameters: Iterable[inspect.Parameter]
    ) -> None:
        given = {*node.arguments, *(slot.name for slot in tool.resource_slots)}
        given |= {"artifact", "context", "inputs"}
        required = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        for parameter in parameters:
            if (
                parameter.kind in required
                and parameter.default is inspect.Parameter.empty
                and parameter.name not in given
            ):
                self.add(
                    ["nodes", index, "arguments"],
                    f"{tool.name!r} requires the argument {parameter.name!r}, which the node "
                    "does not give",
                )

    def _check_lifecycle(self, lifecycle: Lifecycle) -> None:
        """Each lifecycle role names something that can play it (seen by importing it)."""
        from ._roles import ROLES, role_problem

        for role in ROLES:
            spec = getattr(lifecycle, role)
            if spec is None:
                continue
            problem = role_problem(spec.uses, spec.arguments, role)
            if problem is not None:
                self.add(["lifecycle", role, "uses"], problem)

    def _import_class(self, uses: str) -> str | None:
        """Return what is wrong with ``uses``, or ``None`` if it names a class."""
        if uses not in self.imports:
            self.imports[uses] = _class_problem(uses)
        return self.imports[uses]

    def _check_cycles(self, digraph: Any, ids: Mapping[str, int]) -> None:
        import networkx as nx  # type: ignore[import-untyped,unused-ignore]

        components = [c for c in nx.strongly_connected_components(digraph) if len(c) > 1]
        for component in sorted(components, key=lambda c: min(ids[n] for n in c)):
            cycle = [u for u, _ in nx.find_cycle(digraph.subgraph(component))]
            start = min(range(len(cycle)), key=lambda k: ids[cycle[k]])
            cycle = cycle[start:] + cycle[:start]
            self.add(["nodes"], "cycle " + " → ".join([*cycle, cycle[0]]))

    # -- acceptance criteria -----------------------------------------------------------------

    def _check_acceptance(
        self, criteria: list[tuple[int, AcceptanceCriterion]], nodes: list[Node]
    ) -> None:
        # A criterion binds validation nodes, by node id or by the validation they run.
        bound: dict[str, list[Node]] = {}
        for node in nodes:
            if node.validation is not None:
                bound.setdefault(node.id, []).append(node)
                if node.validation != node.id:
                    bound.setdefault(node.validation, []).append(node)
        ids: dict[str, int] = {}
        for index, criterion in criteria:
            if criterion.id in ids:
                first = self.where(["acceptance", ids[criterion.id], "id"])
                self.add(
                    ["acceptance", index, "id"],
                    f"duplicate acceptance criterion id {criterion.id!r} (first at {first})",
                )
            else:
                ids[criterion.id] = index
            where: PathKey = ("acceptance", index, "validations")
            for j, name in _listed(self, where, criterion.validations):
                matches = bound.get(name)
                if matches is None:
                    if name not in self.broken.nodes and name not in self.broken.tools:
                        self.add(
                            [*where, j],
                            f"{name!r} is bound to nothing: name a validation node's id or "
                            "a validation that a validation node runs",
                        )
                    continue
                informational = sorted(
                    {n.target for n in matches if _is_informational(self.registry.get(n.target))}
                )
                if informational:
                    # A criterion gates the plan; an informational result never blocks.
                    self.add(
                        [*where, j],
                        f"{name!r} runs the informational validation {informational[0]!r}, "
                        "which never blocks: bind only required validations",
                    )


def _listed(
    loader: _Loader, path: Sequence[str | int], names: Iterable[str]
) -> list[tuple[int, str]]:
    """Return ``(index, name)`` pairs, reporting a name listed twice."""
    seen: set[str] = set()
    out = []
    for j, name in enumerate(names):
        if name in seen:
            loader.add([*path, j], f"{name!r} is listed twice")
        else:
            seen.add(name)
            out.append((j, name))
    return out


def _valid_items(raw: Any, model: type[_M], broken: set[str]) -> list[tuple[int, _M]]:
    """Validate each item of a list on its own; record the ids of those that fail."""
    out: list[tuple[int, _M]] = []
    if not isinstance(raw, list):
        return out
    adapter = TypeAdapter(model)
    for index, item in enumerate(raw):
        try:
            out.append((index, adapter.validate_python(item)))
        except (ValidationError, TypeError):
            if isinstance(item, Mapping) and isinstance(item.get("id"), str):
                broken.add(item["id"])
    return out


def _item_marks(doc: Document, sections: Iterable[str]) -> dict[PathKey, Document]:
    """Split the positions of each ``section[i]`` item off ``doc``, in one pass over them.

    Returns an empty document per item that has positions; :func:`Tool.from_config` reads
    it with the item's data, so its errors keep their lines and columns.
    """
    wanted = set(sections)
    out: dict[PathKey, Document] = {}
    for marks, keyed in ((doc.marks, False), (doc.key_marks, True)):
        for key, mark in marks.items():
            if len(key) > 1 and key[0] in wanted:
                part = out.setdefault(key[:2], Document(None, doc.source))
                (part.key_marks if keyed else part.marks)[key[2:]] = mark
    return out


def _has_cycle(nodes: Sequence[Node], ids: Mapping[str, int]) -> bool:
    """Whether the ``needs`` edges make a cycle (the standard library's check, cheap)."""
    import graphlib

    sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
    edges = False
    for node in nodes:
        needs = [need for need in node.needs if need in ids and need != node.id]
        if needs:
            edges = True
            sorter.add(node.id, *needs)
    if not edges:
        return False
    try:
        sorter.prepare()
    except graphlib.CycleError:
        return True
    return False


def _dependency_graph(nodes: Iterable[Node], *, edges_only: bool = False) -> Any:
    """Build the ``networkx.DiGraph`` of ``needs``: an edge ``a → b`` when ``b`` needs ``a``.

    With ``edges_only``, nodes that need nothing and that nothing needs are left out: they
    cannot be on a cycle, and a wide fan-out would otherwise cost the check ~300 bytes a node.
    """
    import networkx as nx  # type: ignore[import-untyped,unused-ignore]

    nodes = list(nodes)
    digraph: Any = nx.DiGraph()
    known = {n.id for n in nodes}
    if not edges_only:
        digraph.add_nodes_from(n.id for n in nodes)
    for node in nodes:
        # Unknown needs and self-needs are reported by the checker; they are no edges.
        digraph.add_edges_from(
            (need, node.id) for need in node.needs if need in known and need != node.id
        )
    return digraph


def _inherit_inline(tool: Tool, inline: Mapping[str, Tool], chain: tuple[str, ...]) -> Tool:
    """Apply wrapping inheritance among inline definitions (for graphs built in Python)."""
    if not isinstance(tool, Validation) or tool.wraps is None or tool.wraps in chain:
        return tool
    wrapped = inline.get(tool.wraps)
    if wrapped is None:
        return tool
    return tool.inherit_from(_inherit_inline(wrapped, inline, (*chain, tool.name)))


def _is_informational(tool: Tool | None) -> bool:
    return isinstance(tool, Validation) and tool.mode is ValidationMode.INFORMATIONAL


def _hook_problems(tool: Tool, sandboxed: bool) -> list[tuple[str, str]]:
    """What is wrong with a tool's lifecycle hooks: ``(setup|teardown, message)``. The
    hooks of a tool that runs in the sandbox run there too: never imported here."""
    from gategraph.runtime._calls._call import resolve_entrypoint
    from gategraph.runtime._calls._invoke import check_entrypoint

    found = []
    for hook in ("setup", "teardown"):
        entrypoint = getattr(tool.hooks, hook)
        if entrypoint is None:
            continue
        try:
            if sandboxed or tool.untrusted:
                check_entrypoint(entrypoint)
            else:
                resolve_entrypoint(entrypoint)
        except ConfigError as exc:
            found.append((hook, exc.issues[0].message))
    return found


def _class_problem(uses: str) -> str | None:
    """Import ``package.module:Class``; return what is wrong, or ``None`` for a class."""
    module_name, _, qualname = uses.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
    except ImportError as exc:
        return f"cannot import {module_name!r}: {_one_line(exc)}"
    except BaseException as exc:  # the module itself fails while it is imported
        from gategraph.runtime._calls._invoke import propagates

        if propagates(exc):
            raise
        return f"cannot import {module_name!r}: {type(exc).__name__}: {_one_line(exc)}"
    try:
        for part in qualname.split("."):
            found = getattr(found, part)
    except AttributeError as exc:
        return f"cannot resolve {uses!r}: {_one_line(exc)}"
    if not inspect.isclass(found):
        return f"{uses!r} is a {type(found).__name__}, not a class"
    return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _suggest_field(issue: ConfigIssue) -> ConfigIssue:
    for pattern, model in _FIELDS_BY_PATH:
        if pattern.match(issue.field):
            fields = getattr(model, "__pydantic_fields__", None) or model.model_fields
            hint = _did_you_mean(issue.field.rpartition(".")[2], fields)
            if hint:
                return ConfigIssue(issue.message + hint, issue.field, issue.line, issue.column)
            break
    return issue
