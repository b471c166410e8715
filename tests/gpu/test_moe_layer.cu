// The whole MoE layer (MoeLayer: part 1 -> activation -> part 2) on virtual ranks (world 1, 2, 4,
// 8), against cuBLAS GEMMs expert by expert on rows placed by the host mapping, with the
// activation, the top-k combine and the rank-order reduction on the CPU. Routings uniform, skewed
// and few-experts; top-k 1, 2, 4, 6, 8; sizes off the tiles. Two calls per case with fresh
// routings, weights and inputs; before each, every rank's output, receive slots and the peer rows
// of the gathered tokens poisoned. Every element within bf16 tolerance of the reference, relative
// to the magnitude of its terms.
#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cublas_ref.hpp"
#include "gpu_test_util.hpp"
#include "moe_test_util.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/sim/synthetic_routing.hpp"
#include "tilelink/runtime/trace_buffer.hpp"

namespace tilelink::test::moe_layer {
namespace {

struct LayerShape {
  uint32_t tokens_per_rank, hidden, intermediate_per_rank, experts;
};
constexpr LayerShape kLayer{150, 200, 72, 10};

// Checks one traced layer call's records (MoeAgGroupGemm/MoeGemmRs::set_trace), per rank: part 1's
// grouped GEMM records one wait, one load (beginning after the wait ended) and one epilogue for
// each of its `tiles` x n-tiles tiles; part 2's one load and one epilogue, each with one notify,
// for each of its tiles; with peers, the gather and the combine blocks record waits and notifies.
// "" or the first mismatch.
std::string check_layer_trace(const MoeLayer& layer, uint32_t tiles, uint32_t n1, uint32_t hidden, int world_size,
                              const std::vector<TraceRecord>& part1, const std::vector<TraceRecord>& part2) {
  auto tile_n = [](const std::string& kernel) {
    unsigned bm = 0, bn = 0;
    return std::sscanf(kernel.c_str(), "%ux%u", &bm, &bn) == 2 ? bn : 0u;
  };
  const uint32_t n_tiles1 = (n1 + tile_n(layer.part1().kernel_name()) - 1) / tile_n(layer.part1().kernel_name());
  const uint32_t n_tiles2 = (hidden + tile_n(layer.part2().kernel_name()) - 1) / tile_n(layer.part2().kernel_name());
  using Key = std::tuple<uint32_t, uint32_t, uint16_t, uint32_t>;  // (rank, kind, role, tile)
  for (const auto* records : {&part1, &part2}) {
    const bool first = records == &part1;
    std::map<Key, std::vector<TraceRecord>> by;
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> comm;  // (rank, kind) -> count
    for (const TraceRecord& r : *records) {
      if (r.start_ns > r.end_ns) return "a span ends before it starts";
      if (r.role == uint16_t(TraceRole::kComm)) {
        ++comm[{r.rank, r.kind}];
      } else {
        by[{r.rank, r.kind, r.role, r.tile}].push_back(r);
      }
    }
    const uint32_t n_tiles = first ? n_tiles1 : n_tiles2;
    const std::string part = first ? "part 1" : "part 2";
    for (uint32_t rank = 0; rank < uint32_t(world_size); ++rank) {
      const std::string at = part + " rank " + std::to_string(rank);
      for (uint32_t t = 0; t < tiles * n_tiles; ++t) {
        const auto& wait = by[{rank, uint32_t(TraceKind::kWait), uint16_t(TraceRole::kProducer), t}];
        const auto& load = by[{rank, uint32_t(TraceKind::kLoad), uint16_t(TraceRole::kProducer), t}];
        const auto& epilogue = by[{rank, uint32_t(TraceKind::kEpilogue), uint16_t(TraceRole::kConsumer), t}];
        const auto& notify = by[{rank, uint32_t(TraceKind::kNotify), uint16_t(TraceRole::kConsumer), t}];
        const std::string tile = at + " tile " + std::to_string(t);
        if (wait.size() != 1 || load.size() != 1 || epilogue.size() != 1) {
          return tile + ": " + std::to_string(wait.size()) + " waits, " + std::to_string(load.size()) + " loads, " +
                 std::to_string(epilogue.size()) + " epilogues; expected one each";
        }
        if (wait[0].end_ns > load[0].start_ns) return tile + ": loads began before the wait ended";
        // Part 2's tiles notify their combine blocks; combined in the epilogue, they notify the
        // owners per token block instead (not traced per tile).
        const bool per_tile = !first && layer.part2().combine() == MoeCombine::kBlocks;
        if (notify.size() != (per_tile ? 1u : 0u)) return tile + ": " + std::to_string(notify.size()) + " notifies";
      }
      if (by.count({rank, uint32_t(TraceKind::kLoad), uint16_t(TraceRole::kProducer), tiles * n_tiles}) != 0) {
        return at + ": a load of a tile past the mapping's " + std::to_string(tiles) + " tile rows";
      }
      const bool blocks = first || layer.part2().combine() == MoeCombine::kBlocks;
      const uint32_t waits = comm[{rank, uint32_t(TraceKind::kWait)}], notifies = comm[{rank, uint32_t(TraceKind::kNotify)}];
      if (world_size > 1 && (blocks ? waits == 0 || notifies == 0 : waits + notifies == 0)) {
        return at + ": its " + (first ? "gather" : blocks ? "combine" : "reduction") + " blocks recorded " +
               std::to_string(waits) + " waits, " + std::to_string(notifies) + " notifies";
      }
    }
  }
  return "";
}

// With `cached`, the layer is built on automatic with `cached` in a tune cache for its GPU, world
// and problem, and must run that configuration (keeping its own activation). With `scope` =
// kOwnTokens each rank passes only its own tokens' routing (the layer all-gathers it). With
// `repoint`, the second call runs on a second set of routing, weights and outputs
// (MoeLayer::set_operands), and the first set's outputs must keep their poison. With `from_source`
// each rank's tokens come from a buffer of their own (x_source, one per set of operands), and every
// row of the gathered tokens is poisoned before each call.
std::string run_layer(int world_size, uint32_t topk, SyntheticRouting routing, MlpActivation act,
                      std::mt19937_64& rng, bool traced = false, const MoeLayerConfig* cached = nullptr,
                      MoeRoutingScope scope = MoeRoutingScope::kAllTokens, bool repoint = false,
                      OpMethod method = OpMethod::kAuto, MoeCombine combine = MoeCombine::kAuto,
                      bool from_source = false) {
  const LayerShape s = kLayer;
  const uint32_t tokens = s.tokens_per_rank * static_cast<uint32_t>(world_size);
  const uint32_t k = s.intermediate_per_rank, n1 = (act == MlpActivation::kSwiGlu ? 2 : 1) * k;
  const size_t x_bytes = size_t(tokens) * s.hidden * 2, shard_bytes = size_t(s.tokens_per_rank) * s.hidden * 2;
  TestWorld env(world_size, 2 * x_bytes + (4 << 20), 16384);
  const World& world = env.world;
  SymmetricBuffer x = env.heap.allocate(x_bytes), recv = env.heap.allocate(x_bytes);
  MoeLayerArguments args;
  args.x = &x;
  args.tokens_per_rank = s.tokens_per_rank;
  args.hidden = s.hidden;
  args.intermediate = k * static_cast<uint32_t>(world_size);
  args.experts = s.experts;
  args.topk = topk;
  args.recv = &recv;
  args.config.activation = act;
  args.config.part1.method = method;  // both parts
  args.config.part2.method = method;
  args.config.part2.combine = combine;
  args.routing = scope;
  const bool own = scope == MoeRoutingScope::kOwnTokens;
  const uint32_t routing_tokens = own ? s.tokens_per_rank : tokens;  // per rank
  // Two sets of per-call operands: set 1 runs unless `repoint` moves the second call to set 2.
  struct Operands {
    std::vector<DeviceBuffer> ids, weights, w1, w2, out, x;
  };
  Operands sets[2];
  for (Operands& o : sets) {
    for (int r = 0; r < world_size; ++r) {
      o.ids.emplace_back(size_t(routing_tokens) * topk * 4, world.device(r));
      o.weights.emplace_back(size_t(routing_tokens) * topk * 4, world.device(r));
      o.w1.emplace_back(size_t(s.experts) * n1 * s.hidden * 2, world.device(r));
      o.w2.emplace_back(size_t(s.experts) * s.hidden * k * 2, world.device(r));
      o.out.emplace_back(shard_bytes, world.device(r));
      if (from_source) o.x.emplace_back(shard_bytes, world.device(r));
      upload(o.w1[r].get(), random_bf16(o.w1[r].bytes() / 2, rng).data(), o.w1[r].bytes());
      upload(o.w2[r].get(), random_bf16(o.w2[r].bytes() / 2, rng).data(), o.w2[r].bytes());
    }
    if (!repoint) break;
  }
  for (int r = 0; r < world_size; ++r) {
    args.ids.push_back(sets[0].ids[r].get<int32_t>());
    args.weights.push_back(sets[0].weights[r].get<float>());
    args.w1.push_back(sets[0].w1[r].get());
    args.w2.push_back(sets[0].w2[r].get());
    args.out.push_back(sets[0].out[r].get());
    if (from_source) args.x_source.push_back(sets[0].x[r].get());
  }
  if (std::string why = MoeLayer::can_implement(world, env.heap, args); !why.empty()) return why;
  std::optional<ScopedTuneCache> cache;
  if (cached != nullptr) {
    cache.emplace("moe_layer_tune");
    TuneEntry entry;
    entry.op = "moe";
    entry.moe = *cached;
    cache->put(moe_tune_key(world, args), entry);
  }
  MoeLayer layer(world, env.heap, env.signals, args, "moe_layer_test");
  if (method != OpMethod::kAuto &&
      (layer.part1().method() != method || layer.part2().method() != method)) {
    return std::string("the layer runs methods ") + to_string(layer.part1().method()) + ", " +
           to_string(layer.part2().method()) + ": expected " + to_string(method) + " for both parts";
  }
  if (cached != nullptr) {
    if (layer.tuned_from() != cache->path()) return "the layer did not take the tune cache's configuration";
    if (describe(layer.config()) != describe(*cached) || layer.config().activation != act) {
      return "the layer runs '" + describe(layer.config()) + "', expected the cached '" + describe(*cached) +
             "' with its own activation";
    }
  }
  CublasHandle cublas;
  const uint32_t bm = layer.part1().tile_m();
  DeviceBuffer a_dev(size_t(layer.part1().mapping(0).max_rows()) * std::max(s.hidden, k) * 2, 0);

  for (int call = 1; call <= 2; ++call) {
    const std::string where = "call " + std::to_string(call) + (own ? " (own tokens' routing)" : "") +
                              (repoint && call == 2 ? " (re-pointed)" : "");
    const std::vector<int32_t> routing_ids = synthetic_routing(rng, tokens, topk, s.experts, routing);
    const std::vector<float> weights_host = random_weights(size_t(tokens) * topk, rng);
    const std::vector<__nv_bfloat16> x_host = random_bf16(size_t(tokens) * s.hidden, rng);
    Operands& o = sets[repoint && call == 2 ? 1 : 0];
    settle();
    for (int r = 0; r < world_size; ++r) {
      const size_t first = own ? size_t(r) * s.tokens_per_rank * topk : 0;  // the rank's routing
      upload(o.ids[r].get(), routing_ids.data() + first, o.ids[r].bytes());
      upload(o.weights[r].get(), weights_host.data() + first, o.weights[r].bytes());
      char* g = static_cast<char*>(x.data(r));
      TL_CUDA_CHECK(cudaMemset(g, 0xFF, x_bytes));  // bf16 0xFFFF is NaN
      poison(recv.data(r), recv.bytes());
    }
    for (Operands& each : sets) {
      for (DeviceBuffer& b : each.out) poison(b.get(), b.bytes());
      for (DeviceBuffer& b : each.x) TL_CUDA_CHECK(cudaMemset(b.get(), 0xFF, b.bytes()));
      if (!repoint) break;
    }
    for (int r = 0; r < world_size; ++r) {  // the rank's shard: its rows of x, or its source buffer
      char* shard = from_source ? static_cast<char*>(o.x[r].get()) : static_cast<char*>(x.data(r)) + r * shard_bytes;
      upload(shard, reinterpret_cast<const char*>(x_host.data()) + r * shard_bytes, shard_bytes);
    }
    if (repoint && call == 2) {
      for (int r = 0; r < world_size; ++r) {
        if (from_source) {
          layer.set_operands(r, o.ids[r].get<int32_t>(), o.weights[r].get<float>(), o.w1[r].get(), o.w2[r].get(),
                             o.out[r].get(), o.x[r].get());
        } else {
          layer.set_operands(r, o.ids[r].get<int32_t>(), o.weights[r].get<float>(), o.w1[r].get(), o.w2[r].get(),
                             o.out[r].get());
        }
      }
    }
    settle();
    // With `traced`, the second call records its timeline; the result must not change.
    TraceBuffer trace1(world, 1 << 16), trace2(world, 1 << 16);
    if (traced && call == 2) {
      layer.part1().set_trace(&trace1);
      layer.part2().set_trace(&trace2);
    }
    layer.run();
    world.synchronize();
    layer.part1().set_trace(nullptr);
    layer.part2().set_trace(nullptr);

    // The reference chain, rank by rank (moe_layer_rank_reference).
    const MoeMapping host = build_moe_mapping({tokens, topk, s.experts, routing_ids.data(), nullptr}, bm);
    const std::vector<__nv_bfloat16> a_host = sorted_rows(host, x_host, s.hidden);
    std::vector<std::vector<float>> y2, slack(static_cast<size_t>(world_size));
    std::vector<void*> outs;
    for (int r = 0; r < world_size; ++r) {
      y2.push_back(moe_layer_rank_reference(cublas, host, a_host, o.w1[r].get(), o.w2[r].get(), s.hidden, k, act,
                                            a_dev, false, &slack[size_t(r)]));
      outs.push_back(o.out[r].get());
    }
    if (std::string e = check_moe_outputs(host, weights_host, y2, outs, s.tokens_per_rank, s.hidden, where, -1, &slack);
        !e.empty()) {
      return e;
    }
    if (repoint && call == 2) {  // the first set's outputs were not written
      for (int r = 0; r < world_size; ++r) {
        if (!all_poison(download<uint8_t>(sets[0].out[r].get(), shard_bytes))) {
          return where + ": rank " + std::to_string(r) + " wrote the output of its first operands";
        }
      }
    }
    if (traced && call == 2) {
      if (trace1.dropped() + trace2.dropped() != 0) return "trace records dropped";
      if (std::string e = check_layer_trace(layer, host.num_tiles(), n1, s.hidden, world_size, trace1.records(),
                                            trace2.records());
          !e.empty()) {
        return where + ", traced: " + e;
      }
    }
  }
  return "";
}

class MoeLayerTest : public ::testing::TestWithParam<WorldRouting> {};

// SwiGLU, except GELU at top-k 2 and 6.
TEST_P(MoeLayerTest, MatchesTheCublasChain) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world, routing] = GetParam();
  expect_every_topk([&](uint32_t topk, std::mt19937_64& rng) {
    const MlpActivation act = topk % 4 == 2 ? MlpActivation::kGelu : MlpActivation::kSwiGlu;
    return run_layer(world, topk, routing, act, rng);
  });
}

INSTANTIATE_TEST_SUITE_P(World, MoeLayerTest, worlds_and_routings(), world_routing_name);

// Each rank passes only its own tokens' routing (what a router on the rank's shard gives): the
// layer all-gathers it. The second call runs on new routing, weights and outputs (set_operands).
TEST(MoeLayerOwnRouting, GathersTheRoutingAndFollowsNewOperands) {
  TL_SKIP_WITHOUT_GPU();
  for (int world : {1, 2, 3, 4, 8}) {
    for (uint32_t topk : {1u, 2u, 6u}) {
      std::mt19937_64 rng(4100 + 10 * world + topk);
      const MlpActivation act = topk == 6 ? MlpActivation::kGelu : MlpActivation::kSwiGlu;
      EXPECT_EQ(run_layer(world, topk, SyntheticRouting::kSkewed, act, rng, false, nullptr,
                          MoeRoutingScope::kOwnTokens, true),
                "")
          << "world " << world << ", top-" << topk;
    }
  }
}

// 11 virtual ranks leave no hardware queue for a third stream per rank: part 1's gather runs on the
// compute stream before its GEMM and part 2's combine on the comm streams
// (SideStreams::on_comm_streams), as in a process under MPS with three queues; own-token routing
// and set_operands as above.
TEST(MoeLayerOwnRouting, RunsWhereQueuesRunOut) {
  TL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(4150);
  EXPECT_EQ(run_layer(11, 2, SyntheticRouting::kSkewed, MlpActivation::kSwiGlu, rng, false, nullptr,
                      MoeRoutingScope::kOwnTokens, true),
            "");
}

// The non-overlapped methods of both parts (issue 21): the all-gather, gather and grouped GEMM in
// turn, then the grouped GEMM and the combine in turn; the same results as the chain.
TEST(MoeLayerNonOverlapped, MatchesTheCublasChain) {
  TL_SKIP_WITHOUT_GPU();
  for (int world : {1, 2, 3, 4, 8}) {
    for (uint32_t topk : {1u, 2u, 8u}) {
      std::mt19937_64 rng(4300 + 10 * world + topk);
      EXPECT_EQ(run_layer(world, topk, SyntheticRouting::kUniform, MlpActivation::kSwiGlu, rng, false, nullptr,
                          MoeRoutingScope::kAllTokens, false, OpMethod::kNonOverlapped),
                "")
          << "world " << world << ", top-" << topk;
    }
  }
}

// Part 2 with the combine in its epilogue, own-token routing and new operands on the second call
// (the epilogue reads the routing weights and output at launch).
TEST(MoeLayerEpilogueCombine, MatchesTheCublasChain) {
  TL_SKIP_WITHOUT_GPU();
  for (int world : {1, 2, 3, 8}) {
    for (uint32_t topk : {2u, 8u}) {
      std::mt19937_64 rng(4400 + 10 * world + topk);
      EXPECT_EQ(run_layer(world, topk, SyntheticRouting::kSkewed, MlpActivation::kSwiGlu, rng, false, nullptr,
                          MoeRoutingScope::kOwnTokens, true, OpMethod::kAuto, MoeCombine::kEpilogue),
                "")
          << "world " << world << ", top-" << topk;
    }
  }
}

// Each rank's tokens where the caller has them (x_source: the PyTorch operator's path), the second
// call's in another buffer with new routing, weights and outputs; both methods, both combines.
TEST(MoeLayerFromSource, MatchesTheCublasChain) {
  TL_SKIP_WITHOUT_GPU();
  for (int world : {1, 2, 3, 8}) {
    for (OpMethod method : {OpMethod::kAuto, OpMethod::kNonOverlapped}) {
      for (MoeCombine combine : {MoeCombine::kAuto, MoeCombine::kBlocks}) {
        if (method == OpMethod::kNonOverlapped && combine == MoeCombine::kBlocks) continue;
        std::mt19937_64 rng(4500 + 10 * world + static_cast<int>(method) + 5 * static_cast<int>(combine));
        EXPECT_EQ(run_layer(world, 2, SyntheticRouting::kSkewed, MlpActivation::kSwiGlu, rng, false, nullptr,
                            MoeRoutingScope::kOwnTokens, true, method, combine, true),
                  "")
            << "world " << world << ", " << to_string(method) << ", combine " << to_string(combine);
      }
    }
  }
}

// The layer refuses a routing scope it does not know, by name.
TEST(MoeLayerOwnRouting, RefusesAnUnknownScope) {
  TL_SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(4200);
  const std::string why = run_layer(2, 2, SyntheticRouting::kUniform, MlpActivation::kSwiGlu, rng, false, nullptr,
                                    static_cast<MoeRoutingScope>(7));
  EXPECT_NE(why.find("argument 'routing' = 7"), std::string::npos) << why;
}

// With every knob on automatic, the layer takes the tune cache's configuration for its GPU, world
// and problem (another kernel for each part, swizzles, an SM all-gather, one gather CTA, two
// weight sweeps, 32-token combine blocks) and still matches the cuBLAS chain.
TEST(MoeLayerTuneCache, AutomaticLayerRunsTheCachedConfigurationCorrectly) {
  TL_SKIP_WITHOUT_GPU();
  MoeLayerConfig cached;
  cached.part1.kernel = "128x128x64_c1x2";
  cached.part1.swizzle = 2;
  cached.part1.gather_blocks = 1;
  cached.part1.comm = {CommResource::kSm, AgMethod::kPull, DataPath::kLdSt, CommOrder::kFullMesh, 64, 2, 512};
  cached.part2.kernel = "128x128x64_c1x2";
  cached.part2.weight_sweeps = 2;
  cached.part2.comm_rows = 32;
  cached.part2.combine_blocks = 2;
  for (int world : {1, 2}) {
    const uint64_t seed = std::random_device{}();
    SCOPED_TRACE("world " + std::to_string(world) + ", seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    EXPECT_EQ(run_layer(world, 2, SyntheticRouting::kUniform, MlpActivation::kGelu, rng, false, &cached), "");
  }
}

// tilelink trace moe's recording: a traced call computes the same layer (checked against the
// cuBLAS chain) and records every grouped GEMM tile of both parts (check_layer_trace).
TEST(MoeLayerTrace, RecordsEveryTileOfBothPartsAndKeepsTheResult) {
  TL_SKIP_WITHOUT_GPU();
  for (int world : {1, 2, 4}) {
    for (MoeCombine combine : {MoeCombine::kAuto, MoeCombine::kBlocks}) {  // auto: the epilogue at world > 1
      std::mt19937_64 rng(std::random_device{}());
      EXPECT_EQ(run_layer(world, 2, SyntheticRouting::kUniform, MlpActivation::kSwiGlu, rng, true, nullptr,
                          MoeRoutingScope::kAllTokens, false, OpMethod::kFused, combine),
                "")
          << "world " << world << ", combine " << to_string(combine);
    }
  }
}

}  // namespace
}  // namespace tilelink::test::moe_layer
