"""``gategraph plans`` (the plans of the event log, and where each one stands), ``graph``
(a picture of a plan graph) and ``schema`` (the plan graph format, for editors).

:func:`register` adds the commands to the command line.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from gategraph.runtime._base._statuses import STATUSES
from gategraph.runtime._views._picture import FORMATS

if TYPE_CHECKING:
    from gategraph.runtime._views._plan_views import PlanSummary

__all__ = ["register"]


def register(cli: click.Group) -> None:
    """Add ``gategraph plans``, ``graph`` and ``schema`` to the command line."""
    for command in (plans, show, report, graph_picture, schema):
        cli.add_command(command)


def _when(at: float) -> str:
    # Local time, to the second: what a person compares with their clock.
    return dt.datetime.fromtimestamp(at).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="milliseconds")


def _as_json(summary: PlanSummary) -> dict[str, Any]:
    return {
        "plan_id": summary.plan_id,
        "name": summary.name,
        "status": summary.status,
        "rounds": summary.rounds,
        "started_at": _iso(summary.started_at),
        "last_event_at": _iso(summary.last_at),
        "waiting_for": summary.waiting_for,
        "message": summary.message,
        "project": summary.project,
        "graph_path": summary.graph_path,
        "host": summary.host,
    }


@click.command("plans")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(STATUSES),
    help="Only plans with this status (repeat for several).",
)
@click.option("--name", "pattern", metavar="GLOB", help="Only plans whose name matches GLOB.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plans(statuses: tuple[str, ...], pattern: str | None, as_json: bool) -> None:
    """List the plans in the event log: those waiting for a person first, then the other
    paused and unfinished ones, then the rest, newest first in each."""
    from gategraph.runtime._storage._database import shown as shown_log
    from gategraph.runtime._views._plan_views import plan_summaries, select

    from ._common import _event_log_at, _json_out, _table

    path = _event_log_at()
    found = plan_summaries(path)
    shown = select(found, status=statuses or None, name=pattern)
    if as_json:
        _json_out([_as_json(s) for s in shown])
        return
    if not found:
        click.echo(f"no plans in {shown_log(path)} yet (run one with: gategraph run GRAPH)")
        return
    if not shown:
        click.echo(f"no plan matches (of {len(found)} in {shown_log(path)})")
        return
    # In a database, plans of several hosts: where each runs (or last ran) is shown.
    hosts = not isinstance(path, Path)
    _table(
        [
            [
                s.plan_id,
                s.name,
                s.status,
                str(s.rounds),
                _when(s.last_at),
                *([s.host or "-"] if hosts else []),
                s.waiting_for
                or (
                    f"resume it: gategraph resume {s.plan_id}" if s.status == "interrupted" else ""
                ),
            ]
            for s in shown
        ],
        [
            "PLAN",
            "NAME",
            "STATUS",
            "ROUNDS",
            "LAST EVENT",
            *(["HOST"] if hosts else []),
            "WAITING FOR",
        ],
    )
    people = [s for s in shown if s.for_a_person]
    if people:
        click.echo(
            f"{len(people)} plan(s) wait for a person: answer with gategraph approve PLAN_ID "
            "(an approval) or gategraph decide PLAN_ID (a decision)"
        )


@click.command("graph")
@click.argument("graph_file", metavar="GRAPH", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="mermaid",
    show_default=True,
    help="Mermaid (Markdown on GitHub and GitLab renders it) or Graphviz DOT.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the picture to this file instead of standard output.",
)
def graph_picture(graph_file: Path, fmt: str, output: Path | None) -> None:
    """Print a picture of the plan graph file GRAPH: its work, validation and actor nodes,
    the validations the catalog attaches to its resources, its acceptance criteria, and
    the `needs` edges between them."""
    from gategraph.runtime._definitions._graph import load_graph
    from gategraph.runtime._views._picture import draw

    from ._common import _catalog

    with _catalog(create=False) as catalog:
        plan = load_graph(graph_file, catalog=catalog)
        text = draw(plan, fmt, catalog=catalog)
    if output is None:
        click.echo(text, nl=False)
        return
    _write_atomically(output, text)
    click.echo(f"wrote {output}", err=True)


@click.command("schema")
@click.option(
    "--output",
    "-o",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the schema to this file instead of standard output.",
)
def schema(output: Path | None) -> None:
    """Print the JSON Schema of the plan graph format, for editors to complete and check
    plan files as you type."""
    import json

    from gategraph.runtime._definitions._graph_schema import graph_schema

    text = json.dumps(graph_schema(), indent=2, ensure_ascii=False) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    _write_atomically(output, text)
    click.echo(f"wrote {output}", err=True)


def _write_atomically(path: Path, text: str, *, option: str = "--output") -> None:
    """Write ``text`` to ``path`` whole or not at all: a new or regular file through a
    temporary file beside it, renamed over it. Anything else the path names — a device
    (``/dev/stdout``), a pipe, a symbolic link — is written through, never replaced."""
    import os
    import stat
    import tempfile

    from ._common import _fail

    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        _fail(f"{option} {path}: no such folder {folder}")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
        return
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        # The permissions of any new file of the user's (mkstemp's are private).
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@click.command("show")
@click.argument("plan_id", metavar="PLAN_ID")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--no-diff", is_flag=True, help="List the changed files without their diffs.")
def show(plan_id: str, as_json: bool, no_diff: bool) -> None:
    """Show plan PLAN_ID: where it stands, its verdict and the findings per acceptance
    criterion, the steps it went through, its statistics, and the change it validated (a
    unified diff of what Apply committed, or would commit)."""
    import msgspec
    from gategraph.runtime._storage._database import shown as shown_log
    from gategraph.runtime._views._plan_show import plan_view

    from ._common import _catalog, _event_log_at, _fail, _json_out

    path = _event_log_at()
    with _catalog(create=False) as catalog:
        view = plan_view(path, plan_id, catalog=catalog, diffs=not no_diff)
    if view is None:
        _fail(f"no plan {plan_id!r} in {shown_log(path)} (gategraph plans lists them)")
    if as_json:
        _json_out(
            {
                **_as_json(view.summary),
                "verdict": view.verdict,
                "criteria": list(view.criteria),
                "ladder": list(view.ladder),
                "timeline": [
                    {**msgspec.to_builtins(r), "started_at": _iso(r.started_at)}
                    for r in view.rounds
                ],
                "statistics": msgspec.to_builtins(view.statistics),
                "changes": None
                if view.changes is None
                else [msgspec.to_builtins(c) for c in view.changes],
                "changes_note": view.changes_note,
            }
        )
        return
    _print_view(view, diff=not no_diff)


def _print_view(view: Any, *, diff: bool) -> None:
    s = view.summary
    waits = f" — waits for {s.waiting_for}" if s.waiting_for else ""
    click.echo(f"plan {s.plan_id} ({s.name}): {s.status}{waits}")
    where = f"graph {s.graph_path} · " if s.graph_path else ""
    click.echo(f"  {where}started {_when(s.started_at)} · last event {_when(s.last_at)}")
    if s.message:
        click.echo(f"  {s.message}")
    click.echo("")
    if view.verdict:
        kind = view.verdict.get("verdict", "?")
        summary = view.verdict.get("summary", "")
        click.echo(f"verdict: {kind}" + (f" — {summary}" if summary else ""))
    else:
        click.echo("verdict: none yet (no round has got through the semantic layer)")
    for criterion in view.criteria:
        mark = {"pass": "pass", "fail": "FAIL"}.get(criterion["status"], "  ? ")
        name = criterion["name"] or criterion["id"]
        text = f" {criterion['text']}" if criterion["text"] else ""
        click.echo(f"  {mark} {name}:{text}")
        if criterion["status"] == "fail" and criterion["reasoning"]:
            click.echo(f"       {criterion['reasoning']}")
    click.echo("")
    click.echo("steps")
    for line in view.ladder:
        click.echo(f"  {line}")
    click.echo("")
    st = view.statistics
    click.echo(
        f"statistics: {st.rounds} round(s), {st.pipeline_completions} passed every layer, "
        f"{st.semantic_invocations} validation call(s), {st.fixes} fix(es), "
        f"{st.validator_retries} validator retr{'y' if st.validator_retries == 1 else 'ies'}, "
        f"{st.revisions} revision(s), {st.escalations} escalation(s)"
    )
    if st.layer_seconds:
        layers = ", ".join(f"{k} {v:.3f} s" for k, v in st.layer_seconds.items())
        click.echo(f"  time per layer: {layers}")
    if st.rejection_reasons:
        rejected = ", ".join(f"{k} {v}" for k, v in st.rejection_reasons.items())
        click.echo(f"  rejections per layer: {rejected}")
    if st.approval_wait_seconds:
        click.echo(f"  waited for approval: {st.approval_wait_seconds:.1f} s")
    if view.rounds:
        from ._common import held_by

        held = held_by(call.get("enforced_by") for call in view.rounds[-1].validations)
        if held:
            click.echo(f"  read-only in the last round: held by {held}")
        reused = sum(c.get("reused_from") is not None for r in view.rounds for c in r.validations)
        if reused:
            click.echo(
                f"  reused: {reused} result(s) of earlier rounds, for validations given nothing new"
            )
    click.echo("")
    if view.changes is None:
        click.echo(f"changes: {view.changes_note}")
        return
    if not view.changes:
        click.echo(f"changes ({view.changes_note}): none")
        return
    click.echo(f"changes ({view.changes_note}):")
    for change in view.changes:
        note = f" ({change.note})" if change.note else ""
        click.echo(f"  {change.kind:<8} {change.resource}: {change.path}{note}")
    if diff:
        for change in view.changes:
            if change.diff:
                click.echo("")
                click.echo(change.diff, nl=False)


def _interactive() -> bool:
    """A person at a terminal: standard input and output are both one."""
    import sys

    try:
        return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def ask_person(outcome: Any) -> Any:
    """When a person runs a plan at a terminal and it pauses for them (an approval, or a
    decision after an escalation), show what they are asked about — the failing findings
    and the change as a diff — and ask. Returns the :class:`EscalationDecision` to resume
    the plan with, or None to leave it waiting (``later``, or no terminal)."""
    from gategraph.runtime._base._protocols import EscalationDecision
    from gategraph.runtime._lifecycle._plan import PlanStatus
    from gategraph.runtime._views._plan_show import plan_view

    from ._common import _catalog, _event_log_at

    if outcome.status not in (PlanStatus.AWAITING_APPROVAL, PlanStatus.AWAITING_DECISION):
        return None
    if not _interactive():
        return None
    with _catalog(create=False) as catalog:  # it names the criteria
        view = plan_view(_event_log_at(), outcome.plan_id, catalog=catalog)
    click.echo("")
    failing = [c for c in (view.criteria if view else ()) if c["status"] == "fail"]
    for criterion in failing:
        name = criterion["name"] or criterion["id"]
        click.echo(f"  FAIL {name}: {criterion['reasoning']}")
    if view is not None and view.changes:
        click.echo(f"the change ({view.changes_note}):")
        for change in view.changes:
            if change.diff:
                click.echo(change.diff, nl=False)
            else:
                note = f" ({change.note})" if change.note else ""
                click.echo(f"{change.kind} {change.resource}: {change.path}{note}")
    elif view is not None:
        click.echo(f"the change: {view.changes_note or 'none'}")
    if outcome.status is PlanStatus.AWAITING_APPROVAL:
        choices = {"a": "approve", "d": "deny", "l": "later"}
        question = "approve it? [a]pprove, [d]eny, [l]ater"
    else:
        choices = {"r": "retry", "a": "abort", "l": "later"}
        question = "what now? [r]etry (with a note), [a]bort, [l]ater"
    try:
        answer = click.prompt(
            question,
            type=click.Choice([*choices, *choices.values()]),
            show_choices=False,
            default="l",
            show_default=False,
        )
        action = choices.get(answer, answer)
        if action == "later":
            return None
        note = click.prompt(
            "a note for the executor (enter for none)"
            if action == "retry"
            else "a note for the log (enter for none)",
            default="",
            show_default=False,
        )
    except click.Abort:
        # Ctrl-C or Ctrl-D at the question: nothing was answered, so the plan still waits.
        click.echo("")
        return None
    return EscalationDecision(action=action, note=note or None)  # type: ignore[arg-type]


@click.command("report")
@click.argument("plan_id", metavar="PLAN_ID")
@click.option(
    "--html",
    "target",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="Write the page to FILE (one self-contained HTML file).",
)
def report(plan_id: str, target: Path) -> None:
    """Write plan PLAN_ID as one self-contained HTML page: the graph, a timeline of its
    rounds, the steps of its failure ladder, the findings per acceptance criterion, the
    change as a diff, and its statistics. It needs nothing else to open (no network)."""
    from gategraph.runtime._storage._database import shown as shown_log

    from ._common import _catalog, _event_log_at, _fail

    path = _event_log_at()
    with _catalog(create=False) as catalog:
        page = html_page(path, plan_id, catalog)
    if page is None:
        _fail(f"no plan {plan_id!r} in {shown_log(path)} (gategraph plans lists them)")
    write_report(target, page, "--html")
    click.echo(f"wrote {target}", err=True)


def html_page(log_path: Path | str, plan_id: str, catalog: Any) -> str | None:
    from gategraph.runtime._views._report_html import plan_report

    return plan_report(log_path, plan_id, catalog=catalog)


def write_report(target: Path, text: str, option: str) -> None:
    """Write a report whole or not at all; a folder that is not there is one error line."""
    from ._common import _fail

    try:
        _write_atomically(target, text, option=option)
    except OSError as exc:
        _fail(f"{option}: cannot write {target}: {exc.strerror or exc}")
