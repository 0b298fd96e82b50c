"""Model clients over the official provider SDKs, behind one provider-neutral interface."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from assay.llm.clients.base import ModelClient

if TYPE_CHECKING:
    from assay.llm.clients.anthropic_client import AnthropicClient
    from assay.llm.clients.openai_client import OpenAIClient

__all__ = ["AnthropicClient", "ModelClient", "OpenAIClient", "make_client"]

# Each SDK takes seconds to import; load only the one a campaign uses, before runs start.
_MODULES = {"openai": ("assay.llm.clients.openai_client", "OpenAIClient"),
            "anthropic": ("assay.llm.clients.anthropic_client", "AnthropicClient")}


def client_class(provider: str) -> Callable[..., ModelClient]:
    module, name = _MODULES[provider]
    return getattr(importlib.import_module(module), name)


def __getattr__(name: str) -> Any:
    for module, cls in _MODULES.values():
        if cls == name:
            return getattr(importlib.import_module(module), name)
    raise AttributeError(name)


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
    if provider not in _MODULES:
        raise ValueError(f"unknown model provider {provider!r} (expected one of: {', '.join(_MODULES)})")
    cls = client_class(provider)
    return cls(model, base_url=base_url, api_key=api_key, context_tokens=context_tokens,
               temperature=temperature, max_retries=max_retries, retry_base_delay=retry_base_delay,
               timeout_s=timeout_s, **extra)
