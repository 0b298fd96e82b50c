"""Expert grading (issue 13 part 3): an expert labels a judged rubric run's items on its page;
the labels are stored with who and when, and `assay report` compares the judge with them.

Real parts: the judged run comes from `assay run` with a judge served by the fake OpenAI
server on 127.0.0.1; accounts from `assay users add`; the real `assay serve` on a free
127.0.0.1 port, driven over HTTP as a browser would (sign-in form, cookie, CSRF field).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.e2e.test_rubric_e2e import by_agent, decide_judged, judge_reply, judged_task, workdir
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import answer_task, assay, model_alias
from tests.security.test_web_auth import hget, hpost, serve


def test_expert_labels_feed_judge_human_agreement(tmp_path: Path) -> None:
    cwd = workdir(tmp_path)
    task = judged_task(tmp_path)
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, decide_judged)
        model_alias(cwd, "j", "openai", srv.url, model="judge-model")
        ran = assay("run", str(task), "--agent", "reference", "--judge", "j", "-q", "--json", "run.json", cwd=cwd)
        assert ran.returncode == 0, ran.stderr
    run_id = json.loads((cwd / "run.json").read_text())["runs"][0]["run_id"]
    store = f"sqlite:///{cwd / '.assay' / 'assay.db'}"
    tokens = {}
    for name, role in (("eve", "expert"), ("fred", "expert"), ("alice", "user")):
        added = assay("users", "add", name, "--role", role, "--store", store, cwd=cwd)
        assert added.returncode == 0, added.stderr
        tokens[name] = added.stdout.strip()
    answer_task(cwd / "suite" / "answer")  # serve() offers a play suite; unused here
    with serve(cwd, store) as site:
        base = site["base"]
        # a person without the expert role cannot label
        r = hpost(f"{base}/api/runs/{run_id}/labels", headers={"Authorization": f"Bearer {tokens['alice']}"},
                       json={"labels": [{"item_id": "cites", "met": True}]})
        assert r.status_code == 403, r.text
        page = hget(f"{base}/runs/{run_id}", headers={"Authorization": f"Bearer {tokens['alice']}"})
        assert page.status_code == 200 and 'id="label-form"' not in page.text
        # the expert signs in and grades the judged items on the run page
        with httpx.Client(base_url=base, timeout=60) as eve:
            r = eve.post("/signin", data={"token": tokens["eve"], "next": f"/runs/{run_id}"}, headers={"Origin": base})
            assert r.status_code == 303, r.text
            page = eve.get(f"/runs/{run_id}")
            assert 'id="label-form"' in page.text
            items = re.findall(r'<tr data-item="([^"]+)">', page.text)
            assert items == ["cites", "units", "rude"]  # `value` is a machine check: not the judge's
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
            assert csrf
            form = {"csrf_token": csrf.group(1), "item_0": "cites", "met_0": "met", "note_0": "names source X",
                    "item_1": "units", "met_1": "met", "note_1": "",
                    "item_2": "rude", "met_2": "not", "note_2": "polite <b>enough</b>"}
            assert eve.post(f"/runs/{run_id}/labels", data=form).status_code == 403  # no Origin
            r = eve.post(f"/runs/{run_id}/labels", data=form, headers={"Origin": base})
            assert r.status_code == 303 and r.headers["location"].endswith("#labels"), r.text
            page = eve.get(f"/runs/{run_id}")
            shown = page.text[page.text.index('<section id="labels">'):]
            assert "names source X" in shown and "polite &lt;b&gt;enough&lt;/b&gt;" in shown
            # labelling an item again replaces the expert's own label
            form.update(met_1="not", note_1="no units given")
            assert eve.post(f"/runs/{run_id}/labels", data=form, headers={"Origin": base}).status_code == 303
        fred = {"Authorization": f"Bearer {tokens['fred']}"}
        r = hpost(f"{base}/api/runs/{run_id}/labels", headers=fred, json={"labels": [
            {"item_id": "value", "met": True}]})
        assert r.status_code == 400 and "judge-graded" in r.text
        r = hpost(f"{base}/api/runs/{run_id}/labels", headers=fred, json={"labels": [
            {"item_id": "cites", "met": "yes"}]})
        assert r.status_code == 400
        r = hpost(f"{base}/api/runs/{run_id}/labels", headers=fred, json={"labels": [
            {"item_id": "cites", "met": False, "note": "the source is not named properly"}]})
        assert r.status_code == 200, r.text
        stored = {(x["item_id"], x["labeller"]): x for x in r.json()["labels"]}
        assert set(stored) == {("cites", "eve"), ("units", "eve"), ("rude", "eve"), ("cites", "fred")}
        assert stored[("units", "eve")]["met"] is False and stored[("units", "eve")]["note"] == "no units given"
        assert all(x["created_at"] > 0 for x in stored.values())
        web_report = hget(f"{base}/api/report?campaign=default", headers=fred).json()
    # judge: cites met, units not, rude not. eve agrees on all three; fred disagrees on cites.
    rep_run = assay("report", "--campaign", "default", "--store", store, "--json", "rep.json", cwd=cwd)
    assert rep_run.returncode == 0, rep_run.stderr
    rep = json.loads((cwd / "rep.json").read_text())
    ha = by_agent(rep)["reference"]["human_agreement"]["finance"]
    assert ha["n"] == 4 and ha["raw_agreement"] == 0.75, ha
    assert ha["inter_rater"] == {"n": 1, "raw_agreement": 0.0}  # eve and fred on `cites`
    assert by_agent(web_report)["reference"]["human_agreement"] == by_agent(rep)["reference"]["human_agreement"]
    # a labels file adds to the stored labels
    labels = cwd / "labels.jsonl"
    labels.write_text(json.dumps({"run_id": run_id, "task_id": "judged", "item_id": "rude", "met": True,
                                  "labeller": "carol"}) + "\n")
    rep_run = assay("report", "--campaign", "default", "--store", store, "--labels", str(labels), "--json", "r2.json",
                    cwd=cwd)
    assert rep_run.returncode == 0, rep_run.stderr
    ha = by_agent(json.loads((cwd / "r2.json").read_text()))["reference"]["human_agreement"]["finance"]
    assert ha["n"] == 5 and ha["raw_agreement"] == 0.6, ha
    assert ha["inter_rater"] == {"n": 2, "raw_agreement": 0.0}  # and eve and carol on `rude`
