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
    from gategraph.runtime._storage._database import LogAt

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


class Where:
    """Where the command keeps its state, from the root's options: the catalog file
    (``--catalog``) and the PostgreSQL database (``--db``); both resolved when first
    needed, so a command that touches neither never reads a setting."""

    def __init__(self, catalog_path: Path | None, db: str | None) -> None:
        self.catalog_path = catalog_path
        self._db = db
        self._database: str | None = None
        self._resolved = False

    @property
    def database(self) -> str | None:
        """The PostgreSQL database (``--db``, ``GATEGRAPH_DATABASE``, ``database:`` in
        ``config.yaml``), or None for the SQLite files."""
        if not self._resolved:
            from gategraph.runtime._storage._database import configured_database

            self._database = configured_database(self._db)
            self._resolved = True
            if self._database is not None and self.catalog_path is not None:
                _fail(
                    "--catalog (or GATEGRAPH_CATALOG) names a catalog file, but a database "
                    "is set (--db, "
                    "GATEGRAPH_DATABASE or database: in config.yaml): the catalog is in "
                    "the database; give one of them"
                )
        return self._database


def _where() -> Where:
    found = click.get_current_context().find_root().obj
    return found if isinstance(found, Where) else Where(None, None)


@contextmanager
def _catalog(*, create: bool) -> Iterator[Catalog]:
    """Open the catalog (in the database, when one is set); without ``create``, a missing
    file reads as an empty catalog."""
    from gategraph.runtime._base._home import default_catalog_path
    from gategraph.runtime._definitions._catalog import Catalog

    where = _where()
    database = where.database
    path = where.catalog_path or default_catalog_path()
    if database is not None:
        catalog = Catalog.open(database)
    elif not create and not Path(path).exists():
        catalog = Catalog.in_memory()
    else:
        catalog = Catalog.open(path)
    with catalog:
        yield catalog


def _json_out(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _event_log_at() -> LogAt:
    """The event log: in the database when one is set, else the SQLite file beside the
    catalog (``--catalog``'s folder, or the default)."""
    from gategraph.runtime._storage._database import log_at

    where = _where()
    return log_at(where.database, where.catalog_path)


def _sandbox_home() -> Path | None:
    """Where a plan's sandboxes are kept: beside a log file (None: the runtime's
    default), else in gategraph's folder, so a plan in a database that this host drove
    resumes here on them."""
    from gategraph.runtime._base._home import default_catalog_path

    where = _where()
    if where.database is None:
        return None
    return (where.catalog_path or default_catalog_path()).parent


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
