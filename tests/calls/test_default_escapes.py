"""Trust by default, against the escapes: with no ``isolation:`` written anywhere, every
technique that gets round the in-process guard (docs/readonly.md, "What the guard cannot
see") has no effect outside the validation's own scratch.

Each technique is a validation (inline ``code:``, or an entrypoint of
tests/default_escapes_code.py) that tries to write a file in a folder of the test, or to
act otherwise (the environment, the network), then says it passed, as an adversary
would. Run on the default settings, through the library (``execute_graph``,
``validate``) and through the command line as a user runs it (``gategraph execute`` and
``gategraph run`` in a process of their own), it runs in the kernel sandbox, its record
says the kernel held it, and nothing changed. The validation may fail (a
``read_only_violation``, an exception) or pass: what is asserted is that nothing it
attempted happened. Where a technique would be stopped by the in-process guard first, a
``guard-off`` variant switches the guard off inside the worker before it acts, so that
only the kernel stands in the way.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import run_gategraph
from gategraph.runtime import validate
from gategraph.runtime._base._kernel import support
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import GraphRun, execute_graph

pytestmark = [
    pytest.mark.skipif(
        support().missing is not None, reason=f"no sandbox here: {support().missing}"
    ),
    pytest.mark.timeout(120),
]

TESTS = Path(__file__).parents[1]
HELPER = "default_escapes_code"

# Switches gategraph's in-process guard off in the worker (code written to defeat it, as
# tests/sandbox_hostile.py does): what the validation does next meets only the kernel.
DEFEAT = """
def defeat():
    from gategraph.runtime._calls import _readonly

    _readonly._PROCESS_JUDGES.clear()
    _readonly._process_lease[0] = None
    _readonly._current.set(None)
"""


@dataclass(frozen=True)
class Technique:
    """One escape: the source of a validation's module, with ``@TARGET@`` (the marker
    file, outside scratch), ``@OUTSIDE@`` (its folder) and ``@GUARD_OFF@`` (a statement:
    ``defeat()`` in the ``guard-off`` variant) to fill in."""

    name: str
    source: str
    guard_off: bool = False  # whether a guard-off variant is run too
    asyncio_only: bool = False
    settle: float = 0.0  # seconds to wait after the run for a write left for later


TECHNIQUES = [
    Technique(
        "python_open",
        """
        def run():
            @GUARD_OFF@
            with open(@TARGET@, "w") as f:
                f.write("x")
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "ctypes_libc",
        """
        import ctypes
        import os

        def run():
            @GUARD_OFF@
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.open(@TARGET@.encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            if fd >= 0:
                libc.write(fd, b"x", 1)
                libc.close(fd)
            return {"passed": True, "data": {"fd": fd}}
        """,
        guard_off=True,
    ),
    Technique(
        "thread",
        """
        import threading

        def run():
            @GUARD_OFF@
            def write():
                try:
                    with open(@TARGET@, "w") as f:
                        f.write("x")
                except OSError:
                    pass

            worker = threading.Thread(target=write)
            worker.start()
            worker.join()
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "thread_after_return",
        """
        import threading
        import time

        def run():
            def later():
                time.sleep(0.3)
                with open(@TARGET@, "w") as f:
                    f.write("x")

            threading.Thread(target=later, daemon=True).start()
            return {"passed": True}
        """,
        settle=1.0,
    ),
    Technique(
        "run_in_executor",
        """
        import asyncio

        async def run():
            def write():
                try:
                    with open(@TARGET@, "w") as f:
                        f.write("x")
                except OSError:
                    pass

            await asyncio.get_running_loop().run_in_executor(None, write)
            return {"passed": True}
        """,
        asyncio_only=True,
    ),
    Technique(
        "multiprocessing_spawn",
        """
        import functools
        import multiprocessing
        import pathlib

        def run():
            @GUARD_OFF@
            write = functools.partial(pathlib.Path.write_text, pathlib.Path(@TARGET@), "x")
            process = multiprocessing.get_context("spawn").Process(target=write)
            process.start()
            process.join(30)
            return {"passed": True, "data": {"exitcode": process.exitcode}}
        """,
    ),
    Technique(
        "multiprocessing_fork",
        """
        import functools
        import multiprocessing
        import pathlib

        def run():
            @GUARD_OFF@
            write = functools.partial(pathlib.Path.write_text, pathlib.Path(@TARGET@), "x")
            try:
                process = multiprocessing.get_context("fork").Process(target=write)
                process.start()
                process.join(30)
            except Exception:
                pass
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "command_absolute_path",
        """
        import shlex
        import subprocess

        def run(context):
            @GUARD_OFF@
            subprocess.run(
                ["/bin/sh", "-c", "echo x > " + shlex.quote(@TARGET@)],
                cwd=context.scratch,
                capture_output=True,
                check=False,
            )
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "os_system",
        """
        import os
        import shlex

        def run():
            @GUARD_OFF@
            os.system("echo x > " + shlex.quote(@TARGET@))
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "posixsubprocess_fork_exec",
        """
        import os
        import shlex
        import subprocess

        def run():
            import _posixsubprocess

            argv = [b"/bin/sh", b"-c", ("echo x > " + shlex.quote(@TARGET@)).encode()]
            errpipe_read, errpipe_write = os.pipe()
            try:
                # The arguments of tests/calls/test_readonly_hostile.py (Python 3.11 to 3.13),
                # the working directory the marker's folder.
                pid = _posixsubprocess.fork_exec(
                    argv, [argv[0]], True, (), os.fsencode(@OUTSIDE@), None,
                    -1, -1, -1, -1, -1, -1, errpipe_read, errpipe_write,
                    False, False, -1, None, None, None, -1, None,
                    subprocess._USE_VFORK,
                )
            except TypeError as exc:
                return {"passed": True, "data": {"unreachable": str(exc)}}
            finally:
                os.close(errpipe_read)
                os.close(errpipe_write)
            os.waitpid(pid, 0)
            return {"passed": True}
        """,
    ),
    Technique(
        "fresh_context",
        """
        import contextvars
        import pathlib

        def run():
            contextvars.Context().run(pathlib.Path(@TARGET@).write_text, "x")
            return {"passed": True}
        """,
    ),
    Technique(
        "readline_history",
        """
        def run():
            @GUARD_OFF@
            import readline

            readline.write_history_file(@TARGET@)
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "sqlite_new_database",
        """
        import os
        import sqlite3

        def run():
            @GUARD_OFF@
            with sqlite3.connect(os.path.join(@OUTSIDE@, "new.db")) as db:
                db.execute("create table x (a)")
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "sqlite_existing_database",
        """
        import os
        import sqlite3

        def run():
            @GUARD_OFF@
            with sqlite3.connect(os.path.join(@OUTSIDE@, "data.db")) as db:
                db.execute("insert into t values (2)")
            return {"passed": True}
        """,
        guard_off=True,
    ),
    Technique(
        "unguarded",
        """
        from gategraph.runtime._calls._readonly import unguarded

        def run():
            with unguarded():
                with open(@TARGET@, "w") as f:
                    f.write("x")
            return {"passed": True}
        """,
    ),
    Technique(
        # Run in the dictionary of one of gategraph's modules, unguarded() lifts the guard
        # (docs/readonly.md, item 8): only the kernel is left.
        "unguarded_in_gategraphs_globals",
        """
        import gategraph.runtime._calls._readonly as readonly

        LIFT = "with unguarded():\\n    open(gg_target, 'w').write('x')\\n"

        def run():
            namespace = vars(readonly)
            namespace["gg_target"] = @TARGET@
            exec(LIFT, namespace)
            return {"passed": True}
        """,
    ),
]

CASES = [
    pytest.param(technique, off, id=f"{technique.name}{'-guard-off' if off else ''}")
    for technique in TECHNIQUES
    for off in ((False, True) if technique.guard_off else (False,))
]


def fill(source: str, target: Path, *, guard_off: bool, **more: Any) -> str:
    """The module's source with its blanks filled."""
    text = textwrap.dedent(source).strip() + "\n"
    if guard_off:
        text = DEFEAT.lstrip() + "\n\n" + text
    text = text.replace("@GUARD_OFF@", "defeat()" if guard_off else "pass")
    text = text.replace("@TARGET@", repr(str(target))).replace(
        "@OUTSIDE@", repr(str(target.parent))
    )
    for key, value in more.items():
        text = text.replace(f"@{key}@", repr(value))
    return text


def graph_text(validations: dict[str, str], nodes: list[str], name: str = "escapes") -> str:
    """A graph of inline validations (name -> source) and node lines; no isolation."""
    listed = "".join(
        f"  - {{name: {key}, code: {json.dumps(code)}}}\n" for key, code in validations.items()
    )
    rows = "".join(f"  - {node}\n" for node in nodes)
    return (
        f"version: 1\nname: {name}\npolicy: {{retry_limit: 0, strategy_revisions: 0}}\n"
        f"validations:\n{listed}nodes:\n{rows}"
    )


async def run_default(text: str) -> GraphRun:
    """Run a graph as written (no isolation argument): every validation in the sandbox,
    held by the kernel."""
    done = await execute_graph(load_graph(text))
    held = {(r.node, r.isolation, r.enforced_by) for r in done.validations}
    assert held == {(r.node, "sandbox", "kernel") for r in done.validations}, held
    assert done.validations
    return done


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` and its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The folder a validation tries to write in: the test's, outside any scratch. It holds
    a SQLite database, for the technique that writes to one that exists."""
    folder = tmp_path / "outside"
    folder.mkdir()
    with sqlite3.connect(folder / "data.db") as db:
        db.execute("create table t (a)")
        db.execute("insert into t values (1)")
    db.close()
    return folder


def assert_untouched(outside: Path, before: dict[str, bytes]) -> None:
    assert contents(outside) == before, sorted(set(contents(outside)) ^ set(before))
    with sqlite3.connect(f"file:{outside / 'data.db'}?mode=ro", uri=True) as db:
        assert db.execute("select a from t").fetchall() == [(1,)]
    db.close()


# -- the library: execute_graph -----------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(("technique", "guard_off"), CASES)
async def test_an_escape_changes_nothing_on_the_default_settings(
    outside: Path, technique: Technique, guard_off: bool, anyio_backend: str
) -> None:
    if technique.asyncio_only and anyio_backend != "asyncio":
        pytest.skip("asyncio's own (the call runs on its caller's backend)")
    target = outside / "marker"
    before = contents(outside)
    code = fill(technique.source, target, guard_off=guard_off)
    done = await run_default(graph_text({"escape": code}, ["{id: escape, validation: escape}"]))
    await anyio.sleep(technique.settle)
    [record] = done.validations
    if "unreachable" in record.result.data:
        pytest.skip(f"not reachable on this Python: {record.result.data['unreachable']}")
    assert not target.exists(), record.result
    assert_untouched(outside, before)


@pytest.mark.anyio
@pytest.mark.parametrize("guard_off", [False, True], ids=["guard-on", "guard-off"])
async def test_an_environment_change_reaches_no_later_validation(
    guard_off: bool, anyio_backend: str
) -> None:
    """A validation sets a variable in ``os.environ`` and natively (``setenv``); another
    validation after it in the same run does not see either, nor does gategraph's own
    process. With the guard on, the change is refused, so not even a later call of the
    same validation sees it."""
    name = f"GG_DEFAULT_ESCAPE_{uuid.uuid4().hex[:8].upper()}"
    setter = fill(
        """
        import ctypes
        import os

        def run(mode="set"):
            if mode == "set":
                @GUARD_OFF@
                try:
                    os.environ[@NAME@] = "leaked"
                except Exception:
                    pass
                try:
                    ctypes.CDLL(None).setenv((@NAME@ + "_NATIVE").encode(), b"leaked", 1)
                except Exception:
                    pass
                return {"passed": True}
            seen = sorted(k for k in os.environ if k.startswith(@NAME@))
            return {"passed": not seen, "data": {"seen": seen}}
        """,
        Path("/nonexistent"),
        guard_off=guard_off,
        NAME=name,
    )
    reader = setter.replace('mode="set"', 'mode="read"')
    done = await run_default(
        graph_text(
            {"setter": setter, "reader": reader},
            [
                "{id: sets, validation: setter}",
                "{id: same, validation: setter, needs: [sets], arguments: {mode: read}}",
                "{id: other, validation: reader, needs: [sets]}",
            ],
        )
    )
    results = {r.node: r.result for r in done.validations}
    assert results["other"].passed, results["other"]
    if not guard_off:
        assert not results["sets"].passed, results["sets"]
        assert results["same"].passed, results["same"]
    assert not [k for k in os.environ if k.startswith(name)]


class Listener:
    """A TCP port of the test's own, listening on the loopback."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.3)
        self.port = self.sock.getsockname()[1]

    def heard(self) -> bool:
        try:
            self.sock.accept()[0].close()
        except TimeoutError:
            return False
        return True


@pytest.mark.anyio
@pytest.mark.parametrize("guard_off", [False, True], ids=["guard-on", "guard-off"])
async def test_no_connection_reaches_a_port_of_the_machine(
    guard_off: bool, anyio_backend: str
) -> None:
    listener = Listener()
    code = fill(
        """
        import socket

        def run():
            @GUARD_OFF@
            with socket.create_connection(("127.0.0.1", @PORT@), timeout=2) as sock:
                sock.sendall(b"leak")
            return {"passed": True}
        """,
        Path("/nonexistent"),
        guard_off=guard_off,
        PORT=listener.port,
    )
    try:
        done = await run_default(graph_text({"connects": code}, ["{id: n, validation: connects}"]))
        [record] = done.validations
        assert not record.result.passed, record.result
        assert not listener.heard()
    finally:
        listener.sock.close()


# -- descriptors opened before the call -------------------------------------------------------

WRITES_TO_HELD = """
import os

def run():
    @GUARD_OFF@
    target = os.stat(@TARGET@)
    written = []
    for fd in range(3, 1024):
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                os.write(fd, b"x")
                written.append(fd)
        except OSError:
            continue
    return {"passed": True, "data": {"written": written}}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("guard_off", [False, True], ids=["guard-on", "guard-off"])
async def test_a_descriptor_gategraphs_process_holds_does_not_reach_the_call(
    outside: Path, guard_off: bool, anyio_backend: str
) -> None:
    """The program that runs gategraph holds the marker open for appending (inheritable,
    even): the validation looks for it among its descriptors and writes to it."""
    target = outside / "marker"
    target.write_text("")
    before = contents(outside)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    os.set_inheritable(fd, True)
    try:
        code = fill(WRITES_TO_HELD, target, guard_off=guard_off)
        done = await run_default(graph_text({"held": code}, ["{id: n, validation: held}"]))
    finally:
        os.close(fd)
    [record] = done.validations
    assert not record.result.data.get("written"), record.result
    assert_untouched(outside, before)


OPENS_AT_IMPORT = """
try:
    @GUARD_OFF@
    HELD = open(@TARGET@, "a")
except Exception as exc:
    HELD = None

def run():
    if HELD is not None:
        HELD.write("x")
        HELD.flush()
    return {"passed": True, "data": {"held": HELD is not None}}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("guard_off", [False, True], ids=["guard-on", "guard-off"])
async def test_a_descriptor_opened_at_import_writes_nothing(
    outside: Path, guard_off: bool, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    """A module that opens the marker for appending when it is imported, before any call,
    and writes to it in each call. (The marker exists: opening it creates nothing.)"""
    target = outside / "marker"
    target.write_text("")
    before = contents(outside)
    folder = outside.parent / "modules"
    folder.mkdir()
    module = f"gg_default_escape_{uuid.uuid4().hex}"
    source = fill(OPENS_AT_IMPORT, target, guard_off=guard_off)
    (folder / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(folder))
    text = (
        "version: 1\nname: at-import\n"
        f'validations:\n  - {{name: held, entrypoint: "{module}:run"}}\n'
        "nodes:\n  - {id: n, validation: held}\n  - {id: m, validation: held, needs: [n]}\n"
    )
    await run_default(text)
    assert module not in sys.modules  # gategraph's process never imported it
    assert_untouched(outside, before)


# -- work handed to a thread that was already running ------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("entrypoint", ["handed_to_running_thread", "handed_to_pool_thread"])
async def test_work_handed_to_a_thread_started_at_import_writes_nothing(
    outside: Path, entrypoint: str, monkeypatch: pytest.MonkeyPatch, anyio_backend: str
) -> None:
    """The helper module starts a thread (its own queue's, and a ``ThreadPoolExecutor``'s)
    when it is imported; a call hands that thread the write. (The sandboxed worker loads
    the module confined, and fails every call of a validation whose loading left threads
    running: either way, nothing is written.)"""
    monkeypatch.syspath_prepend(str(TESTS))
    target = outside / "marker"
    before = contents(outside)
    text = (
        "version: 1\nname: running\n"
        f'validations:\n  - {{name: hands, entrypoint: "{HELPER}:{entrypoint}"}}\n'
        f"nodes:\n  - {{id: n, validation: hands, arguments: {{target: {json.dumps(str(target))}}}}}\n"
    )
    await run_default(text)
    await anyio.sleep(0.2)
    assert HELPER not in sys.modules  # its threads never started in gategraph's process
    assert not target.exists()
    assert_untouched(outside, before)


LEAVES_A_SERVER = """
import functools
import pathlib
import queue
import threading

JOBS = queue.SimpleQueue()
LEFT = []

def serve():
    while True:
        job, done = JOBS.get()
        try:
            job()
        except BaseException:
            pass
        done.set()

def run(mode):
    if mode == "start":
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        LEFT.append(thread)
        return {"passed": True}
    if not any(thread.is_alive() for thread in LEFT):
        return {"passed": True, "data": {"alive": False}}
    done = threading.Event()
    JOBS.put((functools.partial(pathlib.Path(@TARGET@).write_text, "x"), done))
    done.wait(10)
    return {"passed": True, "data": {"alive": True}}
"""


@pytest.mark.anyio
async def test_work_handed_to_a_thread_an_earlier_call_left_writes_nothing(
    outside: Path, anyio_backend: str
) -> None:
    """One validation called twice in a run, one call after the other: the first call
    leaves a server thread running, the second hands it the write."""
    target = outside / "marker"
    before = contents(outside)
    code = fill(LEAVES_A_SERVER, target, guard_off=False)
    text = graph_text(
        {"server": code},
        [
            "{id: start, validation: server, arguments: {mode: start}}",
            "{id: hand, validation: server, needs: [start], arguments: {mode: hand}}",
        ],
    ).replace("policy: {", "policy: {max_concurrency: 1, ")
    await run_default(text)
    await anyio.sleep(0.2)
    assert not target.exists()
    assert_untouched(outside, before)


# -- the library: validate() --------------------------------------------------------------------

BY_NAME = {t.name: t for t in TECHNIQUES}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("name", "guard_off"),
    [
        ("ctypes_libc", True),
        ("thread", True),
        ("command_absolute_path", True),
        ("multiprocessing_spawn", False),
        ("unguarded_in_gategraphs_globals", False),
    ],
)
async def test_validate_on_the_default_settings_changes_nothing(
    outside: Path, name: str, guard_off: bool, anyio_backend: str
) -> None:
    """``validate()`` of a change with an inline validation, no isolation given."""
    target = outside / "marker"
    before = contents(outside)
    code = fill(BY_NAME[name].source, target, guard_off=guard_off)
    verdict = await validate({"a.py": "x = 1\n"}, [{"name": "escape", "code": code}])
    assert [(r.isolation, r.enforced_by) for r in verdict.records] == [("sandbox", "kernel")]
    assert not target.exists()
    assert_untouched(outside, before)


# -- the command line ---------------------------------------------------------------------------

CLI_CASES = [
    ("ctypes", "ctypes_libc", True),
    ("command", "command_absolute_path", False),
    ("spawn", "multiprocessing_spawn", False),
    ("unguarded", "unguarded", False),
    ("lifted", "unguarded_in_gategraphs_globals", False),
    ("thread", "thread", False),
]


@pytest.mark.parametrize("command", ["execute", "run"])
def test_the_command_line_on_the_default_settings_changes_nothing(
    outside: Path, tmp_path: Path, command: str
) -> None:
    """`gategraph execute` and `gategraph run` of a graph of escapes, in a process of
    their own as a user runs them: every validation held by the kernel, nothing changed."""
    before = contents(outside)
    validations = {
        node: fill(BY_NAME[name].source, outside / f"marker-{node}", guard_off=guard_off)
        for node, name, guard_off in CLI_CASES
    }
    nodes = [f"{{id: {node}, validation: {node}}}" for node in validations]
    plan = tmp_path / "plan.yaml"
    plan.write_text(graph_text(validations, nodes, name="cli-escapes"))
    args = [command, str(plan)] + (["--json"] if command == "execute" else [])
    done = run_gategraph(tmp_path / "home", *args, cwd=tmp_path)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0, done.stdout  # the escapes do not all pass
    assert_untouched(outside, before)
    assert not list(outside.glob("marker-*"))
    if command == "execute":
        records = json.loads(done.stdout)["validations"]
        held = {r["node"]: (r["isolation"], r["enforced_by"]) for r in records}
        assert held == dict.fromkeys(validations, ("sandbox", "kernel")), held
        return
    lines = done.stdout.splitlines()
    [header] = [i for i, line in enumerate(lines) if line.startswith("VALIDATION ")]
    assert "HELD BY" in lines[header]
    rows = {line.split()[0]: line for line in lines[header + 1 : header + 1 + len(validations)]}
    assert set(rows) == set(validations), done.stdout
    for node, row in rows.items():
        assert row.split()[4] == "kernel", (node, row)  # NODE, KIND (two words), RESULT
    assert f"read-only held by the kernel for {len(validations)}" in done.stdout
