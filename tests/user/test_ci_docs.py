"""docs/ci.md as a user follows it: its graph gates a scratch repository, its GitHub
Actions workflow's steps run as the runner would run them (the SARIF file they write is
the one the upload step names), and its pre-commit configurations run under a real
``pre-commit run``: the local hooks as written, and the hooks this repository defines
(``.pre-commit-hooks.yaml``), named as a ``repo:`` at this checkout's HEAD, which
pre-commit clones and installs into an environment of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _helpers import git

ROOT = Path(__file__).parents[2]
PAGE = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```yaml\n(.*?)```", PAGE, re.DOTALL)
GRAPH, WORKFLOW, LOCAL_HOOKS, REPO_HOOKS = BLOCKS
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(600)


def repository(tmp_path: Path, hooks: str | None = None) -> Path:
    """A scratch git repository with the page's graph (and ``hooks`` as its pre-commit
    configuration), one good module committed."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "app.py").write_text("x = 1\n")
    (repo / "gategraph.yaml").write_text(GRAPH)
    if hooks is not None:
        (repo / ".pre-commit-config.yaml").write_text(hooks)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    return repo


def environment(repo: Path, **extra: str) -> dict[str, str]:
    found = {**os.environ, "GATEGRAPH_HOME": str(repo.parent / "home"), **extra}
    # The installed gategraph, as a user's shell finds it.
    found["PATH"] = f"{BIN}{os.pathsep}{found.get('PATH', '')}"
    return found


def test_the_workflow_writes_the_report_its_upload_step_names(tmp_path: Path) -> None:
    workflow = yaml.safe_load(WORKFLOW)
    assert workflow["permissions"]["security-events"] == "write"
    steps = workflow["jobs"]["gate"]["steps"]
    upload = next(s for s in steps if s.get("uses", "").startswith("github/codeql-action/"))
    assert upload["uses"] == "github/codeql-action/upload-sarif@v3"
    assert upload["if"] == "always()"  # the findings of a failed gate are the ones wanted
    commands = [s["run"] for s in steps if "run" in s]
    assert commands[0] == 'python -m pip install "$GATEGRAPH"'  # this suite has it already
    repo = repository(tmp_path)
    (repo / "src" / "bad.py").write_text("x = 1\ndef broken(:\n")
    (repo / "src" / "later.py").write_text("# FIXME: one day\n")

    def steps_run() -> subprocess.CompletedProcess[str]:
        # As the runner runs a step: bash, in the checkout, with the workflow's env.
        return subprocess.run(
            ["bash", "-e", "-c", "\n".join(commands[1:])],
            cwd=repo,
            env=environment(repo, **workflow["env"]),
            capture_output=True,
            text=True,
            timeout=300,
        )

    done = steps_run()
    assert done.returncode == 1, done.stdout + done.stderr  # the gate fails the job
    report = json.loads((repo / upload["with"]["sarif_file"]).read_text())
    assert report["version"] == "2.1.0" and report["runs"][0]["tool"]["driver"]["name"]
    results = {r["ruleId"]: r for r in report["runs"][0]["results"]}
    assert results["python_syntax"]["level"] == "error"
    (where,) = results["python_syntax"]["locations"]
    assert where["physicalLocation"] == {
        "artifactLocation": {"uri": "src/bad.py"},
        "region": {"startLine": 2},
    }
    assert results["regex"]["level"] == "error"
    assert results["regex"]["locations"][0]["physicalLocation"]["artifactLocation"] == {
        "uri": "src/later.py"
    }
    (repo / "src" / "bad.py").write_text("x = 1\n")
    (repo / "src" / "later.py").unlink()
    done = steps_run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((repo / "gategraph.sarif").read_text())["runs"][0]["results"] == []
    # Nothing written into the checkout but the report.
    listed = {line[3:] for line in git(repo, "status", "--porcelain").splitlines()}
    assert listed == {"gategraph.sarif", "src/bad.py"}


def pre_commit(repo: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run"],
        cwd=repo,
        env=environment(repo, PRE_COMMIT_HOME=str(cache)),
        capture_output=True,
        text=True,
        timeout=540,
    )


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """pre-commit's own cache, shared by the module's runs: it installs gategraph once."""
    if os.environ.get("GATEGRAPH_REQUIRE_PRECOMMIT") != "1":
        pytest.importorskip("pre_commit", reason="pre-commit is not installed")
    return tmp_path_factory.mktemp("pre-commit-cache")


def _head() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip("this checkout is not a git repository")
    return done.stdout.strip()


@pytest.mark.parametrize("hooks", ["local", "repo"])
def test_pre_commit_stops_a_commit_whose_staged_change_fails(
    hooks: str, tmp_path: Path, cache: Path
) -> None:
    """Both configurations of the page: a staged module that does not parse stops the
    commit even with its fix unstaged; a good one passes; a broken plan graph staged is
    named with its line."""
    if hooks == "local":
        config = LOCAL_HOOKS
    else:
        assert "repo: https://…/gategraph" in REPO_HOOKS and "rev: TAG" in REPO_HOOKS
        config = REPO_HOOKS.replace("https://…/gategraph", str(ROOT)).replace("TAG", _head())
    repo = repository(tmp_path, config)
    (repo / "src" / "bad.py").write_text("def broken(:\n")
    git(repo, "add", "src/bad.py")
    (repo / "src" / "bad.py").write_text("def mended():\n    pass\n")  # not staged
    done = pre_commit(repo, cache)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "src/bad.py:1: invalid syntax" in done.stdout
    assert (repo / "src" / "bad.py").read_text() == "def mended():\n    pass\n"  # put back
    git(repo, "add", "src/bad.py")
    done = pre_commit(repo, cache)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = repo / "checks" / "plan.yaml"
    broken.parent.mkdir()
    broken.write_text("version: 1\nname: x\nnodes: [{id: a, tool: nope}]\n")
    git(repo, "add", "checks/plan.yaml")
    done = pre_commit(repo, cache)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "checks/plan.yaml:3:23: nodes[0].tool: unknown tool 'nope'" in done.stdout
