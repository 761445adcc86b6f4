"""``isolation: sandbox``, the parent's side: a pool of worker processes confined by the
kernel (:mod:`.._base._kernel`), each running one call at a time (:mod:`._sandbox_worker`).

A worker is started before it is needed where the engine knows it will be (``prewarm``),
returned to the pool after a clean call, and killed — with every process it started, as
they cannot leave its process group — when a call times out or is cancelled, when it left
something running, or when it dies. A worker that dies during a call (a signal, running
out of memory or CPU seconds) is an infrastructure fault of that call only (``unavailable``,
retried on the plan's budget); the run goes on.

Fail closed: :func:`require` raises a :class:`ConfigError` naming what this machine lacks,
and a worker that cannot confine itself refuses to run anything.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import anyio
import msgspec
from anyio.streams.buffered import BufferedByteReceiveStream
from gategraph.runtime._base import _kernel
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._kernel import SandboxLimits, hidden_now, kept_out
from gategraph.runtime._data._maxn import UNAVAILABLE
from gategraph.runtime._data._results import ResultError

from ._readonly import unguarded
from ._sandbox_worker import _HEADER, MAX_ANSWER, Answer, death

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from anyio.abc import Process

    from ._call import Outcome, SandboxRequest

__all__ = ["SandboxPool", "current_pool", "require", "sandbox_pool"]

_START_TIMEOUT: Final = 60.0
"""Seconds a new worker has to confine itself and say it is ready."""
_SPARE_WAIT: Final = _START_TIMEOUT
"""Seconds a call waits for a spare on its way before it starts a worker of its own."""
_ANSWER: Final = msgspec.msgpack.Decoder(Answer)
_PASSED_ON: Final = frozenset(
    {
        *("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM"),
        *("PYTHONPATH", "PYTHONHOME", "PYTHONUTF8", "PYTHONIOENCODING", "VIRTUAL_ENV"),
    }
)
"""The environment variables a worker inherits (and the locale's ``LC_*``): what programs
need to run, none of the secrets (API keys, tokens) a parent's environment may hold."""
_COMMAND: Final = "from gategraph.runtime._calls._sandbox_worker import main; main()"


def require(where: str = "isolation") -> None:
    """Refuse, with one line naming what is missing, where the sandbox cannot be had."""
    missing = _kernel.support().missing
    if missing is not None:
        raise ConfigError.at(where, f"sandbox: {missing}")


_Owner = tuple[str, str | None, str | None, bool, bool]


class _Worker:
    __slots__ = (
        "answers",
        "confined",
        "folder",
        "hidden",
        "owner",
        "process",
        "shared",
        "views",
        "warm",
    )

    def __init__(self, process: Process, folder: str) -> None:
        self.process = process
        self.folder = folder
        self.confined = False
        """Whether it was told what it is for, and confined itself to it; until then a
        spare, which any call may take."""
        self.warm = False
        """Whether it said ``spare`` (its imports done) and that answer was read."""
        self.views: tuple[str, ...] = ()
        """The folders it holds a copy-on-write view of (:class:`.._base._kernel.View`): it runs
        one call, which asked for exactly these."""
        self.shared: tuple[str, ...] = ()
        """The folders outside its own it may change (a work tool's resources): it runs
        only calls that may change exactly these."""
        self.hidden: frozenset[tuple[str, int, int, int]] = frozenset()
        """What it hides (:func:`.._base._kernel.hidden_now`): it runs no call once something of
        gategraph's own it must not see exists that it does not hide."""
        self.owner: _Owner | None = None
        """The validation it loaded (name, entrypoint, code, guarded, network): it runs no
        other (a worker confined without the network stays so).
        Each call runs in a child of the worker and ends with it; what the validation's
        code did while it was loaded (once, before any call) can only sway that
        validation's own verdicts, which it decides anyway."""
        assert process.stdout is not None
        self.answers = BufferedByteReceiveStream(process.stdout)

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(_HEADER.pack(len(data)) + data)

    async def receive(self) -> Answer:
        size = _HEADER.unpack(await self.answers.receive_exactly(_HEADER.size))[0]
        if size > MAX_ANSWER:
            raise _Garbled(f"an answer of {size} bytes")
        try:
            return _ANSWER.decode(await self.answers.receive_exactly(size))
        except msgspec.DecodeError as exc:
            raise _Garbled(str(exc)) from None

    async def kill(self) -> None:
        """End the worker and every process it started; remove its folder."""
        with anyio.CancelScope(shield=True), unguarded():
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass  # gone already
            await self.process.wait()
            await self.process.aclose()
            await anyio.to_thread.run_sync(shutil.rmtree, self.folder, True)

    def death(self) -> str:
        code = self.process.returncode
        return "it stopped answering" if code is None else death(code)


class _Garbled(Exception):
    """A worker's answer could not be read: the call wrote into its worker's channel."""


class _Unusable(Exception):
    """A folder the call was to change cannot be given to it (gone, or a link now)."""


class SandboxPool:
    """Sandboxed workers for the calls of one run. Use it as an async context manager (it
    owns the task group that starts workers ahead of need)."""

    def __init__(self, limits: SandboxLimits | None = None, *, size: int | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.size = size or os.cpu_count() or 1
        self._limiter = anyio.CapacityLimiter(self.size)
        self._idle: list[_Worker] = []
        self._group: anyio.abc.TaskGroup | None = None
        self._closed = False
        self._starting = 0
        self._wanted = 0
        """How many calls are expected soon that a spare would serve: no more spares are
        started than that (each costs a process's start, on cores a run is using)."""
        self._arrival: anyio.Event | None = None

    async def __aenter__(self) -> SandboxPool:
        require()
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._group is not None
        self._closed = True
        self._group.cancel_scope.cancel()
        try:
            # Its tasks only start workers, and say nothing of what fails: an error of the
            # block goes on as it is, not wrapped in a group of this pool's.
            await self._group.__aexit__(None, None, None)
        finally:
            idle, self._idle = self._idle, []
            for worker in idle:
                await worker.kill()

    def prewarm(self, count: int) -> None:
        """Expect ``count`` calls soon: have as many spares (no more than the pool's
        size), starting the missing ones now; they import what a call needs while the run
        goes on."""
        self._wanted = count
        self._top_up()

    def _top_up(self) -> None:
        if self._group is None or self._closed:
            return
        # Never past the pool's size, counting the workers busy with a call: a spare that
        # would only push a run's own idle worker out is no help.
        have = len(self._idle) + self._starting + int(self._limiter.borrowed_tokens)
        spares = sum(not w.confined for w in self._idle) + self._starting
        for _ in range(max(0, min(self._wanted - spares, self.size - have))):
            self._starting += 1
            self._group.start_soon(self._add_idle, False)

    async def fill(self, count: int) -> None:
        """Start spares until ``count`` (no more than the pool's size) are idle, and wait
        until each has imported what a call needs: for a caller that wants the first calls
        not to wait for a start (a benchmark, a server about to take requests)."""
        # The spares still importing leave the pool while they are waited for here: a call
        # that took one would read its answers too.
        cold = [w for w in self._idle if not w.confined and not w.warm]
        self._idle = [w for w in self._idle if w not in cold]
        self._starting += len(cold)
        async with anyio.create_task_group() as group:
            for worker in cold:
                group.start_soon(self._add_idle, True, worker)
            spares = sum(not w.confined for w in self._idle) + len(cold)
            for _ in range(max(0, min(count, self.size) - spares)):
                self._starting += 1
                group.start_soon(self._add_idle, True)

    async def _add_idle(self, warm: bool, worker: _Worker | None = None) -> None:
        try:
            if worker is None:
                worker = await self._spawn()
            if warm:
                await self._warm(worker)
        except (OSError, _Garbled, anyio.EndOfStream, anyio.IncompleteRead):
            return  # the call that needs a worker starts one itself, and says what fails
        finally:
            # (A waiter runs only once this task next waits: after the append below.)
            self._starting -= 1
            self._arrived()
        if self._closed:
            await worker.kill()
        else:
            self._idle.append(worker)

    def _arrived(self) -> None:
        """Wake the calls waiting for a spare on its way (:meth:`_take`)."""
        if self._arrival is not None:
            self._arrival.set()
            self._arrival = None

    async def _spawn(self) -> _Worker:
        """A spare: a worker started (it imports what a call needs), confined to nothing
        yet."""
        with unguarded():
            from ._context import private_folder

            folder = os.fspath(private_folder("sandbox"))
        environment = {
            **{k: v for k, v in os.environ.items() if k in _PASSED_ON or k.startswith("LC_")},
            "TMPDIR": folder,
            "TMP": folder,
            "TEMP": folder,
            "XDG_CACHE_HOME": os.path.join(folder, ".cache"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        command = [
            sys.executable,
            "-P",
            "-c",
            _COMMAND,
            folder,
            str(os.getpid()),
            json.dumps(dataclasses.asdict(self.limits)),
        ]
        try:
            # Shielded: a start cancelled midway (the pool closing while it prewarms) would
            # leave a process nobody waits for (trio abandons the thread that starts it).
            with unguarded(), anyio.CancelScope(shield=True):
                process = await anyio.open_process(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    cwd=folder,
                    env=environment,
                    start_new_session=True,
                )
        except BaseException:
            with unguarded():
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return _Worker(process, folder)

    async def _starting_answer(self, worker: _Worker, data: bytes | None = None) -> Answer:
        """What a worker says as it starts (after ``data`` is sent, if given), within the
        time a start may take; the worker is killed if it says nothing."""
        try:
            if data is not None:
                await worker.send(data)
            with anyio.fail_after(_START_TIMEOUT):
                return await worker.receive()
        except BaseException:
            await worker.kill()
            raise

    async def _warm(self, worker: _Worker, data: bytes | None = None) -> None:
        """Wait for a spare to say it has imported what a call needs (after ``data`` is
        sent, if given)."""
        answer = await self._starting_answer(worker, data)
        if answer.kind != "spare":
            await worker.kill()
            raise _Garbled(f"an answer of kind {answer.kind!r}")
        worker.warm = True

    async def _confine(
        self, worker: _Worker, shared: tuple[str, ...], views: tuple[str, ...]
    ) -> _Worker:
        """Tell a spare what it is for: it confines itself to exactly that (it hides what
        of gategraph's own exists now), and says it is ready."""
        kept = kept_out()
        worker.hidden = hidden_now(kept)
        worker.shared, worker.views, worker.confined = shared, views, True
        purpose = pickle.dumps((list(sys.path), sorted(kept), shared, views))
        if worker.warm:
            answer = await self._starting_answer(worker, purpose)
        else:
            # Sent at once: a spare still importing reads it as soon as it says `spare`.
            await self._warm(worker, purpose)
            answer = await self._starting_answer(worker)
        if answer.kind != "ready":
            await worker.kill()
            if answer.kind == "unusable":
                raise _Unusable(answer.text)
            raise ConfigError.at("isolation", f"sandbox: {answer.text}")
        return worker

    async def _take(
        self, owner: _Owner, shared: tuple[str, ...], views: tuple[str, ...] = ()
    ) -> _Worker:
        """An idle worker that ran this tool before, else a spare (or a fresh one)
        confined now to change exactly ``shared`` besides its own folder, with views of
        exactly ``views``."""
        for index in range(len(self._idle) - 1, -1, -1):
            worker = self._idle[index]
            if worker.owner != owner or (worker.shared, worker.views) != (shared, views):
                continue
            del self._idle[index]
            if worker.process.returncode is None and hidden_now(kept_out()) <= worker.hidden:
                return worker
            # Died while idle (killed from outside: not this call's), or started before
            # gategraph opened a database it would see.
            await worker.kill()
        while True:
            spares = [w for w in self._idle if not w.confined]
            if not spares:
                if not self._starting or self._closed:
                    break
                # A spare is on its way: wait for it rather than start one more process
                # (within the time a start may take: one that never comes is not waited
                # for again).
                if self._arrival is None:
                    self._arrival = anyio.Event()
                with anyio.move_on_after(_SPARE_WAIT) as waited:
                    await self._arrival.wait()
                if waited.cancelled_caught:
                    break
                continue
            # The one started first is the likeliest to have finished its imports.
            worker = spares[0]
            self._idle.remove(worker)
            if worker.process.returncode is None:
                return await self._confine(worker, shared, views)
            await worker.kill()  # died while it waited (killed from outside)
        return await self._confine(await self._spawn(), shared, views)

    async def _keep(self, worker: _Worker) -> None:
        """Return a worker to the pool; past the pool's size, the longest idle goes."""
        self._idle.append(worker)
        while len(self._idle) > self.size:
            # The longest idle of another validation's, before a fresh one.
            used = [i for i, w in enumerate(self._idle[:-1]) if w.owner is not None]
            await self._idle.pop(used[0] if used else 0).kill()

    async def call(self, name: str, request: SandboxRequest) -> Outcome:
        """Run one call in a worker."""
        from ._call import Outcome

        try:
            payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            return Outcome(
                False,
                error=ResultError.EXCEPTION,
                message=f"{name}: its arguments cannot be copied into the sandbox: {exc}",
            )
        # Only this validation's calls ever share the worker, each plan's in a process of
        # its own: what a call leaves behind stays with its plan, and what the validation's
        # code did when the worker loaded it reaches no other validation.
        owner = (request.name, request.entrypoint, request.code, request.guarded, request.network)
        home = _home_within(request.writable)
        if home is not None:
            return Outcome(
                False,
                error=ResultError.EXCEPTION,
                message=f"{name} cannot be given the folder it changes: {home}",
            )
        try:
            return await self._call(name, payload, owner, request)
        finally:
            # Outside the call's slot: the worker it killed is not counted as busy, so the
            # next expected call's spare can start.
            self._top_up()

    async def _call(
        self, name: str, payload: bytes, owner: _Owner, request: SandboxRequest
    ) -> Outcome:
        from ._call import Outcome

        async with self._limiter:
            try:
                worker = await self._take(owner, request.writable, request.views)
            except _Unusable as exc:
                # The call's own fault (a folder its plan changed), not the machine's.
                return Outcome(
                    False,
                    error=ResultError.EXCEPTION,
                    message=f"{name} cannot be given the folder it changes: {exc}",
                )
            except (OSError, _Garbled, anyio.EndOfStream, anyio.IncompleteRead) as exc:
                # No process to be had (out of processes or memory), or one that died
                # before it said it was ready: this call's infrastructure fault.
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                return Outcome(
                    False,
                    error=UNAVAILABLE,
                    message=f"no sandboxed worker could be started for {name}: "
                    f"{why or 'it ended before it was ready'}",
                )
            if worker.owner is None:
                # A spare taken: one call fewer to expect, and the next one's spare, if
                # one more is expected, started now.
                self._wanted = max(0, self._wanted - 1)
                self._top_up()
            worker.owner = owner
            keep = False
            try:
                await worker.send(payload)
                answer = await worker.receive()
                if answer.kind != "done":
                    raise _Garbled(f"an answer of kind {answer.kind!r}")
                try:
                    outcome = msgspec.convert(answer.outcome, Outcome)
                except msgspec.ValidationError as exc:
                    raise _Garbled(f"not an outcome: {exc}") from None
                keep = answer.keep
            except _Garbled as exc:
                return Outcome(
                    False,
                    error=ResultError.MALFORMED,
                    message=f"{name} wrote into its sandbox's answer channel ({exc})",
                )
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError):
                with anyio.CancelScope(shield=True):
                    await worker.process.wait()
                return Outcome(
                    False,
                    error=UNAVAILABLE,
                    message=f"the sandboxed worker running {name} died during the call: "
                    f"{worker.death()}",
                )
            finally:
                # A worker with views runs one call (its views keep what they saw), also
                # where its answer says otherwise.
                if keep and not worker.views and not self._closed:
                    await self._keep(worker)
                else:
                    await worker.kill()
        return outcome


def _home_within(folders: tuple[str, ...]) -> str | None:
    """Why a call may not change ``folders``: one holds gategraph's own files (its home:
    catalog, event log, other plans' copies), which code changing the folder could move
    aside and replace (its credentials and records with them). None if none does."""
    from gategraph.runtime._base._home import default_catalog_path

    if not folders:
        return None
    homes = {os.path.dirname(kept) for kept in kept_out() if os.path.isfile(kept)}
    homes.add(os.path.realpath(default_catalog_path().parent))
    for folder in folders:
        for home in sorted(homes):
            if home == folder or home.startswith(folder + os.sep):
                return (
                    f"{folder} holds gategraph's own files ({home}), which a tool changing "
                    "the folder could replace; keep gategraph's home (GATEGRAPH_HOME) outside "
                    "the folders plans change in place, or declare the node's isolation to "
                    "trust the tool"
                )
    return None


_pool: Final[contextvars.ContextVar[SandboxPool | None]] = contextvars.ContextVar(
    "gategraph_sandbox_pool", default=None
)


def current_pool() -> SandboxPool | None:
    """The pool of the run this task belongs to, if it opened one."""
    return _pool.get()


@asynccontextmanager
async def sandbox_pool(
    prewarm: int = 0, limits: SandboxLimits | None = None
) -> AsyncIterator[SandboxPool]:
    """Open a pool for the calls made in this context (the engine opens one per run)."""
    async with SandboxPool(limits) as pool:
        token = _pool.set(pool)
        try:
            pool.prewarm(prewarm)
            yield pool
        finally:
            _pool.reset(token)
