"""gategraph: run AI-agent plans as actor graphs; nothing is applied until its validations pass.

The public API lives here; everything in a ``_module`` is private and may change.
"""

from ._actors import Actor as Actor
from ._actors import ActorFailedError as ActorFailedError
from ._actors import ActorRef as ActorRef
from ._actors import ActorScope as ActorScope
from ._actors import open_actor_scope as open_actor_scope
from ._catalog import Catalog as Catalog
from ._catalog import default_catalog_path as default_catalog_path
from ._context import ToolContext as ToolContext
from ._engine import GraphRun as GraphRun
from ._engine import NodeRequest as NodeRequest
from ._engine import NodeResult as NodeResult
from ._engine import NodeStatus as NodeStatus
from ._engine import ValidationRecord as ValidationRecord
from ._engine import execute_graph as execute_graph
from ._eventlog import EventLog as EventLog
from ._eventlog import MemoryEventLog as MemoryEventLog
from ._eventlog import SQLiteEventLog as SQLiteEventLog
from ._eventlog import default_event_log_path as default_event_log_path
from ._eventlog import read_events as read_events
from ._events import ArtifactProduced as ArtifactProduced
from ._events import Event as Event
from ._events import EventBase as EventBase
from ._events import NodeCompleted as NodeCompleted
from ._events import NodeSkipped as NodeSkipped
from ._events import NodeStarted as NodeStarted
from ._events import RunFinished as RunFinished
from ._events import RunStarted as RunStarted
from ._events import ValidationCompleted as ValidationCompleted
from ._events import ValidationStarted as ValidationStarted
from ._events import decode_event as decode_event
from ._events import encode_event as encode_event
from ._exceptions import CatalogError as CatalogError
from ._exceptions import ConfigError as ConfigError
from ._exceptions import ConfigIssue as ConfigIssue
from ._exceptions import DuplicateError as DuplicateError
from ._exceptions import GategraphError as GategraphError
from ._exceptions import IntegrityError as IntegrityError
from ._exceptions import NotFoundError as NotFoundError
from ._exceptions import RuntimeFault as RuntimeFault
from ._graph import AcceptanceCriterion as AcceptanceCriterion
from ._graph import ApprovalPolicy as ApprovalPolicy
from ._graph import ApprovalRule as ApprovalRule
from ._graph import Node as Node
from ._graph import NodeKind as NodeKind
from ._graph import PlanGraph as PlanGraph
from ._graph import Policy as Policy
from ._graph import ResourceSpec as ResourceSpec
from ._graph import load_graph as load_graph
from ._ids import EventId as EventId
from ._ids import PlanId as PlanId
from ._ids import new_ulid as new_ulid
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
from ._readonly import ReadOnlyViolationError as ReadOnlyViolationError
from ._results import ResultError as ResultError
from ._results import ValidationResult as ValidationResult
from ._results import coerce_result as coerce_result
from ._verdicts import ValidatorAttestation as ValidatorAttestation
from ._verdicts import ValidatorFinding as ValidatorFinding
from ._verdicts import ValidatorRejection as ValidatorRejection
from ._verdicts import is_validator_attestation as is_validator_attestation
from ._verdicts import is_validator_rejection as is_validator_rejection
from ._verdicts import is_validator_verdict as is_validator_verdict
from ._verdicts import parse_verdict as parse_verdict
from ._version import __version__ as __version__

__all__ = [
    "NAME_PATTERN",
    "AcceptanceCriterion",
    "Actor",
    "ActorFailedError",
    "ActorRef",
    "ActorScope",
    "ApprovalPolicy",
    "ApprovalRule",
    "ArtifactProduced",
    "Attachment",
    "AttachmentId",
    "Capability",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "ConfigIssue",
    "DuplicateError",
    "Event",
    "EventBase",
    "EventId",
    "EventLog",
    "GategraphError",
    "GraphRun",
    "IntegrityError",
    "MemoryEventLog",
    "Node",
    "NodeCompleted",
    "NodeKind",
    "NodeRequest",
    "NodeResult",
    "NodeSkipped",
    "NodeStarted",
    "NodeStatus",
    "NotFoundError",
    "PlanGraph",
    "PlanId",
    "Policy",
    "ReadOnlyViolationError",
    "ResourceSlot",
    "ResourceSpec",
    "ResultError",
    "RunFinished",
    "RunStarted",
    "RuntimeFault",
    "SQLiteEventLog",
    "Scope",
    "Tool",
    "ToolContext",
    "ToolHooks",
    "ToolSource",
    "ToolType",
    "Validation",
    "ValidationCompleted",
    "ValidationMode",
    "ValidationRecord",
    "ValidationResult",
    "ValidationStarted",
    "ValidatorAttestation",
    "ValidatorFinding",
    "ValidatorRejection",
    "__version__",
    "coerce_result",
    "decode_event",
    "default_catalog_path",
    "default_event_log_path",
    "encode_event",
    "execute_graph",
    "is_validator_attestation",
    "is_validator_rejection",
    "is_validator_verdict",
    "load_graph",
    "new_ulid",
    "open_actor_scope",
    "parse_verdict",
    "read_events",
    "tool_from_config",
]
