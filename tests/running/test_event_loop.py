"""The event loop gategraph starts itself: asyncio's, for the command line unless
``GATEGRAPH_LOOP=uvloop`` says otherwise (gategraph measures slower on uvloop), and for
the sync entry points of code that embeds gategraph until it asks for uvloop
(``use_uvloop``).

By nature these are asyncio's (uvloop is an asyncio loop): no trio runs here.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import cli_env, run_process
from _plans import GOOD, plan, repo
from gategraph.runtime import (
    InMemoryAuditLog,
    PlanStatus,
    SQLiteEventLog,
    execute_graph_sync,
    load_graph,
    run_plan_sync,
    use_uvloop,
)
from gategraph.runtime._running import _sync

uvloop = pytest.importorskip("uvloop")

GRAPH = """\
version: 1
name: which-loop
validations:
  - {name: loop, entrypoint: "gategraph.runtime.testing:event_loop"}
nodes:
  - {id: loop, validation: loop}
"""


@pytest.fixture(autouse=True)
def loop_as_it_was() -> Iterator[None]:
    """Each test chooses the loop; the next one starts from the default again."""
    was = dict(_sync._LOOP)
    try:
        yield
    finally:
        _sync._LOOP.update(was)


def _loop_of_run(**options: Any) -> str:
    run = execute_graph_sync(load_graph(GRAPH), **options)
    (record,) = run.validations
    assert record.result.passed, record.result
    return str(record.result.data["loop"])


def _command_line(tmp_path: Path, *args: str, loop: str | None) -> subprocess.CompletedProcess[str]:
    graph = tmp_path / "loop.yaml"
    graph.write_text(GRAPH)
    env = cli_env(tmp_path / "home")
    if loop is not None:
        env["GATEGRAPH_LOOP"] = loop
    return run_process(
        [sys.executable, "-m", "gategraph.runtime", *args, str(graph)],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(
    ("loop", "expected"),
    [(None, "asyncio"), ("auto", "asyncio"), ("uvloop", "uvloop"), ("asyncio", "asyncio")],
)
def test_the_command_line_runs_on_uvloop_only_when_asked(
    tmp_path: Path, loop: str | None, expected: str
) -> None:
    done = _command_line(tmp_path, "execute", "--json", loop=loop)
    assert done.returncode == 0, done.stderr
    assert f'"loop": "{expected}"' in done.stdout


def test_a_loop_gategraph_does_not_know_is_one_error_line(tmp_path: Path) -> None:
    done = _command_line(tmp_path, "execute", loop="fast")
    assert done.returncode == 2
    assert done.stderr == "error: GATEGRAPH_LOOP=fast: say one of auto, asyncio, uvloop\n"
    assert done.stdout == ""
    assert not (tmp_path / "home").exists()  # nothing was run, nothing written


def test_asking_for_uvloop_where_it_is_missing_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_sync, "_uvloop_installed", lambda: False)
    problem = _sync.choose_loop("uvloop")
    assert problem is not None and "pip install 'gategraph[uvloop]'" in problem
    # Without uvloop, the default is asyncio's loop, silently.
    assert _sync.choose_loop(None) is None
    assert _loop_of_run() == "asyncio"
    with pytest.raises(ModuleNotFoundError, match=r"gategraph\[uvloop\]"):
        use_uvloop()
    assert _loop_of_run() == "asyncio"


def test_the_sync_entry_points_run_on_asyncio_until_asked_for_uvloop() -> None:
    assert _loop_of_run() == "asyncio"  # installed, but a library does not switch by itself
    # Nor does running the command line in this process (it chooses for its command only).
    from gategraph.runtime._cli import main

    with pytest.raises(SystemExit):
        main(["--version"])
    assert _loop_of_run() == "asyncio"
    use_uvloop()
    assert _loop_of_run() == "uvloop"
    use_uvloop(False)
    assert _loop_of_run() == "asyncio"


def test_a_whole_plan_is_applied_on_uvloop_with_a_durable_log(tmp_path: Path) -> None:
    """The lifecycle on uvloop, as the command line runs it: a SQLite log (a writer
    thread), a sandbox, the validations in worker threads, Apply."""
    use_uvloop()
    root = repo(tmp_path)
    log = SQLiteEventLog(tmp_path / "events.db")
    outcome = run_plan_sync(load_graph(plan(root, [GOOD])), event_log=log, audit=InMemoryAuditLog())
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    assert (root / "src" / "greet.py").read_text() == GOOD.replace("\\n", "\n")


def test_the_event_loop_validation_names_the_loop_it_ran_on() -> None:
    """The helper the tests above read: trio's runs say trio."""
    import anyio
    from gategraph.runtime.testing import event_loop

    assert anyio.run(event_loop, backend="trio")["data"] == {"loop": "trio"}
    assert anyio.run(event_loop)["data"] == {"loop": "asyncio"}
