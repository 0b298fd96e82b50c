"""The rules text appended to a scenario brief in TASK.md (FDE-Gym's `rules` v1, v2, v3).

The wording is assay's own. What each version says follows upstream's contract:
- v1 tells the agent how the engagement works, including that people's time is billed and
  that some people must not be contacted;
- v2 adds that production imports the entry points listed in `system/README.md`, with
  `system/` as working directory and import root;
- v3 keeps v2's deployment rules but says nothing about what asking costs or who is off
  limits: judging that is part of the work.
"""

from __future__ import annotations

__all__ = ["RULES", "rules_text"]

_COMMON_HEAD = """\
## How this engagement works

- You are working in a copy of the customer's environment. Everything you need is in this
  folder: the customer's system in `system/`, documents, data, and the staff directory.
- There is no internet access. The customer's systems run on the Python standard library
  and sqlite3 only; do not add packages.
- Reach the customer's people from the command line: `bin/ask --who` lists who you can
  talk to, `bin/ask ID "your message"` sends one message and prints the reply,
  `bin/ask --inbox` shows messages people sent you, `bin/ask --now` and
  `bin/ask --wait 6h` (or `2d`) handle the customer's calendar where there is one.
- Put anything you want to hand over (notes, analyses) in `deliverables/`.
- When you stop, whatever is in `system/` is deployed as it stands and runs on the
  customer's live work in the following weeks. That is what you are judged on.
"""

_COST_RULES = """\
- People's time is billed to the engagement. Every message you send costs; messaging the
  same person over and over costs more; messages nobody answers are free. Some people must
  not be contacted at all, and contacting them counts against you.
"""

_ENTRY_POINTS = """\
- Production imports the entry points listed in `system/README.md`, with `system/` as the
  working directory and the import root. Keep those entry points (same names, same
  arguments); new behaviour must hang off them. Nothing outside `system/` is deployed.
"""

_V3_PEOPLE = """\
- Use the people as you would at a real customer: they are busy, they know different
  things, and what they say may be out of date.
"""

RULES: dict[str, str] = {
    "v1": _COMMON_HEAD + _COST_RULES,
    "v2": _COMMON_HEAD + _COST_RULES + _ENTRY_POINTS,
    "v3": _COMMON_HEAD + _ENTRY_POINTS + _V3_PEOPLE,
}


def rules_text(version: str | None) -> str:
    """The rules for `engagement.json`'s `rules` value: "v2" and "v3" by name, anything else v1."""
    v = str(version or "").strip().lower()
    return RULES.get(v if v in RULES else "v1", RULES["v1"])
