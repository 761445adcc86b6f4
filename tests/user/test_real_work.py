"""Real work, as a team runs it: a project checkout as it is on disk (a ``.venv`` whose
interpreter is a link out of the tree), its own test suite, run by the command line in a
process of its own."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from _helpers import run_gategraph, suite_plan
from gategraph.runtime._base._kernel import support

pytestmark = pytest.mark.timeout(180)

_PYTEST = """\
import json
import os

def test_writes_beside_itself():
    # A suite that writes where it runs (a cache, a build output): on the copy only.
    with open("written.txt", "w") as out:
        out.write("x")
    assert os.path.islink(".venv/bin/python")
"""
_UNITTEST = """\
import json
import os
import unittest

class T(unittest.TestCase):
    def test_writes_beside_itself(self):
        with open("written.txt", "w") as out:
            out.write("x")
        self.assertTrue(os.path.islink(".venv/bin/python"))
"""


def _checkout(root: Path) -> Path:
    """A project as uv or ``python -m venv .venv`` leaves it: a link out of the tree."""
    (root / "tests").mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "tests" / "test_pytest_style.py").write_text(_PYTEST)
    (root / "tests" / "test_unittest_style.py").write_text(_UNITTEST)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    (root / ".venv" / "lib").symlink_to("/usr/lib")  # a link to a folder, out of the tree
    return root


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): os.readlink(p) if p.is_symlink() else p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.mark.parametrize("validation", ["pytest_suite", "unittest_suite"])
@pytest.mark.parametrize("isolation", [None, "process", "thread"])
def test_a_checkout_with_a_venv_link_passes_its_test_suite(
    tmp_path: Path, validation: str, isolation: str | None
) -> None:
    """The suite runs on a copy (in the kernel sandbox: a copy-on-write view) that keeps
    the links as links, never followed out of the tree; the checkout is left as it was."""
    if isolation is None and support().missing is not None:
        pytest.skip(f"no sandbox here: {support().missing}")
    project = _checkout(tmp_path / "project")
    before = _files(project)
    held = f", isolation: {isolation}" if isolation else ""
    plan = suite_plan(tmp_path, project, validation + held)
    done = run_gategraph(tmp_path / "home", "execute", "--in-place", str(plan), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "passed" in done.stdout
    assert _files(project) == before


_SHARED_NAME = """\
import time

def test_writes_{n}():
    # Both shards write the same file at once: each in a view of its own, or they clash.
    with open("written.txt", "w") as out:
        out.write("{n}")
    time.sleep(0.5)
    with open("written.txt") as back:
        assert back.read() == "{n}"
"""


def test_a_suite_runs_in_a_shard_per_core_by_default_each_in_a_view_of_its_own(
    tmp_path: Path,
) -> None:
    """In the kernel sandbox, copies cost nothing: the suite runs in one pytest per core,
    each on a view of its own, so two shards writing the same file never meet."""
    if support().missing is not None:
        pytest.skip(f"no sandbox here: {support().missing}")
    cores = os.cpu_count() or 1
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    for n in range(max(2, cores)):
        (project / "tests" / f"test_{n}.py").write_text(_SHARED_NAME.format(n=n))
    plan = suite_plan(tmp_path, project, "pytest_suite")
    done = run_gategraph(tmp_path / "home", "execute", "--json", str(plan), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    [node] = json.loads(done.stdout)["nodes"]
    data = node["output"]["data"]
    assert data["shards"] == cores
    assert data["tests_passed"] == max(2, cores)


_SCOPED_PLAN = """\
version: 1
name: scoped
resources:
  repo: {{kind: directory, path: "{project}"}}
tools:
  - name: edit
    description: Write a module.
    resource_slots: [{{name: root, kind: directory}}]
    code: |
      from pathlib import Path
      def run(root, **_):
          Path(root, "pkg", "new.py").write_text("x = 1\\n")
          return {{"files": ["pkg/new.py"]}}
validations:
  - name: told
    description: What the change touched, as the call's context tells it.
    resource_slots: [{{name: root, kind: directory}}]
    code: |
      def run(root, context, **_):
          changed = context.changed(root)
          return {{"passed": True, "message": "ok", "data": {{"changed": sorted(changed or ["?"])}}}}
nodes:
  - {{id: edit, tool: edit, resources: [repo]}}
  - {{id: syntax, validation: python_syntax, needs: [edit], resources: [repo]{held}}}
  - {{id: told, validation: told, needs: [edit], resources: [repo]{held}}}
"""


@pytest.mark.parametrize("isolation", [None, "process", "thread", "sandbox"])
def test_a_plan_parses_only_what_its_change_touched(tmp_path: Path, isolation: str | None) -> None:
    """A project whose old code does not all parse (a file nobody touches): the plan's
    change is judged, not what was there before it; every way a call runs is told the
    same change."""
    if isolation == "sandbox" and support().missing is not None:
        pytest.skip(f"no sandbox here: {support().missing}")
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "legacy.py").write_text("def (\n")
    (project / "pkg" / "ok.py").write_text("y = 2\n")
    held = f", isolation: {isolation}" if isolation else ""
    plan = tmp_path / "plan.yaml"
    plan.write_text(_SCOPED_PLAN.format(project=project, held=held))
    done = run_gategraph(tmp_path / "home", "run", "--json", str(plan), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    found = {v["node"]: v["result"] for v in report["validations"]}
    assert found["syntax"]["message"] == "1 changed file parses"
    assert found["syntax"]["data"]["scope"] == "change"
    assert found["told"]["data"]["changed"] == ["pkg/new.py"]
    assert (project / "pkg" / "new.py").read_text() == "x = 1\n"
