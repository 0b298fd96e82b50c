"""Helpers for the case's own policy scripts (solutions/, probes/). Not part of the workspace.

install(ws, ...) turns the shipped system into a rule-driven one:
  - config/contract.json gains `amendments` (dated code changes) and `rig_overrides`
    (per-rig codes that are Company NPT), and optionally moves WOW to the contractor list;
  - contract.classify honours them;
  - attribution can take a line's hours from its clock times (end - start) instead of the
    DDR hours column, scale claims per code, or hand everything to humans (claim nothing).
"""

from __future__ import annotations

import json
from pathlib import Path

CLASSIFY_NEW = '''def classify(code: str, rig_id: str, day: date, contract: dict) -> str:
    """Who carries the NPT: 'contractor' (back-chargeable), 'operator', or 'excluded'
    (force majeure, clause 14.3: never back-charged). Honours dated amendments to Schedule B
    and per-rig agreements (novated rigs)."""
    codes = set(contract["contractor_codes"])
    excluded = set(contract["excluded_codes"])
    for am in contract.get("amendments", []):
        if day >= date.fromisoformat(am["effective"]):
            codes |= set(am.get("add_codes", []))
            codes -= set(am.get("remove_codes", []))
    override = contract.get("rig_overrides", {}).get(rig_id)
    if override:
        codes -= set(override.get("company_codes", []))
    if code in excluded:
        return "excluded"
    if code in codes:
        return "contractor"
    return "operator"
'''


def _replace_classify(path: Path) -> None:
    src = path.read_text()
    i = src.index("def classify(")
    path.write_text(src[:i] + CLASSIFY_NEW)


def install(ws, *, amendments=None, rig_overrides=None, wow_contractor=False, hours_from_clock=False,
            claim_factor=None, escalate_all=False) -> None:
    system = Path(ws) / "system"
    cfg_path = system / "config" / "contract.json"
    cfg = json.loads(cfg_path.read_text())
    if amendments:
        cfg["amendments"] = amendments
    if rig_overrides:
        cfg["rig_overrides"] = rig_overrides
    if wow_contractor:
        cfg["excluded_codes"] = [c for c in cfg["excluded_codes"] if c != "WOW"]
        if "WOW" not in cfg["contractor_codes"]:
            cfg["contractor_codes"].append("WOW")
    if hours_from_clock:
        cfg["hours_source"] = "clock"
    if claim_factor:
        cfg["claim_factor"] = claim_factor
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    _replace_classify(system / "contract.py")

    att = system / "attribution.py"
    src = att.read_text()
    old = '        hours = r["hours"]\n'
    assert old in src
    new = ('        hours = r["hours"]\n'
           '        if contract.get("hours_source") == "clock":\n'
           '            hours = round(max(0, r["end_min"] - r["start_min"]) / 60.0, 4)\n')
    src = src.replace(old, new)
    old2 = '            claim = round(hours * float(rig["day_rate_usd"]) / 24.0, 2)\n'
    assert old2 in src
    new2 = ('            claim = round(hours * float(rig["day_rate_usd"]) / 24.0\n'
            '                          * float(contract.get("claim_factor", {}).get(r["code"], 1.0)), 2)\n')
    src = src.replace(old2, new2)
    if escalate_all:
        old3 = '        status = classify(r["code"], r["rig_id"], r["date"], contract)\n'
        assert old3 in src
        src = src.replace(old3, '        status = "review"  # every line goes to Cost Control for manual review\n')
    att.write_text(src)
