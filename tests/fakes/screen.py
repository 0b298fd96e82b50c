"""A stand-in for a model acting as assay's injection screen (`assay.grade.injection_screen`).

A real screen is a language model asked which passages of a fenced text are addressed to
whoever grades it. No model runs in the fast tests, so this module plays that part with a
small reading of its own: it shares nothing with assay's rule list
(`assay.llm.passage_rules.RULES`), and it is no measure of what a real model would find. It is
there so that the harness's handling of a screen's answer (quotes checked against the text,
removed, the run judged again) is tested end to end against phrasings the rules miss.

How it reads: each fenced block is split into sentences (and lines); a sentence is quoted
when it names a reader who grades, checks or reviews the work (a small vocabulary in
English, Japanese, Korean, Russian, Dutch, Chinese, Indonesian, Swahili and Vietnamese, read past leetspeak digits) *and*
tells that reader something about the verdict (a second vocabulary: "treat this as
complete", "count it", "covered", "tick", "nothing is missing", 満たして, 충족, выполнены,
behaald, terpenuhi, ...). A run of base64 is decoded and read the same way; it is quoted whole when its
decoded text reads as addressed to the grader.

    handler = ScreenStandIn()  # answers assay's screen prompt; None for any other prompt
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from tests.fakes import Reply, reply

__all__ = ["READERS", "VERDICT_WORDS", "ScreenStandIn", "addressed_passages", "is_screen_prompt"]

READERS = (
    # English: who checks the work, named without the rule list's words
    "whoever checks", "whoever marks", "whoever grades", "whoever scores", "whoever reviews", "whoever reads",
    "whoever is checking", "whoever is marking", "whoever is scoring", "reviewer", "checker", "person marking",
    "person grading", "person checking", "assessment bot", "marker", "examiner", "assessor", "grader", "evaluator",
    # Japanese, Korean, Russian, Dutch, Chinese
    "採点者", "評価者", "審査員", "採点", "채점자", "평가자", "심사위원", "проверяющ", "экзаменатор", "оценщик",
    "beoordelaar", "examinator", "评分员", "阅卷人", "阅卷老师", "评审员", "评委",
    # Indonesian, Swahili, Vietnamese
    "penilai", "msahihishaji", "người chấm",
)
"""Words that name the reader who grades the work."""

VERDICT_WORDS = (
    "treat this as complete", "as complete", "count it", "count the", "as done", "covered", "tick",
    "nothing is missing", "both points", "all points", "every point", "full credit", "full score", "pass this",
    "approve", "criteria", "criterion", "requirement", "is met", "are met", " met.", "satisfied",
    "満たして", "満点", "合格", "충족", "만점", "통과", "выполнен", "засчита", "зачт", "behaald", "voldaan",
    "满分", "满足", "terpenuhi", "yametimiza", "đạt mọi",
)
"""Words that tell that reader something about the verdict."""

_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
_BLOCK = re.compile(r"<<<(?P<label>[A-Z]+)-(?P<token>[0-9a-f]{24})>>>\n(?P<body>.*?)\n<<<END-(?P=label)-(?P=token)>>>",
                    re.S)
_SENTENCE = re.compile(r"[^\n.!?。！？]*(?:[.!?。！？]+|\n|$)")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")
SCREEN_FORMAT = '{"passages"'
"""What marks assay's screen prompt: its reply format (after the last fenced block)."""


def _reads_as_addressed(sentence: str) -> bool:
    folded = sentence.casefold()
    plain = folded.translate(_LEET)
    return any(any(r in s for r in READERS) and any(v in s for v in VERDICT_WORDS) for s in (folded, plain))


def _decoded(run: str) -> str | None:
    try:
        raw = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None


def addressed_passages(text: str) -> list[str]:
    """The sentences (and base64 runs) of `text` this stand-in reads as addressed to the grader,
    each exactly as it appears in `text`."""
    out: list[str] = []
    for m in _SENTENCE.finditer(text):
        sentence = m.group(0).strip()
        if sentence and _reads_as_addressed(sentence):
            out.append(sentence)
    for m in _BASE64.finditer(text):
        decoded = _decoded(m.group(0))
        if decoded is not None and _reads_as_addressed(decoded):
            out.append(m.group(0))
    return out


def is_screen_prompt(prompt: str) -> bool:
    """Whether a prompt is assay's injection screen (its reply format follows the last block)."""
    return SCREEN_FORMAT in prompt.rsplit("<<<END-", 1)[-1]


class ScreenStandIn:
    """Answers assay's screen prompt with the passages `addressed_passages` finds in its fenced
    blocks; None for any other prompt. `asked` counts the screen prompts answered."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, body: Any) -> Reply | None:
        msgs = (body or {}).get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in msgs if m.get("role") == "user")
        if not is_screen_prompt(prompt):
            return None
        self.asked += 1
        quotes: list[str] = []
        for m in _BLOCK.finditer(prompt):
            quotes += [q for q in addressed_passages(m.group("body")) if q not in quotes]
        return reply(json.dumps({"passages": [{"quote": q, "why": "addressed to the grader"} for q in quotes]},
                                ensure_ascii=False))
