"""``python_syntax``: the Python files of a folder parse (in a plan, those its change
touched)."""

from __future__ import annotations

import ast
from typing import Final

from gategraph.runtime import ReadOnlyViolationError

from ._common import (
    BAD_ARGUMENTS,
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
    result,
    shorten,
)

__all__ = ["MAX_ERRORS", "python_syntax"]

MAX_ERRORS: Final = 50
"""At most this many errors are listed in ``data["errors"]``."""


def _parse_error(source: bytes, filename: str) -> tuple[int | None, str] | None:
    """``(line, message)`` when ``source`` does not parse, else ``None``."""
    try:
        # Bytes, so the file's own encoding declaration (PEP 263) and BOM are honoured.
        # Only an AST is built: nothing is executed and no bytecode is written.
        compile(source, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno, exc.msg
    except ValueError as exc:  # NUL bytes, an undecodable source
        return None, str(exc)
    except (RecursionError, MemoryError):
        return None, "too deeply nested to parse"
    return None


def python_syntax(
    *,
    root: object,
    include: object = "**/*.py",
    exclude: object = (),
    scope: object = "change",
    context: object = None,
) -> Result:
    """Check that the matching Python files under ``root`` parse: in a plan, those its
    change added or modified; otherwise, or with ``scope: tree``, every one.

    Files are parsed with the running interpreter's grammar (``compile`` with
    ``ast.PyCF_ONLY_AST``); nothing is imported or run and no bytecode is written.
    ``.git``, ``.hg`` and ``.svn`` folders are skipped; symlinks are not followed.
    A folder with no matching file passes.

    Arguments:
        root: the folder to check (the directory resource).
        include: a glob of the files to parse, relative to ``root`` (default ``**/*.py``;
            ``**`` spans folders).
        exclude: globs of files or folders to leave out (``[".venv", "build/**"]``).
        scope: ``change`` (default) parses only the files a plan's change added or
            modified, where the call knows them (a plan's validation round); ``tree``
            parses every file. Outside a plan, every file is parsed either way.
        context: the call's :class:`~gategraph.runtime.ToolContext` (given by the
            runtime): it tells the change.

    Data:
        files_checked: how many files were parsed.
        errors: up to 50 ``{"file", "line", "message"}`` — ``file`` relative to
            ``root``, ``line`` counting from 1 (``null`` when unknown).
        error_count: how many files do not parse, in all.
        scope: ``change`` when only the change's files were parsed, else ``tree``.
    """
    try:
        folder = check_root(root)
        if not isinstance(include, str):
            raise ArgumentError(f"include must be a glob string, got {describe(include)}")
        pattern = check_patterns("include", [include])[0]
        excluded = check_patterns("exclude", check_strings("exclude", exclude))
        only = check_scope(scope, context, folder)
    except ArgumentError as exc:
        return failed(BAD_ARGUMENTS, str(exc))
    errors: list[dict[str, object]] = []
    count = checked = 0
    for relative, path in iter_files(folder, pattern, excluded, only):
        checked += 1
        try:
            source = path.read_bytes()
        except ReadOnlyViolationError:
            raise
        except OSError as exc:
            problem: tuple[int | None, str] | None = (None, f"cannot read: {exc.strerror}")
        else:
            problem = _parse_error(source, relative)
        if problem is not None:
            count += 1
            if len(errors) < MAX_ERRORS:
                errors.append(
                    {"file": relative, "line": problem[0], "message": shorten(problem[1])}
                )
    judged = "change" if only is not None else "tree"
    data = {"files_checked": checked, "errors": errors, "error_count": count, "scope": judged}
    # What was parsed, as the message says it: the change's files, or the folder's.
    noun = "changed file" if only is not None else "file"
    if not checked:
        return result(True, f"No {noun}s match {include!r}", **data)
    if not count:
        return result(
            True, f"1 {noun} parses" if checked == 1 else f"All {checked} {noun}s parse", **data
        )
    shown = [
        f"{e['file']}:{e['line']}: {e['message']}" if e["line"] else f"{e['file']}: {e['message']}"
        for e in errors
    ]
    return result(
        False,
        f"{count} of {plural(checked, noun)} {'does' if count == 1 else 'do'} not parse: "
        f"{listing(shown, 3, '; ')}",
        **data,
    )
