"""The current attempt of every run key (`current_runs`, `assay.store.current`), written by
`Store.save_runs` in the save's own transaction, on SQLite and PostgreSQL: a higher attempt
replaces the key's row, a lower one saved late never does, two attempts of a key in one batch
leave the higher, and a save whose current row fails stores nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from assay.store import open_store
from assay.store.models import current_t
from tests.test_report_read import _rec


def _current(st) -> dict[str, tuple[int, str, float | None]]:  # type: ignore[no-untyped-def]
    c = current_t.c
    with st.engine.connect() as conn:
        return {r.key_digest: (r.attempt, r.status, r.score)
                for r in conn.execute(select(c.key_digest, c.attempt, c.status, c.score))}


def test_a_higher_attempt_replaces_the_key_and_a_late_lower_one_does_not(store_url: str) -> None:
    void = _rec("c", "m1", "r1", "rubric", 0.0, void=True)
    rerun = _rec("c", "m1", "r1", "rubric", 0.8, attempt=2)
    late = _rec("c", "m1", "r1", "rubric", 0.0, void=True)  # attempt 1 again, saved after attempt 2
    with open_store(store_url) as st:
        st.save_run(void, [])
        assert _current(st) == {void.key.digest: (1, "void", None)}
        st.save_run(rerun, [])
        assert _current(st) == {void.key.digest: (2, "done", 0.8)}
        st.save_run(late, [])
        assert _current(st) == {void.key.digest: (2, "done", 0.8)}
        assert [r.run_id for r in st.runs("c")] == [rerun.run_id]  # the attempt `Store.runs` gives


def test_a_void_attempt_never_hides_a_graded_one_whatever_their_numbers(store_url: str) -> None:
    """A worker whose lease lapsed stores its graded attempt 1 after the attempt 2 that took its
    key over ended void: the graded one stays current (in either save order, and in one batch),
    so the failure is counted and the finished key is not left out of every score."""
    with open_store(store_url) as st:
        for campaign, batch in (("first", False), ("second", False), ("batch", True)):
            graded = _rec(campaign, f"m-{campaign}", "r1", "rubric", 0.0)
            took_over = _rec(campaign, f"m-{campaign}", "r1", "rubric", 0.0, void=True, attempt=2)
            if batch:
                st.save_runs([(took_over, []), (graded, [])])
            else:
                for r in ([graded, took_over] if campaign == "first" else [took_over, graded]):
                    st.save_run(r, [])
            assert _current(st)[graded.key.digest] == (1, "done", 0.0), campaign
            assert [r.status for r in st.runs(campaign)] == ["done"], campaign  # the attempt `Store.runs` gives


def test_two_attempts_of_a_key_in_one_batch_leave_the_higher(store_url: str) -> None:
    a1 = _rec("c", "m1", "r1", "rubric", 0.0, void=True)
    a2 = _rec("c", "m1", "r1", "rubric", 0.6, attempt=2)
    other = _rec("c", "m2", "r1", "rubric", 0.4)
    with open_store(store_url) as st:
        outs = st.save_runs([(a2, []), (a1, []), (other, [])])
        assert all(o.stored for o in outs)
        assert _current(st) == {a1.key.digest: (2, "done", 0.6), other.key.digest: (1, "done", 0.4)}


def test_a_save_whose_current_row_fails_stores_nothing(store_url: str) -> None:
    """The current row is part of the save's transaction: when its write fails (the database
    refuses it here, through the engine's statement hook), neither the run nor the row is kept,
    and the key's earlier current row stands."""
    from sqlalchemy import event

    first = _rec("c", "m1", "r1", "rubric", 0.5, void=True)
    second = _rec("c", "m1", "r1", "rubric", 0.9, attempt=2)
    with open_store(store_url) as st:
        st.save_run(first, [])

        def refuse(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
            if "current_runs" in statement and statement.lstrip().upper().startswith("INSERT"):
                raise RuntimeError("the database refused the current row")

        event.listen(st.engine, "before_cursor_execute", refuse)
        with pytest.raises(RuntimeError, match="refused the current row"):
            st.save_run(second, [])
        event.remove(st.engine, "before_cursor_execute", refuse)
        assert _current(st) == {first.key.digest: (1, "void", None)}
        assert st.get_run(second.run_id) is None and st.get_run(first.run_id) is not None
