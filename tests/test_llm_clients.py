"""Model clients end to end against the fake provider servers (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import base64

import pytest

from assay.errors import ProviderError
from assay.llm.clients import AnthropicClient, ModelClient, OpenAIClient, make_client
from assay.llm.messages import ImagePart, Message, ToolCall, ToolSpec, Usage
from assay.llm.prices import BUILTIN_PRICES, Price, cost_usd, lookup_price
from tests.fakes import delay, fault, malformed, reply
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake-image-bytes").decode()
TOOLS = [
    ToolSpec(name="search", description="Search the files.",
             parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
    ToolSpec(name="read", description="Read a file.",
             parameters={"type": "object", "properties": {"path": {"type": "string"}}}),
]
CONVO = [Message(role="system", content="You are careful."), Message(role="user", content="Hi there")]


@pytest.fixture
def oai():
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def ant():
    with FakeAnthropicServer() as srv:
        yield srv


def openai_client(srv: FakeOpenAIServer, **kw) -> OpenAIClient:
    kw.setdefault("retry_base_delay", 0.001)
    kw.setdefault("timeout_s", 5.0)
    return make_client("openai", "gpt-4.1", base_url=srv.url, **kw)  # type: ignore[return-value]


def anthropic_client(srv: FakeAnthropicServer, **kw) -> AnthropicClient:
    kw.setdefault("retry_base_delay", 0.001)
    kw.setdefault("timeout_s", 5.0)
    return make_client("anthropic", "claude-haiku-4-5", base_url=srv.url, **kw)  # type: ignore[return-value]


def make(provider: str, srv, **kw) -> ModelClient:
    return openai_client(srv, **kw) if provider == "openai" else anthropic_client(srv, **kw)


@pytest.fixture(params=["openai", "anthropic"])
def both(request):
    srv = FakeOpenAIServer() if request.param == "openai" else FakeAnthropicServer()
    with srv:
        yield request.param, srv


# ----------------------------------------------------------------------------- plain replies


async def test_openai_text_reply(oai):
    oai.script(reply("Hello!"))
    async with openai_client(oai, temperature=0.2) as client:
        r = await client.complete(CONVO)
    assert r.text == "Hello!" and r.tool_calls == [] and r.stop_reason == "stop" and r.model == "gpt-4.1"
    body = oai.last.json
    assert oai.last.path == "/v1/chat/completions"
    assert body["messages"] == [{"role": "system", "content": "You are careful."},
                                {"role": "user", "content": "Hi there"}]
    assert body["temperature"] == 0.2 and "tools" not in body and "response_format" not in body
    assert oai.last.headers["authorization"].startswith("Bearer ")
    assert r.usage.input_tokens > 0 and r.usage.output_tokens > 0


async def test_anthropic_text_reply_with_cache_breakpoints(ant):
    ant.script(reply("Hello!"))
    async with anthropic_client(ant, temperature=0.5) as client:
        r = await client.complete(CONVO, max_tokens=100)
    assert r.text == "Hello!" and r.stop_reason == "end_turn" and r.model == "claude-haiku-4-5"
    body = ant.last.json
    assert ant.last.path == "/v1/messages"
    assert body["system"] == [{"type": "text", "text": "You are careful.", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Hi there", "cache_control": {"type": "ephemeral"}}]}]
    assert body["max_tokens"] == 100 and body["temperature"] == 0.5 and "tools" not in body


async def test_default_reply_and_token_estimates(both):
    provider, srv = both
    async with make(provider, srv) as client:
        r = await client.complete(CONVO)
    assert r.text == "ok"
    assert srv.total_prompt_tokens == r.usage.input_tokens > 0
    assert srv.total_completion_tokens == r.usage.output_tokens >= 1


# ----------------------------------------------------------------------------- tool calls


async def test_openai_tool_calls_round_trip(oai):
    oai.script(reply("", [("search", {"q": "invoices"}, "call_1"), ("read", '{"path": "a.txt"}', "call_2")]),
               reply("done"))
    async with openai_client(oai) as client:
        r = await client.complete(CONVO, TOOLS)
        assert r.stop_reason == "tool_calls" and r.text == ""
        assert [(c.id, c.name, c.arguments) for c in r.tool_calls] == [
            ("call_1", "search", {"q": "invoices"}), ("call_2", "read", {"path": "a.txt"})]
        assert all(c.arguments_error is None for c in r.tool_calls)
        body = oai.last.json
        assert body["tool_choice"] == "auto"
        assert body["tools"][0] == {"type": "function", "function": {
            "name": "search", "description": "Search the files.", "parameters": TOOLS[0].parameters}}
        convo = [*CONVO, Message(role="assistant", tool_calls=r.tool_calls),
                 Message(role="tool", tool_call_id="call_1", name="search", content="3 hits"),
                 Message(role="tool", tool_call_id="call_2", name="read", content="contents")]
        r2 = await client.complete(convo, TOOLS)
    assert r2.text == "done"
    sent = oai.last.json["messages"]
    assert sent[2]["role"] == "assistant" and sent[2]["content"] == ""  # not null: llama.cpp's server refuses it
    assert sent[2]["tool_calls"][0] == {"id": "call_1", "type": "function",
                                        "function": {"name": "search", "arguments": '{"q": "invoices"}'}}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "3 hits"}
    assert sent[4] == {"role": "tool", "tool_call_id": "call_2", "content": "contents"}


async def test_anthropic_tool_calls_and_merged_results(ant):
    ant.script(reply("Let me look.", [("search", {"q": "x"}, "toolu_1"), ("read", {"path": "b"}, "toolu_2")]),
               reply("done"))
    async with anthropic_client(ant) as client:
        r = await client.complete(CONVO, TOOLS)
        assert r.stop_reason == "tool_use" and r.text == "Let me look."
        assert [(c.id, c.name, c.arguments) for c in r.tool_calls] == [
            ("toolu_1", "search", {"q": "x"}), ("toolu_2", "read", {"path": "b"})]
        assert ant.last.json["tools"][0] == {"name": "search", "description": "Search the files.",
                                             "input_schema": TOOLS[0].parameters}
        convo = [*CONVO, Message(role="assistant", content=r.text, tool_calls=r.tool_calls),
                 Message(role="tool", tool_call_id="toolu_1", content="3 hits"),
                 Message(role="tool", tool_call_id="toolu_2", content="file b")]
        r2 = await client.complete(convo, TOOLS)
    assert r2.text == "done"
    msgs = ant.last.json["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert msgs[1]["content"] == [{"type": "text", "text": "Let me look."},
                                  {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}},
                                  {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "b"}}]
    assert msgs[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3 hits"},
        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "file b",
         "cache_control": {"type": "ephemeral"}}]


async def test_openai_malformed_tool_arguments(oai):
    oai.script(reply("", [("search", '{"q": "unterminated', "c1"), ("read", "[1, 2]", "c2"), ("read", "", "c3")]))
    async with openai_client(oai) as client:
        r = await client.complete(CONVO, TOOLS)
        bad, arr, empty = r.tool_calls
        assert bad.arguments == {} and "not valid JSON" in bad.arguments_error
        assert bad.raw_arguments == '{"q": "unterminated'
        assert arr.arguments == {} and "JSON object" in arr.arguments_error and arr.raw_arguments == "[1, 2]"
        assert empty.arguments == {} and empty.arguments_error is None
        # echoing the bad call back sends the raw text the model produced
        convo = [*CONVO, Message(role="assistant", tool_calls=[bad]),
                 Message(role="tool", tool_call_id="c1", content="error: bad arguments")]
        await client.complete(convo, TOOLS)
    assert oai.last.json["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"q": "unterminated'


async def test_anthropic_malformed_tool_input(ant):
    ant.script(reply("", [("search", "not json at all", "toolu_9")]))
    async with anthropic_client(ant) as client:
        r = await client.complete(CONVO, TOOLS)
    (call,) = r.tool_calls
    assert call.id == "toolu_9" and call.arguments == {} and call.arguments_error
    assert call.raw_arguments == "not json at all"


# ----------------------------------------------------------------------------- images


async def test_openai_images_sent_as_data_uris(oai):
    msgs = [Message(role="user", content="What is this?", images=[ImagePart(media_type="image/png", data_b64=PNG)])]
    async with openai_client(oai) as client:
        await client.complete(msgs)
        assert oai.images == [f"data:image/png;base64,{PNG}"]
        assert oai.last.json["messages"][0]["content"] == [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]
        # an image returned by a tool rides in a user message after the tool results
        convo = [*msgs, Message(role="assistant", tool_calls=[ToolCall(id="c1", name="read", arguments={})]),
                 Message(role="tool", tool_call_id="c1", content="screenshot",
                         images=[ImagePart(media_type="image/jpeg", data_b64=PNG)])]
        await client.complete(convo, TOOLS)
    sent = oai.last.json["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[3]["content"][1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert len(oai.images) == 3


async def test_anthropic_images_sent_as_base64_blocks(ant):
    msgs = [Message(role="user", content="What is this?", images=[ImagePart(media_type="image/png", data_b64=PNG)])]
    async with anthropic_client(ant) as client:
        await client.complete(msgs)
        await client.complete([*msgs, Message(role="assistant", tool_calls=[ToolCall(id="t1", name="read")]),
                               Message(role="tool", tool_call_id="t1", content="shot",
                                       images=[ImagePart(media_type="image/webp", data_b64=PNG)])])
    assert ant.images[0] == {"media_type": "image/png", "data": PNG}
    assert ant.images[-1] == {"media_type": "image/webp", "data": PNG}
    first = ant.requests[0].json["messages"][0]["content"]
    assert first[0] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


async def test_fake_rejects_bad_images(oai):
    msgs = [Message(role="user", content="x", images=[ImagePart(media_type="text/plain", data_b64="")])]
    async with openai_client(oai) as client:
        with pytest.raises(ProviderError) as err:
            await client.complete(msgs)
    assert err.value.status == 400 and len(oai.requests) == 1


# ----------------------------------------------------------------------------- usage and prices


async def test_openai_usage_with_cached_tokens(oai):
    oai.script(reply("hi", prompt_tokens=1000, completion_tokens=50, cached_tokens=400))
    async with openai_client(oai) as client:
        r = await client.complete(CONVO)
    assert r.usage == Usage(input_tokens=600, cache_read_tokens=400, output_tokens=50)
    assert oai.total_prompt_tokens == 1000 and oai.total_completion_tokens == 50 and oai.total_cached_tokens == 400
    price = lookup_price("openai", "gpt-4.1")
    assert cost_usd(r.usage, price) == pytest.approx((600 * 2.0 + 400 * 0.5 + 50 * 8.0) / 1e6)


async def test_anthropic_usage_with_cache_reads_and_writes(ant):
    ant.script(reply("hi", prompt_tokens=1000, completion_tokens=20, cached_tokens=300, cache_write_tokens=200))
    async with anthropic_client(ant) as client:
        r = await client.complete(CONVO)
    assert r.usage == Usage(input_tokens=500, cache_read_tokens=300, cache_write_tokens=200, output_tokens=20)
    price = lookup_price("anthropic", "claude-sonnet-4-5-20250929")
    assert price == BUILTIN_PRICES["anthropic/claude-sonnet-4-5"]
    assert cost_usd(r.usage, price) == pytest.approx((500 * 3 + 300 * 0.3 + 200 * 3.75 + 20 * 15) / 1e6)


def test_price_lookup_rules():
    assert lookup_price("openai", "gpt-4.1-2025-04-14") == BUILTIN_PRICES["openai/gpt-4.1"]
    assert lookup_price("openai", "gpt-4.1-mini") == BUILTIN_PRICES["openai/gpt-4.1-mini"]
    assert lookup_price("anthropic", "claude-3-5-haiku-latest") == BUILTIN_PRICES["anthropic/claude-3-5-haiku"]
    assert lookup_price("openai", "my-finetune") is None
    assert lookup_price("openrouter", "openai/gpt-4o") == BUILTIN_PRICES["openai/gpt-4o"]
    mine = Price(input=1.0, output=2.0)
    assert lookup_price("openai", "gpt-4.1-2025-04-14", {"openai/gpt-4.1": mine}) == mine
    assert lookup_price("local", "llama", {"local/llama": mine}) == mine
    for key in ("openai/gpt-4.1", "openai/gpt-4.1-mini", "openai/gpt-4o", "openai/gpt-4o-mini", "openai/o3",
                "openai/o4-mini", "anthropic/claude-sonnet-4-5", "anthropic/claude-opus-4-1",
                "anthropic/claude-haiku-4-5"):
        assert key in BUILTIN_PRICES


def test_cost_unknown_is_none_and_defaults_to_input_price():
    u = Usage(input_tokens=1_000_000, cache_read_tokens=1_000_000, cache_write_tokens=1_000_000,
              output_tokens=1_000_000)
    assert cost_usd(u, None) is None
    assert cost_usd(u, lookup_price("openai", "nope")) is None
    assert cost_usd(u, Price(input=1.0, output=4.0)) == pytest.approx(1 + 1 + 1 + 4)
    assert cost_usd(Usage(), Price(input=1.0, output=4.0)) == 0.0


# ----------------------------------------------------------------------------- retries and faults


async def test_429_then_success_is_retried(both):
    provider, srv = both
    srv.script(fault(429), fault(429, headers={"retry-after": "0.01"}), reply("finally"))
    async with make(provider, srv) as client:
        r = await client.complete(CONVO)
        assert r.text == "finally"
        assert len(srv.requests) == 3 and client.retries == 2 and client.attempts == 3


async def test_persistent_500_raises_provider_error(both):
    provider, srv = both
    srv.script(*[fault(500)] * 10)
    async with make(provider, srv, max_retries=3) as client:
        with pytest.raises(ProviderError) as err:
            await client.complete(CONVO)
    assert err.value.status == 500 and "4 attempts" in err.value.reason
    assert len(srv.requests) == 4


async def test_529_overloaded_is_retried(ant):
    ant.script(fault(529), reply("ok after overload"))
    async with anthropic_client(ant) as client:
        assert (await client.complete(CONVO)).text == "ok after overload"
    assert len(ant.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_4xx_fail_immediately(oai, status):
    oai.script(fault(status, message="nope"), reply("never"))
    async with openai_client(oai) as client:
        with pytest.raises(ProviderError) as err:
            await client.complete(CONVO)
    assert err.value.status == status and len(oai.requests) == 1 and "nope" in err.value.reason


async def test_malformed_body_is_retried(both):
    provider, srv = both
    srv.script(malformed(), malformed("<html>oops</html>", content_type="text/html"), reply("good"))
    async with make(provider, srv) as client:
        assert (await client.complete(CONVO)).text == "good"
    assert len(srv.requests) == 3


async def test_malformed_forever_raises(oai):
    oai.default = malformed()
    async with openai_client(oai, max_retries=2) as client:
        with pytest.raises(ProviderError) as err:
            await client.complete(CONVO)
    assert "malformed" in err.value.reason and len(oai.requests) == 3


async def test_delay_beyond_timeout_is_retried(both):
    provider, srv = both
    srv.script(delay(1.0, then=reply("too late")), reply("in time"))
    async with make(provider, srv, timeout_s=0.3) as client:
        r = await client.complete(CONVO)
    assert r.text == "in time" and len(srv.requests) == 2  # the first reply, had it been waited for, says "too late"


async def test_timeouts_exhaust_retries(oai):
    oai.default = delay(1.0)
    async with openai_client(oai, timeout_s=0.2, max_retries=1) as client:
        with pytest.raises(ProviderError) as err:
            await client.complete(CONVO)
    assert "timed out" in err.value.reason and err.value.status is None and len(oai.requests) == 2


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_a_dead_server_is_named_as_such(provider: str) -> None:
    """Nothing listening (a local model server that died) says so, with the address, not the
    SDKs' bare "Connection error."."""
    srv = (FakeOpenAIServer() if provider == "openai" else FakeAnthropicServer()).start()
    url = srv.url
    srv.stop()
    client = make_client(provider, "m", base_url=url, max_retries=1, retry_base_delay=0.001)
    with pytest.raises(ProviderError) as err:
        await client.complete(CONVO)
    await client.aclose()
    origin = url.split("/v1")[0].rstrip("/")
    assert f"connection refused at {origin}: no model server is listening there" in err.value.reason, err.value.reason


async def test_a_server_that_hangs_up_is_said_to_have_closed_the_connection() -> None:
    """A server that reads the request and closes without a reply (a crashing model server)."""

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = make_client("openai", "m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1,
                         retry_base_delay=0.001)
    try:
        with pytest.raises(ProviderError) as err:
            await client.complete(CONVO)
    finally:
        await client.aclose()
        server.close()
    assert f"http://127.0.0.1:{port} closed the connection without a reply" in err.value.reason, err.value.reason


# ----------------------------------------------------------------------------- json mode, web search


async def test_json_mode(both):
    provider, srv = both
    srv.script(reply('{"a": 1}'))
    async with make(provider, srv) as client:
        r = await client.complete(CONVO, json_mode=True)
    assert r.text == '{"a": 1}'
    body = srv.last.json
    if provider == "openai":
        assert body["response_format"] == {"type": "json_object"}
    else:
        assert "JSON" in body["system"][-1]["text"]


async def test_openai_web_search_via_responses_api(oai):
    oai.script(reply("Paris is the capital [Wikipedia].", prompt_tokens=500, cached_tokens=100,
                     completion_tokens=30, citations=[("https://en.wikipedia.org/wiki/Paris", "Wikipedia"),
                                                      ("https://example.org/fr", None)]))
    msgs = [*CONVO, Message(role="user", content="look", images=[ImagePart(media_type="image/png", data_b64=PNG)])]
    async with openai_client(oai) as client:
        r = await client.complete(msgs, TOOLS, web_search=True, max_tokens=200)
    assert oai.last.path == "/v1/responses"
    body = oai.last.json
    assert {"type": "web_search"} in body["tools"] and body["max_output_tokens"] == 200
    assert body["input"][0] == {"role": "system", "content": "You are careful."}
    assert oai.images == [f"data:image/png;base64,{PNG}"]
    assert r.text == "Paris is the capital [Wikipedia]." and r.stop_reason == "stop"
    assert [(c.url, c.title) for c in r.citations] == [("https://en.wikipedia.org/wiki/Paris", "Wikipedia"),
                                                       ("https://example.org/fr", "https://example.org/fr")]
    assert r.usage == Usage(input_tokens=400, cache_read_tokens=100, output_tokens=30)


async def test_openai_web_search_responses_tool_call(oai):
    oai.script(reply("", [("search", {"q": "z"}, "call_x")]))
    async with openai_client(oai) as client:
        r = await client.complete(CONVO, TOOLS, web_search=True)
    assert r.stop_reason == "tool_calls" and r.tool_calls[0].id == "call_x" and r.tool_calls[0].arguments == {"q": "z"}


async def test_openai_web_search_plugin_for_openrouter(oai):
    oai.script(reply("News.", citations=[("https://news.example/a", "A")]))
    async with openai_client(oai, web_search_mode="plugin") as client:
        r = await client.complete(CONVO, web_search=True)
    assert oai.last.path == "/v1/chat/completions"
    assert oai.last.json["plugins"] == [{"id": "web"}]
    assert [(c.url, c.title) for c in r.citations] == [("https://news.example/a", "A")]


def test_openrouter_base_url_selects_plugin_mode():
    c = OpenAIClient("openai/gpt-4.1", base_url="https://openrouter.ai/api/v1", api_key="k")
    assert c.web_search_mode == "plugin"
    c2 = OpenAIClient("gpt-4.1", base_url="https://api.openai.com/v1", api_key="k")
    assert c2.web_search_mode == "responses"


async def test_anthropic_web_search(ant):
    ant.script(reply("Berlin is the capital.", search_query="capital of germany",
                     citations=[("https://de.example/berlin", "Berlin page")]))
    async with anthropic_client(ant) as client:
        r = await client.complete(CONVO, web_search=True)
    tools = ant.last.json["tools"]
    assert {"type": "web_search_20250305", "name": "web_search", "max_uses": 5} in tools
    assert r.text == "Berlin is the capital."
    assert [(c.url, c.title) for c in r.citations] == [("https://de.example/berlin", "Berlin page")]
    assert r.tool_calls == []  # server tool use is not a client tool call


# ----------------------------------------------------------------------------- construction, concurrency


def test_make_client_and_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    with pytest.raises(ValueError):
        make_client("gemini", "x")
    with pytest.raises(ProviderError, match="OPENAI_API_KEY not set"):
        make_client("openai", "gpt-4.1")
    with pytest.raises(ProviderError, match="ANTHROPIC_API_KEY not set"):
        make_client("anthropic", "claude-haiku-4-5", base_url="https://api.anthropic.com")
    assert isinstance(make_client("openai", "gpt-4.1", base_url="http://127.0.0.1:9/v1"), OpenAIClient)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    c = make_client("anthropic", "claude-haiku-4-5", context_tokens=50_000)
    assert isinstance(c, AnthropicClient) and c.context_tokens == 50_000 and c.max_reply_tokens == 25_000
    assert make_client("openai", "gpt-4o", base_url="http://localhost:1/v1").context_tokens == 128_000
    assert make_client("openai", "gpt-4o", base_url="http://localhost:1/v1").max_reply_tokens == 32_000


async def test_concurrent_requests(oai):
    oai.latency_s = 0.3
    async with openai_client(oai) as client:
        replies = await asyncio.gather(*[client.complete(CONVO) for _ in range(60)])
    assert all(r.text == "ok" for r in replies) and len(oai.requests) == 60
    assert oai.max_in_flight >= 30  # at least 30 of them at the server at once: not one after another


async def test_handler_callback(ant):
    seen = []

    def handler(body):
        seen.append(body["messages"][-1]["content"][-1]["text"])
        return reply(f"echo {len(seen)}")

    ant.handler = handler
    async with anthropic_client(ant) as client:
        r1 = await client.complete(CONVO)
        r2 = await client.complete(CONVO)
    assert (r1.text, r2.text) == ("echo 1", "echo 2") and seen == ["Hi there", "Hi there"]
