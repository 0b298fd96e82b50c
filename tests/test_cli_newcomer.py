"""What a newcomer meets first (issue 27, part 5): a mistyped store folder is refused instead
of made, `assay runs` finds the ids `assay show` takes, a too-short id prefix says so, and a
command where every run was skipped says that nothing ran and exits 1, and a fault of assay's
own ends in one line and a crash log, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import answer_task, assay


def _suite(tmp_path: Path, n: int = 2) -> Path:
    for i in range(n):
        answer_task(tmp_path / "suite" / f"t{i}", want=str(40 + i))
    return tmp_path / "suite"


def test_a_store_folder_that_does_not_exist_is_refused_unless_create(tmp_path: Path) -> None:
    suite = _suite(tmp_path, 1)
    missing = tmp_path / "no" / "such" / "dir"
    r = assay("run", str(suite), "--agent", "reference", "--store", f"sqlite:///{missing}/x.db", "-q", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"the folder {missing} does not exist" in r.stderr and "--create" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "no").exists()  # nothing made
    r = assay("import", "omb", str(tmp_path / "nothing.json"), "--store", str(missing / "x.db"), cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "no").exists(), r.stderr
    r = assay("run", str(suite), "--agent", "reference", "--store", f"sqlite:///{missing}/x.db", "--create", "-q",
              cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (missing / "x.db").is_file()
    # The default store's own folder is made without asking.
    r = assay("run", str(suite), "--agent", "reference", "-q", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / ".assay" / "assay.db").is_file(), r.stderr


def test_assay_runs_lists_ids_that_assay_show_takes(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    assert assay("run", str(suite), "--agent", "reference", "--agent", "noop", "-q", cwd=tmp_path).returncode == 0
    assert assay("run", str(suite), "--agent", "noop", "--campaign", "other", "-q", cwd=tmp_path).returncode == 0
    r = assay("runs", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert len(listed["runs"]) == 6 and listed["more"] is False
    created = [row["created_at"] for row in listed["runs"]]
    assert created == sorted(created, reverse=True)  # newest first
    r = assay("runs", "--json", "--agent", "reference", "--task", "t1", cwd=tmp_path)
    (row,) = json.loads(r.stdout)["runs"]
    assert (row["agent"], row["task_id"], row["status"], row["score"], row["passed"]) == ("reference", "t1", "done",
                                                                                          1.0, True)
    r = assay("show", row["run_id"], cwd=tmp_path)
    assert r.returncode == 0 and "t1" in r.stdout, r.stderr
    r = assay("runs", "--json", "--campaign", "other", cwd=tmp_path)
    assert {x["campaign"] for x in json.loads(r.stdout)["runs"]} == {"other"}
    r = assay("runs", "--json", "--limit", "2", cwd=tmp_path)
    limited = json.loads(r.stdout)
    assert len(limited["runs"]) == 2 and limited["more"] is True
    r = assay("runs", "--limit", "1", cwd=tmp_path)
    assert r.returncode == 0 and listed["runs"][0]["run_id"] in r.stdout and "more with --limit" in r.stdout
    r = assay("runs", "--status", "void", cwd=tmp_path)
    assert r.returncode == 0 and "no stored run matches" in r.stderr
    for args, field in ((["--status", "lost"], "--status"), (["--limit", "-1"], "--limit"),
                        (["--campaign", "nope"], "--campaign")):
        r = assay("runs", *args, cwd=tmp_path)
        assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_assay_runs_on_a_folder_without_a_store_is_exit_2(tmp_path: Path) -> None:
    r = assay("runs", cwd=tmp_path)
    assert r.returncode == 2 and "no store here yet" in r.stderr
    assert not (tmp_path / ".assay").exists()


def test_a_short_id_prefix_says_how_long_a_prefix_must_be(tmp_path: Path) -> None:
    suite = _suite(tmp_path, 1)
    assert assay("run", str(suite), "--agent", "reference", "-q", cwd=tmp_path).returncode == 0
    run_id = json.loads(assay("runs", "--json", cwd=tmp_path).stdout)["runs"][0]["run_id"]
    r = assay("show", run_id[:4], cwd=tmp_path)
    assert r.returncode == 2 and "at least 6 characters" in r.stderr and "assay runs" in r.stderr
    r = assay("show", run_id[:6], cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_nothing_to_run_because_every_run_was_skipped_is_exit_1(tmp_path: Path) -> None:
    task = answer_task(tmp_path / "suite" / "live", search="live")
    script = tmp_path / "s.jsonl"
    script.write_text(json.dumps({"tool": "write_file", "args": {"path": "answer.txt", "content": "42"}}) + "\n")
    r = assay("run", str(task.parent), "--agent", f"script:{script}", "--search", "off", "-q", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "needs web_search" in r.stderr and "nothing to run: every run was skipped (1 task(s)" in r.stderr


def test_limit_runs_the_first_n_tasks_of_each_path_in_discovery_order(tmp_path: Path) -> None:
    from tests.helpers import REPO

    paths = [REPO / "suites" / "starter" / "rubric", REPO / "suites" / "starter" / "contract"]
    listed = [json.loads(assay("tasks", str(p), "--json", cwd=tmp_path).stdout)["tasks"] for p in paths]
    want = sorted(t["id"] for rows in listed for t in rows[:2])
    r = assay("run", *map(str, paths), "--agent", "noop", "--limit", "2", "-q", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ran = sorted(x["task_id"] for x in json.loads(assay("runs", "--json", cwd=tmp_path).stdout)["runs"])
    assert ran == want and len(ran) == 4
    r = assay("run", str(paths[0]), "--agent", "noop", "--limit", "0", cwd=tmp_path)
    assert r.returncode == 2 and "--limit" in r.stderr


def test_a_fault_of_assay_itself_ends_in_a_message_and_a_crash_log_not_a_traceback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC: no command ever ends in a traceback. An exception assay did not expect (a bug of its
    own, e.g. a database refusing a value) prints one line naming it and a file holding the
    traceback, readable by this user only, and exits 1."""
    import stat

    import assay.cli as cli

    def broken() -> None:
        raise RuntimeError("value too long for type character varying(64)")

    monkeypatch.setattr(cli, "app", broken)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(SystemExit) as ended:
        cli.main()
    assert ended.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "RuntimeError: value too long for type character varying(64)" in err and "every finished run is kept" in err
    (log,) = tmp_path.glob("assay-crash-*.log")
    assert str(log) in err
    assert "Traceback" in log.read_text() and "def broken" not in err
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
