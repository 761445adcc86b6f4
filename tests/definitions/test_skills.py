"""Skills: named compositions of tools and validations, in the catalog, in graphs and on
the command line. Being in a skill makes a validation callable; only an attachment (or a
validation node) makes it a gate: tested both ways."""

from __future__ import annotations

import json
import re
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest
from _helpers import fake_module, run_gategraph
from gategraph.runtime import (
    Catalog,
    CatalogError,
    ConfigError,
    DuplicateError,
    IntegrityError,
    NotFoundError,
    Skill,
    SkillTools,
    Validation,
    load_graph,
    run_plan,
    tool_from_config,
)
from gategraph.runtime._base._exceptions import RuntimeFault
from gategraph.runtime._base._kernel import support

ROOT = Path(__file__).parents[2]

LONG_LINES = {
    "name": "short-lines",
    "code": (
        "from pathlib import Path\n"
        "def run(root, max_line=80):\n"
        "    long = [p.name for p in sorted(Path(root).rglob('*.py'))\n"
        "            if any(len(l) > max_line for l in p.read_text().splitlines())]\n"
        "    return {'passed': not long, 'message': ', '.join(long) or 'ok'}\n"
    ),
    "resource_slots": ["root"],
    "input_schema": {
        "type": "object",
        "properties": {"max_line": {"type": "integer", "minimum": 1}},
        "additionalProperties": False,
    },
}


# A read-only tool's code: the names in its folder.
LISTING = (
    "from pathlib import Path\n"
    "def run(root):\n    return sorted(p.name for p in Path(root).iterdir())\n"
)


# -- the model ------------------------------------------------------------------------------


def test_a_skill_from_its_config_and_back() -> None:
    skill = Skill.from_config({"name": "review", "description": "d", "tools": ["a", "b.c"]})
    assert skill.tools == ("a", "b.c")
    assert skill.as_config() == {"name": "review", "description": "d", "tools": ["a", "b.c"]}
    assert Skill.from_config(skill.as_config()) == skill
    assert Skill(name="x", tools=("a",)).as_config() == {"name": "x", "tools": ["a"]}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"name": "x", "tools": []}, r"tools: must list at least one tool or validation"),
        ({"name": "x", "tools": "a"}, r"tools: must be a list .* not a string"),
        ({"name": "x", "tools": ["a", "a"]}, r"tools: 'a' is listed twice"),
        ({"name": "x", "tools": ["validator.attest"]}, r"is a validator tool: .*--validators"),
        ({"name": "x y", "tools": ["a"]}, r"name: 'x y' is not a valid name"),
        ({"name": "x", "tools": ["a b"]}, r"tools\[0\]: 'a b' is not a valid name"),
        ({"name": "x", "tols": ["a"]}, r"tols: unknown field \(did you mean 'tools'\?\)"),
        ({"tools": ["a"]}, r"name: field required"),
        (["a"], r"a skill configuration must be a mapping"),
    ],
)
def test_a_bad_skill_config_is_refused_by_field(config: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Skill.from_config(config)


# -- the catalog ----------------------------------------------------------------------------


def test_skills_in_the_catalog(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with Catalog.open(path) as catalog:
        assert catalog.schema_version >= 5  # skills came with version 5
        catalog.add(Validation.from_config(LONG_LINES))
        stored = catalog.add_skill(Skill(name="review", tools=("python_syntax", "short-lines")))
        assert stored.tools == ("python_syntax", "short-lines")
        catalog.add_skill(Skill(name="all", tools=("short-lines",)))
    with Catalog.open(path) as catalog:  # kept in the file
        assert [s.name for s in catalog.list_skills()] == ["all", "review"]
        assert catalog.get_skill("review").tools == ("python_syntax", "short-lines")
        assert catalog.skills_with("short-lines") == ["all", "review"]
        assert catalog.skills_with("python_syntax") == ["review"]
        with pytest.raises(DuplicateError, match=r"a skill named 'review' exists already"):
            catalog.add_skill(Skill(name="review", tools=("regex",)))
        catalog.add_skill(Skill(name="review", tools=("regex",)), update=True)
        assert catalog.get_skill("review").tools == ("regex",)
        assert catalog.skills_with("python_syntax") == []  # the members follow the update
        with pytest.raises(ConfigError) as caught:
            catalog.add_skill(Skill(name="more", tools=("regex", "ghost", "nope")))
        assert [(i.field, i.message) for i in caught.value.issues] == [
            ("tools[1]", "no tool or validation named 'ghost' in the catalog"),
            ("tools[2]", "no tool or validation named 'nope' in the catalog"),
        ]
        with pytest.raises(NotFoundError, match="no skill named 'more'"):
            catalog.get_skill("more")  # nothing half-written
        removed = catalog.remove_skill("review")
        assert removed is not None and removed.tools == ("regex",)
        with pytest.raises(NotFoundError, match="no skill named 'review'"):
            catalog.remove_skill("review")
        assert "short-lines" in catalog  # a skill's tools stay


def test_a_tool_in_a_skill_is_removed_only_out_of_it() -> None:
    with Catalog.in_memory() as catalog:
        catalog.add(Validation.from_config(LONG_LINES))
        catalog.add(tool_from_config({"name": "fmt", "code": "def run(): pass", "writes": True}))
        catalog.add_skill(Skill(name="review", tools=("short-lines", "python_syntax")))
        catalog.add_skill(Skill(name="solo", tools=("fmt",)))
        with pytest.raises(IntegrityError, match=r"'short-lines' is in the skill\(s\) review"):
            catalog.remove("short-lines")
        assert "short-lines" in catalog
        catalog.remove("short-lines", force=True)
        assert catalog.get_skill("review").tools == ("python_syntax",)
        catalog.remove("fmt", force=True)  # its only member: the skill goes too
        assert [s.name for s in catalog.list_skills()] == ["review"]


def test_an_unreadable_skill_is_said_and_can_be_removed(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with Catalog.open(path) as catalog:
        catalog.add_skill(Skill(name="review", tools=("regex",)))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE skills SET config = '{\"name\": 1}'")
    db.close()
    with Catalog.open(path) as catalog:
        with pytest.raises(CatalogError, match=r"skill 'review' is unreadable"):
            catalog.get_skill("review")
        assert catalog.remove_skill("review") is None
        assert catalog.list_skills() == []


# -- graphs ---------------------------------------------------------------------------------

GRAPH = """
version: 1
name: t
resources: {repo: {kind: memory, files: {"a.py": "x = 1"}}}
validations: [{name: ok, entrypoint: "gategraph.runtime.testing:passing"}]
skills:
SKILLS
nodes: [{id: check, validation: ok}]
"""


def graph_with(skills: str, catalog: Catalog | None = None) -> Any:
    return load_graph(GRAPH.replace("SKILLS", textwrap.indent(skills, "  ")), catalog=catalog)


def test_a_graph_defines_skills_and_names_the_catalog_s() -> None:
    with Catalog.in_memory() as catalog:
        catalog.add(Validation.from_config(LONG_LINES))
        catalog.add_skill(Skill(name="review", tools=("short-lines",)))
        graph = graph_with("- {name: own, tools: [python_syntax, ok]}\n- review\n", catalog)
    assert [s.name for s in graph.skills] == ["own", "review"]
    assert graph.skills[1].tools == ("short-lines",)
    # Every member is resolved, as a node's tool is: callable later without the catalog.
    assert {"python_syntax", "ok", "short-lines"} <= set(graph.registry)


def test_a_graph_s_bad_skills_are_reported_where_they_stand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_module(monkeypatch, "skillmod")
    with Catalog.in_memory() as catalog:
        catalog.add_skill(Skill(name="review", tools=("regex",)))
        catalog.add(Validation.from_config({"name": "broken", "entrypoint": "skillmod:missing"}))
        with pytest.raises(ConfigError) as caught:
            graph_with(
                "- {name: own, tools: [python_syntax, nope]}\n"
                "- reveiw\n"
                "- {name: own, tools: [ok]}\n"
                "- {name: x, tols: [ok]}\n"
                "- {name: calls, tools: [broken]}\n",
                catalog,
            )
    lines = str(caught.value).splitlines()
    assert lines[0].endswith(
        "skills[0].tools[1]: unknown tool 'nope': not defined in this graph nor in the catalog"
    )
    assert lines[1].endswith(
        "skills[1]: unknown skill 'reveiw': not in the catalog (did you mean 'review'?)"
    )
    assert re.search(r"skills\[2\]\.name: duplicate skill 'own' \(first at line \d+\)", lines[2])
    assert "skills[3].tools: field required" in lines[3]
    assert "skills[3].tols: unknown field (did you mean 'tools'?)" in lines[4]
    assert re.search(r"skills\[4\]\.tools\[0\]: 'broken' cannot be called: .*missing", lines[5])
    with pytest.raises(ConfigError, match=r"skills\[0\]: unknown skill 'review': no catalog"):
        graph_with("- review\n")


# -- calling a skill from a plan: callable, not a gate ------------------------------------


class SelfChecking:
    """An execution actor that writes a file too long for `short-lines`, asks the skill, and
    hands its work in whatever the answer."""

    def __init__(self) -> None:
        self.answers: list[Any] = []

    async def execute(self, request: Any) -> Any:
        folder = Path(request.resources["repo"])
        (folder / "long.py").write_text("x = " + "1" * 100 + "\n")
        self.answers.append(await request.skills.call("short-lines"))
        self.answers.append(await request.skills.call("short-lines", {"max_line": 200}))
        return {"files": ["long.py"]}

    async def fix(self, request: Any) -> Any:
        return await self.execute(request)


def plan_graph(repo: Path, catalog: Catalog) -> Any:
    return load_graph(
        {
            "version": 1,
            "name": "self-check",
            "resources": {"repo": {"kind": "directory", "path": str(repo)}},
            "validations": [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
            "skills": ["review"],
            "nodes": [{"id": "check", "validation": "ok"}],
            "policy": {"retry_limit": 0, "strategy_revisions": 0},
        },
        catalog=catalog,
    )


@pytest.mark.anyio
async def test_a_skill_s_validation_is_callable_and_gates_only_when_attached(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    with Catalog.in_memory() as catalog:
        catalog.add(Validation.from_config(LONG_LINES))
        catalog.add_skill(Skill(name="review", tools=("short-lines",)))
        graph = plan_graph(repo, catalog)

        # In the skill, not attached: the actor runs it and sees it fail; the plan applies.
        actor = SelfChecking()
        outcome = await run_plan(graph, catalog=catalog, execution_actor=actor)
        assert [a.passed for a in actor.answers] == [False, True]
        assert actor.answers[0].message == "long.py"
        assert outcome.status.value == "applied"
        assert (repo / "long.py").exists()
        assert all(r.validation != "short-lines" for r in outcome.validations)

        # Attached to the folder, the same validation gates the plan: it cannot apply.
        (repo / "long.py").unlink()
        catalog.attach("repo", "short-lines")
        actor = SelfChecking()
        outcome = await run_plan(graph, catalog=catalog, execution_actor=actor)
        assert actor.answers[0].passed is False
        assert outcome.status.value != "applied"
        assert not (repo / "long.py").exists()


@pytest.mark.anyio
async def test_skill_tools_calls_and_refusals(tmp_path: Path) -> None:
    folder = tmp_path / "box"
    folder.mkdir()
    (folder / "a.py").write_text("x = 1\n")
    failing = "def run(**_):\n    raise RuntimeError('the index is gone')\n"
    graph = load_graph(
        {
            "version": 1,
            "name": "calls",
            "resources": {"repo": {"kind": "directory", "path": str(folder)}},
            "tools": [
                {"name": "ls", "code": LISTING, "read_only": True, "resource_slots": ["root"]},
                {"name": "boom", "code": failing},
                {"name": "other", "code": LISTING, "resource_slots": ["root"]},
            ],
            "validations": [LONG_LINES],
            "skills": [
                {"name": "look", "tools": ["ls", "short-lines", "python_syntax"]},
                {"name": "more", "tools": ["boom", "ls"]},
            ],
            "nodes": [{"id": "list", "tool": "other"}],
        }
    )
    tools = SkillTools(graph, {"repo": folder})
    assert tools.names == ("ls", "short-lines", "python_syntax", "boom")
    assert "ls" in tools and "other" not in tools and len(tools) == 4
    assert repr(tools) == "SkillTools(look, more)"
    assert tools.tool("short-lines").input_schema is not None
    assert await tools.call("ls") == ["a.py"]
    assert (await tools.call("python_syntax")).passed is True
    assert (await tools.call("short-lines", {"max_line": 3}, resources=["repo"])).passed is False
    with pytest.raises(ConfigError, match=r"'other' is in none of the plan's skills"):
        await tools.call("other")  # a node's tool, not a skill's
    with pytest.raises(ConfigError, match=r"arguments\.max_line: 0 is less than the minimum"):
        await tools.call("short-lines", {"max_line": 0})
    with pytest.raises(ConfigError, match=r"arguments\.maxline: unknown argument"):
        await tools.call("short-lines", {"maxline": 3})
    with pytest.raises(RuntimeFault, match=r"'boom' failed: .*the index is gone"):
        await tools.call("boom")
    with pytest.raises(RuntimeFault, match=r"'ls' failed"):
        await tools.call("ls", resources=[])  # its slot is left unbound
    assert (folder / "a.py").read_text() == "x = 1\n"
    nothing = SkillTools(graph, {"repo": folder}, skills=())
    assert repr(nothing) == "SkillTools(no skills)"
    with pytest.raises(ConfigError, match=r"its skills: none"):
        await nothing.call("ls")


# -- the command line -----------------------------------------------------------------------


def test_the_skill_commands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()

    def gg(*args: str) -> Any:
        return run_gategraph(home, *args, cwd=work)

    done = gg("skill", "list")
    assert done.returncode == 0 and "no skills" in done.stdout
    refused = gg("skill", "add", "review", "python_syntax", "ghost")
    assert refused.returncode == 2
    assert refused.stderr == (
        "error: skill 'review': no tool or validation named 'ghost' in the catalog "
        "(gategraph tool list shows what it has)\n"
    )
    assert not home.exists()  # nothing written, not even the catalog file
    assert gg("skill", "add").stderr.startswith("error: give the skill's NAME")
    both = gg("skill", "add", "x", "regex", "--config", "f.yaml")
    assert both.returncode == 2 and "not both" in both.stderr
    bad = gg("skill", "add", "bad name", "regex")
    assert bad.returncode == 2 and "name: 'bad name' is not a valid name" in bad.stderr

    (work / "skill.yaml").write_text("name: review\ntools: [regex, ghost]\n")
    refused = gg("skill", "add", "--config", "skill.yaml")
    assert refused.stderr == (
        "error: skill.yaml:2:16: tools[1]: no tool or validation named 'ghost' in the catalog\n"
    )
    (work / "skill.yaml").write_text("name: review\ntools: [regex, python_syntax]\n")
    assert gg("skill", "add", "--config", "skill.yaml").stdout == (
        "added skill review: regex, python_syntax (2 validations)\n"
    )
    again = gg("skill", "add", "review", "regex")
    assert again.returncode == 1 and "exists already (add --update" in again.stderr
    updated = gg("skill", "add", "review", "python_syntax", "--update", "--description", "D")
    assert updated.stdout == "updated skill review: python_syntax (1 validation)\n"
    assert gg("validation", "attach", "src", "python_syntax").returncode == 0
    listed = json.loads(gg("skill", "list", "--json").stdout)
    assert listed == [{"name": "review", "description": "D", "tools": ["python_syntax"]}]
    assert json.loads(gg("tool", "show", "python_syntax", "--json").stdout)["skills"] == ["review"]
    shown = json.loads(gg("skill", "show", "review", "--json").stdout)
    assert shown["tools"][0]["gate"] is True
    assert shown["tools"][0]["attachments"][0]["resource"] == "src"
    missing = gg("skill", "show", "nope")
    assert missing.returncode == 2 and missing.stderr == "error: no skill named 'nope'\n"
    assert gg("skill", "remove", "review").returncode == 0
    assert "no skills" in gg("skill", "list").stdout


def test_a_registered_tool_in_a_skill_is_removed_with_force(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "v.yaml").write_text(json.dumps(LONG_LINES))
    assert (
        run_gategraph(home, "validation", "add", "--config", "v.yaml", cwd=tmp_path).returncode == 0
    )
    assert run_gategraph(home, "skill", "add", "r", "short-lines", cwd=tmp_path).returncode == 0
    refused = run_gategraph(home, "tool", "remove", "short-lines", "--yes", cwd=tmp_path)
    assert refused.returncode == 1 and "is in the skill(s) r" in refused.stderr
    forced = run_gategraph(home, "tool", "remove", "short-lines", "--yes", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert "no skills" in run_gategraph(home, "skill", "list", cwd=tmp_path).stdout


# -- what a review found ----------------------------------------------------------------

PID = (
    "import os\n"
    "from pathlib import Path\n"
    "def run(root):\n"
    "    return {'passed': True, 'data': {'pid': os.getpid()}}\n"
)
WRITES_OUT = (
    "import os, threading\n"
    "def run(root, target):\n"
    "    def write():\n"
    "        open(target, 'w').write('out')\n"
    "    t = threading.Thread(target=write)\n"
    "    t.start(); t.join()\n"
    "    return {'passed': True, 'message': 'wrote outside' if os.path.exists(target) else ''}\n"
)


def isolation_graph(folder: Path, isolation: str | None) -> Any:
    node: dict[str, Any] = {"id": "check", "validation": "pid"}
    if isolation is not None:
        node["isolation"] = isolation
    return load_graph(
        {
            "version": 1,
            "name": "isolated",
            "resources": {"repo": {"kind": "directory", "path": str(folder)}},
            "validations": [{"name": "pid", "code": PID, "resource_slots": ["root"]}],
            "skills": [{"name": "s", "tools": ["pid"]}],
            "nodes": [node],
        }
    )


@pytest.mark.anyio
async def test_a_skill_call_runs_as_isolated_as_the_plan_runs_it(tmp_path: Path) -> None:
    """The plan's node says `process`: the skill's call runs in a worker process too; a
    member no node calls runs as the executor's isolation says; one that nothing declares
    for runs where a validation runs by default (the sandbox, for code of a graph's); a
    node's `thread` keeps it here."""
    import os

    in_a_worker = SkillTools(isolation_graph(tmp_path, "process"), {"repo": tmp_path})
    assert (await in_a_worker.call("pid")).data["pid"] != os.getpid()
    by_the_executor = SkillTools(
        isolation_graph(tmp_path, None), {"repo": tmp_path}, isolation="process"
    )
    assert (await by_the_executor.call("pid")).data["pid"] != os.getpid()
    by_default = SkillTools(isolation_graph(tmp_path, None), {"repo": tmp_path})
    assert (await by_default.call("pid")).data["pid"] != os.getpid()
    here = SkillTools(isolation_graph(tmp_path, "thread"), {"repo": tmp_path})
    assert (await here.call("pid")).data["pid"] == os.getpid()


@pytest.mark.anyio
@pytest.mark.skipif(support().missing is not None, reason="no kernel sandbox here")
async def test_a_validation_the_plan_sandboxes_is_sandboxed_when_called(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    target = tmp_path / "outside.txt"
    graph = load_graph(
        {
            "version": 1,
            "name": "boxed",
            "resources": {"repo": {"kind": "directory", "path": str(repo)}},
            "validations": [{"name": "vendor", "code": WRITES_OUT, "resource_slots": ["root"]}],
            "skills": [{"name": "s", "tools": ["vendor"]}],
            "nodes": [
                {
                    "id": "check",
                    "validation": "vendor",
                    "isolation": "sandbox",
                    "arguments": {"target": str(target)},
                }
            ],
        }
    )
    result = await SkillTools(graph, {"repo": repo}).call("vendor", {"target": str(target)})
    assert result.passed is False and not target.exists()


def test_a_graph_s_skills_as_a_tuple_are_checked_too() -> None:
    base: dict[str, Any] = {
        "version": 1,
        "name": "t",
        "validations": [{"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}],
        "nodes": [{"id": "a", "validation": "ok"}],
    }
    # A mapping has no positions: the item is named by its list (as for nodes).
    with pytest.raises(ConfigError, match=r"skills\[0\]\.tools: unknown tool 'ghost'"):
        load_graph({**base, "skills": ({"name": "s", "tools": ["ghost"]},)})
    graph = load_graph({**base, "skills": (Skill(name="s", tools=("python_syntax",)),)})
    assert "python_syntax" in graph.registry
    with pytest.raises(ConfigError, match=r"skills: must be a skill .* not a number"):
        load_graph({**base, "skills": [1]})


@pytest.mark.anyio
async def test_a_skill_call_s_bad_input_is_a_config_error(tmp_path: Path) -> None:
    graph = load_graph(
        {
            "version": 1,
            "name": "calls",
            "resources": {"repo": {"kind": "directory", "path": str(tmp_path)}},
            "tools": [
                {"name": "ls", "code": LISTING, "read_only": True, "resource_slots": ["root"]},
                {"name": "slow", "code": "import time\ndef run():\n    time.sleep(5)\n"},
            ],
            "skills": [{"name": "s", "tools": ["ls", "slow"]}],
            "nodes": [{"id": "a", "tool": "ls"}],
        }
    )
    tools = SkillTools(graph, {"repo": tmp_path})
    assert await tools.call("ls", resources="repo") == []  # one name is a name
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"resources": ["nope"]},
            r"resources\[0\]: unknown resource 'nope' \(the plan has: repo\)",
        ),
        ({"resources": [None]}, r"resources\[0\]: unknown resource None"),
        ({"arguments": ["x"]}, r"arguments: must be a mapping of argument names to values"),
        ({"arguments": {1: 2}}, r"arguments: argument names are text, not int"),
    ]
    for options, message in cases:
        with pytest.raises(ConfigError, match=message):
            await tools.call("ls", **options)
    # Said of the call, not of a node the plan does not have.
    from gategraph.runtime._definitions._graph import Policy

    quick = SkillTools(
        graph.model_copy(update={"policy": Policy(default_timeout=0.2)}), {"repo": tmp_path}
    )
    with pytest.raises(RuntimeFault) as caught:
        await quick.call("slow")
    assert "skill-call" not in str(caught.value) and "timed out" in str(caught.value)


@pytest.mark.anyio
async def test_a_graph_built_in_python_resolves_built_in_members(tmp_path: Path) -> None:
    from gategraph.runtime import PlanGraph

    graph = PlanGraph(
        version=1,
        name="by-hand",
        resources={"repo": {"kind": "directory", "path": tmp_path}},  # type: ignore[dict-item]
        nodes=({"id": "a", "tool": "x"},),  # type: ignore[arg-type]
        skills=(Skill(name="s", tools=("python_syntax", "ghost")),),
    )
    tools = SkillTools(graph, {"repo": tmp_path})
    assert (await tools.call("python_syntax")).passed is True
    with pytest.raises(ConfigError, match=r"'ghost' is not resolved in plan graph 'by-hand'"):
        await tools.call("ghost")


def test_unreadable_skills_are_left_out_and_said(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "v.yaml").write_text(json.dumps(LONG_LINES))
    assert (
        run_gategraph(home, "validation", "add", "--config", "v.yaml", cwd=tmp_path).returncode == 0
    )
    for name in ("a", "z"):
        assert (
            run_gategraph(home, "skill", "add", name, "short-lines", cwd=tmp_path).returncode == 0
        )
    with sqlite3.connect(home / "gategraph.db") as db:
        db.execute("UPDATE skills SET config = 'garbage' WHERE name = 'z'")
    db.close()
    listed = run_gategraph(home, "skill", "list", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.splitlines()[1].startswith("a ")
    assert listed.stderr.startswith("warning: ") and "skill 'z' is unreadable" in listed.stderr
    assert "\n" not in listed.stderr.strip()
    with Catalog.open(home / "gategraph.db") as catalog:
        assert [s.name for s in catalog.list_skills()] == ["a"]
        assert list(catalog.unreadable_skills()) == ["z"]
        with pytest.raises(ConfigError, match=r"unknown skill 'b': not in the catalog"):
            load_graph(GRAPH.replace("SKILLS", "  - b"), catalog=catalog)
        with pytest.raises(ConfigError, match=r"skills\[0\]: cannot read skill 'z'"):
            load_graph(GRAPH.replace("SKILLS", "  - z"), catalog=catalog)
    forced = run_gategraph(home, "tool", "remove", "short-lines", "--yes", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines() == [
        "removed validation short-lines",
        "taken out of the skill(s) z",  # unreadable: left for its repair below
        "removed the skill(s) a, which listed nothing else",
    ]
    repaired = run_gategraph(home, "skill", "add", "z", "regex", "--update", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    shown = run_gategraph(home, "skill", "show", "z", cwd=tmp_path)
    assert "regex: validation (required), callable only" in shown.stdout


def test_catalog_skills_named_in_a_graph_are_reported_at_the_name(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    with Catalog.open(path) as catalog:
        catalog.add(Validation.from_config(LONG_LINES))
        catalog.add_skill(Skill(name="review", tools=("short-lines",)))
    with sqlite3.connect(path) as db:  # gone without the skill knowing: a plugin removed
        db.execute("DELETE FROM tools WHERE name = 'short-lines'")
    db.close()
    with Catalog.open(path) as catalog, pytest.raises(ConfigError) as caught:
        load_graph(GRAPH.replace("SKILLS", "  - review\n  - review"), catalog=catalog)
    lines = str(caught.value).splitlines()
    assert re.search(r"skills\[0\]: the catalog's skill 'review' lists unknown tool", lines[0])
    assert re.search(r"skills\[1\]: duplicate skill 'review' \(first at line", lines[1])


def test_a_tool_taken_out_of_a_skill_is_said(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "v.yaml").write_text(json.dumps(LONG_LINES))
    assert (
        run_gategraph(home, "validation", "add", "--config", "v.yaml", cwd=tmp_path).returncode == 0
    )
    added = run_gategraph(home, "skill", "add", "r", "short-lines", "regex", cwd=tmp_path)
    assert added.returncode == 0
    forced = run_gategraph(home, "tool", "remove", "short-lines", "--yes", "--force", cwd=tmp_path)
    assert forced.stdout.splitlines()[1:] == ["taken out of the skill(s) r"]
    assert "short-lines" not in run_gategraph(home, "skill", "show", "r", cwd=tmp_path).stdout


CODER = """
from pathlib import Path


class Coder:
    async def execute(self, request):
        folder = Path(request.resources["repo"])
        (folder / "new.py").write_text("def broken(:\\n")
        check = await request.skills.call("python_syntax")
        Path(__file__).with_name("said.txt").write_text(repr(check.passed))
        return {"files": ["new.py"]}

    async def fix(self, request):
        return await self.execute(request)
"""

PLAN = """\
version: 1
name: skills-cli
resources: {repo: {kind: directory, path: repo}}
validations: [{name: ok, entrypoint: "gategraph.runtime.testing:passing"}]
skills: [{name: self-check, tools: [python_syntax]}]
nodes: [{id: check, validation: ok}]
lifecycle: {executor: {uses: "coder:Coder"}}
policy: {retry_limit: 0, strategy_revisions: 0}
"""


def test_from_the_command_line_callable_then_a_gate(tmp_path: Path) -> None:
    """`gategraph run` of a graph whose executor calls its skill: applied; with the same
    validation attached to the folder, the plan waits for a person instead (exit 3)."""
    (tmp_path / "repo").mkdir()
    (tmp_path / "coder.py").write_text(CODER)
    (tmp_path / "plan.yaml").write_text(PLAN)
    home = tmp_path / "home"
    checked = run_gategraph(home, "check", "plan.yaml", cwd=tmp_path, pythonpath=tmp_path)
    assert checked.returncode == 0, checked.stderr
    done = run_gategraph(home, "run", "plan.yaml", cwd=tmp_path, pythonpath=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "said.txt").read_text() == "False"
    assert (tmp_path / "repo" / "new.py").exists()
    (tmp_path / "repo" / "new.py").unlink()
    attached = run_gategraph(home, "validation", "attach", "repo", "python_syntax", cwd=tmp_path)
    assert attached.returncode == 0, attached.stderr
    done = run_gategraph(home, "run", "plan.yaml", cwd=tmp_path, pythonpath=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "does not parse" in done.stdout
    assert not (tmp_path / "repo" / "new.py").exists()


@pytest.mark.anyio
async def test_an_engine_refusal_of_a_call_is_said_of_the_call(tmp_path: Path) -> None:
    graph = load_graph(
        {
            "version": 1,
            "name": "x",
            "resources": {"repo": {"kind": "directory", "path": str(tmp_path)}},
            "validations": [
                {
                    "name": "v",
                    "code": "def run(root):\n    return {'passed': True}\n",
                    "resource_slots": ["root"],
                }
            ],
            "skills": [{"name": "s", "tools": ["v"]}],
            "nodes": [{"id": "a", "validation": "v"}],
        }
    )
    inline = SkillTools(graph, {"repo": tmp_path}, isolation="inline")
    with pytest.raises(ConfigError) as caught:
        await inline.call("v")
    (issue,) = caught.value.issues
    assert issue.field == "isolation" and "a sync callable, on the event loop" in issue.message
    assert caught.value.source == "v"


def test_skill_show_says_what_each_member_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    tool = {
        "name": "lister",
        "description": "Lists files.",
        "code": "def run(): return []",
        "read_only": True,
    }
    (tmp_path / "t.yaml").write_text(json.dumps(tool))
    (tmp_path / "v.yaml").write_text(json.dumps(LONG_LINES))
    for kind, file in (("tool", "t.yaml"), ("validation", "v.yaml")):
        done = run_gategraph(home, kind, "add", "--config", file, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    added = run_gategraph(home, "skill", "add", "r", "lister", "short-lines", "regex", cwd=tmp_path)
    assert added.stdout == "added skill r: lister, short-lines, regex (2 validations, 1 tool)\n"
    with sqlite3.connect(home / "gategraph.db") as db:  # behind the catalog's back
        db.execute("DELETE FROM tools WHERE name = 'lister'")
        db.execute("UPDATE tools SET config = 'garbage' WHERE name = 'short-lines'")
    db.close()
    shown = run_gategraph(home, "skill", "show", "r", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1] == "  lister: missing from the catalog (removed, or its plugin was uninstalled)"
    assert lines[2].startswith("  short-lines: cannot be read from the catalog: ")
    assert lines[3] == "  regex: validation (required), callable only: attach it to make it a gate"
    # Removing an unreadable entry is how it is repaired (it is in a skill: --force).
    removed = run_gategraph(home, "tool", "remove", "short-lines", "--yes", "--force", cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.splitlines() == [
        "removed unreadable entry short-lines",
        "taken out of the skill(s) r",
    ]
    (tmp_path / "t.yaml").write_text(json.dumps(tool))
    assert run_gategraph(home, "tool", "add", "--config", "t.yaml", cwd=tmp_path).returncode == 0
    data = json.loads(run_gategraph(home, "skill", "show", "r", "--json", cwd=tmp_path).stdout)
    assert data["tools"][0] == {"name": "lister", "type": "tool", "description": "Lists files."}
    assert run_gategraph(home, "skill", "show", "r", cwd=tmp_path).stdout.splitlines()[1] == (
        "  lister: tool"
    )
