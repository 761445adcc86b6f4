"""Reading configuration files: positions, duplicate keys, and one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from gategraph.runtime import ConfigError, Validation
from gategraph.runtime._yaml import format_path, load_document, read_document


def test_positions_are_kept() -> None:
    """Every value's line and column is known by its path."""
    doc = load_document("name: x\nnodes:\n  - id: a\n    needs: [b]\n", "g.yaml")
    assert doc.data == {"name": "x", "nodes": [{"id": "a", "needs": ["b"]}]}
    assert doc.position(["name"]) == (1, 7)
    assert doc.position(["nodes", 0, "needs"]) == (4, 12)
    assert doc.position(["nodes", 0, "needs", 0]) == (4, 13)
    # An unknown path falls back to its deepest known parent.
    assert doc.position(["nodes", 0, "missing"]) == (3, 5)


def test_error_lines_name_file_line_column_and_field() -> None:
    """A model error on a document reads FILE:LINE:COL: field: message."""
    doc = load_document("name: v\ncode: 'def run(): pass'\ntimeout: -2\n", "v.yaml")
    with pytest.raises(ConfigError) as info:
        Validation.from_config(doc)
    assert str(info.value) == "v.yaml:3:10: timeout: Input should be greater than 0"


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("a: 1\na: 2\n", "duplicate key 'a'", ":2:1:"),
        ("a: [\n", "invalid YAML", ":2:1:"),
        ("", "the file is empty", None),
        ("# only a comment\n", "the file is empty", None),
        ("a: 1\n---\nb: 2\n", "expected a single document", ":2:1:"),
        ("? [a, b]\n: 1\n", "keys must be plain scalars", ":1:3:"),
        ("a: !!python/object:os.system x\n", "invalid YAML", ":1:4:"),
    ],
)
def test_bad_documents(text: str, message: str, position: str | None) -> None:
    """Broken YAML gives one ConfigError line with its position."""
    with pytest.raises(ConfigError) as info:
        load_document(text, "f.yaml")
    rendered = str(info.value)
    assert message in rendered
    assert rendered.startswith("f.yaml")
    if position:
        assert position in rendered
    assert "\n" not in rendered


def test_merge_keys_and_anchors() -> None:
    """YAML anchors and merge keys work as in any YAML loader."""
    doc = load_document("base: &b {x: 1}\nother:\n  <<: *b\n  y: 2\n")
    assert doc.data["other"] == {"x": 1, "y": 2}


def test_dates_stay_text() -> None:
    """YAML timestamps are kept as ISO text so configs stay JSON-compatible."""
    assert load_document("when: 2026-01-02\n").data == {"when": "2026-01-02"}


def test_json_is_read() -> None:
    """JSON files are read by the same loader."""
    assert load_document('{"name": "x", "n": [1, 2]}').data == {"name": "x", "n": [1, 2]}


def test_undecodable_bytes() -> None:
    """Non-UTF-8 files are refused clearly."""
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_document(b"name: \xff\n", "x.yaml")


def test_read_document_errors(tmp_path: Path) -> None:
    """Missing files and directories are one-line errors naming the path."""
    with pytest.raises(ConfigError, match="no such file"):
        read_document(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        read_document(tmp_path)
    good = tmp_path / "ok.yaml"
    good.write_text("a: 1\n")
    assert read_document(good).data == {"a": 1}


def test_deep_nesting_is_refused() -> None:
    """Absurdly deep documents are an error, not a RecursionError."""
    with pytest.raises(ConfigError, match="too deep"):
        load_document("a: " + "[" * 300 + "]" * 300)


def test_format_path() -> None:
    """Paths render as dotted names with [index] for lists."""
    assert format_path(["nodes", 2, "needs", 0]) == "nodes[2].needs[0]"
    assert format_path([]) == ""
