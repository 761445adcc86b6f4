"""Reading configuration files: positions, duplicate keys, and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers import run_process
from gategraph.runtime import ConfigError, Validation
from gategraph.runtime._base._yaml import (
    MAX_DEPTH,
    MAX_DOCUMENT_BYTES,
    format_path,
    load_document,
    read_document,
)
from gategraph.runtime._definitions._graph import load_graph


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


# -- limits, bombs and bad bytes ---------------------------------------------------------------

LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
# Each mapping merges the one before twice: 2**40 keys once flattened.
MERGE_BOMB = "l0: &l0 {k0: 0}\n" + "".join(
    f"l{i}: &l{i} {{<<: [*l{i - 1}, *l{i - 1}], k{i}: {i}}}\n" for i in range(1, 40)
)


def one_line_error(text: str | bytes, source: str = "f.yaml") -> str:
    """The ConfigError that loading ``text`` raises, checked to be one line."""
    with pytest.raises(ConfigError) as info:
        load_document(text, source)
    rendered = str(info.value)
    assert "\n" not in rendered
    assert rendered.startswith(f"{source}:")
    return rendered


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (LAUGHS, "f.yaml:2:", "aliases expand to more than 100,000 values"),
        (MERGE_BOMB, "f.yaml:", "aliases expand to more than 100,000 values"),
        ("a: &a [1, *a]\n", "f.yaml:1:11: a[1]", "an alias refers to a value that contains it"),
        ("a: &a {b: [*a]}\n", "f.yaml:1:12: a.b[0]", "an alias refers to a value that contains"),
        ("a: &a\n  x: 1\n  <<: *a\n", "f.yaml:1:4: a", "refers to the mapping that holds it"),
    ],
)
def test_alias_bombs_are_refused(text: str, where: str, message: str) -> None:
    """Aliases that expand without bound are refused at once, with where and which limit."""
    rendered = one_line_error(text)
    assert rendered.startswith(where)
    assert message in rendered


def test_aliases_in_proportion_to_the_file_load() -> None:
    """The alias budget grows with the file: 10,000 nodes that reuse one mapping load."""
    lines = ["nodes:", "  - {id: n0, arguments: &args {a: 1, b: [1, 2, 3], c: {d: x}}}"]
    lines += [f"  - {{id: n{i}, arguments: *args}}" for i in range(1, 10_000)]
    doc = load_document("\n".join(lines) + "\n")
    assert len(doc.data["nodes"]) == 10_000
    assert doc.data["nodes"][-1]["arguments"] == {"a": 1, "b": [1, 2, 3], "c": {"d": "x"}}
    # Each use is its own copy, with the position of the alias that named it.
    assert doc.data["nodes"][1]["arguments"] is not doc.data["nodes"][2]["arguments"]
    assert doc.position(["nodes", 5, "arguments"]) == (7, 25)
    # Past the floor, a small file may not copy more than ten times its own values.
    small = "a: &a [" + ", ".join(["x"] * 1000) + "]\nb: [" + ", ".join(["*a"] * 120) + "]\n"
    assert "aliases expand to more than 100,000" in one_line_error(small)


def test_merge_keys_follow_yaml() -> None:
    """A mapping's own keys override merged ones; of several merged, the first wins."""
    doc = load_document("a: &a {x: 1, y: 1}\nb: &b {x: 2, z: 2}\nc:\n  <<: [*a, *b]\n  y: 3\n")
    assert doc.data["c"] == {"x": 1, "y": 3, "z": 2}
    assert "a merge key (<<) takes a mapping" in one_line_error("a: {<<: 3}\n")


def test_nesting_limit_is_exact() -> None:
    """Collections nest at most MAX_DEPTH levels; the error points at the one too many."""
    ok = "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    assert load_document(ok).data["a"] is not None
    rendered = one_line_error("a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    assert rendered == f"f.yaml:1:{MAX_DEPTH + 3}: nesting is too deep (more than 100 levels)"
    block = "".join("  " * i + f"k{i}:\n" for i in range(150)) + "  " * 150 + "v: 1\n"
    assert one_line_error(block).startswith("f.yaml:101:201: nesting is too deep")
    assert "nesting is too deep" in one_line_error("a: " + "[" * 50_000 + "]" * 50_000)


def test_size_limit(tmp_path: Path) -> None:
    """A file over MAX_DOCUMENT_BYTES is refused without being read or parsed whole."""
    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: " + b"x" * MAX_DOCUMENT_BYTES + b"\n")
    with pytest.raises(ConfigError) as info:
        read_document(big)
    assert str(info.value) == (
        f"{big}:1:{MAX_DOCUMENT_BYTES + 1}: the file is over the limit of "
        f"{MAX_DOCUMENT_BYTES:,} bytes for a configuration file"
    )
    text = "a: 1\n" * (MAX_DOCUMENT_BYTES // 5 + 1)
    assert "over the limit of 16,777,216" in one_line_error(text)
    assert "over the limit" in one_line_error(text.encode())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"name: a\x00b\n", "f.yaml:1:8: invalid YAML: unacceptable character #x0000"),
        ("a: 1\nb: x\x00\n", "f.yaml:2:5: invalid YAML: unacceptable character #x0000"),
        ("a: \x07\n", "f.yaml:1:4: invalid YAML: unacceptable character #x0007"),
        ("a: \ud800\n", "f.yaml:1:4: invalid YAML: unacceptable character #xd800"),
        (b"a: 1\nname: caf\xe9\n", "f.yaml:2:10: not UTF-8 text (invalid continuation byte"),
        ("a: 1\n".encode("utf-16"), "f.yaml:1:1: not UTF-8 text"),
        ("a: 'open\n", "f.yaml:2:1: invalid YAML: found unexpected end of stream (while scan"),
        ("a:\n\tb: 1\n", "f.yaml:2:1: invalid YAML: found character '\\t' that cannot start"),
        ("a: [1, 2\nb: 3\n", "f.yaml:2:2: invalid YAML: expected ',' or ']', but got ':'"),
        ("a: *nope\n", "f.yaml:1:4: invalid YAML: found undefined alias 'nope'"),
        ("a: &x 1\nb: &x 2\n", "f.yaml:2:4: invalid YAML: found duplicate anchor 'x' (first at"),
        ("a: !!python/name:os.system x\n", "f.yaml:1:4: invalid YAML: could not determine a"),
        ("a: !!int abc\n", "f.yaml:1:4: a: invalid YAML: cannot read 'abc' as int"),
        ("a: !!timestamp soon\n", "f.yaml:1:4: a: invalid YAML: cannot read 'soon' as timestamp"),
        ("a: " + "1" * 5000 + "\n", "f.yaml:1:4: a: invalid YAML: cannot read '1111"),
        ("x: &k [1]\n? *k\n: 2\n", "f.yaml:1:4: keys must be plain scalars"),
    ],
)
def test_bad_bytes_and_syntax_are_one_line(text: str | bytes, expected: str) -> None:
    """Reader, scanner, parser, composer and constructor errors: one FILE:LINE:COL line."""
    assert one_line_error(text).startswith(expected)


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_process([sys.executable, "-m", "gategraph.runtime", *map(str, args)], timeout=60)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("laughs.yaml", LAUGHS.encode(), "aliases expand to more than 100,000 values"),
        ("merges.yaml", MERGE_BOMB.encode(), "aliases expand to more than 100,000 values"),
        ("nul.yaml", b"version: 1\nname: a\x00b\n", ":2:8: invalid YAML: unacceptable character"),
        ("latin.yaml", b"version: 1\nname: caf\xe9\n", ":2:10: not UTF-8 text"),
        ("deep.yaml", b"a: " + b"[" * 5000 + b"]" * 5000, ":1:103: nesting is too deep"),
        ("tag.yaml", b"version: !!int one\n", ":1:10: version: invalid YAML: cannot read"),
    ],
)
@pytest.mark.parametrize("command", ["check", "run"])
def test_cli_reports_one_error_line(
    tmp_path: Path, command: str, name: str, content: bytes, message: str
) -> None:
    """`gategraph check` and `run` print one `error:` line, no traceback, and exit 2."""
    path = tmp_path / name
    path.write_bytes(content)
    done = _cli(command, path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {path}:")
    assert message in lines[0]
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_every_shipped_file_loads() -> None:
    """The graphs in graphs/ and the examples in docs/examples/ load under the limits."""
    root = Path(__file__).resolve().parents[2]
    graphs = sorted(root.glob("graphs/*.yaml"))
    examples = sorted(root.glob("docs/examples/*.yaml"))
    assert graphs and examples
    for file in graphs:
        assert load_graph(file).nodes
    for file in examples:
        assert isinstance(read_document(file).data, dict)


@pytest.mark.timeout(240)
def test_a_ten_thousand_node_graph_loads(tmp_path: Path) -> None:
    """A 10,000-node fan-out, with an anchor every node reuses, is well inside the limits."""
    lines = [
        "version: 1",
        "name: fan-out",
        "validations:",
        "  - {name: ok, entrypoint: 'gategraph.runtime.testing:passing'}",
        "nodes:",
        "  - {id: n0, validation: ok, arguments: &args {x: 1, tags: [a, b]}}",
    ]
    lines += [f"  - {{id: n{i}, validation: ok, arguments: *args}}" for i in range(1, 10_000)]
    path = tmp_path / "fan-out.yaml"
    path.write_text("\n".join(lines) + "\n")
    graph = load_graph(path)
    assert len(graph.nodes) == 10_000


def test_nesting_through_aliases_is_limited() -> None:
    """Aliases cannot build what could not be written: nesting past MAX_DEPTH is refused."""
    half = MAX_DEPTH // 2
    inner = "[" * half + "1" + "]" * half
    ok = f"a: &a {inner}\nb: " + "[" * (half - 1) + "*a" + "]" * (half - 1) + "\n"
    assert load_document(ok).data["b"] is not None
    deep = f"a: &a {inner}\nb: " + "[" * half + "*a" + "]" * half + "\n"
    rendered = one_line_error(deep)
    assert "nesting is too deep (more than 100 levels)" in rendered
    assert rendered.startswith(f"f.yaml:2:{half + 4}: b")


def test_a_named_pipe_nobody_writes_to_does_not_hang(tmp_path: Path) -> None:
    """`gategraph check` on a FIFO without a writer reads it as empty, at once."""
    fifo = tmp_path / "graph.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="the file is empty"):
        read_document(fifo)
