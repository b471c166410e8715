"""One rank of the GPU tests, started by torchrun (python/tests/test_gpu.py): every operator (ag_gemm,
gemm_rs, gemm_ar, gemm_ar_rmsnorm, mlp, moe, sp_attention, and FP8's quantize_weight, ag_gemm_fp8,
gemm_rs_fp8) against
a torch reference built from all ranks' shards, fresh random inputs each call, outputs over
poisoned memory, several calls (mlp with SwiGLU and GELU); then a step of both operators (AG+GEMM -> SiLU -> GEMM+RS)
captured in a CUDA graph and replayed on fresh inputs, with an eager step between two replays and two
replays back to back; the mlp operator captured alone; a decode step (gemm_ar, gemm_ar_rmsnorm) captured
alone. With TILELINK_TEST_FAULT the last rank stops
calling and the others must get a TimeoutError that names it.
Exits non-zero on the first mismatch."""
import contextlib
import os
import sys

import torch
import torch.distributed as dist

import tilelink


@contextlib.contextmanager
def diagnosed(rank, group, what):
    """Runs a step; a CUDA error in it (a kernel fault, or a wait that trapped: torch reports both
    as "unspecified launch failure", possibly at a later call) is printed with the step's name and
    what tilelink.synchronize says of it -- the op, rank, tile and channel of a timed-out wait --
    then raised. A wrong result (AssertionError) passes through as it is."""
    try:
        yield
    except RuntimeError as e:
        print(f"rank {rank}: {what}: {type(e).__name__}: {str(e).splitlines()[0]}", flush=True)
        try:
            tilelink.synchronize(group)
            print(f"rank {rank}: tilelink.synchronize after it: no wait of TileLink's timed out", flush=True)
        except Exception as why:  # noqa: BLE001 -- the diagnosis, whatever it is
            print(f"rank {rank}: tilelink.synchronize after it: {str(why).splitlines()[0]}", flush=True)
        raise


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


def moe_reference(x, ids, weights, w1s, w2s, activation, rows):
    """The MoE layer's rows `rows` in fp32 from all ranks' expert slices (w1s[r]: E x n1 x H, w2s[r]:
    E x H x I/P), and a bound for the op's bf16 intermediates as mlp_reference's, per routed term."""
    xs, ids, weights = x[rows].float(), ids[rows], weights[rows].float()
    want = torch.zeros(xs.shape[0], x.shape[1], device=x.device)
    bound = torch.full_like(want, 1e-2)
    for w1, w2 in zip(w1s, w2s):
        part = torch.zeros_like(want)
        mag = torch.zeros_like(want)
        for j in range(ids.shape[1]):
            for e in ids[:, j].unique().tolist():
                sel = (ids[:, j] == e).nonzero().flatten()
                y = xs[sel] @ w1[e].float().T
                if activation == "swiglu":
                    g, u = y.chunk(2, dim=1)
                    h = torch.nn.functional.silu(g) * u
                    dh = (2.1 * g.abs() * u.abs() + h.abs()) / 256
                else:
                    h = torch.nn.functional.gelu(y)
                    dh = (1.13 * y.abs() + h.abs()) / 256
                p = h @ w2[e].float().T
                wj = weights[sel, j:j + 1]
                part[sel] += wj * p
                mag[sel] += wj.abs() * ((dh @ w2[e].float().abs().T) + p.abs() / 256)
        want += part
        bound += mag + part.abs() / 256  # each rank's combined rows rounded to bf16
    return want, bound


def check_moe(rank, size, group, seed, m_per_rank, hidden, i_local, experts, topk, activation, own_routing):
    """moe against the torch reference: the routing of this rank's tokens (int64 ids, fp32 weights,
    as torch.topk and softmax give) or of every token (int32 ids, bf16 weights)."""
    g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
    m = m_per_rank * size
    fc1 = 2 * i_local if activation == "swiglu" else i_local
    x = torch.randn(m, hidden, generator=g, device="cuda").bfloat16()
    logits = torch.randn(m, experts, generator=g, device="cuda")
    top, ids = torch.topk(logits, topk, dim=-1)
    weights = torch.softmax(top, dim=-1)
    w1s = [(torch.randn(experts, fc1, hidden, generator=g, device="cuda") / hidden ** 0.5).bfloat16() for _ in range(size)]
    w2s = [(torch.randn(experts, hidden, i_local, generator=g, device="cuda") / i_local ** 0.5).bfloat16()
           for _ in range(size)]
    rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
    if own_routing:
        ids_in, weights_in = ids[rows].contiguous(), weights[rows].contiguous()
    else:
        ids_in, weights_in = ids.int(), weights.bfloat16()
    poison_next_allocation(m_per_rank, hidden)
    got = torch.ops.tilelink.moe(x[rows].contiguous(), ids_in, weights_in, w1s[rank], w2s[rank], group, activation)
    want, bound = moe_reference(x, ids, weights_in.float() if not own_routing else weights, w1s, w2s, activation, rows)
    name = (f"moe {activation} ({m_per_rank}, {hidden}, {i_local}, {experts} experts, top-{topk}, "
            f"{'own' if own_routing else 'every'} token routing)")
    check(name, got, want, bound)
    relative = float((got.float() - want).norm() / want.norm())
    assert relative < 1e-2, f"rank {rank}: {name}: relative error {relative:.3g}"


def positions(rank, size, spr, layout):
    """The sequence positions of this rank's rows: "zigzag" holds chunks r and 2P-1-r of 2P."""
    if layout == "contiguous":
        return torch.arange(rank * spr, (rank + 1) * spr)
    half = spr // 2
    return torch.cat([torch.arange(rank * half, (rank + 1) * half),
                      torch.arange((2 * size - 1 - rank) * half, (2 * size - rank) * half)])


def check_sp_attention(rank, size, group, seed, spr, q_heads, kv_heads, d, causal, layout):
    """sp_attention against attention in fp32 over the whole sequence, this rank's rows and LSE."""
    g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
    seq = spr * size
    q_all = torch.randn(seq, q_heads, d, generator=g, device="cuda").bfloat16()  # in position order
    k_all = torch.randn(seq, kv_heads, d, generator=g, device="cuda").bfloat16()
    v_all = torch.randn(seq, kv_heads, d, generator=g, device="cuda").bfloat16()
    mine = positions(rank, size, spr, layout).cuda()
    poison_next_allocation(spr * q_heads, d)
    o, lse = torch.ops.tilelink.sp_attention(q_all[mine].contiguous(), k_all[mine].contiguous(),
                                             v_all[mine].contiguous(), group, causal, layout)
    rep = q_heads // kv_heads
    k = k_all.float().repeat_interleave(rep, dim=1).transpose(0, 1)  # [Hq, S, D]
    v = v_all.float().repeat_interleave(rep, dim=1).transpose(0, 1)
    q = q_all[mine].float().transpose(0, 1)                           # [Hq, spr, D]
    s = q @ k.transpose(1, 2) / d ** 0.5                               # [Hq, spr, S]
    if causal:
        s = s.masked_fill(torch.arange(seq, device="cuda")[None, None, :] > mine[None, :, None], float("-inf"))
    want_lse = torch.logsumexp(s, dim=-1)                              # [Hq, spr]
    want = (torch.softmax(s, dim=-1) @ v).transpose(0, 1)              # [spr, Hq, D]
    name = f"sp_attention ({spr}, {q_heads}, {kv_heads}, {d}, {'causal' if causal else 'full'}, {layout})"
    check(name, o.reshape(spr, -1), want.reshape(spr, -1), bound=2e-2 + 2e-2 * want.abs().reshape(spr, -1))
    err = (lse - want_lse).abs()
    assert bool((err <= 1e-3 + 1e-3 * want_lse.abs()).all()), f"rank {rank}: {name}: LSE off by up to {float(err.max())}"


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
    # Two replays back to back, with new inputs between them and no host synchronisation: the
    # second replay's call barrier must keep it from overtaking a peer still in the first.
    results = []
    for i in range(2):
        want, bound = fresh_inputs(3001 + i)
        graph.replay()
        results.append((out.clone(), want, bound))
    for i, (got, want, bound) in enumerate(results):
        check(f"captured step, back-to-back replay {i}", got, want, bound)
    torch.cuda.synchronize()
    dist.barrier()


def mlp_graph_replays(group, rank, size):
    """The mlp operator captured alone, replayed back to back on fresh inputs."""
    m_per_rank, hidden, i_local = 128, 256, 128
    m = m_per_rank * size
    x_shard = torch.empty(m_per_rank, hidden, dtype=torch.bfloat16, device="cuda")
    w1 = torch.empty(2 * i_local, hidden, dtype=torch.bfloat16, device="cuda")
    w2 = torch.empty(hidden, i_local, dtype=torch.bfloat16, device="cuda")
    rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)

    def fresh_inputs(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
        x = torch.randn(m, hidden, generator=g, device="cuda").bfloat16()
        w1s = [(torch.randn(2 * i_local, hidden, generator=g, device="cuda") / hidden ** 0.5).bfloat16() for _ in range(size)]
        w2s = [(torch.randn(hidden, i_local, generator=g, device="cuda") / i_local ** 0.5).bfloat16() for _ in range(size)]
        x_shard.copy_(x[rows])
        w1.copy_(w1s[rank])
        w2.copy_(w2s[rank])
        return mlp_reference(x, w1s, w2s, "swiglu", rows)

    fresh_inputs(4000)
    torch.ops.tilelink.mlp(x_shard, w1, w2, group)  # builds the op outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.tilelink.mlp(x_shard, w1, w2, group)
    results = []
    for i in range(3):
        want, bound = fresh_inputs(4001 + i)
        out.fill_(float("nan"))
        graph.replay()
        results.append((out.clone(), want, bound))
    for i, (got, want, bound) in enumerate(results):
        check(f"captured mlp, replay {i}", got, want, bound)
    torch.cuda.synchronize()
    dist.barrier()


def gemm_ar_graph_replays(group, rank, size):
    """A decode step captured alone: gemm_ar, then gemm_ar_rmsnorm (their reductions launched early
    behind their GEMMs: programmatic dependencies inside the graph), replayed on fresh inputs with
    an eager step after each; each replay against torch and against that eager step's bits."""
    m, n, k = 8, 264, 512
    x = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
    w = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
    residual = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    gamma = torch.empty(n, dtype=torch.bfloat16, device="cuda")

    def step():
        y = torch.ops.tilelink.gemm_ar(x, w, group)
        out, h = torch.ops.tilelink.gemm_ar_rmsnorm(x, w, residual, gamma, group, 1e-5)
        return y, out, h

    def fresh_inputs(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
        xs = [torch.randn(m, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
        ws = [(torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).bfloat16() for _ in range(size)]
        residual.copy_(torch.randn(m, n, generator=g, device="cuda").bfloat16())
        gamma.copy_((1 + 0.5 * torch.randn(n, generator=g, device="cuda")).bfloat16())
        x.copy_(xs[rank])
        w.copy_(ws[rank])
        want = sum(xs[r].float() @ ws[r].float().T for r in range(size))
        bound = 1e-2 + sum(xs[r].float().abs() @ ws[r].float().abs().T for r in range(size)) / 256
        return want, bound

    fresh_inputs(4100)
    step()  # builds both ops outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = step()
    for i in range(3):
        want, bound = fresh_inputs(4101 + i)
        for t in outs:
            t.fill_(float("nan"))
        graph.replay()
        got = [t.clone() for t in outs]
        check(f"captured gemm_ar, replay {i}", got[0], want, bound)
        check(f"captured gemm_ar_rmsnorm (h), replay {i}", got[2], want + residual.float(), bound)
        eager = step()
        for name, a, b in zip(("gemm_ar", "gemm_ar_rmsnorm out", "gemm_ar_rmsnorm h"), got, eager):
            if not torch.equal(a.view(torch.int16), b.view(torch.int16)):
                raise AssertionError(f"rank {rank}: captured {name}, replay {i}: not an eager call's bits")
    torch.cuda.synchronize()
    dist.barrier()


def same_bits_on_every_rank(name, t):
    """Every rank's `t` is the same bits (the all-reduce sums in rank order on every rank)."""
    import hashlib

    digest = hashlib.sha256(bytes(t.contiguous().view(torch.uint8).cpu().clone().untyped_storage())).hexdigest()
    digests = [None] * dist.get_world_size()
    dist.all_gather_object(digests, digest)
    if len(set(digests)) != 1:
        raise AssertionError(f"rank {dist.get_rank()}: {name}: the ranks' results differ ({digests})")


def check_gemm_ar(rank, size, group, seed, m, n=264, k=512):
    """gemm_ar and gemm_ar_rmsnorm at any m against torch from every rank's shard; the same bits on
    every rank and on a repeated call with the same inputs."""
    g = torch.Generator(device="cuda").manual_seed(seed)  # the same on every rank
    xs = [torch.randn(m, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
    ws = [(torch.randn(n, k, generator=g, device="cuda") / k ** 0.5).bfloat16() for _ in range(size)]
    residual = torch.randn(m, n, generator=g, device="cuda").bfloat16()
    gamma = (1 + 0.5 * torch.randn(n, generator=g, device="cuda")).bfloat16()
    want = sum(xs[r].float() @ ws[r].float().T for r in range(size))
    # Each K slice's partial is rounded to bf16 before the sum: 2^-8 of at most |x| |w|^T each.
    bound = 1e-2 + sum(xs[r].float().abs() @ ws[r].float().abs().T for r in range(size)) / 256
    poison_next_allocation(m, n)
    y = torch.ops.tilelink.gemm_ar(xs[rank], ws[rank], group)
    check(f"gemm_ar m={m}", y, want, bound=bound)
    same_bits_on_every_rank(f"gemm_ar m={m}", y)
    y2 = torch.ops.tilelink.gemm_ar(xs[rank], ws[rank], group)
    if not torch.equal(y.view(torch.int16), y2.view(torch.int16)):
        raise AssertionError(f"rank {rank}: gemm_ar m={m}: a repeated call changed the bits")
    out, h = torch.ops.tilelink.gemm_ar_rmsnorm(xs[rank], ws[rank], residual, gamma, group, 1e-5)
    check(f"gemm_ar_rmsnorm m={m} (h)", h, want + residual.float(), bound=bound)
    hf = h.float()
    normed = hf * torch.rsqrt(hf.pow(2).mean(dim=1, keepdim=True) + 1e-5) * gamma.float()
    check(f"gemm_ar_rmsnorm m={m} (out)", out, normed, bound=1e-2)
    same_bits_on_every_rank(f"gemm_ar_rmsnorm m={m}", torch.cat([out, h]))


def stay_away_or_name_the_absent(fault, group, rank, size):
    """The last rank stops calling; every other rank must get a TimeoutError that names it, from the
    next call's wait ("call": the op was built; tilelink.synchronize raises it) or from building an
    op ("build": World::barrier, raised by the call). Prints what it got; the absent rank sleeps
    past the others' bound (its memory stays mapped) and leaves."""
    absent = size - 1
    g = torch.Generator(device="cuda").manual_seed(5000)
    x = torch.randn(128, 256, generator=g, device="cuda").bfloat16()
    w = torch.randn(256, 256, generator=g, device="cuda").bfloat16()
    torch.ops.tilelink.ag_gemm(x, w, group)  # every rank: builds the op and makes one call
    tilelink.synchronize(group)
    dist.barrier()
    if rank == absent:
        import time
        time.sleep(15)
        os._exit(0)
    try:
        if fault == "call":
            torch.ops.tilelink.ag_gemm(x, w, group)
            tilelink.synchronize(group)
        else:
            xs = torch.randn(128 * size, 256, generator=g, device="cuda").bfloat16()
            torch.ops.tilelink.gemm_rs(xs, w, group)  # a new op: its build is collective
            tilelink.synchronize(group)
        print(f"rank {rank}: NOT NAMED: the call completed without rank {absent}", flush=True)
    except RuntimeError as e:
        print(f"rank {rank}: NAMED ({fault}): {e}", flush=True)
    # Destructors would meet a lost CUDA context and peers that have left.
    os._exit(0)


def check_ag_gemm(rank, size, group, call, m_per_rank, n, k, g):
    """ag_gemm at (m_per_rank x size, n, k) against torch, on a poisoned output; returns the weights."""
    m = m_per_rank * size
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    ws = [torch.randn(n, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
    poison_next_allocation(m, n)
    y = torch.ops.tilelink.ag_gemm(x[rank * m_per_rank:(rank + 1) * m_per_rank].contiguous(), ws[rank], group)
    check(f"ag_gemm call {call} ({m}, {n}, {k})", y, x.float() @ ws[rank].float().T, bound=1e-2)
    return ws


def check_dense(rank, size, group, call, m_per_rank, n, k):
    """ag_gemm and gemm_rs at (m_per_rank x size, n, k) against torch, on poisoned outputs."""
    m = m_per_rank * size
    g = torch.Generator(device="cuda").manual_seed(1000 + call)  # the same on every rank
    ws = check_ag_gemm(rank, size, group, call, m_per_rank, n, k, g)

    xs = [torch.randn(m, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
    poison_next_allocation(m_per_rank, n)
    z = torch.ops.tilelink.gemm_rs(xs[rank], ws[rank], group)
    rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
    partials = [(xs[r].float() @ ws[r].float().T)[rows] for r in range(size)]
    # Each rank's partial is rounded to bf16 before the sum: 2^-8 of its magnitude, each.
    bound = 1e-2 + sum(p.abs() for p in partials) / 256
    check(f"gemm_rs call {call} ({m}, {n}, {k})", z, sum(partials), bound=bound)


def e4m3_values(x, scaling):
    """The fp32 values an FP8 op multiplies for bf16 `x` (rows x K): scale = amax / 448 per tensor,
    row or 1 x 128 block (1 where amax is 0), e4m3(x / scale) saturated, times the scale."""
    xf = x.float()
    v = xf.view(xf.shape[0], -1, 128) if scaling == "block" else xf
    if scaling == "tensor":
        amax = xf.abs().amax().reshape(1, 1)
    else:
        amax = v.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
    return ((v / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float() * scale).view_as(xf)


def weight_values(w8, scale, scaling):
    """The fp32 values of tilelink.quantize_weight's (w8, scale)."""
    n, k = w8.shape
    if scaling == "tensor":
        return w8.float() * scale
    if scaling == "row":
        return w8.float() * scale[:, None]
    full = scale.repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    return w8.float() * full


def check_fp8(rank, size, group, call, m_per_rank, n, k, scaling):
    """quantize_weight, ag_gemm_fp8 (row and block) and gemm_rs_fp8 against torch's dequantised
    products, on poisoned outputs; the tolerance covers FP8 accumulation (8e-3 of the terms'
    magnitude) and a value the host rounds to the other neighbouring e4m3 (one in K)."""
    m = m_per_rank * size
    g = torch.Generator(device="cuda").manual_seed(4000 + call)  # the same on every rank
    w_bf16 = [torch.randn(n, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
    w8, ws = tilelink.quantize_weight(w_bf16[rank], scaling)
    w_deq = weight_values(w8, ws, scaling)
    # One e4m3 rounding: at most 2^-4 of a normal value, half the subnormal step (2^-10 of the
    # largest scale) of a small one.
    near = w_deq - w_bf16[rank].float()
    floor = float(w_bf16[rank].float().abs().max()) / 448 / 1024 + 1e-12
    if not bool((near.abs() <= w_bf16[rank].float().abs() / 16 + floor).all()):
        raise AssertionError(f"rank {rank}: quantize_weight ({scaling}) is not an e4m3 rounding of the weight")
    if scaling != "tensor":
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        poison_next_allocation(m, n)
        y = tilelink.ag_gemm_fp8(x[rank * m_per_rank:(rank + 1) * m_per_rank].contiguous(), w8, ws, group, scaling)
        xq = e4m3_values(x, scaling)
        check(f"ag_gemm_fp8 {scaling} call {call} ({m}, {n}, {k})", y, xq @ w_deq.T,
              bound=1e-2 + (xq.abs() @ w_deq.abs().T) * 8e-3)
    xs = [torch.randn(m, k, generator=g, device="cuda").bfloat16() for _ in range(size)]
    w8s = [tilelink.quantize_weight(w, scaling) for w in w_bf16]  # every rank's weight, for the reference
    poison_next_allocation(m_per_rank, n)
    z = tilelink.gemm_rs_fp8(xs[rank], w8, ws, group, scaling)
    rows = slice(rank * m_per_rank, (rank + 1) * m_per_rank)
    partials, bound = [], 1e-2
    for r in range(size):
        xq, wr = e4m3_values(xs[r], scaling)[rows], weight_values(*w8s[r], scaling)
        partials.append((xq @ wr.T).bfloat16().float())  # each partial stored as bf16
        bound = bound + (xq.abs() @ wr.abs().T) * 8e-3 + partials[-1].abs() / 256
    check(f"gemm_rs_fp8 {scaling} call {call} ({m}, {n}, {k})", z, sum(partials), bound=bound)


def put_signal_only(rank, size, group):
    """TILELINK_TRANSPORT=put_signal: every put and signal to a peer through NVSHMEM. ag_gemm and
    sp_attention (copy-engine all-gathers), gemm_rs, mlp and gemm_rs_fp8 (the copy-engine scatter),
    gemm_ar (its copy-engine path) and moe (the staged combine) against torch; then the captured
    step and the captured mlp, replayed."""
    for call in range(4):
        g = torch.Generator(device="cuda").manual_seed(3000 + call)
        check_ag_gemm(rank, size, group, call, [256, 7][call % 2], 264, 200, g)
        check_sp_attention(rank, size, group, 3100 + call, spr=128 * (1 + call % 2), q_heads=4, kv_heads=2,
                           d=[128, 64][call % 2], causal=call % 2 == 0, layout=["zigzag", "contiguous"][call % 2])
        check_dense(rank, size, group, 3200 + call, [128, 7][call % 2], 264, 200)
        check_mlp(rank, size, [128, 7][call % 2], 200, 136, ["swiglu", "gelu"][call % 2], group, seed=3300 + call)
        check_gemm_ar(rank, size, group, 3400 + call, [1, 129][call % 2])
    check_fp8(rank, size, group, 0, 64, 264, 256, "row")
    for call, (m_per_rank, topk, activation, own) in enumerate([(96, 2, "swiglu", True), (40, 6, "gelu", False)]):
        check_moe(rank, size, group, 3500 + call, m_per_rank, 256, 128, 8, topk, activation, own)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: ag_gemm, sp_attention, gemm_rs, mlp, gemm_ar, moe and FP8 match torch over "
          "put_signal", flush=True)
    # Captured under put_signal: each replay's call barrier reaches the peers by NVSHMEM signal ops.
    graph_replays(group, rank, size)
    mlp_graph_replays(group, rank, size)
    print(f"rank {rank} of {size}: captured steps match torch over put_signal", flush=True)
    dist.destroy_process_group()
    return 0


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local % torch.cuda.device_count())
    # Several ranks on one GPU: NCCL refuses a shared device, gloo carries the bootstrap instead.
    shared_gpu = int(os.environ["LOCAL_WORLD_SIZE"]) > torch.cuda.device_count()
    dist.init_process_group("gloo" if shared_gpu else "nccl")
    rank, size = dist.get_rank(), dist.get_world_size()
    group = tilelink.init()
    if os.environ.get("TILELINK_TEST_FAULT"):
        return stay_away_or_name_the_absent(os.environ["TILELINK_TEST_FAULT"], group, rank, size)
    # What the world chose: put_signal where asked (no peer mapped), else auto's load_store on one node.
    want_transport = "put_signal" if os.environ.get("TILELINK_TRANSPORT") == "put_signal" else "load_store"
    assert tilelink.transport(group) == want_transport, f"rank {rank}: transport {tilelink.transport(group)}"
    if os.environ.get("TILELINK_TRANSPORT") == "put_signal":
        return put_signal_only(rank, size, group)
    shapes = [(256, 512, 384), (128, 512, 256)]  # (rows per rank, N, K): a second shape builds a second op
    for call in range(4):
        m_per_rank, n, k = shapes[call % 2]
        with diagnosed(rank, group, f"call {call}: ag_gemm / gemm_rs ({m_per_rank} rows per rank, {n}, {k})"):
            check_dense(rank, size, group, call, m_per_rank, n, k)
        # Calls 2 and 3 repeat the shapes of 0 and 1 with new tensors (the op re-pointed, not rebuilt).
        with diagnosed(rank, group, f"call {call}: mlp"):
            check_mlp(rank, size, m_per_rank, k, 128 if call % 2 == 0 else 256, ["swiglu", "gelu"][call % 2],
                      group, seed=1500 + call)
        # Calls 2 and 3 repeat the shapes of 0 and 1 with new tensors.
        with diagnosed(rank, group, f"call {call}: sp_attention"):
            check_sp_attention(rank, size, group, 1700 + call, spr=128 * (1 + call % 2), q_heads=4, kv_heads=2,
                               d=[128, 64][call % 2], causal=call % 2 == 0, layout=["zigzag", "contiguous"][call % 2])
    # Any rows per rank: owner blocks that end in a partial GEMM tile row.
    for call, m_per_rank in enumerate((7, 139), start=4):
        with diagnosed(rank, group, f"call {call}: ag_gemm / gemm_rs / mlp at {m_per_rank} rows per rank"):
            check_dense(rank, size, group, call, m_per_rank, 264, 200)
            check_mlp(rank, size, m_per_rank, 200, 136, "swiglu", group, seed=1500 + call)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: ag_gemm, gemm_rs, mlp and sp_attention match torch over 4 calls, "
          "ag_gemm, gemm_rs and mlp at 7 and 139 rows per rank", flush=True)
    # MoE: this rank's tokens' routing and every token's; calls 2 and 3 repeat shapes with new tensors.
    for call, (m_per_rank, topk, activation, own) in enumerate([(96, 2, "swiglu", True), (40, 6, "gelu", False),
                                                                (96, 2, "swiglu", True), (40, 6, "gelu", False)]):
        with diagnosed(rank, group, f"call {call}: moe"):
            check_moe(rank, size, group, 2100 + call, m_per_rank, 256, 128, 8, topk, activation, own)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: moe matches torch over 4 calls (own and every token's routing)", flush=True)
    # FP8 (issue 22): every scaling mode; calls 3 to 5 repeat the shapes with new tensors.
    for call, scaling in enumerate(["row", "block", "tensor", "row", "block", "tensor"]):
        with diagnosed(rank, group, f"call {call}: fp8 ({scaling} scaling)"):
            check_fp8(rank, size, group, call, [136, 64][call % 2], 264,
                      [400, 256][call % 2] if scaling != "block" else 256, scaling)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: quantize_weight, ag_gemm_fp8 and gemm_rs_fp8 match torch in every scaling mode",
          flush=True)
    for i, m in enumerate([1, 7, 129, 500, 7]):  # the last repeats a shape with new tensors
        with diagnosed(rank, group, f"call {i}: gemm_ar / gemm_ar_rmsnorm at m = {m}"):
            check_gemm_ar(rank, size, group, 1900 + i, m)
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: gemm_ar and gemm_ar_rmsnorm match torch at m = 1, 7, 129, 500", flush=True)
    with diagnosed(rank, group, "a captured step"):
        graph_replays(group, rank, size)
    print(f"rank {rank} of {size}: a captured step matches torch over 3 replays", flush=True)
    with diagnosed(rank, group, "a captured mlp"):
        mlp_graph_replays(group, rank, size)
    print(f"rank {rank} of {size}: a captured mlp matches torch over 3 back-to-back replays", flush=True)
    with diagnosed(rank, group, "a captured decode step"):
        gemm_ar_graph_replays(group, rank, size)
    print(f"rank {rank} of {size}: a captured decode step (gemm_ar, gemm_ar_rmsnorm) replays torch's sums and "
          "an eager call's bits", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
