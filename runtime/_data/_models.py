"""The domain model: tools, validations and attachments (seeds 000 and 004).

A :class:`Validation` IS-A :class:`Tool` (seed 000, "Relationship to Tool"): it adds a mode,
wrapping, and the read-only guarantee. Tools and validations share one namespace.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, ClassVar, Final, NewType, Self

from gategraph.runtime._base._exceptions import ConfigError, ConfigIssue
from gategraph.runtime._base._yaml import Document, format_path
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "NAME_PATTERN",
    "Attachment",
    "AttachmentId",
    "Capability",
    "ResourceSlot",
    "Scope",
    "Tool",
    "ToolHooks",
    "ToolSource",
    "ToolType",
    "Validation",
    "ValidationMode",
]

AttachmentId = NewType("AttachmentId", str)
"""A ULID naming one attachment, assigned by the catalog."""

NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$"
"""Tool and validation names: identifier-like words joined by dots, at most 128 characters.

Letters, digits, ``_`` and ``-``; each dot-separated part starts with a letter or ``_``.
Examples: ``pytest``, ``lint.ruff``, ``no-hallucinated-paths``.
"""

ENTRYPOINT_PATTERN: Final = (
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
    r"(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)

_NAME_RE: Final = re.compile(NAME_PATTERN)
_ENTRYPOINT_RE: Final = re.compile(ENTRYPOINT_PATTERN)


def _check_name(value: str) -> str:
    if not 1 <= len(value) <= 128 or not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"{value[:60]!r} is not a valid name: use letters, digits, '_' and '-' in "
            "dot-separated parts that each start with a letter or '_' (at most 128 characters)"
        )
    return value


def _check_entrypoint(value: str) -> str:
    if len(value) > 512 or not _ENTRYPOINT_RE.fullmatch(value):
        raise ValueError(f"{value[:60]!r} is not an entrypoint: write 'package.module:callable'")
    return value


ToolName = Annotated[str, AfterValidator(_check_name)]
Entrypoint = Annotated[str, AfterValidator(_check_entrypoint)]


class ToolType(enum.StrEnum):
    """Whether a catalog entry is a plain tool or a validation."""

    TOOL = "tool"
    VALIDATION = "validation"


class ToolSource(enum.StrEnum):
    """Where a tool's implementation comes from."""

    CODE = "code"
    """Inline Python in ``code``; it defines ``run(**arguments)`` (sync or async)."""
    PYTHON = "python"
    """A callable named by ``entrypoint`` (``"package.module:callable"``)."""
    MCP = "mcp"
    """A tool ``mcp_tool_name`` served by the MCP server ``mcp_server``."""
    WRAPPED = "wrapped"
    """Another tool, named by ``wraps``, whose output ``transform`` reads (validations only)."""


class ValidationMode(enum.StrEnum):
    """Whether a failing validation blocks the plan (seed 000, "Validation Mode")."""

    REQUIRED = "required"
    """Must pass before Apply."""
    INFORMATIONAL = "informational"
    """Recorded and shown; never blocks."""


class Scope(enum.StrEnum):
    """How widely an attachment applies (seed 000, "Attachment Scoping")."""

    DIRECT = "direct"
    """Always active for the resource."""
    PROJECT = "project"
    """Active when the resource is used through the named project."""
    PLAN = "plan"
    """Active only for the named plan."""


SCOPE_SPECIFICITY: Final = {Scope.DIRECT: 0, Scope.PROJECT: 1, Scope.PLAN: 2}


# The keywords of an object schema that no empty object can break: with only these (and
# `type: object`, and `required` empty), `{}` passes (JSON Schema 2020-12, §10.3.2 and
# the validation vocabulary's §6.5).
_EMPTY_OBJECT_PASSES: Final = frozenset(
    {
        *("$schema", "$id", "$comment", "title", "description", "default", "examples"),
        *("properties", "patternProperties", "additionalProperties", "propertyNames"),
        *("dependentRequired", "dependentSchemas", "maxProperties", "unevaluatedProperties"),
        *("type", "required", "deprecated", "readOnly", "writeOnly"),
    }
)


def _takes_nothing(schema: Mapping[str, Any]) -> bool:
    """Whether the empty object surely passes ``schema``, without a validator."""
    kind = schema.get("type", "object")
    properties = schema.get("properties") or {}
    return (
        set(schema) <= _EMPTY_OBJECT_PASSES
        and (kind == "object" or (isinstance(kind, list) and "object" in kind))
        and not schema.get("required")
        # Draft 3 says `required: true` inside the property it requires.
        and isinstance(properties, Mapping)
        and not any(isinstance(p, Mapping) and "required" in p for p in properties.values())
    )


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        validate_default=True,
        str_strip_whitespace=False,
    )


class Capability(_Model):
    """What a tool may do to the resources it is given."""

    read_only: bool = False
    """The tool only reads. Forced ``True`` for validations."""
    writes: bool = False
    """The tool changes resources. Forced ``False`` for validations."""
    checkpointable: bool = False
    """The tool's effects can be checkpointed and rolled back. Forced ``False`` for validations."""

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.read_only and self.writes:
            raise ValueError("a tool cannot be both read_only and writes")
        return self


class ResourceSlot(_Model):
    """A named resource a tool works on (for example the repository it checks)."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]
    """The argument name the resource is passed under."""
    kind: str = "any"
    """The kind of resource expected (``directory``, ``memory``, ``any``)."""
    description: str = ""
    """What the slot is for."""
    required: bool = True
    """Whether a call without this resource is an error."""
    disposable: bool = False
    """Give each call a copy of the folder that is thrown away after it, not the folder
    itself (an MCP tool's slot): for a tool that writes caches while it only reads, as
    git refreshes its index. The copy has the real folder's git metadata (the objects
    are read where they are). It costs a copy of the folder per call."""


class ToolHooks(_Model):
    """Lifecycle hooks, each an entrypoint ``"package.module:callable"``."""

    setup: Entrypoint | None = None
    """Called once before the tool's first call in a plan run."""
    teardown: Entrypoint | None = None
    """Called once after the tool's last call in a plan run, even after a failure."""


def _compile_check(code: str, field: str, mode: str = "exec") -> None:
    try:
        compile(code, f"<{field}>", mode)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        raise ValueError(f"Python syntax error{where}: {exc.msg}") from None
    except ValueError as exc:  # e.g. NUL bytes in the source
        raise ValueError(f"invalid Python source: {exc}") from None


# Top-level shorthands for the capability flags that a config file may use (seed 000 writes
# "Registration of a validation with writes: true is rejected").
_CAPABILITY_SHORTHANDS: Final = ("read_only", "writes", "checkpointable")


class Tool(_Model):
    """A unit of work a plan can call (seed 000, "Relationship to Tool").

    Build one from a configuration mapping with :meth:`from_config`; the ``source`` is
    inferred from which of ``code``, ``entrypoint`` or ``mcp_server`` is given.
    """

    TYPE: ClassVar[ToolType] = ToolType.TOOL

    name: ToolName
    """Unique name in the shared tool/validation namespace (see :data:`NAME_PATTERN`)."""
    description: str = ""
    """What the tool does, for people and for strategy actors."""
    source: ToolSource
    """Where the implementation comes from; inferred by :meth:`from_config` when omitted."""
    input_schema: dict[str, Any] | None = None
    """JSON Schema of the arguments."""
    output_schema: dict[str, Any] | None = None
    """JSON Schema of the output."""
    capability: Capability = Capability()
    """What the tool may do to its resources."""
    resource_slots: tuple[ResourceSlot, ...] = ()
    """The resources the tool works on."""
    hooks: ToolHooks = ToolHooks()
    """Lifecycle hooks."""
    code: str | None = None
    """Inline Python defining ``run(**arguments)`` (``source: code``)."""
    entrypoint: Entrypoint | None = None
    """``"package.module:callable"`` (``source: python``)."""
    mcp_server: str | None = None
    """The MCP server serving the tool (``source: mcp``)."""
    mcp_tool_name: str | None = None
    """The tool's name on that server (``source: mcp``)."""
    timeout: Annotated[float, Field(gt=0, le=86_400)] | None = None
    """Seconds a call may take; ``None`` uses the plan policy's default."""
    idempotent: bool = False
    """Calling twice with the same arguments has the effect of calling once."""
    network: bool = False
    """The code uses the network (a web API, a package index, a service on another
    machine). Without it, the sandbox lets it open no internet socket, and the in-process
    guard refuses a validation's connections, datagrams and name lookups; with it, both
    let it reach the network (a wrapped tool runs under the declaration of the validation
    that wraps it)."""
    untrusted: bool = False
    """Code gategraph should not trust (a plugin's, an agent's, one from elsewhere): its
    code always runs in the sandbox (``isolation: sandbox``), whatever a node asks, and
    is never imported or run in gategraph's own process, not even to check it."""
    plugin: str | None = None
    """The installed package this comes from (its distribution's name), for a plugin's
    validation: it is untrusted, whatever its declaration says."""
    tool_type: ToolType = ToolType.TOOL
    """``tool`` or ``validation``; fixed by the class."""

    @field_validator("resource_slots", mode="before")
    @classmethod
    def _slot_shorthand(cls, value: Any) -> Any:
        # `resource_slots: [repo, docs]` is the common case; expand names to slots.
        if isinstance(value, list | tuple):
            return [{"name": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("input_schema", "output_schema")
    @classmethod
    def _check_schema(
        cls, value: dict[str, Any] | None, info: ValidationInfo
    ) -> dict[str, Any] | None:
        # A built-in's schemas are gategraph's own, checked by its tests: not again on
        # every start (checking loads jsonschema and its metaschemas, ~50 ms).
        if value is not None and not (info.context and info.context.get("trusted")):
            from jsonschema import exceptions, validators

            try:
                validators.validator_for(value).check_schema(value)
            except exceptions.SchemaError as exc:
                where = format_path(list(exc.absolute_path))
                raise ValueError(
                    f"not a valid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
                ) from None
        return value

    @field_validator("code")
    @classmethod
    def _check_code(cls, value: str | None) -> str | None:
        if value is not None:
            if not value.strip():
                raise ValueError("must not be empty")
            _compile_check(value, "code")
        return value

    @field_validator("tool_type")
    @classmethod
    def _fixed_type(cls, value: ToolType) -> ToolType:
        if value is not cls.TYPE:
            raise ValueError(
                f"must be {cls.TYPE.value!r} for a {cls.TYPE.value}"
                f" (register a {value.value} as a {value.value})"
            )
        return value

    @model_validator(mode="after")
    def _source_fields(self) -> Self:
        self._check_source()
        return self

    def _check_source(self) -> None:
        source = self.source
        if (
            self.untrusted
            and source is ToolSource.MCP
            and (self.hooks.setup or self.hooks.teardown)
        ):
            # Hooks run where the tool's calls run; an MCP tool's run in its server, so
            # its hooks would run in gategraph itself, where untrusted code never runs.
            raise ValueError(
                "an untrusted MCP tool cannot have hooks (they would run in gategraph itself)"
            )
        if source is not ToolSource.MCP and any(slot.disposable for slot in self.resource_slots):
            # Python code copies what it needs itself, and only when it needs it; a wrapped
            # validation's calls are its tool's, which decides.
            raise ValueError(
                "`disposable` slots are for MCP tools: mark the slot of the MCP tool a "
                "validation wraps; Python code asks its context for a copy "
                "(context.disposable_copy())"
            )
        if source is ToolSource.WRAPPED and self.tool_type is ToolType.TOOL:
            raise ValueError("source 'wrapped' is only for validations (see `wraps`)")
        if source is ToolSource.CODE and self.code is None:
            raise ValueError("source 'code' needs `code`")
        if source is ToolSource.PYTHON and self.entrypoint is None:
            raise ValueError("source 'python' needs `entrypoint`")
        if source is ToolSource.MCP and not (self.mcp_server and self.mcp_tool_name):
            raise ValueError("source 'mcp' needs `mcp_server` and `mcp_tool_name`")
        given = {
            "code": self.code is not None,
            "entrypoint": self.entrypoint is not None,
            "mcp_server": self.mcp_server is not None,
            "mcp_tool_name": self.mcp_tool_name is not None,
        }
        allowed = {
            ToolSource.CODE: {"code"},
            ToolSource.PYTHON: {"entrypoint"},
            ToolSource.MCP: {"mcp_server", "mcp_tool_name"},
            ToolSource.WRAPPED: set(),
        }[source]
        extra = sorted(k for k, v in given.items() if v and k not in allowed)
        if extra:
            raise ValueError(f"source {source.value!r} does not use {', '.join(extra)}")

    # -- configuration ---------------------------------------------------------------------

    @classmethod
    def _infer_source(cls, config: dict[str, Any]) -> None:
        if "source" in config:
            return
        present = [k for k in ("code", "entrypoint", "mcp_server") if config.get(k) is not None]
        if len(present) == 1:
            config["source"] = {
                "code": "code",
                "entrypoint": "python",
                "mcp_server": "mcp",
            }[present[0]]

    @classmethod
    def _prepare_config(cls, config: dict[str, Any], doc: Document) -> list[ConfigIssue]:
        """Normalise shorthands in place; return problems the model cannot see."""
        issues: list[ConfigIssue] = []
        capability = config.get("capability")
        for flag in _CAPABILITY_SHORTHANDS:
            if flag in config:
                value = config.pop(flag)
                if isinstance(capability, dict):
                    if flag in capability and capability[flag] != value:
                        issues.append(doc.issue([flag], f"contradicts capability.{flag}"))
                    capability[flag] = value
                elif capability is None:
                    capability = {flag: value}
                    config["capability"] = capability
        cls._infer_source(config)
        if "source" not in config:
            issues.append(
                doc.issue(
                    [],
                    "say where the implementation comes from: give exactly one of "
                    "`code`, `entrypoint` or `mcp_server` (or set `source`)",
                )
            )
        return issues

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | Document,
        *,
        source: str | None = None,
        trusted: bool = False,
    ) -> Self:
        """Build a model from a configuration mapping (a parsed YAML or JSON file).

        Raises :class:`ConfigError` listing every problem, each naming its field (and,
        for a :class:`Document`, its line and column). Nothing else escapes. ``trusted``
        is for gategraph's own configurations (the built-ins): their JSON Schemas are not
        checked again.
        """
        doc = config if isinstance(config, Document) else Document(config, source or "")
        if not isinstance(doc.data, Mapping):
            raise ConfigError.at(
                "",
                f"a {cls.TYPE.value} configuration must be a mapping of fields",
                source=doc.source or None,
            )
        data = dict(doc.data)
        issues = cls._prepare_config(data, doc)
        try:
            model = cls.model_validate(data, context={"trusted": True} if trusted else None)
        except ValidationError as exc:
            issues.extend(doc.errors_from(exc).issues)
            model = None
        except (TypeError, RecursionError) as exc:  # unhashable or absurd input
            issues.append(doc.issue([], f"cannot read the configuration: {exc}"))
            model = None
        if issues or model is None:
            raise ConfigError(cls._explain(issues), source=doc.source or None)
        return model

    @classmethod
    def _explain(cls, issues: list[ConfigIssue]) -> list[ConfigIssue]:
        """Order issues as they stand in the file and suggest names for unknown fields."""
        return explain_issues(issues, [*cls.model_fields, *_CAPABILITY_SHORTHANDS])

    def argument_problems(
        self, arguments: Mapping[str, Any]
    ) -> list[tuple[tuple[str | int, ...], str]]:
        """What is wrong with configured ``arguments`` for this tool, by ``input_schema``.

        Each problem is ``(path inside the arguments, message)``; none without a schema.
        Resource slots and the values the runtime passes itself (``artifact``, ``context``,
        ``inputs``) are not configured arguments and are not checked. A misspelled name is
        ``unknown argument`` with the closest known one.
        """
        schema = self.input_schema
        if not schema or not isinstance(arguments, Mapping):
            return []
        skip = {slot.name for slot in self.resource_slots} | {"artifact", "context", "inputs"}
        given = {k: v for k, v in arguments.items() if k not in skip}
        if not given and _takes_nothing(schema):
            return []  # the common node, with no arguments: no need to load jsonschema
        from jsonschema import validators

        validator = validators.validator_for(schema)(schema)
        known = list((schema.get("properties") or {}).keys())
        problems: list[tuple[tuple[str | int, ...], str]] = []
        unknown = set(given) - set(known)
        # A required name that an unknown one is a misspelling of is said once, as that.
        meant = {m for name in unknown for m in difflib.get_close_matches(name, known, n=1)}
        for error in validator.iter_errors(given):
            path = tuple(error.absolute_path)
            if error.validator == "additionalProperties" and not path:
                for name in sorted(unknown):
                    close = difflib.get_close_matches(name, known, n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    expected = ", ".join(known) if known else "none"
                    problems.append(
                        ((name,), f"unknown argument{hint}; {self.name!r} takes: {expected}")
                    )
            elif error.validator == "required" and not path:
                required: list[str] = list(error.validator_value or ())  # type: ignore[arg-type]
                problems.extend(
                    ((name,), f"missing argument (required by {self.name!r})")
                    for name in required
                    # A resource slot or a runtime value is passed by the run itself.
                    if name not in given and name not in meant and name not in skip
                )
            else:
                problems.append((path, error.message))
        return sorted(problems, key=lambda p: [str(part) for part in p[0]])

    def as_cli_dict(self) -> dict[str, Any]:
        """Return the fields in a stable order, JSON-compatible, for display and export.

        Fields left at their defaults are omitted except the identifying ones.
        """
        dumped = self.model_dump(mode="json", exclude_defaults=True)
        # `source` and `tool_type` are shown even at their defaults: they identify the entry.
        dumped["source"] = self.source.value
        dumped["tool_type"] = self.tool_type.value
        order = [n for n in self._cli_order() if n in dumped]
        order += sorted(k for k in dumped if k not in order)
        return {key: dumped[key] for key in order}

    @classmethod
    def _cli_order(cls) -> list[str]:
        return [
            "name",
            "tool_type",
            "description",
            "source",
            "entrypoint",
            "code",
            "mcp_server",
            "mcp_tool_name",
            "capability",
            "input_schema",
            "output_schema",
            "resource_slots",
            "hooks",
            "timeout",
            "idempotent",
        ]


class Validation(Tool):
    """A tool that verifies work and returns a structured pass/fail result (seeds 000, 004).

    Constructing one forces ``tool_type=validation`` and the read-only capability
    (``read_only=True``, ``writes=False``, ``checkpointable=False``). A *configuration*
    that explicitly asks for ``writes: true``, ``read_only: false`` or
    ``checkpointable: true`` is rejected by :meth:`from_config` instead (seed 000,
    "Constraints"). When ``wraps`` is given, ``source`` is ``wrapped``, ``transform`` is
    required and ``code`` is not allowed; ``argument_mapping`` is only valid with
    ``wraps`` (seed 004, "Wraps Semantics").
    """

    TYPE: ClassVar[ToolType] = ToolType.VALIDATION

    tool_type: ToolType = ToolType.VALIDATION
    """Always ``validation``."""
    idempotent: bool = True
    """Validations are read-only, so calling them again is harmless."""
    mode: ValidationMode = ValidationMode.REQUIRED
    """``required`` blocks Apply on failure; ``informational`` never does. Fixed at registration."""
    wraps: ToolName | None = None
    """Name of an existing tool whose output this validation interprets."""
    transform: str | None = None
    """Python reading ``output`` (the wrapped tool's return value): an expression, or code
    defining ``transform(output)``; its value is the structured result."""
    argument_mapping: dict[str, Any] | None = None
    """Arguments for the wrapped tool: ``{"tool_arg": "$validation_arg"}`` passes one of
    this validation's arguments on; any other value is passed as it is."""
    trust_read_only: bool = False
    """For a validation over an MCP tool (itself one, ``source: mcp``, or wrapping one):
    take the tool as read-only although its server does not declare it so
    (``readOnlyHint``). Without this (or the server's declaration) such a validation is
    refused; with it, each result records the trust in ``data["mcp"]["read_only"]``. It
    never overrides a server that says the tool is destructive (``destructiveHint``)."""
    reuse: bool = True
    """A later round of the same plan may reuse a passing result of this validation
    instead of calling it again, when nothing it is given has changed: its arguments, its
    artifact, the content of its resources, its own configuration and code. Set it to
    ``false`` for a validation whose result can change while all of that stays the same:
    one that reads the time, a service, or files outside its resources. A validation that
    declares ``network: true``, or calls an MCP server, is never reused."""

    @model_validator(mode="before")
    @classmethod
    def _force_read_only(cls, data: Any) -> Any:
        # seed 004, "Forced Constraints": constructing a Validation always forces these.
        if isinstance(data, Mapping):
            data = dict(data)
            data["capability"] = Capability(read_only=True, writes=False, checkpointable=False)
            data.setdefault("tool_type", ToolType.VALIDATION)
            if data.get("wraps") is not None and data.get("source") is None:
                data["source"] = ToolSource.WRAPPED
        return data

    @field_validator("transform")
    @classmethod
    def _check_transform(cls, value: str | None) -> str | None:
        if value is not None:
            if not value.strip():
                raise ValueError("must not be empty")
            try:
                compile(value, "<transform>", "eval")
            except SyntaxError:
                _compile_check(value, "transform")
                if not re.search(r"^\s*(async\s+)?def\s+transform\s*\(", value, re.MULTILINE):
                    raise ValueError(
                        "must be an expression over `output`, or code defining "
                        "`def transform(output): ...`"
                    ) from None
        return value

    def _check_source(self) -> None:
        # seed 004, "Wraps Semantics".
        if self.wraps is not None:
            if self.source is not ToolSource.WRAPPED:
                raise ValueError("a validation with `wraps` must have source 'wrapped'")
            if self.code is not None:
                raise ValueError("`wraps` and `code` are mutually exclusive")
            if self.transform is None:
                raise ValueError("a validation with `wraps` needs a `transform`")
            if self.wraps == self.name:
                raise ValueError("a validation cannot wrap itself")
        else:
            if self.source is ToolSource.WRAPPED:
                raise ValueError("source 'wrapped' needs `wraps` (the tool to wrap)")
            if self.argument_mapping is not None:
                raise ValueError("`argument_mapping` is only valid with `wraps`")
            if self.transform is not None:
                raise ValueError("`transform` is only valid with `wraps`")
        if self.trust_read_only and self.source not in (ToolSource.MCP, ToolSource.WRAPPED):
            raise ValueError(
                "`trust_read_only` is only for a validation over an MCP tool (source 'mcp', "
                "or one that wraps one)"
            )
        super()._check_source()

    @classmethod
    def _prepare_config(cls, config: dict[str, Any], doc: Document) -> list[ConfigIssue]:
        issues: list[ConfigIssue] = []
        # seed 000, "Constraints": registration of a validation with writes: true is rejected.
        forbidden = {"writes": True, "read_only": False, "checkpointable": True}
        capability = config.get("capability")
        for flag, bad in forbidden.items():
            if flag in config and not isinstance(config[flag], bool):
                issues.append(doc.issue([flag], "must be true or false"))
            elif flag in config and config[flag] is bad:
                issues.append(
                    doc.issue(
                        [flag],
                        f"a validation is always read-only; remove `{flag}: {str(bad).lower()}`",
                    )
                )
            if isinstance(capability, Mapping) and capability.get(flag) is bad:
                issues.append(
                    doc.issue(
                        ["capability", flag],
                        f"a validation is always read-only; remove `{flag}: {str(bad).lower()}`",
                    )
                )
        tool_type = config.get("tool_type")
        if tool_type is not None and tool_type != ToolType.VALIDATION.value:
            issues.append(doc.issue(["tool_type"], "must be 'validation' for a validation"))
            config.pop("tool_type")
        if config.get("wraps") is not None and "source" not in config:
            config["source"] = ToolSource.WRAPPED.value
        if capability is not None and not issues:
            try:
                Capability.model_validate(capability)
            except ValidationError as exc:
                issues.extend(doc.errors_from(exc, prefix=["capability"]).issues)
        # The flags are forced by the model; whatever was wrong with them is reported above.
        for flag in _CAPABILITY_SHORTHANDS:
            config.pop(flag, None)
        config.pop("capability", None)
        return issues + super()._prepare_config(config, doc)

    def inherit_from(self, wrapped: Tool) -> Validation:
        """Return this validation with what it inherits from the tool it wraps.

        ``input_schema``, ``resource_slots`` and ``timeout`` come from ``wrapped`` when this
        validation leaves them unset (seed 000, "Tool Wrapping"); values set here win.
        """
        if wrapped.name != self.wraps:
            raise ValueError(f"{self.name} wraps {self.wraps!r}, not {wrapped.name!r}")
        update: dict[str, Any] = {}
        if self.input_schema is None and wrapped.input_schema is not None:
            update["input_schema"] = wrapped.input_schema
        if not self.resource_slots and wrapped.resource_slots:
            update["resource_slots"] = wrapped.resource_slots
        if self.timeout is None and wrapped.timeout is not None:
            update["timeout"] = wrapped.timeout
        return self.model_copy(update=update) if update else self

    @classmethod
    def _cli_order(cls) -> list[str]:
        order = super()._cli_order()
        order.insert(2, "mode")
        index = order.index("code") + 1
        order[index:index] = ["wraps", "transform", "argument_mapping"]
        order.insert(order.index("mcp_tool_name") + 1, "trust_read_only")
        return order

    def as_cli_dict(self) -> dict[str, Any]:
        """Return the fields in a stable order; ``mode`` and the capability are always shown."""
        out = super().as_cli_dict()
        out["mode"] = self.mode.value
        out["capability"] = self.capability.model_dump(mode="json")
        order = [n for n in self._cli_order() if n in out]
        order += sorted(k for k in out if k not in order)
        return {key: out[key] for key in order}


def tool_from_config(config: Mapping[str, Any] | Document, *, source: str | None = None) -> Tool:
    """Build a :class:`Tool` or a :class:`Validation`, by the config's ``tool_type``."""
    data = config.data if isinstance(config, Document) else config
    if isinstance(data, Mapping) and data.get("tool_type") == ToolType.VALIDATION.value:
        return Validation.from_config(config, source=source)
    if isinstance(data, Mapping) and any(k in data for k in ("mode", "wraps", "transform")):
        return Validation.from_config(config, source=source)
    return Tool.from_config(config, source=source)


class Attachment(_Model):
    """One validation attached to one resource at one scope (seed 000, "Attachment Scoping")."""

    id: AttachmentId
    """A ULID assigned by the catalog."""
    validation: ToolName
    """The attached validation's name."""
    resource: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    """The resource it guards (a name or a path, as the plan graph names it)."""
    scope: Scope
    """``direct``, ``project`` or ``plan``."""
    project: str | None = None
    """The project, for a ``project`` attachment."""
    plan: str | None = None
    """The plan id, for a ``plan`` attachment."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments the validation is called with."""

    @model_validator(mode="after")
    def _scope_fields(self) -> Self:
        if self.scope is Scope.DIRECT and (self.project or self.plan):
            raise ValueError("a direct attachment has neither project nor plan")
        if self.scope is Scope.PROJECT and (not self.project or self.plan):
            raise ValueError("a project attachment names its project and no plan")
        if self.scope is Scope.PLAN and (not self.plan or self.project):
            raise ValueError("a plan attachment names its plan and no project")
        return self

    @property
    def specificity(self) -> int:
        """0 for direct, 1 for project, 2 for plan: the more specific scope wins."""
        return SCOPE_SPECIFICITY[self.scope]


def explain_issues(issues: Iterable[ConfigIssue], known: Sequence[str]) -> list[ConfigIssue]:
    """``issues`` in the order they stand in the file, an unknown top-level field with the
    closest of ``known`` suggested."""
    out = []
    for issue in issues:
        if issue.message == "unknown field" and issue.field and "." not in issue.field:
            close = difflib.get_close_matches(issue.field, list(known), n=1)
            if close:
                issue = ConfigIssue(
                    f"unknown field (did you mean {close[0]!r}?)",
                    issue.field,
                    issue.line,
                    issue.column,
                )
        out.append(issue)
    return sorted(out, key=lambda i: (i.line or 0, i.column or 0))
