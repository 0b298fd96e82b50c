"""The signed question log: every kind of tampering is reported."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from pathlib import Path

import pytest

from assay.people.ledger import Ledger, canonical, line_mac


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
