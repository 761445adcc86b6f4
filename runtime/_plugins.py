"""Plugins: installed packages that register validations (seed 002 §18).

A package registers validations under the entry-point group ``gategraph.validations``;
each entry point names a *declaration*: a list of validation configurations (the format
of ``gategraph tool add --config``), or a function returning one::

    [project.entry-points."gategraph.validations"]
    my-checks = "my_checks.declare:VALIDATIONS"

Its validations join the catalog's namespace by name, after what the catalog and graphs
define and after the built-ins (theirs win), marked as coming from that package
(``plugin``). A plugin's code is untrusted: each of its validations runs in the kernel
sandbox, whatever a node asks, and its entrypoint is never imported into gategraph's own
process (only the declaration is read: keep it to data). A plugin adds validations
only: the pipeline's layers and their order are fixed (seed 002 §12), and a declaration
that tries to place itself in it is refused. A plugin that cannot be read is left out
with one line saying why; it never stops gategraph.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ._exceptions import ConfigError

if TYPE_CHECKING:
    from ._models import Validation

__all__ = ["GROUP", "plugin_problems", "plugin_validation", "plugin_validations"]

GROUP: Final = "gategraph.validations"
"""The entry-point group plugins register their validations under."""

# What a declaration may not say: its place among the layers is not its to choose.
_LAYER_KEYS: Final = frozenset({"layer", "layers", "order", "before", "after", "stage"})


class _Loaded:
    def __init__(self) -> None:
        self.validations: dict[str, Validation] = {}
        self.problems: list[str] = []


def _declared(entry: importlib.metadata.EntryPoint) -> Sequence[Any]:
    found = entry.load()
    if callable(found) and not isinstance(found, Sequence):
        found = found()
    if isinstance(found, Mapping) or not isinstance(found, Sequence) or isinstance(found, str):
        raise ConfigError("the declaration must be a list of validation configurations")
    return found


def _one(config: Any, package: str, index: int) -> Validation:
    from ._models import Validation

    if isinstance(config, Validation):
        config = config.model_dump(mode="json", exclude_defaults=True)
    if not isinstance(config, Mapping):
        raise ConfigError.at(f"[{index}]", "must be a validation configuration (a mapping)")
    placed = sorted(_LAYER_KEYS & set(config))
    if placed:
        raise ConfigError.at(
            f"[{index}].{placed[0]}",
            "a plugin adds validations only: the pipeline's layers and their order are "
            "fixed (routing, payload, semantic, approval)",
        )
    if config.get("tool_type", "validation") != "validation":
        raise ConfigError.at(f"[{index}].tool_type", "a plugin registers validations only")
    if "code" in config:
        raise ConfigError.at(
            f"[{index}].code", "a plugin's validation names its code with `entrypoint`"
        )
    for key in ("wraps", "transform"):
        if key in config:
            raise ConfigError.at(
                f"[{index}].{key}", "a plugin's validation is its own code (`entrypoint`)"
            )
    name = config.get("name")
    if isinstance(name, str) and (name.startswith("gategraph.") or name in _reserved()):
        raise ConfigError.at(f"[{index}].name", f"{name!r} is a name gategraph keeps")
    marked = {**config, "untrusted": True, "plugin": package, "tool_type": "validation"}
    return Validation.from_config(marked)


@functools.cache
def _load() -> _Loaded:
    from ._builtins import builtin

    loaded = _Loaded()
    entries = sorted(
        importlib.metadata.entry_points(group=GROUP),
        key=lambda e: (e.dist.name if e.dist else "", e.name),
    )
    for entry in entries:
        package = entry.dist.name if entry.dist is not None else entry.value.split(":")[0]
        where = f"plugin {package} (entry point {entry.name!r} = {entry.value!r})"
        try:
            configs = _declared(entry)
            made = [_one(config, package, i) for i, config in enumerate(configs)]
        except ConfigError as exc:
            issue = exc.issues[0]
            field = f"{issue.field}: " if issue.field else ""
            loaded.problems.append(f"{where}: {field}{issue.message}")
            continue
        except (Exception, SystemExit, GeneratorExit) as exc:
            # The plugin's own code failed to import or to run (or tried to end the
            # program): left out. A person's Ctrl-C still stops gategraph.
            loaded.problems.append(f"{where}: {type(exc).__name__}: {_said(exc)}")
            continue
        for validation in made:
            name = validation.name
            if builtin(name) is not None:
                loaded.problems.append(f"{where}: {name!r} is a built-in's name: left out")
            elif name in loaded.validations:
                first = loaded.validations[name].plugin
                loaded.problems.append(f"{where}: {name!r} is plugin {first}'s already: left out")
            else:
                loaded.validations[name] = validation
    return loaded


def _reserved() -> frozenset[str]:
    from ._validator_tools import VALIDATOR_TOOLS

    return frozenset(VALIDATOR_TOOLS)


def _said(exc: BaseException) -> str:
    """What ``exc`` says, on one line, whatever its ``__str__`` does."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message cannot be shown)"
    return " ".join(text.split())[:300]


def plugin_validation(name: str) -> Validation | None:
    """The installed plugins' validation called ``name``, or None."""
    return _load().validations.get(name)


def plugin_validations() -> list[Validation]:
    """Every installed plugin's validation, by name."""
    loaded = _load().validations
    return [loaded[name] for name in sorted(loaded)]


def plugin_problems() -> list[str]:
    """One line per plugin (or validation of one) that was left out, and why."""
    return list(_load().problems)
