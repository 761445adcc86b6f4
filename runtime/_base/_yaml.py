"""Reading YAML and JSON configuration with positions, and turning model errors into lines.

Every problem in a file is reported as ``FILE:LINE:COL: field.path: what is wrong``. To
get there, :func:`load_document` keeps the start mark of every value by its field path,
and :meth:`Document.errors_from` maps pydantic's error locations back onto them.

Limits, each a one-line error naming the file, the position and the limit:

- a file is at most :data:`MAX_DOCUMENT_BYTES` (16 MiB);
- mappings and lists nest at most :data:`MAX_DEPTH` (100) levels;
- aliases (``*name``) and merge keys (``<<: *name``) copy at most
  :data:`MAX_ALIAS_VALUES` (100,000) values, or :data:`ALIAS_RATIO` (10) times the values
  the file writes out when that is more; an alias inside the value it names is refused.

Bytes that are not UTF-8, characters YAML does not allow (a NUL byte), and every syntax
error of the reader, scanner, parser, composer or constructor are one line too.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import yaml

from ._exceptions import ConfigError, ConfigIssue

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pydantic import ValidationError

__all__ = [
    "ALIAS_RATIO",
    "MAX_ALIAS_VALUES",
    "MAX_DEPTH",
    "MAX_DOCUMENT_BYTES",
    "Document",
    "format_path",
    "load_document",
    "read_document",
]

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


MAX_DOCUMENT_BYTES: Final = 16 << 20
"""The largest configuration file read, in bytes (16 MiB: some 200,000 graph nodes)."""
MAX_DEPTH: Final = 100
"""How deep mappings and lists may nest in a configuration file."""
MAX_ALIAS_VALUES: Final = 100_000
"""How many values aliases (``*name``) and merge keys (``<<:``) may copy, at least."""
ALIAS_RATIO: Final = 10
"""...or this many times the values written out in the file, when that is more.

Aliases share a value in the parsed file but every use is a copy in what is loaded: nine
lines of aliases that refer to aliases (a "billion laughs") copy a value 10**9 times. The
budget lets a file reuse its anchors as often as it likes in proportion to its own size,
and stops one that would grow without bound."""

_YAML_TAG: Final = "tag:yaml.org,2002:"
_MERGE_TAG: Final = "tag:yaml.org,2002:merge"
_VALUE_TAG: Final = "tag:yaml.org,2002:value"


def _mark(node: yaml.Node | yaml.Mark) -> tuple[int, int]:
    mark = node.start_mark if isinstance(node, yaml.Node) else node
    return mark.line + 1, mark.column + 1


def _issue(message: str, where: yaml.Node | yaml.Mark, path: PathKey = ()) -> ConfigIssue:
    field = format_path(path)
    if len(field) > 120:  # deep inside copies: the two ends say where
        field = f"{field[:60]}...{field[-57:]}"
    return ConfigIssue(message, field, *_mark(where))


def _position(text: str | bytes, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``text``."""
    newline: Any = b"\n" if isinstance(text, bytes) else "\n"
    return text.count(newline, 0, offset) + 1, offset - text.rfind(newline, 0, offset)


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Loader(yaml.SafeLoader):
    """A safe loader that keeps where each alias was used and refuses deep nesting."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self.source = source
        self.depth = 0
        self.alias_marks: dict[tuple[int, int], yaml.Mark] = {}
        """Where an alias stood, by (id of its parent node, index or id of its key node)."""

    def _next_mark(self) -> yaml.Mark:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        return event.start_mark  # type: ignore[no-any-return]

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self._next_mark()
            node = super().compose_node(parent, index)
            if parent is not None and index is not None:
                at = index if isinstance(index, int) else id(index)
                self.alias_marks[(id(parent), at)] = mark
            return node
        if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        # The composer recurses once a level: deep nesting is refused before Python's
        # recursion limit is reached, at the place it happens.
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise ConfigError(
                    [
                        ConfigIssue(
                            f"nesting is too deep (more than {MAX_DEPTH} levels)",
                            "",
                            *_mark(self._next_mark()),
                        )
                    ],
                    source=self.source,
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _plain(value: Any) -> Any:
    # YAML dates would not survive a round trip through JSON; configuration keeps them as text.
    if isinstance(value, _dt.date | _dt.datetime):
        return value.isoformat()
    return value


class _Builder:
    """Turns the composed nodes into plain values, recording each value's position.

    Every value is built once per place it is used: an alias used twice gives two copies
    (as ``yaml.safe_load`` gives one object twice), each with its own path. Those copies
    are counted against the alias budget (:data:`MAX_ALIAS_VALUES`, :data:`ALIAS_RATIO`).
    """

    def __init__(self, loader: _Loader, doc: Document) -> None:
        self.loader = loader
        self.doc = doc
        self.seen: set[int] = set()
        """The nodes built at least once: building one again is a copy through an alias."""
        self.open: set[int] = set()
        """The collection nodes being built: meeting one again means it contains itself."""
        self.copies = 0
        self.pairs: dict[int, list[tuple[yaml.Node, yaml.Node, bool]]] = {}
        """Each mapping's pairs with its merge keys resolved, by node id."""
        self.flattening: set[int] = set()

    def error(self, message: str, where: yaml.Node | yaml.Mark, path: PathKey) -> ConfigError:
        return ConfigError([_issue(message, where, path)], source=self.doc.source)

    def copied(self, count: int, where: yaml.Node | yaml.Mark, path: PathKey) -> None:
        """Count ``count`` values copied through an alias or a merge key."""
        self.copies += count
        limit = max(MAX_ALIAS_VALUES, ALIAS_RATIO * len(self.seen))
        if self.copies > limit:
            raise self.error(
                f"aliases expand to more than {limit:,} values, the limit for this file",
                where,
                path,
            )

    def construct(self, node: yaml.Node, path: PathKey) -> Any:
        try:
            return _plain(self.loader.construct_object(node, deep=True))
        except yaml.YAMLError:
            raise
        except Exception as exc:
            # An explicit tag the value does not fit (`!!int abc`), a number too long.
            kind = node.tag.rpartition(":")[2] if node.tag.startswith(_YAML_TAG) else node.tag
            why = f": {_one_line(str(exc))}" if isinstance(exc, ValueError) else ""
            raise self.error(
                f"invalid YAML: cannot read {_short(node.value)} as {kind}{why}", node, path
            ) from None

    def build(
        self,
        node: yaml.Node,
        path: PathKey,
        alias: yaml.Mark | None = None,
        via: yaml.Mark | None = None,
        depth: int = 0,
    ) -> Any:
        """Build ``node`` at ``path``; ``alias`` is where it was named by an alias, ``via``
        the innermost alias being copied (errors about copies point there)."""
        ident = id(node)
        via = alias or via
        if ident in self.seen:
            if ident in self.open:
                raise self.error("an alias refers to a value that contains it", via or node, path)
            self.copied(1, via or node, path)
        else:
            self.seen.add(ident)
        self.doc.marks[path] = _mark(alias or node)
        if isinstance(node, yaml.ScalarNode):
            return self.construct(node, path)
        if depth >= MAX_DEPTH:
            # The composer refuses deep nesting as written; this is nesting made of aliases.
            raise self.error(
                f"nesting is too deep (more than {MAX_DEPTH} levels)", via or node, path
            )
        self.open.add(ident)
        try:
            if isinstance(node, yaml.MappingNode):
                return self.build_mapping(node, path, via, depth)
            marks = self.loader.alias_marks
            return [
                self.build(item, (*path, index), marks.get((ident, index)), via, depth + 1)
                for index, item in enumerate(node.value)
            ]
        finally:
            self.open.discard(ident)

    def build_mapping(
        self, node: yaml.MappingNode, path: PathKey, via: yaml.Mark | None, depth: int
    ) -> dict[str, Any]:
        result: dict[str, Any] = {}
        written: set[str] = set()  # keys written in this mapping, not merged into it
        marks = self.loader.alias_marks
        for key_node, value_node, merged in self.flatten(node, path):
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.error("keys must be plain scalars", key_node, path)
            key = self.construct(key_node, path)
            if not isinstance(key, str | int | float | bool) or key is None:
                raise self.error("keys must be plain scalars", key_node, path)
            key = str(key) if not isinstance(key, str) else key
            if not merged:
                if key in written:
                    raise self.error(f"duplicate key {key!r}", key_node, (*path, key))
                written.add(key)
            # A key written in the mapping overrides a merged one, as in any YAML loader.
            self.doc.key_marks[(*path, key)] = _mark(key_node)
            alias = marks.get((id(node), id(key_node))) if not merged else None
            result[key] = self.build(value_node, (*path, key), alias, via, depth + 1)
        return result

    def flatten(
        self, node: yaml.MappingNode, path: PathKey
    ) -> list[tuple[yaml.Node, yaml.Node, bool]]:
        """The (key, value, merged) pairs of a mapping, merge keys (``<<``) resolved.

        As PyYAML's ``flatten_mapping`` (merged pairs first, so the mapping's own win; of
        several merged mappings the first wins), but each mapping is flattened once and the
        pairs a merge copies count against the alias budget, so merges of merges cannot
        grow without bound.
        """
        found = self.pairs.get(id(node))
        if found is not None:
            return found
        if id(node) in self.flattening:
            raise self.error("a merge key (<<) refers to the mapping that holds it", node, path)
        self.flattening.add(id(node))
        merged: list[tuple[yaml.Node, yaml.Node, bool]] = []
        own: list[tuple[yaml.Node, yaml.Node, bool]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                if isinstance(value_node, yaml.MappingNode):
                    sources = [value_node]
                elif isinstance(value_node, yaml.SequenceNode) and all(
                    isinstance(item, yaml.MappingNode) for item in value_node.value
                ):
                    sources = value_node.value[::-1]
                else:
                    raise self.error(
                        "a merge key (<<) takes a mapping or a list of mappings", value_node, path
                    )
                for source in sources:
                    pairs = self.flatten(source, path)
                    self.copied(len(pairs), value_node, path)
                    merged.extend((k, v, True) for k, v, _ in pairs)
            else:
                if key_node.tag == _VALUE_TAG:
                    key_node.tag = "tag:yaml.org,2002:str"  # as PyYAML reads the `=` key
                own.append((key_node, value_node, False))
        found = merged + own
        self.pairs[id(node)] = found
        self.flattening.discard(id(node))
        return found


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_document(text: str | bytes, source: str = "<string>") -> Document:
    """Parse YAML (or JSON, which YAML reads too) keeping the position of every value.

    Raises a one-line :class:`ConfigError` (``FILE:LINE:COL: message``) for bytes that are
    not UTF-8 text or characters YAML does not allow (a NUL byte), a syntax error, a
    duplicate key, several documents in one file, an empty document, and for a file over
    one of the limits: :data:`MAX_DOCUMENT_BYTES`, :data:`MAX_DEPTH` levels of nesting, or
    the alias budget (:data:`MAX_ALIAS_VALUES`, :data:`ALIAS_RATIO`).
    """
    if isinstance(text, bytes) or len(text) * 4 <= MAX_DOCUMENT_BYTES:
        size = len(text)  # a character is at most 4 bytes of UTF-8
    else:
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_DOCUMENT_BYTES:
        raise ConfigError(
            [
                ConfigIssue(
                    f"the file is {size:,} bytes, over the limit of {MAX_DOCUMENT_BYTES:,} "
                    "for a configuration file",
                    "",
                    *_position(text, min(len(text), MAX_DOCUMENT_BYTES)),
                )
            ],
            source=source,
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                [
                    ConfigIssue(
                        f"not UTF-8 text ({exc.reason} at byte {exc.start})",
                        "",
                        *_position(exc.object, exc.start),
                    )
                ],
                source=source,
            ) from None
    doc = Document(None, source)
    loader: _Loader | None = None
    try:
        # The reader checks every character as it is made: a NUL byte fails here.
        loader = _Loader(text, source)
        node = loader.get_single_node()
        if node is None:
            raise ConfigError("the file is empty", source=source)
        doc.data = _Builder(loader, doc).build(node, ())
    except yaml.reader.ReaderError as exc:
        what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise ConfigError(
            [
                ConfigIssue(
                    f"invalid YAML: unacceptable character {what} ({exc.reason})",
                    "",
                    *_position(text, exc.position),
                )
            ],
            source=source,
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if "expected a single document" in str(exc.context or ""):
            problem = "expected a single document, found several"
        elif exc.problem == "second occurrence" and exc.context_mark is not None:
            first, at = _mark(exc.context_mark)
            anchor = str(exc.context).removesuffix("; first occurrence")
            problem = f"{anchor} (first at line {first}, column {at})"
        elif exc.context and exc.context_mark is not None and exc.problem_mark is not None:
            first, at = _mark(exc.context_mark)
            problem = f"{problem} ({exc.context} at line {first}, column {at})"
        where = _mark(mark) if mark is not None else (None, None)
        raise ConfigError(
            [ConfigIssue(f"invalid YAML: {_one_line(problem)}", "", *where)],
            source=source,
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {_one_line(str(exc))}", source=source) from None
    except RecursionError:
        raise ConfigError("nesting is too deep", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()
    return doc


def read_document(path: str | os.PathLike[str]) -> Document:
    """Read and parse a YAML or JSON file; every failure is a one-line :class:`ConfigError`."""
    source = os.fspath(path)
    file = Path(source)
    try:
        # Opened without blocking: a named pipe nobody writes to would wait forever (it
        # reads as empty instead); reading then blocks as usual, so `<(command)` works.
        fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        os.set_blocking(fd, True)
        with open(fd, "rb") as stream:
            # Never more than the limit and a byte: a huge file (or /dev/zero) is refused
            # without being read whole.
            raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a file", source=source) from None
    except PermissionError:
        raise ConfigError("permission denied", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ConfigError(
            [
                ConfigIssue(
                    f"the file is over the limit of {MAX_DOCUMENT_BYTES:,} bytes "
                    "for a configuration file",
                    "",
                    *_position(raw, MAX_DOCUMENT_BYTES),
                )
            ],
            source=source,
        )
    return load_document(raw, source)


def require_mapping(doc: Document, what: str = "configuration") -> Mapping[str, Any]:
    """Return the document's data if it is a mapping, else raise a clear error."""
    if not isinstance(doc.data, dict):
        kind = "a list" if isinstance(doc.data, list) else f"a {type(doc.data).__name__}"
        raise doc.error((), f"the {what} must be a mapping of fields, got {kind}")
    return doc.data
