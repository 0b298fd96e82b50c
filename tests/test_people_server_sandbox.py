"""The stakeholder service over its Unix socket: protocol, clients, and bin/ask inside bubblewrap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from assay.people import server as server_module
from assay.people.ledger import Ledger
from assay.people.routing import LexicalRouter
from assay.people.server import (
    ASK_SCRIPT,
    MAX_REQUEST_BYTES,
    PILOT_SCRIPT,
    StakeholderServer,
    install_clients,
)
from assay.people.world import StakeholderWorld
from assay.task.people import load_npcs

FIXTURE = Path(__file__).parent / "fixtures" / "npcs" / "npcs.json"
PARAMS = {"cap": "500", "alice_patience": 6}


@pytest.fixture
def base() -> Iterator[Path]:
    """A parent the sandbox uid can traverse (0711), holding the workspace and the run dir."""
    d = Path(tempfile.mkdtemp(prefix="assay-ask-test-"))
    os.chmod(d, 0o711)
    (d / "ws").mkdir()
    (d / "run").mkdir(mode=0o711)
    os.chmod(d / "run", 0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def make_world(base: Path, **kw: Any) -> StakeholderWorld:
    spec = load_npcs(FIXTURE, PARAMS)
    ledger = Ledger.for_workspace(base / "ws", base / "run")
    return StakeholderWorld(spec, LexicalRouter(), ledger=ledger, **kw)


def pilot_runner(day: int) -> dict[str, Any]:
    return {"feedback": f"Trial day {day}: two customers complained.", "facts": [f"F_pilot_{day}"],
            "extra_cost": 0.0}


@pytest.fixture
async def server(base: Path) -> AsyncIterator[StakeholderServer]:
    srv = StakeholderServer(make_world(base, pilot_runner=pilot_runner), base / "run" / "sock" / "ask.sock")
    await srv.start()
    yield srv
    await srv.stop()


async def request(sock: Path, payload: bytes | dict) -> dict:
    reader, writer = await asyncio.open_unix_connection(str(sock))
    data = payload if isinstance(payload, bytes) else (json.dumps(payload) + "\n").encode()
    writer.write(data)
    await writer.drain()
    writer.write_eof()
    line = await reader.readline()
    writer.close()
    return json.loads(line)


# --------------------------------------------------------------------------- protocol


async def test_socket_permissions(server: StakeholderServer) -> None:
    assert stat.S_IMODE(os.stat(server.socket_path).st_mode) == 0o666
    assert stat.S_IMODE(os.stat(server.socket_path.parent).st_mode) == 0o755


async def test_protocol_ops(server: StakeholderServer) -> None:
    sock = server.socket_path
    who = await request(sock, {"op": "who"})
    assert who["ok"] and "Alice Chen — Finance lead" in who["text"]
    r = await request(sock, {"op": "ask", "to": "alice", "question": "What is the refund threshold?"})
    assert r == {"ok": True, "text": r["text"]} and "500 EUR cap" in r["text"]
    assert (await request(sock, {"op": "now"}))["text"].startswith("Mon 03 Mar 11:00")
    w = await request(sock, {"op": "wait", "duration": "1d"})
    assert w["ok"] and "It is now Tue 04 Mar 11:00." in w["text"] and "1 new message" in w["text"]
    assert (await request(sock, {"op": "wait", "hours": 1}))["ok"]
    inbox = await request(sock, {"op": "inbox"})
    assert "(new) Alice Chen: FYI" in inbox["text"]
    p = await request(sock, {"op": "pilot"})
    assert p["ok"] and "Trial day 1" in p["text"]
    bad_day = await request(sock, {"op": "pilot", "day": 1})
    assert not bad_day["ok"] and "day 2" in bad_day["error"]
    assert server.world.summary().facts_obtained == ["F_board_meeting", "F_pilot_1", "F_threshold_500"]


@pytest.mark.parametrize(("payload", "error"), [
    (b"this is not json\n", "not a JSON object"),
    (b"[1, 2, 3]\n", "not a JSON object"),
    (b"\xff\xfe garbage\n", "not a JSON object"),
    ({"op": "explode"}, "unknown op"),
    ({"nothing": 1}, "unknown op"),
    ({"op": "ask", "to": "alice"}, "question"),
    ({"op": "ask", "question": "hi"}, "`to`"),
    ({"op": "ask", "to": 5, "question": "hi"}, "`to`"),
    ({"op": "ask", "to": "zoe", "question": "hi"}, "unknown stakeholder 'zoe'"),
    ({"op": "wait"}, "duration"),
    ({"op": "wait", "duration": "soon"}, "bad duration"),
    ({"op": "wait", "hours": "x"}, "number"),
    ({"op": "pilot", "day": "two"}, "integer"),
])
async def test_garbage_gets_an_error_and_the_server_lives(server: StakeholderServer, payload: Any,
                                                          error: str) -> None:
    r = await request(server.socket_path, payload)
    assert r["ok"] is False and error in r["error"]
    assert (await request(server.socket_path, {"op": "who"}))["ok"]


async def test_oversized_request(server: StakeholderServer) -> None:
    big = b'{"op": "ask", "to": "alice", "question": "' + b"x" * (MAX_REQUEST_BYTES + 10) + b'"}\n'
    reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
    line = b""
    with contextlib.suppress(ConnectionError):
        writer.write(big)
        await writer.drain()
        writer.write_eof()
    with contextlib.suppress(ConnectionError):
        line = await reader.readline()
    writer.close()
    if line:  # the reply may be lost when the server hangs up while we still write
        assert json.loads(line) == {"ok": False, "error": "request too large"}
    assert server.world.ledger.entries == []
    assert (await request(server.socket_path, {"op": "who"}))["ok"]


async def test_abrupt_disconnects(server: StakeholderServer) -> None:
    for _ in range(5):
        _, writer = await asyncio.open_unix_connection(str(server.socket_path))
        writer.write(b'{"op": "wh')
        writer.close()
    assert (await request(server.socket_path, {"op": "who"}))["ok"]


async def test_several_requests_on_one_connection(server: StakeholderServer) -> None:
    reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
    writer.write(b'{"op": "now"}\n\n{"op": "who"}\nnope\n')
    writer.write_eof()
    replies = [json.loads(x) for x in (await reader.read()).splitlines()]
    writer.close()
    assert [r["ok"] for r in replies] == [True, True, False]


async def test_concurrent_clients(server: StakeholderServer) -> None:
    qs = [{"op": "ask", "to": "dave", "question": f"Is there a legal limit? #{i}"} for i in range(40)]
    replies = await asyncio.gather(*(request(server.socket_path, q) for q in qs))
    assert all(r["ok"] and "no legal limit" in r["text"] for r in replies)
    assert server.world.asked["dave"] == 40
    assert server.world.ledger.verify() == []


async def test_stop_removes_socket(base: Path) -> None:
    srv = StakeholderServer(make_world(base), base / "run" / "s2" / "ask.sock")
    await srv.start()
    await srv.stop()
    assert not srv.socket_path.exists()
    await srv.start()  # a stale socket file is replaced
    await srv.stop()


# --------------------------------------------------------------------------- bounds


async def test_connections_past_the_cap_are_told_the_service_is_busy(base: Path) -> None:
    srv = StakeholderServer(make_world(base), base / "run" / "cap" / "ask.sock", max_connections=2)
    await srv.start()
    try:
        held = [await asyncio.open_unix_connection(str(srv.socket_path)) for _ in range(2)]
        reader, writer = await asyncio.open_unix_connection(str(srv.socket_path))
        data = await asyncio.wait_for(reader.read(), 5)  # one line, then closed
        writer.close()
        reply = json.loads(data)
        assert reply["ok"] is False and reply["busy"] is True and "busy" in reply["error"]
        assert srv.conns.refused == 1
        for _, w in held:
            w.close()
        for _ in range(100):
            if srv.conns.open == 0:
                break
            await asyncio.sleep(0.01)
        assert (await request(srv.socket_path, {"op": "who"}))["ok"]
    finally:
        await srv.stop()


ABSURD: dict[str, tuple[bytes, str]] = {
    "digits_5000_hours": (b'{"op": "wait", "hours": ' + b"9" * 5000 + b"}\n", "too many digits"),
    "digits_5000_day": (b'{"op": "pilot", "day": ' + b"7" * 5000 + b"}\n", "too many digits"),
    "deep_list": (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    "deep_object": (b'{"op": ' * 30_000 + b"1" + b"}" * 30_000 + b"\n", "nested too deeply"),
    "nan": (b'{"op": "wait", "hours": NaN}\n', "NaN"),
    "infinity": (b'{"op": "wait", "hours": -Infinity}\n', "Infinity"),
    "hours_overflow": (b'{"op": "wait", "hours": ' + b"9" * 4000 + b"}\n", "out of range"),
    "long_op": (b'{"op": "' + b"x" * 100_000 + b'"}\n', "unknown op 'xxxx"),
    "deep_op": (b'{"op": ' + b"[" * 900 + b"]" * 900 + b"}\n", "unknown op <list>"),
}


@pytest.mark.parametrize("name", list(ABSURD))
async def test_absurd_input_is_a_clean_refusal(server: StakeholderServer, name: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    line, error = ABSURD[name]
    r = await request(server.socket_path, line)
    assert r["ok"] is False and r["error"].startswith("bad request: ") and error in r["error"], r
    assert len(r["error"]) < 200
    assert not [x for x in caplog.records if x.exc_info], "a traceback was logged"
    assert server.world.ledger.entries == []
    assert (await request(server.socket_path, {"op": "who"}))["ok"]


async def test_a_client_that_sends_nothing_is_closed_after_the_read_timeout(
        server: StakeholderServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server_module, "READ_TIMEOUT_S", 0.3)
    reader, writer = await asyncio.open_unix_connection(str(server.socket_path))
    writer.write(b'{"op": "wh')  # half a line, then silence
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert server.timeouts == 1 and server.conns.open == 0


async def test_a_question_over_the_cap_is_refused_and_not_recorded(server: StakeholderServer) -> None:
    r = await request(server.socket_path, {"op": "ask", "to": "alice", "question": "x" * (100 * 1024)})
    assert r["ok"] is False and "question too long" in r["error"]
    assert server.world.ledger.entries == []


@pytest.mark.parametrize("payload", [
    b'{"op": "ask", "to": "alice", "question": "refund threshold \\ud800 x"}\n',  # a JSON lone surrogate
    b'{"op": "ask", "to": "alice", "question": "refund threshold \xff\xfe"}\n',  # bytes that are not UTF-8
])
async def test_text_that_is_not_unicode_is_answered_and_recorded_escaped(server: StakeholderServer,
                                                                          payload: bytes) -> None:
    r = await request(server.socket_path, payload)
    assert r["ok"] is True and "500 EUR cap" in r["text"], r
    q = server.world.ledger.entries[-1]["question"]
    assert q.startswith("refund threshold \\ud") and q.encode("utf-8")
    assert server.world.ledger.verify() == []


async def test_slow_requests_run_on_the_servers_own_threads(base: Path) -> None:
    """A model-backed router's calls never occupy the event loop's default executor, which the
    services of every other run share."""
    names: list[str] = []

    class Blocking(LexicalRouter):
        blocking = True

        def match(self, *args: Any, **kw: Any) -> Any:
            names.append(threading.current_thread().name)
            return super().match(*args, **kw)

    spec = load_npcs(FIXTURE, PARAMS)
    world = StakeholderWorld(spec, Blocking(), ledger=Ledger.for_workspace(base / "ws", base / "run"))
    srv = StakeholderServer(world, base / "run" / "slow" / "ask.sock")
    await srv.start()
    try:
        qs = [{"op": "ask", "to": "alice", "question": f"What is the refund threshold? #{i}"} for i in range(6)]
        replies = await asyncio.gather(*(request(srv.socket_path, q) for q in qs))
        assert all(r["ok"] for r in replies)
        assert names and all(n.startswith("ask") for n in names), names
        assert len(set(names)) <= 2
    finally:
        await srv.stop()


# --------------------------------------------------------------------------- client scripts (host)


async def run_script(script: str, args: list[str], sock: Path) -> tuple[int, str, str]:
    env = {"PATH": "/usr/bin:/bin", "ASSAY_ASK_SOCKET": str(sock)}
    p = await asyncio.create_subprocess_exec(sys.executable, "-c", script, *args, env=env,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await p.communicate()
    assert p.returncode is not None
    return p.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("args", [[], ["alice"], ["--who", "extra"], ["--wait"], ["--wait", "2w"],
                                  ["--wait", "soon"], ["--frobnicate"], ["alice", "  "]])
async def test_ask_usage_exit_2(server: StakeholderServer, args: list[str]) -> None:
    code, _out, err = await run_script(ASK_SCRIPT, args, server.socket_path)
    assert code == 2 and "usage: ask" in err
    assert server.world.ledger.entries == []


async def test_ask_cli_on_host(server: StakeholderServer) -> None:
    sock = server.socket_path
    code, out, _ = await run_script(ASK_SCRIPT, ["--help"], sock)
    assert code == 0 and "ask --who" in out
    code, out, _ = await run_script(ASK_SCRIPT, ["alice", "What", "is", "the", "refund", "threshold?"], sock)
    assert code == 0 and "Alice Chen: The 500 EUR cap" in out
    assert server.world.ledger.entries[-1]["question"] == "What is the refund threshold?"
    code, out, err = await run_script(ASK_SCRIPT, ["zoe", "hi"], sock)
    assert code == 1 and "unknown stakeholder" in err
    code, out, _ = await run_script(ASK_SCRIPT, ["--wait", "6h"], sock)
    assert code == 0 and out.startswith("It is now Mon 03 Mar 17:00.")
    code, out, _ = await run_script(PILOT_SCRIPT, [], sock)
    assert code == 0 and "Trial day 1" in out
    code, out, err = await run_script(PILOT_SCRIPT, ["x"], sock)
    assert code == 2 and "usage: pilot" in err
    code, out, err = await run_script(ASK_SCRIPT, ["--who"], sock.parent / "missing.sock")
    assert code == 1 and "cannot be reached" in err


async def test_ask_retries_a_busy_service(tmp_path: Path) -> None:
    """Two busy refusals, then an answer: bin/ask prints the answer (it waits, then asks again)."""
    seen: list[bytes] = []

    async def flaky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readline())
        busy = len(seen) <= 2
        reply = {"ok": False, "busy": True, "error": "busy"} if busy else {"ok": True, "text": "hello there"}
        writer.write((json.dumps(reply) + "\n").encode())
        await writer.drain()
        writer.close()

    sock = tmp_path / "ask.sock"
    srv = await asyncio.start_unix_server(flaky, path=str(sock))
    try:
        code, out, err = await run_script(ASK_SCRIPT, ["alice", "hi"], sock)
        assert code == 0 and out.strip() == "hello there", err
        assert len(seen) == 3
    finally:
        srv.close()


async def test_ask_with_an_argument_that_is_not_utf8(server: StakeholderServer) -> None:
    env = {"PATH": "/usr/bin:/bin", "ASSAY_ASK_SOCKET": str(server.socket_path), "LC_ALL": "C.UTF-8"}
    p = await asyncio.create_subprocess_exec(sys.executable, "-c", ASK_SCRIPT, "alice", b"refund threshold \xff?",
                                             env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await p.communicate()
    assert p.returncode == 0 and b"500 EUR cap" in out, err
    assert server.world.ledger.entries[-1]["question"] == "refund threshold \\udcff?"


def test_install_clients(tmp_path: Path) -> None:
    install_clients(tmp_path, pilot=False)
    ask = tmp_path / "bin" / "ask"
    assert stat.S_IMODE(ask.stat().st_mode) == 0o755
    assert ask.read_text().startswith("#!/usr/bin/env python3\n")
    assert not (tmp_path / "bin" / "pilot").exists()
    install_clients(tmp_path, pilot=True)
    assert stat.S_IMODE((tmp_path / "bin" / "pilot").stat().st_mode) == 0o755
    compile(ASK_SCRIPT, "ask", "exec")
    compile(PILOT_SCRIPT, "pilot", "exec")


# --------------------------------------------------------------------------- inside bubblewrap


def _bwrap_ok() -> bool:
    from assay.env.bwrap import bwrap_available

    return shutil.which("bwrap") is not None and bwrap_available()


needs_bwrap = pytest.mark.skipif(not _bwrap_ok(), reason="bubblewrap (bwrap) not usable here")


@needs_bwrap
async def test_bin_ask_inside_the_sandbox(base: Path) -> None:
    from assay.env.sandbox import Sandbox

    ws, run = base / "ws", base / "run"
    install_clients(ws, pilot=True)
    world = make_world(base, pilot_runner=pilot_runner)
    srv = StakeholderServer(world, run / "sock" / "ask.sock")
    await srv.start()
    sb = Sandbox(ws, ro_binds=[(run / "sock", "/run/assay")])
    try:
        sb.prepare()
        r = await sb.run("python3 bin/ask --who", timeout_s=60)
        assert r.exit_code == 0, r.output
        assert "alice        Alice Chen — Finance lead" in r.output
        r = await sb.run('bin/ask alice "Who came up with the ceiling on money-back payouts?"', timeout_s=60)
        assert r.exit_code == 0, r.output
        assert "Alice Chen: The 500 EUR cap was set by the board in 2021." in r.output
        r = await sb.run("bin/ask --now && bin/ask --wait 1d && bin/ask --inbox", timeout_s=60)
        assert r.exit_code == 0, r.output
        assert "It is now Tue 04 Mar 11:00." in r.output and "(new) Alice Chen: FYI" in r.output
        r = await sb.run("bin/pilot 1", timeout_s=60)
        assert r.exit_code == 0 and "Trial day 1" in r.output, r.output
        r = await sb.run("bin/ask zoe hi; echo rc=$?; bin/ask; echo rc=$?", timeout_s=60)
        assert "unknown stakeholder" in r.output and "rc=1" in r.output and "rc=2" in r.output
        # the agent sees its own log, and it is signed
        r = await sb.run("cat logs/ask.jsonl", timeout_s=60)
        assert r.exit_code == 0 and '"to": "alice"' in r.output and '"mac"' in r.output
        # the socket directory is read-only inside, and the ledger head is not there
        r = await sb.run("ls /run/assay; touch /run/assay/x; echo rc=$?", timeout_s=60)
        assert "ask.sock" in r.output and "rc=1" in r.output and "ledger" not in r.output
        assert world.ledger.verify(ws / "logs" / "ask.jsonl") == []
        s = world.summary()
        assert s.questions_asked == 1 and "F_threshold_500" in s.facts_obtained
        assert [e["to"] for e in world.ledger.entries] == ["alice", "wait", "inbox", "pilot"]
        # tampering from inside is caught
        r = await sb.run("sed -i 's/F_threshold_500/F_other/' logs/ask.jsonl; echo done", timeout_s=60)
        assert world.ledger.verify(ws / "logs" / "ask.jsonl") != [] or os.geteuid() == 0
    finally:
        await sb.close()
        await srv.stop()


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="a dedicated sandbox uid needs a root harness")
async def test_log_written_by_root_cannot_be_edited_from_inside(base: Path) -> None:
    """As root, the harness-created logs/ dir stays root's: the agent can read but not rewrite it."""
    from assay.env.sandbox import Sandbox

    ws, run = base / "ws", base / "run"
    install_clients(ws, pilot=False)
    world = make_world(base)
    srv = StakeholderServer(world, run / "sock" / "ask.sock")
    await srv.start()
    sb = Sandbox(ws, ro_binds=[(run / "sock", "/run/assay")])
    try:
        sb.prepare()
        r = await sb.run('bin/ask alice "What is the refund threshold?"', timeout_s=60)
        assert r.exit_code == 0, r.output
        r = await sb.run("echo forged >> logs/ask.jsonl; echo rc=$?", timeout_s=60)
        assert "rc=1" in r.output
        assert world.ledger.verify() == []
    finally:
        await sb.close()
        await srv.stop()
