"""The shared loop's context discipline, and report blocks built from stored runs."""

from __future__ import annotations

from assay.agent.loop import CUT_NOTICE, estimate_tokens, trim_context
from assay.agent.tools import TOOL_OUTPUT_LIMIT, clip
from assay.llm.messages import Message
from assay.record import RunKey, RunRecord, UsageCost
from assay.report.build import build_report


def test_clip_keeps_head_and_tail_within_the_limit() -> None:
    text = "A" * 10_000 + "MIDDLE" + "Z" * 10_000
    out = clip(text)
    assert len(out) <= TOOL_OUTPUT_LIMIT + 60
    assert out.startswith("A" * 100) and out.endswith("Z" * 100)
    assert "characters cut" in out and "MIDDLE" not in out
    assert clip("short") == "short"


def test_trim_context_cuts_oldest_tool_outputs_first() -> None:
    msgs = [Message(role="system", content="sys"), Message(role="user", content="task")]
    for i in range(10):
        msgs.append(Message(role="assistant", content=f"step {i}"))
        msgs.append(Message(role="tool", content=f"output {i} " + "x" * 4000, tool_call_id=str(i)))
    before = estimate_tokens(msgs)
    cut = trim_context(msgs, budget_tokens=before // 2)
    assert cut > 0 and estimate_tokens(msgs) <= before // 2
    tools = [m for m in msgs if m.role == "tool"]
    assert all(m.content == CUT_NOTICE for m in tools[:cut])
    assert all(m.content != CUT_NOTICE for m in tools[cut:])  # the newest outputs survive
    assert msgs[1].content == "task"  # the brief is never cut
    assert trim_context(msgs, budget_tokens=10**9) == 0


def _rec(agent: str, task: str, score: float, cost: float | None, modality: str) -> RunRecord:
    key = RunKey(campaign="c", task_id=task, task_hash="h", agent=agent, level=None, epoch=1, options_hash="o")
    return RunRecord(run_id=f"{agent}-{task}", key=key, kinds=["contract"], harness_version="t", status="done",
                     end_reason="finished", score=score, passed=score >= 0.7, usage=UsageCost(cost_usd=cost),
                     grade={"sat": True, "audit": {"flags": [], "removed": 0, "pre_audit_score": score}},
                     task_meta={"modality": modality, "execution": "single-step"})


def test_pareto_fronts_and_modality_pools() -> None:
    runs = [
        _rec("cheap", "t1", 0.5, 0.01, "text"), _rec("cheap", "m1", 0.2, 0.01, "multimodal"),
        _rec("strong", "t1", 0.9, 0.50, "text"), _rec("strong", "m1", 0.9, 0.50, "multimodal"),
        _rec("wasteful", "t1", 0.4, 0.90, "text"), _rec("wasteful", "m1", 0.3, 0.90, "multimodal"),
        _rec("unpriced", "t1", 1.0, None, "text"),
    ]
    rep = build_report("c", runs)
    front = {scope: [p["agent"] for p in pts] for scope, pts in rep["pareto"].items()}
    assert front["all"] == ["cheap", "strong"]  # wasteful is dominated; unpriced has no cost
    assert front["text"] == ["cheap", "strong"] and front["multimodal"] == ["cheap", "strong"]
    strong = next(a for a in rep["agents"] if a["agent"] == "strong")
    assert strong["contract"]["modalities"] == {"text": 0.9, "multimodal": 0.9}
    assert strong["contract"]["cells"] == {"text/single-step": 0.9, "multimodal/single-step": 0.9}


def test_healthbench_scores_stay_unclipped_per_run_and_the_mean_is_clipped() -> None:
    def rec(task: str, score: float) -> RunRecord:
        key = RunKey(campaign="c", task_id=task, task_hash="h", agent="a", level=None, epoch=1, options_hash="o")
        return RunRecord(run_id=task, key=key, kinds=["rubric"], harness_version="t", status="done",
                         end_reason="finished", score=score, passed=score >= 0.7,
                         grade={"expert_score": score, "scoring": "unclipped_mean", "tags": {}, "na": 0,
                                "items": []})

    rep = build_report("c", [rec("p1", -0.8), rec("p2", 0.3)])
    assert [r["score"] for r in rep["runs"]] == [-0.8, 0.3]
    assert rep["agents"][0]["rubric"]["expert_score"] == 0.0  # mean -0.25, clipped
    rep = build_report("c", [rec("p1", 0.9), rec("p2", 1.4)])
    assert rep["agents"][0]["rubric"]["expert_score"] == 1.0
