"""A scenario's gateway: the upstream model resolved from its spec, the engagement's budgets.

The spec comes from the campaign's `--gateway-model` or $ASSAY_GATEWAY_MODEL and is resolved
by the one resolver (`assay.llm.resolve`); an upstream is resolved once per spec and
assay.toml as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.config import Config, settings
from assay.env.net.gateway.server import LLMGateway
from assay.errors import InputError
from assay.llm.prices import Price
from assay.llm.resolve import resolve_model
from assay.task.model import Engagement

__all__ = ["GATEWAY_MODEL_ENV", "Upstream", "gateway_model_spec", "resolve_upstream", "scenario_gateway"]

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
