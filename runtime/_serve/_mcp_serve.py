"""gategraph's validations, and its read-only tools, served as MCP tools (``gategraph mcp serve``).

Each validation of the catalog (and each built-in one, unless left out) becomes an MCP tool
with its own ``inputSchema``: its resource slots first, as path arguments (a folder's path,
or files as an object of relative path → text), then its own arguments (its
``input_schema``, or what its callable's signature accepts), and ``artifact`` when it judges
one. Its ``outputSchema`` is the structured result ``{passed, message, data}``, and it is
annotated ``readOnlyHint``. A read-only tool (``capability.read_only``) is served the same
way; its ``outputSchema`` is ``{output}``, the tool's return value.

A call runs through the engine as a validation node of a plan does: the read-only guard,
the timeout, result coercion (seed 000, "Read-Only Enforcement" and "Structured Return
Format"). A read-only tool runs wrapped in a validation for that, so a write it attempts
is caught too rather than taken on trust. A validation that fails is a normal result (``passed: false``); arguments
that cannot be used (a folder that is not there, an unknown argument) are ``isError``
results with a one-line message, and so is a read-only tool whose call fails.

Every path a call names stays inside the served root (``root``, by default the working
directory the server starts in), resolved once: a resource slot's folder, a plan graph file
and the folders a plan runs on are resolved (symlinks followed, ``..`` folded) and refused
when they lead out of it; so are the arguments of the built-in validations that name paths
inside their folder (globs, test folders). A client may be anyone who can reach the server
(``--allow-remote``), and the read-only guard stops writes, not reads.

With ``plans``, two more tools serve whole plans: ``gategraph.run_plan`` runs a plan graph
file (it may apply changes, so it is not read-only) and ``gategraph.plans_waiting`` lists
the plans of the event log that wait for a person.

The ``mcp`` SDK is an optional extra: this module imports it only in the functions that
build and run a server.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import ipaddress
import json
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final, TextIO, cast

import msgspec
from gategraph.runtime._base._exceptions import ConfigError, GategraphError
from gategraph.runtime._calls._call import _INJECTED as _INVOKE_INJECTED
from gategraph.runtime._calls._invoke import PASS_THROUGH
from gategraph.runtime._data._models import ResourceSlot, Tool, ToolSource, Validation
from gategraph.runtime._data._validator_declarations import AC_PULL, ATTEST, SPAWN, VALIDATOR_TOOLS
from gategraph.runtime._lifecycle._plan import PlanStatus
from gategraph.runtime._version import __version__

if TYPE_CHECKING:
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from jsonschema.protocols import Validator
    from mcp.server.lowlevel import Server

__all__ = [
    "PLANS_WAITING",
    "PLAN_TOOLS",
    "RESULT_SCHEMA",
    "RUN_PLAN",
    "ServedTool",
    "ToolReply",
    "bind",
    "call_served",
    "create_mcp_server",
    "mcp_tool_name",
    "parse_address",
    "plans_waiting",
    "run_plan_file",
    "serve_http",
    "serve_stdio",
    "served_root",
    "served_tool",
]

_MCP_NAME: Final = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
"""What MCP allows as a tool name (the SDK's ``tool_name_validation``)."""

RESULT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "passed": {"type": "boolean", "description": "Whether the check passed."},
        "message": {"type": "string", "description": "A short explanation."},
        "data": {
            "type": "object",
            "description": "Machine-readable details; `error` names why a call failed "
            "(timeout, exception, read_only_violation, malformed ...).",
        },
        "enforced_by": {
            "enum": ["kernel", "guard", "server"],
            "description": "What held the call to read-only: the kernel sandbox, the "
            "in-process guard (gategraph's own code, or code declared trusted), or an MCP "
            "server's own promise.",
        },
    },
    "required": ["passed", "message", "data", "enforced_by"],
}
"""The ``outputSchema`` of a served validation: its structured result."""

# What the engine passes a callable itself (never the client): the same names as the ones
# a call injects.
_INJECTED: Final = frozenset(_INVOKE_INJECTED)
_ARTIFACT_SCHEMA: Final[dict[str, Any]] = {
    "description": "The value to judge (what a work node would have produced): any JSON value."
}
_FOLDER_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "description": "A folder's path inside the served root (relative to the root, or absolute).",
}
_FILES_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "description": "Files held in memory: relative path → text.",
}
_TYPES: Final = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "dict": "object",
}
# A read-only tool runs under a validation that wraps it, so the engine's read-only guard
# covers it; the transform hands its output on unchanged.
_WRAPPER_NAMES: Final = ("served-tool", "served-tool-2")

RUN_PLAN: Final = "gategraph.run_plan"
PLANS_WAITING: Final = "gategraph.plans_waiting"
PLAN_TOOLS: Final = (RUN_PLAN, PLANS_WAITING)
"""The names of the plan tools served with ``plans=True``."""
_WAITING: Final = frozenset(s.value for s in PlanStatus if s.waiting)

# The arguments of the built-in validations that name paths inside the folder they check,
# by entrypoint: a glob or path ("path"), a list of them ("paths"), or pytest's command-line
# arguments ("options", whose values may be paths). The validations run on the folder the
# slot names; these must not lead out of it.
_PATH_ARGUMENTS: Final[dict[str, dict[str, str]]] = {
    "gategraph.validators:regex": {"files": "path", "exclude": "paths"},
    "gategraph.validators:python_syntax": {"include": "path", "exclude": "paths"},
    "gategraph.validators:unittest_suite": {"start": "path", "paths": "paths"},
    "gategraph.validators:pytest_suite": {"args": "options"},
}
_PROBLEM_LIMIT: Final = 300
"""The longest a problem of a call's arguments is said (a value it quotes is cut)."""
_ISSUE_LIMIT: Final = 160
_FIELD_PATH: Final = re.compile(r"[A-Za-z0-9_-]{1,60}(?:\.[A-Za-z0-9_-]{1,60}|\[\d+\]){0,8}")


def mcp_tool_name(name: str) -> str:
    """The MCP tool name of gategraph tool ``name``: itself when MCP allows it, else a
    stable spelling with the characters MCP refuses replaced and a digest of the name."""
    if _MCP_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:119]
    return f"{safe}-{digest}"


# -- what each tool takes --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Parameters:
    """What a callable's signature accepts as configured arguments."""

    names: tuple[str, ...]
    required: tuple[str, ...]
    varkw: bool
    schemas: dict[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ServedTool:
    """A catalog entry as an MCP tool: its name there, its schemas, how a call is checked."""

    name: str
    """The MCP tool name (see :func:`mcp_tool_name`)."""
    tool: Tool
    """The validation or read-only tool it runs."""
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    takes_artifact: bool
    """Whether the callable receives ``artifact`` (so the tool has that argument)."""
    checker: Validator
    """Checks the tool's own arguments (the ``inputSchema`` without the slots and
    ``artifact``, which are checked as what they are), built once."""
    path_arguments: Mapping[str, str]
    """The arguments that name paths inside the slot's folder, and their shape (see
    ``_PATH_ARGUMENTS``)."""

    @property
    def is_validation(self) -> bool:
        return isinstance(self.tool, Validation)

    def describe(self) -> dict[str, Any]:
        """The tool as MCP lists it (wire field names)."""
        tool = self.tool
        kind = "validation" if self.is_validation else "read-only tool"
        text = tool.description.strip() or f"The gategraph {kind} {tool.name!r}."
        if self.is_validation:
            text += (
                "\n\nA gategraph validation (read-only): the result is {passed, message, "
                "data}; a check that fails is passed: false, not an error."
            )
        else:
            text += "\n\nA gategraph read-only tool: the result is {output}."
        meta: dict[str, Any] = {"kind": kind, "source": tool.source.value}
        if isinstance(tool, Validation):
            meta["mode"] = tool.mode.value
        if self.name != tool.name:
            meta["name"] = tool.name
        return {
            "name": self.name,
            "description": text,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": {
                "readOnlyHint": True,
                "destructiveHint": False,
                "idempotentHint": bool(tool.idempotent) or self.is_validation,
            },
            "_meta": {"gategraph": meta},
        }


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    """A JSON Schema type for a plain annotation (``str``, ``int`` ...); anything else is
    left open."""
    name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", None)
    kind = _TYPES.get(name) if isinstance(name, str) else None
    return {"type": kind} if kind else {}


def _plain_default(value: Any) -> bool:
    return value is None or type(value) in (str, int, float, bool)


def _root_signature(tool: Tool, get_tool: Callable[[str], Tool]) -> inspect.Signature | None:
    """The signature of the callable a call of ``tool`` ends in (the wrapped tool's, for a
    wrapping validation), or None for an MCP tool or one that cannot tell; raises
    :class:`ConfigError` if it cannot be prepared. Code that runs in the sandbox is never
    imported here: its signature is read from its source."""
    from gategraph.runtime._calls._invoke import prepare, static_signature

    current = _chain(tool, get_tool)[-1]
    if isinstance(current, Validation) and current.wraps is not None:
        return None  # a cycle: the catalog refuses it, the loader reports it
    if current.source is ToolSource.MCP:
        return None  # its arguments are the server's (its input_schema)
    prepared = prepare(current, get_tool, judging=True, tell=False)
    if prepared.func is None:
        return static_signature(current)
    try:
        return inspect.signature(prepared.func)
    except (TypeError, ValueError):
        return None


def _parameters(signature: inspect.Signature, skip: set[str]) -> _Parameters:
    names: list[str] = []
    required: list[str] = []
    schemas: dict[str, dict[str, Any]] = {}
    varkw = False
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            varkw = True
            continue
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.POSITIONAL_ONLY):
            continue
        if parameter.name in skip or parameter.name in _INJECTED:
            continue
        names.append(parameter.name)
        schema = _annotation_schema(parameter.annotation)
        default = parameter.default
        if default is inspect.Parameter.empty:
            required.append(parameter.name)
        elif _plain_default(default):
            if not schema and type(default) in (str, bool):
                # Unannotated: a text or a flag default says the type (a number's may be
                # an int standing for any number, so it says nothing).
                schema = _annotation_schema(type(default))
            schema["default"] = default
        schemas[parameter.name] = schema
    return _Parameters(tuple(names), tuple(required), varkw, schemas)


def _slot_schema(slot: ResourceSlot) -> dict[str, Any]:
    if slot.kind == "directory":
        schema = dict(_FOLDER_SCHEMA)
    elif slot.kind == "memory":
        schema = dict(_FILES_SCHEMA)
    else:
        schema = {"anyOf": [dict(_FOLDER_SCHEMA), dict(_FILES_SCHEMA)]}
        schema["description"] = "A folder's path, or files held in memory (relative path → text)."
    if slot.description:
        schema["description"] = f"{slot.description.rstrip('.')}. {schema['description']}"
    return schema


def _input_schema(
    tool: Tool, arguments: dict[str, Any] | None, takes_artifact: bool
) -> dict[str, Any]:
    """The slots as path arguments, then ``artifact``, then the tool's own arguments."""
    properties: dict[str, Any] = {slot.name: _slot_schema(slot) for slot in tool.resource_slots}
    required = [slot.name for slot in tool.resource_slots if slot.required]
    if takes_artifact and "artifact" not in properties:
        properties["artifact"] = dict(_ARTIFACT_SCHEMA)
    base = arguments or {}
    for name, schema in (base.get("properties") or {}).items():
        properties.setdefault(name, schema)
    required += [name for name in base.get("required") or () if name not in required]
    # Keywords beside the properties ($defs their $refs point at, additionalProperties ...)
    # stay at the root, where those references resolve.
    extra = {k: v for k, v in base.items() if k not in ("type", "properties", "required")}
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = required
    out.update(extra)
    return out


def _result_output_schema(tool: Tool) -> dict[str, Any]:
    if isinstance(tool, Validation):
        return RESULT_SCHEMA
    inner = dict(tool.output_schema or {})
    # Where the references of the tool's own schema resolve: at the root.
    hoisted: dict[str, Any] = {
        k: inner.pop(k) for k in ("$defs", "definitions", "$schema") if k in inner
    }
    return {
        "type": "object",
        "properties": {"output": {"description": "What the tool returned.", **inner}},
        "required": ["output"],
        **hoisted,
    }


def _chain(tool: Tool, get_tool: Callable[[str], Tool]) -> list[Tool]:
    """``tool`` and the tools it wraps, in order (a cycle ends it: the catalog refuses one)."""
    chain = [tool]
    while isinstance(chain[-1], Validation) and chain[-1].wraps is not None:
        wrapped = get_tool(chain[-1].wraps)
        if any(wrapped.name == seen.name for seen in chain):
            break
        chain.append(wrapped)
    return chain


def _read_only_problem(tool: Tool, get_tool: Callable[[str], Tool]) -> str | None:
    """Why ``tool`` cannot be served as read-only, or None.

    A validation over an MCP tool is only as read-only as that tool: it is served when its
    configuration says the tool only reads (its server's readOnlyHint, recorded when it
    was imported) or the validation trusts it (``trust_read_only``). Every call still
    checks the server, as in a plan."""
    # seed 000, "Constraints": a validation is always read-only, and a client that sees
    # readOnlyHint may call it without asking anyone; a claim that rests on a tool nobody
    # declared read-only is not one to pass on.
    from gategraph.runtime._calls._mcp import read_only_claim

    if read_only_claim(tool, get_tool) != "absent":
        return None
    chain = _chain(tool, get_tool)
    end = chain[-1]
    return (
        f"it calls the MCP tool {end.mcp_tool_name!r} of server {end.mcp_server!r}, which "
        "neither its server declares read-only (readOnlyHint) nor the validation trusts "
        "(trust_read_only), so it cannot be offered as read-only"
    )


def _path_arguments(tool: Tool, get_tool: Callable[[str], Tool]) -> dict[str, str]:
    """The arguments of ``tool`` that name paths inside its folder: a built-in's, under the
    names the call gives them (a wrapping validation's mapping renames them)."""
    chain = _chain(tool, get_tool)
    names = dict(_PATH_ARGUMENTS.get(chain[-1].entrypoint or "", {}))
    # Outermost mapping last: each renames the arguments of the tool it wraps.
    for wrapper in reversed(chain[:-1]):
        mapping = wrapper.argument_mapping if isinstance(wrapper, Validation) else None
        if mapping:
            names = {
                value[1:]: names[key]
                for key, value in mapping.items()
                if key in names and isinstance(value, str) and value[:1] == "$"
            }
    return names


def _checker(schema: dict[str, Any]) -> Validator:
    from jsonschema import exceptions, validators

    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except exceptions.SchemaError as exc:
        raise ConfigError.at(
            "input_schema", f"not a valid JSON Schema: {_cut(exc.message, _ISSUE_LIMIT)}"
        ) from None
    return cls(schema)


def _own_schema(input_schema: dict[str, Any], tool: Tool, takes_artifact: bool) -> dict[str, Any]:
    """The served ``inputSchema`` without what is not the tool's own argument."""
    drop = {slot.name for slot in tool.resource_slots}
    if takes_artifact:
        drop.add("artifact")
    own = dict(input_schema)
    own["properties"] = {k: v for k, v in input_schema["properties"].items() if k not in drop}
    if "required" in own:
        own["required"] = [name for name in own["required"] if name not in drop]
    return own


def served_tool(tool: Tool, get_tool: Callable[[str], Tool]) -> ServedTool:
    """``tool`` as an MCP tool. Raises :class:`ConfigError` if it cannot be called (its
    callable cannot be prepared, its schema is not one), as the loader would report for a
    plan, or if it cannot be offered as read-only (it wraps an MCP tool its catalog record
    does not say only reads)."""
    problem = _read_only_problem(tool, get_tool)
    if problem is not None:
        raise ConfigError(problem)
    slots = {slot.name for slot in tool.resource_slots}
    signature = _root_signature(tool, get_tool)
    parameters = _parameters(signature, slots) if signature is not None else None
    takes_artifact = False
    if signature is not None and parameters is not None:
        takes_artifact = "artifact" in signature.parameters or parameters.varkw
    mapping = tool.argument_mapping if isinstance(tool, Validation) else None
    schema: dict[str, Any] | None
    if mapping:
        # Its arguments are the ones its mapping passes on to the tool it wraps.
        names = sorted({v[1:] for v in mapping.values() if isinstance(v, str) and v[:1] == "$"})
        schema = {
            "type": "object",
            "properties": {n: {} for n in names},
            "required": names,
            "additionalProperties": False,
        }
    elif tool.input_schema:
        schema = tool.input_schema
    elif parameters is not None:
        schema = {"type": "object", "properties": parameters.schemas}
        if parameters.required:
            schema["required"] = list(parameters.required)
        if not parameters.varkw:
            schema["additionalProperties"] = False
    else:
        schema = None
    input_schema = _input_schema(tool, schema, takes_artifact)
    return ServedTool(
        name=mcp_tool_name(tool.name),
        tool=tool,
        input_schema=input_schema,
        output_schema=_result_output_schema(tool),
        takes_artifact=takes_artifact,
        checker=_checker(_own_schema(input_schema, tool, takes_artifact)),
        path_arguments=_path_arguments(tool, get_tool),
    )


def _servable(tool: Tool) -> bool:
    """Validations, and tools that declare they only read (never one that writes)."""
    if isinstance(tool, Validation):
        return True
    return tool.capability.read_only and not tool.capability.writes


# -- calling ---------------------------------------------------------------------------------


class ToolReply(msgspec.Struct, kw_only=True):
    """What a served tool's call returns: the structured content, its text, whether the
    call is an error."""

    structured: dict[str, Any] | None
    text: str
    is_error: bool = False

    @classmethod
    def error(cls, message: str) -> ToolReply:
        return cls(structured=None, text=message, is_error=True)

    def to_wire(self) -> dict[str, Any]:
        """The ``CallToolResult`` as MCP sends it (wire field names)."""
        out: dict[str, Any] = {"content": [{"type": "text", "text": self.text}]}
        if self.structured is not None:
            out["structuredContent"] = self.structured
        if self.is_error:
            out["isError"] = True
        return out


class _ArgumentError(Exception):
    """Arguments a call cannot run with; the message is one line per problem, for the
    client."""


def _one_line(error: ConfigError) -> str:
    return "; ".join(
        _plain(f"{issue.field}: {issue.message}" if issue.field else issue.message)
        for issue in error.issues
    )


def _plain(message: str) -> str:
    """``message`` without pydantic's phrasing (a person reads it, not a developer)."""
    return message.replace("Input should be ", "must be ").replace("input should be ", "must be ")


def _cut(text: str, limit: int = _PROBLEM_LIMIT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def served_root(root: str | os.PathLike[str] | None = None, *, field: str = "root") -> Path:
    """The folder a server serves: ``root`` (default: the working directory), resolved
    (symlinks followed, ``..`` folded). Raises :class:`ConfigError` at ``field`` when it is
    not a folder."""
    given = os.getcwd() if root is None else os.fspath(root)
    try:
        resolved = Path(os.path.realpath(Path(given).expanduser()))
        is_dir = resolved.is_dir()
        exists = is_dir or resolved.exists()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError.at(field, f"cannot use {given!r}: {reason}") from None
    if not is_dir:
        raise ConfigError.at(field, f"{'not a folder' if exists else 'no such folder'}: {given}")
    return resolved


def _inside(root: Path, value: str, argument: str) -> Path:
    """``value`` (relative to ``root``, or absolute) resolved, symlinks followed; raises
    :class:`_ArgumentError` when it leads out of ``root``."""
    if not value.strip() or "\0" in value:
        raise _ArgumentError(f"argument {argument!r}: not a path: {_cut(repr(value), 80)}")
    try:
        resolved = Path(os.path.realpath(root / Path(value).expanduser()))
    except (OSError, ValueError, RuntimeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _ArgumentError(f"argument {argument!r}: cannot use {value!r}: {reason}") from None
    # Invariant: nothing a call names is read outside the root; its existence is not even
    # looked at (a client cannot probe the machine's files by the messages).
    if not resolved.is_relative_to(root):
        raise _ArgumentError(f"argument {argument!r}: {value!r} is outside the served root")
    return resolved


def _shown(path: Path, root: Path) -> str:
    """``path`` as a client names it: relative to the served root."""
    return os.path.relpath(path, root) if path.is_relative_to(root) else path.name


def _resource(slot: ResourceSlot, value: Any, root: Path) -> dict[str, Any]:
    """The resource spec of a slot's argument: a folder (a path inside ``root``, resolved)
    or files (an object)."""
    name = slot.name
    if isinstance(value, str) and slot.kind != "memory":
        folder = _inside(root, value, name)
        try:
            is_dir = folder.is_dir()
            exists = is_dir or folder.exists()
        except OSError as exc:
            raise _ArgumentError(
                f"argument {name!r}: cannot use {value!r}: {exc.strerror or exc}"
            ) from None
        if not is_dir:
            what = "not a folder" if exists else "no such folder"
            raise _ArgumentError(f"argument {name!r}: {what}: {value}")
        # The resolved folder runs, not the name given: a link swapped after the check
        # cannot move the call out of the root.
        return {"kind": "directory", "path": os.fspath(folder)}
    if isinstance(value, Mapping) and slot.kind != "directory":
        files: dict[str, str] = {}
        for key, text in value.items():
            parts = PurePosixPath(key).parts if isinstance(key, str) else ()
            if not isinstance(key, str) or not key or key.startswith("/") or ".." in parts:
                raise _ArgumentError(
                    f"argument {name!r}: {key!r} is not a relative path inside the files"
                )
            if not isinstance(text, str):
                raise _ArgumentError(
                    f"argument {name!r}: the file {key!r} must be text, not {type(text).__name__}"
                )
            files[key] = text
        return {"kind": "memory", "files": files}
    wanted = {
        "directory": "a folder's path (a string)",
        "memory": "files (an object of relative path → text)",
    }.get(slot.kind, "a folder's path (a string) or files (an object of relative path → text)")
    raise _ArgumentError(f"argument {name!r}: must be {wanted}, not {_kind_of(value)}")


def _kind_of(value: Any) -> str:
    names = {bool: "true/false", int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), f"a {type(value).__name__}")


def _schema_problems(served: ServedTool, given: Mapping[str, Any]) -> list[str]:
    """What the tool's own arguments break of its schema, one sentence each."""
    tool = served.tool
    schema = served.checker.schema
    assert isinstance(schema, Mapping)
    known = list(schema.get("properties") or {})
    patterns = list(schema.get("patternProperties") or {})
    unknown = {
        name for name in given if name not in known and not any(_search(p, name) for p in patterns)
    }
    # A required name that an unknown one is a misspelling of is said once, as that.
    meant = {m for name in unknown for m in difflib.get_close_matches(name, known, n=1)}
    missing: set[str] = set()
    problems: list[tuple[str, str]] = []
    for error in served.checker.iter_errors(dict(given)):
        path = tuple(error.absolute_path)
        if error.validator == "additionalProperties" and not path:
            expected = ", ".join(known) if known else "none"
            for name in sorted(unknown):
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                problems.append(
                    (name, f"unknown argument {name!r}{hint}; {tool.name!r} takes: {expected}")
                )
        elif error.validator == "required" and not path:
            required = error.validator_value if isinstance(error.validator_value, list) else []
            missing.update(n for n in required if n not in given and n not in meant)
        else:
            where = ".".join(str(part) for part in path)
            message = _plain(error.message)
            problems.append((where, f"argument {where!r}: {message}" if where else message))
    problems += [
        (name, f"missing argument {name!r} (required by {tool.name!r})") for name in missing
    ]
    return [text for _, text in sorted(problems)]


def _search(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False  # a pattern Python does not read: the schema's check says the rest


def _path_problems(served: ServedTool, given: Mapping[str, Any]) -> list[str]:
    """The arguments naming paths inside the folder that lead out of it."""
    # The built-ins' own judgement of a path that leads out of the project they check.
    from gategraph.validators._common import leads_out, option_values

    problems = []
    for name, shape in served.path_arguments.items():
        value = given.get(name)
        items = [value] if shape == "path" else value if isinstance(value, list) else []
        for item in items:
            if not isinstance(item, str):
                continue  # its schema says what is wrong
            values = option_values(item) if shape == "options" else [item]
            if any(leads_out(v) for v in values if v):
                problems.append(
                    f"argument {name!r}: {_cut(repr(item), 120)} leads outside the folder "
                    "it checks (give a path relative to it, without '..')"
                )
                break
    return problems


def _split(
    served: ServedTool, arguments: Mapping[str, Any], root: Path
) -> tuple[dict[str, dict[str, Any]], Any, dict[str, Any]]:
    """The call's arguments as resources (by slot), the artifact, and the tool's own
    arguments, checked against what the tool advertises; raises :class:`_ArgumentError`
    with every problem, one line each."""
    tool = served.tool
    given = dict(arguments)
    problems: list[str] = []
    resources: dict[str, dict[str, Any]] = {}
    for slot in tool.resource_slots:
        if slot.name in given:
            try:
                resources[slot.name] = _resource(slot, given.pop(slot.name), root)
            except _ArgumentError as exc:
                problems.append(str(exc))
        elif slot.required:
            what = f" ({slot.description.rstrip('.')})" if slot.description else ""
            problems.append(f"missing argument {slot.name!r}{what}")
    artifact = given.pop("artifact", None) if served.takes_artifact else None
    for name in sorted(_INJECTED.intersection(given)):
        problems.append(f"{name!r} is not an argument of {tool.name!r}")
        given.pop(name)
    problems += _schema_problems(served, given)
    problems += _path_problems(served, given)
    if problems:
        raise _ArgumentError("\n".join(_cut(problem) for problem in problems))
    return resources, artifact, given


class _WithoutAttachments:
    """The catalog as the engine sees it for one call: everything but its attachments.

    A call's resources are the call's own folders, named after the slots; the validations
    attached to resources of the same names gate plans, not this call, so they must not run
    along (nor fail it when they cannot be prepared)."""

    __slots__ = ("_catalog",)

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog

    def resolve(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._catalog, name)


async def call_served(
    served: ServedTool,
    arguments: Mapping[str, Any] | None,
    catalog: Catalog,
    *,
    root: Path | None = None,
    default_timeout: float | None = None,
    require_sandbox: bool = False,
) -> ToolReply:
    """Run ``served`` with the client's ``arguments`` through the engine, as a validation
    node of a one-node plan graph; return its reply (never raises for a failed check,
    bad arguments or a tool that cannot be called). Its folders must be inside ``root``
    (see :func:`served_root`; default: the working directory)."""
    from gategraph.runtime._embed._validate import graph_spec, load_spec
    from gategraph.runtime._running._engine import execute_graph

    tool = served.tool
    try:
        resources, artifact, own = _split(served, arguments or {}, root or served_root())
    except _ArgumentError as exc:
        return ToolReply.error(str(exc))
    except ConfigError as exc:  # the working directory is gone
        return ToolReply.error(_one_line(exc))
    target: Any = tool.name
    if not served.is_validation:
        wrapper = next(n for n in _WRAPPER_NAMES if n != tool.name)
        target = {"name": wrapper, "wraps": tool.name, "transform": PASS_THROUGH}
    node: dict[str, Any] = {"validation": target, "arguments": own}
    if resources:
        node["resources"] = list(resources)
    policy: dict[str, Any] = {} if default_timeout is None else {"default_timeout": default_timeout}
    if require_sandbox:
        # Every validation in the kernel sandbox, gategraph's own built-ins too; where the
        # machine cannot sandbox, none runs.
        policy["require_sandbox"] = True
    spec = graph_spec([node], resources, name="mcp-serve", policy=policy, source=served.name)
    try:
        graph = load_spec(spec, catalog, source=served.name)
        run = await execute_graph(
            graph, catalog=cast("Catalog", _WithoutAttachments(catalog)), artifact=artifact
        )
    except ConfigError as exc:
        return ToolReply.error(_one_line(exc))
    except GategraphError as exc:
        return ToolReply.error(_plain(_first_line(exc)))
    if not run.validations:
        reason = next((r.error for r in run.nodes.values() if r.error), None)
        return ToolReply.error(reason or f"{tool.name!r} did not run")
    record = run.validations[0]
    result = record.result
    if served.is_validation:
        structured = {
            "passed": result.passed,
            "message": result.message,
            "data": result.data,
            "enforced_by": record.enforced_by,
        }
        return ToolReply(structured=structured, text=_json(structured))
    if not result.passed:
        # Said of the tool, not of the validation that wraps it for the guard.
        message = result.message.removeprefix(f"wrapped tool {tool.name!r}: ")
        message = message.replace(f"validation {target['name']!r}", f"tool {tool.name!r}")
        return ToolReply.error(message or "the call failed")
    output = {"output": result.data.get("output")}
    return ToolReply(structured=output, text=_json(output))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


# -- plans -----------------------------------------------------------------------------------


def _plan_tools() -> list[dict[str, Any]]:
    """The two plan tools as MCP lists them."""
    return [
        {
            "name": RUN_PLAN,
            "description": "Run a gategraph plan graph file as a plan: Strategize, Execute "
            "(validated), Apply. Nothing is applied unless its validations pass; a plan that "
            "needs a person's decision or approval stops as awaiting_decision or "
            "awaiting_approval (answer it with `gategraph decide` or `gategraph approve`).",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "graph": {
                        "type": "string",
                        "description": "The plan graph file, inside the served root "
                        "(relative to the root, or absolute).",
                    },
                    "resources": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Run on these folders instead of the graph's "
                        "resources: resource name → folder inside the served root.",
                    },
                },
                "required": ["graph"],
                "additionalProperties": False,
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "plan_id": {"type": "string"},
                    "status": {
                        "type": "string",
                        "enum": [s.value for s in PlanStatus],
                    },
                    "message": {"type": "string"},
                    "verdict": {"type": ["object", "null"]},
                },
                "required": ["plan_id", "status", "message", "verdict"],
            },
            "annotations": {
                "readOnlyHint": False,
                "destructiveHint": True,
                "idempotentHint": False,
                "openWorldHint": False,
            },
        },
        {
            "name": PLANS_WAITING,
            "description": "List the plans of the event log that wait: for a person "
            "(status awaiting_decision, an escalation, or awaiting_approval) or for outside "
            "validators to attest them (awaiting_attestation: see validator.ac-pull).",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
            "outputSchema": {
                "type": "object",
                "properties": {
                    "plans": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "plan_id": {"type": "string"},
                                "graph": {"type": "string"},
                                "graph_path": {"type": ["string", "null"]},
                                "status": {"type": "string"},
                                "message": {"type": "string"},
                            },
                            "required": ["plan_id", "graph", "status", "message"],
                        },
                    }
                },
                "required": ["plans"],
            },
            "annotations": {"readOnlyHint": True, "idempotentHint": True},
        },
    ]


def _served_schema(name: str) -> dict[str, Any]:
    """A validator tool's arguments on MCP: those of the tool, but a project root (a call
    works on the server's catalog, never on another folder's)."""
    schema = dict(VALIDATOR_TOOLS[name]["input_schema"])
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "project_root"}
    if name in (AC_PULL, SPAWN):
        # No calling plan to default to: the plan must be named.
        schema["properties"]["task_id"] = {"type": "string", "description": "The plan's id."}
        schema["required"] = [*schema.get("required", []), "task_id"]
    return schema


def _validator_tool_listing() -> list[dict[str, Any]]:
    """The validator tools as MCP lists them."""
    return [
        {
            "name": name,
            "description": config["description"],
            "inputSchema": _served_schema(name),
            "annotations": {
                "readOnlyHint": config.get("capability", {}).get("read_only", False),
                # An attestation (or a spawned validator's) can let a plan reach Apply.
                "destructiveHint": not config.get("capability", {}).get("read_only", False),
                "idempotentHint": name != SPAWN,
                "openWorldHint": False,
            },
        }
        for name, config in VALIDATOR_TOOLS.items()
    ]


async def call_validator_tool(
    name: str, arguments: Mapping[str, Any], catalog: Catalog, log_path: Path | str | None = None
) -> ToolReply:
    """Call validator tool ``name`` on the server's catalog; the seed's ``{ok: false}``
    answers are errors on MCP."""
    import anyio.to_thread
    from gategraph.runtime._definitions._validator_tools import (
        validator_ac_pull,
        validator_attest,
        validator_reject,
    )

    allowed = set(_served_schema(name)["properties"])
    unknown = sorted(set(arguments) - allowed)
    if unknown:
        return ToolReply.error(
            f"{name}: unknown argument {', '.join(unknown)} (it takes {', '.join(sorted(allowed))})"
        )
    # Checked by the tools themselves: anything a client sends gets an {ok: false} answer.
    given: dict[str, Any] = {key: arguments.get(key) for key in allowed}
    call: Callable[[], dict[str, Any]]
    if name == SPAWN:
        from gategraph.runtime._lifecycle._validator_spawn import validator_spawn

        answer = await validator_spawn(
            given["caller"],
            given["task_id"],
            spawn_scope=given["spawn_scope"],
            no_worktree=False if given["no_worktree"] is None else given["no_worktree"],
            catalog=catalog,
            event_log_path=log_path,
        )
        return ToolReply(structured=answer, text=_json(answer), is_error=not answer["ok"])
    if name == AC_PULL:
        call = functools.partial(validator_ac_pull, given["task_id"], evidence=catalog)
    else:
        judge, envelope = (
            (validator_attest, "attestation") if name == ATTEST else (validator_reject, "rejection")
        )
        call = functools.partial(
            judge,
            given["caller"],
            given[envelope],
            credential=given["credential"],
            evidence=catalog,
        )
    answer = await anyio.to_thread.run_sync(call)
    return ToolReply(structured=answer, text=_json(answer), is_error=not answer["ok"])


def plans_waiting(log_path: Path | str) -> list[dict[str, Any]]:
    """The plans of the event log (a file or a database) at ``log_path`` that wait (for a person, or for
    outside validators), oldest first (none when there is no log yet)."""
    from gategraph.runtime._views._plan_views import plan_summaries

    waiting = [s for s in plan_summaries(log_path) if s.status in _WAITING]
    return [
        {
            "plan_id": s.plan_id,
            "graph": s.name,
            "graph_path": s.graph_path,
            "status": s.status,
            "message": s.message,
        }
        for s in sorted(waiting, key=lambda s: s.started_at)
    ]


def _plan_to_run(
    arguments: Mapping[str, Any], catalog: Catalog, root: Path, require_sandbox: bool = False
) -> tuple[PlanGraph, dict[str, Any]]:
    """The plan graph a ``gategraph.run_plan`` call names, and the folders it runs on
    instead of the graph's, all inside ``root``; raises :class:`_ArgumentError`."""
    from gategraph.runtime._definitions._graph import load_graph

    unknown = sorted(set(arguments) - {"graph", "resources"})
    if unknown:
        raise _ArgumentError(f"unknown argument {unknown[0]!r}; it takes: graph, resources")
    graph_file = arguments.get("graph")
    if not isinstance(graph_file, str) or not graph_file.strip():
        raise _ArgumentError("missing argument 'graph' (the plan graph file)")
    path = _inside(root, graph_file, "graph")
    if not path.is_file():
        raise _ArgumentError(f"argument 'graph': no such file: {graph_file}")
    folders = arguments.get("resources") or {}
    if not isinstance(folders, Mapping) or not all(
        isinstance(v, str) and v for v in folders.values()
    ):
        raise _ArgumentError("argument 'resources': an object of resource name → folder")
    # Every folder is judged before the file is even read.
    where = {name: _inside(root, folder, "resources") for name, folder in folders.items()}
    try:
        graph = load_graph(path, catalog=catalog, require_sandbox=require_sandbox)
    except ConfigError as exc:
        raise _ArgumentError(_graph_problem(exc, path, root)) from None
    resources: dict[str, Any] = {}
    for name, folder in where.items():
        if name not in graph.resources:
            raise _ArgumentError(
                f"argument 'resources': {name!r} is not a resource of {graph.name!r}"
            )
        if not folder.is_dir():
            raise _ArgumentError(f"argument 'resources': {name}: no such folder: {folders[name]}")
        resources[name] = graph.resources[name].directory(name, folder)
    for name, spec in graph.resources.items():
        if name in resources or spec.kind != "directory" or spec.path is None:
            continue
        # The graph's own folders too: a plan may apply changes to them.
        if not Path(os.path.realpath(spec.path)).is_relative_to(root):
            raise _ArgumentError(
                f"argument 'graph': the folder of resource {name!r} is outside the served "
                "root (give one inside it in 'resources')"
            )
    return graph, resources


def _graph_problem(error: ConfigError, path: Path, root: Path) -> str:
    """A graph file that does not load, in one short line: the file (relative to the
    root) and its first problem. Never more of the file than a field's name: whatever it
    holds is not echoed back (it need not be a graph at all)."""
    issue = error.issues[0]
    where = _shown(path, root)
    if issue.line is not None:
        where += f":{issue.line}"
        if issue.column is not None:
            where += f":{issue.column}"
    parts = [f"argument 'graph': {where}"]
    # A field path is a name the file chose; a key that is not one is a line of a file
    # that is not a graph, and stays unsaid.
    if issue.field and _FIELD_PATH.fullmatch(issue.field):
        parts.append(issue.field)
    parts.append(_cut(_plain(issue.message), _ISSUE_LIMIT))
    more = len(error.issues) - 1
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return ": ".join(parts) + tail


async def run_plan_file(
    arguments: Mapping[str, Any],
    catalog: Catalog,
    log_path: Path | str,
    *,
    root: Path | None = None,
    require_sandbox: bool = False,
) -> ToolReply:
    """Run the plan graph file ``arguments["graph"]`` with the event log at ``log_path``;
    the reply is its status and verdict. The file and the folders the plan works on must
    be inside ``root`` (see :func:`served_root`; default: the working directory). With
    ``require_sandbox``, as if the graph's policy said ``require_sandbox: true``."""
    from gategraph.runtime._lifecycle._supervisor import run_plan
    from gategraph.runtime._storage._database import open_event_log

    try:
        graph, resources = _plan_to_run(arguments, catalog, root or served_root(), require_sandbox)
        async with open_event_log(log_path) as log:
            outcome = await run_plan(
                graph, catalog=catalog, event_log=log, resources=resources or None
            )
    except _ArgumentError as exc:
        return ToolReply.error(str(exc))
    except ConfigError as exc:
        return ToolReply.error(_cut(_one_line(exc)))
    except GategraphError as exc:
        return ToolReply.error(_plain(_first_line(exc)))
    structured = {
        "plan_id": outcome.plan_id,
        "status": outcome.status.value,
        "message": outcome.message,
        "verdict": outcome.verdict,
    }
    return ToolReply(structured=structured, text=_json(structured))


# -- the server ------------------------------------------------------------------------------


class _Tools:
    """The catalog's servable entries as MCP tools, read afresh from the catalog each time
    (what is registered while the server runs shows up), each built once per version."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        builtins: bool,
        plans: bool,
        warn: Callable[[str], None],
        skills: tuple[str, ...] | None = None,
    ) -> None:
        self.catalog = catalog
        self.builtins = builtins
        self.plans = plans
        self.warn = warn
        self.skills = skills
        self._built: dict[str, tuple[str, ServedTool | None]] = {}
        self._warned: set[str] = set()

    def members(self) -> list[str] | None:
        """With skills given, the names of their tools and validations, read afresh (a
        skill updated while the server runs is served as it is now); otherwise None."""
        if self.skills is None:
            return None
        names: dict[str, None] = {}
        for skill in self.skills:
            try:
                found = self.catalog.get_skill(skill)
            except GategraphError as exc:
                self._tell(f"skill {skill}: {exc}")
                continue
            names.update(dict.fromkeys(found.tools))
        return list(names)

    def _entries(self) -> list[Tool]:
        from gategraph.runtime._data._builtins import builtin_names
        from gategraph.runtime._definitions._plugins import plugin_validations, shipped

        members = self.members()
        if members is not None:
            # A skill names what it serves, built-ins included; a member that cannot be
            # served (it writes, it is gone) is said once on standard error.
            picked: list[Tool] = []
            for name in members:
                try:
                    tool = self.catalog.get(name)
                except GategraphError as exc:
                    self._tell(f"{name}: {exc}")
                    continue
                if _servable(tool):
                    picked.append(tool)
                else:
                    self._tell(f"{name}: it is not read-only (only read-only tools are served)")
            return picked
        entries = {
            tool.name: tool
            for tool in self.catalog.list()
            if _servable(tool) and tool.name not in VALIDATOR_TOOLS  # names reserved
        }
        if self.builtins:
            for name in [*builtin_names(), *(v.name for v in plugin_validations())]:
                if name in VALIDATOR_TOOLS:
                    continue  # served as themselves, on the server's catalog (see _call)
                if name not in entries and not self.catalog.registered(name):
                    found = shipped(name)
                    if found is not None:
                        entries[name] = found
        return [entries[name] for name in sorted(entries)]

    def _fingerprint(self, tool: Tool) -> str:
        # A wrapping validation's schema comes from the tool it wraps: both are the key.
        parts = [tool.model_dump_json()]
        current = tool
        while isinstance(current, Validation) and current.wraps is not None and len(parts) < 16:
            try:
                current = self.catalog.get(current.wraps)
            except GategraphError:
                break
            parts.append(current.model_dump_json())
        return "\n".join(parts)

    def _tell(self, text: str) -> None:
        if text not in self._warned:
            self._warned.add(text)
            self.warn(f"not serving {text}")

    def build(self, tool: Tool) -> ServedTool | None:
        """``tool`` as an MCP tool; None (said once) when it cannot be called, cannot be
        offered as read-only, or has the name of a plan tool."""
        key = self._fingerprint(tool)
        cached = self._built.get(tool.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            served: ServedTool | None = served_tool(tool, self.catalog.get)
        except (ConfigError, GategraphError) as exc:
            served = None
            self._tell(f"{tool.name}: {_one_line(exc) if isinstance(exc, ConfigError) else exc}")
        if served is not None and served.name in PLAN_TOOLS:
            # The plan tools' names are reserved, with --plans or without: a name means
            # one tool, whatever the options.
            served = None
            self._tell(f"{tool.name}: the name is reserved for the plan tool (--plans)")
        self._built[tool.name] = (key, served)
        return served

    def listing(self) -> list[ServedTool]:
        served = [self.build(tool) for tool in self._entries()]
        return [s for s in served if s is not None]

    def find(self, name: str) -> ServedTool | None:
        """The served tool called ``name`` on MCP, or None."""
        if name in PLAN_TOOLS or name in VALIDATOR_TOOLS:
            return None  # reserved (see build; the validator tools are served by name)
        members = self.members()
        if members is not None:
            return next((s for s in self.listing() if s.name == name), None)
        try:
            # The common case, without reading the whole catalog: the catalog's entry of
            # that name, or the built-in one.
            tool = self.catalog.get(name)
        except GategraphError:
            # Perhaps the spelling of a name MCP could not take as it was.
            return next((s for s in self.listing() if s.name == name), None)
        if not _servable(tool) or (not self.builtins and not self.catalog.registered(name)):
            return None
        return self.build(tool)


def create_mcp_server(
    catalog: Catalog,
    *,
    builtins: bool = True,
    plans: bool = False,
    validators: bool = False,
    event_log_path: str | os.PathLike[str] | None = None,
    default_timeout: float | None = None,
    warn: Callable[[str], None] | None = None,
    root: str | os.PathLike[str] | None = None,
    skills: str | Sequence[str] | None = None,
    require_sandbox: bool = False,
) -> Server[Any]:
    """Build an MCP server (the SDK's low-level ``Server``) that serves ``catalog``'s
    validations and read-only tools; with ``builtins``, the built-in validations the
    catalog does not shadow too. With ``plans``, also ``gategraph.run_plan`` and
    ``gategraph.plans_waiting``, over the event log at ``event_log_path`` (a SQLite file or a
    PostgreSQL URL; default: beside the catalog, or in its database). With ``validators``, also the validator tools (``validator.ac-pull``,
    ``validator.attest``, ``validator.reject``, ``spawn.validator``) on ``catalog``: an
    attestation lets a plan that waits for outside validators apply, so they are served
    only when asked for. With ``skills`` (names of the catalog's skills), only their tools
    and validations are served, in place of the whole catalog's (``builtins`` does not
    apply: a skill names the built-ins it wants); :class:`NotFoundError` for a skill the
    catalog does not have. ``warn`` receives one line per entry that is not served.

    Every path a call names must be inside ``root`` (default: the working directory now),
    resolved once, here; a relative path is relative to it. Raises :class:`ConfigError`
    when ``root`` is not a folder.

    Needs the ``mcp`` extra (``pip install 'gategraph[mcp]'``).
    """
    import mcp.types as types
    from gategraph.runtime._storage._database import log_where
    from gategraph.runtime._storage._eventlog import EVENTS_FILE, default_event_log_path
    from mcp.server.lowlevel import Server

    def stderr(message: str) -> None:
        print(f"gategraph mcp serve: {message}", file=sys.stderr, flush=True)

    served_in = served_root(root)
    from gategraph.runtime._definitions._skills import names_of

    chosen = None if skills is None else tuple(dict.fromkeys(names_of(skills)))
    for skill in chosen or ():
        catalog.get_skill(skill)  # an unknown one is refused before anything is served
    tools = _Tools(catalog, builtins=builtins, plans=plans, warn=warn or stderr, skills=chosen)
    log_path: Path | str
    if event_log_path is not None:
        log_path = log_where(event_log_path)
    elif catalog.url is not None:
        log_path = catalog.url  # the plans are in the catalog's database
    elif catalog.path is not None:
        log_path = catalog.path.with_name(EVENTS_FILE)
    else:
        log_path = default_event_log_path()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        listed = [served.describe() for served in tools.listing()]
        if validators:
            listed += _validator_tool_listing()
        if plans:
            listed += _plan_tools()
        return types.ListToolsResult.model_validate({"tools": listed})

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        reply = await _call(params.name, params.arguments)
        return types.CallToolResult.model_validate(reply.to_wire())

    async def _call(name: str, arguments: dict[str, Any] | None) -> ToolReply:
        if plans and name in PLAN_TOOLS:
            if name == RUN_PLAN:
                return await run_plan_file(
                    arguments or {},
                    catalog,
                    log_path,
                    root=served_in,
                    require_sandbox=require_sandbox,
                )
            if arguments:
                return ToolReply.error(f"{PLANS_WAITING} takes no arguments")
            import anyio

            waiting = await anyio.to_thread.run_sync(plans_waiting, log_path)
            listed = {"plans": waiting}
            return ToolReply(structured=listed, text=_json(listed))
        if validators and name in VALIDATOR_TOOLS:
            return await call_validator_tool(name, arguments or {}, catalog, log_path)
        served = tools.find(name)
        if served is None:
            return ToolReply.error(f"Unknown tool: {name}")
        return await call_served(
            served,
            arguments,
            catalog,
            root=served_in,
            default_timeout=default_timeout,
            require_sandbox=require_sandbox,
        )

    return Server(
        "gategraph",
        version=__version__,
        instructions=(
            "gategraph's validations: read-only checks of a folder (or of files, or of an "
            "artifact). Each returns {passed, message, data}; passed: false is a failed "
            "check, not an error."
        ),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


# -- serving ---------------------------------------------------------------------------------


async def serve_stdio(server: Server[Any]) -> None:
    """Serve ``server`` over standard input and output until the client closes them.

    Standard output carries MCP messages only. On file descriptor 1, the SDK sees to that
    (it serves from a copy and points 1 at standard error). The command line has moved
    ``sys.stdout`` off descriptor 1 already, where the SDK would serve it in place and
    anything printed outside a call (a thread a validation left running) would land in
    the middle of a message: there the messages get a copy of the descriptor of their own
    and ``sys.stdout`` is standard error while serving."""
    import anyio
    from mcp.server.stdio import stdio_server

    wire = sys.stdout
    stream = _own_copy(wire)
    if stream is None:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
        return
    sys.stdout = sys.stderr
    try:
        async with stdio_server(stdout=anyio.wrap_file(stream)) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        sys.stdout = wire
        stream.close()


def _own_copy(wire: TextIO) -> TextIO | None:
    """A text stream on a copy of ``wire``'s descriptor, or None when ``wire`` is on
    descriptor 1 (the SDK's case) or on none."""
    try:
        fileno = wire.fileno()
        if fileno == 1:
            return None
        own = os.dup(fileno)
    except (OSError, ValueError, AttributeError):
        return None  # an embedding host's stream: the SDK's way
    wire.flush()
    return open(own, "w", encoding="utf-8", newline="\n", closefd=True)


def parse_address(address: str, *, allow_remote: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) as a host and a port; raises
    :class:`ConfigError` for one that is not, or (without ``allow_remote``) for a host
    other machines could reach."""
    match = re.fullmatch(r"\[([^\]]+)\]:(\d{1,5})|([^:\[\]]+):(\d{1,5})", address.strip())
    if match is None:
        raise ConfigError.at("--http", f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:8765)")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if port > 65535:
        raise ConfigError.at("--http", f"{port} is not a port (0 to 65535)")
    if not allow_remote and not _loopback(host):
        raise ConfigError.at(
            "--http",
            f"{host} is not a loopback address: anyone who can reach it could run the "
            "validations; serve on 127.0.0.1 (or add --allow-remote)",
        )
    return host, port


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost: it may resolve anywhere


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one). Raises :class:`ConfigError`
    when it cannot be had."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError.at("--http", f"cannot resolve {host!r}: {exc.strerror}") from None
    family, kind, proto, _, where = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(where)
        # Listening now: a client that connects before the server accepts waits in the
        # backlog instead of being refused.
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError.at(
            "--http", f"cannot listen on {host}:{port}: {exc.strerror or exc}"
        ) from None
    return sock


async def serve_http(
    server: Server[Any],
    sock: socket.socket,
    *,
    host: str,
    path: str = "/mcp",
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP on the listening socket ``sock`` (see
    :func:`bind`) until interrupted or cancelled; ``ready`` receives the URL first.

    asyncio only: the HTTP server is uvicorn's. Cancelled, it shuts down as on Ctrl-C
    (open requests finish, sessions close) before the cancellation goes on."""
    import anyio
    import uvicorn

    # The SDK turns on DNS-rebinding protection for a loopback host.
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    http = uvicorn.Server(config)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
    if ready is not None:
        ready(f"http://{shown}:{bound[1]}{path}")
    stopped = anyio.Event()

    async def run() -> None:
        try:
            # Only `should_exit` stops it: a cancellation in the middle of uvicorn's
            # shutdown would leave connections and the app's lifespan half closed.
            with anyio.CancelScope(shield=True):
                await http.serve(sockets=[sock])
        finally:
            stopped.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            await stopped.wait()
        finally:
            if not stopped.is_set():
                http.should_exit = True
                with anyio.CancelScope(shield=True):
                    await stopped.wait()
