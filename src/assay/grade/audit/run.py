"""One audit of a run: the rules, the passages judged again without, the meta-judge, the decision."""

from __future__ import annotations

from typing import Any

from assay.config import settings
from assay.grade.audit.injection import (
    cleaned_meta,
    find_injection,
    gather,
    has_judge_part,
    injection_flag,
    own_text,
    rejudge,
)
from assay.grade.audit.meta import ask_meta, meta_prompt
from assay.grade.audit.offload import Undecided, off_loop, undecided_flag
from assay.grade.audit.rules import deterministic_flags, judge_credit
from assay.grade.injection_screen import Injection, screen_injection
from assay.grade.inputs import GradeInput
from assay.record import (
    Audit,
    AuditFlag,
    Fault,
    Grade,
    UsageCost,
)
from assay.task.model import Task


async def audit_run(inp: GradeInput, grade: Grade, score: float | None, judge_usage: UsageCost
                    ) -> tuple[float | None, Audit, UsageCost]:
    """(audited score, the audit, judge usage incl. the re-judge and the meta-judge) for one
    graded run. Passages addressed to the grader are handled first: the run is judged again
    without them and the lower verdict kept (written into `grade`); the rules then look at
    what the kept verdict credits. Evidence the audit cannot read within its worker's limits
    removes the judge's credit (`audit_undecided`) and is recorded as a fault of the run
    (`grade.faults`, part `audit`): the agent's files or text made the audit fail."""
    audit = Audit(pre_audit_score=score)
    if score is None or score <= 0:
        return score, audit, judge_usage
    flags: list[dict[str, Any]] = []
    try:
        return await _audit(inp, grade, score, judge_usage, audit, flags)
    except Undecided as e:
        grade.faults.append(Fault(part="audit", reason=f"the evidence audit on this run's text and files {e}"))
        return _finish(audit, [*flags, undecided_flag(str(e))], score, judge_usage, remove=True)


async def _audit(inp: GradeInput, grade: Grade, score: float, judge_usage: UsageCost, audit: Audit,
                 flags: list[dict[str, Any]]) -> tuple[float | None, Audit, UsageCost]:
    task: Task = inp.task
    judge = inp.judge
    if not has_judge_part(task, grade):  # no judge part (then no judge credit either)
        return _finish(audit, flags, score, judge_usage, remove=False)
    audit.audited = True
    seen = await off_loop(gather, task, inp.workspace, inp.events, inp.final_message, inp.commands,
                           settings().copy_max_files)
    evidence = seen.evidence
    if evidence.capped:
        audit.workspace_capped = list(evidence.capped)
    found = await off_loop(find_injection, task, evidence, seen.texts)
    if judge is not None and inp.injection_screen:
        screened = await screen_injection(judge, task.id, seen.screened, own_text(task), found)
        judge_usage = judge_usage + screened.usage
        audit.screen = screened.record()
        found = screened.into(found)
        flags += screened.flags()
    injection: Injection | None = None
    if found.passages:
        injection = found
        flag = injection_flag(injection)
        if judge is not None:
            score, record, usage = await rejudge(inp, grade, score, injection, judge)
            judge_usage = judge_usage + usage
            flag.update(record)
            them = "them" if len(injection.passages) > 1 else "it"
            flag["reason"] += (f"; judged again without {them}: {record['score_without']:.4g} (with: "
                               f"{record['score_with']:.4g}), the lower verdict ({record['kept']} the passages) is kept"
                               if record["judge_shown"] else
                               f"; the judge was not shown {them} (they are in what the audit reads), so its "
                               f"verdict stands: {record['score_with']:.4g}")
        flags.append(flag)
    credit = judge_credit(task, grade) if score > 0 else None
    if credit is None:
        return _finish(audit, flags, score, judge_usage, remove=False)
    flags += await off_loop(deterministic_flags, task, inp.workspace, inp.end_reason, evidence, credit)
    # A passage flag whose re-judge is done needs no review of its own; the rest do.
    if all(f.get("rejudged") for f in flags):
        return _finish(audit, flags, score, judge_usage, remove=False)
    hard = any(f["severity"] == "hard" for f in flags)
    remove = hard
    if judge is not None:
        views = seen.meta if injection is None else await off_loop(cleaned_meta, seen.meta, injection)
        prompt, cuts = meta_prompt(inp, grade, credit, views, flags, score)
        verdict, usage, errors, attempts = await ask_meta(judge, prompt)
        judge_usage = judge_usage + usage
        meta: dict[str, Any] = {"judge": judge.name, "attempts": attempts, "usage": usage.model_dump()}
        if cuts:
            meta["cut"] = cuts
        if verdict is not None:
            supported, reason = verdict
            remove = not supported
            meta.update(supported=supported, reason=reason)
            for f in flags:
                f["removed"] = remove
                f["meta_reason"] = reason
        else:
            meta.update(supported=None, failed=True, error="; ".join(errors),
                        fallback="hard flags remove the positive, soft flags keep it")
            for f in flags:
                f["removed"] = f["severity"] == "hard"
                f["meta_reason"] = "meta-judge failed: " + (errors[-1] if errors else "no reply")
        if errors and verdict is not None:
            meta["error"] = "; ".join(errors)
        audit.meta_judge = meta
    else:
        for f in flags:
            f["removed"] = f["severity"] == "hard"
    return _finish(audit, flags, score, judge_usage, remove=remove)


def _finish(audit: Audit, flags: list[dict[str, Any]], score: float, judge_usage: UsageCost, *, remove: bool
            ) -> tuple[float | None, Audit, UsageCost]:
    audit.flags = [AuditFlag.model_validate(f) for f in flags]
    if remove:
        audit.removed = 1
        score = 0.0
    return score, audit, judge_usage
