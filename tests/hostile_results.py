"""Validations whose results raise when gategraph reads them, for tests/calls/test_hostile_calls.py.

A module on disk (not an in-memory fake): worker processes and sandboxed workers import
it, and a result that crosses a process boundary is rebuilt from its class here. Each
result raises ``raised`` (``KeyboardInterrupt`` by default) from the method ``method``
names, at a place where reading the result calls it.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any

RAISED: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
}


class Odd(BaseException):
    """A BaseException subclass of the validation's own."""


RAISED["Odd"] = Odd


class Result(Mapping[str, Any]):
    """A result mapping whose ``method`` raises; its items are ``items``."""

    def __init__(self, method: str, raised: str, items: dict[str, Any]) -> None:
        self.method, self.raised, self.items_ = method, raised, items

    def _maybe(self, name: str) -> None:
        if self.method == name:
            raise RAISED[self.raised]("from the result")

    def get(self, key: str, default: Any = None) -> Any:
        self._maybe("get")
        return self.items_.get(key, default)

    def __getitem__(self, key: str) -> Any:
        self._maybe("__getitem__")
        return self.items_[key]

    def __contains__(self, key: object) -> bool:
        self._maybe("__contains__")
        return key in self.items_

    def keys(self) -> Any:
        self._maybe("keys")
        return self.items_.keys()

    def __iter__(self) -> Iterator[str]:
        self._maybe("__iter__")
        return iter(self.items_)

    def __len__(self) -> int:
        self._maybe("__len__")
        return len(self.items_)


class Key(str):
    """A ``data`` key whose ``__eq__`` or ``__hash__`` raises."""

    method = ""
    raised = "KeyboardInterrupt"

    def __eq__(self, other: object) -> bool:
        if self.method == "__eq__":
            raise RAISED[self.raised]("from a key")
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        if self.method == "__hash__":
            raise RAISED[self.raised]("from a key")
        return str.__hash__(self)


class Shown:
    """A ``passed`` that is no bool, whose ``__repr__`` (read to say so) raises."""

    def __init__(self, raised: str) -> None:
        self.raised = raised

    def __repr__(self) -> str:
        raise RAISED[self.raised]("from __repr__")


class Zone(datetime.tzinfo):
    """A time zone whose ``utcoffset`` (read to encode a datetime) raises."""

    def __init__(self, raised: str = "KeyboardInterrupt") -> None:
        self.raised = raised

    def utcoffset(self, dt: datetime.datetime | None) -> datetime.timedelta:
        raise RAISED[self.raised]("from utcoffset")

    def __getinitargs__(self) -> tuple[str]:
        return (self.raised,)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Zone, (self.raised,))


METHODS = ("get", "__getitem__", "__contains__", "__iter__", "keys", "__eq__", "__hash__")
METHODS_ALL = (*METHODS, "__repr__", "utcoffset")


def hostile(method: str = "get", raised: str = "KeyboardInterrupt") -> Any:
    """A result on which reading ``method`` raises ``raised``."""
    if method in ("get", "__getitem__", "__contains__"):
        return Result(method, raised, {"passed": True, "message": "ok"})
    if method == "__iter__":  # no `passed`: its keys are listed in the message
        return Result(method, raised, {"message": "ok"})
    if method == "keys":  # `data` a Mapping, not a dict: copied with `dict()`
        return {"passed": True, "data": Result(method, raised, {"n": 1})}
    if method in ("__eq__", "__hash__"):
        key = Key("n")
        key.method, key.raised = method, raised
        if method == "__eq__":  # compared with the data's JSON copy
            return {"passed": True, "data": {key: 1}}
        return {"passed": True, "data": _KeyedData([(key, 1)])}  # hashed by `dict()`
    if method == "__repr__":
        return {"passed": Shown(raised)}
    assert method == "utcoffset"
    when = datetime.datetime(2024, 1, 1, tzinfo=Zone(raised))
    return {"passed": True, "data": {"when": when}}


class _KeyedData(Mapping[str, Any]):
    """A ``data`` Mapping whose keys go into a new dict when it is copied."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs

    def __getitem__(self, key: str) -> Any:
        for k, v in self.pairs:
            if str.__eq__(k, key):
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter([k for k, _ in self.pairs])

    def __len__(self) -> int:
        return len(self.pairs)

    def keys(self) -> Any:
        return [k for k, _ in self.pairs]


def run(method: str = "get", raised: str = "KeyboardInterrupt") -> Any:
    """A sync validation returning the hostile result."""
    return hostile(method, raised)


async def run_async(method: str = "get", raised: str = "KeyboardInterrupt") -> Any:
    """An async validation (awaited on the event loop) returning the hostile result."""
    return hostile(method, raised)
