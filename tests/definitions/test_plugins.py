"""Plugins: a tiny package, installed with pip, registers validations through entry
points; they appear in the catalog's namespace marked as its, run sandboxed, never
imported into gategraph's process, and cannot touch the pipeline's layers."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _helpers import plugin_project, run_gategraph
from gategraph.runtime import Catalog, IntegrityError, MemoryEventLog, load_graph, run_plan
from gategraph.runtime._definitions import _plugins

FILES = {
    "gg_demo_plugin/__init__.py": "",
    "gg_demo_plugin/declare.py": (
        "VALIDATIONS = [{'name': 'no_todo', 'description': 'No TODO left in the folder.',\n"
        "    'entrypoint': 'gg_demo_plugin.checks:no_todo', 'resource_slots': ['root']}]\n"
        "LAYERED = [{'name': 'early', 'entrypoint': 'gg_demo_plugin.checks:no_todo',\n"
        "    'layer': 'routing'}]\n"
        "CLASH = [{'name': 'regex', 'entrypoint': 'gg_demo_plugin.checks:no_todo'}]\n"
        "WRAPPING = [{'name': 'wrapper', 'wraps': 'x', 'transform': 'output'}]\n"
        "NOT_A_LIST = {'name': 'x'}\n"
        "NOT_MAPPINGS = [1]\n"
        "A_TOOL = [{'name': 'atool', 'tool_type': 'tool', 'entrypoint': 'a:b'}]\n"
        "WITH_CODE = [{'name': 'coded', 'code': 'def run(): pass'}]\n"
        "RESERVED = [{'name': 'gategraph.mine', 'entrypoint': 'a:b'}]\n"
        "AGAIN = [{'name': 'no_todo', 'entrypoint': 'gg_demo_plugin.checks:no_todo'}]\n"
        "def as_models():\n"
        "    from gategraph.runtime import Validation\n"
        "    return [Validation.from_config({'name': 'modelled',\n"
        "        'entrypoint': 'gg_demo_plugin.checks:no_todo', 'resource_slots': ['root']})]\n"
        "class Unsayable(Exception):\n"
        "    def __str__(self):\n"
        "        raise RuntimeError('no')\n"
        "def unsayable():\n"
        "    raise Unsayable()\n"
        "def several():\n"
        "    return [{'name': 'also', 'entrypoint': 'gg_demo_plugin.checks:no_todo',\n"
        "             'resource_slots': ['root'], 'mode': 'informational'}]\n"
    ),
    "gg_demo_plugin/broken.py": "raise ImportError('the plugin is broken')\n",
    "gg_demo_plugin/leaving.py": "raise SystemExit(7)\n",
    "gg_demo_plugin/checks.py": (
        "from pathlib import Path\n\n"
        "def no_todo(root):\n"
        "    found = [p.name for p in Path(root).rglob('*.py') if 'TODO' in p.read_text()]\n"
        "    return {'passed': not found, 'message': ', '.join(found) or 'no TODO'}\n"
    ),
    "gg_demo_plugin-0.1.dist-info/METADATA": (
        "Metadata-Version: 2.1\nName: gg-demo-plugin\nVersion: 0.1\n"
    ),
    "gg_demo_plugin-0.1.dist-info/WHEEL": (
        "Wheel-Version: 1.0\nGenerator: gategraph-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    ),
    "gg_demo_plugin-0.1.dist-info/entry_points.txt": (
        "[gategraph.validations]\n"
        "demo = gg_demo_plugin.declare:VALIDATIONS\n"
        "more = gg_demo_plugin.declare:several\n"
        "layered = gg_demo_plugin.declare:LAYERED\n"
        "clash = gg_demo_plugin.declare:CLASH\n"
        "broken = gg_demo_plugin.broken:VALIDATIONS\n"
        "leaving = gg_demo_plugin.leaving:VALIDATIONS\n"
        "wrapping = gg_demo_plugin.declare:WRAPPING\n"
        "notalist = gg_demo_plugin.declare:NOT_A_LIST\n"
        "notmappings = gg_demo_plugin.declare:NOT_MAPPINGS\n"
        "atool = gg_demo_plugin.declare:A_TOOL\n"
        "coded = gg_demo_plugin.declare:WITH_CODE\n"
        "reserved = gg_demo_plugin.declare:RESERVED\n"
        "zagain = gg_demo_plugin.declare:AGAIN\n"
        "models = gg_demo_plugin.declare:as_models\n"
        "unsayable = gg_demo_plugin.declare:unsayable\n"
    ),
}


def wheel(folder: Path) -> Path:
    """The plugin as a wheel, as a build backend would make it."""
    files = dict(FILES)
    record = []
    for name, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        encoded = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{name},sha256={encoded},{len(text.encode())}")
    record.append("gg_demo_plugin-0.1.dist-info/RECORD,,")
    files["gg_demo_plugin-0.1.dist-info/RECORD"] = "\n".join(record) + "\n"
    path = folder / "gg_demo_plugin-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed with pip into a folder of its own (on the path of the calls)."""
    folder = tmp_path_factory.mktemp("plugin")
    target = folder / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel(folder)),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return target


@pytest.fixture
def plugged(installed: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(installed))
    _plugins._load.cache_clear()
    yield installed
    _plugins._load.cache_clear()


def gategraph(site: Path, home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_gategraph(home, *args, cwd=cwd, pythonpath=site)


def test_a_user_lists_shows_and_runs_a_plugins_validation(installed: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    listed = gategraph(installed, home, "tool", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert (
        "plugin validations, usable by name (run sandboxed): also (gg-demo-plugin), "
        "modelled (gg-demo-plugin), no_todo (gg-demo-plugin)"
    ) in listed.stdout
    out = listed.stdout
    assert "plugin left out: plugin gg-demo-plugin (entry point 'layered'" in out
    assert "the pipeline's layers and their order are fixed" in out
    assert "entry point 'broken'" in out and "the plugin is broken" in out
    assert "'regex' is a built-in's name: left out" in out
    assert "entry point 'leaving'" in out and "SystemExit: 7" in out
    assert "entry point 'wrapping'" in out and "its own code" in out
    # In JSON, the same plugin validations, and what was left out on standard error.
    as_json = gategraph(installed, home, "tool", "list", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    plugged = [t for t in json.loads(as_json.stdout) if t["origin"] == "plugin"]
    assert [(t["name"], t["plugin"], t["access"]) for t in plugged] == [
        (name, "gg-demo-plugin", "read-only") for name in ("also", "modelled", "no_todo")
    ]
    assert "plugin left out: plugin gg-demo-plugin (entry point 'layered'" in as_json.stderr
    shown = gategraph(installed, home, "tool", "show", "no_todo", "--json", cwd=tmp_path)
    assert json.loads(shown.stdout)["plugin"] == "gg-demo-plugin"
    assert json.loads(shown.stdout)["untrusted"] is True

    graph = plugin_project(tmp_path, "x = 1  # TODO\n")
    checked = gategraph(installed, home, "check", str(graph), cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    failed = gategraph(installed, home, "run", str(graph), cwd=tmp_path)
    assert failed.returncode != 0 and "app.py" in failed.stdout
    (tmp_path / "repo" / "app.py").write_text("x = 1\n")
    applied = gategraph(installed, home, "run", str(graph), cwd=tmp_path)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "todo" in applied.stdout and "no TODO" in applied.stdout


@pytest.mark.anyio
async def test_its_code_runs_sandboxed_and_is_never_imported_here(
    plugged: Path, tmp_path: Path
) -> None:
    graph = load_graph(plugin_project(tmp_path, "x = 1\n"))
    log = MemoryEventLog()
    outcome = await run_plan(graph, event_log=log)
    assert outcome.status.value == "applied", outcome.message
    [record] = outcome.validations
    assert record.isolation == "sandbox"
    assert "gg_demo_plugin.checks" not in sys.modules


def test_a_plugins_validation_is_the_catalogs_by_name_and_is_not_removed_there(
    plugged: Path,
) -> None:
    with Catalog.in_memory() as catalog:
        found = catalog.get("no_todo")
        assert found.plugin == "gg-demo-plugin" and found.untrusted
        assert "also" in catalog
        with pytest.raises(IntegrityError, match="comes from plugin gg-demo-plugin"):
            catalog.remove("no_todo")
    assert [v.name for v in _plugins.plugin_validations()] == ["also", "modelled", "no_todo"]
    problems = "\n".join(_plugins.plugin_problems())
    for said in (
        "'notalist'",
        "must be a list of validation configurations",
        "[0]: must be a validation configuration",
        "[0].tool_type: a plugin registers validations only",
        "[0].code:",
        "'gategraph.mine' is a name gategraph keeps",
        "'no_todo' is plugin gg-demo-plugin's already",
        "(its message cannot be shown)",
    ):
        assert said in problems, said
    assert len(_plugins.plugin_problems()) == 12
