"""Host-side byte relays between a Unix socket and a TCP port (asyncio).

FDE-Gym service scripts take `--port` and listen on the host's loopback, which a sandbox
cannot reach (its network namespace has only its own `lo`). A `Relay` listening on a Unix
socket in the run's socket folder (bound read-only at `/run/assay` in the sandbox) and
connecting to the service's host port bridges the two; inside, the forwarder
(`assay.env.net.forwarder`) maps `127.0.0.1:PORT` to that socket. The other direction
(listening on a host TCP port, relaying to a Unix socket) serves runs without a sandbox,
where code reaches the gateway's socket through a plain loopback port.

    r = Relay.unix_to_tcp(run_dir / "svc" / "svc_crm.sock", 41234)
    await r.start()
    ...
    await r.stop()
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from pathlib import Path

from assay.env.net.unixserver import shutdown

__all__ = ["Relay"]

_BUF = 65536


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await reader.read(_BUF)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(Exception):
            if writer.can_write_eof():
                writer.write_eof()


class Relay:
    """Accept on one endpoint, connect to the other for each connection, copy bytes both ways."""

    def __init__(self, listen: tuple[str, str | int], target: tuple[str, str | int]) -> None:
        self.listen = listen
        self.target = target
        self.port: int | None = None  # the TCP port listened on (tcp listeners)
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    @classmethod
    def unix_to_tcp(cls, socket_path: str | Path, port: int, host: str = "127.0.0.1") -> Relay:
        return cls(("unix", str(socket_path)), ("tcp", f"{host}:{port}"))

    @classmethod
    def tcp_to_unix(cls, socket_path: str | Path, port: int = 0, host: str = "127.0.0.1") -> Relay:
        """Listen on host:port (0: a free port, see `.port` after start) and relay to the socket."""
        return cls(("tcp", f"{host}:{port}"), ("unix", str(socket_path)))

    async def start(self) -> None:
        kind, where = self.listen
        if kind == "unix":
            path = Path(str(where))
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISSOCK(os.lstat(path).st_mode):
                    raise FileExistsError(f"{path} exists and is not a socket")
                os.unlink(path)
            self._server = await asyncio.start_unix_server(self._serve, path=str(path))
            os.chmod(path, 0o666)  # the sandbox uid connects through a read-only bind
        else:
            host, _, port = str(where).rpartition(":")
            self._server = await asyncio.start_server(self._serve, host=host, port=int(port))
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        kind, where = self.target
        if kind == "unix":
            return await asyncio.open_unix_connection(str(where))
        host, _, port = str(where).rpartition(":")
        return await asyncio.open_connection(host, int(port))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            try:
                up_r, up_w = await self._connect()
            except OSError:
                return
            try:
                await asyncio.gather(_pump(reader, up_w), _pump(up_r, writer))
            finally:
                with contextlib.suppress(Exception):
                    up_w.close()
        except asyncio.CancelledError:
            pass
        finally:
            if task is not None:
                self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def stop(self) -> None:
        if self._server is None:
            return
        await shutdown(self._server, self._conns)
        self._server = None
        kind, where = self.listen
        if kind == "unix":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(str(where))
