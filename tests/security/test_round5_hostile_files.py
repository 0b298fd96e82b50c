"""Round 5 red team, class 5: hostile files (task files, upstream result files).

Written without reading the other tests in tests/security/. Each test drives the CLI as a
user would and asserts the behaviour issue 25 asks for: exit 2 naming the file (and the
field), no traceback, quickly, nothing stored."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import clean_env

pytestmark = pytest.mark.slow

MEMORY_CAP = 4 * 1024**3
"""The CLI runs under this address-space cap, so an expansion bomb cannot take the machine."""


def _cli(*args: str, cwd: Path, timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "assay.cli", *args], cwd=cwd, env=clean_env(), text=True,
                       capture_output=True, timeout=timeout, preexec_fn=cap)
    return p, time.monotonic() - t0


def _task(folder: Path, extra_lines: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    head = ["title: byte bomb", "domain: test", "execution: single-step", "prompt: Reply 42.",
            "answer_path: answer.txt",
            "contract:", "  - {path: answer.txt, predicate: regex, pattern: '^42'}",
            "reference: {answer: '42'}"]
    (folder / "task.yaml").write_text("\n".join(head + extra_lines) + "\n", encoding="utf-8")
    return folder


def _byte_bomb_lines(field: str = "requirements") -> list[str]:
    """A 2 MiB string, anchored once, aliased 3,000 times: 3,001 nodes (far under the alias
    budget of 10,000 nodes, which counts nodes, not bytes), about 2 MB of YAML, and 6 GB of
    text once anything walks the value (the content hash's json.dumps does)."""
    big = "x" * (2 * 1024 * 1024)
    return [f"{field}:", f"  - &s {big}", *(["  - *s"] * 3000)]


def test_yaml_alias_of_a_big_string_is_refused_by_validate(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    task = _task(suite / "bomb", _byte_bomb_lines())
    assert (task / "task.yaml").stat().st_size < 3 * 1024 * 1024
    p, took = _cli("validate", str(suite), cwd=tmp_path)
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-800:]
    assert p.returncode == 2, (p.returncode, p.stderr[-800:])
    assert "task.yaml" in p.stderr and "requirements" in p.stderr
    assert took < 30


def test_yaml_alias_of_a_big_string_is_refused_by_run(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    _task(suite / "bomb", _byte_bomb_lines("tags"))
    p, took = _cli("run", str(suite), "--agent", "noop", "-q", cwd=tmp_path)
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-800:]
    assert p.returncode == 2, (p.returncode, p.stderr[-800:])
    assert "task.yaml" in p.stderr
    assert not (tmp_path / ".assay" / "assay.db").exists() or "runs" not in p.stdout
    assert took < 30


def test_control_small_anchors_for_shared_values_still_load(tmp_path: Path) -> None:
    """Control: an anchor of a short string reused a few times is ordinary YAML and loads."""
    suite = tmp_path / "suite"
    _task(suite / "ok", ["tags:", "  - &t finance", "  - *t", "  - *t"])
    p, _ = _cli("validate", str(suite), cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_control_a_rubric_weight_near_the_float_limit_is_refused(tmp_path: Path) -> None:
    """Control: two weights of 1e308 (whose fsum overflows) are refused at validation."""
    folder = tmp_path / "suite" / "w"
    folder.mkdir(parents=True)
    (folder / "task.yaml").write_text(
        "title: weights\ndomain: test\nexecution: single-step\nprompt: Say hello.\n"
        "rubric:\n  items:\n"
        "    - {id: a, text: says hello, weight: 1.0e+308, check: {regex: hello}}\n"
        "    - {id: b, text: says hi, weight: 1.0e+308, check: {regex: hi}}\n"
        "reference: {answer: hello hi}\n", encoding="utf-8")
    p, _ = _cli("validate", str(tmp_path / "suite"), cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "weight" in p.stderr


# --------------------------------------------------------------------------- assay import inspect


def _inspect_log(tmp_path: Path) -> dict:
    """A real Inspect log of one sample (mockllm), as Inspect's `.json` format."""
    import inspect_ai.log
    from inspect_ai import Task as InspectTask
    from inspect_ai import eval as inspect_eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    def out(messages, tools, tool_choice, config):  # noqa: ANN001, ANN202
        return ModelOutput.from_content(model="mockllm/model", content="4")

    task = InspectTask(dataset=[Sample(id="add", input="2+2?", target="4")], solver=[generate()], scorer=match())
    logs = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=out),
                        log_dir=str(tmp_path / "logs"), display="none")
    base = tmp_path / "base.json"
    inspect_ai.log.write_eval_log(inspect_ai.log.read_eval_log(logs[0].location), str(base))
    return json.loads(base.read_text())


def _import(tmp_path: Path, log: dict, name: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / name
    path.write_text(json.dumps(log))
    (tmp_path / "assay.toml").write_text('[prices."mockllm/model"]\ninput = 2.0\noutput = 8.0\n')
    p, took = _cli("import", "inspect", str(path), cwd=tmp_path)
    assert took < 60
    return p


def test_import_inspect_score_value_past_a_float_is_refused(tmp_path: Path) -> None:
    log = _inspect_log(tmp_path)
    log["samples"][0]["scores"] = {"match": {"value": 10**400, "answer": "4", "explanation": "x", "metadata": {}}}
    p = _import(tmp_path, log, "bigscore.json")
    assert "Traceback" not in p.stderr, p.stderr[-600:]
    assert p.returncode == 2 and "bigscore.json" in p.stderr and "scores.match.value" in p.stderr
    assert not (tmp_path / ".assay" / "assay.db").exists()  # nothing stored


def test_import_inspect_token_count_past_a_float_is_refused(tmp_path: Path) -> None:
    log = _inspect_log(tmp_path)
    s = log["samples"][0]
    s["scores"] = {"match": {"value": "C", "answer": "4", "explanation": "x", "metadata": {}}}
    s["model_usage"] = {"mockllm/model": {"input_tokens": 10**400, "output_tokens": 1, "total_tokens": 1}}
    p = _import(tmp_path, log, "bigusage.json")
    assert "Traceback" not in p.stderr, p.stderr[-600:]
    assert p.returncode == 2 and "bigusage.json" in p.stderr and "input_tokens" in p.stderr
    assert not (tmp_path / ".assay" / "assay.db").exists()  # nothing stored


def test_control_import_inspect_deep_nesting_is_refused_cleanly(tmp_path: Path) -> None:
    """Control: 100,000 nested brackets in a sample's metadata end in exit 2 naming the file."""
    log = _inspect_log(tmp_path)
    log["samples"][0]["scores"] = {"match": {"value": "C", "answer": "4", "explanation": "x", "metadata": {}}}
    path = tmp_path / "deep.json"
    text = json.dumps(log).replace('"metadata": {}', '"metadata": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}", 1)
    path.write_text(text)
    p, _ = _cli("import", "inspect", str(path), cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr and "deep.json" in p.stderr, p.stderr[-600:]


# --------------------------------------------------------------------------- placeholders in people.json

TINY_CASE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "fdegym" / "tiny-case"


def test_a_placeholder_repeated_in_people_json_is_refused(tmp_path: Path) -> None:
    import shutil

    case = tmp_path / "suite" / "bomb-case"
    shutil.copytree(TINY_CASE, case)
    v = json.loads((case / "variants.json").read_text())
    v["variants"] = [v["variants"][0]]
    v["variants"][0]["params"]["big"] = "x" * (2 * 1024 * 1024)
    (case / "variants.json").write_text(json.dumps(v))
    n = json.loads((case / "npcs.json").read_text())
    n["npcs"][0]["role"] = "{{big}} " * 6000
    (case / "npcs.json").write_text(json.dumps(n))
    p, took = _cli("validate", str(tmp_path / "suite"), cwd=tmp_path)
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-600:]
    assert p.returncode == 2 and "npcs.json" in p.stderr and "npcs[0].role" in p.stderr, p.stderr[-600:]
    assert took < 30


def test_control_placeholders_of_ordinary_size_are_filled(tmp_path: Path) -> None:
    """Control: the fixture case, with its placeholders, validates."""
    import shutil

    shutil.copytree(TINY_CASE, tmp_path / "suite" / "tiny-case")
    p, _ = _cli("validate", str(tmp_path / "suite"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-600:]


# --------------------------------------------------------------------------- numbers near the float limit


def test_task_values_near_the_float_limit_keep_the_report_json_valid(tmp_path: Path) -> None:
    from tests.helpers import answer_task, assay

    os.chmod(tmp_path, 0o711)
    cwd = tmp_path / "w"
    cwd.mkdir()
    os.chmod(cwd, 0o711)
    for i in (1, 2):
        answer_task(tmp_path / "suite" / f"t{i}", value={"amount": 1.7e308, "currency": "USD"})
    v = assay("validate", str(tmp_path / "suite"), cwd=cwd)
    if v.returncode == 2:  # refused up front, naming the field: as good
        assert "value" in v.stderr and "Traceback" not in v.stderr
        return
    r = assay("run", str(tmp_path / "suite"), "--agent", "reference", "-q", cwd=cwd)
    assert r.returncode == 0, r.stderr[-800:]
    assert assay("report", "--json", "r.json", cwd=cwd).returncode == 0

    def strict(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    json.loads((cwd / "r.json").read_text(), parse_constant=strict)


@pytest.mark.parametrize("field", ["epoch", "tokens"])
def test_import_inspect_integers_past_64_bits_are_refused(tmp_path: Path, field: str) -> None:
    log = _inspect_log(tmp_path)
    s = log["samples"][0]
    s["scores"] = {"match": {"value": "C", "answer": "4", "explanation": "x", "metadata": {}}}
    if field == "epoch":
        s["epoch"] = 10**30
    else:
        s["model_usage"] = {"mockllm/model": {"input_tokens": 10**30, "output_tokens": 1, "total_tokens": 1}}
    p = _import(tmp_path, log, f"big{field}.json")
    assert "Traceback" not in p.stderr, p.stderr[-600:]
    assert p.returncode == 2 and f"big{field}.json" in p.stderr
    assert ("samples[0].epoch" if field == "epoch" else "input_tokens") in p.stderr
    assert not (tmp_path / ".assay" / "assay.db").exists()  # nothing stored


def test_import_fdegym_token_count_past_64_bits_is_refused(tmp_path: Path) -> None:
    from tests.test_import_fdegym import _result, _write

    name = "tiny-case.v1-L3-model-a-1"
    data = _result("tiny-case", "L3", "base", "model-a", 1, kpi=0, uplift=1.0)
    data["agent"]["prompt_tokens"] = 10**30
    data["name"] = name
    runs = tmp_path / "runs"
    _write(runs / name, "result.json", data)
    _write(runs / name, "meta.json", {k: data[k] for k in ("engagement", "level", "port")})
    cases = Path(__file__).resolve().parents[1] / "fixtures" / "fdegym"
    p, _ = _cli("import", "fdegym", str(runs), "--cases", str(cases), cwd=tmp_path)
    assert "Traceback" not in p.stderr, p.stderr[-600:]
    assert p.returncode == 2 and "result.json" in p.stderr and "agent.prompt_tokens" in p.stderr
    assert not (tmp_path / ".assay" / "assay.db").exists()  # nothing stored
