#!/usr/bin/env python3
"""The plan model's prediction next to the measurement, shape by shape (issue 25).

For every AG+GEMM and GEMM+RS table in the `tilelink bench ... --json` files given (each table
carries its world and m, n, k in `params`, and GEMM+RS the reducer that summed), runs `tilelink
plan <op>` for the same world, shape (and reducer) with `--json`, and prints, for the fused op and its non-overlapped and decomposed baselines, the
measured and predicted times and their ratio. Meant for one rank per GPU (scripts/multi_gpu_run.sh);
on virtual ranks the model is told nothing of the shared GPU, so its numbers are not comparable.

    predicted_vs_measured.py --tilelink build/tilelink [--plan-arg=--nodes=2] bench_*.json

Exit status 0, or 1 when a file holds no table it can compare.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

PLAN_OPS = {"ag_gemm": "ag_gemm", "gemm_rs": "gemm_rs"}
# (label, the bench table's variant prefix, the plan table's variant prefix)
VARIANTS = [
    ("fused", "tilelink fused", "fused (tilelink)"),
    ("non-overlapped", "non-overlapped", "non-overlapped"),
    ("decomposed", "decomposed", "decomposed"),
]


def time_of(table, prefix):
    for row in table["rows"]:
        if str(row.get("variant", "")).startswith(prefix):
            return row.get("time_us")
    return None


def plan_command(tilelink, op, params, out, extra):
    """The `tilelink plan` command for a bench table's params (GEMM+RS: the reducer that ran)."""
    cmd = [tilelink, "plan", op, "--world", str(params["world"]), "--m", str(params["m"]),
           "--n", str(params["n"]), "--k", str(params["k"]), "--json", out]
    if op == "gemm_rs" and params.get("reducer") in ("blocks", "epilogue"):
        cmd += ["--reducer", params["reducer"]]
    return cmd + extra


def predict(tilelink, op, params, extra):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        cmd = plan_command(tilelink, op, params, out, extra)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
        with open(out) as f:
            return json.load(f)["tables"][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tilelink", required=True, help="the tilelink binary")
    ap.add_argument("--plan-arg", action="append", default=[], help="an extra argument for every plan (repeatable)")
    ap.add_argument("bench_json", nargs="+")
    a = ap.parse_args()
    compared = 0
    print(f"{'op':8} {'world':>5} {'m':>6} {'n':>6} {'k':>6} {'reducer':>8}  {'variant':15} {'measured µs':>12} "
          f"{'predicted µs':>13} {'predicted / measured':>21}")
    for path in a.bench_json:
        with open(path) as f:
            doc = json.load(f)
        for table in doc.get("tables", []):
            op = PLAN_OPS.get(table.get("name"))
            params = dict(table.get("params", {}))
            if op is None or not all(key in params for key in ("world", "m", "n", "k")):
                continue
            plan = predict(a.tilelink, op, params, a.plan_arg)
            for label, bench_prefix, plan_prefix in VARIANTS:
                measured, predicted = time_of(table, bench_prefix), time_of(plan, plan_prefix)
                if measured is None or predicted is None:
                    continue
                print(f"{op:8} {params['world']:>5} {params['m']:>6} {params['n']:>6} {params['k']:>6} "
                      f"{params.get('reducer', '-'):>8}  {label:15} "
                      f"{measured:12.1f} {predicted:13.1f} {predicted / measured:21.2f}")
            compared += 1
    if compared == 0:
        print("predicted_vs_measured: no AG+GEMM or GEMM+RS table with world, m, n, k in its params", file=sys.stderr)
        return 1
    print("(predicted: the plan cost model with its H200 defaults; measured: the bench's median per call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
