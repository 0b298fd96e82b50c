"""One resolver of model specs: `PROVIDER/MODEL` (openai, anthropic, a named preset such as
`ollama`, or a provider a plugin registers: `assay.llm.providers`) or an `assay.toml` alias.

Every user of a model (agents, judges, the meta-judge, the stakeholder router, the company
LLM gateway) resolves its spec here, so one alias means one provider, endpoint, key and
price wherever it is used. A resolved `Model` creates its SDK client lazily (validation
needs no key) and prices usage with its one price.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from assay.config import Config, load_config
from assay.errors import InputError
from assay.llm.messages import Usage
from assay.llm.prices import Price, cost_usd, lookup_price
from assay.llm.providers import Provider, get_provider, is_provider, provider_names
from assay.llm.urls import is_loopback
from assay.plugins import PluginError

if TYPE_CHECKING:
    from assay.llm.clients.base import ModelClient

__all__ = ["DEFAULT_MAX_REPLY_TOKENS", "Model", "ModelSpec", "is_loopback", "is_model_spec", "missing_key",
           "resolve_model"]

DEFAULT_MAX_REPLY_TOKENS = 32_000



class ModelSpec(BaseModel):
    """A model spec resolved against `assay.toml`: everything needed to call and price it."""

    model_config = ConfigDict(frozen=True)
    spec: str  # as the user gave it
    provider: str  # a registered provider (`assay.llm.providers`)
    model: str
    alias: bool = False
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    api_key_env: str | None = None  # an alias's own key variable
    price: Price | None = None
    context: int | None = None
    temperature: float | None = None
    max_tokens: int = DEFAULT_MAX_REPLY_TOKENS
    max_retries: int = 5
    retry_base_delay: float = 1.0
    timeout_s: float = 600.0
    images: bool = True  # the model accepts images (false: a text-only model)

    @property
    def name(self) -> str:
        """`provider/model`, as recorded on runs."""
        return f"{self.provider}/{self.model}"

    def result_options(self) -> dict[str, object]:
        """What about this model can change a result (part of every run key's options hash)."""
        out: dict[str, object] = {"model": self.name, "base_url": self.base_url, "temperature": self.temperature,
                                  "max_tokens": self.max_tokens}
        if not self.images:  # only when set, so the runs of every image-taking model keep their keys
            out["images"] = False
        if self.context is not None:  # the loop's context budget: it decides what older output is cut
            out["context"] = self.context
        return out

    def _provider(self) -> Provider:
        found = get_provider(self.provider)
        if found is None:  # a ModelSpec is made by resolve_model, which refuses unknown providers
            raise ValueError(f"unknown model provider {self.provider!r}")
        return found

    def endpoint(self) -> str | None:
        """The base URL calls go to: the alias's, else the provider's environment variable, else
        the provider's default (a preset's; None: the SDK's own)."""
        provider = self._provider()
        url_env = provider.url_env
        return self.base_url or (os.environ.get(url_env) if url_env else None) or provider.default_url

    def key(self) -> str | None:
        key_env = self._provider().key_env
        return self.api_key or (os.environ.get(key_env) if key_env else None) or None


class Model:
    """A resolved model with its (lazily created) client; shared by every run of a campaign."""

    def __init__(self, spec: ModelSpec) -> None:
        # The SDK clients are imported here, not at module level: each SDK takes seconds to
        # import, and only campaigns with a model of that provider need it (before any run).
        from assay.llm.clients import client_class

        self.spec = spec
        self._client: ModelClient | None = None
        client_class(spec.provider)

    @property
    def client(self) -> ModelClient:
        if self._client is None:
            s = self.spec
            from assay.llm.clients import make_client

            self._client = make_client(s.provider, s.model, base_url=s.base_url, api_key=s.api_key,
                                       context_tokens=s.context, max_retries=s.max_retries,
                                       retry_base_delay=s.retry_base_delay, timeout_s=s.timeout_s)
        return self._client

    def cost(self, usage: Usage) -> float | None:
        return cost_usd(usage, self.spec.price)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def __repr__(self) -> str:
        return f"Model({self.spec.spec})"


def is_model_spec(spec: str, config: Config | None = None) -> bool:
    """A provider spec (`openai/...`, `anthropic/...`, a plugin provider's) or an alias of `assay.toml`."""
    config = config if config is not None else load_config()
    return spec in config.models or ("/" in spec and is_provider(spec.split("/", 1)[0]))


def resolve_model(spec: str, config: Config | None = None, *, field: str = "--agent",
                  require_key: bool = True) -> ModelSpec:
    """Resolve a model spec; InputError (exit 2) for an unknown spec, provider or missing key.

    Prices: the alias's own `[models.ALIAS.prices]`, else `[prices."provider/model"]` of
    assay.toml, else the built-in list price table (`assay.llm.prices`); None when unknown.
    """
    config = config if config is not None else load_config()
    overrides = {k: Price(**v.model_dump()) for k, v in config.prices.items()}
    alias = config.models.get(spec)
    if alias is not None:
        where = f"models.{spec}"
        try:
            found = get_provider(alias.provider, f"{where}.provider")
        except PluginError as e:
            raise PluginError("assay.toml", e.field, e.reason) from e
        if found is None:
            raise InputError("assay.toml", f"{where}.provider",
                             f"unknown provider {alias.provider!r} ({_known()})")
        key = None
        if alias.api_key_env:
            key = os.environ.get(alias.api_key_env)
            if key is None and require_key:
                raise InputError("assay.toml", f"{where}.api_key_env",
                                 f"environment variable {alias.api_key_env} is not set")
        price = Price(**alias.prices.model_dump()) if alias.prices is not None else \
            lookup_price(alias.provider, alias.model, overrides)
        resolved = ModelSpec(spec=spec, provider=alias.provider, model=alias.model, alias=True,
                             base_url=alias.base_url, api_key=key, api_key_env=alias.api_key_env, price=price, context=alias.context,
                             temperature=alias.temperature,
                             max_tokens=alias.max_tokens or DEFAULT_MAX_REPLY_TOKENS,
                             max_retries=alias.max_retries, retry_base_delay=alias.retry_base_delay,
                             timeout_s=alias.timeout_s, images=alias.images)
        if require_key and key is None:
            _require_key(resolved, field)
        return resolved
    provider, _, model = spec.partition("/")
    found = get_provider(provider, field) if model else None
    if found is None:
        raise InputError(None, field, f"unknown model spec {spec!r} ({'/MODEL, '.join(provider_names())}/MODEL "
                                      "or a model alias from assay.toml)")
    resolved = ModelSpec(spec=spec, provider=provider, model=model, price=lookup_price(provider, model, overrides))
    if require_key:
        _require_key(resolved, field)
    return resolved


def missing_key(spec: ModelSpec) -> str | None:
    """Why calls to `spec` would be refused for want of a key (None: they would not)."""
    provider = spec._provider()
    if provider.key_env is None or not provider.key_required or spec.key() or is_loopback(spec.endpoint()):
        return None
    if spec.api_key_env is not None:
        return f"environment variable {spec.api_key_env} is not set"
    local = f"point {provider.url_env} at a local server" if provider.url_env else "use a local server"
    return f"{provider.key_env} is not set (or {local})"


def _require_key(spec: ModelSpec, field: str) -> None:
    """Refuse up front (exit 2) rather than void every run when no key is set."""
    reason = missing_key(spec)
    if reason is not None:
        raise InputError(None, field, reason)


def _known() -> str:
    names = provider_names()
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
