"""The worker process of ``isolation: sandbox``: confined by the kernel, one call at a time.

Started by :mod:`._sandbox` as ``python -P -c "...main()" <folder> <parent pid> <limits>``
(the limits as JSON) with its requests on descriptor 0 and its answers on descriptor 1
(moved out of the way at once: the call's own output is captured, never mixed with them).
It imports gategraph's own modules, then waits, a spare, for its first request: what it is
for. It confines itself (:func:`.._base._kernel.confine`) to that before it imports any of the
call's code, says ``ready``, then runs calls until its requests end.

A worker serves one validation. It loads the validation's code once, before any call, and
runs no call itself: it forks a child per plan, which runs that plan's calls one after
another and answers each through the worker. What a call leaves in its process (a
module's state, a patched function, an answer of its own written into its pipe) can then
only reach that validation's later calls in that plan, which it decides anyway; the next
plan's child starts from the worker as it was. A child that left a thread running (or
spent half its CPU seconds) ends after its answer, and the plan's next call gets a fresh
one. A fork costs about a millisecond; loading the code again would cost its import.

A frame is a 4-byte big-endian length and its bytes. The first request is the parent's
``sys.path``, the databases to hide, the folders the worker may change and those it gets
a view of (the worker says ``spare`` before it reads it), then each is a
:class:`._call.SandboxRequest`: pickles, the parent's to write and the worker's to read.
Answers are :class:`Answer` in MessagePack, never pickles: the parent must not run what
they contain, and the worker reads its child's answers the same way before it passes them
on. ``ready`` (or ``refused``, why)
once, then ``done`` per call, with ``keep`` False when the worker must not run another
call (a call left a process running, which the worker cannot end without ending itself).

The worker starts no thread (a fork must not copy one midway): it watches gategraph's
process on a pidfd while it waits, and ends its process group when gategraph is gone.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import select
import shutil
import signal
import struct
import sys
import time
from typing import Any, Final

import msgspec
from gategraph.runtime._base._kernel import (
    SandboxLimits,
    SharedFolderError,
    close_inherited,
    confine,
)

_HEADER: Final = struct.Struct(">I")
_LEFTOVER_GRACE: Final = 0.5
"""Seconds a call's threads and processes get to end once it returned."""
_CLEARING_ROUNDS: Final = 50
"""Times the worker kills what earlier calls left running before it gives up."""
_SPARE_AFTER_MS: Final = 20
"""Milliseconds without a request after which a worker forks its next plan's child."""
MAX_ANSWER: Final = 64 << 20
"""The largest answer read from a call or a worker, in bytes (results are far smaller: a
longer one is a call writing into its channel)."""
_ANSWER: Final = msgspec.msgpack.Decoder()


class Answer(msgspec.Struct, array_like=True):
    """What a sandboxed worker says: ``spare`` (started, not yet confined), ``ready``,
    ``refused``, ``unusable`` (a folder it was to change cannot be given to it) or
    ``done``."""

    kind: str
    text: str = ""
    outcome: Any = None
    """A ``done`` call's :class:`._call.Outcome` as plain data."""
    keep: bool = False


def _send(fd: int, answer: Answer, trailer: bytes = b"") -> None:
    try:
        data = msgspec.msgpack.encode(answer)
    except BaseException as exc:
        # A value that is not plain data (or nested past any sense) cannot leave the
        # sandbox as it is; one whose own methods raise while it is encoded (a tzinfo's
        # `utcoffset`), KeyboardInterrupt included, is as malformed: no person's Ctrl-C
        # reaches a worker, which runs in a session of its own.
        from gategraph.runtime._data._results import ResultError, _exception_text

        from . import _call

        why = (
            "is not plain data (JSON-like)"
            if isinstance(exc, TypeError | ValueError | OverflowError | RecursionError)
            else f"raised {_exception_text(exc)} while it was read"
        )
        outcome = answer.outcome or {}
        failed = _call.Outcome(
            False,
            error=ResultError.MALFORMED,
            message=f"{answer.text} returned a value that {why}, so it cannot leave the sandbox",
            captured=outcome.get("captured") if isinstance(outcome, dict) else None,
        )
        data = msgspec.msgpack.encode(
            Answer("done", answer.text, msgspec.to_builtins(failed), answer.keep)
        )
    view = memoryview(_HEADER.pack(len(data)) + data + trailer)
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


_ECHO: Final = b"\xee"
"""The byte a child echoes once it has answered: never the first byte of an answer, whose
4-byte length is at most :data:`MAX_ANSWER`."""


def _echoed(child: _Child, grace: float) -> bool:
    """Wait up to ``grace`` seconds for the child to echo the byte sent behind its request
    (read only once it has answered): False where it ended, did not echo in time or echoed
    something else."""
    poller = select.poll()
    for watched in (child.answers, child.exited):
        poller.register(watched, select.POLLIN)
    ready = {found for found, _ in poller.poll(int(grace * 1000))}
    if child.answers not in ready:
        return False
    try:
        return os.read(child.answers, 1) == _ECHO
    except BlockingIOError:
        return False


def _census(pid: int) -> tuple[int, int]:
    """How many threads process ``pid`` runs, and how many children it has (each thread's
    listed only where it runs more than one: a file read per thread)."""
    with open(f"/proc/{pid}/stat", "rb") as status:
        # Field 20, counted after the command's closing parenthesis (it may hold spaces).
        threads = int(status.read().rpartition(b")")[2].split()[17])
    if threads != 1:
        return threads, len(_children(pid))
    with open(f"/proc/{pid}/task/{pid}/children", "rb") as listing:
        return 1, len(listing.read().split())


def _tasks(pid: int | str = "self") -> set[int]:
    return {int(tid) for tid in os.listdir(f"/proc/{pid}/task")}


def _children(pid: int | str = "self") -> set[int]:
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as listing:
                found.update(int(child) for child in listing.read().split())
        except OSError:
            continue  # the thread ended meanwhile
    return found


def _reap() -> bool:
    """Collect the exit status of children that ended (adopted orphans included); return
    whether any child is still running."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _leftovers(baseline: set[int]) -> tuple[int, int]:
    """Threads and processes of the call still running once it returned, after a grace."""
    deadline = time.monotonic() + _LEFTOVER_GRACE
    while True:
        # Children listed only where one runs: most calls leave none, and the listing
        # reads a file per thread.
        children = len(_children()) if _reap() else 0
        threads = len(_tasks() - baseline)
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


_spared: Final[set[str]] = set()
"""What :func:`_wipe` leaves: the worker's views and their layers (mounts it cannot make
again; a worker with views runs one call)."""


def _wipe(folder: str, keep: str | None) -> None:
    """Empty the worker's folder between calls (all but its own scratch parent)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.path == keep or entry.path in _spared:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass


def main() -> None:
    close_inherited()  # before anything of the worker's own is opened
    folder, parent = sys.argv[1], int(sys.argv[2])
    limits = SandboxLimits(**json.loads(sys.argv[3]))
    requests, answers = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    watched = os.pidfd_open(parent)  # Linux 5.3: the sandbox needs 6.12
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)  # gategraph died before this worker started: no one waits
    # Forked before the worker confines itself: outside its Landlock domain, where no call
    # (and no code the worker loads) can signal or trace it.
    sentinel = _sentinel(watched, (requests, answers))
    os.close(watched)
    # A spare until its first frame: what a call needs is imported now, while the pool
    # keeps it for whichever call comes first, whatever folders that call is given (a
    # worker's start is most of its cost: a work tool's worker or a test suite's with
    # views need not wait for one). Only gategraph's own modules and the libraries they
    # use, found as this one was (the interpreter's own path and PYTHONPATH, not the
    # parent's path): no code a plan names is loaded unconfined.
    from gategraph.runtime._data import _results  # noqa: F401

    from . import _context, _readonly

    _send(answers, Answer("spare", str(os.getpid())))
    init = _receive(requests)
    if init is None:
        return
    # The parent's path, and what this worker is for: the databases it hides, the folders
    # it may change, those it gets a view of.
    path, hidden, shared, views = pickle.loads(init)
    sys.path[:] = path
    try:
        made = confine(folder, limits, hidden, shared, views)
    except SharedFolderError as exc:
        _send(answers, Answer("unusable", exc.strerror or str(exc)))
        return
    except Exception as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _send(answers, Answer("refused", why))
        return
    # Everything from here on runs confined: importing only reads.
    _context.set_views({folder: [view.path for view in views] for folder, views in made.items()})
    if made:
        _spared.update(os.path.join(folder, name) for name in ("layers", "views"))
    _readonly.guard_process()
    worker = _Worker(folder, limits, (requests, answers), sentinel)
    _send(answers, Answer("ready", str(os.getpid())))
    try:
        while (frame := _receive(requests)) is not None:
            answer = worker.serve(frame)
            del frame  # nothing of a plan's request stays in the worker
            if answer.keep and made:
                # A view keeps what the call wrote, and what the overlay saw of the folder
                # (changed by the plan's next round): the next call must see the folder as
                # it is then, so a fresh worker, with fresh views, runs it.
                answer = Answer(answer.kind, answer.text, answer.outcome, keep=False)
            _send(answers, answer)
            if not answer.keep:
                return
            worker.idle(requests)
    finally:
        worker.end_children()


def _sentinel(watched: int, own: tuple[int, ...]) -> int:
    """Fork the worker's watch on gategraph: a process that waits for gategraph (its pidfd,
    ``watched``) or the worker to end, and in the first case ends the worker's process
    group. A process, not a thread: the worker forks, and a fork must not copy a thread;
    and whatever the worker is busy with (loading the validation's code, waiting for a
    call), the watch goes on."""
    pid = os.fork()
    if pid:
        return pid
    try:  # pragma: no cover - in the sentinel, which never returns
        for fd in own:
            os.close(fd)
        worker = os.pidfd_open(os.getppid())
        poller = select.poll()
        poller.register(watched, select.POLLIN)
        poller.register(worker, select.POLLIN)
        while True:
            ready = {found for found, _ in poller.poll()}
            if watched in ready:
                os.killpg(0, signal.SIGKILL)  # gategraph is gone: no one waits for answers
            if worker in ready:
                break
    finally:
        os._exit(0)


class _Child:
    """A child of the worker, running one plan's calls."""

    __slots__ = ("answers", "exited", "output", "pid", "plan", "requests")

    def __init__(self, pid: int, requests: int, answers: int, output: tuple[int, int]) -> None:
        self.pid = pid
        self.plan: str | None = None
        """The plan whose calls it runs (None for a spare, not yet given one)."""
        self.requests = requests
        self.answers = answers
        self.output = output
        """The read ends of its descriptors 1 and 2: the worker drains them during each
        call, so the child captures its calls' output with no thread of its own."""
        self.exited = os.pidfd_open(pid)

    def fds(self) -> tuple[int, ...]:
        return self.requests, self.answers, self.exited, *self.output

    def ended(self) -> bool:
        poller = select.poll()
        poller.register(self.exited, select.POLLIN)
        return bool(poller.poll(0))


class _Worker:
    """The worker's side of its calls: the validation's code, loaded once, and a child
    per plan that runs its calls. It trusts nothing a child says about itself: what a
    child left running, it sees for itself."""

    def __init__(
        self, folder: str, limits: SandboxLimits, own: tuple[int, int], sentinel: int
    ) -> None:
        self.folder = folder
        self.limits = limits
        self.own = own
        """The worker's requests and answers: closed in its children."""
        self.sentinel = sentinel
        self.loaded: Any = None
        self.key: tuple[str, str | None, str | None, bool, bool] | None = None
        self.child: _Child | None = None
        self.spare: _Child | None = None
        """A child forked ahead, while the worker waited, for the next plan."""
        self.unfit = False
        """Processes of an earlier call it could not end: it runs no more calls."""
        self.environment = dict(os.environ)

    def serve(self, frame: bytes) -> Answer:
        from . import _call

        request = pickle.loads(frame)
        name = request.name
        if self.unfit:
            return _replaced(name)
        key = (name, request.entrypoint, request.code, request.guarded, request.network)
        if self.key != key:
            # The pool sends a worker one validation's calls only; another's is loaded
            # in place of the first all the same (a call never runs another's code).
            if not self.end_children():
                return _replaced(name)
            self.key = key
            refused = self._load(request)
            if refused is not None:
                return Answer("done", name, _plain(refused), keep=False)
        if self.child is None or self.child.plan != request.plan:
            if self.child is not None:
                self._end(self.child)
                _wipe(self.folder, None)  # nothing of the last plan's files for the next
            if not self._clear_strays():
                return _replaced(name)
            if self.spare is not None and self.spare.ended():
                self._end(self.spare)  # killed while it waited: not this call's doing
            self.child, self.spare = self.spare or self._fork(), None
            self.child.plan = request.plan
        child = self.child
        del request
        tails = _call.OutputTails()
        try:
            # The echo byte rides behind the request: the child reads it once it has
            # answered, and sends it back behind its answer (no round trip after it).
            _write_all(child.requests, _HEADER.pack(len(frame)) + frame + _ECHO)
        except BrokenPipeError:
            pass  # it ended: before the request, or (answering keep=False) before the echo
        data = self._answer_of(child, tails)
        answer = _decoded(name, data)
        if answer is not None and answer.keep:
            answer = self._checked(name, child, answer)
        if answer is None or not answer.keep:
            code, ran_on = self._end(child, grace=True)
            if answer is None:
                answer = _died(name, code, ran_on)
        outcome = answer.outcome
        outcome["captured"] = tails.result()
        if self.child is not child and self._strays():  # it ended: what did it leave?
            return self._left(name, outcome)
        return Answer("done", name, outcome, keep=True)

    def _checked(self, name: str, child: _Child, answer: Answer) -> Answer:
        """The answer of a child that says it can run its plan's next call, once the
        worker saw for itself that no thread or process of the call is left in it (the
        child's own account is the call's to forge)."""
        from . import _call

        deadline = time.monotonic() + _LEFTOVER_GRACE
        # The child, once its call has returned, reads the byte sent behind its request
        # and echoes it behind its answer: a call that wrote an answer itself and went on
        # (to start a thread or a process, say) does not. Without the echo the child runs no more calls (an echo that came late
        # would be read as the next answer), and what it left running is judged now.
        echoed = _echoed(child, _LEFTOVER_GRACE)
        pause = 0.00005
        while True:
            try:
                threads, children = _census(child.pid)
                threads -= 1
            except OSError:
                return Answer("done", name, answer.outcome, keep=False)  # it ended
            if not (threads or children) or time.monotonic() >= deadline:
                break
            time.sleep(pause)  # an ending thread, still listed for a moment
            pause = min(pause * 2, 0.005)
        if not (threads or children):
            return answer if echoed else Answer("done", name, answer.outcome, keep=False)
        outcome = msgspec.convert(answer.outcome, _call.Outcome)
        return Answer("done", name, _plain(_left_running(outcome, name, threads, children)))

    def idle(self, requests: int) -> None:
        """Between calls, once no request came for a moment (not between the calls of a
        busy run, where it would only take a core): end the plan's child, so that what it
        might have left running comes to light (the worker then ends, and with it all of
        it), and fork the next plan's child ahead."""
        if self.key is None:
            return
        poller = select.poll()
        poller.register(requests, select.POLLIN)
        if poller.poll(_SPARE_AFTER_MS):
            return
        if self.child is not None:
            self._end(self.child)
            _wipe(self.folder, None)
        if not self._clear_strays():
            self.unfit = True  # its next call is answered so, and the pool replaces it
            return
        if self.spare is None:
            self.spare = self._fork()

    def _clear_strays(self) -> bool:
        """Kill the processes earlier calls left running (the worker adopts them all: a
        process of a call cannot leave its group), until none is left; False where they
        start more than it ends."""
        for _ in range(_CLEARING_ROUNDS):
            strays = self._strays()
            if not strays:
                return True
            for pid in strays:
                os.kill(pid, signal.SIGKILL)
            for pid in strays:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass  # collected meanwhile
        return not self._strays()

    def _strays(self) -> set[int]:
        """Processes of earlier calls still running (adopted by the worker); those that
        ended are collected."""
        known = {self.sentinel} | {c.pid for c in (self.child, self.spare) if c is not None}
        found = set()
        for pid in _children() - known:
            try:
                ended, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # collected meanwhile
            if not ended:
                found.add(pid)
        return found

    def _left(self, name: str, outcome: Any) -> Answer:
        """The answer when a call left processes running: the call fails for it, and the
        worker goes (with its process group, all of them)."""
        from . import _call

        call = msgspec.convert(outcome, _call.Outcome)
        left = _left_running(call, name, 0, len(self._strays()))
        return Answer("done", name, _plain(left), keep=False)

    def _load(self, request: Any) -> Any:
        """Load the validation's code into the worker, once, as its call would (under a
        guard of its own for a validation): ``None`` when loaded, or when its load failed
        (each call then loads it again and fails with the reason), else the call's
        outcome when loading attempted what a validation may not (a write, the network
        undeclared) or left threads or processes running (a fork cannot copy threads)."""
        from . import _call, _readonly
        from ._readonly import Guard

        self.loaded = None
        _call.sandbox_network(request)  # the kernel holds its code to its declaration
        if request.entrypoint is None and request.code is None:
            return None  # a transform's only: made in each call
        baseline = _tasks()
        guard = (
            Guard(f"sandboxed validation {request.name!r}", network=request.network)
            if request.guarded
            else None
        )
        state = _readonly.enter_process(guard) if guard is not None else None
        try:
            loaded = _call._load(request.name, request.entrypoint, request.code)
        except BaseException:
            loaded = None  # each call loads it again, and says why it fails
        finally:
            if state is not None:
                _readonly.leave(state)
        # Not `_leftovers`: the worker's sentinel is a child of its own, not the load's.
        deadline = time.monotonic() + _LEFTOVER_GRACE
        while (threads := len(_tasks() - baseline)) or self._strays():
            if time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if threads or self._strays():
            return _violation(
                _call.Outcome(False),
                f"{request.name} left threads or processes running when its code was "
                "loaded (a sandboxed call must end everything it starts)",
            )
        _readonly.release_process()
        for stream in (sys.stdout, sys.stderr):
            # What its top level printed goes where the worker's own output goes (nowhere),
            # now: left in a buffer, every plan's child would flush it into its first call.
            with contextlib.suppress(Exception):
                stream.flush()
        if guard is not None and guard.violation is not None:
            # Its top level attempted what a validation may not: every call fails so (the
            # pool replaces the worker), never a load again in the child, unguarded.
            return _call._violation(guard)
        self.loaded = loaded
        if os.environ != self.environment:  # only native code of the load can have
            os.environ.clear()
            os.environ.update(self.environment)
        return None

    def _fork(self) -> _Child:
        requests_read, requests_write = os.pipe()
        answers_read, answers_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - measured in the child, which never returns
            code = 0
            try:
                # Nothing of the worker's channels, or of another child's, stays open here.
                others = [c.fds() for c in (self.child, self.spare) if c is not None]
                for fd in (*self.own, requests_write, answers_read, *sum(others, ())):
                    os.close(fd)
                os.dup2(stdout_write, 1)
                os.dup2(stderr_write, 2)
                for fd in (stdout_read, stdout_write, stderr_read, stderr_write):
                    os.close(fd)
                _serve_plan(self, requests_read, answers_write)
            except BaseException:
                code = 70
            finally:
                os._exit(code)
        for fd in (requests_read, answers_write, stdout_write, stderr_write):
            os.close(fd)
        for fd in (stdout_read, stderr_read):
            os.set_blocking(fd, False)
        return _Child(pid, requests_write, answers_read, (stdout_read, stderr_read))

    def _answer_of(self, child: _Child, tails: Any) -> bytes | None:
        """Read one answer frame from the child, while watching it end and keeping what
        its call writes (into ``tails``, an :class:`._call.OutputTails`)."""
        fd = child.answers
        os.set_blocking(fd, False)
        poller = select.poll()
        for watched in (fd, child.exited, *child.output):
            poller.register(watched, select.POLLIN)
        try:
            return self._frame_of(child, poller, tails)
        finally:
            # All the call wrote before its answer (or its end) is in the pipes by now.
            _drain(child.output, tails, poller)

    def _frame_of(self, child: _Child, poller: select.poll, tails: Any) -> bytes | None:
        fd = child.answers
        data = bytearray()
        need = _HEADER.size
        while True:
            ready = {found for found, _ in poller.poll()}
            if ready & set(child.output):
                _drain(child.output, tails, poller)
            while len(data) < need:
                try:
                    chunk = os.read(fd, need - len(data))
                except BlockingIOError:
                    break
                if not chunk:
                    return None  # it ended (or closed its answers) before a whole answer
                data += chunk
            if len(data) == need:
                if need > _HEADER.size:
                    return bytes(data[_HEADER.size :])
                size = _HEADER.unpack(bytes(data))[0]
                if size > MAX_ANSWER:
                    return bytes(data)  # no answer: judged as one that cannot be read
                need += size
                if size:
                    continue
                return b""
            if child.exited in ready:
                return None  # it ended without a whole answer

    def _end(self, child: _Child, *, grace: bool = False) -> tuple[int, bool]:
        """End a child and collect it: an idle one (a plan's between calls, a spare) is
        killed at once; with ``grace`` (it just answered that it ends, or gave no
        answer), it gets the grace to end by itself first. Its exit code, and whether it
        ran on past the grace."""
        ran_on = grace and not self._ending(child)
        if not child.ended():
            os.kill(child.pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(child.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            code = -signal.SIGKILL  # collected already
        for fd in child.fds():
            os.close(fd)
        if child is self.child:
            self.child = None
        if child is self.spare:
            self.spare = None
        return code, ran_on

    def _ending(self, child: _Child) -> bool:
        """Whether a child that is to end does so within the grace."""
        poller = select.poll()
        poller.register(child.exited, select.POLLIN)
        return bool(poller.poll(int(_LEFTOVER_GRACE * 1000)))

    def end_children(self) -> bool:
        """End the children, if any, and empty the folder: whether no process of the
        calls is left (what is left is in the worker's process group; ending the
        worker's group ends it)."""
        for child in (self.child, self.spare):
            if child is not None:
                self._end(child)
        _wipe(self.folder, None)
        return self._clear_strays()


def _drain(output: tuple[int, int], tails: Any, poller: select.poll) -> None:
    """Keep what a child wrote to its descriptors 1 and 2 so far (non-blocking ends); an
    end that closed (the call closed its descriptor) is watched no more."""
    for index, fd in enumerate(output):
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                with contextlib.suppress(KeyError, ValueError):
                    poller.unregister(fd)
                break
            tails.add(index, chunk)


def _replaced(name: str) -> Answer:
    """The answer to a call that finds processes of an earlier one still running (started
    after that call was judged): not its fault; the worker goes, with them."""
    return _unavailable(
        name,
        f"the sandboxed worker for {name} found processes an earlier call left running, "
        "and must be replaced",
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _decoded(name: str, data: bytes | None) -> Answer | None:
    """A child's answer as the worker passes it on; None where it gave none."""
    from gategraph.runtime._data._results import ResultError

    from . import _call

    if data is None:
        return None
    try:
        answer = msgspec.convert(_ANSWER.decode(data), Answer)
        if answer.kind != "done":
            raise ValueError(f"an answer of kind {answer.kind!r}")
        msgspec.convert(answer.outcome, _call.Outcome)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        garbled = _call.Outcome(
            False,
            error=ResultError.MALFORMED,
            message=f"{name} wrote into its sandbox's answer channel ({exc})",
        )
        return Answer("done", name, _plain(garbled), keep=False)
    return answer


def _died(name: str, code: int, ran_on: bool) -> Answer:
    """The answer for a call whose process died."""
    why = "it closed its answers and ran on" if ran_on else death(code)
    return _unavailable(name, f"the sandboxed process running {name} died during the call: {why}")


def _unavailable(name: str, message: str) -> Answer:
    """An infrastructure fault of that call (``unavailable``), and the worker goes."""
    from gategraph.runtime._data._maxn import UNAVAILABLE  # pydantic: only for this rare case

    from . import _call

    outcome = _call.Outcome(False, error=UNAVAILABLE, message=message)
    return Answer("done", name, _plain(outcome), keep=False)


def _serve_plan(worker: _Worker, requests: int, answers: int) -> None:  # pragma: no cover
    """A child's life (measured in the child): run the plan's calls one after another
    until its requests end or a call makes it unfit for the next."""
    from gategraph.runtime._base._kernel import _PR_SET_CHILD_SUBREAPER, _prctl

    from . import _context, _readonly

    # The call's orphans come to this process, so it sees what a call left.
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    # Its one thread: any other (one a fork hook of the validation's code started) is the
    # call's, and left running.
    baseline = {os.getpid()}
    environment = dict(os.environ)
    # Descriptors 1 and 2 are pipes its worker drains (each call's streams write there).
    _OUTPUT[:] = os.dup(1), os.dup(2)

    def tidy() -> None:
        with _readonly.unguarded():
            if os.environ != environment:  # only the call's C code can have changed it
                os.environ.clear()
                os.environ.update(environment)
            parent_folder = _context._parent.path if _context._parent is not None else None
            _wipe(worker.folder, parent_folder)
            os.chdir(worker.folder)  # where the call found it (its chdir is refused if guarded)

    while (frame := _receive(requests)) is not None:
        name, outcome, keep = _call(pickle.loads(frame), baseline, worker)
        if not keep:
            tidy()
            _send(answers, Answer("done", name, _plain(outcome), keep))
            return
        # Its worker's byte, sent behind the request, read now and echoed behind the
        # answer: the sign that the call is over (_Worker._checked). Tidied after it,
        # while the answer travels on; before the next request is read.
        if _read_exactly(requests, 1) is None:
            return
        _send(answers, Answer("done", name, _plain(outcome), keep), _ECHO)
        tidy()


def death(code: int) -> str:
    """Why a process ended, from its exit code (a negated signal number if killed)."""
    if code >= 0:
        return f"it exited with status {code}"
    try:
        signame = signal.Signals(-code).name
    except ValueError:
        signame = f"signal {-code}"
    why = {
        "SIGKILL": " (killed: out of memory, or from outside)",
        "SIGXCPU": " (out of CPU seconds)",
        "SIGXFSZ": " (a file grew past its size limit)",
        "SIGSYS": " (a system call of another architecture)",
    }.get(signame, "")
    return f"it was killed by {signame}{why}"


def _plain(outcome: Any) -> Any:
    """An outcome as MessagePack can carry it; a value it cannot is sent as it is, and
    :func:`_send` turns it into the call's failure."""
    return {f: getattr(outcome, f) for f in outcome.__struct_fields__}


def _call(request: Any, baseline: set[int], worker: _Worker) -> tuple[str, Any, bool]:
    """Run one call (in the plan's child) and judge what it left: threads, processes,
    attempts after it returned, changes to what it was given; and whether the child may
    run the plan's next call."""
    from gategraph.runtime._data._results import ResultError

    from . import _call, _readonly
    from ._frozen import changed, fingerprint

    # A work tool's copies are its own to change (it hands back what it changed).
    before = fingerprint(_given(request)) if request.guarded else None
    # Its output goes to descriptors 1 and 2, which its worker drains: no thread here.
    outcome = _streamed(functools.partial(_call.sandbox_outcome, request, worker.loaded))
    pooled = _idle_pool_threads()
    threads, children = _leftovers(baseline | pooled)
    # Trio keeps the threads of `to_thread` idle for a while after its loop ended: no code
    # of the call runs there, and they would serve the next call's loop. Not the call's
    # fault, but no thread outlives the call: the plan's next call gets a fresh child.
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
        outcome = _left_running(outcome, name, threads, children)
    else:
        _readonly.release_process()
    if request.guarded and outcome.ok and changed(_given(request), before):
        outcome = _call.changed_what_it_judges(name, outcome)
    used = sum(os.times()[:2])
    if used > worker.limits.cpu_seconds / 2:
        keep = False  # the next call could run out of CPU seconds midway: a fresh child
    return name, outcome, keep


def _streamed(call: Any) -> Any:
    """Run a call whose output its worker captures (from the child's descriptors 1 and 2),
    on streams of its own (written through, undecodable text replaced, never refused);
    then flush every stream it may have written to and give the child back its own:
    descriptors 1 and 2 as they were (a call may have closed or replaced them), and the
    streams."""
    saved = sys.stdout, sys.stderr
    own = (
        open(1, "w", 1, "utf-8", "replace", closefd=False),
        open(2, "w", 1, "utf-8", "replace", closefd=False),
    )
    sys.stdout, sys.stderr = own
    try:
        return call()
    finally:
        for stream in (sys.stdout, sys.stderr, *own, *saved):
            try:
                stream.flush()
            except BaseException:
                pass  # a stream the call broke: what it held is lost, nothing else
        sys.stdout, sys.stderr = saved
        for fd, kept in enumerate(_OUTPUT, 1):
            os.dup2(kept, fd)


_OUTPUT: list[int] = []
"""A sandboxed child's own descriptors 1 and 2 (duplicates, put back after each call)."""


def _left_running(outcome: Any, name: str, threads: int, processes: int) -> Any:
    """The call's outcome once it is known to have left threads or processes running: a
    read-only violation, unless it already was one (its first reason is kept)."""
    from gategraph.runtime._data._results import ResultError

    if not outcome.ok and outcome.error == ResultError.READ_ONLY_VIOLATION:
        return outcome
    left = []
    if threads:
        left.append(f"{threads} thread{'s' * (threads != 1)}")
    if processes:
        left.append(f"{processes} process{'es' * (processes != 1)}")
    return _violation(
        outcome,
        f"{name} left {' and '.join(left)} running after it returned "
        "(a sandboxed call must end everything it starts)",
    )


def _violation(outcome: Any, message: str) -> Any:
    """The call's outcome made a read-only violation, keeping what it printed."""
    from gategraph.runtime._data._results import ResultError

    from . import _call

    return _call.Outcome(
        False, error=ResultError.READ_ONLY_VIOLATION, message=message, captured=outcome.captured
    )


def _given(request: Any) -> tuple[Any, Any, Any]:
    """What the call was given (arguments, artifact, inputs), to tell whether it changed it."""
    return request.arguments, request.artifact, request.inputs


if __name__ == "__main__":  # pragma: no cover - started as a script by the pool
    main()
