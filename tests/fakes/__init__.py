"""Fake model-provider servers: real HTTP on 127.0.0.1, the providers' wire formats, scripted replies.

Shared machinery lives here; the wire formats in ``openai_server`` and ``anthropic_server``.

    from tests.fakes import reply, fault, delay, malformed
    from tests.fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as srv:
        srv.script(fault(429), reply("hi", prompt_tokens=100, cached_tokens=40))
        client = OpenAIClient("gpt-4.1", base_url=srv.url)
        ...
        assert len(srv.requests) == 2

Pytest fixtures ``fake_openai`` and ``fake_anthropic`` are defined here too; import them into a
test module (or a conftest) to use them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# --------------------------------------------------------------------------- response specs


@dataclass
class Reply:
    """A successful model reply, rendered in the server's wire format.

    Token fields use one meaning for both fakes: ``prompt_tokens`` is the whole prompt,
    including ``cached_tokens`` (cache reads) and ``cache_write_tokens`` (Anthropic only).
    None means "derive from the request / reply size".
    """

    text: str = ""
    tool_calls: list[tuple[Any, ...]] = field(default_factory=list)  # (name, args dict|raw str[, id])
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    citations: list[tuple[str, str | None]] = field(default_factory=list)  # (url, title)
    search_query: str | None = None
    stop_reason: str | None = None  # override finish_reason / stop_reason
    model: str | None = None  # override the echoed model name


@dataclass
class Fault:
    """An HTTP error. ``body`` None gives the provider's usual error JSON."""

    status: int = 500
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    message: str | None = None


@dataclass
class Delay:
    """Wait ``seconds``, then answer with ``then`` (the server's default reply when None)."""

    seconds: float
    then: Any = None


@dataclass
class Malformed:
    """A response whose body is not JSON (200 with a JSON content type, by default)."""

    body: str = '{"id": "broken", "choices": [ <html>502 Bad Gateway</html>'
    status: int = 200
    content_type: str = "application/json"


@dataclass
class Raw:
    """Send ``body`` (any JSON value) verbatim."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


Response = Reply | Fault | Delay | Malformed | Raw


def reply(
    text: str = "",
    tool_calls: list[tuple[Any, ...]] | None = None,
    *,
    prompt_tokens: int | None = None,
    completion_tokens: int | None = None,
    cached_tokens: int = 0,
    cache_write_tokens: int = 0,
    citations: list[tuple[str, str | None]] | None = None,
    search_query: str | None = None,
    stop_reason: str | None = None,
    model: str | None = None,
) -> Reply:
    return Reply(text=text, tool_calls=list(tool_calls or []), prompt_tokens=prompt_tokens,
                 completion_tokens=completion_tokens, cached_tokens=cached_tokens,
                 cache_write_tokens=cache_write_tokens, citations=list(citations or []),
                 search_query=search_query, stop_reason=stop_reason, model=model)


def fault(status: int = 500, body: Any = None, headers: dict[str, str] | None = None,
          message: str | None = None) -> Fault:
    return Fault(status=status, body=body, headers=dict(headers or {}), message=message)


def delay(seconds: float, then: Response | None = None) -> Delay:
    return Delay(seconds=seconds, then=then)


def malformed(body: str | None = None, *, status: int = 200, content_type: str = "application/json") -> Malformed:
    return Malformed(body=body if body is not None else Malformed.body, status=status, content_type=content_type)


def raw(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Raw:
    return Raw(body=body, status=status, headers=dict(headers or {}))


def new_id(prefix: str, n: int = 24) -> str:
    return prefix + uuid.uuid4().hex[:n]


def estimate_tokens(value: Any) -> int:
    """About four characters a token, the way the fakes bill prompts and replies."""
    text = value if isinstance(value, str) else json.dumps(value)
    return max(1, len(text) // 4)


class BadRequest(Exception):
    """A request the real provider would reject with 400; raised by ``validate``."""


# --------------------------------------------------------------------------- server


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    json: Any

    def __getitem__(self, key: str) -> Any:  # req["messages"] reads the body
        return self.json[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.json.get(key, default) if isinstance(self.json, dict) else default


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):  # client went away (e.g. timed out)
            return
        super().handle_error(request, client_address)


class FakeServer(ABC):
    """Base of the fake provider servers. Subclasses define the wire format."""

    name = "fake"
    paths: tuple[str, ...] = ()

    def __init__(
        self,
        *,
        default: Response | None = None,
        handler: Callable[[Any], Any] | None = None,
        latency_s: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.default: Response = default if default is not None else reply("ok")
        self.handler = handler
        self.latency_s = latency_s
        self.host = host
        self._port = port
        self._queue: deque[Response] = deque()
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self.images: list[Any] = []  # every image part received, in order
        self.total_prompt_tokens = 0  # including cached tokens
        self.total_completion_tokens = 0
        self.total_cached_tokens = 0
        self.replies_sent = 0
        self.max_in_flight = 0
        self._in_flight = 0
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> FakeServer:
        if self._httpd is not None:
            return self
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 120  # idle keep-alive connections

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
                pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                fake._serve(self)

            def do_GET(self) -> None:  # noqa: N802
                fake._send(self, 404, {"error": {"message": f"no GET {self.path} here"}})

        self._httpd = _HTTPServer((self.host, self._port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"{self.name}-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    close = stop

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError(f"{self.name} server not started")
        return self._httpd.server_address[1]

    @property
    def root(self) -> str:
        """http://127.0.0.1:PORT (no path)."""
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The base_url to give the provider's SDK."""
        return self.root

    # ---------------------------------------------------------------- scripting
    def script(self, *responses: Response | str) -> FakeServer:
        """Queue responses, served one per request in order; then ``default`` (or ``handler``)."""
        with self._lock:
            for r in responses:
                self._queue.append(reply(r) if isinstance(r, str) else r)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.images.clear()
            self.total_prompt_tokens = self.total_completion_tokens = self.total_cached_tokens = 0
            self.replies_sent = 0
            self.max_in_flight = 0

    @property
    def bodies(self) -> list[Any]:
        return [r.json for r in self.requests]

    @property
    def last(self) -> RecordedRequest:
        return self.requests[-1]

    # ---------------------------------------------------------------- subclass hooks
    def validate(self, path: str, body: Any) -> list[Any]:
        """Raise BadRequest for requests the provider rejects; return the images found."""
        return []

    @abstractmethod
    def render(self, path: str, body: Any, spec: Reply) -> tuple[dict[str, Any], int, int, int]:
        """(response JSON, prompt tokens incl. cached, cached tokens, completion tokens)."""

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "error", "code": status}}

    # ---------------------------------------------------------------- serving
    def _next(self, body: Any) -> Response:
        if self.handler is not None:
            got = self.handler(body)
            if got is not None:
                return reply(got) if isinstance(got, str) else (got if isinstance(got, Response) else raw(got))
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.default

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        try:
            self._serve_inner(h)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _serve_inner(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("content-length") or 0)
        data = h.rfile.read(length) if length else b""
        path = h.path.split("?", 1)[0]
        try:
            body = json.loads(data) if data else None
        except ValueError:
            self._send(h, 400, self.error_body(400, "request body is not valid JSON"))
            return
        headers = {k.lower(): v for k, v in h.headers.items()}
        with self._lock:
            self.requests.append(RecordedRequest(path=path, headers=headers, json=body))
        if path not in self.paths:
            self._send(h, 404, self.error_body(404, f"unknown path {path}"))
            return
        try:
            images = self.validate(path, body)
        except BadRequest as exc:
            self._send(h, 400, self.error_body(400, str(exc)))
            return
        if images:
            with self._lock:
                self.images.extend(images)
        spec = self._next(body)
        if self.latency_s > 0:
            time.sleep(self.latency_s)
        while isinstance(spec, Delay):
            time.sleep(spec.seconds)
            spec = spec.then if spec.then is not None else self.default
        if isinstance(spec, Fault):
            payload = spec.body if spec.body is not None else self.error_body(
                spec.status, spec.message or f"fake {self.name} fault {spec.status}")
            self._send(h, spec.status, payload, spec.headers)
        elif isinstance(spec, Malformed):
            self._send_bytes(h, spec.status, spec.body.encode(), spec.content_type)
        elif isinstance(spec, Raw):
            self._send(h, spec.status, spec.body, spec.headers)
        else:
            payload, prompt, cached, completion = self.render(path, body, spec)
            with self._lock:
                self.total_prompt_tokens += prompt
                self.total_cached_tokens += cached
                self.total_completion_tokens += completion
                self.replies_sent += 1
            self._send(h, 200, payload)

    def _send(self, h: BaseHTTPRequestHandler, status: int, payload: Any,
              headers: dict[str, str] | None = None) -> None:
        self._send_bytes(h, status, json.dumps(payload).encode(), "application/json", headers)

    @staticmethod
    def _send_bytes(h: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str,
                    headers: dict[str, str] | None = None) -> None:
        try:
            h.send_response(status)
            h.send_header("Content-Type", content_type)
            h.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            h.close_connection = True


# --------------------------------------------------------------------------- shared rendering helpers


def split_tokens(spec: Reply, prompt_estimate: int) -> tuple[int, int, int]:
    """(prompt incl. cache, cache reads, cache writes) for a reply spec."""
    cached = max(0, spec.cached_tokens)
    written = max(0, spec.cache_write_tokens)
    prompt = spec.prompt_tokens if spec.prompt_tokens is not None else prompt_estimate + cached + written
    return max(prompt, cached + written), cached, written


def completion_tokens(spec: Reply) -> int:
    if spec.completion_tokens is not None:
        return spec.completion_tokens
    size = len(spec.text) + sum(len(json.dumps(tc[1]) if not isinstance(tc[1], str) else tc[1])
                                for tc in spec.tool_calls)
    return max(1, size // 4)


def tool_call_parts(tc: tuple[Any, ...], prefix: str) -> tuple[str, Any, str]:
    """(name, args, id) of a scripted tool call."""
    name, args = tc[0], tc[1] if len(tc) > 1 else {}
    call_id = tc[2] if len(tc) > 2 else new_id(prefix)
    return name, args, call_id


def citation_span(text: str, title: str | None) -> tuple[int, int]:
    if title and title in text:
        start = text.index(title)
        return start, start + len(title)
    return 0, len(text)


# --------------------------------------------------------------------------- pytest fixtures

try:
    import pytest
except ImportError:  # used from a benchmark without pytest
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def fake_openai() -> Iterator[Any]:
        from tests.fakes.openai_server import FakeOpenAIServer

        with FakeOpenAIServer() as srv:
            yield srv

    @pytest.fixture
    def fake_anthropic() -> Iterator[Any]:
        from tests.fakes.anthropic_server import FakeAnthropicServer

        with FakeAnthropicServer() as srv:
            yield srv
