"""What both scenario readers share: one Task per variant, built by one function.

FDE-Gym case folders (`fdegym.py`) and native scenarios (`native_scenario.py`) read their
own files; `variant_tasks` then fills each variant's placeholders, reads its stakeholder
spec, decides its language, builds its `ScenarioSpec` and Task, validates and hashes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.errors import InputError
from assay.task.formats.yamlio import read_text
from assay.task.hashing import content_hash
from assay.task.model import LEVELS, Engagement, FramingRule, ScenarioSpec, Task
from assay.task.people import NpcSpec, load_npcs
from assay.task.re2_translation import PatternError
from assay.task.validation import (
    FillBudget,
    FillTooLarge,
    PlaceholderError,
    fill_text,
    has_cjk,
    validate_task,
)

__all__ = ["Brief", "Variant", "render", "variant_tasks"]


class Variant(BaseModel):
    """One variant of a scenario: its parameters and, where the case declares them, its KPIs."""

    model_config = ConfigDict(extra="forbid")
    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    right_here: bool = False
    kpi_baseline: float | None = None
    kpi_oracle: float | None = None


class Brief(BaseModel):
    """A level's brief before its placeholders are filled, and the file it comes from."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    text: str
    file: Path
    field: str | None = None


def render(text: str, params: dict[str, Any], file: Path | str, variant: str, field: str | None = None,
           budget: FillBudget | None = None) -> str:
    """Fill `{{name}}` from the variant's params; an unfilled placeholder, or a fill past
    `budget` (`validation.FillBudget`), is an InputError."""
    try:
        return fill_text(text, params, budget=budget)
    except PlaceholderError as e:
        raise InputError(file, field, f"variant {variant!r}: {e}") from None


def _has_placeholders(path: Path) -> bool:
    """Whether the stakeholder spec file holds a `{{placeholder}}` (what it cannot be read as is
    an InputError, said by `_npcs` naming the field)."""
    try:
        return "{{" in read_text(path)
    except InputError:
        return True  # read per variant, where the error names its field


def _npcs(path: Path, params: dict[str, Any], variant: str, field: str | None, *, strict: bool,
          budget: FillBudget | None = None) -> NpcSpec:
    """The variant's stakeholder spec; every way it can be bad is an InputError naming the file.
    `strict` (native scenarios): a key the schema does not declare is refused, as in every native file."""
    try:
        spec = load_npcs(path, params, budget)
        unknown = spec.unknown_fields() if strict else []
        if unknown:
            shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
            raise InputError(path, unknown[0], f"unknown field(s) in the stakeholder spec: {shown}")
        return spec
    except ValidationError as e:
        first = e.errors()[0]
        cause = (first.get("ctx") or {}).get("error")
        if isinstance(cause, PatternError):  # a trigger or requires pattern: its own index named
            loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in first.get("loc", ())).lstrip(".")
            raise InputError(path, loc or field, f"variant {variant!r}: {cause}") from None
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise InputError(path, loc or field, f"variant {variant!r}: {first.get('msg', 'invalid')}") from None
    except InputError as e:  # the file itself (a link, not JSON, too deep): the field is the spec's
        if e.field is None and field is not None:
            raise InputError(e.file, field, e.reason, e.line, e.column) from None
        raise
    except FillTooLarge as e:  # the place in the spec where the budget ran out
        where = ".".join(x for x in (field, e.field) if x) or None
        raise InputError(path, where, f"variant {variant!r}: {e}") from None
    except (ValueError, OSError) as e:
        reason = "; ".join(m.strip() for m in str(e).splitlines()[:4])
        raise InputError(path, field, f"variant {variant!r}: {reason}") from None


def variant_tasks(*, scenario_id: str, fmt: str, case: Path, variants: list[Variant], briefs: dict[str, Brief],
                  npcs: Path, npcs_field: str | None, engagement: Engagement, rules_extra: Brief,
                  key_facts: list[str], framing: list[FramingRule], has_pilot: bool,
                  task_fields: dict[str, Any], files: dict[str, str | None] | None = None,
                  held_out: str | None = None, baseline: float | str | None = None,
                  language: str | None = None, validate_file: Path | None = None,
                  metadata: dict[str, Any] | None = None) -> list[Task]:
    """One Task per variant (id `SCENARIO/VARIANT`), validated and hashed.

    `task_fields` are the Task's own fields shared by every variant (title, domain, tools,
    policies, ...); the variant's KPIs fall back to `baseline` when it is a number."""
    digests: dict[str, str] = {}
    tasks: list[Task] = []
    budget = FillBudget()  # what placeholders may add over every variant of the case
    # A stakeholder spec without placeholders is the same for every variant: read and checked
    # once (a spec of 20,000 topics took 1.4 s, and 30 variants past a minute).
    shared = (None if not variants or _has_placeholders(npcs) else
              _npcs(npcs, {}, variants[0].name, npcs_field, strict=fmt == "native", budget=budget))
    for v in variants:
        filled = {lv: render(b.text, v.params, b.file, v.name, b.field, budget) for lv, b in briefs.items()
                  if lv in LEVELS}
        extra = render(rules_extra.text, v.params, rules_extra.file, v.name, rules_extra.field, budget)
        people = shared or _npcs(npcs, v.params, v.name, npcs_field, strict=fmt == "native", budget=budget)
        lang = language or ("zh" if has_cjk(filled["L3"]) or (people.clock is not None and
                                                             (people.clock.lang or "").startswith("zh")) else "en")
        kpi_baseline = v.kpi_baseline if v.kpi_baseline is not None else (
            float(baseline) if isinstance(baseline, int | float) and not isinstance(baseline, bool) else None)
        spec = ScenarioSpec(
            format=fmt,  # type: ignore[arg-type]
            case=case, variant=v.name, params=v.params, right_here=v.right_here, kpi_baseline=kpi_baseline,
            kpi_oracle=v.kpi_oracle, baseline=baseline, engagement=engagement.model_copy(update={"rules_extra": extra}),
            key_facts=list(key_facts), framing=list(framing), has_pilot=has_pilot, matcher=people.matcher,
            held_out=held_out, **({"files": files} if files is not None else {}))
        task = Task(id=f"{scenario_id}/{v.name}", language=lang, briefs=filled, scenario=spec,
                    metadata={**(metadata or {}), "variant": v.name, "scenario": scenario_id}, **task_fields)
        validate_task(task, validate_file or case)
        task.content_hash = content_hash(task, digests)
        tasks.append(task)
    return tasks
