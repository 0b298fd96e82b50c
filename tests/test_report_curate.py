"""`assay curate`: difficulty filter, bidirectional truncation, balance, manifest, --tasks-from."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from assay.errors import InputError
from assay.record import RunKey, RunRecord
from assay.report.curate import curate
from assay.store import Store
from assay.task.manifest import MANIFEST_SCHEMA, read_manifest_tasks, write_manifest
from tests.helpers import answer_task, assay

CAMPAIGN = "C"


def rec(task: str, agent: str, epoch: int, *, score: float | None = None, passed: bool | None = None,
        void: bool = False, execution: str = "multi-step-with-tools", source: str = "native",
        domain: str = "finance", modality: str = "text", campaign: str = CAMPAIGN,
        level: str | None = None) -> RunRecord:
    if score is None and not void:
        score = 1.0 if passed else 0.0
    if passed is None and not void:
        passed = score is not None and score >= 0.7
    return RunRecord(
        run_id=uuid.uuid4().hex,
        key=RunKey(campaign=campaign, task_id=task, task_hash="h-" + task, agent=agent, level=level,
                   epoch=epoch, options_hash="o"),
        kinds=["contract"], harness_version="test",
        status="void" if void else "done", end_reason="api_error" if void else "finished",
        score=None if void else score, passed=None if void else passed,
        task_meta={"domain": domain, "subset": None, "language": "en", "modality": modality,
                   "execution": execution, "source": source, "title": task},
    )


SS = {"execution": "single-step", "source": "darebench", "domain": "coding"}


def synthetic_runs() -> list[RunRecord]:
    """Agents small, big and tiny; three epochs each; one task per rule and edge case."""
    runs: list[RunRecord] = []
    for e in range(3):
        # easy-ss: the small agent passes 3 of 3 on a single-step task -> difficulty drop
        runs += [rec("easy-ss", "small", e, passed=True, **SS),
                 rec("easy-ss", "big", e, passed=e == 0, **SS),
                 rec("easy-ss", "tiny", e, passed=False, **SS)]
        # ss-partial: small passes 2 of 3 -> kept
        runs += [rec("ss-partial", "small", e, passed=e < 2, **SS),
                 rec("ss-partial", "big", e, passed=False, **SS),
                 rec("ss-partial", "tiny", e, passed=False, **SS)]
        # ss-void: small passes 2, third epoch void -> fewer than k=3 non-void runs, not judged
        runs += [rec("ss-void", "small", e, passed=True, void=e == 2, **SS),
                 rec("ss-void", "big", e, passed=False, **SS),
                 rec("ss-void", "tiny", e, passed=False, **SS)]
        # multi-easy: small passes 3 of 3 but the task is multi-step -> difficulty does not apply
        runs += [rec("multi-easy", "small", e, passed=True, execution="multi-step"),
                 rec("multi-easy", "big", e, passed=e != 1, execution="multi-step"),
                 rec("multi-easy", "tiny", e, passed=False, execution="multi-step")]
        # all-pass: every agent passes every epoch (one void run, ignored) -> upper truncation
        for a in ("small", "big", "tiny"):
            runs.append(rec("all-pass", a, e, score=0.9, void=(a == "tiny" and e == 1),
                            source="omb", domain="law"))
        # hard: every agent's best score <= 0.05 -> review, kept
        runs += [rec("hard", "small", e, score=0.0, source="omb", domain="law"),
                 rec("hard", "big", e, score=0.05 if e == 2 else 0.01, source="omb", domain="law"),
                 rec("hard", "tiny", e, score=-0.3, source="omb", domain="law")]
        # low: best 0.1 -> review only with a larger --zero-eps
        runs += [rec("low", a, e, score=0.1 if a == "big" else 0.0, modality="multimodal") for a in ("small", "big")]
        # only-void: nothing to judge -> kept with a note
        runs.append(rec("only-void", "big", e, void=True, domain="health"))
    return runs


def ids(items) -> list[str]:  # noqa: ANN001
    return sorted(x.task_id for x in items)


# --- pure logic ------------------------------------------------------------------------------


def test_rules_with_small_agent_default_k() -> None:
    res = curate(synthetic_runs(), small_agent="small", k=None)
    assert res.rules["difficulty"]["k"] == 3
    assert res.rules["difficulty"]["applied"] is True
    by_rule = {d.task_id: d.rule for d in res.dropped}
    assert by_rule == {"easy-ss": "difficulty", "all-pass": "upper_truncation"}
    assert "3 of 3" in next(d.reason for d in res.dropped if d.task_id == "easy-ss")
    assert ids(res.review) == ["hard"]
    assert res.review[0].rule == "lower_truncation"
    assert res.kept == sorted(["ss-partial", "ss-void", "multi-easy", "hard", "low", "only-void"])
    assert "hard" in res.kept  # review is not a drop
    assert res.tasks_total == 8
    assert res.void_ignored == 5  # ss-void x1, all-pass x1, only-void x3
    assert res.runs_used == len(synthetic_runs()) - 5
    assert any("fewer than k=3" in n and "ss-void" in n for n in res.notes)
    assert any("only void runs" in n and "only-void" in n for n in res.notes)
    assert res.campaign == CAMPAIGN


def test_balance_counts_before_after() -> None:
    res = curate(synthetic_runs(), small_agent="small", k=None)
    b = {axis: {g: (c.before, c.after) for g, c in groups.items()} for axis, groups in res.balance.items()}
    assert b["source"] == {"darebench": (3, 2), "native": (3, 3), "omb": (2, 1)}
    assert b["domain"] == {"coding": (3, 2), "finance": (2, 2), "health": (1, 1), "law": (2, 1)}
    assert b["cell"] == {"multimodal/multi-step-with-tools": (1, 1), "text/multi-step": (1, 1),
                         "text/multi-step-with-tools": (3, 2), "text/single-step": (3, 2)}
    assert b["subset"] == {"-": (8, 6)}


def test_no_small_agent_skips_difficulty_with_a_note() -> None:
    res = curate(synthetic_runs(), small_agent=None, k=None)
    assert res.rules["difficulty"]["applied"] is False
    assert any("difficulty filter skipped" in n for n in res.notes)
    assert ids(res.dropped) == ["all-pass"]
    assert "easy-ss" in res.kept


def test_explicit_k() -> None:
    res = curate(synthetic_runs(), small_agent="small", k=2)
    dropped = {d.task_id: d.rule for d in res.dropped}
    # ss-void: 2 non-void runs, both passed -> now judged and dropped; ss-partial still failed one
    assert dropped == {"easy-ss": "difficulty", "ss-void": "difficulty", "all-pass": "upper_truncation"}
    assert "ss-partial" in res.kept


def test_zero_eps_controls_review() -> None:
    assert ids(curate(synthetic_runs(), small_agent=None, k=None, zero_eps=0.2).review) == ["hard", "low"]
    assert ids(curate(synthetic_runs(), small_agent=None, k=None, zero_eps=0.0).review) == []


def test_difficulty_counts_levels_and_only_the_small_agent() -> None:
    runs = [rec("t", "small", 0, passed=True, execution="single-step", level="L0"),
            rec("t", "small", 0, passed=True, execution="single-step", level="L3"),
            rec("t", "big", 0, passed=False, execution="single-step")]
    res = curate(runs, small_agent="small", k=None)
    assert res.rules["difficulty"]["k"] == 2
    assert [d.rule for d in res.dropped] == ["difficulty"]
    # another agent passing everything does not trigger difficulty, and big failing keeps it off upper
    res = curate(runs, small_agent="big", k=None)
    assert res.dropped == [] and res.kept == ["t"]


def test_bad_small_agent_and_k() -> None:
    with pytest.raises(InputError, match="--small-agent.*'nobody'"):
        curate(synthetic_runs(), small_agent="nobody", k=None)
    with pytest.raises(InputError, match="--k"):
        curate(synthetic_runs(), small_agent="small", k=0)


def test_empty_runs() -> None:
    res = curate([], small_agent=None, k=None)
    assert res.kept == [] and res.tasks_total == 0


def test_manifest_roundtrip_json_and_yaml(tmp_path: Path) -> None:
    res = curate(synthetic_runs(), small_agent="small", k=None)
    for name in ("m.json", "m.yaml"):
        p = tmp_path / name
        write_manifest(p, res.manifest())
        data = json.loads(p.read_text()) if name.endswith(".json") else yaml.safe_load(p.read_text())
        assert data["schema"] == MANIFEST_SCHEMA
        assert data["tasks"] == res.kept
        assert read_manifest_tasks(p) == res.kept
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.json", "m.yaml"]  # no temp files left


@pytest.mark.parametrize(("content", "match"), [
    ("{not json", "does not parse"),
    ('{"schema": "assay.manifest/1", "tasks": []}', "lists no tasks"),
    ('{"schema": "assay.manifest/1", "tasks": "a"}', "list of task ids"),
    ('{"schema": "other/1", "tasks": ["a"]}', "schema"),
    ("[1, 2]", "not a suite manifest"),
])
def test_read_manifest_refuses_bad_files(tmp_path: Path, content: str, match: str) -> None:
    p = tmp_path / "m.json"
    p.write_text(content)
    with pytest.raises(InputError, match=match):
        read_manifest_tasks(p)
    with pytest.raises(InputError, match="no such manifest"):
        read_manifest_tasks(tmp_path / "missing.json")


# --- command line, end to end ----------------------------------------------------------------


@pytest.fixture
def base() -> Iterator[Path]:
    """A working folder the sandbox uid can traverse (0711)."""
    d = Path(tempfile.mkdtemp(prefix="assay-curate-test-"))
    os.chmod(d, 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() + f":{p.stat().st_mtime_ns}"
            for p in sorted(root.rglob("*")) if p.is_file()}


def make_suite(base: Path) -> Path:
    suite = base / "suite"
    for name in ("alpha", "beta", "gamma"):
        answer_task(suite / name, want=str(len(name)))
    return suite


def test_cli_curate_writes_manifest_and_touches_nothing(base: Path) -> None:
    url = f"sqlite:///{base}/s.db"
    store = Store(url)
    for r in synthetic_runs():
        store.save_run(r, [])
    store.save_run(rec("x", "small", 0, passed=True, campaign="other"), [])
    store.close()
    suite = make_suite(base)
    before = snapshot(suite)

    r = assay("curate", CAMPAIGN, "--store", url, "--out", "m.json", "--small-agent", "small", cwd=base)
    assert r.returncode == 0, r.stderr
    assert "void runs are ignored" in r.stderr
    assert "assay curate" in r.stdout and "balance" in r.stdout
    m = json.loads((base / "m.json").read_text())
    assert m["schema"] == MANIFEST_SCHEMA and m["campaign"] == CAMPAIGN
    assert m["created"][:4].isdigit() and "T" in m["created"]
    assert m["tasks"] == sorted(["ss-partial", "ss-void", "multi-easy", "hard", "low", "only-void"])
    assert {d["task_id"]: d["rule"] for d in m["dropped"]} == {"easy-ss": "difficulty", "all-pass": "upper_truncation"}
    assert [x["task_id"] for x in m["review"]] == ["hard"]
    assert m["rules"]["difficulty"]["k"] == 3 and m["rules"]["lower_truncation"]["zero_eps"] == 0.05
    assert "ignored" in m["rules"]["void_runs"]
    assert m["summary"]["void_runs_ignored"] == 5
    assert m["balance"]["source"]["omb"] == {"before": 2, "after": 1}
    assert snapshot(suite) == before
    assert sorted(p.name for p in base.iterdir()) == ["m.json", "s.db", "suite"]

    # YAML by suffix, options passed through
    r = assay("curate", CAMPAIGN, "--store", url, "--out", "out/m.yaml", "--zero-eps", "0.2",
              "--small-agent", "small", "--k", "2", cwd=base)
    assert r.returncode == 0, r.stderr
    m = yaml.safe_load((base / "out/m.yaml").read_text())
    assert "ss-void" not in m["tasks"] and [x["task_id"] for x in m["review"]] == ["hard", "low"]

    # without --small-agent: difficulty skipped, said so
    r = assay("curate", CAMPAIGN, "--store", url, "--out", "m2.json", cwd=base)
    assert r.returncode == 0, r.stderr
    assert "difficulty filter skipped" in r.stderr
    assert "easy-ss" in json.loads((base / "m2.json").read_text())["tasks"]
    assert snapshot(suite) == before


@pytest.mark.parametrize(("args", "match"), [
    (["nope", "--out", "m.json"], "no campaign named 'nope'"),
    ([CAMPAIGN, "--out", "m.txt"], "--out"),
    ([CAMPAIGN, "--out", "m.json", "--small-agent", "ghost"], "ghost"),
    ([CAMPAIGN, "--out", "m.json", "--small-agent", "small", "--k", "0"], "--k"),
])
def test_cli_curate_bad_input_exits_2(base: Path, args: list[str], match: str) -> None:
    url = f"sqlite:///{base}/s.db"
    store = Store(url)
    for r in synthetic_runs()[:6]:
        store.save_run(r, [])
    store.close()
    r = assay("curate", *args, "--store", url, cwd=base)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert match in r.stderr and "Traceback" not in r.stderr
    assert not (base / "m.json").exists() and not (base / "m.txt").exists()


def test_cli_curate_without_store_exits_2(base: Path) -> None:
    r = assay("curate", CAMPAIGN, "--out", "m.json", cwd=base)
    assert r.returncode == 2 and "no store here yet" in r.stderr
    assert not (base / "m.json").exists()


def test_run_tasks_from_manifest(base: Path) -> None:
    suite = make_suite(base)
    (base / "m.json").write_text(json.dumps({"schema": MANIFEST_SCHEMA, "tasks": ["alpha", "gamma"]}))
    r = assay("run", "suite", "--agent", "noop", "--tasks-from", "m.json", "--campaign", "sel",
              "--json", "r.json", "-q", cwd=base)
    assert r.returncode == 0, r.stderr
    assert sorted(x["task_id"] for x in json.loads((base / "r.json").read_text())["runs"]) == ["alpha", "gamma"]

    # merged with --task; duplicates collapse
    r = assay("run", "suite", "--agent", "noop", "--tasks-from", "m.json", "--task", "beta", "--task", "alpha",
              "--campaign", "sel2", "--json", "r2.json", "-q", cwd=base)
    assert r.returncode == 0, r.stderr
    assert sorted(x["task_id"] for x in json.loads((base / "r2.json").read_text())["runs"]) == ["alpha", "beta", "gamma"]
    assert (suite / "alpha" / "task.yaml").exists()


@pytest.mark.parametrize(("content", "match"), [
    (None, "no such manifest"),
    ("{broken", "does not parse"),
    ('{"tasks": []}', "lists no tasks"),
    ('{"tasks": ["alpha", "zeta"]}', "zeta"),
])
def test_run_tasks_from_bad_manifest_exits_2(base: Path, content: str | None, match: str) -> None:
    make_suite(base)
    if content is not None:
        (base / "m.json").write_text(content)
    r = assay("run", "suite", "--agent", "noop", "--tasks-from", "m.json", "-q", cwd=base)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert match in r.stderr and "Traceback" not in r.stderr
    assert not (base / ".assay").exists()  # nothing written to the store


def test_curate_then_run_pipeline(base: Path) -> None:
    """Real runs -> curate -> run the curated set in a new campaign."""
    make_suite(base)
    r = assay("run", "suite", "--agent", "noop", "--agent", "reference", "--campaign", "full", "-q", cwd=base)
    assert r.returncode == 0, r.stderr
    r = assay("curate", "full", "--out", "suite.json", "--small-agent", "noop", cwd=base)
    assert r.returncode == 0, r.stderr
    m = json.loads((base / "suite.json").read_text())
    assert m["tasks"] == ["alpha", "beta", "gamma"]  # noop fails, reference passes: nothing to drop
    assert m["dropped"] == [] and m["review"] == []
    r = assay("run", "suite", "--agent", "noop", "--tasks-from", "suite.json", "--campaign", "curated",
              "--json", "r.json", "-q", cwd=base)
    assert r.returncode == 0, r.stderr
    assert len(json.loads((base / "r.json").read_text())["runs"]) == 3
