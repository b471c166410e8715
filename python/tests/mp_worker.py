"""One rank of the GPU tests, started by torchrun (python/tests/test_gpu.py): every operator against
a torch reference built from all ranks' shards, fresh random inputs each call, outputs over
poisoned memory, several calls. Exits non-zero on the first mismatch."""
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
    torch.cuda.synchronize()
    dist.barrier()
    print(f"rank {rank} of {size}: ag_gemm and gemm_rs match torch over 4 calls", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
