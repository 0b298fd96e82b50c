"""`read_file` on an image: the image itself for a model that sees images, a note for others."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from assay.agent.file_tools import IMAGE_MAX_BYTES
from assay.agent.tools import ToolBox, ToolOutput
from assay.llm.messages import ToolCall

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 40
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 40
GIF = b"GIF89a" + b"\x00" * 40
WEBP = b"RIFF\x00\x00\x00\x00WEBPVP8 " + b"\x00" * 40


def read(box: ToolBox, path: str) -> ToolOutput:
    return asyncio.run(box.run(ToolCall(id="1", name="read_file", arguments={"path": path})))


@pytest.mark.parametrize(("data", "kind"), [(PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"),
                                            (WEBP, "image/webp")])
def test_an_image_is_attached_by_its_content(tmp_path: Path, data: bytes, kind: str) -> None:
    (tmp_path / "figure.dat").write_bytes(data)  # the name does not matter, the bytes do
    out = read(ToolBox(tmp_path, None, ["read_file"], images=True), "figure.dat")
    assert out.text == f"[figure.dat is an image ({kind}, {len(data)} bytes): attached below]"
    (img,) = out.images
    assert img.media_type == kind and base64.b64decode(img.data_b64) == data


def test_a_text_only_model_gets_a_note(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(PNG)
    out = read(ToolBox(tmp_path, None, ["read_file"], images=False), "chart.png")
    assert out.images == []
    assert out.text == (f"[chart.png is an image (image/png, {len(PNG)} bytes); this agent's model takes text "
                        "only, so the image cannot be shown]")


def test_text_named_png_is_read_as_text_and_big_images_are_refused(tmp_path: Path) -> None:
    (tmp_path / "fake.png").write_text("just text\n")
    box = ToolBox(tmp_path, None, ["read_file"], images=True)
    assert read(box, "fake.png").text == "    1\tjust text" and read(box, "fake.png").images == []
    (tmp_path / "huge.png").write_bytes(PNG + b"\x00" * IMAGE_MAX_BYTES)
    out = read(box, "huge.png")
    assert out.images == [] and "over the 5242880 bytes a model is shown" in out.text


def test_an_image_link_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "host.png").write_bytes(PNG)
    (ws / "leak.png").symlink_to(tmp_path / "host.png")
    out = read(ToolBox(ws, None, ["read_file"], images=True), "leak.png")
    assert out.images == [] and out.text.startswith("error:")
