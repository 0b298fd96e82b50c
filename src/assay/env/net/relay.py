"""Host-side byte relays between a Unix socket and a TCP port (asyncio).

FDE-Gym service scripts take `--port` and listen on the host's loopback, which a sandbox
cannot reach (its network namespace has only its own `lo`). A `Relay` listening on a Unix
socket in the run's socket folder (bound read-only at `/run/assay` in the sandbox) and
connecting to the service's host port bridges the two; inside, the forwarder
(`assay.env.net.forwarder`) maps `127.0.0.1:PORT` to that socket. The other direction
(listening on a host TCP port, relaying to a Unix socket) serves runs without a sandbox,
where code reaches the gateway's socket through a plain loopback port.

Each relay is a server of the run's and bounds what its clients take from the harness
process (`assay.env.net.unixserver`): at most `MAX_CONNECTIONS` relayed connections at once
(each holds two descriptors, the client's and the upstream one); past that a connection gets
an HTTP 503 (the services behind relays speak HTTP) and is closed. A relayed connection on
which no byte has moved either way for `IDLE_TIMEOUT_S` is closed. A connection whose
upstream cannot be reached is closed at once, counted (`unreachable`) and logged.

    r = Relay.unix_to_tcp(run_dir / "svc" / "svc_crm.sock", 41234)
    await r.start()
    ...
    await r.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from assay.env.net.unixserver import BACKLOG, MAX_CONNECTIONS, Connections, LogThrottle, listen_unix

__all__ = ["IDLE_TIMEOUT_S", "REFUSAL", "Relay"]

log = logging.getLogger(__name__)

_BUF = 65536
IDLE_TIMEOUT_S = 300.0
_BUSY = b"too many connections to this service from this run; close some and try again\n"
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY), _BUSY))


class _Activity:
    """When a byte last moved on a relayed connection (either way)."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()

    async def watch(self, idle_s: float) -> None:
        """Return once nothing has moved for `idle_s` seconds."""
        while True:
            left = self.last + idle_s - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(left)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, activity: _Activity) -> None:
    try:
        while True:
            data = await reader.read(_BUF)
            if not data:
                break
            activity.touch()
            writer.write(data)
            await writer.drain()
            activity.touch()
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass  # one side went away: the end of this direction, as an EOF would be
    finally:
        with contextlib.suppress(OSError):  # the other side may be gone already
            if writer.can_write_eof():
                writer.write_eof()


class Relay:
    """Accept on one endpoint, connect to the other for each connection, copy bytes both ways."""

    def __init__(self, listen: tuple[str, str | int], target: tuple[str, str | int], *,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self.listen = listen
        self.target = target
        self.idle_timeout_s = idle_timeout_s
        self.port: int | None = None  # the TCP port listened on (tcp listeners)
        self.conns = Connections(f"relay {listen[1]}", limit=max_connections, refusal=REFUSAL)
        self._unreachable = LogThrottle()  # connections closed because the target could not be reached
        self._server: asyncio.base_events.Server | None = None

    @property
    def unreachable(self) -> int:
        return self._unreachable.count

    @classmethod
    def unix_to_tcp(cls, socket_path: str | Path, port: int, host: str = "127.0.0.1", *,
                    max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S) -> Relay:
        return cls(("unix", str(socket_path)), ("tcp", f"{host}:{port}"), max_connections=max_connections,
                   idle_timeout_s=idle_timeout_s)

    @classmethod
    def tcp_to_unix(cls, socket_path: str | Path, port: int = 0, host: str = "127.0.0.1", *,
                    max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S) -> Relay:
        """Listen on host:port (0: a free port, see `.port` after start) and relay to the socket."""
        return cls(("tcp", f"{host}:{port}"), ("unix", str(socket_path)), max_connections=max_connections,
                   idle_timeout_s=idle_timeout_s)

    async def start(self) -> None:
        kind, where = self.listen
        serve = self.conns.guard(self._serve)
        if kind == "unix":
            self._server = await listen_unix(str(where), serve)
        else:
            host, _, port = str(where).rpartition(":")
            self._server = await asyncio.start_server(serve, host=host, port=int(port), backlog=BACKLOG)
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        kind, where = self.target
        if kind == "unix":
            return await asyncio.open_unix_connection(str(where))
        host, _, port = str(where).rpartition(":")
        return await asyncio.open_connection(host, int(port))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.wait_for(self._connect(), self.idle_timeout_s)
        except (OSError, TimeoutError) as exc:
            since = self._unreachable.note()
            if since is not None:
                log.warning("relay %s: cannot reach %s (%s); closed %d connection(s) since the last report",
                            self.listen[1], self.target[1], exc or type(exc).__name__, since)
            return
        activity = _Activity()
        pumps: asyncio.Future[Any] = asyncio.gather(_pump(reader, up_w, activity), _pump(up_r, writer, activity))
        watch: asyncio.Future[Any] = asyncio.ensure_future(activity.watch(self.idle_timeout_s))
        try:
            await asyncio.wait({pumps, watch}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (pumps, watch):
                fut.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await fut
            up_w.close()

    async def stop(self) -> None:
        if self._server is None:
            return
        await self.conns.close(self._server)
        self._server = None
        kind, where = self.listen
        if kind == "unix":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(where))
