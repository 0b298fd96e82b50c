"""The `demowire` provider: a model behind its own small JSON protocol (neither OpenAI's nor
Anthropic's), to show what a provider plugin provides.

Wire format: `POST {base_url}/turn` with a JSON body

    {"model": str, "messages": [{"role", "content", "tool_calls": [{"id", "name", "arguments"}],
     "tool_call_id"}], "tools": [{"name", "description", "parameters"}], "max_tokens", "temperature"}

answered by `{"text": str, "calls": [{"id", "name", "arguments": {...}}], "usage": {"in": int,
"out": int}, "stop": str}`. The key (DEMOWIRE_API_KEY) goes in `Authorization: Bearer`.

The client raises one exception of its own, DemoWireError, and the provider's classifier says
which of those are worth a retry: that is all assay's retry loop needs.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
from typing import Any

from assay.llm.clients.base import Fault, MalformedReply, ModelClient, make_tool_call
from assay.llm.messages import Message, ModelReply, ToolSpec, Usage
from assay.llm.providers import Provider


class DemoWireError(Exception):
    """A request to a demowire server failed: an HTTP status (None: no answer at all)."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason, self.status = reason, status


def classify(exc: BaseException) -> Fault | None:
    """The demowire provider's faults: its own errors only (any other exception is not its)."""
    if not isinstance(exc, DemoWireError):
        return None
    status = exc.status
    retriable = status is None or status == 429 or status >= 500
    return Fault(retriable, exc.reason, status)


class DemoWireClient(ModelClient):
    provider = "demowire"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(model, **kwargs)
        self.base_url = (base_url or os.environ.get("DEMOWIRE_BASE_URL") or "").rstrip("/")
        if not self.base_url:
            raise ValueError("demowire needs a base URL (an alias's base_url, or DEMOWIRE_BASE_URL)")
        self.api_key = api_key or os.environ.get("DEMOWIRE_API_KEY")

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(f"{self.base_url}/turn", data=json.dumps(body).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - the configured endpoint
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raise DemoWireError(f"HTTP {e.code}: {e.read()[:300].decode('utf-8', 'replace')}", e.code) from e
        except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
            raise DemoWireError(f"connection error: {e}") from e
        data = json.loads(raw)  # a body that is not JSON is a malformed reply (retried by assay)
        if not isinstance(data, dict):
            raise MalformedReply(f"expected a JSON object, got {type(data).__name__}")
        return data

    async def _complete_once(self, messages: list[Message], tools: list[ToolSpec], *, max_tokens: int | None,
                             temperature: float | None, json_mode: bool, web_search: bool) -> ModelReply:
        body = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content, "tool_call_id": m.tool_call_id,
                          "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                         for c in m.tool_calls]} for m in messages],
            "tools": [t.model_dump() for t in tools],
            "max_tokens": max_tokens or self.max_reply_tokens,
            "temperature": temperature,
        }
        data = await asyncio.to_thread(self._post, body)
        calls = data.get("calls") or []
        usage = data.get("usage") or {}
        if not isinstance(calls, list) or not isinstance(usage, dict):
            raise MalformedReply("calls must be a list and usage an object")
        return ModelReply(
            text=str(data.get("text") or ""),
            tool_calls=[make_tool_call(str(c.get("id")), str(c.get("name")), c.get("arguments")) for c in calls],
            usage=Usage(input_tokens=int(usage.get("in", 0)), output_tokens=int(usage.get("out", 0))),
            stop_reason=str(data.get("stop") or ("tool_use" if calls else "end")),
            model=self.model,
        )


PROVIDER = Provider(name="demowire", client=DemoWireClient, classify=classify,
                    key_env="DEMOWIRE_API_KEY", url_env="DEMOWIRE_BASE_URL")
