"""SARIF locations from what a result's data lists, whatever shape the data has."""

from __future__ import annotations

import pytest
from gategraph.runtime import GraphRun
from gategraph.runtime._views._reports import _locations, render_report


def test_locations_are_taken_from_file_entries_only() -> None:
    data = {
        "errors": [
            {"file": "a.py", "line": 3, "message": "bad"},
            {"file": "b.py", "line": True},  # a bool is no line
            {"file": "c.py", "line": 0, "text": "zero"},
            {"path": "d.py"},  # no `file`
            "e.py",  # not a mapping
        ],
        "count": 2,  # not a list
    }
    found = _locations(data)
    assert found == [
        {
            "physicalLocation": {"artifactLocation": {"uri": "a.py"}, "region": {"startLine": 3}},
            "message": {"text": "bad"},
        },
        {"physicalLocation": {"artifactLocation": {"uri": "b.py"}}},
        {"physicalLocation": {"artifactLocation": {"uri": "c.py"}}, "message": {"text": "zero"}},
    ]
    assert _locations(["not", "a", "mapping"]) == []
    many = {"matches": [{"file": f"f{i}.py", "line": 1} for i in range(80)]}
    assert len(_locations(many)) == 50  # a cap: a report stays readable


def test_an_unknown_report_format_is_refused() -> None:
    run = GraphRun(
        plan_id="p", graph="g", attempt=1, nodes={}, validations=[], duration=0.0, selected=0
    )
    with pytest.raises(ValueError, match="unknown report format 'pdf': use one of junit, sarif"):
        render_report(run, "pdf", name="g")
