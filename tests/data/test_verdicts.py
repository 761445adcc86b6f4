"""Tests for the validator verdict envelopes (seed 003, "Output Formats")."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, cast

import pytest
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._data._verdicts import (
    VALIDATOR_ID_PATTERN,
    VALIDATOR_VERDICT_ADAPTER,
    ValidatorAttestation,
    ValidatorFinding,
    ValidatorRejection,
    is_validator_attestation,
    is_validator_rejection,
    is_validator_verdict,
    parse_verdict,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

# The two envelopes of seed 003, copied verbatim.
ATTESTATION_JSON = """\
{
  "verdict": "attest",
  "taskId": "T1234",
  "validatorId": "validator-prime",
  "findings": [
    {
      "acId": "550e8400-e29b-41d4-a716-446655440000",
      "status": "pass",
      "reasoning": "Re-ran pnpm run test --filter @cleocode/core; exit 0; 142/142 passing",
      "evidenceRefs": ["commit:9f3e2a1", "test-run:/tmp/vitest-out.json"],
      "checkedAt": "2026-05-25T22:18:00Z"
    },
    {
      "acId": "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
      "status": "pass",
      "reasoning": "Verified commit 9f3e2a1 touches the 3 files named in AC2",
      "evidenceRefs": ["files:packages/core/src/foo.ts,packages/core/src/bar.ts"],
      "checkedAt": "2026-05-25T22:19:12Z"
    }
  ],
  "summary": "All 2 ACs pass. Implementation also tightened error messages — checked.",
  "attestedAt": "2026-05-25T22:23:42Z",
  "schemaVersion": "1"
}
"""

REJECTION_JSON = """\
{
  "verdict": "reject",
  "taskId": "T1234",
  "validatorId": "validator-prime",
  "findings": [
    {
      "acId": "550e8400-e29b-41d4-a716-446655440000",
      "status": "pass",
      "reasoning": "Worker's claim verified independently against HEAD",
      "evidenceRefs": ["tool:test"],
      "checkedAt": "2026-05-25T22:18:00Z"
    },
    {
      "acId": "7c9e6679-7425-40de-944b-e07fc1f90ae7",
      "status": "fail",
      "reasoning": "Worker cited tool:lint exit 0 but independent re-run returned exit 1 with 7 biome errors in packages/cleo/src/cli/commands/foo.ts. Worker's ledger references commit 9f3e2a1 but the failing lint runs against HEAD which is 9f3e2a1 + 1 uncommitted change. STALE evidence.",
      "evidenceRefs": ["tool:lint", "commit:9f3e2a1"],
      "checkedAt": "2026-05-25T22:21:05Z"
    }
  ],
  "summary": "AC3 fails — lint evidence stale. Worker must re-stage and re-run.",
  "remediationHints": [
    "Run `pnpm biome check --write packages/cleo/src/cli/commands/foo.ts`",
    "Re-attest with fresh commit SHA"
  ],
  "rejectedAt": "2026-05-25T22:22:18Z",
  "schemaVersion": "1"
}
"""

Json = dict[str, Any]


def attestation() -> Json:
    """A fresh copy of the seed's attestation, as a decoded mapping."""
    return cast("Json", json.loads(ATTESTATION_JSON))


def rejection() -> Json:
    """A fresh copy of the seed's rejection, as a decoded mapping."""
    return cast("Json", json.loads(REJECTION_JSON))


def parse_any(value: object) -> ValidatorAttestation | ValidatorRejection:
    """Call parse_verdict with a value of any type (to feed it wrong types on purpose)."""
    return parse_verdict(cast("Any", value))


# -- the seed's examples ----------------------------------------------------------------


def test_attestation_example_parses() -> None:
    """The seed's attestation JSON parses into a ValidatorAttestation with its values."""
    verdict = parse_verdict(ATTESTATION_JSON)
    assert isinstance(verdict, ValidatorAttestation)
    assert verdict.verdict == "attest"
    assert verdict.task_id == "T1234"
    assert verdict.validator_id == "validator-prime"
    assert [f.status for f in verdict.findings] == ["pass", "pass"]
    assert verdict.findings[0].ac_id == "550e8400-e29b-41d4-a716-446655440000"
    assert verdict.findings[0].evidence_refs == ["commit:9f3e2a1", "test-run:/tmp/vitest-out.json"]
    assert verdict.findings[1].checked_at == datetime(2026, 5, 25, 22, 19, 12, tzinfo=UTC)
    assert verdict.attested_at == datetime(2026, 5, 25, 22, 23, 42, tzinfo=UTC)
    assert verdict.summary is not None and verdict.summary.endswith("— checked.")
    assert verdict.schema_version == "1"


def test_rejection_example_parses() -> None:
    """The seed's rejection JSON parses into a ValidatorRejection with its values."""
    verdict = parse_verdict(REJECTION_JSON)
    assert isinstance(verdict, ValidatorRejection)
    assert verdict.verdict == "reject"
    assert [f.status for f in verdict.findings] == ["pass", "fail"]
    assert verdict.findings[1].reasoning.endswith("STALE evidence.")
    assert verdict.summary.startswith("AC3 fails")
    assert verdict.remediation_hints is not None and len(verdict.remediation_hints) == 2
    assert verdict.rejected_at == datetime(2026, 5, 25, 22, 22, 18, tzinfo=UTC)


@pytest.mark.parametrize("text", [ATTESTATION_JSON, REJECTION_JSON], ids=["attest", "reject"])
def test_examples_round_trip(text: str) -> None:
    """to_json_dict gives back exactly the seed's JSON (camelCase keys, UTC as Z)."""
    example = json.loads(text)
    assert parse_verdict(example).to_json_dict() == example
    assert parse_verdict(text).to_json_dict() == example
    assert json.loads(json.dumps(parse_verdict(text).to_json_dict())) == example


@pytest.mark.parametrize("text", [ATTESTATION_JSON, REJECTION_JSON], ids=["attest", "reject"])
def test_bytes_input(text: str) -> None:
    """JSON bytes (UTF-8 and UTF-16) parse like the same text."""
    expected = parse_verdict(text)
    assert parse_verdict(text.encode()) == expected
    assert parse_verdict(text.encode("utf-16")) == expected


def test_to_json_dict_omits_none_fields() -> None:
    """Optional fields left at None do not appear in to_json_dict."""
    data = attestation()
    del data["summary"]
    del data["findings"][0]["evidenceRefs"]
    out = parse_verdict(data).to_json_dict()
    assert out == data
    assert "summary" not in out and "evidenceRefs" not in out["findings"][0]


def test_explicit_null_optional_fields_are_accepted() -> None:
    """null for an optional field means absent, and is left out of to_json_dict."""
    data = rejection()
    data["remediationHints"] = None
    data["findings"][0]["evidenceRefs"] = None
    verdict = parse_verdict(data)
    assert isinstance(verdict, ValidatorRejection) and verdict.remediation_hints is None
    assert "remediationHints" not in verdict.to_json_dict()


def test_models_accept_field_names_too() -> None:
    """The models can be built in Python with snake_case names as well as camelCase aliases."""
    finding = ValidatorFinding(
        ac_id="AC1", status="pass", reasoning="ok", checked_at=datetime(2026, 1, 1, tzinfo=UTC)
    )
    verdict = ValidatorAttestation(
        verdict="attest",
        task_id="T1",
        validator_id="validator-a",
        findings=[finding],
        attested_at=datetime(2026, 1, 1, tzinfo=UTC),
        schema_version="1",
    )
    assert verdict.to_json_dict()["findings"][0]["acId"] == "AC1"
    assert parse_verdict(verdict.to_json_dict()) == verdict


def test_ac_id_need_not_be_a_uuid() -> None:
    """Any non-empty acId is accepted, not only UUIDs."""
    data = attestation()
    data["findings"][0]["acId"] = "AC1"
    assert parse_verdict(data).findings[0].ac_id == "AC1"


def test_envelopes_are_frozen() -> None:
    """Envelopes cannot be changed after validation."""
    verdict = parse_verdict(ATTESTATION_JSON)
    with pytest.raises(ValidationError):
        verdict.task_id = "T9"  # type: ignore[misc]


def test_adapter_picks_the_envelope_by_verdict() -> None:
    """The module-level TypeAdapter validates either envelope from its verdict."""
    assert isinstance(
        VALIDATOR_VERDICT_ADAPTER.validate_python(attestation()), ValidatorAttestation
    )
    assert isinstance(VALIDATOR_VERDICT_ADAPTER.validate_json(REJECTION_JSON), ValidatorRejection)


# -- invariants -------------------------------------------------------------------------

Mutation = Callable[[Json], object]


def _set(path: str, value: object) -> Mutation:
    """A mutation setting ``a.b.0.c`` (dots, with digits for list indices) to ``value``."""
    *parents, last = path.split(".")

    def mutate(data: Json) -> None:
        node: Any = data
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return mutate


def _delete(key: str) -> Mutation:
    """A mutation removing a top-level key."""
    return lambda data: data.pop(key)


BROKEN: list[Any] = [
    # (base, mutation, field, words in the message)
    pytest.param(
        attestation,
        _set("findings.1.status", "fail"),
        "findings",
        "an attestation's findings must all pass (findings[1] is 'fail')",
        id="attest-with-failing-finding",
    ),
    pytest.param(
        attestation,
        _set("findings.0.status", "inconclusive"),
        "findings",
        "an attestation's findings must all pass (findings[0] is 'inconclusive')",
        id="attest-with-inconclusive-finding",
    ),
    pytest.param(
        rejection,
        _set("findings.1.status", "pass"),
        "findings",
        "a rejection needs at least one finding that is not 'pass'",
        id="reject-where-all-pass",
    ),
    pytest.param(
        attestation,
        _set("findings", []),
        "findings",
        "must not be empty",
        id="attest-no-findings",
    ),
    pytest.param(
        rejection, _set("findings", []), "findings", "must not be empty", id="reject-no-findings"
    ),
    pytest.param(
        attestation, _delete("findings"), "findings", "is required", id="findings-missing"
    ),
    pytest.param(
        attestation,
        _set("validatorId", "Validator-Prime"),
        "validatorId",
        f"must match {VALIDATOR_ID_PATTERN}",
        id="validator-id-uppercase",
    ),
    pytest.param(
        rejection,
        _set("validatorId", "prime"),
        "validatorId",
        f"must match {VALIDATOR_ID_PATTERN}",
        id="validator-id-no-prefix",
    ),
    pytest.param(
        attestation,
        _set("validatorId", "validator-"),
        "validatorId",
        f"must match {VALIDATOR_ID_PATTERN}",
        id="validator-id-empty-discriminator",
    ),
    pytest.param(
        attestation,
        _set("validatorId", "validator--x"),
        "validatorId",
        f"must match {VALIDATOR_ID_PATTERN}",
        id="validator-id-leading-dash",
    ),
    pytest.param(
        attestation,
        _set("validatorId", "validator-x\n"),
        "validatorId",
        f"must match {VALIDATOR_ID_PATTERN}",
        id="validator-id-trailing-newline",
    ),
    pytest.param(
        attestation, _set("schemaVersion", "2"), "schemaVersion", 'must be "1"', id="schema-2"
    ),
    pytest.param(
        rejection, _set("schemaVersion", 1), "schemaVersion", 'must be "1"', id="schema-int"
    ),
    pytest.param(
        attestation, _delete("schemaVersion"), "schemaVersion", "is required", id="schema-missing"
    ),
    pytest.param(
        rejection,
        _delete("summary"),
        "summary",
        "a rejection needs a non-empty summary",
        id="reject-summary-missing",
    ),
    pytest.param(
        rejection,
        _set("summary", "  \n"),
        "summary",
        "a rejection needs a non-empty summary",
        id="reject-summary-blank",
    ),
    pytest.param(
        rejection,
        _set("summary", None),
        "summary",
        "a rejection needs a non-empty summary",
        id="reject-summary-null",
    ),
    pytest.param(
        attestation,
        _set("findings.0.reasoning", " "),
        "findings[0].reasoning",
        "a finding needs a non-empty reasoning",
        id="reasoning-blank",
    ),
    pytest.param(
        rejection,
        _set("findings.1.acId", ""),
        "findings[1].acId",
        "must not be empty",
        id="ac-id-empty",
    ),
    pytest.param(
        rejection,
        _set("findings.1.status", "maybe"),
        "findings[1].status",
        "must be 'pass', 'fail' or 'inconclusive'",
        id="status-unknown",
    ),
    pytest.param(
        attestation,
        _set("findings.0.checkedAt", "2026-05-25T22:18:00"),
        "findings[0].checkedAt",
        "must be an ISO-8601 timestamp with a timezone",
        id="checked-at-naive",
    ),
    pytest.param(
        attestation,
        _set("findings.0.checkedAt", "yesterday"),
        "findings[0].checkedAt",
        "must be an ISO-8601 timestamp with a timezone",
        id="checked-at-garbage",
    ),
    pytest.param(
        attestation,
        _set("attestedAt", 1_780_000_000),
        "attestedAt",
        "must be an ISO-8601 timestamp with a timezone",
        id="attested-at-unix-number",
    ),
    pytest.param(
        rejection,
        _set("rejectedAt", "1780000000"),
        "rejectedAt",
        "must be an ISO-8601 timestamp with a timezone",
        id="rejected-at-unix-string",
    ),
    pytest.param(rejection, _delete("rejectedAt"), "rejectedAt", "is required", id="rejected-at"),
    pytest.param(
        attestation, _set("taskId", ""), "taskId", "must not be empty", id="task-id-empty"
    ),
    pytest.param(attestation, _set("taskId", 1234), "taskId", "must be a string", id="task-id-int"),
    pytest.param(
        rejection,
        _set("remediationHints", "fix it"),
        "remediationHints",
        "must be a list",
        id="hints-not-a-list",
    ),
    pytest.param(
        attestation,
        _set("findings.0.evidenceRefs", ["ok", 7]),
        "findings[0].evidenceRefs[1]",
        "must be a string",
        id="evidence-ref-int",
    ),
    pytest.param(
        attestation,
        _set("findings.0", "AC1 passes"),
        "findings[0]",
        "must be an object",
        id="finding-not-an-object",
    ),
    pytest.param(
        attestation, _set("surprise", True), "surprise", "is not a known field", id="extra-field"
    ),
    pytest.param(
        rejection,
        _set("findings.1.severity", "high"),
        "findings[1].severity",
        "is not a known field",
        id="extra-finding-field",
    ),
    pytest.param(
        attestation,
        _set("remediationHints", ["x"]),
        "remediationHints",
        "is not a known field",
        id="attest-with-rejection-field",
    ),
    pytest.param(
        attestation,
        _set("verdict", "maybe"),
        "verdict",
        "must be 'attest' or 'reject'",
        id="verdict-unknown",
    ),
    pytest.param(
        rejection,
        _delete("verdict"),
        "verdict",
        "must be 'attest' or 'reject' (it is missing)",
        id="verdict-missing",
    ),
    pytest.param(
        attestation,
        _set("verdict", ["attest"]),
        "verdict",
        "must be 'attest' or 'reject'",
        id="verdict-list",
    ),
    pytest.param(
        attestation, _set("verdict", None), "verdict", "must be 'attest' or 'reject'", id="null"
    ),
]


@pytest.mark.parametrize(("base", "mutate", "field", "words"), BROKEN)
def test_each_broken_invariant_is_named(
    base: Callable[[], Json], mutate: Mutation, field: str, words: str
) -> None:
    """Breaking one invariant gives a ConfigError with one issue naming field and rule."""
    data = base()
    mutate(data)
    for value in (data, json.dumps(data)):
        with pytest.raises(ConfigError) as caught:
            parse_verdict(value)
        assert len(caught.value.issues) == 1, str(caught.value)
        issue = caught.value.issues[0]
        assert issue.field == field
        assert words in issue.message
        assert f"{field}: {words}" in str(caught.value)


def test_several_problems_are_reported_together() -> None:
    """Every problem of one envelope is reported, one issue each."""
    data = rejection()
    data["validatorId"] = "nope"
    data["schemaVersion"] = "2"
    data["findings"][0]["reasoning"] = ""
    with pytest.raises(ConfigError) as caught:
        parse_verdict(data)
    assert {issue.field for issue in caught.value.issues} == {
        "validatorId",
        "schemaVersion",
        "findings[0].reasoning",
    }


def test_unknown_verdict_is_a_single_clear_issue() -> None:
    """An unknown verdict gives one issue, not one per union member."""
    data = attestation()
    data["verdict"] = "attestation"
    data["schemaVersion"] = "9"  # not reported: the envelope kind is unknown
    with pytest.raises(ConfigError) as caught:
        parse_verdict(data)
    assert [(i.field, i.message) for i in caught.value.issues] == [
        ("verdict", "must be 'attest' or 'reject' (got 'attestation')")
    ]


def test_naive_timestamp_says_the_timezone_is_missing() -> None:
    """A timestamp without a timezone is refused with a hint to add one."""
    data = rejection()
    data["rejectedAt"] = "2026-05-25T22:22:18"
    with pytest.raises(ConfigError) as caught:
        parse_verdict(data)
    message = caught.value.issues[0].message
    assert "with a timezone" in message and "'Z'" in message


def test_naive_datetime_refused_in_python_too() -> None:
    """Building a finding in Python with a naive datetime is refused as well."""
    with pytest.raises(ValidationError):
        ValidatorFinding(
            ac_id="AC1", status="pass", reasoning="ok", checked_at=datetime(2026, 1, 1)
        )


@pytest.mark.parametrize(
    ("text", "offset", "written"),
    [
        ("2026-05-25T22:18:00+02:00", timedelta(hours=2), "2026-05-25T22:18:00+02:00"),
        (
            "2026-05-25T22:18:00-05:30",
            timedelta(hours=-5, minutes=-30),
            "2026-05-25T22:18:00-05:30",
        ),
        ("2026-05-25T22:18:00+00:00", timedelta(0), "2026-05-25T22:18:00Z"),
        ("2026-05-25T22:18:00.250Z", timedelta(0), "2026-05-25T22:18:00.250000Z"),
    ],
)
def test_offset_timestamps_accepted(text: str, offset: timedelta, written: str) -> None:
    """Timestamps with any UTC offset are accepted and keep their offset on output."""
    data = attestation()
    data["findings"][0]["checkedAt"] = text
    verdict = parse_verdict(data)
    checked_at = verdict.findings[0].checked_at
    assert checked_at.utcoffset() == offset
    assert checked_at == datetime.fromisoformat(text).astimezone(timezone(offset))
    assert verdict.to_json_dict()["findings"][0]["checkedAt"] == written


# -- input kinds ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["{", "", "not json", b"\xff\xfe\xfa", '{"verdict": "attest",}', "[" * 100_000],
    ids=["truncated", "empty", "words", "undecodable-bytes", "trailing-comma", "too-deep"],
)
def test_bad_json_is_a_config_error(value: str | bytes) -> None:
    """Text or bytes that are not JSON give a ConfigError saying so."""
    with pytest.raises(ConfigError, match="valid JSON"):
        parse_verdict(value)


def test_bad_json_issue_has_a_position() -> None:
    """A JSON syntax error names the line and column where it happened."""
    with pytest.raises(ConfigError) as caught:
        parse_verdict('{\n  "verdict": attest\n}')
    issue = caught.value.issues[0]
    assert (issue.line, issue.column) == (2, 14)
    assert "line 2, column 14" in issue.message


@pytest.mark.parametrize(
    "value",
    [[], [json.loads(ATTESTATION_JSON)], 3, 2.5, None, True, "[]", "3", "null", '"attest"'],
)
def test_non_mapping_input_is_a_config_error(value: object) -> None:
    """Anything but a JSON object (decoded or not) gives a ConfigError."""
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_any(value)


def test_validated_instance_is_not_raw_input() -> None:
    """An envelope instance is not a mapping: parse_verdict refuses it."""
    with pytest.raises(ConfigError, match="must be a JSON object"):
        parse_any(parse_verdict(ATTESTATION_JSON))


# -- type guards ------------------------------------------------------------------------


def test_guards_on_attestation() -> None:
    """A valid attestation passes its own guard and the verdict guard, not the other."""
    verdict = parse_verdict(ATTESTATION_JSON)
    guards = (is_validator_attestation, is_validator_rejection, is_validator_verdict)
    assert [guard(verdict) for guard in guards] == [True, False, True]


def test_guards_on_rejection() -> None:
    """A valid rejection passes its own guard and the verdict guard, not the other."""
    verdict = parse_verdict(REJECTION_JSON)
    guards = (is_validator_attestation, is_validator_rejection, is_validator_verdict)
    assert [guard(verdict) for guard in guards] == [False, True, True]


@pytest.mark.parametrize("value", [attestation(), rejection(), ATTESTATION_JSON, None, object()])
def test_guards_refuse_raw_values(value: object) -> None:
    """Dicts and JSON text never pass a guard: they must go through parse_verdict."""
    assert not is_validator_attestation(value)
    assert not is_validator_rejection(value)
    assert not is_validator_verdict(value)


def _fields(model: ValidatorAttestation | ValidatorRejection | ValidatorFinding) -> Json:
    """The field values of a model, by Python name."""
    return {name: getattr(model, name) for name in type(model).model_fields}


def test_guards_accept_constructed_instance_that_keeps_invariants() -> None:
    """model_construct with valid values gives an instance the guards accept."""
    verdict = parse_verdict(REJECTION_JSON)
    built = ValidatorRejection.model_construct(**_fields(verdict))
    assert is_validator_rejection(built) and is_validator_verdict(built)


@pytest.mark.parametrize(
    ("kind", "changes"),
    [
        ("attest", {"findings": "failing"}),
        ("attest", {"validator_id": "Prime"}),
        ("attest", {"schema_version": "2"}),
        ("attest", {"verdict": "reject"}),
        ("attest", {"findings": []}),
        ("attest", {"attested_at": "2026-05-25T22:23:42Z"}),
        ("reject", {"findings": "passing"}),
        ("reject", {"summary": " "}),
        ("reject", {"rejected_at": datetime(2026, 5, 25, 22, 22, 18)}),
        ("reject", {"findings": "blank-reasoning"}),
    ],
    ids=lambda value: str(value),
)
def test_guards_refuse_constructed_instance_breaking_an_invariant(kind: str, changes: Json) -> None:
    """model_construct bypasses validation; the guards re-check and refuse the result."""
    good = parse_verdict(ATTESTATION_JSON if kind == "attest" else REJECTION_JSON)
    first = good.findings[0]
    findings = {
        "failing": [first.model_copy(update={"status": "fail"})],
        "passing": [first],
        "blank-reasoning": [
            ValidatorFinding.model_construct(**{**_fields(first), "reasoning": ""}),
            *good.findings[1:],
        ],
    }
    if isinstance(changes.get("findings"), str):
        changes = {**changes, "findings": findings[changes["findings"]]}
    broken: object = type(good).model_construct(**{**_fields(good), **changes})
    assert not is_validator_attestation(broken)
    assert not is_validator_rejection(broken)
    assert not is_validator_verdict(broken)


def test_guards_refuse_constructed_instance_missing_fields() -> None:
    """An instance made with model_construct and no fields at all is refused."""
    nothing: Json = {}
    assert not is_validator_attestation(ValidatorAttestation.model_construct(**nothing))
    assert not is_validator_rejection(ValidatorRejection.model_construct(**nothing))


def test_guards_refuse_constructed_instance_with_raw_findings() -> None:
    """Findings left as dicts (not ValidatorFinding) in a constructed instance are refused."""
    good = parse_verdict(ATTESTATION_JSON)
    raw = ValidatorAttestation.model_construct(
        **{**_fields(good), "findings": attestation()["findings"]}
    )
    assert not is_validator_attestation(raw)


# -- property tests ---------------------------------------------------------------------

_text = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=12)
_json_leaves = st.none() | st.booleans() | st.integers() | st.floats() | _text
json_values = st.recursive(
    _json_leaves,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_text, children, max_size=4),
    max_leaves=20,
)

_plain_text = st.text(max_size=12)
_timestamps = st.datetimes(
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=45)), None])
).map(datetime.isoformat)
_ids = st.sampled_from(["T1", "AC1", "550e8400-e29b-41d4-a716-446655440000"]) | st.text(min_size=1)
_validator_ids = st.from_regex(r"validator-[a-z0-9][a-z0-9-]*", fullmatch=True)
_str_lists = st.none() | st.lists(_plain_text, max_size=3)


def _corrupt(draw: st.DrawFn, value: Json) -> Json:
    """Replace up to two keys of ``value`` by random JSON values, or drop them."""
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from([*value, "extra"]))
        if draw(st.booleans()):
            value[key] = draw(json_values)
        else:
            value.pop(key, None)
    return value


@st.composite
def findings_like(draw: st.DrawFn) -> Json:
    """A finding-shaped dict, possibly with a field or two broken."""
    finding: Json = {
        "acId": draw(_ids),
        "status": draw(st.sampled_from(["pass", "pass", "fail", "inconclusive"])),
        "reasoning": draw(st.text(min_size=1, max_size=12)),
        "checkedAt": draw(_timestamps),
    }
    if draw(st.booleans()):
        finding["evidenceRefs"] = draw(_str_lists)
    return _corrupt(draw, finding)


@st.composite
def envelopes_like(draw: st.DrawFn) -> Json:
    """An envelope-shaped dict with random field values, possibly with a field or two broken."""
    verdict = draw(st.sampled_from(["attest", "reject"]))
    envelope: Json = {
        "verdict": verdict,
        "taskId": draw(_ids),
        "validatorId": draw(_validator_ids),
        "findings": draw(st.lists(findings_like(), min_size=1, max_size=3)),
        "summary": draw(st.none() | _plain_text),
        "attestedAt" if verdict == "attest" else "rejectedAt": draw(_timestamps),
        "schemaVersion": draw(st.sampled_from(["1", "1", "2"])),
    }
    if verdict == "reject" and draw(st.booleans()):
        envelope["remediationHints"] = draw(_str_lists)
    return _corrupt(draw, envelope)


def _only_config_errors(value: object) -> None:
    """parse_verdict either returns a verdict that round-trips or raises ConfigError."""
    try:
        verdict = parse_any(value)
    except ConfigError as error:
        assert error.issues
        return
    assert is_validator_verdict(verdict)
    assert parse_verdict(verdict.to_json_dict()) == verdict


_property_settings = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@_property_settings
@given(json_values)
def test_random_json_values_raise_only_config_error(value: object) -> None:
    """Any JSON-like value, decoded, as text or as bytes, gives a verdict or a ConfigError."""
    _only_config_errors(value)
    _only_config_errors(json.dumps(value))
    _only_config_errors(json.dumps(value).encode())


@_property_settings
@given(envelopes_like())
def test_envelope_shaped_values_raise_only_config_error(value: Json) -> None:
    """Dicts shaped like envelopes with random field values give a verdict or a ConfigError."""
    _only_config_errors(value)
    _only_config_errors(json.dumps(value))


@_property_settings
@given(st.sampled_from([attestation, rejection]), st.data())
def test_one_random_field_in_a_good_envelope(base: Callable[[], Json], data: st.DataObject) -> None:
    """Replacing one field of a seed example by a random value gives a verdict or a ConfigError."""
    value = base()
    key = data.draw(st.sampled_from(sorted(value)))
    value[key] = data.draw(json_values)
    _only_config_errors(copy.deepcopy(value))
