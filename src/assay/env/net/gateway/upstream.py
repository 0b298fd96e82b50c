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
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import httpx

from assay.env.net.gateway.rules import error_body

__all__ = ["Reply", "UpstreamClient"]


@dataclass(frozen=True)
class Reply:
    status: int
    payload: Any
    error: str | None = None
    cost_unknown: bool = False  # a fault after which the provider may have billed the call


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
                        return Reply(200, data)
                    return self._fault(502, "upstream reply is not a JSON object", cost_unknown=True)
                if r.status_code != 429 and r.status_code < 500:  # the provider refused the request itself
                    try:
                        data = r.json()
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        data = error_body(r.text[:1000], "upstream_error")
                    return Reply(r.status_code, data, f"upstream HTTP {r.status_code}")
                reason = f"upstream HTTP {r.status_code}: {r.text[:300]}"
            if attempt >= self.upstream_retries:
                return self._fault(502, reason, cost_unknown=False)
            await asyncio.sleep(self.retry_base_delay * (2**attempt))
            attempt += 1
