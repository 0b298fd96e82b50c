"""Generate the images of the multimodal starter contract tasks, deterministically.

Usage (from the repository root):

    python3 scripts/make_starter_images.py            # (re)write every image
    python3 scripts/make_starter_images.py --check    # exit 1 if any committed image differs

Standard library only: PNGs are written with zlib + struct, text is drawn with the small
5x7 bitmap font defined below, and the "scanned" look (grey paper, a slight skew, noise and
specks) comes from a seeded xorshift PRNG, so every run reproduces byte-identical files.

Images drawn from data the agent also gets (the footfall chart) read that data from the
task's workspace folder, so image and workspace can never drift apart. Images whose data
lives only in the image (scanned tables, charts to check against a ledger) keep that data
here, next to the drawing code; the task.yaml contracts are written against these values.
"""

from __future__ import annotations

import argparse
import csv
import struct
import sys
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "suites" / "starter" / "contract"

# --------------------------------------------------------------------------- font

_FONT_ROWS = {
    "A": (".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "B": ("####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."),
    "C": (".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."),
    "D": ("####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."),
    "E": ("#####", "#....", "#....", "####.", "#....", "#....", "#####"),
    "F": ("#####", "#....", "#....", "####.", "#....", "#....", "#...."),
    "G": (".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"),
    "H": ("#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"),
    "I": (".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "J": ("..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."),
    "K": ("#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"),
    "L": ("#....", "#....", "#....", "#....", "#....", "#....", "#####"),
    "M": ("#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"),
    "N": ("#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"),
    "O": (".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "P": ("####.", "#...#", "#...#", "####.", "#....", "#....", "#...."),
    "Q": (".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"),
    "R": ("####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"),
    "S": (".####", "#....", "#....", ".###.", "....#", "....#", "####."),
    "T": ("#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."),
    "U": ("#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."),
    "V": ("#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."),
    "W": ("#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."),
    "X": ("#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"),
    "Y": ("#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."),
    "Z": ("#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"),
    "0": (".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."),
    "1": ("..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."),
    "2": (".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"),
    "3": ("#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."),
    "4": ("...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."),
    "5": ("#####", "#....", "####.", "....#", "....#", "#...#", ".###."),
    "6": ("..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."),
    "7": ("#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."),
    "8": (".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."),
    "9": (".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."),
    " ": (".....",) * 7,
    ".": (".....", ".....", ".....", ".....", ".....", ".##..", ".##.."),
    ",": (".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."),
    ":": (".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."),
    "-": (".....", ".....", ".....", "#####", ".....", ".....", "....."),
    "_": (".....", ".....", ".....", ".....", ".....", ".....", "#####"),
    "/": (".....", "....#", "...#.", "..#..", ".#...", "#....", "....."),
    "(": ("...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."),
    ")": (".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."),
    "%": ("##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"),
    "$": ("..#..", ".####", "#.#..", ".###.", "..#.#", "####.", "..#.."),
    "#": (".#.#.", ".#.#.", "#####", ".#.#.", "#####", ".#.#.", ".#.#."),
    "=": (".....", ".....", "#####", ".....", "#####", ".....", "....."),
    "+": (".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."),
    ">": (".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."),
    "<": ("...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."),
    "?": (".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."),
    "!": ("..#..", "..#..", "..#..", "..#..", "..#..", ".....", "..#.."),
    "'": ("..#..", "..#..", ".#...", ".....", ".....", ".....", "....."),
    "&": (".##..", "#..#.", "#.#..", ".#...", "#.#.#", "#..#.", ".##.#"),
    "*": (".....", "..#..", "#.#.#", ".###.", "#.#.#", "..#..", "....."),
}
FONT = {ch: [[c == "#" for c in row] for row in rows] for ch, rows in _FONT_ROWS.items()}
ADVANCE = 6  # 5 pixels of glyph + 1 of spacing, before scaling


def text_width(s: str, scale: int) -> int:
    return max(0, len(s) * ADVANCE * scale - scale)


# --------------------------------------------------------------------------- PRNG


class XorShift:
    """xorshift32: tiny, fast, and identical on every Python version."""

    def __init__(self, seed: int) -> None:
        self.x = (seed & 0xFFFFFFFF) or 1

    def next(self) -> int:
        x = self.x
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        self.x = x
        return x

    def random(self) -> float:
        return self.next() / 4294967296.0

    def int(self, lo: int, hi: int) -> int:
        """Integer in [lo, hi]."""
        return lo + self.next() % (hi - lo + 1)


# --------------------------------------------------------------------------- canvas

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (20, 20, 24)
GRID: Color = (222, 224, 230)
AXIS: Color = (90, 90, 96)
BLUE: Color = (58, 104, 176)
ORANGE: Color = (222, 110, 36)
INK: Color = (38, 38, 44)
PEN_BLUE: Color = (28, 52, 150)
PEN_RED: Color = (178, 34, 34)
PENCIL: Color = (110, 110, 118)


class Canvas:
    def __init__(self, width: int, height: int, bg: Color = WHITE) -> None:
        self.w, self.h = width, height
        self.px = bytearray(bytes(bg) * (width * height))

    def set(self, x: int, y: int, c: Color) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def get(self, x: int, y: int) -> Color:
        i = (y * self.w + x) * 3
        return self.px[i], self.px[i + 1], self.px[i + 2]

    def rect(self, x0: int, y0: int, x1: int, y1: int, c: Color) -> None:
        """Filled rectangle, corners inclusive."""
        x0, x1 = sorted((max(0, x0), min(self.w - 1, x1)))
        y0, y1 = sorted((max(0, y0), min(self.h - 1, y1)))
        row = bytes(c) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(row)] = row

    def frame(self, x0: int, y0: int, x1: int, y1: int, c: Color, t: int = 1) -> None:
        self.rect(x0, y0, x1, y0 + t - 1, c)
        self.rect(x0, y1 - t + 1, x1, y1, c)
        self.rect(x0, y0, x0 + t - 1, y1, c)
        self.rect(x1 - t + 1, y0, x1, y1, c)

    def line(self, x0: int, y0: int, x1: int, y1: int, c: Color, t: int = 1) -> None:
        """Bresenham line drawn with a t x t square brush."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        off = t // 2
        while True:
            self.rect(x0 - off, y0 - off, x0 - off + t - 1, y0 - off + t - 1, c)
            if x0 == x1 and y0 == y1:
                break
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def dashed_hline(self, x0: int, x1: int, y: int, c: Color, dash: int = 6, gap: int = 4) -> None:
        x = x0
        while x <= x1:
            self.rect(x, y, min(x + dash - 1, x1), y, c)
            x += dash + gap

    def text(self, x: int, y: int, s: str, c: Color, scale: int = 2,
             jitter: XorShift | None = None) -> None:
        """Draw s with its top-left corner at (x, y); lower case is drawn as upper case.

        With `jitter`, each glyph is nudged by up to one scaled pixel (a handwritten look).
        """
        for ch in s.upper():
            glyph = FONT.get(ch, FONT["?"])
            jx = jy = 0
            if jitter is not None:
                jx, jy = jitter.int(-1, 1), jitter.int(-1, 1)
            for gy, row in enumerate(glyph):
                for gx, on in enumerate(row):
                    if on:
                        px, py = x + jx + gx * scale, y + jy + gy * scale
                        self.rect(px, py, px + scale - 1, py + scale - 1, c)
            x += ADVANCE * scale

    def text_center(self, cx: int, y: int, s: str, c: Color, scale: int = 2) -> None:
        self.text(cx - text_width(s, scale) // 2, y, s, c, scale)

    def text_right(self, rx: int, y: int, s: str, c: Color, scale: int = 2,
                   jitter: XorShift | None = None) -> None:
        self.text(rx - text_width(s, scale), y, s, c, scale, jitter)

    def png(self) -> bytes:
        raw = bytearray()
        stride = self.w * 3
        for y in range(self.h):
            raw.append(0)  # filter type 0 (None) on every row
            raw += self.px[y * stride:(y + 1) * stride]

        def chunk(tag: bytes, data: bytes) -> bytes:
            body = tag + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)  # 8-bit RGB
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                + chunk(b"IDAT", zlib.compress(bytes(raw), 9)) + chunk(b"IEND", b""))


def scanned(src: Canvas, seed: int, paper: Color = (238, 236, 229), skew: float = 0.006) -> Canvas:
    """Return a 'scanned' copy of src: white becomes grey paper, the page is sheared a little
    (a slightly crooked scan), and per-pixel noise, dust specks and a lighting gradient are added.
    Ink is also thinned at random so strokes look uneven."""
    rng = XorShift(seed)
    out = Canvas(src.w, src.h, paper)
    for y in range(src.h):
        for x in range(src.w):
            sx = x - int(round(y * skew))        # horizontal shear
            sy = y + int(round(x * skew * 0.6))  # vertical shear: together, a small rotation
            if 0 <= sx < src.w and 0 <= sy < src.h:
                r, g, b = src.get(sx, sy)
            else:
                r, g, b = WHITE
            # white page -> paper tone; ink keeps its colour, lightened a little at random
            if (r, g, b) == WHITE:
                r, g, b = paper
            elif rng.random() < 0.12:
                r, g, b = (r + 255) // 2, (g + 255) // 2, (b + 255) // 2
            shade = -int(10 * x / src.w)          # scanner lamp falls off to the right
            n = rng.int(-7, 7) + shade
            if rng.random() < 0.0015:             # dust speck
                n -= rng.int(60, 120)
            out.set(x, y, (max(0, min(255, r + n)), max(0, min(255, g + n)), max(0, min(255, b + n))))
    # a faint horizontal streak, as a roller leaves
    streak_y = rng.int(src.h // 4, src.h * 3 // 4)
    for x in range(src.w):
        r, g, b = out.get(x, streak_y)
        out.set(x, streak_y, (max(0, r - 14), max(0, g - 14), max(0, b - 14)))
    return out


# --------------------------------------------------------------------------- chart helpers


def bar_chart(c: Canvas, box: tuple[int, int, int, int], labels: list[str], values: list[int],
              ymax: int, ystep: int, color: Color, value_labels: bool = True) -> None:
    """Vertical bars inside box=(left, top, right, bottom) with y gridlines and tick labels."""
    left, top, right, bottom = box
    span = bottom - top
    for v in range(0, ymax + 1, ystep):
        y = bottom - v * span // ymax
        if v:
            c.rect(left + 1, y, right, y, GRID)
        c.rect(left - 5, y, left - 1, y, AXIS)
        c.text_right(left - 9, y - 7, str(v), AXIS, 2)
    c.rect(left, top, left + 1, bottom, AXIS)
    c.rect(left, bottom, right, bottom + 1, AXIS)
    n = len(values)
    slot = (right - left) // n
    bw = slot * 3 // 5
    for i, (lab, v) in enumerate(zip(labels, values, strict=True)):
        x0 = left + i * slot + (slot - bw) // 2
        y = bottom - v * span // ymax
        c.rect(x0, y, x0 + bw - 1, bottom - 1, color)
        if value_labels:
            c.text_center(x0 + bw // 2, y - 20, str(v), BLACK, 2)
        c.text_center(x0 + bw // 2, bottom + 10, lab, BLACK, 2)


# --------------------------------------------------------------------------- the images

# mm-ss-ticket-chart: tickets opened per month (the value labels are printed on the bars)
TICKETS = [("JAN", 318), ("FEB", 296), ("MAR", 352), ("APR", 407), ("MAY", 389), ("JUN", 341)]


def ticket_chart() -> Canvas:
    c = Canvas(720, 470)
    c.text_center(360, 18, "SUPPORT TICKETS OPENED PER MONTH - H1 2025", BLACK, 2)
    c.text_center(360, 44, "ALL CHANNELS (EMAIL, CHAT, PHONE)", AXIS, 2)
    c.text(28, 72, "TICKETS", AXIS, 2)
    bar_chart(c, (90, 100, 690, 410), [m for m, _ in TICKETS], [v for _, v in TICKETS], 450, 50, BLUE)
    c.text(28, 448, "SOURCE: HELPDESK EXPORT, 2025-07-01", AXIS, 1)
    return c


# mm-ss-expense-scan: a scanned expense report (meals are capped by policy; see task.yaml)
EXPENSES = [
    ("2025-05-05", "TRAVEL", "TAXI TO AIRPORT", "46.20"),
    ("2025-05-05", "TRAVEL", "FLIGHT BOS-ORD", "312.40"),
    ("2025-05-05", "MEALS", "DINNER", "58.75"),
    ("2025-05-05", "LODGING", "HOTEL, 1 NIGHT", "189.00"),
    ("2025-05-06", "MEALS", "LUNCH", "22.10"),
    ("2025-05-06", "OFFICE", "PRINTING", "14.50"),
    ("2025-05-06", "MEALS", "DINNER W/ CLIENT", "84.30"),
    ("2025-05-07", "TRAVEL", "FLIGHT ORD-BOS", "298.60"),
    ("2025-05-07", "TRAVEL", "TAXI HOME", "51.80"),
]


def expense_scan() -> Canvas:
    c = Canvas(760, 540)
    c.text(30, 22, "EXPENSE REPORT", BLACK, 3)
    c.text(30, 60, "EMPLOYEE: J. MORALES  (ID 40172)", INK, 2)
    c.text(30, 84, "TRIP: BOSTON - CHICAGO, 5-7 MAY 2025", INK, 2)
    cols = [30, 70, 210, 330, 560, 730]  # column edges: #, date, category, description, amount
    heads = ["#", "DATE", "CATEGORY", "DESCRIPTION", "AMOUNT USD"]
    top, rh = 120, 30
    nrows = len(EXPENSES) + 2  # header + lines + total
    bottom = top + nrows * rh
    for i in range(nrows + 1):
        c.rect(cols[0], top + i * rh, cols[-1], top + i * rh, INK)
    for x in cols:
        c.rect(x, top, x, bottom, INK)
    c.rect(cols[0], top + rh - 1, cols[-1], top + rh, INK)  # heavier rule under the header
    for j, h in enumerate(heads):
        if j == 4:
            c.text_right(cols[5] - 8, top + 8, h, BLACK, 2)
        else:
            c.text(cols[j] + 8, top + 8, h, BLACK, 2)
    for i, (date, cat, desc, amt) in enumerate(EXPENSES, start=1):
        y = top + i * rh + 8
        c.text(cols[0] + 8, y, str(i), INK, 2)
        c.text(cols[1] + 8, y, date, INK, 2)
        c.text(cols[2] + 8, y, cat, INK, 2)
        c.text(cols[3] + 8, y, desc, INK, 2)
        c.text_right(cols[5] - 8, y, amt, INK, 2)
    total = sum(int(a.replace(".", "")) for *_, a in EXPENSES)
    y = top + (len(EXPENSES) + 1) * rh + 8
    c.text(cols[3] + 8, y, "TOTAL CLAIMED", BLACK, 2)
    c.text_right(cols[5] - 8, y, f"{total // 100}.{total % 100:02d}", BLACK, 2)
    c.text(30, bottom + 30, "RECEIPTS ATTACHED: 9", INK, 2)
    c.text(30, bottom + 60, "APPROVED BY: ______________   DATE: ________", INK, 2)
    return scanned(c, seed=4017205)


# mm-ms-stock-count: a physical count sheet; the counted quantities are written by hand
COUNT_SHEET = [
    ("HX-1040", "HEX BOLT M10X40", "B4-01", 1180),
    ("HX-1060", "HEX BOLT M10X60", "B4-02", 860),
    ("WS-0010", "FLAT WASHER M10", "B4-03", 2450),
    ("NT-1000", "HEX NUT M10", "B4-04", 1975),
    ("AN-0820", "WALL ANCHOR 8X20", "B4-05", 312),
    ("SC-4525", "WOOD SCREW 4.5X25", "B4-06", 3100),
    ("TR-1210", "THREADED ROD M12 1M", "B4-07", 46),
    ("CT-0300", "CABLE TIE 300MM", "B4-08", 900),
]


def count_sheet() -> Canvas:
    c = Canvas(720, 500)
    c.text(30, 22, "PHYSICAL INVENTORY COUNT SHEET", BLACK, 3)
    c.text(30, 60, "WAREHOUSE B - AISLE 4 - SHEET B-04", INK, 2)
    c.text(30, 84, "COUNT DATE: 2025-06-30   COUNTER: R. OKAFOR", INK, 2)
    cols = [30, 90, 210, 460, 550, 690]
    heads = ["LN", "SKU", "DESCRIPTION", "BIN", "COUNTED"]
    top, rh = 120, 32
    nrows = len(COUNT_SHEET) + 1
    bottom = top + nrows * rh
    for i in range(nrows + 1):
        c.rect(cols[0], top + i * rh, cols[-1], top + i * rh, INK)
    for x in cols:
        c.rect(x, top, x, bottom, INK)
    for j, h in enumerate(heads):
        c.text(cols[j] + 8, top + 9, h, BLACK, 2)
    hand = XorShift(630)
    for i, (sku, desc, bin_, qty) in enumerate(COUNT_SHEET, start=1):
        y = top + i * rh + 9
        c.text(cols[0] + 8, y, str(i), INK, 2)
        c.text(cols[1] + 8, y, sku, INK, 2)
        c.text(cols[2] + 8, y, desc, INK, 2)
        c.text(cols[3] + 8, y, bin_, INK, 2)
        c.text(cols[4] + 14 + hand.int(0, 8), y + hand.int(-2, 1), str(qty), PEN_BLUE, 2, jitter=hand)
    c.text(30, bottom + 24, "COUNTED QUANTITIES IN UNITS (EACH).", INK, 2)
    c.text(30, bottom + 52, "SIGNED:", INK, 2)
    c.text(130, bottom + 50, "R. OKAFOR", PEN_BLUE, 2, jitter=hand)
    return scanned(c, seed=20250630)


# mm-ms-revenue-check: the chart from a board-deck draft (Q3 disagrees with the ledger)
DECK_QUARTERS = [("Q1", 1240), ("Q2", 1315), ("Q3", 1408), ("Q4", 1502)]


def revenue_chart() -> Canvas:
    c = Canvas(720, 470)
    c.text_center(360, 18, "NET REVENUE BY QUARTER - FY2024", BLACK, 2)
    c.text_center(360, 44, "USD THOUSANDS", AXIS, 2)
    bar_chart(c, (110, 90, 690, 410), [q for q, _ in DECK_QUARTERS], [v for _, v in DECK_QUARTERS],
              1600, 200, (46, 139, 87))
    c.text(28, 448, "BOARD DECK DRAFT V3 - FINANCE", AXIS, 1)
    return c


# mm-mt-footfall-match: one store's weekly visitors, drawn from the workspace CSV without a legend
FOOTFALL_CSV = SUITE / "mm-mt-footfall-match" / "workspace" / "data" / "footfall_weekly.csv"
FOOTFALL_STORE = "S03"


def footfall_chart() -> Canvas:
    with open(FOOTFALL_CSV, newline="", encoding="utf-8") as f:
        pts = sorted((int(r["week"]), int(r["visitors"])) for r in csv.DictReader(f)
                     if r["store_id"] == FOOTFALL_STORE)
    c = Canvas(760, 470)
    c.text_center(380, 18, "WEEKLY VISITORS - WEEKS 1-26, 2025", BLACK, 2)
    c.text_center(380, 44, "STORE: ?", AXIS, 2)
    left, top, right, bottom = 100, 96, 730, 400
    ymax, ystep = 4500, 500
    for v in range(0, ymax + 1, ystep):
        y = bottom - v * (bottom - top) // ymax
        if v:
            c.rect(left + 1, y, right, y, GRID)
        c.rect(left - 5, y, left - 1, y, AXIS)
        c.text_right(left - 9, y - 7, str(v), AXIS, 2)
    c.rect(left, top, left + 1, bottom, AXIS)
    c.rect(left, bottom, right, bottom + 1, AXIS)

    def xy(week: int, v: int) -> tuple[int, int]:
        return (left + 12 + (week - 1) * (right - left - 24) // 25,
                bottom - v * (bottom - top) // ymax)

    for week in range(1, 27):
        x, _ = xy(week, 0)
        c.rect(x, bottom + 2, x, bottom + 6, AXIS)
        if week == 1 or week % 5 == 0:
            c.text_center(x, bottom + 12, str(week), BLACK, 2)
    c.text_center((left + right) // 2, bottom + 40, "WEEK", AXIS, 2)
    for (w0, v0), (w1, v1) in zip(pts[:-1], pts[1:], strict=True):
        c.line(*xy(w0, v0), *xy(w1, v1), ORANGE, t=3)
    for w, v in pts:
        x, y = xy(w, v)
        c.rect(x - 3, y - 3, x + 3, y + 3, ORANGE)
    c.text(20, 66, "VISITORS", AXIS, 2)
    return c


# mm-mt-mockup-plot: the regional director's sketch of the chart she wants
def mockup_sketch() -> Canvas:
    c = Canvas(780, 540)
    hand = XorShift(2025)
    c.text(24, 18, "CHART FOR THE Q2 REVIEW - PLEASE BUILD THIS", PEN_BLUE, 2, jitter=hand)
    left, top, right, bottom = 60, 60, 470, 360
    c.frame(left, top, right, bottom, PENCIL, 2)
    c.text(left + 14, top + 14, "NET REVENUE BY REGION - Q2 2025", PENCIL, 1)
    for i, h in enumerate((230, 200, 165, 130, 95)):  # placeholder bars, tallest first
        x0 = left + 30 + i * 78
        c.frame(x0, bottom - 20 - h, x0 + 50, bottom - 20, PENCIL, 2)
        c.line(x0, bottom - 20 - h, x0 + 50, bottom - 20, PENCIL)  # hatched = "a bar"
        c.text(x0 + 4, bottom - 14, "REGN", PENCIL, 1)
    c.line(left + 20, top + 40, left + 20, bottom - 18, PENCIL, 2)  # y axis
    c.text(left + 26, top + 40, "USD", PENCIL, 1)
    notes = [
        (500, 70, "ONE BAR PER REGION", PEN_BLUE),
        (500, 94, "TALLEST FIRST", PEN_BLUE),
        (500, 118, "(SORT HIGH -> LOW)", PEN_BLUE),
        (500, 170, "VALUE = NET", PEN_RED),
        (500, 194, "= GROSS - REFUNDS", PEN_RED),
        (500, 246, "Q2 ONLY:", PEN_RED),
        (500, 270, "1 APR - 30 JUN 2025", PEN_RED),
        (500, 322, "LABEL EACH BAR", PEN_BLUE),
        (500, 346, "WITH THE REGION", PEN_BLUE),
    ]
    for x, y, s, col in notes:
        c.text(x, y, s, col, 2, jitter=hand)
    c.line(492, 80, 420, 150, PEN_BLUE, 2)  # arrow from the note to the bars
    c.line(420, 150, 428, 136, PEN_BLUE, 2)
    c.line(420, 150, 434, 146, PEN_BLUE, 2)
    c.frame(40, 400, 740, 500, PEN_RED, 2)
    c.text(56, 414, "EXPORT: PNG, EXACTLY 800 X 500 PX", PEN_RED, 2, jitter=hand)
    c.text(56, 444, "+ THE NUMBERS IN A SMALL JSON", PEN_RED, 2, jitter=hand)
    c.text(56, 470, "(SAME ORDER AS THE BARS) - THANKS! M.", PEN_RED, 2, jitter=hand)
    return scanned(c, seed=77, paper=(244, 242, 234), skew=0.004)


IMAGES = {
    SUITE / "mm-ss-ticket-chart" / "chart.png": ticket_chart,
    SUITE / "mm-ss-expense-scan" / "expense_report.png": expense_scan,
    SUITE / "mm-ms-stock-count" / "count_sheet.png": count_sheet,
    SUITE / "mm-ms-revenue-check" / "deck_chart.png": revenue_chart,
    SUITE / "mm-mt-footfall-match" / "chart.png": footfall_chart,
    SUITE / "mm-mt-mockup-plot" / "mockup.png": mockup_sketch,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the files on disk, write nothing")
    args = ap.parse_args(argv)
    stale = []
    for path, draw in IMAGES.items():
        data = draw().png()
        rel = path.relative_to(ROOT)
        if args.check:
            if not path.exists() or path.read_bytes() != data:
                stale.append(str(rel))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        print(f"wrote {rel} ({len(data)} bytes)")
    if stale:
        print("out of date (re-run without --check): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
