"""Built-in validations by name: usable in a graph or the catalog without registering them.

``gategraph.validators`` ships each built-in with a ready configuration (its entrypoint,
argument schema and resource slots). A graph that writes ``validation: python_syntax`` and a
``gategraph validation attach src/ regex`` both find them here when neither the graph nor the
catalog defines that name itself: what a user defines always wins over a built-in.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._models import Validation

__all__ = ["builtin", "builtin_names"]


@functools.cache
def _builtins() -> Mapping[str, Validation]:
    # Imported on first use: the validators use the runtime's public names, and most runs
    # of the runtime never ask for a built-in by name.
    from gategraph.validators import builtin_validations

    return {validation.name: validation for validation in builtin_validations()}


def builtin(name: str) -> Validation | None:
    """The built-in validation called ``name``, or ``None``."""
    return _builtins().get(name)


def builtin_names() -> tuple[str, ...]:
    """The names of the built-in validations, sorted."""
    return tuple(sorted(_builtins()))
