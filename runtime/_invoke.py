"""Calling tools and validations: entrypoints, inline code, wrapped tools, isolation.

A tool is *prepared* once per run (import, compile, read the signature) into a
:class:`Prepared`, then called many times. A call never raises for a failure of the
tool itself: it returns an :class:`Outcome` saying what went wrong (``exception``,
``malformed``, ``too_large``, ``read_only_violation``); timeouts are applied by the
caller (the engine's workers). Cancellation always propagates: only ``Exception`` is
caught, never ``BaseException``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import traceback
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final, Literal, cast

import anyio
import anyio.to_process
import anyio.to_thread
import msgspec

from ._context import ToolContext
from ._exceptions import ConfigError
from ._readonly import (
    Guard,
    ReadOnlyViolationError,
    enter,
    guarded,
    leave,
    run_guarded,
    unguarded,
)
from ._results import ResultError, ValidationResult, coerce_result

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from anyio import CapacityLimiter

    from ._models import Tool, Validation

# ``_models`` (pydantic) is imported where a tool is prepared, not at the top: a worker
# process imports this module to run `_process_entry`, and pydantic would add some 120 ms
# to the start of every worker process.

__all__ = ["Isolation", "Outcome", "Prepared", "prepare", "resolve_entrypoint"]

Isolation = Literal["inline", "thread", "process", "ray"]

MAX_RESULT_BYTES: Final = 1 << 20
"""A result (message and data) larger than this, encoded as JSON, fails as ``too_large``."""
_INJECTED: Final = ("artifact", "context", "inputs")
_encoder: Final = msgspec.json.Encoder()


class Outcome(msgspec.Struct):
    """What one call produced: a value, or the kind of failure and why."""

    ok: bool
    value: Any = None
    error: str | None = None
    """A :class:`ResultError` value when the call failed."""
    message: str = ""
    detail: dict[str, Any] | None = None


def resolve_entrypoint(entrypoint: str) -> Callable[..., Any]:
    """Import ``"package.module:attr.path"`` and return the callable it names."""
    module_name, _, attr_path = entrypoint.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError.at(
            "entrypoint", f"cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError.at(
                "entrypoint", f"{module_name!r} has no attribute {attr_path!r}"
            ) from None
    if not callable(target):
        raise ConfigError.at("entrypoint", f"{entrypoint!r} is not callable")
    return target  # type: ignore[no-any-return]


def _inline_function(name: str, code: str, function: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"__name__": f"gategraph.inline.{name}"}
    exec(compile(code, f"<{name}>", "exec"), namespace)
    target = namespace.get(function)
    if not callable(target):
        raise ConfigError.at("code", f"inline code of {name!r} must define `{function}(...)`")
    return target  # type: ignore[no-any-return]


def _transform_function(name: str, source: str) -> Callable[[Any], Any]:
    try:
        expression = compile(source, f"<transform of {name}>", "eval")
    except SyntaxError:
        return _inline_function(f"{name}.transform", source, "transform")
    return lambda output: eval(expression, {"output": output})


class _Signature:
    """What a callable accepts, read once."""

    __slots__ = ("injected", "is_async", "names", "varkw")

    def __init__(self, func: Callable[..., Any]) -> None:
        self.is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            getattr(func, "__call__", None)  # noqa: B004 - async __call__ on an instance
        )
        try:
            params = inspect.signature(func).parameters
        except (TypeError, ValueError):
            params = MappingProxyType({})
        self.varkw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        self.names = frozenset(params)
        self.injected = tuple(n for n in _INJECTED if n in params)


class Prepared:
    """A tool or validation made ready to call: its callable, signature and wrapping."""

    __slots__ = (
        "awaited",
        "func",
        "guard_label",
        "is_validation",
        "isolation",
        "signature",
        "slots",
        "timeout",
        "tool",
        "transform",
        "wrapped",
    )

    def __init__(
        self,
        tool: Tool,
        func: Callable[..., Any] | None,
        *,
        isolation: Isolation,
        timeout: float,
        wrapped: Prepared | None = None,
        transform: Callable[[Any], Any] | None = None,
    ) -> None:
        from ._models import Validation

        self.tool = tool
        self.func = func
        self.signature = _Signature(func) if func is not None else None
        self.is_validation = isinstance(tool, Validation)
        self.guard_label = f"validation {tool.name!r}" if self.is_validation else None
        self.isolation = isolation
        self.timeout = timeout
        self.wrapped = wrapped
        self.transform = transform
        self.slots = tuple(slot.name for slot in tool.resource_slots)
        # An async callable of its own (nothing wrapped) is awaited right in the caller's
        # task: `call` takes a shorter way for it. On Ray, it runs in a Ray worker instead.
        self.awaited = self.signature is not None and self.signature.is_async and isolation != "ray"

    # -- calling -----------------------------------------------------------------------------

    def _bind(
        self,
        arguments: Mapping[str, Any],
        resources: Mapping[str, Any],
        artifact: Any,
        inputs: Mapping[str, Any] | None,
        context: ToolContext,
    ) -> dict[str, Any]:
        """Build the keyword arguments: configured ones, resource slots, then injected values."""
        kwargs = dict(arguments)
        if self.slots:
            for slot in self.slots:
                if slot in resources:
                    kwargs[slot] = resources[slot]
                elif len(resources) == 1 and len(self.slots) == 1:
                    kwargs[slot] = next(iter(resources.values()))
        sig = self.signature
        assert sig is not None
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
        """Call the tool; for a validation, under the read-only guard."""
        guard = Guard(self.guard_label) if self.guard_label is not None else None
        context = ToolContext._of_call(plan_id, node, attempt, resources, guard)
        state = enter(guard) if guard is not None else None
        try:
            if self.awaited:
                # Inlined `_call` for the common case: a coroutine layer less on every
                # suspension of a fan-out of I/O-bound validations.
                assert self.func is not None
                try:
                    value = await self.func(
                        **self._bind(arguments, resources, artifact, inputs, context)
                    )
                except Exception as exc:
                    outcome = _exception_outcome(self.tool.name, exc)
                else:
                    outcome = Outcome(True, value)
            else:
                outcome = await self._call(arguments, resources, artifact, inputs, context, limiter)
        finally:
            if state is not None:
                leave(state)
            context.cleanup()
        if guard is not None and guard.violation is not None:
            return Outcome(
                False,
                error=ResultError.READ_ONLY_VIOLATION,
                message=f"{guard.what} attempted a write: {guard.violation}",
            )
        return outcome

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
        assert self.func is not None and self.signature is not None
        try:
            kwargs = self._bind(arguments, resources, artifact, inputs, context)
            if self.isolation == "ray":
                value = await self._call_on_ray(kwargs, context, limiter)
            elif self.signature.is_async:
                value = await self.func(**kwargs)
            elif self.isolation == "inline":
                value = self.func(**kwargs)
            elif self.isolation == "thread":
                guard = context.guard
                call = (
                    functools.partial(self.func, **kwargs)
                    if guard is None
                    else functools.partial(run_guarded, guard, self.func, kwargs)
                )
                value = await anyio.to_thread.run_sync(
                    call, abandon_on_cancel=True, limiter=limiter
                )
            else:
                value = await self._call_in_process(kwargs, context)
        except Exception as exc:
            return _exception_outcome(self.tool.name, exc)
        return Outcome(True, value)

    def _entry_arguments(self, kwargs: dict[str, Any], context: ToolContext) -> tuple[Any, ...]:
        """What :func:`_process_entry` needs to run this call in another process."""
        tool = self.tool
        kwargs.pop("context", None)
        # Read-only mapping views do not pickle; the child gets plain copies.
        kwargs = {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in kwargs.items()}
        wants_context = "context" in (self.signature.names if self.signature else ())
        return (
            tool.entrypoint,
            (tool.name, tool.code) if tool.code is not None else None,
            kwargs,
            # The guard of the call, not of this tool: a wrapped tool runs under the
            # validation that wraps it.
            context.guard is not None,
            wants_context,
            # Only a context needs the resources, and every call pickles them.
            {
                k: dict(v) if isinstance(v, MappingProxyType) else v
                for k, v in context.resources.items()
            }
            if wants_context
            else {},
        )

    async def _call_in_process(self, kwargs: dict[str, Any], context: ToolContext) -> Any:
        entry = self._entry_arguments(kwargs, context)
        # Starting a worker process is the runtime's doing, not the validation's; the child
        # applies the same guard to the call itself.
        with unguarded():
            return await anyio.to_process.run_sync(_process_entry, *entry, cancellable=True)

    async def _call_on_ray(
        self, kwargs: dict[str, Any], context: ToolContext, limiter: CapacityLimiter | None
    ) -> Any:
        """Run the call as a Ray task (the same entry as a worker process, so the same
        guard), and wait for it in a worker thread: Ray's awaitables are asyncio's only."""
        entry = self._entry_arguments(kwargs, context)
        with unguarded():  # submitting talks to Ray's raylet: the runtime's doing
            import ray

            ref = _ray_entry().remote(*entry)
            try:
                return await anyio.to_thread.run_sync(
                    ray.get, ref, abandon_on_cancel=True, limiter=limiter
                )
            except anyio.get_cancelled_exc_class():
                # A timeout or a cancelled plan: the Ray task stops too.
                ray.cancel(ref, force=True)
                raise
            except ray.exceptions.RayTaskError as exc:
                # The tool's own exception (a read-only violation included), not Ray's
                # wrapper of it.
                cause = getattr(exc, "cause", None)
                if isinstance(cause, Exception):
                    raise cause from None
                raise

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
        inner = await wrapped._call(tool_arguments, resources, artifact, inputs, context, limiter)
        if not inner.ok:
            inner.message = f"wrapped tool {wrapped.tool.name!r}: {inner.message}"
            return inner
        # seed 000, Constraints: transforms are pure data transformations.
        guard = Guard(f"transform of {validation.name!r}", pure=True)
        try:
            with guarded(guard):
                value = self.transform(inner.value)
                if inspect.isawaitable(value):
                    value = await value
        except Exception as exc:
            outcome = _exception_outcome(f"transform of {validation.name}", exc)
        else:
            outcome = Outcome(True, value)
        if guard.violation is not None:
            return Outcome(
                False,
                error=ResultError.READ_ONLY_VIOLATION,
                message=f"{guard.what} is not pure: {guard.violation}",
            )
        return outcome


def _exception_outcome(name: str, exc: Exception) -> Outcome:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    if isinstance(exc, ReadOnlyViolationError):
        return Outcome(False, error=ResultError.READ_ONLY_VIOLATION, message=str(exc))
    return Outcome(
        False,
        error=ResultError.EXCEPTION,
        message=f"{name} raised {type(exc).__name__}: {exc}{where}",
        detail={"exception_type": type(exc).__name__},
    )


_RAY_ENTRY: list[Any] = []


def _ray_entry() -> Any:
    """:func:`_process_entry` as a Ray remote function (made once, on first use)."""
    if not _RAY_ENTRY:
        import ray

        # One retry less than Ray's default: a validation's retries are the Max-N
        # runtime's to decide, not Ray's.
        _RAY_ENTRY.append(ray.remote(max_retries=0)(_process_entry))
    return _RAY_ENTRY[0]


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _process_entry(
    entrypoint: str | None,
    inline: tuple[str, str] | None,
    kwargs: dict[str, Any],
    is_validation: bool,
    wants_context: bool,
    resources: dict[str, Any],
) -> Any:
    """Run a sync tool in a worker process, under the same read-only guard."""
    if inline is not None:
        func = _inline_function(inline[0], inline[1], "run")
    else:
        assert entrypoint is not None
        func = resolve_entrypoint(entrypoint)
    guard = Guard("validation in a worker process") if is_validation else None
    context = ToolContext(resources=resources, guard=guard)
    if wants_context:
        kwargs["context"] = context
    try:
        if guard is None:
            return _run_entry(func, kwargs)
        with guarded(guard):
            value = _run_entry(func, kwargs)
        if guard.violation is not None:
            raise ReadOnlyViolationError(f"{guard.what} attempted a write: {guard.violation}")
        return value
    finally:
        context.cleanup()


def _run_entry(func: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    value = func(**kwargs)
    if inspect.isawaitable(value):
        # An async tool shipped to another process (a Ray worker): its own event loop.
        return anyio.run(_awaited, value)
    return value


def to_result(outcome: Outcome) -> ValidationResult:
    """Turn a validation call's outcome into its structured result (never raises)."""
    if not outcome.ok:
        data = dict(outcome.detail or {})
        data["error"] = outcome.error or ResultError.EXCEPTION
        return ValidationResult(passed=False, message=outcome.message, data=data)
    result = coerce_result(outcome.value)
    if result.data or len(result.message) > 4096:
        try:
            size = len(_encoder.encode(result))
        except (TypeError, ValueError, OverflowError) as exc:
            return ValidationResult.failure(
                ResultError.MALFORMED, f"malformed validation result: data is not JSON ({exc})"
            )
        if size > MAX_RESULT_BYTES:
            return ValidationResult.failure(
                ResultError.TOO_LARGE,
                f"the result is {size} bytes, over the limit of {MAX_RESULT_BYTES}",
                size=size,
            )
    return result


def prepare(
    tool: Tool,
    get_tool: Callable[[str], Tool],
    *,
    isolation: Isolation | None = None,
    timeout: float | None = None,
    default_timeout: float = 60.0,
) -> Prepared:
    """Make ``tool`` ready to call; raise :class:`ConfigError` if it cannot be."""
    from ._models import ToolSource, Validation

    effective_timeout = timeout or tool.timeout or default_timeout
    mode: Isolation = isolation or "thread"
    if tool.source is ToolSource.PYTHON:
        assert tool.entrypoint is not None
        func = resolve_entrypoint(tool.entrypoint)
        return Prepared(tool, func, isolation=mode, timeout=effective_timeout)
    if tool.source is ToolSource.CODE:
        assert tool.code is not None
        try:
            func = _inline_function(tool.name, tool.code, "run")
        except ConfigError:
            raise  # already says what is wrong (no `run`)
        except Exception as exc:
            raise ConfigError.at(
                "code", f"inline code of {tool.name!r} failed to load: {type(exc).__name__}: {exc}"
            ) from None
        return Prepared(tool, func, isolation=mode, timeout=effective_timeout)
    if tool.source is ToolSource.WRAPPED:
        assert isinstance(tool, Validation) and tool.wraps is not None
        assert tool.transform is not None
        wrapped = prepare(get_tool(tool.wraps), get_tool, isolation=isolation, timeout=timeout)
        return Prepared(
            tool,
            None,
            isolation=mode,
            timeout=effective_timeout,
            wrapped=wrapped,
            transform=_transform_function(tool.name, tool.transform),
        )
    raise ConfigError.at(
        "source",
        f"{tool.name!r} is an MCP tool; this version of gategraph cannot call MCP tools yet",
    )
