"""The ``gategraph`` command line: a thin layer over the public API.

Exit codes: 0 done, 1 refused (the name exists, a rule forbids it, not confirmed) or the
plan failed, 2 usage or configuration error (bad file, unknown field, unknown validation
or attachment, contradictory flags), 3 the plan waits for a person. Every error is printed
as ``error: ...`` lines on standard error, without a traceback (an internal error too:
``GATEGRAPH_DEBUG=1`` adds its traceback). docs/cli.md is the user's guide.

The top of the runtime: nothing else in ``gategraph.runtime`` imports it (but
``python -m gategraph.runtime``). Inside, in layers that import only downward:

- ``_main``: the root group, its own commands, and ``main``;
- ``_mcp``, ``_plans``, ``_skill``: the ``mcp``, ``plans``/``graph``/``show``/``report``
  and ``skill`` commands, which ``_main`` registers (``_skill`` uses ``_mcp``'s lookup);
- ``_common``: what they all share.
"""

from ._main import cli, main

__all__ = ["cli", "main"]
