"""Category 7: the company LLM gateway enforces its budget.

The gateway is what delivered code (and the agent's commands) spend the customer's model
money through. It must:
- force `n` to 1 (n completions cost n times the output);
- count the whole request against the input cap (tools and every other field, not only the
  messages' text);
- reserve spend before a call and settle it after: 30 parallel calls must not spend more than
  the dollar cap plus at most one call's worth;
- report the dev-phase spend (the agent's own use while it works) on the run.

The first three drive `LLMGateway` directly (there is no CLI path to one call) against the
fake OpenAI server on 127.0.0.1; the parallel attack and the dev-phase report also run end to
end: a script agent fires the calls from inside the sandbox of an `llm: true` scenario.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.fakes import delay, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, model_alias
from tests.security._support import bwrap_ok, cli, cmd, report_json, runs_by_name, script, workdir

# isort: split
# --- the internal API used here (no CLI path to single gateway calls): keep it in this block
from assay.env.net.gateway.server import LLMGateway
from assay.llm.prices import Price

PRICE = Price(input=2.0, cached_input=0.5, output=8.0)  # USD per million tokens
PROMPT_TOKENS, COMPLETION_TOKENS = 1000, 800  # what the fake bills per call
CALL_USD = (PROMPT_TOKENS * 2.0 + COMPLETION_TOKENS * 8.0) / 1e6  # 0.0084
HI = {"model": "whatever", "messages": [{"role": "user", "content": "hi"}]}
# The fake bills PROMPT_TOKENS whatever the prompt. A provider cannot bill more prompt tokens
# than a text prompt has bytes (plus a few template tokens), and the gateway reserves by that
# bound; the parallel attacks send a prompt of PROMPT_TOKENS bytes, so the fake's bill is one a
# real provider could send for it (a 2-byte "hi" billed 1,000 tokens is not).
PROMPT = "x" * PROMPT_TOKENS
BILLABLE = {**HI, "messages": [{"role": "user", "content": PROMPT}]}


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(default=reply("ok", prompt_tokens=PROMPT_TOKENS,
                                        completion_tokens=COMPLETION_TOKENS)) as srv:
        yield srv  # type: ignore[misc]


@pytest.fixture
async def gateway(fake: FakeOpenAIServer) -> AsyncIterator[Any]:
    made: list[LLMGateway] = []
    with workdir("gw") as wd:

        async def make(**budget: Any) -> LLMGateway:
            engagement = {"dev_llm_calls": 1000, "dev_llm_usd": 10.0, **budget}
            gw = LLMGateway.from_engagement(engagement, fake.url, "gpt-test", price=PRICE, api_key="sk-test",
                                            retry_base_delay=0.01)
            await gw.start(wd / f"llm{len(made)}.sock")
            made.append(gw)
            return gw

        yield make
        for gw in made:
            await gw.stop()


def _client(gw: LLMGateway) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(gw.socket_path)), base_url="http://gw",
                             timeout=60)


async def test_n_is_forced_to_one(gateway: Any, fake: FakeOpenAIServer) -> None:
    gw = await gateway()
    async with _client(gw) as c:
        r = await c.post("/v1/chat/completions", json={**HI, "n": 8})
    sent = [q.json for q in fake.requests]
    if not sent:  # refusing the request outright is as good as forcing n to 1
        assert r.status_code in (400, 422), f"nothing forwarded, yet the gateway answered {r.status_code}"
        return
    assert sent[-1].get("n") in (None, 1), f"the gateway forwarded n={sent[-1].get('n')} (8 completions billed)"


BIG = "x" * 100_000  # the gateway's input cap is upstream's 60,000 characters

SMUGGLED: dict[str, dict[str, Any]] = {
    "tools": {**HI, "tools": [{"type": "function", "function": {"name": "f", "description": BIG,
                                                                 "parameters": {"type": "object"}}}]},
    "tool_call_arguments": {**HI, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"a": BIG})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]},
    "image_part": {**HI, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + BIG}}]}]},
    "response_format": {**HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "s", "schema": {"type": "object", "description": BIG}}}},
    "prediction": {**HI, "prediction": {"type": "content", "content": BIG}},
    "message_name": {**HI, "messages": [{"role": "user", "content": "hi", "name": BIG}]},
}


@pytest.mark.parametrize("field", list(SMUGGLED))
async def test_whole_request_counts_against_the_input_cap(gateway: Any, fake: FakeOpenAIServer, field: str) -> None:
    gw = await gateway()
    async with _client(gw) as c:
        r = await c.post("/v1/chat/completions", json=SMUGGLED[field])
    assert r.status_code in (400, 413) and not fake.requests, (
        f"100,000 characters in `{field}` went upstream past the 60,000-character input cap "
        f"(gateway answered {r.status_code}; forwarded {len(fake.requests)} request(s))")


async def test_input_cap_control(gateway: Any, fake: FakeOpenAIServer) -> None:
    """Control: the cap does hold for message text, and a small request goes through."""
    gw = await gateway()
    async with _client(gw) as c:
        small = await c.post("/v1/chat/completions", json=HI)
        big = await c.post("/v1/chat/completions", json={**HI, "messages": [{"role": "user", "content": BIG}]})
    assert small.status_code == 200 and big.status_code == 413 and len(fake.requests) == 1


async def test_parallel_calls_cannot_overspend_the_dollar_cap(gateway: Any, fake: FakeOpenAIServer) -> None:
    cap = 0.05  # about six calls' worth
    fake.default = delay(0.5, reply("ok", prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS))
    gw = await gateway(dev_llm_usd=cap)
    async with _client(gw) as c:
        rs = await asyncio.gather(*(c.post("/v1/chat/completions", json=BILLABLE) for _ in range(30)))
    ok = sum(r.status_code == 200 for r in rs)
    spent = gw.summary()["by_phase"]["dev"]["usd"]
    assert spent <= cap + CALL_USD + 1e-9, (
        f"30 parallel calls spent ${spent:.4f} against a ${cap:.2f} cap ({ok} answered; one call costs "
        f"${CALL_USD:.4f}): spend is checked before a call but only counted after it")


# --------------------------------------------------------------------------- end to end

PARALLEL = """\
import sys, threading
sys.path.insert(0, "system")
import llm_client
res = []

def one():
    try:
        llm_client.complete("label this " + "x" * 1000)  # a prompt the fake's 1,000-token bill fits
        res.append("ok")
    except Exception as e:
        res.append(type(e).__name__)

ts = [threading.Thread(target=one) for _ in range(30)]
[t.start() for t in ts]
[t.join() for t in ts]
print("RESULTS", res.count("ok"), "ok of", len(res), sorted(set(res)))
"""


@pytest.fixture(scope="module")
def dev_spend() -> Iterator[dict[str, Any]]:
    if not bwrap_ok():
        pytest.skip("bubblewrap is not installed")
    with workdir("gw-cli") as wd, FakeOpenAIServer(default=delay(0.5, reply(
            "label", prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS))) as srv:
        case = wd / "llm-case"
        shutil.copytree(REPO / "tests" / "fixtures" / "fdegym" / "llm-case", case)
        eng = json.loads((case / "engagement.json").read_text())
        eng.update({"dev_llm_calls": 100, "dev_llm_usd": 0.03})
        (case / "engagement.json").write_text(json.dumps(eng))
        model_alias(wd, "gw", "openai", srv.url)  # prices: input 2.0, output 8.0 per million
        one = script(wd, "one_call", [cmd("cd system && python3 -c \"import llm_client; print(llm_client.complete('hi'))\""),
                                      {"say": "done"}])
        many = script(wd, "parallel", [{"tool": "write_file", "args": {"path": "par.py", "content": PARALLEL}},
                                       cmd("python3 par.py", 120), {"say": "done"}])
        r = cli("run", str(case), "--agent", one, "--agent", many, "--gateway-model", "gw", "--concurrency", "2",
                cwd=wd, timeout=300)
        assert not r.timed_out and r.returncode in (0, 1), r.tail()
        yield {"runs": runs_by_name(report_json(wd)), "cli": r}


def test_dev_phase_spend_is_reported_on_the_run(dev_spend: dict[str, Any]) -> None:
    run = dev_spend["runs"]["one_call"]
    assert run["status"] == "done", run
    dev = run["grade"]["llm"]["by_phase"]["dev"]
    assert dev["calls"] == 1 and dev["usd"] == pytest.approx(CALL_USD), dev


def test_parallel_calls_from_the_sandbox_cannot_overspend_the_dev_budget(dev_spend: dict[str, Any]) -> None:
    run = dev_spend["runs"]["parallel"]
    assert run["status"] == "done", run
    dev = run["grade"]["llm"]["by_phase"]["dev"]
    assert dev["usd"] <= 0.03 + CALL_USD + 1e-9, (
        f"30 parallel calls from the sandbox spent ${dev['usd']:.4f} of a $0.03 dev budget ({dev['calls']} calls)")

