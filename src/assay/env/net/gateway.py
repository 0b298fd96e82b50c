"""The company LLM gateway: the only way code in a workspace reaches a model, metered and capped.

An OpenAI-compatible HTTP/1.1 endpoint served on a Unix socket in the run directory (outside
the workspace), bound read-only into the sandbox at `/run/assay/`. Inside the sandbox a
forwarder (`assay.env.net.forwarder`) listens on the sandbox's own loopback and relays to the
socket, so `system/llm_client.py` and unmodified case code can use `http://127.0.0.1:PORT`.

Routes:

    POST /v1/chat/completions   OpenAI chat completions, non-streaming (also /chat/completions)
    POST /chat                  upstream FDE-Gym's simple protocol: {messages, max_tokens,
                                temperature, json_mode} -> {"text": ...}
    GET  /v1/models             the one model behind the gateway
    GET  /v1/budget, GET /chat  calls and dollars used and allowed in the current phase

Upstream: a raw pass-through (httpx) to an OpenAI-compatible `base_url`, not an assay
ModelClient. The request goes out as the client sent it (tools, tool_choice, response_format,
tool calls in the history, seed, stop, ...) and the provider's JSON comes back as it is, so
delivered code sees exactly what a real OpenAI-compatible endpoint gives; translating through
assay's Message/ModelReply would drop every field those models do not carry. The gateway
only pins the model (one fixed model sits behind it, as upstream), optionally clamps
`max_tokens` and the prompt size, refuses streaming, and injects the API key, which never
enters the sandbox.

Metering: every forwarded call counts against the current phase's budget (`dev` while the
agent works, `prod` while delivered code is graded; switch with `gateway.phase = "prod"`).
A call is counted when it is forwarded, whatever its outcome; its dollars are the reply's
usage priced with `prices.cost_usd` and the price given at construction. Once a phase has
used `max_calls` calls or `max_usd` dollars, further calls get HTTP 429 with
`{"error": {"message": "LLM budget exhausted ...", "type": "budget_exceeded"}}`. Calls already
in flight when the dollar cap is crossed finish (as upstream's gateway); the overshoot is
at most the in-flight calls. Every request (forwarded, refused, rejected) is a record in
`records` and a JSON line in `log_path`.

Upstream faults (connection errors, timeouts, 429, 5xx, a 200 that is not JSON) are retried
`upstream_retries` times, then answered 502 (504 for a timeout) with type `upstream_error`;
any other upstream 4xx is relayed with its own status and body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

import httpx

from assay.config import Config, settings
from assay.env.net.unixserver import shutdown
from assay.errors import InputError
from assay.llm.messages import Usage
from assay.llm.prices import Price, cost_usd
from assay.llm.resolve import resolve_model
from assay.task.model import Engagement

__all__ = ["Budget", "DEFAULT_BUDGETS", "GATEWAY_MODEL_ENV", "LLMGateway", "SOCKET_NAME", "Upstream",
           "gateway_model_spec", "resolve_upstream", "scenario_gateway"]

log = logging.getLogger(__name__)

SOCKET_NAME = "llm.sock"

MAX_HEADER_LINE = 64 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 32 * 1024 * 1024
IDLE_TIMEOUT_S = 120.0  # an idle keep-alive connection is closed after this
READ_TIMEOUT_S = 60.0  # headers and body of one request must arrive within this

# Upstream FDE-Gym's gateway caps (harness/llm_gateway.py); from_engagement applies them.
UPSTREAM_MAX_TOKENS_CAP = 800
UPSTREAM_MAX_INPUT_CHARS = 60_000


@dataclass(frozen=True)
class Budget:
    """Allowance of one phase; None means no cap on that measure."""

    max_calls: int | None = None
    max_usd: float | None = None


DEFAULT_BUDGETS: dict[str, Budget] = {"dev": Budget(300, 0.25), "prod": Budget(600, 0.30)}
"""FDE-Gym's defaults for engagement.json `dev_llm_calls`/`dev_llm_usd`/`prod_llm_calls`/`prod_llm_usd`."""


@dataclass
class _Totals:
    calls: int = 0  # forwarded upstream (whatever the outcome)
    usd: float = 0.0
    refused: int = 0  # budget refusals (429)
    rejected: int = 0  # malformed or oversized requests (4xx from the gateway itself)
    upstream_errors: int = 0  # forwarded calls that did not end in a 200
    input_tokens: int = 0  # non-cached prompt tokens
    cache_read_tokens: int = 0
    output_tokens: int = 0


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class _Reject(Exception):
    """A request answered with an error by the gateway itself (status, message, error type)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.close = close


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


def _usage_of(data: Any) -> Usage:
    """assay Usage from an OpenAI `usage` object (prompt_tokens include the cached ones)."""
    u = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(u, dict):
        return Usage()

    def num(v: Any) -> int:
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else 0

    details = u.get("prompt_tokens_details")
    cached = num(details.get("cached_tokens")) if isinstance(details, dict) else 0
    prompt = num(u.get("prompt_tokens"))
    return Usage(input_tokens=max(0, prompt - cached), cache_read_tokens=min(cached, prompt),
                 output_tokens=num(u.get("completion_tokens")))


def _content_chars(messages: list[Any]) -> int:
    n = 0
    for m in messages:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, str):
            n += len(c)
        elif isinstance(c, list):
            n += sum(len(p.get("text") or "") for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
    return n


class LLMGateway:
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
        timeout_s: float = 300.0,
        upstream_retries: int = 2,
        retry_base_delay: float = 0.5,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`upstream_url` is an OpenAI-compatible base URL ending in /v1; `model` the one model
        every request is sent to; `price` prices its usage (None: unknown, allowed only when
        no phase has a dollar cap). A phase missing from `budgets` is not capped. `api_key`
        defaults to $OPENAI_API_KEY; none at all sends no Authorization header (local servers).
        """
        self.upstream_url = upstream_url.rstrip("/")
        self.model = model
        self.price = price
        self.budgets: dict[str, Budget] = dict(DEFAULT_BUDGETS if budgets is None else budgets)
        if price is None and any(b.max_usd is not None for b in self.budgets.values()):
            raise ValueError(f"no price for {model!r}: a dollar budget cannot be enforced without one")
        self.phase = phase
        self.log_path = Path(log_path) if log_path is not None else None
        self.max_tokens_cap = max_tokens_cap
        self.max_input_chars = max_input_chars
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
        self.records: list[dict[str, Any]] = []
        self._totals: dict[str, _Totals] = {}
        self.socket_path: Path | None = None
        self._server: asyncio.base_events.Server | None = None
        self._http: httpx.AsyncClient | None = None
        self._log: IO[str] | None = None
        self._conns: set[asyncio.Task[Any]] = set()

    @classmethod
    def from_engagement(cls, engagement: Mapping[str, Any], upstream_url: str, model: str, *,
                        price: Price | None, **kw: Any) -> LLMGateway:
        """A gateway with an FDE-Gym engagement.json's budgets (defaults 300 / $0.25 dev,
        600 / $0.30 prod) and upstream's caps (max_tokens 800, 60,000 prompt characters)."""
        def get(key: str, default: float) -> Any:
            v = engagement.get(key)
            return default if v is None else v

        budgets = {"dev": Budget(int(get("dev_llm_calls", 300)), float(get("dev_llm_usd", 0.25))),
                   "prod": Budget(int(get("prod_llm_calls", 600)), float(get("prod_llm_usd", 0.30)))}
        kw.setdefault("max_tokens_cap", UPSTREAM_MAX_TOKENS_CAP)
        kw.setdefault("max_input_chars", UPSTREAM_MAX_INPUT_CHARS)
        return cls(upstream_url, model, price=price, budgets=budgets, **kw)

    # ------------------------------------------------------------------ accounting

    def _t(self, phase: str) -> _Totals:
        return self._totals.setdefault(phase, _Totals())

    def budget(self, phase: str | None = None) -> Budget:
        return self.budgets.get(phase or self.phase, Budget())

    def status(self) -> dict[str, Any]:
        """What the current phase has used and may use (GET /v1/budget, upstream's `budget()`).

        The phase's name is left out, here and in refusals: delivered code must not be able to
        tell grading from development by asking the gateway.
        """
        t, b = self._t(self.phase), self.budget()
        return {"model": self.model, "calls": t.calls, "max_calls": b.max_calls,
                "usd": round(t.usd, 6), "max_usd": b.max_usd}

    def summary(self) -> dict[str, Any]:
        """{calls, usd, refused, rejected, by_phase: {phase: totals}} over the gateway's life."""
        by_phase = {p: {**asdict(t), "usd": round(t.usd, 8)} for p, t in self._totals.items()}
        return {"calls": sum(t.calls for t in self._totals.values()),
                "usd": round(sum(t.usd for t in self._totals.values()), 8),
                "refused": sum(t.refused for t in self._totals.values()),
                "rejected": sum(t.rejected for t in self._totals.values()),
                "by_phase": by_phase}

    def _record(self, **rec: Any) -> None:
        rec = {"ts": round(time.time(), 3), "phase": self.phase, "model": self.model, **rec}
        self.records.append(rec)
        if self._log is not None:
            try:
                self._log.write(json.dumps(rec, ensure_ascii=False) + "\n")
                self._log.flush()
            except OSError:
                log.exception("cannot write the LLM gateway log %s", self.log_path)

    def _refusal(self) -> str | None:
        t, b = self._t(self.phase), self.budget()
        if b.max_calls is not None and t.calls >= b.max_calls:
            return f"LLM budget exhausted: {t.calls} of {b.max_calls} calls used"
        if b.max_usd is not None and t.usd >= b.max_usd:
            return f"LLM budget exhausted: ${t.usd:.4f} of ${b.max_usd:.2f} spent"
        return None

    # ------------------------------------------------------------------ lifecycle

    async def start(self, socket_path: str | Path) -> None:
        path = Path(socket_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o755)  # the sandbox uid must reach the socket through the read-only bind
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise FileExistsError(f"{path} exists and is not a socket")
            os.unlink(path)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600)
            self._log = os.fdopen(fd, "a", encoding="utf-8")
        self._http = httpx.AsyncClient(timeout=self._timeout, transport=self._transport,
                                       headers=self._headers)
        self._server = await asyncio.start_unix_server(self._serve, path=str(path), limit=MAX_HEADER_LINE)
        os.chmod(path, 0o666)
        self.socket_path = path

    async def stop(self) -> None:
        if self._server is not None:
            await shutdown(self._server, self._conns)
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
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            while True:
                try:
                    req = await self._read_request(reader, writer)
                except _Reject as r:
                    self._t(self.phase).rejected += 1
                    self._record(endpoint=None, status=r.status, error=r.message)
                    await self._send(writer, r.status, _error(r.message, r.kind), keep_alive=False)
                    return
                if req is None:
                    return
                status, payload, headers = await self._dispatch(req)
                if not await self._send(writer, status, payload, keep_alive=req.keep_alive, headers=headers):
                    return
                if not req.keep_alive:
                    return
        except asyncio.CancelledError:
            pass
        except Exception:  # one client never takes the gateway down
            log.exception("LLM gateway connection failed")
        finally:
            if task is not None:
                self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    # complexity: HTTP/1.1 request framing: each malformed case is refused where it is read
    async def _read_request(self, reader: asyncio.StreamReader,  # noqa: C901
                            writer: asyncio.StreamWriter) -> _Request | None:
        """The next request on the connection; None when the client is done (EOF, idle, gone)."""
        try:
            line = b""
            while not line.strip():
                line = await asyncio.wait_for(reader.readline(), IDLE_TIMEOUT_S)
                if not line:
                    return None
            parts = line.decode("latin-1").strip().split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
                raise _Reject(400, "malformed HTTP request line", close=True)
            method, target, version = parts
            headers: dict[str, str] = {}
            while True:
                h = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
                if not h:
                    return None
                if h in (b"\r\n", b"\n"):
                    break
                if len(headers) >= MAX_HEADERS:
                    raise _Reject(431, "too many request headers", close=True)
                name, sep, value = h.decode("latin-1").partition(":")
                if not sep or not name.strip() or name != name.strip():
                    raise _Reject(400, "malformed HTTP header line", close=True)
                headers[name.lower()] = value.strip()
            if "transfer-encoding" in headers:
                raise _Reject(411, "chunked request bodies are not supported: send Content-Length", close=True)
            raw_len = headers.get("content-length", "0")
            if not raw_len.isdigit():
                raise _Reject(400, "bad Content-Length", close=True)
            length = int(raw_len)
            if length > MAX_BODY_BYTES:
                raise _Reject(413, f"request body too large (max {MAX_BODY_BYTES} bytes)", close=True)
            if length and headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
            body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S) if length else b""
        except (ValueError, asyncio.LimitOverrunError):
            raise _Reject(431, "request header line too long", close=True) from None
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            return None
        conn = headers.get("connection", "").lower()
        keep = ("close" not in conn) if version == "HTTP/1.1" else ("keep-alive" in conn)
        path = target.split("?", 1)[0]
        if path.startswith(("http://", "https://")):  # absolute form
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        return _Request(method.upper(), path, headers, body, keep)

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

    async def _dispatch(self, req: _Request) -> tuple[int, Any, dict[str, str]]:
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
            return 404, _error(f"no route {req.method} {req.path}", "not_found_error"), {}
        handler = methods.get(req.method)
        if handler is None:
            return 405, _error(f"{req.method} not allowed on {path}", "invalid_request_error"), {
                "Allow": ", ".join(methods)}
        try:
            status, payload = await handler(req)
        except _Reject as r:
            self._t(self.phase).rejected += 1
            self._record(endpoint=path, status=r.status, error=r.message)
            return r.status, _error(r.message, r.kind), {}
        return status, payload, {}

    async def _models(self, req: _Request) -> tuple[int, Any]:
        return 200, {"object": "list", "data": [
            {"id": self.model, "object": "model", "created": 0, "owned_by": "assay-gateway"}]}

    async def _budget(self, req: _Request) -> tuple[int, Any]:
        return 200, self.status()

    @staticmethod
    def _json_body(req: _Request) -> dict[str, Any]:
        try:
            body = json.loads(req.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise _Reject(400, "request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise _Reject(400, "request body must be a JSON object")
        return body

    def _check_messages(self, body: dict[str, Any]) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Reject(400, "'messages' must be a non-empty array")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise _Reject(400, f"messages[{i}] must be an object with a string 'role'")
        if self.max_input_chars is not None and _content_chars(messages) > self.max_input_chars:
            raise _Reject(413, f"request too large (max {self.max_input_chars} characters of messages)")

    async def _openai_chat(self, req: _Request) -> tuple[int, Any]:
        body = self._json_body(req)
        self._check_messages(body)
        if body.get("stream"):
            raise _Reject(400, "streaming is not supported by this gateway: set stream to false")
        if "tools" in body and not isinstance(body["tools"], list):
            raise _Reject(400, "'tools' must be an array")
        return await self._forward(body, "/v1/chat/completions")

    async def _simple_chat(self, req: _Request) -> tuple[int, Any]:
        """Upstream FDE-Gym's `POST /chat`: {messages, max_tokens, temperature, json_mode} -> {text}."""
        body = self._json_body(req)
        self._check_messages(body)
        out: dict[str, Any] = {"messages": body["messages"]}
        try:
            out[self._max_tokens_key] = int(body.get("max_tokens", 400))
            out["temperature"] = float(body.get("temperature", 0.0))
        except (TypeError, ValueError):
            raise _Reject(400, "max_tokens and temperature must be numbers") from None
        if body.get("json_mode"):
            out["response_format"] = {"type": "json_object"}
        status, payload = await self._forward(out, "/chat")
        if status != 200:
            return status, payload
        try:
            text = payload["choices"][0]["message"].get("content") or ""
        except (KeyError, IndexError, TypeError, AttributeError):
            text = ""
        return 200, {"text": text}

    # ------------------------------------------------------------------ upstream

    async def _forward(self, body: dict[str, Any], endpoint: str) -> tuple[int, Any]:
        refusal = self._refusal()
        if refusal is not None:
            self._t(self.phase).refused += 1
            self._record(endpoint=endpoint, status=429, error=refusal)
            return 429, {"error": {"message": refusal, "type": "budget_exceeded", "param": None,
                                   "code": "budget_exceeded"}}
        phase = self.phase
        totals = self._t(phase)
        totals.calls += 1  # reserved now, so concurrent calls cannot exceed max_calls
        out = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        out["model"] = self.model
        cap = self.max_tokens_cap
        if cap is not None:
            keys: list[str] = [k for k in ("max_tokens", "max_completion_tokens") if k in out] or [self._max_tokens_key]
            for k in keys:
                v = out.get(k)
                if not (isinstance(v, int) and not isinstance(v, bool) and 0 < v <= cap):
                    out[k] = cap
        start = time.monotonic()
        status, payload, error = await self._post(out)
        usage = _usage_of(payload) if status == 200 else Usage()
        cost = cost_usd(usage, self.price) if status == 200 else 0.0
        totals.usd += cost or 0.0
        totals.input_tokens += usage.input_tokens
        totals.cache_read_tokens += usage.cache_read_tokens
        totals.output_tokens += usage.output_tokens
        if status != 200:
            totals.upstream_errors += 1
        rec: dict[str, Any] = {"endpoint": endpoint, "status": status, "input_tokens": usage.input_tokens,
                               "cache_read_tokens": usage.cache_read_tokens,
                               "output_tokens": usage.output_tokens,
                               "cost_usd": None if cost is None else round(cost, 10),
                               "duration_s": round(time.monotonic() - start, 4)}
        if error:
            rec["error"] = error
        self._record(phase=phase, **rec)
        return status, payload

    async def _post(self, body: dict[str, Any]) -> tuple[int, Any, str | None]:
        """(status, JSON payload, error text) of one upstream chat call, with retries."""
        assert self._http is not None, "gateway not started"
        url = self.upstream_url + "/chat/completions"
        attempt = 0
        while True:
            status, kind, reason = 502, "upstream_error", ""
            try:
                r = await self._http.post(url, json=body)
                if r.status_code == 200:
                    try:
                        data = r.json()
                        if isinstance(data, dict):
                            return 200, data, None
                        reason = "upstream reply is not a JSON object"
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        reason = "upstream reply is not JSON"
                elif r.status_code == 429 or r.status_code >= 500:
                    reason = f"upstream HTTP {r.status_code}: {r.text[:300]}"
                else:  # the provider refused the request itself: relay it as it is
                    try:
                        data = r.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        data = _error(r.text[:1000], "upstream_error")
                    return r.status_code, data, f"upstream HTTP {r.status_code}"
            except httpx.TimeoutException:
                status, reason = 504, "upstream timed out"
            except httpx.TransportError as exc:
                reason = f"upstream unreachable: {exc.__class__.__name__}: {exc}"
            if attempt >= self.upstream_retries:
                msg = f"model provider error: {reason}"
                return status, _error(msg, kind), msg
            await asyncio.sleep(self.retry_base_delay * (2**attempt))
            attempt += 1



# --------------------------------------------------------------------------- scenarios

GATEWAY_MODEL_ENV = "ASSAY_GATEWAY_MODEL"
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Upstream:
    """Where a scenario's gateway forwards: an OpenAI-compatible base URL, the model, its price."""

    spec: str
    url: str
    model: str
    api_key: str | None
    price: Price | None


def gateway_model_spec(options: Any = None) -> str | None:
    """The gateway's model spec: the campaign's `--gateway-model`, else $ASSAY_GATEWAY_MODEL."""
    spec = str(getattr(options, "gateway_model", None) or settings().gateway_model or "").strip()
    return spec or None


def resolve_upstream(spec: str, config: Config | None = None, *, field: str = "--gateway-model") -> Upstream:
    """`openai/MODEL` or an assay.toml alias of provider `openai` -> Upstream; InputError otherwise.

    The spec is resolved by the one resolver agents and judges use (`assay.llm.resolve`), so an
    alias has the same endpoint, key and price here as anywhere else. The gateway is a
    pass-through to an OpenAI-compatible endpoint, so an Anthropic model cannot sit behind it;
    a price is required (the engagement's budgets are in dollars).
    """
    resolved = resolve_model(spec, config, field=field, require_key=False)
    if resolved.provider != "openai":
        raise InputError(None, field, f"{spec!r} is a {resolved.provider} model: the company LLM gateway is an "
                                      "OpenAI-compatible pass-through, so it needs an OpenAI-compatible "
                                      "model (openai/MODEL or an alias with provider = \"openai\")")
    if resolved.price is None:
        where = f"[models.{spec}.prices]" if resolved.alias else f'[prices."{spec}"]'
        raise InputError(None, field, f"no price known for {spec!r}: the engagement's LLM budgets are in "
                                      f"dollars; give its prices in assay.toml ({where})")
    resolve_model(spec, config, field=field)  # the key (or a local endpoint), as for agents
    return Upstream(spec=spec, url=resolved.endpoint() or DEFAULT_OPENAI_URL, model=resolved.model,
                    api_key=resolved.key(), price=resolved.price)


_RESOLVED: dict[str, Upstream] = {}


def scenario_gateway(engagement: Engagement, spec: str, *, phase: str,
                     log_path: str | Path | None = None) -> LLMGateway:
    """A gateway with the engagement's budgets and upstream's caps, forwarding to `spec`."""
    up = _RESOLVED.get(spec)
    if up is None:
        up = _RESOLVED[spec] = resolve_upstream(spec)
    return LLMGateway.from_engagement(engagement.budgets, up.url, up.model, price=up.price, api_key=up.api_key,
                                      phase=phase, log_path=log_path)
