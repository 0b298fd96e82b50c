"""Rubric grading: each item met or not (machine check or judge), then the expert score.

Per-tag scores use the same formula over the items carrying the tag, so a tag breakdown can
never disagree with the total.
"""

from __future__ import annotations

from pydantic import BaseModel

from assay import metrics
from assay.grade.checks import evaluate_check
from assay.llm.passages import skeleton
from assay.record import ItemGrade, RubricGrade
from assay.task.model import RubricItem, Task


class ItemVerdict(BaseModel):
    id: str
    weight: float
    tag: str | None
    hit: bool | None  # None = NA (the judge could not answer)
    na: bool = False
    check: bool  # graded by a machine check
    reason: str = ""


def machine_verdicts(task: Task, answer: str) -> dict[str, ItemVerdict]:
    """The machine-checked items' verdicts. The answer is also read as a model reads it
    (`passages.skeleton`: invisible characters dropped, lookalike letters as Latin, letters
    spaced out joined): a penalty is hit when its check holds on either text, and a
    `not_regex` fails on either, so a word the agent hid from the pattern, and not from a
    reader, is still found; what a positive item requires is looked for in the text as written."""
    assert task.rubric is not None
    out: dict[str, ItemVerdict] = {}
    read_through = any(it.check is not None and (it.weight < 0 or it.check.not_regex) for it in task.rubric.items)
    read_as = skeleton(answer)[0] if read_through else answer
    for item in task.rubric.items:
        if item.check is not None:
            met, reason = evaluate_check(item.check, answer, read_as if read_as != answer else None)
            if item.weight < 0 and not met and read_as != answer:
                met, seen = evaluate_check(item.check, read_as)
                if met:
                    reason = f"{seen} (in the answer as a model reads it: invisible or lookalike characters read through)"
            out[item.id] = ItemVerdict(id=item.id, weight=item.weight, tag=item.tag, hit=met, check=True,
                                       reason=reason)
    return out


def worst_verdicts(task: Task, reason: str) -> dict[str, ItemVerdict]:
    """The machine-checked items as if every check went against the answer (positives not met,
    negatives hit): what an answer gets whose checks could not be decided (they passed their
    time or memory on it), so failing the checks never beats being checked."""
    assert task.rubric is not None
    return {it.id: ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=it.weight < 0, check=True, reason=reason)
            for it in task.rubric.items if it.check is not None}


def items_needing_judge(task: Task) -> list[RubricItem]:
    return [it for it in task.rubric.items if it.check is None] if task.rubric else []


def _free_tag(tags: list[str]) -> str | None:
    """The report's `tag` for an item without a capability tag (HealthBench): its `axis:` tag, else its first."""
    return next((t for t in tags if t.startswith("axis:")), tags[0] if tags else None)


def _awarded(item: RubricItem, verdict: ItemVerdict) -> float:
    """Points an item gives: its weight when met. An NA item (no readable verdict) gives 0, as
    upstream counts NA; it stays `hit: null, na: true` in the grade, never a silent "not hit"."""
    return item.weight if verdict.hit and not verdict.na else 0.0


def score_items(task: Task, verdicts: dict[str, ItemVerdict]) -> RubricGrade:
    """Expert score (or HealthBench's unclipped per-example score) and per-tag scores."""
    assert task.rubric is not None
    items = task.rubric.items
    awarded = [_awarded(it, verdicts[it.id]) for it in items]
    weights = [it.weight for it in items]
    if task.rubric.scoring == "unclipped_mean":
        score = metrics.unclipped_score(awarded, weights)
    else:
        score = metrics.expert_score(awarded, weights)
    tag_rows = []
    for it, a in zip(items, awarded, strict=True):
        tags = ([it.tag] if it.tag else []) + list(it.tags)
        tag_rows.append((a, it.weight, tags))
    tag_values = metrics.tag_scores(tag_rows, clipped=task.rubric.scoring == "clipped")
    if task.rubric.scoring == "unclipped_mean":
        # HealthBench: an example tag (`theme:…`) scores the example's overall score.
        for tag in task.tags:
            tag_values.setdefault(tag, score)
    return RubricGrade(
        expert_score=score, scoring=task.rubric.scoring,
        tags=tag_values,
        na=sum(1 for v in verdicts.values() if v.na),
        items=[ItemGrade(id=it.id, weight=it.weight, tag=it.tag or _free_tag(it.tags), tags=list(it.tags),
                         hit=verdicts[it.id].hit, na=verdicts[it.id].na, check=verdicts[it.id].check,
                         reason=verdicts[it.id].reason) for it in items])
