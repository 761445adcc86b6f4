"""What a validation round may reuse instead of calling a validation again.

A fix round changes some files; a validation given none of them would only say again what
it said. A round takes note, as it starts, of what its validations are given
(:class:`RoundSeen`): each resource's content (the round's manifest digests, in its
``artifact_validation_started`` event), a listing of each folder sandbox (what the
snapshots leave out included), the JSON form of its artifact and of each output before
it, and the digest of each validation's code. A validation whose earlier call passed is
not called again when all it reads is the same in both rounds (:func:`same_read`): the
round records that result once more, as reused, in a ``validation_completed`` event of
its own (``reused_from``), so replay and resume read it as they read any result. The
node and its configuration are the same: the graph does not change while a plan runs.

Never reused, because something it reads is out of gategraph's sight: a validation that
declares ``network: true`` or ``reuse: false``, one served by an MCP server or wrapping a
validator tool (those read the catalog), one whose code or artifact cannot be pinned down
(an entrypoint whose module is not found, an artifact with no JSON form), one that needs
a validation of the same round, and a catalog attachment (its configuration lives in the
catalog, which may change between rounds).

Taking note costs a few encodings a round whatever the graph's size; comparing costs a
few lookups a validation, and only where an earlier call passed.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec
from gategraph.runtime._data._builtins import copies, in_process
from gategraph.runtime._data._models import Validation

if TYPE_CHECKING:
    from gategraph.runtime._data._models import Tool
    from gategraph.runtime._definitions._graph import Node, PlanGraph

__all__ = ["RoundSeen", "arguments_of", "reusable_tools", "same_read", "tools_of"]


class RoundSeen:
    """What one round gives its validations, as it starts (see the module)."""

    __slots__ = ("artifact", "code", "given", "inputs", "unseen")

    def __init__(
        self,
        graph: PlanGraph,
        given: Mapping[str, Any],
        artifact: Any,
        inputs: Mapping[str, str] | None,
        unseen: Mapping[str, str],
        tools: Iterable[str],
    ) -> None:
        self.inputs = dict(inputs) if inputs is not None else None
        """Each resource's manifest digest (None: not known)."""
        self.unseen = dict(unseen)
        """Each folder sandbox's listing digest."""
        self.given = {name: _encoded(value) for name, value in given.items()}
        """The JSON form of each output the round is given (None: it has none)."""
        self.artifact = _encoded(artifact)
        """The JSON form of the round's artifact (None: it has none)."""
        self.code = {name: _code_digest(graph.get_tool(name)) for name in tools}
        """Each validation's (and wrapped tool's) code digest, by name (None: unknown)."""


def tools_of(graph: PlanGraph) -> frozenset[str]:
    """The validations the graph's nodes call, and the tools they wrap: whose code a
    round takes note of (once per plan: the graph does not change while it runs)."""
    names = {node.validation for node in graph.nodes if node.validation is not None}
    # Each validation once, however many nodes call it.
    return frozenset(name for v in names for name in _reusable(graph, v) or ())


def reusable_tools(graph: PlanGraph, node_id: str) -> tuple[str, ...] | None:
    """The validation (and wrapped tool) node ``node_id`` calls, when its result may be
    reused at all; None when never (see the module)."""
    try:
        validation = graph.node(node_id).validation
    except KeyError:
        return None  # an attachment
    return _reusable(graph, validation) if validation is not None else None


def _reusable(graph: PlanGraph, name: str) -> tuple[str, ...] | None:
    """Validation ``name`` and the tool it wraps, when a result of it may be reused at
    all; None when never, or for a name the graph does not hold."""
    try:
        tool = graph.get_tool(name)
        wrapped = (
            graph.get_tool(tool.wraps) if isinstance(tool, Validation) and tool.wraps else None
        )
    except KeyError:
        return None
    if not isinstance(tool, Validation) or not tool.reuse:
        return None
    tools = [t for t in (tool, wrapped) if t is not None]
    if any(map(_out_of_sight, tools)):
        return None
    return tuple(t.name for t in tools)


def arguments_of(node: Node | None) -> bytes | None:
    """The JSON form of ``node``'s arguments: the one part of a node that code could
    change in place while a plan runs (a mapping), kept with each passing call; None for
    no node (an attachment)."""
    if node is None:
        return None
    arguments = node.arguments
    return _encoded(arguments) if arguments else b"{}"


def same_read(
    graph: PlanGraph,
    node_id: str,
    tools: Iterable[str],
    before: RoundSeen,
    now: RoundSeen,
) -> bool:
    """Whether node ``node_id`` (calling ``tools``, from :func:`reusable_tools`) reads the
    same in the round that took note of ``now`` as in the one that took ``before``."""
    if before.inputs is None or now.inputs is None:
        return False
    for name in tools:
        code = now.code.get(name)
        if code is None or before.code.get(name) != code:
            return False
    node = graph.node(node_id)
    names = node.resources if node.resources is not None else tuple(graph.resources)
    for name in names:
        digest = now.inputs.get(name)
        if digest is None or before.inputs.get(name) != digest:
            return False
        # A folder (whatever the graph declared: a run may be given one) by its listing.
        listing = now.unseen.get(name)
        if before.unseen.get(name) != listing or (
            listing is None and graph.resources[name].kind == "directory"
        ):
            return False
    if not node.needs:
        return now.artifact is not None and before.artifact == now.artifact
    for need in node.needs:
        # Not given: a validation of the same round, whose answer is not known yet.
        output = now.given.get(need)
        if output is None or before.given.get(need) != output:
            return False
    return True


def _encoded(value: Any) -> bytes | None:
    try:
        return msgspec.json.encode(value, order="deterministic", enc_hook=_plain)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return None  # no JSON form: nothing to compare it by


def _out_of_sight(tool: Tool) -> bool:
    """Whether ``tool`` reads what gategraph cannot see: the network, an MCP server, or
    the catalog's coverage (the validator tools), which changes between rounds."""
    return (
        tool.network
        or tool.mcp_server is not None
        or (tool.entrypoint or "").startswith("gategraph.runtime._definitions._validator_tools:")
    )


def _plain(value: Any) -> Any:
    """A frozen mapping or collection as JSON has it; anything else has no JSON form."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, frozenset | set):
        return sorted(value, key=repr)
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _code_digest(tool: Tool) -> str | None:
    """What stands for the code ``tool`` runs beyond its configuration: nothing for inline
    code and transforms (in the configuration, which does not change while a plan runs)
    or gategraph's own; the
    digest of an entrypoint's module file, found without importing anything; None where
    it cannot be found."""
    entrypoint = tool.entrypoint
    if entrypoint is None or tool.code is not None or in_process(tool) or copies(tool):
        return ""
    try:
        origin = _module_file(entrypoint.split(":", 1)[0])
        if origin is None:
            return None
        with open(origin, "rb") as source:
            return hashlib.sha256(source.read()).hexdigest()
    except (ImportError, ValueError, OSError):  # a path hook that fails, a file gone
        return None


def _module_file(module: str) -> str | None:
    """The file of ``module``, found on ``sys.path`` as the import system would, without
    running any package's ``__init__`` (a plan's code runs only where it is confined)."""
    path: list[str] | None = None
    spec = None
    parts = module.split(".")
    for index in range(len(parts)):
        name = ".".join(parts[: index + 1])
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        path = list(spec.submodule_search_locations or [])
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    return spec.origin
