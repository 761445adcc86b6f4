"""What a tool or validation call may know about where it runs: :class:`ToolContext`.

A callable receives the context when its signature has a parameter named ``context``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._readonly import Guard, unguarded

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping

__all__ = ["ToolContext"]


class ToolContext:
    """The run-time context of one tool or validation call.

    ``scratch`` is a private folder the call may write to, even as a read-only validation;
    it is removed when the call ends. ``disposable_copy`` copies a resource folder into it,
    so an external command (a test runner, a linter) can run against a copy that it may
    change at will, never against the sandbox or the real resource.
    """

    __slots__ = ("_guard", "_scratch", "attempt", "node", "plan_id", "resources")

    def __init__(
        self,
        *,
        plan_id: str = "",
        node: str = "",
        attempt: int = 1,
        resources: Mapping[str, Any] | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.plan_id = plan_id
        """The plan the call belongs to."""
        self.node = node
        """The graph node (or attachment) being run."""
        self.attempt = attempt
        """1 for the first call of this node in the plan, then 2, 3, ..."""
        self.resources: Mapping[str, Any] = resources or {}
        """The resources given to the call, by slot name (folders as ``Path``)."""
        self._guard = guard
        self._scratch: Path | None = None

    @classmethod
    def _of_call(
        cls,
        plan_id: str,
        node: str,
        attempt: int,
        resources: Mapping[str, Any],
        guard: Guard | None,
    ) -> ToolContext:
        """The runtime's constructor, one per call: positional arguments and no defaults to
        fill make it about half the cost of ``ToolContext(...)`` with keywords."""
        context = object.__new__(cls)
        context.plan_id = plan_id
        context.node = node
        context.attempt = attempt
        context.resources = resources
        context._guard = guard
        context._scratch = None
        return context

    @property
    def guard(self) -> Guard | None:
        """The read-only guard of the call (``None`` for a tool that may write)."""
        return self._guard

    @property
    def scratch(self) -> Path:
        """A private, writable temporary folder, created on first use."""
        if self._scratch is None:
            with unguarded():
                self._scratch = Path(tempfile.mkdtemp(prefix="gategraph-scratch-"))
            if self._guard is not None:
                self._guard.allow(self._scratch)
        return self._scratch

    def disposable_copy(self, source: str | os.PathLike[str] | None = None) -> Path:
        """Copy a folder (by default the only folder resource) into scratch; return the copy."""
        if source is None:
            folders = [v for v in self.resources.values() if isinstance(v, Path) and v.is_dir()]
            if len(folders) != 1:
                raise ValueError(
                    "name the folder to copy: the call has "
                    f"{len(folders)} folder resources, not exactly one"
                )
            source = folders[0]
        origin = Path(source)
        target = self.scratch / (origin.name or "copy")
        counter = 1
        while target.exists():
            counter += 1
            target = self.scratch / f"{origin.name or 'copy'}-{counter}"
        shutil.copytree(origin, target, symlinks=True)
        return target

    def cleanup(self) -> None:
        """Remove the scratch folder (the runtime calls this when the call ends)."""
        if self._scratch is not None:
            with unguarded():
                shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
