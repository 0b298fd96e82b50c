"""Round 9, a fresh attack on "who failed decides" (issue 25): void dodges through the agent's
own tool calls and through the tree it leaves for grading, in contract tasks.

Every campaign here runs an honest agent beside the attacker: the honest run must be stored
`done` and scored whatever the attacker did, and the attacker's run must be a scored run
(`done`), never `void`, never lost.

- A `run_command` whose `timeout_s` is a huge negative integer: past a float's range from a
  model (its arguments may hold 4,300 digits), where it reached `float(raw)`, which raised
  OverflowError, not ValueError; the widest a script line may hold (1,023 bits, since the
  readers refuse wider ones: `2**1024 - 1` voided the run before) from a script agent. Must be a
  tool error the agent reads.
- A chain of 1,500 relative symlinks in the workspace (`c/l0 -> l1 -> ... -> l1500`, a file).
  The kernel gives up after 40 hops (ELOOP), but Python's `os.path.realpath` (3.11) resolves a
  chain by recursing once per link, so a chain longer than the recursion limit raises
  RecursionError wherever the harness resolves an agent path with it:
  - `read_file` on the chain, and `run_command` with the chain as its `cwd`
    (`fs/paths.py::resolve`): must be tool errors the agent reads;
  - the checks' grading copy (`fs/copying.py::_drop_escaping_links`, run in the copy's own
    process): must leave the chain out and let the checks grade the answer, not void the run;
  - the copy of the workspace kept after the run (`env/volume.py::release`, the same walk), in a
    task graded by its contract alone: must not take the run, or the campaign, down, and a
    resume must not crash the same way again.

The campaigns of the file tool and of the checks run with `ASSAY_WORKSPACE_QUOTA_BYTES=0` (no
quota volume, so no copy out of one after the run), to show those two apart from the crash of
the kept copy, which the last campaign shows on the defaults.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.fakes import Reply, reply
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import model_alias
from tests.security._cases import answer_task
from tests.security._support import (
    CliResult,
    bwrap_ok,
    cli,
    cmd,
    outputs,
    report_json,
    runs_by_name,
    script,
    show,
    workdir,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not bwrap_ok(), reason="needs bubblewrap")]

CHAIN = 1500
MAKE_CHAIN = (
    "import os\n"
    "os.makedirs('c', exist_ok=True)\n"
    f"for i in range({CHAIN}):\n"
    "    os.symlink('l%d' % (i + 1), 'c/l%d' % i)\n"
    f"open('c/l{CHAIN}', 'w').write('42\\n')\n"
)

CHECKS = '''\
from pathlib import Path


def grade(ws, final):
    try:
        ok = (Path(ws) / "answer.txt").read_text().strip() == "42"
    except (OSError, UnicodeError):
        ok = False
    return {"answer": 1.0 if ok else 0.0}
'''

NO_VOLUME = {"ASSAY_WORKSPACE_QUOTA_BYTES": "0"}
"""No quota volume for the agent's workspace, so nothing is copied out of one after the run: the
campaigns that use it show the file tool and the checks' copy on their own, apart from the crash
of the kept copy (the last test, on the defaults)."""

HUGE_NEGATIVE = -(2**1023 - 1)  # 1,023 bits: the widest integer a script line may hold (a float, negative)


def _write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "write_file", "args": {"path": path, "content": content}}


HONEST = [_write("answer.txt", "42\n"), {"say": "I wrote 42 into answer.txt."}]


class Campaign:
    def __init__(self, wd: Path, result: CliResult, runs: dict[str, dict[str, Any]], report_error: str | None,
                 args: tuple[str, ...] = (), env: dict[str, str] | None = None):
        self.args = args
        self.env = env
        self.wd = wd
        self.result = result
        self.runs = runs
        self.report_error = report_error

    def run(self, name: str) -> dict[str, Any]:
        assert self.report_error is None, f"no report after the campaign: {self.report_error}\n" + self.result.tail()
        assert name in self.runs, (f"the run of {name!r} was not stored (runs: {sorted(self.runs)})\n"
                                   + self.result.tail())
        return self.runs[name]

    def describe(self, name: str) -> str:
        r = self.runs.get(name, {})
        return (f"{name}: status={r.get('status')} score={r.get('score')} passed={r.get('passed')} "
                f"end_reason={r.get('end_reason')} void_reason={str(r.get('void_reason'))[:300]!r}\n"
                + self.result.tail(1500))


def _campaign(tag: str, make_task: Any, agents: dict[str, list[dict[str, Any]]],
              env: dict[str, str] | None = None, setup: Callable[[Path], None] | None = None,
              extra_agents: Sequence[str] = ()) -> Iterator[Campaign]:
    with workdir(tag) as wd:
        suite = wd / "suite"
        make_task(suite / tag)
        if setup is not None:
            setup(wd)
        specs: list[str] = [a for spec in extra_agents for a in ("--agent", spec)]
        for name, lines in agents.items():
            specs += ["--agent", script(wd, name, lines)]
        args = ("run", str(suite), *specs, "--max-turns", "12", "--concurrency", "4", "-q")
        res = cli(*args, cwd=wd, timeout=90, env=env)
        runs: dict[str, dict[str, Any]] = {}
        err = None
        try:
            runs = runs_by_name(report_json(wd))
        except (AssertionError, json.JSONDecodeError, KeyError) as e:
            err = str(e)[:2000]
        yield Campaign(wd, res, runs, err, args, env)


def _assert_scored(c: Campaign, name: str, *, score: float, passed: bool) -> None:
    run = c.run(name)
    assert run["status"] == "done", "a void or broken run where a scored one was due: " + c.describe(name)
    assert run["end_reason"] not in ("harness_error", "grader_error"), c.describe(name)
    assert run["score"] == pytest.approx(score), c.describe(name)
    assert run["passed"] is passed, c.describe(name)


# --------------------------------------------------------------------------- tool arguments


def _model_turn(body: dict[str, Any]) -> Reply:
    """The model agent: a `run_command` whose raw arguments hold a 400-digit negative integer
    (JSON a provider sends as it is; Python reads integers up to 4,300 digits), then the answer."""
    done = sum(1 for m in body.get("messages") or [] if m.get("role") == "tool")
    if done == 0:
        raw = '{"command": "echo hi", "timeout_s": -' + "9" * 400 + "}"
        return reply("", [("run_command", raw)])
    if done == 1:
        return reply("", [("write_file", {"path": "answer.txt", "content": "42\n"})])
    return reply("I wrote 42 into answer.txt.")


@pytest.fixture(scope="module")
def tool_args() -> Iterator[Campaign]:
    agents = {
        "honest_a": HONEST,
        "neg_timeout": [
            {"tool": "run_command", "args": {"command": "echo hi", "timeout_s": HUGE_NEGATIVE}},
            _write("answer.txt", "42\n"),
            {"say": "done"},
        ],
    }
    srv = FakeOpenAIServer(handler=_model_turn)
    with srv:
        yield from _campaign("r9args", lambda f: answer_task(f, second=False), agents, env={"M_KEY": "sk-test"},
                             setup=lambda wd: model_alias(wd, "m", "openai", srv.url, api_key_env="M_KEY"),
                             extra_agents=["m"])


def test_control_honest_run_beside_hostile_tool_arguments(tool_args: Campaign) -> None:
    _assert_scored(tool_args, "honest_a", score=1.0, passed=True)


def test_negative_timeout_past_a_float_is_a_tool_error_not_a_void_run(tool_args: Campaign) -> None:
    """The widest negative integer a script line may hold is a tool error the agent reads (one
    of 1,024 bits, past a float, is refused with the script file: exit 2 naming the field)."""
    _assert_scored(tool_args, "neg_timeout", score=1.0, passed=True)
    events = show(tool_args.wd, tool_args.run("neg_timeout")["run_id"])["events"]
    first = outputs(events)[0]
    assert first.startswith("error"), f"the bad timeout_s should be a tool error the agent reads, got: {first[:300]!r}"


def test_a_models_negative_timeout_past_a_float_is_a_tool_error_not_a_void_run(tool_args: Campaign) -> None:
    """The same from a model's tool call (OpenAI wire format, a 400-digit integer)."""
    _assert_scored(tool_args, "m", score=1.0, passed=True)
    first = outputs(show(tool_args.wd, tool_args.run("m")["run_id"])["events"])[0]
    assert first.startswith("error"), f"the bad timeout_s should be a tool error the model reads, got: {first[:300]!r}"


# --------------------------------------------------------------------------- a symlink chain, read by a file tool


@pytest.fixture(scope="module")
def chain_read() -> Iterator[Campaign]:
    agents = {
        "honest_b": HONEST,
        "chain_read": [
            _write("mk.py", MAKE_CHAIN),
            cmd("python3 mk.py && ls c | wc -l"),
            {"tool": "read_file", "args": {"path": "c/l0"}},
            cmd("rm -rf c mk.py"),
            _write("answer.txt", "42\n"),
            {"say": "done"},
        ],
        "chain_cwd": [
            _write("mk.py", MAKE_CHAIN),
            cmd("python3 mk.py && ls c | wc -l"),
            {"tool": "run_command", "args": {"command": "pwd", "cwd": "c/l0"}},
            cmd("rm -rf c mk.py"),
            _write("answer.txt", "42\n"),
            {"say": "done"},
        ],
    }
    yield from _campaign("r9chainread", lambda f: answer_task(f, second=False), agents, env=NO_VOLUME)


def test_read_file_on_a_long_symlink_chain_is_a_tool_error_not_a_void_run(chain_read: Campaign) -> None:
    """`resolve` calls `os.path.realpath`, which recurses once per link of a chain:
    RecursionError is not in the tool box's list, so the run went void (harness_error)."""
    _assert_scored(chain_read, "chain_read", score=1.0, passed=True)
    outs = outputs(show(chain_read.wd, chain_read.run("chain_read")["run_id"])["events"])
    assert len(outs) >= 3 and outs[2].startswith("error"), f"read_file on the chain: {outs[2:3]!r}"


def test_run_command_with_a_cwd_through_a_long_symlink_chain_is_a_tool_error(chain_read: Campaign) -> None:
    """The same through `run_command`'s `cwd` (`Sandbox._inner_cwd` -> `resolve`)."""
    _assert_scored(chain_read, "chain_cwd", score=1.0, passed=True)
    outs = outputs(show(chain_read.wd, chain_read.run("chain_cwd")["run_id"])["events"])
    assert len(outs) >= 3 and outs[2].startswith("error"), f"run_command with the chain as cwd: {outs[2:3]!r}"


def test_control_honest_run_beside_the_chain_reader(chain_read: Campaign) -> None:
    _assert_scored(chain_read, "honest_b", score=1.0, passed=True)


# --------------------------------------------------------------------------- a symlink chain left for the checks


@pytest.fixture(scope="module")
def chain_checks() -> Iterator[Campaign]:
    agents = {
        "honest_c": HONEST,
        "chain_wrong": [
            _write("answer.txt", "41\n"),
            _write("mk.py", MAKE_CHAIN),
            cmd("python3 mk.py && rm mk.py && ls c | wc -l"),
            {"say": "done"},
        ],
    }
    yield from _campaign("r9chainchecks", lambda f: answer_task(f, checks=CHECKS, contract_on=False), agents,
                         env=NO_VOLUME)


def test_a_symlink_chain_left_for_the_checks_is_a_scored_failure_not_a_void_run(chain_checks: Campaign) -> None:
    """A wrong answer plus 1,500 chained links: the checks' grading copy checks each copied link
    with `os.path.realpath` (RecursionError in the copy's process, raised as it is out of
    `grading_copy`), and `_Run.grade` made any exception a void run (grader_error)."""
    _assert_scored(chain_checks, "chain_wrong", score=0.0, passed=False)


def test_control_the_honest_run_beside_the_chain_is_scored(chain_checks: Campaign) -> None:
    _assert_scored(chain_checks, "honest_c", score=1.0, passed=True)


# --------------------------------------------------------------------------- a symlink chain in the kept workspace


@pytest.fixture(scope="module")
def chain_kept() -> Iterator[Campaign]:
    agents = {
        "honest_d": HONEST,
        "chain_left": [
            _write("answer.txt", "41\n"),
            _write("mk.py", MAKE_CHAIN),
            cmd("python3 mk.py && rm mk.py && ls c | wc -l"),
            {"say": "done"},
        ],
    }
    yield from _campaign("r9chainkept", lambda f: answer_task(f, second=False), agents)


def test_a_symlink_chain_in_the_kept_workspace_does_not_lose_the_run_or_the_campaign(chain_kept: Campaign) -> None:
    """A contract graded by its predicates alone (nothing resolves links there): the run is
    graded, then the workspace is copied out of its volume to be kept (`WorkspaceVolume.release`
    -> `copy_tree` -> `_drop_escaping_links` -> `os.path.realpath`). `release_workspace` catches
    HarnessError and OSError only; a RecursionError there leaves `execute_run` before its record
    is saved, and ends the lane and the campaign."""
    assert "fault of its own" not in chain_kept.result.stderr, "assay run crashed: " + chain_kept.result.tail()
    _assert_scored(chain_kept, "chain_left", score=0.0, passed=False)
    _assert_scored(chain_kept, "honest_d", score=1.0, passed=True)


def test_a_resume_after_the_chain_finishes_the_campaign(chain_kept: Campaign) -> None:
    """The attacker's run was never stored, so every `assay run` of the campaign runs it again:
    a resume must store it (and end), not crash the same way each time."""
    again = cli(*chain_kept.args, cwd=chain_kept.wd, timeout=90, env=chain_kept.env)
    assert "fault of its own" not in again.stderr, "the resume crashed again: " + again.tail()
    runs = runs_by_name(report_json(chain_kept.wd))
    assert runs.get("chain_left", {}).get("status") == "done", f"chain_left after a resume: {runs.get('chain_left')}"


def test_a_script_line_past_a_float_is_refused_with_its_file() -> None:
    """A script agent whose line holds `timeout_s` of -(2**1024 - 1), past a float's range, is
    refused before anything runs: exit 2 naming the script file and the field, no store made."""
    with workdir("r9-script") as wd:
        answer_task(wd / "tasks" / "t", second=False)
        spec = script(wd, "wide", [{"tool": "run_command", "args": {"command": "true", "timeout_s": -(2**1024 - 1)}},
                                   {"say": "done"}])
        r = cli("run", "tasks", "--agent", spec, "-q", cwd=wd, timeout=60)
        assert r.returncode == 2, r.tail()
        assert "wide.jsonl" in r.stderr and "timeout_s" in r.stderr and "Traceback" not in r.stderr, r.tail()
        assert not (wd / ".assay" / "assay.db").exists()
