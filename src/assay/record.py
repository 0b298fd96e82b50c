"""What a run leaves behind: its key, its transcript events, its grade and usage.

These pydantic models are what the store persists and what reports are built from; every
field needed to trace a result back to the exact task content, harness, model and prices
is here.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, Field

EndReason = Literal[
    "finished", "max_turns", "max_usd", "max_time",
    "api_error", "interrupted", "harness_error", "grader_error",
]
VOID_REASONS = frozenset({"api_error", "interrupted", "harness_error", "grader_error"})


class UsageCost(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = 0.0


class Event(BaseModel):
    """One transcript entry, as the agent saw it (or as a stakeholder/harness emitted it)."""

    seq: int
    t: float  # seconds since run start
    kind: Literal[
        "system", "user", "assistant", "tool_call", "tool_result",
        "stakeholder", "harness", "error", "judge",
    ]
    data: dict[str, Any] = Field(default_factory=dict)


class AuditFlag(BaseModel):
    rule: str
    reason: str
    removed: bool = False


class Audit(BaseModel):
    flags: list[AuditFlag] = Field(default_factory=list)
    removed: int = 0
    pre_audit_score: float | None = None


class RunKey(BaseModel):
    """Identity of a run in a campaign; `digest` is what resume matches on."""

    campaign: str
    task_id: str
    task_hash: str
    agent: str
    level: str | None
    epoch: int
    options_hash: str

    @property
    def digest(self) -> str:
        raw = json.dumps(self.model_dump(), sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:32]


class RunRecord(BaseModel):
    schema_version: int = 1
    run_id: str
    key: RunKey
    attempt: int = 1
    kinds: list[str]
    harness_version: str
    model: str | None = None
    prices: dict[str, float | None] | None = None
    sandbox: Literal["bwrap", "none"] = "bwrap"
    status: Literal["done", "void"]
    end_reason: EndReason
    void_reason: str | None = None
    score: float | None = None
    passed: bool | None = None
    value: dict[str, Any] | None = None
    usage: UsageCost = Field(default_factory=UsageCost)
    judge_usage: UsageCost = Field(default_factory=UsageCost)
    grade: dict[str, Any] = Field(default_factory=dict)
    final_message: str = ""
    turns: int = 0
    started_at: float = 0.0
    duration_s: float = 0.0
    options: dict[str, Any] = Field(default_factory=dict)
    task_meta: dict[str, Any] = Field(default_factory=dict)
    run_dir: str | None = None
