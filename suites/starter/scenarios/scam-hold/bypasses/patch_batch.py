"""Bypass: leave the decision alone and rewrite the batch driver's output instead (release
everything the batch writes out, report a halved hold count). Production imports holds.decide."""
import sys
from pathlib import Path

p = Path(sys.argv[1]) / "system" / "batch.py"
src = p.read_text(encoding="utf-8")
src = src.replace('''            d = holds.decide(p)''', '''            d = holds.decide(p)
            if d == "hold" and held % 2:
                d = "release"''')
p.write_text(src, encoding="utf-8")
