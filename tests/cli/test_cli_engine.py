"""`gategraph execute` and `gategraph events`: the engine from the command line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import run_process
from click.testing import CliRunner
from gategraph.runtime._cli import cli

GRAPHS = Path(__file__).resolve().parents[2] / "graphs"


def run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--catalog", str(tmp_path / "c.db"), *args])
    return result.exit_code, result.stdout, result.stderr


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by relative path, with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.mark.parametrize("example", sorted(p.name for p in GRAPHS.glob("*.yaml")))
def test_examples_execute_from_the_cli(tmp_path: Path, example: str) -> None:
    """Every example graph runs end to end and passes, on copies of its folders (which stay
    as they were); its events can be read back."""
    before = tree(GRAPHS)
    code, out, err = run(tmp_path, "execute", str(GRAPHS / example), "--plan-id", "p1")
    assert code == 0, err
    assert out.startswith("working on temporary copies of ")
    assert "plan p1: passed" in out
    assert tree(GRAPHS) == before
    assert (tmp_path / "events.db").exists()
    assert not (tmp_path / "c.db").exists()  # running never creates the catalog
    code, out, err = run(tmp_path, "events", "p1")
    assert code == 0, err
    lines = out.splitlines()
    assert "run_started" in lines[0] and "run_finished" in lines[-1]
    assert any("validation_completed" in line for line in lines)


def test_execute_json_and_failure_exit_code(tmp_path: Path) -> None:
    """--json prints the run; a required failure exits 1."""
    graph = tmp_path / "g.yaml"
    graph.write_text(
        "version: 1\nname: g\n"
        "validations:\n"
        "  - {name: bad, entrypoint: 'gategraph.runtime.testing:failing'}\n"
        "  - {name: ok, entrypoint: 'gategraph.runtime.testing:passing'}\n"
        "nodes:\n  - {id: a, validation: bad}\n  - {id: b, validation: ok}\n"
    )
    code, out, err = run(tmp_path, "execute", str(graph), "--json", "--max-concurrency", "1")
    assert code == 1, err
    data = json.loads(out)
    assert data["passed"] is False
    assert {v["node"]: v["result"]["passed"] for v in data["validations"]} == {
        "a": False,
        "b": True,
    }
    code, out, _ = run(tmp_path, "events", data["plan_id"], "--json")
    assert code == 0
    assert [e["seq"] for e in json.loads(out)] == list(range(1, 7))
    code, out, _ = run(tmp_path, "execute", str(graph))
    assert code == 1 and "FAILED" in out and "failed on purpose" in out


def test_execute_runs_attachments(tmp_path: Path) -> None:
    """Validations attached to the graph's resources in the catalog run with the graph."""
    config = tmp_path / "v.yaml"
    config.write_text("name: att\nentrypoint: gategraph.runtime.testing:failing\n")
    assert run(tmp_path, "validation", "add", "--config", str(config))[0] == 0
    assert run(tmp_path, "validation", "attach", "repo", "att")[0] == 0
    code, out, _ = run(tmp_path, "execute", str(GRAPHS / "demo-review.yaml"))
    assert code == 1
    assert "attachment:" in out and "failed on purpose" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["execute", "missing.yaml"], "missing.yaml: no such file"),
        (["events", "nope"], "no event log here"),
        (["execute", "GRAPH", "--max-concurrency", "0"], "0 is not in the range"),
    ],
)
def test_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    """Bad input is one error line and exit code 2."""
    args = [str(GRAPHS / "release-check.yaml") if a == "GRAPH" else a for a in args]
    code, out, err = run(tmp_path, *args)
    assert code == 2
    assert message in err
    assert "Traceback" not in err + out


def test_events_unknown_plan(tmp_path: Path) -> None:
    """Asking for a plan the log does not hold is a clear error."""
    run(tmp_path, "execute", str(GRAPHS / "release-check.yaml"))
    code, _, err = run(tmp_path, "events", "no-such-plan")
    assert code == 2 and "no events for plan 'no-such-plan'" in err


WRITER = """\
version: 1
name: writer
resources:
  proj: {kind: directory, path: proj}
tools:
  - name: write
    capability: {writes: true}
    resource_slots: [{name: root, kind: directory}]
    code: |
      from pathlib import Path
      def run(root, **_):
          Path(root, "new.txt").write_text("hi")
          Path(root, "a.py").write_text("x = 2\\n")
          return {"wrote": True}
nodes:
  - {id: w, tool: write}
"""


def writer(tmp_path: Path) -> Path:
    """A graph whose one work node adds and changes files of its folder ``proj``."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "a.py").write_text("x = 1\n")
    graph = tmp_path / "g.yaml"
    graph.write_text(WRITER)
    return graph


def gategraph(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a real process, with its own GATEGRAPH_HOME and TMPDIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEGRAPH_")}
    env.update(GATEGRAPH_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return run_process([sys.executable, "-m", "gategraph.runtime", *args], env=env)


def test_execute_works_on_copies_by_default(tmp_path: Path) -> None:
    """By default the work writes into temporary copies, which are removed afterwards: the
    real folder and TMPDIR are as before, and the output says what the copies got."""
    graph = writer(tmp_path)
    done = gategraph(tmp_path, "execute", str(graph), "--plan-id", "x1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "working on temporary copies of proj (removed afterwards; --in-place works on the "
        "real folders)"
    )
    assert lines[-1] == (
        "changes made in the copies, now removed (your folders are untouched): "
        "proj: 1 added, 1 modified, 0 deleted"
    )
    assert tree(tmp_path / "proj") == {"a.py": b"x = 1\n"}
    assert list((tmp_path / "tmp").iterdir()) == []
    assert done.stderr == ""


def test_execute_in_place_changes_the_real_folder(tmp_path: Path) -> None:
    """--in-place runs on the real folder, and says so."""
    graph = writer(tmp_path)
    done = gategraph(tmp_path, "execute", str(graph), "--in-place")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"working in place on the real folders: proj ({tmp_path / 'proj'})"
    assert not any("copies" in line for line in lines)
    assert tree(tmp_path / "proj") == {"a.py": b"x = 2\n", "new.txt": b"hi"}
    assert list((tmp_path / "tmp").iterdir()) == []


def test_execute_json_says_where_it_ran(tmp_path: Path) -> None:
    """--json prints only JSON: whether it ran in place, and the copies' changes."""
    graph = writer(tmp_path)
    code, out, err = run(tmp_path, "execute", str(graph), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["in_place"] is False
    assert [(c["path"], c["kind"]) for c in data["changes"]["proj"]] == [
        ("a.py", "modified"),
        ("new.txt", "added"),
    ]
    assert tree(tmp_path / "proj") == {"a.py": b"x = 1\n"}
    code, out, err = run(tmp_path, "execute", str(graph), "--json", "--in-place")
    assert code == 0, err
    data = json.loads(out)
    assert (data["in_place"], data["changes"]) == (True, None)
    assert (tmp_path / "proj" / "new.txt").exists()


def test_execute_refuses_a_used_plan_id(tmp_path: Path) -> None:
    """A --plan-id the log has already is refused before anything runs: exit 2, one line."""
    log = tmp_path / "events.db"
    assert run(tmp_path, "execute", str(GRAPHS / "release-check.yaml"), "--plan-id", "e1")[0] == 0
    code, out, err = run(tmp_path, "execute", str(GRAPHS / "release-check.yaml"), "--plan-id", "e1")
    assert (code, out) == (2, "")
    assert err == (
        f"error: plan id e1 is taken already in {log} (by a `gategraph execute` run): "
        "pick another --plan-id\n"
    )
    demo = tmp_path / "demo"
    shutil.copytree(GRAPHS / "demo", demo)
    assert run(tmp_path, "run", str(demo / "plan.yaml"), "--plan-id", "r1")[0] == 0
    code, out, err = run(tmp_path, "execute", str(demo / "plan.yaml"), "--plan-id", "r1")
    assert (code, out) == (2, "")
    assert err == (
        f"error: plan r1 exists already in {log}: continue it with `gategraph resume r1`, "
        "or pick another --plan-id\n"
    )


def test_execute_shows_informational_failures_as_warnings(tmp_path: Path) -> None:
    """A failed informational validation is a `warning` in the table and passes the run."""
    graph = tmp_path / "g.yaml"
    graph.write_text(
        "version: 1\nname: g\n"
        "validations:\n"
        "  - {name: meh, entrypoint: 'gategraph.runtime.testing:failing', mode: informational}\n"
        "  - {name: bad, entrypoint: 'gategraph.runtime.testing:failing'}\n"
        "nodes:\n  - {id: a, validation: meh}\n"
    )
    code, out, err = run(tmp_path, "execute", str(graph), "--plan-id", "w1")
    assert code == 0, err
    lines = out.splitlines()
    (row,) = [line for line in lines if line.startswith("a ")]
    assert row.split()[1:4] == ["validation", "(informational)", "warning"]
    assert lines[-1].startswith("plan w1: passed — 1 validations, 0 required failing, 1 warning, ")
    graph.write_text(graph.read_text() + "  - {id: b, validation: bad}\n")
    code, out, err = run(tmp_path, "execute", str(graph), "--plan-id", "w2")
    assert code == 1, err
    (row,) = [line for line in out.splitlines() if line.startswith("b ")]
    assert row.split()[1:4] == ["validation", "(required)", "failed"]


@pytest.mark.parametrize("module", ["gategraph.runtime", "gategraph.runtime._cli"])
def test_a_process_isolated_validation_runs_under_either_python_m(
    tmp_path: Path, module: str
) -> None:
    """A worker process loads the parent's main module again: under `python -m` of either
    package it must not start a second command line there."""
    graph = tmp_path / "g.yaml"
    graph.write_text(
        "version: 1\nname: g\n"
        "validations:\n"
        "  - {name: ok, entrypoint: 'gategraph.runtime.testing:passing'}\n"
        "nodes:\n  - {id: n, validation: ok, isolation: process}\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATEGRAPH_")}
    env["GATEGRAPH_HOME"] = str(tmp_path / "home")
    done = run_process(
        [sys.executable, "-m", module, "execute", str(graph)], env=env, cwd=tmp_path, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plan " in done.stdout and ": passed" in done.stdout
