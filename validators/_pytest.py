"""``pytest_suite``: a project's test suite passes, run on a disposable copy."""

from __future__ import annotations

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
    describe,
    failed,
    listing,
    plural,
    result,
    shorten,
)
from ._pytest_shard import SHARD_VARIABLE

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


def _prepare(context: ToolContext, folder: Path, shards: int) -> list[tuple[Path, Path]]:
    """A copy of ``folder`` for each shard (in the kernel sandbox, views that cost nothing),
    each with a free path for its report."""
    prepared: list[tuple[Path, Path]] = []
    for index in range(shards):
        copy = copy_to_scratch(context, folder)
        junit = context.scratch / f"junit-{index}.xml"
        counter = 1
        while junit.exists() or any(junit == taken for _, taken in prepared):
            counter += 1  # a copy may have taken the name
            junit = context.scratch / f"junit-{index}-{counter}.xml"
        prepared.append((copy, junit))
    return prepared


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
) -> Result:
    """Run pytest on a disposable copy of ``root`` and report the outcome.

    The folder is copied with ``context.disposable_copy`` and
    ``python -m pytest -q -p no:cacheprovider --junitxml=<scratch>/junit.xml <args>`` runs
    in the copy with this interpreter, with ``PYTHONDONTWRITEBYTECODE=1`` added to the
    environment; the JUnit report gives the counts. The resource itself is never touched.
    Cancelling the call kills pytest.

    In shards, the suite runs in as many pytest processes at once, each on a copy of its
    own, each keeping its share of the collected tests (by file, balanced by their number:
    ``-p gategraph.validators._pytest_shard``); one result and one failure list say how
    the suite went. By default (``auto``) one shard per core where copies cost nothing
    (copy-on-write views, in the kernel sandbox), else one.

    Arguments:
        root: the project folder (the directory resource).
        context: the call's context (given by the runtime).
        args: more pytest arguments (``["tests/unit", "-x", "-k", "not slow"]``).
        timeout: seconds pytest may run before it is killed and the check fails
            (``data["error"] == "timeout"``); ``null`` for no limit of its own (the
            validation's ``timeout`` still applies).
        shards: ``auto`` (the default), or how many pytest processes share the suite
            (1: one, as by hand).

    Data:
        tests_run: test cases in the report (skipped ones included).
        tests_passed: those that passed.
        tests_failed: those that failed or errored (collection errors included).
        tests_skipped: those skipped (``xfail`` included).
        failures: up to 20 ``{"test": "module.Class.test_name", "message": ...}``.
        exit_code: pytest's exit code (the shards' together).
        output: the end of pytest's output (at most 4000 characters; each shard's end).
        shards: how many pytest processes ran the suite.
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
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    if not isinstance(timeout, int | float):
        timeout = math.inf
    try:
        count = _shard_count(shards, context, folder)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    # Copying a project takes a while: do it in a worker thread, not on the event loop
    # (the read-only guard follows the call there; it is a context variable).
    prepared = await anyio.to_thread.run_sync(_prepare, context, folder, count)
    completed: list[Any] = [None] * count

    async def shard(index: int, copy: Path, junit: Path) -> None:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        if count > 1:
            command += ["-p", "gategraph.validators._pytest_shard"]
            env[SHARD_VARIABLE] = f"{index}/{count}"
        command += [f"--junitxml={junit}", *extra]
        completed[index] = await anyio.run_process(command, cwd=copy, env=env, check=False)

    with anyio.move_on_after(timeout):
        async with anyio.create_task_group() as group:
            for index, (copy, junit) in enumerate(prepared):
                group.start_soon(shard, index, copy, junit)
    if any(done is None for done in completed):
        return failed("timeout", f"pytest did not finish within {timeout:g} seconds")
    outputs = [done.stdout + done.stderr for done in completed]
    output = output_tail(
        b"".join(
            (b"-- shard %d of %d --\n" % (i + 1, count) if count > 1 else b"") + text
            for i, text in enumerate(outputs)
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

    def read() -> _Report | None:
        report: _Report | None = None
        for _, junit in prepared:
            report = _read_junit(junit, report) or report
        return report

    report = await anyio.to_thread.run_sync(read)
    outcome = summarize(report, _exit_code(codes), output)
    outcome["data"]["shards"] = count
    return outcome


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
