"""One plan as a self-contained HTML page: the graph, the rounds as a timeline (each
validation's result and duration), the steps of the failure ladder, the findings per
acceptance criterion, the change as a diff, and the statistics (seed 002 §16).

Everything is in the one file — styles inline, the graph as inline SVG, no script — so it
opens anywhere, offline, and can be attached to a ticket or kept as a build artefact.
"""

from __future__ import annotations

import datetime as dt
import html
from typing import TYPE_CHECKING, Any, Final

from gategraph.runtime._version import __version__

from ._picture import COLORS, printable

if TYPE_CHECKING:
    from gategraph.runtime._definitions._graph import PlanGraph

    from ._plan_show import PlanView

__all__ = ["render_html"]

_BOX_W: Final = 200
_BOX_H: Final = 46
_GAP_X: Final = 24
_GAP_Y: Final = 56
_LAYER_LIMIT: Final = 24
"""Boxes drawn per layer at most; a wider fan-out ends in one "+N more" box."""
_CALLS_SHOWN: Final = 200
"""Validation calls listed per round at most (the rest are counted)."""

_STYLE: Final = """
:root { --ok: #137333; --bad: #c5221f; --warn: #b06000; --muted: #5f6368; --line: #dadce0; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
  color: #202124; background: #fff; }
header { padding: 20px 28px; border-bottom: 1px solid var(--line); background: #f8f9fa; }
header h1 { font-size: 20px; margin: 0 0 6px; }
header p { margin: 2px 0; color: var(--muted); }
main { padding: 8px 28px 40px; max-width: 1200px; }
section { margin-top: 26px; }
h2 { font-size: 16px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.badge { display: inline-block; padding: 1px 9px; border-radius: 10px; font-size: 12px;
  font-weight: 600; color: #fff; background: var(--muted); vertical-align: 2px; }
.badge.applied, .badge.pass { background: var(--ok); }
.badge.failed, .badge.fail { background: var(--bad); }
.badge.awaiting_approval, .badge.awaiting_decision, .badge.awaiting_attestation,
.badge.interrupted { background: var(--warn); }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #f1f3f4; vertical-align: top; }
th { font-weight: 600; color: var(--muted); font-size: 12px; text-transform: uppercase; }
.round { border: 1px solid var(--line); border-radius: 6px; margin: 10px 0; padding: 8px 12px; }
.round h3 { margin: 0 0 6px; font-size: 14px; }
.bar { height: 10px; border-radius: 3px; background: var(--ok); min-width: 2px; }
.bar.fail { background: var(--bad); }
.bar.warn, .badge.warn { background: var(--warn); }
.bar.none { background: var(--line); }
.track { width: 260px; }
.steps { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px;
  white-space: pre-wrap; background: #f8f9fa; padding: 10px 12px; border-radius: 6px; }
.diff { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px;
  border: 1px solid var(--line); border-radius: 6px; margin: 10px 0; overflow-x: auto; }
.diff .file { background: #f1f3f4; padding: 6px 10px; font-weight: 600; }
.diff pre { margin: 0; padding: 6px 0; }
.diff span { display: block; padding: 0 10px; white-space: pre; }
.diff .add { background: #e6f4ea; }
.diff .del { background: #fce8e6; }
.diff .hunk { color: #1967d2; background: #e8f0fe; }
.muted { color: var(--muted); }
svg text { font: 12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
"""

_FILL: Final = {
    **{kind: (fill, line) for kind, (fill, line, _) in COLORS.items()},
    "more": ("#ffffff", "#5f6368"),
}


def _e(value: object) -> str:
    return printable(html.escape(str(value), quote=True))


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _svg(graph: PlanGraph, attachments: list[tuple[Any, bool]]) -> str:
    """The graph as inline SVG: layered top to bottom by the longest path to each box."""
    from ._picture import _picture

    picture = _picture(graph, attachments)
    boxes = {box.key: box for box in picture.boxes}
    incoming: dict[str, list[str]] = {key: [] for key in boxes}
    for a, b in (*picture.edges, *picture.binds):
        incoming[b].append(a)
    # Each box one layer below the lowest box it comes from (worked out in order, not by
    # recursion: a chain of thousands of nodes is a valid plan).
    import graphlib

    layer: dict[str, int] = {}
    for key in graphlib.TopologicalSorter(incoming).static_order():
        layer[key] = 1 + max((layer[p] for p in incoming[key]), default=-1)
    rows: dict[int, list[str]] = {}
    for key in boxes:
        rows.setdefault(layer[key], []).append(key)
    shown: dict[str, tuple[float, float]] = {}
    extra: list[tuple[int, int]] = []
    width = 0
    for number, keys in sorted(rows.items()):
        drawn = keys if len(keys) <= _LAYER_LIMIT else keys[: _LAYER_LIMIT - 1]
        if len(drawn) < len(keys):
            extra.append((number, len(keys) - len(drawn)))
        count = len(drawn) + (1 if len(drawn) < len(keys) else 0)
        width = max(width, count * (_BOX_W + _GAP_X))
        for index, key in enumerate(drawn):
            shown[key] = (index * (_BOX_W + _GAP_X) + _GAP_X, number * (_BOX_H + _GAP_Y) + 16)
    height = (max(rows, default=0) + 1) * (_BOX_H + _GAP_Y) + 16
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + _GAP_X}" height="{height}" '
        f'viewBox="0 0 {width + _GAP_X} {height}" role="img" aria-label="the plan graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#80868b"/>'
        "</marker></defs>",
    ]
    for a, b in picture.edges:
        if a in shown and b in shown:
            parts.append(_edge(shown[a], shown[b], dotted=False))
    for a, b in picture.binds:
        if a in shown and b in shown:
            parts.append(_edge(shown[a], shown[b], dotted=True))
    for key, (x, y) in shown.items():
        box = boxes[key]
        fill, stroke = _FILL[box.kind]
        dash = ' stroke-dasharray="5 3"' if box.kind == "informational" else ""
        radius = 22 if box.kind in ("criterion", "actor") else 6
        parts.append(
            f"<g><title>{_e(' — '.join(box.label))}</title>"
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="{radius}" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="1.5"{dash}/>'
        )
        for line, text in enumerate(box.label[:2]):
            clipped = text if len(text) <= 30 else text[:29] + "…"
            weight = ' font-weight="600"' if line == 0 else ""
            parts.append(
                f'<text x="{x + _BOX_W / 2}" y="{y + 19 + line * 16}" text-anchor="middle" '
                f'fill="{stroke}"{weight}>{_e(clipped)}</text>'
            )
        parts.append("</g>")
    for number, hidden in extra:
        x = (_LAYER_LIMIT - 1) * (_BOX_W + _GAP_X) + _GAP_X
        y = number * (_BOX_H + _GAP_Y) + 16
        parts.append(
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" fill="#fff" '
            f'stroke="#5f6368" stroke-dasharray="2 2"/><text x="{x + _BOX_W / 2}" '
            f'y="{y + 27}" text-anchor="middle" fill="#5f6368">+{hidden} more</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _edge(a: tuple[float, float], b: tuple[float, float], *, dotted: bool) -> str:
    x1, y1 = a[0] + _BOX_W / 2, a[1] + _BOX_H
    x2, y2 = b[0] + _BOX_W / 2, b[1]
    middle = (y1 + y2) / 2
    style = ' stroke-dasharray="3 3"' if dotted else ' marker-end="url(#arrow)"'
    return (
        f'<path d="M{x1},{y1} C{x1},{middle} {x2},{middle} {x2},{y2 - 2}" fill="none" '
        f'stroke="#9aa0a6" stroke-width="1.2"{style}/>'
    )


def _timeline(view: PlanView, informational: frozenset[str]) -> str:
    longest = max(
        (call.get("duration") or 0.0 for r in view.rounds for call in r.validations),
        default=0.0,
    )
    out = ['<section id="timeline"><h2>Rounds</h2>']
    if not view.rounds:
        out.append('<p class="muted">No validation round ran.</p>')
    for r in view.rounds:
        state = (
            "passed every layer"
            if r.passed
            else f"rejected at the {r.layer} layer"
            if r.passed is False
            else "did not finish"
        )
        badge = "pass" if r.passed else "fail" if r.passed is False else "none"
        # The layers' own time: a person's wait for an approval is not the round's work.
        work = sum(v for k, v in r.layers.items() if k != "approval")
        took = f" · {work:.3f} s" if r.layers else ""
        out.append(
            f'<div class="round"><h3>Round {r.round} <span class="badge {badge}">{_e(state)}'
            f'</span> <span class="muted">attempt {r.attempt} · revision {r.revision}'
            f" · {_when(r.started_at)}{took}</span></h3>"
        )
        if r.validations:
            out.append(
                "<table><tr><th>validation</th><th>runs</th><th>result</th>"
                '<th>held by</th><th>time</th><th class="track"></th><th>message</th></tr>'
            )
            # Failures first: past the cap, only passing calls go uncounted by name.
            calls = sorted(r.validations, key=lambda c: c.get("passed") is not False)
            for call in calls[:_CALLS_SHOWN]:
                passed = call.get("passed")
                warns = passed is False and call["node"] in informational
                result = (
                    "passed"
                    if passed
                    else "warning"
                    if warns
                    else "failed"
                    if passed is False
                    else "did not finish"
                )
                badge = "pass" if passed else "warn" if warns else "fail" if passed is False else ""
                duration = call.get("duration")
                fresh = call.get("reused_from") is None  # a reused result took no time
                share = (duration / longest * 100) if duration and longest and fresh else 0
                kind = (
                    "" if passed else " warn" if warns else " fail" if passed is False else " none"
                )
                out.append(
                    f"<tr><td>{_e(call['node'])}</td><td>{_e(call.get('validation', ''))}</td>"
                    f'<td><span class="badge {badge}">{result}</span></td>'
                    f"<td>{_e(call.get('enforced_by') or '')}"
                    f"{', network declared' if call.get('network') else ''}</td>"
                    f"<td>{_took(duration, call.get('reused_from'))}</td>"
                    f'<td class="track"><div class="bar{kind}" style="width:{share:.1f}%">'
                    f"</div></td><td>{_e(call.get('message', ''))}</td></tr>"
                )
            out.append("</table>")
            hidden = len(r.validations) - _CALLS_SHOWN
            if hidden > 0:
                out.append(f'<p class="muted">… and {hidden} more validation calls.</p>')
        out.append("</div>")
    out.append("</section>")
    return "".join(out)


def _criteria(view: PlanView) -> str:
    out = ['<section id="criteria"><h2>Acceptance criteria</h2>']
    if view.verdict:
        out.append(
            f"<p>Verdict: <b>{_e(view.verdict.get('verdict', ''))}</b> "
            f"{_e(view.verdict.get('summary', ''))}</p>"
        )
    else:
        out.append('<p class="muted">No verdict yet.</p>')
    if view.criteria:
        out.append("<table><tr><th>criterion</th><th>text</th><th>status</th><th>why</th></tr>")
        out.extend(
            f"<tr><td>{_e(c['name'] or c['id'])}</td><td>{_e(c['text'])}</td>"
            f'<td><span class="badge {_e(c["status"])}">{_e(c["status"])}</span></td>'
            f"<td>{_e(c['reasoning'])}</td></tr>"
            for c in view.criteria
        )
        out.append("</table>")
    out.append("</section>")
    return "".join(out)


def _diff(view: PlanView) -> str:
    out = ['<section id="diff"><h2>The change</h2>']
    if view.changes is None:
        out.append(f'<p class="muted">{_e(view.changes_note)}</p>')
    elif not view.changes:
        out.append(f'<p class="muted">{_e(view.changes_note)}: nothing changed.</p>')
    else:
        out.append(f"<p>{_e(view.changes_note)}.</p>")
        for change in view.changes:
            note = f" ({change.note})" if change.note else ""
            out.append(
                f'<div class="diff"><div class="file">{_e(change.kind)} '
                f"{_e(change.resource)}: {_e(change.path)}{_e(note)}</div>"
            )
            if change.diff:
                out.append("<pre>")
                for line in change.diff.splitlines():
                    kind = (
                        "hunk"
                        if line.startswith("@@")
                        else "add"
                        if line.startswith("+") and not line.startswith("+++")
                        else "del"
                        if line.startswith("-") and not line.startswith("---")
                        else ""
                    )
                    out.append(f'<span class="{kind}">{_e(line) or " "}</span>')
                out.append("</pre>")
            out.append("</div>")
    out.append("</section>")
    return "".join(out)


def _statistics(view: PlanView) -> str:
    st = view.statistics
    rows = [
        ("rounds", st.rounds),
        ("rounds through every layer", st.pipeline_completions),
        ("validation calls (semantic layer)", st.semantic_invocations),
        ("fixes", st.fixes),
        ("validator retries", st.validator_retries),
        ("strategy revisions", st.revisions),
        ("escalations", st.escalations),
        ("waiting for approval", f"{st.approval_wait_seconds:.1f} s"),
    ]
    rows += [(f"time in the {k} layer", f"{v:.3f} s") for k, v in st.layer_seconds.items()]
    rows += [(f"rejections at the {k} layer", v) for k, v in st.rejection_reasons.items()]
    rows += [(f"flaky: {k}", v) for k, v in st.flakes.items()]
    body = "".join(f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in rows)
    return f'<section id="statistics"><h2>Statistics</h2><table>{body}</table></section>'


def _informational(graph: PlanGraph | None) -> frozenset[str]:
    """The validation nodes of ``graph`` whose failures are warnings."""
    if graph is None:
        return frozenset()
    from gategraph.runtime._data._models import Validation, ValidationMode

    return frozenset(
        node.id
        for node in graph.validation_nodes()
        if isinstance(tool := graph.registry.get(node.target), Validation)
        and tool.mode is ValidationMode.INFORMATIONAL
    )


def render_html(
    view: PlanView,
    graph: PlanGraph | None = None,
    *,
    attachments: list[tuple[Any, bool]] | None = None,
) -> str:
    """The page of one plan. ``graph`` (the plan graph it ran) draws the picture; without
    it the page says the graph is not at hand."""
    s = view.summary
    waits = f" — waits for {s.waiting_for}" if s.waiting_for else ""
    if graph is not None:
        picture = _svg(graph, attachments or [])
    else:
        picture = '<p class="muted">The plan graph file is not at hand: no picture.</p>'
    steps = "\n".join(view.ladder)
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(s.name)} · {_e(s.status)} · gategraph</title>"
        f"<style>{_STYLE}</style></head><body>"
        f'<header><h1>{_e(s.name)} <span class="badge {_e(s.status)}">{_e(s.status)}</span>'
        f"</h1><p>plan {_e(s.plan_id)}{_e(waits)}</p>"
        f"<p>started {_when(s.started_at)} · last event {_when(s.last_at)}"
        + (f" · {_e(s.graph_path)}" if s.graph_path else "")
        + "</p>"
        + (f"<p>{_e(s.message)}</p>" if s.message else "")
        + "</header><main>"
        f'<section id="graph"><h2>The graph</h2><div style="overflow-x:auto">{picture}</div>'
        "</section>"
        + _timeline(view, _informational(graph))
        + f'<section id="steps"><h2>Steps</h2><div class="steps">{_e(steps)}</div></section>'
        + _criteria(view)
        + _diff(view)
        + _statistics(view)
        + f'<p class="muted">Written by gategraph {_e(__version__)}.</p>'
        "</main></body></html>\n"
    )


def plan_report(log_path: Any, plan_id: str, *, catalog: Any = None) -> str | None:
    """The HTML page of plan ``plan_id`` of the event log at ``log_path`` (a SQLite file or
    a PostgreSQL URL; None when the log has no such plan). The picture is drawn from the graph file the plan ran, when
    it is still there and unchanged."""
    from pathlib import Path

    from gategraph.runtime._base._exceptions import ConfigError
    from gategraph.runtime._data._events import PlanStarted
    from gategraph.runtime._definitions._graph import load_graph
    from gategraph.runtime._storage._database import events_at, log_exists

    from ._picture import _attached
    from ._plan_show import plan_view

    events = events_at(log_path, plan_id) if log_exists(log_path) else []
    view = plan_view(log_path, plan_id, catalog=catalog, events=events)
    if view is None:
        return None
    graph = None
    started = next((e for e in events if isinstance(e, PlanStarted)), None)
    path = Path(started.graph_path) if started is not None and started.graph_path else None
    if started is not None and path is not None and path.is_file():
        if started.graph_unchanged(path):
            try:
                graph = load_graph(path, catalog=catalog)
            except ConfigError:
                graph = None  # it no longer loads: the page says so, without a picture
    attachments = _attached(graph, catalog) if graph is not None else []
    return render_html(view, graph, attachments=attachments)


def _took(duration: float | None, reused_from: int | None) -> str:
    """A call's time, or the round whose call's result it reused."""
    if reused_from is not None:
        return f"reused (round {reused_from})"
    return "" if duration is None else f"{duration:.3f} s"
