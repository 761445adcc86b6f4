"""Every code block of README.md and docs/ runs as written, and every output a page quotes is
what the code prints.

Each page is one session, in document order, as a reader follows it: a scratch folder of its
own (with a copy of graphs/, which the pages name) and a ``GATEGRAPH_HOME`` of its own.

- ``python`` runs; a comment after a one-line ``print(...)`` is what it prints (what follows a
  ``: `` in it may explain), and what the block prints is kept for an output block after it.
- ``console`` runs each ``$ command`` with bash and compares what it prints (standard output
  and standard error, as a terminal shows them) with the lines quoted under it.
- ``bash`` runs as one script that must succeed.
- ``yaml``: a plan graph is checked with ``gategraph check``; a tool, validation or skill
  configuration is registered with ``gategraph tool add --config`` / ``skill add --config``.
- ``json`` and ``toml`` parse.
- A block whose first line names a file (``# notes_server.py``) is that file: it is written
  into the scratch folder, where the page's commands use it (a plan graph is checked, unless
  the page runs ``gategraph check`` on it itself: a broken example).

A block says otherwise in an HTML comment right above it (invisible where the page is
rendered); an unmarked block of another kind fails:

- ``<!-- doc: fragment -->`` a part of a larger file: Python compiles, YAML parses, and a
  fragment of a plan graph is checked against the published schema (plan-graph.schema.json).
- ``<!-- doc: file PATH -->`` the block is the file PATH.
- ``<!-- doc: output -->`` what the block before it printed; ``<!-- doc: output-of CMD -->``
  what CMD prints.
- ``<!-- doc: before CMD -->`` a set-up command the reader has already run.
- ``<!-- doc: tested-by tests/PATH -->`` run by that test, which reads this page.
- ``<!-- doc: server -->`` a console block's commands are servers: each runs until it has
  printed what the page quotes, then is stopped with Ctrl-C (SIGINT).
- ``<!-- doc: skip REASON -->`` not run, and why (a diagram, a command's synopsis, the network).

A page whose blocks name ``DATABASE_URL`` (the reader's PostgreSQL database) gets a fresh
database on the tests' server in that variable.

Quoted output: ``...`` on a line of its own stands for any lines, inside a line for any text;
ULIDs compare equal to each other. Pages that need an optional extra (LangGraph, pydantic-ai)
run in CI's step for that extra; without it they skip.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import difflib
import importlib.util
import io
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BIN = Path(sys.executable).parent
SCHEMA = json.loads((ROOT / "docs" / "plan-graph.schema.json").read_text(encoding="utf-8"))

FENCE = re.compile(r"^([ \t]*)```([\w+-]*)[^\n]*\n(.*?)^\1```[ \t]*$", re.MULTILINE | re.DOTALL)
# The HTML comments right above a fence (a set-up command may take several lines).
COMMENTS = re.compile(r"(?:<!--(?:(?!-->).)*-->[ \t]*\n[ \t]*)+$", re.DOTALL)
DIRECTIVE = re.compile(r"<!--\s*doc:\s*([\w-]+)\s*(.*?)\s*-->", re.DOTALL)
FILE_LINE = re.compile(r"#\s+([\w./-]+\.(?:py|ya?ml|toml|json|cfg))\b")
ULID = re.compile(r"\b[0-9A-HJKMNP-TV-Z]{26}\b")
SHORT_ULID = re.compile(r"\b0[0-9A-HJKMNP-TV-Z]{1,25}\.\.\.")
MARKED = re.compile(r"^  (ok  |FAIL|warn) ")
STAMP = re.compile(r"\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?")
# A page whose Python needs one of these runs where its extra is installed.
EXTRAS = {"langgraph": "langgraph", "pydantic_ai": "pydantic-ai"}
# A global OpenTelemetry set-up lasts as long as its process (and would trace every later
# test here): such a block runs in a process of its own.
PROCESS_WIDE = ("set_tracer_provider", "set_meter_provider")


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    text: str
    directives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def directive(self, *kinds: str) -> tuple[str, str] | None:
        return next(((k, a) for k, a in self.directives if k in kinds), None)


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        indent, lang, body = match.groups()
        comments = COMMENTS.search(text, 0, match.start())
        directives = [
            (kind, dedent(argument, indent))
            for kind, argument in (DIRECTIVE.findall(comments.group(0)) if comments else [])
        ]
        body = dedent(body, indent)
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, lang, body, directives))
    return found


def dedent(text: str, indent: str) -> str:
    """A block's text, or a directive's, without the indent of the list item it is in."""
    return "".join(line.removeprefix(indent) for line in text.splitlines(keepends=True))


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def normalise(text: str) -> str:
    text = STAMP.sub("<TIME>", ULID.sub("<ULID>", text))
    lines = [line.rstrip() for line in text.strip("\n").split("\n")]
    # A round's validations finish in any order: their lines compare by name.
    runs = [
        list(group)
        for _, group in itertools.groupby(lines, key=lambda line: bool(MARKED.match(line)))
    ]
    return "\n".join(
        "\n".join(sorted(run, key=lambda line: line.split()[1]) if MARKED.match(run[0]) else run)
        for run in runs
    )


def pattern(expected: str) -> re.Pattern[str]:
    parts = []
    # An id a page shortens ("plan 01J...") stands for any id.
    for line in normalise(SHORT_ULID.sub("<ULID>", expected)).split("\n"):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(p) for p in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def same_output(expected: str, actual: str) -> str | None:
    """None when ``actual`` is what ``expected`` quotes; otherwise a diff to show."""
    if pattern(expected).fullmatch(normalise(actual) + "\n"):
        return None
    diff = difflib.unified_diff(
        normalise(expected).split("\n"),
        normalise(actual).split("\n"),
        "quoted",
        "printed",
        lineterm="",
    )
    return "\n".join(diff)


def schema_errors(fragment: Any) -> list[str]:
    """A fragment of a plan graph, against the published schema: a mapping of top-level
    fields (none of them required), or a list of nodes."""
    if isinstance(fragment, list):
        schema = {**SCHEMA, "type": "array", "items": SCHEMA["properties"]["nodes"]["items"]}
    elif isinstance(fragment, dict):
        schema = copy.deepcopy(SCHEMA)
        schema.pop("required", None)
    else:
        return [f"not a mapping nor a list: {fragment!r}"]
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
        for e in validator.iter_errors(fragment)
    ]


class Session:
    """A reader working through one page: a folder, a home, what the last block printed."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, graphs: bool) -> None:
        self.work = tmp / "work"
        self.home = tmp / "home"
        self.work.mkdir()
        # What the pages' programs make in the temporary folder stays in the test's own.
        scratch = tmp / "tmp"
        scratch.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(scratch))
        monkeypatch.setenv("TMPDIR", str(scratch))
        if graphs:  # the page names the example graphs, which a checkout has
            shutil.copytree(
                ROOT / "graphs", self.work / "graphs", ignore=shutil.ignore_patterns("__pycache__")
            )
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        self.env["GATEGRAPH_HOME"] = str(self.home)
        self.env["TMPDIR"] = str(scratch)
        # The installed gategraph and python first, as a user's activated venv has them.
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.printed = ""
        self.namespace: dict[str, Any] = {"__name__": "__main__"}
        self.monkeypatch = monkeypatch
        monkeypatch.chdir(self.work)
        monkeypatch.setenv("GATEGRAPH_HOME", str(self.home))

    def shell(self, command: str, *, shell: str = "bash") -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [shell, "-c", command],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=180,
        )
        self.printed = done.stdout
        return done

    def serve(self, command: str, expected: str) -> str:
        """Run a server until it has printed what the page quotes (or ended, or a minute
        passed), then stop it as a reader does, with Ctrl-C; what it printed until then."""
        log = self.work.parent / "server.log"
        with log.open("w") as out:
            server = subprocess.Popen(
                ["bash", "-c", f"exec {command}"],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 60
                while server.poll() is None and time.monotonic() < deadline:
                    printed = log.read_text()
                    if same_output(expected, printed) is None:
                        return printed  # what it says after Ctrl-C is not the page's
                    time.sleep(0.1)
            finally:
                server.send_signal(signal.SIGINT)
                try:
                    server.wait(10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
        return log.read_text()

    def python(self, code: str, where: str) -> None:
        if any(name in code for name in PROCESS_WIDE):
            done = subprocess.run(
                [sys.executable, "-c", code],
                cwd=self.work,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
            self.printed = done.stdout
            return
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            # One namespace per page, as a reader's session keeps what earlier blocks made.
            try:
                exec(compile(code, where, "exec"), self.namespace)
            finally:
                if "pydantic_ai" in sys.modules:
                    close_run_sync_loop()
        self.printed = out.getvalue()

    def write(self, path: str, text: str) -> Path:
        target = self.work / path
        assert not Path(path).is_absolute() and ".." not in Path(path).parts, path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        return target


def console(session: Session, block: Block) -> list[str]:
    """Each ``$ command`` of the block, run, and compared with the lines quoted under it."""
    problems = []
    steps: list[tuple[str, list[str]]] = []
    lines = block.text.rstrip("\n").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ "):
            problems.append(f"{block.where}: output before any command: {line!r}")
            break
        command = line[2:]
        while command.endswith("\\") and index + 1 < len(lines):
            index += 1
            command = command[:-1] + "\n" + lines[index]
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        steps.append((command, output))
    for command, output in steps:
        if block.directive("server"):
            printed = session.serve(command, "\n".join(output))
            diff = same_output("\n".join(output), printed)
            if diff:
                problems.append(f"{block.where}: `{command}` printed otherwise:\n{diff}")
            continue
        done = session.shell(command)
        quoted = "\n".join(output)
        diff = same_output(quoted, done.stdout) if output else None
        if diff:
            problems.append(f"{block.where}: `{command}` printed otherwise:\n{diff}")
        problems += exit_problem(block, command, quoted, done)
    return problems


def exit_problem(
    block: Block, command: str, quoted: str, done: subprocess.CompletedProcess[str]
) -> list[str]:
    """A command whose quoted output is an error must fail; any other must succeed."""
    error = any(line.startswith("error:") for line in quoted.splitlines())
    if error == (done.returncode != 0):
        return []
    said = "fails" if error else "succeeds"
    return [
        f"{block.where}: the page says `{command}` {said}; it exited {done.returncode}:\n"
        f"{done.stdout}"
    ]


def yaml_block(session: Session, block: Block) -> list[str]:
    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as error:
        return [f"{block.where}: not YAML: {error}"]
    if block.directive("fragment"):
        return [f"{block.where}: {e}" for e in schema_errors(data)]
    if isinstance(data, dict) and "nodes" in data and "version" in data:
        path = session.write(f"block-{block.line}.yaml", block.text)
        done = session.shell(f"gategraph check {path.name}")
        return [] if done.returncode == 0 else [f"{block.where}: gategraph check:\n{done.stdout}"]
    if isinstance(data, dict) and "name" in data:
        path = session.write(f"block-{block.line}.yaml", block.text)
        command = "skill" if "tools" in data else "tool"
        done = session.shell(f"gategraph {command} add --config {path.name}")
        return [] if done.returncode == 0 else [f"{block.where}: {command} add:\n{done.stdout}"]
    return [f"{block.where}: neither a plan graph nor a configuration: mark it a fragment"]


def check_syntax(block: Block, text: str) -> list[str]:
    lang = block.lang
    try:
        if lang in ("python", "py"):
            # A fragment may be a line of an async function's body.
            compile(text, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        elif lang in ("yaml", "yml"):
            yaml.safe_load(text)
        elif lang == "json":
            json.loads(text)
        elif lang == "toml":
            tomllib.loads(text)
    except (SyntaxError, yaml.YAMLError, ValueError) as error:
        return [f"{block.where}: does not parse: {error}"]
    return []


def print_comments(code: str) -> list[tuple[str, bool]]:
    """What the one-line ``print(...)`` calls of a block say they print, in order: the
    comment after the call, or else the comment on the line below it; each with whether
    that comment goes on over the next line (the printed line then starts with it)."""
    calls = {
        node.lineno
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and node.lineno == node.end_lineno
    }
    comments = {
        token.start[0]: (
            token.string.removeprefix("#").strip(),
            token.line.lstrip().startswith("#"),
        )
        for token in tokenize.generate_tokens(io.StringIO(code).readline)
        if token.type == tokenize.COMMENT
    }
    found = []
    for line in sorted(calls):
        trailing = comments.get(line)
        if trailing is not None and not trailing[1]:
            found.append((trailing[0], False))
            continue
        below = comments.get(line + 1)
        if below is not None and below[1]:  # a comment on a line of its own
            after = comments.get(line + 2)
            found.append((below[0], after is not None and after[1]))
    return found


def printed_as_commented(block: Block, printed: str) -> list[str]:
    """``print(x)  # what it prints`` (or that comment on the line below): each matches a
    line the block printed, in order; what follows a ": " may explain it
    (``# fix: the folder is untouched``); a comment that goes on over more lines is the
    start of its line."""
    lines = iter(line.rstrip() for line in printed.split("\n"))
    for comment, continued in print_comments(block.text):
        said = [comment, *([comment.split(": ", 1)[0]] if ": " in comment else [])]

        def matches(
            line: str, said: list[str] = said, comment: str = comment, continued: bool = continued
        ) -> bool:
            if continued:
                return normalise(line).startswith(normalise(comment))
            return any(same_output(s, line) is None for s in said)

        if not any(matches(line) for line in lines):
            return [f"{block.where}: no line printed after the others is `{comment}`:\n{printed}"]
    return []


def file_path(block: Block) -> str | None:
    """The file the block is, if it is one: named by its directive or its first line."""
    named = block.directive("file")
    if named:
        return named[1]
    first = FILE_LINE.match(block.text)
    if first and not block.directives and block.lang in ("py", "yaml", "toml"):
        return first.group(1)
    return None


def run_block(session: Session, block: Block) -> list[str]:
    for _, command in (d for d in block.directives if d[0] == "before"):
        done = session.shell(command)
        if done.returncode != 0:
            return [f"{block.where}: the set-up `{command}` failed:\n{done.stdout}"]
    kinds = [k for k, _ in block.directives if k not in ("before", "server")]
    if len(kinds) > 1:
        return [f"{block.where}: more than one directive: {kinds}"]
    kind, argument = block.directive(
        "fragment", "file", "output", "output-of", "skip", "tested-by"
    ) or ("", "")
    if kinds and not kind:
        return [f"{block.where}: unknown directive {kinds[0]!r}"]
    if kind == "skip":
        return [] if argument else [f"{block.where}: `skip` says why"]
    if kind == "tested-by":
        test = ROOT / argument
        if not test.is_file() or block.page.name not in test.read_text(encoding="utf-8"):
            return [f"{block.where}: {argument} does not read {block.page.name}"]
        return check_syntax(block, block.text)
    if kind == "output":
        diff = same_output(block.text, session.printed)
        return [f"{block.where}: the block before printed otherwise:\n{diff}"] if diff else []
    if kind == "output-of":
        done = session.shell(argument)
        diff = same_output(block.text, done.stdout)
        found = [f"{block.where}: `{argument}` printed otherwise:\n{diff}"] if diff else []
        return found + exit_problem(block, argument, block.text, done)
    path = file_path(block)
    if path is not None:
        data = yaml.safe_load(block.text) if block.lang == "yaml" else None
        # A plan graph is checked, unless the page checks it itself (a broken example).
        checked_by_page = f"gategraph check {path}" in block.page.read_text(encoding="utf-8")
        if isinstance(data, dict) and "nodes" in data and "version" in data and not checked_by_page:
            done = session.shell(f"gategraph check {path}")
            return (
                [] if done.returncode == 0 else [f"{block.where}: gategraph check:\n{done.stdout}"]
            )
        return check_syntax(block, block.text)
    if kind == "fragment":
        if block.lang in ("yaml", "yml"):
            return yaml_block(session, block)
        return check_syntax(block, block.text)
    if block.lang in ("python", "py"):
        session.python(block.text, block.where)
        return printed_as_commented(block, session.printed)
    if block.lang == "console":
        return console(session, block)
    if block.lang in ("bash", "sh"):
        done = session.shell(f"set -e\n{block.text}")
        return (
            []
            if done.returncode == 0
            else [f"{block.where}: failed ({done.returncode}):\n{done.stdout}"]
        )
    if block.lang in ("yaml", "yml"):
        return yaml_block(session, block)
    if block.lang in ("json", "toml"):
        return check_syntax(block, block.text)
    if block.lang == "mermaid":
        return []  # a diagram: the page's own test checks it where it says something
    return [f"{block.where}: a `{block.lang or 'plain'}` block: mark it output, skip or fragment"]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_runs_as_written(
    page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    found = blocks(page)
    # Every fence is a block this test sees: an indented or unclosed one would escape it.
    lines = page.read_text(encoding="utf-8").split("\n")
    fences = sum(1 for line in lines if line.lstrip().startswith("```"))
    # Fences of another kind, or in a quote, would escape it: the pages use none.
    other = [n for n, line in enumerate(lines, 1) if re.match(r"\s*(~~~|>\s*```)", line)]
    assert not other, f"{page_id(page)}: lines {other}: use ``` fences outside quotes"
    assert fences == 2 * len(found), (
        f"{page_id(page)}: a fence not at the line's start, or unclosed"
    )
    for module, extra in EXTRAS.items():
        needed = any(
            re.search(rf"^\s*(from|import) {module}\b", b.text, re.MULTILINE)
            and b.lang in ("python", "py")
            for b in found
        )
        if needed and importlib.util.find_spec(module) is None:
            pytest.skip(f"needs the {extra} extra")
    # The reader's own PostgreSQL database, as the page asks them to name it: a fresh one
    # on the tests' server (started before the session moves the temporary folder).
    database = (
        request.getfixturevalue("postgres_url")
        if any("DATABASE_URL" in b.text for b in found)
        else None
    )
    session = Session(tmp_path, monkeypatch, any("graphs/" in b.text for b in found))
    if database is not None:
        session.env["DATABASE_URL"] = database
    # The files a page names are there from the start, as a reader who copied them has them.
    for block in found:
        path = file_path(block)
        if path is not None:
            session.write(path, block.text)
    problems: list[str] = []
    for block in found:
        try:
            problems += run_block(session, block)
        except Exception as error:  # every block's failure is reported, not the first only
            problems.append(f"{block.where}: {type(error).__name__}: {error}")
    assert not problems, "\n\n".join(problems)


def close_run_sync_loop() -> None:
    """Close the event loop pydantic-ai's ``Agent.run_sync`` leaves as the thread's current
    one (it keeps it for the next call), so a later test does not find it unclosed."""
    import asyncio

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return
    loop.close()
    asyncio.set_event_loop(None)


# -- the test itself can fail ---------------------------------------------------------------


def test_quoted_output_compares_with_its_wildcards() -> None:
    assert same_output("a\n...\nd", "a\nb\nc\nd\n") is None
    assert same_output("plan 01J...: applied", "plan 01M97N4FCN8PM79J0DKC8GDJ1Y: applied") is None
    assert same_output("x: ... done", "x: it is done") is None
    assert same_output("  ok   b: fine\n  FAIL a: no", "  FAIL a: no\n  ok   b: fine") is None
    assert same_output("a\nb", "a\nc") is not None
    assert same_output("a", "a\nmore") is not None


def test_a_page_s_blocks_and_their_directives(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- doc: before echo hi\nthere -->\n<!-- doc: output-of cat x -->\n```\nhi\n```\n"
        "- item\n\n  <!-- doc: fragment -->\n  ```yaml\n  a: 1\n  ```\n"
    )
    first, second = blocks(page)
    assert first.directives == [("before", "echo hi\nthere"), ("output-of", "cat x")]
    assert (first.lang, first.text) == ("", "hi\n")
    assert second.directives == [("fragment", "")] and second.text == "a: 1\n"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```\nplain\n```\n", "mark it output, skip or fragment"),
        ("<!-- doc: skip -->\n```\nx\n```\n", "`skip` says why"),
        ("```yaml\nfoo: 1\n```\n", "mark it a fragment"),
        ("<!-- doc: fragment -->\n```yaml\n- id: a\n  validaton: x\n```\n", "validaton"),
        ("```console\n$ echo one\ntwo\n```\n", "printed otherwise"),
        ("```bash\nfalse\n```\n", "failed (1)"),
        ("```console\n$ echo 'error: boom'\nerror: boom\n```\n", "says `echo 'error: boom'` fails"),
        ("```console\n$ echo hi; exit 3\nhi\n```\n", "succeeds; it exited 3"),
        ("```python\nprint('a')\n# b\n```\n", "is `b`"),
        ("```python\nprint('fix')  # fix: explained\nprint(1)  # 2\n```\n", "is `2`"),
        ("<!-- doc: tested-by tests/conftest.py -->\n```\nx\n```\n", "does not read"),
    ],
)
def test_a_block_that_is_not_what_it_says_fails(
    text: str, problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "page.md"
    page.write_text(text)
    [block] = blocks(page)
    block.page = ROOT / "docs" / "page.md"  # where a page is
    found = run_block(Session(tmp_path, monkeypatch, graphs=False), block)
    assert found and problem in found[0], found
