"""Fixtures every test module may use: a real PostgreSQL server and store URLs on both
backends (tests/pg.py); and the tiers.

The tiers: `pytest -m "not slow"` is the fast tier, `pytest -m slow` the rest; together they
are the whole suite. A test is slow when it needs what takes seconds to start or to tear
down: every test under tests/e2e (real sandboxes, browsers, the local model) and
tests/security (the red team), every test using PostgreSQL (the `pg_server` fixture; a
fixture asking for `pg_url` by name marks its PostgreSQL case itself, as `store_url` in
tests/pg.py does, and `pg_url` fails a test that is not marked), every test on a Ray cluster,
and the modules in SLOW_MODULES. A test elsewhere that is slow on its own carries
`@pytest.mark.slow` in place.

pytest-xdist's workers inherit a terminal size (COLUMNS=80, LINES=24) that a piped command
never has; the CLI's tables then wrap as on an 80-column terminal. Tests see the CLI as a
pipe sees it, in one process or several.
"""

import os
from pathlib import Path

import pytest

from tests.pg import pg_server, pg_url, store, store_url  # noqa: F401 (pytest finds fixtures by name here)

for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

TESTS = Path(__file__).resolve().parent
SLOW_FOLDERS = {
    TESTS / "e2e": "end to end: real sandboxes, servers, browsers, the local model",
    TESTS / "security": "the red team: real sandboxes attacked",
}
SLOW_FIXTURES = {
    "pg_server": "a PostgreSQL server (one per test process) and a database per test",
    "cluster": "a Ray cluster in a private network namespace (tests/test_campaign_ray.py)",
}
SLOW_MODULES = {
    TESTS / "test_env_sandbox.py": "a real bubblewrap sandbox per test, most of them killing what it left",
    TESTS / "test_people_server_sandbox.py": "stakeholder servers reached from real sandboxes",
}


LONGEST_FIRST = (  # alternately to the two processes: the local model (a core of its own) not beside the workers' test
    "tests/test_store_workers.py::test_four_real_workers_pay_each_call_once_and_end_with_the_last_save",
    "tests/e2e/test_scenarios.py::test_anchors_pass_on_the_starter_scenarios",
    "tests/test_campaign_ray.py::test_a_campaign_that_stops_on_evidence_decides_on_ray_as_locally",
    "tests/e2e/test_local_model.py::test_the_local_model_judges_a_rubric_task_whose_items_need_a_judge",
    "tests/test_campaign_ray.py::test_ray_campaign_into_a_postgresql_store",
    "tests/security/test_round5_stalls.py::",
)
"""The slow tier's longest tests (40 s to 170 s each, from `scripts/run-tests`' list of the 25
slowest), started first: pytest-xdist hands tests out in collection order, and one of these
begun last leaves the other process idle for its length (the tier's wall time, not its work)."""


def slow_reason(item: pytest.Item) -> str | None:
    """Why `item` belongs to the slow tier (None: it is fast)."""
    path = Path(str(item.fspath))
    for folder, why in SLOW_FOLDERS.items():
        if folder in path.parents:
            return why
    if path in SLOW_MODULES:
        return SLOW_MODULES[path]
    for name in getattr(item, "fixturenames", ()):
        if name in SLOW_FIXTURES:
            return SLOW_FIXTURES[name]
    return None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") is None and slow_reason(item) is not None:
            item.add_marker(pytest.mark.slow)

    def rank(item: pytest.Item) -> int:
        return next((i for i, key in enumerate(LONGEST_FIRST) if key in item.nodeid), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: the rest keep their order
