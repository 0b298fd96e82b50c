"""The terminal leaderboard built by forked processes (`assay.report.forked`) is the report one
process builds, whatever the split of agents, filters and labels; a child's failure is raised in
the parent, never a partial report; the parent's store stays usable."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from assay.errors import InputError
from assay.report import build, forked
from assay.report.build import build_report
from assay.report.runs import read_runs
from assay.store import Store
from tests.helpers import assay
from tests.test_report_read import _canon, _rec, same_task_other_keys, varied

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """Two campaigns of several agents, kinds, people (a human baseline), retried and void runs,
    a task under two contents (a warning), and an agent run with and without search."""
    st = Store(f"sqlite:///{tmp_path_factory.mktemp('store') / 'assay.db'}")
    for campaign in ("c", "other"):
        searched = []
        for mode, score in (("off", 0.3), ("local", 0.6), ("brave", 0.5)):
            for task in ("r1", "r2"):
                r = _rec(campaign, "m1", task, "rubric", score, options_hash=mode)
                r.options = {"search": mode}
                searched.append(r)
        for r in [*varied(campaign), *same_task_other_keys(campaign), *searched]:
            st.save_run(r, [])
    return st


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the children `assay.report.forked` forks during the test."""
    pids: list[int] = []
    fork = os.fork

    def counting_fork() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(forked.os, "fork", counting_fork)
    return pids


def _serial(store: Store, campaign: str | None, agents: set[str] | None, kind: str | None,
            labels: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What `assay report` builds in one process: every run read, then filtered."""
    runs = [r for r in read_runs(store, campaign, whole=False, labels=labels)
            if (agents is None or r.key.agent in agents) and (kind is None or r.kind == kind)]
    return build_report(campaign, runs, labels=labels, details=False)


@pytest.mark.parametrize("processes", [2, 3, 8])
@pytest.mark.parametrize("campaign", ["c", "other", None])
def test_forked_report_equals_the_one_process_report(store: Store, campaign: str | None, processes: int) -> None:
    labels = [{"task_id": "r1", "item_id": "i1", "met": True, "labeller": "x", "run_id": r.run_id}
              for r in store.runs(campaign) if r.key.task_id == "r1"]
    for lab in (None, labels):
        rep = forked.leaderboard(store, campaign, labels=lab, processes=processes)
        assert rep is not None
        assert _canon(rep) == _canon(_serial(store, campaign, None, None, lab))
    assert rep is not None
    # The people's baseline, the search deltas, the mixing warnings and every kind are there:
    # a part that lost one would differ above only if the fixture had it.
    assert rep["human_baseline"] and rep["search_deltas"] and rep["warnings"]
    assert {a["agent"] for a in rep["agents"]} >= {"m1", "m2", "human:alice"}
    assert set(rep["task_sets"]) == {"rubric", "contract", "scenario"}
    assert store.campaigns()  # the parent's connections still work


@pytest.mark.parametrize("kind", [None, "rubric", "scenario", "contract"])
@pytest.mark.parametrize("agents", [{"m1", "m2"}, {"m2", "human:alice"}, {"m1", "human:alice", "nobody"}])
def test_forked_report_honours_the_agent_and_kind_filters(store: Store, agents: set[str], kind: str | None) -> None:
    rep = forked.leaderboard(store, "c", agents=agents, kind=kind, processes=2)
    assert rep is not None
    assert _canon(rep) == _canon(_serial(store, "c", agents, kind, None))
    assert {a["agent"] for a in rep["agents"]} <= agents


def test_nothing_to_split_is_left_to_one_process(store: Store) -> None:
    assert forked.leaderboard(store, "c", processes=1) is None
    assert forked.leaderboard(store, "c", agents={"m1"}, processes=2) is None  # one agent, few runs
    assert forked.leaderboard(store, "c", agents={"m1"}, processes=1, min_split=1) is None
    assert forked.leaderboard(store, "c", agents={"nobody"}, processes=2) is None
    memory = Store("sqlite://")  # a child could not reopen it
    try:
        for r in varied("c"):
            memory.save_run(r, [])
        assert not memory.reopenable and forked.leaderboard(memory, "c", processes=2) is None
    finally:
        memory.close()


@pytest.mark.parametrize("campaign", ["c", None])
@pytest.mark.parametrize("kind", [None, "rubric", "scenario"])
@pytest.mark.parametrize("agent", ["m1", "m2", "human:alice"])
def test_one_agent_read_in_two_halves_gives_the_one_process_report(store: Store, agent: str, kind: str | None,
                                                                    campaign: str | None) -> None:
    """One agent: a child reads the second half of its runs (`min_split` 1: split however few),
    with its re-run void attempt, epochs, levels, labels and (campaign None) the same keys in
    two campaigns; the report is the one-process one."""
    labels = [{"task_id": "r1", "item_id": "i1", "met": True, "labeller": "x", "run_id": r.run_id}
              for r in store.runs(campaign) if r.key.task_id == "r1"]
    for lab in (None, labels):
        rep = forked.leaderboard(store, campaign, agents={agent}, kind=kind, labels=lab, processes=2, min_split=1)
        assert rep is not None
        assert _canon(rep) == _canon(_serial(store, campaign, {agent}, kind, lab))
    assert forked.leaderboard(store, campaign, agents={agent}, processes=2) is None  # under MIN_SPLIT runs


def test_report_values_split_anywhere_gives_every_run_once_in_order(store: Store) -> None:
    """Whatever the middle (every run's order prefix tried), the two halves follow each other:
    together the whole read, the latest attempt of each key once (no key is cut in two)."""
    from assay.store.db import ORDER_PREFIX

    for campaign, agents in (("c", None), ("c", ["m2"]), (None, ["m1"])):
        whole = store.report_values(campaign, agents, task_meta=False)
        ids = [row[0] for row in whole]
        assert len(set(ids)) == len(ids) > 10
        middle = store.report_middle(campaign, agents)
        assert middle is not None and len(middle) == ORDER_PREFIX
        runs = {r.run_id: r for r in store.runs(campaign)}
        cuts = {(r.key.task_id, r.key.agent, r.key.level is not None, r.key.level or "", r.key.epoch)
                for r in runs.values()}
        for cut in [middle, *sorted(cuts)]:
            first = store.report_values(campaign, agents, task_meta=False, until=cut)
            second = store.report_values(campaign, agents, task_meta=False, since=cut)
            assert [row[0] for row in first + second] == ids, cut
    assert store.report_middle("nothing") is None


def test_a_sampled_middle_splits_in_about_equal_halves(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over more runs than `MIDDLE_SAMPLE` the middle is that of a random sample: whatever it
    is, the halves are the whole read in order, and they are rarely far from equal."""
    from assay.store import db

    monkeypatch.setattr(db, "MIDDLE_SAMPLE", 8)
    whole = [row[0] for row in store.report_values(None, None, task_meta=False)]
    assert len(whole) >= 64
    sizes = []
    for _ in range(20):
        middle = store.report_middle(None)
        if middle is None:  # a sample of under two: possible, rare
            continue
        first = store.report_values(None, None, task_meta=False, until=middle)
        second = store.report_values(None, None, task_meta=False, since=middle)
        assert [row[0] for row in first + second] == whole
        sizes.append(len(first) / len(whole))
    assert len(sizes) >= 15 and 0.3 < sorted(sizes)[len(sizes) // 2] < 0.7


def test_an_error_in_the_half_reading_child_is_raised_in_the_parent(store: Store,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    real = Store.report_values

    def failing(self: Store, *args: Any, **kw: Any) -> Any:
        if kw.get("since") is not None:
            raise InputError(None, "--store", "the second half went away")
        return real(self, *args, **kw)

    monkeypatch.setattr(Store, "report_values", failing)
    with pytest.raises(InputError, match="the second half went away"):
        forked.leaderboard(store, "c", agents={"m1"}, processes=2, min_split=1)
    assert store.campaigns()


def test_an_interrupted_parent_kills_and_reaps_every_child(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                           forks: list[int]) -> None:
    """Ctrl-C while the parent waits for a result: no child is left behind (blocked writing
    its result to a pipe nobody reads), for both kinds of children."""
    real = os.fdopen

    class Interrupted:
        def __init__(self, fd: int) -> None:
            self.f = real(fd, "rb")

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: Any) -> None:
            self.f.close()

        def read(self) -> bytes:
            raise KeyboardInterrupt

    def fdopen(fd: int, mode: str = "r", *args: Any, **kw: Any) -> Any:
        return Interrupted(fd) if mode == "rb" else real(fd, mode, *args, **kw)

    monkeypatch.setattr(forked.os, "fdopen", fdopen)
    with pytest.raises(KeyboardInterrupt):
        forked.leaderboard(store, "c", processes=2)
    with pytest.raises(KeyboardInterrupt):
        forked.leaderboard(store, "c", agents={"m1"}, processes=2, min_split=1)
    assert len(forks) == 3
    for pid in forks:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    assert store.campaigns()


def test_groups_balance_the_runs_and_keep_every_agent() -> None:
    counts = {"a": 100, "b": 60, "c": 50, "d": 10}
    gs = forked.groups(counts, 2)
    assert sorted(a for g in gs for a in g) == sorted(counts)
    assert sorted(sum(counts[a] for a in g) for g in gs) == [110, 110]
    assert forked.groups(counts, 8) == [["a"], ["b"], ["c"], ["d"]]
    assert forked.groups({"a": 1}, 2) == [["a"]]


def test_an_error_in_a_child_is_raised_in_the_parent(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    real = build.agent_part

    def failing(agent: str, *args: Any) -> Any:
        if agent == "m2":
            raise InputError(None, "--store", "the store went away")
        return real(agent, *args)

    monkeypatch.setattr(forked, "agent_part", failing)  # the children are forked with it
    with pytest.raises(InputError, match="the store went away"):
        forked.leaderboard(store, "c", processes=2)
    assert store.campaigns()


def test_an_error_that_cannot_be_sent_still_reaches_the_parent(store: Store,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    class Unpicklable(Exception):
        def __reduce__(self) -> Any:
            raise TypeError("no pickling")

    def failing(agent: str, *args: Any) -> Any:
        raise Unpicklable("odd failure")

    monkeypatch.setattr(forked, "agent_part", failing)
    with pytest.raises(RuntimeError, match="Unpicklable: odd failure"):
        forked.leaderboard(store, "c", processes=2)


def test_a_child_killed_midway_fails_the_report_and_leaves_no_child(store: Store, monkeypatch: pytest.MonkeyPatch,
                                                                     forks: list[int]) -> None:
    real = build.agent_part

    def killed(agent: str, *args: Any) -> Any:
        if agent == "m1":
            os.kill(os.getpid(), signal.SIGKILL)
        return real(agent, *args)

    monkeypatch.setattr(forked, "agent_part", killed)
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        forked.leaderboard(store, "c", processes=2)
    assert len(forks) == 2
    for pid in forks:  # every child was reaped
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_cli_terminal_report_is_the_same_in_one_process_and_in_several(store: Store, tmp_path: Path) -> None:
    url = store.url
    for extra in ([], ["--agent", "m1", "--agent", "human:alice"], ["--kind", "scenario"],
                  ["--campaign", "other", "--agent", "m2", "--agent", "m1"]):
        args = ["report", "--store", url, *(["--campaign", "c"] if "--campaign" not in extra else []), *extra]
        several = assay(*args, cwd=tmp_path, env={"ASSAY_REPORT_PROCESSES": "2"})
        one = assay(*args, cwd=tmp_path, env={"ASSAY_REPORT_PROCESSES": "1"})
        default = assay(*args, cwd=tmp_path)
        assert several.returncode == one.returncode == default.returncode == 0, several.stderr + one.stderr
        assert several.stdout == one.stdout == default.stdout and several.stderr == one.stderr
        assert "m1" in several.stdout


def test_cli_refuses_a_bad_process_count(store: Store, tmp_path: Path) -> None:
    for bad in ("0", "two", "-1"):
        r = assay("report", "--store", store.url, "--campaign", "c", cwd=tmp_path, env={"ASSAY_REPORT_PROCESSES": bad})
        assert r.returncode == 2 and "ASSAY_REPORT_PROCESSES" in r.stderr and "Traceback" not in r.stderr


def test_postgresql_forked_report_equals_the_one_process_report(pg_url: str) -> None:
    """The children open their own connections: the parent's stay usable, the report the same."""
    st = Store(pg_url)
    try:
        for r in [*varied("c"), *same_task_other_keys("c")]:
            st.save_run(r, [])
        assert st.campaigns() == ["c"]  # a pooled connection the children inherit
        rep = forked.leaderboard(st, "c", processes=2)
        assert rep is not None and _canon(rep) == _canon(_serial(st, "c", None, None, None))
        assert st.campaigns() == ["c"]
        # Its order of text is not Python's: one agent's read is not split there.
        assert st.report_middle("c") is None
        assert forked.leaderboard(st, "c", agents={"m1"}, processes=2, min_split=1) is None
    finally:
        st.close()


def test_cli_one_agent_over_the_split_threshold_reports_the_same(tmp_path: Path) -> None:
    """`assay report` over 20,000 stored runs of one agent (the bench's synthetic runs: void
    ones, two currencies, costs) reads them in halves: the same output as in one process."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_report", Path(__file__).parents[1] / "bench/bench_report.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    (tmp_path / ".assay").mkdir()
    db = tmp_path / ".assay" / "assay.db"
    bench.fill(db, forked.MIN_SPLIT, 1, None)
    st = Store(f"sqlite:///{db}")
    try:
        assert st.report_agents("bench") == {"agent-0": forked.MIN_SPLIT} and st.report_middle("bench") is not None
    finally:
        st.close()
    split = assay("report", "--campaign", "bench", cwd=tmp_path, env={"ASSAY_REPORT_PROCESSES": "2"})
    one = assay("report", "--campaign", "bench", cwd=tmp_path, env={"ASSAY_REPORT_PROCESSES": "1"})
    assert split.returncode == one.returncode == 0, split.stderr + one.stderr
    assert split.stdout == one.stdout and "agent-0" in split.stdout and split.stderr == one.stderr
