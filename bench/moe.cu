// MoE part 1 (all-gather + gather + grouped GEMM, bench_moe_ag) and the whole MoE layer
// (bench_moe_layer) against the paper's "CUTLASS+NCCL"-style chains (virtual ranks on one GPU, or
// one rank per GPU with TILELINK_RANKS=gpus: then the chains' collectives are NCCL's).
//
// Part 1's table:
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
// The layer's table:
//
//   part-1 / part-2 cuBLAS loop  the per-expert cuBLAS GEMMs of each part (T_gemm1, T_gemm2)
//   activation                   the activation kernel on the sorted rows (T_act)
//   gather / combine alone       the baseline's row gather and top-k combine kernels
//   all-gather, reduce-scatter   the copy-engine collectives of the tokens (T_ag, T_rs)
//   ideal                        max(T_gemm1, T_ag) + T_act + max(T_gemm2, T_rs)
//   non-overlapped               all-gather, gather, loop, activation, loop, combine, reduce-scatter
//   tilelink fused               MoeLayer::run, and its parts by themselves; again with part 2's
//                                other combine (blocks beside the GEMM / in its epilogue)
//
// The baselines know the routing's per-expert row counts on the host (a real one would copy
// them back from the device: favourable to it). The fused output is checked once against the
// non-overlapped one (bf16 tolerance) over every sorted row.
#include <cuda_bf16.h>

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/moe.hpp"
#include "bench/gemm_helpers.hpp"
#include "bench/harness.hpp"
#include "bench/moe_setup.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/sim/synthetic_routing.hpp"

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

// partial[t] = sum over j of weights[t][j] * y[pair_row[t][j]] (tokens x n bf16; fp32 sums); a
// thread per 8 columns of a token.
__global__ void combine_rows_kernel(const uint4* y, const uint32_t* pair_row, const float* weights, uint32_t tokens,
                                    uint32_t topk, uint32_t vectors, uint4* partial) {
  const uint64_t total = uint64_t(tokens) * vectors;
  for (uint64_t e = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; e < total; e += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t t = e / vectors;
    float acc[8] = {};
    for (uint32_t j = 0; j < topk; ++j) {
      const uint4 v = y[uint64_t(pair_row[t * topk + j]) * vectors + e % vectors];
      const auto* h = reinterpret_cast<const __nv_bfloat16*>(&v);
      for (int i = 0; i < 8; ++i) acc[i] += weights[t * topk + j] * __bfloat162float(h[i]);
    }
    uint4 packed;
    auto* o = reinterpret_cast<__nv_bfloat16*>(&packed);
    for (int i = 0; i < 8; ++i) o[i] = __float2bfloat16(acc[i]);
    partial[e] = packed;
  }
}

// The non-overlapped chains' common stages, on the routing's host mapping: the copy-engine
// all-gather of the tokens, the row gather into expert-sorted order, per-expert cuBLAS GEMMs.
class MoeChain {
 public:
  MoeChain(const World& world, const SymmetricBuffer& x, const MoeMapping& mapping, uint32_t hidden, size_t shard_bytes)
      : world_(world), x_(x), mapping_(mapping), hidden_(hidden), shard_bytes_(shard_bytes), cublas_(world) {
    const int w = world.size();
    world.synchronize();
    for (int r = 0; r < w; ++r) {  // the chain's tokens start with the rank's own shard
      const int dev = world.device(r);
      x_base_.emplace_back(shard_bytes * w, dev);
      row_pair_.emplace_back(size_t(rows()) * 4, dev);
      sorted_.emplace_back(size_t(rows()) * hidden * 2, dev);
      TL_CUDA_CHECK(cudaMemcpy(row_pair_[r].get(), mapping.row_pair.data(), row_pair_[r].bytes(), cudaMemcpyHostToDevice));
      TL_CUDA_CHECK(cudaMemcpyAsync(x_base_[r].get<char>() + r * shard_bytes, x.as<char>(r) + r * shard_bytes,
                                    shard_bytes, cudaMemcpyDeviceToDevice, world.compute_stream(r)));
    }
    world.synchronize();
  }

  uint32_t rows() const { return mapping_.num_tiles() * mapping_.bm; }
  const std::vector<DeviceBuffer>& sorted() const { return sorted_; }

  void all_gather() { baseline_all_gather(world_, x_, x_base_, shard_bytes_); }
  void gather() {
    for (int r = 0; r < world_.size(); ++r) {
      world_.set_device(r);
      gather_rows_kernel<<<264, 256, 0, world_.compute_stream(r)>>>(x_base_[r].get<uint4>(), row_pair_[r].get<uint32_t>(),
                                                                    mapping_.topk, rows(), hidden_ * 2 / 16,
                                                                    sorted_[r].get<uint4>());
      TL_CUDA_CHECK(cudaGetLastError());
    }
  }
  // Every rank's experts, one cuBLAS GEMM each: c's rows = a's rows (pitch ka) times the rows'
  // expert's slice of wt (experts x n x ka) transposed.
  void expert_loop(const std::vector<DeviceBuffer>& a, const std::vector<DeviceBuffer>& wt,
                   const std::vector<DeviceBuffer>& c, uint32_t n, uint32_t ka) {
    for (int r = 0; r < world_.size(); ++r) {
      world_.set_device(r);
      for (uint32_t e = 0; e < mapping_.experts; ++e) {
        const uint32_t row0 = mapping_.row_offset[e], rows_e = mapping_.row_offset[e + 1] - row0;
        if (rows_e == 0) continue;
        cublas_gemm(cublas_.handles[r], a[r].get<char>() + size_t(row0) * ka * 2,
                    wt[r].get<char>() + size_t(e) * n * ka * 2, c[r].get<char>() + size_t(row0) * n * 2, rows_e, n,
                    ka);
      }
    }
  }
  cublasHandle_t cublas(int rank) const { return cublas_.handles[static_cast<size_t>(rank)]; }

 private:
  const World& world_;
  const SymmetricBuffer& x_;
  const MoeMapping& mapping_;
  uint32_t hidden_;
  size_t shard_bytes_;
  Cublas cublas_;
  std::vector<DeviceBuffer> x_base_, row_pair_, sorted_;
};

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

  World world = make_bench_world(w);
  SymmetricHeap heap(world, x_bytes + (16u << 20));
  SignalSet signals(heap, 1u << 16);
  SymmetricBuffer x = heap.allocate(x_bytes);

  const std::vector<int32_t> ids = bench_routing(o);
  MoeAgGroupGemmArguments args;
  args.x = &x;
  args.tokens_per_rank = rows_per_rank;
  args.hidden = hidden;
  args.n = n;
  args.experts = o.experts;
  args.topk = o.topk;
  args.config = o.config;
  if (args.config.method == OpMethod::kAuto) args.config.method = OpMethod::kFused;  // the "fused" row
  const uint64_t out_rows = MoeAgGroupGemm::out_rows(world, args);
  std::vector<DeviceBuffer> ids_dev, wt, out, out_base;
  for (int r = 0; r < w; ++r) {
    const int dev = world.device(r);
    const cudaStream_t s = world.compute_stream(r);
    ids_dev.emplace_back(ids.size() * 4, dev);
    TL_CUDA_CHECK(cudaMemcpy(ids_dev[r].get(), ids.data(), ids_dev[r].bytes(), cudaMemcpyHostToDevice));
    wt.emplace_back(size_t(o.experts) * n * hidden * 2, dev);
    out.emplace_back(out_rows * n * 2, dev);
    out_base.emplace_back(out_rows * n * 2, dev);
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
  MoeChain chain(world, x, mapping, hidden, shard_bytes);
  const uint32_t rows = chain.rows();
  auto all_gather = [&] { chain.all_gather(); };
  auto gather = [&] { chain.gather(); };
  auto expert_loop = [&] { chain.expert_loop(chain.sorted(), wt, out_base, n, hidden); };
  const uint32_t pairs = m * o.topk;
  auto dense = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      cublas_gemm(chain.cublas(r), chain.sorted()[r].get(), wt[r].get(), out_base[r].get(), pairs, n, hidden);
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
                     "MoE part 1 (AG + gather + grouped GEMM), " + ranks_phrase(w) + ": tokens=" + std::to_string(m) + " hidden=" + std::to_string(hidden) +
                         " n=" + std::to_string(n) + " per rank, experts=" + std::to_string(o.experts) +
                         " top-" + std::to_string(o.topk) + ", " + to_string(o.routing) + " routing, bf16",
                     flop, t_loop, t_non, t_ag);
  result.row("cuBLAS dense GEMM, same FLOPs (pairs x n x hidden)", t_dense);
  result.row("cuBLAS per-expert loop on gathered rows (T_gemm)", t_loop);
  result.row("tilelink grouped GEMM alone (rows in place, no waits)", t_group);
  result.row("gather alone (baseline copy kernel)", t_gather);
  result.row(std::string("all-gather alone, ") + baseline_transport(world) + " (T_ag)", t_ag);
  result.ideal_row("ideal max(T_gemm, T_ag)");
  result.row("non-overlapped (all-gather, gather, per-expert cuBLAS)", t_non);
  result.row("tilelink fused (MoeAgGroupGemm::run)", t_fused);
  result.row("  of which: device mapping alone (tables + tile order)", t_map);
  Table& table = result.table;
  table.notes.push_back("config: kernel " + op.kernel_name() + ", band " + std::to_string(op.band(0)) + " tile rows, " +
                        std::to_string(op.gather_blocks()) + " gather CTAs, " + std::to_string(op.gemm_ctas(0)) +
                        " GEMM CTAs per rank; " + std::to_string(mapping.num_tiles()) + " tiles of " +
                        std::to_string(mapping.bm) + " rows (" + std::to_string(rows - pairs) + " padding rows)");
  table.notes.push_back("check: fused sorted rows of every rank equal the non-overlapped chain's within bf16 tolerance");
  table.notes.push_back("TFLOP/s counts the pairs' FLOPs (no padding); vs cuBLAS = T_gemm (per-expert loop) / time");
  result.common_notes(w, t_fused.samples, o.timing.warmup, gated);
  return table;
}

Table bench_moe_layer(const MoeBenchOptions& o) {
  MoeLayerSetup s(o, "bench moe");
  const int w = o.world;
  const uint32_t m = s.m, hidden = s.hidden, k = s.k, n1 = s.n1;
  const size_t x_bytes = s.x_bytes, shard_bytes = s.shard_bytes, block_elems = s.block_elems;
  World& world = s.world;
  SymmetricBuffer &x = s.x, &slots = s.slots;
  const std::vector<int32_t>& ids = s.ids;
  const std::vector<float>& weights = s.weights;
  std::vector<DeviceBuffer> &weights_dev = s.weights_dev, &w1 = s.w1, &w2 = s.w2, &out = s.out;
  std::vector<DeviceBuffer> out_base;
  for (int r = 0; r < w; ++r) out_base.emplace_back(block_elems * 2, world.device(r));
  MoeLayerArguments fused_args = s.args;  // the fused layer (the chain below is the non-overlapped one)
  fused_args.config.part1.method = OpMethod::kFused;
  fused_args.config.part2.method = OpMethod::kFused;
  MoeLayer op(world, s.heap, s.signals, fused_args, "bench.moe");
  // The same layer with part 2's combine in its GEMM's epilogue (the other one where the tune cache
  // gave the first the epilogue's).
  MoeLayerArguments other_args = fused_args;
  other_args.config = op.config();
  other_args.config.use_tune_cache = false;
  other_args.config.part2.combine =
      op.part2().combine() == MoeCombine::kEpilogue ? MoeCombine::kBlocks : MoeCombine::kEpilogue;
  other_args.config.part2.combine_blocks = 0;
  MoeLayer other(world, s.heap, s.signals, other_args, "bench.moe.other_combine");
  // The layer as a caller gets it (methods auto): a row of its own where that is not the fused
  // layer above (one rank: moe_policy::method's non-overlapped parts).
  std::optional<MoeLayer> automatic;
  automatic.emplace(world, s.heap, s.signals, s.args, "bench.moe.automatic");
  if (automatic->part1().method() == OpMethod::kFused && automatic->part2().method() == OpMethod::kFused) {
    automatic.reset();
  }
  const MoeMapping mapping = build_moe_mapping({m, o.topk, o.experts, ids.data(), weights.data()}, op.part1().tile_m());
  MoeChain chain(world, x, mapping, hidden, shard_bytes);
  const uint32_t rows = chain.rows();
  std::vector<DeviceBuffer> pair_row, y1, h, y2, partial;
  Events events(world, 1);
  for (int r = 0; r < w; ++r) {
    const int dev = world.device(r);
    pair_row.emplace_back(mapping.pair_row.size() * 4, dev);
    y1.emplace_back(size_t(rows) * n1 * 2, dev);
    h.emplace_back(size_t(rows) * k * 2, dev);
    y2.emplace_back(size_t(rows) * hidden * 2, dev);
    partial.emplace_back(x_bytes, dev);
    TL_CUDA_CHECK(cudaMemcpy(pair_row[r].get(), mapping.pair_row.data(), pair_row[r].bytes(), cudaMemcpyHostToDevice));
  }

  auto all_gather = [&] { chain.all_gather(); };
  auto gather = [&] { chain.gather(); };
  auto loop1 = [&] { chain.expert_loop(chain.sorted(), w1, y1, n1, hidden); };
  auto loop2 = [&] { chain.expert_loop(h, w2, y2, hidden, k); };
  auto activation = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      detail::launch_mlp_activation(o.activation, y1[r].get(), h[r].get(), rows, k, world.compute_stream(r));
    }
  };
  auto combine = [&] {
    for (int r = 0; r < w; ++r) {
      world.set_device(r);
      combine_rows_kernel<<<1056, 256, 0, world.compute_stream(r)>>>(
          y2[r].get<uint4>(), pair_row[r].get<uint32_t>(), weights_dev[r].get<float>(), m, o.topk, hidden / 8,
          partial[r].get<uint4>());
      TL_CUDA_CHECK(cudaGetLastError());
    }
  };
  std::vector<const void*> partials;
  for (int r = 0; r < w; ++r) partials.push_back(partial[r].get());
  auto reduce_scatter = [&] { baseline_reduce_scatter(world, partials, slots, out_base, block_elems, events); };
  auto non_overlapped = [&] {
    all_gather();
    gather();
    loop1();
    activation();
    loop2();
    combine();
    reduce_scatter();
  };
  auto fused = [&] { op.run(); };
  auto fused_other = [&] { other.run(); };

  check_against(world, "bench moe", fused, non_overlapped, out, out_base, block_elems);
  check_against(world, "bench moe (other combine)", fused_other, non_overlapped, out, out_base, block_elems);
  std::vector<std::function<void()>> steps = {
      loop1, activation, loop2, gather, combine, all_gather, reduce_scatter, non_overlapped, fused,
      [&] { op.part1().run(); }, [&] { op.part2().run(); }, [&] { op.part2().run_gemm_only(); }, fused_other,
      [&] { other.part2().run(); }};
  if (automatic) {
    auto run_automatic = [&] { automatic->run(); };
    check_against(world, "bench moe (automatic)", run_automatic, non_overlapped, out, out_base, block_elems);
    steps.push_back(run_automatic);
  }

  bool gated = true;
  const std::vector<Stats> t = repeat_interleaved(world, o.timing.warmup, o.timing.iters, steps, &gated);
  const Stats &t_loop1 = t[0], &t_act = t[1], &t_loop2 = t[2], &t_gather = t[3], &t_combine = t[4], &t_ag = t[5],
              &t_rs = t[6], &t_non = t[7], &t_fused = t[8], &t_part1 = t[9], &t_part2 = t[10], &t_gemm2_alone = t[11],
              &t_other = t[12], &t_other_part2 = t[13];
  const double pairs = double(m) * o.topk;
  const double flop = 2.0 * pairs * (double(n1) * hidden + double(hidden) * k) * w;
  Stats t_gemm = t_loop1;
  t_gemm.median = t_loop1.median + t_act.median + t_loop2.median;
  GemmOpTable result("moe",
                     "MoE layer (" + std::string(to_string(o.activation)) + "), " + ranks_phrase(w) + ": tokens=" + std::to_string(m) +
                         " hidden=" + std::to_string(hidden) + " intermediate=" + std::to_string(o.intermediate) +
                         " (" + std::to_string(k) + " per rank), experts=" + std::to_string(o.experts) + " top-" +
                         std::to_string(o.topk) + ", " + to_string(o.routing) + " routing, bf16",
                     flop, t_gemm, t_non, t_gemm);
  result.ideal = std::max(t_loop1.median, t_ag.median) + t_act.median + std::max(t_loop2.median, t_rs.median);
  result.row("part 1 cuBLAS per-expert loop (T_gemm1)", t_loop1);
  result.row("activation on the sorted rows (T_act)", t_act);
  result.row("part 2 cuBLAS per-expert loop (T_gemm2)", t_loop2);
  result.row("gather alone (baseline kernel)", t_gather);
  result.row("top-k combine alone (baseline kernel)", t_combine);
  result.row(std::string("all-gather alone, ") + baseline_transport(world) + " (T_ag)", t_ag);
  result.row(std::string("reduce-scatter alone, ") + baseline_transport(world) + " (T_rs)", t_rs);
  result.ideal_row("ideal max(T_gemm1, T_ag) + T_act + max(T_gemm2, T_rs)");
  result.row("non-overlapped (AG, gather, loop, act, loop, combine, RS)", t_non);
  const std::string this_combine = std::string(", combine ") + to_string(op.part2().combine());
  const std::string other_combine = std::string(", combine ") + to_string(other.part2().combine());
  result.row("tilelink fused (MoeLayer::run" + this_combine + ")", t_fused);
  result.row("  part 1 alone (MoeAgGroupGemm::run)", t_part1);
  result.row("  part 2 alone (MoeGemmRs::run" + this_combine + ")", t_part2);
  result.row("  part 2 grouped GEMM alone (no combine)", t_gemm2_alone);
  result.row("tilelink fused (MoeLayer::run" + other_combine + ")", t_other);
  result.row("  part 2 alone (MoeGemmRs::run" + other_combine + ")", t_other_part2);
  if (automatic) {
    result.row(std::string("tilelink automatic (MoeLayer::run: part 1 ") + to_string(automatic->part1().method()) +
                   ", part 2 " + to_string(automatic->part2().method()) + ")",
               t[14]);
  }
  Table& table = result.table;
  table.notes.push_back("config: kernel " + op.part1().kernel_name() + "; part 1: " +
                        std::to_string(op.part1().gather_blocks()) + " gather CTAs, " +
                        std::to_string(op.part1().gemm_ctas(0)) + " GEMM CTAs; part 2: " +
                        std::to_string(op.part2().combine_blocks()) + " combine + reduction CTAs, " +
                        std::to_string(op.part2().weight_sweeps()) + " weight sweeps (0: token order), " +
                        std::to_string(op.part2().gemm_ctas(0)) + " GEMM CTAs per rank; " +
                        std::to_string(mapping.num_tiles()) + " tiles of " + std::to_string(mapping.bm) + " rows");
  if (!op.tuned_from().empty()) {
    table.notes.push_back("config from the tune cache " + op.tuned_from() + ": " + describe(op.config()));
  }
  table.notes.push_back("check: fused output of every rank equals the non-overlapped chain's within bf16 tolerance");
  table.notes.push_back("TFLOP/s counts both GEMMs' pair FLOPs (no padding); vs cuBLAS = T_gemm1 + T_act + T_gemm2 / time");
  result.common_notes(w, t_fused.samples, o.timing.warmup, gated);
  return table;
}

}  // namespace tilelink::bench
