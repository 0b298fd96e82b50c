"""OpenAI (and OpenAI-compatible) models through the official ``openai`` SDK.

Chat Completions for ordinary turns; for ``web_search=True`` either OpenRouter's ``web`` plugin
(OpenRouter-like base URLs) or the Responses API with the ``web_search`` tool.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any, Literal
from urllib.parse import urlparse

import openai
from openai.types.chat import ChatCompletion

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

WebSearchMode = Literal["auto", "plugin", "responses"]

# Context windows of models we know; others get the base default.
_CONTEXT = {
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-4.1-nano": 1_047_576,
    "gpt-5": 400_000,
    "gpt-5-mini": 400_000,
    "gpt-5-nano": 400_000,
    "o3": 200_000,
    "o3-mini": 200_000,
    "o4-mini": 200_000,
    "o1": 200_000,
}


def _data_uri(image: ImagePart) -> str:
    return f"data:{image.media_type};base64,{image.data_b64}"


def _arguments_text(call: ToolCall) -> str:
    if call.arguments_error is not None and call.raw_arguments is not None:
        return call.raw_arguments
    return json.dumps(call.arguments)


POOL_SHARDS = 8


class OpenAIClient(ModelClient):
    provider = "openai"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        web_search_mode: WebSearchMode = "auto",
        provider: str = "openai",
        key_env: str | None = "OPENAI_API_KEY",
        url_env: str | None = "OPENAI_BASE_URL",
        default_url: str | None = None,
        key_required: bool = True,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("context_tokens") is None:
            kwargs["context_tokens"] = _CONTEXT.get(model)
        super().__init__(model, **kwargs)
        # `provider` and the variables are a preset's (`assay.llm.presets`): a preset never
        # reads OPENAI_* (an OpenAI key must not go to another company's server).
        self.provider = provider
        base_url = base_url or (os.environ.get(url_env) if url_env else None) or default_url
        api_key = api_key or (os.environ.get(key_env) if key_env else None) or None
        if not api_key:
            if key_required and not is_loopback(base_url):
                raise ProviderError(f"{key_env or 'an API key'} not set")
            api_key = "assay-local-placeholder"
        self.base_url = base_url
        host = (urlparse(base_url).hostname or "").lower() if base_url else "api.openai.com"
        self._official = host == "api.openai.com"
        if web_search_mode == "auto":
            web_search_mode = "plugin" if "openrouter" in host else "responses"
        self.web_search_mode: WebSearchMode = web_search_mode
        # Several SDK clients, each with its own connection pool, used in turn: httpx scans
        # every pooled connection on each request, so one pool of 100+ connections costs CPU
        # on every call at high concurrency (bench/bench_sdk_floor.py: 1.15x -> 1.09x). A client
        # costs ~20-60 ms of CPU to create, so they are created as calls overlap, up to
        # POOL_SHARDS: a run that calls one at a time (a Ray worker's) creates one.
        self._api_key = api_key
        self._sdks: list[openai.AsyncOpenAI] = []
        self._turn = 0
        self._in_flight = 0

    @contextlib.contextmanager
    def _sdk(self) -> Iterator[openai.AsyncOpenAI]:
        """An SDK client for one call: a new one while every client has a call in flight."""
        if len(self._sdks) < POOL_SHARDS and self._in_flight >= len(self._sdks):
            self._sdks.append(openai.AsyncOpenAI(api_key=self._api_key, base_url=self.base_url, max_retries=0,
                                                 timeout=self.timeout_s))
        self._turn = (self._turn + 1) % len(self._sdks)
        self._in_flight += 1
        try:
            yield self._sdks[self._turn]
        finally:
            self._in_flight -= 1

    async def aclose(self) -> None:
        for sdk in self._sdks:
            await sdk.close()

    # ----------------------------------------------------------------- chat completions
    @staticmethod
    def to_chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        pending_images: list[ImagePart] = []  # from tool results: sent as a user message after them

        def flush_images() -> None:
            if pending_images:
                parts: list[dict[str, Any]] = [{"type": "text", "text": "Images from the tool results above:"}]
                parts += [{"type": "image_url", "image_url": {"url": _data_uri(i)}} for i in pending_images]
                out.append({"role": "user", "content": parts})
                pending_images.clear()

        for m in messages:
            if m.role != "tool":
                flush_images()
            if m.role == "system":
                out.append({"role": "system", "content": m.content})
            elif m.role == "user":
                if m.images:
                    parts: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
                    parts += [{"type": "image_url", "image_url": {"url": _data_uri(i)}} for i in m.images]
                    out.append({"role": "user", "content": parts})
                else:
                    out.append({"role": "user", "content": m.content})
            elif m.role == "assistant":
                # A turn without text sends `content: ""`, never null or absent: llama.cpp's server
                # refuses null (HTTP 500) and its chat templates read `content` of every message.
                msg: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
                if m.tool_calls:
                    msg["tool_calls"] = [
                        {"id": c.id, "type": "function",
                         "function": {"name": c.name, "arguments": _arguments_text(c)}}
                        for c in m.tool_calls
                    ]
                out.append(msg)
            else:  # tool
                out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content})
                pending_images.extend(m.images)
        flush_images()
        return out

    @staticmethod
    def to_chat_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
        return [
            {"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in tools
        ]

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
        if web_search and self.web_search_mode == "responses":
            return await self._complete_responses(messages, tools, max_tokens=max_tokens,
                                                  temperature=temperature, json_mode=json_mode)
        body: dict[str, Any] = {"model": self.model, "messages": self.to_chat_messages(messages)}
        if tools:
            body["tools"] = self.to_chat_tools(tools)
            body["tool_choice"] = "auto"
        if max_tokens is None and self._max_reply_explicit:
            max_tokens = self.max_reply_tokens
        if max_tokens is not None:
            # The official API wants max_completion_tokens (o-series reject max_tokens);
            # compatible servers (OpenRouter, vLLM, llama.cpp) all understand max_tokens.
            body["max_completion_tokens" if self._official else "max_tokens"] = max_tokens
        if temperature is not None:
            body["temperature"] = temperature
        if json_mode:
            body["response_format"] = {"type": "json_object"}
        if web_search:  # plugin mode
            body["plugins"] = [{"id": "web"}]
        # The SDK's own request method with the body as built: `chat.completions.create` would
        # first walk every value against its typed parameters (~0.6 ms a call with tools), which
        # changes nothing in a body of plain JSON values. Reply, errors and headers are the same.
        with self._sdk() as sdk:
            resp = await sdk.post("/chat/completions", body=body, cast_to=ChatCompletion,
                                  options={"timeout": self.timeout_s})
        return self._parse_chat(resp)

    def _parse_chat(self, resp: Any) -> ModelReply:
        choices = getattr(resp, "choices", None)
        if isinstance(resp, str | bytes) or not choices:
            raise MalformedReply(f"chat completion without choices: {str(resp)[:200]!r}")
        choice = choices[0]
        msg = choice.message
        if msg is None:
            raise MalformedReply("chat completion choice without a message")
        calls: list[ToolCall] = []
        for tc in msg.tool_calls or []:
            fn = getattr(tc, "function", None)
            if fn is None:  # custom (non-function) tool calls are not ours
                continue
            calls.append(make_tool_call(tc.id, fn.name, fn.arguments))
        citations: list[Citation] = []
        for ann in get_field(msg, "annotations", []) or []:
            if get_field(ann, "type") == "url_citation":
                uc = get_field(ann, "url_citation", ann)
                add_citation(citations, get_field(uc, "url"), get_field(uc, "title"))
        usage = Usage()
        if resp.usage is not None:
            prompt = resp.usage.prompt_tokens or 0
            details = resp.usage.prompt_tokens_details
            cached = (details.cached_tokens or 0) if details is not None else 0
            usage = Usage(input_tokens=max(0, prompt - cached), cache_read_tokens=cached,
                          output_tokens=resp.usage.completion_tokens or 0)
        return ModelReply(text=msg.content or "", tool_calls=calls, usage=usage,
                          stop_reason=choice.finish_reason, model=resp.model, citations=citations)

    # ----------------------------------------------------------------- responses API (web search)
    @staticmethod
    def to_responses_input(messages: list[Message]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        for m in messages:
            if m.role in ("system", "user") or (m.role == "tool" and m.images):
                if m.role == "tool":
                    items.append({"type": "function_call_output", "call_id": m.tool_call_id or "",
                                  "output": m.content})
                    text = "Images from the tool result above:"
                else:
                    text = m.content
                if m.images:
                    content: Any = [{"type": "input_text", "text": text}] if text else []
                    content += [{"type": "input_image", "image_url": _data_uri(i)} for i in m.images]
                else:
                    content = text
                items.append({"role": "user" if m.role == "tool" else m.role, "content": content})
            elif m.role == "assistant":
                if m.content:
                    items.append({"role": "assistant", "content": m.content})
                for c in m.tool_calls:
                    items.append({"type": "function_call", "call_id": c.id, "name": c.name,
                                  "arguments": _arguments_text(c)})
            else:
                items.append({"type": "function_call_output", "call_id": m.tool_call_id or "",
                              "output": m.content})
        return items

    async def _complete_responses(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        max_tokens: int | None,
        temperature: float | None,
        json_mode: bool,
    ) -> ModelReply:
        api_tools: list[dict[str, Any]] = [{"type": "web_search"}]
        api_tools += [{"type": "function", "name": t.name, "description": t.description,
                       "parameters": t.parameters} for t in tools]
        kwargs: dict[str, Any] = {"model": self.model, "input": self.to_responses_input(messages),
                                  "tools": api_tools, "timeout": self.timeout_s}
        if max_tokens is None and self._max_reply_explicit:
            max_tokens = self.max_reply_tokens
        if max_tokens is not None:
            kwargs["max_output_tokens"] = max_tokens
        if temperature is not None:
            kwargs["temperature"] = temperature
        if json_mode:
            kwargs["text"] = {"format": {"type": "json_object"}}
        with self._sdk() as sdk:
            resp = await sdk.responses.create(**kwargs)
        return self._parse_responses(resp)

    def _parse_responses(self, resp: Any) -> ModelReply:
        output = getattr(resp, "output", None)
        if isinstance(resp, str | bytes) or output is None:
            raise MalformedReply(f"response without output: {str(resp)[:200]!r}")
        texts: list[str] = []
        calls: list[ToolCall] = []
        citations: list[Citation] = []
        for item in output:
            kind = get_field(item, "type")
            if kind == "message":
                for part in get_field(item, "content", []) or []:
                    if get_field(part, "type") != "output_text":
                        continue
                    texts.append(get_field(part, "text", ""))
                    for ann in get_field(part, "annotations", []) or []:
                        if get_field(ann, "type") == "url_citation":
                            add_citation(citations, get_field(ann, "url"), get_field(ann, "title"))
            elif kind == "function_call":
                calls.append(make_tool_call(get_field(item, "call_id") or get_field(item, "id", ""),
                                        get_field(item, "name", ""), get_field(item, "arguments")))
        usage = Usage()
        u = getattr(resp, "usage", None)
        if u is not None:
            details = get_field(u, "input_tokens_details")
            cached = get_field(details, "cached_tokens", 0) or 0
            usage = Usage(input_tokens=max(0, (get_field(u, "input_tokens", 0) or 0) - cached),
                          cache_read_tokens=cached, output_tokens=get_field(u, "output_tokens", 0) or 0)
        status = get_field(resp, "status")
        if calls:
            stop = "tool_calls"
        elif status == "incomplete":
            stop = get_field(get_field(resp, "incomplete_details"), "reason", "incomplete")
        else:
            stop = "stop"
        return ModelReply(text="".join(texts), tool_calls=calls, usage=usage, stop_reason=stop,
                          model=get_field(resp, "model"), citations=citations)
