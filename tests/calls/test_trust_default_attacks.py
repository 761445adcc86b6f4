"""Trust by default, attacked (issue 26): with no ``isolation:`` written anywhere, a plan's
own code cannot attest the plan, and no validation can change the artifact its caller
gave or the one another validation judges.

Each attack is run as a user meets it: the command line in a process of its own, or the
library as documented. The attacking code lives in tests/trust_attack_tools.py; a plan is
given that whole module as its work tool's inline ``code:``.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import re
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
import trust_attack_tools
from _helpers import VALIDATOR, assert_gone, attestation, rejection, run_gategraph, running
from _plans import WaitingOnTheCli, repo
from gategraph.runtime import (
    Catalog,
    PlanStatus,
    SQLiteEventLog,
    open_gate,
    resume_plan,
    run_plan,
    validate,
    validate_sync,
    validator_ac_pull,
    validator_attest,
    validator_reject,
)
from gategraph.runtime._base._kernel import support
from gategraph.runtime._definitions._graph import load_graph
from gategraph.runtime._running._engine import execute_graph
from test_trust_default import LINGERING
from trust_attack_tools import FORGER, GREET

needs_sandbox = pytest.mark.skipif(
    support().missing is not None, reason=f"no kernel sandbox here: {support().missing}"
)
pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).parents[1]
TOOLS = Path(trust_attack_tools.__file__)
WINDOW = 3.0
"""Seconds the forger keeps trying once it is started."""


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sandboxed workers import ``trust_attack_tools`` by entrypoint."""
    monkeypatch.syspath_prepend(str(TESTS))


def _files(root: Path) -> dict[str, bytes]:
    """Every file and folder under ``root`` (a folder as ``b"/"``), by relative path."""
    return {
        p.relative_to(root).as_posix(): b"/" if p.is_dir() else p.read_bytes()
        for p in sorted(root.rglob("*"))
    }


# -- 1. outside validation cannot be forged from inside the plan ---------------------------------


class Attack:
    """A plan on ``tmp_path/repo`` that needs one outside validator. Its one work tool (the
    whole of trust_attack_tools as inline ``code:``, nothing declared) makes the change
    honestly (``src/greet.py``) and tries to attest the plan itself as :data:`FORGER`:
    from a process it leaves behind, a thread it leaves running, or its own call."""

    def __init__(self, tmp_path: Path, mode: str, window: float = WINDOW) -> None:
        self.root = repo(tmp_path)
        self.home = tmp_path / "home"
        self.log = tmp_path / "forger.log"  # written only by a forger that ran unconfined
        self.marker = f"gg-forger-{uuid.uuid4().hex}"
        # The forger acts until `until`, and for at least `window` seconds from the tool's
        # own start: on a loaded machine the run may take longer than the window to start.
        self.window = window
        self.until = time.time() + window
        arguments = {
            "home": str(self.home),
            "log": str(self.log),
            "until": self.until,
            "window": window,
            "mode": mode,
            "script": str(TOOLS),
            "marker": self.marker,
        }
        self.text = (
            "version: 1\nname: forged\n"
            f'resources: {{repo: {{kind: directory, path: "{self.root}"}}}}\n'
            f"tools:\n  - {{name: forge, code: {json.dumps(TOOLS.read_text())},"
            " resource_slots: [root]}\n"
            "validations:\n  - {name: syntax, entrypoint: gategraph.validators:python_syntax,"
            " resource_slots: [root]}\n"
            "nodes:\n"
            f"  - {{id: work, tool: forge, resources: [repo], arguments: {json.dumps(arguments)}}}\n"
            "  - {id: syntax, validation: syntax, needs: [work]}\n"
            "acceptance:\n  - {id: AC1, text: The code parses., validations: [syntax]}\n"
            "policy: {outside_validators: 1, retry_limit: 0, strategy_revisions: 0}\n"
        )
        self.plan = tmp_path / "plan.yaml"
        self.plan.write_text(self.text)
        self.before = _files(self.root)

    def wait_out(self) -> None:
        """Give the forger its whole window (it would have acted by then)."""
        assert_gone(self.marker)
        # Called once the run has returned, so the tool started before now.
        time.sleep(max(self.until - time.time(), self.window) + 0.3)

    def assert_nothing_forged(self, plan_id: str) -> None:
        """The folder as it was; no verdict, credential or even a refused verdict in the
        catalog (the forger never reached it); the forger wrote nothing outside."""
        assert _files(self.root) == self.before
        assert not (self.root / "src" / "greet.py").exists()
        assert not self.log.exists(), self.log.read_text()
        with Catalog.open(self.home / "gategraph.db") as catalog:
            assert catalog.verdicts(plan_id).latest == {}
            assert catalog.credentials(FORGER, plan_id) == []
            assert catalog.refusals(plan_id) == []


LEFT = {"leaves": "left 1 process running", "thread": "left 1 thread running"}


@needs_sandbox
@pytest.mark.parametrize("mode", ["leaves", "thread", "calls"])
def test_a_work_tool_cannot_attest_its_own_plan_through_the_cli(tmp_path: Path, mode: str) -> None:
    """`gategraph run`, then `gategraph resume` once the forger had its time: the plan is
    not applied and the catalog holds nothing of the forger's. A process or thread left
    behind fails the tool (and dies with its sandbox); from its own call the tool cannot
    reach the catalog, and a person's registered validator is still what applies it."""
    attack = Attack(tmp_path, mode)
    ran = run_gategraph(attack.home, "run", str(attack.plan), cwd=tmp_path)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    plan_id = re.search(r"plan (\S+) \(forged\): started", ran.stdout)[1]  # type: ignore[index]
    waits = "awaiting_decision" if mode in LEFT else "awaiting_attestation"
    assert f"plan {plan_id}: {waits}" in ran.stdout
    if mode in LEFT:
        assert LEFT[mode] in ran.stdout
    attack.wait_out()
    resumed = run_gategraph(attack.home, "resume", plan_id, "--json", cwd=tmp_path)
    assert resumed.returncode == 3, resumed.stdout + resumed.stderr
    assert json.loads(resumed.stdout)["status"] == waits
    attack.assert_nothing_forged(plan_id)
    if mode in LEFT:
        return
    # The plan was there to be attested: a person's registered validator does it.
    registered = run_gategraph(
        attack.home, "validator", "register", "validator-reviewer", cwd=tmp_path
    )
    with Catalog.open(attack.home / "gategraph.db") as catalog:
        acs = validator_ac_pull(plan_id, evidence=catalog)["acs"]
        signed = validator_attest(
            VALIDATOR,
            attestation(plan_id, acs, "validator-reviewer"),
            credential=registered.stdout.strip(),
            evidence=catalog,
        )
        assert signed["ok"], signed
    done = run_gategraph(attack.home, "resume", plan_id, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (attack.root / "src" / "greet.py").read_text() == GREET


def test_the_forger_is_real_where_the_tool_is_declared_trusted(tmp_path: Path) -> None:
    """The control that keeps the tests above honest: the same work node declared
    ``isolation: thread`` (a person's choice to trust it, run in gategraph's own process)
    leaves a forger that runs unconfined and reaches the catalog. What it achieves there is
    not this test's business."""
    attack = Attack(tmp_path, "leaves", window=15.0)  # it stops once it got through
    attack.plan.write_text(
        attack.text.replace(
            "resources: [repo], arguments", "isolation: thread, resources: [repo], arguments"
        )
    )
    ran = run_gategraph(attack.home, "run", str(attack.plan), cwd=tmp_path)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    plan_id = re.search(r"plan (\S+) \(forged\): started", ran.stdout)[1]  # type: ignore[index]
    assert f"plan {plan_id}: awaiting_attestation" in ran.stdout
    deadline = max(attack.until, time.time() + attack.window) + 1
    while running(attack.marker) and time.time() < deadline:
        time.sleep(0.05)
    for pid in running(attack.marker):  # one that never got through stays: nothing is left
        os.kill(pid, signal.SIGKILL)
    notes = json.loads(attack.log.read_text())
    assert notes[0][0] == "started"
    unsigned = next(n for n in notes if n[0] == "unsigned")
    assert unsigned[1] == plan_id
    assert unsigned[2]["code"] == "E_VALIDATOR_AUTH_CREDENTIAL"


@needs_sandbox
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["leaves", "calls"])
async def test_a_work_tool_cannot_attest_its_own_plan_through_the_library(
    tmp_path: Path, mode: str
) -> None:
    """The same through ``run_plan`` and ``resume_plan`` on a durable log and catalog."""
    attack = Attack(tmp_path, mode)
    attack.home.mkdir()
    graph = load_graph(attack.text)
    with Catalog.open(attack.home / "gategraph.db") as catalog:
        async with SQLiteEventLog(attack.home / "events.db") as log:
            outcome = await run_plan(graph, catalog=catalog, event_log=log)
            waits = (
                PlanStatus.AWAITING_DECISION
                if mode == "leaves"
                else PlanStatus.AWAITING_ATTESTATION
            )
            assert outcome.status is waits, outcome.message
            await anyio.to_thread.run_sync(attack.wait_out)
            resumed = await resume_plan(outcome.plan_id, graph, event_log=log, catalog=catalog)
            assert resumed.status is waits, resumed.message
    attack.assert_nothing_forged(outcome.plan_id)


def test_a_rejection_stands_against_another_validators_attestation_through_the_cli(
    tmp_path: Path,
) -> None:
    """Mirrors test_validator_credentials' library case as a user meets it: on the default
    policy, Alice's rejection is not outweighed by Bob's attestation; `gategraph resume`
    says so and applies nothing, until Alice attests."""
    waiting = WaitingOnTheCli(tmp_path)
    root, home, plan_id = waiting.root, waiting.home, waiting.plan_id
    credential = {
        who: run_gategraph(home, "validator", "register", who, cwd=tmp_path).stdout.strip()
        for who in ("validator-alice", "validator-bob")
    }
    before = _files(root)
    with Catalog.open(home / "gategraph.db") as catalog:
        acs = validator_ac_pull(plan_id, evidence=catalog)["acs"]
        no = rejection(plan_id, acs, "validator-alice")
        yes = attestation(plan_id, acs, "validator-bob")
        cred = credential["validator-alice"]
        assert validator_reject(VALIDATOR, no, credential=cred, evidence=catalog)["ok"]
        cred = credential["validator-bob"]
        assert validator_attest(VALIDATOR, yes, credential=cred, evidence=catalog)["ok"]
    held = run_gategraph(home, "resume", plan_id, cwd=tmp_path)
    assert held.returncode == 3, held.stdout + held.stderr
    assert "not applied while a rejection stands: validator-alice rejected it" in held.stdout
    assert _files(root) == before
    assert not (root / "src" / "greet.py").exists()
    # Alice attests: her rejection no longer stands, and the plan applies.
    with Catalog.open(home / "gategraph.db") as catalog:
        alice = attestation(plan_id, acs, "validator-alice")
        cred = credential["validator-alice"]
        assert validator_attest(VALIDATOR, alice, credential=cred, evidence=catalog)["ok"]
    done = run_gategraph(home, "resume", plan_id, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == "applied"
    assert (root / "src" / "greet.py").exists()


# -- 2. the caller's object is never touched --------------------------------------------------

ATTACKS = ["tidy_assign", "tidy_append", "tidy_del", "tidy_underneath", "tidy_later"]
GIVEN = {"commands": ["rm -rf /"]}


def _inline(name: str) -> dict[str, Any]:
    """The attack as a graph's inline validation: its source, as ``run``."""
    source = inspect.getsource(getattr(trust_attack_tools, name))
    code = "from __future__ import annotations\nimport json, threading, time\n"
    return {"name": "tidy", "code": code + source.replace(f"def {name}(", "def run(")}


def _entrypoint(name: str) -> dict[str, Any]:
    return {"name": "tidy", "entrypoint": f"trust_attack_tools:{name}"}


JUDGE = {"name": "judge", "entrypoint": "trust_attack_tools:judge"}


def _assert_judged_as_given(records: Any) -> None:
    """The attack failed, naming the artifact; the others judged what the caller gave."""
    results = {r.node: r for r in records}
    tidy = results["tidy"]
    assert tidy.isolation == "sandbox" and tidy.enforced_by == "kernel"
    assert not tidy.result.passed
    assert tidy.result.data["error"] == "read_only_violation", tidy.result
    assert "artifact" in tidy.result.message
    assert not results["unsafe_command"].result.passed
    assert "rm -rf /" in results["unsafe_command"].result.message
    assert results["judge"].result.passed, results["judge"].result


@needs_sandbox
@pytest.mark.parametrize("form", [_inline, _entrypoint], ids=["code", "entrypoint"])
@pytest.mark.parametrize("attack", ATTACKS)
def test_validate_sync_never_touches_the_callers_artifact(attack: str, form: Any) -> None:
    artifact = copy.deepcopy(GIVEN)
    verdict = validate_sync(artifact=artifact, validations=[form(attack), "unsafe_command", JUDGE])
    assert not verdict.passed
    _assert_judged_as_given(verdict.records)
    time.sleep(0.4)  # what `tidy_later` left behind would have acted by now
    assert artifact == GIVEN


@needs_sandbox
@pytest.mark.anyio
@pytest.mark.parametrize("attack", ["tidy_assign", "tidy_underneath"])
async def test_validate_never_touches_the_callers_artifact(attack: str) -> None:
    artifact = copy.deepcopy(GIVEN)
    verdict = await validate(
        artifact=artifact, validations=[_entrypoint(attack), "unsafe_command", JUDGE]
    )
    assert not verdict.passed
    _assert_judged_as_given(verdict.records)
    assert artifact == GIVEN


@needs_sandbox
def test_the_callers_object_is_never_touched_after_the_verdict_by_default() -> None:
    """test_trust_default's case with no isolation given: the thread the validation leaves
    cannot rewrite the caller's dict; its attempt fails the validation, naming it."""
    artifact: dict[str, Any] = {"verdict": "as given"}
    verdict = validate_sync(
        artifact=artifact, validations=[{"validation": {"name": "v", "code": LINGERING}}]
    )
    time.sleep(0.5)
    assert artifact == {"verdict": "as given"}
    [record] = verdict.records
    assert (record.isolation, record.enforced_by) == ("sandbox", "kernel")
    assert not verdict.passed
    assert record.result.data["error"] == "read_only_violation", record.result
    assert "artifact['verdict']" in record.result.message


POISON = """\
def run(artifact):
    # Patches gategraph's own code in its worker, so that what any later call there is
    # given is harmless.
    import gategraph.runtime._calls._call as invoke
    original = invoke._bind
    def _bind(func, slots, arguments, resources, artifact, inputs, context):
        if isinstance(artifact, dict) and "commands" in artifact:
            artifact = {"commands": ["echo fine"]}
        return original(func, slots, arguments, resources, artifact, inputs, context)
    invoke._bind = _bind
    return {"passed": True, "message": "nothing to see"}
"""


@needs_sandbox
def test_a_validation_that_patches_its_worker_changes_nothing_the_next_one_judges() -> None:
    """One at a time, the poisoner first: the judge after it still sees the artifact as
    the caller gave it."""
    artifact = copy.deepcopy(GIVEN)
    verdict = validate_sync(
        artifact=artifact,
        validations=[{"name": "poison", "code": POISON}, JUDGE],
        max_concurrency=1,
    )
    results = {r.node: r.result for r in verdict.records}
    assert results["poison"].passed, results["poison"]  # it did patch its worker's code
    assert results["judge"].passed, results["judge"]
    assert json.loads(results["judge"].message) == GIVEN
    assert artifact == GIVEN


WRITES_ITS_CHANGE = """\
def run(root):
    import os, pathlib
    if isinstance(root, (str, os.PathLike)):
        pathlib.Path(root, "a.py").write_text("evil = True\\n")
    else:
        root["a.py"] = "evil = True\\n"
    return {"passed": True}
"""


@needs_sandbox
def test_validate_never_touches_the_callers_change_mapping() -> None:
    change = {"a.py": "x = 1\n"}
    verdict = validate_sync(
        change,
        [{"name": "w", "code": WRITES_ITS_CHANGE, "resource_slots": ["root"]}, "python_syntax"],
    )
    assert change == {"a.py": "x = 1\n"}
    results = {r.node: r.result for r in verdict.records}
    assert not results["w"].passed
    assert results["w"].data["error"] == "read_only_violation"
    assert results["python_syntax"].passed


@needs_sandbox
@pytest.mark.anyio
@pytest.mark.parametrize("attack", ["tidy_assign", "tidy_underneath", "tidy_later"])
async def test_a_gate_never_touches_the_callers_artifact(tmp_path: Path, attack: str) -> None:
    """``open_gate``: the submitted dict is the caller's own after the verdict, the
    tidying fails, the command check sees ``rm -rf /``, and nothing is applied."""
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "a.py").write_text("x = 1\n")
    artifact = copy.deepcopy(GIVEN)
    async with open_gate({"repo": folder}, [_entrypoint(attack), "unsafe_command", JUDGE]) as gate:
        (gate.sandbox() / "b.py").write_text("y = 2\n")
        verdict = await gate.submit(artifact)
        assert not verdict.passed and not gate.applied
        _assert_judged_as_given(verdict.records)
    await anyio.sleep(0.4)
    assert artifact == GIVEN
    assert _files(folder) == {"a.py": b"x = 1\n"}


@needs_sandbox
@pytest.mark.anyio
async def test_the_langgraph_gate_never_touches_the_state_s_artifact() -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    from gategraph.runtime.integrations.langgraph import GateNode

    node = GateNode([_entrypoint("tidy_assign"), "unsafe_command", JUDGE])
    state: dict[str, Any] = {"artifact": copy.deepcopy(GIVEN)}
    update = await node.acall(state, {})
    assert state == {"artifact": GIVEN}
    verdict = update["verdict"]
    assert verdict["passed"] is False
    failed = {f["node"]: f for f in verdict["failures"]}
    assert failed["tidy"]["error"] == "read_only_violation"
    assert "artifact" in failed["tidy"]["message"]
    assert "unsafe_command" in failed and "judge" not in failed


@needs_sandbox
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_pydantic_ai_gate_never_touches_the_output() -> None:
    """The output itself as the artifact (no JSON copy on the adapter's side)."""
    pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")
    from gategraph.runtime.integrations.pydantic_ai import GategraphOutputValidator

    gate = GategraphOutputValidator(
        [_entrypoint("tidy_assign"), "unsafe_command", JUDGE], artifact=lambda output: output
    )
    output = copy.deepcopy(GIVEN)
    verdict = await gate.check(output)
    assert output == GIVEN
    assert not verdict.passed
    _assert_judged_as_given(verdict.records)


# -- what a sandboxed call is told about itself --------------------------------------------------

WHO = """\
def run(context):
    return [context.plan_id, context.node, context.attempt]
"""


@needs_sandbox
@pytest.mark.anyio
async def test_a_sandboxed_call_is_told_its_plan_node_and_attempt() -> None:
    """What ``context`` tells a call is the same in the sandbox as under a declared
    isolation (where it is right)."""
    code = json.dumps(WHO)
    seen = {}
    for declared in ("", ", isolation: thread", ", isolation: process"):
        graph = load_graph(
            f"version: 1\nname: who\ntools:\n  - {{name: who, code: {code}}}\n"
            f"nodes:\n  - {{id: w, tool: who{declared}}}\n"
        )
        run = await execute_graph(graph, plan_id="01PLANOFITSOWN", attempt=2)
        seen[declared] = run.nodes["w"].output
    assert seen[", isolation: thread"] == ["01PLANOFITSOWN", "w", 2]
    assert seen[""] == seen[", isolation: process"] == seen[", isolation: thread"]
