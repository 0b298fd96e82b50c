"""`assay report` over a store built here: one report per campaign, the --agent and --kind
filters, the Markdown export, each kind's block naming its tasks, ids whole in a pipe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.store import Store
from tests.helpers import assay
from tests.test_report_compare import record


@pytest.fixture
def two_campaigns(tmp_path: Path) -> Path:
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    long_id = "npt-attribution-of-a-very-long-task-identifier-that-must-stay-whole"
    for agent, s in (("alpha", 0.8), ("beta", 0.0), ("gamma", -0.0)):
        st.save_run(record(agent, long_id, s, campaign="one"), [])
    st.save_run(record("alpha", "s1", 0, campaign="one", scenario=(0.5, 0.1)), [])
    st.save_run(record("beta", "x9", 0.3, campaign="two"), [])
    st.close()
    return tmp_path


def test_one_report_per_campaign_never_added_together(two_campaigns: Path) -> None:
    r = assay("report", cwd=two_campaigns)
    assert r.returncode == 0, r.stderr
    assert "campaign one" in r.stdout and "campaign two" in r.stdout
    # A file holds one campaign: exporting without naming it is refused, nothing written.
    r = assay("report", "--json", "r.json", cwd=two_campaigns)
    assert r.returncode == 2 and "--campaign" in r.stderr and not (two_campaigns / "r.json").exists()


def test_kind_blocks_list_their_tasks_and_filters_apply(two_campaigns: Path) -> None:
    r = assay("report", "--campaign", "one", "--json", "r.json", cwd=two_campaigns)
    assert r.returncode == 0, r.stderr
    rep = json.loads((two_campaigns / "r.json").read_text())
    alpha = next(a for a in rep["agents"] if a["agent"] == "alpha")
    assert alpha["rubric"]["tasks"] == ["npt-attribution-of-a-very-long-task-identifier-that-must-stay-whole"]
    assert alpha["scenario"]["tasks"] == ["s1"] and alpha["mean_score"] is None  # two kinds: no mixed headline
    assert alpha["end_reasons"] == {"finished": 2}
    r = assay("report", "--campaign", "one", "--agent", "beta", "--kind", "rubric", "--json", "b.json",
              cwd=two_campaigns)
    assert r.returncode == 0, r.stderr
    rep = json.loads((two_campaigns / "b.json").read_text())
    assert {x["agent"] for x in rep["runs"]} == {"beta"} and [a["agent"] for a in rep["agents"]] == ["beta"]
    r = assay("report", "--campaign", "one", "--kind", "scenario", "--json", "s.json", cwd=two_campaigns)
    rep = json.loads((two_campaigns / "s.json").read_text())
    assert [x["task_id"] for x in rep["runs"]] == ["s1"]
    r = assay("report", "--campaign", "one", "--kind", "essay", cwd=two_campaigns)
    assert r.returncode == 2 and "--kind" in r.stderr


def test_markdown_export_and_whole_ids_in_a_pipe(two_campaigns: Path) -> None:
    long_id = "npt-attribution-of-a-very-long-task-identifier-that-must-stay-whole"
    r = assay("report", "--campaign", "one", "--runs", "--md", "r.md", cwd=two_campaigns, env={"COLUMNS": ""})
    assert r.returncode == 0, r.stderr
    assert long_id in r.stdout and "…" not in r.stdout  # stdout is a pipe here: nothing is cut
    md = (two_campaigns / "r.md").read_text()
    assert md.startswith("# assay report · campaign one")
    assert "## rubric" in md and "## scenario" in md and "## runs" in md
    rubric = md.split("## rubric")[1].split("##")[0]
    # Ranked by the block's own score: 0.8 first, and 0.0 is a score, not a missing one.
    rows = [ln for ln in rubric.splitlines() if ln.startswith("| ") and not ln.startswith("| agent")]
    assert [row.split("|")[1].strip() for row in rows][0] == "alpha"
    assert len(rows) == 3
    assert long_id in md


def test_show_explains_a_scenario_score_and_never_reads_text_as_markup(tmp_path: Path) -> None:
    from assay.record import event_from_wire

    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    rec = record("alpha", "s1", 0, scenario=(0.5, 0.1))
    tricky = "[/INST] [bold]not bold[/bold] [exit code 0] done"
    events = [event_from_wire(seq=0, t=0.0, kind="assistant", data={"content": tricky}),
              event_from_wire(seq=1, t=0.1, kind="tool_result", data={"id": "c1", "name": "run_command",
                                                                       "output": "[exit code 0]\nok"})]
    st.save_run(rec, events)
    st.close()
    r = assay("show", rec.run_id, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert tricky in r.stdout  # shown as written: no markup read, no bracket dropped
    assert r.stdout.count("[exit code 0]") == 2  # the tool result's prefix too
    assert "scenario grade" in r.stdout and "KPI 0 (baseline 0, reference 1)" in r.stdout
    assert "S 0.4" in r.stdout and "solved False" in r.stdout


def test_csv_rows_carry_the_task_and_run_details(two_campaigns: Path) -> None:
    import csv

    r = assay("report", "--campaign", "one", "--csv", "r.csv", cwd=two_campaigns)
    assert r.returncode == 0, r.stderr
    with open(two_campaigns / "r.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    assert {"task_title", "domain", "language", "model", "turns", "duration_s", "cost_usd", "input_tokens"} <= set(rows[0])
    assert {row["agent"] for row in rows} == {"alpha", "beta", "gamma"}


def test_scenario_block_per_level_with_drops_and_runs_below_doing_nothing(tmp_path: Path) -> None:
    from assay.report.build import build_report

    runs = [record("m", "case/base", 0, level="L0", scenario=(0.9, 0.1)),   # S 0.8
            record("m", "case/base", 0, level="L1", scenario=(0.6, 0.1)),   # S 0.5
            record("m", "case/base", 0, level="L3", scenario=(-2.0, 0.2))]  # S max(-2, -1) - 0.2 = -1.2
    block = build_report("c", runs)["agents"][0]["scenario"]
    assert block["levels"]["L0"]["mean_s"] == pytest.approx(0.8) and block["levels"]["L3"]["runs"] == 1
    assert block["drop_L0_L1"] == pytest.approx(0.3) and block["drop_L1_L3"] == pytest.approx(1.7)
    assert block["below_no_op"] == pytest.approx(1 / 3)


def test_a_campaign_mixing_task_contents_or_harness_versions_is_warned_about(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    a = record("m", "t1", 0.5)
    b = record("m", "t1", 0.7, epoch=2).model_copy(deep=True)
    b.key.task_hash = "h-t1-edited"
    b.harness_version = "older"
    st.save_run(a, [])
    st.save_run(b, [])
    st.close()
    r = assay("report", "--json", "r.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    warnings = json.loads((tmp_path / "r.json").read_text())["warnings"]
    assert any("task t1 was run under 2 different contents" in w for w in warnings)
    assert any("2 harness versions" in w for w in warnings)
    assert "warning: campaign default: task t1" in r.stderr


def test_dry_run_calls_no_model_and_estimates_what_is_left(tmp_path: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.helpers import REPO, model_alias
    from tests.shipped_schemas import schema_errors

    suite = REPO / "suites" / "starter" / "rubric"
    with FakeOpenAIServer() as srv:
        model_alias(tmp_path, "m", "openai", srv.url, model="agent-model")
        r = assay("run", str(suite), "--agent", "m", "--agent", "reference", "--dry-run", "--json", "dry.json",
                  cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert srv.requests == []  # no model was called
    assert not (tmp_path / ".assay").exists()  # and nothing was written
    plan = json.loads((tmp_path / "dry.json").read_text())
    assert schema_errors(plan) == []
    rows = {a["agent"]: a for a in plan["agents"]}
    assert rows["m"]["to_do"] == 10 and rows["m"]["done"] == 0
    assert rows["m"]["input_tokens"] > 0 and rows["m"]["cost_usd"] > 0
    assert any("prompt" in b for b in rows["m"]["basis"])
    assert rows["reference"]["cost_usd"] == 0 and "no model calls" in rows["reference"]["basis"][0]
    # After the reference ran, its runs are done and nothing is left to estimate for it.
    r = assay("run", str(suite), "--agent", "reference", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = assay("run", str(suite), "--agent", "reference", "--dry-run", "--json", "dry2.json", cwd=tmp_path)
    (row,) = json.loads((tmp_path / "dry2.json").read_text())["agents"]
    assert (row["to_do"], row["done"]) == (0, 10)
