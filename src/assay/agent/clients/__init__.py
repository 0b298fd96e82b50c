"""Model clients over the official provider SDKs, behind one provider-neutral interface."""

from __future__ import annotations

from typing import Any

from assay.agent.clients.anthropic_client import AnthropicClient
from assay.agent.clients.base import ModelClient
from assay.agent.clients.openai_client import OpenAIClient

__all__ = ["AnthropicClient", "ModelClient", "OpenAIClient", "make_client"]

_CLIENTS: dict[str, type[ModelClient]] = {"openai": OpenAIClient, "anthropic": AnthropicClient}


def make_client(
    provider: str,
    model: str,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    context_tokens: int | None = None,
    temperature: float | None = None,
    max_retries: int = 5,
    retry_base_delay: float = 1.0,
    timeout_s: float = 600.0,
    **extra: Any,
) -> ModelClient:
    """A client for ``provider`` ("openai" or "anthropic"); other providers raise ValueError.

    ``extra`` passes client-specific options through (max_reply_tokens, retry_max_delay,
    web_search_mode for OpenAI).
    """
    cls = _CLIENTS.get(provider)
    if cls is None:
        raise ValueError(f"unknown model provider {provider!r} (expected one of: {', '.join(_CLIENTS)})")
    return cls(model, base_url=base_url, api_key=api_key, context_tokens=context_tokens,
               temperature=temperature, max_retries=max_retries, retry_base_delay=retry_base_delay,
               timeout_s=timeout_s, **extra)
