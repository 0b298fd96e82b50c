"""Storing runs converted from another framework's results: every input read and converted
first (a bad one refused, nothing written), then each run whose key the campaign does not
hold yet saved through `Store.save_run`, so importing the same file again adds nothing.

The bounds every importer puts on the integers it takes from a file (`MAX_COUNT` for token
counts, `MAX_INTEGER` for an epoch and a grade's counts), so an integer that no run holds is
refused while converting, naming the file and the field, instead of overflowing the store's
integers (an OverflowError at the insert, after other runs were stored) or a cost (`count *
price` past a float)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, Field

from assay.config import load_config
from assay.errors import InputError
from assay.llm.prices import Price, lookup_price
from assay.record import Event, RunRecord, Usage
from assay.store import Store
from assay.store.models import runs_t, too_long
from assay.task.validation import check_identity

__all__ = ["MAX_AMOUNT", "MAX_COUNT", "MAX_INTEGER", "Count", "ImportResult", "Imported", "bounded", "bounded_ints", "bounded_runs", "bounded_usage",
           "model_price", "price_overrides", "store_imported"]

Imported = tuple[RunRecord, list[Event]]
UsageT = TypeVar("UsageT", bound=Usage)
ModelT = TypeVar("ModelT", bound=BaseModel)

MAX_COUNT = 10**12
"""Most one count of an imported run may be (tokens, turns: a thousand times a long campaign): a
larger integer (JSON allows 4,300 digits) overflows the store's 64-bit integers and every cost,
and 9 million runs at this bound still sum within them (the report sums tokens in SQL)."""
MAX_AMOUNT = 10**9
"""Most an imported run's dollars (its agent's and its judge's cost) and seconds (its duration)
may be: the report sums them over every run, and a billion per run keeps any store's sum a
finite float."""
MAX_INTEGER = 2**31 - 1
"""Most an imported run's epoch (its repeat) and the counts of its grade (N/A items, judge votes,
audit removals, router fallbacks) may be: the store's INTEGER columns are 32-bit on PostgreSQL."""

Count = Annotated[int, Field(ge=-MAX_COUNT, le=MAX_COUNT)]
"""A count in an importer's model of an upstream file (`bounded`, as a field's type)."""


def bounded(path: Path, field: str, value: int, most: int = MAX_COUNT) -> int:
    """`value`, an integer another framework's reader gave, once it is within ±`most` (a count:
    `MAX_COUNT`; an epoch: `MAX_INTEGER`); InputError naming the file and the field otherwise."""
    if abs(value) > most:
        digits = len(str(abs(value))) if value.bit_length() < 14_000 else "thousands of"  # str() stops at 4,300 digits
        what = "a count of tokens" if most == MAX_COUNT else "an epoch or a grade's count"
        raise InputError(path, field, f"an integer of {digits} digits, beyond the ±{most:,} {what} may be")
    return value


def bounded_ints(path: Path, field: str, model: ModelT, most: int = MAX_INTEGER) -> ModelT:
    """`model`, built from another framework's file (a grade), once every integer field of it and
    of the models it holds is within ±`most` (`bounded`, naming the field). Free-form objects in
    it (a check's values) are JSON the store keeps as text, and are left as they are."""
    stack: list[tuple[str, Any]] = [(field, model)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool):
            bounded(path, where, v, most)
        elif isinstance(v, BaseModel):
            stack.extend((f"{where}.{k}", getattr(v, k)) for k in type(v).model_fields)
        elif isinstance(v, list | tuple):
            stack.extend((f"{where}[{n}]", x) for n, x in enumerate(v))
    return model


def bounded_usage(path: Path, field: str, usage: UsageT) -> UsageT:
    """`usage` once each of its token counts is at most MAX_COUNT (`bounded`)."""
    for name in Usage.model_fields:
        bounded(path, f"{field}.{name}", getattr(usage, name))
    return usage


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
    bounded_runs(converted, paths)  # every run checked before any is stored
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


def bounded_runs(converted: list[Imported], paths: list[Path]) -> list[Imported]:
    """`converted` once the costs and the duration of each run are within 0 and `MAX_AMOUNT`,
    and its names (task id, agent, level, model) are names the store can keep (no control
    character, within their columns); InputError naming the run and the field otherwise
    (checked again by `store_imported`, and by a command before it opens the store, so a
    refusal writes nothing)."""
    file = paths[0] if len(paths) == 1 else None
    for record, _ in converted:
        k = record.key
        where = f"the run of task {k.task_id[:80]!r} (epoch {k.epoch})"
        amounts = {"usage.cost_usd": record.usage.cost_usd, "judge_usage.cost_usd": record.judge_usage.cost_usd,
                   "duration_s": record.duration_s}
        for field, value in amounts.items():
            if value is not None and not 0 <= value <= MAX_AMOUNT:
                raise InputError(file, f"{where}: {field}",
                                 f"{value:g} is not within 0 and {MAX_AMOUNT:,} (dollars or seconds)")
        names: dict[str, str | None] = {"task_id": k.task_id, "agent": k.agent, "level": k.level,
                                        "model": record.model, "harness_version": record.harness_version}
        for column, name in names.items():
            if name is None:
                continue
            if column in ("task_id", "agent"):
                check_identity(file, f"{where}: {column}", name)
            reason = too_long(runs_t, column, name)
            if reason is not None:
                raise InputError(file, f"{where}: {column}", reason)
    return converted


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
