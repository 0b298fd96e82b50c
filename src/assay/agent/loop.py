"""The one agent loop every model shares (FDE-Gym's and DAREBench's harness discipline).

Limits on turns, minutes and dollars end a run as `max_turns`/`max_time`/`max_usd` (graded as
the workspace stands); a provider failure ends it as `api_error` (void).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

from assay.agent.base import Agent, AgentEnv, AgentOutcome, open_conversation
from assay.errors import ProviderError
from assay.llm.messages import Message, ModelReply, Usage
from assay.llm.prices import cost_usd
from assay.llm.resolve import Model

if TYPE_CHECKING:  # the SDK clients load only when a campaign has a model agent
    from assay.llm.clients.base import ModelClient

NUDGE = ("You replied without calling a tool. If the work is not finished, continue using the tools. "
         "If it is finished, reply once more with your final summary and no tool call.")
CUT_NOTICE = "[older tool output cut to save context]"
CONTEXT_FRACTION = 0.8
MAX_NUDGES = 2


def estimate_tokens(messages: list[Message]) -> int:
    chars = 0
    for m in messages:
        chars += len(m.content) + 16
        for tc in m.tool_calls:
            chars += len(tc.name) + len(json.dumps(tc.arguments, ensure_ascii=False))
        chars += sum(1000 * 4 for _ in m.images)
    return chars // 4


def trim_context(messages: list[Message], budget_tokens: int) -> int:
    """Cut the oldest tool outputs until the conversation fits; returns how many were cut."""
    cut = 0
    if estimate_tokens(messages) <= budget_tokens:
        return 0
    for m in messages:
        if m.role == "tool" and m.content != CUT_NOTICE:
            m.content = CUT_NOTICE
            cut += 1
            if estimate_tokens(messages) <= budget_tokens:
                break
    return cut


class ModelAgent(Agent):
    """A chat model driven through the shared loop."""

    def __init__(self, spec: str, model: Model) -> None:
        self.spec = spec
        self.client: ModelClient = model.client
        self.price = model.spec.price
        self.model = f"{self.client.provider}/{self.client.model}"
        self.prices = self.price.model_dump() if self.price is not None else None
        self.max_reply_tokens = model.spec.max_tokens
        self.temperature = model.spec.temperature
        self.accepts_images = model.spec.images

    async def _call(self, env: AgentEnv, messages: list[Message], tools: bool) -> ModelReply:
        timeout = max(1.0, env.limits.max_minutes * 60 - (env.elapsed_minutes() * 60))
        return await asyncio.wait_for(
            self.client.complete(messages, env.tools.specs() if tools else None,
                                 max_tokens=min(self.max_reply_tokens, self.client.max_reply_tokens),
                                 temperature=self.temperature, web_search=env.native_search),
            timeout=timeout,
        )

    async def run(self, env: AgentEnv) -> AgentOutcome:
        out = AgentOutcome(end_reason="finished", model=self.model)
        messages = open_conversation(env, images=self.accepts_images)
        agentic = bool(env.tools.names)
        # A task whose only tool is search (e.g. a single-step task run with --search local):
        # a reply without a tool call is the answer, so no nudge that could replace it.
        search_only = agentic and set(env.tools.names) <= {"web_search"}
        budget = int(self.client.context_tokens * CONTEXT_FRACTION) - self.max_reply_tokens // 4
        nudges = 0
        last_was_nudge = False
        usage = Usage()
        try:
            while True:
                if out.stop_at_limit(env):
                    break
                cut = trim_context(messages, max(budget, 1024))
                if cut:
                    env.transcript.harness(f"cut {cut} older tool outputs to fit the context")
                try:
                    reply = await self._call(env, messages, agentic)
                except TimeoutError:
                    out.end_reason = "max_time"
                    break
                out.turns += 1
                usage = usage + reply.usage
                out.cost_usd = cost_usd(usage, self.price)
                env.transcript.assistant(reply.text,
                    tool_calls=[tc.model_dump(exclude_none=True) for tc in reply.tool_calls],
                    usage=reply.usage.model_dump(), stop_reason=reply.stop_reason,
                    citations=[c.model_dump() for c in reply.citations],
                )
                messages.append(Message(role="assistant", content=reply.text, tool_calls=reply.tool_calls))
                if not agentic:
                    out.final_message = reply.text
                    break
                if not reply.tool_calls:
                    out.final_message = reply.text
                    if search_only or last_was_nudge or nudges >= MAX_NUDGES:
                        break
                    nudges += 1
                    last_was_nudge = True
                    messages.append(Message(role="user", content=NUDGE))
                    env.transcript.user(NUDGE, nudge=nudges)
                    continue
                last_was_nudge = False
                for call in reply.tool_calls:
                    env.transcript.tool_call(call.id, name=call.name, arguments=call.arguments,
                                        arguments_error=call.arguments_error)
                    result = await env.tools.run(call)
                    env.transcript.tool_result(call.id, name=call.name, output=result.text,
                                               images=len(result.images) or None)
                    messages.append(Message(role="tool", content=result.text, images=result.images,
                                            tool_call_id=call.id, name=call.name))
        except ProviderError as e:
            out.end_reason = "api_error"
            out.error = e.reason
            out.error_status = e.status
            env.transcript.error("provider", reason=e.reason, status=e.status)
        out.usage = usage
        return out
