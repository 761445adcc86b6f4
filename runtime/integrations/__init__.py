"""Adapters for agent frameworks, one module each, each an optional extra.

- :mod:`gategraph.runtime.integrations.langgraph` — ``pip install 'gategraph[langgraph]'``
- :mod:`gategraph.runtime.integrations.pydantic_ai` — ``pip install 'gategraph[pydantic-ai]'``

Nothing of a framework is imported until its adapter module is.
"""
