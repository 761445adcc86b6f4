"""An MCP client session with a server in this process, for the tests of both sides of MCP
(import after ``pytest.importorskip("mcp")``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams


@asynccontextmanager
async def session_with(server: Any) -> AsyncIterator[ClientSession]:
    """A client session connected to ``server`` in this process."""
    async with create_client_server_memory_streams() as (client, served):
        async with anyio.create_task_group() as tg:
            tg.start_soon(
                lambda: server.run(served[0], served[1], server.create_initialization_options())
            )
            async with ClientSession(client[0], client[1]) as session:
                await session.initialize()
                yield session
            tg.cancel_scope.cancel()


async def call(session: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
    """Call tool ``name``: its result and the text of its first content."""
    result = await session.call_tool(name, arguments)
    text = result.content[0].text  # type: ignore[union-attr]
    return result, text
