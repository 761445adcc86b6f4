"""``gategraph mcp add|list|tools|import|remove``: MCP servers and their tools in the catalog.

The client side of the ``gategraph mcp`` group (``serve`` is the other side). A thin layer
over :class:`Catalog` and :mod:`._mcp`; :func:`register` adds the commands to the group.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import click

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from gategraph.runtime._calls._mcp import McpServer, McpToolInfo
    from gategraph.runtime._data._models import Tool

__all__ = ["register"]

# The options of `mcp add`, by the field of McpServer each one sets.
_OPTION_OF: Final = {
    "name": "NAME",
    "command": "--command",
    "args": "--arg",
    "env": "--env",
    "cwd": "--cwd",
    "folder": "--folder",
    "url": "--url",
    "headers": "--header",
    "timeout": "--timeout",
    "description": "--description",
}
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def register(group: click.Group) -> None:
    """Add the client commands to the ``gategraph mcp`` group."""
    for command in (mcp_add, mcp_list, mcp_tools, mcp_import, mcp_remove):
        group.add_command(command)


def _pairs(values: Sequence[str], option: str) -> dict[str, str]:
    from ._common import _fail

    found: dict[str, str] = {}
    for pair in values:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            _fail(f"{option} {pair!r}: expected KEY=VALUE")
        key = key.strip()
        if key in found:
            _fail(f"{option} {key}: given twice")
        found[key] = value
    return found


def _server_error(exc: Any) -> str:
    """A declaration's problems, each named by the option that sets the field (in the
    message too: `env` is written --env)."""
    lines = []
    for issue in exc.issues:
        head, _, rest = issue.field.partition(".")
        option = _OPTION_OF.get(head, head)
        where = f"{option} {rest}" if rest else option
        message = _FIELD_IN_TEXT.sub(
            lambda m: _OPTION_OF.get(m.group(1), m.group(0)), issue.message
        )
        lines.append(f"{where}: {message}" if where else message)
    return "\n".join(lines)


_FIELD_IN_TEXT: Final = re.compile(r"`([a-z_]+)`")


@click.command("add")
@click.argument("name")
@click.argument("command_line", nargs=-1, metavar="[-- COMMAND [ARG]...]")
@click.option("--command", "command", metavar="PROGRAM", help="Run the server over stdio.")
@click.option("--arg", "args", multiple=True, metavar="ARG", help="An argument of --command.")
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="KEY=VALUE",
    help="An environment variable of the server; ${NAME} in VALUE is read when it starts.",
)
@click.option(
    "--cwd",
    type=click.Path(path_type=Path),
    help="The folder the server runs in (default: the one of the plan that starts it).",
)
@click.option(
    "--folder",
    type=click.Path(path_type=Path),
    help="The folder the server was started on, when its folders are fixed (mcp-server-git "
    "--repository DIR): each call starts it where that folder shows the plan's copy.",
)
@click.option("--url", metavar="URL", help="Reach a streamable-HTTP server at this URL.")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="KEY=VALUE",
    help="An HTTP header sent to a --url server; ${NAME} in VALUE is read when it connects.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True, max=86_400),
    help="Seconds to start and to answer each call.",
)
@click.option("--description", default="", help="What the server is, for people.")
@click.option("--update", is_flag=True, help="Replace a server of the same name.")
def mcp_add(
    name: str,
    command_line: tuple[str, ...],
    command: str | None,
    args: tuple[str, ...],
    env: tuple[str, ...],
    cwd: Path | None,
    folder: Path | None,
    url: str | None,
    headers: tuple[str, ...],
    timeout: float | None,
    description: str,
    update: bool,
) -> None:
    """Register MCP server NAME: a command run over stdio (--command, or everything after
    --), or a streamable-HTTP server (--url).

    \b
    gategraph mcp add files --command npx --arg -y --arg @modelcontextprotocol/server-filesystem --arg .
    gategraph mcp add files -- npx -y @modelcontextprotocol/server-filesystem .
    gategraph mcp add search --url https://example.com/mcp --header 'Authorization=Bearer ${TOKEN}'
    """
    from gategraph.runtime._base._exceptions import ConfigError, DuplicateError
    from gategraph.runtime._calls._mcp import McpServer

    from ._common import EXIT_REFUSED, _catalog, _fail

    if command_line:
        if command is not None or args:
            _fail("give the command either after -- or with --command/--arg, not both")
        command, *rest = command_line
        args = tuple(rest)
    config: dict[str, Any] = {"name": name, "description": description}
    if command is not None:
        config["command"] = command
    if args:
        config["args"] = list(args)
    if env:
        config["env"] = _pairs(env, "--env")
    for option, given in (("cwd", cwd), ("folder", folder)):
        if given is not None:
            found = given.absolute()
            if not found.is_dir():
                _fail(f"--{option}: no such directory: {found}")
            config[option] = str(found)
    if url is not None:
        config["url"] = url
    if headers:
        config["headers"] = _pairs(headers, "--header")
    if timeout is not None:
        config["timeout"] = timeout
    try:
        server = McpServer.from_config(config)
    except ConfigError as exc:
        _fail(_server_error(exc))
    try:
        with _catalog(create=True) as catalog:
            existed = _exists(catalog, name)
            catalog.add_server(server, update=update)
    except DuplicateError:
        _fail(
            f"an MCP server named {name!r} exists already (add --update to replace it)",
            EXIT_REFUSED,
        )
    verb = "updated" if existed else "added"
    click.echo(f"{verb} MCP server {name} ({server.transport}: {server.target})")


def _exists(catalog: Any, name: str) -> bool:
    return in_catalog(catalog.get_server, name)


def in_catalog(get: Callable[[str], object], name: str) -> bool:
    """Whether the catalog holds an entry called ``name``, read by ``get`` (a server, a
    skill): one it cannot read is there too, and ``--update`` replaces it."""
    from gategraph.runtime._base._exceptions import CatalogError, NotFoundError

    try:
        get(name)
    except NotFoundError:
        return False
    except CatalogError:
        return True
    return True


@click.command("list")
@_json_option
def mcp_list(as_json: bool) -> None:
    """List the MCP servers in the catalog, with how many catalog tools each serves."""
    from ._common import _catalog, _json_out, _table

    with _catalog(create=False) as catalog:
        servers = catalog.list_servers()
        broken = catalog.unreadable_servers()
        names = sorted([*(s.name for s in servers), *broken])
        users = {name: catalog.server_users(name) for name in names}
    for problem in broken.values():
        click.echo(f"warning: {problem}", err=True)  # the others are still listed
    if as_json:
        by_name: dict[str, dict[str, Any]] = {
            s.name: {**s.as_cli_dict(), "tools": users[s.name]} for s in servers
        }
        by_name.update(
            {n: {"name": n, "unreadable": p, "tools": users[n]} for n, p in broken.items()}
        )
        _json_out([by_name[name] for name in names])
        return
    if not names:
        click.echo("no MCP servers (add one: gategraph mcp add NAME --command ... | --url ...)")
        return
    rows: dict[str, list[str]] = {
        s.name: [
            s.name,
            s.transport,
            str(len(users[s.name])),
            s.target,
            s.description.split("\n")[0],
        ]
        for s in servers
    }
    rows.update(
        {n: [n, "?", str(len(users[n])), "(unreadable: see the warning)", ""] for n in broken}
    )
    _table([rows[name] for name in names], ["NAME", "TRANSPORT", "TOOLS", "TARGET", "DESCRIPTION"])


def _server(name: str) -> McpServer:
    """The catalog's server ``name`` (exit 2 if there is none), with the SDK installed."""
    from gategraph.runtime._base._exceptions import NotFoundError
    from gategraph.runtime._calls._mcp import sdk_problem

    from ._common import _catalog, _fail

    with _catalog(create=False) as catalog:
        try:
            server = catalog.get_server(name)
        except NotFoundError:
            known = ", ".join(s.name for s in catalog.list_servers()) or "none"
            _fail(f"no MCP server named {name!r} in the catalog (it has: {known})")
    problem = sdk_problem()
    if problem is not None:
        _fail(problem)
    return server


def _listed(server: McpServer) -> list[McpToolInfo]:
    from gategraph.runtime._calls._mcp import list_server_tools
    from gategraph.runtime._running._sync import run_loop

    return run_loop(list_server_tools, server)


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "any"
    kind = schema.get("type")
    if kind == "array":
        return f"array of {_type_of(schema.get('items'))}"
    if isinstance(kind, list):
        return " | ".join(str(k) for k in kind)
    if kind is None and "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    if kind is None:
        options = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(options, list):
            return " | ".join(_type_of(option) for option in options)
    return str(kind or "any")


@click.command("tools")
@click.argument("name")
@_json_option
def mcp_tools(name: str, as_json: bool) -> None:
    """Start MCP server NAME and list its tools: arguments (the input schema) and
    annotations (readOnlyHint ...)."""
    from ._common import _json_out

    tools = _listed(_server(name))
    if as_json:
        _json_out([tool.as_dict() for tool in tools])
        return
    if not tools:
        click.echo(f"MCP server {name} has no tools")
        return
    for index, tool in enumerate(tools):
        if index:
            click.echo("")
        kind = (
            "read-only"
            if tool.read_only
            else "destructive"
            if tool.destructive
            else "not declared read-only"
        )
        click.echo(f"{tool.name}  ({kind})")
        if tool.description:
            click.echo(f"  {tool.description.strip().splitlines()[0]}")
        required = tool.input_schema.get("required") or []
        if tool.properties:
            click.echo("  arguments:")
            for argument, schema in tool.properties.items():
                mark = ", required" if argument in required else ""
                click.echo(f"    {argument}: {_type_of(schema)}{mark}")
        if tool.output_schema is not None:
            click.echo("  structured output: yes (outputSchema)")
        if tool.annotations:
            shown = ", ".join(f"{k}={json.dumps(v)}" for k, v in tool.annotations.items())
            click.echo(f"  annotations: {shown}")


def _catalog_name(prefix: str, tool: str) -> str:
    """A catalog name for an MCP tool: ``prefix.tool``, with what names do not allow
    replaced by ``_`` (a part starting with a digit gets a ``_`` in front)."""
    parts = [re.sub(r"[^A-Za-z0-9_-]", "_", part) for part in tool.split(".") if part]
    parts = [part if re.match(r"[A-Za-z_]", part) else f"_{part}" for part in parts]
    return ".".join([prefix, *parts] if prefix else parts) or "_"


@click.command("import")
@click.argument("name")
@click.option(
    "--tool", "tools", multiple=True, metavar="TOOL", help="Import this tool (default: all)."
)
@click.option(
    "--as-validation",
    "validations",
    multiple=True,
    metavar="TOOL",
    help="Import this tool as a validation: it returns {passed, message, data}.",
)
@click.option(
    "--trust-read-only",
    is_flag=True,
    help="Import as validations tools the server does not declare read-only (recorded).",
)
@click.option(
    "--mode",
    type=click.Choice(["required", "informational"]),
    default="required",
    help="The mode of the validations imported.",
)
@click.option(
    "--slot",
    "slots",
    multiple=True,
    metavar="[TOOL:]ARG",
    help="An argument that takes a plan resource (a folder's path, or a path inside it "
    "that the node gives): a resource slot of every imported tool that has it, or of TOOL "
    "only.",
)
@click.option(
    "--disposable-slot",
    "disposable",
    multiple=True,
    metavar="[TOOL:]ARG",
    help="A slot like --slot whose calls each get a throwaway copy of the folder, for a "
    "tool that writes caches while it reads (git).",
)
@click.option(
    "--prefix", help="Catalog names are PREFIX.TOOL (default: the server's name; '' for none)."
)
@click.option("--update", is_flag=True, help="Replace catalog entries of the same names.")
def mcp_import(
    name: str,
    tools: tuple[str, ...],
    validations: tuple[str, ...],
    trust_read_only: bool,
    mode: str,
    slots: tuple[str, ...],
    disposable: tuple[str, ...],
    prefix: str | None,
    update: bool,
) -> None:
    """Register tools of MCP server NAME as catalog tools (and validations), in one step.

    Each gets the tool's description and input schema, and calls it on NAME; a tool its
    server does not declare read-only is registered as one that writes. A validation must
    be declared read-only by the server (readOnlyHint) unless --trust-read-only, and never
    one the server marks destructive (destructiveHint).
    """
    from gategraph.runtime._base._exceptions import ConfigError, DuplicateError, IntegrityError

    from ._common import EXIT_REFUSED, _catalog, _fail

    server = _server(name)
    listed = {tool.name: tool for tool in _listed(server)}
    for option, chosen in (("--tool", tools), ("--as-validation", validations)):
        for tool in chosen:
            if tool not in listed:
                known = ", ".join(sorted(listed)) or "none"
                _fail(
                    f"{option} {tool!r}: MCP server {name!r} has no such tool (its tools: {known})"
                )
    both = sorted(set(tools) & set(validations))
    if both:
        _fail(f"{both[0]!r} is given both as --tool and --as-validation")
    selected = [*tools, *validations] if tools or validations else sorted(listed)
    # Each tool's slots: (argument, disposable), from `ARG` (every tool that has it) or
    # `TOOL:ARG` (that tool's only).
    wanted: dict[str, dict[str, bool]] = {tool: {} for tool in selected}
    for option, specs, throwaway in (
        ("--slot", slots, False),
        ("--disposable-slot", disposable, True),
    ):
        for spec in specs:
            tool_name, _, argument = spec.rpartition(":")
            if tool_name and tool_name not in wanted:
                _fail(f"{option} {spec}: {tool_name!r} is not among the tools imported")
            takers = [
                t
                for t in ([tool_name] if tool_name else selected)
                if argument in listed[t].properties
            ]
            if not takers:
                which = (
                    f"the tool {tool_name!r} takes"
                    if tool_name
                    else "none of the imported tools takes"
                )
                _fail(f"{option} {spec}: {which} no argument {argument!r}")
            for taker in takers:
                wanted[taker][argument] = wanted[taker].get(argument, False) or throwaway
    destructive = [t for t in validations if listed[t].destructive]
    if destructive:
        # A trust that the tool only reads cannot overrule its server saying it destroys.
        _fail(
            f"{destructive[0]!r} is marked destructive by MCP server {name!r} "
            "(destructiveHint): it cannot be a validation, which is always read-only, "
            "even with --trust-read-only",
            EXIT_REFUSED,
        )
    refused = [t for t in validations if not listed[t].read_only and not trust_read_only]
    if refused:
        _fail(
            f"{refused[0]!r} is not declared read-only by MCP server {name!r} (readOnlyHint), "
            "and a validation is always read-only: pass --trust-read-only if you know it only "
            "reads (the trust is recorded in its results)",
            EXIT_REFUSED,
        )
    models: list[Tool] = []
    for tool in selected:
        config = _config(name, listed[tool], prefix if prefix is not None else name, wanted[tool])
        if tool in validations:
            config.update(tool_type="validation", mode=mode)
            del config["capability"]
            if not listed[tool].read_only:
                config["trust_read_only"] = True
        models.append(_model(config))
    names = [model.name for model in models]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        _fail(f"two tools would both be named {twice!r}: import them separately with --prefix")
    try:
        with _catalog(create=True) as catalog:
            existing = [n for n in names if catalog.registered(n)]
            if existing and not update:
                _fail(
                    f"{existing[0]!r} is in the catalog already (add --update to replace it)",
                    EXIT_REFUSED,
                )
            stored = catalog.add_many(models, update=update)
    except (DuplicateError, IntegrityError, ConfigError) as exc:
        _fail(" ".join(str(exc).split()), EXIT_REFUSED)
    click.echo(f"imported {len(stored)} from MCP server {name}:")
    for model in stored:
        trust = " (trusted read-only)" if getattr(model, "trust_read_only", False) else ""
        click.echo(f"  {model.tool_type.value} {model.name} ← {model.mcp_tool_name}{trust}")


def _config(
    server: str, tool: McpToolInfo, prefix: str, slots: Mapping[str, bool]
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": _catalog_name(prefix, tool.name),
        "description": tool.description.strip(),
        "mcp_server": server,
        "mcp_tool_name": tool.name,
        # MCP's defaults: a tool writes unless its server declares it read-only (and not
        # destructive), so a validation cannot wrap it unawares.
        "capability": {"read_only": tool.read_only, "writes": tool.writes},
    }
    if tool.checkable(tool.input_schema):
        config["input_schema"] = tool.input_schema
    if tool.checkable(tool.output_schema):
        config["output_schema"] = tool.output_schema
    if slots:
        config["resource_slots"] = [
            {"name": slot, "disposable": True} if throwaway else slot
            for slot, throwaway in slots.items()
        ]
    if tool.read_only or tool.annotations.get("idempotentHint") is True:
        config["idempotent"] = True
    return config


def _model(config: dict[str, Any]) -> Tool:
    from gategraph.runtime._base._exceptions import ConfigError
    from gategraph.runtime._data._models import tool_from_config

    from ._common import _fail

    try:
        return tool_from_config(config)
    except ConfigError as exc:
        issue = exc.issues[0]
        _fail(f"cannot import {config['mcp_tool_name']!r}: {issue.field}: {issue.message}")


@click.command("remove")
@click.argument("name")
def mcp_remove(name: str) -> None:
    """Remove MCP server NAME from the catalog (refused while catalog tools use it)."""
    from gategraph.runtime._base._exceptions import IntegrityError

    from ._common import EXIT_REFUSED, _catalog, _fail

    with _catalog(create=False) as catalog:
        try:
            catalog.remove_server(name)
        except IntegrityError as exc:
            _fail(str(exc), EXIT_REFUSED)
    click.echo(f"removed MCP server {name}")
