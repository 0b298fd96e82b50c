"""`read_file` on an image through the real loop and sandbox: the image reaches the model in
its provider's wire format (OpenAI image parts, Anthropic image blocks) on any task, and a
text-only model (`images = false`) gets a note instead."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import reply
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import answer_task, assay, model_alias, report

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def _run(tmp_path: Path, provider: str, **alias: Any) -> list[Any]:
    task = answer_task(tmp_path / "tasks" / "t1")  # a plain text task, not labelled multimodal
    (task / "workspace" / "chart.png").write_bytes(PNG)
    server_cls = FakeOpenAIServer if provider == "openai" else FakeAnthropicServer
    with server_cls() as srv:
        srv.script(
            reply("", [("read_file", {"path": "chart.png"})]),
            reply("", [("write_file", {"path": "answer.txt", "content": "42\n"})]),
            reply("Done."),
        )
        model_alias(tmp_path, "m", provider, srv.url, **alias)
        r = assay("run", str(task), "--agent", "m", "-q", cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        bodies = [q.json for q in srv.requests]
    (run,) = report(tmp_path)["runs"]
    assert run["status"] == "done" and run["score"] == 1.0
    return bodies


def test_openai_model_sees_the_image_as_an_image_part(tmp_path: Path) -> None:
    second = _run(tmp_path, "openai")[1]["messages"]
    tool = next(m for m in second if m["role"] == "tool")
    assert tool["content"] == f"[chart.png is an image (image/png, {len(PNG)} bytes): attached below]"
    after = second[second.index(tool) + 1]  # Chat Completions tool messages are text: the image follows
    assert after["role"] == "user"
    (part,) = [p for p in after["content"] if p["type"] == "image_url"]
    assert part["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(PNG).decode()


def test_anthropic_model_sees_the_image_in_the_tool_result(tmp_path: Path) -> None:
    second = _run(tmp_path, "anthropic")[1]["messages"]
    block = next(b for m in second if m["role"] == "user" and isinstance(m["content"], list)
                 for b in m["content"] if b.get("type") == "tool_result")
    kinds = [c["type"] for c in block["content"]]
    assert kinds == ["text", "image"]
    assert block["content"][1]["source"] == {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(PNG).decode()}


def test_text_only_model_gets_a_note_and_no_image(tmp_path: Path) -> None:
    bodies = _run(tmp_path, "openai", images=False)
    second = json.dumps(bodies[1])
    assert "image_url" not in second
    assert "this agent's model takes text only, so the image cannot be shown" in second
