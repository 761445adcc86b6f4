"""Calling a tool's code, wherever it runs: the dispatcher that prepares a call and picks its
isolation (:mod:`._invoke`), one call's body and the worker entries (:mod:`._call`), the
read-only guard, the context a call gets, and the isolation levels themselves: a thread, a
process, the kernel sandbox and its worker, a Ray task, an MCP server; plus the plugin
worker.

Imports only :mod:`.._data` and :mod:`.._base`. :mod:`._call` is what every isolation level
shares, below the dispatcher: nothing here imports the dispatcher but the code above it.
"""
