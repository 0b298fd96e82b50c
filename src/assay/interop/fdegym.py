"""`assay import fdegym RUN...`: the runs FDE-Gym's public harness (`harness/bench.py run`,
version 1.3.0) leaves in its runs folder, as runs of their own campaign.

A run folder is named `<engagement>.v<n>-<level>-<model slug>-<rep>` and holds either
`result.json` (graded: the grader's `kpi`, `kpi_baseline`, `kpi_oracle`, `incidents`,
`summary`, `gates`; `uplift`, `uplift_bounded`, `discovery`, `uplift_net`; the run's
`meta.json` fields `engagement`, `level`, `variant`; and, from bench.py, `agent`, `rep`,
`stamp`) or `void.json` (the `agent` object of a run that ended `api_error`, `interrupted`
or `harness_error`, or whose grading failed), beside `meta.json`.

- Agent `fdegym:<slug>`, task `<engagement>/<variant>` (`base` when the result names none) at
  the run's level, epoch = `rep`.
- Scored as assay scores a scenario: U = `uplift_bounded` (upstream's uplift before the
  incident cap, floored at -1), U_adj = min(U, 0) when there is an incident, S = U_adj -
  `discovery.contact_cost`; passed = solved (S >= 0.8, no incident).
- `void.json`: a void run (`api_error`, `interrupted`, `harness_error`; failed grading is
  `grader_error`) with upstream's error as the reason.
- Usage from the agent's `prompt_tokens`, `cached_tokens`, `completion_tokens` (0 when a
  harness version does not record them); cost = `agent.usd`, upstream's own figure; a void
  run's cost is left out (0; its `agent.usd` kept as `options.fdegym_usd`), as `bench.py
  table`, which sums the USD of the runs it reports, leaves it out.
- `cases`: the folder holding the case folders. Each run's task is then read from its case by
  assay's own FDE-Gym reader, so its task id, content hash, value and metadata are those of
  `assay run` on the same case and `assay compare` pairs the two; a variant or level the case
  does not have is refused. Without it the task hash names the case only.

Files are read without following links (a symlinked run folder or file is refused), at most
`MAX_RUN_FILE_BYTES` each; engagement and variant names must be plain names, so no name can
reach outside the cases folder. Any bad file is an InputError naming the file and the field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay import metrics
from assay.errors import InputError
from assay.interop.runs import MAX_INTEGER, Count, Imported, bounded
from assay.interop.upstream import imported_record, load_json
from assay.record import (
    AssistantEvent,
    Discovery,
    EndReason,
    Event,
    Grade,
    HarnessEvent,
    RunKey,
    ScenarioGrade,
    Usage,
    UsageCost,
    safe_json,
    safe_text,
)
from assay.task.formats.fdegym import read_case
from assay.task.hashing import json_digest
from assay.task.model import LEVELS, Task

__all__ = ["MAX_RUN_FILE_BYTES", "convert_fdegym", "run_folders"]

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")  # an engagement or variant: a plain name, never a path
_RUN_NAME = re.compile(r"^(?P<engagement>.+)\.v(?P<n>\d+)-(?P<level>L[0-3])-(?P<slug>.+)-(?P<rep>\d+)$")
_SCORED: dict[str, EndReason] = {"finished": "finished", "max_turns": "max_turns", "max_usd": "max_usd",
                                 "max_time": "max_time"}
_VOID: dict[str, EndReason] = {"api_error": "api_error", "interrupted": "interrupted", "harness_error": "harness_error"}
MAX_RUN_FILE_BYTES = 8 * 1024**2  # result.json, void.json, meta.json: a few kB upstream
OPTIONS_HASH = json_digest({"source": "fdegym"})  # upstream's run name is the key: one run per task, level, slug, rep


M = TypeVar("M", bound=BaseModel)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Agent(_Strict):
    end_reason: str
    slug: str
    model: str | None = None
    turns: Count = 0  # each count at most `runs.MAX_COUNT`, as every importer's
    usd: float | None = None
    seconds: float | None = None
    commands: Count = 0
    summary: str = ""
    flags: list[str] = Field(default_factory=list)
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    cached_tokens: Count = 0
    error: str | None = None
    grade_error: str | None = None


class _Discovery(Discovery):
    """Upstream's discovery record: assay's fields (upstream writes the same ones), strictly
    typed, plus its key-fact coverage."""

    model_config = _Strict.model_config
    key_fact_coverage: float | None = None


class _Meta(_Strict):
    engagement: str
    level: str
    variant: str | None = None


class _Result(_Meta):
    kpi: float
    kpi_baseline: float
    kpi_oracle: float
    incidents: list[Any] = Field(default_factory=list)
    summary: Any = ""
    gates: dict[str, Any] = Field(default_factory=dict)
    uplift: float
    uplift_bounded: float
    uplift_net: float | None = None
    discovery: _Discovery = Field(default_factory=_Discovery)
    name: str | None = None
    harness_version: str | None = None
    agent: _Agent
    rep: int = Field(ge=1, le=MAX_INTEGER)
    stamp: dict[str, str] = Field(default_factory=dict)


def _parse(model: type[M], path: Path, raw: Any) -> M:
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(path, ".".join(str(x) for x in err["loc"]) or None, err["msg"]) from None


def run_folders(paths: list[Path]) -> list[Path]:
    """Every run folder named: a folder holding `result.json` or `void.json`, or a runs folder
    (`FDEGYM_RUNS`) whose run folders are its children (`_aborted`, `_locks`, `_validate` and
    folders with neither file, runs still going, are left out). A symlinked child is refused."""
    out: list[Path] = []
    for p in paths:
        if not p.is_dir():
            raise InputError(p, None, "not a folder: give FDE-Gym run folders or the runs folder holding them")
        if _is_run(p):
            out.append(p)
            continue
        found = 0
        for child in sorted(p.iterdir()):
            if child.name.startswith(("_", ".")):
                continue
            if child.is_symlink():
                raise InputError(child, None, "refused: a symlinked run folder (links are never followed)")
            if child.is_dir() and _is_run(child):
                out.append(child)
                found += 1
        if not found:
            raise InputError(p, None, "holds no FDE-Gym run (a folder with result.json or void.json)")
    return out


def _is_run(folder: Path) -> bool:
    return any((folder / f).is_symlink() or (folder / f).exists() for f in ("result.json", "void.json"))


def _plain(path: Path, field: str, name: str | None) -> str:
    if name is None or not _NAME.match(name) or name in (".", ".."):
        raise InputError(path, field, f"{name!r} is not a plain engagement or variant name (letters, digits, _ . -)")
    return name


class _Cases:
    """The case folders of `--cases`, each read once by assay's FDE-Gym reader."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        self.read: dict[str, dict[str, Task]] = {}
        if root is not None and not root.is_dir():
            raise InputError(root, "--cases", "not a folder")

    def task(self, path: Path, engagement: str, variant: str, level: str) -> Task | None:
        if self.root is None:
            return None
        if engagement not in self.read:
            folder = self.root / engagement
            if folder.is_symlink() or not (folder / "engagement.json").is_file():
                raise InputError(path, "engagement", f"no FDE-Gym case {engagement!r} in {self.root} (--cases)")
            self.read[engagement] = {t.id: t for t in read_case(folder)}
        task = self.read[engagement].get(f"{engagement}/{variant}")
        if task is None:
            raise InputError(path, "variant", f"case {engagement!r} has no variant {variant!r} "
                                              f"(it has {', '.join(sorted(self.read[engagement]))})")
        if level not in task.levels:
            raise InputError(path, "level", f"{task.id} has no {level} brief (it has {', '.join(task.levels)})")
        return task


def _usage(agent: _Agent) -> UsageCost:
    cached = max(0, agent.cached_tokens)
    usage = Usage(input_tokens=max(0, agent.prompt_tokens - cached), cache_read_tokens=cached,
                  output_tokens=max(0, agent.completion_tokens))
    return UsageCost.of(usage, agent.usd)


def _key(campaign: str, task_id: str, task: Task | None, slug: str, level: str, rep: int) -> RunKey:
    task_hash = task.content_hash if task is not None else json_digest({"fdegym_case": task_id})
    return RunKey(campaign=campaign, task_id=task_id, task_hash=task_hash, agent=safe_text("fdegym:" + slug),
                  level=level, epoch=rep, options_hash=OPTIONS_HASH)


def _task_fields(task: Task | None) -> dict[str, Any]:
    if task is None:
        return {"task_meta": {"source": "fdegym"}}
    value = {"amount": task.value.amount, "currency": task.value.currency} if task.value else None
    return {"task_meta": task.meta(), "value": value}


def _graded(folder: Path, path: Path, res: _Result, cases: _Cases, campaign: str) -> Imported:
    engagement = _plain(path, "engagement", res.engagement)
    variant = _plain(path, "variant", res.variant or "base")
    if res.level not in LEVELS:
        raise InputError(path, "level", f"{res.level!r} is not one of {', '.join(LEVELS)}")
    end = _SCORED.get(res.agent.end_reason)
    if end is None:
        raise InputError(path, "agent.end_reason", f"{res.agent.end_reason!r} in a graded run (expected one of "
                                                   f"{', '.join(_SCORED)}; a void run has void.json)")
    task = cases.task(path, engagement, variant, res.level)
    incidents = [safe_text(i if isinstance(i, str) else json.dumps(i, ensure_ascii=False)) for i in res.incidents]
    u = res.uplift_bounded
    u_adj = metrics.adjusted_uplift(u, bool(incidents))
    d = res.discovery
    s = metrics.run_score(u_adj, d.contact_cost)
    solved = metrics.solved(s, bool(incidents))
    grade = ScenarioGrade(
        kpi=res.kpi, kpi_baseline=res.kpi_baseline, kpi_reference=res.kpi_oracle, uplift=u, uplift_adj=u_adj,
        incidents=incidents, contact_cost=d.contact_cost, questions_asked=d.questions_asked,
        asked_by_person=safe_json(d.asked_by_person), off_limits_contacts=safe_json(d.off_limits_contacts),
        key_fact_coverage=d.key_fact_coverage, facts_obtained=safe_json(d.facts_obtained), gross=u_adj, net=s,
        score=s, solved=solved, variant=variant, level=res.level,
        grader=safe_json({"summary": res.summary, "gates": res.gates, "kpi_baseline": res.kpi_baseline,
                          "kpi_oracle": res.kpi_oracle,
                          "fdegym": {"uplift": res.uplift, "uplift_bounded": res.uplift_bounded,
                                     "uplift_net": res.uplift_net, "harness_version": res.harness_version,
                                     "stamp": res.stamp, "name": res.name}}),
        probe_flags=[{"rule": "fdegym_flag", "command": safe_text(f)} for f in res.agent.flags])
    task_id = task.id if task is not None else f"{engagement}/{variant}"
    key = _key(campaign, task_id, task, res.agent.slug, res.level, res.rep)
    summary = safe_text(res.agent.summary)
    record = imported_record(
        key, ["scenario"], score=s, passed=solved, grade=Grade(scenario=grade), end_reason=end,
        model=safe_text(res.agent.model or res.agent.slug), usage=_usage(res.agent), final=summary,
        options=safe_json({"source": "fdegym", "run": str(folder), "slug": res.agent.slug,
                           "harness_version": res.harness_version, "stamp": res.stamp}),
        **_task_fields(task))
    record.turns = max(0, res.agent.turns)
    events: list[Event] = [HarnessEvent(seq=0, t=0.0, note=f"imported from FDE-Gym run {folder.name} (result.json, "
                                                           f"harness {res.harness_version or 'unknown'})")]
    if summary:
        events.append(AssistantEvent(seq=1, t=0.0, content=summary))
    return record, events


def _void(folder: Path, path: Path, agent: _Agent, cases: _Cases, campaign: str) -> Imported:
    meta_path = folder / "meta.json"
    meta = _parse(_Meta, meta_path, load_json(meta_path, MAX_RUN_FILE_BYTES))
    engagement = _plain(meta_path, "engagement", meta.engagement)
    variant = _plain(meta_path, "variant", meta.variant or "base")
    if meta.level not in LEVELS:
        raise InputError(meta_path, "level", f"{meta.level!r} is not one of {', '.join(LEVELS)}")
    m = _RUN_NAME.match(folder.name)
    if m is None:
        raise InputError(folder, None, "not a bench.py run name <engagement>.v<n>-<level>-<slug>-<rep>: "
                                       "the void run's repeat is unknown")
    task = cases.task(meta_path, engagement, variant, meta.level)
    task_id = task.id if task is not None else f"{engagement}/{variant}"
    rep = bounded(folder, "rep (the run folder's name)", int(m.group("rep")), MAX_INTEGER)
    key = _key(campaign, task_id, task, agent.slug, meta.level, rep)
    end = _VOID.get(agent.end_reason, "grader_error")
    why = agent.error or (agent.grade_error or "")[-300:] or "no error recorded"
    reason = f"FDE-Gym void run ({agent.end_reason}): {safe_text(why)}"
    # `bench.py table` sums the USD of the runs it reports, and a void run is not one of them:
    # its cost is left out (0), upstream's figure kept in `options.fdegym_usd`.
    usage = _usage(agent).model_copy(update={"cost_usd": 0.0})
    record = imported_record(key, ["scenario"], score=None, passed=None, grade=Grade(), end_reason=end,
                             void_reason=reason, model=safe_text(agent.model or agent.slug), usage=usage,
                             options=safe_json({"source": "fdegym", "run": str(folder), "slug": agent.slug,
                                                "fdegym_usd": agent.usd}),
                             **_task_fields(task))
    record.turns = max(0, agent.turns)
    return record, [HarnessEvent(seq=0, t=0.0, note=f"imported from FDE-Gym run {folder.name} (void.json)")]


def _one(folder: Path, cases: _Cases, campaign: str) -> Imported:
    result, void = folder / "result.json", folder / "void.json"
    if result.is_symlink() or result.exists():
        raw = load_json(result, MAX_RUN_FILE_BYTES)
        if isinstance(raw, dict) and "agent" in raw:
            return _graded(folder, result, _parse(_Result, result, raw), cases, campaign)
        if not (void.is_symlink() or void.exists()):
            raise InputError(result, "agent", "no agent: a result of `run.py grade` alone, not of `bench.py run` "
                                              "(only bench runs name their model)")
    raw = load_json(void, MAX_RUN_FILE_BYTES)
    return _void(folder, void, _parse(_Agent, void, raw), cases, campaign)


def convert_fdegym(paths: list[Path], campaign: str, cases: Path | None = None) -> list[Imported]:
    """Every FDE-Gym run folder under `paths` as a run (nothing stored)."""
    known = _Cases(cases)
    return [_one(folder, known, campaign) for folder in run_folders(paths)]
