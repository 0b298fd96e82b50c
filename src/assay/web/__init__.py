"""The web app behind `assay serve`: leaderboard, run viewer, JSON API and human play."""

from assay.web.app import create_app

__all__ = ["create_app"]
