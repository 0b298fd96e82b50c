"""The evidence audit: a positive score a judge gave must be supported by the trace and artifacts.

DAREBench (seed 002) reviews suspicious positive scores with deterministic post-hoc rules plus
a meta-judge; its code was never released, so this is assay's own design (docs/audit.md).

Who is audited: runs with a positive score that came, wholly or partly, from a judge, i.e.
the task scores by its contract, is graded `judge` or `hybrid` (with a judge weight) and the
judge total is > 0; or the task scores by its rubric and at least one positive item
without a machine check was credited by the judge. Everything else (scenarios, machine
checks, contract predicates alone, scores of 0) is not audited: `flags` stays empty and
`pre_audit_score` is the score. (Passages addressed to the grader are also looked for when
the rubric's judged items gave no credit but the score is positive: a negative item the
judge left unmet is credit too.)

Rules (each a function returning flags `{rule, reason, severity}`):

- hard: `missing_artifact` (a required contract artifact is missing or empty),
  `no_tool_ran` (a tool task, execution form multi-step-with-tools, no tool call at all),
  `phantom_claim` (the final message claims a file written or a command run that never
  happened);
- soft: `hit_limit` (the run ended on max_time/max_turns/max_usd and the judge gave high
  credit), `answer_not_in_output` (the judge's notes quote a number or string that is in
  neither the final message nor any artifact), `rubric_number_claim` (a credited judged
  rubric item, or its reason, cites a number the answer does not contain), `judge_injection`
  (the answer repeats a rubric item's text verbatim). An optional contract artifact
  (DareBench's inferred outputs) that is missing gives a soft `missing_artifact`.

Passages addressed to the grader come first (`find_injection`, on
`assay.llm.passages.PassageFinder`, and the injection screen): instructions to an evaluator,
grader, judge or model, verdict-shaped blocks, claims that the rubric is met, orders to
ignore the instructions, role and fake boundary markers, in exactly the texts of the run any
judge is shown, cut as shown (`_gather`): the task's judge's views (a rubric judge's final
message; a contract judge's transcript summary, final message and contract files) and the
meta-judge's (its trace summary, the final message, the artifacts' heads and names), unless
the task's own text matches the same rule. When there are any, the run is judged again by
the same judge on the same items or contract with those passages removed from everything
the judge is shown; the
lower of the two verdicts is kept (written into the grade: the rubric's items, or the
contract's `judge`), and a `judge_injection` flag records the passages, both verdicts and
both scores. The re-judge's usage is the run's judge usage; a provider failure on it is a
GraderError, as for the first verdict. The rules then look at what the kept verdict credits,
and a re-judged passage flag needs no meta-judge of its own.

Decision: any flag sends the run to the meta-judge when the run has a judge (the first
judge model, through `Judge.ask_raw`). `supported: false` removes the positive (score 0,
every flag `removed`); `supported: true` keeps it. A meta-judge that stays unparseable
after 2 retries falls back to the no-meta-judge rule and the failure is recorded; a
provider failure voids the run (GraderError). The meta-judge is shown the agent's texts
without the passages addressed to the grader. Without a meta-judge, a hard flag removes the positive and soft
flags are only recorded.

The evidence (the trace, the workspace's files within `MAX_FILES`, `READ_BYTES` and an entry
ceiling, `ASSAY_COPY_MAX_FILES`, recorded in `audit.workspace_capped` when reached) and the
judges' texts are read in a grading worker process (`assay.grade.workers`), never on the
event loop. What the worker cannot finish within its limits removes the judge's credit
(`audit_undecided`) and is a fault of the run (`grade.faults`, part `audit`), never a void.
The meta-judge's prompt fences what the agent controls (trace, artifacts,
final message) and the verdict under review between boundary markers and says
they are untrusted data (`assay.llm.untrusted`); its reply's last `supported` value counts.
"""

from __future__ import annotations

import dataclasses
import json
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from assay.config import COPY_MAX_FILES, settings
from assay.errors import GraderError, ProviderError
from assay.fs.paths import PathError
from assay.fs.reads import entry_kind, list_dir, read_tree, read_workspace_file, read_workspace_head
from assay.grade import workers
from assay.grade.contract_judge import ARTIFACT_CHARS as JUDGE_FILE_CHARS
from assay.grade.contract_judge import JudgeViews, judge_contract, judge_views
from assay.grade.injection_screen import KINDS, Injection, screen_injection, shown
from assay.grade.inputs import GradeInput, JudgeService
from assay.grade.numbers import Number, find_numbers
from assay.grade.openclaw import to_openclaw
from assay.grade.rubric import ItemVerdict, items_needing_judge, score_items
from assay.llm.jsonrepair import json_candidates
from assay.llm.passages import PassageFinder
from assay.llm.untrusted import Cut, boundary, cut_answer, fence, untrusted_note
from assay.record import (
    AssistantEvent,
    Audit,
    AuditFlag,
    ErrorEvent,
    Event,
    Fault,
    Grade,
    HarnessEvent,
    JudgeInfo,
    RubricGrade,
    ToolCallEvent,
    ToolResultEvent,
    UsageCost,
)
from assay.task.model import Task

__all__ = ["HARD_RULES", "SOFT_RULES", "Injection", "audit_run", "collect_evidence", "find_injection", "judge_credit",
           "meta_judge_prompt",
           "rule_answer_not_in_output", "rule_hit_limit", "rule_judge_injection", "rule_missing_artifact",
           "rule_no_tool_ran", "rule_phantom_claim", "rule_rubric_number_claim"]

HARD_RULES = frozenset({"missing_artifact", "no_tool_ran", "phantom_claim"})
SOFT_RULES = frozenset({"hit_limit", "answer_not_in_output", "rubric_number_claim", "judge_injection"})
LIMIT_REASONS = frozenset({"max_time", "max_turns", "max_usd"})
HIGH_CREDIT = 0.7  # "full or high credit" for hit_limit: the default pass threshold
META_RETRIES = 2
RESULT_PREVIEW = 200
ARTIFACT_CHARS = 3000
MAX_ARTIFACTS = 12
TRACE_CHARS = 12_000
READ_BYTES = 256 * 1024
MAX_FILES = 500

META_SYSTEM = ("You are an auditor of evaluation results. You check whether a positive grade is supported by "
               "evidence in the execution trace and the delivered artifacts. Answer in JSON only.")


# --------------------------------------------------------------------------- evidence


@dataclass
class Evidence:
    """What the run actually did and left behind."""

    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {id, name, arguments, output}
    commands: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)  # paths given to write_file/edit_file (or copied)
    files: set[str] = field(default_factory=set)  # every regular file in the workspace (rel paths)
    outputs: dict[str, str] = field(default_factory=dict)  # artifacts: rel path -> text (bounded)
    final: str = ""
    capped: list[str] = field(default_factory=list)  # the ceilings the walk of the workspace reached

    @property
    def answer_text(self) -> str:
        return "\n".join([self.final, *self.outputs.values()])


def _text(data: bytes) -> str | None:
    """Text of a file's first READ_BYTES; None when it looks binary."""
    data = data[:READ_BYTES]
    if b"\x00" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _initial_files(task: Task) -> dict[str, Path | str]:
    """rel path -> where its initial content comes from (a source file or literal text)."""
    out: dict[str, Path | str] = {}
    for wf in task.workspace:
        base = "" if wf.path in (".", "") else wf.path.strip("/")
        if wf.source is not None:
            src = Path(wf.source)
            if src.is_dir():
                for p in src.rglob("*"):
                    if p.is_file() and not p.is_symlink():
                        rel = p.relative_to(src).as_posix()
                        out[f"{base}/{rel}" if base else rel] = p
            else:
                out[base] = src
        else:
            out[base] = wf.content or ""
    return out


def _unchanged(rel: str, text: str, initial: dict[str, Path | str]) -> bool:
    src = initial.get(rel)
    if src is None:
        return False
    if isinstance(src, str):
        return text == src
    try:
        return text == src.read_bytes()[:READ_BYTES].decode("utf-8", errors="replace")
    except OSError:
        return False


def _norm_path(p: str) -> str:
    p = p.strip().strip("`'\"").replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    for prefix in ("/workspace/",):
        if p.startswith(prefix):
            p = p[len(prefix):]
    return p.strip("/")


def collect_evidence(task: Task, workspace: Path | None, events: list[Event], final_message: str,
                     commands: list[str] | None = None, *, max_entries: int = COPY_MAX_FILES) -> Evidence:
    """What the run did (its tool calls and commands) and left (the workspace's files, read
    within limits: `MAX_FILES` files of `READ_BYTES` each, `max_entries` entries looked at).
    When the walk of the workspace reaches a ceiling, `Evidence.capped` says which, and the
    files the rules ask about by name (the contract's, the answer's, those the file tools wrote,
    those the final message claims) are looked up one by one. Reads the agent's files: run it
    in a worker process (`audit_run` does), never on the event loop."""
    ev = _trace_evidence(events, final_message, commands or [])
    if workspace is None or not workspace.is_dir():
        return ev
    initial = _initial_files(task)
    wanted = {_norm_path(p.path) for p in task.contract} | set(ev.written)
    if task.answer_path:
        wanted.add(_norm_path(task.answer_path))
    # Read without following a link or opening a special file (the workspace is the agent's).
    for rel, data in read_tree(workspace, ".", max_file_bytes=READ_BYTES, max_files=MAX_FILES, partial=True,
                               skip=_skip_dir, max_entries=max_entries, capped=ev.capped):
        _add_file(ev, rel, data, rel in wanted, initial)
    if ev.capped:
        for rel in sorted(wanted | set(_file_claims(ev.final)))[:MAX_FILES]:
            if rel and rel not in ev.files and (found := _look_up(workspace, rel)) is not None:
                _add_file(ev, rel, found, True, initial)
    return ev


def _trace_evidence(events: list[Event], final_message: str, commands: list[str]) -> Evidence:
    """The evidence of the trace: tool calls with their output, commands, files written."""
    ev = Evidence(final=final_message or "")
    by_id: dict[str, dict[str, Any]] = {}
    for e in events:
        if isinstance(e, ToolCallEvent):
            call = {"id": e.id, "name": e.name, "arguments": e.arguments, "output": ""}
            ev.tool_calls.append(call)
            by_id[e.id] = call
            if e.name == "run_command" and isinstance(e.arguments.get("command"), str):
                ev.commands.append(e.arguments["command"])
            if e.name in ("write_file", "edit_file") and isinstance(e.arguments.get("path"), str):
                ev.written.append(_norm_path(e.arguments["path"]))
        elif isinstance(e, ToolResultEvent):
            tool = by_id.get(e.id)
            if tool is not None:
                tool["output"] = e.output
        elif isinstance(e, HarnessEvent) and e.files:  # a policy's copied artifacts
            ev.written += [_norm_path(f) for f in e.files]
    for c in commands:
        if c not in ev.commands:
            ev.commands.append(c)
    return ev


def _add_file(ev: Evidence, rel: str, data: bytes, wanted: bool, initial: dict[str, Path | str]) -> None:
    ev.files.add(rel)
    text = _text(data)
    if text is not None and (wanted or not _unchanged(rel, text, initial)):
        ev.outputs[rel] = text


def _look_up(workspace: Path, rel: str) -> bytes | None:
    """The first `READ_BYTES` of the regular file workspace/rel, or None (missing, a link, not
    a regular file)."""
    try:
        return read_workspace_head(workspace, rel, READ_BYTES)
    except PathError:
        return None


def _skip_dir(name: str) -> bool:
    return name.startswith(".") or name in ("node_modules", "__pycache__")


# --------------------------------------------------------------------------- what the judge credited


@dataclass
class Credit:
    source: str  # "contract" | "rubric"
    judge_score: float  # the judge total (contract) or the expert score (rubric)
    notes: str = ""
    scores: dict[str, float] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)  # credited judged rubric items


_VOTES = re.compile(r"\s*\(votes \d+ met / \d+ not met\)\s*$")


def judge_credit(task: Task, grade: Grade) -> Credit | None:
    """What part of the score a judge gave; None when the score has no judge part."""
    kind = task.primary_kind
    if kind == "contract":
        g = task.grading
        contract = grade.contract
        if g is None or g.type not in ("judge", "hybrid") or (contract is not None and not contract.sat):
            return None
        if g.type == "hybrid" and (g.weight_judge <= 0 or g.weight_automated + g.weight_judge <= 0):
            return None
        verdict = contract.judge if contract is not None else {}
        total = verdict.get("total")
        if not isinstance(total, (int, float)) or total <= 0:
            return None
        scores = {str(k): float(v) for k, v in (verdict.get("scores") or {}).items() if isinstance(v, (int, float))}
        return Credit(source="contract", judge_score=float(total), notes=str(verdict.get("notes") or ""),
                      scores=scores)
    if kind == "rubric" and task.rubric is not None and grade.rubric is not None:
        texts = {it.id: it.text for it in task.rubric.items}
        items = [{"id": it.id, "text": texts.get(it.id, ""), "weight": it.weight, "reason": _VOTES.sub("", it.reason)}
                 for it in grade.rubric.items if not it.check and it.hit and not it.na and it.weight > 0]
        if not items:
            return None
        return Credit(source="rubric", judge_score=float(grade.rubric.expert_score or 0.0), items=items)
    return None


# --------------------------------------------------------------------------- numbers and quotes

_FRACTION = re.compile(r"\b\d+(?:\.\d+)?\s*/\s*\d+(?:\.\d+)?\b|\b\d+(?:\.\d+)?\s+out\s+of\s+\d+(?:\.\d+)?\b", re.I)
_QUANT_BEFORE = re.compile(r"(?:at\s+least|at\s+most|more\s+than|fewer\s+than|less\s+than|up\s+to|no\s+more\s+than|"
                           r"under|over|within|maximum(?:\s+of)?|minimum(?:\s+of)?|max|min|criterion|criteria|item|"
                           r"items|step|steps|rubric|point|requirement|part|question|section|line|row|column|page|"
                           r"turn|attempt|score|scored|total|rated|rating|weight|[#≥≤<>=])\s*$", re.I)
_COUNT_AFTER = re.compile(r"^\s*(?:words?|characters?|chars?|sentences?|paragraphs?|lines?|bullets?|bullet\s+points?|"
                          r"items?|steps?|turns?|tool\s+calls?|criteria|criterion|points?\b(?!\s+of))", re.I)


def _claim_numbers(text: str) -> list[tuple[Number, int]]:
    """Numbers in a judge's text that state an answer value (not counts, scores, ordinals)."""
    text = _FRACTION.sub(" ", text or "")
    found: list[tuple[Number, int]] = []
    for num in find_numbers(text):
        if num.decimals == 0 and abs(num.value) < 10:
            continue  # single digits are counts and ordinals far more often than answers
        if _QUANT_BEFORE.search(text[max(0, num.start - 24):num.start]):
            continue
        if _COUNT_AFTER.match(text[num.end:num.end + 24]):
            continue
        found.append((num, num.start))
    return found


def _same(a: float, b: float, decimals: int) -> bool:
    if abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b)):
        return True
    return decimals >= 0 and round(a, decimals) == round(b, decimals) and abs(a - b) < 10 ** -decimals


def _number_present(num: Number, pool: list[Number]) -> bool:
    for other in pool:
        for a in num.candidates:
            for b in other.candidates:
                if _same(a, b, num.decimals) or _same(a, b, other.decimals):
                    return True
    return False


def _collapse(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip().lower()


_QUOTES = [re.compile(r'"([^"\n]{2,200})"'), re.compile(r"“([^”\n]{2,200})”"), re.compile(r"`([^`\n]{2,200})`"),
           re.compile(r"(?<![\w])'([^'\n]{2,200})'(?![\w])"), re.compile(r"«([^»\n]{2,200})»")]


def _quoted(text: str) -> list[str]:
    out: list[str] = []
    for rx in _QUOTES:
        for m in rx.finditer(text or ""):
            s = m.group(1).strip().rstrip(".,;:!?").strip()
            if len(s) >= 2 and s not in out:
                out.append(s)
    return out


def _context_text(task: Task, evidence: Evidence) -> str:
    """Text whose numbers and quotes are not claims about the answer: the task and the agent's commands."""
    g = task.grading
    parts = [task.prompt or "", *task.briefs.values(), task.system_prompt or "",
             *(str(m.get("content", "")) for m in task.messages or []),
             (g.judge_rubric or "") if g else "", *(g.criteria if g else []),
             *(p.path for p in task.contract), *evidence.commands,
             *(json.dumps(c["arguments"], ensure_ascii=False) for c in evidence.tool_calls
               if c["name"] not in ("write_file", "edit_file"))]
    return "\n".join(parts)


# --------------------------------------------------------------------------- rules


def _flag(rule: str, reason: str, severity: str | None = None) -> dict[str, Any]:
    return {"rule": rule, "reason": reason, "severity": severity or ("hard" if rule in HARD_RULES else "soft"),
            "removed": False, "meta_reason": None}


def _artifact_problem(workspace: Path, rel: str) -> str | None:
    """Why a contract artifact does not count (missing, empty, a link, ...), or None."""
    try:
        kind = entry_kind(workspace, rel)
    except PathError:
        return "behind a link or a file (not reachable as a plain path)"
    if kind is None:
        return "missing"
    if kind == "dir":
        return None if list_dir(workspace, rel) else "an empty directory"
    if kind != "file":
        return "not a regular file"
    try:
        data = read_workspace_file(workspace, rel, READ_BYTES * 64)
    except PathError:
        return "unreadable (refused)"
    if not data:
        return "empty"
    text = _text(data)
    if text is not None and not text.strip():
        return "empty (whitespace only)"
    return None


def rule_missing_artifact(task: Task, workspace: Path | None, credit: Credit) -> list[dict[str, Any]]:
    """A contract artifact missing or empty while the judge gave credit (hard if required)."""
    if credit.source != "contract" or not task.contract:
        return []
    flags = []
    for pred in task.contract:
        problem = "no workspace" if workspace is None else _artifact_problem(workspace, _norm_path(pred.path))
        if problem is None:
            continue
        if pred.required:
            flags.append(_flag("missing_artifact", f"required artifact {pred.path} is {problem} "
                                                   f"but the judge gave {credit.judge_score:g}"))
        else:
            flags.append(_flag("missing_artifact", f"artifact {pred.path} the task asks for is {problem} "
                                                   f"(not required by the contract) but the judge gave "
                                                   f"{credit.judge_score:g}", severity="soft"))
    return flags


def rule_no_tool_ran(task: Task, evidence: Evidence, credit: Credit) -> list[dict[str, Any]]:
    if not task.tools or task.execution != "multi-step-with-tools":
        return []
    if evidence.tool_calls or evidence.written:
        return []
    return [_flag("no_tool_ran", f"a multi-step-with-tools task, the judge credited work ({credit.judge_score:g}) "
                                 "but no tool was called")]


def rule_hit_limit(task: Task, end_reason: str, credit: Credit) -> list[dict[str, Any]]:
    if end_reason not in LIMIT_REASONS or credit.judge_score < HIGH_CREDIT:
        return []
    b = task.budget
    budget = ", ".join(f"{k} {v:g}" for k, v in (("minutes", b.minutes), ("turns", b.turns), ("usd", b.usd))
                       if v is not None)
    return [_flag("hit_limit", f"the run ended on {end_reason}{f' (task budget: {budget})' if budget else ''} "
                               f"yet the judge gave {credit.judge_score:g}")]


def rule_answer_not_in_output(task: Task, evidence: Evidence, credit: Credit) -> list[dict[str, Any]]:
    """Numbers and quoted strings the judge's notes cite that the output does not contain."""
    if credit.source != "contract" or not credit.notes.strip():
        return []
    context = _context_text(task, evidence)
    context_nums = find_numbers(context)
    answer = evidence.answer_text
    pool = find_numbers(answer)
    score_values = set(credit.scores.values()) | {credit.judge_score}
    missing_nums: list[str] = []
    for num, _ in _claim_numbers(credit.notes):
        if 0 <= num.value <= 1 and any(_same(num.value, s, 6) for s in score_values):
            continue
        if _number_present(num, context_nums) or _number_present(num, pool):
            continue
        if num.text not in missing_nums:
            missing_nums.append(num.text.strip())
    answer_c = _collapse(answer)
    context_c = _collapse(context)
    names = {f.rsplit("/", 1)[-1].lower() for f in evidence.files} | {f.lower() for f in evidence.files}
    names |= {k.lower() for k in credit.scores}
    missing_strs: list[str] = []
    for q in _quoted(credit.notes):
        qc = _collapse(q)
        if len(qc) < 2 or qc in answer_c or qc in context_c or qc in names or find_numbers(q) and \
                re.fullmatch(r"[-−\d.,%\s]+", q):
            continue
        missing_strs.append(q)
    if not missing_nums and not missing_strs:
        return []
    what = [*(f"number {n}" for n in missing_nums[:5]), *(f"{s!r}" for s in missing_strs[:5])]
    return [_flag("answer_not_in_output", "the judge's notes cite " + ", ".join(what)
                  + " which appear in neither the final message nor any artifact")]


def rule_rubric_number_claim(task: Task, evidence: Evidence, credit: Credit) -> list[dict[str, Any]]:
    if credit.source != "rubric":
        return []
    context_nums = find_numbers(_context_text(task, evidence))
    pool = find_numbers(evidence.answer_text)
    flags = []
    for it in credit.items:
        missing: list[str] = []
        for src in (it["text"], it["reason"]):
            for num, _ in _claim_numbers(src):
                if _number_present(num, context_nums) or _number_present(num, pool):
                    continue
                if num.text.strip() not in missing:
                    missing.append(num.text.strip())
        if missing:
            flags.append(_flag("rubric_number_claim",
                               f"item {it['id']} was credited by the judge but cites {', '.join(missing[:5])}, "
                               "which the answer does not contain"))
    return flags


# ----- judge injection

ECHO_WORDS = 8  # a rubric item's whole text counts from this many words ...
ECHO_RUN_WORDS = 20  # ... and any run of this many consecutive words of it
ECHO_CJK_FACTOR = 2.5  # Chinese, Japanese and Korean text: a word is 2.5 characters (20 and 50)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_CJK_CHAR = re.compile(rf"[{_CJK}]")
def _tokens(text: str) -> list[str]:
    """Words (and single CJK characters), case-folded, punctuation and spacing dropped."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).casefold())


def _echo_sizes(tokens: list[str]) -> tuple[int, int, str]:
    """(least tokens for a whole-text echo, tokens of a run echo, their unit) for a rubric text."""
    cjk = sum(1 for t in tokens if _CJK_CHAR.fullmatch(t))
    if cjk * 2 > len(tokens):
        return round(ECHO_WORDS * ECHO_CJK_FACTOR), round(ECHO_RUN_WORDS * ECHO_CJK_FACTOR), "characters"
    return ECHO_WORDS, ECHO_RUN_WORDS, "words"


class _Grams:
    """The k-token runs of a text, for every k asked (computed once per k)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.joined = " " + " ".join(tokens) + " "
        self._by_k: dict[int, set[tuple[str, ...]]] = {}

    def has_run(self, run: tuple[str, ...]) -> bool:
        k = len(run)
        if k not in self._by_k:
            self._by_k[k] = {tuple(self.tokens[i:i + k]) for i in range(len(self.tokens) - k + 1)}
        return run in self._by_k[k]

    def has_text(self, tokens: list[str]) -> bool:
        return " " + " ".join(tokens) + " " in self.joined


def _rubric_texts(task: Task) -> list[tuple[str, str]]:
    """(what it is, text) of everything the judge grades by: rubric items, contract criteria and
    the lines of the contract's judge rubric."""
    out: list[tuple[str, str]] = []
    if task.rubric is not None:
        out += [(f"rubric item {it.id}", it.text) for it in task.rubric.items]
    g = task.grading
    if g is not None:
        out += [(f"judge criterion {i}", c) for i, c in enumerate(g.criteria, 1)]
        lines = [ln.strip() for ln in (g.judge_rubric or "").splitlines() if ln.strip()]
        out += [(f"judge rubric line {i}", ln) for i, ln in enumerate(lines, 1)]
    return out


def _echoes(texts: list[tuple[str, str]], answer: _Grams, asked: _Grams) -> list[str]:
    """The rubric texts the answer repeats: whole (long enough) or a long run of them, where the
    repeated part is not in what the agent was asked."""
    found: list[str] = []
    for what, text in texts:
        toks = _tokens(text)
        whole, run, unit = _echo_sizes(toks)
        if whole <= len(toks) <= run:
            if answer.has_text(toks) and not asked.has_text(toks):
                found.append(f"{what} (its whole text, {len(toks)} {unit})")
        elif len(toks) > run:
            windows = (tuple(toks[i:i + run]) for i in range(len(toks) - run + 1))
            if any(answer.has_run(w) and not asked.has_run(w) for w in windows):
                found.append(f"{what} ({run} {unit} in a row)")
    return found


MAX_PASSAGES = 20  # the most passages a flag lists (all of them are removed before the re-judge)
VERDICT_NOTES = 500  # characters of a contract judge's notes a flag keeps


def _own_text(task: Task) -> str:
    """The task's own text: what the agent was asked and what it is graded by. A passage rule
    that matches it is not applied (a task about grading may well say "rubric items are met")."""
    g = task.grading
    parts = [_asked_text(task), *(it.text for it in (task.rubric.items if task.rubric else []))]
    if g is not None:
        parts += [g.judge_rubric or "", *g.criteria, g.expected_behavior or ""]
    return "\n".join(parts)


def _strings(value: Any) -> list[str]:
    """Every string inside a tool call's arguments."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def judge_texts(task: Task, events: list[Event], final_message: str, workspace: Path | None
                ) -> list[tuple[str, str]]:
    """(where, text) of what the task's judge is shown of the agent's work, cut as it is shown:
    a rubric judge the final message; a contract judge its transcript summary, the final
    message and the head of each contract file (`contract_grading.JudgeViews`)."""
    if task.primary_kind == "contract":
        transcript = to_openclaw(events, task_id=task.id, final_message=final_message)
        return judge_views(task, transcript, final_message, workspace).texts()
    return [("final message", _final_view(task, final_message).text)]


@dataclass(frozen=True)
class _Seen:
    """What the audit reads of a run, gathered in a worker process."""

    evidence: Evidence
    texts: list[tuple[str, str]]  # (where, text): every text of the run a judge is shown, cut as shown
    screened: list[tuple[str, str]]  # the same, less those that lie inside another one (the screen's)
    meta: MetaViews


def _gather(task: Task, workspace: Path | None, events: list[Event], final_message: str, commands: list[str],
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


def _injection_texts(task: Task, evidence: Evidence) -> list[tuple[str, str]]:
    """(where, text) of the answer as judges are shown it, for `rule_judge_injection` and the
    rubric echo: the final message as judges cut it, the first characters of each artifact,
    and for a contract judge (which reads the transcript) the arguments of each tool call.
    The audit searches `_gather`'s texts instead: exactly what every judge is shown."""
    out = [("final message", cut_answer(evidence.final).text)]
    out += [(f"file {rel}", text[:JUDGE_FILE_CHARS]) for rel, text in sorted(evidence.outputs.items())]
    if task.primary_kind == "contract":
        out += [(f"transcript ({c['name']} call)", s) for c in evidence.tool_calls
                for s in _strings(c["arguments"]) if s.strip()]
    return out


def find_injection(task: Task, evidence: Evidence, texts: Sequence[tuple[str, str]] = ()) -> Injection:
    """Passages addressed to the grader in `texts` ((where, text), as judges are shown them;
    by default the answer's `_injection_texts`), each once, in where-first order."""
    finder = PassageFinder(_own_text(task))
    seen: set[str] = set()
    passages: list[dict[str, Any]] = []
    for where, text in texts or _injection_texts(task, evidence):
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


def _injection_flag(injection: Injection) -> dict[str, Any]:
    n = len(injection.passages)
    flag = _flag("judge_injection", f"the answer holds {n} passage{'s' if n != 1 else ''} addressed to the grader: "
                                    + _describe(injection.passages))
    flag["passages"] = injection.passages[:MAX_PASSAGES]
    flag["rejudged"] = False
    return flag


def deterministic_flags(task: Task, workspace: Path | None, end_reason: str, evidence: Evidence,
                        credit: Credit) -> list[dict[str, Any]]:
    """Every deterministic rule's flags on a run whose score a judge gave (in a worker process:
    they read the agent's text and files). The passages addressed to the grader are handled
    before, by `audit_run`."""
    return [
        *rule_missing_artifact(task, workspace, credit),
        *rule_no_tool_ran(task, evidence, credit),
        *rule_hit_limit(task, end_reason, credit),
        *rule_answer_not_in_output(task, evidence, credit),
        *rule_phantom_claim(task, evidence),
        *rule_rubric_number_claim(task, evidence, credit),
        *_echo_flags(task, evidence),
    ]


class _Undecided(Exception):
    """The audit's rules could not read the evidence within their limits (`_off_loop`)."""


T = TypeVar("T")


async def _off_loop(fn: Callable[..., T], *args: Any) -> T:
    """A deterministic step of the audit on the agent's text and files, in a worker process with
    a time limit (`assay.grade.workers`); `_Undecided` past its limits."""
    try:
        return await workers.call(fn, *args, timeout_s=settings().predicate_timeout_s)
    except (workers.WorkerTimeout, workers.WorkerFailed) as e:
        raise _Undecided(str(e)) from None


def _undecided(why: str) -> dict[str, Any]:
    """A hard flag for evidence the audit could not read within its limits: the judge's credit
    cannot be checked, so it is removed (the agent's text made the audit fail)."""
    return {"rule": "audit_undecided", "severity": "hard",
            "reason": f"the evidence audit on this run's text and files {why}: the judge's credit is removed"}


def rule_judge_injection(task: Task, evidence: Evidence) -> list[dict[str, Any]]:
    """Text addressed to the grader (instructions, verdict-shaped blocks, claims that the rubric
    is met, orders to ignore the instructions, role and boundary markers), and rubric text
    repeated verbatim: attempts to steer the judge, made visible. `audit_run` has the first
    kind judged again without those passages; a repeated rubric text goes to the meta-judge."""
    injection = find_injection(task, evidence)
    return [*([_injection_flag(injection)] if injection.passages else []), *_echo_flags(task, evidence)]


def _echo_flags(task: Task, evidence: Evidence) -> list[dict[str, Any]]:
    """A flag when the answer repeats the rubric's own text (soft: an honest answer may restate it)."""
    texts = _injection_texts(task, evidence)
    echoes = _echoes(_rubric_texts(task), _Grams(_tokens("\n".join(t for _, t in texts))),
                     _Grams(_tokens(_asked_text(task))))
    if not echoes:
        return []
    return [_flag("judge_injection", "the answer repeats the rubric's own text verbatim, which a judge may mistake "
                                     "for the work it describes: " + "; ".join(echoes[:5]))]


def _asked_text(task: Task) -> str:
    """What the agent was asked (its own words are not an echo of the rubric)."""
    return "\n".join([task.prompt or "", *task.briefs.values(), task.system_prompt or "",
                      *(str(m.get("content", "")) for m in task.messages or [])])


# ----- the re-judge without the passages


def _judged(task: Task, grade: Grade) -> bool:
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


def _cleaned_meta(views: MetaViews, injection: Injection) -> MetaViews:
    """The meta-judge's views without the passages (worked off the event loop)."""
    return views.cleaned(injection.clean)


def _cleaned_views(task: Task, transcript: list[dict[str, Any]], final_message: str, workspace: Path | None,
                   injection: Injection) -> JudgeViews:
    """The contract judge's views of the run without the passages (worked off the event loop)."""
    return judge_views(task, transcript, final_message, workspace).cleaned(injection.clean)


async def _rejudge(inp: GradeInput, grade: Grade, score: float, injection: Injection, judge: JudgeService
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
        shown_answer = await _off_loop(injection.clean, cut_answer(inp.final_message).text)
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
        views = await _off_loop(_cleaned_views, task, transcript, inp.final_message, inp.workspace, injection)
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
    record.update(rejudged=True, score_with=score, score_without=without, kept=kept, rejudge_judge=judge.name)
    return min(score, without), record, usage


# ----- phantom claims

_EXT_WORDS = """txt csv tsv json jsonl ndjson yaml yml toml md markdown rst html htm xml py js mjs ts tsx jsx
java c h cc cpp hpp go rs rb php sh bash zsh sql ipynb pdf png jpg jpeg gif svg webp bmp tiff xlsx xls xlsm docx doc
pptx parquet feather pkl pickle npy npz h5 hdf5 log ini cfg conf out dat zip tar gz tgz bz2 xz r rmd swift kt scala lua
pl tex bib css scss vue svelte dockerfile lock diff patch mdx srt vtt wav mp3 mp4 ics eml"""
_EXTS = frozenset(_EXT_WORDS.split())
_PATH = re.compile(r"(?<![\w/.:@-])((?:\.{1,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.([A-Za-z][A-Za-z0-9]{0,7}))(?![\w/])")
_FILE_VERB = re.compile(r"\b(saved|wrote|written|created|generated|exported|stored|dumped|produced|updated|modified|"
                        r"edited|overwrote|overwritten|appended)\b", re.I)
_RAN_VERB = re.compile(r"\b(ran|re-?ran|executed|re-?executed|invoked|(?:have|has|had|I've|I’ve|we've|we’ve)\s+"
                       r"(?:also\s+|now\s+|successfully\s+|then\s+)?(?:re-?)?run)\b", re.I)
_NEGATION = re.compile(r"\b(?:not|never|no|unable|cannot|can't|can’t|couldn't|couldn’t|didn't|didn’t|wasn't|"
                       r"weren't|failed|fail|without|would|should|could|will|can|may|might|must|need|needs|"
                       r"please|if|want|wants|plan|planned|going|to be|wasn’t|won't|won’t|instead of)\b|n['’]t\b",
                       re.I)
_PROGRAM_WORDS = """pytest python python3 pip pip3 make npm npx yarn pnpm node deno bun cargo go rustc gcc g++
clang javac java mvn gradle ruff flake8 mypy pylint black isort eslint prettier tsc jest vitest mocha bash sh git
ls cat grep sed awk curl wget sqlite3 psql mysql docker kubectl terraform tox nox uv poetry rscript julia ruby rake
bundle php composer dotnet swift ctest cmake jq find wc head tail diff sort pandoc latexmk pdflatex unittest
coverage"""
_PROGRAMS = frozenset(_PROGRAM_WORDS.split())
_GENERIC_RUN = re.compile(r"^\s*(?:the\s+|my\s+|our\s+|a\s+|an\s+|this\s+|that\s+)?(?:\w+\s+)?"
                          r"(script|code|program|command|commands|notebook|linter|build|migration|migrations)\b", re.I)
_TESTS_RUN = re.compile(r"^\s*(?:the\s+|all\s+(?:the\s+)?|my\s+|our\s+|a\s+|some\s+)?(?:\w+\s+)?"
                        r"(tests?|test\s+suite|unit\s+tests?|specs?)\b", re.I)
_TEST_CMD = re.compile(r"test|pytest|unittest|jest|mocha|vitest|tox|nox|\bmake\b|\bcargo\b|\bgo\b|\bnpm\b|\byarn\b|"
                       r"\bpnpm\b|ctest|rspec|phpunit|\bmvn\b|gradle", re.I)


def _negated(text: str, start: int) -> bool:
    window = text[max(0, start - 48):start]
    cut = max(window.rfind(c) for c in ".!?;,\n")
    window = window[cut + 1:] if cut >= 0 else window
    return bool(_NEGATION.search(window))


def _clause(text: str, end: int, limit: int = 160) -> str:
    rest = text[end:end + limit]
    m = re.search(r"[.!?](?:\s|$)|\n|;", rest)
    return rest[:m.start()] if m else rest


def _file_claims(final: str) -> list[str]:
    out: list[str] = []
    for m in _FILE_VERB.finditer(final):
        if _negated(final, m.start()):
            continue
        for pm in _PATH.finditer(_clause(final, m.end())):
            path, ext = pm.group(1), pm.group(2).lower()
            if ext not in _EXTS and "/" not in path:
                continue
            p = _norm_path(path)
            if p and p not in out:
                out.append(p)
    return out


def _command_claims(final: str) -> list[tuple[str, str]]:
    """(kind, text): kind is 'cmd' (a backticked command), 'prog', 'tests' or 'generic'."""
    out: list[tuple[str, str]] = []
    for m in _RAN_VERB.finditer(final):
        if _negated(final, m.start()):
            continue
        clause = _clause(final, m.end())
        bt = re.search(r"`([^`\n]+)`", clause[:60])
        if bt:
            out.append(("cmd", bt.group(1).strip()))
            continue
        words = re.findall(r"[\w+.-]+", clause[:40])
        lead = [w for w in words[:3] if w.lower() not in ("the", "a", "an", "my", "our", "it", "also")]
        if lead and lead[0].lower() in _PROGRAMS:
            out.append(("prog", lead[0]))
            continue
        if _TESTS_RUN.match(clause):
            out.append(("tests", _TESTS_RUN.match(clause).group(1)))  # type: ignore[union-attr]
            continue
        g = _GENERIC_RUN.match(clause)
        if g:
            out.append(("generic", g.group(1)))
    return out


def _command_happened(kind: str, text: str, commands: list[str]) -> bool:
    cmds = [_collapse(c) for c in commands]
    if kind == "cmd":
        want = _collapse(text)
        if any(want in c for c in cmds):
            return True
        tokens = [t for t in want.split() if not t.startswith("-")]
        return bool(tokens) and any(all(t in c for t in tokens) for c in cmds)
    if kind == "prog":
        rx = re.compile(rf"(?<![\w.-]){re.escape(text.lower())}(?![\w-])")
        return any(rx.search(c) for c in cmds)
    if kind == "tests":
        return any(_TEST_CMD.search(c) for c in cmds)
    return bool(cmds)


def _file_happened(path: str, evidence: Evidence) -> bool:
    base = path.rsplit("/", 1)[-1].lower()
    if path in evidence.files or any(f.lower().endswith("/" + path.lower()) or f.lower() == path.lower()
                                     for f in evidence.files):
        return True
    if any(w == path or w.rsplit("/", 1)[-1].lower() == base for w in evidence.written):
        return True
    if any(f.rsplit("/", 1)[-1].lower() == base for f in evidence.files):
        return True
    return any(base in c.lower() for c in evidence.commands)


def rule_phantom_claim(task: Task, evidence: Evidence) -> list[dict[str, Any]]:
    """The final message claims files written or commands run that the trace does not show."""
    if not task.tools or not evidence.final.strip():
        return []
    flags = []
    for path in _file_claims(evidence.final):
        if not _file_happened(path, evidence):
            flags.append(_flag("phantom_claim", f"the final message claims {path} was written, but no tool wrote it "
                                                "and it is not in the workspace"))
    for kind, text in _command_claims(evidence.final):
        if not _command_happened(kind, text, evidence.commands):
            what = {"cmd": f"running `{text}`", "prog": f"running {text}", "tests": f"running the {text}",
                    "generic": f"running the {text}"}[kind]
            flags.append(_flag("phantom_claim", f"the final message claims {what}, but no run_command "
                                                "in the trace matches"))
    return flags


# --------------------------------------------------------------------------- meta-judge


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


def _final_view(task: Task, final: str) -> Cut:
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
    contract = [_norm_path(p.path) for p in task.contract]
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
    return MetaViews(trace=_trace_summary(evidence, events), final=_final_view(task, evidence.final), files=files,
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


def _meta_prompt(inp: GradeInput, grade: Grade, credit: Credit, views: MetaViews, flags: list[dict[str, Any]],
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
    return _meta_prompt(inp, grade, credit, meta_views(inp.task, evidence, inp.events), flags, score)[0]


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


async def _ask_meta(judge: JudgeService, prompt: str) -> tuple[tuple[bool, str] | None, UsageCost, list[str], int]:
    """((supported, reason) or None, usage, errors, attempts)."""
    usage = UsageCost()
    errors: list[str] = []
    for attempt in range(META_RETRIES + 1):
        try:
            text, u = await judge.ask_raw(META_SYSTEM, prompt, attempt=attempt)
        except ProviderError as e:
            if e.context_overflow:  # what it is shown of the run is too long for it: fail-closed, not void
                return (False, f"the meta-judge refused the run's evidence as longer than its context, so the "
                               f"flagged credit is not shown to be supported ({e.reason})"[:1000]), usage, errors, \
                    attempt + 1
            # the client has already retried: the run is void, as every judge failure
            raise GraderError(f"meta-judge {judge.name}: provider error: {e.reason}") from None
        usage = usage + u
        try:
            return _supported(text), usage, errors, attempt + 1
        except ValueError as e:
            errors.append(f"attempt {attempt + 1}: unparseable reply ({e}): {text[:200]!r}")
    return None, usage, errors, META_RETRIES + 1


# --------------------------------------------------------------------------- entry point


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
    except _Undecided as e:
        grade.faults.append(Fault(part="audit", reason=f"the evidence audit on this run's text and files {e}"))
        return _finish(audit, [*flags, _undecided(str(e))], score, judge_usage, remove=True)


async def _audit(inp: GradeInput, grade: Grade, score: float, judge_usage: UsageCost, audit: Audit,
                 flags: list[dict[str, Any]]) -> tuple[float | None, Audit, UsageCost]:
    task: Task = inp.task
    judge = inp.judge
    if not _judged(task, grade):  # no judge part (then no judge credit either)
        return _finish(audit, flags, score, judge_usage, remove=False)
    audit.audited = True
    seen = await _off_loop(_gather, task, inp.workspace, inp.events, inp.final_message, inp.commands,
                           settings().copy_max_files)
    evidence = seen.evidence
    if evidence.capped:
        audit.workspace_capped = list(evidence.capped)
    found = await _off_loop(find_injection, task, evidence, seen.texts)
    if judge is not None and inp.injection_screen:
        screened = await screen_injection(judge, task.id, seen.screened, _own_text(task), found)
        judge_usage = judge_usage + screened.usage
        audit.screen = screened.record()
        found = screened.into(found)
        flags += screened.flags()
    injection: Injection | None = None
    if found.passages:
        injection = found
        flag = _injection_flag(injection)
        if judge is not None:
            score, record, usage = await _rejudge(inp, grade, score, injection, judge)
            judge_usage = judge_usage + usage
            flag.update(record)
            flag["reason"] += (f"; judged again without {'them' if len(injection.passages) > 1 else 'it'}: "
                               f"{record['score_without']:.4g} (with: {record['score_with']:.4g}), the lower "
                               f"verdict ({record['kept']} the passages) is kept")
        flags.append(flag)
    credit = judge_credit(task, grade) if score > 0 else None
    if credit is None:
        return _finish(audit, flags, score, judge_usage, remove=False)
    flags += await _off_loop(deterministic_flags, task, inp.workspace, inp.end_reason, evidence, credit)
    # A passage flag whose re-judge is done needs no review of its own; the rest do.
    if all(f.get("rejudged") for f in flags):
        return _finish(audit, flags, score, judge_usage, remove=False)
    hard = any(f["severity"] == "hard" for f in flags)
    remove = hard
    if judge is not None:
        views = seen.meta if injection is None else await _off_loop(_cleaned_meta, seen.meta, injection)
        prompt, cuts = _meta_prompt(inp, grade, credit, views, flags, score)
        verdict, usage, errors, attempts = await _ask_meta(judge, prompt)
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
