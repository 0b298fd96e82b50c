"""Calibration: a judge measured against people, on the answers the people scored.

A label describes one answer, so a judge is compared with people only on that answer. The
answers and labels come from the task files:

- OneMillion-Bench: `model_response.model_response_<i>.response_text` (`Task.responses
  ["response_<i>"]`) with each item's `scores["response_<i>_human_score_<k>"]` (person `k`);
- native tasks: an item's `human_labels` (`{labeller: met}`) are verdicts on the task's
  reference answer (`reference.answer`);
- stored runs (`assay calibrate --stored-labels`): the experts' labels given on a run's page
  in the web app (`assay.store.labels`) are verdicts on that run's final answer
  (`labelled_runs`; the answer is named `run:<run id>`).

Each labelled answer is judged as a run's final message would be (every judge item of the
task, the same prompts, so the same cache entries); the items people scored are compared. Items with a machine check are not the judge's and are left out. A
human (or judge) item is hit when its score is non-zero. Per judge, per domain and overall:

- `n_responses`: answers compared; `n_items`: item verdicts compared, one per person who
  scored the item; `na`: compared items the judge could not answer (left out of the rest);
- `item_agreement`: share of compared item verdicts on which the judge and the person agree;
- `pearson_r`, `p_value`: Pearson's r (two-sided p) between per-answer expert scores, the
  judge's against the people's, both by `metrics.expert_score` over the items both scored
  (several people on one item: the mean of the points they award); null below 3 answers or
  when either side is constant.

A judge that fails at the provider on an answer (`GraderError`) leaves that answer out and
is listed in `failed`; nothing is guessed.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from assay import metrics
from assay.errors import GraderError
from assay.grade.judge import Judge
from assay.grade.rubric import items_needing_judge
from assay.task.model import Task

__all__ = ["SCHEMA", "Agreement", "Calibration", "Comparison", "JudgeCalibration", "LabelledAnswer", "StoredAnswer",
           "calibrate", "labelled_answers", "labelled_runs", "summarise"]

SCHEMA: Literal["assay.calibration/1"] = "assay.calibration/1"
LABEL_KEY = re.compile(r"^(response_\d+)_human_score_(.+)$")
REFERENCE = "reference"
CONCURRENCY = 8


class LabelledAnswer(BaseModel):
    """One answer people scored: its text and each judge item's verdict per person."""

    task_id: str
    domain: str
    response: str  # `response_<i>`, or `reference` for a native task's reference answer
    text: str
    labels: dict[str, dict[str, bool]]  # item id -> person -> met


class Comparison(BaseModel):
    """One answer as the judge saw it beside the people's verdicts."""

    task_id: str
    domain: str
    response: str
    pairs: list[tuple[bool, bool]] = Field(default_factory=list)  # (judge hit, human hit) per item and person
    na: int = 0
    judge_score: float | None = None
    human_score: float | None = None


class Agreement(BaseModel):
    n_responses: int = 0
    n_items: int = 0
    item_agreement: float | None = None
    pearson_r: float | None = None
    p_value: float | None = None
    na: int = 0


class JudgeCalibration(BaseModel):
    judge: str
    overall: Agreement
    domains: dict[str, Agreement] = Field(default_factory=dict)
    failed: list[str] = Field(default_factory=list)  # "task_id/response: reason" of answers not judged


class Calibration(BaseModel):
    """`assay calibrate --json` (`assay.calibration/1`)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    schema_: Literal["assay.calibration/1"] = Field(default=SCHEMA, alias="schema")
    judges: list[JudgeCalibration] = Field(default_factory=list)
    answers: int = 0  # labelled answers found in the task files
    unmatched: list[str] = Field(default_factory=list)  # labels naming an answer the file does not hold


def labelled_answers(task: Task) -> tuple[list[LabelledAnswer], list[str]]:
    """(the labelled answers of a task, labels whose answer the task does not hold)."""
    by_response: dict[str, dict[str, dict[str, bool]]] = defaultdict(lambda: defaultdict(dict))
    for item in items_needing_judge(task):
        for key, met in item.human_labels.items():
            m = LABEL_KEY.match(key)
            response, person = (m.group(1), m.group(2)) if m else (REFERENCE, key)
            by_response[response][item.id][person] = met
    reference = task.policies.get(REFERENCE)
    texts = dict(task.responses)
    if reference is not None and reference.answer is not None:
        texts.setdefault(REFERENCE, reference.answer)
    found: list[LabelledAnswer] = []
    unmatched: list[str] = []
    for response, labels in sorted(by_response.items()):
        if response not in texts:
            unmatched.append(f"{task.id}/{response}")
            continue
        found.append(LabelledAnswer(task_id=task.id, domain=task.domain or "unknown", response=response,
                                    text=texts[response], labels={k: dict(v) for k, v in labels.items()}))
    return found, unmatched


class StoredAnswer(BaseModel):
    """A stored run's answer: which task (and its exact content) it answered, and the text."""

    run_id: str
    task_id: str
    task_hash: str
    text: str


def labelled_runs(tasks: Sequence[Task], answers: Sequence[StoredAnswer],
                  labels: Sequence[dict[str, object]]) -> tuple[list[tuple[Task, LabelledAnswer]], list[str]]:
    """The stored runs' answers experts labelled, as labelled answers of their tasks, and
    notes on labels that cannot be compared (the run's task is not among `tasks`, or has
    changed since the run: its items may no longer be the ones labelled)."""
    by_id = {t.id: t for t in tasks}
    runs = {a.run_id: a for a in answers}
    grouped: dict[str, dict[str, dict[str, bool]]] = defaultdict(lambda: defaultdict(dict))
    for row in labels:
        grouped[str(row["run_id"])][str(row["item_id"])][str(row["labeller"])] = bool(row["met"])
    found: list[tuple[Task, LabelledAnswer]] = []
    unmatched: list[str] = []
    for run_id, items in sorted(grouped.items()):
        answer = runs.get(run_id)
        task = by_id.get(answer.task_id) if answer is not None else None
        if answer is None or task is None:
            unmatched.append(f"run:{run_id} (its task is not among the tasks given)")
            continue
        if task.content_hash != answer.task_hash:
            unmatched.append(f"run:{run_id} (task {task.id} has changed since the run)")
            continue
        judged = {it.id for it in items_needing_judge(task)}
        kept = {item: people for item, people in items.items() if item in judged}
        if kept:
            found.append((task, LabelledAnswer(task_id=task.id, domain=task.domain or "unknown",
                                               response=f"run:{run_id}", text=answer.text, labels=kept)))
    return found, unmatched


async def compare(judge: Judge, task: Task, answer: LabelledAnswer) -> Comparison:
    """Judge one labelled answer; GraderError when the judge fails at the provider."""
    # Every judge item is asked about, as in a run (the same prompt and cache entries); the
    # labelled ones are compared.
    asked = items_needing_judge(task)
    verdicts, _, _ = await judge.judge_items(task, answer.text, asked)
    items = [it for it in asked if it.id in answer.labels]
    out = Comparison(task_id=task.id, domain=answer.domain, response=answer.response)
    judge_points: list[float] = []
    human_points: list[float] = []
    weights: list[float] = []
    for it in items:
        v = verdicts[it.id]
        people = answer.labels[it.id]
        if v.na or v.hit is None:
            out.na += len(people)
            continue
        out.pairs.extend((v.hit, met) for met in people.values())
        judge_points.append(it.weight if v.hit else 0.0)
        human_points.append(it.weight * sum(people.values()) / len(people))
        weights.append(it.weight)
    out.judge_score = metrics.expert_score(judge_points, weights)
    out.human_score = metrics.expert_score(human_points, weights)
    return out


def summarise(comparisons: Sequence[Comparison]) -> Agreement:
    pairs = [p for c in comparisons for p in c.pairs]
    scored = [c for c in comparisons if c.judge_score is not None and c.human_score is not None]
    r = p = None
    if len(scored) >= 3:
        try:
            r, p = metrics.pearson([c.judge_score or 0.0 for c in scored], [c.human_score or 0.0 for c in scored])
        except ValueError:  # one side constant: r is undefined
            r = p = None
    return Agreement(
        n_responses=len(comparisons), n_items=len(pairs),
        item_agreement=sum(1 for j, h in pairs if j == h) / len(pairs) if pairs else None,
        pearson_r=r, p_value=p, na=sum(c.na for c in comparisons))


async def _calibrate_one(judge: Judge, work: list[tuple[Task, LabelledAnswer]]) -> JudgeCalibration:
    sem = asyncio.Semaphore(CONCURRENCY)
    failed: list[str] = []

    async def one(task: Task, answer: LabelledAnswer) -> Comparison | None:
        async with sem:
            try:
                return await compare(judge, task, answer)
            except GraderError as e:
                failed.append(f"{answer.task_id}/{answer.response}: {e}")
                return None

    got = [c for c in await asyncio.gather(*(one(t, a) for t, a in work)) if c is not None]
    domains: dict[str, list[Comparison]] = defaultdict(list)
    for c in got:
        domains[c.domain].append(c)
    return JudgeCalibration(judge=judge.name, overall=summarise(got),
                            domains={d: summarise(cs) for d, cs in sorted(domains.items())}, failed=sorted(failed))


async def calibrate(tasks: Sequence[Task], judges: Sequence[Judge],
                    stored: Sequence[tuple[Task, LabelledAnswer]] = (), stored_unmatched: Sequence[str] = ()
                    ) -> Calibration:
    """Each judge (one model spec each) against the people, over every labelled answer (those
    of the task files, and `stored`: stored runs' answers labelled by experts)."""
    work: list[tuple[Task, LabelledAnswer]] = list(stored)
    unmatched: list[str] = list(stored_unmatched)
    for task in tasks:
        found, missing = labelled_answers(task)
        work.extend((task, a) for a in found)
        unmatched.extend(missing)
    results = [await _calibrate_one(j, work) for j in judges]
    return Calibration(judges=results, answers=len(work), unmatched=unmatched)
