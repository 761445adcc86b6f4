"""Skills: named compositions of tools and validations (seed 000, "Validations in Actor
Graphs and Skills").

A skill says which tools and validations belong together — ``review: [python_syntax, ruff,
lint-clean]`` — so they can be handed to an agent as one set: served by ``gategraph mcp
serve --skill``, given to a pydantic-ai agent (``CatalogToolset(skills=...)``), or called
by a plan's execution actor on its sandboxes (``request.skills``). Being in a skill makes a
validation *callable*; only an attachment (or a plan's own validation nodes) makes it a
*gate*: what an agent calls through a skill never enters a verdict and never blocks Apply.

Skills live in the catalog (``gategraph skill add``) and in plan graphs (``skills:``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Self

from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._yaml import Document
from gategraph.runtime._data._models import ToolName, _Model, explain_issues
from pydantic import ValidationError, field_validator

__all__ = ["Skill", "names_of"]


class Skill(_Model):
    """A named set of tools and validations that are handed to an agent together.

    Membership makes a tool or validation callable by whoever is given the skill; it never
    makes a validation gate a plan (attach it for that).
    """

    name: ToolName
    """The skill's name (the same rule as tool names)."""
    description: str = ""
    """What the skill is for, for people and for the agents it is given to."""
    tools: tuple[ToolName, ...]
    """The names of its tools and validations (one namespace), in the order they are
    offered; at least one, none twice."""

    @field_validator("tools", mode="before")
    @classmethod
    def _a_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(f"must be a list of tool or validation names, not a string: [{value}]")
        if isinstance(value, list | tuple) and not value:
            raise ValueError("must list at least one tool or validation")
        return value

    @field_validator("tools")
    @classmethod
    def _members(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        from gategraph.runtime._data._validator_declarations import VALIDATOR_TOOLS

        seen: set[str] = set()
        for name in value:
            if name in seen:
                raise ValueError(f"{name!r} is listed twice")
            seen.add(name)
            if name in VALIDATOR_TOOLS:
                # Served only on purpose (`mcp serve --validators`): a skill must not be a
                # way round that.
                raise ValueError(
                    f"{name!r} is a validator tool: it is served with `gategraph mcp serve "
                    "--validators`, not through skills"
                )
        return value

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | Document, *, source: str | None = None
    ) -> Self:
        """Build a skill from a configuration mapping (a parsed YAML or JSON file).

        Raises :class:`ConfigError` listing every problem, each naming its field (and, for
        a :class:`Document`, its line and column).
        """
        doc = config if isinstance(config, Document) else Document(config, source or "")
        if not isinstance(doc.data, Mapping):
            raise ConfigError.at(
                "", "a skill configuration must be a mapping of fields", source=doc.source or None
            )
        try:
            return cls.model_validate(dict(doc.data))
        except ValidationError as exc:
            issues = doc.errors_from(exc).issues
        raise ConfigError(explain_issues(issues, list(cls.model_fields)), source=doc.source or None)

    def as_config(self) -> dict[str, Any]:
        """The fields a file given to ``gategraph skill add --config`` has."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["tools"] = list(self.tools)
        return out


def names_of(value: str | Iterable[str]) -> list[str]:
    """Names given as one name or several: one name is a name, not its letters."""
    return [value] if isinstance(value, str) else list(value)
