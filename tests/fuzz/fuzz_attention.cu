// The fuzzer's runner of SpAttention, against the GPU suite's attention reference
// (tests/gpu/attention_ref.cuh: two-pass softmax in fp32 scores and double sums over the whole
// sequence in position order, built from every rank's own K/V rows; positions from the layout's
// definition). Every query row of every rank and head is checked; every element of O and LSE
// must be finite and written. Tolerances are test_sp_attention.cu's (which derives them): per
// element |O - ref| <= 2e-2 + 2e-2 |ref|, |LSE - ref| <= 1e-3 + 1e-3 |ref|, and the relative RMS
// error of O over all of it <= 1e-2.
#include <cmath>
#include <string>
#include <vector>

#include "../gpu/attention_ref.cuh"
#include "fuzz_harness.hpp"

namespace tilelink::fuzz {

Outcome run_draw(Harness& h, const SpAttentionDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const uint32_t w = static_cast<uint32_t>(d.world), spr = d.args.seq_per_rank, seq_len = w * spr;
  const uint32_t H = d.args.q_heads, hd = d.args.head_dim, row_elems = 2 * d.args.kv_heads * d.args.head_dim;
  const size_t row_bytes = size_t(row_elems) * 2, kv_bytes = d.args.kv_offset + size_t(seq_len) * row_bytes;
  const size_t q_elems = size_t(spr) * H * hd, lse_elems = size_t(spr) * H;
  SymmetricBuffer kv = symmetric(env, kv_bytes);
  std::vector<DeviceBuffer> q, o, lse;
  SpAttentionArguments args = d.args;  // the drawn sizes, offsets and configuration
  for (int r = 0; r < d.world; ++r) {
    q.push_back(device_buffer(env, r, q_elems * 2));
    o.push_back(device_buffer(env, r, q_elems * 2));
    lse.push_back(device_buffer(env, r, lse_elems * sizeof(float)));
    args.q.push_back(q.back().get());
    args.o.push_back(o.back().get());
    args.lse.push_back(lse.back().get<float>());
  }
  args.kv = &kv;
  if (std::string why = SpAttention::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<SpAttention> op = construct<SpAttention>(env, args, "fuzz_sp_attention", &error);
  if (!op) return failure(error, 0);

  auto position = [&](uint32_t rank, uint32_t row) {
    return test::attention_ref::token_position(d.args.config.layout, w, spr, rank, row);
  };
  std::mt19937_64 rng = data_rng(seed);
  std::vector<std::vector<__nv_bfloat16>> q_host(w), kv_host(w);
  std::vector<float> o_ref, lse_ref;
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      // Call 1: Q in [-1, 1), a nearly flat softmax; call 2: Q in [-4, 4) (bf16 * 4 is exact), scores
      // spread over several units, so that the running max moves and the rescaling matters.
      for (uint32_t r = 0; r < w; ++r) {
        q_host[r] = test::random_bf16(q_elems, rng);
        if (call == 2) {
          for (auto& x : q_host[r]) x = __float2bfloat16(4.0f * __bfloat162float(x));
        }
        kv_host[r] = test::random_bf16(size_t(spr) * row_elems, rng);
      }
    }
    for (uint32_t r = 0; r < w; ++r) {
      char* g = kv.as<char>(int(r)) + d.args.kv_offset;
      fill(g, kNanByte, size_t(seq_len) * row_bytes);  // K/V rows not yet gathered are NaN
      test::upload(g + r * spr * row_bytes, kv_host[r].data(), size_t(spr) * row_bytes);
      upload_vector(q[r].get(), q_host[r]);
      test::poison(o[r].get(), q_elems * 2);
      test::poison(lse[r].get(), lse_elems * sizeof(float));
    }
    test::settle();
    op->run();
    world.synchronize();
    if (fresh_inputs(call)) {
      // Every query row of every rank, all heads, against the whole sequence in position order.
      std::vector<__nv_bfloat16> kv_seq(size_t(seq_len) * row_elems), q_tokens;
      std::vector<test::attention_ref::Query> queries;
      for (uint32_t r = 0; r < w; ++r) {
        for (uint32_t i = 0; i < spr; ++i) {
          std::copy_n(kv_host[r].begin() + size_t(i) * row_elems, row_elems,
                      kv_seq.begin() + size_t(position(r, i)) * row_elems);
          const uint32_t token = r * spr + i;
          q_tokens.insert(q_tokens.end(), q_host[r].begin() + size_t(i) * H * hd,
                          q_host[r].begin() + size_t(i + 1) * H * hd);
          for (uint32_t head = 0; head < H; ++head) queries.push_back({token, position(r, i), head});
        }
      }
      const AttentionShape shape{seq_len, H, d.args.kv_heads, hd, d.args.causal};
      test::attention_ref::reference_attention(world.device(0), shape, q_tokens, kv_seq, queries, o_ref, lse_ref);
    }
    double err2 = 0, ref2 = 0;
    for (uint32_t r = 0; r < w; ++r) {
      const std::string where = at_call(call) + ", rank " + std::to_string(r);
      const auto got_o = test::download<__nv_bfloat16>(o[r].get(), q_elems);
      const auto got_lse = test::download<float>(lse[r].get(), lse_elems);
      for (uint32_t i = 0; i < spr; ++i) {
        for (uint32_t head = 0; head < H; ++head) {
          const size_t qi = (size_t(r) * spr + i) * H + head;  // the reference's query index
          const std::string at = where + " row " + std::to_string(i) + " (position " + std::to_string(position(r, i)) +
                                 ") head " + std::to_string(head);
          const float l = got_lse[size_t(head) * spr + i];
          if (bits(l) == kPoisonF32 || !std::isfinite(l) || !(std::fabs(l - lse_ref[qi]) <= 1e-3 + 1e-3 * std::fabs(lse_ref[qi]))) {
            return failure(at + ": LSE " + std::to_string(l) + (bits(l) == kPoisonF32 ? " (poison: never written)" : "") +
                               ", reference " + std::to_string(lse_ref[qi]),
                           call);
          }
          for (uint32_t e = 0; e < hd; ++e) {
            const __nv_bfloat16 b = got_o[(size_t(i) * H + head) * hd + e];
            const double g = __bfloat162float(b), want = o_ref[qi * hd + e];
            err2 += (g - want) * (g - want);
            ref2 += want * want;
            if (bits(b) == kPoisonBf16 || !std::isfinite(g) || !(std::fabs(g - want) <= 2e-2 + 2e-2 * std::fabs(want))) {
              return failure(at + " O[" + std::to_string(e) + "]: " + std::to_string(g) +
                                 (bits(b) == kPoisonBf16 ? " (poison: never written)" : "") + ", reference " +
                                 std::to_string(want),
                             call);
            }
          }
        }
      }
    }
    const double rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    if (!(rms <= 1e-2)) {
      return failure(at_call(call) + ": relative RMS error of O " + std::to_string(rms) + ", expected <= 1e-2", call);
    }
  }
  return passed(h.repeat());
}

}  // namespace tilelink::fuzz
