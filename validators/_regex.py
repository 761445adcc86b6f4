"""``regex``: a pattern must not (or must) occur in the artifact or in a folder's files."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Final

from ._common import (
    BAD_ARGUMENTS,
    MAX_FILE_BYTES,
    ArgumentError,
    Result,
    check_patterns,
    check_root,
    check_scope,
    check_strings,
    describe,
    failed,
    iter_files,
    listing,
    plural,
    read_text,
    result,
    shorten,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["FLAGS", "MAX_MATCHES", "regex"]

MAX_MATCHES: Final = 50
"""At most this many matches are listed in ``data["matches"]``."""
ARTIFACT: Final = "<artifact>"
"""The ``file`` of a match found in the artifact."""

FLAGS: Final = {
    "IGNORECASE": re.IGNORECASE,
    "I": re.IGNORECASE,
    "MULTILINE": re.MULTILINE,
    "M": re.MULTILINE,
    "DOTALL": re.DOTALL,
    "S": re.DOTALL,
    "VERBOSE": re.VERBOSE,
    "X": re.VERBOSE,
    "ASCII": re.ASCII,
    "A": re.ASCII,
}
"""Flag names ``flags`` accepts (in any case): Python's :mod:`re` flags and their letters."""


def _compile(pattern: object, flags: object) -> re.Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ArgumentError(f"pattern must be a non-empty string, got {describe(pattern)}")
    value = 0
    for name in check_strings("flags", flags):
        try:
            value |= FLAGS[name.upper()]
        except KeyError:
            raise ArgumentError(
                f"flags: unknown flag {name!r} "
                "(use IGNORECASE, MULTILINE, DOTALL, VERBOSE, ASCII or their letters)"
            ) from None
    try:
        return re.compile(pattern, value)
    except re.error as exc:
        raise ArgumentError(
            f"pattern {shorten(pattern, 60)!r} is not a valid regex: {exc}"
        ) from None


def _search(compiled: re.Pattern[str], text: str, file: str) -> Iterator[dict[str, str | int]]:
    line_starts: list[int] | None = None
    for match in compiled.finditer(text):
        if line_starts is None:
            line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        start = match.start()
        # Binary search for the line holding the match's start.
        low, high = 0, len(line_starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if line_starts[middle] <= start:
                low = middle
            else:
                high = middle - 1
        end = text.find("\n", line_starts[low])
        line = text[line_starts[low] : end if end >= 0 else len(text)]
        yield {
            "file": file,
            "line": low + 1,
            "text": shorten(line.strip()),
            "match": shorten(match.group(), 100),
        }


def regex(
    *,
    pattern: object,
    artifact: object = None,
    root: object = None,
    files: object = "**/*",
    exclude: object = (),
    mode: object = "forbid",
    flags: object = (),
    scope: object = None,
    context: object = None,
) -> Result:
    """Search for a regular expression; forbid it or require it.

    With a folder ``root``, the files under it are searched; otherwise the artifact (text
    as it is, anything else as indented JSON). The whole text is searched at once, so a
    pattern may span lines (``\\n``); a match is reported at the line it starts on.

    Arguments:
        pattern: a Python regular expression.
        artifact: the artifact, searched when no ``root`` is given.
        root: the folder to search (the directory resource, optional).
        files: a glob of the files to search, relative to ``root``; ``**`` spans folders
            (default ``**/*``). Binary files (a NUL byte in the first 8 KiB), files over
            1 MiB and ``.git``/``.hg``/``.svn`` folders are skipped.
        exclude: globs of files or folders not to search (``[".venv", "**/*.min.js"]``).
        mode: ``forbid`` (default) fails when the pattern occurs; ``require`` fails when
            it does not.
        flags: regex flags by name: ``IGNORECASE``, ``MULTILINE``, ``DOTALL``,
            ``VERBOSE``, ``ASCII`` (or ``I``, ``M``, ``S``, ``X``, ``A``).
        scope: ``change`` searches only the files a plan's change added or modified, where
            the call knows them (a plan's validation round); ``tree`` every file. By
            default ``change`` when forbidding (what was there before the plan is not
            its doing) and ``tree`` when requiring (the pattern may be anywhere).
        context: the call's :class:`~gategraph.runtime.ToolContext` (given by the
            runtime): it tells the change.

    Data:
        matches: up to 50 ``{"file", "line", "text", "match"}`` — ``file`` is the path
            relative to ``root`` (``"<artifact>"`` for the artifact), ``line`` counts from
            1, ``text`` is that line, ``match`` the matched text (both shortened).
        match_count: how many matches there are in all.
        files_checked: how many files were searched (0 for the artifact).
        files_skipped: how many matching files were skipped (binary, too large, unreadable).
        scope: ``change`` when only the change's files were searched, else ``tree``
            (also for the artifact).
    """
    try:
        compiled = _compile(pattern, flags)
        if mode not in {"forbid", "require"}:
            raise ArgumentError(f"mode must be 'forbid' or 'require', got {mode!r}")
        folder = None if root is None else check_root(root)
        if not isinstance(files, str):
            raise ArgumentError(f"files must be a glob string, got {describe(files)}")
        include = check_patterns("files", [files])[0]
        excluded = check_patterns("exclude", check_strings("exclude", exclude))
        if scope is None:
            scope = "change" if mode == "forbid" else "tree"
        only = check_scope(scope, context, folder)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    matches: list[dict[str, str | int]] = []
    count = checked = skipped = 0
    if folder is None:
        text = (
            artifact
            if isinstance(artifact, str)
            else json.dumps(artifact, indent=2, ensure_ascii=False, default=str)
        )
        sources: Iterator[tuple[str, str | None]] = iter([(ARTIFACT, text)])
        where = "the artifact"
    else:
        sources = (
            (rel, read_text(path, MAX_FILE_BYTES))
            for rel, path in iter_files(folder, include, excluded, only)
        )
        where = f"{'changed ' if only is not None else ''}files matching {files!r}"
    for name, content in sources:
        if content is None:
            skipped += 1
            continue
        if folder is not None:
            checked += 1
        for found in _search(compiled, content, name):
            count += 1
            if len(matches) < MAX_MATCHES:
                matches.append(found)
    data = {
        "matches": matches,
        "match_count": count,
        "files_checked": checked,
        "files_skipped": skipped,
        "scope": "change" if only is not None else "tree",
    }
    shown = listing(
        [f"{m['file']}:{m['line']}: {shorten(str(m['text']), 60)}" for m in matches], 3, "; "
    )
    if mode == "forbid":
        if count:
            return result(
                False, f"{plural(count, 'forbidden match', 'es')} in {where}: {shown}", **data
            )
        return result(True, f"No match in {where}" + _files_note(folder, checked), **data)
    if count:
        return result(True, f"{plural(count, 'match', 'es')} in {where}", **data)
    return result(
        False, f"Required pattern not found in {where}" + _files_note(folder, checked), **data
    )


def _files_note(folder: object, checked: int) -> str:
    return "" if folder is None else f" ({plural(checked, 'file')} searched)"
