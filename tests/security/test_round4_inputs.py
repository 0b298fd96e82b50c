"""Round 4 red team, class 4 (hostile task files refused fast, exit 2 with file and field, no
traceback): integers that pass the decimal-digit cap but not what is done with them next.

The loaders cap an integer at 4,300 decimal digits (Python's own limit on converting one to
text). Two ways round it in YAML 1.1: hexadecimal (`0x...`, which Python converts without that
limit) and sexagesimal (`59:59:...`, which PyYAML builds by arithmetic). And an integer of a
few hundred digits passes every cap but cannot become a float (past 1.8e308), which every
weight and number field becomes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import HOSTILE_S, assay

pytestmark = pytest.mark.slow

HEX = "0x" + "f" * 20_000  # about 24,000 decimal digits
SEXAGESIMAL = ":".join(["59"] * 6_000)  # 60**6000: about 10,700 decimal digits
BIG = "1" + "0" * 400  # 401 digits: under the digit cap, over a float's range


def _native(folder: Path, extra: str, *, contract: bool = True) -> Path:
    spec = {"title": "t", "domain": "test", "execution": "multi-step-with-tools", "prompt": "Write 42 into answer.txt.",
            "reference": {"artifacts": "reference"}}
    if contract:
        spec["contract"] = [{"path": "answer.txt", "predicate": "regex", "pattern": "^42\\s*$"}]
    folder.mkdir(parents=True)
    (folder / "reference").mkdir()
    (folder / "reference" / "answer.txt").write_text("42\n")
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False) + extra)
    return folder


def _refused(r_code: int, out: str, err: str, file: str, field: str | None) -> None:
    assert "Traceback" not in out + err, err[-2000:]
    assert r_code == 2, (r_code, err[-2000:])
    assert file in err, err
    if field is not None:
        assert field in err, err


SCHEMA = "contract:\n- path: answer.txt\n  predicate: json\n  schema: {{type: integer, maximum: {n}}}\n"
WEIGHT = "rubric:\n  items:\n  - {{id: a, text: x, weight: {n}, tag: FI, check: {{regex: 'x'}}}}\n"

CASES = {
    # (extra YAML, has its own contract, the field the message should name)
    "schema-hex": (SCHEMA.format(n=HEX), False, "contract[0]"),
    "schema-sexagesimal": (SCHEMA.format(n=SEXAGESIMAL), False, "contract[0]"),
    "weight-hex": (WEIGHT.format(n=HEX), True, "rubric.items[0].weight"),
    "weight-401-digits": (WEIGHT.format(n=BIG), True, "rubric.items[0].weight"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_integers_round_the_digit_cap_are_refused_with_the_field(tmp_path: Path, case: str) -> None:
    extra, contract, field = CASES[case]
    folder = _native(tmp_path / case, extra, contract=contract)
    t0 = time.monotonic()
    r = assay("validate", str(folder), cwd=tmp_path)
    assert time.monotonic() - t0 < HOSTILE_S
    _refused(r.returncode, r.stdout, r.stderr, "task.yaml", field.split("[")[0])


def test_healthbench_points_past_a_floats_range_are_refused(tmp_path: Path) -> None:
    row = ('{"prompt": [{"role": "user", "content": "Question?"}], "prompt_id": "big", '
           '"rubrics": [{"criterion": "A", "points": ' + BIG + ', "tags": []}]}')
    f = tmp_path / "hb.jsonl"
    f.write_text(row + "\n", encoding="utf-8")
    r = assay("validate", str(f), cwd=tmp_path)
    _refused(r.returncode, r.stdout, r.stderr, "hb.jsonl", "points")


def test_control_a_decimal_integer_past_the_cap_is_refused(tmp_path: Path) -> None:
    """What holds: a 5,000-digit decimal integer is refused with its field and line."""
    folder = _native(tmp_path / "dec", WEIGHT.format(n="9" * 5_000))
    r = assay("validate", str(folder), cwd=tmp_path)
    _refused(r.returncode, r.stdout, r.stderr, "task.yaml", None)
    assert "4,300 digits" in r.stderr


@pytest.mark.parametrize("value", ["!!python/object/apply:os.system ['true']", "2024-13-45", "!!binary '//79'",
                                   "!!float abc", "&a [*a]", "!!set {a, b}"])
def test_control_odd_yaml_values_are_refused_cleanly(tmp_path: Path, value: str) -> None:
    """What holds: tags SafeLoader refuses, impossible dates, binary that is not UTF-8, a self-referencing
    alias, a set where a string belongs: exit 2, the file named, no traceback."""
    folder = _native(tmp_path / "odd", f"title2: {value}\n")
    text = (folder / "task.yaml").read_text().replace("title: t\n", "").replace("title2:", "title:")
    (folder / "task.yaml").write_text(text)
    r = assay("validate", str(folder), cwd=tmp_path)
    _refused(r.returncode, r.stdout, r.stderr, "task.yaml", None)
    assert json.dumps(r.stderr).count("\\n") <= 3, r.stderr


def test_onemillion_bench_weight_past_a_floats_range_is_refused(tmp_path: Path) -> None:
    row = {"case_id": 1, "prompt": "Question?", "system_prompt": "", "tags": ["Law"],
           "rubrics": [{"rubric_number": 1, "rubric_detail": "Says A.", "rubric_weight": 10, "rubricLabel": "FI"}]}
    f = tmp_path / "law" / "a.json"
    f.parent.mkdir()
    f.write_text(json.dumps([row]).replace('"rubric_weight": 10', f'"rubric_weight": {BIG}'), encoding="utf-8")
    r = assay("validate", str(f), cwd=tmp_path)
    _refused(r.returncode, r.stdout, r.stderr, "a.json", "rubric")
