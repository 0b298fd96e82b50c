"""The signed question log: every kind of tampering is reported."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from assay.people import ledger as ledger_module
from assay.people.ledger import MAX_PROBLEMS, Ledger, canonical, line_mac
from assay.record import safe_text


def rec(i: int, to: str = "alice") -> dict:
    return {"ts": 1000.0 + i, "at": f"Mon 03 Mar {9 + i:02d}:00", "to": to, "question": f"question {i}",
            "topics": ["t"], "facts": [f"F_{i}"], "n_asked": i, "cost": 0.01}


@pytest.fixture
def filled(tmp_path: Path) -> Ledger:
    led = Ledger.for_workspace(tmp_path / "ws", tmp_path / "run")
    for i in range(1, 6):
        led.append(rec(i))
    return led


def lines(led: Ledger) -> list[str]:
    return led.log_path.read_text(encoding="utf-8").splitlines()


def write(led: Ledger, ls: list[str]) -> None:
    led.log_path.write_text("".join(x + "\n" for x in ls), encoding="utf-8")


def test_intact_log_verifies_and_chain_is_hmac(filled: Ledger) -> None:
    assert filled.verify() == []
    ls = [json.loads(x) for x in lines(filled)]
    prev = ""
    for r in ls:
        body = json.dumps({k: v for k, v in r.items() if k != "mac"}, ensure_ascii=False, sort_keys=True)
        assert r["mac"] == hmac.new(filled.key, (prev + body).encode(), hashlib.sha256).hexdigest()
        prev = r["mac"]
    assert filled.count == 5 and filled.last_mac == prev
    assert len(filled.entries) == 5


def test_key_and_head_live_outside_the_workspace(filled: Ledger, tmp_path: Path) -> None:
    head = tmp_path / "run" / "ask.ledger.json"
    assert oct(os.stat(head).st_mode & 0o777) == "0o600"
    data = json.loads(head.read_text())
    assert data["n"] == 5 and data["mac"] == filled.last_mac
    ws_text = "".join(p.read_text() for p in (tmp_path / "ws").rglob("*") if p.is_file())
    assert filled.key.hex() not in ws_text
    # re-opened from the head file (another process): same key, count and chain
    again = Ledger.for_workspace(tmp_path / "ws", tmp_path / "run")
    assert again.key == filled.key and again.count == 5
    assert again.verify() == []
    again.append(rec(6))
    assert again.verify() == []


def test_edited_line(filled: Ledger) -> None:
    ls = lines(filled)
    r = json.loads(ls[2])
    r["cost"] = 0.0
    r["facts"].append("F_key_fact")
    ls[2] = json.dumps(r)
    write(filled, ls)
    problems = filled.verify()
    assert any(p.startswith("line 3: edited") and "cost" in p and "facts" in p for p in problems), problems


def test_deleted_line(filled: Ledger) -> None:
    ls = lines(filled)
    del ls[1]
    write(filled, ls)
    problems = filled.verify()
    assert any("entry 2 missing" in p for p in problems), problems
    assert any("count mismatch" in p for p in problems)
    assert any("line 2: out of place" in p for p in problems)


def test_truncated_last_line(filled: Ledger) -> None:
    write(filled, lines(filled)[:-1])
    problems = filled.verify()
    assert any("entry 5 missing" in p for p in problems)
    assert any("last mac mismatch" in p for p in problems)


def test_reordered_lines(filled: Ledger) -> None:
    ls = lines(filled)
    ls[1], ls[2] = ls[2], ls[1]
    write(filled, ls)
    problems = filled.verify()
    assert any("line 2: out of place: it is entry 3" in p for p in problems), problems
    assert any("line 3: out of place: it is entry 2" in p for p in problems), problems


def test_appended_forged_line_with_guessed_mac(filled: Ledger) -> None:
    forged = rec(6, to="carol")
    forged["facts"] = ["F_secret"]
    guessed_key = b"0" * 32
    forged["mac"] = line_mac(guessed_key, filled.last_mac, forged)
    write(filled, [*lines(filled), json.dumps(forged)])
    problems = filled.verify()
    assert any(p.startswith("line 6: bad mac") for p in problems), problems
    assert any("count mismatch" in p for p in problems)
    # the same line with a plain sha256 "mac" is no better
    forged["mac"] = hashlib.sha256((filled.last_mac + canonical(forged)).encode()).hexdigest()
    write(filled, [*lines(filled)[:5], json.dumps(forged)])
    assert any(p.startswith("line 6: bad mac") for p in filled.verify())


def test_line_without_mac_and_garbage(filled: Ledger) -> None:
    write(filled, [*lines(filled), json.dumps(rec(7)), "not json", "[1, 2]", ""])
    problems = filled.verify()
    assert any("line 6: no mac" in p for p in problems)
    assert any("line 7: not JSON" in p for p in problems)
    assert any("line 8: not a JSON object" in p for p in problems)
    assert any("line 9: blank line" in p for p in problems)


def test_duplicated_line(filled: Ledger) -> None:
    ls = lines(filled)
    write(filled, [*ls, ls[-1]])
    problems = filled.verify()
    assert any("duplicated" in p for p in problems)


def test_removed_log(filled: Ledger) -> None:
    filled.log_path.unlink()
    assert any("removed" in p for p in filled.verify())


def test_chain_only_verification_after_reopen(filled: Ledger, tmp_path: Path) -> None:
    """Without the in-memory copies (a re-opened ledger), the chain still catches edits."""
    again = Ledger.for_workspace(tmp_path / "ws", tmp_path / "run")
    ls = lines(filled)
    r = json.loads(ls[0])
    r["question"] = "something else"
    ls[0] = json.dumps(r)
    write(again, ls)
    assert any(p.startswith("line 1: bad mac") for p in again.verify())


def test_symlinked_log_dir_is_not_followed(tmp_path: Path) -> None:
    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    (ws / "logs").symlink_to(elsewhere)
    led = Ledger.for_workspace(ws, tmp_path / "run")
    led.append(rec(1))
    assert list(elsewhere.iterdir()) == []  # nothing written through the planted link
    assert led.count == 1 and led.entries[0]["question"] == "question 1"  # trusted copy kept


def test_short_key_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        Ledger(tmp_path / "a.jsonl", key=b"short")


# --------------------------------------------------------------------------- text that is not valid Unicode


def test_safe_text_escapes_lone_surrogates() -> None:
    assert safe_text("plain ünïcode 😀") == "plain ünïcode 😀"
    assert safe_text("a \ud800 b \udcff") == "a \\ud800 b \\udcff"
    assert safe_text("a \ud800 b").encode("utf-8")  # valid UTF-8 now


def test_a_lone_surrogate_is_recorded_escaped(tmp_path: Path) -> None:
    seen: list[dict] = []
    led = Ledger.for_workspace(tmp_path / "ws", tmp_path / "run", on_append=seen.append)
    raw = dict(rec(1), question="label \ud800 x", topics=["t\udfff"])
    line = led.append(raw)
    assert line["question"] == "label \\ud800 x" and line["topics"] == ["t\\udfff"]
    assert seen == [line] and led.entries == [line]
    text = led.log_path.read_bytes().decode("utf-8")  # the log is valid UTF-8
    assert json.loads(text)["question"] == "label \\ud800 x"
    assert canonical(raw) == canonical(line)  # one signed form, whichever copy is signed
    assert line["mac"] == line_mac(led.key, "", raw)
    assert led.verify() == []
    assert raw["question"] == "label \ud800 x"  # the caller's record is left alone


def test_a_forged_line_with_a_surrogate_escape_is_reported(filled: Ledger) -> None:
    ls = lines(filled)
    ls.append('{"to": "alice", "question": "\\ud800", "mac": "00"}')
    ls.append('{"to": "alice", "question": "x", "mac": "\\u00e9\\ud800"}')  # a mac that is not ASCII
    write(filled, ls)
    problems = filled.verify()
    assert any(p.startswith("line 6: bad mac") for p in problems), problems
    assert any(p.startswith("line 7: bad mac") for p in problems), problems


@pytest.mark.parametrize("line", [
    "[" * 100_000 + "]" * 100_000,
    '{"to": "alice", "n_asked": ' + "9" * 5000 + ', "mac": "00"}',
    '{"mac": "00", "to": ' + "[" * 900 + "]" * 900 + "}",
])
def test_absurd_lines_are_reported_not_raised(filled: Ledger, line: str) -> None:
    write(filled, [*lines(filled), line])
    problems = filled.verify()
    assert any(p.startswith("line 6:") for p in problems), problems


# --------------------------------------------------------------------------- what verify reads


def test_a_log_replaced_by_a_link_is_not_followed(filled: Ledger, tmp_path: Path) -> None:
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"to": "root-only content", "mac": "00"}\n')
    filled.log_path.unlink()
    filled.log_path.symlink_to(secret)
    problems = filled.verify()
    assert problems and problems[0].startswith("question log ask.jsonl cannot be read"), problems
    assert "root-only" not in " ".join(problems)


def test_a_log_replaced_by_a_fifo_does_not_block(filled: Ledger) -> None:
    filled.log_path.unlink()
    os.mkfifo(filled.log_path)
    problems = filled.verify()  # would block forever on a blocking open
    assert problems and "cannot be read" in problems[0] and "special" in problems[0]


@pytest.mark.parametrize("reader", [False, True])
def test_an_append_to_a_log_replaced_by_a_fifo_does_not_block(filled: Ledger, reader: bool) -> None:
    """The agent swaps the log for a FIFO before its next question (with or without a process
    of its own holding the other end): the append neither blocks nor writes into the FIFO."""
    import threading

    filled.log_path.unlink()
    os.mkfifo(filled.log_path)
    held = os.open(filled.log_path, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    try:
        done = threading.Event()
        worker = threading.Thread(target=lambda: (filled.append({"to": "owner", "question": "q?"}), done.set()),
                                  daemon=True)
        worker.start()
        assert done.wait(5), "the append blocked on a FIFO"
        if held is not None:
            try:
                got = os.read(held, 10)
            except BlockingIOError:
                got = b""
            assert got == b"", "the harness wrote into the agent's FIFO"
    finally:
        if held is not None:
            os.close(held)
    assert filled.count == 6 and filled.entries[-1]["question"] == "q?"  # the trusted copy has it
    problems = filled.verify()
    assert problems and "special" in problems[0]


def test_a_log_dir_replaced_by_a_link_is_not_followed(filled: Ledger, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "ask.jsonl").write_text("\n".join(lines(filled)) + "\n")
    logs = filled.log_path.parent
    logs.rename(tmp_path / "old-logs")
    logs.symlink_to(elsewhere)
    problems = filled.verify()
    assert problems and "cannot be read" in problems[0], problems


def test_an_oversized_log_is_refused(filled: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_module, "MAX_LOG_BYTES", 100)
    problems = filled.verify()
    assert problems and "too large" in problems[0], problems


def test_problems_are_capped(filled: Ledger) -> None:
    write(filled, [*lines(filled), *(f"garbage {i}" for i in range(5000))])
    problems = filled.verify()
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1] == "... and 4950 more line(s) of the question log not checked"


def test_a_flood_of_forged_or_blank_lines_stops_at_the_cap_without_reading_the_rest(filled: Ledger) -> None:
    """64 MiB of blank lines or of forged ones: the check stops at MAX_PROBLEMS problems and
    counts the lines it did not read, with no list of them all and no message per line."""
    signed = lines(filled)
    for junk in ("", '{"mac": "0"}'):
        write(filled, [*signed, *([junk] * 2_000_000)])
        problems = filled.verify()
        assert len(problems) == MAX_PROBLEMS + 1
        assert problems[-1] == f"... and {2_000_000 - MAX_PROBLEMS} more line(s) of the question log not checked"
