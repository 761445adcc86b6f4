"""Failing well: what cannot run is refused before it runs, built-ins are found by name,
nothing is fixed that a fix cannot help, and a finished plan leaves nothing behind."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from _helpers import run_process
from gategraph.runtime import (
    Catalog,
    ConfigError,
    MemoryEventLog,
    PlanGraph,
    Validation,
    load_graph,
    run_plan,
)
from gategraph.runtime._data._maxn import FAULT_CATALOGUE
from gategraph.runtime._running._pipeline import (
    Rejected,
    check_payload,
    payload_reason,
    round_faults,
    routing_reason,
    uncallable_reason,
    work_failed_reason,
)

ROOT = Path(__file__).parents[2]
GATEGRAPH = [sys.executable, "-m", "gategraph.runtime"]


def run_cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user does, in a subprocess."""
    return run_process([*GATEGRAPH, *args], cwd=cwd, env={**os.environ, **(env or {})})


# -- imports are declared dependencies ------------------------------------------------------

# Distribution name → the module it installs, for the ones that differ.
_MODULE_OF = {
    "python-ulid": "ulid",
    "pyyaml": "yaml",
    "opentelemetry-api": "opentelemetry",
    "pydantic-ai-slim": "pydantic_ai",
}


# Shipped with a dependency it belongs to (pydantic pins its own core exactly), or used
# by type checkers only.
_PART_OF = {"pydantic_core", "typing_extensions"}
# User projects shipped as example data, not gategraph's code.
_DATA = ("demo-repo", "project")


def _code(folder: str) -> list[Path]:
    return [p for p in sorted((ROOT / folder).rglob("*.py")) if not set(_DATA) & set(p.parts)]


def _modules(requirements: list[str]) -> set[str]:
    names = set(_PART_OF)
    for requirement in requirements:
        name = requirement.split(";")[0].split("[")[0]
        for mark in "<>=!~ ":
            name = name.split(mark)[0]
        names.add(_MODULE_OF.get(name.lower(), name.lower().replace("-", "_")))
    return names


def _top_level_imports(tree: ast.Module) -> set[str]:
    """Modules a file imports when it is imported: not in functions, not type-only."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                pass  # an optional import guarded by its own ImportError handler
            elif isinstance(node, ast.ClassDef):
                visit(node.body)

    visit(tree.body)
    return found


# Modules only their importer loads, which brings what they import: pytest's plugin (the
# pytest11 entry point) is imported by pytest alone.
_LOADED_BY: dict[str, set[str]] = {"runtime/pytest_plugin.py": {"pytest"}}


def test_every_import_at_import_time_is_a_declared_dependency() -> None:
    """A module-level import in the installed packages is the standard library, gategraph
    itself or a core dependency: an extra (or a dependency of a dependency) would break a
    base install."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = _modules(project["dependencies"]) | {"gategraph"} | set(sys.stdlib_module_names)
    offenders = []
    for folder in ("runtime", "validators", "graphs", "benchmarks"):
        for path in _code(folder):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            here = _LOADED_BY.get(path.relative_to(ROOT).as_posix(), set())
            modules = sorted(_top_level_imports(tree) - allowed - here)
            offenders += [f"{path.relative_to(ROOT)}: {module}" for module in modules]
    assert offenders == []


def test_every_lazy_import_is_declared_somewhere() -> None:
    """Imports inside functions are a core dependency or one of the declared extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project["optional-dependencies"].values() for r in group]
    allowed = (
        _modules(project["dependencies"] + extras) | {"gategraph"} | set(sys.stdlib_module_names)
    )
    offenders = []
    for folder in ("runtime", "validators"):
        for path in _code(folder):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name.split(".")[0] for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module.split(".")[0]]
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n not in allowed]
    assert offenders == []


# -- what cannot be called is reported by check ---------------------------------------------

BROKEN = """\
version: 1
name: broken
resources:
  repo: {kind: directory, path: .}
validations:
  - {name: noimport, entrypoint: "gategraph_no_such_module:run"}
  - {name: norun, code: "x = 1\\n"}
  - {name: badimport, code: "import gategraph_no_such_module\\ndef run(**_):\\n    return {'passed': True}\\n"}
tools:
  - {name: remote, mcp_server: srv, mcp_tool_name: t}
nodes:
  - {id: a, validation: noimport}
  - {id: b, validation: norun}
  - {id: c, validation: badimport}
  - {id: d, tool: remote}
  - {id: e, validation: python_syntax, resources: []}
  - {id: f, validation: regex, arguments: {patern: x}}
"""


def test_check_reports_everything_that_cannot_be_called(tmp_path: Path) -> None:
    """Each uncallable definition, unbound slot and misspelled argument is one line with
    its file, line, column and field; exit 2; no traceback."""
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    done = run_cli("check", str(path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr
    fields = [line.split(": ")[2] for line in lines]
    assert fields == [
        "validations[0].entrypoint",
        "validations[1].code",
        "validations[2].code",
        "tools[0].mcp_server",
        "nodes[4].resources",
        "nodes[5].arguments.patern",
    ]
    assert lines[0].startswith(f"error: {path}:6:")
    assert "cannot import 'gategraph_no_such_module'" in lines[0]
    assert "must define `run(...)`" in lines[1]
    assert "unknown MCP server 'srv'" in lines[3]
    assert "slot 'root'" in lines[4]
    assert "unknown argument (did you mean 'pattern'?)" in lines[5]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes:\n", "nodes: must be a list of nodes (each `- id: ...`), not empty"),
        (
            "nodes: [{id: a, tool: t, needs: 5}]\ntools: [{name: t, code: 'def run(**_): pass'}]\n",
            "nodes[0].needs: must be a name or a list of names, not a number",
        ),
        (
            "nodes: [{id: a, tool: t}]\ntools: [{name: t, code: 'def run(**_): pass'}]\n"
            "lifecycle: {exector: {uses: 'a:b'}}\n",
            "lifecycle.exector: unknown field (did you mean 'executor'?)",
        ),
    ],
    ids=["empty-nodes", "needs-a-number", "lifecycle-typo"],
)
def test_messages_say_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    """Messages a user meets read as English, with a suggestion for a typo."""
    path = tmp_path / "g.yaml"
    path.write_text("version: 1\nname: g\n" + text)
    with pytest.raises(ConfigError) as info:
        load_graph(path)
    assert message in str(info.value)


def test_a_resource_with_a_bad_kind_is_still_named(tmp_path: Path) -> None:
    """A resource whose own definition is broken is listed among the declared ones."""
    path = tmp_path / "g.yaml"
    path.write_text(
        "version: 1\nname: g\nresources: {repo: {kind: folder, path: .}}\n"
        "tools: [{name: t, code: 'def run(**_): pass'}]\n"
        "nodes: [{id: a, tool: t, resources: [rep]}]\n"
    )
    with pytest.raises(ConfigError) as info:
        load_graph(path)
    assert "unknown resource 'rep' (the graph declares: repo)" in str(info.value)


# -- built-ins by name ------------------------------------------------------------------------


def test_builtins_by_name_in_a_graph(tmp_path: Path) -> None:
    """`validation: python_syntax` needs no declaration: schema and slot come with it."""
    (tmp_path / "a.py").write_text("x = 1\n")
    graph = load_graph(
        f"version: 1\nname: g\nresources: {{repo: {{kind: directory, path: '{tmp_path}'}}}}\n"
        "nodes:\n  - {id: syntax, validation: python_syntax}\n"
        "  - {id: todo, validation: regex, arguments: {pattern: TODO}}\n"
    )
    syntax = graph.get_tool("python_syntax")
    assert isinstance(syntax, Validation)
    assert [slot.name for slot in syntax.resource_slots] == ["root"]


@pytest.mark.anyio
async def test_a_plan_of_builtins_runs_and_applies(tmp_path: Path) -> None:
    """Built-ins found by name run for real in a plan."""
    (tmp_path / "a.py").write_text("x = 1\n")
    graph = load_graph(
        f"version: 1\nname: g\nresources: {{repo: {{kind: directory, path: '{tmp_path}'}}}}\n"
        "nodes:\n  - {id: syntax, validation: python_syntax}\n"
        "  - {id: todo, validation: regex, arguments: {pattern: TODO}}\n"
    )
    outcome = await run_plan(graph, event_log=MemoryEventLog())
    assert outcome.status == "applied", outcome.message
    assert {r.node: r.result.passed for r in outcome.validations} == {"syntax": True, "todo": True}


def test_builtins_by_name_in_the_catalog() -> None:
    """The catalog finds built-ins for attach and get; their arguments are checked; a
    registered validation of the same name wins; a built-in cannot be removed."""
    catalog = Catalog.in_memory()
    assert "regex" in catalog
    attachment = catalog.attach("src/", "regex", arguments={"pattern": "TODO"})
    assert [a.id for a in catalog.resolve("src/")] == [attachment.id]
    with pytest.raises(ConfigError, match=r"arguments\.patern: unknown argument"):
        catalog.attach("src/", "regex", arguments={"patern": "TODO"})
    with pytest.raises(ConfigError, match=r"arguments\.pattern: missing argument"):
        catalog.attach("src/", "regex")
    assert [t.name for t in catalog.list()] == ["regex"]  # attached: registered
    fresh = Catalog.in_memory()
    with pytest.raises(Exception, match="built-in validation: it cannot be removed"):
        fresh.remove("python_syntax")
    fresh.add(Validation.from_config({"name": "python_syntax", "code": "def run(**_): pass"}))
    assert fresh.get("python_syntax").source.value == "code"  # the user's wins


def test_attach_a_builtin_from_the_command_line(tmp_path: Path) -> None:
    """`gategraph validation attach RESOURCE BUILTIN` works on an empty catalog."""
    env = {"GATEGRAPH_HOME": str(tmp_path / "home")}
    done = run_cli(
        "validation", "attach", "repo", "regex", "--arg", "pattern=TODO", cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    odd = run_cli(
        "validation", "attach", "src/", "regex", "--arg", "pattern=x", cwd=tmp_path, env=env
    )
    assert odd.returncode == 0
    assert odd.stderr.startswith("warning: no plan graph can name a resource 'src/'")
    bad = run_cli(
        "validation", "attach", "repo", "regex", "--arg", "patern=TODO", cwd=tmp_path, env=env
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith(
        "error: arguments.patern: unknown argument (did you mean 'pattern'?)"
    )
    assert "Traceback" not in bad.stderr


# -- at run time ------------------------------------------------------------------------------


def _graph(
    validations: list[dict[str, Any]], nodes: list[dict[str, Any]], **policy: Any
) -> PlanGraph:
    return load_graph(
        {
            "version": 1,
            "name": "g",
            "resources": {"notes": {"kind": "memory", "files": {"a.txt": "hi"}}},
            "validations": validations,
            "nodes": nodes,
            "policy": policy,
        }
    )


@pytest.mark.anyio
async def test_an_uncallable_attachment_refuses_the_plan_before_it_starts() -> None:
    """A catalog attachment that cannot be called: ConfigError, nothing logged."""
    catalog = Catalog.in_memory()
    catalog.add(
        Validation.from_config({"name": "gone", "entrypoint": "gategraph_no_such_module:run"})
    )
    catalog.attach("notes", "gone")
    graph = _graph(
        [{"name": "ok", "code": "def run(**_):\n    return {'passed': True}\n"}],
        [{"id": "ok", "validation": "ok"}],
    )
    log = MemoryEventLog()
    with pytest.raises(ConfigError, match="the attached validation 'gone' cannot be called"):
        await run_plan(graph, catalog=catalog, event_log=log, plan_id="refused")
    assert await log.read("refused") == []


@pytest.mark.anyio
async def test_a_runtime_bug_is_a_permanent_fault_not_a_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error raised inside the default executor (not by a tool) escalates at once as
    runtime_fault: the work is never sent back to be fixed."""
    from gategraph.runtime._lifecycle import _supervisor

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("got multiple values for keyword argument 'plan_id'")

    graph = load_graph(
        {
            "version": 1,
            "name": "g",
            "tools": [{"name": "work", "code": "def run(**_):\n    return {'x': 1}\n"}],
            "validations": [{"name": "ok", "code": "def run(**_):\n    return {'passed': True}\n"}],
            "nodes": [
                {"id": "w", "tool": "work"},
                {"id": "ok", "validation": "ok", "needs": ["w"]},
            ],
        }
    )
    monkeypatch.setattr(_supervisor, "execute_graph", broken)
    outcome = await run_plan(graph, event_log=MemoryEventLog())
    assert outcome.status == "awaiting_decision"
    assert outcome.statistics.fixes == 0
    assert [a["retryDecision"] for a in outcome.attempts] == ["escalate-permanent"]
    assert outcome.attempts[0]["faultKind"] == "runtime_fault"


def test_routing_faults_keep_their_kind_through_the_log() -> None:
    """Routing reasons say their fault kind in their text, so replay reads the same kind
    back as the supervisor decided on."""
    reasons = [
        uncallable_reason("lint", "entrypoint: cannot import 'x'"),
        work_failed_reason("ConfigError: nodes[0].tool: no run", "misconfigured"),
        work_failed_reason("TypeError: boom", "runtime_fault"),
        work_failed_reason("KeyError: 'model'", "work_error"),
        work_failed_reason("ValueError: the tool failed", None),
    ]
    for reason in reasons:
        assert routing_reason(str(reason)) == reason
    kinds = [round_faults(Rejected("routing", (r,)))[0].kind for r in reasons]
    assert kinds == ["misconfigured", "misconfigured", "runtime_fault", "work_error", "rejected"]
    assert all(FAULT_CATALOGUE[k].permanent for k in kinds[:4])
    (not_json,) = check_payload({"file": Path("a")}, None)
    assert payload_reason(str(not_json)) == not_json and not_json.error == "work_error"
    (mismatch,) = check_payload({}, {"type": "object", "required": ["x"]})
    assert payload_reason(str(mismatch)) == mismatch and mismatch.error is None


# -- a plan nothing gates ---------------------------------------------------------------------

INFORMATIONAL = {
    "name": "hint",
    "mode": "informational",
    "code": "def run(**_):\n    return {'passed': False, 'message': 'a hint'}\n",
}


@pytest.mark.anyio
async def test_a_plan_without_a_required_validation_is_not_applied() -> None:
    """Only informational validations: a permanent fault, escalated; never attested."""
    outcome = await run_plan(_graph([INFORMATIONAL], [{"id": "hint", "validation": "hint"}]))
    assert outcome.status == "awaiting_decision"
    assert outcome.verdict is not None and outcome.verdict["verdict"] == "reject"
    assert [a["faultKind"] for a in outcome.attempts] == ["no_acceptance_criteria"]
    assert outcome.changes == {}


@pytest.mark.anyio
async def test_a_policy_may_allow_an_ungated_plan() -> None:
    """`policy.allow_ungated: true` applies it, and the verdict says why it passed."""
    graph = _graph([INFORMATIONAL], [{"id": "hint", "validation": "hint"}], allow_ungated=True)
    outcome = await run_plan(graph)
    assert outcome.status == "applied"
    assert outcome.verdict is not None
    assert "allows an ungated plan" in outcome.verdict["findings"][0]["reasoning"]


# -- nothing left behind ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_embedded_plan_writes_nothing_into_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory log and no catalog: no audit file, no sandboxes in the current folder;
    a directory resource keeps no journal after its Apply."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.py").write_text("x = 1\n")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("GATEGRAPH_HOME")
    graph = load_graph(
        {
            "version": 1,
            "name": "g",
            "resources": {"repo": {"kind": "directory", "path": str(project)}},
            "tools": [
                {
                    "name": "edit",
                    "resource_slots": ["repo"],
                    "code": "def run(repo, **_):\n    (repo / 'b.py').write_text('y = 2\\n')\n",
                }
            ],
            "nodes": [
                {"id": "edit", "tool": "edit"},
                {"id": "syntax", "validation": "python_syntax", "needs": ["edit"]},
            ],
        }
    )
    outcome = await run_plan(graph, event_log=MemoryEventLog())
    assert outcome.status == "applied", outcome.message
    assert sorted(p.name for p in project.iterdir()) == ["a.py", "b.py"]
    assert list(work.iterdir()) == []


def test_the_demo_graphs_apply_with_the_default_executor(tmp_path: Path) -> None:
    """`gategraph run` on each example graph with a tool node (the default executor)
    applies, on a copy of the example's project."""
    import shutil

    shutil.copytree(
        ROOT / "graphs", tmp_path / "graphs", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("demo-review.yaml", "release-check.yaml"):
        done = run_cli(
            "run",
            str(tmp_path / "graphs" / name),
            cwd=tmp_path,
            env={"GATEGRAPH_HOME": str(tmp_path / "h")},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "applied" in done.stdout
    assert not (tmp_path / "graphs" / "demo-repo" / ".gategraph-journal").exists()


@pytest.mark.parametrize("isolation", ["thread", None])
def test_writes_to_the_stdout_descriptor_never_reach_json_output(
    tmp_path: Path, isolation: str | None
) -> None:
    """A validation writing to file descriptor 1 itself: `run --json` stays one JSON
    document on stdout. In gategraph's own process (a declared `thread`) the stray bytes go
    to standard error; in the sandbox (the default) the worker keeps them in the record."""
    import json

    declared = f", isolation: {isolation}" if isolation else ""
    graph = tmp_path / "fd.yaml"
    graph.write_text(
        "version: 1\nname: fd\nresources: {notes: {kind: memory, files: {a.txt: hi}}}\n"
        "validations:\n  - name: noisy\n    code: |\n      import os\n"
        "      def run(**_):\n          os.write(1, b'junk on fd 1\\n')\n"
        "          print('a captured print')\n          return {'passed': True}\n"
        f"nodes: [{{id: n, validation: noisy{declared}}}]\n"
    )
    done = run_cli("run", str(graph), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["status"] == "applied"
    records = json.dumps(document["validations"])
    assert "junk on fd 1" in (done.stderr if isolation else records)
    assert "a captured print" not in done.stderr  # kept in the record instead:
    assert "a captured print" in records


@pytest.mark.anyio
async def test_a_tool_s_output_is_in_its_node_completed_event() -> None:
    """What a work node's tool prints is kept in its event, so the log shows it."""
    from gategraph.runtime import execute_graph

    graph = load_graph(
        {
            "version": 1,
            "name": "g",
            "tools": [
                {"name": "talk", "code": "def run(**_):\n    print('hello')\n    return 1\n"}
            ],
            "nodes": [{"id": "t", "tool": "talk"}],
        }
    )
    log = MemoryEventLog()
    run = await execute_graph(graph, event_log=log)
    (completed,) = [e for e in await log.read(run.plan_id) if type(e).__name__ == "NodeCompleted"]
    assert completed.captured is not None and "hello" in completed.captured["stdout"]


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (
            "validations:\n  - name: v\n    code: \"def run(**_):\\n    return {'passed': True}\\n\"\n"
            "    hooks: {setup: 'gategraph_no_such_module:up'}\n"
            "nodes: [{id: n, validation: v}]\n",
            "validations[0].hooks.setup",
            "cannot import 'gategraph_no_such_module'",
        ),
        (
            "validations:\n  - name: v\n    code: \"def run(pattern):\\n    return {'passed': True}\\n\"\n"
            "nodes: [{id: n, validation: v}]\n",
            "nodes[0].arguments",
            "'v' requires the argument 'pattern', which the node does not give",
        ),
        (
            "tools: [{name: t, code: 'def run(**_): pass'}]\nnodes: [{id: n, tool: t}]\n"
            "lifecycle: {executor: {uses: 'collections:OrderedDict'}}\n",
            "lifecycle.executor.uses",
            "has no `async execute(request)` and `async fix(request)`",
        ),
        (
            "tools: [{name: t, code: 'def run(**_): pass'}]\nnodes: [{id: n, tool: t}]\n"
            "lifecycle: {strategy: {uses: 'gategraph_no_such_module:S'}}\n",
            "lifecycle.strategy.uses",
            "cannot import 'gategraph_no_such_module'",
        ),
        (
            "tools: [{name: t, read_only: true, entrypoint: 'gategraph_no_such_module:run'}]\n"
            "validations: [{name: v, wraps: t, transform: output}]\n"
            "nodes: [{id: n, validation: v}]\n",
            "tools[0].entrypoint",  # once, where it is written: not again for `v`
            "cannot import 'gategraph_no_such_module'",
        ),
    ],
    ids=["hook-import", "missing-parameter", "executor-methods", "strategy-import", "wrapped"],
)
def test_check_reports_what_would_fail_later(
    tmp_path: Path, text: str, field: str, message: str
) -> None:
    """Hooks, required parameters and lifecycle actors are checked before anything runs."""
    path = tmp_path / "g.yaml"
    path.write_text("version: 1\nname: g\n" + text)
    with pytest.raises(ConfigError) as info:
        load_graph(path)
    (issue,) = info.value.issues
    assert issue.field == field
    assert message in issue.message


@pytest.mark.anyio
async def test_a_builtin_s_bad_arguments_escalate_at_once() -> None:
    """A pattern that does not compile is the configuration's fault: no fix is asked for."""
    graph = load_graph(
        "version: 1\nname: g\nresources: {notes: {kind: memory, files: {a.txt: hi}}}\n"
        "nodes: [{id: r, validation: regex, arguments: {pattern: '['}}]\n"
    )
    outcome = await run_plan(graph)
    assert outcome.status == "awaiting_decision"
    assert outcome.statistics.fixes == 0
    assert [(a["retryDecision"], a["faultKind"]) for a in outcome.attempts] == [
        ("escalate-permanent", "bad_arguments")
    ]


class _Raises:
    """An execution actor that raises what careless code raises: SystemExit(3) or a
    CancelledError of its own."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    async def execute(self, request: Any) -> Any:
        raise self.exc

    async def fix(self, request: Any) -> Any:
        raise self.exc


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("exc", "shown"),
    [
        (SystemExit(3), "SystemExit(3)"),
        (asyncio.CancelledError(), "CancelledError()"),
        (GeneratorExit(), "GeneratorExit()"),
    ],
)
async def test_an_execution_actor_raising_a_base_exception_fails_its_work_not_the_program(
    exc: BaseException, shown: str
) -> None:
    """SystemExit (and a CancelledError nothing cancelled) from the execution actor is its
    failure: the plan goes on, and records it."""
    graph = _graph(
        [{"name": "ok", "code": "def run(**_):\n    return {'passed': True}\n"}],
        [{"id": "ok", "validation": "ok"}],
        retry_limit=0,
        strategy_revisions=0,
    )
    from gategraph.runtime import Supervisor

    supervisor = Supervisor(graph, event_log=MemoryEventLog())
    supervisor.execution_actor = _Raises(exc)
    outcome = await supervisor.run()
    assert outcome.status == "awaiting_decision"
    assert f"the execution actor raised {shown}" in outcome.rounds[0].failures[0]


@pytest.mark.parametrize("command", ["run", "execute"])
def test_json_output_survives_threads_and_swapped_streams(tmp_path: Path, command: str) -> None:
    """A validation that prints from a thread of its own and then replaces sys.stdout:
    --json still prints exactly one JSON document on stdout. (Declared trusted: this is
    gategraph's own process protecting its output; a sandboxed call's output is its
    worker's.)"""
    import json

    graph = tmp_path / "th.yaml"
    graph.write_text(
        "version: 1\nname: th\nresources: {notes: {kind: memory, files: {a.txt: hi}}}\n"
        "validations:\n  - name: noisy\n    code: |\n      import io, sys, threading\n"
        "      def run(**_):\n"
        "          worker = threading.Thread(target=lambda: print('FROM THREAD'))\n"
        "          worker.start()\n          worker.join()\n"
        "          sys.stdout = io.StringIO()\n          return {'passed': True}\n"
        "nodes: [{id: n, validation: noisy, isolation: thread}]\n"
    )
    done = run_cli(command, str(graph), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    assert "FROM THREAD" in done.stderr


def test_small_cli_refusals_are_one_clear_line(tmp_path: Path) -> None:
    """A plan id that is not one, a duplicate registration and an unusable home: one line
    each, exit 1 or 2, nothing written."""
    home = tmp_path / "home"
    env = {"GATEGRAPH_HOME": str(home)}
    graph = tmp_path / "g.yaml"
    graph.write_text(
        'version: 1\nname: g\nvalidations: [{name: v, code: "def run(**_):\\n    return '
        "{'passed': True}\\n\"}]\nnodes: [{id: n, validation: v}]\n"
    )
    bad_id = run_cli("execute", str(graph), "--plan-id", "../x", cwd=tmp_path, env=env)
    assert (bad_id.returncode, bad_id.stderr.count("\n")) == (2, 1)
    assert bad_id.stderr.startswith("error: --plan-id: '../x' is not a plan id")
    config = tmp_path / "v.yaml"
    config.write_text("name: v\ncode: \"def run(**_):\\n    return {'passed': True}\\n\"\n")
    assert (
        run_cli("validation", "add", "--config", str(config), cwd=tmp_path, env=env).returncode == 0
    )
    again = run_cli("validation", "add", "--config", str(config), cwd=tmp_path, env=env)
    assert again.returncode == 1
    assert again.stderr == (
        f"error: {config}: a validation named 'v' exists already (add --update to replace it)\n"
    )
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    demo = run_cli("demo", "--dir", "d", cwd=tmp_path, env={"GATEGRAPH_HOME": str(not_a_folder)})
    assert demo.returncode == 2 and demo.stderr.startswith(
        f"error: {not_a_folder}: is not a folder"
    )
    assert not (tmp_path / "d").exists()


# -- work that fails the same way every time --------------------------------------------------


class _Scripted:
    """An execution actor whose attempts do what ``steps`` say, in turn: raise an error,
    or return an artifact; it counts its attempts (each a paid model call, say)."""

    def __init__(self, *steps: Any) -> None:
        self.steps = list(steps)
        self.calls = 0

    async def _next(self) -> Any:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if isinstance(step, Exception):
            raise step
        return step

    async def execute(self, request: Any) -> Any:
        return await self._next()

    async def fix(self, request: Any) -> Any:
        return await self._next()


def _gated(**policy: Any) -> PlanGraph:
    return _graph(
        [{"name": "ok", "code": "def run(**_):\n    return {'passed': True}\n"}],
        [{"id": "ok", "validation": "ok"}],
        **{"retry_limit": 5, "strategy_revisions": 1, **policy},
    )


async def _run(actor: _Scripted) -> tuple[Any, MemoryEventLog]:
    from gategraph.runtime import Supervisor

    log = MemoryEventLog()
    supervisor = Supervisor(_gated(), event_log=log)
    supervisor.execution_actor = actor
    return await supervisor.run(), log


@pytest.mark.anyio
async def test_the_same_error_twice_from_the_executor_goes_to_a_person() -> None:
    """A programming error raises the same way at every attempt: the second time is a
    permanent work_error, not four more paid attempts; a replay decides the same."""
    from gategraph.runtime import replay_plan

    actor = _Scripted(KeyError("model"))
    outcome, log = await _run(actor)
    assert outcome.status == "awaiting_decision"
    assert actor.calls == 2
    assert [(a["faultKind"], a["retryDecision"]) for a in outcome.attempts] == [
        ("rejected", "fix"),
        ("work_error", "escalate-permanent"),
    ]
    assert "the execution actor failed the same way twice: KeyError: 'model'" in str(
        outcome.rounds[-1].failures
    )
    report = replay_plan(await log.read(outcome.plan_id), _gated())
    assert report.matches, report


@pytest.mark.anyio
async def test_different_errors_from_the_executor_are_fixed_as_usual() -> None:
    actor = _Scripted(KeyError("model"), ValueError("bad reply"), {"done": True})
    outcome, _ = await _run(actor)
    assert outcome.status == "applied", outcome.message
    assert actor.calls == 3
    assert [a["faultKind"] for a in outcome.attempts] == ["rejected", "rejected", None]


@pytest.mark.anyio
async def test_an_artifact_that_cannot_be_encoded_goes_to_a_person_at_once() -> None:
    """A path object in the artifact is not JSON: the same code would send it again."""
    actor = _Scripted({"file": Path("a.txt")})
    outcome, log = await _run(actor)
    assert outcome.status == "awaiting_decision"
    assert actor.calls == 1
    assert [a["faultKind"] for a in outcome.attempts] == ["work_error"]
    assert "the artifact is not JSON-compatible" in str(outcome.rounds[0].failures)
    from gategraph.runtime import replay_plan

    report = replay_plan(await log.read(outcome.plan_id), _gated())
    assert report.matches, report


@pytest.mark.anyio
async def test_a_network_error_twice_is_not_a_work_error() -> None:
    """A connection refused twice may pass the third time: fixed as usual, on the budget."""
    actor = _Scripted(
        ConnectionRefusedError("api down"), TimeoutError("slow"), TimeoutError("slow"), {"ok": 1}
    )
    outcome, _ = await _run(actor)
    assert outcome.status == "applied", outcome.message
    assert [a["faultKind"] for a in outcome.attempts] == ["rejected", "rejected", "rejected", None]
