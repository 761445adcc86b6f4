"""The LangGraph adapter against the real LangGraph: gate and router, the approval bridge on
interrupt()/Command(resume=...), a validation as a node, a graph as a gategraph tool, and the
docs' example.

LangGraph's sync API (``invoke``) needs no event loop; its async API (``ainvoke``) is
asyncio's own, so the tests that use it run on asyncio only.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph")

import anyio
from _helpers import fake_module
from gategraph.runtime import (
    ApprovalDecided,
    Catalog,
    ConfigError,
    MaxNPolicy,
    MemoryEventLog,
    PlanFinished,
    SQLiteEventLog,
    Validation,
    WorkFinished,
    execute_graph_sync,
    load_graph,
    read_events,
    tool_from_config,
)
from gategraph.runtime.integrations.langgraph import (
    ApprovalNode,
    GateNode,
    GateState,
    GraphTool,
    ValidationNode,
    route,
    thread_plan_prefix,
)
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send
from pydantic import BaseModel
from typing_extensions import TypedDict

MODULE = "gategraph.runtime.integrations.langgraph"
DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations" / "langgraph.md"
BROKEN = {"app.py": "def greet(:\n"}
FIXED = {"app.py": "def greet():\n    return 'hi'\n"}
ROUTES = {"pass": END, "fix": "propose", "retry": "gate", "escalate": END}


def _proposer(*changes: dict[str, str]) -> tuple[Any, list[int]]:
    """A deterministic 'model': the n-th proposal is ``changes[n]`` (the last one repeats)."""
    calls: list[int] = []

    def propose(state: GateState) -> GateState:
        calls.append(1)
        return {"change": changes[min(len(calls), len(changes)) - 1]}

    return propose, calls


def _gate_loop(gate: Any, *changes: dict[str, str], checkpointer: Any = None) -> Any:
    """propose → gate → route (pass: end, fix: propose, retry: gate, escalate: end)."""
    propose, _ = _proposer(*changes)
    builder = StateGraph(GateState)
    builder.add_node("propose", propose)
    builder.add_node("gate", gate)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "gate")
    builder.add_conditional_edges("gate", route, ROUTES)
    return builder.compile(checkpointer=checkpointer)


# -- the gate node and the router ----------------------------------------------------------


def test_a_rejected_change_goes_back_to_be_fixed_and_then_passes() -> None:
    """The broken proposal is rejected with feedback, routed to `fix`, and the fix attests;
    the verdict in the state is plain JSON that a checkpointer stores."""
    saver = InMemorySaver()
    graph = _gate_loop(GateNode(["python_syntax"]), BROKEN, FIXED, checkpointer=saver)
    config = {"configurable": {"thread_id": "fix-once"}}
    result = graph.invoke({}, config)
    verdict = result["verdict"]
    assert verdict["passed"] is True
    assert verdict["decision"] == "attested"
    assert verdict["findings"][0]["status"] == "pass"
    assert verdict["budget"] == {"used": 1, "limit": 3, "rounds": [["rejected"]]}
    assert json.loads(json.dumps(verdict)) == verdict
    assert graph.get_state(config).values["verdict"] == verdict  # as the checkpoint keeps it


def test_the_rejection_says_what_to_fix() -> None:
    """A one-round graph leaves the rejected verdict: feedback, failures, findings."""
    builder = StateGraph(GateState)
    builder.add_node("gate", GateNode("python_syntax"))
    builder.add_edge(START, "gate")
    builder.add_edge("gate", END)
    verdict = builder.compile().invoke({"change": BROKEN})["verdict"]
    assert verdict["passed"] is False
    assert verdict["decision"] == "fix"
    assert verdict["fault"] == "rejected"
    assert "python_syntax" in verdict["feedback"] and "app.py" in verdict["feedback"]
    assert verdict["failures"][0]["validation"] == "python_syntax"
    assert verdict["findings"][0]["status"] == "fail"
    assert route({"verdict": verdict}) == "fix"


def test_the_budget_of_a_thread_lives_in_its_checkpoint() -> None:
    """One round per invocation on one thread: the count goes on across invocations and
    across a fresh node object (nothing in memory), and escalates when spent; another
    thread has its own budget."""
    saver = InMemorySaver()

    def one_round() -> Any:
        builder = StateGraph(GateState)
        builder.add_node("gate", GateNode(["python_syntax"], policy=MaxNPolicy(limit=2)))
        builder.add_edge(START, "gate")
        builder.add_edge("gate", END)
        return builder.compile(checkpointer=saver)

    thread = {"configurable": {"thread_id": "stubborn"}}
    seen = []
    for _ in range(3):
        verdict = one_round().invoke({"change": BROKEN}, thread)["verdict"]
        seen.append((verdict["decision"], verdict["budget"]["used"]))
    assert seen == [("fix", 1), ("fix", 2), ("escalate-exhausted", 2)]
    other = one_round().invoke({"change": BROKEN}, {"configurable": {"thread_id": "other"}})
    assert other["verdict"]["budget"]["used"] == 1


def test_a_pass_ends_the_budget() -> None:
    """After a verdict that passed, the next round of the thread starts a fresh budget."""
    saver = InMemorySaver()
    builder = StateGraph(GateState)
    builder.add_node("gate", GateNode(["python_syntax"]))
    builder.add_edge(START, "gate")
    builder.add_edge("gate", END)
    graph = builder.compile(checkpointer=saver)
    thread = {"configurable": {"thread_id": "t"}}
    used = [
        graph.invoke({"change": change}, thread)["verdict"]["budget"]["used"]
        for change in (BROKEN, BROKEN, FIXED, BROKEN)
    ]
    assert used == [1, 2, 2, 1]


GARBLED = {"name": "garbled", "code": "def run(**_):\n    return 'not a result'\n"}


def test_a_validation_that_cannot_decide_is_retried_without_a_fix() -> None:
    """A malformed result is an infrastructure fault: `retry` runs the gate again on the
    same change (the proposer is not asked), and its own retries spent, it escalates."""
    propose, calls = _proposer(FIXED)
    gate_runs: list[str] = []
    gate = GateNode([GARBLED])

    def counted(state: GateState, config: RunnableConfig) -> Any:
        gate_runs.append(route(state) if state.get("verdict") else "first")
        return gate(state, config)

    builder = StateGraph(GateState)
    builder.add_node("propose", propose)
    builder.add_node("gate", counted)
    builder.add_edge(START, "propose")
    builder.add_edge("propose", "gate")
    builder.add_conditional_edges("gate", route, ROUTES)
    verdict = builder.compile().invoke({})["verdict"]
    assert gate_runs == ["first", "retry"]
    assert len(calls) == 1
    assert verdict["decision"] == "escalate-exhausted"
    assert verdict["budget"]["rounds"] == [["malformed"]]


def test_route_maps_every_decision_and_refuses_what_is_not_a_verdict() -> None:
    """Each ladder decision has its edge; a missing or foreign verdict is one clear error."""
    expected = {
        "attested": "pass",
        "fix": "fix",
        "retry-validator": "retry",
        "escalate-exhausted": "escalate",
        "escalate-permanent": "escalate",
    }
    for decision, edge in expected.items():
        assert route({"verdict": {"decision": decision}}) == edge
        assert route({"check": {"decision": decision}}, key="check") == edge
    with pytest.raises(ConfigError, match=r"state\['verdict'\]: holds no verdict"):
        route({})
    with pytest.raises(ConfigError, match=r"state\['verdict'\]\.decision: 'maybe' is not"):
        route({"verdict": {"decision": "maybe"}})


def test_bad_state_is_one_clear_error() -> None:
    """No change, a change of the wrong shape, a verdict that is not one: ConfigError
    naming the state key."""
    gate = GateNode(["python_syntax"])
    with pytest.raises(ConfigError, match=r"state\['change'\]: the state has no 'change' or"):
        gate({}, {})
    with pytest.raises(ConfigError, match=r"state\['change'\]: a change maps .* 'a\.py' maps"):
        gate({"change": {"a.py": 3}}, {})
    with pytest.raises(ConfigError, match=r"state\['change'\]: a change is a mapping .* int"):
        gate({"change": 3}, {})
    for outside in ("../x.py", "/etc/x.py", ""):
        with pytest.raises(ConfigError, match=r"is not a relative path inside the folder"):
            gate({"change": {outside: "x = 1\n"}}, {})
    with pytest.raises(ConfigError, match=r"state\['verdict'\]\.budget: is not a budget"):
        gate({"change": FIXED, "verdict": {"passed": False, "budget": {"rounds": 3}}}, {})
    with pytest.raises(ConfigError, match=r"event_log: a object is not an event log"):
        GateNode(["python_syntax"], event_log=object())  # type: ignore[arg-type]


def test_one_validation_object_on_its_own() -> None:
    """A Validation (not in a list) is the one validation, as validate() takes it."""
    syntax = Validation.from_config(
        {
            "name": "syntax",
            "entrypoint": "gategraph.validators:python_syntax",
            "resource_slots": [{"name": "root", "kind": "directory"}],
        }
    )
    gate = GateNode(syntax)
    assert gate({"change": FIXED}, {})["verdict"]["passed"] is True
    assert gate({"change": BROKEN}, {})["verdict"]["failures"][0]["validation"] == "syntax"


def test_an_artifact_and_an_event_log(tmp_path: Path) -> None:
    """A value in `artifact` is judged as the validations' artifact; with a log path, the
    round's events are in that SQLite log under the verdict's plan id."""
    schema = {"type": "object", "required": ["title"]}
    log = tmp_path / "events.db"
    gate = GateNode([{"validation": "json_schema", "arguments": {"schema": schema}}], event_log=log)
    verdict = gate({"artifact": {"title": "x"}}, {})["verdict"]
    assert verdict["passed"] is True
    assert any(
        type(e).__name__ == "ValidationCompleted" for e in read_events(log, verdict["plan_id"])
    )
    assert gate({"artifact": {}}, {})["verdict"]["decision"] == "fix"


# -- the approval bridge -------------------------------------------------------------------


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    return repo


def _approval_graph(node: ApprovalNode, saver: Any, *, loop: bool = False, fix: Any = None) -> Any:
    builder = StateGraph(GateState)
    builder.add_node("apply", node)
    builder.add_edge(START, "apply")
    if loop:
        builder.add_node("propose", fix)
        builder.add_edge("propose", "apply")
        builder.add_conditional_edges(
            "apply", node.route, {"pass": END, "fix": "propose", "retry": "apply", "escalate": END}
        )
    else:
        builder.add_edge("apply", END)
    return builder.compile(checkpointer=saver)


async def _plans(event_log: Any, thread: str) -> dict[str, str]:
    """The thread's plans in the log, each with its status (its last plan_finished)."""
    if isinstance(event_log, Path):
        async with SQLiteEventLog(event_log) as log:
            return await _plans(log, thread)
    found = {}
    for plan in await event_log.plans():
        if plan.startswith(thread_plan_prefix(thread)):
            finished = [e for e in await event_log.read(plan) if isinstance(e, PlanFinished)]
            found[plan] = finished[-1].status if finished else "running"
    return found


def test_approve_continues_the_same_plan_and_only_then_changes_the_folder(tmp_path: Path) -> None:
    """The plan pauses with interrupt(); the folder is untouched until Command(resume=
    "approve"), which a fresh node object (a new process, say) answers by continuing the
    one plan in the durable log: never a second plan, and the work is not done again."""
    repo, log = _repo(tmp_path), tmp_path / "events.db"
    saver, thread = InMemorySaver(), {"configurable": {"thread_id": "edit-1"}}

    def graph() -> Any:
        return _approval_graph(
            ApprovalNode(["python_syntax"], folder=repo, event_log=log, tier="high"), saver
        )

    paused = graph().invoke({"change": {"b.py": "y = 2\n"}}, thread)
    (question,) = paused["__interrupt__"]
    assert question.value["kind"] == "gategraph.approval"
    assert question.value["tier"] == "high"
    assert question.value["files"] == ["b.py"]
    assert question.value["findings"][0]["status"] == "pass"
    assert not (repo / "b.py").exists()
    plans = anyio.run(_plans, log, "edit-1")
    assert list(plans.values()) == ["awaiting_approval"]
    assert question.value["plan_id"] in plans

    done = graph().invoke(Command(resume="approve"), thread)
    verdict = done["verdict"]
    assert (verdict["status"], verdict["approved"], verdict["passed"]) == ("applied", True, True)
    assert (repo / "b.py").read_text() == "y = 2\n"
    assert anyio.run(_plans, log, "edit-1") == {verdict["plan_id"]: "applied"}
    events = read_events(log, verdict["plan_id"])
    assert sum(isinstance(e, WorkFinished) for e in events) == 1
    assert route(done) == "pass"


def test_deny_fails_the_plan_and_leaves_the_folder(tmp_path: Path) -> None:
    """A denial with a note ends the one plan failed; the verdict routes to escalate."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "edit-2"}}
    graph.invoke({"change": {"b.py": "y = 2\n"}}, thread)
    done = graph.invoke(Command(resume={"action": "deny", "note": "not on a Friday"}), thread)
    verdict = done["verdict"]
    assert (verdict["status"], verdict["approved"], verdict["passed"]) == ("failed", False, False)
    assert (verdict["decision"], verdict["fault"]) == ("escalate-permanent", "denied")
    assert verdict["feedback"] == "denied by a person: not on a Friday"
    assert route(done) == "escalate"
    assert not (repo / "b.py").exists()
    assert list(anyio.run(_plans, log, "edit-2").values()) == ["failed"]


@pytest.mark.parametrize(
    ("answer", "approved", "note"),
    [
        ({"type": "accept"}, True, None),
        ([{"type": "accept", "args": None}], True, None),  # as an agent inbox sends it
        ({"type": "ignore"}, False, "ignored by a person"),
        ([{"type": "response", "args": "use the helper instead"}], False, "use the helper instead"),
    ],
)
def test_langgraph_human_interrupt_answers(
    tmp_path: Path, answer: Any, approved: bool, note: str | None
) -> None:
    """The question is LangGraph's human-interrupt request (what an agent inbox shows);
    its responses answer it: accept applies, ignore and a response deny (the response is
    the note, fed back to whoever made the change)."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "inbox"}}
    (question,) = graph.invoke({"change": {"b.py": "y = 2\n"}}, thread)["__interrupt__"]
    asked = question.value
    assert asked["action_request"] == {"action": "apply", "args": {"files": {"b.py": "y = 2\n"}}}
    assert asked["config"] == {
        "allow_accept": True,
        "allow_ignore": True,
        "allow_respond": True,
        "allow_edit": True,
    }
    assert asked["description"] == asked["message"]
    verdict = graph.invoke(Command(resume=answer), thread)["verdict"]
    assert verdict["approved"] is approved
    assert (repo / "b.py").exists() is approved
    if note is not None:
        assert verdict["feedback"] == f"denied by a person: {note}"


def test_a_person_edits_the_change_and_the_edit_is_validated_before_it_applies(
    tmp_path: Path,
) -> None:
    """An edit answers with other files: the asked plan is denied, the edited change is
    validated in a plan of its own and applied when it passes; an edit that breaks a
    validation is not applied, and goes back as a fix."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )

    def edit(files: dict[str, str]) -> dict[str, Any]:
        return {"type": "edit", "args": {"action": "apply", "args": {"files": files}}}

    thread = {"configurable": {"thread_id": "edited"}}
    graph.invoke({"change": {"b.py": "y = 2\n"}}, thread)
    verdict = graph.invoke(Command(resume=[edit({"b.py": "y = 3  # reviewed\n"})]), thread)[
        "verdict"
    ]
    assert (verdict["status"], verdict["approved"], verdict["edited"]) == ("applied", True, True)
    assert (repo / "b.py").read_text() == "y = 3  # reviewed\n"
    plans = anyio.run(_plans, log, "edited")
    assert sorted(plans.values()) == ["applied", "failed"]  # the asked one denied
    assert verdict["plan_id"].endswith("-edited") and plans[verdict["plan_id"]] == "applied"

    thread = {"configurable": {"thread_id": "broken-edit"}}
    graph.invoke({"change": {"c.py": "z = 1\n"}}, thread)
    verdict = graph.invoke(Command(resume=edit({"c.py": "def (:\n"})), thread)["verdict"]
    assert (verdict["status"], verdict["decision"], verdict["edited"]) == ("failed", "fix", True)
    assert not (repo / "c.py").exists()


def test_a_rejected_change_is_not_asked_about_and_a_fix_gets_its_own_plan(tmp_path: Path) -> None:
    """A change that fails its validations is never put to a person: the plan fails, the
    verdict routes to `fix` on the thread's budget, and the fixed change is a new plan
    (a new task) that pauses, is approved and applied."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    node = ApprovalNode(["python_syntax"], folder=repo, event_log=log)
    propose, _ = _proposer(FIXED)
    graph = _approval_graph(node, InMemorySaver(), loop=True, fix=propose)
    thread = {"configurable": {"thread_id": "edit-3"}}
    paused = graph.invoke({"change": BROKEN}, thread)
    assert paused["verdict"]["decision"] == "fix"  # the rejected round, before the fix
    assert paused["verdict"]["status"] == "failed" and paused["verdict"]["approved"] is None
    assert "__interrupt__" in paused
    assert not (repo / "app.py").exists()
    done = graph.invoke(Command(resume=True), thread)
    assert done["verdict"]["status"] == "applied"
    assert done["verdict"]["budget"]["rounds"] == [["rejected"]]
    assert (repo / "app.py").read_text() == FIXED["app.py"]
    assert sorted(anyio.run(_plans, log, "edit-3").values()) == ["applied", "failed"]


def test_a_validation_that_cannot_decide_is_not_put_to_a_person(tmp_path: Path) -> None:
    """An infrastructure fault in the plan's round routes to `retry` on the thread's
    budget, as a gate's would; nobody is asked and nothing is applied."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(ApprovalNode([GARBLED], folder=repo, event_log=log), InMemorySaver())
    done = graph.invoke({"change": {"b.py": "y = 2\n"}}, {"configurable": {"thread_id": "t"}})
    assert "__interrupt__" not in done
    verdict = done["verdict"]
    assert (verdict["decision"], verdict["fault"], verdict["status"]) == (
        "retry-validator",
        "malformed",
        "failed",
    )
    assert verdict["budget"]["rounds"] == [["malformed"]]
    assert not (repo / "b.py").exists()


def test_a_folder_as_the_change_is_copied_in(tmp_path: Path) -> None:
    """The change may be a folder: its tree is applied over the folder once approved."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    change = tmp_path / "change"
    (change / "pkg").mkdir(parents=True)
    (change / "pkg" / "m.py").write_text("z = 3\n")
    graph = _approval_graph(
        ApprovalNode("python_syntax", folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "folder"}}
    paused = graph.invoke({"change": str(change)}, thread)
    assert paused["__interrupt__"][0].value["files"] == ["pkg/m.py"]
    graph.invoke(Command(resume="approve"), thread)
    assert (repo / "pkg" / "m.py").read_text() == "z = 3\n"
    assert (repo / "a.py").read_text() == "x = 1\n"


def test_the_approval_bridge_needs_a_thread_and_a_task(tmp_path: Path) -> None:
    """Without a checkpointer's thread id, or outside a graph: one clear error each."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    node = ApprovalNode(["python_syntax"], folder=repo, event_log=log)
    builder = StateGraph(GateState)
    builder.add_node("apply", node)
    builder.add_edge(START, "apply")
    with pytest.raises(ConfigError, match=r"config\.configurable\.thread_id: .* checkpointer"):
        builder.compile().invoke({"change": {"b.py": "y = 2\n"}})
    thread = {"configurable": {"thread_id": "edit-4"}}
    with pytest.raises(ConfigError, match=r"validations: no validation given"):
        ApprovalNode(folder=repo)
    with pytest.raises(ConfigError, match=r"state\['change'\]: the state has no change"):
        node({}, thread)
    with pytest.raises(ConfigError, match=r"checkpoint_ns: names no task: an approval node runs"):
        node({"change": {"b.py": "y = 2\n"}}, thread)


def test_an_answer_that_is_not_one_is_asked_again(tmp_path: Path) -> None:
    """A resume value that answers nothing does not block the thread: the node asks again
    with the error in the question, and the next good answer continues the one plan."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "edit-5"}}
    first = graph.invoke({"change": {"b.py": "y = 2\n"}}, thread)["__interrupt__"][0].value
    assert "error" not in first
    for bad in ("yes", 1, {"action": "approve", "note": 5}):
        (again,) = graph.invoke(Command(resume=bad), thread)["__interrupt__"]
        assert again.value["error"].startswith(f"Command(resume=...): {bad!r} does not answer")
        assert again.value["plan_id"] == first["plan_id"]
        assert not (repo / "b.py").exists()
    done = graph.invoke(Command(resume="approve"), thread)
    assert (done["verdict"]["status"], done["verdict"]["approved"]) == ("applied", True)
    assert (repo / "b.py").read_text() == "y = 2\n"
    assert anyio.run(_plans, log, "edit-5") == {first["plan_id"]: "applied"}


def test_a_folder_that_holds_the_event_log_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sandboxes go beside the event log: a folder that holds the log's folder (the
    default log of a program run in the folder, say) is one clear error at construction."""
    monkeypatch.delenv("GATEGRAPH_HOME")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ConfigError, match=r"^folder: '\.' holds the event log's folder .* or set GATEGRAPH_HOME$"
    ):
        ApprovalNode(["python_syntax"], folder=".")
    repo = _repo(tmp_path)
    for inside in (repo / "events.db", repo / "logs" / "events.db"):
        with pytest.raises(ConfigError, match=r"pass event_log= a path outside the folder$"):
            ApprovalNode(["python_syntax"], folder=repo, event_log=inside)
    with pytest.raises(ConfigError, match=r"^folder: '.*missing' is not a folder$"):
        ApprovalNode(["python_syntax"], folder=tmp_path / "missing", event_log=MemoryEventLog())
    ApprovalNode(["python_syntax"], folder=repo, event_log=tmp_path / "events.db")


def test_a_folder_changed_while_waiting_is_a_fix_not_a_crash(tmp_path: Path) -> None:
    """The real folder changed under a paused plan (a person's edit, another thread's
    apply of the same file): the resume does not raise, the folder keeps the other
    change, and the verdict sends the proposer back to redo it on the folder as it is."""
    repo, log = _repo(tmp_path), tmp_path / "events.db"
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    one, two = ({"configurable": {"thread_id": name}} for name in ("one", "two"))
    graph.invoke({"change": {"a.py": "x = 2\n"}}, one)
    graph.invoke({"change": {"a.py": "x = 3\n"}}, two)
    assert graph.invoke(Command(resume="approve"), one)["verdict"]["status"] == "applied"
    done = graph.invoke(Command(resume="approve"), two)
    verdict = done["verdict"]
    assert (verdict["decision"], verdict["fault"], verdict["passed"]) == ("fix", "conflict", False)
    assert (verdict["status"], verdict["approved"], verdict["changes"]) == ("failed", True, {})
    assert "a.py" in verdict["feedback"] and "redo the change" in verdict["feedback"]
    assert verdict["budget"]["used"] == 0  # not the change's fault: no retry spent
    assert route(done) == "fix"
    assert (repo / "a.py").read_text() == "x = 2\n"
    graph.invoke({"change": {"c.py": "z = 1\n"}}, two)  # the thread goes on
    assert graph.invoke(Command(resume="approve"), two)["verdict"]["status"] == "applied"


def test_a_plan_refused_at_apply_is_finished(tmp_path: Path) -> None:
    """The plan whose apply the changed folder refused ends failed in the log."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "edited"}}
    graph.invoke({"change": {"a.py": "x = 2\n"}}, thread)
    (repo / "a.py").write_text("someone else\n")
    plan_id = graph.invoke(Command(resume="approve"), thread)["verdict"]["plan_id"]
    assert anyio.run(_plans, log, "edited") == {plan_id: "failed"}


class _Title(BaseModel):
    title: str


def test_a_model_as_the_artifact_is_judged_as_its_json(tmp_path: Path) -> None:
    """A pydantic model or a LangChain message in `artifact` is judged as its JSON; a
    value that has none is one clear error naming the state key."""
    schema = {"type": "object", "required": ["title"]}
    check = [{"validation": "json_schema", "arguments": {"schema": schema}}]
    gate = GateNode(check)
    assert gate({"artifact": _Title(title="x")}, {})["verdict"]["passed"] is True
    node = ValidationNode(check[0])
    assert node({"artifact": _Title(title="x")}, {})["validation"]["passed"] is True
    repo, log = _repo(tmp_path), MemoryEventLog()
    graph = _approval_graph(ApprovalNode(check, folder=repo, event_log=log), InMemorySaver())
    thread = {"configurable": {"thread_id": "message"}}
    paused = graph.invoke({"change": {"b.py": "y = 2\n"}, "artifact": _Title(title="x")}, thread)
    assert "__interrupt__" in paused
    assert graph.invoke(Command(resume="approve"), thread)["verdict"]["status"] == "applied"
    message = {"configurable": {"thread_id": "ai"}}
    paused = graph.invoke({"change": {"c.py": "z = 1\n"}, "artifact": AIMessage("hi")}, message)
    assert "__interrupt__" not in paused  # judged: an AI message has no title
    assert paused["verdict"]["decision"] == "fix"
    assert "title" in paused["verdict"]["feedback"]

    class Opaque:
        pass

    for run in (gate, node, ApprovalNode(check, folder=repo, event_log=log)):
        with pytest.raises(ConfigError, match=r"^state\['artifact'\]: a Opaque is not JSON"):
            run({"change": {"d.py": "w = 1\n"}, "artifact": Opaque()}, message)


def test_a_change_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    """A missing folder, a file, a mapping that makes one path both a file and a folder,
    or a file the folder cannot take: a ConfigError naming the state key, for a gate and
    for an approval, and nothing applied."""
    repo, log = _repo(tmp_path), MemoryEventLog()
    gate = GateNode(["python_syntax"])
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "bad-change"}}
    cases = {
        str(tmp_path / "missing"): r"'[^']*missing' is not a folder",
        str(repo / "a.py"): r"'[^']*a\.py' is not a folder",
        # (a mapping) 'a' is a file of the change, and 'a/b.py' needs it to be a folder
        "clash": r"'a/b\.py' needs 'a' to be a folder, and the change makes it a file",
    }
    for change, message in cases.items():
        value: Any = {"a": "x\n", "a/b.py": "y = 1\n"} if change == "clash" else change
        with pytest.raises(ConfigError, match=r"^state\['change'\]: " + message):
            gate({"change": value}, {})
        with pytest.raises(ConfigError, match=r"^state\['change'\]: " + message):
            graph.invoke({"change": value}, thread)
    assert anyio.run(_plans, log, "bad-change") == {}
    # The folder has a file a.py: nothing can be written below it.
    with pytest.raises(ConfigError, match=r"^state\['change'\]: 'a\.py/b\.py' cannot be written"):
        graph.invoke({"change": {"a.py/b.py": "y = 1\n"}}, thread)
    assert sorted(p.name for p in repo.iterdir()) == ["a.py"]
    assert list(anyio.run(_plans, log, "bad-change").values()) == ["failed"]


def test_new_input_instead_of_an_answer_ends_the_waiting_plan(tmp_path: Path) -> None:
    """A thread sent a new change while its approval waits: the waiting plan is denied
    (its sandboxes go), the new one waits, and the answer goes to the new one."""
    repo, log = _repo(tmp_path), tmp_path / "log" / "events.db"
    graph = _approval_graph(
        ApprovalNode(["python_syntax"], folder=repo, event_log=log), InMemorySaver()
    )
    thread = {"configurable": {"thread_id": "edit-6"}}
    old = graph.invoke({"change": {"b.py": "y = 2\n"}}, thread)["__interrupt__"][0].value
    assert (tmp_path / "log" / "sandboxes" / old["plan_id"]).exists()
    new = graph.invoke({"change": {"c.py": "z = 3\n"}}, thread)["__interrupt__"][0].value
    assert anyio.run(_plans, log, "edit-6") == {
        old["plan_id"]: "failed",
        new["plan_id"]: "awaiting_approval",
    }
    assert not (tmp_path / "log" / "sandboxes" / old["plan_id"]).exists()
    (denied,) = [e for e in read_events(log, old["plan_id"]) if isinstance(e, ApprovalDecided)]
    assert not denied.approved and "without an answer" in (denied.note or "")
    done = graph.invoke(Command(resume="approve"), thread)
    assert done["verdict"]["plan_id"] == new["plan_id"]
    assert sorted(p.name for p in repo.iterdir()) == ["a.py", "c.py"]


def _collect(verdicts: list[Any], verdict: Any) -> list[Any]:
    return [*verdicts, verdict]


class _Fan(TypedDict, total=False):
    change: Any
    verdict: Annotated[list[Any], _collect]  # one per task of the step


def test_approvals_of_one_step_wait_side_by_side(tmp_path: Path) -> None:
    """Two tasks of one approval node in the same step (Send) each wait for their own
    answer: starting the second never ends the first."""
    # A log file, with the sandboxes beside it: the folder of a memory log's sandboxes is
    # made on first use, and two threads that make it at once race (the supervisor's).
    repo, log = _repo(tmp_path), tmp_path / "events.db"
    builder = StateGraph(_Fan)
    builder.add_node("apply", ApprovalNode(["python_syntax"], folder=repo, event_log=log))
    builder.add_conditional_edges(
        START,
        lambda state: [Send("apply", {"change": {name: "v = 1\n"}}) for name in ("p.py", "q.py")],
    )
    builder.add_edge("apply", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "fan"}}
    asked = graph.invoke({}, thread)["__interrupt__"]
    assert sorted(q.value["files"][0] for q in asked) == ["p.py", "q.py"]
    assert sorted(anyio.run(_plans, log, "fan").values()) == ["awaiting_approval"] * 2
    done = graph.invoke(Command(resume={q.id: "approve" for q in asked}), thread)
    assert [v["status"] for v in done["verdict"]] == ["applied"] * 2
    assert sorted(anyio.run(_plans, log, "fan").values()) == ["applied"] * 2
    assert sorted(p.name for p in repo.iterdir()) == ["a.py", "p.py", "q.py"]


def test_validations_are_checked_when_the_node_is_made() -> None:
    """A typo'd name or argument is refused by the constructor, not in the first round."""
    with pytest.raises(ConfigError, match=r"^GateNode\(\): validations\[0\]\.validation: unknown"):
        GateNode(["pyton_syntax"])
    with pytest.raises(ConfigError, match=r"validations\[0\]\.arguments\.schem: unknown argument"):
        GateNode([{"validation": "json_schema", "arguments": {"schem": {}}}])
    with pytest.raises(ConfigError, match=r"^GateNode\(\): validations: no validation given"):
        GateNode([])
    with pytest.raises(ConfigError, match=r"^ValidationNode\(\): validations\[0\]\.valid"):
        ValidationNode("pyton_syntax")
    # A folder validation over a value that is not a change cannot run either.
    with pytest.raises(ConfigError, match=r"'python_syntax' needs a resource for its slot"):
        ValidationNode("python_syntax")
    ValidationNode("python_syntax", change=True)


# -- async graphs (LangGraph's async API is asyncio's) -------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_async_twins_under_ainvoke(tmp_path: Path) -> None:
    """`node.acall` awaits gategraph on the running loop: the gate loop, and an approval
    paused and resumed, all under ainvoke."""
    result = await _gate_loop(GateNode(["python_syntax"]).acall, BROKEN, FIXED).ainvoke({})
    assert result["verdict"]["passed"] is True
    repo, log = _repo(tmp_path), MemoryEventLog()
    node = ApprovalNode(["python_syntax"], folder=repo, event_log=log)
    builder = StateGraph(GateState)
    builder.add_node("apply", node.acall)
    builder.add_edge(START, "apply")
    graph = builder.compile(checkpointer=InMemorySaver())
    thread = {"configurable": {"thread_id": "async-1"}}
    paused = await graph.ainvoke({"change": {"b.py": "y = 2\n"}}, thread)
    assert "__interrupt__" in paused and not (repo / "b.py").exists()
    done = await graph.ainvoke(Command(resume="approve"), thread)
    assert done["verdict"]["status"] == "applied"
    assert (repo / "b.py").exists()
    assert list((await _plans(log, "async-1")).values()) == ["applied"]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_sync_node_runs_under_ainvoke_and_says_so_on_a_loop_thread() -> None:
    """ainvoke runs the sync node in a thread, which works; invoke() on the loop's own
    thread gets an error naming the async twin."""
    graph = _gate_loop(GateNode(["python_syntax"]), BROKEN, FIXED)
    assert (await graph.ainvoke({}))["verdict"]["passed"] is True
    with pytest.raises(
        RuntimeError, match=r"ainvoke\(\.\.\.\)` there, with the node added as `node\.acall`"
    ):
        graph.invoke({})


# -- a validation as a node ----------------------------------------------------------------


class _Answer(TypedDict, total=False):
    answer: Any
    check: dict[str, Any]
    files: dict[str, str]


def test_a_validation_node_stores_its_result() -> None:
    """One validation over one state key, its result (passed, message, data) in another."""
    schema = {"type": "object", "required": ["title"]}
    node = ValidationNode(
        {"validation": "json_schema", "arguments": {"schema": schema}},
        key="answer",
        result_key="check",
    )
    builder = StateGraph(_Answer)
    builder.add_node("title_check", node)
    builder.add_edge(START, "title_check")
    builder.add_edge("title_check", END)
    graph = builder.compile()
    bad = graph.invoke({"answer": {"body": "..."}})["check"]
    assert (bad["validation"], bad["passed"]) == ("json_schema", False)
    assert "title" in bad["message"]
    good = graph.invoke({"answer": {"title": "t"}})["check"]
    assert good["passed"] is True
    assert json.loads(json.dumps(good)) == good


def test_a_validation_node_over_files_runs_only_its_validation() -> None:
    """With change=True the value is a change; a catalog gives the definition, and what
    it attaches to resources does not run here."""
    catalog = Catalog.in_memory()
    catalog.add(
        Validation.from_config({"name": "never", "entrypoint": "gategraph.runtime.testing:failing"})
    )
    catalog.add(
        Validation.from_config(
            {
                "name": "syntax",
                "entrypoint": "gategraph.validators:python_syntax",
                "resource_slots": [{"name": "root", "kind": "directory"}],
            }
        )
    )
    catalog.attach("change", "never")
    node = ValidationNode("syntax", key="files", result_key="check", change=True, catalog=catalog)
    assert node({"files": FIXED}, {})["check"]["passed"] is True
    failed = node({"files": BROKEN}, {})["check"]
    assert (failed["validation"], failed["passed"]) == ("syntax", False)
    assert failed["data"]["errors"]


# -- a compiled graph as a gategraph tool --------------------------------------------------


class _Words(TypedDict, total=False):
    text: str
    words: int


def _count_graph(asynchronous: bool = False) -> Any:
    def count(state: _Words) -> _Words:
        return {"words": len(state["text"].split())}

    async def acount(state: _Words) -> _Words:
        return count(state)

    builder = StateGraph(_Words)
    builder.add_node("count", acount if asynchronous else count)
    builder.add_edge(START, "count")
    builder.add_edge("count", END)
    return builder.compile()


def test_a_compiled_graph_is_a_gategraph_tool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool config names a GraphTool as its entrypoint: the node's arguments are the
    graph's input and its output state is the node's output; a validation wrapping it
    gates on that output, and an async-only graph runs with use_async."""
    module = fake_module(
        monkeypatch,
        "lg_tools",
        words=GraphTool(_count_graph()),
        awords=GraphTool(_count_graph(asynchronous=True), use_async=True, output_keys=["words"]),
    )
    text = textwrap.dedent(
        f"""
        version: 1
        name: lg-tool
        tools:
          - {{name: count_words, entrypoint: "{module}:words"}}
          - {{name: acount_words, entrypoint: "{module}:awords"}}
        validations:
          - name: short
            wraps: count_words
            transform: "{{'passed': output['words'] <= 3, 'message': str(output['words'])}}"
        nodes:
          # Its module exists only in this process: run here, declared (trusted).
          - {{id: count, tool: count_words, arguments: {{text: "a b c d"}}, isolation: thread}}
          - {{id: acount, tool: acount_words, arguments: {{text: "a b"}}, isolation: thread}}
          - {{id: check, validation: short, arguments: {{text: "a b c d"}}, isolation: thread}}
        """
    )
    run = execute_graph_sync(load_graph(text))
    assert run.nodes["count"].output == {"text": "a b c d", "words": 4}
    assert run.nodes["acount"].output == {"words": 2}
    check = run.nodes["check"].output
    assert (check.passed, check.message) == (False, "4")


def test_a_graph_tool_writes_its_own_config() -> None:
    """tool_config is a valid tool config with the graph's schemas; output that is not
    JSON is refused with a message saying what to do."""
    tool = GraphTool(_count_graph())
    config = tool.tool_config("count_words", "lg_tools:words", description="Count words.")
    built = tool_from_config(config)
    assert built.name == "count_words" and built.description == "Count words."
    assert built.input_schema is not None
    assert set(built.input_schema["properties"]) == {"text", "words"}

    class Opaque:
        pass

    def odd(state: dict[str, Any]) -> dict[str, Any]:
        return {"thing": Opaque()}

    class _Odd(TypedDict, total=False):
        thing: Any

    builder = StateGraph(_Odd)
    builder.add_node("odd", odd)
    builder.add_edge(START, "odd")
    with pytest.raises(TypeError, match=r"holds a Opaque, which is not JSON: name the keys"):
        GraphTool(builder.compile())()
    with pytest.raises(ConfigError, match=r"graph: a StateGraph is not a compiled graph"):
        GraphTool(builder)


# -- packaging and docs --------------------------------------------------------------------


def test_without_langgraph_the_import_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the adapter without LangGraph is an ImportError naming the extra."""
    monkeypatch.delitem(sys.modules, MODULE)
    monkeypatch.setitem(sys.modules, "langgraph", None)
    monkeypatch.setitem(sys.modules, "langgraph.types", None)
    with pytest.raises(ImportError, match=r"pip install 'gategraph\[langgraph\]'"):
        importlib.import_module(MODULE)


def _doc_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)


def test_the_doc_has_a_short_example() -> None:
    """The proposed-edit example gates a file edit in under 15 lines of code; the
    tool-calling agent's example needs at most 12 lines of glue beyond the agent."""
    short = next(b for b in _doc_blocks() if "GateNode([" in b)
    lines = [
        line for line in short.splitlines() if line.strip() and not line.strip().startswith("#")
    ]
    assert len(lines) < 15, len(lines)
    agent = _doc_blocks()[0]
    assert "ToolCallGate(" in agent and "HumanMessage" in agent
    glue = agent.split("# The glue.\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert glue[0].startswith("gate = ToolCallGate(") and len(glue) <= 12, glue


def test_the_tool_call_gate_answers_every_call_as_a_tool_node_would(tmp_path: Path) -> None:
    """Without asking: a passing edit is applied at once; an unknown tool, a tool that
    raises and an edit without its arguments are error answers for the model; a failing
    edit is answered with what to fix and applies nothing."""
    from gategraph.runtime.integrations.langgraph import ToolCallGate, ToolGateState, write_file
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.tools import tool

    repo = _repo(tmp_path)

    @tool
    def boom(x: int) -> str:
        """Always fails."""
        raise ValueError(f"no {x}")

    gate = ToolCallGate(["python_syntax"], folder=repo, tools=[boom], event_log=MemoryEventLog())
    builder = StateGraph(ToolGateState)
    builder.add_node("tools", gate)
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())

    def answers(*calls: dict[str, Any], thread: str) -> list[ToolMessage]:
        message = AIMessage("", tool_calls=list(calls))
        out = graph.invoke({"messages": [message]}, {"configurable": {"thread_id": thread}})
        return [m for m in out["messages"] if isinstance(m, ToolMessage)]

    def write(path: str, content: str, call: str) -> dict[str, Any]:
        return {"name": "write_file", "args": {"path": path, "content": content}, "id": call}

    found = answers(
        write("b.py", "y = 1\n", "w1"),
        write("c.py", "z = 2\n", "w2"),
        {"name": "boom", "args": {"x": 3}, "id": "b"},
        {"name": "nope", "args": {}, "id": "n"},
        {"name": "write_file", "args": {"path": "d.py"}, "id": "w3"},
        write("../evil.py", "x = 1\n", "w4"),
        write("/etc/evil.py", "x = 1\n", "w5"),
        thread="one",
    )
    assert [(m.tool_call_id, m.status) for m in found] == [
        ("w1", "success"),
        ("w2", "success"),
        ("b", "error"),
        ("n", "error"),
        ("w3", "error"),
        ("w4", "error"),
        ("w5", "error"),
    ]
    assert found[0].content == "applied: repo: 2 added, 0 modified, 0 deleted"
    assert found[1].content == found[0].content
    assert "is outside the repository" in found[5].content
    assert "is outside the repository" in found[6].content
    assert not (tmp_path / "evil.py").exists()
    assert found[2].content == "ValueError: no 3"
    assert found[3].content.startswith("no tool 'nope' (the tools: boom, write_file)")
    assert found[4].content == "give `path` and `content`, both text"
    assert (repo / "b.py").read_text() == "y = 1\n" and not (repo / "d.py").exists()
    (bad,) = answers(write("e.py", "def (:\n", "w6"), thread="two")
    assert bad.status == "error" and bad.content.startswith("not applied (fix): ")
    assert "e.py:1" in bad.content and not (repo / "e.py").exists()
    # A file where the change needs a folder: an error answer, not a crash.
    (blocked,) = answers(write("a.py/x.py", "y = 1\n", "w7"), thread="three")
    assert blocked.status == "error" and "cannot be written" in blocked.content
    # The route: a turn without an edit passes, whatever an earlier edit's verdict says.
    state = {"messages": [AIMessage("", tool_calls=[])], "verdict": {"decision": "fix"}}
    assert gate.route(state) == "pass"
    with pytest.raises(ConfigError, match="'write_file' is the edit tool"):
        ToolCallGate(["python_syntax"], folder=repo, tools=[write_file])
