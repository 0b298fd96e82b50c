"""Named presets of OpenAI-compatible servers (assay.llm.presets): `ollama/MODEL` and the others
resolve by name, without an assay.toml; end to end through `assay run` against a fake server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.config import Config, ModelAlias
from assay.errors import InputError
from assay.llm.presets import PRESETS
from assay.llm.resolve import resolve_model
from tests.fakes import reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import assay, reply_task, report

_PRESET_VARS = {v for p in PRESETS for v in (p.key_env, p.url_env)}


@pytest.fixture(autouse=True)
def no_provider_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in [k for k in os.environ if k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_")) or k in _PRESET_VARS]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("ASSAY_CONFIG", "/nonexistent/assay.toml")
    yield


def test_the_presets() -> None:
    assert [p.name for p in PRESETS] == ["vllm", "sglang", "ollama", "llama-cpp", "openrouter", "groq", "together",
                                         "fireworks", "deepseek"]
    assert {p.name for p in PRESETS if p.local} == {"vllm", "sglang", "ollama", "llama-cpp"}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_every_preset_resolves_by_name_to_its_url(preset: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from assay.llm.presets import Preset

    assert isinstance(preset, Preset)
    s = resolve_model(f"{preset.name}/some-model", Config(), require_key=False)
    assert (s.provider, s.model, s.name) == (preset.name, "some-model", f"{preset.name}/some-model")
    assert s.endpoint() == preset.default_url
    monkeypatch.setenv(preset.url_env, "http://127.0.0.1:9999/v1")
    assert s.endpoint() == "http://127.0.0.1:9999/v1"
    monkeypatch.setenv(preset.key_env, "k-1")
    assert s.key() == "k-1"


def test_a_local_preset_needs_no_key_even_on_another_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_model("ollama/qwen2.5:7b", Config()).key() is None
    monkeypatch.setenv("VLLM_BASE_URL", "http://gpu-box.internal:8000/v1")
    assert resolve_model("vllm/Qwen/Qwen2.5-7B-Instruct", Config()).endpoint() == "http://gpu-box.internal:8000/v1"


def test_a_hosted_preset_names_its_own_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")  # an OpenAI key is never another company's
    with pytest.raises(InputError) as e:
        resolve_model("groq/llama-3.3-70b-versatile", Config(), field="--agent")
    assert e.value.field == "--agent"
    assert e.value.reason == "GROQ_API_KEY is not set (or point GROQ_BASE_URL at a local server)"
    monkeypatch.setenv("GROQ_API_KEY", "gsk-1")
    assert resolve_model("groq/llama-3.3-70b-versatile", Config()).key() == "gsk-1"


def test_an_alias_of_a_preset_takes_its_url_unless_it_gives_one() -> None:
    config = Config(models={"q": ModelAlias(provider="ollama", model="qwen2.5:7b"),
                            "r": ModelAlias(provider="ollama", model="qwen2.5:7b", base_url="http://127.0.0.1:1/v1")})
    assert resolve_model("q", config).endpoint() == "http://127.0.0.1:11434/v1"
    assert resolve_model("r", config).endpoint() == "http://127.0.0.1:1/v1"


def test_a_hosted_preset_prices_a_model_named_by_its_maker() -> None:
    s = resolve_model("openrouter/openai/gpt-4.1", Config(), require_key=False)
    assert s.price is not None and s.price.input == 2.0
    assert resolve_model("ollama/qwen2.5:7b", Config()).price is None  # unknown: cost null, never 0


# --------------------------------------------------------------------------- through `assay run`


def test_ollama_by_name_runs_without_an_assay_toml(tmp_path: Path) -> None:
    task = reply_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(reply("42", prompt_tokens=120, completion_tokens=3, cached_tokens=20))
        r = assay("run", str(task), "--agent", "ollama/qwen2.5:7b", "-q", cwd=tmp_path,
                  env={"OLLAMA_BASE_URL": srv.url})
        assert r.returncode == 0, r.stdout + r.stderr
        (sent,) = srv.requests
    assert not (tmp_path / "assay.toml").exists()
    assert sent.path == "/v1/chat/completions" and sent["model"] == "qwen2.5:7b"
    (run,) = report(tmp_path)["runs"]
    assert (run["agent"], run["status"], run["passed"]) == ("ollama/qwen2.5:7b", "done", True)
    u = run["usage"]
    assert (u["input_tokens"], u["cache_read_tokens"], u["output_tokens"], u["cost_usd"]) == (100, 20, 3, None)


def test_a_hosted_preset_sends_its_own_key_and_never_the_openai_one(tmp_path: Path) -> None:
    task = reply_task(tmp_path / "tasks" / "t1")
    with FakeOpenAIServer() as srv:
        srv.script(reply("42"))
        r = assay("run", str(task), "--agent", "together/meta-llama/Llama-3.3-70B-Instruct-Turbo", "-q", cwd=tmp_path,
                  env={"TOGETHER_BASE_URL": srv.url, "TOGETHER_API_KEY": "tgp-secret", "OPENAI_API_KEY": "sk-openai"})
        assert r.returncode == 0, r.stdout + r.stderr
        (sent,) = srv.requests
    assert sent.headers["authorization"] == "Bearer tgp-secret"
    assert sent["model"] == "meta-llama/Llama-3.3-70B-Instruct-Turbo"


def test_a_hosted_preset_without_its_key_is_exit_2_naming_the_variable(tmp_path: Path) -> None:
    task = reply_task(tmp_path / "tasks" / "t1")
    r = assay("run", str(task), "--agent", "deepseek/deepseek-chat", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-openai"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "DEEPSEEK_API_KEY is not set" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / ".assay").exists()
