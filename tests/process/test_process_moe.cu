// The process suite's MoE layer (tests/process/test_process.cu says how the suite runs).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../gpu/cublas_ref.hpp"
#include "../gpu/gpu_test_util.hpp"
#include "../gpu/moe_test_util.hpp"
#include "process_env.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"

namespace tilelink::test::process {
namespace {

// The MoE layer across processes: each rank passes its own tokens' routing (the layer
// all-gathers it) or every token's, an off-grid token count per rank, calls alternating between two
// sets of weights and outputs (set_operands), against the reference chain per rank (a plain GEMM
// kernel, the activation on the host); part 2 combining in blocks (automatic) or in its GEMM's
// epilogue, fused or non-overlapped. Under the put-with-signal
// transport (gpu_process_put_signal_*) the combine blocks stage the peers' rows and the stream puts
// them (the epilogue combine is refused there, by name). With `from_source` the rank's tokens come
// from a buffer outside the heap (x_source; the calls alternate between two), the heap's own rows
// poisoned: the PyTorch operator's path.
struct MoeCase {
  const char* name;
  MoeRoutingScope routing;
  uint32_t topk;
  MlpActivation activation;
  MoeCombine combine = MoeCombine::kAuto;  // part 2's
  OpMethod method = OpMethod::kAuto;       // part 2's
  bool from_source = false;
};

class ProcessMoeLayer : public ::testing::TestWithParam<MoeCase> {};

TEST_P(ProcessMoeLayer, MatchesTheReferenceChain) {
  const MoeCase c = GetParam();
  const int w = world().size();
  const uint32_t tpr = 96, hidden = 256, k = 128, experts = 8, tokens = tpr * uint32_t(w);
  const uint32_t n1 = (c.activation == MlpActivation::kSwiGlu ? 2 : 1) * k;
  const bool own = c.routing == MoeRoutingScope::kOwnTokens;
  const size_t x_bytes = size_t(tokens) * hidden * 2, routing_bytes = size_t(own ? tpr : tokens) * c.topk * 4;
  SymmetricHeap heap(world(), 2 * x_bytes + (4 << 20));
  SignalSet signals(heap, 16384);
  SymmetricBuffer x = heap.allocate(x_bytes), recv = heap.allocate(x_bytes);
  const int dev = world().device(me());
  auto two = [&](size_t bytes) {
    std::vector<DeviceBuffer> v;
    v.emplace_back(bytes, dev);
    v.emplace_back(bytes, dev);
    return v;
  };
  std::vector<DeviceBuffer> ids = two(routing_bytes), weights = two(routing_bytes),
                            w1 = two(size_t(experts) * n1 * hidden * 2), w2 = two(size_t(experts) * hidden * k * 2),
                            outs = two(size_t(tpr) * hidden * 2), sources = two(size_t(tpr) * hidden * 2);
  MoeLayerArguments args;
  args.x = &x;
  args.recv = &recv;
  args.tokens_per_rank = tpr;
  args.hidden = hidden;
  args.intermediate = k * uint32_t(w);
  args.experts = experts;
  args.topk = c.topk;
  args.routing = c.routing;
  args.config.activation = c.activation;
  args.config.part2.combine = c.combine;
  args.config.part2.method = c.method;
  args.ids.assign(w, nullptr);
  args.weights.assign(w, nullptr);
  args.w1.assign(w, nullptr);
  args.w2.assign(w, nullptr);
  args.out.assign(w, nullptr);
  args.ids[me()] = ids[0].get<int32_t>();
  args.weights[me()] = weights[0].get<float>();
  args.w1[me()] = w1[0].get();
  args.w2[me()] = w2[0].get();
  args.out[me()] = outs[0].get();
  if (c.from_source) {
    args.x_source.assign(w, nullptr);
    args.x_source[me()] = sources[0].get();
  }
  if (world().transport() == Transport::kPutSignal && w > 1 && c.combine == MoeCombine::kEpilogue) {
    const std::string why = MoeLayer::can_implement(world(), heap, args);
    EXPECT_NE(why.find("put_signal"), std::string::npos) << why;
    GTEST_SKIP() << "the epilogue combine is refused under put_signal: " << why;
  }
  MoeLayer layer(world(), heap, signals, args, std::string("process_moe_") + c.name);
  CublasHandle cublas;
  DeviceBuffer scratch(size_t(layer.part1().mapping(me()).max_rows()) * std::max(hidden, k) * 2, dev);
  DeviceBuffer w1_p(w1[0].bytes(), dev), w2_p(w2[0].bytes(), dev);
  for (int call = 1; call <= 3; ++call) {
    const std::string where = std::string(c.name) + ", call " + std::to_string(call);
    SCOPED_TRACE(where);
    const size_t set = size_t(call - 1) % 2;
    auto rng = shared_rng(300, call);  // the same routing and tokens in every process
    const std::vector<int32_t> routing = synthetic_routing(rng, tokens, c.topk, experts, SyntheticRouting::kSkewed);
    const std::vector<float> weights_host = random_weights(size_t(tokens) * c.topk, rng);
    const std::vector<__nv_bfloat16> x_host = random_bf16(size_t(tokens) * hidden, rng);
    const size_t first = own ? size_t(me()) * tpr * c.topk : 0;
    upload(ids[set].get(), routing.data() + first, routing_bytes);
    upload(weights[set].get(), weights_host.data() + first, routing_bytes);
    const char* shard = reinterpret_cast<const char*>(x_host.data()) + size_t(me()) * tpr * hidden * 2;
    if (c.from_source) {  // the heap's rows all poison (bf16 0xFFFF is NaN), the shard in this call's buffer
      TL_CUDA_CHECK(cudaMemset(x.data(me()), 0xFF, x_bytes));
      TL_CUDA_CHECK(cudaMemset(sources[1 - set].get(), 0xFF, sources[1 - set].bytes()));
      upload(sources[set].get(), shard, sources[set].bytes());
    } else {
      upload(static_cast<char*>(x.data(me())) + size_t(me()) * tpr * hidden * 2, shard, size_t(tpr) * hidden * 2);
    }
    const MoeMapping host = build_moe_mapping({tokens, c.topk, experts, routing.data(), nullptr}, layer.part1().tile_m());
    const std::vector<__nv_bfloat16> a_host = sorted_rows(host, x_host, hidden);
    std::vector<std::vector<float>> y2, slack(static_cast<size_t>(w));
    for (int p = 0; p < w; ++p) {  // every rank's weights (each process makes all of them)
      auto wrng = shared_rng(400 + p, call);
      const auto w1_host = random_bf16(w1_p.bytes() / 2, wrng), w2_host = random_bf16(w2_p.bytes() / 2, wrng);
      if (p == me()) {
        upload(w1[set].get(), w1_host.data(), w1[set].bytes());
        upload(w2[set].get(), w2_host.data(), w2[set].bytes());
      }
      upload(w1_p.get(), w1_host.data(), w1_p.bytes());
      upload(w2_p.get(), w2_host.data(), w2_p.bytes());
      // The plain reference kernel, not cuBLAS: under MPS shares of 38-44 SMs (3 processes on an
      // H100) cuBLAS leaves tiles of these small GEMMs unwritten (docs/PERF.md, fourteenth session).
      y2.push_back(moe_layer_rank_reference(cublas, host, a_host, w1_p.get(), w2_p.get(), hidden, k, c.activation,
                                            scratch, /*simple=*/true, &slack[size_t(p)]));
    }
    poison(outs[set].get(), outs[set].bytes());
    if (c.from_source) {
      layer.set_operands(me(), ids[set].get<int32_t>(), weights[set].get<float>(), w1[set].get(), w2[set].get(),
                         outs[set].get(), sources[set].get());
    } else {
      layer.set_operands(me(), ids[set].get<int32_t>(), weights[set].get<float>(), w1[set].get(), w2[set].get(),
                         outs[set].get());
    }
    world().barrier();  // every rank's shard and routing in place (the layer's own barriers order the rest)
    layer.run();
    world().synchronize();
    std::vector<void*> out_ptrs(size_t(w), nullptr);
    out_ptrs[size_t(me())] = outs[set].get();
    EXPECT_EQ(check_moe_outputs(host, weights_host, y2, out_ptrs, tpr, hidden, where, me(), &slack), "");
    world().barrier();  // the next call's uploads after every rank's check
  }
}

INSTANTIATE_TEST_SUITE_P(Process, ProcessMoeLayer,
                         ::testing::Values(MoeCase{"own_routing_top2_swiglu", MoeRoutingScope::kOwnTokens, 2,
                                                   MlpActivation::kSwiGlu},
                                           MoeCase{"all_routing_top6_gelu", MoeRoutingScope::kAllTokens, 6,
                                                   MlpActivation::kGelu},
                                           MoeCase{"own_routing_top2_epilogue_combine", MoeRoutingScope::kOwnTokens,
                                                   2, MlpActivation::kSwiGlu, MoeCombine::kEpilogue},
                                           // auto takes the epilogue with peers: the blocks asked for
                                           MoeCase{"all_routing_top2_blocks_combine", MoeRoutingScope::kAllTokens,
                                                   2, MlpActivation::kSwiGlu, MoeCombine::kBlocks},
                                           MoeCase{"all_routing_top2_non_overlapped", MoeRoutingScope::kAllTokens, 2,
                                                   MlpActivation::kSwiGlu, MoeCombine::kBlocks,
                                                   OpMethod::kNonOverlapped},
                                           MoeCase{"own_routing_top2_source", MoeRoutingScope::kOwnTokens, 2,
                                                   MlpActivation::kSwiGlu, MoeCombine::kAuto, OpMethod::kAuto, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tilelink::test::process
