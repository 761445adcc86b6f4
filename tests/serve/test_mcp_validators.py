"""An outside validator reviews a waiting plan over MCP: it finds the plan, pulls its
acceptance criteria, rejects (the plan stays unapplied) or attests (the plan applies when
resumed) — real processes: `gategraph run`, `gategraph mcp serve`, `gategraph resume`."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from _helpers import cli_env, run_gategraph
from _mcp_session import call, session_with
from _plans import GOOD, WaitingOnTheCli, plan, repo
from gategraph.runtime import (
    Catalog,
    MemoryEventLog,
    PlanStatus,
    Supervisor,
    load_graph,
    register_validator,
)
from gategraph.runtime._data._maxn import InMemoryAuditLog
from gategraph.runtime._serve._mcp_serve import create_mcp_server
from mcp import ClientSession, StdioServerParameters, stdio_client

pytestmark = pytest.mark.timeout(180)

VALIDATOR = {"role": "validator"}


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def envelope(plan_id: str, acs: list[dict[str, Any]], *, failing: bool) -> dict[str, Any]:
    findings = [
        {
            "acId": ac["id"],
            "status": "fail" if failing and ac["ordinal"] == 1 else "pass",
            "reasoning": f"read the candidate for {ac['alias']}",
            "evidenceRefs": ["file:src/greet.py"],
            "checkedAt": now(),
        }
        for ac in acs
    ]
    if failing:
        return {
            "verdict": "reject",
            "taskId": plan_id,
            "validatorId": "validator-reviewer",
            "findings": findings,
            "summary": "AC1 does not hold",
            "rejectedAt": now(),
            "schemaVersion": "1",
        }
    return {
        "verdict": "attest",
        "taskId": plan_id,
        "validatorId": "validator-reviewer",
        "findings": findings,
        "attestedAt": now(),
        "schemaVersion": "1",
    }


def gategraph(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_gategraph(home, *args, cwd=cwd)


@asynccontextmanager
async def served(home: Path, folder: Path, *flags: str) -> AsyncIterator[ClientSession]:
    """`gategraph mcp serve FLAGS` as a real process over stdio, and a session with it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gategraph.runtime", "mcp", "serve", *flags],
        env=cli_env(home),
        cwd=str(folder),
    )
    with (folder / "stderr.txt").open("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@pytest.mark.anyio
async def test_listed_with_their_arguments_and_refusals_are_errors() -> None:
    with Catalog.in_memory() as catalog:
        async with session_with(create_mcp_server(catalog, validators=True)) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            pull = tools["validator.ac-pull"]
            assert pull.input_schema["required"] == ["task_id"]
            assert "project_root" not in pull.input_schema["properties"]
            assert pull.annotations is not None and pull.annotations.read_only_hint is True
            assert tools["validator.attest"].annotations.read_only_hint is False  # type: ignore[union-attr]
            result, text = await call(session, "validator.ac-pull", {"task_id": "01NOPE"})
            assert result.is_error and json.loads(text)["code"] == "E_NOT_FOUND"
            result, text = await call(
                session, "validator.attest", {"caller": {"role": "worker"}, "attestation": {}}
            )
            assert result.is_error and json.loads(text)["code"] == "E_VALIDATOR_AUTH_ROLE"
            result, text = await call(
                session, "validator.ac-pull", {"task_id": "x", "project_root": "/"}
            )
            assert result.is_error and "unknown argument project_root" in text


@pytest.mark.anyio
async def test_an_attestation_over_mcp_lets_the_plan_of_the_same_catalog_apply(
    tmp_path: Path,
) -> None:
    """In one process: the server's catalog is the plan's."""
    text = plan(repo(tmp_path), [GOOD], outside_validators=1)
    graph = load_graph(text)
    log = MemoryEventLog()
    with Catalog.open(tmp_path / "gategraph.db") as catalog:
        first = Supervisor(graph, catalog=catalog, event_log=log, audit=InMemoryAuditLog())
        waiting = await first.run()
        assert waiting.status is PlanStatus.AWAITING_ATTESTATION
        credential = register_validator("validator-reviewer", evidence=catalog)
        async with session_with(create_mcp_server(catalog, validators=True)) as session:
            result, _ = await call(session, "validator.ac-pull", {"task_id": waiting.plan_id})
            acs = result.structured_content["acs"]
            result, _ = await call(
                session,
                "validator.attest",
                {
                    "caller": VALIDATOR,
                    "attestation": envelope(waiting.plan_id, acs, failing=False),
                    "credential": credential,
                },
            )
            assert result.structured_content["ok"] is True
        again = Supervisor(
            graph,
            catalog=catalog,
            event_log=log,
            audit=InMemoryAuditLog(),
            plan_id=waiting.plan_id,
        )
        assert (await again.resume()).status is PlanStatus.APPLIED


async def _judge(
    session: ClientSession, plan_id: str, acs: Any, credential: str, *, failing: bool
) -> Any:
    """The reviewer's verdict over MCP: a rejection (the first criterion fails) or an
    attestation, signed with its credential."""
    tool, kind = (
        ("validator.reject", "rejection") if failing else ("validator.attest", "attestation")
    )
    arguments = {
        "caller": VALIDATOR,
        kind: envelope(plan_id, acs, failing=failing),
        "credential": credential,
    }
    result, _ = await call(session, tool, arguments)
    return result


@pytest.mark.anyio
async def test_an_outside_validator_reviews_a_waiting_plan_as_a_user_would(
    tmp_path: Path,
) -> None:
    waiting = WaitingOnTheCli(tmp_path)
    root, home, ran = waiting.root, waiting.home, waiting.ran
    assert "validator.attest" in ran.stdout
    assert not (root / "src" / "greet.py").exists()
    # A person registers the reviewer; the credential is printed once, to give it.
    registered = gategraph(home, "validator", "register", "validator-reviewer", cwd=tmp_path)
    assert registered.returncode == 0, registered.stderr
    credential = registered.stdout.strip()
    assert "not shown again" in registered.stderr

    async with served(home, tmp_path, "--plans", "--validators") as session:
        # The agent finds the plan that waits for it, and its criteria.
        result, _ = await call(session, "gategraph.plans_waiting", {})
        [waiting] = result.structured_content["plans"]
        assert waiting["status"] == "awaiting_attestation"
        plan_id = waiting["plan_id"]
        result, _ = await call(session, "validator.ac-pull", {"task_id": plan_id})
        acs = result.structured_content["acs"]
        assert [a["alias"] for a in acs] == ["AC1"]
        # A rejection: it stands, the plan cannot apply.
        result = await _judge(session, plan_id, acs, credential, failing=True)
        assert result.structured_content["failingAcIds"] == [acs[0]["id"]]
        still = gategraph(home, "resume", plan_id, cwd=tmp_path)
        assert still.returncode == 3, still.stdout + still.stderr
        assert "validator-reviewer rejected it" in still.stdout
        assert not (root / "src" / "greet.py").exists()
        # Its attestation (which takes the rejection back): the plan applies when resumed.
        result = await _judge(session, plan_id, acs, credential, failing=False)
        assert result.structured_content["bindingsWritten"] == 1
        result, _ = await call(session, "validator.ac-pull", {"task_id": plan_id})
        assert result.structured_content["acs"][0]["bindingStatus"] == "satisfied"
    done = gategraph(home, "resume", plan_id, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"plan {plan_id}: applied" in done.stdout
    assert (root / "src" / "greet.py").exists()
    replayed = gategraph(home, "replay", plan_id, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


@pytest.mark.anyio
async def test_a_lead_spawns_a_validator_over_mcp_and_the_plan_applies(tmp_path: Path) -> None:
    """spawn.validator over MCP: a new validator checks a copy of the candidate (rebuilt
    from the store beside the CLI's event log) and its attestation lets the plan apply."""
    root = repo(tmp_path)
    graph_file = tmp_path / "plan.yaml"
    graph_file.write_text(plan(root, [GOOD], outside_validators=1))
    home = tmp_path / "home"
    ran = gategraph(home, "run", str(graph_file), cwd=tmp_path)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    async with served(home, tmp_path, "--plans", "--validators") as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert tools["spawn.validator"].input_schema["required"] == ["caller", "task_id"]
        result, _ = await call(session, "gategraph.plans_waiting", {})
        plan_id = result.structured_content["plans"][0]["plan_id"]
        result, text = await call(
            session,
            "spawn.validator",
            {"caller": {"role": "worker", "tier": 1}, "task_id": plan_id},
        )
        assert result.is_error and json.loads(text)["code"] == "E_VALIDATOR_SPAWN_AUTH_ROLE"
        result, text = await call(
            session,
            "spawn.validator",
            {"caller": {"role": "lead", "tier": 1}, "task_id": plan_id},
        )
        assert not result.is_error, text
        spawned = result.structured_content["result"]
        assert spawned["verdict"]["verdict"] == "attest"
    done = gategraph(home, "resume", plan_id, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "src" / "greet.py").exists()


@pytest.mark.anyio
async def test_served_only_when_asked_for_and_their_names_are_reserved() -> None:
    from gategraph.runtime import ConfigError, Tool

    with Catalog.in_memory() as catalog:
        with pytest.raises(ConfigError, match="name of a built-in validator tool"):
            catalog.add(Tool.from_config({"name": "validator.attest", "code": "def run(): 1"}))
        async with session_with(create_mcp_server(catalog)) as session:
            names = {t.name for t in (await session.list_tools()).tools}
            assert not names & {"validator.attest", "validator.ac-pull", "spawn.validator"}
            result, text = await call(session, "validator.ac-pull", {"task_id": "x"})
            assert result.is_error and "Unknown tool" in text
        async with session_with(create_mcp_server(catalog, validators=True)) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            attest = tools["validator.attest"].annotations
            assert attest is not None and attest.destructive_hint is True


@pytest.mark.anyio
async def test_a_server_started_before_any_plan_sees_the_plans_run_later(tmp_path: Path) -> None:
    """With --validators the server makes the catalog the CLI's plans then use."""
    root = repo(tmp_path)
    graph_file = tmp_path / "plan.yaml"
    graph_file.write_text(plan(root, [GOOD], outside_validators=1))
    home = tmp_path / "home"
    async with served(home, tmp_path, "--validators") as session:
        ran = gategraph(home, "run", str(graph_file), "--json", cwd=tmp_path)
        assert ran.returncode == 3, ran.stderr
        plan_id = json.loads(ran.stdout)["plan_id"]
        result, text = await call(session, "validator.ac-pull", {"task_id": plan_id})
        assert not result.is_error, text
        assert [a["alias"] for a in result.structured_content["acs"]] == ["AC1"]
