"""Provider-neutral chat messages, tool calls and usage.

Model clients translate these to and from each provider's wire format, so the shared loop,
the transcript and the judge never see provider-specific shapes.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from assay.record import Usage

__all__ = ["Citation", "ImagePart", "Message", "ModelReply", "ToolCall", "ToolSpec", "Usage"]


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    # Set when the model's arguments were not a JSON object; the loop reports it back.
    arguments_error: str | None = None
    raw_arguments: str | None = None


class ImagePart(BaseModel):
    media_type: str  # e.g. "image/png"
    data_b64: str


class Message(BaseModel):
    """One conversation message. `content` is text; `images` ride along on user messages."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[ImagePart] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # tool name on role=tool


class ToolSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON Schema of the arguments object


class Citation(BaseModel):
    url: str
    title: str | None = None


class ModelReply(BaseModel):
    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    stop_reason: str | None = None
    model: str | None = None
    citations: list[Citation] = Field(default_factory=list)
