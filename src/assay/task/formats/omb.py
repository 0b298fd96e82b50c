"""OneMillion-Bench task files (humanlaya/OneMillion-Bench), read as they are published.

A `*.json` file holds one task object or a top-level array of them (upstream expands an
array into virtual files `<stem>_<idx>.json`). Fields, with the aliases upstream accepts:

- `prompt` (`Prompt`, `question`), `system_prompt` (`System_Prompt`), `tags` (the README's
  list, or the Hugging Face dataset card's object: its `topics` list are the tags, its
  `time_sensitivity` is kept as `metadata["time_sensitivity"]`), `language` (the dataset
  card's, optional), `case_id`, and the other id keys `uuid`, `UUID`, `caseId`, `id`;
- `rubrics` (`Rubrics`): `rubric_number`, `rubric_detail`, `rubric_weight` (a number; numeric
  strings such as "-5" are accepted), `rubricLabel` or the dataset card's `rubric_tag` (the full names "Factual Information",
  "Analytical Reasoning", "Instructions Following", "Structure and Formatting", their
  Chinese names, or FI/AR/IF/SF), and optional human `scores`
  (`{"response_1_human_score_1": 10}`: a non-zero score means the item was met).

Results upstream writes back into the file (`rubric_auto_score`, `judge_cot`,
`rubric_auto_vs_human`) are ignored. The stored answers (`model_response.model_response_<i>
.response_text`) are kept as `Task.responses["response_<i>"]` for `assay calibrate`, which
compares a judge's verdicts on them with the human `scores`; they never reach an agent and
do not enter the content hash.

Mapping: id = `case_id`, else the first of `uuid`/`UUID`/`caseId`/`id`, else the file stem
(`STEM_INDEX` for array elements, 0-based, as upstream's virtual file names). A row with a
`language` (the dataset card's rows, where the English and Chinese rows of a translated pair
share `case_id`) has the language in its id: `<case_id>-en`, `<case_id>-zh`. Rubric item
ids are the `rubric_number` (the judge's ITEM_ID), else the 1-based position. Language is the
row's `language` (en, english, zh, cn, chinese, ...; another value is refused), else "zh" when
the prompt holds CJK characters, else "en"; subset "cn" for zh, "global" for en.
Domain comes from the dataset folder (`healthcare_and_medicine` -> healthcare,
`economics_and_finance` -> finance, `industry`, `law`, `natural_science`), else `tags[0]`;
the subdomain is `tags[1]`.

Value-table keys (`metadata["value_keys"]`, then the task id and `metadata["file_stem"]`)
follow upstream's `economic_value/compute.py`: uuid, UUID, case_id, caseId, id, the
(virtual) file stem, then the stem's prefix before the first `_` or non-word character; a row
with a `language` tries its own `id` (the row's UUID) first, since its `case_id` is shared.

Errors name the field as in the file: `rubrics[3].rubric_weight` for a single object,
`[2].rubrics[3].rubric_weight` for the third element of an array (indices are 0-based).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from assay.errors import InputError
from assay.task.formats.yamlio import load_json
from assay.task.hashing import content_hash
from assay.task.model import Rubric, RubricItem, Task
from assay.task.validation import has_cjk, normalise_tag, validate_task

ID_KEYS = ("uuid", "UUID", "case_id", "caseId", "id")
DOMAIN_DIRS = {
    "healthcare_and_medicine": "healthcare",
    "economics_and_finance": "finance",
    "industry": "industry",
    "law": "law",
    "natural_science": "natural_science",
}
# tags[0] spellings seen in upstream examples ("Healthcare", ...) -> the same domain names.
DOMAIN_TAGS = {
    **DOMAIN_DIRS,
    "healthcare": "healthcare", "medicine": "healthcare", "health": "healthcare",
    "finance": "finance", "economics": "finance",
    "legal": "law", "science": "natural_science",
}
NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
YES = {"是", "yes", "y", "true", "命中"}
NO = {"否", "no", "n", "false"}
UNLABELLED = {"", "na", "n/a", "-"}
LABEL_KEYS = ("rubricLabel", "rubric_tag")  # the README's key, the dataset card's
LANGUAGES = {"en": "en", "english": "en", "en-us": "en", "zh": "zh", "cn": "zh", "chinese": "zh", "zh-cn": "zh",
             "zh-hans": "zh"}
_ITEM_FIELD = re.compile(r"^rubric\.items\[(\d+)\]\.(\w+)$")




def _weight(raw: Any, file: Path, field: str) -> float:
    if isinstance(raw, bool) or raw is None:
        raise InputError(file, field, f"weight {raw!r} is not a number")
    if isinstance(raw, (int, float)):
        w = float(raw)
    elif isinstance(raw, str) and NUMBER.fullmatch(raw.strip()):
        w = float(raw.strip())
    else:
        raise InputError(file, field, f"weight {raw!r} is not a number")
    if not math.isfinite(w):
        raise InputError(file, field, f"weight {raw!r} is not a finite number")
    return w


def _human_labels(raw: Any, file: Path, field: str) -> dict[str, bool]:
    """Upstream human scores: the item's weight when met, 0 when not."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(file, field, "scores must be an object of response_<i>_human_score_<k> -> score")
    out: dict[str, bool] = {}
    for key, v in raw.items():
        if v is None or (isinstance(v, str) and v.strip().lower() in UNLABELLED):
            continue  # not labelled
        if isinstance(v, bool):
            out[str(key)] = v
        elif isinstance(v, (int, float)):
            out[str(key)] = v != 0
        elif isinstance(v, str) and NUMBER.fullmatch(v.strip()):
            out[str(key)] = float(v.strip()) != 0
        elif isinstance(v, str) and v.strip().lower() in YES:
            out[str(key)] = True
        elif isinstance(v, str) and v.strip().lower() in NO:
            out[str(key)] = False
        else:
            raise InputError(file, f"{field}.{key}", f"human score {v!r} is not a number")
    return out


_RESPONSE_KEY = re.compile(r"^model_response_(\d+)$")


def _stored_responses(raw: Any, file: Path, field: str) -> dict[str, str]:
    """Upstream's `model_response.model_response_<i>.response_text`, as `{"response_<i>": text}`:
    the answers its human scores (`response_<i>_human_score_<k>`) were given to."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InputError(file, field, "model_response must be an object of model_response_<i> -> {response_text}")
    out: dict[str, str] = {}
    for key, entry in raw.items():
        m = _RESPONSE_KEY.match(str(key))
        if m is None:
            raise InputError(file, f"{field}.{key}", "a stored response's key must be model_response_<i>")
        if not isinstance(entry, dict) or not isinstance(entry.get("response_text"), str):
            raise InputError(file, f"{field}.{key}.response_text", "a stored response needs response_text (text)")
        out[f"response_{int(m.group(1))}"] = entry["response_text"]
    return out


def _first_text(rec: dict[str, Any], keys: tuple[str, ...], file: Path, prefix: str, what: str) -> str | None:
    """The first of `keys` holding non-blank text (upstream's aliases, in its order)."""
    for key in keys:
        v = rec.get(key)
        if v is None:
            continue
        if not isinstance(v, str):
            raise InputError(file, f"{prefix}{key}", f"{what} must be a string")
        if v.strip():
            return v
    return None


def _tags(raw: Any, file: Path, field: str) -> tuple[list[str], Any]:
    """The README's list of tags, or the dataset card's object (`topics` list, `time_sensitivity`
    object): the topic names, and the time sensitivity as it stands (None when absent)."""
    if raw is None:
        return [], None
    if isinstance(raw, dict):
        topics = raw.get("topics")
        if topics is not None and not isinstance(topics, list):
            raise InputError(file, f"{field}.topics", "topics must be a list")
        sens = raw.get("time_sensitivity")
        if sens is not None and not isinstance(sens, dict | str | bool | int | float):
            raise InputError(file, f"{field}.time_sensitivity", "time_sensitivity must be an object")
        return [str(t) for t in topics or [] if t is not None and str(t).strip()], sens
    if isinstance(raw, list):
        return [str(t) for t in raw if t is not None and str(t).strip()], None
    raise InputError(file, field, "tags must be a list, or an object with a topics list")


def _language(raw: Any, file: Path, field: str) -> str | None:
    """The dataset card's `language` as "en" or "zh" (None when the row has none)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    key = raw.strip().lower().replace("_", "-") if isinstance(raw, str) else None
    if key not in LANGUAGES:
        raise InputError(file, field, f"unknown language {raw!r} (one of: {', '.join(sorted(LANGUAGES))})")
    return LANGUAGES[key]


def _domain(path: Path, tags: list[str]) -> str | None:
    for parent in path.parents:
        if parent.name in DOMAIN_DIRS:
            return DOMAIN_DIRS[parent.name]
    if tags:
        key = re.sub(r"\s*&\s*", " and ", tags[0].strip().lower())
        key = re.sub(r"[\s/-]+", "_", key)
        return DOMAIN_TAGS.get(key, tags[0].strip() or None)
    return None


def _remap(e: InputError, prefix: str, rkey: str, label_keys: list[str]) -> InputError:
    """Name validate_task's fields as this file names them."""
    f = e.field or ""
    m = _ITEM_FIELD.match(f)
    field: str | None
    if f == "rubric.items":
        field = f"{prefix}{rkey}"
    elif m:
        j = int(m.group(1))
        label = label_keys[j] if j < len(label_keys) else LABEL_KEYS[0]
        sub = {"weight": "rubric_weight", "tag": label, "id": "rubric_number"}.get(m.group(2), m.group(2))
        field = f"{prefix}{rkey}[{m.group(1)}].{sub}"
    elif f:
        field = f"{prefix}{f}"
    else:
        field = prefix.rstrip(".") or None
    return InputError(e.file, field, e.reason, line=e.line, column=e.column)


def _read_record(path: Path, rec: Any, idx: int | None) -> Task:  # noqa: C901 (a reader checks each field of its format in the order the format lists them)
    prefix = "" if idx is None else f"[{idx}]."
    if not isinstance(rec, dict):
        raise InputError(path, f"[{idx}]" if idx is not None else None, "a OneMillion-Bench task must be a JSON object")

    rkey = "rubrics" if "rubrics" in rec else "Rubrics"
    if rkey not in rec:
        raise InputError(path, f"{prefix}rubrics", "missing rubrics")
    raw_rubrics = rec[rkey]
    if not isinstance(raw_rubrics, list):
        raise InputError(path, f"{prefix}{rkey}", "rubrics must be a list")

    # Upstream: `prompt`, else `Prompt`, else `question` (the first that is non-empty).
    prompt = _first_text(rec, ("prompt", "Prompt", "question"), path, prefix, "the prompt")
    system_prompt = _first_text(rec, ("system_prompt", "System_Prompt"), path, prefix, "the system prompt")

    tags, time_sensitivity = _tags(rec.get("tags"), path, f"{prefix}tags")
    language = _language(rec.get("language"), path, f"{prefix}language")

    items: list[RubricItem] = []
    label_keys: list[str] = []
    for j, r in enumerate(raw_rubrics):
        field = f"{prefix}{rkey}[{j}]"
        if not isinstance(r, dict):
            raise InputError(path, field, "a rubric must be an object")
        detail = r.get("rubric_detail")
        if detail is None:
            raise InputError(path, f"{field}.rubric_detail", "missing rubric_detail")
        if not isinstance(detail, str) or not detail.strip():
            raise InputError(path, f"{field}.rubric_detail", "rubric_detail must be non-empty text")
        if "rubric_weight" not in r:
            raise InputError(path, f"{field}.rubric_weight", "missing rubric_weight")
        weight = _weight(r["rubric_weight"], path, f"{field}.rubric_weight")
        lkey = next((k for k in LABEL_KEYS if r.get(k) is not None), LABEL_KEYS[0])
        label_keys.append(lkey)
        label = r.get(lkey)
        if label is None:
            raise InputError(path, f"{field}.{lkey}", "missing capability tag (FI, AR, IF, SF) in rubricLabel or rubric_tag")
        if not isinstance(label, str):
            raise InputError(path, f"{field}.{lkey}", f"unknown capability tag {label!r}")
        tag = normalise_tag(path, f"{field}.{lkey}", label)
        number = r.get("rubric_number")
        if isinstance(number, bool) or (number is not None and not isinstance(number, (int, str))):
            raise InputError(path, f"{field}.rubric_number", "rubric_number must be an integer or text")
        item_id = str(number).strip() if number is not None and str(number).strip() else str(j + 1)
        items.append(RubricItem(id=item_id, text=detail, weight=weight, tag=tag,
                                human_labels=_human_labels(r.get("scores"), path, f"{field}.scores")))

    present = {k: str(rec[k]) for k in ID_KEYS if rec.get(k) not in (None, "")}
    stem = path.stem if idx is None else f"{path.stem}_{idx}"
    task_id = present.get("case_id") or next(
        (present[k] for k in ("uuid", "UUID", "caseId", "id") if k in present), stem)
    value_keys = list(present.values())
    if language is not None:
        # A dataset-card row: the two rows of a translated pair share `case_id`, so the language
        # is part of the id, and the value table matches the row's own `id` (its UUID) first.
        task_id = f"{task_id}-{language}"
        if "id" in present:
            value_keys.remove(present["id"])
            value_keys.insert(0, present["id"])
    for extra in (stem, re.split(r"[\W_]+", stem, maxsplit=1)[0]):
        if extra and extra not in value_keys:
            value_keys.append(extra)

    zh = language == "zh" if language in ("en", "zh") else has_cjk(prompt or "")
    task = Task(
        id=task_id,
        title=" / ".join(tags),
        domain=_domain(path, tags),
        subdomain=tags[1] if len(tags) > 1 else None,
        subset="cn" if zh else "global",
        language=language or ("zh" if zh else "en"),
        source="omb",
        origin=str(path),
        prompt=prompt,
        system_prompt=system_prompt,
        tools=[],
        execution="single-step",
        rubric=Rubric(items=items),
        tags=tags,
        metadata={"value_keys": value_keys, "file_stem": stem, "tags": tags, "omb_index": idx,
                  **({"time_sensitivity": time_sensitivity} if time_sensitivity is not None else {})},
        responses=_stored_responses(rec.get("model_response"), path, f"{prefix}model_response"),
    )
    try:
        validate_task(task, path)
    except InputError as e:
        raise _remap(e, prefix, rkey, label_keys) from None
    task.content_hash = content_hash(task)
    return task


def read_omb(path: Path) -> list[Task]:
    """Read one OneMillion-Bench JSON file (one object or an array) into Tasks."""
    path = Path(path)
    data = load_json(path)
    if isinstance(data, list):
        return [_read_record(path, rec, i) for i, rec in enumerate(data)]
    return [_read_record(path, data, None)]
