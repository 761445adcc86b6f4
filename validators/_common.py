"""Helpers shared by the built-in validations: results, argument checks, walking a folder.

Every built-in returns a plain ``{"passed", "message", "data"}`` dict (seed 000,
"Structured Return Format"). A built-in never raises for bad input: a wrong argument
gives ``passed: False`` with ``data["error"] == "bad_arguments"``, an artifact of the
wrong shape gives ``data["error"] == "bad_artifact"``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gategraph.runtime import ReadOnlyViolationError

if TYPE_CHECKING:
    from collections.abc import Collection, Iterator, Sequence

__all__ = [
    "BAD_ARGUMENTS",
    "BAD_ARTIFACT",
    "MAX_FILE_BYTES",
    "SCOPES",
    "ArgumentError",
    "Result",
    "check_patterns",
    "check_root",
    "check_scope",
    "check_strings",
    "compile_glob",
    "describe",
    "failed",
    "iter_files",
    "listing",
    "plural",
    "read_text",
    "result",
    "shorten",
]

Result = dict[str, Any]
"""What a built-in returns: ``{"passed": bool, "message": str, "data": {...}}``."""

BAD_ARGUMENTS: Final = "bad_arguments"
"""``data["error"]`` when the configured arguments are wrong (type, regex, schema)."""
BAD_ARTIFACT: Final = "bad_artifact"
"""``data["error"]`` when the artifact does not have the shape the check reads."""
MAX_FILE_BYTES: Final = 1 << 20
"""Files larger than this (1 MiB) are skipped by the text searches."""

SCOPES: Final = ("change", "tree")
"""What a per-file check judges: the files the plan's change added or modified
(``change``), or every file (``tree``)."""

# Never searched: version-control metadata is not part of the work under validation.
_VCS_DIRS: Final = frozenset({".git", ".hg", ".svn"})


class ArgumentError(ValueError):
    """An argument is wrong; the message says which and why (becomes ``bad_arguments``)."""


def result(passed: bool, message: str, **data: Any) -> Result:
    """Build a result dict."""
    return {"passed": passed, "message": message, "data": data}


def failed(error: str, message: str, **data: Any) -> Result:
    """Build a failed result that carries a machine-readable ``data["error"]``."""
    data["error"] = error
    return {"passed": False, "message": message, "data": data}


def plural(count: int, noun: str, suffix: str = "s") -> str:
    """``"1 file"``, ``"3 files"``."""
    return f"{count} {noun}{'' if count == 1 else suffix}"


def shorten(text: str, limit: int = 200) -> str:
    """Cut ``text`` to ``limit`` characters, marking the cut with ``...``."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def listing(items: Sequence[str], limit: int = 5, sep: str = ", ") -> str:
    """``"a, b, c"``, or ``"a, b, c and 4 more"`` past ``limit`` items."""
    shown = sep.join(items[:limit])
    if len(items) > limit:
        shown += f" and {len(items) - limit} more"
    return shown


def describe(value: object) -> str:
    """The JSON-ish type name of ``value``, for messages."""
    names = {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "a list",
        tuple: "a list",
        dict: "an object",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def check_strings(name: str, value: object) -> list[str]:
    """Return ``value`` as a list of strings, or raise :class:`ArgumentError`."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ArgumentError(f"{name} must be a list of strings, got {describe(value)}")
    for item in value:
        if not isinstance(item, str):
            raise ArgumentError(f"{name} must be a list of strings, got {describe(item)} in it")
    return list(value)


def leads_out(path: str) -> bool:
    """Whether a path (or glob) that should be relative to a folder may name something
    outside it: it is absolute, or has a ``..`` part."""
    return path.startswith(("/", "\\")) or os.path.isabs(path) or ".." in re.split(r"[/\\]", path)


def option_values(argument: str) -> list[str]:
    """The values a command-line argument may name paths with: ``--opt=VALUE``, ``-oVALUE``
    or a plain argument, and the values of ``NAME=VALUE`` in it (``-o cache_dir=/x``)."""
    if argument.startswith("--"):
        base = argument.partition("=")[2]
    elif argument.startswith("-"):
        base = argument[2:]
    else:
        base = argument
    return base.split("=")


def check_inside(name: str, paths: Sequence[str], *, options: bool = False) -> None:
    """Raise :class:`ArgumentError` if one of ``paths`` (or, with ``options``, a path in
    one of these command-line arguments) leads outside the project it checks."""
    for path in paths:
        values = option_values(path) if options else [path]
        if any(leads_out(value) for value in values if value):
            raise ArgumentError(
                f"{name}: {shorten(repr(path), 120)} leads outside the project (give a path "
                "relative to it, without a leading '/' or '..')"
            )


def check_scope(scope: object, context: object, folder: Path | None) -> Collection[str] | None:
    """The files of ``folder`` a per-file check judges under ``scope``: those the plan's
    change added or modified (``change``, when the call's ``context`` knows them), else
    ``None``, every file (or no folder). Raises :class:`ArgumentError` for a scope that is
    neither."""
    if scope not in SCOPES:
        raise ArgumentError(f"scope must be 'change' or 'tree', got {describe(scope)}")
    changed = getattr(context, "changed", None)
    if scope == "tree" or changed is None or folder is None:
        return None
    found: Collection[str] | None = changed(folder)
    return found


def check_root(root: object) -> Path:
    """Return ``root`` as a ``Path`` to an existing folder, or raise :class:`ArgumentError`."""
    if isinstance(root, str) and root:
        root = Path(root)
    if not isinstance(root, os.PathLike):
        raise ArgumentError(f"root must be a folder (a directory resource), got {describe(root)}")
    path = Path(os.fspath(root))
    if not path.is_dir():
        raise ArgumentError(f"root {str(path)!r} is not a folder")
    return path


# -- globs ---------------------------------------------------------------------------------


def _translate_segment(segment: str) -> str:
    out: list[str] = []
    i, n = 0, len(segment)
    while i < n:
        char = segment[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = i
            if end < n and segment[end] in "!^":
                end += 1
            if end < n and segment[end] == "]":
                end += 1
            while end < n and segment[end] != "]":
                end += 1
            if end >= n:  # no closing bracket: a literal "["
                out.append(re.escape(char))
                continue
            body = segment[i:end].replace("\\", "\\\\")
            i = end + 1
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
        else:
            out.append(re.escape(char))
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a glob over ``/``-separated relative paths into a regex (full match).

    ``*`` and ``?`` stay inside one folder level, ``[abc]`` / ``[!abc]`` are classes, and
    a ``**`` segment matches any number of folder levels, none included: ``**/*.py``
    matches ``a.py`` and ``src/pkg/a.py``; ``build/**`` matches everything under
    ``build``. Names starting with a dot are matched like any other name.
    """
    segments = pattern.split("/")
    parts: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            parts.append(".*" if last else "(?:[^/]+/)*")
        else:
            parts.append(_translate_segment(segment) + ("" if last else "/"))
    return re.compile("".join(parts), re.DOTALL)


def check_patterns(name: str, patterns: Sequence[str]) -> list[re.Pattern[str]]:
    """Compile relative globs, or raise :class:`ArgumentError` for empty or escaping ones."""
    compiled = []
    for pattern in patterns:
        if not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
            raise ArgumentError(
                f"{name}: {pattern!r} is not a relative glob inside the folder"
                " (no leading '/', no '..')"
            )
        compiled.append(compile_glob(pattern.rstrip("/") if pattern != "/" else pattern))
    return compiled


def _excluded(relative: str, exclude: Sequence[re.Pattern[str]]) -> bool:
    return any(pattern.fullmatch(relative) for pattern in exclude)


def iter_files(
    root: Path,
    include: re.Pattern[str],
    exclude: Sequence[re.Pattern[str]] = (),
    only: Collection[str] | None = None,
) -> Iterator[tuple[str, Path]]:
    """Yield ``(relative posix path, path)`` of the files under ``root`` that ``include``
    matches and no ``exclude`` pattern matches, sorted, without following symlinks.

    An ``exclude`` pattern that matches a folder excludes everything in it. Version
    control folders (``.git``, ``.hg``, ``.svn``) are never entered, and a symlink that
    leads out of ``root`` is never yielded. ``only`` (relative posix paths) looks at
    those files alone, under the same rules, instead of walking the folder.
    """
    base = os.path.realpath(root)
    if only is not None:
        for relative in sorted(only):
            *folders, _ = relative.split("/")
            prefixes = ["/".join(folders[: i + 1]) for i in range(len(folders))]
            if (
                any(part in _VCS_DIRS for part in folders)
                or any(_excluded(p, exclude) or _excluded(p + "/", exclude) for p in prefixes)
                or not include.fullmatch(relative)
                or _excluded(relative, exclude)
            ):
                continue
            path = Path(root, relative)
            # Its folders too may be links here (no walk found it): where it really is.
            real = os.path.realpath(path)
            if real.startswith(base.rstrip(os.sep) + os.sep) and path.is_file():
                yield relative, path
        return
    for folder, dirnames, filenames in os.walk(root, followlinks=False):
        prefix = os.path.relpath(folder, root).replace(os.sep, "/")
        prefix = "" if prefix == "." else prefix + "/"
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d not in _VCS_DIRS
            and not _excluded(prefix + d, exclude)
            and not _excluded(prefix + d + "/", exclude)
        )
        for name in sorted(filenames):
            relative = prefix + name
            if not include.fullmatch(relative) or _excluded(relative, exclude):
                continue
            path = Path(folder, name)
            if path.is_symlink():
                target = os.path.realpath(path)
                if not target.startswith(base.rstrip(os.sep) + os.sep):
                    continue
            if path.is_file():
                yield relative, path


def read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str | None:
    """Return the file's text, or ``None`` when it is larger than ``limit``, binary
    (a NUL byte in its first 8 KiB) or unreadable. Undecodable UTF-8 becomes U+FFFD."""
    try:
        if path.stat().st_size > limit:
            return None
        data = path.read_bytes()
    except ReadOnlyViolationError:
        raise
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")
