"""What a final message claims it did: the files it says it wrote and the commands it says it ran
(the phantom-claim rule reads them; the evidence looks those files up)."""

from __future__ import annotations

import re


def norm_path(p: str) -> str:
    p = p.strip().strip("`'\"").replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    for prefix in ("/workspace/",):
        if p.startswith(prefix):
            p = p[len(prefix):]
    return p.strip("/")


_EXT_WORDS = """txt csv tsv json jsonl ndjson yaml yml toml md markdown rst html htm xml py js mjs ts tsx jsx
java c h cc cpp hpp go rs rb php sh bash zsh sql ipynb pdf png jpg jpeg gif svg webp bmp tiff xlsx xls xlsm docx doc
pptx parquet feather pkl pickle npy npz h5 hdf5 log ini cfg conf out dat zip tar gz tgz bz2 xz r rmd swift kt scala lua
pl tex bib css scss vue svelte dockerfile lock diff patch mdx srt vtt wav mp3 mp4 ics eml"""


_EXTS = frozenset(_EXT_WORDS.split())


_PATH = re.compile(r"(?<![\w/.:@-])((?:\.{1,2}/)?(?:[\w.-]+/)*[\w-][\w.-]*\.([A-Za-z][A-Za-z0-9]{0,7}))(?![\w/])")


_FILE_VERB = re.compile(r"\b(saved|wrote|written|created|generated|exported|stored|dumped|produced|updated|modified|"
                        r"edited|overwrote|overwritten|appended)\b", re.I)


_RAN_VERB = re.compile(r"\b(ran|re-?ran|executed|re-?executed|invoked|(?:have|has|had|I've|I’ve|we've|we’ve)\s+"
                       r"(?:also\s+|now\s+|successfully\s+|then\s+)?(?:re-?)?run)\b", re.I)


_NEGATION = re.compile(r"\b(?:not|never|no|unable|cannot|can't|can’t|couldn't|couldn’t|didn't|didn’t|wasn't|"
                       r"weren't|failed|fail|without|would|should|could|will|can|may|might|must|need|needs|"
                       r"please|if|want|wants|plan|planned|going|to be|wasn’t|won't|won’t|instead of)\b|n['’]t\b",
                       re.I)


_PROGRAM_WORDS = """pytest python python3 pip pip3 make npm npx yarn pnpm node deno bun cargo go rustc gcc g++
clang javac java mvn gradle ruff flake8 mypy pylint black isort eslint prettier tsc jest vitest mocha bash sh git
ls cat grep sed awk curl wget sqlite3 psql mysql docker kubectl terraform tox nox uv poetry rscript julia ruby rake
bundle php composer dotnet swift ctest cmake jq find wc head tail diff sort pandoc latexmk pdflatex unittest
coverage"""


_PROGRAMS = frozenset(_PROGRAM_WORDS.split())


_GENERIC_RUN = re.compile(r"^\s*(?:the\s+|my\s+|our\s+|a\s+|an\s+|this\s+|that\s+)?(?:\w+\s+)?"
                          r"(script|code|program|command|commands|notebook|linter|build|migration|migrations)\b", re.I)


_TESTS_RUN = re.compile(r"^\s*(?:the\s+|all\s+(?:the\s+)?|my\s+|our\s+|a\s+|some\s+)?(?:\w+\s+)?"
                        r"(tests?|test\s+suite|unit\s+tests?|specs?)\b", re.I)


TEST_CMD = re.compile(r"test|pytest|unittest|jest|mocha|vitest|tox|nox|\bmake\b|\bcargo\b|\bgo\b|\bnpm\b|\byarn\b|"
                       r"\bpnpm\b|ctest|rspec|phpunit|\bmvn\b|gradle", re.I)


def _negated(text: str, start: int) -> bool:
    window = text[max(0, start - 48):start]
    cut = max(window.rfind(c) for c in ".!?;,\n")
    window = window[cut + 1:] if cut >= 0 else window
    return bool(_NEGATION.search(window))


def _clause(text: str, end: int, limit: int = 160) -> str:
    rest = text[end:end + limit]
    m = re.search(r"[.!?](?:\s|$)|\n|;", rest)
    return rest[:m.start()] if m else rest


def file_claims(final: str) -> list[str]:
    out: list[str] = []
    for m in _FILE_VERB.finditer(final):
        if _negated(final, m.start()):
            continue
        for pm in _PATH.finditer(_clause(final, m.end())):
            path, ext = pm.group(1), pm.group(2).lower()
            if ext not in _EXTS and "/" not in path:
                continue
            p = norm_path(path)
            if p and p not in out:
                out.append(p)
    return out


def command_claims(final: str) -> list[tuple[str, str]]:
    """(kind, text): kind is 'cmd' (a backticked command), 'prog', 'tests' or 'generic'."""
    out: list[tuple[str, str]] = []
    for m in _RAN_VERB.finditer(final):
        if _negated(final, m.start()):
            continue
        clause = _clause(final, m.end())
        bt = re.search(r"`([^`\n]+)`", clause[:60])
        if bt:
            out.append(("cmd", bt.group(1).strip()))
            continue
        words = re.findall(r"[\w+.-]+", clause[:40])
        lead = [w for w in words[:3] if w.lower() not in ("the", "a", "an", "my", "our", "it", "also")]
        if lead and lead[0].lower() in _PROGRAMS:
            out.append(("prog", lead[0]))
            continue
        if _TESTS_RUN.match(clause):
            out.append(("tests", _TESTS_RUN.match(clause).group(1)))  # type: ignore[union-attr]
            continue
        g = _GENERIC_RUN.match(clause)
        if g:
            out.append(("generic", g.group(1)))
    return out
