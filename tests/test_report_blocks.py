"""Golden numbers of the report's per-kind reliability and cost additions on a synthetic store
built here: value earned vs available per currency, pass@k / pass^k curves over epochs, tokens
and cost per task, score per 1k tokens and per dollar, the per-run cost distribution, scenario
families with their spread, and `--shared-tasks` over agents that finished different tasks."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest

from assay import metrics
from assay.record import Grade, RubricGrade, RunKey, RunRecord, ScenarioGrade, UsageCost
from assay.report.build import build_report
from assay.store import Store
from tests.helpers import assay


def run(agent: str, task: str, score: float, *, epoch: int = 1, passed: bool | None = None, cost: float | None = 0.0,
        tokens: int = 1000, value: tuple[float, str] | None = None, void: bool = False, na: int = 0,
        scenario: tuple[float, float] | None = None) -> RunRecord:
    grade = Grade(rubric=RubricGrade(expert_score=score, na=na))
    kinds = ["rubric"]
    if scenario is not None:  # (uplift_adj, contact_cost)
        u, c = scenario
        kinds, score = ["scenario"], u - c
        grade = Grade(scenario=ScenarioGrade(kpi=0, kpi_baseline=0, kpi_reference=1, uplift=u, uplift_adj=u,
                                             contact_cost=c, score=score, net=score))
    return RunRecord(run_id=uuid.uuid4().hex, key=RunKey(campaign="c", task_id=task, task_hash="h-" + task, agent=agent,
                                                         level=None, epoch=epoch, options_hash="o"),
                     kinds=kinds, harness_version="t", status="void" if void else "done",
                     end_reason="api_error" if void else "finished", score=None if void else score,
                     passed=None if void else (score >= 0.7 if passed is None else passed), grade=grade,
                     usage=UsageCost(input_tokens=tokens, cost_usd=cost),
                     value=None if value is None else {"amount": value[0], "currency": value[1]})


def synthetic() -> list[RunRecord]:
    runs = [run("a", "r1", s, epoch=e, cost=c, value=(100, "USD"), na=1)
            for e, (s, c) in enumerate([(0.8, 0.01), (0.5, 0.02), (0.9, 0.03)], start=1)]
    runs += [run("a", "r2", 0.0, epoch=e, cost=0.04, value=(50, "EUR")) for e in (1, 2, 3)]  # a score of exactly 0
    runs.append(run("a", "r3", 0.0, cost=0.05, void=True))  # paid for, never scored
    runs.append(run("b", "r1", 0.9, cost=0.0, value=(100, "USD")))  # b finished r1 only, for free
    runs += [run("a", "fam/v1", 0, scenario=(0.9, 0.1), cost=None),     # S 0.8
             run("a", "fam/v2", 0, scenario=(-3.0, 0.0), cost=None),    # floored: -1.0
             run("a", "other/x", 0, scenario=(0.5, 0.0), cost=None)]    # 0.5
    return runs


def test_rubric_block_value_curves_and_cost_golden() -> None:
    rep = build_report("c", synthetic())
    a = next(x for x in rep["agents"] if x["agent"] == "a")["rubric"]
    assert a["expert_score"] == pytest.approx(2.2 / 6) and a["na"] == 3 and a["tasks"] == ["r1", "r2"]
    # r1 passed 2 of 3 epochs: 2/3 of its 100 USD earned; r2 never passed: 0 of its 50 EUR.
    assert a["value"] == {"EUR": {"earned": 0.0, "available": 50.0},
                          "USD": {"earned": pytest.approx(200 / 3), "available": 100.0}}
    # pass@k over epochs, mean over tasks: r1 (n=3, c=2) and r2 (n=3, c=0).
    assert a["pass_at_k"] == pytest.approx({"1": 1 / 3, "2": 0.5, "3": 0.5})
    assert a["pass_hat_k"] == pytest.approx({"1": 1 / 3, "2": 1 / 6, "3": 0.0})
    # Seven runs of 1,000 tokens (the void one too) over the two tasks the block covers.
    assert a["tokens"] == 7000 and a["tokens_per_task"] == 3500
    assert a["cost_usd"] == pytest.approx(0.23) and a["cost_per_task"] == pytest.approx(0.115)
    assert a["score_per_1k_tokens"] == pytest.approx((2.2 / 6) / 3.5)
    assert a["score_per_usd"] == pytest.approx((2.2 / 6) / 0.115)
    assert a["cost_distribution"] == pytest.approx({"min": 0.01, "median": 0.04, "p90": 0.044, "max": 0.05,
                                                    "runs": 7, "unknown": 0})
    b = next(x for x in rep["agents"] if x["agent"] == "b")["rubric"]
    assert b["score_per_usd"] is None and b["cost_usd"] == 0.0  # nothing spent: no score per dollar
    assert b["pass_at_k"] == {"1": 1.0} and b["value"]["USD"] == {"earned": 100.0, "available": 100.0}


def test_scenario_families_spread_and_unknown_cost() -> None:
    s = next(x for x in build_report("c", synthetic())["agents"] if x["agent"] == "a")["scenario"]
    fam = s["families"]["fam"]
    assert fam["variants"] == pytest.approx({"fam/v1": 0.8, "fam/v2": -1.0})
    assert fam["mean_s"] == pytest.approx(-0.1) and fam["spread"] == pytest.approx(1.8) and fam["runs"] == 2
    assert s["families"]["other"]["spread"] == 0.0
    # A price is unknown: no cost, no score per dollar, no distribution; tokens still count.
    assert s["cost_usd"] is None and s["score_per_usd"] is None and s["cost_distribution"] is None
    assert s["tokens_per_task"] == 1000


def test_task_sets_are_flagged_and_shared_tasks_restricts_every_block() -> None:
    rep = build_report("c", synthetic())
    ts = rep["task_sets"]["rubric"]
    assert ts["shared"] == ["r1"] and ts["differ"] and ts["missing"] == {"b": ["r2"]}
    assert ts["agents"] == {"a": 2, "b": 1}
    assert any(w.startswith("rubric: agents finished different task sets") for w in rep["warnings"])
    shared = build_report("c", synthetic(), shared_tasks=True)
    a = next(x for x in shared["agents"] if x["agent"] == "a")["rubric"]
    assert a["tasks"] == ["r1"] and a["expert_score"] == pytest.approx(2.2 / 3)
    assert {r["task_id"] for r in shared["runs"] if r["agent"] == "a" and "rubric" in r["kinds"]} == {"r1"}
    # Only agent a ran scenarios: its scenario tasks are all shared, the block is unchanged.
    assert next(x for x in shared["agents"] if x["agent"] == "a")["scenario"]["tasks"] == ["fam/v1", "fam/v2",
                                                                                           "other/x"]


def test_pass_k_curves_match_the_exact_estimators_and_are_linear() -> None:
    for n in range(1, 13):
        for c in range(n + 1):
            at, hat = metrics.pass_at_k_curve(n, c), metrics.pass_hat_k_curve(n, c)
            assert len(at) == n and len(hat) == n
            for k in range(1, n + 1):
                assert math.isclose(at[k - 1], metrics.pass_at_k(n, c, k), abs_tol=1e-12)
                assert math.isclose(hat[k - 1], metrics.pass_hat_k(n, c, k), abs_tol=1e-12)
    with pytest.raises(ValueError):
        metrics.pass_at_k_curve(3, 4)
    # 200,000 epochs: one multiplication per k (binomials per k would take minutes; the time is
    # bench/bench_timings.py's `pass_at_k_curve`).
    curve = metrics.pass_at_k_curve(200_000, 150_000)
    assert curve[0] == pytest.approx(0.75) and curve[-1] == 1.0


def test_terminal_prints_every_kind_block_and_shared_tasks(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    for r in synthetic():
        st.save_run(r, [])
    st.close()
    res = assay("report", "--json", "r.json", cwd=tmp_path, env={"COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    assert "rubric · ranked by expert_score" in res.stdout and "different task sets" in res.stdout
    assert "USD 67 of 100" in res.stdout and "EUR 0 of 50" in res.stdout
    assert "scenario families" in res.stdout and "1.800" in res.stdout
    assert "warning: campaign c: rubric: agents finished different task sets" in res.stderr
    res = assay("report", "--shared-tasks", "--json", "s.json", cwd=tmp_path, env={"COLUMNS": "400"})
    assert res.returncode == 0, res.stderr
    assert "the 1 tasks every agent finished" in res.stdout
    rep = json.loads((tmp_path / "s.json").read_text())
    assert rep["shared_tasks"] is True
    assert [x["rubric"]["tasks"] for x in rep["agents"]] == [["r1"], ["r1"]]


def test_markdown_carries_value_curves_cost_and_families(tmp_path: Path) -> None:
    from assay.report.export import write_markdown

    write_markdown(build_report("c", synthetic()), tmp_path / "r.md")
    md = (tmp_path / "r.md").read_text()
    rubric = md.split("\n## rubric")[1].split("\n## scenario")[0]
    assert "| a | USD | 66.67 | 100 |" in rubric and "| a | EUR | 0 | 50 |" in rubric
    assert "0.3333 (k=3: 0.5)" in rubric and "0.01 / 0.04 / 0.044 / 0.05" in rubric
    assert "| a | fam | -0.1 | 2 | 1.8 |" in md.split("\n## scenario")[1]


def test_report_json_never_holds_infinity_it_names_the_field_instead(tmp_path: Path) -> None:
    """Values past what validation takes (stored before it bounded them) sum to infinity: the
    report JSON is refused naming the field, and no file (nor its temporary) is left."""
    from assay.errors import InputError
    from assay.report.export import write_json

    runs = [run("a", f"t{i}", 0.9, value=(1.7e308, "USD")) for i in (1, 2)]
    out = tmp_path / "r.json"
    with pytest.raises(InputError) as e:
        write_json(build_report("c", runs), out)
    assert e.value.file == str(out) and e.value.field is not None and "USD" in e.value.field
    assert "not a finite number" in e.value.reason
    assert list(tmp_path.iterdir()) == []
    write_json(build_report("c", synthetic()), out)  # finite numbers: written, strict JSON
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the report JSON"))


def test_bootstrap_of_many_scores_on_few_levels_draws_counts_and_agrees() -> None:
    import numpy as np

    rng = np.random.default_rng(3)
    vals = list(rng.integers(0, 11, size=60_000) / 10)  # 60,000 scores on 11 levels
    lo, hi = metrics.bootstrap_ci(vals, resamples=2000)  # 11 counts per resample (bench/bench_timings.py)
    m, se = float(np.mean(vals)), float(np.std(vals) / math.sqrt(len(vals)))
    # The percentile interval of the mean: within a few percent of mean +- 1.96 standard errors.
    assert lo == pytest.approx(m - 1.96 * se, abs=0.15 * se) and hi == pytest.approx(m + 1.96 * se, abs=0.15 * se)
    assert metrics.bootstrap_ci(vals, resamples=2000) == (lo, hi)  # deterministic for the seed


def test_html_draws_scenario_levels_per_agent() -> None:
    from assay.report.html import render_html
    from tests.test_report_compare import record

    runs = [record(agent, "case/base", 0, level=lv, scenario=(u, 0.1))
            for agent, shift in (("m", 0.0), ("n", 0.2)) for lv, u in (("L0", 0.9), ("L1", 0.6), ("L3", -2.0 + shift))]
    html = render_html(build_report("c", runs))
    svg = html.split('<svg class="plot levels"')[1].split("</svg>")[0]
    assert svg.count('class="curve level"') == 2 and svg.count("<circle") == 6
    assert ">L0<" in svg and ">L3<" in svg and "m L3: -1.1" in svg  # S floored at -1, less its contact cost
