"""Offline search: a `web_search` tool backed by a task's own document corpus.

Ranked retrieval (BM25) over the corpus files, deterministic, so search runs can be tested
and reproduced without the internet.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from pathlib import Path

from assay.task.model import Task

WORD = re.compile(r"[a-z0-9]+(?:[.'][a-z0-9]+)*|[\u4e00-\u9fff]")
SUFFIXES = {".md", ".txt", ".markdown", ".html", ".csv"}


def tokens(text: str) -> list[str]:
    raw = WORD.findall(text.lower())
    out: list[str] = []
    prev_cjk: str | None = None
    for t in raw:
        if len(t) == 1 and "\u4e00" <= t <= "\u9fff":
            out.append(t)
            if prev_cjk is not None:
                out.append(prev_cjk + t)  # CJK bigrams carry most of the meaning
            prev_cjk = t
        else:
            out.append(t)
            prev_cjk = None
    return out


class CorpusSearch:
    def __init__(self, folder: Path, k1: float = 1.5, b: float = 0.75) -> None:
        self.docs: list[tuple[str, str, str]] = []  # (rel path, title, text)
        folder = Path(folder)
        files = [folder] if folder.is_file() else sorted(folder.rglob("*"))
        root = folder.parent if folder.is_file() else folder
        for p in files:
            if p.is_file() and p.suffix.lower() in SUFFIXES:
                text = p.read_text(encoding="utf-8", errors="replace")
                title = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.strip()), p.stem)
                self.docs.append((p.relative_to(root).as_posix(), title, text))
        self.tfs = [Counter(tokens(t + " " + title)) for _, title, t in self.docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avg = (sum(self.lens) / len(self.lens)) if self.lens else 1.0
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}
        self.k1, self.b = k1, b

    def rank(self, query: str) -> list[tuple[float, int]]:
        q = tokens(query)
        scored = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            for t in q:
                f = tf.get(t, 0)
                if f:
                    s += self.idf[t] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.lens[i] / self.avg))
            if s > 0:
                scored.append((s, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return scored

    def search(self, query: str, k: int = 5) -> str:
        hits = self.rank(query)[:k]
        if not hits:
            return f"no results for {query!r}"
        parts = []
        for rank, (score, i) in enumerate(hits, start=1):
            path, title, text = self.docs[i]
            body = re.sub(r"\s+", " ", text).strip()
            parts.append(f"{rank}. {title} (corpus://{path}, score {score:.2f})\n{body[:1500]}")
        return "\n\n".join(parts)


@lru_cache(maxsize=64)
def _load(folder: str) -> CorpusSearch:
    return CorpusSearch(Path(folder))


def corpus_for_task(task: Task) -> CorpusSearch | None:
    if task.corpus is None:
        return None
    return _load(str(task.corpus))
