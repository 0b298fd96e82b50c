"""Programs that run inside the sandbox (or as its stand-ins), shipped as real modules.

Each file here is copied as it is into a run's workspace or socket folder and run by the
sandbox's own `/usr/bin/python3` (standard library only, Python 3.9 or newer), so none
imports assay. `source(name)` gives a file's text; the host-side installers live beside the
services they belong to (`assay.scenario`, `assay.env.net`, `assay.grade`).
"""

from __future__ import annotations

from importlib import resources

__all__ = ["source"]


def source(name: str) -> str:
    """The text of `assay/env/inside/<name>` (e.g. "ask.py")."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
