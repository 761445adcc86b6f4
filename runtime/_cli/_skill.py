"""``gategraph skill add|list|show|remove``: skills in the catalog.

A thin layer over :class:`Catalog`'s skill methods; :func:`register` adds the group to the
command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._skills import Skill

__all__ = ["register"]

_json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def register(cli: click.Group) -> None:
    """Add ``gategraph skill`` to the command line."""
    cli.add_command(skill)


@click.group()
def skill() -> None:
    """Manage skills: named sets of tools and validations handed to agents together.

    A skill makes its validations callable (by a plan's execution actor, by an agent
    through MCP or pydantic-ai); only an attachment makes a validation gate a plan.
    """


@skill.command("add")
@click.argument("name", required=False)
@click.argument("tools", nargs=-1)
@click.option("--description", help="What the skill is for.")
@click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path, dir_okay=True),
    help="A YAML or JSON file with the skill's fields (name, description, tools) instead "
    "of NAME and TOOLS.",
)
@click.option("--update", is_flag=True, help="Replace a skill of the same name.")
def skill_add(
    name: str | None,
    tools: tuple[str, ...],
    description: str | None,
    config: Path | None,
    update: bool,
) -> None:
    """Register skill NAME of the catalog's TOOLS (tools and validations, by name).

    Every name must be in the catalog: registered, built in (python_syntax, regex ...) or
    from a plugin. Being in a skill never makes a validation gate a plan: attach it for that.
    """
    from gategraph.runtime._base._exceptions import ConfigError, DuplicateError
    from gategraph.runtime._base._yaml import Document, read_document
    from gategraph.runtime._definitions._skills import Skill

    from ._common import EXIT_REFUSED, EXIT_USAGE, _catalog, _fail
    from ._mcp import in_catalog

    if config is not None:
        if name is not None or tools or description is not None:
            _fail("give either --config FILE or NAME TOOL... [--description], not both")
        doc = read_document(config)
    else:
        if name is None or not tools:
            _fail("give the skill's NAME and at least one TOOL (or --config FILE)")
        fields: dict[str, Any] = {"name": name, "tools": list(tools)}
        if description is not None:
            fields["description"] = description
        doc = Document(fields, "")
    model = Skill.from_config(doc)
    # Checked before the catalog file is made: a skill of unknown names writes nothing.
    with _catalog(create=False) as catalog:
        missing = _missing(catalog, model, doc)
    if missing is not None:
        raise missing
    try:
        with _catalog(create=True) as catalog:
            existed = in_catalog(catalog.get_skill, model.name)
            stored = catalog.add_skill(model, update=update)
            kinds = _kinds(catalog, stored)
    except DuplicateError:
        where = f"{doc.source}: " if doc.source else ""
        _fail(
            f"{where}a skill named {model.name!r} exists already (add --update to replace it)",
            EXIT_REFUSED,
        )
    except ConfigError as exc:  # a member removed meanwhile
        _fail(str(exc), EXIT_USAGE)
    verb = "updated" if existed else "added"
    click.echo(f"{verb} skill {stored.name}: {', '.join(stored.tools)} ({kinds})")


def _missing(catalog: Catalog, model: Skill, doc: Any) -> Exception | None:
    """The error naming each of the skill's tools the catalog does not have, or None."""
    from gategraph.runtime._base._exceptions import ConfigError

    unknown = [(i, name) for i, name in enumerate(model.tools) if name not in catalog]
    if not unknown:
        return None
    said = "no tool or validation named {!r} in the catalog"
    if doc.source:
        return ConfigError(
            [doc.issue(["tools", i], said.format(name)) for i, name in unknown],
            source=doc.source,
        )
    # The names were arguments: each said of the skill (`tool list` shows what there is).
    hint = " (gategraph tool list shows what it has)"
    return ConfigError(
        "\n".join(f"skill {model.name!r}: {said.format(n)}{hint}" for _, n in unknown)
    )


def _kinds(catalog: Catalog, skill: Skill) -> str:
    from gategraph.runtime._data._models import ToolType

    types = [_member(catalog, name)[0] for name in skill.tools]
    validations = sum(1 for t in types if t == ToolType.VALIDATION.value)
    tools = sum(1 for t in types if t == ToolType.TOOL.value)
    counted = [
        f"{count} {word}{'s' if count != 1 else ''}"
        for count, word in ((validations, "validation"), (tools, "tool"))
        if count
    ]
    return ", ".join(counted) or "nothing the catalog has now"


def _member(catalog: Catalog, name: str) -> tuple[str, dict[str, Any]]:
    """A member's type (``validation``, ``tool`` or ``missing``) and what ``skill show``
    says of it."""
    from gategraph.runtime._base._exceptions import GategraphError, NotFoundError
    from gategraph.runtime._data._models import Validation

    try:
        tool = catalog.get(name)
    except NotFoundError:
        return "missing", {"name": name, "type": "missing"}
    except GategraphError as exc:
        return "unreadable", {"name": name, "type": "unreadable", "problem": str(exc)}
    out: dict[str, Any] = {"name": name, "type": tool.tool_type.value}
    if isinstance(tool, Validation):
        out["mode"] = tool.mode.value
        attached = catalog.attachments(validation=name)
        out["attachments"] = [
            {"id": a.id, "resource": a.resource, "scope": a.scope.value} for a in attached
        ]
        out["gate"] = bool(attached)
    if tool.description:
        out["description"] = tool.description
    if tool.plugin:
        out["plugin"] = tool.plugin
    return tool.tool_type.value, out


@skill.command("list")
@_json_option
def skill_list(as_json: bool) -> None:
    """List the catalog's skills."""
    from ._common import _catalog, _json_out, _table

    with _catalog(create=False) as catalog:
        skills = catalog.list_skills()
        broken = catalog.unreadable_skills()
    for problem in broken.values():
        click.echo(f"warning: {problem}", err=True)  # the others are still listed
    if as_json:
        _json_out([s.as_config() for s in skills])
        return
    if not skills:
        click.echo("no skills (add one with: gategraph skill add NAME TOOL...)")
        return
    _table(
        [[s.name, ", ".join(s.tools), s.description] for s in skills],
        ["SKILL", "TOOLS", "DESCRIPTION"],
    )


@skill.command("show")
@click.argument("name")
@_json_option
def skill_show(name: str, as_json: bool) -> None:
    """Show skill NAME: each of its tools and validations, and which validations gate
    plans (they are attached) or are only callable."""
    from ._common import _catalog, _json_out

    with _catalog(create=False) as catalog:
        found = catalog.get_skill(name)
        members = [_member(catalog, tool)[1] for tool in found.tools]
    if as_json:
        _json_out({**found.as_config(), "tools": members})
        return
    click.echo(f"skill {found.name}")
    if found.description:
        click.echo(f"  {found.description}")
    for member in members:
        click.echo(f"  {member['name']}: {_said(member)}")


def _said(member: dict[str, Any]) -> str:
    kind = member["type"]
    if kind == "missing":
        return "missing from the catalog (removed, or its plugin was uninstalled)"
    if kind == "unreadable":
        return f"cannot be read from the catalog: {member['problem']}"
    if kind == "tool":
        return "tool"
    what = f"validation ({member['mode']})"
    attached = member["attachments"]
    if not attached:
        return f"{what}, callable only: attach it to make it a gate"
    where = ", ".join(f"{a['resource']} ({a['scope']})" for a in attached)
    return f"{what}, a gate where attached: {where}"


@skill.command("remove")
@click.argument("name")
def skill_remove(name: str) -> None:
    """Remove skill NAME (its tools and validations stay in the catalog)."""
    from ._common import _catalog

    with _catalog(create=False) as catalog:
        catalog.remove_skill(name)
    click.echo(f"removed skill {name} (its tools and validations stay in the catalog)")
