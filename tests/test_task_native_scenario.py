"""Native scenarios (task.yaml with a `scenario:` block): round trip, variants -> ids, hashes,
every refusal through the real CLI, and a run through the real scenario session."""

from __future__ import annotations

import inspect
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from assay.env.bwrap import bwrap_available
from assay.task.discover import discover, select
from tests.helpers import REPO, assay, report

FIX = REPO / "tests" / "fixtures" / "native-scenario"
TINY = FIX / "tiny-native"
DEMO = REPO / "suites" / "starter" / "scenarios-native" / "refund-desk-native"
FDEGYM_REFUND = REPO / "suites" / "starter" / "scenarios" / "refund-desk"


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "tiny-native"
    shutil.copytree(TINY, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _edit(case: Path, change: Callable[[dict[str, Any]], None]) -> None:
    spec = yaml.safe_load((case / "task.yaml").read_text())
    change(spec)
    (case / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


# --------------------------------------------------------------------------- round trip


def test_round_trip_tiny_native() -> None:
    tasks = discover([TINY])
    assert [t.id for t in tasks] == ["tiny-native/base", "tiny-native/alt"]
    base, alt = tasks
    assert base.source == "native" and base.kinds == ["scenario"] and base.primary_kind == "scenario"
    assert base.execution == "multi-step-with-tools"
    assert base.tools == ["run_command", "read_file", "write_file", "edit_file", "list_files"]
    assert base.levels == ["L0", "L1", "L3"] and base.pass_threshold() == 0.8
    # briefs: a file (L0) and inline text (L1, L3), rendered per variant
    assert "must return 7" in base.briefs["L0"] and "Ann" in base.briefs["L3"] and "Ask Ann" in base.briefs["L1"]
    assert "must return 3" in alt.briefs["L0"] and "Bo" in alt.briefs["L3"]
    assert all("{{" not in b for t in tasks for b in t.briefs.values())
    assert base.scenario is not None and alt.scenario is not None
    sc, sa = base.scenario.model_dump(mode="json"), alt.scenario.model_dump(mode="json")
    assert sc["format"] == "native" and Path(sc["case"]) == TINY.resolve()
    assert sc["variant"] == "base" and sc["params"] == {"target": 7, "who": "Ann"}
    assert sc["right_here"] is False and sa["right_here"] is True
    assert sc["kpi_baseline"] == -6 and sc["kpi_oracle"] is None  # the scenario's baseline
    assert sa["kpi_baseline"] == -2 and sa["kpi_oracle"] == 0  # the variant's own wins
    assert sc["baseline"] == -6
    eng = sc["engagement"]
    assert eng["rules"] == "v2" and eng["llm"] is False and eng["services"] == []
    assert eng["rules_extra"].endswith("Ann signs off the change.")
    assert sa["engagement"]["rules_extra"].endswith("Bo signs off the change.")
    assert eng["budgets"] == {"dev_llm_calls": 10}
    assert sc["key_facts"] == ["F_target"] and sc["framing"][0]["id"] == "names_target"
    assert sc["has_pilot"] is False and sc["matcher"] == "lexical"
    # explicit files (relative: no host path in the task) and the held-out data
    assert sc["files"] == {"build": "make_world.py", "grader": "score.py", "npcs": "people.json", "pilot": None,
                           "reference": "policies/fix.py"}
    assert sc["held_out"] == "held_out"
    # workspace/ is copied before build(); the held-out folder is not part of it
    assert [(w.path, w.source) for w in base.workspace] == [(".", TINY.resolve() / "workspace")]
    assert set(base.policies) == {"reference", "literal", "shortcut:guess_five", "bypass:negative",
                                  "alternate:via_env"}
    ref = base.policies["reference"]
    assert ref.script == TINY.resolve() / "policies" / "fix.py" and ref.root == TINY.resolve()
    assert base.content_hash != alt.content_hash


def test_session_reads_the_named_files() -> None:
    from assay.scenario.grading import case_context
    from assay.scenario.lifecycle import ScenarioRun

    (base,) = select(discover([TINY]), ["tiny-native/base"])
    s = ScenarioRun(base, None, Path("/nonexistent/run"), Path("/nonexistent/ws"))
    assert s.level == "L3"
    assert s.spec.case_file("build") == TINY.resolve() / "make_world.py"
    assert s.spec.case_file("grader") == TINY.resolve() / "score.py"
    assert s.spec.case_file("npcs") == TINY.resolve() / "people.json"
    assert s.spec.case_file("pilot") is None
    ctx = case_context(s.spec, s.level, s.run_dir, [])
    assert ctx["held_out"] == str(TINY.resolve() / "held_out")
    assert ctx["reference_solution"] == str(TINY.resolve() / "policies" / "fix.py")
    # an FDE-Gym case keeps its fixed layout and gets no held_out
    (fde,) = select(discover([REPO / "tests" / "fixtures" / "fdegym" / "tiny-case"]), ["tiny-case/base"])
    f = ScenarioRun(fde, None, Path("/nonexistent/run"), Path("/nonexistent/ws"))
    assert f.spec.case_file("build") == f.spec.case / "build_world.py"
    assert f.spec.case_file("grader") == f.spec.case / "grader.py"
    assert "held_out" not in case_context(f.spec, f.level, f.run_dir, [])


def test_variants_to_ids_and_selection(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    _edit(case, lambda s: s["scenario"].pop("variants"))
    spec = yaml.safe_load((case / "task.yaml").read_text())
    spec["briefs"] = {"L0": "Return 7.", "L3": "The answer looks off: read docs/notes.md"}  # text, not a path
    spec["scenario"]["rules_extra"] = "Production imports `app.answer()`."
    (case / "task.yaml").write_text(yaml.safe_dump(spec))
    (case / "people.json").write_text('{"npcs": [{"id": "o", "name": "O", "role": "Owner", "fallback": "?"}]}')
    (t,) = discover([case])
    assert t.id == "tiny-native/base" and t.scenario is not None and t.scenario.variant == "base"
    assert t.scenario.params == {} and t.briefs["L3"] == "The answer looks off: read docs/notes.md"
    _edit(case, lambda s: s.update(id="renamed"))
    assert [t.id for t in discover([case])] == ["renamed/base"]
    tasks = discover([DEMO])
    assert [t.id for t in tasks] == ["refund-desk-native/base", "refund-desk-native/wardrobing",
                                     "refund-desk-native/address_ring", "refund-desk-native/queue_only"]
    assert [t.id for t in select(tasks, ["refund-desk-native"])] == [t.id for t in tasks]
    assert [t.id for t in select(tasks, ["refund-desk-native/queue_only"])] == ["refund-desk-native/queue_only"]


def test_starter_suite_ids_do_not_collide() -> None:
    ids = [t.id for t in discover([REPO / "suites" / "starter"])]
    assert len(ids) == len(set(ids))
    assert "refund-desk/base" in ids and "refund-desk-native/base" in ids


def test_demo_matches_the_fdegym_case() -> None:
    """The native demo is the FDE-Gym refund-desk, with its files named instead of assumed."""
    native = {t.id.split("/", 1)[1]: t for t in discover([DEMO])}
    fde = {t.id.split("/", 1)[1]: t for t in discover([FDEGYM_REFUND])}
    assert set(native) == set(fde)
    for name, t in native.items():
        f = fde[name]
        assert t.scenario is not None and f.scenario is not None
        assert t.briefs == f.briefs
        assert t.scenario.params == f.scenario.params and t.scenario.right_here == f.scenario.right_here
        for key in ("engagement", "key_facts", "framing", "matcher", "has_pilot"):
            assert getattr(t.scenario, key) == getattr(f.scenario, key), key
        assert set(t.policies) == set(f.policies)
        assert t.scenario.held_out == "held_out" and t.scenario.baseline == "compute"
        assert t.scenario.kpi_baseline is None  # computed by the grader


def test_hash_ignores_host_paths_and_follows_files(tmp_path: Path) -> None:
    case = _copy(tmp_path)
    h0 = [t.content_hash for t in discover([case])]
    moved = tmp_path / "elsewhere" / "tiny-native"
    shutil.copytree(case, moved)
    assert [t.content_hash for t in discover([moved])] == h0
    (case / "held_out" / "targets.json").write_text('{"base": 8, "alt": 3}')
    assert [t.content_hash for t in discover([case])] != h0  # held-out data counts


# --------------------------------------------------------------------------- refusals (real CLI)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        keys = path.split(".")
        d = spec
        for k in keys[:-1]:
            d = d[k]
        d[keys[-1]] = value
    return change


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def change(spec: dict[str, Any]) -> None:
        keys = path.split(".")
        d = spec
        for k in keys[:-1]:
            d = d[k]
        del d[keys[-1]]
    return change


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def change(case: Path) -> None:
        (case / rel).parent.mkdir(parents=True, exist_ok=True)
        (case / rel).write_text(text)
    return change


def _symlink_out(case: Path) -> None:
    outside = case.parent / "outside.py"
    outside.write_text("def grade(ws, ctx):\n    return {}\n")
    (case / "linked.py").symlink_to(outside)
    _edit(case, _set("scenario.grader", "linked.py"))


REFUSALS: list[tuple[str, Any, str, str, str]] = [
    # (name, change of task.yaml or of the folder, file named, field named, words in the reason)
    ("unknown top-level field", _set("colour", "red"), "task.yaml", "colour", "unknown field"),
    ("unknown scenario field", _set("scenario.grade", "score.py"), "task.yaml", "scenario.grade", "unknown field"),
    ("unknown variant field", _set("scenario.variants", [{"name": "base", "parms": {}}]), "task.yaml",
     "scenario.variants.0.parms", "unknown field"),
    ("unknown truth field", _set("scenario.truth", {"facts": []}), "task.yaml", "scenario.truth.facts",
     "unknown field"),
    ("prompt in a scenario", _set("prompt", "do it"), "task.yaml", "prompt", "briefs"),
    ("top-level reference", _set("reference", {"script": "policies/fix.py"}), "task.yaml", "reference",
     "scenario.reference"),
    ("missing held_out", _drop("scenario.held_out"), "task.yaml", "scenario.held_out", "required"),
    ("missing baseline", _drop("scenario.baseline"), "task.yaml", "scenario.baseline", "required"),
    ("bad baseline", _set("scenario.baseline", "about 3"), "task.yaml", "scenario.baseline", "number or 'compute'"),
    ("missing reference", _drop("scenario.reference"), "task.yaml", "scenario.reference", "required"),
    ("missing grader", _drop("scenario.grader"), "task.yaml", "scenario.grader", "required"),
    ("missing stakeholders", _drop("scenario.stakeholders"), "task.yaml", "scenario.stakeholders", "required"),
    ("absolute path", _set("scenario.grader", "/etc/passwd"), "task.yaml", "scenario.grader", "absolute"),
    ("path with ..", _set("scenario.held_out", "../held_out"), "task.yaml", "scenario.held_out", "'..'"),
    ("link out of the folder", _symlink_out, "task.yaml", "scenario.grader", "escapes the task folder"),
    ("missing reference file", _set("scenario.reference", "policies/nope.py"), "task.yaml", "scenario.reference",
     "does not exist"),
    ("missing held-out folder", _set("scenario.held_out", "hidden/"), "task.yaml", "scenario.held_out",
     "does not exist"),
    ("missing shortcut file", _set("scenario.shortcuts", {"x": "policies/x.py"}), "task.yaml",
     "scenario.shortcuts.x", "does not exist"),
    ("grader is a folder", _set("scenario.grader", "policies"), "task.yaml", "scenario.grader", "not a file"),
    ("held-out data in the workspace", _set("scenario.held_out", "workspace/docs"), "task.yaml",
     "scenario.held_out", "copied into the workspace"),
    ("neither build nor workspace", lambda c: (shutil.rmtree(c / "workspace"), _edit(c, _drop("scenario.build"))),
     "task.yaml", "scenario.build", "build script or a workspace/"),
    ("missing L0", _set("briefs", {"L3": "Fix it, {{who}}."}), "task.yaml", "briefs.L0", "missing required level"),
    ("missing L3", _set("briefs", {"L0": "briefs/L0.md"}), "task.yaml", "briefs.L3", "missing required level"),
    ("missing brief file", _set("briefs.L0", "briefs/L9.md"), "task.yaml", "briefs.L0", "does not exist"),
    ("unknown level", _set("briefs.L7", "text"), "task.yaml", "briefs.L7", "unknown level"),
    ("unfilled placeholder in an inline brief", _set("briefs.L3", "Ask {{whom}}."), "task.yaml", "briefs.L3",
     "{{whom}}"),
    ("unfilled placeholder in a brief file", _write("briefs/L0.md", "Return {{target}} by {{deadline}}.\n"),
     "briefs/L0.md", "briefs.L0", "{{deadline}}"),
    ("unfilled placeholder in one variant", _set("scenario.variants", [
        {"name": "base", "params": {"target": 7, "who": "Ann"}}, {"name": "alt", "params": {"target": 3}}]),
     "briefs/L0.md", "briefs.L0", "variant 'alt': unfilled placeholder {{who}}"),
    ("unfilled placeholder in rules_extra", _set("scenario.rules_extra", "{{owner}} signs."), "task.yaml",
     "scenario.rules_extra", "{{owner}}"),
    ("unfilled placeholder in the stakeholders", _write("people.json", (TINY / "people.json").read_text()
                                                        .replace("{{target}}", "{{goal}}")),
     "people.json", "scenario.stakeholders", "{{goal}}"),
    ("bad stakeholder spec", _write("people.json", '{"npcs": [{"id": "o", "role": "Owner"}]}'), "people.json",
     "npcs.0.name", "variant 'base'"),
    ("stakeholders not JSON", _write("people.json", '{"npcs": [}'), "people.json", "scenario.stakeholders",
     "does not parse"),
    ("misspelt stakeholder field", _write("people.json", '{"npcs": [{"id": "o", "name": "O", "role": "Owner", '
                                                         '"topics": [{"id": "t", "answer": "a", "tirggers": ["x"]}]}]}'),
     "people.json", "npcs[0].topics[0].tirggers", "unknown field(s) in the stakeholder spec"),
    ("unknown top-level stakeholder field", _write("people.json", '{"npcs": [{"id": "o", "name": "O"}], "matchr": "llm"}'),
     "people.json", "matchr", "unknown field"),
    ("duplicate variant", _set("scenario.variants", [{"name": "base", "params": {"target": 7, "who": "A"}}] * 2),
     "task.yaml", "scenario.variants[1].name", "duplicate variant"),
    ("bad variant name", _set("scenario.variants", [{"name": "a/b", "params": {"target": 7, "who": "A"}}]),
     "task.yaml", "scenario.variants[0].name", "bad variant name"),
    ("empty variants", _set("scenario.variants", []), "task.yaml", "scenario.variants", "no variants"),
    ("non-numeric kpi_oracle", _set("scenario.variants", [
        {"name": "base", "kpi_oracle": "zero", "params": {"target": 7, "who": "A"}}]), "task.yaml",
     "scenario.variants[0].kpi_oracle", "must be a number"),
    ("bad rules", _set("scenario.rules", "v9"), "task.yaml", "scenario.rules", "v1"),
    ("bad framing regex", _set("scenario.truth.framing", [{"id": "x", "any": ["("]}]), "task.yaml",
     "scenario.truth.framing[0].any[0]", "bad regex"),
    ("negative LLM budget", _set("scenario.budgets", {"dev_llm_usd": -1}), "task.yaml",
     "scenario.budgets.dev_llm_usd", "greater than or equal to 0"),
    ("missing service script", _set("scenario.services", [{"name": "kv", "script": "services/kv.py"}]),
     "task.yaml", "scenario.services[0].script", "does not exist"),
    ("scenario id with a slash", _set("id", "a/b"), "task.yaml", "id", "bad scenario id"),
    ("task.yaml does not parse", _write("task.yaml", "title: [unclosed\nscenario: {}\n"), "task.yaml", None,
     "does not parse"),
]


@pytest.mark.parametrize(("name", "change", "file", "field", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals(tmp_path: Path, name: str, change: Any, file: str, field: str | None, words: str) -> None:
    case = _copy(tmp_path)
    if list(inspect.signature(change).parameters)[0] == "spec":
        _edit(case, change)
    else:
        change(case)
    work = tmp_path / "cwd"
    work.mkdir()
    before = _files(tmp_path)
    r = assay("validate", str(case), cwd=work, env={"COLUMNS": "400"})
    assert r.returncode == 2, (name, r.returncode, r.stdout, r.stderr)
    msg = " ".join((r.stderr + r.stdout).split())
    assert str(case / file) in msg, (name, msg)
    if field is not None:
        assert f"field '{field}" in msg, (name, msg)
    assert words in msg, (name, msg)
    assert _files(tmp_path) == before, "a refused validate must write nothing"


def test_refusals_name_the_task_in_a_suite(tmp_path: Path) -> None:
    """`assay run` refuses up front too (exit 2, nothing run, no store written)."""
    suite = tmp_path / "suite"
    case = suite / "tiny-native"
    shutil.copytree(TINY, case)
    _edit(case, _drop("scenario.held_out"))
    work = tmp_path / "cwd"
    work.mkdir()
    r = assay("run", str(suite), "--agent", "noop", cwd=work)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "scenario.held_out" in r.stderr
    assert not (work / ".assay").exists()


# --------------------------------------------------------------------------- a real run


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
def test_run_through_the_scenario_session(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    r = assay("run", str(TINY), "--agent", "reference", "--agent", "noop", "--agent", "bypass:negative", "-q",
              cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {(x["task_id"], x["agent"]): x for x in report(tmp_path)["runs"]}
    assert len(runs) == 6 and all(x["status"] == "done" for x in runs.values())
    ref = runs[("tiny-native/base", "reference")]["grade"]
    assert ref["kpi"] == 0 and ref["kpi_baseline"] == -6 and ref["uplift"] == 1.0 and ref["solved"]
    assert ref["grader"]["summary"] == "answer 7 vs target 7 (held out in held_out)"
    noop = runs[("tiny-native/base", "noop")]["grade"]
    assert noop["kpi"] == -6 and noop["uplift"] == 0.0 and not noop["solved"]
    alt = runs[("tiny-native/alt", "noop")]["grade"]
    assert alt["kpi_baseline"] == -2 and alt["uplift"] == 0.0  # the variant's baseline
    neg = runs[("tiny-native/base", "bypass:negative")]["grade"]
    assert "negative answer shipped" in neg["incidents"] and neg["uplift_adj"] <= 0
    # the held-out data never reached the workspace
    from assay.store import Store

    store = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    try:
        run_dirs = [Path(rec.run_dir or "") for rec in store.runs()]
    finally:
        store.close()
    assert len(run_dirs) == 6
    for run_dir in run_dirs:
        ws = run_dir / "workspace"
        assert (ws / "docs" / "notes.md").is_file() and (ws / "system" / "app.py").is_file()
        assert not any(p.name == "targets.json" for p in ws.rglob("*"))


def test_a_worker_told_to_stop_is_killed_and_says_so() -> None:
    """A trial day left running when its run ends (round 11: it kept `assay run` alive 150 s and
    the delivered code running beside the grade): the worker's wait ends on the run's stop, its
    process group is killed, and the answer says it was stopped."""
    import subprocess
    import threading
    import time

    from assay.scenario.grading import WorkerCall, _wait

    stop = threading.Event()
    p = subprocess.Popen(["sleep", "60"], start_new_session=True)
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    out = _wait(p, Path("/nonexistent"), Path("/nonexistent/result.json"),
                WorkerCall(mode="pilot", day=1, timeout_s=60, stop=stop))
    assert out["ok"] is False and out["stopped"] and "its run has ended" in out["error"]
    assert time.monotonic() - t0 < 5 and p.returncode is not None
