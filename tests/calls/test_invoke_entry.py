"""The worker-process side of a call, run in this process: `_process_entry` and its capture.

A worker process (``isolation: process``, or a Ray worker) runs one call at a time through
``_process_entry``: the tool is loaded from its entrypoint or inline code, run under the
same read-only guard as in the parent, its file descriptors 1 and 2 captured, and whatever
it raises, ``SystemExit`` included, returned as its failure (issue 9, items 5 and 6).
tests/calls/test_hostile_calls.py runs these through real worker processes; here the entry is
called directly, so that each path is pinned on its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module
from gategraph.runtime import ToolContext
from gategraph.runtime._calls._call import CAPTURE_LIMIT, Outcome, _FdCapture, _process_entry
from gategraph.runtime._calls._invoke import to_result


def inline(code: str, name: str = "v") -> tuple[str, str]:
    return (name, textwrap.dedent(code))


def run(
    code: str | None = None,
    *,
    entrypoint: str | None = None,
    kwargs: dict[str, Any] | None = None,
    is_validation: bool = True,
    wants_context: bool = False,
    resources: dict[str, Any] | None = None,
) -> Outcome:
    """Call the entry as a worker process would."""
    return _process_entry(
        "v",
        entrypoint,
        inline(code) if code is not None else None,
        dict(kwargs or {}),
        is_validation,
        wants_context,
        dict(resources or {}),
    )


def descriptors() -> list[tuple[int, int]]:
    """What descriptors 0, 1 and 2 refer to (device and inode)."""
    return [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (0, 1, 2)]


@pytest.fixture(autouse=True)
def _descriptors_restored() -> Iterator[None]:
    """Every test here ends with descriptors 0-2 and sys.stdout/stderr as they were."""
    before = descriptors()
    streams = (sys.stdout, sys.stderr)
    yield
    assert descriptors() == before
    assert (sys.stdout, sys.stderr) == streams


# -- results ----------------------------------------------------------------------------------


def test_a_passing_inline_call_returns_its_value_and_captures_nothing() -> None:
    """A quiet call's outcome is its value, with nothing captured."""
    outcome = run("""
        def run(**_):
            return {"passed": True, "message": "fine"}
        """)
    assert outcome.ok and outcome.error is None
    assert outcome.value == {"passed": True, "message": "fine"}
    assert outcome.captured is None


def test_configured_arguments_reach_the_call() -> None:
    """The keyword arguments travel as they are."""
    outcome = run(
        """
        def run(limit, names, **_):
            return {"passed": len(names) <= limit, "data": {"names": names}}
        """,
        kwargs={"limit": 1, "names": ["a", "b"]},
    )
    assert outcome.ok
    assert outcome.value == {"passed": False, "data": {"names": ["a", "b"]}}


def test_an_entrypoint_is_imported_and_called(monkeypatch: pytest.MonkeyPatch) -> None:
    """``package.module:attr`` names the callable, attributes of attributes included."""

    class Checks:
        @staticmethod
        def count(items: list[int], **_: Any) -> dict[str, Any]:
            return {"passed": sum(items) == 6}

    module = fake_module(monkeypatch, "gg_entry_checks", Checks=Checks)
    outcome = run(entrypoint=f"{module}:Checks.count", kwargs={"items": [1, 2, 3]})
    assert outcome.ok and outcome.value == {"passed": True}


def test_an_async_tool_runs_on_an_event_loop_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A coroutine function shipped to a worker (Ray sends them) is run to its end there."""

    async def later(**_: Any) -> dict[str, Any]:
        import anyio.lowlevel

        await anyio.lowlevel.checkpoint()
        return {"passed": True, "message": "awaited"}

    module = fake_module(monkeypatch, "gg_entry_async", later=later)
    outcome = run(entrypoint=f"{module}:later")
    assert outcome.ok and outcome.value == {"passed": True, "message": "awaited"}


def test_a_raising_call_is_its_failure_with_where_it_raised() -> None:
    """An exception is a failed outcome naming the type, the text and the line."""
    outcome = run("""
        def run(**_):
            raise RuntimeError("disk on fire")
        """)
    assert not outcome.ok
    assert outcome.error == "exception"
    assert outcome.message == "v raised RuntimeError: disk on fire (at <v>:3)"
    assert outcome.detail == {"exception_type": "RuntimeError"}
    result = to_result(outcome)
    assert not result.passed
    assert result.data == {"exception_type": "RuntimeError", "error": "exception"}


@pytest.mark.parametrize(
    ("statement", "named"),
    [
        ("raise SystemExit(3)", "SystemExit(3)"),
        ("import sys; sys.exit('bye')", "SystemExit('bye')"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt()"),
        ("raise GeneratorExit", "GeneratorExit()"),
    ],
)
def test_system_exit_and_other_base_exceptions_are_the_call_s_failure(
    statement: str, named: str
) -> None:
    """Nothing cancels a worker process's call: every BaseException is the tool's."""
    outcome = run(f"def run(**_):\n    {statement}\n")
    assert not outcome.ok and outcome.error == "exception"
    assert outcome.message == f"v raised {named} (at <v>:2)"
    assert outcome.detail == {"exception_type": named.partition("(")[0]}


def test_an_exception_that_cannot_be_shown_is_named_by_its_type() -> None:
    """An exception whose __str__ raises still makes a one-line message."""
    outcome = run("""
        class Sulky(Exception):
            def __str__(self):
                raise RuntimeError("no")

        def run(**_):
            raise Sulky()
        """)
    assert outcome.message == "v raised Sulky (at <v>:7)"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (None, "malformed"),
        ("yes", "malformed"),
        ({"message": "no passed key"}, "malformed"),
        ({"passed": "yes"}, "malformed"),
        ({"passed": True, "data": {"blob": "x" * (2 << 20)}}, "too_large"),
    ],
)
def test_a_malformed_return_is_a_failed_result(value: Any, error: str) -> None:
    """The entry returns whatever the call returned; its result is failed as malformed."""
    outcome = run(
        "def run(value, **_):\n    return value\n", kwargs={"value": value}, is_validation=True
    )
    assert outcome.ok and outcome.value == value
    result = to_result(outcome)
    assert result.passed is False
    assert result.data["error"] == error


# -- loading ------------------------------------------------------------------------------------


def test_inline_code_without_run_fails_the_call() -> None:
    """Code that defines no ``run`` is a failed call that says what is missing."""
    outcome = run("def check(**_):\n    return True\n")
    assert not outcome.ok and outcome.error == "exception"
    assert "ConfigError" in outcome.message
    assert "must define `run(...)`" in outcome.message


def test_inline_code_that_fails_to_load_fails_the_call() -> None:
    """An import error in the code is the call's failure, not the worker's."""
    outcome = run("import gg_no_such_module_anywhere\ndef run(**_):\n    return 1\n")
    assert not outcome.ok
    assert outcome.message.startswith("v raised ModuleNotFoundError: No module named")


def test_an_entrypoint_that_does_not_resolve_fails_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A missing module or attribute is a failed call naming the entrypoint."""
    outcome = run(entrypoint="gg_not_a_module_at_all:run")
    assert not outcome.ok
    assert "cannot import 'gg_not_a_module_at_all'" in outcome.message
    module = fake_module(monkeypatch, "gg_entry_empty")
    outcome = run(entrypoint=f"{module}:missing")
    assert "'gg_entry_empty' has no attribute 'missing'" in outcome.message


# -- the context and the guard -------------------------------------------------------------------


def test_a_call_that_asks_for_a_context_gets_one_and_its_scratch_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The context holds the resources and a guard; its scratch is gone once the call ends."""
    seen: dict[str, Any] = {}

    def inspect_context(*, context: ToolContext, **_: Any) -> dict[str, Any]:
        seen["context"] = context
        seen["scratch"] = context.scratch
        (context.scratch / "notes.txt").write_text("a validation may write here")
        return {"passed": True}

    module = fake_module(monkeypatch, "gg_entry_context", run=inspect_context)
    outcome = run(entrypoint=f"{module}:run", wants_context=True, resources={"root": tmp_path})
    assert outcome.ok, outcome.message
    context = seen["context"]
    assert isinstance(context, ToolContext)
    assert context.resources["root"] == tmp_path
    assert context.guard is not None and context.guard.violation is None
    assert not seen["scratch"].exists()


def test_no_context_is_passed_to_a_call_that_did_not_ask() -> None:
    """Only a callable naming ``context`` gets one."""
    outcome = run("def run(**kwargs):\n    return {'passed': 'context' not in kwargs}\n")
    assert outcome.ok and outcome.value == {"passed": True}


def test_a_validation_that_writes_fails_for_it_even_if_it_catches_the_refusal(
    tmp_path: Path,
) -> None:
    """In a worker process too, a write is refused and the call fails as a violation."""
    target = tmp_path / "resource.txt"
    target.write_text("original")
    outcome = run(
        """
        def run(target, **_):
            try:
                with open(target, "w") as file:
                    file.write("changed")
            except PermissionError:
                pass
            return {"passed": True}
        """,
        kwargs={"target": str(target)},
    )
    assert not outcome.ok
    assert outcome.error == "read_only_violation"
    assert outcome.message == (
        f"validation in a worker process attempted a write: opening {str(target)!r} for writing"
    )
    assert target.read_text() == "original"
    assert to_result(outcome).data == {"error": "read_only_violation"}


def test_a_validation_that_lets_the_refusal_escape_fails_as_a_violation(tmp_path: Path) -> None:
    """An uncaught refusal is the same kind of failure, not an ``exception``."""
    target = tmp_path / "resource.txt"
    outcome = run(
        "import os\ndef run(target, **_):\n    os.mkdir(target)\n",
        kwargs={"target": str(target)},
    )
    assert not outcome.ok and outcome.error == "read_only_violation"
    assert "os.mkdir" in outcome.message
    assert not target.exists()


def test_a_work_tool_runs_unguarded(tmp_path: Path) -> None:
    """A tool that is not a validation may write (to its sandbox, in a real run)."""
    target = tmp_path / "made.txt"
    outcome = run(
        "def run(target, **_):\n    with open(target, 'w') as f:\n        f.write('made')\n    return 1\n",
        kwargs={"target": str(target)},
        is_validation=False,
    )
    assert outcome.ok and outcome.value == 1
    assert target.read_text() == "made"


# -- captured output ------------------------------------------------------------------------------


def test_output_to_streams_and_descriptors_is_captured_in_order() -> None:
    """print(), sys.stderr and raw writes to descriptors 1 and 2 all land in the capture."""
    outcome = run("""
        import os, sys
        def run(**_):
            print("printed")
            os.write(1, b"raw one\\n")
            sys.stderr.write("warned\\n")
            os.write(2, b"raw two\\n")
            sys.stdout.write("tail without newline")
            return {"passed": True}
        """)
    assert outcome.ok
    assert outcome.captured == {
        "stdout": "printed\nraw one\ntail without newline",
        "stderr": "warned\nraw two\n",
    }


def test_only_streams_written_to_are_in_the_capture() -> None:
    """A call that wrote to stderr alone has no stdout entry."""
    outcome = run("import sys\ndef run(**_):\n    print('oops', file=sys.stderr)\n    return 1\n")
    assert outcome.captured == {"stderr": "oops\n"}


def test_what_a_failing_call_printed_is_kept() -> None:
    """The capture of a call that raised is in its outcome too."""
    outcome = run("def run(**_):\n    print('last words')\n    raise ValueError('then died')\n")
    assert not outcome.ok
    assert outcome.captured == {"stdout": "last words\n"}


def test_descriptor_zero_reads_nothing_during_the_call() -> None:
    """In a worker, descriptor 0 carries the worker's commands: a call reads end of file."""
    outcome = run("import os\ndef run(**_):\n    return os.read(0, 100)\n")
    assert outcome.ok and outcome.value == b""


def test_a_flood_keeps_the_last_bytes_and_counts_the_rest() -> None:
    """Past the limit, the capture says how many earlier bytes it dropped."""
    line = b"0123456789abcdef" * 4 + b"\n"  # 65 bytes
    count = 4000
    outcome = run(
        f"import os\ndef run(**_):\n    for _ in range({count}):\n        os.write(1, {line!r})\n"
        "    return 1\n"
    )
    assert outcome.captured is not None
    header, _, kept = outcome.captured["stdout"].partition("\n")
    total = count * len(line)
    assert header == f"[{total - CAPTURE_LIMIT} earlier bytes not kept]"
    assert kept.encode() == (line * count)[-CAPTURE_LIMIT:]


def test_bytes_that_are_not_utf8_are_kept_replaced() -> None:
    """Undecodable output is kept as replacement characters, never a crash."""
    outcome = run("import os\ndef run(**_):\n    os.write(1, b'bad \\xff byte')\n    return 1\n")
    assert outcome.captured == {"stdout": "bad \ufffd byte"}


def test_a_call_that_breaks_its_streams_leaves_the_worker_intact() -> None:
    """Closing or replacing sys.stdout inside a call does not outlive the call."""
    outcome = run("""
        import io, sys
        def run(**_):
            print("before")
            sys.stdout.close()
            sys.stderr = io.StringIO()
            return {"passed": True}
        """)
    assert outcome.ok
    assert outcome.captured == {"stdout": "before\n"}


def test_the_capture_on_its_own_restores_every_descriptor() -> None:
    """Start, write, stop: the tails hold what was written, the descriptors are back."""
    capture = _FdCapture()
    capture.start()
    try:
        os.write(1, b"one")
        os.write(2, b"two")
    finally:
        capture.stop()
    assert capture.result() == {"stdout": "one", "stderr": "two"}
    assert _FdCapture().result() is None


def test_a_call_runs_uncaptured_when_no_descriptor_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of file descriptors, the call still runs (uncaptured) rather than not at all."""

    def exhausted(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr("gategraph.runtime._calls._call.os.dup", exhausted)
    outcome = run("def run(**_):\n    return {'passed': True}\n")
    monkeypatch.undo()
    assert outcome.ok and outcome.value == {"passed": True}
    assert outcome.captured is None


def test_running_out_of_descriptors_midway_puts_every_one_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipe that cannot be made after fd 1 was redirected: fds 0-2 are restored (fd 1 is
    where a worker answers its parent) and the call runs uncaptured."""
    real_pipe = os.pipe
    made: list[int] = []

    def second_fails() -> tuple[int, int]:
        made.append(1)
        if len(made) == 2:
            raise OSError(24, "Too many open files")
        return real_pipe()

    monkeypatch.setattr("gategraph.runtime._calls._call.os.pipe", second_fails)
    outcome = run("def run(**_):\n    return {'passed': True}\n")
    monkeypatch.undo()
    assert outcome.ok and outcome.captured is None
    assert len(made) == 2  # the autouse fixture checks the descriptors afterwards


def test_consecutive_captures_share_one_reader_thread() -> None:
    """A worker process starts its capture's reader once, not per call."""
    readers = []
    for text in ("first", "second", "third"):
        capture = _FdCapture()
        capture.start()
        try:
            os.write(1, text.encode())
        finally:
            capture.stop()
        assert capture.result() == {"stdout": text}
        readers.append(capture.reader)
    assert readers[0] is not None and readers.count(readers[0]) == 3
    assert readers[0].is_alive()


def test_a_capture_held_open_by_a_leftover_process_does_not_delay_the_next_one() -> None:
    """A process a call started keeps the call's output open past its end: that call's
    reader waits on it (its grace runs out), and the next call's capture has a reader of
    its own, with its own output only."""
    import subprocess

    first = _FdCapture()
    first.start()
    try:
        # Inherits descriptors 1 and 2 (the first capture's pipes) and holds them open.
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        os.write(1, b"before")
    finally:
        first.stop()
    try:
        assert first.result() == {"stdout": "before"}
        second = _FdCapture()
        second.start()
        try:
            os.write(1, b"next")
        finally:
            second.stop()
        assert second.result() == {"stdout": "next"}
        assert second.reader is not first.reader
    finally:
        holder.kill()
        holder.wait()


def test_a_reader_that_fails_is_not_handed_the_next_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reader whose selector cannot be made (no descriptor left) loses its capture and
    ends; the next capture gets a reader of its own rather than the dead one."""
    import selectors

    real = selectors.DefaultSelector
    broken = [True]

    def no_selector() -> Any:
        if broken[0]:
            broken[0] = False
            raise OSError(24, "Too many open files")
        return real()

    first = _FdCapture()
    monkeypatch.setattr("gategraph.runtime._calls._call.selectors.DefaultSelector", no_selector)
    # A fresh reader for this one: take the idle ones out of the way for the test.
    monkeypatch.setattr("gategraph.runtime._calls._call._IDLE_READERS", [])
    first.start()
    try:
        # The dead reader closed its ends: a write may find no reader (EPIPE).
        with contextlib.suppress(BrokenPipeError):
            os.write(1, b"lost")
    finally:
        first.stop()
    assert first.result() is None
    assert first.reader is not None
    first.reader.join(5)
    assert not first.reader.is_alive()
    second = _FdCapture()
    second.start()
    try:
        os.write(1, b"kept")
    finally:
        second.stop()
    assert second.result() == {"stdout": "kept"}
    assert second.reader is not first.reader
