"""Fixtures every test module may use: a real PostgreSQL server and store URLs on both
backends (tests/pg.py)."""

from tests.pg import pg_server, pg_url, store_url  # noqa: F401 (pytest finds fixtures by name here)
