"""`gategraph run` and `gategraph demo`: the supervisor from the command line."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner
from gategraph.runtime._cli import cli
from gategraph.runtime._storage._eventlog import read_events

DEMO = Path(__file__).resolve().parents[2] / "graphs" / "demo"


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
    assert (
        "applied — verdict attest, 2 round(s), 1 fix(es), 0 revision(s), 1 warning; "
        "read-only held by the in-process guard for 3\n"
    ) in out
    farewell = tmp_path / "gategraph-demo" / "project" / "src" / "farewell.py"
    assert farewell.read_text().startswith("def farewell(name):")
    # Running it again starts from a fresh copy.
    assert invoke(tmp_path, "demo")[0] == 0
    assert not (DEMO / "project" / "src" / "farewell.py").exists()


def test_informational_failures_are_warnings(tmp_path: Path) -> None:
    """The demo's informational TODO check is a `warn` line, never `FAIL`; the round that
    passes says it passed with a warning, and the table's RESULT is `warning`."""
    code, out, err = invoke(tmp_path, "demo", "--dir", str(tmp_path / "d"))
    assert code == 0, err
    lines = out.splitlines()
    todos = [line for line in lines if " todos: " in line and line.startswith("  ")]
    assert len(todos) == 2 and all(line.startswith("  warn todos: 1 forbidden") for line in todos)
    assert "FAIL todos" not in out
    assert any(line.startswith("  FAIL syntax: ") for line in lines)  # required: a failure
    assert "round 1: rejected at the semantic layer" in lines
    assert "round 2: every layer passed, with 1 warning" in lines
    (row,) = [line for line in lines if line.startswith("todos ")]
    assert row.split()[1:4] == ["validation", "(informational)", "warning"]
    (row,) = [line for line in lines if line.startswith("syntax ")]
    assert row.split()[1:4] == ["validation", "(required)", "passed"]


def test_demo_folder_that_cannot_be_made(tmp_path: Path) -> None:
    """A --dir that cannot be created is one error line, exit 2."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = invoke(tmp_path, "demo", "--dir", str(blocker / "sub"))
    assert code == 2, (out, err)
    assert err == f"error: --dir {blocker / 'sub'}: cannot make the demo folder: Not a directory\n"
    assert out == ""


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
    # The finding's file and line, where code-scanning tools show it.
    (location,) = results[0]["locations"]
    assert location["physicalLocation"]["artifactLocation"]["uri"] == "src/farewell.py"
    assert location["physicalLocation"]["region"]["startLine"] == 2


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


def test_an_existing_plan_id_is_refused_up_front(tmp_path: Path) -> None:
    """Reusing a plan id is refused before anything runs or prints: exit 2, one line naming
    the way to continue the plan; its log gets no event and the second copy stays as it was."""
    copy = demo_copy(tmp_path)
    assert invoke(tmp_path, "run", str(copy / "plan.yaml"), "--plan-id", "P1")[0] == 0
    before = read_events(tmp_path / "events.db", "P1")
    again = demo_copy(tmp_path / "again")
    code, out, err = invoke(tmp_path, "run", str(again / "plan.yaml"), "--plan-id", "P1")
    assert code == 2, (out, err)
    assert out == ""  # no "started"
    assert err == (
        f"error: plan P1 exists already in {tmp_path / 'events.db'}: continue it with "
        "`gategraph resume P1`, or pick another --plan-id\n"
    )
    assert read_events(tmp_path / "events.db", "P1") == before
    assert not (again / "project" / "src" / "farewell.py").exists()


def test_an_empty_plan_id_is_a_usage_error(tmp_path: Path) -> None:
    """`--plan-id ''` is not silently replaced by a new id."""
    copy = demo_copy(tmp_path)
    code, out, err = invoke(tmp_path, "run", str(copy / "plan.yaml"), "--plan-id", "")
    assert (code, out, err) == (2, "", "error: --plan-id: must not be empty\n")
    assert not (copy / "project" / "src" / "farewell.py").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_report_that_cannot_be_written_after_the_run(tmp_path: Path) -> None:
    """A report that fails to write is one error line (exit 2) after the outcome is shown."""
    copy = demo_copy(tmp_path)
    code, out, err = invoke(
        tmp_path, "run", str(copy / "plan.yaml"), "--report", "junit", "/dev/full"
    )
    assert code == 2, (out, err)
    assert "applied — verdict attest" in out
    assert err == "error: --report: cannot write /dev/full: No space left on device\n"


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
    # Found by the graph's check, with its position, before the plan starts.
    assert err.startswith(f"error: {plan}:51:11: lifecycle.executor.uses: cannot import")
    assert len(err.strip().splitlines()) == 1


def test_execute_reports_a_failed_work_node_and_leaves_no_stale_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A work node that fails (and the validation it held back) is in the report as an
    error, so CI never shows a broken run as green; a run stopped by a usage error leaves
    no earlier report behind to be uploaded as this one's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "repo").mkdir()
    (tmp_path / "g.yaml").write_text(
        "version: 1\nname: broken-work\n"
        "resources:\n  repo: {kind: directory, path: repo}\n"
        "tools:\n  - {name: boom, code: \"def run(**_):\\n    raise ValueError('no')\\n\"}\n"
        "nodes:\n  - {id: work, tool: boom}\n"
        "  - {id: syntax, validation: python_syntax, needs: [work]}\n"
    )
    done = CliRunner().invoke(cli, ["execute", "g.yaml", "--report", "junit", "out.xml"])
    assert done.exit_code == 1, done.output
    suite = ET.parse(tmp_path / "out.xml").getroot()
    assert (suite.get("tests"), suite.get("errors")) == ("2", "2")
    errors = {c.get("name"): c.find("error").get("message") for c in suite.iter("testcase")}  # type: ignore[union-attr]
    assert "ValueError: no" in errors["work"] and errors["syntax"]
    done = CliRunner().invoke(cli, ["execute", "g.yaml", "--report", "sarif", "out.sarif"])
    results = json.loads((tmp_path / "out.sarif").read_text())["runs"][0]["results"]
    assert {r["ruleId"] for r in results} == {"gategraph.node"}
    assert any(r["message"]["text"].startswith("work: ") for r in results)
    done = CliRunner().invoke(cli, ["execute", "nope.yaml", "--report", "sarif", "out.xml"])
    assert done.exit_code == 2 and not (tmp_path / "out.xml").exists()
