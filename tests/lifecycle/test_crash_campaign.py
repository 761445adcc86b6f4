"""The crash campaign on PostgreSQL, sampled: a run SIGKILLed after its k-th durable event,
resumed (and killed again at random) on other hosts until done, ends as a run never killed
does. `python tests/_crashes.py URL` runs it after every event."""

from __future__ import annotations

import signal
import sys

import pytest
from _crashes import campaign

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(signal, "SIGKILL"), reason="needs SIGKILL"
)


def test_killed_runs_resumed_on_other_hosts_end_as_if_never_killed(postgres_url: str) -> None:
    # After the first event, mid round 1, after the first work, mid round 2, during Apply.
    found = campaign(postgres_url, points=[1, 6, 11, 19, 27, 33], seed=7)
    assert found.violations == []
    assert found.kills >= 6 and found.elsewhere >= 3  # really killed, really elsewhere
