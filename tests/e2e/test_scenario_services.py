"""Scenarios with the company LLM gateway and services, end to end: the agent's commands and the
delivered code (while graded) reach both from inside the sandbox; budgets are enforced per phase;
`assay run` refuses up front without a gateway model."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import fault, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, assay, model_alias, report

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

CASE = REPO / "tests" / "fixtures" / "fdegym" / "llm-case"
LABEL = "label-from-fake"


def _cmd(command: str) -> dict[str, Any]:
    return {"tool": "run_command", "args": {"command": command}}


def _script(path: Path, lines: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f"script:{path}"


LLM_CALL = "cd system && python3 -c \"import llm_client; print(llm_client.complete('hi'))\""
SERVICE_CALL = ("python3 -c \"import json, urllib.request; "
                "u = json.load(open('system/config/services.json'))['rates']; "
                "print(u, urllib.request.urlopen(u + '/rate?item=bolt', timeout=5).read().decode())\"")
PROBE = [_cmd(LLM_CALL), _cmd(SERVICE_CALL), _cmd("cat system/config/llm.json"), {"say": "probed"}]

GREEDY_APP = '''import json, os, urllib.request
import llm_client

HERE = os.path.dirname(os.path.abspath(__file__))


def quote(item):
    url = json.load(open(os.path.join(HERE, "config", "services.json")))["rates"]
    rate = json.loads(urllib.request.urlopen(url + "/rate?item=" + item["name"], timeout=5).read())["rate"]
    label = ""
    try:
        for _ in range(3):  # three model calls per item: more than the production allowance
            label = llm_client.complete("label " + item["name"])
    except llm_client.BudgetExceeded:
        label = ""
    return {"item": item["name"], "price": item["qty"] * rate, "label": label}
'''
GREEDY = [{"tool": "write_file", "args": {"path": "system/app.py", "content": GREEDY_APP}}, {"say": "done"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=reply(LABEL)) as srv:
        yield srv  # type: ignore[misc]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAIServer) -> dict[str, Any]:
    cwd = tmp_path_factory.mktemp("llmcase")
    os.chmod(cwd, 0o711)
    model_alias(cwd, "gw", "openai", fake.url)
    specs = {"probe": _script(cwd / "probe.jsonl", PROBE), "greedy": _script(cwd / "greedy.jsonl", GREEDY)}
    r = assay("run", str(CASE), "--agent", specs["probe"], "--agent", specs["greedy"], "--agent", "reference",
              "--agent", "noop", "--gateway-model", "gw", "--concurrency", "2", "-q", cwd=cwd)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    by_spec = {v: k for k, v in specs.items()}
    out: dict[str, Any] = {}
    for run in report(cwd)["runs"]:
        name = by_spec.get(run["agent"], run["agent"])
        s = assay("show", run["run_id"], "--json", cwd=cwd)
        assert s.returncode == 0, s.stderr
        out[name] = {"run": run, "events": json.loads(s.stdout)["events"]}
    return out


def _outputs(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["data"].get("output", "")) for e in events if e["kind"] == "tool_result"]


def test_agent_commands_reach_the_gateway_and_the_service(runs: dict[str, Any]) -> None:
    llm_out, svc_out, cfg_out = _outputs(runs["probe"]["events"])
    assert llm_out.startswith("[exit code 0]") and LABEL in llm_out, llm_out
    assert svc_out.startswith("[exit code 0]"), svc_out
    assert "http://127.0.0.1:8002" in svc_out and '"mode": "dev"' in svc_out and '"rate": 2' in svc_out
    assert '"base_url": "http://127.0.0.1:8001/v1"' in cfg_out
    g = runs["probe"]["run"]["grade"]
    assert g["llm"]["by_phase"]["dev"]["calls"] == 1 and g["llm"]["by_phase"]["prod"]["calls"] == 0
    assert g["probe_flags"] == []  # the forwarder in front of each command is not the agent's doing


def test_reference_scores_through_prod_gateway_and_service(runs: dict[str, Any], fake: FakeOpenAIServer) -> None:
    run = runs["reference"]["run"]
    g = run["grade"]
    assert run["status"] == "done", run
    assert g["uplift"] >= 0.95 and g["kpi"] == 3, g["grader"]
    assert "rate service mode prod" in g["grader"]["summary"]
    assert [q["price"] for q in g["grader"]["gates"]["quotes"]] == [15, 35, 10]  # the held-out prod rate 5
    llm = g["llm"]
    assert llm["model"] == "gw" and llm["by_phase"]["prod"]["calls"] == 3 and llm["refused"] == 0
    assert llm["by_phase"]["dev"]["calls"] == 0
    assert g["llm_cost_usd"] == pytest.approx(llm["by_phase"]["prod"]["usd"]) and g["llm_cost_usd"] > 0
    assert all(b.get("model") == "fake-model" for b in fake.bodies)  # the gateway pins its model


def test_prod_budget_is_enforced(runs: dict[str, Any]) -> None:
    g = runs["greedy"]["run"]["grade"]
    prod = g["llm"]["by_phase"]["prod"]
    assert prod["calls"] == 4 and prod["refused"] >= 1  # engagement prod_llm_calls = 4
    assert g["kpi"] == 1 and 0 < g["uplift"] < 0.5
    noop = runs["noop"]["run"]["grade"]
    assert noop["uplift"] == 0 and noop["llm"]["calls"] == 0 and noop["llm_cost_usd"] == 0


def test_run_refuses_without_a_gateway_model(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    r = assay("run", str(CASE), "--agent", "reference", "-q", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--gateway-model" in r.stderr and "llm-case/base" in r.stderr
    r = assay("run", str(CASE), "--agent", "reference", "--gateway-model", "anthropic/claude-sonnet-4-5", "-q",
              cwd=tmp_path)
    assert r.returncode == 2 and "OpenAI-compatible" in r.stderr, r.stderr
    assert not (tmp_path / ".assay").exists()


def test_upstream_trouble_while_grading_retries_then_voids(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    with FakeOpenAIServer(default=fault(500)) as srv:
        model_alias(tmp_path, "gw", "openai", srv.url)
        r = assay("run", str(CASE), "--agent", "reference", "-q", cwd=tmp_path,
                  env={"ASSAY_GATEWAY_MODEL": "gw"})
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    (run,) = report(tmp_path)["runs"]
    assert run["status"] == "void" and run["end_reason"] == "grader_error"
    assert "LLM gateway trouble" in (run.get("void_reason") or r.stderr)
    from assay.store import Store

    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    (rec,) = st.runs()
    st.close()
    assert "LLM gateway trouble" in (rec.void_reason or "")
    run_dir = Path(rec.run_dir or "")
    assert sorted(p.name for p in run_dir.glob("grade-*")) == ["grade-1", "grade-2", "grade-3"]
