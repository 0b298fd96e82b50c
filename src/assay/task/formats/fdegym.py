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

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.task.formats.yamlio import load_json, read_text
from assay.task.model import LEVELS, TOOL_NAMES, PolicySpec, Task
from assay.task.validation import validate_task

__all__ = ["REQUIRED_FILES", "read_case", "render"]

REQUIRED_FILES = ("engagement.json", "npcs.json", "build_world.py", "grader.py")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_HASH_SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache"}


def render(text: str, params: dict[str, Any], file: Path | str, variant: str, field: str | None = None) -> str:
    """Fill `{{name}}` from the variant's params; an unfilled placeholder is an InputError."""

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in params:
            raise InputError(file, field, f"variant {variant!r}: unfilled placeholder {{{{{name}}}}} "
                                          f"(no variant parameter {name!r})")
        v = params[name]
        return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)

    return PLACEHOLDER.sub(sub, text)


def _variants(folder: Path) -> list[dict[str, Any]]:
    path = folder / "variants.json"
    if not path.is_file():
        return [{"name": "base", "params": {}, "right_here": False, "kpi_baseline": None, "kpi_oracle": None}]
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
    out: list[dict[str, Any]] = []
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
            val = v.get(key)
            if val is not None and (isinstance(val, bool) or not isinstance(val, int | float)):
                raise InputError(path, f"{where}.{key}", "must be a number")
        rh = v.get("right_here", False)
        if not isinstance(rh, bool):
            raise InputError(path, f"{where}.right_here", "must be true or false")
        out.append({"name": name, "params": params, "right_here": rh,
                    "kpi_baseline": v.get("kpi_baseline"), "kpi_oracle": v.get("kpi_oracle")})
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
        if not script.is_file() or not script.resolve().is_relative_to(folder.resolve()):
            raise InputError(path, f"services[{i}].script", f"no such script {s['script']!r} in the case folder")
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
        for j, pat in enumerate(fr.get("any", [])):
            try:
                re.compile(pat)
            except (re.error, TypeError) as e:
                raise InputError(path, f"framing[{i}].any[{j}]", f"bad regex: {e}") from None
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


def _folder_digest(folder: Path) -> str:
    """Every file of the case folder (bytecode caches left out), by relative path and content."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _HASH_SKIP_DIRS)
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            fp = Path(root) / name
            h.update(f"file:{fp.relative_to(folder).as_posix()}\0".encode())
            with open(fp, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 16), b""):
                    h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def _content_hash(task: Task, folder_digest: str) -> str:
    """The task's normalised fields (host paths left out) plus the whole case folder."""
    data = task.model_dump(mode="json", exclude={"content_hash", "origin", "metadata", "policies"})
    data["scenario"] = {k: v for k, v in (data.get("scenario") or {}).items() if k != "case"}
    data["policies"] = sorted(task.policies)
    h = hashlib.sha256(json.dumps(data, sort_keys=True, ensure_ascii=False, default=str).encode())
    h.update(folder_digest.encode())
    return h.hexdigest()[:16]


def _has_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def read_case(folder: Path) -> list[Task]:
    """One Task per variant of the FDE-Gym case in `folder`."""
    from assay.env.stakeholders import load_npcs

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
    raw_briefs = {lv: read_text(p) for lv, p in brief_files.items()}
    npcs_path = folder / "npcs.json"
    npcs_text = read_text(npcs_path)
    if "{{" not in npcs_text:
        load_json(npcs_path)  # a plain parse error is reported with line and column
    rules_extra_raw = eng.get("rules_extra") or ""
    if isinstance(rules_extra_raw, list):
        rules_extra_raw = "\n".join(str(x) for x in rules_extra_raw)
    services = [{"name": s["name"], "script": s["script"]} for s in (eng.get("services") or [])]
    has_pilot = (folder / "pilot.py").is_file()
    digest = _folder_digest(folder)
    scenario_name = folder.name
    tasks: list[Task] = []
    for v in variants:
        name, params = v["name"], v["params"]
        briefs = {lv: render(text, params, brief_files[lv], name) for lv, text in raw_briefs.items()}
        rules_extra = render(rules_extra_raw, params, folder / "engagement.json", name, "rules_extra")
        try:
            spec = load_npcs(npcs_path, params)
        except ValueError as e:  # pydantic's ValidationError is a ValueError too
            msg = str(e).splitlines()
            reason = "; ".join(m.strip() for m in msg[:4])
            raise InputError(npcs_path, None, f"variant {name!r}: {reason}") from None
        except json.JSONDecodeError as e:
            raise InputError(npcs_path, None, f"does not parse as JSON: {e.msg}", line=e.lineno,
                             column=e.colno) from None
        language = "zh" if (_has_cjk(briefs["L3"]) or (spec.clock and (spec.clock.lang or "").startswith("zh"))) \
            else "en"
        scenario = {
            "format": "fdegym",
            "case": str(folder),
            "variant": name,
            "params": params,
            "right_here": v["right_here"],
            "kpi_baseline": v["kpi_baseline"],
            "kpi_oracle": v["kpi_oracle"],
            "engagement": {
                "rules": eng.get("rules") or "v1",
                "rules_extra": rules_extra,
                "llm": bool(eng.get("llm", False)),
                "services": services,
                "budgets": {k: eng[k] for k in ("dev_llm_calls", "dev_llm_usd", "prod_llm_calls", "prod_llm_usd")
                            if k in eng},
            },
            "key_facts": list(truth.get("key_stakeholder_facts", [])),
            "framing": list(truth.get("framing", [])),
            "has_pilot": has_pilot,
            "services": [s["name"] for s in services],
            "matcher": spec.matcher,
        }
        title = str(eng.get("title") or scenario_name)
        task = Task(
            id=f"{scenario_name}/{name}", title=title, domain=eng.get("sector"), subdomain=eng.get("org"),
            language=language, source="fdegym", origin=str(folder), briefs=briefs,
            tools=list(TOOL_NAMES), execution="multi-step-with-tools", scenario=scenario,
            policies=dict(policies), requirements=["python3", "sqlite3"],
            tags=[t for t in ("fdegym", eng.get("sector")) if isinstance(t, str)],
            metadata={"hash_paths": [str(folder)], "variant": name, "scenario": scenario_name},
        )
        validate_task(task, folder / "briefs")
        task.content_hash = _content_hash(task, digest)
        tasks.append(task)
    return tasks
