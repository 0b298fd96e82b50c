"""What the round-3 attacks share: write a task, replay a script agent through `assay run`, read the runs back."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO, assay, report

TINY_SCENARIO = REPO / "tests" / "fixtures" / "native-scenario" / "tiny-native"


def home(tmp_path: Path) -> Path:
    """The test's folder, searchable by the sandbox's own uid."""
    os.chmod(tmp_path, 0o711)
    return tmp_path


def task(folder: Path, spec: dict[str, Any], files: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def script(path: Path, steps: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(s) + "\n" for s in steps))
    return f"script:{path}"


def run(cwd: Path, *args: str, env: dict[str, str] | None = None, codes: tuple[int, ...] = (0,)) -> dict[str, Any]:
    """`assay run ARGS -q`, then the report's runs by (task id, agent)."""
    r = assay("run", *args, "-q", cwd=cwd, env=env)
    assert r.returncode in codes, r.stdout + r.stderr
    return {(x["task_id"], x["agent"]): x for x in report(cwd)["runs"]}


def shown(cwd: Path, run_id: str) -> dict[str, Any]:
    r = assay("show", run_id, "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["run"]


def tiny_scenario(dest: Path) -> Path:
    """A copy of the tiny native scenario (system/app.py's answer() graded against held-out targets)."""
    shutil.copytree(TINY_SCENARIO, dest)
    return dest
