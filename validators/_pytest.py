"""``pytest_suite``: a project's test suite passes, run on a disposable copy."""

from __future__ import annotations

import json
import math
import os
import sys
import xml.etree.ElementTree as ET
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
    failed,
    listing,
    plural,
    result,
    shorten,
)
from ._pytest_shard import CONFIG_VARIABLE, group_of
from ._shards import (
    Run,
    Suite,
    check_failed_first,
    durations,
    exit_code,
    shard_count,
    stopped_message,
)

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
        if not classname:
            # A collection error (a module that cannot be imported), which every process
            # that collects the suite meets: counted once. Tests are never merged by name:
            # two can share one (`tests/v1.2/t.py` and `tests/v1/2/t.py`).
            if test in earlier:
                continue
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
    own (``-p gategraph.validators._pytest_shard``), each taking, when its last test is
    done, the next unit of the collected tests no other has taken: a class's tests, or a
    module's functions, go together, the heaviest module first, weighed by the time they
    took when the validation last ran in the plan (else by what the project's
    ``.test_durations`` file, as pytest-split keeps it, says; else by their number); a
    group bigger than a shard's share is cut into its tests.
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
        check_failed_first(failed_first)
        count = shard_count(shards, context, folder)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    if not isinstance(timeout, int | float):
        timeout = math.inf

    async def start(run: Run) -> Any:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-p", "gategraph.validators._pytest_shard", f"--junitxml={run.report}"]
        env = {
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",
            CONFIG_VARIABLE: str(run.said),
            **run.environment,
        }
        return await anyio.run_process([*command, *extra], cwd=run.copy, env=env, check=False)

    async def failed_again(run: Run) -> bool:
        assert run.done is not None
        if run.done.returncode in (0, _NO_TESTS):
            return False
        again = await anyio.to_thread.run_sync(_read_junit, run.report)
        return again is not None and again.failed > 0

    suite = Suite(
        context,
        folder,
        count=count,
        failed_first=bool(failed_first),
        start=start,
        failed_again=failed_again,
    )
    if not await suite.run(timeout, _durations_file):
        return failed("timeout", f"pytest did not finish within {timeout:g} seconds")
    runs = suite.runs
    disagreement = await anyio.to_thread.run_sync(suite.disagreement)
    output = output_tail(
        b"".join(head + run.output for head, run in zip(suite.heads(), runs, strict=True))
    )
    codes = [run.done.returncode for run in runs if run.done is not None]
    if 1 in codes and any(b"No module named pytest" in run.output for run in runs):
        return result(
            False,
            f"pytest is not installed for {sys.executable}: install it there "
            "(`pip install pytest`), or check the suite with `unittest_suite`",
            exit_code=1,
            output=output,
        )

    def read() -> _Report | None:
        report: _Report | None = None
        for run in runs:
            report = _read_junit(run.report, report) or report
        return report

    report = await anyio.to_thread.run_sync(read)
    outcome = summarize(report, exit_code(codes, _NO_TESTS), output)
    if disagreement is not None:
        outcome["passed"], outcome["message"] = False, disagreement
    if suite.stopped:
        outcome["message"] = stopped_message(outcome["message"])
    outcome["data"].update(suite.recorded())
    return outcome


_MAX_DURATIONS_FILE: Final = 8 << 20


def _durations_file(folder: Path) -> dict[str, float]:
    """What the project's ``.test_durations`` (pytest-split's record: seconds by test node
    id) says, by group; nothing when it is missing, too big or not that."""
    path = folder / ".test_durations"
    try:
        if not path.is_file() or path.stat().st_size > _MAX_DURATIONS_FILE:
            return {}
        found = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    took: dict[str, float] = {}
    if isinstance(found, dict):
        for test, seconds in durations(found).items():
            group = group_of(test)
            took[group] = took.get(group, 0.0) + seconds
    return took


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
