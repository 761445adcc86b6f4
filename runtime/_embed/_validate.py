"""One call to validate a change: a folder, a mapping of files or an artifact, against
validations named, configured inline, or attached in the catalog.

It runs one round of the plan's semantic layer — the same engine, the same verdict
envelope (seed 003) and the same Max-N judgement the supervisor makes — without a plan
around it: no strategy, no sandbox, no Apply. An agent framework that keeps its own loop
calls it once per proposed change, and passes the same :class:`RetryBudget` each time so
its retries spend one honest budget.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread
import msgspec
from gategraph.runtime._base._exceptions import ConfigError, ConfigIssue
from gategraph.runtime._base._ids import check_plan_id
from gategraph.runtime._base._spans import auto_tracing, span_activator
from gategraph.runtime._data._maxn import (
    DEFAULT_RETRY_LIMIT,
    FaultKind,
    MaxNPolicy,
    RetryBudget,
    RetryDecision,
    primary_fault,
)
from gategraph.runtime._data._models import Validation
from gategraph.runtime._running._engine import ValidationRecord, execute_graph
from gategraph.runtime._running._observe import ObservedEventLog
from gategraph.runtime._running._pipeline import (
    Passed,
    Reason,
    Rejected,
    ValidationOutcome,
    applicable_validations,
    round_faults,
    semantic_outcome,
)
from gategraph.runtime._running._sync import run_sync
from gategraph.runtime._storage._eventlog import MemoryEventLog

if TYPE_CHECKING:
    from gategraph.runtime._calls._invoke import Isolation
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._storage._eventlog import EventLog

__all__ = ["Verdict", "graph_spec", "load_spec", "validate", "validate_sync", "verdict_of"]

_SOURCE: Final = "validate()"
_NODE_FIELD: Final = re.compile(r"^nodes\[(\d+)\]")
_SLUG: Final = re.compile(r"[^A-Za-z0-9_-]+")
_NODE_KEYS: Final = frozenset({"id", "arguments", "timeout", "isolation", "resources"})


class Verdict(msgspec.Struct, kw_only=True):
    """What one round of validation decided about a change."""

    passed: bool
    """Every required validation ran and passed (the envelope attests)."""
    decision: RetryDecision
    """What the failure ladder does next: ``attested``, ``fix`` (back to whoever made the
    change, with the findings), ``retry-validator`` (an infrastructure fault: run the
    failed validations again, the change is not at fault), ``escalate-exhausted`` (the
    budget is spent) or ``escalate-permanent`` (retrying cannot help)."""
    fault: str | None
    """The round's deciding fault kind (``rejected``, ``timeout``, ...); None when passed."""
    envelope: dict[str, Any]
    """The verdict envelope: an attestation or a rejection, one finding per acceptance
    criterion (see :class:`ValidatorAttestation`, :class:`ValidatorRejection`)."""
    records: list[ValidationRecord]
    """Every validation's record (its result, mode, duration), in completion order."""
    reasons: tuple[Reason, ...] = ()
    """Why the round was rejected, one reason per failure; empty when passed."""
    plan_id: str = ""
    """The id the round's events were logged under."""
    budget_used: int = 0
    """Slots of the retry budget spent so far, this round's included."""
    budget_limit: int = DEFAULT_RETRY_LIMIT
    retry_after: float = 0.0
    """Seconds to wait before running the failed validations again, for a
    ``retry-validator`` decision (the fault kind's backoff, as the supervisor waits it)."""

    @property
    def findings(self) -> list[dict[str, Any]]:
        """The envelope's findings: one per acceptance criterion, each with its status."""
        return list(self.envelope.get("findings", ()))

    @property
    def failures(self) -> list[ValidationRecord]:
        """The required validations that did not pass."""
        return [r for r in self.records if r.blocking]

    @property
    def feedback(self) -> str:
        """The rejection as text for whoever fixes the change (a model, a person): one line
        per failure with the validation's own message; empty when passed."""
        if self.passed:
            return ""
        names = {r.node: r.validation for r in self.records if r.attachment_id is not None}
        lines = [str(self.envelope.get("summary", "rejected"))]
        for reason in self.reasons:
            node = reason.node
            where = f"{names[node]} (attached)" if node in names else node
            lines.append(f"- {where}: {reason.message}" if where else f"- {reason.message}")
        return "\n".join(lines)


def _item(item: Any, index: int, source: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One entry of ``validations`` as a graph node, and the inline validation it defines."""
    where = f"validations[{index}]"
    node: dict[str, Any] = {}
    if isinstance(item, Mapping) and "validation" in item:
        node = {key: value for key, value in item.items() if key != "validation"}
        unknown = sorted(set(node) - _NODE_KEYS)
        if unknown:
            raise ConfigError.at(
                where,
                f"unknown key {unknown[0]!r}: an item with `validation` may have "
                + ", ".join(sorted(_NODE_KEYS)),
                source=source,
            )
        item = item["validation"]
    defined: dict[str, Any] | None = None
    name: Any
    if isinstance(item, Validation):
        defined = item.model_dump(mode="json", exclude_defaults=True, exclude={"tool_type"})
        defined["name"] = item.name
        name = item.name
    elif isinstance(item, Mapping):
        defined = dict(item)
        name = defined.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError.at(
                f"{where}.name", "an inline validation needs a name", source=source
            )
    elif isinstance(item, str) and item:
        name = item
    else:
        raise ConfigError.at(
            where,
            f"{item!r} is not a validation: give a name (from the catalog or a built-in), "
            "a validation config (a mapping with a name), a Validation, or "
            "{'validation': ..., 'arguments': {...}}",
            source=source,
        )
    node["validation"] = name
    return node, defined


def graph_spec(
    validations: Iterable[Any],
    resources: Mapping[str, Mapping[str, Any]],
    *,
    name: str = "validate",
    project: str | None = None,
    policy: Mapping[str, Any] | None = None,
    source: str = _SOURCE,
) -> dict[str, Any]:
    """The plan graph (as a mapping for the loader) that runs ``validations`` — each in one
    of the forms :func:`validate` takes — over ``resources`` (name → resource spec)."""
    if isinstance(validations, str | Mapping | Validation):
        validations = [validations]  # one validation on its own: the obvious meaning
    nodes: list[dict[str, Any]] = []
    defined: dict[str, dict[str, Any]] = {}
    taken: set[str] = set()
    for index, item in enumerate(validations):
        node, inline = _item(item, index, source)
        if inline is not None:
            defined_name = inline["name"]
            if defined_name in defined and defined[defined_name] != inline:
                raise ConfigError.at(
                    f"validations[{index}]",
                    f"two different validations are named {defined_name!r}",
                    source=source,
                )
            defined[defined_name] = inline
        if node.get("id") is not None and node["id"] in taken:
            raise ConfigError.at(
                f"validations[{index}].id",
                f"{node['id']!r} names an earlier validation already: ids are unique",
                source=source,
            )
        node_id = str(node.get("id") or _SLUG.sub("-", str(node["validation"])).strip("-"))
        base, number = node_id or "validation", 1
        while node_id in taken or not node_id:
            number += 1
            node_id = f"{base}-{number}"
        taken.add(node_id)
        node["id"] = node_id
        nodes.append(node)
    spec: dict[str, Any] = {
        "version": 1,
        "name": name,
        "nodes": nodes,
        "validations": list(defined.values()),
        "resources": {key: dict(value) for key, value in resources.items()},
        "policy": dict(policy or {}),
    }
    if project is not None:
        spec["project"] = project
    return spec


def load_spec(
    spec: dict[str, Any],
    catalog: Catalog | None,
    *,
    path: Path | None = None,
    source: str = _SOURCE,
) -> PlanGraph:
    """Load a graph made by :func:`graph_spec` (from ``path`` when it was written to one);
    the loader's problems are named as the caller wrote them."""
    from gategraph.runtime._base._yaml import Document, read_document
    from gategraph.runtime._definitions._graph import _Loader

    try:
        if path is None:
            doc, base = Document(spec, "<mapping>"), Path.cwd()
        else:
            doc, base = read_document(path), path.parent
        return _Loader(doc, base, catalog, attachments_only=True).load()
    except ConfigError as error:
        raise _renamed(error, source) from None


def _renamed(error: ConfigError, source: str) -> ConfigError:
    """The loader's problems, named as the caller wrote them (``validations[0]``, not the
    graph's ``nodes.0``)."""
    issues = [
        ConfigIssue(
            issue.message,
            _NODE_FIELD.sub(lambda m: f"validations[{m.group(1)}]", issue.field),
        )
        for issue in error.issues
    ]
    return ConfigError(issues, source=source)


def _folder(change: Any) -> Path | None:
    """The change as a folder (a mapping of files is checked and written out into a
    private folder of its own, so that folder validations see it too)."""
    if change is None:
        return None
    if isinstance(change, str | os.PathLike):
        folder = Path(os.fspath(change)).resolve()
        if not folder.is_dir():
            raise ConfigError.at("change", f"{str(folder)!r} is not a folder", source=_SOURCE)
        return folder
    if isinstance(change, Mapping):
        _checked(change)
        return _write_files(change)
    raise ConfigError.at(
        "change",
        f"a change is a folder or a mapping of files, not {type(change).__name__} "
        "(pass a value to judge as `artifact=`)",
        source=_SOURCE,
    )


def _over_base(change: Any, base: str | os.PathLike[str]) -> tuple[Path, frozenset[str]]:
    """A private copy of the folder ``base`` with ``change`` laid over it (a mapping's
    files, or a folder's tree), and the files the change gives, relative with ``/``."""
    from gategraph.runtime._calls._context import private_folder
    from gategraph.runtime._storage._resources import DirectoryResource

    folder = Path(os.fspath(base)).resolve()
    if not folder.is_dir():
        raise ConfigError.at("base", f"{str(folder)!r} is not a folder", source=_SOURCE)
    if change is not None and not isinstance(change, Mapping):
        given = _folder(change)
        assert given is not None
        change = {
            Path(os.path.relpath(os.path.join(where, name), given)).as_posix(): (
                Path(where, name).read_bytes()
            )
            for where, _, names in os.walk(given)
            for name in names
            if not os.path.islink(os.path.join(where, name))
        }
    else:
        if change is not None:
            _checked(change)
    root = private_folder("change")
    try:
        # A copy as a plan's sandbox is: what git ignores (a .venv, build output) and .git
        # itself are left out.
        try:
            DirectoryResource("base", folder).open_sandbox(root / "tree")
        except ValueError as exc:  # the temporary folder is inside it
            raise ConfigError.at("base", str(exc), source=_SOURCE) from None
        write_files_into(root / "tree", change or {})
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    # The files as the per-file checks name them (relative, `/`, normalised): a key
    # written `src//b.py` or `src/x/../b.py` is the file `src/b.py` the change writes.
    tree = (root / "tree").resolve()
    written = frozenset(
        (tree / key).resolve().relative_to(tree).as_posix() for key in (change or {})
    )
    return root / "tree", written


def _checked(change: Mapping[Any, Any]) -> None:
    for key, value in change.items():
        if not isinstance(key, str) or not key or "\0" in key:
            raise ConfigError.at(
                "change",
                f"{key!r} is not a file path: a mapping of files maps relative paths to "
                "text or bytes",
                source=_SOURCE,
            )
        if not isinstance(value, str | bytes):
            raise ConfigError.at(
                "change",
                f"a mapping of files maps relative paths to text or bytes; {key!r} maps to "
                f"{type(value).__name__} (pass a value to judge as `artifact=` instead)",
                source=_SOURCE,
            )


def _write_files(files: Mapping[str, str | bytes]) -> Path:
    """Write a mapping of files into a private folder, so folder validations see them."""
    from gategraph.runtime._calls._context import private_folder

    root = private_folder("change")
    try:
        write_files_into(root, files)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def write_files_into(
    root: Path,
    files: Mapping[str, str | bytes],
    *,
    where: str = "change",
    source: str | None = _SOURCE,
    inside: str = "the change",
) -> None:
    """Write a mapping of files into the folder ``root`` (over what it holds). A path out
    of it, or one the folder cannot take (a file where the change needs a folder, a name
    too long), is a :class:`ConfigError` at ``where``."""
    root = root.resolve()
    for relative, content in files.items():
        target = (root / relative).resolve()
        if target == root or root not in target.parents:
            raise ConfigError.at(
                where, f"{relative!r} is not a relative path inside {inside}", source=source
            )
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        except OSError as exc:  # `a` and `a/b.py` both given, a name too long ...
            raise ConfigError.at(
                where,
                f"{relative!r} cannot be written as a file: {exc.strerror or exc}",
                source=source,
            ) from None


async def validate(
    change: str | os.PathLike[str] | Mapping[str, str | bytes] | None = None,
    validations: Iterable[Any] = (),
    *,
    artifact: Any = None,
    base: str | os.PathLike[str] | None = None,
    catalog: Catalog | None = None,
    resource: str = "change",
    project: str | None = None,
    plan: str | None = None,
    budget: RetryBudget | None = None,
    event_log: EventLog | None = None,
    default_timeout: float | None = None,
    max_concurrency: int | None = None,
    isolation: Isolation | None = None,
    allow_ungated: bool = False,
) -> Verdict:
    """Validate ``change`` with ``validations``; return the round's :class:`Verdict`.

    ``change`` is a folder (a path) or a mapping of files (relative path → text or
    bytes); ``artifact`` is a value the validations judge (what a work node would have
    returned). Validations see the change as their resource (read-only) and the artifact
    as their ``artifact`` argument. With ``base`` (a folder: the repository the change is
    to), they see the change laid over a copy of it instead (what the folder's
    ``.gitignore`` ignores, and ``.git``, left out, as a plan's copy leaves them), and
    validations that judge each file on its own judge only the files the change gives;
    the copy is removed when the call returns.

    Each of ``validations`` is a name (from ``catalog``, or a built-in such as
    ``python_syntax``), an inline validation config (the fields of ``gategraph
    validation add --config``), a :class:`Validation`, or ``{"validation": <one of
    those>, "arguments": {...}}``. With a ``catalog``, the validations attached to
    ``resource`` (under ``project`` and ``plan``) run too.

    ``budget`` is the failure ladder's shared retry budget: pass the same one for each
    round of the same change and the ``decision`` says when it is spent (by default each
    call starts a fresh budget of three). Events go to ``event_log`` under ``plan`` (or a
    new id). ``default_timeout`` is the seconds a validation without a ``timeout`` of its
    own may run (default 60).

    A failing validation never raises: it is in the verdict. :class:`ConfigError` (one
    line per problem, each naming the field) is raised, before anything runs, for a
    validation that does not exist or cannot be called, or a change that is not one.
    """
    if budget is not None and not isinstance(budget, RetryBudget):
        raise ConfigError.at(
            "budget", f"a RetryBudget, not {type(budget).__name__}", source=_SOURCE
        )
    if event_log is not None and not callable(getattr(event_log, "append", None)):
        raise ConfigError.at(
            "event_log",
            f"an event log (MemoryEventLog, an open SQLiteEventLog), not {type(event_log).__name__}",
            source=_SOURCE,
        )
    if plan is not None:
        try:
            plan = check_plan_id(plan)
        except ConfigError as error:
            raise ConfigError.at("plan", error.issues[0].message, source=_SOURCE) from None
        if event_log is not None and await event_log.read(plan):
            raise ConfigError.at(
                "plan",
                f"plan {plan} is in this event log already: each round needs a new plan id "
                "(the shared `budget` is what joins rounds)",
                source=_SOURCE,
            )
    # Traced by itself when the program has set OpenTelemetry up and the log has no
    # tracing observer of the caller's: the round's spans end with this call.
    tracing = None
    if event_log is None or span_activator(event_log) is None:
        tracing = auto_tracing()
        if tracing is not None:
            event_log = ObservedEventLog(
                event_log if event_log is not None else MemoryEventLog(), tracing
            )
    try:
        return await _validate(
            change, validations, artifact, base, catalog, resource, project, plan, budget,
            event_log, default_timeout, max_concurrency, isolation, allow_ungated,
        )  # fmt: skip
    finally:
        if tracing is not None:
            tracing.close()


async def _validate(
    change: str | os.PathLike[str] | Mapping[str, str | bytes] | None,
    validations: Iterable[Any],
    artifact: Any,
    base: str | os.PathLike[str] | None,
    catalog: Catalog | None,
    resource: str,
    project: str | None,
    plan: str | None,
    budget: RetryBudget | None,
    event_log: EventLog | None,
    default_timeout: float | None,
    max_concurrency: int | None,
    isolation: Isolation | None,
    allow_ungated: bool,
) -> Verdict:
    spec_folder: Path | None
    changed: frozenset[str] | None
    if base is not None:
        copy, changed = await anyio.to_thread.run_sync(_over_base, change, base)
        spec_folder = copy
        written: Path | None = copy.parent  # the private folder the copy is in
    else:
        spec_folder, changed = _folder(change), None
        written = spec_folder if isinstance(change, Mapping) else None
    try:
        policy: dict[str, Any] = {"allow_ungated": allow_ungated}
        if default_timeout is not None:
            policy["default_timeout"] = default_timeout
        resources = (
            {resource: {"kind": "directory", "path": str(spec_folder)}} if spec_folder else {}
        )
        spec = graph_spec(validations, resources, project=project, policy=policy)
        if not spec["nodes"] and catalog is None:
            raise ConfigError.at(
                "validations",
                "no validation given, and no catalog whose attachments would gate the change",
                source=_SOURCE,
            )
        graph = load_spec(spec, catalog)
        run = await execute_graph(
            graph,
            catalog=catalog,
            event_log=event_log,
            plan_id=plan,
            max_concurrency=max_concurrency,
            isolation=isolation,
            artifact=artifact,
            changed={resource: changed} if changed is not None else None,
        )
    finally:
        if written is not None:
            shutil.rmtree(written, ignore_errors=True)
    applicable = applicable_validations(graph, catalog, run.plan_id)
    records = {r.node: r for r in run.validations}
    outcome, envelope = semantic_outcome(run.plan_id, graph, applicable, records, run.nodes)
    budget = budget if budget is not None else RetryBudget(MaxNPolicy())
    decision, kind = RetryDecision.ATTESTED, None
    if not isinstance(outcome, Passed):
        faults = round_faults(outcome)
        decision = budget.decide_round(faults)
        kind = primary_fault(faults) or faults[0]
    # The round's outcome, which its events do not say, counted by a tracing observer.
    record = getattr(span_activator(event_log), "record_verdict", None)
    if record is not None:
        record(not isinstance(outcome, Rejected), getattr(outcome, "layer", None))
    return verdict_of(run.plan_id, outcome, envelope, run.validations, decision, kind, budget)


def verdict_of(
    plan_id: str,
    outcome: ValidationOutcome,
    envelope: dict[str, Any],
    records: Iterable[ValidationRecord],
    decision: RetryDecision,
    fault: FaultKind | None,
    budget: RetryBudget,
) -> Verdict:
    """The :class:`Verdict` of a round: its outcome, envelope and records, and what the
    ladder decided (``fault`` is the deciding fault kind, None for a pass)."""
    retry_after = 0.0
    if decision is RetryDecision.RETRY_VALIDATOR and fault is not None and fault.backoff:
        retry_after = fault.backoff.delay(budget.used_by(fault.kind))
    return Verdict(
        # Waiting for a person's approval, the validations have passed all the same.
        passed=not isinstance(outcome, Rejected),
        decision=decision,
        fault=fault.kind if fault is not None else None,
        envelope=envelope,
        records=list(records),
        reasons=outcome.reasons if isinstance(outcome, Rejected) else (),
        plan_id=plan_id,
        budget_used=budget.used,
        budget_limit=budget.limit,
        retry_after=retry_after,
    )


def validate_sync(
    change: str | os.PathLike[str] | Mapping[str, str | bytes] | None = None,
    validations: Iterable[Any] = (),
    **options: Any,
) -> Verdict:
    """:func:`validate` for code without an event loop (the same arguments; see
    :func:`gategraph.runtime.run_plan_sync` for where it may be called)."""
    return run_sync(validate, change, validations, **options)
