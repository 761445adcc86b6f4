"""gategraph: run AI-agent plans as actor graphs; nothing is applied until its validations pass.

The public API lives here; everything in a ``_module`` is private and may change.
"""

from ._catalog import Catalog as Catalog
from ._catalog import default_catalog_path as default_catalog_path
from ._context import ToolContext as ToolContext
from ._exceptions import CatalogError as CatalogError
from ._exceptions import ConfigError as ConfigError
from ._exceptions import ConfigIssue as ConfigIssue
from ._exceptions import DuplicateError as DuplicateError
from ._exceptions import GategraphError as GategraphError
from ._exceptions import IntegrityError as IntegrityError
from ._exceptions import NotFoundError as NotFoundError
from ._exceptions import RuntimeFault as RuntimeFault
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
    "Attachment",
    "AttachmentId",
    "Capability",
    "Catalog",
    "CatalogError",
    "ConfigError",
    "ConfigIssue",
    "DuplicateError",
    "GategraphError",
    "IntegrityError",
    "NotFoundError",
    "ReadOnlyViolationError",
    "ResourceSlot",
    "ResultError",
    "RuntimeFault",
    "Scope",
    "Tool",
    "ToolContext",
    "ToolHooks",
    "ToolSource",
    "ToolType",
    "Validation",
    "ValidationMode",
    "ValidationResult",
    "ValidatorAttestation",
    "ValidatorFinding",
    "ValidatorRejection",
    "__version__",
    "coerce_result",
    "default_catalog_path",
    "is_validator_attestation",
    "is_validator_rejection",
    "is_validator_verdict",
    "parse_verdict",
    "tool_from_config",
]
