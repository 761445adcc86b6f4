"""The actor kernel: mailboxes, tell and ask, supervision, structured lifetimes."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from gategraph.runtime._base._exceptions import RuntimeFault
from gategraph.runtime._running._actors import Actor, ActorFailedError, ActorRef, open_actor_scope

pytestmark = pytest.mark.anyio


class Counter(Actor):
    def __init__(self) -> None:
        self.total = 0
        self.started = False
        self.stopped = False

    async def on_start(self) -> None:
        self.started = True

    async def receive(self, message: Any) -> Any:
        if message == "boom":
            raise ValueError("boom")
        if message == "exit":
            raise SystemExit(3)
        if message == "get":
            return self.total
        self.total += message
        return self.total

    async def on_stop(self) -> None:
        self.stopped = True


async def test_tell_and_ask_in_order() -> None:
    """Messages are handled one at a time, in the order sent; ask returns the reply."""
    counter = Counter()
    async with open_actor_scope() as scope:
        ref = scope.spawn(counter, name="counter")
        for n in (1, 2, 3):
            ref.tell(n)
        assert await ref.ask("get") == 6
        assert await ref.ask(4) == 10
    assert counter.started and counter.stopped


async def test_ask_failure_goes_to_the_asker_and_the_actor_lives_on() -> None:
    """An exception while answering an ask is raised to the asker only."""
    async with open_actor_scope() as scope:
        ref = scope.spawn(Counter(), name="c")
        with pytest.raises(ValueError, match="boom"):
            await ref.ask("boom")
        assert await ref.ask(1) == 1


async def test_an_actor_calling_sys_exit_fails_the_message_not_the_run() -> None:
    """SystemExit in a handler reaches the asker as a RuntimeFault; the actor lives on."""
    async with open_actor_scope() as scope:
        ref = scope.spawn(Counter(), name="c")
        with pytest.raises(RuntimeFault, match=r"actor 'c' raised SystemExit\(3\)"):
            await ref.ask("exit")
        assert await ref.ask(1) == 1


async def test_tell_failure_is_reported_not_swallowed() -> None:
    """A failure nobody waits for stops the scope and is raised from it."""
    with pytest.raises(ActorFailedError) as info:
        async with open_actor_scope() as scope:
            ref = scope.spawn(Counter(), name="c")
            ref.tell("boom")
            await anyio.sleep_forever()
    assert info.value.name == "c"
    assert isinstance(info.value.cause, ValueError)


async def test_custom_supervisor_is_told() -> None:
    """A supervisor callback receives the failed actor and its error instead."""
    seen: list[tuple[ActorRef, Exception]] = []
    told = anyio.Event()

    def supervise(ref: ActorRef, exc: Exception) -> None:
        seen.append((ref, exc))
        told.set()

    async with open_actor_scope(supervise) as scope:
        ref = scope.spawn(Counter(), name="c")
        ref.tell("boom")
        other = scope.spawn(Counter(), name="d")
        assert await other.ask(2) == 2
        with anyio.fail_after(5):
            await told.wait()
    assert seen[0][0].name == "c"
    with pytest.raises(RuntimeFault, match="has stopped"):
        ref.tell(1)


async def test_nothing_outlives_the_scope() -> None:
    """Leaving the scope stops every actor after it drains its mailbox."""
    actors = [Counter() for _ in range(5)]
    async with open_actor_scope() as scope:
        refs = [scope.spawn(a, name=str(i)) for i, a in enumerate(actors)]
        for ref in refs:
            ref.tell(1)
    assert all(a.stopped and a.total == 1 for a in actors)
    with pytest.raises(RuntimeFault):
        await refs[0].ask("get")


async def test_cancellation_propagates_through_actors() -> None:
    """Cancelling the host cancels the actors; nothing catches the cancellation."""
    counter = Counter()

    class Sleeper(Actor):
        async def receive(self, message: Any) -> Any:
            await anyio.sleep_forever()

    with anyio.move_on_after(0.05) as cancel:
        async with open_actor_scope() as scope:
            ref = scope.spawn(Sleeper(), name="s")
            scope.spawn(counter, name="c")
            await ref.ask("x")
    assert cancel.cancelled_caught
    assert counter.stopped


async def test_receive_must_be_implemented() -> None:
    """An Actor without receive fails loudly when asked."""
    async with open_actor_scope() as scope:
        ref = scope.spawn(Actor(), name="bare")
        with pytest.raises(NotImplementedError, match="must implement receive"):
            await ref.ask(1)
