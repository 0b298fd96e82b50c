"""Fixtures every test module may use: a real PostgreSQL server and store URLs on both
backends (tests/pg.py).

pytest-xdist's workers inherit a terminal size (COLUMNS=80, LINES=24) that a piped command
never has; the CLI's tables then wrap as on an 80-column terminal. Tests see the CLI as a
pipe sees it, in one process or several.
"""

import os

from tests.pg import pg_server, pg_url, store, store_url  # noqa: F401 (pytest finds fixtures by name here)

for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
