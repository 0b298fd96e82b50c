"""`assay export inspect`: assay tasks as an Inspect AI task file.

The out folder gets three files:
- `samples.json` (`ExportFile`): one sample per exportable task, carrying the prompt exactly
  as assay's runner builds it (`Task.prompt_text`, the task's system prompt and images) and
  what the scorer needs to reload the task (its id, content hash and the path it was found
  under);
- `tasks.py`: the Inspect task file (`inspect eval DIR/tasks.py --model ...`), whose scorer
  is assay's grader (`assay.interop.inspect_task`);
- `manifest.json` (`ExportManifest`): what was exported and what was not, with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from assay.campaign.plan import levels_for
from assay.errors import InputError
from assay.interop.grading import exportable_reason
from assay.task.discover import discover
from assay.task.formats.jsonio import loads_json
from assay.task.formats.values import apply_found_value_tables
from assay.task.model import Task
from assay.version import HARNESS_VERSION

__all__ = ["EXPORT_SCHEMA", "ExportFile", "ExportManifest", "ExportResult", "ExportedSample", "NotExported",
           "export_inspect", "load_tasks"]

EXPORT_SCHEMA = "assay.inspect-export/1"
TASK_FILE = "tasks.py"
SAMPLES_FILE = "samples.json"
MANIFEST_FILE = "manifest.json"


class SampleMeta(BaseModel):
    """What an exported sample carries for assay: how to reload and grade the task, and what
    `assay import inspect` keeps on the run (kinds, value, task metadata)."""

    assay_task_id: str
    assay_task_hash: str
    assay_suite: str  # the PATH (absolute) the task was found under; the scorer reloads it from there
    level: str | None = None
    kinds: list[str]
    value: dict[str, Any] | None = None
    task_meta: dict[str, Any] = Field(default_factory=dict)


class ExportedSample(BaseModel):
    id: str
    system: str | None = None
    prompt: str
    images: list[str] = Field(default_factory=list)  # absolute paths of the task's images
    target: str | None = None  # the task's reference answer, where it has one in text (Inspect's `target`)
    metadata: SampleMeta


class ExportFile(BaseModel):
    schema_: str = Field(default=EXPORT_SCHEMA, alias="schema")
    harness_version: str = HARNESS_VERSION
    samples: list[ExportedSample]

    model_config = {"populate_by_name": True}


class NotExported(BaseModel):
    id: str
    kinds: list[str]
    reason: str


class ExportManifest(BaseModel):
    schema_: str = Field(default=EXPORT_SCHEMA, alias="schema")
    harness_version: str = HARNESS_VERSION
    paths: list[str]
    task_file: str = TASK_FILE
    samples_file: str = SAMPLES_FILE
    exported: list[dict[str, Any]]
    not_exported: list[NotExported]

    model_config = {"populate_by_name": True}


class ExportResult(BaseModel):
    out: str
    manifest: ExportManifest


TASK_FILE_TEXT = '''"""Inspect AI task file written by `assay export inspect` (assay {version}).

    inspect eval {name} --model openai/gpt-4o
    inspect eval {name} --model openai/gpt-4o -T judge=openai/gpt-4.1   # tasks whose items need a judge

Each sample is one assay task, its prompt as assay's runner builds it; the scorer is
assay's grader (rubric checks and judge, contract predicates and checks): the score value
is assay's score, its metadata holds `passed` and the grade breakdown. Needs assay and
inspect-ai installed (`pip install 'assay[inspect]'`). Import the log back with
`assay import inspect LOG`.
"""

from pathlib import Path

from inspect_ai import Task, task

from assay.interop.inspect_task import assay_inspect_task


@task
def assay_tasks(judge: str | None = None, judge_mode: str = "batched") -> Task:
    return assay_inspect_task(Path(__file__).resolve().parent / "{samples}", judge=judge, judge_mode=judge_mode)
'''


def load_tasks(paths: list[Path]) -> list[tuple[Path, Task]]:
    """Every task under `paths` with the (absolute) path it was found under; values as `assay run` picks them up."""
    out: list[tuple[Path, Task]] = []
    seen: set[str] = set()
    for raw in paths:
        root = Path(raw).resolve()
        tasks = discover([root])
        apply_found_value_tables(tasks, [root])
        for t in tasks:
            if t.id in seen:
                raise InputError(t.origin or root, "id", f"duplicate task id {t.id!r}")
            seen.add(t.id)
            out.append((root, t))
    return out


def _sample(root: Path, task: Task) -> ExportedSample:
    levels, _ = levels_for(task, None)
    level = levels[0] if levels else None
    reference = task.policies.get("reference")
    return ExportedSample(
        id=task.id, system=task.system_prompt, prompt=task.prompt_text(level),
        target=reference.answer if reference is not None else None,
        images=[str(Path(p).resolve()) for p in task.images],
        metadata=SampleMeta(assay_task_id=task.id, assay_task_hash=task.content_hash, assay_suite=str(root),
                            level=level, kinds=task.kinds,
                            value={"amount": task.value.amount, "currency": task.value.currency} if task.value else None,
                            task_meta=task.meta()))


def _check_out(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(out, "--out", "exists and is not a folder")
    if out.is_dir():
        clash = [n for n in (TASK_FILE, SAMPLES_FILE, MANIFEST_FILE) if (out / n).exists()
                 and not _ours(out / MANIFEST_FILE)]
        if clash:
            raise InputError(out, "--out", f"holds {', '.join(clash)} not written by assay export; "
                                           "choose an empty folder")


def _ours(manifest: Path) -> bool:
    """Whether the folder's manifest.json is one assay export wrote (read within jsonio's limits:
    a planted 200,000-deep file is "not ours", not a RecursionError)."""
    try:
        data = loads_json(manifest.read_text(encoding="utf-8"), manifest)
    except (OSError, UnicodeDecodeError, InputError):
        return False
    return isinstance(data, dict) and data.get("schema") == EXPORT_SCHEMA


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def export_inspect(paths: list[Path], out: Path) -> ExportResult:
    """Write the Inspect task file, its samples and the manifest into `out`.

    InputError (nothing written) for bad task files, a bad `--out`, or when no task found
    is exportable."""
    found = load_tasks(paths)
    _check_out(out)
    samples: list[ExportedSample] = []
    skipped: list[NotExported] = []
    for root, task in found:
        reason = exportable_reason(task)
        if reason is None:
            samples.append(_sample(root, task))
        else:
            skipped.append(NotExported(id=task.id, kinds=task.kinds, reason=reason))
    if not samples:
        raise InputError(None, "PATH", f"none of the {len(found)} tasks found can be exported to Inspect "
                                       f"(e.g. {skipped[0].id}: {skipped[0].reason})")
    manifest = ExportManifest(
        paths=[str(Path(p).resolve()) for p in paths],
        exported=[{"id": s.id, "kinds": s.metadata.kinds, "hash": s.metadata.assay_task_hash} for s in samples],
        not_exported=skipped)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / SAMPLES_FILE, ExportFile(samples=samples).model_dump_json(by_alias=True, indent=2))
    _write(out / TASK_FILE, TASK_FILE_TEXT.format(version=HARNESS_VERSION, name=out.name + "/" + TASK_FILE,
                                                  samples=SAMPLES_FILE))
    _write(out / MANIFEST_FILE, manifest.model_dump_json(by_alias=True, indent=2))
    return ExportResult(out=str(out), manifest=manifest)
