"""The README's examples keep working."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


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
