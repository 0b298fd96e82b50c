"""Category 3: task files cannot smuggle host files in.

A task folder is untrusted input (a suite downloaded from anywhere). A file it names
(`workspace_files[].source`, the `workspace/` folder, `prompt_file`, `images`, `corpus`,
`grading.checks`, a policy's `answer_file`/`artifacts`; DareBench's `assets/`) that is a
symlink, or resolves outside the suite, must be refused by `assay validate` and `assay run`
with exit 2 and a message naming the file, the field and the reason; nothing is stored.
Otherwise the harness, as root, copies the host file into the workspace (or the prompt, the
judge's view, the stored answer) where the agent and the store see it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.security._cases import labels_case
from tests.security._support import (
    HostSecret,
    bwrap_ok,
    cli,
    cmd,
    host_secret,
    leaks,
    script,
    workdir,
    write_yaml,
)

pytestmark = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")

REASON_WORDS = ("link", "outside", "escape", "leave", "leads out")


def _native(folder: Path, *, make_workspace: bool = True, **fields: Any) -> Path:
    spec: dict[str, Any] = {
        "title": "smuggler", "domain": "test", "execution": "multi-step-with-tools",
        "prompt": "Write 42 into answer.txt.",
        "contract": [{"path": "answer.txt", "predicate": "regex", "pattern": "42"}],
        **fields,
    }
    spec = {k: v for k, v in spec.items() if v is not None}
    return write_yaml(folder, spec, {"workspace/README.md": "hi\n"} if make_workspace else {})


def _darebench(folder: Path, source: str = "data.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task_smuggle_00.md").write_text(f"""---
id: task_smuggle_00
name: smuggler
category: test
grading_type: automated
workspace_files:
  - source: {source}
    dest: data.txt
---

## Prompt

Write 42 to `answer.txt`.

## Expected Behavior

answer.txt holds 42.

## Grading Criteria

- [ ] answer_correct: answer.txt holds 42

## Automated Checks

```python
from pathlib import Path


def grade(transcript: list, workspace_path: str) -> dict:
    p = Path(workspace_path) / "answer.txt"
    return {{"answer_correct": 1.0 if p.exists() and p.read_text().strip() == "42" else 0.0}}
```
""")
    return folder


# Each case: (builder(suite, secret) -> the task file it refers to, the field the message must name)
Case = Callable[[Path, HostSecret], tuple[Path, str]]


def native_source_file_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", workspace_files=[{"path": "data.txt", "source": "data.txt"}])
    os.symlink(hs.file, t / "data.txt")  # a link beside task.yaml to a root-only host file
    return t / "task.yaml", "workspace_files[0].source"


def native_source_dir_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", workspace_files=[{"path": "inputs", "source": "inputs"}])
    os.symlink(hs.dir, t / "inputs")
    return t / "task.yaml", "workspace_files[0].source"


def native_source_etc_shadow(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", workspace_files=[{"path": "notes.txt", "source": "notes.txt"}])
    os.symlink("/etc/shadow", t / "notes.txt")
    return t / "task.yaml", "workspace_files[0].source"


def native_workspace_folder_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", make_workspace=False)
    os.symlink(hs.dir, t / "workspace")  # the starting workspace is a link to a host folder
    return t / "task.yaml", "workspace"


def native_prompt_file_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", prompt=None, prompt_file="prompt.md")
    os.symlink(hs.file, t / "prompt.md")  # the host file would be the prompt, sent to the model
    return t / "task.yaml", "prompt_file"


def native_image_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", images=["chart.png"])
    os.symlink(hs.file, t / "chart.png")
    return t / "task.yaml", "images[0]"


def native_corpus_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", search="corpus", corpus="corpus")
    os.symlink(hs.dir, t / "corpus")
    return t / "task.yaml", "corpus"


def native_checks_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", grading={"type": "automated", "checks": "checks.py"})
    os.symlink(hs.file, t / "checks.py")  # a crash message would quote the host file's lines
    return t / "task.yaml", "grading.checks"


def native_answer_file_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", reference={"answer_file": "ref.md"})
    os.symlink(hs.file, t / "ref.md")
    return t / "task.yaml", "reference.answer_file"


def native_artifacts_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    t = _native(suite / "t", reference={"artifacts": "ref"})
    os.symlink(hs.dir, t / "ref")
    return t / "task.yaml", "reference.artifacts"


def darebench_source_link_out(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    d = _darebench(suite / "tasks")
    (suite / "assets").mkdir()
    os.symlink(hs.file, suite / "assets" / "data.txt")
    return d / "task_smuggle_00.md", "workspace_files[0].source"


def darebench_assets_folder_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    d = _darebench(suite / "tasks", source="answer.txt")
    os.symlink(hs.dir, suite / "assets")  # the whole assets/ folder is a link to a host folder
    return d / "task_smuggle_00.md", "workspace_files[0].source"


def darebench_source_link_inside(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    d = _darebench(suite / "tasks", source="alias.txt")
    (suite / "assets").mkdir()
    (suite / "assets" / "real.txt").write_text("fine\n")
    os.symlink("real.txt", suite / "assets" / "alias.txt")  # a source that is a symlink, even inside
    return d / "task_smuggle_00.md", "workspace_files[0].source"


def scenario_workspace_folder_link(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    case = labels_case(suite / "labels")
    shutil.rmtree(case / "workspace")
    os.symlink(hs.dir, case / "workspace")
    # a build script is needed when workspace/ is not a folder of the task
    (case / "build.py").write_text("def build(ws):\n    pass\n")
    spec = yaml.safe_load((case / "task.yaml").read_text())
    spec["scenario"]["build"] = "build.py"
    (case / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return case / "task.yaml", "workspace"


def scenario_source_link_out(suite: Path, hs: HostSecret) -> tuple[Path, str]:
    case = labels_case(suite / "labels")
    os.symlink(hs.file, case / "extra.txt")
    spec = yaml.safe_load((case / "task.yaml").read_text())
    spec["workspace_files"] = [{"path": "extra.txt", "source": "extra.txt"}]
    (case / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return case / "task.yaml", "workspace_files[0].source"


CASES: list[Case] = [native_source_file_link, native_source_dir_link, native_source_etc_shadow,
                     native_workspace_folder_link, native_prompt_file_link, native_image_link, native_corpus_link,
                     native_checks_link, native_answer_file_link, native_artifacts_link, darebench_source_link_out,
                     darebench_assets_folder_link, darebench_source_link_inside, scenario_workspace_folder_link,
                     scenario_source_link_out]


@pytest.fixture
def env() -> Iterator[tuple[Path, HostSecret]]:
    with workdir("smuggle") as wd, host_secret() as hs:
        yield wd, hs


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_validate_refuses_smuggling_links(env: tuple[Path, HostSecret], case: Case) -> None:
    wd, hs = env
    suite = wd / "suite"
    suite.mkdir()
    file, field = case(suite, hs)
    r = cli("validate", str(suite), cwd=wd, timeout=60)
    assert r.returncode == 2, (f"`assay validate` accepted a task whose {field} is a link out of the suite "
                               f"({r.returncode}): " + r.tail(800))
    msg = r.stderr + r.stdout
    assert "Traceback" not in msg, msg
    assert file.name in msg, f"the message does not name the file {file.name}: {msg}"
    assert field in msg, f"the message does not name the field {field}: {msg}"
    assert any(w in msg.lower() for w in REASON_WORDS), f"the message gives no reason (link/outside): {msg}"
    assert hs.token not in msg


RUN_CASES: list[Case] = [native_source_file_link, native_prompt_file_link, darebench_assets_folder_link]


@pytest.mark.parametrize("case", RUN_CASES, ids=[c.__name__ for c in RUN_CASES])
def test_run_refuses_smuggling_links_and_stores_nothing(env: tuple[Path, HostSecret], case: Case) -> None:
    wd, hs = env
    suite = wd / "suite"
    suite.mkdir()
    case(suite, hs)
    spy = script(wd, "spy", [cmd("cat data.txt answer.txt inputs/* README.md 2>&1; ls -laR"), {"say": "done"}])
    r = cli("run", str(suite), "--agent", spy, cwd=wd, timeout=120)
    found = leaks(wd, hs.needles())
    assert r.returncode == 2, (f"`assay run` ran a task that smuggles a host file in (exit {r.returncode}); "
                               f"host secret in the store afterwards: {bool(found)}. " + r.tail(600))
    assert not (wd / ".assay" / "assay.db").exists() or not found, "refused, but the store holds the secret"
