"""``unittest_suite``: a project's unittest suite passes, run on a disposable copy.

The standard library's runner, so it works wherever Python does: no test extra needed.
"""

from __future__ import annotations

import math
import os
import re
import sys
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
from ._pytest import MAX_FAILURES, copy_to_scratch, output_tail

if TYPE_CHECKING:
    from gategraph.runtime import ToolContext

__all__ = ["unittest_suite"]

_RAN: Final = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_STATUS: Final = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$", re.MULTILINE)
_PROBLEM: Final = re.compile(r"^(FAIL|ERROR): (\S+) \(([^)]*)\)", re.MULTILINE)
_NO_TESTS: Final = 5  # unittest's exit code when it found no tests (Python 3.12+)


def _counts(status: str | None) -> dict[str, int]:
    counts: dict[str, int] = {}
    for part in (status or "").split(","):
        key, _, value = part.strip().partition("=")
        if value.isdigit():
            counts[key] = int(value)
    return counts


async def unittest_suite(
    *,
    root: object,
    context: ToolContext,
    start: object = "tests",
    paths: object = ("src",),
    pattern: object = "test*.py",
    timeout: object = None,  # noqa: ASYNC109 - the check's own limit, see pytest_suite
) -> Result:
    """Run ``python -m unittest discover`` on a disposable copy of ``root``.

    The folder is copied with ``context.disposable_copy``; the tests under ``start`` are
    discovered with ``pattern`` and run with this interpreter, with ``paths`` (relative to
    the project) on ``PYTHONPATH``. pytest runs unittest-style tests too, so a project can
    use both. The resource itself is never touched; cancelling the call kills the run.

    Arguments:
        root: the project folder (the directory resource).
        context: the call's context (given by the runtime).
        start: the folder to discover tests in, relative to the project (``tests``).
        paths: folders put on ``PYTHONPATH`` (``["src"]``), relative to the project.
        pattern: the file name pattern of test modules (``test*.py``).
        timeout: seconds the run may take before it is killed and the check fails
            (``data["error"] == "timeout"``); ``null`` for no limit of its own.

    Data:
        tests_run, tests_failed, tests_skipped: the counts unittest reports.
        failures: up to 20 ``{"test": ..., "kind": "FAIL" | "ERROR"}``.
        exit_code: the runner's exit code.
        output: the end of the runner's output (at most 4000 characters).
    """
    try:
        folder = check_root(root)
        extra_paths = check_strings("paths", paths)
        for name, value in (("start", start), ("pattern", pattern)):
            if not isinstance(value, str) or not value.strip():
                raise ArgumentError(f"{name} must be a non-empty string, got {value!r}")
        assert isinstance(start, str)
        # Discovery imports and runs what it finds: only inside the project's copy.
        check_inside("start", [start])
        check_inside("paths", extra_paths)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout < math.inf
        ):
            raise ArgumentError(f"timeout must be a positive number of seconds, got {timeout!r}")
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    limit = timeout if isinstance(timeout, int | float) else math.inf
    copy = await anyio.to_thread.run_sync(copy_to_scratch, context, folder)
    assert isinstance(start, str) and isinstance(pattern, str)
    if not (copy / start).is_dir():
        return result(False, f"No tests ran: there is no folder {start!r} in the project")
    python_path = os.pathsep.join(
        [str(copy / p) for p in extra_paths] + [os.environ.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": python_path}
    command = [sys.executable, "-m", "unittest", "discover", "-s", start, "-p", pattern]
    completed: Any = None
    with anyio.move_on_after(limit):
        completed = await anyio.run_process(command, cwd=copy, env=env, check=False)
    if completed is None:
        return failed("timeout", f"the tests did not finish within {limit:g} seconds")
    text = (completed.stdout + completed.stderr).decode("utf-8", errors="replace")
    ran = _RAN.search(text)
    status = _STATUS.search(text)
    counts = _counts(status.group(2) if status else None)
    problems = [
        # Python 3.11+ prints the whole id in the parentheses (`name (mod.Class.name)`),
        # older ones the class only (`name (mod.Class)`).
        {"test": where if where.endswith(f".{name}") else f"{where}.{name}", "kind": kind}
        for kind, name, where in _PROBLEM.findall(text)
    ]
    run = int(ran.group(1)) if ran else 0
    failing = counts.get("failures", 0) + counts.get("errors", 0)
    data = {
        "tests_run": run,
        "tests_failed": failing,
        "tests_skipped": counts.get("skipped", 0),
        "failures": problems[:MAX_FAILURES],
        "exit_code": completed.returncode,
        "output": output_tail(completed.stdout + completed.stderr),
    }
    if run == 0 or (completed.returncode == _NO_TESTS and not failing):
        return result(False, f"No tests ran: unittest found none in {start!r}", **data)
    if failing:
        names = [p["test"].rsplit(".", 1)[-1] for p in problems]
        what = listing(names) if names else shorten(text.strip().splitlines()[-1], 150)
        return result(False, f"{failing} of {plural(run, 'test')} failed: {what}", **data)
    if completed.returncode != 0:
        last = shorten(text.strip().splitlines()[-1], 150) if text.strip() else "no output"
        return result(
            False,
            f"the tests passed but the runner exited with code {completed.returncode}: {last}",
            **data,
        )
    skipped = f" ({counts['skipped']} skipped)" if counts.get("skipped") else ""
    done = "1 test passed" if run == 1 else f"All {run} tests passed"
    return result(True, done + skipped, **data)
