"""`assay import inspect LOG...`: Inspect AI evaluation logs as stored runs.

One run per sample and epoch, in the given campaign, so every assay report (CIs, compare,
pass^k over epochs, Pareto, cost) covers Inspect evaluations:

- agent `inspect:<the eval's model>` (e.g. `inspect:openai/gpt-4o`), epoch = the sample's epoch;
- task id: the assay task id a sample exported by `assay export inspect` carries (its runs
  then pair with assay's own runs of the task in `assay compare`), else `<eval task>/<sample id>`;
- score: the first scorer's value (a number as is; C/I/P/N as 1/0/0.5/0; a dict or list, the
  mean of its members), `passed` as assay's grader said (an exported task) or the kind's pass
  line; a foreign sample is a `contract` run (an answer graded by checks), its scorers' values
  kept in `grade.checks`;
- usage: the sample's `model_usage` of the eval's model (other models, e.g. a model-graded
  scorer's, are `judge_usage`); cost from assay's price table (`assay.toml` `[prices]`, then
  the built-in list prices), null when the model has no price;
- a sample with an error is void (`harness_error`, the error as the reason), one with no
  usable score is void (`grader_error`).

The run key's options hash covers the eval's task, task arguments, solver, model arguments,
generation config and scorers, so importing the same log again adds nothing, and a log of
the same eval run differently is a different set of runs. Every log is read and converted
before anything is written: a log that cannot be read, or holds a malformed value, is
refused naming the file, and nothing is stored.
"""

from __future__ import annotations

import math
import stat
import uuid
import zipfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field, ValidationError

from assay import jsonlimits, metrics
from assay.errors import InputError
from assay.fs.paths import PathError
from assay.fs.reads import read_regular
from assay.interop.runs import (
    MAX_INTEGER,
    Imported,
    ImportResult,
    bounded,
    bounded_ints,
    bounded_usage,
    model_price,
    price_overrides,
    store_imported,
)
from assay.llm.prices import Price, cost_usd
from assay.record import (
    KINDS,
    AssistantEvent,
    ContractGrade,
    EndReason,
    ErrorEvent,
    Event,
    Grade,
    HarnessEvent,
    RunKey,
    RunRecord,
    SystemEvent,
    ToolResultEvent,
    Usage,
    UsageCost,
    UserEvent,
    safe_json,
    safe_text,
)
from assay.store import Store
from assay.task.hashing import json_digest
from assay.task.model import MAX_VALUE_AMOUNT
from assay.version import HARNESS_VERSION

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ModelUsage
    from inspect_ai.scorer import Score

__all__ = ["AGENT_PREFIX", "ImportResult", "convert_log", "convert_logs", "import_inspect", "read_inspect_log",
           "score_value", "store_imported"]

AGENT_PREFIX = "inspect:"
LEVELS = ("L0", "L1", "L2", "L3")
LETTER_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
"""Inspect's CORRECT, INCORRECT, PARTIAL and NOANSWER."""
LIMIT_END = {"message": "max_turns", "time": "max_time", "working": "max_time", "token": "max_usd",
             "cost": "max_usd"}
"""An Inspect sample limit that ended a sample, as assay's end reason (it is graded as it stands)."""

def _inspect_log_module() -> Any:
    try:
        from inspect_ai import log
    except ImportError:
        raise InputError(None, "LOG", "reading Inspect logs needs inspect-ai: pip install -e '.[inspect]'") from None
    return log


MAX_UNPACKED_BYTES = 2 * 1024**3
"""An `.eval` log (a zip) whose members unpack to more than this in all is refused before Inspect reads it."""
MAX_RATIO = 200
"""A member over 16 MiB that unpacks to more than this many times its packed size is refused: JSON
compresses about tenfold, a zip bomb of whitespace a thousandfold (300 KB took 700 MB to read)."""


MAX_JSON_LOG_BYTES = 1024**3
"""A `.json` log larger than this is refused: Inspect reads it whole, and its models take several
times its size in memory (the `.eval` format holds the same log in a zip)."""


def _refuse_bomb(path: Path) -> None:
    """InputError when the `.eval` zip at `path` would unpack past the limits above (the sizes
    its directory declares: Python's zip reader stops a member at its declared size), or a
    `.json` log is larger than MAX_JSON_LOG_BYTES."""
    if not zipfile.is_zipfile(path):
        size = path.stat().st_size
        if size > MAX_JSON_LOG_BYTES:
            raise InputError(path, None, f"refused: {size:,} bytes of JSON log, more than the {MAX_JSON_LOG_BYTES:,} "
                                         "read (write the log as .eval)")
        return
    try:
        with zipfile.ZipFile(path) as z:
            members = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise InputError(path, None, f"not a readable Inspect log: {type(e).__name__}: {e}") from None
    total = sum(m.file_size for m in members)
    if total > MAX_UNPACKED_BYTES:
        raise InputError(path, None, f"refused: its members unpack to {total:,} bytes, more than the "
                                     f"{MAX_UNPACKED_BYTES:,} read")
    for m in members:
        if m.file_size > 16 * 1024**2 and m.file_size > MAX_RATIO * max(1, m.compress_size):
            raise InputError(path, m.filename, f"refused: {m.compress_size:,} bytes unpack to {m.file_size:,} "
                                               f"(more than {MAX_RATIO} times: a zip bomb, not a log)")


def _check_log(path: Path, folder: Path | None = None) -> None:
    """InputError unless `path` is a regular file, not a link (Inspect's reader follows links,
    and its errors quote what it read), inside `folder` when one was listed, and no zip bomb."""
    try:
        st = path.lstat()
    except OSError as e:
        raise InputError(path, None, f"no such log file ({e.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise InputError(path, None, "refused: the log is a symbolic link (a downloaded log is read as the file it is)")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, None, "refused: not a regular file")
    if folder is not None and not path.resolve().is_relative_to(folder.resolve()):
        raise InputError(path, None, f"refused: a link in its path leads out of {folder}")
    _refuse_bomb(path)


def _unreadable(e: Exception) -> str:
    """Why Inspect could not read a log, never quoting the log's values (a validation error's
    input may be any file's head)."""
    if isinstance(e, ValidationError):
        errs = e.errors()
        first = errs[0] if errs else {"loc": (), "msg": "invalid"}
        where = ".".join(str(x) for x in first["loc"])
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        return f"not a readable Inspect log: {where + ': ' if where else ''}{first['msg']}{more}"
    return f"not a readable Inspect log: {type(e).__name__}: {str(e)[:500]}"


def read_inspect_log(path: Path) -> EvalLog:
    """The log at `path` (`.eval` or `.json`) with its samples; InputError naming the file when it cannot be read."""
    _check_log(path)
    log = _inspect_log_module()
    try:
        return log.read_eval_log(str(path))
    except Exception as e:  # Inspect raises many kinds (zip, zstd, JSON, validation): each is a bad log
        raise InputError(path, None, _unreadable(e)) from None


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int):
        try:
            return float(v)
        except OverflowError:  # Inspect's reader takes any integer: one past a float's range is infinite here,
            return math.inf if v > 0 else -math.inf  # and refused as beyond MAX_SCORE
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, str):
        s = v.strip()
        if s.upper() in LETTER_VALUES:
            return LETTER_VALUES[s.upper()]
        try:
            f = float(s)
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


MAX_SCORE = 1e9
"""An imported score beyond ± this is refused: Inspect scorers have no fixed range, but a mean of
scores near the float limit is infinite, and no scorer's scale is that wide."""


def score_value(v: Any) -> float | None:
    """An Inspect score value as a number: numbers as is, C/I/P/N as 1/0/0.5/0, a dict or a
    list as the mean of its members that are numbers; None when nothing is a number."""
    if isinstance(v, Mapping):
        v = list(v.values())
    if isinstance(v, list | tuple):
        nums = [n for n in (_number(x) for x in v) if n is not None]
        return sum(nums) / len(nums) if nums else None
    return _number(v)


class _Value(BaseModel):
    """A task's value as an export carries it; reports sum `amount` per `currency`."""

    amount: float | None = Field(default=None, ge=0, le=MAX_VALUE_AMOUNT, allow_inf_nan=False)
    currency: str = Field(pattern=r"^[A-Z]{3}$")


class _Assay(BaseModel):
    """What a sample exported by `assay export inspect` carries (`assay.interop.export.SampleMeta`)."""

    assay_task_id: str
    assay_task_hash: str
    level: str | None = None
    kinds: list[str]
    value: _Value | None = None
    task_meta: dict[str, str | None] = Field(default_factory=dict)


def _assay_meta(path: Path, i: int, meta: Mapping[str, Any]) -> _Assay | None:
    if "assay_task_id" not in meta:
        return None
    where = f"samples[{i}].metadata"
    try:
        got = _Assay.model_validate(dict(meta))
    except ValueError as e:
        raise InputError(path, where, f"malformed assay sample metadata: {e}") from None
    bad = [k for k in got.kinds if k not in KINDS]
    if not got.kinds or bad:
        raise InputError(path, f"{where}.kinds", f"not assay kinds: {got.kinds!r}")
    if got.level is not None and got.level not in LEVELS:
        raise InputError(path, f"{where}.level", f"unknown level {got.level!r}")
    return got


def _usage(mu: ModelUsage) -> Usage:
    return Usage(input_tokens=max(0, mu.input_tokens), output_tokens=max(0, mu.output_tokens),
                 cache_read_tokens=max(0, mu.input_tokens_cache_read or 0),
                 cache_write_tokens=max(0, mu.input_tokens_cache_write or 0))


def _usages(path: Path, i: int, sample: EvalSample, model: str,
            overrides: Mapping[str, Price]) -> tuple[UsageCost, UsageCost]:
    """(the eval model's usage and cost, every other model's: a model-graded scorer, a judge);
    a count past `runs.MAX_COUNT` is an InputError naming the sample and the model."""
    own = UsageCost()
    other = UsageCost()
    for name, mu in (sample.model_usage or {}).items():
        usage = bounded_usage(path, f"samples[{i}].model_usage.{safe_text(name)}", _usage(mu))
        part = UsageCost.of(usage, cost_usd(usage, model_price(name, overrides)))
        if name == model:
            own = own + part
        else:
            other = other + part
    return own, other


def _text(content: Any) -> str:
    if isinstance(content, str):
        return safe_text(content)
    parts = [getattr(c, "text", None) for c in content or []]
    return safe_text("\n".join(p for p in parts if isinstance(p, str)))


def _events(sample: EvalSample, note: str) -> tuple[list[Event], int]:
    """The sample's messages as assay transcript events, and the number of model turns."""
    events: list[Event] = [HarnessEvent(seq=0, t=0.0, note=note)]
    turns = 0
    for m in sample.messages:
        seq = len(events)
        if m.role == "system":
            events.append(SystemEvent(seq=seq, t=0.0, content=_text(m.content)))
        elif m.role == "user":
            events.append(UserEvent(seq=seq, t=0.0, content=_text(m.content)))
        elif m.role == "assistant":
            turns += 1
            calls = [safe_json({"id": c.id, "name": c.function, "arguments": c.arguments})
                     for c in (m.tool_calls or [])]
            events.append(AssistantEvent(seq=seq, t=0.0, content=_text(m.content), tool_calls=calls))
        elif m.role == "tool":
            events.append(ToolResultEvent(seq=seq, t=0.0, id=safe_text(m.tool_call_id or ""),
                                          name=safe_text(m.function or ""), output=_text(m.content)))
    if sample.error is not None:
        events.append(ErrorEvent(seq=len(events), t=0.0, source="inspect", reason=safe_text(sample.error.message)))
    return events, turns


def _options_hash(log: EvalLog) -> str:
    spec = log.eval
    return json_digest({"inspect": {
        "task": spec.task, "task_args": spec.task_args, "solver": spec.solver, "solver_args": spec.solver_args,
        "model": spec.model, "model_args": spec.model_args,
        "generate": spec.model_generate_config.model_dump(mode="json", exclude_none=True),
        "scorers": [s.name for s in (log.results.scores if log.results else [])]}})


def _started(sample: EvalSample, fallback: str) -> float:
    for raw in (sample.started_at, fallback):
        if raw:
            try:
                return datetime.fromisoformat(str(raw)).timestamp()
            except ValueError:
                continue
    return 0.0


def _grade(path: Path, i: int, scores: Mapping[str, Score], first: Score, assay: _Assay | None,
           kinds: list[str]) -> Grade:
    meta = first.metadata or {}
    if assay is not None and isinstance(meta.get("grade"), dict):
        where = f"samples[{i}].scores.{safe_text(next(iter(scores)))}.metadata.grade"
        return bounded_ints(path, where, Grade.from_flat(safe_json(meta["grade"]), kinds))
    checks = {safe_text(name): safe_json(s.value) for name, s in scores.items()}
    extra = {"inspect": safe_json({"scorer": next(iter(scores)), "answer": first.answer,
                                   "explanation": first.explanation})}
    return Grade(contract=ContractGrade(checks=checks, **extra))


def _sample_run(path: Path, i: int, log: EvalLog, sample: EvalSample, campaign: str,
                overrides: Mapping[str, Price]) -> Imported:
    spec = log.eval
    assay = _assay_meta(path, i, sample.metadata or {})
    kinds = assay.kinds if assay is not None else ["contract"]
    task_id = assay.assay_task_id if assay is not None else f"{spec.task}/{sample.id}"
    task_hash = assay.assay_task_hash if assay is not None else json_digest(
        {"task": spec.task, "input": sample.model_dump(mode="json", include={"input", "target", "choices"})})
    agent = AGENT_PREFIX + spec.model
    key = RunKey(campaign=campaign, task_id=safe_text(task_id), task_hash=task_hash, agent=safe_text(agent),
                 level=assay.level if assay is not None else None,
                 epoch=bounded(path, f"samples[{i}].epoch", sample.epoch, MAX_INTEGER), options_hash=_options_hash(log))
    usage, judge_usage = _usages(path, i, sample, spec.model, overrides)
    scores = dict(sample.scores or {})
    first = next(iter(scores.values()), None)
    end_reason: EndReason = "finished"
    if sample.limit is not None:
        end_reason = LIMIT_END.get(str(sample.limit.type), "finished")  # type: ignore[assignment]
    void_reason: str | None = None
    value = score_value(first.value) if first is not None else None
    if value is not None and abs(value) > MAX_SCORE:
        shown = f"{value:g}" if math.isfinite(value) else "a number past a float's range"
        raise InputError(path, f"samples[{i}].scores.{next(iter(scores))}.value",
                         f"{shown} is beyond ±{MAX_SCORE:g}; assay reports means of scores, which such a value overflows")
    if sample.error is not None:
        end_reason, void_reason = "harness_error", f"Inspect sample error: {safe_text(sample.error.message)[:2000]}"
    elif first is None:
        end_reason, void_reason = "grader_error", "the sample has no score"
    elif value is None:
        end_reason, void_reason = "grader_error", f"score value {str(first.value)[:200]!r} is not a number"
    grade = Grade()
    passed: bool | None = None
    if void_reason is None and first is not None and value is not None:
        grade = _grade(path, i, scores, first, assay, kinds)
        said = (first.metadata or {}).get("passed") if assay is not None else None
        threshold = metrics.SOLVED_THRESHOLD if "scenario" in kinds else metrics.PASS_THRESHOLD
        passed = said if isinstance(said, bool) else value >= threshold
        ju = (first.metadata or {}).get("judge_usage") if assay is not None else None
        if isinstance(ju, dict):
            where = f"samples[{i}].scores.metadata.judge_usage"
            try:
                judge_usage = judge_usage + bounded_usage(path, where, UsageCost.model_validate(ju))
            except ValueError as e:
                raise InputError(path, where, str(e)) from None
    note = f"imported from Inspect log {path.name}: task {spec.task}, sample {sample.id}, epoch {sample.epoch}"
    events, turns = _events(sample, safe_text(note))
    price = model_price(spec.model, overrides)
    record = RunRecord(
        run_id=uuid.uuid4().hex[:16], key=key, kinds=kinds, harness_version=HARNESS_VERSION, model=spec.model,
        prices=price.model_dump() if price is not None else None, sandbox="none",
        status="void" if void_reason else "done", end_reason=end_reason, void_reason=void_reason,
        score=None if void_reason else value, passed=passed,
        value=assay.value.model_dump() if assay is not None and assay.value is not None else None, usage=usage, judge_usage=judge_usage, grade=grade,
        final_message=safe_text(sample.output.completion if sample.output is not None else ""), turns=turns,
        started_at=_started(sample, spec.created), duration_s=float(sample.total_time or 0.0),
        options={"source": "inspect", "log": str(path), "eval_id": spec.eval_id, "inspect_run_id": spec.run_id,
                 "inspect_task": spec.task, "task_args": safe_json(spec.task_args)},
        task_meta=assay.task_meta if assay is not None else {"source": "inspect", "title": safe_text(spec.task),
                                                              "modality": "text", "execution": "single-step"})
    return record, events


def convert_log(path: Path, campaign: str, overrides: Mapping[str, Price] | None = None) -> list[Imported]:
    """Every sample x epoch of the log at `path` as a run record and its events (nothing stored)."""
    log = read_inspect_log(path)
    if log.samples is None:
        raise InputError(path, "samples", "the log holds no samples (was it written with sample logging off?)")
    prices = dict(overrides) if overrides is not None else price_overrides()
    out: list[Imported] = []
    for i, s in enumerate(log.samples):
        try:
            out.append(_sample_run(path, i, log, s, campaign, prices))
        except ValidationError as e:  # a value the log controls (a grade, metadata) that assay's records refuse
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise InputError(path, f"samples[{i}]", f"{where}: {err['msg']}" if where else err["msg"]) from None
    return out


MAX_MANIFEST_BYTES = 16 * 1024**2
"""The largest `eval-set.json` read (a set of thousands of tasks is a few MB)."""
EVAL_SET_MANIFEST = "eval-set.json"
"""What Inspect's `eval_set` writes beside its logs: the set's tasks, each with its task id."""


def log_files(paths: list[Path]) -> list[Path]:
    """The log files the given paths name, in order, each once: a log file as is; a folder,
    the logs under it (Inspect's own listing), only the newest log of each eval task when a
    task was run more than once (an eval set's retries; a finished one before one that was
    not); an `eval-set.json`, the newest log of each task the manifest lists."""
    out: list[Path] = []
    for path in paths:
        if path.name == EVAL_SET_MANIFEST and path.is_file():
            found = _newest_per_task(path.parent, _manifest_task_ids(path))
            if not found:
                raise InputError(path, "tasks", f"no log of any task this eval set lists in {path.parent}")
        elif path.is_dir():
            found = _newest_per_task(path, None)
            if not found:
                raise InputError(path, None, "the folder holds no Inspect log (.eval or .json)")
        else:
            found = [path]
        out.extend(p for p in found if p not in out)
    return out


def _manifest_task_ids(path: Path) -> set[str]:
    try:
        data = jsonlimits.loads(read_regular(path, MAX_MANIFEST_BYTES), max_chars=MAX_MANIFEST_BYTES)
    except (OSError, PathError, jsonlimits.JSONLimitError) as e:
        raise InputError(path, None, f"cannot read the eval set manifest: {e}") from None
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and isinstance(t.get("task_id"), str)
                                             for t in tasks):
        raise InputError(path, "tasks", "an eval set manifest holds a list of tasks, each with a task_id")
    return {t["task_id"] for t in tasks}


def _newest_per_task(folder: Path, task_ids: set[str] | None) -> list[Path]:
    """Per eval task id (of `task_ids` if given): its newest log, a successful one first."""
    log = _inspect_log_module()
    best: dict[str, tuple[tuple[bool, str], Path]] = {}
    for info in log.list_eval_logs(str(folder), recursive=True):
        path = Path(info.name.removeprefix("file://"))
        _check_log(path, folder)
        try:
            header = log.read_eval_log(str(path), header_only=True)
        except Exception as e:  # Inspect raises many kinds (zip, zstd, JSON, validation): each is a bad log
            raise InputError(path, None, _unreadable(e)) from None
        task_id = header.eval.task_id
        if task_ids is not None and task_id not in task_ids:
            continue
        rank = (header.status == "success", header.eval.created)
        if task_id not in best or rank > best[task_id][0]:
            best[task_id] = (rank, path)
    return sorted(path for _, path in best.values())


def convert_logs(paths: list[Path], campaign: str) -> list[Imported]:
    """Every log the paths name (`log_files`) read and converted (InputError naming the first
    bad one; nothing stored)."""
    overrides = price_overrides()
    return [run for p in log_files(paths) for run in convert_log(p, campaign, overrides)]


def import_inspect(paths: list[Path], store: Store, campaign: str) -> ImportResult:
    """Read and convert every log, then store the runs the campaign does not hold yet."""
    return store_imported(convert_logs(paths, campaign), store, campaign, paths)
