"""Calling a prepared tool from outside the engine, and the pieces each call goes through:
argument binding, wrapped tools and their transforms, the output router, what propagates."""

from __future__ import annotations

import contextvars
import functools
import io
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from gategraph.runtime import Tool, Validation
from gategraph.runtime._calls import _invoke as invoke
from gategraph.runtime._calls._call import _transform_function
from gategraph.runtime._calls._invoke import (
    _BufferRouter,
    _Router,
    own_capture,
    prepare,
    propagates,
    to_result,
)
from gategraph.runtime._data._results import ValidationResult


def prepared(config: dict[str, Any], *tools: Tool, isolation: str | None = None) -> Any:
    """Prepare a validation (or a tool) from its config, with ``tools`` to wrap."""
    kind = Tool if config.pop("tool", False) else Validation
    target = kind.from_config(config)
    by_name = {t.name: t for t in (*tools, target)}
    return prepare(target, by_name.__getitem__, isolation=isolation)  # type: ignore[arg-type]


def counter_tool() -> Tool:
    return Tool.from_config(
        {
            "name": "count",
            "read_only": True,
            "code": "def run(items=(), extra=None, **_):\n"
            "    return {'count': len(items), 'extra': extra}\n",
        }
    )


# -- a call outside an engine worker ------------------------------------------------------------


@pytest.mark.anyio
async def test_a_call_outside_the_engine_captures_its_own_output() -> None:
    """Called directly (no engine worker owns a capture slot), a call still keeps what it
    printed in its outcome, and the next call starts with nothing."""
    loud = prepared(
        {
            "name": "loud",
            "code": "import sys\nasync def run(**_):\n"
            "    print('hello')\n    print('careful', file=sys.stderr)\n"
            "    return {'passed': True}\n",
        }
    )
    quiet = prepared(
        {"name": "quiet", "code": "async def run(**_):\n    return {'passed': True}\n"}
    )
    outcome = await loud.call({}, {})
    assert outcome.ok
    assert outcome.captured == {"stdout": "hello\n", "stderr": "careful\n"}
    assert (await quiet.call({}, {})).captured is None
    assert invoke._capture.get() is None  # the call's own slot is gone with it


@pytest.mark.anyio
async def test_a_sync_call_outside_the_engine_runs_in_a_worker_thread() -> None:
    """The thread path works without an engine too: value, output and failure."""
    sync = prepared(
        {"name": "sync", "code": "def run(n, **_):\n    print(n)\n    return {'passed': n > 0}\n"},
        isolation="thread",
    )
    outcome = await sync.call({"n": 2}, {})
    assert outcome.ok and outcome.value == {"passed": True}
    assert outcome.captured == {"stdout": "2\n"}
    failing = await sync.call({"n": "x"}, {})
    assert not failing.ok and failing.error == "exception"
    assert "TypeError" in failing.message


@pytest.mark.anyio
async def test_a_single_resource_fills_a_single_slot_of_another_name(tmp_path: Path) -> None:
    """A tool with one slot called with one resource gets it, whatever the resource's name."""
    check = prepared(
        {
            "name": "where",
            "resource_slots": [{"name": "root"}],
            "code": "async def run(root, **_):\n    return {'passed': True, 'data': {'root': str(root)}}\n",
        }
    )
    outcome = await check.call({}, {"project": tmp_path})
    assert outcome.ok and outcome.value["data"] == {"root": str(tmp_path)}
    # With two resources, neither named like the slot, there is no guessing.
    outcome = await check.call({}, {"a": tmp_path, "b": tmp_path})
    assert not outcome.ok and "root" in outcome.message


# -- wrapped tools ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_argument_mapping_passes_literals_and_renames_arguments() -> None:
    """``$name`` takes the validation's argument; anything else is passed as it is."""
    wrapped = prepared(
        {
            "name": "enough",
            "wraps": "count",
            "argument_mapping": {"items": "$files", "extra": "fixed"},
            "transform": "{'passed': output['count'] >= 2, 'data': output}",
        },
        counter_tool(),
    )
    outcome = await wrapped.call({"files": ["a", "b"]}, {})
    assert outcome.ok
    # The graph's tool runs in the sandbox, the transform with it: its result comes back
    # judged already (with every field), as any sandboxed validation's does.
    assert to_result(outcome) == ValidationResult(True, "", {"count": 2, "extra": "fixed"})
    missing = await wrapped.call({}, {})
    assert not missing.ok and missing.error == "exception"
    assert missing.message == (
        "argument_mapping of 'enough': items takes $files, but the validation has no "
        "argument 'files'"
    )


@pytest.mark.anyio
async def test_a_sync_transform_may_return_an_awaitable() -> None:
    """A sync transform that hands back a coroutine has it awaited, still guarded."""
    wrapped = prepared(
        {
            "name": "later",
            "wraps": "count",
            "transform": "def transform(output):\n"
            "    async def decide():\n"
            "        return {'passed': output['count'] == 0}\n"
            "    return decide()\n",
        },
        counter_tool(),
    )
    outcome = await wrapped.call({}, {})
    assert outcome.ok and to_result(outcome) == ValidationResult(True)


@pytest.mark.anyio
async def test_an_async_transform_that_raises_fails_the_validation() -> None:
    """What an async transform raises is the validation's failure, named as the transform's."""
    wrapped = prepared(
        {
            "name": "sulky",
            "wraps": "count",
            "transform": "async def transform(tool_output):\n"
            "    raise ValueError(f\"no thanks: {tool_output['count']}\")\n",
        },
        counter_tool(),
    )
    outcome = await wrapped.call({}, {})
    assert not outcome.ok and outcome.error == "exception"
    assert outcome.message.startswith("transform of sulky raised ValueError: no thanks: 0")
    assert outcome.detail == {"exception_type": "ValueError"}


@pytest.mark.anyio
async def test_a_failing_wrapped_tool_fails_the_validation_saying_so() -> None:
    """The wrapped tool's own failure is passed on, prefixed with its name."""
    broken = Tool.from_config(
        {"name": "broken", "read_only": True, "code": "def run(**_):\n    raise OSError('gone')\n"}
    )
    wrapped = prepared({"name": "w", "wraps": "broken", "transform": "output"}, broken)
    outcome = await wrapped.call({}, {})
    assert not outcome.ok
    assert outcome.message.startswith("wrapped tool 'broken': broken raised OSError: gone")


def test_a_transform_whose_signature_cannot_be_read_gets_the_output_as_is() -> None:
    """``transform = dict`` (a builtin with no signature) is called with the output."""
    transform = _transform_function("w", "transform = dict")
    assert transform([("passed", True)]) == {"passed": True}


def test_a_transform_names_the_output_by_its_parameter() -> None:
    """``output`` and ``tool_output`` are passed by name; any other name positionally."""
    assert (
        _transform_function("w", "def transform(tool_output):\n    return tool_output + 1\n")(1)
        == 2
    )
    assert _transform_function("w", "def transform(result):\n    return result * 2\n")(2) == 4
    assert _transform_function("w", "tool_output == output")(5) is True


# -- the output router -----------------------------------------------------------------------


class Stream(io.StringIO):
    """A text stream that counts its flushes and has a binary side."""

    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0
        self.buffer = Buffer()

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


class Buffer(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


@pytest.fixture
def in_a_call() -> Iterator[Any]:
    """A context with a capture slot whose call is running; yields a way to run in it."""
    context = contextvars.copy_context()
    slot = context.run(own_capture)
    slot.captured = invoke.PENDING

    def call(func: Any, *args: Any) -> Any:
        return context.run(func, *args)

    call.slot = slot  # type: ignore[attr-defined]
    yield call


def test_the_router_passes_writes_outside_a_call_through(in_a_call: Any) -> None:
    """Code that is not a call writes to the real stream, flushes it, and sees its attributes."""
    stream = Stream()
    router = _Router(stream, 0)
    assert router.write("runtime says hi\n") == len("runtime says hi\n")
    router.writelines(["a\n", "b\n"])
    router.flush()
    assert stream.getvalue() == "runtime says hi\na\nb\n"
    assert stream.flushes == 1
    assert router.closed is False  # any other attribute is the stream's
    with pytest.raises(AttributeError):
        router._stream_copy  # noqa: B018 - private names are not forwarded


def test_the_router_sends_a_call_s_writes_to_its_capture(in_a_call: Any) -> None:
    """In a call, writes (lines too) are captured, flush is a no-op, and only text is taken."""
    stream = Stream()
    router = _Router(stream, 1)
    in_a_call(router.write, "one\n")
    in_a_call(router.writelines, ["two\n", "three\n"])
    in_a_call(router.flush)
    with pytest.raises(TypeError, match="write\\(\\) argument must be str, not bytes"):
        in_a_call(router.write, b"raw")
    assert stream.getvalue() == "" and stream.flushes == 0
    assert in_a_call.slot.take() == {"stderr": "one\ntwo\nthree\n"}


def test_the_binary_side_is_routed_the_same_way(in_a_call: Any) -> None:
    """``sys.stdout.buffer`` passes bytes through outside a call, captures them as text in one."""
    stream = Stream()
    router = _Router(stream, 0)
    buffer = router.buffer
    assert isinstance(buffer, _BufferRouter)
    assert buffer.write(b"outside\n") == len(b"outside\n")
    buffer.flush()
    assert stream.buffer.getvalue() == b"outside\n" and stream.buffer.flushes == 1
    assert in_a_call(buffer.write, b"inside \xff\n") == len(b"inside \xff\n")
    in_a_call(buffer.flush)
    assert stream.buffer.flushes == 1
    assert buffer.closed is False
    with pytest.raises(AttributeError):
        buffer._secret  # noqa: B018
    assert in_a_call.slot.take() == {"stdout": "inside \ufffd\n"}


# -- what propagates ---------------------------------------------------------------------------


def handler(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@pytest.mark.anyio
async def test_a_ctrl_c_is_told_from_the_call_s_own_under_a_wrapped_handler() -> None:
    """A SIGINT handler held in a functools.partial is unwrapped to tell where it raised."""
    previous = signal.signal(signal.SIGINT, functools.partial(handler))
    try:
        try:
            handler(signal.SIGINT, None)
        except KeyboardInterrupt as exc:
            from_handler = exc
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            own = exc
        assert propagates(from_handler)
        assert not propagates(own)
        # One that was never raised has no frames to tell by: taken for a Ctrl-C.
        assert propagates(KeyboardInterrupt())
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.anyio
async def test_cancellation_propagates_and_other_base_exceptions_do_not() -> None:
    """Only cancellation (and a person's Ctrl-C) is not a call's failure."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        try:
            await anyio.sleep(1)
        except anyio.get_cancelled_exc_class() as exc:
            assert propagates(exc)
            raise
    assert not propagates(SystemExit(3))
    assert not propagates(GeneratorExit())
    assert not propagates(ValueError())


# -- threads ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_worker_thread_runs_without_a_capture_slot() -> None:
    """Handed work from a task that captures nothing, a worker thread still runs it."""
    job = await invoke._threads.run(lambda: 6 * 7, None)
    assert job.ok and job.value == 42
    failing = await invoke._threads.run(lambda: 1 / 0, None)
    assert not failing.ok and isinstance(failing.value, ZeroDivisionError)
