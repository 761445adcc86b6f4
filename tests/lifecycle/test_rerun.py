"""Each round's inputs are kept in the content store beside the event log, and a round can
be rebuilt from them and its validations run again (the second replay mode)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from _helpers import fake_module
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime import (
    ContentStore,
    MemoryEventLog,
    SQLiteEventLog,
    StoreRetention,
    load_graph,
)
from gategraph.runtime._data._events import ArtifactValidationStarted, WorkFinished
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._lifecycle._plan_sandboxes import PlanSandboxes
from gategraph.runtime._lifecycle._rerun import rerun_rounds
from gategraph.runtime._lifecycle._supervisor import PlanStatus, Supervisor


async def run(text: str, log: Any, **options: Any) -> tuple[Any, list[Any], Any, Supervisor]:
    graph = load_graph(text)
    supervisor = Supervisor(graph, event_log=log, audit=InMemoryAuditLog(), **options)
    outcome = await supervisor.run()
    return outcome, await log.read(outcome.plan_id), graph, supervisor


def started(events: list[Any]) -> list[ArtifactValidationStarted]:
    return [e for e in events if isinstance(e, ArtifactValidationStarted)]


def objects(store: Path) -> set[Path]:
    return {p for p in (store / "objects").rglob("*") if p.is_file()}


@pytest.mark.anyio
async def test_each_round_keeps_its_inputs_beside_the_log(tmp_path: Path) -> None:
    """A file log's rounds record a manifest per sandbox, kept in ``store`` beside the log;
    the fix's round stores only what the fix changed (one file and one manifest)."""
    async with SQLiteEventLog(tmp_path / "state" / "events.db") as log:
        outcome, events, _, supervisor = await run(plan(repo(tmp_path), [BAD, GOOD]), log)
    assert outcome.status is PlanStatus.APPLIED
    first, second = (e.inputs for e in started(events))
    assert first is not None and second is not None and first != second
    store = tmp_path / "state" / "store"
    assert supervisor.store.root == store
    kept = ContentStore(store)
    # Round 1 saw the broken file, round 2 the fixed one: exactly what the sandbox held.
    only_first = {e.path for e in kept.manifest(first["repo"])}
    assert only_first == {"src/app.py", "src/greet.py"}
    files = {e.path: e.sha256 for e in kept.manifest(first["repo"])}
    fixed = {e.path: e.sha256 for e in kept.manifest(second["repo"])}
    assert files["src/app.py"] == fixed["src/app.py"]
    assert kept.get(files["src/greet.py"]) == b"def greet(name:\n"
    # Objects: app.py, both greet.py texts, two manifests, the manifest of what the
    # sandbox started from (its files are among those), and what the sandbox leaves out
    # (its rules and their manifest); nothing stored twice.
    (base,) = {json.dumps(e.bases) for e in started(events)}
    base_digest = json.loads(base)["repo"]
    assert {e.path for e in kept.manifest(base_digest)} == {"src/app.py"}  # before the work
    (left_out,) = {json.dumps(e.exclusions) for e in started(events)}
    rules = json.loads(left_out)["repo"]
    assert json.loads(kept.texts(rules)["exclusion.json"])["gitignore"] is True
    assert len(objects(store)) == 8
    assert kept.pinned(outcome.plan_id) == {first["repo"], second["repo"], base_digest, rules}


@pytest.mark.anyio
async def test_rounds_rerun_on_their_inputs_give_their_outcomes(tmp_path: Path) -> None:
    """Each round rebuilt and re-run gives the outcome it recorded: round 1 on the broken
    file fails again although the repository now holds the fixed one."""
    root = repo(tmp_path)
    log = MemoryEventLog()
    kept = ContentStore(tmp_path / "store")
    outcome, events, graph, supervisor = await run(plan(root, [BAD, GOOD]), log, store=kept)
    assert outcome.status is PlanStatus.APPLIED
    assert "(name)" in (root / "src" / "greet.py").read_text()  # applied: the fixed file
    report = await rerun_rounds(events, graph, store=supervisor.store)
    assert report.matches and report.differences == []
    assert report.rounds == [1, 2] and report.validations == 4 and report.skipped == []
    only = await rerun_rounds(events, graph, store=supervisor.store, rounds=[1])
    assert only.rounds == [1] and only.matches
    with pytest.raises(ValueError, match="has no round 7 \\(it has 2\\)"):
        await rerun_rounds(events, graph, store=supervisor.store, rounds=[7])


def _coin_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> str:
    """A plan with a required validation that fails its first call only, whatever it sees
    (a sync function of a module that exists only in this process: in a thread here)."""
    calls = {"n": 0}

    def coin(**_: Any) -> dict[str, Any]:
        calls["n"] += 1
        return {"passed": calls["n"] > 1, "message": f"call {calls['n']}"}

    fake_module(monkeypatch, name, coin=coin)
    return plan(repo(tmp_path), [GOOD, GOOD]).replace(
        "nodes:\n",
        f'  - {{name: coin, entrypoint: "{name}:coin"}}\nnodes:\n'
        "  - {id: coin, validation: coin, isolation: thread}\n",
    )


@pytest.mark.anyio
async def test_a_validation_that_changes_its_mind_is_flaky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-run on the very inputs it failed, the validation passes: a flake, reported with
    both outcomes; the recorded outcome is the one that decided."""
    text = _coin_plan(tmp_path, monkeypatch, "gg_rerun_coin")
    store = ContentStore(tmp_path / "store")
    outcome, events, graph, supervisor = await run(text, MemoryEventLog(), store=store)
    assert outcome.status is PlanStatus.APPLIED and len(outcome.rounds) == 2
    report = await rerun_rounds(events, graph, store=supervisor.store)
    assert not report.matches
    [difference] = report.differences
    assert (difference.round, difference.node, difference.recorded, difference.now) == (
        1,
        "coin",
        "failed",
        "passed",
    )
    assert difference.flaky and report.flaky == ["coin"]


@pytest.mark.anyio
async def test_rounds_that_cannot_be_rebuilt_say_why(tmp_path: Path) -> None:
    """Inputs the store let go (its retention), or a round that validated no artifact,
    are skipped with the reason; nothing is re-run for them."""
    state = tmp_path / "state"
    async with SQLiteEventLog(state / "events.db") as log:
        first, events, graph, _ = await run(
            plan(repo(tmp_path / "a"), [GOOD]), log, store_retention=StoreRetention(keep_plans=1)
        )
        # A store collects for a batch of plans: with one plan kept, once three are there.
        for number in (2, 3):
            other = repo(tmp_path / f"p{number}")
            (other / "src" / "app.py").write_text(f"x = {number}\n")  # nothing shared
            await run(plan(other, [GOOD]), log, store_retention=StoreRetention(keep_plans=1))
    store = ContentStore(state / "store")
    assert store.pinned(first.plan_id) == frozenset()
    report = await rerun_rounds(events, graph, store=store)
    assert report.rounds == [] and report.validations == 0
    [line] = report.skipped
    assert line.startswith("round 1: its inputs are no longer kept (content store ")
    assert line.endswith(" is missing)")
    # The same log, with the work of round 1 failed.
    failed = [
        msgspec.structs.replace(e, artifact=None, error="it broke")
        if isinstance(e, WorkFinished)
        else e
        for e in events
    ]
    report = await rerun_rounds(failed, graph, store=store)
    assert report.skipped == ["round 1: it validated no artifact (the work failed)"]


# -- confirming a failure before a fix is asked for -------------------------------------------


@pytest.mark.anyio
async def test_a_failure_that_does_not_hold_is_a_flake_on_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``confirm_failures``, a failing required validation runs once more on the same
    inputs; passing then, it is flaky: an infrastructure fault on the shared budget (the
    validation is re-run, not skipped, and no fix is asked for), counted in the statistics;
    the log replays to a match."""
    from gategraph.runtime import replay_plan

    text = _coin_plan(tmp_path, monkeypatch, "gg_confirm_coin").replace(
        "policy:\n", "policy:\n  confirm_failures: true\n"
    )
    if "policy:" not in text:
        text += "policy:\n  confirm_failures: true\n"
    outcome, events, graph, _ = await run(text, MemoryEventLog(), sleep=_no_sleep)
    assert outcome.status is PlanStatus.APPLIED
    assert [(a["faultKind"], a["retryDecision"]) for a in outcome.attempts] == [
        ("flaky", "retry-validator"),
        (None, "attested"),
    ]
    assert outcome.statistics.flakes == {"coin": 1} and outcome.statistics.fixes == 0
    confirmations = [e for e in events if type(e).__name__ == "ConfirmationStarted"]
    assert [(c.round, c.nodes) for c in confirmations] == [(1, ["coin"])]
    report = replay_plan(events, graph)
    assert report.matches, report.mismatches


@pytest.mark.anyio
async def test_a_failure_that_holds_goes_back_to_be_fixed(tmp_path: Path) -> None:
    """A failure confirmed on the same inputs is a real finding: the work is fixed."""
    from gategraph.runtime import replay_plan

    text = plan(repo(tmp_path), [BAD, GOOD], confirm_failures="true")
    outcome, events, graph, _ = await run(text, MemoryEventLog())
    assert outcome.status is PlanStatus.APPLIED
    assert [a["retryDecision"] for a in outcome.attempts] == ["fix", "attested"]
    assert outcome.statistics.flakes == {} and outcome.statistics.fixes == 1
    calls = [e for e in events if type(e).__name__ == "ValidationCompleted" and e.node == "syntax"]
    assert len(calls) == 3  # round 1, its confirmation, round 2
    assert replay_plan(events, graph).matches


async def _no_sleep(seconds: float) -> None:
    pass


@pytest.mark.anyio
async def test_a_forged_confirmation_does_not_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The confirmation's recorded call decides the flake: one turned into a failure no
    longer leads to the recorded infrastructure fault, and replay says where."""
    from gategraph.runtime import replay_plan
    from gategraph.runtime._data._results import ValidationResult

    text = _coin_plan(tmp_path, monkeypatch, "gg_confirm_forged") + (
        "policy:\n  confirm_failures: true\n"
    )
    _, events, graph, _ = await run(text, MemoryEventLog(), sleep=_no_sleep)
    confirmation = next(e for e in events if type(e).__name__ == "ConfirmationStarted")
    again = next(
        e for e in events if e.seq > confirmation.seq and type(e).__name__ == "ValidationCompleted"
    )
    forged = [
        msgspec.structs.replace(e, result=ValidationResult(False, "call 2")) if e is again else e
        for e in events
    ]
    report = replay_plan(forged, graph)
    rejected = next(e for e in events if type(e).__name__ == "ArtifactRejected")
    assert report.mismatches[0].startswith(
        f"seq {rejected.seq} (artifact_rejected): expected reasons semantic: coin: call 1, "
    )


@pytest.mark.anyio
async def test_each_flake_found_is_counted_in_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that finds a flake counts it in its catalog, once; so does a re-run that finds
    one (the same flake found again is not counted twice)."""
    from gategraph.runtime import Catalog

    text = _coin_plan(tmp_path, monkeypatch, "gg_counted_coin")
    catalog = Catalog.in_memory()
    store = ContentStore(tmp_path / "store")
    _, events, graph, supervisor = await run(text, MemoryEventLog(), catalog=catalog, store=store)
    assert catalog.flakes("coin") == 0  # no confirmation asked for: a plain fix
    report = await rerun_rounds(events, graph, store=supervisor.store, catalog=catalog)
    assert report.flaky == ["coin"] and catalog.flakes("coin") == 1
    await rerun_rounds(events, graph, store=supervisor.store, catalog=catalog, rounds=[1])
    assert catalog.flakes("coin") == 1
    [record] = catalog.flake_records("coin")
    assert (record.plan_id, record.round, record.node) == (report.plan_id, 1, "coin")

    confirmed = _coin_plan(tmp_path / "again", monkeypatch, "gg_counted_coin2") + (
        "policy:\n  confirm_failures: true\n"
    )
    outcome, *_ = await run(confirmed, MemoryEventLog(), catalog=catalog, sleep=_no_sleep)
    assert outcome.statistics.flakes == {"coin": 1}
    assert catalog.flakes("coin") == 2


def test_the_run_summary_names_the_flaky_validations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gategraph run` says which validations were flaky; `tool list` counts them."""
    from click.testing import CliRunner
    from gategraph.runtime._cli import cli

    text = _coin_plan(tmp_path, monkeypatch, "gg_cli_coin") + (
        "policy:\n  confirm_failures: true\n"
    )
    graph = tmp_path / "plan.yaml"
    graph.write_text(text)
    catalog = ["--catalog", str(tmp_path / "c.db")]
    result = CliRunner().invoke(cli, [*catalog, "run", str(graph)])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert (
        "flaky (failed, then passed on the same inputs; re-run, never skipped): coin (1)"
        in result.stdout
    )
    listed = CliRunner().invoke(cli, [*catalog, "tool", "list"])
    assert "flaky validations not registered here: coin (1)" in listed.stdout


@pytest.mark.anyio
async def test_an_in_memory_log_keeps_no_copy_of_a_folder(tmp_path: Path) -> None:
    """Beside an in-memory log, a folder's rounds record its digest only (Apply's check
    needs no more), and a re-run says why it cannot rebuild them."""
    outcome, events, graph, supervisor = await run(plan(repo(tmp_path), [GOOD]), MemoryEventLog())
    assert outcome.status is PlanStatus.APPLIED and supervisor.store.root is None
    [inputs] = [e.inputs for e in started(events)]
    assert inputs is not None and not supervisor.store.has(inputs["repo"])
    assert supervisor.store.statistics().objects == 0
    report = await rerun_rounds(events, graph, store=supervisor.store)
    assert report.skipped == [
        "round 1: resource 'repo' is a folder, and an in-memory store keeps only its digest "
        "(run the plan with a file event log, or a store on disk, to re-run it)"
    ]


# -- what a round validated is what is applied --------------------------------------------------


@pytest.mark.anyio
async def test_a_retry_round_whose_inputs_changed_runs_every_validation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validator-only retry keeps the other validations' results only while the sandboxes
    hold what those validations saw; changed, every validation runs again."""
    text = _coin_plan(tmp_path, monkeypatch, "gg_changed_coin") + (
        "policy:\n  confirm_failures: true\n"
    )
    rounds = iter([{"repo": "a" * 64}, {"repo": "b" * 64}])

    async def inputs(self: PlanSandboxes, *, pin: bool) -> dict[str, str] | None:
        return next(rounds) if pin else {"repo": "b" * 64}

    monkeypatch.setattr(PlanSandboxes, "inputs", inputs)
    outcome, events, _, _ = await run(text, MemoryEventLog(), sleep=_no_sleep)
    assert outcome.status is PlanStatus.APPLIED
    second = started(events)[1].seq
    ran = {e.node for e in events if e.seq > second and type(e).__name__ == "ValidationCompleted"}
    assert ran == {"coin", "syntax", "advice"}  # not coin alone


@pytest.mark.anyio
async def test_a_resumed_plan_refuses_a_sandbox_changed_after_its_round(tmp_path: Path) -> None:
    """A plan that died after its round passed is resumed: its sandbox was written since,
    so what the round validated is no longer there, and nothing is applied."""
    from test_resume import Crash, DyingLog

    root = repo(tmp_path)
    graph = load_graph(plan(root, [GOOD]))
    log, home = MemoryEventLog(), tmp_path / "home"
    first = Supervisor(graph, event_log=DyingLog(log, 11), audit=InMemoryAuditLog(), home=home)
    with pytest.raises(Crash):
        await first.run()
    assert type(list(log._events.values())[-1][-1]).__name__ == "ArtifactValidated"
    box = home / "sandboxes" / first.plan_id / "r0" / "repo" / "src" / "greet.py"
    box.write_text("def greet(name:\n")
    second = Supervisor(
        graph, event_log=log, plan_id=first.plan_id, audit=InMemoryAuditLog(), home=home
    )
    outcome = await second.resume()
    assert outcome.status is PlanStatus.FAILED
    assert outcome.message.startswith("the sandboxes changed while they were being validated")
    assert not (root / "src" / "greet.py").exists()


@pytest.mark.anyio
async def test_a_store_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    """A store folder that is a file: the round cannot keep its inputs, and says where."""
    from gategraph.runtime import StoreError

    (tmp_path / "store").write_text("not a folder")
    with pytest.raises(StoreError, match=r"cannot keep the round's inputs: .*store"):
        await run(
            plan(repo(tmp_path), [GOOD]),
            MemoryEventLog(),
            store=ContentStore(tmp_path / "store"),
        )


def test_the_store_is_for_its_user_alone(tmp_path: Path) -> None:
    """Its folder is the user's alone and its objects read-only: copies of private files
    stay private."""
    store = ContentStore(tmp_path / "store")
    digest = store.snapshot_texts({".env": "TOKEN=1"})
    assert (tmp_path / "store").stat().st_mode & 0o777 == 0o700
    [entry] = store.manifest(digest)
    obj = tmp_path / "store" / "objects" / entry.sha256[:2] / entry.sha256[2:]
    assert obj.stat().st_mode & 0o777 == 0o400


@pytest.mark.anyio
async def test_a_round_that_cannot_run_again_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validation the graph no longer has: that round is skipped with the reason."""
    text = _coin_plan(tmp_path, monkeypatch, "gg_gone_coin")
    store = ContentStore(tmp_path / "store")
    _, events, _, _ = await run(text, MemoryEventLog(), store=store)
    without = load_graph(plan(repo(tmp_path / "other"), [GOOD]))
    report = await rerun_rounds(events, without, store=store)
    assert report.rounds == [] and len(report.skipped) == 2
    assert report.skipped[0].startswith("round 1: cannot be run again: ")
    assert "coin" in report.skipped[0]


def test_rerun_rounds_must_be_plain_numbers(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from gategraph.runtime._cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "--catalog",
            str(tmp_path / "c.db"),
            "replay",
            "01ARZ3NDEKTSV4RRFFQ69G5FAV",
            "--rerun",
            "²",
        ],
    )
    assert result.exit_code == 2
    assert (
        result.stderr.strip() == "error: --rerun: '²' is not 'all' or round numbers such as '1,3'"
    )
