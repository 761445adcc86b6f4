"""``pytest_suite``: a project's test suite passes, run on a disposable copy."""

from __future__ import annotations

import json
import math
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.to_thread

from ._common import (
    BAD_ARGUMENTS,
    ArgumentError,
    Result,
    check_inside,
    check_root,
    check_strings,
    describe,
    failed,
    listing,
    plural,
    result,
    shorten,
)
from ._pytest_shard import CONFIG_VARIABLE, MAX_FAILED, group_of

if TYPE_CHECKING:
    from pathlib import Path

    from gategraph.runtime import ToolContext

__all__ = ["MAX_FAILURES", "copy_to_scratch", "output_tail", "pytest_suite", "summarize"]

MAX_FAILURES: Final = 20
"""At most this many failures are listed in ``data["failures"]``."""
_OUTPUT_TAIL: Final = 4000
_NO_TESTS: Final = 5  # pytest's ExitCode.NO_TESTS_COLLECTED
_EXIT_MEANINGS: Final = {
    2: "the run was interrupted (collection errors?)",
    3: "pytest hit an internal error",
    4: "pytest was used wrongly (bad arguments?)",
}


class _Report:
    """What a JUnit XML report says."""

    def __init__(self) -> None:
        self.run = self.failed = self.skipped = 0
        self.failures: list[dict[str, str]] = []
        self.names: list[str] = []
        self.seen: set[str] = set()


def _read_junit(path: Path, report: _Report | None = None) -> _Report | None:
    """What the JUnit report at ``path`` says, added to ``report`` (a test an earlier
    shard's report lists, a collection error every shard meets, counts once); None if
    there is no report."""
    try:
        tree = ET.parse(path)  # written by the pytest run we started
    except (OSError, ET.ParseError):
        return None
    report = report or _Report()
    earlier, here = report.seen, set()
    for case in tree.getroot().iter("testcase"):
        classname = case.get("classname", "")
        name = case.get("name", "?")
        test = f"{classname}.{name}" if classname else name
        if test in earlier:
            continue  # another shard's report has it (a collection error each meets)
        here.add(test)
        report.run += 1
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            report.failed += 1
            report.names.append(name)
            if len(report.failures) < MAX_FAILURES:
                message = problem.get("message") or (problem.text or "").strip()
                report.failures.append({"test": test, "message": shorten(message, 500)})
        elif case.find("skipped") is not None:
            report.skipped += 1
    earlier |= here
    return report


def copy_to_scratch(context: ToolContext, folder: Path) -> Path:
    """Copy ``folder`` into the call's scratch (run in a worker thread: it takes a while)."""
    return context.disposable_copy(folder)


def _prepare(
    context: ToolContext, folder: Path, shards: int, first: bool
) -> tuple[list[tuple[Path, Path]], Path]:
    """A copy of ``folder`` for each shard (in the kernel sandbox, views that cost nothing),
    each with a free path for its report; and one for the report of the tests run first."""
    prepared: list[tuple[Path, Path]] = []
    taken: list[Path] = []

    def free(stem: str) -> Path:
        junit = context.scratch / f"{stem}.xml"
        counter = 1
        while junit.exists() or junit in taken:
            counter += 1  # a copy may have taken the name
            junit = context.scratch / f"{stem}-{counter}.xml"
        taken.append(junit)
        return junit

    for index in range(shards):
        copy = copy_to_scratch(context, folder)
        prepared.append((copy, free(f"junit-{index}")))
    return prepared, free("junit-first") if first else context.scratch


_MAX_SHARDS: Final = 64


def _shard_count(shards: object, context: ToolContext, folder: Path) -> int:
    """How many shards: ``auto`` takes one per core where copies cost nothing (views, in
    the kernel sandbox), else one; a number, that many."""
    if shards == "auto":
        return max(1, min(os.cpu_count() or 1, context.free_copies(folder)))
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= _MAX_SHARDS:
        raise ArgumentError(
            f'shards must be "auto" or a whole number from 1 to {_MAX_SHARDS}, got '
            f"{describe(shards)}"
        )
    return shards


def _exit_code(codes: list[int]) -> int:
    """One exit code for the shards': the first that is neither a pass, a failure nor "no
    tests" (a shard may get no test); else a failure's; else "no tests" if none ran."""
    worst = [code for code in codes if code not in (0, 1, _NO_TESTS)]
    if worst:
        return worst[0]
    if 1 in codes:
        return 1
    return _NO_TESTS if all(code == _NO_TESTS for code in codes) else 0


def output_tail(output: bytes) -> str:
    """The end of a run's output, as text."""
    text = output.decode("utf-8", errors="replace").strip()
    return text[-_OUTPUT_TAIL:]


# `timeout` is an argument of the check (pytest is killed and the result says so), not a
# cancellation deadline for the caller: hence ASYNC109.
async def pytest_suite(
    *,
    root: object,
    context: ToolContext,
    args: object = (),
    timeout: object = None,  # noqa: ASYNC109
    shards: object = "auto",
    failed_first: object = True,
) -> Result:
    """Run pytest on a disposable copy of ``root`` and report the outcome.

    The folder is copied with ``context.disposable_copy`` and
    ``python -m pytest -q -p no:cacheprovider --junitxml=<scratch>/junit.xml <args>`` runs
    in the copy with this interpreter, with ``PYTHONDONTWRITEBYTECODE=1`` added to the
    environment; the JUnit report gives the counts. The resource itself is never touched.
    Cancelling the call kills pytest.

    In shards, the suite runs in as many pytest processes at once, each on a copy of its
    own, each keeping its share of the collected tests (``-p
    gategraph.validators._pytest_shard``): a class's tests, or a module's functions, go
    together, balanced by the time they took when the validation last ran in the plan
    (else by what the project's ``.test_durations`` file, as pytest-split keeps it, says;
    else by their number); a group bigger than a shard's share is spread over several.
    One result and one failure list say how the suite went. By default (``auto``) one
    shard per core where copies cost nothing (copy-on-write views, in the kernel sandbox),
    else one.

    Where the validation failed when it last ran in the plan (a fix round), the tests that
    failed then run first; if one still fails, the suite has failed and the rest is not
    run (``data["stopped_early"]``), else the rest runs as above.

    Arguments:
        root: the project folder (the directory resource).
        context: the call's context (given by the runtime).
        args: more pytest arguments (``["tests/unit", "-x", "-k", "not slow"]``).
        timeout: seconds pytest may run before it is killed and the check fails
            (``data["error"] == "timeout"``); ``null`` for no limit of its own (the
            validation's ``timeout`` still applies).
        shards: ``auto`` (the default), or how many pytest processes share the suite
            (1: one, as by hand).
        failed_first: run first the tests that failed the last time, and stop if one
            still fails (``true``, the default); ``false`` runs the whole suite every time.

    Data:
        tests_run: test cases in the report (skipped ones included).
        tests_passed: those that passed.
        tests_failed: those that failed or errored (collection errors included).
        tests_skipped: those skipped (``xfail`` included).
        failures: up to 20 ``{"test": "module.Class.test_name", "message": ...}``.
        exit_code: pytest's exit code (the shards' together).
        output: the end of pytest's output (at most 4000 characters; each shard's end).
        shards: how many pytest processes ran the suite.
        first: how many tests ran first (they failed the last time).
        stopped_early: whether one of those failed again, and the rest was not run.
        durations: the seconds each group of tests took (what the next run balances by).
        failed_ids: the node ids of up to 200 tests that failed (what runs first next).
    """
    try:
        folder = check_root(root)
        extra = check_strings("args", args)
        # Options such as --basetemp (which pytest empties), --junitxml or -c name paths:
        # only inside the project's copy.
        check_inside("args", extra, options=True)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < math.inf
        ):
            raise ArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not isinstance(failed_first, bool):
            raise ArgumentError(f"failed_first must be true or false, got {describe(failed_first)}")
        count = _shard_count(shards, context, folder)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    if not isinstance(timeout, int | float):
        timeout = math.inf
    earlier = context.earlier
    durations = _earlier_durations(earlier) or await anyio.to_thread.run_sync(
        _durations_file, folder
    )
    first = _earlier_failures(earlier) if failed_first else []
    # Copying a project takes a while: do it in a worker thread, not on the event loop
    # (the read-only guard follows the call there; it is a context variable).
    prepared, first_junit = await anyio.to_thread.run_sync(
        _prepare, context, folder, count, bool(first)
    )
    # The tests run first use the first shard's copy, as one pytest run by hand would.
    firstly = _Run(prepared[0][0], first_junit)
    shard_runs = [_Run(copy, junit) for copy, junit in prepared]
    runs = [firstly] if first else []

    async def pytest(run: _Run, said: dict[str, Any]) -> None:
        said["record"] = str(run.record)
        settings = run.junit.with_suffix(".said.json")
        settings.write_text(json.dumps(said), encoding="utf-8")
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-p", "gategraph.validators._pytest_shard", f"--junitxml={run.junit}"]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", CONFIG_VARIABLE: str(settings)}
        run.done = await anyio.run_process([*command, *extra], cwd=run.copy, env=env, check=False)

    stopped = False
    with anyio.move_on_after(timeout):
        if first:
            await pytest(firstly, {"only": first})
            again = await anyio.to_thread.run_sync(_read_junit, first_junit)
            stopped = firstly.done.returncode not in (0, _NO_TESTS)
            stopped = stopped and again is not None and again.failed > 0
        if not stopped:
            runs += shard_runs
            async with anyio.create_task_group() as group:
                for index, run in enumerate(shard_runs):
                    said: dict[str, Any] = {"skip": first, "durations": durations}
                    if count > 1:
                        said["shard"] = [index, count]
                    group.start_soon(pytest, run, said)
    if any(run.done is None for run in runs) or not runs:
        return failed("timeout", f"pytest did not finish within {timeout:g} seconds")
    completed = [run.done for run in runs]
    heads = [f"-- shard {i + 1} of {count} --\n" if count > 1 else "" for i in range(count)]
    if first:
        heads.insert(0, f"-- the {plural(len(first), 'test')} that failed last time --\n")
    output = output_tail(
        b"".join(
            head.encode() + done.stdout + done.stderr
            for head, done in zip(heads, completed, strict=False)
        )
    )
    codes = [done.returncode for done in completed]
    if 1 in codes and any(b"No module named pytest" in done.stderr for done in completed):
        return result(
            False,
            f"pytest is not installed for {sys.executable}: install it there "
            "(`pip install pytest`), or check the suite with `unittest_suite`",
            exit_code=1,
            output=output,
        )

    def read() -> tuple[_Report | None, dict[str, float], list[str]]:
        report: _Report | None = None
        fresh: dict[str, float] = {}  # a group spread over several processes: their sum
        failing: dict[str, None] = {}
        for run in runs:
            report = _read_junit(run.junit, report) or report
            took, failed_here = _read_record(run.record)
            for group, seconds in took.items():
                fresh[group] = fresh.get(group, 0.0) + seconds
            failing.update(dict.fromkeys(failed_here))
        return report, {**durations, **fresh}, list(failing)[:MAX_FAILED]

    report, took, failing = await anyio.to_thread.run_sync(read)
    outcome = summarize(report, _exit_code(codes), output)
    if stopped:
        outcome["message"] += (
            " (run first, as they failed last time; the rest of the suite was not run)"
        )
    outcome["data"].update(
        shards=1 if stopped else count,
        first=len(first),
        stopped_early=stopped,
        durations=_kept_durations(took),
        failed_ids=failing,
    )
    return outcome


class _Run:
    """One pytest process of a suite: its copy, its report, its record, how it ended."""

    def __init__(self, copy: Path, junit: Path) -> None:
        self.copy = copy
        self.junit = junit
        self.record = junit.with_suffix(".record.json")
        self.done: Any = None


_MAX_GROUPS: Final = 2000
"""At most this many groups' durations are kept in a result (the heaviest): a suite of
many more still balances, its other groups weighed by the mean."""
_MAX_DURATIONS_FILE: Final = 8 << 20


def _earlier_durations(earlier: Mapping[str, Any] | None) -> dict[str, float]:
    """The seconds each group of tests took when the validation last ran in the plan."""
    found = earlier.get("durations") if earlier is not None else None
    if not isinstance(found, Mapping):
        return {}
    return {
        str(group): float(seconds)
        for group, seconds in found.items()
        if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0
    }


def _earlier_failures(earlier: Mapping[str, Any] | None) -> list[str]:
    """The tests that failed when the validation last ran in the plan (by node id), if it
    failed then."""
    if earlier is None or earlier.get("error") is not None:
        return []
    found = earlier.get("failed_ids")
    if not isinstance(found, list | tuple):
        return []
    return [test for test in found if isinstance(test, str) and test][:MAX_FAILED]


def _durations_file(folder: Path) -> dict[str, float]:
    """What the project's ``.test_durations`` (pytest-split's record: seconds by test node
    id) says, by group; nothing when it is missing, too big or not that."""
    path = folder / ".test_durations"
    try:
        if not path.is_file() or path.stat().st_size > _MAX_DURATIONS_FILE:
            return {}
        found = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    took: dict[str, float] = {}
    if isinstance(found, dict):
        for test, seconds in found.items():
            if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
                group = group_of(str(test))
                took[group] = took.get(group, 0.0) + float(seconds)
    return took


def _read_record(path: Path) -> tuple[dict[str, float], list[str]]:
    """What one pytest process recorded: each group's seconds, the tests that failed."""
    try:
        found = json.loads(path.read_bytes())  # written by our plugin in that process
    except (OSError, ValueError):
        return {}, []
    if not isinstance(found, dict):
        return {}, []
    return _earlier_durations(found), _earlier_failures({"failed_ids": found.get("failed")})


def _kept_durations(took: dict[str, float]) -> dict[str, float]:
    heaviest = sorted(took.items(), key=lambda item: (-item[1], item[0]))[:_MAX_GROUPS]
    return {group: round(seconds, 3) for group, seconds in sorted(heaviest)}


def summarize(report: _Report | None, exit_code: int, output: str) -> Result:
    """The result for a pytest run: its JUnit report (``None`` if it wrote none), its exit
    code and the end of its output."""
    report = report or _Report()
    passed_count = report.run - report.failed - report.skipped
    data = {
        "tests_run": report.run,
        "tests_passed": passed_count,
        "tests_failed": report.failed,
        "tests_skipped": report.skipped,
        "failures": report.failures,
        "exit_code": exit_code,
        "output": output,
    }
    if exit_code == _NO_TESTS or (exit_code == 0 and report.run == 0):
        return result(False, "No tests ran: pytest collected none", **data)
    if report.failed:
        message = f"{report.failed} of {plural(report.run, 'test')} failed: {listing(report.names)}"
        if exit_code in _EXIT_MEANINGS:
            message += f" ({_EXIT_MEANINGS[exit_code]})"
        return result(False, message, **data)
    if exit_code != 0:
        last = output.splitlines()[-1] if output else "no output"
        meaning = _EXIT_MEANINGS.get(exit_code, "see the output")
        return result(
            False, f"pytest exited with code {exit_code}, {meaning}: {shorten(last, 150)}", **data
        )
    if not passed_count:
        return result(True, f"All {plural(report.skipped, 'test')} were skipped", **data)
    skipped = f" ({report.skipped} skipped)" if report.skipped else ""
    done = "1 test passed" if passed_count == 1 else f"All {passed_count} tests passed"
    return result(True, done + skipped, **data)
