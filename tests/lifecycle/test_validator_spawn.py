"""spawn.validator: a lead starts a new, independent validator of a waiting plan — never
the plan's worker, never one that validated before — on a copy of its candidate."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, ClassVar

import pytest
from _plans import GOOD, plan, repo
from gategraph.runtime import (
    Catalog,
    ConfigError,
    ContentStore,
    MemoryEventLog,
    PlanStatus,
    Supervisor,
    ValidatorRequest,
    load_graph,
    validator_ac_pull,
    validator_spawn,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._definitions._validator_tools import E_INVALID_INPUT, E_NOT_FOUND
from gategraph.runtime._lifecycle._validator_spawn import (
    E_VALIDATOR_FAILED,
    E_VALIDATOR_NOT_INDEPENDENT,
    E_VALIDATOR_SPAWN_AUTH_ROLE,
    E_VALIDATOR_SPAWN_AUTH_TIER,
)

LEAD = {"role": "lead", "tier": 1}


class Waiting:
    """A plan that passed its own round and waits for one outside validator."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        self.text = plan(repo(tmp_path), [GOOD], outside_validators=1)
        self.graph = load_graph(self.text)
        self.log = MemoryEventLog()
        self.catalog = Catalog.open(tmp_path / "gategraph.db")
        self.store = ContentStore(tmp_path / "store")
        self.home = tmp_path / "home"
        self.options = options
        self.outcome: Any = None

    def supervisor(self, **more: Any) -> Supervisor:
        return Supervisor(
            self.graph,
            catalog=self.catalog,
            event_log=self.log,
            audit=InMemoryAuditLog(),
            store=self.store,
            home=self.home,
            **self.options,
            **more,
        )

    async def run(self) -> Any:
        self.outcome = await self.supervisor().run()
        assert self.outcome.status is PlanStatus.AWAITING_ATTESTATION
        return self.outcome

    async def spawn(self, caller: Any = LEAD, **options: Any) -> dict[str, Any]:
        plan_id = options.pop("plan_id", self.outcome.plan_id)
        return await validator_spawn(
            caller,
            plan_id,
            catalog=self.catalog,
            events=await self.log.read(plan_id),
            graph=self.graph,
            store=self.store,
            **options,
        )

    async def resume(self) -> Any:
        return await self.supervisor(plan_id=self.outcome.plan_id).resume()


@pytest.mark.anyio
async def test_the_default_validator_checks_a_copy_and_its_attestation_lets_the_plan_apply(
    tmp_path: Path,
) -> None:
    waiting = Waiting(tmp_path)
    await waiting.run()
    answer = await waiting.spawn(spawn_scope="Second look")
    assert answer["ok"], answer
    result = answer["result"]
    assert result["validatorId"] == "validator-gategraph-rerun"  # one validator, however spawned
    assert result["verdict"]["verdict"] == "attest"
    assert result["submitted"]["bindingsWritten"] == 1
    acs = validator_ac_pull(waiting.outcome.plan_id, evidence=waiting.catalog)["acs"]
    assert [f["acId"] for f in result["verdict"]["findings"]] == [a["id"] for a in acs]
    assert (await waiting.resume()).status is PlanStatus.APPLIED


class Rejecting:
    """A validator class (the graph's lifecycle.validator) that rejects every criterion."""

    seen: ClassVar[list[ValidatorRequest]] = []

    async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
        Rejecting.seen.append(request)
        now = dt.datetime.now(dt.UTC).isoformat()
        # The candidate is a copy: what the validator does to it stays there.
        (request.resources["repo"] / "src" / "greet.py").write_text("scribbled\n")
        return {
            "verdict": "reject",
            "taskId": request.plan_id,
            "validatorId": request.validator_id,
            "findings": [
                {"acId": c.id, "status": "fail", "reasoning": "no", "checkedAt": now}
                for c in request.criteria
            ],
            "summary": "not convinced",
            "rejectedAt": now,
            "schemaVersion": "1",
        }


@pytest.mark.anyio
async def test_a_rejection_stands_and_the_plan_keeps_waiting(tmp_path: Path) -> None:
    """The spawn signs for its validator with a credential issued for that one verdict:
    never the validator's to keep, retired once used. Its rejection stands: another
    validator's attestation does not outweigh it."""
    waiting = Waiting(tmp_path)
    await waiting.run()
    plan_id = waiting.outcome.plan_id
    answer = await waiting.spawn(validator=Rejecting)
    assert answer["ok"] and answer["result"]["submitted"]["failingFindingCount"] == 1
    [request] = Rejecting.seen[-1:]
    assert request.artifact == {"files": ["src/greet.py"]} and len(request.criteria) == 1
    assert not any("credential" in name for name in request.__struct_fields__)
    sandbox = waiting.home / "sandboxes" / plan_id / "r0" / "repo"
    assert (sandbox / "src" / "greet.py").read_text() != "scribbled\n"
    rejecter = answer["result"]["validatorId"]
    assert waiting.catalog.verdicts(plan_id).latest == {rejecter: "reject"}
    assert waiting.catalog.credentials(rejecter, plan_id) == []  # retired once used
    assert (await waiting.resume()).status is PlanStatus.AWAITING_ATTESTATION
    attested = await waiting.spawn()
    assert attested["ok"] and attested["result"]["verdict"]["verdict"] == "attest"
    held = await waiting.resume()
    assert held.status is PlanStatus.AWAITING_ATTESTATION
    assert f"{rejecter} rejected it" in held.message


@pytest.mark.anyio
async def test_the_worker_never_validates_its_own_change(tmp_path: Path) -> None:
    from gategraph.runtime.testing import ScriptedExecutor

    class Also(ScriptedExecutor):
        async def validate(self, request: ValidatorRequest) -> Any:
            raise AssertionError("never called")

    disguised = Also(steps=[{"files": {"src/greet.py": "x = 2\n"}}])
    waiting = Waiting(tmp_path, execution_actor=disguised)
    await waiting.run()
    refused = await waiting.spawn(validator=lambda: disguised)
    assert refused["code"] == E_VALIDATOR_NOT_INDEPENDENT
    assert "execution actor" in refused["message"]


@pytest.mark.anyio
async def test_every_pass_needs_a_new_validator(tmp_path: Path) -> None:
    waiting = Waiting(tmp_path)
    await waiting.run()
    once = Rejecting()
    assert (await waiting.spawn(validator=lambda: once))["ok"]
    again = await waiting.spawn(validator=lambda: once)
    assert again["code"] == E_VALIDATOR_NOT_INDEPENDENT and "validated before" in again["message"]


@pytest.mark.anyio
async def test_a_validator_that_raises_gives_no_verdict(tmp_path: Path) -> None:
    class Broken:
        async def validate(self, request: ValidatorRequest) -> Any:
            raise RuntimeError("lost its way")

    waiting = Waiting(tmp_path)
    await waiting.run()
    answer = await waiting.spawn(validator=Broken)
    assert answer == {
        "ok": False,
        "code": E_VALIDATOR_FAILED,
        "message": "the validator raised RuntimeError: lost its way",
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("caller", "code"),
    [
        ({"role": "worker", "tier": 2}, E_VALIDATOR_SPAWN_AUTH_ROLE),
        ({"role": "validator", "tier": 2}, E_VALIDATOR_SPAWN_AUTH_ROLE),
        ("lead", E_VALIDATOR_SPAWN_AUTH_ROLE),
        ({"role": "lead", "tier": 0}, E_VALIDATOR_SPAWN_AUTH_TIER),
        ({"role": "orchestrator", "tier": 3}, E_INVALID_INPUT),
        ({"role": "lead", "tier": True}, E_INVALID_INPUT),
        ({"role": "lead"}, E_INVALID_INPUT),
    ],
)
async def test_who_may_spawn(tmp_path: Path, caller: Any, code: str) -> None:
    waiting = Waiting(tmp_path)
    await waiting.run()
    assert (await waiting.spawn(caller))["code"] == code


@pytest.mark.anyio
async def test_bad_input_and_unknown_plans(tmp_path: Path) -> None:
    waiting = Waiting(tmp_path)
    await waiting.run()
    assert (await waiting.spawn(spawn_scope=3))["code"] == E_INVALID_INPUT
    assert (await waiting.spawn(no_worktree="yes"))["code"] == E_INVALID_INPUT
    assert (await waiting.spawn(plan_id=""))["code"] == E_INVALID_INPUT
    unknown = await validator_spawn(LEAD, "01NOPE", catalog=waiting.catalog, events=[])
    assert unknown["code"] == E_NOT_FOUND
    nowhere = await validator_spawn(LEAD, "01NOPE", catalog=waiting.catalog, project_root=tmp_path)
    assert nowhere["code"] == E_NOT_FOUND and "no event log" in nowhere["message"]


@pytest.mark.anyio
async def test_no_candidate_before_a_round_passed(tmp_path: Path) -> None:
    from _plans import BAD

    text = plan(repo(tmp_path), [BAD], retry_limit=0, strategy_revisions=0)
    graph, log, catalog = load_graph(text), MemoryEventLog(), Catalog.in_memory()
    outcome = await Supervisor(
        graph, catalog=catalog, event_log=log, audit=InMemoryAuditLog()
    ).run()
    assert outcome.status is PlanStatus.AWAITING_DECISION
    answer = await validator_spawn(
        LEAD, outcome.plan_id, catalog=catalog, events=await log.read(outcome.plan_id), graph=graph
    )
    assert answer["code"] == E_INVALID_INPUT and "no candidate yet" in answer["message"]


def test_a_graph_names_a_validator_class_not_an_object(tmp_path: Path) -> None:
    text = plan(repo(tmp_path), [GOOD]).replace(
        "lifecycle:\n", "lifecycle:\n  validator: {uses: 'gategraph.runtime.testing:passing'}\n"
    )
    with pytest.raises(ConfigError, match=r"lifecycle\.validator\.uses: .*is not a class"):
        load_graph(text)
    fine = plan(repo(tmp_path / "b"), [GOOD]).replace(
        "lifecycle:\n", f"lifecycle:\n  validator: {{uses: '{__name__}:Rejecting'}}\n"
    )
    assert load_graph(fine).lifecycle.validator is not None


class Signing:
    """A validator that attests, signing as it is told to (or not)."""

    def __init__(self, task: str | None = None, who: str | None = None) -> None:
        self.task, self.who = task, who

    async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
        now = dt.datetime.now(dt.UTC).isoformat()
        return {
            "verdict": "attest",
            "taskId": self.task or request.plan_id,
            "validatorId": self.who or request.validator_id,
            "findings": [
                {"acId": c.id, "status": "pass", "reasoning": "read it", "checkedAt": now}
                for c in request.criteria
            ],
            "attestedAt": now,
            "schemaVersion": "1",
        }

    async def review(self, request: ValidatorRequest) -> dict[str, Any]:
        return await self.validate(request)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("task", "who", "said"),
    [("01OTHERPLAN", None, "must be about plan"), (None, "validator-someone-else", "signed")],
)
async def test_the_envelope_is_about_the_plan_and_signed_as_asked(
    tmp_path: Path, task: str | None, who: str | None, said: str
) -> None:
    waiting = Waiting(tmp_path)
    await waiting.run()
    answer = await waiting.spawn(validator=lambda: Signing(task, who))
    assert answer["code"] == E_VALIDATOR_FAILED and said in answer["message"]
    assert (await waiting.resume()).status is PlanStatus.AWAITING_ATTESTATION


@pytest.mark.anyio
async def test_spawning_the_default_validator_again_is_still_one_validator(tmp_path: Path) -> None:
    waiting = Waiting(tmp_path)
    waiting.graph = load_graph(plan(tmp_path / "repo", [GOOD], outside_validators=2))
    await waiting.run()
    for scope in ("one", "two", None):
        assert (await waiting.spawn(spawn_scope=scope))["ok"]
    assert (await waiting.resume()).status is PlanStatus.AWAITING_ATTESTATION
    answer = await waiting.spawn(validator=Signing)  # a validator of another kind
    assert answer["ok"] and answer["result"]["validatorId"].startswith("validator-signing-")
    assert (await waiting.resume()).status is PlanStatus.APPLIED


@pytest.mark.anyio
async def test_a_bound_method_or_a_partial_does_not_make_an_old_validator_new(
    tmp_path: Path,
) -> None:
    import functools

    waiting = Waiting(tmp_path)
    await waiting.run()
    once = Signing()
    assert (await waiting.spawn(validator=once.review))["ok"]
    again = await waiting.spawn(validator=once.review)
    assert again["code"] == E_VALIDATOR_NOT_INDEPENDENT
    wrapped = await waiting.spawn(validator=functools.partial(Signing.review, once))
    assert wrapped["code"] == E_VALIDATOR_NOT_INDEPENDENT


@pytest.mark.anyio
async def test_a_partial_of_the_worker_is_the_worker(tmp_path: Path) -> None:
    import functools

    from gategraph.runtime.testing import ScriptedExecutor

    class Also(ScriptedExecutor):
        async def validate(self, request: ValidatorRequest) -> Any:
            raise AssertionError("never called")

    worker = Also(steps=[{"files": {"src/greet.py": "x = 2\n"}}])
    waiting = Waiting(tmp_path, execution_actor=worker)
    await waiting.run()
    refused = await waiting.spawn(validator=functools.partial(Also.validate, worker))
    assert refused["code"] == E_VALIDATOR_NOT_INDEPENDENT


@pytest.mark.anyio
async def test_a_validator_that_cannot_be_hashed_is_still_known_again(tmp_path: Path) -> None:
    import dataclasses

    @dataclasses.dataclass
    class Plain:
        payload: list[int] = dataclasses.field(default_factory=list)

        async def validate(self, request: ValidatorRequest) -> Any:
            return await Signing().validate(request)

    waiting = Waiting(tmp_path)
    await waiting.run()
    one = Plain()
    assert (await waiting.spawn(validator=one))["ok"]
    assert (await waiting.spawn(validator=one))["code"] == E_VALIDATOR_NOT_INDEPENDENT


@pytest.mark.anyio
async def test_a_validator_on_the_sandboxes_themselves_must_not_write(tmp_path: Path) -> None:
    class Scribbler(Signing):
        async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
            (request.resources["repo"] / "scribble.txt").write_text("mine\n")
            return await super().validate(request)

    waiting = Waiting(tmp_path)
    await waiting.run()
    sandbox = waiting.home / "sandboxes" / waiting.outcome.plan_id / "r0" / "repo"
    reader = await waiting.spawn(validator=Signing, no_worktree=True, home=waiting.home)
    assert reader["ok"], reader
    writer = await waiting.spawn(validator=Scribbler, no_worktree=True, home=waiting.home)
    assert (
        writer["code"] == E_VALIDATOR_FAILED
        and "wrote to the plan's sandboxes" in (writer["message"])
    )
    assert (sandbox / "scribble.txt").exists()  # and the plan will not apply it:
    assert (await waiting.resume()).status is PlanStatus.FAILED


@pytest.mark.anyio
async def test_a_validator_past_its_time_limit_gives_no_verdict(tmp_path: Path) -> None:
    import anyio

    class Slow(Signing):
        async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
            await anyio.sleep(5)
            raise AssertionError("never reached")

    class Unbuildable:
        def __init__(self) -> None:
            raise RuntimeError("no model to load")

        async def validate(self, request: ValidatorRequest) -> Any:
            raise AssertionError("never called")

    waiting = Waiting(tmp_path)
    await waiting.run()
    slow = await waiting.spawn(validator=Slow, time_limit=0.05)
    assert slow["code"] == E_VALIDATOR_FAILED and "more than 0.05 s" in slow["message"]
    built = await waiting.spawn(validator=Unbuildable)
    assert built["code"] == E_VALIDATOR_FAILED and "no model to load" in built["message"]
    assert (await waiting.spawn(time_limit=0))["code"] == E_INVALID_INPUT


@pytest.mark.anyio
async def test_the_default_validator_judges_the_change_the_round_judged(tmp_path: Path) -> None:
    """A file that was broken before the plan is not the plan's doing: the plan's round
    judges its change, and so does the default validator, which attests; the plan applies."""
    root = repo(tmp_path)
    (root / "src" / "legacy.py").write_text("def old(:\n")  # broken before the plan
    graph = load_graph(plan(root, [GOOD], outside_validators=1))
    log, store = MemoryEventLog(), ContentStore(tmp_path / "store")
    with Catalog.open(tmp_path / "gategraph.db") as catalog:

        def supervisor(**more: Any) -> Supervisor:
            return Supervisor(
                graph,
                catalog=catalog,
                event_log=log,
                audit=InMemoryAuditLog(),
                store=store,
                home=tmp_path / "home",
                **more,
            )

        waiting = await supervisor().run()
        assert waiting.status == "awaiting_attestation"
        answer = await validator_spawn(
            {"role": "lead", "tier": 1},
            waiting.plan_id,
            catalog=catalog,
            events=await log.read(waiting.plan_id),
            graph=graph,
            store=store,
        )
        verdict = answer["result"]["verdict"]
        assert verdict["verdict"] == "attest", verdict
        assert (await supervisor(plan_id=waiting.plan_id).resume()).status == "applied"
