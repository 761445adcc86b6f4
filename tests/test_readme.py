"""The README's examples keep working."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_two_setup_commands() -> None:
    """The set-up section shows the main-job command and the test command."""
    text = README.read_text(encoding="utf-8")
    bash = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    assert any(b.startswith("python -m pip install -e . && gategraph ") for b in bash)
    assert 'python -m pip install -e ".[test]" && python -m pytest\n' in bash


@pytest.mark.parametrize("block", python_blocks())
def test_python_examples_run(block: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block in the README runs without error."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GATEGRAPH_HOME")
    exec(compile(block, "README.md", "exec"), {})
