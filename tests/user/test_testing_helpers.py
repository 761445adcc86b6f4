"""``gategraph.runtime.testing``: the fake validations and scripted actors users build their
own tests on behave as documented."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from gategraph.runtime import testing
from gategraph.runtime._base._protocols import ExecuteRequest, FixRequest, Strategy, StrategyRequest


def test_whereami_says_which_process_ran_it() -> None:
    """The pid is in the message and in the data."""
    assert testing.whereami(ignored=1) == {
        "passed": True,
        "message": f"pid {os.getpid()}",
        "data": {"pid": os.getpid()},
    }


def test_writing_writes_the_file_it_names(tmp_path: Path) -> None:
    """Unguarded it writes (a validation under the guard is refused, see test_readonly)."""
    assert testing.writing(tmp_path, name="out.txt")["message"] == "wrote a file"
    assert (tmp_path / "out.txt").read_text() == "a validation must not write\n"


def test_echo_reports_what_it_was_called_with(tmp_path: Path) -> None:
    """Paths become text, mappings plain dicts; the context is left out."""
    outcome = testing.echo(
        artifact={"a": 1},
        inputs={"n": 2},
        root=tmp_path,
        options={"x": 1},
        count=3,
        context=object(),
    )
    assert outcome["data"] == {
        "arguments": {"root": str(tmp_path), "options": {"x": 1}, "count": 3},
        "artifact": {"a": 1},
        "inputs": {"n": 2},
    }


@pytest.mark.anyio
async def test_scripted_strategy_records_each_request() -> None:
    """It answers with its summary and the revision, and keeps the requests in order."""
    strategy = testing.ScriptedStrategy("plan it")
    first = StrategyRequest(plan_id="p", graph=None, applicable=(), revision=0)
    second = StrategyRequest(plan_id="p", graph=None, applicable=(), revision=1)
    assert (await strategy.strategize(first)).summary == "plan it (revision 0)"
    assert (await strategy.strategize(second)).summary == "plan it (revision 1)"
    assert strategy.requests == [first, second]


def request(resources: dict[str, Any], fix: int | None = None) -> Any:
    fields: dict[str, Any] = {
        "plan_id": "p",
        "graph": None,
        "strategy": Strategy(summary="s"),
        "resources": resources,
        "attempt": 1 if fix is None else fix + 1,
        "revision": 0,
    }
    if fix is None:
        return ExecuteRequest(**fields)
    return FixRequest(**fields, artifact=None, rejection={}, failures=(), fix=fix)


def test_a_script_needs_a_step() -> None:
    """An empty script is refused when the actor is made."""
    with pytest.raises(ValueError, match="at least one step"):
        testing.ScriptedExecutor([])


@pytest.mark.anyio
async def test_scripted_executor_writes_deletes_and_repeats_its_last_step(tmp_path: Path) -> None:
    """Each fix takes the next step; past the end the last repeats; None deletes a file."""
    (tmp_path / "old.txt").write_text("old")
    executor = testing.ScriptedExecutor(
        [
            {"files": {"src/a.py": "one", "old.txt": None}},
            {"files": {"src/a.py": "two"}, "artifact": {"custom": True}},
        ]
    )
    assert await executor.execute(request({"repo": tmp_path})) == {"files": ["old.txt", "src/a.py"]}
    assert (tmp_path / "src" / "a.py").read_text() == "one"
    assert not (tmp_path / "old.txt").exists()
    assert await executor.fix(request({"repo": tmp_path}, fix=1)) == {"custom": True}
    assert await executor.fix(request({"repo": tmp_path}, fix=5)) == {"custom": True}
    assert (tmp_path / "src" / "a.py").read_text() == "two"
    assert len(executor.calls) == 3


@pytest.mark.anyio
async def test_scripted_executor_edits_memory_views_and_named_resources(tmp_path: Path) -> None:
    """A step may name its resource; a memory view is a mapping of path to text."""
    notes: dict[str, str] = {"keep.txt": "k", "drop.txt": "d"}
    executor = testing.ScriptedExecutor(
        [{"resource": "notes", "files": {"new.txt": "n", "drop.txt": None, "gone.txt": None}}]
    )
    await executor.execute(request({"notes": notes, "repo": tmp_path}))
    assert notes == {"keep.txt": "k", "new.txt": "n"}


@pytest.mark.anyio
async def test_scripted_executor_steps_may_raise_or_need_a_resource_name(tmp_path: Path) -> None:
    """``raise_`` fails the step; with two resources and no name the step cannot guess."""
    raising = testing.ScriptedExecutor([{"raise_": "out of disk"}])
    with pytest.raises(RuntimeError, match="out of disk"):
        await raising.execute(request({"repo": tmp_path}))
    ambiguous = testing.ScriptedExecutor([{"files": {"a.txt": "a"}}])
    with pytest.raises(ValueError, match="say which resource"):
        await ambiguous.execute(request({"a": {}, "b": {}}))
    nothing = testing.ScriptedExecutor([{}])
    assert await nothing.execute(request({"a": {}, "b": {}})) == {"files": []}
