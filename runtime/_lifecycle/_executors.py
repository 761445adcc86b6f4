"""Where a plan's validation actors run: this machine (the default) or Ray.

Configuration only, below the plan's lifecycle: the plan's parts name the executor they
were given without importing the supervisor that runs them.
"""

from __future__ import annotations

from typing import Any

import msgspec
from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._calls._invoke import Isolation

__all__ = ["Executor", "LocalExecutor", "RayExecutor"]


class LocalExecutor(msgspec.Struct, kw_only=True, frozen=True):
    """Runs validation actors on this machine, on anyio (the default executor)."""

    max_concurrency: int | None = None
    """At most this many at once (default: the graph's policy)."""
    isolation: Isolation | None = None
    """Where validations run whose nodes declare nothing. None (the default): the kernel
    sandbox for code that is not gategraph's own, gategraph's own process for its own.
    ``thread`` or ``process`` (sync and async callables alike, an async one on an event
    loop of its own there), ``inline`` (the event loop; refused for a sync callable, which
    no timeout could stop there) or ``sandbox``: a choice made for every such node, and
    for the first three a choice to trust their code."""

    def connect(self) -> None:
        """Nothing to connect to."""

    def describe(self) -> dict[str, Any]:
        """What a plan's log records of its executor (resume runs it the same way)."""
        return {"kind": "local"}


class RayExecutor(msgspec.Struct, kw_only=True, frozen=True):
    """Runs validation actors as Ray tasks: on a Ray cluster, or a local Ray instance.

    Needs ``gategraph[ray]``. Each validation call is one Ray task running the same entry
    as process isolation — under the same read-only guard, in the Ray worker — whose
    result comes back as the call's; a timeout or a cancelled plan cancels the task. The
    resources a validation reads (a directory resource's sandbox folder) must be reachable
    from the Ray workers: a local instance, or a file system the cluster shares. A node
    that sets ``isolation`` itself keeps it.
    """

    address: str | None = None
    """The cluster (``ray://host:10001``, ``auto``); ``None`` starts a local instance if
    Ray is not connected yet."""
    max_concurrency: int | None = None
    """At most this many tasks in flight (default: the graph's policy)."""
    init_options: dict[str, Any] = msgspec.field(default_factory=dict)
    """More keyword arguments for ``ray.init`` (``num_cpus``, ``runtime_env`` ...)."""

    @property
    def isolation(self) -> Isolation:
        """Always ``ray``."""
        return "ray"

    def connect(self) -> None:
        """Connect to Ray (``ray.init``) unless this process is connected already."""
        try:
            import ray
        except ImportError:
            raise ConfigError.at(
                "executor", "the Ray executor needs Ray: pip install 'gategraph[ray]'"
            ) from None
        if not ray.is_initialized():
            options = {"include_dashboard": False, "log_to_driver": False, **self.init_options}
            ray.init(address=self.address, **options)

    def describe(self) -> dict[str, Any]:
        """What a plan's log records of its executor (resume runs it the same way)."""
        return {"kind": "ray", "address": self.address}


Executor = LocalExecutor | RayExecutor
"""Where validation actors run."""
