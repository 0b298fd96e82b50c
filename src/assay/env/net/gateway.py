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
tool calls in the history, seed, stop, ...), within the budget rules below, and the
provider's JSON comes back as it is, so delivered code sees exactly what a real
OpenAI-compatible endpoint gives; translating through assay's Message/ModelReply would drop
every field those models do not carry. The gateway pins the model (one fixed model sits
behind it, as upstream), refuses streaming, and injects the API key, which never enters the
sandbox.

The budget. Every phase (`dev` while the agent works, `prod` while delivered code is graded;
switch with `gateway.phase = "prod"`) has an allowance of calls and dollars (`Budget`). The
code spending it runs in the sandbox and is not trusted, so the gateway enforces it on what
it forwards, not on what the client says:

- One completion per call: `n` is forced to 1 and `best_of` is removed (`forced` in the
  call's record names what was changed).
- Only fields whose cost the price table covers go upstream: the OpenAI Chat Completions
  request fields in `FORWARDED_FIELDS` (with the samplers compatible servers add). Refused
  with 400, code `unsupported_parameter`, before any upstream call: `audio` and `modalities`
  other than text (audio tokens), `web_search_options` (billed per search), a `service_tier`
  other than `auto`/`default` (the price table is the standard tier's), content parts other
  than `text`, `image_url` and `refusal` (audio and file parts), a message's `audio`
  reference, tools other than `function`/`custom`, and every field not in the list (a
  provider's own fields, such as OpenRouter's `models` or `plugins`, can change the model or
  bill extra).
- Output: the gateway sends its own bound, `max_tokens` (`max_completion_tokens` to
  api.openai.com) = the client's `max_tokens`/`max_completion_tokens` (the larger, if both),
  at most `max_tokens_cap`, and the cap when the client gave none or a bad value. A phase with
  a dollar cap needs `max_tokens_cap` (an unbounded reply cannot be reserved).
- Input: the whole request counts against `max_input_chars`: the characters of the compact
  JSON of everything forwarded except the model name (messages with their names, tool calls
  and image parts, tools, response_format, prediction, stop, ...). A larger request is
  refused with 413, type `request_too_large`, before any upstream call.
- Reserve, then settle. Before a call is forwarded, its upper-bound cost (`reserved_usd`) is
  priced with `prices.cost_usd` and the gateway's one price, from
      input tokens  <= UTF-8 bytes of that JSON + REQUEST_OVERHEAD_TOKENS
                       + `image_input_tokens` per image part (every input token priced at the
                       dearer of the input and cached-input prices)
      output tokens <= the max_tokens sent + the UTF-8 bytes of `prediction` (rejected
                       prediction tokens are billed as output)
  (a text token is at least one byte; an image's tokens do not depend on its bytes, so it gets
  an allowance, by default OpenAI's dearest image, gpt-4o-mini's 48,169 tokens). A call is
  admitted only if the phase's calls so far (in flight included) are under `max_calls` and
  spent + reserved by calls in flight + its own bound <= `max_usd`; otherwise it gets 429
  `budget_exceeded` and nothing goes upstream. An admitted call counts as a call whatever
  its outcome. The check and the reservation run with no
  await between them on the gateway's one event loop, so no other request can be admitted in
  between (the event loop is the lock). When the call ends its reservation is released and it
  is settled at its actual cost, the reply's usage. A call whose cost cannot be known is
  settled at its reservation and not retried (a retry could be billed again): cancelled in
  flight (the gateway stopped), timed out or cut off after it was sent, or a 200 that is not a
  JSON object. Faults after which providers bill nothing (no connection, 429, 5xx) are
  retried within the call's one reservation; any other upstream 4xx is relayed with its own
  status and body, at no cost.

  The bound: after every admission, spent + reserved <= max_usd; settling replaces a
  reservation by the call's cost, which is at most the reservation unless the provider bills
  past the bounds above (more input tokens than bytes, an image dearer than the allowance),
  and such an excess is recorded (`excess_usd`) and logged. So a phase's spend never passes
  `max_usd` + the sum of the recorded excesses, however many calls run at once, and it admits
  at most `max_calls` calls. A smaller call may be admitted after a larger one was refused.

Every request (forwarded, refused for the budget, rejected as malformed, oversized or
unsupported) is a `GatewayRecord` in `records` and a JSON line in `log_path`. Upstream
faults are answered 502 (504 for a timeout) with type `upstream_error`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlparse

import httpx
from pydantic import BaseModel, Field

from assay.config import Config, settings
from assay.env.net.unixserver import Connections, listen_unix
from assay.errors import InputError
from assay.llm.prices import Price, cost_usd
from assay.llm.resolve import resolve_model
from assay.record import Usage
from assay.task.model import Engagement

__all__ = ["Budget", "DEFAULT_BUDGETS", "FORWARDED_FIELDS", "GATEWAY_MODEL_ENV", "GatewayRecord", "LLMGateway",
           "PhaseTotals", "SOCKET_NAME", "Upstream", "gateway_model_spec", "resolve_upstream", "scenario_gateway"]

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

# Upstream FDE-Gym's gateway caps (harness/llm_gateway.py); from_engagement applies them.
UPSTREAM_MAX_TOKENS_CAP = 800
UPSTREAM_MAX_INPUT_CHARS = 60_000

# Input tokens a provider may bill beyond the request's own bytes: the chat template's role
# and turn markers, the rendered tool and schema preambles. Generous on purpose.
REQUEST_OVERHEAD_TOKENS = 256
# Tokens reserved per image part: OpenAI's dearest image, a high-detail 2048x768 picture on
# gpt-4o-mini (2,833 + 8 tiles x 5,667 = 48,169 tokens), rounded up.
IMAGE_INPUT_TOKENS = 50_000

# OpenAI Chat Completions request fields forwarded as the client sent them, and the samplers
# that compatible servers (vLLM, llama.cpp) add. None of them bills anything but tokens.
FORWARDED_FIELDS: frozenset[str] = frozenset({
    "messages", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs", "metadata",
    "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_retention",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "stop", "store", "temperature",
    "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
    "top_k", "min_p", "repetition_penalty",
})
_MAX_TOKENS_KEYS = ("max_tokens", "max_completion_tokens")
# Set, checked or removed by the gateway itself.
_GATEWAY_FIELDS = frozenset({"model", "n", "best_of", "stream", "stream_options", "modalities", "service_tier",
                             *_MAX_TOKENS_KEYS})
_UNPRICED = {"audio": "audio output is priced apart from the model's tokens",
             "web_search_options": "web search is billed per call, apart from the model's tokens"}
_SERVICE_TIERS = ("auto", "default")  # the price table is the standard tier's
_PART_TYPES = ("text", "image_url", "refusal")
_TOOL_TYPES = ("function", "custom")


@dataclass(frozen=True)
class Budget:
    """Allowance of one phase; None means no cap on that measure."""

    max_calls: int | None = None
    max_usd: float | None = None


DEFAULT_BUDGETS: dict[str, Budget] = {"dev": Budget(300, 0.25), "prod": Budget(600, 0.30)}
"""FDE-Gym's defaults for engagement.json `dev_llm_calls`/`dev_llm_usd`/`prod_llm_calls`/`prod_llm_usd`."""


class PhaseTotals(BaseModel):
    """What one phase used (`summary()["by_phase"]`, reported on the run as `grade.llm.by_phase`)."""

    calls: int = 0  # admitted and forwarded upstream (whatever the outcome)
    usd: float = 0.0  # settled: the replies' usage, or the reservation of a call whose cost is unknown
    refused: int = 0  # budget refusals (429)
    rejected: int = 0  # malformed, oversized or unsupported requests (4xx from the gateway itself)
    upstream_errors: int = 0  # forwarded calls that did not end in a 200
    input_tokens: int = 0  # non-cached prompt tokens
    cache_read_tokens: int = 0
    output_tokens: int = 0


class GatewayRecord(BaseModel):
    """One request to the gateway: an element of `records`, a JSON line of the log."""

    schema_version: int = 1
    ts: float
    phase: str
    model: str
    endpoint: str | None
    status: int
    outcome: Literal["forwarded", "refused", "rejected"]
    error: str | None = None
    error_type: str | None = None
    request_chars: int | None = None  # counted against the input cap
    forced: list[str] = Field(default_factory=list)  # request fields the gateway changed or removed
    reserved_usd: float | None = None  # the call's upper-bound cost, reserved before forwarding
    cost_usd: float | None = None  # what the call was settled at (None: no price)
    cost_basis: Literal["usage", "reserved"] | None = None  # the reply's usage, or the reservation (cost unknown)
    excess_usd: float | None = None  # settled cost above the reservation: the provider billed past the bound
    input_tokens: int = 0
    cache_read_tokens: int = 0
    output_tokens: int = 0
    duration_s: float | None = None


@dataclass
class _Phase:
    totals: PhaseTotals = field(default_factory=PhaseTotals)
    reserved_usd: float = 0.0  # held by the calls in flight
    in_flight: int = 0


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    held: int = 0  # bytes of MAX_BUFFERED_BYTES this request holds until it is answered


@dataclass(frozen=True)
class _Call:
    """A request made ready to go upstream, and the bound of what it can be billed."""

    body: dict[str, Any]
    chars: int
    bound: Usage | None  # None: the output is not bounded (no max_tokens cap)
    forced: tuple[str, ...]


@dataclass(frozen=True)
class _Reply:
    status: int
    payload: Any
    error: str | None = None
    cost_unknown: bool = False  # a fault after which the provider may have billed the call


class _Reject(Exception):
    """A request answered with an error by the gateway itself (status, message, error type)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 close: bool = False, code: str | None = None, chars: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code or kind
        self.close = close
        self.chars = chars


class _Refusal(_Reject):
    """A call the phase's budget cannot take (429 budget_exceeded)."""

    def __init__(self, message: str, chars: int | None = None) -> None:
        super().__init__(429, message, "budget_exceeded", chars=chars)


def _unsupported(message: str) -> _Reject:
    return _Reject(400, message, "invalid_request_error", code="unsupported_parameter")


def _error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}


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


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _check_fields(body: dict[str, Any]) -> None:
    """Refuse the fields whose cost the price table cannot cover (see the module docstring)."""
    for key, why in _UNPRICED.items():
        if key in body:
            raise _unsupported(f"'{key}' is not supported by this gateway: {why}")
    unknown = sorted(k for k in body if k not in FORWARDED_FIELDS and k not in _GATEWAY_FIELDS)
    if unknown:
        raise _unsupported(f"unsupported request field(s) {', '.join(map(repr, unknown))}: this gateway "
                           "forwards the OpenAI chat completions fields only")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise _unsupported("'modalities' must be [\"text\"]: this gateway serves text only")
    tier = body.get("service_tier")
    if tier is not None and tier not in _SERVICE_TIERS:
        raise _unsupported(f"'service_tier' {tier!r} is not supported: use 'auto' or 'default'")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _Reject(400, "'tools' must be an array")
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or t.get("type") not in _TOOL_TYPES:
                raise _unsupported(f"tools[{i}]: only 'function' and 'custom' tools are supported")


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
        self._phases: dict[str, _Phase] = {}
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

    # ------------------------------------------------------------------ accounting

    def _p(self, phase: str) -> _Phase:
        return self._phases.setdefault(phase, _Phase())

    def _t(self, phase: str) -> PhaseTotals:
        return self._p(phase).totals

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
        """{calls, usd, refused, rejected, by_phase: {phase: PhaseTotals}} over the gateway's life."""
        totals = [p.totals for p in self._phases.values()]
        by_phase = {name: {**p.totals.model_dump(), "usd": round(p.totals.usd, 8)} for name, p in self._phases.items()}
        return {"calls": sum(t.calls for t in totals),
                "usd": round(sum(t.usd for t in totals), 8),
                "refused": sum(t.refused for t in totals),
                "rejected": sum(t.rejected for t in totals),
                "by_phase": by_phase}

    def _record(self, rec: GatewayRecord) -> None:
        self.records.append(rec)
        if self._log is not None:
            try:
                self._log.write(rec.model_dump_json(exclude_none=True) + "\n")
                self._log.flush()
            except OSError:
                log.exception("cannot write the LLM gateway log %s", self.log_path)

    def _new_record(self, phase: str, endpoint: str | None, status: int,
                    outcome: Literal["forwarded", "refused", "rejected"], **fields: Any) -> GatewayRecord:
        return GatewayRecord(ts=round(time.time(), 3), phase=phase, model=self.model, endpoint=endpoint,
                             status=status, outcome=outcome, **fields)

    def _refuse(self, phase: str, endpoint: str | None, r: _Reject) -> None:
        """Count and record a request the gateway answered itself (a refusal or a rejection)."""
        refused = isinstance(r, _Refusal)
        t = self._t(phase)
        if refused:
            t.refused += 1
        else:
            t.rejected += 1
        self._record(self._new_record(phase, endpoint, r.status, "refused" if refused else "rejected",
                                      error=r.message, error_type=r.code, request_chars=r.chars))

    def _bound_usd(self, call: _Call) -> float | None:
        """The most `call` can cost (None: unbounded, or no price)."""
        if call.bound is None or self.price is None:
            return None
        as_cached = Usage(cache_read_tokens=call.bound.input_tokens, output_tokens=call.bound.output_tokens)
        costs = [cost_usd(call.bound, self.price), cost_usd(as_cached, self.price)]
        return max(c for c in costs if c is not None)

    def _reserve(self, phase: str, call: _Call) -> float | None:
        """Admit `call` against the phase's caps and reserve its bound (returned; None: the call
        has none, which only a phase without a dollar cap admits), or raise _Refusal.

        No await in here: on the gateway's one event loop no other request is admitted between
        this check and this reservation.
        """
        p, b = self._p(phase), self.budget(phase)
        t = p.totals
        if b.max_calls is not None and t.calls >= b.max_calls:
            raise _Refusal(f"LLM budget exhausted: {t.calls} of {b.max_calls} calls used", call.chars)
        bound = self._bound_usd(call)
        if b.max_usd is not None:
            if bound is None:
                raise _Refusal("LLM budget exhausted: the cost of this call has no bound", call.chars)
            if t.usd >= b.max_usd:
                raise _Refusal(f"LLM budget exhausted: ${t.usd:.4f} of ${b.max_usd:.2f} spent", call.chars)
            if t.usd + p.reserved_usd + bound > b.max_usd:
                raise _Refusal(f"LLM budget exhausted: ${t.usd:.4f} spent and ${p.reserved_usd:.4f} held by calls "
                               f"in flight, of ${b.max_usd:.2f}; this call may cost up to ${bound:.4f}",
                               call.chars)
        t.calls += 1
        p.in_flight += 1
        p.reserved_usd += bound or 0.0
        return bound

    def _settle(self, phase: str, call: _Call, reserved: float | None, reply: _Reply | None, endpoint: str,
                seconds: float) -> None:
        """Release the call's reservation and count what it cost; record it."""
        p = self._p(phase)
        t = p.totals
        p.in_flight -= 1
        p.reserved_usd = p.reserved_usd - (reserved or 0.0) if p.in_flight > 0 else 0.0  # no residue once idle
        usage = _usage_of(reply.payload) if reply is not None and reply.status == 200 else Usage()
        basis: Literal["usage", "reserved"] | None = None
        cost: float | None = 0.0
        if reply is None or reply.cost_unknown:  # cancelled, or cut off after it was sent: maybe billed
            cost, basis = reserved, ("reserved" if reserved is not None else None)
        elif reply.status == 200:
            cost, basis = cost_usd(usage, self.price), "usage"
        t.usd += cost or 0.0
        t.input_tokens += usage.input_tokens
        t.cache_read_tokens += usage.cache_read_tokens
        t.output_tokens += usage.output_tokens
        status = reply.status if reply is not None else 499
        if status != 200:
            t.upstream_errors += 1
        excess = cost - reserved if cost is not None and reserved is not None and cost > reserved + 1e-12 else None
        if excess is not None:
            log.warning("LLM gateway: a %s call cost $%.6f, $%.6f more than its reservation (usage %s)",
                        phase, cost, excess, usage.model_dump())
        error = reply.error if reply is not None else "cancelled before the reply came (the gateway stopped)"
        self._record(self._new_record(
            phase, endpoint, status, "forwarded", error=error, error_type=None if error is None else "upstream_error",
            request_chars=call.chars, forced=list(call.forced),
            reserved_usd=None if reserved is None else round(reserved, 10),
            cost_usd=None if cost is None else round(cost, 10), cost_basis=basis,
            excess_usd=None if excess is None else round(excess, 10), input_tokens=usage.input_tokens,
            cache_read_tokens=usage.cache_read_tokens, output_tokens=usage.output_tokens,
            duration_s=round(seconds, 4)))

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
                except _Reject as r:
                    self._refuse(self.phase, None, r)
                    await self._send(writer, r.status, _error(r.message, r.kind, r.code), keep_alive=False)
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
                            writer: asyncio.StreamWriter) -> _Request | None:
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
                raise _Reject(413, f"request body too large (max {MAX_BODY_BYTES} bytes)", "request_too_large",
                              close=True)
            if length and self._buffered + length > MAX_BUFFERED_BYTES:
                raise _Reject(503, "the gateway is busy: too much request data in flight; retry shortly",
                              "server_busy", close=True)
            self._buffered += length
            held = length
            if length and headers.get("expect", "").lower() == "100-continue":
                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                await writer.drain()
            body = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S) if length else b""
        except (ValueError, asyncio.LimitOverrunError):
            self._buffered -= held
            raise _Reject(431, "request header line too long", close=True) from None
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            self._buffered -= held
            return None
        conn = headers.get("connection", "").lower()
        keep = ("close" not in conn) if version == "HTTP/1.1" else ("keep-alive" in conn)
        path = target.split("?", 1)[0]
        if path.startswith(("http://", "https://")):  # absolute form
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        return _Request(method.upper(), path, headers, body, keep, held)

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
        phase = self.phase
        try:
            status, payload = await handler(req)
        except _Reject as r:
            self._refuse(phase, path, r)
            return r.status, _error(r.message, r.kind, r.code), {}
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

    @staticmethod
    def _check_messages(body: dict[str, Any]) -> int:
        """Refuse malformed messages and unpriced parts; the number of image parts."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Reject(400, "'messages' must be a non-empty array")
        images = 0
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise _Reject(400, f"messages[{i}] must be an object with a string 'role'")
            if "audio" in m:
                raise _unsupported(f"messages[{i}].audio is not supported by this gateway: audio is priced apart "
                                   "from the model's tokens")
            content = m.get("content")
            for j, part in enumerate(content if isinstance(content, list) else []):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in _PART_TYPES:
                    raise _unsupported(f"messages[{i}].content[{j}]: content parts of type {kind!r} are not "
                                       "supported by this gateway (text, image_url and refusal are)")
                images += kind == "image_url"
        return images

    async def _openai_chat(self, req: _Request) -> tuple[int, Any]:
        body = self._json_body(req)
        images = self._check_messages(body)
        if body.get("stream"):
            raise _Reject(400, "streaming is not supported by this gateway: set stream to false")
        _check_fields(body)
        return await self._forward(self._prepare(body, images), "/v1/chat/completions")

    async def _simple_chat(self, req: _Request) -> tuple[int, Any]:
        """Upstream FDE-Gym's `POST /chat`: {messages, max_tokens, temperature, json_mode} -> {text}."""
        body = self._json_body(req)
        images = self._check_messages(body)
        out: dict[str, Any] = {"messages": body["messages"]}
        try:
            out["max_tokens"] = int(body.get("max_tokens", 400))
            out["temperature"] = float(body.get("temperature", 0.0))
        except (TypeError, ValueError):
            raise _Reject(400, "max_tokens and temperature must be numbers") from None
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

    # ------------------------------------------------------------------ the budget rules

    def _output_tokens(self, body: dict[str, Any], out: dict[str, Any], forced: list[str]) -> int | None:
        """Put the gateway's output bound into `out`; the bound (None: none, no cap is set)."""
        asked = {k: body[k] for k in _MAX_TOKENS_KEYS if k in body}
        cap = self.max_tokens_cap
        if cap is None:  # no cap (and so no dollar budget): forwarded as sent
            out.update(asked)
            vals = list(asked.values())
            return max(vals) if vals and all(_positive_int(v) for v in vals) else None
        good = [v for v in asked.values() if _positive_int(v)]
        bound = min(max(good), cap) if good else cap
        out[self._max_tokens_key] = bound
        if any(out.get(k) != v for k, v in asked.items()):  # clamped, renamed, or one of two dropped
            forced.append("max_tokens")
        return bound

    def _prepare(self, body: dict[str, Any], images: int) -> _Call:
        """The request that goes upstream, its size against the input cap and its billing bound."""
        forced: list[str] = []
        out: dict[str, Any] = {"model": self.model}
        out.update((k, v) for k, v in body.items() if k in FORWARDED_FIELDS or k in ("modalities", "service_tier"))
        if "n" in body:
            out["n"] = 1
            if body["n"] != 1:
                forced.append("n")
        if "best_of" in body:
            forced.append("best_of")
        output = self._output_tokens(body, out, forced)
        text = _compact({k: v for k, v in out.items() if k != "model"})
        chars = len(text)
        if self.max_input_chars is not None and chars > self.max_input_chars:
            raise _Reject(413, f"request too large: {chars} characters (the JSON of every field but the model); "
                               f"the limit is {self.max_input_chars}", "request_too_large", chars=chars)
        bound: Usage | None = None
        if output is not None:
            predicted = len(_compact(out["prediction"]).encode("utf-8")) if "prediction" in out else 0
            bound = Usage(input_tokens=len(text.encode("utf-8")) + REQUEST_OVERHEAD_TOKENS
                          + images * self.image_input_tokens, output_tokens=output + predicted)
        return _Call(body=out, chars=chars, bound=bound, forced=tuple(forced))

    # ------------------------------------------------------------------ upstream

    async def _forward(self, call: _Call, endpoint: str) -> tuple[int, Any]:
        """Reserve, forward, settle. A refusal raises _Refusal before anything goes upstream."""
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

    def _fault(self, status: int, reason: str, *, cost_unknown: bool) -> _Reply:
        msg = f"model provider error: {reason}"
        return _Reply(status, _error(msg, "upstream_error"), msg, cost_unknown)

    async def _post(self, body: dict[str, Any]) -> _Reply:
        """One upstream chat call, retried after faults that bill nothing."""
        assert self._http is not None, "gateway not started"
        url = self.upstream_url + "/chat/completions"
        attempt = 0
        while True:
            try:
                r = await self._http.post(url, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:  # nothing was sent
                reason = f"upstream unreachable: {exc.__class__.__name__}: {exc}"
            except httpx.TimeoutException:
                return self._fault(504, "upstream timed out", cost_unknown=True)
            except httpx.RequestError as exc:  # sent, maybe answered in part
                return self._fault(502, f"upstream connection failed: {exc.__class__.__name__}: {exc}",
                                   cost_unknown=True)
            else:
                if r.status_code == 200:
                    try:
                        data = r.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        data = None
                    if isinstance(data, dict):
                        return _Reply(200, data)
                    return self._fault(502, "upstream reply is not a JSON object", cost_unknown=True)
                if r.status_code != 429 and r.status_code < 500:  # the provider refused the request itself
                    try:
                        data = r.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        data = _error(r.text[:1000], "upstream_error")
                    return _Reply(r.status_code, data, f"upstream HTTP {r.status_code}")
                reason = f"upstream HTTP {r.status_code}: {r.text[:300]}"
            if attempt >= self.upstream_retries:
                return self._fault(502, reason, cost_unknown=False)
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


def resolve_upstream(spec: str, config: Config | None = None, *, field: str = "--gateway-model",
                     require_key: bool = True) -> Upstream:
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
    if require_key:
        resolve_model(spec, config, field=field)  # the key (or a local endpoint), as for agents
    return Upstream(spec=spec, url=resolved.endpoint() or DEFAULT_OPENAI_URL, model=resolved.model,
                    api_key=resolved.key(), price=resolved.price)


_RESOLVED: dict[tuple[str, str, int], Upstream] = {}


def _resolved_key(spec: str) -> tuple[str, str, int]:
    """What an upstream is resolved from: the spec, and which assay.toml as it is now (another
    folder's, or the file changed, resolves again, in a process that runs many campaigns)."""
    path = settings().config.resolve()
    try:
        changed = path.stat().st_mtime_ns
    except OSError:  # no assay.toml: the spec alone (openai/MODEL) decides
        changed = 0
    return spec, str(path), changed


def scenario_gateway(engagement: Engagement, spec: str, *, phase: str,
                     log_path: str | Path | None = None) -> LLMGateway:
    """A gateway with the engagement's budgets and upstream's caps, forwarding to `spec`."""
    key = _resolved_key(spec)
    up = _RESOLVED.get(key)
    if up is None:
        up = _RESOLVED[key] = resolve_upstream(spec)
    return LLMGateway.from_engagement(engagement.budgets, up.url, up.model, price=up.price, api_key=up.api_key,
                                      phase=phase, log_path=log_path)
