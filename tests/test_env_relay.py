"""Relays between a Unix socket and a TCP port: the connection cap, the idle timeout, an unreachable target."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from assay.env.net.relay import REFUSAL, Relay


class Echo:
    """A TCP service echoing what it gets, counting its open connections."""

    def __init__(self) -> None:
        self.open = 0
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            while data := await reader.read(1024):
                writer.write(data)
                await writer.drain()
        finally:
            self.open -= 1
            writer.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])


@pytest.fixture
async def echo() -> AsyncIterator[Echo]:
    e = Echo()
    e.server = await asyncio.start_server(e.serve, "127.0.0.1", 0)
    yield e
    e.server.close()


async def roundtrip(sock: Path, data: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    r, w = await asyncio.open_unix_connection(str(sock))
    w.write(data)
    await w.drain()
    assert await asyncio.wait_for(r.readexactly(len(data)), 5) == data
    return r, w


async def test_connections_past_the_cap_get_a_503(echo: Echo, tmp_path: Path) -> None:
    sock = tmp_path / "svc_echo.sock"
    relay = Relay.unix_to_tcp(sock, echo.port, max_connections=3)
    await relay.start()
    try:
        held = [await roundtrip(sock, b"ping %d" % i) for i in range(3)]
        r, w = await asyncio.open_unix_connection(str(sock))
        reply = await asyncio.wait_for(r.read(), 5)
        assert reply == REFUSAL and reply.startswith(b"HTTP/1.1 503 ")
        w.close()
        assert relay.conns.refused == 1 and echo.open == 3
        held[0][1].close()
        for _ in range(200):
            if relay.conns.open < 3:
                break
            await asyncio.sleep(0.01)
        held.append(await roundtrip(sock, b"again"))
        for _, hw in held:
            hw.close()
    finally:
        await relay.stop()


async def test_the_cap_also_holds_for_tcp_listeners(tmp_path: Path) -> None:
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    sock = tmp_path / "llm.sock"
    target = await asyncio.start_unix_server(hold, path=str(sock))
    relay = Relay.tcp_to_unix(sock, max_connections=2)
    await relay.start()
    try:
        held = [await asyncio.open_connection("127.0.0.1", relay.port) for _ in range(2)]
        for _ in range(100):
            if relay.conns.open == 2:
                break
            await asyncio.sleep(0.01)
        r, w = await asyncio.open_connection("127.0.0.1", relay.port)
        assert (await asyncio.wait_for(r.read(), 5)).startswith(b"HTTP/1.1 503 ")
        w.close()
        for _, hw in held:
            hw.close()
    finally:
        await relay.stop()
        target.close()


async def test_an_idle_connection_is_closed_and_so_is_its_upstream(echo: Echo, tmp_path: Path) -> None:
    sock = tmp_path / "svc_idle.sock"
    relay = Relay.unix_to_tcp(sock, echo.port, idle_timeout_s=0.4)
    await relay.start()
    try:
        r, w = await roundtrip(sock, b"hello")
        t0 = time.monotonic()
        assert await asyncio.wait_for(r.read(), 5) == b""  # closed by the relay, within 5 s
        assert time.monotonic() - t0 > 0.3  # and not before it was idle
        for _ in range(100):
            if echo.open == 0 and relay.conns.open == 0:
                break
            await asyncio.sleep(0.01)
        assert echo.open == 0 and relay.conns.open == 0
        w.close()
    finally:
        await relay.stop()


async def test_traffic_keeps_a_connection_open(echo: Echo, tmp_path: Path) -> None:
    sock = tmp_path / "svc_busy.sock"
    relay = Relay.unix_to_tcp(sock, echo.port, idle_timeout_s=0.4)
    await relay.start()
    try:
        r, w = await roundtrip(sock, b"a")
        for i in range(8):  # 1.6 s in all, never 0.4 s without a byte
            await asyncio.sleep(0.2)
            w.write(b"%d" % i)
            await w.drain()
            assert await asyncio.wait_for(r.readexactly(1), 5) == b"%d" % i
        w.close()
    finally:
        await relay.stop()


async def test_an_unreachable_target_closes_the_client_and_is_counted(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    sock = tmp_path / "svc_gone.sock"
    relay = Relay.unix_to_tcp(sock, port)
    await relay.start()
    caplog.set_level(logging.WARNING, logger="assay.env.net.relay")
    try:
        for _ in range(3):
            r, w = await asyncio.open_unix_connection(str(sock))
            assert await asyncio.wait_for(r.read(), 5) == b""
            w.close()
        assert relay.unreachable == 3
        warnings = [x.getMessage() for x in caplog.records if x.name == "assay.env.net.relay"]
        assert len(warnings) == 1 and "cannot reach" in warnings[0]  # then throttled
    finally:
        await relay.stop()
    assert not sock.exists()
