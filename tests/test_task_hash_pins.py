"""Today's tasks keep their content hashes: stores key results by them, and a resume treats a
task whose hash changed as another task. Pinned before tools became an extension point (issue
26): registering a tool, built-in or a plugin's, must not change the hash of a task that does
not use it (scenarios and DareBench tasks take the five default tools, not "every tool")."""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.task.discover import discover

ROOT = Path(__file__).resolve().parent.parent

PINNED = {
    "suites/starter": {
        "text-ms-policy-summary": "8a8090d2d5ade61d",  # native, multi-step: the file tools
        "text-mt-log-triage": "fbca9d2bd75d3517",  # native, multi-step-with-tools: all five
        "text-ss-invoice-total": "fbd5b910cbb1c949",  # native, single-step: no tools
        "en-law-flsa-overtime-backpay": "67b4f284477f5e22",  # rubric
        "refund-desk/base": "8361a08ed66e08d0",  # scenario (Mei's evidence gate tightened: round 11)
        "refund-desk-native/wardrobing": "bac26b44fac7ff83",  # native scenario (the same)
    },
    "tests/fixtures/darebench": {"task_finqa_00": "b604994a87bcf426", "task_logiqa_00": "97e322ddd0a91948"},
    "tests/fixtures/native-scenario": {"tiny-native/base": "6329940d24b2c0de"},
    "tests/fixtures/fdegym/tiny-case": {"tiny-case/alt": "40d4c02664d9893f"},
}


@pytest.mark.parametrize("folder", sorted(PINNED))
def test_content_hashes_of_todays_tasks_are_unchanged(folder: str) -> None:
    got = {t.id: t.content_hash for t in discover([ROOT / folder]) if t.id in PINNED[folder]}
    assert got == PINNED[folder]
