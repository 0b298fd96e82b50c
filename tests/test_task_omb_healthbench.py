"""OneMillion-Bench and HealthBench readers: round trips, value tables, refusals via the CLI."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from assay.errors import InputError
from assay.task.discover import discover
from assay.task.formats.healthbench import read_healthbench
from assay.task.formats.omb import read_omb
from assay.task.formats.values import apply_found_value_tables
from assay.task.hashing import content_hash
from tests.fakes import Response, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import assay, model_alias

FIX = Path(__file__).parent / "fixtures"
OMB = FIX / "omb"
HB = FIX / "healthbench" / "sample.jsonl"
BAD = FIX / "bad"


# ---------------------------------------------------------------- OneMillion-Bench


def test_single_object_with_aliases():
    [t] = read_omb(OMB / "law" / "case_a.json")
    assert t.id == "9001"  # case_id wins over uuid
    assert t.source == "omb" and t.execution == "single-step" and t.tools == []
    assert t.prompt.startswith("A tenant in a commercial lease")  # from `Prompt`
    assert t.system_prompt.startswith("You are advising")  # from `System_Prompt`
    assert t.language == "en" and t.subset == "global"
    assert t.domain == "law"  # from the folder
    assert t.subdomain == "Contract Law"
    assert t.metadata["tags"] == ["Law", "Contract Law", "Commercial Lease"]
    assert t.metadata["file_stem"] == "case_a"
    assert t.metadata["omb_index"] is None
    assert t.metadata["value_keys"][:2] == ["5b1e7c2a-0d4f-4c1e-9a53-000000009001", "9001"]
    items = t.rubric.items  # from `Rubrics`
    assert [i.id for i in items] == ["1", "2", "3", "4", "5"]
    assert [i.tag for i in items] == ["FI", "AR", "IF", "SF", "AR"]
    assert [i.weight for i in items] == [10, 8, 6, 3, -5]  # "6" and "-5" are numeric strings
    assert t.rubric.scoring == "clipped"
    assert items[0].human_labels == {"response_1_human_score_1": True, "response_2_human_score_1": False}
    assert items[1].human_labels == {"response_1_human_score_1": False, "response_2_human_score_1": True}
    assert items[4].human_labels == {"response_1_human_score_1": True, "response_2_human_score_1": False}
    assert items[2].human_labels == {}
    assert t.content_hash == content_hash(t) and len(t.content_hash) == 16


def test_upstream_results_stay_out_of_the_hash(tmp_path):
    data = json.loads((OMB / "law" / "case_a.json").read_text(encoding="utf-8"))
    for key in ("model_response", "rubric_auto_score", "judge_cot"):
        data.pop(key)
    (tmp_path / "law").mkdir()
    copy = tmp_path / "law" / "case_a.json"
    copy.write_text(json.dumps(data), encoding="utf-8")
    [orig] = read_omb(OMB / "law" / "case_a.json")
    [stripped] = read_omb(copy)
    assert orig.content_hash == stripped.content_hash
    data["Rubrics"][0]["rubric_weight"] = 9
    copy.write_text(json.dumps(data), encoding="utf-8")
    assert read_omb(copy)[0].content_hash != orig.content_hash


def test_array_ids_and_fallbacks():
    tasks = read_omb(OMB / "healthcare_and_medicine" / "array.json")
    assert [t.id for t in tasks] == ["7001", "hc-uuid-0002", "array_2"]
    a, b, c = tasks
    assert all(t.domain == "healthcare" for t in tasks)
    assert a.subdomain == "Pharmacology" and c.subdomain is None
    assert a.system_prompt is None  # "" means none
    assert b.prompt.startswith("List three red-flag")  # from `question`
    assert [i.tag for i in b.rubric.items] == ["FI", "IF"]  # short codes, any case
    assert [i.id for i in c.rubric.items] == ["1", "2"]  # no rubric_number: 1-based position
    assert [t.metadata["omb_index"] for t in tasks] == [0, 1, 2]
    assert [t.metadata["file_stem"] for t in tasks] == ["array_0", "array_1", "array_2"]
    assert a.rubric.items[2].weight == -8


def test_chinese_case_and_tag_domain():
    [cn] = read_omb(OMB / "economics_and_finance" / "cn_valuation.json")
    assert cn.id == "cn_valuation"  # no ids: the file stem
    assert cn.language == "zh" and cn.subset == "cn"
    assert cn.domain == "finance"
    assert [i.tag for i in cn.rubric.items] == ["AR", "FI", "IF", "AR"]  # Chinese label names
    [ns] = read_omb(OMB / "misc" / "buffer_case.json")
    assert ns.id == "NS-42"  # caseId
    assert ns.domain == "natural_science"  # folder is not a dataset folder: tags[0]
    assert ns.subdomain == "Chemistry"
    assert [i.tag for i in ns.rubric.items] == ["AR", "SF"]


def test_value_table_applied():
    tasks = discover([OMB])
    apply_found_value_tables(tasks, [OMB])
    got = {t.id: (t.value.amount, t.value.currency) if t.value else None for t in tasks}
    assert got == {
        "9001": (1250.0, "USD"),  # row keyed by uuid
        "7001": (900.0, "USD"),  # row keyed by case_id
        "array_2": (300.0, "USD"),  # row keyed by the (virtual) file stem
        "cn_valuation": (5793.0, "CNY"),  # row keyed by the file stem
        "hc-uuid-0002": None,
        "NS-42": None,
    }


def test_value_table_found_from_subfolder():
    tasks = discover([OMB / "law"])
    apply_found_value_tables(tasks, [OMB / "law"])
    assert tasks[0].value.amount == 1250.0 and tasks[0].value.currency == "USD"


# ---------------------------------------------------------------- HealthBench


def test_healthbench_mapping():
    tasks = read_healthbench(HB)
    assert [t.id for t in tasks] == ["hb-0001", "hb-0002", "sample_3"]
    a, b, c = tasks
    for t in tasks:
        assert t.source == "healthbench" and t.execution == "single-step" and t.tools == []
        assert t.rubric.scoring == "unclipped_mean"
        assert all(i.tag is None for i in t.rubric.items)
        assert t.content_hash == content_hash(t)
    assert a.prompt.startswith("My father suddenly")
    assert a.messages == [{"role": "user", "content": a.prompt}]
    assert [i.id for i in a.rubric.items] == ["1", "2", "3", "4"]
    assert [i.weight for i in a.rubric.items] == [10, 5, -8, 3]
    assert a.rubric.items[0].tags == ["level:example", "axis:accuracy"]
    assert a.rubric.items[0].text == "Tells the user to call emergency services immediately."
    assert a.tags == ["theme:emergency_referrals", "physician_agreed_category:emergent"]
    assert a.policies["reference"].answer.startswith("Call emergency services now")
    # multi-turn: the whole conversation is kept; the prompt is the last user message
    assert len(b.messages) == 4
    assert b.prompt == "No fever, just the cough. Should I take antibiotics?"
    assert b.system_prompt == "You are a careful health assistant."
    assert "reference" not in b.policies  # ideal_completions_data: null
    assert [i.weight for i in c.rubric.items] == [6, -4]
    assert c.tags == ["theme:global_health"]


def test_healthbench_points_not_range_checked(tmp_path):
    row = {"prompt": [{"role": "user", "content": "Question?"}], "prompt_id": "big",
           "rubrics": [{"criterion": "A", "points": 15, "tags": []}, {"criterion": "B", "points": -30, "tags": []}]}
    f = tmp_path / "big.jsonl"
    f.write_text(json.dumps(row) + "\n", encoding="utf-8")
    [t] = read_healthbench(f)
    assert [i.weight for i in t.rubric.items] == [15, -30]


def test_healthbench_missing_fields(tmp_path):
    f = tmp_path / "rows.jsonl"
    good = {"prompt": [{"role": "user", "content": "Q?"}], "rubrics": [{"criterion": "A", "points": 1}]}
    f.write_text(json.dumps(good) + "\n\n" + json.dumps({"prompt": good["prompt"]}) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_healthbench(f)
    assert e.value.line == 3 and e.value.field == "rubrics"
    f.write_text(json.dumps({"rubrics": good["rubrics"]}) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_healthbench(f)
    assert e.value.line == 1 and e.value.field == "prompt"


def test_discover_finds_both_formats():
    tasks = discover([OMB, FIX / "healthbench"])
    assert {t.source for t in tasks} == {"omb", "healthbench"}
    assert len(tasks) == 9


# ---------------------------------------------------------------- the CLI


def _assay(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return assay(*args, cwd=cwd, env={"COLUMNS": "400"})  # keep rich from wrapping long paths


BAD_CASES = [
    ("omb/zero_weight.json", "rubrics[1].rubric_weight", "weight is zero"),
    ("omb/weight_eleven.json", "[1].rubrics[1].rubric_weight", "outside [-20, 10]"),
    ("omb/weight_minus_21.json", "rubrics[2].rubric_weight", "outside [-20, 10]"),
    ("omb/weight_ten.json", "rubrics[0].rubric_weight", "not a number"),
    ("omb/unknown_label.json", "rubrics[1].rubricLabel", "unknown capability tag"),
    ("omb/no_positive.json", "rubrics", "no positive weight"),
    ("omb/empty_rubrics.json", "rubrics", "no positive weight"),
    ("omb/missing_prompt.json", "[1].prompt", "missing brief/prompt"),
    ("omb/syntax_error.json", None, "does not parse as JSON"),
    ("healthbench/zero_points.jsonl", "rubrics[1].points", "points are zero"),
    ("healthbench/bad_json_line.jsonl", None, "does not parse as JSON"),
]


@pytest.mark.parametrize(("rel", "field", "reason"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_validate_refuses_bad_file(tmp_path, rel, field, reason):
    path = BAD / rel
    r = _assay(["validate", str(path)], cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert path.name in r.stderr
    if field is not None:
        assert f"field '{field}'" in r.stderr
    assert reason in r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / ".assay").exists()
    assert list(tmp_path.iterdir()) == []


def test_validate_reports_line_numbers(tmp_path):
    r = _assay(["validate", str(BAD / "healthbench" / "bad_json_line.jsonl")], cwd=tmp_path)
    assert "bad_json_line.jsonl:2:" in r.stderr
    r = _assay(["validate", str(BAD / "healthbench" / "zero_points.jsonl")], cwd=tmp_path)
    assert "zero_points.jsonl:2:" in r.stderr
    r = _assay(["validate", str(BAD / "omb" / "syntax_error.json")], cwd=tmp_path)
    assert "syntax_error.json:6:" in r.stderr


def test_validate_accepts_fixtures(tmp_path):
    r = _assay(["validate", str(OMB), str(HB)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "9 tasks valid" in r.stdout
    assert not (tmp_path / ".assay").exists()


def test_tasks_json_lists_ids(tmp_path):
    r = _assay(["tasks", str(OMB), "--json"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["tasks"]
    assert sorted(row["id"] for row in rows) == sorted(
        ["9001", "7001", "hc-uuid-0002", "array_2", "cn_valuation", "NS-42"])
    by = {row["id"]: row for row in rows}
    assert by["cn_valuation"]["language"] == "zh"
    assert by["9001"]["domain"] == "law"
    assert all(row["kinds"] == ["rubric"] and row["execution"] == "single-step" for row in rows)


# ---------------------------------------------------------------- the Hugging Face dataset card's rows

PUBLISHED = FIX / "upstream" / "omb"
ITEM_LINE = re.compile(r"^\[([^\]]+)\] \((?:weight|权重) ([+-]?[\d.]+)\) (.*)$", re.MULTILINE)


def test_dataset_card_rows_read():
    """`tags` an object, `rubric_tag` labels, the EN and CN rows of case 4101 two tasks."""
    path = PUBLISHED / "healthcare_and_medicine" / "test.json"
    tasks = read_omb(path)
    apply_found_value_tables(tasks, [path])
    assert [t.id for t in tasks] == ["4101-en", "4101-zh", "4102-en"]
    en, zh, other = tasks
    assert (en.language, en.subset, zh.language, zh.subset) == ("en", "global", "zh", "cn")
    assert en.tags == ["Healthcare", "Clinical Pharmacology", "Drug Interactions"]
    assert en.subdomain == "Clinical Pharmacology" and zh.subdomain == "临床药理学"
    assert en.metadata["time_sensitivity"] == {"level": "low", "note": "stable guidance"}
    assert "time_sensitivity" not in other.metadata
    assert [i.tag for i in en.rubric.items] == ["FI", "AR", "SF", "AR"]
    assert [i.tag for i in other.rubric.items] == ["FI", "IF"]
    assert en.prompt.startswith("A 64-year-old") and en.system_prompt is None
    assert other.system_prompt == "You are a hospital pharmacist."
    # the value table matches each row's own `id` (its UUID) first, not the shared case_id
    assert (en.value.amount, en.value.currency) == (410.0, "USD")
    assert (zh.value.amount, zh.value.currency) == (2950.0, "CNY")
    assert other.value is None
    assert en.content_hash != zh.content_hash


@pytest.mark.parametrize(("tags", "field", "reason"), [
    ("Healthcare", "[0].tags", "tags must be a list, or an object with a topics list"),
    ({"topics": "Healthcare"}, "[0].tags.topics", "topics must be a list"),
])
def test_dataset_card_tags_refused(tmp_path, tags, field, reason):
    rows = json.loads((PUBLISHED / "healthcare_and_medicine" / "test.json").read_text(encoding="utf-8"))
    rows[0]["tags"] = tags
    bad = tmp_path / "test.json"
    bad.write_text(json.dumps(rows), encoding="utf-8")
    with pytest.raises(InputError) as e:
        read_omb(bad)
    assert (e.value.field, e.value.reason) == (field, reason)


def test_dataset_card_label_and_language_refused(tmp_path):
    rows = json.loads((PUBLISHED / "healthcare_and_medicine" / "test.json").read_text(encoding="utf-8"))
    bad = tmp_path / "test.json"
    for change, field, reason in [
        (lambda rs: rs[1].update(language="klingon"), "[1].language", "unknown language 'klingon'"),
        (lambda rs: rs[2]["rubrics"][1].update(rubric_tag="Vibes"), "[2].rubrics[1].rubric_tag",
         "unknown capability tag"),
    ]:
        changed = json.loads(json.dumps(rows))
        change(changed)
        bad.write_text(json.dumps(changed), encoding="utf-8")
        r = _assay(["validate", str(bad)], cwd=tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert f"field '{field}'" in r.stderr and reason in r.stderr
    rows[2]["rubrics"][1].pop("rubric_tag")
    bad.write_text(json.dumps(rows), encoding="utf-8")
    r = _assay(["validate", str(bad)], cwd=tmp_path)
    assert r.returncode == 2
    assert "field '[2].rubrics[1].rubricLabel'" in r.stderr and "rubricLabel or rubric_tag" in r.stderr


def _card_judge(body: dict[str, Any]) -> Response:
    """Items 1 and 2 of every case met, the rest not (upstream's array reply)."""
    prompt = body["messages"][-1]["content"]
    rows = [{"rubric_id": int(i), "status": "是" if i in ("1", "2") else "否", "justification": "read the answer"}
            for i, _w, _text in ITEM_LINE.findall(prompt)]
    return reply(json.dumps(rows, ensure_ascii=False), prompt_tokens=300, completion_tokens=40)


def test_dataset_card_rows_validate_and_run(tmp_path):
    r = _assay(["validate", str(PUBLISHED)], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "3 tasks valid" in r.stdout
    steps = tmp_path / "answer.jsonl"
    steps.write_text(json.dumps({"say": "Check the INR within 3 to 5 days; it is likely to rise."}) + "\n")
    with FakeOpenAIServer() as srv:
        srv.handler = _card_judge
        model_alias(tmp_path, "j", "openai", srv.url, model="judge-model")
        r = _assay(["run", str(PUBLISHED), "--agent", f"script:{steps}", "--judge", "j", "-q",
                    "--json", "report.json"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    runs = {row["task_id"]: row for row in json.loads((tmp_path / "report.json").read_text())["runs"]}
    assert sorted(runs) == ["4101-en", "4101-zh", "4102-en"]
    assert runs["4101-en"]["score"] == pytest.approx(18 / 21)  # (10 + 8) / (10 + 8 + 3); the -6 item not hit
    assert runs["4101-zh"]["score"] == pytest.approx(18 / 21)
    assert runs["4102-en"]["score"] == pytest.approx(1.0)  # (6 + 8) / 14
    assert all(row["passed"] for row in runs.values())


def test_healthbench_rows_past_the_cap_are_refused_naming_the_line(tmp_path, monkeypatch):
    """A file of more rows than MAX_ROWS (a file at the size cap held 2.3 million: about 18 GB
    as tasks) is refused at the first row past it, before that row is built."""
    from assay.task.formats import healthbench

    monkeypatch.setattr(healthbench, "MAX_ROWS", 3)
    row = {"prompt": [{"role": "user", "content": "Q?"}], "rubrics": [{"criterion": "A", "points": 1}]}
    f = tmp_path / "rows.jsonl"
    f.write_text("".join(json.dumps({**row, "prompt_id": f"p{i}"}) + "\n" for i in range(3)), encoding="utf-8")
    assert len(read_healthbench(f)) == 3
    f.write_text("".join(json.dumps({**row, "prompt_id": f"p{i}"}) + "\n" for i in range(4)), encoding="utf-8")
    with pytest.raises(InputError, match="more than 3 rows") as e:
        read_healthbench(f)
    assert e.value.line == 4
