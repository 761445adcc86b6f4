"""A test suite run in shards, what failed last time first: the part ``pytest_suite`` and
``unittest_suite`` share.

Each process of a suite runs in a copy of the project (in the kernel sandbox, a
copy-on-write view that costs nothing) and is told what to do by a JSON file named in its
environment (``shard``, ``queue``, ``durations``, ``only``, ``skip``, ``record``: see
:mod:`._pytest_shard`); it writes what it saw to its ``record``. Where the validation failed
the last time it ran in the plan (``context.earlier``), the tests that failed then run
first, in the first shard's copy, as one run by hand would; if one fails again the suite
has failed, and the rest is not run.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread

from ._common import ArgumentError, describe
from ._pytest_shard import MAX_FAILED

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path
    from subprocess import CompletedProcess

    from gategraph.runtime import ToolContext

__all__ = [
    "MAX_SHARDS",
    "Run",
    "Suite",
    "durations",
    "exit_code",
    "recorded_failures",
    "shard_count",
]

MAX_SHARDS: Final = 64
_MAX_GROUPS: Final = 2000
"""At most this many groups' durations are kept in a result (the heaviest): a suite of
many more still balances, its other groups weighed by the mean."""


def shard_count(shards: object, context: ToolContext, folder: Path) -> int:
    """How many shards: ``auto`` takes one per core where copies cost nothing (views, in
    the kernel sandbox), else one; a number, that many."""
    if shards == "auto":
        return max(1, min(os.cpu_count() or 1, context.free_copies(folder)))
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ArgumentError(
            f'shards must be "auto" or a whole number from 1 to {MAX_SHARDS}, got '
            f"{describe(shards)}"
        )
    return shards


def check_failed_first(failed_first: object) -> None:
    if not isinstance(failed_first, bool):
        raise ArgumentError(f"failed_first must be true or false, got {describe(failed_first)}")


class Run:
    """One process of a suite: its copy, its files in scratch, what goes into its
    environment, and how it ended."""

    def __init__(self, copy: Path, stem: Path, environment: dict[str, str]) -> None:
        self.copy = copy
        self.environment = environment
        self.report = stem.with_suffix(".xml")
        """Where a report of its own goes (pytest's JUnit XML)."""
        self.record = stem.with_suffix(".record.json")
        self.said = stem.with_suffix(".said.json")
        self.done: CompletedProcess[bytes] | None = None

    @property
    def output(self) -> bytes:
        assert self.done is not None
        return self.done.stdout + self.done.stderr


class Suite:
    """A suite's processes for one call: ``start`` starts one (``(run, settings path)`` →
    its finished process), ``failed_again`` tells whether the tests run first failed."""

    def __init__(
        self,
        context: ToolContext,
        folder: Path,
        *,
        count: int,
        failed_first: bool,
        start: Callable[[Run], Awaitable[CompletedProcess[bytes]]],
        failed_again: Callable[[Run], Awaitable[bool]],
    ) -> None:
        self.context = context
        self.folder = folder
        self.count = count
        earlier = context.earlier
        self.durations = durations(earlier.get("durations") if earlier is not None else None)
        self.first = _failures(earlier) if failed_first else []
        self._start = start
        self._failed_again = failed_again
        self.runs: list[Run] = []
        """The processes that ran, in order: the tests run first, then each shard."""
        self.stopped = False
        """Whether a test run first failed again, so the rest was not run."""

    # `limit` is the check's own (the suite is killed and the result says so), not the
    # caller's deadline.
    async def run(self, limit: float, durations_file: Callable[[Path], dict[str, float]]) -> bool:
        """Run the suite within ``limit`` seconds; False if it did not finish. Durations
        come from the last run, else from ``durations_file`` of the project."""
        if not self.durations and self.count > 1:  # one process has nothing to balance
            self.durations = await anyio.to_thread.run_sync(durations_file, self.folder)
        # Copying a project takes a while: in a worker thread, not on the event loop (the
        # read-only guard follows the call there; it is a context variable).
        shards, first = await anyio.to_thread.run_sync(self._prepare)
        with anyio.move_on_after(limit):
            if self.first:
                self.runs.append(first)
                await self._one(first, {"only": self.first})
                self.stopped = await self._failed_again(first)
            if not self.stopped:
                self.runs += shards
                queue = ""
                if self.count > 1:
                    # A name of its own in scratch (a copy of a folder named `queue` may
                    # be there already).
                    queue = await anyio.to_thread.run_sync(
                        functools.partial(
                            tempfile.mkdtemp, prefix=".queue-", dir=self.context.scratch
                        )
                    )
                async with anyio.create_task_group() as group:
                    for index, run in enumerate(shards):
                        said: dict[str, Any] = {"skip": self.first, "durations": self.durations}
                        if self.count > 1:
                            said["shard"] = [index, self.count]
                            said["queue"] = queue
                        group.start_soon(self._one, run, said)
        return bool(self.runs) and all(run.done is not None for run in self.runs)

    def _prepare(self) -> tuple[list[Run], Run]:
        """A copy of the folder for each shard (in the kernel sandbox, views that cost
        nothing), each with free names in scratch; the tests run first take the first
        shard's copy."""
        scratch = self.context.scratch
        taken: set[Path] = set()

        def free(stem: str) -> Path:
            path, counter = scratch / stem, 1
            while path in taken or any(
                path.with_suffix(s).exists() for s in (".xml", ".record.json", ".said.json")
            ):
                counter += 1  # a copy may have taken the name
                path = scratch / f"{stem}-{counter}"
            taken.add(path)
            return path

        # One hash seed for every process of the call: a test whose id comes from a set's
        # order (a parametrization) is the same test in each, and the shards cut the suite
        # into the same units.
        seed = os.environ.get("PYTHONHASHSEED", "random")
        if not seed.isdigit():
            seed = str(random.SystemRandom().randrange(1, 4294967295))
        environment = {"PYTHONHASHSEED": seed}
        shards = [
            Run(self.context.disposable_copy(self.folder), free(f"shard-{index}"), environment)
            for index in range(self.count)
        ]
        return shards, Run(shards[0].copy, free("first"), environment)

    async def _one(self, run: Run, said: dict[str, Any]) -> None:
        said["record"] = str(run.record)
        run.said.write_text(json.dumps(said), encoding="utf-8")
        run.done = await self._start(run)

    def disagreement(self) -> str | None:
        """Why the suite's processes cannot be trusted to have run every test once: they
        collected different tests (ids that depend on something each process has of its
        own: the time, a random number); None when they agree."""
        found = {tuple(_record(run).get("collected") or ()) for run in self.runs}
        found.discard(())
        if len(found) < 2:
            return None
        return (
            f"the suite's {len(self.runs)} processes collected different tests (test ids "
            "that change from one process to the next), so none can be trusted to have "
            "run every test once: give the tests stable ids, or run the suite with shards: 1"
        )

    def heads(self) -> list[bytes]:
        """What precedes each process's output in the suite's."""
        heads = [
            b"-- shard %d of %d --\n" % (i + 1, self.count) if self.count > 1 else b""
            for i in range(self.count)
        ]
        if self.first:
            heads.insert(0, b"-- the tests that failed last time --\n")
        return heads[: len(self.runs)]

    def recorded(self) -> dict[str, Any]:
        """What the processes recorded, for the result's data: each group's seconds (what
        the next run balances by; the last run's for the groups not run now) and the ids of
        the tests that failed (what runs first next time)."""
        fresh: dict[str, float] = {}  # a group spread over several processes: their sum
        failing: dict[str, None] = {}
        for run in self.runs:
            found = _record(run)
            for group, seconds in durations(found.get("durations")).items():
                fresh[group] = fresh.get(group, 0.0) + seconds
            failing.update(dict.fromkeys(_failures({"failed_ids": found.get("failed")})))
        took = {**self.durations, **fresh} if self.stopped else fresh
        heaviest = sorted(took.items(), key=lambda item: (-item[1], item[0]))[:_MAX_GROUPS]
        return {
            "shards": 1 if self.stopped else self.count,
            "first": len(self.first),
            "stopped_early": self.stopped,
            "durations": {group: round(seconds, 3) for group, seconds in sorted(heaviest)},
            "failed_ids": list(failing)[:MAX_FAILED],
        }


def _record(run: Run) -> dict[str, Any]:
    """What one process recorded (nothing if it wrote nothing readable)."""
    try:
        found = json.loads(run.record.read_bytes())  # written by our plugin or runner
    except (OSError, ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def recorded_failures(run: Run) -> list[str]:
    """The tests one process recorded as failed."""
    return _failures({"failed_ids": _record(run).get("failed")})


def stopped_message(message: str) -> str:
    return message + " (run first, as they failed last time; the rest of the suite was not run)"


_LONGEST: Final = 1e6
"""More seconds than any group is taken to weigh (a day and a half): sums stay finite."""


def durations(found: object) -> dict[str, float]:
    """Seconds by test or group, from what a record or a file says: what is not a finite
    number of seconds is left out, and none weighs more than :data:`_LONGEST`."""
    if not isinstance(found, Mapping):
        return {}
    return {
        str(group): min(float(seconds), _LONGEST)
        for group, seconds in found.items()
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and 0 <= seconds
        if math.isfinite(seconds)
    }


def _failures(earlier: Mapping[str, Any] | None) -> list[str]:
    """The tests that failed when the validation last ran (by id), if it ran to the end."""
    if earlier is None or earlier.get("error") is not None:
        return []
    found = earlier.get("failed_ids")
    if not isinstance(found, list | tuple):
        return []
    return [test for test in found if isinstance(test, str) and test][:MAX_FAILED]


def exit_code(codes: Sequence[int], no_tests: int) -> int:
    """One exit code for the processes': the first that is neither a pass, a failure nor
    "no tests" (a shard may get no test); else a failure's; else "no tests" if none ran."""
    worst = [code for code in codes if code not in (0, 1, no_tests)]
    if worst:
        return worst[0]
    if 1 in codes:
        return 1
    return no_tests if all(code == no_tests for code in codes) else 0
