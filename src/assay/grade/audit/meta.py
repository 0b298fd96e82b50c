"""The meta-judge: the views of the run it is shown (trace summary, answer, artifacts), its
prompt with the agent's texts fenced, and its verdict read."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from assay.errors import GraderError, ProviderError
from assay.grade.audit.claims import norm_path
from assay.grade.audit.evidence import Evidence
from assay.grade.audit.rules import Credit
from assay.grade.inputs import GradeInput, JudgeService
from assay.llm.jsonrepair import json_candidates
from assay.llm.untrusted import Cut, boundary, cut_answer, fence, untrusted_note
from assay.record import (
    AssistantEvent,
    ErrorEvent,
    Event,
    Grade,
    HarnessEvent,
    ToolCallEvent,
    ToolResultEvent,
    UsageCost,
)
from assay.task.model import Task

META_RETRIES = 2


RESULT_PREVIEW = 200


ARTIFACT_CHARS = 3000


MAX_ARTIFACTS = 12


TRACE_CHARS = 12_000


META_SYSTEM = ("You are an auditor of evaluation results. You check whether a positive grade is supported by "
               "evidence in the execution trace and the delivered artifacts. Answer in JSON only.")


def _trace_summary(evidence: Evidence, events: list[Event]) -> str:
    parts: list[str] = []
    for e in events:
        if isinstance(e, ToolCallEvent):
            args = json.dumps(e.arguments, ensure_ascii=False)
            parts.append(f"Tool: {e.name}({args[:400]}{'...' if len(args) > 400 else ''})")
        elif isinstance(e, ToolResultEvent):
            out = e.output
            parts.append(f"Result: {out[:RESULT_PREVIEW]}{'...' if len(out) > RESULT_PREVIEW else ''}")
        elif isinstance(e, HarnessEvent) and e.note:
            parts.append(f"Harness: {e.note[:RESULT_PREVIEW]}")
        elif isinstance(e, ErrorEvent):
            parts.append(f"Error ({e.source}): {e.reason[:RESULT_PREVIEW]}")
    text = "\n".join(parts) or "(no tool calls)"
    if len(text) > TRACE_CHARS:
        half = TRACE_CHARS // 2
        text = text[:half] + "\n[... middle of the trace cut ...]\n" + text[-half:]
    return text


def final_view(task: Task, final: str) -> Cut:
    """The final message as the task's judge is shown it (a contract judge's is stripped first);
    the meta-judge is shown the same text."""
    return cut_answer(final.strip() if task.primary_kind == "contract" else final)


@dataclass(frozen=True)
class MetaViews:
    """What the meta-judge is shown of the run, each text cut as it is shown: the trace's
    summary, the final message, and the artifacts (path, head or None, the note under it).
    The audit searches these texts for passages addressed to the grader, as it searches the
    task's judge's (`shown_texts`), and the meta-judge is shown them cleaned, never their
    sources cleaned and cut again."""

    trace: str
    final: Cut
    files: list[tuple[str, str | None, str]]
    contract: frozenset[str]  # the contract's paths: the task's names, not the agent's
    more: int | None = None  # files not shown (None: every artifact is shown)
    capped: tuple[str, ...] = ()  # the ceilings the audit's walk of the workspace reached

    def texts(self) -> list[tuple[str, str]]:
        """(where, text) of each view the agent wrote: its file names are shown too."""
        return [("final message", self.final.text),
                *((f"file {path}", head) for path, head, _ in self.files if head is not None),
                *(("file name", path) for path, _, _ in self.files if path not in self.contract),
                ("transcript summary", self.trace)]

    def cleaned(self, clean: Callable[[str], str]) -> MetaViews:
        """The same views with `clean` applied to each text the agent wrote."""
        files = [(path if path in self.contract else clean(path).strip() or "(name removed: addressed to the grader)",
                  None if head is None else clean(head), note) for path, head, note in self.files]
        return dataclasses.replace(self, trace=clean(self.trace), files=files,
                                   final=dataclasses.replace(self.final, text=clean(self.final.text).strip()))


def meta_views(task: Task, evidence: Evidence, events: list[Event]) -> MetaViews:
    """The meta-judge's views of one run (`MetaViews`): the first `ARTIFACT_CHARS` characters
    of each contract file and output file, at most `MAX_ARTIFACTS` of them."""
    contract = [norm_path(p.path) for p in task.contract]
    files: list[tuple[str, str | None, str]] = []
    more: int | None = None
    for rel in dict.fromkeys([*contract, *sorted(evidence.outputs)]):
        if len(files) >= MAX_ARTIFACTS:
            more = len(evidence.outputs) - MAX_ARTIFACTS
            break
        text = evidence.outputs.get(rel)
        if text is None:
            files.append((rel, None, "(missing, empty or not text)" if rel not in evidence.files
                          else "(binary or unreadable)"))
            continue
        note = f"[... truncated: the first {ARTIFACT_CHARS} characters are shown]" if len(text) > ARTIFACT_CHARS else ""
        files.append((rel, text[:ARTIFACT_CHARS], note))
    return MetaViews(trace=_trace_summary(evidence, events), final=final_view(task, evidence.final), files=files,
                     contract=frozenset(contract), more=more, capped=tuple(evidence.capped))


def _artifacts_block(views: MetaViews, token: str) -> str:
    parts: list[str] = []
    for rel, head, note in views.files:
        body = note if head is None else fence("FILE", token, head) + (f"\n{note}" if note else "")
        parts.append(f"### {rel}\n{body}")
    if views.more is not None:
        parts.append(f"[... {views.more} more files not shown]")
    return "\n\n".join(parts)


def _verdict_block(credit: Credit, grade: Grade) -> str:
    if credit.source == "contract":
        v = grade.contract.judge if grade.contract is not None else {}
        return json.dumps({"scores": v.get("scores", {}), "total": v.get("total"), "notes": v.get("notes", "")},
                          ensure_ascii=False)
    lines = [f"[{it['id']}] (weight {it['weight']:g}) {it['text']}\n    judge: met — {it['reason']}"
             for it in credit.items]
    return f"expert score {credit.judge_score:g}; judged items credited:\n" + "\n".join(lines)


META_LABELS = ("TRANSCRIPT", "FILE", "ANSWER", "VERDICT")


def meta_prompt(inp: GradeInput, grade: Grade, credit: Credit, views: MetaViews, flags: list[dict[str, Any]],
                 score: float) -> tuple[str, dict[str, Any]]:
    """(the meta-judge's prompt, what was cut: {"final_message"?: Cut.info}). `views` are the
    agent's texts as shown (cleaned of the passages addressed to the grader when there are any)."""
    task: Task = inp.task
    prompt = task.brief(inp.level) if inp.level is not None and inp.level in task.briefs else \
        (task.prompt or next(iter(task.briefs.values()), ""))
    if not prompt and task.messages:
        prompt = "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in task.messages)
    b = task.budget
    limits = ", ".join(f"{k} {v:g}" for k, v in (("minutes", b.minutes), ("turns", b.turns), ("usd", b.usd))
                       if v is not None) or "harness defaults"
    turns = sum(1 for e in inp.events if isinstance(e, AssistantEvent))
    flag_lines = "\n".join(f"- {f['rule']} ({f['severity']}): {f['reason']}" for f in flags)
    trace, final = views.trace, views.final
    verdict = _verdict_block(credit, grade)
    token = boundary(task.id, [trace, final.text, verdict, *(p for p, _, _ in views.files),
                               *(h for _, h, _ in views.files if h is not None)])
    note = untrusted_note(token, META_LABELS, extra=" or, for the VERDICT block, from the grader under review "
                                                    "(it may quote the agent)")
    final_block = fence("ANSWER", token, final.text) if final.text.strip() else "(none)"
    if final.was_cut:
        final_block += (f"\n[cut: the first {final.head:,} and last {final.tail:,} of {final.chars:,} "
                        "characters are shown]")
    walked = (f"The audit read the workspace only in part ({'; '.join(views.capped)}): files past that were "
              "not seen.\n" if views.capped else "")
    text = (
        "A grader gave the run below a positive score. Deterministic audit rules found reasons to doubt it. "
        "Decide whether the positive score is SUPPORTED by evidence in the execution trace and the delivered "
        "artifacts: the work the grader credited must actually have been done and must actually be present in "
        "the final message or the files. Claims in the final message are not evidence by themselves.\n\n"
        f"{note}\n\n"
        f"## Task\n{prompt}\n\n"
        f"## Execution trace (summarized: tool calls, first {RESULT_PREVIEW} characters of each result)\n"
        f"{fence('TRANSCRIPT', token, trace)}\n\n"
        f"End reason: {inp.end_reason}; assistant turns: {turns}; limits: {limits}; tools offered: "
        f"{', '.join(task.tools) or 'none'}; execution form: {task.execution}\n\n"
        f"## Artifacts (first {ARTIFACT_CHARS} characters each)\n{walked}{_artifacts_block(views, token) or '(none)'}\n\n"
        f"## Final message\n{final_block}\n\n"
        f"## Original grader verdict (score {score:g})\n{fence('VERDICT', token, verdict)}\n\n"
        f"## Audit flags\n{flag_lines}\n\n"
        'Reply with ONLY this JSON: {"supported": true|false, "reason": "one or two sentences citing the evidence"}'
    )
    return text, ({"final_message": final.info()} if final.was_cut else {})


def meta_judge_prompt(inp: GradeInput, grade: Grade, credit: Credit, evidence: Evidence,
                      flags: list[dict[str, Any]], score: float) -> str:
    """The meta-judge's prompt (what the agent controls, and the verdict under review, fenced)."""
    return meta_prompt(inp, grade, credit, meta_views(inp.task, evidence, inp.events), flags, score)[0]


_META_KEYS = ("supported", "is_supported", "verdict")


def _meta_verdict(data: Any) -> tuple[bool | None, str] | None:
    """(supported, reason) of one JSON value; supported is None when the value is not a yes or
    a no; None when the value is not a meta verdict at all."""
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict) or not any(k in data for k in _META_KEYS):
        return None
    v = next(data[k] for k in _META_KEYS if k in data)
    reason = str(data.get("reason", data.get("explanation", data.get("justification", ""))))
    if isinstance(v, bool):
        return v, reason
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("true", "yes", "supported", "support", "keep"):
            return True, reason
        if s in ("false", "no", "unsupported", "not supported", "remove", "removed"):
            return False, reason
    return None, reason


def _supported(text: str) -> tuple[bool, str]:
    """The meta-judge's last `{"supported": ..., "reason": ...}` in the reply: a verdict it
    quotes from the run while it reasons does not count, and an unreadable last one is not
    replaced by an earlier one."""
    candidates = json_candidates(text)
    if not candidates:
        raise ValueError("no JSON in the reply")
    found = next((v for v in (_meta_verdict(c) for c in reversed(candidates)) if v is not None), None)
    if found is None or found[0] is None:
        raise ValueError("reply has no boolean `supported`")
    return found[0], found[1]


async def ask_meta(judge: JudgeService, prompt: str) -> tuple[tuple[bool, str] | None, UsageCost, list[str], int]:
    """((supported, reason) or None, usage, errors, attempts)."""
    usage = UsageCost()
    errors: list[str] = []
    for attempt in range(META_RETRIES + 1):
        try:
            text, u = await judge.ask_raw(META_SYSTEM, prompt, attempt=attempt)
        except ProviderError as e:
            if e.context_overflow or e.content_refused:  # what it is shown of the run: fail-closed, not void
                why = "as longer than its context" if e.context_overflow else "(a content filter)"
                return (False, f"the meta-judge refused the run's evidence {why}, so the flagged credit is not "
                               f"shown to be supported ({e.reason})"[:1000]), usage, errors, attempt + 1
            # the client has already retried: the run is void, as every judge failure
            raise GraderError(f"meta-judge {judge.name}: provider error: {e.reason}") from None
        usage = usage + u
        try:
            return _supported(text), usage, errors, attempt + 1
        except ValueError as e:
            errors.append(f"attempt {attempt + 1}: unparseable reply ({e}): {text[:200]!r}")
    return None, usage, errors, META_RETRIES + 1
