"""Building the report JSON (SPEC.md "Report JSON") from stored runs.

Additions to the SPEC's keys (documented here and in docs):
- each run row: `options` (the run's result options: judges, judge mode, search mode, limits),
  `search` (the search backend the run was offered: native, local, brave; null for none);
- each agent summary: `judge {agreement, na, votes, runs, items, mode, judges}` where any run
  was judged (`agreement`: share of judged items on which every vote agreed; `na`: items no
  judge could answer, counted 0); `human_agreement {domain: {pearson_r, p_value,
  raw_agreement, n}}` where a labels file (`--labels`) labels the runs' own answers (see
  `assay.report.agreement`);
  `pass_at_k`, `pass_hat_k` averaged over tasks; in each kind's block `kind_economics`
  (`cost_usd`, `tokens`, `tokens_per_task`, `cost_per_task`, `score_per_1k_tokens`,
  `score_per_usd`, `cost_distribution`, `pass_at_k`, `pass_hat_k`), the rubric block's
  `value {currency: {earned, available}}`, the scenario block's `families`;
- top level: `tasks`, one row per (agent, task, level, options) with the epochs run, passes,
  mean score, `pass_at_k` and `pass_hat_k` for k = 1..n; `search_delta {agent: delta}`: for
  an agent run both without search (`--search off`) and with it (`local`, `brave` or `native`), the
  mean over the tasks run both ways of (mean score with search - mean score without), and
  `search_deltas {agent: {mode: {delta, tasks, with, without}}}` per search mode; `warnings`:
  a task run under several contents (hashes) or runs of several harness versions, and agents
  that finished different task sets of a kind; `task_sets {kind: {shared, agents, differ,
  missing}}` and `shared_tasks` (true under `--shared-tasks`); `failure_modes` under
  `--failure-modes` (`assay.report.failure_modes`); `human_baseline {kind: {family: {mean,
  ci95, runs, people, tasks, agents}}}`: the human expert baseline per task family where people
  (`human:NAME` agents) have at least `MIN_HUMAN_RUNS` (3) scored runs of that kind on it, with
  every model's mean on the same tasks beside it (`human_baseline`); `pareto_points {scope:
  [{agent, cost_usd, mean_score}]}` for every scope `pareto` has a front of (kind, kind/modality).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from assay import metrics
from assay.record import Audit, RunRecord
from assay.report.runs import ReportRun, labelled_runs
from assay.report.summary import ReportData, agent_summaries, ci
from assay.store import Store
from assay.store.report_queries import Group, ReportQuery

__all__ = ["HUMAN_PREFIX", "MIN_HUMAN_RUNS", "SCHEMA", "build_report", "family_of", "run_row", "stored_report",
           "table_row"]

SCHEMA = "assay.report/1"

BaselineScores = dict[tuple[str, str], dict[str, list[float]]]
"""The people's scores per (kind, task family) scope and task, in report order."""
BaselineSums = dict[str, dict[tuple[str, str], dict[str, tuple[float, int]]]]
"""Every other agent's (score sum, runs) per scope and task."""

_NO_AUDIT = Audit().model_dump(mode="json")

COST_DIGITS = 10
SCORE_DIGITS = 12
"""A Pareto front compares agents' total costs and mean scores: each is rounded to these
decimal places first, so sums taken in another order (SQLite's or PostgreSQL's) tie where
they should and the front is the same on every store."""

HUMAN_PREFIX = "human:"
MIN_HUMAN_RUNS = 3
"""A task family gets a human expert baseline row when people (`human:NAME` agents) have at
least this many done, scored runs of one kind on it."""


def run_row(run: RunRecord | ReportRun) -> dict[str, Any]:
    """A run's row of the report's `runs` (and of `assay show --json`, the web run page)."""
    r = run if isinstance(run, ReportRun) else ReportRun.from_record(run)
    grade = r.grade.flat()
    if "audit" not in grade:  # `Audit(pre_audit_score=r.score).model_dump(mode="json")`, without pydantic per run
        grade["audit"] = {**_NO_AUDIT, "flags": [], "pre_audit_score": None if r.score is None else float(r.score)}
    return {
        "run_id": r.run_id, "task_id": r.key.task_id, "task_hash": r.key.task_hash, "kinds": list(r.kinds),
        "agent": r.key.agent, "level": r.key.level, "epoch": r.key.epoch, "attempt": r.attempt,
        "status": r.status, "end_reason": r.end_reason, "void_reason": r.void_reason, "sandbox": r.sandbox,
        "score": r.score, "passed": r.passed, "value": r.value,
        "usage": r.usage.model_dump(), "judge_usage": r.judge_usage.model_dump(),
        "grade": grade, "model": r.model, "harness_version": r.harness_version, "turns": r.turns,
        "duration_s": r.duration_s, "task": r.task_meta, "options": r.options, "search": r.search,
    }


def table_row(row: Sequence[Any]) -> dict[str, Any]:
    """A run as the HTML report's runs table shows it (`ReportQuery.table_rows`' columns)."""
    run_id, task_id, agent, level, epoch, status, end_reason, score, passed, cost = row
    return {"run_id": run_id, "task_id": task_id, "agent": agent, "level": level, "epoch": epoch, "status": status,
            "end_reason": end_reason, "score": score, "passed": None if passed is None else bool(passed),
            "usage": {"cost_usd": cost}}


def family_of(task_id: str) -> str:
    """A task's family: its id before the first `/` (a scenario's variants share one)."""
    return task_id.split("/", 1)[0]


# --------------------------------------------------------------------------- entry points


def build_report(campaign: str | None, runs: Iterable[RunRecord],
                 labels: list[dict[str, Any]] | None = None,
                 skipped: list[dict[str, Any]] | None = None, *,
                 shared_tasks: bool = False, details: bool | Literal["table"] = True,
                 tasks: bool | None = None) -> dict[str, Any]:
    """The report of runs held in memory (`RunRecord`s, the latest attempt of each key counted,
    as a store keeps them): they are saved to a store in memory and reported as `stored_report`
    reports a store, so there is one way a report is computed. `labels`: human labels from a
    labels file (`assay.report.agreement.load_labels`), if any; `skipped`: task files left out
    by `--skip-invalid`; `shared_tasks`: `--shared-tasks`; `details`: the per-run rows (True:
    whole rows; "table": what the HTML runs table shows; False: none); `tasks`: the per-task
    rows (default: when `details` is True)."""
    with Store("sqlite://") as st:
        st.save_runs([(r, []) for r in runs])
        report = stored_report(st, None, labels=labels, skipped=skipped, shared_tasks=shared_tasks,
                               details=details, tasks=details is True if tasks is None else tasks)
    report["campaign"] = campaign  # the runs given, whatever campaigns their keys name
    return report


def stored_report(store: Store, campaign: str | None, *, agents: Collection[str] | None = None,
                  kind: str | None = None, labels: list[dict[str, Any]] | None = None, shared_tasks: bool = False,
                  details: bool | Literal["table", "ids"] = False, tasks: bool | Literal["stream"] = False,
                  keys: Collection[str] | None = None,
                  skipped: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report of `campaign`'s current runs in the store (every campaign's: None; of
    `agents` and of primary kind `kind` only, when given; of these run key digests only,
    `keys`), computed by the store (`ReportQuery`). `details`: the per-run rows, whole (True:
    each record read, one at a time), as the HTML runs table shows them ("table"), or only
    their ids ("ids": `{"run_id": ...}`, for an output that streams the whole rows itself);
    `tasks`: the per-task rows (a list, or "stream": an iterator that builds each row as it is
    read, from compact tuples, for `export.write_json`). The runs it lists (either form) are the ones it covers, in report
    order: after `--shared-tasks`, the ones it keeps; broken runs among them."""
    with _query(store, campaign, agents, kind, keys) as q:
        broken = _broken(q.broken())
        q.leave_out(broken)
        sets = task_sets(_finished(q.task_kinds()))
        if shared_tasks:
            q.keep_only({k: v["shared"] for k, v in sets.items()})
        data = ReportData(q)
        labelled = labelled_runs(q, labels) if labels else None
        summaries = agent_summaries(data, labelled, labels)
        void_outliers(summaries, q.task_voids())
        fronts, points = pareto_fronts(data.groups)
        deltas = search_deltas(q, data.groups)
        baseline = human_baseline(q, data.agents)
        warnings = mixing_warnings(q.mixed_hashes(), q.versions())
        task_rows: Iterable[dict[str, Any]] = _task_rows(q.task_rows()) if tasks else []
        if tasks is True:
            task_rows = list(task_rows)
        # The listing keeps the broken runs: they are listed, not counted.
        ids = q.run_ids() if details in (True, "ids") else []
        rows: list[dict[str, Any]] = [table_row(r) for r in q.table_rows()] if details == "table" else []
    if details == "ids":
        rows = [{"run_id": run_id} for run_id in ids]
    if details is True:
        rows = [run_row(r) for r in _stream(store, ids)]
    report = {
        "schema": SCHEMA,
        "campaign": campaign,
        "skipped": list(skipped or []),
        "runs": rows,
        "agents": list(summaries.values()),
        "tasks": task_rows,
        # One number per agent: the local-corpus delta where there is one, else Brave's, else native's.
        "search_delta": {a: (m.get("local") or m.get("brave") or m.get("native") or next(iter(m.values())))["delta"]
                         for a, m in deltas.items()},
        "search_deltas": deltas,
        "pareto": fronts,
        "pareto_points": points,
        "shared_tasks": shared_tasks,
        "task_sets": sets,
        "human_baseline": baseline,
        "broken_tasks": [{"task_id": t, "task_hash": h, "reason": why} for (t, h), why in sorted(broken.items())],
        "warnings": warnings + task_set_warnings(sets, shared_tasks) + fault_warnings(summaries, broken),
    }
    return report


@contextmanager
def _query(store: Store, campaign: str | None, agents: Collection[str] | None, kind: str | None,
           keys: Collection[str] | None) -> Iterator[ReportQuery]:
    with store.engine.connect() as conn, ReportQuery(conn, campaign, agents=agents, kind=kind) as q:
        if keys is not None:
            q.only_keys(keys)
        yield q


def _stream(store: Store, ids: Sequence[str]) -> Iterator[ReportRun]:
    from assay.report.runs import stream_whole

    return stream_whole(store, ids)


# --------------------------------------------------------------------------- across agents


def _broken(rows: Iterable[tuple[str, str, str | None]]) -> dict[tuple[str, str], str]:
    """(task id, task hash) -> reason, of every task with a broken run (SPEC: its grader fails on
    its own reference): every agent's runs of such a task are left out of the numbers alike."""
    out: dict[tuple[str, str], str] = {}
    for task, task_hash, reason in rows:
        if not out.get((task, task_hash)):
            out[(task, task_hash)] = reason or ""
    return out


def _finished(rows: Iterable[Any]) -> dict[str, dict[str, set[str]]]:
    """Per agent (sorted), per kind it ran (void runs count), the tasks it finished (a done
    run). `rows`: `ReportQuery.task_kinds`."""
    out: dict[str, dict[str, set[str]]] = defaultdict(dict)
    for agent, kind, task, finished, _covered, _block in rows:
        done = out[agent].setdefault(kind, set())
        if finished:
            done.add(task)
    return {a: out[a] for a in sorted(out)}


def fault_warnings(summaries: Mapping[str, dict[str, Any]], broken: Mapping[tuple[str, str], str] | None
                   ) -> list[str]:
    """What the numbers leave out: broken tasks, and agents whose void runs stand out."""
    out = [f"task {t} is broken and left out of every agent's numbers: {why or 'its grader fails on its own reference'}"
           for (t, _h), why in sorted((broken or {}).items())]
    for name, s in summaries.items():
        if s.get("void_outlier"):
            out.append(f"agent {name}: {s['void']} of {s['runs']} runs void, out of line with the "
                       "other agents' on the same tasks; void runs are left out of its scores (see each run's "
                       "void_reason)")
    return out


def void_outliers(summaries: Mapping[str, dict[str, Any]], rows: Iterable[Any]) -> None:
    """Set each agent's `void_outlier`: is its void rate out of line with the other agents' on
    the same tasks (`metrics.void_outlier`)? None when no other agent ran its tasks. `rows`:
    per agent, its runs and void runs on the tasks another agent ran too, and the other
    agents' there (`ReportQuery.task_voids`)."""
    for agent, runs, void, others_runs, others_void in rows:
        summaries[agent]["void_outlier"] = (metrics.void_outlier(int(void), int(runs), int(others_void),
                                                                 int(others_runs)) if others_runs else None)


def search_deltas(q: ReportQuery, groups: Iterable[Group]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per agent run without search and with it, its delta per search mode: the mean over tasks
    run both ways of (score with - score without)."""
    modes: dict[str, set[str]] = defaultdict(set)
    for g in groups:
        if g.scored:
            modes[g.agent].add(str(g.search_mode))
    both = sorted(a for a, m in modes.items() if "off" in m and len(m) >= 2)
    if not both:
        return {}
    means: dict[str, dict[str, dict[tuple[str, str | None], float]]] = defaultdict(lambda: defaultdict(dict))
    for agent, mode, task, level, total, n in q.search_scores(both):
        means[agent][str(mode)][(task, level)] = total / n
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for agent in both:
        without = means[agent]["off"]
        deltas: dict[str, dict[str, Any]] = {}
        for mode, with_s in sorted(means[agent].items()):
            if mode == "off":
                continue
            common = sorted(set(with_s) & set(without), key=lambda t: (t[0], t[1] or ""))
            if not common:
                continue
            w = [with_s[t] for t in common]
            wo = [without[t] for t in common]
            deltas[mode] = {"delta": sum(a - b for a, b in zip(w, wo, strict=True)) / len(common),
                            "tasks": len(common), "with": sum(w) / len(w), "without": sum(wo) / len(wo)}
        if deltas:
            out[agent] = deltas
    return out


def human_baseline(q: ReportQuery, agents: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per kind and task family with at least `MIN_HUMAN_RUNS` done, scored runs by people
    (`human:NAME` agents): the people's pooled mean score (scenario S floored at -1) over those
    runs with its bootstrap 95% CI, `runs`, `people` (their agent names), `tasks`, and beside
    it `agents {agent: {mean, runs}}`: every other agent's mean over its runs of the same tasks
    of that family (the same work), null-free (agents without such runs are left out)."""
    people = [a for a in agents if a.startswith(HUMAN_PREFIX)]
    if not people:
        return {}
    scores: dict[str, BaselineScores] = defaultdict(dict)
    for agent, kind, task, averaged in q.baseline_runs(people):
        scores[agent].setdefault((kind, family_of(task)), {}).setdefault(task, []).append(averaged)
    scopes = {scope for a in people for scope in scores.get(a, {})}
    sums: BaselineSums = defaultdict(dict)
    for agent, kind, task, total, n in q.baseline_sums(people):
        scope = (kind, family_of(task))
        if scope in scopes:
            sums[agent].setdefault(scope, {})[task] = (float(total), int(n))
    out: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for kind, fam in sorted(scopes):
        ran = [a for a in people if (kind, fam) in scores.get(a, {})]
        vals = [v for a in ran for vs in scores[a][(kind, fam)].values() for v in vs]
        if len(vals) < MIN_HUMAN_RUNS:
            continue
        tasks = sorted({t for a in ran for t in scores[a][(kind, fam)]})
        others: dict[str, dict[str, Any]] = {}
        for a in sorted(sums):
            by_task = sums[a].get((kind, fam), {})
            own = [by_task[t] for t in tasks if t in by_task]
            n = sum(k for _s, k in own)
            if n:
                others[a] = {"mean": sum(s for s, _k in own) / n, "runs": n}
        out[kind][fam] = {"mean": sum(vals) / len(vals), "ci95": ci(vals), "runs": len(vals), "people": ran,
                          "tasks": tasks, "agents": others}
    return dict(out)


def task_sets(finished: Mapping[str, Mapping[str, set[str]]]) -> dict[str, dict[str, Any]]:
    """Per kind, the tasks every agent that ran the kind finished (has a done run on): `shared`
    (sorted ids), `agents {agent: tasks finished}`, `differ` (true when some agent finished a
    task another did not) and `missing {agent: [tasks another agent finished and it did not]}`.
    `finished`: per agent (sorted names), per kind it ran, the tasks it finished."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({k for kinds in finished.values() for k in kinds}):
        per_agent = {name: kinds[kind] for name, kinds in finished.items() if kind in kinds}
        union = set().union(*per_agent.values())
        shared = set.intersection(*per_agent.values())
        out[kind] = {"shared": sorted(shared), "agents": {a: len(t) for a, t in per_agent.items()},
                     "differ": shared != union,
                     "missing": {a: sorted(union - t) for a, t in per_agent.items() if union - t}}
    return out


def task_set_warnings(sets: dict[str, dict[str, Any]], restricted: bool) -> list[str]:
    out = []
    for kind, ts in sets.items():
        if ts["differ"]:
            counts = ", ".join(f"{a} {n}" for a, n in ts["agents"].items())
            tail = ("the report keeps only those" if restricted
                    else "pass --shared-tasks to compare them on those only")
            out.append(f"{kind}: agents finished different task sets ({counts} tasks; {len(ts['shared'])} "
                       f"finished by all): {tail}")
    return out


def mixing_warnings(mixed: Iterable[tuple[str, str]], versions: Sequence[str]) -> list[str]:
    """What makes a campaign's runs not comparable: a task run under several contents (its
    hash changed between runs) or runs made by several harness versions. `mixed`: the (task,
    hash) pairs of the tasks run under several hashes, sorted."""
    hashes: dict[str, list[str]] = defaultdict(list)
    for t, h in mixed:
        hashes[t].append(h)
    out = [f"task {t} was run under {len(h)} different contents (hashes {', '.join(h)}): "
           "its runs are not all of the same task" for t, h in hashes.items()]
    if len(versions) > 1:
        out.append(f"runs were made by {len(versions)} harness versions ({', '.join(versions)})")
    return out


def pareto_fronts(groups: Iterable[Group]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Accuracy-cost Pareto fronts (DAREBench): the agents no other agent beats on both mean
    score and cost. A score is never averaged across kinds, so there is one front per kind
    (`rubric`, `scenario`, `contract`) and, within a kind, per modality (`contract/text`,
    `contract/multimodal`); when every run is of one kind, `all`, `text` and `multimodal` name
    that kind's fronts too. Agents whose cost is unknown (a price is missing) are left out.
    Second: every priced agent's point `{agent, cost_usd, mean_score}` per kind and per kind
    and modality (the report's `pareto_points`). The sums are of the scored runs (a run
    without a kind counts as a contract, as `record.primary_kind` names it)."""
    sums: dict[tuple[str, str | None], dict[str, list[float]]] = defaultdict(dict)
    unpriced: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    for g in groups:
        if not g.scored:
            continue
        kind = g.kind or "contract"
        for scope in ((kind, None), (kind, g.modality)):
            acc = sums[scope].setdefault(g.agent, [0.0, 0.0, 0])
            acc[0] += g.scored_cost
            acc[1] += g.averaged
            acc[2] += g.scored
            if g.scored_cost_unknown:
                unpriced[scope].add(g.agent)
    for per_agent in sums.values():  # sums taken in another order (another database) tie as they should
        for acc in per_agent.values():
            acc[0], acc[1] = round(acc[0], COST_DIGITS), round(acc[1] / acc[2], SCORE_DIGITS) * acc[2]
    kinds = sorted({k for k, _m in sums})
    out: dict[str, list[dict[str, Any]]] = {}
    points: dict[str, list[dict[str, Any]]] = {}
    for kind in kinds:
        for modality in (None, "text", "multimodal"):
            per_agent = sums.get((kind, modality), {})
            front = _front(per_agent, unpriced[(kind, modality)])
            if front:
                name = kind if modality is None else f"{kind}/{modality}"
                out[name] = front
                points[name] = [{"agent": a, "cost_usd": v[0], "mean_score": round(v[1] / v[2], SCORE_DIGITS)}
                                for a, v in sorted(per_agent.items()) if a not in unpriced[(kind, modality)]]
                if len(kinds) == 1:
                    out["all" if modality is None else modality] = front
    return out, points


def _front(per_agent: dict[str, list[float]], unpriced: set[str]) -> list[dict[str, Any]]:
    """The Pareto front of the agents' (total cost, mean score) in one scope; agents with an
    unknown price are left out."""
    names = [a for a in sorted(per_agent) if a not in unpriced]
    points = [(per_agent[a][0], round(per_agent[a][1] / per_agent[a][2], SCORE_DIGITS)) for a in names]
    return [{"agent": names[i], "cost_usd": points[i][0], "mean_score": points[i][1]}
            for i in metrics.pareto_front(points)]


def _task_rows(rows: Iterable[Any]) -> Iterator[dict[str, Any]]:
    """pass@k and pass^k per (agent, task, level, options), k = 1..epochs run. `rows`:
    `ReportQuery.task_rows`, kept as plain tuples, in order; each row's dict is built as it is
    taken."""
    kept = sorted((tuple(r) for r in rows), key=lambda r: (r[0], r[1], r[2] or "", r[3]))
    return (_task_row(*r) for r in kept)


def _task_row(agent: str, task_id: str, level: str | None, _options: str, n: int, c: int, total: float,
              search: str | None) -> dict[str, Any]:
    n, c = int(n), int(c)
    return {
        "agent": agent, "task_id": task_id, "level": level, "search": search,
        "epochs": n, "passes": c, "mean_score": total / n,
        "pass_at_k": {str(k): v for k, v in enumerate(metrics.pass_at_k_curve(n, c), start=1)},
        "pass_hat_k": {str(k): v for k, v in enumerate(metrics.pass_hat_k_curve(n, c), start=1)},
    }
