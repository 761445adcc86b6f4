"""The structured result every validation returns (seed 000, "Structured Return Format").

This is the hot path: one result per validation call, so it is a msgspec Struct, and
:func:`coerce_result` does the least work that still checks every rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

__all__ = ["ResultError", "ValidationResult", "coerce_result"]


class ResultError:
    """The machine-readable values of ``data["error"]`` on a failed result.

    A validation that returned ``passed=False`` on its own has no ``error`` key; these mark
    results that gategraph made failed on the validation's behalf.
    """

    MALFORMED: Final = "malformed"
    """The return value was not ``{"passed": bool, "message"?: str, "data"?: object}``."""
    EXCEPTION: Final = "exception"
    """The validation raised."""
    TIMEOUT: Final = "timeout"
    """The validation ran past its timeout."""
    TOO_LARGE: Final = "too_large"
    """The result was larger than the runtime accepts."""
    READ_ONLY_VIOLATION: Final = "read_only_violation"
    """The validation tried to write."""


class ValidationResult(msgspec.Struct, frozen=True, gc=False):
    """What one validation call concluded.

    ``passed`` is required; ``message`` and ``data`` are optional (seed 000).
    """

    passed: bool
    """Whether the check passed."""
    message: str = ""
    """A short human-readable explanation."""
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    """Machine-readable details (counts, failures, the ``error`` kind)."""

    @classmethod
    def failure(cls, error: str, message: str, **data: Any) -> ValidationResult:
        """Build a failed result that gategraph made on a validation's behalf."""
        data["error"] = error
        return cls(passed=False, message=message, data=data)


class _NoData(dict[str, Any]):
    """The read-only empty ``data`` of results that gategraph shares (see ``_shared``)."""

    __slots__ = ()

    def _read_only(self, *args: object, **kwargs: object) -> None:
        raise TypeError("the data of a shared ValidationResult is read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _read_only  # type: ignore[assignment]
    __ior__ = _read_only  # type: ignore[assignment]


_NO_DATA: Final = _NoData()
_SHARED: dict[tuple[bool, str], ValidationResult] = {}
_SHARED_MAX: Final = 4096


def _shared(passed: bool, message: str) -> ValidationResult:
    """One result object per (passed, message) when there is no data.

    A fan-out of 100,000 checks that all say ``{"passed": true, "message": "ok"}`` then keeps
    one result instead of 100,000 (about 100 bytes each); results are frozen and their
    shared ``data`` refuses changes, so sharing is invisible.
    """
    key = (passed, message)
    found = _SHARED.get(key)
    if found is None:
        found = ValidationResult(passed=passed, message=message, data=_NO_DATA)
        if len(message) <= 256 and len(_SHARED) < _SHARED_MAX:
            _SHARED[key] = found
    return found


_decoder: Final = msgspec.json.Decoder()
_MAX_SHOWN: Final = 80


def _describe(value: object) -> str:
    text = repr(value)
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return f"{type(value).__name__} {text}"


def _malformed(reason: str) -> ValidationResult:
    return ValidationResult.failure(ResultError.MALFORMED, f"malformed validation result: {reason}")


def _from_mapping(value: Mapping[Any, Any]) -> ValidationResult:
    if "passed" not in value:
        keys = ", ".join(sorted(repr(k) for k in value)[:5]) or "none"
        return _malformed(f"'passed' is missing (keys: {keys})")
    passed = value["passed"]
    if type(passed) is not bool:
        return _malformed(f"'passed' must be a bool, got {_describe(passed)}")
    message = value.get("message", "")
    if message is None:
        message = ""
    elif not isinstance(message, str):
        return _malformed(f"'message' must be a string, got {_describe(message)}")
    data = value.get("data")
    if data is None:
        return _shared(passed, message)
    if isinstance(data, Mapping):
        if not all(isinstance(k, str) for k in data):
            return _malformed("'data' keys must be strings")
        data = dict(data)
    else:
        return _malformed(f"'data' must be an object, got {_describe(data)}")
    return ValidationResult(passed=passed, message=message, data=data)


def coerce_result(value: object) -> ValidationResult:
    """Turn whatever a validation returned into a :class:`ValidationResult`.

    Accepts a ``ValidationResult``, a mapping, or JSON text/bytes encoding an object.
    Anything else, or a value that breaks the format — ``passed`` missing or not a bool,
    ``message`` not a string, ``data`` not an object, undecodable JSON, ``None`` — becomes
    ``passed=False`` with ``data["error"] == "malformed"`` and a message saying what was
    wrong. ``message: null`` and ``data: null`` are read as absent. Keys other than
    ``passed``, ``message`` and ``data`` are ignored. Never raises.
    """
    if type(value) is dict:
        # What almost every validation returns, `{"passed": True, "message": "ok"}`, read
        # without the Mapping check (an ABC isinstance costs more than the rest).
        passed = value.get("passed")
        message = value.get("message", "")
        if type(passed) is bool and type(message) is str and value.get("data") is None:
            return _shared(passed, message)
    try:
        if isinstance(value, ValidationResult):
            # Structs are not type-checked on construction; a hand-built one can lie.
            if (
                type(value.passed) is bool
                and type(value.message) is str
                and isinstance(value.data, dict)
            ):
                return value
            return _from_mapping(
                {"passed": value.passed, "message": value.message, "data": value.data}
            )
        if isinstance(value, Mapping):
            return _from_mapping(value)
        if isinstance(value, str | bytes | bytearray | memoryview):
            try:
                decoded = _decoder.decode(value)
            except (msgspec.DecodeError, UnicodeDecodeError) as exc:
                return _malformed(f"not valid JSON ({exc})")
            if not isinstance(decoded, dict):
                return _malformed(f"JSON must encode an object, got {_describe(decoded)}")
            return _from_mapping(decoded)
        if value is None:
            return _malformed("the validation returned None")
        return _malformed(f"expected an object with 'passed', got {_describe(value)}")
    except Exception as exc:  # a hostile Mapping or __repr__ must not crash the run
        try:
            detail = f"{type(exc).__name__}: {exc}"
        except Exception:
            detail = type(exc).__name__
        return _malformed(f"reading the result raised {detail}")
