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
    from ._base._exceptions import ApplyConflictError as ApplyConflictError
    from ._base._exceptions import ApplyTwiceError as ApplyTwiceError
    from ._base._exceptions import CatalogError as CatalogError
    from ._base._exceptions import ConfigError as ConfigError
    from ._base._exceptions import ConfigIssue as ConfigIssue
    from ._base._exceptions import DuplicateError as DuplicateError
    from ._base._exceptions import GategraphError as GategraphError
    from ._base._exceptions import IntegrityError as IntegrityError
    from ._base._exceptions import NotFoundError as NotFoundError
    from ._base._exceptions import PlanBusyError as PlanBusyError
    from ._base._exceptions import ResumeError as ResumeError
    from ._base._exceptions import RuntimeFault as RuntimeFault
    from ._base._exceptions import WorkWithdrawn as WorkWithdrawn
    from ._base._home import default_catalog_path as default_catalog_path
    from ._base._ids import EventId as EventId
    from ._base._ids import PlanId as PlanId
    from ._base._ids import new_ulid as new_ulid
    from ._base._kernel import SandboxLimits as SandboxLimits
    from ._base._kernel import sandbox_support as sandbox_support
    from ._base._protocols import Applicable as Applicable
    from ._base._protocols import EscalationDecision as EscalationDecision
    from ._base._protocols import EscalationHandler as EscalationHandler
    from ._base._protocols import EscalationRequest as EscalationRequest
    from ._base._protocols import Escalator as Escalator
    from ._base._protocols import ExecuteRequest as ExecuteRequest
    from ._base._protocols import ExecutionActor as ExecutionActor
    from ._base._protocols import FixRequest as FixRequest
    from ._base._protocols import RoundSummary as RoundSummary
    from ._base._protocols import Strategy as Strategy
    from ._base._protocols import StrategyActor as StrategyActor
    from ._base._protocols import StrategyRequest as StrategyRequest
    from ._base._protocols import ValidatorRequest as ValidatorRequest
    from ._calls._context import ToolContext as ToolContext
    from ._calls._mcp import McpServer as McpServer
    from ._calls._mcp import McpSessions as McpSessions
    from ._calls._readonly import ReadOnlyViolationError as ReadOnlyViolationError
    from ._calls._sandbox import SandboxPool as SandboxPool
    from ._calls._sandbox import sandbox_pool as sandbox_pool
    from ._data._events import ApplyCompleted as ApplyCompleted
    from ._data._events import ApplyStarted as ApplyStarted
    from ._data._events import ApprovalDecided as ApprovalDecided
    from ._data._events import ApprovalRequired as ApprovalRequired
    from ._data._events import ArtifactProduced as ArtifactProduced
    from ._data._events import ArtifactRejected as ArtifactRejected
    from ._data._events import ArtifactValidated as ArtifactValidated
    from ._data._events import ArtifactValidationStarted as ArtifactValidationStarted
    from ._data._events import AttestationRequired as AttestationRequired
    from ._data._events import AttestationsReceived as AttestationsReceived
    from ._data._events import ConfirmationStarted as ConfirmationStarted
    from ._data._events import EscalationDecided as EscalationDecided
    from ._data._events import EscalationRequested as EscalationRequested
    from ._data._events import Event as Event
    from ._data._events import EventBase as EventBase
    from ._data._events import FixRequested as FixRequested
    from ._data._events import NodeCompleted as NodeCompleted
    from ._data._events import NodeSkipped as NodeSkipped
    from ._data._events import NodeStarted as NodeStarted
    from ._data._events import PlanFinished as PlanFinished
    from ._data._events import PlanResumed as PlanResumed
    from ._data._events import PlanStarted as PlanStarted
    from ._data._events import RetryDecided as RetryDecided
    from ._data._events import RunFinished as RunFinished
    from ._data._events import RunStarted as RunStarted
    from ._data._events import StrategyProduced as StrategyProduced
    from ._data._events import StrategyRevisionRequested as StrategyRevisionRequested
    from ._data._events import ValidationCompleted as ValidationCompleted
    from ._data._events import ValidationStarted as ValidationStarted
    from ._data._events import WorkFinished as WorkFinished
    from ._data._events import decode_event as decode_event
    from ._data._events import encode_event as encode_event
    from ._data._maxn import AUDIT_FILE as AUDIT_FILE
    from ._data._maxn import DEFAULT_RETRY_LIMIT as DEFAULT_RETRY_LIMIT
    from ._data._maxn import FAULT_CATALOGUE as FAULT_CATALOGUE
    from ._data._maxn import Attempt as Attempt
    from ._data._maxn import AuditLog as AuditLog
    from ._data._maxn import AuditRecorder as AuditRecorder
    from ._data._maxn import Backoff as Backoff
    from ._data._maxn import FaultClass as FaultClass
    from ._data._maxn import FaultFamily as FaultFamily
    from ._data._maxn import FaultKind as FaultKind
    from ._data._maxn import InMemoryAuditLog as InMemoryAuditLog
    from ._data._maxn import MaxNPolicy as MaxNPolicy
    from ._data._maxn import RetryBudget as RetryBudget
    from ._data._maxn import RetryDecision as RetryDecision
    from ._data._maxn import classify as classify
    from ._data._maxn import default_audit_path as default_audit_path
    from ._data._maxn import primary_fault as primary_fault
    from ._data._maxn import read_audit as read_audit
    from ._data._maxn import wait_backoff as wait_backoff
    from ._data._models import NAME_PATTERN as NAME_PATTERN
    from ._data._models import Attachment as Attachment
    from ._data._models import AttachmentId as AttachmentId
    from ._data._models import Capability as Capability
    from ._data._models import ResourceSlot as ResourceSlot
    from ._data._models import Scope as Scope
    from ._data._models import Tool as Tool
    from ._data._models import ToolHooks as ToolHooks
    from ._data._models import ToolSource as ToolSource
    from ._data._models import ToolType as ToolType
    from ._data._models import Validation as Validation
    from ._data._models import ValidationMode as ValidationMode
    from ._data._models import tool_from_config as tool_from_config
    from ._data._results import ResultError as ResultError
    from ._data._results import ValidationResult as ValidationResult
    from ._data._results import coerce_result as coerce_result
    from ._data._verdicts import AGENT_ROLES as AGENT_ROLES
    from ._data._verdicts import AgentRole as AgentRole
    from ._data._verdicts import ValidatorAttestation as ValidatorAttestation
    from ._data._verdicts import ValidatorFinding as ValidatorFinding
    from ._data._verdicts import ValidatorRejection as ValidatorRejection
    from ._data._verdicts import ValidatorVerdict as ValidatorVerdict
    from ._data._verdicts import is_agent_role as is_agent_role
    from ._data._verdicts import is_validator_attestation as is_validator_attestation
    from ._data._verdicts import is_validator_rejection as is_validator_rejection
    from ._data._verdicts import is_validator_verdict as is_validator_verdict
    from ._data._verdicts import parse_verdict as parse_verdict
    from ._definitions._catalog import Catalog as Catalog
    from ._definitions._catalog import FlakeRecord as FlakeRecord
    from ._definitions._evidence import Coverage as Coverage
    from ._definitions._evidence import EvidenceStore as EvidenceStore
    from ._definitions._evidence import MemoryEvidence as MemoryEvidence
    from ._definitions._evidence import PlanCriterion as PlanCriterion
    from ._definitions._evidence import PlanRoster as PlanRoster
    from ._definitions._graph import AcceptanceCriterion as AcceptanceCriterion
    from ._definitions._graph import ActorSpec as ActorSpec
    from ._definitions._graph import ApprovalPolicy as ApprovalPolicy
    from ._definitions._graph import ApprovalRule as ApprovalRule
    from ._definitions._graph import Lifecycle as Lifecycle
    from ._definitions._graph import Node as Node
    from ._definitions._graph import NodeKind as NodeKind
    from ._definitions._graph import PlanGraph as PlanGraph
    from ._definitions._graph import Policy as Policy
    from ._definitions._graph import ResourceSpec as ResourceSpec
    from ._definitions._graph import load_graph as load_graph
    from ._definitions._skills import Skill as Skill
    from ._definitions._validator_tools import register_validator as register_validator
    from ._definitions._validator_tools import revoke_validator as revoke_validator
    from ._definitions._validator_tools import validator_ac_pull as validator_ac_pull
    from ._definitions._validator_tools import validator_attest as validator_attest
    from ._definitions._validator_tools import validator_reject as validator_reject
    from ._embed._gate import Gate as Gate
    from ._embed._gate import GateClosedError as GateClosedError
    from ._embed._gate import open_gate as open_gate
    from ._embed._gate import resume_gate as resume_gate
    from ._embed._telemetry import OpenTelemetryObserver as OpenTelemetryObserver
    from ._embed._telemetry import record_statistics as record_statistics
    from ._embed._telemetry import telemetry_available as telemetry_available
    from ._embed._validate import Verdict as Verdict
    from ._embed._validate import validate as validate
    from ._embed._validate import validate_sync as validate_sync
    from ._lifecycle._executors import Executor as Executor
    from ._lifecycle._executors import LocalExecutor as LocalExecutor
    from ._lifecycle._executors import RayExecutor as RayExecutor
    from ._lifecycle._rerun import RerunDifference as RerunDifference
    from ._lifecycle._rerun import RerunReport as RerunReport
    from ._lifecycle._rerun import rerun_rounds as rerun_rounds
    from ._lifecycle._supervisor import GraphExecutor as GraphExecutor
    from ._lifecycle._supervisor import GraphStrategy as GraphStrategy
    from ._lifecycle._supervisor import PlanOutcome as PlanOutcome
    from ._lifecycle._supervisor import PlanStatistics as PlanStatistics
    from ._lifecycle._supervisor import PlanStatus as PlanStatus
    from ._lifecycle._supervisor import Supervisor as Supervisor
    from ._lifecycle._supervisor import resume_plan as resume_plan
    from ._lifecycle._supervisor import resume_plan_sync as resume_plan_sync
    from ._lifecycle._supervisor import run_plan as run_plan
    from ._lifecycle._supervisor import run_plan_sync as run_plan_sync
    from ._lifecycle._validator_spawn import RerunValidator as RerunValidator
    from ._lifecycle._validator_spawn import validator_spawn as validator_spawn
    from ._running._actors import Actor as Actor
    from ._running._actors import ActorFailedError as ActorFailedError
    from ._running._actors import ActorRef as ActorRef
    from ._running._actors import ActorScope as ActorScope
    from ._running._actors import open_actor_scope as open_actor_scope
    from ._running._engine import GraphRun as GraphRun
    from ._running._engine import NodeRequest as NodeRequest
    from ._running._engine import NodeResult as NodeResult
    from ._running._engine import NodeStatus as NodeStatus
    from ._running._engine import ValidationRecord as ValidationRecord
    from ._running._engine import execute_graph as execute_graph
    from ._running._engine import execute_graph_sync as execute_graph_sync
    from ._running._engine import open_plan_mcp_sessions as open_plan_mcp_sessions
    from ._running._journal import PlanJournal as PlanJournal
    from ._running._observe import EventObserver as EventObserver
    from ._running._observe import LiveProgress as LiveProgress
    from ._running._observe import ObservedEventLog as ObservedEventLog
    from ._running._observe import PlainProgress as PlainProgress
    from ._running._observe import ProgressState as ProgressState
    from ._running._observe import progress_for as progress_for
    from ._running._observe import progress_line as progress_line
    from ._running._pipeline import LAYERS as LAYERS
    from ._running._pipeline import NeedsApproval as NeedsApproval
    from ._running._pipeline import Passed as Passed
    from ._running._pipeline import Reason as Reason
    from ._running._pipeline import Rejected as Rejected
    from ._running._pipeline import ValidationOutcome as ValidationOutcome
    from ._running._pipeline import build_verdict as build_verdict
    from ._running._skill_tools import SkillTools as SkillTools
    from ._running._sync import use_uvloop as use_uvloop
    from ._running._validator_runtime import ValidatorFault as ValidatorFault
    from ._running._validator_runtime import ValidatorRuntimeDeps as ValidatorRuntimeDeps
    from ._running._validator_runtime import ValidatorRuntimeOptions as ValidatorRuntimeOptions
    from ._running._validator_runtime import ValidatorRuntimeResult as ValidatorRuntimeResult
    from ._running._validator_runtime import ValidatorSpawnRequest as ValidatorSpawnRequest
    from ._running._validator_runtime import run_validator_max_n as run_validator_max_n
    from ._storage._eventlog import EventLog as EventLog
    from ._storage._eventlog import MemoryEventLog as MemoryEventLog
    from ._storage._eventlog import SQLiteEventLog as SQLiteEventLog
    from ._storage._eventlog import default_event_log_path as default_event_log_path
    from ._storage._eventlog import read_events as read_events
    from ._storage._postgres import PostgresEventLog as PostgresEventLog
    from ._storage._resources import ApplyReport as ApplyReport
    from ._storage._resources import Change as Change
    from ._storage._resources import Changeset as Changeset
    from ._storage._resources import DirectoryResource as DirectoryResource
    from ._storage._resources import DirectorySandbox as DirectorySandbox
    from ._storage._resources import MemoryResource as MemoryResource
    from ._storage._resources import MemorySandbox as MemorySandbox
    from ._storage._resources import Resource as Resource
    from ._storage._resources import Sandbox as Sandbox
    from ._storage._store import CollectReport as CollectReport
    from ._storage._store import ContentStore as ContentStore
    from ._storage._store import ManifestEntry as ManifestEntry
    from ._storage._store import StoreError as StoreError
    from ._storage._store import StoreRetention as StoreRetention
    from ._storage._store import StoreStatistics as StoreStatistics
    from ._version import __version__ as __version__
    from ._views._picture import draw_dot as draw_dot
    from ._views._picture import draw_mermaid as draw_mermaid
    from ._views._plan_views import PlanSummary as PlanSummary
    from ._views._plan_views import list_plans as list_plans
    from ._views._plan_views import list_plans_sync as list_plans_sync
    from ._views._replay import ReplayReport as ReplayReport
    from ._views._replay import replay_plan as replay_plan

_WHERE: dict[str, str] = {
    "AGENT_ROLES": "._data._verdicts",
    "AUDIT_FILE": "._data._maxn",
    "AcceptanceCriterion": "._definitions._graph",
    "Actor": "._running._actors",
    "ActorFailedError": "._running._actors",
    "ActorRef": "._running._actors",
    "ActorScope": "._running._actors",
    "ActorSpec": "._definitions._graph",
    "AgentRole": "._data._verdicts",
    "Applicable": "._base._protocols",
    "ApplyCompleted": "._data._events",
    "ApplyConflictError": "._base._exceptions",
    "ApplyReport": "._storage._resources",
    "ApplyStarted": "._data._events",
    "ApplyTwiceError": "._base._exceptions",
    "ApprovalDecided": "._data._events",
    "ApprovalPolicy": "._definitions._graph",
    "ApprovalRequired": "._data._events",
    "ApprovalRule": "._definitions._graph",
    "ArtifactProduced": "._data._events",
    "ArtifactRejected": "._data._events",
    "ArtifactValidated": "._data._events",
    "ArtifactValidationStarted": "._data._events",
    "Attachment": "._data._models",
    "AttachmentId": "._data._models",
    "Attempt": "._data._maxn",
    "AttestationRequired": "._data._events",
    "AttestationsReceived": "._data._events",
    "AuditLog": "._data._maxn",
    "AuditRecorder": "._data._maxn",
    "Backoff": "._data._maxn",
    "Capability": "._data._models",
    "Catalog": "._definitions._catalog",
    "CatalogError": "._base._exceptions",
    "Change": "._storage._resources",
    "Changeset": "._storage._resources",
    "CollectReport": "._storage._store",
    "ConfigError": "._base._exceptions",
    "ConfigIssue": "._base._exceptions",
    "ConfirmationStarted": "._data._events",
    "ContentStore": "._storage._store",
    "Coverage": "._definitions._evidence",
    "DEFAULT_RETRY_LIMIT": "._data._maxn",
    "DirectoryResource": "._storage._resources",
    "DirectorySandbox": "._storage._resources",
    "DuplicateError": "._base._exceptions",
    "EscalationDecided": "._data._events",
    "EscalationDecision": "._base._protocols",
    "EscalationHandler": "._base._protocols",
    "EscalationRequest": "._base._protocols",
    "EscalationRequested": "._data._events",
    "Escalator": "._base._protocols",
    "Event": "._data._events",
    "EventBase": "._data._events",
    "EventId": "._base._ids",
    "EventLog": "._storage._eventlog",
    "EventObserver": "._running._observe",
    "EvidenceStore": "._definitions._evidence",
    "ExecuteRequest": "._base._protocols",
    "ExecutionActor": "._base._protocols",
    "Executor": "._lifecycle._executors",
    "FAULT_CATALOGUE": "._data._maxn",
    "FaultClass": "._data._maxn",
    "FaultFamily": "._data._maxn",
    "FaultKind": "._data._maxn",
    "FixRequest": "._base._protocols",
    "FixRequested": "._data._events",
    "FlakeRecord": "._definitions._catalog",
    "Gate": "._embed._gate",
    "GateClosedError": "._embed._gate",
    "GategraphError": "._base._exceptions",
    "GraphExecutor": "._lifecycle._supervisor",
    "GraphRun": "._running._engine",
    "GraphStrategy": "._lifecycle._supervisor",
    "InMemoryAuditLog": "._data._maxn",
    "IntegrityError": "._base._exceptions",
    "LAYERS": "._running._pipeline",
    "Lifecycle": "._definitions._graph",
    "LiveProgress": "._running._observe",
    "LocalExecutor": "._lifecycle._executors",
    "ManifestEntry": "._storage._store",
    "MaxNPolicy": "._data._maxn",
    "McpServer": "._calls._mcp",
    "McpSessions": "._calls._mcp",
    "MemoryEventLog": "._storage._eventlog",
    "MemoryEvidence": "._definitions._evidence",
    "MemoryResource": "._storage._resources",
    "MemorySandbox": "._storage._resources",
    "NAME_PATTERN": "._data._models",
    "NeedsApproval": "._running._pipeline",
    "Node": "._definitions._graph",
    "NodeCompleted": "._data._events",
    "NodeKind": "._definitions._graph",
    "NodeRequest": "._running._engine",
    "NodeResult": "._running._engine",
    "NodeSkipped": "._data._events",
    "NodeStarted": "._data._events",
    "NodeStatus": "._running._engine",
    "NotFoundError": "._base._exceptions",
    "ObservedEventLog": "._running._observe",
    "OpenTelemetryObserver": "._embed._telemetry",
    "Passed": "._running._pipeline",
    "PlainProgress": "._running._observe",
    "PlanBusyError": "._base._exceptions",
    "PlanCriterion": "._definitions._evidence",
    "PlanFinished": "._data._events",
    "PlanGraph": "._definitions._graph",
    "PlanId": "._base._ids",
    "PlanJournal": "._running._journal",
    "PlanOutcome": "._lifecycle._supervisor",
    "PlanResumed": "._data._events",
    "PlanRoster": "._definitions._evidence",
    "PlanStarted": "._data._events",
    "PlanStatistics": "._lifecycle._supervisor",
    "PlanStatus": "._lifecycle._supervisor",
    "Policy": "._definitions._graph",
    "ProgressState": "._running._observe",
    "RayExecutor": "._lifecycle._executors",
    "ReadOnlyViolationError": "._calls._readonly",
    "Reason": "._running._pipeline",
    "Rejected": "._running._pipeline",
    "ReplayReport": "._views._replay",
    "RerunDifference": "._lifecycle._rerun",
    "RerunReport": "._lifecycle._rerun",
    "RerunValidator": "._lifecycle._validator_spawn",
    "Resource": "._storage._resources",
    "ResourceSlot": "._data._models",
    "ResourceSpec": "._definitions._graph",
    "ResultError": "._data._results",
    "ResumeError": "._base._exceptions",
    "RetryBudget": "._data._maxn",
    "RetryDecided": "._data._events",
    "RetryDecision": "._data._maxn",
    "RoundSummary": "._base._protocols",
    "RunFinished": "._data._events",
    "RunStarted": "._data._events",
    "RuntimeFault": "._base._exceptions",
    "SQLiteEventLog": "._storage._eventlog",
    "PostgresEventLog": "._storage._postgres",
    "Sandbox": "._storage._resources",
    "SandboxLimits": "._base._kernel",
    "SandboxPool": "._calls._sandbox",
    "Scope": "._data._models",
    "Skill": "._definitions._skills",
    "SkillTools": "._running._skill_tools",
    "StoreError": "._storage._store",
    "StoreRetention": "._storage._store",
    "StoreStatistics": "._storage._store",
    "Strategy": "._base._protocols",
    "StrategyActor": "._base._protocols",
    "StrategyProduced": "._data._events",
    "StrategyRequest": "._base._protocols",
    "StrategyRevisionRequested": "._data._events",
    "Supervisor": "._lifecycle._supervisor",
    "Tool": "._data._models",
    "ToolContext": "._calls._context",
    "ToolHooks": "._data._models",
    "ToolSource": "._data._models",
    "ToolType": "._data._models",
    "Validation": "._data._models",
    "ValidationCompleted": "._data._events",
    "ValidationMode": "._data._models",
    "ValidationOutcome": "._running._pipeline",
    "ValidationRecord": "._running._engine",
    "ValidationResult": "._data._results",
    "ValidationStarted": "._data._events",
    "ValidatorAttestation": "._data._verdicts",
    "ValidatorFault": "._running._validator_runtime",
    "ValidatorFinding": "._data._verdicts",
    "ValidatorRejection": "._data._verdicts",
    "ValidatorRequest": "._base._protocols",
    "ValidatorRuntimeDeps": "._running._validator_runtime",
    "ValidatorRuntimeOptions": "._running._validator_runtime",
    "ValidatorRuntimeResult": "._running._validator_runtime",
    "ValidatorSpawnRequest": "._running._validator_runtime",
    "ValidatorVerdict": "._data._verdicts",
    "Verdict": "._embed._validate",
    "WorkFinished": "._data._events",
    "WorkWithdrawn": "._base._exceptions",
    "__version__": "._version",
    "build_verdict": "._running._pipeline",
    "classify": "._data._maxn",
    "coerce_result": "._data._results",
    "decode_event": "._data._events",
    "default_audit_path": "._data._maxn",
    "default_catalog_path": "._base._home",
    "default_event_log_path": "._storage._eventlog",
    "draw_dot": "._views._picture",
    "draw_mermaid": "._views._picture",
    "encode_event": "._data._events",
    "execute_graph": "._running._engine",
    "execute_graph_sync": "._running._engine",
    "is_agent_role": "._data._verdicts",
    "is_validator_attestation": "._data._verdicts",
    "is_validator_rejection": "._data._verdicts",
    "is_validator_verdict": "._data._verdicts",
    "load_graph": "._definitions._graph",
    "new_ulid": "._base._ids",
    "open_actor_scope": "._running._actors",
    "open_gate": "._embed._gate",
    "open_plan_mcp_sessions": "._running._engine",
    "parse_verdict": "._data._verdicts",
    "primary_fault": "._data._maxn",
    "progress_for": "._running._observe",
    "progress_line": "._running._observe",
    "read_audit": "._data._maxn",
    "read_events": "._storage._eventlog",
    "list_plans": "._views._plan_views",
    "list_plans_sync": "._views._plan_views",
    "PlanSummary": "._views._plan_views",
    "record_statistics": "._embed._telemetry",
    "register_validator": "._definitions._validator_tools",
    "replay_plan": "._views._replay",
    "rerun_rounds": "._lifecycle._rerun",
    "resume_gate": "._embed._gate",
    "resume_plan": "._lifecycle._supervisor",
    "resume_plan_sync": "._lifecycle._supervisor",
    "revoke_validator": "._definitions._validator_tools",
    "run_plan": "._lifecycle._supervisor",
    "run_plan_sync": "._lifecycle._supervisor",
    "run_validator_max_n": "._running._validator_runtime",
    "sandbox_pool": "._calls._sandbox",
    "sandbox_support": "._base._kernel",
    "telemetry_available": "._embed._telemetry",
    "tool_from_config": "._data._models",
    "use_uvloop": "._running._sync",
    "validate": "._embed._validate",
    "validate_sync": "._embed._validate",
    "validator_ac_pull": "._definitions._validator_tools",
    "validator_attest": "._definitions._validator_tools",
    "validator_reject": "._definitions._validator_tools",
    "validator_spawn": "._lifecycle._validator_spawn",
    "wait_backoff": "._data._maxn",
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


def _auto_tracing() -> Any:
    from ._embed._telemetry import auto_observer

    return auto_observer()


# Runs traced by themselves once the program sets OpenTelemetry up: the layer below that
# drives them asks through this hook (nothing is imported until a run asks).
importlib.import_module("._base._spans", __name__).set_auto_tracing(_auto_tracing)
