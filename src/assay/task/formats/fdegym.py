"""Reader for FDE-Gym case folders (a folder holding `engagement.json`).

One case folder gives one Task per variant, with id `SCENARIO/VARIANT` (SCENARIO is the
folder name; a case without `variants.json` has the one variant `base`). What is read:

- `engagement.json`: `title`, `org`, `sector`, `rules` (v1/v2/v3), `rules_extra`, `llm`,
  `services`, the LLM budgets (`dev_llm_calls`, ...); unknown keys are kept, not refused
  (upstream cases carry free-form metadata there);
- `variants.json`: `{"variants": [{name, params, right_here?, kpi_baseline?, kpi_oracle?}]}`,
  a top-level list of those, or a mapping name -> params;
- `briefs/L0.md` .. `briefs/L3.md` (L0 and L3 required), `npcs.json` and `rules_extra`,
  with `{{name}}` placeholders filled from the variant's parameters (an unfilled one is
  refused, naming the file, the variant and the placeholder);
- `truth.json`: `key_stakeholder_facts`, `framing`;
- `solutions/`, `bypasses/`, `alternates/`, `probes/`: the policies (`reference` =
  `solutions/oracle.py`, `literal` = `solutions/literal.py`, `shortcut:NAME` = any other
  `solutions/NAME.py` but `do_nothing`, `bypass:NAME`, `alternate:NAME`, `probe:NAME`).

The variant's parameters stay in `Task.scenario["params"]`; they reach case code only
through the environment of processes outside the sandbox (`assay.scenario.session`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.task.formats.scenario import Brief, Variant, variant_tasks
from assay.task.formats.yamlio import load_json, read_text
from assay.task.model import LEVELS, TOOL_NAMES, Engagement, FramingRule, PolicySpec, ServiceSpec, Task
from assay.task.patterns import check_pattern
from assay.task.validation import real_task_path

__all__ = ["REQUIRED_FILES", "read_case"]

REQUIRED_FILES = ("engagement.json", "npcs.json", "build_world.py", "grader.py")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


def _check_kpi(path: Path, field: str, val: object) -> None:
    """A variant's KPI override: none, or a finite number (InputError naming the file and field)."""
    if val is None:
        return
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise InputError(path, field, "must be a number")
    if not math.isfinite(val):
        raise InputError(path, field, "not a finite number (NaN and infinities are refused)")


def _variants(folder: Path) -> list[Variant]:
    path = folder / "variants.json"
    if not path.is_file():
        return [Variant(name="base")]
    raw = load_json(path)
    if isinstance(raw, dict) and "variants" in raw:
        raw = raw["variants"]
    items: list[Any]
    if isinstance(raw, dict):
        items = [{"name": k, "params": v} for k, v in raw.items()]
    elif isinstance(raw, list):
        items = raw
    else:
        raise InputError(path, None, "expected {\"variants\": [...]}, a list of variants, or a mapping name -> params")
    out: list[Variant] = []
    seen: set[str] = set()
    for i, v in enumerate(items):
        where = f"variants[{i}]"
        if not isinstance(v, dict):
            raise InputError(path, where, "a variant must be an object with `name` and `params`")
        name = v.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(path, f"{where}.name", f"missing or bad variant name {name!r} (letters, digits, _ . -)")
        if name in seen:
            raise InputError(path, f"{where}.name", f"duplicate variant {name!r}")
        seen.add(name)
        params = v.get("params", {})
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InputError(path, f"{where}.params", "params must be an object")
        for key in ("kpi_baseline", "kpi_oracle"):
            _check_kpi(path, f"{where}.{key}", v.get(key))
        rh = v.get("right_here", False)
        if not isinstance(rh, bool):
            raise InputError(path, f"{where}.right_here", "must be true or false")
        out.append(Variant(name=name, params=params, right_here=rh, kpi_baseline=v.get("kpi_baseline"),
                           kpi_oracle=v.get("kpi_oracle")))
    if not out:
        raise InputError(path, "variants", "no variants")
    return out


def _engagement(folder: Path) -> dict[str, Any]:
    path = folder / "engagement.json"
    eng = load_json(path)
    if not isinstance(eng, dict):
        raise InputError(path, None, "engagement.json must be a JSON object")
    rules = eng.get("rules")
    if rules is not None and not isinstance(rules, str):
        raise InputError(path, "rules", "must be a string (v1, v2 or v3)")
    if eng.get("rules_extra") is not None and not isinstance(eng["rules_extra"], str | list):
        raise InputError(path, "rules_extra", "must be a string")
    services = eng.get("services") or []
    if not isinstance(services, list):
        raise InputError(path, "services", "must be a list of {name, script}")
    for i, s in enumerate(services):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not isinstance(s.get("script"), str):
            raise InputError(path, f"services[{i}]", "a service needs a `name` and a `script`")
        if not _NAME.match(s["name"]):
            raise InputError(path, f"services[{i}].name", f"bad service name {s['name']!r}")
        script = folder / s["script"]
        field = f"services[{i}].script"
        if not script.is_file() or not real_task_path(path, field, script).is_relative_to(folder.resolve()):
            raise InputError(path, field, f"no such script {s['script']!r} in the case folder")
    if not isinstance(eng.get("llm", False), bool):
        raise InputError(path, "llm", "must be true or false")
    for key in ("dev_llm_calls", "dev_llm_usd", "prod_llm_calls", "prod_llm_usd"):
        v = eng.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v < 0):
            raise InputError(path, key, "must be a non-negative number")
    return eng


def _truth(folder: Path) -> dict[str, Any]:
    path = folder / "truth.json"
    if not path.is_file():
        return {"key_stakeholder_facts": [], "framing": []}
    raw = load_json(path)
    if not isinstance(raw, dict):
        raise InputError(path, None, "truth.json must be a JSON object")
    facts = raw.get("key_stakeholder_facts", [])
    if not isinstance(facts, list) or not all(isinstance(f, str) for f in facts):
        raise InputError(path, "key_stakeholder_facts", "must be a list of fact ids")
    framing = raw.get("framing", [])
    if not isinstance(framing, list):
        raise InputError(path, "framing", "must be a list of {id, any: [regex]}")
    for i, fr in enumerate(framing):
        if not isinstance(fr, dict) or not isinstance(fr.get("any", []), list):
            raise InputError(path, f"framing[{i}]", "must be {id, any: [regex]}")
        for j, pat in enumerate(fr.get("any", [])):  # run by RE2 on the hand-over (`assay.task.patterns`)
            check_pattern(path, f"framing[{i}].any[{j}]", pat)
    return raw


def _policies(folder: Path) -> dict[str, PolicySpec]:
    pols: dict[str, PolicySpec] = {}

    def scripts(sub: str) -> list[Path]:
        d = folder / sub
        return sorted(p for p in d.glob("*.py") if p.is_file() and not p.name.startswith("_")) if d.is_dir() else []

    for p in scripts("solutions"):
        stem = p.stem
        if stem == "do_nothing":
            continue
        name = {"oracle": "reference", "literal": "literal"}.get(stem, f"shortcut:{stem}")
        pols[name] = PolicySpec(script=p, root=folder)
    for sub, kind in (("bypasses", "bypass"), ("alternates", "alternate"), ("probes", "probe")):
        for p in scripts(sub):
            pols[f"{kind}:{p.stem}"] = PolicySpec(script=p, root=folder)
    return pols


def read_case(folder: Path) -> list[Task]:
    """One Task per variant of the FDE-Gym case in `folder`."""
    folder = Path(folder).resolve()
    for need in REQUIRED_FILES:
        if not (folder / need).is_file():
            raise InputError(folder / need, None, f"missing: an FDE-Gym case needs {', '.join(REQUIRED_FILES)}")
    eng = _engagement(folder)
    truth = _truth(folder)
    variants = _variants(folder)
    policies = _policies(folder)
    brief_files = {lv: folder / "briefs" / f"{lv}.md" for lv in LEVELS if (folder / "briefs" / f"{lv}.md").is_file()}
    for need in ("L0", "L3"):
        if need not in brief_files:
            raise InputError(folder / "briefs" / f"{need}.md", None, f"missing required level brief {need}")
    briefs = {lv: Brief(text=read_text(p), file=p) for lv, p in brief_files.items()}
    npcs_path = folder / "npcs.json"
    if "{{" not in read_text(npcs_path):
        load_json(npcs_path)  # a plain parse error is reported with line and column
    rules_extra = eng.get("rules_extra") or ""
    if isinstance(rules_extra, list):
        rules_extra = "\n".join(str(x) for x in rules_extra)
    engagement = Engagement(
        rules=eng.get("rules") or "v1", llm=bool(eng.get("llm", False)),
        services=[ServiceSpec(name=s["name"], script=s["script"]) for s in (eng.get("services") or [])],
        budgets={k: eng[k] for k in ("dev_llm_calls", "dev_llm_usd", "prod_llm_calls", "prod_llm_usd") if k in eng})
    return variant_tasks(
        scenario_id=folder.name, fmt="fdegym", case=folder, variants=variants, briefs=briefs, npcs=npcs_path,
        npcs_field=None, engagement=engagement,
        rules_extra=Brief(text=rules_extra, file=folder / "engagement.json", field="rules_extra"),
        key_facts=list(truth.get("key_stakeholder_facts", [])),
        framing=[FramingRule(id=str(fr.get("id")), any=list(fr.get("any", []))) for fr in truth.get("framing", [])],
        has_pilot=(folder / "pilot.py").is_file(), validate_file=folder / "briefs",
        task_fields=dict(
            title=str(eng.get("title") or folder.name), domain=eng.get("sector"), subdomain=eng.get("org"),
            source="fdegym", origin=str(folder), tools=list(TOOL_NAMES), execution="multi-step-with-tools",
            policies=dict(policies), requirements=["python3", "sqlite3"],
            tags=[t for t in ("fdegym", eng.get("sector")) if isinstance(t, str)]))
