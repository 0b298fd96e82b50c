"""Local corpus search: Okapi BM25 (bm25s) over our CJK-aware tokens, ties by document order."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest

from assay.agent.search import CorpusSearch, tokens

STARTER = Path(__file__).resolve().parents[1] / "suites" / "starter" / "rubric"


def okapi(docs: list[list[str]], query: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    """Classic Okapi BM25, idf = log(1 + (n - df + 0.5) / (df + 0.5)), written out."""
    tfs = [Counter(d) for d in docs]
    avg = sum(len(d) for d in docs) / len(docs)
    df = Counter(t for tf in tfs for t in tf)
    n = len(docs)
    out = []
    for d, tf in zip(docs, tfs, strict=True):
        s = 0.0
        for t in query:
            f = tf.get(t, 0)
            if f:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                s += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(d) / avg))
        out.append(s)
    return out


def write(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def test_tokens_latin_words_and_cjk_unigrams_plus_bigrams() -> None:
    assert tokens("Roth IRA 2024's limit: $7,000") == ["roth", "ira", "2024's", "limit", "7", "000"]
    assert tokens("年终奖 计税") == ["年", "终", "年终", "奖", "终奖", "计", "奖计", "税", "计税"]


@pytest.mark.parametrize("query", ["roth ira income limit", "modified AGI phase-out range married",
                                   "excess contribution 6% tax", "roth roth ira"])
def test_scores_are_okapi_bm25(query: str) -> None:
    cs = CorpusSearch(STARTER / "en-finance-roth-ira-phaseout" / "corpus")
    docs = [tokens(text + " " + title) for _, title, text in cs.docs]
    want = okapi(docs, tokens(query))
    got = dict((i, s) for s, i in cs.rank(query))
    assert set(got) == {i for i, s in enumerate(want) if s > 0}
    for i, s in got.items():
        assert s == pytest.approx(want[i], rel=1e-9)
    assert [s for s, _ in cs.rank(query)] == sorted(got.values(), reverse=True)


def test_ties_go_to_the_earlier_document(tmp_path: Path) -> None:
    cs = CorpusSearch(write(tmp_path, {"b.md": "# same\nalpha beta", "a.md": "# same\nalpha beta",
                                       "c.md": "# other\ngamma"}))
    ranked = cs.rank("alpha")
    assert [cs.docs[i][0] for _, i in ranked] == ["a.md", "b.md"]
    assert ranked[0][0] == ranked[1][0] > 0


def test_chinese_query_finds_the_chinese_document(tmp_path: Path) -> None:
    cs = CorpusSearch(write(tmp_path, {"bonus.md": "# 年终奖单独计税\n全年一次性奖金单独计税优惠政策延续执行至2027年12月31日。\n",
                                       "other.md": "# 个人养老金\n个人养老金缴费每年上限12000元。\n"}))
    out = cs.search("年终奖 单独计税 延续", k=1)
    assert out.startswith("1. 年终奖单独计税 (corpus://bonus.md, score ")
    assert "个人养老金" not in out


def test_no_match_empty_query_and_empty_corpus(tmp_path: Path) -> None:
    assert CorpusSearch(tmp_path).search("anything") == "no results for 'anything'"
    cs = CorpusSearch(write(tmp_path, {"a.md": "# A\nhello world"}))
    assert cs.rank("") == [] and cs.rank("?!") == [] and cs.rank("unknownword") == []
    assert cs.search("hello").startswith("1. A (corpus://a.md, score ")


def test_search_output_format_and_k() -> None:
    cs = CorpusSearch(STARTER / "en-health-pediatric-acetaminophen" / "corpus")
    out = cs.search("acetaminophen dose infant mg/kg", k=3)
    blocks = out.split("\n\n")
    assert len(blocks) == 3
    for n, block in enumerate(blocks, start=1):
        head = block.split("\n", 1)[0]
        assert head.startswith(f"{n}. ") and "(corpus://" in head and ", score " in head
