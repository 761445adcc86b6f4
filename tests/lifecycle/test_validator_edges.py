"""The validator surface at its edges: what a lead, a plugin or a store can get wrong,
and the answer each gets."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from _helpers import VALIDATOR, attestation, rejection
from _plans import GOOD, plan, repo
from gategraph.runtime import (
    Catalog,
    ContentStore,
    MemoryEventLog,
    MemoryEvidence,
    PlanStatus,
    Supervisor,
    ValidatorAttestation,
    ValidatorRequest,
    load_graph,
    parse_verdict,
    replay_plan,
    validator_ac_pull,
    validator_spawn,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._definitions._evidence import Coverage
from gategraph.runtime._definitions._validator_tools import (
    E_INVALID_INPUT,
    E_NOT_FOUND,
    E_VALIDATOR_AC_NOT_FOUND,
    attest,
    reject,
    validator_attest,
)
from gategraph.runtime._lifecycle import _validator_spawn as spawning
from gategraph.runtime._lifecycle._validator_spawn import E_VALIDATOR_FAILED, spawn
from test_coverage_gate import two_criteria
from test_validator_spawn import LEAD, Signing, Waiting

# -- spawn -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_what_a_spawn_needs_and_cannot_find(tmp_path: Path) -> None:
    waiting = Waiting(tmp_path)
    outcome = await waiting.run()
    events = await waiting.log.read(outcome.plan_id)
    nowhere = await validator_spawn(LEAD, outcome.plan_id, events=events, graph=waiting.graph)
    assert nowhere["code"] == E_INVALID_INPUT and "no evidence store" in nowhere["message"]
    headless = await validator_spawn(
        LEAD, outcome.plan_id, catalog=waiting.catalog, events=events[1:], graph=waiting.graph
    )
    assert headless["code"] == E_NOT_FOUND and "plan_started" in headless["message"]
    unknown = await validator_spawn(
        LEAD, outcome.plan_id, evidence=MemoryEvidence(), events=events, graph=waiting.graph
    )
    assert unknown["code"] == E_NOT_FOUND and "evidence store" in unknown["message"]
    other = load_graph(two_criteria(tmp_path / "other"))
    changed = await validator_spawn(
        LEAD, outcome.plan_id, catalog=waiting.catalog, events=events, graph=other
    )
    assert changed["code"] == E_INVALID_INPUT and "not those it ran with" in changed["message"]
    empty = await validator_spawn(
        LEAD,
        outcome.plan_id,
        catalog=waiting.catalog,
        events=events,
        graph=waiting.graph,
        store=ContentStore(tmp_path / "empty-store"),
    )
    assert empty["code"] == E_INVALID_INPUT and "no longer kept" in empty["message"]
    gone = await waiting.spawn(no_worktree=True, home=tmp_path / "elsewhere")
    assert gone["code"] == E_INVALID_INPUT and "is gone" in gone["message"]


@pytest.mark.anyio
async def test_a_validator_that_answers_nothing_usable(tmp_path: Path) -> None:
    class Number:
        async def validate(self, request: ValidatorRequest) -> Any:
            return 42

    class Contradicts(Signing):
        async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
            envelope = await super().validate(request)
            envelope["findings"][0]["status"] = "fail"  # an attestation must all pass
            return envelope

    class Sync:
        def validate(self, request: ValidatorRequest) -> Any:
            return None

    waiting = Waiting(tmp_path)
    await waiting.run()
    assert (await waiting.spawn(validator=Number))["code"] == E_VALIDATOR_FAILED
    assert (await waiting.spawn(validator=Contradicts))["code"] == (
        "E_VALIDATOR_ATTESTATION_INVALID"
    )
    refused = await waiting.spawn(validator=Sync())
    assert refused["code"] == E_INVALID_INPUT and "async" in refused["message"]


@pytest.mark.anyio
async def test_the_graph_is_read_from_the_file_the_plan_ran(tmp_path: Path) -> None:
    file = tmp_path / "plan.yaml"
    file.write_text(plan(repo(tmp_path), [GOOD], outside_validators=1))
    waiting = Waiting(tmp_path / "w")
    waiting.graph = load_graph(file)
    outcome = await waiting.run()
    events = await waiting.log.read(outcome.plan_id)

    async def without_graph(**options: Any) -> dict[str, Any]:
        return await validator_spawn(
            LEAD,
            outcome.plan_id,
            catalog=waiting.catalog,
            events=events,
            store=waiting.store,
            validator=Signing,
            **options,
        )

    assert (await without_graph())["ok"]
    file.write_text(file.read_text() + "\n# changed\n")
    assert "changed since" in (await without_graph())["message"]
    file.unlink()
    assert "which is not there" in (await without_graph())["message"]
    from_python = Waiting(tmp_path / "p")
    started = await from_python.run()
    answer = await validator_spawn(
        LEAD,
        started.plan_id,
        catalog=from_python.catalog,
        events=await from_python.log.read(started.plan_id),
    )
    assert answer["code"] == E_INVALID_INPUT and "started from Python" in answer["message"]


@pytest.mark.anyio
async def test_the_graphs_own_validator_class_and_a_memory_candidate(tmp_path: Path) -> None:
    text = (
        "version: 1\nname: notes\nresources: {notes: {kind: memory, files: {a.md: hi}}}\n"
        "validations:\n  - {name: ok, entrypoint: 'gategraph.runtime.testing:passing'}\n"
        "nodes: [{id: ok, validation: ok}]\npolicy: {outside_validators: 1}\n"
        "lifecycle: {validator: {uses: 'test_validator_spawn:Signing'}}\n"
    )
    graph = load_graph(text)
    log, catalog = MemoryEventLog(), Catalog.in_memory()
    supervisor = Supervisor(graph, event_log=log, catalog=catalog)
    outcome = await supervisor.run()
    assert outcome.status is PlanStatus.AWAITING_ATTESTATION
    seen: list[ValidatorRequest] = []

    class Looking(Signing):
        async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
            seen.append(request)
            return await super().validate(request)

    events = await log.read(outcome.plan_id)
    answer = await validator_spawn(
        LEAD, outcome.plan_id, catalog=catalog, events=events, graph=graph, store=supervisor.store
    )
    assert answer["ok"] and answer["result"]["validatorId"].startswith("validator-signing-")
    await validator_spawn(
        LEAD,
        outcome.plan_id,
        catalog=catalog,
        events=events,
        graph=graph,
        store=supervisor.store,
        validator=Looking,
    )
    assert seen[0].resources == {"notes": {"a.md": "hi"}}


@pytest.mark.anyio
async def test_the_spawn_tool_finds_a_projects_catalog_and_log(tmp_path: Path) -> None:
    assert (await spawn(LEAD, "01X", project_root=str(tmp_path)))["code"] == E_NOT_FOUND
    Catalog.open(tmp_path / ".gategraph" / "gategraph.db").close()
    answer = await spawn(LEAD, "01X", project_root=str(tmp_path))
    assert answer["code"] == E_NOT_FOUND and "no event log" in answer["message"]

    class Context:
        plan_id = "01Y"

    worker = await spawn(
        {"role": "worker", "tier": 1}, project_root=str(tmp_path), context=Context()
    )
    assert worker["code"] == "E_VALIDATOR_SPAWN_AUTH_ROLE"


def test_the_registries_let_go_and_hold_what_cannot_be_held_weakly() -> None:
    class Worker:
        pass

    class Slotted:
        __slots__ = ()

    for number in range(1005):
        spawning.register_worker(f"gone-{number}", Worker())  # each dies at once
    gc.collect()
    spawning.register_worker("kept", Slotted())
    assert "gone-3" not in spawning._workers
    assert isinstance(spawning._worker_of("kept"), Slotted)
    held = Slotted()
    spawning._remember(held)
    assert spawning._seen(held)


# -- the tools -----------------------------------------------------------------------------------


def test_where_the_tools_look(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert validator_ac_pull("p", project_root=42)["code"] == E_INVALID_INPUT  # type: ignore[arg-type]
    assert validator_ac_pull("p")["code"] == E_NOT_FOUND  # the default catalog is not there
    bogus = tmp_path / "bogus"
    (bogus / ".gategraph").mkdir(parents=True)
    (bogus / ".gategraph" / "gategraph.db").write_text("not a database")
    assert validator_ac_pull("p", project_root=bogus)["code"] == E_NOT_FOUND
    acs = [{"id": "x", "alias": "AC1"}]
    remapped = validator_attest(VALIDATOR, attestation("p", acs), project_root=tmp_path)
    assert remapped["code"] == E_VALIDATOR_AC_NOT_FOUND
    assert attest(VALIDATOR, attestation("p", acs), str(tmp_path))["code"] == (
        E_VALIDATOR_AC_NOT_FOUND
    )
    assert reject(VALIDATOR, rejection("p", acs * 2), str(tmp_path))["ok"] is False
    model = parse_verdict(attestation("p", acs))
    assert isinstance(model, ValidatorAttestation)
    assert validator_attest(VALIDATOR, model, evidence=MemoryEvidence())["code"] == (
        E_VALIDATOR_AC_NOT_FOUND
    )


# -- the gate ------------------------------------------------------------------------------------


class Forgetful(MemoryEvidence):
    """A store that loses what is bound to it."""

    def bind_coverage(self, plan_id: str, validator_id: str, criteria: Any = None) -> None:
        return None


class Eager(MemoryEvidence):
    """A store in which an outside validator has covered every plan already."""

    def coverage(self, plan_id: str, *, since: float = 0.0) -> Coverage:
        found = super().coverage(plan_id, since=since)
        return Coverage(by=found.by, complete=found.complete | {"validator-early"})


@pytest.mark.anyio
async def test_a_store_that_loses_the_rounds_attestation_fails_the_plan(tmp_path: Path) -> None:
    graph = load_graph(two_criteria(tmp_path))
    outcome = await Supervisor(graph, evidence=Forgetful()).run()
    assert outcome.status is PlanStatus.FAILED
    assert "no coverage binding (AC1, AC2)" in outcome.message


@pytest.mark.anyio
async def test_attested_before_the_gate_looked(tmp_path: Path) -> None:
    graph = load_graph(two_criteria(tmp_path, outside_validators=1))
    log, evidence = MemoryEventLog(), Eager()
    outcome = await Supervisor(
        graph, event_log=log, evidence=evidence, audit=InMemoryAuditLog()
    ).run()
    assert outcome.status is PlanStatus.APPLIED
    events = await log.read(outcome.plan_id)
    assert "attestation_required" not in [type(e).__name__ for e in events]
    assert replay_plan(events, graph).matches
    again = await Supervisor(
        graph, event_log=log, evidence=evidence, plan_id=outcome.plan_id
    ).resume()
    assert again.status is PlanStatus.APPLIED and len(await log.read(outcome.plan_id)) == len(
        events
    )
