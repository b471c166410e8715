"""One rank of the GPU tests, started by torchrun (python/tests/test_gpu.py): every operator against
a torch reference built from all ranks' shards, fresh random inputs each call, outputs over
poisoned memory, several calls (mlp with SwiGLU and GELU); then a step of both operators (AG+GEMM -> SiLU -> GEMM+RS)
captured in a CUDA graph and replayed on fresh inputs, with an eager step between two replays.
Exits non-zero on the first mismatch."""
import os
import sys

import torch
import torch.distributed as dist

import tilelink


def poison_next_allocation(rows, cols):
    # The caching allocator hands this block to the op's output next: NaN unless fully written.
    torch.full((rows, cols), float("nan"), dtype=torch.bfloat16, device="cuda")


def check(name, got, want, bound):
    """got (bf16) against want (fp32) within `bound` plus got's own bf16 rounding."""
    err = (got.float() - want).abs()
    bad = ~(err <= bound + want.abs() / 128)
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        cols = got.shape[1]
        raise AssertionError(f"rank {dist.get_rank()}: {name}: {int(bad.sum())} of {got.numel()} off; first at "
                             f"({i // cols}, {i % cols}): got {float(got.flatten()[i])}, want {float(want.flatten()[i])}")


def mlp_reference(x, w1s, w2s, activation, rows):
    """The MLP block's rows `rows` in fp32 from all ranks' weights, and a worst-case bound for the
    op's bf16 intermediates: y rounded to bf16 (2^-8 relative), the activation's output too."""
    want, bound = 0, 1e-2
    for w1, w2 in zip(w1s, w2s):
        y = x.float() @ w1.float().T
        if activation == "swiglu":
            g, u = y.chunk(2, dim=1)
            h = torch.nn.functional.silu(g) * u
            dh = (2.1 * g.abs() * u.abs() + h.abs()) / 256  # |silu'| <= 1.1; silu(g) <= |g|
        else:
            h = torch.nn.functional.gelu(y)
            dh = (1.13 * y.abs() + h.abs()) / 256  # |gelu'| <= 1.13
        p = (h @ w2.float().T)[rows]
        want = want + p
        bound = bound + (dh @ w2.float().abs().T)[rows] + p.abs() / 256
    return want, bound


def check_mlp(rank, size, m_per_rank, hidden, i_local, activation, group, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
    m = m_per_rank * size
    fc1_rows = 2 * i_local if activation == "swiglu" else i_local
    x = torch.randn(m, hidden, generator=g, device="cuda").bfloat16()
    w1s = [(torch.randn(fc1_rows, hidden, generator=g, device="cuda") / hidden ** 0.5).bfloat16() for _ in range(size)]
    w2s = [(torch.randn(hidden, i_local, generator=g, device="cuda") / i_local ** 0.5).bfloat16() for _ in range(size)]
    rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
    poison_next_allocation(m_per_rank, hidden)
    got = torch.ops.tilelink.mlp(x[rows].contiguous(), w1s[rank], w2s[rank], group, activation)
    want, bound = mlp_reference(x, w1s, w2s, activation, rows)
    name = f"mlp {activation} ({m_per_rank}, {hidden}, {i_local})"
    check(name, got, want, bound)
    relative = float((got.float() - want).norm() / want.norm())
    assert relative < 1e-2, f"rank {rank}: {name}: relative error {relative:.3g}"


def graph_replays(group, rank, size):
    m_per_rank, n, k, n2 = 256, 512, 384, 256
    m = m_per_rank * size
    x_shard = torch.empty(m_per_rank, k, dtype=torch.bfloat16, device="cuda")  # the graph's inputs
    w1 = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
    w2 = torch.empty(n2, n, dtype=torch.bfloat16, device="cuda")

    def step():
        h = torch.nn.functional.silu(torch.ops.tilelink.ag_gemm(x_shard, w1, group))
        return torch.ops.tilelink.gemm_rs(h, w2, group)

    def fresh_inputs(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        # nn.Linear-like scales: y and h of order 1.
        w1s = [(torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).bfloat16() for _ in range(size)]
        w2s = [(torch.randn(n2, n, generator=g, device="cuda") / n ** 0.5).bfloat16() for _ in range(size)]
        x_shard.copy_(x[rank * m_per_rank:(rank + 1) * m_per_rank])
        w1.copy_(w1s[rank])
        w2.copy_(w2s[rank])
        rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
        want, bound = 0, 1e-2
        for r in range(size):
            y = x.float() @ w1s[r].float().T
            h = torch.nn.functional.silu(y)
            want = want + (h @ w2s[r].float().T)[rows]
            # The op's h is silu of a bf16 y, rounded to bf16: each h_j off by at most
            # 2^-8 (|y_j| max|silu'| + |h_j|) <= |y_j| / 100; the partial is rounded to bf16 too.
            bound = bound + (y.abs() @ w2s[r].float().abs().T)[rows] / 100
            bound = bound + (h @ w2s[r].float().T)[rows].abs() / 256
        return want, bound

    fresh_inputs(2000)
    step()  # builds the ops: the first call of a shape cannot be captured
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for i, eager in enumerate([False, False, True, False]):
        want, bound = fresh_inputs(2001 + i)
        out.fill_(float("nan"))
        if eager:
            got = step()
        else:
            graph.replay()
            got = out
        name = f"captured step, {'eager call' if eager else 'replay'} {i}"
        check(name, got, want, bound)
        # The element bound is a worst case; stale or partly stale inputs also show here.
        relative = float((got.float() - want).norm() / want.norm())
        assert relative < 1e-2, f"rank {rank}: {name}: relative error {relative:.3g}"
    torch.cuda.synchronize()
    dist.barrier()


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local % torch.cuda.device_count())
    # Several ranks on one GPU: NCCL refuses a shared device, gloo carries the bootstrap instead.
    shared_gpu = int(os.environ["LOCAL_WORLD_SIZE"]) > torch.cuda.device_count()
    dist.init_process_group("gloo" if shared_gpu else "nccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    group = tilelink.init()
    shapes = [(256, 512, 384), (128, 512, 256)]  # (rows per rank, N, K): a second shape builds a second op
    for call in range(4):
        m_per_rank, n, k = shapes[call % 2]
        m = m_per_rank * size
        g = torch.Generator(device="cuda").manual_seed(1000 + call)  # the same on every rank
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        ws = [torch.randn(n, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
        poison_next_allocation(m, n)
        y = torch.ops.tilelink.ag_gemm(x[rank * m_per_rank:(rank + 1) * m_per_rank].contiguous(), ws[rank], group)
        check(f"ag_gemm call {call}", y, x.float() @ ws[rank].float().T, bound=1e-2)

        xs = [torch.randn(m, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
        poison_next_allocation(m_per_rank, n)
        z = torch.ops.tilelink.gemm_rs(xs[rank], ws[rank], group)
        rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
        partials = [(xs[r].float() @ ws[r].float().T)[rows] for r in range(size)]
        # Each rank's partial is rounded to bf16 before the sum: 2^-8 of its magnitude, each.
        bound = 1e-2 + sum(p.abs() for p in partials) / 256
        check(f"gemm_rs call {call}", z, sum(partials), bound=bound)

        check_mlp(rank, size, m_per_rank, k, 128 if call % 2 == 0 else 256, ["swiglu", "gelu"][call // 2 % 2],
                  group, seed=1500 + call)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: ag_gemm, gemm_rs and mlp match torch over 4 calls", flush=True)
    graph_replays(group, rank, size)
    print(f"rank {rank} of {size}: a captured step matches torch over 3 replays", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
