"""The root command group, the commands that are not a group of their own module, and
``main``: how every error becomes one line and an exit code."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

import click
from gategraph.runtime._running._sync import (
    choose_loop,
    run_loop,
    run_sync,
    use_uvloop,
    uses_uvloop,
)
from gategraph.runtime._version import __version__

from ._common import (
    DEBUG_ENV,
    EXIT_AWAITING,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    CommandError,
    Where,
    _catalog,
    _event_log_at,
    _fail,
    _json_out,
    _print_error,
    _sandbox_home,
    _table,
    _where,
    held_by,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence

    from click.shell_completion import CompletionItem
    from gategraph.runtime._data._models import Attachment, Tool
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._storage._resources import DirectorySandbox

__all__ = ["cli", "main"]


class _Group(click.Group):
    """A click group that turns every expected failure into one-line errors and an exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        sys.exit(self._run(args, prog_name, complete_var, **extra))

    def _run(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        **extra: Any,
    ) -> int:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except BaseExceptionGroup as group:
            # anyio's task groups wrap what a command raises: report what is inside.
            return _report_group(group)
        except Exception as exc:
            return _report(exc)
        except KeyboardInterrupt:
            _print_error("interrupted")
            return 130
        except SystemExit:
            raise  # click's own exits (shell completion) and ours
        except BaseException as exc:
            # A CancelledError or GeneratorExit that escaped user code: still one line.
            return _report(exc)
        return result if isinstance(result, int) else EXIT_OK


def _report(exc: BaseException) -> int:
    """Print ``exc`` as ``error:`` lines and return the exit code it means."""
    from gategraph.runtime._base._exceptions import (
        CatalogError,
        ConfigError,
        GategraphError,
        NotFoundError,
    )

    if isinstance(exc, click.exceptions.Abort):
        if isinstance(exc.__cause__, KeyboardInterrupt):
            # click turns Ctrl-C during a command into Abort; keep it an interrupt.
            _print_error("interrupted")
            return 130
        _print_error("aborted")
        return EXIT_REFUSED
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        # Its message is the whole help page; say what is missing instead.
        where = exc.ctx.command_path if exc.ctx is not None else "gategraph"
        _print_error(f"missing a command (see '{where} --help')")
        return EXIT_USAGE
    if isinstance(exc, click.UsageError):
        where = exc.ctx.command_path if exc.ctx is not None else "gategraph"
        _print_error(f"{exc.format_message()} (see '{where} --help')")
        return EXIT_USAGE
    if isinstance(exc, CommandError):
        _print_error(exc.format_message())
        return exc.code
    if isinstance(exc, click.ClickException):
        _print_error(exc.format_message())
        return exc.exit_code
    if isinstance(exc, (ConfigError, NotFoundError)):
        _print_error(str(exc))
        return EXIT_USAGE
    if isinstance(exc, CatalogError):
        _print_error(str(exc))
        return EXIT_REFUSED
    if isinstance(exc, GategraphError):
        # A refusal or a runtime fault (the plan id is in use, a hook failed ...): one
        # line, never a traceback.
        _print_error(str(exc))
        return EXIT_REFUSED
    if isinstance(exc, OSError):
        # A folder or file the command was given, or the machine's state (permissions, a
        # full disk): the user's to fix, as for a bad argument.
        where = f"{exc.filename}: " if exc.filename is not None else ""
        _print_error(f"{where}{exc.strerror or exc}")
        return EXIT_USAGE
    # A bug of gategraph's own: still one line (and the traceback, when asked for).
    if os.environ.get(DEBUG_ENV):
        import traceback

        traceback.print_exception(exc)
    _print_error(
        f"internal error: {type(exc).__name__}: {_first_line(exc)} "
        f"(a bug in gategraph; set {DEBUG_ENV}=1 for the traceback)"
    )
    return EXIT_REFUSED


def _report_group(group: BaseExceptionGroup[BaseException]) -> int:
    """Report the first exception of an exception group as if it had been raised alone;
    an interrupt anywhere in it wins."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                collect(inner)
        else:
            leaves.append(exc)

    collect(group)
    if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
        _print_error("interrupted")
        return 130
    for leaf in leaves:
        if isinstance(leaf, Exception):
            return _report(leaf)
    raise group  # only exits and cancellations: not ours to turn into a message


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


_LAZY_COMMANDS = {"bench": ("gategraph.benchmarks.cli", "bench")}
"""Commands whose module loads only when they run (or their help is asked for)."""


class _RootGroup(_Group):
    """The ``gategraph`` group: with commands loaded on first use, so ``gategraph --help``
    stays fast."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None and cmd_name in _LAZY_COMMANDS:
            import importlib

            module, name = _LAZY_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), name)
            assert isinstance(command, click.Command)
            return command
        return found


@click.group(cls=_RootGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="gategraph")
@click.option(
    "--catalog",
    "catalog_path",
    type=click.Path(path_type=Path),
    envvar="GATEGRAPH_CATALOG",
    help="The catalog file. Default: $GATEGRAPH_HOME/gategraph.db, else ./.gategraph/gategraph.db.",
)
@click.option(
    "--db",
    "database",
    metavar="URL",
    help="Keep plans, the catalog and round inputs in this PostgreSQL database "
    "(postgresql://USER@HOST:PORT/DATABASE), shared by every host that reaches it. "
    "Default: $GATEGRAPH_DATABASE, else database: in config.yaml in gategraph's folder, "
    "else SQLite files there.",
)
@click.pass_context
def cli(ctx: click.Context, catalog_path: Path | None, database: str | None) -> None:
    """Run AI-agent plans as actor graphs; nothing is applied until its validations pass."""
    ctx.obj = Where(catalog_path, database)
    if ctx.invoked_subcommand in _PROBING:
        from gategraph.runtime._base._kernel import probe_ahead

        probe_ahead()  # where the sandbox can run is known by the time a graph is loaded


# The commands that load a graph, and so ask where its validations can run.
_PROBING: Final = frozenset({"check", "execute", "run", "resume", "decide", "approve", "demo"})


def _sweep_scratch() -> None:
    """Remove what worker processes killed at their timeout left in the temporary folder
    (their scratch), now rather than at the next run."""
    from gategraph.runtime._calls._context import sweep

    sweep()


@contextmanager
def _stdout_for_json(as_json: bool) -> Iterator[None]:
    """With --json, standard output carries the JSON and nothing else: while user code runs,
    what reaches ``sys.stdout`` anyway (a thread a validation started, code that swapped the
    stream) goes to standard error, and the stream is put back before the JSON is printed."""
    if not as_json:
        yield
        return
    saved = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved


def _load_model(config: Path, *, validation: bool) -> tuple[Tool, Any]:
    from gategraph.runtime._base._yaml import read_document
    from gategraph.runtime._data._models import Validation, tool_from_config

    doc = read_document(config)
    model = Validation.from_config(doc) if validation else tool_from_config(doc)
    return model, doc


def _add(config: Path, update: bool, *, validation: bool) -> None:
    from gategraph.runtime._base._exceptions import DuplicateError, IntegrityError, NotFoundError
    from gategraph.runtime._data._models import Validation

    # Parse and check the whole file before the catalog is touched: nothing half-written.
    model, doc = _load_model(config, validation=validation)
    if isinstance(model, Validation) and model.wraps is not None:
        # Check before creating the catalog file: an unknown wrapped tool writes nothing.
        with _catalog(create=False) as catalog:
            if model.wraps not in catalog:
                raise doc.error(["wraps"], f"no tool named {model.wraps!r} in the catalog")
    try:
        with _catalog(create=True) as catalog:
            existed = catalog.registered(model.name)
            stored = catalog.add(model, update=update)
    except NotFoundError as exc:
        if isinstance(model, Validation) and model.wraps == exc.name:
            raise doc.error(["wraps"], f"no tool named {exc.name!r} in the catalog") from None
        raise
    except DuplicateError:
        kind = "validation" if isinstance(model, Validation) else "tool"
        _fail(
            f"{doc.source}: a {kind} named {model.name!r} exists already (add --update to "
            "replace it)",
            EXIT_REFUSED,
        )
    except IntegrityError as exc:
        _fail(str(doc.error(_integrity_field(str(exc)), str(exc))), EXIT_REFUSED)
    verb = "updated" if existed else "added"
    click.echo(f"{verb} {stored.tool_type.value} {stored.name}")


def _integrity_field(message: str) -> list[str]:
    # The catalog's messages (see Catalog.add); names cannot contain spaces or ';', so a
    # name like "model-check" cannot be mistaken for one of these phrases.
    if message.startswith("the mode of "):
        return ["mode"]
    if "; it cannot become a " in message:
        return ["tool_type"]
    if "it cannot be made to write" in message:
        return ["capability", "writes"]
    if " cannot wrap " in message:
        return ["wraps"]
    return ["name"]


_config_option = click.option(
    "--config",
    "config",
    required=True,
    type=click.Path(path_type=Path, dir_okay=True),
    help="A YAML or JSON file with the fields of the tool or validation.",
)
_update_option = click.option(
    "--update", is_flag=True, help="Replace an existing entry of the same name."
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _complete_plan_id(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Shell completion of a PLAN_ID: the plans in the event log, newest first."""
    from click.shell_completion import CompletionItem
    from gategraph.runtime._storage._database import configured_database, log_at, plans_at

    # While completing, the root's callback has not run: its options are only in its params.
    params = ctx.find_root().params
    try:
        database = configured_database(params.get("database"))
        plans = plans_at(log_at(database, params.get("catalog_path")))
    except Exception:
        # A completion prints candidates or nothing: an error here would garble the shell.
        return []
    return [CompletionItem(p) for p in reversed(plans) if p.startswith(incomplete)]


# -- gategraph tool ---------------------------------------------------------------------------


@cli.group()
def tool() -> None:
    """Manage tools and validations (they share one namespace)."""


@tool.command("add")
@_config_option
@_update_option
def tool_add(config: Path, update: bool) -> None:
    """Register a tool (or a validation, if the file says tool_type: validation)."""
    _add(config, update, validation=False)


_FLAKES_SHOWN = 5
"""How many of a validation's flakes `tool show` lists, the most recent first."""


def _validation_flakes(tool: Tool, counts: dict[str, int]) -> int | None:
    """How many times ``tool`` was found flaky; None for a tool (only validations can be)."""
    from gategraph.runtime._data._models import ToolType

    return counts.get(tool.name, 0) if tool.tool_type is ToolType.VALIDATION else None


def _with_flakes(data: dict[str, Any], count: int | None) -> dict[str, Any]:
    """``data`` with its ``flakes`` count; left out at 0, as as_cli_dict leaves out defaults."""
    return {**data, "flakes": count} if count else data


def _access(tool: Tool) -> str:
    """What a listed tool may do to the resources it is given. A validation only reads
    (enforced: the guard, the sandbox); a tool says what it does in its capability."""
    if tool.capability.read_only:
        # A validation over an MCP tool whose server is trusted to only read: nothing
        # here holds it to that.
        return "read-only (trusted)" if getattr(tool, "trust_read_only", False) else "read-only"
    return "writes" if tool.capability.writes else "may write"


def _list_tools(type_: str | None, as_json: bool) -> None:
    from gategraph.runtime._data._builtins import builtin, builtin_names
    from gategraph.runtime._definitions._plugins import plugin_problems, plugin_validations

    with _catalog(create=False) as catalog:
        tools = catalog.list(type_)
        counts = catalog.flake_counts() if type_ != "tool" else {}
        # Every name the catalog holds, of either type: it shadows a built-in's or a
        # plugin's of that name, whichever type is listed.
        registered = set(catalog.names())
    flakes = {t.name: _validation_flakes(t, counts) for t in tools}
    # What is usable by name without registering: the built-ins the catalog does not
    # override, and installed plugins' validations.
    builtins = [
        found
        for name in builtin_names()
        if name not in registered
        and (found := builtin(name)) is not None
        and type_ in (None, found.tool_type.value)
    ]
    plugged = (
        [v for v in plugin_validations() if v.name not in registered] if type_ != "tool" else []
    )
    problems = plugin_problems() if type_ != "tool" else []
    if as_json:
        # The same entries the text lists, each saying where it comes from.
        listed = [(t, "catalog") for t in tools]
        listed += [(t, "builtin") for t in builtins] + [(v, "plugin") for v in plugged]
        _json_out(
            [
                _with_flakes(
                    {**t.as_cli_dict(), "origin": origin, "access": _access(t)},
                    _validation_flakes(t, counts),
                )
                for t, origin in listed
            ]
        )
        for problem in problems:
            click.echo(f"plugin left out: {problem}", err=True)
        return
    # Flaky validations the table cannot show: a graph's own, or a built-in used by name.
    elsewhere = [f"{name} ({count})" for name, count in counts.items() if flakes.get(name) is None]
    elsewhere_line = (
        "flaky validations not registered here: " + ", ".join(elsewhere) if elsewhere else ""
    )
    builtin_lines = []
    for kind in ("validation", "tool"):
        # Validations only read; a built-in tool says what it may do.
        names = [
            t.name if kind == "validation" else f"{t.name} ({_access(t)})"
            for t in builtins
            if t.tool_type.value == kind
        ]
        if names:
            builtin_lines.append(
                f"built-in {kind}s, usable by name without registering: " + ", ".join(names)
            )
    if plugged:
        builtin_lines.append(
            "plugin validations, usable by name (run sandboxed): "
            + ", ".join(f"{v.name} ({v.plugin})" for v in plugged)
        )
    builtin_lines += [f"plugin left out: {problem}" for problem in problems]
    if not tools:
        click.echo("no validations" if type_ == "validation" else "no tools")
        for line in (*builtin_lines, elsewhere_line):
            if line:
                click.echo(line)
        return
    # The FLAKES column only once a listed validation has been flaky: until then the table
    # is the one it always was.
    with_flakes = any(flakes.values())
    rows = []
    for t in tools:
        mode = getattr(t, "mode", None)
        count = flakes[t.name]
        rows.append(
            [
                t.name,
                t.tool_type.value,
                mode.value if mode is not None else "-",
                _access(t),
                t.source.value,
                *([str(count) if count is not None else "-"] if with_flakes else []),
                t.description.splitlines()[0] if t.description else "",
            ]
        )
    columns = ["NAME", "TYPE", "MODE", "ACCESS", "SOURCE", *(["FLAKES"] if with_flakes else [])]
    _table(rows, [*columns, "DESCRIPTION"])
    for line in (*builtin_lines, elsewhere_line):
        if line:
            click.echo(line)


@tool.command("list")
@click.option(
    "--type",
    "type_",
    type=click.Choice(["tool", "validation"]),
    help="Only tools or only validations.",
)
@_json_option
def tool_list(type_: str | None, as_json: bool) -> None:
    """List tools and validations."""
    _list_tools(type_, as_json)


@tool.command("show")
@click.argument("name")
@_json_option
def tool_show(name: str, as_json: bool) -> None:
    """Show one tool or validation, with what a wrapped validation inherits, the skills
    that list it, and how often a validation was flaky."""
    import msgspec
    import yaml

    with _catalog(create=False) as catalog:
        found = catalog.get(name)
        count = _validation_flakes(found, {name: catalog.flakes(name)})
        records = catalog.flake_records(name, limit=_FLAKES_SHOWN) if count else []
        skills = catalog.skills_with(name)
    data = _with_flakes(found.as_cli_dict(), count)
    if skills:
        data["skills"] = skills
    if records:
        # The text below is YAML of these same fields.
        data["flake_records"] = msgspec.to_builtins(records)
    if as_json:
        _json_out(data)
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip())


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    if not _stdin_is_interactive():
        _fail(
            "refusing without confirmation: standard input is not a terminal (pass --yes)",
            EXIT_REFUSED,
        )
    if not click.confirm(question, default=False):
        _fail("not confirmed; nothing changed", EXIT_REFUSED)


def _stdin_is_interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


_yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


@tool.command("remove")
@click.argument("name")
@click.option(
    "--force",
    is_flag=True,
    help="Also detach the validation's attachments and take it out of skills.",
)
@_yes_option
def tool_remove(name: str, force: bool, yes: bool) -> None:
    """Remove a tool or validation (needed to change a validation's mode)."""
    from gategraph.runtime._base._exceptions import CatalogError, NotFoundError

    with _catalog(create=False) as catalog:
        try:
            kind = catalog.get(name).tool_type.value
        except NotFoundError:
            raise
        except CatalogError:
            if not catalog.registered(name):
                raise
            kind = "unreadable entry"  # removing it is how it is repaired
        _confirm(f"Remove {kind} {name}?", yes)
        skills = catalog.skills_with(name)
        catalog.remove(name, force=force)
        left = {*(skill.name for skill in catalog.list_skills()), *catalog.unreadable_skills()}
    click.echo(f"removed {kind} {name}")
    if skills:
        # Only with --force: said, since the skills changed too.
        emptied = [skill for skill in skills if skill not in left]
        kept = [skill for skill in skills if skill in left]
        if kept:
            click.echo(f"taken out of the skill(s) {', '.join(kept)}")
        if emptied:
            click.echo(f"removed the skill(s) {', '.join(emptied)}, which listed nothing else")


# -- gategraph validation ---------------------------------------------------------------------


@cli.group()
def validation() -> None:
    """Manage validations and where they are attached."""


@validation.command("add")
@_config_option
@_update_option
def validation_add(config: Path, update: bool) -> None:
    """Register a validation from a YAML or JSON file (the fields `tool show` prints)."""
    _add(config, update, validation=True)


@validation.command("list")
@_json_option
def validation_list(as_json: bool) -> None:
    """List validations (the same as `tool list --type validation`)."""
    _list_tools("validation", as_json)


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not JSON")


def _parse_args(pairs: Sequence[str]) -> dict[str, Any]:
    import math
    import re

    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", key):
            _fail(f"--arg {pair!r}: expected KEY=VALUE with KEY a name")
        if key in arguments:
            _fail(f"--arg {key}: given twice")
        try:
            # NaN and Infinity are not JSON: they stay text, as does a number too large
            # for a float (1e400 would read as infinity).
            value = json.loads(raw, parse_constant=_not_json)
            if isinstance(value, float) and not math.isfinite(value):
                _not_json(raw)
            arguments[key] = value
        except ValueError:
            arguments[key] = raw
    return arguments


@validation.command("attach")
@click.option("--project", help="Attach for this project only.")
@click.option("--plan", help="Attach for this plan only.")
@click.option(
    "--arg",
    "args",
    multiple=True,
    metavar="KEY=VALUE",
    help="An argument for the validation; VALUE is read as JSON when it parses, else as text.",
)
@click.argument("resource")
@click.argument("validation_name", metavar="VALIDATION")
def validation_attach(
    project: str | None,
    plan: str | None,
    args: tuple[str, ...],
    resource: str,
    validation_name: str,
) -> None:
    """Attach VALIDATION to RESOURCE and print the attachment's id."""
    if project is not None and plan is not None:
        _fail("--project and --plan are mutually exclusive: give one or neither")
    arguments = _parse_args(args)
    with _catalog(create=False) as catalog:
        # Check before creating the catalog file: an unknown validation writes nothing.
        found = catalog.get(validation_name)
    if found.tool_type.value != "validation":
        _fail(
            f"{validation_name!r} is a tool, not a validation; only validations can be attached",
            EXIT_USAGE,
        )
    with _catalog(create=True) as catalog:
        attachment = catalog.attach(
            resource, validation_name, project=project, plan=plan, arguments=arguments
        )
    click.echo(attachment.id)
    from gategraph.runtime._definitions._graph import NODE_ID_PATTERN

    if not re.fullmatch(NODE_ID_PATTERN, resource):
        # Plans find attachments by the names their graphs give resources, and no graph
        # can give this one: say so rather than let the attachment gate nothing, silently.
        click.echo(
            f"warning: no plan graph can name a resource {resource!r} (resource names are "
            "letters, digits, '_' and '-'): this attachment applies only to callers that "
            "resolve that name themselves",
            err=True,
        )


@validation.command("detach")
@_yes_option
@click.argument("attachment_id")
def validation_detach(yes: bool, attachment_id: str) -> None:
    """Remove an attachment, after asking for confirmation."""
    with _catalog(create=False) as catalog:
        attachment = catalog.get_attachment(attachment_id)
        _confirm(
            f"Detach {attachment.validation} from {attachment.resource} ({_scope_text(attachment)})?",
            yes,
        )
        catalog.detach(attachment_id)
    click.echo(f"detached {attachment_id}")


def _scope_text(attachment: Attachment) -> str:
    if attachment.project is not None:
        return f"project {attachment.project}"
    if attachment.plan is not None:
        return f"plan {attachment.plan}"
    return "direct"


def _print_attachments(attachments: list[Attachment], as_json: bool) -> None:
    if as_json:
        _json_out([a.model_dump(mode="json") for a in attachments])
        return
    if not attachments:
        click.echo("no attachments")
        return
    rows = [
        [
            a.id,
            a.validation,
            a.resource,
            _scope_text(a),
            json.dumps(a.arguments, sort_keys=True) if a.arguments else "",
        ]
        for a in attachments
    ]
    _table(rows, ["ID", "VALIDATION", "RESOURCE", "SCOPE", "ARGUMENTS"])


@validation.command("attachments")
@click.option("--resource", help="Only attachments to this resource.")
@click.option("--validation", "validation_name", help="Only attachments of this validation.")
@_json_option
def validation_attachments(
    resource: str | None, validation_name: str | None, as_json: bool
) -> None:
    """List attachments in the order they were made."""
    with _catalog(create=False) as catalog:
        found = catalog.attachments(resource=resource, validation=validation_name)
    _print_attachments(found, as_json)


@validation.command("resolve")
@click.option("--project", help="Resolve as seen through this project.")
@click.option("--plan", help="Resolve for this plan.")
@click.argument("resource")
@_json_option
def validation_resolve(project: str | None, plan: str | None, resource: str, as_json: bool) -> None:
    """Show which attachments apply to RESOURCE (direct + project + plan, most specific wins)."""
    with _catalog(create=False) as catalog:
        found = catalog.resolve(resource, project=project, plan=plan)
    _print_attachments(found, as_json)


# -- gategraph validator ----------------------------------------------------------------------


@cli.group()
def validator() -> None:
    """Register and revoke the credentials outside validators sign their verdicts with."""


@validator.command("register")
@click.argument("validator_id")
def validator_register(validator_id: str) -> None:
    """Register a credential for the outside validator VALIDATOR_ID (like validator-alice)
    and print it, once: the catalog keeps only its digest. Give it to the validator; its
    attestations and rejections count only with it."""
    from gategraph.runtime._definitions._validator_tools import register_validator

    with _catalog(create=True) as catalog:
        credential = register_validator(validator_id, evidence=catalog)
    click.echo(credential)
    click.echo(
        f"registered {validator_id}: keep this credential, it is not shown again "
        f"(revoke it with: gategraph validator revoke {validator_id})",
        err=True,
    )


@validator.command("revoke")
@click.argument("validator_id")
def validator_revoke(validator_id: str) -> None:
    """Revoke every credential of VALIDATOR_ID: what it signs from now on is refused."""
    from gategraph.runtime._definitions._validator_tools import revoke_validator

    with _catalog(create=False) as catalog:
        gone = revoke_validator(validator_id, evidence=catalog)
    if not gone:
        _fail(f"{validator_id} has no credential in this catalog")
    click.echo(f"revoked {_plural(gone, 'credential', 'credentials')} of {validator_id}")


# -- gategraph check --------------------------------------------------------------------------


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


_require_sandbox_option = click.option(
    "--require-sandbox",
    is_flag=True,
    help="Refuse to run any validation outside the kernel sandbox (as the graph's "
    "`policy.require_sandbox: true`): where this machine cannot sandbox, nothing runs.",
)


@cli.command("check")
@click.argument(
    "graphs", metavar="GRAPH...", nargs=-1, required=True, type=click.Path(path_type=Path)
)
@_json_option
@_require_sandbox_option
def check(graphs: tuple[Path, ...], as_json: bool, require_sandbox: bool) -> None:
    """Check the plan graph files GRAPH...: their format, names, references and cycles.

    Tools and validations are looked up in the graph, then in the catalog if it exists.
    Each file's problems are reported; the exit code is 2 if any file has one.
    """
    from gategraph.runtime._base._exceptions import ConfigError

    if as_json and len(graphs) > 1:
        raise click.UsageError("--json checks one GRAPH at a time")
    _sweep_scratch()  # what killed runs left, also when no plan runs after this
    if len(graphs) == 1:
        _check_one(graphs[0], as_json, require_sandbox)
        return
    failed = False
    for graph in graphs:  # each file's problems, not only the first file's (pre-commit)
        try:
            _check_one(graph, False, require_sandbox)
        except (ConfigError, OSError) as exc:
            failed = True
            _print_error(
                str(exc) if isinstance(exc, ConfigError) else f"{graph}: {exc.strerror or exc}"
            )
    if failed:
        click.get_current_context().exit(EXIT_USAGE)


def _check_one(graph: Path, as_json: bool, require_sandbox: bool) -> None:
    from gategraph.runtime._base._exceptions import ConfigError
    from gategraph.runtime._definitions._graph import NodeKind, load_graph

    with _catalog(create=False) as catalog:
        try:
            plan = load_graph(graph, catalog=catalog, require_sandbox=require_sandbox)
        except ConfigError as exc:
            if not as_json:
                raise
            errors = [
                {
                    "file": exc.source,
                    "line": issue.line,
                    "column": issue.column,
                    "field": issue.field,
                    "message": issue.message,
                }
                for issue in exc.issues
            ]
            _json_out(
                {"ok": False, "file": str(graph), "errors": errors, "nodes": [], "resources": []}
            )
            click.get_current_context().exit(EXIT_USAGE)
    folders = {
        name: spec.directory(name)
        for name, spec in plan.resources.items()
        if spec.kind == "directory" and spec.path is not None
    }
    if as_json:
        nodes = [
            {"id": n.id, "kind": n.kind.value, "target": n.target, "needs": list(n.needs)}
            for n in plan.nodes
        ]
        resources = [
            {
                "name": name,
                "path": str(folder.root),
                "exclude": list(folder.exclusion.patterns),
                "gitignore": folder.exclusion.gitignore,
            }
            for name, folder in folders.items()
        ]
        _json_out(
            {"ok": True, "file": str(graph), "errors": [], "nodes": nodes, "resources": resources}
        )
        return
    kinds = [n.kind for n in plan.nodes]
    counts = ", ".join(
        f"{kinds.count(kind)} {kind.value}"
        for kind in (NodeKind.VALIDATION, NodeKind.WORK, NodeKind.ACTOR)
    )
    click.echo(
        f"{graph}: ok — {_plural(len(kinds), 'node', 'nodes')} ({counts}), "
        f"{_plural(len(plan.resources), 'resource', 'resources')}, "
        f"{_plural(len(plan.acceptance), 'acceptance criterion', 'acceptance criteria')}"
    )
    # What a plan's copy of each folder leaves out: a file a test needs and git ignores
    # (a generated config, say) is missing from the copy, so say it before a run.
    for name, folder in folders.items():
        click.echo(f"  {name}: {folder.root} — {folder.exclusion.describe()}")


def _node_row(result: Any, mode: str | None) -> list[str]:
    from gategraph.runtime._data._results import ValidationResult

    output = result.output
    kind = result.kind + (f" ({mode})" if mode else "")
    if isinstance(output, ValidationResult):
        # An informational failure never blocks: a warning, as in the progress lines.
        status = "passed" if output.passed else "warning" if mode == "informational" else "failed"
        error = output.data.get("error")
        text = (f"[{error}] " if error else "") + output.message
    else:
        status = result.status.value
        text = result.error or (json.dumps(output, default=str) if output is not None else "")
    held = ", ".join(
        part
        for part in (
            getattr(result, "enforced_by", None),
            # The one thing it was let do beyond reading.
            "network declared" if getattr(result, "network", None) else None,
        )
        if part
    )
    reused = getattr(result, "reused_from", None)
    took = f"{result.duration:.3f}s" if reused is None else f"reused (round {reused})"
    return [result.node, kind, status, held, took, text[:100]]


def _held(records: Sequence[Any]) -> str:
    """What held the validations to read-only, for a run's summary line: ``; read-only
    held by the kernel for 3 and the in-process guard for 2``."""
    held = held_by(record.enforced_by for record in records)
    return f"; read-only held by {held}" if held else ""


@contextmanager
def _workspace(plan: PlanGraph, *, in_place: bool) -> Iterator[dict[str, DirectorySandbox]]:
    """Sandboxes of the graph's folders in a temporary folder, removed on the way out (none
    with ``in_place``): `execute` has no Apply, so by default nothing it runs may reach the
    real folders."""
    import shutil

    folders = {
        name: spec.path
        for name, spec in plan.resources.items()
        if spec.kind == "directory" and spec.path is not None
    }
    if in_place or not folders:
        yield {}
        return
    from gategraph.runtime._calls._context import private_folder

    # In this process's scratch parent: swept even if the process is killed midway.
    scratch = private_folder("execute")
    try:
        boxes = {}
        for name, path in folders.items():
            try:
                boxes[name] = plan.resources[name].directory(name).open_sandbox(scratch / name)
            except ValueError as exc:  # the temporary folder is inside the resource
                _fail(f"resource {name}: cannot copy {path}: {exc}; pass --in-place")
        yield boxes
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _folders_text(plan: PlanGraph) -> str:
    return ", ".join(
        f"{name} ({spec.path})"
        for name, spec in plan.resources.items()
        if spec.kind == "directory" and spec.path is not None
    )


def _check_new_plan_id(plan_id: str | None) -> None:
    """Refuse, before anything runs or prints, a --plan-id the event log holds already."""
    from gategraph.runtime._data._events import PlanStarted
    from gategraph.runtime._storage._database import events_at, log_exists, shown

    if plan_id is None:
        return
    if not plan_id.strip():
        _fail("--plan-id: must not be empty")
    from gategraph.runtime._base._exceptions import ConfigError
    from gategraph.runtime._base._ids import check_plan_id

    try:
        check_plan_id(plan_id)
    except ConfigError as exc:
        _fail(f"--plan-id: {exc.issues[0].message}")
    log_path = _event_log_at()
    found = events_at(log_path, plan_id) if log_exists(log_path) else []
    if not found:
        return
    if any(isinstance(e, PlanStarted) for e in found):
        _fail(
            f"plan {plan_id} exists already in {shown(log_path)}: continue it with "
            f"`gategraph resume {plan_id}`, or pick another --plan-id"
        )
    _fail(
        f"plan id {plan_id} is taken already in {shown(log_path)} (by a `gategraph execute` run): "
        "pick another --plan-id"
    )


_report_option = click.option(
    "--report",
    nargs=2,
    type=(click.Choice(["junit", "sarif", "html"]), click.Path(path_type=Path, dir_okay=False)),
    metavar="junit|sarif|html FILE",
    help="Also write the last round's validations as JUnit XML or SARIF, or the whole plan "
    "as one self-contained HTML page (as gategraph report writes it).",
)


@cli.command("execute")
@click.argument("graph", type=click.Path(path_type=Path))
@_require_sandbox_option
@click.option(
    "--max-concurrency",
    type=click.IntRange(min=1),
    help="At most this many nodes at once (default: the graph's policy).",
)
@click.option(
    "--plan-id", help="Use this plan id instead of a new ULID; it must not be in the log yet."
)
@click.option(
    "--in-place",
    is_flag=True,
    help="Run on the graph's real folders instead of temporary copies: what the work "
    "nodes write stays.",
)
@_report_option
@_json_option
def execute(
    graph: Path,
    require_sandbox: bool,
    max_concurrency: int | None,
    plan_id: str | None,
    in_place: bool,
    report: tuple[str, Path] | None,
    as_json: bool,
) -> None:
    """Run every node of GRAPH once and report each node and attachment.

    The nodes run on temporary copies of the graph's folders, removed afterwards: nothing
    is written to your folders (the output says what the work changed in the copies).
    --in-place runs them on the real folders instead, with no copies and no undo.
    Validations attached (in the catalog) to the graph's resources run too. Events go to the
    embedded SQLite event log; read them back with `gategraph events PLAN_ID`. Exit codes:
    0 passed, 1 a work node failed or a required validation did not pass, 2 usage or
    configuration error. This runs the nodes only: the plan lifecycle (fix, revalidate,
    apply) is `gategraph run`.
    """
    from gategraph.runtime._definitions._graph import load_graph
    from gategraph.runtime._running._engine import execute_graph
    from gategraph.runtime._storage._database import open_event_log

    _sweep_scratch()  # what killed runs left, also when this run stops early
    _check_new_plan_id(plan_id)
    _check_report(report)
    if report is not None and report[0] == "html":
        _fail("--report html is a plan's page (gategraph run): execute writes junit or sarif")
    if report is not None:
        # A report left by an earlier run must not pass for this one's if it stops early.
        report[1].unlink(missing_ok=True)
    with _catalog(create=False) as catalog:
        plan = load_graph(graph, catalog=catalog, require_sandbox=require_sandbox)
        folders = _folders_text(plan)
        with _workspace(plan, in_place=in_place) as boxes:
            if not as_json and folders:
                click.echo(
                    f"working in place on the real folders: {folders}"
                    if in_place
                    else f"working on temporary copies of {', '.join(boxes)} (removed "
                    "afterwards; --in-place works on the real folders)"
                )

            async def go() -> Any:
                async with open_event_log(_event_log_at()) as log:
                    return await execute_graph(
                        plan,
                        catalog=catalog,
                        resources={name: box.view for name, box in boxes.items()} or None,
                        event_log=log,
                        max_concurrency=max_concurrency,
                        plan_id=plan_id,
                    )

            with _stdout_for_json(as_json):
                try:
                    run = run_sync(go)
                finally:
                    _sweep_scratch()
            changes = {name: box.changeset() for name, box in boxes.items()}
    _execution_told(run, changes, as_json=as_json, in_place=in_place, report=report, name=plan.name)


def _execution_told(
    run: Any,
    changes: dict[str, Any],
    *,
    as_json: bool,
    in_place: bool,
    report: tuple[str, Path] | None,
    name: str,
) -> None:
    """What ``execute`` prints and writes once its run is over; the exit code it ends with."""
    import msgspec

    failures = run.required_failures
    warnings = [v for v in run.validations if not v.result.passed and not v.blocking]
    if as_json:
        _json_out(
            {
                "plan_id": run.plan_id,
                "graph": run.graph,
                "passed": run.passed,
                "duration": run.duration,
                "in_place": in_place,
                "changes": None
                if in_place
                else {name: msgspec.to_builtins(c.changes) for name, c in changes.items()},
                "nodes": msgspec.to_builtins(list(run.nodes.values())),
                "validations": msgspec.to_builtins(run.validations),
            }
        )
    else:
        modes = {v.node: v.mode.value for v in run.validations}
        rows = [_node_row(r, modes.get(r.node)) for r in run.nodes.values()]
        _table(rows, ["NODE", "KIND", "STATUS", "HELD BY", "TIME", "RESULT"])
        verdict = "passed" if run.passed else "FAILED"
        warned = f", {_plural(len(warnings), 'warning', 'warnings')}" if warnings else ""
        click.echo(
            f"plan {run.plan_id}: {verdict} — {len(run.validations)} validations, "
            f"{len(failures)} required failing{warned}, {run.duration:.2f}s"
            + _held(run.validations)
        )
        changed = [f"{name}: {c.summary()}" for name, c in changes.items() if not c.empty]
        if changed:
            click.echo(
                "changes made in the copies, now removed (your folders are untouched): "
                + "; ".join(changed)
            )
    if report is not None:
        _write_run_report(run, report, name)
    if not run.passed:
        click.get_current_context().exit(EXIT_REFUSED)


def _write_run_report(run: Any, report: tuple[str, Path], name: str) -> None:
    kind, target = report
    from gategraph.runtime._views._reports import render_report

    from ._plans import write_report

    write_report(target, render_report(run, kind, name=name), "--report")


@cli.command("events")
@click.argument("plan_id", shell_complete=_complete_plan_id)
@_json_option
def events(plan_id: str, as_json: bool) -> None:
    """Print the event log of the plan PLAN_ID, in order."""
    import msgspec
    from gategraph.runtime._storage._database import events_at, shown

    where = _event_log_at()
    found = events_at(where, plan_id)
    if not found:
        _fail(f"no events for plan {plan_id!r} in {shown(where)}")
    if as_json:
        _json_out(msgspec.to_builtins(found))
        return
    import datetime as dt

    for event in found:
        tag = type(event).__struct_config__.tag
        when = dt.datetime.fromtimestamp(event.at, dt.UTC).strftime("%H:%M:%S.%f")[:-3]
        fields = msgspec.to_builtins(event)
        for key in ("id", "plan_id", "seq", "at", "type", "causation_id"):
            fields.pop(key, None)
        if "result" in fields:
            result = fields.pop("result")
            fields["passed"] = result["passed"]
            if result.get("message"):
                fields["message"] = result["message"]
        if isinstance(fields.get("duration"), float):
            fields["duration"] = round(fields["duration"], 4)
        detail = " ".join(
            f"{k}={json.dumps(v, default=str)[:80]}" for k, v in fields.items() if v is not None
        )
        click.echo(f"{event.seq:>5} {when} {tag:<20} {detail}")


def _parse_resources(pairs: Sequence[str]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for pair in pairs:
        name, sep, path = pair.partition("=")
        if not sep or not name or not path:
            _fail(f"--resource {pair!r}: expected NAME=FOLDER")
        folder = Path(path)
        if not folder.is_dir():
            _fail(f"--resource {name}: {path}: no such folder")
        found[name] = folder.resolve()
    return found


def _folders_of(plan: PlanGraph, folders: Mapping[str, Path]) -> dict[str, Any]:
    """The directory resources the command line named (``--resource NAME=FOLDER``), each
    with what the graph says it leaves out."""
    from gategraph.runtime._storage._resources import DirectoryResource

    return {
        name: plan.resources[name].directory(name, folder)
        if name in plan.resources and plan.resources[name].kind == "directory"
        else DirectoryResource(name, folder)  # refused by the run, naming it
        for name, folder in folders.items()
    }


def _check_report(report: tuple[str, Path] | None) -> None:
    # Checked before the plan runs: a plan must not be applied and its report lost.
    if report is None:
        return
    target = report[1].resolve()
    if not target.parent.is_dir():
        _fail(f"--report: {report[1]}: no such folder for the report")
    if target.exists() and not os.access(target, os.W_OK):
        _fail(f"--report: {report[1]}: the file is not writable")
    if not target.exists() and not os.access(target.parent, os.W_OK | os.X_OK):
        _fail(f"--report: {report[1]}: the folder {target.parent} is not writable")


def _informational(plan: PlanGraph, catalog: Catalog) -> frozenset[str]:
    """The names of the informational validations a plan may run: its own, then the
    catalog's (which the plan's attachments and nodes can name)."""
    from gategraph.runtime._data._models import Validation, ValidationMode

    own = {v.name: v.mode for v in plan.validations}
    for found in catalog.list("validation"):
        if isinstance(found, Validation):
            own.setdefault(found.name, found.mode)
    return frozenset(name for name, mode in own.items() if mode is ValidationMode.INFORMATIONAL)


def _drive_plan(
    start: Callable[[Any, Any], Awaitable[Any]],
    *,
    name: str,
    graph_file: Path | None,
    as_json: bool,
    report: tuple[str, Path] | None,
    otel: bool = False,
    informational: frozenset[str] = frozenset(),
    wait: bool = False,
) -> None:
    """Run ``start(catalog, event_log)`` on the command's event log, showing progress (live
    on a terminal, plain lines otherwise; failed ``informational`` validations as warnings)
    and, with ``otel``, tracing it; then show the outcome of plan graph ``name``
    (:func:`_show_outcome`)."""

    from gategraph.runtime._running._observe import ObservedEventLog, progress_for
    from gategraph.runtime._storage._database import open_event_log

    tracing: Any = None
    setup: Any = None
    if otel:
        from gategraph.runtime._embed._telemetry import (
            OpenTelemetryObserver,
            configure_from_environment,
            telemetry_available,
        )

        if not telemetry_available():
            _fail("--otel needs OpenTelemetry: pip install 'gategraph[otel]'")
        # The SDK as the OTEL_* variables say, unless the program has a provider already
        # (opentelemetry-instrument's, say). With --json, printed spans go to stderr.
        setup = configure_from_environment(console=sys.stderr if as_json else None)
        if setup.warning is not None:
            click.echo(f"warning: --otel: {setup.warning}", err=True)
        tracing = OpenTelemetryObserver()
    stream = sys.stderr if as_json else sys.stdout
    progress = progress_for(stream.isatty(), err=as_json, informational=informational)
    observers = [progress] if tracing is None else [progress, tracing]
    # Made if there is none yet, beside the event log: what the plan leaves there (its
    # acceptance criteria for outside validators, the flakes it found) must outlast it.
    with _catalog(create=True) as catalog:

        async def go() -> Any:
            async with open_event_log(_event_log_at()) as log:
                return await start(catalog, ObservedEventLog(log, *observers))

        began = time.time()  # a wait after it wakes for the verdicts given since
        try:
            # The live panel owns the terminal while the plan runs: print after it stops.
            with progress, _stdout_for_json(as_json):
                outcome = run_sync(go)
        except BaseException:
            if tracing is not None:
                tracing.close()  # what was open ends, marked incomplete
                setup.flush()
            raise
        finally:
            _sweep_scratch()
    if tracing is not None:
        tracing.finish(outcome)
        # Exported before the outcome is printed (and before a pause's exit code).
        setup.flush()
    _show_outcome(
        outcome,
        as_json=as_json,
        report=report,
        name=name,
        otel=otel,
        graph_file=graph_file,
        wait=wait,
        since=began,
    )


def _show_outcome(
    outcome: Any,
    *,
    as_json: bool,
    report: tuple[str, Path] | None,
    name: str,
    otel: bool = False,
    graph_file: Path | None = None,
    wait: bool = False,
    since: float = 0.0,
) -> None:
    """Print the outcome (table and verdict, or JSON), write the report, set the exit code.
    A plan that waits for a person who is at the terminal: ask them, and go on (with
    ``graph_file``, the graph the command was given). With ``wait``, a paused plan is
    waited on until it is answered from anywhere, then continued here."""
    import msgspec
    from gategraph.runtime._lifecycle._supervisor import PlanStatus

    waiting = wait and outcome.status.waiting
    if as_json:
        if not waiting:  # one JSON document: the outcome the plan ends with
            _json_out(msgspec.to_builtins(outcome))
    else:
        modes = {v.node: v.mode.value for v in outcome.validations}
        rows = [_node_row(r, modes.get(r.node)) for r in outcome.validations]
        if rows:
            click.echo("")
            _table(rows, ["VALIDATION", "KIND", "RESULT", "HELD BY", "TIME", "MESSAGE"])
        verdict = (outcome.verdict or {}).get("verdict", "none")
        warnings = sum(1 for v in outcome.validations if not v.result.passed and not v.blocking)
        click.echo(
            f"\nplan {outcome.plan_id}: {outcome.status.value} — verdict {verdict}, "
            f"{outcome.statistics.rounds} round(s), {outcome.statistics.fixes} fix(es), "
            f"{outcome.statistics.revisions} revision(s)"
            + (f", {_plural(warnings, 'warning', 'warnings')}" if warnings else "")
            + _held(outcome.validations)
        )
        if outcome.statistics.flakes:
            found = ", ".join(f"{n} ({c})" for n, c in sorted(outcome.statistics.flakes.items()))
            click.echo(
                f"flaky (failed, then passed on the same inputs; re-run, never skipped): {found}"
            )
        if outcome.message and outcome.status is not PlanStatus.APPLIED:
            click.echo(outcome.message)
        if outcome.status is PlanStatus.AWAITING_DECISION:
            click.echo(
                f"decide with: gategraph decide {outcome.plan_id} --retry [--note TEXT] | --abort"
            )
        elif outcome.status is PlanStatus.AWAITING_APPROVAL:
            click.echo(
                f"approve with: gategraph approve {outcome.plan_id} --approve | --deny [--note TEXT]"
            )
        elif outcome.status is PlanStatus.AWAITING_ATTESTATION:
            click.echo(
                "outside validators pull its acceptance criteria with validator.ac-pull and "
                "attest them with validator.attest and their credential (gategraph "
                "validator register; served by: gategraph mcp serve --validators); "
                f"then continue it with: gategraph resume {outcome.plan_id}"
            )
    if report is not None:
        # Written after the outcome is shown: a report that cannot be written must not
        # hide what happened to the plan.
        from gategraph.runtime._views._reports import render_report

        from ._plans import html_page, write_report

        kind, target = report
        if kind == "html":
            with _catalog(create=False) as catalog:
                text = html_page(_event_log_at(), outcome.plan_id, catalog) or ""
        else:
            text = render_report(outcome, kind, name=name)
        write_report(target, text, "--report")
    if waiting:
        decision = _wait_for_answer(outcome.plan_id, outcome.status.value, since)
        _resume_command(
            outcome.plan_id,
            graph_file,
            decision=decision,
            as_json=as_json,
            report=report,
            otel=otel,
            wait=True,
        )
        return
    if not as_json:
        from ._plans import ask_person

        decision = ask_person(outcome)
        if decision is not None:
            _resume_command(
                outcome.plan_id,
                graph_file,
                decision=decision,
                as_json=False,
                report=report,
                otel=otel,
            )
            return
    code = {
        PlanStatus.APPLIED: EXIT_OK,
        PlanStatus.FAILED: EXIT_REFUSED,
    }.get(outcome.status, EXIT_AWAITING)
    if code:
        click.get_current_context().exit(code)


def _wait_for_answer(plan_id: str, status: str, since: float) -> Any:
    """Hold plan ``plan_id`` (so an answer given anywhere is kept for this process) and
    wait until it is answered: the person's decision to continue it with, or None when
    outside validators gave a verdict (``awaiting_attestation``: the resume judges it)."""
    from gategraph.runtime._storage._answers import WaitLost, wait_for_answer
    from gategraph.runtime._storage._database import events_at, open_event_log
    from gategraph.runtime._storage._eventlog import holding_lease

    where = _event_log_at()
    paused = events_at(where, plan_id)[-1].seq
    how = {
        "awaiting_approval": f"gategraph approve {plan_id} --approve | --deny",
        "awaiting_decision": f"gategraph decide {plan_id} --retry | --abort",
        "awaiting_attestation": "validator.attest (outside validators)",
    }[status]
    with _catalog(create=False) as catalog:

        def verdict_since() -> bool:
            # Since this command began: one the gate had seen costs a resume, never a miss.
            given = catalog.verdicts(plan_id, since=since).latest
            return bool(given or catalog.refusals(plan_id, since=since))

        woken = verdict_since if status == "awaiting_attestation" else None

        async def held() -> Any:
            async with holding_lease(open_event_log(where), plan_id):
                click.echo(
                    f"waiting for plan {plan_id} to be answered, from any host that reaches "
                    f"its log: {how} (Ctrl-C stops waiting; the plan stays paused)",
                    err=True,
                )
                return await wait_for_answer(where, plan_id, paused, woken=woken)

        try:
            answer = run_sync(held)
        except KeyboardInterrupt:
            _stopped_waiting(plan_id, status, "")
        except WaitLost as exc:
            _stopped_waiting(plan_id, status, f" ({exc})")
    return _woken(plan_id, answer)


def _stopped_waiting(plan_id: str, status: str, why: str) -> NoReturn:
    # How a person stops waiting: the plan stays as it was, paused.
    click.echo(f"stopped waiting{why}: plan {plan_id} stays {status}", err=True)
    click.get_current_context().exit(EXIT_AWAITING)


def _woken(plan_id: str, answer: Any) -> Any:
    """What a waiting command goes on with (in a function of its own: coverage does not
    see the lines after run_sync in the frame that called it)."""
    from gategraph.runtime._storage._answers import MOVED, WOKEN

    if answer == WOKEN:
        click.echo(f"plan {plan_id}: an outside validator gave a verdict; continuing", err=True)
        return None
    if answer == MOVED:
        click.echo(f"plan {plan_id}: another process continued it", err=True)
        return None
    click.echo(f"plan {plan_id}: answered {answer.action} from {answer.host}; continuing", err=True)
    return answer.as_decision()


def _run_plan_command(
    graph_path: Path,
    *,
    as_json: bool,
    report: tuple[str, Path] | None,
    auto_approve: bool,
    resources: dict[str, Path],
    plan_id: str | None,
    otel: bool = False,
    ray_address: str | None = None,
    require_sandbox: bool = False,
    wait: bool = False,
) -> None:
    from gategraph.runtime._definitions._graph import load_graph
    from gategraph.runtime._lifecycle._executors import RayExecutor
    from gategraph.runtime._lifecycle._supervisor import run_plan

    _check_report(report)
    _check_new_plan_id(plan_id)
    with _catalog(create=False) as catalog:
        plan = load_graph(graph_path, catalog=catalog, require_sandbox=require_sandbox)
        informational = _informational(plan, catalog)

    home = _sandbox_home()

    async def start(catalog: Any, log: Any) -> Any:
        return await run_plan(
            plan,
            catalog=catalog,
            event_log=log,
            resources=_folders_of(plan, resources) or None,
            auto_approve=auto_approve,
            plan_id=plan_id,
            executor=None
            if ray_address is None
            else RayExecutor(address=None if ray_address == "local" else ray_address),
            home=home,
        )

    _drive_plan(
        start,
        name=plan.name,
        graph_file=graph_path,
        as_json=as_json,
        report=report,
        otel=otel,
        informational=informational,
        wait=wait,
    )


def _resume_command(
    plan_id: str,
    graph_file: Path | None,
    *,
    decision: Any,
    as_json: bool,
    report: tuple[str, Path] | None,
    otel: bool = False,
    wait: bool = False,
) -> None:
    """Resume plan ``plan_id`` from the command's log: the graph file and the resources it
    ran with come from its ``plan_started`` event. A plan paused for a person that was
    answered without being continued (``--record-only``, or a process that waited on it
    and died) continues with that answer."""

    from gategraph.runtime._base._statuses import PlanStatus
    from gategraph.runtime._data._events import PlanFinished, PlanStarted
    from gategraph.runtime._definitions._graph import load_graph
    from gategraph.runtime._lifecycle._supervisor import resume_plan
    from gategraph.runtime._storage._database import events_at, log_exists, shown

    _check_report(report)
    log_path = _event_log_at()
    found = events_at(log_path, plan_id) if log_exists(log_path) else []
    if not found:
        _fail(f"no events for plan {plan_id!r} in {shown(log_path)}")
    started = next((e for e in found if isinstance(e, PlanStarted)), None)
    if started is None:
        _fail(f"plan {plan_id}: its log has no plan_started event; it cannot be resumed")
    last = found[-1]
    if decision is None and isinstance(last, PlanFinished) and PlanStatus(last.status).for_a_person:
        from gategraph.runtime._storage._answers import answer_for

        answer = answer_for(log_path, plan_id, last.seq)
        if answer is not None:
            click.echo(
                f"plan {plan_id}: continuing with the answer given from {answer.host}: "
                f"{answer.action}",
                err=True,
            )
            decision = answer.as_decision()
    path = graph_file or (Path(started.graph_path) if started.graph_path else None)
    if path is None:
        _fail(
            f"plan {plan_id} was started from Python, not from a graph file: resume it with "
            "gategraph.runtime.resume_plan(...), or pass the graph file (GRAPH)"
        )
    if not path.is_file():
        _fail(
            f"plan {plan_id} ran graph file {path}, which is not there; pass the graph file "
            "(GRAPH) if it moved"
        )
    if not started.graph_unchanged(path):
        _fail(
            f"{path}: changed since plan {plan_id} started (sha256 differs); a plan "
            "resumes only with the graph it ran",
            EXIT_REFUSED,
        )
    with _catalog(create=False) as catalog:
        plan = load_graph(path, catalog=catalog)
        informational = _informational(plan, catalog)
    from gategraph.runtime._embed._gate import is_gate

    if is_gate(plan) and (decision is None or decision.action == "retry"):
        # Its new work can only come from the program that opened it: refused before
        # anything is appended, so that program can still resume it.
        _fail(
            f"plan {plan_id} is a gate opened by a program, and only that program can do its "
            "work: resume it there (resume_gate); an abort, an approval or a denial can be "
            "given here",
            EXIT_REFUSED,
        )

    home = _sandbox_home()

    async def start(catalog: Any, log: Any) -> Any:
        # The resource folders and auto-approval the plan ran with come from its log.
        return await resume_plan(
            plan_id, plan, catalog=catalog, event_log=log, decision=decision, home=home
        )

    _drive_plan(
        start,
        name=plan.name,
        graph_file=path,
        as_json=as_json,
        report=report,
        otel=otel,
        informational=informational,
        wait=wait,
    )


_wait_option = click.option(
    "--wait",
    is_flag=True,
    help="When the plan pauses for a person or outside validators, wait here for the "
    "answer (given with approve, decide or validator.attest from any host that reaches "
    "the plan's log), then continue it, instead of exiting with 3.",
)
_record_only_option = click.option(
    "--record-only",
    is_flag=True,
    help="Only record the answer: `gategraph resume PLAN_ID` continues the plan with it, "
    "on any host that reaches its log and its folders.",
)

_otel_option = click.option(
    "--otel",
    is_flag=True,
    help="Also trace the plan as OpenTelemetry spans (needs gategraph[otel]; exported as "
    "the OTEL_* variables say, e.g. OTEL_TRACES_EXPORTER=console, with opentelemetry-sdk).",
)


@cli.command("run")
@click.argument("graph", type=click.Path(path_type=Path))
@_json_option
@_report_option
@click.option("--auto-approve", is_flag=True, help="Approve every approval tier for this run.")
@click.option(
    "--resource",
    "resource_pairs",
    multiple=True,
    metavar="NAME=FOLDER",
    help="Run on this folder instead of the graph's resource NAME.",
)
@click.option(
    "--plan-id",
    help="Use this plan id instead of a new ULID; it must be new (continue an existing "
    "plan with `gategraph resume`).",
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    help="Run the validations as Ray tasks on this cluster ('local' starts a local Ray "
    "instance; needs gategraph[ray]).",
)
@_otel_option
@_require_sandbox_option
@_wait_option
def run_command(
    graph: Path,
    as_json: bool,
    report: tuple[str, Path] | None,
    auto_approve: bool,
    resource_pairs: tuple[str, ...],
    plan_id: str | None,
    ray_address: str | None,
    otel: bool,
    require_sandbox: bool,
    wait: bool,
) -> None:
    """Run GRAPH as a plan: Strategize, Execute (validated), Apply.

    Progress is live on a terminal and plain lines otherwise; a failed informational
    validation shows as `warn` and never blocks. Exit codes: 0 applied,
    1 failed, 2 usage or configuration error, 3 waiting for a person's decision or
    approval (continue it with `decide` or `approve`; after a crash, `resume`).
    """
    _run_plan_command(
        graph,
        as_json=as_json,
        report=report,
        auto_approve=auto_approve,
        resources=_parse_resources(resource_pairs),
        plan_id=plan_id,
        otel=otel,
        ray_address=ray_address,
        require_sandbox=require_sandbox,
        wait=wait,
    )


_DEMO_MARKER = ".gategraph-demo"


@cli.command("demo")
@click.option(
    "--dir",
    "folder",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("gategraph-demo"),
    show_default=True,
    help="Where to copy the demo plan and its project.",
)
@_json_option
def demo(folder: Path, as_json: bool) -> None:
    """Copy the demo plan and its project, then run it: a required failure is fixed and
    the change applied."""
    import shutil
    from importlib.resources import files

    source = Path(str(files("gategraph.graphs") / "demo"))
    from gategraph.runtime._base._home import default_catalog_path

    home = (_where().catalog_path or default_catalog_path()).parent
    if home.exists() and not home.is_dir():
        # Found before anything is copied: a demo that cannot log would leave a half-done folder.
        _fail(f"{home}: is not a folder, so the event log cannot be kept there (GATEGRAPH_HOME?)")
    if folder.exists():
        if not (folder / _DEMO_MARKER).exists():
            _fail(
                f"{folder}: exists and is not a gategraph demo folder; pick another --dir",
                EXIT_REFUSED,
            )
        shutil.rmtree(folder)
    try:
        shutil.copytree(source, folder, ignore=shutil.ignore_patterns("__pycache__"))
        (folder / _DEMO_MARKER).write_text("made by `gategraph demo`; safe to delete\n")
    except OSError as exc:
        _fail(f"--dir {folder}: cannot make the demo folder: {exc.strerror or exc}")
    click.echo(f"demo copied to {folder}; running {folder / 'plan.yaml'}", err=as_json)
    _run_plan_command(
        folder / "plan.yaml",
        as_json=as_json,
        report=None,
        auto_approve=False,
        resources={},
        plan_id=None,
    )
    if not as_json:
        click.echo(f"the applied project is in {folder / 'project'}")


@cli.command("replay")
@click.argument("plan_id", shell_complete=_complete_plan_id)
@click.argument("graph", required=False, type=click.Path(path_type=Path))
@click.option(
    "--rerun",
    "rerun",
    metavar="ROUNDS",
    default=None,
    help="Also run the validations of these rounds again, on the inputs each round saw "
    "(kept beside the event log): 'all', or round numbers such as '1,3'.",
)
@_json_option
def replay(plan_id: str, graph: Path | None, rerun: str | None, as_json: bool) -> None:
    """Re-derive every decision of the plan PLAN_ID from its event log, running nothing.

    GRAPH is the plan graph file the plan ran (by default the file its log names). No
    validation, actor or resource is touched: validation outcomes are read from
    the log. With --rerun, the chosen rounds are rebuilt from the inputs kept for them
    and their validations run again; each one whose outcome now differs is listed (a
    validation that passed one time and failed the other is flaky, and counted in the
    catalog). The recorded outcomes stay the ones that decided. Exit codes: 0 every
    decision matches the log (and every re-run outcome the recorded one), 1 a decision
    or a re-run outcome differs, 2 usage error (unknown plan, bad or wrong graph, bad
    ROUNDS).
    """
    from gategraph.runtime._data._events import PlanStarted
    from gategraph.runtime._definitions._graph import load_graph
    from gategraph.runtime._storage._database import events_at, shown
    from gategraph.runtime._views._replay import replay_plan

    rounds = _rounds_option(rerun)
    log_path = _event_log_at()
    found = events_at(log_path, plan_id)
    if not found:
        _fail(f"no events for plan {plan_id!r} in {shown(log_path)}")
    started = next((e for e in found if isinstance(e, PlanStarted)), None)
    ran = started.graph if started is not None else None
    if graph is None and started is not None and started.graph_path:
        graph = Path(started.graph_path)
    if graph is None:
        _fail(
            f"plan {plan_id} ran graph {ran!r}, not from a file the log names: pass the "
            f"graph file, as in `gategraph replay {plan_id} GRAPH.yaml`"
        )
    if not graph.is_file():
        _fail(f"{graph}: no such graph file; pass the graph file plan {plan_id} ran")
    # A re-run counts the flakes it finds in the catalog: it is created for them.
    with _catalog(create=rerun is not None) as catalog:
        plan = load_graph(graph, catalog=catalog)
        if ran is not None and plan.name != ran:
            _fail(f"{graph} is graph {plan.name!r}, but plan {plan_id} ran graph {ran!r}")
        report = replay_plan(found, plan, catalog=catalog)
        rerun_report = (
            _rerun(found, plan, catalog, _store_of(log_path), rounds) if rerun is not None else None
        )
    _replay_told(report, rerun_report, as_json=as_json)


def _replay_told(report: Any, rerun_report: Any, *, as_json: bool) -> None:
    """Print what a replay (and its re-run) found, and set the exit code; in a function of
    its own, as coverage does not see the lines after run_loop in the frame that called it."""
    import msgspec

    if as_json:
        data = msgspec.to_builtins(report)
        if rerun_report is not None:
            data["rerun"] = msgspec.to_builtins(rerun_report) | {
                "matches": rerun_report.matches,
                "flaky": rerun_report.flaky,
            }
        _json_out(data)
    else:
        for line in report.mismatches:
            click.echo(line)
        for note in report.notes:
            click.echo(f"note: {note}")
        verdict = (
            "all match"
            if report.matches
            else _plural(len(report.mismatches), "mismatch", "mismatches")
        )
        click.echo(
            f"replayed {_plural(report.events, 'event', 'events')}, "
            f"{_plural(report.decisions_checked, 'decision', 'decisions')}: {verdict}"
        )
        if rerun_report is not None:
            for d in rerun_report.differences:
                click.echo(
                    f"round {d.round}: {d.node} ({d.validation}) recorded {d.recorded}, "
                    f"now {d.now}" + (": flaky" if d.flaky else "")
                )
            for line in rerun_report.skipped:
                click.echo(f"note: not re-run: {line}")
            differ = (
                "all as recorded"
                if rerun_report.matches
                else f"{len(rerun_report.differences)} differ"
            )
            click.echo(
                f"re-ran {_plural(rerun_report.validations, 'validation', 'validations')} "
                f"in {_plural(len(rerun_report.rounds), 'round', 'rounds')}: {differ}"
            )
    if not report.matches or (rerun_report is not None and not rerun_report.matches):
        click.get_current_context().exit(EXIT_REFUSED)


def _rounds_option(text: str | None) -> list[int] | None:
    """``--rerun ROUNDS``: None for 'all' (or no option), else the round numbers."""
    if text is None or text.strip() == "all":
        return None
    numbers: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()) or int(part) < 1:
            _fail(f"--rerun: {text!r} is not 'all' or round numbers such as '1,3'")
        numbers.append(int(part))
    return numbers


def _store_of(log_path: Path | str) -> Path | str:
    """Where the round inputs of a log's plans are kept: the folder ``store`` beside a log
    file, or the log's database."""
    return log_path if isinstance(log_path, str) else Path(log_path).parent / "store"


def _rerun(
    events: Any, plan: Any, catalog: Any, store_at: Path | str, rounds: list[int] | None
) -> Any:
    """Re-run the plan's rounds on the inputs kept at ``store_at`` (a folder or a
    database)."""
    import functools

    from gategraph.runtime._lifecycle._rerun import rerun_rounds
    from gategraph.runtime._storage._store import ContentStore

    if isinstance(store_at, Path) and not store_at.is_dir():
        _fail(f"no inputs are kept for this plan: {store_at} does not exist")
    store = ContentStore(store_at)
    try:
        return run_loop(
            functools.partial(
                rerun_rounds, events, plan, store=store, rounds=rounds, catalog=catalog
            )
        )
    except ValueError as exc:
        _fail(f"--rerun: {exc}")
    finally:
        store.close()


@cli.command("resume")
@click.argument("plan_id", shell_complete=_complete_plan_id)
@click.argument("graph", required=False, type=click.Path(path_type=Path, dir_okay=False))
@_json_option
@_report_option
@_otel_option
@_wait_option
def resume(
    plan_id: str,
    graph: Path | None,
    as_json: bool,
    report: tuple[str, Path] | None,
    otel: bool,
    wait: bool,
) -> None:
    """Continue the plan PLAN_ID whose process died, from its event log.

    Validations that completed before the crash are not run again; a crash during Apply is
    recovered per resource, never applied twice. GRAPH defaults to the file the plan ran
    (recorded in its log); it must be unchanged. A finished plan, or one paused for a
    person, shows its outcome and changes nothing (answer it with `decide` or `approve`),
    unless it was answered with --record-only: it then continues with that answer. A plan
    waiting for outside validators is applied if they have attested it since, and waits
    on otherwise. Exit codes as for `run`.
    """
    _resume_command(
        plan_id, graph, decision=None, as_json=as_json, report=report, otel=otel, wait=wait
    )


def _answer(
    plan_id: str,
    graph: Path | None,
    choices: dict[str, bool],
    *,
    note: str | None,
    as_json: bool,
    report: tuple[str, Path] | None,
    otel: bool,
    wait: bool,
    record_only: bool,
) -> None:
    """A person's answer (`decide`, `approve`): exactly one of ``choices`` (action → flag
    given); record it and continue the plan. When a process waits on the plan (``--wait``,
    on any host), or with ``record_only``, the answer is kept for whoever continues it."""
    from gategraph.runtime._base._protocols import EscalationDecision

    given = [action for action, chosen in choices.items() if chosen]
    flags = " or ".join(f"--{action}" for action in choices)
    if not given:
        raise click.UsageError(f"give {flags}", click.get_current_context())
    if len(given) > 1:
        # Two answers at once is a slip, not a choice: never pick one of them silently.
        raise click.UsageError(
            f"{' and '.join(f'--{a}' for a in given)} contradict each other: give one",
            click.get_current_context(),
        )
    decision = EscalationDecision(action=given[0], note=note)  # type: ignore[arg-type]
    if _kept_for_another(plan_id, decision, record_only=record_only, as_json=as_json):
        return
    _resume_command(
        plan_id, graph, decision=decision, as_json=as_json, report=report, otel=otel, wait=wait
    )


def _kept_for_another(plan_id: str, decision: Any, *, record_only: bool, as_json: bool) -> bool:
    """Keep ``decision`` for the process that waits on plan ``plan_id`` (it holds the plan:
    it continues it now), or, with ``record_only``, for the next ``resume`` anywhere; False
    when this command is to continue the plan itself."""
    from gategraph.runtime._data._events import PlanFinished
    from gategraph.runtime._storage._answers import AnswerTakenError, answer_for, record_answer
    from gategraph.runtime._storage._database import drivers_at, events_at, log_exists, shown
    from gategraph.runtime._views._plan_views import held_lease

    where = _event_log_at()
    found = events_at(where, plan_id) if log_exists(where) else []
    if not found:
        _fail(f"no events for plan {plan_id!r} in {shown(where)}")
    last = found[-1]
    paused = isinstance(last, PlanFinished) and last.status == decision.answers
    given = answer_for(where, plan_id, last.seq) if paused else None
    if given is not None and given.action != decision.action:
        _fail(str(AnswerTakenError(given)), EXIT_REFUSED)  # the first answer stands
    held = held_lease(where, plan_id)
    # Who waits on it, read before the answer wakes it (and it lets the plan go).
    driver = (drivers_at(where, [plan_id]) or {}).get(plan_id) if held else None
    if not (record_only or held):
        return False
    if not paused:
        state = last.status if isinstance(last, PlanFinished) else "running"
        _fail(decision.not_awaited(plan_id, state), EXIT_REFUSED)
    try:
        answer = record_answer(where, plan_id, last.seq, decision.action, decision.note)
    except AnswerTakenError as exc:
        _fail(str(exc), EXIT_REFUSED)
    if held:
        said = (
            f"answered plan {plan_id}: {answer.action}; the process that waits on it"
            f"{f' ({driver})' if driver else ''} continues it now"
        )
    else:
        said = (
            f"recorded for plan {plan_id}: {answer.action}; `gategraph resume {plan_id}` "
            "continues it, on any host that reaches its log and its folders"
        )
    if as_json:
        _json_out(
            {"plan_id": plan_id, "answer": answer.action, "continued_by": driver if held else None}
        )
    else:
        click.echo(said)
    return True


@cli.command("decide")
@click.argument("plan_id", shell_complete=_complete_plan_id)
@click.argument("graph", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--retry", is_flag=True, help="Try again, with a fresh retry budget.")
@click.option("--abort", is_flag=True, help="Give up: the plan fails.")
@click.option("--note", help="A note for the execution actor (with --retry) or the log.")
@_json_option
@_report_option
@_otel_option
@_wait_option
@_record_only_option
def decide(plan_id: str, graph: Path | None, retry: bool, abort: bool, **options: Any) -> None:
    """Answer the escalation of plan PLAN_ID (status awaiting_decision) and continue it.

    Give exactly one of --retry and --abort. GRAPH defaults to the graph file the plan ran
    (recorded in its log). Exit codes as for `run`.
    """
    _answer(plan_id, graph, {"retry": retry, "abort": abort}, **options)


@cli.command("approve")
@click.argument("plan_id", shell_complete=_complete_plan_id)
@click.argument("graph", required=False, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--approve", "approve_", is_flag=True, help="Approve: the plan goes on to Apply.")
@click.option("--deny", is_flag=True, help="Deny: the plan fails.")
@click.option("--note", help="Why, for the log.")
@_json_option
@_report_option
@_otel_option
@_wait_option
@_record_only_option
def approve(plan_id: str, graph: Path | None, approve_: bool, deny: bool, **options: Any) -> None:
    """Answer the approval plan PLAN_ID waits for (status awaiting_approval) and continue it.

    Give exactly one of --approve and --deny. GRAPH defaults to the graph file the plan ran
    (recorded in its log). Exit codes as for `run`.
    """
    _answer(plan_id, graph, {"approve": approve_, "deny": deny}, **options)


# -- gategraph mcp ----------------------------------------------------------------------------


@cli.group("mcp")
def mcp_group() -> None:
    """Reach MCP servers' tools, and serve gategraph's validations over MCP."""


def _add_mcp_client_commands() -> None:
    # add, list, tools, import, remove: the client side, in its own module.
    from ._mcp import register

    register(mcp_group)


_add_mcp_client_commands()


def _add_skill_commands() -> None:
    from ._skill import register

    register(cli)


_add_skill_commands()


def _add_plan_commands() -> None:
    # plans, graph, schema: looking at plans and plan graphs, in their own module.
    from ._plans import register

    register(cli)


_add_plan_commands()


@mcp_group.command("serve")
@click.option(
    "--http",
    "address",
    metavar="HOST:PORT",
    help="Serve streamable HTTP on this address (at /mcp) instead of stdio; port 0 picks a "
    "free one. Only loopback addresses, unless --allow-remote.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Allow --http on an address other machines can reach (there is no authentication).",
)
@click.option("--no-builtins", is_flag=True, help="Leave out the built-in validations.")
@click.option(
    "--plans",
    is_flag=True,
    help="Also serve gategraph.run_plan (runs a plan graph file, which may apply changes) "
    "and gategraph.plans_waiting.",
)
@click.option(
    "--validators",
    is_flag=True,
    help="Also serve the validator tools (validator.ac-pull, validator.attest, "
    "validator.reject, spawn.validator), with which an agent reviews a plan as an "
    "independent validator: an attestation lets a plan that waits for outside validators "
    "apply. Serve them only to clients you trust to review.",
)
@click.option(
    "--root",
    metavar="DIR",
    type=click.Path(path_type=Path),
    help="The folder calls may name paths in (default: the working directory). Every "
    "folder, graph file and path argument of a call must be inside it; a relative path "
    "is relative to it.",
)
@click.option(
    "--skill",
    "skills",
    multiple=True,
    metavar="NAME",
    help="Serve only the tools and validations of this skill of the catalog (repeat for "
    "several), in place of the whole catalog's.",
)
@_require_sandbox_option
def mcp_serve(
    address: str | None,
    allow_remote: bool,
    no_builtins: bool,
    plans: bool,
    validators: bool,
    root: Path | None,
    skills: tuple[str, ...],
    require_sandbox: bool,
) -> None:
    """Serve the catalog's validations and read-only tools as MCP tools (with --plans and
    --validators, the plan and validator tools too).

    Each takes its resource slots as folder paths (or files), then its own arguments, and
    returns {passed, message, data}; it runs with the read-only guard and its timeout, as
    in a plan. A call may only name paths inside --root. Over stdio by default: standard
    output carries MCP messages only, and diagnostics go to standard error.
    """

    from gategraph.runtime._calls._mcp import sdk_problem
    from gategraph.runtime._serve._mcp_serve import (
        bind,
        create_mcp_server,
        parse_address,
        serve_http,
        serve_stdio,
        served_root,
    )

    problem = sdk_problem("gategraph mcp serve")
    if problem is not None:
        _fail(problem)

    endpoint = parse_address(address, allow_remote=allow_remote) if address else None
    served = served_root(root, field="--root")
    if require_sandbox:
        from gategraph.runtime._base._kernel import sandbox_support

        missing = sandbox_support().missing
        if missing is not None:
            _fail(f"--require-sandbox: this machine cannot sandbox ({missing}): nothing served")
    if skills and no_builtins:
        _fail("--no-builtins does not apply with --skill: a skill names the built-ins it serves")
    # The validator tools work on the catalog the plans run with: made if there is none yet,
    # or a plan run later would keep its criteria where this server does not look.
    if skills:
        # Before the catalog is made (--validators makes it): a refusal leaves nothing.
        with _catalog(create=False) as catalog:
            _check_skills(catalog, skills)
    with _catalog(create=validators) as catalog:
        server = create_mcp_server(
            catalog,
            builtins=not no_builtins,
            plans=plans,
            validators=validators,
            event_log_path=_event_log_at(),
            root=served,
            skills=skills or None,
            require_sandbox=require_sandbox,
        )
        sock = bind(*endpoint) if endpoint is not None else None
        if catalog.path is None and catalog.url is None:
            click.echo(
                "gategraph mcp serve: no catalog file yet: serving the built-in validations",
                err=True,
            )
        if sock is None:
            run_loop(serve_stdio, server)
            return

        def ready(url: str) -> None:
            click.echo(f"gategraph mcp serve: listening on {url}", err=True)

        assert endpoint is not None
        host = endpoint[0]
        with sock:
            run_loop(lambda: serve_http(server, sock, host=host, ready=ready))


def _check_skills(catalog: Catalog, skills: Sequence[str]) -> None:
    from gategraph.runtime._base._exceptions import CatalogError, NotFoundError

    for name in skills:
        try:
            catalog.get_skill(name)
        except NotFoundError:
            _fail(
                f"--skill {name}: no skill named {name!r} in the catalog "
                "(gategraph skill list shows them)"
            )
        except CatalogError as exc:
            _fail(f"--skill {name}: {exc}")


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``gategraph`` command line."""
    # The command's loop, for the command only: a host that runs this in its own process
    # keeps the loop it chose for its own sync calls.
    previous = uses_uvloop()
    problem = choose_loop(os.environ.get("GATEGRAPH_LOOP"))
    if problem is not None:
        click.echo(f"error: {problem}", err=True)
        sys.exit(EXIT_USAGE)
    import warnings

    shown = warnings.showwarning
    # A warning is one line a person reads (the sandbox fell back, an observer failed), not
    # the file and line of gategraph's code that raised it.
    warnings.showwarning = _show_warning
    try:
        _keep_stdout_ours()
        cli.main(args=list(argv) if argv is not None else None, prog_name="gategraph")
    finally:
        warnings.showwarning = shown
        use_uvloop(previous)


def _show_warning(message: Warning | str, *_: Any, **__: Any) -> None:
    click.echo(f"warning: {message}", err=True)


def _keep_stdout_ours() -> None:
    """Give gategraph's own output a private copy of file descriptor 1 and point 1 itself at
    standard error: what a validation writes to the descriptor (``os.write(1, ...)``, a
    command that inherits it) cannot get into ``--json`` output or a pipe. Writes through
    ``sys.stdout`` are captured per call already."""
    stream = sys.stdout
    try:
        fileno = stream.fileno()
        if fileno != 1:
            return
        own = os.dup(1)
        os.dup2(2, 1)
    except (OSError, ValueError, AttributeError):
        return  # no real descriptor (an embedding host's stream): nothing to protect
    stream.flush()
    # Lives as long as the process, like the sys.stdout it replaces.
    sys.stdout = open(
        own,
        "w",
        buffering=1,
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors=getattr(stream, "errors", None) or "strict",
        closefd=True,
    )


if __name__ == "__main__":  # pragma: no cover
    main()
