"""`assay import omb FILE...` and `assay import darebench FILE...`: results that upstream
benchmarks publish, as runs of their own campaign, so `assay compare` can set a model run
here against the published run of the same model (`--against-campaign omb`).

- **OneMillion-Bench** grading results are the task JSON itself, written back by `omb eval`:
  `model_response.model_response_<i> = {model_name, response_text}` and
  `rubric_auto_score[<judge>]["rubric_<n>_response_<i>_auto_score"]` (the weight when hit,
  0 when missed, "NA" when the judge's verdict did not parse). Each response is a run of
  `omb:<model_name>` on the task (read by assay's own OneMillion-Bench reader, so the task id
  and hash are those of assay's runs of the same file); a model's responses are its epochs in
  order. Items are scored by assay's rubric scorer from the judges' verdicts (hit when the
  auto score is not 0, NA when it is "NA" or missing); with several judges (repeats
  `<model>::run_<k>` included) each votes and the majority decides, fail-closed on a tie. A
  response whose every item is NA is void (`grader_error`): upstream's `_calculate_omb_norm`
  leaves it out.
- **DareBench** `results/<run_id>_<model>.json` as `scripts/benchmark.py` writes it: one entry per
  run, the k-th entry of a task (with `grading.runs[k]`) is epoch k+1 of `darebench:<model>`,
  scored `score / max_score`, with that entry's own usage; a timed-out run is scored as it stands
  (`max_time`), any other status than `success` is void. Cost from assay's price table, null
  when the model has none; upstream's own cost per run is kept in the grade.
"""

from __future__ import annotations

import math
import re
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay import metrics
from assay.errors import InputError
from assay.fs.paths import PathError
from assay.fs.reads import read_regular
from assay.grade.judge import majority
from assay.grade.rubric import ItemVerdict, score_items
from assay.interop.runs import Count, Imported, model_price, price_overrides
from assay.llm.prices import cost_usd
from assay.record import (
    AssistantEvent,
    ContractGrade,
    EndReason,
    Event,
    Grade,
    HarnessEvent,
    JudgeInfo,
    RunKey,
    RunRecord,
    Usage,
    UsageCost,
    UserEvent,
    safe_json,
    safe_text,
)
from assay.task.formats.darebench import IMAGE_EXTS, cell_for, source_benchmark
from assay.task.formats.jsonio import loads_json
from assay.task.formats.omb import read_omb
from assay.task.formats.values import apply_found_value_tables
from assay.task.hashing import json_digest
from assay.task.model import EXECUTIONS, MODALITIES, Task
from assay.version import HARNESS_VERSION

__all__ = ["MAX_RESULT_BYTES", "convert_darebench", "convert_omb", "imported_record", "load_json"]

_RESPONSE = re.compile(r"^model_response_(\d+)$")


MAX_RESULT_BYTES = 64 * 1024**2  # an upstream results file larger than this is refused, never read whole


def load_json(path: Path, max_bytes: int = MAX_RESULT_BYTES) -> Any:
    """One upstream JSON file: a regular file (never a symlink or a device) of at most
    `max_bytes`, nested at most `jsonlimits.MAX_DEPTH` deep, with no integer of more digits than
    Python converts and no NaN or infinity (a score that is not a number would poison every
    mean of a report); InputError naming the file (and the line and column) otherwise."""
    if not path.is_file():
        raise InputError(path, None, "no such file")
    try:
        data = read_regular(path, max_bytes)
    except (OSError, PathError) as e:
        raise InputError(path, None, f"cannot read: {e}") from None
    return loads_json(data, path, finite=True)


def imported_record(key: RunKey, kinds: list[str], *, score: float | None, passed: bool | None, grade: Grade,
                    end_reason: EndReason = "finished", void_reason: str | None = None, model: str | None = None,
                    usage: UsageCost | None = None, final: str = "", value: dict[str, Any] | None = None,
                    task_meta: dict[str, Any] | None = None, options: dict[str, Any] | None = None) -> RunRecord:
    """One imported run (`sandbox: none`; a `void_reason` makes it void, unscored)."""
    return RunRecord(
        run_id=uuid.uuid4().hex[:16], key=key, kinds=kinds, harness_version=HARNESS_VERSION, model=model,
        sandbox="none", status="void" if void_reason else "done", end_reason=end_reason, void_reason=void_reason,
        score=None if void_reason else score, passed=None if void_reason else passed, value=value,
        usage=usage if usage is not None else UsageCost(cost_usd=None), grade=grade, final_message=final,
        turns=1 if final else 0, options=options or {}, task_meta=task_meta or {})


# --------------------------------------------------------------------------- OneMillion-Bench


def _omb_vote(raw: Any) -> bool | None:
    """One judge's verdict on one item from its auto score: hit when not 0, None (NA) when "NA",
    missing or not a number."""
    num = None if isinstance(raw, bool) or not isinstance(raw, int | float) else float(raw)
    if isinstance(raw, str) and raw.strip() not in ("", "NA"):
        try:
            num = float(raw)
        except ValueError:
            num = None
    return None if num is None or not math.isfinite(num) else num != 0


MAX_OMB_JUDGES = 64
"""Judges (repeats included) one OneMillion-Bench record may name: upstream's panels have a few;
each is stored with every run, so a file naming thousands would fill the store from a few KB."""
SHOWN_VOTES = 8
"""Judges an item's reason names with their scores (the rest counted)."""


def _shown_votes(raws: dict[str, Any]) -> str:
    """The judges that scored an item, with their scores, as its reason says them: at most
    SHOWN_VOTES named, each score cut, the judges that gave none counted."""
    scored = [(j, r) for j, r in raws.items() if r is not None]
    parts = [f"{safe_text(j)[:80]}: {repr(r)[:40]}" for j, r in scored[:SHOWN_VOTES]]
    if len(scored) > SHOWN_VOTES:
        parts.append(f"and {len(scored) - SHOWN_VOTES} more")
    if len(scored) < len(raws):
        parts.append(f"{len(raws) - len(scored)} without a score")
    return ", ".join(parts)


def _omb_verdicts(task: Task, judged: dict[str, dict[str, Any]], i: int) -> tuple[dict[str, ItemVerdict], JudgeInfo]:
    """Every judge (repeats `<model>::run_<k>` included) is one voter; the majority decides each
    item, fail-closed on a tie, as assay's own judges vote; an item no judge answered is NA."""
    assert task.rubric is not None
    out: dict[str, ItemVerdict] = {}
    tallies: dict[str, list[int]] = {}
    agreed = answered = 0
    for it in task.rubric.items:
        raws = {j: scores.get(f"rubric_{it.id}_response_{i}_auto_score") for j, scores in judged.items()}
        votes = [v for v in (_omb_vote(r) for r in raws.values()) if v is not None]
        met, not_met = votes.count(True), votes.count(False)
        tallies[it.id] = [met, not_met]
        shown = _shown_votes(raws)
        if not votes:
            out[it.id] = ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=None, na=True, check=False,
                                     reason=f"OneMillion-Bench auto score NA ({shown})")
            continue
        answered += 1
        agreed += met == 0 or not_met == 0
        hit = majority(it.weight, met, not_met)
        votes_note = f" (votes {met} met / {not_met} not met)" if len(judged) > 1 else ""
        out[it.id] = ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=hit, na=False, check=False,
                                 reason=f"OneMillion-Bench auto score {shown}{votes_note}")
    info = JudgeInfo(judges=[safe_text(j) for j in judged], answered=answered, na=len(out) - answered,
                     votes=len(judged), agreed=agreed, agreement=agreed / answered if answered else None,
                     item_votes=tallies)
    return out, info


def _omb_record(path: Path, where: str, rec: dict[str, Any], task: Task, campaign: str) -> list[Imported]:
    responses = rec.get("model_response")
    auto = rec.get("rubric_auto_score")
    if not isinstance(responses, dict) or not responses or not isinstance(auto, dict) or not auto:
        return []
    if len(auto) > MAX_OMB_JUDGES:
        raise InputError(path, f"{where}rubric_auto_score", f"names {len(auto):,} judges; at most "
                                                            f"{MAX_OMB_JUDGES} are read")
    judged: dict[str, dict[str, Any]] = {}
    for judge, scores in auto.items():
        if not isinstance(scores, dict):
            raise InputError(path, f"{where}rubric_auto_score.{judge}",
                             "must be an object of rubric_<n>_response_<i>_auto_score")
        judged[str(judge)] = scores
    names = sorted(judged)
    # One judge keeps the run key it always had; several are one voting panel.
    options_key: dict[str, Any] = {"judge": names[0]} if len(names) == 1 else {"judges": names}
    judges_text = ", ".join(names)
    ordered: list[tuple[int, str, dict[str, Any]]] = []
    for k, v in responses.items():
        m = _RESPONSE.match(str(k))
        if m is None or not isinstance(v, dict):
            raise InputError(path, f"{where}model_response.{k}", "must be model_response_<i> -> {model_name, response_text}")
        ordered.append((int(m.group(1)), str(k), v))
    epochs: dict[str, int] = {}
    out: list[Imported] = []
    for i, k, v in sorted(ordered):
        name, text = v.get("model_name"), v.get("response_text")
        if not isinstance(name, str) or not name.strip() or not isinstance(text, str):
            raise InputError(path, f"{where}model_response.{k}", "needs a model_name and a response_text (strings)")
        agent = safe_text("omb:" + name.strip())
        epochs[agent] = epochs.get(agent, 0) + 1
        verdicts, info = _omb_verdicts(task, judged, i)
        rubric = score_items(task, verdicts)
        rubric.judge_info = info
        score = rubric.expert_score
        # Upstream's report (`_calculate_omb_norm`) gives a response no score when its items are
        # NA: one whose every item is NA (the judge's reply did not parse) is left out, void.
        void = ("no positive rubric weight" if score is None else
                "every rubric item's auto score is NA (the judge's verdict did not parse): no score, as "
                "upstream's OMB Norm" if info.answered == 0 else None)
        key = RunKey(campaign=campaign, task_id=task.id, task_hash=task.content_hash, agent=agent, level=None,
                     epoch=epochs[agent], options_hash=json_digest({"omb": options_key}))
        final = safe_text(text)
        record = imported_record(key, task.kinds, score=score, passed=None if score is None else score >= task.pass_threshold(),
                                 grade=Grade(rubric=rubric), model=safe_text(name.strip()), final=final,
                                 void_reason=void, end_reason="finished" if void is None else "grader_error",
                                 value={"amount": task.value.amount, "currency": task.value.currency} if task.value else None,
                                 task_meta=task.meta(), options={"source": "omb", "file": str(path), **options_key})
        events: list[Event] = [
            HarnessEvent(seq=0, t=0.0, note=f"imported from OneMillion-Bench results {path.name} ({k}, "
                                           f"judge{'s' if len(names) > 1 else ''} {judges_text})"),
            UserEvent(seq=1, t=0.0, content=task.prompt_text(None)), AssistantEvent(seq=2, t=0.0, content=final)]
        out.append((record, events))
    return out


def convert_omb(paths: list[Path], campaign: str) -> list[Imported]:
    """Every graded response of every OneMillion-Bench task file as a run (nothing stored)."""
    out: list[Imported] = []
    for path in paths:
        raw = load_json(path)
        tasks = read_omb(path)
        apply_found_value_tables(tasks, [path])
        records = raw if isinstance(raw, list) else [raw]
        if len(records) != len(tasks):
            raise InputError(path, None, f"{len(records)} records but {len(tasks)} tasks read")
        runs: list[Imported] = []
        for idx, (rec, task) in enumerate(zip(records, tasks, strict=True)):
            where = f"[{idx}]." if isinstance(raw, list) else ""
            runs += _omb_record(path, where, rec, task, campaign)
        if not runs:
            raise InputError(path, "rubric_auto_score", "holds no graded response (model_response and "
                                                        "rubric_auto_score, as `omb eval` writes them)")
        out += runs
    return out


# --------------------------------------------------------------------------- DareBench


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class _GradingRun(_Loose):
    score: float
    max_score: float | None = None
    grading_type: str | None = None
    breakdown: dict[str, Any] = Field(default_factory=dict)
    notes: str | None = None


class _Grading(_Loose):
    runs: list[_GradingRun] = Field(default_factory=list)


class _DareUsage(_Loose):
    input_tokens: Count = 0  # each count at most `runs.MAX_COUNT`, as every importer's
    output_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0
    total_tokens: Count | None = None
    cost_usd: float | None = None


class _DareTask(_Loose):
    task_id: str
    status: str = "success"
    timed_out: bool = False
    execution_time: float | None = None
    usage: _DareUsage = Field(default_factory=_DareUsage)
    grading: _Grading = Field(default_factory=_Grading)
    frontmatter: dict[str, Any] = Field(default_factory=dict)


class _DareResults(_Loose):
    model: str
    executor: str | None = None
    benchmark_version: str | None = None
    run_id: str | None = None
    suite: Any = None
    tasks: list[_DareTask]


def _dare_usage(u: _DareUsage, n: int, price_of: Any) -> UsageCost:
    """One run's tokens as upstream counts them (`get_result.py` sums `total_tokens`): the itemised
    counts, and a `total_tokens` above their sum (tokens the provider does not itemise, such as
    reasoning) counted as output; `n` > 1 splits an entry that holds several runs evenly."""
    parts = [max(0, u.input_tokens), max(0, u.output_tokens), max(0, u.cache_read_tokens),
             max(0, u.cache_write_tokens)]
    surplus = max(0, (u.total_tokens or 0) - sum(parts))
    usage = Usage(input_tokens=parts[0] // n, output_tokens=(parts[1] + surplus) // n,
                  cache_read_tokens=parts[2] // n, cache_write_tokens=parts[3] // n)
    return UsageCost.of(usage, cost_usd(usage, price_of))


def _dare_cell(task_id: str, fm: dict[str, Any]) -> tuple[str, str]:
    """The task's workload cell as assay's DareBench reader gives it: the source benchmark's cell,
    else multimodal when a workspace file is an image; the front matter's own `modality` /
    `execution` win."""
    images = any(isinstance(wf, dict) and isinstance(wf.get("dest") or wf.get("source"), str)
                 and Path(str(wf.get("dest") or wf.get("source"))).suffix.lower() in IMAGE_EXTS
                 for wf in fm.get("workspace_files") or [] if isinstance(fm.get("workspace_files"), list))
    modality, execution = cell_for(source_benchmark(task_id)) or (
        "multimodal" if images else "text", "multi-step-with-tools")
    if fm.get("modality") in MODALITIES:
        modality = fm["modality"]
    if fm.get("execution") in EXECUTIONS:
        execution = fm["execution"]
    return modality, execution


def _dare_runs(t_entries: list[_DareTask]) -> list[tuple[_DareTask, _GradingRun | None, int]]:
    """(entry, grading run, usage share) per run of one task. `scripts/benchmark.py` writes one
    entry per run, each carrying the task's whole `grading.runs`: the k-th entry of a task is its
    run k. A single entry with several grading runs (a file that kept one entry per task) is
    split: run j is its grading run j, with an even share of its usage."""
    first = t_entries[0]
    if len(t_entries) == 1 and len(first.grading.runs) > 1:
        return [(first, run, len(first.grading.runs)) for run in first.grading.runs]
    return [(e, e.grading.runs[k] if k < len(e.grading.runs) else None, 1) for k, e in enumerate(t_entries)]


def _dare_task(path: Path, res: _DareResults, entries: list[_DareTask], campaign: str, price: Any) -> list[Imported]:
    t = entries[0]
    agent = safe_text("darebench:" + res.model)
    ohash = json_digest({"darebench": {"executor": res.executor, "benchmark_version": res.benchmark_version,
                                       "suite": res.suite}})
    task_hash = json_digest(t.frontmatter)
    modality, execution = _dare_cell(t.task_id, t.frontmatter)
    meta = {"source": "darebench", "title": safe_text(str(t.frontmatter.get("name", t.task_id))),
            "modality": modality, "execution": execution}
    opts = {"source": "darebench", "file": str(path), "darebench_run_id": res.run_id}
    out: list[Imported] = []
    for j, (entry, run, share) in enumerate(_dare_runs(entries)):
        key = RunKey(campaign=campaign, task_id=safe_text(t.task_id), task_hash=task_hash, agent=agent, level=None,
                     epoch=j + 1, options_hash=ohash)
        usage = _dare_usage(entry.usage, share, price)
        upstream_cost = None if entry.usage.cost_usd is None else entry.usage.cost_usd / share
        note = HarnessEvent(seq=0, t=0.0, note=f"imported from DareBench results {path.name} (task {t.task_id}, run {j + 1})")
        timed_out = entry.timed_out or entry.status == "timeout"
        # Upstream's outcome (`get_result.py`): timeout, else success, else error (any other status).
        if not timed_out and (entry.status != "success" or run is None):
            why = (f"DareBench run status {entry.status!r}" if entry.status != "success"
                   else "DareBench run has no grading run")
            if run is not None and run.notes:
                why += f": {safe_text(run.notes)[:500]}"
            out.append((imported_record(key, ["contract"], score=None, passed=None, grade=Grade(), end_reason="harness_error",
                                        void_reason=why, model=res.model, usage=usage, task_meta=meta, options=opts), [note]))
            continue
        if run is None:  # a timeout with no grading run: nothing delivered is scored 0
            run = _GradingRun(score=0.0, max_score=1.0, notes="no grading run for a timed-out run")
        score = run.score / run.max_score if run.max_score else run.score
        if not math.isfinite(score):
            raise InputError(path, f"tasks[{t.task_id}].grading.runs[{j}].score", "not a finite number")
        if not 0.0 <= score <= 1.0:  # a score of 1e308 is finite, and makes every mean of a report infinite
            raise InputError(path, f"tasks[{t.task_id}].grading.runs[{j}].score",
                             f"score / max_score is {score:g}, outside 0..1")
        grade = Grade(contract=ContractGrade.model_validate({
            "checks": safe_json(run.breakdown), "judge": {"notes": safe_text(run.notes or "")},
            "darebench": safe_json({"grading_type": run.grading_type, "score": run.score, "max_score": run.max_score,
                                    "upstream_cost_usd": upstream_cost, "status": entry.status,
                                    "total_tokens": entry.usage.total_tokens})}))
        out.append((imported_record(key, ["contract"], score=score, passed=score >= metrics.PASS_THRESHOLD, grade=grade,
                                    end_reason="max_time" if timed_out else "finished", model=res.model,
                                    usage=usage, task_meta=meta, options=opts), [note]))
    return out


def convert_darebench(paths: list[Path], campaign: str) -> list[Imported]:
    """Every graded run of every DareBench results file as a run (nothing stored)."""
    overrides = price_overrides()
    out: list[Imported] = []
    for path in paths:
        raw = load_json(path)
        try:
            res = _DareResults.model_validate(raw)
        except ValidationError as e:
            err = e.errors()[0]
            raise InputError(path, ".".join(str(x) for x in err["loc"]) or None, err["msg"]) from None
        price = model_price(res.model, overrides)
        by_task: dict[str, list[_DareTask]] = {}
        for t in res.tasks:
            by_task.setdefault(t.task_id, []).append(t)
        for entries in by_task.values():
            out += _dare_task(path, res, entries, campaign, price)
    return out
