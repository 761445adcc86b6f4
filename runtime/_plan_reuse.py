"""What a validation round may reuse instead of calling a validation again.

A fix round changes some files; a validation given none of them would only say again what
it said. Its *read key* is a digest of everything it is given: its node (validation,
arguments, needs, isolation, timeout), its configuration (and a wrapped tool's), the code
it runs, the content of each resource it is given (the round's manifest digests, in its
``artifact_validation_started`` event) and its artifact or the outputs of the nodes it
needs. A validation whose key equals that of an earlier passing call of the same plan is
not called again: the round records that result once more, as reused, in a
``validation_completed`` event of its own (``reused_from``), so replay and resume read it
as they read any result.

Never reused, because something it reads is out of gategraph's sight: a validation that
declares ``network: true`` or ``reuse: false``, one served by an MCP server or wrapping a
validator tool (those read the catalog), one whose
code or artifact cannot be pinned down (an entrypoint whose module is not found, an
artifact with no JSON form), and a catalog attachment (its configuration lives in the
catalog, which may change between rounds).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from ._builtins import copies, in_process
from ._models import Validation
from ._version import __version__

if TYPE_CHECKING:
    from ._graph import PlanGraph
    from ._models import Tool

__all__ = ["read_key"]


def read_key(
    graph: PlanGraph,
    node_id: str,
    given: Mapping[str, Any],
    artifact: Any,
    inputs: Mapping[str, str] | None,
    unseen: Mapping[str, str],
) -> str | None:
    """The read key of validation node ``node_id`` in a round that validates ``inputs``
    (each resource's manifest digest), ``given`` the outputs of the nodes before it and
    ``artifact`` the round's artifact; ``unseen`` holds, for each folder, a digest of
    everything in its sandbox, what its manifest leaves out included (what the exclusion
    keeps out of a snapshot, a test suite may still read). None when its result must
    never be reused."""
    if inputs is None:
        return None
    try:
        node = graph.node(node_id)
        tool = graph.get_tool(node.validation) if node.validation is not None else None
        wrapped = (
            graph.get_tool(tool.wraps) if isinstance(tool, Validation) and tool.wraps else None
        )
    except KeyError:
        return None  # an attachment, or a name the graph does not hold
    if not isinstance(tool, Validation) or not tool.reuse:
        return None
    tools = [t for t in (tool, wrapped) if t is not None]
    if any(t.network or t.mcp_server is not None or _reads_the_catalog(t) for t in tools):
        return None
    code = [_code_digest(t) for t in tools]
    if None in code:
        return None
    if any(need not in given for need in node.needs):
        return None  # it needs a validation of this round: what that gives is not known yet
    names = node.resources if node.resources is not None else tuple(graph.resources)
    folders = [n for n in names if n in graph.resources and graph.resources[n].kind == "directory"]
    if any(name not in inputs for name in names) or any(n not in unseen for n in folders):
        return None
    seen = {
        "node": [node.validation, node.arguments, node.needs, node.isolation, node.timeout],
        "tools": [t.model_dump(mode="json") for t in tools],
        "code": code,
        "gategraph": __version__,
        "resources": {name: [inputs[name], unseen.get(name)] for name in names},
        "given": {need: given[need] for need in node.needs} if node.needs else artifact,
    }
    try:
        data = msgspec.json.encode(seen, order="deterministic", enc_hook=_plain)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return None  # an artifact with no JSON form: nothing to compare it by
    return hashlib.sha256(data).hexdigest()


def _reads_the_catalog(tool: Tool) -> bool:
    """The validator tools read the catalog's coverage, which changes between rounds."""
    return (tool.entrypoint or "").startswith("gategraph.runtime._validator_tools:")


def _plain(value: Any) -> Any:
    """A frozen mapping or collection as JSON has it; anything else has no JSON form."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, frozenset | set):
        return sorted(value, key=repr)
    raise TypeError(f"no JSON form for {type(value).__name__}")


def _code_digest(tool: Tool) -> str | None:
    """What stands for the code ``tool`` runs beyond its configuration: nothing for inline
    code and transforms (in the configuration) or gategraph's own (its version); the
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
