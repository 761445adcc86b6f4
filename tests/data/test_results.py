"""Structured returns (seed 000, "Structured Return Format"): well-formed, malformed, missing."""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from gategraph.runtime import ResultError, ValidationResult, coerce_result
from gategraph.runtime._data._events import ValidationCompleted
from gategraph.runtime._data._results import MAX_RESULT_BYTES, MAX_RESULT_DEPTH, coerce_failure
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import execute_graph
from gategraph.runtime._storage._eventlog import SQLiteEventLog, read_events
from hypothesis import HealthCheck, given, settings
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


# -- hostile return values ---------------------------------------------------------------------


class EqBomb(str):
    """A key that hashes like "passed" and raises when compared: `d.get("passed")` raises."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq on purpose")

    def __hash__(self) -> int:
        return hash("passed")


class HashBomb:
    """A key that hashes once (to be stored) and raises on every later hash and compare."""

    def __init__(self) -> None:
        self.armed = False

    def __hash__(self) -> int:
        if self.armed:
            raise RuntimeError("hash on purpose")
        return 7

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq on purpose")


def dict_with_hash_bomb() -> dict[Any, Any]:
    key = HashBomb()
    data = {key: 1}
    key.armed = True
    return data


class Opaque:
    """Every dunder a reader might call raises."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"getattr {name} on purpose")

    def __repr__(self) -> str:
        raise RuntimeError("repr on purpose")

    def __str__(self) -> str:
        raise RuntimeError("str on purpose")

    def __len__(self) -> int:
        raise RuntimeError("len on purpose")

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("iter on purpose")


class Spiteful:
    """Raises on every attribute it lacks and in every dunder a reader might call."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"getattr {name} on purpose")

    def _raise(self, *args: object) -> Any:
        raise RuntimeError("dunder on purpose")

    __repr__ = __str__ = __len__ = __iter__ = __eq__ = __hash__ = __bool__ = _raise  # type: ignore[assignment]


class Unprintable:
    """An object whose repr and str raise."""

    def __repr__(self) -> str:
        raise RuntimeError("repr on purpose")

    __str__ = __repr__


class SurrogateRepr:
    """An object whose repr holds a lone surrogate."""

    def __repr__(self) -> str:
        return "\ud800"


class ExitOnEq:
    """A key whose comparison raises SystemExit."""

    def __hash__(self) -> int:
        return hash("passed")

    def __eq__(self, other: object) -> bool:
        raise SystemExit(3)


class BadStrError(Exception):
    """An exception whose str raises."""

    def __str__(self) -> str:
        raise RuntimeError("no")


class RaisesBadStr:
    """A key whose comparison raises an exception that cannot be printed."""

    def __hash__(self) -> int:
        return hash("passed")

    def __eq__(self, other: object) -> bool:
        raise BadStrError


class Color(enum.Enum):
    RED = frozenset({1})


class Level(enum.IntEnum):
    HIGH = 3


class Shade(enum.StrEnum):
    DARK = "dark"


Pair = collections.namedtuple("Pair", "left right")


def nested(depth: int, leaf: object = 1) -> object:
    """``leaf`` inside ``depth`` lists."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def itself() -> dict[str, Any]:
    data: dict[str, Any] = {"ok": 1}
    data["me"] = data
    return data


def list_itself() -> dict[str, Any]:
    items: list[Any] = [1]
    items.append(items)
    return {"items": items}


def is_plain_json(value: object, depth: int = 0) -> bool:
    """Only dict (str keys), list, str, int, float (finite), bool, None, of bounded depth."""
    if depth > 1000:
        return False
    if type(value) is dict:
        return all(type(k) is str and is_plain_json(v, depth + 1) for k, v in value.items())
    if type(value) is list:
        return all(is_plain_json(v, depth + 1) for v in value)
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def assert_sound(result: object) -> ValidationResult:
    """The result is a ValidationResult that any JSON writer can write, within the limit."""
    assert type(result) is ValidationResult
    assert type(result.passed) is bool
    assert type(result.message) is str
    assert isinstance(result.data, dict)  # the shared empty data is a read-only dict
    assert is_plain_json(dict(result.data))
    encoded = msgspec.json.encode(result)  # raises on lone surrogates
    assert len(encoded) <= MAX_RESULT_BYTES
    json.dumps(msgspec.to_builtins(result), allow_nan=False)
    assert msgspec.json.decode(encoded, type=ValidationResult) == result
    return result


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: {EqBomb("x"): 1}, "reading the result raised RuntimeError: eq on purpose"),
        (lambda: {ExitOnEq(): 1}, "reading the result raised SystemExit: 3"),
        (lambda: {RaisesBadStr(): 1}, "reading the result raised BadStrError"),
        (dict_with_hash_bomb, "'passed' is missing"),
        (lambda: {"passed": True, "data": dict_with_hash_bomb()}, "'data' keys must be strings"),
        (Opaque, "reading the result raised RuntimeError: getattr __class__ on purpose"),
        (Unprintable, "expected an object with 'passed', got Unprintable (unprintable)"),
        (SurrogateRepr, "got SurrogateRepr \\ud800"),
        (
            lambda: {"passed": True, "data": {"x": Opaque()}},
            "data is not JSON: an Opaque at data.x",
        ),
        (
            lambda: {"passed": True, "data": {"x": Unprintable()}},
            "data is not JSON: an Unprintable",
        ),
        (Spiteful, "expected an object with 'passed', got Spiteful (unprintable)"),
        (lambda: {"passed": True, "data": {"x": [Spiteful()]}}, "a Spiteful at data.x[0]"),
        (lambda: {"passed": True, "data": itself()}, "data refers to itself at data.me"),
        (lambda: {"passed": True, "data": list_itself()}, "data refers to itself at data.items[1]"),
        (
            lambda: {"passed": True, "data": {"d": nested(5000)}},
            "data nests deeper than 100 levels",
        ),
        (lambda: {"passed": True, "data": {"d": nested(100)}}, "data nests deeper than 100 levels"),
        (lambda: {"passed": True, "data": {"x": {1, 2}}}, "data is not JSON: a set at data.x"),
        (
            lambda: {"passed": True, "data": {"x": [b"raw"]}},
            "data is not JSON: a bytes at data.x[0]",
        ),
        (
            lambda: {"passed": True, "data": {"x": object()}},
            "data is not JSON: an object at data.x",
        ),
        (
            lambda: {"passed": True, "data": {"x": math.nan}},
            "data is not JSON: a float nan at data.x",
        ),
        (lambda: {"passed": True, "data": {"x": {"y": -math.inf}}}, "a float -inf at data.x.y"),
        (lambda: {"passed": True, "data": {"x": decimal.Decimal(1)}}, "a Decimal at data.x"),
        (lambda: {"passed": True, "data": {"at": datetime.date(2026, 1, 2)}}, "a date at data.at"),
        (lambda: {"passed": True, "data": {"x": Color.RED}}, "data is not JSON: a Color at data.x"),
        (
            lambda: {"passed": True, "data": {"x": {1: 2}}},
            "a key that is not a string (int 1) at data.x",
        ),
        (lambda: {"passed": True, "data": {"a b": {"c": {1}}}}, "a set at data['a b'].c"),
        (lambda: {"passed": True, "message": "bad \ud800"}, "'message' is not valid text"),
        (lambda: {"passed": True, "message": "\udcff", "data": {"n": 1}}, "'message' is not valid"),
        (lambda: {"passed": True, "data": {"a": ["ok", "x\ud800"]}}, "not valid text ("),
        (lambda: {"passed": True, "data": {"k\udfff": 1}}, "a key that is not valid text"),
        (lambda: '{"passed": true, "data": ' + "[" * 5000 + "]" * 5000 + "}", "nests too deeply"),
        (lambda: '{"passed": true, "message": "\\ud800"}', "not valid JSON"),
        (lambda: ValidationResult(True, "ok", {"s": {1}}), "data is not JSON: a set at data.s"),
    ],
)
def test_hostile_values_are_malformed(make: Any, reason: str) -> None:
    """Hostile returns are malformed results saying why and where, never an exception."""
    result = assert_sound(coerce_result(make()))
    assert result.passed is False
    assert result.data["error"] == "malformed"
    assert reason in result.message, result.message
    assert len(result.message) < 400


def test_depth_limit_is_exact() -> None:
    """data may nest MAX_RESULT_DEPTH levels (data itself is one), not one more."""
    deepest = {"d": nested(MAX_RESULT_DEPTH - 1)}
    ok = assert_sound(coerce_result({"passed": True, "data": deepest}))
    assert ok.data == deepest
    as_dicts: dict[str, Any] = {}
    inner = as_dicts
    for _ in range(MAX_RESULT_DEPTH - 1):
        inner["k"] = {}
        inner = inner["k"]
    assert coerce_result({"passed": True, "data": as_dicts}).passed is True
    inner["k"] = {}
    too_deep = coerce_result({"passed": True, "data": as_dicts})
    assert too_deep.data["error"] == "malformed"
    assert f"deeper than {MAX_RESULT_DEPTH} levels" in too_deep.message
    # Brackets and quotes inside strings are text, not nesting.
    tricky = {"s": "[[[{{" * 300 + '\\"\\\\"', "d": nested(MAX_RESULT_DEPTH - 1)}
    assert coerce_result({"passed": True, "data": tricky}).passed is True


def test_self_reference_through_a_validation_result() -> None:
    """A hand-built result whose data holds itself is malformed, not a RecursionError."""
    data: dict[str, Any] = {}
    data["loop"] = [data]
    result = assert_sound(coerce_result(ValidationResult(True, "ok", data)))
    assert "data refers to itself at data.loop[0]" in result.message


def test_keyboard_interrupt_still_propagates() -> None:
    """A person's Ctrl-C is not a result: it goes through."""

    class Interrupting:
        def __hash__(self) -> int:
            return hash("passed")

        def __eq__(self, other: object) -> bool:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        coerce_result({Interrupting(): 1})


@pytest.mark.parametrize(
    ("value", "size_over"),
    [
        ({"passed": True, "data": {"s": "x" * (50 << 20)}}, 50 << 20),
        ({"passed": True, "message": "x" * (50 << 20)}, 50 << 20),
        ({"passed": True, "message": "x" * (50 << 20), "data": {"n": 1}}, 50 << 20),
        ({"passed": False, "message": "é" * (600 << 10)}, MAX_RESULT_BYTES),
        ({"passed": True, "data": {"many": ["y" * 1000] * 2000}}, MAX_RESULT_BYTES),
        ({"passed": True, "data": {"t": ("z" * (2 << 20),)}}, 2 << 20),
        ('{"passed": true, "data": {"s": "' + "w" * (2 << 20) + '"}}', 2 << 20),
    ],
)
def test_huge_results_are_too_large(value: object, size_over: int) -> None:
    """A result over MAX_RESULT_BYTES is too_large, with its size."""
    result = assert_sound(coerce_result(value))
    assert result.passed is False
    assert result.data["error"] == "too_large"
    assert result.data["size"] > size_over
    assert f"over the limit of {MAX_RESULT_BYTES}" in result.message


def test_result_just_under_the_limit_passes() -> None:
    """The limit is on the encoded result: one just under it is kept whole."""
    frame = len(msgspec.json.encode(ValidationResult(True, "", {"s": ""})))
    fits = {"passed": True, "data": {"s": "x" * (MAX_RESULT_BYTES - frame)}}
    assert len(msgspec.json.encode(coerce_result(fits))) == MAX_RESULT_BYTES
    over = {"passed": True, "data": {"s": "x" * (MAX_RESULT_BYTES - frame + 1)}}
    assert coerce_result(over).data["error"] == "too_large"
    quoted = {"passed": True, "message": '"' * (MAX_RESULT_BYTES // 2)}
    assert coerce_result(quoted).data["error"] == "too_large"  # each quote encodes to 2 bytes


def test_json_carriable_values_become_plain() -> None:
    """Tuples, enums and str subclasses become plain JSON values; the data is a copy."""

    class Name(str):
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("eq on purpose")

        __hash__ = str.__hash__

    inner = [1, 2]
    data = {
        "t": (1, (2, 3)),
        "level": Level.HIGH,
        "shade": Shade.DARK,
        "pair": Pair(1, [2]),
        Name("name"): Name("value"),
        "inner": inner,
    }
    result = assert_sound(coerce_result({"passed": True, "data": data}))
    assert result.data == {
        "t": [1, [2, 3]],
        "level": 3,
        "shade": "dark",
        "pair": [1, [2]],
        "name": "value",
        "inner": [1, 2],
    }
    assert {type(k) for k in result.data} == {str}
    assert type(result.data["level"]) is int
    inner.append(3)  # the validation changing its own list later changes nothing
    assert result.data["inner"] == [1, 2]


def test_failure_helper_keeps_messages_writable() -> None:
    """ValidationResult.failure spells out lone surrogates and shortens huge messages."""
    result = assert_sound(ValidationResult.failure("exception", "raised: \ud800" + "x" * 10_000))
    assert result.message.startswith("raised: \\ud800")
    assert len(result.message) <= 4096


# Hostile leaves for the property test: each made fresh, some raising in every dunder.
hostile_leaf = st.sampled_from(
    [
        Spiteful,
        Unprintable,
        SurrogateRepr,
        object,
        lambda: {1, 2},
        lambda: frozenset({"a"}),
        lambda: b"bytes",
        lambda: math.nan,
        lambda: math.inf,
        lambda: Color.RED,
        lambda: Level.HIGH,
        lambda: Shade.DARK,
        lambda: decimal.Decimal("1.5"),
        lambda: "x" * (MAX_RESULT_BYTES + 1),
        lambda: nested(MAX_RESULT_DEPTH + 5),
        lambda: nested(3000),
        itself,
        list_itself,
        dict_with_hash_bomb,
        lambda: {EqBomb("k"): 1},
    ]
).map(lambda make: make())
texts = st.text(
    alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF),
    max_size=12,
)
leaf = hostile_leaf | json_like | texts | st.tuples(json_like, json_like)
tree = st.recursive(
    leaf,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(texts, children, max_size=4)
        | st.lists(st.tuples(texts, children), max_size=3).map(
            lambda pairs: {EqBomb(k) if i % 2 else k: v for i, (k, v) in enumerate(pairs)}
        )
    ),
    max_leaves=12,
)
hostile_result = (
    st.fixed_dictionaries(
        {"passed": st.booleans()},
        optional={"message": texts | hostile_leaf, "data": tree},
    )
    | tree
    | hostile_leaf
    | st.builds(ValidationResult, st.booleans(), texts, st.dictionaries(texts, tree, max_size=3))
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_result)
def test_hostile_values_never_raise(value: object) -> None:
    """Whatever a validation returns, hostile objects included, the result is sound JSON."""
    result = assert_sound(coerce_result(value))
    if not result.passed or "error" not in result.data:
        return
    assert result.data["error"] in {"malformed", "too_large"}


HOSTILE_GRAPH = """
version: 1
name: hostile-results
validations:
  - name: eq-key
    code: |
      class Key:
          def __hash__(self):
              return hash("passed")
          def __eq__(self, other):
              raise RuntimeError("eq on purpose")
      def run(**_):
          return {Key(): 1}
  - name: itself
    code: |
      def run(**_):
          data = {}
          data["me"] = data
          return {"passed": True, "data": data}
  - name: deep
    code: |
      def run(**_):
          value = 1
          for _ in range(5000):
              value = [value]
          return {"passed": True, "data": {"value": value}}
  - name: a-set
    code: |
      def run(**_):
          return {"passed": True, "data": {"x": {1, 2}}}
  - name: surrogate
    code: |
      def run(**_):
          return {"passed": True, "message": "\\ud800", "data": {"s": "\\udcff"}}
  - name: huge
    code: |
      def run(**_):
          return {"passed": True, "data": {"s": "x" * (3 << 20)}}
  - name: unprintable
    code: |
      class Thing:
          def __repr__(self):
              raise RuntimeError("repr on purpose")
          def __getattr__(self, name):
              raise RuntimeError("getattr on purpose")
      def run(**_):
          return Thing()
  - name: fine
    code: |
      def run(**_):
          return {"passed": True, "message": "ok", "data": {"n": (1, 2)}}
nodes:
  - {id: eq-key, validation: eq-key}
  - {id: itself, validation: itself}
  - {id: deep, validation: deep}
  - {id: a-set, validation: a-set}
  - {id: surrogate, validation: surrogate}
  - {id: huge, validation: huge}
  - {id: unprintable, validation: unprintable}
  - {id: fine, validation: fine}
"""


@pytest.mark.anyio
async def test_execute_graph_survives_hostile_results(tmp_path: Path) -> None:
    """A run whose validations return hostile values completes, and its log holds them."""
    graph = load_graph(HOSTILE_GRAPH)
    path = tmp_path / "events.db"
    with anyio.fail_after(60):
        async with SQLiteEventLog(path) as log:
            run = await execute_graph(graph, event_log=log, plan_id="hostile")
    results = {v.node: assert_sound(v.result) for v in run.validations}
    assert results["fine"] == ValidationResult(True, "ok", {"n": [1, 2]})
    errors = {node: r.data.get("error") for node, r in results.items() if node != "fine"}
    assert errors == {
        "eq-key": "malformed",
        "itself": "malformed",
        "deep": "malformed",
        "a-set": "malformed",
        "surrogate": "malformed",
        "huge": "too_large",
        "unprintable": "malformed",
    }
    assert "refers to itself" in results["itself"].message
    assert "deeper than" in results["deep"].message
    assert "a set at data.x" in results["a-set"].message
    completed = [e for e in read_events(path, "hostile") if isinstance(e, ValidationCompleted)]
    assert {e.node: e.result for e in completed} == results


def test_coerce_failure_always_encodes() -> None:
    """A failed call's result encodes whatever its message and detail hold."""
    plain = coerce_failure("timeout", "v timed out after 3 s", {"timeout": 3.0})
    assert plain == ValidationResult(
        False, "v timed out after 3 s", {"timeout": 3.0, "error": "timeout"}
    )
    odd = assert_sound(coerce_failure("exception", "raised ValueError: \ud800" + "x" * (2 << 20)))
    assert odd.data == {"error": "exception"}
    assert odd.message.startswith("raised ValueError: \\ud800")
    assert len(odd.message) <= 4096
    bad = assert_sound(coerce_failure("exception", "boom", {"message": "m", "kept": {1, 2}}))
    assert bad.message == "boom"
    assert bad.data["error"] == "exception"
    assert "a set at data.kept" in bad.data["detail"]
    huge = assert_sound(coerce_failure("exception", "boom", {"stdout": "o" * (2 << 20)}))
    assert huge.data["error"] == "exception"
    assert "over the limit" in huge.data["detail"]
