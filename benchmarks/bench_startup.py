"""Start-up costs, each measured in fresh processes: importing ``gategraph.runtime`` and
running ``gategraph --help``.

    python benchmarks/bench_startup.py [--quick] [--repeat 10]

- ``import_ms``: ``import gategraph.runtime`` alone, timed inside a fresh interpreter
  (``python -c``), so the interpreter's own start-up is not counted. The package loads its
  names on first use, so also: ``import_engine_ms``, up to ``execute_graph`` being loaded
  (what ``from gategraph.runtime import execute_graph`` costs), and ``import_all_ms``, up
  to every public name being loaded;
- ``help_ms``: the whole ``gategraph --help`` process, from spawn to exit, timed by the
  parent (the console script next to this Python, else ``python -m gategraph.runtime``);
- ``python_ms``: ``python -c pass`` the same way, the floor under ``help_ms``;
- ``check_ms``: the whole ``gategraph check plan.yaml`` process, for a plan of a tool
  and a ``python_syntax`` node on a folder of one module;
- ``first_run_ms``: in a fresh interpreter, from ``import gategraph.runtime`` to the end of
  the first ``execute_graph`` of a graph of that one node (what an embedder's first call
  costs);
- ``run_ms``: the whole ``gategraph run plan.yaml`` process for a plan whose tool (the
  user's code: in the kernel sandbox, where there is one) adds a line to a module before
  that node judges it, and Apply writes it: the fixed cost of a plan, with next to no
  work in it.

One warm-up of each (the file cache), then the repeats, interleaved. Targets (issue 5):
import < 150 ms, ``--help`` < 300 ms; (issue 27) ``check`` within 5x ``python -c pass``,
the first ``execute_graph`` < 150 ms, ``gategraph run`` of a plan with no work in it
< 300 ms beyond the interpreter's start.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gategraph.benchmarks.harness import spread

if TYPE_CHECKING:
    from gategraph.benchmarks.harness import Settings

__all__ = ["help_command", "measure_startup"]

# `gategraph.runtime` loads its names on first use (PEP 562): the bare import is cheap and
# the engine is paid for when first touched. Both are measured, the second as a user's
# first real line would: `from gategraph.runtime import execute_graph`, then every name.
_IMPORT = (
    "import time; t = time.perf_counter(); import gategraph.runtime as r; "
    "a = time.perf_counter(); r.execute_graph; b = time.perf_counter(); "
    "[getattr(r, n) for n in r.__all__]; print(a - t, b - t, time.perf_counter() - t)"
)


_FIRST_RUN = (
    "import time; t = time.perf_counter(); import anyio; import gategraph.runtime as r; "
    "g = r.load_graph('first.yaml'); run = anyio.run(r.execute_graph, g); "
    "assert all(v.result.passed for v in run.validations), run; "
    "print(time.perf_counter() - t)"
)

# A plan with next to no work: a tool writes one module, one built-in check judges it.
_PLAN = """\
version: 1
name: startup
resources:
  repo: {kind: directory, path: repo}
tools:
  - name: edit
    description: Write one module.
    resource_slots: [{name: root, kind: directory}]
    code: |
      from pathlib import Path
      def run(root, **_):
          with open(Path(root, "new.py"), "a") as module:
              module.write("x = 1\\n")
          return {"files": ["new.py"]}
nodes:
  - {id: edit, tool: edit, resources: [repo]}
  - {id: syntax, validation: python_syntax, needs: [edit], resources: [repo]}
"""

# What an embedder's first call does: one built-in check of a folder.
_CHECK = """\
version: 1
name: first
resources:
  repo: {kind: directory, path: repo}
nodes:
  - {id: syntax, validation: python_syntax, resources: [repo]}
"""


def _plan_folder(home: str) -> str:
    """A folder holding ``plan.yaml`` and its resource ``repo`` (one module)."""
    folder = Path(home, "plan")
    (folder / "repo").mkdir(parents=True)
    (folder / "repo" / "app.py").write_text("y = 2\n")
    (folder / "plan.yaml").write_text(_PLAN)
    (folder / "first.yaml").write_text(_CHECK)
    return str(folder)


def _timed(code: str, env: dict[str, str], cwd: str) -> list[float]:
    """The times ``code`` prints, run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    return [float(word) for word in done.stdout.split()]


def _first_run(env: dict[str, str], cwd: str) -> float:
    return _timed(_FIRST_RUN, env, cwd)[-1]


def help_command() -> list[str]:
    """How to run ``gategraph --help`` as a user would: the installed console script."""
    folder = Path(sysconfig.get_path("scripts"))
    for name in ("gategraph", "gategraph.exe"):
        if (folder / name).is_file():
            return [str(folder / name), "--help"]
    found = shutil.which("gategraph")
    if found is not None and Path(found).resolve().parent == Path(sys.executable).resolve().parent:
        return [found, "--help"]
    return [sys.executable, "-m", "gategraph.runtime", "--help"]


def _wall(command: list[str], env: dict[str, str], cwd: str) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _import_times(env: dict[str, str], cwd: str) -> tuple[float, float, float]:
    bare, engine, everything = _timed(_IMPORT, env, cwd)
    return bare, engine, everything


def measure_startup(settings: Settings) -> dict[str, Any]:
    """Import and ``--help`` times over fresh processes: min / median / max, in ms."""
    repeats = settings.repeats or (3 if settings.quick else 10)
    help_cmd = help_command()
    with tempfile.TemporaryDirectory(prefix="gategraph-bench-") as home:
        # A neutral folder and home: nothing local shadows the installed package, and no
        # catalog of the user's is touched.
        env = {**os.environ, "GATEGRAPH_HOME": home}
        python = [sys.executable, "-c", "pass"]
        plan = _plan_folder(home)
        script = help_cmd[:-1]
        check = [*script, "check", "plan.yaml"]
        run = [*script, "run", "plan.yaml"]
        _import_times(env, home)
        _wall(help_cmd, env, home)
        _wall(python, env, home)
        _wall(check, env, plan)
        _first_run(env, plan)
        _wall(run, env, plan)
        imports: list[float] = []
        engines: list[float] = []
        everything: list[float] = []
        helps: list[float] = []
        pythons: list[float] = []
        checks: list[float] = []
        firsts: list[float] = []
        runs: list[float] = []
        for _ in range(repeats):
            bare, engine, whole = _import_times(env, home)
            imports.append(bare * 1000)
            engines.append(engine * 1000)
            everything.append(whole * 1000)
            helps.append(_wall(help_cmd, env, home) * 1000)
            pythons.append(_wall(python, env, home) * 1000)
            checks.append(_wall(check, env, plan) * 1000)
            firsts.append(_first_run(env, plan) * 1000)
            runs.append(_wall(run, env, plan) * 1000)
    python_median = spread(pythons)["median"]
    return {
        "repeats": repeats,
        "import_ms": spread(imports),
        "import_engine_ms": spread(engines),
        "import_all_ms": spread(everything),
        "help_ms": spread(helps),
        "python_ms": spread(pythons),
        "check_ms": spread(checks),
        "first_run_ms": spread(firsts),
        "run_ms": spread(runs),
        "check_vs_python": spread(checks)["median"] / python_median,
        "run_beyond_python_ms": spread(runs)["median"] - python_median,
        "help_command": " ".join(
            Path(help_cmd[0]).name if i == 0 else a for i, a in enumerate(help_cmd)
        ),
    }


if __name__ == "__main__":
    from gategraph.benchmarks.cli import main_for

    main_for("startup")
