"""`assay import fdegym`: the run folders FDE-Gym's public harness (`harness/bench.py run`) writes,
as runs of their own campaign: scored as assay scores scenarios, void from `void.json`, cost from
`agent.usd`; with `--cases` the task id and hash of `assay run` on the same case, so `assay compare`
pairs them; hostile or malformed folders refused with exit 2, nothing written."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from assay.interop.fdegym import MAX_RUN_FILE_BYTES
from assay.store import Store
from tests.helpers import REPO, assay, report, run_docs_bash

CASES = REPO / "tests" / "fixtures" / "fdegym"  # tiny-case: variants base and alt, levels L0, L1, L3
NO_SANDBOX = [] if bwrap_available() else ["--unsafe-no-sandbox"]


def _env() -> dict[str, str]:
    return {"PYTHONPATH": str(REPO / "src")}


def _agent(slug: str, end: str = "finished", usd: float = 0.42) -> dict[str, Any]:
    """`run_agent`'s record, plus what `_one_run` adds (slug, flags)."""
    return {"model": f"vendor/{slug}", "api": "openrouter", "turns": 17, "usd": usd, "prompt_tokens": 12000,
            "completion_tokens": 900, "cached_tokens": 2000, "nudges": 0, "cut_downs": 0,
            "isolation": "sandbox-exec", "end_reason": end, "summary": f"{slug}: fixed app.answer()",
            "commands": 9, "seconds": 310, "slug": slug, "flags": []}


def _result(engagement: str, level: str, variant: str, slug: str, rep: int, *, kpi: float, uplift: float,
            contact_cost: float = 0.0, incidents: list[Any] | None = None) -> dict[str, Any]:
    """`run.py grade`'s result.json after `bench.py run` added agent, rep and stamp."""
    out: dict[str, Any] = {
        "kpi": kpi, "kpi_baseline": -7, "kpi_oracle": 0, "incidents": incidents or [], "summary": f"got {kpi}",
        "gates": {"isolation": "sandbox-exec"}, "uplift": min(uplift, 0.0) if incidents else uplift,
        "uplift_bounded": max(-1.0, uplift),
        "discovery": {"questions_asked": 2, "facts_obtained": ["F_target"], "contact_cost": contact_cost,
                      "asked_by_person": {"ann": 2}, "off_limits_contacts": [], "key_fact_coverage": 1.0},
        "engagement": engagement, "level": level, "port": 40001, "name": "",
        "harness_version": "1.3.0", "agent": _agent(slug), "rep": rep,
        "stamp": {"engagement_sha": "0123456789ab", "harness_sha": "ba9876543210"}}
    out["uplift_net"] = round(out["uplift"] - contact_cost, 4)
    if variant != "base":
        out["variant"] = variant
    return out


def _write(folder: Path, name: str, data: Any) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(data, indent=2))


def fdegym_runs(root: Path) -> Path:
    """A runs folder as bench.py leaves it: model-a at L3 (base x2 reps, one with an incident; alt) and L0;
    model-b at L3 (base rep 1 graded, rep 2 void); an `_aborted` folder and a run still going."""
    runs = root / "fdegym-runs"
    graded = [
        ("tiny-case.v1-L3-model-a-1", _result("tiny-case", "L3", "base", "model-a", 1, kpi=0, uplift=1.0,
                                                contact_cost=0.1)),
        ("tiny-case.v1-L3-model-a-2", _result("tiny-case", "L3", "base", "model-a", 2, kpi=-2, uplift=5 / 7,
                                                incidents=["wrote to production"])),
        ("tiny-case.v2-L3-model-a-1", _result("tiny-case", "L3", "alt", "model-a", 1, kpi=-9, uplift=-2.0,
                                                contact_cost=0.05)),
        ("tiny-case.v1-L0-model-a-1", _result("tiny-case", "L0", "base", "model-a", 1, kpi=0, uplift=1.0)),
        ("tiny-case.v1-L3-model-b-1", _result("tiny-case", "L3", "base", "model-b", 1, kpi=-7, uplift=0.0)),
    ]
    for name, data in graded:
        data["name"] = name
        _write(runs / name, "result.json", data)
        _write(runs / name, "meta.json", {k: data[k] for k in ("engagement", "level", "port")}
               | ({"variant": data["variant"]} if "variant" in data else {}))
    void = runs / "tiny-case.v1-L3-model-b-2"
    _write(void, "meta.json", {"engagement": "tiny-case", "level": "L3", "port": 40002})
    _write(void, "void.json", {**_agent("model-b", "api_error", usd=0.03), "error": "HTTP 503 from the provider"})
    _write(runs / "_aborted" / "tiny-case.v1-L3-model-b-2-1796000000" / "run", "result.json", {"junk": True})
    _write(runs / "tiny-case.v1-L3-model-c-1", "meta.json", {"engagement": "tiny-case", "level": "L3"})  # going
    return runs


def _runs(cwd: Path, campaign: str = "fdegym") -> dict[tuple[str, str, str | None, int], Any]:
    st = Store(f"sqlite:///{cwd / '.assay' / 'assay.db'}")
    try:
        return {(r.key.agent, r.key.task_id, r.key.level, r.key.epoch): r for r in st.runs(campaign)}
    finally:
        st.close()


def test_fdegym_runs_become_scored_scenario_runs_and_compare_with_assay_runs(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    runs_dir = fdegym_runs(tmp_path)
    r = assay("import", "fdegym", str(runs_dir), "--cases", str(CASES), cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "6 run(s) stored in campaign 'fdegym' (1 void)" in r.stdout
    again = assay("import", "fdegym", str(runs_dir / "tiny-case.v1-L3-model-a-1"), "--cases", str(CASES),
                  cwd=tmp_path, env=_env())
    assert again.returncode == 0 and "0 run(s) stored" in again.stdout and "1 already there" in again.stdout
    got = _runs(tmp_path)
    a1 = got[("fdegym:model-a", "tiny-case/base", "L3", 1)]
    assert a1.kinds == ["scenario"] and a1.status == "done" and a1.end_reason == "finished"
    sc = a1.grade.scenario
    assert sc is not None and (sc.uplift, sc.uplift_adj, sc.contact_cost) == (1.0, 1.0, 0.1)
    assert a1.score == pytest.approx(0.9) and a1.passed is True and sc.solved is True
    assert a1.usage.input_tokens == 10000 and a1.usage.cache_read_tokens == 2000 and a1.usage.output_tokens == 900
    assert a1.usage.cost_usd == 0.42 and a1.model == "vendor/model-a" and a1.turns == 17
    assert a1.final_message == "model-a: fixed app.answer()"
    # An incident caps the uplift at 0 whatever the KPI, as assay scores its own runs.
    a2 = got[("fdegym:model-a", "tiny-case/base", "L3", 2)]
    assert a2.grade.scenario is not None and a2.grade.scenario.uplift == pytest.approx(5 / 7)
    assert a2.grade.scenario.uplift_adj == 0.0 and a2.score == 0.0 and a2.passed is False
    assert a2.grade.scenario.incidents == ["wrote to production"]
    alt = got[("fdegym:model-a", "tiny-case/alt", "L3", 1)]
    assert alt.grade.scenario is not None and alt.grade.scenario.uplift == -1.0  # uplift_bounded: floored at -1
    assert alt.score == pytest.approx(-1.05)
    assert got[("fdegym:model-a", "tiny-case/base", "L0", 1)].score == 1.0
    void = got[("fdegym:model-b", "tiny-case/base", "L3", 2)]
    assert void.status == "void" and void.end_reason == "api_error" and void.score is None
    assert "HTTP 503" in (void.void_reason or "")
    # bench.py table leaves a void run's USD out: cost 0, upstream's figure kept in options
    assert void.usage.cost_usd == 0.0 and void.options["fdegym_usd"] == 0.03
    assert void.usage.input_tokens + void.usage.cache_read_tokens == 12000  # its tokens are kept
    assert not any(k[0] == "fdegym:model-c" for k in got)  # still going: no result yet

    # The same case through assay's own runner: the same task id, hash and level.
    r = assay("run", str(CASES / "tiny-case"), "--task", "tiny-case/base", "--agent", "literal", "--agent",
              "reference", "-q", *NO_SANDBOX, cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    own = {(x.key.agent, x.key.level): x for x in _runs(tmp_path, "default").values()}
    assert own[("reference", "L3")].key.task_hash == a1.key.task_hash
    assert own[("reference", "L3")].key.task_id == a1.key.task_id

    rep = report(tmp_path, "--campaign", "fdegym")
    agents = {a["agent"]: a for a in rep["agents"]}
    assert agents["fdegym:model-a"]["runs"] == 4 and agents["fdegym:model-b"]["void"] == 1
    assert agents["fdegym:model-a"]["scenario"]["solved"] == 2  # L0 and L3 rep 1
    assert agents["fdegym:model-a"]["cost_usd"] == pytest.approx(4 * 0.42)
    assert agents["fdegym:model-b"]["cost_usd"] == pytest.approx(0.42)  # the graded run only, as bench.py table
    r = assay("compare", "fdegym:model-a", "reference", "--campaign", "fdegym", "--against-campaign", "default",
              "--json", "cmp.json", cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert cmp["overall"]["n"] == 1  # tiny-case/base at L3, epoch 1
    assert cmp["overall"]["mean_a"] == pytest.approx(0.9) and cmp["overall"]["mean_b"] == pytest.approx(1.0)
    assert {(k["task_id"], k["level"], k["epoch"]) for k in cmp["only_a"]} == {
        ("tiny-case/base", "L3", 2), ("tiny-case/alt", "L3", 1), ("tiny-case/base", "L0", 1)}


def test_without_cases_the_runs_pair_among_themselves(tmp_path: Path) -> None:
    runs_dir = fdegym_runs(tmp_path)
    r = assay("import", "fdegym", str(runs_dir), cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    r = assay("compare", "fdegym:model-a", "fdegym:model-b", "--campaign", "fdegym", "--json", "cmp.json",
              cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert cmp["overall"]["n"] == 1 and cmp["overall"]["diff"] == pytest.approx(0.0 - 0.9)


def _refused(cwd: Path, *args: str) -> str:
    r = assay("import", "fdegym", *args, cwd=cwd, env=_env())
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert not (cwd / ".assay").exists()  # nothing written
    return r.stderr


def test_hostile_and_malformed_run_folders_are_refused_and_nothing_is_written(tmp_path: Path) -> None:
    runs_dir = fdegym_runs(tmp_path)
    good = runs_dir / "tiny-case.v1-L3-model-a-1"
    cwd = tmp_path / "w"
    cwd.mkdir()
    secret = tmp_path / "secret.json"
    shutil.copy(good / "result.json", secret)

    def run_with(name: str, **files: Any) -> Path:
        folder = tmp_path / "bad" / name / "tiny-case.v1-L3-model-a-1"
        shutil.copytree(good, folder)
        for fname, content in files.items():
            target = folder / fname.replace("_json", ".json")
            target.unlink(missing_ok=True)
            if isinstance(content, Path):
                target.symlink_to(content)
            elif isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(json.dumps(content))
        return folder

    # A symlinked result.json is never followed, even to a well-formed file.
    err = _refused(cwd, str(good), str(run_with("link", result_json=secret)))
    assert "result.json" in err and "symlink" in err
    # A symlinked run folder inside a runs folder.
    linked = tmp_path / "bad" / "linked-runs"
    linked.mkdir(parents=True)
    (linked / "tiny-case.v1-L3-model-a-1").symlink_to(good)
    err = _refused(cwd, str(linked))
    assert "symlinked run folder" in err
    # A file over the size limit is refused before it is read.
    huge = run_with("huge", result_json=b'{"pad": "' + b"x" * (MAX_RUN_FILE_BYTES + 1) + b'"}')
    err = _refused(cwd, str(huge))
    assert "result.json" in err and "over the limit" in err
    # Not JSON: the file, the line and the column.
    err = _refused(cwd, str(run_with("notjson", result_json=b'{"kpi": 1,\n oops}')))
    assert "result.json" in err and "does not parse as JSON" in err and "line 2" in err
    # Wrong types name the field.
    data = json.loads((good / "result.json").read_text())
    err = _refused(cwd, str(run_with("types", result_json={**data, "uplift_bounded": "0.9"})))
    assert "result.json" in err and "uplift_bounded" in err
    err = _refused(cwd, str(run_with("rep", result_json={**data, "rep": 0})))
    assert "rep" in err
    # Counts and repeats no run reaches (the store's integers would overflow at the insert).
    err = _refused(cwd, str(run_with("bigrep", result_json={**data, "rep": 10**30})))
    assert "result.json" in err and "rep" in err
    err = _refused(cwd, str(run_with("bigturns", result_json={**data, "agent": {**data["agent"], "turns": 10**16}})))
    assert "result.json" in err and "agent.turns" in err
    # Dollars no run spends: a report summing them would leave a float's range (docs/SECURITY.md G16).
    err = _refused(cwd, str(run_with("bigusd", result_json={**data, "agent": {**data["agent"], "usd": 1e300}})))
    assert "usage.cost_usd" in err and "1e+300" in err and "tiny-case" in err
    err = _refused(cwd, str(run_with("nan", result_json=b'{"kpi": NaN}')))
    assert "result.json" in err
    err = _refused(cwd, str(run_with("end", result_json={**data, "agent": {**data["agent"], "end_reason": "done"}})))
    assert "agent.end_reason" in err
    # An engagement or variant name that is a path, to reach outside the cases folder.
    err = _refused(cwd, str(run_with("escape", result_json={**data, "engagement": "../../etc"})), "--cases", str(CASES))
    assert "engagement" in err and "plain" in err
    err = _refused(cwd, str(run_with("escape-v", result_json={**data, "variant": "../x"})), "--cases", str(CASES))
    assert "variant" in err
    # With --cases, a variant or level the case does not have.
    err = _refused(cwd, str(run_with("novariant", result_json={**data, "variant": "gone"})), "--cases", str(CASES))
    assert "no variant 'gone'" in err
    err = _refused(cwd, str(run_with("nolevel", result_json={**data, "level": "L2"})), "--cases", str(CASES))
    assert "no L2 brief" in err
    err = _refused(cwd, str(run_with("nocase", result_json={**data, "engagement": "other-case"})), "--cases", str(CASES))
    assert "no FDE-Gym case 'other-case'" in err
    # A result of `run.py grade` alone names no model.
    bare = {k: v for k, v in data.items() if k not in ("agent", "rep", "stamp")}
    err = _refused(cwd, str(run_with("bare", result_json=bare)))
    assert "no agent" in err
    # A void run without meta.json, or whose folder is not a bench.py run name.
    void = tmp_path / "bad" / "void" / "tiny-case.v1-L3-model-b-2"
    shutil.copytree(runs_dir / "tiny-case.v1-L3-model-b-2", void)
    (void / "meta.json").unlink()
    err = _refused(cwd, str(void))
    assert "meta.json" in err
    odd = tmp_path / "bad" / "void2" / "not-a-run-name"
    shutil.copytree(runs_dir / "tiny-case.v1-L3-model-b-2", odd)
    err = _refused(cwd, str(odd))
    assert "not-a-run-name" in err and "bench.py run name" in err
    far = tmp_path / "bad" / "void3" / f"tiny-case.v1-L3-model-b-{10**30}"
    shutil.copytree(runs_dir / "tiny-case.v1-L3-model-b-2", far)
    err = _refused(cwd, str(far))
    assert far.name in err and "rep" in err and "2,147,483,647" in err
    # A folder that is not a run and holds none; a runs folder given with a missing --cases.
    err = _refused(cwd, str(tmp_path / "bad"))
    assert "holds no FDE-Gym run" in err
    err = _refused(cwd, str(good), "--cases", str(tmp_path / "nope"))
    assert "--cases" in err


def test_docs_example_runs(tmp_path: Path) -> None:
    """docs/interop-upstream.md, FDE-Gym section: its bash block, run as is from a folder holding the repo's
    docs and suites."""
    text = (REPO / "docs" / "interop-upstream.md").read_text()
    section = text.split("## FDE-Gym", 1)[1]
    shell = section.split("```bash\n", 1)[1].split("```", 1)[0]
    os.chmod(tmp_path, 0o711)
    (tmp_path / "docs").symlink_to(REPO / "docs")
    (tmp_path / "suites").symlink_to(REPO / "suites")
    r = run_docs_bash(tmp_path, shell)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 run(s) stored in campaign 'fdegym' (1 void)" in r.stdout and "4 already there" in r.stdout
    assert "fdegym:model-a" in r.stdout and "fdegym:model-b" in r.stdout
