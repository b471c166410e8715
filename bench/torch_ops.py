"""torch.ops.tilelink.ag_gemm / gemm_rs against torch.matmul on the paper's shapes, one process per
GPU under torchrun (world 1: `torchrun --nproc-per-node 1 bench/torch_ops.py`). Each output is
checked against torch first; times are medians over --iters calls after --warmup, each call between
its own CUDA events, the variants interleaved call by call (as `tilelink bench` times the C++ ops: a
GPU that runs one GEMM back to back for seconds clocks differently from one that alternates).
"graph" is the operator captured once in a CUDA graph and replayed: its GPU work without the host
path (argument checks, set_operands, the op's enqueue), so eager / graph is the host's share.

  AG+GEMM (M, N, K) = (8192, 28672|14336|49152, 8192|4096|12288), N split over the ranks
  GEMM+RS (M, N, K) = (8192, 8192|4096|12288, 28672|14336|49152), K split over the ranks
torch.matmul runs the same per-rank GEMM with its operands already in place (no communication):
at world 1 the ratio is the operator's overhead over cuBLAS.

--cpp-json FILE...: the JSON of `tilelink bench ag_gemm|gemm_rs --world N --shapes paper --json FILE`
on the same machine; a column then gives the C++ op's fused time over the operator's (the same
kernels -- ag_gemm hands x_shard over as the op's a_source, so nothing is copied ahead of them --
timed in another process)."""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist

import tilelink

AG = [(8192, 28672, 8192), (8192, 14336, 4096), (8192, 49152, 12288)]
RS = [(8192, 8192, 28672), (8192, 4096, 14336), (8192, 12288, 49152)]


def timed(fns, warmup, iters):
    """Median us per call of each of `fns`, interleaved call by call, each call between its own events."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
              for _ in fns]
    for i in range(iters):
        for fn, ev in zip(fns, events):
            ev[i][0].record()
            fn()
            ev[i][1].record()
    torch.cuda.synchronize()
    return [statistics.median(start.elapsed_time(stop) * 1000.0 for start, stop in ev) for ev in events]


def graphed(fn):
    """fn (already run eagerly once: the op is built) captured in a CUDA graph; returns its replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    torch.cuda.synchronize()
    return graph.replay


def cpp_fused_times(paths):
    """{(op, m, n, k): fused median us} from `tilelink bench ... --json` files."""
    times = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for table in doc["tables"]:
            p = table.get("params", {})
            for row in table["rows"]:
                if row.get("variant") == "tilelink fused" and {"m", "n", "k"} <= p.keys():
                    times[(table["name"], p["m"], p["n"], p["k"])] = row["time_us"]
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--cpp-json", nargs="*", default=[], help="tilelink bench JSON files to compare with")
    a = p.parse_args()
    cpp = cpp_fused_times(a.cpp_json)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    dist.init_process_group("nccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    group = tilelink.init(heap_bytes=3 << 30)
    torch.manual_seed(rank)
    rows = []
    for m, n, k in AG:
        x = torch.randn(m // size, k, device="cuda").bfloat16()
        w = torch.randn(n // size, k, device="cuda").bfloat16()
        full = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
        dist.all_gather_into_tensor(full, x)
        y = torch.ops.tilelink.ag_gemm(x, w, group)
        err = ((y.float() - full.float() @ w.float().T).abs().max() / (full.float() @ w.float().T).abs().max()).item()
        op = lambda: torch.ops.tilelink.ag_gemm(x, w, group)
        t_op, t_graph, t_mm = timed([op, graphed(op), lambda: torch.matmul(full, w.T)], a.warmup, a.iters)
        rows.append(("ag_gemm", m, n, k, t_op, t_graph, t_mm, err))
    for m, n, k in RS:
        x = torch.randn(m, k // size, device="cuda").bfloat16()
        w = torch.randn(n, k // size, device="cuda").bfloat16()
        z = torch.ops.tilelink.gemm_rs(x, w, group)
        want = x.float() @ w.float().T
        dist.all_reduce(want)
        want = want[rank * (m // size):(rank + 1) * (m // size)]
        err = ((z.float() - want).abs().max() / want.abs().max()).item()
        op = lambda: torch.ops.tilelink.gemm_rs(x, w, group)
        t_op, t_graph, t_mm = timed([op, graphed(op), lambda: torch.matmul(x, w.T)], a.warmup, a.iters)
        rows.append(("gemm_rs", m, n, k, t_op, t_graph, t_mm, err))
    if rank == 0:
        print(f"world {size}, {torch.cuda.get_device_name()}, torch {torch.__version__}; us per call, median of {a.iters}")
        print(f"{'op':8} {'M':>6} {'N':>6} {'K':>6} {'tilelink':>10} {'graph':>10} {'matmul':>10} {'matmul/op':>9} "
              f"{'graph/op':>8} {'C++ op':>10} {'C++/op':>7} {'max rel err':>11}")
        for op, m, n, k, t_op, t_graph, t_mm, err in rows:
            t_cpp = cpp.get((op, m, n, k))
            cpp_cols = f"{t_cpp:10.1f} {t_cpp / t_op:7.3f}" if t_cpp else f"{'-':>10} {'-':>7}"
            print(f"{op:8} {m:6} {n:6} {k:6} {t_op:10.1f} {t_graph:10.1f} {t_mm:10.1f} {t_mm / t_op:9.3f} "
                  f"{t_graph / t_op:8.3f} {cpp_cols} {err:11.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
