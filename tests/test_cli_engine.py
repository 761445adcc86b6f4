"""`gategraph execute` and `gategraph events`: the engine from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from gategraph.runtime._cli import cli

GRAPHS = Path(__file__).resolve().parents[1] / "graphs"


def run(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--catalog", str(tmp_path / "c.db"), *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("example", sorted(p.name for p in GRAPHS.glob("*.yaml")))
def test_examples_execute_from_the_cli(tmp_path: Path, example: str) -> None:
    """Every example graph runs end to end and passes; its events can be read back."""
    code, out, err = run(tmp_path, "execute", str(GRAPHS / example), "--plan-id", "p1")
    assert code == 0, err
    assert "plan p1: passed" in out
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
