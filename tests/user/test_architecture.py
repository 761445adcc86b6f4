"""The runtime's layout as docs/architecture.md draws it: subpackages in layers that import
only downward (checked by `lint-imports`, run as the page says), each with a docstring, each
mirrored by a folder of tests, and no module left outside them."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest
from _helpers import run_process

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "runtime"
DOC = ROOT / "docs" / "architecture.md"
# The public modules stay at the top: the package itself, `python -m`, `testing`, the version.
TOP = {"__init__.py", "__main__.py", "testing.py", "pytest_plugin.py", "_version.py"}


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layered() -> list[str]:
    """The subpackages the runtime's layers contract names, top first."""
    (layers,) = [
        c["layers"]
        for c in _contracts()
        if c["type"] == "layers" and c.get("containers") == ["gategraph.runtime"]
    ]
    assert isinstance(layers, list)
    return [name.strip() for layer in layers for name in re.split(r"[|:]", layer)]


def _subpackages() -> list[Path]:
    return sorted(p.parent for p in RUNTIME.glob("_*/__init__.py"))


def test_every_private_module_lives_in_a_layered_subpackage() -> None:
    """Only the public modules stay at the top of the runtime; every subpackage is in the
    layers contract, and the contract names no package that is gone."""
    assert {p.name for p in RUNTIME.glob("*.py")} == TOP
    assert sorted(_layered()) == sorted(p.name for p in _subpackages())


def test_every_subpackage_is_installed() -> None:
    """The distribution lists each subpackage (setuptools installs only the packages it
    names): an editable install would find a missing one, a wheel would not hold it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    for package in [*_subpackages(), RUNTIME / "integrations"]:
        assert f"gategraph.runtime.{package.name}" in listed, package.name


def test_each_subpackage_says_what_lives_there_and_stays_small() -> None:
    """Each subpackage's ``__init__`` is a docstring and nothing else (importing the runtime
    stays cheap; the command line's also names its entry point), and each holds a handful of
    modules, not a second flat runtime."""
    for package in _subpackages():
        tree = ast.parse((package / "__init__.py").read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), package.name
        if package.name != "_cli":
            assert len(tree.body) == 1, f"{package.name}/__init__.py does more than say"
        modules = [p for p in package.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
        assert 1 <= len(modules) <= 12, (package.name, len(modules))


def test_the_page_draws_every_layer_and_answers_the_four_questions() -> None:
    """docs/architecture.md has the picture with every subpackage, in the contract's order,
    and the four "where do I add" answers."""
    text = DOC.read_text(encoding="utf-8")
    (picture,) = re.findall(r"```mermaid\n(.*?)```", text, re.DOTALL)
    drawn = re.findall(r"^\s+(\w+)\[\"(_\w+)<br/>", picture, re.MULTILINE)
    assert [package for _, package in drawn] == _layered()
    for question in (
        "A new built-in validation?",
        "A new isolation level?",
        "A new event?",
        "A new CLI command?",
    ):
        assert f"**{question}**" in text


def test_tests_mirror_the_subpackages() -> None:
    """Each subpackage has a folder of tests named after it."""
    for package in _subpackages():
        folder = ROOT / "tests" / package.name.lstrip("_")
        assert list(folder.glob("test_*.py")), f"no tests/{folder.name}/"


@pytest.mark.skipif(
    importlib.util.find_spec("importlinter") is None, reason="import-linter is not installed"
)
def test_lint_imports_keeps_every_contract() -> None:
    """`lint-imports`, run from a checkout as docs/architecture.md says: every layer imports
    only downward and no import cycle is left, between modules or between packages."""
    assert "```bash\nlint-imports --no-cache\n```" in DOC.read_text(encoding="utf-8")
    lint = Path(sys.executable).with_name("lint-imports")
    done = run_process(
        [str(lint) if lint.exists() else "lint-imports", "--no-cache"], cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", done.stdout)
    assert kept is not None and int(kept[1]) == len(_contracts()), done.stdout
