"""The pydantic-ai adapter, against the real library and its offline models (no network).

pydantic-ai runs on asyncio only (its runs use asyncio primitives), so the tests that run
an Agent are asyncio only; the tests that call the adapter's own objects directly run on
both anyio backends.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from _helpers import fake_module
from gategraph.runtime import (
    Catalog,
    ConfigError,
    MaxNPolicy,
    McpServer,
    MemoryEventLog,
    RetryBudget,
    Skill,
    SQLiteEventLog,
    Validation,
    tool_from_config,
)
from gategraph.runtime.integrations.pydantic_ai import (
    CatalogToolset,
    GateEscalatedError,
    GategraphOutputValidator,
    gate_output,
)
from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResultEvent, ModelRetry, RunContext, UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "def greet(:\n"
FIXED = "def greet():\n    return 'hello'\n"
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


class Edit(BaseModel):
    files: dict[str, str]


class Proposer:
    """A model that proposes the next of ``drafts`` (the last one again past the end) and
    keeps what it was shown."""

    def __init__(self, *drafts: str) -> None:
        self.drafts = list(drafts)
        self.seen: list[list[ModelMessage]] = []

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        draft = self.drafts[min(len(self.seen), len(self.drafts)) - 1]
        edit = {"files": {"greet.py": draft}}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, edit)])

    def told(self, call: int) -> str:
        """Everything the model was sent before call number ``call`` (1-based), as text."""
        return "\n".join(
            part.content
            for message in self.seen[call - 1]
            for part in message.parts
            if isinstance(getattr(part, "content", None), str)
        )


def agent_for(proposer: Proposer, retries: int = 3) -> Agent[None, Edit]:
    return Agent(FunctionModel(proposer.respond), output_type=Edit, retries=retries)


def run_context(
    *, partial: bool = False, run_id: str | None = None, retry: int = 0
) -> RunContext[None]:
    """What pydantic-ai gives an output validator: ``retry`` is the run's output retries so
    far (0 for a run's first output)."""
    return RunContext(
        deps=None,
        model=TestModel(),
        usage=RunUsage(),
        partial_output=partial,
        run_id=run_id,
        retry=retry,
    )


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A validation whose first call raises (an infra fault) and whose later calls pass."""
    calls: list[int] = []

    def check(**_: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("the linter's socket went away")
        return {"passed": True, "message": "ok"}

    module = fake_module(monkeypatch, "gategraph_test_flaky", check=check)
    # A sync function of a module that exists only in this process: in a thread here.
    config = {
        "validation": {"name": "flaky", "entrypoint": f"{module}:check"},
        "isolation": "thread",
    }
    yield {"config": config, "calls": calls}


# -- the output validator ---------------------------------------------------------------------


@pytest.mark.anyio
@asyncio_only
async def test_a_good_proposal_passes_the_first_time() -> None:
    proposer = Proposer(FIXED)
    agent = agent_for(proposer)
    gate_output(agent, ["python_syntax"])
    result = await agent.run("Write greet()")
    assert result.output.files == {"greet.py": FIXED}
    assert len(proposer.seen) == 1


@pytest.mark.anyio
@asyncio_only
async def test_a_broken_proposal_goes_back_to_the_model_with_the_findings() -> None:
    """The rejection reaches the model as a retry with the validation's message, and the
    fixed proposal is the run's output."""
    proposer = Proposer(BROKEN, FIXED)
    agent = agent_for(proposer)
    log = MemoryEventLog()
    gate_output(agent, ["python_syntax"], event_log=log)
    result = await agent.run("Write greet()")
    assert result.output.files == {"greet.py": FIXED}
    assert len(proposer.seen) == 2
    assert "greet.py:1: invalid syntax" not in proposer.told(1)
    assert "python_syntax: 1 of 1 file does not parse: greet.py:1" in proposer.told(2)
    assert len(await log.plans()) == 2  # one logged round per proposal


@pytest.mark.anyio
@asyncio_only
async def test_an_infra_fault_reruns_the_validation_not_the_model(
    flaky: dict[str, Any],
) -> None:
    """A validation that crashed is re-run after its backoff; the model is not asked to fix
    anything, and the re-run spends from the run's budget."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    proposer = Proposer(FIXED)
    agent = agent_for(proposer)
    gate_output(agent, [flaky["config"]], sleep=sleep)
    result = await agent.run("Write greet()")
    assert result.output.files == {"greet.py": FIXED}
    assert len(proposer.seen) == 1 and len(flaky["calls"]) == 2
    assert len(waits) == 1 and waits[0] > 0  # the exception row's backoff


@pytest.mark.anyio
async def test_check_waits_and_reruns_on_both_backends(flaky: dict[str, Any]) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    gate = GategraphOutputValidator([flaky["config"]], sleep=sleep)
    budget = RetryBudget(MaxNPolicy(limit=2))
    verdict = await gate.check({"files": {"a.py": FIXED}}, budget)
    assert verdict.passed and budget.used == 1 and len(waits) == 1


@pytest.mark.anyio
@asyncio_only
async def test_a_spent_budget_stops_the_run_with_the_verdict() -> None:
    proposer = Proposer(BROKEN)  # never fixes it
    agent = agent_for(proposer, retries=5)
    gate_output(agent, ["python_syntax"], policy=MaxNPolicy(limit=2))
    with pytest.raises(GateEscalatedError, match="retry budget is spent") as caught:
        await agent.run("Write greet()")
    assert caught.value.verdict.decision == "escalate-exhausted"
    assert "greet.py:1" in str(caught.value)
    assert len(proposer.seen) == 3  # the first proposal and two fixes


@pytest.mark.anyio
@asyncio_only
async def test_a_permanent_fault_stops_at_once(tmp_path: Path) -> None:
    writer = {
        "name": "writer",
        "entrypoint": "gategraph.runtime.testing:writing",
        "resource_slots": [{"name": "root", "kind": "directory"}],
    }
    proposer = Proposer(FIXED)
    agent = agent_for(proposer)
    gate_output(agent, [writer])
    with pytest.raises(GateEscalatedError, match="retrying cannot help") as caught:
        await agent.run("Write greet()")
    assert caught.value.verdict.fault == "read_only_violation"
    assert len(proposer.seen) == 1


@pytest.mark.anyio
@asyncio_only
async def test_the_agents_own_retries_stop_it_with_the_verdict() -> None:
    """Fewer output retries than gategraph's budget: the run stops with the verdict and
    says how to give the model the whole budget."""
    proposer = Proposer(BROKEN)
    agent = agent_for(proposer, retries=1)
    gate_output(agent, ["python_syntax"])
    with pytest.raises(GateEscalatedError, match=r"no output retries left \(1\)") as caught:
        await agent.run("Write greet()")
    assert caught.value.verdict.decision == "fix"
    assert len(proposer.seen) == 2


@pytest.mark.anyio
@asyncio_only
async def test_each_run_spends_its_own_budget_unless_one_is_shared() -> None:
    policy = MaxNPolicy(limit=1)
    for _ in range(2):  # the second run starts with a fresh budget
        proposer = Proposer(BROKEN, FIXED)
        agent = agent_for(proposer)
        gate_output(agent, ["python_syntax"], policy=policy)
        assert (await agent.run("Write greet()")).output.files == {"greet.py": FIXED}
    gate = GategraphOutputValidator(["python_syntax"], budget=RetryBudget(policy))
    first, second = agent_for(Proposer(BROKEN, FIXED)), agent_for(Proposer(BROKEN, FIXED))
    first.output_validator(gate)
    second.output_validator(gate)
    await first.run("Write greet()")  # spends the shared budget's one retry
    with pytest.raises(GateEscalatedError, match="retry budget is spent"):
        await second.run("Write greet()")


@pytest.mark.anyio
async def test_one_budget_per_run_id_on_both_backends() -> None:
    gate = GategraphOutputValidator(["python_syntax"], policy=MaxNPolicy(limit=1))
    broken = Edit(files={"a.py": BROKEN})
    with pytest.raises(ModelRetry, match=r"a\.py:1"):
        await gate(run_context(run_id="run-1"), broken)
    with pytest.raises(ModelRetry):
        await gate(run_context(run_id="run-2"), broken)  # another run: its own budget
    with pytest.raises(GateEscalatedError, match="budget is spent"):
        await gate(run_context(run_id="run-1", retry=1), broken)
    good = Edit(files={"a.py": FIXED})
    assert await gate(run_context(run_id="run-2", retry=1), good) is good


@pytest.mark.anyio
async def test_a_run_id_used_again_does_not_inherit_a_spent_budget() -> None:
    """``Agent.run(run_id=...)`` takes a caller's id (a conversation's, say): a run under an
    id seen before starts a budget of its own, whether the earlier run passed, was stopped,
    or ended without a word to the gate."""
    gate = GategraphOutputValidator(["python_syntax"], policy=MaxNPolicy(limit=1))
    broken, good = Edit(files={"a.py": BROKEN}), Edit(files={"a.py": FIXED})
    with pytest.raises(ModelRetry):
        await gate(run_context(run_id="conv"), broken)  # spends the run's one retry
    assert await gate(run_context(run_id="conv", retry=1), good) is good  # the run ends
    # The next run's first output failed pydantic-ai's own checks (retry=1 already): the
    # passed run's budget was dropped, so this one has its own.
    with pytest.raises(ModelRetry):
        await gate(run_context(run_id="conv", retry=1), broken)
    # That run ended without a word (a usage limit, say); the next starts at retry 0.
    with pytest.raises(ModelRetry):
        await gate(run_context(run_id="conv"), broken)
    with pytest.raises(GateEscalatedError, match="budget is spent"):  # same run: spent
        await gate(run_context(run_id="conv", retry=1), broken)
    with pytest.raises(ModelRetry):  # after an escalation, a fresh one again
        await gate(run_context(run_id="conv", retry=1), broken)


@pytest.mark.anyio
@asyncio_only
async def test_two_agent_runs_with_the_same_run_id_each_have_the_whole_budget() -> None:
    gate = GategraphOutputValidator(["python_syntax"])  # three retries per run
    for _ in range(2):
        proposer = Proposer(BROKEN, BROKEN, FIXED)
        agent = agent_for(proposer, retries=5)
        agent.output_validator(gate)
        result = await agent.run("Write greet()", run_id="conversation-1")
        assert result.output.files == {"greet.py": FIXED} and len(proposer.seen) == 3


@pytest.mark.anyio
async def test_partial_outputs_of_a_stream_are_not_validated() -> None:
    gate = GategraphOutputValidator(["python_syntax"])
    broken = Edit(files={"a.py": BROKEN})
    assert await gate(run_context(partial=True), broken) is broken
    with pytest.raises(ModelRetry):
        await gate(run_context(), broken)


@pytest.mark.anyio
async def test_how_an_output_becomes_the_change_and_the_artifact() -> None:
    """A model's ``files``, a mapping of files, or else the output as the artifact; or
    the caller's own functions."""
    gate = GategraphOutputValidator(["python_syntax"])
    for output in (Edit(files={"a.py": BROKEN}), {"a.py": BROKEN}, {"files": {"a.py": BROKEN}}):
        verdict = await gate.check(output)
        assert "a.py:1" in verdict.feedback, output
    with pytest.raises(ConfigError, match=r"change: the output proposes no files .*`change=`"):
        await gate.check({"plan": ["step"], "count": 2})  # not files: no folder to check
    echo = {"name": "echo", "entrypoint": "gategraph.runtime.testing:echo"}
    verdict = await GategraphOutputValidator([echo]).check({"plan": ["step"], "count": 2})
    assert verdict.records[0].result.data["artifact"] == {"plan": ["step"], "count": 2}
    schema = {"type": "object", "required": ["files"]}
    model = await GategraphOutputValidator(
        [{"validation": "json_schema", "arguments": {"schema": schema}}]
    ).check(Edit(files={}))
    assert model.passed  # a model is judged as JSON
    own = GategraphOutputValidator(
        ["python_syntax"], change=lambda text: {"main.py": text}, artifact=lambda text: None
    )
    assert not (await own.check(BROKEN)).passed and (await own.check(FIXED)).passed


def test_bad_validations_are_refused_when_the_gate_is_made() -> None:
    """A misspelt name or a bad argument fails at once, before any model is paid for."""
    agent = agent_for(Proposer(FIXED))
    cases: list[tuple[list[Any], str]] = [
        (["no_such_check"], r"validations\[0\]\.validation: unknown validation 'no_such_check'"),
        (
            ["python_syntax", {"validation": "regex", "arguments": {"patern": "x"}}],
            r"validations\[1\]\.arguments\.patern: unknown argument",
        ),
        ([], r"validations: no validation given"),
    ]
    for validations, message in cases:
        with pytest.raises(ConfigError, match=message) as caught:
            gate_output(agent, validations)
        assert "\n" not in str(caught.value)
    catalog = Catalog.in_memory()
    catalog.add(Validation.from_config(lint_config("lint.ruff")))
    gate_output(agent, ["lint.ruff"], catalog=catalog)  # a catalog's names resolve
    with pytest.raises(ConfigError, match=r"unknown validation 'lint\.ruff'"):
        gate_output(agent, ["lint.ruff"])  # not without it
    with pytest.raises(ConfigError, match=r"budget: a RetryBudget, not int"):
        gate_output(agent, ["python_syntax"], budget=3)


@pytest.mark.anyio
@asyncio_only
async def test_an_output_that_proposes_no_files_says_to_pass_change() -> None:
    """A folder validation over an output without a ``files`` mapping (plain text, or files
    as a list): the error says what the gate looked for and what to pass, not how a plan
    graph's node is bound."""
    calls: list[int] = []

    def text(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[TextPart(BROKEN)])

    agent = Agent(FunctionModel(text), output_type=str, retries=3)
    gate_output(agent, ["python_syntax"])
    with pytest.raises(ConfigError, match=r"change: the output proposes no files") as caught:
        await agent.run("Write greet()")
    message = str(caught.value)
    assert "`files` must map path → text" in message and "pass `change=`" in message
    assert "python_syntax" in message and "node" not in message
    assert len(calls) == 1  # stopped at the first output, not retried

    class File(BaseModel):
        path: str
        content: str

    class Listed(BaseModel):
        files: list[File]

    listed = Listed(files=[File(path="a.py", content=BROKEN)])
    gate = GategraphOutputValidator(["python_syntax"])
    with pytest.raises(ConfigError, match=r"the output proposes no files"):
        await gate.check(listed)
    own = GategraphOutputValidator(["python_syntax"], change=lambda output: None)
    with pytest.raises(ConfigError, match=r"`change=` gave no change for this output"):
        await own.check(listed)
    fixed = GategraphOutputValidator(
        ["python_syntax"], change=lambda output: {f.path: f.content for f in output.files}
    )
    assert "a.py:1" in (await fixed.check(listed)).feedback
    # A validation that needs no folder judges such an output as its artifact.
    echo = {"name": "echo", "entrypoint": "gategraph.runtime.testing:echo"}
    assert (await GategraphOutputValidator([echo]).check("plain text")).passed


@pytest.mark.anyio
@asyncio_only
async def test_run_stream_events_retries_a_rejected_output() -> None:
    """``run_stream_events()`` streams and retries with the gate's findings, as ``run()``
    does; ``run_stream()`` stops at the first rejection (pydantic-ai's own rule)."""

    def streamer() -> tuple[Any, list[str]]:
        drafts, told = iter([BROKEN, FIXED]), []

        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
            told.append(str(messages[-1]))
            args = json.dumps({"files": {"greet.py": next(drafts)}})
            yield {0: DeltaToolCall(name=info.output_tools[0].name, json_args=args[:10])}
            yield {0: DeltaToolCall(json_args=args[10:])}

        return stream, told

    stream, told = streamer()
    agent = Agent(FunctionModel(stream_function=stream), output_type=Edit, retries=3)
    gate_output(agent, ["python_syntax"])
    async with agent.run_stream_events("Write greet()") as events:
        last = [event async for event in events][-1]
    assert isinstance(last, AgentRunResultEvent)
    assert last.result.output.files == {"greet.py": FIXED}
    assert len(told) == 2 and "greet.py:1: invalid syntax" in told[1]

    stream, told = streamer()
    agent = Agent(FunctionModel(stream_function=stream), output_type=Edit, retries=3)
    gate_output(agent, ["python_syntax"])
    with pytest.raises(UnexpectedModelBehavior, match="retries are not supported") as caught:
        async with agent.run_stream("Write greet()") as streamed:
            await streamed.get_output()
    assert isinstance(caught.value.__cause__, ModelRetry) and len(told) == 1
    assert "greet.py:1" in str(caught.value.__cause__)


@pytest.mark.anyio
@asyncio_only
async def test_an_event_log_may_be_a_path(tmp_path: Path) -> None:
    """A path is a SQLite log, opened for each output and each tool call on the running
    loop; what is no event log is refused when the gate or toolset is made."""
    path = tmp_path / "events.db"
    agent = agent_for(Proposer(BROKEN, FIXED))
    gate_output(agent, ["python_syntax"], event_log=path)
    assert (await agent.run("Write greet()")).output.files == {"greet.py": FIXED}
    async with SQLiteEventLog(path) as log:
        assert len(await log.plans()) == 2  # one round per proposal
    (tmp_path / "app.py").write_text(FIXED)
    toolset = CatalogToolset(names=["python_syntax"], change=tmp_path, event_log=str(path))
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    assert (await toolset.tools["python_syntax"].function(ctx))["passed"] is True
    async with SQLiteEventLog(path) as log:
        assert len(await log.plans()) == 3
    for make in (
        lambda: gate_output(agent_for(Proposer(FIXED)), ["python_syntax"], event_log=42),
        lambda: CatalogToolset(names=["python_syntax"], change=tmp_path, event_log=[]),
    ):
        with pytest.raises(ConfigError, match=r"event_log: a (int|list) is not an event log"):
            make()


@pytest.mark.anyio
async def test_catalog_attachments_gate_the_output() -> None:
    catalog = Catalog.in_memory()
    catalog.attach("repo", "python_syntax")
    gate = GategraphOutputValidator(catalog=catalog, resource="repo")
    verdict = await gate.check(Edit(files={"a.py": BROKEN}))
    assert not verdict.passed and "python_syntax (attached)" in verdict.feedback


# -- the toolset ------------------------------------------------------------------------------

COUNT = "import os\ndef run(root, **_):\n    return sorted(os.listdir(root))\n"


def lint_config(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "tool_type": "validation",
        "code": (
            "def run(root, max_line=79, **_):\n"
            "    long = [p.name for p in root.iterdir() if p.is_file()"
            " and any(len(line) > max_line for line in p.read_text().splitlines())]\n"
            f"    return {{'passed': not long, 'message': {name!r} + ': ' + ', '.join(long),"
            " 'data': {'long': long}}\n"
        ),
        "resource_slots": ["root"],
        "input_schema": {
            "type": "object",
            "properties": {"max_line": {"type": "integer", "minimum": 1}},
            "additionalProperties": False,
        },
    }


@pytest.fixture
def catalog() -> Catalog:
    catalog = Catalog.in_memory()
    catalog.add(Validation.from_config(lint_config("lint.ruff")))
    catalog.add(Validation.from_config(lint_config("lint_ruff")))  # collides once dotted
    catalog.add(Validation.from_config(lint_config("x" * 30 + "." + "y" * 40)))
    catalog.add(
        tool_from_config(
            {"name": "files.list", "code": COUNT, "read_only": True, "resource_slots": ["root"]}
        )
    )
    catalog.add(tool_from_config({"name": "format", "code": COUNT, "writes": True}))
    catalog.add(tool_from_config({"name": "plain", "code": COUNT}))  # not declared read-only
    catalog.add_server(McpServer(name="s", command="s"))
    catalog.add(tool_from_config({"name": "remote", "mcp_server": "s", "mcp_tool_name": "t"}))
    return catalog


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "short.py").write_text("x = 1\n")
    (tmp_path / "long.py").write_text("y = " + "1" * 90 + "\n")
    return tmp_path


def test_the_toolset_gives_only_read_only_tools_and_validations(
    catalog: Catalog, project: Path
) -> None:
    toolset = CatalogToolset(catalog, change=project)
    names = toolset.catalog_names
    assert sorted(names.values()) == sorted(
        ["lint.ruff", "lint_ruff", "x" * 30 + "." + "y" * 40, "files.list"]
    )  # never `format` (writes), `plain` (not read-only) or `remote` (MCP, not read-only)
    assert len(set(names)) == len(names) == len(toolset.tools)
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) for name in names)
    assert names["lint_ruff"] == "lint_ruff"  # a valid name is kept as it is
    dotted = next(model for model, name in names.items() if name == "lint.ruff")
    assert dotted.startswith("lint_ruff_")  # and the dotted one gets a stable suffix
    assert CatalogToolset(catalog, change=project).catalog_names == names
    definition = toolset.tools[dotted].tool_def
    assert definition.parameters_json_schema["properties"] == {
        "max_line": {"type": "integer", "minimum": 1}
    }
    assert "passed, message, data" in (definition.description or "")
    files = next(model for model, name in names.items() if name == "files.list")
    assert toolset.tools[files].tool_def.parameters_json_schema["type"] == "object"


def test_adding_a_tool_never_renames_another(project: Path) -> None:
    """A model name depends on its catalog name alone (a saved message history keeps
    calling the same tools): a valid name is kept, a changed one gets a hash of its own."""
    catalog = Catalog.in_memory()
    catalog.add(Validation.from_config(lint_config("a.b")))
    before = CatalogToolset(catalog, change=project).catalog_names
    (dotted,) = before
    assert re.fullmatch(r"a_b_[0-9a-f]{8}", dotted)
    catalog.add(Validation.from_config(lint_config("a_b")))
    catalog.add(Validation.from_config(lint_config("a-b.c")))
    after = CatalogToolset(catalog, change=project).catalog_names
    assert after[dotted] == "a.b" and after["a_b"] == "a_b"
    assert CatalogToolset(catalog, names=["a.b"], change=project).catalog_names == before
    # Only a name made to look like another's changed one can clash: refused, not renamed.
    catalog.add(Validation.from_config(lint_config(dotted)))
    with pytest.raises(ConfigError, match=rf"catalog: 'a.b' and '{dotted}' would both be called"):
        CatalogToolset(catalog, change=project)
    with pytest.raises(ConfigError, match=r"names: 'a.b' and .* would both be called"):
        CatalogToolset(catalog, names=["a.b", dotted], change=project)


def test_the_toolset_refuses_what_it_must_not_give(catalog: Catalog, project: Path) -> None:
    cases = [
        (["format"], r"names\[0\]: 'format' cannot be given to a model: it is not read-only"),
        (["files.list", "remote"], r"names\[1\]: 'remote' .*not read-only"),
        (["nope"], r"names\[0\]: no tool or validation named 'nope'"),
    ]
    for names, message in cases:
        with pytest.raises(ConfigError, match=message):
            CatalogToolset(catalog, names=names, change=project)
    with pytest.raises(ConfigError, match=r"names\[0\]: 'python_syntax' needs a folder .*change="):
        CatalogToolset(names=["python_syntax"])
    with pytest.raises(ConfigError, match=r"catalog: 'files.list' needs a folder"):
        CatalogToolset(catalog)  # every entry, and one of them needs a folder


def test_the_toolset_of_a_skill(catalog: Catalog, project: Path) -> None:
    """`skills` gives the tools and validations of those skills (with `names`, both, each
    once); an unknown skill or a member that writes is refused by its field."""
    catalog.add_skill(Skill(name="review", tools=("lint.ruff", "python_syntax")))
    catalog.add_skill(Skill(name="look", tools=("files.list", "python_syntax")))
    catalog.add_skill(Skill(name="writes", tools=("format",)))
    toolset = CatalogToolset(catalog, skills=["review", "look"], change=project)
    assert sorted(toolset.catalog_names.values()) == ["files.list", "lint.ruff", "python_syntax"]
    both = CatalogToolset(
        catalog, skills="review", names=["python_syntax", "lint_ruff"], change=project
    )
    assert sorted(both.catalog_names.values()) == ["lint.ruff", "lint_ruff", "python_syntax"]
    with pytest.raises(ConfigError, match=r"skills\[1\]: no skill named 'ghost' in the catalog"):
        CatalogToolset(catalog, skills=["review", "ghost"], change=project)
    with pytest.raises(ConfigError, match=r"skills\[0\]: skill 'writes' has no read-only tool"):
        CatalogToolset(catalog, skills=["writes"], change=project)
    # A member that writes is left out of a skill's tools (named, it is refused).
    catalog.add_skill(Skill(name="mixed", tools=("format", "python_syntax")))
    mixed = CatalogToolset(catalog, skills="mixed", change=project)
    assert list(mixed.catalog_names.values()) == ["python_syntax"]
    with pytest.raises(ConfigError, match=r"names\[0\]: 'format' cannot be given to a model"):
        CatalogToolset(catalog, skills="mixed", names=["format"], change=project)
    catalog.add_skill(Skill(name="far", tools=("files.list",)))
    with pytest.raises(ConfigError, match=r"skills\[0\]: 'files.list' needs a folder"):
        CatalogToolset(catalog, skills=["far"])


@pytest.mark.anyio
async def test_calling_the_toolset_s_tools(catalog: Catalog, project: Path) -> None:
    """A dotted name runs its catalog entry; a validation returns its result; a tool its
    output; arguments the schema refuses go back to the model; the change may come from
    the run."""
    toolset = CatalogToolset(catalog, change=lambda ctx: ctx.deps)
    by_name = {name: model for model, name in toolset.catalog_names.items()}
    ctx = RunContext(deps=project, model=TestModel(), usage=RunUsage())
    lint = toolset.tools[by_name["lint.ruff"]].function
    result = await lint(ctx)
    assert result == {
        "passed": False,
        "message": "lint.ruff: long.py",  # the dotted entry ran, not `lint_ruff`
        "data": {"long": ["long.py"]},
    }
    assert (await lint(ctx, max_line=200))["passed"] is True
    with pytest.raises(ModelRetry, match=r"max_line: 0 is less than the minimum of 1"):
        await lint(ctx, max_line=0)
    with pytest.raises(ModelRetry, match=r"maxline: unknown argument \(did you mean 'max_line'"):
        await lint(ctx, maxline=3)
    listed = await toolset.tools[by_name["files.list"]].function(ctx)
    assert listed == ["long.py", "short.py"]
    nowhere = RunContext(deps=project / "missing", model=TestModel(), usage=RunUsage())
    with pytest.raises(ConfigError, match=r"change: .* is not a folder"):
        await lint(nowhere)


@pytest.mark.anyio
async def test_a_failing_tool_goes_back_to_the_model(project: Path) -> None:
    catalog = Catalog.in_memory()
    code = "def run(**_):\n    raise RuntimeError('the index is gone')\n"
    catalog.add(tool_from_config({"name": "search", "code": code, "read_only": True}))
    toolset = CatalogToolset(catalog)
    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    with pytest.raises(ModelRetry, match=r"search failed: .*the index is gone"):
        await toolset.tools["search"].function(ctx)


@pytest.mark.anyio
@asyncio_only
async def test_an_agent_calls_the_toolset(catalog: Catalog, project: Path) -> None:
    """TestModel calls the dotted validation by its model name; the result is what the
    catalog's entry returned."""
    toolset = CatalogToolset(catalog, names=["lint.ruff", "python_syntax"], change=project)
    model_name = next(m for m, n in toolset.catalog_names.items() if n == "lint.ruff")
    agent = Agent(TestModel(call_tools=[model_name, "python_syntax"]), toolsets=[toolset])
    result = await agent.run("Check the project")
    returns = json.loads(result.output)
    assert returns[model_name]["message"] == "lint.ruff: long.py"
    assert returns["python_syntax"]["passed"] is True


# -- packaging and the docs -------------------------------------------------------------------


def test_without_pydantic_ai_the_import_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "gategraph.runtime.integrations.pydantic_ai"
    monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)  # what a base install looks like
    with pytest.raises(ImportError, match=r"pip install 'gategraph\[pydantic-ai\]'"):
        importlib.import_module(name)


DOC = ROOT / "docs" / "integrations" / "pydantic-ai.md"


def test_the_first_example_is_under_15_lines_of_code() -> None:
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)[0]
    code = [
        line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    assert len(code) < 15, code


@pytest.mark.anyio
@asyncio_only
async def test_change_and_artifact_may_take_the_run_context(tmp_path: Path) -> None:
    """As pydantic-ai's own output validators may: `change(ctx, output)` gets the run's
    RunContext (its deps here name the repository), and the edit is judged laid over
    the repository (`base=`), so its test suite runs."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "greet.py").write_text(FIXED)
    (repo / "tests" / "test_greet.py").write_text(
        "import unittest\nfrom greet import greet\n\n\n"
        "class T(unittest.TestCase):\n    def test_it(self):\n        self.assertTrue(greet())\n"
    )
    seen: list[Any] = []

    def change(ctx: RunContext[Path], output: Edit) -> dict[str, str]:
        seen.append((ctx.deps, ctx.retry))
        return output.files

    proposer = Proposer("def greet():\n    return ''\n", FIXED)  # the tests reject the first
    agent = Agent(FunctionModel(proposer.respond), output_type=Edit, deps_type=Path, retries=3)
    gate_output(agent, ["python_syntax", "unittest_suite"], change=change, base=repo)
    result = await agent.run("Write greet()", deps=repo)
    assert result.output.files == {"greet.py": FIXED}
    assert seen == [(repo, 0), (repo, 1)]
    assert "unittest_suite" in proposer.told(2)
    assert (repo / "greet.py").read_text() == FIXED  # judged on a copy, never written
