"""Validator verdict envelopes: the one answer a validator gives about a task.

A validator checks every acceptance criterion (AC) of one task and reports exactly one of
two envelopes, told apart by their ``verdict`` field:

* :class:`ValidatorAttestation` (``"attest"``): every finding passes;
* :class:`ValidatorRejection` (``"reject"``): at least one finding fails or is
  inconclusive, and a summary says why.

Each envelope carries one :class:`ValidatorFinding` per AC. On the wire the fields are
camelCase (``taskId``, ``checkedAt``, ...), timestamps are ISO-8601 with a timezone, and
``schemaVersion`` is ``"1"``::

    verdict = parse_verdict(raw_json)          # ConfigError if anything is wrong
    if is_validator_attestation(verdict):
        ...
    payload = verdict.to_json_dict()           # camelCase, None fields left out

Raw input (JSON text, bytes or a decoded mapping) goes through :func:`parse_verdict`, which
raises nothing but :class:`~gategraph.runtime._base._exceptions.ConfigError`, one issue per
problem, each naming the rule that was broken. The type guards only accept instances of
the models; they re-check the invariants, so an instance built with ``model_construct``
that breaks them is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from gategraph.runtime._base._exceptions import ConfigError, ConfigIssue
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

if TYPE_CHECKING:
    from typing_extensions import TypeIs

__all__ = [
    "AGENT_ROLES",
    "VALIDATOR_ID",
    "VALIDATOR_ID_PATTERN",
    "VALIDATOR_VERDICT_ADAPTER",
    "AgentRole",
    "FindingStatus",
    "ValidatorAttestation",
    "ValidatorFinding",
    "ValidatorRejection",
    "ValidatorVerdict",
    "is_agent_role",
    "is_validator_attestation",
    "is_validator_rejection",
    "is_validator_verdict",
    "parse_verdict",
]

VALIDATOR_ID: Final = "validator-gategraph"
"""The ``validatorId`` of the envelopes gategraph's own validation rounds issue."""

VALIDATOR_ID_PATTERN = r"^validator-[a-z0-9][a-z0-9-]*$"
"""What a ``validatorId`` must look like: ``validator-`` then lowercase letters, digits, dashes."""

FindingStatus = Literal["pass", "fail", "inconclusive"]
"""The outcome of checking one acceptance criterion."""

AgentRole = Literal["orchestrator", "lead", "worker", "validator"]
"""Who calls a validator tool: the orchestrator plans, a lead dispatches and decides, a
worker produces the change, a validator checks it (and is never the worker)."""

AGENT_ROLES: Final[tuple[AgentRole, ...]] = ("orchestrator", "lead", "worker", "validator")
"""Every :data:`AgentRole`, in order of the hierarchy."""


def is_agent_role(value: object) -> TypeIs[AgentRole]:
    """True if ``value`` is one of :data:`AGENT_ROLES` (exactly: no other case, no blanks)."""
    return isinstance(value, str) and value in AGENT_ROLES


_VERDICTS = ("attest", "reject")
_TIMESTAMP_MESSAGE = "must be an ISO-8601 timestamp with a timezone"
# A date first (``2026-05-25T``...): keeps pydantic from reading bare numbers as Unix time.
_ISO_DATETIME_START = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]")


def _iso_timestamp(value: object) -> object:
    """Let through datetimes and strings that start like an ISO-8601 date-time."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and _ISO_DATETIME_START.match(value):
        return value
    raise PydanticCustomError("iso_timestamp", _TIMESTAMP_MESSAGE)


def _non_blank(error_type: str, message: str) -> AfterValidator:
    """Return a validator refusing strings that are empty once whitespace is stripped."""

    def check(value: str) -> str:
        if not value.strip():
            raise PydanticCustomError(error_type, message)
        return value

    return AfterValidator(check)


_Timestamp = Annotated[AwareDatetime, BeforeValidator(_iso_timestamp)]
_NonEmptyStr = Annotated[str, Field(strict=True, min_length=1)]
_ValidatorId = Annotated[str, Field(strict=True, pattern=VALIDATOR_ID_PATTERN)]
_StrList = list[Annotated[str, Field(strict=True)]]


# Both the findings and the envelopes that hold them: frozen, no unknown field, by alias
# or by name. Instances are validated again wherever they are checked (nested ones too, and
# by the type guards: see ``_still_valid``), so one made with ``model_construct`` cannot
# smuggle a broken finding into an envelope.
_STRICT: Final = ConfigDict(
    frozen=True,
    extra="forbid",
    validate_by_alias=True,
    validate_by_name=True,
    revalidate_instances="always",
)


class ValidatorFinding(BaseModel):
    """The validator's finding about one acceptance criterion of the task."""

    model_config = _STRICT

    ac_id: _NonEmptyStr = Field(alias="acId")
    """Id of the acceptance criterion (any non-empty string, a UUID in seed 003)."""
    status: FindingStatus
    """``pass``, ``fail`` or ``inconclusive``; anything but ``pass`` forces a rejection."""
    reasoning: Annotated[
        str,
        Field(strict=True),
        _non_blank("blank_reasoning", "a finding needs a non-empty reasoning"),
    ]
    """Why the validator reached that status; must not be blank."""
    evidence_refs: _StrList | None = Field(default=None, alias="evidenceRefs")
    """References to the evidence consulted (``commit:9f3e2a1``, ``tool:test``, ...)."""
    checked_at: _Timestamp = Field(alias="checkedAt")
    """When the criterion was checked (ISO-8601 with a timezone)."""


def _non_passing(findings: list[ValidatorFinding]) -> list[str]:
    """Describe the findings that do not pass: ``findings[1] is 'fail'``."""
    return [
        f"findings[{index}] is {finding.status!r}"
        for index, finding in enumerate(findings)
        if finding.status != "pass"
    ]


class _Envelope(BaseModel):
    """Fields and behaviour shared by both verdict envelopes."""

    model_config = _STRICT

    task_id: _NonEmptyStr = Field(alias="taskId")
    """Id of the task whose acceptance criteria were checked."""
    validator_id: _ValidatorId = Field(alias="validatorId")
    """Who validated: ``validator-<discriminator>`` (see :data:`VALIDATOR_ID_PATTERN`)."""
    findings: Annotated[list[ValidatorFinding], Field(min_length=1)]
    """One finding per acceptance criterion; never empty."""
    schema_version: Literal["1"] = Field(alias="schemaVersion")
    """Version of the envelope format; always ``"1"``."""

    def to_json_dict(self) -> dict[str, Any]:
        """Return the envelope as a JSON-ready dict: camelCase keys, ``None`` fields left out.

        Timestamps are ISO-8601 strings (UTC written as ``Z``), so
        ``parse_verdict(d).to_json_dict() == d`` for a dict ``d`` written that way.
        """
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ValidatorAttestation(_Envelope):
    """The PASS envelope: every acceptance criterion of the task was found to pass."""

    verdict: Literal["attest"]
    """Always ``"attest"``; tells the two envelopes apart."""
    summary: str | None = Field(default=None, strict=True)
    """Optional free-text summary of the validation."""
    attested_at: _Timestamp = Field(alias="attestedAt")
    """When the attestation was issued (ISO-8601 with a timezone)."""

    @field_validator("findings")
    @classmethod
    def _all_findings_pass(cls, findings: list[ValidatorFinding]) -> list[ValidatorFinding]:
        """Refuse an attestation with a finding that is not ``pass``."""
        failing = _non_passing(findings)
        if failing:
            raise PydanticCustomError(
                "attestation_finding_not_pass",
                "an attestation's findings must all pass ({failing})",
                {"failing": ", ".join(failing)},
            )
        return findings


class ValidatorRejection(_Envelope):
    """The FAIL envelope: at least one criterion failed or was inconclusive."""

    verdict: Literal["reject"]
    """Always ``"reject"``; tells the two envelopes apart."""
    summary: Annotated[
        str,
        Field(strict=True),
        _non_blank("blank_summary", "a rejection needs a non-empty summary"),
    ]
    """Why the task is rejected; mandatory and not blank."""
    remediation_hints: _StrList | None = Field(default=None, alias="remediationHints")
    """Optional suggestions for the worker on how to fix the failing criteria."""
    rejected_at: _Timestamp = Field(alias="rejectedAt")
    """When the rejection was issued (ISO-8601 with a timezone)."""

    @field_validator("findings")
    @classmethod
    def _some_finding_fails(cls, findings: list[ValidatorFinding]) -> list[ValidatorFinding]:
        """Refuse a rejection whose findings all pass."""
        if not _non_passing(findings):
            raise PydanticCustomError(
                "rejection_without_failure",
                "a rejection needs at least one finding that is not 'pass' "
                "(all {count} pass; send an attestation instead)",
                {"count": len(findings)},
            )
        return findings


ValidatorVerdict = Annotated[
    ValidatorAttestation | ValidatorRejection, Field(discriminator="verdict")
]
"""Either envelope, told apart by ``verdict``."""

VALIDATOR_VERDICT_ADAPTER: TypeAdapter[ValidatorAttestation | ValidatorRejection] = TypeAdapter(
    ValidatorVerdict
)
"""Validates a decoded mapping into whichever envelope its ``verdict`` names."""


# -- parse_verdict -----------------------------------------------------------------------

_CAMEL_NAMES: dict[str, str] = {
    name: info.alias or name
    for model in (ValidatorFinding, ValidatorAttestation, ValidatorRejection)
    for name, info in model.model_fields.items()
}

_PLAIN_MESSAGES: dict[str, str] = {
    "missing": "is required",
    "extra_forbidden": "is not a known field",
    "string_type": "must be a string",
    "string_unicode": "must be a valid unicode string",
    "string_too_short": "must not be empty",
    "too_short": "must not be empty",
    "list_type": "must be a list",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "dict_type": "must be an object",
}

_TIMESTAMP_ERRORS = frozenset(
    {
        "iso_timestamp",
        "datetime_type",
        "datetime_parsing",
        "datetime_from_date_parsing",
        "datetime_object_invalid",
    }
)

_LITERAL_MESSAGES: dict[str, str] = {
    "schemaVersion": 'must be "1"',
    "status": "must be 'pass', 'fail' or 'inconclusive'",
    "verdict": "must be 'attest' or 'reject'",
}


def _field_path(loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location as ``findings[1].checkedAt`` (camelCase, indices in [])."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            name = _CAMEL_NAMES.get(part, part)
            path += f".{name}" if path else name
    return path


def _issue_message(error: ErrorDetails, verdict: str, path: str) -> str:
    """Say, in plain words, which rule the input broke."""
    kind = error["type"]
    leaf = path.rsplit(".", 1)[-1]
    if (
        verdict == "reject"
        and path == "summary"
        and (kind == "missing" or (kind == "string_type" and error.get("input") is None))
    ):
        return "a rejection needs a non-empty summary"
    if kind == "timezone_aware":
        return f"{_TIMESTAMP_MESSAGE} (this one has none; add 'Z' or an offset like '+02:00')"
    if kind in _TIMESTAMP_ERRORS:
        return _TIMESTAMP_MESSAGE
    if kind == "string_pattern_mismatch":
        return f"must match {error.get('ctx', {}).get('pattern', VALIDATOR_ID_PATTERN)}"
    if kind == "literal_error":
        expected = error.get("ctx", {}).get("expected", "")
        return _LITERAL_MESSAGES.get(leaf, f"must be {expected}")
    if kind in _PLAIN_MESSAGES:
        return _PLAIN_MESSAGES[kind]
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _to_config_error(exc: ValidationError, verdict: str) -> ConfigError:
    """Turn pydantic's errors into one :class:`ConfigIssue` each."""
    issues = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        if loc and loc[0] == verdict:  # the discriminated union puts the tag first
            loc = loc[1:]
        path = _field_path(loc)
        issues.append(ConfigIssue(_issue_message(error, verdict, path), path))
    return ConfigError(issues)


def _decode(value: str | bytes | bytearray) -> object:
    """Decode JSON text, turning every failure into a :class:`ConfigError`."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            [
                ConfigIssue(
                    f"a verdict must be valid JSON ({exc.msg} at line {exc.lineno},"
                    f" column {exc.colno})",
                    line=exc.lineno,
                    column=exc.colno,
                )
            ]
        ) from None
    except (ValueError, RecursionError) as exc:  # bad encoding, huge numbers, deep nesting
        raise ConfigError(f"a verdict must be valid JSON ({exc})") from None


def parse_verdict(
    value: Mapping[str, object] | str | bytes,
) -> ValidatorAttestation | ValidatorRejection:
    """Validate raw input into a :class:`ValidatorAttestation` or :class:`ValidatorRejection`.

    ``value`` is JSON text (``str`` or ``bytes``) or an already decoded mapping with the
    camelCase keys of seed 003. Raises :class:`ConfigError` and nothing else: one
    :class:`ConfigIssue` per problem, its ``field`` the camelCase path
    (``findings[1].status``) and its message naming the broken rule.
    """
    decoded: object = value
    if isinstance(value, (str, bytes, bytearray)):
        decoded = _decode(value)
    if not isinstance(decoded, Mapping):
        raise ConfigError(f"a verdict must be a JSON object, not {type(decoded).__name__}")
    verdict = decoded.get("verdict")
    if not (isinstance(verdict, str) and verdict in _VERDICTS):
        got = "it is missing" if "verdict" not in decoded else f"got {verdict!r:.60}"
        raise ConfigError.at("verdict", f"must be 'attest' or 'reject' ({got})")
    try:
        return VALIDATOR_VERDICT_ADAPTER.validate_python(dict(decoded))
    except ValidationError as exc:
        raise _to_config_error(exc, verdict) from None


# -- type guards -------------------------------------------------------------------------


def _still_valid(value: _Envelope) -> bool:
    """True if validating the instance again gives an equal instance."""
    try:
        return type(value).model_validate(value) == value
    except ValidationError:
        return False


def is_validator_attestation(value: object) -> TypeIs[ValidatorAttestation]:
    """True if ``value`` is a :class:`ValidatorAttestation` that keeps every invariant.

    Only instances qualify (a dict never does: raw JSON goes through :func:`parse_verdict`).
    The invariants are checked again, so an instance made with ``model_construct`` that
    breaks one of them (a failing finding, a bad ``validatorId``...) is refused.
    """
    return isinstance(value, ValidatorAttestation) and _still_valid(value)


def is_validator_rejection(value: object) -> TypeIs[ValidatorRejection]:
    """True if ``value`` is a :class:`ValidatorRejection` that keeps every invariant.

    Only instances qualify (a dict never does: raw JSON goes through :func:`parse_verdict`).
    The invariants are checked again, so an instance made with ``model_construct`` that
    breaks one of them (no failing finding, a blank summary...) is refused.
    """
    return isinstance(value, ValidatorRejection) and _still_valid(value)


def is_validator_verdict(value: object) -> TypeIs[ValidatorAttestation | ValidatorRejection]:
    """True if ``value`` is either envelope and keeps every invariant of its kind.

    Only instances qualify (a dict never does: raw JSON goes through :func:`parse_verdict`).
    """
    return is_validator_attestation(value) or is_validator_rejection(value)
