"""What the catalog's tests share: a catalog on each backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from gategraph.runtime import Catalog


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request: pytest.FixtureRequest) -> Iterator[Catalog]:
    """A fresh catalog: in memory (SQLite), and in a PostgreSQL database of its own."""
    if request.param == "postgres":
        opened = Catalog.open(request.getfixturevalue("postgres_url"))
    else:
        opened = Catalog.in_memory()
    with opened:
        yield opened
