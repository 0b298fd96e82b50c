"""The run's events as an OpenClaw session log: the transcript DareBench checks and judges read.

The event shape upstream checks read: `session`, `model_change`, `message` user / assistant
with `thinking`, `toolCall`, `text` items / `toolResult`.
"""

from __future__ import annotations

from typing import Any

from assay.record import AssistantEvent, Event, ToolCallEvent, ToolResultEvent, UserEvent

__all__ = ["to_openclaw"]

def to_openclaw(events: list[Event], *, task_id: str = "", model: str | None = None,
                final_message: str = "") -> list[dict[str, Any]]:
    """The run's events as an OpenClaw session log (what DareBench checks read)."""
    provider, _, model_id = (model or "assay/unknown").partition("/")
    out: list[dict[str, Any]] = [
        {"type": "session", "version": 3, "id": f"assay-{task_id}" if task_id else "assay", "cwd": "/workspace"},
        {"type": "model_change", "provider": provider, "modelId": model_id or provider},
    ]
    announced: set[str] = set()
    said_final = False
    for ev in events:
        if isinstance(ev, UserEvent):
            out.append({"type": "message", "message": {"role": "user", "content": ev.content}})
        elif isinstance(ev, AssistantEvent):
            items: list[dict[str, Any]] = []
            for tc in ev.tool_calls:
                cid = str(tc.get("id", ""))
                announced.add(cid)
                items.append({"type": "toolCall", "id": cid, "name": tc.get("name", ""),
                              "arguments": tc.get("arguments") or {}})
            if ev.content:
                items.append({"type": "text", "text": ev.content})
                said_final |= ev.content.strip() == final_message.strip()
            out.append({"type": "message", "message": {"role": "assistant", "content": items}})
        elif isinstance(ev, ToolCallEvent):
            if ev.id not in announced:  # a policy/script step without an assistant turn
                announced.add(ev.id)
                out.append({"type": "message", "message": {"role": "assistant", "content": [
                    {"type": "toolCall", "id": ev.id, "name": ev.name, "arguments": ev.arguments}]}})
        elif isinstance(ev, ToolResultEvent):
            out.append({"type": "message", "message": {
                "role": "toolResult", "toolCallId": ev.id, "toolName": ev.name,
                "content": [{"type": "text", "text": ev.output}], "isError": False}})
    if final_message.strip() and not said_final:
        out.append({"type": "message", "message": {"role": "assistant",
                                                   "content": [{"type": "text", "text": final_message}]}})
    return out
