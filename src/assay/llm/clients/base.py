"""The provider-neutral model client interface and its retry policy.

Subclasses implement one attempt (``_complete_once``) through the provider's official SDK, with
the SDK's own retries disabled; ``complete`` owns retries: exponential backoff with jitter on
429, 5xx, timeouts, connection errors and malformed (non-JSON) reply bodies, then ProviderError.
Any other 4xx fails at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from assay import jsonlimits
from assay.errors import ProviderError
from assay.llm import cache as response_cache
from assay.llm.messages import Citation, Message, ModelReply, ToolCall, ToolSpec

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_TOKENS = 128_000
DEFAULT_MAX_REPLY_TOKENS = 32_000


class MalformedReply(Exception):
    """The provider answered 200 but the body was not the JSON shape we expected."""


@dataclass
class Fault:
    retriable: bool
    reason: str
    status: int | None = None
    retry_after: float | None = None
    context_overflow: bool = False  # the request is longer than the model's context (never retried)
    content_refused: bool = False  # a content filter refused what the request holds (never retried)


def classify(exc: BaseException) -> Fault | None:
    """Map an exception a client raised to a Fault; None for exceptions that are not provider faults.

    Each registered provider names its own exceptions (`assay.llm.providers.Provider.classify`:
    the SDK's timeouts, connection and HTTP errors); a reply body that would not decode is a
    fault of any provider."""
    from assay.llm.providers import registered_providers

    for provider in registered_providers():
        if provider.classify is not None:
            fault = provider.classify(exc)
            if fault is not None:
                return fault
    if isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | MalformedReply):
        return Fault(True, f"malformed reply: {exc}")
    return None


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict, plus an error text when they are not a JSON object (or
    one nested deeper than `jsonlimits.MAX_DEPTH`: what walks them would recurse once per level)."""
    if isinstance(raw, dict):
        try:
            deep = jsonlimits.deep_at(json.dumps(raw)) is not None
        except (RecursionError, ValueError, TypeError) as exc:  # a provider SDK's dict the harness cannot write
            return {}, f"arguments are not JSON this harness reads: {type(exc).__name__}"
        if deep:
            return {}, f"arguments are not valid JSON this harness reads: nested deeper than {jsonlimits.MAX_DEPTH} levels"
        return raw, None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # a call with no arguments
    if not isinstance(raw, str):
        return {}, f"arguments must be a JSON object, got {type(raw).__name__}"
    if jsonlimits.deep_at(raw) is not None:  # json.loads would recurse once per level, into RecursionError
        return {}, f"arguments are not valid JSON this harness reads: nested deeper than {jsonlimits.MAX_DEPTH} levels"
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON: {exc.msg} at position {exc.pos}"
    except ValueError as exc:  # an integer of more digits than Python converts
        return {}, f"arguments are not valid JSON this harness reads: {str(exc)[:200]}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None


def make_tool_call(call_id: str, name: str, raw: Any) -> ToolCall:
    args, error = parse_arguments(raw)
    raw_text = raw if isinstance(raw, str) else json.dumps(raw) if error is None else f"({error})"
    return ToolCall(id=call_id, name=name, arguments=args, arguments_error=error, raw_arguments=raw_text)


def get_field(obj: Any, name: str, default: Any = None) -> Any:
    """Attribute or key access: SDK models keep unknown fields as attributes or dict extras."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return default if value is None else value


def add_citation(citations: list[Citation], url: str | None, title: str | None) -> None:
    if url and all(c.url != url for c in citations):
        citations.append(Citation(url=url, title=title or None))


class ModelClient(ABC):
    """One model of one provider. ``complete`` is safe to call concurrently."""

    provider: str = ""

    def __init__(
        self,
        model: str,
        *,
        context_tokens: int | None = None,
        max_reply_tokens: int | None = None,
        temperature: float | None = None,
        max_retries: int = 5,
        retry_base_delay: float = 1.0,
        retry_max_delay: float = 30.0,
        timeout_s: float = 600.0,
    ) -> None:
        self.model = model
        self.context_tokens = context_tokens or DEFAULT_CONTEXT_TOKENS
        self._max_reply_explicit = max_reply_tokens is not None
        # Default 32k; never more than half the context window.
        self.max_reply_tokens = max(1, min(max_reply_tokens or DEFAULT_MAX_REPLY_TOKENS,
                                           self.context_tokens // 2))
        self.temperature = temperature
        self.max_retries = max(0, max_retries)
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.timeout_s = timeout_s
        # Counters over the client's life (for reports and tests).
        self.attempts = 0
        self.retries = 0

    async def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None = None,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        json_mode: bool = False,
        web_search: bool = False,
    ) -> ModelReply:
        """One model turn. Retries provider faults; raises ProviderError when they persist.
        With the run's response cache active (`assay.llm.cache`), a request answered before
        is answered from it, and a new answer is kept."""
        if max_tokens is not None:
            max_tokens = max(1, min(max_tokens, self.max_reply_tokens))
        if temperature is None:
            temperature = self.temperature
        cache = response_cache.current()
        if cache is None:
            return await self._complete_retrying(messages, tools, max_tokens=max_tokens, temperature=temperature,
                                                 json_mode=json_mode, web_search=web_search)
        key = cache.key(f"{self.provider}/{self.model}@{getattr(self, 'base_url', None) or ''}", {
            "messages": [m.model_dump(mode="json") for m in messages],
            "tools": [t.model_dump(mode="json") for t in tools or []],
            "max_tokens": max_tokens, "temperature": temperature, "json_mode": json_mode, "web_search": web_search,
            "max_reply_tokens": self.max_reply_tokens})
        hit = await asyncio.to_thread(cache.get, key)
        if hit is not None:
            return ModelReply.model_validate_json(hit)
        reply = await self._complete_retrying(messages, tools, max_tokens=max_tokens, temperature=temperature,
                                              json_mode=json_mode, web_search=web_search)
        await asyncio.to_thread(cache.put, key, reply.model_dump_json())
        return reply

    async def _complete_retrying(
        self,
        messages: list[Message],
        tools: list[ToolSpec] | None,
        *,
        max_tokens: int | None,
        temperature: float | None,
        json_mode: bool,
        web_search: bool,
    ) -> ModelReply:
        attempt = 0
        while True:
            self.attempts += 1
            try:
                return await self._complete_once(
                    messages,
                    tools or [],
                    max_tokens=max_tokens,
                    temperature=temperature,
                    json_mode=json_mode,
                    web_search=web_search,
                )
            except Exception as exc:
                fault = classify(exc)
                if fault is None:
                    raise
                where = f"{self.provider}/{self.model}"
                if not fault.retriable:
                    raise ProviderError(f"{where}: {fault.reason}", fault.status,
                                        context_overflow=fault.context_overflow,
                                        content_refused=fault.content_refused) from exc
                if attempt >= self.max_retries:
                    raise ProviderError(
                        f"{where}: {fault.reason} (gave up after {attempt + 1} attempts)", fault.status
                    ) from exc
                delay = self._backoff(attempt, fault.retry_after)
                log.warning("%s: %s; retry %d/%d in %.2fs", where, fault.reason, attempt + 1,
                            self.max_retries, delay)
                attempt += 1
                self.retries += 1
                await asyncio.sleep(delay)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.retry_max_delay, self.retry_base_delay * (2**attempt))
        delay = base * random.uniform(0.5, 1.0)
        if retry_after is not None and retry_after > 0:
            delay = max(delay, min(retry_after, self.retry_max_delay))
        return delay

    @abstractmethod
    async def _complete_once(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        max_tokens: int | None,
        temperature: float | None,
        json_mode: bool,
        web_search: bool,
    ) -> ModelReply:
        """One attempt; SDK exceptions propagate and are classified by ``complete``."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release the HTTP connections."""

    async def __aenter__(self) -> ModelClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider}/{self.model})"
