"""Plans judged by real third-party MCP servers, installed as their users install them:
the official filesystem server (npm, ``@modelcontextprotocol/server-filesystem``) and
``mcp-server-git`` (PyPI), run through ``gategraph run`` as a user runs a plan.

The filesystem server is allowed the project folder only; it reads the plan's copy because
gategraph offers that copy as its MCP root. The git server diffs the change against the
repository's history on a disposable copy, so its index refresh never touches the plan;
started on the project itself (``--repository``, its folder fixed), it is shown the copy
there.

Where they are: ``GATEGRAPH_TEST_FILESYSTEM_SERVER`` (the server's program) and
``GATEGRAPH_TEST_GIT_SERVER`` (a Python that has ``mcp_server_git``). Without them the
tests skip, except where ``GATEGRAPH_REQUIRE_REAL_MCP=1`` says they must run (CI).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _helpers import git

pytestmark = pytest.mark.timeout(300)

FILESYSTEM = os.environ.get("GATEGRAPH_TEST_FILESYSTEM_SERVER", "")
GIT = os.environ.get("GATEGRAPH_TEST_GIT_SERVER", "")
if not (FILESYSTEM and GIT):
    if os.environ.get("GATEGRAPH_REQUIRE_REAL_MCP") == "1":
        raise RuntimeError(
            "GATEGRAPH_REQUIRE_REAL_MCP=1, but GATEGRAPH_TEST_FILESYSTEM_SERVER or "
            "GATEGRAPH_TEST_GIT_SERVER is not set"
        )
    pytest.skip("the real MCP servers are not installed here", allow_module_level=True)


def plan_file(folder: Path, steps: list[dict[str, str]], *, fixed: bool = False) -> Path:
    """A project under git, and a plan beside it whose validations are the real servers'
    tools: the notes have no TODO left (filesystem), the diff adds no password (git).
    ``fixed``: the git server is started on the project (``--repository``), as its README
    shows, and declared with that `folder`."""
    project = folder / "project"
    project.mkdir()
    (project / "README.md").write_text("# Project\n")
    (project / "NOTES.md").write_text("TODO: write the notes\n")
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-qm", "first")
    graph = {
        "version": 1,
        "name": "real-servers",
        "resources": {"project": {"kind": "directory", "path": "project"}},
        "mcp_servers": {
            # As the server's README has it: allowed the project folder.
            "files": {"command": FILESYSTEM, "args": [str(project)]},
            "git": (
                {
                    "command": GIT,
                    "args": ["-m", "mcp_server_git", "--repository", str(project)],
                    "folder": str(project),
                }
                if fixed
                else {"command": GIT, "args": ["-m", "mcp_server_git"]}
            ),
        },
        "tools": [
            {
                "name": "files.read",
                "mcp_server": "files",
                "mcp_tool_name": "read_text_file",
                "read_only": True,
                "resource_slots": ["path"],
            },
            {
                "name": "git.diff",
                "mcp_server": "git",
                "mcp_tool_name": "git_diff_unstaged",
                "read_only": True,
                "resource_slots": [{"name": "repo_path", "disposable": True}],
            },
        ],
        "validations": [
            {
                "name": "notes-done",
                "wraps": "files.read",
                "transform": "{'passed': 'TODO' not in output['content'], "
                "'message': output['content'][:200]}",
            },
            {
                "name": "no-password",
                "wraps": "git.diff",
                # Passes only on a diff that shows the change (git saw it against the
                # history) and adds no password.
                "transform": "{'passed': 'diff --git' in output and 'password' not in output, "
                "'message': output[-300:]}",
            },
        ],
        "nodes": [
            # Three reads at once of a folder new to the server: each waits until the
            # server has it among its roots.
            {"id": "notes", "validation": "notes-done", "arguments": {"path": "NOTES.md"}},
            {"id": "notes2", "validation": "notes-done", "arguments": {"path": "NOTES.md"}},
            {"id": "notes3", "validation": "notes-done", "arguments": {"path": "NOTES.md"}},
            {"id": "diff", "validation": "no-password"},
        ],
        "lifecycle": {
            "executor": {
                "uses": "gategraph.runtime.testing:ScriptedExecutor",
                "arguments": {"steps": [{"files": files} for files in steps]},
            }
        },
        "policy": {"retry_limit": 1, "strategy_revisions": 0},
    }
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(graph, sort_keys=False))
    return path


def run(plan: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "GATEGRAPH_HOME": str(plan.parent / "home")}
    return subprocess.run(
        [sys.executable, "-m", "gategraph.runtime", "run", str(plan)],
        cwd=plan.parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=240,
    )


@pytest.mark.parametrize("fixed", [False, True], ids=["roots", "fixed-folder"])
def test_the_real_servers_pass_a_good_change_which_is_applied(tmp_path: Path, fixed: bool) -> None:
    plan = plan_file(
        tmp_path,
        [{"NOTES.md": "The notes, written.\n", "README.md": "# Project\n\nUse it.\n"}],
        fixed=fixed,
    )
    done = run(plan)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": applied" in done.stdout, done.stdout
    project = tmp_path / "project"
    assert (project / "NOTES.md").read_text() == "The notes, written.\n"
    # Nothing the servers did reached the repository: only the applied change shows.
    assert git(project, "status", "--porcelain").split() == ["M", "NOTES.md", "M", "README.md"]
    assert git(project, "log", "--format=%s").split() == ["first"]


@pytest.mark.parametrize("fixed", [False, True], ids=["roots", "fixed-folder"])
def test_the_real_servers_reject_a_bad_change_which_is_not_applied(
    tmp_path: Path, fixed: bool
) -> None:
    # git diffs what it tracks: the password is in a file it has.
    bad = {"NOTES.md": "TODO: still\n", "README.md": "# Project\n\npassword = 'hunter2'\n"}
    plan = plan_file(tmp_path, [bad, bad], fixed=fixed)
    done = run(plan)
    assert ": awaiting_decision" in done.stdout, done.stdout + done.stderr
    assert "FAIL notes" in done.stdout and "FAIL diff" in done.stdout
    assert "TODO: still" in done.stdout
    project = tmp_path / "project"
    assert (project / "NOTES.md").read_text() == "TODO: write the notes\n"
    assert (project / "README.md").read_text() == "# Project\n"
    assert git(project, "status", "--porcelain") == ""
