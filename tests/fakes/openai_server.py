"""Fake OpenAI server: /v1/chat/completions and /v1/responses in the real wire format."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.fakes import (
    BadRequest,
    FakeServer,
    Reply,
    citation_span,
    completion_tokens,
    estimate_tokens,
    new_id,
    split_tokens,
    tool_call_parts,
)

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
_ROLES = {"system", "developer", "user", "assistant", "tool"}


def _check_image_url(url: Any, where: str) -> str:
    if not isinstance(url, str) or not url:
        raise BadRequest(f"{where}: image_url must be a non-empty string")
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        if not head.startswith("data:image/") or not head.endswith(";base64") or not data:
            raise BadRequest(f"{where}: invalid image data URI (want data:image/<type>;base64,<data>)")
    elif not url.startswith(("http://", "https://")):
        raise BadRequest(f"{where}: image_url must be an http(s) URL or a data URI")
    return url


class FakeOpenAIServer(FakeServer):
    name = "openai"
    paths = (CHAT, RESPONSES)

    @property
    def url(self) -> str:
        """base_url for ``openai.AsyncOpenAI`` (ends in /v1)."""
        return f"{self.root}/v1"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                429: "rate_limit_exceeded"}.get(status, "server_error")
        code = "rate_limit_exceeded" if status == 429 else None
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    # ------------------------------------------------------------------ validation
    def validate(self, path: str, body: Any) -> list[Any]:
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            raise BadRequest("you must provide a model parameter")
        if path == CHAT:
            return self._validate_chat(body)
        return self._validate_responses(body)

    def _validate_chat(self, body: dict[str, Any]) -> list[Any]:  # noqa: C901 (the provider's own request checks, one per field)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty array")
        images: list[Any] = []
        pending: set[str] = set()
        for i, m in enumerate(messages):
            role = m.get("role") if isinstance(m, dict) else None
            if role not in _ROLES:
                raise BadRequest(f"messages[{i}].role: invalid value {role!r}")
            if role != "tool" and pending:
                raise BadRequest("An assistant message with 'tool_calls' must be followed by tool messages "
                                 f"responding to each 'tool_call_id'. Missing: {sorted(pending)}")
            if role == "tool":
                tid = m.get("tool_call_id")
                if tid not in pending:
                    raise BadRequest(f"messages[{i}]: role 'tool' must be a response to a preceding "
                                     f"message with 'tool_calls' (tool_call_id {tid!r})")
                pending.discard(tid)
            if role == "assistant":
                for tc in m.get("tool_calls") or []:
                    fn = tc.get("function") or {}
                    if tc.get("type") != "function" or not isinstance(fn.get("arguments"), str):
                        raise BadRequest(f"messages[{i}].tool_calls: function.arguments must be a string")
                    pending.add(tc.get("id"))
            content = m.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    where = f"messages[{i}].content[{j}]"
                    if part.get("type") == "text":
                        if not isinstance(part.get("text"), str):
                            raise BadRequest(f"{where}.text must be a string")
                    elif part.get("type") == "image_url":
                        if role != "user":
                            raise BadRequest(f"{where}: image parts are only allowed in user messages")
                        images.append(_check_image_url((part.get("image_url") or {}).get("url"), where))
                    else:
                        raise BadRequest(f"{where}.type: invalid value {part.get('type')!r}")
        if pending:
            raise BadRequest("An assistant message with 'tool_calls' must be followed by tool messages "
                             f"responding to each 'tool_call_id'. Missing: {sorted(pending)}")
        for t in body.get("tools") or []:
            if t.get("type") != "function" or not (t.get("function") or {}).get("name"):
                raise BadRequest("tools: each tool needs type 'function' and function.name")
        return images

    def _validate_responses(self, body: dict[str, Any]) -> list[Any]:
        items = body.get("input")
        if isinstance(items, str):
            return []
        if not isinstance(items, list) or not items:
            raise BadRequest("'input' must be a string or a non-empty array")
        images: list[Any] = []
        for i, item in enumerate(items):
            content = item.get("content") if isinstance(item, dict) else None
            if isinstance(content, list):
                for j, part in enumerate(content):
                    if part.get("type") == "input_image":
                        images.append(_check_image_url(part.get("image_url"), f"input[{i}].content[{j}]"))
        return images

    # ------------------------------------------------------------------ rendering
    def render(self, path: str, body: Any, spec: Reply) -> tuple[dict[str, Any], int, int, int]:
        if path == RESPONSES:
            return self._render_responses(body, spec)
        return self._render_chat(body, spec)

    def _render_chat(self, body: dict[str, Any], spec: Reply) -> tuple[dict[str, Any], int, int, int]:
        prompt, cached, _ = split_tokens(spec, estimate_tokens(body.get("messages")))
        completion = completion_tokens(spec)
        message: dict[str, Any] = {"role": "assistant", "content": spec.text or None, "refusal": None,
                                   "annotations": []}
        if spec.tool_calls:
            calls = []
            for tc in spec.tool_calls:
                name, args, call_id = tool_call_parts(tc, "call_")
                calls.append({"id": call_id, "type": "function",
                              "function": {"name": name,
                                           "arguments": args if isinstance(args, str) else json.dumps(args)}})
            message["tool_calls"] = calls
        for url, title in spec.citations:
            start, end = citation_span(spec.text, title)
            message["annotations"].append({"type": "url_citation", "url_citation": {
                "url": url, "title": title or url, "start_index": start, "end_index": end}})
        finish = spec.stop_reason or ("tool_calls" if spec.tool_calls else "stop")
        payload = {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": spec.model or body.get("model"),
            "system_fingerprint": "fp_fake",
            "service_tier": "default",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0},
            },
        }
        return payload, prompt, cached, completion

    def _render_responses(self, body: dict[str, Any], spec: Reply) -> tuple[dict[str, Any], int, int, int]:
        prompt, cached, _ = split_tokens(spec, estimate_tokens(body.get("input")))
        completion = completion_tokens(spec)
        tools = body.get("tools") or []
        output: list[dict[str, Any]] = []
        if any(str(t.get("type", "")).startswith("web_search") for t in tools):
            output.append({"type": "web_search_call", "id": new_id("ws_"), "status": "completed",
                           "action": {"type": "search", "query": spec.search_query or _last_user_text(body)}})
        if spec.text or not spec.tool_calls:
            annotations = []
            for url, title in spec.citations:
                start, end = citation_span(spec.text, title)
                annotations.append({"type": "url_citation", "url": url, "title": title or url,
                                    "start_index": start, "end_index": end})
            output.append({"type": "message", "id": new_id("msg_"), "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": spec.text, "annotations": annotations,
                                        "logprobs": []}]})
        for tc in spec.tool_calls:
            name, args, call_id = tool_call_parts(tc, "call_")
            output.append({"type": "function_call", "id": new_id("fc_"), "call_id": call_id, "name": name,
                           "arguments": args if isinstance(args, str) else json.dumps(args),
                           "status": "completed"})
        payload = {
            "id": new_id("resp_"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": spec.model or body.get("model"),
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": tools,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "temperature": body.get("temperature"),
            "top_p": None,
            "usage": {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": completion,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": prompt + completion,
            },
        }
        return payload, prompt, cached, completion


def _last_user_text(body: dict[str, Any]) -> str:
    items = body.get("input")
    if isinstance(items, str):
        return items[:200]
    for item in reversed(items or []):
        if isinstance(item, dict) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content[:200]
            for part in content or []:
                if part.get("type") == "input_text":
                    return str(part.get("text", ""))[:200]
    return "search"
