"""A LLaMA MLP block, tensor- and sequence-parallel, on TileLink's overlapped operators.

    torchrun --nproc-per-node N examples/llama_mlp_tp.py [--model llama3-70b] [--tokens 8192]

Each rank holds S/N tokens of the sequence and 1/N of the weights (gate/up split by output
features, down by input features, as Megatron does):

    h   = AG+GEMM(x_shard, w_gate_up)     all-gather the tokens, overlapped with the GEMM
    a   = silu(h_gate) * h_up              SwiGLU, on this rank's features
    out = GEMM+RS(a, w_down)               GEMM, overlapped with the reduce-scatter of the tokens

It prints the time per step against the same block written with NCCL (all-gather, matmul,
reduce-scatter), and against PyTorch's async-TP (torch.ops.symm_mem.fused_all_gather_matmul /
fused_matmul_reduce_scatter) when the ranks have a GPU each; at N = 1, against torch.matmul alone.
Every variant's output is checked against the NCCL one first."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import tilelink

MODELS = {"llama3-8b": (4096, 14336), "llama3-70b": (8192, 28672), "llama3-405b": (16384, 53248)}


class TileLinkMlp(torch.nn.Module):
    """The block on torch.ops.tilelink.ag_gemm / gemm_rs; weights in nn.Linear's (out, in) layout."""

    def __init__(self, w_gate_up, w_down, group_name):
        super().__init__()
        self.w_gate_up, self.w_down, self.group_name = w_gate_up, w_down, group_name

    def forward(self, x_shard):
        h = torch.ops.tilelink.ag_gemm(x_shard, self.w_gate_up, self.group_name)
        gate, up = h.chunk(2, dim=1)
        return torch.ops.tilelink.gemm_rs((F.silu(gate) * up).contiguous(), self.w_down, self.group_name)


class NcclMlp(torch.nn.Module):
    """The same block with NCCL collectives around plain matmuls (no overlap)."""

    def __init__(self, w_gate_up, w_down, group):
        super().__init__()
        self.w_gate_up, self.w_down, self.group = w_gate_up, w_down, group

    def forward(self, x_shard):
        size = dist.get_world_size(self.group)
        full = x_shard.new_empty(x_shard.shape[0] * size, x_shard.shape[1])
        dist.all_gather_into_tensor(full, x_shard, group=self.group)
        gate, up = (full @ self.w_gate_up.T).chunk(2, dim=1)
        partial = (F.silu(gate) * up) @ self.w_down.T
        out = partial.new_empty(partial.shape[0] // size, partial.shape[1])
        dist.reduce_scatter_tensor(out, partial, group=self.group)
        return out


class AsyncTpMlp(torch.nn.Module):
    """The same block on PyTorch's async-TP fused operators (symmetric memory)."""

    def __init__(self, w_gate_up, w_down, group_name):
        super().__init__()
        self.w_gate_up_t, self.w_down_t, self.group_name = w_gate_up.T, w_down.T, group_name

    def forward(self, x_shard):
        _, (h,) = torch.ops.symm_mem.fused_all_gather_matmul(x_shard, [self.w_gate_up_t], 0, self.group_name)
        gate, up = h.chunk(2, dim=1)
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(
            F.silu(gate) * up, self.w_down_t, "sum", 0, self.group_name)


def step_time_ms(module, x, warmup, iters):
    for _ in range(warmup):
        module(x)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        module(x)
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="llama3-70b")
    p.add_argument("--tokens", type=int, default=8192, help="sequence length S (tokens of the whole group)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local % torch.cuda.device_count())
    gpu_each = int(os.environ.get("LOCAL_WORLD_SIZE", 1)) <= torch.cuda.device_count()
    dist.init_process_group("nccl" if gpu_each else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    group = dist.group.WORLD
    name = tilelink.init(group, heap_bytes=2 << 30)

    hidden, ffn = MODELS[a.model]
    if ffn % size or a.tokens % size:
        raise SystemExit(f"--tokens {a.tokens} and the model's FFN size {ffn} must divide by the {size} ranks")
    g = torch.Generator(device="cuda").manual_seed(0)
    scale = hidden ** -0.5
    w_gate_up = (torch.randn(2 * ffn // size, hidden, generator=g, device="cuda") * scale).bfloat16()
    w_down = (torch.randn(hidden, ffn // size, generator=g, device="cuda") * (ffn ** -0.5)).bfloat16()
    x = torch.randn(a.tokens // size, hidden, generator=g, device="cuda").bfloat16()

    variants = {"tilelink": TileLinkMlp(w_gate_up, w_down, name)}
    if gpu_each:
        variants["nccl"] = NcclMlp(w_gate_up, w_down, group)
    if size >= 2 and gpu_each:
        from torch.distributed._symmetric_memory import enable_symm_mem_for_group
        enable_symm_mem_for_group(name)
        variants["async-tp"] = AsyncTpMlp(w_gate_up, w_down, name)
    reference = variants.get("nccl")
    if size == 1:
        def matmul_only(t):
            gate, up = (t @ w_gate_up.T).chunk(2, dim=1)
            return (F.silu(gate) * up) @ w_down.T
        variants["torch.matmul"] = matmul_only
        reference = matmul_only
    want = reference(x).float() if reference is not None else None

    times = {}
    for label, module in variants.items():
        if want is not None:
            got = module(x).float()
            err = ((got - want).abs().max() / want.abs().max()).item()
            if err > 3e-2:
                raise SystemExit(f"rank {rank}: {label} is off the reference by {err:.3g} (relative to its largest value)")
        times[label] = step_time_ms(module, x, a.warmup, a.iters)
    if rank == 0:
        print(f"{a.model} MLP, {a.tokens} tokens, {size} rank(s) ({'one GPU each' if gpu_each else 'sharing GPUs'}); "
              f"ms per step, mean of {a.iters}")
        base = times["tilelink"]
        for label, t in times.items():
            print(f"  {label:14} {t:8.3f} ms   tilelink speedup {t / base:5.2f}x")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
