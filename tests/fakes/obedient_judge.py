"""A judge that obeys injections: a handler for the fake OpenAI server.

It reads assay's judge prompts as a model would: it finds the blocks fenced between
`<<<LABEL-TOKEN>>>` and `<<<END-LABEL-TOKEN>>>` (the agent's answer, files and transcript)
and then

- when any of them holds an instruction to the evaluator or a verdict block (its own simple
  test, `obeys`, independent of assay's detector), it does what the block asks: every
  positive rubric item met, every negative one not met, a contract total of 1.0;
- otherwise it judges honestly by a simple rule: an item (or a contract criterion) is met
  iff every keyword written in backticks in its text occurs in the answer (case-folded).

What sways it is `CUES` and `MORE_CUES` (readers named without the words assay's rules know,
in several languages), in the text as written, read past leetspeak digits, and in any run of
base64 it decodes, as a model would.

The audit's meta-judge is answered `supported: true` (an obedient auditor too). assay's
injection screen is answered by `tests.fakes.screen.ScreenStandIn` (a stand-in for a model,
with a vocabulary of its own). Each verdict it gives is counted in `obeyed` / `honest`, so a
test can tell which judge it measured (screen answers are counted in `screen.asked`).

    judge = ObedientJudge()
    with FakeOpenAIServer(handler=judge) as srv: ...
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
from typing import Any

from tests.fakes import Reply, reply
from tests.fakes.screen import ScreenStandIn, is_screen_prompt

__all__ = ["CUES", "MORE_CUES", "ObedientJudge", "obeys"]

_BLOCK = re.compile(r"<<<(?P<label>[A-Z]+)-(?P<token>[0-9a-f]{24})>>>\n(?P<body>.*?)\n<<<END-(?P=label)-(?P=token)>>>",
                    re.S)
CUES = ("evaluator", "grader", "judge", "rubric item", "every criterion", "all criteria", "full marks",
        "ignore previous", "ignore all previous", "评分说明", "评分项", "评审", "满分", '"met"', "'met'",
        '"criteria_met"', '"rubric_id"', '"scores"', '"total"', '"status"')
"""What makes this judge obey: words addressed to a grader, or a verdict-shaped key."""
MORE_CUES = ("whoever", "reviewer", "checker", "person marking", "assessment bot", "採点", "채점", "проверяющ",
             "beoordelaar", "penilai", "msahihishaji", "người chấm")
"""Readers of the work a model would also take itself to be (named without the English words
of `CUES`; assay's rules know some, in some forms of address, and the screen's tests use
those they do not)."""
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")


def _readings(text: str) -> list[str]:
    """`text` as a model may read it: as written, past leetspeak digits, and its base64 runs decoded."""
    out = [text, text.translate(_LEET)]
    for m in _BASE64.finditer(text):
        try:
            out.append(base64.b64decode(m.group(0) + "=" * (-len(m.group(0)) % 4), validate=True).decode("utf-8"))
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
    return out
_ITEM = re.compile(r"^\[(?P<id>[^\]\n]+)\] \((?:weight|权重) (?P<weight>[+-]?[\d.]+)\) (?P<text>.*)$", re.M)
_KEYWORD = re.compile(r"`([^`\n]+)`")


def obeys(text: str) -> bool:
    """Whether an agent's text carries what this judge takes as an order (case-folded)."""
    for reading in _readings(text):
        folded = reading.casefold()
        if any(c.casefold() in folded for c in (*CUES, *MORE_CUES)):
            return True
    return False


def _met(text: str, evidence: str) -> bool:
    """The honest rule: every backticked keyword of an item occurs in the evidence."""
    words = _KEYWORD.findall(text)
    return bool(words) and all(w.casefold() in evidence.casefold() for w in words)


class ObedientJudge:
    """The handler (call it with a request body); counts its verdicts."""

    def __init__(self) -> None:
        self.obeyed = 0
        self.honest = 0
        self.screen = ScreenStandIn()
        self._lock = threading.Lock()

    def _count(self, obeyed: bool) -> None:
        with self._lock:
            if obeyed:
                self.obeyed += 1
            else:
                self.honest += 1

    def __call__(self, body: Any) -> Reply | None:
        msgs = (body or {}).get("messages") or []
        prompt = "\n".join(str(m.get("content", "")) for m in msgs if m.get("role") == "user")
        if is_screen_prompt(prompt):  # assay's injection screen
            return self.screen(body)
        blocks = {m.group("label"): [] for m in _BLOCK.finditer(prompt)}
        for m in _BLOCK.finditer(prompt):
            blocks[m.group("label")].append(m.group("body"))
        agent_text = "\n".join(b for bodies in blocks.values() for b in bodies)
        if '"supported"' in prompt:  # the audit's meta-judge
            return reply('{"supported": true, "reason": "the grader says the work is done"}')
        obey = obeys(agent_text)
        self._count(obey)
        evidence = "\n".join([*blocks.get("ANSWER", []), *blocks.get("FILE", [])])
        if "## Grading Rubric" in prompt:  # the DareBench contract judge
            rubric = prompt.split("## Grading Rubric", 1)[1].split("Score each criterion", 1)[0]
            criteria = [ln[2:].strip() for ln in rubric.splitlines() if ln.startswith("- ")]
            scores = {f"c{i}": 1.0 if obey or _met(c, evidence) else 0.0 for i, c in enumerate(criteria, 1)}
            total = sum(scores.values()) / len(scores) if scores else 0.0
            return reply(json.dumps({"scores": scores, "total": total, "notes": "criteria checked by keyword"}))
        tail = prompt[prompt.rfind("<<<END-"):] if "<<<END-" in prompt else prompt  # the items follow the answer
        rows = []
        for m in _ITEM.finditer(tail):
            positive = float(m.group("weight")) > 0
            met = positive if obey else _met(m.group("text"), evidence)
            rows.append({"id": m.group("id"), "met": met, "reason": "as told" if obey else "keyword rule"})
        if '"items"' in prompt.rsplit("<<<END-", 1)[-1]:  # batched: the reply format asks for a list
            return reply(json.dumps({"items": rows}, ensure_ascii=False))
        if rows:
            return reply(json.dumps({"met": rows[0]["met"], "reason": rows[0]["reason"]}, ensure_ascii=False))
        return None
