"""The worker process that reads installed plugins' declarations, away from gategraph.

Started by :mod:`.._definitions._plugins` as ``python -P -c "...main()" <folder>``, in its own folder
and session, with the environment a sandboxed worker gets (no API keys or tokens). Its
request is one JSON document on descriptor 0, read whole before any plugin code runs::

    {"path": [...], "confine": {"limits": {...}, "hidden": [...]} | null,
     "entries": [[name, value], ...]}

With ``confine``, it confines itself with the kernel (:func:`.._base._kernel.confine`: its
folder the only writable place, no network, its databases hidden); without it (a machine
that cannot sandbox), it runs under the in-process read-only guard. Then it says
``{"ready": true}`` (or ``{"refused": why}``) and, per entry point, in order, loads it as
``importlib.metadata`` would, calls it if it is a function, and answers
``{"index": i, "declared": <the declaration as JSON-like data>}`` or
``{"index": i, "failed": "<why, on one line>"}``. One JSON object per line on what was
descriptor 1; descriptors 0, 1 and 2 then lead to ``/dev/null``, so nothing a plugin
prints reaches gategraph or its user.

Nothing here trusts the plugin, and gategraph trusts nothing it says: the parent checks
every answer, and kills the worker's process group once it has them all, or when one is
late or cannot be read.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["GROUP", "main", "one_line"]

GROUP: Final = "gategraph.validations"
"""The entry-point group plugins register their validations under."""

_MOST_SAID: Final = 300
"""Characters of a plugin's own message kept in the line that says why it is left out."""


def one_line(text: str) -> str:
    """``text`` on one line, shortened: a plugin's words, as a problem line shows them."""
    return " ".join(text.split())[:_MOST_SAID]


def _said(exc: BaseException) -> str:
    """What ``exc`` says, on one line, whatever its ``__str__`` does."""
    try:
        text = str(exc)
    except Exception:
        text = "(its message cannot be shown)"
    return one_line(text)


class _NotPlainError(ValueError):
    """A declaration holds a value that cannot leave the worker as JSON."""


def _plain(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-like data: mappings with string keys, lists, strings, numbers,
    booleans and None; a model (a :class:`Validation` made with gategraph's own classes)
    as its configuration."""
    if depth > 64:
        raise _NotPlainError("it is nested more than 64 levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise _NotPlainError(f"it holds {value!r}, which JSON cannot carry")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return _plain(dump(mode="json", exclude_defaults=True), depth + 1)
    if isinstance(value, Mapping):
        plain: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotPlainError(f"it has a key that is not a string ({type(key).__name__})")
            plain[key] = _plain(item, depth + 1)
        return plain
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [_plain(item, depth + 1) for item in value]
    raise _NotPlainError(f"it holds a value of type {type(value).__name__}")


def _declare(index: int, name: str, value: str) -> dict[str, Any]:
    """Read one entry point's declaration: its answer."""
    try:
        found = importlib.metadata.EntryPoint(name, value, GROUP).load()
        if callable(found) and not isinstance(found, Sequence):
            found = found()
        declared = _plain(found)
    except _NotPlainError as exc:
        why = f"its declaration is not plain data (JSON-like): {exc}"
        return {"index": index, "failed": why}
    except BaseException as exc:
        # The plugin's own code failed to import or to run, or tried to end the process
        # (SystemExit): this entry point is left out, and the worker reads the next.
        return {"index": index, "failed": f"{type(exc).__name__}: {_said(exc)}"}
    return {"index": index, "declared": declared}


def _answer(fd: int, answer: dict[str, Any]) -> None:
    data = memoryview(json.dumps(answer, allow_nan=False).encode() + b"\n")
    while data:
        data = data[os.write(fd, data) :]


def main() -> None:
    from gategraph.runtime._base._kernel import close_inherited

    close_inherited()  # nothing of gategraph's own open files reaches a plugin's code
    folder = sys.argv[1]
    with os.fdopen(os.dup(0), "rb") as requests:
        request = json.loads(requests.read())
    answers = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    sys.path[:] = request["path"]
    confined = request["confine"]
    try:
        if confined is not None:
            from gategraph.runtime._base._kernel import SandboxLimits, confine

            confine(folder, SandboxLimits(**confined["limits"]), confined["hidden"])
        else:
            from . import _readonly

            # The strongest level without the kernel's help: writes, commands, network
            # and environment changes refused by the read-only guard, for every thread.
            _readonly.guard_process()
            _readonly.enter_process(_readonly.Guard("a plugin's declaration", pure=True))
    except Exception as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        _answer(answers, {"refused": one_line(why)})
        return
    _answer(answers, {"ready": True})
    for index, (name, value) in enumerate(request["entries"]):
        _answer(answers, _declare(index, name, value))
