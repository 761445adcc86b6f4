"""Waiting for Ray tasks: one thread per event loop waits for all of them, in batches.

Ray's own ways of waiting for one task from async code cost about a third of a no-op
task: a worker thread blocked in ``ray.get`` per call, or a future per task whose
completion Ray reports from a thread of its own. ``ray.get`` of many tasks at once costs
nothing of the kind. So a call on Ray submits its task and hands it to this loop's
:class:`_Waiter`: a daemon thread that asks Ray which of the loop's tasks are done
(``ray.wait``), fetches their results together, and wakes their callers with one call into
the loop per batch. The thread ends when no task is left to wait for.

Ray is imported here only once a call runs on Ray (the ``ray`` extra).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    from collections.abc import Callable

    from anyio.lowlevel import EventLoopToken

__all__ = ["await_ray", "submit"]

_FIRST_WAIT: Final = 0.001
"""Seconds the waiter first waits for one of its tasks to end before it looks again for
tasks handed to it meanwhile; doubled while nothing happens, up to :data:`_LONGEST_WAIT`."""
_LONGEST_WAIT: Final = 0.01
"""The most a task handed to a busy waiter waits before the waiter watches it too."""

_ENTRY: list[Any] = []


def _entry(call: bytes) -> bytes:
    """In the Ray worker: the worker process's entry (``_call._process_entry``) over the
    pickled arguments, its outcome pickled. One ``bytes`` each way: Ray passes a bytes
    object for far less than the eight arguments it stands for (about 90 µs a task).
    Pickled as Ray pickles arguments (its cloudpickle): what a call gets or returns may be
    defined in ``__main__`` or be a lambda, as with Ray's own tasks."""
    from ray import cloudpickle

    from ._call import _process_entry

    return cloudpickle.dumps(_process_entry(*cloudpickle.loads(call)))  # type: ignore[no-any-return]


def submit(entry: tuple[Any, ...]) -> Any:
    """Start a Ray task running the worker process's entry with ``entry``; its ref."""
    import ray
    from ray import cloudpickle

    if not _ENTRY:
        # No retries: a validation's retries are the Max-N runtime's to decide, not Ray's.
        _ENTRY.append(ray.remote(max_retries=0)(_entry))
    return _ENTRY[0].remote(cloudpickle.dumps(entry))


class _Pending:
    """One task a caller waits for: set once its result (or Ray's error) is in."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class _Waiter:
    """The thread that waits for one event loop's Ray tasks."""

    def __init__(self, token: EventLoopToken) -> None:
        native: Any = token.native_token
        # Call into the loop from this thread without waiting: asyncio's loop (the token
        # of uvloop's too) or trio's token, each by its own thread-safe method.
        self.soon: Callable[..., object] = (
            getattr(native, "run_sync_soon", None) or native.call_soon_threadsafe
        )
        self.lock = threading.Lock()
        self.pending: dict[Any, _Pending] = {}
        self.thread: threading.Thread | None = None
        self.handed = False
        """A task was handed over since the thread last looked: it waits briefly again."""

    def watch(self, ref: Any) -> _Pending:
        pending = _Pending()
        with self.lock:
            self.pending[ref] = pending
            self.handed = True
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, daemon=True, name="gategraph-ray-waiter"
                )
                self.thread.start()
        return pending

    def forget(self, ref: Any) -> None:
        """Stop waiting for ``ref`` (its caller was cancelled and cancels the task)."""
        with self.lock:
            self.pending.pop(ref, None)

    def _run(self) -> None:
        import ray

        wait = _FIRST_WAIT
        while True:
            with self.lock:
                refs = list(self.pending)
                if not refs:
                    self.thread = None  # the next task handed over starts another
                    return
                if self.handed:
                    wait, self.handed = _FIRST_WAIT, False
            try:
                ready, _ = ray.wait(refs, num_returns=1, timeout=wait)
                if not ready:
                    wait = min(2 * wait, _LONGEST_WAIT)
                    continue
                wait = _FIRST_WAIT
                # Everything done by now, in one batch (its results fetched together).
                ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
                results = _results(ray, ready)
            except Exception as exc:
                # Ray itself failed (shut down, the cluster gone): every caller hears it,
                # rather than waiting for good.
                ready, results = refs, [(None, exc)] * len(refs)
            self._deliver(ready, results)

    def _deliver(self, ready: list[Any], results: list[tuple[Any, BaseException | None]]) -> None:
        batch = []
        with self.lock:
            for ref, result in zip(ready, results, strict=True):
                pending = self.pending.pop(ref, None)
                if pending is not None:  # else its caller was cancelled meanwhile
                    pending.value, pending.error = result
                    batch.append(pending)
        if not batch:
            return
        try:
            self.soon(_wake, batch)
        except RuntimeError:
            # The loop has ended (closed, or trio's RunFinishedError): nobody waits for
            # these any more. Forget them all, so the thread ends rather than waiting on
            # for a loop that is gone.
            with self.lock:
                self.pending.clear()


def _results(ray: Any, ready: list[Any]) -> list[tuple[Any, BaseException | None]]:
    """Each ready task's outcome, unpickled here (not on the event loop's thread), or the
    error Ray raises for it."""
    try:
        values = ray.get(ready)
    except Exception:
        # One of them failed (the batch's get raises its error): one by one, then.
        values = []
        for ref in ready:
            try:
                values.append(ray.get(ref))
            except Exception as exc:
                values.append(exc)
    found: list[tuple[Any, BaseException | None]] = []
    for value in values:
        if isinstance(value, BaseException):
            found.append((None, value))
            continue
        try:
            found.append((ray.cloudpickle.loads(value), None))
        except Exception as exc:  # an outcome this process cannot read (a class it lacks)
            found.append((None, exc))
    return found


def _wake(batch: list[_Pending]) -> None:
    for pending in batch:
        pending.done.set()


_WAITER: Final[anyio.lowlevel.RunVar[_Waiter]] = anyio.lowlevel.RunVar("gategraph_ray_waiter")


async def await_ray(ref: Any) -> Any:
    """The outcome of Ray task ``ref`` (:func:`submit`'s), once it is done; Ray's error
    for it if it failed.
    Cancelled, the caller cancels the task too (``ray.cancel(force=True)``: its worker
    process is ended, so nothing of the call runs on)."""
    try:
        waiter = _WAITER.get()
    except LookupError:
        waiter = _Waiter(anyio.lowlevel.current_token())
        _WAITER.set(waiter)
    pending = waiter.watch(ref)
    try:
        await pending.done.wait()
    except anyio.get_cancelled_exc_class():
        waiter.forget(ref)
        import ray

        ray.cancel(ref, force=True)
        raise
    if pending.error is not None:
        raise pending.error
    return pending.value
