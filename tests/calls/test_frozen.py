"""The frozen projection of an artifact: every way a dict or a list can be changed is
refused, naming where; copies and pickles are plain or frozen as they should be."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from gategraph.runtime import ReadOnlyViolationError
from gategraph.runtime._calls._frozen import (
    FrozenDict,
    FrozenList,
    changed,
    fingerprint,
    freeze,
    held,
    own_copy,
)

ARTIFACT = {"files": ["a.py", "b.py"], "meta": {"n": 1}, "tags": {"x"}, "raw": bytearray(b"r")}


def _dict_changes(d: Any) -> list[Any]:
    def ior() -> None:
        d.__ior__({"z": 1})

    return [
        lambda: d.__setitem__("k", 1),
        lambda: d.__delitem__("meta"),
        ior,
        d.clear,
        lambda: d.pop("meta"),
        d.popitem,
        lambda: d.setdefault("k", 1),
        lambda: d.update(k=1),
    ]


def _list_changes(items: Any) -> list[Any]:
    return [
        lambda: items.__setitem__(0, "c"),
        lambda: items.__delitem__(0),
        lambda: items.__iadd__(["c"]),
        lambda: items.__imul__(2),
        lambda: items.append("c"),
        lambda: items.extend(["c"]),
        lambda: items.insert(0, "c"),
        items.pop,
        lambda: items.remove("a.py"),
        items.clear,
        items.sort,
        items.reverse,
    ]


@pytest.mark.parametrize("index", range(8))
def test_every_change_of_a_frozen_dict_is_refused(index: int) -> None:
    frozen = freeze(ARTIFACT)
    with pytest.raises(ReadOnlyViolationError, match=r"changing the artifact \(artifact\['meta'\]"):
        _dict_changes(frozen["meta"])[index]()
    assert frozen["meta"] == {"n": 1}


@pytest.mark.parametrize("index", range(12))
def test_every_change_of_a_frozen_list_is_refused(index: int) -> None:
    frozen = freeze(ARTIFACT)
    with pytest.raises(
        ReadOnlyViolationError, match=r"changing the artifact \(artifact\['files'\]"
    ):
        _list_changes(frozen["files"])[index]()
    assert frozen["files"] == ["a.py", "b.py"]


def test_copies_and_pickles() -> None:
    """A copy is the caller's own, plain and changeable; a pickle (another process) is
    frozen there too; sets and bytearrays freeze to their frozen kinds."""
    frozen = freeze(ARTIFACT)
    assert held(frozen) is True  # every container in it refuses changes
    assert type(frozen["tags"]) is frozenset and type(frozen["raw"]) is bytes
    plain = copy.copy(frozen["meta"])
    plain["n"] = 2  # a plain dict
    deep = copy.deepcopy(frozen)
    deep["files"].append("c.py")
    assert type(copy.copy(frozen["files"])) is list
    again = pickle.loads(pickle.dumps(frozen))
    assert type(again) is FrozenDict and type(again["files"]) is FrozenList
    with pytest.raises(ReadOnlyViolationError):
        again["files"].append("c.py")
    assert freeze(frozen) is frozen  # frozen already


def test_what_cannot_be_walked_or_compared() -> None:
    """A value that contains itself is copied rather than frozen; held says no; a
    fingerprint of what cannot be pickled is None and judges nothing."""
    loop: list[Any] = []
    loop.append(loop)
    copied = freeze({"loop": loop})
    assert held(copied) is False
    assert held(freeze({"s": frozenset({1, (2, 3)})})) is True
    assert fingerprint(lambda: None) is None
    mine, taken = own_copy({"a": [1]})
    assert not changed(mine, taken)
    mine["a"].append(2)
    assert changed(mine, taken)
    assert changed(mine, None) is False
