"""A validation module for tests/calls/test_sandbox.py: gategraph must never import a sandboxed
entrypoint in its own process (the test checks ``sys.modules``), only in the sandbox."""

from __future__ import annotations

import os
from typing import Any

IMPORTED_IN = os.getpid()


def check(root: str) -> dict[str, Any]:
    # Imported by its sandboxed worker, which runs each call in a child of its own.
    return {"passed": IMPORTED_IN == os.getppid(), "data": {"pid": IMPORTED_IN}}
