"""The gateway's endpoint: `LLMGateway` on its Unix socket, HTTP/1.1 framing and the routes.

Routes:

    POST /v1/chat/completions   OpenAI chat completions, non-streaming (also /chat/completions)
    POST /chat                  upstream FDE-Gym's simple protocol: {messages, max_tokens,
                                temperature, json_mode} -> {"text": ...}
    GET  /v1/models             the one model behind the gateway
    GET  /v1/budget, GET /chat  calls and dollars used and allowed in the current phase

A request is checked and bounded by the rules (`rules`), admitted against the phase's budget
and settled after (`budget`), and forwarded upstream (`upstream`). Connections are capped
(MAX_CONNECTIONS, `assay.env.net.unixserver.Connections`), and so are the request bodies held
at once (MAX_BUFFERED_BYTES).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import httpx

from assay import jsonlimits
from assay.env.net.gateway.budget import DEFAULT_BUDGETS, Budget, GatewayRecord, Ledger, Phase
from assay.env.net.gateway.rules import (
    IMAGE_INPUT_TOKENS,
    UPSTREAM_MAX_INPUT_CHARS,
    UPSTREAM_MAX_TOKENS_CAP,
    Call,
    Reject,
    RequestRules,
    check_fields,
    error_body,
)
from assay.env.net.gateway.upstream import UpstreamClient
from assay.env.net.unixserver import Connections, listen_unix
from assay.llm.prices import Price

__all__ = ["MAX_BUFFERED_BYTES", "MAX_CONNECTIONS", "SOCKET_NAME", "LLMGateway"]

log = logging.getLogger(__name__)

SOCKET_NAME = "llm.sock"

MAX_HEADER_LINE = 64 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 32 * 1024 * 1024
MAX_CONNECTIONS = 64
"""Open connections per gateway (a delivered system may well call in parallel)."""
MAX_BUFFERED_BYTES = 128 * 1024 * 1024
"""Request bodies one gateway holds at once, over all its connections: a body is admitted
(by its Content-Length, before it is read) only while it fits, else the request gets a 503 to
retry, so a flood of half-sent 32 MiB bodies cannot make the shared harness hold gigabytes."""
_BUSY_BODY = json.dumps({"error": {"message": "the gateway is busy: too many open connections",
                                    "type": "rate_limit_error", "param": None, "code": "too_many_connections"}}).encode()
BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
        b"Content-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)
"""The answer a connection past the cap gets at once, before it is closed."""
IDLE_TIMEOUT_S = 120.0  # an idle keep-alive connection is closed after this
READ_TIMEOUT_S = 60.0  # headers and body of one request must arrive within this


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    held: int = 0  # bytes of MAX_BUFFERED_BYTES this request holds until it is answered


class LLMGateway(Ledger, RequestRules, UpstreamClient):
    """One metered OpenAI-compatible endpoint on a Unix socket; `await start(path)`, `await stop()`."""

    def __init__(
        self,
        upstream_url: str,
        model: str,
        *,
        price: Price | None,
        api_key: str | None = None,
        budgets: Mapping[str, Budget] | None = None,
        phase: str = "dev",
        log_path: str | Path | None = None,
        max_tokens_cap: int | None = None,
        max_input_chars: int | None = None,
        image_input_tokens: int = IMAGE_INPUT_TOKENS,
        timeout_s: float = 300.0,
        upstream_retries: int = 2,
        retry_base_delay: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`upstream_url` is an OpenAI-compatible base URL ending in /v1; `model` the one model
        every request is sent to; `price` prices its usage (None: unknown, allowed only when
        no phase has a dollar cap). A phase missing from `budgets` is not capped; a dollar cap
        needs `max_tokens_cap` too. `api_key` defaults to $OPENAI_API_KEY; none at all sends no
        Authorization header (local servers). `image_input_tokens`: the tokens reserved per
        image part.
        """
        self.upstream_url = upstream_url.rstrip("/")
        self.model = model
        self.price = price
        self.budgets: dict[str, Budget] = dict(DEFAULT_BUDGETS if budgets is None else budgets)
        dollars = any(b.max_usd is not None for b in self.budgets.values())
        if price is None and dollars:
            raise ValueError(f"no price for {model!r}: a dollar budget cannot be enforced without one")
        if max_tokens_cap is None and dollars:
            raise ValueError("a dollar budget needs max_tokens_cap: a call whose reply is not bounded "
                             "cannot be reserved against it")
        if max_tokens_cap is not None and max_tokens_cap <= 0:
            raise ValueError(f"max_tokens_cap must be positive, not {max_tokens_cap}")
        self.phase = phase
        self.log_path = Path(log_path) if log_path is not None else None
        self.max_tokens_cap = max_tokens_cap
        self.max_input_chars = max_input_chars
        self.image_input_tokens = image_input_tokens
        self.upstream_retries = max(0, upstream_retries)
        self.retry_base_delay = retry_base_delay
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._timeout = timeout_s
        # The official API wants max_completion_tokens (o-series reject max_tokens); compatible
        # servers (OpenRouter, vLLM, llama.cpp) all understand max_tokens.
        official = (urlparse(self.upstream_url).hostname or "").lower() == "api.openai.com"
        self._max_tokens_key = "max_completion_tokens" if official else "max_tokens"
        self._transport = transport
        self.records: list[GatewayRecord] = []
        self._phases: dict[str, Phase] = {}
        self.socket_path: Path | None = None
        self._server: asyncio.base_events.Server | None = None
        self._http: httpx.AsyncClient | None = None
        self._log: IO[str] | None = None
        self.conns = Connections("llm.sock", limit=MAX_CONNECTIONS, refusal=BUSY)
        self._buffered = 0  # request body bytes admitted and not yet answered

    @classmethod
    def from_engagement(cls, engagement: Mapping[str, Any], upstream_url: str, model: str, *,
                        price: Price | None, **kw: Any) -> LLMGateway:
        """A gateway with an FDE-Gym engagement.json's budgets (defaults 300 / $0.25 dev,
        600 / $0.30 prod) and upstream's caps (max_tokens 800, 60,000 request characters)."""
        def get(key: str, default: float) -> Any:
            v = engagement.get(key)
            return default if v is None else v

        budgets = {"dev": Budget(int(get("dev_llm_calls", 300)), float(get("dev_llm_usd", 0.25))),
                   "prod": Budget(int(get("prod_llm_calls", 600)), float(get("prod_llm_usd", 0.30)))}
        kw.setdefault("max_tokens_cap", UPSTREAM_MAX_TOKENS_CAP)
        kw.setdefault("max_input_chars", UPSTREAM_MAX_INPUT_CHARS)
        return cls(upstream_url, model, price=price, budgets=budgets, **kw)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, socket_path: str | Path) -> None:
        path = Path(socket_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)  # the sandbox uid must reach the socket through the read-only bind
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            self._log = os.fdopen(fd, "a", encoding="utf-8")
        self._http = httpx.AsyncClient(timeout=self._timeout, transport=self._transport,
                                       headers=self._headers)
        self._server = await listen_unix(path, self.conns.guard(self._serve), limit=MAX_HEADER_LINE)
        self.socket_path = path

    async def stop(self) -> None:
        if self._server is not None:
            await self.conns.close(self._server)
            self._server = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)

    async def __aenter__(self) -> LLMGateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ HTTP/1.1 framing

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    req = await self._read_request(reader, writer)
                except Reject as r:
                    self._refuse(self.phase, None, r)
                    await self._send(writer, r.status, error_body(r.message, r.kind, r.code), keep_alive=False)
                    return
                if req is None:
                    return
                try:
                    status, payload, headers = await self._dispatch(req)
                finally:
                    self._buffered -= req.held
                    req.body = b""
                if not await self._send(writer, status, payload, keep_alive=req.keep_alive, headers=headers):
                    return
                if not req.keep_alive:
                    return
        except asyncio.CancelledError:
            pass
        except Exception:  # one client never takes the gateway down
            log.exception("LLM gateway connection failed")
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    # complexity: HTTP/1.1 request framing: each malformed case is refused where it is read
    async def _read_request(self, reader: asyncio.StreamReader,  # noqa: C901
                            writer: asyncio.StreamWriter) -> Request | None:
        """The next request on the connection; None when the client is done (EOF, idle, gone)."""
        held = 0
        try:
            line = b""
            while not line.strip():
                line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
                if not line:
                    return None
            parts = line.decode("latin-1").strip().split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
                raise Reject(400, "malformed HTTP request line", close=True)
            method, target, version = parts
            headers: dict[str, str] = {}
            while True:
                h = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
                if not h:
                    return None
                if h in (b"\r\n", b"\n"):
                    break
                if len(headers) >= MAX_HEADERS:
                    raise Reject(431, "too many request headers", close=True)
                name, sep, value = h.decode("latin-1").partition(":")
                if not sep or not name.strip() or name != name.strip():
                    raise Reject(400, "malformed HTTP header line", close=True)
                headers[name.lower()] = value.strip()
            if "transfer-encoding" in headers:
                raise Reject(411, "chunked request bodies are not supported: send Content-Length", close=True)
            raw_len = headers.get("content-length", "0")
            if not raw_len.isdigit():
                raise Reject(400, "bad Content-Length", close=True)
            length = int(raw_len)
            if length > MAX_BODY_BYTES:
                raise Reject(413, f"request body too large (max {MAX_BODY_BYTES} bytes)", "request_too_large",
                             close=True)
            if length and self._buffered + length > MAX_BUFFERED_BYTES:
                raise Reject(503, "the gateway is busy: too much request data in flight; retry shortly",
                             "server_busy", close=True)
            self._buffered += length
            held = length
            if length and headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
            body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S) if length else b""
        except (ValueError, asyncio.LimitOverrunError):
            self._buffered -= held
            raise Reject(431, "request header line too long", close=True) from None
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            self._buffered -= held
            return None
        conn = headers.get("connection", "").lower()
        keep = ("close" not in conn) if version == "HTTP/1.1" else ("keep-alive" in conn)
        path = target.split("?", 1)[0]
        if path.startswith(("http://", "https://")):  # absolute form
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        return Request(method.upper(), path, headers, body, keep, held)

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, status: int, payload: Any, *, keep_alive: bool,
                    headers: Mapping[str, str] | None = None) -> bool:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Status"
        head = [f"HTTP/1.1 {status} {reason}", "Content-Type: application/json",
                f"Content-Length: {len(body)}", f"Connection: {'keep-alive' if keep_alive else 'close'}"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            await writer.drain()
            return True
        except (ConnectionError, OSError):
            return False

    # ------------------------------------------------------------------ routes

    async def _dispatch(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        routes: dict[str, dict[str, Any]] = {
            "/v1/chat/completions": {"POST": self._openai_chat},
            "/chat/completions": {"POST": self._openai_chat},
            "/chat": {"POST": self._simple_chat, "GET": self._budget},
            "/v1/models": {"GET": self._models},
            "/models": {"GET": self._models},
            "/v1/budget": {"GET": self._budget},
        }
        path = req.path.rstrip("/") or "/"
        methods = routes.get(path)
        if methods is None:
            return 404, error_body(f"no route {req.method} {req.path}", "not_found_error"), {}
        handler = methods.get(req.method)
        if handler is None:
            return 405, error_body(f"{req.method} not allowed on {path}", "invalid_request_error"), {
                "Allow": ", ".join(methods)}
        phase = self.phase
        try:
            status, payload = await handler(req)
        except Reject as r:
            self._refuse(phase, path, r)
            return r.status, error_body(r.message, r.kind, r.code), {}
        return status, payload, {}

    async def _models(self, req: Request) -> tuple[int, Any]:
        return 200, {"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "assay-gateway"}]}

    async def _budget(self, req: Request) -> tuple[int, Any]:
        return 200, self.status()

    @staticmethod
    def _json_body(req: Request) -> dict[str, Any]:
        try:
            body = jsonlimits.loads(req.body.decode("utf-8"))
        except (UnicodeDecodeError, jsonlimits.JSONLimitError) as e:
            raise Reject(400, f"request body is not valid JSON: {str(e)[:200]}") from None
        try:  # "\ud800" parses, and then no UTF-8 can carry it upstream; NaN and 1e999 parse, and no JSON holds them
            json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")
        except UnicodeEncodeError:
            raise Reject(400, "request body holds a lone surrogate escape (\\ud800-\\udfff): not valid Unicode") from None
        except ValueError:
            raise Reject(400, "request body holds a number that is not finite (NaN, Infinity, or past a float)") from None
        if not isinstance(body, dict):
            raise Reject(400, "request body must be a JSON object")
        return body

    async def _openai_chat(self, req: Request) -> tuple[int, Any]:
        body = self._json_body(req)
        images = self._check_messages(body)
        if body.get("stream"):
            raise Reject(400, "streaming is not supported by this gateway: set stream to false")
        check_fields(body)
        return await self._forward(self._prepare(body, images), "/v1/chat/completions")

    async def _simple_chat(self, req: Request) -> tuple[int, Any]:
        """Upstream FDE-Gym's `POST /chat`: {messages, max_tokens, temperature, json_mode} -> {text}."""
        body = self._json_body(req)
        images = self._check_messages(body)
        out: dict[str, Any] = {"messages": body["messages"]}
        try:
            out["max_tokens"] = int(body.get("max_tokens", 400))
            out["temperature"] = float(body.get("temperature", 0.0))
        except (TypeError, ValueError, OverflowError):
            raise Reject(400, "max_tokens and temperature must be finite numbers") from None
        if not math.isfinite(out["temperature"]):
            raise Reject(400, "max_tokens and temperature must be finite numbers")
        if body.get("json_mode"):
            out["response_format"] = {"type": "json_object"}
        status, payload = await self._forward(self._prepare(out, images), "/chat")
        if status != 200:
            return status, payload
        try:
            text = payload["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            text = ""
        return 200, {"text": text}

    # ------------------------------------------------------------------ reserve, forward, settle

    async def _forward(self, call: Call, endpoint: str) -> tuple[int, Any]:
        """Reserve, forward, settle. A refusal raises Refusal before anything goes upstream."""
        phase = self.phase
        reserved = self._reserve(phase, call)
        start = time.monotonic()
        try:
            reply = await self._post(call.body)
        except BaseException:  # cancelled (the gateway stopped) or a fault of ours: the cost is unknown
            self._settle(phase, call, reserved, None, endpoint, time.monotonic() - start)
            raise
        self._settle(phase, call, reserved, reply, endpoint, time.monotonic() - start)
        return reply.status, reply.payload
