"""The FDE-Gym case-folder reader: ids, levels, placeholders, overrides, policies, hashes, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from assay.errors import InputError
from assay.grade.kpi import probe_flags
from assay.scenario.rules import rules_text
from assay.task.discover import discover
from assay.task.formats.fdegym import read_case
from tests.helpers import REPO, assay

FIX = REPO / "tests" / "fixtures" / "fdegym"
TINY = FIX / "tiny-case"
BAD = REPO / "tests" / "fixtures" / "bad" / "fdegym"


def _copy(tmp_path: Path, name: str = "tiny-case") -> Path:
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def test_round_trip_tiny_case() -> None:
    tasks = read_case(TINY)
    assert [t.id for t in tasks] == ["tiny-case/base", "tiny-case/alt"]
    base, alt = tasks
    assert base.levels == ["L0", "L1", "L3"]  # L2 is optional
    assert base.source == "fdegym" and base.execution == "multi-step-with-tools"
    assert base.tools == ["run_command", "read_file", "write_file", "edit_file", "list_files"]
    assert base.kinds == ["scenario"] and base.primary_kind == "scenario"
    # briefs rendered per variant
    assert "must return 7" in base.briefs["L0"] and "Ann" in base.briefs["L3"]
    assert "must return 3" in alt.briefs["L0"] and "Bo" in alt.briefs["L3"]
    assert all("{{" not in b for t in tasks for b in t.briefs.values())
    assert base.scenario is not None and alt.scenario is not None
    sc, sa = base.scenario.model_dump(mode="json"), alt.scenario.model_dump(mode="json")
    assert sc["variant"] == "base" and sc["params"]["target"] == 7
    assert sc["right_here"] is False and sa["right_here"] is True
    assert sc["kpi_baseline"] is None and sc["kpi_oracle"] is None
    assert sa["kpi_baseline"] == -4 and sa["kpi_oracle"] == 0
    eng = sc["engagement"]
    assert eng["rules"] == "v2" and eng["llm"] is False
    assert eng["rules_extra"].endswith("Ann signs off the change.")
    assert sa["engagement"]["rules_extra"].endswith("Bo signs off the change.")
    assert eng["services"] == [{"name": "kv", "script": "services/kv.py"}]
    assert eng["budgets"] == {"dev_llm_calls": 300, "dev_llm_usd": 0.25, "prod_llm_calls": 600, "prod_llm_usd": 0.3}
    assert sc["key_facts"] == ["F_target", "F_hello"]
    assert sc["framing"][0]["id"] == "names_target"
    assert sc["has_pilot"] is True and sc["matcher"] == "llm"
    assert Path(sc["case"]) == TINY.resolve()
    assert set(base.policies) == {"reference", "literal", "shortcut:guess_five", "bypass:negative",
                                  "alternate:via_env", "probe:memorised"}  # never do_nothing
    ref = base.policies["reference"]
    assert ref.script == TINY.resolve() / "solutions" / "oracle.py" and ref.root == TINY.resolve()
    assert base.content_hash != alt.content_hash


def test_one_argument_case_without_variants() -> None:
    (t,) = read_case(FIX / "tiny-onearg")
    assert t.id == "tiny-onearg/base"
    assert t.scenario is not None and t.scenario.variant == "base" and t.scenario.params == {}
    assert t.scenario.engagement.rules == "v1" and t.scenario.has_pilot is False
    assert set(t.policies) == {"reference"}
    assert t.levels == ["L0", "L3"]


def test_discover_finds_cases_by_engagement_json() -> None:
    ids = [t.id for t in discover([FIX])]
    assert ids == ["llm-case/base", "tiny-case/base", "tiny-case/alt", "tiny-onearg/base"]


@pytest.mark.parametrize("form", ["list", "mapping"])
def test_variant_file_forms(tmp_path: Path, form: str) -> None:
    case = _copy(tmp_path)
    raw = json.loads((case / "variants.json").read_text())["variants"]
    data = raw if form == "list" else {v["name"]: v["params"] for v in raw}
    (case / "variants.json").write_text(json.dumps(data))
    tasks = read_case(case)
    assert [t.id for t in tasks] == ["tiny-case/base", "tiny-case/alt"]
    assert tasks[1].briefs["L0"].count("3") >= 1


def test_hash_covers_every_case_file(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    h0 = [t.content_hash for t in read_case(case)]
    moved = _copy(tmp_path / "elsewhere")
    assert [t.content_hash for t in read_case(moved)] == h0  # host paths do not matter
    (case / "__pycache__").mkdir()
    (case / "__pycache__" / "grader.cpython-311.pyc").write_bytes(b"x")
    assert [t.content_hash for t in read_case(case)] == h0  # bytecode caches do not count
    seen = {tuple(h0)}
    for rel in ("grader.py", "world/system/app.py", "solutions/guess_five.py", "truth.json", "pilot.py",
                "services/kv.py"):
        p = case / rel
        p.write_text(p.read_text() + ("\n" if rel.endswith(".json") else "\n# changed\n"))
        h = tuple(t.content_hash for t in read_case(case))
        assert h not in seen, rel
        seen.add(h)
    (case / "world" / "new.md").write_text("new file")
    assert tuple(t.content_hash for t in read_case(case)) not in seen


def test_rules_versions() -> None:
    v1, v2, v3 = rules_text("v1"), rules_text("v2"), rules_text("v3")
    assert rules_text(None) == v1 and rules_text("weird") == v1
    assert "cost" in v1 and "must\n  not be contacted" in v1 and "system/README.md" not in v1
    assert "system/README.md" in v2 and "import root" in v2 and "cost" in v2
    assert "system/README.md" in v3 and "import root" in v3
    for word in ("cost", "billed", "price", "contacted", "off limits", "score"):
        assert word not in v3.lower(), word


# --------------------------------------------------------------------------- refusals


def test_unfilled_placeholder_refused_by_validate(tmp_path: Path) -> None:
    r = assay("validate", str(BAD / "unfilled"), cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    msg = r.stdout + r.stderr
    assert "L3.md" in msg and "base" in msg and "{{owner}}" in msg and "Traceback" not in msg
    assert not (tmp_path / ".assay").exists()


@pytest.mark.parametrize("missing", ["engagement.json", "npcs.json", "build_world.py", "grader.py"])
def test_required_files(tmp_path: Path, missing: str) -> None:
    case = _copy(tmp_path)
    (case / missing).unlink()
    if missing == "engagement.json":  # without it the folder is no case at all
        with pytest.raises(InputError, match="no tasks found"):
            discover([case])
        return
    with pytest.raises(InputError, match=missing.replace(".", r"\.")):
        read_case(case)


def test_missing_l3_brief(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    (case / "briefs" / "L3.md").unlink()
    with pytest.raises(InputError, match="L3"):
        read_case(case)


def test_unfilled_placeholder_in_npcs_and_rules_extra(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    npcs = json.loads((case / "npcs.json").read_text())
    npcs["npcs"][0]["fallback"] = "ask {{nobody}}"
    (case / "npcs.json").write_text(json.dumps(npcs))
    with pytest.raises(InputError) as e:
        read_case(case)
    assert "npcs.json" in e.value.message and "nobody" in e.value.message and "base" in e.value.message
    case2 = _copy(tmp_path / "b")
    eng = json.loads((case2 / "engagement.json").read_text())
    eng["rules_extra"] = "{{ghost}} approves"
    (case2 / "engagement.json").write_text(json.dumps(eng))
    with pytest.raises(InputError, match="ghost"):
        read_case(case2)


@pytest.mark.parametrize("content,field", [
    ('{"variants": [{"params": {}}]}', "name"),
    ('{"variants": [{"name": "a", "params": []}]}', "params"),
    ('{"variants": [{"name": "a", "params": {}, "kpi_oracle": "high"}]}', "kpi_oracle"),
    ('{"variants": [{"name": "a"}, {"name": "a"}]}', "duplicate"),
    ('{"variants": [{"name": "a", "params": {"target": 1}}', "parse"),
])
def test_bad_variants(tmp_path: Path, content: str, field: str) -> None:
    case = _copy(tmp_path)
    (case / "variants.json").write_text(content)
    with pytest.raises(InputError, match=field):
        read_case(case)


def test_bad_npcs_refused(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    npcs = json.loads((case / "npcs.json").read_text())
    npcs["npcs"].append(dict(npcs["npcs"][0]))  # duplicate person id
    (case / "npcs.json").write_text(json.dumps(npcs))
    with pytest.raises(InputError, match="twice"):
        read_case(case)


def test_bad_service_refused(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    eng = json.loads((case / "engagement.json").read_text())
    eng["services"] = [{"name": "kv", "script": "services/missing.py"}]
    (case / "engagement.json").write_text(json.dumps(eng))
    with pytest.raises(InputError, match="services"):
        read_case(case)


def test_probe_flags() -> None:
    flags = probe_flags(["ls docs", "cat /proc/1/environ", "env", "ls -la /run/assay",
                         "find / -name ask.ledger.json", "cat /srv/case/grader.py", "python3 bin/ask mei hi",
                         "printenv | grep X"], ["/srv/case"])
    rules = {(f["command"], f["rule"]) for f in flags}
    assert ("cat /proc/1/environ", "proc") in rules
    assert ("env", "env_dump") in rules and ("printenv | grep X", "env_dump") in rules
    assert ("ls -la /run/assay", "harness_mount") in rules
    assert ("find / -name ask.ledger.json", "ledger") in rules
    assert ("cat /srv/case/grader.py", "case_files") in rules
    assert not any(c in ("ls docs", "python3 bin/ask mei hi") for c, _ in rules)
