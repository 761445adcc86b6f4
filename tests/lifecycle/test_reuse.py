"""A fix round reuses the passing results of the validations given nothing new: recorded
as reused in the events, read back by replay, never for what reads beyond its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gategraph.runtime import (
    ExecuteRequest,
    FixRequest,
    MemoryEventLog,
    PlanGraph,
    load_graph,
    replay_plan,
    run_plan,
)
from gategraph.runtime._data._events import ValidationCompleted
from gategraph.runtime._lifecycle._plan_reuse import (
    RoundSeen,
    _module_file,
    arguments_of,
    reusable_tools,
    same_read,
    tools_of,
)

pytestmark = pytest.mark.anyio

# What is in each folder's sandbox, unsnapshotted files included (a digest of a listing).
SEEN = {"repo": "l1", "docs": "l2"}
INPUTS = {"repo": "r1", "docs": "d1"}


def seen(
    graph: PlanGraph,
    inputs: dict[str, str] | None = INPUTS,
    unseen: dict[str, str] = SEEN,
    given: dict[str, Any] | None = None,
    artifact: Any = None,
) -> RoundSeen:
    """What a round of ``graph`` takes note of, as it starts."""
    return RoundSeen(graph, given or {}, artifact, inputs, unseen, tools_of(graph))


def same(graph: PlanGraph, node: str, before: RoundSeen, now: RoundSeen) -> bool:
    """Whether ``node``'s earlier result may stand for the call of round ``now``."""
    tools = reusable_tools(graph, node)
    return tools is not None and same_read(graph, node, tools, before, now)


def _graph(tmp_path: Path, extra: str = "") -> PlanGraph:
    """Code in ``repo``, notes in ``docs``; a syntax check of the code and three checks
    of the notes: one reusable, one that reads the time (``reuse: false``), one that
    declares the network."""
    repo, docs = tmp_path / "repo", tmp_path / "docs"
    repo.mkdir(parents=True, exist_ok=True)
    docs.mkdir(parents=True, exist_ok=True)
    (repo / "a.py").write_text("x = 1\n")
    (docs / "notes.md").write_text("all done\n")
    regex = "entrypoint: 'gategraph.validators:regex', resource_slots: [root]"
    return load_graph(
        f"""
version: 1
name: reuse
resources:
  repo: {{kind: directory, path: '{repo}'}}
  docs: {{kind: directory, path: '{docs}'}}
validations:
  - {{name: notes-clean, {regex}}}
  - {{name: notes-fresh, reuse: false, {regex}}}
  - {{name: notes-online, network: true, {regex}}}
nodes:
  - {{id: syntax, validation: python_syntax, resources: [repo], arguments: {{scope: tree}}}}
  - {{id: clean, validation: notes-clean, resources: [docs], arguments: {{pattern: TODO}}}}
  - {{id: fresh, validation: notes-fresh, resources: [docs], arguments: {{pattern: TODO}}}}
  - {{id: online, validation: notes-online, resources: [docs], arguments: {{pattern: TODO}}}}
{extra}"""
    )


async def _edit(request: ExecuteRequest) -> Any:
    """Break the code, then fix it: the notes are never touched."""
    broken = not isinstance(request, FixRequest)
    (request.resources["repo"] / "b.py").write_text("def f(:\n" if broken else "y = 2\n")
    return {"files": ["b.py"]}


async def test_a_fix_round_reuses_what_was_given_nothing_new(tmp_path: Path) -> None:
    """The fix changes the code: its check runs again; the notes' reusable check is not
    called again, its result recorded as reused from round 1; the checks that read the
    time or the network run again; the plan replays to a match."""
    log = MemoryEventLog()
    outcome = await run_plan(_graph(tmp_path), event_log=log, execution_actor=_edit)
    assert outcome.status == "applied", outcome.message
    events = await log.read(outcome.plan_id)
    completed = [e for e in events if isinstance(e, ValidationCompleted)]
    by_round: dict[str, list[int | None]] = {}
    for event in completed:
        by_round.setdefault(event.node, []).append(event.reused_from)
    assert by_round == {
        "syntax": [None, None],
        "clean": [None, 1],
        "fresh": [None, None],
        "online": [None, None],
    }
    first, again = [e for e in completed if e.node == "clean"]
    assert again.result == first.result and again.duration == first.duration
    assert again.attempt == 2
    record = next(v for v in outcome.validations if v.node == "clean")
    assert record.reused_from == 1 and record.result.passed
    report = replay_plan(events, _graph(tmp_path))
    assert report.matches, report.mismatches


async def test_a_changed_argument_or_resource_is_judged_again(tmp_path: Path) -> None:
    """What a validation reads: the content of its resources (a folder's unsnapshotted
    files too), its artifact; anything unknown, or declared out of sight, reads as new."""
    graph = _graph(tmp_path)
    first = seen(graph)
    assert same(graph, "clean", first, seen(graph))
    assert same(graph, "clean", first, seen(graph, {**INPUTS, "repo": "r2"}))  # not its folder
    assert not same(graph, "clean", first, seen(graph, {**INPUTS, "docs": "d2"}))
    assert not same(graph, "clean", first, seen(graph, None))
    assert not same(graph, "clean", first, seen(graph, {"repo": "r1"}))
    assert not same(graph, "fresh", first, seen(graph))
    assert not same(graph, "online", first, seen(graph))
    assert reusable_tools(graph, "attachment:01J") is None
    # The artifact a node without needs is given, and one with no JSON form.
    assert not same(graph, "clean", first, seen(graph, artifact={"a": 1}))
    odd = seen(graph, artifact=object())
    assert not same(graph, "clean", odd, odd)
    # Something the snapshot leaves out (an ignored file the fix wrote) changed.
    assert not same(graph, "clean", first, seen(graph, unseen={**SEEN, "docs": "l3"}))
    assert not same(graph, "clean", first, seen(graph, unseen={"repo": "l1"}))


async def test_a_validation_that_needs_another_is_judged_by_what_that_gave(
    tmp_path: Path,
) -> None:
    """A validation after another in the same round is not reused: what that one gives is
    not known until it runs; given, its output must be the same."""
    graph = _graph(
        tmp_path,
        "  - {id: after, validation: notes-clean, needs: [clean], resources: [docs], "
        "arguments: {pattern: TODO}}\n",
    )
    assert not same(graph, "after", seen(graph), seen(graph))
    passed = seen(graph, given={"clean": {"passed": True}})
    assert same(graph, "after", passed, seen(graph, given={"clean": {"passed": True}}))
    assert not same(graph, "after", passed, seen(graph, given={"clean": {"passed": False}}))


def test_an_entrypoint_module_is_found_without_being_imported(tmp_path: Path) -> None:
    """A plan's own module is read, never run, to pin its code: a package's ``__init__``
    that would run on import does not."""
    import sys

    package = tmp_path / "pkg_for_reuse"
    package.mkdir()
    (package / "__init__.py").write_text("raise SystemExit('imported')\n")
    (package / "checks.py").write_text("def run(**_): return {'passed': True}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert _module_file("pkg_for_reuse.checks") == str(package / "checks.py")
        assert _module_file("pkg_for_reuse.missing") is None
        assert _module_file("no_such_top_level_module_xyz") is None
        # Its code is part of the key: changed, the key changes; not found, no key.
        text = (
            "version: 1\nname: own\nresources: {docs: {kind: directory, path: '%s'}}\n"
            "validations: [{name: mine, entrypoint: '%s', resource_slots: [root]}]\n"
            "nodes: [{id: mine, validation: mine, resources: [docs]}]\n"
        )
        (tmp_path / "docs").mkdir()
        graph = load_graph(text % (tmp_path / "docs", "pkg_for_reuse.checks:run"))
        before = seen(graph)
        assert same(graph, "mine", before, seen(graph))
        (package / "checks.py").write_text("def run(**_): return {'passed': False}\n")
        assert not same(graph, "mine", before, seen(graph))
        gone = load_graph(text % (tmp_path / "docs", "pkg_for_reuse.gone:run"))
        assert not same(gone, "mine", seen(gone), seen(gone))
        assert "pkg_for_reuse" not in sys.modules
    finally:
        sys.path.remove(str(tmp_path))


_EDITOR = """\
from gategraph.runtime import FixRequest


class Editor:
    async def execute(self, request):
        return self._write(request, "def f(:\\n")

    async def fix(self, request: FixRequest):
        return self._write(request, "y = 2\\n")

    def _write(self, request, text):
        (request.resources["repo"] / "b.py").write_text(text)
        return {"files": ["b.py"]}
"""


def test_the_command_line_shows_what_it_reused(tmp_path: Path) -> None:
    """``gategraph run`` says a result was reused, in its progress and its table; ``show``
    counts it; the HTML and JUnit reports say which round it came from."""
    import json
    import re

    from _helpers import run_gategraph

    _graph(tmp_path)  # the folders
    (tmp_path / "agents_for_reuse.py").write_text(_EDITOR)
    repo, docs = tmp_path / "repo", tmp_path / "docs"
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        f"""
version: 1
name: reuse
resources:
  repo: {{kind: directory, path: '{repo}'}}
  docs: {{kind: directory, path: '{docs}'}}
lifecycle:
  executor: {{uses: 'agents_for_reuse:Editor'}}
nodes:
  - {{id: syntax, validation: python_syntax, resources: [repo]}}
  - {{id: clean, validation: regex, resources: [docs], arguments: {{pattern: TODO}}}}
"""
    )
    home = tmp_path / "home"
    html, junit = tmp_path / "report.html", tmp_path / "junit.xml"
    done = run_gategraph(
        home,
        "run",
        str(plan),
        "--plan-id",
        "reused",
        "--report",
        "html",
        str(html),
        cwd=tmp_path,
        pythonpath=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "ok   clean: No match in changed files matching '**/*' (0 files searched) "
        "(reused from round 1)" in done.stdout + done.stderr
    )
    assert re.search(r"clean .* reused \(round 1\)", done.stdout), done.stdout
    assert "reused (round 1)" in html.read_text()
    shown = run_gategraph(home, "show", "reused", cwd=tmp_path)
    assert "reused: 1 result(s) of earlier rounds" in shown.stdout, shown.stdout
    as_json = run_gategraph(home, "show", "reused", "--json", cwd=tmp_path)
    calls = [c for r in json.loads(as_json.stdout)["timeline"] for c in r["validations"]]
    assert [c["reused_from"] for c in calls if c["node"] == "clean"] == [None, 1]
    done = run_gategraph(
        home,
        "run",
        str(plan),
        "--plan-id",
        "again",
        "--report",
        "junit",
        str(junit),
        cwd=tmp_path,
        pythonpath=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert '<property name="reused_from" value="1" />' in junit.read_text()


async def test_a_resumed_plan_reuses_nothing_its_log_holds(tmp_path: Path) -> None:
    """A result in the log was made by the code of its day: after a resume, a later round
    calls the validation again rather than trust a key made with today's code."""
    from gategraph.runtime import EscalationDecision, resume_plan

    fixed = tmp_path / "fixed"

    async def edit(request: ExecuteRequest) -> Any:
        good = fixed.exists()
        (request.resources["repo"] / "b.py").write_text("y = 2\n" if good else "def f(:\n")
        return {"files": ["b.py"]}

    graph = _graph(tmp_path, "policy: {retry_limit: 1, strategy_revisions: 0}\n")
    log = MemoryEventLog()
    paused = await run_plan(graph, event_log=log, execution_actor=edit)
    assert paused.status == "awaiting_decision", paused.message
    before = [e for e in await log.read(paused.plan_id) if isinstance(e, ValidationCompleted)]
    assert [e.reused_from for e in before if e.node == "clean"] == [None, 1]
    fixed.write_text("")
    done = await resume_plan(
        paused.plan_id,
        graph,
        event_log=log,
        execution_actor=edit,
        decision=EscalationDecision(action="retry"),
    )
    assert done.status == "applied", done.message
    after = [e for e in await log.read(paused.plan_id) if isinstance(e, ValidationCompleted)]
    assert [e.reused_from for e in after if e.node == "clean"] == [None, 1, None]


def test_a_validation_over_a_validator_tool_is_never_reused(tmp_path: Path) -> None:
    """The validator tools read the catalog's coverage, which changes between rounds."""
    docs = tmp_path / "docs"
    docs.mkdir()
    graph = load_graph(
        f"""
version: 1
name: covered
resources: {{docs: {{kind: directory, path: '{docs}'}}}}
validations:
  - {{name: covered, wraps: validator.ac-pull, transform: "{{'passed': True}}"}}
nodes: [{{id: covered, validation: covered, resources: [docs], arguments: {{task_id: t}}}}]
"""
    )
    assert reusable_tools(graph, "covered") is None


def test_the_key_reads_sets_and_a_module_it_cannot_read_gives_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set in an artifact has a JSON form (sorted); a module file that cannot be read,
    or a namespace package with no file, gives no key."""
    import sys

    from gategraph.runtime._lifecycle import _plan_reuse

    graph = _graph(tmp_path)
    assert same(
        graph, "clean", seen(graph, artifact={"s": {2, 1}}), seen(graph, artifact={"s": {1, 2}})
    )
    (tmp_path / "nspkg_for_reuse").mkdir()  # no __init__.py: no file of its own
    (tmp_path / "mod_for_reuse.py").write_text("def run(**_): return {'passed': True}\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert _module_file("nspkg_for_reuse") is None
        text = (
            "version: 1\nname: own\nresources: {docs: {kind: directory, path: '%s'}}\n"
            "validations: [{name: mine, entrypoint: 'mod_for_reuse:run', resource_slots: "
            "[root]}]\nnodes: [{id: mine, validation: mine, resources: [docs]}]\n"
        ) % (tmp_path / "docs")
        own = load_graph(text)
        assert same(own, "mine", seen(own), seen(own))

        def unreadable(*_: Any, **__: Any) -> Any:
            raise PermissionError("denied")

        monkeypatch.setattr(_plan_reuse, "open", unreadable, raising=False)
        assert not same(own, "mine", seen(own), seen(own))
    finally:
        sys.path.remove(str(tmp_path))


def test_a_reused_result_counts_as_started_on_the_live_panel() -> None:
    """The panel's running count stays right: a reused result had no start of its own."""
    from gategraph.runtime._data._results import ValidationResult
    from gategraph.runtime._running._observe import LiveProgress

    panel = LiveProgress()
    event = ValidationCompleted(
        id="e",
        plan_id="p",
        seq=1,
        at=1.0,
        node="n",
        validation="v",
        result=ValidationResult(passed=True),
        duration=1.0,
        reused_from=1,
    )
    panel.on_event(event)
    assert panel.state.started == panel.state.done == 1


def test_names_a_graph_built_in_python_cannot_resolve_are_left_out() -> None:
    """A graph built without the loader may name what it does not hold: a round takes no
    note of those, and their nodes are never reused."""
    from gategraph.runtime import Node, Validation

    wrapping = Validation(name="wrapping", wraps="missing-tool", transform="output")
    graph = PlanGraph(
        version=1,
        name="g",
        validations=(wrapping,),
        nodes=(Node(id="a", validation="wrapping"), Node(id="b", validation="nowhere")),
    )
    assert tools_of(graph) == frozenset()
    assert reusable_tools(graph, "b") is None
    assert arguments_of(None) is None  # an attachment: never reused
    assert arguments_of(graph.node("a")) == b"{}"


async def test_arguments_changed_in_place_are_judged_again(tmp_path: Path) -> None:
    """A node's arguments are a mapping code could change while the plan runs (an
    execution actor is handed the graph): changed, the validation is called again."""
    graph = _graph(tmp_path)

    async def edit(request: ExecuteRequest) -> Any:
        broken = not isinstance(request, FixRequest)
        (request.resources["repo"] / "b.py").write_text("def f(:\n" if broken else "y = 2\n")
        if not broken:
            # Now it requires a pattern the notes do not hold: a call fails.
            request.graph.node("clean").arguments.update(pattern="nowhere", mode="require")
        return {"files": ["b.py"]}

    log = MemoryEventLog()
    outcome = await run_plan(graph, event_log=log, execution_actor=edit)
    events = [e for e in await log.read(outcome.plan_id) if isinstance(e, ValidationCompleted)]
    clean = [e for e in events if e.node == "clean"]
    assert all(e.reused_from is None for e in clean)
    assert [e.result.passed for e in clean][:2] == [True, False]
    assert outcome.status != "applied"


def test_only_what_may_be_reused_has_its_code_read(tmp_path: Path) -> None:
    """A round reads the code of the validations that may be reused, not of those that
    never are (their modules are not looked for at all)."""
    graph = _graph(tmp_path)
    assert tools_of(graph) == frozenset({"python_syntax", "notes-clean"})


def test_a_folder_given_for_any_resource_is_judged_by_its_listing(tmp_path: Path) -> None:
    """A listing is compared wherever a round has one, whatever kind the graph declared."""
    graph = _graph(tmp_path)
    first = seen(graph)
    assert not same(graph, "clean", first, seen(graph, unseen={**SEEN, "docs": "other"}))
    assert same(graph, "clean", first, seen(graph))
