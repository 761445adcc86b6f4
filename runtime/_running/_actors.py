"""A small actor kernel on anyio: mailboxes, ``tell`` and ``ask``, supervision.

Every actor lives in an :class:`ActorScope` (a task group), so nothing outlives the scope
that started it. An actor processes one message at a time from its mailbox (an anyio
memory object stream). A failure while handling a ``tell`` is reported to the scope's
supervisor; with the default supervisor it stops the scope and is raised from it as
:class:`ActorFailedError`. A failure while handling an ``ask`` goes back to the asker,
and the actor carries on.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from gategraph.runtime._base._exceptions import RuntimeFault
from gategraph.runtime._calls._invoke import propagates

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["Actor", "ActorFailedError", "ActorRef", "ActorScope", "open_actor_scope"]


class Actor:
    """Behaviour of an actor: subclass it and implement :meth:`receive`."""

    async def on_start(self) -> None:
        """Called once, in the actor's task, before the first message."""

    async def receive(self, message: Any) -> Any:
        """Handle one message; the return value is the reply to an ``ask``."""
        raise NotImplementedError(f"{type(self).__name__} must implement receive()")

    async def on_stop(self) -> None:
        """Called once when the mailbox is closed and drained, or the actor failed."""


class ActorFailedError(RuntimeFault):
    """An actor failed while handling a message nobody was waiting for."""

    def __init__(self, name: str, cause: BaseException) -> None:
        super().__init__(f"actor {name!r} failed: {type(cause).__name__}: {cause}")
        self.name = name
        self.cause = cause


class _Reply:
    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.value: Any = None
        self.error: Exception | None = None


class ActorRef:
    """The address of a running actor: send it messages with :meth:`tell` and :meth:`ask`."""

    __slots__ = ("_send", "name")

    def __init__(self, name: str, send: MemoryObjectSendStream[tuple[Any, _Reply | None]]):
        self.name = name
        self._send = send

    def tell(self, message: Any) -> None:
        """Send ``message`` without waiting; raises if the actor has stopped or is full."""
        try:
            self._send.send_nowait((message, None))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RuntimeFault(f"actor {self.name!r} has stopped") from None

    async def ask(self, message: Any) -> Any:
        """Send ``message`` and wait for the reply; an error in the handler is raised here."""
        reply = _Reply()
        try:
            await self._send.send((message, reply))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RuntimeFault(f"actor {self.name!r} has stopped") from None
        await reply.done.wait()
        if reply.error is not None:
            raise reply.error
        return reply.value

    def stop(self) -> None:
        """Close the mailbox: the actor handles what is queued, then stops."""
        self._send.close()

    def __repr__(self) -> str:
        return f"<ActorRef {self.name}>"


Supervisor = Callable[[ActorRef, Exception], None]


class ActorScope:
    """A supervisor's task group of actors. Create one with :func:`open_actor_scope`."""

    def __init__(self, task_group: TaskGroup, supervisor: Supervisor | None) -> None:
        self._task_group = task_group
        self._supervisor = supervisor
        self._refs: list[ActorRef] = []
        self.failures: list[ActorFailedError] = []
        """Failures reported to the default supervisor."""

    def spawn(self, actor: Actor, *, name: str, mailbox_size: float = math.inf) -> ActorRef:
        """Start ``actor`` in this scope and return its address."""
        send, receive = anyio.create_memory_object_stream[tuple[Any, _Reply | None]](mailbox_size)
        ref = ActorRef(name, send)
        self._refs.append(ref)
        self._task_group.start_soon(self._run, actor, ref, receive, name=f"actor:{name}")
        return ref

    def stop_all(self) -> None:
        """Close every mailbox; the actors drain them and stop."""
        for ref in self._refs:
            ref.stop()

    async def _run(
        self,
        actor: Actor,
        ref: ActorRef,
        receive: MemoryObjectReceiveStream[tuple[Any, _Reply | None]],
    ) -> None:
        try:
            async with receive:
                # Duck-typed actors (anything with receive()) may leave out the hooks.
                on_start = getattr(actor, "on_start", None)
                if on_start is not None:
                    await on_start()
                async for message, reply in receive:
                    try:
                        value = await actor.receive(message)
                    except BaseException as raised:
                        if propagates(raised):
                            raise
                        # SystemExit and the like fail the message, never the run.
                        exc = (
                            raised
                            if isinstance(raised, Exception)
                            else RuntimeFault(f"actor {ref.name!r} raised {raised!r}")
                        )
                        if reply is None:
                            self._report(ref, exc)
                            return
                        reply.error = exc
                        reply.done.set()
                        continue
                    if reply is not None:
                        reply.value = value
                        reply.done.set()
        except Exception as exc:  # on_start failed
            self._report(ref, exc)
        finally:
            on_stop = getattr(actor, "on_stop", None)
            if on_stop is not None:
                with anyio.CancelScope(shield=True):
                    await on_stop()

    def _report(self, ref: ActorRef, exc: Exception) -> None:
        ref.stop()
        if self._supervisor is not None:
            self._supervisor(ref, exc)
            return
        self.failures.append(ActorFailedError(ref.name, exc))
        self._task_group.cancel_scope.cancel()


@asynccontextmanager
async def open_actor_scope(supervisor: Supervisor | None = None) -> AsyncIterator[ActorScope]:
    """Open a scope for actors; on exit, mailboxes are closed and every actor has stopped.

    ``supervisor(ref, error)`` is told of each actor that failed handling a ``tell``;
    without one, the first failure cancels the scope and is raised as
    :class:`ActorFailedError`.
    """
    async with anyio.create_task_group() as task_group:
        scope = ActorScope(task_group, supervisor)
        try:
            yield scope
        finally:
            scope.stop_all()
    if scope.failures:
        raise scope.failures[0]
