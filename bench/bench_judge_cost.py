"""Judge cost per task, batched vs per-item, on the starter rubric tasks.

Every item of each of the 10 starter rubric tasks is sent to the judge (machine checks are
stripped, so nothing is graded locally), with the task's reference answer as the response.
The judge is the fake OpenAI server, which bills prompts and replies at about four
characters a token; its token accounting (prompt + completion) is what is compared. The
fake judge answers every item it is asked about, in the mode's reply shape, with a short
reason, the way a real judge would.

    python bench/bench_judge_cost.py

Prints a per-task table, the totals and the ratio batched / per-item (the requirement: at
most 0.25), then one JSON line. Exits 1 when the ratio is above 0.25.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.openai_server import FakeOpenAIServer  # noqa: E402

from assay.config import Config  # noqa: E402
from assay.grade.judge import Judge  # noqa: E402
from assay.task.discover import discover  # noqa: E402
from assay.task.model import Task  # noqa: E402

LIMIT = 0.25
ITEM_LINE = re.compile(r"^\[([^\]]+)\] \((?:weight|权重) [+-]?[\d.]+\) ", re.MULTILINE)
REASON = "The response states this explicitly in its calculation section."


def fake_judge(body: dict[str, Any]) -> str:
    prompt = body["messages"][-1]["content"]
    ids = ITEM_LINE.findall(prompt)
    if '{"met": true|false, "reason"' in prompt and len(ids) == 1:  # the per-item reply shape
        return json.dumps({"met": True, "reason": REASON})
    return json.dumps({"items": [{"id": i, "met": True, "reason": REASON} for i in ids]})


def judge_for(srv: FakeOpenAIServer, mode: str) -> Judge:
    cfg = Config.model_validate({"models": {"j": {"provider": "openai", "model": "judge-1", "base_url": srv.url,
                                                  "max_retries": 0, "retry_base_delay": 0.01}}})
    return Judge.from_specs(["j"], cfg, mode=mode)


def stripped(task: Task) -> Task:
    """The task with every machine check removed: all items go to the judge."""
    t = task.model_copy(deep=True)
    assert t.rubric is not None
    for it in t.rubric.items:
        it.check = None
    return t


async def cost(srv: FakeOpenAIServer, task: Task, answer: str, mode: str) -> dict[str, int]:
    judge = judge_for(srv, mode)
    p0, c0, n0 = srv.total_prompt_tokens, srv.total_completion_tokens, len(srv.requests)
    try:
        assert task.rubric is not None
        verdicts, _, info = await judge.judge_items(task, answer, task.rubric.items)
    finally:
        await judge.aclose()
    if info["na"] or len(verdicts) != len(task.rubric.items):
        raise SystemExit(f"{task.id} ({mode}): the judge left items unanswered: {info['errors']}")
    prompt = srv.total_prompt_tokens - p0
    completion = srv.total_completion_tokens - c0
    return {"calls": len(srv.requests) - n0, "prompt": prompt, "completion": completion,
            "tokens": prompt + completion}


async def main() -> int:
    tasks = sorted(discover([ROOT / "suites" / "starter" / "rubric"]), key=lambda t: t.id)
    rows = []
    with FakeOpenAIServer() as srv:
        srv.handler = fake_judge
        for task in tasks:
            answer = task.policies["reference"].answer or ""
            t = stripped(task)
            b = await cost(srv, t, answer, "batched")
            p = await cost(srv, t, answer, "per-item")
            rows.append({"task": task.id, "items": len(t.rubric.items),  # type: ignore[union-attr]
                         "batched": b, "per_item": p, "ratio": b["tokens"] / p["tokens"]})
    tb = sum(r["batched"]["tokens"] for r in rows)
    tp = sum(r["per_item"]["tokens"] for r in rows)
    ratio = tb / tp
    head = f"{'task':36} {'items':>5} {'batched':>9} {'per-item':>9} {'ratio':>6}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['task']:36} {r['items']:>5} {r['batched']['tokens']:>9} {r['per_item']['tokens']:>9} "
              f"{r['ratio']:>6.3f}")
    print("-" * len(head))
    print(f"{'total':36} {sum(r['items'] for r in rows):>5} {tb:>9} {tp:>9} {ratio:>6.3f}"
          f"   (limit {LIMIT}: {'ok' if ratio <= LIMIT else 'FAIL'})")
    print(json.dumps({"bench": "judge_cost", "tasks": len(rows), "batched_tokens": tb, "per_item_tokens": tp,
                      "ratio": ratio, "limit": LIMIT, "ok": ratio <= LIMIT,
                      "batched_calls": sum(r["batched"]["calls"] for r in rows),
                      "per_item_calls": sum(r["per_item"]["calls"] for r in rows),
                      "per_task": {r["task"]: {"items": r["items"], "batched": r["batched"]["tokens"],
                                               "per_item": r["per_item"]["tokens"], "ratio": r["ratio"]}
                                   for r in rows}}))
    return 0 if ratio <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
