"""How tight the MoE references' rounding slack is (tests/gpu/moe_test_util.hpp, moe_layer_rank_reference).

On the host (torch, CPU): random bf16 tokens and weights in [-1, 1) as the tests draw them, SwiGLU;
the first GEMM summed in two orders -- sequential (the reference's simple kernel) and in 16-wide
blocks (another order, as the op's) -- the activation and the second GEMM on each. Prints how many
gate/up values the slack counts as able to round the other way, the slack against |y2| (and the
first version's, which counted every value), the largest actual error as a share of the slack, and
how far apart the two orders are against the worst-case bound the slack divides by 16.

  python3 bench/experiments/moe_rounding_slack/sim.py [--rows 512] [--hidden 256] [--k 128] [--divisor 16]
"""
import argparse

import torch


def bf(x):
    return x.bfloat16().float()


def ulp(x):  # one bf16 unit in the last place (8 significant bits), as bf16_ulp
    e = torch.floor(torch.log2(x.abs().clamp_min(1e-30)))
    return torch.where(x == 0, torch.zeros_like(x), torch.pow(2.0, e - 7))


def near_midpoint(v, eps):  # as near_bf16_midpoint
    return (v != 0) & ((0.5 * ulp(v) - (v - bf(v)).abs()) <= eps)


def swiglu(g, u):
    return g / (1 + torch.exp(-g)) * u


def sensitivity(g, u, dg, du):  # as host_activation_sensitivity (SwiGLU)
    s = 1 / (1 + torch.exp(-g))
    return (s * (1 + g * (1 - s)) * u).abs() * dg + (g * s).abs() * du


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=512)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--k", type=int, default=128)
    p.add_argument("--divisor", type=float, default=16.0, help="the slack's eps = worst case / divisor")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    rows, hidden, k = a.rows, a.hidden, a.k
    x = bf(torch.rand(rows, hidden) * 2 - 1)
    w1 = bf(torch.rand(2 * k, hidden) * 2 - 1)
    w2 = bf(torch.rand(hidden, k) * 2 - 1)

    ref = torch.zeros(rows, 2 * k)  # sequential fp32 sums
    for i in range(hidden):
        ref += x[:, i:i + 1] * w1[:, i][None, :]
    other = sum(x[:, c:c + 16] @ w1[:, c:c + 16].T for c in range(0, hidden, 16))

    g32, u32 = ref[:, :k], ref[:, k:]
    g, u = bf(g32), bf(u32)
    h_ref = bf(swiglu(g, u))
    h_other = bf(swiglu(bf(other[:, :k]), bf(other[:, k:])))
    y2_ref, y2_other = h_ref @ w2.T, h_other @ w2.T

    worst = 2 * hidden * 2.0 ** -24 * x.abs().max(1).values[:, None] * w1.abs().sum(1)[None, :]
    eps = worst / a.divisor
    dg = torch.where(near_midpoint(g32, eps[:, :k]), ulp(g32), torch.zeros_like(g32))
    du = torch.where(near_midpoint(u32, eps[:, k:]), ulp(u32), torch.zeros_like(u32))
    v = swiglu(g, u)
    moved = sensitivity(g, u, dg, du)
    dh = moved + torch.where(near_midpoint(v, moved + v.abs() * 2.0 ** -18), ulp(v), torch.zeros_like(v))
    slack = dh @ w2.abs().T
    first = (ulp(v) + sensitivity(g, u, ulp(g32), ulp(u32))) @ w2.abs().T
    err = (y2_other - y2_ref).abs()

    print(f"values counted: gate {(dg > 0).float().mean().item():.1%}, up {(du > 0).float().mean().item():.1%}")
    print(f"median |y2| {y2_ref.abs().median().item():.3f}, median slack {slack.median().item():.4f} "
          f"(first version {first.median().item():.4f}: {first.median().item() / slack.median().item():.0f}x)")
    print(f"largest error / slack {(err / slack.clamp_min(1e-9)).max().item():.3f}; "
          f"h values that rounded differently {(h_other != h_ref).float().mean().item():.3%}")
    print(f"largest order difference / worst case {((other - ref).abs() / worst).max().item():.4f}")


if __name__ == "__main__":
    main()
