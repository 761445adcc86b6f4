"""Plugins' declarations are evaluated in a worker process, never in gategraph's: what a
plugin does when its declaration is read (exit, hang, print, read secrets, write files,
answer garbage) cannot change what gategraph prints or how it exits; the plugin is left
out with one line saying why."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import plugin_project, run_gategraph, run_process
from coverage import Coverage, CoverageData
from coverage.exceptions import CoverageWarning
from gategraph.runtime._base import _kernel
from gategraph.runtime._base._kernel import SandboxLimits
from gategraph.runtime._definitions import _plugins

CHECKS = (
    "from pathlib import Path\n\n"
    "def no_todo(root):\n"
    "    found = [p.name for p in Path(root).rglob('*.py') if 'TODO' in p.read_text()]\n"
    "    return {'passed': not found, 'message': ', '.join(found) or 'no TODO'}\n"
)
GOOD = (
    "VALIDATIONS = [{'name': 'no_todo', 'description': 'No TODO left in the folder.',\n"
    "    'entrypoint': 'gg_hostile.checks:no_todo', 'resource_slots': ['root']}]\n"
)
SECRET = "s3cr3t-0f-the-parent"


def site(folder: Path, **declarations: str) -> Path:
    """A plugin ``gg-hostile`` installed on a path of its own (its package and dist-info,
    as pip lays them out): the module of each entry point ``name`` is ``declarations[name]``,
    its declaration that module's ``VALIDATIONS``."""
    target = folder / "site"
    package = target / "gg_hostile"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "checks.py").write_text(CHECKS)
    entries = []
    for name, text in declarations.items():
        (package / f"{name}.py").write_text(text)
        entries.append(f"{name} = gg_hostile.{name}:VALIDATIONS\n")
    info = target / "gg_hostile-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gg-hostile\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[gategraph.validations]\n" + "".join(entries))
    return target


def gategraph(
    plugins: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_gategraph(tmp_path / "home", *args, cwd=tmp_path, pythonpath=plugins, env=env)


def _steady(done: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """A command's output without what differs from run to run (times, plan ids)."""
    return tuple(  # type: ignore[return-value]
        re.sub(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", "ID", re.sub(r"\d+(\.\d+)?m?s\b", "T", text))
        for text in (done.stdout, done.stderr)
    )


def left_out(listed: subprocess.CompletedProcess[str], entry: str) -> list[str]:
    """The ``plugin left out`` lines ``tool list`` printed for entry point ``entry``."""
    return [
        line
        for line in listed.stdout.splitlines()
        if line.startswith("plugin left out: ") and f"(entry point {entry!r}" in line
    ]


def test_a_plugin_that_exits_when_read_does_not_make_a_failing_execute_pass(
    tmp_path: Path,
) -> None:
    plugins = site(tmp_path, exits="import os\nos._exit(0)\n", good=GOOD)
    graph = plugin_project(tmp_path, "x = 1  # TODO\n")
    failed = gategraph(plugins, tmp_path, "execute", str(graph))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "todo" in failed.stdout and "app.py" in failed.stdout
    listed = gategraph(plugins, tmp_path, "tool", "list")
    assert listed.returncode == 0, listed.stderr
    [line] = left_out(listed, "exits")
    assert "plugin gg-hostile" in line
    assert "ended while reading it: it exited with status 0" in line
    assert "no_todo (gg-hostile)" in listed.stdout  # read by a fresh worker


def test_a_plugin_cannot_read_gategraphs_secrets(tmp_path: Path) -> None:
    plugins = site(
        tmp_path,
        telltale=(
            "import os\n"
            "VALIDATIONS = [{'name': 'telltale', 'entrypoint': 'gg_hostile.checks:no_todo',\n"
            "    'description': 'key=' + os.environ.get('GATEGRAPH_TEST_SECRET', 'none')}]\n"
        ),
    )
    shown = gategraph(
        plugins,
        tmp_path,
        "tool",
        "show",
        "telltale",
        "--json",
        env={"GATEGRAPH_TEST_SECRET": SECRET},
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["description"] == "key=none"
    assert SECRET not in shown.stdout + shown.stderr


def test_a_plugin_cannot_write_a_file_when_it_is_read(tmp_path: Path) -> None:
    assert _kernel.support().missing is None, "this machine can sandbox: the test needs it"
    target = tmp_path / "written.txt"
    plugins = site(
        tmp_path,
        writes=(
            "try:\n"
            f"    open({str(target)!r}, 'w').write('the plugin was here')\n"
            "    SAID = 'written'\n"
            "except OSError as exc:\n"
            "    SAID = type(exc).__name__\n"
            "VALIDATIONS = [{'name': 'writer', 'entrypoint': 'gg_hostile.checks:no_todo',\n"
            "    'description': SAID}]\n"
        ),
    )
    shown = gategraph(plugins, tmp_path, "tool", "show", "writer", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["description"] != "written"
    assert not target.exists()


def test_what_a_plugin_prints_when_read_never_reaches_gategraphs_output(tmp_path: Path) -> None:
    talks = (
        "import os, sys\n"
        "print('PLUGIN-OUT'); print('PLUGIN-ERR', file=sys.stderr)\n"
        "os.write(1, b'PLUGIN-RAW-1\\n'); os.write(2, b'PLUGIN-RAW-2\\n')\n"
        "def VALIDATIONS():\n"
        "    print('PLUGIN-CALLED')\n"
        "    return []\n"
    )
    quiet = site(tmp_path / "quiet", good=GOOD)
    noisy = site(tmp_path / "noisy", good=GOOD, talks=talks)
    graph = plugin_project(tmp_path, "x = 1\n")
    for args in (("check", str(graph)), ("execute", str(graph))):
        expected = gategraph(quiet, tmp_path, *args)
        got = gategraph(noisy, tmp_path, *args)
        assert expected.returncode == got.returncode == 0, got.stdout + got.stderr
        assert _steady(got) == _steady(expected)
        assert "PLUGIN" not in got.stdout + got.stderr
    listed = gategraph(noisy, tmp_path, "tool", "list")
    assert "PLUGIN" not in listed.stdout + listed.stderr
    assert not left_out(listed, "talks")  # an empty declaration is a fine one


def test_a_plugin_that_hangs_is_left_out_after_the_timeout(tmp_path: Path) -> None:
    plugins = site(tmp_path, hangs="import time\ntime.sleep(3600)\n", zgood=GOOD)
    listed = gategraph(plugins, tmp_path, "tool", "list", env={"GATEGRAPH_PLUGIN_TIMEOUT": "1"})
    assert listed.returncode == 0, listed.stderr
    [line] = left_out(listed, "hangs")
    assert "did not answer within 1s (GATEGRAPH_PLUGIN_TIMEOUT sets the limit)" in line
    assert "no_todo (gg-hostile)" in listed.stdout
    assert len([ln for ln in listed.stdout.splitlines() if "plugin left out" in ln]) == 1


def test_a_declaration_that_is_not_plain_data_is_left_out(tmp_path: Path) -> None:
    plugins = site(
        tmp_path,
        aset="VALIDATIONS = {'no_todo'}\n",
        anobject="VALIDATIONS = [{'name': 'x', 'entrypoint': object()}]\n",
        keyed="VALIDATIONS = [{1: 'x'}]\n",
        deep="x = []\nVALIDATIONS = x\nfor _ in range(100):\n    x.append([]); x = x[0]\n",
        infinite="VALIDATIONS = [{'name': 'x', 'entrypoint': 'a:b', 'timeout': float('inf')}]\n",
        good=GOOD,
    )
    listed = gategraph(plugins, tmp_path, "tool", "list")
    assert listed.returncode == 0, listed.stderr
    for entry, said in (
        ("aset", "not plain data (JSON-like): it holds a value of type set"),
        ("anobject", "it holds a value of type object"),
        ("keyed", "a key that is not a string (int)"),
        ("deep", "nested more than 64 levels deep"),
        ("infinite", "it holds inf, which JSON cannot carry"),
    ):
        [line] = left_out(listed, entry)
        assert said in line, line
    assert "no_todo (gg-hostile)" in listed.stdout


def test_a_bad_plugin_timeout_says_so_and_the_default_holds(tmp_path: Path) -> None:
    plugins = site(tmp_path, good=GOOD)
    for value in ("soon", "-1", "nan"):
        listed = gategraph(
            plugins, tmp_path, "tool", "list", env={"GATEGRAPH_PLUGIN_TIMEOUT": value}
        )
        assert listed.returncode == 0, listed.stderr
        assert (
            f"plugin left out: GATEGRAPH_PLUGIN_TIMEOUT: must be a positive number of seconds, "
            f"not {value!r} (plugins get the default, 10)"
        ) in listed.stdout
        assert "no_todo (gg-hostile)" in listed.stdout


def test_nothing_of_a_plugin_is_loaded_by_help_or_import(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import gategraph.runtime\n"
        "from click.testing import CliRunner\n"
        "from gategraph.runtime._cli import cli\n"
        "assert CliRunner().invoke(cli, ['--help']).exit_code == 0\n"
        "print(sorted(m for m in sys.modules if 'plugin' in m))\n"
    )
    plugins = site(tmp_path, good=GOOD)
    done = run_process(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(plugins), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert done.stdout.strip() == "[]"


# -- in this process: the parent's side, against workers that misbehave ------------------------


@pytest.fixture
def hostile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    target = tmp_path / "written.txt"
    plugins = site(
        tmp_path,
        exits="import os\nos._exit(3)\n",
        good=GOOD,
        telltale=(
            "import os\n"
            "VALIDATIONS = [{'name': 'telltale', 'entrypoint': 'gg_hostile.checks:no_todo',\n"
            "    'description': 'key=' + os.environ.get('GATEGRAPH_TEST_SECRET', 'none')}]\n"
        ),
        writes=(
            "try:\n"
            f"    open({str(target)!r}, 'w').write('the plugin was here')\n"
            "except OSError as exc:\n"
            "    SAID = type(exc).__name__\n"
            "VALIDATIONS = [{'name': 'writer', 'entrypoint': 'gg_hostile.checks:no_todo',\n"
            "    'description': SAID}]\n"
        ),
    )
    monkeypatch.syspath_prepend(str(plugins))
    monkeypatch.setenv("GATEGRAPH_TEST_SECRET", SECRET)
    _plugins._load.cache_clear()
    yield target
    _plugins._load.cache_clear()


def test_one_worker_reads_every_declaration_that_does_not_end_it(
    hostile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []
    popen = subprocess.Popen

    def counted(command: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        started.append(command)
        return popen(command, **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "Popen", counted)
    names = [v.name for v in _plugins.plugin_validations()]
    assert names == ["no_todo", "telltale", "writer"]
    assert len(started) == 2  # the first, and a fresh one after `exits` ended it
    assert _plugins.plugin_validations() and len(started) == 2  # cached: read once


def test_without_the_kernel_sandbox_the_worker_is_guarded_and_stripped(
    hostile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = _kernel.Support(0, False, "x86_64", "the sandbox needs Landlock")
    monkeypatch.setattr(_kernel, "_support", missing)
    found = {v.name: v for v in _plugins.plugin_validations()}
    assert found["telltale"].description == "key=none"
    assert found["writer"].description == "ReadOnlyViolationError"
    assert not hostile.exists()
    [exits] = [p for p in _plugins.plugin_problems() if "'exits'" in p]
    assert exits.endswith("ended while reading it: it exited with status 3")


@pytest.mark.parametrize(
    ("worker", "said"),
    [
        ("print('garbage')", "reads declarations wrote what is not an answer: 'garbage'"),
        ("print('[1]')", "reads declarations wrote what is not an answer: '[1]'"),
        ('print(\'{"refused": "no  Landlock"}\')', "reads declarations refused: no Landlock"),
        ("print('{\"ready\": false}')", "reads declarations refused: it did not say it was ready"),
        ("raise SystemExit(4)", "reads declarations ended as it started: it exited with status 4"),
        (
            "import os, time\nos.close(1)\ntime.sleep(30)",
            "reads declarations closed its answers as it started and ran on",
        ),
        ("import time\ntime.sleep(30)", "reads declarations did not start within 0.5s"),
        ("print('{\"ready\": true}')\nprint('x' * (17 << 20), end='')", "longer than 16 MiB"),
        (
            'print(\'{"ready": true}\')\nprint(\'{"index": 1, "declared": []}\')',
            "reading its declaration wrote what is not an answer (of this entry point)",
        ),
        (
            'print(\'{"ready": true}\')\nprint(\'{"index": 0, "failed": 5}\')',
            "reading its declaration wrote what is not an answer (of this entry point)",
        ),
    ],
)
def test_a_worker_that_misbehaves_leaves_the_plugins_out(
    hostile: Path, monkeypatch: pytest.MonkeyPatch, worker: str, said: str
) -> None:
    monkeypatch.setattr(_plugins, "_COMMAND", "import sys\nsys.stdin.read()\n" + worker)
    monkeypatch.setattr(_plugins, "_START_TIMEOUT", 0.5)
    assert _plugins.plugin_validations() == []
    problems = _plugins.plugin_problems()
    assert problems and said in problems[0], problems
    assert all("plugin gg-hostile (entry point" in problem for problem in problems)


def test_a_worker_that_cannot_start_leaves_every_plugin_out(
    hostile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(hostile.parent / "no-python"))
    assert _plugins.plugin_validations() == []
    problems = _plugins.plugin_problems()
    assert len(problems) == 4
    assert all("no process could be started to read it (No such file" in p for p in problems)


# -- the worker's own side, measured although it runs confined ---------------------------------

# The worker's command with a coverage of its own around it (in memory: a confined worker
# cannot write the project's data file), handed back over a pipe once `main` returned.
_BOOT = """
import os
fd = os.environ.pop("GG_TEST_COVERAGE_FD", None)
cov = None
if fd is not None:
    import coverage
    config = os.environ.pop("GG_TEST_COVERAGE_CONFIG")
    cov = coverage.Coverage(data_file=None, config_file=":data:" + config)
    cov.start()
try:
    from gategraph.runtime._calls._plugin_worker import main
    main()
finally:
    if cov is not None:
        from gategraph.runtime._calls import _readonly
        cov.stop()
        # The worker's guard is over (unguarded() is gategraph's own code's, not this
        # harness's): the harness writes its coverage out.
        _readonly.release_process()
        _readonly.LEASE.set(None)
        view = memoryview(cov.get_data().dumps())
        while view:
            view = view[os.write(int(fd), view):]
"""


def _worker(folder: Path, request: dict[str, object]) -> list[dict[str, object]]:
    """Run the worker on ``request`` as gategraph does; its answers."""
    from gategraph.runtime._calls._sandbox import _PASSED_ON

    env = {k: v for k, v in os.environ.items() if k in _PASSED_ON}
    current = Coverage.current()
    passed: tuple[int, ...] = ()
    measured = bytearray()
    drain = None
    if current is not None:
        config = copy.copy(current.config)
        config.patch = []
        config.disable_warnings = [
            *config.disable_warnings,
            *("module-not-imported", "no-data-collected", "module-not-measured"),
        ]
        read_end, write_end = os.pipe()
        passed = (write_end,)
        env |= {"GG_TEST_COVERAGE_FD": str(write_end)}
        env |= {"GG_TEST_COVERAGE_CONFIG": str(config.serialize())}

        def read_all() -> None:
            with os.fdopen(read_end, "rb") as source:
                measured.extend(source.read())

        drain = threading.Thread(target=read_all)
        drain.start()
    try:
        done = subprocess.run(
            [sys.executable, "-P", "-c", _BOOT, str(folder)],
            input=json.dumps(request).encode(),
            capture_output=True,
            env=env,
            cwd=folder,
            pass_fds=passed,
            timeout=120,
            check=False,
        )
    finally:
        for fd in passed:
            os.close(fd)
        if drain is not None:
            drain.join(60)
    if current is not None and measured:
        data = CoverageData(no_disk=True)
        data.loads(bytes(measured))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CoverageWarning)
            current.get_data().update(data)
    assert done.stderr == b""
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize("confined", [True, False])
def test_the_worker_answers_each_declaration_in_order(tmp_path: Path, confined: bool) -> None:
    plugins = site(
        tmp_path,
        good=GOOD,
        raises="raise ImportError('broken  on\\npurpose')\n",
        aset="VALIDATIONS = {'x'}\n",
        talks="print('PLUGIN')\nVALIDATIONS = ()\n",
        called="def VALIDATIONS():\n    return [{'name': 'n', 'entrypoint': 'a:b'}]\n",
        unsayable=(
            "class E(Exception):\n    def __str__(self):\n        raise RuntimeError\nraise E\n"
        ),
    )
    for name, text in {
        "deep": "x = []\nVALIDATIONS = x\nfor _ in range(100):\n    x.append([]); x = x[0]\n",
        "infinite": "VALIDATIONS = [{'timeout': float('inf')}]\n",
        "keyed": "VALIDATIONS = [{1: 'x'}]\n",
        "models": (
            "def VALIDATIONS():\n    from gategraph.runtime import Validation\n"
            "    return [Validation.from_config({'name': 'm', 'entrypoint': 'a:b'})]\n"
        ),
    }.items():
        (plugins / "gg_hostile" / f"{name}.py").write_text(text)
    folder = tmp_path / "work"
    folder.mkdir()
    names = ["good", "raises", "aset", "talks", "called", "unsayable"]
    names += ["deep", "infinite", "keyed", "models"]
    confine = {"limits": dataclasses.asdict(SandboxLimits()), "hidden": []}
    request = {
        "path": [str(plugins), *sys.path],
        "confine": confine if confined else None,
        "entries": [[name, f"gg_hostile.{name}:VALIDATIONS"] for name in names],
    }
    answers = _worker(folder, request)
    assert answers[0] == {"ready": True}
    assert answers[1]["declared"] == [
        {
            "name": "no_todo",
            "description": "No TODO left in the folder.",
            "entrypoint": "gg_hostile.checks:no_todo",
            "resource_slots": ["root"],
        }
    ]
    assert answers[2] == {"index": 1, "failed": "ImportError: broken on purpose"}
    assert "it holds a value of type set" in str(answers[3]["failed"])
    assert answers[4] == {"index": 3, "declared": []}
    assert answers[5] == {"index": 4, "declared": [{"name": "n", "entrypoint": "a:b"}]}
    assert answers[6] == {"index": 5, "failed": "E: (its message cannot be shown)"}
    assert "nested more than 64 levels deep" in str(answers[7]["failed"])
    assert "it holds inf, which JSON cannot carry" in str(answers[8]["failed"])
    assert "a key that is not a string (int)" in str(answers[9]["failed"])
    [model] = answers[10]["declared"]  # type: ignore[misc]
    assert model["name"] == "m" and model["entrypoint"] == "a:b"
    assert len(answers) == 11


def test_a_worker_that_cannot_confine_itself_refuses(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    limits = {**dataclasses.asdict(SandboxLimits()), "open_files": 1}
    request = {"path": sys.path, "confine": {"limits": limits, "hidden": []}, "entries": []}
    [answer] = _worker(folder, request)
    assert "SandboxLimits.open_files must be at least 32" in str(answer["refused"])


def test_a_worker_that_ends_before_it_reads_its_request_leaves_the_plugins_out(
    hostile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request longer than a pipe holds: writing it meets the worker's end.
    monkeypatch.setattr(sys, "path", [*sys.path, "/" + "long" * (1 << 16)])
    monkeypatch.setattr(_plugins, "_COMMAND", "raise SystemExit(5)")
    assert _plugins.plugin_validations() == []
    problems = _plugins.plugin_problems()
    assert problems and "ended as it started: it exited with status 5" in problems[0], problems


def test_without_plugins_no_worker_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("a worker was started")

    monkeypatch.setattr(subprocess, "Popen", refused)
    _plugins._load.cache_clear()
    try:
        assert _plugins.plugin_validations() == [] and _plugins.plugin_problems() == []
    finally:
        _plugins._load.cache_clear()
