"""assay: measure what language agents are worth on real professional work.

The library's public face. Everything a Python user needs is importable from here; the
modules behind it are internal and may change between versions.

    import assay

    tasks = assay.load_tasks(["suites/starter"])                 # read and validate tasks
    options = assay.RunOptions(paths=["suites/starter"], agents=["noop", "reference"])
    result, report = assay.run_campaign(options)                 # run, grade, store; report JSON
    with assay.open_store("sqlite:///.assay/assay.db") as store:
        report = assay.build_report("default", store.runs("default"))

`run_campaign` is the whole of `assay run`; `arun_campaign` is the same for code that already
runs an event loop. Names load on first use, so `import assay` stays fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from assay.version import __version__

if TYPE_CHECKING:
    from assay.campaign.options import RunOptions
    from assay.campaign.scheduler import CampaignResult
    from assay.errors import InputError
    from assay.record import Grade, RunKey, RunRecord
    from assay.report.build import build_report
    from assay.store import Store, open_store
    from assay.task.model import Task

__all__ = [
    "CampaignResult", "Grade", "InputError", "RunKey", "RunOptions", "RunRecord", "Store", "Task",
    "__version__", "arun_campaign", "build_report", "load_tasks", "open_store", "run_campaign",
]

_LAZY = {
    "CampaignResult": "assay.campaign.scheduler",
    "Grade": "assay.record",
    "InputError": "assay.errors",
    "RunKey": "assay.record",
    "RunOptions": "assay.campaign.options",
    "RunRecord": "assay.record",
    "Store": "assay.store",
    "Task": "assay.task.model",
    "build_report": "assay.report.build",
    "open_store": "assay.store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'assay' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def load_tasks(paths: list[Any], task_ids: list[str] | None = None) -> list[Task]:
    """Every task under `paths` (files or folders, any supported format), validated; with
    `task_ids`, only those (an id, or `SCENARIO` for all its variants). InputError on bad input."""
    from assay.task.discover import discover, select

    return select(discover(paths), list(task_ids or []))


async def arun_campaign(options: RunOptions, *, show_progress: bool = False
                        ) -> tuple[CampaignResult, dict[str, Any]]:
    """Run a campaign (resuming what its store holds): the run counts and the report JSON."""
    from assay.campaign.service import prepare_campaign, run_prepared

    prepared = prepare_campaign(options)
    try:
        return await run_prepared(prepared, show_progress=show_progress)
    finally:
        prepared.store.close()


def run_campaign(options: RunOptions, *, show_progress: bool = False) -> tuple[CampaignResult, dict[str, Any]]:
    """`arun_campaign` on a fresh event loop (from code that does not run one already)."""
    import asyncio

    return asyncio.run(arun_campaign(options, show_progress=show_progress))
