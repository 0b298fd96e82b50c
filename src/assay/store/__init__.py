"""Persistence of run attempts, transcripts, grades and the judge cache (SQLite or PostgreSQL)."""

from assay.store.db import Store, default_store_url, open_store

__all__ = ["Store", "default_store_url", "open_store"]
