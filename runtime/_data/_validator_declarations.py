"""What the validator tools are, as a catalog sees them: their names and configurations.

Data only, low in the runtime: the catalog, the built-ins, plugins, skills and the MCP
server reserve these names and list these tools without importing the code that runs them
(``_validator_tools``, which reads the catalog and the evidence store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from ._verdicts import AGENT_ROLES

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["AC_PULL", "ATTEST", "REJECT", "SPAWN", "VALIDATOR_TOOLS"]

SPAWN: Final = "spawn.validator"
AC_PULL: Final = "validator.ac-pull"
ATTEST: Final = "validator.attest"
REJECT: Final = "validator.reject"

_CALLER: Final = {
    "type": "object",
    "properties": {"role": {"type": "string", "enum": list(AGENT_ROLES)}},
    "required": ["role"],
}
_CREDENTIAL: Final = {
    "type": "string",
    "description": "The validator's credential: issued by spawn.validator, or registered "
    "for its validatorId by a person (gategraph validator register). Without it the "
    "verdict is refused.",
}
_ROOT: Final = {
    "type": "string",
    "description": "A project folder: its .gategraph catalog holds the plan. Default: the "
    "catalog the tool is served from, or the calling plan's.",
}

VALIDATOR_TOOLS: Final[Mapping[str, dict[str, Any]]] = {
    AC_PULL: {
        "name": AC_PULL,
        "description": "List a plan's acceptance criteria (id, alias, ordinal, text) and "
        "whether a validator's attestation covers each one. Read-only.",
        "entrypoint": "gategraph.runtime._definitions._validator_tools:ac_pull",
        "capability": {"read_only": True},
        "input_schema": {
            "type": "object",
            "properties": {
                "task_id": {
                    "type": "string",
                    "description": "The plan's id (for a node of a plan: its own plan, "
                    "by default).",
                },
                "project_root": _ROOT,
            },
            "additionalProperties": False,
        },
    },
    ATTEST: {
        "name": ATTEST,
        "description": "Attest a plan's acceptance criteria as an independent validator: "
        "a ValidatorAttestation (every finding passes) binds one coverage record per "
        "criterion it names. A plan is applied only when every criterion is covered.",
        "entrypoint": "gategraph.runtime._definitions._validator_tools:attest",
        "idempotent": True,
        "input_schema": {
            "type": "object",
            "properties": {
                "caller": _CALLER,
                "attestation": {"type": "object"},
                "credential": _CREDENTIAL,
                "project_root": _ROOT,
            },
            "required": ["caller", "attestation", "credential"],
            "additionalProperties": False,
        },
    },
    REJECT: {
        "name": REJECT,
        "description": "Reject a plan as an independent validator: a ValidatorRejection "
        "(at least one finding fails or is inconclusive) is checked, recorded as the "
        "validator's latest verdict, and its failing criteria returned. By default a plan "
        "is not applied while a rejection stands.",
        "entrypoint": "gategraph.runtime._definitions._validator_tools:reject",
        "idempotent": True,
        "input_schema": {
            "type": "object",
            "properties": {
                "caller": _CALLER,
                "rejection": {"type": "object"},
                "credential": _CREDENTIAL,
                "project_root": _ROOT,
            },
            "required": ["caller", "rejection", "credential"],
            "additionalProperties": False,
        },
    },
    SPAWN: {
        "name": SPAWN,
        "description": "Start a new, independent validator of a plan as a lead or the "
        "orchestrator (tier 1 or 2): it checks every acceptance criterion on a copy of the "
        "plan's candidate (what its last passing round validated) and its verdict is "
        "submitted as validator.attest or validator.reject would. Never the plan's worker, "
        "never a validator that served before.",
        "entrypoint": "gategraph.runtime._lifecycle._validator_spawn:spawn",
        "input_schema": {
            "type": "object",
            "properties": {
                "caller": {
                    "type": "object",
                    "properties": {
                        "role": {"type": "string", "enum": ["orchestrator", "lead"]},
                        "tier": {"type": "integer", "enum": [0, 1, 2]},
                    },
                    "required": ["role", "tier"],
                },
                "task_id": {
                    "type": "string",
                    "description": "The plan's id (for a node of a plan: its own plan, "
                    "by default).",
                },
                "spawn_scope": {
                    "type": "string",
                    "description": "What the validator is for: its id is made from it.",
                },
                "no_worktree": {
                    "type": "boolean",
                    "description": "Check the plan's sandboxes themselves, not a copy.",
                },
                "project_root": _ROOT,
            },
            "required": ["caller"],
            "additionalProperties": False,
        },
    },
}
"""The validator tools' configurations, by name (built-in tools of the catalog)."""
