"""Which endpoints are this machine's: a model server on loopback needs no API key."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlparse

__all__ = ["is_loopback"]


def is_loopback(url: str | None) -> bool:
    """A URL whose host is this machine's loopback (127.x, localhost, ::1)."""
    if not url:
        return False
    host = (urlparse(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:  # an address, not a name that merely starts like one (127.0.0.1.example.com)
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
