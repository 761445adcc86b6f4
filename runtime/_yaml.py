"""Reading YAML and JSON configuration with positions, and turning model errors into lines.

Every problem in a file is reported as ``FILE:LINE:COL: field.path: what is wrong``. To
get there, :func:`load_document` keeps the start mark of every value by its field path,
and :func:`issues_from_validation_error` maps pydantic's error locations back onto them.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ._exceptions import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pydantic import ValidationError

__all__ = ["Document", "format_path", "load_document", "read_document"]

PathKey = tuple[str | int, ...]


@dataclass(slots=True)
class Document:
    """A parsed configuration document and where each of its values stood."""

    data: Any
    """The plain Python value: dicts, lists, str, int, float, bool, None."""
    source: str
    """The file name (or ``<string>``) used in error messages."""
    marks: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    """1-based (line, column) of each value, by its path from the root."""
    key_marks: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    """1-based (line, column) of each mapping key, by the path of its value."""

    def position(self, path: Sequence[str | int]) -> tuple[int | None, int | None]:
        """Return the (line, column) of the deepest known value along ``path``."""
        key = tuple(path)
        while key:
            if key in self.marks:
                return self.marks[key]
            key = key[:-1]
        return self.marks.get((), (None, None))

    def issue(
        self, path: Sequence[str | int], message: str, *, at_key: bool = False
    ) -> ConfigIssue:
        """Build an issue at ``path`` (at its key, with ``at_key``), with its position."""
        key = tuple(path)
        line: int | None
        column: int | None
        if at_key and key in self.key_marks:
            line, column = self.key_marks[key]
        else:
            line, column = self.position(path)
        return ConfigIssue(message, format_path(path), line, column)

    def error(self, path: Sequence[str | int], message: str) -> ConfigError:
        """Build a one-issue :class:`ConfigError` at ``path``."""
        return ConfigError([self.issue(path, message)], source=self.source)

    def errors_from(self, exc: ValidationError, *, prefix: Sequence[str | int] = ()) -> ConfigError:
        """Turn a pydantic error about (part of) this document into a :class:`ConfigError`."""
        issues = []
        for loc, message in _pydantic_locations(exc):
            path = (*prefix, *loc)
            # An unknown field is the key's fault, not its value's.
            issues.append(self.issue(path, message, at_key=message == "unknown field"))
        return ConfigError(issues, source=self.source)


def format_path(path: Sequence[str | int]) -> str:
    """Render ``("nodes", 2, "needs")`` as ``nodes[2].needs``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _pydantic_locations(exc: ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    found: list[tuple[tuple[str | int, ...], str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        message = err["msg"]
        kind = err["type"]
        if kind in ("extra_forbidden", "unexpected_keyword_argument"):
            message = "unknown field"
        elif kind == "missing":
            message = "field required"
        elif message.startswith("Value error, "):
            message = message[len("Value error, ") :]
        elif message.startswith("Assertion failed, "):
            message = message[len("Assertion failed, ") :]
        # pydantic names union members and function validators in the location;
        # they mean nothing to a person writing YAML.
        loc = tuple(p for p in loc if not (isinstance(p, str) and _is_internal_loc(p)))
        found.append((loc, message))
    return found


def _is_internal_loc(part: str) -> bool:
    return part.startswith(("function-", "lax-", "strict-", "json-")) or part in {
        "str",
        "int",
        "float",
        "bool",
        "list[str]",
        "dict[str,any]",
        "constrained-str",
        "tagged-union",
    }


class _Loader(yaml.SafeLoader):
    """A safe loader that reports duplicate keys instead of keeping the last one."""


def _plain(value: Any) -> Any:
    # YAML dates would not survive a round trip through JSON; configuration keeps them as text.
    if isinstance(value, _dt.date | _dt.datetime):
        return value.isoformat()
    return value


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _build(loader: _Loader, node: yaml.Node, path: PathKey, doc: Document, depth: int) -> Any:
    if depth > 200:
        raise ConfigError(
            [ConfigIssue("nesting is too deep", format_path(path), *_mark(node))],
            source=doc.source,
        )
    doc.marks[path] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool) or key is None:
                raise ConfigError(
                    [
                        ConfigIssue(
                            "keys must be plain scalars", format_path(path), *_mark(key_node)
                        )
                    ],
                    source=doc.source,
                )
            key = str(key) if not isinstance(key, str) else key
            if key in result:
                line, column = _mark(key_node)
                raise ConfigError(
                    [
                        ConfigIssue(
                            f"duplicate key {key!r}",
                            format_path((*path, key)),
                            line,
                            column,
                        )
                    ],
                    source=doc.source,
                )
            doc.key_marks[(*path, key)] = _mark(key_node)
            result[key] = _build(loader, value_node, (*path, key), doc, depth + 1)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [
            _build(loader, item, (*path, index), doc, depth + 1)
            for index, item in enumerate(node.value)
        ]
    return _plain(loader.construct_object(node, deep=True))


def load_document(text: str | bytes, source: str = "<string>") -> Document:
    """Parse YAML (or JSON, which YAML reads too) keeping the position of every value.

    Raises :class:`ConfigError` for a syntax error (with its line and column), a duplicate
    key, several documents in one file, or an empty document.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"not UTF-8 text ({exc.reason} at byte {exc.start})", source=source
            ) from None
    doc = Document(None, source)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ConfigError("the file is empty", source=source)
        doc.data = _build(loader, node, (), doc, 0)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if "expected a single document" in str(exc.context or ""):
            problem = "expected a single document, found several"
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (None, None)
        raise ConfigError(
            [ConfigIssue(f"invalid YAML: {problem}", "", line, column)], source=source
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=source) from None
    except RecursionError:
        raise ConfigError("nesting is too deep", source=source) from None
    finally:
        loader.dispose()
    return doc


def read_document(path: str | os.PathLike[str]) -> Document:
    """Read and parse a YAML or JSON file; every failure is a one-line :class:`ConfigError`."""
    source = os.fspath(path)
    file = Path(source)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a file", source=source) from None
    except PermissionError:
        raise ConfigError("permission denied", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    return load_document(raw, source)


def require_mapping(doc: Document, what: str = "configuration") -> Mapping[str, Any]:
    """Return the document's data if it is a mapping, else raise a clear error."""
    if not isinstance(doc.data, dict):
        kind = "a list" if isinstance(doc.data, list) else f"a {type(doc.data).__name__}"
        raise doc.error((), f"the {what} must be a mapping of fields, got {kind}")
    return doc.data
