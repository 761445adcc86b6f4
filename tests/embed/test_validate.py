"""The one-call validation: a change and validations in, the round's verdict out."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from gategraph.runtime import (
    Catalog,
    ConfigError,
    MaxNPolicy,
    MemoryEventLog,
    RetryBudget,
    Validation,
    is_validator_attestation,
    is_validator_rejection,
    parse_verdict,
    validate,
    validate_sync,
)

PASSING = {"name": "always", "entrypoint": "gategraph.runtime.testing:passing"}
FAILING = {"name": "never", "entrypoint": "gategraph.runtime.testing:failing"}


def _scratch_left() -> set[str]:
    """This process's private folders for written-out changes (another process's, a test
    running beside this one, come and go as they like)."""
    pattern = f"gategraph-scratch-{os.getpid()}-*/change-*"
    return {str(p) for p in Path(tempfile.gettempdir()).glob(pattern)}


@pytest.mark.anyio
async def test_a_folder_passes_and_fails(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("x = 1\n")
    verdict = await validate(tmp_path, ["python_syntax"])
    assert verdict.passed and verdict.decision == "attested" and verdict.fault is None
    assert is_validator_attestation(parse_verdict(verdict.envelope))
    assert verdict.feedback == "" and verdict.failures == []
    (tmp_path / "bad.py").write_text("def f(:\n")
    verdict = await validate(str(tmp_path), "python_syntax")  # a str path, one validation
    assert not verdict.passed and verdict.decision == "fix" and verdict.fault == "rejected"
    assert is_validator_rejection(parse_verdict(verdict.envelope))
    assert [f["status"] for f in verdict.findings] == ["fail"]
    assert "bad.py:1" in verdict.feedback and verdict.feedback.startswith("1 of 1")
    assert [r.validation for r in verdict.failures] == ["python_syntax"]
    assert (tmp_path / "bad.py").read_text() == "def f(:\n"  # validations only read


@pytest.mark.anyio
async def test_a_mapping_of_files_is_written_out_and_removed() -> None:
    before = _scratch_left()
    verdict = await validate({"pkg/a.py": "x = (\n", "b.py": b"y = 2\n"}, ["python_syntax"])
    assert not verdict.passed
    assert verdict.records[0].result.data["files_checked"] == 2
    assert "pkg/a.py:1" in verdict.feedback
    assert _scratch_left() == before


@pytest.mark.anyio
async def test_an_artifact_and_the_item_forms() -> None:
    """Built-ins by name with arguments, an inline config, a Validation, the same
    validation twice (distinct ids)."""
    schema = {"type": "object", "required": ["files"]}
    verdict = await validate(
        artifact={"files": ["a.py"]},
        validations=[
            {"validation": "json_schema", "arguments": {"schema": schema}},
            {"validation": "json_schema", "arguments": {"schema": {"type": "object"}}},
            PASSING,
            Validation.from_config({**FAILING, "name": "soft", "mode": "informational"}),
        ],
    )
    assert verdict.passed, verdict.feedback
    assert sorted(r.node for r in verdict.records) == [
        "always",
        "json_schema",
        "json_schema-2",
        "soft",
    ]
    soft = next(r for r in verdict.records if r.node == "soft")
    assert not soft.result.passed and not soft.blocking  # informational: recorded, no block
    verdict = await validate(
        artifact=[1], validations={"validation": "json_schema", "arguments": {"schema": schema}}
    )
    assert not verdict.passed and "is not of type 'object'" in verdict.feedback


@pytest.mark.anyio
async def test_one_budget_across_rounds() -> None:
    """The same budget passed each round: fix, fix, fix, then the budget is spent."""
    budget = RetryBudget(MaxNPolicy(limit=3))
    decisions = [(await validate(validations=[FAILING], budget=budget)).decision for _ in range(4)]
    assert decisions == ["fix", "fix", "fix", "escalate-exhausted"]
    fresh = await validate(validations=[FAILING])
    assert fresh.decision == "fix" and (fresh.budget_used, fresh.budget_limit) == (1, 3)


@pytest.mark.anyio
async def test_the_ladder_judges_faults_not_only_findings(tmp_path: Path) -> None:
    """A timeout and an exception retry the validator (with a wait to keep); a write is
    permanent; nothing at all to gate is never a pass."""
    slow = {"name": "slow", "entrypoint": "gategraph.runtime.testing:sleeping", "timeout": 0.05}
    verdict = await validate(validations=[{"validation": slow, "arguments": {"seconds": 5}}])
    assert (verdict.decision, verdict.fault) == ("retry-validator", "timeout")
    assert 0 < verdict.retry_after <= 1.0
    boom = {"name": "boom", "entrypoint": "gategraph.runtime.testing:raising"}
    verdict = await validate(validations=[boom])
    assert (verdict.decision, verdict.fault) == ("retry-validator", "exception")
    writer = {
        "name": "writer",
        "entrypoint": "gategraph.runtime.testing:writing",
        "resource_slots": [{"name": "root", "kind": "directory"}],
    }
    verdict = await validate(tmp_path, [writer])
    assert (verdict.decision, verdict.fault) == ("escalate-permanent", "read_only_violation")
    assert not any(tmp_path.iterdir())  # noqa: ASYNC240 - a test's own folder
    informational = {**FAILING, "mode": "informational"}
    verdict = await validate(validations=[informational])
    assert (verdict.decision, verdict.fault) == ("escalate-permanent", "no_acceptance_criteria")
    assert (await validate(validations=[informational], allow_ungated=True)).passed


@pytest.mark.anyio
async def test_catalog_attachments_gate_the_change(tmp_path: Path) -> None:
    catalog = Catalog.in_memory()
    catalog.add(
        Validation.from_config(
            {
                "name": "no-todo",
                "entrypoint": "gategraph.validators:regex",
                "resource_slots": [{"name": "root", "kind": "directory"}],
            }
        )
    )
    catalog.attach("repo", "no-todo", project="web", arguments={"pattern": "TODO"})
    change = {"a.py": "# TODO: later\n"}
    attached = await validate(change, catalog=catalog, resource="repo", project="web")
    assert not attached.passed
    assert [r.validation for r in attached.records] == ["no-todo"]
    assert attached.records[0].attachment_id is not None
    assert "no-todo (attached): " in attached.feedback
    elsewhere = await validate(change, ["python_syntax"], catalog=catalog, resource="repo")
    assert elsewhere.passed  # the attachment is the project's: not for another project
    nothing = await validate(change, catalog=catalog, resource="other")
    assert nothing.fault == "no_acceptance_criteria"
    by_name = await validate(
        change,
        [{"validation": "no-todo", "arguments": {"pattern": "TODO"}}],
        catalog=catalog,
        resource="docs",
    )
    assert not by_name.passed and by_name.records[0].attachment_id is None


@pytest.mark.anyio
async def test_events_go_to_the_log_given(tmp_path: Path) -> None:
    log = MemoryEventLog()
    verdict = await validate(validations=[PASSING], event_log=log, plan="agent-edit-7")
    assert verdict.plan_id == "agent-edit-7"
    with pytest.raises(ConfigError, match=r"plan: plan agent-edit-7 is in this event log already"):
        await validate(validations=[PASSING], event_log=log, plan="agent-edit-7")
    tags = [type(e).__struct_config__.tag for e in await log.read("agent-edit-7")]
    assert tags[0] == "run_started" and "validation_completed" in tags


@pytest.mark.anyio
async def test_bad_input_is_one_line_naming_the_field(tmp_path: Path) -> None:
    before = _scratch_left()
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"change": tmp_path / "missing", "validations": ["python_syntax"]},
            r"change: .* is not a folder",
        ),
        (
            {"change": {"a.py": 3}, "validations": ["python_syntax"]},
            r"change: .*'a.py' maps to int .*artifact=",
        ),
        (
            {"change": 42, "validations": ["python_syntax"]},
            r"change: a change is a folder or a mapping",
        ),
        (
            {"change": {"../up.py": ""}, "validations": ["python_syntax"]},
            r"change: '../up.py' is not a relative path",
        ),
        ({"validations": ["nope"]}, r"validations\[0\]\.validation: unknown validation 'nope'"),
        (
            {"validations": ["python_sintax"]},
            r"unknown validation 'python_sintax': .* \(did you mean 'python_syntax'\?\)$",
        ),
        ({"validations": [PASSING, 7]}, r"validations\[1\]: 7 is not a validation"),
        (
            {"validations": [{"entrypoint": "x:y"}]},
            r"validations\[0\]\.name: an inline validation needs a name",
        ),
        (
            {"validations": [{"validation": "python_syntax", "args": {}}]},
            r"validations\[0\]: unknown key 'args'",
        ),
        (
            {"validations": [PASSING, {**FAILING, "name": "always"}]},
            r"two different validations are named 'always'",
        ),
        (
            {"validations": [{"validation": "regex", "arguments": {"patern": "x"}}]},
            r"validations\[0\]\.arguments",
        ),
        ({}, r"validations: no validation given"),
        ({"change": {"a": "x", "a/b.py": "y"}}, r"change: 'a/b.py' cannot be written as a file"),
        ({"change": {"a\0b": "x"}}, r"change: 'a\\x00b' is not a file path"),
        ({"change": {1: "x"}}, r"change: 1 is not a file path"),
        ({"validations": [PASSING], "budget": 3}, r"budget: a RetryBudget, not int"),
        ({"validations": [PASSING], "event_log": "x.db"}, r"event_log: an event log"),
        ({"validations": [PASSING], "plan": "../x"}, r"plan: '../x' is not a plan id"),
    ]
    for arguments, message in cases:
        with pytest.raises(ConfigError, match=message) as caught:
            await validate(**arguments)
        assert str(caught.value).startswith("validate(): ")
        assert "\n" not in str(caught.value)
    assert _scratch_left() == before


def test_the_sync_twin(tmp_path: Path) -> None:
    verdict = validate_sync({"a.py": "x = 1\n"}, ["python_syntax"])
    assert verdict.passed


@pytest.mark.anyio
async def test_the_sync_twin_inside_a_loop_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match=r"await validate\(...\)"):
        validate_sync(validations=[PASSING])
    verdict = await anyio.to_thread.run_sync(lambda: validate_sync(validations=[PASSING]))
    assert verdict.passed


def _repository(tmp_path: Path) -> Path:
    """A small project with a test suite, a file git ignores that does not parse, and a
    file elsewhere the change does not touch."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_calc.py").write_text(
        "import sys\nimport unittest\n\nsys.path.insert(0, 'src')\nfrom calc import add\n\n\n"
        "class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )
    (repo / ".gitignore").write_text("build/\n")
    (repo / "build").mkdir()
    (repo / "build" / "generated.py").write_text("def (:\n")
    return repo


@pytest.mark.anyio
async def test_a_change_laid_over_its_repository(tmp_path: Path) -> None:
    """An edit given as files, judged with the rest of the repository: the test suite
    runs (alone, the change has no tests folder); a per-file check judges only the files
    the change gives; the repository is untouched and the copy is gone."""
    repo = _repository(tmp_path)
    before = _scratch_left()
    checks = ["python_syntax", "unittest_suite"]
    alone = await validate({"src/calc.py": "def add(a, b):\n    return a + b\n"}, checks)
    assert not alone.passed and "tests" in alone.feedback
    good = await validate({"src/calc.py": "def add(a, b):\n    return b + a\n"}, checks, base=repo)
    assert good.passed, good.feedback
    syntax = next(r for r in good.records if r.validation == "python_syntax")
    assert syntax.result.data["files_checked"] == 1  # not build/ (ignored), not the tests
    bad = await validate({"src/calc.py": "def add(a, b):\n    return a - b\n"}, checks, base=repo)
    assert not bad.passed and "1 of 1 test failed" in bad.feedback
    # A folder as the change, laid over it the same way.
    edit = tmp_path / "edit"
    (edit / "src").mkdir(parents=True)
    (edit / "src" / "calc.py").write_text("def add(a, b):\n    return a + b + 0\n")
    assert (await validate(edit, checks, base=repo)).passed
    assert (repo / "src" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert _scratch_left() == before


@pytest.mark.anyio
async def test_a_base_that_is_no_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"validate\(\): base: '.*/nowhere' is not a folder"):
        await validate({"a.py": "x = 1\n"}, ["python_syntax"], base=tmp_path / "nowhere")


@pytest.mark.anyio
@pytest.mark.parametrize("key", ["src//b.py", "src/x/../b.py", "./src/b.py"])
async def test_a_file_path_written_oddly_is_still_the_file_judged(tmp_path: Path, key: str) -> None:
    """A model writes paths as it likes: the per-file checks judge the file written."""
    repo = _repository(tmp_path)
    verdict = await validate({key: "def (:\n"}, ["python_syntax"], base=repo)
    assert not verdict.passed and "src/b.py:1" in verdict.feedback


@pytest.mark.anyio
async def test_a_base_that_holds_the_temporary_folder_is_refused() -> None:
    """The copy is made in the temporary folder: a base that holds it cannot be copied."""
    with pytest.raises(ConfigError, match=r"validate\(\): base: the sandbox folder .* is inside"):
        await validate({"a.py": "x = 1\n"}, ["python_syntax"], base=tempfile.gettempdir())
