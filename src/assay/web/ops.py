"""Operating `assay serve`: the request log, the health endpoint, and a clean stop.

`RequestLog` writes one line per HTTP request to a stream: UTC time, method, path, status,
duration in milliseconds. Never the query string, headers, cookies, tokens or bodies (a
token may arrive in a header or a sign-in form; the query string of `/signin?next=...` is
not needed to operate the server). `health` answers `GET /healthz` (open without sign-in,
Host rules still apply): `{"status": "ok", "version", "store": "ok", "play_sessions": N}`,
or 503 with `"store": "unavailable"` when the store cannot be read.

`run_server` is uvicorn's server, except that after a clean shutdown on SIGTERM or SIGINT
the process ends with status 0 instead of being killed by the signal again (uvicorn
re-raises it): requests in flight finish, the app's shutdown stops the play runs (their
sessions stay live in the store), and the store is closed.
"""

from __future__ import annotations

import contextlib
import datetime
import signal
import time
from collections.abc import Awaitable, Callable, Generator, MutableMapping
from typing import Any, TextIO

import uvicorn
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from starlette.responses import JSONResponse

from assay.store import Store
from assay.version import __version__

__all__ = ["HEALTH_PATH", "RequestLog", "health", "run_server"]

HEALTH_PATH = "/healthz"

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
    stopped_by: list[int]

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        self.stopped_by = []
        with super().capture_signals():
            yield
            self.stopped_by = list(self._captured_signals)
            self._captured_signals.clear()  # shut down cleanly already: not killed by the signal again


def run_server(app: Any, host: str, port: int) -> str | None:
    """Serve until stopped; the name of the signal that stopped it (None otherwise)."""
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    server.run()
    return signal.Signals(server.stopped_by[0]).name if server.stopped_by else None
