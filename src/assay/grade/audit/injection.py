"""Passages addressed to the grader: the texts any judge is shown gathered once, searched by
the rules and the injection screen, and the run judged again without them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.grade.audit.evidence import Evidence, collect_evidence
from assay.grade.audit.meta import MetaViews, final_view, meta_views
from assay.grade.audit.offload import off_loop
from assay.grade.audit.rules import asked_text, echo_flags, injection_texts, judge_credit, make_flag
from assay.grade.contract_judge import JudgeViews, judge_contract, judge_views
from assay.grade.injection_screen import KINDS, Injection, shown
from assay.grade.inputs import GradeInput, JudgeService
from assay.grade.openclaw import to_openclaw
from assay.grade.rubric import ItemVerdict, items_needing_judge, score_items
from assay.llm.passages import PassageFinder
from assay.llm.untrusted import cut_answer
from assay.record import (
    Event,
    Grade,
    JudgeInfo,
    RubricGrade,
    UsageCost,
)
from assay.task.model import Task

MAX_PASSAGES = 20  # the most passages a flag lists (all of them are removed before the re-judge)


VERDICT_NOTES = 500  # characters of a contract judge's notes a flag keeps


def own_text(task: Task) -> str:
    """The task's own text: what the agent was asked and what it is graded by. A passage rule
    that matches it is not applied (a task about grading may well say "rubric items are met")."""
    g = task.grading
    parts = [asked_text(task), *(it.text for it in (task.rubric.items if task.rubric else []))]
    if g is not None:
        parts += [g.judge_rubric or "", *g.criteria, g.expected_behavior or ""]
    return "\n".join(parts)


def grading_items(task: Task) -> list[str]:
    """The texts of what the task is graded by, item by item: rubric items and criteria."""
    g = task.grading
    return [*(it.text for it in (task.rubric.items if task.rubric else [])), *(g.criteria if g is not None else [])]


def judge_texts(task: Task, events: list[Event], final_message: str, workspace: Path | None
                ) -> list[tuple[str, str]]:
    """(where, text) of what the task's judge is shown of the agent's work, cut as it is shown:
    a rubric judge the final message; a contract judge its transcript summary, the final
    message and the head of each contract file (`contract_grading.JudgeViews`)."""
    if task.primary_kind == "contract":
        transcript = to_openclaw(events, task_id=task.id, final_message=final_message)
        return judge_views(task, transcript, final_message, workspace).texts()
    return [("final message", final_view(task, final_message).text)]


@dataclass(frozen=True)
class _Seen:
    """What the audit reads of a run, gathered in a worker process."""

    evidence: Evidence
    texts: list[tuple[str, str]]  # (where, text): every text of the run a judge is shown, cut as shown
    screened: list[tuple[str, str]]  # the same, less those that lie inside another one (the screen's)
    meta: MetaViews


def gather(task: Task, workspace: Path | None, events: list[Event], final_message: str, commands: list[str],
            max_entries: int) -> _Seen:
    """The evidence and every text of the run any judge is shown: the task's judge's views
    and the meta-judge's, each once. The rules search them all, exactly as they are shown;
    the screen is shown those that do not lie inside another (what it quotes from one is
    found, and removed, in every text). Reads the agent's files: in a worker process."""
    evidence = collect_evidence(task, workspace, events, final_message, commands, max_entries=max_entries)
    meta = meta_views(task, evidence, events)
    texts: list[tuple[str, str]] = []
    for where, text in [*judge_texts(task, events, final_message, workspace), *meta.texts()]:
        if text.strip() and all(text != t for _, t in texts):
            texts.append((where, text))
    screened = [(w, t) for i, (w, t) in enumerate(texts)
                if not any(j != i and len(u) > len(t) and t in u for j, (_, u) in enumerate(texts))]
    return _Seen(evidence=evidence, texts=texts, screened=screened, meta=meta)


def find_injection(task: Task, evidence: Evidence, texts: Sequence[tuple[str, str]] = ()) -> Injection:
    """Passages addressed to the grader in `texts` ((where, text), as judges are shown them;
    by default the answer's `injection_texts`), each once, in where-first order."""
    finder = PassageFinder(own_text(task), grading_items(task))
    seen: set[str] = set()
    passages: list[dict[str, Any]] = []
    for where, text in texts or injection_texts(task, evidence):
        for p in finder.find(text):
            key = " ".join(p.text.split())
            if key in seen:
                continue
            seen.add(key)
            passages.append({"where": where, "kind": p.kind, "detector": "rules", "text": shown(p.text),
                             "chars": len(p.text)})
    return Injection(finder=finder, passages=passages)


def _place(where: str) -> str:
    """Where a passage is, as a flag's reason says it: never a file's name (the agent chose it,
    and the reason reaches the meta-judge)."""
    if where == "file name":
        return "a file's name"
    if where.startswith("file "):
        return "a file"
    return f"the {where}"


def _describe(passages: list[dict[str, Any]]) -> str:
    """Which kinds of passage, where: never the agent's words (the reason reaches the meta-judge)."""
    groups: dict[str, list[str]] = {}
    for p in passages:
        what = " and ".join(KINDS[k] for k in p["kind"].split(","))
        place = groups.setdefault(_place(p["where"]), [])
        if what not in place:
            place.append(what)
    return "; ".join(f"{' and '.join(kinds)} in {where}" for where, kinds in list(groups.items())[:5])


def injection_flag(injection: Injection) -> dict[str, Any]:
    n = len(injection.passages)
    flag = make_flag("judge_injection", f"the answer holds {n} passage{'s' if n != 1 else ''} addressed to the grader: "
                                    + _describe(injection.passages))
    flag["passages"] = injection.passages[:MAX_PASSAGES]
    flag["rejudged"] = False
    return flag


def rule_judge_injection(task: Task, evidence: Evidence) -> list[dict[str, Any]]:
    """Text addressed to the grader (instructions, verdict-shaped blocks, claims that the rubric
    is met, orders to ignore the instructions, role and boundary markers), and rubric text
    repeated verbatim: attempts to steer the judge, made visible. `audit_run` has the first
    kind judged again without those passages; a repeated rubric text goes to the meta-judge."""
    injection = find_injection(task, evidence)
    return [*([injection_flag(injection)] if injection.passages else []), *echo_flags(task, evidence)]


def has_judge_part(task: Task, grade: Grade) -> bool:
    """Whether the score has a judge part a passage could have swayed: a rubric with judged
    items (credited or not: a negative item left unmet counts too), or a judged contract."""
    if task.primary_kind == "rubric":
        return grade.rubric is not None and any(not it.check for it in grade.rubric.items)
    return judge_credit(task, grade) is not None


def _rubric_verdict(rubric: RubricGrade) -> dict[str, Any]:
    return {"score": rubric.expert_score, "items": {it.id: (None if it.na else it.hit) for it in rubric.items}}


def _contract_verdict(verdict: dict[str, Any]) -> dict[str, Any]:
    return {"total": verdict.get("total"), "scores": dict(verdict.get("scores") or {}),
            "notes": str(verdict.get("notes") or "")[:VERDICT_NOTES]}


def cleaned_meta(views: MetaViews, injection: Injection) -> MetaViews:
    """The meta-judge's views without the passages (worked off the event loop)."""
    return views.cleaned(injection.clean)


def _cleaned_views(task: Task, transcript: list[dict[str, Any]], final_message: str, workspace: Path | None,
                   injection: Injection) -> tuple[JudgeViews, bool]:
    """The contract judge's views of the run without the passages, and whether any view lost
    one (worked off the event loop)."""
    views = judge_views(task, transcript, final_message, workspace)
    cleaned = views.cleaned(injection.clean)
    return cleaned, cleaned != views


async def rejudge(inp: GradeInput, grade: Grade, score: float, injection: Injection, judge: JudgeService
                   ) -> tuple[float, dict[str, Any], UsageCost]:
    """The run judged again, by the same judge on the same items or contract, with the passages
    removed from every text the judge is shown: (the lower score, what the flag records, usage).
    The lower verdict is written into `grade`. A provider failure raises GraderError, as for the
    first verdict."""
    task: Task = inp.task
    if task.primary_kind == "rubric":
        assert grade.rubric is not None
        verdicts = {it.id: ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=it.hit, na=it.na, check=True,
                                       reason=it.reason) for it in grade.rubric.items if it.check}
        # The answer as the judge was shown it, cleaned: never cleaned whole and cut again, which
        # would bring text from the cut middle (searched by nobody) into view.
        first_shown = cut_answer(inp.final_message).text
        shown_answer = await off_loop(injection.clean, first_shown)
        changed = shown_answer != first_shown
        judged, usage, info = await judge.judge_items(task, shown_answer, items_needing_judge(task))
        verdicts.update(judged)
        again = score_items(task, verdicts)
        again.judge_info = JudgeInfo.model_validate(info)
        without = float(again.expert_score or 0.0)
        record: dict[str, Any] = {"verdict_with": _rubric_verdict(grade.rubric),
                                  "verdict_without": _rubric_verdict(again)}
        if without < score:
            grade.rubric = again
    else:
        assert grade.contract is not None and task.grading is not None
        first = grade.contract.judge
        transcript = to_openclaw(inp.events, task_id=task.id, final_message=inp.final_message)
        views, changed = await off_loop(_cleaned_views, task, transcript, inp.final_message, inp.workspace, injection)
        verdict, usage = await judge_contract(inp, transcript, views=views)
        g = task.grading
        wsum = g.weight_automated + g.weight_judge
        change = float(verdict["total"]) - float(first.get("total") or 0.0)
        without = verdict["total"] if g.type == "judge" else score + g.weight_judge * change / wsum
        without = min(1.0, max(0.0, float(without)))
        record = {"verdict_with": _contract_verdict(first), "verdict_without": _contract_verdict(verdict)}
        if without < score:
            grade.contract.judge = {**verdict, "without_passages": True}
    kept = "without" if without < score else "with"
    record.update(rejudged=True, score_with=score, score_without=without, kept=kept, rejudge_judge=judge.name,
                  judge_shown=changed)
    return min(score, without), record, usage
