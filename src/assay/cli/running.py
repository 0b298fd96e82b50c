"""`assay run` and `assay noise`: a campaign planned, run and reported; `--dry-run`, the
evidence of a campaign that stops on it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.defaults import DEFAULTS
from assay.errors import InputError

if TYPE_CHECKING:

    from assay.campaign.options import RunOptions
    from assay.campaign.scheduler import CampaignResult
    from assay.campaign.service import PreparedCampaign
from assay.cli import term
from assay.cli.app import CreateOpt, app
from assay.cli.term import (
    closing,
    existing_store,
    fail,
    print_invalid,
    print_skips,
    write_json,
)


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
        fail(InputError(None, "--detect", "is read by --dry-run (and assay compare): pass --dry-run"))
    prepared = _prepare(req, require_keys=not dry_run)
    if dry_run:
        _dry_run(prepared, json_out)
        return
    result, report = _run_prepared(prepared, quiet, details=True if json_out is not None else None)
    from assay.report.model import summary_model
    from assay.report.table import leaderboard

    term.out.print(leaderboard(summary_model(report)))
    if report.get("sequential") is not None:
        print_evidence(report["sequential"])
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
        write_json(json_out, report)
    if result.interrupted:
        term.err.print(f"[yellow]interrupted: {result.ran} finished runs of this command are stored "
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
        fail(e)
    closing.append(prepared.close)  # its store, if opened, closed when the command ends
    print_invalid(prepared.skipped)
    print_skips(prepared.plan.skipped)
    if not prepared.plan.runs and prepared.plan.skipped:
        n = len({task_id for task_id, _, _ in prepared.plan.skipped})
        term.err.print(f"nothing to run: every run was skipped ({n} task(s); the reasons are above)")
        raise typer.Exit(1)
    return prepared


def _run_prepared(prepared: PreparedCampaign, quiet: bool, details: bool | None) -> tuple[CampaignResult, dict[str, Any]]:
    """Run a prepared campaign to its result and report; Ctrl-C is exit 130 with the finished runs stored."""
    import asyncio

    from assay.campaign.service import run_prepared

    try:
        return asyncio.run(run_prepared(prepared, console=term.err, show_progress=not quiet, details=details))
    except InputError as e:  # the store cannot be opened or written, or Ray cannot be started or reached
        fail(e)
    except KeyboardInterrupt:
        term.err.print("[yellow]interrupted; finished runs are stored, run the same command again to resume[/]")
        raise typer.Exit(130) from None


def _dry_run(prepared: PreparedCampaign, json_out: Path | None) -> None:
    """`assay run --dry-run`: the estimate per agent and, for two agents, the power of the plan."""
    from assay.campaign.rounds import plan_power
    from assay.campaign.service import DryRun, unkeyed_models
    from assay.campaign.service import dry_run as estimate
    from assay.report.table import dry_run_table

    rows = estimate(prepared)
    for what, reason in unkeyed_models(prepared):
        term.err.print(f"note: {what}: {reason} (the runs need it, the estimate does not)", highlight=False,
                  soft_wrap=True)
    plan = DryRun(campaign=prepared.options.campaign, agents=rows,
                  power=plan_power(prepared, [(r.agent, r.to_do, r.cost_usd) for r in rows]))
    term.out.print(dry_run_table([r.model_dump() for r in plan.agents], plan.campaign))
    if plan.power is not None:
        print_power(plan.power, "the plan's")
    if json_out is not None:
        write_json(json_out, plan.model_dump(mode="json"))


def print_evidence(ev: dict[str, Any]) -> None:
    """The rounds of a campaign that stopped on evidence: which interval, the decision, why it stopped."""
    term.out.print(f"stopped: {ev['stopped']} ({ev['rounds']} of at most {ev['rounds_max']} rounds, {ev['runs']} runs, "
              f"${ev['cost_usd']:.4f})", highlight=False, soft_wrap=True)
    term.out.print(f"interval: {ev['interval']}", highlight=False, soft_wrap=True)
    for iv in ev["intervals"]:
        term.out.print(f"  {iv['agent']} {iv['kind']}: {iv['mean']:.3f} [{iv['lo']:.3f}, {iv['hi']:.3f}] "
                  f"half-width {iv['half_width']:.3f}, n {iv['n']}", highlight=False, soft_wrap=True)
    if ev.get("paired") is not None:
        print_paired(ev["paired"])
    if ev["fixed_runs"] is not None:
        what = "the same half-width (normal intervals)" if ev["rule"] == "until-ci" else \
            "80% power for the observed difference"
        term.out.print(f"runs spent {ev['runs']}; a fixed design of {what} needs {ev['fixed_runs']}",
                  highlight=False, soft_wrap=True)


def print_paired(p: dict[str, Any]) -> None:
    from assay.sequential import DECISION_TEXT

    mean = "n/a" if p["mean_diff"] is None else f"{p['mean_diff']:+.3f}"
    decided = f"{DECISION_TEXT[p['decision']]} (round {p['decided_at']})" if p["decision"] else "not decided"
    term.out.print(f"paired B - A ({p['b']} - {p['a']}), anytime-valid: {mean} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] "
              f"over {p['n']} pairs; e-value {p['e_value']:.3g}, sequential p {p['p_value']:.3g}; {decided}",
              highlight=False, soft_wrap=True)
    if p.get("runs") is not None:
        def usd(x: float | None) -> str:
            return "unknown cost" if x is None else f"${x:.2f}"

        fixed = "a fixed design needs no known n (no observed difference)" if p["fixed_runs"] is None else \
            f"a fixed design of 80% power for the observed difference needs {p['fixed_runs']} ({usd(p['fixed_usd'])})"
        term.out.print(f"spent {p['runs']} runs ({usd(p['cost_usd'])}); {fixed}", highlight=False, soft_wrap=True)


def print_power(pw: Any, whose: str) -> None:
    mde = "n/a" if pw.mde80 is None else f"{pw.mde80:.3f}"
    term.out.print(f"power: {whose} {pw.n} pairs detect a difference of {mde} at 80% power (alpha {pw.alpha:g}, "
              f"sd {pw.sd:.3f} {pw.sd_basis})", highlight=False, soft_wrap=True)
    if pw.detect is not None:
        usd = "unknown cost" if pw.usd_detect is None else f"about ${pw.usd_detect:.2f}"
        term.out.print(f"to detect {pw.detect:g}: {pw.n_detect} pairs ({pw.runs_detect} runs, {usd})",
                  highlight=False, soft_wrap=True)


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
        fail(InputError(None, "--threshold", "must be a share in [0, 0.5)"))
    if paths:
        agent = _noise_campaign(paths, agent or [], epochs, campaign or "noise", store, quiet)
        campaign = campaign or "noise"
    elif epochs is not None:
        fail(InputError(None, "--epochs", "runs a suite: pass its paths (without paths, noise reads a stored campaign)"))
    url, st, names = existing_store(store)
    if campaign is None:
        if len(names) != 1 and "default" not in names:
            fail(InputError(None, "--campaign", f"the store holds {len(names)} campaigns "
                                                 f"({', '.join(names[:10]) or 'none'}) and none is `default`: "
                                                 "name one with --campaign"))
        campaign = names[0] if len(names) == 1 else "default"
    if campaign not in names:
        fail(InputError(None, "--campaign", f"no campaign named {campaign!r} in {url}"))
    there = campaign_agents(st, campaign)
    for a in agent or []:
        if a not in there:
            fail(InputError(None, "--agent", f"agent {a!r} has no runs in campaign {campaign!r} "
                                              f"(agents there: {', '.join(there[:10]) or 'none'})"))
    result = measure(st, campaign, agent or there, threshold)
    for ag in result.agents:
        var = "n/a (one epoch)" if ag.between_epoch_var is None else \
            f"{ag.between_epoch_var:.4g} (within a task {ag.within_task_var:.4g})"
        void = "n/a" if ag.void_rate is None else f"{ag.void_rate:.1%}"
        means = ", ".join(f"{m:.3f}" for m in ag.epoch_means)
        term.out.print(f"{ag.agent}: {ag.runs} runs over {ag.epochs} epoch(s); epoch means [{means}]; "
                  f"between-epoch variance {var}; void {void} of {ag.attempts} attempts; "
                  f"{ag.flaky_tasks} task(s) flip", highlight=False, soft_wrap=True)
        for t in ag.flagged:
            level = f" {t.level}" if t.level else ""
            term.out.print(f"  flaky: {t.task_id}{level} passed {t.passes} of {t.epochs} epochs "
                      f"(flakiness {t.flakiness:.2f} > {threshold:g}): a candidate for assay curate",
                      highlight=False, soft_wrap=True)
    if json_out is not None:
        write_json(json_out, result.model_dump(mode="json", by_alias=True))


def _noise_campaign(paths: list[Path], agents: list[str], epochs: int | None, campaign: str,
                    store: str | None, quiet: bool) -> list[str]:
    """`assay noise PATHS`: run the agents and the reference policy `epochs` times (resuming a
    campaign run before, as `assay run` does); the agents to measure."""
    from assay.campaign.options import RunOptions

    if not agents:
        fail(InputError(None, "--agent", "name the agent whose noise to measure (the reference policy runs beside it)"))
    epochs = 3 if epochs is None else epochs
    if epochs < 2:
        fail(InputError(None, "--epochs", "noise is measured across epochs: at least 2"))
    measured = agents + [a for a in ("reference",) if a not in agents]
    req = RunOptions(paths=paths, agents=measured, epochs=epochs, campaign=campaign, store=store)
    prepared = _prepare(req)
    result, _report = _run_prepared(prepared, quiet, details=False)
    sys.stderr.write(f"{result.ran} runs this time, {result.already_done} already done; {result.void} void; "
                     f"store {prepared.store.url}\n")
    return measured
