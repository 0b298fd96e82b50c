"""`assay calibrate --stored-labels`: the judge against the experts' labels of stored runs
(given on a run's page in `assay serve`), on those runs' answers, beside the task files'
own human labels. A judged rubric run from `assay run` (judge: the fake OpenAI server on
127.0.0.1), labels stored by `assay.store.labels` as the web app stores them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from assay.store import open_store
from assay.store.labels import ItemLabel, save_labels
from tests.e2e.test_rubric_e2e import decide_judged, judge_reply, judged_task, workdir
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import assay, model_alias, write_task


def test_calibrate_compares_the_judge_with_stored_expert_labels(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task = judged_task(tmp_path)
    store = f"sqlite:///{cwd / '.assay' / 'assay.db'}"
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, decide_judged)
        model_alias(cwd, "j", "openai", srv.url, model="judge-model")
        ran = assay("run", str(task), "--agent", "reference", "--judge", "j", "-q", "--json", "run.json", cwd=cwd)
        assert ran.returncode == 0, ran.stderr
        run = json.loads((cwd / "run.json").read_text())["runs"][0]
        with open_store(store) as s:
            # the judge said: cites met, units and rude not met. eve agrees on all three; fred
            # disagrees on cites; an item the judge does not grade (a machine check) is not compared
            save_labels(s, run["run_id"], "judged", "eve", [ItemLabel(item_id="cites", met=True),
                                                             ItemLabel(item_id="units", met=False),
                                                             ItemLabel(item_id="rude", met=False)])
            save_labels(s, run["run_id"], "judged", "fred", [ItemLabel(item_id="cites", met=False),
                                                              ItemLabel(item_id="value", met=False)])
        sent = len(srv.requests)
        r = assay("calibrate", str(task), "--judge", "j", "--stored-labels", "--json", "cal.json", cwd=cwd)
        assert r.returncode == 0, r.stderr
        assert len(srv.requests) == sent  # the same answer and prompts: served by the judge cache
        without = assay("calibrate", str(task), "--judge", "j", "--json", "files.json", cwd=cwd)
        assert without.returncode == 0, without.stderr
    cal = json.loads((cwd / "cal.json").read_text())
    (j,) = cal["judges"]
    # the reference answer with the file's labels (alice, bob on cites; alice on units: 3 of 3 agree)
    # and the run's answer with the stored ones (4 verdicts, 3 agree)
    assert cal["answers"] == 2 and j["failed"] == []
    assert j["overall"]["n_responses"] == 2 and j["overall"]["n_items"] == 7
    assert j["overall"]["item_agreement"] == pytest.approx(6 / 7)
    assert j["domains"]["finance"]["n_items"] == 7
    assert cal["unmatched"] == []
    files = json.loads((cwd / "files.json").read_text())["judges"][0]["overall"]
    assert files["n_responses"] == 1 and files["n_items"] == 3 and files["item_agreement"] == 1.0


def test_stored_labels_of_a_changed_task_are_left_out_and_none_at_all_is_exit_2(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task = judged_task(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, decide_judged)
        model_alias(cwd, "j", "openai", srv.url, model="judge-model")
        # no store yet: refused, nothing created
        bare = write_task(tmp_path / "bare", {"id": "bare", "title": "t", "domain": "d", "execution": "single-step",
                                              "prompt": "p", "rubric": {"items": [{"id": "a", "text": "x",
                                                                                   "weight": 1, "tag": "FI"}]}})
        r = assay("calibrate", str(bare), "--judge", "j", "--stored-labels", cwd=cwd)
        assert r.returncode == 2 and "no store" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (cwd / ".assay").exists()
        ran = assay("run", str(task), "--agent", "reference", "--judge", "j", "-q", "--json", "run.json", cwd=cwd)
        assert ran.returncode == 0, ran.stderr
        run_id = json.loads((cwd / "run.json").read_text())["runs"][0]["run_id"]
        # a store without labels: exit 2 with the reason
        r = assay("calibrate", str(bare), "--judge", "j", "--stored-labels", cwd=cwd)
        assert r.returncode == 2 and "holds no expert label" in r.stderr, r.stderr
        with open_store(f"sqlite:///{cwd / '.assay' / 'assay.db'}") as s:
            save_labels(s, run_id, "judged", "eve", [ItemLabel(item_id="cites", met=False)])
        # labels of a run whose task is not given: left out with a note, and then nothing is left
        r = assay("calibrate", str(bare), "--judge", "j", "--stored-labels", cwd=cwd)
        assert r.returncode == 2 and "holds no expert label" in r.stderr, r.stderr
        spec = task / "task.yaml"
        spec.write_text(spec.read_text().replace("Cites the source by name.", "Cites the source by its name."))
        r = assay("calibrate", str(task), "--judge", "j", "--stored-labels", "--json", "cal.json", cwd=cwd)
        assert r.returncode == 0, r.stderr
    cal = json.loads((cwd / "cal.json").read_text())
    assert cal["unmatched"] == [f"run:{run_id} (task judged has changed since the run)"]
    assert cal["answers"] == 1  # the file's own labelled reference answer only
