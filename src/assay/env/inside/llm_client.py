"""Client for the company LLM gateway. Copied into each workspace's system/.

    from llm_client import complete
    text = complete([{"role": "user", "content": "..."}], max_tokens=300)

    from llm_client import chat            # the older interface, also available
    text = chat([{"role": "user", "content": "..."}], max_tokens=300, json_mode=False)

One fixed model sits behind the gateway. Usage is metered and capped: check `budget()`.
When the allowance is used up, calls raise BudgetExceeded (a subclass of LLMError); any
other failure raises LLMError. The endpoint is read from config/llm.json next to this file;
production points that file at the production gateway, so do not hard-code the URL.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

_CFG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config", "llm.json")


class LLMError(RuntimeError):
    """The gateway could not give an answer. `status` is the HTTP status, if there was one."""

    def __init__(self, message: str, status: int | None = None, kind: str | None = None) -> None:
        RuntimeError.__init__(self, message)
        self.status = status
        self.kind = kind


class BudgetExceeded(LLMError):
    """The LLM allowance (calls or dollars) is used up: further calls fail the same way."""


def _config() -> dict[str, Any]:
    try:
        with open(_CFG, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise LLMError(f"cannot read the LLM gateway configuration {_CFG}: {e}") from None
    if not isinstance(cfg, dict) or not cfg.get("base_url"):
        raise LLMError(f"{_CFG} has no base_url")
    return cfg


def _request(url: str, payload: dict[str, Any] | None = None, timeout: float = 300) -> Any:
    data = None if payload is None else json.dumps(payload).encode("utf-8")
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    # The gateway is local: bypass any system proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        raw = e.read().decode("utf-8", "replace")
        message, kind = raw[:300], None
        try:
            err = json.loads(raw).get("error")
            if isinstance(err, dict):
                message, kind = err.get("message") or message, err.get("type")
            elif isinstance(err, str):
                message = err
        except (ValueError, AttributeError):
            pass
        if e.code == 429:
            raise BudgetExceeded(f"LLM gateway refused the call (HTTP 429): {message}", 429, kind) from None
        raise LLMError(f"LLM gateway error (HTTP {e.code}): {message}", e.code, kind) from None
    except (urllib.error.URLError, OSError) as e:
        raise LLMError(f"LLM gateway unreachable: {e}") from None
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError:
        raise LLMError("LLM gateway sent a reply that is not JSON") from None


def complete(messages: list[dict[str, Any]] | str, model: str | None = None, **kw: Any) -> str:
    """Text of one chat completion. `messages` is a list of {"role", "content"} dicts (a plain
    string is taken as one user message); other keyword arguments (max_tokens, temperature,
    response_format, tools, ...) go into the request as they are; `timeout` is in seconds."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    timeout = kw.pop("timeout", 300)
    cfg = _config()
    payload = dict(kw)
    payload["model"] = model or cfg.get("model") or "default"
    payload["messages"] = messages
    d = _request(cfg["base_url"].rstrip("/") + "/chat/completions", payload, timeout)
    try:
        content = d["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise LLMError("LLM gateway reply has no choices[0].message") from None
    return content or ""


def chat(messages: list[dict[str, Any]] | str, max_tokens: int = 400, temperature: float = 0.0,
         json_mode: bool = False, timeout: float = 120) -> str:
    """Upstream FDE-Gym's interface: the reply text."""
    kw: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature, "timeout": timeout}
    if json_mode:
        kw["response_format"] = {"type": "json_object"}
    return complete(messages, **kw)


def budget() -> dict[str, Any]:
    """{"model", "calls", "max_calls", "usd", "max_usd"} of the gateway."""
    return _request(_config()["base_url"].rstrip("/") + "/budget", None, 30)
