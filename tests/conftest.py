"""Shared fixtures: async tests run on both anyio backends."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test on asyncio and on trio."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keep every test away from the developer's real ``.gategraph`` folder."""
    home = tmp_path_factory.mktemp("gategraph-home")
    monkeypatch.setenv("GATEGRAPH_HOME", str(home))
    monkeypatch.delenv("GATEGRAPH_CATALOG", raising=False)
