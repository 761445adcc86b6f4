"""The runner ``unittest_suite`` starts: ``python -m gategraph.validators._unittest_shard
START PATTERN``, in the project's copy, with ``GATEGRAPH_UNITTEST`` in its environment
naming a JSON file that says what this process is to do, as for pytest's shards
(:mod:`._pytest_shard`): ``shard``, ``queue``, ``durations``, ``only``, ``skip``,
``record``.

It discovers the tests as ``python -m unittest discover -s START -p PATTERN`` does, runs
the classes it takes from the shards' queue, and reports as unittest's own text runner
does (``Ran N tests``, ``OK`` or ``FAILED (...)``, a ``FAIL:`` or ``ERROR:`` line per
problem), so each process reads like a plain unittest run. A test's id is unittest's
(``module.Class.test_name``); its group, its class. Exit code: 0 if every test it ran
passed, 1 if not, 5 if it ran none.
"""

from __future__ import annotations

import json
import os
import sys
import time
import unittest
from typing import TYPE_CHECKING, Any, Final

from ._pytest_shard import MAX_FAILED, Claims, collected, units

if TYPE_CHECKING:
    from collections.abc import Iterator

CONFIG_VARIABLE: Final = "GATEGRAPH_UNITTEST"
_NO_TESTS: Final = 5


def group_of(test_id: str) -> str:
    """A test's group: its class (``module.Class``), whose fixtures its tests share."""
    return test_id.rsplit(".", 1)[0]


def module_of(test_id: str) -> str:
    """A test's module (``setUpModule`` runs once for the module's classes in a row)."""
    return test_id.rsplit(".", 2)[0]


def _flat(suite: unittest.TestSuite | unittest.TestCase) -> list[unittest.TestCase]:
    if isinstance(suite, unittest.TestCase):
        return [suite]
    found: list[unittest.TestCase] = []
    for item in suite:
        found += _flat(item)
    return found


class _Recording(unittest.TextTestResult):
    """unittest's own text result, which also keeps each group's seconds and the ids of
    the tests that failed (what the next run balances by and runs first)."""

    durations: dict[str, float]
    failed: dict[str, None]
    _began: float

    def startTest(self, test: unittest.TestCase) -> None:
        self._began = time.perf_counter()
        super().startTest(test)

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        group = group_of(test.id())
        self.durations[group] = self.durations.get(group, 0.0) + (time.perf_counter() - self._began)

    def _failed(self, test: unittest.TestCase) -> None:
        if len(self.failed) < MAX_FAILED:
            self.failed[test.id()] = None

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._failed(test)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._failed(test)

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._failed(test)

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            self._failed(test)  # the test itself runs first next time, its subtests with it


class _Claimed(unittest.TestSuite):
    """The units this process claims (:class:`._pytest_shard.Claims`), as a suite that
    takes the next unit when it runs out of tests: unittest's own run, with its class and
    module fixtures, over whatever this shard takes."""

    _cleanup = False  # there is no list of tests to let go of as they run

    def __init__(self, cut: list[list[unittest.TestCase]], queue: str) -> None:
        super().__init__()
        self._cut = cut
        self._claims = Claims(queue, len(cut))

    def __iter__(self) -> Iterator[unittest.TestCase]:
        while (taken := self._claims.next()) is not None:
            yield from self._cut[taken]


def main(argv: list[str]) -> int:
    start, pattern = argv
    said: dict[str, Any] = {}
    path = os.environ.get(CONFIG_VARIABLE)
    if path:
        with open(path, encoding="utf-8") as opened:  # written by unittest_suite for this run
            said = json.load(opened)
    # As `python -m unittest discover -s START` does: START is the top level, on the path.
    tests = _flat(unittest.defaultTestLoader.discover(start, pattern))
    digest = collected(test.id() for test in tests)
    only = set(said.get("only") or ())
    if only:
        tests = [test for test in tests if test.id() in only]
    skip = set(said.get("skip") or ())
    if skip:
        tests = [test for test in tests if test.id() not in skip]
    suite: unittest.TestSuite = unittest.TestSuite(tests)
    shard = said.get("shard")
    if shard:
        ids = [test.id() for test in tests]
        cut = units(ids, shard[1], said.get("durations") or {}, group_of, module_of)
        suite = _Claimed([[tests[index] for index in unit] for unit in cut], said["queue"])
    durations: dict[str, float] = {}
    failed: dict[str, None] = {}

    class Result(_Recording):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.durations, self.failed = durations, failed

    runner = unittest.TextTestRunner(stream=sys.stderr, resultclass=Result)
    outcome = runner.run(suite)
    record = said.get("record")
    if record:
        with open(record, "w", encoding="utf-8") as opened:
            json.dump(
                {"durations": durations, "failed": list(failed), "collected": [digest]}, opened
            )
    if not outcome.wasSuccessful():
        return 1
    return _NO_TESTS if outcome.testsRun == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
