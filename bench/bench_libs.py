"""Speed of the two library-backed mechanisms: near-JSON judge replies and local corpus search.

    python bench/bench_libs.py [--seconds 0.3] [--queries 1000] [--builds 20] [--json-only]

(a) `parse_lenient` over 20 realistic judge replies (clean JSON, fenced, prose-wrapped,
    truncated, smart quotes, Python literals, reasoning before the verdict ...): calls per
    second for each reply and for the whole mix; `json_candidates` too where it exists.
(b) `CorpusSearch` over each starter corpus, plus a Chinese corpus made of the Chinese starter
    tasks' reference and shortcut files (the starter corpora are English): build time (median
    of --builds builds) and time per query over --queries queries, English and Chinese mixed.

To time the code as it was before a change, put that tree's `src/` first on the path, e.g.

    mkdir -p /tmp/before && git archive <commit> src | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/src python bench/bench_libs.py

Prints tables, then one JSON line with every number.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RUBRIC = ROOT / "suites" / "starter" / "rubric"

import assay.agent.search as search_mod  # noqa: E402

try:  # the module's home since the llm/ layer; the tree before the library change had it in grade/
    import assay.llm.jsonrepair as jr  # noqa: E402
except ModuleNotFoundError:
    import assay.grade.jsonrepair as jr  # type: ignore[no-redef]  # noqa: E402

REASON = "The response states this explicitly in its calculation section, with the right units."
ITEMS = [{"id": f"item-{i}", "met": i % 3 != 0, "reason": REASON} for i in range(1, 13)]
BATCH = json.dumps({"items": ITEMS})
BATCH_ZH = json.dumps({"items": [{"id": str(i), "met": i % 2 == 0, "reason": "回答中给出了正确的计算过程，结论：符合。"}
                                 for i in range(1, 9)]}, ensure_ascii=False)


def _smart(s: str) -> str:
    out, opening = [], True
    for ch in s:
        if ch == '"':
            out.append("“" if opening else "”")
            opening = not opening
        else:
            out.append(ch)
    return "".join(out)


REPLIES: dict[str, str] = {
    "clean batched (12 items)": BATCH,
    "clean per-item": '{"met": true, "reason": "States 15 mg/kg every 4 to 6 hours."}',
    "clean OneMillion-Bench array": json.dumps([{"rubric_id": f"Rubric {i}", "status": "是" if i % 2 else "否",
                                                 "justification": "回答覆盖了该要点。"} for i in range(1, 9)],
                                               ensure_ascii=False),
    "clean HealthBench": '{"explanation": "The response tells the user to call 911.", "criteria_met": true}',
    "clean DareBench scores": '{"scores": {"correctness": 1, "completeness": 0.5, "format": 1}, "total": 0.83, '
                              '"notes": "Minor omission in the summary."}',
    "clean audit meta-judge": '{"supported": false, "reason": "The artifact cited in the verdict does not exist."}',
    "clean router topics": '{"topics": ["refund_cap", "approval"]}',
    "fenced batched": f"Here is my evaluation:\n```json\n{BATCH}\n```\nLet me know if you need more.",
    "fenced, no language": f"```\n{BATCH}\n```",
    "prose around": f"After reading the response against each rubric item, my verdicts are: {BATCH} "
                    "Overall the answer is strong.",
    "reasoning then fenced verdict": "Item 1: the response gives the dose [15 mg/kg]. Item 2: it omits the "
                                     "maximum. The answer also says {ignore the rubric}.\n\n"
                                     f"```json\n{BATCH}\n```",
    "trailing commas": BATCH.replace("}", ",}").replace("]", ",]"),
    "smart quotes": _smart(BATCH),
    "python literals": BATCH.replace('"', "'").replace("true", "True").replace("false", "False"),
    "truncated mid-string": BATCH[: int(len(BATCH) * 0.7)],
    "truncated mid-key": '{"items": [{"id": "dose", "met": true}, {"id": "max", "me',
    "truncated per-item": '{"met": false, "reason": "The response recommends an adult tab',
    "zh full-width punctuation": BATCH_ZH.replace('": ', '"： ').replace(', "', '， "'),
    "zh fenced": f"评估结果如下：\n```json\n{BATCH_ZH}\n```",
    "no JSON (refusal)": "I am sorry, but I cannot evaluate this response.",
}


def rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per second of `fn`, over at least `seconds` (best of three slices)."""
    n = 1
    while True:  # find a batch that takes about a tenth of the budget
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t0
        if dt >= seconds / 10:
            break
        n *= 2
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = max(best, n / (time.perf_counter() - t0))
    return best


def _quiet(f: Callable[[str], Any], text: str) -> Callable[[], Any]:
    def call() -> Any:
        try:
            return f(text)
        except ValueError:
            return None
    return call


def bench_json(seconds: float) -> dict[str, Any]:
    has_candidates = hasattr(jr, "json_candidates")
    rows = []
    for name, text in REPLIES.items():
        row = {"reply": name, "chars": len(text), "parse_lenient_per_s": rate(_quiet(jr.parse_lenient, text), seconds)}
        if has_candidates:
            row["json_candidates_per_s"] = rate(_quiet(jr.json_candidates, text), seconds)
        rows.append(row)
    texts = list(REPLIES.values())

    def mix() -> None:
        for t in texts:
            _quiet(jr.parse_lenient, t)()
    return {"rows": rows, "mix_replies_per_s": rate(mix, seconds * 3) * len(texts)}


def zh_corpus(tmp: Path) -> Path:
    out = tmp / "zh-corpus"
    out.mkdir()
    for task in sorted(RUBRIC.glob("cn-*")):
        for f in sorted(task.glob("*.md")):
            shutil.copy(f, out / f"{task.name}-{f.name}")
    return out


def queries(n: int, rng: random.Random) -> list[str]:
    en_words = re.findall(r"[A-Za-z][A-Za-z0-9'-]+", " ".join(
        p.read_text(encoding="utf-8") for p in sorted(RUBRIC.glob("en-*/corpus/*.md"))))
    zh_text = "".join(re.findall(r"[\u4e00-\u9fff]+", " ".join(
        p.read_text(encoding="utf-8") for p in sorted(RUBRIC.glob("cn-*/*.md")))))
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(" ".join(rng.choice(en_words) for _ in range(rng.randint(2, 7))))
        else:
            parts = []
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(zh_text) - 6)
                parts.append(zh_text[j:j + rng.randint(2, 6)])
            out.append(" ".join(parts))
    return out


def bench_search(n_queries: int, builds: int) -> list[dict[str, Any]]:
    rows = []
    qs = queries(n_queries, random.Random(7))
    with tempfile.TemporaryDirectory() as tmp:
        folders = [*sorted(RUBRIC.glob("*/corpus")), zh_corpus(Path(tmp))]
        for folder in folders:
            times = []
            for _ in range(builds):
                t0 = time.perf_counter()
                cs = search_mod.CorpusSearch(folder)
                times.append(time.perf_counter() - t0)
            hits = 0
            t0 = time.perf_counter()
            for q in qs:
                hits += bool(cs.rank(q))
            rank_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            for q in qs:
                cs.search(q, 5)
            search_s = time.perf_counter() - t0
            name = folder.parent.name if folder.name == "corpus" else "zh (cn-* task files)"
            rows.append({"corpus": name, "docs": len(cs.docs),
                         "chars": sum(len(t) for _, _, t in cs.docs),
                         "build_ms": statistics.median(times) * 1e3,
                         "rank_us_per_query": rank_s / len(qs) * 1e6,
                         "search_us_per_query": search_s / len(qs) * 1e6,
                         "queries": len(qs), "queries_with_hits": hits})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=0.3, help="time budget per measured reply")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--builds", type=int, default=20)
    ap.add_argument("--json-only", action="store_true")
    a = ap.parse_args()
    where = str(Path(jr.__file__).resolve().parents[2])
    js = bench_json(a.seconds)
    sr = bench_search(a.queries, a.builds)
    if not a.json_only:
        print(f"assay from {where}; python {sys.version.split()[0]}")
        print(f"\n(a) parse_lenient, calls/s{' | json_candidates, calls/s' if 'json_candidates_per_s' in js['rows'][0] else ''}")
        for r in js["rows"]:
            extra = f" {r['json_candidates_per_s']:>10,.0f}" if "json_candidates_per_s" in r else ""
            print(f"  {r['reply']:<32} {r['chars']:>6} chars {r['parse_lenient_per_s']:>10,.0f}{extra}")
        print(f"  {'mix of all 20':<32} {'':>12} {js['mix_replies_per_s']:>10,.0f}")
        print("\n(b) CorpusSearch: build ms (median) | rank us/query | search(k=5) us/query | queries with hits")
        for r in sr:
            print(f"  {r['corpus']:<36} {r['docs']:>3} docs {r['build_ms']:>8.2f} {r['rank_us_per_query']:>9.1f}"
                  f" {r['search_us_per_query']:>9.1f}   {r['queries_with_hits']}/{r['queries']}")
    print(json.dumps({"bench": "libs", "src": where, "json": js, "search": sr}))


if __name__ == "__main__":
    main()
