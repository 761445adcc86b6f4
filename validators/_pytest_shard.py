"""A pytest plugin that keeps one shard of a suite: ``pytest_suite`` runs a suite in
shards, each a pytest of its own with ``-p gategraph.validators._pytest_shard`` and
``GATEGRAPH_PYTEST_SHARD=i/n`` in its environment.

Every shard collects the whole suite the same way, so each computes the same split and
keeps its part: every test runs in exactly one shard. The split is by file (a module's
tests share its fixtures and its imports), most tests first, each file to the shard with
the fewest tests so far.
"""

from __future__ import annotations

import os
from typing import Any

SHARD_VARIABLE = "GATEGRAPH_PYTEST_SHARD"


def split(counts: dict[str, int], shards: int) -> dict[str, int]:
    """Which shard each file (by its number of tests) goes to: the same on every shard."""
    loads = [0] * shards
    owner: dict[str, int] = {}
    for name, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        shard = min(range(shards), key=lambda s: (loads[s], s))
        owner[name] = shard
        loads[shard] += count
    return owner


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    given = os.environ.get(SHARD_VARIABLE, "")
    index, _, count = given.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        return
    counts: dict[str, int] = {}
    for item in items:
        name = item.nodeid.split("::", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    owner = split(counts, int(count))
    kept = [item for item in items if owner[item.nodeid.split("::", 1)[0]] == int(index)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
