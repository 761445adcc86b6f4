"""Built-in validations and tools by name: usable in a graph or the catalog without
registering them.

``gategraph.validators`` ships each built-in with a ready configuration (its entrypoint,
argument schema and resource slots). A graph that writes ``validation: python_syntax`` and a
``gategraph validation attach src/ regex`` both find them here when neither the graph nor the
catalog defines that name itself: what a user defines always wins over a built-in. The
built-in tools are the validator tools (``validator.ac-pull``, ``validator.attest``,
``validator.reject``): how a validator outside a plan reviews it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._models import Tool

__all__ = ["builtin", "builtin_names", "copies", "in_process"]


@functools.cache
def _configs() -> Mapping[str, tuple[Mapping[str, Any], bool]]:
    """Each built-in's configuration, and whether it is a validation (else a tool)."""
    # Imported on first use: the validators use the runtime's public names, and most runs
    # of the runtime never ask for a built-in by name.
    from gategraph.validators import BUILTIN_CONFIGS

    from ._validator_declarations import VALIDATOR_TOOLS

    found = {name: (config, True) for name, config in BUILTIN_CONFIGS.items()}
    found.update({name: (config, False) for name, config in VALIDATOR_TOOLS.items()})
    return found


@functools.cache
def _built(name: str) -> Tool | None:
    # One at a time: a plan uses a few, and building one checks its argument schema.
    found = _configs().get(name)
    if found is None:
        return None
    from ._models import Tool, Validation

    config, validation = found
    return (Validation if validation else Tool).from_config(dict(config), trusted=True)


_TESTING: Final = "gategraph.runtime.testing:"


@functools.cache
def _own_readers() -> frozenset[str]:
    from gategraph.validators import BUILTIN_CONFIGS, IN_PROCESS

    from ._validator_declarations import VALIDATOR_TOOLS

    return frozenset(
        {BUILTIN_CONFIGS[name]["entrypoint"] for name in IN_PROCESS}
        | {config["entrypoint"] for config in VALIDATOR_TOOLS.values()}
    )


def in_process(tool: Tool) -> bool:
    """Whether ``tool`` is gategraph's own code that runs none of the candidate's: the
    built-ins that only read, the validator tools, the fakes of ``gategraph.runtime.testing``.
    These run in gategraph's own process by default; every other callable (a graph's, the
    catalog's, a plugin's, and the built-ins that run the candidate's tests) runs in the
    kernel sandbox by default.

    Told by the entrypoint, not the name: a user's own validation called ``python_syntax``
    is the user's code."""
    entrypoint = tool.entrypoint
    if entrypoint is None or tool.code is not None:
        return False
    if entrypoint in _own_readers():
        return True
    # Only the module's own fakes by name: `testing:anyio.run_process` is not one.
    if entrypoint.startswith(_TESTING):
        from gategraph.runtime import testing

        return entrypoint[len(_TESTING) :] in testing.__all__
    return False


@functools.cache
def _copiers() -> frozenset[str]:
    from gategraph.validators import BUILTIN_CONFIGS, COPYING

    return frozenset(BUILTIN_CONFIGS[name]["entrypoint"] for name in COPYING)


def copies(tool: Tool) -> bool:
    """Whether ``tool`` runs against a copy of its folder (``context.disposable_copy``):
    in the kernel sandbox its worker then holds a copy-on-write view of each, which the
    call gets in place of a copy. Told by the entrypoint, as :func:`in_process` is."""
    return tool.code is None and tool.entrypoint in _copiers()


def builtin(name: str) -> Tool | None:
    """The built-in validation or tool called ``name``, or ``None``."""
    return _built(name)


def builtin_names() -> tuple[str, ...]:
    """The names of the built-in validations and tools, sorted."""
    return tuple(sorted(_configs()))
