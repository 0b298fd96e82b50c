"""Contract terms used for NPT attribution (Ferrovia master drilling contract DC-2291)."""

from __future__ import annotations

import json
import os
from datetime import date

HERE = os.path.dirname(os.path.abspath(__file__))


def load_contract() -> dict:
    with open(os.path.join(HERE, "config", "contract.json"), encoding="utf-8") as fh:
        return json.load(fh)


def load_rigs() -> dict:
    with open(os.path.join(HERE, "config", "rigs.json"), encoding="utf-8") as fh:
        return json.load(fh)


def classify(code: str, rig_id: str, day: date, contract: dict) -> str:
    """Who carries the NPT: 'contractor' (back-chargeable), 'operator', or 'excluded'
    (force majeure / weather, clause 14.3: never back-charged)."""
    if code in contract["excluded_codes"]:
        return "excluded"
    if code in contract["contractor_codes"]:
        return "contractor"
    return "operator"
