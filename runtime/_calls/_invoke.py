"""Calling tools and validations: entrypoints, inline code, wrapped tools, isolation.

A tool is *prepared* once per run (import, compile, read the signature) into a
:class:`Prepared`, then called many times. A call never raises for a failure of the
tool itself: it returns an :class:`Outcome` saying what went wrong (``exception``,
``malformed``, ``too_large``, ``read_only_violation``); timeouts are applied by the
caller (the engine's workers).

Whatever a tool raises is its failure, ``SystemExit`` and the other ``BaseException``
subclasses included. Two things propagate: cancellation (a timeout or a cancelled plan)
and a person's Ctrl-C (:func:`propagates` tells it from a ``KeyboardInterrupt`` the tool
raises itself).

What a call writes to ``sys.stdout`` and ``sys.stderr`` is captured (the last
:data:`CAPTURE_LIMIT` characters of each) and never reaches gategraph's own output:
a router installed in place of both streams sends a write to the capture of the call it
comes from (a context variable says which), and everything else through unchanged. A
worker process has its file descriptors 1 and 2 captured as well.

Sync callables run in daemon threads of this module's own (:class:`_Threads`): a call
abandoned at its timeout keeps running, but never keeps the process from exiting. Async
callables are awaited in the caller's task, unless their isolation is explicitly
``thread`` (an event loop of their own, in one of those threads) or ``process``: only
there can a timeout end one that blocks instead of awaiting.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import io
import math
import os
import queue
import re
import sys
import threading
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import anyio
import anyio.lowlevel
import anyio.to_process
import anyio.to_thread
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._sigint import is_ctrl_c
from gategraph.runtime._data._results import (
    ResultError,
    ValidationResult,
    coerce_failure,
    coerce_result,
    enforcement,
)

from ._call import (
    _STREAMS,
    CAPTURE_LIMIT,
    Outcome,
    SandboxRequest,
    _bind,
    _describe,
    _inline_function,
    _interrupts,
    _is_async,
    _process_entry,
    _run_on_own_loop,
    _Signature,
    _transform_failure,
    _transform_function,
    _violation,
    exception_outcome,
    resolve_entrypoint,
)
from ._context import ToolContext
from ._readonly import Guard, enter, guarded, leave, run_guarded, unguarded

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from anyio import CapacityLimiter
    from gategraph.runtime._data._models import Tool, Validation

    from ._mcp import McpCall

# ``_models`` (pydantic, some 120 ms) is imported where a tool is prepared, not at the
# top: a graph that was loaded has imported it already, and what a worker process runs
# lives in `_call`, which never imports it.

__all__ = [
    "PENDING",
    "Isolation",
    "Prepared",
    "call_hook",
    "check_entrypoint",
    "default_isolation",
    "ended",
    "folders_of",
    "install_output_router",
    "own_capture",
    "prepare",
    "propagates",
    "static_signature",
]


Isolation = Literal["inline", "thread", "process", "sandbox", "ray"]
"""Where a call runs: the event loop, a worker thread, a worker process, a worker process
confined by the kernel, or a Ray worker (docs/isolation.md)."""


@contextlib.contextmanager
def _loading_guarded(tool: Tool) -> Iterator[None]:
    """Load ``tool``'s code under a guard of its own: a write, a command or a change to the
    environment that its top level attempts is refused, and a :class:`ConfigError`."""
    guard = Guard(f"validation {tool.name!r} while it loads", network=tool.network)
    with guarded(guard):
        yield
    if guard.violation is not None:
        field = "code" if tool.code is not None else "entrypoint"
        raise ConfigError.at(
            field, f"{tool.name!r} attempted, while it loaded: {guard.violation} (refused)"
        )


def default_isolation(
    tool: Tool, *, tell: bool = True, work: bool = False, required: bool = False
) -> Isolation | None:
    """Where ``tool`` runs when neither its node nor the run says (docs/isolation.md):
    ``None`` (the event loop or a thread, under the in-process guard) for gategraph's own
    code that runs none of the candidate's, and for tools that run elsewhere (an MCP
    server's; a wrapped tool's code is judged on its own); the kernel sandbox for every
    other callable. Where this machine cannot sandbox, the strongest level there is (a
    worker process under the guard), said once (a :class:`RuntimeWarning`).

    The code a validation runs includes the agent's change (a test suite imports it), so
    the default must hold against code nobody trusted; a declared ``isolation`` is a
    choice to trust it. ``tell=False`` asks without the warning (a check, not a run).

    A ``work`` tool (one that changes the candidate, not a validation's) falls back to
    where it always ran, gategraph's own process: the guard, which refuses every write,
    cannot hold code that is there to write, so a worker process would hold it no better.
    Where the sandbox is ``required`` (a plan policy's
    ``require_sandbox``), no fallback: a :class:`ConfigError` says what is missing."""
    from gategraph.runtime._base._kernel import support
    from gategraph.runtime._data._builtins import in_process
    from gategraph.runtime._data._models import ToolSource

    if tool.source not in (ToolSource.PYTHON, ToolSource.CODE) or in_process(tool):
        return None
    missing = support().missing
    if missing is None:
        return "sandbox"
    if required:
        from ._sandbox import require

        require()
    fallback: Isolation | None = None if work else "process"
    if not tell:
        return fallback
    import warnings

    # The same text every time: Python's warning filter then says it once a process.
    warnings.warn(
        f"the kernel sandbox is not available here ({missing}): "
        + (
            "work tools that would run in it run in gategraph's own process instead, "
            "where nothing holds them to their resources"
            if work
            else "validations and tools that would run in it run in worker processes "
            "under the in-process guard instead (`policy.require_sandbox: true` refuses "
            "to run them)"
        ),
        RuntimeWarning,
        stacklevel=2,
    )
    return fallback


def _sandbox_isolation(tool: Tool, isolation: Isolation | None, *, policy: bool) -> Isolation:
    """``sandbox``, for a call that must run there; or why it cannot."""
    from gategraph.runtime._data._models import ToolSource

    why = (
        f"{tool.name!r} is untrusted: its code always runs in the sandbox"
        if tool.untrusted
        else "the plan's policy runs every validation in the sandbox (require_sandbox)"
    )
    if isolation not in (None, "sandbox"):
        raise ConfigError.at("isolation", f"{why}, not with isolation {isolation!r}")
    if tool.source is ToolSource.MCP and policy:
        raise ConfigError.at(
            "isolation",
            f"{why}, and {tool.name!r} calls the MCP tool {tool.mcp_tool_name!r}, which "
            "runs in its server, outside any sandbox",
        )
    return "sandbox"


def _check_defines(name: str, code: str, function: str, field: str = "code") -> None:
    """What :func:`_inline_function` would refuse, told without running ``code``: a syntax
    error, or no top-level ``def function``."""
    import ast

    try:
        tree = ast.parse(code, f"<{name}>")
    except (SyntaxError, ValueError) as exc:
        raise ConfigError.at(
            field, f"inline code of {name!r} failed to load: {_describe(exc)}"
        ) from None
    if not any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
        for node in tree.body
    ):
        raise ConfigError.at(field, f"inline code of {name!r} must define `{function}(...)`")
    # Its plain top-level imports must be there to be had (found as the import system
    # finds them, without running them); one inside `try:` may be optional.
    for node in tree.body:
        modules = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            else []
        )
        for module in modules:
            if _module_origin(module) is None:
                raise ConfigError.at(
                    field,
                    f"inline code of {name!r} failed to load: cannot import {module!r}: "
                    "no module of that name",
                )


def check_entrypoint(entrypoint: str, *, field: str = "entrypoint") -> None:
    """What :func:`resolve_entrypoint` would refuse, told without running any of the
    module's code: a module that cannot be found, or (where its source can be read) no
    top-level name for the callable. Code that runs in the sandbox is never imported here,
    so this is how `gategraph check` still finds a misspelled entrypoint before a plan
    starts; what only importing can tell, the sandbox reports when it runs."""
    module_name, _, attr_path = entrypoint.partition(":")
    first = attr_path.split(".", 1)[0]
    module = sys.modules.get(module_name)
    if module is not None:  # imported already: reading it runs nothing new
        if first not in vars(module) and "__getattr__" not in vars(module):
            raise ConfigError.at(field, f"{module_name!r} has no attribute {attr_path!r}")
        spec = getattr(module, "__spec__", None)
        if spec is None or (spec.origin is None and spec.submodule_search_locations is None):
            raise ConfigError.at(
                field,
                f"{module_name!r} exists only in this process (no file a sandboxed worker "
                "could load it from): declare where it runs (`isolation: inline`, `thread` "
                "or `process`), a choice to trust it",
            )
        return
    origin = _module_origin(module_name)
    if origin is None:
        raise ConfigError.at(field, f"cannot import {module_name!r}: no module of that name")
    names = _top_level_names(origin)
    if names is not None and first not in names:
        raise ConfigError.at(field, f"{module_name!r} has no attribute {attr_path!r}")


def _module_origin(name: str) -> str | None:
    """The file (or ``""`` for one without a readable source) module ``name`` would be
    loaded from, found as the import system finds it but without importing it or its
    packages (no code of theirs runs); None if there is none."""
    parts = name.split(".")
    if any(not part.isidentifier() for part in parts):
        return None
    spec: Any = None
    try:
        for index in range(len(parts)):
            full = ".".join(parts[: index + 1])
            module = sys.modules.get(full)
            if module is not None:
                spec = getattr(module, "__spec__", None)
                if spec is None:
                    return ""  # made at run time: nothing to read, nothing to say
            else:
                locations = None
                if spec is not None:
                    if spec.submodule_search_locations is None:
                        return None  # a module, not a package: it has no submodules
                    locations = list(spec.submodule_search_locations)
                spec = _find(full, locations)
            if spec is None:
                # Sure only of a top-level module: a package may add to its own __path__
                # as it loads (pkgutil style), which only importing it shows.
                return None if index == 0 else ""
    except (ImportError, ValueError, AttributeError, TypeError):
        return None
    origin: str | None = spec.origin if spec.has_location else None
    return origin or ""


def _find(name: str, path: list[str] | None) -> Any:
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is not None:
            spec = find_spec(name, path, None)
            if spec is not None:
                return spec
    return None


@functools.lru_cache(maxsize=256)
def _names_in(origin: str, mtime_ns: int, size: int) -> frozenset[str] | None:
    import ast

    try:
        with open(origin, "rb") as file:
            tree = ast.parse(file.read(), origin)
    except (OSError, SyntaxError, ValueError):
        return None  # importing will say what is wrong, where it runs
    names: set[str] = set()
    for node in tree.body:
        _bound_names(node, names)
    return frozenset(names)


def _bound_names(node: Any, names: set[str]) -> None:
    import ast

    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        names.add(node.name)
        if node.name == "__getattr__":
            names.add("*")
    elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            names.add("*" if alias.name == "*" else (alias.asname or alias.name.split(".")[0]))
    elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
        # Conditional definitions (`if sys.version_info ...`, `try: import x`): any branch.
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                _bound_names(child, names)
            elif isinstance(child, ast.ExceptHandler):
                for inner in child.body:
                    _bound_names(inner, names)


def _top_level_names(origin: str) -> frozenset[str] | None:
    """The names a module's source binds at its top level, or None where that cannot be
    told (no source, a module ``__getattr__``, ``import *``)."""
    if not origin.endswith(".py"):
        return None
    try:
        st = os.stat(origin)
    except OSError:
        return None
    names = _names_in(origin, st.st_mtime_ns, st.st_size)
    return None if names is None or "*" in names else names


def static_signature(tool: Tool) -> inspect.Signature | None:
    """The signature of the callable ``tool`` runs (inline code's ``run``, an entrypoint's
    function), read from its source without running it: for code that only runs in the
    sandbox. Annotations are their source text; a default that is not a literal is
    ``...``. None where the source cannot tell (not Python source, a callable made at run
    time)."""
    import ast

    if tool.code is not None:
        source, function = tool.code, "run"
    elif tool.entrypoint is not None:
        module_name, _, function = tool.entrypoint.partition(":")
        origin = _module_origin(module_name)
        if not origin or not origin.endswith(".py") or "." in function:
            return None
        try:
            with open(origin, "rb") as file:
                source = file.read().decode("utf-8", "replace")
        except OSError:
            return None
    else:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    found = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function
    ]
    if not found:
        return None
    args = found[-1].args  # the last definition is the one that counts
    empty = inspect.Parameter.empty

    def parameter(arg: ast.arg, kind: Any, default: ast.expr | None) -> inspect.Parameter:
        value: Any = empty
        if default is not None:
            try:
                value = ast.literal_eval(default)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                value = ...
        annotation = ast.unparse(arg.annotation) if arg.annotation is not None else empty
        return inspect.Parameter(arg.arg, kind, default=value, annotation=annotation)

    P = inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults))
    defaults += args.defaults
    parameters = [
        parameter(
            arg, P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD, d
        )
        for i, (arg, d) in enumerate(zip(positional, defaults, strict=True))
    ]
    if args.vararg is not None:
        parameters.append(parameter(args.vararg, P.VAR_POSITIONAL, None))
    parameters += [
        parameter(arg, P.KEYWORD_ONLY, d)
        for arg, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg is not None:
        parameters.append(parameter(args.kwarg, P.VAR_KEYWORD, None))
    try:
        return inspect.Signature(parameters)
    except ValueError:
        return None


PASS_THROUGH: Final = "{'passed': True, 'data': {'output': output}}"
"""gategraph's own transform (of the wrapper ``mcp serve`` puts around a read-only tool):
it hands the output on, and runs in gategraph's process whoever declares it."""


def _sandboxes(prepared: Prepared) -> bool:
    """Whether ``prepared``'s own code runs in the sandbox (not a wrapper, not MCP)."""
    return prepared.isolation == "sandbox" and prepared.mcp is None and prepared.wrapped is None


def _kernel_sandbox() -> bool:
    from gategraph.runtime._base._kernel import support

    return support().missing is None


def _check_transform(name: str, source: str) -> None:
    """What :func:`_transform_function` would refuse, told without running ``source``."""
    try:
        compile(source, f"<transform of {name}>", "eval")
    except SyntaxError:
        _check_defines(f"{name}.transform", source, "transform", field="transform")
    except ValueError as exc:  # null bytes in the source
        raise ConfigError.at("transform", f"the transform of {name!r}: {exc}") from None


def propagates(exc: BaseException) -> bool:
    """Whether ``exc``, raised in a call on the event loop's thread, is not the call's failure.

    Cancellation propagates (a timeout, a cancelled plan), and so does a person's Ctrl-C.
    Python raises the ``KeyboardInterrupt`` of a Ctrl-C in the main thread wherever that
    thread is, so it may arrive inside a validation's own frames; it is told from one the
    validation raises itself by whether a SIGINT was delivered (:func:`.._base._sigint.is_ctrl_c`,
    counted while a run lasts).
    ``GeneratorExit`` is a failure like any other: anyio and trio cancel tasks, they do not
    close them, so only a validation raising it itself puts it in a call's way.

    A cancellation exception is a cancellation only while the task is being cancelled
    (:func:`_being_cancelled`): an ``asyncio.CancelledError`` a validation raises itself,
    with nothing cancelling it, is its failure like any other exception; were it taken for
    a cancellation, the call would vanish with no result. Under trio an
    ``asyncio.CancelledError`` is no cancellation at all, and user code cannot make a
    ``trio.Cancelled``.

    Calls in worker threads and processes never need this: Python delivers signals to the
    main thread only, and nothing cancels a thread, so whatever they raise is theirs.
    Outside an event loop (a graph being loaded) nothing is cancelled either: only a
    Ctrl-C propagates.
    """
    if isinstance(exc, Exception):
        return False
    try:
        cancelled = anyio.get_cancelled_exc_class()
    except RuntimeError:  # no event loop runs in this thread
        return _interrupts(exc)
    if isinstance(exc, cancelled):
        return _being_cancelled()
    return isinstance(exc, KeyboardInterrupt) and is_ctrl_c(exc)


def _being_cancelled() -> bool:
    """Whether the current task is being cancelled: a cancel scope around it was cancelled
    (a timeout, a cancelled plan), or, on asyncio, something asked for the task's
    cancellation outside anyio (``asyncio.timeout()``, ``Task.cancel()``).

    Called when an exception is handled only, never on a call's way through.
    """
    if anyio.current_effective_deadline() == -math.inf:
        return True
    task = _asyncio_task()
    return task is not None and task.cancelling() > 0


def _asyncio_task() -> Any:
    """The running asyncio task, or ``None`` (under trio)."""
    import asyncio

    try:
        return asyncio.current_task()
    except RuntimeError:
        return None


class _Tail:
    """The last :data:`CAPTURE_LIMIT` characters written to one stream by one call."""

    __slots__ = ("chunks", "dropped", "lock", "size")

    def __init__(self) -> None:
        self.chunks: list[str] = []
        self.size = 0
        self.dropped = 0
        # A call abandoned at its timeout may still write while its record is made.
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            if len(text) >= CAPTURE_LIMIT:
                # One big write: keep its end without copying the rest.
                self.dropped += self.size + len(text) - CAPTURE_LIMIT
                self.chunks = [text[-CAPTURE_LIMIT:]]
                self.size = CAPTURE_LIMIT
                return
            self.chunks.append(text)
            self.size += len(text)
            if self.size > 2 * CAPTURE_LIMIT:
                self._trim()

    def _trim(self) -> None:
        joined = "".join(self.chunks)
        kept = joined[-CAPTURE_LIMIT:]
        self.dropped += len(joined) - len(kept)
        self.chunks = [kept]
        self.size = len(kept)

    def text(self) -> str:
        with self.lock:
            if self.size > CAPTURE_LIMIT:
                self._trim()
            kept = "".join(self.chunks)
            if self.dropped:
                return f"[{self.dropped} earlier characters not kept]\n{kept}"
            return kept


class _Captured:
    """What one call wrote to its stdout and stderr."""

    __slots__ = ("streams",)

    def __init__(self) -> None:
        self.streams = (_Tail(), _Tail())

    def as_dict(self) -> dict[str, str] | None:
        found = {
            name: tail.text()
            for name, tail in zip(_STREAMS, self.streams, strict=True)
            if tail.size or tail.dropped
        }
        return found or None

    def add(self, captured: Mapping[str, str]) -> None:
        """Add what a worker process captured for the same call (its count of what it did
        not keep carries over, rather than being cut off as text)."""
        for name, tail in zip(_STREAMS, self.streams, strict=True):
            text = captured.get(name)
            if text:
                found = _NOT_KEPT.match(text)
                if found is not None:
                    with tail.lock:
                        tail.dropped += int(found[1])
                    text = text[found.end() :]
                tail.write(text)


_NOT_KEPT: Final = re.compile(r"\[(\d+) earlier (?:bytes|characters) not kept\]\n")


PENDING: Final = _Captured.__new__(_Captured)
"""A call is running and has written nothing yet (its capture is made on its first write)."""


class _CaptureSlot:
    """Where the calls of one context write. An engine worker owns one for all its calls
    and sets it per call: an attribute store, where setting a context variable per call
    would cost some 200 ns more.

    ``captured`` is ``None`` between calls: what the runtime itself prints in the worker's
    context (an event observer, say) is not a call's and passes through.
    """

    __slots__ = ("captured",)

    def __init__(self, captured: _Captured | None = None) -> None:
        self.captured = captured

    def shared(self) -> _Captured:
        """The current call's capture, made now if need be (to hand to another thread)."""
        captured = self.captured
        if captured is None or captured is PENDING:
            captured = self.captured = _Captured()
        return captured

    def take(self) -> dict[str, str] | None:
        """What the current call wrote, as text; the call is over for this slot."""
        captured, self.captured = self.captured, None
        if captured is None or captured is PENDING:
            return None
        return captured.as_dict()


_capture: Final[contextvars.ContextVar[_CaptureSlot | None]] = contextvars.ContextVar(
    "gategraph_output_capture", default=None
)


def _capturing() -> bool:
    slot = _capture.get()
    return slot is not None and slot.captured is not None


def own_capture() -> _CaptureSlot:
    """Give the current task a capture slot of its own (engine workers call this once)."""
    slot = _CaptureSlot()
    _capture.set(slot)
    return slot


class _Router:
    """Stands in for ``sys.stdout`` or ``sys.stderr``: a write made in a call's context goes
    to that call's capture; any other write goes to the stream it replaced, unchanged.

    Nothing reached through it can take gategraph's stream away: ``close()`` closes nothing
    and ``detach()`` hands out the routed binary side, in a call or not (code a tool imports
    may do either at its top level); in a call, ``fileno()`` has no descriptor to give (as
    for any captured stream), ``isatty()`` is false and ``reconfigure()`` changes nothing.
    """

    def __init__(self, stream: Any, index: int) -> None:
        self._stream = stream
        self._index = index

    def write(self, text: str) -> int:
        slot = _capture.get()
        if slot is None or slot.captured is None:
            return cast("int", self._stream.write(text))
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        slot.shared().streams[self._index].write(text)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        if not _capturing():
            self._stream.flush()

    @property
    def buffer(self) -> _BufferRouter:
        """The binary side, routed the same way."""
        return _BufferRouter(self._stream.buffer, self._index)

    def close(self) -> None:
        """Close nothing: the stream is gategraph's (and the process's), not the caller's."""

    def detach(self) -> _BufferRouter:
        """The routed binary side; the stream itself stays attached and in use."""
        return self.buffer

    def fileno(self) -> int:
        if _capturing():
            # A call's output is captured: its descriptor would be gategraph's own.
            raise io.UnsupportedOperation("fileno: a call's output is captured by gategraph")
        return cast("int", self._stream.fileno())

    def isatty(self) -> bool:
        return not _capturing() and bool(self._stream.isatty())

    def reconfigure(self, **options: Any) -> None:
        if not _capturing():
            self._stream.reconfigure(**options)

    def __getattr__(self, name: str) -> Any:
        # encoding, errors, closed, ... of the stream it stands in for.
        if name.startswith("_"):
            raise AttributeError(name)  # no recursion on a half-built copy
        return getattr(self._stream, name)


class _BufferRouter:
    """``sys.stdout.buffer`` of the router: bytes a call writes are captured as text. Like
    the router, it never closes or detaches the buffer it stands in for."""

    def __init__(self, buffer: Any, index: int) -> None:
        self._buffer = buffer
        self._index = index

    def write(self, data: bytes) -> int:
        slot = _capture.get()
        if slot is None or slot.captured is None:
            return cast("int", self._buffer.write(data))
        slot.shared().streams[self._index].write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self) -> None:
        if not _capturing():
            self._buffer.flush()

    def close(self) -> None:
        """Close nothing (a text wrapper made over this one closes it when collected)."""

    def detach(self) -> Any:
        raise io.UnsupportedOperation("detach: gategraph's output cannot be detached")

    def fileno(self) -> int:
        if _capturing():
            raise io.UnsupportedOperation("fileno: a call's output is captured by gategraph")
        return cast("int", self._buffer.fileno())

    def isatty(self) -> bool:
        return not _capturing() and bool(self._buffer.isatty())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._buffer, name)


def install_output_router() -> None:
    """Put the router in place of ``sys.stdout`` and ``sys.stderr``, unless it is there.

    Each run calls this once (a few hundred ns). The router stays afterwards: a call
    abandoned at its timeout may still be writing after its run has ended.
    """
    for index, name in enumerate(_STREAMS):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _Router):
            setattr(sys, name, _Router(stream, index))


# -- worker threads ----------------------------------------------------------------------------


def _call_soon() -> Callable[[Callable[[], object]], object]:
    """The running event loop's thread-safe, never-waiting "call this soon".

    ``anyio.from_thread.run_sync`` would make the worker thread wait until the loop ran
    the callback: some 10 µs a call, during which the thread could take no other call.
    """
    native: Any = anyio.lowlevel.current_token().native_token
    call_soon = getattr(native, "call_soon_threadsafe", None)  # an asyncio event loop
    if call_soon is None:
        call_soon = native.run_sync_soon  # a trio token
    return cast("Callable[[Callable[[], object]], object]", call_soon)


class _Job:
    """One sync call for a worker thread, and how it ended."""

    __slots__ = ("call_soon", "context", "done", "func", "ok", "value")

    def __init__(self, context: contextvars.Context, func: Callable[[], Any]) -> None:
        self.context = context
        self.func = func
        self.done = anyio.Event()
        self.call_soon = _call_soon()
        self.ok = False
        self.value: Any = None

    def run(self) -> None:
        try:
            self.value = self.context.run(self.func)
            self.ok = True
        except BaseException as exc:  # the call's own failure, whatever it is (see module doc)
            self.value = exc

    def report(self) -> None:
        try:
            self.call_soon(self.done.set)
        except Exception:
            pass  # the run has ended (a call abandoned at its timeout): nobody is waiting


class _Threads:
    """Daemon worker threads for sync calls, each reused for call after call.

    anyio's worker threads are no daemon threads on asyncio: one still inside a call that
    was abandoned at its timeout kept the interpreter from exiting, forever if the call
    never returned. These are daemon threads: an abandoned call runs on in the background
    until it returns or the process exits, and never holds the exit up. A thread idle for
    :attr:`MAX_IDLE` seconds ends.
    """

    MAX_IDLE: Final = 10.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[_Job]] = []

    async def run(self, func: Callable[[], Any], limiter: CapacityLimiter | None) -> _Job:
        """Run ``func()`` in a worker thread, in a copy of this context, with this call's
        output capture; on cancellation, leave it running and propagate at once."""
        context = contextvars.copy_context()
        slot = _capture.get()
        if slot is not None:
            # The thread gets a slot of its own that keeps this call's capture: an
            # abandoned call must not write into the calls its worker runs next.
            context.run(_capture.set, _CaptureSlot(slot.shared()))
        job = _Job(context, func)
        async with limiter or anyio.to_thread.current_default_thread_limiter():
            self._submit(job)
            await job.done.wait()
        return job

    def _submit(self, job: _Job) -> None:
        with self._lock:
            jobs = self._idle.pop() if self._idle else None
        if jobs is None:
            jobs = queue.SimpleQueue()
            # It serves call after call, each in its own context: the call that happens to
            # start it must not leave its lease in the thread's own.
            with unguarded():
                threading.Thread(
                    target=self._serve, args=(jobs,), name="gategraph worker thread", daemon=True
                ).start()
        jobs.put(job)

    def _serve(self, jobs: queue.SimpleQueue[_Job]) -> None:
        while True:
            try:
                job = jobs.get(timeout=self.MAX_IDLE)
            except queue.Empty:
                with self._lock:
                    # Not idle any more means a job is on its way to this thread.
                    if any(idle is jobs for idle in self._idle):
                        self._idle.remove(jobs)
                        return
                continue
            job.run()
            with self._lock:
                self._idle.append(jobs)
            job.report()
            del job


_threads: Final = _Threads()


def _run_transform(guard: Guard, transform: Callable[[Any], Any], output: Any) -> Any:
    with guarded(guard):
        return transform(output)


def _backend() -> str:
    """The running backend's name (not sniffio's: it is no dependency of ours)."""
    return "trio" if _asyncio_task() is None else "asyncio"


async def call_hook(
    what: str,
    hook: Callable[[], Any] | str,
    time_limit: float,
    *,
    tool: Tool | None = None,
    plan: str = "",
    writable: tuple[str, ...] = (),
) -> Outcome:
    """Call a lifecycle hook with no arguments, within ``time_limit`` seconds, its output
    captured; ``what`` names it in the outcome's message (``the setup hook of 'v'``).

    A callable runs in one of our daemon worker threads — an async one on an event loop
    of its own there — and is abandoned at its timeout like a sync call: even one that
    never awaits cannot hold the run past its limit (hooks run once per run, off the hot
    path). An entrypoint (``hook`` a string) is a hook of ``tool``, whose calls run in the
    sandbox: it runs there too, held as they are (a validation's read-only, a work tool's
    to the folders ``writable``), in plan ``plan``'s process, and is killed at its
    timeout. Like a call, it never raises for its own failure; cancellation and a
    person's Ctrl-C propagate.
    """
    install_output_router()
    slot = _CaptureSlot(PENDING)
    token = _capture.set(slot)
    outcome: Outcome | None = None
    try:
        with anyio.move_on_after(time_limit):
            if isinstance(hook, str):
                assert tool is not None
                done = _adopt_output(await _hook_in_sandbox(tool, hook, plan, writable))
                outcome = done if done.ok else _hook_failed(what, done)
            else:
                if _is_async(hook):
                    hook = functools.partial(_run_on_own_loop, _backend(), hook)
                job = await _threads.run(hook, None)
                outcome = Outcome(True) if job.ok else _hook_failure(what, job.value)
    finally:
        _capture.reset(token)
    if outcome is None:
        outcome = Outcome(
            False,
            error=ResultError.TIMEOUT,
            message=f"{what} did not return within {time_limit:g} s",
            detail={"timeout": time_limit},
        )
    outcome.captured = slot.take()
    return outcome


async def _hook_in_sandbox(
    tool: Tool, entrypoint: str, plan: str, writable: tuple[str, ...]
) -> Outcome:
    from gategraph.runtime._data._models import Validation

    judging = isinstance(tool, Validation)
    request = SandboxRequest(
        name=tool.name,
        entrypoint=entrypoint,
        code=None,
        slots=(),
        arguments={},
        resources={},
        artifact=None,
        inputs=None,
        guarded=judging,
        backend=_backend(),
        plan=plan,
        guard_label=f"validation {tool.name!r}" if judging else "",
        network=tool.network,
        writable=writable,
    )
    return await _sandboxed(tool.name, request)


async def _sandboxed(name: str, request: SandboxRequest) -> Outcome:
    """Run ``request`` in the run's pool of sandboxed workers, else in one of its own."""
    from ._sandbox import current_pool, sandbox_pool

    pool = current_pool()
    if pool is not None:
        return await pool.call(name, request)
    async with sandbox_pool() as own:
        return await own.call(name, request)


def _hook_failed(what: str, outcome: Outcome) -> Outcome:
    """A sandboxed hook's failure, told as a hook's."""
    outcome.message = f"{what} failed: {outcome.message}"
    return outcome


def _hook_failure(what: str, exc: BaseException) -> Outcome:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        text = type(exc).__name__
    return Outcome(
        False,
        error=ResultError.EXCEPTION,
        message=f"{what} failed: {text}",
        detail={"exception_type": type(exc).__name__},
    )


# -- preparing and calling ---------------------------------------------------------------------


def _plain(
    arguments: Mapping[str, Any],
    resources: Mapping[str, Any],
    artifact: Any,
    inputs: Mapping[str, Any] | None,
    context: ToolContext,
) -> dict[str, Any]:
    """The binding of a callable that takes its configured arguments only (a copy: the
    callers that send it to another process edit it)."""
    return dict(arguments)


def _with_varkw(
    arguments: Mapping[str, Any],
    resources: Mapping[str, Any],
    artifact: Any,
    inputs: Mapping[str, Any] | None,
    context: ToolContext,
) -> dict[str, Any]:
    """The binding of a callable that takes ``**kwargs`` and no resource slot: the injected
    values, which configured arguments of the same name override (as :func:`_bind`)."""
    kwargs = {
        "artifact": artifact,
        "context": context,
        "inputs": inputs if inputs is not None else {},
    }
    if arguments:
        kwargs.update(arguments)
    return kwargs


def _binder(sig: _Signature, slots: tuple[str, ...]) -> Callable[..., dict[str, Any]]:
    """The cheapest binding that gives ``sig`` what :func:`_bind` would: the fan-out's
    common callables (no slots; nothing injected, or everything through ``**kwargs``) skip
    its loops."""
    if not slots and not sig.injected:
        return _with_varkw if sig.varkw else _plain
    return functools.partial(_bind, sig, slots)


class Prepared:
    """A tool or validation made ready to call: its callable, signature and wrapping."""

    __slots__ = (
        "awaited",
        "bind",
        "enforced_by",
        "func",
        "guard_label",
        "is_validation",
        "isolation",
        "mcp",
        "needs_sandbox",
        "network",
        "ran_in",
        "signature",
        "slots",
        "timeout",
        "tool",
        "transform",
        "transform_is_async",
        "transform_on_loop",
        "wrapped",
    )

    def __init__(
        self,
        tool: Tool,
        func: Callable[..., Any] | None,
        *,
        isolation: Isolation | None,
        timeout: float,
        wrapped: Prepared | None = None,
        transform: Callable[[Any], Any] | str | None = None,
        mcp: McpCall | None = None,
    ) -> None:
        """``isolation`` is what the node (or the executor) asked for; ``None`` is the
        default: a worker thread for sync callables, the caller's task for async ones.
        ``mcp`` calls an MCP server's tool instead of a callable (isolation does not apply:
        the tool runs in its server)."""
        from gategraph.runtime._data._models import Validation

        self.tool = tool
        self.mcp = mcp
        self.func = func
        self.signature = _Signature(func) if func is not None else None
        if isolation == "inline" and self.signature is not None and not self.signature.is_async:
            # Issue 9: a sync call on the event loop cannot be interrupted, so no timeout
            # could end it (and every call has one). Refused rather than silently unbounded.
            raise ConfigError.at(
                "isolation",
                f"`inline` would run {tool.name!r}, a sync callable, on the event loop, where "
                "nothing can stop it at its timeout; use `thread` (the default) or "
                "`process`, or make it async",
            )
        if isolation == "sandbox" and mcp is None and wrapped is None:
            from ._sandbox import require

            require()  # fail closed: never a silent downgrade to a weaker isolation
        self.is_validation = isinstance(tool, Validation)
        self.guard_label = f"validation {tool.name!r}" if self.is_validation else None
        self.network = tool.network
        """The tool declares ``network: true``: its sandbox (and a validation's guard) lets
        it use the network."""
        self.isolation: Isolation = isolation or "thread"
        self.timeout = timeout
        self.wrapped = wrapped
        self.transform = transform
        """A callable; or its source, for a transform that runs in the sandbox."""
        self.needs_sandbox = isinstance(transform, str) or (
            isolation == "sandbox" and mcp is None and wrapped is None
        )
        """Whether a call runs code in the sandbox: its own, or its transform (the run
        then keeps a pool of sandboxed workers)."""
        self.transform_is_async = callable(transform) and inspect.iscoroutinefunction(transform)
        self.slots = tuple(slot.name for slot in tool.resource_slots)
        self.bind: Callable[..., dict[str, Any]] = (
            _binder(self.signature, self.slots) if self.signature is not None else _plain
        )
        """``bind(arguments, resources, artifact, inputs, context)``: the call's keyword
        arguments."""
        # An async callable is awaited right in the caller's task, unless its isolation was
        # asked for: there a timeout can end it only at an `await`, and one that blocks the
        # loop instead never ends. `thread` gives it an event loop of its own in a daemon
        # worker thread (abandoned at its timeout), `process` a worker process (killed at
        # it), `ray` a Ray worker (cancelled). The engine awaits an awaited callable of a
        # validation itself (`_Engine._validate`), a frame less than through `call`.
        on_loop = isolation is None or isolation == "inline"
        self.awaited = self.signature is not None and self.signature.is_async and on_loop
        self.transform_on_loop = self.transform_is_async and on_loop
        # What a call's record says ran it: the isolation of the code at the end of the
        # wrapping chain, `inline` for an async callable awaited on the loop, `mcp` for a
        # tool its server runs.
        if wrapped is not None:
            self.ran_in: str = wrapped.ran_in
        elif mcp is not None:
            self.ran_in = "mcp"
        else:
            self.ran_in = "inline" if self.awaited else self.isolation
        self.enforced_by = enforcement(self.ran_in)

    # -- calling -----------------------------------------------------------------------------

    async def call(
        self,
        arguments: Mapping[str, Any],
        resources: Mapping[str, Any],
        artifact: Any = None,
        inputs: Mapping[str, Any] | None = None,
        plan_id: str = "",
        node: str = "",
        attempt: int = 1,
        limiter: CapacityLimiter | None = None,
    ) -> Outcome:
        """Call the tool; for a validation, under the read-only guard. What it writes to
        stdout and stderr is in the outcome's ``captured``."""
        capture = _capture.get()
        if capture is None:
            # Not in an engine worker (which owns a slot): a slot for this call alone.
            install_output_router()
            token = _capture.set(_CaptureSlot())
            try:
                return await self.call(
                    arguments, resources, artifact, inputs, plan_id, node, attempt, limiter
                )
            finally:
                _capture.reset(token)
        # Capturing from here. On cancellation the slot stays so: the engine takes what a
        # call that timed out wrote.
        capture.captured = PENDING
        guard = (
            Guard(self.guard_label, network=self.network) if self.guard_label is not None else None
        )
        context = ToolContext._of_call(plan_id, node, attempt, resources, guard)
        state = enter(guard) if guard is not None else None
        try:
            outcome = await self._call(arguments, resources, artifact, inputs, context, limiter)
        finally:
            if state is not None:
                leave(state)
            context.cleanup()
        return ended(outcome, guard, capture)

    async def _call(
        self,
        arguments: Mapping[str, Any],
        resources: Mapping[str, Any],
        artifact: Any,
        inputs: Mapping[str, Any] | None,
        context: ToolContext,
        limiter: CapacityLimiter | None,
    ) -> Outcome:
        if self.wrapped is not None:
            return await self._call_wrapped(
                arguments, resources, artifact, inputs, context, limiter
            )
        if self.mcp is not None:
            return await self.mcp.call(self.slots, arguments, resources, artifact, inputs)
        if self.isolation == "sandbox":
            return await self._call_in_sandbox(arguments, resources, artifact, inputs, context)
        assert self.func is not None and self.signature is not None
        try:
            kwargs = self.bind(arguments, resources, artifact, inputs, context)
            if self.awaited:
                value = await self.func(**kwargs)
            elif self.isolation == "ray":
                return await self._call_on_ray(kwargs, context)
            elif self.isolation == "process":
                return await self._call_in_process(kwargs, context)
            else:  # thread (sync, or async on a loop of its own): `inline` is refused for sync
                return await self._call_in_thread(kwargs, context, limiter)
        except BaseException as exc:
            if propagates(exc):
                raise
            return exception_outcome(self.tool.name, exc)
        return Outcome(True, value)

    async def _call_in_thread(
        self, kwargs: dict[str, Any], context: ToolContext, limiter: CapacityLimiter | None
    ) -> Outcome:
        assert self.func is not None and self.signature is not None
        func = self.func
        if self.signature.is_async:
            func = functools.partial(_run_on_own_loop, _backend(), func)
        guard = context.guard
        call = (
            functools.partial(func, **kwargs)
            if guard is None
            else functools.partial(run_guarded, guard, func, kwargs)
        )
        job = await _threads.run(call, limiter)
        if job.ok:
            return Outcome(True, job.value)
        return exception_outcome(self.tool.name, job.value)

    def _entry_arguments(self, kwargs: dict[str, Any], context: ToolContext) -> tuple[Any, ...]:
        """What :func:`_process_entry` needs to run this call in another process."""
        tool = self.tool
        kwargs.pop("context", None)
        kwargs = _picklable(kwargs)
        wants_context = "context" in (self.signature.names if self.signature else ())
        return (
            tool.name,
            tool.entrypoint,
            (tool.name, tool.code) if tool.code is not None else None,
            kwargs,
            # The guard of the call, not of this tool: a wrapped tool runs under the
            # validation that wraps it.
            context.guard is not None,
            wants_context,
            # Only a context needs the resources, and every call pickles them.
            _picklable(context.resources) if wants_context else {},
            _changed_of(context) if wants_context else {},
            _earlier_of(context) if wants_context else None,
            (context.plan_id, context.node, context.attempt),
            context.guard is not None and context.guard.network,
            _backend(),
        )

    async def _call_in_process(self, kwargs: dict[str, Any], context: ToolContext) -> Outcome:
        entry = self._entry_arguments(kwargs, context)
        # Starting a worker process is the runtime's doing, not the validation's; the child
        # applies the same guard to the call itself. A timeout (cancellation) makes anyio
        # kill the worker process with SIGKILL; the next call starts a new one.
        with unguarded():
            try:
                with_parent: tuple[Any, ...] = (*entry, os.getpid())
                outcome = await anyio.to_process.run_sync(
                    _process_entry, *with_parent, cancellable=True
                )
            except anyio.BrokenWorkerProcess:
                # The call ended its process (os._exit(), a signal, a crash): its failure.
                return Outcome(
                    False,
                    error=ResultError.EXCEPTION,
                    message=f"{self.tool.name} ended its worker process during the call "
                    "(os._exit(), a signal or a crash)",
                    detail={"exception_type": "BrokenWorkerProcess"},
                )
        return _adopt_output(outcome)

    async def _call_in_sandbox(
        self,
        arguments: Mapping[str, Any],
        resources: Mapping[str, Any],
        artifact: Any,
        inputs: Mapping[str, Any] | None,
        context: ToolContext,
        transform: tuple[str, str] | None = None,
    ) -> Outcome:
        """Run the call in a worker process confined by the kernel (see ``_sandbox``): the
        pool of the run, or one of its own for a call made outside a run. The callable is
        loaded, and its arguments bound, in the worker only: none of its code runs here.

        ``transform`` (the validation's name, its transform's source): the call's output
        goes through the transform there, and the outcome is that validation's result; a
        validation without code of its own (a wrapped one) runs only the transform, of
        ``arguments["output"]``."""
        from gategraph.runtime._data._builtins import copies

        tool = self.tool
        guard = context.guard
        request = SandboxRequest(
            name=tool.name,
            entrypoint=tool.entrypoint,
            code=tool.code,
            slots=self.slots,
            arguments=dict(arguments),
            resources=_picklable(resources),
            changed=_changed_of(context),
            earlier=_earlier_of(context),
            node=context.node,
            attempt=context.attempt,
            read_only=tuple(k for k, v in resources.items() if isinstance(v, MappingProxyType)),
            artifact=artifact,
            inputs=dict(inputs) if inputs is not None else None,
            # The guard of the call, not of this tool: a wrapped tool runs under the
            # validation that wraps it.
            guarded=guard is not None,
            backend=_backend(),
            plan=context.plan_id,
            result=self.is_validation or transform is not None,
            guard_label=guard.what if guard is not None else "",
            network=guard.network if guard is not None else self.network,
            # A work tool changes the candidate: the folders of its resources (the plan's
            # copies) are the ones it may change, and nothing else on the machine.
            writable=() if guard is not None else folders_of(resources),
            # One view of each folder per core: a test suite may run in as many shards.
            views=tuple(
                folder
                for folder in (folders_of(resources) if guard is not None and copies(tool) else ())
                for _ in range(os.cpu_count() or 1)
            ),
            transform=transform,
        )
        return _adopt_output(await _sandboxed(tool.name, request))

    async def _call_on_ray(self, kwargs: dict[str, Any], context: ToolContext) -> Outcome:
        """Run the call as a Ray task (the same entry as a worker process, so the same
        guard); this event loop's waiter thread waits for it with the others
        (:mod:`._ray`)."""
        from ._ray import await_ray, submit

        entry = self._entry_arguments(kwargs, context)
        with unguarded():  # submitting talks to Ray's raylet: the runtime's doing
            import ray

            ref = submit(entry)
            try:
                outcome = await await_ray(ref)
            except ray.exceptions.RayTaskError as exc:
                # Ray's own failure around the entry (the entry returns the tool's own
                # failures as outcomes): its cause, not Ray's wrapper of it.
                cause = getattr(exc, "cause", None)
                if isinstance(cause, Exception):
                    raise cause from None
                raise
        return _adopt_output(cast("Outcome", outcome))

    async def _call_wrapped(
        self,
        arguments: Mapping[str, Any],
        resources: Mapping[str, Any],
        artifact: Any,
        inputs: Mapping[str, Any] | None,
        context: ToolContext,
        limiter: CapacityLimiter | None,
    ) -> Outcome:
        assert self.wrapped is not None and self.transform is not None
        assert self.is_validation
        validation = cast("Validation", self.tool)
        mapping = validation.argument_mapping
        if mapping is None:
            tool_arguments: Mapping[str, Any] = arguments
        else:
            tool_arguments = {}
            for key, value in mapping.items():
                if isinstance(value, str) and value.startswith("$"):
                    if value[1:] not in arguments:
                        return Outcome(
                            False,
                            error=ResultError.EXCEPTION,
                            message=f"argument_mapping of {validation.name!r}: {key} takes "
                            f"{value}, but the validation has no argument {value[1:]!r}",
                        )
                    tool_arguments[key] = arguments[value[1:]]
                else:
                    tool_arguments[key] = value
        wrapped = self.wrapped
        if isinstance(self.transform, str) and _sandboxes(wrapped):
            # One call of its worker: the tool, then the transform of its output.
            return await wrapped._call_in_sandbox(
                tool_arguments,
                resources,
                artifact,
                inputs,
                context,
                transform=(validation.name, self.transform),
            )
        inner = await wrapped._call(tool_arguments, resources, artifact, inputs, context, limiter)
        if not inner.ok:
            inner.message = f"wrapped tool {wrapped.tool.name!r}: {inner.message}"
            return inner
        if isinstance(self.transform, str):
            # The tool ran elsewhere (an MCP server; gategraph's own code, here): the
            # transform of its output runs in a sandboxed call of its own.
            return await self._call_in_sandbox(
                {"output": inner.value},
                {},
                None,
                None,
                context,
                transform=(validation.name, self.transform),
            )
        assert not isinstance(self.transform, str)
        # seed 000, Constraints: transforms are pure data transformations.
        guard = Guard(f"transform of {validation.name!r}", pure=True)
        name = f"transform of {validation.name}"
        try:
            if self.transform_on_loop:
                with guarded(guard):
                    value = await self.transform(inner.value)
            else:
                # A sync transform runs in a worker thread, like a sync validation: on the
                # event loop, one that never returns would outlast every timeout. So does an
                # async one of a validation whose isolation keeps it off the loop.
                transform = self.transform
                if self.transform_is_async:
                    transform = functools.partial(_run_on_own_loop, _backend(), transform)
                job = await _threads.run(
                    functools.partial(_run_transform, guard, transform, inner.value),
                    limiter,
                )
                if not job.ok:
                    return _transform_failure(guard, exception_outcome(name, job.value))
                value = job.value
                if inspect.isawaitable(value):
                    with guarded(guard):
                        value = await value
        except BaseException as exc:
            if propagates(exc):
                raise
            return _transform_failure(guard, exception_outcome(name, exc))
        return _transform_failure(guard, Outcome(True, value))


def _picklable(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` for another process: read-only mapping views (memory resources) do not
    pickle, so the child gets plain copies of them."""
    return {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in values.items()}


def _changed_of(context: ToolContext) -> dict[str, frozenset[str]]:
    """What the call's context knows of the change to its folders, for another process."""
    known = context._changed
    return {folder: known[folder] for folder in folders_of(context.resources) if folder in known}


def _earlier_of(context: ToolContext) -> dict[str, Any] | None:
    """What the call's validation found in an earlier round, for another process."""
    data = context._earlier_data()
    return dict(data) if data is not None else None


def folders_of(resources: Mapping[str, Any]) -> tuple[str, ...]:
    """The folders among a call's resources, each once: as they are, not resolved again
    (a run resolves them once, before any node runs; one a link has replaced since is
    refused by the sandbox)."""
    found = {os.path.abspath(v) for v in resources.values() if isinstance(v, os.PathLike)}
    return tuple(sorted(found))


def _adopt_output(outcome: Outcome) -> Outcome:
    """Move what a worker process captured into this call's capture (beside what the
    call's transform, say, writes in this process)."""
    captured = outcome.captured
    if captured:
        slot = _capture.get()
        if slot is not None:
            slot.shared().add(captured)
            outcome.captured = None
    return outcome


def ended(outcome: Outcome, guard: Guard | None, capture: _CaptureSlot) -> Outcome:
    """A guarded call's outcome once it has left its guard: failed for a refused
    operation (even one the call caught), with what it wrote."""
    if guard is not None and guard.violation is not None:
        outcome = _violation(guard)
    captured = capture.captured
    capture.captured = None
    if captured is not PENDING and captured is not None:
        outcome.captured = captured.as_dict()
    return outcome


def to_result(outcome: Outcome) -> ValidationResult:
    """Turn a validation call's outcome into its structured result (never raises).

    ``coerce_result`` decides what a result may hold (JSON data, depth, size) for every way
    a validation runs; ``coerce_failure`` makes a failed call's message and detail
    encodable the same way."""
    if outcome.ok:
        return coerce_result(outcome.value)
    return coerce_failure(outcome.error or ResultError.EXCEPTION, outcome.message, outcome.detail)


def prepare(
    tool: Tool,
    get_tool: Callable[[str], Tool],
    *,
    isolation: Isolation | None = None,
    timeout: float | None = None,
    default_timeout: float = 60.0,
    sandboxed: bool = False,
    judging: bool = False,
    tell: bool = True,
) -> Prepared:
    """Make ``tool`` ready to call; raise :class:`ConfigError` if it cannot be.

    ``isolation`` is what its node or the run declared; with none, a validation (and the
    tool a wrapped validation calls, ``judging``) runs where :func:`default_isolation`
    says (``tell=False``: without its warning, for a check rather than a run); so does a
    work tool, whose sandbox lets it change the folders of its resources (the plan's
    copies).

    ``sandboxed``: the call must run in the sandbox (a plan policy's ``require_sandbox``;
    a work tool only where it declares no isolation: a declared one is a choice to trust
    it); an ``untrusted`` tool always must. Its code then runs nowhere else:
    a node asking for another isolation is refused, and so is a part of it that would run
    in this process (an untrusted validation's transform) or out of reach (an MCP tool,
    for a plan that requires the sandbox)."""
    from gategraph.runtime._data._models import ToolSource, Validation

    effective_timeout = timeout or tool.timeout or default_timeout
    work = not (judging or isinstance(tool, Validation))
    if (sandboxed and not work) or tool.untrusted:
        isolation = _sandbox_isolation(tool, isolation, policy=sandboxed)
    elif isolation is None:
        isolation = default_isolation(tool, tell=tell, work=work, required=sandboxed)
        if isolation == "process" and not work:
            # The fallback where the kernel cannot sandbox: the code is not trusted, and
            # finding its signature means loading it here, so it loads under the guard.
            with _loading_guarded(tool):
                return prepare(
                    tool,
                    get_tool,
                    isolation="process",
                    timeout=timeout,
                    default_timeout=default_timeout,
                    judging=judging,
                    tell=tell,
                )
    if isolation == "sandbox" and tool.source in (ToolSource.PYTHON, ToolSource.CODE):
        # Nothing of it is imported or run here: in the sandbox only (its worker reports
        # an entrypoint that does not import as a misconfiguration).
        if tool.code is not None:
            _check_defines(tool.name, tool.code, "run")
        elif tool.entrypoint is not None:
            check_entrypoint(tool.entrypoint)
        return Prepared(tool, None, isolation=isolation, timeout=effective_timeout)
    if tool.source is ToolSource.PYTHON:
        assert tool.entrypoint is not None
        func = resolve_entrypoint(tool.entrypoint)
        return Prepared(tool, func, isolation=isolation, timeout=effective_timeout)
    if tool.source is ToolSource.CODE:
        assert tool.code is not None
        try:
            func = _inline_function(tool.name, tool.code, "run")
        except ConfigError:
            raise  # already says what is wrong (no `run`, or sys.exit() while loading)
        except Exception as exc:
            raise ConfigError.at(
                "code", f"inline code of {tool.name!r} failed to load: {_describe(exc)}"
            ) from None
        return Prepared(tool, func, isolation=isolation, timeout=effective_timeout)
    if tool.source is ToolSource.WRAPPED:
        assert isinstance(tool, Validation) and tool.wraps is not None
        assert tool.transform is not None
        wrapped = prepare(
            get_tool(tool.wraps),
            get_tool,
            isolation=isolation,
            timeout=timeout,
            default_timeout=default_timeout,
            sandboxed=sandboxed or tool.untrusted,
            judging=True,
            tell=tell,
        )
        transform: Callable[[Any], Any] | str
        if _sandboxes(wrapped) or (
            tool.transform != PASS_THROUGH
            and (isolation == "sandbox" or (isolation is None and _kernel_sandbox()))
        ):
            # The transform is the graph's code: it runs in the sandbox, never loaded here
            # (in the call of the wrapped tool's process, where that runs there).
            _check_transform(tool.name, tool.transform)
            transform = tool.transform
        else:
            transform = _transform_function(tool.name, tool.transform)
        return Prepared(
            tool,
            None,
            isolation=isolation,
            timeout=effective_timeout,
            wrapped=wrapped,
            transform=transform,
        )
    assert tool.source is ToolSource.MCP
    from ._mcp import McpCall

    # Its server's session is bound when a run opens it (`McpSessions.bind`).
    return Prepared(tool, None, isolation=None, timeout=effective_timeout, mcp=McpCall(tool))
