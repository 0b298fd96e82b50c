"""`assay noise`: the harness's own noise over a campaign's epochs, on a store of known runs
(hand-computed variances, a flaky task flagged, a deterministic agent at 0), and the pure
`metrics.flakiness` / `metrics.epoch_noise` by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay import metrics
from assay.report.model import Noise
from assay.store import Store
from tests.helpers import answer_task, assay
from tests.test_report_read import _rec


def test_flakiness_and_epoch_noise_by_hand() -> None:
    assert metrics.flakiness([True, True, True]) == 0
    assert metrics.flakiness([True, False, True, True]) == 0.25
    assert metrics.flakiness([False, True]) == 0.5
    with pytest.raises(ValueError, match="no outcomes"):
        metrics.flakiness([])
    # Two tasks in both epochs (the third, in epoch 1 only, is left out): means 0.5 and 1.0.
    means, between, within = metrics.epoch_noise([{1: 1.0, 2: 1.0}, {1: 0.0, 2: 1.0}, {1: 0.0}])
    assert means == [0.5, 1.0]
    assert between == pytest.approx(0.125)  # ((0.5 - 0.75)^2 + (1 - 0.75)^2) / 1
    assert within == pytest.approx(0.25)  # (0 + 0.5) / 2
    assert metrics.epoch_noise([{1: 0.3}]) == ([0.3], None, None)


def test_noise_flags_the_flaky_task_and_shows_the_deterministic_floor(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    for epoch in (1, 2, 3, 4):
        for task in ("t1", "t2", "t3"):
            st.save_run(_rec("default", "reference", task, "contract", 1.0, epoch=epoch), [])
        st.save_run(_rec("default", "m", "t1", "contract", 1.0, epoch=epoch), [])
        st.save_run(_rec("default", "m", "t2", "contract", 1.0 if epoch != 3 else 0.0, epoch=epoch), [])
        st.save_run(_rec("default", "m", "t3", "contract", 1.0 if epoch % 2 else 0.0, epoch=epoch), [])
    st.save_run(_rec("default", "m", "t1", "contract", 0.0, epoch=5, void=True), [])
    st.close()

    out = tmp_path / "noise.json"
    r = assay("noise", "--threshold", "0.3", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = Noise.model_validate(json.loads(out.read_text()))
    by = {a.agent: a for a in data.agents}
    ref, m = by["reference"], by["m"]
    assert ref.between_epoch_var == 0 and ref.within_task_var == 0 and ref.flaky_tasks == 0 and not ref.flagged
    assert ref.void_rate == 0
    # m: epoch means 1, 2/3, 2/3, 2/3 (variance 1/36); t2 flips once in 4 (0.25), t3 twice (0.5): only t3 is over 0.3.
    assert m.epoch_means == pytest.approx([1, 2 / 3, 2 / 3, 2 / 3])
    assert m.between_epoch_var == pytest.approx(1 / 36)
    assert m.flaky_tasks == 2 and [t.task_id for t in m.flagged] == ["t3"] and m.flagged[0].passes == 2
    assert m.void_rate == pytest.approx(1 / 13)
    assert "flaky: t3 passed 2 of 4 epochs" in r.stdout and "candidate for assay curate" in r.stdout

    bad = assay("noise", "--agent", "nobody", cwd=tmp_path)
    assert bad.returncode == 2 and "--agent" in bad.stderr and "nobody" in bad.stderr
    bad = assay("noise", "--threshold", "0.7", cwd=tmp_path)
    assert bad.returncode == 2 and "--threshold" in bad.stderr


def test_noise_reads_each_run_pass_by_its_kind_rule(tmp_path: Path) -> None:
    """A scenario passes when solved (S >= 0.8 and no incident), not at the rubric's 0.7 line:
    S of 0.75 and 0.85 in turn (both over 0.7) is a task that flips, as its runs were graded."""
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    for epoch in (1, 2, 3, 4):
        s = 0.75 if epoch % 2 else 0.85  # `_rec`'s S is this less its contact cost of 0.1
        rec = _rec("default", "m", "s1", "scenario", s + 0.1, epoch=epoch)
        st.save_run(rec.model_copy(update={"passed": s >= metrics.SOLVED_THRESHOLD}), [])
    st.close()
    out = tmp_path / "noise.json"
    r = assay("noise", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    (m,) = Noise.model_validate(json.loads(out.read_text())).agents
    assert m.flaky_tasks == 1 and [(t.task_id, t.passes, t.flakiness) for t in m.flagged] == [("s1", 2, 0.5)]


def test_noise_runs_a_suite_with_the_reference_floor_and_resumes(tmp_path: Path) -> None:
    """`assay noise SUITE --agent A --epochs K` runs A and the reference policy K times, then
    measures both; the same command again runs nothing and measures the same."""
    answer_task(tmp_path / "suite" / "one", "41")
    answer_task(tmp_path / "suite" / "two", "42")
    out = tmp_path / "noise.json"
    r = assay("noise", "suite", "--agent", "noop", "--epochs", "2", "-q", "--json", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "8 runs this time, 0 already done" in r.stderr
    data = Noise.model_validate(json.loads(out.read_text()))
    assert data.campaign == "noise"
    by = {a.agent: a for a in data.agents}
    assert set(by) == {"noop", "reference"}
    for name, mean in (("noop", 0.0), ("reference", 1.0)):
        a = by[name]
        assert (a.runs, a.epochs, a.attempts) == (4, 2, 4)
        assert a.epoch_means == [mean, mean] and a.between_epoch_var == 0 and a.flaky_tasks == 0
    again = assay("noise", "suite", "--agent", "noop", "--epochs", "2", "-q", "--json", str(out), cwd=tmp_path)
    assert again.returncode == 0 and "0 runs this time, 8 already done" in again.stderr
    assert Noise.model_validate(json.loads(out.read_text())) == data


@pytest.mark.parametrize(("args", "flag"), [
    (["suite", "--agent", "noop", "--epochs", "1"], "--epochs"),
    (["suite"], "--agent"),
    (["--epochs", "3"], "--epochs"),
])
def test_noise_refuses_a_run_it_cannot_measure(tmp_path: Path, args: list[str], flag: str) -> None:
    answer_task(tmp_path / "suite" / "one")
    r = assay("noise", *args, cwd=tmp_path)
    assert r.returncode == 2 and flag in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / ".assay" / "assay.db").exists()  # refused before anything ran
