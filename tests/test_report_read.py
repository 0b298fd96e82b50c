"""The report the store computes from its current runs (`stored_report`: SQL over
`current_runs`) equals the report of the same runs' whole validated `RunRecord`s
(`build_report` over `Store.runs`, saved afresh), on a varied store: rubric runs (judge info,
NA and labelled items, tags, an audit removal, values), contract runs (predicates, both
modalities), scenario runs (levels, families, a floored S), void runs replaced by a re-run
attempt, several agents, epochs and campaigns, human runs, records of an older version (their
current rows rebuilt from them) and a record SQLite's JSON functions cannot parse (a NaN); on
SQLite and PostgreSQL, before and after the migrations that made the current runs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from assay.record import (
    Audit,
    AuditFlag,
    ContractGrade,
    Grade,
    ItemGrade,
    JudgeInfo,
    PredicateGrade,
    RubricGrade,
    RunKey,
    RunRecord,
    ScenarioGrade,
    UsageCost,
)
from assay.report.build import build_report, stored_report
from assay.store import Store
from assay.store.current import rebuild_current
from tests.helpers import assay


def _rec(campaign: str, agent: str, task: str, kind: str, score: float, *, epoch: int = 1, attempt: int = 1,
         void: bool = False, level: str | None = None, modality: str = "text", cost: float | None = 0.01,
         judged: bool = False, removed: bool = False, nan: bool = False, task_hash: str | None = None,
         options_hash: str = "o") -> RunRecord:
    if kind == "rubric":
        items = [ItemGrade(id="i1", weight=2.0, tag="FI", hit=score > 0.5, reason="r"),
                 ItemGrade(id="i2", weight=1.0, tag="AR", na=True), ItemGrade(id="c1", weight=1.0, check=True, hit=True)]
        grade = Grade(rubric=RubricGrade(
            expert_score=score, na=1, items=items, tags={"FI": score, "AR": None, "custom": 0.25},
            scoring="clipped", judge_info=JudgeInfo(agreed=1, answered=2, na=1, votes=3, judges=["j1", "j2"],
                                                    mode="per_item") if judged else None))
    elif kind == "contract":
        grade = Grade(contract=ContractGrade(sat=score > 0.5, predicates=[
            PredicateGrade(path="out.csv", ok=score > 0.5, required=True),
            PredicateGrade(path="extra.txt", ok=True, required=False)]))
    else:
        grade = Grade(scenario=ScenarioGrade(kpi=score, kpi_baseline=0.0, kpi_reference=1.0, uplift=score,
                                             uplift_adj=score, contact_cost=0.1, score=score - 0.1,
                                             solved=score > 0.8, router_fallback_count=1 if score < 0 else 0))
    if removed:
        grade.audit = Audit(flags=[AuditFlag(rule="copy", reason="copied", removed=True)], removed=1,
                            pre_audit_score=score, audited=True)
    final = float("nan") if nan else score
    return RunRecord(
        run_id=uuid.uuid4().hex,
        key=RunKey(campaign=campaign, task_id=task, task_hash=task_hash or "h-" + task, agent=agent, level=level,
                   epoch=epoch, options_hash=options_hash),
        attempt=attempt, kinds=[kind], harness_version="t", status="void" if void else "done",
        end_reason="api_error" if void else "finished", void_reason="provider down" if void else None,
        score=None if void else (0.0 if removed else final), passed=None if void else score >= 0.7,
        grade=grade, usage=UsageCost(input_tokens=100 + epoch, output_tokens=7, cost_usd=cost),
        judge_usage=UsageCost(input_tokens=5, cost_usd=0.001), final_message="[/INST] text " * 20,
        value={"amount": 10.0, "currency": "USD" if epoch % 2 else "EUR"} if kind == "rubric" else None,
        task_meta={"title": task, "domain": "d1" if "1" in task else "d2", "language": "en", "modality": modality,
                   "execution": "single-step"},
        options={"search": "local"} if agent == "m2" and kind == "rubric" else {}, turns=3, duration_s=1.5)


def varied(campaign: str) -> list[RunRecord]:
    runs: list[RunRecord] = []
    for agent in ("m1", "m2", "human:alice"):
        for e in (1, 2, 3):
            runs.append(_rec(campaign, agent, "r1", "rubric", 0.2 * e + (0.1 if agent == "m2" else 0), epoch=e,
                             judged=agent != "human:alice"))
            runs.append(_rec(campaign, agent, "r2", "rubric", 0.0, epoch=e, removed=e == 2, cost=None if e == 3 else 0.0))
        runs.append(_rec(campaign, agent, "c1", "contract", 0.9, modality="text"))
        runs.append(_rec(campaign, agent, "c2", "contract", 0.4, modality="multimodal"))
        for lv, s in (("L0", 0.9), ("L1", -2.5), ("L3", 0.3)):
            runs.append(_rec(campaign, agent, "fam/v1", "scenario", s, level=lv))
            runs.append(_rec(campaign, agent, "fam/v2", "scenario", s / 2, level=lv))
    runs.append(_rec(campaign, "m1", "r3", "rubric", 0.0, void=True))  # void, never re-run
    runs.append(_rec(campaign, "m2", "r3", "rubric", 0.0, void=True))  # void, then re-run as attempt 2
    runs.append(_rec(campaign, "m2", "r3", "rubric", 0.8, attempt=2))
    return runs


def same_task_other_keys(campaign: str) -> list[RunRecord]:
    """Keys that differ only in the task's hash or the options: every read orders them alike."""
    return [_rec(campaign, "m1", "r1", "rubric", 0.65, task_hash=h, options_hash=o)
            for h, o in (("h-r1-edited", "o"), ("h-r1", "o2"), ("h-r1-edited", "o2"))]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    st = Store(f"sqlite:///{tmp_path_factory.mktemp('store') / 'assay.db'}")
    for campaign in ("c", "other"):
        for r in [*varied(campaign), *same_task_other_keys(campaign)]:
            st.save_run(r, [])
    st.save_run(_rec("c", "m3", "r1", "rubric", 0.5, nan=True), [])  # SQLite's JSON functions refuse NaN
    # Records of an older version: keys later versions added are absent (their defaults apply);
    # their current rows are recomputed from them, as migration 0008 computes every key's.
    _C_IDS.update(r.run_id for r in st.runs("c"))
    with st.engine.begin() as conn:
        for task, agent, _c in OLDER:
            conn.execute(text(
                "UPDATE runs SET record = json_remove(record, '$.judge_usage', '$.search', '$.turns', '$.options', "
                "'$.usage.cache_read_tokens', '$.usage.cost_usd', '$.task_meta.modality', '$.grade.na', "
                "'$.grade.router_fallback_count', '$.grade.contact_cost') "
                "WHERE campaign = 'c' AND task_id = :t AND agent = :a"), {"t": task, "a": agent})
        assert rebuild_current(conn) == conn.execute(text("SELECT count(*) FROM runs")).scalar() > 0
    return st


OLDER = ("r1", "m1", "c"), ("c1", "m2", "c"), ("fam/v1", "human:alice", "c")


def _older_grades_as_stored(rep: dict[str, Any]) -> dict[str, Any]:
    """The report without the per-run `grade` of the older records: a report file's run rows
    show a stored grade as stored (no defaults filled in for keys it lacks), as before."""
    older = {t[:2] for t in OLDER} if rep["campaign"] in ("c", None) else set()
    runs = [{**r, "grade": None} if (r["task_id"], r["agent"]) in older and r["run_id"] in _C_IDS else r
            for r in rep["runs"]]
    return {**rep, "runs": runs}


_C_IDS: set[str] = set()


def _canon(rep: dict[str, Any]) -> str:
    return json.dumps(rep, sort_keys=True, allow_nan=True)


def _same(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two reports differ, floats compared to 1e-9 relative: another database sums in
    another order (`tests.report_golden.same`)."""
    from tests.report_golden import same

    return same(json.loads(json.dumps(a, allow_nan=True)), json.loads(json.dumps(b, allow_nan=True)))


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("campaign", ["c", "other", None])
def test_the_stored_report_equals_the_report_of_the_records(store: Store, campaign: str | None,
                                                            shared: bool) -> None:
    """The current runs' columns (plus the rubric items of labelled runs) give the report the
    whole records give, with human labels and without, whole and as a leaderboard."""
    labels = [{"task_id": "r1", "item_id": "i1", "met": True, "labeller": "x", "run_id": r.run_id}
              for r in store.runs(campaign) if r.key.task_id == "r1"]
    for lab in (None, labels):
        old = build_report(campaign, store.runs(campaign), labels=lab, shared_tasks=shared)
        whole = stored_report(store, campaign, labels=lab, shared_tasks=shared, details=True, tasks=True)
        assert _canon(_older_grades_as_stored(whole)) == _canon(_older_grades_as_stored(old))
        light = stored_report(store, campaign, labels=lab, shared_tasks=shared)
        assert _canon(light) == _canon({**old, "runs": [], "tasks": []})
    assert {a["agent"] for a in old["agents"]} >= {"m1", "m2", "human:alice"}
    if lab is not None:
        assert any("human_agreement" in a for a in old["agents"])
    if not shared:
        assert len(old["runs"]) == len(store.runs(campaign))


def _current(conn: Any) -> dict[str, dict[str, Any]]:
    from assay.store.models import current_t

    return {row.run_id: dict(row._mapping) for row in conn.execute(current_t.select())}


def _latest(runs: list[RunRecord]) -> dict[str, RunRecord]:
    """The current attempt of each run key (the highest attempt; these are saved in order)."""
    out: dict[tuple[str, str], RunRecord] = {}
    for r in runs:
        k = (r.key.campaign, r.key.digest)
        if k not in out or r.attempt >= out[k].attempt:
            out[k] = r
    return {r.run_id: r for r in out.values()}


def test_migrations_0008_and_0009_down_and_up(store_url: str) -> None:
    """0009 down: 0007's run summaries back, every run's recomputed from its record; 0008 down:
    no current runs; up again: the current row of every key is the one a save writes."""
    from alembic import command
    from sqlalchemy import inspect

    from assay.store import open_store
    from assay.store.migrations.summaries_0007 import summaries_t, summary_row
    from assay.store.saves import SaveOutcome

    runs = [*varied("c"), *same_task_other_keys("c")]
    with open_store(store_url) as st:
        for r in runs:
            st.save_run(r, [])
        with st.engine.connect() as conn:
            saved = _current(conn)
        cfg = st._alembic_config()
        with st.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0008")
        with st.engine.connect() as conn:
            old = {row.run_id: dict(row._mapping) for row in conn.execute(summaries_t.select())}
            created = {row.run_id: row.created_at for row in conn.execute(text("SELECT run_id, created_at FROM runs"))}
        assert len(old) == len(runs)
        for r in runs:
            save = SaveOutcome(r, [])
            row = save.run_row(created[r.run_id])
            assert old[r.run_id] == summary_row(row, json.loads(row["record"]))
        with st.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0007")
        with st.engine.connect() as conn:
            assert "current_runs" not in inspect(conn).get_table_names()
        with st.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
        with st.engine.connect() as conn:
            assert "run_summaries" not in inspect(conn).get_table_names()
            assert _current(conn) == saved
    assert set(saved) == set(_latest(runs)) and len(saved) == len(runs) - 1  # m2's void r3 was re-run


def test_cli_report_json_equals_the_whole_record_report(store: Store, tmp_path: Path) -> None:
    """The CLI (light read) writes the report `build_report` gives over `Store.runs`."""
    (tmp_path / ".assay").mkdir(exist_ok=True)
    url = store.url
    r = assay("report", "--store", url, "--campaign", "c", "--json", str(tmp_path / "r.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    got = json.loads((tmp_path / "r.json").read_text())
    want = json.loads(json.dumps(build_report("c", store.runs("c"), labels=None), allow_nan=True))
    assert _canon(_older_grades_as_stored(got)) == _canon(_older_grades_as_stored(want))
    term = assay("report", "--store", url, "--campaign", "c", cwd=tmp_path)
    assert term.returncode == 0, term.stderr
    assert "human:alice" in term.stdout and "m2" in term.stdout


def test_postgresql_store_gives_the_same_report(pg_url: str) -> None:
    """On PostgreSQL the same query (its text ordered by the "C" collation): the same report."""
    st = Store(pg_url)
    try:
        for r in [*varied("c"), *same_task_other_keys("c")]:
            st.save_run(r, [])
        old = build_report("c", st.runs("c"))  # computed by an in-memory SQLite store
        whole = stored_report(st, "c", details=True, tasks=True)
        assert _same(whole, old) == []
        light = stored_report(st, "c")
        assert _same(light, {**old, "runs": [], "tasks": []}) == []
        n, unknown, usd = _costs_of_records(st, "c")
        got = st.attempt_costs("c")
        assert (got.attempts, got.unknown) == (n, unknown) and got.usd == pytest.approx(usd, rel=1e-12)
    finally:
        st.close()


def _costs_of_records(st: Store, campaign: str) -> tuple[int, int, float]:
    runs = st.all_attempts(campaign)
    return (len(runs), sum(r.usage.cost_usd is None for r in runs),
            sum((r.usage.cost_usd or 0.0) + (r.judge_usage.cost_usd or 0.0) for r in runs))


@pytest.mark.parametrize("campaign", ["c", "other", "none"])
def test_attempt_costs_are_the_records_sums(store: Store, campaign: str) -> None:
    """What a campaign's attempts cost (`assay compare`'s cost per run, the spend a resumed
    campaign starts from) is summed by the store: current rows' columns plus the records of
    the void attempts they replaced, as the records themselves sum, unknown prices counted."""
    n, unknown, usd = _costs_of_records(store, campaign)
    got = store.attempt_costs(campaign)
    assert (got.attempts, got.unknown) == (n, unknown) and got.usd == pytest.approx(usd, rel=1e-12)
    if campaign == "c":
        assert n > len(store.runs("c")) and unknown > 0  # a replaced void attempt and unknown prices are in


@pytest.mark.parametrize("shared", [False, True])
def test_html_from_the_table_rows_equals_the_html_from_whole_records(store: Store, tmp_path: Path,
                                                                     shared: bool) -> None:
    """`--html` alone reads the runs table's columns (`details="table"`): the page is byte for
    byte the one the whole records give, runs table included, and its rows are `run_row`'s keys."""
    from assay.report.html import write_html

    whole = stored_report(store, "c", shared_tasks=shared, details=True)
    table = stored_report(store, "c", shared_tasks=shared, details="table")
    assert table["tasks"] == [] and len(table["runs"]) == len(whole["runs"]) > 0
    for got, full in zip(table["runs"], whole["runs"], strict=True):
        assert got == {k: (full[k] if k != "usage" else {"cost_usd": full["usage"]["cost_usd"]}) for k in got}
    write_html(whole, tmp_path / "whole.html")
    write_html(table, tmp_path / "table.html")
    assert (tmp_path / "table.html").read_bytes() == (tmp_path / "whole.html").read_bytes()


def test_cli_html_alone_reads_no_whole_record(store: Store, tmp_path: Path) -> None:
    """The CLI's `--html` equals the page built from whole records."""
    from assay.report.html import write_html

    (tmp_path / ".assay").mkdir(exist_ok=True)
    r = assay("report", "--store", store.url, "--campaign", "c", "--html", str(tmp_path / "cli.html"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    write_html(build_report("c", store.runs("c")), tmp_path / "want.html")
    assert (tmp_path / "cli.html").read_bytes() == (tmp_path / "want.html").read_bytes()


def test_runs_stored_before_the_current_runs_report_the_same(store_url: str) -> None:
    """Runs saved under schema 0004: the migrations give each key the current row a save writes
    (0008 computes every key's from the records, on SQLite and PostgreSQL alike), and the
    report is the one the whole records give."""
    from alembic import command
    from alembic.config import Config
    from sqlalchemy import create_engine

    from assay.store import open_store
    from assay.store.models import campaigns_t, runs_t
    from assay.store.opening import MIGRATIONS_DIR
    from assay.store.saves import SaveOutcome

    if store_url.startswith("sqlite:///"):
        Path(store_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    runs = [*varied("c"), *same_task_other_keys("c")]
    saves = [SaveOutcome(r, []) for r in runs]
    eng = create_engine(store_url)
    with eng.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0004")
        conn.execute(campaigns_t.insert(), [{"name": "c", "created_at": 0.0}])
        conn.execute(runs_t.insert(), [s.run_row(1.0 + i) for i, s in enumerate(saves)])
    eng.dispose()
    with open_store(store_url) as st:
        with st.engine.connect() as conn:
            stored = _current(conn)
        latest = _latest(runs)
        assert stored == {s.record.run_id: s.current_row() for s in saves if s.record.run_id in latest}
        old = build_report("c", st.runs("c"))
        light = stored_report(st, "c")
        assert _same(light, {**old, "runs": [], "tasks": []}) == []
        assert light["agents"] and len(old["runs"]) == len(runs) - 1  # the void r3 of m2 was re-run


def test_runs_graded_alike_share_a_grade_but_a_labelled_run_has_its_own(store: Store) -> None:
    """The labelled runs are read from their current rows, one grade object per distinct grade
    (`ReportRun.from_current`); the rubric items human labels need go to the labelled run
    only, never to the runs that shared its grade."""
    from assay.report.runs import labelled_runs
    from assay.store.report_queries import ReportQuery

    with store.engine.connect() as conn, ReportQuery(conn, "other") as q:
        every = [{"task_id": "r2", "item_id": "i1", "met": False, "labeller": "x", "run_id": ""}]
        runs = [r for rs in labelled_runs(q, every).values() for r in rs if r.grade.rubric]
        assert len(runs) > 2 and len({id(r.grade.rubric) for r in runs}) == len(runs)  # each labelled: its own
        target = runs[0]
        labels = [{"task_id": "r2", "item_id": "i1", "met": False, "labeller": "x", "run_id": target.run_id}]
        (got,) = [r for rs in labelled_runs(q, labels).values() for r in rs]
    assert got.run_id == target.run_id
    assert [it.id for it in got.grade.rubric.items] == ["i1", "i2", "c1"]  # type: ignore[union-attr]
