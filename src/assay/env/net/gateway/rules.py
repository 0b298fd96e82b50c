"""What a request may carry upstream, and the bound of what it can be billed.

The code spending a phase's budget runs in the sandbox and is not trusted, so the gateway
enforces the budget on what it forwards, not on what the client says:

- One completion per call: `n` is forced to 1 and `best_of` is removed (`forced` in the
  call's record names what was changed).
- Only fields whose cost the price table covers go upstream: the OpenAI Chat Completions
  request fields in `FORWARDED_FIELDS` (with the samplers compatible servers add). Refused
  with 400, code `unsupported_parameter`, before any upstream call: `audio` and `modalities`
  other than text (audio tokens), `web_search_options` (billed per search), a `service_tier`
  other than `auto`/`default` (the price table is the standard tier's), content parts other
  than `text`, `image_url` and `refusal` (audio and file parts), a message's `audio`
  reference, tools other than `function`/`custom`, and every field not in the list (a
  provider's own fields, such as OpenRouter's `models` or `plugins`, can change the model or
  bill extra).
- Output: the gateway sends its own bound, `max_tokens` (`max_completion_tokens` to
  api.openai.com) = the client's `max_tokens`/`max_completion_tokens` (the larger, if both),
  at most `max_tokens_cap`, and the cap when the client gave none or a bad value. A phase with
  a dollar cap needs `max_tokens_cap` (an unbounded reply cannot be reserved).
- Input: the whole request counts against `max_input_chars`: the characters of the compact
  JSON of everything forwarded except the model name (messages with their names, tool calls
  and image parts, tools, response_format, prediction, stop, ...). A larger request is
  refused with 413, type `request_too_large`, before any upstream call.
- The bound of a call (`Call.bound`, priced by `assay.env.net.gateway.budget`):
      input tokens  <= UTF-8 bytes of that JSON + REQUEST_OVERHEAD_TOKENS
                       + `image_input_tokens` per image part (every input token priced at the
                       dearer of the input and cached-input prices)
      output tokens <= the max_tokens sent + the UTF-8 bytes of `prediction` (rejected
                       prediction tokens are billed as output)
  (a text token is at least one byte; an image's tokens do not depend on its bytes, so it gets
  an allowance, by default OpenAI's dearest image, gpt-4o-mini's 48,169 tokens).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from assay.record import Usage

__all__ = ["FORWARDED_FIELDS", "IMAGE_INPUT_TOKENS", "REQUEST_OVERHEAD_TOKENS", "UPSTREAM_MAX_INPUT_CHARS",
           "UPSTREAM_MAX_TOKENS_CAP", "Call", "Reject", "RequestRules", "check_fields", "error_body", "unsupported"]


# Upstream FDE-Gym's gateway caps (harness/llm_gateway.py); from_engagement applies them.
UPSTREAM_MAX_TOKENS_CAP = 800
UPSTREAM_MAX_INPUT_CHARS = 60_000

# Input tokens a provider may bill beyond the request's own bytes: the chat template's role
# and turn markers, the rendered tool and schema preambles. Generous on purpose.
REQUEST_OVERHEAD_TOKENS = 256
# Tokens reserved per image part: OpenAI's dearest image, a high-detail 2048x768 picture on
# gpt-4o-mini (2,833 + 8 tiles x 5,667 = 48,169 tokens), rounded up.
IMAGE_INPUT_TOKENS = 50_000

# OpenAI Chat Completions request fields forwarded as the client sent them, and the samplers
# that compatible servers (vLLM, llama.cpp) add. None of them bills anything but tokens.
FORWARDED_FIELDS: frozenset[str] = frozenset({
    "messages", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs", "metadata",
    "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_retention",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "stop", "store", "temperature",
    "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
    "top_k", "min_p", "repetition_penalty",
})
_MAX_TOKENS_KEYS = ("max_tokens", "max_completion_tokens")
# Set, checked or removed by the gateway itself.
_GATEWAY_FIELDS = frozenset({"model", "n", "best_of", "stream", "stream_options", "modalities", "service_tier",
                             *_MAX_TOKENS_KEYS})
_UNPRICED = {"audio": "audio output is priced apart from the model's tokens",
             "web_search_options": "web search is billed per call, apart from the model's tokens"}
_SERVICE_TIERS = ("auto", "default")  # the price table is the standard tier's
_PART_TYPES = ("text", "image_url", "refusal")
_TOOL_TYPES = ("function", "custom")


@dataclass(frozen=True)
class Call:
    """A request made ready to go upstream, and the bound of what it can be billed."""

    body: dict[str, Any]
    chars: int
    bound: Usage | None  # None: the output is not bounded (no max_tokens cap)
    forced: tuple[str, ...]


class Reject(Exception):
    """A request answered with an error by the gateway itself (status, message, error type)."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 close: bool = False, code: str | None = None, chars: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code or kind
        self.close = close
        self.chars = chars


def unsupported(message: str) -> Reject:
    return Reject(400, message, "invalid_request_error", code="unsupported_parameter")


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def check_fields(body: dict[str, Any]) -> None:
    """Refuse the fields whose cost the price table cannot cover (see the module docstring)."""
    for key, why in _UNPRICED.items():
        if key in body:
            raise unsupported(f"'{key}' is not supported by this gateway: {why}")
    unknown = sorted(k for k in body if k not in FORWARDED_FIELDS and k not in _GATEWAY_FIELDS)
    if unknown:
        raise unsupported(f"unsupported request field(s) {', '.join(map(repr, unknown))}: this gateway "
                          "forwards the OpenAI chat completions fields only")
    modalities = body.get("modalities")
    if modalities is not None and modalities != ["text"]:
        raise unsupported("'modalities' must be [\"text\"]: this gateway serves text only")
    tier = body.get("service_tier")
    if tier is not None and tier not in _SERVICE_TIERS:
        raise unsupported(f"'service_tier' {tier!r} is not supported: use 'auto' or 'default'")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise Reject(400, "'tools' must be an array")
        for i, t in enumerate(tools):
            if not isinstance(t, dict) or t.get("type") not in _TOOL_TYPES:
                raise unsupported(f"tools[{i}]: only 'function' and 'custom' tools are supported")


class RequestRules:
    """The gateway's request rules (a part of `LLMGateway`): a request checked and made ready to
    go upstream, with the bound of what it can be billed."""

    model: str
    max_tokens_cap: int | None
    max_input_chars: int | None
    image_input_tokens: int
    _max_tokens_key: str

    @staticmethod
    def _check_messages(body: dict[str, Any]) -> int:
        """Refuse malformed messages and unpriced parts; the number of image parts."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Reject(400, "'messages' must be a non-empty array")
        images = 0
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise Reject(400, f"messages[{i}] must be an object with a string 'role'")
            if "audio" in m:
                raise unsupported(f"messages[{i}].audio is not supported by this gateway: audio is priced apart "
                                  "from the model's tokens")
            content = m.get("content")
            for j, part in enumerate(content if isinstance(content, list) else []):
                kind = part.get("type") if isinstance(part, dict) else None
                if kind not in _PART_TYPES:
                    raise unsupported(f"messages[{i}].content[{j}]: content parts of type {kind!r} are not "
                                      "supported by this gateway (text, image_url and refusal are)")
                images += kind == "image_url"
        return images

    def _output_tokens(self, body: dict[str, Any], out: dict[str, Any], forced: list[str]) -> int | None:
        """Put the gateway's output bound into `out`; the bound (None: none, no cap is set)."""
        asked = {k: body[k] for k in _MAX_TOKENS_KEYS if k in body}
        cap = self.max_tokens_cap
        if cap is None:  # no cap (and so no dollar budget): forwarded as sent
            out.update(asked)
            vals = list(asked.values())
            return max(vals) if vals and all(_positive_int(v) for v in vals) else None
        good = [v for v in asked.values() if _positive_int(v)]
        bound = min(max(good), cap) if good else cap
        out[self._max_tokens_key] = bound
        if any(out.get(k) != v for k, v in asked.items()):  # clamped, renamed, or one of two dropped
            forced.append("max_tokens")
        return bound

    def _prepare(self, body: dict[str, Any], images: int) -> Call:
        """The request that goes upstream, its size against the input cap and its billing bound."""
        forced: list[str] = []
        out: dict[str, Any] = {"model": self.model}
        out.update((k, v) for k, v in body.items() if k in FORWARDED_FIELDS or k in ("modalities", "service_tier"))
        if "n" in body:
            out["n"] = 1
            if body["n"] != 1:
                forced.append("n")
        if "best_of" in body:
            forced.append("best_of")
        output = self._output_tokens(body, out, forced)
        text = _compact({k: v for k, v in out.items() if k != "model"})
        chars = len(text)
        if self.max_input_chars is not None and chars > self.max_input_chars:
            raise Reject(413, f"request too large: {chars} characters (the JSON of every field but the model); "
                              f"the limit is {self.max_input_chars}", "request_too_large", chars=chars)
        bound: Usage | None = None
        if output is not None:
            predicted = len(_compact(out["prediction"]).encode("utf-8")) if "prediction" in out else 0
            bound = Usage(input_tokens=len(text.encode("utf-8")) + REQUEST_OVERHEAD_TOKENS
                          + images * self.image_input_tokens, output_tokens=output + predicted)
        return Call(body=out, chars=chars, bound=bound, forced=tuple(forced))
