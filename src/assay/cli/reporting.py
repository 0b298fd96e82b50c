"""`assay report`, `compare`, `calibrate` and `curate`: what stored runs say."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from assay.errors import InputError

if TYPE_CHECKING:

    from assay.report.model import Report
from assay.cli import term
from assay.cli.app import app
from assay.cli.running import print_paired, print_power
from assay.cli.term import (
    existing_store,
    fail,
    open_existing,
    write_json,
)


@app.command()
def report(
    campaign: Annotated[str | None, typer.Option(help="campaign (default: every campaign, one report each; named when the store holds only one)")] = None,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    agent: Annotated[list[str] | None, typer.Option("--agent", help="only these agents; repeatable")] = None,
    kind: Annotated[str | None, typer.Option("--kind", help="only tasks scored as this kind: rubric|scenario|contract")] = None,
    html: Annotated[Path | None, typer.Option(help="write an HTML report with plots")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report JSON")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="write one CSV row per run")] = None,
    md_out: Annotated[Path | None, typer.Option("--md", help="write the report as Markdown tables")] = None,
    runs: Annotated[bool, typer.Option("--runs", help="also print every run")] = False,
    labels: Annotated[Path | None, typer.Option("--labels", help="human labels of this campaign's runs (JSON lines: run_id, task_id, item_id, met[, labeller]) for judge-human agreement on the same answers, beside the experts' labels stored from the web app")] = None,
    shared_tasks: Annotated[bool, typer.Option("--shared-tasks", help="per kind, keep only the tasks every agent that ran the kind finished (a done run), so every block compares the same work")] = False,
    failure_modes: Annotated[bool, typer.Option("--failure-modes", help="have --judge assign each failed run an error category (OneMillion-Bench's) with a one-line reason; cached in the store")] = False,
    judge: Annotated[list[str] | None, typer.Option("--judge", help="judge model spec or alias for --failure-modes")] = None,
) -> None:
    """Leaderboard and per-kind blocks from the store, one report per campaign."""
    import asyncio

    from assay.record import KINDS

    url, st, names = existing_store(store)
    if campaign is not None and campaign not in names:
        fail(InputError(None, "--campaign", f"no campaign named {campaign!r} in {url}"))
    if kind is not None and kind not in KINDS:
        fail(InputError(None, "--kind", f"{kind!r} is not one of {', '.join(KINDS)}"))
    chosen = [campaign] if campaign is not None else names
    exports = [o for o, v in (("--json", json_out), ("--csv", csv_out), ("--md", md_out), ("--html", html)) if v]
    if len(chosen) > 1 and exports:
        fail(InputError(None, "--campaign", f"the store holds {len(chosen)} campaigns ({', '.join(chosen[:10])}); "
                                             f"a report file holds one: name it with --campaign for {', '.join(exports)}"))
    from assay.store.labels import stored_labels

    human_labels = stored_labels(st) or None  # experts' labels given in the web app
    if labels is not None:
        from assay.report.agreement import load_labels

        try:
            human_labels = load_labels(labels) + (human_labels or [])
        except InputError as e:
            fail(e)
    failure_judge = _failure_judge(failure_modes, judge)
    agents = set(agent or [])
    rep: dict[str, Any] = {}
    targets: list[str | None] = [*chosen] or [None]
    from assay.report.build import stored_report
    from assay.report.compare import agents as campaign_agents
    from assay.report.export import write_files
    from assay.report.model import summary_model
    from assay.report.table import leaderboard, runs_table

    # Outputs that show runs as a table (the runs table, --md, --html) read each run's table
    # row; --json, --csv and the failure-mode judge only their ids (they read whole runs
    # themselves, one at a time).
    details: Literal["table", "ids"] | None = (
        "table" if runs or md_out is not None or html is not None
        else "ids" if failure_judge is not None or json_out is not None or csv_out is not None else None)
    for name in targets:
        rep = stored_report(st, name, agents=agents or None, kind=kind, labels=human_labels,
                            shared_tasks=shared_tasks, details=details or False,
                            tasks="stream" if json_out is not None else False)
        if agents and name is not None and not agents & set(campaign_agents(st, name)):
            term.say(f"note: campaign {name!r} has no runs of {', '.join(sorted(agents))}")
        model = summary_model(rep)
        term.out.print(leaderboard(model))
        if failure_judge is not None:
            from assay.campaign.failures import failure_modes as classify_failures

            ids = {r["run_id"] for r in rep["runs"]}
            records = [r for r in st.runs(name) if r.run_id in ids]  # the judge reads whole records
            try:
                rep["failure_modes"] = asyncio.run(classify_failures(failure_judge, st, records))
            except InputError as e:
                fail(e)
            model = summary_model(rep)
        _print_blocks(model)
        for w in model.warnings:
            term.say(f"warning: campaign {name}: {w}")
        if runs:
            term.out.print(runs_table(rep))
    write_files(st, rep, json_out=json_out, csv_out=csv_out, md_out=md_out, html=html)


def _failure_judge(failure_modes: bool, judge: list[str] | None) -> str | None:
    """The judge spec of `--failure-modes` (checked now, before any report is built)."""
    if not failure_modes:
        if judge:
            fail(InputError(None, "--judge", "--judge here is the judge of --failure-modes; pass --failure-modes too"))
        return None
    from assay.campaign.failures import check_judge

    try:
        return check_judge(list(judge or []))
    except InputError as e:
        fail(e)


def _print_blocks(model: Report) -> None:
    from assay.report.table import failure_table, kind_tables

    for block in kind_tables(model):
        term.out.print(block)
    if model.failure_modes is not None:
        term.out.print(failure_table(model.failure_modes))


@app.command()
def compare(
    agent_a: Annotated[str, typer.Argument(help="agent A (the baseline)")],
    agent_b: Annotated[str, typer.Argument(help="agent B (compared against A)")],
    campaign: Annotated[str | None, typer.Option(help="campaign of A's runs (and B's, unless --against-campaign); default: the store's only one, else `default`")] = None,
    against_campaign: Annotated[str | None, typer.Option("--against-campaign", help="take B's runs from this campaign (e.g. the same model with search)")] = None,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the comparison JSON (assay.compare/1)")] = None,
    detect: Annotated[float | None, typer.Option(help="the pairs, runs and dollars a fixed design needs to detect this difference at 80%% power")] = None,
) -> None:
    """Paired comparison of B against A on the run keys both finished: difference, CI, p-value;
    the anytime-valid test over the campaign's rounds, and the power of a fixed design."""
    from assay.report.compare import agents as compare_agents
    from assay.report.compare import compare_sides, finished
    from assay.report.model import Compare
    from assay.report.table import compare_table

    url, st, names = existing_store(store)
    if campaign is None:  # the store's only campaign, else the default one (SPEC: `default`)
        if len(names) == 1 or "default" in names:
            campaign = names[0] if len(names) == 1 else "default"
        else:
            fail(InputError(None, "--campaign", f"the store holds {len(names)} campaigns "
                                                 f"({', '.join(names[:10]) or 'none'}) and none is `default`: "
                                                 "name one with --campaign"))
    for opt, name in (("--campaign", campaign), ("--against-campaign", against_campaign)):
        if name is not None and name not in names:
            fail(InputError(None, opt, f"no campaign named {name!r} in {url}"))
    sides = []
    for arg, agent, camp in (("AGENT_A", agent_a, campaign), ("AGENT_B", agent_b, against_campaign or campaign)):
        there = compare_agents(st, camp)
        if agent not in there:
            fail(InputError(None, arg, f"agent {agent!r} has no runs in campaign {camp!r} "
                                        f"(agents there: {', '.join(there[:10]) or 'none'})"))
        sides.append(finished(st, camp, agent))
    if detect is not None and not (0 < detect < 1):
        fail(InputError(None, "--detect", "must be a difference between 0 and 1"))
    from assay.campaign.rounds import compare_evidence

    cmp = compare_sides(agent_a, agent_b, *sides, campaign=campaign, against=against_campaign)
    paired, power = compare_evidence(st, campaign, against_campaign, agent_a, agent_b, sides[0], sides[1], detect)
    cmp["sequential"] = paired.model_dump(mode="json") if paired is not None else None
    cmp["power"] = power.model_dump(mode="json")
    term.out.print(compare_table(Compare.model_validate(cmp)))
    if paired is not None:
        print_paired(cmp["sequential"])
    print_power(power, "these")
    if cmp["only_a"] or cmp["only_b"]:
        term.say(f"not paired: {len(cmp['only_a'])} key(s) only {agent_a} finished, "
                 f"{len(cmp['only_b'])} only {agent_b} finished")
    if json_out is not None:
        write_json(json_out, cmp)


@app.command()
def calibrate(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders holding answers people scored")],
    judge: Annotated[list[str] | None, typer.Option("--judge", help="judge model spec or alias; repeatable (each is measured on its own)")] = None,
    judge_mode: Annotated[str, typer.Option(help="batched|per-item")] = "batched",
    store: Annotated[str | None, typer.Option(help="store URL (judge calls are cached there)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the calibration JSON (assay.calibration/1)")] = None,
    stored_labels: Annotated[bool, typer.Option("--stored-labels", help="also compare with the experts' labels of stored runs (given in assay serve) on those runs' answers")] = False,
) -> None:
    """Measure a judge against people: judge the answers stored in the task files (and, with --stored-labels, the
    stored runs experts labelled), compare with the people's verdicts."""
    import asyncio

    from assay.campaign.service import calibrate_files
    from assay.report.table import calibration_table

    try:
        result = asyncio.run(calibrate_files(paths, judge or [], mode=judge_mode, store=store,
                                             stored_labels=stored_labels))
    except InputError as e:
        fail(e)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    cal = result.model_dump(mode="json", by_alias=True)
    term.out.print(calibration_table(cal))
    for miss in result.unmatched:
        if miss.startswith("run:"):
            term.say(f"note: expert labels of {miss} are left out")
        else:
            term.say(f"note: labels for {miss}, but the file holds no such answer (left out)")
    failed = [f for j in result.judges for f in j.failed]
    for f in failed:
        term.say(f"not judged: {f}")
    if json_out is not None:
        write_json(json_out, cal)
    if failed:
        raise typer.Exit(1)


@app.command()
def curate(
    campaign: Annotated[str, typer.Argument(help="campaign whose stored results to curate from")],
    out_file: Annotated[Path, typer.Option("--out", help="manifest to write (.json, .yaml or .yml)")],
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    small_agent: Annotated[str | None, typer.Option("--small-agent", help="agent spec for the difficulty filter (default: none, filter skipped)")] = None,
    k: Annotated[int | None, typer.Option("--k", help="difficulty: drop when the small agent passed k of k runs (default: its epochs per task)")] = None,
    zero_eps: Annotated[float, typer.Option("--zero-eps", help="lower truncation: list for review when every agent's best score <= this")] = 0.05,
) -> None:
    """Propose a filtered task set from stored results; write a suite manifest (deletes nothing)."""
    from assay.config import load_config, store_url
    from assay.report.curate import curate as do_curate
    from assay.report.table import curation_tables
    from assay.task.manifest import check_out_path, write_manifest

    try:
        check_out_path(out_file)
        url = store_url(store, load_config())
        st = open_existing(url)
        if campaign not in st.campaigns():
            raise InputError(None, "CAMPAIGN", f"no campaign named {campaign!r} in {url}")
        result = do_curate(st.runs(campaign), small_agent=small_agent, k=k, zero_eps=zero_eps)
    except InputError as e:
        fail(e)
    result.campaign = campaign
    write_manifest(out_file, result.manifest())
    for table in curation_tables(result, zero_eps):
        term.out.print(table)
    sys.stderr.write(f"void runs are ignored in curation ({result.void_ignored} ignored)\n")
    for note in result.notes:
        term.say(f"note: {note}")
    sys.stderr.write(f"wrote {out_file} ({len(result.kept)} tasks); no task file was changed\n")
