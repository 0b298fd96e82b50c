"""The metered LLM gateway on its Unix socket, the in-sandbox forwarder and system/llm_client.py."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from assay.env.net.forwarder import FORWARDER_SCRIPT, install_forwarder, wrap_command
from assay.env.net.gateway.budget import Budget
from assay.env.net.gateway.rules import IMAGE_INPUT_TOKENS, REQUEST_OVERHEAD_TOKENS
from assay.env.net.gateway.server import LLMGateway
from assay.env.net.llm_client import LLM_CLIENT_PY, install_llm_client
from assay.llm.prices import Price
from tests.fakes import delay, fault, malformed, reply
from tests.fakes.openai_server import FakeOpenAIServer

MODEL = "gpt-4.1-mini"
PRICE = Price(input=1.0, cached_input=0.5, output=2.0)  # USD per 1M tokens
TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the files.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
HI = {"model": "anything", "messages": [{"role": "user", "content": "hi"}]}
CAP = 800  # the fixture's max_tokens_cap (upstream's)


@pytest.fixture
def base() -> Iterator[Path]:
    """A parent the sandbox uid can traverse (0711), holding the workspace and the run dir."""
    d = Path(tempfile.mkdtemp(prefix="assay-gw-test-"))
    os.chmod(d, 0o711)
    (d / "ws").mkdir()
    (d / "run").mkdir()
    os.chmod(d / "run", 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def fake() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv  # type: ignore[misc]


@pytest.fixture
async def make_gw(base: Path, fake: FakeOpenAIServer) -> AsyncIterator[Callable[..., Any]]:
    started: list[LLMGateway] = []

    async def make(**kw: Any) -> LLMGateway:
        kw.setdefault("price", PRICE)
        kw.setdefault("budgets", {"dev": Budget(100, 10.0), "prod": Budget(100, 10.0)})
        kw.setdefault("max_tokens_cap", CAP)
        kw.setdefault("api_key", "sk-gateway-secret")
        kw.setdefault("log_path", base / "run" / "logs" / "llm.jsonl")
        kw.setdefault("retry_base_delay", 0.01)
        gw = LLMGateway(kw.pop("upstream_url", fake.url), MODEL, **kw)
        await gw.start(base / "run" / "sock" / f"llm{len(started)}.sock")
        started.append(gw)
        return gw

    yield make
    for gw in started:
        await gw.stop()


def reservation(body: dict[str, Any], price: Price = PRICE, *, cap: int = CAP, images: int = 0,
                image_tokens: int = IMAGE_INPUT_TOKENS, predicted: int = 0) -> float:
    """The upper-bound cost the gateway reserves for `body` (the module docstring's formula)."""
    sent = {k: v for k, v in body.items() if k not in ("model", "max_tokens", "max_completion_tokens")}
    asked = body.get("max_tokens")
    sent["max_tokens"] = min(asked, cap) if isinstance(asked, int) and asked > 0 else cap
    text = json.dumps(sent, ensure_ascii=False, separators=(",", ":"))
    tokens_in = len(text.encode()) + REQUEST_OVERHEAD_TOKENS + images * image_tokens
    dearer_in = max(price.input, price.cached_input if price.cached_input is not None else price.input)
    return (tokens_in * dearer_in + (sent["max_tokens"] + predicted) * price.output) / 1e6


def client(gw: LLMGateway) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(gw.socket_path)),
                             base_url="http://gateway", timeout=30)


async def raw_exchange(gw: LLMGateway, data: bytes) -> bytes:
    """Send raw bytes, read until the gateway closes (or 5 s)."""
    reader, writer = await asyncio.open_unix_connection(str(gw.socket_path))
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


# --------------------------------------------------------------------------- the gateway


async def test_socket_permissions(make_gw: Callable[..., Any]) -> None:
    gw = await make_gw()
    assert stat.S_IMODE(os.stat(gw.socket_path).st_mode) == 0o666
    assert stat.S_IMODE(os.stat(gw.socket_path.parent).st_mode) == 0o755
    await gw.stop()
    assert not gw.socket_path.exists()


async def test_chat_through_the_socket(make_gw: Callable[..., Any], fake: FakeOpenAIServer, base: Path) -> None:
    gw = await make_gw()
    fake.script(reply("Let me look.", tool_calls=[("search", {"q": "refunds"}, "call_42")],
                      prompt_tokens=1000, cached_tokens=400, completion_tokens=200))
    body = {**HI, "tools": TOOLS, "tool_choice": "auto", "temperature": 0.3}
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-agent"})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion"
    msg = data["choices"][0]["message"]
    assert msg["content"] == "Let me look." and data["choices"][0]["finish_reason"] == "tool_calls"
    assert msg["tool_calls"] == [{"id": "call_42", "type": "function",
                                  "function": {"name": "search", "arguments": '{"q": "refunds"}'}}]
    assert data["usage"]["prompt_tokens"] == 1000
    # what went upstream: the request as sent, the model pinned, the gateway's key
    sent = fake.requests[-1]
    assert sent["model"] == MODEL and sent["tools"] == TOOLS and sent["tool_choice"] == "auto"
    assert sent["temperature"] == 0.3
    assert sent.headers.get("Authorization", sent.headers.get("authorization")) == "Bearer sk-gateway-secret"
    # metered: 600 fresh input, 400 cached, 200 output tokens
    cost = (600 * 1.0 + 400 * 0.5 + 200 * 2.0) / 1e6
    s = gw.summary()
    assert s["calls"] == 1 and s["refused"] == 0 and s["usd"] == pytest.approx(cost)
    dev = s["by_phase"]["dev"]
    assert (dev["input_tokens"], dev["cache_read_tokens"], dev["output_tokens"]) == (600, 400, 200)
    rec = gw.records[-1]
    assert rec.status == 200 and rec.phase == "dev" and rec.model == MODEL and rec.outcome == "forwarded"
    assert rec.cost_usd == pytest.approx(cost) and rec.input_tokens == 600 and rec.cost_basis == "usage"
    lines = (base / "run" / "logs" / "llm.jsonl").read_text().splitlines()
    assert [json.loads(x)["status"] for x in lines] == [200]
    assert stat.S_IMODE(os.stat(base / "run" / "logs" / "llm.jsonl").st_mode) == 0o600


async def test_other_routes_and_keep_alive(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    gw = await make_gw(max_tokens_cap=800)
    fake.script(reply('{"ok": true}'), reply("second"))
    async with client(gw) as c:
        models = (await c.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == [MODEL]
        r = await c.post("/chat", json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 5000,
                                        "json_mode": True})
        assert r.status_code == 200 and r.json() == {"text": '{"ok": true}'}
        assert fake.requests[-1]["max_tokens"] == 800  # capped, as upstream's gateway
        assert fake.requests[-1]["response_format"] == {"type": "json_object"}
        r = await c.post("/v1/chat/completions", json={**HI, "max_tokens": 50})
        assert r.json()["choices"][0]["message"]["content"] == "second"
        assert fake.requests[-1]["max_tokens"] == 50
        b = (await c.get("/v1/budget")).json()
        assert b == {"model": MODEL, "calls": 2, "max_calls": 100, "usd": b["usd"], "max_usd": 10.0}


async def test_refused_at_max_calls_and_phases(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    gw = await make_gw(budgets={"dev": Budget(max_calls=2), "prod": Budget(max_calls=1)})
    async with client(gw) as c:
        for _ in range(2):
            assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
        r = await c.post("/v1/chat/completions", json=HI)
        assert r.status_code == 429
        err = r.json()["error"]
        assert err["type"] == "budget_exceeded" and err["message"].startswith("LLM budget exhausted")
        assert len(fake.requests) == 2  # the refused call never went upstream
        gw.phase = "prod"
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
        assert (await c.post("/chat", json={"messages": HI["messages"]})).status_code == 429
    s = gw.summary()
    assert s["calls"] == 3 and s["refused"] == 2
    assert (s["by_phase"]["dev"]["calls"], s["by_phase"]["dev"]["refused"]) == (2, 1)
    assert (s["by_phase"]["prod"]["calls"], s["by_phase"]["prod"]["refused"]) == (1, 1)
    assert [r.status for r in gw.records] == [200, 200, 429, 200, 429]
    assert [r.outcome for r in gw.records] == ["forwarded", "forwarded", "refused", "forwarded", "refused"]
    assert gw.records[2].error_type == "budget_exceeded" and gw.records[4].phase == "prod"


async def test_refused_at_max_usd(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    """A call is admitted only if spent + its upper-bound cost fits: the third call is refused
    although $0.0998 is left, since it may cost $0.1003; spend never passes the cap."""
    price = Price(input=1.0, output=1000.0)
    gw = await make_gw(price=price, budgets={"dev": Budget(max_usd=0.3)}, max_tokens_cap=100)
    fake.default = reply("ok", prompt_tokens=100, completion_tokens=100)  # $0.1001 a call
    bound = reservation(HI, price, cap=100)
    assert bound == pytest.approx(0.1003, abs=1e-4)
    async with client(gw) as c:
        codes = [(await c.post("/v1/chat/completions", json=HI)).status_code for _ in range(3)]
        r = await c.post("/v1/chat/completions", json=HI)
    assert codes == [200, 200, 429]
    err = r.json()["error"]
    assert err["type"] == "budget_exceeded" and err["message"].startswith("LLM budget exhausted")
    assert "$0.2002 spent" in err["message"] and f"may cost up to ${bound:.4f}" in err["message"]
    assert gw.summary()["usd"] == pytest.approx(0.2002) and len(fake.requests) == 2
    assert [x.reserved_usd for x in gw.records[:2]] == [pytest.approx(bound)] * 2


def test_dollar_budget_needs_a_price_and_a_token_cap() -> None:
    with pytest.raises(ValueError, match="no price"):
        LLMGateway("http://127.0.0.1:9/v1", "local-model", price=None)
    LLMGateway("http://127.0.0.1:9/v1", "local-model", price=None, budgets={"dev": Budget(max_calls=5)})
    with pytest.raises(ValueError, match="max_tokens_cap"):  # a reply without a bound cannot be reserved
        LLMGateway("http://127.0.0.1:9/v1", MODEL, price=PRICE, budgets={"dev": Budget(max_usd=1.0)})
    LLMGateway("http://127.0.0.1:9/v1", MODEL, price=PRICE, budgets={"dev": Budget(max_usd=1.0)}, max_tokens_cap=10)


def test_from_engagement() -> None:
    gw = LLMGateway.from_engagement({"llm": True, "dev_llm_calls": 10}, "http://x/v1", MODEL, price=PRICE)
    assert gw.budgets == {"dev": Budget(10, 0.25), "prod": Budget(600, 0.30)}
    assert gw.max_tokens_cap == 800 and gw.max_input_chars == 60_000


@pytest.mark.parametrize(("data", "status"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nno colon here\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n", 413),
    (b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411),
    (b"GET /v1/models HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", 431),
])
async def test_malformed_framing(make_gw: Callable[..., Any], data: bytes, status: int) -> None:
    gw = await make_gw()
    out = await raw_exchange(gw, data)
    assert out.startswith(f"HTTP/1.1 {status} ".encode()), out[:200]
    assert b"Connection: close" in out
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
    assert gw.summary()["rejected"] == 1


@pytest.mark.parametrize(("method", "path", "body", "status", "needle"), [
    ("POST", "/v1/chat/completions", b"{not json", 400, "not valid JSON"),
    ("POST", "/v1/chat/completions", b"[1, 2]", 400, "JSON object"),
    ("POST", "/v1/chat/completions", b'{"model": "m"}', 400, "messages"),
    ("POST", "/v1/chat/completions", b'{"messages": ["x"]}', 400, "role"),
    ("POST", "/v1/chat/completions", json.dumps({**HI, "stream": True}).encode(), 400, "stream"),
    ("POST", "/v1/chat/completions", json.dumps({**HI, "tools": "all"}).encode(), 400, "tools"),
    ("POST", "/chat", b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "lots"}', 400, "numbers"),
    ("GET", "/v1/chat/completions", b"", 405, "not allowed"),
    ("POST", "/v1/embeddings", b"{}", 404, "no route"),
])
async def test_bad_requests_keep_the_connection(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                                method: str, path: str, body: bytes, status: int,
                                                needle: str) -> None:
    gw = await make_gw()
    async with client(gw) as c:
        r = await c.request(method, path, content=body, headers={"Content-Type": "application/json"})
        assert r.status_code == status and needle in r.json()["error"]["message"]
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200  # same pool, same gateway
    assert fake.replies_sent == 1 and gw.summary()["calls"] == 1


async def test_oversized_prompt_and_abrupt_clients(make_gw: Callable[..., Any]) -> None:
    gw = await make_gw(max_input_chars=100)
    for _ in range(5):
        _, w = await asyncio.open_unix_connection(str(gw.socket_path))
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"mess")
        w.close()
    async with client(gw) as c:
        big = {"messages": [{"role": "user", "content": "x" * 101}]}
        r = await c.post("/v1/chat/completions", json=big)
        assert r.status_code == 413 and "too large" in r.json()["error"]["message"]
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200


async def test_a_connection_flood_is_capped_and_refused_with_503(make_gw: Callable[..., Any]) -> None:
    """Idle connections past the cap get a 503 at once; once the flood goes away the gateway serves again."""
    from assay.env.net.gateway.server import MAX_CONNECTIONS

    gw = await make_gw()
    held = [await asyncio.open_unix_connection(str(gw.socket_path)) for _ in range(MAX_CONNECTIONS)]
    await asyncio.sleep(0.2)
    assert gw.conns.open == MAX_CONNECTIONS
    reader, writer = await asyncio.open_unix_connection(str(gw.socket_path))
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 503") and b"too_many_connections" in answer
    assert gw.conns.refused >= 1
    for _r, w in held:
        w.close()
    for _ in range(100):
        if gw.conns.open == 0:
            break
        await asyncio.sleep(0.05)
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200


async def test_half_sent_big_bodies_cannot_pile_up(make_gw: Callable[..., Any]) -> None:
    """Clients that each announce a 30 MB body and send a little: the gateway admits bodies only
    while their sum fits MAX_BUFFERED_BYTES; past it a request gets a 503 before its body is
    read, and a normal call still goes through once the hogs are gone."""
    from assay.env.net.gateway.server import MAX_BUFFERED_BYTES

    gw = await make_gw()
    size = 30_000_000
    admitted = MAX_BUFFERED_BYTES // size
    hogs = []
    for _ in range(admitted):
        r, w = await asyncio.open_unix_connection(str(gw.socket_path))
        w.write(f"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: {size}\r\n\r\n".encode() + b"x" * 1024)
        await w.drain()
        hogs.append((r, w))
    await asyncio.sleep(0.2)
    assert gw._buffered == admitted * size
    answer = await raw_exchange(gw, f"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: {size}\r\n\r\n"
                                .encode())
    assert answer.startswith(b"HTTP/1.1 503") and b"server_busy" in answer
    for _r, w in hogs:
        w.close()
    for _ in range(100):
        if gw._buffered == 0:
            break
        await asyncio.sleep(0.05)
    assert gw._buffered == 0
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200


async def test_upstream_faults(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    """Faults after which a provider bills nothing are retried within the call's one reservation."""
    gw = await make_gw(upstream_retries=2)
    fake.script(fault(503), fault(429), reply("third time"), fault(400, message="bad tool schema"),
                fault(500), fault(500), fault(500))
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json=HI)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "third time"
        r = await c.post("/v1/chat/completions", json=HI)  # a provider 4xx is relayed as it is
        assert r.status_code == 400 and "bad tool schema" in r.json()["error"]["message"]
        r = await c.post("/v1/chat/completions", json=HI)
        assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
    s = gw.summary()
    assert s["calls"] == 3 and s["by_phase"]["dev"]["upstream_errors"] == 2
    assert len(fake.requests) == 7 and [r.status for r in gw.records] == [200, 400, 502]
    assert [r.cost_basis for r in gw.records] == ["usage", None, None]  # faults billed nothing: cost 0
    assert s["usd"] == pytest.approx(gw.records[0].cost_usd)


async def test_a_rate_limit_of_its_own_calls_is_answered_429_and_one_of_others_502(
        make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    """A 429 that lasts past the retries: when this gateway sent most of the upstream's recent
    traffic, its caller's burst passed the provider's limit and it is answered 429 as the
    provider would (the delivered system's to handle, graded as it stands); when other
    gateways' traffic dominated, it is the provider's trouble: 502 (a grade is retried, then void)."""
    from assay.env.net.gateway.upstream import SENT

    limited = fault(429, {"error": {"message": "Rate limit reached: Limit 30000 TPM", "type": "tokens",
                                    "code": "rate_limit_exceeded"}})
    own = await make_gw(upstream_retries=1)
    fake.default = limited
    async with client(own) as c:
        r = await c.post("/v1/chat/completions", json=HI)
    assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
    assert "own calls" in r.json()["error"]["message"] and own.records[0].status == 429
    other = await make_gw(upstream_retries=1)
    for _ in range(20):  # another run's heavy traffic to the same upstream
        SENT.add(other.upstream_url, id(own), 10_000)
    async with client(other) as c:
        r = await c.post("/v1/chat/completions", json=HI)
    assert r.status_code == 502 and r.json()["error"]["type"] == "upstream_error"
    assert (other.records[0].error or "").startswith("model provider error")


async def test_upstream_unreachable(make_gw: Callable[..., Any]) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    gw = await make_gw(upstream_url=f"http://127.0.0.1:{port}/v1", upstream_retries=0)
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json=HI)
    assert r.status_code == 502 and "unreachable" in r.json()["error"]["message"]


# --------------------------------------------------------------------------- the budget against a hostile client


def _log_lines(base: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (base / "run" / "logs" / "llm.jsonl").read_text().splitlines()]


async def test_n_is_forced_to_one_and_best_of_removed(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    gw = await make_gw()
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json={**HI, "n": 8, "best_of": 8})).status_code == 200
        assert (await c.post("/v1/chat/completions", json={**HI, "n": 1})).status_code == 200
    assert fake.requests[0]["n"] == 1 and "best_of" not in fake.requests[0].json
    assert fake.requests[1]["n"] == 1
    assert gw.records[0].forced == ["n", "best_of"] and gw.records[1].forced == []


async def test_a_lone_surrogate_or_deep_nesting_in_a_request_is_refused_and_the_connection_kept(
        make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    """A request whose JSON holds a lone surrogate escape (valid JSON, no valid UTF-8), or is
    nested 100,000 deep, is answered 400 with the reason; the next request on the same
    connection goes through (round 8: the surrogate dropped the connection with a traceback)."""
    gw = await make_gw()
    surrogate = b'{"model": "m", "messages": [{"role": "user", "content": "hi \\ud800"}], "max_tokens": 5}'
    deep = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    async with client(gw) as c:
        for body, reason in ((surrogate, "lone surrogate"), (deep, "deep")):
            r = await c.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400 and reason in r.text, r.text
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
    assert len(fake.requests) == 1


@pytest.mark.parametrize(("extra", "needle"), [
    ({"audio": {"voice": "alloy", "format": "wav"}}, "'audio'"),
    ({"modalities": ["text", "audio"]}, "'modalities'"),
    ({"web_search_options": {}}, "'web_search_options'"),
    ({"service_tier": "priority"}, "'service_tier'"),
    ({"models": ["openai/o1-pro"]}, "'models'"),  # OpenRouter's fallback models
    ({"plugins": [{"id": "web"}]}, "'plugins'"),  # OpenRouter's web plugin, billed per result
    ({"tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}, "'input_audio'"),
    ({"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-123"}}]}]}, "'file'"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "audio": {"id": "audio_1"}}]},
     "messages[1].audio"),
])
async def test_what_the_price_table_cannot_cover_is_refused(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                                           base: Path, extra: dict[str, Any], needle: str) -> None:
    gw = await make_gw()
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json={**HI, **extra})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "unsupported_parameter" and needle in err["message"], err
    assert not fake.requests and gw.summary()["calls"] == 0 and gw.summary()["rejected"] == 1
    rec = gw.records[-1]
    assert (rec.outcome, rec.status, rec.error_type) == ("rejected", 400, "unsupported_parameter")
    assert _log_lines(base)[-1]["outcome"] == "rejected"


async def test_price_neutral_fields_go_through(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    extra = {"service_tier": "auto", "modalities": ["text"], "top_k": 40, "seed": 7, "stop": ["\n"], "store": False,
             "reasoning_effort": "low", "response_format": {"type": "json_object"}, "stream": False,
             "stream_options": {"include_usage": True}}
    gw = await make_gw()
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json={**HI, **extra})).status_code == 200
    sent = fake.requests[-1].json
    assert {k: sent[k] for k in extra if k not in ("stream", "stream_options")} == {
        k: v for k, v in extra.items() if k not in ("stream", "stream_options")}
    assert "stream" not in sent and "stream_options" not in sent and gw.records[-1].forced == []


BIG = "x" * 1000  # the gateways below cap a request at 900 characters
SMUGGLED: dict[str, dict[str, Any]] = {
    "tools": {**HI, "tools": [{"type": "function", "function": {"name": "f", "description": BIG}}]},
    "tool_call_arguments": {**HI, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps({"a": BIG})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"}]},
    "image_part": {**HI, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + BIG}}]}]},
    "response_format": {**HI, "response_format": {"type": "json_schema", "json_schema": {
        "name": "s", "schema": {"type": "object", "description": BIG}}}},
    "prediction": {**HI, "prediction": {"type": "content", "content": BIG}},
    "message_name": {**HI, "messages": [{"role": "user", "content": "hi", "name": BIG}]},
    "stop": {**HI, "stop": [BIG]},
    "metadata": {**HI, "metadata": {"note": BIG}},
}


@pytest.mark.parametrize("field", list(SMUGGLED))
async def test_every_field_counts_against_the_input_cap(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                                       field: str) -> None:
    gw = await make_gw(max_input_chars=900)
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json=SMUGGLED[field])
        assert r.status_code == 413, r.text
        assert r.json()["error"]["type"] == "request_too_large" and "limit is 900" in r.json()["error"]["message"]
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200  # the connection goes on
    assert len(fake.requests) == 1
    rec = gw.records[0]
    assert (rec.outcome, rec.error_type) == ("rejected", "request_too_large") and rec.request_chars > 1000
    assert gw.summary()["rejected"] == 1 and gw.summary()["calls"] == 1


async def test_the_input_cap_is_the_json_of_every_field_but_the_model(make_gw: Callable[..., Any],
                                                                     fake: FakeOpenAIServer) -> None:
    body = {"model": "m" * 5000, "messages": [{"role": "user", "content": 'héllo "quoted"\n'}], "tools": TOOLS}
    sent = {k: v for k, v in body.items() if k != "model"} | {"max_tokens": CAP}
    size = len(json.dumps(sent, ensure_ascii=False, separators=(",", ":")))
    exact, under = await make_gw(max_input_chars=size), await make_gw(max_input_chars=size - 1)
    async with client(exact) as c:
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
    async with client(under) as c:
        assert (await c.post("/v1/chat/completions", json=body)).status_code == 413
    assert exact.records[0].request_chars == size == under.records[0].request_chars
    assert len(fake.requests) == 1


@pytest.mark.parametrize(("asked", "sent"), [
    ({}, 800),
    ({"max_tokens": 50}, 50),
    ({"max_tokens": 5000}, 800),
    ({"max_tokens": 0}, 800),
    ({"max_tokens": "lots"}, 800),
    ({"max_completion_tokens": 300}, 300),  # renamed: what a compatible server honours
    ({"max_tokens": 10, "max_completion_tokens": 300}, 300),  # the larger of the two bounds the reply
])
async def test_the_gateway_sends_its_own_output_bound(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                                     asked: dict[str, Any], sent: int) -> None:
    gw = await make_gw()
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json={**HI, **asked})).status_code == 200
    out = fake.requests[-1].json
    assert out["max_tokens"] == sent and "max_completion_tokens" not in out
    assert gw.records[-1].forced == ([] if asked in ({}, {"max_tokens": 50}) else ["max_tokens"])
    assert gw.records[-1].reserved_usd == pytest.approx(reservation({**HI, "max_tokens": sent}))


async def test_without_a_dollar_cap_nothing_needs_a_bound(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    gw = await make_gw(budgets={"dev": Budget(max_calls=5)}, max_tokens_cap=None)
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
        assert (await c.post("/v1/chat/completions", json={**HI, "max_completion_tokens": 9000})).status_code == 200
    assert "max_tokens" not in fake.requests[0].json and fake.requests[1]["max_completion_tokens"] == 9000
    # no bound without max_tokens; the client's own bounds the second call
    assert [(r.reserved_usd is None, r.excess_usd, r.cost_basis) for r in gw.records] == [
        (True, None, "usage"), (False, None, "usage")]
    assert gw.summary()["usd"] > 0


async def test_the_official_api_gets_max_completion_tokens(base: Path) -> None:
    seen: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}],
                                         "usage": {"prompt_tokens": 10, "completion_tokens": 5}})

    gw = LLMGateway("https://api.openai.com/v1", MODEL, price=PRICE, budgets={"dev": Budget(max_usd=1.0)},
                    max_tokens_cap=CAP, transport=httpx.MockTransport(upstream), api_key="sk-x")
    await gw.start(base / "run" / "sock" / "official.sock")
    try:
        async with client(gw) as c:
            assert (await c.post("/v1/chat/completions", json={**HI, "max_tokens": 5000})).status_code == 200
    finally:
        await gw.stop()
    assert seen[0]["max_completion_tokens"] == CAP and "max_tokens" not in seen[0]


async def test_parallel_calls_never_spend_past_the_dollar_cap(make_gw: Callable[..., Any],
                                                              fake: FakeOpenAIServer) -> None:
    """30 calls at once: each is admitted only while spent + held by calls in flight + its own
    bound fits, so the cap holds; settling releases what a call did not use."""
    prompt = {"messages": [{"role": "user", "content": "x" * 1000}]}
    bound = reservation(prompt)
    actual = (1000 * PRICE.input + 100 * PRICE.output) / 1e6  # billed within its bound: a short reply
    cap = 4.5 * bound
    fake.default = delay(1.0, reply("ok", prompt_tokens=1000, completion_tokens=100))
    gw = await make_gw(budgets={"dev": Budget(max_usd=cap)})
    async with client(gw) as c:
        rs = await asyncio.gather(*(c.post("/v1/chat/completions", json=prompt) for _ in range(30)))
        ok = sum(r.status_code == 200 for r in rs)
        assert ok >= 4 and all(r.json()["error"]["type"] == "budget_exceeded" for r in rs if r.status_code != 200)
        fake.default = reply("ok", prompt_tokens=1000, completion_tokens=100)
        after = await c.post("/v1/chat/completions", json=prompt)  # the reservations were released
    spent = gw.summary()["by_phase"]["dev"]["usd"]
    assert spent <= cap, f"${spent:.5f} spent of a ${cap:.5f} cap"
    assert fake.max_in_flight <= 4  # never more calls in flight than the cap can pay for
    assert after.status_code == 200 and spent == pytest.approx((ok + 1) * actual)
    refused = [r for r in gw.records if r.outcome == "refused"]
    assert len(refused) == 30 - ok and all(r.status == 429 and r.error_type == "budget_exceeded" for r in refused)
    assert all(r.excess_usd is None and r.reserved_usd == pytest.approx(bound) for r in gw.records
               if r.outcome == "forwarded")


async def test_parallel_calls_never_pass_the_calls_cap(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    fake.default = delay(0.5, reply("ok"))
    gw = await make_gw(budgets={"dev": Budget(max_calls=3)})
    async with client(gw) as c:
        rs = await asyncio.gather(*(c.post("/v1/chat/completions", json=HI) for _ in range(10)))
    assert sorted(r.status_code for r in rs) == [200] * 3 + [429] * 7
    assert len(fake.requests) == 3 and gw.summary()["refused"] == 7


async def test_a_call_whose_bound_does_not_fit_never_goes_upstream(make_gw: Callable[..., Any],
                                                                   fake: FakeOpenAIServer, base: Path) -> None:
    gw = await make_gw(budgets={"dev": Budget(max_usd=reservation(HI) * 0.99)})
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json=HI)
        small = await c.post("/v1/chat/completions", json={**HI, "max_tokens": 10})  # a smaller bound fits
    assert r.status_code == 429 and "may cost up to" in r.json()["error"]["message"]
    assert small.status_code == 200 and len(fake.requests) == 1
    assert [x["outcome"] for x in _log_lines(base)] == ["refused", "forwarded"]


async def test_images_and_predictions_raise_the_bound(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    gw = await make_gw(image_input_tokens=1000)
    image = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
        {"type": "image_url", "image_url": {"url": "https://x.test/b.png", "detail": "high"}}]}]}
    predicted = {**HI, "prediction": {"type": "content", "content": "def f():\n    return 1\n"}}
    async with client(gw) as c:
        for body in (image, predicted):
            assert (await c.post("/v1/chat/completions", json=body)).status_code == 200
    p_bytes = len(json.dumps(predicted["prediction"], separators=(",", ":")).encode())
    assert gw.records[0].reserved_usd == pytest.approx(reservation(image, images=2, image_tokens=1000))
    assert gw.records[1].reserved_usd == pytest.approx(reservation(predicted, predicted=p_bytes))


async def test_billing_past_the_bound_is_recorded(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    fake.default = reply("ok", prompt_tokens=50_000, completion_tokens=10)  # far more than "hi" can be
    gw = await make_gw()
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
    rec = gw.records[0]
    cost = (50_000 * PRICE.input + 10 * PRICE.output) / 1e6
    assert rec.cost_usd == pytest.approx(cost) and rec.excess_usd == pytest.approx(cost - reservation(HI))
    assert "more than its reservation" in caplog.text


async def test_a_timed_out_call_is_charged_its_reservation(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    """The provider may have billed a call that timed out: no retry (it would bill again), the
    reservation is kept as spent."""
    gw = await make_gw(timeout_s=0.3, upstream_retries=2)
    fake.script(delay(1.0, reply("too late")), malformed())
    async with client(gw) as c:
        r = await c.post("/v1/chat/completions", json=HI)
        assert r.status_code == 504 and r.json()["error"]["type"] == "upstream_error"
        r = await c.post("/v1/chat/completions", json=HI)  # a 200 that is not JSON: billed, maybe
        assert r.status_code == 502 and "not a JSON object" in r.json()["error"]["message"]
    assert len(fake.requests) == 2
    assert [x.cost_basis for x in gw.records] == ["reserved", "reserved"]
    assert gw.summary()["usd"] == pytest.approx(2 * reservation(HI))


async def test_a_call_cut_off_by_the_gateway_stopping_is_charged_its_reservation(
        make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    gw = await make_gw()
    fake.default = delay(2.0, reply("late"))
    body = json.dumps(HI).encode()
    _, writer = await asyncio.open_unix_connection(str(gw.socket_path))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    for _ in range(200):
        if fake.requests:
            break
        await asyncio.sleep(0.01)
    await gw.stop()
    writer.close()
    rec = gw.records[-1]
    assert (rec.status, rec.cost_basis, rec.outcome) == (499, "reserved", "forwarded") and "cancelled" in str(rec.error)
    assert gw.summary()["usd"] == pytest.approx(reservation(HI))


async def test_phases_are_reserved_and_settled_apart(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    bound = reservation(HI)
    fake.default = delay(0.5, reply("ok", prompt_tokens=10, completion_tokens=10))
    gw = await make_gw(budgets={"dev": Budget(max_usd=bound * 1.5), "prod": Budget(max_usd=bound * 1.5)})
    async with client(gw) as c:
        dev = asyncio.ensure_future(c.post("/v1/chat/completions", json=HI))
        await asyncio.sleep(0.2)  # in flight, holding the dev budget
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 429
        gw.phase = "prod"
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200  # prod's own budget
        assert (await dev).status_code == 200
    by_phase = gw.summary()["by_phase"]
    one = (10 * PRICE.input + 10 * PRICE.output) / 1e6
    assert by_phase["dev"]["usd"] == pytest.approx(one) and by_phase["prod"]["usd"] == pytest.approx(one)
    assert (by_phase["dev"]["calls"], by_phase["dev"]["refused"], by_phase["prod"]["calls"]) == (1, 1, 1)
    # each call is recorded in the phase that admitted it, whatever the phase when it ended
    assert sorted((r.phase, r.outcome) for r in gw.records) == [("dev", "forwarded"), ("dev", "refused"),
                                                                ("prod", "forwarded")]



# --------------------------------------------------------------------------- forwarder + client on the host


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_forwarder_and_client_on_the_host(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                                base: Path) -> None:
    gw = await make_gw(budgets={"dev": Budget(max_calls=2)})
    fake.script(reply("hello from the model"), reply('{"a": 1}'))
    port = free_port()
    fwd = install_forwarder(base / "run" / "fwd")
    assert fwd.read_text() == FORWARDER_SCRIPT
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", "-S", str(fwd), f"{port}={gw.socket_path}", stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert await asyncio.wait_for(proc.stdout.readline(), 10) == b"ready\n"
        install_llm_client(base / "ws", port, MODEL)
        cfg = json.loads((base / "ws" / "system" / "config" / "llm.json").read_text())
        assert cfg == {"base_url": f"http://127.0.0.1:{port}/v1", "model": MODEL,
                       "url": f"http://127.0.0.1:{port}/chat"}
        code = ("import llm_client as L\n"
                "print(L.complete([{'role': 'user', 'content': 'hi'}]))\n"
                "print(L.chat([{'role': 'user', 'content': 'json please'}], json_mode=True))\n"
                "print(L.budget()['calls'])\n"
                "try:\n    L.complete('again')\nexcept L.BudgetExceeded as e:\n"
                "    print('BUDGET', e.status, isinstance(e, L.LLMError), e)\n")
        p = await asyncio.create_subprocess_exec(
            sys.executable, "-E", "-s", "-c", code, cwd=base / "ws" / "system",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out = (await asyncio.wait_for(p.communicate(), 30))[0].decode()
        assert p.returncode == 0, out
        lines = out.splitlines()
        assert lines[:3] == ["hello from the model", '{"a": 1}', "2"]
        assert lines[3].startswith("BUDGET 429 True") and "LLM budget exhausted" in lines[3]
        assert fake.requests[0]["model"] == MODEL
    finally:
        proc.kill()
        await proc.wait()


async def test_forwarder_rejects_bad_arguments() -> None:
    for args in [[], ["nope"], ["0=/x.sock"], ["8001="]]:
        p = await asyncio.create_subprocess_exec(sys.executable, "-I", "-S", "-c", FORWARDER_SCRIPT, *args,
                                                 stdout=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(p.communicate(), 10)
        assert p.returncode == 2 and out.startswith(b"error:")


def test_wrap_command_validates() -> None:
    assert wrap_command("true", [], "/run/assay/forwarder.py") == "true"
    with pytest.raises(ValueError):
        wrap_command("true", [(70000, "/run/assay/llm.sock")], "/f.py")
    with pytest.raises(ValueError):
        wrap_command("true", [(8001, "")], "/f.py")
    cmd = wrap_command("echo 'hi there'", [(8001, "/run/assay/a b.sock")], "/run/assay/forwarder.py")
    assert cmd.endswith("\necho 'hi there'") and "'8001=/run/assay/a b.sock'" in cmd
    compile(LLM_CLIENT_PY, "llm_client.py", "exec")


# --------------------------------------------------------------------------- inside bubblewrap


def _bwrap_ok() -> bool:
    from assay.env.bwrap import bwrap_available

    return shutil.which("bwrap") is not None and bwrap_available()


@pytest.mark.skipif(not _bwrap_ok(), reason="bubblewrap (bwrap) not usable here")
async def test_llm_client_inside_the_sandbox(make_gw: Callable[..., Any], fake: FakeOpenAIServer,
                                             base: Path) -> None:
    from assay.env.sandbox import Sandbox

    gw = await make_gw(budgets={"dev": Budget(max_calls=2)})
    sock_dir = gw.socket_path.parent
    install_forwarder(sock_dir)
    install_llm_client(base / "ws", 8001, MODEL)
    fake.script(reply("hi from the fake model"))
    pairs = [(8001, f"/run/assay/{gw.socket_path.name}")]

    def wrap(cmd: str) -> str:
        return wrap_command(cmd, pairs, "/run/assay/forwarder.py")

    sb = Sandbox(base / "ws", ro_binds=[(sock_dir, "/run/assay")])
    try:
        sb.prepare()
        call = "import llm_client; print(llm_client.complete([{'role':'user','content':'hi'}]))"
        r = await sb.run(wrap(f'cd system && python3 -c "{call}"'), timeout_s=60)
        assert r.exit_code == 0, r.output
        assert r.output.strip() == "hi from the fake model"
        assert fake.requests[-1]["messages"] == [{"role": "user", "content": "hi"}]
        # the host's loopback (where the fake provider listens) is out of reach from inside
        direct = (f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{fake.port}/v1/models', "
                  "timeout=3)")
        r = await sb.run(wrap(f'python3 -c "{direct}"; echo rc=$?'), timeout_s=60)
        assert "rc=1" in r.output and "Connection refused" in r.output, r.output
        # the command's own status comes back; `wait` does not wait for the forwarder
        r = await sb.run(wrap("sleep 0.05 & wait; echo waited; exit 7"), timeout_s=30)
        assert r.exit_code == 7 and r.output == "waited\n", r.output
        # the budget, seen from delivered code
        code = ("import llm_client as L\nprint(L.complete('one more'))\n"
                "try:\n    L.complete('too many')\nexcept L.BudgetExceeded as e:\n    print('refused:', e)\n")
        (base / "ws" / "system" / "probe.py").write_text(code)
        sb.prepare()
        r = await sb.run(wrap("python3 probe.py"), cwd="system", timeout_s=60)
        assert r.exit_code == 0, r.output
        assert "refused: LLM gateway refused the call (HTTP 429): LLM budget exhausted" in r.output
        # without the forwarder the port is closed
        r = await sb.run(f'cd system && python3 -c "{call}"; echo rc=$?', timeout_s=60)
        assert "LLM gateway unreachable" in r.output and "rc=1" in r.output
    finally:
        await sb.close()
    s = gw.summary()
    assert s["calls"] == 2 and s["refused"] == 1


# --------------------------------------------------------------------------- scenario plumbing


def test_resolve_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.config import Config, ModelAlias, PriceConfig
    from assay.env.net.gateway.scenario import gateway_model_spec, resolve_upstream
    from assay.errors import InputError

    cfg = Config(models={
        "gw": ModelAlias(provider="openai", model="m1", base_url="http://127.0.0.1:9/v1",
                         prices=PriceConfig(input=1.0, output=2.0)),
        "claude": ModelAlias(provider="anthropic", model="claude-x", prices=PriceConfig(input=1.0, output=2.0)),
        "unpriced": ModelAlias(provider="openai", model="no-such-model-xyz", base_url="http://127.0.0.1:9/v1"),
    })
    up = resolve_upstream("gw", cfg)
    assert (up.url, up.model, up.price) == ("http://127.0.0.1:9/v1", "m1", Price(input=1.0, output=2.0))
    for spec, words in (("claude", "OpenAI-compatible"), ("anthropic/claude-sonnet-4-5", "OpenAI-compatible"),
                        ("unpriced", "no price known"), ("nonsense", "unknown model spec")):
        with pytest.raises(InputError, match=words) as e:
            resolve_upstream(spec, cfg)
        assert e.value.field == "--gateway-model"
    monkeypatch.setenv("ASSAY_GATEWAY_MODEL", "gw")
    assert gateway_model_spec() == "gw"
    assert gateway_model_spec(type("O", (), {"gateway_model": "other"})()) == "other"


async def test_relays_on_the_host(tmp_path: Path) -> None:
    """unix -> tcp (a service's relay) and tcp -> unix (the gateway without a sandbox)."""
    from assay.env.net.relay import Relay

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sock = tmp_path / "svc_echo.sock"
    a = Relay.unix_to_tcp(sock, port)
    await a.start()
    b = Relay.tcp_to_unix(sock)
    await b.start()
    try:
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o666
        for opener in (lambda: asyncio.open_unix_connection(str(sock)),
                       lambda: asyncio.open_connection("127.0.0.1", b.port)):
            r, w = await opener()
            w.write(b"ping")
            await w.drain()
            assert await asyncio.wait_for(r.read(), 5) == b"echo:ping"
            w.close()
    finally:
        await b.stop()
        await a.stop()
        server.close()
    assert not sock.exists()


@pytest.mark.skipif(not _bwrap_ok(), reason="bubblewrap (bwrap) not usable here")
async def test_sandbox_command_wrapper_reaches_a_host_service(base: Path) -> None:
    """Sandbox(command_wrapper=...) wraps every command (argv ones too, as policy scripts run):
    a host TCP service, relayed to a socket in /run/assay, answers on 127.0.0.1:8002 inside."""
    from assay.env.net.relay import Relay
    from assay.env.sandbox import Sandbox

    async def hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nservice says hi")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hello, "127.0.0.1", 0)
    sock_dir = base / "run" / "svc"
    sock_dir.mkdir()
    os.chmod(sock_dir, 0o755)
    install_forwarder(sock_dir)
    relay = Relay.unix_to_tcp(sock_dir / "svc_hello.sock", server.sockets[0].getsockname()[1])
    await relay.start()
    pairs = [(8002, "/run/assay/svc_hello.sock")]
    sb = Sandbox(base / "ws", ro_binds=[(sock_dir, "/run/assay")],
                 command_wrapper=lambda cmd: wrap_command(cmd, pairs, "/run/assay/forwarder.py"))
    try:
        sb.prepare()
        code = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8002/x', timeout=5).read().decode())"
        r = await sb.run(["python3", "-c", code], timeout_s=60)
        assert r.exit_code == 0 and r.output.strip() == "service says hi", r.output
        r = await sb.run("exit 3", timeout_s=30)
        assert r.exit_code == 3
    finally:
        await sb.close()
        await relay.stop()
        server.close()


async def test_dev_phase_spend_is_reported_on_the_run(make_gw: Callable[..., Any], fake: FakeOpenAIServer) -> None:
    """What `grade.llm` of a scenario run holds: the dev gateway's settled spend (the agent's own
    use of the company LLM while it worked), refusals included, beside the prod phase."""
    from types import SimpleNamespace
    from typing import cast

    from assay.scenario.lifecycle import DeliveredCopy

    fake.default = reply("ok", prompt_tokens=1000, completion_tokens=200)
    gw = await make_gw(budgets={"dev": Budget(max_calls=1, max_usd=1.0)})
    async with client(gw) as c:
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 200
        assert (await c.post("/v1/chat/completions", json=HI)).status_code == 429
    run = SimpleNamespace(spec=SimpleNamespace(engagement=SimpleNamespace(llm=True)), level="L3", gateway=gw,
                          gateway_spec="gw")
    llm, prod_usd = DeliveredCopy(cast(Any, run))._llm_fields()
    assert llm is not None
    cost = (1000 * PRICE.input + 200 * PRICE.output) / 1e6
    dev = llm["by_phase"]["dev"]
    assert (dev["calls"], dev["refused"], dev["input_tokens"], dev["output_tokens"]) == (1, 1, 1000, 200)
    assert dev["usd"] == pytest.approx(cost) and llm["usd"] == pytest.approx(cost) and llm["refused"] == 1
    assert llm["by_phase"]["prod"]["calls"] == 0 and prod_usd == 0.0  # llm_cost_usd is the prod spend


def test_gateway_model_is_in_the_options_hash_only_when_set() -> None:
    from assay.campaign.options import RunOptions as CampaignOptions

    assert "gateway_model" not in CampaignOptions().result_options()
    assert CampaignOptions(gateway_model="gw").result_options()["gateway_model"] == "gw"
