"""gategraph as an MCP server: its tools, resources and prompts for MCP clients.

Imports :mod:`.._embed`, :mod:`.._views` and everything below them; only the command line
imports it.
"""
