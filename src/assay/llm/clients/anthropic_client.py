"""Anthropic models through the official ``anthropic`` SDK (Messages API).

The system prompt goes in ``system``; tool calls are ``tool_use`` blocks and results
``tool_result`` blocks (consecutive results merge into one user message). Prompt caching:
``cache_control: ephemeral`` on the system block and on the last block of the last message.
"""

from __future__ import annotations

import os
from typing import Any

import anthropic

from assay.errors import ProviderError
from assay.llm.clients.base import (
    MalformedReply,
    ModelClient,
    add_citation,
    get_field,
    make_tool_call,
)
from assay.llm.messages import Citation, ImagePart, Message, ModelReply, ToolCall, ToolSpec, Usage
from assay.llm.urls import is_loopback

CACHE = {"type": "ephemeral"}
WEB_SEARCH_TOOL = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
_EMPTY = "(empty)"  # the API rejects empty text blocks and empty messages

# Output-token ceilings of older models (the 4.x family allows at least 32k).
_MAX_OUTPUT = {
    "claude-3-5-haiku": 8_192,
    "claude-3-5-sonnet": 8_192,
    "claude-3-haiku": 4_096,
    "claude-3-opus": 4_096,
}


def _image_block(image: ImagePart) -> dict[str, Any]:
    return {"type": "image",
            "source": {"type": "base64", "media_type": image.media_type, "data": image.data_b64}}


class AnthropicClient(ModelClient):
    provider = "anthropic"

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 **kwargs: Any) -> None:
        if kwargs.get("context_tokens") is None:
            kwargs["context_tokens"] = 200_000
        if kwargs.get("max_reply_tokens") is None:
            kwargs["max_reply_tokens"] = next(
                (n for prefix, n in _MAX_OUTPUT.items() if model.startswith(prefix)), None)
        super().__init__(model, **kwargs)
        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        if not api_key:
            if not is_loopback(base_url):
                raise ProviderError("ANTHROPIC_API_KEY not set")
            api_key = "assay-local-placeholder"
        self.base_url = base_url
        self._sdk = anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0,
                                             timeout=self.timeout_s)

    async def aclose(self) -> None:
        await self._sdk.close()

    @staticmethod
    def to_request(messages: list[Message]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(system blocks, messages) in the Messages API shape, with cache breakpoints set."""
        system_text = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        system = [{"type": "text", "text": system_text, "cache_control": CACHE}] if system_text else []
        out: list[dict[str, Any]] = []

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            if out and out[-1]["role"] == role:  # the API wants user/assistant alternation
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})

        for m in messages:
            if m.role == "system":
                continue
            if m.role == "user":
                blocks = [_image_block(i) for i in m.images]
                if m.content or not blocks:
                    blocks.append({"type": "text", "text": m.content or _EMPTY})
                add("user", blocks)
            elif m.role == "assistant":
                blocks = [{"type": "text", "text": m.content}] if m.content else []
                blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                           for c in m.tool_calls]
                add("assistant", blocks or [{"type": "text", "text": _EMPTY}])
            else:  # tool result
                content: Any = m.content or _EMPTY
                if m.images:
                    content = [{"type": "text", "text": m.content or _EMPTY}]
                    content += [_image_block(i) for i in m.images]
                block = {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": content}
                if out and out[-1]["role"] == "user":
                    # tool results must come first in the user message that answers the tool use
                    prev = out[-1]["content"]
                    idx = next((i for i, b in enumerate(prev) if b.get("type") != "tool_result"), len(prev))
                    prev.insert(idx, block)
                else:
                    add("user", [block])
        if out and out[-1]["content"]:
            out[-1]["content"][-1] = {**out[-1]["content"][-1], "cache_control": CACHE}
        return system, out

    @staticmethod
    def to_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
        return [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]

    async def _complete_once(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        max_tokens: int | None,
        temperature: float | None,
        json_mode: bool,
        web_search: bool,
    ) -> ModelReply:
        system, msgs = self.to_request(messages)
        if json_mode:
            # No JSON mode in the Messages API: ask for it in the system prompt.
            note = "Reply with a single valid JSON object and nothing else."
            system = [*system[:-1], {**system[-1], "text": system[-1]["text"] + "\n\n" + note}] if system \
                else [{"type": "text", "text": note, "cache_control": CACHE}]
        kwargs: dict[str, Any] = {"model": self.model, "messages": msgs,
                                  "max_tokens": max_tokens or self.max_reply_tokens,
                                  "timeout": self.timeout_s}
        if system:
            kwargs["system"] = system
        api_tools: list[dict[str, Any]] = self.to_tools(tools)
        if web_search:
            api_tools.append(dict(WEB_SEARCH_TOOL))
        if api_tools:
            kwargs["tools"] = api_tools
        if temperature is not None:
            kwargs["extra_body"] = {"temperature": temperature}
        resp = await self._sdk.messages.create(**kwargs)
        return self._parse(resp)

    def _parse(self, resp: Any) -> ModelReply:
        content = getattr(resp, "content", None)
        if isinstance(resp, str | bytes) or content is None:
            raise MalformedReply(f"message without content: {str(resp)[:200]!r}")
        texts: list[str] = []
        calls: list[ToolCall] = []
        citations: list[Citation] = []
        for block in content:
            kind = get_field(block, "type")
            if kind == "text":
                texts.append(get_field(block, "text", ""))
                for cit in get_field(block, "citations", []) or []:
                    if get_field(cit, "type") == "web_search_result_location":
                        add_citation(citations, get_field(cit, "url"), get_field(cit, "title"))
            elif kind == "tool_use":
                calls.append(make_tool_call(get_field(block, "id", ""), get_field(block, "name", ""),
                                        get_field(block, "input")))
        u = getattr(resp, "usage", None)
        usage = Usage()
        if u is not None:
            usage = Usage(input_tokens=get_field(u, "input_tokens", 0) or 0,
                          output_tokens=get_field(u, "output_tokens", 0) or 0,
                          cache_read_tokens=get_field(u, "cache_read_input_tokens", 0) or 0,
                          cache_write_tokens=get_field(u, "cache_creation_input_tokens", 0) or 0)
        return ModelReply(text="".join(texts), tool_calls=calls, usage=usage,
                          stop_reason=get_field(resp, "stop_reason"), model=get_field(resp, "model"),
                          citations=citations)
