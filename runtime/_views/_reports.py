"""Reports of a plan's validations for other tools: JUnit XML and SARIF 2.1.0."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from gategraph.runtime._version import __version__

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gategraph.runtime._lifecycle._supervisor import PlanOutcome
    from gategraph.runtime._running._engine import GraphRun, ValidationRecord

__all__ = ["REPORT_FORMATS", "render_report"]

REPORT_FORMATS: Final = ("junit", "sarif")
_SARIF_SCHEMA: Final = "https://json.schemastore.org/sarif-2.1.0.json"


class _Judged(NamedTuple):
    """What a report shows: a plan's last round, or one run of a graph's nodes."""

    records: Sequence[ValidationRecord]
    plan_id: str
    status: str
    verdict: Any
    broken: Sequence[tuple[str, str]] = ()
    """Nodes of a graph run that are no validation and did not finish (failed, skipped):
    their id and why. A work node that failed fails the run too."""


def _junit(outcome: _Judged, name: str) -> str:
    records = outcome.records
    failures = [r for r in records if not r.result.passed and r.mode.value == "required"]
    suite = ET.Element(
        "testsuite",
        {
            "name": name,
            "tests": str(len(records) + len(outcome.broken)),
            "failures": str(len(failures)),
            "errors": str(len(outcome.broken)),
            "skipped": "0",
            "time": f"{sum(_took(r) for r in records):.3f}",
        },
    )
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", {"name": "plan_id", "value": outcome.plan_id})
    ET.SubElement(properties, "property", {"name": "status", "value": outcome.status})
    for record in records:
        case = ET.SubElement(
            suite,
            "testcase",
            {
                "classname": f"{name}.{record.mode.value}",
                "name": record.node,
                "time": f"{_took(record):.3f}",
            },
        )
        if record.enforced_by is not None:
            # What held it to read-only: a consumer can tell a kernel-held pass from a
            # trusted one.
            held = ET.SubElement(case, "properties")
            ET.SubElement(held, "property", {"name": "isolation", "value": str(record.isolation)})
            ET.SubElement(held, "property", {"name": "enforced_by", "value": record.enforced_by})
            if record.network:
                ET.SubElement(held, "property", {"name": "network", "value": "declared"})
        if record.reused_from is not None:
            # Not called again: its result, and time, are those of an earlier round's call.
            again = ET.SubElement(case, "properties") if record.enforced_by is None else held
            ET.SubElement(
                again, "property", {"name": "reused_from", "value": str(record.reused_from)}
            )
        if not record.result.passed:
            # An informational failure is shown, never counted as a failing test (seed 000).
            tag = "failure" if record.mode.value == "required" else "system-out"
            element = ET.SubElement(case, tag)
            if tag == "failure":
                element.set("message", record.result.message[:500])
                element.set("type", str(record.result.data.get("error", "rejected")))
            element.text = json.dumps(
                {"message": record.result.message, "data": record.result.data},
                default=str,
                indent=2,
            )
    for node, why in outcome.broken:
        case = ET.SubElement(suite, "testcase", {"classname": f"{name}.node", "name": node})
        ET.SubElement(case, "error", {"message": why[:500], "type": "node"}).text = why
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode")


_MAX_LOCATIONS: Final = 50


def _locations(data: Any) -> list[dict[str, Any]]:
    """SARIF locations for the file (and line) entries a result's data lists: any list of
    ``{"file": ..., "line": ...}`` mappings at its top level (python_syntax's ``errors``,
    regex's ``matches``, a custom validation's own)."""
    found: list[dict[str, Any]] = []
    if not isinstance(data, dict):
        return found
    for value in data.values():
        if not isinstance(value, list):
            continue
        for item in value:
            if not isinstance(item, dict) or not isinstance(item.get("file"), str):
                continue
            physical: dict[str, Any] = {"artifactLocation": {"uri": item["file"]}}
            line = item.get("line")
            if isinstance(line, int) and not isinstance(line, bool) and line >= 1:
                physical["region"] = {"startLine": line}
            location: dict[str, Any] = {"physicalLocation": physical}
            text = item.get("message") or item.get("text")
            if isinstance(text, str) and text:
                location["message"] = {"text": text}
            found.append(location)
            if len(found) == _MAX_LOCATIONS:
                return found
    return found


def _sarif(outcome: _Judged, name: str) -> str:
    rules: dict[str, dict[str, Any]] = {}
    results = []
    for record in outcome.records:
        rules.setdefault(
            record.validation,
            {
                "id": record.validation,
                "name": record.validation,
                "shortDescription": {"text": record.validation},
            },
        )
        if record.result.passed:
            continue
        results.append(
            {
                "ruleId": record.validation,
                "level": "error" if record.mode.value == "required" else "note",
                "message": {"text": record.result.message or "failed"},
                "locations": _locations(record.result.data),
                "properties": {
                    "node": record.node,
                    "attachmentId": record.attachment_id,
                    "mode": record.mode.value,
                    "isolation": record.isolation,
                    "enforcedBy": record.enforced_by,
                    "network": record.network,
                    "data": record.result.data,
                },
            }
        )
    for node, why in outcome.broken:
        rules.setdefault(
            "gategraph.node",
            {"id": "gategraph.node", "name": "node", "shortDescription": {"text": "a node"}},
        )
        results.append(
            {
                "ruleId": "gategraph.node",
                "level": "error",
                "message": {"text": f"{node}: {why}"},
                "locations": [],
                "properties": {"node": node},
            }
        )
    document = {
        "$schema": _SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gategraph",
                        "version": __version__,
                        "rules": list(rules.values()),
                    }
                },
                "automationDetails": {"id": f"{name}/{outcome.plan_id}"},
                "results": results,
                "properties": {"status": outcome.status, "verdict": outcome.verdict},
            }
        ],
    }
    return json.dumps(document, indent=2, default=str)


def render_report(outcome: PlanOutcome | GraphRun, kind: str, *, name: str) -> str:
    """Render a plan's last round of validations, or a graph run's (``gategraph execute``,
    whose status is ``passed`` or ``failed``), as ``junit`` (XML) or ``sarif`` (JSON)."""
    from gategraph.runtime._running._engine import GraphRun

    if isinstance(outcome, GraphRun):
        validations = {v.node for v in outcome.validations}
        broken = [
            (node, result.error or result.status.value)
            for node, result in outcome.nodes.items()
            if node not in validations and result.status.value != "ok"
        ]
        judged = _Judged(
            outcome.validations,
            outcome.plan_id,
            "passed" if outcome.passed else "failed",
            None,
            broken,
        )
    else:
        judged = _Judged(
            outcome.validations, outcome.plan_id, outcome.status.value, outcome.verdict
        )
    if kind == "junit":
        return _junit(judged, name)
    if kind == "sarif":
        return _sarif(judged, name)
    raise ValueError(f"unknown report format {kind!r}: use one of {', '.join(REPORT_FORMATS)}")


def _took(record: ValidationRecord) -> float:
    """The seconds a record's call took this round: none for a reused result."""
    return record.duration if record.reused_from is None else 0.0
