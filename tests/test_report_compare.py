"""`assay compare` on a store built here: a hand-computed paired example, the -1 floor of
scenario scores, keys only one side finished, across campaigns, and the refusals."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from assay import metrics
from assay.record import Grade, RubricGrade, RunKey, RunRecord, ScenarioGrade
from assay.store import Store
from tests.helpers import assay


def record(agent: str, task: str, score: float, *, campaign: str = "default", epoch: int = 1,
           status: str = "done", scenario: tuple[float, float] | None = None, level: str | None = None) -> RunRecord:
    grade = Grade(rubric=RubricGrade(expert_score=score))
    kinds = ["rubric"]
    if scenario is not None:  # (uplift_adj, contact_cost)
        kinds = ["scenario"]
        u_adj, cost = scenario
        grade = Grade(scenario=ScenarioGrade(kpi=0, kpi_baseline=0, kpi_reference=1, uplift=u_adj, uplift_adj=u_adj,
                                             contact_cost=cost, score=u_adj - cost, net=u_adj - cost))
        score = u_adj - cost
    done = status == "done"
    return RunRecord(run_id=uuid.uuid4().hex, key=RunKey(campaign=campaign, task_id=task, task_hash="h-" + task,
                                                         agent=agent, level=level, epoch=epoch, options_hash="o"),
                     kinds=kinds, harness_version="test", status="done" if done else "void",
                     end_reason="finished" if done else "api_error", score=score if done else None,
                     passed=None, grade=grade)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    a = [0.2, 0.3, 0.1, 0.4, 0.5]
    b = [0.6, 0.7, 0.5, 0.5, 0.4]
    for i, (sa, sb) in enumerate(zip(a, b, strict=True), start=1):
        st.save_run(record("A", f"t{i}", sa), [])
        st.save_run(record("B", f"t{i}", sb), [])
    # A scenario: A's S is -3.0 - 0.1, floored at -1 before its cost: -1.1; B's is 0.5 - 0.1 = 0.4.
    st.save_run(record("A", "s1", 0, scenario=(-3.0, 0.1)), [])
    st.save_run(record("B", "s1", 0, scenario=(0.5, 0.1)), [])
    st.save_run(record("A", "only-a", 0.9), [])
    st.save_run(record("B", "only-b", 0.9), [])
    st.save_run(record("A", "void-a", 0.0, status="void"), [])  # A did not finish it: B's run is unpaired
    st.save_run(record("B", "void-a", 0.8), [])
    st.close()
    return tmp_path


def test_compare_matches_a_hand_computed_paired_example(store_dir: Path) -> None:
    r = assay("compare", "A", "B", "--json", "cmp.json", cwd=store_dir)
    assert r.returncode == 0, r.stderr
    cmp = json.loads((store_dir / "cmp.json").read_text())
    assert cmp["schema"] == "assay.compare/1" and (cmp["a"], cmp["b"]) == ("A", "B")
    rub = cmp["kinds"]["rubric"]
    # diffs B - A: 0.4, 0.4, 0.4, 0.1, -0.1 -> mean 1.2 / 5 = 0.24
    assert rub["n"] == 5 and rub["mean_a"] == pytest.approx(0.3) and rub["mean_b"] == pytest.approx(0.54)
    assert rub["diff"] == pytest.approx(0.24)
    assert (rub["wins"], rub["losses"], rub["ties"]) == (4, 1, 0)
    # Exact sign flips: |sum| >= 1.2 only when the three 0.4s share a sign (2 ways) and the two
    # 0.1s do not both oppose them (3 of 4 ways): 6 of 2**5 = 32.
    assert rub["p_value"] == pytest.approx(6 / 32)
    assert rub["ci95"] == pytest.approx(list(metrics.bootstrap_ci([0.4, 0.4, 0.4, 0.1, -0.1], seed=0)))
    assert -0.1 <= rub["ci95"][0] <= 0.24 <= rub["ci95"][1] <= 0.4
    sc = cmp["kinds"]["scenario"]
    assert sc["n"] == 1 and sc["mean_a"] == pytest.approx(-1.1) and sc["mean_b"] == pytest.approx(0.4)
    assert sc["diff"] == pytest.approx(1.5) and sc["p_value"] == 1.0 and sc["ci95"] == pytest.approx([1.5, 1.5])
    overall = cmp["overall"]
    # diffs 0.4, 0.4, 0.4, 0.1, -0.1, 1.5: mean 2.7 / 6 = 0.45; |sum| >= 2.7 needs the 1.5 and
    # the rest (|rest| >= 1.2, 6 ways of 32) on one side: 6 of 64.
    assert overall["n"] == 6 and overall["diff"] == pytest.approx(0.45)
    assert overall["p_value"] == pytest.approx(6 / 64)
    assert (overall["wins"], overall["losses"], overall["ties"]) == (5, 1, 0)
    assert cmp["only_a"] == [{"task_id": "only-a", "level": None, "epoch": 1}]
    assert [k["task_id"] for k in cmp["only_b"]] == ["only-b", "void-a"]
    assert "rubric" in r.stdout and "overall" in r.stdout and "not paired" in r.stderr


def test_compare_across_campaigns_pairs_the_same_agent(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    for i, (off, on) in enumerate([(0.2, 0.5), (0.4, 0.4), (0.6, 0.3)], start=1):
        st.save_run(record("m", f"t{i}", off, campaign="off"), [])
        st.save_run(record("m", f"t{i}", on, campaign="search"), [])
    st.close()
    r = assay("compare", "m", "m", "--campaign", "off", "--against-campaign", "search", "--json", "c.json",
              cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cmp = json.loads((tmp_path / "c.json").read_text())
    # diffs 0.3, 0.0, -0.3: mean 0; ties 1
    assert cmp["overall"]["n"] == 3 and cmp["overall"]["diff"] == pytest.approx(0.0, abs=1e-12)
    assert (cmp["overall"]["wins"], cmp["overall"]["losses"], cmp["overall"]["ties"]) == (1, 1, 1)
    assert cmp["against_campaign"] == "search" and cmp["only_a"] == [] and cmp["only_b"] == []
    # Two campaigns and no --campaign: which one is ambiguous.
    r = assay("compare", "m", "m", cwd=tmp_path)
    assert r.returncode == 2 and "--campaign" in r.stderr and "Traceback" not in r.stderr


def test_compare_refuses_unknown_agents_campaigns_and_stores(store_dir: Path, tmp_path: Path) -> None:
    r = assay("compare", "A", "nobody", cwd=store_dir)
    assert r.returncode == 2 and "'nobody' has no runs" in r.stderr and "A, B" in r.stderr
    r = assay("compare", "A", "B", "--against-campaign", "nope", cwd=store_dir)
    assert r.returncode == 2 and "--against-campaign" in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = assay("compare", "A", "B", cwd=empty)
    assert r.returncode == 2 and "no store here" in r.stderr and "Traceback" not in r.stderr


def test_paired_permutation_p_exact_and_sampled() -> None:
    assert metrics.paired_permutation_p([1.0, 2.0, 3.0]) == pytest.approx(2 / 8)  # only all-equal signs
    assert metrics.paired_permutation_p([0.0, 0.0]) == 1.0
    many = [0.5] * 25  # 25 pairs: sampled, (hits + 1) / (100000 + 1), hits ~ 2 * 100000 / 2**25
    p = metrics.paired_permutation_p(many)
    assert p == metrics.paired_permutation_p(many)  # seeded
    assert 1 / 100_001 <= p < 1e-3
    with pytest.raises(ValueError):
        metrics.paired_permutation_p([])


@pytest.mark.parametrize("shape", ["uniform", "lattice", "skewed"])
def test_paired_permutation_p_expansion_matches_sampled_signs(shape: str) -> None:
    """From `PERMUTATION_NORMAL_FROM` pairs the expansion stands in for the draws: it equals
    the share of 30,000 sampled sign assignments as far out (drawn here in the test) to
    within their Monte Carlo error, at and away from 0."""
    import numpy as np

    rng = np.random.default_rng(1)
    n = metrics.PERMUTATION_NORMAL_FROM
    base = {"uniform": rng.uniform(-1, 1, n), "lattice": rng.integers(-2, 3, n) / 2.0,
            "skewed": rng.exponential(1.0, n) - 1.0}[shape]
    for shift in (0.0, 0.015):
        d = base - base.mean() + shift
        p = metrics.paired_permutation_p(d)
        obs = abs(d.mean())
        hits = 0
        for _ in range(3):
            signs = rng.choice(np.array([-1.0, 1.0]), size=(10_000, n))
            hits += int(np.count_nonzero(np.abs((signs * d).mean(axis=1)) >= obs - 1e-12))
        sampled = hits / 30_000
        assert p == pytest.approx(sampled, abs=max(0.008, 4 * (sampled * (1 - sampled) / 30_000) ** 0.5)), shift
