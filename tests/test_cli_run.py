"""`gategraph run` and `gategraph demo`: the supervisor from the command line."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from gategraph.runtime._cli import cli

DEMO = Path(__file__).resolve().parents[1] / "graphs" / "demo"


def invoke(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--catalog", str(tmp_path / "c.db"), *args])
    return result.exit_code, result.stdout, result.stderr


def demo_copy(tmp_path: Path) -> Path:
    target = tmp_path / "demo"
    shutil.copytree(DEMO, target)
    return target


def test_demo_fixes_and_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gategraph demo` copies the demo, a required failure is fixed, the change is applied."""
    monkeypatch.chdir(tmp_path)
    code, out, err = invoke(tmp_path, "demo")
    assert code == 0, err
    assert "rejected at the semantic layer" in out
    assert "fix: the rejection goes back to the executor" in out
    assert "applied — verdict attest, 2 round(s), 1 fix(es)" in out
    farewell = tmp_path / "gategraph-demo" / "project" / "src" / "farewell.py"
    assert farewell.read_text().startswith("def farewell(name):")
    # Running it again starts from a fresh copy.
    assert invoke(tmp_path, "demo")[0] == 0
    assert not (DEMO / "project" / "src" / "farewell.py").exists()


def test_demo_refuses_a_foreign_folder(tmp_path: Path) -> None:
    """The demo never overwrites a folder it did not make."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("keep")
    code, _, err = invoke(tmp_path, "demo", "--dir", str(mine))
    assert code == 1 and "not a gategraph demo folder" in err
    assert (mine / "keep.txt").read_text() == "keep"


def test_run_json_reports_and_events(tmp_path: Path) -> None:
    """--json prints the outcome; --report writes JUnit or SARIF; the events are readable."""
    copy = demo_copy(tmp_path)
    junit = tmp_path / "report.xml"
    code, out, err = invoke(
        tmp_path, "run", str(copy / "plan.yaml"), "--json", "--report", "junit", str(junit)
    )
    assert code == 0, err
    outcome = json.loads(out)
    assert outcome["status"] == "applied" and outcome["plan_id"]
    assert [a["retryDecision"] for a in outcome["attempts"]] == ["fix", "attested"]
    assert outcome["statistics"]["rounds"] == 2
    assert "round 1: validating" in err  # progress goes to stderr with --json
    suite = ET.parse(junit).getroot()
    assert suite.tag == "testsuite" and suite.get("tests") == "3" and suite.get("failures") == "0"
    code, events, _ = invoke(tmp_path, "events", outcome["plan_id"])
    assert code == 0 and "plan_finished" in events and "fix_requested" in events

    sarif = tmp_path / "report.sarif"
    second = demo_copy(tmp_path / "again")
    code, out, err = invoke(
        tmp_path, "run", str(second / "plan.yaml"), "--report", "sarif", str(sarif)
    )
    assert code == 0, err
    document = json.loads(sarif.read_text())
    assert document["version"] == "2.1.0"
    results = document["runs"][0]["results"]
    assert [r["level"] for r in results] == ["note"]  # the informational TODO finding


def test_run_waiting_for_a_decision_exits_3(tmp_path: Path) -> None:
    """A plan that cannot be fixed and has no person to ask pauses with exit code 3."""
    copy = demo_copy(tmp_path)
    plan = copy / "plan.yaml"
    text = plan.read_text()
    # Keep only the broken step: the executor never fixes anything.
    text = text[
        : text.index(
            "        - files:\n            src/farewell.py: |\n              def farewell(name):"
        )
    ]
    plan.write_text(text + "policy:\n  retry_limit: 1\n  strategy_revisions: 0\n")
    code, out, _ = invoke(tmp_path, "run", str(plan))
    assert code == 3
    assert "awaiting_decision" in out and "gategraph decide" in out
    assert not (copy / "project" / "src" / "farewell.py").exists()


def test_run_on_another_folder(tmp_path: Path) -> None:
    """--resource NAME=FOLDER runs the plan on that folder instead of the graph's."""
    copy = demo_copy(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(copy / "project", elsewhere)
    code, _, err = invoke(
        tmp_path, "run", str(copy / "plan.yaml"), "--resource", f"project={elsewhere}"
    )
    assert code == 0, err
    assert (elsewhere / "src" / "farewell.py").exists()
    assert not (copy / "project" / "src" / "farewell.py").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--resource", "project"], "expected NAME=FOLDER"),
        (["--resource", "project=/no/such/folder"], "no such folder"),
        (["--resource", "other=."], "not resources of the graph: other"),
        (["--report", "pdf", "x"], "'pdf' is not one of"),
    ],
)
def test_run_bad_input(tmp_path: Path, args: list[str], message: str) -> None:
    """Bad run arguments are one error line and exit code 2; nothing runs."""
    copy = demo_copy(tmp_path)
    code, out, err = invoke(tmp_path, "run", str(copy / "plan.yaml"), *args)
    assert code == 2, (out, err)
    assert message in err and "Traceback" not in err
    assert not (copy / "project" / "src" / "farewell.py").exists()


def test_runtime_faults_are_one_line(tmp_path: Path) -> None:
    """Reusing a plan id is refused in one line (exit 1), not with a traceback."""
    copy = demo_copy(tmp_path)
    assert invoke(tmp_path, "run", str(copy / "plan.yaml"), "--plan-id", "P1")[0] == 0
    again = demo_copy(tmp_path / "again")
    code, out, err = invoke(tmp_path, "run", str(again / "plan.yaml"), "--plan-id", "P1")
    assert code == 1, (out, err)
    assert err.startswith("error: ") and "Traceback" not in err + out


def test_report_folder_is_checked_before_running(tmp_path: Path) -> None:
    """A report path in a missing folder is refused before the plan runs."""
    copy = demo_copy(tmp_path)
    code, _, err = invoke(
        tmp_path,
        "run",
        str(copy / "plan.yaml"),
        "--report",
        "junit",
        str(tmp_path / "no" / "r.xml"),
    )
    assert code == 2 and "no such folder" in err
    assert not (copy / "project" / "src" / "farewell.py").exists()


def test_unloadable_executor_names_file_and_field(tmp_path: Path) -> None:
    """A lifecycle executor that cannot be imported is one line naming the file and field."""
    copy = demo_copy(tmp_path)
    plan = copy / "plan.yaml"
    plan.write_text(
        plan.read_text().replace(
            "gategraph.runtime.testing:ScriptedExecutor", "gg_no_such_module:Executor"
        )
    )
    code, out, err = invoke(tmp_path, "run", str(plan))
    assert code == 2, (out, err)
    assert err.startswith(f"error: {plan}: lifecycle.executor.uses: cannot import")
    assert len(err.strip().splitlines()) == 1
