"""The run's cgroup (`assay.env.cgroup`): which controllers a run gets on cgroup v1 and v2
hosts, and, on this machine, that every command of a sandbox really sits in all of them.

The v2 and v1 layouts are exercised on folders standing in for cgroup mounts (these
machines are cgroup v1 hybrids, so the v2 branch cannot be run for real here); the real
joining is checked against the host's own hierarchies."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from assay.env.cgroup import CgroupLayout, RunCgroup
from assay.env.limits import Limits
from assay.env.sandbox import Sandbox

IS_ROOT = os.geteuid() == 0

MOUNTINFO_V1 = """\
30 25 0:26 / {root}/memory rw,relatime shared:10 - cgroup cgroup rw,memory
31 25 0:27 / {root}/pids rw,relatime shared:11 - cgroup cgroup rw,pids
32 25 0:28 / {root}/cpu rw,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct
33 25 0:29 / {root}/unified rw,relatime shared:13 - cgroup2 cgroup2 rw
"""
CGROUP_V1 = "4:memory:/job\n8:pids:/\n1:cpu,cpuacct:/\n0::/\n"
MOUNTINFO_V2 = "40 25 0:30 / {root} rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"


def _v1_tree(root: Path) -> CgroupLayout:
    (root / "memory" / "job").mkdir(parents=True)
    (root / "memory" / "job" / "memory.limit_in_bytes").write_text("max")
    for ctl in ("pids", "cpu"):
        (root / ctl).mkdir()
        (root / ctl / "cgroup.procs").write_text("")
    (root / "unified").mkdir()
    return CgroupLayout.parse(MOUNTINFO_V1.format(root=root), CGROUP_V1)


def test_v1_layout_gives_memory_pids_and_cpu_folders(tmp_path: Path) -> None:
    layout = _v1_tree(tmp_path)
    assert layout.v1_dir("memory") == tmp_path / "memory" / "job"
    assert layout.v1_dir("cpu") == layout.v1_dir("cpuacct") == tmp_path / "cpu"
    cg = RunCgroup.create(256 << 20, "t", pids_max=77, layout=layout)
    assert cg is not None and cg.version == 1
    assert cg.controllers == ["memory", "pids", "cpu"]
    assert cg.path.parent == tmp_path / "memory" / "job"
    assert (cg.path / "memory.limit_in_bytes").read_text() == str(256 << 20)
    pids, cpu = cg.extra
    assert pids.parent == tmp_path / "pids" and (pids / "pids.max").read_text() == "77"
    assert cpu.parent == tmp_path / "cpu" and cpu.is_dir()
    assert cg.procs_files() == [str(p / "cgroup.procs") for p in (cg.path, pids, cpu)]
    assert cg.label == "cgroup v1: memory, pids, cpu"


def test_v1_without_a_pids_cap_leaves_the_pids_hierarchy_alone(tmp_path: Path) -> None:
    cg = RunCgroup.create(1 << 30, "t", layout=_v1_tree(tmp_path))
    assert cg is not None and cg.controllers == ["memory", "cpu"]
    assert list((tmp_path / "pids").iterdir()) == [tmp_path / "pids" / "cgroup.procs"]


def test_v1_without_a_memory_controller_gives_no_cgroup(tmp_path: Path) -> None:
    layout = _v1_tree(tmp_path)
    (tmp_path / "memory" / "job" / "memory.limit_in_bytes").unlink()
    assert RunCgroup.create(1 << 30, "t", pids_max=10, layout=layout) is None
    assert not list((tmp_path / "pids").glob("assay-*"))  # nothing half-made elsewhere


def test_v2_with_delegated_controllers(tmp_path: Path) -> None:
    own = tmp_path / "service"
    own.mkdir()
    (own / "cgroup.subtree_control").write_text("cpu memory pids\n")
    layout = CgroupLayout.parse(MOUNTINFO_V2.format(root=tmp_path), "0::/service\n")
    assert layout.v2_dir() == own
    cg = RunCgroup.create(512 << 20, "t", pids_max=64, layout=layout)
    assert cg is not None and cg.version == 2 and cg.path.parent == own and not cg.extra
    assert (cg.path / "memory.max").read_text() == str(512 << 20)
    assert (cg.path / "pids.max").read_text() == "64"
    assert cg.controllers == ["memory", "pids", "cpu"]


def test_v2_delegating_only_memory_gets_no_pids_cap(tmp_path: Path) -> None:
    (tmp_path / "cgroup.subtree_control").write_text("memory\n")
    layout = CgroupLayout.parse(MOUNTINFO_V2.format(root=tmp_path), "0::/\n")
    cg = RunCgroup.create(512 << 20, "t", pids_max=64, layout=layout)
    assert cg is not None and cg.controllers == ["memory"] and not (cg.path / "pids.max").exists()


def test_v2_without_memory_delegated_gives_no_cgroup(tmp_path: Path) -> None:
    (tmp_path / "cgroup.subtree_control").write_text("cpu pids\n")
    layout = CgroupLayout.parse(MOUNTINFO_V2.format(root=tmp_path), "0::/\n")
    assert RunCgroup.create(512 << 20, "t", layout=layout) is None
    assert not list(tmp_path.glob("assay-*"))


def test_a_failed_setup_raises_and_leaves_no_folder_in_the_other_hierarchies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _v1_tree(tmp_path)
    real_mkdir = os.mkdir

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777) -> None:
        if Path(path).parent == tmp_path / "cpu":
            raise PermissionError(13, "refused", str(path))
        real_mkdir(path, mode)

    real_rmdir = os.rmdir

    def rmdir(path: str | os.PathLike[str]) -> None:  # as on cgroupfs: a folder goes with its control files
        for f in Path(path).iterdir():
            f.unlink()
        real_rmdir(path)

    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "rmdir", rmdir)
    with pytest.raises(PermissionError):
        RunCgroup.create(1 << 30, "t", pids_max=5, layout=layout)
    assert not list((tmp_path / "pids").glob("assay-*"))  # the pids folder made before is removed
    assert not list((tmp_path / "memory" / "job").glob("assay-*"))  # and the memory one


needs_real = pytest.mark.skipif(not IS_ROOT or shutil.which("bwrap") is None,
                                reason="needs a root harness and bubblewrap")


@pytest.fixture
def base() -> Iterator[Path]:
    """A parent the sandbox uid can traverse (0711), as the harness makes run folders."""
    d = Path(tempfile.mkdtemp(prefix="assay-cg-test-"))
    os.chmod(d, 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _sandbox(base: Path, limits: Limits) -> Sandbox:
    ws = base / "ws"
    ws.mkdir()
    s = Sandbox(ws, isolated=True, limits=limits)
    s.prepare()
    return s


@needs_real
async def test_every_command_of_a_run_sits_in_all_its_cgroups(base: Path) -> None:
    s = _sandbox(base, Limits(nproc=300))
    if s.cgroup is None:
        await s.close()
        pytest.skip("no writable memory controller on this host")
    cg = s.cgroup
    assert "memory" in cg.controllers
    if cg.pids_max is not None:
        assert cg.pids_max == 300
    try:
        job = asyncio.create_task(s.run("sleep 3 & sleep 3 & wait", timeout_s=20))
        members: dict[str, int] = {}
        for _ in range(200):
            await asyncio.sleep(0.02)
            members = {str(p): len(Path(p).read_text().split()) for p in cg.procs_files()}
            if all(n >= 3 for n in members.values()):
                break
        assert all(n >= 3 for n in members.values()), members  # sh and both sleeps, in every folder
        if cg.pids_max is not None:
            pids_dir = next(p for p in cg.paths if (p / "pids.max").exists())
            assert (pids_dir / "pids.max").read_text().strip() == "300"
            assert int((pids_dir / "pids.current").read_text()) >= 3
        job.cancel()
        await asyncio.gather(job, return_exceptions=True)
    finally:
        await s.close()
    assert all(not p.exists() for p in cg.paths), "the run's cgroup folders were not removed"


@needs_real
async def test_the_pids_cap_holds_for_the_whole_run(base: Path) -> None:
    """More processes than the cap, from one shell: the kernel refuses the forks past it
    (the run's own uid keeps RLIMIT_NPROC too; the cgroup also counts threads)."""
    s = _sandbox(base, Limits(nproc=1000))
    if s.cgroup is None or s.cgroup.pids_max is None:
        await s.close()
        pytest.skip("no pids controller of ours on this host")
    pids_dir = next(p for p in s.cgroup.paths if (p / "pids.max").exists())
    (pids_dir / "pids.max").write_text("20")  # tighter than RLIMIT_NPROC: only the cgroup can refuse
    try:
        r = await s.run("n=0; for i in $(seq 1 40); do sleep 2 & n=$((n+1)); done; echo started; wait",
                        timeout_s=30)
    finally:
        await s.close()
    assert "fork" in r.output.lower() or "resource temporarily unavailable" in r.output.lower(), r.output
