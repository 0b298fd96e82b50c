"""OneMillion-Bench value tables (`economic_value.md`): `| UUID | Domain | CNY | USD | Subset |`.

Rows match a task by the keys upstream tries in order: uuid, UUID, case_id, caseId, id,
then the file stem. A table is picked up from the folder given to `assay run` or any parent.
"""

from __future__ import annotations

import re
from pathlib import Path

from assay.errors import InputError
from assay.task.formats.yamlio import read_text
from assay.task.model import MAX_VALUE_AMOUNT, Task, Value

TABLE_NAME = "economic_value.md"


def _num(cell: str) -> float | None:
    s = cell.strip().replace(",", "").replace("¥", "").replace("$", "").replace("￥", "")
    if s in ("", "-", "—", "N/A", "n/a"):
        return None
    try:
        return float(s)
    except ValueError:
        return None


def parse_value_table(path: Path) -> dict[str, Value]:
    text = read_text(path)
    header: list[str] | None = None
    out: dict[str, Value] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip().startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            for need in ("uuid", "cny", "usd"):
                if need not in header:
                    raise InputError(path, need, f"value table header lacks column {need.upper()}", line=n)
            continue
        if all(re.fullmatch(r":?-+:?", c) for c in cells if c):
            continue
        row = dict(zip(header, cells, strict=False))
        key = row.get("uuid", "").strip()
        if not key:
            continue
        cny, usd = _num(row.get("cny", "")), _num(row.get("usd", ""))
        if (cny is None) == (usd is None):
            raise InputError(path, "CNY/USD", f"row {key!r} must give exactly one of CNY or USD", line=n)
        amount, currency = (cny, "CNY") if cny is not None else (usd, "USD")
        if amount is not None and amount < 0:
            raise InputError(path, currency, f"row {key!r} has a negative amount", line=n)
        if amount is not None and not amount <= MAX_VALUE_AMOUNT:  # NaN and infinity too
            raise InputError(path, currency, f"row {key!r}: {amount:g} is more than the {MAX_VALUE_AMOUNT:g} a "
                                             "task's value may be (a report sums values)", line=n)
        out[key] = Value(amount=amount, currency=currency)
    if header is None:
        raise InputError(path, None, "no Markdown table found")
    return out


def task_keys(task: Task) -> list[str]:
    keys = [str(k) for k in task.metadata.get("value_keys", [])]
    keys.append(task.id)
    stem = task.metadata.get("file_stem")
    if stem:
        keys.append(str(stem))
    return keys


def apply_value_table(tasks: list[Task], path: Path) -> int:
    if not path.is_file():
        raise InputError(path, "--values", "no such file")
    table = parse_value_table(path)
    hits = 0
    for t in tasks:
        for k in task_keys(t):
            if k in table:
                t.value = table[k]
                hits += 1
                break
    return hits


def apply_found_value_tables(tasks: list[Task], paths: list[Path]) -> None:
    """Pick up economic_value.md from each given folder or any parent (nearest wins)."""
    omb = [t for t in tasks if t.source == "omb" and t.value is None]
    if not omb:
        return
    for raw in paths:
        p = Path(raw).resolve()
        folder = p if p.is_dir() else p.parent
        for d in [folder, *folder.parents]:
            table = d / TABLE_NAME
            if table.is_file():
                apply_value_table([t for t in omb if t.value is None], table)
                break
