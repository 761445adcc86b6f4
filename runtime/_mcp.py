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
read-only are configuration errors, raised before anything runs.

A reply becomes the tool's output: its ``structuredContent`` when the tool has an
``outputSchema``, else its content (a text that is JSON is decoded). A reply with
``isError`` is a failed call. A server that does not start, loses its connection or does
not answer in time is unavailable (``data.error = "unavailable"``, an infrastructure fault
the Max-N runtime retries).

The ``mcp`` SDK (the ``mcp`` extra) is imported only here, and only when a session opens.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import re
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, NamedTuple, Self
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from ._exceptions import ConfigError, ConfigIssue
from ._invoke import Outcome, _describe
from ._maxn import BAD_ARGUMENTS, UNAVAILABLE
from ._models import ToolName, Validation, _Model, explain_issues
from ._readonly import unguarded
from ._results import ResultError
from ._yaml import Document

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from anyio.abc import TaskGroup

    from ._models import Tool

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "UNAVAILABLE",
    "McpCall",
    "McpServer",
    "McpSessions",
    "McpToolInfo",
    "McpUse",
    "list_server_tools",
    "sdk_missing",
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
# What a call may be given besides its configured arguments (as `Prepared` injects them).
_INJECTED: Final = ("artifact", "inputs")


# -- declaring a server ----------------------------------------------------------------------


def _not_blank(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise ValueError("must not be empty")
    return value


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
    url: str | None = None
    """The endpoint of a streamable-HTTP server (``http://127.0.0.1:8000/mcp``)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request (``Authorization: Bearer ${TOKEN}``)."""
    timeout: Annotated[float, Field(gt=0, le=86_400)] | None = None
    """Seconds the server may take to start and list its tools (default 30), and to
    answer each call (default: only the node's own timeout applies)."""

    @field_validator("command", "url", "cwd")
    @classmethod
    def _given(cls, value: str | None) -> str | None:
        return _not_blank(value)

    @field_validator("cwd")
    @classmethod
    def _absolute(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or os.path.isabs(value):
            return value
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
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"{value[:80]!r} is not an HTTP URL: write http://HOST[:PORT]/PATH (or https://...)"
            )
        try:
            parts.port  # noqa: B018 - reading it checks the port
        except ValueError:
            raise ValueError(f"{value[:80]!r} has an invalid port") from None
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
            extra = [f"`{f}`" for f in ("args", "env", "cwd") if getattr(self, f)]
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
        order = ["name", "description", "command", "args", "env", "cwd", "url", "headers"]
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
        """Whether its server declares it read-only (``readOnlyHint: true``)."""
        return self.annotations.get("readOnlyHint") is True

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

    __slots__ = ("closed", "failure", "ready", "server", "session", "stop", "tools")

    def __init__(self, server: McpServer) -> None:
        self.server = server
        self.session: Any = None
        self.tools: dict[str, McpToolInfo] = {}
        self.failure: str | None = None
        """Why the server is unavailable; ``None`` while it is up (or starting)."""
        self.ready = anyio.Event()
        """Set once the session is up or has failed to start."""
        self.stop = anyio.Event()
        """Set to close the session."""
        self.closed = anyio.Event()
        """Set once the owner task has ended."""

    def fail(self, reason: str) -> str:
        """Record why the server is unavailable (the first reason stays); return it."""
        if self.failure is None:
            self.failure = reason
        self.ready.set()
        return self.failure

    def down(self) -> str | None:
        """Why the server is unavailable now, or ``None`` (it may fail during any await)."""
        return self.failure


_current: Final[contextvars.ContextVar[McpSessions | None]] = contextvars.ContextVar(
    "gategraph_mcp_sessions", default=None
)


class McpSessions:
    """MCP sessions, at most one per server declaration, open until this holder closes.

    Use it as an async context manager. :func:`execute_graph` opens a holder for its run
    when it is given none; runs inside an open holder (given as ``mcp_sessions``, or run
    within its ``async with``) share its sessions instead, so a whole plan can keep one
    session per server across its rounds. A session that failed or lost its connection
    is opened again by the next run that needs it.
    """

    def __init__(self) -> None:
        self._connections: dict[tuple[str, str], _Connection] = {}
        self._group: TaskGroup | None = None
        self._token: contextvars.Token[McpSessions | None] | None = None

    @classmethod
    def current(cls) -> McpSessions | None:
        """The holder whose ``async with`` the caller runs in, if any."""
        return _current.get()

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
            raise RuntimeError("McpSessions is used outside its `async with`")
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
        resolve: Callable[[str], McpServer | None],
        *,
        source: str | None = None,
    ) -> None:
        """Open the servers ``uses`` name and check each use against its server's tools
        (before anything runs); bind each call to its session.

        Raises :class:`ConfigError` for an unknown server, a tool its server does not
        have, a validation over a tool its server does not declare read-only (and that is
        not trusted), and configured arguments that break a tool's ``inputSchema``. A
        server that does not start is no configuration error: its calls are unavailable.
        """
        issues: list[ConfigIssue] = []
        servers: dict[str, McpServer] = {}
        unknown: set[str] = set()
        for use in uses:
            name = use.call.server
            if name in servers or name in unknown:
                continue
            server = resolve(name)
            if server is None:
                unknown.add(name)  # said once, at its first use
                issues.append(
                    ConfigIssue(
                        f"unknown MCP server {name!r}: declare it under `mcp_servers:` in "
                        "the graph, or add it to the catalog (gategraph mcp add)",
                        use.where,
                    )
                )
            else:
                servers[name] = server
        missing = sdk_missing() if servers and not issues else None
        if missing is not None:
            issues.append(ConfigIssue(missing, uses[0].where))
        if issues:
            raise ConfigError(issues, source=source)
        connections = await self.connect(servers.values())
        checked: dict[tuple[int, str], list[str]] = {}
        for use in uses:
            connection = connections[use.call.server]
            problem = use.call.bind(connection)
            if problem is not None:
                issues.append(ConfigIssue(problem, use.where))
                continue
            if use.arguments is None or use.call.info is None:
                continue
            key = (id(use.call), _canonical(use.arguments))
            found = checked.get(key)
            if found is None:
                found = checked[key] = use.call.static_problems(use.arguments, use.skip)
            issues.extend(ConfigIssue(message, use.arguments_at) for message in found)
        if issues:
            raise ConfigError(_deduplicated(issues), source=source)


def sdk_missing() -> str | None:
    """Why MCP tools cannot be called here (the SDK is not installed), or ``None``."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        return "calling MCP tools needs the mcp extra: pip install 'gategraph[mcp]'"
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
    # the runtime's, never part of a guarded validation call.
    with unguarded():
        try:
            await _session(connection)
        except Exception as exc:
            connection.fail(_lost(connection, exc, started=connection.session is not None))
        except BaseExceptionGroup as group:
            # The transport's failure, grouped with the cancellations it caused inside the
            # SDK's task groups; when nothing cancels this task, it is the server's fault.
            cancelled = anyio.get_cancelled_exc_class()
            leaves = _leaves(group)
            real = [leaf for leaf in leaves if isinstance(leaf, Exception)]
            interrupts = any(not isinstance(leaf, Exception | cancelled) for leaf in leaves)
            if interrupts or not real or anyio.current_effective_deadline() == -math.inf:
                raise
            connection.fail(_lost(connection, real[0], started=connection.session is not None))
        finally:
            connection.session = None
            connection.fail("the session was closed")
            connection.closed.set()


async def _session(connection: _Connection) -> None:
    from mcp import ClientSession

    server = connection.server
    limit = server.timeout or DEFAULT_START_TIMEOUT
    errlog = _StderrTail() if server.command is not None else None
    try:
        with anyio.CancelScope(deadline=anyio.current_time() + limit) as starting:
            async with AsyncExitStack() as stack:
                read, write = await _transport(stack, server, errlog)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                tools = await _list_tools(session)
                # Started: from here the holder's life bounds the session, not `limit`.
                starting.deadline = math.inf
                connection.tools = tools
                connection.session = session
                connection.ready.set()
                await connection.stop.wait()
    except _StartError as exc:
        connection.fail(f"MCP server {server.name!r} did not start: {exc}")
        return
    except Exception as exc:
        if connection.session is None:
            why = f"MCP server {server.name!r} did not start: {_reason(exc)}"
            connection.fail(why + await _stderr_of(errlog))
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
    stack: AsyncExitStack, server: McpServer, errlog: _StderrTail | None
) -> tuple[Any, Any]:
    """Enter the server's transport; return its read and write streams."""
    streams: Sequence[Any]
    if server.command is not None:
        from mcp import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=_expanded(server, server.env, "env") or None,
            cwd=server.cwd,
        )
        assert errlog is not None
        streams = await stack.enter_async_context(stdio_client(params, errlog=errlog.file))
    else:
        assert server.url is not None
        headers = _expanded(server, server.headers, "header") or None
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
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


def _lost(connection: _Connection, exc: BaseException, *, started: bool) -> str:
    name = connection.server.name
    if not started:
        return f"MCP server {name!r} did not start: {_reason(exc)}"
    return f"lost the connection to MCP server {name!r}: {_reason(exc)}"


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
    from ._exceptions import RuntimeFault

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


class McpCall:
    """How a prepared MCP tool is called: its server, its tool, and (for a run) the
    session it is bound to."""

    __slots__ = ("connection", "info", "label", "record", "server", "tool", "trusted", "validation")

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
        self.info: McpToolInfo | None = None
        self.record: dict[str, Any] = {"server": self.server, "tool": self.tool}

    def bind(self, connection: _Connection) -> str | None:
        """Bind to ``connection``; return what is wrong with this use of it, if anything."""
        self.connection = connection
        if connection.failure is not None:
            return None  # unavailable: each call says so
        info = connection.tools.get(self.tool)
        if info is None:
            names = ", ".join(sorted(connection.tools)) or "none"
            return f"MCP server {self.server!r} has no tool {self.tool!r} (its tools: {names})"
        self.info = info
        if self.validation:
            if info.read_only:
                self.record["read_only"] = "declared"
            elif self.trusted:
                self.record["read_only"] = "trusted"
            else:
                return (
                    f"{self.label} is not declared read-only by its server (readOnlyHint), "
                    "and a validation is always read-only: set `trust_read_only: true` on "
                    "the validation if you know the tool only reads"
                )
        return None

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

    def _unavailable(self, reason: str) -> Outcome:
        return Outcome(False, error=UNAVAILABLE, message=reason, detail={"mcp": self.record})

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
        if connection.failure is not None:
            return self._unavailable(connection.failure)
        info = self.info
        assert info is not None
        wire = dict(arguments)
        for slot in slots:
            if slot in resources:
                wire[slot] = _resource_argument(resources[slot])
            elif len(resources) == 1 and len(slots) == 1:
                wire[slot] = _resource_argument(next(iter(resources.values())))
        properties = info.properties
        if "artifact" in properties and "artifact" not in wire:
            wire["artifact"] = _json_value(artifact)
        if "inputs" in properties and "inputs" not in wire:
            wire["inputs"] = _json_value(dict(inputs or {}))
        problem = info.argument_problem(wire)
        if problem is not None:
            return Outcome(
                False,
                error=BAD_ARGUMENTS,
                message=f"the arguments break the input schema of {self.label}: {problem}",
                detail={"mcp": self.record},
            )
        session = connection.session
        limit = connection.server.timeout
        try:
            # The SDK's work for this call (writing the request, an HTTP request in the
            # caller's context) is the runtime's, never the validation's.
            with unguarded():
                if limit is None:
                    result = await session.call_tool(self.tool, wire)
                else:
                    with anyio.fail_after(limit):
                        result = await session.call_tool(self.tool, wire)
        except TimeoutError:
            return self._unavailable(
                f"MCP server {self.server!r} did not answer {self.tool!r} within {limit:g} s"
            )
        except Exception as exc:
            down = connection.down()
            if down is not None:
                return self._unavailable(down)
            if _connection_lost(exc):
                return self._unavailable(
                    connection.fail(
                        f"lost the connection to MCP server {self.server!r}: {_reason(exc)}"
                    )
                )
            return Outcome(
                False,
                error=ResultError.EXCEPTION,
                message=f"{self.label} failed: {_reason(exc)}",
                detail={"mcp": self.record},
            )
        return self._reply(result, info)

    def _reply(self, result: Any, info: McpToolInfo) -> Outcome:
        wire = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        content = wire.get("content") or []
        if wire.get("isError"):
            text = _text(content) or "(no message)"
            return Outcome(
                False,
                error=ResultError.EXCEPTION,
                message=f"{self.label} returned an error: {text}",
                detail={"mcp": {**self.record, "is_error": True}},
            )
        if info.output_schema is not None and "structuredContent" in wire:
            value = wire["structuredContent"]
        else:
            value = _content_value(content)
        if self.validation:
            value = _with_record(value, self.record)
        return Outcome(True, value)


def _resource_argument(value: Any) -> Any:
    """A resource as an MCP argument: a folder's path, or a memory resource's files."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _json_value(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value, default=_json_default))
    except (TypeError, ValueError):
        return repr(value)


def _json_default(value: Any) -> Any:
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


def _with_record(value: Any, record: Mapping[str, Any]) -> Any:
    """A validation's result with what the log should show of its MCP call (the server,
    the tool, and whether its read-only claim was declared or trusted) in its ``data``."""
    if not isinstance(value, Mapping):
        return value  # not a result: coercion says what is wrong with it
    data = value.get("data")
    if data is None:
        data = {}
    if not isinstance(data, Mapping) or "mcp" in data:
        return value
    return {**value, "data": {**data, "mcp": dict(record)}}
