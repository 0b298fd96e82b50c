"""Inspect AI interop, offline and end to end: `assay export inspect` writes a task file that
Inspect runs (with `mockllm`, usage set on every output, as platform-notes says) and whose
scores are assay's own on the same answers; `assay import inspect` stores real `.eval` logs
as runs that `assay report` and `assay compare` cover; bad logs are refused, nothing written."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from assay.errors import InputError
from assay.interop.export import export_inspect
from assay.interop.inspect_import import convert_logs
from assay.interop.runs import store_imported
from assay.store import Store
from tests.e2e.test_rubric_e2e import ANSWER, JUDGE_MODEL, decide_judged, judge_reply, judged_task
from tests.fakes.openai_server import FakeOpenAIServer
from tests.helpers import REPO, assay, model_alias, run_docs_bash

inspect_ai = pytest.importorskip("inspect_ai", reason="the `inspect` extra (pip install -e '.[inspect]')")

from inspect_ai import Task as InspectTask  # noqa: E402
from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model  # noqa: E402
from inspect_ai.scorer import match  # noqa: E402
from inspect_ai.solver import Generate, TaskState, generate, solver  # noqa: E402

STARTER = REPO / "suites" / "starter"
PARITY_TASKS = [STARTER / "rubric" / "en-science-acetate-buffer", STARTER / "rubric" / "cn-law-severance-article40",
                STARTER / "contract" / "text-ss-invoice-total", STARTER / "contract" / "mm-ss-expense-scan"]
AGENTS = {"reference": "reference", "shortcut:plausible": "plausible", "noop": "noop"}
USAGE = ModelUsage(input_tokens=120, output_tokens=30, total_tokens=150)


def _env() -> dict[str, str]:
    """The subprocess CLI imports this checkout's assay, whatever the cwd."""
    return {"PYTHONPATH": str(REPO / "src")}


def _prompt_of(messages: list[ChatMessage]) -> str:
    user = [m for m in messages if m.role == "user"][-1]
    return user.text


def scripted(answers: dict[str, str]) -> Callable[..., ModelOutput]:
    """A mockllm output function: the answer scripted for the sample's prompt, usage set explicitly."""

    def output(messages: list[ChatMessage], tools: Any, tool_choice: Any, config: Any) -> ModelOutput:
        out = ModelOutput.from_content(model="mockllm", content=answers.get(_prompt_of(messages), ""))
        out.usage = USAGE
        return out

    return output


def run_inspect(task_file: str, cwd: Path, model: str, output: Callable[..., ModelOutput], log_dir: Path,
                epochs: int = 2, task_args: dict[str, Any] | None = None, fail_on_error: bool = True) -> Path:
    """Inspect loads task files by relative path: run it from the export's parent folder."""
    here = Path.cwd()
    os.chdir(cwd)
    try:
        logs = inspect_eval(task_file, model=get_model(model, custom_outputs=output), epochs=epochs,
                            log_dir=str(log_dir), display="none", max_samples=4, task_args=task_args or {},
                            fail_on_error=fail_on_error)
    finally:
        os.chdir(here)
    assert logs[0].status == "success", logs[0].error
    return Path(logs[0].location)


@pytest.fixture(scope="module")
def parity(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """assay's own runs of four starter tasks by three agents (2 epochs), their export, and one
    Inspect eval per agent whose mock model gives exactly the answers assay's agent gave."""
    root = tmp_path_factory.mktemp("parity")
    args = [str(p) for p in PARITY_TASKS]
    r = assay("run", *args, *(x for a in AGENTS for x in ("--agent", a)), "--epochs", "2", "-q", cwd=root,
              env=_env())
    assert r.returncode == 0, r.stderr
    r = assay("export", "inspect", *args, "--out", "export", cwd=root, env=_env())
    assert r.returncode == 0, r.stderr
    samples = json.loads((root / "export" / "samples.json").read_text())["samples"]
    prompt = {s["id"]: s["prompt"] for s in samples}
    st = Store(f"sqlite:///{root / '.assay' / 'assay.db'}")
    assay_runs = st.runs("default")
    st.close()
    logs = {}
    for agent, name in AGENTS.items():
        answers = {prompt[r.key.task_id]: r.final_message for r in assay_runs if r.key.agent == agent}
        logs[agent] = run_inspect("export/tasks.py", root, f"mockllm/{name}", scripted(answers), root / "logs")
    return {"root": root, "runs": assay_runs, "logs": logs, "samples": samples}


def test_exported_samples_carry_the_reference_answer_as_inspects_target(parity: dict[str, Any]) -> None:
    from assay.task.discover import discover

    tasks = {t.id: t for t in discover(PARITY_TASKS)}
    log = inspect_ai.log.read_eval_log(str(parity["logs"]["reference"]))
    targets = {str(s.id): s.target for s in log.samples or []}
    with_answer = {i for i, t in tasks.items() if t.policies.get("reference") and t.policies["reference"].answer}
    assert with_answer  # the rubric tasks hold a reference answer in text
    for task_id, task in tasks.items():
        want = task.policies["reference"].answer if task_id in with_answer else ""
        assert targets[task_id] == want, task_id


def test_export_lists_what_it_cannot_export(tmp_path: Path) -> None:
    r = assay("export", "inspect", str(STARTER / "contract"), str(STARTER / "scenarios-native"), "--out", "out",
              cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["schema"] == "assay.inspect-export/1"
    exported = {e["id"] for e in manifest["exported"]}
    assert exported == {"text-ss-invoice-total", "text-ss-lease-renewal", "mm-ss-expense-scan", "mm-ss-ticket-chart"}
    skipped = {e["id"]: e["reason"] for e in manifest["not_exported"]}
    assert "scenario" in skipped["refund-desk-native/base"] and "tools" in skipped["text-ms-policy-summary"]
    assert set(skipped) | exported == {t.name for t in (STARTER / "contract").iterdir()} | {
        f"refund-desk-native/{v}" for v in ("base", "wardrobing", "address_ring", "queue_only")}
    assert "not exported: text-ms-policy-summary: needs a workspace with tools" in r.stderr
    samples = json.loads((tmp_path / "out" / "samples.json").read_text())["samples"]
    scan = next(s for s in samples if s["id"] == "mm-ss-expense-scan")
    assert scan["images"] and scan["prompt"].startswith("You audit travel expenses")
    assert scan["metadata"]["assay_task_hash"] and scan["metadata"]["kinds"] == ["contract"]
    assert "@task" in (tmp_path / "out" / "tasks.py").read_text()


def test_export_refuses_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    r = assay("export", "inspect", str(STARTER / "scenarios-native"), "--out", "out", cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "none of the 4 tasks" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("x")
    r = assay("export", "inspect", str(STARTER / "contract"), "--out", "file", cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "not a folder" in r.stderr
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "tasks.py").write_text("# someone else's\n")
    r = assay("export", "inspect", str(STARTER / "contract"), "--out", "theirs", cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "tasks.py" in r.stderr
    assert (tmp_path / "theirs" / "tasks.py").read_text() == "# someone else's\n"
    r = assay("export", "inspect", str(tmp_path / "nowhere"), "--out", "out", cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "nowhere" in r.stderr


def test_inspect_scores_are_assays_scores_on_the_same_answers(parity: dict[str, Any]) -> None:
    log_mod = inspect_ai.log
    own = {(r.key.task_id, r.key.agent, r.key.epoch): r for r in parity["runs"]}
    compared = 0
    for agent, path in parity["logs"].items():
        log = log_mod.read_eval_log(str(path))
        assert log.samples is not None and len(log.samples) == 2 * len(PARITY_TASKS)
        for s in log.samples:
            mine = own.get((str(s.id), agent, s.epoch))
            if mine is None:  # shortcut:plausible exists for rubric tasks only
                continue
            score = s.scores["assay_grader"]
            assert score.value == pytest.approx(mine.score, abs=1e-12), (agent, s.id)
            assert score.metadata["passed"] == mine.passed
            assert score.metadata["grade"].get("expert_score") == mine.grade.flat().get("expert_score")
            assert score.metadata["kinds"] == mine.kinds
            compared += 1
    assert compared == 2 * (4 + 2 + 4)
    # Not all the same: the reference passes every task, noop none.
    ref = [s.scores["assay_grader"].value for s in log_mod.read_eval_log(str(parity["logs"]["reference"])).samples]
    noop = [s.scores["assay_grader"].value for s in log_mod.read_eval_log(str(parity["logs"]["noop"])).samples]
    assert min(ref) >= 0.7 and max(noop) == 0.0


def test_imported_logs_are_runs_that_report_and_compare_cover(parity: dict[str, Any]) -> None:
    root: Path = parity["root"]
    logs = [str(p) for p in parity["logs"].values()]
    r = assay("import", "inspect", *logs, cwd=root, env=_env())
    assert r.returncode == 0, r.stderr
    assert "24 run(s) stored" in r.stdout  # 3 agents x 4 tasks x 2 epochs
    again = assay("import", "inspect", *logs, cwd=root, env=_env())
    assert again.returncode == 0 and "0 run(s) stored" in again.stdout and "24 already there" in again.stdout
    r = assay("report", "--json", "report.json", cwd=root, env=_env())
    assert r.returncode == 0, r.stderr
    rep = json.loads((root / "report.json").read_text())
    ref = [x for x in rep["runs"] if x["agent"] == "inspect:mockllm/reference"]
    assert len(ref) == 8 and {x["epoch"] for x in ref} == {1, 2}
    assert all(x["status"] == "done" and x["passed"] for x in ref)
    assert all(x["usage"]["input_tokens"] == 120 and x["usage"]["output_tokens"] == 30 for x in ref)
    assert all(x["usage"]["cost_usd"] is None for x in ref)  # mockllm has no price
    rubric = next(x for x in ref if x["task_id"] == "en-science-acetate-buffer")
    assert rubric["grade"]["items"] and rubric["kinds"] == ["rubric"]
    agents = {a["agent"]: a for a in rep["agents"]}
    assert agents["inspect:mockllm/reference"]["pass_rate"] == agents["reference"]["pass_rate"] == 1.0
    assert agents["inspect:mockllm/reference"]["pass_hat_k"]["2"] == 1.0
    assert agents["inspect:mockllm/noop"]["pass_rate"] == 0.0
    for a, b in (("reference", "inspect:mockllm/reference"), ("shortcut:plausible", "inspect:mockllm/plausible")):
        r = assay("compare", a, b, "--json", "cmp.json", cwd=root, env=_env())
        assert r.returncode == 0, r.stderr
        cmp = json.loads((root / "cmp.json").read_text())
        assert cmp["overall"]["diff"] == 0.0 and cmp["overall"]["ties"] == cmp["overall"]["n"]
        assert cmp["overall"]["n"] == (8 if a == "reference" else 4)
    # A run shows as any other: its transcript holds the prompt and the answer.
    run_id = ref[0]["run_id"]
    r = assay("show", run_id, "--json", cwd=root, env=_env())
    shown = json.loads(r.stdout)
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds[0] == "harness" and "user" in kinds and "assistant" in kinds


@solver
def fail_on(sample_id: str) -> Any:
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        if state.sample_id == sample_id:
            raise RuntimeError("tool server crashed")
        return state

    return solve


def test_foreign_inspect_log_values_usage_cost_and_void(tmp_path: Path) -> None:
    """A plain Inspect task (match scorer, C/I values), a sample that errors, a priced model."""
    task = InspectTask(dataset=[Sample(id="add", input="2+2?", target="4"), Sample(id="mul", input="3*3?", target="9"),
                                Sample(id="boom", input="?", target="0")],
                       solver=[fail_on("boom"), generate()], scorer=match())
    answers = {"2+2?": "4", "3*3?": "6"}
    logs = inspect_eval(task, model=get_model("mockllm/model", custom_outputs=scripted(answers)), epochs=2,
                        log_dir=str(tmp_path / "logs"), display="none", fail_on_error=False)
    log = Path(logs[0].location)
    (tmp_path / "assay.toml").write_text('[prices."mockllm/model"]\ninput = 2.0\noutput = 8.0\n')
    r = assay("import", "inspect", str(log), "--campaign", "inspect", cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    assert "6 run(s) stored in campaign 'inspect' (2 void)" in r.stdout
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    runs = {(x.key.task_id.rsplit("/", 1)[1], x.key.epoch): x for x in st.runs("inspect")}
    st.close()
    add, mul, boom = runs[("add", 1)], runs[("mul", 2)], runs[("boom", 1)]
    assert add.key.agent == "inspect:mockllm/model" and add.kinds == ["contract"]
    assert (add.score, add.passed, mul.score, mul.passed) == (1.0, True, 0.0, False)
    assert add.grade.contract is not None and add.grade.contract.checks == {"match": "C"}
    assert add.usage.cost_usd == pytest.approx((120 * 2.0 + 30 * 8.0) / 1e6)
    assert boom.status == "void" and boom.end_reason == "harness_error" and "tool server crashed" in (boom.void_reason or "")
    assert boom.score is None
    # The same log as Inspect's `.json` format: the same runs, so importing it adds nothing.
    as_json = tmp_path / "same-log.json"
    inspect_ai.log.write_eval_log(inspect_ai.log.read_eval_log(str(log)), str(as_json))
    from_json = convert_logs([as_json], "inspect")
    assert sorted(x.key.digest for x, _ in from_json) == sorted(x.key.digest for x in runs.values())
    st = Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}")
    try:
        assert store_imported(from_json, st, "inspect", [as_json]).added == 0
    finally:
        st.close()


def test_a_bad_log_is_refused_naming_it_and_nothing_is_written(tmp_path: Path, parity: dict[str, Any]) -> None:
    good = str(parity["logs"]["reference"])
    junk = tmp_path / "junk.eval"
    junk.write_bytes(b"this is not a zip")
    r = assay("import", "inspect", good, str(junk), cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "junk.eval" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / ".assay").exists()
    fake = tmp_path / "fake.eval"
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr("header.json", "{not json")
    notjson = tmp_path / "log.json"
    notjson.write_text(json.dumps({"hello": "world"}))
    for bad in (fake, notjson, tmp_path / "missing.eval"):  # the same reader, in process (each CLI start imports Inspect)
        with pytest.raises(InputError) as e:
            convert_logs([Path(good), bad], "default")
        assert e.value.file == str(bad)
    # A log whose values assay's records refuse (a grade an attacker shaped) is refused the same way.
    log = inspect_ai.log.read_eval_log(good)
    assert log.samples
    log.samples[0].scores["assay_grader"].metadata["grade"] = {"items": "not a list"}
    forged = tmp_path / "forged.json"
    inspect_ai.log.write_eval_log(log, str(forged))
    with pytest.raises(InputError) as e:
        convert_logs([forged], "default")
    assert e.value.file == str(forged) and e.value.field == "samples[0]"
    # A score near the float limit: two of them would make a report's mean infinite.
    log = inspect_ai.log.read_eval_log(good)
    assert log.samples
    name = next(iter(log.samples[1].scores))
    log.samples[1].scores[name].value = 1e308
    huge = tmp_path / "huge.json"
    inspect_ai.log.write_eval_log(log, str(huge))
    r = assay("import", "inspect", str(huge), cwd=tmp_path, env=_env())
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "huge.json" in r.stderr and f"samples[1].scores.{name}.value" in r.stderr and "1e+308" in r.stderr
    assert not (tmp_path / ".assay").exists()
    # An integer of a grade past the store's 32-bit INTEGER columns (the audit's removals).
    log = inspect_ai.log.read_eval_log(good)
    assert log.samples
    log.samples[1].scores["assay_grader"].metadata["grade"]["audit"] = {"removed": 10**30}
    wide = tmp_path / "wide.json"
    inspect_ai.log.write_eval_log(log, str(wide))
    with pytest.raises(InputError) as e:
        convert_logs([Path(good), wide], "default")
    assert e.value.file == str(wide) and e.value.field == "samples[1].scores.assay_grader.metadata.grade.audit.removed"


def test_an_eval_set_folder_and_its_manifest_import_the_newest_log_of_each_task(tmp_path: Path) -> None:
    """`inspect eval-set` output as published: a folder of logs with `eval-set.json` and
    `logs.json`; a task retried leaves two logs of one task id, and only the newest successful
    one is read. A model named by an assay.toml alias is priced as the alias."""
    from inspect_ai import eval_set

    def task(name: str, answer: str) -> InspectTask:
        return InspectTask(name=name, dataset=[Sample(id=f"{name}-1", input=f"{name}?", target=answer)],
                           solver=[generate()], scorer=match())

    logs_dir = tmp_path / "logs"
    ok, logs = eval_set([task("alpha", "1"), task("beta", "2")], log_dir=str(logs_dir), display="none",
                        model=get_model("mockllm/model", custom_outputs=scripted({"alpha?": "1", "beta?": "3"})))
    assert ok and (logs_dir / "eval-set.json").is_file() and len(logs) == 2
    # A retry's leftover: an older, failed log of alpha's task id, with another answer.
    alpha = next(log for log in logs if log.eval.task == "alpha")
    failed = inspect_ai.log.read_eval_log(alpha.location)
    failed.status, failed.eval.created = "error", "2020-01-01T00:00:00+00:00"
    inspect_ai.log.write_eval_log(failed, str(logs_dir / "2020-01-01T00-00-00_alpha_retry.json"))
    for log in logs:  # the model as a lab names its own deployment
        full = inspect_ai.log.read_eval_log(log.location)
        full.eval.model = "openai/house-model"
        for sample in full.samples or []:
            (usage,) = sample.model_usage.values()
            sample.model_usage = {"openai/house-model": usage}
        inspect_ai.log.write_eval_log(full, log.location)
    (tmp_path / "assay.toml").write_text('[models.house]\nprovider = "openai"\nmodel = "house-model"\n'
                                         '[models.house.prices]\ninput = 1.0\noutput = 4.0\n')
    r = assay("import", "inspect", str(logs_dir), "--campaign", "set", cwd=tmp_path, env=_env())
    assert r.returncode == 0, r.stderr
    assert "2 run(s) stored in campaign 'set' (0 void), 0 already there, from 2 run(s) read" in r.stdout
    r = assay("import", "inspect", str(logs_dir / "eval-set.json"), "--campaign", "set", cwd=tmp_path, env=_env())
    assert r.returncode == 0 and "0 run(s) stored" in r.stdout and "2 already there" in r.stdout, r.stdout
    with Store(f"sqlite:///{tmp_path / '.assay' / 'assay.db'}") as st:
        runs = {x.key.task_id: x for x in st.runs("set")}
    assert set(runs) == {"alpha/alpha-1", "beta/beta-1"}
    assert (runs["alpha/alpha-1"].score, runs["beta/beta-1"].score) == (1.0, 0.0)
    assert runs["alpha/alpha-1"].key.agent == "inspect:openai/house-model"
    assert runs["alpha/alpha-1"].usage.cost_usd == pytest.approx((120 * 1.0 + 30 * 4.0) / 1e6)
    # A manifest whose tasks have no log here, a folder without logs, a malformed manifest: exit 2.
    other = tmp_path / "other"
    other.mkdir()
    (other / "eval-set.json").write_text(json.dumps({"eval_set_id": "x", "tasks": [{"task_id": "nope"}]}))
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad" / "eval-set.json"
    bad.parent.mkdir()
    bad.write_text("[" * 100_000)
    for path, words in ((other / "eval-set.json", "no log of any task"), (tmp_path / "empty", "no Inspect log"),
                        (bad, "nested deeper")):
        with pytest.raises(InputError) as e:
            convert_logs([path], "set")
        assert e.value.file == str(path) and words in e.value.reason, (path, e.value.reason)


@pytest.mark.slow  # Inspect AI's own `inspect eval` in a shell: a minute and more
def test_docs_example_runs(tmp_path: Path) -> None:
    """docs/interop-inspect.md: its python block saved as mock_eval.py, its bash block run as is."""
    text = (REPO / "docs" / "interop-inspect.md").read_text()
    python = text.split("```python\n", 1)[1].split("```", 1)[0]
    shell = text.split("```bash\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mock_eval.py").write_text(python)
    (tmp_path / "suites").symlink_to(REPO / "suites")
    r = run_docs_bash(tmp_path, shell)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "report.json").read_text())
    assert {a["agent"] for a in rep["agents"]} == {"reference", "inspect:mockllm/model"}
    assert "already there" in r.stdout


def test_a_judged_rubric_task_is_judged_by_assays_judge_inside_inspect(tmp_path: Path) -> None:
    """`-T judge=ALIAS`: the items without a check go to assay's judge (a fake OpenAI server on
    127.0.0.1), as in an assay run; without a judge the sample errors and imports as void."""
    task = judged_task(tmp_path)
    export_inspect([task], tmp_path / "export")
    with FakeOpenAIServer() as srv:
        srv.handler = lambda body: judge_reply(body, decide_judged)
        model_alias(tmp_path, "j", "openai", srv.url, model=JUDGE_MODEL)
        out = scripted({"What is the answer? Name your source.": ANSWER})
        log = run_inspect("export/tasks.py", tmp_path, "mockllm/model", out, tmp_path / "logs", epochs=1,
                          task_args={"judge": "j"})
        assert len(srv.requests) == 2  # the verdict, and the audit's injection screen
        unjudged = run_inspect("export/tasks.py", tmp_path, "mockllm/model", out, tmp_path / "logs2", epochs=1,
                               fail_on_error=False)
    (sample,) = inspect_ai.log.read_eval_log(str(log)).samples or []
    score = sample.scores["assay_grader"]
    assert score.value == pytest.approx(0.7) and score.metadata["passed"] is True
    items = {i["id"]: i for i in score.metadata["grade"]["items"]}
    assert items["cites"]["hit"] and not items["cites"]["check"] and items["value"]["check"]
    # The fake server's usage for both calls: the verdict's (50) and the injection screen's (5).
    assert score.metadata["judge_usage"]["output_tokens"] == 55
    (record, _), = convert_logs([log], "default")
    assert record.score == pytest.approx(0.7) and record.judge_usage.output_tokens == 55
    (void, _), = convert_logs([unjudged], "default")
    assert void.status == "void" and "no judge was given" in (void.void_reason or "")


def test_a_json_log_past_its_size_cap_is_refused_before_inspect_reads_it(tmp_path: Path, monkeypatch: Any) -> None:
    """Inspect reads a `.json` log whole (its models take several times its size): one larger
    than MAX_JSON_LOG_BYTES is an InputError naming the file, before it is read."""
    from assay.errors import InputError
    from assay.interop import inspect_import

    monkeypatch.setattr(inspect_import, "MAX_JSON_LOG_BYTES", 100)
    log = tmp_path / "big.json"
    log.write_text("{" + " " * 200 + "}")
    with pytest.raises(InputError, match="more than the 100 read"):
        inspect_import.read_inspect_log(log)
