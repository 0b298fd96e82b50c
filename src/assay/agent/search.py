"""Search for the tasks that use it: which backend a run gets, and the offline one.

`offer_search` decides, per task, mode and agent, what a run gets: the provider's own search
(`--search native`, model agents), the task's local corpus (`local`), Brave (`brave`,
`assay.agent.brave`), or nothing, and names the reason when a task that needs search cannot
get any (the planner skips it with that reason).

The offline backend is ranked retrieval (Okapi BM25, by the `bm25s` library) over the corpus
files, deterministic, so search runs can be tested and reproduced without the internet. The
tokeniser is ours: Latin words, and CJK characters as unigrams plus bigrams (Chinese has no
spaces to split on). Corpus files come from a suite, so they are read as `assay.fs` reads
agent files: no link followed, no special file opened, each file and the count capped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import bm25s
import numpy as np

from assay.agent.tools import SearchBackend
from assay.fs.paths import PathError
from assay.fs.reads import read_regular, read_tree
from assay.task.model import Task

SearchMode = Literal["off", "native", "local", "brave"]
CORPUS_MAX_FILES = 20_000
CORPUS_MAX_FILE_BYTES = 4 * 1024**2

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

    label = "local"

    def __init__(self, folder: Path, k1: float = 1.5, b: float = 0.75) -> None:
        self.docs: list[tuple[str, str, str]] = []  # (rel path, title, text)
        folder = Path(folder)
        for rel, data in _corpus_files(folder):
            if Path(rel).suffix.lower() in SUFFIXES:
                text = data.decode("utf-8", errors="replace")
                title = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.strip()), Path(rel).stem)
                self.docs.append((rel, title, text))
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


def _corpus_files(folder: Path) -> list[tuple[str, bytes]]:
    """(relative path, bytes) of the corpus's regular files, read without following links."""
    if folder.is_symlink():
        raise PathError(f"{folder}: refused: a corpus that is a symlink could lead outside the suite")
    if not folder.is_dir():
        return [(folder.name, read_regular(folder, CORPUS_MAX_FILE_BYTES))]
    return read_tree(folder, ".", max_file_bytes=CORPUS_MAX_FILE_BYTES, max_files=CORPUS_MAX_FILES)


@lru_cache(maxsize=64)
def _load(folder: str) -> CorpusSearch:
    return CorpusSearch(Path(folder))


def corpus_for_task(task: Task) -> CorpusSearch | None:
    if task.corpus is None:
        return None
    return _load(str(task.corpus))


@dataclass(frozen=True)
class SearchOffer:
    """What one run gets: a harness-run `web_search` tool, the provider's own search, or neither."""

    backend: SearchBackend | None = None
    native: bool = False

    @property
    def label(self) -> str | None:
        """Recorded on the run (`search`): "native", "local", "brave", or None when none was offered."""
        if self.backend is not None:
            return self.backend.label
        return "native" if self.native else None


NO_SEARCH = SearchOffer()
_HOW = "--search native (a model's own search), local (a corpus folder beside the task) or brave (BRAVE_API_KEY)"


def offer_search(task: Task, mode: str, agent_kind: str, brave: SearchBackend | None = None) -> SearchOffer:
    """The search a run of `task` gets under `--search mode`.

    FDE-Gym scenarios never get search. `native`: a model agent searches through its provider
    on every other task (the OneMillion-Bench search agent). `local`: tasks with a corpus.
    `brave`: every other task, as DareBench upstream's agent has search on every task."""
    if task.scenario is not None:
        return NO_SEARCH
    if mode == "native" and agent_kind == "model":
        return SearchOffer(native=True)
    if mode == "local" and task.corpus is not None:
        return SearchOffer(backend=corpus_for_task(task))
    if mode == "brave" and brave is not None:
        return SearchOffer(backend=brave)
    return NO_SEARCH


def search_skip_reason(task: Task, mode: str, agent_kind: str) -> str | None:
    """Why a task that needs search (`search: live`, e.g. DareBench's `requirements:
    [web_search]`) cannot run with this agent under `--search mode`; None when it can.
    Agents that never search (noop, policies) need none."""
    if task.search != "live" or task.scenario is not None or agent_kind not in ("model", "script", "human"):
        return None
    if mode == "brave" or (mode == "native" and agent_kind == "model") or (mode == "local" and task.corpus):
        return None
    if mode == "native":
        return ("needs web_search, and --search native is a model provider's own search: "
                f"a {agent_kind} agent needs --search local or brave")
    if mode == "local":
        return ("needs web_search and has no local corpus (a corpus/ folder beside the task file); "
                "use --search native or brave")
    return f"needs web_search: run it with {_HOW}"
