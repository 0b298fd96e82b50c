"""SPEC.md conformance: drives the CLI and the API exactly as /work/shared/SPEC.md describes them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from assay import metrics
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, answer_task, assay, model_alias, write_task

FIXTURES = REPO / "tests" / "fixtures"
ITEM_LINE = re.compile(r"^\[([^\]]+)\] \(", re.MULTILINE)


def _tasks_json(path: Path, cwd: Path) -> list[dict[str, Any]]:
    r = assay("tasks", str(path), "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["tasks"]


# ----------------------------------------------------------------------------- finding tasks


def test_unparseable_json_is_refused_even_if_not_a_task(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "omb" / "law", tmp_path / "s" / "law")
    (tmp_path / "s" / "notes.json").write_text('{"a": 1,\n')
    r = assay("tasks", "s", cwd=tmp_path)
    assert r.returncode == 2
    assert "notes.json:2:" in r.stderr and "Traceback" not in r.stderr


def test_json_without_rubrics_is_ignored_and_alias_accepted(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "omb" / "law", tmp_path / "s" / "law")  # uses the `Rubrics` alias
    (tmp_path / "s" / "other.json").write_text('{"a": 1}')
    (tmp_path / "s" / "list.json").write_text('[{"a": 1}]')
    assert [t["id"] for t in _tasks_json(tmp_path / "s", tmp_path)] == ["9001"]


def test_empty_rubrics_is_validated_as_omb_and_refused(tmp_path: Path) -> None:
    (tmp_path / "e.json").write_text('{"case_id": 5, "prompt": "hi", "rubrics": []}')
    r = assay("validate", "e.json", cwd=tmp_path)
    assert r.returncode == 2 and "e.json" in r.stderr and "rubrics" in r.stderr


def test_md_without_grading_type_ignored_and_no_tasks_found(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "x.md").write_text("---\nid: x\nlevel: L1\n---\n\nhello\n")
    r = assay("tasks", "s", cwd=tmp_path)
    assert r.returncode == 2 and "no tasks found in s" in r.stderr


def test_duplicate_ids_refused(tmp_path: Path) -> None:
    answer_task(tmp_path / "s" / "one", id="same")
    answer_task(tmp_path / "s" / "two", id="same")
    r = assay("run", "s", "--agent", "noop", cwd=tmp_path)
    assert r.returncode == 2 and "same" in r.stderr
    assert not (tmp_path / ".assay").exists()  # nothing written to the store


def test_omb_ids_and_value_table_in_tasks_listing(tmp_path: Path) -> None:
    tasks = {t["id"]: t for t in _tasks_json(FIXTURES / "omb", tmp_path)}
    assert {"9001", "7001", "hc-uuid-0002", "array_2", "cn_valuation"} <= set(tasks)
    for t in tasks.values():
        assert {"id", "kinds", "domain", "language", "levels", "modality", "execution", "value"} <= set(t)
    # economic_value.md beside the folder given is picked up, as `assay run` does
    assert tasks["9001"]["value"] == {"amount": 1250.0, "currency": "USD"}
    assert tasks["cn_valuation"]["value"] == {"amount": 5793.0, "currency": "CNY"}


@pytest.mark.parametrize("cell", ["1.7e308", "inf", "1e13"])
def test_a_value_table_row_past_the_value_bound_is_refused(tmp_path: Path, cell: str) -> None:
    """A task's value is at most 10^12 (reports sum values): a value table row past it is
    refused with its line, as a task file's `value.amount` is."""
    from assay.errors import InputError
    from assay.task.formats.values import parse_value_table

    table = tmp_path / "economic_value.md"
    table.write_text(f"| UUID | Domain | CNY | USD | Subset |\n|---|---|---|---|---|\n| 9001 | law | | {cell} | global |\n")
    with pytest.raises(InputError) as e:
        parse_value_table(table)
    assert e.value.field == "USD" and e.value.line == 3 and "1e+12" in e.value.reason


# ----------------------------------------------------------------------------- metrics


def test_pass_at_k_exact_values() -> None:
    assert metrics.pass_at_k(5, 2, 1) == 0.4
    assert metrics.pass_at_k(3, 3, 2) == 1.0
    assert metrics.pass_hat_k(5, 3, 2) == 0.3
    assert metrics.pass_hat_k(5, 1, 2) == 0.0
    for bad in ((5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)):
        with pytest.raises(ValueError):
            metrics.pass_at_k(*bad)
        with pytest.raises(ValueError):
            metrics.pass_hat_k(*bad)
    assert metrics.expert_score([0.0], [-1.0]) is None
    with pytest.raises(ValueError):
        metrics.uplift(1.0, 2.0, 2.0)
    assert metrics.economic_value([(0.8, 100, "USD"), (0.5, 50, "CNY")]) == {"USD": 100.0, "CNY": 0.0}
    assert metrics.pareto_front([(1, 0.5), (2, 0.4), (0.5, 0.3), (1, 0.5), (3, 0.9), (2, 0.9)]) == [2, 0, 3, 5]


# ----------------------------------------------------------------------------- report, validate


def test_report_without_campaign_names_the_only_campaign(tmp_path: Path) -> None:
    answer_task(tmp_path / "s" / "a")
    assert assay("run", "s", "--agent", "noop", "-q", cwd=tmp_path).returncode == 0
    r = assay("report", "--json", "r.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["schema"] == "assay.report/1" and rep["campaign"] == "default"
    assert [x["level"] for x in rep["runs"]] == [None]
    run_id = rep["runs"][0]["run_id"]
    shown = json.loads(assay("show", run_id, "--json", cwd=tmp_path).stdout)
    assert set(shown) == {"run", "events"} and shown["run"] == rep["runs"][0]


def test_anchors_noop_checked_without_reference(tmp_path: Path) -> None:
    write_task(tmp_path / "s" / "q", {"title": "x", "prompt": "hi",
                                      "contract": [{"path": "README.md", "predicate": "exists"}]},
               {"workspace/README.md": "hello\n"})
    r = assay("validate", "s", "--anchors", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr  # the no-op passes: the anchor fails
    assert "noop" in r.stdout and "FAIL" in r.stdout


# ----------------------------------------------------------------------------- judge, HealthBench tags


def test_omb_and_healthbench_through_a_judge(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    shutil.copytree(FIXTURES / "omb" / "law", work / "law")
    shutil.copy(FIXTURES / "omb" / "economic_value.md", work / "economic_value.md")
    shutil.copytree(FIXTURES / "healthbench", work / "hb")
    seen: list[list[str]] = []

    def handler(body: dict[str, Any]) -> str:
        ids = ITEM_LINE.findall(body["messages"][-1]["content"])
        seen.append(ids)
        return json.dumps({"items": [{"id": i, "met": i in ("1", "2"), "reason": "r"} for i in ids]})

    r0 = assay("run", ".", "--agent", "noop", cwd=work)
    assert r0.returncode == 2 and "--judge" in r0.stderr and "9001" in r0.stderr
    with FakeOpenAIServer() as srv:
        srv.handler = handler
        model_alias(work, "j", "openai", srv.url)
        r = assay("run", ".", "--agent", "noop", "--judge", "j", "--json", "rep.json", "-q", cwd=work)
    assert r.returncode == 0, r.stderr
    assert ["1", "2", "3", "4", "5"] in seen  # OMB: rubric_number
    rep = json.loads((work / "rep.json").read_text())
    rows = {x["task_id"]: x for x in rep["runs"]}
    assert rows["9001"]["value"] == {"amount": 1250.0, "currency": "USD"}
    assert [i["id"] for i in rows["9001"]["grade"]["items"]] == ["1", "2", "3", "4", "5"]
    hb = rows["hb-0001"]["grade"]["items"]
    assert [i["id"] for i in hb] == ["1", "2", "3", "4"]  # HealthBench: 1-based position
    assert hb[0]["tag"] == "axis:accuracy"  # the free tag, not null
    for row in rep["runs"]:
        assert set(row["grade"]["audit"]) >= {"flags", "removed", "pre_audit_score"}
        for it in row["grade"]["items"]:
            assert {"id", "weight", "tag", "hit", "na", "check"} <= set(it)


# ----------------------------------------------------------------------------- interrupt and resume


def test_sigint_exits_130_keeps_finished_runs_and_resumes(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    answer_task(tmp_path / "s" / "a")
    (tmp_path / "slow.jsonl").write_text(
        '{"tool": "run_command", "args": {"command": "sleep 60", "timeout_s": 120}}\n'
        '{"tool": "write_file", "args": {"path": "answer.txt", "content": "42\\n"}}\n{"say": "done"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))}
    args = ["run", "s", "--agent", "reference", "--agent", "script:slow.jsonl", "--concurrency", "2", "-q"]
    proc = subprocess.Popen([sys.executable, "-m", "assay.cli", *args], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(1)
            r = assay("report", "--json", "mid.json", cwd=tmp_path)
            if r.returncode == 0 and any(x["agent"] == "reference" and x["status"] == "done"
                                         for x in json.loads((tmp_path / "mid.json").read_text())["runs"]):
                break
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "interrupted" in err and "resume" in err and "Traceback" not in err, err[-2000:]
    r = assay("report", "--json", "after.json", cwd=tmp_path)
    runs = json.loads((tmp_path / "after.json").read_text())["runs"]
    assert [(x["agent"], x["status"]) for x in runs if x["status"] == "done"] == [("reference", "done")]
    # resume: the reference run is not redone; the interrupted one runs (quickly, with a fast script)
    (tmp_path / "slow.jsonl").write_text('{"tool": "write_file", "args": {"path": "answer.txt", "content": "42\\n"}}\n')
    r = assay(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1 already done" in r.stderr
