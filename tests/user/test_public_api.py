"""The public surface of gategraph.runtime is pinned: changing it is a conscious act."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path

import gategraph.runtime
import pytest
from _helpers import python_prints, run_process

EXPECTED = [
    "AGENT_ROLES",
    "AUDIT_FILE",
    "DEFAULT_RETRY_LIMIT",
    "FAULT_CATALOGUE",
    "LAYERS",
    "NAME_PATTERN",
    "AcceptanceCriterion",
    "Actor",
    "ActorFailedError",
    "ActorRef",
    "ActorScope",
    "ActorSpec",
    "AgentRole",
    "Applicable",
    "ApplyCompleted",
    "ApplyConflictError",
    "ApplyReport",
    "ApplyStarted",
    "ApplyTwiceError",
    "ApprovalDecided",
    "ApprovalPolicy",
    "ApprovalRequired",
    "ApprovalRule",
    "ArtifactProduced",
    "ArtifactRejected",
    "ArtifactValidated",
    "ArtifactValidationStarted",
    "Attachment",
    "AttachmentId",
    "Attempt",
    "AttestationRequired",
    "AttestationsReceived",
    "AuditLog",
    "AuditRecorder",
    "Backoff",
    "Capability",
    "Catalog",
    "CatalogError",
    "Change",
    "Changeset",
    "CollectReport",
    "ConfigError",
    "ConfigIssue",
    "ConfirmationStarted",
    "ContentStore",
    "Coverage",
    "DirectoryResource",
    "DirectorySandbox",
    "DuplicateError",
    "EscalationDecided",
    "EscalationDecision",
    "EscalationHandler",
    "EscalationRequest",
    "EscalationRequested",
    "Escalator",
    "Event",
    "EventBase",
    "EventId",
    "EventLog",
    "EventObserver",
    "EvidenceStore",
    "ExecuteRequest",
    "ExecutionActor",
    "Executor",
    "FaultClass",
    "FaultFamily",
    "FaultKind",
    "FixRequest",
    "FixRequested",
    "FlakeRecord",
    "Gate",
    "GateClosedError",
    "GategraphError",
    "GraphExecutor",
    "GraphRun",
    "GraphStrategy",
    "InMemoryAuditLog",
    "IntegrityError",
    "Lifecycle",
    "LiveProgress",
    "LocalExecutor",
    "ManifestEntry",
    "MaxNPolicy",
    "McpServer",
    "McpSessions",
    "MemoryEventLog",
    "MemoryEvidence",
    "MemoryResource",
    "MemorySandbox",
    "NeedsApproval",
    "Node",
    "NodeCompleted",
    "NodeKind",
    "NodeRequest",
    "NodeResult",
    "NodeSkipped",
    "NodeStarted",
    "NodeStatus",
    "NotFoundError",
    "ObservedEventLog",
    "OpenTelemetryObserver",
    "Passed",
    "PlainProgress",
    "PlanBusyError",
    "PlanCriterion",
    "PlanFinished",
    "PlanGraph",
    "PlanId",
    "PlanJournal",
    "PlanOutcome",
    "PlanResumed",
    "PlanRoster",
    "PlanStarted",
    "PlanStatistics",
    "PlanStatus",
    "PlanSummary",
    "Policy",
    "PostgresEventLog",
    "ProgressState",
    "RayExecutor",
    "ReadOnlyViolationError",
    "Reason",
    "Rejected",
    "ReplayReport",
    "RerunDifference",
    "RerunReport",
    "RerunValidator",
    "Resource",
    "ResourceSlot",
    "ResourceSpec",
    "ResultError",
    "ResumeError",
    "RetryBudget",
    "RetryDecided",
    "RetryDecision",
    "RoundSummary",
    "RunFinished",
    "RunStarted",
    "RuntimeFault",
    "SQLiteEventLog",
    "Sandbox",
    "SandboxLimits",
    "SandboxPool",
    "Scope",
    "Skill",
    "SkillTools",
    "StoreError",
    "StoreRetention",
    "StoreStatistics",
    "Strategy",
    "StrategyActor",
    "StrategyProduced",
    "StrategyRequest",
    "StrategyRevisionRequested",
    "Supervisor",
    "Tool",
    "ToolContext",
    "ToolHooks",
    "ToolSource",
    "ToolType",
    "Validation",
    "ValidationCompleted",
    "ValidationMode",
    "ValidationOutcome",
    "ValidationRecord",
    "ValidationResult",
    "ValidationStarted",
    "ValidatorAttestation",
    "ValidatorFault",
    "ValidatorFinding",
    "ValidatorRejection",
    "ValidatorRequest",
    "ValidatorRuntimeDeps",
    "ValidatorRuntimeOptions",
    "ValidatorRuntimeResult",
    "ValidatorSpawnRequest",
    "ValidatorVerdict",
    "Verdict",
    "WorkFinished",
    "WorkWithdrawn",
    "__version__",
    "build_verdict",
    "classify",
    "coerce_result",
    "decode_event",
    "default_audit_path",
    "default_catalog_path",
    "default_event_log_path",
    "draw_dot",
    "draw_mermaid",
    "encode_event",
    "execute_graph",
    "execute_graph_sync",
    "is_agent_role",
    "is_validator_attestation",
    "is_validator_rejection",
    "is_validator_verdict",
    "list_plans",
    "list_plans_sync",
    "load_graph",
    "new_ulid",
    "open_actor_scope",
    "open_gate",
    "open_plan_mcp_sessions",
    "parse_verdict",
    "primary_fault",
    "progress_for",
    "progress_line",
    "read_audit",
    "read_events",
    "record_statistics",
    "register_validator",
    "replay_plan",
    "rerun_rounds",
    "resume_gate",
    "resume_plan",
    "resume_plan_sync",
    "revoke_validator",
    "run_plan",
    "run_plan_sync",
    "run_validator_max_n",
    "sandbox_pool",
    "sandbox_support",
    "telemetry_available",
    "tool_from_config",
    "use_uvloop",
    "validate",
    "validate_sync",
    "validator_ac_pull",
    "validator_attest",
    "validator_reject",
    "validator_spawn",
    "wait_backoff",
]


def test_all_is_pinned() -> None:
    """`__all__` lists exactly the public names (ruff RUF022 keeps it sorted)."""
    assert gategraph.runtime.__all__ == EXPECTED


# The adapters' public names, pinned as for the package (their modules need their extras to
# import, so they are read from the source here).
INTEGRATIONS = {
    "langgraph": [
        "ApprovalNode",
        "GateNode",
        "GateState",
        "GraphTool",
        "Route",
        "ToolCallGate",
        "ToolGateState",
        "ValidationNode",
        "route",
        "thread_plan_prefix",
        "write_file",
    ],
    "pydantic_ai": [
        "CatalogToolset",
        "GateEscalatedError",
        "GategraphOutputValidator",
        "gate_output",
    ],
}


@pytest.mark.parametrize("module", sorted(INTEGRATIONS))
def test_the_integrations_all_is_pinned(module: str) -> None:
    source = Path(gategraph.runtime.__file__).with_name("integrations") / f"{module}.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    [names] = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
    ]
    assert names == INTEGRATIONS[module]
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            defined |= {alias.asname or alias.name for alias in node.names}
    assert set(names) <= defined  # each one is the module's own


def test_every_public_name_resolves_and_is_documented() -> None:
    """Each public name exists, and each public class or function has a docstring."""
    for name in EXPECTED:
        value = getattr(gategraph.runtime, name)
        if isinstance(value, type) or inspect.isfunction(value):
            assert value.__doc__, name


def test_public_objects_claim_the_public_module() -> None:
    """Error classes and models are importable from the package, not only from private modules."""
    namespace: dict[str, object] = {}
    exec("from gategraph.runtime import *", namespace)
    assert set(EXPECTED) - {"__version__"} <= set(namespace)


def test_error_tree() -> None:
    """ConfigError is a GategraphError and a ValueError; NotFoundError is a LookupError."""
    rt = gategraph.runtime
    assert issubclass(rt.ConfigError, rt.GategraphError)
    assert issubclass(rt.ConfigError, ValueError)
    assert issubclass(rt.NotFoundError, LookupError)
    assert issubclass(rt.RuntimeFault, RuntimeError)
    for cls in (rt.DuplicateError, rt.NotFoundError, rt.IntegrityError):
        assert issubclass(cls, rt.CatalogError)
        assert issubclass(cls, rt.GategraphError)


def test_no_top_level_runtime_or_validators_package(tmp_path: Path) -> None:
    """The install maps only gategraph.*: no top-level `runtime` or `validators` from this repo."""
    repo = Path(gategraph.runtime.__file__).resolve().parents[1]
    probe = (
        "import importlib.util as u, json\n"
        "print(json.dumps({n: getattr(u.find_spec(n), 'origin', None)"
        " for n in ('runtime', 'validators')}))"
    )
    out = run_process([sys.executable, "-c", probe], cwd=tmp_path, check=True)
    for name, origin in json.loads(out.stdout).items():
        assert origin is None or not Path(origin).resolve().is_relative_to(repo), name
    assert importlib.import_module("gategraph.validators")
    assert importlib.import_module("gategraph.graphs")


def test_every_public_name_resolves() -> None:
    """Each name of ``__all__`` imports on first use (the package loads them lazily)."""
    import gategraph.runtime as api

    for name in api.__all__:
        assert getattr(api, name) is not None, name
    assert set(api.__all__) <= set(dir(api))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        api.nothing_here  # noqa: B018


def test_importing_the_package_is_light() -> None:
    """``import gategraph.runtime`` (and so ``gategraph --help``) loads none of the heavy
    modules: they come with the first name that needs them."""
    code = (
        "import sys, gategraph.runtime, gategraph.runtime._cli; "
        "heavy = [m for m in ('pydantic', 'networkx', 'anyio', 'msgspec', 'yaml', 'jsonschema') "
        "if m in sys.modules]; print(heavy)"
    )
    assert python_prints(code) == "[]"
