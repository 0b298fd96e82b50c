"""`assay report --failure-modes --judge SPEC`: the judge that classifies failed runs, built
from the config and cached in the store like every judge call (see
`assay.report.failure_modes` for the prompt, the categories and the parsing)."""

from __future__ import annotations

from typing import Any

from assay.config import load_config
from assay.errors import InputError, ProviderError
from assay.grade.judge import Judge
from assay.llm.resolve import resolve_model
from assay.record import RunRecord
from assay.report.failure_modes import classify, summary


def check_judge(specs: list[str]) -> str:
    """The judge spec `--failure-modes` uses (the first `--judge`); InputError (exit 2)
    without one or for a spec the config does not resolve."""
    if not specs:
        raise InputError(None, "--judge", "--failure-modes needs a --judge MODEL to classify the failed runs")
    resolve_model(specs[0], load_config(), field="--judge")
    return specs[0]


async def failure_modes(spec: str, cache: Any, runs: list[RunRecord]) -> dict[str, Any]:
    """The report's `failure_modes` block for these runs, each judge call cached in `cache`."""
    judge = Judge.from_specs([spec], load_config())
    judge.cache = cache
    try:
        return summary(judge.name, await classify(judge, runs))
    except ProviderError as e:  # the judge stayed unreachable after its retries: say so, exit 2
        raise InputError(None, "--judge", f"the judge {spec} failed while classifying failed runs: {e}") from e
    finally:
        await judge.aclose()
