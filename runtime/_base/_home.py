"""Where gategraph keeps its files (``$GATEGRAPH_HOME``, else ``./.gategraph``), and how it
opens the SQLite databases there (the catalog, the event log).

The bottom of the runtime: it imports nothing of it, so the event log, the retry audit and
the sandbox can find gategraph's folder without the catalog.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Final

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CATALOG_FILE",
    "DEFAULT_FOLDER",
    "HOME_ENV",
    "default_catalog_path",
    "enable_wal",
]

HOME_ENV: Final = "GATEGRAPH_HOME"
"""The environment variable that moves gategraph's folder (catalog, event log)."""
DEFAULT_FOLDER: Final = ".gategraph"
CATALOG_FILE: Final = "gategraph.db"
BUSY_TIMEOUT_MS: Final = 30_000
"""How long a writer to one of gategraph's databases waits for another to finish."""


def default_catalog_path() -> Path:
    """Return where the embedded catalog lives: ``$GATEGRAPH_HOME`` or ``./.gategraph``."""
    home = os.environ.get(HOME_ENV)
    folder = Path(home) if home else Path.cwd() / DEFAULT_FOLDER
    return folder / CATALOG_FILE


def enable_wal(connection: sqlite3.Connection) -> str:
    """Put ``connection``'s database in write-ahead-log mode; the mode it is in."""
    # SQLite does not call the busy handler while it switches the journal mode, so
    # processes opening a new database at the same moment can get "database is locked"
    # here; retry until the busy timeout instead of failing at once.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.001
    while True:
        try:
            return str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            busy = (exc.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
            if not busy or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
