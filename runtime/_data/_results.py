"""The structured result every validation returns (seed 000, "Structured Return Format").

This is the hot path: one result per validation call, so it is a msgspec Struct, and
:func:`coerce_result` does the least work that still checks every rule.

Every result that leaves :func:`coerce_result` encodes to JSON: its ``data`` holds only
dicts with string keys, lists, strings, integers, finite floats, booleans and ``None``,
nests at most :data:`MAX_RESULT_DEPTH` levels, never refers to itself, and the whole
result encodes to at most :data:`MAX_RESULT_BYTES`. Deciding that here, and not where a
result is stored, means every way a validation runs (in the engine's process, in a worker
process, on Ray) gets the same answer, and the event log never meets a value it cannot
write.

Out of reach: data that shares its containers so that it expands past memory (a list that
holds one list twice, sixty levels down) keeps the encoder busy until memory runs out.
Seeing it coming takes a walk in Python over every result, some microseconds each; only
code written to do it builds such data, and a result that crosses a process boundary as
JSON text cannot share anything.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
from gategraph.runtime._base._sigint import is_ctrl_c

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "MAX_RESULT_BYTES",
    "MAX_RESULT_DEPTH",
    "Enforcement",
    "ResultError",
    "ValidationResult",
    "coerce_failure",
    "coerce_result",
    "enforcement",
]

MAX_RESULT_BYTES: Final = 1 << 20
"""A result (passed, message and data) larger than this, encoded as JSON, fails as
``too_large``."""
MAX_RESULT_DEPTH: Final = 100
"""How many levels of containers ``data`` may nest (``data`` itself is level 1); deeper
data fails as ``malformed``. Far above what any report needs, and far below what would
exhaust Python's recursion limit in whatever reads the result later."""


Enforcement = Literal["kernel", "guard", "server"]
"""What held a call to read-only: ``kernel``, the sandbox (the kernel refuses whatever the
code does); ``guard``, the in-process guard (it sees what Python code does; code written
to defeat it can); ``server``, an MCP tool's own server (its word, ``readOnlyHint``)."""


def enforcement(ran_in: str | None) -> Enforcement | None:
    """What enforced read-only for a call that ran in ``ran_in`` (a record's
    ``isolation``), or None when that is not known (a log written before it was)."""
    if ran_in is None:
        return None
    return "kernel" if ran_in == "sandbox" else "server" if ran_in == "mcp" else "guard"


class ResultError:
    """The machine-readable values of ``data["error"]`` on a failed result.

    A validation that returned ``passed=False`` on its own has no ``error`` key; these mark
    results that gategraph made failed on the validation's behalf.
    """

    MALFORMED: Final = "malformed"
    """The return value was not ``{"passed": bool, "message"?: str, "data"?: object}``,
    or its data was not JSON."""
    EXCEPTION: Final = "exception"
    """The validation raised."""
    TIMEOUT: Final = "timeout"
    """The validation ran past its timeout."""
    TOO_LARGE: Final = "too_large"
    """The result was larger than the runtime accepts."""
    READ_ONLY_VIOLATION: Final = "read_only_violation"
    """The validation tried to write."""


_MAX_FAILURE_MESSAGE: Final = 4096


def _safe_text(text: str, limit: int = _MAX_FAILURE_MESSAGE) -> str:
    """``text`` shortened to ``limit`` characters, lone surrogates spelled ``\\udXXX``."""
    if not text.isascii():
        text = text[:limit].encode("utf-8", "backslashreplace").decode("utf-8") + text[limit:]
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


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
        """Build a failed result that gategraph made on a validation's behalf.

        The message is shortened to 4096 characters and any lone surrogate in it is
        spelled out, so a message quoting a validation's exception always encodes.
        """
        data["error"] = error
        return cls(passed=False, message=_safe_text(message), data=data)


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

_decoder: Final = msgspec.json.Decoder()
_encoder: Final = msgspec.json.Encoder()
# The bytes of `{"passed":true,"message":,"data":}`: a result's size is this, one more
# when it failed, plus its encoded message and data.
_FRAME_BYTES: Final = len(_encoder.encode(ValidationResult(True, "", {}))) - 4
_MAX_SHOWN: Final = 80
_SHORT_MESSAGE: Final = 4096
_isfinite: Final = math.isfinite
# What `_too_deep` keeps of JSON text: quotes and brackets, `{}` read as `[]`.
_TO_SQUARE: Final = bytes.maketrans(b"{}", b"[]")
_NOT_SHAPE: Final = bytes(c for c in range(256) if c not in b'"[]{}')
_STRING: Final = re.compile(rb'"[^"]*"')
# JSON text this short cannot nest deeper than MAX_RESULT_DEPTH (a level takes 2 bytes).
_SHALLOW_BYTES: Final = 2 * MAX_RESULT_DEPTH


def _describe(value: object) -> str:
    """``TYPE REPR``, shortened; never raises, whatever ``__repr__`` does."""
    try:
        text = repr(value)
        if type(text) is not str:
            raise TypeError
    except Exception:
        text = "(unprintable)"
    if len(text) > _MAX_SHOWN:
        text = text[: _MAX_SHOWN - 3] + "..."
    return f"{type(value).__name__} {text}"


def _exception_text(exc: BaseException) -> str:
    """``TYPE: MESSAGE`` of an exception, shortened; never raises, whatever it does."""
    try:
        text = str.__str__(type(exc).__name__)
    except BaseException:  # a hostile metaclass; nothing of it is worth a crash
        return "an exception"
    try:
        detail = str.__str__(str(exc))
    except BaseException:  # its __str__ may raise too
        detail = ""
    return _safe_text(f"{text}: {detail}" if detail else text, 200)


def _malformed(reason: str) -> ValidationResult:
    return ValidationResult.failure(ResultError.MALFORMED, f"malformed validation result: {reason}")


def _too_large(size: int, *, exact: bool = True) -> ValidationResult:
    amount = f"{size} bytes" if exact else f"at least {size} bytes"
    return ValidationResult.failure(
        ResultError.TOO_LARGE,
        f"the result is {amount}, over the limit of {MAX_RESULT_BYTES}",
        size=size,
    )


def _message_failure(message: str, extra: int) -> ValidationResult | int:
    """The failure a message causes, or its encoded size (``extra`` more bytes expected)."""
    if len(message) + extra > MAX_RESULT_BYTES:
        # Every character is at least a byte: no need to encode it to know.
        return _too_large(len(message) + extra, exact=False)
    try:
        return len(_encoder.encode(message))
    except UnicodeEncodeError as exc:
        return _malformed(f"'message' is not valid text ({_unicode_problem(exc)})")


def _unicode_problem(exc: UnicodeEncodeError) -> str:
    return f"{exc.reason}: {exc.object[exc.start : exc.end]!a} at position {exc.start}"


def _shared(passed: bool, message: str) -> ValidationResult:
    """One result object per (passed, message) when there is no data.

    A fan-out of 100,000 checks that all say ``{"passed": true, "message": "ok"}`` then keeps
    one result instead of 100,000 (about 100 bytes each); results are frozen and their
    shared ``data`` refuses changes, so sharing is invisible. Only checked messages are
    kept, so a hit needs no check.
    """
    key = (passed, message)
    found = _SHARED.get(key)
    if found is None:
        if len(message) > _SHORT_MESSAGE or not message.isascii():
            size = _message_failure(message, _FRAME_BYTES + 3)
            if isinstance(size, ValidationResult):
                return size
            if _FRAME_BYTES + (not passed) + 2 + size > MAX_RESULT_BYTES:
                return _too_large(_FRAME_BYTES + (not passed) + 2 + size)
        found = ValidationResult(passed=passed, message=message, data=_NO_DATA)
        if len(message) <= 256 and len(_SHARED) < _SHARED_MAX:
            _SHARED[key] = found
    return found


# -- data: is it JSON? ------------------------------------------------------------------------


def _where(path: list[str | int], key: object = None) -> str:
    """``data.findings[2].file``, for messages; shortened when the path is long."""
    out = "data"
    for part in path if key is None else (*path, key):
        if type(part) is int:
            out += f"[{part}]"
        elif isinstance(part, str) and str.isidentifier(part):
            out += f".{part}"
        else:
            shown = str.__repr__(part) if isinstance(part, str) else "[?]"
            out += f"[{shown if len(shown) <= 40 else shown[:37] + '...'}]"
        if len(out) > 160:
            return out[:157] + "..."
    return out


def _kind(value: object) -> str:
    kind = type(value)
    if kind is float:
        return f"a float {value!r}"
    name = kind.__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _walk(data: dict[str, Any]) -> ValidationResult | bool:
    """Walk ``data`` without recursion; return a failure, or whether it must be copied.

    ``True`` means the data holds values JSON can carry but that are not the plain types
    (``str``/``int``/``float``/``dict``/``list`` subclasses such as enums, tuples): they are
    copied to plain ones, so nothing of the validation's own classes survives in a result.
    Containers are read through the base types' own methods (``dict.items``), as the
    encoder reads them, so an overridden ``items`` or ``__iter__`` cannot show one thing
    to this check and another to the encoder.

    The walk keeps a lower bound of the encoded size and stops as soon as it is over
    :data:`MAX_RESULT_BYTES`: data that holds one list many times over (a few kilobytes
    of objects that would encode to terabytes), or one huge string, is found too large
    without being encoded.
    """
    convert = False
    # Invariant: `left` is at most MAX_RESULT_BYTES minus the bytes seen so far.
    left = MAX_RESULT_BYTES - 2
    items: Iterator[tuple[Any, Any]] = iter(dict.items(data))
    is_dict = True
    # One frame per open container: its items, whether it is a dict, its id.
    frames = [(items, is_dict, id(data))]
    on_path = {id(data)}
    path: list[Any] = []  # the keys from `data` down to the open container
    while True:
        for key, value in items:
            kind = type(value)
            if not is_dict:
                left -= 1
            elif type(key) is str:
                left -= len(key) + 4
            elif issubclass(type(key), str):
                convert = True
                left -= str.__len__(key) + 4
            elif path:
                shown = _describe(key)
                return _malformed(
                    f"data is not JSON: a key that is not a string ({shown}) at {_where(path)}"
                )
            else:
                return _malformed(f"'data' keys must be strings, got {_describe(key)}")
            if kind is str:
                left -= len(value) + 2
            elif kind is int or kind is bool or value is None:
                left -= 1
            elif kind is float:
                if not _isfinite(value):
                    where = _where(path, key)
                    return _malformed(f"data is not JSON: {_kind(value)} at {where}")
                left -= 1
            elif kind is dict or kind is list:
                break
            elif issubclass(kind, dict | list | tuple):
                convert = True
                break
            elif issubclass(kind, str):
                convert = True
                left -= str.__len__(value) + 2
            elif issubclass(kind, int | float):
                if issubclass(kind, float) and not _isfinite(float.__float__(value)):
                    shown = f"a float {float.__repr__(value)}"
                    return _malformed(f"data is not JSON: {shown} at {_where(path, key)}")
                convert = True
                left -= 1
            else:
                return _malformed(f"data is not JSON: {_kind(value)} at {_where(path, key)}")
        else:
            # The open container is done: back to its parent.
            on_path.discard(frames.pop()[2])
            if not frames:
                break
            path.pop()
            items, is_dict, _ = frames[-1]
            continue
        # `value` is a container: go into it.
        if left < 0:
            return _too_large(MAX_RESULT_BYTES - left, exact=False)
        ident = id(value)
        if ident in on_path:
            return _malformed(f"data refers to itself at {_where(path, key)}")
        if len(frames) >= MAX_RESULT_DEPTH:
            return _malformed(
                f"data nests deeper than {MAX_RESULT_DEPTH} levels (at {_where(path, key)})"
            )
        path.append(key)
        is_dict = issubclass(kind, dict)
        if is_dict:
            items = iter(dict.items(value))
        elif issubclass(kind, list):
            items = enumerate(list.__iter__(value))
        else:
            items = enumerate(tuple.__iter__(value))
        frames.append((items, is_dict, ident))
        on_path.add(ident)
        left -= 2
    if left < 0:
        return _too_large(MAX_RESULT_BYTES - left, exact=False)
    return convert


def _plain(value: Any) -> Any:
    """A copy of scanned data made of plain types only (no subclasses, no tuples).

    Recursive: :func:`_scan` has bounded the depth at :data:`MAX_RESULT_DEPTH` and ruled
    out cycles.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    if issubclass(kind, dict):
        return {str.__str__(k): _plain(v) for k, v in dict.items(value)}
    if issubclass(kind, list):
        return [_plain(v) for v in list.__iter__(value)]
    if issubclass(kind, tuple):
        return [_plain(v) for v in tuple.__iter__(value)]
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, int):
        return int.__int__(value)
    return float.__float__(value)


def _surrogate_at(data: dict[str, Any]) -> str:
    """Where the first string that UTF-8 cannot encode is (data already scanned)."""
    todo: list[tuple[list[str | int], Any]] = [([], data)]
    while todo:
        path, node = todo.pop()
        items = node.items() if type(node) is dict else enumerate(node)
        for key, value in items:
            for text, what in ((key, "a key"), (value, "a string")):
                if type(text) is str and not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError as exc:
                        problem = _unicode_problem(exc)
                        return f"{what} that is not valid text ({problem}) at {_where(path, key)}"
            if type(value) is dict or type(value) is list:
                todo.append(([*path, key], value))
    return "a string that is not valid text"  # pragma: no cover - the encoder said there is one


def _too_deep(encoded: bytes) -> bool:
    """Whether JSON written by our encoder nests deeper than :data:`MAX_RESULT_DEPTH`.

    Reads the text, not the objects: once the escaped quotes are gone, every string is
    ``"..."`` with no quote inside, so keeping only quotes and brackets, dropping the
    strings, then taking away the innermost ``[]`` pairs once a level finds the depth in a
    few passes of C over the text.
    """
    if encoded.count(b"[") + encoded.count(b"{") <= MAX_RESULT_DEPTH:
        return False
    if b"\\" in encoded:
        # Escaped backslashes first: in `\\\"` the quote is escaped, in `\\"` it is not.
        encoded = encoded.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = encoded.translate(_TO_SQUARE, _NOT_SHAPE).replace(b'""', b"")
    if b'"' in shape:
        shape = _STRING.sub(b"", shape)
    for _ in range(MAX_RESULT_DEPTH):
        shape = shape.replace(b"[]", b"")
        if not shape:
            return False
    return True


def _checked(
    passed: bool, message: str, data: dict[str, Any], original: ValidationResult | None = None
) -> ValidationResult:
    """The result of ``passed``, ``message`` and ``data``, or the failure they cause.

    The data is encoded once, by the encoder that will store it, and decoded again: the
    copy is the result's data, so nothing the validation holds on to (nor a class of its
    own) stays in a result. When the copy differs from the original (a set became a list,
    bytes base64 text, a NaN ``null``), the encoder refused it, or the text nests too
    deep, :func:`_convert` finds out why, or copies what JSON can carry (tuples, enums)
    to plain values. ``original`` is returned as it is when it has no data to copy.
    """
    if not data:
        return _with_message(passed, message, {}, _FRAME_BYTES + (not passed) + 2, original)
    try:
        encoded = _encoder.encode(data)
    except (TypeError, ValueError, OverflowError, RecursionError):
        # Unsupported objects, lone surrogates (a UnicodeEncodeError is a ValueError),
        # and data that refers to itself or nests past the recursion limit.
        return _convert(passed, message, data)
    size = _FRAME_BYTES + (not passed) + len(encoded)
    if size > MAX_RESULT_BYTES:
        return _too_large(size)
    plain = _decoder.decode(encoded)
    try:
        same = plain == data
    except Exception:  # a hostile __eq__ of a str subclass (key or value)
        same = False
    if not same or (len(encoded) > _SHALLOW_BYTES and _too_deep(encoded)):
        return _convert(passed, message, data)
    return _with_message(passed, message, plain, size, None)


def _convert(passed: bool, message: str, data: dict[str, Any]) -> ValidationResult:
    """The slow way: say what in ``data`` is not JSON, or copy it to plain values."""
    found = _walk(data)
    if isinstance(found, ValidationResult):
        return found
    plain = _plain(data)
    try:
        encoded = _encoder.encode(plain)
    except UnicodeEncodeError:
        return _malformed(f"data is not JSON: {_surrogate_at(plain)}")
    size = _FRAME_BYTES + (not passed) + len(encoded)
    if size > MAX_RESULT_BYTES:
        return _too_large(size)
    return _with_message(passed, message, plain, size, None)


def _with_message(
    passed: bool,
    message: str,
    data: dict[str, Any],
    size: int,
    original: ValidationResult | None,
) -> ValidationResult:
    """Check the message too (``size``: the bytes of the rest), then build the result."""
    # A short ASCII message encodes to at most 6 bytes a character (`\u0000`): only one
    # that might matter to the limit is encoded to be sure.
    if (
        len(message) > _SHORT_MESSAGE
        or not message.isascii()
        or size + 6 * len(message) + 2 > MAX_RESULT_BYTES
    ):
        found = _message_failure(message, size)
        if isinstance(found, ValidationResult):
            return found
        size += found
        if size > MAX_RESULT_BYTES:
            return _too_large(size)
    if original is not None:
        return original
    return ValidationResult(passed, message, data)


def _from_mapping(value: Mapping[Any, Any]) -> ValidationResult:
    if "passed" not in value:
        keys = ", ".join(sorted(_describe(k) for k, _ in zip(value, range(5), strict=False)))
        return _malformed(f"'passed' is missing (keys: {keys or 'none'})")
    passed = value["passed"]
    if type(passed) is not bool:
        return _malformed(f"'passed' must be a bool, got {_describe(passed)}")
    message = value.get("message", "")
    if message is None:
        message = ""
    elif not isinstance(message, str):
        return _malformed(f"'message' must be a string, got {_describe(message)}")
    elif type(message) is not str:
        message = str.__str__(message)  # a str subclass's own methods are not to be trusted
    data = value.get("data")
    if data is None:
        return _shared(passed, message)
    if type(data) is not dict:
        if not isinstance(data, Mapping):
            return _malformed(f"'data' must be an object, got {_describe(data)}")
        data = dict(data)
    return _checked(passed, message, data)


def coerce_result(value: object) -> ValidationResult:
    """Turn whatever a validation returned into a :class:`ValidationResult`.

    Accepts a ``ValidationResult``, a mapping, or JSON text/bytes encoding an object.
    Anything else, or a value that breaks the format — ``passed`` missing or not a bool,
    ``message`` not a string, ``data`` not an object, undecodable JSON, ``None`` — becomes
    ``passed=False`` with ``data["error"] == "malformed"`` and a message saying what was
    wrong. ``message: null`` and ``data: null`` are read as absent. Keys other than
    ``passed``, ``message`` and ``data`` are ignored.

    ``data`` must be JSON: a set, bytes, an arbitrary object, a NaN, text with a lone
    surrogate, a value that contains itself, or containers nested deeper than
    :data:`MAX_RESULT_DEPTH` make the result ``malformed`` (the message says what and
    where); tuples, enums and other subclasses of the JSON types are copied to plain
    values. A result over :data:`MAX_RESULT_BYTES` is ``too_large``. Never raises: a value
    whose own methods raise (``__eq__``, ``__hash__``, ``__repr__``, ...), even with
    ``KeyboardInterrupt`` or ``SystemExit``, is ``malformed``; only a person's Ctrl-C that
    lands while the value is read propagates.
    """
    try:
        if type(value) is dict:
            # What almost every validation returns, `{"passed": True, "message": "ok"}`,
            # read without the Mapping check (an ABC isinstance costs more than the rest).
            passed = value.get("passed")
            message = value.get("message", "")
            if type(passed) is bool and type(message) is str:
                data = value.get("data")
                if data is None:
                    return _shared(passed, message)
                if type(data) is dict:
                    return _checked(passed, message, data)
            return _from_mapping(value)
        if isinstance(value, ValidationResult):
            # Structs are not type-checked on construction; a hand-built one can lie.
            if type(value.passed) is bool and type(value.message) is str:
                if type(value.data) is dict or value.data is _NO_DATA:
                    return _checked(value.passed, value.message, value.data, value)
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
            except RecursionError:
                return _malformed("the JSON text nests too deeply to read")
            if not isinstance(decoded, dict):
                return _malformed(f"JSON must encode an object, got {_describe(decoded)}")
            return _from_mapping(decoded)
        if value is None:
            return _malformed("the validation returned None")
        return _malformed(f"expected an object with 'passed', got {_describe(value)}")
    except BaseException as exc:
        # A hostile value's own methods (`.get`, `__eq__` of a key, `__len__`, `__repr__`,
        # ...) raised, SystemExit and KeyboardInterrupt included. No cancellation can
        # arrive here: nothing in this function awaits, so only a person's Ctrl-C, landing
        # while the value is read, is not the value's own doing; a validation's result
        # never crashes the run (seed 000, "Structured Return Format").
        if isinstance(exc, KeyboardInterrupt) and is_ctrl_c(exc):
            raise
        return _malformed(f"reading the result raised {_exception_text(exc)}")


def coerce_failure(
    error: str, message: str, detail: Mapping[str, Any] | None = None
) -> ValidationResult:
    """Build the failed result of a call that did not return one (it raised, timed out ...).

    ``error`` is the :class:`ResultError` kind, ``message`` says what happened (often quoting
    the validation's exception) and ``detail`` is more data. Never raises, and the result
    always encodes, as one from :func:`coerce_result` does: the message is shortened and
    its lone surrogates spelled out, and a ``detail`` that is not JSON, or too large, is
    replaced by a note saying why (the failure itself is kept).
    """
    message = _safe_text(message)
    try:
        data = dict(detail) if detail else {}
        data["error"] = error
        result = _checked(False, message, data)
    except BaseException as exc:  # nothing here awaits: only the detail's own methods raise
        if isinstance(exc, KeyboardInterrupt) and is_ctrl_c(exc):
            raise
        result = _malformed(f"reading the detail raised {_exception_text(exc)}")
    if result.data.get("error") == error and result.message == message:
        return result
    return ValidationResult(False, message, {"error": error, "detail": _safe_text(result.message)})
