"""What every router decides the same way: broad fishing messages, and gate conditions.

Broad fishing messages ("tell me everything", "anything I should know?", "有什么需要注意的")
match nothing in every router: `is_broad` detects them explicitly (a short list of English
and Chinese patterns; a message is broad when such a pattern is present and nothing else in
it is specific, i.e. every other content word is generic).

**Lexical gate rule** (`lexical_gate`, used by the lexical, regex and embedding routers).
A condition's key terms are its content terms less gate boilerplate ("cites", "concrete",
"evidence", "shows", "mentions", ...). The message must contain at least one key term when
the condition has one or two, at least two when it has more. When the condition asks for
evidence (it says evidence, cites, concrete, proof, example, figures, numbers, data, logs,
specific, shows, 证据, 数据, 具体, ...), the message must also carry an evidence marker: a
number of two or more digits, a decimal or percentage, a date or time, an id such as
`INV-2041` or `#1234`, a quoted span of at least 6 characters, a file name with a data or
code extension, or a log-line marker (ERROR, WARN, Traceback, ...).

A topic's `requires` patterns are the task's, in Python syntax, run by RE2 in time linear in
the message (`requires_met`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from assay.people.lexicon import Term, similar, stem, terms
from assay.task.patterns import compile_pattern

__all__ = ["has_evidence", "is_broad", "lexical_gate", "requires_met"]

_BROAD = [re.compile(p, re.I) for p in (
    r"\b(tell|give|send|share|show|walk)\s+me\s+(through\s+)?(everything|all|anything|what\s+you\s+know)\b",
    r"\beverything\s+(you\s+know|you\s+have|i\s+(should|need\s+to|ought\s+to)\s+know|relevant|important)\b",
    r"\b(is\s+there\s+)?anything\s+(else\s+)?(i\s+(should|need\s+to|ought\s+to|must)\s+(know|be\s+aware)|"
    r"worth\s+knowing|important|relevant|useful|to\s+know|you\s+can\s+tell)\b",
    r"\bwhat\s+(else\s+)?(should|do|must)\s+i\s+(need\s+to\s+|ought\s+to\s+)?(know|be\s+aware)\b",
    r"\bwhat\s+do\s+you\s+know\b",
    r"\bany\s+(advice|tips?|thoughts|suggestions|pointers|insights|hints|recommendations|guidance)\b",
    r"\ball\s+(you\s+know|the\s+info(rmation)?|the\s+details)\b",
    r"\b(brain\s*dump|fill\s+me\s+in|the\s+full\s+picture|big\s+picture|heads[\s-]up)\b",
    r"\bwhat'?s?\s+(is\s+)?going\s+on\b",
    r"(告诉我|说说|讲讲)?(所有|全部|一切|一切的?)(情况|信息|事情|东西)?",
    r"(你知道的|你了解的)(都|全部|所有)",
    r"有(什么|没有|啥)(需要|应该|要|值得)?(注意|知道|了解|提醒)",
    r"有(什么|啥)(建议|提示|想法|经验)",
    r"还有(什么|啥|别的)",
    r"(介绍|说)一下(情况|背景)",
)]


_BROAD_WORDS = frozenset(["tell", "give", "send", "share", "show", "walk", "everything", "all", "anything", "know", "knowing", "known", "aware", "worth", "important", "relevant", "useful", "advice", "tip", "tips", "thought", "thoughts", "suggestion", "suggestions", "pointer", "pointers", "insight", "insights", "hint", "hints", "recommendation", "recommendations", "guidance", "brain", "dump", "fill", "picture", "big", "full", "heads", "going", "else"])


def is_broad(question: str) -> bool:
    """A fishing message: a broad pattern, and nothing specific beside it."""
    q = question.strip()
    spans = [m.span() for p in _BROAD for m in p.finditer(q) if m.end() > m.start()]
    if not spans:
        return False
    rest = list(q)
    for a, b in spans:
        rest[a:b] = [" "] * (b - a)
    specific = [t for t in terms("".join(rest))
                if t.weight >= 1.0 and t.text not in _BROAD_WORDS and stem(t.text) not in _BROAD_WORDS]
    return not specific


_EVIDENCE_WORDS = re.compile(
    r"evidence|\bcit(e|es|ed|ing)\b|concrete|proof|prove|example|figure|numbers?\b|\bdata\b|logs?\b|"
    r"specific|\bshow|demonstrat|quot|measur|record|证据|数据|具体|举例|例子|日志|记录|数字", re.I)


_GATE_BOILERPLATE = frozenset(stem(w) for w in ["cite", "cites", "cited", "citing", "concrete", "evidence", "specific", "specifically", "show", "shows", "showing", "mention", "mentions", "mentioning", "message", "question", "ask", "asks", "asker", "provide", "provides", "give", "gives", "include", "includes", "including", "state", "states", "example", "examples", "proof", "prove", "proves", "demonstrate", "demonstrates", "data", "number", "numbers", "figure", "figures", "explicit", "explicitly", "actual", "real", "clear", "clearly", "refer", "refers", "name", "names", "quote", "quotes", "quoting", "point", "points", "already", "have", "has", "been", "least", "one", "some", "any", "concretely", "evidenced", "record", "records"]) | frozenset(("证据", "具体", "举例", "例子", "提供", "说明", "提到", "引用"))


_EVIDENCE_MARKERS = [re.compile(p) for p in (
    r"\d+[.,]\d+|\d{2,}|\d+\s*%|百分之",
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}/\d{1,2}(/\d{2,4})?\b|\b\d{1,2}:\d{2}\b|\d+月\d+日",
    r"\b[A-Za-z]{1,6}[-_#]\d{2,}\b|#\d{2,}",
    r"\"[^\"]{6,}\"|'[^']{6,}'|“[^”]{6,}”|「[^」]{6,}」|`[^`]{6,}`",
    r"\b[\w.-]+\.(csv|json|jsonl|log|txt|py|sql|xlsx?|md|ya?ml|db|sqlite|pdf|ini|cfg|toml|html?)\b",
    r"\b(ERROR|WARN(ING)?|CRITICAL|FATAL|Traceback|Exception)\b",
)]


def has_evidence(question: str) -> bool:
    return any(p.search(question) for p in _EVIDENCE_MARKERS)


def _gate_key_terms(condition: str) -> list[Term]:
    return [t for t in terms(condition)
            if t.text not in _GATE_BOILERPLATE and t.weight > 0.25 and not t.text.isdigit()]


def lexical_gate(question: str, condition: str) -> bool:
    """Key terms of the condition in the message, plus an evidence marker when it asks for evidence."""
    if _EVIDENCE_WORDS.search(condition) and not has_evidence(question):
        return False
    key = _gate_key_terms(condition)
    if not key:
        return True
    need = 1 if len(key) <= 2 else 2
    q = [t.text for t in terms(question)]
    met = sum(1 for k in key if any(similar(k.text, x) for x in q))
    return met >= need


def requires_met(question: str, patterns: Sequence[str], require_all: bool) -> bool:
    """The topic's `requires` patterns in the message (case-insensitive), run by RE2: the
    message is the agent's, the pattern the task's, and RE2's time is linear in the message."""
    hits = (compile_pattern(p, "i", captures=False).search(question) is not None for p in patterns)
    return all(hits) if require_all else any(hits)
