"""What a user runs first: the README's main command and every shipped example, end to end,
as a user runs them (the installed command in a subprocess, in a folder of their own)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import run_process

ROOT = Path(__file__).parents[2]
# The console script pip installed beside this interpreter: what a user types.
GATEGRAPH = Path(sys.executable).with_name("gategraph")
GRAPHS = sorted(
    p.relative_to(ROOT / "graphs").as_posix()
    for p in (ROOT / "graphs").rglob("*.yaml")
    if "demo-repo" not in p.parts
)


def gategraph(*args: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed `gategraph` command, as a user would."""
    return run_process(
        [str(GATEGRAPH), *args],
        cwd=cwd,
        timeout=180,
        env={**os.environ, "GATEGRAPH_HOME": str(home)},
    )


def test_the_readme_main_command_runs(tmp_path: Path) -> None:
    """The README's main job (after its install step) runs the demo, which is applied, and
    leaves only the demo's own folder behind in the user's folder."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    main = next(
        b for b in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL) if "gategraph demo" in b
    )
    install, _, command = main.strip().partition(" && ")
    assert install == "python -m pip install -e ."
    assert command == "gategraph demo"
    work = tmp_path / "work"
    work.mkdir()
    done = gategraph(*command.split()[1:], cwd=work, home=tmp_path / "home")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied" in done.stdout.splitlines()[-2]
    assert sorted(p.name for p in work.iterdir()) == ["gategraph-demo"]
    project = work / "gategraph-demo" / "project"
    assert not (project / ".gategraph-journal").exists()


@pytest.mark.parametrize("graph", GRAPHS)
def test_every_example_graph_checks_and_applies(graph: str, tmp_path: Path) -> None:
    """`gategraph check` passes and `gategraph run` applies each graph of graphs/, run on a
    copy of the folder it ships in (the run changes its project)."""
    shutil.copytree(
        ROOT / "graphs", tmp_path / "graphs", ignore=shutil.ignore_patterns("__pycache__")
    )
    path = tmp_path / "graphs" / graph
    home = tmp_path / "home"
    checked = gategraph("check", str(path), cwd=tmp_path, home=home)
    assert checked.returncode == 0, checked.stderr
    done = gategraph("run", str(path), cwd=tmp_path, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": applied" in done.stdout
    assert "Traceback" not in done.stderr
    assert list((tmp_path / "graphs").rglob(".gategraph-journal")) == []


def test_the_documented_tool_configs_register(tmp_path: Path) -> None:
    """docs/examples/: the tool first, then the validation that wraps it, then the inline one."""
    home = tmp_path / "home"
    examples = ROOT / "docs" / "examples"
    for command, name in (
        ("tool", "ruff-tool.yaml"),
        ("validation", "lint-clean.yaml"),
        ("validation", "no-conflict-markers.yaml"),
    ):
        done = gategraph(command, "add", "--config", str(examples / name), cwd=tmp_path, home=home)
        assert done.returncode == 0, (name, done.stderr)
    listed = gategraph("validation", "list", cwd=tmp_path, home=home)
    assert "lint-clean" in listed.stdout and "no-conflict-markers" in listed.stdout
