"""Defaults of a campaign's options, the one place they are written: the CLI (its options'
defaults, read when the command line is built, so this module imports nothing), the library,
the planner and the web app use these. `assay.config` re-exports them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULTS", "Defaults"]


@dataclass(frozen=True, slots=True)
class Defaults:
    max_turns: int = 200
    max_minutes: float = 150.0
    max_usd: float = 8.0
    concurrency: int = 4
    epochs: int = 1
    campaign: str = "default"
    grade_timeout_s: float = 600.0
    check_timeout_s: float = 60.0
    predicate_timeout_s: float = 30.0


DEFAULTS = Defaults()
