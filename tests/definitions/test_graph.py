"""Plan graphs: the YAML format, the loader's checks, the accessors and ``gategraph check``.

Every check reports ``FILE:LINE:COL: field.path: what is wrong``, and a file's problems
are reported all at once, as one ``ConfigError``.
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from _helpers import run_process
from click.testing import CliRunner, Result
from gategraph.runtime import (
    Catalog,
    ConfigError,
    ResourceSlot,
    Tool,
    ToolSource,
    Validation,
    ValidationMode,
)
from gategraph.runtime._cli import cli
from gategraph.runtime._definitions._graph import (
    AcceptanceCriterion,
    ApprovalPolicy,
    ApprovalRule,
    Node,
    NodeKind,
    PlanGraph,
    Policy,
    ResourceSpec,
    load_graph,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GRAPHS = importlib.resources.files("gategraph.graphs")
EXAMPLES = sorted(p.name for p in GRAPHS.iterdir() if p.name.endswith((".yaml", ".yml")))

HEAD = "version: 1\nname: g\n"
TOOL = "tools: [{name: t, code: 'def run(**_): pass'}]\n"

GOOD = """\
version: 1
name: fix-lint
project: web
description: Fix the lint and prove it.
resources:
  repo: {kind: directory, path: repo}
  notes: {kind: memory, files: {"README.md": "hello"}}
tools:
  - name: make-change
    code: |
      def run(**_): return {"files": ["src/app.py"]}
  - name: ruff
    read_only: true
    timeout: 30
    resource_slots: [{name: root, kind: directory}]
    code: |
      def run(root, **_): return {"exit_code": 0}
validations:
  - name: lint-clean
    wraps: ruff
    transform: "{'passed': output['exit_code'] == 0}"
  - name: syntax-ok
    entrypoint: gategraph.validators:python_syntax
    resource_slots: [{name: root, kind: directory}]
  - name: advice
    mode: informational
    code: "def run(**_): return {'passed': True}"
nodes:
  - id: change
    tool: make-change
    resources: [repo]
  - id: syntax
    validation: syntax-ok
    needs: [change]
    resources: [repo]
  - id: lint
    validation: lint-clean
    needs: change
    resources: [repo]
  - id: hints
    validation: advice
    needs: [change]
  - id: review
    uses: collections:OrderedDict
    needs: [syntax, lint]
  - id: again
    tool: lint-clean
    needs: [change]
    resources: [repo]
acceptance:
  - id: AC1
    text: The code parses.
    validations: [syntax]
  - id: AC2
    text: The linter is happy.
    validations: [lint-clean, syntax]
policy:
  retry_limit: 2
  approval:
    auto_approve: [low]
    rules:
      - {match: "deploy*", tier: high, action: require}
"""


def write(folder: Path, text: str, name: str = "g.yaml") -> Path:
    """Write a graph file and return its path."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """The GOOD graph, with its `repo` folder beside it."""
    (tmp_path / "repo").mkdir()
    return write(tmp_path, GOOD)


def problems(path: Path, catalog: Catalog | None = None) -> list[str]:
    """Load ``path`` expecting failure; return the error's lines."""
    with pytest.raises(ConfigError) as info:
        load_graph(path, catalog=catalog)
    return str(info.value).splitlines()


# -- one check at a time -----------------------------------------------------------------------

# (id, text, line, anchor, field, message): the error is at LINE, at the column where ANCHOR
# starts on that line (column 1 without an anchor), and it is the only one.
CASES: list[tuple[str, str, int, str | None, str, str]] = [
    (
        "missing-version",
        "name: g\n" + TOOL + "nodes: [{id: a, tool: t}]\n",
        1,
        None,
        "version",
        "field required",
    ),
    (
        "version-not-int",
        "version: '1'\nname: g\n" + TOOL + "nodes: [{id: a, tool: t}]\n",
        1,
        "'1'",
        "version",
        "must be 1",
    ),
    (
        "cycle",
        HEAD
        + TOOL
        + "nodes:\n"
        + "  - {id: a, tool: t, needs: [c]}\n"
        + "  - {id: b, tool: t, needs: [a]}\n"
        + "  - {id: c, tool: t, needs: [b]}\n",
        5,
        "-",
        "nodes",
        "cycle a → b → c → a",
    ),
    (
        "unknown-need",
        HEAD + TOOL + "nodes:\n  - {id: a, tool: t}\n  - {id: b, tool: t, needs: [a, x]}\n",
        6,
        "x]",
        "nodes[1].needs[1]",
        "unknown node 'x'",
    ),
    (
        "unknown-need-suggests",
        HEAD + TOOL + "nodes:\n  - {id: build, tool: t}\n  - {id: b, tool: t, needs: buld}\n",
        6,
        "buld",
        "nodes[1].needs",
        "unknown node 'buld' (did you mean 'build'?)",
    ),
    (
        "misspelt-builtin-suggests",
        HEAD + "nodes:\n  - {id: a, validation: python_sintax}\n",
        4,
        "python_sintax",
        "nodes[0].validation",
        "unknown validation 'python_sintax': not defined in this graph (no catalog was "
        "given) (did you mean 'python_syntax'?)",
    ),
    (
        "self-need",
        HEAD + TOOL + "nodes:\n  - {id: a, tool: t, needs: [a]}\n",
        5,
        "a]",
        "nodes[0].needs[0]",
        "a node cannot need itself",
    ),
    (
        "need-twice",
        HEAD + TOOL + "nodes:\n  - {id: a, tool: t}\n  - {id: b, tool: t, needs: [a, a]}\n",
        6,
        "a]",
        "nodes[1].needs[1]",
        "'a' is listed twice",
    ),
    (
        "duplicate-node-id",
        HEAD + TOOL + "nodes:\n  - {id: a, tool: t}\n  - {id: a, tool: t}\n",
        6,
        "a,",
        "nodes[1].id",
        "duplicate node id 'a' (first at line 5)",
    ),
    (
        "bad-node-id",
        HEAD + TOOL + "nodes: [{id: 1a, tool: t}]\n",
        4,
        "1a",
        "nodes[0].id",
        "'1a' is not a valid id",
    ),
    (
        "two-targets",
        HEAD + TOOL + "nodes:\n  - {id: a, tool: t, uses: 'x:Y'}\n",
        5,
        "{",
        "nodes[0]",
        "give only one of `tool`, `validation` or `uses`, not `tool` and `uses`",
    ),
    (
        "no-target",
        HEAD + "nodes:\n  - {id: a}\n",
        4,
        "{",
        "nodes[0]",
        "say what the node runs",
    ),
    (
        "no-nodes",
        HEAD + "nodes: []\n",
        3,
        "[",
        "nodes",
        "a plan graph needs at least one node",
    ),
    (
        "unknown-field",
        HEAD + TOOL + "nodes:\n  - {id: a, tool: t, need: [a]}\n",
        5,
        "need",
        "nodes[0].need",
        "unknown field (did you mean 'needs'?)",
    ),
    (
        "unknown-top-field",
        HEAD + TOOL + "nodes: [{id: a, tool: t}]\nacceptence: []\n",
        5,
        "acceptence",
        "acceptence",
        "unknown field (did you mean 'acceptance'?)",
    ),
    (
        "unknown-tool",
        HEAD + "nodes: [{id: a, tool: nope}]\n",
        3,
        "nope",
        "nodes[0].tool",
        "unknown tool 'nope': not defined in this graph (no catalog was given)",
    ),
    (
        "unknown-validation",
        HEAD + "nodes: [{id: a, validation: nope}]\n",
        3,
        "nope",
        "nodes[0].validation",
        "unknown validation 'nope'",
    ),
    (
        "validation-node-runs-writing-tool",
        HEAD
        + "tools: [{name: w, writes: true, code: 'def run(**_): pass'}]\n"
        + "nodes: [{id: a, validation: w}]\n",
        4,
        "w}",
        "nodes[0].validation",
        "a validation node cannot run a tool that writes",
    ),
    (
        "validation-node-runs-plain-tool",
        HEAD + TOOL + "nodes: [{id: a, validation: t}]\n",
        4,
        "t}",
        "nodes[0].validation",
        "'t' names a tool, not a validation",
    ),
    (
        "wraps-unknown-tool",
        HEAD
        + "validations: [{name: v, wraps: ghost, transform: output}]\n"
        + "nodes: [{id: a, validation: v}]\n",
        3,
        "ghost",
        "validations[0].wraps",
        "unknown tool 'ghost': not defined in this graph",
    ),
    (
        "wraps-writing-tool",
        HEAD
        + "tools: [{name: w, writes: true, code: 'def run(**_): pass'}]\n"
        + "validations: [{name: v, wraps: w, transform: output}]\n"
        + "nodes: [{id: a, validation: v}]\n",
        4,
        "w,",
        "validations[0].wraps",
        "cannot wrap 'w': it writes, and a validation is always read-only",
    ),
    (
        "wrapping-cycle",
        HEAD
        + "validations:\n"
        + "  - {name: v1, wraps: v2, transform: output}\n"
        + "  - {name: v2, wraps: v1, transform: output}\n"
        + "nodes: [{id: a, validation: v1}]\n",
        5,
        "v1,",
        "validations[1].wraps",
        "wrapping cycle v1 → v2 → v1",
    ),
    (
        "duplicate-inline-name",
        HEAD
        + TOOL
        + "validations:\n  - {name: t, code: 'def run(**_): pass'}\n"
        + "nodes: [{id: a, tool: t}]\n",
        5,
        "t,",
        "validations[0].name",
        "duplicate name 't': tools and validations share one namespace (first defined at line 3)",
    ),
    (
        "inline-tool-error",
        HEAD
        + "tools:\n"
        + "  - {name: t, code: 'def run(**_): pass'}\n"
        + "  - {name: u, code: 'def run(**_): pass', timeout: -1}\n"
        + "nodes: [{id: a, tool: t}, {id: b, tool: u}]\n",
        5,
        "-1",
        "tools[1].timeout",
        "Input should be greater than 0",
    ),
    (
        "inline-validation-writes",
        HEAD
        + "validations:\n"
        + "  - {name: v, writes: true, code: 'def run(**_): pass'}\n"
        + "nodes: [{id: a, validation: v}]\n",
        4,
        "true",
        "validations[0].writes",
        "a validation is always read-only; remove `writes: true`",
    ),
    (
        "inline-tool-not-a-mapping",
        HEAD
        + "tools: [just-a-name, {name: t, code: 'def run(**_): pass'}]\n"
        + "nodes: [{id: a, tool: t}]\n",
        3,
        "just",
        "tools[0]",
        "a tool configuration must be a mapping of fields",
    ),
    (
        "unknown-resource",
        HEAD
        + TOOL
        + "resources: {repo: {kind: memory}}\n"
        + "nodes: [{id: a, tool: t, resources: [repo, docs]}]\n",
        5,
        "docs",
        "nodes[0].resources[1]",
        "unknown resource 'docs' (the graph declares: repo)",
    ),
    (
        "bad-resource-name",
        HEAD + TOOL + "resources:\n  my repo: {kind: memory}\nnodes: [{id: a, tool: t}]\n",
        5,
        "my",
        "resources.my repo",
        "'my repo' is not a valid id",
    ),
    (
        "directory-without-path",
        HEAD + TOOL + "resources: {repo: {kind: directory}}\nnodes: [{id: a, tool: t}]\n",
        4,
        "{kind",
        "resources.repo",
        "a directory resource needs `path`",
    ),
    (
        "memory-with-path",
        HEAD + TOOL + "resources: {m: {kind: memory, path: x}}\nnodes: [{id: a, tool: t}]\n",
        4,
        "{kind",
        "resources.m",
        "a memory resource has no `path`",
    ),
    (
        "memory-file-escapes",
        HEAD
        + TOOL
        + "resources: {m: {kind: memory, files: {../x: y}}}\n"
        + "nodes: [{id: a, tool: t}]\n",
        4,
        "{../",
        "resources.m.files",
        "'../x' must be a relative path inside the resource",
    ),
    (
        "empty-path",
        HEAD + TOOL + "resources: {repo: {kind: directory, path: ''}}\nnodes: [{id: a, tool: t}]\n",
        4,
        "''",
        "resources.repo.path",
        "must not be empty",
    ),
    (
        "directory-with-files",
        HEAD
        + TOOL
        + "resources: {repo: {kind: directory, path: ., files: {a: b}}}\n"
        + "nodes: [{id: a, tool: t}]\n",
        4,
        "{kind",
        "resources.repo",
        "`files` is only for memory resources",
    ),
    (
        "unusable-path",
        HEAD
        + TOOL
        + f"resources: {{repo: {{kind: directory, path: {'x' * 300}}}}}\n"
        + "nodes: [{id: a, tool: t}]\n",
        4,
        "xxx",
        "resources.repo.path",
        "cannot use ",
    ),
    (
        "missing-directory",
        HEAD
        + TOOL
        + "resources: {repo: {kind: directory, path: missing}}\n"
        + "nodes: [{id: a, tool: t}]\n",
        4,
        "missing",
        "resources.repo.path",
        "no such directory: ",
    ),
    (
        "directory-is-a-file",
        HEAD
        + TOOL
        + "resources: {repo: {kind: directory, path: g.yaml}}\n"
        + "nodes: [{id: a, tool: t}]\n",
        4,
        "g.yaml",
        "resources.repo.path",
        "not a directory: ",
    ),
    (
        "uses-bad-syntax",
        HEAD + "nodes: [{id: a, uses: not-an-import}]\n",
        3,
        "not-",
        "nodes[0].uses",
        "'not-an-import' is not an import path: write 'package.module:Class'",
    ),
    (
        "uses-no-module",
        HEAD + "nodes: [{id: a, uses: 'no_such_module_gg.sub:Thing'}]\n",
        3,
        "'no",
        "nodes[0].uses",
        "cannot import 'no_such_module_gg.sub': No module named 'no_such_module_gg'",
    ),
    (
        "uses-no-attribute",
        HEAD + "nodes: [{id: a, uses: 'json:Nope'}]\n",
        3,
        "'json",
        "nodes[0].uses",
        "cannot resolve 'json:Nope': module 'json' has no attribute 'Nope'",
    ),
    (
        "uses-not-a-class",
        HEAD + "nodes: [{id: a, uses: 'json:dumps'}]\n",
        3,
        "'json",
        "nodes[0].uses",
        "'json:dumps' is a function, not a class",
    ),
    (
        "criterion-bound-to-nothing",
        HEAD
        + TOOL
        + "nodes: [{id: a, tool: t}]\n"
        + "acceptance: [{id: AC1, text: x, validations: [a]}]\n",
        5,
        "a]",
        "acceptance[0].validations[0]",
        "'a' is bound to nothing: name a validation node's id or a validation that a "
        "validation node runs",
    ),
    (
        "criterion-bound-to-informational",
        HEAD
        + "validations: [{name: v, mode: informational, code: 'def run(**_): pass'}]\n"
        + "nodes: [{id: c, validation: v}]\n"
        + "acceptance: [{id: AC1, text: x, validations: [c]}]\n",
        5,
        "c]",
        "acceptance[0].validations[0]",
        "'c' runs the informational validation 'v', which never blocks",
    ),
    (
        "duplicate-criterion",
        HEAD
        + "validations: [{name: v, code: 'def run(**_): pass'}]\n"
        + "nodes: [{id: c, validation: v}]\n"
        + "acceptance:\n"
        + "  - {id: AC1, text: x, validations: [c]}\n"
        + "  - {id: AC1, text: y, validations: [v]}\n",
        7,
        "AC1",
        "acceptance[1].id",
        "duplicate acceptance criterion id 'AC1' (first at line 6)",
    ),
    (
        "empty-criterion",
        HEAD
        + TOOL
        + "nodes: [{id: a, tool: t}]\nacceptance: [{id: AC1, text: ' ', validations: [a]}]\n",
        5,
        "' '",
        "acceptance[0].text",
        "must not be empty",
    ),
    (
        "bad-policy",
        HEAD + TOOL + "nodes: [{id: a, tool: t}]\npolicy: {max_concurrency: 0}\n",
        5,
        "0",
        "policy.max_concurrency",
        "Input should be greater than or equal to 1",
    ),
    (
        "bad-approval-action",
        HEAD
        + TOOL
        + "nodes: [{id: a, tool: t}]\n"
        + "policy: {approval: {rules: [{match: '*', action: maybe}]}}\n",
        5,
        "maybe",
        "policy.approval.rules[0].action",
        "Input should be 'approve', 'require', 'deny' or 'escalate'",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "anchor", "field", "message"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_check_names_file_line_column_and_field(
    tmp_path: Path, text: str, line: int, anchor: str | None, field: str, message: str
) -> None:
    """Each check reports one line: FILE:LINE:COL: field: message, at the offending value."""
    path = write(tmp_path, text)
    column = text.splitlines()[line - 1].index(anchor) + 1 if anchor is not None else 1
    lines = problems(path)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{path}:{line}:{column}: {field}: {message}"), lines


def test_unsupported_version_is_the_only_error(tmp_path: Path) -> None:
    """Another format version stops the check: its fields would all read as errors."""
    path = write(tmp_path, "version: 2\nname: 'not a name'\nnodes: nope\n")
    assert problems(path) == [
        f"{path}:1:10: version: unsupported format version 2: this gategraph reads version 1"
    ]


def test_a_graph_must_be_a_mapping(tmp_path: Path) -> None:
    """A list, a scalar or broken YAML is one line naming the file."""
    path = write(tmp_path, "- a\n- b\n")
    assert problems(path) == [f"{path}:1:1: the plan graph must be a mapping of fields, got a list"]
    broken = write(tmp_path, "nodes: [\n", "broken.yaml")
    (line,) = problems(broken)
    assert line.startswith(f"{broken}:2:1: invalid YAML")


def test_uses_module_failing_on_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module that raises while it is imported is reported in one line, with the error."""
    (tmp_path / "gg_boom.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = write(tmp_path, HEAD + "nodes: [{id: a, uses: 'gg_boom:Actor'}]\n")
    assert problems(path) == [
        f"{path}:3:23: nodes[0].uses: cannot import 'gg_boom': RuntimeError: boom second line"
    ]


def test_each_actor_class_is_imported_once(tmp_path: Path) -> None:
    """Nodes sharing a `uses` share its import, and each reports its own error line."""
    path = write(
        tmp_path, HEAD + "nodes:\n  - {id: a, uses: 'json:Nope'}\n  - {id: b, uses: 'json:Nope'}\n"
    )
    assert [line.split(": ")[1] for line in problems(path)] == ["nodes[0].uses", "nodes[1].uses"]


def test_failed_parts_cause_no_follow_up_errors(tmp_path: Path) -> None:
    """A node or tool that is itself invalid is not reported again where it is referenced."""
    path = write(
        tmp_path,
        HEAD
        + "tools: [{name: t, code: 'def run(**_): pass', timeout: 0}]\n"
        + "resources: {r: {kind: directory}}\n"
        + "nodes:\n"
        + "  - {id: a, tool: t, resources: [r], timeout: -1}\n"
        + "  - {id: b, validation: t, needs: [a]}\n"
        + "acceptance: [{id: AC1, text: x, validations: [a]}]\n",
    )
    fields = [line.split(": ")[1] for line in problems(path)]
    assert fields == ["tools[0].timeout", "resources.r", "nodes[0].timeout"]


# -- all at once -------------------------------------------------------------------------------


def test_every_problem_is_reported_at_once_in_file_order(tmp_path: Path) -> None:
    """A file with many mistakes gives one ConfigError listing them all, sorted by position."""
    path = write(
        tmp_path,
        "name: g\n"
        "resources: {repo: {kind: directory, path: nowhere}}\n"
        "tools:\n"
        "  - {name: t, code: 'def run(**_): pass', timeout: -1}\n"
        "  - {name: w, writes: true, code: 'def run(**_): pass'}\n"
        "nodes:\n"
        "  - {id: a, tool: nope, needs: [c]}\n"
        "  - {id: b, validation: w, needs: [a]}\n"
        "  - {id: c, tool: w, needs: [b, zz], resources: [docs]}\n"
        "  - {id: a, uses: 'json:loads'}\n"
        "acceptance: [{id: AC1, text: x, validations: [ghost]}]\n"
        "policy: {retry_limit: -1}\n",
    )
    with pytest.raises(ConfigError) as info:
        load_graph(path)
    error = info.value
    assert error.source == str(path)
    assert [(i.line, i.field) for i in error.issues] == [
        (1, "version"),
        (2, "resources.repo.path"),
        (4, "tools[0].timeout"),
        (7, "nodes"),
        (7, "nodes[0].tool"),
        (8, "nodes[1].validation"),
        (9, "nodes[2].needs[1]"),
        (9, "nodes[2].resources[0]"),
        (10, "nodes[3].id"),
        (10, "nodes[3].uses"),
        (11, "acceptance[0].validations[0]"),
        (12, "policy.retry_limit"),
    ]
    assert "nodes: cycle a → b → c → a" in str(error)
    assert all(line.startswith(f"{path}:") for line in str(error).splitlines())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_garbage_never_escapes_as_anything_but_config_error(data: st.DataObject) -> None:
    """Random YAML-ish documents load or raise ConfigError; nothing else escapes."""
    document = data.draw(_graph_like())
    text = yaml.safe_dump(document, allow_unicode=True)
    for source in (text, text.encode("utf-8")):
        try:
            graph = load_graph(source)
        except ConfigError as exc:
            assert str(exc)
        else:
            assert isinstance(graph, PlanGraph)
            assert sorted(graph.topological_order()) == sorted(n.id for n in graph.nodes)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_near_valid_graphs_load_or_fail_cleanly(data: st.DataObject) -> None:
    """Well-formed graphs with random wiring load with a sound order, or fail with lines."""
    ids = ["a", "b", "c", "d", "e"]
    names = ["t", "w", "v", "i", "x"]
    node = st.builds(
        lambda id_, field, target, needs: {"id": id_, field: target, "needs": needs},
        st.sampled_from(ids),
        st.sampled_from(["tool", "validation"]),
        st.sampled_from(names),
        st.lists(st.sampled_from(ids), max_size=3),
    )
    criterion = st.builds(
        lambda id_, validations: {"id": id_, "text": "x", "validations": validations},
        st.sampled_from(["AC1", "AC2"]),
        st.lists(st.sampled_from(ids + names), min_size=1, max_size=2),
    )
    document = {
        "version": 1,
        "name": "g",
        "tools": [
            {"name": "t", "read_only": True, "code": "def run(**_): pass"},
            {"name": "w", "writes": True, "code": "def run(**_): pass"},
        ],
        "validations": [
            {"name": "v", "wraps": data.draw(st.sampled_from(names)), "transform": "output"},
            {"name": "i", "mode": "informational", "code": "def run(**_): pass"},
        ],
        "nodes": data.draw(st.lists(node, min_size=1, max_size=6)),
        "acceptance": data.draw(st.lists(criterion, max_size=2)),
    }
    try:
        graph = load_graph(yaml.safe_dump(document))
    except ConfigError as exc:
        assert all(line.startswith("<string>:") for line in str(exc).splitlines())
        return
    order = graph.topological_order()
    assert sorted(order) == sorted(n.id for n in graph.nodes)
    for node_ in graph.nodes:
        assert all(order.index(need) < order.index(node_.id) for need in node_.needs)


_WORDS = ["a", "b", "c", "t", "v", "repo", "directory", "memory", "informational", "*", ".", "1"]
_KEYS = [
    *PlanGraph.model_fields,
    *Node.__pydantic_fields__,
    *ResourceSpec.model_fields,
    *AcceptanceCriterion.model_fields,
    *Policy.model_fields,
    *ApprovalPolicy.model_fields,
    *ApprovalRule.model_fields,
    *Tool.model_fields,
    "mode",
    "wraps",
    "transform",
]
# No ':' in random text, so a random `uses` never imports anything; these ones are safe.
_USES = ["collections:OrderedDict", "json:dumps", "json:Nope", "no_such_module_gg:X"]


def _graph_like() -> st.SearchStrategy[Any]:
    text = st.text(alphabet=st.characters(blacklist_characters=":"), max_size=8)
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-3, 3),
        st.floats(allow_nan=False, allow_infinity=False),
        text,
        st.sampled_from(_WORDS),
    )
    values = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.sampled_from(_KEYS) | text, inner, max_size=4)
        ),
        max_leaves=12,
    )
    ids = st.sampled_from(["a", "b", "c", "d"])
    node = st.fixed_dictionaries(
        {"id": ids | values},
        optional={
            "tool": st.sampled_from(["t", "v", "w"]) | values,
            "validation": st.sampled_from(["t", "v", "w"]) | values,
            "uses": st.sampled_from(_USES),
            "needs": st.lists(ids, max_size=3) | values,
            "resources": st.lists(st.sampled_from(["repo", "m", "x"]), max_size=2) | values,
            "timeout": values,
            "isolation": st.sampled_from(["inline", "thread", "process", "x"]),
        },
    )
    tool = st.fixed_dictionaries(
        {"name": st.sampled_from(["t", "v", "w"]) | values},
        optional={
            "code": st.just("def run(**_): pass") | values,
            "writes": st.booleans() | values,
            "wraps": st.sampled_from(["t", "v", "w"]) | values,
            "transform": st.just("output") | values,
            "mode": st.sampled_from(["required", "informational"]) | values,
            "timeout": values,
        },
    )
    return (
        st.fixed_dictionaries(
            {},
            optional={
                "version": st.sampled_from([1, 2, "1", True, None]) | values,
                "name": st.sampled_from(["g", "bad name"]) | values,
                "resources": st.dictionaries(
                    st.sampled_from(["repo", "m", "bad name"]),
                    st.fixed_dictionaries(
                        {"kind": st.sampled_from(["directory", "memory"]) | values},
                        optional={"path": st.sampled_from([".", "nope"]) | values, "files": values},
                    )
                    | values,
                    max_size=2,
                )
                | values,
                "tools": st.lists(tool | values, max_size=3) | values,
                "validations": st.lists(tool | values, max_size=3) | values,
                "nodes": st.lists(node | values, max_size=5) | values,
                "acceptance": st.lists(
                    st.fixed_dictionaries(
                        {"id": ids | values, "text": st.just("x") | values},
                        optional={"validations": st.lists(ids | values, max_size=2) | values},
                    )
                    | values,
                    max_size=2,
                )
                | values,
                "policy": values,
            },
        )
        | values
    )


# -- the examples ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_load_without_a_catalog(name: str) -> None:
    """Every shipped example loads cleanly with only its own tools and validations."""
    with importlib.resources.as_file(GRAPHS / name) as path:
        graph = load_graph(path)
    assert graph.acceptance
    assert graph.validation_nodes()
    # Fan-out: several validation nodes need the same work node.
    work = [n.id for n in graph.nodes if n.kind is NodeKind.WORK]
    assert any(len(graph.dependents(w)) > 1 for w in work)
    for spec in graph.resources.values():
        if spec.kind == "directory":
            assert spec.path is not None and spec.path.is_dir()


def test_examples_cover_the_format() -> None:
    """Together the examples show a wrapped inline-code tool and an informational validation."""
    wrapped_code, informational = [], []
    for name in EXAMPLES:
        with importlib.resources.as_file(GRAPHS / name) as path:
            graph = load_graph(path)
        for node in graph.validation_nodes():
            validation = graph.get_tool(node.target)
            assert isinstance(validation, Validation)
            if validation.wraps is not None:
                wrapped_code.append(graph.get_tool(validation.wraps).code)
            informational.append(validation.mode is ValidationMode.INFORMATIONAL)
    assert wrapped_code and all(wrapped_code)
    assert any(informational)


def test_demo_repo_tests_pass(tmp_path: Path) -> None:
    """The demo project the examples use is honest: its own tests pass (run on a copy)."""
    with importlib.resources.as_file(GRAPHS / "demo-repo") as demo:
        copy = shutil.copytree(demo, tmp_path / "demo-repo")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = run_process(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=copy, env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_documented_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The complete example of docs/graphs.md loads, given its folder and its actor module."""
    doc = (Path(__file__).parents[2] / "docs" / "graphs.md").read_text(encoding="utf-8")
    example = doc.split("## A complete example", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "demo-repo").mkdir()
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "actors.py").write_text("class Reviewer:\n    pass\n")
    (tmp_path / "mypkg" / "tools.py").write_text("def run_ruff(root):\n    return {}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = load_graph(write(tmp_path, example, "plan.yaml"))
    assert [n.kind for n in graph.nodes].count(NodeKind.VALIDATION) == 3
    assert graph.get_tool("lint-clean").timeout == 60
    for name in ("mypkg.actors", "mypkg.tools", "mypkg"):
        sys.modules.pop(name, None)


# -- the loaded graph ---------------------------------------------------------------------------


def test_fields_and_defaults(good: Path) -> None:
    """The loaded graph holds the file's values, with documented defaults elsewhere."""
    graph = load_graph(good)
    assert graph.version == 1
    assert graph.name == "fix-lint"
    assert graph.project == "web"
    assert graph.source == str(good)
    assert graph.base_dir == good.parent
    assert graph.resources["repo"] == ResourceSpec(kind="directory", path=good.parent / "repo")
    assert graph.resources["notes"].files == {"README.md": "hello"}
    assert graph.policy.retry_limit == 2
    assert graph.policy.strategy_revisions == 1
    assert graph.policy.max_concurrency == 64
    assert graph.policy.default_timeout == 60.0
    assert graph.policy.approval.rules[0] == ApprovalRule(
        match="deploy*", tier="high", action="require"
    )
    lint = graph.node("lint")
    assert lint.needs == ("change",)  # a single name reads as a list of one
    assert graph.node("hints").resources is None  # every resource
    assert lint.isolation is None
    assert lint.arguments == {}


def test_node_kinds_and_targets(good: Path) -> None:
    """A node's kind and target follow from which of tool, validation and uses it gives."""
    graph = load_graph(good)
    kinds = {n.id: (n.kind, n.target) for n in graph.nodes}
    assert kinds == {
        "change": (NodeKind.WORK, "make-change"),
        "syntax": (NodeKind.VALIDATION, "syntax-ok"),
        "lint": (NodeKind.VALIDATION, "lint-clean"),
        "hints": (NodeKind.VALIDATION, "advice"),
        "review": (NodeKind.ACTOR, "collections:OrderedDict"),
        "again": (NodeKind.WORK, "lint-clean"),  # a validation IS-A tool
    }


def test_accessors(good: Path) -> None:
    """node, topological_order, dependents, validation_nodes and criteria_for."""
    graph = load_graph(good)
    assert graph.node("review").uses == "collections:OrderedDict"
    with pytest.raises(KeyError, match="no node 'nope'"):
        graph.node("nope")
    order = graph.topological_order()
    assert order == ["change", "syntax", "lint", "hints", "review", "again"]
    assert graph.dependents("change") == ("syntax", "lint", "hints", "again")
    assert graph.dependents("review") == ()
    with pytest.raises(KeyError):
        graph.dependents("nope")
    assert [n.id for n in graph.validation_nodes()] == ["syntax", "lint", "hints"]
    assert [c.id for c in graph.criteria_for("syntax")] == ["AC1", "AC2"]
    assert [c.id for c in graph.criteria_for("lint")] == ["AC2"]  # by validation name
    assert graph.criteria_for("change") == []
    assert set(graph.digraph.edges) >= {("change", "syntax"), ("lint", "review")}


def test_topological_order_keeps_file_order_among_ties(tmp_path: Path) -> None:
    """Nodes come after what they need; otherwise they keep the order of the file."""
    path = write(
        tmp_path,
        HEAD
        + TOOL
        + "nodes:\n"
        + "  - {id: z, tool: t, needs: [y]}\n"
        + "  - {id: x, tool: t}\n"
        + "  - {id: y, tool: t}\n"
        + "  - {id: w, tool: t, needs: [x, z]}\n",
    )
    assert load_graph(path).topological_order() == ["x", "y", "z", "w"]


def test_get_tool_applies_wrapping_inheritance(good: Path) -> None:
    """A wrapped inline validation inherits slots and timeout from the tool it wraps."""
    graph = load_graph(good)
    lint = graph.get_tool("lint-clean")
    assert isinstance(lint, Validation)
    assert lint.source is ToolSource.WRAPPED
    assert lint.timeout == 30
    assert lint.resource_slots == (ResourceSlot(name="root", kind="directory"),)
    assert graph.get_tool("ruff").code is not None
    assert set(graph.registry) == {"make-change", "ruff", "lint-clean", "syntax-ok", "advice"}
    with pytest.raises(KeyError, match="no tool named 'nope'"):
        graph.get_tool("nope")


def test_text_and_bytes_resolve_paths_against_the_current_directory(
    good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """YAML given as text (str with a newline, or bytes) is relative to the current directory."""
    monkeypatch.chdir(good.parent)
    from_file = load_graph(good)
    for source in (GOOD, GOOD.encode()):
        graph = load_graph(source)
        assert graph.source == "<string>"
        assert graph.base_dir == Path.cwd()
        assert graph.resources["repo"].path == good.parent / "repo"
        assert graph == from_file  # equal graphs, whatever they were loaded from
    assert from_file != from_file.model_dump()
    assert from_file.topological_order() is not from_file.topological_order()  # copies
    with pytest.raises(ConfigError, match="no such file"):
        load_graph("nope.yaml")  # a str without a newline is a path
    with pytest.raises(TypeError):
        load_graph(42)  # type: ignore[arg-type]


def test_relative_paths_follow_the_graph_file(tmp_path: Path) -> None:
    """A resource path is relative to the graph file's folder and held absolute, `..` folded."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "plans").mkdir()
    path = write(
        tmp_path / "plans",
        HEAD + TOOL + "resources: {repo: {kind: directory, path: ../repo}}\n"
        "nodes: [{id: a, tool: t}]\n",
    )
    assert load_graph(path).resources["repo"].path == tmp_path / "repo"


# -- against a catalog ---------------------------------------------------------------------------


@pytest.fixture
def catalog() -> Catalog:
    """An in-memory catalog with a read-only tool, a validation wrapping it, and a writer."""
    catalog = Catalog.in_memory()
    catalog.add(
        Tool.from_config(
            {
                "name": "ruff",
                "entrypoint": "builtins:dict",
                "timeout": 45,
                "resource_slots": [{"name": "repo", "kind": "directory", "required": False}],
                "description": "from the catalog",
            }
        )
    )
    catalog.add(
        Validation.from_config({"name": "lint-clean", "wraps": "ruff", "transform": "output"})
    )
    catalog.add(Tool.from_config({"name": "deploy", "writes": True, "entrypoint": "builtins:dict"}))
    return catalog


def test_catalog_references_resolve(tmp_path: Path, catalog: Catalog) -> None:
    """Names not defined inline come from the catalog, with their wrapped tools."""
    path = write(
        tmp_path,
        HEAD
        + "nodes:\n"
        + "  - {id: lint, validation: lint-clean}\n"
        + "  - {id: ship, tool: deploy, needs: [lint]}\n"
        + "acceptance: [{id: AC1, text: clean, validations: [lint-clean]}]\n",
    )
    with pytest.raises(ConfigError, match="unknown validation 'lint-clean'"):
        load_graph(path)  # without the catalog, only inline names exist
    graph = load_graph(path, catalog=catalog)
    lint = graph.get_tool("lint-clean")
    assert isinstance(lint, Validation)
    assert lint.timeout == 45  # inherited through the catalog
    assert graph.get_tool("ruff").description == "from the catalog"  # the wrapped tool
    assert graph.get_tool("deploy").capability.writes


def test_inline_definitions_win_over_the_catalog(tmp_path: Path, catalog: Catalog) -> None:
    """An inline tool shadows the catalog's; an inline validation may wrap a catalog tool."""
    path = write(
        tmp_path,
        HEAD
        + "tools: [{name: deploy, read_only: true, code: 'def run(**_): pass'}]\n"
        + "validations: [{name: lint-mine, wraps: ruff, transform: output}]\n"
        + "nodes:\n"
        + "  - {id: a, tool: deploy}\n"
        + "  - {id: b, validation: lint-mine, needs: [a]}\n",
    )
    graph = load_graph(path, catalog=catalog)
    assert not graph.get_tool("deploy").capability.writes
    assert graph.get_tool("lint-mine").timeout == 45
    assert graph.get_tool("ruff").entrypoint == "builtins:dict"


def test_catalog_tool_that_writes_cannot_be_a_validation_node(
    tmp_path: Path, catalog: Catalog
) -> None:
    """The writes rule holds for catalog entries too, and for wrapping them inline."""
    path = write(
        tmp_path,
        HEAD
        + "validations: [{name: v, wraps: deploy, transform: output}]\n"
        + "nodes: [{id: a, validation: deploy}, {id: b, validation: v}]\n"
        + "acceptance: [{id: AC1, text: x, validations: [nothing]}]\n",
    )
    lines = problems(path, catalog)
    assert [line.split(": ")[1] for line in lines] == [
        "validations[0].wraps",
        "nodes[0].validation",
        "acceptance[0].validations[0]",
    ]
    assert "not defined in this graph nor in the catalog" not in "\n".join(lines)
    unknown = write(tmp_path, HEAD + "nodes: [{id: a, tool: ghost}]\n", "u.yaml")
    assert problems(unknown, catalog) == [
        f"{unknown}:3:23: nodes[0].tool: unknown tool 'ghost': not defined in this graph nor in "
        "the catalog"
    ]


def test_unreadable_catalog_entry_is_a_config_error(tmp_path: Path, catalog: Catalog) -> None:
    """A catalog entry that cannot be read is reported where it is named, not raised."""
    catalog._db.execute("UPDATE tools SET config = '{}' WHERE name = 'deploy'")
    path = write(tmp_path, HEAD + "nodes: [{id: a, tool: deploy}]\n")
    (line,) = problems(path, catalog)
    assert line.startswith(
        f"{path}:3:23: nodes[0].tool: cannot read tool 'deploy' from the catalog: "
    )


# -- models in Python ----------------------------------------------------------------------------


def test_models_are_frozen_and_strict() -> None:
    """Graph models are frozen and refuse unknown fields."""
    node = Node(id="a", tool="t")
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.id = "b"  # type: ignore[misc]
    with pytest.raises(ValueError, match="not a valid id"):
        Node(id="a\n", tool="t")
    with pytest.raises(ValueError, match="Unexpected keyword argument"):
        Node(id="a", tool="t", color="red")  # type: ignore[call-arg]
    assert Policy() == Policy(approval=ApprovalPolicy())
    assert AcceptanceCriterion(id="AC1", text="x", validations="v").validations == ("v",)  # type: ignore[arg-type]
    # Each field's docstring describes it in the published schema (read from the source
    # when the schema is made, not when each model class is).
    from gategraph.runtime._definitions._graph_schema import graph_schema

    defs = graph_schema()["$defs"]
    for field in ("path", "files", "needs", "timeout", "retry_limit"):
        owner = next(m for m in (ResourceSpec, Node, Policy) if field in m.__pydantic_fields__)
        assert defs[owner.__name__]["properties"][field]["description"], field


def test_graph_built_in_python_has_working_accessors() -> None:
    """A graph built without the loader still resolves inline tools and orders its nodes."""
    ruff = Tool(name="ruff", source=ToolSource.CODE, code="def run(**_): pass", timeout=5)
    lint = Validation(name="lint", wraps="ruff", transform="output")
    graph = PlanGraph(
        version=1,
        name="g",
        tools=(ruff,),
        validations=(lint,),
        nodes=(Node(id="b", validation="lint", needs=("a",)), Node(id="a", tool="ruff")),
    )
    assert graph.topological_order() == ["a", "b"]
    assert graph.get_tool("lint").timeout == 5
    assert graph.source == "<string>"
    cyclic = PlanGraph(
        version=1,
        name="g",
        nodes=(Node(id="a", tool="t", needs=("b",)), Node(id="b", tool="t", needs=("a",))),
    )
    with pytest.raises(ConfigError, match="cycle"):
        cyclic.topological_order()
    reordered = graph.model_copy(
        update={"nodes": (Node(id="a", tool="ruff", needs=("b",)), Node(id="b", validation="lint"))}
    )
    assert reordered.topological_order() == ["b", "a"]
    assert reordered.get_tool("lint").timeout == 5
    assert graph.model_copy(update={"tools": ()}).get_tool("lint").timeout is None


# -- gategraph check -------------------------------------------------------------------------------


def invoke(*args: str, catalog: Path | None = None) -> Result:
    """Run ``gategraph [--catalog CATALOG] ARGS`` in-process."""
    prefix = ["--catalog", str(catalog)] if catalog is not None else []
    return CliRunner().invoke(cli, [*prefix, *args], prog_name="gategraph", catch_exceptions=False)


def test_check_ok(good: Path) -> None:
    """A good graph prints a summary line, and what each folder's copies leave out; exits 0."""
    result = invoke("check", str(good))
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert result.stdout == (
        f"{good}: ok — 6 nodes (3 validation, 2 work, 1 actor), 2 resources, "
        "2 acceptance criteria\n"
        f"  repo: {good.parent / 'repo'} — leaves out .git and what .gitignore ignores\n"
    )


def test_check_singular_counts(tmp_path: Path) -> None:
    """Counts of one read in the singular."""
    path = write(
        tmp_path, HEAD + TOOL + "resources: {m: {kind: memory}}\nnodes: [{id: a, tool: t}]\n"
    )
    result = invoke("check", str(path))
    assert result.stdout == (
        f"{path}: ok — 1 node (0 validation, 1 work, 0 actor), 1 resource, 0 acceptance criteria\n"
    )


def test_check_failing(tmp_path: Path) -> None:
    """A bad graph prints its error lines on stderr and exits 2."""
    path = write(tmp_path, "name: g\nnodes: [{id: a, tool: nope, needs: [a]}]\n")
    result = invoke("check", str(path))
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: {path}:1:1: version: field required: the format version (write `version: 1`)",
        f"error: {path}:2:23: nodes[0].tool: unknown tool 'nope': not defined in this graph "
        "nor in the catalog",
        f"error: {path}:2:37: nodes[0].needs[0]: a node cannot need itself",
    ]
    missing = invoke("check", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2
    assert missing.stderr == f"error: {tmp_path / 'nope.yaml'}: no such file\n"


def test_check_json(good: Path, tmp_path: Path) -> None:
    """--json prints ok, errors and nodes as JSON, with the same exit codes."""
    result = invoke("check", "--json", str(good))
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert out["ok"] is True
    assert out["errors"] == []
    assert out["nodes"][0] == {"id": "change", "kind": "work", "target": "make-change", "needs": []}
    assert [n["id"] for n in out["nodes"]] == [
        "change",
        "syntax",
        "lint",
        "hints",
        "review",
        "again",
    ]
    assert out["resources"] == [
        {"name": "repo", "path": str(good.parent / "repo"), "exclude": [], "gitignore": True}
    ]
    bad = write(tmp_path, HEAD + "nodes: [{id: a, tool: nope}]\n", "bad.yaml")
    result = invoke("check", "--json", str(bad))
    assert result.exit_code == 2
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert out == {
        "ok": False,
        "file": str(bad),
        "errors": [
            {
                "file": str(bad),
                "line": 3,
                "column": 23,
                "field": "nodes[0].tool",
                "message": "unknown tool 'nope': not defined in this graph nor in the catalog",
            }
        ],
        "nodes": [],
        "resources": [],
    }


def test_check_uses_an_existing_catalog_and_never_creates_one(tmp_path: Path) -> None:
    """check resolves names in the catalog file when it exists, and never creates it."""
    path = write(tmp_path, HEAD + "nodes: [{id: a, validation: shared}]\n")
    db = tmp_path / "state" / "c.db"
    assert invoke("check", str(path), catalog=db).exit_code == 2
    assert not db.exists()
    with Catalog.open(db) as catalog:
        catalog.add(Validation.from_config({"name": "shared", "code": "def run(**_): pass"}))
    result = invoke("check", str(path), catalog=db)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", EXAMPLES)
def test_check_examples(name: str) -> None:
    """gategraph check accepts every shipped example."""
    with importlib.resources.as_file(GRAPHS / name) as path:
        result = invoke("check", str(path))
    assert result.exit_code == 0, result.output
    assert ": ok — " in result.stdout


def test_field_docstrings_are_read_from_the_source_for_the_schema() -> None:
    """The docstring under each annotated field, a base class's too; a class without a
    source (made at run time) has none."""
    from gategraph.runtime._definitions._graph_schema import _attribute_docs, _describe_fields

    class Base:
        kept: int
        """Kept from the base.

        Second paragraph."""
        plain = 3
        """Not annotated: not a field."""

    class Child(Base):
        own: str
        """The child's own."""
        bare: int

    assert _attribute_docs(Base) == {"kept": "Kept from the base.\n\nSecond paragraph."}
    assert _attribute_docs(type("Made", (), {})) == {}
    model = {"properties": {"kept": {}, "own": {"description": "given"}, "bare": {}}}
    _describe_fields(model, Child)
    assert model["properties"] == {
        "kept": {"description": "Kept from the base.\n\nSecond paragraph."},
        "own": {"description": "given"},
        "bare": {},
    }


def test_a_source_without_a_class_gives_no_docstrings(monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``inspect`` finds is not a class body (a stale file, say): no docstrings."""
    import inspect

    from gategraph.runtime._definitions._graph_schema import _attribute_docs

    monkeypatch.setattr(inspect, "getsource", lambda _: "x = 1\n")
    assert _attribute_docs(Node) == {}


def test_a_misspelt_name_is_matched_against_the_catalog_once(tmp_path: Path) -> None:
    """With a catalog, "did you mean" offers its names too, and reads them once for all the
    misspelt names of a graph (names only: no entry is decoded)."""
    catalog = Catalog.in_memory()
    catalog.add(Validation(name="team_lint", source=ToolSource.CODE, code="def run(): pass"))
    path = tmp_path / "g.yaml"
    path.write_text(
        "version: 1\nname: g\nnodes:\n"
        "  - {id: a, validation: team_lnt}\n"
        "  - {id: b, validation: python_sintax}\n"
    )
    reads: list[int] = []
    names = catalog.names
    catalog.names = lambda: reads.append(1) or names()  # type: ignore[method-assign]
    lines = problems(path, catalog)
    assert any(
        "unknown validation 'team_lnt'" in line and "(did you mean 'team_lint'?)" in line
        for line in lines
    )
    assert any("(did you mean 'python_syntax'?)" in line for line in lines)
    assert reads == [1]


def test_a_graph_files_folder_joins_the_import_path_only_when_it_has_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its own modules import (after the installed packages); a folder with none is not
    added, so a process that loads many graphs keeps its import path short."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    text = "version: 1\nname: p\nnodes: [{id: n, uses: 'helper_mod_x:Thing'}]\n"
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "plan.yaml").write_text(
        "version: 1\nname: p\nnodes: [{id: n, tool: t}]\n"
        "tools: [{name: t, code: 'def run(): return 1'}]\n"
    )
    before = list(sys.path)
    load_graph(bare / "plan.yaml")
    assert sys.path == before
    own = tmp_path / "own"
    own.mkdir()
    (own / "helper_mod_x.py").write_text(
        "class Thing:\n    async def run(self, request):\n        return {}\n"
    )
    (own / "plan.yaml").write_text(text)
    try:
        load_graph(own / "plan.yaml")
        assert sys.path == [*before, str(own)]
        load_graph(own / "plan.yaml")
        assert sys.path == [*before, str(own)]  # once
    finally:
        sys.modules.pop("helper_mod_x", None)


def test_a_module_beside_a_graph_that_another_folder_shadows_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two graph folders, each with its own `helper_mod_y.py`, in one process: Python
    imports the first one's for both, so the second graph is refused, naming the file."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    text = "version: 1\nname: p\nnodes: [{id: n, uses: 'helper_mod_y:Thing'}]\n"
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "helper_mod_y.py").write_text(
            "class Thing:\n    async def run(self, request):\n        return {}\n"
        )
        (folder / "plan.yaml").write_text(text)
    try:
        load_graph(tmp_path / "a" / "plan.yaml")
        with pytest.raises(ConfigError) as error:
            load_graph(tmp_path / "b" / "plan.yaml")
        assert str(error.value) == (
            f"{tmp_path / 'b' / 'plan.yaml'}:3:23: nodes[0].uses: the module 'helper_mod_y' "
            "beside the graph file is not the one Python imports, which is "
            f"{tmp_path / 'a' / 'helper_mod_y.py'} (another graph's folder loaded first, or "
            "an installed package): give the graph's module a name of its own"
        )
    finally:
        sys.modules.pop("helper_mod_y", None)
