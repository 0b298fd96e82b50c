"""Operating `assay serve`: the request log, the health endpoint, and a clean stop.

`RequestLog` writes one line per HTTP request to a stream: UTC time, method, path, status,
duration in milliseconds. Never the query string, headers, cookies, tokens or bodies (a
token may arrive in a header or a sign-in form; the query string of `/signin?next=...` is
not needed to operate the server). `health` answers `GET /healthz` (open without sign-in,
Host rules still apply): `{"status": "ok", "version", "store": "ok", "play_sessions": N}`,
or 503 with `"store": "unavailable"` when the store cannot be read.

`run_server` is uvicorn's server behind the connection guard (`assay.web.netguard`), and
after a clean shutdown on SIGTERM or SIGINT the process ends with status 0 instead of being
killed by the signal again (uvicorn re-raises it). A stop first ends the play workers
(`app.state.on_stop`: SIGTERM, SIGKILL after a grace; their sessions stay live in the
store), so requests waiting on them answer at once; requests still in flight get
`GRACEFUL_S` seconds, then the store is closed. A request whose route runs in a thread (every
sync route: a page, the JSON API) is not cut short by that: its task is cancelled, but the
interpreter's exit would wait for the thread. So when threads still run `STRAGGLERS_S` after
the server has stopped, a line says how many, and the process ends `STRAGGLERS_S` after
`run_server` returns (`os._exit(0)`): nothing is lost, since the play workers are stopped and
the store is closed, and a write cut short in SQLite or PostgreSQL is rolled back. So SIGTERM
stops the server within a few seconds whatever a play session or a request is doing.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import Any, TextIO, cast

import uvicorn
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

from assay.store import Store
from assay.version import __version__
from assay.web.netguard import (
    BACKLOG,
    MAX_HEAD_BYTES,
    Gate,
    LineLog,
    deepen_listen_queue,
    loop_exception_handler,
    throttle_logger,
)

__all__ = ["HEALTH_PATH", "RequestLog", "health", "run_server"]

HEALTH_PATH = "/healthz"
#: after a stop, how long requests still in flight may take (the play workers are ended first)
GRACEFUL_S = 2
#: after the server has stopped, how long threads still running may take before the process ends without them
STRAGGLERS_S = 0.5
#: an idle connection between two requests is closed after this (uvicorn's keep-alive timeout)
KEEP_ALIVE_S = 5

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class RequestLog:
    """ASGI middleware: one line per request (see the module docstring)."""

    def __init__(self, app: ASGIApp, stream: TextIO) -> None:
        self.app = app
        self.stream = stream

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500  # what the client sees when the app fails before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except ClientDisconnect:
            # The client went (or was cut off by a body timeout) before its body arrived: nobody
            # is left to answer, and it is not the server's fault. Logged as 499, no traceback.
            status = 499
        finally:
            ms = (time.perf_counter() - start) * 1000
            when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            path = "".join(c if c.isprintable() else "?" for c in str(scope.get("path", "")))[:300]
            self.stream.write(f"{when} {scope.get('method', '?')} {path} {status} {ms:.1f}ms\n")
            self.stream.flush()


def health(store: Store, play_sessions: int) -> JSONResponse:
    try:
        with store.engine.connect() as conn:
            conn.execute(text("select 1"))
    except SQLAlchemyError:  # the store cannot be read: reported as such, the server keeps running
        return JSONResponse({"status": "unavailable", "version": __version__, "store": "unavailable",
                             "play_sessions": play_sessions}, status_code=503)
    return JSONResponse({"status": "ok", "version": __version__, "store": "ok", "play_sessions": play_sessions})


class _Server(uvicorn.Server):
    """uvicorn's server with the connection guard, quiet logs, and a stop that ends the play
    workers first (so requests waiting on them finish at once) and waits briefly."""

    stopped_by: list[int]
    on_stop: Callable[[], Awaitable[None]] | None = None
    log: LineLog | None = None
    gate: Gate | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        self.stopped_by = []
        with super().capture_signals():
            yield
            self.stopped_by = list(self._captured_signals)
            self._captured_signals.clear()  # shut down cleanly already: not killed by the signal again

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if self.log is not None:
            asyncio.get_running_loop().set_exception_handler(loop_exception_handler(self.log))
        await super().startup(sockets)
        deepen_listen_queue([s for server in getattr(self, "servers", []) for s in (server.sockets or [])])

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.gate is not None:
            self.gate.close_unserved()
        if self.on_stop is not None:
            await self.on_stop()
        await super().shutdown(sockets)


def run_server(app: Any, host: str, port: int, log: TextIO | None = None) -> str | None:
    """Serve until stopped; the name of the signal that stopped it (None otherwise).

    Connections pass `assay.web.netguard.Gate` (caps, header and body timeouts, throttled
    log lines on `log`, default stderr); a stop ends the play workers (`app.state.on_stop`)
    and then waits at most `GRACEFUL_S` for requests in flight."""
    stream = log if log is not None else sys.stderr
    lines = LineLog(stream)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", http="h11", ws="none",
                            lifespan="on", timeout_keep_alive=KEEP_ALIVE_S, timeout_graceful_shutdown=GRACEFUL_S,
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES, backlog=BACKLOG)
    config.load()
    gate = Gate(lines)
    config.http_protocol_class = cast(Any, gate.protocol_factory(config.http_protocol_class))
    for name in ("uvicorn.error", "uvicorn", "asyncio"):
        throttle_logger(name)
    server = _Server(config)
    server.log = lines
    server.gate = gate
    server.on_stop = getattr(getattr(app, "state", None), "on_stop", None)
    server.run()
    left = _threads_left(STRAGGLERS_S)
    if left:
        # Requests whose routes still run in threads: the interpreter's exit would wait for them.
        # The process ends STRAGGLERS_S after this returns (the caller's last words said).
        stream.write(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%dT%H:%M:%SZ} {left} request(s) still running "
                     "in a thread at the stop: cut short\n")
        stream.flush()
        end = threading.Timer(STRAGGLERS_S, _end_process)
        end.daemon = True
        end.start()
    return signal.Signals(server.stopped_by[0]).name if server.stopped_by else None


def _threads_left(wait_s: float) -> int:
    """How many threads other than this one (the daemons aside) still run after waiting up to
    `wait_s` for them: the routes of requests still in flight (a worker thread that was idle
    ends at once when the server's loop ends)."""
    deadline = time.monotonic() + wait_s
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and not t.daemon]
    for t in others:
        t.join(max(0.0, deadline - time.monotonic()))
    return sum(1 for t in others if t.is_alive())


def _end_process() -> None:
    """End the process now, with status 0 (the server has stopped: `run_server`)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:  # ended even when a stream cannot be flushed (nobody is left to tell)
        os._exit(0)
