"""Process isolation: what a worker process pays to start."""

from __future__ import annotations

import subprocess
import sys


def test_the_worker_entry_does_not_import_pydantic() -> None:
    # A worker process imports `_invoke` to run `_process_entry`; pydantic would add
    # some 120 ms to the start of every worker process.
    code = (
        "import sys, gategraph.runtime._calls._invoke as invoke; "
        "assert callable(invoke._process_entry); "
        "print('pydantic' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
