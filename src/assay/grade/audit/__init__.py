"""The evidence audit: a positive score a judge gave must be supported by the trace and artifacts.

DAREBench (seed 002) reviews suspicious positive scores with deterministic post-hoc rules plus
a meta-judge; its code was never released, so this is assay's own design (docs/audit.md).

Who is audited: runs with a positive score that came, wholly or partly, from a judge, i.e.
the task scores by its contract, is graded `judge` or `hybrid` (with a judge weight) and the
judge total is > 0; or the task scores by its rubric and at least one positive item
without a machine check was credited by the judge. Everything else (scenarios, machine
checks, contract predicates alone, scores of 0) is not audited: `flags` stays empty and
`pre_audit_score` is the score. (Passages addressed to the grader are also looked for when
the rubric's judged items gave no credit but the score is positive: a negative item the
judge left unmet is credit too.)

Rules (each a function returning flags `{rule, reason, severity}`):

- hard: `missing_artifact` (a required contract artifact is missing or empty),
  `no_tool_ran` (a tool task, execution form multi-step-with-tools, no tool call at all),
  `phantom_claim` (the final message claims a file written or a command run that never
  happened);
- soft: `hit_limit` (the run ended on max_time/max_turns/max_usd and the judge gave high
  credit), `answer_not_in_output` (the judge's notes quote a number or string that is in
  neither the final message nor any artifact), `rubric_number_claim` (a credited judged
  rubric item, or its reason, cites a number the answer does not contain), `judge_injection`
  (the answer repeats a rubric item's text verbatim). An optional contract artifact
  (DareBench's inferred outputs) that is missing gives a soft `missing_artifact`.

Passages addressed to the grader come first (`find_injection`, on
`assay.llm.passages.PassageFinder`, and the injection screen): instructions to an evaluator,
grader, judge or model, verdict-shaped blocks, claims that the rubric is met, orders to
ignore the instructions, role and fake boundary markers, in exactly the texts of the run any
judge is shown, cut as shown (`gather`): the task's judge's views (a rubric judge's final
message; a contract judge's transcript summary, final message and contract files) and the
meta-judge's (its trace summary, the final message, the artifacts' heads and names), unless
the task's own text matches the same rule. When there are any, the run is judged again by
the same judge on the same items or contract with those passages removed from everything
the judge is shown; the
lower of the two verdicts is kept (written into the grade: the rubric's items, or the
contract's `judge`), and a `judge_injection` flag records the passages, both verdicts and
both scores. The re-judge's usage is the run's judge usage; a provider failure on it is a
GraderError, as for the first verdict. The rules then look at what the kept verdict credits,
and a re-judged passage flag needs no meta-judge of its own.

Decision: any flag sends the run to the meta-judge when the run has a judge (the first
judge model, through `Judge.ask_raw`). `supported: false` removes the positive (score 0,
every flag `removed`); `supported: true` keeps it. A meta-judge that stays unparseable
after 2 retries falls back to the no-meta-judge rule and the failure is recorded; a
provider failure voids the run (GraderError). The meta-judge is shown the agent's texts
without the passages addressed to the grader. Without a meta-judge, a hard flag removes the positive and soft
flags are only recorded.

The evidence (the trace, the workspace's files within `MAX_FILES`, `READ_BYTES` and an entry
ceiling, `ASSAY_COPY_MAX_FILES`, recorded in `audit.workspace_capped` when reached) and the
judges' texts are read in a grading worker process (`assay.grade.workers`), never on the
event loop. What the worker cannot finish within its limits removes the judge's credit
(`audit_undecided`) and is a fault of the run (`grade.faults`, part `audit`), never a void.
The meta-judge's prompt fences what the agent controls (trace, artifacts,
final message) and the verdict under review between boundary markers and says
they are untrusted data (`assay.llm.untrusted`); its reply's last `supported` value counts.

The audit is split by job: `evidence` (what is read of a run), `claims` (what a final message
says it did), `rules` (the deterministic flags and what the judge credited), `meta` (the
meta-judge), `injection` (passages addressed to the grader and the re-judge), `offload` (work
on agent-made input in a grading worker) and `run` (one run's audit and its decision).
"""

from __future__ import annotations

from assay.grade.audit.evidence import collect_evidence
from assay.grade.audit.injection import find_injection, rule_judge_injection
from assay.grade.audit.meta import META_SYSTEM, meta_judge_prompt
from assay.grade.audit.rules import (
    HARD_RULES,
    SOFT_RULES,
    judge_credit,
    rule_answer_not_in_output,
    rule_hit_limit,
    rule_missing_artifact,
    rule_no_tool_ran,
    rule_phantom_claim,
    rule_rubric_number_claim,
)
from assay.grade.audit.run import audit_run
from assay.grade.injection_screen import Injection

__all__ = ["HARD_RULES", "META_SYSTEM", "SOFT_RULES", "Injection", "audit_run", "collect_evidence", "find_injection",
           "judge_credit", "meta_judge_prompt", "rule_answer_not_in_output", "rule_hit_limit", "rule_judge_injection",
           "rule_missing_artifact", "rule_no_tool_ran", "rule_phantom_claim", "rule_rubric_number_claim"]
