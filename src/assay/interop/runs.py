"""Storing runs converted from another framework's results: every input read and converted
first (a bad one refused, nothing written), then each run whose key the campaign does not
hold yet saved through `Store.save_run`, so importing the same file again adds nothing."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, Field

from assay.config import load_config
from assay.llm.prices import Price, lookup_price
from assay.record import Event, RunRecord
from assay.store import Store

__all__ = ["ImportResult", "Imported", "model_price", "price_overrides", "store_imported"]

Imported = tuple[RunRecord, list[Event]]


class ImportResult(BaseModel):
    campaign: str
    files: list[str]
    samples: int = 0  # runs read from the files
    added: int = 0
    already: int = 0  # run keys the store (or an earlier file of this import) already holds
    void: int = 0
    run_ids: list[str] = Field(default_factory=list)


def store_imported(converted: list[Imported], store: Store, campaign: str, paths: list[Path]) -> ImportResult:
    """Store the converted runs whose keys the campaign does not hold yet; a finished run whose
    key the campaign holds only as void is stored as the key's next attempt (it replaces the
    void one in reports, as a re-run on resume does)."""
    attempts = store.attempts(campaign)
    done = store.finished_digests(campaign)
    result = ImportResult(campaign=campaign, files=[str(p) for p in paths], samples=len(converted))
    for record, events in converted:
        digest = record.key.digest
        if digest in done or (digest in attempts and record.status != "done"):
            result.already += 1
            continue
        record.attempt = attempts.get(digest, 0) + 1
        store.save_run(record, events)
        attempts[digest] = record.attempt
        if record.status == "done":
            done.add(digest)
        result.added += 1
        result.void += record.status == "void"
        result.run_ids.append(record.run_id)
    return result


def price_overrides() -> dict[str, Price]:
    """Prices assay.toml gives by `provider/model`: its `[prices."provider/model"]`, then the
    prices of each `[models.ALIAS]` under the alias's provider and model (so a run made
    elsewhere with the model an alias names is priced as `assay run --agent ALIAS` is)."""
    cfg = load_config()
    prices = {k: Price(**v.model_dump()) for k, v in cfg.prices.items()}
    for alias in cfg.models.values():
        if alias.prices is not None:
            prices.setdefault(f"{alias.provider}/{alias.model}", Price(**alias.prices.model_dump()))
    return prices


def model_price(model: str, overrides: Mapping[str, Price]) -> Price | None:
    """The price of a `provider/model` name from assay's table (overrides first); None when unknown."""
    provider, _, name = model.partition("/")
    return lookup_price(provider, name, overrides) if name else None
