"""A gate for frameworks that own their loop: sandbox → the framework writes → validate →
atomic Apply, or discard.

A gate is a plan. The supervisor drives it as it drives any plan — the same lifecycle,
events, failure ladder, crash-safe Apply and resume — and the framework plays its
execution actor from outside: the supervisor's requests for work wait until the framework
submits, and the round's verdict goes back to the framework instead of to an actor. So a
gate's history is listed, replayed and resumed like a plan's, and no path applies a change
whose required validations fail.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import yaml
from gategraph.runtime._base._exceptions import ConfigError, GategraphError, WorkWithdrawn
from gategraph.runtime._base._ids import check_plan_id, new_ulid
from gategraph.runtime._base._protocols import ExecuteRequest, FixRequest
from gategraph.runtime._data._events import PlanStarted
from gategraph.runtime._data._maxn import FAULT_CATALOGUE, RetryDecision
from gategraph.runtime._definitions._graph import GATE_EXECUTOR
from gategraph.runtime._running._pipeline import Rejected
from gategraph.runtime._storage._eventlog import MemoryEventLog
from gategraph.runtime._storage._resources import DirectoryResource, MemoryResource, Resource

from ._validate import Verdict, graph_spec, load_spec, verdict_of

if TYPE_CHECKING:
    from gategraph.runtime._base._protocols import EscalationDecision, EscalationHandler, Escalator
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph
    from gategraph.runtime._lifecycle._supervisor import PlanOutcome, Supervisor
    from gategraph.runtime._storage._eventlog import EventLog

__all__ = ["Gate", "GateClosedError", "is_gate", "open_gate", "resume_gate"]

_SOURCE: Final = "open_gate()"
_SUBMIT: Final = "submit()"
_RESUME: Final = "resume_gate()"


class GateClosedError(GategraphError):
    """The gate's plan is over (applied, failed, or waiting for a person): nothing more can
    be submitted through it."""


class _Detached:
    """The execution actor a gate's graph file names, for a run without the program that
    opened the gate (``gategraph resume`` on its plan): the log supplies the work the
    program did; new work only that program can do, so the plan is given up."""

    async def execute(self, request: ExecuteRequest) -> Any:
        raise WorkWithdrawn(
            "this plan is a gate: its changes come from the program that opened it, which "
            "resumes it with resume_gate()"
        )

    async def fix(self, request: FixRequest) -> Any:
        return await self.execute(request)


DETACHED: Final = _Detached()
"""What a gate's graph file names as its executor (see :class:`_Detached`)."""
# A fixed path, not this module's `__name__`: gate files hold it, and must outlive a move.
_EXECUTOR: Final = GATE_EXECUTOR


def is_gate(graph: PlanGraph) -> bool:
    """Whether ``graph`` is a gate's: its work comes from the program that opened it."""
    executor = graph.lifecycle.executor
    return executor is not None and executor.uses == _EXECUTOR


class Gate:
    """One change going through gategraph: write into :meth:`sandbox`, then :meth:`submit`.

    Made by :func:`open_gate` (or :func:`resume_gate`); use it inside that ``async with``.
    """

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self.outcome: PlanOutcome | None = None
        """How the plan ended: set once it is applied, has failed or waits for a person."""
        self.verdicts: list[Verdict] = []
        """The verdict of each round, in order (a resumed gate starts with the rounds its
        earlier run was told about, or finished)."""
        self._views: Mapping[str, Any] = {}
        self._artifact: Any = None
        self._waiting = False
        self._ready = anyio.Event()
        """Set once the gate waits for its first submission, or its plan has ended."""
        self._done = anyio.Event()
        self._submitted = anyio.Event()
        self._answered: anyio.Event | None = None
        self._discarding: str | None = None
        self._reported = 0
        """The last round whose verdict is in :attr:`verdicts`."""
        self._left = False
        """The gate's block has ended."""
        self.error: BaseException | None = None
        """What stopped the plan's run, when it did not end as a plan ends (an event log
        that cannot be written, a conflict at Apply): raised by the next call to the gate,
        or when its block ends, once."""
        self._error_raised = False

    @property
    def plan_id(self) -> str:
        """The plan's id: what ``gategraph events``, ``replay`` and :func:`resume_gate`
        know it by."""
        return self._supervisor.plan_id

    @property
    def graph(self) -> PlanGraph:
        """The gate's plan graph (its validations, resources and policy)."""
        return self._supervisor.graph

    @property
    def resources(self) -> Mapping[str, Resource]:
        """The real resources, by name: where an applied change is (a folder, or a
        :class:`MemoryResource` whose ``files`` hold it)."""
        return self._supervisor.resources

    @property
    def applied(self) -> bool:
        """Whether the change was applied to the real resources."""
        return self.outcome is not None and self.outcome.status == "applied"

    @property
    def sandboxes(self) -> Mapping[str, Any]:
        """Each resource's sandbox, by name: a folder ``Path`` or a mutable mapping of files."""
        self._check_open()
        return self._views

    def sandbox(self, name: str | None = None) -> Any:
        """The sandbox of resource ``name`` (optional when the gate has one resource): write
        the change here. A folder ``Path`` for a folder, a mutable mapping for files."""
        views = self.sandboxes
        if name is None:
            if len(views) != 1:
                raise ValueError(
                    f"this gate has {len(views)} resources ({', '.join(sorted(views))}): "
                    "name the one you want"
                )
            return next(iter(views.values()))
        if name not in views:
            raise KeyError(f"no resource {name!r} in this gate: {', '.join(sorted(views))}")
        return views[name]

    def _raise_error(self) -> None:
        if self.error is not None:
            self._error_raised = True
            raise self.error

    def _check_open(self) -> None:
        self._raise_error()
        if self.outcome is not None:
            raise GateClosedError(
                f"the gate's plan {self.plan_id} is {self.outcome.status}: {self.outcome.message}"
            )
        if self._left:
            raise GateClosedError(
                f"the gate's block has ended: plan {self.plan_id} waits to be resumed (resume_gate)"
            )
        if self._discarding is not None:
            raise GateClosedError(f"the gate's plan {self.plan_id} is being discarded")

    async def submit(self, artifact: Any = None) -> Verdict:
        """Validate what the sandboxes hold now (and ``artifact``, a JSON value the
        validations see as the artifact); apply it if every required validation passes.

        Returns the round's :class:`Verdict`: on ``fix``, change the sandboxes and submit
        again; on a pass the change is applied (see :attr:`applied` — unless a person must
        approve it first); on an escalation the plan waits for a person or has failed (see
        :attr:`outcome`). An infrastructure fault (a validation that timed out) is retried
        by the gate itself before this returns, as the budget allows.

        Do not write into the sandboxes until it returns: a change written while it is
        validated is never applied (the plan fails instead). Cancelling it gives the plan
        up: the round under way is not applied.
        """
        self._check_open()
        if not self._waiting:
            raise RuntimeError("a submission is being validated already: await its verdict first")
        _check_files(self._views)
        answered = self._answered = anyio.Event()
        before = len(self.verdicts)
        self._artifact = artifact
        self._waiting = False
        self._submitted.set()
        try:
            await answered.wait()
        except BaseException:
            # Cancelled (or interrupted) while the round runs: it must not be applied.
            self._give_up("the submission was cancelled while it was validated")
            raise
        self._raise_error()
        if len(self.verdicts) == before:  # the plan ended without judging the submission
            self._check_open()
            raise GateClosedError(f"the gate's plan {self.plan_id} ended without a verdict")
        return self.verdicts[-1]

    async def discard(self, note: str = "discarded") -> PlanOutcome:
        """Give the change up: the plan fails, its sandboxes go, nothing is applied — a
        round under way included. A gate waiting for a person is left to that person."""
        if self.outcome is not None:
            return self.outcome
        self._give_up(note)
        with anyio.CancelScope(shield=True):
            await self._done.wait()
        return self._ended()

    def _give_up(self, note: str) -> None:
        if self._discarding is None:
            self._discarding = note
            self._supervisor.withdraw(note)
        if self._waiting:
            self._waiting = False
            self._submitted.set()

    def _ended(self) -> PlanOutcome:
        self._raise_error()
        if self.outcome is None:  # Invariant: _done is set once the plan has ended.
            raise GateClosedError(f"the gate's plan {self.plan_id} stopped without an outcome")
        return self.outcome

    # -- the execution actor's side ------------------------------------------------------

    async def _take(self, request: ExecuteRequest, *, answer: bool) -> Any:
        """Wait for the framework's submission. A fix is asked after a rejected round: its
        verdict goes back to the submission waiting for it."""
        self._views = request.resources
        self._report()
        if self._discarding is not None:
            raise WorkWithdrawn(self._discarding)
        self._submitted = anyio.Event()
        self._waiting = True
        self._ready.set()
        await self._submitted.wait()
        if self._discarding is not None:
            raise WorkWithdrawn(self._discarding)
        return self._artifact

    def _report(self) -> None:
        """Put the last round's verdict in :attr:`verdicts` (once) and wake the submission
        waiting for it."""
        supervisor = self._supervisor
        outcome = supervisor.outcome
        answered, self._answered = self._answered, None
        if outcome is not None and supervisor.round > self._reported:
            self._reported = supervisor.round
            decision, fault = RetryDecision.ATTESTED, None
            if supervisor.attempts and isinstance(outcome, Rejected):
                last = supervisor.attempts[-1]
                decision = RetryDecision(last["retryDecision"])
                fault = FAULT_CATALOGUE.get(last["faultKind"]) if last["faultKind"] else None
            self.verdicts.append(
                verdict_of(
                    self.plan_id,
                    outcome,
                    supervisor.verdict or {},
                    supervisor.records.values(),
                    decision,
                    fault,
                    supervisor.budget,
                )
            )
        if answered is not None:
            answered.set()

    async def _drive(self, resume: bool, decision: EscalationDecision | None) -> None:
        supervisor = self._supervisor
        try:
            if resume:
                self.outcome = await supervisor.resume(decision=decision)
            else:
                self.outcome = await supervisor.run()
        except Exception as exc:
            # Raised where the program meets the gate (entering it, submit, leaving it), as
            # itself: not out of the gate's task group, wrapped in a group.
            self.error = exc
        finally:
            self._report()
            self._waiting = False
            self._done.set()
            self._ready.set()


def _check_files(views: Mapping[str, Any]) -> None:
    """A memory sandbox holds text by relative path: anything else is refused at submit,
    before it is validated (Apply could not write it)."""
    for name, view in views.items():
        if not isinstance(view, MutableMapping):
            continue
        for key, value in view.items():
            bad_key = (
                not isinstance(key, str)
                or not key
                or key.startswith("/")
                or "\0" in key
                or any(part in ("", ".", "..") for part in key.split("/"))
            )
            if bad_key:
                raise ConfigError.at(
                    f"sandbox {name!r}", f"{key!r} is not a relative file path", source=_SUBMIT
                )
            if not isinstance(value, str):
                raise ConfigError.at(
                    f"sandbox {name!r}",
                    f"{key!r} holds {type(value).__name__}: a file in memory holds text",
                    source=_SUBMIT,
                )


def _resource_specs(
    resources: Mapping[str, Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, Resource]]:
    """The graph's resource specs and the resources the supervisor works on."""
    if not isinstance(resources, Mapping) or not resources:
        raise ConfigError.at(
            "resources",
            "a gate needs at least one resource: {name: folder path, mapping of files or Resource}",
            source=_SOURCE,
        )
    specs: dict[str, dict[str, Any]] = {}
    given: dict[str, Resource] = {}
    for name, value in resources.items():
        where = f"resources.{name}"
        if isinstance(value, DirectoryResource):
            specs[name] = {"kind": "directory", "path": os.fspath(value.root)}
            given[name] = value
        elif isinstance(value, MemoryResource):
            specs[name] = {"kind": "memory"}
            given[name] = value
        elif isinstance(value, str | os.PathLike):
            folder = Path(os.fspath(value)).resolve()
            if not folder.is_dir():
                raise ConfigError.at(where, f"{str(folder)!r} is not a folder", source=_SOURCE)
            specs[name] = {"kind": "directory", "path": str(folder)}
        elif isinstance(value, Mapping):
            specs[name] = {"kind": "memory", "files": dict(value)}
        else:
            raise ConfigError.at(
                where,
                f"a resource is a folder path, a mapping of files or a Resource, not "
                f"{type(value).__name__}",
                source=_SOURCE,
            )
    return specs, given


def _graph_file(event_log: EventLog, plan_id: str, spec: dict[str, Any]) -> Path | None:
    """Write the gate's graph beside a durable log (``gates/PLAN.yaml``), so that the
    command line can replay and resume the plan; None for a log in memory."""
    path = getattr(event_log, "path", None)
    if not isinstance(path, str | os.PathLike):
        inner = getattr(event_log, "inner", None)
        path = getattr(inner, "path", None) if inner is not None else None
    if not isinstance(path, str | os.PathLike):
        return None
    folder = Path(os.fspath(path)).resolve().parent / "gates"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{plan_id}.yaml"
    text = (
        "# A gate opened by a program (open_gate). Replay it with `gategraph replay`;\n"
        "# only that program can do new work in it (resume_gate).\n"
        + yaml.safe_dump(spec, sort_keys=False)
    )
    temporary = target.with_suffix(".yaml.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)
    return target


@contextlib.asynccontextmanager
async def open_gate(
    resources: Mapping[str, Any],
    validations: Iterable[Any] = (),
    *,
    catalog: Catalog | None = None,
    project: str | None = None,
    event_log: EventLog | None = None,
    plan_id: str | None = None,
    name: str = "gate",
    retry_limit: int | None = None,
    policy: Mapping[str, Any] | None = None,
    escalation: EscalationHandler | Escalator | None = None,
    auto_approve: bool = False,
    home: Path | None = None,
) -> AsyncIterator[Gate]:
    """Open a gate over ``resources`` (name → folder path, mapping of files, or a
    :class:`Resource`) with ``validations`` (the forms :func:`validate` takes; with a
    ``catalog``, the validations attached to the resources run too).

    Inside the block, write into ``gate.sandbox()`` and ``await gate.submit()``; a passing
    submission is applied atomically. Leaving the block without an applied change
    discards it (the plan fails, nothing is applied); an exception leaving the block does
    too. ``policy`` is the plan graph's policy (approval rules, timeouts, ...), with
    ``retry_limit`` the shared Max-N budget (default 3) and no strategy revision unless
    the policy says so. Events go to ``event_log`` (default: in memory) under ``plan_id``;
    beside a durable log the gate's graph is written (``gates/PLAN_ID.yaml``) so that
    ``gategraph events`` and ``gategraph replay`` show it like any plan.

    A resource given as a mapping of files is kept in memory: its sandbox is a mapping
    too, for validations that read one; folder validations (``python_syntax``, ...) need
    a folder. A block that is cancelled leaves the plan (and its sandboxes) to
    :func:`resume_gate`; ``await gate.discard()`` first if nobody will resume it.
    """
    specs, given = _resource_specs(resources)
    rules: dict[str, Any] = {"strategy_revisions": 0, **(policy or {})}
    if rules["strategy_revisions"] != 0:
        raise ConfigError.at(
            "policy.strategy_revisions",
            "a gate has no strategy of its own to revise (the program revises its own): leave it 0",
            source=_SOURCE,
        )
    if retry_limit is not None:
        rules["retry_limit"] = retry_limit
    spec = graph_spec(validations, specs, name=name, project=project, policy=rules, source=_SOURCE)
    spec["lifecycle"] = {"executor": {"uses": _EXECUTOR}}
    if not spec["nodes"] and catalog is None:
        raise ConfigError.at(
            "validations",
            "no validation given, and no catalog whose attachments would gate the change",
            source=_SOURCE,
        )
    log = event_log if event_log is not None else MemoryEventLog()
    try:
        plan = check_plan_id(plan_id or new_ulid())
    except ConfigError as error:
        raise error.with_source(_SOURCE) from None
    graph = load_spec(spec, catalog, source=_SOURCE)
    if plan_id is not None and await log.read(plan):
        raise ConfigError.at(
            "plan_id",
            f"plan {plan} is in this event log already: a new gate needs a new plan id "
            "(resume_gate continues that one)",
            source=_SOURCE,
        )
    written = await anyio.to_thread.run_sync(_graph_file, log, plan, spec)
    if written is not None:
        graph = load_spec(spec, catalog, path=written, source=_SOURCE)
    async with _running(
        graph,
        log,
        plan,
        catalog=catalog,
        resources=given,
        escalation=escalation,
        auto_approve=auto_approve,
        home=home,
        resume=False,
    ) as gate:
        yield gate


@contextlib.asynccontextmanager
async def resume_gate(
    plan_id: str,
    *,
    event_log: EventLog,
    graph: PlanGraph | None = None,
    catalog: Catalog | None = None,
    escalation: EscalationHandler | Escalator | None = None,
    decision: EscalationDecision | None = None,
    home: Path | None = None,
) -> AsyncIterator[Gate]:
    """Continue gate ``plan_id`` from its log after its program died: what the log shows
    done is not done again; where it ends, the gate waits for a submission again (its
    sandboxes still hold what was written into them) or finishes what was under way.

    ``graph`` is the gate's graph (``gate.graph``); by default the one written beside a
    durable log. ``decision`` answers a gate that waits for a person, as with
    :func:`resume_plan`: ``retry`` (a fresh budget; submit again) or ``abort``, ``approve``
    or ``deny``. Check :attr:`Gate.outcome` first: a gate whose plan has ended is closed.
    """
    from gategraph.runtime._lifecycle._supervisor import _recorded_resources

    started = next((e for e in await event_log.read(plan_id) if isinstance(e, PlanStarted)), None)
    if started is None:
        raise ConfigError.at("plan_id", f"no plan {plan_id!r} in this event log", source=_RESUME)
    if graph is None:
        if started.graph_path is None:
            raise ConfigError.at(
                "graph",
                "the gate's graph was not written beside its log (an in-memory log): pass "
                "the gate's graph (gate.graph)",
                source=_RESUME,
            )
        graph = load_spec({}, catalog, path=Path(started.graph_path))
    if not is_gate(graph):
        raise ConfigError.at(
            "plan_id",
            f"plan {plan_id} is not a gate: resume it with resume_plan() or `gategraph resume`",
            source=_RESUME,
        )
    options = started.options or {}
    async with _running(
        graph,
        event_log,
        plan_id,
        catalog=catalog,
        resources=_recorded_resources(options) or {},
        escalation=escalation,
        auto_approve=bool(options.get("auto_approve", False)),
        home=home,
        resume=True,
        decision=decision,
    ) as gate:
        yield gate


@contextlib.asynccontextmanager
async def _running(
    graph: PlanGraph,
    log: EventLog,
    plan_id: str,
    *,
    catalog: Catalog | None,
    resources: Mapping[str, Resource],
    escalation: EscalationHandler | Escalator | None,
    auto_approve: bool,
    home: Path | None,
    resume: bool,
    decision: EscalationDecision | None = None,
) -> AsyncIterator[Gate]:
    from gategraph.runtime._lifecycle._supervisor import Supervisor

    holder: list[Gate] = []

    async def execute(request: ExecuteRequest) -> Any:
        return await holder[0]._take(request, answer=isinstance(request, FixRequest))

    supervisor = Supervisor(
        graph,
        catalog=catalog,
        event_log=log,
        resources=resources or None,
        escalation=escalation,
        plan_id=plan_id,
        auto_approve=auto_approve,
        home=home,
        execution_actor=execute,
    )
    gate = Gate(supervisor)
    holder.append(gate)
    failed: BaseException | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(gate._drive, resume, decision)
        await gate._ready.wait()
        if gate.error is None:
            try:
                yield gate
            except anyio.get_cancelled_exc_class():
                gate._left = True
                raise  # cancelled: the plan stays where it is, to be resumed
            except BaseException as exc:
                # Raised outside the task group, so the caller gets it as itself.
                failed = exc
                await _leave(gate, f"the program raised {type(exc).__name__}: {exc}")
            else:
                await _leave(gate, "discarded")
    if failed is not None:
        raise failed
    if not gate._error_raised:
        gate._raise_error()


async def _leave(gate: Gate, note: str) -> None:
    """The block ends: a change not applied is discarded (its plan's error, if the plan's
    run stopped, is raised by the caller)."""
    if gate.outcome is None and gate.error is None:
        with contextlib.suppress(GateClosedError):
            await gate.discard(note)
