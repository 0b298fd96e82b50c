"""A private network namespace for tests and benchmarks that run Ray: Ray binds to the
machine's address, so everything of it runs where only `lo` exists (platform-notes)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers import REPO

HAVE_NS = shutil.which("unshare") is not None and shutil.which("nsenter") is not None and os.geteuid() == 0


class NetNamespace:
    """A private network, pid and mount namespace (only `lo`, up), held open by a `sleep` as its
    init; commands enter it with nsenter. Killing the init ends every process inside."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c",
                                      "ip link set lo up && exec sleep 3600"])
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        deadline = time.monotonic() + 10
        self.init_pid = 0
        while time.monotonic() < deadline:
            pids = children.read_text().split() if children.exists() else []
            if pids and Path(f"/proc/{pids[0]}/cmdline").read_bytes().startswith(b"sleep"):
                self.init_pid = int(pids[0])
                break
            time.sleep(0.05)
        assert self.init_pid, "the namespace did not come up"
        self.net = os.readlink(f"/proc/{self.init_pid}/ns/net")
        home = tmp / "home"
        home.mkdir()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "ASSAY_", "RAY_"))}
        self.env.update(HOME=str(home), RAY_AUTH_MODE="disabled", RAY_TMPDIR=tempfile.mkdtemp(prefix="ar", dir="/tmp"),
                        RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO / "src"), COLUMNS="200")

    def argv(self, cmd: list[str], cwd: Path) -> list[str]:
        # Entering the mount namespace resets the working folder unless --wd names it.
        return ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-m", f"--wd={cwd}", "--", *cmd]

    def run(self, cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(cmd, cwd), cwd=cwd, env=self.env, text=True, capture_output=True,
                              timeout=timeout)

    def popen(self, cmd: list[str], cwd: Path) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(cmd, cwd), cwd=cwd, env=self.env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    def pids(self, *markers: bytes) -> list[int]:
        """Host pids of this namespace's processes whose command line holds one of `markers`."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(entry / "ns" / "net") != self.net:
                    continue
                cmdline = (entry / "cmdline").read_bytes()
                if any(m in cmdline for m in markers):
                    found.append(int(entry.name))
            except OSError:  # the process ended while we looked
                continue
        return found

    def close(self) -> None:
        os.kill(self.init_pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        shutil.rmtree(self.env["RAY_TMPDIR"], ignore_errors=True)
