"""People in the report (issue 13 part 4): human runs (`human:NAME` agents) get their own
summary and CI in every kind's block beside the models, and a human expert baseline row per
kind and task family once people have `MIN_HUMAN_RUNS` scored runs there, with every model's
mean on the same tasks beside it; golden numbers on a store with human and model runs, and
the rows in the terminal and Markdown reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay import metrics
from assay.report.build import MIN_HUMAN_RUNS, build_report
from assay.store import Store
from tests.helpers import assay
from tests.test_report_read import _rec, varied


def _store(tmp: Path) -> Store:
    st = Store(f"sqlite:///{tmp / '.assay' / 'assay.db'}")
    for r in varied("c"):
        st.save_run(r, [])
    for e in (1, 2):  # a second person on r1: pooled with alice in the baseline
        st.save_run(_rec("c", "human:bob", "r1", "rubric", 0.9, epoch=e), [])
    return st


def test_people_have_their_own_blocks_and_a_baseline_per_family(tmp_path: Path) -> None:
    rep = build_report("c", _store(tmp_path).runs("c"))
    agents = {a["agent"]: a for a in rep["agents"]}
    alice = agents["human:alice"]
    # Alice's rubric runs: r1 at 0.2, 0.4, 0.6 and r2 at 0 three times (the audit removed one).
    assert alice["rubric"]["expert_score"] == pytest.approx(1.2 / 6)
    assert alice["rubric"]["ci95"] == list(metrics.bootstrap_ci([0.2, 0.4, 0.6, 0.0, 0.0, 0.0], resamples=2000))
    assert "contract" in alice and "scenario" in alice and "human:bob" in agents
    assert MIN_HUMAN_RUNS == 3
    base = rep["human_baseline"]
    r1 = base["rubric"]["r1"]
    # People pooled on r1: alice 0.2, 0.4, 0.6 and bob 0.9 twice.
    assert r1["people"] == ["human:alice", "human:bob"] and r1["runs"] == 5
    assert r1["mean"] == pytest.approx(3.0 / 5) and r1["tasks"] == ["r1"]
    assert r1["ci95"] == list(metrics.bootstrap_ci([0.2, 0.4, 0.6, 0.9, 0.9], resamples=2000))
    # Models beside it on the same tasks: m1 0.2/0.4/0.6, m2 each +0.1.
    assert r1["agents"]["m1"] == {"mean": pytest.approx(0.4), "runs": 3}
    assert r1["agents"]["m2"] == {"mean": pytest.approx(0.5), "runs": 3}
    assert base["rubric"]["r2"]["runs"] == 3 and base["rubric"]["r2"]["mean"] == 0.0
    assert "r3" not in base["rubric"]  # people never ran it
    assert "contract" not in base  # one human run per contract family: below the threshold
    # Scenario family `fam` (v1 and v2 at three levels): S floored at -1, as every mean.
    fam = base["scenario"]["fam"]
    s = [metrics.floored_score(u, 0.1) for u in (0.9, -2.5, 0.3, 0.45, -1.25, 0.15)]
    assert fam["runs"] == 6 and fam["mean"] == pytest.approx(sum(s) / 6)
    assert fam["tasks"] == ["fam/v1", "fam/v2"] and set(fam["agents"]) == {"m1", "m2"}


def test_no_baseline_below_the_threshold(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'a.db'}")
    for e in (1, 2):
        st.save_run(_rec("c", "human:alice", "t", "rubric", 0.5, epoch=e), [])
        st.save_run(_rec("c", "m1", "t", "rubric", 0.5, epoch=e), [])
    st.save_run(_rec("c", "human:alice", "t", "rubric", 0.5, epoch=3, void=True), [])  # void: not counted
    rep = build_report("c", st.runs("c"))
    assert rep["human_baseline"] == {} and {a["agent"] for a in rep["agents"]} == {"human:alice", "m1"}


def test_terminal_and_markdown_show_the_baseline(tmp_path: Path) -> None:
    _store(tmp_path).close()
    r = assay("report", "--campaign", "c", "--md", "r.md", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "human expert baseline per task family" in r.stdout and "human:bob" in r.stdout
    md = (tmp_path / "r.md").read_text()
    assert "### rubric · human expert baseline per task family" in md
    assert "| r1 | human:alice, human:bob | 5 | 0.6 |" in md
