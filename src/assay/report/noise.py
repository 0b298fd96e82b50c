"""`assay noise`: the noise of the harness itself over a campaign's epochs, per agent: the
between-epoch variance of the mean score, the within-task variance, the void rate, and the
tasks whose pass/fail outcome flips across epochs (`metrics.flakiness`), those above a
threshold flagged as candidates for `assay curate`. A deterministic agent (a task's
`reference` policy) shows the floor the harness adds: 0 variance, no flips."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from assay import metrics
from assay.report.compare import finished
from assay.report.model import Noise, NoiseAgent, NoiseTask
from assay.store import Store

__all__ = ["DEFAULT_THRESHOLD", "noise"]

DEFAULT_THRESHOLD = 0.2
"""A task is flagged when more than this share of its epochs flip against the majority."""


def noise(store: Store, campaign: str, agents: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> Noise:
    """The `Noise` of `agents` in `campaign` (their finished current runs and every stored attempt)."""
    counts = store.attempt_counts(campaign)
    out = []
    for agent in agents:
        side = finished(store, campaign, agent)
        scores: dict[tuple[str, str | None], dict[int, float]] = defaultdict(dict)
        passes: dict[tuple[str, str | None], dict[int, bool]] = defaultdict(dict)
        for (task_id, level, epoch), run in side.items():
            scores[(task_id, level)][epoch] = run.score
            passes[(task_id, level)][epoch] = run.passed  # by the run's kind's own rule, as graded
        means, between, within = metrics.epoch_noise(scores.values())
        flips = []
        for (task_id, level), by in sorted(passes.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            outcomes = [by[e] for e in sorted(by)]
            f = metrics.flakiness(outcomes)
            if f > 0:
                flips.append(NoiseTask(task_id=task_id, level=level, epochs=len(outcomes), passes=sum(outcomes),
                                       flakiness=f))
        n, void = counts.get(agent, (0, 0))
        out.append(NoiseAgent(agent=agent, runs=len(side), epochs=len({k[2] for k in side}), attempts=n,
                              void_rate=void / n if n else None, epoch_means=means,
                              between_epoch_var=between, within_task_var=within, flaky_tasks=len(flips),
                              flagged=[t for t in flips if t.flakiness > threshold]))
    return Noise(campaign=campaign, threshold=threshold, agents=out)
