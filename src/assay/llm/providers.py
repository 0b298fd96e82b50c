"""The one registry of model providers: a provider's name, its client and the errors it names.

`openai` and `anthropic` are registered here like any other provider, and so is each named
preset of an OpenAI-compatible server (`assay.llm.presets`: `ollama`, `vllm`, `groq`, ...); a
third-party package adds one through the `assay.providers` entry point group (`assay.plugins`, docs/extending.md),
and `PROVIDER/MODEL` is then a model spec everywhere a model is taken (agents, judges, the
stakeholder router, assay.toml aliases). A plugin's module is imported only when a spec names
its provider.

A provider's `classify` is the one place that says which of its exceptions are provider
faults (and which of those are worth a retry): `assay.llm.clients.base.classify` asks every
registered provider's classifier, then handles the faults of any provider (a reply body that is
not JSON).
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from assay.llm.presets import PRESETS, Preset
from assay.plugins import Registry

if TYPE_CHECKING:
    from assay.llm.clients.base import Fault, ModelClient

__all__ = ["BUILTIN_PROVIDERS", "Provider", "get_provider", "is_provider", "provider_names", "register_provider",
           "registered_providers", "stainless_classifier", "context_overflow"]

ClientFactory = Callable[..., "ModelClient"]
"""Makes a client: `(model, *, base_url, api_key, context_tokens, temperature, max_retries,
retry_base_delay, timeout_s, **extra) -> ModelClient` (a ModelClient subclass is one)."""
Classifier = Callable[[BaseException], "Fault | None"]


@dataclass(frozen=True)
class Provider:
    """A model provider.

    `client` makes its ModelClient; `classify` maps the exceptions its client raises to a Fault
    (None: not a provider fault, so the run's exception propagates); `key_env` and `url_env`
    name the environment variables of its API key and base URL (None: it takes none; with a
    `key_env` and `key_required`, a spec is refused up front unless the key is set or the
    endpoint is loopback); `default_url` is where calls go when neither an alias nor `url_env`
    says (None: the SDK's own default).
    """

    name: str
    client: ClientFactory
    classify: Classifier | None = None
    key_env: str | None = None
    url_env: str | None = None
    default_url: str | None = None
    key_required: bool = True

    def load(self) -> ClientFactory:
        """The client factory, its SDK imported (the built-ins import theirs lazily: seconds each)."""
        load = getattr(self.client, "load", None)
        return load() if callable(load) else self.client


class _LazyClient:
    """A built-in client class, imported when first needed; `defaults` are keyword arguments it
    is always made with (a preset's name, URL and key variables), a caller's own winning."""

    def __init__(self, module: str, name: str, **defaults: Any) -> None:
        self.module, self.name, self.defaults = module, name, defaults

    def load(self) -> ClientFactory:
        cls: ClientFactory = getattr(importlib.import_module(self.module), self.name)
        if not self.defaults:
            return cls
        return functools.partial(cls, **self.defaults)

    def __call__(self, *args: Any, **kwargs: Any) -> ModelClient:
        return self.load()(*args, **kwargs)


def _retry_after(response: Any) -> float | None:
    try:
        value = response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _origin(exc: BaseException) -> str:
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    if url is None:
        return "the model server"
    return f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")


def connection_reason(exc: BaseException) -> str:
    """What a failed connection says about the server (the SDKs' own text is "Connection error."):
    nothing listening (not started, or it died), the server hanging up mid-reply (it crashed or
    restarted), or the cause's own words."""
    where = _origin(exc)
    cause: BaseException | None = exc
    for _ in range(8):  # a chain of causes is short; a cyclic one must not loop
        if cause is None:
            break
        if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
            return f"connection refused at {where}: no model server is listening there (not started, or it died)"
        name = type(cause).__name__
        if name in ("RemoteProtocolError", "ReadError") or "disconnected" in str(cause).lower():
            return f"{where} closed the connection without a reply (the model server may have crashed)"
        cause = cause.__cause__ or cause.__context__
    detail = exc.__cause__ or exc
    return f"connection error at {where}: {type(detail).__name__}: {detail}"


CONTEXT_CODES = frozenset({"context_length_exceeded"})
"""Error codes that name a request longer than the model's context (OpenAI's)."""
CONTEXT_WORDS = re.compile(r"prompt is too long|maximum context length|context (?:length|window|size)"
                           r"|too many (?:input )?tokens", re.IGNORECASE)
"""What the refusal says of it where there is no such code: Anthropic's "prompt is too long",
vLLM's and OpenAI's "maximum context length", llama.cpp's "context size"."""


CONTENT_CODES = frozenset({"content_filter", "content_policy_violation", "invalid_prompt"})
"""Error codes of a request a content filter refused (Azure's, OpenAI's)."""
CONTENT_WORDS = re.compile(r"flagged as potentially violating|content (?:management )?policy|content filter"
                           r"|responsible ai polic", re.IGNORECASE)
"""What such a refusal says where there is no such code."""


def content_refused(status: int, code: object, message: str) -> bool:
    """Did a content filter refuse what the request holds? An HTTP 400 that says so (its code or
    its words). Never another status: those are the provider's, whatever was sent."""
    return status == 400 and (code in CONTENT_CODES or CONTENT_WORDS.search(message[:2000]) is not None)


def context_overflow(status: int, code: object, message: str) -> bool:
    """Did the provider refuse the request as longer than the model's context? An HTTP 400 that
    says so (its error code or its words), or 413 (the request too large). Never a 5xx, a 429,
    a timeout or a refused key: those are the provider's, whatever was sent."""
    if status == 413:
        return True
    return status == 400 and (code in CONTEXT_CODES or CONTEXT_WORDS.search(message[:2000]) is not None)


def stainless_classifier(module: str) -> Classifier:
    """The classifier of an SDK generated by Stainless (openai, anthropic: the same exception
    names). It looks the SDK up in sys.modules and never imports it: its exceptions can only
    come from an SDK already imported, and importing one costs seconds."""

    def classify(exc: BaseException) -> Fault | None:
        from assay.llm.clients.base import Fault

        sdk = sys.modules.get(module)
        if sdk is None:
            return None
        # Timeouts are connection errors in these SDKs: check them first for a clearer reason.
        if isinstance(exc, sdk.APITimeoutError):
            return Fault(True, "request timed out")
        if isinstance(exc, sdk.APIConnectionError):
            return Fault(True, connection_reason(exc))
        if isinstance(exc, sdk.APIStatusError):
            status: int = getattr(exc, "status_code", 0)
            message = getattr(exc, "message", None) or str(exc)
            # 408 is a server-side timeout; we retry timeouts.
            retriable = status == 429 or status == 408 or status >= 500
            return Fault(retriable, f"HTTP {status}: {message}", status, _retry_after(getattr(exc, "response", None)),
                         context_overflow=context_overflow(status, getattr(exc, "code", None), message),
                         content_refused=content_refused(status, getattr(exc, "code", None), message))
        if isinstance(exc, sdk.APIResponseValidationError):
            return Fault(True, f"malformed reply: {exc}", getattr(exc, "status_code", None))
        return None

    return classify


_OPENAI_CLIENT = ("assay.llm.clients.openai_client", "OpenAIClient")


def _preset(p: Preset) -> Provider:
    """A preset's provider: the OpenAI client, made with the preset's name, URL and key variables."""
    client = _LazyClient(*_OPENAI_CLIENT, provider=p.name, key_env=p.key_env, url_env=p.url_env,
                         default_url=p.default_url, key_required=p.key_required)
    return Provider(p.name, client, stainless_classifier("openai"), p.key_env, p.url_env,
                    default_url=p.default_url, key_required=p.key_required)


BUILTIN_PROVIDERS: dict[str, Provider] = {
    "openai": Provider("openai", _LazyClient(*_OPENAI_CLIENT),
                       stainless_classifier("openai"), "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": Provider("anthropic", _LazyClient("assay.llm.clients.anthropic_client", "AnthropicClient"),
                          stainless_classifier("anthropic"), "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    **{p.name: _preset(p) for p in PRESETS},
}
PROVIDERS: Registry[Provider] = Registry("assay.providers", Provider, BUILTIN_PROVIDERS)
"""The one provider registry: the built-ins, then the `assay.providers` plugins as specs name them."""


def register_provider(provider: Provider) -> None:
    """Register a provider in this process (what an entry point does when first named)."""
    PROVIDERS.register(provider)


def provider_names() -> list[str]:
    """Every provider a spec may name: the registered ones, then the installed plugins' (unloaded)."""
    return PROVIDERS.names()


def is_provider(name: str) -> bool:
    """`name` is a registered provider or an installed plugin's (not imported)."""
    return PROVIDERS.has(name)


def registered_providers() -> list[Provider]:
    """The providers registered so far (built-ins, and the plugins a spec has named)."""
    return list(PROVIDERS.items.values())


def get_provider(name: str, field: str = "--agent") -> Provider | None:
    """The provider `name`, loading its plugin on first use; None when no one provides it (a
    plugin that fails to load or is not a Provider is a PluginError, exit 2)."""
    return PROVIDERS.get(name, field)
