"""The plan's pluggable roles — strategy actor, execution actor, escalation handler,
validator — as objects, async callables or import paths.

One table says what each role must have; the graph loader (``lifecycle:`` checked before
a plan runs) and the supervisor (building or wrapping what it was given) both use it, so
what ``gategraph check`` accepts is what the supervisor can run.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._base._protocols import (
    EscalationDecision,
    EscalationRequest,
    ExecuteRequest,
    FixRequest,
    Strategy,
    StrategyRequest,
    ValidatorRequest,
)
from gategraph.runtime._calls._call import resolve_entrypoint
from gategraph.runtime._calls._invoke import propagates

__all__ = ["ROLES", "as_role", "build_role", "role_problem"]

ROLES: Final[Mapping[str, tuple[str, ...]]] = {
    "strategy": ("strategize",),
    "executor": ("execute", "fix"),
    "escalation": ("escalate",),
    "validator": ("validate",),
}
"""Each role's ``lifecycle:`` key and the async methods an object playing it has."""

_WHAT: Final[Mapping[str, str]] = {
    "strategy": "a strategy actor",
    "executor": "an execution actor",
    "escalation": "an escalation handler",
    "validator": "a validator",
}


class _CallableExecution:
    """An execution actor made of one async callable: it does the work, and a fix too (a
    fix's request is a :class:`FixRequest`, with the rejection and the failures)."""

    def __init__(self, work: Callable[[ExecuteRequest], Awaitable[Any]]) -> None:
        self.work = work

    async def execute(self, request: ExecuteRequest) -> Any:
        return await self.work(request)

    async def fix(self, request: FixRequest) -> Any:
        return await self.work(request)


class _CallableStrategy:
    """A strategy actor made of one async callable returning a :class:`Strategy`, a
    summary (``str``) or data (a mapping)."""

    def __init__(self, plan: Callable[[StrategyRequest], Awaitable[Any]]) -> None:
        self.plan = plan

    async def strategize(self, request: StrategyRequest) -> Strategy:
        found = await self.plan(request)
        if isinstance(found, Strategy):
            return found
        if isinstance(found, str):
            return Strategy(summary=found)
        if isinstance(found, Mapping):
            return Strategy(summary=str(found.get("summary", "")), data=dict(found))
        raise TypeError(
            f"a strategy callable returns a Strategy, a str or a mapping, not {type(found).__name__}"
        )


class _CallableEscalation:
    """An escalation handler made of one async callable returning an
    :class:`EscalationDecision`."""

    def __init__(self, decide: Callable[[EscalationRequest], Awaitable[Any]]) -> None:
        self.decide = decide

    async def escalate(self, request: EscalationRequest) -> EscalationDecision:
        return await self.decide(request)  # type: ignore[no-any-return]


class _CallableValidator:
    """A validator made of one async callable returning an envelope."""

    def __init__(self, check: Callable[[ValidatorRequest], Awaitable[Any]]) -> None:
        self.check = check

    async def validate(self, request: ValidatorRequest) -> Any:
        return await self.check(request)


_WRAPS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "strategy": _CallableStrategy,
    "executor": _CallableExecution,
    "escalation": _CallableEscalation,
    "validator": _CallableValidator,
}


def _is_async(value: Any) -> bool:
    """Whether calling ``value`` gives an awaitable: an ``async def`` function or method,
    one behind a decorator that kept ``__wrapped__`` (a plain ``def`` wrapper that returns
    the coroutine works as well), or an object whose ``__call__`` is ``async def``."""
    if inspect.iscoroutinefunction(value):
        return True
    try:
        unwrapped = inspect.unwrap(value)
    except ValueError:  # a cycle of __wrapped__: nothing to unwrap to
        unwrapped = value
    if unwrapped is not value and inspect.iscoroutinefunction(unwrapped):
        return True
    if inspect.isfunction(value) or inspect.ismethod(value) or inspect.isclass(value):
        # A function's __call__ is never async; a class's own ``async def __call__`` is
        # for its instances: calling the class builds one.
        return False
    return inspect.iscoroutinefunction(getattr(value, "__call__", None))  # noqa: B004


def _has_methods(value: Any, role: str) -> bool:
    return all(callable(getattr(value, method, None)) for method in ROLES[role])


def _describe(value: Any) -> str:
    """``value`` for a one-line message: short, and never more than one line."""
    if inspect.isclass(value):
        return f"<class {value.__name__}>"
    if inspect.isfunction(value) or inspect.ismethod(value):
        return f"<function {value.__qualname__}>"
    plain = f"<{type(value).__name__} object>"
    if getattr(type(value), "__repr__", None) is object.__repr__:
        return plain  # without the module path and the address, which say nothing here
    try:
        shown = repr(value)
    except Exception:
        return plain
    return plain if "\n" in shown or len(shown) > 80 else shown


def _sync_problem(value: Any, role: str, subject: str) -> str | None:
    """Which of the role's methods on ``value`` (an object, or a class about to be built)
    are not async, or None. Awaiting what a plain ``def`` returns would fail mid-run."""
    plain = [method for method in ROLES[role] if not _is_async(getattr(value, method))]
    if not plain:
        return None
    if len(plain) == 1:
        return (
            f"{subject} has a sync `{plain[0]}`: it must be `async def {plain[0]}(self, request)`"
        )
    listed = " and ".join(f"`{method}`" for method in plain)
    return f"{subject} has a sync {listed}: they must be `async def`"


def _shape_problem(value: Any, role: str, subject: str) -> str | None:
    """What keeps ``value`` from playing ``role`` as it is (an object or an async
    callable, not a class to build), or None."""
    if inspect.isclass(value):
        plays_on_the_class = _has_methods(value, role) and all(
            isinstance(inspect.getattr_static(value, m, None), staticmethod | classmethod)
            for m in ROLES[role]
        )
        instances_play = _has_methods(value, role) or inspect.iscoroutinefunction(
            getattr(value, "__call__", None)  # noqa: B004 - the instances' async __call__
        )
        if instances_play and not plays_on_the_class:
            # Its methods need an instance: called on the class, the first request
            # would fail mid-run.
            return f"{subject} is a class: pass an instance ({value.__name__}())"
    if _has_methods(value, role):
        return _sync_problem(value, role, subject)
    if _is_async(value):
        return None
    listed = " and ".join(f"async {m}(request)" for m in ROLES[role])
    return (
        f"{subject} is neither {_WHAT[role]} (with {listed}) "
        "nor an async callable taking the request"
    )


def as_role(value: Any, role: str, *, field: str | None = None) -> Any:
    """``value`` itself when it has the role's async methods; wrapped when it is one async
    callable. :class:`ConfigError` at ``field`` otherwise."""
    problem = _shape_problem(value, role, _describe(value))
    if problem is not None:
        raise ConfigError.at(field or role, problem)
    return value if _has_methods(value, role) else _WRAPS[role](value)


def role_problem(uses: str, arguments: Mapping[str, Any], role: str) -> str | None:
    """What is wrong with ``lifecycle.<role>.uses``, or None: it must name a class with
    the role's async methods (built with ``arguments``), or an object or async function
    that plays the role as it is (then ``arguments`` must be empty)."""
    try:
        found = resolve_entrypoint(uses, field="uses", any_object=True)
    except ConfigError as exc:
        return exc.issues[0].message
    if role == "validator" and not inspect.isclass(found):
        # seed 003: a new validator for every pass, never one that served before (nor the
        # worker that made the change): only a class can be built new each time.
        return f"{uses!r} is not a class: a validator is built new for every pass"
    if inspect.isclass(found):
        missing = [m for m in ROLES[role] if not callable(getattr(found, m, None))]
        if missing:
            listed = " and ".join(f"`async {m}(request)`" for m in missing)
            return f"{uses!r} has no {listed}: {_WHAT[role]} needs it"
        return _sync_problem(found, role, repr(uses))
    problem = _shape_problem(found, role, repr(uses))
    if problem is not None:
        return problem
    if arguments:
        return (
            f"{uses!r} is a {type(found).__name__}, used as it is: `arguments` are for a "
            "class that is built with them"
        )
    return None


def build_role(uses: str, arguments: Mapping[str, Any], role: str, *, field: str) -> Any:
    """The object ``lifecycle.<role>`` names: the class built with ``arguments``, or the
    object itself (wrapped when it is an async callable)."""
    problem = role_problem(uses, arguments, role)
    if problem is not None:
        raise ConfigError.at(field, problem)
    found = resolve_entrypoint(uses, field=field, any_object=True)
    if not inspect.isclass(found):
        return as_role(found, role, field=field)
    try:
        return found(**arguments)
    except BaseException as exc:
        if propagates(exc):
            raise
        raise ConfigError.at(field, f"cannot build {uses}: {type(exc).__name__}: {exc}") from None
