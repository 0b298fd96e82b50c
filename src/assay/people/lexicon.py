"""The words of a message as the routers weigh them: terms, stems, synonyms, likeness.

A text is reduced to terms (`terms`): lower-cased words, stop words dropped, a light suffix
stemmer ("approvals" -> "approv", `stem`), a synonym table mapping words of one concept to one
term (cap/limit/threshold/上限/阈值 -> "threshold"), Chinese runs split into known words and
character bigrams. Each term has a weight: 1.0; 0.5 for numbers and Chinese bigrams; 0.25 for
generic words like "project", "data", "issue". Two terms meet (`similar`) when equal, when one
is a prefix of the other (both >= 5 letters), or when rapidfuzz's ratio is >= 88 (typos).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from rapidfuzz import fuzz

__all__ = ["Term", "similar", "stem", "terms"]

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


def stem(w: str) -> str:
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
            _SYN.setdefault(stem(_w), _canon)
_ZH_WORDS = sorted((w for w in _SYN if not w.isascii()), key=len, reverse=True)
_ZH_MAX = max((len(w) for w in _ZH_WORDS), default=1)
_GENERIC_STEMS = frozenset(stem(w) for w in _GENERIC) | _GENERIC
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
                st = stem(p)
                key = _SYN.get(st, st)
                w = 0.5 if p.isdigit() else 0.25 if (p in _GENERIC or st in _GENERIC_STEMS) else 1.0
            if key and key not in _STOP_EN:
                out[key] = max(out.get(key, 0.0), w)
    return tuple(Term(k, w) for k, w in out.items())


def similar(a: str, b: str) -> bool:
    if a == b:
        return True
    if a[0] == "~" or b[0] == "~" or not (a.isascii() and b.isascii()):
        return False
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if len(short) >= 5 and long_.startswith(short):
        return True
    return len(short) >= 6 and fuzz.ratio(a, b) >= 88
