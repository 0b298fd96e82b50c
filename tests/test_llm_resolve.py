"""assay.llm.resolve: aliases and provider specs, price precedence, key checks, result options."""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from assay.config import Config, ModelAlias, PriceConfig
from assay.errors import InputError
from assay.llm.messages import Usage
from assay.llm.prices import BUILTIN_PRICES, Price
from assay.llm.resolve import DEFAULT_MAX_REPLY_TOKENS, Model, is_loopback, is_model_spec, resolve_model

LOCAL = "http://127.0.0.1:8000/v1"


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ASSAY_CONFIG", "/nonexistent/assay.toml")  # never the developer's own file
    yield


def cfg(**aliases: ModelAlias) -> Config:
    return Config(models=aliases, prices={"openai/gpt-4.1": PriceConfig(input=9.0, output=99.0),
                                          "openai/house": PriceConfig(input=0.5, output=1.5)})


# --------------------------------------------------------------------------- specs and aliases


def test_a_provider_spec() -> None:
    s = resolve_model("openai/gpt-4.1-mini", Config(), require_key=False)
    assert (s.spec, s.provider, s.model, s.alias, s.name) == ("openai/gpt-4.1-mini", "openai", "gpt-4.1-mini",
                                                              False, "openai/gpt-4.1-mini")
    assert s.base_url is None and s.api_key is None and s.max_tokens == DEFAULT_MAX_REPLY_TOKENS
    a = resolve_model("anthropic/claude-sonnet-4-5", Config(), require_key=False)
    assert (a.provider, a.model) == ("anthropic", "claude-sonnet-4-5")


def test_a_model_name_may_hold_slashes() -> None:
    s = resolve_model("openai/meta-llama/Llama-3-8B", Config(), require_key=False)
    assert (s.provider, s.model) == ("openai", "meta-llama/Llama-3-8B")


def test_an_alias() -> None:
    config = cfg(local=ModelAlias(model="qwen2.5-7b", base_url=LOCAL, temperature=0.3, context=32000,
                                  max_tokens=2048, max_retries=1, retry_base_delay=0.5, timeout_s=30))
    s = resolve_model("local", config)
    assert (s.spec, s.provider, s.model, s.alias, s.name) == ("local", "openai", "qwen2.5-7b", True,
                                                              "openai/qwen2.5-7b")
    assert (s.base_url, s.temperature, s.context, s.max_tokens) == (LOCAL, 0.3, 32000, 2048)
    assert (s.max_retries, s.retry_base_delay, s.timeout_s) == (1, 0.5, 30)


def test_an_alias_named_like_a_provider_spec_wins() -> None:
    config = cfg(**{"openai/gpt-4.1": ModelAlias(model="proxy-model", base_url=LOCAL)})
    s = resolve_model("openai/gpt-4.1", config)
    assert s.alias is True and s.model == "proxy-model"


@pytest.mark.parametrize("spec", ["gpt-4.1", "google/gemini", "openai/", "openai", "", "anthropic/"])
def test_unknown_specs_are_refused_naming_the_flag(spec: str) -> None:
    with pytest.raises(InputError) as e:
        resolve_model(spec, Config(), field="--judge", require_key=False)
    assert e.value.field == "--judge" and e.value.file is None
    assert e.value.reason.startswith(f"unknown model spec {spec!r}")


def test_an_alias_with_an_unknown_provider_names_the_toml_field() -> None:
    with pytest.raises(InputError) as e:
        resolve_model("g", cfg(g=ModelAlias(provider="google", model="gemini")), require_key=False)
    assert (e.value.file, e.value.field) == ("assay.toml", "models.g.provider")
    assert e.value.reason == ("unknown provider 'google' (openai, anthropic, vllm, sglang, ollama, llama-cpp, "
                              "openrouter, groq, together, fireworks or deepseek)")


def test_is_model_spec() -> None:
    config = cfg(local=ModelAlias(model="m", base_url=LOCAL))
    assert is_model_spec("local", config) and is_model_spec("openai/x", config) and is_model_spec("anthropic/y", config)
    assert not is_model_spec("noop", config) and not is_model_spec("script:a.jsonl", config)
    assert not is_model_spec("google/gemini", config)


# --------------------------------------------------------------------------- prices


def test_price_precedence() -> None:
    config = cfg(priced=ModelAlias(model="gpt-4.1", prices=PriceConfig(input=1.0, cached_input=0.1, output=2.0)),
                 unpriced=ModelAlias(model="gpt-4.1"), builtin=ModelAlias(model="gpt-4o"),
                 house=ModelAlias(model="house"), mystery=ModelAlias(model="mystery-1"))
    price = {name: resolve_model(name, config, require_key=False).price
             for name in ("priced", "unpriced", "builtin", "house", "mystery")}
    assert price["priced"] == Price(input=1.0, cached_input=0.1, output=2.0)  # the alias's own prices
    assert price["unpriced"] == Price(input=9.0, output=99.0)  # [prices] beats the built-in table
    assert price["builtin"] == BUILTIN_PRICES["openai/gpt-4o"]
    assert price["house"] == Price(input=0.5, output=1.5)  # [prices] for a model with no built-in price
    assert price["mystery"] is None  # unknown: None, never 0


def test_prices_of_provider_specs() -> None:
    config = cfg()
    assert resolve_model("openai/gpt-4.1", config, require_key=False).price == Price(input=9.0, output=99.0)
    assert resolve_model("openai/gpt-4o-mini", config, require_key=False).price == BUILTIN_PRICES["openai/gpt-4o-mini"]
    assert resolve_model("openai/gpt-4o-mini-2024-07-18", config, require_key=False).price == \
        BUILTIN_PRICES["openai/gpt-4o-mini"]  # a dated id falls back to its base price
    assert resolve_model("anthropic/claude-haiku-4-5-20251001", config, require_key=False).price == \
        BUILTIN_PRICES["anthropic/claude-haiku-4-5"]
    assert resolve_model("openai/nobody-knows", config, require_key=False).price is None


def test_model_cost() -> None:
    m = Model(resolve_model("p", cfg(p=ModelAlias(model="x", base_url=LOCAL,
                                                  prices=PriceConfig(input=2.0, cached_input=0.5, output=8.0)))))
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000, cache_read_tokens=2_000_000, cache_write_tokens=0)
    assert m.cost(usage) == pytest.approx(2.0 + 4.0 + 1.0)
    free = Model(resolve_model("f", cfg(f=ModelAlias(model="unknown-x", base_url=LOCAL))))
    assert free.cost(usage) is None
    assert repr(m) == "Model(p)"


# --------------------------------------------------------------------------- keys


def test_a_provider_spec_without_a_key_is_refused() -> None:
    with pytest.raises(InputError) as e:
        resolve_model("openai/gpt-4.1", Config(), field="--agent")
    assert e.value.field == "--agent"
    assert e.value.reason == "OPENAI_API_KEY is not set (or point OPENAI_BASE_URL at a local server)"
    with pytest.raises(InputError, match="ANTHROPIC_API_KEY is not set"):
        resolve_model("anthropic/claude-sonnet-4-5", Config(), field="--judge")


def test_a_key_in_the_environment_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    s = resolve_model("openai/gpt-4.1", Config())
    assert s.api_key is None and s.key() == "sk-test"  # read when used, never copied into the spec


@pytest.mark.parametrize("url", [LOCAL, "http://localhost:11434/v1", "http://[::1]:8080", "http://127.1.2.3"])
def test_a_loopback_base_url_needs_no_key(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    assert resolve_model("openai/local-model", Config()).endpoint() == url
    assert resolve_model("l", cfg(l=ModelAlias(model="m", base_url=url))).endpoint() == url


def test_a_remote_base_url_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InputError, match="OPENAI_API_KEY is not set"):
        resolve_model("r", cfg(r=ModelAlias(model="m", base_url="https://api.example.com/v1")))
    monkeypatch.setenv("OPENAI_BASE_URL", "https://openrouter.ai/api/v1")
    with pytest.raises(InputError, match="OPENAI_API_KEY is not set"):
        resolve_model("openai/gpt-4.1", Config())


def test_an_aliases_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    config = cfg(team=ModelAlias(model="m", base_url="https://llm.example.com/v1", api_key_env="TEAM_LLM_KEY"))
    with pytest.raises(InputError) as e:
        resolve_model("team", config)
    assert (e.value.file, e.value.field) == ("assay.toml", "models.team.api_key_env")
    assert e.value.reason == "environment variable TEAM_LLM_KEY is not set"
    assert resolve_model("team", config, require_key=False).api_key is None  # validation needs no key
    monkeypatch.setenv("TEAM_LLM_KEY", "k-123")
    s = resolve_model("team", config)
    assert s.api_key == "k-123" and s.key() == "k-123"
    assert "k-123" not in repr(s)


def test_require_key_false_skips_the_check() -> None:
    assert resolve_model("openai/gpt-4.1", Config(), require_key=False).key() is None


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1:8000/v1", True), ("http://localhost", True), ("http://LOCALHOST:1/x", True),
    ("http://[::1]:9/v1", True), ("http://127.255.0.1", True),
    (None, False), ("", False), ("https://api.openai.com/v1", False), ("http://10.0.0.1:8000", False),
    ("http://localhost.example.com", False), ("http://127.0.0.1.example.com/v1", False),
    ("http://127.attacker.example/v1", False),
])
def test_is_loopback(url: str | None, loopback: bool) -> None:
    """A host name that merely starts with "127." is a remote host, not this machine."""
    assert is_loopback(url) is loopback


# --------------------------------------------------------------------------- result options and the client


def test_result_options() -> None:
    config = cfg(local=ModelAlias(model="qwen", base_url=LOCAL, temperature=0.2, max_tokens=1024, max_retries=9,
                                  timeout_s=5, prices=PriceConfig(input=1, output=2)))
    opts = resolve_model("local", config).result_options()
    assert opts["model"] == "openai/qwen" and opts["base_url"] == LOCAL
    assert (opts["temperature"], opts["max_tokens"]) == (0.2, 1024)
    assert not {"max_retries", "timeout_s", "retry_base_delay", "api_key", "price"} & set(opts)
    plain = resolve_model("openai/gpt-4.1", Config(), require_key=False).result_options()
    assert plain == {"model": "openai/gpt-4.1", "base_url": None, "temperature": None,
                     "max_tokens": DEFAULT_MAX_REPLY_TOKENS}


def test_result_options_cover_the_context_size() -> None:
    """An alias's `context` sets the agent loop's context budget (`trim_context` cuts older
    tool outputs to fit), so it can change a result and belongs in the run key."""
    small = resolve_model("m", cfg(m=ModelAlias(model="qwen", base_url=LOCAL, context=8192)))
    large = resolve_model("m", cfg(m=ModelAlias(model="qwen", base_url=LOCAL, context=131072)))
    assert small.result_options() != large.result_options()


class FakeClient:
    def __init__(self, provider: str, model: str, **kwargs: Any) -> None:
        self.provider, self.model, self.kwargs = provider, model, kwargs
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


async def test_the_client_is_made_when_first_used_and_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[FakeClient] = []

    def make_client(provider: str, model: str, **kwargs: Any) -> FakeClient:
        made.append(FakeClient(provider, model, **kwargs))
        return made[-1]

    # A stand-in for assay.llm.clients: importing it loads both provider SDKs (seconds), and
    # what is tested here is when and how `Model` asks for its client.
    fake = types.ModuleType("assay.llm.clients")
    fake.make_client = make_client  # type: ignore[attr-defined]
    fake.client_class = lambda provider: FakeClient  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "assay.llm.clients", fake)
    alias = ModelAlias(model="qwen", base_url=LOCAL, context=4096, max_retries=2, retry_base_delay=0.1, timeout_s=9)
    m = Model(resolve_model("local", cfg(local=alias)))
    assert made == []  # resolving needs no client (and no key)
    client = m.client
    assert m.client is client and len(made) == 1
    assert (made[0].provider, made[0].model) == ("openai", "qwen")
    assert made[0].kwargs == {"base_url": LOCAL, "api_key": None, "context_tokens": 4096, "max_retries": 2,
                              "retry_base_delay": 0.1, "timeout_s": 9}
    await m.aclose()
    assert made[0].closed is True
    assert m.client is not client and len(made) == 2  # a closed model makes a new client when used again
