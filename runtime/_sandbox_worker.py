"""The worker process of ``isolation: sandbox``: confined by the kernel, one call at a time.

Started by :mod:`._sandbox` as ``python -P -c "...main()" <folder> <parent pid> <limits>
<hidden>`` (the limits as JSON, and the databases to hide as a JSON list)
with its requests on descriptor 0 and its answers on descriptor 1 (moved out of the way at
once: the call's own output is captured, never mixed with them). It confines itself
(:func:`._kernel.confine`) before it starts any thread or imports the call's code, says
``ready``, then runs calls until its requests end.

A frame is a 4-byte big-endian length and its bytes. The first request is the parent's
``sys.path``, then each is a :class:`._invoke.SandboxRequest`: pickles, the parent's to
write and the worker's to read. Answers are :class:`Answer` in MessagePack,
never pickles: whatever runs in the worker can write to its answers, and the parent must
not run what they contain. ``ready`` (or ``refused``, why) once, then ``done`` per call,
with ``keep`` False when the worker must not run another call (it left something running,
or it spent half its CPU seconds).
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import shutil
import struct
import sys
import time
from typing import Any, Final

import msgspec

from ._kernel import SandboxLimits, confine

_HEADER: Final = struct.Struct(">I")
_LEFTOVER_GRACE: Final = 0.5
"""Seconds a call's threads and processes get to end once it returned."""


class Answer(msgspec.Struct, array_like=True):
    """What a sandboxed worker says: ``ready``, ``refused`` or ``done``."""

    kind: str
    text: str = ""
    outcome: Any = None
    """A ``done`` call's :class:`._invoke.Outcome` as plain data."""
    keep: bool = False


def _send(fd: int, answer: Answer) -> None:
    try:
        data = msgspec.msgpack.encode(answer)
    except (TypeError, ValueError, OverflowError, RecursionError):
        # A value that is not plain data (or nested past any sense) cannot leave the
        # sandbox as it is.
        from . import _invoke
        from ._results import ResultError

        outcome = answer.outcome or {}
        failed = _invoke.Outcome(
            False,
            error=ResultError.MALFORMED,
            message=f"{answer.text} returned a value that is not plain data (JSON-like), "
            "so it cannot leave the sandbox",
            captured=outcome.get("captured") if isinstance(outcome, dict) else None,
        )
        data = msgspec.msgpack.encode(
            Answer("done", answer.text, msgspec.to_builtins(failed), answer.keep)
        )
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        data = os.read(fd, size - len(chunks))
        if not data:
            return None
        chunks += data
    return bytes(chunks)


def _receive(fd: int) -> bytes | None:
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    return _read_exactly(fd, _HEADER.unpack(header)[0])


def _tasks() -> set[int]:
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def _children() -> set[int]:
    found: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children", encoding="ascii") as listing:
                found.update(int(pid) for pid in listing.read().split())
        except OSError:
            continue  # the thread ended meanwhile
    return found


def _reap() -> None:
    """Collect the exit status of children that ended (adopted orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _leftovers(baseline: set[int]) -> tuple[int, int]:
    """Threads and processes of the call still running once it returned, after a grace."""
    deadline = time.monotonic() + _LEFTOVER_GRACE
    while True:
        _reap()
        threads, children = len(_tasks() - baseline), len(_children())
        if not (threads or children) or time.monotonic() >= deadline:
            return threads, children
        time.sleep(0.01)


def _idle_pool_threads() -> set[int]:
    """Native ids of the threads idle in trio's thread cache (if trio ran here)."""
    cache = sys.modules.get("trio._core._thread_cache")
    if cache is None:
        return set()
    try:
        workers = list(cache.THREAD_CACHE._idle_workers)
        return {w._thread.native_id for w in workers if w._thread.native_id is not None}
    except (AttributeError, TypeError):
        return set()  # another trio release: its idle threads count as left running


def _wipe(folder: str, keep: str | None) -> None:
    """Empty the worker's folder between calls (all but its own scratch parent)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.path == keep:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass


def main() -> None:
    folder, parent = sys.argv[1], int(sys.argv[2])
    limits, hidden = SandboxLimits(**json.loads(sys.argv[3])), json.loads(sys.argv[4])
    requests, answers = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    init = _receive(requests)
    if init is None:
        return
    sys.path[:] = pickle.loads(init)
    try:
        confine(folder, limits, hidden)
    except Exception as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _send(answers, Answer("refused", why))
        return
    # Everything from here on runs confined: importing only reads. What a call needs is
    # imported now, before the worker says it is ready, not on its first call.
    from . import _context, _invoke, _readonly, _results  # noqa: F401

    _readonly.guard_process()
    _context.die_with_parent(parent)
    baseline = _tasks()
    environment = dict(os.environ)
    _send(answers, Answer("ready", str(os.getpid())))
    while (frame := _receive(requests)) is not None:
        name, outcome, keep = _call(frame, baseline, limits)
        with _readonly.unguarded():
            if os.environ != environment:  # only the call's C code can have changed it
                os.environ.clear()
                os.environ.update(environment)
            parent_folder = _context._parent.path if _context._parent is not None else None
            _wipe(folder, parent_folder)
            os.chdir(folder)  # where the call found it (its chdir is refused if guarded)
        _send(answers, Answer("done", name, _plain(outcome), keep))
        if not keep:
            return


def _plain(outcome: Any) -> Any:
    """An outcome as MessagePack can carry it; a value it cannot is sent as it is, and
    :func:`_send` turns it into the call's failure."""
    return {f: getattr(outcome, f) for f in outcome.__struct_fields__}


def _call(frame: bytes, baseline: set[int], limits: SandboxLimits) -> tuple[str, Any, bool]:
    from . import _invoke, _readonly
    from ._results import ResultError

    request: _invoke.SandboxRequest = pickle.loads(frame)
    before = _fingerprint(request)
    outcome, reader = _invoke.run_captured(functools.partial(_invoke.sandbox_outcome, request))
    if reader is not None and reader.native_id is not None:
        # The capture's reader may outlive the call while a process the call started
        # holds the output open: that process is what counts, not the reader.
        baseline = baseline | {reader.native_id}
    pooled = _idle_pool_threads()
    threads, children = _leftovers(baseline | pooled)
    # Trio keeps the threads of `to_thread` idle for a while after its loop ended: no code
    # of the call runs there, and they would serve the next call's loop. Not the call's
    # fault, but no thread outlives the worker's call: the worker is not reused.
    keep = not pooled
    name = request.name
    attempted = _readonly.late()
    if attempted is not None and (outcome.ok or outcome.error != ResultError.READ_ONLY_VIOLATION):
        keep = False
        outcome = _violation(
            outcome,
            f"{name} left code running that, after the call returned, attempted: {attempted}",
        )
    if threads or children:
        keep = False
        if outcome.ok or outcome.error != ResultError.READ_ONLY_VIOLATION:
            left = []
            if threads:
                left.append(f"{threads} thread{'s' * (threads != 1)}")
            if children:
                left.append(f"{children} process{'es' * (children != 1)}")
            outcome = _violation(
                outcome,
                f"{name} left {' and '.join(left)} running after it returned "
                "(a sandboxed call must end everything it starts)",
            )
    else:
        _readonly.release_process()
    if outcome.ok and _fingerprint(request) != before:
        outcome = _violation(
            outcome,
            f"{name} changed its own arguments or artifact (it gets a copy, but a "
            "read-only call must not change what it judges)",
        )
    used = sum(os.times()[:4])
    if used > limits.cpu_seconds / 2:
        keep = False  # the next call could run out of CPU seconds midway: a fresh worker
    return name, outcome, keep


def _violation(outcome: Any, message: str) -> Any:
    """The call's outcome made a read-only violation, keeping what it printed."""
    from . import _invoke
    from ._results import ResultError

    return _invoke.Outcome(
        False, error=ResultError.READ_ONLY_VIOLATION, message=message, captured=outcome.captured
    )


def _fingerprint(request: Any) -> bytes | None:
    """What the call was given (arguments, artifact, inputs), to tell whether it changed it."""
    try:
        return pickle.dumps(
            (request.arguments, request.artifact, request.inputs),
            protocol=pickle.HIGHEST_PROTOCOL,
        )
    except Exception:
        return None  # what cannot be pickled again cannot be compared: not judged


if __name__ == "__main__":  # pragma: no cover - started as a script by the pool
    main()
