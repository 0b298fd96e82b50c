"""The native format: a folder with `task.yaml` and an optional `workspace/` folder.

Documented field by field in docs/formats.md. Unknown fields are refused, so a typo never
silently turns a constraint off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.errors import InputError
from assay.plugins import entry_point_names
from assay.task.formats.yamlio import load_yaml, read_text
from assay.task.hashing import content_hash
from assay.task.model import (
    TOOL_NAMES,
    Budget,
    GradingSpec,
    MachineCheck,
    PolicySpec,
    Predicate,
    Rubric,
    RubricItem,
    Task,
    Value,
    WorkspaceFile,
)
from assay.task.validation import (
    check_relative_path,
    pydantic_to_input_error,
    task_path,
    validate_task,
    workspace_folder,
)

FILE_TOOLS = ["read_file", "write_file", "edit_file", "list_files"]


class _F(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PolicyFile(_F):
    answer: str | None = None
    answer_file: str | None = None
    artifacts: str | None = None
    script: str | None = None


class GradingFile(_F):
    type: Literal["automated", "judge", "hybrid"] = "automated"
    weights: dict[Literal["automated", "judge"], float] | None = None
    checks: str | None = None
    judge_rubric: str | None = None
    expected_behavior: str | None = None
    criteria: list[str] = Field(default_factory=list)


class RubricItemFile(_F):
    id: str | int | None = None
    text: str
    weight: Any
    tag: str | None = None
    tags: list[str] = Field(default_factory=list)
    check: MachineCheck | None = None
    human_labels: dict[str, bool] = Field(default_factory=dict)


class RubricFile(_F):
    scoring: Literal["clipped", "unclipped_mean"] = "clipped"
    items: list[RubricItemFile]


class WorkspaceEntryFile(_F):
    path: str
    source: str | None = None
    content: str | None = None


class NativeTaskFile(_F):
    schema_version: Literal[1] = 1
    id: str | None = None
    title: str = ""
    domain: str | None = None
    subdomain: str | None = None
    subset: str | None = None
    language: str = "en"
    source: str | None = None
    prompt: str | None = None
    prompt_file: str | None = None
    briefs: dict[str, str] = Field(default_factory=dict)
    system_prompt: str | None = None
    images: list[str] = Field(default_factory=list)
    execution: Literal["single-step", "multi-step", "multi-step-with-tools"] = "multi-step-with-tools"
    modality: Literal["text", "multimodal"] | None = None
    tools: list[str] | None = None
    search: Literal["none", "corpus", "live"] = "none"
    corpus: str | None = None
    answer_path: str | None = None
    workspace_files: list[WorkspaceEntryFile] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    value: Value | None = None
    threshold: float | None = None
    contract: list[Predicate] = Field(default_factory=list)
    grading: GradingFile | None = None
    rubric: RubricFile | None = None
    reference: PolicyFile | None = None
    literal: PolicyFile | None = None
    shortcuts: dict[str, PolicyFile] = Field(default_factory=dict)
    bypasses: dict[str, PolicyFile] = Field(default_factory=dict)
    alternates: dict[str, PolicyFile] = Field(default_factory=dict)
    requirements: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)


def _local(folder: Path, file: Path, field: str, rel: str, *, kind: str = "any") -> Path:
    return task_path(folder, file, field, rel, kind=kind)


def _policy(folder: Path, file: Path, field: str, pf: PolicyFile) -> PolicySpec:
    given = [x for x in (pf.answer, pf.answer_file, pf.artifacts, pf.script) if x is not None]
    if not given:
        raise InputError(file, field, "a policy needs answer, answer_file, artifacts or script")
    answer = pf.answer
    if pf.answer_file is not None:
        answer = read_text(_local(folder, file, f"{field}.answer_file", pf.answer_file, kind="file"))
    return PolicySpec(
        answer=answer,
        artifacts=_local(folder, file, f"{field}.artifacts", pf.artifacts, kind="dir") if pf.artifacts else None,
        script=_local(folder, file, f"{field}.script", pf.script, kind="file") if pf.script else None,
    )


def read_task_yaml(folder: Path) -> dict[str, Any]:
    """The parsed task.yaml of a native task folder (a mapping, else InputError)."""
    file = folder / "task.yaml"
    raw = load_yaml(file)
    if not isinstance(raw, dict):
        raise InputError(file, None, "task.yaml must be a mapping of fields")
    return raw


def read_native(folder: Path, raw: dict[str, Any] | None = None) -> Task:  # noqa: C901 (a reader checks each field of its format in the order the format lists them)
    """Read one native task folder into a Task (refusing bad input with InputError). A folder
    whose task.yaml has a `scenario:` block is a native scenario (`native_scenario`)."""
    file = folder / "task.yaml"
    if raw is None:
        raw = read_task_yaml(folder)
    try:
        tf = NativeTaskFile.model_validate(raw)
    except ValidationError as e:
        raise pydantic_to_input_error(file, e) from None

    prompt = tf.prompt
    if tf.prompt_file is not None:
        if prompt is not None:
            raise InputError(file, "prompt_file", "give prompt or prompt_file, not both")
        prompt = read_text(_local(folder, file, "prompt_file", tf.prompt_file, kind="file"))

    if tf.tools is None:
        tools = {"single-step": [], "multi-step": list(FILE_TOOLS),
                 "multi-step-with-tools": list(TOOL_NAMES)}[tf.execution]
    else:
        tools = list(tf.tools)
        for i, t in enumerate(tools):
            # Else a tool an installed package adds (assay.plugins): loaded when a campaign starts.
            if t not in TOOL_NAMES and t not in (plugged := entry_point_names("assay.tools")):
                raise InputError(file, f"tools[{i}]", f"unknown tool {t!r} (known: "
                                                      f"{', '.join([*TOOL_NAMES, *plugged])})")

    workspace: list[WorkspaceFile] = []
    ws_dir = workspace_folder(folder, file)
    if ws_dir is not None:
        workspace.append(WorkspaceFile(path=".", source=ws_dir))
    for i, wf in enumerate(tf.workspace_files):
        field = f"workspace_files[{i}]"
        check_relative_path(file, f"{field}.path", wf.path)
        if (wf.source is None) == (wf.content is None):
            raise InputError(file, field, "give exactly one of source or content")
        src = _local(folder, file, f"{field}.source", wf.source) if wf.source else None
        workspace.append(WorkspaceFile(path=wf.path, source=src, content=wf.content))

    images = [_local(folder, file, f"images[{i}]", p, kind="file") for i, p in enumerate(tf.images)]
    corpus = None
    if tf.search == "corpus":
        if not tf.corpus:
            raise InputError(file, "corpus", "search: corpus needs a corpus folder")
        corpus = _local(folder, file, "corpus", tf.corpus, kind="dir")
    elif tf.corpus:
        raise InputError(file, "corpus", "corpus is given but search is not 'corpus'")

    grading = None
    if tf.grading is not None:
        g = tf.grading
        weights = g.weights or {}
        checks_file = _local(folder, file, "grading.checks", g.checks, kind="file") if g.checks else None
        if g.type in ("automated", "hybrid") and checks_file is None and not tf.contract:
            raise InputError(file, "grading.checks", f"grading type {g.type!r} needs checks or a contract")
        if g.type in ("judge", "hybrid") and not (g.judge_rubric and g.judge_rubric.strip()):
            raise InputError(file, "grading.judge_rubric", f"grading type {g.type!r} needs a judge_rubric")
        grading = GradingSpec(
            type=g.type,
            weight_automated=weights.get("automated", 0.5 if g.type == "hybrid" else 1.0),
            weight_judge=weights.get("judge", 0.5 if g.type == "hybrid" else 1.0),
            checks_file=checks_file, judge_rubric=g.judge_rubric,
            expected_behavior=g.expected_behavior, criteria=g.criteria,
        )

    rubric = None
    if tf.rubric is not None:
        items = []
        for i, it in enumerate(tf.rubric.items):
            w = it.weight
            if isinstance(w, bool) or not isinstance(w, (int, float)):
                raise InputError(file, f"rubric.items[{i}].weight", f"weight {w!r} is not a number")
            items.append(RubricItem(id=str(it.id if it.id is not None else i + 1), text=it.text, weight=float(w),
                                    tag=it.tag, tags=it.tags, check=it.check, human_labels=it.human_labels))
        rubric = Rubric(items=items, scoring=tf.rubric.scoring)

    policies: dict[str, PolicySpec] = {}
    if tf.reference is not None:
        policies["reference"] = _policy(folder, file, "reference", tf.reference)
    if tf.literal is not None:
        policies["literal"] = _policy(folder, file, "literal", tf.literal)
    for group, prefix in ((tf.shortcuts, "shortcut"), (tf.bypasses, "bypass"), (tf.alternates, "alternate")):
        for name, pf in group.items():
            policies[f"{prefix}:{name}"] = _policy(folder, file, f"{prefix}s.{name}", pf)

    modality = tf.modality or ("multimodal" if images else "text")
    task = Task(
        id=tf.id or folder.name, title=tf.title, domain=tf.domain, subdomain=tf.subdomain, subset=tf.subset,
        language=tf.language, source=tf.source or "native", origin=str(file), prompt=prompt, briefs=tf.briefs,
        system_prompt=tf.system_prompt, images=images, workspace=workspace, tools=tools, search=tf.search,
        corpus=corpus, answer_path=tf.answer_path, contract=tf.contract, rubric=rubric, grading=grading,
        budget=tf.budget, value=tf.value, modality=modality, execution=tf.execution, threshold=tf.threshold,
        policies=policies, requirements=tf.requirements, tags=tf.tags,
    )
    if not task.tools and task.answer_path is None and task.contract:
        raise InputError(file, "answer_path", "a task without tools and with a contract needs answer_path "
                                              "(where the harness writes the answer)")
    if task.rubric is None and task.grading is None and not task.contract:
        raise InputError(file, None, "a task needs at least one of contract, grading or rubric")
    validate_task(task, file)
    task.content_hash = content_hash(task)
    return task
