"""Which endpoints are this machine's: a model server on loopback needs no API key."""

from __future__ import annotations

from urllib.parse import urlparse

__all__ = ["is_loopback"]


def is_loopback(url: str | None) -> bool:
    """A URL whose host is this machine's loopback (127.x, localhost, ::1)."""
    if not url:
        return False
    host = (urlparse(url).hostname or "").lower()
    return host in {"localhost", "::1"} or host.startswith("127.")
