"""Calls that misbehave: they ignore their timeout, flood stdout, or raise SystemExit.

Whatever a validation or tool does, the run ends (within its timeout and a short grace),
its output stays out of gategraph's own, and what it raised is its failed result. Each
case runs through ``execute_graph`` on both backends, and the ones a user meets on the
command line through ``gategraph`` in a subprocess too. The bounds here are pytest's and
the subprocesses' timeouts; no test asserts how long anything took.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_process
import hostile_results
import msgspec
import pytest
from _helpers import fake_module, graph, run_gategraph, run_process
from gategraph.runtime import (
    ConfigError,
    MemoryEventLog,
    RuntimeFault,
    Validation,
    coerce_result,
    validate,
)
from gategraph.runtime._base._kernel import support
from gategraph.runtime._base._sigint import watching_sigint
from gategraph.runtime._calls._invoke import CAPTURE_LIMIT, prepare
from gategraph.runtime._data._events import ValidationCompleted
from gategraph.runtime._data._results import coerce_failure
from gategraph.runtime._definitions._graph import PlanGraph, load_graph
from gategraph.runtime._running._engine import GraphRun, NodeStatus, execute_graph

T = "gategraph.runtime.testing"


def code_graph(name: str, code: str, *, isolation: str = "thread", **node: Any) -> PlanGraph:
    """One node running one inline-code validation (inline code ships to worker processes)."""
    return load_graph(
        {
            "version": 1,
            "name": name,
            "validations": [{"name": "v", "code": textwrap.dedent(code)}],
            "nodes": [{"id": "n", "validation": "v", "isolation": isolation, **node}],
        }
    )


def gategraph(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a process of its own; a run that never ends fails the test."""
    return run_process([sys.executable, "-m", "gategraph.runtime", *args], cwd=cwd, timeout=90)


def write(tmp_path: Path, text: str | dict[str, Any]) -> Path:
    """Write a graph file: YAML text, or a mapping (as JSON, which is YAML too)."""
    path = tmp_path / "graph.yaml"
    path.write_text(textwrap.dedent(text).lstrip() if isinstance(text, str) else json.dumps(text))
    return path


# -- item 4: timeouts that end the run --------------------------------------------------------

STUCK = {
    "sleeps": "import time\ndef run(**_):\n    while True:\n        time.sleep(1)\n",
    "spins": "def run(**_):\n    while True:\n        pass\n",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(STUCK))
def test_a_run_ends_although_a_sync_validation_ignores_its_timeout(
    tmp_path: Path, kind: str
) -> None:
    """`gategraph execute` exits (the abandoned thread is a daemon), reporting a timeout."""
    path = write(
        tmp_path,
        {
            "version": 1,
            "name": "stuck",
            "policy": {"default_timeout": 1},
            "validations": [{"name": "stuck", "code": STUCK[kind]}],
            "nodes": [{"id": "check", "validation": "stuck"}],
        },
    )
    done = gategraph(tmp_path, "execute", "--json", str(path))
    assert done.returncode == 1, done.stderr
    (record,) = json.loads(done.stdout)["validations"]
    assert record["result"]["data"]["error"] == "timeout"


async def _abandoned(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[list[float]], Any], printed: str
) -> Any:
    """Run the call ``make(said)`` builds (it prints ``printed``, appends the time to
    ``said``, then blocks) as a validation in a worker thread, past its timeout: its record,
    which must keep what it printed. On a loaded machine the thread may not print before a
    short timeout: the timeout doubles until the call printed before it (a deadline for a
    hang, not for speed)."""
    timeout = 0.2
    for attempt in itertools.count():
        said: list[float] = []
        mod = fake_module(monkeypatch, f"gg_abandoned_{attempt}", call=make(said))
        g = graph(f"""
            version: 1
            name: abandoned
            validations: [{{name: v, entrypoint: "{mod}:call", timeout: {timeout}}}]
            nodes: [{{id: n, validation: v, isolation: thread}}]
            """)
        began = time.monotonic()
        with anyio.fail_after(30 + timeout):
            run = await execute_graph(g)
        (record,) = run.validations
        assert record.result.data["error"] == "timeout"
        # The call started after `began`: one that printed within `timeout` of it printed
        # before its timeout.
        if said and said[0] - began < timeout:
            assert record.captured == {"stdout": printed}
            return record
        assert timeout < 60, "the call never printed before its timeout"
        timeout *= 2
    raise AssertionError("unreachable")


@pytest.mark.anyio
async def test_an_abandoned_thread_is_a_daemon_and_keeps_what_it_printed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sync call past its timeout is abandoned on a daemon thread; what it printed before
    the timeout is in the record."""
    release = threading.Event()

    def stuck(said: list[float]) -> Any:
        def call(**_: Any) -> dict[str, Any]:
            print("started, now waiting")
            said.append(time.monotonic())
            release.wait(600)
            return {"passed": True}

        return call

    try:
        record = await _abandoned(monkeypatch, stuck, "started, now waiting\n")
        assert record.result.data["captured"] == record.captured
        abandoned = [t for t in threading.enumerate() if t.name == "gategraph worker thread"]
        assert abandoned and all(t.daemon for t in abandoned)
    finally:
        release.set()


def test_inline_isolation_is_refused_for_a_sync_callable(tmp_path: Path) -> None:
    """`inline` cannot stop a sync call at its timeout: it is a config error naming the field,
    from `gategraph check` and from preparing the tool."""
    path = write(
        tmp_path,
        """
        version: 1
        name: inline
        validations:
          - {name: v, entrypoint: "gategraph.runtime.testing:returning"}
        nodes:
          - {id: n, validation: v, isolation: inline}
        """,
    )
    done = gategraph(tmp_path, "check", str(path))
    assert done.returncode == 2
    assert "nodes[0].isolation: `inline` would run 'v', a sync callable" in done.stderr
    assert "Traceback" not in done.stderr
    tool = load_graph(path.read_text().replace(", isolation: inline", "")).get_tool("v")
    with pytest.raises(ConfigError, match=r"use `thread` .* or make it async") as caught:
        prepare(tool, lambda name: tool, isolation="inline")
    assert caught.value.field == "isolation"


@pytest.mark.anyio
async def test_inline_isolation_of_an_async_callable_keeps_its_timeout() -> None:
    """An async callable may run inline: cancellation at an await ends it on time."""
    g = graph(f"""
        version: 1
        name: inline-async
        validations: [{{name: v, entrypoint: "{T}:sleeping", timeout: 0.1}}]
        nodes: [{{id: n, validation: v, isolation: inline, arguments: {{seconds: 60}}}}]
        """)
    with anyio.fail_after(30):
        run = await execute_graph(g)
    assert run.validations[0].result.data["error"] == "timeout"


@pytest.mark.anyio
async def test_a_timeout_kills_the_worker_process(tmp_path: Path) -> None:
    """A process-isolated call past its timeout ends with its worker process."""
    pid_file = tmp_path / "pid"
    # On a loaded machine the worker may not reach the tool's code within a short timeout;
    # the timeout doubles until the tool has run (a deadline for a hang, not for speed).
    timeout = 1
    while not (pid_file.exists() and pid_file.read_text()):
        # The worker is started before the call, outside its timeout: anyio (4.16) leaves a
        # worker process running, unclosed, when a call is cancelled while its worker starts
        # (anyio pull request 1337), which is not what this test is about. The call then
        # takes this worker from anyio's pool.
        with anyio.CancelScope(shield=True), anyio.fail_after(60):
            warm = await anyio.to_process.run_sync(os.getpid)
        g = load_graph(
            {
                "version": 1,
                "name": "spin",
                "tools": [
                    {
                        "name": "spin",
                        "code": "import os\n"
                        "def run(path, **_):\n"
                        "    with open(path, 'w') as f:\n"
                        "        f.write(str(os.getpid()))\n"
                        "    while True:\n"
                        "        pass\n",
                    }
                ],
                "nodes": [
                    {
                        "id": "spin",
                        "tool": "spin",
                        "isolation": "process",
                        "timeout": timeout,
                        "arguments": {"path": str(pid_file)},
                    }
                ],
            }
        )
        with anyio.fail_after(60 + timeout):
            run = await execute_graph(g)
        result = run.nodes["spin"]
        assert result.status is NodeStatus.FAILED
        assert result.error == f"spin timed out after {timeout} s"
        assert timeout < 60, "the tool never ran"
        timeout *= 2
    pid = int(pid_file.read_text())
    assert pid == warm != os.getpid()
    assert not await anyio.Path(f"/proc/{pid}").exists()  # killed and reaped


@pytest.mark.anyio
async def test_a_sync_transform_that_never_returns_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transform is part of its validation: it runs off the event loop, under its timeout."""
    g = graph("""
        version: 1
        name: slow-transform
        tools:
          - {name: t, read_only: true, code: "def run(**_):\\n    return 1\\n"}
        validations:
          - name: v
            wraps: t
            timeout: 0.2
            transform: |
              import time
              def transform(output):
                  for _ in range(200):
                      time.sleep(0.05)
                  return {"passed": True}
        nodes: [{id: n, validation: v}]
        """)
    with anyio.fail_after(30):
        run = await execute_graph(g)
    assert run.validations[0].result.data["error"] == "timeout"


# -- item 5: a call's output is its own --------------------------------------------------------


class PrintingLog(MemoryEventLog):
    """A log that prints as it stores, like the CLI's progress observer: gategraph's own
    output, printed from inside the engine's workers."""

    def append_nowait(self, event: Any) -> None:
        if isinstance(event, ValidationCompleted):
            print(f"progress: {event.node} done")
        super().append_nowait(event)


@pytest.mark.anyio
async def test_each_call_keeps_what_it_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Async, thread, process, wrapped and tool calls each keep their own stdout and stderr;
    none of it reaches the real streams, and what gategraph prints meanwhile does."""

    async def chatty(name: str, **_: Any) -> dict[str, Any]:
        for i in range(3):
            print(f"{name} line {i}")
            await anyio.lowlevel.checkpoint()  # the other call prints in between
        print(f"{name} warning", file=sys.stderr)
        return {"passed": True}

    mod = fake_module(monkeypatch, "gg_chatty", chatty=chatty)
    sync = (
        "import sys\n"
        "def run(name, **_):\n"
        "    print(name, 'says hello')\n"
        "    sys.stderr.write(name + ' complains\\n')\n"
        "    sys.stdout.buffer.write(b'raw bytes\\n')\n"
        "    return {'passed': True}\n"
    )
    g = load_graph(
        {
            "version": 1,
            "name": "chatty",
            "tools": [
                {"name": "make", "code": "def run(**_):\n    print('made it')\n    return 1\n"},
                {"name": "count", "read_only": True, "code": sync},
            ],
            "validations": [
                {"name": "a", "entrypoint": f"{mod}:chatty"},
                {"name": "s", "code": sync},
                {
                    "name": "w",
                    "wraps": "count",
                    "transform": "def transform(output):\n"
                    "    print('transform ran')\n"
                    "    return {'passed': True}\n",
                },
            ],
            "nodes": [
                {"id": "make", "tool": "make"},
                {
                    "id": "a1",
                    "validation": "a",
                    "isolation": "inline",
                    "arguments": {"name": "one"},
                },
                {
                    "id": "a2",
                    "validation": "a",
                    "isolation": "inline",
                    "arguments": {"name": "two"},
                },
                {"id": "thread", "validation": "s", "arguments": {"name": "thread"}},
                {
                    "id": "proc",
                    "validation": "s",
                    "isolation": "process",
                    "arguments": {"name": "proc"},
                },
                {"id": "wrapped", "validation": "w", "arguments": {"name": "wrapped"}},
            ],
        }
    )
    log = PrintingLog()
    with anyio.fail_after(60):
        run = await execute_graph(g, event_log=log)
    captured = {node: result.captured for node, result in run.nodes.items()}
    assert captured["make"] == {"stdout": "made it\n"}
    for name in ("one", "two"):
        node = "a1" if name == "one" else "a2"
        assert captured[node] == {
            "stdout": f"{name} line 0\n{name} line 1\n{name} line 2\n",
            "stderr": f"{name} warning\n",
        }
    for node in ("thread", "proc"):
        assert captured[node] == {
            "stdout": f"{node} says hello\nraw bytes\n",
            "stderr": f"{node} complains\n",
        }
    assert captured["wrapped"] == {
        "stdout": "wrapped says hello\nraw bytes\ntransform ran\n",
        "stderr": "wrapped complains\n",
    }
    # A validation's capture is in its result, so the event log keeps it.
    logged = {e.node: e.result for e in await log.read(run.plan_id) if hasattr(e, "result")}
    assert logged["proc"].data["captured"] == captured["proc"]
    out, err = capsys.readouterr()
    assert sorted(out.splitlines()) == sorted(f"progress: {v.node} done" for v in run.validations)
    assert err == ""


@pytest.mark.anyio
async def test_a_flood_of_output_is_kept_to_its_tail(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that prints megabytes keeps only the last CAPTURE_LIMIT characters, saying so."""

    def flood(**_: Any) -> dict[str, Any]:
        for i in range(100_000):
            print(f"line {i:06d} " + "x" * 20)
        return {"passed": True}

    mod = fake_module(monkeypatch, "gg_flood", flood=flood)
    g = graph(f"""
        version: 1
        name: flood
        validations: [{{name: v, entrypoint: "{mod}:flood"}}]
        nodes: [{{id: n, validation: v, isolation: thread}}]
        """)
    with anyio.fail_after(60):
        run = await execute_graph(g)
    assert run.validations[0].result.passed
    captured = run.validations[0].captured
    assert captured is not None
    header, _, kept = captured["stdout"].partition("\n")
    total = 100_000 * len("line 000000 " + "x" * 20 + "\n")
    assert header == f"[{total - CAPTURE_LIMIT} earlier characters not kept]"
    assert len(kept) == CAPTURE_LIMIT
    assert kept.endswith("line 099999 " + "x" * 20 + "\n")


@pytest.mark.anyio
async def test_a_worker_process_captures_its_descriptors_and_survives() -> None:
    """In a worker process, writes to file descriptors 1 and 2 are captured too, and the
    worker (whose descriptor 1 carries its answers) keeps working."""
    code = """
        import os
        def run(**_):
            os.write(1, b"fd one\\n")
            os.write(2, b"fd two\\n")
            return {"passed": True, "data": {"pid": os.getpid()}}
        """
    g = load_graph(
        {
            "version": 1,
            "name": "fds",
            "validations": [{"name": "v", "code": textwrap.dedent(code)}],
            "nodes": [
                {"id": "first", "validation": "v", "isolation": "process"},
                {"id": "second", "validation": "v", "isolation": "process", "needs": ["first"]},
            ],
        }
    )
    with anyio.fail_after(60):
        run = await execute_graph(g)
    for record in run.validations:
        assert record.result.passed, record.result
        assert record.captured == {"stdout": "fd one\n", "stderr": "fd two\n"}


@pytest.mark.timeout(120)
def test_json_output_stays_json_when_a_validation_floods_stdout(tmp_path: Path) -> None:
    """`gategraph execute --json > out` is valid JSON however much a validation prints."""
    path = write(
        tmp_path,
        """
        version: 1
        name: flood
        validations:
          - name: loud
            code: |
              import sys
              def run(**_):
                  for _ in range(400):
                      print("y" * 50_000)
                  print("to stderr", file=sys.stderr)
                  return {"passed": True}
        nodes: [{id: loud, validation: loud}]
        """,
    )
    done = gategraph(tmp_path, "execute", "--json", str(path))
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = json.loads(done.stdout)["validations"]
    assert record["captured"]["stdout"].endswith("y" * 100 + "\n")
    assert record["captured"]["stderr"] == "to stderr\n"
    assert "y" * 100 not in done.stderr


# -- item 6: whatever a call raises is its failure ----------------------------------------------

RAISING = {
    "system-exit": ("import sys\ndef run(**_):\n    sys.exit(3)\n", "SystemExit(3)"),
    "keyboard-interrupt": (
        "def run(**_):\n    raise KeyboardInterrupt('from the validation')\n",
        "KeyboardInterrupt('from the validation')",
    ),
    "generator-exit": ("def run(**_):\n    raise GeneratorExit\n", "GeneratorExit()"),
    "base-exception": (
        "class Odd(BaseException):\n    pass\ndef run(**_):\n    raise Odd('odd')\n",
        "Odd('odd')",
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", ["thread", "process"])
@pytest.mark.parametrize("kind", sorted(RAISING))
async def test_a_sync_call_raising_a_base_exception_fails_its_result(
    kind: str, isolation: str
) -> None:
    """SystemExit and the other BaseException subclasses a sync validation raises, in a
    thread or a worker process, are an `exception` result naming them."""
    code, named = RAISING[kind]
    with anyio.fail_after(60):
        run = await execute_graph(code_graph(kind, code, isolation=isolation))
    result = run.validations[0].result
    assert result.passed is False
    assert result.data["error"] == "exception"
    assert f"v raised {named} (at <v>:" in result.message


async def _in_process_then_ok(name: str, code: str) -> dict[str, Any]:
    """Run validation ``name`` (inline ``code``) and then a passing one, both in worker
    processes; return their results by node."""
    g = load_graph(
        {
            "version": 1,
            "name": f"{name}-then-ok",
            "validations": [
                {"name": name, "code": code},
                {"name": "ok", "code": "def run(**_):\n    return {'passed': True}\n"},
            ],
            "nodes": [
                {"id": name, "validation": name, "isolation": "process"},
                {"id": "ok", "validation": "ok", "isolation": "process", "needs": [name]},
            ],
        }
    )
    with anyio.fail_after(60):
        run = await execute_graph(g)
    return {r.node: r.result for r in run.validations}


@pytest.mark.anyio
async def test_a_worker_process_outlives_a_system_exit() -> None:
    """sys.exit() in a worker process fails that call only; the next call runs."""
    by_node = await _in_process_then_ok("quit", "import sys\ndef run(**_):\n    sys.exit(3)\n")
    assert by_node["quit"].data["error"] == "exception"
    assert by_node["ok"].passed


@pytest.mark.anyio
async def test_a_call_that_ends_its_worker_process_fails_alone() -> None:
    """os._exit() in a worker process fails that call, said plainly; the next call runs in
    a new worker."""
    by_node = await _in_process_then_ok("die", "import os\ndef run(**_):\n    os._exit(3)\n")
    assert by_node["die"].data == {"error": "exception", "exception_type": "BrokenWorkerProcess"}
    assert by_node["die"].message == (
        "die ended its worker process during the call (os._exit(), a signal or a crash)"
    )
    assert by_node["ok"].passed


@pytest.mark.anyio
async def test_async_calls_tools_and_transforms_raising_system_exit_fail_too() -> None:
    """An async validation, a wrapped validation's transform and a work node that call
    sys.exit(3) fail; the run goes on and the other nodes run."""
    g = load_graph(
        {
            "version": 1,
            "name": "exits",
            "tools": [
                {"name": "quit", "code": "import sys\ndef run(**_):\n    sys.exit(3)\n"},
                {"name": "one", "read_only": True, "code": "def run(**_):\n    return 1\n"},
            ],
            "validations": [
                {"name": "a", "code": "import sys\nasync def run(**_):\n    sys.exit(3)\n"},
                {"name": "w", "wraps": "one", "transform": "__import__('sys').exit(3)"},
                {"name": "ok", "entrypoint": f"{T}:passing"},
            ],
            "nodes": [
                {"id": "work", "tool": "quit"},
                {"id": "async", "validation": "a"},
                {"id": "wrapped", "validation": "w"},
                {"id": "ok", "validation": "ok"},
            ],
        }
    )
    with anyio.fail_after(60):
        run = await execute_graph(g)
    work = run.nodes["work"]
    assert work.status is NodeStatus.FAILED
    assert work.error is not None and "quit raised SystemExit(3)" in work.error
    by_node = {r.node: r.result for r in run.validations}
    assert by_node["async"].data["error"] == "exception"
    assert "a raised SystemExit(3)" in by_node["async"].message
    assert by_node["wrapped"].data["error"] == "exception"
    assert "transform of w raised SystemExit(3)" in by_node["wrapped"].message
    assert by_node["ok"].passed


@pytest.mark.anyio
@pytest.mark.parametrize("kind", ["system-exit", "generator-exit", "base-exception"])
async def test_an_async_validation_raising_a_base_exception_fails(kind: str) -> None:
    """On the event loop too, what an async validation raises is its failed result."""
    code, named = RAISING[kind]
    code = code.replace("def run(", "async def run(")
    with anyio.fail_after(60):
        run = await execute_graph(code_graph(kind, code))
    result = run.validations[0].result
    assert result.data["error"] == "exception"
    assert f"v raised {named} (at <v>:" in result.message


@pytest.mark.anyio
async def test_an_async_validation_raising_keyboard_interrupt_itself_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a SIGINT handler written in Python (asyncio's and trio's), a KeyboardInterrupt
    the validation raises itself is told from a Ctrl-C: it is a failed result."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        run = await execute_graph(
            code_graph("ki", "async def run(**_):\n    raise KeyboardInterrupt\n")
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    result = run.validations[0].result
    assert result.data["error"] == "exception"
    assert "KeyboardInterrupt()" in result.message


CTRL_C = """
import signal, sys, anyio
from gategraph.runtime import execute_graph, load_graph

# What a person's terminal gives a program; a test run in the background starts with
# SIGINT ignored, where no Ctrl-C reaches anything.
signal.signal(signal.SIGINT, signal.default_int_handler)

graph = load_graph({
    "version": 1, "name": "ctrl-c",
    "validations": [{"name": "v", "entrypoint": "hostile_module:" + sys.argv[2]}],
    # On this loop, in this process (declared): where a person's Ctrl-C lands.
    "nodes": [{"id": "n", "validation": "v", "isolation": "inline"}],
})

async def main():
    run = await execute_graph(graph)
    print("RESULT", run.validations[0].result.data.get("error"), flush=True)

anyio.run(main, backend=sys.argv[1])
"""
HOSTILE_MODULE = """
import os

async def spin(**_):
    os.write(1, b"ready\\n")  # a descriptor write: not captured in-process
    while True:  # never awaits: a Ctrl-C arrives in this frame
        pass

async def interrupts(**_):
    raise KeyboardInterrupt

class Result(dict):
    def __init__(self, spins):
        super().__init__(passed=True)
        self.spins = spins

    def get(self, key, default=None):
        if self.spins:
            os.write(1, b"ready\\n")
            while True:  # a Ctrl-C arrives while gategraph reads the result
                pass
        raise KeyboardInterrupt

async def interrupting_result(**_):
    return Result(spins=False)

async def spinning_result(**_):
    return Result(spins=True)
"""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("where", ["spin", "spinning_result"])
def test_a_person_s_ctrl_c_propagates(tmp_path: Path, backend: str, where: str) -> None:
    """A Ctrl-C that lands inside a validation's own frames, or while its result is read,
    stops the run (it is not turned into a result), while a KeyboardInterrupt the
    validation, or its result, raises itself is one."""
    (tmp_path / "hostile_module.py").write_text(HOSTILE_MODULE)
    (tmp_path / "main.py").write_text(CTRL_C)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    command = [sys.executable, str(tmp_path / "main.py"), backend]
    own = run_process([*command, "interrupts"], cwd=tmp_path, env=env, timeout=60)
    assert own.stdout == "RESULT exception\n", own.stderr
    own_result = run_process([*command, "interrupting_result"], cwd=tmp_path, env=env, timeout=60)
    assert own_result.stdout == "RESULT malformed\n", own_result.stderr

    process = subprocess.Popen(
        [*command, where],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "ready\n"
        # asyncio's handler cancels on the first Ctrl-C (the blocked loop never gets to
        # it) and raises on the second: keep pressing until the process ends. The
        # deadline is for a hang, however loaded the machine.
        deadline = time.monotonic() + 150
        while process.poll() is None and time.monotonic() < deadline:
            process.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.2)
        out, err = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode != 0
    assert "RESULT" not in out
    assert "KeyboardInterrupt" in err


@pytest.mark.timeout(120)
def test_gategraph_run_survives_a_validation_calling_sys_exit(tmp_path: Path) -> None:
    """`gategraph run` with a validation calling sys.exit(3): no traceback, not exit code 3
    (which means "waiting for a person"), the failure shown as the validation's."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    path = write(
        tmp_path,
        """
        version: 1
        name: exits
        resources:
          repo: {kind: directory, path: project}
        validations:
          - name: quitter
            mode: informational
            code: |
              import sys
              def run(**_):
                  sys.exit(3)
          - {name: fine, entrypoint: "gategraph.runtime.testing:passing"}
        nodes:
          - {id: quit, validation: quitter}
          - {id: ok, validation: fine}
        """,
    )
    done = gategraph(tmp_path, "run", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "ExceptionGroup" not in done.stderr
    assert "quitter raised SystemExit(3)" in done.stdout
    events = gategraph(tmp_path, "events", "--json", done.stdout.split()[1])
    assert events.returncode == 0, events.stderr
    assert '"run_finished"' in events.stdout  # the log goes on past run_started


# -- a CancelledError no one asked for is a failure, never a lost call --------------------------

RAISES_CANCELLED = "import asyncio\nasync def run(**_):\n    raise asyncio.CancelledError()\n"


def cancelled_graph(code: str) -> PlanGraph:
    """A validation running ``code`` beside a passing one and one that needs it."""
    return load_graph(
        {
            "version": 1,
            "name": "cancelled",
            "validations": [
                {"name": "v", "code": code},
                {"name": "ok", "entrypoint": f"{T}:passing"},
            ],
            "nodes": [
                # On this loop (declared): the point is the engine's own worker and task.
                {"id": "n", "validation": "v", "isolation": "inline"},
                {"id": "other", "validation": "ok"},
                {"id": "after", "validation": "ok", "needs": ["n"]},
            ],
        }
    )


@pytest.mark.anyio
async def test_an_async_validation_raising_cancelled_error_itself_fails() -> None:
    """`raise asyncio.CancelledError()` with nothing cancelling the call is an `exception`
    result (on trio it is no cancellation at all); every node keeps its result."""
    with anyio.fail_after(30):
        run = await execute_graph(cancelled_graph(RAISES_CANCELLED))
    assert set(run.nodes) == {"n", "other", "after"}
    result = run.nodes["n"].output
    assert result.data["error"] == "exception"
    assert result.message.startswith("v raised CancelledError() (at <v>:3)")
    assert run.passed is False


@pytest.mark.timeout(120)
def test_gategraph_execute_fails_a_validation_raising_cancelled_error(tmp_path: Path) -> None:
    """On the command line the run fails (exit 1) and says why: it never passes with 0
    validations."""
    path = write(
        tmp_path,
        {
            "version": 1,
            "name": "cancelled",
            "validations": [{"name": "v", "code": RAISES_CANCELLED}],
            "nodes": [{"id": "n", "validation": "v"}],
        },
    )
    done = gategraph(tmp_path, "execute", "--json", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    (record,) = json.loads(done.stdout)["validations"]
    assert record["result"]["data"]["error"] == "exception"
    text = gategraph(tmp_path, "execute", str(path))
    assert text.returncode == 1
    assert "0 validations" not in text.stdout


SELF_CANCELLING = (
    "import asyncio\nasync def run(**_):\n"
    "    asyncio.current_task().cancel()\n"
    "    await asyncio.sleep(0)\n"
    "    return {'passed': True}\n"
)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_validation_cancelling_its_own_task_fails_alone() -> None:
    """asyncio only (trio has no Task.cancel()): a validation that cancels the task it runs
    in fails; the worker goes on, and every other node runs."""
    with anyio.fail_after(30):
        run = await execute_graph(cancelled_graph(SELF_CANCELLING))
    assert set(run.nodes) == {"n", "other", "after"}
    assert run.nodes["n"].output.data == {"error": "exception", "exception_type": "CancelledError"}
    assert "v cancelled the task it ran in" in run.nodes["n"].output.message
    assert run.nodes["other"].output.passed and run.nodes["after"].output.passed


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_a_run_that_loses_a_node_never_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: were a worker lost with its node (here: the self-cancelling call's
    cancellation let through), the run raises RuntimeFault rather than pass without it."""
    monkeypatch.setattr(
        "gategraph.runtime._running._engine._withdraw_stray_cancellation", lambda: False
    )
    with anyio.fail_after(30), pytest.raises(RuntimeFault, match="ended without a result"):
        await execute_graph(cancelled_graph(SELF_CANCELLING))


def test_graph_run_passes_only_with_every_selected_node() -> None:
    """`GraphRun.passed` is false when a selected node has no result, whatever the rest say."""
    empty = GraphRun(
        plan_id="p", graph="g", attempt=1, nodes={}, validations=[], duration=0.0, selected=1
    )
    assert empty.passed is False
    assert GraphRun(**{**msgspec.structs.asdict(empty), "selected": 0}).passed is True


@pytest.mark.anyio
async def test_cancellation_from_outside_still_cancels_the_run() -> None:
    """A real cancellation (a scope around the run) still propagates: it is not a result."""
    g = graph(f"""
        version: 1
        name: slow
        validations: [{{name: v, entrypoint: "{T}:sleeping"}}]
        nodes: [{{id: n, validation: v, arguments: {{seconds: 60}}}}]
        """)
    with anyio.fail_after(30):
        with anyio.move_on_after(0.1) as scope:
            await execute_graph(g)
    assert scope.cancelled_caught


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.anyio
async def test_an_asyncio_timeout_around_a_direct_call_propagates() -> None:
    """A cancellation asyncio makes outside anyio (asyncio.timeout) is one too: counted on
    the task, it propagates out of a call made directly."""
    import asyncio

    tool = graph(f"""
        version: 1
        name: slow
        validations: [{{name: v, entrypoint: "{T}:sleeping"}}]
        nodes: [{{id: n, validation: v}}]
        """).get_tool("v")
    call = prepare(tool, lambda name: tool)
    with anyio.fail_after(30), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await call.call({"seconds": 60}, {})


# -- a BaseException while a tool loads is a config error ---------------------------------------

LOAD_EXITS = {
    "entrypoint": (
        {"name": "v", "entrypoint": "exits_on_import:run"},
        "validations[0].entrypoint: cannot import 'exits_on_import': SystemExit(5)",
    ),
    "code": (
        {"name": "v", "code": "import sys\nsys.exit(6)\ndef run(**_):\n    return True\n"},
        "validations[0].code: inline code of 'v' raised SystemExit(6) while loading",
    ),
    "transform": (
        {
            "name": "v",
            "wraps": "t",
            "transform": "import sys\nsys.exit(7)\ndef transform(output):\n    return True\n",
        },
        "validations[0].transform: the transform of 'v' raised SystemExit(7) while loading",
    ),
    "transform-import": (
        {
            "name": "v",
            "wraps": "t",
            "transform": "import gg_missing_module\ndef transform(output):\n    return True\n",
        },
        "validations[0].transform: the transform of 'v' failed to load: "
        "ModuleNotFoundError: No module named 'gg_missing_module'",
    ),
    "generator-exit": (
        {"name": "v", "code": "raise GeneratorExit\n"},
        "validations[0].code: inline code of 'v' raised GeneratorExit() while loading",
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", sorted(LOAD_EXITS))
def test_sys_exit_while_a_tool_loads_is_a_config_error(tmp_path: Path, kind: str) -> None:
    """`sys.exit()` in an imported module, top-level inline code or a transform (and a
    transform's failing import) is an error at that field: `check` and `run` exit 2 saying
    so, not silently with the tool's exit code."""
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(5)\n")
    validation, expected = LOAD_EXITS[kind]
    path = write(
        tmp_path,
        {
            "version": 1,
            "name": "loads",
            "tools": [{"name": "t", "read_only": True, "code": "def run(**_):\n    return 1\n"}],
            "validations": [validation],
            # Loaded here (declared trusted): what its loading does is the point.
            "nodes": [{"id": "n", "validation": "v", "isolation": "thread"}],
        },
    )
    for command in ("check", "run"):
        done = run_process(
            [sys.executable, "-m", "gategraph.runtime", command, str(path)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
            timeout=90,
        )
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert expected in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("raised", ["SystemExit(5)", "GeneratorExit()", "CancelledError()"])
def test_prepare_turns_a_base_exception_at_import_into_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, raised: str
) -> None:
    """Importing an entrypoint that raises any BaseException (but a Ctrl-C) while loading
    is a ConfigError at `entrypoint`, from prepare() itself."""
    name = f"gg_raises_{raised.partition('(')[0].lower()}"
    header = "from asyncio import CancelledError\n" if "Cancelled" in raised else ""
    (tmp_path / f"{name}.py").write_text(f"{header}raise {raised}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    tool = Validation.from_config({"name": "v", "entrypoint": f"{name}:run"})
    with pytest.raises(ConfigError) as caught:
        prepare(tool, lambda n: tool, isolation="thread")
    assert caught.value.field == "entrypoint"
    assert f"cannot import {name!r}: {raised}" in str(caught.value)


def test_propagates_outside_an_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside an event loop (a graph being loaded) nothing is cancelled: a SystemExit or a
    CancelledError is the code's own, only a Ctrl-C propagates; no error of anyio's."""
    import asyncio

    from gategraph.runtime._calls._invoke import propagates

    # Python's own handler, as in a terminal (a test run in the background ignores SIGINT).
    monkeypatch.setattr(signal, "getsignal", lambda signum: signal.default_int_handler)
    assert propagates(SystemExit(3)) is False
    assert propagates(asyncio.CancelledError()) is False
    assert propagates(KeyboardInterrupt()) is True  # no frames to tell by: a Ctrl-C
    # With SIGINT ignored or left to the system, no signal raises one: it is the code's.
    for disposition in (signal.SIG_IGN, signal.SIG_DFL):
        monkeypatch.setattr(signal, "getsignal", lambda signum, d=disposition: d)
        assert propagates(KeyboardInterrupt()) is False


@pytest.mark.timeout(120)
def test_an_actor_module_exiting_on_import_is_a_config_error(tmp_path: Path) -> None:
    """`uses:` naming a module that calls sys.exit() on import: `gategraph check` reports
    the field (exit 2), not an internal error."""
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(5)\n")
    path = write(
        tmp_path,
        {"version": 1, "name": "actor", "nodes": [{"id": "a", "uses": "exits_on_import:A"}]},
    )
    done = run_process(
        [sys.executable, "-m", "gategraph.runtime", "check", str(path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        timeout=90,
    )
    assert done.returncode == 2, done.stderr
    assert "nodes[0].uses: cannot import 'exits_on_import'" in done.stderr
    assert "internal error" not in done.stderr


def test_a_ctrl_c_while_a_tool_loads_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt while loading (under Python's own SIGINT handler, a Ctrl-C) is
    not turned into a config error."""
    tool = Validation.from_config({"name": "v", "code": "raise KeyboardInterrupt\n"})
    monkeypatch.setattr(signal, "getsignal", lambda signum: signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt):
        prepare(tool, lambda n: tool, isolation="thread")


# -- explicit isolation holds for async callables -------------------------------------------------

ASYNC_SPIN = "async def run(**_):\n    while True:\n        pass\n"


@pytest.mark.timeout(120)
def test_an_async_busy_loop_in_process_isolation_times_out(tmp_path: Path) -> None:
    """`isolation: process` runs an async validation in the worker process, killed at its
    timeout: `gategraph execute` ends with a timeout, not a hang."""
    path = write(
        tmp_path,
        {
            "version": 1,
            "name": "async-spin",
            "validations": [{"name": "spin", "code": ASYNC_SPIN, "timeout": 1}],
            "nodes": [{"id": "n", "validation": "spin", "isolation": "process"}],
        },
    )
    # Not `python -m gategraph.runtime`: a worker process re-runs the parent's __main__.
    main = "from gategraph.runtime._cli import main; main()"
    done = run_process(
        [sys.executable, "-c", main, "execute", "--json", str(path)], cwd=tmp_path, timeout=90
    )
    assert done.returncode == 1, done.stderr
    (record,) = json.loads(done.stdout)["validations"]
    assert record["result"]["data"]["error"] == "timeout"


@pytest.mark.anyio
async def test_an_async_validation_that_blocks_times_out_in_thread_isolation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`isolation: thread` gives an async validation an event loop of its own in a daemon
    worker thread: one that blocks instead of awaiting is abandoned at its timeout, and
    what it printed is kept."""
    release = threading.Event()

    def blocks(said: list[float]) -> Any:
        async def call(**_: Any) -> dict[str, Any]:
            print("blocking now")
            said.append(time.monotonic())
            while not release.is_set():
                release.wait(0.01)  # a blocking call in async code
            return {"passed": True}

        return call

    try:
        await _abandoned(monkeypatch, blocks, "blocking now\n")
    finally:
        release.set()


WHERE = """
import os, threading

async def run(**_):
    return {"passed": True, "data": {"pid": os.getpid(), "thread": threading.get_ident()}}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", [None, "inline", "thread", "process"])
async def test_where_an_async_validation_runs(isolation: str | None) -> None:
    """With `inline` an async validation runs on the caller's loop; with `thread` in
    another thread, with `process` (and without isolation: the sandbox, the default for a
    graph's code) in another process, on either backend."""
    node: dict[str, Any] = {"id": "n", "validation": "v"}
    if isolation is not None:
        node["isolation"] = isolation
    g = load_graph(
        {
            "version": 1,
            "name": "where",
            "validations": [{"name": "v", "code": WHERE}],
            "nodes": [node],
        }
    )
    with anyio.fail_after(60):
        run = await execute_graph(g)
    result = run.validations[0].result
    assert result.passed, result
    here = {"pid": os.getpid(), "thread": threading.get_ident()}
    if isolation == "inline":
        assert result.data == here
    elif isolation == "thread":
        assert result.data["pid"] == here["pid"] and result.data["thread"] != here["thread"]
    else:
        assert result.data["pid"] != here["pid"]


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_an_isolated_async_validation_is_guarded(tmp_path: Path, isolation: str) -> None:
    """On its own loop (a thread's or a worker process's) an async validation runs under the
    same read-only guard: a write fails it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    code = (
        "import pathlib\n"
        "async def run(root, **_):\n"
        "    (pathlib.Path(root) / 'new.txt').write_text('x')\n"
        "    return {'passed': True}\n"
    )
    g = load_graph(
        {
            "version": 1,
            "name": "guarded",
            "resources": {"repo": {"kind": "directory", "path": str(repo)}},
            "validations": [{"name": "v", "code": code, "resource_slots": ["root"]}],
            "nodes": [{"id": "n", "validation": "v", "isolation": isolation}],
        }
    )
    with anyio.fail_after(60):
        run = await execute_graph(g)
    assert run.validations[0].result.data["error"] == "read_only_violation"
    assert list(repo.iterdir()) == []


@pytest.mark.anyio
async def test_an_async_transform_of_a_thread_isolated_validation_runs_off_the_loop() -> None:
    """The async transform of a validation with `isolation: thread` runs on a loop of its
    own too (a transform is part of its validation)."""
    g = graph("""
        version: 1
        name: transform-thread
        tools:
          - {name: t, read_only: true, code: "async def run(**_):\\n    return 1\\n"}
        validations:
          - name: v
            wraps: t
            transform: |
              import threading
              async def transform(output):
                  return {"passed": True, "data": {"thread": threading.get_ident()}}
        nodes:
          - {id: isolated, validation: v, isolation: thread}
          - {id: on-loop, validation: v, isolation: inline}
        """)
    with anyio.fail_after(30):
        run = await execute_graph(g)
    by_node = {r.node: r.result for r in run.validations}
    assert by_node["on-loop"].data["thread"] == threading.get_ident()
    assert by_node["isolated"].data["thread"] != threading.get_ident()


# -- lifecycle hooks: bounded, and quiet -----------------------------------------------------------

HOOKS_MODULE = """
import time

def loud():
    print("the hook says hello")

def stuck():
    while True:
        time.sleep(0.1)

async def spins():  # never awaits: nothing on the event loop could stop it
    while True:
        pass
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("hook", ["loud", "stuck", "spins"])
def test_gategraph_run_with_a_loud_or_stuck_setup_hook(tmp_path: Path, hook: str) -> None:
    """`gategraph run --json`: what a setup hook prints stays out of the JSON; one that
    never returns fails the run at the tool's timeout, saying so, and the process exits."""
    (tmp_path / "hooks_module.py").write_text(HOOKS_MODULE)
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    path = write(
        tmp_path,
        {
            "version": 1,
            "name": "hooked",
            "resources": {"repo": {"kind": "directory", "path": "project"}},
            "validations": [
                {
                    "name": "v",
                    "entrypoint": f"{T}:passing",
                    "timeout": 1,
                    "hooks": {"setup": f"hooks_module:{hook}"},
                }
            ],
            "nodes": [{"id": "n", "validation": "v"}],
        },
    )
    done = run_process(
        [sys.executable, "-m", "gategraph.runtime", "run", "--json", str(path)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        timeout=90,
    )
    if hook == "loud":
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["status"] == "applied"
        assert "the hook says hello" not in done.stdout + done.stderr
    else:
        assert done.returncode == 1, done.stdout + done.stderr
        assert "the setup hook of 'v' did not return within 1 s" in done.stderr
        assert "Traceback" not in done.stderr


# -- a call cannot take gategraph's output streams away --------------------------------------------

STREAM_TRICKS = {
    "close": (
        "import sys\nasync def run(**_):\n"
        "    sys.stdout.close()\n    sys.stderr.close()\n"
        "    print('still captured')\n"
        "    return {'passed': True}\n"
    ),
    "detach": (
        "import sys\nasync def run(**_):\n"
        "    raw = sys.stdout.detach()\n"
        "    raw.write(b'through the detached buffer\\n')\n"
        "    raw.close()\n"
        "    print('and the stream still works')\n"
        "    return {'passed': True}\n"
    ),
    "fileno": (
        "import io, os, sys\nasync def run(**_):\n"
        "    try:\n        os.close(sys.stdout.fileno())\n"
        "    except io.UnsupportedOperation as exc:\n        print('no descriptor:', exc)\n"
        "    return {'passed': not sys.stdout.isatty()}\n"
    ),
    "rewrap": (
        "import io, sys\ndef run(**_):\n"
        "    wrapper = io.TextIOWrapper(sys.stdout.detach(), 'utf-8', line_buffering=True)\n"
        "    wrapper.write('rewrapped\\n')\n"
        "    wrapper.close()\n"
        "    sys.stdout.reconfigure(encoding='ascii')\n"
        "    return {'passed': True}\n"
    ),
}


@pytest.mark.anyio
async def test_a_call_cannot_close_or_detach_gategraph_s_streams(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`close()`, `detach()`, `fileno()` tricks and `reconfigure()` in a call leave the
    process's streams working (here: pytest's); what the call wrote is still captured."""
    g = load_graph(
        {
            "version": 1,
            "name": "tricks",
            "validations": [
                {"name": name, "code": code} for name, code in sorted(STREAM_TRICKS.items())
            ],
            # In this process (declared): its streams are what the tricks go after.
            "nodes": [
                {
                    "id": name,
                    "validation": name,
                    "isolation": "inline" if "async def" in code else "thread",
                }
                for name, code in sorted(STREAM_TRICKS.items())
            ],
        }
    )
    with anyio.fail_after(30):
        run = await execute_graph(g)
    by_node = {r.node: r for r in run.validations}
    assert all(r.result.passed for r in by_node.values()), [r.result for r in by_node.values()]
    assert by_node["close"].captured == {"stdout": "still captured\n"}
    assert by_node["detach"].captured == {
        "stdout": "through the detached buffer\nand the stream still works\n"
    }
    fileno = by_node["fileno"].captured
    assert fileno is not None and fileno["stdout"].startswith("no descriptor: fileno")
    assert by_node["rewrap"].captured == {"stdout": "rewrapped\n"}
    print("gategraph still prints é")
    print("and to stderr", file=sys.stderr)
    assert capsys.readouterr() == ("gategraph still prints é\n", "and to stderr\n")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("trick", ["close", "detach"])
@pytest.mark.parametrize("as_json", [False, True])
def test_gategraph_run_survives_a_call_closing_or_detaching_stdout(
    tmp_path: Path, trick: str, as_json: bool
) -> None:
    """`gategraph run` (and `--json`) applies and reports normally after a validation
    closed or detached sys.stdout."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    path = write(
        tmp_path,
        {
            "version": 1,
            "name": "tricks",
            "resources": {"repo": {"kind": "directory", "path": "project"}},
            "validations": [{"name": "v", "code": STREAM_TRICKS[trick]}],
            "nodes": [{"id": "n", "validation": "v", "isolation": "thread"}],
        },
    )
    done = gategraph(tmp_path, "run", *(["--json"] if as_json else []), str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    if as_json:
        assert json.loads(done.stdout)["status"] == "applied"
    else:
        assert "applied" in done.stdout


# -- a result that raises while it is read is malformed, KeyboardInterrupt included ------------

RESULTS = "hostile_results"  # tests/hostile_results.py: worker processes import it
RAISED_BY_RESULTS = ["KeyboardInterrupt", "SystemExit", "GeneratorExit", "Odd"]


@pytest.mark.parametrize("raised", RAISED_BY_RESULTS)
@pytest.mark.parametrize("method", hostile_results.METHODS_ALL)
def test_reading_a_result_that_raises_is_malformed(method: str, raised: str) -> None:
    """Whatever a result's own methods raise while it is read, KeyboardInterrupt and the
    other BaseExceptions included, is a `malformed` result naming it (no SIGINT came)."""
    with watching_sigint():
        result = coerce_result(hostile_results.hostile(method, raised))
    assert result.passed is False
    assert result.data == {"error": "malformed"}
    assert result.message.startswith("malformed validation result: reading the result raised ")
    assert raised in result.message


def test_a_ctrl_c_while_a_result_is_read_propagates() -> None:
    """A SIGINT delivered while the run watches makes a KeyboardInterrupt a Ctrl-C: the
    one that lands in a result's own method propagates; once the watch ends, none has
    come, and the next KeyboardInterrupt is the result's again."""
    previous = signal.getsignal(signal.SIGINT)

    class Interrupted(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            signal.raise_signal(signal.SIGINT)  # a person's Ctrl-C, delivered here
            return dict.get(self, key, default)

    with watching_sigint():
        with watching_sigint():  # a run inside a run shares the count
            assert signal.getsignal(signal.SIGINT) is not previous
            with pytest.raises(KeyboardInterrupt):
                coerce_result(Interrupted(passed=True))
        assert coerce_failure("exception", "boom", {"x": 1}).data == {"error": "exception", "x": 1}
    assert signal.getsignal(signal.SIGINT) is previous
    with watching_sigint():
        assert coerce_result(hostile_results.hostile()).data == {"error": "malformed"}


def test_the_watch_leaves_a_handler_it_did_not_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler installed while a run watches stays when the run ends; with SIGINT
    ignored nothing is installed, and a KeyboardInterrupt is the code's own."""
    previous = signal.getsignal(signal.SIGINT)

    def theirs(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        with watching_sigint():
            signal.signal(signal.SIGINT, theirs)
        assert signal.getsignal(signal.SIGINT) is theirs
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with watching_sigint():
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            assert coerce_result(hostile_results.hostile()).data == {"error": "malformed"}
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_keyboard_interrupt_in_a_worker_thread_is_never_a_ctrl_c() -> None:
    """Python runs signal handlers in the main thread only: reading a result in another
    thread, a KeyboardInterrupt is the result's own, whatever the handler."""
    found: list[Any] = []
    previous = signal.getsignal(signal.SIGINT)

    def read() -> None:
        with watching_sigint():  # a run in this thread: no handler to put in front
            found.append(signal.getsignal(signal.SIGINT))
            found.append(coerce_result(hostile_results.hostile()))

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    assert found[0] is previous
    assert found[1].data == {"error": "malformed"}


def test_outside_a_run_the_frame_tells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a run, under a handler written in Python, a KeyboardInterrupt raised from
    the handler's frame is a Ctrl-C, and one raised elsewhere is the code's own."""
    from gategraph.runtime._base._sigint import is_ctrl_c

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(KeyboardInterrupt) as delivered:
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt) as raised:
            raise KeyboardInterrupt
    finally:
        signal.signal(signal.SIGINT, previous)
        monkeypatch.setattr(signal, "getsignal", lambda signum: handler)
    assert is_ctrl_c(delivered.value) is True
    assert is_ctrl_c(raised.value) is False
    assert is_ctrl_c(KeyboardInterrupt()) is True  # no traceback to tell by
    # asyncio's handler is a partial of a bound method: the function inside is found.
    monkeypatch.setattr(signal, "getsignal", lambda signum: functools.partial(handler))
    assert is_ctrl_c(delivered.value) is True
    assert is_ctrl_c(raised.value) is False


def results_graph(isolation: str, method: str, raised: str = "KeyboardInterrupt") -> PlanGraph:
    """A validation returning a hostile result, and a passing one that runs after it."""
    entry = "run_async" if isolation == "inline" else "run"
    node: dict[str, Any] = {
        "id": "hostile",
        "validation": "h",
        "arguments": {"method": method, "raised": raised},
    }
    node["isolation"] = isolation  # each declared: the default would be the sandbox
    return load_graph(
        {
            "version": 1,
            "name": "hostile-results",
            "validations": [
                {"name": "h", "entrypoint": f"{RESULTS}:{entry}"},
                {"name": "ok", "entrypoint": f"{T}:passing"},
            ],
            "nodes": [node, {"id": "ok", "validation": "ok", "needs": ["hostile"]}],
        }
    )


@pytest.mark.anyio
@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", ["get", "keys", "__eq__", "utcoffset"])
@pytest.mark.parametrize("isolation", ["inline", "thread", "process"])
async def test_a_hostile_result_is_malformed_wherever_it_runs(isolation: str, method: str) -> None:
    """On the event loop, in a thread or a worker process (whose result is read here), a
    result raising KeyboardInterrupt while it is read is `malformed`; the run goes on."""
    with anyio.fail_after(60):
        run = await execute_graph(results_graph(isolation, method))
    by_node = {r.node: r.result for r in run.validations}
    assert by_node["hostile"].data["error"] == "malformed"
    assert "reading the result raised KeyboardInterrupt: from " in by_node["hostile"].message
    assert by_node["ok"].passed


@pytest.mark.anyio
@pytest.mark.timeout(120)
@pytest.mark.skipif(support().missing is not None, reason=f"no sandbox here: {support().missing}")
async def test_a_hostile_result_is_malformed_in_the_sandbox() -> None:
    """A sandboxed worker encodes the result itself: a value whose own method raises
    KeyboardInterrupt meanwhile is `malformed` (not a worker that died), and so is a
    mapping that is not plain data; the run goes on."""
    with anyio.fail_after(60):
        raising = await execute_graph(results_graph("sandbox", "utcoffset"))
        mapping = await execute_graph(results_graph("sandbox", "get"))
    by_node = {r.node: r.result for r in raising.validations}
    assert by_node["hostile"].data["error"] == "malformed"
    assert by_node["hostile"].message == (
        "h returned a value that raised KeyboardInterrupt: from utcoffset while it was read, "
        "so it cannot leave the sandbox"
    )
    assert by_node["ok"].passed
    (record, _) = mapping.validations
    assert record.result.data["error"] == "malformed"
    assert "is not plain data" in record.result.message


@pytest.mark.anyio
@pytest.mark.parametrize("raised", RAISED_BY_RESULTS)
async def test_validate_fails_a_hostile_result_as_malformed(raised: str) -> None:
    """`validate()`: the verdict fails with the validation's `malformed` result."""
    verdict = await validate(
        None,
        [
            {
                "validation": {"name": "h", "entrypoint": f"{RESULTS}:run_async"},
                "arguments": {"method": "get", "raised": raised},
                "isolation": "inline",  # read here (the sandbox's worker reads it there)
            }
        ],
    )
    assert verdict.passed is False
    (record,) = verdict.records
    assert record.result.data["error"] == "malformed"
    assert f"reading the result raised {raised}" in record.result.message


HOSTILE_GRAPH = """
version: 1
name: hostile-result
validations:
  - {name: h, entrypoint: "hostile_results:run", mode: MODE}
  - {name: fine, entrypoint: "gategraph.runtime.testing:passing"}
nodes:
  - {id: hostile, validation: h, isolation: ISOLATION, arguments: {method: get}}
  - {id: ok, validation: fine, needs: [hostile]}
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_gategraph_execute_fails_a_hostile_result_as_malformed(
    tmp_path: Path, isolation: str
) -> None:
    """`gategraph execute`: a result raising KeyboardInterrupt while it is read fails its
    validation as malformed (exit 1, the other validation ran), never 130."""
    text = HOSTILE_GRAPH.replace("MODE", "required").replace("ISOLATION", isolation)
    path = write(tmp_path, text)
    tests = Path(__file__).parents[1]
    done = run_gategraph(
        tmp_path / "home", "execute", "--json", str(path), cwd=tmp_path, pythonpath=tests
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "interrupted" not in done.stderr and "Traceback" not in done.stderr
    records = {r["node"]: r for r in json.loads(done.stdout)["validations"]}
    assert records["hostile"]["result"]["data"]["error"] == "malformed"
    assert "reading the result raised KeyboardInterrupt" in records["hostile"]["result"]["message"]
    assert records["ok"]["result"]["passed"] is True


@pytest.mark.timeout(120)
def test_gategraph_run_shows_a_hostile_result_as_malformed(tmp_path: Path) -> None:
    """`gategraph run`: the plan goes on past an informational validation whose result
    raised KeyboardInterrupt while it was read, shown as malformed; not exit code 130."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    text = HOSTILE_GRAPH.replace("MODE", "informational").replace("ISOLATION", "thread")
    text += "resources:\n  repo: {kind: directory, path: project}\n"
    path = write(tmp_path, text)
    tests = Path(__file__).parents[1]
    done = run_gategraph(tmp_path / "home", "run", str(path), cwd=tmp_path, pythonpath=tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "interrupted" not in done.stderr and "Traceback" not in done.stderr
    assert "malformed validation result: reading the result raised KeyboardInterrupt" in (
        done.stdout
    )
