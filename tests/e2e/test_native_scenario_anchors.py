"""The native-format starter scenario (refund-desk-native) passes its admission anchors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.helpers import REPO, assay

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

NATIVE = REPO / "suites" / "starter" / "scenarios-native"


def test_anchors_pass_on_the_native_starter_scenario(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o711)
    r = assay("validate", "--anchors", str(NATIVE), cwd=tmp_path, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    rows = [ln for ln in r.stdout.splitlines() if "│" in ln]
    assert rows and not any("FAIL" in ln for ln in rows)
    for variant in ("base", "wardrobing", "address_ring", "queue_only"):
        for anchor in ("noop", "literal", "reference", "bypass:lift_cap", "alternate:alt_risk_module"):
            assert any(f"refund-desk-native/{variant} " in ln and f" {anchor} " in ln and "PASS" in ln
                       for ln in rows), (variant, anchor)
    assert any("refund-desk-native/*" in ln and " mean literal " in ln and "PASS" in ln for ln in rows)
