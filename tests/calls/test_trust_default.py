"""Trust by default: with no ``isolation:`` written anywhere, code that is not gategraph's
own runs in the kernel sandbox, every validation of a round judges one frozen artifact,
and every record says what held it to read-only.

Each attack here is one that got through before on the default settings; each is run as a
user runs it (the command line in a process of its own, the library as documented), and
each must fail with nothing changed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import types
import warnings
from pathlib import Path
from typing import Any

import anyio
import pytest
from _helpers import run_gategraph, suite_plan
from gategraph.runtime import ConfigError, validate, validate_sync
from gategraph.runtime._base._kernel import Support, support
from gategraph.runtime._calls._frozen import FrozenDict, FrozenList, changed, fingerprint, freeze
from gategraph.runtime._calls._frozen import held as frozen_whole
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import execute_graph

needs_sandbox = pytest.mark.skipif(
    support().missing is not None, reason=f"no sandbox here: {support().missing}"
)
pytestmark = pytest.mark.timeout(180)

CONFTEST = """\
import pathlib
pathlib.Path({target!r}).write_text("the change's own code ran on the host")
"""


def _project(root: Path, target: Path) -> Path:
    """A project whose change adds a ``conftest.py`` that writes ``target`` when the tests
    are collected: the agent's own code, run by the test suite that judges it."""
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "conftest.py").write_text(CONFTEST.format(target=str(target)))
    (root / "tests" / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    return root


# -- the change's own code ---------------------------------------------------------------------


@needs_sandbox
def test_a_conftest_in_the_change_cannot_write_on_the_host_through_the_cli(
    tmp_path: Path,
) -> None:
    """`gategraph execute` with the built-in test runner: the conftest's write is refused
    by the kernel, the validation does not pass, and the record says the kernel held it."""
    target = tmp_path / "pwned"
    project = _project(tmp_path / "project", target)
    plan = suite_plan(tmp_path, project)
    done = run_gategraph(tmp_path / "home", "execute", str(plan), "--json", cwd=tmp_path)
    assert not target.exists()
    assert done.returncode == 1, done.stderr
    [record] = json.loads(done.stdout)["validations"]
    assert record["result"]["passed"] is False
    assert record["isolation"] == "sandbox"
    assert record["enforced_by"] == "kernel"


@needs_sandbox
def test_a_conftest_in_the_change_cannot_write_on_the_host_through_validate(
    tmp_path: Path,
) -> None:
    """The same change through ``validate()``: refused, and nothing written."""
    target = tmp_path / "pwned"
    project = _project(tmp_path / "project", target)
    verdict = validate_sync(project, ["pytest_suite"])
    assert not target.exists()
    assert not verdict.passed
    assert [r.enforced_by for r in verdict.records] == ["kernel"]


@needs_sandbox
def test_an_honest_suite_passes_in_the_sandbox_by_default(tmp_path: Path) -> None:
    """A suite that writes nothing outside its copy passes, held by the kernel; the summary
    line says so."""
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    done = run_gategraph(
        tmp_path / "home", "execute", str(suite_plan(tmp_path, project)), cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "read-only held by the kernel for 1" in done.stdout
    assert "kernel" in done.stdout.splitlines()[2]  # the node's row: HELD BY


def test_the_built_ins_that_only_read_run_here_under_the_guard(tmp_path: Path) -> None:
    """``python_syntax`` runs no code of the change: gategraph's process, the guard."""
    (tmp_path / "a.py").write_text("x = 1\n")
    verdict = validate_sync(tmp_path, ["python_syntax"])
    assert verdict.passed
    [record] = verdict.records
    assert record.isolation in ("inline", "thread")
    assert record.enforced_by == "guard"


WRITER = """\
def run(root):
    import pathlib
    pathlib.Path(root, "written").write_text("x")
    return {"passed": True}
"""


@needs_sandbox
@pytest.mark.anyio
async def test_graph_code_runs_in_the_sandbox_unless_its_node_declares_trust(
    tmp_path: Path,
) -> None:
    """Inline code of a graph is sandboxed by default; ``isolation: thread`` is a declared
    choice to trust it, recorded as held by the guard (which still refuses the write)."""
    code = json.dumps(WRITER)
    for isolation, ran_in, held in ((None, "sandbox", "kernel"), ("thread", "thread", "guard")):
        declared = f", isolation: {isolation}" if isolation else ""
        plan = load_graph(
            "version: 1\nname: g\n"
            f'resources: {{repo: {{kind: directory, path: "{tmp_path}"}}}}\n'
            f"validations:\n  - {{name: w, code: {code}, resource_slots: [root]}}\n"
            f"nodes:\n  - {{id: n, validation: w{declared}}}\n"
        )
        run = await execute_graph(plan)
        [record] = run.validations
        assert (record.isolation, record.enforced_by) == (ran_in, held)
        assert not record.result.passed
        assert not (tmp_path / "written").exists()


# -- the artifact ------------------------------------------------------------------------------

TIDY = """\
def run(artifact):
    # "Tidies" its input in place: the command the others judge would become harmless.
    try:
        artifact["commands"] = "echo fine"
    except Exception:
        pass  # caught: the guard has it on record all the same
    return {"passed": True, "message": "tidied"}
"""


def _tidy_graph(isolation: str | None) -> Any:
    code = json.dumps(TIDY if isolation != "inline" else TIDY.replace("def run", "async def run"))
    declared = f", isolation: {isolation}" if isolation else ""
    return load_graph(
        "version: 1\nname: tidy\n"
        f"validations:\n  - {{name: tidy, code: {code}}}\n"
        "nodes:\n"
        f"  - {{id: tidy, validation: tidy{declared}}}\n"
        "  - {id: safe, validation: unsafe_command}\n"
    )


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", [None, "inline", "thread", "process"])
async def test_no_validation_can_change_what_another_judges(isolation: str | None) -> None:
    """A validation that rewrites the artifact in place fails as a read-only violation on
    every isolation level; the others judge the artifact as given; the caller's own object
    is untouched."""
    if isolation is None and support().missing is not None:
        pytest.skip("the default is the sandbox")
    artifact = {"commands": "rm -rf /"}
    run = await execute_graph(_tidy_graph(isolation), artifact=artifact)
    results = {r.node: r.result for r in run.validations}
    assert results["tidy"].data["error"] == "read_only_violation", results["tidy"]
    assert not results["safe"].passed  # it saw `rm -rf /`
    assert artifact == {"commands": "rm -rf /"}
    assert not run.passed


# An object no frozen container can hold: a `types.SimpleNamespace` (it pickles, so it
# crosses to a worker process or the sandbox as well).
TIDY_OBJECT = """\
def run(artifact):
    artifact.commands = "echo fine"
    return {"passed": True, "message": "tidied"}
"""
JUDGE_OBJECT = """\
def run(artifact):
    return {"passed": artifact.commands == "rm -rf /", "message": artifact.commands}
"""


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", [None, "inline", "thread", "process"])
async def test_an_object_no_container_holds_is_held_all_the_same(isolation: str | None) -> None:
    """An artifact of another class is each validation's own copy, judged for a change
    once the call returns: the one that changed it fails as a read-only violation, the
    other judged it as given, and the caller's object is untouched."""
    if isolation is None and support().missing is not None:
        pytest.skip("the default is the sandbox")
    declared = f", isolation: {isolation}" if isolation else ""
    tidy, judge = (
        json.dumps(code if isolation != "inline" else code.replace("def run", "async def run"))
        for code in (TIDY_OBJECT, JUDGE_OBJECT)
    )
    graph = load_graph(
        "version: 1\nname: tidy\n"
        f"validations:\n  - {{name: tidy, code: {tidy}}}\n  - {{name: judge, code: {judge}}}\n"
        f"nodes:\n  - {{id: tidy, validation: tidy{declared}}}\n"
        f"  - {{id: judge, validation: judge{declared}}}\n"
    )
    artifact = types.SimpleNamespace(commands="rm -rf /")
    run = await execute_graph(graph, artifact=artifact)
    results = {r.node: r.result for r in run.validations}
    assert results["tidy"].data["error"] == "read_only_violation", results["tidy"]
    assert "changed its own arguments or artifact" in results["tidy"].message
    assert results["judge"].passed, results["judge"]
    assert artifact.commands == "rm -rf /"


@dataclasses.dataclass
class CachingPlan:
    """An artifact that caches what it computes in itself, as many objects do."""

    commands: str

    @functools.cached_property
    def size(self) -> int:
        return len(self.commands)


def test_a_cache_an_object_keeps_is_not_a_change() -> None:
    """Reading a cached property writes the cache into the object: its fingerprint
    leaves caches out, so it is the same object; a real change is still one."""
    plan = CachingPlan("rm -rf /")
    given = fingerprint(plan)
    assert plan.size == 8 and "size" in vars(plan)
    assert fingerprint(plan) == given and not changed(plan, given)
    plan.commands = "echo fine"
    assert changed(plan, given)
    assert not changed(plan, None)  # what could not be pickled is not judged


def test_dates_paths_and_enums_are_held_as_they_are() -> None:
    """Values no method changes are shared like strings: an artifact holding them is held
    whole, and no call needs a copy of its own."""
    import datetime
    import enum
    import pathlib
    import uuid

    class Colour(enum.Enum):
        RED = 1

    given = {
        "when": datetime.date(2024, 1, 1),
        "at": datetime.datetime(2024, 1, 1, 12, 0),
        "path": pathlib.Path("/src/app.py"),
        "id": uuid.UUID(int=1),
        "colour": Colour.RED,
    }
    frozen = freeze(given)
    assert frozen_whole(frozen) and frozen == given and frozen["colour"] is Colour.RED
    assert not frozen_whole(freeze({"object": types.SimpleNamespace(a=1)}))


SAME = """\
def run(artifact):
    return {"passed": True, "data": {"id": id(artifact)}}
"""


@pytest.mark.anyio
async def test_an_output_that_validations_need_is_frozen_once_for_all() -> None:
    """The validations that need one node's output share one frozen projection of it."""
    code = json.dumps(SAME)
    graph = load_graph(
        "version: 1\nname: once\n"
        f"validations:\n  - {{name: same, code: {code}}}\n"
        "nodes:\n  - {id: a, validation: same, isolation: thread}\n"
        "  - {id: b, validation: same, needs: [a], isolation: thread}\n"
        "  - {id: c, validation: same, needs: [a], isolation: thread}\n"
    )
    run = await execute_graph(graph)
    ids = {r.node: r.result.data["id"] for r in run.validations}
    assert ids["b"] == ids["c"]


LINGERING = """\
def run(artifact):
    import threading, time
    def later():
        time.sleep(0.2)
        try:
            artifact["verdict"] = "forged"
        except Exception:
            pass
    threading.Thread(target=later, daemon=True).start()
    return {"passed": True}
"""


def test_the_callers_object_is_never_touched_after_the_verdict() -> None:
    """Through ``validate_sync``, a thread a trusted validation leaves running cannot
    rewrite the caller's dict after the verdict: the validations had a frozen copy."""
    import time

    artifact: dict[str, Any] = {"verdict": "as given"}
    verdict = validate_sync(
        artifact=artifact,
        validations=[{"validation": {"name": "v", "code": LINGERING}, "isolation": "thread"}],
    )
    assert verdict.passed
    time.sleep(0.5)
    assert artifact == {"verdict": "as given"}


def test_a_frozen_artifact_reads_as_plain_data() -> None:
    """The projection is a dict and lists as far as readers go (JSON, JSON Schema,
    ``isinstance``); a copy of it can be changed; a change to it names where."""
    given = {"steps": [{"run": "make"}], "n": 1, "t": (1, [2]), "s": {1}}
    frozen = freeze(given)
    assert isinstance(frozen, dict) and isinstance(frozen["steps"], list)
    assert type(frozen) is FrozenDict and type(frozen["steps"]) is FrozenList
    assert frozen["s"] == frozenset({1}) and frozen["t"] == (1, [2])
    assert json.loads(json.dumps({k: frozen[k] for k in ("steps", "n", "t")})) == {
        "steps": [{"run": "make"}],
        "n": 1,
        "t": [1, [2]],
    }
    assert frozen["steps"] is not given["steps"]  # a copy: the caller's object stays theirs
    assert freeze(frozen) is frozen
    mine = copy.deepcopy(frozen)
    mine["steps"].append("more")
    assert type(mine) is dict and mine["steps"][-1] == "more"
    assert frozen["steps"] == [{"run": "make"}]
    with pytest.raises(PermissionError, match=r"artifact\['steps'\]\[0\]\['run'\] = "):
        frozen["steps"][0]["run"] = "rm -rf /"
    with pytest.raises(PermissionError, match=r"artifact\['t'\]\[1\]\.append"):
        frozen["t"][1].append(3)


def test_json_schema_judges_a_frozen_artifact() -> None:
    """The built-in JSON Schema check sees objects and arrays as such."""
    schema = {"type": "object", "properties": {"items": {"type": "array"}}, "required": ["items"]}
    good = validate_sync(
        artifact={"items": [1, 2]},
        validations=[{"validation": "json_schema", "arguments": {"schema": schema}}],
    )
    bad = validate_sync(
        artifact={"items": "no"},
        validations=[{"validation": "json_schema", "arguments": {"schema": schema}}],
    )
    assert good.passed and not bad.passed


# -- where the kernel cannot sandbox ----------------------------------------------------------

NO_SANDBOX = Support(landlock_abi=0, seccomp=False, arch="x86_64", missing="no Landlock (a test)")


@pytest.mark.anyio
async def test_without_the_sandbox_the_default_falls_back_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the kernel cannot sandbox, a worker process under the guard, a warning, and a
    record that says the guard held it; ``require_sandbox`` refuses instead."""
    import gategraph.runtime._base._kernel as kernel

    monkeypatch.setattr(kernel, "_support", NO_SANDBOX)
    code = json.dumps('def run():\n    return {"passed": True}\n')
    text = f"version: 1\nname: g\nvalidations:\n  - {{name: v, code: {code}}}\nnodes:\n  - {{id: n, validation: v}}\n"
    with pytest.warns(RuntimeWarning, match="kernel sandbox is not available here"):
        run = await execute_graph(load_graph(text))
    [record] = run.validations
    assert (record.isolation, record.enforced_by, record.result.passed) == (
        "process",
        "guard",
        True,
    )
    strict = text.replace("nodes:", "policy: {require_sandbox: true}\nnodes:")
    with pytest.raises(ConfigError, match="no Landlock"):
        await execute_graph(load_graph(strict))


SITECUSTOMIZE = """\
import gategraph.runtime._base._kernel as kernel
kernel._support = kernel.Support(landlock_abi=0, seccomp=False, arch="x86_64",
                                 missing="this kernel has no Landlock (a test)")
"""


def test_the_command_line_falls_back_in_one_line_or_refuses_when_asked(tmp_path: Path) -> None:
    """On a machine without the sandbox (simulated at start-up): one warning line and the
    run goes on; ``--require-sandbox`` refuses in one line, exit 2, before anything runs."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    plan = suite_plan(tmp_path, project)
    home = tmp_path / "home"
    done = run_gategraph(home, "execute", str(plan), cwd=tmp_path, pythonpath=site)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        "warning: the kernel sandbox is not available here (this kernel has no Landlock (a "
        "test)): validations and tools that would run in it run in worker processes under "
        "the in-process guard instead (`policy.require_sandbox: true` refuses to run them)"
    ]
    assert "read-only held by the in-process guard for 1" in done.stdout
    refused = run_gategraph(
        home, "execute", "--require-sandbox", str(plan), cwd=tmp_path, pythonpath=site
    )
    assert refused.returncode == 2
    assert refused.stdout == ""
    [line] = refused.stderr.splitlines()
    assert "sandbox: this kernel has no Landlock (a test)" in line
    assert str(plan.name) in line


# -- what enforced it, wherever a result is shown ---------------------------------------------


@needs_sandbox
def test_reports_and_show_say_what_held_each_validation(tmp_path: Path) -> None:
    """JUnit, SARIF, ``show --json`` and the HTML report name the enforcement."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = (\n")
    code = json.dumps('def run():\n    return {"passed": False, "message": "no"}\n')
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\nname: held\n"
        f'resources: {{repo: {{kind: directory, path: "{project}"}}}}\n'
        f"validations:\n  - {{name: mine, code: {code}}}\n"
        # The whole tree: the plan changes nothing, and a.py was broken before it.
        "nodes:\n  - {id: syntax, validation: python_syntax, resources: [repo], "
        "arguments: {scope: tree}}\n"
        "  - {id: mine, validation: mine}\n"
        "policy: {retry_limit: 0, strategy_revisions: 0}\n"
    )
    home = tmp_path / "home"
    junit, sarif = tmp_path / "r.xml", tmp_path / "r.sarif"
    done = run_gategraph(
        home, "run", str(plan), "--json", "--report", "junit", str(junit), cwd=tmp_path
    )
    assert done.returncode != 0
    plan_id = json.loads(done.stdout)["plan_id"]
    text = junit.read_text()
    assert '<property name="enforced_by" value="kernel" />' in text
    assert '<property name="enforced_by" value="guard" />' in text
    again = run_gategraph(
        home, "run", str(plan), "--json", "--report", "sarif", str(sarif), cwd=tmp_path
    )
    assert again.returncode != 0
    held = {
        r["properties"]["node"]: r["properties"]["enforcedBy"]
        for r in json.loads(sarif.read_text())["runs"][0]["results"]
    }
    assert held == {"syntax": "guard", "mine": "kernel"}
    shown = run_gategraph(home, "show", plan_id, "--json", cwd=tmp_path)
    calls = json.loads(shown.stdout)["timeline"][-1]["validations"]
    assert {c["node"]: c["enforced_by"] for c in calls} == {"syntax": "guard", "mine": "kernel"}
    page = tmp_path / "report.html"
    run_gategraph(home, "report", plan_id, "--html", str(page), cwd=tmp_path)
    html = page.read_text()
    assert "<th>held by</th>" in html
    rows = {node: html.split(f"<tr><td>{node}</td>", 1)[1].split("</tr>", 1)[0] for node in held}
    assert "<td>kernel</td>" in rows["mine"] and "<td>guard</td>" in rows["syntax"]


@pytest.mark.anyio
async def test_validate_with_a_change_mapping_is_sandboxed_by_default(tmp_path: Path) -> None:
    """``validate()`` of a mapping of files with a catalog-style inline validation: the
    kernel by default, no isolation written."""
    if support().missing is not None:
        pytest.skip("the default is the sandbox")
    verdict = await validate(
        {"a.py": "x = 1\n"},
        [{"name": "mine", "code": 'def run():\n    return {"passed": True}\n'}],
    )
    assert verdict.passed
    assert [r.enforced_by for r in verdict.records] == ["kernel"]


def test_a_validation_cannot_rewrite_what_another_judges_through_the_cli(tmp_path: Path) -> None:
    """`gategraph run`: a work node proposes ``rm -rf /``; a validation "tidies" it in place
    to ``echo fine`` before the built-in command check reads it. The tidying fails as a
    read-only violation, the check sees the real command, and nothing is applied."""
    make = json.dumps('def run():\n    return {"commands": "rm -rf /"}\n')
    tidy = json.dumps(TIDY)
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\nname: tidy\n"
        f"tools:\n  - {{name: propose, code: {make}}}\n"
        f"validations:\n  - {{name: tidy, code: {tidy}}}\n"
        "nodes:\n"
        "  - {id: propose, tool: propose}\n"
        "  - {id: tidy, validation: tidy, needs: [propose]}\n"
        "  - {id: safe, validation: unsafe_command, needs: [propose]}\n"
        "policy: {retry_limit: 0, strategy_revisions: 0}\n"
    )
    done = run_gategraph(tmp_path / "home", "execute", str(plan), "--json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    results = {v["node"]: v["result"] for v in json.loads(done.stdout)["validations"]}
    assert results["tidy"]["data"]["error"] == "read_only_violation"
    assert "artifact['commands']" in results["tidy"]["message"]
    assert results["safe"]["passed"] is False
    assert "rm -rf /" in json.dumps(results["safe"])


def test_a_transform_is_held_to_purity_while_it_loads(tmp_path: Path) -> None:
    """A wrapped validation's transform is the graph's code. By default it runs in the
    sandbox and `check` never loads it; what its top level attempts while it loads there
    is refused, and fails the validation. Declared trusted (`isolation: thread`), it runs
    in gategraph's own process: the same attempt is refused there, and `check` says so."""
    target = tmp_path / "written-at-load"
    transform = (
        "try:\n"
        f"    open({str(target)!r}, 'w').write('x')\n"
        "except Exception:\n"
        "    pass\n"
        "def transform(output):\n"
        "    return {'passed': True}\n"
    )
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "version: 1\nname: tr\n"
        'tools:\n  - {name: t, read_only: true, code: "def run(**_):\\n    return 1\\n"}\n'
        f"validations:\n  - {{name: v, wraps: t, transform: {json.dumps(transform)}}}\n"
        "nodes:\n  - {id: n, validation: v}\n"
    )
    checked = run_gategraph(tmp_path / "home", "check", str(plan), cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    ran = run_gategraph(tmp_path / "home", "execute", str(plan), "--json", cwd=tmp_path)
    [record] = json.loads(ran.stdout)["validations"]
    assert record["result"]["data"]["error"] == "read_only_violation", record
    assert "the transform of 'v' is not pure" in record["result"]["message"]
    assert not target.exists()
    plan.write_text(plan.read_text().replace("validation: v}", "validation: v, isolation: thread}"))
    done = run_gategraph(tmp_path / "home", "check", str(plan), cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert "validations[0].transform: the transform of 'v' is not pure" in line
    assert not target.exists()


@pytest.mark.anyio
async def test_work_nodes_get_their_inputs_as_given_not_frozen() -> None:
    """Only validations judge the frozen projection: a work node may change what it is
    given (it is the plan's own work), and the validation after it sees the change."""
    produce = json.dumps('def run():\n    return {"items": [1]}\n')
    consume = json.dumps(
        'def run(artifact):\n    artifact["items"].append(2)\n    return artifact\n'
    )
    plan = load_graph(
        "version: 1\nname: work\n"
        f"tools:\n  - {{name: produce, code: {produce}}}\n  - {{name: consume, code: {consume}}}\n"
        "validations:\n  - {name: echo, entrypoint: 'gategraph.runtime.testing:echo'}\n"
        "nodes:\n  - {id: a, tool: produce}\n  - {id: b, tool: consume, needs: [a]}\n"
        "  - {id: c, validation: echo, needs: [b]}\n"
    )
    run = await execute_graph(plan)
    assert run.passed, run.nodes
    assert run.nodes["b"].output == {"items": [1, 2]}


@pytest.mark.anyio
async def test_an_artifact_too_deep_to_freeze_is_copied_not_a_crash() -> None:
    """Valid JSON nested deeper than freezing walks (or a list that holds itself): copied
    for the round instead, and the run goes on."""
    deep = json.loads("[" * 600 + "]" * 600)
    code = json.dumps('def run(artifact):\n    return {"passed": isinstance(artifact, list)}\n')
    plan = load_graph(
        f"version: 1\nname: deep\nvalidations:\n  - {{name: v, code: {code}}}\n"
        "nodes:\n  - {id: n, validation: v, isolation: thread}\n"
    )
    run = await execute_graph(plan, artifact=deep)
    assert run.passed
    looped: list[Any] = []
    looped.append(looped)
    assert freeze(looped) is not looped


def test_only_the_testing_module_s_own_fakes_are_gategraph_s_own() -> None:
    """`gategraph.runtime.testing:anyio.run_process` reaches code that is not a fake: it is
    sandboxed like any other entrypoint."""
    from gategraph.runtime._data._builtins import in_process
    from gategraph.runtime._data._models import Validation

    def named(entrypoint: str) -> bool:
        return in_process(Validation.from_config({"name": "v", "entrypoint": entrypoint}))

    assert named("gategraph.runtime.testing:passing")
    assert not named("gategraph.runtime.testing:anyio.run_process")
    assert not named("gategraph.runtime.testing:Path")


def test_without_the_sandbox_untrusted_code_loads_under_the_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the fallback must load a graph's module here to call it in a worker process,
    its top level runs under the guard: a write it attempts while it loads is refused, and
    the graph with it, in one line naming the field."""
    import gategraph.runtime._base._kernel as kernel

    monkeypatch.setattr(kernel, "_support", NO_SANDBOX)
    target = tmp_path / "written-at-import"
    (tmp_path / "gg_writes_at_import.py").write_text(
        f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
        "def run():\n    return {'passed': True}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (
        "version: 1\nname: g\nvalidations:\n"
        "  - {name: v, entrypoint: 'gg_writes_at_import:run'}\n"
        "nodes:\n  - {id: n, validation: v}\n"
    )
    with pytest.raises(ConfigError, match="attempted, while it loaded: opening"):
        load_graph(text)
    assert not target.exists()


@pytest.mark.anyio
@pytest.mark.parametrize("prefix", [False, True], ids=["beside", "prefix"])
async def test_the_interpreter_s_bytecode_cache_is_not_charged_to_guarded_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: bool
) -> None:
    """Where the interpreter writes bytecode caches (as it does unless told not to), a
    module first imported under the guard, while the graph loads or during a call, is not
    refused for the `__pycache__` (or the `sys.pycache_prefix` folders) Python would have
    made: the cache is not written, and the validation is not charged."""
    import sys
    import uuid

    import gategraph.runtime._base._kernel as kernel

    monkeypatch.setattr(kernel, "_support", NO_SANDBOX)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache = tmp_path / "cache"
    monkeypatch.setattr(sys, "pycache_prefix", str(cache) if prefix else None)
    code = tmp_path / "code"
    code.mkdir()
    # Names of this test's own: each is imported, and cached, for the first time here.
    at_load, helper, in_call, late = (f"gg_{uuid.uuid4().hex}" for _ in range(4))
    (code / f"{at_load}.py").write_text(
        f"import {helper}\ndef run():\n    return {{'passed': {helper}.OK}}\n"
    )
    (code / f"{helper}.py").write_text("OK = True\n")
    (code / f"{in_call}.py").write_text(
        f"def run():\n    import {late}\n    return {{'passed': {late}.OK}}\n"
    )
    (code / f"{late}.py").write_text("OK = True\n")
    monkeypatch.syspath_prepend(str(code))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no sandboxes here, said once
        graph = load_graph(
            "version: 1\nname: g\nvalidations:\n"
            f"  - {{name: at_load, entrypoint: '{at_load}:run'}}\n"
            f"  - {{name: in_call, entrypoint: '{in_call}:run'}}\n"
            "nodes:\n  - {id: a, validation: at_load}\n"
            "  - {id: b, validation: in_call, isolation: thread}\n"
        )
        run = await execute_graph(graph)
    assert {node: result.result.passed for node, result in run.nodes.items()} == {
        "a": True,
        "b": True,
    }
    # The node that declared its isolation trusts its module: loaded unguarded, cached.
    # (Under the prefix, so is what else this process imports first meanwhile.)
    cached = {path.name.split(".")[0] async for path in anyio.Path(tmp_path).rglob("*.pyc")}
    assert cached & {at_load, helper, in_call, late} == {in_call}


def test_a_package_that_extends_its_own_path_is_not_refused_by_the_static_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only importing a package shows what it adds to its own ``__path__`` (pkgutil
    style): a submodule the static check cannot find is left to the sandbox, never refused
    at load; a top-level module that is not there still is."""
    package = tmp_path / "gg_extpkg"
    package.mkdir()
    (tmp_path / "extra").mkdir()
    (package / "__init__.py").write_text(f"__path__.append({str(tmp_path / 'extra')!r})\n")
    (tmp_path / "extra" / "sub.py").write_text("def run():\n    return {'passed': True}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (
        "version: 1\nname: g\nvalidations:\n"
        "  - {name: v, entrypoint: 'gg_extpkg.sub:run'}\n"
        "nodes:\n  - {id: n, validation: v}\n"
    )
    load_graph(text)  # not refused: nothing here can tell without importing it
    with pytest.raises(ConfigError, match="cannot import 'gg_extpkg_missing'"):
        load_graph(text.replace("gg_extpkg.sub", "gg_extpkg_missing"))
