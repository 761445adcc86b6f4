"""Shared fixtures: async tests run on both anyio backends."""

from __future__ import annotations

import os
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest


def _serialize_thread_tracing() -> None:
    """Python 3.11's ``sys.settrace`` fails when another thread is inside it (CPython
    #98257, fixed in 3.12), and gategraph's audit hook is Python code that runs inside it,
    where the GIL may pass to a thread that starts. Under coverage, which installs its tracer
    in every new thread, that thread then dies before it runs; an anyio worker thread that
    never answers hangs the test. Taking one lock around each install closes the window:
    the thread's own ``settrace`` in ``threading`` and coverage's first-event installer."""
    lock = threading.RLock()

    class _Sys(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            return getattr(sys, name)

        @staticmethod
        def settrace(function: Any) -> None:
            with lock:
                sys.settrace(function)

        @staticmethod
        def setprofile(function: Any) -> None:
            with lock:
                sys.setprofile(function)

    def serialized(hook: Callable[..., Any]) -> Callable[..., Any]:
        # Coverage's hook replaces itself on its first event, so the lock is held once.
        def install(frame: Any, event: str, arg: Any) -> Any:
            with lock:
                return hook(frame, event, arg)

        return install

    original = threading.settrace

    def settrace(function: Any) -> None:
        original(None if function is None else serialized(function))

    threading._sys = _Sys("sys")  # type: ignore[attr-defined]
    threading.settrace = settrace
    hook = threading.gettrace()
    if hook is not None:
        original(serialized(hook))


if sys.version_info < (3, 12):
    _serialize_thread_tracing()

# A suite started in the background of a shell (`python -m pytest &`, `nohup`) inherits
# Ctrl-C ignored, and Python then installs no KeyboardInterrupt handler: the tests of what a
# person's Ctrl-C does need the one a terminal gives.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile gategraph's modules once, before any test starts a process. The suite starts
    hundreds of Python processes (the CLI, sandbox and process workers, MCP servers); where
    the interpreter writes no bytecode caches (``PYTHONDONTWRITEBYTECODE``, as in some CI
    images) or in a fresh checkout, each compiled all of gategraph again: a quarter of the
    time of the command-line tests on 2 cores. ``compileall`` writes the caches whatever
    that setting, and skips what is cached already."""
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller did it
    import compileall
    from pathlib import Path

    import gategraph.benchmarks
    import gategraph.runtime
    import gategraph.validators

    for package in (gategraph.runtime, gategraph.validators, gategraph.benchmarks):
        assert package.__file__ is not None
        compileall.compile_dir(Path(package.__file__).parent, quiet=2)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Workers for ``-n auto``: more than the cores, up to twice as many. Much of the suite
    waits on processes it starts (the CLI, sandbox workers, MCP servers), and a worker per
    core leaves the cores idle meanwhile. On 2 cores, 4 workers that steal each other's
    queued tests took the suite 7% less time than 2 workers (11 min 46 s against 12 min 41 s).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` and ``-n logical`` keep their meaning (xdist's own)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or config.option.numprocesses != "auto":
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    return cores + min(cores, 4)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server (see tests/_postgres.py): its superuser's URL."""
    if os.environ.get("GATEGRAPH_REQUIRE_POSTGRES") != "1":
        pytest.importorskip("psycopg", reason="the postgres extra is not installed")
    from _postgres import private_server

    given = os.environ.get("GATEGRAPH_TEST_POSTGRES")
    if given:
        yield given
        return
    import shutil
    import tempfile
    from pathlib import Path

    # Not under pytest's own temporary folder: the server's user must be able to enter it.
    folder = Path(tempfile.mkdtemp(prefix="gategraph-postgres-"))
    folder.chmod(0o755)
    try:
        with private_server(folder / "server") as url:
            yield url
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database on the tests' PostgreSQL server, dropped after the test."""
    from _postgres import fresh_database

    with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test on asyncio and on trio."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep every test away from the developer's real ``.gategraph`` folder."""
    home = tmp_path_factory.mktemp("gategraph-home")
    monkeypatch.setenv("GATEGRAPH_HOME", str(home))
    monkeypatch.delenv("GATEGRAPH_CATALOG", raising=False)
