"""The pass-through to the provider: one upstream chat call, retried where nothing is billed.

Upstream: a raw pass-through (httpx) to an OpenAI-compatible `base_url`, not an assay
ModelClient. The request goes out as the client sent it (tools, tool_choice, response_format,
tool calls in the history, seed, stop, ...), within the budget rules (`rules`), and the
provider's JSON comes back as it is, so delivered code sees exactly what a real
OpenAI-compatible endpoint gives; translating through assay's Message/ModelReply would drop
every field those models do not carry. The gateway pins the model (one fixed model sits
behind it, as upstream), refuses streaming, and injects the API key, which never enters the
sandbox.

Faults after which providers bill nothing (no connection, 429, 5xx) are retried within the
call's one reservation; any other upstream 4xx is relayed with its own status and body, at
no cost. A call whose cost cannot be known (timed out or cut off after it was sent, or a 200
that is not a JSON object) is not retried (a retry could be billed again) and says so
(`Reply.cost_unknown`). Upstream faults are answered 502 (504 for a timeout) with type
`upstream_error`.

A rate limit (429) that lasts past the retries is the caller's own doing when the calls that
went to the same upstream in the last `RATE_WINDOW_S` seconds were mostly this gateway's
(`OWN_SHARE` of their estimated tokens or more, counted over every gateway of this process):
the delivered system's burst passed the provider's limit, as it would in production. It is
answered as the provider answers, 429 `rate_limit_error` (`Reply.own_rate_limit`), which the
system sees and a grade scores, not 502: a 502 "model provider error" is the harness's trouble
(the grade retried, then void). A rate limit met while most of the traffic was other runs',
and every 5xx, connection failure or timeout, stay 502/504. Traffic of other processes that
share the key is not seen: a provider limited by it while this run was its only user here is
taken as this run's.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from assay.env.net.gateway.rules import error_body

__all__ = ["OWN_SHARE", "RATE_WINDOW_S", "Reply", "UpstreamClient"]

RATE_WINDOW_S = 60.0
"""The window providers count rate limits over (tokens and requests per minute)."""
OWN_SHARE = 0.5
"""The share of an upstream's recent traffic from which a rate limit is the caller's own doing."""


class _Sent:
    """What every gateway of this process sent to each upstream lately: (when, gateway, tokens)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_url: dict[str, deque[tuple[float, int, int]]] = {}

    def add(self, url: str, who: int, tokens: int) -> None:
        now = time.monotonic()
        with self._lock:
            q = self._by_url.setdefault(url, deque())
            q.append((now, who, tokens))
            while q and now - q[0][0] > RATE_WINDOW_S:
                q.popleft()

    def share(self, url: str, who: int) -> tuple[float, int, int]:
        """(who's share of the upstream's estimated tokens in the window, its calls, its tokens)."""
        now = time.monotonic()
        with self._lock:
            recent = [(w, n) for t, w, n in self._by_url.get(url, ()) if now - t <= RATE_WINDOW_S]
        own = [n for w, n in recent if w == who]
        total = sum(n for _w, n in recent)
        return (sum(own) / total if total else 0.0), len(own), sum(own)


SENT = _Sent()


def _tokens(body: dict[str, Any]) -> int:
    """A call's estimated tokens as providers count them against a limit: its request (about
    four characters a token) and the reply it may get (`max_tokens`)."""
    try:
        reply = int(body.get("max_tokens") or 0)
    except (TypeError, ValueError):
        reply = 0
    return len(json.dumps(body, ensure_ascii=False, default=str)) // 4 + max(0, reply)


@dataclass(frozen=True)
class Reply:
    status: int
    payload: Any
    error: str | None = None
    cost_unknown: bool = False  # a fault after which the provider may have billed the call
    own_rate_limit: bool = False  # a 429 that this gateway's own calls caused (answered 429, not 502)


class UpstreamClient:
    """The gateway's upstream calls (a part of `LLMGateway`)."""

    upstream_url: str
    upstream_retries: int
    retry_base_delay: float
    _http: httpx.AsyncClient | None

    def _fault(self, status: int, reason: str, *, cost_unknown: bool) -> Reply:
        msg = f"model provider error: {reason}"
        return Reply(status, error_body(msg, "upstream_error"), msg, cost_unknown)

    async def _post(self, body: dict[str, Any]) -> Reply:
        """One upstream chat call, retried after faults that bill nothing."""
        assert self._http is not None, "gateway not started"
        url = self.upstream_url + "/chat/completions"
        try:  # what httpx would fail to encode: nothing is sent, nothing billed
            json.dumps(body, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return Reply(400, error_body(f"the request cannot be sent as JSON: {exc}"[:300], "invalid_request_error"),
                         "request not encodable", False)
        tokens = _tokens(body)
        attempt = 0
        while True:
            SENT.add(self.upstream_url, id(self), tokens)
            limited = False
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
                        return Reply(200, data)
                    return self._fault(502, "upstream reply is not a JSON object", cost_unknown=True)
                if r.status_code != 429 and r.status_code < 500:  # the provider refused the request itself
                    try:
                        data = r.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        data = error_body(r.text[:1000], "upstream_error")
                    return Reply(r.status_code, data, f"upstream HTTP {r.status_code}")
                reason = f"upstream HTTP {r.status_code}: {r.text[:300]}"
                limited = r.status_code == 429
            if attempt >= self.upstream_retries:
                if limited:
                    share, calls, own = SENT.share(self.upstream_url, id(self))
                    if share >= OWN_SHARE:
                        msg = (f"model provider rate limit: this system's own calls ({calls} calls, about {own:,} "
                               f"tokens in {RATE_WINDOW_S:.0f} s, {share:.0%} of the provider's recent traffic "
                               f"here) passed the provider's limit: {reason}")
                        return Reply(429, error_body(msg, "rate_limit_error", "rate_limit_exceeded"), msg,
                                     own_rate_limit=True)
                return self._fault(502, reason, cost_unknown=False)
            await asyncio.sleep(self.retry_base_delay * (2**attempt))
            attempt += 1
