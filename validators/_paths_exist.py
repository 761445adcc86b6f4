"""``paths_exist``: every file path an artifact mentions exists (seed 002, "hallucinated
file paths").

Without ``fields``, paths are *found* in the artifact. The rules, which favour missing a
doubtful mention over failing on prose:

- The artifact is walked (object values, list items; never object keys). A string that
  is one token — after stripping whitespace, surrounding quotes or backticks, and a
  ``:12`` / ``:12:5`` / ``#L12`` location suffix — is a path when it contains a ``/``,
  ends in a known extension (:data:`EXTENSIONS`), or is a known file name
  (:data:`FILE_NAMES`).
- Any other string is free text. Inline code spans (```` `src/app.py` ````) are read by
  the one-token rule above. In the rest, :data:`PATH_TOKEN` finds path-like tokens; a
  token is a path when it ends in a known extension, or contains a ``/`` and also starts
  with ``./``, ``../``, ``/`` or ``~/``, ends with ``/``, has two or more ``/``, or has
  an extension on its last part. So ``see src/app.py`` and ``under docs/guide/`` count;
  ``and/or``, ``client/server`` and ``src/app`` do not.
- Never paths: URLs and e-mail addresses, tokens whose parts are all numbers
  (``2024/01/31``, ``24/7``), MIME types (``text/plain``), a few slash words
  (:data:`NOT_PATHS`), product names such as ``Node.js`` (:data:`PRODUCT_NAMES`), and
  globs (``*.py``).

A path that leads out of the folder — ``..`` past its top, an absolute path elsewhere,
``~``, a symlink pointing outside — fails as *outside the resource*.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Final, Literal

from ._common import (
    BAD_ARGUMENTS,
    BAD_ARTIFACT,
    ArgumentError,
    Result,
    check_root,
    check_strings,
    describe,
    failed,
    listing,
    plural,
    result,
)

__all__ = [
    "EXTENSIONS",
    "FILE_NAMES",
    "NOT_PATHS",
    "PATH_TOKEN",
    "PRODUCT_NAMES",
    "find_paths",
    "paths_exist",
]

EXTENSIONS: Final = frozenset(
    {
        *("py", "pyi", "pyx", "ipynb", "md", "rst", "txt", "adoc", "json", "jsonl"),
        *("yaml", "yml", "toml", "cfg", "ini", "conf", "env", "lock", "xml", "csv", "tsv"),
        *("js", "jsx", "mjs", "cjs", "ts", "tsx", "vue", "svelte", "html", "htm", "css"),
        *("scss", "sass", "less", "rs", "go", "mod", "c", "h", "cc", "cpp", "cxx", "hpp"),
        *("hh", "java", "kt", "kts", "scala", "groovy", "gradle", "rb", "php", "cs", "fs"),
        *("swift", "m", "mm", "dart", "lua", "pl", "pm", "r", "jl", "ex", "exs", "erl"),
        *("hs", "ml", "clj", "sql", "proto", "graphql", "sh", "bash", "zsh", "fish", "ps1"),
        *("bat", "cmd", "mk", "cmake", "tf", "hcl", "nix", "dockerfile", "j2", "jinja"),
        *("svg", "png", "jpg", "jpeg", "gif", "ico", "pdf", "log", "patch", "diff", "pem"),
    }
)
"""Extensions that make a token a file path (compared in lower case)."""

FILE_NAMES: Final = frozenset(
    {
        *("Makefile", "Dockerfile", "Containerfile", "Jenkinsfile", "Justfile", "Procfile"),
        *("Gemfile", "Rakefile", "Vagrantfile", "CODEOWNERS", ".gitignore", ".gitattributes"),
        *(".dockerignore", ".editorconfig", ".gitmodules", ".npmrc", ".nvmrc"),
    }
)
"""File names without an extension that count as paths when a string is just the name."""

NOT_PATHS: Final = frozenset(
    {
        *("n/a", "and/or", "either/or", "yes/no", "true/false", "on/off", "read/write"),
        *("input/output", "i/o", "tcp/ip", "w/o", "pass/fail", "client/server", "km/h"),
        *("he/him", "she/her", "they/them", "ci/cd", "a/b", "get/set", "open/close"),
    }
)
"""Slash words that are never paths (compared in lower case)."""

PRODUCT_NAMES: Final = frozenset(
    {
        *("node.js", "vue.js", "next.js", "nuxt.js", "react.js", "express.js", "nest.js"),
        *("three.js", "d3.js", "chart.js", "ember.js", "backbone.js", "angular.js"),
        *("alpine.js", "solid.js", "deno.js", "bun.sh"),
    }
)
"""Names with a file-like extension that are products, not files (lower case)."""

_NAME: Final = r"[\w.@+-]"
_NOT_AROUND: Final = r"[\w/~@+*?\[\]{}$%\\-]"
PATH_TOKEN: Final = re.compile(
    rf"(?<!{_NOT_AROUND})(?<!\.)"  # not inside a word, a variable or a glob
    rf"(?:~/|/)?"  # an optional anchor: ~/ or /
    rf"(?:{_NAME}+/)*"  # folders, ./ and ../ included
    rf"{_NAME}*[\w@+-]/?"  # the last name (never ending in a dot), maybe a folder's /
    rf"(?!{_NOT_AROUND}|\.[\w/])"  # a sentence's full stop may follow
)
"""A path-like token in free text: name characters (``\\w . @ + -``) joined by ``/``."""

_URL: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://\S*|\bwww\.\S+|\S+@\S+\.\w+")
_FENCE: Final = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)
_CODE_SPAN: Final = re.compile(r"`([^`\n]+)`")
_LOCATION: Final = re.compile(r"(?::\d+){1,2}$|#L\d+(?:-L?\d+)?$")
_NUMERIC: Final = re.compile(r"[\d.]*")
_MIME: Final = re.compile(
    r"(?:application|audio|font|image|message|model|multipart|text|video)/[\w.+-]+", re.I
)
_ANY_EXTENSION: Final = re.compile(r"[^./]\.[A-Za-z0-9]{1,10}$")
_QUOTES: Final = "\"'`"


def _extension(name: str) -> str:
    stem, dot, ext = name.rpartition(".")
    return ext.lower() if dot and stem.strip(".") else ""


def _excluded(token: str) -> bool:
    bare = token.rstrip("/")
    if not bare or not any(c.isalnum() for c in bare):
        return True
    lowered = bare.lower()
    if lowered in NOT_PATHS or lowered in PRODUCT_NAMES:
        return True
    parts = [p for p in bare.split("/") if p]
    if all(_NUMERIC.fullmatch(p) for p in parts):
        return True
    return bool(_MIME.fullmatch(bare)) and _extension(bare) not in EXTENSIONS


def _strip(text: str) -> str:
    text = text.strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in _QUOTES:
        text = text[1:-1].strip()
    return text


def _single_token(text: str) -> str | None:
    """The path a one-token string names, or ``None`` when it is not one."""
    text = _LOCATION.sub("", _strip(text))
    if not text or not PATH_TOKEN.fullmatch(text) or _excluded(text):
        return None
    name = text.rstrip("/").rpartition("/")[2]
    if "/" in text or _extension(name) in EXTENSIONS or name in FILE_NAMES:
        return text
    return None


def _prose_path(token: str) -> bool:
    if _excluded(token):
        return False
    bare = token.rstrip("/")
    if _extension(bare.rpartition("/")[2]) in EXTENSIONS:
        return True
    if "/" not in token:
        return False
    return (
        token.startswith(("./", "../", "/", "~/"))
        or token.endswith("/")
        or bare.count("/") >= 2
        or bool(_ANY_EXTENSION.search(bare))
    )


def _from_text(text: str) -> Iterator[str]:
    single = _single_token(text)
    if single is not None:
        yield single
        return
    text = _URL.sub(" ", _FENCE.sub(" ", text))
    found: list[tuple[int, str]] = []
    for span in _CODE_SPAN.finditer(text):
        inner = _single_token(span.group(1))
        if inner is not None:
            found.append((span.start(), inner))
        else:
            found.extend(
                (span.start() + m.start(), m.group())
                for m in PATH_TOKEN.finditer(span.group(1))
                if _prose_path(m.group())
            )
    # Blank the spans out (keeping offsets) so their words are not read twice.
    text = _CODE_SPAN.sub(lambda m: " " * len(m.group()), text)
    found.extend(
        (m.start(), m.group()) for m in PATH_TOKEN.finditer(text) if _prose_path(m.group())
    )
    yield from (path for _, path in sorted(found))


def find_paths(artifact: object) -> list[str]:
    """The file paths mentioned anywhere in ``artifact``, in order, without repeats."""
    found: dict[str, None] = {}
    stack: list[object] = [artifact]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            found.update(dict.fromkeys(_from_text(value)))
        elif isinstance(value, Mapping):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list | tuple):
            stack.extend(reversed(value))
    return list(found)


def _from_fields(artifact: object, fields: list[str]) -> list[str]:
    if not isinstance(artifact, Mapping):
        raise TypeError(f"the artifact must be an object to read fields, got {describe(artifact)}")
    found: dict[str, None] = {}
    for field in fields:
        value = artifact.get(field)
        values = [value] if isinstance(value, str) else value
        if value is None:
            continue
        if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
            raise TypeError(
                f"field {field!r} must be a path or a list of paths, got {describe(value)}"
            )
        found.update(dict.fromkeys(p for p in (_strip(v) for v in values) if p))
    return list(found)


def _locate(root: Path, base: Path, path: str) -> Literal["ok", "missing", "outside"]:
    if path.startswith("~"):
        return "outside"
    try:
        full = (Path(path) if PurePosixPath(path).is_absolute() else root / path).resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return "missing"
    if not full.is_relative_to(base):
        return "outside"
    try:
        return "ok" if full.exists() else "missing"
    except (OSError, ValueError):
        return "missing"


def _check(root: Path, base: Path, path: str) -> Literal["ok", "missing", "outside"]:
    state = _locate(root, base, path)
    if state == "missing" and _LOCATION.search(path):
        # "src/app.py:12" names a line of src/app.py (unless a file is really called that).
        state = _locate(root, base, _LOCATION.sub("", path))
    return state


def paths_exist(*, artifact: object, root: object, fields: object = None) -> Result:
    """Check that every file path the artifact mentions exists in the folder ``root``.

    Arguments:
        artifact: the artifact (an object, a list or text).
        root: the folder the paths are relative to (the directory resource).
        fields: top-level keys of an object artifact whose values (a path, or a list of
            paths) are the paths to check, each taken as written. Without it, paths are
            found anywhere in the artifact by the rules in this module's documentation.

    Data:
        checked: how many distinct paths were checked.
        missing: the paths that do not exist, as written.
        outside: the paths that lead out of ``root`` (``..``, absolute, ``~``, symlinks).

    A ``fields`` artifact that is not an object, or a field that holds something other
    than paths, fails with ``data["error"] == "bad_artifact"``.
    """
    try:
        folder = check_root(root)
        names = None if fields is None else check_strings("fields", fields)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    try:
        paths = find_paths(artifact) if names is None else _from_fields(artifact, names)
    except TypeError as exc:
        return failed(BAD_ARTIFACT, str(exc))
    base = folder.resolve()
    missing: list[str] = []
    outside: list[str] = []
    for path in paths:
        state = _check(folder, base, path)
        if state == "missing":
            missing.append(path)
        elif state == "outside":
            outside.append(path)
    data = {"checked": len(paths), "missing": missing, "outside": outside}
    if not paths:
        return result(True, "The artifact mentions no file paths", **data)
    if not missing and not outside:
        found = "1 path exists" if len(paths) == 1 else f"All {len(paths)} paths exist"
        return result(True, found, **data)
    problems = []
    if missing:
        verb = "does" if len(missing) == 1 else "do"
        problems.append(
            f"{len(missing)} of {len(paths)} paths {verb} not exist: {listing(missing)}"
        )
    if outside:
        verb = "is" if len(outside) == 1 else "are"
        problems.append(
            f"{plural(len(outside), 'path')} {verb} outside the resource: {listing(outside)}"
        )
    return result(False, "; ".join(problems), **data)
