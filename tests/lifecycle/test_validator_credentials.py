"""Outside validators sign their verdicts with a credential the plan's code cannot read:
a self-declared validator id alone never lets a plan apply, and by default a standing
rejection is not outweighed by another validator's attestation."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import VALIDATOR, attestation, rejection, run_gategraph
from _plans import GOOD, WaitingOnTheCli, plan, repo
from gategraph.runtime import (
    Catalog,
    ConfigError,
    MemoryEventLog,
    MemoryEvidence,
    PlanStatus,
    Supervisor,
    load_graph,
    register_validator,
    replay_plan,
    revoke_validator,
    validator_ac_pull,
    validator_attest,
    validator_reject,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._definitions._evidence import credential_digest
from gategraph.runtime._definitions._validator_tools import (
    E_VALIDATOR_AUTH_CREDENTIAL,
    attest,
    reject,
)
from gategraph.runtime._lifecycle._supervisor import resume_plan
from gategraph.runtime._running._journal import event_tag

FORGER = "validator-totally-independent"


class Waiting:
    """A plan that passed its own round and waits for outside validators, on ``store``."""

    def __init__(self, tmp_path: Path, store: Any, **policy: Any) -> None:
        self.text = plan(repo(tmp_path), [GOOD], outside_validators=1, **policy)
        self.graph = load_graph(self.text)
        self.log = MemoryEventLog()
        self.store = store
        self.root = tmp_path / "repo"
        self.plan_id = ""
        self.acs: list[dict[str, Any]] = []

    async def run(self) -> Any:
        outcome = await Supervisor(
            self.graph, evidence=self.store, event_log=self.log, audit=InMemoryAuditLog()
        ).run()
        assert outcome.status is PlanStatus.AWAITING_ATTESTATION, outcome.message
        self.plan_id = outcome.plan_id
        self.acs = validator_ac_pull(self.plan_id, evidence=self.store)["acs"]
        return outcome

    async def resume(self) -> Any:
        return await resume_plan(self.plan_id, self.graph, event_log=self.log, evidence=self.store)

    def attest(self, who: str, **signed: Any) -> dict[str, Any]:
        envelope = attestation(self.plan_id, self.acs, who)
        return validator_attest(VALIDATOR, envelope, evidence=self.store, **signed)

    def reject(self, who: str, **signed: Any) -> dict[str, Any]:
        envelope = rejection(self.plan_id, self.acs, who)
        return validator_reject(VALIDATOR, envelope, evidence=self.store, **signed)


@pytest.fixture(params=["memory", "catalog", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryEvidence()
        return
    if request.param == "postgres":
        opened = Catalog.open(request.getfixturevalue("postgres_url"))
    else:
        opened = Catalog.open(tmp_path / "gategraph.db")
    with opened:
        yield opened


@pytest.mark.anyio
async def test_a_self_declared_id_is_refused_and_the_plan_is_not_applied(
    store: Any, tmp_path: Path
) -> None:
    """The forgery: an attestation signed with a made-up id and no credential."""
    waiting = Waiting(tmp_path, store)
    await waiting.run()
    forged = waiting.attest(FORGER)
    assert forged["ok"] is False and forged["code"] == E_VALIDATOR_AUTH_CREDENTIAL
    assert forged["message"].startswith(f"{FORGER}'s attestation came without a credential")
    [refusal] = store.refusals(waiting.plan_id)
    assert refusal.validator_id == FORGER and refusal.reason == forged["message"]
    assert store.verdicts(waiting.plan_id).latest == {}
    held = await waiting.resume()
    assert held.status is PlanStatus.AWAITING_ATTESTATION
    assert f"1 verdict refused, the last: {FORGER}'s attestation" in held.message
    assert not (waiting.root / "src" / "greet.py").exists()
    # The same refusal through the tool a plan's node (or an MCP client) calls.
    as_tool = attest(VALIDATOR, attestation(waiting.plan_id, waiting.acs, FORGER))
    assert as_tool["ok"] is False


@pytest.mark.anyio
async def test_wrong_borrowed_and_revoked_credentials_are_refused(
    store: Any, tmp_path: Path
) -> None:
    waiting = Waiting(tmp_path, store)
    await waiting.run()
    alice = register_validator("validator-alice", evidence=store)
    wrong = waiting.attest("validator-alice", credential=alice + "x")
    assert wrong["code"] == E_VALIDATOR_AUTH_CREDENTIAL
    assert "not validator-alice's" in wrong["message"]
    # Alice's credential does not sign for Bob.
    borrowed = waiting.attest("validator-bob", credential=alice)
    assert borrowed["code"] == E_VALIDATOR_AUTH_CREDENTIAL
    assert "not validator-bob's" in borrowed["message"]
    refused_rejection = waiting.reject("validator-bob", credential=alice)
    assert refused_rejection["code"] == E_VALIDATOR_AUTH_CREDENTIAL
    assert "validator-bob's rejection" in refused_rejection["message"]
    assert revoke_validator("validator-alice", evidence=store) == 1
    revoked = waiting.attest("validator-alice", credential=alice)
    assert revoked["code"] == E_VALIDATOR_AUTH_CREDENTIAL
    assert len(store.refusals(waiting.plan_id)) == 4
    held = await waiting.resume()
    assert held.status is PlanStatus.AWAITING_ATTESTATION
    assert "4 verdicts refused" in held.message
    # A credential registered again is a new one; it signs, and the plan applies.
    again = register_validator("validator-alice", evidence=store)
    assert again != alice
    assert waiting.attest("validator-alice", credential=again)["ok"]
    assert (await waiting.resume()).status is PlanStatus.APPLIED


@pytest.mark.anyio
async def test_a_rejection_stands_against_another_validators_attestation(
    store: Any, tmp_path: Path
) -> None:
    waiting = Waiting(tmp_path, store)
    await waiting.run()
    alice = register_validator("validator-alice", evidence=store)
    bob = register_validator("validator-bob", evidence=store)
    assert waiting.reject("validator-alice", credential=alice)["ok"]
    assert waiting.attest("validator-bob", credential=bob)["ok"]
    held = await waiting.resume()
    assert held.status is PlanStatus.AWAITING_ATTESTATION
    assert "not applied while a rejection stands: validator-alice rejected it" in held.message
    assert not (waiting.root / "src" / "greet.py").exists()
    # Alice attests: her rejection no longer stands, and both count.
    assert waiting.attest("validator-alice", credential=alice)["ok"]
    done = await waiting.resume()
    assert done.status is PlanStatus.APPLIED
    events = await waiting.log.read(waiting.plan_id)
    [required] = [e for e in events if event_tag(e) == "attestation_required"]
    [received] = [e for e in events if event_tag(e) == "attestations_received"]
    assert required.policy == received.policy == "no-rejection"
    assert received.validators == ["validator-alice", "validator-bob"]
    assert replay_plan(events, waiting.graph).matches


@pytest.mark.anyio
async def test_under_any_attests_an_attestation_outweighs_a_rejection(
    store: Any, tmp_path: Path
) -> None:
    waiting = Waiting(tmp_path, store, attestation="any-attests")
    await waiting.run()
    alice = register_validator("validator-alice", evidence=store)
    bob = register_validator("validator-bob", evidence=store)
    assert waiting.reject("validator-alice", credential=alice)["ok"]
    held = await waiting.resume()
    assert held.status is PlanStatus.AWAITING_ATTESTATION
    assert "rejected it" not in held.message  # it holds nothing back under this policy
    # A validator that rejected after attesting has taken its attestation back.
    assert waiting.attest("validator-bob", credential=bob)["ok"]
    assert waiting.reject("validator-bob", credential=bob)["ok"]
    assert (await waiting.resume()).status is PlanStatus.AWAITING_ATTESTATION
    assert waiting.attest("validator-bob", credential=bob)["ok"]
    done = await waiting.resume()
    assert done.status is PlanStatus.APPLIED, done.message
    events = await waiting.log.read(waiting.plan_id)
    [received] = [e for e in events if event_tag(e) == "attestations_received"]
    assert received.validators == ["validator-bob"] and received.policy == "any-attests"
    report = replay_plan(events, waiting.graph)
    assert report.matches, report.mismatches
    # Replayed under the other policy, the log's decision is not the graph's.
    strict = load_graph(waiting.text.replace("attestation: any-attests", ""))
    assert not replay_plan(events, strict).matches


def test_the_policy_is_checked(tmp_path: Path) -> None:
    text = plan(repo(tmp_path), [GOOD], outside_validators=1, attestation="majority")
    with pytest.raises(ConfigError, match=r"policy\.attestation"):
        load_graph(text)


def test_a_store_keeps_only_digests(tmp_path: Path) -> None:
    """Reading the catalog's file never gives a credential that signs."""
    path = tmp_path / "gategraph.db"
    with Catalog.open(path) as catalog:
        credential = register_validator("validator-alice", evidence=catalog)
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT digest, validator_id, plan_id FROM validator_credentials")
        assert rows.fetchall() == [(credential_digest(credential), "validator-alice", None)]
    assert credential.encode() not in path.read_bytes()
    assert credential_digest(credential) != credential


@pytest.mark.parametrize(
    ("validator_id", "why"),
    [
        ("alice", "is not a validator id"),
        ("validator-Alice", "is not a validator id"),
        (7, "is not a validator id"),
        ("validator-gategraph", "is gategraph's own"),
        ("validator-gategraph-rerun", "is gategraph's own"),
    ],
)
def test_register_refuses_ids_that_are_not_a_persons_validators(
    validator_id: Any, why: str
) -> None:
    with pytest.raises(ConfigError, match=f"validator_id: .*{why}"):
        register_validator(validator_id, evidence=MemoryEvidence())


def test_a_rejection_without_a_credential_is_refused_through_the_tool(tmp_path: Path) -> None:
    answer = reject(VALIDATOR, rejection("01NOPE", [{"id": "x", "alias": "AC1"}]))
    assert answer["ok"] is False  # no catalog here: nothing is known, nothing is written


def test_register_and_revoke_from_the_command_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    nothing = run_gategraph(home, "validator", "revoke", "validator-alice", cwd=tmp_path)
    assert nothing.returncode == 2
    assert nothing.stderr == "error: validator-alice has no credential in this catalog\n"
    bad = run_gategraph(home, "validator", "register", "Alice", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "validator_id" in bad.stderr and "Traceback" not in bad.stderr
    ran = run_gategraph(home, "validator", "register", "validator-alice", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    [credential] = ran.stdout.split()
    with Catalog.open(home / "gategraph.db") as catalog:
        digests = catalog.credentials("validator-alice", "any-plan")
    assert digests == [credential_digest(credential)]
    revoked = run_gategraph(home, "validator", "revoke", "validator-alice", cwd=tmp_path)
    assert revoked.returncode == 0 and revoked.stdout == "revoked 1 credential of validator-alice\n"
    with Catalog.open(home / "gategraph.db") as catalog:
        assert catalog.credentials("validator-alice", "any-plan") == []


def test_a_forged_attestation_does_not_let_resume_apply_the_plan(tmp_path: Path) -> None:
    """As a user meets it: `gategraph run` waits; an attestation signed with a made-up id
    and no credential arrives; `gategraph resume` does not apply and says why."""
    waiting = WaitingOnTheCli(tmp_path)
    root, home, plan_id = waiting.root, waiting.home, waiting.plan_id
    with Catalog.open(home / "gategraph.db") as catalog:
        acs = validator_ac_pull(plan_id, evidence=catalog)["acs"]
        forged = validator_attest(VALIDATOR, attestation(plan_id, acs, FORGER), evidence=catalog)
        assert forged["code"] == E_VALIDATOR_AUTH_CREDENTIAL
    resumed = run_gategraph(home, "resume", plan_id, cwd=tmp_path)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    [why] = [line for line in resumed.stdout.splitlines() if "refused" in line]
    assert f"1 verdict refused, the last: {FORGER}'s attestation came without a credential" in why
    # The line docs/attestation.md quotes (up to its "...").
    page = (Path(__file__).parents[2] / "docs" / "attestation.md").read_text(encoding="utf-8")
    [quoted] = [line for line in page.splitlines() if line.startswith("waiting for 1 outside")]
    assert why.startswith(quoted.removesuffix("..."))
    assert not (root / "src" / "greet.py").exists()
    # A person registers the reviewer; signed with its credential, the plan applies.
    registered = run_gategraph(home, "validator", "register", "validator-reviewer", cwd=tmp_path)
    credential = registered.stdout.strip()
    with Catalog.open(home / "gategraph.db") as catalog:
        signed = validator_attest(
            VALIDATOR,
            attestation(plan_id, acs, "validator-reviewer"),
            credential=credential,
            evidence=catalog,
        )
        assert signed["ok"], signed
    done = run_gategraph(home, "resume", plan_id, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "src" / "greet.py").exists()


def test_a_credential_is_revoked_alone_by_its_digest(store: Any) -> None:
    """How a spawn retires the credential it issued, leaving the validator's others."""
    kept = register_validator("validator-alice", evidence=store)
    store.add_credential("validator-alice", credential_digest("spawned"), "plan-1")
    assert len(store.credentials("validator-alice", "plan-1")) == 2
    assert store.credentials("validator-alice", "plan-2") == [credential_digest(kept)]
    assert store.revoke_credentials("validator-alice", credential_digest("spawned")) == 1
    assert store.credentials("validator-alice", "plan-1") == [credential_digest(kept)]
