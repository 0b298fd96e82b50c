"""`assay run --dry-run` estimates without any API key set (issue 27, part 5): no model is
called, so no key is asked for; each model whose key is missing is named beside the estimate,
and the same command without --dry-run still refuses it up front."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import REPO, assay, reply_task

SUITE = REPO / "suites" / "starter" / "rubric"


def test_dry_run_estimates_every_provider_without_its_key(tmp_path: Path) -> None:
    r = assay("run", str(SUITE), "--agent", "openai/gpt-4.1-mini", "--agent", "anthropic/claude-haiku-4-5",
              "--agent", "groq/llama-3.3-70b-versatile", "--judge", "openai/gpt-4.1", "--search", "brave",
              "--dry-run", "--json", "dry.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not (tmp_path / ".assay").exists()
    rows = {a["agent"]: a for a in json.loads((tmp_path / "dry.json").read_text())["agents"]}
    assert set(rows) == {"openai/gpt-4.1-mini", "anthropic/claude-haiku-4-5", "groq/llama-3.3-70b-versatile"}
    assert rows["openai/gpt-4.1-mini"]["to_do"] == 10 and rows["openai/gpt-4.1-mini"]["cost_usd"] > 0
    assert rows["groq/llama-3.3-70b-versatile"]["cost_usd"] is None  # no price known: unknown, never 0
    notes = [ln for ln in r.stderr.splitlines() if ln.startswith("note: ")]
    assert notes == [
        "note: --agent openai/gpt-4.1-mini: OPENAI_API_KEY is not set (or point OPENAI_BASE_URL at a local "
        "server) (the runs need it, the estimate does not)",
        "note: --agent anthropic/claude-haiku-4-5: ANTHROPIC_API_KEY is not set (or point ANTHROPIC_BASE_URL at a "
        "local server) (the runs need it, the estimate does not)",
        "note: --agent groq/llama-3.3-70b-versatile: GROQ_API_KEY is not set (or point GROQ_BASE_URL at a local "
        "server) (the runs need it, the estimate does not)",
        "note: --judge openai/gpt-4.1: OPENAI_API_KEY is not set (or point OPENAI_BASE_URL at a local server) "
        "(the runs need it, the estimate does not)",
    ]
    # Without --dry-run the missing key is still exit 2, before anything is written.
    r = assay("run", str(SUITE), "--agent", "openai/gpt-4.1-mini", "--judge", "openai/gpt-4.1", cwd=tmp_path)
    assert r.returncode == 2 and "OPENAI_API_KEY is not set" in r.stderr, r.stderr
    assert not (tmp_path / ".assay").exists()


def test_dry_run_of_an_alias_names_its_own_key_variable(tmp_path: Path) -> None:
    task = reply_task(tmp_path / "tasks" / "t1")
    (tmp_path / "assay.toml").write_text('[models.m]\nprovider = "openai"\nmodel = "gpt-4.1"\n'
                                         'api_key_env = "MY_TEAM_KEY"\n', encoding="utf-8")
    r = assay("run", str(task), "--agent", "m", "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note: --agent m: environment variable MY_TEAM_KEY is not set" in r.stderr
    r = assay("run", str(task), "--agent", "m", "--dry-run", cwd=tmp_path, env={"MY_TEAM_KEY": "k"})
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr
