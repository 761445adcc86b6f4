"""What every command module of the command line shares: exit codes, the error every
failure becomes, the catalog and event log a command opens, and its plain and JSON output.

The bottom of the package: it imports no other module of it.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from gategraph.runtime._definitions._catalog import Catalog

__all__ = [
    "DEBUG_ENV",
    "EXIT_AWAITING",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "CommandError",
    "held_by",
]

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_AWAITING = 3


DEBUG_ENV = "GATEGRAPH_DEBUG"
"""Set to 1 to print the traceback of an internal error as well."""


class CommandError(click.ClickException):
    """An error the CLI reports as ``error: message`` lines with its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.code = exit_code


def _fail(message: str, exit_code: int = EXIT_USAGE) -> NoReturn:
    raise CommandError(message, exit_code)


def _print_error(message: str) -> None:
    for line in message.splitlines() or [""]:
        click.echo(f"error: {line}", err=True)


@contextmanager
def _catalog(*, create: bool) -> Iterator[Catalog]:
    """Open the catalog; without ``create``, a missing file reads as an empty catalog."""
    from gategraph.runtime._base._home import default_catalog_path
    from gategraph.runtime._definitions._catalog import Catalog

    path = click.get_current_context().find_root().obj or default_catalog_path()
    if not create and not Path(path).exists():
        catalog = Catalog.in_memory()
    else:
        catalog = Catalog.open(path)
    with catalog:
        yield catalog


def _json_out(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _event_log_path() -> Path:
    """The SQLite event log: beside the catalog (``--catalog``'s folder, or the default)."""
    return _log_beside(click.get_current_context().find_root().obj)


def _log_beside(catalog_path: Path | None) -> Path:
    from gategraph.runtime._storage._eventlog import EVENTS_FILE, default_event_log_path

    return Path(catalog_path).with_name(EVENTS_FILE) if catalog_path else default_event_log_path()


def _table(rows: list[list[str]], header: list[str]) -> None:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


def held_by(enforced: Iterable[str | None]) -> str:
    """What held calls to read-only, from their enforcements (``kernel``, ``guard``,
    ``server``): ``the kernel for 3 and the in-process guard for 2``; empty for none."""
    counts: dict[str, int] = {}
    for kind in enforced:
        if kind is not None:
            counts[kind] = counts.get(kind, 0) + 1
    words = {"kernel": "the kernel", "guard": "the in-process guard", "server": "MCP servers"}
    parts = [f"{words[k]} for {counts[k]}" for k in ("kernel", "guard", "server") if k in counts]
    return " and ".join(parts)
