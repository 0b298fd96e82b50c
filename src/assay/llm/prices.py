"""Model prices (USD per million tokens) and cost of a reply's usage.

The built-in table holds public *list* prices as known at ``PRICES_AS_OF``; negotiated,
batch or regional prices differ, so users override entries in ``assay.toml``. A model we
have no price for costs ``None`` (unknown), never 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel

from assay.llm.messages import Usage


class Price(BaseModel):
    """USD per million tokens. ``cached_input`` / ``cache_write`` default to ``input`` when None."""

    input: float
    cached_input: float | None = None
    cache_write: float | None = None
    output: float


PRICES_AS_OF = "2026-11-01"  # date of the built-in table

# Public list prices (standard tier, USD per 1M tokens) at PRICES_AS_OF.
# They are list prices only: override them under [prices] in assay.toml.
# OpenAI bills no cache-write surcharge (cache_write None -> input price);
# Anthropic cache_write is the 5-minute cache write price (1.25x input).
BUILTIN_PRICES: dict[str, Price] = {
    # OpenAI
    "openai/gpt-5": Price(input=1.25, cached_input=0.125, output=10.00),
    "openai/gpt-5-mini": Price(input=0.25, cached_input=0.025, output=2.00),
    "openai/gpt-5-nano": Price(input=0.05, cached_input=0.005, output=0.40),
    "openai/gpt-4.1": Price(input=2.00, cached_input=0.50, output=8.00),
    "openai/gpt-4.1-mini": Price(input=0.40, cached_input=0.10, output=1.60),
    "openai/gpt-4.1-nano": Price(input=0.10, cached_input=0.025, output=0.40),
    "openai/gpt-4o": Price(input=2.50, cached_input=1.25, output=10.00),
    "openai/gpt-4o-mini": Price(input=0.15, cached_input=0.075, output=0.60),
    "openai/o3": Price(input=2.00, cached_input=0.50, output=8.00),
    "openai/o3-mini": Price(input=1.10, cached_input=0.55, output=4.40),
    "openai/o4-mini": Price(input=1.10, cached_input=0.275, output=4.40),
    "openai/o1": Price(input=15.00, cached_input=7.50, output=60.00),
    # Anthropic
    "anthropic/claude-opus-4-5": Price(input=5.00, cached_input=0.50, cache_write=6.25, output=25.00),
    "anthropic/claude-opus-4-1": Price(input=15.00, cached_input=1.50, cache_write=18.75, output=75.00),
    "anthropic/claude-opus-4": Price(input=15.00, cached_input=1.50, cache_write=18.75, output=75.00),
    "anthropic/claude-sonnet-4-5": Price(input=3.00, cached_input=0.30, cache_write=3.75, output=15.00),
    "anthropic/claude-sonnet-4": Price(input=3.00, cached_input=0.30, cache_write=3.75, output=15.00),
    "anthropic/claude-3-7-sonnet": Price(input=3.00, cached_input=0.30, cache_write=3.75, output=15.00),
    "anthropic/claude-haiku-4-5": Price(input=1.00, cached_input=0.10, cache_write=1.25, output=5.00),
    "anthropic/claude-3-5-haiku": Price(input=0.80, cached_input=0.08, cache_write=1.00, output=4.00),
}

# "-2025-04-14" (OpenAI), "-20250929" (Anthropic) or "-latest" at the end of a model id.
_DATE_SUFFIX = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


def _find(key: str, overrides: Mapping[str, Price] | None) -> Price | None:
    if overrides and key in overrides:
        return overrides[key]
    return BUILTIN_PRICES.get(key)


def lookup_price(provider: str, model: str, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """Price of ``provider/model``: exact key (overrides, then built-in), then without a date suffix.

    A model id that itself names a provider (``openrouter`` + ``openai/gpt-4.1``) is also tried
    as a key. Unknown models give None.
    """
    candidates = [f"{provider}/{model}"]
    if "/" in model:
        candidates.append(model)
    for key in list(candidates):
        stripped = _DATE_SUFFIX.sub("", key)
        if stripped != key:
            candidates.append(stripped)
    for key in candidates:
        price = _find(key, overrides)
        if price is not None:
            return price
    return None


def cost_usd(usage: Usage, price: Price | None) -> float | None:
    """Cost of ``usage`` in USD; None when the price is unknown.

    ``usage.input_tokens`` are the non-cached input tokens (clients normalise so); cache reads
    are priced at ``cached_input``, cache writes at ``cache_write``, output at ``output``.
    """
    if price is None:
        return None
    cached = price.cached_input if price.cached_input is not None else price.input
    write = price.cache_write if price.cache_write is not None else price.input
    total = (
        usage.input_tokens * price.input
        + usage.cache_read_tokens * cached
        + usage.cache_write_tokens * write
        + usage.output_tokens * price.output
    )
    return total / 1_000_000
