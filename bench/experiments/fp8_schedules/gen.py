#!/usr/bin/env python3
"""Writes the experiment's configurations into OUT (one .cu each, CUTLASS's rule: one configuration
per translation unit) and the lists main.cu includes."""
import pathlib, sys

# name, tile (M, N), cluster (M, N), scaling, schedule, pipelined promotion
CONFIGS = [
    ("tensor_coop_128x128_c2x1", (128, 128), (2, 1), "kTensor", "Cooperative", False),
    ("tensor_pipe_128x128_c2x1", (128, 128), (2, 1), "kTensor", "Cooperative", True),
    ("tensor_pipe_128x128_c1x1", (128, 128), (1, 1), "kTensor", "Cooperative", True),
    ("tensor_pipe_128x128_c1x2", (128, 128), (1, 2), "kTensor", "Cooperative", True),
    ("tensor_pipe_128x128_c2x2", (128, 128), (2, 2), "kTensor", "Cooperative", True),
    ("tensor_pipe_128x144_c2x1", (128, 144), (2, 1), "kTensor", "Cooperative", True),
    ("tensor_pp_64x128_c1x1", (64, 128), (1, 1), "kTensor", "PingPong", False),
    ("tensor_pp_64x128_c2x1", (64, 128), (2, 1), "kTensor", "PingPong", False),
    ("tensor_pp_64x128_c1x2", (64, 128), (1, 2), "kTensor", "PingPong", False),
    ("tensor_pp_64x256_c1x1", (64, 256), (1, 1), "kTensor", "PingPong", False),
    ("tensor_pipe_pp_64x128_c2x1", (64, 128), (2, 1), "kTensor", "PingPong", True),
    ("row_coop_128x128_c2x1", (128, 128), (2, 1), "kRow", "Cooperative", False),
    ("row_pipe_128x128_c2x1", (128, 128), (2, 1), "kRow", "Cooperative", True),
    ("block_coop_128x128_c2x1", (128, 128), (2, 1), "kBlock", "Cooperative", False),
]

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for name, (tm, tn), (cm, cn), scaling, schedule, pipelined in CONFIGS:
    (out / f"c_{name}.cu").write_text(f'''#include "timing.cuh"
double {name}(const ExpProblem& p) {{
  using Types = Sm90Fp8TnGemm<Shape<Int<{tm}>, Int<{tn}>, _128>, Shape<Int<{cm}>, Int<{cn}>, _1>, Fp8Scaling::{scaling},
                              NoWrap, NoWrap, {schedule}, false, {"true" if pipelined else "false"}>;
  return time_config<Types>("{name}", p);
}}
''')
(out / "configs.inc").write_text("".join(f"double {c[0]}(const ExpProblem&);\n" for c in CONFIGS))
(out / "runs.inc").write_text("".join(f'  run("{c[3]}", {c[0]}, "{c[0]}");\n' for c in CONFIGS))
