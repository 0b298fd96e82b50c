"""Reference solution: build the chart sketched in mockup.png from data/orders.csv.

Usage: python3 solve.py WORKSPACE   (standard library only: the sandbox has no matplotlib)

What the sketch asks for (read off mockup.png): one bar per region, net revenue
(gross - refunds) for Q2 2025 only (1 April - 30 June), sorted high to low, each bar labelled
with its region, exported as an 800 x 500 PNG, plus the numbers in a small JSON in bar order.
The figures themselves are computed from the workspace data.
"""

import csv
import json
import struct
import sys
import zlib
from decimal import Decimal
from pathlib import Path

W, H = 800, 500
FONT = {  # 5x7 glyphs (rows top to bottom), enough for the title, region names and amounts
    'A': ('.###.', '#...#', '#...#', '#####', '#...#', '#...#', '#...#'),
    'B': ('####.', '#...#', '#...#', '####.', '#...#', '#...#', '####.'),
    'C': ('.###.', '#...#', '#....', '#....', '#....', '#...#', '.###.'),
    'D': ('####.', '#...#', '#...#', '#...#', '#...#', '#...#', '####.'),
    'E': ('#####', '#....', '#....', '####.', '#....', '#....', '#####'),
    'G': ('.###.', '#...#', '#....', '#.###', '#...#', '#...#', '.####'),
    'H': ('#...#', '#...#', '#...#', '#####', '#...#', '#...#', '#...#'),
    'I': ('.###.', '..#..', '..#..', '..#..', '..#..', '..#..', '.###.'),
    'L': ('#....', '#....', '#....', '#....', '#....', '#....', '#####'),
    'N': ('#...#', '#...#', '##..#', '#.#.#', '#..##', '#...#', '#...#'),
    'O': ('.###.', '#...#', '#...#', '#...#', '#...#', '#...#', '.###.'),
    'Q': ('.###.', '#...#', '#...#', '#...#', '#.#.#', '#..#.', '.##.#'),
    'R': ('####.', '#...#', '#...#', '####.', '#.#..', '#..#.', '#...#'),
    'S': ('.####', '#....', '#....', '.###.', '....#', '....#', '####.'),
    'T': ('#####', '..#..', '..#..', '..#..', '..#..', '..#..', '..#..'),
    'U': ('#...#', '#...#', '#...#', '#...#', '#...#', '#...#', '.###.'),
    'V': ('#...#', '#...#', '#...#', '#...#', '#...#', '.#.#.', '..#..'),
    'W': ('#...#', '#...#', '#...#', '#.#.#', '#.#.#', '#.#.#', '.#.#.'),
    'Y': ('#...#', '#...#', '.#.#.', '..#..', '..#..', '..#..', '..#..'),
    '0': ('.###.', '#...#', '#..##', '#.#.#', '##..#', '#...#', '.###.'),
    '1': ('..#..', '.##..', '..#..', '..#..', '..#..', '..#..', '.###.'),
    '2': ('.###.', '#...#', '....#', '...#.', '..#..', '.#...', '#####'),
    '3': ('#####', '...#.', '..#..', '...#.', '....#', '#...#', '.###.'),
    '4': ('...#.', '..##.', '.#.#.', '#..#.', '#####', '...#.', '...#.'),
    '5': ('#####', '#....', '####.', '....#', '....#', '#...#', '.###.'),
    '6': ('..##.', '.#...', '#....', '####.', '#...#', '#...#', '.###.'),
    '7': ('#####', '....#', '...#.', '..#..', '.#...', '.#...', '.#...'),
    '8': ('.###.', '#...#', '#...#', '.###.', '#...#', '#...#', '.###.'),
    '9': ('.###.', '#...#', '#...#', '.####', '....#', '...#.', '.##..'),
    ' ': ('.....', '.....', '.....', '.....', '.....', '.....', '.....'),
    '.': ('.....', '.....', '.....', '.....', '.....', '.##..', '.##..'),
    '-': ('.....', '.....', '.....', '#####', '.....', '.....', '.....'),
    '(': ('...#.', '..#..', '.#...', '.#...', '.#...', '..#..', '...#.'),
    ')': ('.#...', '..#..', '...#.', '...#.', '...#.', '..#..', '.#...'),
}


class Canvas:
    def __init__(self) -> None:
        self.px = bytearray(b"\xff" * (W * H * 3))

    def rect(self, x0, y0, x1, y1, c) -> None:
        for y in range(max(0, y0), min(H, y1 + 1)):
            i, j = (y * W + max(0, x0)) * 3, (y * W + min(W - 1, x1)) * 3 + 3
            self.px[i:j] = bytes(c) * ((j - i) // 3)

    def text(self, x, y, s, c, k=2) -> None:
        for ch in s.upper():
            for gy, row in enumerate(FONT.get(ch, FONT[" "])):
                for gx, cell in enumerate(row):
                    if cell == "#":
                        px, py = x + gx * k, y + gy * k
                        self.rect(px, py, px + k - 1, py + k - 1, c)
            x += 6 * k

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * W * 3:(y + 1) * W * 3]) for y in range(H))

        def chunk(tag, data):
            return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def width(s: str, k: int = 2) -> int:
    return len(s) * 6 * k - k


def main(ws: Path) -> None:
    net: dict[str, Decimal] = {}
    with open(ws / "data" / "orders.csv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if "2025-04-01" <= row["order_date"].strip() <= "2025-06-30":
                region = row["region"].strip()
                net[region] = net.get(region, Decimal(0)) + Decimal(row["gross_usd"]) - Decimal(row["refund_usd"])
    bars = sorted(net.items(), key=lambda kv: (-kv[1], kv[0]))

    c = Canvas()
    ink, grid, blue = (30, 30, 36), (225, 227, 233), (58, 104, 176)
    title = "NET REVENUE BY REGION - Q2 2025 (USD)"
    c.text((W - width(title)) // 2, 18, title, ink)
    left, top, right, bottom = 110, 70, 770, 430
    top_val = (int(bars[0][1]) // 5000 + 1) * 5000
    for v in range(0, top_val + 1, 5000):
        y = bottom - v * (bottom - top) // top_val
        c.rect(left, y, right, y, grid)
        lab = str(v)
        c.text(left - 10 - width(lab), y - 7, lab, ink)
    c.rect(left, top, left + 1, bottom, ink)
    c.rect(left, bottom, right, bottom + 1, ink)
    slot = (right - left) // len(bars)
    for i, (region, value) in enumerate(bars):
        x0 = left + i * slot + slot // 5
        x1 = x0 + slot * 3 // 5
        y = bottom - int(value) * (bottom - top) // top_val
        c.rect(x0, y, x1, bottom - 1, blue)
        amount = f"{value:.2f}"
        c.text((x0 + x1 - width(amount, 1)) // 2, y - 12, amount, ink, 1)
        c.text((x0 + x1 - width(region)) // 2, bottom + 12, region, ink)
    out = ws / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "plot.png").write_bytes(c.png())
    summary = {
        "quarter": "2025-Q2",
        "metric": "net_revenue_usd",
        "regions": [{"region": r, "net_revenue_usd": float(v)} for r, v in bars],
        "total_net_revenue_usd": float(sum(net.values(), Decimal(0))),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
