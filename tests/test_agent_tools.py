"""The agent's tool box: argument checks before any tool runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from assay.agent.tools import MAX_ARGUMENT_BYTES, ToolBox, _timeout, check_arguments
from assay.llm.messages import ToolCall


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, float("1e999")])
def test_non_finite_numbers_are_refused_anywhere(bad: float) -> None:
    with pytest.raises(ValueError, match="not a finite number"):
        check_arguments({"command": "true", "timeout_s": bad})
    with pytest.raises(ValueError, match="not a finite number"):
        check_arguments({"path": "a", "deep": [{"x": [1, bad]}]})


@pytest.mark.parametrize("raw", [0, -5, "soon", math.nan, -(2**1024), -(10**400)])  # the last two: no float holds them
def test_timeout_must_be_positive_and_finite(raw: object) -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        _timeout(raw)


def test_timeout_defaults_and_caps() -> None:
    assert _timeout(None) == 300 and _timeout(12.5) == 12.5 and _timeout(10**9) == 1800


def test_oversized_arguments_are_refused(tmp_path: Path) -> None:
    box = ToolBox(tmp_path, None, ["write_file"])
    big = "x" * (MAX_ARGUMENT_BYTES + 1)
    out = _run(box, ToolCall(id="1", name="write_file", arguments={"path": "big.txt", "content": big}))
    assert out.startswith("error") and "tool arguments refused" in out
    assert not (tmp_path / "big.txt").exists()
    # multi-byte text counts its bytes
    wide = "é" * (MAX_ARGUMENT_BYTES // 2 + 1)
    with pytest.raises(ValueError):
        check_arguments({"content": wide})


def _run(box: ToolBox, call: ToolCall) -> str:
    import asyncio

    return asyncio.run(box.execute(call))
