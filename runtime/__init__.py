"""gategraph: run AI-agent plans as actor graphs; nothing is applied until its validations pass.

The public API lives here; everything in a ``_module`` is private and may change.

Names are imported on first use (PEP 562), so ``import gategraph.runtime`` — and the
``gategraph`` command, which starts with it — does not pay for pydantic models, networkx
or the engine until something needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._actors import Actor as Actor
    from ._actors import ActorFailedError as ActorFailedError
    from ._actors import ActorRef as ActorRef
    from ._actors import ActorScope as ActorScope
    from ._actors import open_actor_scope as open_actor_scope
    from ._catalog import Catalog as Catalog
    from ._catalog import FlakeRecord as FlakeRecord
    from ._context import ToolContext as ToolContext
    from ._engine import GraphRun as GraphRun
    from ._engine import NodeRequest as NodeRequest
    from ._engine import NodeResult as NodeResult
    from ._engine import NodeStatus as NodeStatus
    from ._engine import ValidationRecord as ValidationRecord
    from ._engine import execute_graph as execute_graph
    from ._engine import execute_graph_sync as execute_graph_sync
    from ._engine import open_plan_mcp_sessions as open_plan_mcp_sessions
    from ._eventlog import EventLog as EventLog
    from ._eventlog import MemoryEventLog as MemoryEventLog
    from ._eventlog import SQLiteEventLog as SQLiteEventLog
    from ._eventlog import default_event_log_path as default_event_log_path
    from ._eventlog import read_events as read_events
    from ._events import ApplyCompleted as ApplyCompleted
    from ._events import ApplyStarted as ApplyStarted
    from ._events import ApprovalDecided as ApprovalDecided
    from ._events import ApprovalRequired as ApprovalRequired
    from ._events import ArtifactProduced as ArtifactProduced
    from ._events import ArtifactRejected as ArtifactRejected
    from ._events import ArtifactValidated as ArtifactValidated
    from ._events import ArtifactValidationStarted as ArtifactValidationStarted
    from ._events import AttestationRequired as AttestationRequired
    from ._events import AttestationsReceived as AttestationsReceived
    from ._events import ConfirmationStarted as ConfirmationStarted
    from ._events import EscalationDecided as EscalationDecided
    from ._events import EscalationRequested as EscalationRequested
    from ._events import Event as Event
    from ._events import EventBase as EventBase
    from ._events import FixRequested as FixRequested
    from ._events import NodeCompleted as NodeCompleted
    from ._events import NodeSkipped as NodeSkipped
    from ._events import NodeStarted as NodeStarted
    from ._events import PlanFinished as PlanFinished
    from ._events import PlanResumed as PlanResumed
    from ._events import PlanStarted as PlanStarted
    from ._events import RetryDecided as RetryDecided
    from ._events import RunFinished as RunFinished
    from ._events import RunStarted as RunStarted
    from ._events import StrategyProduced as StrategyProduced
    from ._events import StrategyRevisionRequested as StrategyRevisionRequested
    from ._events import ValidationCompleted as ValidationCompleted
    from ._events import ValidationStarted as ValidationStarted
    from ._events import WorkFinished as WorkFinished
    from ._events import decode_event as decode_event
    from ._events import encode_event as encode_event
    from ._evidence import Coverage as Coverage
    from ._evidence import EvidenceStore as EvidenceStore
    from ._evidence import MemoryEvidence as MemoryEvidence
    from ._evidence import PlanCriterion as PlanCriterion
    from ._evidence import PlanRoster as PlanRoster
    from ._exceptions import ApplyConflictError as ApplyConflictError
    from ._exceptions import ApplyTwiceError as ApplyTwiceError
    from ._exceptions import CatalogError as CatalogError
    from ._exceptions import ConfigError as ConfigError
    from ._exceptions import ConfigIssue as ConfigIssue
    from ._exceptions import DuplicateError as DuplicateError
    from ._exceptions import GategraphError as GategraphError
    from ._exceptions import IntegrityError as IntegrityError
    from ._exceptions import NotFoundError as NotFoundError
    from ._exceptions import PlanBusyError as PlanBusyError
    from ._exceptions import ResumeError as ResumeError
    from ._exceptions import RuntimeFault as RuntimeFault
    from ._exceptions import WorkWithdrawn as WorkWithdrawn
    from ._executors import Executor as Executor
    from ._executors import LocalExecutor as LocalExecutor
    from ._executors import RayExecutor as RayExecutor
    from ._gate import Gate as Gate
    from ._gate import GateClosedError as GateClosedError
    from ._gate import open_gate as open_gate
    from ._gate import resume_gate as resume_gate
    from ._graph import AcceptanceCriterion as AcceptanceCriterion
    from ._graph import ActorSpec as ActorSpec
    from ._graph import ApprovalPolicy as ApprovalPolicy
    from ._graph import ApprovalRule as ApprovalRule
    from ._graph import Lifecycle as Lifecycle
    from ._graph import Node as Node
    from ._graph import NodeKind as NodeKind
    from ._graph import PlanGraph as PlanGraph
    from ._graph import Policy as Policy
    from ._graph import ResourceSpec as ResourceSpec
    from ._graph import load_graph as load_graph
    from ._home import default_catalog_path as default_catalog_path
    from ._ids import EventId as EventId
    from ._ids import PlanId as PlanId
    from ._ids import new_ulid as new_ulid
    from ._journal import PlanJournal as PlanJournal
    from ._kernel import SandboxLimits as SandboxLimits
    from ._kernel import sandbox_support as sandbox_support
    from ._maxn import AUDIT_FILE as AUDIT_FILE
    from ._maxn import DEFAULT_RETRY_LIMIT as DEFAULT_RETRY_LIMIT
    from ._maxn import FAULT_CATALOGUE as FAULT_CATALOGUE
    from ._maxn import Attempt as Attempt
    from ._maxn import AuditLog as AuditLog
    from ._maxn import AuditRecorder as AuditRecorder
    from ._maxn import Backoff as Backoff
    from ._maxn import FaultClass as FaultClass
    from ._maxn import FaultFamily as FaultFamily
    from ._maxn import FaultKind as FaultKind
    from ._maxn import InMemoryAuditLog as InMemoryAuditLog
    from ._maxn import MaxNPolicy as MaxNPolicy
    from ._maxn import RetryBudget as RetryBudget
    from ._maxn import RetryDecision as RetryDecision
    from ._maxn import classify as classify
    from ._maxn import default_audit_path as default_audit_path
    from ._maxn import primary_fault as primary_fault
    from ._maxn import read_audit as read_audit
    from ._maxn import wait_backoff as wait_backoff
    from ._mcp import McpServer as McpServer
    from ._mcp import McpSessions as McpSessions
    from ._models import NAME_PATTERN as NAME_PATTERN
    from ._models import Attachment as Attachment
    from ._models import AttachmentId as AttachmentId
    from ._models import Capability as Capability
    from ._models import ResourceSlot as ResourceSlot
    from ._models import Scope as Scope
    from ._models import Tool as Tool
    from ._models import ToolHooks as ToolHooks
    from ._models import ToolSource as ToolSource
    from ._models import ToolType as ToolType
    from ._models import Validation as Validation
    from ._models import ValidationMode as ValidationMode
    from ._models import tool_from_config as tool_from_config
    from ._observe import EventObserver as EventObserver
    from ._observe import LiveProgress as LiveProgress
    from ._observe import ObservedEventLog as ObservedEventLog
    from ._observe import PlainProgress as PlainProgress
    from ._observe import ProgressState as ProgressState
    from ._observe import progress_for as progress_for
    from ._observe import progress_line as progress_line
    from ._picture import draw_dot as draw_dot
    from ._picture import draw_mermaid as draw_mermaid
    from ._pipeline import LAYERS as LAYERS
    from ._pipeline import NeedsApproval as NeedsApproval
    from ._pipeline import Passed as Passed
    from ._pipeline import Reason as Reason
    from ._pipeline import Rejected as Rejected
    from ._pipeline import ValidationOutcome as ValidationOutcome
    from ._pipeline import build_verdict as build_verdict
    from ._protocols import Applicable as Applicable
    from ._protocols import EscalationDecision as EscalationDecision
    from ._protocols import EscalationHandler as EscalationHandler
    from ._protocols import EscalationRequest as EscalationRequest
    from ._protocols import Escalator as Escalator
    from ._protocols import ExecuteRequest as ExecuteRequest
    from ._protocols import ExecutionActor as ExecutionActor
    from ._protocols import FixRequest as FixRequest
    from ._protocols import RoundSummary as RoundSummary
    from ._protocols import Strategy as Strategy
    from ._protocols import StrategyActor as StrategyActor
    from ._protocols import StrategyRequest as StrategyRequest
    from ._protocols import ValidatorRequest as ValidatorRequest
    from ._readonly import ReadOnlyViolationError as ReadOnlyViolationError
    from ._replay import ReplayReport as ReplayReport
    from ._replay import replay_plan as replay_plan
    from ._rerun import RerunDifference as RerunDifference
    from ._rerun import RerunReport as RerunReport
    from ._rerun import rerun_rounds as rerun_rounds
    from ._resources import ApplyReport as ApplyReport
    from ._resources import Change as Change
    from ._resources import Changeset as Changeset
    from ._resources import DirectoryResource as DirectoryResource
    from ._resources import DirectorySandbox as DirectorySandbox
    from ._resources import MemoryResource as MemoryResource
    from ._resources import MemorySandbox as MemorySandbox
    from ._resources import Resource as Resource
    from ._resources import Sandbox as Sandbox
    from ._results import ResultError as ResultError
    from ._results import ValidationResult as ValidationResult
    from ._results import coerce_result as coerce_result
    from ._sandbox import SandboxPool as SandboxPool
    from ._sandbox import sandbox_pool as sandbox_pool
    from ._skill_tools import SkillTools as SkillTools
    from ._skills import Skill as Skill
    from ._store import CollectReport as CollectReport
    from ._store import ContentStore as ContentStore
    from ._store import ManifestEntry as ManifestEntry
    from ._store import StoreError as StoreError
    from ._store import StoreRetention as StoreRetention
    from ._store import StoreStatistics as StoreStatistics
    from ._supervisor import GraphExecutor as GraphExecutor
    from ._supervisor import GraphStrategy as GraphStrategy
    from ._supervisor import PlanOutcome as PlanOutcome
    from ._supervisor import PlanStatistics as PlanStatistics
    from ._supervisor import PlanStatus as PlanStatus
    from ._supervisor import Supervisor as Supervisor
    from ._supervisor import resume_plan as resume_plan
    from ._supervisor import resume_plan_sync as resume_plan_sync
    from ._supervisor import run_plan as run_plan
    from ._supervisor import run_plan_sync as run_plan_sync
    from ._sync import use_uvloop as use_uvloop
    from ._telemetry import OpenTelemetryObserver as OpenTelemetryObserver
    from ._telemetry import record_statistics as record_statistics
    from ._telemetry import telemetry_available as telemetry_available
    from ._validate import Verdict as Verdict
    from ._validate import validate as validate
    from ._validate import validate_sync as validate_sync
    from ._validator_runtime import ValidatorFault as ValidatorFault
    from ._validator_runtime import ValidatorRuntimeDeps as ValidatorRuntimeDeps
    from ._validator_runtime import ValidatorRuntimeOptions as ValidatorRuntimeOptions
    from ._validator_runtime import ValidatorRuntimeResult as ValidatorRuntimeResult
    from ._validator_runtime import ValidatorSpawnRequest as ValidatorSpawnRequest
    from ._validator_runtime import run_validator_max_n as run_validator_max_n
    from ._validator_spawn import RerunValidator as RerunValidator
    from ._validator_spawn import validator_spawn as validator_spawn
    from ._validator_tools import register_validator as register_validator
    from ._validator_tools import revoke_validator as revoke_validator
    from ._validator_tools import validator_ac_pull as validator_ac_pull
    from ._validator_tools import validator_attest as validator_attest
    from ._validator_tools import validator_reject as validator_reject
    from ._verdicts import AGENT_ROLES as AGENT_ROLES
    from ._verdicts import AgentRole as AgentRole
    from ._verdicts import ValidatorAttestation as ValidatorAttestation
    from ._verdicts import ValidatorFinding as ValidatorFinding
    from ._verdicts import ValidatorRejection as ValidatorRejection
    from ._verdicts import ValidatorVerdict as ValidatorVerdict
    from ._verdicts import is_agent_role as is_agent_role
    from ._verdicts import is_validator_attestation as is_validator_attestation
    from ._verdicts import is_validator_rejection as is_validator_rejection
    from ._verdicts import is_validator_verdict as is_validator_verdict
    from ._verdicts import parse_verdict as parse_verdict
    from ._version import __version__ as __version__

_WHERE: dict[str, str] = {
    "AGENT_ROLES": "._verdicts",
    "AUDIT_FILE": "._maxn",
    "AcceptanceCriterion": "._graph",
    "Actor": "._actors",
    "ActorFailedError": "._actors",
    "ActorRef": "._actors",
    "ActorScope": "._actors",
    "ActorSpec": "._graph",
    "AgentRole": "._verdicts",
    "Applicable": "._protocols",
    "ApplyCompleted": "._events",
    "ApplyConflictError": "._exceptions",
    "ApplyReport": "._resources",
    "ApplyStarted": "._events",
    "ApplyTwiceError": "._exceptions",
    "ApprovalDecided": "._events",
    "ApprovalPolicy": "._graph",
    "ApprovalRequired": "._events",
    "ApprovalRule": "._graph",
    "ArtifactProduced": "._events",
    "ArtifactRejected": "._events",
    "ArtifactValidated": "._events",
    "ArtifactValidationStarted": "._events",
    "Attachment": "._models",
    "AttachmentId": "._models",
    "Attempt": "._maxn",
    "AttestationRequired": "._events",
    "AttestationsReceived": "._events",
    "AuditLog": "._maxn",
    "AuditRecorder": "._maxn",
    "Backoff": "._maxn",
    "Capability": "._models",
    "Catalog": "._catalog",
    "CatalogError": "._exceptions",
    "Change": "._resources",
    "Changeset": "._resources",
    "CollectReport": "._store",
    "ConfigError": "._exceptions",
    "ConfigIssue": "._exceptions",
    "ConfirmationStarted": "._events",
    "ContentStore": "._store",
    "Coverage": "._evidence",
    "DEFAULT_RETRY_LIMIT": "._maxn",
    "DirectoryResource": "._resources",
    "DirectorySandbox": "._resources",
    "DuplicateError": "._exceptions",
    "EscalationDecided": "._events",
    "EscalationDecision": "._protocols",
    "EscalationHandler": "._protocols",
    "EscalationRequest": "._protocols",
    "EscalationRequested": "._events",
    "Escalator": "._protocols",
    "Event": "._events",
    "EventBase": "._events",
    "EventId": "._ids",
    "EventLog": "._eventlog",
    "EventObserver": "._observe",
    "EvidenceStore": "._evidence",
    "ExecuteRequest": "._protocols",
    "ExecutionActor": "._protocols",
    "Executor": "._executors",
    "FAULT_CATALOGUE": "._maxn",
    "FaultClass": "._maxn",
    "FaultFamily": "._maxn",
    "FaultKind": "._maxn",
    "FixRequest": "._protocols",
    "FixRequested": "._events",
    "FlakeRecord": "._catalog",
    "Gate": "._gate",
    "GateClosedError": "._gate",
    "GategraphError": "._exceptions",
    "GraphExecutor": "._supervisor",
    "GraphRun": "._engine",
    "GraphStrategy": "._supervisor",
    "InMemoryAuditLog": "._maxn",
    "IntegrityError": "._exceptions",
    "LAYERS": "._pipeline",
    "Lifecycle": "._graph",
    "LiveProgress": "._observe",
    "LocalExecutor": "._executors",
    "ManifestEntry": "._store",
    "MaxNPolicy": "._maxn",
    "McpServer": "._mcp",
    "McpSessions": "._mcp",
    "MemoryEventLog": "._eventlog",
    "MemoryEvidence": "._evidence",
    "MemoryResource": "._resources",
    "MemorySandbox": "._resources",
    "NAME_PATTERN": "._models",
    "NeedsApproval": "._pipeline",
    "Node": "._graph",
    "NodeCompleted": "._events",
    "NodeKind": "._graph",
    "NodeRequest": "._engine",
    "NodeResult": "._engine",
    "NodeSkipped": "._events",
    "NodeStarted": "._events",
    "NodeStatus": "._engine",
    "NotFoundError": "._exceptions",
    "ObservedEventLog": "._observe",
    "OpenTelemetryObserver": "._telemetry",
    "Passed": "._pipeline",
    "PlainProgress": "._observe",
    "PlanBusyError": "._exceptions",
    "PlanCriterion": "._evidence",
    "PlanFinished": "._events",
    "PlanGraph": "._graph",
    "PlanId": "._ids",
    "PlanJournal": "._journal",
    "PlanOutcome": "._supervisor",
    "PlanResumed": "._events",
    "PlanRoster": "._evidence",
    "PlanStarted": "._events",
    "PlanStatistics": "._supervisor",
    "PlanStatus": "._supervisor",
    "Policy": "._graph",
    "ProgressState": "._observe",
    "RayExecutor": "._executors",
    "ReadOnlyViolationError": "._readonly",
    "Reason": "._pipeline",
    "Rejected": "._pipeline",
    "ReplayReport": "._replay",
    "RerunDifference": "._rerun",
    "RerunReport": "._rerun",
    "RerunValidator": "._validator_spawn",
    "Resource": "._resources",
    "ResourceSlot": "._models",
    "ResourceSpec": "._graph",
    "ResultError": "._results",
    "ResumeError": "._exceptions",
    "RetryBudget": "._maxn",
    "RetryDecided": "._events",
    "RetryDecision": "._maxn",
    "RoundSummary": "._protocols",
    "RunFinished": "._events",
    "RunStarted": "._events",
    "RuntimeFault": "._exceptions",
    "SQLiteEventLog": "._eventlog",
    "Sandbox": "._resources",
    "SandboxLimits": "._kernel",
    "SandboxPool": "._sandbox",
    "Scope": "._models",
    "Skill": "._skills",
    "SkillTools": "._skill_tools",
    "StoreError": "._store",
    "StoreRetention": "._store",
    "StoreStatistics": "._store",
    "Strategy": "._protocols",
    "StrategyActor": "._protocols",
    "StrategyProduced": "._events",
    "StrategyRequest": "._protocols",
    "StrategyRevisionRequested": "._events",
    "Supervisor": "._supervisor",
    "Tool": "._models",
    "ToolContext": "._context",
    "ToolHooks": "._models",
    "ToolSource": "._models",
    "ToolType": "._models",
    "Validation": "._models",
    "ValidationCompleted": "._events",
    "ValidationMode": "._models",
    "ValidationOutcome": "._pipeline",
    "ValidationRecord": "._engine",
    "ValidationResult": "._results",
    "ValidationStarted": "._events",
    "ValidatorAttestation": "._verdicts",
    "ValidatorFault": "._validator_runtime",
    "ValidatorFinding": "._verdicts",
    "ValidatorRejection": "._verdicts",
    "ValidatorRequest": "._protocols",
    "ValidatorRuntimeDeps": "._validator_runtime",
    "ValidatorRuntimeOptions": "._validator_runtime",
    "ValidatorRuntimeResult": "._validator_runtime",
    "ValidatorSpawnRequest": "._validator_runtime",
    "ValidatorVerdict": "._verdicts",
    "Verdict": "._validate",
    "WorkFinished": "._events",
    "WorkWithdrawn": "._exceptions",
    "__version__": "._version",
    "build_verdict": "._pipeline",
    "classify": "._maxn",
    "coerce_result": "._results",
    "decode_event": "._events",
    "default_audit_path": "._maxn",
    "default_catalog_path": "._home",
    "default_event_log_path": "._eventlog",
    "draw_dot": "._picture",
    "draw_mermaid": "._picture",
    "encode_event": "._events",
    "execute_graph": "._engine",
    "execute_graph_sync": "._engine",
    "is_agent_role": "._verdicts",
    "is_validator_attestation": "._verdicts",
    "is_validator_rejection": "._verdicts",
    "is_validator_verdict": "._verdicts",
    "load_graph": "._graph",
    "new_ulid": "._ids",
    "open_actor_scope": "._actors",
    "open_gate": "._gate",
    "open_plan_mcp_sessions": "._engine",
    "parse_verdict": "._verdicts",
    "primary_fault": "._maxn",
    "progress_for": "._observe",
    "progress_line": "._observe",
    "read_audit": "._maxn",
    "read_events": "._eventlog",
    "record_statistics": "._telemetry",
    "register_validator": "._validator_tools",
    "replay_plan": "._replay",
    "rerun_rounds": "._rerun",
    "resume_gate": "._gate",
    "resume_plan": "._supervisor",
    "resume_plan_sync": "._supervisor",
    "revoke_validator": "._validator_tools",
    "run_plan": "._supervisor",
    "run_plan_sync": "._supervisor",
    "run_validator_max_n": "._validator_runtime",
    "sandbox_pool": "._sandbox",
    "sandbox_support": "._kernel",
    "telemetry_available": "._telemetry",
    "tool_from_config": "._models",
    "use_uvloop": "._sync",
    "validate": "._validate",
    "validate_sync": "._validate",
    "validator_ac_pull": "._validator_tools",
    "validator_attest": "._validator_tools",
    "validator_reject": "._validator_tools",
    "validator_spawn": "._validator_spawn",
    "wait_backoff": "._maxn",
}
"""Each public name and the private module it lives in."""

__all__ = [
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
    "Policy",
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


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use, then keep the name here."""
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
