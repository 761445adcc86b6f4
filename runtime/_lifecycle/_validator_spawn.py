"""``spawn.validator``: a lead starts a new, independent validator of a plan (seed 003).

The spawn checks the caller (an ``orchestrator`` or a ``lead``, of tier 1 or 2), finds the
plan's candidate — what its last passing round validated, rebuilt from the content store
into a folder of its own (a *worktree*; ``no_worktree`` uses the plan's sandboxes
themselves) — and builds a validator for this pass: the graph's ``lifecycle.validator``
class, or by default one that runs the plan's validations again on the candidate. The
validator is always a new object: never the plan's execution actor (the worker that made
the change), never one that validated before (seed 003's independence rule). Its
envelope is submitted as ``validator.attest`` or ``validator.reject`` would, with a
credential the spawn issues for that one verdict and keeps to itself.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio.to_thread
from gategraph.runtime._base._exceptions import CatalogError, ConfigError, GategraphError
from gategraph.runtime._calls._invoke import propagates
from gategraph.runtime._data._validator_declarations import SPAWN
from gategraph.runtime._definitions._validator_tools import (
    E_INVALID_INPUT,
    E_NOT_FOUND,
    _Refused,
    project_catalog,
    validator_attest,
    validator_reject,
)

if TYPE_CHECKING:
    import os

    from gategraph.runtime._base._protocols import Applicable, ValidatorRequest
    from gategraph.runtime._data._events import Event
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._evidence import EvidenceStore, PlanCriterion
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._storage._store import ContentStore

__all__ = [
    "E_VALIDATOR_FAILED",
    "E_VALIDATOR_NOT_INDEPENDENT",
    "E_VALIDATOR_SPAWN_AUTH_ROLE",
    "E_VALIDATOR_SPAWN_AUTH_TIER",
    "SPAWN",
    "RerunValidator",
    "register_worker",
    "validator_spawn",
]


E_VALIDATOR_SPAWN_AUTH_ROLE: Final = "E_VALIDATOR_SPAWN_AUTH_ROLE"
"""Only an orchestrator or a lead spawns validators."""
E_VALIDATOR_SPAWN_AUTH_TIER: Final = "E_VALIDATOR_SPAWN_AUTH_TIER"
"""A caller of tier 0 may not spawn validators (tier 1 or 2 may)."""
E_VALIDATOR_NOT_INDEPENDENT: Final = "E_VALIDATOR_NOT_INDEPENDENT"
"""The validator built for the pass is the plan's worker, or validated before."""
E_VALIDATOR_FAILED: Final = "E_VALIDATOR_FAILED"
"""The validator raised: it gave no verdict."""

RERUN_ID: Final = "validator-gategraph-rerun"
"""The id of the default validator (the plan's validations, run again on a copy): one
validator, however often it is spawned."""

_SPAWNERS: Final = ("orchestrator", "lead")
_TIERS: Final = (0, 1, 2)

# The execution actors of the plans this process ran, by plan, for as long as each actor
# lives: a validator that is one of them is the worker checking its own change.
_workers: dict[str, Callable[[], Any]] = {}
# Every validator spawned in this process, by id, held weakly (no hashing: a dataclass
# validator cannot be hashed): one that comes back is not a new validator.
_spawned: dict[int, Callable[[], Any]] = {}
_KEEP_AT_MOST: Final = 1000


def register_worker(plan_id: str, actor: Any) -> None:
    """``actor`` is the worker of plan ``plan_id`` (run in this process): it may never
    validate the plan. Held weakly: an actor the program let go of cannot come back."""
    if len(_workers) > 1000:  # forget the plans whose actors are gone
        for gone in [p for p, ref in _workers.items() if ref() is None]:
            del _workers[gone]
    try:
        _workers[plan_id] = weakref.ref(actor)
    except TypeError:
        _workers[plan_id] = lambda: actor


def _worker_of(plan_id: str) -> Any:
    found = _workers.get(plan_id)
    return found() if found is not None else None


def _seen(validator: Any) -> bool:
    found = _spawned.get(id(validator))
    return found is not None and found() is validator


def _remember(validator: Any) -> None:
    key = id(validator)
    try:
        _spawned[key] = weakref.ref(validator, lambda _: _spawned.pop(key, None))
    except TypeError:
        # Not weakly referenceable: held (so its id is never another object's), the oldest
        # let go once there are many.
        _spawned[key] = lambda: validator
        if len(_spawned) > _KEEP_AT_MOST:
            del _spawned[next(iter(_spawned))]


class RerunValidator:
    """The default validator: the plan's own validations, run again on its candidate, each
    acceptance criterion found as its bound validations decide it."""

    async def validate(self, request: ValidatorRequest) -> dict[str, Any]:
        """Run the plan's validations on ``request.resources``; return the envelope."""
        from gategraph.runtime._running._engine import execute_graph
        from gategraph.runtime._running._pipeline import build_verdict
        from gategraph.runtime._storage._eventlog import MemoryEventLog

        from ._plan_round import given_outputs

        graph: PlanGraph = request.graph
        work = set(graph.work_phase())
        select = [n.id for n in graph.nodes if n.id not in work]
        select += [a.id for a in request.applicable if a.attachment_id]
        run = await execute_graph(
            graph,
            catalog=request.catalog,
            resources=request.resources,
            select=select,
            given=given_outputs(graph.work_phase(), request.artifact),
            artifact=request.artifact,
            event_log=MemoryEventLog(),
            plan_id=request.plan_id,
            changed=request.changed,
        )
        records = {r.node: r for r in run.validations}
        return build_verdict(
            request.plan_id,
            graph,
            request.applicable,
            records,
            validator_id=request.validator_id,
        )


def _check_caller(caller: Any) -> None:
    role = caller.get("role") if isinstance(caller, Mapping) else None
    if role not in _SPAWNERS:
        raise _Refused(
            E_VALIDATOR_SPAWN_AUTH_ROLE,
            f"only an orchestrator or a lead spawns validators, not {role!r}",
        )
    tier = caller.get("tier") if isinstance(caller, Mapping) else None
    if isinstance(tier, bool) or tier not in _TIERS:
        raise _Refused(E_INVALID_INPUT, f"caller.tier must be 0, 1 or 2, not {tier!r}")
    if tier < 1:
        raise _Refused(E_VALIDATOR_SPAWN_AUTH_TIER, "a caller of tier 0 may not spawn validators")


def _validator_id(actor: Any, scope: str | None) -> str:
    """``validator-<discriminator>``, from the validator's kind (its class, or its
    function) and the spawn's scope: the same kind of validator for the same scope has the
    same id, so spawning it again cannot make it count as another validator. The default
    validator is always one: ``validator-gategraph-rerun``."""
    if isinstance(actor, RerunValidator):
        return RERUN_ID
    inner = getattr(actor, "check", actor)
    kind = getattr(inner, "__qualname__", None) or type(inner).__qualname__
    module = getattr(inner, "__module__", None) or type(inner).__module__
    named = f"{module}.{kind}|{scope or ''}"
    plain = re.sub(r"[^a-z0-9-]+", "-", f"{kind}-{scope or ''}".lower()).strip("-") or "v"
    digest = hashlib.sha1(named.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"validator-{plain[:40].strip('-')}-{digest}"


class _Candidate:
    """What the plan's last passing round validated."""

    def __init__(self, events: Sequence[Event]) -> None:
        from gategraph.runtime._data._events import (
            ArtifactValidated,
            ArtifactValidationStarted,
            PlanStarted,
            WorkFinished,
        )

        self.started: PlanStarted | None = None
        self.inputs: dict[str, str] | None = None
        self.bases: dict[str, str] | None = None
        self.revision = 0
        self.artifact: Any = None
        found = False
        work: WorkFinished | None = None
        current: ArtifactValidationStarted | None = None
        for event in sorted(events, key=lambda e: e.seq):
            if isinstance(event, PlanStarted) and self.started is None:
                self.started = event
            elif isinstance(event, WorkFinished):
                work = event
            elif isinstance(event, ArtifactValidationStarted):
                current = event
            elif isinstance(event, ArtifactValidated) and current is not None:
                found = True
                self.inputs = current.inputs
                self.bases = current.bases
                self.revision = current.revision
                self.artifact = work.artifact if work is not None else None
        self.found = found


def _site(
    task_id: str,
    *,
    evidence: EvidenceStore | None,
    catalog: Catalog | None,
    project_root: str | os.PathLike[str] | None,
    events: Sequence[Event] | None,
    store: ContentStore | None,
    event_log_path: str | os.PathLike[str] | None = None,
) -> tuple[Sequence[Event], ContentStore, Path | None]:
    """The plan's events, the store its rounds' inputs are in, and its sandboxes' home."""
    from gategraph.runtime._base._home import DEFAULT_FOLDER, default_catalog_path
    from gategraph.runtime._storage._database import events_at, log_exists, log_where, shown
    from gategraph.runtime._storage._eventlog import EVENTS_FILE, default_event_log_path
    from gategraph.runtime._storage._store import ContentStore

    log_path: Path | str
    if event_log_path is not None:
        log_path = log_where(event_log_path)
    elif catalog is not None and catalog.url is not None:
        log_path = catalog.url  # the plans are in the catalog's database
    elif project_root is not None:
        log_path = Path(project_root) / DEFAULT_FOLDER / EVENTS_FILE
    elif catalog is not None and catalog.path is not None:
        log_path = catalog.path.with_name(EVENTS_FILE)
    else:
        log_path = default_event_log_path()
    if events is None:
        if not log_exists(log_path):
            raise _Refused(
                E_NOT_FOUND, f"no event log at {shown(log_path)}: no plan is known there"
            )
        events = events_at(log_path, task_id)
    if not events:
        raise _Refused(E_NOT_FOUND, f"no plan {task_id} is known here")
    if isinstance(log_path, str):
        # In a database: the store is there too; sandboxes are in gategraph's folder here.
        return events, store or ContentStore(log_path), default_catalog_path().parent
    if store is None:
        store = ContentStore(log_path.parent / "store")
    return events, store, log_path.parent


async def validator_spawn(
    caller: Mapping[str, Any],
    task_id: str,
    *,
    spawn_scope: str | None = None,
    no_worktree: bool = False,
    evidence: EvidenceStore | None = None,
    catalog: Catalog | None = None,
    project_root: str | os.PathLike[str] | None = None,
    events: Sequence[Event] | None = None,
    graph: PlanGraph | None = None,
    store: ContentStore | None = None,
    validator: Callable[[], Any] | None = None,
    event_log_path: str | os.PathLike[str] | None = None,
    home: str | os.PathLike[str] | None = None,
    time_limit: float = 600.0,
) -> dict[str, Any]:
    """Start a new validator of plan ``task_id`` on its candidate and submit its verdict.

    Only an ``orchestrator`` or a ``lead`` of tier 1 or 2 may. The plan's events come from
    ``events`` (default: the event log at ``event_log_path``, beside ``catalog``, or of
    ``project_root``); its
    graph from ``graph`` (default: the graph file the plan ran, unchanged since); the
    validator from ``validator`` (a class or factory called for this pass), else the
    graph's ``lifecycle.validator``, else :class:`RerunValidator`. The validator works on a
    copy of the candidate, or with ``no_worktree`` on the plan's sandboxes themselves (below
    ``home``, by default the event log's folder; a validator that writes there gives no
    verdict). It must answer within ``time_limit`` seconds, with an envelope about the plan,
    signed with the id the request gives it (the same for the same validator class and
    scope; the default validator's is ``validator-gategraph-rerun``).
    Returns ``{"ok": True, "result": {"validatorId", "verdict", "submitted"}}``; refusals
    are ``{"ok": False, "code", "message"}``.
    """
    from gategraph.runtime._base._protocols import ValidatorRequest

    from ._plan_sandboxes import changed_files

    try:
        _check_caller(caller)
        if not isinstance(task_id, str) or not task_id.strip():
            raise _Refused(E_INVALID_INPUT, "task_id must be a plan's id")
        if spawn_scope is not None and not isinstance(spawn_scope, str):
            raise _Refused(E_INVALID_INPUT, "spawn_scope must be a string")
        if not isinstance(no_worktree, bool):
            raise _Refused(E_INVALID_INPUT, "no_worktree must be true or false")
        if (
            isinstance(time_limit, bool)
            or not isinstance(time_limit, int | float)
            or time_limit <= 0
        ):
            raise _Refused(
                E_INVALID_INPUT, f"time_limit must be seconds above 0, not {time_limit!r}"
            )
        store_of = evidence if evidence is not None else catalog
        if store_of is None:
            raise _Refused(E_INVALID_INPUT, "no evidence store to submit the verdict to")
        found, content, sandboxes_home = _site(
            task_id,
            evidence=evidence,
            catalog=catalog,
            project_root=project_root,
            events=events,
            store=store,
            event_log_path=event_log_path,
        )
        if home is not None:
            sandboxes_home = Path(home)
        candidate = _Candidate(found)
        if candidate.started is None:
            raise _Refused(E_NOT_FOUND, f"plan {task_id} has no plan_started event")
        if graph is None:
            graph = await anyio.to_thread.run_sync(_graph_of, candidate.started, catalog)
        roster = await anyio.to_thread.run_sync(store_of.roster, task_id)
        if roster is None:
            raise _Refused(E_NOT_FOUND, f"no plan {task_id} is known to the evidence store")
        applicable = _applicable(graph, catalog, task_id, roster)
        if not candidate.found:
            raise _Refused(
                E_INVALID_INPUT,
                f"plan {task_id} has no candidate yet: no round of it passed its own validations",
            )
        actor = _build(validator, graph, task_id)
        validator_id = _validator_id(actor, spawn_scope)
        with tempfile.TemporaryDirectory(prefix="gategraph-validator-") as scratch:
            views = await anyio.to_thread.run_sync(
                _views,
                candidate,
                graph,
                content,
                sandboxes_home,
                task_id,
                Path(scratch),
                no_worktree,
            )
            request = ValidatorRequest(
                plan_id=task_id,
                validator_id=validator_id,
                graph=graph,
                criteria=tuple(roster),
                resources=views,
                # What the plan's round judged as the change, so a check of the change
                # judges the same files here.
                changed=changed_files(
                    content,
                    [n for n, r in graph.resources.items() if r.kind == "directory"],
                    candidate.bases,
                    candidate.inputs,
                ),
                artifact=candidate.artifact,
                applicable=tuple(applicable),
                catalog=catalog,
            )
            before = await anyio.to_thread.run_sync(_digests, views) if no_worktree else None
            try:
                with anyio.fail_after(time_limit):
                    envelope = await actor.validate(request)
            except TimeoutError:
                raise _Refused(
                    E_VALIDATOR_FAILED, f"the validator took more than {time_limit:g} s"
                ) from None
            except BaseException as exc:
                if propagates(exc) or not isinstance(exc, Exception):
                    raise
                raise _Refused(
                    E_VALIDATOR_FAILED, f"the validator raised {type(exc).__name__}: {exc}"
                ) from None
            if before is not None and await anyio.to_thread.run_sync(_digests, views) != before:
                # Not its to change: the plan's Apply will refuse what it wrote, too.
                raise _Refused(
                    E_VALIDATOR_FAILED,
                    "the validator wrote to the plan's sandboxes: its verdict is not "
                    "submitted, and the plan will not apply what it wrote",
                )
        envelope_json = envelope.to_json_dict() if hasattr(envelope, "to_json_dict") else envelope
        if not isinstance(envelope_json, Mapping):
            raise _Refused(E_VALIDATOR_FAILED, "the validator answered no verdict envelope")
        signed = (envelope_json.get("taskId"), envelope_json.get("validatorId"))
        if signed != (task_id, validator_id):
            raise _Refused(
                E_VALIDATOR_FAILED,
                f"the validator's envelope must be about plan {task_id} and signed "
                f"{validator_id!r} (the request's), not {signed[0]!r} / {signed[1]!r}",
            )
    except _Refused as refused:
        return refused.reply
    is_attestation = envelope_json.get("verdict") == "attest"
    submit = validator_attest if is_attestation else validator_reject
    submitted = await anyio.to_thread.run_sync(
        functools.partial(_submit, submit, envelope_json, store_of, validator_id, task_id)
    )
    if not submitted["ok"]:
        return submitted
    return {
        "ok": True,
        "result": {"validatorId": validator_id, "verdict": envelope_json, "submitted": submitted},
    }


def _submit(
    submit: Callable[..., dict[str, Any]],
    envelope: Mapping[str, Any],
    store: EvidenceStore,
    validator_id: str,
    plan_id: str,
) -> dict[str, Any]:
    """Submit the spawned validator's ``envelope`` with a credential issued for this one
    verdict: bound to its id and the plan, held only here (the validator never sees it:
    the spawn signs for it once its envelope is checked), and retired once used."""
    from gategraph.runtime._definitions._evidence import credential_digest, new_credential

    credential = new_credential()
    digest = credential_digest(credential)
    store.add_credential(validator_id, digest, plan_id)
    try:
        return submit({"role": "validator"}, envelope, credential=credential, evidence=store)
    finally:
        store.revoke_credentials(validator_id, digest)


def _graph_of(started: Any, catalog: Catalog | None) -> PlanGraph:
    from gategraph.runtime._definitions._graph import load_graph

    path = started.graph_path
    if path is None:
        raise _Refused(
            E_INVALID_INPUT,
            f"plan {started.plan_id} was started from Python, not from a graph file: pass "
            "its graph",
        )
    file = Path(path)
    if not file.is_file():
        raise _Refused(E_INVALID_INPUT, f"plan {started.plan_id} ran {file}, which is not there")
    if not started.graph_unchanged(file):
        raise _Refused(E_INVALID_INPUT, f"{file}: changed since plan {started.plan_id} started")
    try:
        return load_graph(file, catalog=catalog)
    except ConfigError as exc:
        raise _Refused(E_INVALID_INPUT, f"{file}: {exc}") from None


def _applicable(
    graph: PlanGraph, catalog: Catalog | None, plan_id: str, roster: Sequence[PlanCriterion]
) -> list[Applicable]:
    """The validations that apply to the plan, checked to give it the criteria it has."""
    from gategraph.runtime._definitions._evidence import PlanRoster
    from gategraph.runtime._running._pipeline import applicable_validations

    try:
        applicable = applicable_validations(graph, catalog, plan_id)
    except (CatalogError, GategraphError) as exc:
        raise _Refused(
            E_INVALID_INPUT, f"cannot tell what applies to plan {plan_id}: {exc}"
        ) from None
    now = [(c.id, c.key) for c in PlanRoster(plan_id, graph, applicable).criteria]
    if now != [(c.id, c.key) for c in roster]:
        raise _Refused(
            E_INVALID_INPUT,
            f"plan {plan_id}'s acceptance criteria are not those it ran with (its graph or "
            "the catalog's attachments changed)",
        )
    return applicable


def _build(validator: Callable[[], Any] | None, graph: PlanGraph, plan_id: str) -> Any:
    """A new validator for this pass; refused when it is not new."""
    from gategraph.runtime._definitions._roles import _is_async, as_role, build_role

    try:
        if validator is not None:
            # A class or a factory is built for this pass; an object with `validate`, or
            # an async callable, is the validator as it is.
            plays = callable(getattr(validator, "validate", None)) or _is_async(validator)
            built = validator() if inspect.isclass(validator) or not plays else validator
            actor = as_role(built, "validator")
        elif graph.lifecycle.validator is not None:
            spec = graph.lifecycle.validator
            actor = build_role(spec.uses, spec.arguments, "validator", field="lifecycle.validator")
        else:
            actor = RerunValidator()
    except ConfigError as exc:
        raise _Refused(E_INVALID_INPUT, str(exc)) from None
    except Exception as exc:  # the validator's class failed to build
        raise _Refused(
            E_VALIDATOR_FAILED, f"the validator could not be built: {type(exc).__name__}: {exc}"
        ) from None
    inner = getattr(actor, "check", actor)  # an async callable, wrapped
    parts = _made_of(inner)
    worker = _worker_of(plan_id)
    if worker is not None and any(part is worker for part in parts):
        raise _Refused(
            E_VALIDATOR_NOT_INDEPENDENT,
            f"the validator is plan {plan_id}'s execution actor: a worker never validates "
            "its own change",
        )
    # The objects that hold a validator's state (a plain function holds none: called
    # again, it starts afresh).
    holders = [
        p
        for p in parts
        if not (inspect.isfunction(p) or inspect.ismethod(p) or inspect.ismodule(p))
        and not isinstance(p, functools.partial | str | int | float | bytes)
    ]
    if any(_seen(holder) for holder in holders):
        raise _Refused(
            E_VALIDATOR_NOT_INDEPENDENT,
            "the validator validated before: every pass needs a new one",
        )
    for holder in holders:
        _remember(holder)
    return actor


def _made_of(value: Any) -> list[Any]:
    """``value`` and what it is made of: a bound method's object, a partial's function
    and arguments, and theirs (a few levels deep)."""
    found: list[Any] = []
    todo = [value]
    while todo and len(found) < 32:
        part = todo.pop()
        if part is None or any(part is seen for seen in found):
            continue
        found.append(part)
        todo.append(getattr(part, "__self__", None))
        if isinstance(part, functools.partial):
            todo.extend([part.func, *part.args, *part.keywords.values()])
    return found


def _digests(views: Mapping[str, Any]) -> dict[str, str]:
    """What each folder of the candidate holds, by resource (memory texts are copies)."""
    from gategraph.runtime._storage._store import folder_digest

    return {name: folder_digest(view) for name, view in views.items() if isinstance(view, Path)}


def _views(
    candidate: _Candidate,
    graph: PlanGraph,
    store: ContentStore,
    home: Path | None,
    plan_id: str,
    scratch: Path,
    no_worktree: bool,
) -> dict[str, Any]:
    """The candidate, by resource: rebuilt below ``scratch``, or the plan's sandboxes."""
    from gategraph.runtime._storage._store import StoreError

    inputs = candidate.inputs
    if inputs is None:
        raise _Refused(E_INVALID_INPUT, f"plan {plan_id}'s candidate was not kept")
    views: dict[str, Any] = {}
    for name, digest in inputs.items():
        spec = graph.resources.get(name)
        memory = spec is not None and spec.kind == "memory"
        try:
            if memory:
                views[name] = store.texts(digest)
            elif no_worktree:
                folder = (home or Path()) / "sandboxes" / plan_id / f"r{candidate.revision}" / name
                if not folder.is_dir():
                    raise _Refused(E_INVALID_INPUT, f"plan {plan_id}'s sandbox of {name!r} is gone")
                views[name] = folder
            else:
                folder = scratch / name
                store.restore(digest, folder)
                views[name] = folder
        except StoreError as exc:
            raise _Refused(
                E_INVALID_INPUT, f"plan {plan_id}'s candidate is no longer kept ({exc})"
            ) from None
    return views


async def spawn(
    caller: Any = None,
    task_id: str | None = None,
    spawn_scope: str | None = None,
    no_worktree: bool = False,
    project_root: str | None = None,
    context: Any = None,
) -> dict[str, Any]:
    """``spawn.validator`` as a tool (``task_id`` defaults to the calling plan's)."""
    if task_id is None and context is not None:
        task_id = context.plan_id
    try:
        with project_catalog(project_root) as catalog:
            return await validator_spawn(
                caller,
                task_id,  # type: ignore[arg-type]
                spawn_scope=spawn_scope,
                no_worktree=no_worktree,
                catalog=catalog,
                project_root=project_root,
            )
    except _Refused as refused:
        return refused.reply
