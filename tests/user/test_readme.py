"""The README's examples keep working."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_two_setup_commands() -> None:
    """The set-up section shows the main-job command and the test command."""
    text = README.read_text(encoding="utf-8")
    bash = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    assert any(b.startswith("python -m pip install -e . && gategraph ") for b in bash)
    assert 'python -m pip install -e ".[test]" && python -m pytest\n' in bash


def test_main_job_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every gategraph command of the README's main job succeeds, in an empty folder."""
    from click.testing import CliRunner
    from gategraph.runtime._cli import cli

    text = README.read_text(encoding="utf-8")
    main_job = next(
        b
        for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
        if b.startswith("python -m pip install -e . && gategraph ")
    )
    monkeypatch.chdir(tmp_path)  # GATEGRAPH_HOME points at a temporary folder too
    commands = [c.strip().split() for c in main_job.split("&&")[1:]]
    assert commands and all(c[0] == "gategraph" for c in commands)
    for command in commands:
        result = CliRunner().invoke(cli, command[1:])
        assert result.exit_code == 0, (command, result.output)


@pytest.mark.parametrize("block", python_blocks())
def test_python_examples_run(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block in the README runs without error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEGRAPH_HOME")
    exec(compile(block, "README.md", "exec"), {})


DOCS = sorted((README.parent / "docs").glob("*.md"))


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(block, id=f"{doc.name}-{i}")
        for doc in DOCS
        for i, block in enumerate(
            re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.DOTALL)
        )
    ],
)
def test_docs_python_examples_run(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block in docs/ runs, from the repository root."""
    monkeypatch.chdir(README.parent)
    if "set_tracer_provider" in block or "set_meter_provider" in block:
        # A global OpenTelemetry set-up lasts as long as its process, and would trace every
        # later test here: such a block runs in a process of its own.
        done = subprocess.run(
            [sys.executable, "-c", block], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        return
    exec(compile(block, "docs", "exec"), {"__name__": "docs_example"})
