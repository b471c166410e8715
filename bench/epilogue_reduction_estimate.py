"""Back-of-envelope of GEMM+RS with the reduction in the owner's epilogue (docs/gemm_rs.md, "Next:
the reduction in the owner's epilogue"), on P GPUs at the plan model's rates (sim::CostModel's
defaults: include/tilelink/sim/timeline.hpp, include/tilelink/core/h200_rates.hpp). A design
estimate, not a measurement and not `tilelink plan`: each rank computes the other owners' blocks
first and its own block last; an own tile's epilogue reads P - 1 peer tiles and writes one at
min(one CTA's copy rate, HBM / SMs); the last round also waits for the link.

  python3 bench/epilogue_reduction_estimate.py [--world 8]
"""
import argparse
import math

FLOPS = 790e12       # h200::kBf16GemmFlops
SMS = 132            # h200::kSms
NVLINK = 390e9       # CostModel::nvlink_bandwidth
HBM = 4.3e12         # CostModel::hbm_bandwidth
CTA_COPY = 48e9      # h200::kCtaCopyBandwidth
NOTIFY = 0.86e-6     # CostModel::notify_latency
SHAPES = [(8192, 8192, 28672), (8192, 4096, 14336), (8192, 12288, 49152)]  # the paper's GEMM+RS shapes


def estimate(m, n, k, world, bm=128, bn=256, hidden=0.0):
    """Seconds: ideal, the epilogue design's time; `hidden`: the share of the epilogue's extra work
    hidden behind the other consumer's main loop (ping-pong)."""
    tile_mma = 2 * bm * bn * (k / world) / (FLOPS / SMS)
    tiles_per_block = (m // world // bm) * math.ceil(n / bn)
    t_comp = math.ceil(world * tiles_per_block / SMS) * tile_mma
    t_comm = (world - 1) * (m / world) * n * 2 / NVLINK
    peers_done = math.ceil((world - 1) * tiles_per_block / SMS) * tile_mma
    epilogue = world * bm * bn * 2 / min(CTA_COPY, HBM / SMS) * (1 - hidden)
    own_end = peers_done + math.ceil(tiles_per_block / SMS) * (tile_mma + epilogue)
    return max(t_comp, t_comm), max(own_end, t_comm + NOTIFY + epilogue)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--world", type=int, default=8)
    a = p.parse_args()
    print(f"{'(M, N, K)':22} {'ideal us':>9} {'no overlap':>11} {'half hidden':>12}")
    for m, n, k in SHAPES:
        ideal, plain = estimate(m, n, k, a.world)
        _, half = estimate(m, n, k, a.world, hidden=0.5)
        print(f"{str((m, n, k)):22} {ideal * 1e6:9.0f} {plain * 1e6:6.0f} ({plain / ideal:.2f}x) "
              f"{half * 1e6:6.0f} ({half / ideal:.2f}x)")


if __name__ == "__main__":
    main()
