"""Process isolation: what a worker process pays to start."""

from __future__ import annotations

from _helpers import python_prints


def test_the_worker_entry_does_not_import_pydantic() -> None:
    # A worker process imports `_call` to run `_process_entry`, never the dispatcher
    # (`_invoke`) above it; pydantic would add some 120 ms to the start of every worker.
    code = (
        "import sys, gategraph.runtime._calls._call as call; "
        "assert call._process_entry.__module__ == call.__name__; "
        "print('pydantic' in sys.modules, 'gategraph.runtime._calls._invoke' in sys.modules)"
    )
    assert python_prints(code) == "False False"
