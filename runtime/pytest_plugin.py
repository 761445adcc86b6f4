"""gategraph's pytest plugin, loaded by pytest wherever gategraph is installed (entry point
``pytest11``).

Fixtures for testing your own validations, actors and plans:

- ``gategraph``: a :class:`Tester` with a catalog and an event log in memory, whose
  ``validate`` judges a change with validations, ``run_plan`` runs a plan graph (with a
  scripted executor: ``steps=``) and ``events`` reads a plan's log back;
- ``gategraph_catalog`` (the tester's :class:`~gategraph.runtime.Catalog`),
  ``gategraph_event_log`` (its :class:`~gategraph.runtime.MemoryEventLog`),
  ``gategraph_home`` (a ``GATEGRAPH_HOME`` of the test's own, so nothing reaches yours).

And ``--gategraph-graph GRAPH`` (repeatable) collects each validation node of a plan graph
file as a test item: the graph's nodes run once, on copies of its folders, and each item
passes or fails with its validation (an informational one that fails is reported as
skipped, never as a failure).

Importing this module costs nothing until a fixture or the option is used.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator, Mapping

    from gategraph.runtime import Catalog, GraphRun, MemoryEventLog, PlanOutcome, Verdict
    from gategraph.runtime._data._events import Event
    from gategraph.runtime._definitions._graph import PlanGraph

__all__ = ["Tester"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gategraph")
    group.addoption(
        "--gategraph-graph",
        action="append",
        default=[],
        metavar="GRAPH",
        help="Run the validations of this plan graph file as test items (its nodes run "
        "once, on copies of its folders); repeatable.",
    )


class Tester:
    """What the ``gategraph`` fixture gives a test: a catalog and an event log of its own,
    and the calls that use them. Each call runs to its end (no event loop needed)."""

    def __init__(self, catalog: Catalog, event_log: MemoryEventLog) -> None:
        self.catalog = catalog
        self.event_log = event_log

    def validate(
        self,
        change: str | os.PathLike[str] | Mapping[str, str | bytes] | None = None,
        validations: Any = (),
        **options: Any,
    ) -> Verdict:
        """:func:`gategraph.runtime.validate` with this tester's catalog and event log."""
        from gategraph.runtime import validate_sync

        options.setdefault("catalog", self.catalog)
        options.setdefault("event_log", self.event_log)
        return validate_sync(change, validations, **options)

    def run_plan(
        self,
        graph: PlanGraph | str | os.PathLike[str] | Mapping[str, Any],
        *,
        steps: list[dict[str, Any]] | None = None,
        **options: Any,
    ) -> PlanOutcome:
        """Run a plan (a graph, or what :func:`~gategraph.runtime.load_graph` takes) with
        this tester's catalog and event log. ``steps`` is a script for the execution
        actor (:class:`gategraph.runtime.testing.ScriptedExecutor`): each step's
        ``files`` are what one attempt writes."""
        from gategraph.runtime import PlanGraph, load_graph, run_plan_sync
        from gategraph.runtime.testing import ScriptedExecutor

        loaded = graph if isinstance(graph, PlanGraph) else load_graph(graph, catalog=self.catalog)
        options.setdefault("catalog", self.catalog)
        options.setdefault("event_log", self.event_log)
        if steps is not None:
            options.setdefault("execution_actor", ScriptedExecutor(steps))
        return run_plan_sync(loaded, **options)

    def events(self, plan_id: str) -> list[Event]:
        """The events of plan ``plan_id`` in this tester's log, in order."""
        from gategraph.runtime._running._sync import run_sync

        return list(run_sync(self.event_log.read, plan_id))


@pytest.fixture
def gategraph_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A ``GATEGRAPH_HOME`` of the test's own: no catalog, log or sandbox reaches yours."""
    home = tmp_path_factory.mktemp("gategraph-home")
    monkeypatch.setenv("GATEGRAPH_HOME", str(home))
    return home


@pytest.fixture
def gategraph_catalog() -> Catalog:
    """A catalog in memory, empty."""
    from gategraph.runtime import Catalog

    return Catalog.in_memory()


@pytest.fixture
def gategraph_event_log() -> MemoryEventLog:
    """An event log in memory, empty."""
    from gategraph.runtime import MemoryEventLog

    return MemoryEventLog()


@pytest.fixture
def gategraph(
    gategraph_home: Path, gategraph_catalog: Catalog, gategraph_event_log: MemoryEventLog
) -> Tester:
    """A :class:`Tester`: validate changes and run plans with the catalog and event log of
    this test, in a ``GATEGRAPH_HOME`` of its own."""
    return Tester(gategraph_catalog, gategraph_event_log)


# -- a plan graph's validations as test items -------------------------------------------------


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    wanted = {Path(p).resolve() for p in parent.config.getoption("gategraph_graph")}
    if file_path.resolve() in wanted:
        return GraphFile.from_parent(parent, path=file_path)
    return None


def pytest_sessionstart(session: pytest.Session) -> None:
    # A graph named on the command line is collected even when pytest's own rules would
    # skip its file (a .yaml is no test module): each is added to the arguments.
    config = session.config
    graphs = config.getoption("gategraph_graph")
    for graph in graphs:
        if not Path(graph).is_file():
            raise pytest.UsageError(f"--gategraph-graph {graph}: no such file")
        if graph not in config.args:
            config.args.append(graph)


class GraphFile(pytest.File):
    """A plan graph file: one item per validation node."""

    def collect(self) -> Iterator[pytest.Item]:
        from gategraph.runtime import ConfigError, load_graph

        # The catalog `gategraph execute` uses (GATEGRAPH_HOME's): its validations by name,
        # and those it attaches to the graph's resources, run here as they do there.
        self.catalog = _default_catalog(self.config)
        try:
            self.graph = load_graph(self.path, catalog=self.catalog)
        except ConfigError as exc:
            raise self.CollectError(str(exc)) from None
        self.run: GraphRun | None = None
        for node in self.graph.nodes:
            if node.validation is not None:
                yield ValidationItem.from_parent(self, name=node.id)

    def ran(self) -> GraphRun:
        """The graph's run, made at the first item that asks (once for all of them)."""
        if self.run is None:
            self.run = _execute(self.graph, self.catalog)
        return self.run


class ValidationFailed(Exception):
    """A required validation of a graph did not pass."""


class ValidationItem(pytest.Item):
    """One validation node of a plan graph."""

    def runtest(self) -> None:
        assert isinstance(self.parent, GraphFile)
        run = self.parent.ran()
        record = next((v for v in run.validations if v.node == self.name), None)
        if record is None:
            node = run.nodes.get(self.name)
            raise ValidationFailed(
                f"{self.name} did not run: {node.error if node is not None else 'no result'}"
            )
        if record.result.passed:
            return
        if not record.blocking:
            pytest.skip(f"informational, failed: {record.result.message}")
        raise ValidationFailed(record.result.message)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ValidationFailed):
            return f"{self.name}: {excinfo.value}"
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"validation {self.name}"


def _default_catalog(config: pytest.Config) -> Catalog | None:
    """The default catalog (as ``gategraph`` finds it), open until the test session ends;
    None when there is none."""
    from gategraph.runtime import Catalog, default_catalog_path

    path = default_catalog_path()
    if not path.exists():
        return None
    catalog = Catalog.open(path)
    config.add_cleanup(catalog.close)
    return catalog


def _execute(graph: PlanGraph, catalog: Catalog | None = None) -> GraphRun:
    """Run every node of ``graph`` once on copies of its folders (removed afterwards), as
    ``gategraph execute`` does: nothing reaches the real folders."""
    import tempfile

    from gategraph.runtime import execute_graph
    from gategraph.runtime._running._sync import run_sync

    folders = {
        name: spec.directory(name)
        for name, spec in graph.resources.items()
        if spec.kind == "directory" and spec.path is not None
    }
    scratch = Path(tempfile.mkdtemp(prefix="gategraph-pytest-"))
    try:
        views = {name: folder.open_sandbox(scratch / name).view for name, folder in folders.items()}
        return run_sync(execute_graph, graph, catalog=catalog, resources=views or None)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
