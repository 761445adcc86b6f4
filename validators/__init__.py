"""gategraph's built-in validation library.

Each validation here is a real check a user can attach on day one; ``docs/validators.md``
describes them with examples. They are plain functions the engine calls with keyword
arguments only — the configured arguments, ``artifact`` (the artifact under validation),
``root`` (the directory resource, a ``pathlib.Path``) and ``context`` (a
:class:`~gategraph.runtime.ToolContext`) as each signature asks — and they return
``{"passed": bool, "message": str, "data": {...}}``. None of them writes: ``pytest_suite``
and ``unittest_suite`` run the tests on a disposable copy in the call's scratch folder. Wrong arguments give
``passed: False`` with ``data["error"] == "bad_arguments"``, never an exception.

:data:`BUILTIN_CONFIGS` holds a ready validation configuration for each, and
:func:`builtin_validations` builds them, for example to register them all::

    for validation in builtin_validations():
        catalog.add(validation, update=True)

This package uses only the public names of :mod:`gategraph.runtime`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from gategraph.runtime import Validation

    from ._json_schema import json_schema as json_schema
    from ._paths_exist import paths_exist as paths_exist
    from ._pytest import pytest_suite as pytest_suite
    from ._python_syntax import python_syntax as python_syntax
    from ._regex import regex as regex
    from ._unittest import unittest_suite as unittest_suite
    from ._unsafe_command import unsafe_command as unsafe_command

# Each check's module is imported when the check is first asked for (PEP 562): a plan
# that uses one built-in loads that one, not the policy tables of the others.
_MODULES: Final = {
    "json_schema": "._json_schema",
    "paths_exist": "._paths_exist",
    "pytest_suite": "._pytest",
    "python_syntax": "._python_syntax",
    "regex": "._regex",
    "unittest_suite": "._unittest",
    "unsafe_command": "._unsafe_command",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULES})


__all__ = [
    "BUILTIN_CONFIGS",
    "IN_PROCESS",
    "builtin_validations",
    "json_schema",
    "paths_exist",
    "pytest_suite",
    "python_syntax",
    "regex",
    "unittest_suite",
    "unsafe_command",
]

_STRINGS: Final = {"type": "array", "items": {"type": "string"}}


def _root(description: str, *, required: bool = True) -> list[dict[str, Any]]:
    return [{"name": "root", "kind": "directory", "description": description, "required": required}]


# A test suite's processes, and what runs first: the same for pytest_suite and unittest_suite.
_SHARDS: Final[dict[str, Any]] = {
    "anyOf": [
        {"const": "auto"},
        {"type": "integer", "minimum": 1, "maximum": 64},
    ],
    "description": "How many processes share the suite: auto (one per core where copies "
    "cost nothing: in the kernel sandbox) or a number.",
}
_FAILED_FIRST: Final[dict[str, Any]] = {
    "type": "boolean",
    "default": True,
    "description": "Run first the tests that failed when the validation last ran in the "
    "plan, and stop if one still fails.",
}

BUILTIN_CONFIGS: Final[dict[str, dict[str, Any]]] = {
    "json_schema": {
        "name": "json_schema",
        "description": "The artifact matches a JSON Schema (Draft 2020-12 unless $schema says).",
        "entrypoint": "gategraph.validators:json_schema",
        "input_schema": {
            "type": "object",
            "properties": {
                "schema": {
                    "type": ["object", "boolean"],
                    "description": "The JSON Schema the artifact must match.",
                },
                "check_formats": {
                    "type": "boolean",
                    "default": False,
                    "description": "Also assert `format` (email, date-time, ...).",
                },
            },
            "required": ["schema"],
            "additionalProperties": False,
        },
        "timeout": 30,
    },
    "paths_exist": {
        "name": "paths_exist",
        "description": "Every file path the artifact mentions exists in the folder.",
        "entrypoint": "gategraph.validators:paths_exist",
        "input_schema": {
            "type": "object",
            "properties": {
                "fields": {
                    "type": ["array", "null"],
                    "items": {"type": "string"},
                    "description": "Top-level keys holding the paths; default: find them.",
                },
            },
            "additionalProperties": False,
        },
        "resource_slots": _root("The folder the paths are relative to."),
        "timeout": 60,
    },
    "unsafe_command": {
        "name": "unsafe_command",
        "description": "The artifact's shell commands break no safety rule (rm -rf /, curl | sh, sudo ...).",
        "entrypoint": "gategraph.validators:unsafe_command",
        "input_schema": {
            "type": "object",
            "properties": {
                "policy": {
                    "type": ["object", "null"],
                    "properties": {
                        "deny": {
                            "type": "array",
                            "items": {
                                "anyOf": [
                                    {"type": "string"},
                                    {
                                        "type": "object",
                                        "properties": {
                                            "program": {"type": "string"},
                                            "args_contain": {
                                                "anyOf": [{"type": "string"}, _STRINGS]
                                            },
                                            "reason": {"type": "string"},
                                            "rule": {"type": "string"},
                                        },
                                        "required": ["program"],
                                        "additionalProperties": False,
                                    },
                                ]
                            },
                        },
                        "allow": _STRINGS,
                    },
                    "additionalProperties": False,
                    "description": "More `deny` rules; `allow` programs or rule ids.",
                },
            },
            "additionalProperties": False,
        },
        "timeout": 30,
    },
    "regex": {
        "name": "regex",
        "description": "A regular expression does not (or does) occur in the artifact or the files.",
        "entrypoint": "gategraph.validators:regex",
        "input_schema": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "minLength": 1},
                "files": {"type": "string", "default": "**/*"},
                "exclude": _STRINGS,
                "mode": {"enum": ["forbid", "require"], "default": "forbid"},
                "scope": {
                    "enum": ["change", "tree"],
                    "description": "Search only the files a plan's change added or modified "
                    "(change: the default when forbidding), or every file (tree: the default "
                    "when requiring).",
                },
                "flags": {
                    "type": "array",
                    "items": {
                        "type": "string",
                        "pattern": "^(?i:ignorecase|multiline|dotall|verbose|ascii|[imsxa])$",
                    },
                },
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
        "resource_slots": _root("The folder to search; without it, the artifact.", required=False),
        "timeout": 120,
    },
    "python_syntax": {
        "name": "python_syntax",
        "description": "The Python files a plan's change touched parse (every file in the "
        "folder with scope: tree).",
        "entrypoint": "gategraph.validators:python_syntax",
        "input_schema": {
            "type": "object",
            "properties": {
                "include": {"type": "string", "default": "**/*.py"},
                "exclude": _STRINGS,
                "scope": {
                    "enum": ["change", "tree"],
                    "default": "change",
                    "description": "Parse only the files a plan's change added or modified "
                    "(change), or every file (tree).",
                },
            },
            "additionalProperties": False,
        },
        "resource_slots": _root("The folder to check."),
        "timeout": 300,
    },
    "pytest_suite": {
        "name": "pytest_suite",
        "description": "The project's pytest suite passes (run on a disposable copy).",
        "entrypoint": "gategraph.validators:pytest_suite",
        "input_schema": {
            "type": "object",
            "properties": {
                "args": {**_STRINGS, "description": "More pytest arguments."},
                "timeout": {
                    "type": ["number", "null"],
                    "exclusiveMinimum": 0,
                    "description": "Seconds before pytest is killed.",
                },
                "shards": _SHARDS,
                "failed_first": _FAILED_FIRST,
            },
            "additionalProperties": False,
        },
        "resource_slots": _root("The project folder."),
        "timeout": 1800,
    },
    "unittest_suite": {
        "name": "unittest_suite",
        "description": "The project's unittest suite passes (standard library; run on a disposable copy).",
        "entrypoint": "gategraph.validators:unittest_suite",
        "input_schema": {
            "type": "object",
            "properties": {
                "start": {"type": "string", "minLength": 1, "default": "tests"},
                "paths": {**_STRINGS, "description": "Folders put on PYTHONPATH."},
                "pattern": {"type": "string", "minLength": 1, "default": "test*.py"},
                "timeout": {
                    "type": ["number", "null"],
                    "exclusiveMinimum": 0,
                    "description": "Seconds before the run is killed.",
                },
                "shards": _SHARDS,
                "failed_first": _FAILED_FIRST,
            },
            "additionalProperties": False,
        },
        "resource_slots": _root("The project folder."),
        "timeout": 1800,
    },
}
"""A validation configuration for each built-in, by name, for ``Validation.from_config``."""


IN_PROCESS: Final = frozenset(
    {"json_schema", "paths_exist", "python_syntax", "regex", "unsafe_command"}
)
"""The built-ins that only read (the artifact, the folder) and run none of the candidate's
code: gategraph runs them in its own process, under its guard. The others
(``pytest_suite``, ``unittest_suite``) run the candidate's code (its tests, its
``conftest.py``), which is the least trusted code there is: they run in the kernel sandbox
by default, like every validation whose code is not gategraph's own."""

COPYING: Final = frozenset({"pytest_suite", "unittest_suite"})
"""The built-ins that run against ``context.disposable_copy`` of their folder: in the kernel
sandbox, a copy-on-write view of it, nothing copied."""


def builtin_validations() -> list[Validation]:
    """Build a :class:`~gategraph.runtime.Validation` for each of :data:`BUILTIN_CONFIGS`."""
    from gategraph.runtime import Validation

    return [Validation.from_config(config) for config in BUILTIN_CONFIGS.values()]
