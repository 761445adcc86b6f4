"""Plugins: installed packages that register validations (seed 002 §18).

A package registers validations under the entry-point group ``gategraph.validations``;
each entry point names a *declaration*: a list of validation configurations (the format
of ``gategraph tool add --config``), or a function returning one::

    [project.entry-points."gategraph.validations"]
    my-checks = "my_checks.declare:VALIDATIONS"

Its validations join the catalog's namespace by name, after what the catalog and graphs
define and after the built-ins (theirs win), marked as coming from that package
(``plugin``). A plugin's code is untrusted, its declaration included: gategraph's own
process reads the entry points as metadata only (names, values, distributions) and
imports nothing of a plugin. The declarations are evaluated in a worker process
(:mod:`.._calls._plugin_worker`), once per process and only when a name is looked up that
nothing else defines: confined by the kernel where this machine can sandbox, else under
the read-only guard; always with a stripped environment and a timeout per entry point.
The worker answers plain data, checked here as any configuration is. Each validation then
runs in the kernel sandbox, whatever a node asks. A plugin adds validations only: the
pipeline's layers and their order are fixed (seed 002 §12), and a declaration that tries
to place itself in it is refused. A plugin that cannot be read (it raises, exits, crashes,
hangs, answers what cannot be read) is left out with one line saying why; it never stops
gategraph, nor changes what it prints or how it exits.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.metadata
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from gategraph.runtime._base._exceptions import ConfigError
from gategraph.runtime._calls._plugin_worker import GROUP, one_line
from gategraph.runtime._data._builtins import builtin

if TYPE_CHECKING:
    from gategraph.runtime._data._models import Tool, Validation

__all__ = [
    "GROUP",
    "plugin_problems",
    "plugin_validation",
    "plugin_validations",
    "shipped",
    "shipped_names",
]

# What a declaration may not say: its place among the layers is not its to choose.
_LAYER_KEYS: Final = frozenset({"layer", "layers", "order", "before", "after", "stage"})

TIMEOUT_VARIABLE: Final = "GATEGRAPH_PLUGIN_TIMEOUT"
_TIMEOUT: Final = 10.0
"""Seconds one entry point's declaration may take to be read, by default."""
_START_TIMEOUT: Final = 60.0
"""Seconds the worker has to start (and confine itself) before it reads any declaration."""
_MAX_ANSWER: Final = 16 << 20
"""The longest answer read from the worker, in bytes: a declaration is far smaller."""
_COMMAND: Final = "from gategraph.runtime._calls._plugin_worker import main; main()"


@dataclasses.dataclass(frozen=True)
class _Entry:
    name: str
    value: str
    package: str

    @property
    def where(self) -> str:
        return f"plugin {self.package} (entry point {self.name!r} = {self.value!r})"


class _Loaded:
    def __init__(self) -> None:
        self.validations: dict[str, Validation] = {}
        self.problems: list[str] = []


class _Late(Exception):
    """No answer came from the worker in time."""


class _Ended(Exception):
    """The worker's answers ended."""


class _Garbled(Exception):
    """The worker said something that is not an answer."""


class _Answers:
    """The worker's answers, one JSON object a line, each awaited with a deadline."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        self.fd = process.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.fd, selectors.EVENT_READ)
        self.lines: list[bytes] = []
        self.partial = bytearray()

    def close(self) -> None:
        self.selector.close()

    def next(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while not self.lines:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                raise _Late
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:  # pragma: no cover - woken with nothing to read
                continue
            if not chunk:
                raise _Ended
            if b"\n" in chunk:
                first, *whole, rest = chunk.split(b"\n")
                self.lines += [bytes(self.partial) + first, *whole]
                self.partial = bytearray(rest)
            else:
                self.partial += chunk
            if len(self.partial) > _MAX_ANSWER:
                raise _Garbled(f"an answer longer than {_MAX_ANSWER >> 20} MiB")
        line = self.lines.pop(0)
        try:
            answer = json.loads(line)
        except ValueError:
            raise _Garbled(f"{one_line(line[:80].decode(errors='replace'))!r}") from None
        if not isinstance(answer, dict):
            raise _Garbled(f"{one_line(line[:80].decode(errors='replace'))!r}")
        return answer


@dataclasses.dataclass(frozen=True)
class _Read:
    """What the worker made of one entry point: its declaration, or why there is none."""

    declared: Any = None
    problem: str | None = None


def _entries() -> list[_Entry]:
    """The installed entry points, read as metadata only."""
    found = []
    for entry in importlib.metadata.entry_points(group=GROUP):
        package = entry.dist.name if entry.dist is not None else entry.value.split(":")[0]
        found.append(_Entry(entry.name, entry.value, package))
    return sorted(found, key=lambda e: (e.package, e.name))


def _timeout(problems: list[str]) -> float:
    """Seconds per declaration: ``GATEGRAPH_PLUGIN_TIMEOUT``, else the default."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if text is None:
        return _TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        problems.append(
            f"{TIMEOUT_VARIABLE}: must be a positive number of seconds, not {one_line(text)!r} "
            f"(plugins get the default, {_TIMEOUT:g})"
        )
        return _TIMEOUT
    return value


def _evaluate(entries: Sequence[_Entry], timeout: float) -> list[_Read]:
    """Every entry point's declaration, read in worker processes: one for all, and a
    fresh one for those after an entry point that ended, hung or garbled its worker."""
    reads: list[_Read] = []
    while len(reads) < len(entries):
        reads += _run_worker(entries[len(reads) :], timeout)
    return reads


def _worker_environment(folder: str) -> dict[str, str]:
    from gategraph.runtime._calls._sandbox import _PASSED_ON

    return {
        **{k: v for k, v in os.environ.items() if k in _PASSED_ON or k.startswith("LC_")},
        "TMPDIR": folder,
        "TMP": folder,
        "TEMP": folder,
        "XDG_CACHE_HOME": os.path.join(folder, ".cache"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _run_worker(entries: Sequence[_Entry], timeout: float) -> list[_Read]:
    """Read declarations in one worker, in order, until one ends, hangs or garbles it
    (that one's read says so, and is the last returned); at least one read."""
    from gategraph.runtime._base._kernel import SandboxLimits, kept_out, support
    from gategraph.runtime._calls._context import private_folder
    from gategraph.runtime._calls._readonly import unguarded

    confine = None
    if support().missing is None:
        limits = dataclasses.asdict(SandboxLimits())
        confine = {"limits": limits, "hidden": sorted(kept_out())}
    request = {
        "path": list(sys.path),
        "confine": confine,
        "entries": [[entry.name, entry.value] for entry in entries],
    }
    # A lookup made while a call is guarded (a name resolved during a plan) still starts
    # the worker: reading the declarations is gategraph's housekeeping, not the call's.
    with unguarded():
        folder = os.fspath(private_folder("plugins"))
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", "-c", _COMMAND, folder],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=folder,
                env=_worker_environment(folder),
                start_new_session=True,
            )
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            why = exc.strerror or str(exc)
            return [_Read(problem=f"no process could be started to read it ({why})")] * len(entries)
        answers = _Answers(process)
        try:
            return _read_all(process, answers, request, entries, timeout)
        finally:
            answers.close()
            _end(process)
            shutil.rmtree(folder, ignore_errors=True)


def _read_all(
    process: subprocess.Popen[bytes],
    answers: _Answers,
    request: dict[str, Any],
    entries: Sequence[_Entry],
    timeout: float,
) -> list[_Read]:
    assert process.stdin is not None
    try:
        process.stdin.write(json.dumps(request).encode())
        process.stdin.close()
    except BrokenPipeError:
        pass  # it ended at its start: said below, as it ends
    try:
        started = answers.next(_START_TIMEOUT)
    except (_Late, _Ended, _Garbled) as exc:
        why = _fault(process, exc, "as it started", f"did not start within {_START_TIMEOUT:g}s")
        return [_Read(problem=f"the process that reads declarations {why}")] * len(entries)
    if started != {"ready": True}:
        refused = started.get("refused")
        why = one_line(refused) if isinstance(refused, str) else "it did not say it was ready"
        return [_Read(problem=f"the process that reads declarations refused: {why}")] * len(entries)
    reads: list[_Read] = []
    for index in range(len(entries)):
        try:
            answer = answers.next(timeout)
        except (_Late, _Ended, _Garbled) as exc:
            late = f"did not answer within {timeout:g}s ({TIMEOUT_VARIABLE} sets the limit)"
            why = _fault(process, exc, "while reading it", late)
            reads.append(_Read(problem=f"the process reading its declaration {why}"))
            return reads
        keys = set(answer) if answer.get("index") == index else set()
        if keys == {"index", "declared"}:
            reads.append(_Read(declared=answer["declared"]))
        elif keys == {"index", "failed"} and isinstance(answer["failed"], str):
            reads.append(_Read(problem=one_line(answer["failed"])))
        else:
            why = "wrote what is not an answer (of this entry point)"
            reads.append(_Read(problem=f"the process reading its declaration {why}"))
            return reads
    return reads


def _fault(process: subprocess.Popen[bytes], exc: Exception, when: str, late: str) -> str:
    """Why the worker gave no answer, in words."""
    from gategraph.runtime._calls._sandbox_worker import death

    if isinstance(exc, _Late):
        return late
    if isinstance(exc, _Garbled):
        return f"wrote what is not an answer: {exc}"
    try:
        code = process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        return f"closed its answers {when} and ran on"
    return f"ended {when}: {death(code)}"


def _end(process: subprocess.Popen[bytes]) -> None:
    """End the worker and everything it started (its process group: a confined worker's
    processes cannot leave it)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # gone already
    process.wait()
    assert process.stdin is not None and process.stdout is not None
    process.stdout.close()
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()  # what it did not read is flushed into a closed pipe


def _declared(found: Any) -> Sequence[Any]:
    if isinstance(found, Mapping) or not isinstance(found, Sequence) or isinstance(found, str):
        raise ConfigError("the declaration must be a list of validation configurations")
    return found


def _one(config: Any, package: str, index: int) -> Validation:
    from gategraph.runtime._data._models import Validation

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
    loaded = _Loaded()
    entries = _entries()
    if not entries:
        return loaded  # no plugin installed: no worker, no cost
    timeout = _timeout(loaded.problems)
    for entry, read in zip(entries, _evaluate(entries, timeout), strict=True):
        where = entry.where
        if read.problem is not None:
            loaded.problems.append(f"{where}: {read.problem}")
            continue
        try:
            configs = _declared(read.declared)
            made = [_one(config, entry.package, i) for i, config in enumerate(configs)]
        except ConfigError as exc:
            issue = exc.issues[0]
            field = f"{issue.field}: " if issue.field else ""
            loaded.problems.append(f"{where}: {field}{issue.message}")
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
    from gategraph.runtime._data._validator_declarations import VALIDATOR_TOOLS

    return frozenset(VALIDATOR_TOOLS)


def plugin_validation(name: str) -> Validation | None:
    """The installed plugins' validation called ``name``, or None."""
    return _load().validations.get(name)


def shipped(name: str) -> Tool | None:
    """What a name means when neither a graph nor the catalog defines it: a built-in, else
    an installed plugin's validation, else ``None``."""
    found = builtin(name)
    if found is not None:
        return found
    return plugin_validation(name)


def shipped_names() -> list[str]:
    """The names :func:`shipped` knows: the built-ins', then installed plugins' validations."""
    from gategraph.runtime._data._builtins import builtin_names

    return [*builtin_names(), *sorted(_load().validations)]


def plugin_validations() -> list[Validation]:
    """Every installed plugin's validation, by name."""
    loaded = _load().validations
    return [loaded[name] for name in sorted(loaded)]


def plugin_problems() -> list[str]:
    """One line per plugin (or validation of one) that was left out, and why."""
    return list(_load().problems)
