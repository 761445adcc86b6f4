"""Structured returns (seed 000, "Structured Return Format"): well-formed, malformed, missing."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import pytest
from gategraph.runtime import ResultError, ValidationResult, coerce_result
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"passed": True}, ValidationResult(True)),
        ({"passed": False, "message": "3 failed"}, ValidationResult(False, "3 failed")),
        (
            {"passed": True, "message": "All 247 tests passed", "data": {"tests_run": 247}},
            ValidationResult(True, "All 247 tests passed", {"tests_run": 247}),
        ),
        ({"passed": True, "message": None, "data": None}, ValidationResult(True)),
        ({"passed": True, "extra": 1}, ValidationResult(True)),
        ('{"passed": true, "data": {"n": 1}}', ValidationResult(True, "", {"n": 1})),
        (b'{"passed": false}', ValidationResult(False)),
        (bytearray(b'{"passed": true}'), ValidationResult(True)),
        (ValidationResult(True, "ok"), ValidationResult(True, "ok")),
    ],
)
def test_well_formed(value: object, expected: ValidationResult) -> None:
    """Well-formed returns come back as they were meant."""
    assert coerce_result(value) == expected


def test_result_is_returned_as_is() -> None:
    """A correct ValidationResult is not copied (hot path)."""
    result = ValidationResult(True)
    assert coerce_result(result) is result


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, "returned None"),
        ({}, "'passed' is missing"),
        ({"message": "hi"}, "'passed' is missing"),
        ({"passed": "yes"}, "'passed' must be a bool"),
        ({"passed": 1}, "'passed' must be a bool"),
        ({"passed": True, "message": 3}, "'message' must be a string"),
        ({"passed": True, "data": [1]}, "'data' must be an object"),
        ({"passed": True, "data": {1: "x"}}, "'data' keys must be strings"),
        ("not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        ("[true]", "JSON must encode an object"),
        ("true", "JSON must encode an object"),
        (True, "expected an object with 'passed'"),
        (42, "expected an object with 'passed'"),
        (object(), "expected an object with 'passed'"),
        (ValidationResult("yes", "m"), "'passed' must be a bool"),  # type: ignore[arg-type]
    ],
)
def test_malformed(value: object, reason: str) -> None:
    """Malformed and missing returns become passed=False with error=malformed and a reason."""
    result = coerce_result(value)
    assert result.passed is False
    assert result.data["error"] == ResultError.MALFORMED == "malformed"
    assert reason in result.message
    assert result.message.startswith("malformed validation result: ")


class Hostile(Mapping[str, Any]):
    """A mapping that raises on every access."""

    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 1

    def __contains__(self, key: object) -> bool:
        raise RuntimeError("boom")


def test_hostile_mapping_does_not_crash() -> None:
    """A result object that raises while being read is a malformed result, not a crash."""
    result = coerce_result(Hostile())
    assert result.passed is False
    assert "RuntimeError: boom" in result.message


def test_long_values_are_shortened_in_messages() -> None:
    """The reason quotes a bad value briefly."""
    result = coerce_result({"passed": "x" * 10_000})
    assert len(result.message) < 200


def test_failure_helper() -> None:
    """ValidationResult.failure sets data.error and keeps extra data."""
    result = ValidationResult.failure(ResultError.TIMEOUT, "took too long", seconds=3)
    assert result == ValidationResult(False, "took too long", {"seconds": 3, "error": "timeout"})


def test_result_encodes_to_json() -> None:
    """Results are msgspec Structs and round-trip through JSON."""
    result = ValidationResult(True, "ok", {"n": [1, 2]})
    assert msgspec.json.decode(msgspec.json.encode(result), type=ValidationResult) == result


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
)
shaped = st.fixed_dictionaries(
    {},
    optional={"passed": json_like, "message": json_like, "data": json_like},
)
anything = (
    json_like
    | shaped
    | st.binary(max_size=40)
    | st.text(max_size=40)
    | shaped.map(lambda d: msgspec.json.encode(d))
    | st.builds(object)
    | st.dictionaries(st.integers() | st.text(max_size=3), json_like, max_size=3)
)


@settings(max_examples=500, deadline=None)
@given(anything)
def test_coerce_result_never_raises(value: object) -> None:
    """Whatever a validation returns, coerce_result gives a ValidationResult and never raises."""
    result = coerce_result(value)
    assert isinstance(result, ValidationResult)
    assert type(result.passed) is bool
    assert isinstance(result.message, str)
    assert isinstance(result.data, dict)
    if isinstance(value, dict) and type(value.get("passed")) is bool and "error" not in result.data:
        assert result.passed is value["passed"]


def test_identical_results_without_data_are_shared_and_read_only() -> None:
    """Results without data are shared per (passed, message); their data refuses changes."""
    first = coerce_result({"passed": True, "message": "ok"})
    second = coerce_result('{"passed": true, "message": "ok"}')
    assert first is second
    assert first == ValidationResult(True, "ok")
    with pytest.raises(TypeError, match="read-only"):
        first.data["x"] = 1
    assert first.data == {}
    assert msgspec.json.encode(first) == b'{"passed":true,"message":"ok","data":{}}'
    with_data = coerce_result({"passed": True, "message": "ok", "data": {}})
    with_data.data["x"] = 1  # a result with its own data is its own
    assert coerce_result({"passed": True, "message": "ok"}).data == {}
