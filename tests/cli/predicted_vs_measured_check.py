#!/usr/bin/env python3
"""ctest predicted_vs_measured: bench/predicted_vs_measured.py on a bench JSON of random "measured"
times (one AG+GEMM table, GEMM+RS tables without a reducer and with the epilogue one, and one table
it must skip) prints, for each variant, the measured time and `tilelink plan`'s own prediction for
that shape (and reducer), and their ratio.
Usage: predicted_vs_measured_check.py path/to/tilelink path/to/predicted_vs_measured.py"""
import json
import os
import random
import subprocess
import sys
import tempfile

tilelink, script = sys.argv[1], sys.argv[2]
rng = random.Random()
# (op, reducer or "-"): world, m, n, k
shapes = {("ag_gemm", "-"): (8, 8192, 28672, 8192), ("gemm_rs", "-"): (8, 8192, 8192, 28672),
          ("gemm_rs", "epilogue"): (8, 8192, 4096, 14336)}
measured = {}
tables = []
for (op, reducer), (world, m, n, k) in shapes.items():
    rows = []
    for label, variant in (("fused", "tilelink fused"), ("non-overlapped", "non-overlapped (NCCL, then cuBLAS)"),
                           ("decomposed", "decomposed (per-shard cuBLAS)")):
        measured[(op, reducer, label)] = rng.uniform(100.0, 5000.0)
        rows.append({"variant": variant, "time_us": measured[(op, reducer, label)]})
    params = {"world": world, "m": m, "n": n, "k": k}
    if reducer != "-":
        params["reducer"] = reducer
    tables.append({"name": op, "params": params, "rows": rows})
tables.append({"name": "signal_latency", "params": {"world": 2}, "rows": [{"variant": "x", "time_us": 1.0}]})

failed = False
with tempfile.TemporaryDirectory() as tmp:
    bench = os.path.join(tmp, "bench.json")
    with open(bench, "w") as f:
        json.dump({"meta": {}, "tables": tables}, f)
    out = subprocess.run([sys.executable, script, "--tilelink", tilelink, bench], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"FAIL: exit {out.returncode}: {out.stderr}")
        sys.exit(1)
    lines = [l.split() for l in out.stdout.splitlines()]
    for (op, reducer), (world, m, n, k) in shapes.items():
        plan_json = os.path.join(tmp, f"{op}_{reducer}.json")
        subprocess.run([tilelink, "plan", op, "--world", str(world), "--m", str(m), "--n", str(n), "--k", str(k),
                        "--json", plan_json] + ([] if reducer == "-" else ["--reducer", reducer]),
                       check=True, capture_output=True)
        plan_rows = json.load(open(plan_json))["tables"][0]["rows"]
        predicted = {r["variant"].split()[0]: r["time_us"] for r in plan_rows}
        for label, key in (("fused", "fused"), ("non-overlapped", "non-overlapped"), ("decomposed", "decomposed")):
            mine = [l for l in lines if l[:1] == [op] and l[5] == reducer and l[6] == label]
            want_measured = measured[(op, reducer, label)]
            if len(mine) != 1:
                print(f"FAIL: {op} {reducer} {label}: expected one line, got {len(mine)}:\n{out.stdout}")
                failed = True
                continue
            got_measured, got_predicted, ratio = float(mine[0][7]), float(mine[0][8]), float(mine[0][9])
            want_predicted = predicted[key]
            if (abs(got_measured - want_measured) > 0.06 or abs(got_predicted - want_predicted) > 0.06 or
                    abs(ratio - want_predicted / want_measured) > 0.006):
                print(f"FAIL: {op} {reducer} {label}: got {mine[0][7:]} want {want_measured:.1f} {want_predicted:.1f} "
                      f"{want_predicted / want_measured:.2f}")
                failed = True
    if any(l[:1] == ["signal_latency"] for l in lines):
        print("FAIL: a table without a plan was compared")
        failed = True
sys.exit(1 if failed else 0)
