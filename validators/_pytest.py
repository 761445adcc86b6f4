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
    failed,
    listing,
    plural,
    result,
    shorten,
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


def _read_junit(path: Path) -> _Report | None:
    try:
        tree = ET.parse(path)  # written by the pytest run we started
    except (OSError, ET.ParseError):
        return None
    report = _Report()
    for case in tree.getroot().iter("testcase"):
        report.run += 1
        classname = case.get("classname", "")
        name = case.get("name", "?")
        test = f"{classname}.{name}" if classname else name
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
    return report


def copy_to_scratch(context: ToolContext, folder: Path) -> Path:
    """Copy ``folder`` into the call's scratch (run in a worker thread: it takes a while)."""
    return context.disposable_copy(folder)


def _prepare(context: ToolContext, folder: Path) -> tuple[Path, Path]:
    """Copy ``folder`` into scratch; return the copy and a free path for the report."""
    copy = copy_to_scratch(context, folder)
    junit = context.scratch / "junit.xml"
    counter = 1
    while junit.exists():  # the copy may have taken the name
        counter += 1
        junit = context.scratch / f"junit-{counter}.xml"
    return copy, junit


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
) -> Result:
    """Run pytest on a disposable copy of ``root`` and report the outcome.

    The folder is copied with ``context.disposable_copy`` and
    ``python -m pytest -q -p no:cacheprovider --junitxml=<scratch>/junit.xml <args>`` runs
    in the copy with this interpreter, with ``PYTHONDONTWRITEBYTECODE=1`` added to the
    environment; the JUnit report gives the counts. The resource itself is never touched.
    Cancelling the call kills pytest.

    Arguments:
        root: the project folder (the directory resource).
        context: the call's context (given by the runtime).
        args: more pytest arguments (``["tests/unit", "-x", "-k", "not slow"]``).
        timeout: seconds pytest may run before it is killed and the check fails
            (``data["error"] == "timeout"``); ``null`` for no limit of its own (the
            validation's ``timeout`` still applies).

    Data:
        tests_run: test cases in the report (skipped ones included).
        tests_passed: those that passed.
        tests_failed: those that failed or errored (collection errors included).
        tests_skipped: those skipped (``xfail`` included).
        failures: up to 20 ``{"test": "module.Class.test_name", "message": ...}``.
        exit_code: pytest's exit code.
        output: the end of pytest's output (at most 4000 characters).
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
    # Copying a project takes a while: do it in a worker thread, not on the event loop
    # (the read-only guard follows the call there; it is a context variable).
    copy, junit = await anyio.to_thread.run_sync(_prepare, context, folder)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={junit}",
        *extra,
    ]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    completed: Any = None
    with anyio.move_on_after(timeout):
        completed = await anyio.run_process(command, cwd=copy, env=env, check=False)
    if completed is None:
        return failed("timeout", f"pytest did not finish within {timeout:g} seconds")
    output = output_tail(completed.stdout + completed.stderr)
    if completed.returncode == 1 and b"No module named pytest" in completed.stderr:
        return result(
            False,
            f"pytest is not installed for {sys.executable}: install it there "
            "(`pip install pytest`), or check the suite with `unittest_suite`",
            exit_code=completed.returncode,
            output=output,
        )
    report = await anyio.to_thread.run_sync(_read_junit, junit)
    return summarize(report, completed.returncode, output)


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
