"""The terminal leaderboard built by forked processes: one per group of agents, or, for one
agent alone, one that reads half of its runs.

Over 100,000 runs a leaderboard spends its time reading the runs' summaries and folding them
per agent (`build.AgentRuns`), and an agent's part of the report (`build.AgentPart`) depends
on its own runs alone. So on a machine with several CPUs each group of agents is read and
folded in a child forked for it, which sends its parts back through a pipe; the parent joins
them (`build.assemble`) into the report `build_report(..., details=False)` gives over the
same runs, in about half the wall time on two CPUs. One agent's part cannot be split so, but
its read can (on SQLite, `Store.report_middle`): a child reads the second half of its runs'
summaries while the parent reads and builds the first, and sends its rows back (a pickle of
plain values: cheaper than the read); the parent builds the report from both halves. A child
opens its own connections to the store and never touches the parent's; it ends by
`os._exit`, running none of the parent's clean-up. Only reports without per-run rows are built
so (their rows would cost more to send back than to build); `--shared-tasks` needs every
agent's tasks before any part and is built in one process.
"""

from __future__ import annotations

import functools
import os
import pickle
import signal
from collections.abc import Callable, Collection, Iterator
from typing import Any

from assay.report.build import HUMAN_PREFIX, AgentPart, agent_part, agent_runs, assemble, build_report
from assay.report.runs import ReportRun, no_gc, read_runs, summary_runs
from assay.store import Store

MIN_SPLIT = 20_000
"""One agent's read is split in two from this many stored attempts (below, a fork costs more
than half the read saves)."""

_KEPT: list[Any] = []
"""In a child, the parent's connection pools it must neither use nor close (closing a copy of
an SQLite connection across a fork can disturb the parent's locks)."""


def cpus() -> int:
    """The CPUs this process may run on (1 where `os.fork` is missing: no child can be forked)."""
    if not hasattr(os, "fork"):
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity call (macOS)
        return os.cpu_count() or 1


def groups(counts: dict[str, int], n: int) -> list[list[str]]:
    """The agents in at most `n` groups of about equal runs (`counts`: runs per agent), the
    largest agent first into the lightest group; each group's names sorted, no group empty."""
    out: list[list[str]] = [[] for _ in range(min(n, len(counts)))]
    load = [0] * len(out)
    for agent in sorted(counts, key=lambda a: (-counts[a], a)):
        i = load.index(min(load))
        out[i].append(agent)
        load[i] += counts[agent]
    return [sorted(g) for g in out if g]


def leaderboard(store: Store, campaign: str | None, *, agents: Collection[str] | None = None,
                kind: str | None = None, labels: list[dict[str, Any]] | None = None,
                processes: int | None = None, min_split: int = MIN_SPLIT) -> dict[str, Any] | None:
    """The report without per-run rows of `campaign`'s runs (of `agents` and of `kind` only,
    when given; `labels` as `build_report` takes them), built with up to `processes` forked
    children (default: one per CPU). None when there is nothing to split: fewer than two
    processes, no such agent, one agent with fewer than `min_split` stored attempts or on a
    store that cannot split a read, or a store in memory (a child could not reopen it); the
    caller then builds the report in one process."""
    n = cpus() if processes is None else processes
    if n < 2 or not hasattr(os, "fork") or not store.reopenable:
        return None
    if store.has_broken(campaign):  # a broken task leaves every agent's runs of it out: not one group's to see
        return None
    counts = {a: c for a, c in store.report_agents(campaign).items() if agents is None or a in agents}
    if len(counts) == 1:
        runs = _split_read(store, campaign, counts, labels, min_split)
        if runs is None:
            return None
        return build_report(campaign, [r for r in runs if kind is None or r.kind == kind], labels=labels,
                            details=False)
    if len(counts) < 2:
        return None
    # With people among the agents every agent sends its scores in every scope: a child does not
    # know which scopes the people ran (`build.agent_parts` gives the other agents only those).
    scopes: set[tuple[str, str]] | None = None if any(a.startswith(HUMAN_PREFIX) for a in counts) else set()
    parts: dict[str, AgentPart] = {}
    children: list[tuple[int, int]] = []  # (pid, read end of its pipe)
    try:
        for group in groups(counts, n):
            children.append(_fork(store, functools.partial(_parts, store, campaign, group, kind, labels, scopes)))
        while children:
            parts.update(_result(children))
    finally:
        _end(children)
    return assemble(campaign, dict(sorted(parts.items())), skipped=None, shared_tasks=False)


def _parts(store: Store, campaign: str | None, group: list[str], kind: str | None,
           labels: list[dict[str, Any]] | None, scopes: set[tuple[str, str]] | None) -> dict[str, AgentPart]:
    """In a child: the parts of the agents of `group`."""
    runs = read_runs(store, campaign, whole=False, labels=labels, agents=group, task_meta=False)
    if kind is not None:
        runs = [r for r in runs if r.kind == kind]
    return {a: agent_part(a, ar, labels, scopes) for a, ar in agent_runs(runs).items()}


def _split_read(store: Store, campaign: str | None, counts: dict[str, int], labels: list[dict[str, Any]] | None,
                min_split: int) -> list[ReportRun] | None:
    """One agent's runs (as `read_runs` for a leaderboard gives them), the second half of them
    read by a child meanwhile; None when too few to split or the store cannot."""
    if sum(counts.values()) < min_split:
        return None
    middle = store.report_middle(campaign, list(counts))
    if middle is None:
        return None
    agents = list(counts)
    children = [_fork(store, lambda: store.report_values(campaign, agents, task_meta=False, since=middle))]

    def halves() -> Iterator[list[list[Any]]]:
        yield store.report_values(campaign, agents, task_meta=False, until=middle)
        yield _result(children)  # taken once the first half's runs are built

    try:
        with no_gc():
            return summary_runs(store, halves(), labels)
    finally:
        _end(children)


def _result(children: list[tuple[int, int]]) -> Any:
    """The first child's result (raised, if it failed), the child reaped and taken off `children`."""
    pid, fd = children.pop(0)
    try:
        with os.fdopen(fd, "rb") as f:
            data = f.read()
    except BaseException:  # interrupted: the child may wait to write forever
        _end([(pid, -1)])
        raise
    _pid, status = os.waitpid(pid, 0)
    if not data:
        raise RuntimeError(f"a report process (pid {pid}) ended without its result: {_ended(status)}")
    ok, value = pickle.loads(data)  # from our own child, not from a run or a task
    if not ok:
        raise value
    return value


def _end(children: list[tuple[int, int]]) -> None:
    """After a failure: the children not heard from are killed and reaped (their results are
    not wanted), the read ends of their pipes closed (-1: closed already)."""
    for pid, fd in children:
        if fd >= 0:
            os.close(fd)
        os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still this child's
        os.waitpid(pid, 0)


def _fork(store: Store, work: Callable[[], Any]) -> tuple[int, int]:
    """Fork a child that sends `(True, work())`, or `(False, exception)`, through a pipe: (its
    pid, the pipe's read end)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_end)
        return pid, read_end
    code = 1
    try:  # the child: whatever happens, it ends here by os._exit
        os.close(read_end)
        _KEPT.append(store.engine.pool)
        store.engine.dispose(close=False)  # a new pool: this process's own connections
        try:
            with no_gc():
                result: tuple[bool, Any] = (True, work())
        except BaseException as e:  # sent to the parent, which raises it
            result = (False, e)
        try:
            data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            if not result[0]:
                pickle.loads(data)  # an exception the parent could not rebuild is sent as text
        except Exception as e:
            data = pickle.dumps((False, RuntimeError(f"{type(result[1]).__name__}: {result[1]} "
                                                     f"(not sendable: {e})")))
        with os.fdopen(write_end, "wb") as f:
            f.write(data)
        code = 0
    finally:
        os._exit(code)


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
