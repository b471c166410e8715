// The fuzzer's runners of the MoE ops, against the MoE GPU tests' references
// (tests/gpu/moe_test_util.hpp): rows placed by the host mapping (build_moe_mapping, not the
// device's), grouped GEMMs by cuBLAS expert by expert, the layer's activation on the host, and the
// owners' top-k combine and rank-order reduction on the host.
//  - MoeAgGroupGemm: every pair's row within the bf16 rounding of cuBLAS, padding rows exactly
//    zero, rows past the routing's tiles never written, the device's tile count the host's;
//  - MoeGemmRs and MoeLayer: every owner's tokens (check_moe_outputs), nothing left unwritten, and
//    bit-identical to the previous call on the same inputs (both promise it).
#include <algorithm>
#include <string>
#include <vector>

#include "../gpu/moe_test_util.hpp"
#include "fuzz_harness.hpp"

namespace tilelink::fuzz {

namespace {

// "" unless an element of every owner's out (tokens_per_rank x n bf16) still holds poison.
std::string never_written(const std::vector<void*>& out, size_t elems, const std::string& where) {
  for (size_t q = 0; q < out.size(); ++q) {
    const auto got = test::download<__nv_bfloat16>(out[q], elems);
    for (size_t i = 0; i < elems; ++i) {
      if (bits(got[i]) == kPoisonBf16) {
        return where + ": owner " + std::to_string(q) + " element " + std::to_string(i) + " never written (poison)";
      }
    }
  }
  return "";
}

// "" if every owner's out equals `previous` (filled on the calls with fresh inputs).
std::string same_as_previous(const std::vector<void*>& out, size_t elems, bool fresh,
                             std::vector<std::vector<__nv_bfloat16>>& previous, const std::string& where) {
  for (size_t q = 0; q < out.size(); ++q) {
    auto got = test::download<__nv_bfloat16>(out[q], elems);
    if (!fresh) {
      if (std::string e = compare_bits(got, previous[q], where + ", owner " + std::to_string(q)); !e.empty()) return e;
    }
    previous[q] = std::move(got);
  }
  return "";
}

// MoeGemmRs's and MoeLayer's check of the owners' outputs (tokens_per_rank x n bf16 each): the
// routing and weights of the last fresh inputs, their host mapping, every rank's expert outputs
// (the reference) and the previous call's bits.
struct OwnerCheck {
  std::vector<int32_t> routing;
  std::vector<float> weights;
  MoeMapping host;
  std::vector<std::vector<float>> y;
  std::vector<std::vector<float>> slack;  // the layer's: moe_layer_rank_reference's bound per rank; else empty
  std::vector<std::vector<__nv_bfloat16>> previous;

  explicit OwnerCheck(int world) : y(size_t(world)), previous(size_t(world)) {}

  // Fresh routing, then fresh weights, from `rng`.
  void draw_routing(std::mt19937_64& rng, uint32_t tokens, uint32_t topk, uint32_t experts, SyntheticRouting kind) {
    routing = synthetic_routing(rng, tokens, topk, experts, kind);
    weights = test::random_weights(size_t(tokens) * topk, rng);
  }

  // Fresh inputs: the reference (check_moe_outputs) and nothing left unwritten; the same inputs
  // again: the previous call's bits. "" or the first error.
  std::string check(int call, bool fresh, const std::vector<void*>& out, uint32_t tokens_per_rank, uint32_t n) {
    const std::string where = at_call(call);
    const size_t elems = size_t(tokens_per_rank) * n;
    std::string e;
    if (fresh) e = test::check_moe_outputs(host, weights, y, out, tokens_per_rank, n, where, -1, slack.empty() ? nullptr : &slack);
    if (e.empty() && fresh) e = never_written(out, elems, where);
    if (e.empty()) e = same_as_previous(out, elems, fresh, previous, where);
    return e;
  }
};

}  // namespace

Outcome run_draw(Harness& h, const MoeAgDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const uint32_t tokens = d.args.tokens_per_rank * static_cast<uint32_t>(d.world);
  const size_t x_bytes = size_t(tokens) * d.args.hidden * 2, shard_bytes = size_t(d.args.tokens_per_rank) * d.args.hidden * 2;
  SymmetricBuffer x = symmetric(env, d.args.x_offset + x_bytes);
  std::vector<DeviceBuffer> ids, w, out;
  MoeAgGroupGemmArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.x = &x;
  ShardSources shards(env, d.from_source, shard_bytes);
  args.x_source = shards.pointers();
  for (int r = 0; r < d.world; ++r) {
    ids.push_back(device_buffer(env, r, size_t(tokens) * d.args.topk * 4));
    w.push_back(device_buffer(env, r, size_t(d.args.experts) * d.args.n * d.args.hidden * 2));
    out.push_back(device_buffer(env, r, 256));  // sized below, once out_rows can be asked
    args.ids.push_back(ids.back().get<int32_t>());
    args.w.push_back(w.back().get());
    args.out.push_back(out.back().get());
  }
  if (std::string why = MoeAgGroupGemm::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  const uint64_t out_rows = MoeAgGroupGemm::out_rows(world, args);
  for (int r = 0; r < d.world; ++r) {
    out[r] = device_buffer(env, r, out_rows * d.args.n * 2);
    args.out[r] = out[r].get();
  }
  std::string error;
  const std::unique_ptr<MoeAgGroupGemm> op = construct<MoeAgGroupGemm>(env, args, "fuzz_moe_ag", &error);
  if (!op) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  DeviceBuffer sorted = device_buffer(env, 0, out_rows * d.args.hidden * 2);
  std::vector<int32_t> routing;
  std::vector<__nv_bfloat16> x_host;
  MoeMapping host;
  std::vector<std::vector<float>> want(size_t(d.world));
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      routing = synthetic_routing(rng, tokens, d.args.topk, d.args.experts, d.routing);
      x_host = test::random_bf16(size_t(tokens) * d.args.hidden, rng);
      for (int r = 0; r < d.world; ++r) {
        upload_vector(ids[r].get(), routing);
        upload_vector(w[r].get(), test::random_bf16(size_t(d.args.experts) * d.args.n * d.args.hidden, rng));
      }
    }
    for (int r = 0; r < d.world; ++r) {
      char* g = x.as<char>(r) + d.args.x_offset;
      fill(g, kNanByte, x_bytes);  // peers' rows NaN until gathered
      shards.put(r, g + r * shard_bytes, reinterpret_cast<const char*>(x_host.data()) + r * shard_bytes, shard_bytes);
      test::poison(out[r].get(), out_rows * d.args.n * 2);
    }
    test::settle();
    op->run();
    world.synchronize();
    if (fresh_inputs(call)) {
      host = build_moe_mapping({tokens, d.args.topk, d.args.experts, routing.data(), nullptr}, op->tile_m());
      upload_vector(sorted.get(), test::sorted_rows(host, x_host, d.args.hidden));
      for (int r = 0; r < d.world; ++r) {
        want[r] = test::grouped_reference(h.cublas(), host, sorted.get(), w[r].get(), d.args.n, d.args.hidden, 0);
      }
    }
    const size_t rows = size_t(host.num_tiles()) * host.bm;
    for (int r = 0; r < d.world; ++r) {
      const std::string where = at_call(call) + ", rank " + std::to_string(r);
      const uint32_t device_tiles = test::download<uint32_t>(op->mapping(r).num_tiles_device(), 1)[0];
      if (device_tiles != host.num_tiles()) {
        return failure(where + ": the device mapping has " + std::to_string(device_tiles) + " tiles, the host's " +
                           std::to_string(host.num_tiles()),
                       call);
      }
      const auto got = test::download<__nv_bfloat16>(out[r].get(), out_rows * d.args.n);
      for (size_t row = 0; row < rows; ++row) {
        if (host.row_pair[row] != kPadRow) continue;
        for (size_t col = 0; col < d.args.n; ++col) {
          if (__bfloat162float(got[row * d.args.n + col]) != 0.0f) {
            return failure(where + ": padding row " + std::to_string(row) + " col " + std::to_string(col) + " = " +
                               std::to_string(__bfloat162float(got[row * d.args.n + col])) + ", expected 0",
                           call);
          }
        }
      }
      const std::vector<__nv_bfloat16> used(got.begin(), got.begin() + rows * d.args.n);
      if (std::string e = compare_bf16(used, want[r], nullptr, 8e-3f, 1e-2f, d.args.n, where + ", sorted rows against cuBLAS");
          !e.empty()) {
        return failure(e, call);
      }
      for (size_t i = rows * d.args.n; i < got.size(); ++i) {
        if (bits(got[i]) != kPoisonBf16) {
          return failure(where + ": row " + std::to_string(i / d.args.n) + ", past the routing's " + std::to_string(rows) +
                             " rows, was written",
                         call);
        }
      }
    }
  }
  return passed(h.repeat());
}

Outcome run_draw(Harness& h, const MoeRsDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const uint32_t tokens = d.args.tokens_per_rank * static_cast<uint32_t>(d.world);
  const size_t out_elems = size_t(d.args.tokens_per_rank) * d.args.n;
  SymmetricBuffer recv = symmetric(env, size_t(tokens) * d.args.n * 2);
  std::vector<DeviceBuffer> ids, weights, w, out, hrows;
  std::vector<std::unique_ptr<MoeMappingBuffers>> mapping;
  MoeGemmRsArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.recv = &recv;
  for (int r = 0; r < d.world; ++r) {
    ids.push_back(device_buffer(env, r, size_t(tokens) * d.args.topk * 4));
    weights.push_back(device_buffer(env, r, size_t(tokens) * d.args.topk * 4));
    w.push_back(device_buffer(env, r, size_t(d.args.experts) * d.args.n * d.args.k * 2));
    out.push_back(device_buffer(env, r, out_elems * 2));
    args.w.push_back(w.back().get());
    args.weights.push_back(weights.back().get<float>());
    args.out.push_back(out.back().get());
  }
  // The mapping and the sorted rows are the caller's: built once the shape (and the kernel's tile
  // height) is known to be good, then the whole check.
  if (std::string why = MoeGemmRs::can_implement_shape(world, env.heap, args); !why.empty()) return refusal(why);
  const uint32_t bm = MoeGemmRs::tile_m_of(d.args.config.kernel);
  for (int r = 0; r < d.world; ++r) {
    mapping.push_back(std::make_unique<MoeMappingBuffers>(tokens, d.args.topk, d.args.experts, bm, world.device(r)));
    hrows.push_back(device_buffer(env, r, size_t(mapping.back()->max_rows()) * d.args.k * 2));
    args.mapping.push_back(mapping.back().get());
    args.h.push_back(hrows.back().get());
  }
  if (std::string why = MoeGemmRs::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<MoeGemmRs> op = construct<MoeGemmRs>(env, args, "fuzz_moe_rs", &error);
  if (!op) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  OwnerCheck owners(d.world);
  for (int call = 1; call <= h.repeat(); ++call) {
    const bool fresh = fresh_inputs(call);
    if (fresh) {
      owners.draw_routing(rng, tokens, d.args.topk, d.args.experts, d.routing);
      for (int r = 0; r < d.world; ++r) {
        upload_vector(ids[r].get(), owners.routing);
        upload_vector(weights[r].get(), owners.weights);
        upload_vector(hrows[r].get(), test::random_bf16(hrows[r].bytes() / 2, rng));
        upload_vector(w[r].get(), test::random_bf16(size_t(d.args.experts) * d.args.n * d.args.k, rng));
        mapping[r]->build(ids[r].get<int32_t>(), world.compute_stream(r));
      }
    }
    for (int r = 0; r < d.world; ++r) {
      test::poison(out[r].get(), out_elems * 2);
      test::poison(recv.data(r), size_t(tokens) * d.args.n * 2);
    }
    test::settle();
    op->run();
    world.synchronize();
    if (fresh) {
      owners.host = build_moe_mapping(
          {tokens, d.args.topk, d.args.experts, owners.routing.data(), owners.weights.data()}, bm);
      for (int r = 0; r < d.world; ++r) {
        owners.y[r] =
            test::grouped_reference(h.cublas(), owners.host, hrows[r].get(), w[r].get(), d.args.n, d.args.k, 0);
      }
    }
    if (std::string e = owners.check(call, fresh, args.out, d.args.tokens_per_rank, d.args.n); !e.empty()) {
      return failure(e, call);
    }
  }
  return passed(h.repeat());
}

Outcome run_draw(Harness& h, const MoeLayerDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const uint32_t w = static_cast<uint32_t>(d.world), tokens = d.args.tokens_per_rank * w, k = d.args.intermediate / w;
  const MlpActivation act = d.args.config.activation;
  const uint32_t n1 = (act == MlpActivation::kSwiGlu ? 2 : 1) * k;
  const size_t x_bytes = size_t(tokens) * d.args.hidden * 2, shard_bytes = size_t(d.args.tokens_per_rank) * d.args.hidden * 2;
  const size_t out_elems = size_t(d.args.tokens_per_rank) * d.args.hidden;
  SymmetricBuffer x = symmetric(env, d.args.x_offset + x_bytes), recv = symmetric(env, x_bytes);
  std::vector<DeviceBuffer> ids, weights, w1, w2, out;
  MoeLayerArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.x = &x;
  ShardSources shards(env, d.from_source, shard_bytes);
  args.x_source = shards.pointers();
  args.recv = &recv;
  for (int r = 0; r < d.world; ++r) {
    ids.push_back(device_buffer(env, r, size_t(tokens) * d.args.topk * 4));
    weights.push_back(device_buffer(env, r, size_t(tokens) * d.args.topk * 4));
    w1.push_back(device_buffer(env, r, size_t(d.args.experts) * n1 * d.args.hidden * 2));
    w2.push_back(device_buffer(env, r, size_t(d.args.experts) * d.args.hidden * k * 2));
    out.push_back(device_buffer(env, r, out_elems * 2));
    args.ids.push_back(ids.back().get<int32_t>());
    args.weights.push_back(weights.back().get<float>());
    args.w1.push_back(w1.back().get());
    args.w2.push_back(w2.back().get());
    args.out.push_back(out.back().get());
  }
  if (std::string why = MoeLayer::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<MoeLayer> layer = construct<MoeLayer>(env, args, "fuzz_moe_layer", &error);
  if (!layer) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  const uint32_t bm = layer->part1().tile_m();
  DeviceBuffer scratch =
      device_buffer(env, 0, size_t(layer->part1().mapping(0).max_rows()) * std::max(d.args.hidden, k) * 2);
  std::vector<__nv_bfloat16> x_host;
  OwnerCheck owners(d.world);
  for (int call = 1; call <= h.repeat(); ++call) {
    const bool fresh = fresh_inputs(call);
    if (fresh) {
      owners.draw_routing(rng, tokens, d.args.topk, d.args.experts, d.routing);
      x_host = test::random_bf16(size_t(tokens) * d.args.hidden, rng);
      for (int r = 0; r < d.world; ++r) {
        upload_vector(ids[r].get(), owners.routing);
        upload_vector(weights[r].get(), owners.weights);
        upload_vector(w1[r].get(), test::random_bf16(size_t(d.args.experts) * n1 * d.args.hidden, rng));
        upload_vector(w2[r].get(), test::random_bf16(size_t(d.args.experts) * d.args.hidden * k, rng));
      }
    }
    for (int r = 0; r < d.world; ++r) {
      char* g = x.as<char>(r) + d.args.x_offset;
      fill(g, kNanByte, x_bytes);  // peers' rows NaN until gathered
      shards.put(r, g + r * shard_bytes, reinterpret_cast<const char*>(x_host.data()) + r * shard_bytes, shard_bytes);
      test::poison(out[r].get(), out_elems * 2);
      test::poison(recv.data(r), x_bytes);
    }
    test::settle();
    layer->run();
    world.synchronize();
    if (fresh) {
      owners.host = build_moe_mapping({tokens, d.args.topk, d.args.experts, owners.routing.data(), nullptr}, bm);
      const std::vector<__nv_bfloat16> a = test::sorted_rows(owners.host, x_host, d.args.hidden);
      owners.slack.assign(size_t(d.world), {});
      for (int r = 0; r < d.world; ++r) {
        owners.y[r] = test::moe_layer_rank_reference(h.cublas(), owners.host, a, w1[r].get(), w2[r].get(),
                                                     d.args.hidden, k, act, scratch, false, &owners.slack[size_t(r)]);
      }
    }
    if (std::string e = owners.check(call, fresh, args.out, d.args.tokens_per_rank, d.args.hidden); !e.empty()) {
      return failure(e, call);
    }
  }
  return passed(h.repeat());
}

}  // namespace tilelink::fuzz
