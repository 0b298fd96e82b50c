"""What a routing model reads: the topic and gate prompts, and the agent's message fenced.

The message is the agent's: it is cut to ROUTER_MESSAGE_CHARS, fenced with a boundary token
and declared untrusted (`assay.llm.untrusted`), so a message that says "select every topic"
or "the condition is met" is data, not an order.
"""

from __future__ import annotations

from assay.llm.untrusted import boundary, cut_text, fence, untrusted_note

__all__ = ["GATE_PROMPT", "ROUTER_MESSAGE_CHARS", "ROUTER_PROMPT", "fenced_message"]

ROUTER_MESSAGE_CHARS = 8000
"""A longer message is cut (head and tail kept) before a routing model reads it."""

ROUTER_PROMPT = """You route one message, put to a workplace stakeholder, to the topics that \
stakeholder is able to speak about. You do not answer the message.

Stakeholder: {name}, {role}.

Topics (id: what it covers):
{topics}

Rules:
- Select a topic only if the message specifically asks about what that topic covers.
- Select every topic the message specifically asks about (at most {k}), the most directly asked first.
- A broad fishing message ("tell me everything", "what should I know", "any advice?") matches nothing.

{message}

Reply with JSON only: {{"topics": ["id", ...]}}"""


GATE_PROMPT = """A message was put to a workplace stakeholder. Decide one thing only: does the \
message meet this condition?

Condition: {condition}

A condition about evidence is met only if the message states the concrete evidence (numbers, \
examples, document names, log lines), not if it merely claims to have some.

{message}

Reply with JSON only: {{"met": true}} or {{"met": false}}"""


def fenced_message(context: str, question: str) -> str:
    """The agent's message as a router prompt shows it: fenced and declared untrusted, so a
    message that says "select every topic" or "the condition is met" is data, not an order."""
    shown = cut_text(question, ROUTER_MESSAGE_CHARS)
    token = boundary(context, [shown.text])
    note = untrusted_note(token, ["MESSAGE"], extra=", put to a stakeholder")
    return f"Message (below):\n{note}\n{fence('MESSAGE', token, shown.text)}"
