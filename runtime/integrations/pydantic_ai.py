"""pydantic-ai adapter: gate an Agent's output with gategraph validations, and give an Agent
a catalog's read-only tools and validations as its tools.

::

    agent = Agent(model, output_type=Edit, retries=3)
    gate_output(agent, ["python_syntax"])           # the output's files must parse
    agent = Agent(model, toolsets=[CatalogToolset(catalog, change="repo/")])

:class:`GategraphOutputValidator` (which :func:`gate_output` registers) runs the
validations over each final output. A rejection goes back to the model as
:class:`~pydantic_ai.ModelRetry` with the findings; a validation that could not decide (a
timeout, a crash) is re-run after its backoff without troubling the model; and when the
failure ladder escalates — the retry budget is spent, or retrying cannot help — the run
stops with :class:`GateEscalatedError`. One budget is shared by every round of one run.
The validations are checked when the gate is made, so a misspelt name fails before any
model is paid for.

pydantic-ai runs on asyncio only, so this adapter does too. Install it with
``pip install 'gategraph[pydantic-ai]'``.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import typing
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar

import anyio
import msgspec
import pydantic_core
from gategraph.runtime._base._exceptions import ConfigError, GategraphError
from gategraph.runtime._data._maxn import MaxNPolicy, RetryBudget, RetryDecision
from gategraph.runtime._data._models import Validation
from gategraph.runtime._definitions._skills import names_of
from gategraph.runtime._embed._validate import Verdict, graph_spec, load_spec, validate
from gategraph.runtime._storage._database import check_event_log, opened_log

try:
    from pydantic_ai import ModelRetry
    from pydantic_ai.tools import Tool as AgentTool
    from pydantic_ai.toolsets import FunctionToolset
except ImportError as error:  # pragma: no cover - a base install; tested by hiding pydantic_ai
    raise ImportError(
        "gategraph.runtime.integrations.pydantic_ai needs pydantic-ai: "
        f"pip install 'gategraph[pydantic-ai]' ({error})"
    ) from error

if TYPE_CHECKING:
    from gategraph.runtime._data._models import Tool
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._storage._eventlog import EventLog
    from pydantic_ai import Agent, RunContext

    _R = TypeVar("_R")
    # A function of an output, or of the run's context and the output.
    _OfOutput: TypeAlias = Callable[[Any], _R] | Callable[[RunContext[Any], Any], _R]

__all__ = ["CatalogToolset", "GateEscalatedError", "GategraphOutputValidator", "gate_output"]

_T = TypeVar("_T")
# What validate() takes as a change: a folder, a mapping of files, or none.
_ChangeLike = str | os.PathLike[str] | Mapping[str, str | bytes] | None
# The toolset's folder, or a function of the run that returns it.
_FolderOf = Callable[["RunContext[Any]"], str | os.PathLike[str] | None]

# Runs whose budget is kept. A budget is dropped when its run's output passes or the run is
# stopped; a run that ends another way (a usage limit, an error) says nothing to the gate,
# so the oldest go first. Only a run among more than this many at once would get a fresh
# budget, and the agent's own output_retries still bound it.
_RUNS_KEPT: Final = 256
_MODEL_NAME: Final = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_MODEL_NAME: Final = re.compile(r"[^a-zA-Z0-9_-]")
_RESOURCE: Final = "change"
_ARGUMENTS_FIELD: Final = re.compile(r"^nodes\[0\]\.arguments(\.|$)")
_VALIDATOR: Final = "GategraphOutputValidator"
_TOOLSET: Final = "CatalogToolset"
# A folder that exists, to load the gate's graph when it is made: nothing runs over it.
_PLACEHOLDER: Final = os.path.dirname(os.path.abspath(__file__))


class GateEscalatedError(GategraphError):
    """gategraph stopped an agent's run: the output is still rejected and retrying it will
    not help (the retry budget is spent, a validation cannot decide, or the agent has no
    output retries left). A person looks at :attr:`verdict`."""

    def __init__(self, reason: str, verdict: Verdict) -> None:
        feedback = verdict.feedback
        super().__init__(f"{reason}\n{feedback}" if feedback else reason)
        self.reason = reason
        """Why the run was stopped, in one sentence."""
        self.verdict = verdict
        """The last round's verdict: its envelope, findings and records."""


def _files(value: Any) -> Mapping[str, str | bytes] | None:
    if isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str | bytes) for k, v in value.items()
    ):
        return value
    return None


def _default_change(output: Any) -> _ChangeLike:
    """The change an output proposes: its ``files`` (an attribute or key mapping relative
    paths to text), or the output itself if it is such a mapping; else none."""
    inner = output.get("files") if isinstance(output, Mapping) else getattr(output, "files", None)
    found = _files(inner)
    return found if found is not None else _files(output)


def _default_artifact(output: Any) -> Any:
    """The output as the validations' artifact, in JSON form (a model becomes a dict)."""
    try:
        return pydantic_core.to_jsonable_python(output)
    except pydantic_core.PydanticSerializationError:
        return output


def _first(error: ConfigError, source: str) -> ConfigError:
    """The error's first problem alone, as one line: the rest often follow from it."""
    return ConfigError(error.issues[:1], source=source)


class GategraphOutputValidator:
    """An output validator for a pydantic-ai Agent that runs gategraph validations.

    Register it with ``agent.output_validator(GategraphOutputValidator([...]))`` or
    :func:`gate_output`. For each final output (partial outputs of a stream are let
    through) it validates the change the output proposes and

    - returns the output when the validations attest it;
    - raises :class:`~pydantic_ai.ModelRetry` with the findings when they reject it, so the
      model fixes it (the agent's output retries must allow as many as the budget);
    - re-runs the validations, after the fault's backoff, when one could not decide (a
      timeout, a crash): that is no finding for the model;
    - raises :class:`GateEscalatedError` when the failure ladder escalates (the budget is
      spent, or retrying cannot help) or the agent has no output retries left.

    ``run()``, ``run_stream_events()`` and ``agent.iter()`` send a rejection back to the
    model; pydantic-ai's ``run_stream()`` cannot retry an output, so there the first
    rejection ends the run (the findings are in the error's ``__cause__``).

    ``validations`` are as :func:`~gategraph.runtime.validate` takes them: names (from
    ``catalog`` or built-ins), inline configs, :class:`~gategraph.runtime.Validation`
    objects, or ``{"validation": ..., "arguments": {...}}``; with a ``catalog``, the
    validations attached to ``resource`` (under ``project``) run too. They are checked
    here: a misspelt name or a bad argument raises :class:`ConfigError` at once. ``change``
    turns an output into the change (a folder or a mapping of files; default: the output's
    ``files``), ``artifact`` into the value the validations judge (default: the output as
    JSON); either may take the run's context first (``def change(ctx: RunContext[...],
    output)``: a first parameter annotated ``RunContext``), as pydantic-ai's own output
    validators do. An output with no change stops the run with
    :class:`ConfigError` when a
    validation checks files. With ``base`` (a folder: the repository the output edits),
    the validations judge the change laid over a copy of it, removed after each round.

    Each run of the agent spends one budget of ``policy`` (default: three retries), shared
    by rejections and infra faults: a run's first output starts it, also under a
    ``run_id`` used before. Pass ``budget`` to share one across runs instead. ``event_log``
    is an event log, or the path of a SQLite log opened for each output. ``sleep`` waits
    before a re-run (inject one in tests).
    """

    def __init__(
        self,
        validations: Iterable[Any] = (),
        *,
        catalog: Catalog | None = None,
        change: _OfOutput[_ChangeLike] = _default_change,
        artifact: _OfOutput[Any] = _default_artifact,
        resource: str = _RESOURCE,
        project: str | None = None,
        policy: MaxNPolicy | None = None,
        budget: RetryBudget | None = None,
        event_log: EventLog | str | os.PathLike[str] | None = None,
        default_timeout: float | None = None,
        sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
        base: str | os.PathLike[str] | None = None,
    ) -> None:
        if base is not None and not os.path.isdir(base):
            raise ConfigError.at("base", f"{os.fspath(base)!r} is not a folder", source=_VALIDATOR)
        self._base = base
        if isinstance(validations, str | Mapping | Validation):
            validations = [validations]
        self.validations: Final = tuple(validations)
        """The validations every output must pass."""
        if budget is not None and not isinstance(budget, RetryBudget):
            raise ConfigError.at(
                "budget", f"a RetryBudget, not {type(budget).__name__}", source=_VALIDATOR
            )
        check_event_log(event_log, "event_log", source=_VALIDATOR)
        # A path is opened per output: pydantic-ai may run each on a loop of its own.
        self._event_log = event_log
        self._needs_folder = self._checked(catalog, resource, project, default_timeout)
        self.catalog: Final = catalog
        self.policy: Final = policy if policy is not None else MaxNPolicy()
        """The retry policy of each run's budget."""
        # Whether each takes the run's context, decided once: it is asked at every output.
        self._change = _with_context(change)
        self._own_change = change is not _default_change
        self._artifact = _with_context(artifact)
        self._resource = resource
        self._project = project
        self._shared = budget
        self._default_timeout = default_timeout
        self._sleep = sleep
        self._budgets: OrderedDict[str, RetryBudget] = OrderedDict()

    def _checked(
        self,
        catalog: Catalog | None,
        resource: str,
        project: str | None,
        default_timeout: float | None,
    ) -> str | None:
        """Load the gate's graph as :func:`validate` will (over a stand-in folder), so bad
        validations fail now, not at the first output; return the first validation that
        needs a folder, if any."""
        if not self.validations and catalog is None:
            raise ConfigError.at(
                "validations",
                "no validation given, and no catalog whose attachments would gate the output",
                source=_VALIDATOR,
            )
        policy: dict[str, Any] = {}
        if default_timeout is not None:
            policy["default_timeout"] = default_timeout
        resources = {resource: {"kind": "directory", "path": _PLACEHOLDER}}
        try:
            spec = graph_spec(
                self.validations, resources, project=project, policy=policy, source=_VALIDATOR
            )
            graph = load_spec(spec, catalog, source=_VALIDATOR)
        except ConfigError as error:
            raise _first(error, _VALIDATOR) from None
        for node in graph.validation_nodes():
            if any(slot.required for slot in graph.get_tool(node.target).resource_slots):
                return node.target
        return None

    def _budget(self, run_id: str | None, retry: int) -> RetryBudget:
        if self._shared is not None:
            return self._shared
        if run_id is None:  # not in an agent run (called by hand): a round of its own
            return RetryBudget(self.policy)
        # A run's first output (retry 0) starts a budget: a caller may pass the same run_id
        # to several runs, and an earlier one may have ended without a word to the gate.
        kept = self._budgets.pop(run_id, None)
        budget = kept if kept is not None and retry else RetryBudget(self.policy)
        self._budgets[run_id] = budget  # last: the most recently used
        if len(self._budgets) > _RUNS_KEPT:
            self._budgets.popitem(last=False)
        return budget

    async def check(
        self, output: Any, budget: RetryBudget | None = None, ctx: RunContext[Any] | None = None
    ) -> Verdict:
        """Validate ``output`` until a round decides (a pass, a rejection for the model, or
        an escalation); re-run a round that could not decide after its backoff. Every
        round spends from ``budget`` (default: a fresh one of :attr:`policy`). ``ctx`` is
        the run's context, for ``change=`` and ``artifact=`` functions that take it."""
        budget = budget if budget is not None else RetryBudget(self.policy)
        change = self._change(ctx, output)
        artifact = self._artifact(ctx, output)
        if change is None:
            self._check_no_change()
        async with opened_log(self._event_log) as log:
            return await self._rounds(change, artifact, budget, log)

    def _check_no_change(self) -> None:
        """Refuse an output with no change when a validation would need its folder: the
        model cannot fix that, only the gate's ``change=`` can."""
        needs = self._needs_folder
        if needs is None and self.catalog is not None:
            # The attachments gate the change's folder: without one they would not run.
            attached = self.catalog.resolve(self._resource, project=self._project)
            needs = attached[0].validation if attached else None
        if needs is None:
            return
        if not self._own_change:
            message = (
                "the output proposes no files (`files` must map path → text), and "
                f"{needs!r} checks files: pass `change=`, a function of the output that "
                "returns a folder or a mapping of path → text"
            )
        else:
            message = (
                f"`change=` gave no change for this output, and {needs!r} checks files: "
                "it must return a folder or a mapping of path → text"
            )
        raise ConfigError.at("change", message, source=_VALIDATOR)

    async def _rounds(
        self, change: _ChangeLike, artifact: Any, budget: RetryBudget, log: EventLog | None
    ) -> Verdict:
        while True:
            verdict = await validate(
                change,
                self.validations,
                artifact=artifact,
                base=self._base,
                catalog=self.catalog,
                resource=self._resource,
                project=self._project,
                budget=budget,
                event_log=log,
                default_timeout=self._default_timeout,
            )
            # seed 003: an infra fault re-runs the validator only; the work is not at fault,
            # so the model is not asked to fix anything. Each re-run spends one slot, so
            # this loop ends within the budget.
            if verdict.decision is not RetryDecision.RETRY_VALIDATOR:
                return verdict
            await self._sleep(verdict.retry_after)

    async def __call__(self, ctx: RunContext[Any], output: _T) -> _T:
        """Validate one output of an agent run (pydantic-ai calls this)."""
        if ctx.partial_output:
            return output  # a stream's partial output: only the final one is a proposal
        run_id = ctx.run_id
        verdict = await self.check(output, self._budget(run_id, ctx.retry), ctx)
        if verdict.passed:
            if run_id is not None:
                self._budgets.pop(run_id, None)  # the run ends with this output
            return output
        reason = _stop_reason(verdict, ctx.retry, ctx.max_retries)
        if reason is None:
            raise ModelRetry(verdict.feedback)
        if run_id is not None:
            self._budgets.pop(run_id, None)
        raise GateEscalatedError(reason, verdict)


def _takes_context(function: Callable[..., Any]) -> bool:
    """Whether ``function`` takes the run's context first: its first parameter is
    annotated ``RunContext`` — pydantic-ai's own rule for its output validators and tools
    (a function, a method, a callable object)."""
    from pydantic_ai import RunContext

    target = function
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = type(function).__call__  # a callable object: its method
    try:
        parameters = list(inspect.signature(target).parameters.values())
        hints = typing.get_type_hints(target)
    except (TypeError, ValueError, NameError):
        return False
    if inspect.isfunction(target) and target is not function and parameters:
        parameters = parameters[1:]  # a callable object's __call__: past `self`
    if not parameters:
        return False
    first = hints.get(parameters[0].name)
    return first is RunContext or typing.get_origin(first) is RunContext


def _with_context(function: Callable[..., Any]) -> Callable[[Any, Any], Any]:
    """``function`` as one of the run's context and the output, whichever it takes."""
    if _takes_context(function):
        return function
    return lambda ctx, output: function(output)


def _stop_reason(verdict: Verdict, retry: int, max_retries: int) -> str | None:
    """Why a rejected output stops the run, or None when the model is to fix it."""
    if verdict.decision is RetryDecision.ESCALATE_PERMANENT:
        return (
            f"gategraph stopped the run: a validation cannot decide ({verdict.fault}), "
            "and retrying cannot help"
        )
    if verdict.decision is RetryDecision.ESCALATE_EXHAUSTED:
        return (
            f"gategraph stopped the run: the output is still rejected ({verdict.fault}) "
            f"and the retry budget is spent ({verdict.budget_used} of {verdict.budget_limit})"
        )
    # The agent's own output retries run out before gategraph's budget: stop here with the
    # verdict rather than let pydantic-ai fail with a bare count. (A pydantic-ai that does
    # not report its output retries says max_retries=0; it then stops the run itself.)
    if max_retries and retry >= max_retries:
        return (
            f"gategraph stopped the run: the output is still rejected and the agent has no "
            f"output retries left ({max_retries}); raise them to {verdict.budget_limit} "
            "(Agent(retries=...)) to let the model use gategraph's whole budget"
        )
    return None


def gate_output(
    agent: Agent[Any, Any],
    validations: Iterable[Any] = (),
    *,
    catalog: Catalog | None = None,
    change: _OfOutput[_ChangeLike] = _default_change,
    artifact: _OfOutput[Any] = _default_artifact,
    base: str | os.PathLike[str] | None = None,
    resource: str = _RESOURCE,
    project: str | None = None,
    policy: MaxNPolicy | None = None,
    budget: RetryBudget | None = None,
    event_log: EventLog | str | os.PathLike[str] | None = None,
    default_timeout: float | None = None,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
) -> GategraphOutputValidator:
    """Gate ``agent``'s output with ``validations``: register a
    :class:`GategraphOutputValidator` (the other arguments are its own) and return it."""
    validator = GategraphOutputValidator(
        validations,
        catalog=catalog,
        change=change,
        artifact=artifact,
        base=base,
        resource=resource,
        project=project,
        policy=policy,
        budget=budget,
        event_log=event_log,
        default_timeout=default_timeout,
        sleep=sleep,
    )
    agent.output_validator(validator)
    return validator


# -- the toolset ----------------------------------------------------------------------------


def _model_name(name: str) -> str:
    """The tool name a model sees for catalog name ``name``, from ``name`` alone.

    A name models accept is kept; another has its other characters replaced and always
    gets 8 hex digits of its hash (``lint.ruff`` → ``lint_ruff_<hash>``). It depends on no
    other name, so adding a tool never renames one a saved message history calls."""
    if _MODEL_NAME.match(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{_NOT_MODEL_NAME.sub('_', name)[:55]}_{digest}"


def _model_names(names: Iterable[str], where: str) -> dict[str, str]:
    """The model name of each catalog name; refuse two that would be called the same."""
    out: dict[str, str] = {}
    by_model: dict[str, str] = {}
    for name in sorted(set(names)):
        model = _model_name(name)
        other = by_model.setdefault(model, name)
        if other != name:
            first, second = sorted((other, name))
            raise ConfigError.at(
                where,
                f"{first!r} and {second!r} would both be called {model!r} by the model: "
                "rename one of them, or pick one with names=",
                source=_TOOLSET,
            )
        out[name] = model
    return out


def _arguments_schema(tool: Tool) -> dict[str, Any]:
    # Arguments are always a mapping, and models want an object schema at the top.
    schema = {"properties": {}, **(tool.input_schema or {})}
    schema["type"] = "object"
    return schema


def _description(tool: Tool) -> str:
    what = tool.description or f"The gategraph {tool.tool_type.value} {tool.name!r}."
    if isinstance(tool, Validation):
        what += (
            " Read-only. Returns {passed, message, data}: whether the check passes, why, and "
            "its details."
        )
    return what


def _exposable(tool: Tool) -> str | None:
    """Why ``tool`` may not be given to a model, or None if it may."""
    if isinstance(tool, Validation) or tool.capability.read_only:
        return None
    return "it is not read-only (only read-only tools and validations are given to a model)"


class CatalogToolset(FunctionToolset[Any]):
    """A pydantic-ai toolset of a catalog's read-only tools and validations.

    Each becomes a tool with the entry's input schema as its arguments, under a name a model
    accepts: a valid name is kept; in another, dots and other characters become ``_`` and
    8 hex digits of its hash are added, so a name never depends on the others
    (:attr:`catalog_names` maps back). A
    validation returns its result, ``{"passed", "message", "data"}``; a tool returns its
    output. Arguments the entry's schema refuses go back to the model to correct.

    By default every read-only tool and validation registered in ``catalog`` is given;
    ``names`` picks some (built-in validations such as ``python_syntax`` included), and
    ``skills`` picks the tools and validations of those skills of the catalog (with
    ``names``, both). A tool that writes is never given. What the agent calls is a check it
    runs for itself: it gates nothing (attach a validation to make it a gate). Validations run under gategraph's read-only guard; a
    read-only tool is trusted to be one.

    ``change`` is the folder the tools and validations look at (their resource), or a
    function of the run's :class:`~pydantic_ai.RunContext` returning it (from the run's
    deps, say). Calls are logged to ``event_log`` (an event log, or the path of a SQLite log
    opened for each call) and may take ``default_timeout`` seconds unless an entry has a
    timeout of its own.
    """

    def __init__(
        self,
        catalog: Catalog | None = None,
        *,
        names: Iterable[str] | None = None,
        skills: Iterable[str] | None = None,
        change: str | os.PathLike[str] | _FolderOf | None = None,
        event_log: EventLog | str | os.PathLike[str] | None = None,
        default_timeout: float | None = None,
    ) -> None:
        check_event_log(event_log, "event_log", source=_TOOLSET)
        self._event_log = event_log
        if catalog is None:
            from gategraph.runtime._definitions._catalog import Catalog

            catalog = Catalog.in_memory()  # the built-in validations only
        wanted = None
        if names is not None or skills is not None:
            wanted = [
                *self._skill_members(catalog, names_of(skills or ())),
                *((f"names[{i}]", n) for i, n in enumerate(names_of(names or ()))),
            ]
        tools = self._pick(catalog, wanted, change)
        self.catalog: Final = catalog
        where = "catalog" if wanted is None else "names"
        self.catalog_names: Final[Mapping[str, str]] = {
            model: name for name, model in _model_names((t.name for t in tools), where).items()
        }
        """The catalog name of each tool, by the name the model calls it."""
        self._change = change
        self._policy: dict[str, Any] = {"allow_ungated": True}
        if default_timeout is not None:
            self._policy["default_timeout"] = default_timeout
        models = {name: model for model, name in self.catalog_names.items()}
        super().__init__(
            [
                AgentTool.from_schema(
                    self._caller(tool),
                    models[tool.name],
                    _description(tool),
                    _arguments_schema(tool),
                    takes_ctx=True,
                )
                for tool in tools
            ]
        )

    @staticmethod
    def _skill_members(catalog: Catalog, skills: list[str]) -> list[tuple[str, str]]:
        """The read-only members of ``skills``, each once, with the skill each comes from
        (a member that writes is left out, as MCP's ``--skill`` leaves it out)."""
        from gategraph.runtime._base._exceptions import NotFoundError

        members: dict[str, str] = {}
        for index, skill in enumerate(skills):
            where = f"skills[{index}]"
            try:
                found = catalog.get_skill(skill)
            except NotFoundError:
                raise ConfigError.at(
                    where, f"no skill named {skill!r} in the catalog", source=_TOOLSET
                ) from None
            except GategraphError as exc:
                raise ConfigError.at(where, str(exc), source=_TOOLSET) from None
            given = 0
            for name in found.tools:
                try:
                    writes = _exposable(catalog.get(name)) is not None
                except NotFoundError:
                    writes = False  # said below, at the skill
                if not writes:
                    members.setdefault(name, where)
                    given += 1
            if not given:
                raise ConfigError.at(
                    where,
                    f"skill {skill!r} has no read-only tool or validation to give a model",
                    source=_TOOLSET,
                )
        return [(where, name) for name, where in members.items()]

    @staticmethod
    def _pick(catalog: Catalog, wanted: list[tuple[str, str]] | None, change: object) -> list[Tool]:
        picked: list[tuple[str, Tool]] = []
        if wanted is None:
            picked = [("catalog", t) for t in catalog.list() if _exposable(t) is None]
        else:
            seen: set[str] = set()
            for where, name in wanted:
                if name in seen:
                    continue  # in a skill and in names: given once
                seen.add(name)
                if name not in catalog:
                    raise ConfigError.at(
                        where, f"no tool or validation named {name!r}", source=_TOOLSET
                    )
                tool = catalog.get(name)
                why = _exposable(tool)
                if why is not None:
                    raise ConfigError.at(
                        where, f"{name!r} cannot be given to a model: {why}", source=_TOOLSET
                    )
                picked.append((where, tool))
        if change is None:
            for where, tool in picked:
                needs = [slot.name for slot in tool.resource_slots if slot.required]
                if needs:
                    raise ConfigError.at(
                        where,
                        f"{tool.name!r} needs a folder to look at (slot {needs[0]!r}): "
                        "pass change=",
                        source=_TOOLSET,
                    )
        return [tool for _, tool in picked]

    def _folder(self, ctx: RunContext[Any]) -> Path | None:
        change = self._change
        if callable(change):
            change = change(ctx)
        if change is None:
            return None
        folder = Path(os.fspath(change)).resolve()
        if not folder.is_dir():
            raise ConfigError.at("change", f"{str(folder)!r} is not a folder", source=_TOOLSET)
        return folder

    def _caller(self, tool: Tool) -> Callable[..., Awaitable[Any]]:
        kind = "validation" if isinstance(tool, Validation) else "tool"

        async def call(ctx: RunContext[Any], /, **arguments: Any) -> Any:
            return await self._call(tool.name, kind, ctx, arguments)

        return call

    async def _call(
        self, name: str, kind: str, ctx: RunContext[Any], arguments: dict[str, Any]
    ) -> Any:
        from gategraph.runtime._definitions._graph import load_graph
        from gategraph.runtime._running._engine import NodeStatus, execute_graph

        folder = self._folder(ctx)
        spec: dict[str, Any] = {
            "version": 1,
            "name": "pydantic-ai-tool-call",
            "nodes": [{"id": "call", kind: name, "arguments": arguments}],
            "policy": dict(self._policy),
        }
        if folder is not None:
            spec["resources"] = {_RESOURCE: {"kind": "directory", "path": str(folder)}}
        try:
            graph = load_graph(spec, catalog=self.catalog)
        except ConfigError as error:
            if all(_ARGUMENTS_FIELD.match(issue.field) for issue in error.issues):
                # The model's arguments: it corrects them (the schema is not checked before).
                raise ModelRetry(
                    "; ".join(
                        f"{_ARGUMENTS_FIELD.sub('', issue.field) or 'arguments'}: {issue.message}"
                        for issue in error.issues
                    )
                ) from None
            raise
        # The graph is loaded with the catalog (names resolve, wrapped validations find
        # what they wrap) but run without it: a tool call runs this entry alone, not the
        # validations attached to the folder.
        async with opened_log(self._event_log) as log:
            run = await execute_graph(graph, event_log=log)
        node = run.nodes["call"]
        if kind == "validation":
            return msgspec.to_builtins(run.validations[0].result)
        if node.status is not NodeStatus.OK:
            raise ModelRetry(f"{name} failed: {node.error}")
        return _default_artifact(node.output)
