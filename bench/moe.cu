// MoE part 1 (all-gather + gather + grouped GEMM) on virtual ranks against the paper's
// "CUTLASS+NCCL"-style chain, in one table.
//
//   cuBLAS dense, same FLOPs     every rank's (token, k) pairs as one dense pairs x n x hidden GEMM
//   cuBLAS per-expert loop       every rank's experts one cuBLAS GEMM each on the gathered rows (T_gemm)
//   tilelink grouped GEMM alone  MoeAgGroupGemm's kernel on rows already sorted, no waits
//   gather alone                 the baseline's row gather (a plain copy kernel)
//   all-gather alone             the fused op's copy-engine all-gather of the tokens (T_ag)
//   ideal                        max(T_gemm, T_ag)
//   non-overlapped               all-gather, gather, per-expert cuBLAS loop
//   tilelink fused               MoeAgGroupGemm::run (mapping built on the device every call)
//   device mapping alone         the mapping kernels of a call by themselves (part of fused)
//
// The baseline knows the routing's per-expert row counts on the host (a real one would copy
// them back from the device: favourable to it). The fused output is checked once against the
// non-overlapped one (bf16 tolerance) over every sorted row.
#include <cuda_bf16.h>

#include <random>
#include <string>
#include <vector>

#include "bench/bench.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/synthetic_routing.hpp"

namespace tilelink::bench {
namespace {

// sorted[row] = x[row_pair[row] / topk] (zeros for padding rows); a warp per row.
__global__ void gather_rows_kernel(const uint4* x, const uint32_t* row_pair, uint32_t topk, uint32_t rows,
                                   uint32_t vectors, uint4* sorted) {
  const uint32_t warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  for (uint32_t row = warp; row < rows; row += gridDim.x * blockDim.x / 32) {
    const uint32_t pair = row_pair[row];
    for (uint32_t v = lane; v < vectors; v += 32) {
      sorted[uint64_t(row) * vectors + v] = pair == kPadRow ? uint4{0, 0, 0, 0} : x[uint64_t(pair / topk) * vectors + v];
    }
  }
}

}  // namespace

Table bench_moe_ag(const MoeBenchOptions& o) {
  const char* where = "bench_moe_ag";
  TL_REQUIRE(o.world >= 1, where, "world", o.world, ">= 1");
  TL_REQUIRE(o.m % o.world == 0, where, "m", o.m, "a multiple of the world size (" + std::to_string(o.world) + ")");
  TL_REQUIRE(o.intermediate % o.world == 0, where, "intermediate", o.intermediate,
             "a multiple of the world size (" + std::to_string(o.world) + ")");
  const int w = o.world;
  const uint32_t m = o.m, hidden = o.hidden, n = o.intermediate / w, rows_per_rank = m / w;
  const size_t x_bytes = size_t(m) * hidden * 2, shard_bytes = size_t(rows_per_rank) * hidden * 2;

  World world = World::virtual_ranks(w);
  SymmetricHeap heap(world, x_bytes + (16u << 20));
  SignalSet signals(heap, 1u << 16);
  SymmetricBuffer x = heap.allocate(x_bytes);

  std::mt19937_64 rng(o.seed);
  const std::vector<int32_t> ids = synthetic_routing(rng, m, o.topk, o.experts, o.routing);
  MoeAgGroupGemmArguments args;
  args.x = &x;
  args.tokens_per_rank = rows_per_rank;
  args.hidden = hidden;
  args.n = n;
  args.experts = o.experts;
  args.topk = o.topk;
  args.config = o.config;
  const uint64_t out_rows = MoeAgGroupGemm::out_rows(world, args);
  std::vector<DeviceBuffer> ids_dev, wt, out, out_base, x_base, sorted_base, row_pair;
  for (int r = 0; r < w; ++r) {
    const int dev = world.device(r);
    const cudaStream_t s = world.compute_stream(r);
    ids_dev.emplace_back(ids.size() * 4, dev);
    TL_CUDA_CHECK(cudaMemcpy(ids_dev[r].get(), ids.data(), ids_dev[r].bytes(), cudaMemcpyHostToDevice));
    wt.emplace_back(size_t(o.experts) * n * hidden * 2, dev);
    out.emplace_back(out_rows * n * 2, dev);
    out_base.emplace_back(out_rows * n * 2, dev);
    x_base.emplace_back(x_bytes, dev);
    sorted_base.emplace_back(out_rows * hidden * 2, dev);
    fill_bf16(wt[r].get(), size_t(o.experts) * n * hidden, rank_seed(o.seed ^ 0x11ull, r), s, 1.0f / 64);
    fill_bf16(x.as<char>(r) + r * shard_bytes, size_t(rows_per_rank) * hidden, rank_seed(o.seed ^ 0x33ull, r), s);
    args.ids.push_back(ids_dev[r].get<int32_t>());
    args.w.push_back(wt[r].get());
    args.out.push_back(out[r].get());
  }
  if (const std::string why = MoeAgGroupGemm::can_implement(world, heap, args); !why.empty()) {
    throw InvalidArgument("bench moe_ag: " + why);
  }
  MoeAgGroupGemm op(world, heap, signals, args, "bench.moe_ag");
  const MoeMapping mapping = build_moe_mapping({m, o.topk, o.experts, ids.data(), nullptr}, op.tile_m());
  const uint32_t rows = mapping.num_tiles() * mapping.bm;
  Cublas cublas(world);
  world.synchronize();
  for (int r = 0; r < w; ++r) {  // the baseline's tokens start with the rank's own shard
    row_pair.emplace_back(size_t(rows) * 4, world.device(r));
    TL_CUDA_CHECK(cudaMemcpy(row_pair[r].get(), mapping.row_pair.data(), row_pair[r].bytes(), cudaMemcpyHostToDevice));
    TL_CUDA_CHECK(cudaMemcpyAsync(x_base[r].get<char>() + r * shard_bytes, x.as<char>(r) + r * shard_bytes,
                                  shard_bytes, cudaMemcpyDeviceToDevice, world.compute_stream(r)));
  }
  world.synchronize();

  auto all_gather = [&] { copy_engine_all_gather(world, x, x_base, shard_bytes); };
  auto gather = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      gather_rows_kernel<<<264, 256, 0, world.compute_stream(r)>>>(
          x_base[r].get<uint4>(), row_pair[r].get<uint32_t>(), o.topk, rows, hidden * 2 / 16,
          sorted_base[r].get<uint4>());
      TL_CUDA_CHECK(cudaGetLastError());
    }
  };
  auto expert_loop = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      for (uint32_t e = 0; e < o.experts; ++e) {
        const uint32_t row0 = mapping.row_offset[e], rows_e = mapping.row_offset[e + 1] - row0;
        if (rows_e == 0) continue;
        cublas_gemm(cublas.handles[r], sorted_base[r].get<char>() + size_t(row0) * hidden * 2,
                    wt[r].get<char>() + size_t(e) * n * hidden * 2, out_base[r].get<char>() + size_t(row0) * n * 2,
                    rows_e, n, hidden);
      }
    }
  };
  const uint32_t pairs = m * o.topk;
  auto dense = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(cublas.handles[r], sorted_base[r].get(), wt[r].get(), out_base[r].get(), pairs, n, hidden);
    }
  };
  auto non_overlapped = [&] {
    all_gather();
    gather();
    expert_loop();
  };
  auto fused = [&] { op.run(); };

  check_against(world, "bench moe_ag", fused, non_overlapped, out, out_base, size_t(rows) * n);

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(
      world, o.timing.warmup, o.timing.iters,
      {dense, expert_loop, [&] { op.run_gemm_only(); }, gather, [&] { op.all_gather().run(); }, non_overlapped, fused,
       [&] { op.run_mapping_only(); }},
      &gated);
  const Stats &t_dense = t[0], &t_loop = t[1], &t_group = t[2], &t_gather = t[3], &t_ag = t[4], &t_non = t[5],
              &t_fused = t[6], &t_map = t[7];
  const double flop = 2.0 * pairs * double(n) * double(hidden) * w;
  GemmOpTable result("moe_ag",
                     "MoE part 1 (AG + gather + grouped GEMM), " + std::to_string(w) + " virtual rank" +
                         (w > 1 ? "s" : "") + ": tokens=" + std::to_string(m) + " hidden=" + std::to_string(hidden) +
                         " n=" + std::to_string(n) + " per rank, experts=" + std::to_string(o.experts) +
                         " top-" + std::to_string(o.topk) + ", " + to_string(o.routing) + " routing, bf16",
                     flop, t_loop, t_non, t_ag);
  result.row("cuBLAS dense GEMM, same FLOPs (pairs x n x hidden)", t_dense);
  result.row("cuBLAS per-expert loop on gathered rows (T_gemm)", t_loop);
  result.row("tilelink grouped GEMM alone (rows in place, no waits)", t_group);
  result.row("gather alone (baseline copy kernel)", t_gather);
  result.row("all-gather alone, copy engine (T_ag)", t_ag);
  result.ideal_row("ideal max(T_gemm, T_ag)");
  result.row("non-overlapped (all-gather, gather, per-expert cuBLAS)", t_non);
  result.row("tilelink fused (MoeAgGroupGemm::run)", t_fused);
  result.row("  of which: device mapping alone (tables + tile order)", t_map);
  Table& table = result.table;
  table.notes.push_back("config: kernel " + op.kernel_name() + ", swizzle " + std::to_string(op.swizzle()) + ", " +
                        std::to_string(op.gather_blocks()) + " gather CTAs, " + std::to_string(op.gemm_ctas(0)) +
                        " GEMM CTAs per rank; " + std::to_string(mapping.num_tiles()) + " tiles of " +
                        std::to_string(mapping.bm) + " rows (" + std::to_string(rows - pairs) + " padding rows)");
  table.notes.push_back("check: fused sorted rows of every rank equal the non-overlapped chain's within bf16 tolerance");
  table.notes.push_back("TFLOP/s counts the pairs' FLOPs (no padding); vs cuBLAS = T_gemm (per-expert loop) / time");
  result.common_notes(w, t_fused.samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
