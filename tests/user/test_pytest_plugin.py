"""gategraph's pytest plugin, used as a user uses it: a project of their own with a test
module that takes the fixtures, run by ``python -m pytest`` in a process of its own
(gategraph installed, so the plugin loads by its entry point), and a plan graph whose
validations run as test items with ``--gategraph-graph``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from _helpers import write_tree

PAGE = (Path(__file__).parents[2] / "docs" / "ci.md").read_text(encoding="utf-8")
# The page's example test module, as a user copies it.
USER_TESTS = re.search(r"```py\n(# test_checks.py\n.*?)```", PAGE, re.DOTALL).group(1)  # type: ignore[union-attr]

GRAPH = """\
version: 1
name: project-gate
resources:
  project: {kind: directory, path: project}
validations:
  - name: todo-hint
    entrypoint: "gategraph.validators:regex"
    mode: informational
    resource_slots: [root]
nodes:
  - {id: syntax, validation: python_syntax}
  - id: no-fixme
    validation: regex
    arguments: {pattern: FIXME, files: '**/*.py'}
  - id: todos
    validation: todo-hint
    arguments: {pattern: TODO, files: '**/*.py'}
"""


def test_the_fixtures_and_a_graphs_validations_as_test_items(tmp_path: Path) -> None:
    folder = write_tree(
        tmp_path / "user",
        {
            "test_checks.py": USER_TESTS,
            "gates.yaml": GRAPH,
            "project/app.py": "x = 1  # TODO later\n",
            "project/b.py": "# FIXME now\n",
        },
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment["GATEGRAPH_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
            "--gategraph-graph", "gates.yaml", "--junitxml", "results.xml", "-q",
        ],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr  # no-fixme fails
    cases = {
        case.get("name"): [child.tag for child in case]
        for case in ET.parse(folder / "results.xml").getroot().iter("testcase")
    }
    assert cases == {
        "test_my_validation": [],
        "test_my_plan": [],
        "syntax": [],
        "no-fixme": ["failure"],
        "todos": ["skipped"],  # informational: shown, never a failure
    }, done.stdout
    assert "no-fixme: 1 forbidden match in files matching '**/*.py': b.py:1: # FIXME now" in (
        done.stdout
    )
    assert (folder / "project" / "b.py").read_text() == "# FIXME now\n"  # judged on a copy


def test_a_graph_item_finds_the_catalog_as_gategraph_execute_does(tmp_path: Path) -> None:
    """A validation registered in the catalog (GATEGRAPH_HOME's) is found by name."""
    folder = write_tree(
        tmp_path / "user",
        {
            "check.yaml": "version: 1\nname: cat\nresources:\n  repo: {kind: directory, path: repo}\n"
            "nodes:\n  - {id: mine, validation: house-rule}\n",
            "repo/a.py": "x = 1\n",
            "rule.yaml": "name: house-rule\nentrypoint: gategraph.runtime.testing:failing\n",
        },
    )
    environment = {**os.environ, "GATEGRAPH_HOME": str(tmp_path / "home")}
    added = subprocess.run(
        [sys.executable, "-m", "gategraph.runtime", "validation", "add", "--config", "rule.yaml"],
        cwd=folder, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--gategraph-graph", "check.yaml", "-q"],
        cwd=folder, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "mine: failed on purpose" in done.stdout


def test_a_graph_that_does_not_load_is_one_collection_error(tmp_path: Path) -> None:
    folder = write_tree(
        tmp_path / "user", {"bad.yaml": "version: 1\nname: x\nnodes: [{id: a, tool: nope}]\n"}
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--gategraph-graph", "bad.yaml", "-q"],
        cwd=folder, env={**os.environ, "GATEGRAPH_HOME": str(tmp_path / "home")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "bad.yaml:3:23: nodes[0].tool: unknown tool 'nope'" in done.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--gategraph-graph", "no.yaml"],
        cwd=folder, env={**os.environ, "GATEGRAPH_HOME": str(tmp_path / "home")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert missing.returncode == 4 and "--gategraph-graph no.yaml: no such file" in missing.stderr


def test_the_fixtures_in_this_suite(gategraph: Any, gategraph_home: Path) -> None:
    """The plugin is loaded here too (gategraph is installed): the tester validates, runs
    a plan with a scripted executor, reads its log, all in this test's own home."""
    assert os.environ["GATEGRAPH_HOME"] == str(gategraph_home)
    assert not gategraph.validate({"a.py": "def (:\n"}, ["python_syntax"]).passed
    project = gategraph_home / "project"
    project.mkdir()
    graph = (
        "version: 1\nname: fixture-plan\n"
        f"resources:\n  project: {{kind: directory, path: {project}}}\n"
        "nodes:\n  - {id: syntax, validation: python_syntax}\n"
    )
    outcome = gategraph.run_plan(graph, steps=[{"files": {"m.py": "x = 1\n"}}])
    assert outcome.status == "applied" and (project / "m.py").read_text() == "x = 1\n"
    events = gategraph.events(outcome.plan_id)
    assert type(events[0]).__name__ == "PlanStarted"
