"""Audit work on agent-made input off the event loop, in a grading worker; what it cannot
finish is `audit_undecided`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from assay.config import settings
from assay.grade import workers


class Undecided(Exception):
    """The audit's rules could not read the evidence within their limits (`off_loop`)."""


T = TypeVar("T")


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """A deterministic step of the audit on the agent's text and files, in a worker process with
    a time limit (`assay.grade.workers`); `Undecided` past its limits."""
    try:
        return await workers.call(fn, *args, timeout_s=settings().predicate_timeout_s)
    except (workers.WorkerTimeout, workers.WorkerFailed) as e:
        raise Undecided(str(e)) from None


def undecided_flag(why: str) -> dict[str, Any]:
    """A hard flag for evidence the audit could not read within its limits: the judge's credit
    cannot be checked, so it is removed (the agent's text made the audit fail)."""
    return {"rule": "audit_undecided", "severity": "hard",
            "reason": f"the evidence audit on this run's text and files {why}: the judge's credit is removed"}
