"""gategraph's exceptions, all in one place.

The tree::

    GategraphError
    ├── ConfigError (also ValueError)      bad configuration: YAML, JSON, models, CLI input
    ├── CatalogError                        the catalog refused an operation
    │   ├── DuplicateError                  the name (or the attachment) exists already
    │   ├── NotFoundError (also LookupError) no tool, validation or attachment of that id
    │   └── IntegrityError                  the change would break a catalog rule
    ├── ResumeError                         a plan cannot be resumed (log and plan disagree)
    ├── PlanBusyError                       another process or task runs the plan right now
    ├── ApplyConflictError                  Apply refused; nothing was changed
    │   └── ApplyTwiceError                 the plan was applied already (Apply at most once)
    └── RuntimeFault (also RuntimeError)    a plan failed for a reason of the runtime itself

A :class:`ConfigError` carries every problem found in one input as :class:`ConfigIssue`
records, so a file with three mistakes is reported once, with three lines. Each line reads
``SOURCE:LINE:COL: field.path: what is wrong`` (parts that are unknown are left out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "ApplyConflictError",
    "ApplyTwiceError",
    "CatalogError",
    "ConfigError",
    "ConfigIssue",
    "DuplicateError",
    "GategraphError",
    "IntegrityError",
    "NotFoundError",
    "PlanBusyError",
    "ResumeError",
    "RuntimeFault",
    "WorkWithdrawn",
]


class GategraphError(Exception):
    """Base class of every error gategraph raises on purpose."""


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem in one input: where it is, and what is wrong."""

    message: str
    """What is wrong, in one sentence without a trailing period."""
    field: str = ""
    """Dotted path to the offending field (``capability.writes``, ``nodes[2].needs``)."""
    line: int | None = None
    """1-based line in the source file, when known."""
    column: int | None = None
    """1-based column in the source file, when known."""

    def render(self, source: str | None = None) -> str:
        """Return the issue as one line: ``SOURCE:LINE:COL: field: message``."""
        parts: list[str] = []
        if source:
            where = source
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            parts.append(where)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class ConfigError(GategraphError, ValueError):
    """Bad configuration: a file, a mapping or an argument that cannot be accepted.

    ``str(error)`` is one line per problem, each naming the source and the field.
    """

    def __init__(self, issues: Iterable[ConfigIssue] | str, *, source: str | None = None) -> None:
        if isinstance(issues, str):
            issues = [ConfigIssue(issues)]
        self.issues: tuple[ConfigIssue, ...] = tuple(issues) or (ConfigIssue("invalid"),)
        self.source = source
        super().__init__(self._render())

    @classmethod
    def at(
        cls,
        field: str,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> ConfigError:
        """Build an error with a single issue at ``field``."""
        return cls([ConfigIssue(message, field, line, column)], source=source)

    def with_source(self, source: str) -> ConfigError:
        """Return the same issues, attributed to ``source`` (a file name) if none is set."""
        if self.source:
            return self
        return ConfigError(self.issues, source=source)

    def prefixed(self, prefix: str) -> ConfigError:
        """Return the same issues with ``prefix`` prepended to every field path."""
        return ConfigError(
            [
                ConfigIssue(
                    i.message,
                    f"{prefix}.{i.field}" if i.field else prefix,
                    i.line,
                    i.column,
                )
                for i in self.issues
            ],
            source=self.source,
        )

    @property
    def field(self) -> str:
        """The field of the first issue (convenient when there is only one)."""
        return self.issues[0].field

    def _render(self) -> str:
        return "\n".join(issue.render(self.source) for issue in self.issues)

    def __str__(self) -> str:
        return self._render()


class CatalogError(GategraphError):
    """The catalog refused an operation."""


class DuplicateError(CatalogError):
    """A tool, validation or attachment of that identity exists already."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class NotFoundError(CatalogError, LookupError):
    """No tool, validation or attachment has that name or id."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name

    def __str__(self) -> str:
        # LookupError quotes its argument (like KeyError); ours is a sentence.
        return str(self.args[0])


class IntegrityError(CatalogError):
    """The change would break a catalog rule (mode change, wrapped tool, attachments)."""

    def __init__(self, message: str, *, name: str) -> None:
        super().__init__(message)
        self.name = name


class RuntimeFault(GategraphError, RuntimeError):
    """A plan failed because of the runtime itself, not because of a validation."""


class WorkWithdrawn(GategraphError):
    """Raised by an execution actor that gives the plan up: the plan fails at once, nothing
    is applied, and the message says why (no fix, retry or escalation follows)."""


class ResumeError(GategraphError):
    """A plan cannot be resumed: its log disagrees with what the plan decides now, what the
    log's steps worked on is gone, or it is not waiting for the decision given."""


class PlanBusyError(GategraphError):
    """The plan is being run right now by another process or task: one supervisor per plan."""


class ApplyConflictError(GategraphError):
    """Apply refused; nothing was changed.

    The real resource changed since the sandbox was taken, the changeset is not what the
    sandbox holds any more, a path would escape the resource, or an earlier apply of the
    plan did not finish.
    """

    def __init__(
        self,
        message: str,
        *,
        resource: str,
        plan_id: str | None = None,
        paths: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.resource = resource
        """The resource that refused."""
        self.plan_id = plan_id
        """The plan whose apply was refused, when known."""
        self.paths: tuple[str, ...] = tuple(paths)
        """The offending paths, relative to the resource."""


class ApplyTwiceError(ApplyConflictError):
    """The plan's apply committed already: Apply happens at most once (seed 000)."""

    def __init__(self, *, resource: str, plan_id: str) -> None:
        super().__init__(
            f"resource {resource!r}: plan {plan_id!r} was applied already; Apply happens at most once",
            resource=resource,
            plan_id=plan_id,
        )
