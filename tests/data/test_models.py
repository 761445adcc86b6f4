"""The domain model: Tool, Validation, forced constraints, wraps rules (seeds 000 and 004)."""

from __future__ import annotations

from typing import Any

import pytest
from gategraph.runtime import (
    Attachment,
    AttachmentId,
    Capability,
    ConfigError,
    Scope,
    Tool,
    ToolSource,
    ToolType,
    Validation,
    ValidationMode,
    tool_from_config,
)
from hypothesis import given, settings
from hypothesis import strategies as st

CODE = "def run(**arguments):\n    return {'passed': True}\n"


def validation(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "v", "code": CODE}
    base.update(fields)
    return base


class TestForcedConstraints:
    """seed 004, "Forced Constraints"."""

    def test_constructing_forces_read_only_flags(self) -> None:
        """A Validation built with a writing capability is forced read-only."""
        v = Validation(
            name="v",
            source=ToolSource.CODE,
            code=CODE,
            capability=Capability(writes=True),
        )
        assert v.capability == Capability(read_only=True, writes=False, checkpointable=False)
        assert v.tool_type is ToolType.VALIDATION

    def test_defaults(self) -> None:
        """mode defaults to required; validations are idempotent; tools are not by default."""
        v = Validation.from_config(validation())
        assert v.mode is ValidationMode.REQUIRED
        assert v.idempotent is True
        assert v.source is ToolSource.CODE
        t = Tool.from_config({"name": "t", "entrypoint": "pkg.mod:fn"})
        assert t.idempotent is False
        assert t.source is ToolSource.PYTHON
        assert t.tool_type is ToolType.TOOL

    @pytest.mark.parametrize(
        ("fields", "field"),
        [
            ({"writes": True}, "writes"),
            ({"read_only": False}, "read_only"),
            ({"checkpointable": True}, "checkpointable"),
            ({"capability": {"writes": True}}, "capability.writes"),
            ({"capability": {"read_only": False}}, "capability.read_only"),
            ({"capability": {"checkpointable": True}}, "capability.checkpointable"),
        ],
    )
    def test_config_declaring_a_write_is_rejected(self, fields: dict[str, Any], field: str) -> None:
        """seed 000, Constraints: registering a validation with writes: true is rejected."""
        with pytest.raises(ConfigError) as info:
            Validation.from_config(validation(**fields))
        assert info.value.field == field
        assert "always read-only" in str(info.value)

    def test_config_agreeing_with_the_forced_flags_is_accepted(self) -> None:
        """Stating the read-only flags explicitly is fine."""
        v = Validation.from_config(
            validation(writes=False, read_only=True, capability={"checkpointable": False})
        )
        assert v.capability.read_only is True

    def test_non_boolean_flag_is_rejected(self) -> None:
        """`writes: "no"` is not silently accepted."""
        with pytest.raises(ConfigError, match="writes: must be true or false"):
            Validation.from_config(validation(writes="no"))

    def test_tool_type_other_than_validation_is_rejected(self) -> None:
        """A validation config cannot claim to be a plain tool."""
        with pytest.raises(ConfigError, match="tool_type"):
            Validation.from_config(validation(tool_type="tool"))

    def test_tool_with_contradictory_capability(self) -> None:
        """A tool cannot be both read_only and writes."""
        with pytest.raises(ConfigError, match="both read_only and writes"):
            Tool.from_config({"name": "t", "code": CODE, "read_only": True, "writes": True})

    def test_tool_capability_shorthand(self) -> None:
        """Top-level `writes: true` on a tool is shorthand for capability.writes."""
        t = Tool.from_config({"name": "t", "code": CODE, "writes": True})
        assert t.capability.writes is True


class TestWrapsRules:
    """seed 004, "Wraps Semantics"."""

    def test_wraps_auto_detects_wrapped_source(self) -> None:
        """from_config sets source=wrapped when wraps is present."""
        v = Validation.from_config(
            {"name": "v", "wraps": "ruff", "transform": "{'passed': output == 0}"}
        )
        assert v.source is ToolSource.WRAPPED

    def test_wraps_needs_transform(self) -> None:
        """A wrapping validation without transform is refused."""
        with pytest.raises(ConfigError, match="needs a `transform`"):
            Validation.from_config({"name": "v", "wraps": "ruff"})

    def test_wraps_and_code_are_exclusive(self) -> None:
        """wraps and code cannot both be set."""
        with pytest.raises(ConfigError, match="mutually exclusive"):
            Validation.from_config(
                {"name": "v", "wraps": "ruff", "transform": "output", "code": CODE}
            )

    def test_wraps_requires_wrapped_source(self) -> None:
        """An explicit source other than wrapped conflicts with wraps."""
        with pytest.raises(ConfigError, match="source 'wrapped'"):
            Validation.from_config(
                {"name": "v", "wraps": "ruff", "transform": "output", "source": "code"}
            )

    def test_argument_mapping_only_with_wraps(self) -> None:
        """argument_mapping without wraps is refused."""
        with pytest.raises(ConfigError, match="only valid with `wraps`"):
            Validation.from_config(validation(argument_mapping={"a": "$b"}))

    def test_transform_only_with_wraps(self) -> None:
        """transform without wraps is refused."""
        with pytest.raises(ConfigError, match="only valid with `wraps`"):
            Validation.from_config(validation(transform="output"))

    def test_wrapped_source_without_wraps(self) -> None:
        """source: wrapped needs wraps."""
        with pytest.raises(ConfigError, match="needs `wraps`"):
            Validation.from_config({"name": "v", "source": "wrapped"})

    def test_cannot_wrap_itself(self) -> None:
        """A validation naming itself in wraps is refused."""
        with pytest.raises(ConfigError, match="cannot wrap itself"):
            Validation.from_config({"name": "v", "wraps": "v", "transform": "output"})

    def test_plain_tool_cannot_be_wrapped_source(self) -> None:
        """Only validations wrap."""
        with pytest.raises(ConfigError, match="only for validations"):
            Tool.from_config({"name": "t", "source": "wrapped"})

    @pytest.mark.parametrize(
        "transform",
        [
            "{'passed': output['exit_code'] == 0}",
            "def transform(output):\n    return {'passed': not output}\n",
            "import json\ndef transform(output):\n    return json.loads(output)\n",
        ],
    )
    def test_transform_forms(self, transform: str) -> None:
        """A transform is an expression over `output` or code defining transform(output)."""
        v = Validation.from_config({"name": "v", "wraps": "t", "transform": transform})
        assert v.transform == transform

    @pytest.mark.parametrize(
        ("transform", "message"),
        [
            ("x = 1\n", "defining `def transform"),
            ("def transform(:", "syntax error"),
            ("   ", "must not be empty"),
        ],
    )
    def test_bad_transform(self, transform: str, message: str) -> None:
        """A transform that is neither form is refused at registration."""
        with pytest.raises(ConfigError, match=message):
            Validation.from_config({"name": "v", "wraps": "t", "transform": transform})

    def test_inherit_from(self) -> None:
        """input_schema, resource_slots and timeout come from the wrapped tool unless set."""
        tool = Tool.from_config(
            {
                "name": "t",
                "entrypoint": "m:f",
                "timeout": 9,
                "resource_slots": ["repo"],
                "input_schema": {"type": "object"},
            }
        )
        v = Validation.from_config({"name": "v", "wraps": "t", "transform": "output"})
        got = v.inherit_from(tool)
        assert got.timeout == 9
        assert [s.name for s in got.resource_slots] == ["repo"]
        assert got.input_schema == {"type": "object"}
        own = Validation.from_config(
            {"name": "v", "wraps": "t", "transform": "output", "timeout": 2}
        ).inherit_from(tool)
        assert own.timeout == 2
        with pytest.raises(ValueError, match="wraps 't'"):
            v.inherit_from(Tool.from_config({"name": "other", "entrypoint": "m:f"}))


class TestSources:
    def test_source_inferred(self) -> None:
        """code → code, entrypoint → python, mcp_server → mcp."""
        assert Tool.from_config({"name": "a", "code": CODE}).source is ToolSource.CODE
        assert Tool.from_config({"name": "a", "entrypoint": "a.b:c"}).source is ToolSource.PYTHON
        mcp = Tool.from_config({"name": "a", "mcp_server": "srv", "mcp_tool_name": "lint"})
        assert mcp.source is ToolSource.MCP

    def test_no_implementation(self) -> None:
        """A tool with no code, entrypoint or MCP server is refused with a hint."""
        with pytest.raises(ConfigError, match="give exactly one of"):
            Tool.from_config({"name": "a"})

    @pytest.mark.parametrize(
        ("config", "message"),
        [
            ({"name": "a", "source": "code"}, "needs `code`"),
            ({"name": "a", "source": "python"}, "needs `entrypoint`"),
            ({"name": "a", "source": "mcp", "mcp_server": "s"}, "needs `mcp_server` and"),
            ({"name": "a", "source": "code", "code": CODE, "entrypoint": "a:b"}, "does not use"),
            ({"name": "a", "entrypoint": "not an entrypoint"}, "not an entrypoint"),
            ({"name": "a", "code": "def run(:"}, "syntax error"),
            ({"name": "a", "code": ""}, "must not be empty"),
            ({"name": "a", "code": CODE, "timeout": 0}, "greater than 0"),
            ({"name": "a", "code": CODE, "input_schema": {"type": 5}}, "not a valid JSON Schema"),
            ({"name": "a b", "code": CODE}, "not a valid name"),
            ({"name": "a", "code": CODE, "hooks": {"setup": "nope"}}, "not an entrypoint"),
            ({"name": "a", "code": CODE, "tool_type": "validation"}, "must be 'tool'"),
        ],
    )
    def test_bad_tool_config(self, config: dict[str, Any], message: str) -> None:
        """Each broken rule is a ConfigError naming it."""
        with pytest.raises(ConfigError, match=message):
            Tool.from_config(config)

    @pytest.mark.parametrize(
        "name", ["pytest", "lint.ruff", "no-hallucinated-paths", "_x", "a.b.c_d"]
    )
    def test_good_names(self, name: str) -> None:
        """Names are identifier-like words joined by dots."""
        assert Tool.from_config({"name": name, "code": CODE}).name == name

    @pytest.mark.parametrize("name", ["", "1abc", "a..b", "a.", ".a", "a b", "a/b", "x" * 129])
    def test_bad_names(self, name: str) -> None:
        """Anything else is refused."""
        with pytest.raises(ConfigError, match="name"):
            Tool.from_config({"name": name, "code": CODE})


class TestConfigErrors:
    def test_all_problems_at_once_in_file_order(self) -> None:
        """Several mistakes are reported together, each naming its field."""
        with pytest.raises(ConfigError) as info:
            Validation.from_config(
                {"name": "bad name", "writes": True, "timeout": -1, "colour": "x", "code": CODE},
                source="v.yaml",
            )
        fields = {issue.field for issue in info.value.issues}
        assert {"name", "writes", "timeout", "colour"} <= fields
        for line in str(info.value).splitlines():
            assert line.startswith("v.yaml: ")

    def test_unknown_field_suggests(self) -> None:
        """A misspelt field gets a suggestion."""
        with pytest.raises(
            ConfigError, match=r"timout: unknown field \(did you mean 'timeout'\?\)"
        ):
            Tool.from_config({"name": "a", "code": CODE, "timout": 1})

    @pytest.mark.parametrize("config", [None, [], "name: x", 3])
    def test_not_a_mapping(self, config: Any) -> None:
        """A configuration must be a mapping."""
        with pytest.raises(ConfigError, match="must be a mapping"):
            Validation.from_config(config)

    def test_tool_from_config_dispatches(self) -> None:
        """tool_from_config builds a Validation for validation configs."""
        assert isinstance(tool_from_config(validation(tool_type="validation")), Validation)
        assert isinstance(tool_from_config(validation(mode="informational")), Validation)
        assert type(tool_from_config({"name": "t", "code": CODE})) is Tool


class TestCliDict:
    def test_stable_order(self) -> None:
        """as_cli_dict has a fixed field order with identity first and defaults omitted."""
        v = Validation.from_config(
            {
                "timeout": 5,
                "transform": "output",
                "wraps": "t",
                "description": "d",
                "name": "v",
                "mode": "informational",
            }
        )
        out = v.as_cli_dict()
        assert list(out) == [
            "name",
            "tool_type",
            "mode",
            "description",
            "source",
            "wraps",
            "transform",
            "capability",
            "timeout",
        ]
        assert out["capability"] == {"read_only": True, "writes": False, "checkpointable": False}
        assert out["mode"] == "informational"

    def test_round_trip(self) -> None:
        """A dict from as_cli_dict builds the same validation again."""
        v = Validation.from_config(
            validation(
                description="x",
                resource_slots=[{"name": "repo", "kind": "directory"}],
                hooks={"setup": "a.b:c"},
                output_schema={"type": "object"},
            )
        )
        assert Validation.from_config(v.as_cli_dict()) == v

    def test_tool_order(self) -> None:
        """A tool's dict starts with name, tool_type, description, source."""
        t = Tool.from_config({"name": "t", "entrypoint": "a:b", "description": "d"})
        assert list(t.as_cli_dict())[:4] == ["name", "tool_type", "description", "source"]


class TestAttachmentModel:
    def test_scope_fields_must_agree(self) -> None:
        """A project attachment names a project, a plan attachment a plan, a direct one neither."""
        Attachment(id=AttachmentId("x"), validation="v", resource="r", scope=Scope.DIRECT)
        with pytest.raises(ValueError, match="direct"):
            Attachment(
                id=AttachmentId("x"), validation="v", resource="r", scope=Scope.DIRECT, plan="p"
            )
        with pytest.raises(ValueError, match="project attachment"):
            Attachment(id=AttachmentId("x"), validation="v", resource="r", scope=Scope.PROJECT)
        with pytest.raises(ValueError, match="plan attachment"):
            Attachment(
                id=AttachmentId("x"),
                validation="v",
                resource="r",
                scope=Scope.PLAN,
                plan="p",
                project="q",
            )

    def test_specificity(self) -> None:
        """plan > project > direct."""
        make = lambda scope, **kw: Attachment(  # noqa: E731
            id=AttachmentId("x"), validation="v", resource="r", scope=scope, **kw
        )
        assert (
            make(Scope.PLAN, plan="p").specificity
            > make(Scope.PROJECT, project="q").specificity
            > make(Scope.DIRECT).specificity
        )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "name",
        "description",
        "source",
        "input_schema",
        "output_schema",
        "capability",
        "resource_slots",
        "hooks",
        "code",
        "entrypoint",
        "mcp_server",
        "mcp_tool_name",
        "timeout",
        "idempotent",
        "tool_type",
        "mode",
        "wraps",
        "transform",
        "argument_mapping",
        "writes",
        "read_only",
        "checkpointable",
    ]
)
configs = st.dictionaries(field_names | st.text(max_size=8), json_values, max_size=8)


@settings(max_examples=300, deadline=None)
@given(configs)
def test_random_validation_configs_raise_only_config_error(config: dict[str, Any]) -> None:
    """Nothing but ConfigError escapes from_config, whatever the input."""
    try:
        v = Validation.from_config(config)
    except ConfigError as exc:
        assert str(exc)
    else:
        assert v.capability.read_only and not v.capability.writes


@settings(max_examples=300, deadline=None)
@given(configs | json_values)
def test_random_tool_configs_raise_only_config_error(config: Any) -> None:
    """Nothing but ConfigError escapes tool_from_config, whatever the input."""
    try:
        tool_from_config(config)
    except ConfigError as exc:
        assert str(exc)
