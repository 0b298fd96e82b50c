"""Small points of containment (issue 25, part 8), each attacked through the real harness.

1. The shared run folder. When the store sits under a folder sandbox uids cannot search (a
   0700 home), run folders go under /var/tmp/assay-runs/<digest>. Another local user can plant
   a symlink (or a folder of their own) there first; root must not create, chmod or use
   anything through it. Attacked on a stand-in of /var/tmp (`runs_root(..., shared=...)`) and
   once through `assay run` on the real path, cleaned up after.
2. Tool arguments are checked against each tool's JSON schema before the tool runs: a list for
   a path, `true` for a number, a missing argument, a NUL, a path longer than the OS allows
   are tool errors the agent reads, and the run goes on (never void). A hypothesis test sends
   random calls through the real `ToolBox`.
3. Control characters in names and text (newline, NUL, ESC, C1, bidi overrides) are shown
   escaped in `list_files` output and in `assay show`; `assay show --json` keeps the text.
4. A final message is stored once, not once in the record and again in the last assistant
   event: the store grows by about one copy of it, and `assay show` prints it as before.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security._cases import answer_task
from tests.security._support import bwrap_ok, cli, cmd, outputs, report_json, script, show, workdir

# isort: split
# --- the internal API used here (runs_root on a stand-in base; the ToolBox driven directly)
from assay.agent.tools import TOOL_SPECS, ToolBox, ToolOutput
from assay.campaign.runner import runs_root
from assay.env.limits import Limits
from assay.env.sandbox import CommandResult, Sandbox
from assay.errors import HarnessError
from assay.llm.messages import ToolCall

needs_bwrap = pytest.mark.skipif(not bwrap_ok(), reason="bubblewrap is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the shared run folder is only used by root")
OTHER_UID = 4242  # "another local user"


# --------------------------------------------------------------------------- 1. the shared run folder


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """A store under a 0700 folder (so `runs_root` takes the shared base), a world-writable
    sticky stand-in of /var/tmp, and a root-only victim folder holding a file."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    os.chmod(home, 0o700)
    store_dir = home / ".assay"
    var_tmp = tmp_path / "vartmp"
    var_tmp.mkdir()
    os.chmod(var_tmp, 0o1777)
    victim = tmp_path / "victim"
    victim.mkdir()
    os.chmod(victim, 0o700)
    (victim / "secret.txt").write_text("root only\n")
    yield {"store_dir": store_dir, "shared": var_tmp / "assay-runs", "victim": victim}


def _digest(store_dir: Path) -> str:
    return hashlib.sha256(str(store_dir.resolve()).encode()).hexdigest()[:12]


def _untouched(victim: Path) -> None:
    assert stat.S_IMODE(os.lstat(victim).st_mode) == 0o700, "the planted target was chmodded"
    assert sorted(os.listdir(victim)) == ["secret.txt"], "something was created in the planted target"


@needs_root
def test_runs_root_makes_private_folders(stand_in: dict[str, Path]) -> None:
    got = runs_root(stand_in["store_dir"], shared=stand_in["shared"])
    assert got == stand_in["shared"] / _digest(stand_in["store_dir"])
    for d in (stand_in["shared"], got):
        st_ = os.lstat(d)
        assert stat.S_ISDIR(st_.st_mode) and st_.st_uid == 0 and stat.S_IMODE(st_.st_mode) == 0o711
    assert runs_root(stand_in["store_dir"], shared=stand_in["shared"]) == got  # and again: reused


@needs_root
@pytest.mark.parametrize("where", ["base", "digest"])
def test_runs_root_refuses_a_planted_symlink(stand_in: dict[str, Path], where: str) -> None:
    shared, victim = stand_in["shared"], stand_in["victim"]
    if where == "base":
        shared.symlink_to(victim)
        planted = shared
    else:
        shared.mkdir(mode=0o711)
        planted = shared / _digest(stand_in["store_dir"])
        planted.symlink_to(victim)
    with pytest.raises(HarnessError) as e:
        runs_root(stand_in["store_dir"], shared=shared)
    assert str(planted) in str(e.value) and "link" in str(e.value)
    _untouched(victim)


@needs_root
@pytest.mark.parametrize("where", ["base", "digest"])
def test_runs_root_refuses_a_folder_of_another_user(stand_in: dict[str, Path], where: str) -> None:
    shared = stand_in["shared"]
    if where == "base":
        planted = shared
    else:
        shared.mkdir(mode=0o711)
        planted = shared / _digest(stand_in["store_dir"])
    planted.mkdir(mode=0o700)
    os.chown(planted, OTHER_UID, OTHER_UID)
    with pytest.raises(HarnessError) as e:
        runs_root(stand_in["store_dir"], shared=shared)
    assert str(planted) in str(e.value) and f"uid {OTHER_UID}" in str(e.value)
    assert stat.S_IMODE(os.lstat(planted).st_mode) == 0o700 and os.listdir(planted) == []


@needs_root
def test_runs_root_refuses_a_world_writable_folder(stand_in: dict[str, Path]) -> None:
    shared = stand_in["shared"]
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(HarnessError) as e:
        runs_root(stand_in["store_dir"], shared=shared)
    assert str(shared) in str(e.value) and "writable" in str(e.value)
    assert stat.S_IMODE(os.lstat(shared).st_mode) == 0o777 and os.listdir(shared) == []


@needs_root
@needs_bwrap
def test_assay_run_does_not_use_a_planted_run_folder() -> None:
    """Through the CLI: the store under a 0700 folder, /var/tmp/assay-runs/<digest> planted as a
    link to a root-only folder. The run is void with the reason; the folder is left as it was."""
    real = Path("/var/tmp/assay-runs")
    with workdir("planted") as wd:
        home = wd / "home"
        home.mkdir(mode=0o700)
        task = answer_task(home / "suite" / "answer")
        victim = wd / "victim"
        victim.mkdir(mode=0o700)
        (victim / "secret.txt").write_text("root only\n")
        agent = script(home, "writer", [cmd("echo 42 > answer.txt"), {"say": "done"}])
        real.mkdir(mode=0o711, exist_ok=True)  # what a first harness run makes: root's, 0711
        planted = real / _digest(home / ".assay")
        planted.symlink_to(victim)
        try:
            r = cli("run", str(task), "--agent", agent, cwd=home, timeout=180)
        finally:
            planted.unlink()
        assert r.returncode == 1, r.tail()
        _untouched(victim)
        (run,) = report_json(home)["runs"]
        assert run["status"] == "void" and run["end_reason"] == "harness_error", run
        reasons = [e["data"].get("reason", "") for e in show(home, run["run_id"])["events"] if e["kind"] == "error"]
        assert any(str(planted) in x and "link" in x for x in reasons), reasons


# --------------------------------------------------------------------------- 2. tool arguments by type

DEEP = "d/" * 2100 + "f"  # 4201 bytes: longer than PATH_MAX
LONG_NAME = "n" * 300  # a component over NAME_MAX (255 bytes)

# (tool call, a fragment the tool's error must hold); each must be refused, the run going on
BAD_CALLS: list[tuple[dict[str, Any], str]] = [
    ({"tool": "write_file", "args": {"path": ["a"], "content": "x"}}, "path"),
    ({"tool": "write_file", "args": {"path": {"p": 1}, "content": "x"}}, "path"),
    ({"tool": "run_command", "args": {"command": "touch ran-true", "timeout_s": True}}, "timeout_s"),
    ({"tool": "run_command", "args": {"command": "touch ran-str", "timeout_s": "5"}}, "timeout_s"),
    ({"tool": "run_command", "args": {"command": ["touch", "ran-list"]}}, "command"),
    ({"tool": "run_command", "args": {}}, "command"),
    ({"tool": "read_file", "args": {}}, "path"),
    ({"tool": "read_file", "args": {"path": "README.md", "offset": "3"}}, "offset"),
    ({"tool": "read_file", "args": {"path": "README.md", "limit": 1.5}}, "limit"),
    ({"tool": "read_file", "args": {"path": "README.md", "offset": True}}, "offset"),
    ({"tool": "write_file", "args": {"path": "c.txt", "content": 5}}, "content"),
    ({"tool": "write_file", "args": {"path": "c.txt"}}, "content"),
    ({"tool": "edit_file", "args": {"path": "README.md", "old_text": "hello", "new_text": "bye",
                                    "replace_all": "yes"}}, "replace_all"),
    ({"tool": "list_files", "args": {"path": 7}}, "path"),
    ({"tool": "write_file", "args": {"path": "a\u0000b", "content": "x"}}, "NUL"),
    ({"tool": "write_file", "args": {"path": DEEP, "content": "x"}}, "too long"),
    ({"tool": "write_file", "args": {"path": LONG_NAME, "content": "x"}}, "255"),
    ({"tool": "read_file", "args": {"path": LONG_NAME}}, "255"),
    ({"tool": "list_files", "args": {"path": DEEP}}, "too long"),
    ({"tool": "run_command", "args": {"command": "touch ran-cwd1", "cwd": LONG_NAME}}, "255"),
    ({"tool": "run_command", "args": {"command": "touch ran-cwd2", "cwd": DEEP}}, "too long"),
    ({"tool": "run_command", "args": {"command": "touch ran-cwd3", "cwd": "a\u0000"}}, "NUL"),
    ({"tool": "run_command", "args": {"command": "echo " + "x" * 200_000}}, "command"),
    ({"tool": "run_command", "args": {"command": "touch ran-nul\u0000"}}, "NUL"),
]


@needs_bwrap
def test_bad_tool_arguments_are_tool_errors_and_the_run_goes_on() -> None:
    with workdir("badargs") as wd:
        task = answer_task(wd / "suite" / "answer")
        lines = [c for c, _ in BAD_CALLS] + [
            # extra arguments the schema does not forbid, and a null optional one, are accepted
            {"tool": "run_command", "args": {"command": "echo ok-extra", "verbose": True, "cwd": None}},
            {"tool": "write_file", "args": {"path": "answer.txt", "content": "42\n"}},
            {"tool": "list_files", "args": {}},
            {"say": "done"}]
        agent = script(wd, "bad", lines)
        r = cli("run", str(task), "--agent", agent, cwd=wd, timeout=240)
        assert r.returncode == 0, r.tail()
        (run,) = report_json(wd)["runs"]
        assert run["status"] == "done" and run["end_reason"] == "finished", run
        assert run["score"] == 1.0 and run["passed"] is True, run
        outs = outputs(show(wd, run["run_id"])["events"])
        assert len(outs) == len(BAD_CALLS) + 3, outs[-3:]
        for (call, fragment), out in zip(BAD_CALLS, outs, strict=False):
            assert out.startswith("error:") and fragment in out, (call["tool"], str(call["args"])[:200], out[:400])
            assert "Traceback" not in out
        assert "ok-extra" in outs[len(BAD_CALLS)]
        listing = outs[-1]
        assert "answer.txt" in listing
        assert "['a']" not in listing and "ran-" not in listing, listing


class _FakeSandbox:
    """What `ToolBox` needs of a sandbox, with the real cwd check (`Sandbox._inner_cwd`) and no
    command run: random text is never executed."""

    uid = None
    volume = None
    inside_root = "/workspace"

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.limits = Limits()

    _inner_cwd = Sandbox._inner_cwd

    async def run(self, command: str, *, cwd: str = ".", timeout_s: float = 300) -> CommandResult:
        assert isinstance(command, str) and isinstance(timeout_s, float | int) and 0 < timeout_s <= 1800
        self._inner_cwd(cwd)
        return CommandResult(exit_code=0, output="", timed_out=False, duration_s=0.0, output_truncated=False)


class _FakeSearch:
    label = "fake"

    def search(self, query: str, k: int = 5) -> str:
        assert isinstance(query, str)
        return "no results"


_ODD = st.sampled_from(["", ".", "..", "/etc/passwd", "a\x00b", "n" * 300, DEEP, "README.md", "x" * 200_000,
                        10**400, 2**63, -1, True])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40) | _ODD,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_NAMES = sorted(TOOL_SPECS)


@st.composite
def _calls(draw: st.DrawFn) -> ToolCall:
    """A call of a random tool (or an unknown one) with some of its arguments, maybe an extra one,
    each of any JSON value; odd strings and numbers (paths too long, NUL, huge integers) often."""
    name = draw(st.sampled_from([*_NAMES, "no_such_tool"]))
    props = sorted(TOOL_SPECS[name].parameters["properties"]) if name in TOOL_SPECS else []
    keys = draw(st.lists(st.sampled_from([*props, "extra"]), max_size=len(props) + 1, unique=True))
    return ToolCall(id="h", name=name, arguments={k: draw(st.one_of(_ODD, _ODD, _JSON)) for k in keys})


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=_calls())
def test_random_tool_calls_never_raise_out_of_the_toolbox(tmp_path: Path, call: ToolCall) -> None:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "README.md").write_text("hello\n")
    box = ToolBox(ws, _FakeSandbox(ws), _NAMES, search=_FakeSearch())  # type: ignore[arg-type]
    out = asyncio.run(box.run(call))
    assert isinstance(out, ToolOutput) and isinstance(out.text, str)
    out.text.encode()  # always valid UTF-8 for the store
    if call.name == "no_such_tool":
        assert out.text.startswith("error: unknown tool")


def test_the_toolbox_names_the_bad_argument(tmp_path: Path) -> None:
    box = ToolBox(tmp_path, _FakeSandbox(tmp_path), _NAMES)  # type: ignore[arg-type]

    def run(name: str, **args: Any) -> str:
        return asyncio.run(box.run(ToolCall(id="t", name=name, arguments=args))).text

    assert run("write_file", path=["a"], content="x") == "error: argument 'path' must be a string, not an array"
    assert not any(tmp_path.iterdir())
    assert run("run_command", command="true", timeout_s=True) == \
        "error: argument 'timeout_s' must be a number, not a boolean (true)"
    assert run("read_file") == "error: missing required argument 'path'"
    assert run("read_file", path="x", offset=2**80).startswith("error: x: no such file")  # a big int is an int
    deep: Any = "x"
    for _ in range(200):
        deep = [deep]
    assert "nested" in run("write_file", path="a", content=deep)


# --------------------------------------------------------------------------- 3. control characters shown escaped


def test_escape_controls() -> None:
    from assay.record import escape_controls

    assert escape_controls("a\nb\tc\x00d\x1b[31m\x7f\x85\u202e\u2066\ud800 é 日本") == \
        "a\\nb\\tc\\x00d\\x1b[31m\\x7f\\x85\\u202e\\u2066\\ud800 é 日本"
    assert escape_controls("line 1\nline\t2\r\n", keep_lines=True) == "line 1\nline\t2\\r\n"
    assert escape_controls("plain text, C:\\path") == "plain text, C:\\path"


MAKE_NAMES = ("printf x > \"$(printf 'a\\nb.txt')\"; printf x > \"$(printf 'c\\033[2Jd')\"; "
              "printf x > \"$(printf '\\342\\200\\256txt.exe')\"; printf x > \"$(printf 'e\\302\\205f')\"; "
              "mkdir \"$(printf 'dir\\tx')\"; ln -s \"$(printf 'to\\nx')\" link; echo 42 > answer.txt")
FINAL = "done\u0000 \u001b[2J\u202eevil"


@needs_bwrap
def test_control_characters_are_shown_escaped() -> None:
    with workdir("controls") as wd:
        task = answer_task(wd / "suite" / "answer")
        agent = script(wd, "names", [cmd(MAKE_NAMES), {"tool": "list_files", "args": {}},
                                     cmd("printf 'out\\033[31m red\\000 \\342\\200\\256x\\n'"), {"say": FINAL}])
        r = cli("run", str(task), "--agent", agent, cwd=wd, timeout=180)
        assert r.returncode == 0, r.tail()
        (run,) = report_json(wd)["runs"]
        shown = show(wd, run["run_id"])
        listing = outputs(shown["events"])[1]
        lines = listing.splitlines()
        assert "a\\nb.txt (1 bytes)" in lines, listing
        assert "c\\x1b[2Jd (1 bytes)" in lines and "\\u202etxt.exe (1 bytes)" in lines, listing
        assert "e\\x85f (1 bytes)" in lines and "dir\\tx/" in lines and "link -> to\\nx" in lines, listing
        assert not any(c in listing for c in "\x1b\u202e\x85\t"), listing
        assert len([x for x in lines if not x.startswith("[")]) == 8, listing  # 7 entries + README.md
        # --json keeps the exact text; the terminal view escapes it
        final = [e for e in shown["events"] if e["kind"] == "assistant"][-1]["data"]["content"]
        assert final == FINAL
        text = cli("show", run["run_id"], cwd=wd, timeout=60)
        assert text.returncode == 0, text.tail()
        for raw in ("\x00", "\x1b", "\u202e", "\x85"):
            assert raw not in text.stdout, repr(raw)
        assert "done\\x00 \\x1b[2J\\u202eevil" in text.stdout
        assert "out\\x1b[31m red\\x00 \\u202ex" in text.stdout


# --------------------------------------------------------------------------- 4. the final message stored once

BIG = 4 * 1024 * 1024


def _store_bytes(wd: Path) -> int:
    """The SQLite store's size once compacted (VACUUM), so free pages do not count."""
    db = wd / ".assay" / "assay.db"
    con = sqlite3.connect(db)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        con.execute("VACUUM")
    finally:
        con.close()
    return db.stat().st_size


@needs_bwrap
def test_a_big_final_message_is_stored_once() -> None:
    sizes = {}
    big = ("All of it. " * (BIG // 11 + 1))[:BIG]
    with workdir("final-small") as small_wd, workdir("final-big") as big_wd:
        for wd, said in ((small_wd, "done"), (big_wd, big)):
            task = answer_task(wd / "suite" / "answer")
            agent = script(wd, "say", [cmd("echo 42 > answer.txt"), {"say": said}])
            r = cli("run", str(task), "--agent", agent, cwd=wd, timeout=180)
            assert r.returncode == 0, r.tail()
            sizes[said == big] = _store_bytes(wd)
        grown = sizes[True] - sizes[False]
        assert 0.9 * BIG < grown < 1.3 * BIG, f"the store grew by {grown} bytes for a {BIG}-byte final message"
        # what is shown is unchanged: the last assistant event still holds the whole message
        (run,) = report_json(big_wd)["runs"]
        shown = show(big_wd, run["run_id"])
        last = [e for e in shown["events"] if e["kind"] == "assistant"][-1]
        assert last["data"] == {"content": big, "tool_calls": [], "citations": []}
        text = cli("show", run["run_id"], cwd=big_wd, timeout=60)
        assert text.returncode == 0 and "All of it. All of it." in text.stdout, text.tail()


def test_events_of_old_stores_are_read_as_stored(tmp_path: Path) -> None:
    """Rows written before the final message was stored once (the event holds its own copy)
    read back unchanged, and so do runs whose last assistant event is not the final message."""
    from assay.record import AssistantEvent, RunKey, RunRecord
    from assay.store import open_store

    def record(run_id: str, final: str) -> RunRecord:
        key = RunKey(campaign="c", task_id=run_id, task_hash="h", agent="a", level=None, epoch=1, options_hash="o")
        return RunRecord(run_id=run_id, key=key, kinds=["contract"], harness_version="t", status="done",
                         end_reason="finished", final_message=final)

    with open_store(f"sqlite:///{tmp_path / 'a.db'}") as s:
        s.save_run(record("r1", "the answer"), [AssistantEvent(seq=0, t=0.0, content="the answer")])
        s.save_run(record("r2", "other"), [AssistantEvent(seq=0, t=0.0, content="not the final one")])
        with s.engine.begin() as c:  # an old row: the event keeps its copy and has no reference
            c.exec_driver_sql("UPDATE events SET data = ? WHERE run_id = 'r1'",
                              (json.dumps({"content": "the answer", "tool_calls": [], "citations": []}),))
        assert [e.wire() for e in s.events("r1")] == [
            {"seq": 0, "t": 0.0, "kind": "assistant", "data": {"content": "the answer", "tool_calls": [],
                                                               "citations": []}}]
        assert s.events("r2")[0].content == "not the final one"  # type: ignore[union-attr]
