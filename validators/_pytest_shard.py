"""The pytest plugin ``pytest_suite`` runs its pytest processes with: ``-p
gategraph.validators._pytest_shard`` and, in ``GATEGRAPH_PYTEST``, the path of a JSON file
that says what this process is to do:

- ``shard``: ``[i, n]``, keep the ``i``-th of ``n`` shares of the collected tests;
- ``durations``: seconds each group of tests took in an earlier run, to balance the shares;
- ``only``: run only these tests (node ids), the ones that failed last time;
- ``skip``: leave out these tests (those already run, and passed, this time);
- ``record``: where to write what this process saw: ``{"durations": {group: seconds},
  "failed": [node id, ...], "collected": [digest of every test it collected]}``.

Every shard collects the whole suite the same way and is given the same durations, so each
computes the same split and keeps its part: every test runs in exactly one shard.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

CONFIG_VARIABLE: Final = "GATEGRAPH_PYTEST"
MAX_FAILED: Final = 200
"""At most this many failed tests are recorded by node id (to run first next time)."""

_said: dict[str, Any] = {}
_durations: dict[str, float] = {}
_failed: dict[str, None] = {}
_collected: list[str] = []


def group_of(nodeid: str) -> str:
    """The group a test belongs to: its class (``file::Class``) when it is in one, else its
    file. A group's tests share their fixtures and imports, so they go to one shard where
    they can."""
    parts = nodeid.split("[", 1)[0].split("::")
    return "::".join(parts[:2]) if len(parts) > 2 else parts[0]


def split(
    tests: Iterable[str],
    shards: int,
    durations: Mapping[str, float],
    group_by: Callable[[str], str] = group_of,
) -> dict[str, int]:
    """Which shard each test goes to: the same on every shard. ``group_by`` gives a
    test's group (by default pytest's: :func:`group_of`).

    A group weighs the seconds it took last time (``durations``), else its number of tests
    times the mean seconds a test took there (1 with no record at all). A group heavier
    than a shard's fair share is split into its tests, so that one big file does not leave
    the other shards idle. Heaviest first, each to the least loaded shard."""
    groups: dict[str, list[str]] = {}
    for test in tests:
        groups.setdefault(group_by(test), []).append(test)
    known = [group for group in groups if group in durations]
    counted = sum(len(groups[group]) for group in known)
    timed = sum(max(0.0, float(durations[group])) for group in known)
    each = timed / counted if counted and timed > 0 else 1.0
    weight = {
        group: max(0.0, float(durations[group])) if group in durations else len(members) * each
        for group, members in groups.items()
    }
    fair = sum(weight.values()) / shards
    units: list[tuple[float, str, list[str]]] = []
    for group, members in groups.items():
        if weight[group] > fair and len(members) > 1:
            units += [(weight[group] / len(members), test, [test]) for test in members]
        else:
            units.append((weight[group], group, members))
    loads = [0.0] * shards
    owner: dict[str, int] = {}
    for load, _, members in sorted(units, key=lambda unit: (-unit[0], unit[1])):
        shard = min(range(shards), key=lambda s: (loads[s], s))
        loads[shard] += load
        for test in members:
            owner[test] = shard
    return owner


def pytest_configure(config: Any) -> None:
    path = os.environ.get(CONFIG_VARIABLE)
    _said.clear()
    if path:
        with open(path, encoding="utf-8") as opened:  # written by pytest_suite for this run
            _said.update(json.load(opened))


def collected(ids: Iterable[str]) -> str:
    """One digest of the tests a process collected: every shard must collect the same."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    _collected[:] = [collected(item.nodeid for item in items)]
    kept = items
    only = set(_said.get("only") or ())
    if only:
        kept = [item for item in kept if item.nodeid in only]
    skip = set(_said.get("skip") or ())
    if skip:
        kept = [item for item in kept if item.nodeid not in skip]
    shard = _said.get("shard")
    if shard:
        index, count = shard
        owner = split((item.nodeid for item in kept), count, _said.get("durations") or {})
        kept = [item for item in kept if owner[item.nodeid] == index]
    if len(kept) != len(items):
        keep = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in keep])
        items[:] = kept


def pytest_runtest_logreport(report: Any) -> None:
    group = group_of(report.nodeid)
    _durations[group] = _durations.get(group, 0.0) + report.duration
    if report.failed and len(_failed) < MAX_FAILED:
        _failed[report.nodeid] = None


def pytest_sessionfinish(session: Any) -> None:
    record = _said.get("record")
    if record:
        with open(record, "w", encoding="utf-8") as opened:
            json.dump(
                {"durations": _durations, "failed": list(_failed), "collected": _collected[:1]},
                opened,
            )
