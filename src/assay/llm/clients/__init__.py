"""Model clients over the official provider SDKs, behind one provider-neutral interface.

Which provider makes which client is the registry's (`assay.llm.providers`); this package
holds the built-in clients and the interface every client, a plugin's too, implements."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from assay.llm.clients.base import ModelClient
from assay.llm.providers import get_provider, provider_names

if TYPE_CHECKING:
    from assay.llm.clients.anthropic_client import AnthropicClient
    from assay.llm.clients.openai_client import OpenAIClient

__all__ = ["AnthropicClient", "ModelClient", "OpenAIClient", "make_client"]

# The built-in clients by class name, for `from assay.llm.clients import OpenAIClient`: each SDK
# takes seconds to import, so neither is imported before it is named.
_MODULES = {"openai": ("assay.llm.clients.openai_client", "OpenAIClient"),
            "anthropic": ("assay.llm.clients.anthropic_client", "AnthropicClient")}


def client_class(provider: str) -> Callable[..., ModelClient]:
    """The client factory of a registered provider (its SDK imported); ValueError for an unknown one."""
    found = get_provider(provider)
    if found is None:
        raise ValueError(f"unknown model provider {provider!r} (expected one of: {', '.join(provider_names())})")
    return found.load()


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
    """A client for a registered ``provider`` (openai, anthropic, a plugin's); others raise ValueError.

    ``extra`` passes client-specific options through (max_reply_tokens, retry_max_delay,
    web_search_mode for OpenAI).
    """
    cls = client_class(provider)
    return cls(model, base_url=base_url, api_key=api_key, context_tokens=context_tokens,
               temperature=temperature, max_retries=max_retries, retry_base_delay=retry_base_delay,
               timeout_s=timeout_s, **extra)
