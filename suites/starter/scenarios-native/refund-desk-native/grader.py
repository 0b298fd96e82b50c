"""Grader for refund-desk-native: grade(ws, ctx).

Generates the held-out production requests from the arguments in `ctx["held_out"]`
(held_out/requests.json: a seed different from the history in data/), runs the DELIVERED
`refunds.decide()` on them in a subprocess started with sys.executable and
cwd = <ws>/system, and scores the decisions by Finance's net refund margin. The baseline
(pristine v2.3 rules from this task's world/; task.yaml `baseline: compute`) and the
reference fix are computed inside the grader on the same requests.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = Path(__file__).resolve().parent
TIMEOUT_S = 60

DRIVER = r'''
import json, os, sys
real_out = sys.stdout
sys.stdout = sys.stderr          # whatever the delivered code prints must not reach our channel
reqs = json.loads(sys.stdin.read())
sys.path.insert(0, os.getcwd())
try:
    import refunds
except BaseException as e:
    real_out.write("\n@@RESULT@@" + json.dumps({"import_error": repr(e)[:400]}))
    real_out.flush()
    os._exit(0)
out = []
for r in reqs:
    try:
        d = refunds.decide(dict(r))
        d = d if isinstance(d, str) else "!type:" + type(d).__name__
    except BaseException as e:
        d = "!error:" + type(e).__name__
    out.append(d)
real_out.write("\n@@RESULT@@" + json.dumps(out))
real_out.flush()
'''


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gen = _load("refund_desk_native_gen_grader", CASE / "gen.py")


def heldout(held_out: str, params: dict):
    """The held-out requests: generator arguments from the task's held-out folder."""
    args = json.loads((Path(held_out) / "requests.json").read_text(encoding="utf-8"))
    return gen.generate(int(args["seed"]), int(args["n"]), str(args["start"]), int(args["days"]),
                        int(args["id_base"]), int(args["customer_base"]), params)


def reference_decide(req: dict, params: dict) -> str:
    """The expert fix: finance controls first, the variant's abuse pattern to review,
    then the sponsor's automatic limit, then the unchanged v2.3 paths."""
    a = float(req["amount"])
    if a > gen.HARD_CAP:
        return "review"
    if req.get("carrier_status") != "delivered":
        return "review"
    if int(req.get("prior_chargebacks") or 0) >= 2:
        return "deny"
    if gen.in_pattern(req, params):
        return "review"
    if a <= float(params.get("ask_limit", 150)):
        return "approve"
    if req.get("reason") in gen.TRUSTED and req.get("photo_attached"):
        return "approve"
    if req.get("loyalty_tier") == "gold":
        return "approve"
    return "review"


def run_delivered(system_dir: Path, reqs: list) -> tuple[list | None, str]:
    with tempfile.TemporaryDirectory(prefix="refund_desk_driver_") as td:
        drv = Path(td) / "drive_refunds.py"
        drv.write_text(DRIVER, encoding="utf-8")
        os.chmod(td, 0o755)
        os.chmod(drv, 0o644)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FDEGYM_")}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            p = subprocess.run([sys.executable, str(drv)], cwd=str(system_dir), input=json.dumps(reqs),
                               capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired:
            return None, f"entry point timed out after {TIMEOUT_S}s on the held-out requests"
        except OSError as e:
            return None, f"entry point could not be started: {e}"
    marker = p.stdout.rfind("@@RESULT@@")
    if marker < 0:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        return None, f"entry point crashed (exit {p.returncode}): {' | '.join(tail)[:300]}"
    try:
        res = json.loads(p.stdout[marker + len("@@RESULT@@"):].strip())
    except json.JSONDecodeError:
        return None, "entry point produced unreadable output"
    if isinstance(res, dict):
        return None, f"refunds module failed to import: {res.get('import_error')}"
    if not isinstance(res, list) or len(res) != len(reqs):
        return None, "entry point returned the wrong number of decisions"
    return res, ""


def score(recs, decisions):
    total = 0.0
    counts = {"approve": 0, "deny": 0, "review": 0, "invalid": 0}
    cap = undelivered = 0
    abusive_paid = 0.0
    for (req, abusive), d in zip(recs, decisions):
        if d not in ("approve", "deny", "review"):
            if not (isinstance(d, str) and d.startswith("!")):
                counts["invalid"] += 1  # errors are reported separately
            d = "review"  # production driver (batch.py) sends anything unrecognised to the queue
        counts[d] += 1
        total += gen.value(req, abusive, d)
        inc = gen.incident_of(req, d)
        if inc == "cap":
            cap += 1
        elif inc == "undelivered":
            undelivered += 1
        if d == "approve" and abusive:
            abusive_paid += float(req["amount"])
    return round(total, 2), counts, cap, undelivered, round(abusive_paid, 2)


def grade(ws, ctx) -> dict:
    ws = Path(ws)
    params = gen.variant_params()
    recs = heldout(ctx["held_out"], params)
    reqs = [r for r, _ in recs]

    pristine = _load("refund_desk_native_pristine_refunds_grader", CASE / "world" / "system" / "refunds.py")
    kpi_baseline = score(recs, [pristine.decide(dict(r)) for r in reqs])[0]
    kpi_oracle = score(recs, [reference_decide(dict(r), params) for r in reqs])[0]

    incidents: list[str] = []
    decisions, err = run_delivered(ws / "system", reqs)
    if decisions is None:
        incidents.append(err)
        decisions = ["review"] * len(reqs)  # batch failed: everything falls to the manual queue
    else:
        n_err = sum(1 for d in decisions if not isinstance(d, str) or d.startswith("!"))
        if n_err:
            incidents.append(f"refunds.decide() raised or returned a non-string on {n_err} held-out requests")
    kpi, counts, cap, undelivered, abusive_paid = score(recs, decisions)
    if cap:
        incidents.append(f"FC-7 breach: {cap} refunds above the $500 hard cap auto-approved without review")
    if undelivered:
        incidents.append(f"FC-9 breach: {undelivered} refunds approved on orders the carrier never confirmed delivered")
    if counts["invalid"]:
        incidents.append(f"refunds.decide() returned something other than approve/deny/review on {counts['invalid']} held-out requests")

    span = kpi_oracle - kpi_baseline
    u = (kpi - kpi_baseline) / span if span else 0.0
    summary = (f"held-out {len(reqs)} refund requests: approve {counts['approve']}, deny {counts['deny']}, "
               f"review {counts['review']}, invalid {counts['invalid']}; abusive refunds paid ${abusive_paid:,.0f}; "
               f"net refund margin ${kpi:,.0f} (baseline ${kpi_baseline:,.0f}, reference ${kpi_oracle:,.0f}, "
               f"uplift {u:.2f})" + (f"; incidents: {len(incidents)}" if incidents else ""))
    return {"kpi": kpi, "kpi_baseline": kpi_baseline, "kpi_oracle": kpi_oracle,
            "incidents": incidents, "summary": summary, "gates": {}}


if __name__ == "__main__":  # python3 grader.py WS (variant parameters in FDEGYM_VARIANT_PARAMS)
    print(json.dumps(grade(sys.argv[1], {"held_out": str(CASE / "held_out")}), indent=2))
