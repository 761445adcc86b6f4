"""A validation module for tests/calls/test_sandbox.py that leaves a mark where it is imported
with ``GG_MARK_DIR`` set: gategraph's process has it, a sandboxed worker does not (its
environment is scrubbed, and it could not write there anyway)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

if os.environ.get("GG_MARK_DIR"):
    Path(os.environ["GG_MARK_DIR"], f"imported-{os.getpid()}").write_text("here")


def check(root: str) -> dict[str, Any]:
    return {"passed": True}
