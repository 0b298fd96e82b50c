"""Native scenarios: a folder with `task.yaml` holding a `scenario:` block.

Documented field by field in docs/formats.md ("Scenarios"). A native scenario is the
project's own way to write what an FDE-Gym case folder holds (world builder, stakeholders,
grader, policies, variants), with every file named explicitly in `task.yaml` and three
things FDE-Gym leaves to the grader code made mandatory and visible: the held-out data
(`held_out`), the baseline (`baseline`) and the reference solution (`reference`).

One folder gives one Task per variant, id `SCENARIO/VARIANT` (SCENARIO is `id`, else the
folder name; without `variants` the one variant is `base`). Every Task gets the same
`Task.scenario` (a `ScenarioSpec`) an FDE-Gym case gives, plus
`files` (the case files by path relative to the folder) and `held_out` (relative path, given
to the grader as an absolute path in `ctx["held_out"]`, never copied into the workspace).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from assay.errors import InputError
from assay.task.formats.jsonio import loads_json
from assay.task.formats.native import WorkspaceEntryFile
from assay.task.formats.scenario import Brief, Variant, variant_tasks
from assay.task.formats.yamlio import read_text
from assay.task.model import (
    LEVELS,
    TOOL_NAMES,
    Budget,
    Engagement,
    FramingRule,
    PolicySpec,
    ServiceSpec,
    Task,
    Value,
    WorkspaceFile,
)
from assay.task.patterns import check_pattern
from assay.task.validation import check_relative_path, pydantic_to_input_error, task_path, workspace_folder

__all__ = ["NOT_IN_SCENARIOS", "read_native_scenario"]

_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_BRIEF_FILE = re.compile(r"^\S+\.(md|txt)$")  # a brief value that is a file path

# Top-level fields of a plain native task that a scenario does not use (with where they go).
NOT_IN_SCENARIOS: dict[str, str] = {
    "prompt": "a scenario is briefed per level: use briefs",
    "prompt_file": "a scenario is briefed per level: use briefs",
    "contract": "a scenario is graded by scenario.grader",
    "grading": "a scenario is graded by scenario.grader",
    "rubric": "a scenario is graded by scenario.grader",
    "reference": "use scenario.reference",
    "literal": "use scenario.literal",
    "shortcuts": "use scenario.shortcuts",
    "bypasses": "use scenario.bypasses",
    "alternates": "use scenario.alternates",
    "images": "not used by a scenario",
    "modality": "not used by a scenario",
    "execution": "a scenario always runs with every tool (multi-step-with-tools)",
    "tools": "a scenario always runs with every tool (multi-step-with-tools)",
    "search": "not used by a scenario",
    "corpus": "not used by a scenario",
    "answer_path": "not used by a scenario",
}


class _F(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServiceFile(_F):
    name: str
    script: str


class BudgetsFile(_F):
    dev_llm_calls: int | None = Field(default=None, ge=0)
    dev_llm_usd: float | None = Field(default=None, ge=0)
    prod_llm_calls: int | None = Field(default=None, ge=0)
    prod_llm_usd: float | None = Field(default=None, ge=0)


class FramingFile(_F):
    id: str
    any: list[str]


class TruthFile(_F):
    key_stakeholder_facts: list[str] = Field(default_factory=list)
    framing: list[FramingFile] = Field(default_factory=list)


class VariantFile(_F):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)
    right_here: bool = False
    kpi_baseline: Any = None
    kpi_oracle: Any = None


class ScenarioBlock(_F):
    rules: Literal["v1", "v2", "v3"] = "v1"
    rules_extra: str | None = None
    stakeholders: str | None = None
    build: str | None = None
    grader: str | None = None
    held_out: str | None = None
    baseline: Any = None
    reference: str | None = None
    literal: str | None = None
    shortcuts: dict[str, str] = Field(default_factory=dict)
    bypasses: dict[str, str] = Field(default_factory=dict)
    alternates: dict[str, str] = Field(default_factory=dict)
    probes: dict[str, str] = Field(default_factory=dict)
    truth: TruthFile | None = None
    variants: list[VariantFile] | None = None
    pilot: str | None = None
    llm: bool = False
    services: list[ServiceFile] = Field(default_factory=list)
    budgets: BudgetsFile = Field(default_factory=BudgetsFile)


class NativeScenarioFile(_F):
    schema_version: Literal[1] = 1
    id: str | None = None
    title: str = ""
    domain: str | None = None
    subdomain: str | None = None
    subset: str | None = None
    language: str | None = None
    source: str | None = None
    briefs: dict[str, str] = Field(default_factory=dict)
    system_prompt: str | None = None
    workspace_files: list[WorkspaceEntryFile] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    value: Value | None = None
    threshold: float | None = Field(default=None, ge=0, le=1)
    requirements: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    scenario: ScenarioBlock


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float)


class _Reader:
    def __init__(self, folder: Path) -> None:
        self.folder = folder.resolve()
        self.file = self.folder / "task.yaml"

    def path(self, field: str, rel: Any, kind: str = "any") -> Path:
        """A path beside task.yaml (`assay.task.validation.task_path`)."""
        return task_path(self.folder, self.file, field, rel, kind=kind)

    def rel(self, p: Path) -> str:
        return p.relative_to(self.folder).as_posix()


def read_native_scenario(folder: Path, raw: dict[str, Any]) -> list[Task]:  # noqa: C901 (a reader checks each field of its format in the order docs/formats.md lists them)
    """One Task per variant of the native scenario in `folder` (raw: the parsed task.yaml)."""
    r = _Reader(folder)
    file, folder = r.file, r.folder
    for key, why in NOT_IN_SCENARIOS.items():
        if key in raw:
            raise InputError(file, key, f"not allowed in a scenario task: {why}")
    try:
        tf = NativeScenarioFile.model_validate(raw)
    except ValidationError as e:
        raise pydantic_to_input_error(file, e) from None
    sc = tf.scenario
    scenario_name = tf.id or folder.name
    if not _NAME.match(scenario_name):
        raise InputError(file, "id", f"bad scenario id {scenario_name!r} (letters, digits, _ . -; no '/')")

    # --- the three things every native scenario must declare
    if sc.held_out is None:
        raise InputError(file, "scenario.held_out", "required: the held-out data (a folder or a generator file) "
                                                    "the grader scores on")
    if sc.baseline is None:
        raise InputError(file, "scenario.baseline", "required: the KPI of the unchanged system (a number), "
                                                    "or 'compute' when the grader returns kpi_baseline")
    if not (_number(sc.baseline) or sc.baseline == "compute"):
        raise InputError(file, "scenario.baseline", f"must be a number or 'compute' (got {sc.baseline!r})")
    if sc.reference is None:
        raise InputError(file, "scenario.reference", "required: the reference solution script")
    for key in ("stakeholders", "grader"):
        if getattr(sc, key) is None:
            raise InputError(file, f"scenario.{key}", "required")

    # --- files
    held_out = r.path("scenario.held_out", sc.held_out)
    if held_out == folder:
        raise InputError(file, "scenario.held_out", "must be a folder or file inside the task folder, not the folder")
    grader = r.path("scenario.grader", sc.grader, "file")
    npcs = r.path("scenario.stakeholders", sc.stakeholders, "file")
    build = r.path("scenario.build", sc.build, "file") if sc.build is not None else None
    pilot = r.path("scenario.pilot", sc.pilot, "file") if sc.pilot is not None else None
    ws_dir = workspace_folder(folder, file)
    if build is None and ws_dir is None:
        raise InputError(file, "scenario.build", "a scenario needs a build script or a workspace/ folder (or both)")

    workspace: list[WorkspaceFile] = []
    ws_sources: list[tuple[str, Path]] = []
    if ws_dir is not None:
        workspace.append(WorkspaceFile(path=".", source=ws_dir))
        ws_sources.append(("workspace/", ws_dir))
    for i, wf in enumerate(tf.workspace_files):
        field = f"workspace_files[{i}]"
        check_relative_path(file, f"{field}.path", wf.path)
        if (wf.source is None) == (wf.content is None):
            raise InputError(file, field, "give exactly one of source or content")
        src = r.path(f"{field}.source", wf.source) if wf.source is not None else None
        if src is not None:
            ws_sources.append((f"{field}.source", src))
        workspace.append(WorkspaceFile(path=wf.path, source=src, content=wf.content))
    for where, src in ws_sources:  # the held-out data never enters the workspace
        if held_out.is_relative_to(src) or src.is_relative_to(held_out):
            raise InputError(file, "scenario.held_out", f"the held-out data would be copied into the workspace "
                                                        f"(through {where})")

    # --- policies (scripts run as upstream runs a case's solutions, the task folder bound read-only)
    policies: dict[str, PolicySpec] = {
        "reference": PolicySpec(script=r.path("scenario.reference", sc.reference, "file"), root=folder)}
    if sc.literal is not None:
        policies["literal"] = PolicySpec(script=r.path("scenario.literal", sc.literal, "file"), root=folder)
    for group, kind in ((sc.shortcuts, "shortcut"), (sc.bypasses, "bypass"), (sc.alternates, "alternate"),
                        (sc.probes, "probe")):
        for name, rel in group.items():
            field = f"scenario.{kind}s.{name}" if kind != "bypass" else f"scenario.bypasses.{name}"
            if not _NAME.match(name):
                raise InputError(file, field, f"bad policy name {name!r} (letters, digits, _ . -)")
            policies[f"{kind}:{name}"] = PolicySpec(script=r.path(field, rel, "file"), root=folder)

    # --- services, truth
    services = []
    for i, svc in enumerate(sc.services):
        if not _NAME.match(svc.name):
            raise InputError(file, f"scenario.services[{i}].name", f"bad service name {svc.name!r}")
        services.append(ServiceSpec(name=svc.name,
                                    script=r.rel(r.path(f"scenario.services[{i}].script", svc.script, "file"))))
    truth = sc.truth or TruthFile()
    for i, fr in enumerate(truth.framing):
        for j, pat in enumerate(fr.any):  # run by RE2 on the hand-over (`assay.task.patterns`)
            check_pattern(file, f"scenario.truth.framing[{i}].any[{j}]", pat)

    # --- briefs: a value without spaces ending in .md or .txt is a file beside task.yaml, else the text
    briefs: dict[str, Brief] = {}
    for lv, val in tf.briefs.items():
        if lv not in LEVELS:
            raise InputError(file, f"briefs.{lv}", f"unknown level {lv!r} (expected L0..L3)")
        if _BRIEF_FILE.match(val.strip()):
            p = r.path(f"briefs.{lv}", val.strip(), "file")
            briefs[lv] = Brief(text=read_text(p), file=p, field=f"briefs.{lv}")
        else:
            briefs[lv] = Brief(text=val, file=file, field=f"briefs.{lv}")
        if not briefs[lv].text.strip():
            raise InputError(file, f"briefs.{lv}", "empty brief")
    for need in ("L0", "L3"):
        if need not in briefs:
            raise InputError(file, f"briefs.{need}", f"missing required level brief {need}")

    # --- variants
    if sc.variants is None:
        raw_variants = [VariantFile(name="base")]
    elif not sc.variants:
        raise InputError(file, "scenario.variants", "no variants (leave the field out for the one variant 'base')")
    else:
        raw_variants = sc.variants
    seen: set[str] = set()
    variants: list[Variant] = []
    for i, v in enumerate(raw_variants):
        where = f"scenario.variants[{i}]"
        if not _NAME.match(v.name):
            raise InputError(file, f"{where}.name", f"bad variant name {v.name!r} (letters, digits, _ . -)")
        if v.name in seen:
            raise InputError(file, f"{where}.name", f"duplicate variant {v.name!r}")
        seen.add(v.name)
        for key in ("kpi_baseline", "kpi_oracle"):
            val = getattr(v, key)
            if val is not None and not _number(val):
                raise InputError(file, f"{where}.{key}", "must be a number")
        variants.append(Variant(**v.model_dump()))

    npcs_text = read_text(npcs)
    if "{{" not in npcs_text:  # a parse error (or a file too deep) is reported with line and column
        loads_json(npcs_text, npcs, field="scenario.stakeholders")
    files = {"build": r.rel(build) if build else None, "grader": r.rel(grader), "npcs": r.rel(npcs),
             "pilot": r.rel(pilot) if pilot else None, "reference": r.rel(policies["reference"].script)}  # type: ignore[arg-type]
    engagement = Engagement(rules=sc.rules, llm=sc.llm, services=services,
                            budgets=sc.budgets.model_dump(exclude_none=True))
    return variant_tasks(
        scenario_id=scenario_name, fmt="native", case=folder, variants=variants, briefs=briefs, npcs=npcs,
        npcs_field="scenario.stakeholders", engagement=engagement,
        rules_extra=Brief(text=sc.rules_extra or "", file=file, field="scenario.rules_extra"),
        key_facts=list(truth.key_stakeholder_facts),
        framing=[FramingRule(id=fr.id, any=list(fr.any)) for fr in truth.framing], has_pilot=pilot is not None,
        files=files, held_out=r.rel(held_out), baseline=sc.baseline, language=tf.language, validate_file=file,
        task_fields=dict(
            title=tf.title or scenario_name, domain=tf.domain, subdomain=tf.subdomain, subset=tf.subset,
            source=tf.source or "native", origin=str(file), system_prompt=tf.system_prompt, workspace=workspace,
            tools=list(TOOL_NAMES), execution="multi-step-with-tools", budget=tf.budget, value=tf.value,
            threshold=tf.threshold, policies=dict(policies), requirements=tf.requirements or ["python3"],
            tags=tf.tags))
