"""The web app behind `assay serve`: leaderboard, run viewer, JSON API and human play.

`create_app` is imported on first use: a play worker process (`python -m
assay.web.worker_main`) imports only what runs a session, not the app's pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay.web.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from assay.web.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
