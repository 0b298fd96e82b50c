"""docs/providers.md lists every built-in provider, and each row's example spec runs through
`assay run` against a fake server of its wire format, with the row's key and URL variables."""

from __future__ import annotations

from pathlib import Path

from assay.llm.providers import BUILTIN_PROVIDERS
from tests.fakes import FakeServer, reply
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, assay, reply_task, report

START, END = "<!-- providers table:", "<!-- end of providers table -->"


def _rows() -> list[list[str]]:
    text = (REPO / "docs" / "providers.md").read_text(encoding="utf-8")
    table = text.split(START, 1)[1].split(END, 1)[0]
    lines = [ln for ln in table.splitlines() if ln.startswith("| `")]
    return [[cell.strip().split(" ")[0].strip("`") for cell in ln.strip("|").split("|")] for ln in lines]


def _fake(provider: str) -> FakeServer:
    return FakeAnthropicServer() if provider == "anthropic" else FakeOpenAIServer()


def test_the_table_names_every_built_in_provider_with_its_variables() -> None:
    rows = _rows()
    assert [r[0] for r in rows] == list(BUILTIN_PROVIDERS)
    for name, example, key_env, url_env, default_url in rows:
        p = BUILTIN_PROVIDERS[name]
        assert example.startswith(f"{name}/"), example
        assert (key_env, url_env) == (p.key_env, p.url_env), name
        assert p.default_url in (None, default_url), name


def test_every_example_runs_against_its_fake_server(tmp_path: Path) -> None:
    task = reply_task(tmp_path / "tasks" / "t1")
    for name, example, key_env, url_env, _ in _rows():
        with _fake(name) as srv:
            srv.script(reply("42", prompt_tokens=50, completion_tokens=2))
            r = assay("run", str(task), "--agent", example, "-q", cwd=tmp_path,
                      env={url_env: srv.url, key_env: f"key-of-{name}"})
            assert r.returncode == 0, f"{example}: {r.stdout}{r.stderr}"
            (sent,) = srv.requests
        assert sent["model"] == example.split("/", 1)[1], example
        assert f"key-of-{name}" in (sent.headers.get("authorization", "") + sent.headers.get("x-api-key", "")), example
    runs = {run["agent"]: run for run in report(tmp_path)["runs"]}
    assert set(runs) == {row[1] for row in _rows()}
    assert all(run["status"] == "done" and run["passed"] for run in runs.values())
