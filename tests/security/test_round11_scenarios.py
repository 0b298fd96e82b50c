"""Eleventh review: scenarios end to end.

The delivered `system/` graded and piloted, stakeholder conversations and trigger regexes,
the company LLM gateway, levels and variants, and what a run leaves behind. Each test
asserts the secure outcome; a failing test shows a hole (see the report of this round).

Most attacks run a small native scenario of their own (`parity_case`: `system/app.py`
labels numbers read on stdin; the grader runs it with `sys.executable` on held-out numbers,
as the bundled graders do; an optional pilot runs it too). The gateway and stakeholder
attacks drive the real `LLMGateway` / `StakeholderWorld` in this process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.security._support import (
    REPO,
    bwrap_ok,
    cli,
    cmd,
    outputs,
    reap,
    report_json,
    runs_by_name,
    script,
    show,
    workdir,
    write_yaml,
)

pytestmark = pytest.mark.slow

needs_bwrap = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

# --------------------------------------------------------------------------- the case

INPUTS = [3, 8, 11, 14, 25, 30, 41, 52, 67, 70, 5, 9]
LABELS = ["odd" if n % 2 else "even" for n in INPUTS]

APP = """import json, sys
nums = json.loads(sys.stdin.read())
print(json.dumps(["even" for _ in nums]))
"""

RIGHT_APP = """import json, sys
nums = json.loads(sys.stdin.read())
print(json.dumps(["odd" if n % 2 else "even" for n in nums]))
"""

GRADER = '''
import json, subprocess, sys
from pathlib import Path

def grade(ws, ctx):
    held = json.loads((Path(ctx["held_out"]) / "data.json").read_text())
    nums, labels = held["inputs"], held["labels"]
    base = sum(1 for l in labels if l == "even") / len(labels)
    try:
        p = subprocess.run([sys.executable, "app.py"], cwd=str(Path(ws) / "system"), input=json.dumps(nums),
                           capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return {"kpi": 0.0, "kpi_baseline": base, "kpi_oracle": 1.0, "incidents": ["timed out"], "summary": "timeout"}
    try:
        preds = json.loads(p.stdout.strip().splitlines()[-1])
    except Exception:
        return {"kpi": 0.0, "kpi_baseline": base, "kpi_oracle": 1.0, "incidents": [],
                "summary": "unreadable output; stderr: " + p.stderr[-3000:]}
    hits = sum(1 for a, b in zip(preds, labels) if a == b) if isinstance(preds, list) else 0
    return {"kpi": hits / len(labels), "kpi_baseline": base, "kpi_oracle": 1.0, "incidents": [],
            "summary": f"{hits}/{len(labels)}; stderr: " + p.stderr[-3000:]}
'''

PILOT = '''
import json, subprocess, sys
from pathlib import Path

def run(workspace, day):
    p = subprocess.run([sys.executable, "app.py"], cwd=str(Path(workspace) / "system"), input="[1, 2, 3]",
                       capture_output=True, text=True)
    return {"feedback": f"day {day}: {p.stdout.strip()[:200]} / {p.stderr[-3000:]}", "facts": [],
            "topics": ["trial"], "stats": {"day": day}}
'''

# A trial day billed at the compute cost the system reports for it: case code passing on a
# number that comes from the delivered system, as a pilot that charges for compute would.
PILOT_BILLED = '''
import re, subprocess, sys
from pathlib import Path

def run(workspace, day):
    p = subprocess.run([sys.executable, "app.py"], cwd=str(Path(workspace) / "system"), input="[1, 2, 3]",
                       capture_output=True, text=True, timeout=60)
    m = re.search(r"trial_cost=(\\S+)", p.stderr)
    cost = float(m.group(1)) if m else 0.0
    return {"feedback": f"day {day}: {p.stdout.strip()[:200]}", "facts": [], "topics": ["trial"],
            "stats": {"day": day}, "extra_cost": cost}
'''

ORACLE = '''import sys
from pathlib import Path
(Path(sys.argv[1]) / "system" / "app.py").write_text(RIGHT)
'''.replace("RIGHT", repr(RIGHT_APP))


def people(hidden: str = "nothing here") -> dict[str, Any]:
    return {
        "matcher": "regex",
        "pilot": {"max_runs": 6, "cost": [0.0], "exhausted": "No more trial days."},
        "npcs": [{"id": "owner", "name": "Olga Owner", "role": "Product owner", "blurb": "Owns the labels.",
                  "cost": 0.01, "fallback": "Olga: not sure what you mean.",
                  "topics": [{"id": "labels", "about": "what the labels mean", "triggers": ["(?i)label"],
                              "answer": "Labels are parity: odd or even.", "facts": ["F_parity"]},
                             # never reachable by a message: its answer must never reach the agent
                             {"id": "hidden", "about": "hidden", "triggers": ["(?i)\\bq{40}\\b"],
                              "answer": hidden, "facts": ["F_hidden"]}]}],
    }


def parity_case(folder: Path, *, pilot: str | None = None, grader: str = GRADER, l0: str | None = None,
                params: dict[str, Any] | None = None, extra: dict[str, str] | None = None,
                hidden: str = "nothing here", extra_sc: dict[str, Any] | None = None) -> Path:
    """A native scenario, task id `FOLDERNAME/base`."""
    sc: dict[str, Any] = {"rules": "v2", "stakeholders": "people.json", "grader": "grade.py",
                          "held_out": "held_out/", "baseline": "compute", "reference": "solutions/oracle.py",
                          "truth": {"key_stakeholder_facts": ["F_parity"]}}
    files = {"people.json": json.dumps(people(hidden), indent=1),
             "held_out/data.json": json.dumps({"inputs": INPUTS, "labels": LABELS}),
             "workspace/system/app.py": APP,
             "workspace/README.md": "system/app.py labels numbers read as JSON on stdin.\n",
             "solutions/oracle.py": ORACLE, "grade.py": grader, **(extra or {})}
    if pilot is not None:
        sc["pilot"] = "pilot.py"
        files["pilot.py"] = pilot
    if params is not None:
        sc["variants"] = [{"name": "base", "params": params}]
    sc.update(extra_sc or {})
    spec = {"title": "Label numbers", "domain": "testing",
            "briefs": {"L0": l0 or "Make system/app.py label numbers by parity.",
                       "L3": "Fix the labeller in system/. Olga owns it."},
            "scenario": sc}
    write_yaml(folder, spec, files)
    return folder


def write_app(content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": "system/app.py", "content": content}}


def tmp_env(wd: Path) -> dict[str, str]:
    """The campaign's TMPDIR inside the work folder: grading copies, socket folders and what
    delivered code leaves carry the work folder's path (found and reaped by marker)."""
    t = wd / "tmp"
    t.mkdir(exist_ok=True)
    os.chmod(t, 0o711)
    return {"TMPDIR": str(t)}


def _wait_unmounted(wd: Path, limit_s: float = 15.0) -> None:
    end = time.monotonic() + limit_s
    while time.monotonic() < end and str(wd) in Path("/proc/mounts").read_text():
        time.sleep(0.5)


def row(rep: dict[str, Any], name: str) -> dict[str, Any]:
    rows = runs_by_name(rep)
    assert name in rows, f"no run of {name}: {sorted(rows)}"
    return rows[name]


def scenario_of(run: dict[str, Any]) -> dict[str, Any]:
    g = run.get("grade") or {}
    return g.get("scenario") or g


# --------------------------------------------------------------------------- the gateway (in process)

MODEL = "gpt-4.1-mini"


def _gateway_exchange(bodies: list[tuple[str, bytes]], *, max_usd: float = 1.0,
                      latency_s: float = 0.0, concurrent: bool = False) -> tuple[list[Any], dict[str, Any], int]:
    """Start a real gateway in front of the fake OpenAI server, send `bodies` (path, raw JSON),
    and return (answers: status or the exception's name, the budget after, upstream requests)."""
    from assay.env.net.gateway.budget import Budget
    from assay.env.net.gateway.server import LLMGateway
    from assay.llm.prices import Price
    from tests.fakes.openai_server import FakeOpenAIServer

    async def main() -> tuple[list[Any], dict[str, Any], int]:
        d = Path(tempfile.mkdtemp(prefix="assay-rt11-gw-"))
        try:
            with FakeOpenAIServer(latency_s=latency_s) as fake:
                gw = LLMGateway(fake.url, MODEL, price=Price(input=1.0, cached_input=0.5, output=2.0),
                                budgets={"dev": Budget(1000, max_usd)}, max_tokens_cap=800, api_key="sk-test",
                                retry_base_delay=0.01, log_path=d / "llm.jsonl")
                await gw.start(d / "llm.sock")
                try:
                    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(gw.socket_path)),
                                                 base_url="http://gateway", timeout=30) as c:
                        async def one(path: str, body: bytes) -> Any:
                            try:
                                r = await c.post(path, content=body, headers={"content-type": "application/json"})
                                return r.status_code
                            except httpx.HTTPError as e:
                                return type(e).__name__
                        if concurrent:
                            answers = list(await asyncio.gather(*(one(p, b) for p, b in bodies)))
                        else:
                            answers = [await one(p, b) for p, b in bodies]
                        budget = (await c.get("/v1/budget")).json()
                finally:
                    await gw.stop()
                return answers, budget, len(fake.requests)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    return asyncio.run(main())


NON_FINITE = {
    "nan_literal_temperature": ("/v1/chat/completions",
                                b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}'),
    "overflowing_float_in_a_message": ("/v1/chat/completions",
                                       b'{"messages": [{"role": "user", "content": "hi", "weight": 1e999}]}'),
    "string_nan_temperature_on_simple_chat": ("/chat",
                                              b'{"messages": [{"role": "user", "content": "hi"}], '
                                              b'"temperature": "nan"}'),
    "overflowing_max_tokens_on_simple_chat": ("/chat",
                                              b'{"messages": [{"role": "user", "content": "hi"}], '
                                              b'"max_tokens": 1e999}'),
}


@pytest.mark.parametrize("case", sorted(NON_FINITE))
def test_gateway_answers_non_finite_numbers_with_400_and_charges_nothing(case: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    """A body carrying NaN / Infinity (JSON's `NaN`, `1e999`, or `"nan"` for /chat's temperature)
    parses, then cannot be encoded for the provider (httpx refuses non-finite floats). The client
    must get a 4xx answer, nothing charged, and the harness log no traceback."""
    path, body = NON_FINITE[case]
    with caplog.at_level(logging.ERROR, logger="assay.env.net.gateway.server"):
        answers, budget, upstream = _gateway_exchange([(path, body)] * 5)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert all(isinstance(a, int) and 400 <= a < 500 for a in answers), f"answers: {answers}"
    assert budget["usd"] == 0, f"{budget['usd']} charged for {len(answers)} calls that never reached the provider"
    assert upstream == 0
    assert not tracebacks, f"{len(tracebacks)} tracebacks logged: {tracebacks[0].getMessage()}"


def test_gateway_parallel_calls_never_spend_past_the_dollar_cap() -> None:
    """60 calls at once, each reserving its bound, against a slow provider and a cap that fits a
    few: what is settled stays within the cap."""
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 2000}], "max_tokens": 800}).encode()
    answers, budget, upstream = _gateway_exchange([("/v1/chat/completions", body)] * 60, max_usd=0.01,
                                                  latency_s=0.3, concurrent=True)
    assert budget["usd"] <= 0.01 + 1e-9, budget
    assert answers.count(200) == upstream
    assert any(a == 429 for a in answers), answers


# --------------------------------------------------------------------------- stakeholders (in process)

def test_refund_desk_trust_and_safety_gate_needs_real_evidence() -> None:
    """Mei (Trust & Safety) tells the abuse pattern only to someone who "cites concrete evidence
    from the refund history: a request id or a count or rate the agent computed". A message that
    names a request id that is not in the history, and computed nothing, must not open it."""
    from assay.people.ledger import Ledger
    from assay.people.routing import RegexRouter
    from assay.people.world import StakeholderWorld
    from assay.task.people import load_npcs

    case = REPO / "suites" / "starter" / "scenarios" / "refund-desk"
    params = json.loads((case / "variants.json").read_text())["variants"][0]["params"]
    spec = load_npcs(case / "npcs.json", params)
    d = Path(tempfile.mkdtemp(prefix="assay-rt11-ppl-"))
    try:
        (d / "ws").mkdir()
        (d / "run").mkdir()
        ledger = Ledger.for_workspace(d / "ws", d / "run")
        world = StakeholderWorld(spec, RegexRouter(), ledger=ledger)
        reply = world.ask("mei", "Is there an abuse pattern? For instance R-0000000.")
        got = world.summary().facts_obtained
        ledger.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert "F_abuse_pattern" not in got, f"a made-up request id opened the gate: {reply[:200]!r}"


# --------------------------------------------------------------------------- bad task input

@pytest.mark.parametrize("where", ["native_baseline_nan", "native_variant_oracle_inf", "fdegym_variant_1e999"])
def test_non_finite_kpi_overrides_are_refused_naming_the_file(where: str) -> None:
    with workdir("r11-kpi") as wd:
        if where == "native_baseline_nan":
            parity_case(wd / "case", extra_sc={"baseline": float("nan")})
            want = "task.yaml"
        elif where == "native_variant_oracle_inf":
            parity_case(wd / "case", extra_sc={"baseline": 0.5, "variants": [{"name": "base",
                                                                               "kpi_oracle": float("inf")}]})
            want = "task.yaml"
        else:
            shutil.copytree(REPO / "suites" / "starter" / "scenarios" / "refund-desk", wd / "case")
            v = json.loads((wd / "case" / "variants.json").read_text())
            v["variants"][0]["kpi_oracle"] = "@@"
            (wd / "case" / "variants.json").write_text(json.dumps(v).replace('"@@"', "1e999"))
            want = "variants.json"
        r = cli("validate", "case", cwd=wd, timeout=120)
        assert r.returncode == 2, r.tail()
        assert "Traceback" not in r.stderr + r.stdout
        assert "finite" in r.stderr + r.stdout, r.tail()
        assert want in r.stderr + r.stdout, f"the message does not name {want}: {r.tail()}"


# --------------------------------------------------------------------------- pilot days

@needs_bwrap
def test_a_pilot_day_left_running_does_not_hold_the_harness() -> None:
    """The agent starts a trial day whose delivered code takes 100 s, gives up on it after 3 s
    (the client is killed) and finishes. The pilot runs in the stakeholder server's executor,
    outside the sandbox the harness closes: it must not outlive the run, keep delivered code
    running after its grade, or hold `assay run` (which ends in a few seconds otherwise)."""
    slow = RIGHT_APP.replace("import json, sys", "import json, sys, time").replace(
        "nums = json.loads(sys.stdin.read())", "nums = json.loads(sys.stdin.read())\nif len(nums) == 3:\n"
                                              "    time.sleep(100)")
    with workdir("r11-pilot") as wd:
        parity_case(wd / "case", pilot=PILOT)
        agent = script(wd, "lingering", [write_app(slow), cmd("timeout 3 bin/pilot; echo pilot-gone $?", 30),
                                         {"say": "done"}])
        r = cli("run", "case", "--agent", agent, cwd=wd, timeout=75, env=tmp_env(wd))
        left = reap(str(wd))
        _wait_unmounted(wd)  # a harness killed at the bound: its lifeline unmounts the trial day's copy
        assert not r.timed_out, f"assay run still running after 75 s (the trial day holds it); reaped {len(left)}"
        assert r.returncode == 0, r.tail()
        assert r.seconds < 60, f"assay run took {r.seconds:.0f} s"
        run = row(report_json(wd), "lingering")
        assert run["status"] == "done" and run["score"] is not None


@needs_bwrap
def test_a_trial_day_cost_reported_by_the_system_cannot_raise_the_score() -> None:
    """Case code bills a trial day at a cost the delivered system reports. A system reporting a
    negative cost lowers the contact cost below zero (S > U); one reporting NaN leaves a "done"
    run without a score (left out of the agent's means like a void run). Both must score no
    higher than the honest twin, be done, and carry a score."""
    with workdir("r11-bill") as wd:
        parity_case(wd / "case", pilot=PILOT_BILLED)
        agents = []
        for name, cost in (("honest", "0.01"), ("negative", "-5"), ("nan", "nan")):
            app = RIGHT_APP.replace("nums = json.loads(sys.stdin.read())",
                                    f"nums = json.loads(sys.stdin.read())\nprint('trial_cost={cost}', file=sys.stderr)")
            agents += ["--agent", script(wd, name, [write_app(app), cmd("bin/pilot", 60), {"say": "done"}])]
        r = cli("run", "case", *agents, cwd=wd, timeout=240, env=tmp_env(wd))
        assert r.returncode == 0, r.tail()
        rep = report_json(wd)
        honest = row(rep, "honest")
        assert honest["status"] == "done" and honest["score"] is not None
        problems = []
        for name in ("negative", "nan"):
            run = row(rep, name)
            if run["status"] != "done" or run["score"] is None:
                problems.append(f"{name}: status {run['status']}, score {run['score']}")
            elif run["score"] > honest["score"] + 1e-9:
                problems.append(f"{name}: S {run['score']} > honest {honest['score']}")
        assert not problems, "; ".join(problems)


# --------------------------------------------------------------------------- the delivered system, graded

HOSTILE_APPS = {
    # bytes that are not UTF-8 on stdout: the grader's text=True decoding raises
    "not_utf8": "import os, sys\nsys.stdin.read()\nos.write(1, b'\\xff\\xfe\\x80 not utf-8\\n')\n",
    # kills its own process group (the sandbox's session)
    "kill_own_group": "import os, signal, sys\nsys.stdin.read()\nos.killpg(0, signal.SIGKILL)\n",
    # a child that keeps the grader's pipe open and outlives the program
    "daemon_child": ("import os, sys, time\nsys.stdin.read()\nif os.fork() == 0:\n    os.setsid()\n"
                     "    time.sleep(200)\nprint('[]')\n"),
    # stops itself: the grader waits on it
    "stopped": "import os, signal, sys\nsys.stdin.read()\nos.kill(os.getpid(), signal.SIGSTOP)\n",
}


@needs_bwrap
def test_hostile_delivered_programs_are_scored_failures_and_leave_nothing() -> None:
    """Each hostile program makes the grader fail or time out: the run must be "done" (scored,
    the fault recorded), no higher than the do-nothing agent, and leave no process behind."""
    with workdir("r11-hostile") as wd:
        parity_case(wd / "case")
        agents = ["--agent", "noop"]
        for name, app in HOSTILE_APPS.items():
            agents += ["--agent", script(wd, name, [write_app(app), {"say": "done"}])]
        r = cli("run", "case", *agents, cwd=wd, timeout=300, env=tmp_env(wd))
        time.sleep(1)
        left = reap(str(wd))
        assert r.returncode == 0, r.tail()
        rep = report_json(wd)
        noop = row(rep, "noop")
        bad = []
        for name in HOSTILE_APPS:
            run = row(rep, name)
            if run["status"] != "done" or run["score"] is None or run["score"] > noop["score"] + 1e-9:
                bad.append(f"{name}: {run['status']} score {run['score']} ({run.get('void_reason')})")
        assert not bad, "; ".join(bad)
        assert not left, f"{len(left)} processes outlived the campaign"


# --------------------------------------------------------------------------- reach

REACH = ("T=RT11-; "
         "grep -rIsoh --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev "
         "--exclude-dir=lib --exclude-dir=lib64 --exclude-dir=bin --exclude-dir=sbin \"$T[0-9a-f]*\" / ..; "
         "cat /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -o \"$T[0-9a-f]*\"; "
         "env | grep -o \"$T[0-9a-f]*\"; ls -la /run/assay /tmp .. 2>&1 | head -50; echo reach-done")


@needs_bwrap
def test_held_out_grader_brief_params_and_hidden_answers_are_out_of_reach() -> None:
    """Tokens in the held-out data, the grader, the pilot, the L0 brief (the run is L3), a
    variant parameter and a stakeholder answer no message can reach. The agent greps every
    folder it can see, /proc and its environment; its delivered program does the same while
    graded and while piloted, and prints what it finds where the grader and the pilot quote it.
    No token may show up in what the run recorded."""
    tok = {k: f"RT11-{secrets.token_hex(8)}" for k in ("held", "grader", "pilot", "l0", "param", "hidden")}
    app = ("import json, subprocess, sys\nnums = json.loads(sys.stdin.read())\n"
           f"out = subprocess.run(['sh', '-c', {REACH.replace('reach-done', 'app-reach-done')!r}], capture_output=True, text=True, timeout=60).stdout\n"
           "print(out[-2500:], file=sys.stderr)\n"
           "print(json.dumps(['odd' if n % 2 else 'even' for n in nums]))\n")
    with workdir("r11-reach") as wd:
        parity_case(wd / "case", pilot=PILOT.replace("import json", f"# {tok['pilot']}\nimport json"),
                    grader=GRADER.replace("import json", f"# {tok['grader']}\nimport json"),
                    l0=f"Make system/app.py label numbers by parity ({tok['l0']}).",
                    params={"code": tok["param"]}, hidden=tok["hidden"],
                    extra={"held_out/secret.txt": tok["held"] + "\n"})
        agent = script(wd, "seeker", [cmd(REACH.replace("reach-done", "agent-reach-done"), 120), write_app(app), cmd("bin/pilot", 120),
                                      cmd("bin/ask owner 'what do the labels mean?'", 30), {"say": "done"}])
        r = cli("run", "case", "--agent", agent, "--level", "L3", cwd=wd, timeout=300, env=tmp_env(wd))
        assert r.returncode == 0, r.tail()
        run = row(report_json(wd), "seeker")
        assert run["status"] == "done", run.get("void_reason")
        events = show(wd, run["run_id"])["events"]
        seen = "\n".join(outputs(events)) + "\n" + json.dumps(events) \
            + "\n" + json.dumps(run.get("grade"))
        said = "\n".join(outputs(events))
        assert "agent-reach-done" in said, "the agent's probe did not run"
        assert "app-reach-done" in said, "the delivered program's probe did not run in the trial day"
        assert "app-reach-done" in json.dumps(run.get("grade")), "the delivered program's probe did not run while graded"
        found = sorted(k for k, t in tok.items() if t in seen)
        assert not found, f"reached: {found}"


# --------------------------------------------------------------------------- stakeholder service, shared

FLOOD = r"""
import socket, threading, time
N = [0]
def worker():
    s = socket.socket(socket.AF_UNIX); s.connect("/run/assay/ask.sock")
    f = s.makefile("rwb")
    end = time.time() + 10
    while time.time() < end:
        f.write(b'{"op": "who"}\n' * 50); f.flush()
        for _ in range(50): f.readline()
        N[0] += 50
ts = [threading.Thread(target=worker) for _ in range(16)]
[t.start() for t in ts]; [t.join() for t in ts]
print("flood requests", N[0])
"""

PROBE = r"""
import socket, time
time.sleep(4)
lat = []
s = socket.socket(socket.AF_UNIX); s.connect("/run/assay/ask.sock"); f = s.makefile("rwb")
for _ in range(300):
    t = time.perf_counter(); f.write(b'{"op": "who"}\n'); f.flush(); f.readline(); lat.append(time.perf_counter() - t)
lat.sort()
print("PROBE p95_ms=%.3f" % (lat[285] * 1e3))
"""


@needs_bwrap
def test_a_flood_of_free_requests_does_not_slow_another_runs_stakeholders() -> None:
    """`who` is free and unrecorded: one run sends it as fast as 16 pipelined connections go
    (about 25,000 a second, all served by the harness process every run shares). Another
    run's stakeholder replies must stay fast (p95 under 50 ms)."""
    with workdir("r11-flood") as wd:
        parity_case(wd / "case")
        agents = []
        for name, code in (("flooder", FLOOD), ("prober", PROBE)):
            agents += ["--agent", script(wd, name, [{"tool": "write_file", "args": {"path": "x.py", "content": code}},
                                                   cmd("python3 x.py", 60), {"say": "done"}])]
        r = cli("run", "case", *agents, "--concurrency", "2", cwd=wd, timeout=240, env=tmp_env(wd))
        assert r.returncode == 0, r.tail()
        rep = report_json(wd)
        said = "\n".join(outputs(show(wd, row(rep, "prober")["run_id"])["events"]))
        flood = "\n".join(outputs(show(wd, row(rep, "flooder")["run_id"])["events"]))
        assert "flood requests" in flood, flood[-500:]
        p95 = float(said.split("PROBE p95_ms=", 1)[1].split()[0])
        assert p95 < 50, f"another run's stakeholder replies took {p95:.1f} ms (p95) during the flood"


@needs_bwrap
def test_terminal_escapes_in_a_question_are_shown_escaped() -> None:
    """A question carrying ESC sequences (clear screen, a green fake "SCORE 1.000 PASSED"), CR,
    BEL and a right-to-left override: `assay show` must print them escaped, never raw."""
    q = ("$(printf 'what do the labels mean? \\033[2J\\033[1;32mSCORE 1.000 PASSED\\033[0m "
         "\\r\\342\\200\\256override \\a')")
    with workdir("r11-esc") as wd:
        parity_case(wd / "case")
        agent = script(wd, "painter", [cmd(f'bin/ask owner "{q}"', 30), {"say": "done"}])
        r = cli("run", "case", "--agent", agent, cwd=wd, timeout=180, env=tmp_env(wd))
        assert r.returncode == 0, r.tail()
        run = row(report_json(wd), "painter")
        assert "F_parity" in json.dumps(run.get("grade")), "the question was not answered"
        out = cli("show", run["run_id"], cwd=wd, timeout=60)
        assert out.returncode == 0, out.tail()
        assert "SCORE 1.000 PASSED" in out.stdout
        raw = [c for c in ("\x1b", "\r", "\x07", "\u202e") if c in out.stdout]
        assert not raw, f"raw control characters in `assay show`: {raw!r}"
