"""An event log given as a path: checked in one line, opened for one call."""

from __future__ import annotations

from pathlib import Path

import pytest
from gategraph.runtime import ConfigError, MemoryEventLog, SQLiteEventLog
from gategraph.runtime._storage._database import check_event_log, opened_log


def test_what_is_not_an_event_log_is_one_line(tmp_path: Path) -> None:
    for fine in (None, tmp_path / "events.db", str(tmp_path / "e.db"), MemoryEventLog()):
        check_event_log(fine, "event_log")
    with pytest.raises(ConfigError, match=r"^x\(\): event_log: a int is not an event log"):
        check_event_log(3, "event_log", source="x()")


@pytest.mark.anyio
async def test_a_path_is_opened_for_the_call_and_closed_after(tmp_path: Path) -> None:
    memory = MemoryEventLog()
    async with opened_log(memory) as log:
        assert log is memory
    async with opened_log(None) as log:
        assert log is None
    async with opened_log(tmp_path / "events.db") as log:
        assert isinstance(log, SQLiteEventLog) and log._open
    assert not log._open
    assert (tmp_path / "events.db").exists()
