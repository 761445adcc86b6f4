"""The artifact a round's validations judge, frozen: one projection every validation of the
round shares and none can change.

:func:`freeze` makes it once per round (not per call): a deep copy in which every
``dict`` is a :class:`FrozenDict` and every ``list`` a :class:`FrozenList`. They are
subclasses of ``dict`` and ``list``, so code that checks ``isinstance(x, dict)`` (a JSON
Schema validator) or encodes them as JSON reads them as before; every method that would
change one refuses, naming where (``artifact['steps'][0]``). Under a validation's guard
the refusal is the call's read-only violation, even if the validation catches it. The
caller's own object is never touched: the projection is a copy.

``dict.copy()``, ``list(...)``, a slice and ``copy.deepcopy`` give an ordinary, changeable
copy: the way for a validation to work on its own version.

Only containers can be frozen this way. An object of another class (a dataclass, a
pydantic model) is deep-copied for the round instead, so the caller's object is still
never touched; such a projection is not :func:`held`, and each call is given a copy of its
own, compared with its :func:`fingerprint` once the call returns: a call that changed it
fails as a read-only violation, and no other call saw the change.
"""

from __future__ import annotations

import copy
import datetime
import decimal
import enum
import fractions
import functools
import io
import pathlib
import pickle
import uuid
from typing import TYPE_CHECKING, Any, Final, NoReturn, SupportsIndex

from ._readonly import LEASE, ReadOnlyViolationError, refuse

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["FrozenDict", "FrozenList", "changed", "fingerprint", "freeze", "held", "own_copy"]

_Where = tuple[Any, ...]
"""Where a container sits: ``(name,)`` at the top, else ``(parent's where, key)``; made
into text only when a change is refused, so freezing a large artifact builds no strings."""
_PLAIN: Final = frozenset(
    {
        str,
        int,
        float,
        bool,
        bytes,
        type(None),
        frozenset,
        complex,
        # Values no method changes: shared as they are, like a string.
        datetime.date,
        datetime.datetime,
        datetime.time,
        datetime.timedelta,
        datetime.timezone,
        decimal.Decimal,
        fractions.Fraction,
        uuid.UUID,
        pathlib.PurePosixPath,
        pathlib.PureWindowsPath,
        pathlib.PosixPath,
        pathlib.WindowsPath,
        range,
    }
)


def _text(where: _Where) -> str:
    keys: list[Any] = []
    while len(where) == 2:
        where, key = where
        keys.append(key)
    return str(where[0]) + "".join(f"[{key!r}]" for key in reversed(keys))


def _refuse(where: _Where | None, change: str) -> NoReturn:
    # A container made by its class itself (`type(x)()`), not by `freeze`, has no place.
    description = f"changing the artifact ({_text(where or ('artifact',))}{change})"
    lease = LEASE.get()
    if lease:
        refuse(lease, description)
    raise ReadOnlyViolationError(
        f"{description} refused: every validation of the round judges the same artifact; "
        "change a copy of it (copy.deepcopy) instead"
    )


class FrozenDict(dict[Any, Any]):
    """A ``dict`` that refuses every change (see the module's docstring)."""

    __slots__ = ("_where",)
    _where: _Where

    def __setitem__(self, key: Any, value: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), f"[{key!r}] = ...")

    def __delitem__(self, key: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), f": del [{key!r}]")

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]
        _refuse(getattr(self, "_where", None), " |= ...")

    def clear(self) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".clear()")

    def pop(self, key: Any, *default: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), f".pop({key!r})")

    def popitem(self) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".popitem()")

    def setdefault(self, key: Any, default: Any = None) -> NoReturn:
        _refuse(getattr(self, "_where", None), f".setdefault({key!r}, ...)")

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".update(...)")

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled for another process (process isolation, Ray): frozen there too. The
        # default would rebuild it through `__setitem__`, which refuses.
        return (_rebuild_dict, (dict(self), self._where))

    def __copy__(self) -> dict[Any, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}


class FrozenList(list[Any]):
    """A ``list`` that refuses every change (see the module's docstring)."""

    __slots__ = ("_where",)
    _where: _Where

    def __setitem__(self, index: Any, value: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), f"[{index!r}] = ...")

    def __delitem__(self, index: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), f": del [{index!r}]")

    def __iadd__(self, other: Iterable[Any]) -> NoReturn:  # type: ignore[misc]
        _refuse(getattr(self, "_where", None), " += ...")

    def __imul__(self, count: SupportsIndex) -> NoReturn:
        _refuse(getattr(self, "_where", None), " *= ...")

    def append(self, value: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".append(...)")

    def extend(self, values: Iterable[Any]) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".extend(...)")

    def insert(self, index: SupportsIndex, value: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".insert(...)")

    def pop(self, index: SupportsIndex = -1) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".pop()")

    def remove(self, value: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".remove(...)")

    def clear(self) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".clear()")

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".sort()")

    def reverse(self) -> NoReturn:
        _refuse(getattr(self, "_where", None), ".reverse()")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_list, (list(self), self._where))

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(v, memo) for v in self]


def _rebuild_dict(items: dict[Any, Any], where: _Where) -> FrozenDict:
    frozen = FrozenDict(items)  # dict's own __init__, not the refusing update()
    frozen._where = where
    return frozen


def _rebuild_list(items: list[Any], where: _Where) -> FrozenList:
    frozen = FrozenList(items)
    frozen._where = where
    return frozen


def freeze(value: Any, name: str = "artifact") -> Any:
    """The frozen projection of ``value`` (see the module's docstring); ``name`` is what a
    refusal calls it. A value frozen already is returned as it is.

    A value too deep to walk here (or one that contains itself) is deep-copied instead:
    the caller's object stays untouched, but that copy is not frozen."""
    try:
        return _freeze(value, (name,))
    except RecursionError:
        try:
            return copy.deepcopy(value)
        except Exception:
            return value


def _freeze(value: Any, where: _Where) -> Any:
    kind = type(value)
    if kind in _PLAIN or kind is FrozenDict or kind is FrozenList or isinstance(value, enum.Enum):
        return value
    if isinstance(value, dict):
        return _rebuild_dict({k: _freeze(v, (where, k)) for k, v in value.items()}, where)
    if isinstance(value, list):
        return _rebuild_list([_freeze(v, (where, i)) for i, v in enumerate(value)], where)
    if isinstance(value, tuple) and kind is tuple:
        return tuple(_freeze(v, (where, i)) for i, v in enumerate(value))
    if isinstance(value, set):
        return frozenset(value)  # its items are hashable, so frozen already
    if isinstance(value, bytearray):
        return bytes(value)
    try:
        return copy.deepcopy(value)
    except Exception:
        # Cannot be copied (a lock, an open file): passed as it is, as before.
        return value


def held(value: Any) -> bool:
    """Whether the frozen projection ``value`` refuses every change: each container in it
    frozen, nothing in it a copied object of another class."""
    try:
        return _held(value)
    except RecursionError:
        return False


def _held(value: Any) -> bool:
    kind = type(value)
    if kind is FrozenDict:
        return all(_held(v) for v in value.values())
    if kind is FrozenList or kind is tuple:
        return all(_held(v) for v in value)
    if kind is frozenset:
        return all(type(v) in _PLAIN or (type(v) is tuple and _held(v)) for v in value)
    return kind in _PLAIN or isinstance(value, enum.Enum)


def fingerprint(value: Any) -> bytes | None:
    """``value`` as bytes, to tell whether a call changed it; ``None`` for what cannot be
    pickled (it cannot be compared, so it is not judged). What an object keeps in a cache
    of its own (a ``functools.cached_property``) is left out: reading it is no change."""
    out = io.BytesIO()
    try:
        _Fingerprinter(out, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    except Exception:  # RecursionError too
        return None
    return out.getvalue()


class _Fingerprinter(pickle.Pickler):
    """A pickler whose bytes leave out the values of an object's cached properties (they
    are only ever compared, never loaded)."""

    def reducer_override(self, obj: Any) -> Any:
        cached = _cached_names(type(obj))
        state = getattr(obj, "__dict__", None) if cached else None
        if not isinstance(state, dict) or not cached.intersection(state):
            return NotImplemented
        reduced = obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        if not (isinstance(reduced, tuple) and len(reduced) >= 3 and reduced[2] is state):
            return NotImplemented
        kept = {name: value for name, value in state.items() if name not in cached}
        return (*reduced[:2], kept, *reduced[3:])


_CACHED_NAMES: dict[type, frozenset[str]] = {}


def _cached_names(kind: type) -> frozenset[str]:
    """The names of ``kind``'s cached properties (over its bases too), found once a class."""
    names = _CACHED_NAMES.get(kind)
    if names is None:
        names = _CACHED_NAMES[kind] = frozenset(
            name
            for base in getattr(kind, "__mro__", ())
            for name, attribute in vars(base).items()
            if isinstance(attribute, functools.cached_property)
        )
    return names


def own_copy(value: Any) -> tuple[Any, bytes | None]:
    """A call's own copy of a projection that is not :func:`held`, and its fingerprint to
    compare once the call returns; ``value`` itself and ``None`` (not judged) where it
    cannot be copied (too deep, or an object that refuses)."""
    try:
        mine = copy.deepcopy(value)
    except Exception:  # RecursionError too
        return value, None
    return mine, fingerprint(mine)


def changed(value: Any, given: bytes | None) -> bool:
    """Whether ``value`` is no longer what its :func:`fingerprint` ``given`` was taken of.
    Bytes that differ are judged again by equality with the value they were taken of (an
    object can pickle differently and be the same all the same). Without a fingerprint,
    or where equality cannot be told (an array's), nothing is judged."""
    if given is None or fingerprint(value) == given:
        return False
    try:
        return bool(pickle.loads(given) != value)
    except Exception:
        return False
