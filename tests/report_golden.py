"""The report's golden outputs: a varied store built from fixed records, and the commands whose
outputs (report JSON, Markdown, CSV, terminal, compare) tests/fixtures/report_golden holds as the
report code of before issue 26 printed them (`tests/test_report_golden.py` compares today's).

The store: all three kinds (rubric runs with judge info, NA items, tags, an audit removal and
values; contract runs of both modalities; scenario runs of levels and families, an S floored at
-1), three epochs, void runs (one re-run as attempt 2), a broken task, keys that differ only in
the task's hash or options, an agent run with and without search, people (`human:`), human
labels, two campaigns. Run ids are fixed, so the outputs are too.

Regenerate (only when a change of the report is meant): `python -m tests.report_golden [CASE...]`.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from assay.record import RunRecord
from assay.store import Store
from tests.helpers import REPO, assay
from tests.test_report_read import _rec, same_task_other_keys, varied

GOLDEN = REPO / "tests" / "fixtures" / "report_golden"


def _broken(campaign: str, agent: str, epoch: int) -> RunRecord:
    r = _rec(campaign, agent, "r9", "rubric", 0.0, epoch=epoch)
    return r.model_copy(update={"status": "broken", "end_reason": "finished", "score": None, "passed": None,
                                "void_reason": "its grader fails on its own reference: no item met"})


def _searching(campaign: str) -> list[RunRecord]:
    """m1 runs r1 with local search too: a search delta."""
    out = []
    for e in (1, 2):
        r = _rec(campaign, "m1", "r1", "rubric", 0.5 + 0.1 * e, epoch=e, options_hash="o-search")
        out.append(r.model_copy(update={"options": {"search": "local"}, "search": "local"}))
    return out


def records() -> list[RunRecord]:
    runs: list[RunRecord] = []
    for campaign in ("c", "other"):
        runs += [*varied(campaign), *same_task_other_keys(campaign)]
    runs += _searching("c")
    runs += [_broken("c", a, e) for a in ("m1", "m2") for e in (1, 2)]
    # Fixed run ids (`_rec` draws random ones) and start times, in the order built.
    return [r.model_copy(update={"run_id": f"{i:032x}", "started_at": 1_700_000_000.0 + i})
            for i, r in enumerate(runs)]


def labels(runs: list[RunRecord]) -> list[dict[str, Any]]:
    return [{"run_id": r.run_id, "task_id": r.key.task_id, "item_id": "i1", "met": r.key.epoch != 2,
             "labeller": "expert"} for r in runs if r.key.campaign == "c" and r.key.task_id == "r1"]


def build_store(folder: Path) -> Path:
    """The store (a SQLite file in `folder`) and the labels file beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    runs = records()
    with Store(f"sqlite:///{folder / 'assay.db'}") as st:
        for r in runs:
            st.save_run(r, [])
    (folder / "labels.jsonl").write_text("".join(json.dumps(lab) + "\n" for lab in labels(runs)))
    return folder


CASES: dict[str, list[str]] = {
    "full": ["report", "--campaign", "c", "--json", "{out}/full.json", "--md", "{out}/full.md",
             "--csv", "{out}/full.csv", "--runs"],
    "leaderboard": ["report", "--campaign", "c"],
    "every_campaign": ["report"],
    "shared": ["report", "--campaign", "c", "--shared-tasks", "--json", "{out}/shared.json"],
    "filtered": ["report", "--campaign", "c", "--kind", "rubric", "--agent", "m1", "--agent", "human:alice",
                 "--json", "{out}/filtered.json"],
    "labelled": ["report", "--campaign", "c", "--labels", "{store}/labels.jsonl", "--json", "{out}/labelled.json"],
    "other": ["report", "--campaign", "other", "--md", "{out}/other.md"],
    "html": ["report", "--campaign", "c", "--html", "{out}/r.html"],
    "compare": ["compare", "m1", "m2", "--campaign", "c", "--json", "{out}/compare.json"],
    "compare_against": ["compare", "m1", "m1", "--campaign", "c", "--against-campaign", "other",
                        "--json", "{out}/compare_against.json"],
}
"""Each case's command (`{store}`: the store's folder, `{out}`: where its files go)."""


def run_case(name: str, store: Path, out: Path) -> dict[str, str]:
    """A case's outputs: `stdout` (the terminal's) and each file it wrote, by file name."""
    args = [a.format(store=store, out=out) for a in CASES[name]]
    before = set(out.iterdir())
    r = assay(*args, "--store", f"sqlite:///{store / 'assay.db'}", cwd=store,
              env={"COLUMNS": "160"})
    if r.returncode != 0:
        raise AssertionError(f"{name}: exit {r.returncode}: {r.stderr}")
    files = {p.name: p.read_text() for p in sorted(set(out.iterdir()) - before)}
    return {"stdout": r.stdout, "stderr": r.stderr, **files}


def same(a: Any, b: Any, path: str = "$") -> list[str]:
    """Where two JSON values differ (floats equal to 1e-9 relative: sums in another order)."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool) \
                and not isinstance(b, bool) and (a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
                                                 or (math.isnan(a) and math.isnan(b))):
            return []
        return [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{path}: keys {list(a)} != {list(b)}"]
        return [d for k in a for d in same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in same(x, y, f"{path}[{i}]")]
    return [] if a == b and type(a) is type(b) else [f"{path}: {a!r} != {b!r}"]


def main(names: list[str]) -> None:
    """Write the golden outputs of the cases `names` (all when empty)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        store = build_store(Path(tmp) / "store")
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for name in names or CASES:
            out = Path(tmp) / name
            out.mkdir()
            for file, text in run_case(name, store, out).items():
                (GOLDEN / f"{name}.{file}").write_text(text)


if __name__ == "__main__":
    import sys

    os.environ.setdefault("PYTHONPATH", str(REPO / "src"))
    main(sys.argv[1:])
