"""Persistence of run attempts, transcripts, grades and the judge cache (SQLite or PostgreSQL)."""

from assay.store.db import Store, open_store

__all__ = ["Store", "open_store"]
