"""Acceptance criteria with identity, the evidence bound to them, and the coverage gate:
a plan is applied only when every criterion is covered, by its own round and — when its
policy asks — by outside validators, through the validator tools."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from _helpers import VALIDATOR, attestation, rejection
from _plans import BAD, GOOD, plan, repo
from gategraph.runtime import (
    AGENT_ROLES,
    Catalog,
    MemoryEventLog,
    MemoryEvidence,
    PlanStatus,
    Supervisor,
    is_agent_role,
    load_graph,
    register_validator,
    replay_plan,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._definitions._validator_tools import (
    E_INVALID_INPUT,
    E_NOT_FOUND,
    E_VALIDATOR_AC_NOT_FOUND,
    E_VALIDATOR_ATTESTATION_INVALID,
    E_VALIDATOR_AUTH_ROLE,
    E_VALIDATOR_REJECTION_INVALID,
    validator_ac_pull,
    validator_attest,
    validator_reject,
)
from gategraph.runtime._lifecycle._supervisor import resume_plan
from gategraph.runtime._running._journal import event_tag


def signed(store: Any, who: str = "validator-eve") -> dict[str, str]:
    """The keyword a validator tool takes for ``who``: a credential registered for it now,
    as a person would with ``gategraph validator register``."""
    return {"credential": register_validator(who, evidence=store)}


def two_criteria(tmp_path: Path, **policy: Any) -> str:
    """The shared plan with a second declared criterion (both bound to the syntax check)."""
    text = plan(repo(tmp_path), [GOOD], **policy)
    return text.replace(
        "  - {id: AC1, text: The code parses., validations: [syntax]}\n",
        "  - {id: AC1, text: The code parses., validations: [syntax]}\n"
        "  - {id: AC2, text: The greeting is kept., validations: [syntax]}\n",
    )


async def start(tmp_path: Path, text: str, catalog: Catalog) -> tuple[Any, Any, Any]:
    graph = load_graph(text)
    log = MemoryEventLog()
    supervisor = Supervisor(graph, catalog=catalog, event_log=log, audit=InMemoryAuditLog())
    return await supervisor.run(), supervisor, log


def test_roles() -> None:
    assert AGENT_ROLES == ("orchestrator", "lead", "worker", "validator")
    assert is_agent_role("lead") and not is_agent_role("Lead") and not is_agent_role(None)


@pytest.mark.anyio
async def test_a_plan_applies_once_its_own_round_covers_every_criterion(tmp_path: Path) -> None:
    """The roster (UUID, alias, ordinal, text) is kept in the catalog when the plan starts;
    the round that passed binds every criterion; the verdict names them by the same ids."""
    catalog = Catalog.open(tmp_path / "gategraph.db")
    outcome, supervisor, _ = await start(tmp_path, two_criteria(tmp_path), catalog)
    assert outcome.status is PlanStatus.APPLIED
    pulled = validator_ac_pull(outcome.plan_id, evidence=catalog)
    assert pulled["ok"] and pulled["taskId"] == outcome.plan_id
    assert [(a["alias"], a["ordinal"], a["text"]) for a in pulled["acs"]] == [
        ("AC1", 1, "The code parses."),
        ("AC2", 2, "The greeting is kept."),
    ]
    assert all(a["bindingStatus"] == "satisfied" for a in pulled["acs"])
    ids = [a["id"] for a in pulled["acs"]]
    assert all(uuid.UUID(i).version == 8 for i in ids) and len(set(ids)) == 2
    assert [f["acId"] for f in outcome.verdict["findings"]] == ids
    assert [c.id for c in supervisor.roster.criteria] == ids
    # The same plan always has the same ids; another plan has others.
    again = validator_ac_pull(outcome.plan_id, project_root=None, evidence=catalog)
    assert [a["id"] for a in again["acs"]] == ids


@pytest.mark.anyio
async def test_a_plan_waits_for_an_outside_validator_then_applies(tmp_path: Path) -> None:
    catalog = Catalog.open(tmp_path / "gategraph.db")
    text = two_criteria(tmp_path, outside_validators=1)
    outcome, _, log = await start(tmp_path, text, catalog)
    assert outcome.status is PlanStatus.AWAITING_ATTESTATION and outcome.status.waiting
    assert "waiting for 1 outside validator to attest all 2 of its" in outcome.message
    root = tmp_path / "repo"
    assert not (root / "src" / "greet.py").exists()
    plan_id = outcome.plan_id
    graph = load_graph(text)
    # Resumed before anyone attested: still waiting, and nothing appended.
    before = len(await log.read(plan_id))
    still = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert still.status is PlanStatus.AWAITING_ATTESTATION
    assert len(await log.read(plan_id)) == before
    acs = validator_ac_pull(plan_id, evidence=catalog)["acs"]
    # The plan's own round covers them already; that is not an outside validator.
    assert all(a["bindingStatus"] == "satisfied" for a in acs)
    eve = signed(catalog)
    # A rejection binds nothing: still waiting.
    rejected = validator_reject(
        VALIDATOR, rejection(plan_id, acs, "validator-eve"), evidence=catalog, **eve
    )
    assert rejected["ok"] and rejected["failingAcIds"] == [acs[0]["id"]]
    assert rejected["failingFindingCount"] == 1
    held = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert held.status is PlanStatus.AWAITING_ATTESTATION
    assert "validator-eve rejected it" in held.message
    assert len(await log.read(plan_id)) == before  # what is shown is not logged
    # One criterion attested: not enough (the rejection is taken back, though).
    partial = validator_attest(VALIDATOR, attestation(plan_id, acs[:1]), evidence=catalog, **eve)
    assert partial["ok"] and partial["bindingsWritten"] == 1
    still = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert still.status is PlanStatus.AWAITING_ATTESTATION
    assert "rejected" not in still.message
    whole = validator_attest(VALIDATOR, attestation(plan_id, acs), evidence=catalog, **eve)
    assert whole["ok"] and whole["bindingsWritten"] == 2 and len(set(whole["bindingIds"])) == 2
    assert whole["bindingIds"][0] == partial["bindingIds"][0]  # attesting again collapses
    done = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert done.status is PlanStatus.APPLIED and (root / "src" / "greet.py").exists()
    events = await log.read(plan_id)
    tags = [event_tag(e) for e in events]
    assert tags.count("attestation_required") == 1
    [received] = [e for e in events if event_tag(e) == "attestations_received"]
    assert received.validators == ["validator-eve"]
    report = replay_plan(events, graph)
    assert report.matches, report.mismatches
    # Finished: resumed again, nothing changes.
    count = len(events)
    assert (await resume_plan(plan_id, graph, event_log=log, catalog=catalog)).status is (
        PlanStatus.APPLIED
    )
    assert len(await log.read(plan_id)) == count


async def _two_criteria_waiting(tmp_path: Path, validators: int) -> tuple[Any, ...]:
    """The plan of two criteria, run until it waits for ``validators`` outside validators:
    its catalog, id, graph, log and criteria."""
    catalog = Catalog.open(tmp_path / "gategraph.db")
    text = two_criteria(tmp_path, outside_validators=validators)
    outcome, _, log = await start(tmp_path, text, catalog)
    acs = validator_ac_pull(outcome.plan_id, evidence=catalog)["acs"]
    return catalog, outcome.plan_id, load_graph(text), log, acs


@pytest.mark.anyio
async def test_two_outside_validators_each_attest(tmp_path: Path) -> None:
    catalog, plan_id, graph, log, acs = await _two_criteria_waiting(tmp_path, 2)
    one, two = signed(catalog, "validator-one"), signed(catalog, "validator-two")
    validator_attest(VALIDATOR, attestation(plan_id, acs, "validator-one"), evidence=catalog, **one)
    waiting = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert waiting.status is PlanStatus.AWAITING_ATTESTATION
    validator_attest(VALIDATOR, attestation(plan_id, acs, "validator-two"), evidence=catalog, **two)
    done = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert done.status is PlanStatus.APPLIED
    [received] = [e for e in await log.read(plan_id) if event_tag(e) == "attestations_received"]
    assert received.validators == ["validator-one", "validator-two"]


@pytest.mark.anyio
async def test_an_attestation_of_an_earlier_candidate_does_not_count(tmp_path: Path) -> None:
    """Only what was attested after the round passed counts: a fix makes a new candidate."""
    evidence = MemoryEvidence()
    eve = signed(evidence)
    text = plan(repo(tmp_path), [BAD, GOOD], outside_validators=1)
    graph = load_graph(text)
    log = MemoryEventLog()
    attested: dict[str, Any] = {}

    class Early:
        """An execution actor that has a validator attest its first, broken candidate."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def execute(self, request: Any) -> Any:
            artifact = await self.inner.execute(request)
            acs = validator_ac_pull(request.plan_id, evidence=evidence)["acs"]
            attested["early"] = validator_attest(
                VALIDATOR, attestation(request.plan_id, acs), evidence=evidence, **eve
            )
            return artifact

        async def fix(self, request: Any) -> Any:
            return await self.inner.fix(request)

    from gategraph.runtime.testing import ScriptedExecutor

    supervisor = Supervisor(
        graph,
        event_log=log,
        evidence=evidence,
        audit=InMemoryAuditLog(),
        execution_actor=Early(
            ScriptedExecutor(
                steps=[
                    {"files": {"src/greet.py": "def greet(name:\n"}},
                    {"files": {"src/greet.py": "x = 1\n"}},
                ]
            )
        ),
    )
    outcome = await supervisor.run()
    assert attested["early"]["ok"]
    assert outcome.status is PlanStatus.AWAITING_ATTESTATION


def test_the_tools_refuse_bad_input_with_the_seed_codes(tmp_path: Path) -> None:
    evidence = MemoryEvidence()
    assert validator_ac_pull("", evidence=evidence)["code"] == E_INVALID_INPUT
    assert validator_ac_pull("01NOPE", evidence=evidence)["code"] == E_NOT_FOUND
    worker = validator_attest({"role": "worker"}, {}, evidence=evidence)
    assert worker == {
        "ok": False,
        "code": E_VALIDATOR_AUTH_ROLE,
        "message": "only a validator may attest, not a worker",
    }
    nobody = validator_attest({"role": "boss"}, {}, evidence=evidence)
    assert nobody["code"] == E_VALIDATOR_AUTH_ROLE and "'boss'" in nobody["message"]
    assert validator_reject("validator", {}, evidence=evidence)["code"] == E_VALIDATOR_AUTH_ROLE
    broken = validator_attest(VALIDATOR, {"verdict": "attest"}, evidence=evidence)
    assert broken["code"] == E_VALIDATOR_ATTESTATION_INVALID
    assert "taskId: is required" in broken["message"]
    acs = [{"id": "ac-1", "alias": "AC1"}]
    wrong_kind = validator_attest(VALIDATOR, rejection("p", acs * 2), evidence=evidence)
    assert wrong_kind["code"] == E_VALIDATOR_ATTESTATION_INVALID
    assert "verdict must be 'attest'" in wrong_kind["message"]
    unknown = validator_attest(VALIDATOR, attestation("p", acs), evidence=evidence)
    assert unknown["code"] == E_VALIDATOR_AC_NOT_FOUND
    passing = validator_reject(VALIDATOR, attestation("p", acs), evidence=evidence)
    assert passing["code"] == E_VALIDATOR_REJECTION_INVALID
    not_json = validator_reject(VALIDATOR, 42, evidence=evidence)  # type: ignore[arg-type]
    assert not_json["code"] == E_VALIDATOR_REJECTION_INVALID
    assert validator_ac_pull("x", project_root=tmp_path / "nothing")["code"] == E_NOT_FOUND


@pytest.mark.anyio
async def test_a_finding_must_name_a_criterion_of_the_plan(tmp_path: Path) -> None:
    catalog = Catalog.open(tmp_path / "gategraph.db")
    outcome, _, _ = await start(tmp_path, two_criteria(tmp_path), catalog)
    forged = [{"id": str(uuid.uuid4()), "alias": "AC9"}]
    answer = validator_attest(
        VALIDATOR, attestation(outcome.plan_id, forged), evidence=catalog, **signed(catalog)
    )
    assert answer["code"] == E_VALIDATOR_AC_NOT_FOUND
    assert forged[0]["id"] in answer["message"]
    by_root = validator_ac_pull(outcome.plan_id, project_root=tmp_path / "elsewhere")
    assert by_root["code"] == E_NOT_FOUND


@pytest.mark.anyio
async def test_a_plan_node_calls_the_validator_tools_on_its_own_plan(tmp_path: Path) -> None:
    """Built-in tools of the catalog's namespace: a work node pulls its plan's roster."""
    root = repo(tmp_path)
    graph = load_graph(
        {
            "version": 1,
            "name": "pulls",
            "resources": {"repo": {"kind": "directory", "path": str(root)}},
            "validations": [
                {
                    "name": "syntax",
                    "entrypoint": "gategraph.validators:python_syntax",
                    "resource_slots": ["root"],
                }
            ],
            "nodes": [
                {"id": "roster", "tool": "validator.ac-pull"},
                {"id": "syntax", "validation": "syntax", "needs": ["roster"]},
            ],
            "acceptance": [{"id": "AC1", "text": "It parses.", "validations": ["syntax"]}],
        }
    )
    log = MemoryEventLog()
    outcome = await Supervisor(graph, event_log=log, audit=InMemoryAuditLog()).run()
    assert outcome.status is PlanStatus.APPLIED, outcome.message
    events = [e for e in await log.read(outcome.plan_id) if event_tag(e) == "work_finished"]
    pulled = events[0].artifact["roster"]
    assert pulled["ok"] and [a["text"] for a in pulled["acs"]] == ["It parses."]


@pytest.mark.anyio
async def test_partial_attestations_by_different_validators_do_not_add_up(
    tmp_path: Path,
) -> None:
    catalog, plan_id, graph, log, acs = await _two_criteria_waiting(tmp_path, 1)
    a, b = signed(catalog, "validator-a"), signed(catalog, "validator-b")
    validator_attest(VALIDATOR, attestation(plan_id, acs[:1], "validator-a"), evidence=catalog, **a)
    validator_attest(VALIDATOR, attestation(plan_id, acs[1:], "validator-b"), evidence=catalog, **b)
    still = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert still.status is PlanStatus.AWAITING_ATTESTATION
    validator_attest(VALIDATOR, attestation(plan_id, acs, "validator-b"), evidence=catalog, **b)
    done = await resume_plan(plan_id, graph, event_log=log, catalog=catalog)
    assert done.status is PlanStatus.APPLIED


@pytest.mark.anyio
async def test_a_plan_without_criteria_is_never_applied_on_outside_attestations(
    tmp_path: Path,
) -> None:
    text = (
        "version: 1\nname: ungated\nresources: {notes: {kind: memory, files: {a: b}}}\n"
        "validations:\n  - {name: advice, entrypoint: 'gategraph.runtime.testing:passing', "
        "mode: informational}\nnodes: [{id: advice, validation: advice}]\n"
        "policy: {allow_ungated: true, outside_validators: 2}\n"
    )
    catalog = Catalog.in_memory()
    outcome, _, _ = await start(tmp_path, text, catalog)
    assert outcome.status is PlanStatus.FAILED
    assert "no acceptance criteria" in outcome.message


def test_a_plan_that_waits_for_outside_validators_needs_a_store_they_reach(
    tmp_path: Path,
) -> None:
    from gategraph.runtime import ConfigError

    graph = load_graph(two_criteria(tmp_path, outside_validators=1))
    with pytest.raises(ConfigError, match=r"policy\.outside_validators: .*evidence store"):
        Supervisor(graph)


@pytest.mark.anyio
@pytest.mark.parametrize("memory", [False, True])
async def test_a_new_plan_under_a_reused_id_has_its_own_roster(
    tmp_path: Path, memory: bool
) -> None:
    evidence: Any = MemoryEvidence() if memory else Catalog.open(tmp_path / "gategraph.db")
    one = load_graph(plan(repo(tmp_path / "one"), [GOOD]))
    two = load_graph(two_criteria(tmp_path / "two"))
    first = await Supervisor(one, evidence=evidence, plan_id="nightly").run()
    assert first.status is PlanStatus.APPLIED
    second = await Supervisor(two, evidence=evidence, plan_id="nightly").run()
    assert second.status is PlanStatus.APPLIED, second.message
    pulled = validator_ac_pull("nightly", evidence=evidence)["acs"]
    assert [a["text"] for a in pulled] == ["The code parses.", "The greeting is kept."]


@pytest.mark.anyio
async def test_a_log_from_before_criteria_had_ids_replays(tmp_path: Path) -> None:
    """Its verdicts name criteria by their keys in the graph: they match all the same."""
    import msgspec

    log = MemoryEventLog()
    graph = load_graph(two_criteria(tmp_path))
    outcome = await Supervisor(graph, event_log=log, audit=InMemoryAuditLog()).run()
    old = []
    for event in await log.read(outcome.plan_id):
        verdict = getattr(event, "verdict", None)
        if isinstance(verdict, dict) and verdict.get("findings"):
            keys = ["AC1", "AC2"]
            findings = [dict(f, acId=k) for f, k in zip(verdict["findings"], keys, strict=True)]
            event = msgspec.structs.replace(event, verdict={**verdict, "findings": findings})
        old.append(event)
    report = replay_plan(old, graph)
    assert report.matches, report.mismatches


def test_rejections_name_criteria_the_plan_has(tmp_path: Path) -> None:
    evidence = MemoryEvidence()
    answer = validator_reject(
        VALIDATOR, rejection("01NOPE", [{"id": "x", "alias": "AC1"}]), evidence=evidence
    )
    assert answer["code"] == E_VALIDATOR_REJECTION_INVALID and "no plan" in answer["message"]
    own = attestation("p", [{"id": "x", "alias": "AC1"}], "validator-gategraph")
    refused = validator_attest(VALIDATOR, own, evidence=evidence)
    assert refused["code"] == E_VALIDATOR_ATTESTATION_INVALID
