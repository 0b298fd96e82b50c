"""`assay import omb` and `assay import darebench`: published upstream results as runs of their
own campaign (scores by assay's formulas, usage and cost, void where upstream failed), covered by
`assay report` and `assay compare`; re-importing adds nothing; bad files are refused, nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from assay.interop.runs import store_imported
from assay.interop.upstream import convert_darebench
from assay.store import Store
from tests.helpers import REPO, assay, run_docs_bash

OMB = REPO / "tests" / "fixtures" / "omb"


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO / "src")}


def omb_results(tmp_path: Path) -> Path:
    """case_a.json as `omb eval` writes it back: three responses, one judge (one verdict NA)."""
    folder = tmp_path / "omb"
    folder.mkdir()
    shutil.copy(OMB / "economic_value.md", folder / "economic_value.md")
    data = json.loads((OMB / "law" / "case_a.json").read_text())
    data["model_response"] = {
        "model_response_1": {"model_name": "model-a", "response_text": "Check the lease; withhold rent."},
        "model_response_2": {"model_name": "model-b", "response_text": "A full answer."},
        "model_response_3": {"model_name": "model-a", "response_text": "No idea."},
    }
    scores = {1: (10, 0, 6, "NA", -5), 2: (10, 8, 6, 3, 0), 3: (0, 0, 0, 0, 0)}
    data["rubric_auto_score"] = {"example/judge": {f"rubric_{n}_response_{i}_auto_score": v
                                                   for i, vals in scores.items() for n, v in enumerate(vals, 1)}}
    path = folder / "case_a.json"
    path.write_text(json.dumps(data, ensure_ascii=False))
    return path


def dare_results(folder: Path, model: str, scores: tuple[float, float]) -> Path:
    data: dict[str, Any] = {
        "model": model, "executor": "openclaw", "benchmark_version": "abc123", "run_id": "r1", "timestamp": 0,
        "suite": "all", "runs_per_task": 2,
        "tasks": [
            {"task_id": "task_finqa_00", "status": "success", "timed_out": False, "execution_time": 12.0,
             "usage": {"input_tokens": 1000, "output_tokens": 200, "cache_read_tokens": 0, "cache_write_tokens": 0,
                       "total_tokens": 1200, "cost_usd": 0.01, "request_count": 4},
             "grading": {"runs": [{"task_id": "task_finqa_00", "score": s, "max_score": 1.0, "grading_type": "hybrid",
                                   "breakdown": {"answer_written": 1.0}, "notes": "ok"} for s in scores],
                         "mean": sum(scores) / 2}},
            {"task_id": "task_logiqa_00", "status": "timeout", "timed_out": True,
             "usage": {"input_tokens": 10, "output_tokens": 2},
             "grading": {"runs": [{"task_id": "task_logiqa_00", "score": 1.0, "max_score": 2.0,
                                   "grading_type": "automated", "breakdown": {"correct": 0.5}}]}},
            {"task_id": "task_advancedif_00", "status": "error", "usage": {}, "grading": {"runs": []}},
        ],
    }
    path = folder / f"r1_{model.replace('/', '_')}.json"
    path.write_text(json.dumps(data))
    return path


def test_omb_results_become_runs_scored_by_assays_formula(tmp_path: Path) -> None:
    path = omb_results(tmp_path)
    r = assay("import", "omb", str(path), cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    assert "3 run(s) stored in campaign 'omb'" in r.stdout
    again = assay("import", "omb", str(path), cwd=tmp_path, env=_env())
    assert "0 run(s) stored" in again.stdout and "3 already there" in again.stdout
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    runs = {(x.key.agent, x.key.epoch): x for x in st.runs("omb")}
    st.close()
    a1, b1, a2 = runs[("omb:model-a", 1)], runs[("omb:model-b", 1)], runs[("omb:model-a", 2)]
    assert a1.score == pytest.approx(11 / 27) and a1.passed is False
    assert b1.score == 1.0 and b1.passed is True and a2.score == 0.0
    assert a1.grade.rubric is not None and a1.grade.rubric.na == 1
    assert a1.key.task_id == "9001" and a1.value == {"amount": 1250.0, "currency": "USD"}
    assert a1.final_message == "Check the lease; withhold rent."
    r = assay("report", "--campaign", "omb", "--json", "rep.json", cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    agents = {a["agent"]: a for a in json.loads((tmp_path / "rep.json").read_text())["agents"]}
    assert agents["omb:model-b"]["economic_value"] == {"USD": 1250.0}
    r = assay("compare", "omb:model-a", "omb:model-b", "--campaign", "omb", "--json", "cmp.json", cwd=tmp_path,
              env=_env())
    assert r.returncode == 0, r.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert cmp["overall"]["n"] == 1 and cmp["overall"]["diff"] == pytest.approx(1 - 11 / 27)


def test_darebench_results_become_runs_with_usage_cost_and_void(tmp_path: Path) -> None:
    a = dare_results(tmp_path, "openai/gpt-4o", (0.8, 0.5))
    b = dare_results(tmp_path, "openai/gpt-4o-mini", (0.9, 0.9))
    r = assay("import", "darebench", str(a), str(b), cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    assert "8 run(s) stored in campaign 'darebench' (2 void)" in r.stdout
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    runs = {(x.key.agent, x.key.task_id, x.key.epoch): x for x in st.runs("darebench")}
    st.close()
    first = runs[("darebench:openai/gpt-4o", "task_finqa_00", 1)]
    assert (first.score, first.passed, first.kinds) == (0.8, True, ["contract"])
    assert first.usage.input_tokens == 500 and first.usage.cost_usd == pytest.approx((500 * 2.5 + 100 * 10.0) / 1e6)
    assert first.grade.contract is not None and first.grade.contract.checks == {"answer_written": 1.0}
    timeout = runs[("darebench:openai/gpt-4o", "task_logiqa_00", 1)]
    assert timeout.end_reason == "max_time" and timeout.score == 0.5 and timeout.passed is False
    void = runs[("darebench:openai/gpt-4o", "task_advancedif_00", 1)]
    assert void.status == "void" and void.score is None and "error" in (void.void_reason or "")
    r = assay("compare", "darebench:openai/gpt-4o", "darebench:openai/gpt-4o-mini", "--campaign", "darebench",
              "--json", "cmp.json", cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert cmp["overall"]["n"] == 3 and cmp["overall"]["wins"] == 2


def test_bad_upstream_files_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    good = dare_results(tmp_path, "openai/gpt-4o", (1.0, 1.0))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    r = assay("import", "darebench", str(good), str(broken), cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "broken.json" in r.stderr and "Traceback" not in r.stderr
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"model": "m", "tasks": [{"status": "success"}]}))
    r = assay("import", "darebench", str(wrong), cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "wrong.json" in r.stderr and "task_id" in r.stderr
    ungraded = tmp_path / "ungraded.json"
    shutil.copy(OMB / "economics_and_finance" / "cn_valuation.json", ungraded)
    r = assay("import", "omb", str(ungraded), cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "ungraded.json" in r.stderr and "no graded response" in r.stderr
    many = json.loads(good.read_text())  # a count past `runs.MAX_COUNT`, the bound every importer shares
    many["tasks"][1]["usage"]["output_tokens"] = 10**30
    (tmp_path / "many.json").write_text(json.dumps(many))
    r = assay("import", "darebench", str(tmp_path / "many.json"), cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "many.json" in r.stderr and "output_tokens" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / ".assay").exists()


def test_docs_example_runs(tmp_path: Path) -> None:
    """docs/interop-upstream.md: its bash block, run as is from a folder holding the docs."""
    text = (REPO / "docs" / "interop-upstream.md").read_text()
    shell = text.split("```bash\n", 1)[1].split("```", 1)[0]
    (tmp_path / "docs").symlink_to(REPO / "docs")
    r = run_docs_bash(tmp_path, shell)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "8 already there" in r.stdout and "omb:model-b" in r.stdout


def test_a_finished_run_replaces_a_void_one_of_the_same_key(tmp_path: Path) -> None:
    """A later results file where the failed task finished: its run is the key's next attempt."""
    first = dare_results(tmp_path, "openai/gpt-4o", (1.0, 1.0))
    data = json.loads(first.read_text())
    data["tasks"][2] = {**data["tasks"][0], "task_id": "task_advancedif_00"}
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(data))
    st = Store(f"sqlite:///{tmp_path / 'assay.db'}")
    try:
        assert store_imported(convert_darebench([first], "d"), st, "d", [first]).void == 1
        again = store_imported(convert_darebench([fixed], "d"), st, "d", [fixed])
        assert (again.added, again.already, again.void) == (2, 3, 0)  # the two epochs of the fixed task
        runs = [r for r in st.runs("d") if r.key.task_id == "task_advancedif_00"]
        assert [(r.status, r.attempt) for r in sorted(runs, key=lambda r: r.key.epoch)] == [("done", 2), ("done", 1)]
        assert store_imported(convert_darebench([fixed], "d"), st, "d", [fixed]).added == 0
    finally:
        st.close()


def test_omb_several_judges_vote_fail_closed_on_ties(tmp_path: Path) -> None:
    """Three judges (a repeated one named `<model>::run_<k>`, as `omb eval --repeat-judge` writes):
    each votes per item, the majority decides, a tie gives no credit and waives no penalty, an item
    no judge answered is NA; the panel is its own run key beside the single judge's."""
    single = omb_results(tmp_path)
    data = json.loads(single.read_text())
    panel = {"judge-x::run_1": (10, 0, 6, "NA", -5), "judge-x::run_2": (0, 8, 0, "NA", 0),
             "judge-y": (10, "NA", 0, None, None)}
    data["model_response"] = {"model_response_1": data["model_response"]["model_response_1"]}
    data["rubric_auto_score"] = {j: {f"rubric_{n}_response_1_auto_score": v for n, v in enumerate(vals, 1)
                                     if v is not None} for j, vals in panel.items()}
    multi = single.with_name("case_a_panel.json")
    multi.write_text(json.dumps(data, ensure_ascii=False))
    r = assay("import", "omb", str(single), cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    r = assay("import", "omb", str(multi), cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    assert "1 run(s) stored" in r.stdout and "0 already there" in r.stdout
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    runs = [x for x in st.runs("omb") if x.key.agent == "omb:model-a" and x.options.get("judges")]
    st.close()
    (run,) = runs
    rubric = run.grade.rubric
    assert rubric is not None and rubric.judge_info is not None
    items = {it.id: it for it in rubric.items}
    assert items["1"].hit is True                      # 2 met / 1 not met
    assert items["2"].hit is False                     # 1 / 1 (judge-y NA): a tied positive item is not met
    assert items["3"].hit is False                     # 1 / 2
    assert items["4"].na is True and items["4"].hit is None  # nobody answered
    assert items["5"].hit is True                      # 1 / 1 (judge-y silent): a tied negative item is met
    assert run.score == pytest.approx((10 - 5) / 27)
    info = rubric.judge_info
    assert sorted(info.judges) == sorted(panel) and info.votes == 3 and info.na == 1 and info.answered == 4
    assert info.item_votes["1"] == [2, 1] and info.item_votes["4"] == [0, 0]
    assert info.agreement == 0.0  # no answered item had every voter agree
    assert run.options["judges"] == sorted(panel)
