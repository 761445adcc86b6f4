"""The sandboxed worker's own side, driven frame by frame: ``_sandbox_worker`` and ``_kernel``.

Each test starts a real worker as the pool does (``python -P -c ...`` with the folder, the
parent's pid and the limits as arguments, the environment scrubbed, descriptor 0 its
requests and 1 its answers) and talks to it in its own frames. The worker confines itself
with the real kernel calls (Landlock, seccomp, limits): nothing here is faked but two ways
of making confinement fail, and those are said where they are used.

The worker's code is measured although it runs confined. Under coverage, the worker's
bootstrap starts a coverage of its own (in memory: the project's data file is outside
the worker's folder, which Landlock forbids it to write) and, once the worker's ``main``
returned, sends its data back over one more pipe; the test merges it into the running
coverage. Without coverage (``--no-cov``) that pipe is not even opened.

A forked pytest process would not do: its audit hook is already the in-process guard's
once any guarded call ran, and ``guard_process`` then refuses to start (rightly), so the
worker would die before its first call; and the child would inherit the running
coverage's open data file.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import json
import os
import pickle
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Final

import msgspec
import pytest
from _helpers import write_tree
from coverage import Coverage, CoverageData
from coverage.exceptions import CoverageWarning
from gategraph.runtime._base import _kernel
from gategraph.runtime._base._kernel import SandboxLimits, support
from gategraph.runtime._calls._call import SandboxRequest
from gategraph.runtime._calls._sandbox import _PASSED_ON
from gategraph.runtime._calls._sandbox_worker import _HEADER, Answer

pytestmark = pytest.mark.timeout(120)

_MARK: Final = b"GGCOVERAGE"
"""What starts each coverage hand-off of a worker or of a process it forked."""
_WAIT: Final = 60.0
"""Seconds to wait for one answer (a start under coverage, on a busy machine, is slow)."""
_ANSWER: Final = msgspec.msgpack.Decoder(Answer)

# What the worker process runs: `_sandbox._COMMAND` (import main, call it) with what a
# test needs around it. The coverage hand-off runs once `main` returned, `unguarded()` as
# the worker's own housekeeping is, so that a call's guard (still on where the call left
# something running) does not refuse it; it only writes to a pipe the parent opened.
_BOOT: Final = """
import os
fd = os.environ.pop("GG_TEST_COVERAGE_FD", None)
config = os.environ.pop("GG_TEST_COVERAGE_CONFIG", None)
failure = os.environ.pop("GG_TEST_CONFINE_FAILS", None)
cov = None
def hand_off():
    from gategraph.runtime._calls._readonly import unguarded
    with unguarded():
        data = cov.get_data().dumps()
        view = memoryview(b"GGCOVERAGE" + len(data).to_bytes(8, "big") + data)
        while view:
            view = view[os.write(int(fd), view):]
if fd is not None:
    import coverage
    cov = coverage.Coverage(data_file=None, config_file=":data:" + config)
    cov.start()

    def in_child():
        # A process the worker forks for a plan's calls hands its data off before each
        # answer (it is killed, not ended, once its plan is done): the worker waits for
        # that answer meanwhile, so no two processes write to the pipe at once.
        import tempfile
        from gategraph.runtime._calls import _sandbox_worker
        from gategraph.runtime._calls._readonly import unguarded
        send = _sandbox_worker._send
        def handing_off(target, answer, trailer=b""):
            # The answer made first (into a file), so that making it is measured too.
            with unguarded(), tempfile.TemporaryFile() as made:
                send(made.fileno(), answer, trailer)
                hand_off()
                made.seek(0)
                view = memoryview(made.read())
            while view:
                view = view[os.write(target, view):]
        _sandbox_worker._send = handing_off

    os.register_at_fork(after_in_child=in_child)
try:
    from gategraph.runtime._base import _kernel; from gategraph.runtime._calls import _sandbox_worker
    from gategraph.runtime._calls._sandbox_worker import main
    if fd is not None:
        # The worker closes what it inherited: all but the hand-off's pipe.
        closing = _sandbox_worker.close_inherited
        _sandbox_worker.close_inherited = lambda keep=(): closing((*keep, int(fd)))
    if failure == "no-landlock":
        # Pretend this kernel lacks Landlock: what `support` says on such a machine.
        found = _kernel.support()
        _kernel._support = _kernel.Support(0, found.seccomp, found.arch, "no Landlock here")
    elif failure == "a-thread":
        import threading
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    elif failure == "no-grace":
        # No grace for a child's echo: as a child descheduled past it on a loaded machine.
        from gategraph.runtime._calls import _sandbox_worker
        _sandbox_worker._LEFTOVER_GRACE = 0.0
    main()
finally:
    if cov is not None:
        cov.stop()
        hand_off()
        os.close(int(fd))
"""


def _coverage_config() -> str | None:
    """The running coverage's configuration for the worker, or None without coverage."""
    current = Coverage.current()
    if current is None:
        return None
    config = copy.copy(current.config)
    # The worker measures itself only: it must not set up measuring the processes its
    # calls start (they could not write their data either).
    config.patch = []
    config.disable_warnings = [
        *config.disable_warnings,
        *("module-not-imported", "no-data-collected", "module-not-measured"),
    ]
    return str(config.serialize())


class Worker:
    """A sandboxed worker process, started as the pool starts one."""

    def __init__(
        self,
        folder: Path,
        limits: SandboxLimits,
        *,
        log: Path,
        confine_fails: str | None = None,
        parent: int | None = None,
        hidden: tuple[str, ...] = (),
        shared: tuple[str, ...] = (),
        views: tuple[str, ...] = (),
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.folder = folder
        self.log = log
        self.purpose = (list(hidden), tuple(shared), tuple(views))
        environment = {
            **{k: v for k, v in os.environ.items() if k in _PASSED_ON or k.startswith("LC_")},
            "TMPDIR": str(folder),
            "TMP": str(folder),
            "TEMP": str(folder),
            "XDG_CACHE_HOME": str(folder / ".cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        if confine_fails is not None:
            environment["GG_TEST_CONFINE_FAILS"] = confine_fails
        config = _coverage_config()
        self.coverage: int | None = None
        passed: tuple[int, ...] = ()
        if config is not None:
            self.coverage, write_end = os.pipe()
            passed = (write_end,)
            environment["GG_TEST_COVERAGE_FD"] = str(write_end)
            environment["GG_TEST_COVERAGE_CONFIG"] = config
        limits_text = json.dumps(dataclasses.asdict(limits))
        parent = os.getpid() if parent is None else parent
        command = [
            *(*prefix, sys.executable, "-P", "-c", _BOOT, str(folder), str(parent)),
            limits_text,
        ]
        try:
            with log.open("ab") as stderr:
                self.process = subprocess.Popen(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    cwd=folder,
                    env=environment,
                    start_new_session=True,
                    pass_fds=passed,
                    bufsize=0,
                )
        finally:
            for fd in passed:
                os.close(fd)
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = self.process.stdin
        self.answers = self.process.stdout.fileno()
        self.merged = False
        self.coverage_data = bytearray()
        self.drain: threading.Thread | None = None
        if self.coverage is not None:
            # Read as it comes (each process the worker forks hands off its own data, more
            # than a pipe holds): until every process holding the pipe has ended.
            self.drain = threading.Thread(target=self._drain, args=(self.coverage,))
            self.drain.start()

    # -- frames --------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.requests.write(data)

    def send(self, data: bytes) -> None:
        self.send_raw(_HEADER.pack(len(data)) + data)

    def start(self) -> Answer:
        """Wait for ``spare``, then send the parent's ``sys.path`` and what the worker is
        for (the first frame); return ``ready`` or ``refused``."""
        spare = self.receive()
        assert spare is not None, self.stderr()
        assert spare.kind == "spare" and spare.text == str(self.process.pid), spare
        self.send(pickle.dumps((sys.path, *self.purpose)))
        answer = self.receive()
        assert answer is not None, self.stderr()
        return answer

    def call(self, request: SandboxRequest) -> Answer:
        self.send(pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL))
        answer = self.receive()
        assert answer is not None, f"the worker answered nothing: {self.stderr()}"
        assert answer.kind == "done", answer
        return answer

    def _read(self, size: int, deadline: float) -> bytes:
        data = bytearray()
        while len(data) < size:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.answers], [], [], max(left, 0))
            if not ready:
                raise AssertionError(f"no answer within {_WAIT} s: {self.stderr()}")
            chunk = os.read(self.answers, size - len(data))
            if not chunk:
                break
            data += chunk
        return bytes(data)

    def receive(self) -> Answer | None:
        """The next answer, or None where the worker closed its answers (it ended)."""
        deadline = time.monotonic() + _WAIT
        header = self._read(_HEADER.size, deadline)
        if not header:
            return None
        assert len(header) == _HEADER.size, header
        (size,) = _HEADER.unpack(header)
        body = self._read(size, deadline)
        assert len(body) == size, f"a cut answer: {body!r}"
        return _ANSWER.decode(body)

    # -- ending ----------------------------------------------------------------------------

    def finish(self, wait: float = _WAIT) -> int:
        """End the requests, take the worker's coverage data, and return its exit status."""
        if not self.requests.closed:
            self.requests.close()
        self._merge_coverage(wait)
        return self.process.wait(wait)

    def _drain(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 1 << 20):
                self.coverage_data += chunk
        except OSError:
            pass  # closed by `kill`: nothing more to merge
        finally:
            os.close(fd)

    def _merge_coverage(self, wait: float) -> None:
        if self.drain is None or self.merged:
            return
        self.merged = True
        self.drain.join(wait)
        current = Coverage.current()
        data = bytes(self.coverage_data)
        if current is None:
            return
        with warnings.catch_warnings():
            # Getting the data mid-run makes coverage check what it has not seen yet
            # (a package not imported so far): it says so again at the end of the run.
            warnings.simplefilter("ignore", CoverageWarning)
            collected = current.get_data()
        # Each hand-off starts with a mark: what a hostile call wrote into every pipe it
        # could (this one too) is skipped, and so is a hand-off a kill cut short.
        start = data.find(_MARK)
        while start >= 0:
            body = start + len(_MARK) + 8
            size = int.from_bytes(data[start + len(_MARK) : body], "big")
            measured = CoverageData(no_disk=True)
            try:
                measured.loads(data[body : body + size])
            except Exception:
                start = data.find(_MARK, start + 1)
                continue
            collected.update(measured)
            start = data.find(_MARK, body + size)

    def kill(self) -> None:
        """End the worker and everything it started (its process group), for good."""
        # Whether or not the worker ended: what a call left running outlives it in its
        # group (whose id is not reused while one of its processes lives).
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(_WAIT)
        if not self.requests.closed:
            self.requests.close()
        self.process.stdout.close()  # type: ignore[union-attr]
        if self.drain is not None and not self.merged:
            self.merged = True  # every holder of the pipe is dead: the drain ends
            self.drain.join(_WAIT)

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")


def _group(pgid: int) -> list[int]:
    """The live processes of a process group (zombies are not)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]
        if int(group) == pgid and state != "Z":
            found.append(int(entry))
    return found


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "worker"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture
def open_worker(folder: Path, tmp_path: Path) -> Any:
    """Start workers; every one is ended (its group killed) when the test ends."""
    if support().missing is not None:
        pytest.skip(f"no sandbox here: {support().missing}")
    started: list[Worker] = []

    def start(limits: SandboxLimits | None = None, **kwargs: Any) -> Worker:
        worker = Worker(folder, limits or SandboxLimits(), log=tmp_path / "worker.log", **kwargs)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        try:
            worker.finish(wait=10)  # its coverage data, where the test did not end it
        except (subprocess.TimeoutExpired, OSError):
            pass  # stuck, or its pipes already closed: killed below all the same
        finally:
            worker.kill()


def request(
    code: str,
    *,
    name: str = "check",
    guarded: bool = True,
    backend: str = "asyncio",
    arguments: dict[str, Any] | None = None,
    artifact: Any = None,
    entrypoint: str | None = None,
    plan: str = "",
    transform: tuple[str, str] | None = None,
    resources: dict[str, Any] | None = None,
    writable: tuple[str, ...] = (),
    views: tuple[str, ...] = (),
) -> SandboxRequest:
    return SandboxRequest(
        name=name,
        entrypoint=entrypoint,
        code=None if entrypoint is not None or not code else code,
        slots=tuple(resources or ()),
        arguments=arguments or {},
        resources=resources or {},
        artifact=artifact,
        inputs=None,
        guarded=guarded,
        backend=backend,
        plan=plan,
        result=transform is not None,
        transform=transform,
        writable=writable,
        views=views,
    )


def outcome_of(answer: Answer) -> dict[str, Any]:
    assert isinstance(answer.outcome, dict), answer
    return answer.outcome


PASSES = "def run():\n    return {'passed': True}\n"


# -- a call that passes ----------------------------------------------------------------------


def test_a_worker_confines_itself_says_ready_and_runs_calls_one_after_another(
    open_worker: Any,
) -> None:
    """A worker says ``ready`` with its pid, runs calls, captures their output, is kept."""
    worker = open_worker()
    ready = worker.start()
    assert ready.kind == "ready" and ready.text == str(worker.process.pid)
    code = (
        "def run(n):\n    print('looked at', n)\n    return {'passed': n > 0, 'data': {'n': n}}\n"
    )
    for n in (1, 2):
        answer = worker.call(request(code, arguments={"n": n}))
        outcome = outcome_of(answer)
        assert answer.text == "check" and answer.keep, answer
        assert outcome["ok"] and outcome["value"] == {"passed": True, "data": {"n": n}}
        assert outcome["captured"] == {"stdout": f"looked at {n}\n"}
    assert worker.finish() == 0


_REMEMBERS: Final = """
import os
SEEN = []
LOADED_IN = os.getpid()
def run(artifact):
    SEEN.append(artifact)
    return {"seen": list(SEEN), "loaded_in": LOADED_IN, "pid": os.getpid(),
            "parent": os.getppid()}
"""


def test_each_plan_runs_in_a_process_of_its_own_from_the_loaded_worker(
    open_worker: Any,
) -> None:
    """The worker loads the code once and runs none of it itself: each plan's calls run in
    a child forked from it, so what one plan's calls leave in the module reaches that
    plan's later calls only, never another plan's."""
    worker = open_worker()
    ready = worker.start()
    assert ready.kind == "ready"
    first = outcome_of(worker.call(request(_REMEMBERS, artifact="a1", plan="A")))["value"]
    second = outcome_of(worker.call(request(_REMEMBERS, artifact="a2", plan="A")))["value"]
    other = outcome_of(worker.call(request(_REMEMBERS, artifact="b1", plan="B")))["value"]
    again = outcome_of(worker.call(request(_REMEMBERS, artifact="a3", plan="A")))["value"]
    assert first["seen"] == ["a1"] and second["seen"] == ["a1", "a2"]
    assert other["seen"] == ["b1"]  # plan A's artifacts never reach plan B
    assert again["seen"] == ["a3"]  # nor B's, A's when it comes back
    worker_pid = int(ready.text)
    assert {v["loaded_in"] for v in (first, other, again)} == {worker_pid}
    assert {v["parent"] for v in (first, other, again)} == {worker_pid}
    assert first["pid"] == second["pid"] != other["pid"] != again["pid"] != worker_pid
    assert worker.finish() == 0


def test_a_call_that_patches_its_process_sways_only_its_own_plan(open_worker: Any) -> None:
    """A call that rewrites gategraph's own code in its process (here: every later verdict
    a pass) sways its own plan's later calls, which it decides anyway; another plan's
    calls of the same validation run in a fresh child and fail as they should."""
    code = """
def run(fail=False):
    if fail:
        raise RuntimeError("honestly failing")
    from gategraph.runtime._calls import _call, _sandbox_worker
    def forged(request, baseline, worker):
        return request.name, _call.Outcome(True, {"passed": True}), True
    _sandbox_worker._call = forged
    return {"passed": True}
"""
    fail = {"fail": True}
    worker = open_worker()
    assert worker.start().kind == "ready"
    assert outcome_of(worker.call(request(code, plan="A", guarded=False)))["ok"]
    swayed = outcome_of(worker.call(request(code, plan="A", arguments=fail, guarded=False)))
    assert swayed["ok"], swayed  # its own plan: it decides its verdicts anyway
    honest = outcome_of(worker.call(request(code, plan="B", arguments=fail, guarded=False)))
    assert not honest["ok"] and "honestly failing" in honest["message"], honest
    assert worker.finish() == 0


_FORGES: Final = """
import os, stat, struct, subprocess, time
import msgspec
from gategraph.runtime._calls import _call, _readonly
from gategraph.runtime._calls._sandbox_worker import Answer
def run(later=False):
    _readonly._PROCESS_JUDGES.clear()
    _readonly._process_lease[0] = None
    if not later:
        subprocess.Popen(["sleep", "1000"])  # left running
    outcome = _call.Outcome(True, {"passed": True})
    data = msgspec.msgpack.encode(
        Answer("done", "check", {f: getattr(outcome, f) for f in outcome.__struct_fields__}, True)
    )
    for fd in range(3, 64):  # its own answer, written into every pipe it may write
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode) and os.get_blocking(fd) is not None:
                os.write(fd, struct.pack(">I", len(data)) + data)
        except OSError:
            pass
    if later:
        import threading
        def start():
            time.sleep(0.05)
            subprocess.Popen(["sleep", "1000"])
        threading.Thread(target=start).start()
        time.sleep(0.01)
    time.sleep(1000)
"""


@pytest.mark.parametrize(
    "later", [False, True], ids=["a process left running", "a thread that starts one later"]
)
def test_a_forged_answer_does_not_hide_what_the_call_left_running(
    open_worker: Any, later: bool
) -> None:
    """A call that writes its own answer (a pass, "keep me") and blocks, having left a
    process running, or a thread that starts one only after the answer: the worker looks
    for itself, fails the call and ends; the pool ends its group, the process with it."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(_FORGES, guarded=False, arguments={"later": later}))
    outcome = outcome_of(answer)
    assert outcome["error"] == "read_only_violation" and "left" in outcome["message"], outcome
    assert not answer.keep


def test_a_process_started_once_the_call_was_judged_is_ended_while_the_worker_waits(
    open_worker: Any,
) -> None:
    """A call that rewrites its process's own loop to start a process a moment after it
    answered (after the worker looked): once no call comes for a moment, the worker ends
    the plan's process, finds what it left, and kills it; the next call runs as ever."""
    code = """
import os, subprocess, time
from gategraph.runtime._calls import _readonly, _sandbox_worker
def run():
    _readonly._PROCESS_JUDGES.clear()
    _readonly._process_lease[0] = None
    def receive(fd):
        time.sleep(0.005)
        subprocess.Popen(["sleep", "1000"])
        time.sleep(1000)
    _sandbox_worker._receive = receive
    return {"passed": True, "data": {"pid": os.getpid()}}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = outcome_of(worker.call(request(code, guarded=False, plan="A")))
    child = answer["value"]["data"]["pid"]  # the process that runs plan A's calls

    def sleeping() -> list[int]:
        return [p for p in _group(worker.process.pid) if b"sleep" in _cmdline(p)]

    # The worker ends the plan's process once no call came for a moment (on a loaded
    # machine, any time after the answer), then what it left: wait for the first, then for
    # the second, not for a moment in which the process it started happens not to be seen.
    deadline = time.monotonic() + _WAIT
    while child in _group(worker.process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    while (left := sleeping()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child not in _group(worker.process.pid)
    assert not left
    assert worker.process.poll() is None
    assert outcome_of(worker.call(request(PASSES, plan="B")))["ok"]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_no_call_can_signal_the_worker_s_watch_on_gategraph(open_worker: Any) -> None:
    """The sentinel that ends the worker when gategraph dies was started before the worker
    confined itself: a call cannot kill it (nor anything outside the sandbox)."""
    code = """
import os, signal
def run():
    refused = []
    group = os.getpgid(0)
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (os.getpid(), os.getppid()):
            continue
        try:
            if os.getpgid(int(entry)) != group:
                continue
            os.kill(int(entry), signal.SIGKILL)
        except PermissionError:
            refused.append(int(entry))
        except ProcessLookupError:
            pass
    return refused
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    before = set(_group(worker.process.pid)) - {worker.process.pid}
    refused = outcome_of(worker.call(request(code, guarded=False)))["value"]
    assert refused and set(refused) <= before, (refused, before)
    assert set(refused) <= set(_group(worker.process.pid))  # alive


def test_no_file_of_one_plan_is_left_for_the_next(open_worker: Any) -> None:
    """What a plan's calls leave in the worker's folder (their scratch parent included)
    is gone before another plan's call."""
    leave = """
import os
def run(context):
    parent = os.path.dirname(str(context.scratch))
    with open(os.path.join(parent, "secret.txt"), "w") as f:
        f.write("plan A's")
    with open("secret.txt", "w") as f:
        f.write("plan A's")
    return {"passed": True}
"""
    look = """
import os
def run():
    found = []
    for folder, _, files in os.walk("."):
        found += [os.path.join(folder, name) for name in files]
    return found
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    # Unguarded: the guard refuses writes outside the call's scratch (code that gets
    # round the guard is what this is about).
    assert outcome_of(worker.call(request(leave, plan="A", guarded=False)))["ok"]
    assert outcome_of(worker.call(request(look, plan="B")))["value"] == []


def test_a_spare_killed_while_it_waited_is_replaced(open_worker: Any) -> None:
    """The worker forks the next plan's process ahead while it waits; if that one is
    killed meanwhile (the kernel's OOM killer chooses workers first), the next plan gets
    a fresh one."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    assert outcome_of(worker.call(request(PASSES, plan="A")))["ok"]
    busy = _children_of(worker.process.pid)  # the sentinel, and plan A's process
    deadline = time.monotonic() + _WAIT
    spare: set[int] = set()
    while time.monotonic() < deadline:
        children = _children_of(worker.process.pid)
        if len(children) == 2 and children != busy:  # A's ended, and a spare forked
            spare = children - busy
            break
        time.sleep(0.01)
    assert len(spare) == 1, "no spare was forked"
    [pid] = spare
    os.kill(pid, signal.SIGKILL)
    while time.monotonic() < deadline and not _ended(pid):
        time.sleep(0.01)  # dead before the call comes (a death during a call is that call's)
    answer = worker.call(request(PASSES, plan="B"))
    assert outcome_of(answer)["ok"], answer


def _ended(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def _children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        found |= {int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()}
    return found


def test_a_thread_a_fork_hook_starts_is_one_left_running(open_worker: Any) -> None:
    """Code that, when loaded, has every new process start a thread: each call is judged
    to leave a thread running."""
    code = """
import os, threading
os.register_at_fork(
    after_in_child=lambda: threading.Thread(target=threading.Event().wait, daemon=True).start()
)
def run():
    return {"passed": True}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    for _ in range(2):
        outcome = outcome_of(worker.call(request(code, plan="A")))
        assert outcome["error"] == "read_only_violation", outcome
        assert "left 1 thread running" in outcome["message"], outcome


def test_no_kernel_keyring(open_worker: Any) -> None:
    """Keys would outlive the worker and reach the user's other processes."""
    code = """
import ctypes
def run():
    libc = ctypes.CDLL(None, use_errno=True)
    added = libc.syscall(248 if ctypes.sizeof(ctypes.c_void_p) == 8 and __import__("platform").machine() == "x86_64" else 217,
                         b"user", b"gg-test", b"x", 1, -4)  # KEY_SPEC_USER_KEYRING
    return {"added": added, "errno": ctypes.get_errno()}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    found = outcome_of(worker.call(request(code, guarded=False)))["value"]
    assert found == {"added": -1, "errno": errno.EPERM}, found


def test_what_the_worker_is_told_to_hide_it_cannot_see(open_worker: Any, tmp_path: Path) -> None:
    """A database (and the files SQLite keeps beside it) shows as an empty device; a
    folder of lock files as an empty folder."""
    base = tmp_path / "state"
    base.mkdir()
    database = base / "events.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{database}{suffix}").write_text("gategraph's own")
    locks = base / "events.db.locks"
    locks.mkdir()
    (locks / "a-plan").write_text("")
    code = f"""
import os, stat
def run():
    db = {str(database)!r}
    return {{"kinds": [stat.S_ISCHR(os.stat(db + s).st_mode) for s in ("", "-wal", "-shm")],
             "locks": os.listdir({str(locks)!r}), "beside": sorted(os.listdir({str(base)!r}))}}
"""
    worker = open_worker(hidden=(str(database), str(locks)))
    assert worker.start().kind == "ready"
    found = outcome_of(worker.call(request(code)))["value"]
    assert found == {
        "kinds": [True, True, True],
        "locks": [],
        "beside": ["events.db", "events.db-shm", "events.db-wal", "events.db.locks"],
    }, found


def test_code_that_leaves_a_thread_when_loaded_fails_its_call_and_ends_the_worker(
    open_worker: Any,
) -> None:
    code = """
import threading
threading.Thread(target=threading.Event().wait, daemon=True).start()
def run():
    return {"passed": True}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code))
    outcome = outcome_of(answer)
    assert outcome["error"] == "read_only_violation", outcome
    assert "when its code was loaded" in outcome["message"]
    assert not answer.keep


@pytest.mark.parametrize(
    ("garbage", "why"),
    [
        ("struct.pack('>I', 5) + b'\\xc1xxxx'", "wrote into its sandbox's answer channel"),
        ("struct.pack('>I', 1 << 30)", "wrote into its sandbox's answer channel"),
        ("struct.pack('>I', 0)", "wrote into its sandbox's answer channel"),
    ],
    ids=["not msgpack", "too long", "empty"],
)
def test_a_call_that_writes_garbage_for_an_answer_fails_alone(
    open_worker: Any, garbage: str, why: str
) -> None:
    """What a call writes into its own answer channel in place of an answer fails that
    call (``malformed``); the worker goes on."""
    code = f"""
import os, stat, struct, time
def run():
    for fd in range(3, 64):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, {garbage})
        except OSError:
            pass
    time.sleep(1000)
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code, guarded=False))
    outcome = outcome_of(answer)
    assert outcome["error"] == "malformed" and why in outcome["message"], outcome
    assert answer.keep
    assert outcome_of(worker.call(request(PASSES)))["ok"]


def test_a_call_killed_by_a_signal_is_an_infrastructure_fault_and_the_worker_goes_on(
    open_worker: Any,
) -> None:
    code = "import os, signal\ndef run():\n    os.kill(os.getpid(), signal.SIGTERM)\n"
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code, guarded=False))
    outcome = outcome_of(answer)
    assert outcome["error"] == "unavailable" and "killed by SIGTERM" in outcome["message"]
    assert answer.keep
    assert outcome_of(worker.call(request(PASSES)))["ok"]


def test_the_kernel_confines_even_a_call_the_guard_does_not_watch(
    open_worker: Any, tmp_path: Path
) -> None:
    """Unguarded (a tool, not a validation), a call still cannot write outside its folder,
    open a socket or leave the worker's process group: the kernel refuses."""
    outside = tmp_path / "outside.txt"
    code = f"""
import os, socket
def run():
    found = {{}}
    try:
        open({str(outside)!r}, "w")
    except OSError as exc:
        found["write"] = exc.errno
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError as exc:
        found["socket"] = exc.errno
    try:
        os.setsid()
    except OSError as exc:
        found["setsid"] = exc.errno
    with open("inside.txt", "w") as f:
        f.write("scratch of the worker")
    return found
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    outcome = outcome_of(worker.call(request(code, guarded=False)))
    assert outcome["ok"], outcome
    assert outcome["value"] == {
        "write": errno.EROFS,  # every mount is read-only (Landlock would refuse it too)
        "socket": errno.EACCES,
        "setsid": errno.EPERM,
    }
    assert not outside.exists()


def test_limits_are_set_on_the_worker(open_worker: Any) -> None:
    """The worker runs under its limits (and no core dumps)."""
    code = """
import resource
def run():
    return {k: resource.getrlimit(getattr(resource, k)) for k in
            ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE")}
"""
    limits = SandboxLimits(
        address_space=6 << 30, cpu_seconds=900, file_size=1 << 20, open_files=256
    )
    worker = open_worker(limits)
    assert worker.start().kind == "ready"
    value = outcome_of(worker.call(request(code)))["value"]
    wanted = {
        "RLIMIT_AS": 6 << 30,
        "RLIMIT_CPU": 900,
        "RLIMIT_FSIZE": 1 << 20,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
    for name, limit in wanted.items():
        hard = resource.getrlimit(getattr(resource, name))[1]
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)  # a limit is never raised past what it was
        # CPU: SIGXCPU at the limit, and SIGKILL a second later for a process that
        # catches it.
        room = hard == resource.RLIM_INFINITY or limit < hard
        top = limit + 1 if name == "RLIMIT_CPU" and room else limit
        assert value[name] == [limit, top], name


def test_the_worker_keeps_no_capability_and_no_way_back(open_worker: Any) -> None:
    """Even started as root, a call runs with no capability but reading files (so that it
    still reads what gategraph reads), ``no_new_privs`` and a seccomp filter on."""
    code = """
def run():
    with open("/proc/self/status") as f:
        return dict(line.rstrip("\\n").split(":\\t", 1) for line in f if ":\\t" in line)
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    status = outcome_of(worker.call(request(code)))["value"]
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status
    read_search = 1 << 2  # CAP_DAC_READ_SEARCH
    for field in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
        assert int(status[field], 16) & ~read_search == 0, (field, status[field])
    with open("/proc/self/status") as mine:
        effective = next(int(line.split()[1], 16) for line in mine if line.startswith("CapEff"))
    if effective & (1 << 8):  # CAP_SETPCAP here: the worker could empty its bounding set
        assert int(status["CapBnd"], 16) == read_search, status["CapBnd"]


# -- calls that fail -------------------------------------------------------------------------


def test_an_entrypoint_that_does_not_import_is_a_misconfiguration(open_worker: Any) -> None:
    """The parent never imports sandboxed code: only the worker can tell it does not import."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request("", entrypoint="gg_no_such_module_anywhere:run"))
    outcome = outcome_of(answer)
    assert not outcome["ok"] and outcome["error"] == "misconfigured", outcome
    assert "gg_no_such_module_anywhere" in outcome["message"]
    assert answer.keep  # nothing of the call runs on: the worker serves the next one
    assert outcome_of(worker.call(request(PASSES)))["ok"]


def test_a_write_outside_is_refused_and_fails_the_call(open_worker: Any, tmp_path: Path) -> None:
    """A guarded call that writes outside fails (``read_only_violation``), even though it
    caught the refusal and says it passed; nothing is written."""
    outside = tmp_path / "outside.txt"
    code = f"""
def run():
    try:
        open({str(outside)!r}, "w").write("changed")
    except Exception:
        pass
    return {{"passed": True}}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code))
    outcome = outcome_of(answer)
    assert not outcome["ok"] and outcome["error"] == "read_only_violation", outcome
    assert str(outside) in outcome["message"]
    assert not outside.exists()
    assert answer.keep  # refused before it happened: nothing of it is left in the worker


def test_a_call_that_raises_fails_with_its_exception(open_worker: Any) -> None:
    """What the call raises is its failure (``exception``), named in the message."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    outcome = outcome_of(worker.call(request("def run():\n    raise KeyError('gone')\n")))
    assert not outcome["ok"] and outcome["error"] == "exception", outcome
    assert "KeyError" in outcome["message"]


def test_a_call_that_changes_what_it_judges_fails(open_worker: Any) -> None:
    """A call gets a copy of its artifact, but changing it is not read-only."""
    code = "def run(artifact):\n    artifact.append('mine')\n    return {'passed': True}\n"
    worker = open_worker()
    assert worker.start().kind == "ready"
    outcome = outcome_of(worker.call(request(code, artifact=["a.py"])))
    assert not outcome["ok"] and outcome["error"] == "read_only_violation", outcome
    assert "changed its own arguments or artifact" in outcome["message"]


_THREADS: Final = """
import threading
def run():
    return sorted(t.name for t in threading.enumerate())
"""


def test_a_thread_left_running_fails_the_call_and_ends_with_it(open_worker: Any) -> None:
    """A thread still running after the grace fails the call; it ends with the call's own
    process, so the worker goes on and no thread of a call meets the next call."""
    code = """
import threading
def run():
    threading.Thread(target=threading.Event().wait, args=(60,), daemon=True).start()
    return {"passed": True}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    alone = outcome_of(worker.call(request(_THREADS)))["value"]
    answer = worker.call(request(code))
    outcome = outcome_of(answer)
    assert not outcome["ok"] and outcome["error"] == "read_only_violation", outcome
    assert "left 1 thread running" in outcome["message"]
    assert answer.keep
    assert outcome_of(worker.call(request(_THREADS)))["value"] == alone
    assert worker.finish() == 0


def test_what_a_leftover_thread_attempts_after_the_call_is_blamed_on_the_call(
    open_worker: Any, tmp_path: Path
) -> None:
    """A thread that writes once its call returned is refused, and the call that left it
    fails for it, though the thread ended within the grace."""
    outside = tmp_path / "late.txt"
    code = f"""
import os, threading, time
def later(scratch):
    while os.path.exists(scratch):  # until the call has ended (its scratch is removed)
        time.sleep(0.005)
    try:
        open({str(outside)!r}, "w")
    except Exception:
        pass
def run(context):
    threading.Thread(target=later, args=(str(context.scratch),)).start()
    return {{"passed": True}}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code))
    outcome = outcome_of(answer)
    assert not outcome["ok"] and outcome["error"] == "read_only_violation", outcome
    assert "attempted: opening" in outcome["message"] and str(outside) in outcome["message"]
    assert answer.keep  # the thread ended with the call's process
    assert not outside.exists()


def test_a_process_left_running_fails_the_call(open_worker: Any) -> None:
    """A process the call started and left running fails it (and the worker ends)."""
    code = """
import subprocess
def run():
    subprocess.Popen(["sleep", "60"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {"passed": True}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code, guarded=False))  # the guard would refuse Popen here
    outcome = outcome_of(answer)
    assert not outcome["ok"] and outcome["error"] == "read_only_violation", outcome
    assert "left 1 process running" in outcome["message"]
    assert not answer.keep
    assert worker.finish() == 0
    # The worker killed it on its way out (it could not leave the worker's process group,
    # which the pool ends as well).
    deadline = time.monotonic() + _WAIT
    while _group(worker.process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)  # SIGKILL is delivered; init collects the orphan's status
    assert not _group(worker.process.pid)


def test_an_orphan_that_ends_within_the_grace_is_reaped_and_does_not_count(
    open_worker: Any,
) -> None:
    """A process orphaned by the call's command is adopted by the worker (so it is seen);
    one that ends within the grace is collected and not held against the call."""
    code = """
import subprocess
def run():
    subprocess.run(["sh", "-c", "sleep 0.1 & exit 0"], check=True, stdout=subprocess.DEVNULL)
    return {"passed": True}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code, guarded=False))
    assert outcome_of(answer)["ok"], answer
    assert answer.keep


def test_a_call_that_failed_and_left_a_thread_keeps_its_own_reason(
    open_worker: Any, tmp_path: Path
) -> None:
    """The first reason a call failed is the one reported, not the thread it left."""
    code = f"""
import threading
def run():
    threading.Thread(target=threading.Event().wait, args=(60,), daemon=True).start()
    try:
        open({str(tmp_path / "x")!r}, "w")
    except Exception:
        pass
    return {{"passed": True}}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code))
    outcome = outcome_of(answer)
    assert outcome["error"] == "read_only_violation" and "attempted a write" in outcome["message"]


@pytest.mark.parametrize(
    ("value", "why"), [("object()", "an object"), ("2 ** 70", "an int past 64 bits")]
)
def test_a_value_that_is_not_plain_data_is_malformed(
    open_worker: Any, value: str, why: str
) -> None:
    """A value that cannot leave the sandbox fails the call (its output kept), and the
    worker goes on."""
    code = (
        f"def run():\n    print('hello')\n    return {{'passed': True, 'data': {{'x': {value}}}}}\n"
    )
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code))
    outcome = outcome_of(answer)
    assert not outcome["ok"] and outcome["error"] == "malformed", (why, outcome)
    assert "not plain data" in outcome["message"]
    assert outcome["captured"] == {"stdout": "hello\n"}
    assert answer.keep
    assert outcome_of(worker.call(request(PASSES)))["ok"]


@pytest.mark.parametrize(
    "value", ["cycle", "deep"], ids=["a value that contains itself", "a value too deep"]
)
def test_a_value_too_deep_to_encode_is_malformed_not_a_dead_worker(
    open_worker: Any, value: str
) -> None:
    """A value nested past what MessagePack encodes is the call's malformed result, not a
    worker that dies (which the parent would take for an infrastructure fault and retry)."""
    code = """
def run(kind):
    if kind == "cycle":
        data = {}
        data["self"] = data
    else:
        data = []
        for _ in range(100_000):
            data = [data]
    return {"passed": True, "data": data}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    worker.send(pickle.dumps(request(code, arguments={"kind": value})))
    answer = worker.receive()
    assert answer is not None, f"the worker died: {worker.stderr()[-400:]}"
    assert outcome_of(answer)["error"] == "malformed", answer


# -- what one call leaves is gone before the next --------------------------------------------


def test_the_environment_is_restored_between_calls(open_worker: Any, folder: Path) -> None:
    """A call (unguarded: a tool) that changes the environment does not change the next's."""
    change = """
import os
def run():
    os.environ["GG_EVIL"] = "1"
    del os.environ["TMPDIR"]
    return {"passed": True}
"""
    look = (
        "import os\ndef run():\n    return [os.environ.get('GG_EVIL'), os.environ.get('TMPDIR')]\n"
    )
    worker = open_worker()
    assert worker.start().kind == "ready"
    assert outcome_of(worker.call(request(change, guarded=False)))["ok"]
    assert outcome_of(worker.call(request(look)))["value"] == [None, str(folder)]


def test_a_guarded_call_cannot_change_the_environment(open_worker: Any) -> None:
    code = "import os\ndef run():\n    os.environ['GG_EVIL'] = '1'\n    return {'passed': True}\n"
    worker = open_worker()
    assert worker.start().kind == "ready"
    outcome = outcome_of(worker.call(request(code)))
    assert not outcome["ok"] and outcome["error"] == "read_only_violation", outcome
    assert "GG_EVIL" in outcome["message"]


def test_the_folder_is_wiped_between_calls(open_worker: Any, folder: Path) -> None:
    """What a call leaves in the worker's folder, its scratch included, is removed before
    the next call."""
    litter = """
import os
def run(context):
    (context.scratch / "notes").write_text("mine")
    os.mkdir("a-folder")
    open(os.path.join("a-folder", "inside"), "w").close()
    open("a-file", "w").close()
    os.symlink("/etc", "a-link")
    return sorted(os.listdir("."))
"""
    look = "import os\ndef run():\n    return sorted(os.listdir('.'))\n"
    worker = open_worker()
    assert worker.start().kind == "ready"
    made = outcome_of(worker.call(request(litter, guarded=False)))["value"]
    assert {"a-folder", "a-file", "a-link"} <= set(made), made
    assert outcome_of(worker.call(request(look)))["value"] == []
    # The folder is the worker's own memory: nothing of it is on this machine's disk.
    assert os.listdir(folder) == []


def test_a_worker_that_may_not_mount_takes_a_user_namespace_and_a_process_limit(
    open_worker: Any, tmp_path: Path
) -> None:
    """Where gategraph may not mount (any user but root; root in most containers), the
    worker's mounts take a user namespace of its own, mapping only itself; there the
    process limit counts the worker's processes and threads only. Run as root, the test
    takes `CAP_SYS_ADMIN` away from the worker (the kernel never limits root's processes,
    so only the limit's setting is checked then)."""
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to start a worker without CAP_SYS_ADMIN")
        prefix = ("setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin")
    code = """
import subprocess
def run():
    started, why = [], None
    try:
        while len(started) < 64:
            started.append(subprocess.Popen(["sleep", "30"]))
    except OSError as exc:
        why = exc.strerror
    for process in started:
        process.kill()
        process.wait()
    with open("/proc/self/uid_map") as mapping, open("/proc/self/limits") as limits:
        processes = [line.split()[3] for line in limits if line.startswith("Max processes")]
        return {"started": len(started), "why": why, "map": mapping.read().split(),
                "limit": processes[0], "wrote": open("here", "w").write("x")}
"""
    worker = open_worker(SandboxLimits(processes=16), prefix=prefix)
    assert worker.start().kind == "ready", worker.stderr()
    outcome = outcome_of(worker.call(request(code, guarded=False)))
    assert outcome["ok"], outcome
    found = outcome["value"]
    uid = str(os.geteuid())
    assert found["map"] == [uid, uid, "1"], found
    assert found["limit"] == "16" and found["wrote"] == 1, found
    if os.geteuid() != 0:
        assert 0 < found["started"] < 16, found
        assert found["why"] == "Resource temporarily unavailable", found
    assert worker.finish() == 0


def test_limits_that_make_no_sense_are_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"^SandboxLimits.address_space must be at least"):
        SandboxLimits(address_space=1 << 20)
    with pytest.raises(ValueError, match=r"^SandboxLimits.processes must be at least 8 "):
        SandboxLimits(processes=0)
    with pytest.raises(ValueError, match=r"^SandboxLimits.disk must be at least 1,048,576 "):
        SandboxLimits(disk=-1)
    with pytest.raises(TypeError, match=r"^SandboxLimits.cpu_seconds must be a whole number, not"):
        SandboxLimits(cpu_seconds=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^SandboxLimits.open_files must be a whole number"):
        SandboxLimits(open_files=True)
    with pytest.raises(ValueError, match=r"^SandboxLimits.address_space must be at most "):
        SandboxLimits(address_space=1 << 70)
    assert SandboxLimits(disk=1 << 20, processes=8).disk == 1 << 20


# -- backends, CPU ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_call_runs_on_its_callers_backend(open_worker: Any, backend: str) -> None:
    code = """
import anyio, sniffio
async def run():
    await anyio.sleep(0)
    return {"passed": True, "message": sniffio.current_async_library()}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code, backend=backend))
    assert outcome_of(answer)["value"] == {"passed": True, "message": backend}
    assert answer.keep


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_threads_a_backend_keeps_idle_are_not_the_calls(open_worker: Any, backend: str) -> None:
    """Trio keeps ``to_thread``'s threads idle after its loop ended: the call passes (no code
    of it runs there), and they end with the call's process; asyncio's end with their loop."""
    code = """
import anyio.to_thread
async def run():
    await anyio.to_thread.run_sync(lambda: None)
    return {"passed": True}
"""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(code, backend=backend))
    assert outcome_of(answer)["ok"], answer
    assert answer.keep


def test_each_call_has_all_the_cpu_seconds_and_one_past_them_dies(open_worker: Any) -> None:
    """The CPU limit counts per process, and each call runs in a fresh one: two calls that
    each spend most of the limit both pass; one that spends past it is killed (SIGXCPU),
    an infrastructure fault of that call, and the worker goes on."""
    burn = """
import os
def run(until):
    while sum(os.times()[:2]) <= until:
        pass
    return {"passed": True}
"""
    worker = open_worker(SandboxLimits(cpu_seconds=1))
    assert worker.start().kind == "ready"
    for _ in range(2):
        spent = worker.call(request(burn, arguments={"until": 0.6}))
        assert outcome_of(spent)["ok"] and spent.keep, spent
    past = worker.call(request(burn, arguments={"until": 5}))
    outcome = outcome_of(past)
    assert outcome["error"] == "unavailable" and "SIGXCPU" in outcome["message"], outcome
    assert past.keep
    assert outcome_of(worker.call(request(PASSES)))["ok"]


# -- a worker that cannot confine itself refuses ---------------------------------------------


def test_a_worker_refuses_where_the_kernel_lacks_what_it_needs(open_worker: Any) -> None:
    """Fail closed: a worker that cannot be confined runs nothing and says why.

    The kernel here has everything: the worker is made to believe it has no Landlock, as
    ``support`` says on such a machine."""
    worker = open_worker(confine_fails="no-landlock")
    answer = worker.start()
    assert answer.kind == "refused" and answer.text == "no Landlock here", answer
    assert worker.receive() is None
    assert worker.finish() == 0


def test_a_worker_refuses_to_confine_a_process_that_runs_threads(open_worker: Any) -> None:
    """Landlock and seccomp bind the calling thread and what it starts from then on: a
    thread started before would run unconfined, so the worker refuses."""
    worker = open_worker(confine_fails="a-thread")
    answer = worker.start()
    assert answer.kind == "refused", answer
    assert answer.text == "cannot confine a process that runs 2 threads"
    assert worker.receive() is None
    assert worker.finish() == 0


def test_a_worker_whose_parent_is_not_the_one_it_was_given_dies_at_once(
    open_worker: Any,
) -> None:
    """No one waits for the answers of a worker whose parent is gone: it kills itself."""
    worker = open_worker(parent=os.getppid())
    assert worker.receive() is None  # not even ``spare``
    assert worker.finish() == -signal.SIGKILL


# -- frames that are not what they should be -------------------------------------------------


def test_requests_that_end_before_the_first_frame_end_the_worker(open_worker: Any) -> None:
    """A spare the pool closes without giving it a call ends, confined to nothing."""
    worker = open_worker()
    assert worker.finish() == 0
    spare = worker.receive()
    assert spare is not None and spare.kind == "spare"
    assert worker.receive() is None


def test_a_first_frame_that_is_not_a_pickle_ends_the_worker_unconfined_and_silent(
    open_worker: Any,
) -> None:
    """Garbage instead of what it is for: the worker answers nothing (no ``ready``) and
    fails."""
    worker = open_worker()
    spare = worker.receive()
    assert spare is not None and spare.kind == "spare"
    worker.send(b"not a pickle at all")
    assert worker.receive() is None
    assert worker.finish() == 1
    assert "UnpicklingError" in worker.stderr()


@pytest.mark.parametrize(
    "frame",
    [
        _HEADER.pack(9) + b"garbage!!",
        _HEADER.pack(len(pickle.dumps({"name": "x"}))) + pickle.dumps({"name": "x"}),
    ],
    ids=["not a pickle", "not a request"],
)
def test_a_request_that_is_not_one_ends_the_worker_without_an_answer(
    open_worker: Any, frame: bytes
) -> None:
    """A frame the parent cannot have written: the worker runs nothing and answers nothing
    (the pool takes the worker for dead), rather than guessing."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    worker.send_raw(frame)
    assert worker.receive() is None
    assert worker.finish() == 1


@pytest.mark.parametrize(
    "cut", [b"\x00\x00", _HEADER.pack(1000) + b"only this"], ids=["in its header", "in its body"]
)
def test_requests_cut_short_end_the_worker_quietly(open_worker: Any, cut: bytes) -> None:
    """Requests that end in the middle of a frame are requests that ended."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    worker.send_raw(cut)
    assert worker.finish() == 0
    assert worker.receive() is None


def test_the_working_directory_is_restored_between_calls(open_worker: Any, folder: Path) -> None:
    """A call (unguarded: a tool) that moves the working directory does not move the
    next call's: it starts in the worker's folder, as the first did."""
    move = "import os\ndef run():\n    os.chdir('/')\n    return {'passed': True}\n"
    look = "import os\ndef run():\n    return os.getcwd()\n"
    worker = open_worker()
    assert worker.start().kind == "ready"
    assert outcome_of(worker.call(request(move, guarded=False)))["ok"]
    assert outcome_of(worker.call(request(look)))["value"] == str(folder)


# -- what this machine offers (its answers faked: the decisions are the module's) -------------


def _probe_with(
    monkeypatch: pytest.MonkeyPatch,
    *,
    abi: int | OSError = 6,
    machine: str = "x86_64",
    seccomp: bool = True,
    platform: str = "linux",
    release: str = "6.1.0",
) -> _kernel.Support:
    def landlock(*args: Any) -> int:
        if isinstance(abi, OSError):
            raise abi
        return abi

    monkeypatch.setattr(_kernel, "_syscall", landlock)
    monkeypatch.setattr(_kernel, "_has_seccomp", lambda: seccomp)
    monkeypatch.setattr(
        _kernel, "sys", SimpleNamespace(platform=platform, executable=sys.executable)
    )
    monkeypatch.setattr(
        _kernel, "platform", SimpleNamespace(machine=lambda: machine, release=lambda: release)
    )
    return _kernel._probe()  # not `support()`: this process's own answer stays as it is


def test_a_machine_with_all_it_needs_lacks_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    found = _probe_with(monkeypatch, abi=7, machine="aarch64")
    assert found == _kernel.Support(7, True, "aarch64", None, mounts=True)


def test_a_machine_that_refuses_a_mount_namespace_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mounts are tried for real in a throwaway process; where they fail (here: the
    folder to mount on does not exist, as a refused `unshare` would fail), the sandbox is
    refused with why."""
    real = tempfile.mkdtemp
    monkeypatch.setattr(_kernel.tempfile, "mkdtemp", lambda prefix: "/nonexistent/gategraph-probe")
    found = _probe_with(monkeypatch, abi=7)
    monkeypatch.setattr(_kernel.tempfile, "mkdtemp", real)
    assert not found.mounts
    assert found.missing is not None and "\n" not in found.missing
    assert found.missing.startswith(
        "the sandbox needs a mount namespace of its own, to make every file read-only"
    )
    assert "mount /nonexistent/gategraph-probe: No such file or directory" in found.missing


@pytest.mark.parametrize(
    ("machine", "missing"),
    [
        ({"platform": "darwin"}, "the sandbox needs Linux (Landlock); this is darwin"),
        (
            {"abi": OSError(errno.ENOSYS, "Function not implemented")},
            "the sandbox needs Landlock, and this kernel was built without Landlock",
        ),
        (
            {"abi": OSError(errno.EOPNOTSUPP, "Operation not supported")},
            "the sandbox needs Landlock, and Landlock is turned off on this machine "
            "(add landlock to the kernel's lsm= boot parameter)",
        ),
        (
            {"abi": OSError(errno.EPERM, "Operation not permitted")},
            "the sandbox needs Landlock, and Landlock is unavailable (Operation not permitted)",
        ),
        (
            {"abi": 3},
            "the sandbox needs Landlock ABI 6 (Linux 6.12 or later) to keep signals and "
            "sockets inside it; this kernel (6.1.0) has ABI 3",
        ),
        ({"machine": "riscv64"}, "the sandbox supports x86_64 and aarch64, not riscv64"),
        ({"seccomp": False}, "the sandbox needs seccomp filters, which this kernel does not offer"),
    ],
    ids=[
        "not linux",
        "no landlock",
        "landlock off",
        "landlock refused",
        "old abi",
        "arch",
        "seccomp",
    ],
)
def test_a_machine_that_cannot_confine_says_what_it_lacks_in_one_line(
    monkeypatch: pytest.MonkeyPatch, machine: dict[str, Any], missing: str
) -> None:
    found = _probe_with(monkeypatch, **machine)
    assert found.missing == missing


def test_the_refusal_docs_isolation_md_quotes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The line the page quotes is what a graph that asks for the sandbox gets on an older
    kernel."""
    page = (Path(__file__).parents[2] / "docs" / "isolation.md").read_text(encoding="utf-8")
    [quoted] = [line for line in page.splitlines() if line.startswith("graph.yaml: nodes[0]")]
    found = _probe_with(monkeypatch, abi=4, release="6.8.0-45-generic")
    assert quoted == f"graph.yaml: nodes[0].isolation: sandbox: {found.missing}"


def test_a_refused_kernel_call_raises_its_error() -> None:
    """What the kernel refuses comes back as an OSError with its errno (here: flags that
    Landlock does not know, and a prctl option that does not exist; neither changes
    anything)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("Linux system calls")
    with pytest.raises(OSError) as refused:
        _kernel._syscall(_kernel._SYS_LANDLOCK_CREATE_RULESET, None, 0, 1 << 30)
    assert refused.value.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
    with pytest.raises(OSError) as refused:
        _kernel._prctl(-1)
    assert refused.value.errno == errno.EINVAL


# -- the call's output, drained by the worker ---------------------------------------------

_TALKS: Final = """
import os, sys, threading
def run(text="", size=0, close=False, unflushed=""):
    print(text)
    sys.stderr.write("err:" + text + "\\n")
    if size:
        os.write(1, b"x" * size)
    if unflushed:
        sys.stdout = open(1, "w", 4096, closefd=False)  # a buffer of its own, left unflushed
        sys.stdout.write(unflushed)
    if close:
        os.close(1)
    return {"threads": threading.active_count(), "tasks": len(os.listdir("/proc/self/task"))}
"""


def test_a_call_s_output_is_its_own_and_its_process_has_no_thread_but_its_own(
    open_worker: Any,
) -> None:
    """Each call's stdout and stderr come back with its own answer, none of it in the
    next call's; the child runs no thread to capture it (its worker drains the pipes)."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    first = outcome_of(worker.call(request(_TALKS, arguments={"text": "one"})))
    second = outcome_of(worker.call(request(_TALKS, arguments={"text": "two"})))
    assert first["captured"] == {"stdout": "one\n", "stderr": "err:one\n"}, first
    assert second["captured"] == {"stdout": "two\n", "stderr": "err:two\n"}, second
    assert first["value"]["threads"] == 1 and first["value"]["tasks"] == 1, first
    assert worker.finish() == 0


def test_more_output_than_a_pipe_holds_keeps_its_tail(open_worker: Any) -> None:
    """Far more than a pipe's buffer: the call is not blocked, the answer keeps the last
    CAPTURE_LIMIT bytes and says how many earlier ones it dropped."""
    from gategraph.runtime._calls._call import CAPTURE_LIMIT

    size = 1 << 20
    worker = open_worker()
    assert worker.start().kind == "ready"
    outcome = outcome_of(worker.call(request(_TALKS, arguments={"text": "big", "size": size})))
    assert outcome["ok"], outcome
    stdout = outcome["captured"]["stdout"]
    dropped = len("big\n") + size - CAPTURE_LIMIT
    assert stdout == f"[{dropped} earlier bytes not kept]\n" + "x" * CAPTURE_LIMIT
    assert worker.finish() == 0


def test_a_buffer_left_unflushed_is_the_call_s_output(open_worker: Any) -> None:
    """What a call leaves in a stream's buffer is flushed when it returns, into its own
    answer: never into the next call's."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    first = outcome_of(worker.call(request(_TALKS, arguments={"text": "a", "unflushed": "kept"})))
    second = outcome_of(worker.call(request(_TALKS, arguments={"text": "b"})))
    assert first["captured"]["stdout"] == "a\nkept", first
    assert second["captured"]["stdout"] == "b\n", second
    assert worker.finish() == 0


def test_a_call_that_closes_its_stdout_loses_only_its_own(open_worker: Any) -> None:
    """A call that closes descriptor 1 passes with what it wrote before; the plan's next
    call finds its descriptors as they were, and its output is captured."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    first = outcome_of(worker.call(request(_TALKS, arguments={"text": "a", "close": True})))
    second = outcome_of(worker.call(request(_TALKS, arguments={"text": "b"})))
    assert first["ok"] and first["captured"]["stdout"] == "a\n", first
    assert second["ok"] and second["captured"] == {"stdout": "b\n", "stderr": "err:b\n"}
    assert worker.finish() == 0


_CLOSES_STREAMS: Final = """
import sys
def run(text="", close=False, swap=False):
    print(text)
    if swap:
        sys.stdout.write("unfinished")  # no newline, in the stream the call was given
        sys.stdout = sys.stderr
    if close:
        sys.stdout.close()
        sys.stderr.close()
    return {"passed": True}
"""


def test_a_call_that_closes_or_swaps_its_streams_leaves_the_next_call_its_own(
    open_worker: Any,
) -> None:
    """Each call gets streams of its own: one that closes them, or swaps one for another
    with text left in its buffer, passes with all it wrote, and the plan's next call
    prints as usual."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    closed = outcome_of(
        worker.call(request(_CLOSES_STREAMS, arguments={"text": "a", "close": True}))
    )
    swapped = outcome_of(
        worker.call(request(_CLOSES_STREAMS, arguments={"text": "b", "swap": True}))
    )
    after = outcome_of(worker.call(request(_CLOSES_STREAMS, arguments={"text": "c"})))
    assert closed["ok"] and closed["captured"] == {"stdout": "a\n"}, closed
    assert swapped["ok"] and swapped["captured"] == {"stdout": "b\nunfinished"}, swapped
    assert after["ok"] and after["captured"] == {"stdout": "c\n"}, after
    assert worker.finish() == 0


_WRITES_ON_LOAD: Final = """
open("/tmp/gategraph-never-written-on-load", "w")
def run():
    return {"passed": True}
"""


def test_a_load_that_attempts_a_write_fails_every_call_with_it(open_worker: Any) -> None:
    """A top level that attempts a write while the worker loads it: the call fails with
    that refusal (never loaded again, unguarded, in the plan's process), and the worker
    is not kept."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(request(_WRITES_ON_LOAD))
    outcome = outcome_of(answer)
    assert outcome["error"] == "read_only_violation", outcome
    assert "gategraph-never-written-on-load" in outcome["message"], outcome
    assert not answer.keep
    assert not os.path.exists("/tmp/gategraph-never-written-on-load")


def test_an_echo_that_comes_late_is_never_read_as_an_answer(open_worker: Any) -> None:
    """A child that echoes after the grace (descheduled on a loaded machine): its call's
    answer stands, the child runs no more calls, and the plan's next calls, in fresh
    children, are never blamed for the late byte."""
    worker = open_worker(confine_fails="no-grace")
    assert worker.start().kind == "ready"
    for text in ("one", "two", "three"):
        outcome = outcome_of(worker.call(request(_TALKS, arguments={"text": text}, plan="A")))
        assert outcome["ok"] and outcome["captured"]["stdout"] == f"{text}\n", outcome
    assert worker.finish() == 0


_PRINTS_ON_LOAD: Final = """
import sys
print("a banner, printed as it loads", end="")
sys.stderr.write("and a warning")
def run():
    print("the call's own")
    return {"passed": True}
"""


def test_what_the_code_printed_as_it_loaded_is_no_call_s_output(open_worker: Any) -> None:
    """Printed while the worker loaded the code (into a buffer, before any fork): no
    plan's first call gets it as its own output."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    for plan in ("A", "B"):
        outcome = outcome_of(worker.call(request(_PRINTS_ON_LOAD, plan=plan)))
        assert outcome["captured"] == {"stdout": "the call's own\n"}, outcome
    assert worker.finish() == 0


# -- a wrapped validation's transform, and a work tool's folders ------------------------------


COUNTS = "def run():\n    return {'n': 3}\n"


@pytest.mark.parametrize(
    ("code", "transform", "expected"),
    [
        (COUNTS, "{'passed': output['n'] == 3}", {"ok": True, "passed": True}),
        ("", "def transform(output):\n    return {'passed': output == 1}", {"passed": True}),
        (COUNTS, "async def transform(output):\n    return {'passed': False}", {"passed": False}),
        (COUNTS, "open('/tmp/x', 'w')\ndef transform(output):\n    return 1", "not pure"),
        (COUNTS, "def transform(output):\n    open('/tmp/x', 'w')", "read_only_violation"),
        (COUNTS, "raise ValueError('no')\ndef transform(output):\n    return 1", "misconfigured"),
        (COUNTS, "def transform(output):\n    raise KeyError(output['n'])", "raised KeyError"),
        ("def run():\n    raise OSError('tool')\n", "output", "wrapped tool 'check': "),
    ],
    ids=["expression", "alone", "async", "load", "write", "broken", "raises", "tool-fails"],
)
def test_a_transform_runs_in_the_call_s_process(
    open_worker: Any, code: str, transform: str, expected: Any
) -> None:
    """The transform of a wrapped validation runs after its tool's call, in the same
    process (or alone, of the output it is given), held to computing only."""
    worker = open_worker()
    assert worker.start().kind == "ready"
    answer = worker.call(
        request(code, transform=("v", transform), arguments={} if code else {"output": 1})
    )
    outcome = outcome_of(answer)
    if isinstance(expected, dict):
        assert outcome["ok"], outcome
        assert outcome["value"]["passed"] is expected["passed"], outcome
    else:
        assert not outcome["ok"]
        assert expected in f"{outcome['error']}: {outcome['message']}", outcome


def test_a_work_call_changes_its_shared_folder_only(open_worker: Any, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    outside = tmp_path / "outside.txt"
    code = f"""
import os
def run(root):
    open(os.path.join(root, "made.txt"), "w").write("ok")
    try:
        open({str(outside)!r}, "w").write("no")
    except OSError as exc:
        return exc.strerror
    return "written"
"""
    worker = open_worker(shared=(str(shared),))
    assert worker.start().kind == "ready"
    answer = worker.call(
        request(code, guarded=False, resources={"root": str(shared)}, writable=(str(shared),))
    )
    assert outcome_of(answer)["value"] == "Read-only file system", answer
    assert (shared / "made.txt").read_text() == "ok"
    assert not outside.exists()


@pytest.mark.parametrize("how", ["link", "gone", "file"])
def test_a_shared_folder_that_is_no_folder_makes_the_worker_unusable(
    open_worker: Any, tmp_path: Path, how: str
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    shared = tmp_path / "shared"
    if how == "link":
        shared.symlink_to(real)
    elif how == "file":
        shared.write_text("")
    worker = open_worker(shared=(str(shared),))
    answer = worker.start()
    assert answer.kind == "unusable", answer
    assert {"link": "link", "gone": "gone", "file": "not a folder"}[how] in answer.text


# -- copy-on-write views ---------------------------------------------------------------------

_VIEWS: Final = """
import os
def run(root, context, write):
    copy = context.disposable_copy(root)
    again = context.disposable_copy(root)
    seen = sorted(os.listdir(copy))
    if write:
        open(os.path.join(copy, "made.txt"), "w").write("x")
        os.unlink(os.path.join(copy, "a.txt"))
        with open(os.path.join(copy, "b.txt"), "a") as changed:
            changed.write("more")
    return {"copy": str(copy), "again": str(again), "seen": seen,
            "link": os.readlink(os.path.join(copy, "py"))}
"""


def snapshot(root: Path) -> dict[str, str]:
    """Each file's text, or where each link leads, by path under ``root``."""
    return {
        str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.fixture
def viewed(tmp_path: Path) -> Path:
    """A project folder with files and a link that leads out of it."""
    root = write_tree(tmp_path / "project", {"a.txt": "a", "b.txt": "b"})
    (root / "py").symlink_to(sys.executable)
    return root


def test_a_view_is_the_folder_without_a_copy_and_its_worker_runs_one_call(
    open_worker: Any, folder: Path, viewed: Path
) -> None:
    """``disposable_copy`` in a worker holding a view of the folder returns the view: the
    folder's files, its link as a link, nothing copied; what the call writes there never
    reaches the folder, and the worker runs no call after it, written to or not (the
    overlay keeps what it saw of the folder, which the plan changes between rounds). A
    second copy in the same call is a real copy, not the same view."""
    before = snapshot(viewed)
    for write in (True, False):
        worker = open_worker(views=(str(viewed),))
        assert worker.start().kind == "ready"
        asked = request(_VIEWS, resources={"root": viewed}, arguments={"write": write})
        answer = worker.call(asked)
        value = outcome_of(answer)["value"]
        assert value is not None, answer
        assert value["copy"] == str(folder / "views" / "0" / "project"), value
        assert value["again"] != value["copy"] and Path(value["again"]).name == "project"
        assert value["seen"] == ["a.txt", "b.txt", "py"]
        assert value["link"] == sys.executable
        assert not answer.keep
        assert snapshot(viewed) == before
        worker.finish()


@pytest.mark.anyio
async def test_each_call_s_view_shows_the_folder_as_it_is_then(
    viewed: Path, anyio_backend: str
) -> None:
    """Between two calls the plan's next round changes the folder (a file replaced, one
    added): the second call's view shows it as it is, not as the first call's overlay
    saw it, however many workers the pool keeps."""
    if support().missing is not None:
        pytest.skip(f"no sandbox here: {support().missing}")
    from gategraph.runtime._calls._sandbox import SandboxPool

    code = (
        "import os\n"
        "def run(root, context):\n"
        "    copy = context.disposable_copy(root)\n"
        "    return [(copy / 'a.txt').read_text(), os.path.exists(copy / 'c.txt')]\n"
    )
    asked = request(code, resources={"root": viewed}, views=(str(viewed),), backend=anyio_backend)
    async with SandboxPool(size=8) as pool:
        first = await pool.call("check", asked)
        (viewed / "new.txt").write_text("new")
        os.replace(viewed / "new.txt", viewed / "a.txt")
        (viewed / "c.txt").write_text("c")
        second = await pool.call("check", asked)
    assert first.value == ["a", False], first
    assert second.value == ["new", True], second


def test_a_folder_with_a_mount_inside_gets_a_copy_not_a_view(
    open_worker: Any, folder: Path, viewed: Path
) -> None:
    """An overlay shows a folder's own files, not what is mounted in it: a folder holding
    something the worker hides (a database of gategraph's, behind /dev/null) is copied,
    and the copy shows it hidden."""
    database = viewed / "events.db"
    database.write_text("secret")
    worker = open_worker(views=(str(viewed),), hidden=(str(database),))
    assert worker.start().kind == "ready"
    code = (
        "def run(root, context):\n"
        "    copy = context.disposable_copy(root)\n"
        "    return [str(copy), (copy / 'events.db').read_text()]\n"
    )
    answer = worker.call(request(code, resources={"root": viewed}))
    copy, text = outcome_of(answer)["value"]
    assert "/views/" not in copy and text == ""


@pytest.mark.parametrize("name", ["upper", "work", "layers", "views"])
def test_a_folder_named_as_a_layer_gets_its_view(
    open_worker: Any, folder: Path, tmp_path: Path, name: str
) -> None:
    """The overlay's layers live apart from the views: no folder's name collides."""
    viewed = tmp_path / name
    viewed.mkdir()
    (viewed / "a.txt").write_text("a")
    worker = open_worker(views=(str(viewed),))
    assert worker.start().kind == "ready"
    code = "def run(root, context):\n    return str(context.disposable_copy(root))\n"
    answer = worker.call(request(code, resources={"root": viewed}))
    assert outcome_of(answer)["value"] == str(folder / "views" / "0" / name), answer


def test_a_folder_reached_through_a_link_gets_a_copy_not_a_view(
    open_worker: Any, folder: Path, viewed: Path, tmp_path: Path
) -> None:
    """A view is of a folder reached without a link (a link could lead anywhere): one
    reached through a link is copied instead."""
    link = tmp_path / "link"
    link.symlink_to(viewed)
    worker = open_worker(views=(str(link),))
    assert worker.start().kind == "ready"
    code = "def run(root, context):\n    return str(context.disposable_copy(root))\n"
    answer = worker.call(request(code, resources={"root": link}))
    copy = outcome_of(answer)["value"]
    assert "/views/" not in copy and Path(copy).name == "link", answer
