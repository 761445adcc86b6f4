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
from ._pytest import MAX_FAILURES, output_tail
from ._shards import (
    Run,
    Suite,
    check_failed_first,
    exit_code,
    recorded_failures,
    shard_count,
    stopped_message,
)
from ._unittest_shard import CONFIG_VARIABLE

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
    shards: object = "auto",
    failed_first: object = True,
) -> Result:
    """Run the project's unittest suite (as ``python -m unittest discover``) on a
    disposable copy of ``root``.

    The folder is copied with ``context.disposable_copy``; the tests under ``start`` are
    discovered with ``pattern`` and run with this interpreter, with ``paths`` (relative to
    the project) on ``PYTHONPATH``, by unittest's own text runner
    (``python -m gategraph.validators._unittest_shard``). pytest runs unittest-style tests
    too, so a project can use both. The resource itself is never touched; cancelling the
    call kills the run.

    In shards and with what failed last time first, as ``pytest_suite``: a class's tests
    stay together, each shard taking the next class left when its last test is done, the
    heaviest module first, weighed by the seconds they took the last time the validation
    ran in the plan, else by their number of tests.

    Arguments:
        root: the project folder (the directory resource).
        context: the call's context (given by the runtime).
        start: the folder to discover tests in, relative to the project (``tests``).
        paths: folders put on ``PYTHONPATH`` (``["src"]``), relative to the project.
        pattern: the file name pattern of test modules (``test*.py``).
        timeout: seconds the run may take before it is killed and the check fails
            (``data["error"] == "timeout"``); ``null`` for no limit of its own.
        shards: ``auto`` (the default: one per core where copies cost nothing, in the
            kernel sandbox; else one), or how many processes share the suite.
        failed_first: run first the tests that failed the last time, and stop if one
            still fails (``true``, the default).

    Data:
        tests_run, tests_failed, tests_skipped: the counts unittest reports (the shards'
            together).
        failures: up to 20 ``{"test": ..., "kind": "FAIL" | "ERROR"}``.
        exit_code: the runner's exit code (the shards' together).
        output: the end of the runner's output (at most 4000 characters; each shard's end).
        shards, first, stopped_early, durations, failed_ids: as ``pytest_suite``'s (a
            test's id is unittest's, ``module.Class.test_name``).
    """
    try:
        folder = check_root(root)
        extra_paths = check_strings("paths", paths)
        for name, value in (("start", start), ("pattern", pattern)):
            if not isinstance(value, str) or not value.strip():
                raise ArgumentError(f"{name} must be a non-empty string, got {value!r}")
        assert isinstance(start, str) and isinstance(pattern, str)
        # Discovery imports and runs what it finds: only inside the project's copy.
        check_inside("start", [start])
        check_inside("paths", extra_paths)
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
    limit = timeout if isinstance(timeout, int | float) else math.inf
    if not (folder / start).is_dir():
        return result(False, f"No tests ran: there is no folder {start!r} in the project")

    async def begin(run: Run) -> Any:
        python_path = os.pathsep.join(
            [str(run.copy / p) for p in extra_paths] + [os.environ.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        env = {
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": python_path,
            CONFIG_VARIABLE: str(run.said),
            **run.environment,
        }
        command = [sys.executable, "-m", "gategraph.validators._unittest_shard", start, pattern]
        return await anyio.run_process(command, cwd=run.copy, env=env, check=False)

    async def failed_again(run: Run) -> bool:
        # A test of those failed again, not the runner (a crash, nothing discovered).
        return bool(await anyio.to_thread.run_sync(recorded_failures, run))

    suite = Suite(
        context,
        folder,
        count=count,
        failed_first=bool(failed_first),
        start=begin,
        failed_again=failed_again,
    )
    if not await suite.run(limit, lambda _: {}):
        return failed("timeout", f"the tests did not finish within {limit:g} seconds")
    run_count = failing = skipped = 0
    problems: list[dict[str, str]] = []
    for run in suite.runs:
        text = run.output.decode("utf-8", errors="replace")
        ran = _RAN.search(text)
        status = _STATUS.search(text)
        counts = _counts(status.group(2) if status else None)
        run_count += int(ran.group(1)) if ran else 0
        failing += counts.get("failures", 0) + counts.get("errors", 0)
        failing += counts.get("unexpected successes", 0)
        skipped += counts.get("skipped", 0)
        problems += [
            # Python 3.11+ prints the whole id in the parentheses (`name (mod.Class.name)`),
            # older ones the class only (`name (mod.Class)`).
            {"test": where if where.endswith(f".{name}") else f"{where}.{name}", "kind": kind}
            for kind, name, where in _PROBLEM.findall(text)
        ]
    codes = [run.done.returncode for run in suite.runs if run.done is not None]
    code = exit_code(codes, _NO_TESTS)
    whole = b"".join(head + run.output for head, run in zip(suite.heads(), suite.runs, strict=True))
    text = whole.decode("utf-8", errors="replace")
    data = {
        "tests_run": run_count,
        "tests_failed": failing,
        "tests_skipped": skipped,
        "failures": problems[:MAX_FAILURES],
        "exit_code": code,
        "output": output_tail(whole),
        **suite.recorded(),
    }
    disagreement = await anyio.to_thread.run_sync(suite.disagreement)
    if disagreement is not None:
        return result(False, disagreement, **data)
    if run_count == 0 or (code == _NO_TESTS and not failing):
        return result(False, f"No tests ran: unittest found none in {start!r}", **data)
    if failing:
        names = [p["test"].rsplit(".", 1)[-1] for p in problems]
        what = listing(names) if names else shorten(text.strip().splitlines()[-1], 150)
        message = f"{failing} of {plural(run_count, 'test')} failed: {what}"
        return result(False, stopped_message(message) if suite.stopped else message, **data)
    if code != 0:
        last = shorten(text.strip().splitlines()[-1], 150) if text.strip() else "no output"
        return result(
            False, f"the tests passed but the runner exited with code {code}: {last}", **data
        )
    skips = f" ({skipped} skipped)" if skipped else ""
    done = "1 test passed" if run_count == 1 else f"All {run_count} tests passed"
    return result(True, done + skips, **data)
