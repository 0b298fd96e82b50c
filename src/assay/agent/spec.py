"""Agent specs (`--agent`): from a string to something that can run a task.

Model clients are created once per spec and shared by every run of the campaign.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from assay.agent.base import Agent
from assay.agent.policies import NoopAgent, PolicyAgent, ScriptAgent, load_script
from assay.agent.prices import Price, lookup_price
from assay.config import Config
from assay.errors import InputError
from assay.task.model import Task

POLICY_SPEC = re.compile(r"^(reference|literal|(shortcut|bypass|alternate|probe):[A-Za-z0-9_.\-]+)$")
PROVIDERS = ("openai", "anthropic")


class AgentFactory:
    """A resolved `--agent` spec; `for_task` gives the agent for one task, or None to skip it."""

    def __init__(self, spec: str, config: Config, *, web_search: bool = False) -> None:
        self.spec = spec
        self.config = config
        self.web_search = web_search
        self.kind: str
        self._client = None
        self._price: Price | None = None
        self._temperature: float | None = None
        self._max_tokens = 32_000
        if spec == "noop":
            self.kind = "noop"
        elif POLICY_SPEC.match(spec):
            self.kind = "policy"
        elif spec.startswith("script:"):
            self.kind = "script"
            self.script_path = Path(spec.removeprefix("script:"))
            load_script(self.script_path)  # refuse a bad script up front
        elif spec.startswith("human:"):
            raise InputError(None, "--agent", f"{spec!r}: people work through the web app (assay serve), not assay run")
        elif "/" in spec and spec.split("/", 1)[0] in PROVIDERS:
            self.kind = "model"
            provider, model = spec.split("/", 1)
            if not model:
                raise InputError(None, "--agent", f"{spec!r}: missing model name")
            _require_key(provider)
            overrides = {k: Price(**v.model_dump()) for k, v in config.prices.items()}
            self._make(provider, model, base_url=None, api_key=None, context=None)
            self._price = lookup_price(provider, model, overrides)
        elif spec in config.models:
            self.kind = "model"
            alias = config.models[spec]
            if alias.provider not in PROVIDERS:
                raise InputError("assay.toml", f"models.{spec}.provider",
                                 f"unknown provider {alias.provider!r} (openai or anthropic)")
            key = None
            if alias.api_key_env:
                key = os.environ.get(alias.api_key_env)
                if key is None:
                    raise InputError("assay.toml", f"models.{spec}.api_key_env",
                                     f"environment variable {alias.api_key_env} is not set")
            self._make(alias.provider, alias.model, base_url=alias.base_url, api_key=key, context=alias.context,
                       retries={"max_retries": alias.max_retries, "retry_base_delay": alias.retry_base_delay,
                                "timeout_s": alias.timeout_s})
            self._temperature = alias.temperature
            if alias.max_tokens:
                self._max_tokens = alias.max_tokens
            if alias.prices is not None:
                self._price = Price(**alias.prices.model_dump())
            else:
                self._price = lookup_price(alias.provider, alias.model)
        else:
            raise InputError(None, "--agent", f"unknown agent spec {spec!r} (noop, reference, literal, "
                                              "shortcut:NAME, bypass:NAME, alternate:NAME, probe:NAME, script:PATH, "
                                              "openai/MODEL, anthropic/MODEL, or a model alias from assay.toml)")

    def _make(self, provider: str, model: str, *, base_url: str | None, api_key: str | None,
              context: int | None, retries: dict[str, float] | None = None) -> None:
        from assay.agent.clients import client_class
        from assay.agent.loop import ModelAgent  # noqa: F401  (imported now, not inside the first run)

        client_class(provider)
        self.provider = provider
        self.model_name = model
        self._client_args = dict(provider=provider, model=model, base_url=base_url, api_key=api_key,
                                 context_tokens=context, **(retries or {}))

    @property
    def client(self):  # noqa: ANN201 - ModelClient, created lazily so validation needs no key
        if self._client is None:
            from assay.agent.clients import make_client

            self._client = make_client(**self._client_args)
        return self._client

    def options(self) -> dict[str, object]:
        """What about this agent can change a result (goes into the options hash)."""
        if self.kind == "model":
            return {"model": f"{self.provider}/{self.model_name}", "base_url": self._client_args.get("base_url"),
                    "temperature": self._temperature, "max_tokens": self._max_tokens}
        if self.kind == "script":
            return {"script_sha": _sha(self.script_path)}
        return {}

    def skip_reason(self, task: Task) -> str | None:
        if self.kind == "policy" and self.spec not in task.policies:
            what = "reference" if self.spec == "reference" else self.spec
            return f"task {task.id} has no {what} policy"
        return None

    def for_task(self, task: Task) -> Agent:
        if self.kind == "noop":
            return NoopAgent()
        if self.kind == "policy":
            return PolicyAgent(self.spec, task.policies[self.spec])
        if self.kind == "script":
            return ScriptAgent(self.spec, self.script_path)
        from assay.agent.loop import ModelAgent

        return ModelAgent(self.spec, self.client, self._price, max_reply_tokens=self._max_tokens,
                          temperature=self._temperature, web_search=self.web_search)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


KEY_ENV = {"openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"), "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}


def _require_key(provider: str) -> None:
    """Refuse up front (exit 2) rather than void every run when no key is set."""
    key_env, url_env = KEY_ENV[provider]
    if os.environ.get(key_env):
        return
    url = os.environ.get(url_env, "")
    if any(h in url for h in ("127.0.0.1", "localhost", "[::1]")):
        return
    raise InputError(None, "--agent", f"{key_env} is not set (or point {url_env} at a local server)")
