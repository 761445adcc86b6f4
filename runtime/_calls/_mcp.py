"""MCP servers as gategraph tools: declaring a server, its sessions, calling its tools.

A server is declared once, as an :class:`McpServer`: a command run over stdio, or a
streamable-HTTP URL. A plan graph declares servers under ``mcp_servers:``; the catalog
holds them too (:meth:`Catalog.add_server`). A tool with ``source: mcp`` names its server
by ``mcp_server`` and its tool there by ``mcp_tool_name``.

A run opens each server it uses once (:class:`McpSessions`): one session per server, owned
by a task of the holder's task group, started outside the read-only guard, shared by every
concurrent call, and closed when the holder closes. Before any node runs, each session
lists its server's tools: a tool the server does not have, a node whose arguments break
the tool's ``inputSchema`` and a validation over a tool its server does not declare
read-only (used directly, or wrapped) are configuration errors, raised before anything
runs. What a holder finds only later (its server did not start at the first check) fails
the calls instead, as ``misconfigured``: a run under way is never ended by a raise.

A reply becomes the tool's output: its ``structuredContent`` when the tool has an
``outputSchema``, else its content (a text that is JSON is decoded). A reply with
``isError`` is a failed call. A server that does not start, loses its connection or does
not answer in time is unavailable (``data.error = "unavailable"``, an infrastructure fault
the Max-N runtime retries); one whose declaration cannot work (an environment variable it
names is not set) is ``misconfigured``, which no retry changes.

The ``mcp`` SDK (the ``mcp`` extra) is imported only here, and only when a session opens.
"""

from __future__ import annotations

import contextvars
import functools
import ipaddress
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NamedTuple, Self
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from gategraph.runtime._base._exceptions import ConfigError, ConfigIssue
from gategraph.runtime._base._yaml import Document
from gategraph.runtime._data._maxn import BAD_ARGUMENTS, MISCONFIGURED, UNAVAILABLE
from gategraph.runtime._data._models import ToolName, ToolSource, Validation, _Model, explain_issues
from gategraph.runtime._data._results import ResultError, ValidationResult
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from ._call import Outcome, _describe
from ._context import STANDS_FOR
from ._mcp_view import NOT_SHOWN
from ._readonly import unguarded

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Sequence

    from anyio.abc import TaskGroup
    from gategraph.runtime._data._models import Tool

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "UNAVAILABLE",
    "McpCall",
    "McpServer",
    "McpServerRef",
    "McpSessions",
    "McpToolInfo",
    "McpUse",
    "ReadOnlyClaim",
    "list_server_tools",
    "read_only_claim",
    "same_declaration",
    "sdk_problem",
]

DEFAULT_START_TIMEOUT: Final = 30.0
"""Seconds a server may take to start and list its tools when its declaration sets no
``timeout``."""

_ENV_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_REFERENCE: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_STDERR_TAIL: Final = 400
_MAX_PAGES: Final = 1000
_MAX_ISSUES: Final = 20
# What an MCP call is given besides its configured arguments, when the tool's schema names
# it. Not `_call._INJECTED`: that one also has `context`, a Python object (ToolContext)
# that cannot cross to a server, so an MCP tool never gets it and a schema that requires
# it must be given it by the node, like any other argument.
_INJECTED: Final = ("artifact", "inputs")
_SDK_MAJOR: Final = 2
_NEEDS_EXTRA: Final = "pip install 'gategraph[mcp]'"
_log: Final = logging.getLogger("gategraph.mcp")


# -- declaring a server ----------------------------------------------------------------------


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("must not be empty")
    return value


def _kind(value: Any) -> str:
    """How a YAML value reads to the person who wrote it."""
    if value is None:
        return "empty"
    names = {bool: "true/false", int: "a number", float: "a number", dict: "a mapping"}
    return names.get(type(value), "a list" if isinstance(value, list | tuple) else "a text")


def _text_of(value: Any, what: str, *, numbers: bool = True) -> str:
    """``value`` as a text: with ``numbers``, a number is written as itself (``8080``, as
    a command line or an environment would hold it); anything else that is not a text is
    refused in words a YAML writer knows."""
    if isinstance(value, str):
        return value
    if numbers and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    hint = " (quote it: 'true')" if isinstance(value, bool) else ""
    raise ValueError(f"{what + ' ' if what else ''}must be a text, not {_kind(value)}{hint}")


# A host name (letters, digits, '-' and '_' in dot-separated labels; IDN letters too) or
# an IP address: what the HTTP client can connect to, so a typo is refused when the
# declaration is read rather than retried as an unreachable server.
_HOST: Final = re.compile(r"^(?!-)[\w-]{1,63}(?<!-)(?:\.(?!-)[\w-]{1,63}(?<!-))*\.?$")


class McpServer(_Model):
    """An MCP server: a command run over stdio, or a streamable-HTTP URL.

    Give exactly one of ``command`` (with ``args``, ``env`` and ``cwd``) or ``url`` (with
    ``headers``). A value of ``env`` or ``headers`` may name environment variables of the
    process that opens the session, as ``${NAME}``: secrets need not be written down.
    """

    name: ToolName
    """The name tools give as their ``mcp_server`` (the key under ``mcp_servers:``)."""
    description: str = ""
    """What the server is, for people."""
    command: str | None = None
    """The program that runs the server over stdio (``npx``, ``uvx``, a path)."""
    args: tuple[str, ...] = ()
    """Its command-line arguments."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for it, on top of a few safe ones (``PATH``, ``HOME`` ...);
    the rest of gategraph's environment is not passed on."""
    cwd: str | None = None
    """The folder it runs in; a relative path is relative to the graph file's folder."""
    folder: str | None = None
    """The folder a server with fixed folders was started on (``mcp-server-git
    --repository DIR``, or a filesystem server given ``DIR`` that ignores roots), relative
    to the graph file's folder like ``cwd``. Each call then starts the server afresh where
    that folder shows the call's own (the plan's copy), and its path arguments name it:
    such a server judges the change, not the folder as it was."""
    url: str | None = None
    """The endpoint of a streamable-HTTP server (``http://127.0.0.1:8000/mcp``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request (``Authorization: Bearer ${TOKEN}``)."""
    timeout: Annotated[float, Field(gt=0, le=86_400)] | None = None
    """Seconds the server may take to start and list its tools (default 30), and to
    answer each call (default: only the node's own timeout applies)."""

    @field_validator("command", mode="before")
    @classmethod
    def _program(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            raise ValueError("must be the program alone, not a list: put its arguments in `args`")
        return value if value is None else _text_of(value, "", numbers=False)

    @field_validator("url", "cwd", "folder", "description", mode="before")
    @classmethod
    def _a_text(cls, value: Any) -> Any:
        return value if value is None else _text_of(value, "", numbers=False)

    @field_validator("args", mode="before")
    @classmethod
    def _arguments(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(
                f"must be a list of arguments, not a text: write "
                f"[{', '.join(value[:80].split()) or '...'}] (each argument its own item)"
            )
        if not isinstance(value, list | tuple):
            raise ValueError(f"must be a list of arguments, not {_kind(value)}")
        return tuple(_text_of(item, f"argument {i + 1}") for i, item in enumerate(value))

    @field_validator("env", "headers", mode="before")
    @classmethod
    def _pairs(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, Mapping):
            example = "{NAME: value}" if info.field_name == "env" else "{Header-Name: value}"
            raise ValueError(f"must be a mapping {example}, not {_kind(value)}")
        return {
            key: _text_of(item, f"the value of {str(key)[:60]!r}") for key, item in value.items()
        }

    @field_validator("command", "url", "cwd", "folder")
    @classmethod
    def _given(cls, value: str | None) -> str | None:
        return _not_blank(value)

    @field_validator("cwd", "folder")
    @classmethod
    def _absolute(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if os.path.isabs(value):
            return os.path.normpath(value)
        context = info.context
        base = context.get("base_dir") if isinstance(context, Mapping) else None
        return os.path.normpath(os.path.join(base or os.getcwd(), value))

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{name[:60]!r} is not an environment variable name (letters, digits "
                    "and '_', not starting with a digit)"
                )
        return value

    @field_validator("headers")
    @classmethod
    def _header_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name[:60]!r} is not an HTTP header name")
            if "\n" in text or "\r" in text:
                raise ValueError(f"the value of header {name!r} spans lines")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(
                f"{value[:80]!r} has a space or a control character: percent-encode it (%20)"
            )
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{value[:80]!r} is not an HTTP URL: write http://HOST[:PORT]/PATH (or https://...)"
            )
        try:
            parts.port  # noqa: B018 - reading it checks the port
        except ValueError:
            raise ValueError(f"{value[:80]!r} has an invalid port") from None
        if not _valid_host(parts.hostname):
            raise ValueError(
                f"{value[:80]!r} has an invalid host {parts.hostname[:60]!r}: a name of "
                "letters, digits, '-' and dots, or an IP address"
            )
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> Self:
        if self.command is None and self.url is None:
            raise ValueError(
                "say how to reach the server: give `command` (a server run over stdio) or "
                "`url` (a streamable-HTTP server)"
            )
        if self.command is not None and self.url is not None:
            raise ValueError("give either `command` or `url`, not both")
        if self.command is not None and self.headers:
            raise ValueError("`headers` are only for a server reached by `url`")
        if self.url is not None:
            extra = [f"`{f}`" for f in ("args", "env", "cwd", "folder") if getattr(self, f)]
            if extra:
                raise ValueError(
                    f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} only for a "
                    "server run by `command`"
                )
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        """``stdio`` for a server run by ``command``, ``http`` for one reached by ``url``."""
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """The command line or the URL, for display."""
        if self.command is None:
            assert self.url is not None
            return self.url
        return " ".join([self.command, *self.args])

    def as_cli_dict(self) -> dict[str, Any]:
        """The fields set, JSON-compatible, ``name`` first, for display and export."""
        dumped = self.model_dump(mode="json", exclude_defaults=True)
        order = ["name", "description", "command", "args", "env", "cwd", "folder", "url", "headers"]
        out = {key: dumped[key] for key in order if key in dumped}
        out.update({key: value for key, value in dumped.items() if key not in out})
        return out

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | Document,
        *,
        name: str | None = None,
        source: str | None = None,
        base_dir: str | os.PathLike[str] | None = None,
    ) -> McpServer:
        """Build a server from a declaration (a mapping, or a :class:`Document` with
        positions); ``name`` is its key where the declaration does not say it.

        Raises :class:`ConfigError` listing every problem, each naming its field.
        """
        doc = config if isinstance(config, Document) else Document(config, source or "")
        where = doc.source or None
        if not isinstance(doc.data, Mapping):
            raise ConfigError.at(
                "",
                "an MCP server is a mapping of fields: `command` (with `args`, `env`, `cwd`) "
                "or `url` (with `headers`)",
                source=where,
            )
        data = dict(doc.data)
        issues: list[ConfigIssue] = []
        if name is not None:
            given = data.get("name")
            if given is not None and given != name:
                issues.append(doc.issue(["name"], f"must be {name!r}, the server's key"))
            data["name"] = name
        context = {"base_dir": os.fspath(base_dir) if base_dir is not None else None}
        try:
            model = cls.model_validate(data, context=context)
        except ValidationError as exc:
            issues.extend(doc.errors_from(exc).issues)
        except (TypeError, RecursionError) as exc:  # unhashable or absurd input
            issues.append(doc.issue([], f"cannot read the declaration: {exc}"))
        if issues:
            raise ConfigError(_explain(issues), source=where)
        return model


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_HOST.fullmatch(host))
    return True


def same_declaration(one: McpServer, other: McpServer) -> bool:
    """Whether two declarations reach the same server the same way (their descriptions,
    for people, may differ)."""
    return one.model_dump(exclude={"description"}) == other.model_dump(exclude={"description"})


def _explain(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    return explain_issues(issues, list(McpServer.model_fields))


def _expanded(server: McpServer, values: Mapping[str, str], what: str) -> dict[str, str]:
    """``values`` with each ``${NAME}`` replaced by that environment variable."""
    out = {}
    for key, value in values.items():

        def variable(match: re.Match[str], key: str = key) -> str:
            found = os.environ.get(match.group(1))
            if found is None:
                raise _StartError(
                    f"{what} {key!r} names the environment variable {match.group(1)}, "
                    "which is not set"
                )
            return found

        out[key] = _REFERENCE.sub(variable, value)
    return out


class _StartError(Exception):
    """Why a server cannot be started, in words (no exception type in front)."""


# -- what a server offers ----------------------------------------------------------------------


class McpToolInfo:
    """One tool as its server lists it (the wire's field names)."""

    __slots__ = (
        "_validator",
        "annotations",
        "description",
        "input_schema",
        "name",
        "output_schema",
    )

    def __init__(self, wire: Mapping[str, Any]) -> None:
        self.name: str = str(wire.get("name", ""))
        """The tool's name on the server."""
        self.description: str = str(wire.get("description") or "")
        schema = wire.get("inputSchema")
        self.input_schema: dict[str, Any] = dict(schema) if isinstance(schema, Mapping) else {}
        """Its ``inputSchema``."""
        output = wire.get("outputSchema")
        self.output_schema: dict[str, Any] | None = (
            dict(output) if isinstance(output, Mapping) else None
        )
        """Its ``outputSchema``, if it has one."""
        annotations = wire.get("annotations")
        self.annotations: dict[str, Any] = (
            dict(annotations) if isinstance(annotations, Mapping) else {}
        )
        """Its ``annotations`` (``readOnlyHint``, ``destructiveHint`` ...)."""
        self._validator: Any = None

    @property
    def read_only(self) -> bool:
        """Whether its server declares it read-only: ``readOnlyHint: true`` (and not also
        ``destructiveHint: true``: a server that says both is not taken at its word)."""
        return self.annotations.get("readOnlyHint") is True and not self.destructive

    @property
    def destructive(self) -> bool:
        """Whether its server says it may destroy data (``destructiveHint: true``)."""
        return self.annotations.get("destructiveHint") is True

    @property
    def writes(self) -> bool:
        """Whether it may write, by MCP's defaults: a tool is not read-only unless its
        server says so (``readOnlyHint`` defaults to false)."""
        return not self.read_only

    @property
    def properties(self) -> Mapping[str, Any]:
        """The arguments its ``inputSchema`` names."""
        found = self.input_schema.get("properties")
        return found if isinstance(found, Mapping) else {}

    @staticmethod
    def checkable(schema: dict[str, Any] | None) -> bool:
        """Whether ``schema`` is a JSON Schema gategraph can check values against (a
        server's schema that is not is left to the server)."""
        if not schema:
            return False
        from jsonschema import exceptions, validators

        try:
            validators.validator_for(schema).check_schema(schema)
        except (exceptions.SchemaError, TypeError, ValueError, LookupError):
            return False
        return True

    def argument_problem(self, arguments: Mapping[str, Any]) -> str | None:
        """What is wrong with the arguments of one call, by the ``inputSchema``; ``None``
        for arguments that fit (or a schema gategraph cannot read: the server judges)."""
        validator = self._validator
        if validator is None:
            if not self.checkable(self.input_schema):
                self._validator = False
                return None
            from jsonschema import validators

            validator = self._validator = validators.validator_for(self.input_schema)(
                self.input_schema
            )
        if validator is False:
            return None
        from jsonschema import exceptions

        error = exceptions.best_match(validator.iter_errors(dict(arguments)))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path)
        return f"{error.message}" + (f" (at {where})" if where else "")

    def as_dict(self) -> dict[str, Any]:
        """The tool as listed, JSON-compatible (the wire's field names)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description}
        out["inputSchema"] = self.input_schema
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        out["annotations"] = self.annotations
        return out


# -- sessions ----------------------------------------------------------------------------------


class _Connection:
    """One server's session (or why there is none), owned by one task of a holder."""

    __slots__ = (
        "_telling",
        "closed",
        "failure",
        "failure_kind",
        "http_error",
        "junk",
        "ready",
        "roots",
        "roots_answered",
        "roots_asked",
        "roots_given",
        "roots_ignored",
        "server",
        "session",
        "stop",
        "tools",
    )

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.session: Any = None
        self.tools: dict[str, McpToolInfo] = {}
        self.failure: str | None = None
        """Why the server is unavailable; ``None`` while it is up (or starting)."""
        self.failure_kind = UNAVAILABLE
        """The fault kind of ``failure``: ``misconfigured`` when its declaration cannot
        work (no retry changes that), else ``unavailable``."""
        self.http_error: str | None = None
        """The last HTTP error status an HTTP server answered with, and where."""
        self.junk = False
        """Whether the server wrote a line to its stdout that is not an MCP message."""
        self.ready = anyio.Event()
        """Set once the session is up or has failed to start."""
        self.stop = anyio.Event()
        """Set to close the session."""
        self.closed = anyio.Event()
        """Set once the owner task has ended."""
        self.roots: dict[str, int] = {}
        """The folders of the calls under way, each with the number of calls that use it:
        what the server is given when it asks for its roots."""
        self.roots_given: frozenset[str] = frozenset()
        """The roots the server was last given: what it allows now (a folder no call uses
        any more stays there until the next change, which the server asks for)."""
        self.roots_asked = 0
        """How many times the server has asked for its roots: one that never has does not
        use them (its folders are fixed), and is told of no change."""
        self.roots_answered = anyio.Event()
        """Set (and replaced) each time the server has been given its roots."""
        self.roots_ignored = False
        """Whether the server left a change of its roots unasked: it reads them once."""
        self._telling: set[str] = set()
        """Folders the server was told of and has not been given yet."""

    def list_roots(self) -> list[str]:
        """The folders to offer as roots now (a server asks at start, and after each
        change): those of the calls under way."""
        given = sorted(folder for folder, uses in self.roots.items() if uses)
        self.roots_given = frozenset(given)
        self.roots_asked += 1
        answered, self.roots_answered = self.roots_answered, anyio.Event()
        answered.set()
        return given

    @asynccontextmanager
    async def offering(self, folders: Sequence[str]) -> AsyncIterator[bool]:
        """Offer ``folders`` as roots while a call runs in the block; yield whether the
        server was given them for it just now (it may take a moment to apply them)."""
        for folder in folders:
            self.roots[folder] = self.roots.get(folder, 0) + 1
        try:
            yield await self._given(folders)
        finally:
            for folder in folders:
                uses = self.roots.get(folder, 0) - 1
                if uses > 0:
                    self.roots[folder] = uses
                else:
                    self.roots.pop(folder, None)

    async def _given(self, folders: Sequence[str]) -> bool:
        """Tell the server its roots changed, unless it has ``folders`` already, and wait
        until it has asked for them (every call whose folders it lacks waits, not only the
        one that told it)."""
        missing = [folder for folder in folders if folder not in self.roots_given]
        session = self.session
        if not missing or session is None or not self.roots_asked or self.roots_ignored:
            return False
        from mcp import types

        # MCP's roots/list_changed (the deprecated roots capability, which the servers in
        # use still rely on): the server asks again, then applies what it got. Told once
        # per change: calls that find their folders on the way wait for the same answer.
        telling = [folder for folder in missing if folder not in self._telling]
        self._telling.update(telling)
        try:
            with unguarded(), anyio.move_on_after(_ROOTS_WAIT):
                if telling:
                    try:
                        await session.send_notification(types.RootsListChangedNotification())
                    except Exception:
                        return False  # the connection is gone: the call finds out why
                while not self.roots_given.issuperset(missing):
                    await self.roots_answered.wait()
        finally:
            self._telling.difference_update(telling)
        if not self.roots_given.issuperset(missing):
            self.roots_ignored = True  # it reads them once: never waited for again
            return False
        return True

    def fail(self, reason: str, kind: str = UNAVAILABLE) -> str:
        """Record why the server is unavailable (the first reason stays); return it."""
        if self.failure is None:
            self.failure = reason
            self.failure_kind = kind
        self.ready.set()
        return self.failure

    def down(self) -> str | None:
        """Why the server is unavailable now, or ``None`` (it may fail during any await)."""
        return self.failure


_current: Final[contextvars.ContextVar[McpSessions | None]] = contextvars.ContextVar(
    "gategraph_mcp_sessions", default=None
)


class McpServerRef(NamedTuple):
    """A server a run uses, and where it was declared."""

    server: McpServer
    origin: Literal["catalog", "graph"]
    """``catalog`` (``gategraph mcp add``) or ``graph`` (the graph's ``mcp_servers:``)."""


class McpSessions:
    """MCP sessions, at most one per server declaration, open until this holder closes.

    Use it as an async context manager. :func:`execute_graph` opens a holder for its run
    when it is given none; runs inside an open holder (given as ``mcp_sessions``, or run
    within its ``async with``) share its sessions instead, so a whole plan can keep one
    session per server across its rounds. A session that failed or lost its connection
    is opened again by the next run that needs it.

    The first check of a use (a tool of a server, called the same way) is the one that
    raises :class:`ConfigError`. A problem found only at a later one (the server did not
    start the first time, or came back without the tool) fails that use's calls as
    ``misconfigured`` instead: the runs of a plan under way end with their results, not
    with a raise.
    """

    def __init__(self) -> None:
        self._connections: dict[tuple[str, str], _Connection] = {}
        self._group: TaskGroup | None = None
        self._token: contextvars.Token[McpSessions | None] | None = None
        self._checked: set[tuple[str, str, str, bool]] = set()

    @classmethod
    def current(cls) -> McpSessions | None:
        """The open holder whose ``async with`` the caller runs in, if any (a task started
        inside the block that outlives it sees none: that holder is closed)."""
        holder = _current.get()
        return holder if holder is not None and holder._group is not None else None

    async def __aenter__(self) -> Self:
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        self._token = _current.set(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None
        for connection in self._connections.values():
            connection.stop.set()
        group, self._group = self._group, None
        assert group is not None
        # The owner tasks never fail (each records its own failure), so the group has
        # nothing to add: whatever the body raised propagates as itself, not in a group.
        await group.__aexit__(None, None, None)

    async def connect(self, servers: Iterable[McpServer]) -> dict[str, _Connection]:
        """The connection of each server, by name: started now if it is not up."""
        if self._group is None:
            raise RuntimeError(
                "McpSessions is used outside its `async with` (it is not entered yet, or "
                "closed): call it inside the block"
            )
        found: dict[str, _Connection] = {}
        for server in servers:
            key = (server.name, server.model_dump_json())
            connection = self._connections.get(key)
            if connection is None or connection.failure is not None:
                if connection is not None:
                    connection.stop.set()  # a dead session's task ends; its process is reaped
                connection = self._connections[key] = _Connection(server)
                self._group.start_soon(_own, connection, name=f"MCP server {server.name}")
            found[server.name] = connection
        for connection in found.values():
            await connection.ready.wait()
        return found

    async def bind(
        self,
        uses: Sequence[McpUse],
        resolve: Callable[[str], McpServerRef | str | None],
        *,
        source: str | None = None,
    ) -> None:
        """Open the servers ``uses`` name and check each use against its server's tools
        (before anything runs); bind each call to its session.

        ``resolve`` gives the server of a name, or why the name cannot be used (a text),
        or ``None`` for an unknown one. Raises :class:`ConfigError` for an unknown server,
        a tool its server does not have, a validation over a tool (directly, or wrapping
        it) that its server does not declare read-only and that is not trusted, a
        declaration that cannot work, and configured arguments that break a tool's
        ``inputSchema``; a use checked before by this holder fails its calls instead. A
        server that does not start is no configuration error: its calls are unavailable.
        """
        issues: list[ConfigIssue] = []
        servers: dict[str, McpServerRef] = {}
        unknown: set[str] = set()
        for use in uses:
            name = use.call.server
            if name in servers or name in unknown:
                continue
            found = resolve(name)
            if found is None or isinstance(found, str):
                unknown.add(name)  # said once, at its first use
                issues.append(
                    ConfigIssue(
                        found
                        or f"unknown MCP server {name!r}: declare it under `mcp_servers:` in "
                        "the graph, or add it to the catalog (gategraph mcp add)",
                        use.where,
                    )
                )
            else:
                servers[name] = found
        missing = sdk_problem() if servers and not issues else None
        if missing is not None:
            issues.append(ConfigIssue(missing, uses[0].where))
        if issues:
            raise ConfigError(issues, source=source)
        connections = await self.connect(ref.server for ref in servers.values())
        checked: dict[tuple[int, str], list[str]] = {}
        keys = []
        for use in uses:
            call = use.call
            connection = connections[call.server]
            key = (
                call.server,
                connection.server.model_dump_json(),
                call.tool,
                bool(call.validation or use.wrappers),
            )
            keys.append(key)
            problem = call.bind(connection, servers[call.server].origin, use.wrappers)
            if problem is not None:
                if key in self._checked:
                    call.refuse(problem)  # found late: its calls say so, nothing raises
                else:
                    issues.append(ConfigIssue(problem, use.where))
                continue
            if use.arguments is None or call.info is None or key in self._checked:
                continue  # (a later check leaves arguments to each call's own check)
            argument_key = (id(call), _canonical(use.arguments))
            found_problems = checked.get(argument_key)
            if found_problems is None:
                found_problems = checked[argument_key] = call.static_problems(
                    use.arguments, use.skip
                )
            issues.extend(ConfigIssue(message, use.arguments_at) for message in found_problems)
        if issues:
            raise ConfigError(_deduplicated(issues), source=source)
        self._checked.update(keys)


def sdk_problem(needed_for: str = "calling MCP tools") -> str | None:
    """Why the installed ``mcp`` SDK cannot be used, in one line, or ``None`` when it can:
    it is missing, or older than 2.0 (whose client and server API gategraph uses).

    ``needed_for`` starts the sentence (``"gategraph mcp serve"``).
    """
    import importlib.metadata
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        return f"{needed_for} needs the mcp extra: {_NEEDS_EXTRA}"
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return None  # importable without its metadata (vendored): let it try
    major = version.split(".", 1)[0]
    if major.isdigit() and int(major) < _SDK_MAJOR:
        return (
            f"{needed_for} needs mcp {_SDK_MAJOR}.0 or newer (found {version}): "
            f"pip install -U 'gategraph[mcp]'"
        )
    return None


def _deduplicated(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    """Each message once (a fan-out over a missing tool says it once), at most a few."""
    seen: set[tuple[str, str]] = set()
    out: list[ConfigIssue] = []
    hidden = 0
    for issue in issues:
        key = (issue.message, issue.field if "arguments" in issue.field else "")
        if key in seen:
            continue
        seen.add(key)
        if len(out) < _MAX_ISSUES:
            out.append(issue)
        else:
            hidden += 1
    if hidden:
        out.append(ConfigIssue(f"and {hidden} more problem(s) of the same kind"))
    return out


def _canonical(arguments: Mapping[str, Any]) -> str:
    try:
        return json.dumps(arguments, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return repr(arguments)


async def _own(connection: _Connection) -> None:
    """Open one server's session, keep it until asked to stop, then close it.

    Runs as a task of the holder's group: the transport's and the session's own task
    groups are entered and left here, in one task. It never raises for the server's
    failure; it records it on the connection, where the calls find it.
    """
    # The session's reader and writer tasks start here and copy this context: they are
    # the runtime's, never part of a guarded validation call; and what the SDK logs from
    # them is known to be this server's.
    _serving.set(connection)
    with unguarded():
        try:
            await _session(connection)
        except Exception as exc:
            connection.fail(*_lost(connection, exc, started=connection.session is not None))
        except BaseExceptionGroup as group:
            # The transport's failure, grouped with the cancellations it caused inside the
            # SDK's task groups; when nothing cancels this task, it is the server's fault.
            cancelled = anyio.get_cancelled_exc_class()
            leaves = _leaves(group)
            real = [leaf for leaf in leaves if isinstance(leaf, Exception)]
            interrupts = any(not isinstance(leaf, Exception | cancelled) for leaf in leaves)
            if interrupts or not real or anyio.current_effective_deadline() == -math.inf:
                raise
            connection.fail(*_lost(connection, real[0], started=connection.session is not None))
        finally:
            connection.session = None
            connection.fail("the session was closed")
            connection.closed.set()


async def _session(connection: _Connection) -> None:
    from mcp import ClientSession

    server = connection.server
    limit = server.timeout or DEFAULT_START_TIMEOUT
    errlog = _StderrTail() if server.command is not None else None
    if errlog is not None:
        _quiet_stdio_parse_errors()
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + limit) as starting:
            async with AsyncExitStack() as stack:
                read, write = await _transport(stack, connection, errlog)
                session = await stack.enter_async_context(
                    ClientSession(read, write, list_roots_callback=_roots_of(connection))
                )
                await session.initialize()
                tools = await _list_tools(session)
                # Started: from here the holder's life bounds the session, not `limit`.
                starting.deadline = math.inf
                connection.tools = tools
                connection.session = session
                connection.ready.set()
                await connection.stop.wait()
    except _StartError as exc:
        # Its declaration cannot work here: no retry changes that.
        connection.fail(f"MCP server {server.name!r} cannot start: {exc}", MISCONFIGURED)
        return
    except Exception as exc:
        if connection.session is None:
            why, kind = _lost(connection, exc, started=False)
            connection.fail(why + await _stderr_of(errlog), kind)
            return
        raise
    finally:
        if errlog is not None:
            errlog.close()
    if starting.cancelled_caught:
        connection.fail(
            f"MCP server {server.name!r} did not start within {limit:g} s"
            + await _stderr_of(errlog)
        )


def _roots_of(connection: _Connection) -> Any:
    """The session's answer to the server's roots/list: the folders of the calls under
    way, so a server allowed only certain folders (the filesystem server) may read the
    plan's copies of them."""
    from mcp import types

    async def list_roots(context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(
            roots=[
                types.Root.model_validate(
                    {"uri": Path(folder).as_uri(), "name": os.path.basename(folder)}
                )
                for folder in connection.list_roots()
            ]
        )

    return list_roots


_serving: Final[contextvars.ContextVar[_Connection | None]] = contextvars.ContextVar(
    "gategraph_mcp_serving", default=None
)


class _StdoutJunk(logging.Filter):
    """Keeps the SDK's traceback for a stdio server's stdout line that is not an MCP
    message off the user's terminal: the SDK skips the line and goes on, and so does the
    run; one warning per session names the server instead. Only records logged from a
    gategraph session's tasks are touched (``_serving``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        connection = _serving.get()
        if connection is None or not str(record.msg).startswith("Failed to parse JSONRPC"):
            return True
        if not connection.junk:
            connection.junk = True
            _log.warning(
                "MCP server %r wrote a line to its standard output that is not an MCP "
                "message; it is skipped (a stdio server must write only MCP messages there)",
                connection.server.name,
            )
        return False


_JUNK_FILTER: Final = _StdoutJunk()


def _quiet_stdio_parse_errors() -> None:
    # Idempotent: a logger holds a filter once.
    logging.getLogger("mcp.client.stdio").addFilter(_JUNK_FILTER)


class _StderrTail:
    """A stdio server's standard error: its last characters, read from a pipe by a daemon
    thread (a file would grow for as long as a chatty server's session lives). Only a
    server that does not start has them quoted."""

    def __init__(self) -> None:
        import threading

        read_end, write_end = os.pipe()
        self.file = os.fdopen(write_end, "w", encoding="utf-8", errors="replace")
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._done = threading.Event()
        threading.Thread(
            target=self._read, args=(read_end,), name="gategraph MCP stderr", daemon=True
        ).start()

    def _read(self, fd: int) -> None:
        try:
            while data := os.read(fd, 1 << 16):
                with self._lock:
                    self._tail += data
                    del self._tail[: -4 * _STDERR_TAIL]
        except OSError:
            pass  # the pipe is gone: what was read is what there is
        finally:
            os.close(fd)
            self._done.set()

    def close(self) -> None:
        self.file.close()

    async def text(self) -> str:
        """What the server wrote, once it (and this side) closed the pipe, or soon."""
        self.close()
        await anyio.to_thread.run_sync(self._done.wait, 1.0)
        with self._lock:
            return self._tail.decode("utf-8", "replace")


async def _stderr_of(errlog: _StderrTail | None) -> str:
    if errlog is None:
        return ""
    lines = [" ".join(line.split()) for line in (await errlog.text()).splitlines()]
    tail = " | ".join(line for line in lines if line)[-_STDERR_TAIL:]
    return f" (its stderr ends: {tail})" if tail else ""


async def _transport(
    stack: AsyncExitStack, connection: _Connection, errlog: _StderrTail | None
) -> tuple[Any, Any]:
    """Enter the server's transport; return its read and write streams."""
    server = connection.server
    streams: Sequence[Any]
    if server.command is not None:
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=_expanded(server, server.env, "env") or None,
            cwd=server.cwd,
            # A byte that is not UTF-8 is noise on the wire, not the end of the session:
            # its line is skipped like any other that is not an MCP message.
            encoding_error_handler="replace",
        )
        assert errlog is not None
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog.file))
    else:
        assert server.url is not None
        headers = _expanded(server, server.headers, "header") or None
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=headers)

        async def note_error(response: Any) -> None:
            # The SDK turns an error status into "Server returned an error response":
            # the status and the address are what a person needs to fix it.
            if response.status_code >= 400:
                reason = f" {response.reason_phrase}" if response.reason_phrase else ""
                connection.http_error = (
                    f"HTTP {response.status_code}{reason} from {_shown_url(server.url or '')}"
                )

        client.event_hooks = {"request": [], "response": [note_error]}
        client = await stack.enter_async_context(client)
        streams = await stack.enter_async_context(
            streamable_http_client(server.url, http_client=client)
        )
    return streams[0], streams[1]


async def _list_tools(session: Any) -> dict[str, McpToolInfo]:
    """Every tool of the server, following its pages."""
    tools: dict[str, McpToolInfo] = {}
    result = await session.list_tools()
    for _ in range(_MAX_PAGES):
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        for item in wire.get("tools") or ():
            info = McpToolInfo(item)
            tools[info.name] = info
        cursor = wire.get("nextCursor")
        if not cursor:
            break
        from mcp import types

        result = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
    return tools


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _reason(exc: BaseException) -> str:
    """The first real failure inside ``exc`` (a group's leaf), in one line."""
    cancelled = anyio.get_cancelled_exc_class()
    leaves = [leaf for leaf in _leaves(exc) if not isinstance(leaf, cancelled)] or [exc]
    leaf = leaves[0]
    code = getattr(leaf, "code", None)
    if type(leaf).__name__ == "MCPError" and isinstance(code, int):
        text = str(leaf) or type(leaf).__name__
        return "the connection closed" if text == "Connection closed" else text
    return " ".join(_describe(leaf).split())


def _lost(connection: _Connection, exc: BaseException, *, started: bool) -> tuple[str, str]:
    """Why the connection failed, in words, and the fault kind of that."""
    name = connection.server.name
    kind = MISCONFIGURED if _misconfigured(exc) else UNAVAILABLE
    reason = _reason(exc)
    if connection.http_error is not None and connection.http_error not in reason:
        reason += f" ({connection.http_error})"
    if not started:
        return f"MCP server {name!r} did not start: {reason}", kind
    return f"lost the connection to MCP server {name!r}: {reason}", kind


def _misconfigured(exc: BaseException) -> bool:
    """Whether the failure is the declaration's (an address the HTTP client refuses), which
    no retry changes."""
    for leaf in _leaves(exc):
        if type(leaf).__name__ in ("InvalidURL", "UnsupportedProtocol") and type(
            leaf
        ).__module__.split(".")[0] in ("httpx", "httpx2"):
            return True
    return False


def _shown_url(url: str) -> str:
    """``url`` without the user name and password it may carry."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _connection_lost(exc: BaseException) -> bool:
    """Whether a call's failure is the connection's (the server is unavailable), not the
    tool's or the server's answer."""
    for leaf in _leaves(exc):
        if type(leaf).__name__ == "MCPError":
            # CONNECTION_CLOSED and REQUEST_TIMEOUT: the SDK's own, not the server's.
            if getattr(leaf, "code", None) in (-32000, -32001):
                return True
            continue
        if isinstance(
            leaf,
            anyio.ClosedResourceError
            | anyio.BrokenResourceError
            | anyio.EndOfStream
            | OSError
            | TimeoutError,
        ):
            return True
        if type(leaf).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2"):
            return True  # a transport error of the HTTP client (connect, read, protocol)
    return False


async def list_server_tools(server: McpServer) -> list[McpToolInfo]:
    """Start ``server``, list its tools and close it (for the CLI).

    Raises :class:`RuntimeFault` if the server does not start.
    """
    from gategraph.runtime._base._exceptions import RuntimeFault

    async with McpSessions() as sessions:
        connection = (await sessions.connect([server]))[server.name]
        if connection.failure is not None:
            raise RuntimeFault(connection.failure)
        return list(connection.tools.values())


# -- calling -----------------------------------------------------------------------------------


class McpUse(NamedTuple):
    """One place a run calls an MCP tool, checked before the run starts."""

    call: McpCall
    where: str
    """The field that names the tool (``nodes[3].validation``, ``attachment ULID``)."""
    arguments: Mapping[str, Any] | None = None
    """The arguments passed to the tool, when they are known before the run."""
    arguments_at: str = ""
    """Where those arguments are written."""
    skip: frozenset[str] = frozenset()
    """Arguments the run passes itself (resource slots): not checked before it."""
    wrappers: tuple[Tool, ...] = ()
    """The validations that wrap the tool here, the outermost first: a validation relies
    on what the tool does, so the tool must be read-only (seed 000, "Constraints")."""


ReadOnlyClaim = Literal["declared", "trusted", "absent"]
"""Why an MCP tool a validation calls is taken as read-only: its server declares it so
(``readOnlyHint``), a validation trusts it (``trust_read_only``), or nothing says so."""


def read_only_claim(tool: Tool, get_tool: Callable[[str], Tool]) -> ReadOnlyClaim | None:
    """What the configuration says of the read-only claim of validation ``tool``, when
    it calls an MCP tool (itself, or the end of its ``wraps`` chain); ``None`` when it
    calls none (gategraph's own guard covers it).

    ``trusted``: a validation of the chain sets ``trust_read_only``. ``declared``: the
    MCP tool is a validation itself (its registration by ``gategraph mcp import`` needed
    the server's ``readOnlyHint``) or a tool marked ``read_only`` (as the import marks a
    tool the server declares read-only). ``absent``: nothing does (a call is refused
    unless the server declares it when the session opens). Every call checks the
    server's own listing again; this answers without starting the server, for a listing
    of tools (``gategraph mcp serve``). ``get_tool`` looks up a wrapped tool by name;
    ``KeyError`` and the catalog's errors propagate.
    """
    trusted = False
    seen: set[str] = set()
    current = tool
    while True:
        if isinstance(current, Validation) and current.trust_read_only:
            trusted = True
        if current.source is ToolSource.MCP:
            break
        wraps = current.wraps if isinstance(current, Validation) else None
        if wraps is None or current.name in seen:
            return None
        seen.add(current.name)
        current = get_tool(wraps)
    if trusted:
        return "trusted"
    if isinstance(current, Validation) or current.capability.read_only:
        return "declared"
    return "absent"


class McpCall:
    """How a prepared MCP tool is called: its server, its tool, and (for a run) the
    session it is bound to."""

    __slots__ = (
        "connection",
        "disposable",
        "info",
        "label",
        "record",
        "refusal",
        "server",
        "slots",
        "tool",
        "trusted",
        "validation",
    )

    def __init__(self, tool: Tool) -> None:
        assert tool.mcp_server is not None and tool.mcp_tool_name is not None
        self.server = tool.mcp_server
        self.tool = tool.mcp_tool_name
        self.label = f"MCP tool {self.tool!r} of server {self.server!r}"
        # seed 000, "Constraints": a validation is always read-only. An MCP tool used as a
        # validation itself has to be declared so by its server, or trusted explicitly.
        self.validation = isinstance(tool, Validation)
        self.trusted = isinstance(tool, Validation) and tool.trust_read_only
        self.connection: _Connection | None = None
        self.slots = tuple(slot.name for slot in tool.resource_slots)
        self.disposable = frozenset(slot.name for slot in tool.resource_slots if slot.disposable)
        """The slots whose folder each call gets a disposable copy of."""
        self.info: McpToolInfo | None = None
        self.refusal: str | None = None
        """Why this use cannot be called, found after its first check (it fails each call
        as ``misconfigured``)."""
        self.record: dict[str, Any] = {"server": self.server, "tool": self.tool}
        """What the log shows of the call: the server (where it was declared, and its
        command or URL), the tool and, for a validation, why it was taken as read-only."""

    def bind(
        self,
        connection: _Connection,
        origin: Literal["catalog", "graph"] = "graph",
        wrappers: Sequence[Tool] = (),
    ) -> str | None:
        """Bind to ``connection`` (a server declared in ``origin``) for a use wrapped by
        the validations ``wrappers``; return what is wrong with this use, if anything."""
        self.connection = connection
        self.refusal = None
        server = connection.server
        record: dict[str, Any] = {"server": self.server, "tool": self.tool}
        record["declared_in"] = origin
        if server.command is not None:
            record["command"] = server.target
        else:
            record["url"] = _shown_url(server.url or "")
        self.record = record
        if connection.failure is not None:
            if connection.failure_kind == MISCONFIGURED:
                return connection.failure  # its declaration cannot work: no retry helps
            return None  # unavailable: each call says so
        if server.folder is not None and not self.slots:
            # It would read the real folder, where the change is not.
            return (
                f"{self.label}: its server's folder is fixed ({server.folder}), and the tool "
                "has no resource slot to give it the plan's copy: declare the argument that "
                "names the folder in `resource_slots`"
            )
        info = connection.tools.get(self.tool)
        if info is None:
            names = ", ".join(sorted(connection.tools)) or "none"
            return f"MCP server {self.server!r} has no tool {self.tool!r} (its tools: {names})"
        self.info = info
        if not (self.validation or wrappers):
            return None
        trusted = self.trusted or any(
            isinstance(w, Validation) and w.trust_read_only for w in wrappers
        )
        used = (
            f"the validation {wrappers[0].name!r} wraps {self.label}"
            if wrappers
            else f"{self.label} is a validation"
        )
        if info.destructive and trusted:
            # A server that says the tool may destroy data is not overruled by a trust
            # that it only reads.
            return (
                f"{used}, which its server marks destructive (destructiveHint): "
                "`trust_read_only` cannot make it read-only, and a validation is always "
                "read-only"
            )
        if info.read_only:
            record["read_only"] = "declared"
        elif trusted:
            record["read_only"] = "trusted"
        else:
            on = "on the validation" if not wrappers else f"on {wrappers[0].name!r}"
            return (
                f"{used}, and it is not declared read-only by its server (readOnlyHint): "
                f"a validation is always read-only; set `trust_read_only: true` {on} if "
                "you know the tool only reads"
            )
        return None

    def refuse(self, problem: str) -> None:
        """Fail every call of this use with ``problem`` (``misconfigured``)."""
        self.refusal = problem

    def static_problems(self, arguments: Mapping[str, Any], skip: frozenset[str]) -> list[str]:
        """What is wrong with arguments known before the run, by the tool's schema (the
        arguments the run passes itself are left to the call)."""
        info = self.info
        assert info is not None
        schema = info.input_schema
        if not info.checkable(schema):
            return []
        omitted = skip | set(_INJECTED)
        required = schema.get("required")
        if isinstance(required, list) and omitted.intersection(required):
            schema = {**schema, "required": [r for r in required if r not in omitted]}
        from jsonschema import validators

        validator = validators.validator_for(schema)(schema)
        given = {k: v for k, v in arguments.items() if k not in omitted}
        out = []
        for error in validator.iter_errors(given):
            where = "/".join(str(part) for part in error.absolute_path)
            at = f" (at {where})" if where else ""
            out.append(f"breaks the input schema of {self.label}: {error.message}{at}")
        return sorted(out)

    def recorded(self, result: ValidationResult, outcome: Outcome) -> ValidationResult:
        """``result`` of a validation over this call, with gategraph's record of the call
        in ``data["mcp"]``: always gategraph's, whatever the server's reply put there."""
        record: Mapping[str, Any] = self.record
        detail = outcome.detail
        if not outcome.ok and detail:
            ours = detail.get("mcp")  # a failed call's own record (with `is_error` ...)
            if isinstance(ours, Mapping):
                record = ours
        return ValidationResult(result.passed, result.message, {**result.data, "mcp": dict(record)})

    def _failed(self, error: str, reason: str) -> Outcome:
        return Outcome(False, error=error, message=reason, detail={"mcp": self.record})

    async def call(
        self,
        slots: tuple[str, ...],
        arguments: Mapping[str, Any],
        resources: Mapping[str, Any],
        artifact: Any,
        inputs: Mapping[str, Any] | None,
    ) -> Outcome:
        """Call the tool over its session. Never raises for the server's or the tool's
        failure; cancellation propagates."""
        connection = self.connection
        if connection is None:
            return Outcome(
                False,
                error=ResultError.EXCEPTION,
                message=f"{self.label} has no session: MCP tools are called by a run "
                "(execute_graph, run_plan), which opens their servers",
            )
        if self.refusal is not None:
            return self._failed(MISCONFIGURED, self.refusal)
        if connection.failure is not None:
            return self._failed(connection.failure_kind, connection.failure)
        info = self.info
        assert info is not None
        async with AsyncExitStack() as stack:
            wire: dict[str, Any] = dict(arguments)
            folders: list[str] = []
            for slot in slots:
                if slot in resources:
                    value = resources[slot]
                elif len(resources) == 1 and len(slots) == 1:
                    value = next(iter(resources.values()))
                else:
                    continue
                if not isinstance(value, os.PathLike):
                    wire[slot] = _resource_argument(value)
                    continue
                folder = os.fspath(value)  # a sandbox folder: absolute
                real = STANDS_FOR.get().get(folder)
                if slot in self.disposable:
                    try:
                        folder = await stack.enter_async_context(_disposable(folder, real))
                    except (OSError, shutil.Error) as exc:
                        return self._failed(
                            ResultError.EXCEPTION,
                            f"{self.label}: cannot make a disposable copy of {real or folder}: "
                            f"{exc}",
                        )
                path = _inside(folder, slot, arguments.get(slot), {folder: real} if real else {})
                if path.startswith("!"):
                    return self._failed(BAD_ARGUMENTS, f"{self.label}: {path[1:]}")
                wire[slot] = path
                folders.append(folder)
            fixed = connection.server.folder
            if fixed is not None and folders:
                return await self._on_view(connection, folders, wire, artifact, inputs)
            # Before the call's own timeout starts: the server's roots are the runtime's
            # business, with a limit of their own.
            told = await stack.enter_async_context(connection.offering(folders))
            return await self._send(connection, wire, told, artifact, inputs)

    async def _on_view(
        self,
        connection: _Connection,
        folders: list[str],
        wire: dict[str, Any],
        artifact: Any,
        inputs: Mapping[str, Any] | None,
    ) -> Outcome:
        """Call a server whose folder is fixed: started for this call where its folder
        shows the call's (a mount of its own), with the path arguments naming its folder.
        A server that cannot take roots judges the change this way, not the real folder."""
        server = connection.server
        fixed = server.folder
        assert server.command is not None and fixed is not None
        if len(set(folders)) > 1:
            return self._failed(
                MISCONFIGURED,
                f"{self.label}: its server's folder is fixed ({fixed}), and this call gives it "
                f"{len(set(folders))} folders: give the tool one folder slot",
            )
        [folder] = set(folders)
        for slot, value in list(wire.items()):
            if isinstance(value, str) and (value == folder or value.startswith(folder + os.sep)):
                wire[slot] = fixed + value[len(folder) :]
        view = server.model_copy(
            update={
                "command": sys.executable,
                # -P: a module in the server's working directory cannot stand in for it.
                "args": ("-P", "-m", _VIEW, folder, fixed, "--", server.command, *server.args),
            }
        )
        own = _Connection(view)
        own.roots[fixed] = 1  # a server that asks for its roots anyway is given its folder
        async with anyio.create_task_group() as group:
            group.start_soon(_own, own, name=f"MCP server {server.name} on {folder}")
            try:
                await own.ready.wait()
                if own.failure is not None:
                    # The launcher's own refusal (no namespace, no folder, no program) is
                    # the declaration's: the next call would meet it again.
                    kind = MISCONFIGURED if NOT_SHOWN in own.failure else own.failure_kind
                    outcome = self._failed(kind, own.failure)
                else:
                    outcome = await self._send(own, wire, False, artifact, inputs)
            finally:
                own.stop.set()  # the server's process ends with the call
        return outcome

    async def _send(
        self,
        connection: _Connection,
        wire: dict[str, Any],
        told: bool,
        artifact: Any,
        inputs: Mapping[str, Any] | None,
    ) -> Outcome:
        info = self.info
        assert info is not None
        properties = info.properties
        if "artifact" in properties and "artifact" not in wire:
            wire["artifact"] = _json_value(artifact)
        if "inputs" in properties and "inputs" not in wire:
            wire["inputs"] = _json_value(dict(inputs or {}))
        problem = info.argument_problem(wire)
        if problem is not None:
            return self._failed(
                BAD_ARGUMENTS, f"the arguments break the input schema of {self.label}: {problem}"
            )
        session = connection.session
        limit = connection.server.timeout
        # Only this scope's own deadline is the server's timeout: a TimeoutError raised
        # inside the SDK is a lost connection, whether or not a limit is set.
        scope = anyio.CancelScope(
            deadline=math.inf if limit is None else anyio.current_time() + limit
        )
        try:
            # The SDK's work for this call (writing the request, an HTTP request in the
            # caller's context) is the runtime's, never the validation's.
            with unguarded(), scope:
                result = await session.call_tool(self.tool, wire)
                if told and result.is_error and not info.writes:
                    # MCP has the server read its new roots but never say it has applied
                    # them: a refusal right after may predate them. Asked once more, a
                    # call that only reads changes nothing.
                    await anyio.sleep(_ROOTS_SETTLE)
                    result = await session.call_tool(self.tool, wire)
        except Exception as exc:
            down = connection.down()
            if down is not None:
                return self._failed(connection.failure_kind, down)
            if _connection_lost(exc):
                reason, kind = _lost(connection, exc, started=True)
                return self._failed(kind, connection.fail(reason, kind))
            broken = _broken_structured_content(exc)
            if broken is not None:
                return self._failed(
                    ResultError.MALFORMED,
                    f"{self.label} returned a reply that breaks its outputSchema: {broken}",
                )
            reason = _reason(exc)
            if connection.http_error is not None and type(exc).__name__ == "MCPError":
                reason += f" ({connection.http_error})"
            return self._failed(ResultError.EXCEPTION, f"{self.label} failed: {reason}")
        if scope.cancelled_caught:
            assert limit is not None
            return self._failed(
                UNAVAILABLE,
                f"MCP server {self.server!r} did not answer {self.tool!r} within {limit:g} s",
            )
        return self._reply(result)

    def _reply(self, result: Any) -> Outcome:
        info = self.info
        assert info is not None
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        content = wire.get("content") or []
        if wire.get("isError"):
            text = _text(content) or "(no message)"
            # A server refusing access (a folder it does not allow) answers the same when
            # asked again: a person corrects its declaration. Any other error may pass (an
            # upstream hiccup) or be the work's (a file not written yet): retried.
            refused = _REFUSAL.search(text) is not None
            return Outcome(
                False,
                error=MISCONFIGURED if refused else ResultError.EXCEPTION,
                message=f"{self.label} returned an error: {text}",
                detail={"mcp": {**self.record, "is_error": True}},
            )
        if info.output_schema is not None and "structuredContent" in wire:
            return Outcome(True, wire["structuredContent"])
        # A validation's record is added to its result by the run (`recorded`), over
        # whatever the reply says: a server cannot forge it.
        return Outcome(True, _content_value(content))


# The SDK checks structured content against the tool's outputSchema itself, and says so
# with a RuntimeError of these texts: the server's reply breaks its own contract.
_BROKEN_CONTENT: Final = re.compile(
    r"^(Invalid structured content returned by tool |Tool .* has an output schema but "
    r"did not return structured content|Invalid schema for tool )"
)


def _broken_structured_content(exc: BaseException) -> str | None:
    """What the SDK found wrong with a reply's structured content, if that is ``exc``."""
    leaves = _leaves(exc)
    if len(leaves) != 1 or type(leaves[0]) is not RuntimeError:
        return None
    lines = str(leaves[0]).strip().splitlines()
    if not lines or not _BROKEN_CONTENT.match(lines[0]):
        return None
    # The first line says what is wrong; jsonschema's own lines after it quote the schema.
    return " ".join(lines[0].split())[:300]


# How MCP servers say they refuse a path or an operation (the filesystem server's "Access
# denied - path outside allowed directories", mcp-server-git's "is outside the allowed
# repository", an OS's "Permission denied").
_REFUSAL: Final = re.compile(
    r"access denied|permission denied|not permitted|outside (?:the )?allowed|"
    r"not (?:an? )?allowed (?:path|directory|folder|repository)|forbidden|unauthori[sz]ed",
    re.IGNORECASE,
)

# The launcher of a server whose folder is fixed (see McpCall._on_view).
_VIEW: Final = "gategraph.runtime._calls._mcp_view"
# How long a server that was just given new roots may take to apply them (the
# filesystem server checks each folder first) before a refused call is asked again.
_ROOTS_SETTLE: Final = 0.25
# How long a server that was told its roots changed may take to ask for them: one that
# has not asked by then reads them once only (and is not told again).
_ROOTS_WAIT: Final = 5.0


def _inside(folder: str, slot: str, given: Any, stands_for: Mapping[str, str]) -> str:
    """The path an MCP call gets for its folder slot ``slot``: the folder, or the path
    the node gave (``given``) inside it: relative to it, or absolute in the real folder
    the plan's copy stands for (mapped to the copy, which holds the change). A text
    starting with ``!`` says what is wrong instead."""
    if not isinstance(given, str) or not given:
        return folder
    real = stands_for.get(folder)
    if os.path.isabs(given):
        given = os.path.normpath(given)
        for base in (folder, real):
            if base is not None and (
                given == base or given.startswith(base.rstrip(os.sep) + os.sep)
            ):
                given = os.path.relpath(given, base)
                break
        else:
            return (
                f"!the argument {slot!r} ({given}) is outside its resource's folder "
                f"({real or folder}): give a path inside it, or relative to it"
            )
    relative = os.path.normpath(given)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return f"!the argument {slot!r} ({given}) leads out of its resource's folder"
    return folder if relative == os.curdir else os.path.join(folder, relative)


@asynccontextmanager
async def _disposable(folder: str, real: str | None) -> AsyncIterator[str]:
    """A copy of ``folder`` (with the git metadata of ``real``, the real folder it stands
    for, when the copy left it out) that is removed afterwards: for a tool that writes
    caches while it reads, as git refreshes its index, so that nothing it writes reaches
    the plan's copy (which must stay as it was handed over) or the real folder."""
    from ._context import private_folder

    # The runtime's own work, never the validation's: no guard judges it. In this
    # process's scratch parent, which the next gategraph process sweeps after a kill.
    with unguarded():
        scratch = await anyio.to_thread.run_sync(private_folder, "copy")
    try:
        copy = os.path.join(scratch, os.path.basename(folder) or "copy")
        with unguarded():
            await anyio.to_thread.run_sync(_copy_with_git, folder, copy, real)
        yield copy
    finally:
        with unguarded(), anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(
                functools.partial(shutil.rmtree, scratch, ignore_errors=True)
            )


def _copy_with_git(folder: str, copy: str, real: str | None) -> None:
    from ._context import copy_tree, special_files

    copy_tree(Path(folder), Path(copy))
    if real is None:
        return  # a real folder (a run in place): its own `.git` came with it
    # A plan's copy leaves the real `.git` out, so one there is the plan's own writing: its
    # config could have git run a program of the plan's (core.fsmonitor) for the server.
    planted = os.path.join(copy, ".git")
    if os.path.isdir(planted) and not os.path.islink(planted):
        shutil.rmtree(planted)
    elif os.path.lexists(planted):
        os.unlink(planted)
    git = os.path.join(real, ".git")
    if not os.path.isdir(git):
        return  # there is none to give (a worktree's or a submodule's `.git` is a file)
    # The repository's state without its objects, which are read where they are (git's
    # alternates, as `git clone --shared` does): a large history costs no copy, and
    # nothing written in the copy reaches the real repository.
    target = os.path.join(copy, ".git")

    def ignore(where: str, names: list[str]) -> set[str]:
        left = special_files(where, names)
        if where == git:
            # Objects are read where they are; LFS's, submodules' and other worktrees'
            # state is of no use to a copy of this folder.
            left |= {"objects", "lfs", "modules", "worktrees"}
        return left

    shutil.copytree(git, target, symlinks=True, ignore=ignore)
    os.makedirs(os.path.join(target, "objects", "info"))
    with open(os.path.join(target, "objects", "info", "alternates"), "w", encoding="utf-8") as f:
        f.write(os.path.join(git, "objects") + "\n")
    # A repository whose work tree is set elsewhere (core.worktree) would show git the
    # real folder, not the copy with the change.
    if shutil.which("git") is not None:
        config = os.path.join(target, "config")
        subprocess.run(
            ["git", "config", "--file", config, "--unset-all", "core.worktree"],
            capture_output=True,
            check=False,
        )


def _resource_argument(value: Any) -> Any:
    """A resource as an MCP argument: a folder's path, or a memory resource's files."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _json_value(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=_json_fallback))
    except (TypeError, ValueError):
        return repr(value)


def _json_fallback(value: Any) -> Any:
    """How ``json.dumps`` writes what is not JSON itself (a path, a mapping, a struct)."""
    if isinstance(value, Path | os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return dict(value)
    import msgspec

    return msgspec.to_builtins(value)


def _text(content: list[Any]) -> str:
    texts = [item.get("text", "") for item in content if isinstance(item, Mapping)]
    return " ".join(" ".join(str(text).split()) for text in texts if text)


def _decoded(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _content_value(content: list[Any]) -> Any:
    """A reply's content as a value: one text (JSON decoded), a list of several."""
    values = [
        _decoded(item["text"])
        if isinstance(item, Mapping) and item.get("type") == "text" and "text" in item
        else item
        for item in content
    ]
    if not values:
        return None
    return values[0] if len(values) == 1 else values
