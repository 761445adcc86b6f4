"""`gategraph plans` (every plan of the event log and where it stands), and the picture of
a plan graph (`gategraph graph`), as a user runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _helpers import run_gategraph, run_process
from gategraph.runtime import load_graph
from gategraph.runtime._views._plan_views import plan_summaries, summarize

ROOT = Path(__file__).parents[2]

OK = {"name": "ok", "entrypoint": "gategraph.runtime.testing:passing"}
BAD = {"name": "bad", "entrypoint": "gategraph.runtime.testing:failing"}


def write_plan(folder: Path, name: str, **extra: Any) -> Path:
    (folder / "repo").mkdir(exist_ok=True)
    graph = {
        "version": 1,
        "name": name,
        "resources": {"repo": {"kind": "directory", "path": "repo"}},
        "validations": [OK, BAD],
        "nodes": [{"id": "check", "validation": "ok"}],
        **extra,
    }
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(graph))
    return path


def test_plans_lists_every_plan_those_waiting_for_a_person_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    empty = run_gategraph(home, "plans", cwd=tmp_path)
    assert empty.returncode == 0 and empty.stdout.startswith("no plans in ")
    assert json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout) == []

    write_plan(tmp_path, "fine")
    write_plan(
        tmp_path,
        "stuck",
        nodes=[{"id": "check", "validation": "bad"}],
        policy={"retry_limit": 0, "strategy_revisions": 0},
    )
    write_plan(
        tmp_path,
        "asks",
        policy={"approval": {"rules": [{"match": "check", "tier": "high", "action": "require"}]}},
    )
    codes = {}
    for name in ("fine", "stuck", "asks"):
        done = run_gategraph(home, "run", f"{name}.yaml", "--json", cwd=tmp_path)
        codes[name] = done.returncode
    assert codes == {"fine": 0, "stuck": 3, "asks": 3}

    listed = run_gategraph(home, "plans", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == [
        "PLAN",
        "NAME",
        "STATUS",
        "ROUNDS",
        "LAST",
        "EVENT",
        "WAITING",
        "FOR",
    ]
    rows = [line.split(None, 3) for line in lines[1:4]]
    assert [row[1:3] for row in rows] == [
        ["asks", "awaiting_approval"],  # those waiting for a person, newest first
        ["stuck", "awaiting_decision"],
        ["fine", "applied"],
    ]
    assert "a person's approval (tier high)" in lines[1]
    assert "a person's decision (exhausted)" in lines[2]
    assert lines[4].startswith("2 plan(s) wait for a person")

    data = json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout)
    assert [d["name"] for d in data] == ["asks", "stuck", "fine"]
    assert data[2]["rounds"] == 1 and data[2]["waiting_for"] is None
    assert data[0]["graph_path"] == str(tmp_path / "asks.yaml")
    assert data[0]["last_event_at"].endswith("+00:00")

    only = json.loads(
        run_gategraph(home, "plans", "--status", "applied", "--json", cwd=tmp_path).stdout
    )
    assert [d["name"] for d in only] == ["fine"]
    named = run_gategraph(home, "plans", "--name", "st*", cwd=tmp_path)
    assert [line.split()[1] for line in named.stdout.splitlines()[1:2]] == ["stuck"]
    none = run_gategraph(home, "plans", "--name", "zzz*", cwd=tmp_path)
    assert none.stdout == f"no plan matches (of 3 in {home / 'events.db'})\n"
    bad = run_gategraph(home, "plans", "--status", "sleeping", cwd=tmp_path)
    assert bad.returncode == 2 and "Invalid value for '--status'" in bad.stderr

    # The same from Python: the log file, the default one (GATEGRAPH_HOME), filters.
    from gategraph.runtime import list_plans_sync

    assert [p.name for p in list_plans_sync(home / "events.db")] == ["asks", "stuck", "fine"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GATEGRAPH_HOME", str(home))
        people = list_plans_sync(status=["awaiting_approval", "awaiting_decision"])
    assert [(p.name, p.for_a_person) for p in people] == [("asks", True), ("stuck", True)]
    assert [p.name for p in list_plans_sync(home / "events.db", name="f*")] == ["fine"]
    assert list_plans_sync(tmp_path / "no-such.db") == []
    with pytest.raises(ValueError, match="no plan has the status 'sleeping'"):
        list_plans_sync(home / "events.db", status="sleeping")


@pytest.mark.anyio
async def test_list_plans_reads_an_event_log_object() -> None:
    """An in-memory log, as an embedding program keeps one; a run of the engine alone
    (validate) is no plan."""
    from gategraph.runtime import MemoryEventLog, list_plans, run_plan, validate

    log = MemoryEventLog()
    graph = {"version": 1, "name": "held", "validations": [BAD]}
    stuck = await run_plan(
        load_graph(
            {
                **graph,
                "nodes": [{"id": "check", "validation": "bad"}],
                "policy": {"retry_limit": 0, "strategy_revisions": 0},
            }
        ),
        event_log=log,
    )
    await validate({"a.py": "x = 1\n"}, ["python_syntax"], event_log=log)
    (found,) = await list_plans(log)
    assert (found.plan_id, found.status, found.rounds) == (stuck.plan_id, "awaiting_decision", 1)
    assert found.waiting_for == "a person's decision (exhausted)"
    assert await list_plans(log, status="applied") == []


def test_a_plan_that_never_finished_is_running_or_interrupted(tmp_path: Path) -> None:
    from gategraph.runtime import SQLiteEventLog
    from gategraph.runtime._data._events import PlanStarted

    log_path = tmp_path / "events.db"
    import anyio

    async def start() -> None:
        async with SQLiteEventLog(log_path) as log:
            await log.append(
                PlanStarted(id="01J0000000000000000000000A", plan_id="p1", seq=1, at=1.0, graph="g")
            )

    anyio.run(start)
    (summary,) = plan_summaries(log_path)
    assert summary.status == "interrupted" and summary.name == "g"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from gategraph.runtime import SQLiteEventLog\n"
            f"log = SQLiteEventLog({str(log_path)!r})\n"
            "with log.lease('p1'):\n"
            "    print('held', flush=True)\n"
            "    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        (summary,) = plan_summaries(log_path)
        assert summary.status == "running"
    finally:
        holder.communicate("", timeout=30)
    (summary,) = plan_summaries(log_path)
    assert summary.status == "interrupted"


def test_a_summary_of_no_events_is_none() -> None:
    assert summarize("p", []) is None  # no plan_started: an engine run, not a plan


# -- the picture of a graph -------------------------------------------------------------

SHIPPED = sorted(p for p in (ROOT / "graphs").rglob("*.yaml") if "demo-repo" not in p.parts)


def test_graph_draws_every_part_of_a_plan(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "repo").mkdir()
    plan = {
        "version": 1,
        "name": "pic",
        "resources": {"repo": {"kind": "directory", "path": "repo"}},
        "tools": [{"name": "make", "code": "def run(): return 1"}],
        "validations": [
            OK,
            {**OK, "name": "hint", "mode": "informational"},
        ],
        "nodes": [
            {"id": "make-it", "tool": "make"},
            {"id": "make_it", "tool": "make"},  # the same key once `-` is `_`
            {"id": "check", "validation": "ok", "needs": ["make-it", "make_it"]},
            {"id": "look", "validation": "hint", "needs": "make-it"},
            {"id": "end", "uses": "gategraph.runtime:Actor", "needs": ["check"]},
        ],
        "acceptance": [{"id": "AC1", "text": 'It says "ok" <always>.', "validations": ["ok"]}],
    }
    (tmp_path / "pic.yaml").write_text(json.dumps(plan))
    attached = run_gategraph(home, "validation", "attach", "repo", "python_syntax", cwd=tmp_path)
    assert attached.returncode == 0
    done = run_gategraph(home, "graph", "pic.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "flowchart TD"
    assert '  n_make_it["make-it<br/>tool: make"]:::work' in lines
    assert '  n_make_it_["make_it<br/>tool: make"]:::work' in lines
    assert '  n_check{{"check<br/>ok"}}:::required' in lines
    assert '  n_look{{"look<br/>hint (informational)"}}:::informational' in lines
    assert '  n_end("end<br/>uses: gategraph.runtime:Actor"):::actor' in lines
    assert '  a_0{{"attached: python_syntax<br/>on repo (direct)"}}:::attached' in lines
    assert '  c_0(["AC1: It says #quot;ok#quot; #lt;always#gt;."]):::criterion' in lines
    for edge in ("n_make_it --> n_check", "n_make_it_ --> n_check", "n_check --> n_end"):
        assert f"  {edge}" in lines
    assert "  n_make_it --> a_0" in lines and "  n_make_it_ --> a_0" in lines
    assert "  n_check -.-> c_0" in lines
    dot = run_gategraph(home, "graph", "pic.yaml", "--format", "dot", "-o", "pic.dot", cwd=tmp_path)
    assert dot.returncode == 0 and dot.stdout == "" and dot.stderr == "wrote pic.dot\n"
    text = (tmp_path / "pic.dot").read_text()
    assert text.startswith('digraph "pic" {') and '"n_check" -> "n_end";' in text
    assert 'label="AC1: It says \\"ok\\" <always>."' in text
    if shutil.which("dot"):
        rendered = run_process(["dot", "-Tsvg", str(tmp_path / "pic.dot")])
        assert rendered.returncode == 0 and "<svg" in rendered.stdout, rendered.stderr
    bad = run_gategraph(home, "graph", "pic.yaml", "--format", "png", cwd=tmp_path)
    assert bad.returncode == 2 and "Invalid value for '--format'" in bad.stderr
    broken = run_gategraph(home, "graph", "nope.yaml", cwd=tmp_path)
    assert broken.returncode == 2 and broken.stderr.startswith("error: ")
    gone = run_gategraph(home, "graph", "pic.yaml", "-o", "missing/pic.mmd", cwd=tmp_path)
    assert gone.returncode == 2 and "no such folder" in gone.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "pic.dot", "pic.yaml", "repo"]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_graph_draws(path: Path) -> None:
    from gategraph.runtime import draw_dot, draw_mermaid

    graph = load_graph(path)
    mermaid = draw_mermaid(graph)
    assert mermaid.startswith("flowchart TD\n")
    assert all(f"n_{node.id.replace('-', '_')}" in mermaid for node in graph.nodes)
    assert draw_dot(graph).rstrip().endswith("}")


def test_the_documented_picture_is_what_graph_prints(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "graphs.md").read_text(encoding="utf-8")
    documented = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    done = run_gategraph(
        tmp_path / "home", "graph", str(ROOT / "graphs" / "release-check.yaml"), cwd=tmp_path
    )
    assert done.stdout == documented


# -- the schema -------------------------------------------------------------------------


def test_the_schema_is_valid_and_published(tmp_path: Path) -> None:
    from jsonschema import Draft202012Validator

    done = run_gategraph(tmp_path / "home", "schema", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    Draft202012Validator.check_schema(schema)
    published = (ROOT / "docs" / "plan-graph.schema.json").read_text(encoding="utf-8")
    assert done.stdout == published, "docs/plan-graph.schema.json is stale: gategraph schema -o it"
    assert "slotted dataclass" not in done.stdout  # notes for developers stay out


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_graph_fits_the_schema(path: Path) -> None:
    import yaml
    from gategraph.runtime._definitions._graph_schema import graph_schema
    from jsonschema import Draft202012Validator

    errors = list(
        Draft202012Validator(graph_schema()).iter_errors(yaml.safe_load(path.read_text()))
    )
    assert errors == []


def test_the_schema_flags_what_an_editor_should() -> None:
    from gategraph.runtime._definitions._graph_schema import graph_schema
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(graph_schema())
    good = {
        "version": 1,
        "name": "x",
        "tools": [
            {"name": "t", "code": "def run(): pass", "read_only": True},
            {"name": "v", "wraps": "t", "transform": "{'passed': True}"},
        ],
        "skills": ["review", {"name": "s", "tools": ["t"]}],
        "mcp_servers": {"srv": {"command": "srv"}},
        "nodes": [{"id": "a", "tool": "t"}, {"id": "b", "validation": "v", "needs": "a"}],
    }
    assert list(validator.iter_errors(good)) == []
    for also_good in (
        # Each form the loader reads: one name for a list, a slot by its name, numbers as
        # an MCP server's arguments.
        {**good, "tools": [{"name": "t", "code": "def run(): pass", "resource_slots": ["root"]}]},
        {
            **good,
            "nodes": [
                {"id": "a", "tool": "t", "resources": "repo", "needs": "b"},
                {"id": "b", "tool": "t"},
            ],
        },
        {**good, "acceptance": [{"id": "AC1", "text": "x", "validations": "a"}]},
        {**good, "policy": {"approval": {"auto_approve": "low"}}},
        {**good, "mcp_servers": {"s": {"command": "s", "args": ["--port", 8080], "env": {"P": 1}}}},
    ):
        assert list(validator.iter_errors(also_good)) == [], also_good
    for bad in (
        {**good, "version": 2},
        {**good, "nodes": [{"id": "a", "tool": "t", "need": ["x"]}]},
        {**good, "policy": {"max_concurrency": 0}},
        {k: v for k, v in good.items() if k != "nodes"},
        {**good, "nodes": []},
        {**good, "name": "my plan"},
        {**good, "nodes": [{"id": "1a", "tool": "t"}]},
        {**good, "nodes": [{"id": "a", "tool": "t", "validation": "v"}]},
        {**good, "nodes": [{"id": "a"}]},
        {**good, "tools": [{"name": "t"}]},
        {**good, "mcp_servers": {"s": {"command": "c", "url": "http://x"}}},
        {**good, "mcp_servers": {"s": {}}},
    ):
        assert list(validator.iter_errors(bad)) != [], bad


def test_the_commands_on_the_demo_plan(tmp_path: Path) -> None:
    """`gategraph demo`, then each way of looking at the plan it ran."""
    home = tmp_path / "home"
    demo = run_gategraph(home, "demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    (listed,) = json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout)
    assert listed["status"] == "applied" and listed["name"] == "demo-fix"
    shown = run_gategraph(home, "show", listed["plan_id"], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "verdict: attest" in shown.stdout and "changes (round" in shown.stdout
    assert "+++ b/" in shown.stdout  # the demo's change, as a diff
    report = run_gategraph(home, "report", listed["plan_id"], "--html", "demo.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "<svg" in (tmp_path / "demo.html").read_text(encoding="utf-8")
    graph_file = listed["graph_path"]
    drawn = run_gategraph(home, "graph", graph_file, cwd=tmp_path)
    assert drawn.returncode == 0 and drawn.stdout.startswith("flowchart TD")


def test_engine_runs_are_not_plans_and_reading_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_plan(tmp_path, "fine")
    assert run_gategraph(home, "execute", "fine.yaml", cwd=tmp_path).returncode == 0
    assert json.loads(run_gategraph(home, "plans", "--json", cwd=tmp_path).stdout) == []
    (home / "events.db").unlink()
    (home / "events.db").write_bytes(b"")
    empty = run_gategraph(home, "plans", cwd=tmp_path)
    assert empty.returncode == 0 and "no plans" in empty.stdout
    assert (home / "events.db").read_bytes() == b""  # looking wrote nothing
    (home / "events.db").write_text("not a database" * 100)
    broken = run_gategraph(home, "plans", cwd=tmp_path)
    assert broken.returncode == 2 and "not a gategraph event log" in broken.stderr


def test_pictures_of_odd_text(tmp_path: Path) -> None:
    from gategraph.runtime import draw_dot, draw_mermaid

    graph = load_graph(
        {
            "version": 1,
            "name": "odd",
            "validations": [OK],
            "nodes": [{"id": "a", "validation": "ok"}],
            "acceptance": [
                {"id": "AC#1\nx", "text": "#quot; \ud800 and\nmore", "validations": ["a"]}
            ],
        }
    )
    mermaid = draw_mermaid(graph)
    assert '  c_0(["AC#35;1 x: #35;quot; \ufffd and more"]):::criterion' in mermaid
    mermaid.encode("utf-8")
    assert "AC#1 x: #quot; \ufffd and more" in draw_dot(graph)


def test_output_goes_through_what_is_not_a_regular_file(tmp_path: Path) -> None:
    """`-o` onto a device, a pipe or a link writes through it: never replaces it."""
    home = tmp_path / "home"
    target = tmp_path / "real.json"
    target.write_text("old")
    (tmp_path / "link.json").symlink_to(target)
    done = run_gategraph(home, "schema", "-o", "link.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "link.json").is_symlink() and target.read_text().startswith("{")
    full = run_gategraph(home, "schema", "-o", "/dev/full", cwd=tmp_path)
    assert full.returncode != 0 and Path("/dev/full").is_char_device()
    # (gategraph's own descriptor 1 is standard error: what code writes to it stays out
    # of its output, this too.)
    out = run_gategraph(home, "schema", "-o", "/dev/stdout", cwd=tmp_path)
    assert out.returncode == 0 and out.stderr.startswith("{") and Path("/dev/stdout").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_attached_validations_are_drawn_by_their_mode(tmp_path: Path) -> None:
    import sqlite3

    from gategraph.runtime import Catalog, ConfigError, Validation, draw_mermaid
    from gategraph.runtime._views._picture import draw

    (tmp_path / "repo").mkdir()
    path = tmp_path / "catalog.db"
    with Catalog.open(path) as catalog:
        catalog.add(Validation.from_config({**OK, "name": "advice", "mode": "informational"}))
        catalog.add(Validation.from_config({**OK, "name": "gone"}))
        catalog.attach("repo", "advice")
        catalog.attach("repo", "gone")
    with sqlite3.connect(path) as db:  # unreadable now, behind the catalog's back
        db.execute("UPDATE tools SET config = 'garbage' WHERE name = 'gone'")
    db.close()
    graph = load_graph(
        {
            "version": 1,
            "name": "attached",
            "resources": {"repo": {"kind": "directory", "path": str(tmp_path / "repo")}},
            "validations": [OK],
            "nodes": [{"id": "a", "validation": "ok"}],
        }
    )
    with Catalog.open(path) as catalog:
        mermaid = draw_mermaid(graph, catalog=catalog)
        with pytest.raises(ConfigError, match="format: must be one of mermaid, dot, not 'png'"):
            draw(graph, "png", catalog=catalog)
    assert (
        'a_0{{"attached: advice<br/>on repo (direct), informational"}}:::informational' in mermaid
    )
    assert 'a_1{{"attached: gone<br/>on repo (direct)"}}:::attached' in mermaid
