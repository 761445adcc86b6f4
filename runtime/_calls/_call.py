"""One call of a tool's code, in whichever process it runs: what it returns
(:class:`Outcome`), how its output is captured, and the entries a worker process runs
(:func:`_process_entry` for a process or Ray worker, :func:`sandbox_outcome` for a kernel
sandbox's worker, from a :class:`SandboxRequest`).

This is what the isolation levels share with :mod:`._invoke`, which picks one of them for
a call and prepares the call: they import this module, never the dispatcher above them, so
a worker process starts without the dispatcher's imports.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import queue
import selectors
import sys
import threading
import traceback
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import msgspec
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._sigint import is_ctrl_c
from gategraph.runtime._data._results import ResultError, coerce_result

from ._context import ToolContext, die_with_parent
from ._frozen import changed as changed_since
from ._frozen import fingerprint
from ._readonly import (
    Guard,
    ReadOnlyViolationError,
    enter,
    enter_process,
    guarded,
    leave,
    unguarded,
)

if TYPE_CHECKING:
    import contextvars
    from collections.abc import Callable, Mapping


__all__ = [
    "CAPTURE_LIMIT",
    "Outcome",
    "OutputTails",
    "SandboxRequest",
    "changed_what_it_judges",
    "exception_outcome",
    "resolve_entrypoint",
    "run_captured",
    "sandbox_network",
    "sandbox_outcome",
]


CAPTURE_LIMIT: Final = 8192
"""How much of a call's stdout and of its stderr is kept: the last this many characters."""


_INJECTED: Final = ("artifact", "context", "inputs")


class Outcome(msgspec.Struct):
    """What one call produced: a value, or the kind of failure and why."""

    ok: bool
    value: Any = None
    error: str | None = None
    """A :class:`ResultError` value when the call failed."""
    message: str = ""
    detail: dict[str, Any] | None = None
    captured: dict[str, str] | None = None
    """What the call wrote: ``{"stdout": ..., "stderr": ...}`` (streams it wrote to only)."""


def resolve_entrypoint(
    entrypoint: str, *, field: str = "entrypoint", any_object: bool = False
) -> Callable[..., Any]:
    """Import ``"package.module:attr.path"`` and return the callable it names (whatever
    it names, with ``any_object``).

    Whatever importing raises, ``SystemExit`` included, is a :class:`ConfigError` at
    ``field``; only a person's Ctrl-C propagates.
    """
    module_name, _, attr_path = entrypoint.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except BaseException as exc:
        if _interrupts(exc):
            raise
        raise ConfigError.at(field, f"cannot import {module_name!r}: {_describe(exc)}") from None
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError.at(field, f"{module_name!r} has no attribute {attr_path!r}") from None
        except BaseException as exc:  # a module's __getattr__, a property: their failure
            if _interrupts(exc):
                raise
            raise ConfigError.at(
                field, f"looking up {attr_path!r} in {module_name!r} raised {_describe(exc)}"
            ) from None
    if not callable(target) and not any_object:
        raise ConfigError.at(field, f"{entrypoint!r} is not callable")
    return target  # type: ignore[no-any-return]


def _inline_function(
    name: str, code: str, function: str, *, field: str = "code", what: str | None = None
) -> Callable[..., Any]:
    """Run inline ``code`` and return the ``function`` it defines; ``what`` names the code
    in messages (default: ``inline code of NAME``).

    An ``Exception`` the code raises while loading is left to the caller, which knows what
    the code is for (:func:`prepare` makes it a :class:`ConfigError`; a worker process
    reports it as the call's failure). Any other ``BaseException`` (``sys.exit()`` at the
    top level) would end the program: it is a :class:`ConfigError` at ``field`` here.
    """
    what = what or f"inline code of {name!r}"
    namespace: dict[str, Any] = {"__name__": f"gategraph.inline.{name}"}
    try:
        exec(compile(code, f"<{name}>", "exec"), namespace)
    except BaseException as exc:
        if isinstance(exc, Exception) or _interrupts(exc):
            raise
        raise ConfigError.at(field, f"{what} raised {_describe(exc)} while loading") from None
    target = namespace.get(function)
    if not callable(target):
        raise ConfigError.at(field, f"{what} must define `{function}(...)`")
    return target  # type: ignore[no-any-return]


def _interrupts(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a tool is loaded, is a person's Ctrl-C (it propagates).

    Loading is synchronous: no cancellation can arrive in it, so a ``CancelledError``
    raised there is the loaded code's own, a failure like ``SystemExit``.
    """
    return isinstance(exc, KeyboardInterrupt) and is_ctrl_c(exc)


_OUTPUT_NAMES: Final = ("output", "tool_output")


class _ImpureTransform(ConfigError):
    """A transform's top level attempted what a transform may not (a write, say)."""


def _transform_function(name: str, source: str) -> Callable[[Any], Any]:
    """The transform of a wrapped validation, as a function of the wrapped tool's output.

    seed 000, "Tool Wrapping": the transform receives ``tool_output``. An expression sees
    the output as ``output`` and as ``tool_output``; ``def transform(...)`` gets it by the
    name of its parameter when that is one of the two, else as its first argument.
    """
    try:
        expression = compile(source, f"<transform of {name}>", "eval")
    except SyntaxError:
        pass
    except ValueError as exc:  # null bytes in the source
        raise ConfigError.at("transform", f"the transform of {name!r}: {exc}") from None
    else:
        return lambda output: eval(expression, {"output": output, "tool_output": output})
    # A transform must be pure, and its code is the graph's: it is held to that while it
    # loads too (what its top level does runs here, in gategraph's own process).
    guard = Guard(f"the transform of {name!r}", pure=True)
    try:
        with guarded(guard):
            function = _inline_function(
                f"{name}.transform",
                source,
                "transform",
                field="transform",
                what=f"the transform of {name!r}",
            )
    except Exception as exc:  # an import that fails, a syntax error, a refused write ...
        if guard.violation is None:
            if isinstance(exc, ConfigError):
                raise  # says what is wrong already (no `transform`, or sys.exit() loading)
            raise ConfigError.at(
                "transform", f"the transform of {name!r} failed to load: {_describe(exc)}"
            ) from None
    if guard.violation is not None:
        # Even where the refusal went uncaught and failed the load: it is the reason.
        raise _ImpureTransform.at(
            "transform",
            f"the transform of {name!r} is not pure: while it loaded, {guard.violation} "
            "was refused",
        )
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return function
    by_name = tuple(
        n
        for n in _OUTPUT_NAMES
        if n in parameters and parameters[n].kind is not inspect.Parameter.POSITIONAL_ONLY
    )
    if not by_name:
        return function
    if inspect.iscoroutinefunction(function):

        async def call_async(output: Any) -> Any:
            return await function(**dict.fromkeys(by_name, output))

        return call_async
    return lambda output: function(**dict.fromkeys(by_name, output))


# -- what propagates ---------------------------------------------------------------------------


def _describe(exc: BaseException) -> str:
    """``Type: text`` for an exception, ``Type(args)`` for other ``BaseException`` subclasses
    (``SystemExit(3)``), even when the exception's own ``__str__`` fails."""
    try:
        return f"{type(exc).__name__}: {exc}" if isinstance(exc, Exception) else repr(exc)
    except Exception:
        return type(exc).__name__


# -- output capture ----------------------------------------------------------------------------


_STREAMS: Final = ("stdout", "stderr")


def _run_on_own_loop(backend: str, func: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``await func(*args, **kwargs)`` on an event loop of its own, in this thread (a worker
    thread, or a worker process's), on ``backend``: the one its caller runs on.

    Not ``anyio.run``: a worker thread runs in a copy of its caller's context, whose
    "current async library" would make anyio refuse to start a loop.
    """
    with unguarded():
        # Importing the backend is the runtime's doing, not the call's (importing trio
        # runs `ldconfig`): in a fresh worker process it happens here, inside the guard.
        if backend == "trio":
            import trio
        else:
            import asyncio
    if backend == "trio":
        return trio.run(_call_async, func, args, kwargs)
    return asyncio.run(_call_async(func, args, kwargs))


async def _call_async(func: Callable[..., Any], args: tuple[Any, ...], kwargs: Any) -> Any:
    return await func(*args, **kwargs)


def _is_async(func: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - async __call__ on an instance
    )


class _Signature:
    """What a callable accepts, read once."""

    __slots__ = ("injected", "is_async", "names", "varkw")

    def __init__(self, func: Callable[..., Any]) -> None:
        self.is_async = _is_async(func)
        try:
            params = inspect.signature(func).parameters
        except (TypeError, ValueError):
            params = MappingProxyType({})
        self.varkw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.names = frozenset(params)
        self.injected = tuple(n for n in _INJECTED if n in params)


def _bind(
    sig: _Signature,
    slots: tuple[str, ...],
    arguments: Mapping[str, Any],
    resources: Mapping[str, Any],
    artifact: Any,
    inputs: Mapping[str, Any] | None,
    context: ToolContext,
) -> dict[str, Any]:
    """Build the keyword arguments: configured ones, resource slots, then injected values."""
    kwargs = dict(arguments)
    if slots:
        for slot in slots:
            if slot in resources:
                kwargs[slot] = resources[slot]
            elif len(resources) == 1 and len(slots) == 1:
                kwargs[slot] = next(iter(resources.values()))
    if sig.injected or sig.varkw:
        injected = {
            "artifact": artifact,
            "context": context,
            "inputs": inputs if inputs is not None else {},
        }
        for name in sig.injected:
            kwargs[name] = injected[name]
        if sig.varkw:
            for name in _INJECTED:
                kwargs.setdefault(name, injected[name])
    return kwargs


def _transform_failure(guard: Guard, outcome: Outcome) -> Outcome:
    """A transform that attempted an impure operation fails for it, even if it caught it."""
    if guard.violation is not None:
        return Outcome(
            False,
            error=ResultError.READ_ONLY_VIOLATION,
            message=f"{guard.what} is not pure: {guard.violation}",
        )
    return outcome


def exception_outcome(name: str, exc: BaseException) -> Outcome:
    if isinstance(exc, ReadOnlyViolationError):
        return Outcome(False, error=ResultError.READ_ONLY_VIOLATION, message=str(exc))
    frames = traceback.extract_tb(exc.__traceback__, limit=-1)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return Outcome(
        False,
        error=ResultError.EXCEPTION,
        message=f"{name} raised {_describe(exc)}{where}",
        detail={"exception_type": type(exc).__name__},
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


# -- the worker process's side -----------------------------------------------------------------


_DRAIN_GRACE: Final = 1.0
"""Seconds to wait for the last of a call's output once it returned. Longer only when a
process the call started still holds the output open."""


class _Reader:
    """A daemon thread that drains the pipes of one capture at a time, kept for the next.

    Starting a thread per call cost more than the rest of a worker process's call (about
    65 µs of its 200). A reader still draining a capture when the next one starts (a
    process the last call started holds the output open) is simply not idle: the next
    capture gets another reader.
    """

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[_FdCapture, list[int]]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True, name="gategraph-output")
        self.thread.start()

    def _serve(self) -> None:
        while True:
            capture, readers = self.jobs.get()
            try:
                capture._read(readers)
            except Exception:
                # Out of descriptors for its selector, say: this capture is lost (the call
                # runs on, its output unkept) and this reader ends, never to be reused.
                for fd in readers:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                capture.drained.set()
                return
            # Idle again before the capture hears it is drained: the call that stopped it
            # finds this reader for its next one.
            _IDLE_READERS.append(self)
            capture.drained.set()


_IDLE_READERS: list[_Reader] = []
"""The readers with nothing to drain (appended and popped whole: atomic under the GIL)."""
# A forked child has none of its parent's threads: their readers are not its.
os.register_at_fork(after_in_child=_IDLE_READERS.clear)


class OutputTails:
    """The last :data:`CAPTURE_LIMIT` bytes a process wrote to descriptors 1 and 2 during
    one call, and how many earlier ones were not kept: fed by whoever drains the pipes (a
    worker process's reader thread, or a sandboxed child's worker)."""

    __slots__ = ("dropped", "tails")

    def __init__(self) -> None:
        self.tails = (bytearray(), bytearray())
        self.dropped = [0, 0]

    def add(self, index: int, data: bytes) -> None:
        """Keep what stream ``index`` (0 for descriptor 1, 1 for 2) wrote."""
        tail = self.tails[index]
        tail += data
        if len(tail) > 2 * CAPTURE_LIMIT:
            self.dropped[index] += len(tail) - CAPTURE_LIMIT
            del tail[:-CAPTURE_LIMIT]

    def result(self) -> dict[str, str] | None:
        """The call's ``captured``: ``{"stdout": ..., "stderr": ...}`` for the streams it
        wrote to, or ``None``."""
        found = {}
        for index, name in enumerate(_STREAMS):
            data = bytes(self.tails[index][-CAPTURE_LIMIT:])
            dropped = self.dropped[index] + len(self.tails[index]) - len(data)
            if data or dropped:
                text = data.decode("utf-8", "replace")
                found[name] = f"[{dropped} earlier bytes not kept]\n{text}" if dropped else text
        return found or None


class _FdCapture:
    """Capture file descriptors 1 and 2 of this process (and ``sys.stdout``/``sys.stderr``,
    which write to them) during one call, keeping the last :data:`CAPTURE_LIMIT` bytes of
    each; descriptor 0 reads nothing meanwhile.

    Only for a process that runs one call at a time (a worker process): descriptors belong
    to the whole process. In an anyio worker process descriptors 0 and 1 are also the pipes
    its commands and answers travel through: output that reached them, or a command that
    read them, would break the worker.
    """

    def __init__(self) -> None:
        self.tails = OutputTails()
        self.saved: list[int] = []
        self.streams: tuple[Any, Any] = (sys.stdout, sys.stderr)
        self.reader: threading.Thread | None = None
        """The thread draining this capture (a :class:`_Reader`'s)."""
        self.drained = threading.Event()

    def start(self) -> None:
        for stream in self.streams:
            if stream is not None:
                stream.flush()
        self.saved = [os.dup(0), os.dup(1), os.dup(2)]
        readers: list[int] = []
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.close(null)
            for fd in (1, 2):
                read_end, write_end = os.pipe()
                readers.append(read_end)
                os.dup2(write_end, fd)
                os.close(write_end)
        except OSError:
            # Out of descriptors midway: put every descriptor back, above all fd 1, where
            # the worker answers its parent, and let the call run uncaptured.
            for fd, saved in enumerate(self.saved):
                os.dup2(saved, fd)
                os.close(saved)
            for read_end in readers:
                os.close(read_end)
            raise
        sys.stdout = open(1, "w", 1, "utf-8", "replace", closefd=False)
        sys.stderr = open(2, "w", 1, "utf-8", "replace", closefd=False)
        reader = _IDLE_READERS.pop() if _IDLE_READERS else None
        if reader is None or not reader.thread.is_alive():
            reader = _Reader()
        self.reader = reader.thread
        reader.jobs.put((self, readers))

    def _read(self, readers: list[int]) -> None:
        with selectors.DefaultSelector() as selector:
            for index, fd in enumerate(readers):
                selector.register(fd, selectors.EVENT_READ, index)
            while selector.get_map():
                for key, _ in selector.select():
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        selector.unregister(key.fd)
                        os.close(key.fd)
                        continue
                    self.tails.add(key.data, data)

    def stop(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass  # a stream the call broke: what it held is lost, nothing else
        sys.stdout, sys.stderr = self.streams
        for fd, saved in enumerate(self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        # The write ends are closed now (unless a process the call started holds them):
        # the reader sees the end of both pipes once it has read everything.
        if self.reader is not None:
            self.drained.wait(_DRAIN_GRACE)

    def result(self) -> dict[str, str] | None:
        return self.tails.result()


def _process_entry(
    name: str,
    entrypoint: str | None,
    inline: tuple[str, str] | None,
    kwargs: dict[str, Any],
    is_validation: bool,
    wants_context: bool,
    resources: dict[str, Any],
    changed: dict[str, frozenset[str]] | None = None,
    earlier: Mapping[str, Any] | None = None,
    where: tuple[str, str, int] = ("", "", 1),
    network: bool = False,
    backend: str = "asyncio",
    parent: int | None = None,
) -> Outcome:
    """Run a tool in a worker process (or a Ray worker) under the same read-only guard,
    its output captured; what it raises, ``SystemExit`` included, is its failure. An async
    tool runs on an event loop of its own, on ``backend`` (its caller's). With ``parent``
    (the pid of the gategraph process that started the worker) the worker dies with it:
    a call that loops never runs on as an orphan."""
    if parent is not None:
        die_with_parent(parent)
    return run_captured(
        functools.partial(
            _entry_outcome,
            name,
            entrypoint,
            inline,
            kwargs,
            is_validation,
            wants_context,
            resources,
            changed or {},
            earlier,
            where,
            network,
            backend,
        )
    )


def run_captured(call: Callable[[], Outcome]) -> Outcome:
    """Run a worker process's ``call`` with descriptors 1 and 2 captured into its
    outcome."""
    capture: _FdCapture | None = _FdCapture()
    try:
        assert capture is not None
        capture.start()
    except OSError:
        capture = None  # out of descriptors: run the call, uncaptured, rather than not at all
    try:
        outcome = call()
    finally:
        if capture is not None:
            capture.stop()
    if capture is not None:
        outcome.captured = capture.result()
    return outcome


def _entry_outcome(
    name: str,
    entrypoint: str | None,
    inline: tuple[str, str] | None,
    kwargs: dict[str, Any],
    is_validation: bool,
    wants_context: bool,
    resources: dict[str, Any],
    changed: dict[str, frozenset[str]],
    earlier: Mapping[str, Any] | None,
    where: tuple[str, str, int],
    network: bool = False,
    backend: str = "asyncio",
) -> Outcome:
    try:
        func = _load(name, entrypoint, inline[1] if inline is not None else None)
        guard = Guard("validation in a worker process", network=network) if is_validation else None
        plan_id, node, attempt = where
        context = ToolContext(
            plan_id=plan_id,
            node=node,
            attempt=attempt,
            resources=resources,
            guard=guard,
            changed=changed,
            earlier=earlier,
        )
        # A copy of its own (pickled across), but not to be changed all the same.
        given = fingerprint(kwargs) if guard is not None else None
        if wants_context:
            kwargs["context"] = context
        try:
            outcome = _run_guarded(func, kwargs, backend, guard, enter)
        finally:
            context.cleanup()
        kwargs.pop("context", None)
        if given is not None and outcome.ok and changed_since(kwargs, given):
            return changed_what_it_judges(name, outcome)
        return outcome
    except BaseException as exc:  # nothing cancels this process's calls; all is the tool's
        return exception_outcome(name, exc)


def _load(name: str, entrypoint: str | None, code: str | None) -> Callable[..., Any]:
    """The callable a worker process runs: inline ``code``'s ``run``, or the entrypoint."""
    if code is not None:
        return _inline_function(name, code, "run")
    assert entrypoint is not None
    return resolve_entrypoint(entrypoint)


def _run_guarded(
    func: Callable[..., Any],
    kwargs: dict[str, Any],
    backend: str,
    guard: Guard | None,
    take: Callable[[Guard], tuple[list[Any], contextvars.Token[list[Any] | None]]],
) -> Outcome:
    """Run a worker process's call, under ``guard`` (taken with ``take``: this context's
    lease, or the whole process's) when it is a validation's."""
    if guard is None:
        return Outcome(True, _run_entry(func, kwargs, backend))
    state = take(guard)
    try:
        value = _run_entry(func, kwargs, backend)
    except BaseException:
        if guard.violation is not None:
            return _violation(guard)  # what it raised is the refusal (or came after it)
        raise
    finally:
        leave(state)
    if guard.violation is not None:
        return _violation(guard)
    return Outcome(True, value)


def changed_what_it_judges(name: str, outcome: Outcome) -> Outcome:
    """The outcome of a validation's call that changed its own copy of what it was given
    (in another process, or an object of a class no frozen container holds): a read-only
    violation, as a frozen container's refusal is. No other call saw the change."""
    return Outcome(
        False,
        error=ResultError.READ_ONLY_VIOLATION,
        message=f"{name} changed its own arguments or artifact (it is given a copy of its "
        "own, but a read-only call must not change what it judges)",
        captured=outcome.captured,
    )


def _violation(guard: Guard) -> Outcome:
    """The outcome of a call whose guard recorded a refused write."""
    return Outcome(
        False,
        error=ResultError.READ_ONLY_VIOLATION,
        message=f"{guard.what} attempted a write: {guard.violation}",
    )


class SandboxRequest(msgspec.Struct, kw_only=True):
    """One call for a sandboxed worker (pickled: the parent writes it, the worker reads)."""

    name: str
    entrypoint: str | None
    code: str | None
    slots: tuple[str, ...]
    arguments: dict[str, Any]
    resources: dict[str, Any]
    artifact: Any
    inputs: dict[str, Any] | None
    guarded: bool
    backend: str
    plan: str = ""
    """The plan the call belongs to: its worker runs each plan's calls in a process of its
    own."""
    result: bool = False
    """Whether the call's value is a validation's result (not a wrapped tool's output):
    judged in the worker, where its value still is what the code returned."""
    guard_label: str = ""
    """What the call's guard is called in its messages: the validation's (a wrapped tool
    runs under the validation that wraps it)."""
    network: bool = False
    """The tool declares ``network: true``: the call may use the network (the worker's
    process keeps internet sockets open to it, and so does a validation's guard)."""
    writable: tuple[str, ...] = ()
    """The folders outside its worker's own the call may change: a work tool's resources
    (a validation's call may change none)."""
    read_only: tuple[str, ...] = ()
    """The resources given as read-only mappings (memory resources): given so there too."""
    changed: dict[str, frozenset[str]] = {}
    """What the call's context knows of the plan's change to its folders
    (``context.changed``), by folder."""
    earlier: dict[str, Any] | None = None
    """What the validation found in the plan's earlier round (``context.earlier``)."""
    node: str = ""
    """The node the call runs (``context.node``)."""
    attempt: int = 1
    """The plan's attempt the call belongs to (``context.attempt``)."""
    views: tuple[str, ...] = ()
    """The folders the call's worker gives a copy-on-write view of, one per time a folder
    is named (what ``context.disposable_copy`` returns there, nothing copied): a
    validation's folder resources, once per core, where its tool asks for copies (the
    test-suite built-ins, which run in as many shards)."""
    transform: tuple[str, str] | None = None
    """A wrapped validation's name and its transform's source: the call's output goes
    through it (in the same process), and the outcome is the validation's result. With
    neither ``entrypoint`` nor ``code``, only the transform runs, of
    ``arguments["output"]``."""


def sandbox_network(request: SandboxRequest) -> Outcome | None:
    """Hold a sandboxed call's process to its validation's declaration of the network
    before the call runs (the kernel: :func:`.._base._kernel.close_network`); an outcome when it
    cannot be held to it."""
    from gategraph.runtime._base._kernel import close_network, network_closed

    if not request.network:
        close_network()  # once per process; this plan's process only, never reopened
        return None
    if network_closed():
        # This worker loaded the same code for a validation that does not declare the
        # network: a kernel's refusal cannot be lifted.
        from gategraph.runtime._data._maxn import UNAVAILABLE

        return Outcome(
            False,
            error=UNAVAILABLE,
            message=f"{request.name}: its sandboxed worker was confined without the network, "
            "which it declares (`network: true`)",
        )
    return None


def sandbox_outcome(request: SandboxRequest, loaded: Callable[..., Any] | None = None) -> Outcome:
    """Load (unless its worker ``loaded`` it already), bind and run a sandboxed call, in
    the worker's child, the whole process guarded; then its validation's transform, if
    it has one."""
    refused = sandbox_network(request)
    if refused is not None:
        return refused
    transform = request.transform
    if request.entrypoint is None and request.code is None:
        assert transform is not None
        return _sandboxed_transform(transform, request.arguments["output"], request.backend)
    outcome = _sandboxed_call(request, loaded)
    if transform is None:
        return outcome
    if not outcome.ok:
        outcome.message = f"wrapped tool {request.name!r}: {outcome.message}"
        return outcome
    return _sandboxed_transform(transform, outcome.value, request.backend)


def _sandboxed_call(request: SandboxRequest, loaded: Callable[..., Any] | None) -> Outcome:
    try:
        func = loaded or _load(request.name, request.entrypoint, request.code)
    except ConfigError as exc:
        # Known only here: the parent never imports what runs in the sandbox.
        from gategraph.runtime._data._maxn import MISCONFIGURED  # pydantic: only for this rare case

        return Outcome(False, error=MISCONFIGURED, message=f"{request.name}: {exc}")
    except BaseException as exc:
        return exception_outcome(request.name, exc)
    label = request.guard_label or f"validation {request.name!r}"
    guard = Guard(f"sandboxed {label}", network=request.network) if request.guarded else None
    # Read-only where they were: a memory resource is a mapping no call changes.
    resources = {
        k: MappingProxyType(v) if k in request.read_only else v
        for k, v in request.resources.items()
    }
    context = ToolContext(
        plan_id=request.plan,
        node=request.node,
        attempt=request.attempt,
        resources=resources,
        guard=guard,
        changed=request.changed,
        earlier=request.earlier,
    )
    try:
        kwargs = _bind(
            _Signature(func),
            request.slots,
            request.arguments,
            resources,
            request.artifact,
            request.inputs,
            context,
        )
        outcome = _run_guarded(func, kwargs, request.backend, guard, enter_process)
        if outcome.ok and request.result and request.transform is None:
            # The answer crosses as MessagePack, which would carry a set as a list, a tuple
            # as a list...: a result is judged here as anywhere else (a set is malformed).
            # One that raises while it is read is left to the worker, which says so.
            with contextlib.suppress(BaseException):
                outcome.value = msgspec.structs.asdict(coerce_result(outcome.value))
        return outcome
    except BaseException as exc:  # nothing cancels a worker's call: all is the tool's
        return exception_outcome(request.name, exc)
    finally:
        context.cleanup()


def _sandboxed_transform(transform: tuple[str, str], output: Any, backend: str) -> Outcome:
    """A wrapped validation's transform of its tool's ``output``, in a sandboxed call's
    process: loaded and run under a guard that lets it do nothing but compute (seed 000,
    Constraints: transforms are pure data transformations); a validation's result."""
    name, source = transform
    try:
        function = _transform_function(name, source)
    except _ImpureTransform as exc:
        message = exc.issues[0].message
        return Outcome(False, error=ResultError.READ_ONLY_VIOLATION, message=message)
    except ConfigError as exc:
        from gategraph.runtime._data._maxn import MISCONFIGURED  # pydantic: only for this rare case

        return Outcome(False, error=MISCONFIGURED, message=exc.issues[0].message)
    guard = Guard(f"transform of {name!r}", pure=True)
    try:
        outcome = _run_guarded(
            functools.partial(function, output), {}, backend, guard, enter_process
        )
    except BaseException as exc:  # nothing cancels a worker's call: all is the code's
        outcome = exception_outcome(f"transform of {name}", exc)
    outcome = _transform_failure(guard, outcome)
    if outcome.ok:
        # Judged here as anywhere else (MessagePack would carry a set as a list).
        with contextlib.suppress(BaseException):
            outcome.value = msgspec.structs.asdict(coerce_result(outcome.value))
    return outcome


def _run_entry(func: Callable[..., Any], kwargs: dict[str, Any], backend: str) -> Any:
    if _is_async(func):
        # An async tool shipped to another process: its own event loop.
        return _run_on_own_loop(backend, func, **kwargs)
    value = func(**kwargs)
    if inspect.isawaitable(value):
        return _run_on_own_loop(backend, _awaited, value)
    return value
