"""DareBench tasks: one Markdown file with YAML front matter (SeerRay-Lab/DareBench `tasks/*.md`).

Front matter: `id, name, category, level, grading_type (automated | llm_judge | hybrid),
timeout_seconds, environment {type, requirements}, workspace_files, grading_weights
{automated, llm_judge}` and optionally `modality` / `execution` (assay's own override of
the workload cell). Body sections, split on `## ` headings (a `## ` line inside a fenced
block does not split): `Prompt`, `Expected Behavior`, `Grading Criteria` (`- [ ] name:
text` checklist), `Automated Checks` (one fenced python block defining
`grade(transcript, workspace_path) -> dict[str, float]`), `LLM Judge Rubric`, `Additional
Notes`.

How the upstream fields map onto a Task:

- `id` (else the file stem), `title` = `name`, `domain` = `category`, `source` = "darebench";
  `metadata` keeps `category`, `level` (DareBench's own level is metadata only, SPEC),
  `grading_type`, `source_benchmark` and the additional notes.
- `budget.minutes` = `timeout_seconds` / 60 (upstream's default of 120 s when absent).
- `requirements` = `environment.requirements`, names kept as given (`web_search`, ...);
  such tasks load fine and the planner skips them with a reason where the machine cannot
  provide them. A task requiring `web_search` has `search: live`: it runs with any search
  backend (`--search native|local|brave`) and is skipped, with the reason, without one.
- local search corpus (assay's own addition; upstream searches the live web): the folder
  `corpus/<task id>/` in the nearest `corpus/` folder beside the task file's folder or in a
  parent, found as `assets/` is; under `--search local` the task then offers `web_search`
  over it (`assay.agent.search`).
- tools: all five (DareBench runs every task through an agent with tools).
- workload cell: the source benchmark is read from the id `task_<source>_<NN>` and mapped
  with the paper's table 1 (`CELL_MAP_TABLE1`); `ASSAY_DAREBENCH_CELLS=table9` selects the
  table-9 mapping, which swaps charxiv and hle. Front-matter `modality` / `execution`
  override it. An unknown source gives multimodal when the task ships images, else text,
  and multi-step-with-tools.
- grading: `automated` -> "automated", `llm_judge` -> "judge", `hybrid` -> "hybrid" with
  `grading_weights` (default 0.5 / 0.5). A hybrid task with `llm_judge: 0.0` is graded by
  its checks alone (type "automated": same score, and no judge is needed to run it); with
  `automated: 0.0` by the judge alone; both 0 -> automated (as contract grading does).
  The judge rubric is the `LLM Judge Rubric` section, else the criteria list (upstream).
- artifact contract: DareBench has none as a field; the prompt names the output file. Every
  file the prompt asks to write (a backticked `name.ext` on a line with a write/save verb,
  or "write ... to name.ext"), other than an input file of the workspace, becomes
  `Predicate(path, "exists", required=False)`: not required, because upstream checks may
  fall back to the last assistant message (task_finqa_00) when the file is missing, so a
  missing file must not force the score to 0. The predicate is still reported.
- images: for multimodal tasks, image files of the workspace (png, jpg, jpeg, gif, webp)
  that the prompt names are also given to the model as images.
- `workspace_files[].source` resolves against the nearest `assets/` folder beside the task
  file's folder or in any parent (SPEC "Finding tasks"); a missing source is refused, and
  so is a `dest` / `path` that leaves the workspace.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path, PurePosixPath
from typing import Any, cast

from assay.config import settings
from assay.errors import InputError
from assay.task.formats.yamlio import load_yaml_text, read_text
from assay.task.hashing import content_hash
from assay.task.model import (
    EXECUTIONS,
    MODALITIES,
    TOOL_NAMES,
    Budget,
    Execution,
    GradingSpec,
    GradingType,
    Modality,
    Predicate,
    Task,
    WorkspaceFile,
)
from assay.task.validation import check_relative_path, has_cjk, task_path, validate_task

__all__ = ["CELL_MAP_TABLE1", "CELL_MAP_TABLE9", "cell_for", "cell_map", "read_darebench",
           "source_benchmark"]

_T, _MM = "text", "multimodal"
_SS, _MS, _MT = "single-step", "multi-step", "multi-step-with-tools"

CELL_MAP_TABLE1: dict[str, tuple[str, str]] = {
    "logiqa": (_T, _SS), "gpqa": (_T, _SS),
    "advancedif": (_T, _MS), "bamboogle": (_T, _MS), "simpleqa": (_T, _MS), "longbench": (_T, _MS),
    "lexeval": (_T, _MS), "tablebench": (_T, _MS), "finqa": (_T, _MS),
    "deepsearchqa": (_T, _MT), "widesearch": (_T, _MT), "seal0": (_T, _MT), "terminalbench2": (_T, _MT),
    "openagentsafety": (_T, _MT), "osworld": (_T, _MT),
    "simplevqa": (_MM, _SS), "charxiv": (_MM, _SS),
    "medxpertqa": (_MM, _MS), "hle": (_MM, _MS),
    "agentvista": (_MM, _MT), "mmsearch": (_MM, _MT), "mmsearchplus": (_MM, _MT),
}
"""Source benchmark -> (modality, execution), as in the paper's table 1 (tools/group_report.py)."""

CELL_MAP_TABLE9: dict[str, tuple[str, str]] = {**CELL_MAP_TABLE1, "charxiv": (_MM, _MS), "hle": (_MM, _SS)}
"""The table-9 grouping: charxiv and hle swapped."""


GRADING_TYPES: dict[str, GradingType] = {"automated": "automated", "llm_judge": "judge", "hybrid": "hybrid"}
IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".gif", ".webp"}
KNOWN_SECTIONS = ("Prompt", "Expected Behavior", "Grading Criteria", "Automated Checks", "LLM Judge Rubric",
                  "Additional Notes")

_ID = re.compile(r"^task_(?P<source>[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*?)_(?P<n>\d+)$")
_HEADING = re.compile(r"^##\s+(\S.*)$")  # its closing #s and spaces are cut after (`_title`): linear
_FENCE_OPEN = re.compile(r"^\s{0,3}(`{3,}|~{3,})(.*)$")
_CHECKBOX = re.compile(r"^\s*[-*]\s+\[[ xX]\]\s+(.+?)\s*$")
_PY_OPEN = re.compile(r"^(`{3,}|~{3,})[^\S\n]*(?:python|py|python3)[^\S\n]*$")
_FILE = r"(?:\./)?[A-Za-z0-9_][\w.\-/]*\.[A-Za-z][A-Za-z0-9]{0,7}"
_BACKTICK_FILE = re.compile(rf"`({_FILE})`")
_WRITE_VERB = re.compile(r"\b(write|writes|writing|save|saves|saving|store|output|put|record|create)\b", re.I)
_WRITE_TO = re.compile(rf"\b(?:write|save|store|output|put|record)\b[^.\n]{{0,300}}?\b(?:to|in|into|as)\s+"
                       rf"['\"*]*({_FILE})(?![\w/])", re.I)


def cell_map() -> dict[str, tuple[str, str]]:
    """The mapping $ASSAY_DAREBENCH_CELLS selects ("table1", the default, or "table9")."""
    cells = settings().darebench_cells
    if cells in ("table1", "1", ""):
        return CELL_MAP_TABLE1
    if cells in ("table9", "9"):
        return CELL_MAP_TABLE9
    raise InputError(None, "ASSAY_DAREBENCH_CELLS", f"unknown cell mapping {cells!r} (table1 or table9)")


def source_benchmark(task_id: str) -> str | None:
    """`task_finqa_00` -> "finqa"; None when the id does not follow `task_<source>_<NN>`."""
    m = _ID.match(task_id)
    return m.group("source").lower() if m else None


def cell_for(source: str | None) -> tuple[str, str] | None:
    if source is None:
        return None
    table = cell_map()
    return table.get(source) or table.get(source.replace("_", "").replace("-", ""))


# --------------------------------------------------------------------------- parsing helpers


def _split_front_matter(text: str, file: Path) -> tuple[str, str, int]:
    """(front matter text, body, 1-based line number of the body's first line)."""
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if not lines or lines[0].strip() != "---":
        raise InputError(file, None, "does not start with YAML front matter ('---')")
    for i in range(1, len(lines)):
        if lines[i].strip() in ("---", "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1:]), i + 2
    raise InputError(file, None, "YAML front matter is not closed with '---'", line=1, column=1)


def _sections(body: str, first_line: int) -> dict[str, tuple[str, int]]:
    """Section title -> (text, 1-based file line of the text's first line)."""
    out: dict[str, tuple[str, int]] = {}
    current: str | None = None
    buf: list[str] = []
    start = first_line
    fence: str | None = None
    for i, line in enumerate(body.split("\n")):
        m = _FENCE_OPEN.match(line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)) \
                and set(line.strip()) <= {fence[0]}:
            fence = None
        elif fence is None:
            h = _HEADING.match(line)
            if h and not line.startswith("###"):
                if current is not None and current not in out:
                    out[current] = ("\n".join(buf), start)
                current = _title(h.group(1))
                buf = []
                start = first_line + i + 1
                continue
        if current is not None:
            buf.append(line)
    if current is not None and current not in out:
        out[current] = ("\n".join(buf), start)
    return out


def _section(secs: dict[str, tuple[str, int]], name: str) -> tuple[str, int] | None:
    for title, val in secs.items():
        if title.lower() == name.lower():
            return val
    return None


def _unfence(text: str) -> str:
    """Strip one surrounding ```/~~~ fence when the whole section is that one fenced block."""
    s = text.strip()
    lines = s.split("\n")
    if len(lines) < 2:
        return s
    m = _FENCE_OPEN.match(lines[0])
    if not m or m.group(1)[0] == "`" and "`" in m.group(2):
        return s
    fence = m.group(1)
    last = lines[-1].strip()
    if not (last.startswith(fence) and set(last) <= {fence[0]}):
        return s
    inner = lines[1:-1]
    if any(ln.strip().startswith(fence) and set(ln.strip()) <= {fence[0]} for ln in inner):
        return s  # more than one block
    return "\n".join(inner).strip("\n")


def _number(file: Path, field: str, v: Any, *, allow_none: bool = True) -> float | None:
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(file, field, f"{v!r} is not a number")
    if v != v:
        raise InputError(file, field, "is not a number (NaN)")
    return float(v)


def _str(file: Path, field: str, v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, (str, int, float)) and not isinstance(v, bool):
        return str(v)
    raise InputError(file, field, f"expected text, got {type(v).__name__}")


def _assets_dir(file: Path, field: str) -> Path | None:
    """The nearest `assets/` folder beside the task file's folder or above it; one that is a
    symlink is refused (it could make the harness copy any host folder into the workspace)."""
    folder = file.resolve().parent
    for d in (folder, *folder.parents):
        assets = d / "assets"
        if assets.is_symlink():
            raise InputError(file, field, f"{assets} is a symlink: assets must be real files inside the suite "
                                          "(a link could lead outside it)")
        if assets.is_dir():
            return assets
    return None


def _title(text: str) -> str:
    """A heading's text without its closing `#`s and the spaces around them."""
    return text.rstrip().rstrip("#").rstrip() or text.strip()


def _python_block(text: str) -> tuple[str, int] | None:
    """The first fenced python block of `text` that is closed (its code, and the offset where
    the code starts), found in one pass over the lines: a regular expression searching from
    each of 10,000 unclosed fences to the end of the text took quadratic time."""
    lines = text.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    closes: dict[str, list[int]] = {}
    for i, line in enumerate(lines):
        stripped = line.rstrip()
        if len(stripped) >= 3 and (set(stripped) <= {"`"} or set(stripped) <= {"~"}):
            closes.setdefault(stripped, []).append(i)
    for i, line in enumerate(lines):
        m = _PY_OPEN.match(line)
        if m is None:
            continue
        ends = closes.get(m.group(1), [])
        at = bisect.bisect_right(ends, i)
        if at == len(ends):
            continue
        first = i + 1
        while first < ends[at] and not lines[first].strip():
            first += 1  # blank lines after the opening fence are not code
        code = "\n".join(lines[first:ends[at]])
        return code, offsets[first] if first < len(lines) else len(text)
    return None


def _corpus_dir(file: Path, task_id: str) -> Path | None:
    """`corpus/<task id>/` in the nearest `corpus/` folder (as `_assets_dir` finds `assets/`)."""
    folder = file.resolve().parent
    for d in (folder, *folder.parents):
        corpus = d / "corpus"
        if corpus.is_symlink():
            raise InputError(file, "corpus", f"{corpus} is a symlink: a corpus must be real files inside the suite")
        if corpus.is_dir():
            mine = corpus / task_id
            if mine.is_symlink():
                raise InputError(file, "corpus", f"{mine} is a symlink: a corpus must be real files inside the suite")
            return mine if mine.is_dir() else None
    return None


def _workspace(file: Path, raw: Any) -> list[WorkspaceFile]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError(file, "workspace_files", "must be a list")
    out: list[WorkspaceFile] = []
    assets: Path | None = None
    for i, entry in enumerate(raw):
        field = f"workspace_files[{i}]"
        if not isinstance(entry, dict):
            raise InputError(file, field, "each entry must be a mapping ({source, dest} or {path, content})")
        unknown = set(entry) - {"source", "dest", "path", "content"}
        if unknown:
            raise InputError(file, f"{field}.{sorted(unknown)[0]}", "unknown field")
        source = _str(file, f"{field}.source", entry.get("source"))
        content = entry.get("content")
        if (source is None) == (content is None):
            raise InputError(file, field, "give exactly one of source or content")
        dest_key = "dest" if entry.get("dest") is not None else "path"
        dest = _str(file, f"{field}.{dest_key}", entry.get(dest_key))
        if dest is None:
            if source is None:
                raise InputError(file, f"{field}.path", "a {path, content} entry needs path")
            dest = PurePosixPath(source.replace("\\", "/")).name
        check_relative_path(file, f"{field}.{dest_key}", dest)
        if source is not None:
            check_relative_path(file, f"{field}.source", source)
            if assets is None:
                assets = _assets_dir(file, f"{field}.source")
                if assets is None:
                    raise InputError(file, f"{field}.source",
                                     f"{source!r}: no assets/ folder beside or above {file.parent}")
            src = task_path(assets, file, f"{field}.source", source, where=f"under {assets}")
            out.append(WorkspaceFile(path=dest, source=src))
        else:
            if not isinstance(content, str):
                if isinstance(content, (int, float)) and not isinstance(content, bool):
                    content = str(content)
                else:
                    raise InputError(file, f"{field}.content", "content must be text")
            out.append(WorkspaceFile(path=dest, content=content))
    return out


def _mentions(prompt: str, name: str) -> bool:
    return re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w/-])", prompt) is not None


def infer_outputs(prompt: str, inputs: set[str]) -> list[str]:
    """Files the prompt asks the agent to write, in order of first mention."""
    found: list[str] = []

    def add(name: str) -> None:
        name = name.strip().strip("*'\"").rstrip(".,;:)")
        norm = PurePosixPath(name).as_posix()
        if norm in inputs or norm in found or "://" in name:
            return
        try:
            check_relative_path("<prompt>", "prompt", norm)
        except InputError:
            return
        found.append(norm)

    for line in prompt.split("\n"):
        if _WRITE_VERB.search(line):
            for m in _BACKTICK_FILE.finditer(line):
                add(m.group(1))
        for m in _WRITE_TO.finditer(line):
            add(m.group(1))
    return found


# --------------------------------------------------------------------------- the reader


def read_darebench(path: Path) -> list[Task]:  # noqa: C901 (a reader checks each field of its format in the order the format lists them)
    """Read one DareBench task file (refusing bad input with InputError naming file and field)."""
    file = Path(path)
    text = read_text(file)
    front_text, body, body_line = _split_front_matter(text, file)
    try:
        fm = load_yaml_text(front_text, file)
    except InputError as e:
        if e.line is not None:
            e.line += 1  # the front matter starts on the file's second line
        e.field = e.field or "front matter"
        e.args = (e.message,)
        raise
    if not isinstance(fm, dict):
        raise InputError(file, None, "the front matter must be a mapping of fields", line=2, column=1)

    task_id = _str(file, "id", fm.get("id")) or file.stem
    if "/" in task_id or "\\" in task_id or task_id in (".", "..") or "\x00" in task_id:
        raise InputError(file, "id", f"{task_id[:80]!r} is not a task id: an id is a name, not a path "
                                     "(it names the task's corpus folder)")
    grading_type = fm.get("grading_type")
    if not isinstance(grading_type, str) or grading_type not in GRADING_TYPES:
        raise InputError(file, "grading_type",
                         f"unknown grading type {grading_type!r} (automated, llm_judge or hybrid)")
    timeout = _number(file, "timeout_seconds", fm.get("timeout_seconds", 120))
    if timeout is not None and timeout < 0:
        raise InputError(file, "timeout_seconds", f"negative time budget ({timeout:g})")

    env = fm.get("environment") or {}
    if not isinstance(env, dict):
        raise InputError(file, "environment", "must be a mapping {type, requirements}")
    reqs_raw = env.get("requirements") or []
    if not isinstance(reqs_raw, list):
        raise InputError(file, "environment.requirements", "must be a list")
    requirements = []
    for i, r in enumerate(reqs_raw):
        if not isinstance(r, str) or not r.strip():
            raise InputError(file, f"environment.requirements[{i}]", f"{r!r} is not a requirement name")
        requirements.append(r.strip())

    weights = fm.get("grading_weights") or {}
    if not isinstance(weights, dict):
        raise InputError(file, "grading_weights", "must be a mapping {automated, llm_judge}")
    for k in weights:
        if k not in ("automated", "llm_judge"):
            raise InputError(file, f"grading_weights.{k}", "unknown field (automated or llm_judge)")
    default_auto, default_judge = {"automated": (1.0, 0.0), "llm_judge": (0.0, 1.0),
                                   "hybrid": (0.5, 0.5)}[grading_type]
    w_auto = _number(file, "grading_weights.automated", weights.get("automated"))
    w_judge = _number(file, "grading_weights.llm_judge", weights.get("llm_judge"))
    w_auto = default_auto if w_auto is None else w_auto
    w_judge = default_judge if w_judge is None else w_judge
    for name, w in (("automated", w_auto), ("llm_judge", w_judge)):
        if w < 0:
            raise InputError(file, f"grading_weights.{name}", f"negative weight {w:g}")

    secs = _sections(body, body_line)
    prompt_sec = _section(secs, "Prompt")
    if prompt_sec is None or not _unfence(prompt_sec[0]).strip():
        raise InputError(file, "## Prompt", "missing brief/prompt (no '## Prompt' section)")
    prompt = _unfence(prompt_sec[0])
    expected = _section(secs, "Expected Behavior")
    criteria_sec = _section(secs, "Grading Criteria")
    criteria = [m.group(1) for ln in (criteria_sec[0] if criteria_sec else "").split("\n")
                if (m := _CHECKBOX.match(ln))]
    checks_sec = _section(secs, "Automated Checks")
    checks_code: str | None = None
    if checks_sec is not None:
        block = _python_block(checks_sec[0])
        if block is not None:
            checks_code, code_at = block
            code_line = checks_sec[1] + checks_sec[0][:code_at].count("\n")
            try:
                compile(checks_code, f"{file}:Automated Checks", "exec")
            except SyntaxError as e:
                raise InputError(file, "## Automated Checks", f"python does not parse: {e.msg}",
                                 line=code_line + (e.lineno or 1) - 1, column=e.offset) from None
            except ValueError as e:  # NUL bytes in the source
                raise InputError(file, "## Automated Checks", f"python cannot be compiled: {str(e)[:200]}",
                                 line=code_line) from None
            except (MemoryError, RecursionError, OverflowError):  # what no compiler takes
                raise InputError(file, "## Automated Checks", "python cannot be compiled: it is nested or "
                                                             "long past what the compiler takes", line=code_line) from None
            if not re.search(r"^def\s+grade\s*\(", checks_code, re.MULTILINE):
                raise InputError(file, "## Automated Checks", "the python block defines no grade() function",
                                 line=code_line)
    rubric_sec = _section(secs, "LLM Judge Rubric")
    judge_rubric = rubric_sec[0].strip() if rubric_sec and rubric_sec[0].strip() else None
    if judge_rubric is None and criteria:
        judge_rubric = "\n".join(f"- {c}" for c in criteria)  # upstream's fallback
    notes = _section(secs, "Additional Notes")

    gtype = GRADING_TYPES[grading_type]
    if gtype == "hybrid":
        if w_judge == 0:
            gtype = "automated"
        elif w_auto == 0:
            gtype = "judge"
    if gtype in ("automated", "hybrid") and checks_code is None:
        raise InputError(file, "## Automated Checks",
                         f"grading_type {grading_type!r} needs an Automated Checks section with a python block")
    if gtype in ("judge", "hybrid") and judge_rubric is None:
        raise InputError(file, "## LLM Judge Rubric",
                         f"grading_type {grading_type!r} needs an LLM Judge Rubric (or grading criteria)")
    grading = GradingSpec(type=gtype, weight_automated=w_auto, weight_judge=w_judge,
                          checks_code=checks_code, checks_style="darebench", judge_rubric=judge_rubric,
                          expected_behavior=expected[0].strip() if expected else None, criteria=criteria)

    workspace = _workspace(file, fm.get("workspace_files"))
    source = source_benchmark(task_id)
    has_images = any(wf.source is not None and Path(wf.path).suffix.lower() in IMAGE_EXTS for wf in workspace)
    modality, execution = cell_for(source) or (_MM if has_images else _T, _MT)
    if fm.get("modality") is not None:
        modality = fm["modality"]
        if modality not in MODALITIES:
            raise InputError(file, "modality", f"unknown modality {modality!r} ({', '.join(MODALITIES)})")
    if fm.get("execution") is not None:
        execution = fm["execution"]
        if execution not in EXECUTIONS:
            raise InputError(file, "execution", f"unknown execution form {execution!r} ({', '.join(EXECUTIONS)})")

    images: list[Path] = []
    if modality == _MM:
        for wf in workspace:
            if wf.source is not None and wf.source.is_file() and Path(wf.path).suffix.lower() in IMAGE_EXTS \
                    and _mentions(prompt, wf.path):
                images.append(wf.source)

    inputs = {PurePosixPath(wf.path).as_posix() for wf in workspace}
    contract = [Predicate(path=p, predicate="exists", required=False) for p in infer_outputs(prompt, inputs)]

    level = fm.get("level")
    metadata: dict[str, Any] = {
        "category": _str(file, "category", fm.get("category")),
        "level": _str(file, "level", level),
        "grading_type": grading_type,
        "source_benchmark": source,
    }
    if notes is not None and notes[0].strip():
        metadata["notes"] = notes[0].strip()
    if env.get("type") is not None:
        metadata["environment_type"] = _str(file, "environment.type", env.get("type"))

    task = Task(
        id=task_id, title=_str(file, "name", fm.get("name")) or task_id,
        domain=metadata["category"], language="zh" if has_cjk(prompt) else "en", source="darebench", origin=str(file), prompt=prompt,
        images=images, workspace=workspace, tools=list(TOOL_NAMES),
        search="live" if "web_search" in requirements else "none", corpus=_corpus_dir(file, task_id),
        contract=contract, grading=grading,
        budget=Budget(minutes=None if timeout is None else timeout / 60),
        modality=cast(Modality, modality), execution=cast(Execution, execution), requirements=requirements,
        metadata=metadata,
    )
    validate_task(task, file)
    task.content_hash = content_hash(task)
    return [task]
