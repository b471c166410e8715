#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention next to TileLink's SP attention (issue 7).

  sdpa_check.py check DIR   compares the outputs `tilelink bench sp_attention --dump DIR` wrote with
                            SDPA on the device over the whole sequence (bf16, every backend that
                            runs), both against an fp32 reference; exits 1 if ours is further
                            from the fp32 reference than tolerance allows.
  sdpa_check.py time        times SDPA per backend at the issue's shapes (seq 8k, 32k, 128k;
                            32 q heads, 8 kv heads, head dim 128; causal and not) and prints
                            TFLOP/s with the same FLOP count as the tilelink table.

Needs torch with CUDA; nothing else.
"""
import argparse
import warnings
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}


def positions(world, spr, zigzag):
    """Global position of local row i of rank r, as SpAttentionPlan::position."""
    pos = np.zeros((world, spr), dtype=np.int64)
    for r in range(world):
        for i in range(spr):
            if not zigzag:
                pos[r, i] = r * spr + i
            else:
                half = spr // 2
                pos[r, i] = r * half + i if i < half else (2 * world - 1 - r) * half + (i - half)
    return pos


def bf16_from_file(path, shape):
    raw = np.fromfile(path, dtype=np.uint16).astype(np.uint32) << 16
    return torch.from_numpy(raw.view(np.float32).reshape(shape))


def sdpa(q, k, v, causal, backend):
    """q, k, v: (H, S, D), k and v with their kv heads repeated for GQA -> (H, S, D)."""
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q[None], k[None], v[None], is_causal=causal)[0]


def check(directory):
    world, spr, hq, hkv, d, causal, zigzag = (int(x) for x in open(os.path.join(directory, "meta.txt")).read().split())
    seq = world * spr
    pos = positions(world, spr, bool(zigzag))
    order = np.argsort(pos.reshape(-1))  # gathered row index of each position
    dev = torch.device("cuda")
    kv = bf16_from_file(os.path.join(directory, "kv.bin"), (seq, 2, hkv, d))[torch.from_numpy(order)]
    k = kv[:, 0].permute(1, 0, 2).contiguous().to(dev)  # (Hkv, S, D) in position order
    v = kv[:, 1].permute(1, 0, 2).contiguous().to(dev)
    q = torch.empty(seq, hq, d)
    ours_o = torch.empty(seq, hq, d)
    ours_lse = torch.empty(hq, seq)
    for r in range(world):
        idx = torch.from_numpy(pos[r])
        q[idx] = bf16_from_file(os.path.join(directory, f"q{r}.bin"), (spr, hq, d))
        ours_o[idx] = bf16_from_file(os.path.join(directory, f"o{r}.bin"), (spr, hq, d))
        ours_lse[:, idx] = torch.from_numpy(np.fromfile(os.path.join(directory, f"lse{r}.bin"), dtype=np.float32).reshape(hq, spr))
    q = q.permute(1, 0, 2).contiguous().to(dev)
    ours_o = ours_o.permute(1, 0, 2).contiguous().to(dev)

    # fp32 reference, a few heads at a time (the S x S scores of one head at once).
    ref = torch.empty_like(q)
    ref_lse = torch.empty(hq, seq, device=dev)
    rep = hq // hkv
    mask = torch.ones(seq, seq, dtype=torch.bool, device=dev).tril() if causal else None
    for h in range(hq):
        s = (q[h].float() @ k[h // rep].float().T) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        ref_lse[h] = torch.logsumexp(s, dim=-1)
        ref[h] = torch.softmax(s, dim=-1) @ v[h // rep].float()
    ok = True
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    def report(name, o):
        err = (o.float() - ref).abs()
        rel = (err / (ref.abs() + 1e-2)).max().item()
        print(f"{name:>18}: max |O - fp32 ref| = {err.max().item():.3e}, mean = {err.mean().item():.3e}, max rel(+1e-2) = {rel:.3e}")
        return err.max().item()
    print(f"world={world} seq={seq} q_heads={hq} kv_heads={hkv} head_dim={d} causal={bool(causal)} zigzag={bool(zigzag)}")
    ours_err = report("tilelink", ours_o)
    lse_err = (ours_lse.to(dev) - ref_lse).abs().max().item()
    print(f"{'tilelink':>18}: max |LSE - fp32 ref| = {lse_err:.3e}")
    best_sdpa = None
    # SDPA on the same bf16 inputs (the files hold bf16 values; q, k, v here are their fp32 copies).
    k_rep = k.repeat_interleave(rep, dim=0).to(torch.bfloat16)
    v_rep = v.repeat_interleave(rep, dim=0).to(torch.bfloat16)
    for name, backend in BACKENDS.items():
        try:
            o = sdpa(q.to(torch.bfloat16), k_rep, v_rep, bool(causal), backend)
        except RuntimeError as e:
            print(f"{'sdpa ' + name:>18}: not available ({str(e).splitlines()[0][:80]})")
            continue
        e = report("sdpa " + name, o)
        best_sdpa = e if best_sdpa is None else min(best_sdpa, e)
        diff = (o.float() - ours_o.float()).abs().max().item()
        print(f"{'':>18}  max |tilelink - sdpa {name}| = {diff:.3e}")
    # Ours must be as close to fp32 as bf16 output allows: within twice the best SDPA backend's
    # error plus one bf16 ulp of O(1) values.
    if best_sdpa is not None and ours_err > 2 * best_sdpa + 2 ** -8:
        print(f"FAIL: tilelink error {ours_err:.3e} > 2 x SDPA's {best_sdpa:.3e} + 2^-8")
        ok = False
    if lse_err > 1e-2:
        print(f"FAIL: LSE error {lse_err:.3e} > 1e-2")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def time_sdpa(seqs, hq, hkv, d, iters):
    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print(f"{'seq':>7} {'causal':>6} {'backend':>10} {'time_us':>10} {'TFLOP/s':>8}")
    for seq in seqs:
        q = torch.randn(hq, seq, d, device=dev, dtype=torch.bfloat16)
        # GQA: kv heads repeated once, outside the timed calls.
        k = torch.randn(hkv, seq, d, device=dev, dtype=torch.bfloat16).repeat_interleave(hq // hkv, dim=0)
        v = torch.randn(hkv, seq, d, device=dev, dtype=torch.bfloat16).repeat_interleave(hq // hkv, dim=0)
        for causal in (True, False):
            # Visible pairs as SpAttention::flops counts them.
            pairs = seq * (seq + 1) / 2 if causal else seq * seq
            flop = 4.0 * d * pairs * hq
            for name, backend in BACKENDS.items():
                try:
                    for _ in range(3):
                        sdpa(q, k, v, causal, backend)
                    torch.cuda.synchronize()
                    times = []
                    for _ in range(iters):
                        a = torch.cuda.Event(enable_timing=True)
                        b = torch.cuda.Event(enable_timing=True)
                        a.record()
                        sdpa(q, k, v, causal, backend)
                        b.record()
                        b.synchronize()
                        times.append(a.elapsed_time(b) * 1e3)
                except RuntimeError as e:
                    print(f"{seq:>7} {str(causal):>6} {name:>10} {'n/a':>10} {'':>8} ({str(e).splitlines()[0][:60]})")
                    continue
                t = sorted(times)[len(times) // 2]
                print(f"{seq:>7} {str(causal):>6} {name:>10} {t:>10.1f} {flop / (t * 1e-6) / 1e12:>8.1f}")


def main():
    warnings.filterwarnings("ignore", category=UserWarning)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("dir")
    t = sub.add_parser("time")
    t.add_argument("--seqs", default="8192,32768,131072")
    t.add_argument("--q-heads", type=int, default=32)
    t.add_argument("--kv-heads", type=int, default=8)
    t.add_argument("--head-dim", type=int, default=128)
    t.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    if a.cmd == "check":
        return check(a.dir)
    time_sdpa([int(s) for s in a.seqs.split(",")], a.q_heads, a.kv_heads, a.head_dim, a.iters)
    return 0


if __name__ == "__main__":
    sys.exit(main())
