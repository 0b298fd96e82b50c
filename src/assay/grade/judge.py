"""The LLM judge for rubric items: batched or per item, repeated, cached, fail-closed.

Each item's text appears verbatim in the prompt. An item the judge cannot answer after
retries is NA (counted 0, reported), never silently a miss. Calls are cached by judge spec
and the full prompt, so a re-grade costs nothing and a changed answer is judged afresh.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from assay.agent.messages import Message, Usage
from assay.agent.prices import cost_usd
from assay.errors import ProviderError
from assay.grade.jsonrepair import parse_lenient
from assay.grade.rubric import ItemVerdict
from assay.record import UsageCost
from assay.task.model import RubricItem, Task

YES = {"是", "yes", "y", "true", "命中", "met", "1"}
NO = {"否", "no", "n", "false", "未命中", "not met", "0"}

PROMPTS = {
    "en": {
        "system": ("You are an impartial, precise and strict expert grader. Judge only from direct textual "
                   "evidence in the response. Answer in JSON only."),
        "intro": "Grade the RESPONSE below against each rubric item.",
        "rules": ("For each item decide `met` true or false. A positive item is met when the response clearly does "
                  "what it describes. A negative item (negative weight) describes a bad behaviour: `met` is true "
                  "when that behaviour occurs in the response. All parts of an item must hold, except lists "
                  "introduced by 'such as' or 'for example'."),
        "batched_format": 'Reply with exactly: {"items": [{"id": ITEM_ID, "met": true|false, "reason": "one sentence"}, ...]} covering every item id.',
        "item_format": 'Reply with exactly: {"met": true|false, "reason": "one sentence"}.',
        "task": "TASK", "response": "RESPONSE", "items": "RUBRIC ITEMS", "item": "RUBRIC ITEM",
    },
    "zh": {
        "system": "你是一名公正、精确、严格的专家评审。只依据回答中的直接文本证据进行判断。只输出 JSON。",
        "intro": "请根据以下每一条评分细则，评判下面的【回答】。",
        "rules": ("对每一条细则判断 `met` 为 true 或 false。正向细则：回答明确做到所述内容即为命中。"
                  "负向细则（权重为负）描述的是不良行为：若回答中出现了该行为，`met` 为 true。"
                  "细则的所有部分都须满足（“例如/比如/包括”引出的列举除外）。"),
        "batched_format": '严格按此格式输出：{"items": [{"id": 细则编号, "met": true|false, "reason": "一句话理由"}, ...]}，覆盖全部细则编号。',
        "item_format": '严格按此格式输出：{"met": true|false, "reason": "一句话理由"}。',
        "task": "【任务】", "response": "【回答】", "items": "【评分细则】", "item": "【评分细则】",
    },
}


def _lang(task: Task) -> str:
    return "zh" if (task.language or "").lower().startswith("zh") else "en"


def _item_line(it: RubricItem) -> str:
    sign = "+" if it.weight > 0 else ""
    return f"[{it.id}] (weight {sign}{it.weight:g}) {it.text}"


def task_text(task: Task) -> str:
    if task.messages:
        return "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in task.messages)
    return task.prompt or next(iter(task.briefs.values()), "")


def batched_prompt(task: Task, answer: str, items: list[RubricItem]) -> str:
    p = PROMPTS[_lang(task)]
    lines = "\n".join(_item_line(it) for it in items)
    return (f"{p['intro']}\n\n{p['task']}\n{task_text(task)}\n\n{p['response']}\n{answer}\n\n"
            f"{p['items']}\n{lines}\n\n{p['rules']}\n{p['batched_format']}")


def item_prompt(task: Task, answer: str, item: RubricItem) -> str:
    p = PROMPTS[_lang(task)]
    return (f"{p['intro']}\n\n{p['task']}\n{task_text(task)}\n\n{p['response']}\n{answer}\n\n"
            f"{p['item']}\n{_item_line(item)}\n\n{p['rules']}\n{p['item_format']}")


def _truth(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower()
        if s in YES or v.strip() in YES:
            return True
        if s in NO or v.strip() in NO:
            return False
    return None


def parse_batched(text: str, ids: list[str]) -> dict[str, tuple[bool, str]]:
    """Verdicts by item id from any accepted shape; items not answered are left out."""
    data = parse_lenient(text)
    rows: list[Any]
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        rows = data["items"]
    elif isinstance(data, list):
        rows = data
    elif isinstance(data, dict) and len(ids) == 1 and ("met" in data or "criteria_met" in data):
        rows = [{**data, "id": ids[0]}]
    else:
        raise ValueError("reply has no items list")
    out: dict[str, tuple[bool, str]] = {}
    want = set(ids)
    for row in rows:
        if not isinstance(row, dict):
            continue
        rid = row.get("id", row.get("rubric_id", row.get("rubric_number")))
        if rid is None:
            continue
        rid = str(rid).strip().removeprefix("Rubric ").removeprefix("rubric_").strip("[]# ")
        met = _truth(row.get("met", row.get("status", row.get("criteria_met"))))
        if rid in want and met is not None:
            reason = str(row.get("reason", row.get("justification", row.get("explanation", ""))))
            out[rid] = (met, reason)
    return out


def parse_item(text: str) -> tuple[bool, str]:
    data = parse_lenient(text)
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    if not isinstance(data, dict):
        raise ValueError("reply is not an object")
    met = _truth(data.get("met", data.get("criteria_met", data.get("status"))))
    if met is None:
        raise ValueError("reply has no boolean met/criteria_met")
    return met, str(data.get("reason", data.get("explanation", data.get("justification", ""))))


class Judge:
    """One or more judge models; each (model, repeat) votes, the majority decides."""

    def __init__(self, factories: list[Any], *, mode: str = "batched", repeats: int = 1, retries: int = 2) -> None:
        self.factories = factories
        self.mode = mode
        self.repeats = repeats
        self.retries = retries
        self.cache: Any = None  # a Store (cache_get/cache_put), set by the campaign

    async def aclose(self) -> None:
        for f in self.factories:
            await f.aclose()

    async def _ask(self, factory: Any, repeat: int, prompt: str, system: str, usage: list[UsageCost]) -> str:
        key = hashlib.sha256(json.dumps([factory.spec, factory.options(), repeat, system, prompt],
                                        sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        if self.cache is not None:
            hit = self.cache.cache_get(key)
            if hit is not None:
                return hit
        client = factory.client
        reply = await client.complete([Message(role="system", content=system), Message(role="user", content=prompt)],
                                      None, max_tokens=4096, temperature=None, json_mode=True)
        u: Usage = reply.usage
        usage.append(UsageCost(input_tokens=u.input_tokens, output_tokens=u.output_tokens,
                               cache_read_tokens=u.cache_read_tokens, cache_write_tokens=u.cache_write_tokens,
                               cost_usd=cost_usd(u, factory._price)))
        if self.cache is not None:
            self.cache.cache_put(key, reply.text)
        return reply.text

    async def ask_raw(self, system: str, prompt: str, *, attempt: int = 0) -> tuple[str, UsageCost]:
        """One JSON-mode call to the first judge model, cached like rubric calls.

        `attempt` is part of the cache key, so a retry after an unparseable reply asks afresh.
        A cache hit costs nothing (zero usage).
        """
        usage: list[UsageCost] = []
        text = await self._ask(self.factories[0], attempt, prompt, system, usage)
        return text, (usage[0] if usage else UsageCost())

    async def _one_vote(self, factory: Any, repeat: int, task: Task, answer: str, items: list[RubricItem],
                        usage: list[UsageCost], errors: list[str]) -> dict[str, tuple[bool, str]]:
        system = PROMPTS[_lang(task)]["system"]
        got: dict[str, tuple[bool, str]] = {}
        if self.mode == "batched":
            prompt = batched_prompt(task, answer, items)
            ids = [it.id for it in items]
            for attempt in range(self.retries + 1):
                try:
                    text = await self._ask(factory, repeat if attempt == 0 else repeat * 1000 + attempt,
                                           prompt, system, usage)
                    got.update(parse_batched(text, ids))
                except ValueError as e:
                    errors.append(f"{factory.spec}: unparseable reply ({e})")
                if all(i in got for i in ids):
                    break
            return got
        for it in items:
            prompt = item_prompt(task, answer, it)
            for attempt in range(self.retries + 1):
                try:
                    text = await self._ask(factory, repeat if attempt == 0 else repeat * 1000 + attempt,
                                           prompt, system, usage)
                    got[it.id] = parse_item(text)
                    break
                except ValueError as e:
                    errors.append(f"{factory.spec}: item {it.id}: unparseable reply ({e})")
        return got

    async def judge_items(self, task: Task, answer: str, items: list[RubricItem]
                          ) -> tuple[dict[str, ItemVerdict], UsageCost, dict[str, Any]]:
        usage: list[UsageCost] = []
        errors: list[str] = []
        votes: list[dict[str, tuple[bool, str]]] = []
        for factory in self.factories:
            for r in range(self.repeats):
                try:
                    votes.append(await self._one_vote(factory, r, task, answer, items, usage, errors))
                except ProviderError as e:
                    errors.append(f"{factory.spec}: provider error: {e.reason}")
                    votes.append({})
        verdicts: dict[str, ItemVerdict] = {}
        agree_n = 0
        for it in items:
            answers = [v[it.id] for v in votes if it.id in v]
            if not answers:
                verdicts[it.id] = ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=False, na=True, check=False,
                                              reason="NA: no judge answered this item")
                continue
            c = Counter(m for m, _ in answers)
            # Fail-closed: a tie never gives credit, and never waives a penalty.
            hit = it.weight < 0 if c[True] == c[False] else c[True] > c[False]
            if len(c) == 1:
                agree_n += 1
            reason = next((r for m, r in answers if m == hit), answers[0][1])
            verdicts[it.id] = ItemVerdict(id=it.id, weight=it.weight, tag=it.tag, hit=hit, check=False,
                                          reason=f"{reason} (votes {c[True]} met / {c[False]} not met)")
        total = UsageCost(cost_usd=0.0)
        for u in usage:
            total.input_tokens += u.input_tokens
            total.output_tokens += u.output_tokens
            total.cache_read_tokens += u.cache_read_tokens
            total.cache_write_tokens += u.cache_write_tokens
            total.cost_usd = None if (total.cost_usd is None or u.cost_usd is None) else total.cost_usd + u.cost_usd
        info = {"agreement": agree_n / len(items) if items else 1.0, "votes": len(votes), "errors": errors,
                "judges": [f.spec for f in self.factories], "mode": self.mode}
        return verdicts, total, info
