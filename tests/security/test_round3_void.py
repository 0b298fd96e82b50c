"""Round 3, class 1: an agent turning its failure into a void run (void runs leave the score).

Each attack makes a grading part fail on what the agent delivered in a place the earlier rounds
did not try; the run must be `done` with the part scored 0 and the fault named, never `void`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from assay.env.bwrap import bwrap_available
from tests.fakes import reply
from tests.fakes.anthropic_server import FakeAnthropicServer
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import answer_task, model_alias
from tests.security._round3 import home, run, script, shown, task, tiny_scenario

pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

COUNT_CHECKS = """\
def grade(ws, final):
    n = int(open(ws + "/count.txt").read().strip())
    return {"count_ok": n == 1, "count": n}
"""


def test_a_check_value_too_large_for_a_float_and_a_json_number_past_infinity_are_scored_failures(tmp_path: Path) -> None:
    """A check passing on an integer the agent wrote (400 digits: `math.isfinite` raised
    OverflowError), and an artifact holding 1e400 under a schema with `multipleOf`
    (jsonschema raised OverflowError): both voided the run before round 3."""
    cwd = home(tmp_path)
    task(cwd / "tasks" / "count", {
        "title": "count", "domain": "test", "prompt": "Write the count into count.txt.",
        "contract": [{"path": "count.txt", "predicate": "exists"}],
        "grading": {"type": "automated", "checks": "checks.py"}, "reference": {"artifacts": "ref"}},
        {"checks.py": COUNT_CHECKS, "ref/count.txt": "1\n", "workspace/README.md": "hi\n"})
    task(cwd / "tasks" / "cents", {
        "title": "cents", "domain": "test", "prompt": "Write prices in cents into out.json.",
        "contract": [{"path": "out.json", "predicate": "json", "schema": {
            "type": "object", "additionalProperties": {"type": "number", "multipleOf": 0.01}}}],
        "reference": {"artifacts": "ref"}}, {"ref/out.json": '{"a": 1.25}', "workspace/README.md": "hi\n"})
    agent = script(cwd / "agent.jsonl", [
        {"tool": "write_file", "args": {"path": "count.txt", "content": "1" + "0" * 400}},
        {"tool": "write_file", "args": {"path": "out.json", "content": '{"a": 1e400}'}},
        {"say": "done"}])
    runs = run(cwd, str(cwd / "tasks"), "--agent", agent)
    for task_id in ("count", "cents"):
        r = runs[(task_id, agent)]
        assert r["status"] == "done" and r["score"] == 0.0, r
    faults = shown(cwd, runs[("count", agent)]["run_id"])["grade"]["faults"]
    assert any(f["part"] == "checks:count" and "not a finite number" in f["reason"] for f in faults), faults
    faults = shown(cwd, runs[("cents", agent)]["run_id"])["grade"]["faults"]
    assert any(f["part"] == "predicate:out.json" and "OverflowError" in f["reason"] for f in faults), faults


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_model_tool_arguments_nested_deep_or_with_huge_integers_are_tool_errors(tmp_path: Path, provider: str) -> None:
    """A model's tool call whose arguments nest 100,000 deep (RecursionError in `json.loads`),
    hold a 5,000-digit integer (ValueError), or, from Anthropic's SDK, a dict 400 levels deep
    (RecursionError further on): each voided the run (harness_error) before round 3."""
    cwd = home(tmp_path)
    t = answer_task(cwd / "t")
    deep: dict[str, object] = {"path": "README.md"}
    for _ in range(400):
        deep = {"a": [deep]}
    calls = [reply("", [("read_file", '{"path": ' + "[" * 100_000 + "]" * 100_000 + "}")]),
             reply("", [("read_file", '{"path": "README.md", "offset": ' + "9" * 5000 + "}")])]
    if provider == "anthropic":
        calls = [reply("", [("read_file", deep)])]
    server = FakeOpenAIServer() if provider == "openai" else FakeAnthropicServer()
    with server as srv:
        srv.script(*calls, reply("", [("write_file", {"path": "answer.txt", "content": "41\n"})]), reply("done"),
                   reply("done"))
        model_alias(cwd, "fake", provider, srv.url)
        runs = run(cwd, str(t), "--agent", "fake")
    r = runs[("t", "fake")]
    assert r["status"] == "done" and r["score"] == 0.0, r


def test_a_kpi_whose_uplift_passes_a_floats_range_is_a_kpi_fault_not_an_infinite_score(tmp_path: Path) -> None:
    """A grader whose KPI is what the delivered system returns, with the reference 0.5 above the
    baseline: answer() returning 1.7e308 (finite) made U = 3.4e308 = inf, a run scored inf and solved."""
    cwd = home(tmp_path)
    case = tiny_scenario(cwd / "tiny-native")
    spec = (case / "task.yaml").read_text().replace("baseline: -6", "baseline: 0")
    (case / "task.yaml").write_text(spec)
    grader = (case / "score.py").read_text()
    (case / "score.py").write_text(grader.replace('return {"kpi": -abs(got - target), "kpi_oracle": 0,',
                                                  'return {"kpi": float(got), "kpi_oracle": 0.5,'))
    agent = script(cwd / "agent.jsonl", [
        {"tool": "write_file", "args": {"path": "system/app.py", "content": "def answer():\n    return 1.7e308\n"}},
        {"say": "done"}])
    runs = run(cwd, str(case), "--agent", agent, "--task", "tiny-native/base")
    r = runs[("tiny-native/base", agent)]
    assert r["status"] == "done" and r["score"] == 0.0 and r["passed"] is False, r
    faults = shown(cwd, r["run_id"])["grade"]["faults"]
    assert any(f["part"] == "kpi" and "not a finite number" in f["reason"] for f in faults), faults


SPECIALS = r"""mkfifo fifo; python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('sock')"
touch "$(printf 'bad\xffname')" "$(printf 'new\nline')" "$(printf 'esc\033[31mred')" "$(python3 -c "print('L' * 255)")"
ln -s loop loop; ln -s a b; ln -s b a; ln -s /etc/shadow shadow; truncate -s 900M sparse.bin
echo secret > unreadable; chmod 000 unreadable; ln unreadable hard; mkdir -p locked/in; echo x > locked/in/f; chmod 000 locked
mkdir "$(printf 'd\xfe')"; mkfifo "$(printf 'd\xfe')/$(printf 'f\xfd')"; echo 42 > answer.txt"""

WALK_CHECKS = """\
import os
def grade(ws, final):
    n = sum(len(files) for _root, _dirs, files in os.walk(ws))
    return {"answer": open(ws + "/answer.txt").read().strip() == "42", "walked": n > 0}
"""


def test_special_files_odd_names_and_locked_folders_at_grading_are_graded_not_void(tmp_path: Path) -> None:
    """The workspace the checks copy and the predicates read holds a FIFO, a socket, names
    that are not UTF-8 or hold a newline or an escape, a 255-byte name, link loops, a sparse
    900 MB file, hard links, a file and a folder of mode 000: graded, the odd entries left out."""
    cwd = home(tmp_path)
    t = task(cwd / "t", {
        "title": "t", "domain": "test", "prompt": "Write 42 into answer.txt.",
        "contract": [{"path": "answer.txt", "predicate": "exists"},
                     {"path": "fifo", "predicate": "non_empty", "required": False},
                     {"path": "loop/x", "predicate": "json", "required": False},
                     {"path": "locked/in/f", "predicate": "non_empty", "required": False}],
        "grading": {"type": "automated", "checks": "checks.py"}, "reference": {"artifacts": "ref"}},
        {"checks.py": WALK_CHECKS, "ref/answer.txt": "42\n", "workspace/README.md": "hi\n"})
    agent = script(cwd / "agent.jsonl", [{"tool": "run_command", "args": {"command": SPECIALS}}, {"say": "done"}])
    r = run(cwd, str(t), "--agent", agent)[("t", agent)]
    assert r["status"] == "done" and r["score"] == 1.0, r
    grade = shown(cwd, r["run_id"])["grade"]
    refused = {path for path, _why in grade["copy_refused"]}
    assert {"fifo", "sock", "shadow", "d\\udcfe/f\\udcfd"} <= refused, refused
    assert not grade["faults"]
