"""A contract task's judge: what it is shown of the run, its prompt, and how its reply is read.

Judge (`grading.type` judge / hybrid): the DareBench judge contract. The prompt holds the
task prompt, the expected behaviour, a transcript summary (each tool call with its first
1000 characters of arguments, the first 200 characters of each result; the whole summary
cut to 20,000 characters, head and tail), the final message (cut to `ANSWER_TOKENS`, head and
tail), the first 4000 characters of each contract file that exists, and the rubric. What the
agent controls (the summary, the final message, each file) is fenced between boundary
markers with a token derived from the task and those texts, and the prompt says it is
untrusted data, never instructions (`assay.llm.untrusted`); a cut is recorded in
`grade.judge["cut"]`. The reply must be `{"scores": {...}, "total": x,
"notes": "..."}`; the reply's LAST verdict-shaped JSON value counts (a verdict the judge
quotes from the agent's text while it reasons does not). Also accepted: `criteria_scores`,
`score` (for total), `justification` / `reasoning` / `explanation` (for notes), a flat object
of criterion scores (the total is then their mean, as upstream does when `total` is
missing), and as a fallback on prose the last `total: x` (or `overall`/`final`, then
`score: x`) in the text. The total is capped to
[0, 1]; a total in (1, 100] is read as a percentage (divided by 100) when the criterion
scores look like percentages too (none given, or some above 1 and all within [0, 100]),
otherwise it is capped at 1 as upstream does; either is stated in the grade
(`grade.judge.read_as_percent` / `capped`, with the judge's own `judge_total`). An unparseable reply is asked again (up to
2 retries, each a fresh call); if it stays unparseable the grade raises GraderError, never
a silent 0. A judge provider failure also raises GraderError.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from assay.errors import GraderError, ProviderError
from assay.fs.paths import PathError
from assay.fs.reads import read_workspace_file
from assay.grade.inputs import GradeInput
from assay.llm.jsonrepair import json_candidates
from assay.llm.untrusted import Cut, boundary, cut_answer, cut_text, fence, untrusted_note
from assay.record import UsageCost
from assay.task.model import Task

__all__ = ["ARTIFACT_CHARS", "JudgeViews", "judge_contract", "judge_prompt", "judge_views", "parse_judge_reply"]

JUDGE_RETRIES = 2
ARTIFACT_CHARS = 4000
MAX_ARTIFACT_READ = 20 * 1024 * 1024
RESULT_PREVIEW = 200
ARGS_PREVIEW = 1000
TRANSCRIPT_CHARS = 20_000

JUDGE_SYSTEM = ("You are a grading function and a strict evaluator. Your only job is to output a single "
                "JSON object.")
Clean = Callable[[str], str]
"""Removes the passages addressed to the grader from a text the agent controls."""


def _summary(transcript: list[dict[str, Any]], prompt: str) -> str:
    parts: list[str] = []
    for ev in transcript:
        if ev.get("type") != "message":
            continue
        msg = ev.get("message", {})
        role = msg.get("role")
        if role == "assistant":
            for item in msg.get("content", []):
                if item.get("type") == "toolCall":
                    args = json.dumps(item.get("arguments", {}), ensure_ascii=False)
                    more = "..." if len(args) > ARGS_PREVIEW else ""
                    parts.append(f"Tool: {item.get('name')}({args[:ARGS_PREVIEW]}{more})")
        elif role == "toolResult":
            content = msg.get("content", [])
            text = content[0].get("text", "") if content and isinstance(content[0], dict) else ""
            parts.append(f"Result: {text[:RESULT_PREVIEW]}")
        elif role == "user":
            text = str(msg.get("content", ""))
            if text.strip() and text.strip() != prompt.strip():
                parts.append(f"User: {text[:RESULT_PREVIEW]}")
    return "\n".join(parts)


def _artifacts(task: Task, workspace: Path | None) -> list[tuple[str, str | None, str]]:
    """(path, its head as the judge is shown it, or None for a binary file, a note) of each
    contract file that exists."""
    if workspace is None:
        return []
    out: list[tuple[str, str | None, str]] = []
    for pred in task.contract:
        try:
            data = read_workspace_file(workspace, pred.path, MAX_ARTIFACT_READ)
        except PathError:
            continue
        if b"\x00" in data[:8192]:
            out.append((pred.path, None, f"(binary file, {len(data)} bytes)"))
            continue
        text = data[:ARTIFACT_CHARS * 4].decode("utf-8", errors="replace")
        more = (f"[... truncated: the first {ARTIFACT_CHARS} characters are shown]"
                if len(text) > ARTIFACT_CHARS or len(data) > ARTIFACT_CHARS * 4 else "")
        out.append((pred.path, text[:ARTIFACT_CHARS], more))
    return out


@dataclass(frozen=True)
class JudgeViews:
    """What the contract judge is shown of the agent's work, each text cut as it is shown: the
    transcript's summary, the final message and the head of each contract file.

    The audit screens these same texts for passages addressed to the grader, and its re-judge
    cleans these views, never the sources they were cut from: removing a passage from a
    source and cutting it again would slide text nobody searched into view."""

    summary: Cut
    final: Cut
    files: list[tuple[str, str | None, str]]  # (path, head or None for a binary file, note)

    def texts(self) -> list[tuple[str, str]]:
        """(where, text) of each view, as the audit names them."""
        return [("final message", self.final.text),
                *((f"file {path}", text) for path, text, _ in self.files if text is not None),
                ("transcript", self.summary.text)]

    def cleaned(self, clean: Clean) -> JudgeViews:
        """The same views with `clean` applied to each text (what was cut stays as recorded)."""
        return JudgeViews(summary=dataclasses.replace(self.summary, text=clean(self.summary.text)),
                          final=dataclasses.replace(self.final, text=clean(self.final.text).strip()),
                          files=[(p, None if t is None else clean(t), n) for p, t, n in self.files])


def judge_views(task: Task, transcript: list[dict[str, Any]], final_message: str, workspace: Path | None
                ) -> JudgeViews:
    """The contract judge's views of one run (`JudgeViews`)."""
    prompt = task.prompt or next(iter(task.briefs.values()), "")
    return JudgeViews(summary=cut_text(_summary(transcript, prompt), TRANSCRIPT_CHARS),
                      final=cut_answer(final_message.strip()), files=_artifacts(task, workspace))


JUDGE_LABELS = ("TRANSCRIPT", "ANSWER", "FILE")


def _judge_prompt(task: Task, views: JudgeViews) -> tuple[str, dict[str, Any]]:
    """(the prompt, what was cut: {"transcript"?: Cut.info, "final_message"?: Cut.info})."""
    g = task.grading
    prompt = task.prompt or next(iter(task.briefs.values()), "")
    rubric = _rubric_text(task)
    summary, final, files = views.summary, views.final, views.files
    token = boundary(task.id, [summary.text, final.text, *(t for _, t, _ in files if t is not None)])
    cuts = {name: c.info() for name, c in (("transcript", summary), ("final_message", final)) if c.was_cut}
    return (
        "You are a grading function. Your ONLY job is to output a single JSON object.\n\n"
        "CRITICAL RULES:\n"
        "- Do NOT write any prose, explanation, or commentary outside the JSON\n"
        "- Respond with ONLY a JSON object - nothing else\n"
        f"- {untrusted_note(token, JUDGE_LABELS, extra=' (its transcript, final message and output files)')}\n\n"
        "Be a strict evaluator. Reserve 1.0 for genuinely excellent performance. "
        "An average acceptable completion should score around 0.6-0.7. "
        "Deduct points for unnecessary steps, verbose output, and inefficient tool usage.\n\n"
        f"## Task\n{prompt}\n\n"
        f"## Expected Behavior\n{(g.expected_behavior if g else None) or '(not stated)'}\n\n"
        f"## Agent Transcript (summarized)\n{_block('TRANSCRIPT', token, summary, '(no tool calls)')}\n\n"
        f"## Final Message\n{_block('ANSWER', token, final, '(none)')}\n\n"
        f"## Output Files\n{_files_block(files, token) or '(none found)'}\n\n"
        f"## Grading Rubric\n{rubric}\n\n"
        "Score each criterion from 0.0 to 1.0.\n\n"
        "Respond with ONLY this JSON structure (no markdown, no code fences, no extra text):\n"
        '{"scores": {"criterion_name": 0.0}, "total": 0.0, "notes": "brief justification"}'
    ), cuts


def _rubric_text(task: Task) -> str:
    """The judge's rubric: the task's `judge_rubric` and its `criteria` list under it (a native
    task's criteria are shown to the judge, docs/formats.md). A DareBench task keeps upstream's
    prompt: its rubric section, else its criteria (its reader already made that choice)."""
    g = task.grading
    if g is None:
        return ""
    listed = "\n".join(f"- {c}" for c in g.criteria)
    if not g.judge_rubric:
        return listed
    if task.source == "darebench" or not listed:
        return g.judge_rubric
    return f"{g.judge_rubric}\n\nCriteria:\n{listed}"


def _block(label: str, token: str, cut: Cut, empty: str) -> str:
    if not cut.text.strip():
        return empty
    note = (f"\n[cut: the first {cut.head:,} and last {cut.tail:,} of {cut.chars:,} characters are shown]"
            if cut.was_cut else "")
    return fence(label, token, cut.text) + note


def _files_block(files: list[tuple[str, str | None, str]], token: str) -> str:
    parts = []
    for path, text, note in files:
        body = note if text is None else fence("FILE", token, text) + (f"\n{note}" if note else "")
        parts.append(f"### {path}\n{body}")
    return "\n\n".join(parts)


def judge_prompt(task: Task, transcript: list[dict[str, Any]], final_message: str, workspace: Path | None) -> str:
    """The DareBench judge's prompt for one run (agent-controlled text fenced and cut)."""
    return _judge_prompt(task, judge_views(task, transcript, final_message, workspace))[0]


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            f = float(v.strip().rstrip("%"))
        except ValueError:
            return None
        return f if math.isfinite(f) else None
    return None


_TOTAL_RE = re.compile(r"\b(?:total|overall|final)(?:[ _]score)?\s*[:=]\s*\**\s*([0-9]+(?:\.[0-9]+)?)", re.I)
_SCORE_RE = re.compile(r"\bscore\s*[:=]\s*\**\s*([0-9]+(?:\.[0-9]+)?)", re.I)
_NOTE_KEYS = ("notes", "justification", "reasoning", "explanation", "reason")
_TOTAL_KEYS = ("total", "score", "total_score", "overall", "final_score")


def _contract_verdict(data: Any) -> tuple[dict[str, float], float | None, str] | None:
    """(scores, total, notes) of one JSON value in a DareBench verdict shape, or None."""
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict):
        return None
    scores: dict[str, float] = {}
    total: float | None = None
    raw_scores = data.get("scores", data.get("criteria_scores"))
    if isinstance(raw_scores, dict):
        for k, v in raw_scores.items():
            n = _num(v.get("score")) if isinstance(v, dict) else _num(v)
            if n is not None:
                scores[str(k)] = n
    for key in _TOTAL_KEYS:
        if key in data and _num(data[key]) is not None:
            total = _num(data[key])
            break
    if raw_scores is None and total is None:
        # A flat object of criterion scores, e.g. {"instruction_followed": 1.0, "explanation": "..."}.
        for k, v in data.items():
            if k not in _NOTE_KEYS and not isinstance(v, (dict, list, str)) and _num(v) is not None:
                scores[str(k)] = float(_num(v) or 0.0)
    if total is None and scores:
        total = sum(scores.values()) / len(scores)
    notes = next((str(data[k]) for k in _NOTE_KEYS if k in data and data[k] is not None), "")
    if total is None and not scores and not isinstance(raw_scores, dict):
        return None
    return scores, total, notes


def parse_judge_reply(text: str) -> dict[str, Any]:
    """{scores, total, notes} from the reply's last verdict-shaped JSON value, in any accepted
    shape, else from the last `total: x` / `score: x` in its text; ValueError if none."""
    shaped = (_contract_verdict(value) for value in reversed(json_candidates(text)))
    found = next((v for v in shaped if v is not None), None)
    scores, total, notes = found if found is not None else ({}, None, "")
    if total is None:
        hits = _TOTAL_RE.findall(text or "") or _SCORE_RE.findall(text or "")
        if hits:
            total = float(hits[-1])
            notes = notes or "total read from the reply text (no JSON)"
    if total is None:
        raise ValueError("no scores/total in the reply")
    vals = list(scores.values())
    said = total
    scale: dict[str, Any] = {}
    if 1.0 < total <= 100.0 and (not vals or (max(vals) > 1.0 and all(0 <= v <= 100 for v in vals))):
        total /= 100.0
        scores = {k: v / 100.0 for k, v in scores.items()}
        scale["read_as_percent"] = True  # the grade says when the judge's number was rescaled
    if not 0.0 <= total <= 1.0:
        scale["capped"] = True
    total = min(1.0, max(0.0, total))
    scores = {k: min(1.0, max(0.0, v)) for k, v in scores.items()}
    if scale:
        scale["judge_total"] = said
    return {"scores": scores, "total": total, "notes": notes, **scale}


async def judge_contract(inp: GradeInput, transcript: list[dict[str, Any]], *, views: JudgeViews | None = None
                         ) -> tuple[dict[str, Any], UsageCost]:
    """Ask the judge; ({scores, total, notes, raw, error?, unreadable?}, usage). A provider
    failure raises GraderError (the run is void); a reply that stays unparseable, or a refusal
    of the prompt as longer than the judge's context, is a verdict of 0 marked `unreadable`. `views` replaces the judge's views of the run (the audit's re-judge:
    the views without the passages addressed to the grader, `JudgeViews.cleaned`)."""
    task: Task = inp.task
    if inp.judge is None:
        raise GraderError(f"task {task.id} is judge-graded and no judge was given")
    if views is None:
        views = judge_views(task, transcript, inp.final_message, inp.workspace)
    prompt, cuts = _judge_prompt(task, views)
    usage = UsageCost()
    errors: list[str] = []
    text = ""
    too_long = False
    for attempt in range(JUDGE_RETRIES + 1):
        try:
            text, u = await inp.judge.ask_raw(JUDGE_SYSTEM, prompt, attempt=attempt)
        except ProviderError as e:
            if not (e.context_overflow or e.content_refused):  # the client has already retried: void
                raise GraderError(f"judge provider error: {e.reason}") from None
            # What the agent delivered made the prompt longer than the judge's context, or a
            # content filter refused to read it: no verdict, as an unreadable reply (the
            # judge's part scores 0, the fault recorded).
            why = "longer than the judge's context" if e.context_overflow else "unreadable by a content filter"
            errors.append(f"attempt {attempt + 1}: refused as {why} ({e.reason})")
            too_long = True
            break
        usage = usage + u
        try:
            parsed = parse_judge_reply(text)
        except ValueError as e:
            errors.append(f"attempt {attempt + 1}: unparseable reply ({e})")
            continue
        result: dict[str, Any] = {**parsed, "raw": text[:4000]}
        if cuts:
            result["cut"] = cuts
        if errors:
            result["error"] = "; ".join(errors)
        return result, usage
    # The judge answered, every time, in a form that is not a verdict, or refused what the agent
    # delivered as too long. It read the agent's work: that work may have told it how to reply,
    # so the judge's part scores 0 with the fault recorded (a grader failing on the task's
    # reference marks the task broken: campaign.health).
    reason = (f"the judge gave no verdict ({'; '.join(errors)})" if too_long
              else f"the judge's reply was unparseable after {JUDGE_RETRIES + 1} attempts ({'; '.join(errors)})")
    return {"scores": {}, "total": 0.0, "notes": "", "raw": text[:4000], "error": reason[:1000],
            "unreadable": True, **({"cut": cuts} if cuts else {})}, usage
