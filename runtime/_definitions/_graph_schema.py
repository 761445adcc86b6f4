"""The JSON Schema of the plan graph format, generated from the models that read it.

``PlanGraph.model_json_schema()`` describes the models; a file says a little more than the
models hold, because the loader reads a few shorthands before the models see them. Each
difference is written once here, where the schema is adjusted to what a file may say:

- ``needs: build`` is ``needs: [build]``;
- a tool's ``read_only``, ``writes`` and ``checkpointable`` are short for its
  ``capability``, and its ``source`` is inferred from ``code``, ``entrypoint`` or
  ``mcp_server``;
- an item of ``tools`` may be a validation (``tool_type: validation``, or ``mode``,
  ``wraps`` or ``transform``);
- an item of ``skills`` may be the name of a skill of the catalog;
- an MCP server under ``mcp_servers`` takes its name from its key.

What no schema can say (names resolve, no cycle, a criterion binds a required validation)
is for ``gategraph check``.
"""

from __future__ import annotations

import copy
import functools
from typing import Any, Final

from gategraph.runtime._version import __version__

__all__ = ["SCHEMA_ID", "graph_schema"]

SCHEMA_ID: Final = "urn:gategraph:plan-graph:1"
_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


@functools.cache
def _generated() -> dict[str, Any]:
    from ._graph import PlanGraph

    return PlanGraph.model_json_schema(mode="validation", schema_generator=_described())


def _described() -> type[Any]:
    """A schema generator that describes each field by the docstring under it.

    pydantic's ``use_attribute_docstrings`` would read them when each model class is made,
    which reads the source of every model on every start (a sixth of a first run's time):
    the schema is the only place that needs them, so they are read here."""
    from pydantic.json_schema import GenerateJsonSchema

    class Described(GenerateJsonSchema):
        def model_schema(self, schema: Any) -> Any:
            found = super().model_schema(schema)
            _describe_fields(self.resolve_ref_schema(found), schema["cls"])
            return found

        def dataclass_schema(self, schema: Any) -> Any:
            found = super().dataclass_schema(schema)
            _describe_fields(self.resolve_ref_schema(found), schema["cls"])
            return found

    return Described


def _describe_fields(model: dict[str, Any], cls: type[Any]) -> None:
    """Give each property of ``model`` without a description the docstring under its
    field in ``cls`` (or a base class), by the field's name or alias."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        docs.update(_attribute_docs(klass))
    fields = getattr(cls, "__pydantic_fields__", {})
    for name, text in docs.items():
        info = fields.get(name)
        key = (getattr(info, "alias", None) or name) if info is not None else name
        field = model.get("properties", {}).get(key)
        if isinstance(field, dict) and "description" not in field:
            field["description"] = text


def _attribute_docs(cls: type[Any]) -> dict[str, str]:
    """The docstrings under the annotated attributes of ``cls``'s own body."""
    import ast
    import inspect
    import itertools
    import textwrap

    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    found = next((n for n in ast.parse(source).body if isinstance(n, ast.ClassDef)), None)
    statements = found.body if found is not None else []
    docs: dict[str, str] = {}
    for first, second in itertools.pairwise(statements):
        if (
            isinstance(first, ast.AnnAssign)
            and isinstance(first.target, ast.Name)
            and isinstance(second, ast.Expr)
            and isinstance(second.value, ast.Constant)
            and isinstance(second.value.value, str)
        ):
            docs[first.target.id] = inspect.cleandoc(second.value.value)
    return docs


def graph_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a plan graph file, format version 1."""
    from gategraph.runtime._data._models import NAME_PATTERN

    from ._graph import NODE_ID_PATTERN as ID_PATTERN

    schema = copy.deepcopy(_generated())
    defs: dict[str, Any] = schema["$defs"]
    for model in defs.values():
        _for_people(model)
    _for_people(schema)
    props = schema["properties"]

    # One name or a list of them: `needs: build`, `resources: repo`, `validations: a`.
    for model, field in (
        ("Node", "needs"),
        ("Node", "resources"),
        ("AcceptanceCriterion", "validations"),
        ("ApprovalPolicy", "auto_approve"),
    ):
        _one_or_many(defs[model]["properties"], field)

    # Names and ids as the loader checks them.
    props["name"]["pattern"] = NAME_PATTERN
    for model in ("Tool", "Validation", "Skill"):
        defs[model]["properties"]["name"]["pattern"] = NAME_PATTERN
    defs["Node"]["properties"]["id"]["pattern"] = ID_PATTERN
    props["nodes"]["minItems"] = 1
    # A node runs exactly one thing.
    defs["Node"]["oneOf"] = [{"required": [f]} for f in ("tool", "validation", "uses")]

    # A tool's shorthands, its source inferred, and `resource_slots: [root]`.
    for name in ("Tool", "Validation"):
        tool = defs[name]
        for flag in ("read_only", "writes", "checkpointable"):
            tool["properties"][flag] = {
                "type": "boolean",
                "description": f"Short for `capability.{flag}`.",
            }
        tool["properties"]["resource_slots"]["items"] = {
            "anyOf": [
                {"$ref": "#/$defs/ResourceSlot"},
                {"type": "string", "description": "A slot by its name alone."},
            ]
        }
        tool["required"] = [f for f in tool.get("required", []) if f != "source"]
        sources = ["code", "entrypoint", "mcp_server", "source"]
        if name == "Validation":
            sources.append("wraps")
        tool["anyOf"] = [{"required": [f]} for f in sources]

    # An item of `tools` may be a validation.
    props["tools"]["items"] = {"anyOf": [{"$ref": "#/$defs/Tool"}, {"$ref": "#/$defs/Validation"}]}

    # An item of `skills` may name a catalog skill.
    props["skills"]["items"] = {
        "anyOf": [
            {"$ref": "#/$defs/Skill"},
            {"type": "string", "description": "The name of a skill of the catalog."},
        ]
    }

    # An MCP server's name is its key; it is reached one way; numbers are read as text.
    server = defs["McpServer"]
    server.pop("required", None)
    server["oneOf"] = [{"required": ["command"]}, {"required": ["url"]}]
    scalar = {"type": ["string", "number", "boolean"]}
    server["properties"]["args"]["items"] = scalar
    for field in ("env", "headers"):
        server["properties"][field]["additionalProperties"] = scalar

    props["version"] = {
        "const": 1,
        "type": "integer",
        "description": "The format version: always 1 for now.",
    }
    return {
        "$schema": _DIALECT,
        "$id": SCHEMA_ID,
        "title": "gategraph plan graph",
        "description": (
            "A plan for gategraph: the resources it works on, its tools and validations, the "
            "nodes that call them, its acceptance criteria and its policy. "
            f"Generated by gategraph {__version__} (`gategraph schema`)."
        ),
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


def _one_or_many(properties: dict[str, Any], field: str) -> None:
    """Let ``field`` (a list of names, perhaps nullable) be one name too."""
    old = properties[field]
    options = old.get("anyOf", [old])
    listed = next(o for o in options if o.get("type") == "array")
    one: dict[str, Any] = {"type": "string"}
    new: dict[str, Any] = {"anyOf": [one, {"type": "array", "items": listed.get("items", one)}]}
    if any(o.get("type") == "null" for o in options):
        new["anyOf"].append({"type": "null"})
    for key in ("description", "default"):
        if key in old:
            new[key] = old[key]
    properties[field] = new


def _for_people(model: dict[str, Any]) -> None:
    """A model's description as a person reads it: its first paragraph (the rest is notes
    for gategraph's own developers), without the reST markup of the docstrings."""
    description = model.get("description")
    if isinstance(description, str):
        model["description"] = _plain(description.split("\n\n", 1)[0])
    for field in model.get("properties", {}).values():
        text = field.get("description")
        if isinstance(text, str):
            field["description"] = _plain(text)
        field.pop("title", None)
    model.pop("title", None)


def _plain(text: str) -> str:
    import re

    text = " ".join(text.split())
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)  # :class:`Foo` → `Foo`
    text = text.replace("``None``", "leaving it out").replace("``", "`")
    return text
