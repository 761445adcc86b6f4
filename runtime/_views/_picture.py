"""A plan graph as a picture: Mermaid and Graphviz DOT text of its nodes, the validations
attached to its resources, its acceptance criteria and its ``needs`` edges.

Work nodes are boxes, validation nodes hexagons (a required one solid, an informational
one dashed: it never blocks), actor nodes rounded, attached validations hexagons that hang
off the last work (they run once every work node is done, and gate like any required
validation), acceptance criteria stadiums with a dotted edge from each validation that
binds them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gategraph.runtime._data._models import Attachment
    from gategraph.runtime._definitions._catalog import Catalog
    from gategraph.runtime._definitions._graph import PlanGraph

__all__ = ["FORMATS", "draw", "draw_dot", "draw_mermaid"]

FORMATS: Final = ("mermaid", "dot")

_LABEL_LIMIT: Final = 60
COLORS: Final = {
    "work": ("#e8f0fe", "#3367d6", "#174ea6"),
    "required": ("#fce8e6", "#c5221f", "#a50e0e"),
    "informational": ("#f1f3f4", "#5f6368", "#3c4043"),
    "attached": ("#fef7e0", "#b06000", "#7a4100"),
    "actor": ("#f3e8fd", "#8430ce", "#681da8"),
    "criterion": ("#e6f4ea", "#137333", "#0d652d"),
}
"""Fill, line and text colour of each kind of box, in every picture (Mermaid, DOT, the
report's SVG)."""
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class _Box:
    """One thing in the picture."""

    key: str
    """Its id in the picture (unique, safe in both formats)."""
    label: tuple[str, ...]
    """Its lines of text."""
    kind: str
    """``work``, ``required``, ``informational``, ``actor``, ``attached`` or
    ``criterion``."""


@dataclass(frozen=True, slots=True)
class _Picture:
    boxes: tuple[_Box, ...]
    edges: tuple[tuple[str, str], ...]
    """``needs`` edges, and the edges into attached validations."""
    binds: tuple[tuple[str, str], ...]
    """Validation → the criterion it binds (dotted)."""


def _short(text: str) -> str:
    text = _one_line(text)
    return text if len(text) <= _LABEL_LIMIT else text[: _LABEL_LIMIT - 1] + "…"


def _one_line(text: str) -> str:
    """``text`` as a label shows it: on one line, and :func:`printable`."""
    return printable(" ".join(text.split()))


def printable(text: str) -> str:
    """``text`` with every character one that can be written: a lone surrogate (a file
    name that is not UTF-8), which no encoding holds, becomes U+FFFD."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def _picture(graph: PlanGraph, attachments: Sequence[tuple[Attachment, bool]]) -> _Picture:
    from gategraph.runtime._definitions._graph import NodeKind

    boxes: list[_Box] = []
    edges: list[tuple[str, str]] = []
    binds: list[tuple[str, str]] = []
    taken: set[str] = set()
    # `a-b` and `a_b` are two node ids, and one once `-` (which Mermaid reads as an edge)
    # is spelled `_`: each gets a key of its own.
    key_of = {node.id: _unique(f"n_{node.id}".replace("-", "_"), taken) for node in graph.nodes}
    for node in graph.nodes:
        if node.kind is NodeKind.WORK:
            kind, what = "work", f"tool: {node.target}"
        elif node.kind is NodeKind.ACTOR:
            kind, what = "actor", f"uses: {node.target}"
        else:
            tool = graph.registry.get(node.target)
            mode = getattr(tool, "mode", None)
            kind = (
                "informational"
                if mode is not None and mode.value == "informational"
                else "required"
            )
            what = node.target if node.target != node.id else ""
            what = f"{what} ({kind})".strip() if kind == "informational" else what
        label = tuple(_one_line(x) for x in (node.id, what) if x)
        boxes.append(_Box(key_of[node.id], label, kind))
        edges.extend((key_of[need], key_of[node.id]) for need in node.needs)
    work = graph.work_phase()
    needed = {need for name in work for need in graph.node(name).needs}
    last = [name for name in work if name not in needed] or work
    for index, (attached, informational) in enumerate(attachments):
        key = _unique(f"a_{index}", taken)
        where = f"on {_one_line(attached.resource)} ({attached.scope.value})"
        kind = "informational" if informational else "attached"
        second = f"{where}, informational" if informational else where
        boxes.append(_Box(key, (f"attached: {attached.validation}", second), kind))
        edges.extend((key_of[n], key) for n in last)
    for index, criterion in enumerate(graph.acceptance):
        key = _unique(f"c_{index}", taken)
        boxes.append(_Box(key, (_short(f"{criterion.id}: {criterion.text}"),), "criterion"))
        bound = set(criterion.validations)
        binds.extend(
            (key_of[node.id], key)
            for node in graph.nodes
            if node.validation is not None and bound & {node.id, node.validation}
        )
    return _Picture(tuple(boxes), tuple(edges), tuple(dict.fromkeys(binds)))


def _unique(key: str, taken: set[str]) -> str:
    while key in taken:
        key += "_"
    taken.add(key)
    return key


# -- Mermaid ---------------------------------------------------------------------------------

_MERMAID_SHAPES: Final = {
    "work": ('["', '"]'),
    "required": ('{{"', '"}}'),
    "informational": ('{{"', '"}}'),
    "attached": ('{{"', '"}}'),
    "actor": ('("', '")'),
    "criterion": ('(["', '"])'),
}
_MERMAID_CLASSES: Final = tuple(
    f"classDef {kind} fill:{fill},stroke:{stroke},color:{text}"
    + (",stroke-dasharray:4 3" if kind == "informational" else "")
    for kind, (fill, stroke, text) in COLORS.items()
)


def _mermaid_text(line: str) -> str:
    # Mermaid reads entities in a quoted label (`#quot;`, `#35;`): `#` itself first, then
    # quotes and angle brackets, so a label's text is never read as an entity.
    return (
        line.replace("#", "#35;")
        .replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
    )


def draw_mermaid(graph: PlanGraph, *, catalog: Catalog | None = None) -> str:
    """The Mermaid ``flowchart`` of ``graph`` (with ``catalog``, the validations attached
    to its resources too)."""
    picture = _picture(graph, _attached(graph, catalog))
    lines = ["flowchart TD"]
    for box in picture.boxes:
        opening, closing = _MERMAID_SHAPES[box.kind]
        label = "<br/>".join(_mermaid_text(line) for line in box.label)
        lines.append(f"  {box.key}{opening}{label}{closing}:::{box.kind}")
    lines += [f"  {a} --> {b}" for a, b in picture.edges]
    lines += [f"  {a} -.-> {b}" for a, b in picture.binds]
    lines += [f"  {line}" for line in _MERMAID_CLASSES]
    return "\n".join(lines) + "\n"


# -- DOT -------------------------------------------------------------------------------------

_DOT_SHAPES: Final = {
    "work": ("box", "rounded,filled"),
    "required": ("hexagon", "filled"),
    "informational": ("hexagon", "filled,dashed"),
    "attached": ("hexagon", "filled"),
    "actor": ("ellipse", "filled"),
    "criterion": ("note", "filled"),
}
_DOT_STYLES: Final = {
    kind: f'shape={shape}, style="{style}", fillcolor="{COLORS[kind][0]}", '
    f'color="{COLORS[kind][1]}"'
    for kind, (shape, style) in _DOT_SHAPES.items()
}


def _dot_text(text: str) -> str:
    return re.sub(r'(["\\])', r"\\\1", text)


def draw_dot(graph: PlanGraph, *, catalog: Catalog | None = None) -> str:
    """The Graphviz DOT ``digraph`` of ``graph`` (with ``catalog``, the validations
    attached to its resources too)."""
    picture = _picture(graph, _attached(graph, catalog))
    lines = [
        f'digraph "{_dot_text(graph.name)}" {{',
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=11];',
    ]
    for box in picture.boxes:
        label = "\\n".join(_dot_text(line) for line in box.label)
        lines.append(f'  "{box.key}" [label="{label}", {_DOT_STYLES[box.kind]}];')
    lines += [f'  "{a}" -> "{b}";' for a, b in picture.edges]
    lines += [f'  "{a}" -> "{b}" [style=dotted, arrowhead=none];' for a, b in picture.binds]
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw(graph: PlanGraph, format: str, *, catalog: Catalog | None = None) -> str:
    """The picture of ``graph`` in ``format`` (``mermaid`` or ``dot``)."""
    from gategraph.runtime._base._exceptions import ConfigError

    if format == "mermaid":
        return draw_mermaid(graph, catalog=catalog)
    if format == "dot":
        return draw_dot(graph, catalog=catalog)
    raise ConfigError.at("format", f"must be one of {', '.join(FORMATS)}, not {format!r}")


def _attached(graph: PlanGraph, catalog: Catalog | None) -> list[tuple[Attachment, bool]]:
    """The validations the catalog attaches to the graph's resources, as a plan of this
    graph would run them (its project's, and the direct ones), each with whether it is
    informational (it never gates)."""
    from gategraph.runtime._base._exceptions import GategraphError
    from gategraph.runtime._data._models import ValidationMode

    if catalog is None:
        return []
    found: list[tuple[Attachment, bool]] = []
    for resource in graph.resources:
        for attached in catalog.resolve(resource, project=graph.project):
            try:
                mode = getattr(catalog.get(attached.validation), "mode", None)
            except GategraphError:
                mode = None  # gone or unreadable: drawn as what attachments mostly are
            found.append((attached, mode is ValidationMode.INFORMATIONAL))
    return found
