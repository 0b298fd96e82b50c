"""`system/llm_client.py`: the client delivered code uses to reach the company LLM gateway.

Standard library only (urllib), and plain enough for the Python 3.9 of upstream's customer
machines. It reads `config/llm.json` next to itself, so production can point it elsewhere by
rewriting that file. It offers assay's `complete(messages, model=None, **kw) -> str` (an
OpenAI chat completion through `base_url`) and upstream FDE-Gym's `chat(...)`, `budget()`
and `LLMError`, so case code written for upstream imports it unchanged. An exhausted budget
(HTTP 429) raises `BudgetExceeded`, a subclass of `LLMError`.
"""

from __future__ import annotations

import json
from pathlib import Path

from assay.env.inside import source
from assay.fs.writes import write_file

__all__ = ["LLM_CLIENT_PY", "install_llm_client", "llm_config"]

LLM_CLIENT_PY = source("llm_client.py")
"""`system/llm_client.py` (`assay/env/inside/llm_client.py`), copied into each workspace."""


def llm_config(port: int, model: str) -> dict[str, str]:
    """Contents of `system/config/llm.json` for a gateway reached on 127.0.0.1:port.

    `url` is upstream FDE-Gym's key (its `POST /chat` protocol, also served by the gateway).
    """
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"bad port {port!r}")
    root = f"http://127.0.0.1:{port}"
    return {"base_url": f"{root}/v1", "model": model, "url": f"{root}/chat"}


def install_llm_client(ws: Path, port: int, model: str) -> None:
    """Write `system/llm_client.py` and `system/config/llm.json` into workspace `ws`.

    Written without following symlinks (the workspace may hold the agent's), replacing what
    is there; run `Sandbox.prepare()` afterwards to hand the files to the sandbox uid.
    """
    ws = Path(ws)
    write_file(ws, "system/llm_client.py", LLM_CLIENT_PY)
    write_file(ws, "system/config/llm.json", json.dumps(llm_config(port, model), indent=2) + "\n")
