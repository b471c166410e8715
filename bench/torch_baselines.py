#!/usr/bin/env python3
"""PyTorch's side of the multi-GPU comparison (issue 8), on the shapes tilelink bench uses.

For AG+GEMM, GEMM+RS (the paper's three shapes each) and the LLaMA-3.1-70B MLP, one process per
GPU, bf16:

  cuBLAS            the rank's GEMM(s) through torch.mm on complete inputs (the compute ceiling)
  NCCL              all_gather_into_tensor / reduce_scatter_tensor alone (the communication
                    ceiling), with nccl-tests' bus bandwidth: busbw = algbw * (P - 1) / P
  non-overlapped    NCCL collective, then cuBLAS (or cuBLAS, then NCCL)
  async-TP          torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter
                    (PyTorch's decomposed overlap on symmetric memory)
  ideal             max(T_gemm, T_comm)

Shapes follow tilelink bench: AG+GEMM (m, n, k) gathers A (m x k, m / P rows per rank) and each
rank multiplies it by its n / P rows of W (C_r = A W_r^T); GEMM+RS (m, n, k) gives each rank
k / P columns of A and of W, and rank r receives rows [r m / P, (r + 1) m / P) of the summed
m x n product. The MLP is AG+GEMM (SwiGLU's gate and up rows, 2 I / P per rank) -> SwiGLU ->
GEMM+RS.

Times: CUDA events on each rank after a device-side barrier, the slowest rank per call, median
of --iters calls after --warmup, the variants interleaved call by call (so that clock and power
drift fall on all of them alike). async-TP's result is checked against the non-overlapped one.

Run:  torchrun --nproc-per-node N bench/torch_baselines.py [--json FILE] [--warmup W] [--iters I]
Needs at least 2 GPUs (--smoke lets one GPU check the script itself; its numbers mean nothing).
"""

import argparse
import json
import math
import os
import statistics
import sys
import warnings

# NVLink multicast stays off: a program that creates multicast objects can take a shared host's
# GPUs out of service. setdefault keeps an explicit setting of the caller's.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

AG_GEMM_SHAPES = [("llama3-70b", 8192, 28672, 8192), ("llama3-8b", 8192, 14336, 4096),
                  ("gpt3-175b", 8192, 49152, 12288)]
GEMM_RS_SHAPES = [("llama3-70b", 8192, 8192, 28672), ("llama3-8b", 8192, 4096, 14336),
                  ("gpt3-175b", 8192, 12288, 49152)]
MLP_MODELS = {"llama3-70b": (8192, 28672)}  # hidden, intermediate
MLP_TOKENS = 8192

# Relative Frobenius error above which async-TP's result counts as wrong: a few bf16 ulps
# (bf16 results of fp32 and bf16 accumulations in different orders).
CHECK_TOLERANCE = 2.0 ** -6


def fail(message, code=2):
    print(f"torch_baselines: {message}", file=sys.stderr)
    sys.exit(code)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results as JSON to FILE (rank 0)")
    p.add_argument("--warmup", type=int, default=5, help="untimed calls before timing")
    p.add_argument("--iters", type=int, default=20, help="timed calls; the median is reported")
    p.add_argument("--ops", default="ag_gemm,gemm_rs,mlp", help="comma-separated: ag_gemm, gemm_rs, mlp")
    p.add_argument("--seed", type=int, default=1, help="random seed of the inputs")
    p.add_argument("--smoke", action="store_true",
                   help="allow a world of 1 GPU, to check the script itself (numbers mean nothing)")
    a = p.parse_args()
    if a.warmup < 0 or a.iters < 1:
        fail(f"--warmup {a.warmup} --iters {a.iters}: expected warmup >= 0 and iters >= 1", 64)
    unknown = set(a.ops.split(",")) - {"ag_gemm", "gemm_rs", "mlp"}
    if unknown:
        fail(f"--ops {a.ops}: unknown {sorted(unknown)}; expected ag_gemm, gemm_rs, mlp", 64)
    return a


class Env:
    """The process group, this rank's device and the helpers every measurement shares."""

    def __init__(self, args):
        if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
            fail("start me with torchrun, one process per GPU: "
                 "torchrun --nproc-per-node N bench/torch_baselines.py [...]")
        self.world = int(os.environ["WORLD_SIZE"])
        self.rank = int(os.environ["RANK"])
        local = int(os.environ["LOCAL_RANK"])
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
        minimum = 1 if args.smoke else 2
        if visible < minimum or self.world < minimum:
            fail(f"needs at least {minimum} GPUs, one process each: {visible} GPU(s) visible, "
                 f"{self.world} process(es) started (torchrun --nproc-per-node N, N >= 2 and <= the GPU count)")
        if local >= visible:
            fail(f"local rank {local} has no GPU of its own ({visible} visible): use --nproc-per-node <= {visible}")
        self.device = torch.device("cuda", local)
        torch.cuda.set_device(self.device)
        dist.init_process_group("nccl", device_id=self.device)
        self.group = dist.group.WORLD
        self.group_name = self.group.group_name
        import torch.distributed._symmetric_memory as symm_mem  # registers torch.ops.symm_mem's CUDA ops
        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # older torch needs it; newer deprecates it
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(self.group_name)
        self.warmup, self.iters = args.warmup, args.iters
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(args.seed * 1000003 + self.rank)
        self._barrier_token = torch.zeros(1, device=self.device)

    def uniform(self, *shape, scale=1.0):
        """bf16 uniform in [-scale, scale): fresh random data, never zeros."""
        t = torch.rand(*shape, device=self.device, generator=self.generator, dtype=torch.float32)
        return ((t * 2 - 1) * scale).to(torch.bfloat16)

    def time(self, steps):
        """{name: median, min and max over calls of the slowest rank's time in microseconds} for
        the callables in `steps`, timed round-robin, one call of each per round."""
        for _ in range(self.warmup):
            for fn in steps.values():
                fn()
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = {name: [] for name in steps}
        for _ in range(self.iters):
            for name, fn in steps.items():
                # A device-side barrier: every rank's start event follows the same all-reduce.
                dist.all_reduce(self._barrier_token, group=self.group)
                start.record()
                fn()
                stop.record()
                stop.synchronize()
                samples[name].append(start.elapsed_time(stop) * 1e3)
        t = torch.tensor([samples[name] for name in steps], device=self.device, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        stats = {}
        for name, slowest in zip(steps, t.tolist()):
            stats[name] = {"median_us": statistics.median(slowest), "min_us": min(slowest), "max_us": max(slowest)}
        return stats

    def rel_error(self, got, want):
        """Relative Frobenius error of got against want, the largest over the ranks."""
        e = torch.tensor([(torch.linalg.vector_norm((got.float() - want.float()).flatten()) /
                           torch.linalg.vector_norm(want.float().flatten())).item()],
                         device=self.device, dtype=torch.float64)
        dist.all_reduce(e, op=dist.ReduceOp.MAX, group=self.group)
        return e.item()


def busbw(bytes_total, t, world):
    """nccl-tests' bus bandwidth in GB/s (10^9 bytes/s) of an all-gather or reduce-scatter."""
    return bytes_total / (t["median_us"] * 1e-6) * (world - 1) / world / 1e9


def result(env, op, label, shape, flop, comm_bytes, t, error, ideal=None):
    """One row: `t` holds the times of cublas, nccl, non_overlapped and async_tp; ideal defaults to
    max(T_gemm, T_comm)."""
    t_gemm, t_comm, t_non, t_async = t["cublas"], t["nccl"], t["non_overlapped"], t["async_tp"]
    if ideal is None:
        ideal = max(t_gemm["median_us"], t_comm["median_us"])
    return {
        "op": op, "label": label, "world": env.world, "shape": shape, "times": t,
        "cublas": t_gemm, "cublas_tflops": flop / (t_gemm["median_us"] * 1e-6) / 1e12,
        "nccl": t_comm, "nccl_busbw_gbps": busbw(comm_bytes, t_comm, env.world),
        "non_overlapped": t_non, "async_tp": t_async, "ideal_us": ideal,
        "async_tp_vs_non_overlapped": t_non["median_us"] / t_async["median_us"],
        "ideal_over_async_tp": ideal / t_async["median_us"],
        "async_tp_rel_error": error, "check_ok": error <= CHECK_TOLERANCE,
    }


def bench_ag_gemm(env, label, m, n, k):
    """AG+GEMM: C_r (m x n/P) = all_gather(A shards) (m x k) @ W_r^T, W_r n/P x k."""
    p = env.world
    a_shard = env.uniform(m // p, k)
    w = env.uniform(n // p, k)
    a_full = torch.empty(m, k, dtype=torch.bfloat16, device=env.device)
    dist.all_gather_into_tensor(a_full, a_shard, group=env.group)
    c = torch.empty(m, n // p, dtype=torch.bfloat16, device=env.device)

    def gemm():
        torch.mm(a_full, w.t(), out=c)

    def comm():
        dist.all_gather_into_tensor(a_full, a_shard, group=env.group)

    def non_overlapped():
        comm()
        gemm()

    def async_tp():
        return torch.ops.symm_mem.fused_all_gather_matmul(a_shard, [w.t()], 0, env.group_name, return_A=False)[1][0]

    non_overlapped()
    error = env.rel_error(async_tp(), c)
    t = env.time({"cublas": gemm, "nccl": comm, "non_overlapped": non_overlapped, "async_tp": async_tp})
    return result(env, "ag_gemm", label, [m, n, k], 2.0 * m * n * k / p, m * k * 2, t, error)


def bench_gemm_rs(env, label, m, n, k):
    """GEMM+RS: out_r (m/P x n) = rows r of the sum over ranks of A_s (m x k/P) @ W_s^T, W_s n x k/P."""
    p = env.world
    a = env.uniform(m, k // p)
    w = env.uniform(n, k // p)
    partial = torch.empty(m, n, dtype=torch.bfloat16, device=env.device)
    out = torch.empty(m // p, n, dtype=torch.bfloat16, device=env.device)

    def gemm():
        torch.mm(a, w.t(), out=partial)

    def comm():
        dist.reduce_scatter_tensor(out, partial, group=env.group)

    def non_overlapped():
        gemm()
        comm()

    def async_tp():
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(a, w.t(), "sum", 0, env.group_name)

    non_overlapped()
    error = env.rel_error(async_tp(), out)
    t = env.time({"cublas": gemm, "nccl": comm, "non_overlapped": non_overlapped, "async_tp": async_tp})
    return result(env, "gemm_rs", label, [m, n, k], 2.0 * m * n * k / p, m * n * 2, t, error)


def bench_mlp(env, model):
    """The tensor-parallel SwiGLU MLP: AG+GEMM (gate | up rows) -> silu(g) * u -> GEMM+RS."""
    p = env.world
    hidden, intermediate = MLP_MODELS[model]
    m, i_local = MLP_TOKENS, intermediate // p
    x_shard = env.uniform(m // p, hidden)
    w1 = env.uniform(2 * i_local, hidden, scale=1.0 / 64)  # weights / 64 keep the activations O(1)
    w2 = env.uniform(hidden, i_local, scale=1.0 / 64)
    x = torch.empty(m, hidden, dtype=torch.bfloat16, device=env.device)
    dist.all_gather_into_tensor(x, x_shard, group=env.group)
    y = torch.empty(m, 2 * i_local, dtype=torch.bfloat16, device=env.device)
    h = torch.empty(m, i_local, dtype=torch.bfloat16, device=env.device)
    partial = torch.empty(m, hidden, dtype=torch.bfloat16, device=env.device)
    out = torch.empty(m // p, hidden, dtype=torch.bfloat16, device=env.device)

    def swiglu(t):
        return F.silu(t[:, :i_local]) * t[:, i_local:]

    def fc1():
        torch.mm(x, w1.t(), out=y)

    def act():
        torch.mul(F.silu(y[:, :i_local]), y[:, i_local:], out=h)

    def fc2():
        torch.mm(h, w2.t(), out=partial)

    def chain():
        fc1()
        act()
        fc2()

    def all_gather():
        dist.all_gather_into_tensor(x, x_shard, group=env.group)

    def reduce_scatter():
        dist.reduce_scatter_tensor(out, partial, group=env.group)

    def comm():
        all_gather()
        reduce_scatter()

    def non_overlapped():
        all_gather()
        chain()
        reduce_scatter()

    def async_tp():
        _, (y_tp,) = torch.ops.symm_mem.fused_all_gather_matmul(x_shard, [w1.t()], 0, env.group_name, return_A=False)
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(swiglu(y_tp), w2.t(), "sum", 0, env.group_name)

    non_overlapped()
    error = env.rel_error(async_tp(), out)
    t = env.time({"fc1": fc1, "activation": act, "fc2": fc2, "all_gather": all_gather,
                  "reduce_scatter": reduce_scatter, "cublas": chain, "nccl": comm, "non_overlapped": non_overlapped,
                  "async_tp": async_tp})
    ideal = (max(t["fc1"]["median_us"], t["all_gather"]["median_us"]) + t["activation"]["median_us"] +
             max(t["fc2"]["median_us"], t["reduce_scatter"]["median_us"]))
    flop = 2.0 * m * hidden * 3 * i_local
    return result(env, "mlp", model, [m, hidden, intermediate], flop, 2 * m * hidden * 2, t, error, ideal)


def nccl_version():
    v = torch.cuda.nccl.version()
    return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)


def print_table(env, results):
    print(f"\nPyTorch baselines, {env.world} ranks on {env.world} GPUs ({torch.cuda.get_device_name(env.device)}), "
          f"torch {torch.__version__}, NCCL {nccl_version()}, bf16; "
          f"slowest rank per call, median of {env.iters} after {env.warmup} warm-up")
    head = (f"{'op':8} {'shape (m, n, k)':22} {'cuBLAS µs':>10} {'TFLOP/s':>8} {'NCCL µs':>9} {'busbw GB/s':>10} "
            f"{'non-ovl µs':>10} {'async-TP µs':>11} {'ideal µs':>9} {'TP/non':>7} {'ideal/TP':>8}  check")
    print(head)
    print("-" * len(head))
    for r in results:
        shape = "(" + ", ".join(map(str, r["shape"])) + ")"
        print(f"{r['op']:8} {shape:22} {r['cublas']['median_us']:10.1f} {r['cublas_tflops']:8.1f} "
              f"{r['nccl']['median_us']:9.1f} {r['nccl_busbw_gbps']:10.1f} {r['non_overlapped']['median_us']:10.1f} "
              f"{r['async_tp']['median_us']:11.1f} {r['ideal_us']:9.1f} {r['async_tp_vs_non_overlapped']:7.3f} "
              f"{r['ideal_over_async_tp']:8.3f}  {'ok' if r['check_ok'] else 'FAILED'} "
              f"(rel err {r['async_tp_rel_error']:.1e}) {r['label']}")
    print("TP/non = non-overlapped / async-TP (speedup); ideal = max(cuBLAS, NCCL); busbw = algbw * (P-1)/P")
    print("mlp: cuBLAS = fc1 + SwiGLU + fc2, NCCL = all-gather + reduce-scatter of the tokens (busbw over both), "
          "ideal = max(fc1, all-gather) + SwiGLU + max(fc2, reduce-scatter)")


def main():
    args = parse_args()
    env = Env(args)
    ops = args.ops.split(",")
    results = []
    if "ag_gemm" in ops:
        results += [bench_ag_gemm(env, *s) for s in AG_GEMM_SHAPES]
    if "gemm_rs" in ops:
        results += [bench_gemm_rs(env, *s) for s in GEMM_RS_SHAPES]
    if "mlp" in ops:
        results += [bench_mlp(env, model) for model in MLP_MODELS]
    if env.rank == 0:
        print_table(env, results)
        if args.json:
            meta = {"world": env.world, "device": torch.cuda.get_device_name(env.device), "torch": torch.__version__,
                    "nccl": nccl_version(), "warmup": env.warmup, "iters": env.iters,
                    "env": {k: os.environ.get(k) for k in
                            ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")}}
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "results": results}, f, indent=1)
            print(f"wrote {args.json}")
    failed = [f"{r['op']} {r['label']}" for r in results
              if not (math.isfinite(r["async_tp_rel_error"]) and r["check_ok"])]
    dist.destroy_process_group()
    if failed:
        fail(f"async-TP's result differs from the non-overlapped one beyond {CHECK_TOLERANCE:.1e}: "
             f"{', '.join(failed)}", 1)


if __name__ == "__main__":
    main()
