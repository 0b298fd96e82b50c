"""Debian's Chromium driven by Playwright, launched the one way platform-notes gives: headless,
no sandbox of its own, nothing written into the real home (it gets `home`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


@contextlib.contextmanager
def chromium(home: Path) -> Iterator[Any]:
    """A launched browser (closed after); `home` is created and holds its profile and caches."""
    from playwright import sync_api

    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache"),
           "PATH": "/usr/bin:/bin"}
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS, env=env)
        try:
            yield browser
        finally:
            browser.close()
