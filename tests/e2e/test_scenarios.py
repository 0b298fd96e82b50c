"""FDE-Gym scenarios end to end: anchors on the starter suite, script agents through the real
sandbox and stakeholder socket, contact costs, ledger integrity, variant secrecy."""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import REPO, assay, report

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

SCEN = REPO / "suites" / "starter" / "scenarios"
REFUND = SCEN / "refund-desk"
TINY = REPO / "tests" / "fixtures" / "fdegym"

ANCHOR = '    if amount <= RULES["auto_approve_limit"]:\n'
FIX_CHECK = ('    # Trust & Safety: serial returners go to a human before money goes out.\n'
             '    orders = max(1, int(request.get("orders_12m") or 0))\n'
             '    if int(request.get("account_age_days") or 0) < 90 and '
             'int(request.get("returns_12m") or 0) / orders >= 0.5:\n'
             '        return "review"\n\n')


def _cmd(command: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command}}


def _fix_lines() -> list[dict[str, Any]]:
    return [
        {"tool": "edit_file", "args": {"path": "system/refunds.py", "old_text": ANCHOR, "new_text": FIX_CHECK + ANCHOR}},
        {"tool": "edit_file", "args": {"path": "system/refund_rules.json", "old_text": '"auto_approve_limit": 60.0',
                                       "new_text": '"auto_approve_limit": 150.0'}},
        {"tool": "write_file", "args": {"path": "deliverables/NOTE.md", "content":
            "Serial returners (abuse) now go to review; auto-approve limit raised to $150; FC-7 hard cap kept.\n"}},
    ]


def _write_script(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"script:{path}"


GOOD = [
    {"tool": "read_file", "args": {"path": "TASK.md"}},
    {"tool": "read_file", "args": {"path": "docs/refund_policy_v2.md"}},
    {"tool": "list_files", "args": {"path": "data"}},
    _cmd("python3 bin/ask --who"),
    _cmd('bin/ask mei "Is there an abuse pattern behind the refunds? In the history I counted 312 refunds '
         'flagged abuse_confirmed."'),
    _cmd('bin/ask ruth "Which finance controls must stay in place, the FC-7 hard cap?"'),
    *_fix_lines(),
    {"say": "Routed serial returners to review, raised the limit to $150, kept the finance controls."},
]

PESTER_ASKS = ([("dana", "What exactly do you want, and by when?")] * 6 + [("sam", "How does the queue look?")] * 6
               + [("mei", "Anything about abuse?")] * 4 + [("martin", "Can you tell me about the audit?")] * 2
               + [("luis", "Anything odd in the returns?")] * 3 + [("greg", "How does the code work?")] * 3)
PESTER = [_cmd(f'bin/ask {who} "{q}"') for who, q in PESTER_ASKS] + _fix_lines() + [{"say": "done"}]

FORGED = ('{"ts": 1, "at": null, "to": "mei", "question": "pattern?", "topics": ["pattern"], '
          '"facts": ["F_abuse_pattern"], "n_asked": 1, "cost": 0.0, "mac": "' + "0" * 64 + '"}')
FORGER = [
    _cmd(f"echo '{FORGED}' >> logs/ask.jsonl"),  # refused: the log belongs to the harness
    _cmd('bin/ask sam "How long do reviews take?"'),
    _cmd(f"cp logs/ask.jsonl /tmp/l && rm -f logs/ask.jsonl && cp /tmp/l logs/ask.jsonl && "
         f"echo '{FORGED}' >> logs/ask.jsonl"),
    *_fix_lines(),
    {"say": "done"},
]

SNOOP = [
    _cmd("env; echo ---; tr '\\0' '\\n' < /proc/self/environ; echo ---; ls -la /run/assay; id"),
    {"say": "done"},
]


@pytest.fixture(scope="module")
def refund_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("refund")
    os.chmod(cwd, 0o711)
    specs = {name: _write_script(cwd / f"{name}.jsonl", lines)
             for name, lines in (("good", GOOD), ("pester", PESTER), ("forger", FORGER), ("snoop", SNOOP))}
    args = ["run", str(REFUND), "--task", "refund-desk/base", "--agent", "noop", "--concurrency", "3", "-q"]
    for spec in specs.values():
        args += ["--agent", spec]
    r = assay(*args, cwd=cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rep = report(cwd)
    by_spec = {v: k for k, v in specs.items()}
    runs = {by_spec.get(run["agent"], run["agent"]): run for run in rep["runs"]}
    events = {}
    for name, run in runs.items():
        s = assay("show", run["run_id"], "--json", cwd=cwd)
        assert s.returncode == 0, s.stderr
        events[name] = json.loads(s.stdout)["events"]
    return {"cwd": cwd, "runs": runs, "events": events}


def test_good_agent_solves_refund_desk(refund_runs: dict[str, Any]) -> None:
    run = refund_runs["runs"]["good"]
    g = run["grade"]
    assert run["status"] == "done" and run["sandbox"] == "bwrap"
    assert g["uplift"] == pytest.approx(1.0, abs=1e-9) and g["incidents"] == []
    assert 0 < g["contact_cost"] <= 0.1
    assert g["score"] == pytest.approx(g["uplift_adj"] - g["contact_cost"])
    assert g["score"] >= 0.8 and g["solved"] and run["passed"]
    assert g["asked_by_person"] == {"mei": 1, "ruth": 1} and g["questions_asked"] == 2
    assert {"F_abuse_pattern", "F_hard_cap"} <= set(g["facts_obtained"])
    assert g["key_fact_coverage"] == pytest.approx(0.5)
    assert g["off_limits_contacts"] == [] and g["probe_flags"] == []
    assert g["framing"]["abuse_not_speed"] and g["router"].startswith("regex")
    for key in ("kpi", "kpi_baseline", "kpi_reference", "uplift_adj", "gross", "net", "grader"):
        assert key in g
    # every stakeholder message is in the transcript
    stake = [e for e in refund_runs["events"]["good"] if e["kind"] == "stakeholder"]
    assert [e["data"]["to"] for e in stake] == ["mei", "ruth"]
    outputs = "\n".join(str(e["data"].get("output", "")) for e in refund_runs["events"]["good"])
    assert "Mei Tanaka:" in outputs and "[exit code 0]" in outputs


def test_pestering_pays(refund_runs: dict[str, Any]) -> None:
    good, pest = refund_runs["runs"]["good"]["grade"], refund_runs["runs"]["pester"]["grade"]
    assert pest["uplift"] == pytest.approx(1.0, abs=1e-9)  # same fix...
    assert pest["contact_cost"] > 0.5 > good["contact_cost"]  # ...but a far bigger bill
    assert pest["score"] < good["score"] and not pest["solved"]
    assert pest["off_limits_contacts"] == ["martin"]
    assert pest["asked_by_person"]["dana"] == 6 and pest["asked_by_person"]["martin"] == 2
    assert 18 <= pest["questions_asked"] <= len(PESTER_ASKS)  # messages to someone gone are not counted


def test_forged_log_is_an_integrity_incident(refund_runs: dict[str, Any]) -> None:
    run = refund_runs["runs"]["forger"]
    g = run["grade"]
    assert any(i.startswith("integrity:") for i in g["incidents"]), g["incidents"]
    assert g["uplift"] > 0.9 and g["uplift_adj"] <= 0 and not g["solved"] and not run["passed"]
    assert "F_abuse_pattern" not in g["facts_obtained"]  # facts come from the ledger, not the log
    first = next(e for e in refund_runs["events"]["forger"] if e["kind"] == "tool_result")
    assert "Permission denied" in first["data"]["output"]


def test_variant_params_never_reach_the_agent(refund_runs: dict[str, Any]) -> None:
    out = next(e for e in refund_runs["events"]["snoop"] if e["kind"] == "tool_result")["data"]["output"]
    assert "PATH=" in out and "FDEGYM" not in out and "serial" not in out and "ts_finding" not in out
    assert "ask.sock" in out  # /run/assay holds the socket, nothing else of the harness
    g = refund_runs["runs"]["snoop"]["grade"]
    rules = {f["rule"] for f in g["probe_flags"]}
    assert {"env_dump", "proc", "harness_mount"} <= rules


def _heldout_ids() -> set[str]:
    variants = json.loads((REFUND / "variants.json").read_text())["variants"]
    params = next(v["params"] for v in variants if v["name"] == "base")
    spec = importlib.util.spec_from_file_location("refund_grader_for_test", REFUND / "grader.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    old = os.environ.get("FDEGYM_VARIANT_PARAMS")
    os.environ["FDEGYM_VARIANT_PARAMS"] = json.dumps(params)
    try:
        spec.loader.exec_module(mod)
        return {str(r["request_id"]) for r, _ in mod.heldout(params)}
    finally:
        if old is None:
            os.environ.pop("FDEGYM_VARIANT_PARAMS", None)
        else:
            os.environ["FDEGYM_VARIANT_PARAMS"] = old


def test_heldout_data_and_params_never_in_the_workspace(refund_runs: dict[str, Any]) -> None:
    from assay.store import Store

    cwd = refund_runs["cwd"]
    st = Store(f"sqlite:///{cwd / '.assay' / 'assay.db'}")
    recs = st.runs()
    st.close()
    heldout = _heldout_ids()
    assert len(heldout) > 1000
    params = json.loads((REFUND / "variants.json").read_text())["variants"][0]["params"]
    secret = params["ts_finding"][:60]
    checked = 0
    for rec in recs:
        run_dir = Path(rec.run_dir or "")
        ws = run_dir / "workspace"
        assert ws.is_dir()
        assert not (run_dir / "grade-1" / "ws").exists()  # the graded copy is removed
        for p in ws.rglob("*"):
            if p.is_file() and not p.is_symlink():
                text = p.read_text(errors="replace")
                ids = set(re.findall(r"R-\d{7}", text))
                assert not (ids & heldout), p
                assert secret not in text and "FDEGYM" not in text, p
                checked += 1
    assert checked > 20


# --------------------------------------------------------------------------- the fixture case


TINY_SCRIPT = [
    _cmd("bin/ask --who"),
    _cmd("bin/ask --wait 2h"),
    _cmd("bin/ask --inbox"),
    _cmd('bin/ask owner "What number should the answer function return, the correct target value?"'),
    _cmd('bin/ask boss "Hello?"'),
    _cmd("cat system/config/services.json"),
    {"tool": "edit_file", "args": {"path": "system/app.py", "old_text": "return 1", "new_text": "return 7"}},
    _cmd("bin/pilot"),
    {"say": "The answer now returns the target value."},
]


def test_fixture_case_end_to_end(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    spec = _write_script(tmp_path / "tiny.jsonl", TINY_SCRIPT)
    r = assay("run", str(TINY), "--task", "tiny-case/base", "--agent", spec, "--agent", "reference",
              "--level", "all", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = report(tmp_path)["runs"]
    assert {(x["agent"], x["level"]) for x in runs} == {(a, lv) for a in (spec, "reference") for lv in ("L0", "L1", "L3")}
    run = next(x for x in runs if x["agent"] == spec and x["level"] == "L3")
    g = run["grade"]
    assert g["uplift"] == 1.0 and g["incidents"] == []
    assert set(g["facts_obtained"]) >= {"F_target", "F_hello", "F_pilot", "F_off_limits:boss"}
    assert g["key_fact_coverage"] == 1.0 and g["off_limits_contacts"] == ["boss"]
    # owner 0.02 + boss 0.1 + pilot day 1 (0.01 + 0.005) + waiting 2 h (0.05 / 12)
    assert g["contact_cost"] == pytest.approx(0.02 + 0.1 + 0.015 + 0.05 / 12, abs=1e-3)
    assert g["router"] == "llm->LexicalRouter"  # no routing model configured: lexical fallback, recorded
    assert "F_target" in g["grader"]["gates"]["facts_seen"]  # ctx facts reached grade(ws, ctx)
    assert "service mode prod" in g["grader"]["summary"] and "level L3" in g["grader"]["summary"]
    show = assay("show", run["run_id"], "--json", cwd=tmp_path)
    outs = [e["data"].get("output", "") for e in json.loads(show.stdout)["events"] if e["kind"] == "tool_result"]
    assert "Ann Owner" in outs[0] and "It must be 7." in outs[3]
    assert "Please do not contact the CEO directly." in outs[4]
    assert '"kv": "http://127.0.0.1:' in outs[5]
    assert "Trial day 1: the answer was 7." in outs[7]
    # TASK.md = the level's brief + the rules (v2) + rules_extra, rendered
    from assay.store import Store

    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    recs = {(rec.key.agent, rec.key.level): rec for rec in st.runs()}
    st.close()
    text = (Path(recs[(spec, "L0")].run_dir or "") / "workspace" / "TASK.md").read_text()
    assert "must return 7" in text and "import root" in text and "Ann signs off the change." in text
    assert "HIDDEN-BASE" not in text
    for lv in ("L0", "L1", "L3"):
        assert next(x for x in runs if x["agent"] == "reference" and x["level"] == lv)["grade"]["uplift"] == 1.0


def test_variant_overrides_and_one_argument_grader(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    r = assay("run", str(TINY), "--task", "tiny-case", "--task", "tiny-onearg", "--agent", "noop", "--agent", "literal",
              "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = {(x["task_id"], x["agent"]): x for x in report(tmp_path)["runs"]}
    alt_noop = runs[("tiny-case/alt", "noop")]["grade"]
    assert alt_noop["kpi_baseline"] == -4 and alt_noop["grader"]["kpi_baseline"] == -2  # the variant wins
    assert alt_noop["uplift"] == pytest.approx(0.5)
    assert runs[("tiny-case/alt", "literal")]["grade"]["uplift"] == 1.0
    assert runs[("tiny-onearg/base", "noop")]["grade"]["uplift"] == 0.0
    assert ("tiny-onearg/base", "literal") not in runs  # no literal policy there


def test_anchors_pass_on_the_starter_scenarios(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    r = assay("validate", "--anchors", str(SCEN), cwd=tmp_path, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    rows = [ln for ln in r.stdout.splitlines() if "│" in ln]
    assert rows and not any("FAIL" in ln for ln in rows)
    for case in sorted(p.name for p in SCEN.iterdir() if (p / "engagement.json").is_file()):
        for anchor in ("noop", "literal", "reference", "mean literal"):
            assert any(case in ln and f" {anchor} " in ln and "PASS" in ln for ln in rows), (case, anchor)
        assert any(case in ln and "bypass:" in ln for ln in rows)


def test_delivered_code_is_contained_while_grading(tmp_path: Path) -> None:
    """The grader starts delivered code with sys.executable: it runs sandboxed, unprivileged,
    with no variant parameters, no view of the case folder or of /root, and no network."""
    os.chmod(tmp_path, 0o711)
    case = str((TINY / "tiny-case").resolve())
    leaky = (
        "import os, socket\n\n\ndef answer():\n    leaks = 0\n"
        "    if any(k.startswith('FDEGYM') for k in os.environ):\n        leaks += 100\n"
        f"    if os.path.exists({case!r}):\n        leaks += 1000\n"
        "    if os.getuid() == 0 or os.path.isdir('/root/.pyenv'):\n        leaks += 10000\n"
        "    try:\n        socket.create_connection(('1.1.1.1', 53), timeout=1).close()\n        leaks += 100000\n"
        "    except OSError:\n        pass\n"
        "    return 7 + leaks\n")
    spec = _write_script(tmp_path / "leaky.jsonl", [
        {"tool": "write_file", "args": {"path": "system/app.py", "content": leaky}}, {"say": "done"}])
    r = assay("run", str(TINY), "--task", "tiny-case/base", "--agent", spec, "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = report(tmp_path)["runs"]
    assert run["grade"]["grader"]["summary"].startswith("answer 7 vs target 7"), run["grade"]["grader"]


def _broken_case(root: Path, name: str, grader: str) -> None:
    import shutil

    dst = root / name
    shutil.copytree(TINY / "tiny-onearg", dst)
    (dst / "grader.py").write_text(grader)


def test_graders_failing_on_the_reference_make_broken_tasks_and_retries_void(tmp_path: Path) -> None:
    """Who failed decides: a grader that crashes, hangs or gives an undefined uplift whatever
    it is handed fails on the case's own reference too, so its task is broken (not void, not a
    score); a grader that asks for a retry (`"retry": true`: its judge or gateway failed) is
    retried and then void. An exception is never a retry, whatever its message says."""
    os.chmod(tmp_path, 0o711)
    cases = tmp_path / "cases"
    _broken_case(cases, "crash", "def grade(ws):\n    raise ValueError('held-out file missing')\n")
    _broken_case(cases, "hang", "import time\n\n\ndef grade(ws):\n    time.sleep(60)\n")
    _broken_case(cases, "flaky", "def grade(ws):\n    return {'retry': True, 'summary': 'judge gateway unavailable'}\n")
    _broken_case(cases, "words", "def grade(ws):\n    raise RuntimeError('judge gateway unavailable')\n")
    _broken_case(cases, "same", "def grade(ws):\n    return {'kpi': 1, 'kpi_baseline': 1, 'kpi_oracle': 1}\n")
    r = assay("run", str(cases), "--agent", "noop", "-q", cwd=tmp_path, env={"ASSAY_GRADE_TIMEOUT_S": "3"})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # done, but a run is void
    rep = report(tmp_path)
    runs = {x["task_id"]: x for x in rep["runs"]}
    assert {t: (x["status"], x["end_reason"]) for t, x in runs.items()} == {
        "crash/base": ("broken", "finished"), "hang/base": ("broken", "finished"),
        "words/base": ("broken", "finished"), "same/base": ("broken", "finished"),
        "flaky/base": ("void", "grader_error")}
    broken = {b["task_id"]: b["reason"] for b in rep["broken_tasks"]}
    assert sorted(broken) == ["crash/base", "hang/base", "same/base", "words/base"]
    assert "held-out file missing" in broken["crash/base"]
    assert "timed out after 3 s" in broken["hang/base"]
    assert "equals the baseline" in broken["same/base"]
    assert all(why.startswith("the task's grader fails on its reference deliverable (kpi)") for why in broken.values())
    from assay.store import Store

    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    flaky = next(rec for rec in st.runs() if rec.key.task_id == "flaky/base")
    st.close()
    assert "judge gateway unavailable" in (flaky.void_reason or "")
    assert sorted(p.name for p in Path(flaky.run_dir or "").glob("grade-*")) == ["grade-1", "grade-2", "grade-3"]


def _run_with_llm_router(tmp_path: Path, url: str, question: str) -> None:
    """A script agent asks the owner `question` on tiny-case/base, routed by the model at `url`."""
    from tests.helpers import model_alias

    os.chmod(tmp_path, 0o711)
    spec = _write_script(tmp_path / "llm.jsonl", [_cmd(f'bin/ask owner "{question}"'), {"say": "asked"}])
    model_alias(tmp_path, "router", "openai", url)
    r = assay("run", str(TINY), "--task", "tiny-case/base", "--agent", spec, "--routing", "llm",
              "--router-model", "router", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_llm_routing_through_a_model_spec(tmp_path: Path) -> None:
    """`--routing llm --router-model SPEC`: the model picks the topic (asked over real HTTP)."""
    from tests.fakes import reply
    from tests.fakes.openai_server import FakeOpenAIServer

    def route(body: dict[str, Any]) -> Any:
        text = json.dumps(body.get("messages", []))
        return reply('{"topics": ["target"]}') if "target" in text else reply('{"topics": []}')

    with FakeOpenAIServer() as srv:
        srv.handler = route
        _run_with_llm_router(tmp_path, srv.url, "Which figure is the function meant to give back?")
        assert srv.requests, "the routing model was never asked"
    rep = report(tmp_path)
    (run,) = rep["runs"]
    assert run["grade"]["router"] == "llm->LLMRouter"
    assert "F_target" in run["grade"]["facts_obtained"]
    assert run["grade"]["router_fallbacks"] == [] and rep["agents"][0]["scenario"]["router_fallbacks"] == 0
    # A bad routing choice is refused up front.
    r = assay("run", str(TINY), "--task", "tiny-case/base", "--agent", "noop", "--routing", "telepathy",
              cwd=tmp_path)
    assert r.returncode == 2 and "--routing" in r.stderr
    r = assay("run", str(TINY), "--task", "tiny-case/base", "--agent", "noop", "--routing", "llm", cwd=tmp_path)
    assert r.returncode == 2 and "--router-model" in r.stderr


def test_llm_router_failures_fall_back_on_the_record(tmp_path: Path) -> None:
    """A routing model that fails: lexical routing answers, and every fallback is on the run and
    counted in the report (it can change which facts the agent gets)."""
    from tests.fakes import fault
    from tests.fakes.openai_server import FakeOpenAIServer

    with FakeOpenAIServer(default=fault(500)) as srv:
        _run_with_llm_router(tmp_path, srv.url, "Which target figure should the function return?")
        assert srv.requests, "the routing model was never asked"
    rep = report(tmp_path)
    (run,) = rep["runs"]
    fallbacks = run["grade"]["router_fallbacks"]
    assert fallbacks and fallbacks[0]["call"] == "match" and fallbacks[0]["person"] == "owner"
    assert "lexical routing after" in fallbacks[0]["reason"] and "500" in fallbacks[0]["reason"]
    assert run["grade"]["router_fallback_count"] == len(fallbacks)
    block = rep["agents"][0]["scenario"]
    assert block["router_fallbacks"] == len(fallbacks) and block["runs_with_router_fallbacks"] == 1
    r = assay("show", run["run_id"], cwd=tmp_path)
    assert "decided by a fallback" in r.stdout
