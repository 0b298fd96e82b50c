"""Connections of `assay serve`: caps, header and body timeouts, and a log that cannot flood.

uvicorn caps nothing per client and has no timeout for a request that arrives slowly (its
keep-alive timeout starts only after a response). So every connection passes `Gate` first,
an asyncio Protocol in front of uvicorn's own (`GuardedProtocol`):

- **Caps.** At most `max_open` connections in all (from the process's descriptor limit,
  `open_cap`), `MAX_PER_CLIENT` per client address, and `MAX_PENDING_PER_CLIENT` per
  address with a request not yet fully received (a connection that has sent nothing yet
  counts). A connection past a cap is reset at once (`SO_LINGER` 0: no descriptor, no
  TIME_WAIT, no work for it). When the total is full, the oldest connection with an
  unfinished request, from an address holding more than one, is reset to make room
  (`evict`), so a flood of half-open connections cannot keep a newcomer out.
- **Request rate.** Each client address has a bucket of `REQUEST_BURST` requests, refilled at
  `REQUESTS_PER_S` a second; a request past it resets its connection (with the requests
  pipelined behind it). A page with its scripts and a workbench's polls stay far below; a
  client pipelining thousands of requests it never reads the answers to cannot take the
  server's CPU from everyone else.
- **Timeouts.** A request's head must arrive within `HEADER_TIMEOUT_S` of its first byte
  (or of the connection, for the first request), its body within `BODY_TIMEOUT_S` of the
  head; past that the connection is closed. Where a request ends is read by a second,
  passive h11 parser over the same bytes (uvicorn's own parser is its internals).
- **The log.** Each kind of refusal, timeout or eviction is one line, the first at once and
  then at most one per `LOG_INTERVAL_S` with the count since (`LogThrottle`, the one the
  stakeholder servers use); uvicorn's own error lines are throttled the same way
  (`throttle_logger`), and the event loop's error reports (a failed accept, say) become
  such lines too, without a traceback (`loop_exception_handler`).

uvicorn keeps its `h11_max_incomplete_event_size` (a head over it is 400) and its
keep-alive timeout (an idle connection between requests is closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

import h11

from assay.env.net.unixserver import LOG_INTERVAL_S, LogThrottle, raise_open_file_limit

__all__ = ["BACKLOG", "BODY_TIMEOUT_S", "LISTEN_QUEUE", "deepen_listen_queue", "HEADER_TIMEOUT_S", "MAX_HEAD_BYTES", "MAX_OPEN", "MAX_PENDING_PER_CLIENT",
           "MAX_PER_CLIENT", "Gate", "GuardedProtocol", "LineLog", "loop_exception_handler", "open_cap",
           "throttle_logger"]

HEADER_TIMEOUT_S = 5.0
BODY_TIMEOUT_S = 15.0
#: the most connections in all, whatever the descriptor limit allows
MAX_OPEN = 1024
MAX_PER_CLIENT = 32
MAX_PENDING_PER_CLIENT = 16
#: descriptors kept for everything else (the store, play workers' sockets, log files)
RESERVED_FDS = 256
#: how many connections asyncio accepts in one go (the `backlog` it is given); a refused one
#: holds its descriptor for a few loop turns, so about four batches are open at once
BACKLOG = 128
#: the kernel's queue of connections not yet accepted (they cost the process no descriptor)
LISTEN_QUEUE = 4096
#: a request head larger than this is refused (uvicorn answers 400)
MAX_HEAD_BYTES = 64 * 1024
#: oldest unfinished connections looked at for one from a busy address, when making room
EVICT_SCAN = 64
#: requests an address may make at once, then `REQUESTS_PER_S` a second
REQUEST_BURST = 200
REQUESTS_PER_S = 50.0
#: request buckets kept (one per address seen lately); past it the full ones are forgotten
MAX_BUCKETS = 4096


def open_cap() -> int:
    """The cap on open connections: `MAX_OPEN`, or less when the descriptor limit is small
    (raised to its hard limit first), so a flood never runs the process out of descriptors."""
    soft, _hard = raise_open_file_limit()
    return max(16, min(MAX_OPEN, (soft - RESERVED_FDS - 4 * BACKLOG) // 2))


def deepen_listen_queue(sockets: list[Any]) -> None:
    """Give listening sockets a long kernel queue (`LISTEN_QUEUE`) while asyncio still accepts
    `BACKLOG` at a time: a burst of connects waits in the kernel instead of being dropped."""
    for ts in sockets:
        sock = socket.socket(fileno=os.dup(ts.fileno()))
        try:
            sock.listen(LISTEN_QUEUE)
        finally:
            sock.close()  # the duplicate only: the listening socket stays open


def _utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LineLog:
    """One throttled line per kind of event on a stream (the server's request log)."""

    def __init__(self, stream: TextIO, interval_s: float = LOG_INTERVAL_S) -> None:
        self.stream = stream
        self.interval_s = interval_s
        self.throttles: dict[str, LogThrottle] = {}

    def note(self, kind: str, text: Callable[[], str]) -> None:
        """Count one event of `kind`; write `text()` when one may be written (with the count)."""
        th = self.throttles.get(kind)
        if th is None:
            if len(self.throttles) > 256:  # kinds are the code's own; bounded anyway
                self.throttles.clear()
            th = self.throttles[kind] = LogThrottle(self.interval_s)
        since = th.note()
        if since is None:
            return
        more = f" ({since} like this since the last such line, {th.count} in all)" if th.count > 1 else ""
        self.stream.write(f"{_utc()} {text()}{more}\n")
        self.stream.flush()


def _peer(transport: asyncio.BaseTransport) -> str:
    name = transport.get_extra_info("peername")
    if isinstance(name, tuple) and name:
        return str(name[0])
    return str(name or "?")


def _reset(transport: asyncio.Transport) -> None:
    """Close at once with a reset: nothing buffered is sent, the socket leaves no TIME_WAIT."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):  # already gone on the peer's side: a plain abort does the same
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class Gate:
    """The caps and timeouts shared by every connection of one server (module docstring)."""

    def __init__(self, log: LineLog, *, max_open: int | None = None, per_client: int = MAX_PER_CLIENT,
                 pending_per_client: int = MAX_PENDING_PER_CLIENT, header_timeout_s: float = HEADER_TIMEOUT_S,
                 body_timeout_s: float = BODY_TIMEOUT_S, request_burst: int = REQUEST_BURST,
                 requests_per_s: float = REQUESTS_PER_S) -> None:
        self.log = log
        self.max_open = max_open if max_open is not None else open_cap()
        self.per_client = per_client
        self.pending_per_client = pending_per_client
        self.header_timeout_s = header_timeout_s
        self.body_timeout_s = body_timeout_s
        self.open: set[GuardedProtocol] = set()
        self.by_client: Counter[str] = Counter()
        self.pending: dict[GuardedProtocol, None] = {}  # oldest first
        self.pending_by_client: Counter[str] = Counter()
        self.closing = False  # the server stops: no new connection
        self.request_burst = request_burst
        self.requests_per_s = requests_per_s
        self.buckets: dict[str, tuple[float, float]] = {}  # address -> (requests left, when counted)

    def protocol_factory(self, inner: Callable[..., asyncio.Protocol]) -> Callable[..., asyncio.Protocol]:
        """uvicorn's `http_protocol_class` wrapped: the same keyword arguments, guarded."""

        def make(**kwargs: Any) -> asyncio.Protocol:
            return GuardedProtocol(self, lambda: inner(**kwargs))

        return make

    def admit(self, conn: GuardedProtocol) -> bool:
        peer = conn.peer
        if self.closing:
            return False
        if self.by_client[peer] >= self.per_client:
            self.log.note("refused-open", lambda: f"connection from {peer} refused: {self.per_client} connections "
                                                  "from that address are open (the cap per address)")
            return False
        if self.pending_by_client[peer] >= self.pending_per_client:
            self.log.note("refused-pending", lambda: f"connection from {peer} refused: {self.pending_per_client} "
                                                     "connections from that address have a request not yet "
                                                     "received (the cap per address)")
            return False
        if len(self.open) >= self.max_open and not self._evict():
            self.log.note("refused-total", lambda: f"connection from {peer} refused: {self.max_open} connections "
                                                   "are open (the server's cap), none of them waiting on a request")
            return False
        self.open.add(conn)
        self.by_client[peer] += 1
        return True

    def _evict(self) -> bool:
        """Reset the oldest unfinished connection (of an address holding several) to make room."""
        victim = None
        for i, conn in enumerate(self.pending):
            if victim is None:
                victim = conn  # the oldest, if no busier address shows up
            if self.pending_by_client[conn.peer] > 1:
                victim = conn
                break
            if i >= EVICT_SCAN:
                break
        if victim is None:
            return False
        peer = victim.peer
        self.log.note("evicted", lambda: f"connection from {peer} with an unfinished request reset to make room "
                                         f"({self.max_open} connections open, the server's cap)")
        victim.drop()
        return True

    def take_request(self, conn: GuardedProtocol) -> bool:
        """Count one request of `conn`'s address: False past its bucket (module docstring)."""
        now = time.monotonic()
        peer = conn.peer
        left, then = self.buckets.get(peer, (float(self.request_burst), now))
        left = min(float(self.request_burst), left + (now - then) * self.requests_per_s)
        if left < 1.0:
            self.buckets[peer] = (left, now)
            self.log.note("refused-rate", lambda: f"connection from {peer} reset: more than {self.request_burst} "
                                                  f"requests at once, or {self.requests_per_s:g} a second, from "
                                                  "that address (the cap per address)")
            return False
        if peer not in self.buckets and len(self.buckets) >= MAX_BUCKETS:
            full = now - self.request_burst / self.requests_per_s
            self.buckets = {k: v for k, v in self.buckets.items() if v[1] > full}  # the refilled ones go
        self.buckets[peer] = (left - 1.0, now)
        return True

    def set_pending(self, conn: GuardedProtocol, pending: bool) -> None:
        if pending and conn not in self.pending and conn in self.open:
            self.pending[conn] = None
            self.pending_by_client[conn.peer] += 1
        elif not pending and conn in self.pending:
            del self.pending[conn]
            self._less(self.pending_by_client, conn.peer)

    def release(self, conn: GuardedProtocol) -> None:
        self.set_pending(conn, False)
        if conn in self.open:
            self.open.discard(conn)
            self._less(self.by_client, conn.peer)

    @staticmethod
    def _less(counts: Counter[str], key: str) -> None:
        counts[key] -= 1
        if counts[key] <= 0:
            del counts[key]

    def close_unserved(self) -> None:
        """At a stop: reset the connections uvicorn never saw (no whole request head yet), which
        uvicorn's own shutdown does not know to close; refuse new connections from now on."""
        self.closing = True
        for conn in [c for c in self.open if c.inner is None]:
            conn.drop()

    def timed_out(self, conn: GuardedProtocol, phase: str) -> None:
        peer = conn.peer
        limit = self.header_timeout_s if phase == "head" else self.body_timeout_s
        self.log.note(f"timeout-{phase}", lambda: f"connection from {peer} closed: the request's {phase} did not "
                                                  f"arrive within {limit:g} s")


class GuardedProtocol(asyncio.Protocol):
    """One connection: admitted by the `Gate`, timed by its own request tracker, served by
    uvicorn's protocol (`inner`), which is made only once a first request head is here
    whole: a half-open or slowloris connection costs a buffer and a timer, and uvicorn never
    sees it."""

    def __init__(self, gate: Gate, inner: Callable[[], asyncio.Protocol]) -> None:
        self.gate = gate
        self._make_inner = inner
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.phase = "head"  # head, body, answered (a whole request received), untracked
        self._timer: asyncio.TimerHandle | None = None
        self._shadow = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._early = bytearray()  # what came before uvicorn's protocol was made

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = _peer(transport)
        if not self.gate.admit(self):
            _reset(transport)
            return
        self._await("head")

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            if self._track(data):
                self.inner.data_received(data)
            return
        if self.phase != "head" or self.transport is None or self.transport.is_closing():
            return  # refused, dropped or timed out: nothing more is read
        self._early += data
        if not self._track(data):
            return
        if self.phase != "head":  # the head is whole (or unreadable: uvicorn answers it 400)
            self.inner = self._make_inner()
            self.inner.connection_made(self.transport)
            early, self._early = bytes(self._early), bytearray()
            self.inner.data_received(early)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.gate.release(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    # ---- the request tracker

    def drop(self) -> None:
        """Reset the connection now (evicted), its slot freed at once."""
        self._cancel_timer()
        self.gate.release(self)
        if self.transport is not None:
            _reset(self.transport)

    def _await(self, phase: str) -> None:
        """A request's `phase` (head or body) is now awaited, within its timeout."""
        self.phase = phase
        self._cancel_timer()
        self.gate.set_pending(self, True)
        limit = self.gate.header_timeout_s if phase == "head" else self.gate.body_timeout_s
        self._timer = asyncio.get_running_loop().call_later(limit, self._expired, phase)

    def _settle(self, phase: str) -> None:
        self.phase = phase
        self._cancel_timer()
        self.gate.set_pending(self, False)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, phase: str) -> None:
        self._timer = None
        self.gate.timed_out(self, phase)
        self.gate.release(self)
        if self.transport is not None:
            self.transport.close()

    def _track(self, data: bytes) -> bool:
        """Follow where requests begin and end in the bytes received (h11, passively); False when
        a request in them is past its address's rate and the connection was reset."""
        if self.phase == "untracked":
            return True
        if self.phase == "answered":
            self._await("head")  # the first byte of the next request
        shadow = self._shadow
        try:
            shadow.receive_data(data)
            while True:
                event = shadow.next_event()
                if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                    break
                if isinstance(event, h11.Request):
                    if not self.gate.take_request(self):
                        self.drop()
                        return False
                    self._await("body")
                elif isinstance(event, h11.EndOfMessage):
                    # what the real server answers does not matter here; a stand-in ends the cycle
                    shadow.send(h11.Response(status_code=204, headers=[]))
                    shadow.send(h11.EndOfMessage())
                    if shadow.our_state is h11.DONE and shadow.their_state is h11.DONE:
                        shadow.start_next_cycle()
                        self._settle("answered")
                    else:  # the connection closes after this request (HTTP/1.0, Connection: close)
                        self._settle("untracked")
                        return True
        except h11.ProtocolError:  # a bad request: uvicorn answers it 400 and closes the connection
            self._settle("untracked")
            return True
        if self.phase == "answered" and shadow.trailing_data[0]:
            self._await("head")  # part of a next (pipelined) request is already here
        return True


class _Throttle(logging.Filter):
    """Lets through the first record of each message, then one per interval with the count."""

    def __init__(self, interval_s: float) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.throttles: dict[tuple[str, object], LogThrottle] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        th = self.throttles.get(key)
        if th is None:
            if len(self.throttles) > 256:
                self.throttles.clear()
            th = self.throttles[key] = LogThrottle(self.interval_s)
        since = th.note()
        if since is None:
            return False
        if th.count > 1:
            record.msg = f"{record.getMessage()} ({since} like this since the last such line, {th.count} in all)"
            record.args = None
        if th.count > 1 and record.exc_info:
            record.exc_info = None  # the first one carried the traceback
            record.exc_text = None
        return True


def throttle_logger(name: str, interval_s: float = LOG_INTERVAL_S) -> None:
    """Throttle a logger's records (uvicorn's `uvicorn.error`): see `_Throttle`."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, _Throttle) for f in logger.filters):
        logger.addFilter(_Throttle(interval_s))


def loop_exception_handler(log: LineLog) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """The event loop's error reports (a failed accept, a callback that raised) as throttled
    one-line notes instead of a traceback each: a flood of them cannot fill the disk."""

    def handle(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "event loop error")
        exc = context.get("exception")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else ""
        log.note(f"loop:{message}", lambda: f"assay serve: {message}{': ' + what if what else ''}")

    return handle
