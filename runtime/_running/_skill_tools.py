"""A plan's skills at work: :class:`SkillTools` calls a skill's tools and validations on the
plan's sandboxes, each as a one-node graph run by the engine.

Above the engine; the skills themselves (:class:`~.._definitions._skills.Skill`, what a catalog and a
graph declare) are below it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from gategraph.runtime._base._exceptions import ConfigError, ConfigIssue, RuntimeFault
from gategraph.runtime._base._yaml import format_path
from gategraph.runtime._data._models import Validation
from gategraph.runtime._definitions._skills import Skill, names_of

if TYPE_CHECKING:
    from gategraph.runtime._calls._invoke import Isolation
    from gategraph.runtime._data._models import Tool
    from gategraph.runtime._data._results import ValidationResult
    from gategraph.runtime._definitions._graph import Node, PlanGraph

__all__ = ["SkillTools"]

_CALL_NODE: Final = "skill-call"


class SkillTools:
    """The tools and validations of a plan's skills, callable on the plan's sandboxes.

    An execution actor finds it as ``request.skills``: ``await request.skills.call(
    "python_syntax")`` runs that validation on the sandboxes now and returns its
    :class:`ValidationResult`; a tool returns its output. What it calls this way is the
    work's own business: it is not part of the plan's validation round, never enters the
    verdict and never blocks Apply (the plan's validation nodes and the validations
    attached to its resources do that). A validation still runs read-only, under the same
    guard and isolation as in the round: the executor's ``isolation``, or the strictest
    one the plan's nodes give that name (a validation the plan sandboxes is sandboxed here
    too).

    ``resources`` are what the calls work on, by the graph's resource names: the
    sandboxes (a folder ``Path`` or a mapping of files each).
    """

    __slots__ = ("_graph", "_isolation", "_members", "_resources", "skills")

    def __init__(
        self,
        graph: PlanGraph,
        resources: Mapping[str, Any],
        *,
        skills: Iterable[Skill] | None = None,
        isolation: Isolation | None = None,
    ) -> None:
        self.skills: Final[tuple[Skill, ...]] = tuple(graph.skills if skills is None else skills)
        """The skills whose members can be called."""
        self._graph = graph
        self._resources = dict(resources)
        self._isolation = isolation
        self._members = {name: skill.name for skill in self.skills for name in skill.tools}

    @property
    def names(self) -> tuple[str, ...]:
        """Every callable tool and validation, each once, in the skills' order."""
        return tuple(self._members)

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __repr__(self) -> str:
        return f"SkillTools({', '.join(skill.name for skill in self.skills) or 'no skills'})"

    def tool(self, name: str) -> Tool:
        """The tool or validation ``name`` as the plan resolved it (its schema, its slots);
        :class:`ConfigError` when no skill of the plan has it."""
        from gategraph.runtime._definitions._plugins import shipped

        if name not in self._members:
            given = ", ".join(s.name for s in self.skills) or "none"
            raise ConfigError.at(
                "name",
                f"{name!r} is in none of the plan's skills (its skills: {given}); a skill "
                "lists the tools and validations it makes callable",
            )
        try:
            return self._graph.get_tool(name)
        except KeyError:
            # A graph built without the loader knows only its inline definitions.
            found = shipped(name)
            if found is None:
                raise ConfigError.at(
                    "name",
                    f"{name!r} is not resolved in plan graph {self._graph.name!r}: load the "
                    "graph with load_graph (with the catalog it names) to resolve it",
                ) from None
            return found

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        resources: Iterable[str] | str | None = None,
        artifact: Any = None,
    ) -> Any:
        """Call ``name`` with ``arguments`` on the sandboxes (or only on ``resources``, by
        name) and return a validation's :class:`ValidationResult` or a tool's output.

        A failing validation does not raise: its result says ``passed: False``. Raises
        :class:`ConfigError` for a name outside the skills, arguments its schema refuses
        or an unknown resource, and :class:`RuntimeFault` when a tool raises, times out or
        cannot run.
        """
        from ._engine import execute_graph

        tool = self.tool(name)
        node = self._node(name, tool, arguments, resources)
        # The plan's graph with this one node: its resolution of every name and its policy
        # (timeouts, require_sandbox) stay; no catalog is passed, so no attachment runs.
        update: dict[str, Any] = {"nodes": (node,), "acceptance": ()}
        if name not in self._graph.registry:
            # A built-in that a graph built by hand names: defined in the copy.
            field = "validations" if isinstance(tool, Validation) else "tools"
            update[field] = (*getattr(self._graph, field), tool)
        graph = self._graph.model_copy(update=update)
        try:
            run = await execute_graph(
                graph, resources=self._resources, artifact=artifact, isolation=self._isolation
            )
        except ConfigError as exc:
            raise _of_call(exc, name) from None
        outcome = run.nodes.get(_CALL_NODE)
        error = outcome.error if outcome is not None else None
        if error is not None:
            error = error.removeprefix(f"{_CALL_NODE} ")  # said of the call, not of its node
        if node.validation is not None and run.validations:
            result: ValidationResult = run.validations[0].result
            return result  # a failing one too: its result says so
        if outcome is None or error is not None or node.validation is not None:
            raise RuntimeFault(f"{name!r} failed: {error or 'it did not run'}")
        return outcome.output

    def _node(
        self,
        name: str,
        tool: Tool,
        arguments: Mapping[str, Any] | None,
        resources: Iterable[str] | str | None,
    ) -> Node:
        """The one node of the call, its input checked: a problem is a :class:`ConfigError`
        at the call's argument, never an error of the engine."""
        from gategraph.runtime._definitions._graph import Node

        if arguments is not None and not isinstance(arguments, Mapping):
            raise ConfigError.at(
                "arguments", "must be a mapping of argument names to values", source=name
            )
        given = dict(arguments or {})
        issues = [
            ConfigIssue(f"argument names are text, not {type(key).__name__}", "arguments")
            for key in given
            if not isinstance(key, str)
        ]
        if not issues and not _mapped(tool):
            issues = [
                ConfigIssue(message, format_path(("arguments", *path)))
                for path, message in tool.argument_problems(given)
            ]
        picked: tuple[str, ...] | None = None
        if resources is not None:
            picked = tuple(names_of(resources))
            known = ", ".join(self._resources) or "none"
            issues += [
                ConfigIssue(f"unknown resource {each!r} (the plan has: {known})", f"resources[{i}]")
                for i, each in enumerate(picked)
                if not isinstance(each, str) or each not in self._resources
            ]
        if issues:
            raise ConfigError(issues, source=name)
        is_validation = isinstance(tool, Validation)
        return Node(
            id=_CALL_NODE,
            tool=None if is_validation else name,
            validation=name if is_validation else None,
            arguments=given,
            resources=picked,
            isolation=_strictest(self._graph.isolations_of(name), self._default(tool)),
        )

    def _default(self, tool: Tool) -> str | None:
        """Where a node of the plan that declares nothing runs ``tool``: the executor's
        isolation, else where a validation runs by default (the sandbox, for code that is
        not gategraph's own)."""
        if self._isolation is not None or not isinstance(tool, Validation):
            return None
        from gategraph.runtime._calls._invoke import default_isolation

        if tool.wraps is not None:
            return default_isolation(self._graph.get_tool(tool.wraps), tell=False)
        return default_isolation(tool, tell=False)


_STRICTNESS: Final[Mapping[str, int]] = {
    "inline": 0,
    "thread": 1,
    "process": 2,
    "ray": 3,
    "sandbox": 4,
}


def _strictest(isolations: Iterable[str | None], default: str | None = None) -> Isolation | None:
    """The most confining isolation the plan's nodes give a name (None: ``default``, where
    a node that declares nothing runs it; with no default, the executor's)."""
    given = [k for k in (kind if kind is not None else default for kind in isolations) if k]
    if not given:
        return None
    return cast("Isolation", max(given, key=_STRICTNESS.__getitem__))


def _of_call(error: ConfigError, name: str) -> ConfigError:
    """An engine's refusal of the call's one-node graph, said of the call."""
    prefix = "nodes[0]."
    issues = [
        ConfigIssue(issue.message, issue.field.removeprefix(prefix).removeprefix("nodes[0]"))
        for issue in error.issues
    ]
    return ConfigError(issues, source=name)


def _mapped(tool: Tool) -> bool:
    # A wrapping validation's arguments are mapped onto the wrapped tool's, checked there.
    return isinstance(tool, Validation) and bool(tool.argument_mapping)
