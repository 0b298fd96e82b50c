"""The one reader of numbers written in text: rubric checks, contract predicates and the
evidence audit all use it, so "3.2万" is 32,000 everywhere.

Rules: full-width digits and punctuation count as ASCII (not NFKC, which would also turn
"m²" into "m2"); thousands separators are commas in groups of three ("1,2345" is two
numbers); a minus sign (-, −, －) counts only when not glued to a word or a number
("2024-05-01" is three numbers); a number never starts inside a digit run ("1.2.3" is 1.2
and 3); an exponent ("1.5e-3") belongs to the number; a CJK multiplier written right after
the number (万 = 1e4, 亿 = 1e8) is part of its value. A percent sign or a scale word after
it (thousand, million, billion, trillion, k, m, bn) does not change the value but adds the
other reading to `candidates` (12% may mean 0.12), for comparisons that allow either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Number", "find_numbers", "parse_number", "parse_numbers"]

_FULLWIDTH = str.maketrans({
    **{chr(0xFF10 + i): str(i) for i in range(10)},
    "，": ",", "．": ".", "％": "%", "－": "-", "−": "-", "＋": "+",
})

_NUMBER = re.compile(
    r"(?P<sign>(?<![\w.])-)?"                                  # a sign not glued to a word/number
    r"(?<![0-9])"                                               # never start inside a digit run
    r"(?P<num>(?:[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?P<frac>\.[0-9]+)?|(?P<bare>\.[0-9]+))"
    r"(?P<exp>[eE][-+]?[0-9]+(?![0-9A-Za-z]))?"
    r"(?P<mult>[万亿])?"
    r"(?P<pct>\s?%)?"
    r"(?:\s?(?P<scale>thousand|million|billion|trillion|bn|k|m|b)(?![A-Za-z]))?",
    re.IGNORECASE,
)
_MULTIPLIERS = {"万": 1e4, "亿": 1e8}
_SCALES = {"thousand": 1e3, "k": 1e3, "million": 1e6, "m": 1e6, "billion": 1e9, "bn": 1e9, "b": 1e9,
           "trillion": 1e12}


@dataclass(frozen=True)
class Number:
    """One number as written: its value, its decimals, where it stands, and its other readings."""

    text: str
    value: float
    decimals: int
    start: int
    end: int
    candidates: tuple[float, ...]
    percent: bool = False


def find_numbers(text: str) -> list[Number]:
    """Every number written in `text`, in order (the module docstring has the rules)."""
    out: list[Number] = []
    norm = (text or "").translate(_FULLWIDTH)
    for m in _NUMBER.finditer(norm):
        digits = m.group("num").replace(",", "") + (m.group("exp") or "")
        try:
            value = float(digits)
        except ValueError:
            continue
        if m.group("mult"):
            value *= _MULTIPLIERS[m.group("mult")]
        if m.group("sign"):
            value = -value
        frac = m.group("frac") or m.group("bare") or ""
        cands = [value]
        if m.group("pct"):
            cands.append(value / 100)
        if m.group("scale"):
            cands.append(value * _SCALES[m.group("scale").lower()])
        out.append(Number(text=text[m.start():m.end()], value=value, decimals=max(0, len(frac) - 1),
                          start=m.start(), end=m.end(), candidates=tuple(dict.fromkeys(cands)),
                          percent=bool(m.group("pct"))))
    return out


def parse_numbers(text: str) -> list[float]:
    """The values of every number in `text`, in order."""
    return [n.value for n in find_numbers(text)]


def parse_number(text: str) -> float | None:
    """The first number in `text`, or None."""
    found = find_numbers(text)
    return found[0].value if found else None
