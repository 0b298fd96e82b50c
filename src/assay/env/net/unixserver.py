"""Shutting down the small asyncio servers that runs talk to (stakeholders, gateway, relays)."""

from __future__ import annotations

import asyncio
import contextlib


async def shutdown(server: asyncio.AbstractServer, conns: set[asyncio.Task[None]]) -> None:
    """Stop accepting, cancel the open connections and wait until they and the server are gone."""
    server.close()
    for t in list(conns):
        t.cancel()
    for t in list(conns):
        with contextlib.suppress(asyncio.CancelledError, OSError, ConnectionError):
            await t
    with contextlib.suppress(OSError):
        await server.wait_closed()
