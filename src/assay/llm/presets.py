"""Named presets for the OpenAI-compatible servers people run: `ollama/qwen2.5:7b` needs no
`assay.toml`.

A preset is an OpenAI-compatible endpoint by name: its default base URL, the environment
variable that overrides it, and the variable of its API key. The local servers (vLLM, SGLang,
Ollama, llama.cpp's server) default to their usual ports on 127.0.0.1 and need no key; the
hosted ones (OpenRouter, Groq, Together, Fireworks, DeepSeek) need theirs. Each preset is
registered as a provider of its own (`assay.llm.providers`), spoken through the OpenAI client.
An `assay.toml` alias with `provider = "ollama"` takes the preset's URL and key variable unless
it gives its own `base_url` / `api_key_env`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRESETS", "Preset"]


@dataclass(frozen=True)
class Preset:
    name: str
    default_url: str
    url_env: str
    key_env: str
    local: bool  # a server on this machine: the key is optional wherever it runs

    @property
    def key_required(self) -> bool:
        return not self.local


PRESETS: tuple[Preset, ...] = (
    Preset("vllm", "http://127.0.0.1:8000/v1", "VLLM_BASE_URL", "VLLM_API_KEY", local=True),
    Preset("sglang", "http://127.0.0.1:30000/v1", "SGLANG_BASE_URL", "SGLANG_API_KEY", local=True),
    Preset("ollama", "http://127.0.0.1:11434/v1", "OLLAMA_BASE_URL", "OLLAMA_API_KEY", local=True),
    Preset("llama-cpp", "http://127.0.0.1:8080/v1", "LLAMA_CPP_BASE_URL", "LLAMA_CPP_API_KEY", local=True),
    Preset("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_BASE_URL", "OPENROUTER_API_KEY", local=False),
    Preset("groq", "https://api.groq.com/openai/v1", "GROQ_BASE_URL", "GROQ_API_KEY", local=False),
    Preset("together", "https://api.together.xyz/v1", "TOGETHER_BASE_URL", "TOGETHER_API_KEY", local=False),
    Preset("fireworks", "https://api.fireworks.ai/inference/v1", "FIREWORKS_BASE_URL", "FIREWORKS_API_KEY",
           local=False),
    Preset("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_BASE_URL", "DEEPSEEK_API_KEY", local=False),
)
