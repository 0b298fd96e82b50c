"""Fake Anthropic server: /v1/messages in the real wire format (tool use, caching, web search)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from tests.fakes import (
    BadRequest,
    FakeServer,
    Reply,
    completion_tokens,
    estimate_tokens,
    new_id,
    split_tokens,
    tool_call_parts,
)

MESSAGES = "/v1/messages"
_MEDIA_TYPES = {"image/jpeg", "image/png", "image/gif", "image/webp"}


class FakeAnthropicServer(FakeServer):
    name = "anthropic"
    paths = (MESSAGES,)

    # ``url`` is the root (http://127.0.0.1:PORT): the SDK appends /v1/messages itself.

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                529: "overloaded_error"}.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    # ------------------------------------------------------------------ validation
    def validate(self, path: str, body: Any) -> list[Any]:  # noqa: C901 (the provider's own request checks, one per field)
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise BadRequest("model: Field required")
        if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
            raise BadRequest("max_tokens: Field required (a positive integer)")
        system = body.get("system")
        if isinstance(system, list):
            for j, block in enumerate(system):
                if block.get("type") != "text" or not block.get("text"):
                    raise BadRequest(f"system.{j}: text content blocks must be non-empty")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages: at least one message is required")
        images: list[Any] = []
        pending: set[str] = set()
        for i, m in enumerate(messages):
            role = m.get("role") if isinstance(m, dict) else None
            if role not in ("user", "assistant"):
                raise BadRequest(f"messages.{i}.role: Input should be 'user' or 'assistant'")
            content = m.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list) or not blocks:
                raise BadRequest(f"messages.{i}: all messages must have non-empty content")
            answered: set[str] = set()
            for j, b in enumerate(blocks):
                where = f"messages.{i}.content.{j}"
                kind = b.get("type")
                if kind == "text":
                    if not isinstance(b.get("text"), str) or not b["text"]:
                        raise BadRequest(f"{where}: text content blocks must be non-empty")
                elif kind == "image":
                    images.append(_check_image(b, where))
                elif kind == "tool_use":
                    if role != "assistant":
                        raise BadRequest(f"{where}: tool_use blocks are only allowed in assistant messages")
                    pending.add(b.get("id"))
                elif kind == "tool_result":
                    if role != "user" or b.get("tool_use_id") not in pending:
                        raise BadRequest(f"{where}: unexpected `tool_use_id` found in `tool_result` blocks: "
                                         f"{b.get('tool_use_id')}. Each `tool_result` block must have a "
                                         "corresponding `tool_use` block in the previous message.")
                    if any(x.get("type") != "tool_result" for x in blocks[:j]):
                        raise BadRequest(f"{where}: tool_result blocks must come first in the message")
                    answered.add(b["tool_use_id"])
                    inner = b.get("content")
                    if isinstance(inner, list):
                        for k, ib in enumerate(inner):
                            if ib.get("type") == "image":
                                images.append(_check_image(ib, f"{where}.content.{k}"))
                elif kind in ("server_tool_use", "web_search_tool_result"):
                    pass
                else:
                    raise BadRequest(f"{where}.type: unknown content block type {kind!r}")
            if role == "user" and pending:
                if pending - answered:
                    raise BadRequest(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                                     f"immediately after: {sorted(pending - answered)}")
                pending = set()
            elif role == "assistant" and i + 1 == len(messages):
                pending = set()  # prefill / final assistant turn
        if pending:
            raise BadRequest("tool_use ids were found without tool_result blocks immediately after")
        return images

    # ------------------------------------------------------------------ rendering
    def render(self, path: str, body: Any, spec: Reply) -> tuple[dict[str, Any], int, int, int]:
        prompt_est = estimate_tokens({"system": body.get("system"), "messages": body.get("messages")})
        prompt, cached, written = split_tokens(spec, prompt_est)
        completion = completion_tokens(spec)
        content: list[dict[str, Any]] = []
        wants_search = any(str(t.get("type", "")).startswith("web_search") for t in body.get("tools") or [])
        searches = 0
        if wants_search and (spec.citations or spec.search_query):
            searches = 1
            tool_id = new_id("srvtoolu_")
            content.append({"type": "server_tool_use", "id": tool_id, "name": "web_search",
                            "input": {"query": spec.search_query or _last_user_text(body)}})
            content.append({"type": "web_search_tool_result", "tool_use_id": tool_id, "content": [
                {"type": "web_search_result", "url": url, "title": title or url,
                 "encrypted_content": "ZmFrZQ==", "page_age": None}
                for url, title in spec.citations]})
        if spec.text:
            block: dict[str, Any] = {"type": "text", "text": spec.text}
            if spec.citations:
                block["citations"] = [
                    {"type": "web_search_result_location", "url": url, "title": title or url,
                     "encrypted_index": "ZmFrZQ==", "cited_text": spec.text[:150]}
                    for url, title in spec.citations]
            content.append(block)
        for tc in spec.tool_calls:
            name, args, call_id = tool_call_parts(tc, "toolu_")
            if isinstance(args, str):
                # The API always sends an object: a raw string that parses becomes one; one that
                # does not is sent as is (off-spec on purpose, to feed clients malformed input).
                with contextlib.suppress(ValueError):
                    args = json.loads(args)
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        if not content:
            content.append({"type": "text", "text": ""})
        usage: dict[str, Any] = {
            "input_tokens": prompt - cached - written,
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": written,
            "output_tokens": completion,
            "service_tier": "standard",
        }
        if searches:
            usage["server_tool_use"] = {"web_search_requests": searches}
        payload = {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": spec.model or body.get("model"),
            "content": content,
            "stop_reason": spec.stop_reason or ("tool_use" if spec.tool_calls else "end_turn"),
            "stop_sequence": None,
            "usage": usage,
        }
        return payload, prompt, cached, completion


def _check_image(block: dict[str, Any], where: str) -> dict[str, str]:
    src = block.get("source") or {}
    if src.get("type") != "base64":
        raise BadRequest(f"{where}.source.type: only base64 image sources are accepted by this fake")
    if src.get("media_type") not in _MEDIA_TYPES:
        raise BadRequest(f"{where}.source.media_type: Input should be one of {sorted(_MEDIA_TYPES)}")
    if not isinstance(src.get("data"), str) or not src["data"]:
        raise BadRequest(f"{where}.source.data: must be non-empty base64")
    return {"media_type": src["media_type"], "data": src["data"]}


def _last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content[:200]
        for b in content or []:
            if b.get("type") == "text":
                return str(b.get("text", ""))[:200]
    return "search"
