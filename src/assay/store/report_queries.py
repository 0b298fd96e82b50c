"""A report's numbers as SQL over the current runs (`current_runs`, `assay.store.current`).

Why: a report over 100,000 runs used to build one object per run and fold them in Python
(seconds of CPU, hundreds of MB). Here every count and sum a report shows is a `GROUP BY`
(agent, kind, block, cell, task, currency, ...) that SQLite or PostgreSQL runs over the typed
columns the save wrote, the same statements on both; what comes back is small: per agent,
per (agent, kind) or per (agent, task) rows. The only per-run values fetched are the ones a
statistic needs as values: each block's scores in report order (the bootstrap CI draws from
them by position) and the known costs (their percentiles).

`ReportQuery` holds one connection and the selection every statement reads (`rows`): the
current runs of a campaign (every campaign: None), of some agents, of one primary kind, less
the runs of broken tasks (`leave_out`), and, under `--shared-tasks`, only the tasks each kind's
agents all finished (`keep_only`: a temporary table of (kind, task) pairs, since that set can
hold every task).

Names of the kind blocks (`BLOCK`): a scored run (done, with a score) counts in the rubric
block when its primary kind is rubric and it has a rubric grade, in the contract block when
its primary kind is contract, in the scenario block when it has a scenario grade (its primary
kind is then scenario), as `assay.report.build` reads them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    MetaData,
    String,
    Table,
    and_,
    case,
    cast,
    distinct,
    func,
    literal,
    select,
    tuple_,
)
from sqlalchemy.sql import ColumnElement, Select

from assay.store.current import READ, code_point_order, report_order
from assay.store.models import current_t, grades_t

__all__ = ["BLOCKS", "Group", "ReportQuery", "TaskGroup", "judges_of"]

BLOCKS = ("rubric", "contract", "scenario")
"""The kind blocks of a report, in the order their columns are read."""

IN_LIST = 500
"""Values one IN list holds (SQLite allows some thousands of parameters per statement)."""
MAX_LISTED_PAIRS = 500
"""Broken (task, hash) pairs left out by an IN list; more go through a temporary table."""

_c = current_t.c


class Group(NamedTuple):
    """One group of `ReportQuery.groups`: its keys, then its counts and sums."""

    agent: str
    kind: str | None
    block: str | None
    status: str
    end_reason: str
    currency: str | None
    modality: str
    execution: str
    search_mode: str
    judge_mode: str | None
    judges: str | None
    runs: int
    scored: int
    passes: int
    tokens: int
    cost_unknown: int
    cost: float  # the known costs summed
    judge_unknown: int
    judge_cost: float
    earned: float  # the value of its done runs that passed, in `currency`
    scored_cost_unknown: int
    scored_cost: float
    score: float  # the scored runs' scores summed
    averaged: float  # their averaged scores (scenario S floored at -1) summed
    na: int  # rubric items no judge could answer, over the scored runs
    removed: int  # audit removals over the scored runs
    unclipped: int  # scored runs whose rubric scoring is `unclipped_mean`
    sat: int  # scored runs with a required predicate that satisfied their contract
    sat_counted: int  # scored runs with a required predicate
    judged: int  # done runs a judge graded
    agreed: int
    answered: int
    judge_na: int
    votes: int | None


class TaskGroup(NamedTuple):
    """One group of `ReportQuery.tasks`: its keys, then its counts and sums."""

    agent: str
    task_id: str
    level: str | None
    options_hash: str
    kind: str | None
    block: str | None
    runs: int
    void: int
    done: int
    scored: int
    passes: int
    averaged: float  # the scored runs' averaged scores summed
    search_mode: str | None  # of the scored runs (the options are the group's: one mode)
    valued: int  # scored runs of the rubric block with a value
    valued_passes: int
    currency_min: str | None  # their values: one when min and max agree
    currency_max: str | None
    amount_min: float | None
    amount_max: float | None


def _one(cond: ColumnElement[bool]) -> ColumnElement[int]:
    """1 where `cond` holds, else 0 (a count when summed)."""
    return case((cond, 1), else_=0)


def _sum(expr: Any) -> Any:
    """SUM of floats that is 0, not NULL, over no rows."""
    return func.coalesce(func.sum(expr), 0.0)


def _isum(expr: Any) -> Any:
    """SUM of integers as an integer (PostgreSQL's SUM of integers is NUMERIC), 0 over no rows."""
    return cast(func.coalesce(func.sum(expr), 0), BigInteger)


class ReportQuery:
    """The statements of one report over one selection of current runs (module docstring).
    Use as a context manager: the connection, and the temporary tables `keep_only` makes,
    last until it closes."""

    def __init__(self, conn: Connection, campaign: str | None, *, agents: Collection[str] | None = None,
                 kind: str | None = None) -> None:
        self.conn = conn
        self.backend = conn.dialect.name
        base: list[ColumnElement[bool]] = []
        if campaign is not None:
            base.append(_c.campaign == campaign)
        if agents is not None:
            base.append(_c.agent.in_(sorted(agents)))
        if kind is not None:
            base.append(_c.kind == kind)
        self._base = base
        self._out: list[ColumnElement[bool]] = []  # the broken tasks' runs, left out of the numbers
        self._keep: list[ColumnElement[bool]] = []  # the keys or shared tasks kept
        self._tables: list[Table] = []
        self._meta = MetaData()
        self._task_groups: Table | None = None
        self._task_agents: list[Any] | None = None

    def __enter__(self) -> ReportQuery:
        return self

    def __exit__(self, *exc: object) -> None:
        for t in self._tables:
            t.drop(self.conn, checkfirst=True)
        self._tables.clear()

    # ------------------------------------------------------------------ the selection

    def _where(self) -> list[ColumnElement[bool]]:
        return [*self._base, *self._keep, *self._out]

    def _listed(self) -> list[ColumnElement[bool]]:
        """The runs a report lists: the broken tasks' runs too (listed, not counted)."""
        return [*self._base, *self._keep]

    def _temp(self, name: str, *cols: str) -> Table:
        """A temporary table of text columns, its primary key all of them (so a lookup in it is
        an index search, not a scan per run)."""
        t = Table(f"assay_report_{name}_{len(self._tables)}", self._meta,
                  *[Column(n, String, primary_key=True) for n in cols], prefixes=["TEMPORARY"])
        t.create(self.conn)
        self._tables.append(t)
        return t

    def _changed(self) -> None:
        """The selection changed: the per-task groups of the old one are dropped."""
        self._task_agents = None
        if self._task_groups is not None:
            self._task_groups.drop(self.conn, checkfirst=True)
            self._tables.remove(self._task_groups)
            self._task_groups = None

    def broken(self) -> list[tuple[str, str, str | None]]:
        """(task id, task hash, reason) of every broken run of the selection, in report order."""
        stmt = (select(_c.task_id, _c.task_hash, _c.void_reason)
                .where(*self._listed(), _c.status == "broken").order_by(*report_order(self.backend)))
        return [tuple(r) for r in self.conn.execute(stmt)]

    def leave_out(self, pairs: Collection[tuple[str, str]]) -> None:
        """Leave the runs of these (task id, task hash) pairs out of every later statement."""
        if not pairs:
            return
        self._changed()
        ordered = sorted(pairs)
        if len(ordered) <= MAX_LISTED_PAIRS:
            self._out.append(tuple_(_c.task_id, _c.task_hash).not_in(ordered))
            return
        out = self._temp("out", "task_id", "task_hash")
        self.conn.execute(out.insert(), [{"task_id": t, "task_hash": h} for t, h in ordered])
        self._out.append(~select(literal(1)).where(out.c.task_id == _c.task_id, out.c.task_hash == _c.task_hash)
                         .exists())

    def only_keys(self, digests: Collection[str]) -> None:
        """Keep only the runs of these run key digests (the plan of the campaign just run)."""
        self._changed()
        keys = self._temp("keys", "key_digest")
        if digests:
            self.conn.execute(keys.insert(), [{"key_digest": d} for d in sorted(digests)])
        self._keep.append(select(literal(1)).where(keys.c.key_digest == _c.key_digest).exists())

    def keep_only(self, shared: dict[str, Collection[str]]) -> None:
        """Keep, of the runs with a kind, only those whose task is in `shared[kind]`; runs
        without a kind stay (`--shared-tasks`)."""
        self._changed()
        keep = self._temp("keep", "kind", "task_id")
        rows = [{"kind": k, "task_id": t} for k, tasks in shared.items() for t in tasks]
        if rows:
            self.conn.execute(keep.insert(), rows)
        kept = select(literal(1)).where(keep.c.kind == _c.kind, keep.c.task_id == _c.task_id).exists()
        self._keep.append((_c.kind.is_(None)) | kept)

    def _select(self, *cols: Any) -> Select[Any]:
        return select(*cols).where(*self._where())

    def _all(self, stmt: Any) -> list[Any]:
        return list(self.conn.execute(stmt).all())

    # ------------------------------------------------------------------ expressions

    @staticmethod
    def scored() -> ColumnElement[bool]:
        """A run that counts in the scores: done, with a score."""
        return and_(_c.status == "done", _c.score.is_not(None))

    @staticmethod
    def passed() -> ColumnElement[bool]:
        return _c.passed.is_(True)

    @staticmethod
    def block() -> Any:
        """The kind block a run counts in when scored (module docstring); NULL: none."""
        return case((and_(_c.kind == "rubric", _c.scoring.is_not(None)), "rubric"),
                    (_c.kind == "contract", "contract"),
                    (and_(_c.kind == "scenario", _c.uplift_adj.is_not(None)), "scenario"), else_=None)

    # ------------------------------------------------------------------ the groups

    def groups(self) -> list[Group]:
        """The selection grouped by every small key a report splits its numbers by (agent,
        kind, block, status, end reason, currency, modality, execution, search mode, judge
        mode and judges), each group's counts and sums (`Group`): one scan gives the agent
        totals, the end reasons, the value earned, each kind's and block's totals, the
        contract cells, the Pareto sums and the judge summary. A few rows per agent."""
        scored = self.scored()
        passed = and_(scored, self.passed())
        modality = func.coalesce(_c.modality, "text")
        execution = func.coalesce(_c.execution, "multi-step-with-tools")
        block = self.block()
        judged = and_(_c.status == "done", _c.judge_agreed.is_not(None))
        keys = (_c.agent, _c.kind, block, _c.status, _c.end_reason, _c.value_currency, modality, execution,
                _c.search_mode, _c.judge_mode, _c.judges)
        sums = (func.count(), _isum(_one(scored)), _isum(_one(passed)), _isum(_c.tokens),
                _isum(_one(_c.cost_usd.is_(None))), _sum(_c.cost_usd),
                _isum(_one(_c.judge_cost_usd.is_(None))), _sum(_c.judge_cost_usd),
                _sum(case((and_(_c.status == "done", self.passed()), _c.value_amount), else_=0.0)),
                _isum(_one(and_(scored, _c.cost_usd.is_(None)))), _sum(case((scored, _c.cost_usd), else_=0.0)),
                _sum(case((scored, _c.score), else_=0.0)), _sum(case((scored, _c.averaged), else_=0.0)),
                _isum(case((scored, _c.rubric_na), else_=0)), _isum(case((scored, _c.audit_removed), else_=0)),
                _isum(_one(and_(scored, _c.scoring == "unclipped_mean"))),
                _isum(_one(and_(scored, _c.sat.is_(True), _c.sat_required.is_(True)))),
                _isum(_one(and_(scored, _c.sat.is_not(None), _c.sat_required.is_(True)))),
                _isum(_one(judged)), _isum(case((judged, _c.judge_agreed), else_=0)),
                _isum(case((judged, _c.judge_answered), else_=0)), _isum(case((judged, _c.judge_na), else_=0)),
                func.max(case((judged, _c.judge_votes), else_=None)))
        return [Group(*row) for row in self.conn.execute(self._select(*keys, *sums).group_by(*keys))]

    def _tasks(self) -> Table:
        """The selection grouped by agent, task, level, options, kind and block, kept in a
        temporary table (`TaskGroup`'s columns) that the per-task statements read: one scan of
        the runs and one sort for all of them. Made when first read, again when the selection
        changes."""
        if self._task_groups is not None:
            return self._task_groups
        scored = self.scored()
        block = self.block()
        valued = and_(scored, block == "rubric", _c.value_amount.is_not(None))
        keys = (_c.agent, _c.task_id, _c.level, _c.options_hash, _c.kind, block)
        sums = (func.count(), _isum(_one(_c.status == "void")), _isum(_one(_c.status == "done")), _isum(_one(scored)),
                _isum(_one(and_(scored, self.passed()))), _sum(case((scored, _c.averaged), else_=0.0)),
                func.min(case((scored, _c.search_mode), else_=None)),
                _isum(_one(valued)), _isum(_one(and_(valued, self.passed()))),
                func.min(case((valued, _c.value_currency), else_=None)),
                func.max(case((valued, _c.value_currency), else_=None)),
                func.min(case((valued, _c.value_amount), else_=None)),
                func.max(case((valued, _c.value_amount), else_=None)))
        types = {"runs": BigInteger, "void": BigInteger, "done": BigInteger, "scored": BigInteger,
                 "passes": BigInteger, "averaged": Float, "valued": BigInteger, "valued_passes": BigInteger,
                 "amount_min": Float, "amount_max": Float}
        t = Table(f"assay_report_tasks_{len(self._tables)}", self._meta,
                  *[Column(n, types.get(n, String)) for n in TaskGroup._fields], prefixes=["TEMPORARY"])
        t.create(self.conn)
        self._tables.append(t)
        self.conn.execute(t.insert().from_select(list(TaskGroup._fields),
                                                 self._select(*keys, *sums).group_by(*keys)))
        self._task_groups = t
        return t

    def _agents_tasks(self) -> list[Any]:
        """(agent, kind, task, finished, covered, block, runs, void) per agent, kind, task and
        block, kinds unknown (NULL) included, in report order: what `task_kinds` and
        `task_voids` read. One statement over the task groups, once per selection."""
        if self._task_agents is None:
            t = self._tasks().c
            stmt = (select(t.agent, t.kind, t.task_id, func.max(t.done), func.max(t.scored), t.block,
                           _isum(t.runs), _isum(t.void))
                    .group_by(t.agent, t.kind, t.task_id, t.block)
                    .order_by(code_point_order(t.agent, self.backend), t.kind, t.block,
                              code_point_order(t.task_id, self.backend)))
            self._task_agents = self._all(stmt)
        return self._task_agents

    def task_kinds(self) -> list[tuple[Any, ...]]:
        """(agent, kind, task, finished (some run done), covered (some run scored), block) per
        agent, kind, task and block of the runs with a kind: the tasks each agent finished per
        kind (task sets) and each block covers (its `tasks`)."""
        return [tuple(r[:6]) for r in self._agents_tasks() if r[1] is not None]

    def task_voids(self) -> list[tuple[str, int, int, int, int]]:
        """Per agent over the tasks another agent ran too: its runs and void runs there, and
        the other agents' (`metrics.void_outlier`'s input). Two passes over `_agents_tasks`."""
        rows = self._agents_tasks()
        runs_of: dict[str, int] = defaultdict(int)
        void_of: dict[str, int] = defaultdict(int)
        ran: dict[str, str | None] = {}  # task -> its one agent, or None when several ran it
        for agent, _kind, task, _finished, _covered, _block, runs, void in rows:
            runs_of[task] += runs
            void_of[task] += void
            if ran.setdefault(task, agent) != agent:
                ran[task] = None
        own: dict[str, list[int]] = {}
        counted: set[tuple[str, str]] = set()  # (agent, task) whose task's totals are added
        for agent, _kind, task, _finished, _covered, _block, runs, void in rows:
            if ran[task] is not None:
                continue
            sums = own.setdefault(agent, [0, 0, 0, 0])
            sums[0] += runs
            sums[1] += void
            if (agent, task) not in counted:
                counted.add((agent, task))
                sums[2] += runs_of[task]
                sums[3] += void_of[task]
        return [(agent, r[0], r[1], r[2] - r[0], r[3] - r[1]) for agent, r in sorted(own.items())]

    def pass_pairs(self) -> list[Any]:
        """(agent, block or None for the agent's every scored run, epochs n, passes c, tasks
        with that n and c): the pass@k curves' input, a task being (task, level, options)."""
        t = self._tasks().c
        out: list[Any] = []
        for block in (None, t.block):
            keys = (t.agent, t.task_id, t.level, t.options_hash) + ((block,) if block is not None else ())
            per = (select(t.agent, (block if block is not None else literal(None)).label("block"),
                          func.sum(t.scored).label("n"), func.sum(t.passes).label("c"))
                   .where(t.scored > 0, *([block.is_not(None)] if block is not None else []))
                   .group_by(*keys).subquery())
            out += self._all(select(per.c.agent, per.c.block, cast(per.c.n, BigInteger), cast(per.c.c, BigInteger),
                                    func.count()).group_by(per.c.agent, per.c.block, per.c.n, per.c.c))
        return out

    def _valued_tasks(self) -> Any:
        """Per (agent, task) with valued runs in the rubric block: valued runs n, their passes c,
        currency and amount min and max (a task's value is one where min and max agree)."""
        t = self._tasks().c
        return (select(t.agent, t.task_id, _isum(t.valued).label("n"), _isum(t.valued_passes).label("c"),
                       func.min(t.currency_min).label("cmin"), func.max(t.currency_max).label("cmax"),
                       func.min(t.amount_min).label("amin"), func.max(t.amount_max).label("amax"))
                .where(t.valued > 0).group_by(t.agent, t.task_id).subquery())

    def value_sums(self) -> list[Any]:
        """(agent, task, currency, value available, value earned, valued runs, their passes):
        task None for the sums, per agent and currency, over the tasks whose value is the same
        in every valued run (each task's value counts once as available, and as earned times
        the share of its valued runs that passed); a row of its own for each task whose value
        changed between its valued runs (rare; its value: `first_values`)."""
        v = self._valued_tasks().c
        task = case((and_(v.cmin == v.cmax, v.amin == v.amax), None), else_=v.task_id)
        return self._all(select(v.agent, task, v.cmin, _sum(v.amin), _sum(v.amin * v.c / v.n), _isum(v.n),
                                _isum(v.c)).group_by(v.agent, task, v.cmin))

    def task_rows(self) -> list[Any]:
        """Per (agent, task, level, options) of the scored runs: epochs, passes, averaged score
        sum, search mode."""
        t = self._tasks().c
        return self._all(select(t.agent, t.task_id, t.level, t.options_hash, _isum(t.scored), _isum(t.passes),
                                _sum(t.averaged), func.min(t.search_mode))
                         .where(t.scored > 0).group_by(t.agent, t.task_id, t.level, t.options_hash))

    def first_values(self, pairs: Collection[tuple[str, str]]) -> list[Any]:
        """(agent, task, currency, amount) of the first run in report order of the rubric
        block's valued runs of these (agent, task) pairs: a task whose value changed between
        its runs counts that value (rare: a task's value is the same in every run)."""
        if not pairs:
            return []
        part = (_c.agent, _c.task_id)
        first = func.row_number().over(partition_by=part, order_by=report_order(self.backend)).label("first")
        tasks = sorted({t for _a, t in pairs})
        out = []
        for start in range(0, len(tasks), IN_LIST):
            ranked = (self._select(_c.agent, _c.task_id, _c.value_currency, _c.value_amount, first)
                      .where(self.scored(), self.block() == "rubric", _c.value_amount.is_not(None),
                             _c.task_id.in_(tasks[start:start + IN_LIST])).subquery())
            r = ranked.c
            out += [row for row in self.conn.execute(select(r.agent, r.task_id, r.value_currency, r.value_amount)
                                                     .where(r.first == 1)) if (row[0], row[1]) in pairs]
        return out

    def score_levels(self) -> list[Any]:
        """(agent, block, score, runs) of the scored runs in a block: each block's scores as
        their distinct values and counts (what a bootstrap CI of many scores draws from)."""
        block = self.block()
        return self._all(self._select(_c.agent, block, _c.score, func.count())
                         .where(self.scored(), block.is_not(None)).group_by(_c.agent, block, _c.score))

    def ordered_scores(self, blocks: Collection[tuple[str, str]]) -> Iterator[Any]:
        """(agent, block, score) of the scored runs of these (agent, block) pairs, in report
        order: a bootstrap CI of few scores resamples them by position."""
        if not blocks:
            return
        block = self.block()
        agents = sorted({a for a, _b in blocks})
        stmt = (self._select(_c.agent, block, _c.score).where(self.scored(), block.is_not(None), _c.agent.in_(agents))
                .order_by(*report_order(self.backend)))
        for row in self.conn.execute(stmt):
            if (row[0], row[1]) in blocks:
                yield row

    def cost_levels(self) -> list[Any]:
        """(agent, kind, cost, runs) of the runs with a kind and a known cost: each kind's
        costs as distinct values and counts (their percentiles)."""
        return self._all(self._select(_c.agent, _c.kind, _c.cost_usd, func.count())
                         .where(_c.kind.is_not(None), _c.cost_usd.is_not(None))
                         .group_by(_c.agent, _c.kind, _c.cost_usd))

    def tags(self) -> list[Any]:
        """(agent, tags JSON text, removed (the audit took the run's credit), runs) of the
        rubric block's runs with tags: each distinct text is parsed once."""
        block = self.block()
        removed = _c.audit_removed > 0
        return self._all(self._select(_c.agent, _c.tags, removed, func.count())
                         .where(self.scored(), block == "rubric", _c.tags.is_not(None))
                         .group_by(_c.agent, _c.tags, removed))

    def scenario_runs(self) -> Iterator[Any]:
        """(agent, task, level, U_adj, contact cost, solved, router fallbacks) of the scenario
        block's runs, in report order: few (each is a whole engagement), and its numbers are
        per task and per level."""
        stmt = (self._select(_c.agent, _c.task_id, _c.level, _c.uplift_adj, _c.contact_cost, _c.solved,
                             _c.router_fallbacks)
                .where(self.scored(), self.block() == "scenario").order_by(*report_order(self.backend)))
        yield from self.conn.execute(stmt)

    def search_scores(self, agents: Sequence[str]) -> list[Any]:
        """(agent, mode, task, level, score sum, runs) of these agents' scored runs."""
        return self._all(self._select(_c.agent, _c.search_mode, _c.task_id, _c.level, _sum(_c.score), func.count())
                         .where(self.scored(), _c.agent.in_(sorted(agents)))
                         .group_by(_c.agent, _c.search_mode, _c.task_id, _c.level))

    def mixed_hashes(self) -> list[Any]:
        """(task, hash) of the tasks run under several contents, sorted."""
        several = (self._select(_c.task_id).group_by(_c.task_id)
                   .having(func.count(distinct(_c.task_hash)) > 1).subquery())
        pairs = (self._select(_c.task_id, _c.task_hash).where(_c.task_id.in_(select(several.c.task_id)))
                 .distinct().subquery())
        return self._all(select(pairs.c.task_id, pairs.c.task_hash)
                         .order_by(code_point_order(pairs.c.task_id, self.backend),
                                   code_point_order(pairs.c.task_hash, self.backend)))

    def versions(self) -> list[str]:
        """The harness versions of the runs, sorted."""
        rows = self._all(self._select(_c.harness_version).distinct())
        return sorted(str(r[0]) for r in rows)

    def baseline_runs(self, agents: Sequence[str]) -> Iterator[Any]:
        """(agent, kind, task, averaged score) of these agents' scored runs with a kind, in
        report order (the people's: their pooled scores are resampled)."""
        stmt = (self._select(_c.agent, _c.kind, _c.task_id, _c.averaged)
                .where(self.scored(), _c.kind.is_not(None), _c.agent.in_(sorted(agents)))
                .order_by(*report_order(self.backend)))
        yield from self.conn.execute(stmt)

    def baseline_sums(self, people: Sequence[str]) -> list[Any]:
        """(agent, kind, task, averaged score sum, runs) of the other agents' scored runs with
        a kind."""
        return self._all(self._select(_c.agent, _c.kind, _c.task_id, _sum(_c.averaged), func.count())
                         .where(self.scored(), _c.kind.is_not(None), _c.agent.not_in(sorted(people)))
                         .group_by(_c.agent, _c.kind, _c.task_id))

    def run_ids(self) -> list[str]:
        """The listed runs' ids (`_listed`), in report order."""
        stmt = select(_c.run_id).where(*self._listed()).order_by(*report_order(self.backend))
        return [r[0] for r in self.conn.execute(stmt)]

    def table_rows(self) -> Iterator[Any]:
        """What the HTML runs table shows of each listed run, in report order."""
        stmt = (select(_c.run_id, _c.task_id, _c.agent, _c.level, _c.epoch, _c.status, _c.end_reason, _c.score,
                       _c.passed, _c.cost_usd).where(*self._listed()).order_by(*report_order(self.backend)))
        yield from self.conn.execute(stmt)

    def grade_items(self, run_ids: Collection[str]) -> dict[str, list[dict[str, Any]]]:
        """The rubric items of these runs' grades (runs without any left out), read from the
        stored grades: the one part of a grade the current runs leave out (for human labels)."""
        out: dict[str, list[dict[str, Any]]] = {}
        ids = sorted(set(run_ids))
        for start in range(0, len(ids), IN_LIST):
            stmt = select(grades_t.c.run_id, grades_t.c.grade).where(grades_t.c.run_id.in_(ids[start:start + IN_LIST]))
            for run_id, grade in self.conn.execute(stmt):
                items = json.loads(grade).get("items")
                if items:
                    out[run_id] = items
        return out

    def current_rows(self, task_ids: Collection[str]) -> Iterator[Any]:
        """The counted runs of these tasks as `current.READ`'s columns, in report order (the
        runs human labels may name)."""
        stmt = (select(*[_c[n] for n in READ]).where(*self._where(), _c.task_id.in_(sorted(task_ids)))
                .order_by(*report_order(self.backend)))
        yield from self.conn.execute(stmt)


def judges_of(texts: Sequence[str | None]) -> list[str]:
    """The judges named by a set of JSON lists, sorted."""
    return sorted({j for t in texts if t for j in json.loads(t)})

