"""`assay.web.netguard` in one process: the request tracker follows chunked, pipelined and
keep-alive requests without cutting them, the caps count per address, a full server makes
room by resetting the oldest unfinished connection of a busy address, and timeouts are one
throttled log line. (tests/security/test_web_availability.py attacks the real server.)"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable
from typing import Any

from assay.web.netguard import Gate, LineLog


class Recorder(asyncio.Protocol):
    """A stand-in for uvicorn's protocol: keeps every byte it is given."""

    made: list[Recorder] = []

    def __init__(self) -> None:
        self.data = bytearray()
        self.lost = False
        Recorder.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.data += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def run(test: Callable[[Gate, int, io.StringIO], Awaitable[None]], **gate_kw: Any) -> None:
    async def main() -> None:
        Recorder.made = []
        log = io.StringIO()
        gate = Gate(LineLog(log), **{"max_open": 64, "header_timeout_s": 0.6, "body_timeout_s": 1.2, **gate_kw})
        server = await asyncio.get_running_loop().create_server(gate.protocol_factory(Recorder), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await test(gate, port, log)
        finally:
            server.close()
            gate.close_unserved()

    asyncio.run(main())


async def connect(port: int, source: str = "127.0.0.1") -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(100), within) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_chunked_pipelined_and_keep_alive_requests_are_followed_not_cut() -> None:
    async def test(gate: Gate, port: int, log: io.StringIO) -> None:
        reader, writer = await connect(port)
        head = b"POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head)
        for _ in range(3):  # a body that trickles in, within the body timeout
            await asyncio.sleep(0.25)
            writer.write(b"5\r\nhello\r\n")
        nxt = b"GET /y HTTP/1.1\r\nHost: a\r\n\r\nGET /z HTTP/1.1\r\nHost: a\r\n\r\n"
        writer.write(b"0\r\n\r\n" + nxt)  # the end of the body and two pipelined requests, at once
        await asyncio.sleep(0.1)
        [conn] = list(gate.open)
        assert conn.phase == "answered" and not gate.pending
        await asyncio.sleep(1.5)  # past both timeouts: nothing is pending, so nothing is cut
        assert not await closed_by_server(reader, 0.1)
        [inner] = Recorder.made
        assert bytes(inner.data) == head + b"5\r\nhello\r\n" * 3 + b"0\r\n\r\n" + nxt
        writer.write(b"GET /again HTTP/1.1\r\nHo")  # a next request begins and stops: timed out
        assert await closed_by_server(reader, 2.0)
        assert "head did not arrive" in log.getvalue()
        writer.close()

    run(test)


def test_a_half_open_connection_never_reaches_the_inner_protocol() -> None:
    async def test(gate: Gate, port: int, log: io.StringIO) -> None:
        reader, writer = await connect(port)
        writer.write(b"GET / HTTP/1.1\r\nHo")
        await asyncio.sleep(0.2)
        assert Recorder.made == [] and len(gate.pending) == 1
        assert await closed_by_server(reader, 2.0)
        await asyncio.sleep(0.1)
        assert not gate.open and not gate.pending and not gate.by_client
        writer.close()

    run(test)


def test_caps_per_address_and_room_made_from_the_busiest_address() -> None:
    async def test(gate: Gate, port: int, log: io.StringIO) -> None:
        a1 = await connect(port, "127.0.0.5")
        await asyncio.sleep(0.05)
        a2 = await connect(port, "127.0.0.5")
        await asyncio.sleep(0.05)
        a3 = await connect(port, "127.0.0.5")  # a third unfinished request from .5: refused
        assert await closed_by_server(a3[0], 1.0)
        b1 = await connect(port, "127.0.0.6")
        b1[1].write(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")  # a whole request: no longer pending
        c1 = await connect(port, "127.0.0.7")
        await asyncio.sleep(0.1)
        assert len(gate.open) == 4 and gate.pending_by_client == {"127.0.0.5": 2, "127.0.0.7": 1}
        d1 = await connect(port, "127.0.0.8")  # the server is full: .5's oldest makes room
        assert await closed_by_server(a1[0], 1.0)
        assert not await closed_by_server(a2[0], 0.1)
        assert not await closed_by_server(c1[0], 0.1) and not await closed_by_server(b1[0], 0.1)
        assert "to make room" in log.getvalue() and "(the cap per address)" in log.getvalue()
        for _r, w in (a1, a2, a3, b1, c1, d1):
            w.close()

    run(test, max_open=4, pending_per_client=2)


def test_log_lines_are_throttled_with_a_count() -> None:
    async def test(gate: Gate, port: int, log: io.StringIO) -> None:
        pairs = [await connect(port) for _ in range(6)]  # six half-open connections from one address
        for r, _w in pairs:
            assert await closed_by_server(r, 2.0)
        lines = log.getvalue().splitlines()
        assert len(lines) == 2, lines  # two refused past the cap of 4, one line; four timed out, one line
        for _r, w in pairs:
            w.close()

    run(test, pending_per_client=4)


def test_requests_past_an_address_rate_reset_its_connection_and_no_one_elses() -> None:
    async def test(gate: Gate, port: int, log: io.StringIO) -> None:
        flood_r, flood_w = await connect(port, "127.0.0.5")
        flood_w.write(b"GET /static/x.js HTTP/1.1\r\nHost: a\r\n\r\n" * 300)  # pipelined, never read
        assert await closed_by_server(flood_r, 1.0)
        assert "requests at once" in log.getvalue() and "127.0.0.5" in log.getvalue()
        # A person on another address with a page's worth of requests on one connection: all through.
        reader, writer = await connect(port, "127.0.0.6")
        page = b"GET /p HTTP/1.1\r\nHost: a\r\n\r\n" * 40
        writer.write(page)
        await asyncio.sleep(0.2)
        assert not await closed_by_server(reader, 0.1)
        assert bytes(Recorder.made[-1].data) == page
        # The flooding address gets its budget back with time: a request a while later goes through.
        await asyncio.sleep(0.3)
        again_r, again_w = await connect(port, "127.0.0.5")
        again_w.write(b"GET /q HTTP/1.1\r\nHost: a\r\n\r\n")
        await asyncio.sleep(0.1)
        assert not await closed_by_server(again_r, 0.1)
        for w in (flood_w, writer, again_w):
            w.close()

    run(test, request_burst=100, requests_per_s=20.0)
