"""The pytest plugin ``pytest_suite`` runs its pytest processes with: ``-p
gategraph.validators._pytest_shard`` and, in ``GATEGRAPH_PYTEST``, the path of a JSON file
that says what this process is to do:

- ``shard``: ``[i, n]``, this is the ``i``-th of ``n`` processes sharing the suite;
- ``queue``: the folder the shards take units of the suite from (:class:`Claims`);
- ``durations``: seconds each group of tests took in an earlier run, to order the units;
- ``only``: run only these tests (node ids), the ones that failed last time;
- ``skip``: leave out these tests (those already run, and passed, this time);
- ``record``: where to write what this process saw: ``{"durations": {group: seconds},
  "failed": [node id, ...], "collected": [digest of every test it collected]}``.

Every shard collects the whole suite the same way and is given the same durations, so each
cuts it into the same units (:func:`units`); each, when its last test is done, takes the
next unit no other shard has taken, until none is left: every test runs in exactly one
shard, and a shard held up by a slow test leaves the rest to the others.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

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


def module_of(nodeid: str) -> str:
    """The file a test is in: a shard runs a module's units one after another."""
    return nodeid.split("::", 1)[0]


def units(
    tests: Sequence[str],
    shards: int,
    durations: Mapping[str, float],
    group_by: Callable[[str], str] = group_of,
    module_by: Callable[[str], str] = module_of,
) -> list[list[int]]:
    """The suite cut into units of work, each a list of indices into ``tests``: the same on
    every shard. ``group_by`` gives a test's group, ``module_by`` its module (by default
    pytest's: :func:`group_of`, :func:`module_of`); a unit is a group, in the order its
    tests came.

    A group weighs the seconds it took last time (``durations``), else its number of tests
    times the mean seconds a test took there (1 with no record at all). A group heavier
    than a shard's fair share is cut into its tests, so that one big file does not leave
    the other shards idle. The heaviest module's units come first, heaviest first, then
    the next module's: units are taken in this order, so a shard that takes several of a
    module's takes them one after another, and sets the module up once (a module
    fixture, ``setUpModule``), as one process running the suite would."""
    groups: dict[str, list[int]] = {}
    for index, test in enumerate(tests):
        groups.setdefault(group_by(test), []).append(index)
    known = [group for group in groups if group in durations]
    counted = sum(len(groups[group]) for group in known)
    timed = sum(max(0.0, float(durations[group])) for group in known)
    each = timed / counted if counted and timed > 0 else 1.0
    weight = {
        group: max(0.0, float(durations[group])) if group in durations else len(members) * each
        for group, members in groups.items()
    }
    fair = sum(weight.values()) / max(1, shards)
    modules: dict[str, list[tuple[float, str, list[int]]]] = {}
    for group, members in groups.items():
        module = modules.setdefault(module_by(tests[members[0]]), [])
        if weight[group] > fair and len(members) > 1:
            module += [(weight[group] / len(members), tests[i], [i]) for i in members]
        else:
            module.append((weight[group], group, members))
    ordered = sorted(modules.items(), key=lambda item: (-sum(u[0] for u in item[1]), item[0]))
    return [
        members
        for _, cut in ordered
        for _, _, members in sorted(cut, key=lambda unit: (-unit[0], unit[1]))
    ]


class Claims:
    """The shards of one suite share its units: each takes the next one no shard has
    taken when it is ready for more (in :func:`units`' order), so a shard that met quick
    tests, or started late, takes more. A unit is taken by creating its file in a folder
    the shards share: only one creation succeeds, on every system, with no lock to leave
    behind."""

    def __init__(self, folder: str, total: int) -> None:
        self.folder = folder
        self.total = total
        self.at = 0

    def next(self) -> int | None:
        """The index of the next unit this shard takes; None when none is left."""
        while self.at < self.total:
            index, self.at = self.at, self.at + 1
            try:
                made = os.open(
                    os.path.join(self.folder, str(index)), os.O_CREAT | os.O_EXCL | os.O_WRONLY
                )
            except FileExistsError:
                continue  # another shard's
            os.close(made)
            return index
        return None


def pytest_configure(config: Any) -> None:
    path = os.environ.get(CONFIG_VARIABLE)
    _said.clear()
    if path:
        with open(path, encoding="utf-8") as opened:  # written by pytest_suite for this run
            _said.update(json.load(opened))


def collected(ids: Iterable[str]) -> str:
    """One digest of the tests a process collected: every shard must collect the same."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def _xdist(config: Any) -> bool:
    """Whether pytest-xdist runs this process's tests (``-n``, maybe in the project's
    ``addopts``): its own loop hands tests to its workers, never this plugin's."""
    return hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", None))


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
    if shard and _xdist(config):
        # xdist's workers each collect the suite and its loop deals the tests out: the
        # shard keeps every count-th unit, the same in each worker, fixed in advance.
        index, count = shard
        cut = units([item.nodeid for item in kept], count, _said.get("durations") or {})
        mine = {i for unit in cut[index::count] for i in unit}
        kept = [item for i, item in enumerate(kept) if i in mine]
    if len(kept) != len(items):
        keep = {id(item) for item in kept}
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in keep])
        items[:] = kept


class _Next:
    """The item after the last of a unit: the first of the next unit this shard takes,
    taken only when pytest asks for it (as the last test is torn down, to know which
    fixtures the next one keeps), so a shard busy with a slow test takes no more work."""

    def __init__(self, claims: Claims, cut: list[list[Any]]) -> None:
        self._claims = claims
        self._cut = cut
        self._asked = False
        self.taken: int | None = None

    def take(self) -> Any:
        if not self._asked:
            self._asked = True
            self.taken = self._claims.next()
        return self._cut[self.taken][0] if self.taken is not None else None

    def __bool__(self) -> bool:
        return self.take() is not None

    def __getattr__(self, name: str) -> Any:
        item = self.take()
        if item is None:
            raise AttributeError(name)
        return getattr(item, name)


def pytest_runtestloop(session: Any) -> bool | None:
    """pytest's own loop (``_pytest.main``), over the units this shard takes, one after
    another, of the tests left once every plugin has deselected (``-k``, ``-m``,
    ``--deselect``). (This plugin is registered after pytest's own, so its loop is asked
    first; importing pytest here for a marker would make the unittest runner, which shares
    this module, need it.)"""
    shard = _said.get("shard")
    if not shard or _xdist(session.config):
        return None  # one process, the whole suite, or xdist's: pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        errors = session.testsfailed
        raise session.Interrupted(f"{errors} error{'s' if errors != 1 else ''} during collection")
    if session.config.option.collectonly:
        return True
    items = list(session.items)
    cut = [
        [items[i] for i in unit]
        for unit in units([item.nodeid for item in items], shard[1], _said.get("durations") or {})
    ]
    claims = Claims(_said["queue"], len(cut))
    taken = claims.next()
    while taken is not None:
        unit = cut[taken]
        following: Any = None
        for position, item in enumerate(unit):
            following = unit[position + 1] if position + 1 < len(unit) else _Next(claims, cut)
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=following)
            if session.shouldfail:
                raise session.Failed(session.shouldfail)
            if session.shouldstop:
                raise session.Interrupted(session.shouldstop)
        assert isinstance(following, _Next)
        following.take()  # where pytest did not ask (a plugin's own teardown)
        taken = following.taken
    return True


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
