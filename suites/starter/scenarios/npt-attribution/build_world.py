"""Build the workspace for the NPT-attribution scenario.

Static files come from world/ (system/, docs/, staff.md); the history in data/ is generated
deterministically from the variant parameters (read from the environment only). No parameter
or truth value is written into the workspace.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
from pathlib import Path

CASE = Path(__file__).resolve().parent


def _gen():
    spec = importlib.util.spec_from_file_location("npt_attr_gen", CASE / "gen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r[k] for k in fields})


def build(ws) -> None:
    ws = Path(ws)
    params = json.loads(os.environ.get("FDEGYM_VARIANT_PARAMS", "{}"))
    os.environ.get("FDEGYM_VARIANT", "base")  # the variant name is not needed to build
    gen = _gen()
    ws.mkdir(parents=True, exist_ok=True)
    for name in ("system", "docs"):
        dst = ws / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(CASE / "world" / name, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy2(CASE / "world" / "staff.md", ws / "staff.md")
    data = ws / "data"
    data.mkdir(exist_ok=True)
    lines = gen.generate(gen.HISTORY, params)
    _write_csv(data / "ddr_npt_2024H1.csv", lines, gen.PUBLIC)
    claims = gen.claims_history(lines, params)
    _write_csv(data / "claims_2024H1.csv", claims,
               ["claim_id", "month", "rig_id", "event_ref", "code", "hours_claimed", "amount_usd",
                "status", "accepted_usd", "contractor_remark"])
    (data / "README.md").write_text(
        "# Data\n\n"
        "- `ddr_npt_2024H1.csv` - DDR NPT export, all rigs, 1 Jan - 30 Jun 2024 (columns: see\n"
        "  docs/ddr_field_dictionary.md).\n"
        "- `claims_2024H1.csv` - claims register H1 2024: one claim line per NPT event filed with\n"
        "  Ferrovia, with Ferrovia's response (status, accepted_usd, contractor_remark).\n\n"
        "The July-December 2024 reports have not been claimed yet; production runs them through\n"
        "`system/attribution.py` once the tool is signed off.\n",
        encoding="utf-8")
    (ws / "deliverables").mkdir(exist_ok=True)
