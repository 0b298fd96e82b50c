"""The shared server helper: the connection cap, its refusals, the descriptor budget, the log throttle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from assay.env.net import unixserver
from assay.env.net.unixserver import Connections, LogThrottle, listen_unix, raise_open_file_limit

REFUSAL = b"busy\n"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class Held:
    """A server whose connections stay open until the client closes (each gets b'hello\\n' first)."""

    def __init__(self, limit: int) -> None:
        self.conns = Connections("test.sock", limit=limit, refusal=REFUSAL)
        self.served = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.served += 1
        writer.write(b"hello\n")
        await writer.drain()
        await reader.read()


@pytest.fixture
async def held(tmp_path: Path) -> AsyncIterator[tuple[Held, Path, asyncio.Server]]:
    h = Held(limit=4)
    path = tmp_path / "test.sock"
    server = await listen_unix(path, h.conns.guard(h.serve))
    yield h, path, server
    await h.conns.close(server)


async def first_line(path: Path) -> tuple[bytes, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(path))
    return await asyncio.wait_for(reader.readline(), 5), writer


async def test_connections_past_the_cap_get_the_refusal_line_and_are_closed(held: tuple[Held, Path, asyncio.Server]) -> None:
    h, path, _ = held
    admitted = [await first_line(path) for _ in range(4)]
    assert [line for line, _ in admitted] == [b"hello\n"] * 4 and h.conns.open == 4
    reader, writer = await asyncio.open_unix_connection(str(path))
    assert await asyncio.wait_for(reader.read(), 5) == REFUSAL  # the line, then EOF: closed at once
    writer.close()
    assert h.conns.refused == 1 and h.conns.accepted == 4 and h.served == 4
    # a slot that frees is taken again
    admitted[0][1].close()
    for _ in range(100):
        if h.conns.open < 4:
            break
        await asyncio.sleep(0.01)
    line, w = await first_line(path)
    assert line == b"hello\n"
    for _, x in [*admitted, (line, w)]:
        x.close()


async def test_a_flood_costs_the_server_a_bounded_number_of_descriptors(tmp_path: Path) -> None:
    """2,000 connections held open by another process: the server's own descriptors stay within
    the cap plus one accept batch, and every refused client got its line."""
    h = Held(limit=8)
    path = tmp_path / "flood.sock"
    before = open_fds()
    server = await listen_unix(path, h.conns.guard(h.serve))
    flood = textwrap.dedent(f"""
        import socket, sys, time
        socks, got = [], 0
        for i in range(2000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            while True:
                try:
                    s.connect({str(path)!r})
                    break
                except BlockingIOError:
                    time.sleep(0.001)
            socks.append(s)
        for s in socks:
            s.settimeout(5)
            got += s.recv(100) in (b"busy\\n", b"hello\\n")
        print("HELD", len(socks), "ANSWERED", got, flush=True)
        sys.stdin.readline()
    """)
    p = await asyncio.create_subprocess_exec(sys.executable, "-c", flood, stdin=asyncio.subprocess.PIPE,
                                             stdout=asyncio.subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdin is not None
        out = await asyncio.wait_for(p.stdout.readline(), 60)
        peak = open_fds() - before
        assert out.split() == [b"HELD", b"2000", b"ANSWERED", b"2000"], out
        # the listening socket, the 8 admitted, the subprocess's pipes: nothing per refused client
        assert peak <= 1 + 8 + 8, f"the server holds {peak} descriptors after the flood"
        assert h.conns.open == 8 and h.conns.refused == 2000 - 8
        p.stdin.write(b"\n")
        await p.stdin.drain()
        await asyncio.wait_for(p.wait(), 30)
    finally:
        if p.returncode is None:
            p.kill()
            await p.wait()
        await h.conns.close(server)


async def test_refusals_are_logged_throttled(held: tuple[Held, Path, asyncio.Server],
                                             caplog: pytest.LogCaptureFixture) -> None:
    h, path, server = held
    caplog.set_level(logging.WARNING, logger="assay.env.net.unixserver")
    admitted = [await first_line(path) for _ in range(4)]
    for _ in range(50):
        r, w = await asyncio.open_unix_connection(str(path))
        assert await asyncio.wait_for(r.read(), 5) == REFUSAL
        w.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "refused 1 new connection(s)" in lines[0], lines
    await h.conns.close(server)
    assert "refused 50 connection(s) past the cap of 4 in all" in caplog.records[-1].getMessage()
    for _, w in admitted:
        w.close()


def test_log_throttle_counts_what_it_holds_back(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(unixserver.time, "monotonic", lambda: now[0])
    t = LogThrottle(interval_s=10)
    assert t.note() == 1
    assert [t.note() for _ in range(5)] == [None] * 5 and t.unlogged == 5
    now[0] += 10
    assert t.note() == 6 and t.unlogged == 0 and t.count == 7


async def test_a_handler_that_raises_is_logged_and_the_server_lives(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    async def broken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise RuntimeError("bug")

    conns = Connections("broken.sock", limit=2)
    path = tmp_path / "b.sock"
    server = await listen_unix(path, conns.guard(broken))
    try:
        for _ in range(3):
            r, w = await asyncio.open_unix_connection(str(path))
            assert await asyncio.wait_for(r.read(), 5) == b""
            w.close()
        assert conns.failed == 3 and conns.open == 0
        assert sum(1 for r in caplog.records if r.exc_info) == 1  # the first, then throttled
    finally:
        await conns.close(server)


async def test_close_cancels_open_connections_and_the_server_starts_again(tmp_path: Path) -> None:
    h = Held(limit=2)
    path = tmp_path / "c.sock"
    server = await listen_unix(path, h.conns.guard(h.serve))
    line, w = await first_line(path)
    assert line == b"hello\n"
    await h.conns.close(server)  # the client never closed: cancelled
    assert h.conns.open == 0 and not h.conns.tasks
    server = await listen_unix(path, h.conns.guard(h.serve))  # the stale socket is replaced
    try:
        line2, w2 = await first_line(path)
        assert line2 == b"hello\n"
        w2.close()
    finally:
        await h.conns.close(server)
    w.close()


async def test_listen_unix_modes_and_refuses_a_non_socket(tmp_path: Path) -> None:
    path = tmp_path / "x.sock"
    path.write_text("not a socket")

    async def noop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        return None

    with pytest.raises(FileExistsError):
        await listen_unix(path, noop)
    path.unlink()
    server = await listen_unix(path, noop)
    try:
        assert os.stat(path).st_mode & 0o777 == 0o666
        with contextlib.closing(socket.socket(socket.AF_UNIX)) as s:
            s.connect(str(path))
    finally:
        server.close()
        await server.wait_closed()


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError):
        Connections("x", limit=0)


def test_open_file_limit_is_raised_to_the_hard_limit() -> None:
    """In a fresh process whose soft limit is low: the first Connections raises it to the hard one."""
    code = textwrap.dedent("""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        from assay.env.net.unixserver import Connections
        Connections("x")
        print(resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out.stderr
    assert raise_open_file_limit() == raise_open_file_limit()  # once per process, then the same answer
