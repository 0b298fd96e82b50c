"""Offline search: a `web_search` tool backed by a task's own document corpus.

Ranked retrieval (Okapi BM25, by the `bm25s` library) over the corpus files, deterministic, so
search runs can be tested and reproduced without the internet. The tokeniser is ours: Latin
words, and CJK characters as unigrams plus bigrams (Chinese has no spaces to split on).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import bm25s
import numpy as np

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
    """BM25 over a folder of documents (or one file). Scores are classic Okapi BM25,
    idf = log(1 + (n - df + 0.5) / (df + 0.5)), k1 = 1.5, b = 0.75; ties go to the earlier file."""

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
        self.k1, self.b = k1, b
        corpus = [tokens(t + " " + title) for _, title, t in self.docs]
        self._index: bm25s.BM25 | None = None
        if any(corpus):  # bm25s needs at least one token in the corpus
            # bm25s' "lucene" method is Okapi BM25 with the idf above, but its term-frequency part
            # leaves out the constant (k1 + 1) factor: `rank` puts it back, so scores are unchanged.
            self._index = bm25s.BM25(k1=k1, b=b, method="lucene", dtype="float64")
            self._index.index(corpus, show_progress=False)

    def rank(self, query: str) -> list[tuple[float, int]]:
        """(score, document index) of every document matching the query, best first."""
        if self._index is None:
            return []
        ids = self._index.get_tokens_ids(tokens(query))  # unknown tokens are dropped
        if not ids:
            return []
        scores = self._index.get_scores_from_ids(ids) * (self.k1 + 1)
        hit = np.flatnonzero(scores > 0)
        order = hit[np.argsort(-scores[hit], kind="stable")]  # stable: ties by document order
        return [(float(scores[i]), int(i)) for i in order]

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
