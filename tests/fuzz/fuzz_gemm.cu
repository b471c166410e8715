// The fuzzer's runners of the GEMM ops, against cuBLAS (tests/gpu/cublas_ref.hpp) and the host
// references (tests/gpu/host_ref.hpp):
//  - AgGemm: every rank's C against cuBLAS in fp32 on the whole A, within the bf16 output rounding;
//  - GemmRs: every owner's rows against the rank-order fp32 sum of cuBLAS's bf16 partials (with
//    the small-M engine, of every rank's K slices: its roundings), and bit-identical to the
//    previous call on the same inputs (the op promises it);
//  - Mlp: cuBLAS fc1 on all tokens, the activation on the host, cuBLAS fc2 partials, summed over
//    the ranks in order.
// Tolerances are the GPU suite's (test_ag_gemm.cu, test_gemm_rs.cu, test_mlp.cu), which give
// their reasons.
#include <string>
#include <vector>

#include "../gpu/host_ref.hpp"
#include "tilelink/ops/gemm_ar/gemm_ar.hpp"
#include "fuzz_harness.hpp"

namespace tilelink::fuzz {

Outcome run_draw(Harness& h, const AgGemmDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const uint32_t m = d.args.m_per_rank * static_cast<uint32_t>(d.world);
  const size_t a_bytes = size_t(m) * d.args.k * 2, shard_bytes = size_t(d.args.m_per_rank) * d.args.k * 2;
  SymmetricBuffer a = symmetric(env, d.args.a_offset + a_bytes);
  std::vector<DeviceBuffer> b, c;
  AgGemmArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.a = &a;
  ShardSources shards(env, d.from_source, shard_bytes);
  args.a_source = shards.pointers();
  for (int r = 0; r < d.world; ++r) {
    b.push_back(device_buffer(env, r, size_t(d.args.n) * d.args.k * 2));
    c.push_back(device_buffer(env, r, size_t(m) * d.args.n * 2));
    args.b.push_back(b.back().get());
    args.c.push_back(c.back().get());
  }
  if (std::string why = AgGemm::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<AgGemm> op = construct<AgGemm>(env, args, "fuzz_ag_gemm", &error);
  if (!op) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  DeviceBuffer a_full = device_buffer(env, 0, a_bytes), ref = device_buffer(env, 0, size_t(m) * d.args.n * sizeof(float));
  std::vector<__nv_bfloat16> a_host;
  std::vector<std::vector<float>> want(size_t(d.world));
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      a_host = test::random_bf16(size_t(m) * d.args.k, rng);
      for (int r = 0; r < d.world; ++r) upload_vector(b[r].get(), test::random_bf16(size_t(d.args.n) * d.args.k, rng));
    }
    for (int r = 0; r < d.world; ++r) {
      char* g = a.as<char>(r) + d.args.a_offset;
      fill(g, kNanByte, a_bytes);  // peers' rows NaN until gathered
      shards.put(r, g + r * shard_bytes, reinterpret_cast<const char*>(a_host.data()) + r * shard_bytes, shard_bytes);
      test::poison(c[r].get(), size_t(m) * d.args.n * 2);
    }
    test::settle();
    op->run();
    world.synchronize();
    if (fresh_inputs(call)) {
      upload_vector(a_full.get(), a_host);
      for (int r = 0; r < d.world; ++r) {
        test::cublas_reference(h.cublas().get(), a_full.get(), b[r].get(), ref.get<float>(), m, d.args.n, d.args.k);
        test::settle();
        want[r] = test::download<float>(ref.get(), size_t(m) * d.args.n);
      }
    }
    for (int r = 0; r < d.world; ++r) {
      const auto got = test::download<__nv_bfloat16>(c[r].get(), size_t(m) * d.args.n);
      // bf16 output rounding (2^-8 relative) plus fp32 accumulation-order noise.
      if (std::string e = compare_bf16(got, want[r], nullptr, 8e-3f, 1e-2f, d.args.n,
                                       at_call(call) + ", rank " + std::to_string(r) + ", C against cuBLAS");
          !e.empty()) {
        return failure(e, call);
      }
    }
  }
  return passed(h.repeat());
}

namespace {

// Every rank's partial a[r] * b[r]^T (rows x n) by cuBLAS with bf16 output, as floats.
std::vector<std::vector<float>> cublas_partials(Harness& h, const test::TestWorld& env, const std::vector<const void*>& a,
                                                const std::vector<const void*>& b, uint32_t rows, uint32_t n,
                                                uint32_t k) {
  DeviceBuffer part = device_buffer(env, 0, size_t(rows) * n * 2);
  std::vector<std::vector<float>> partials;
  for (size_t r = 0; r < a.size(); ++r) {
    test::cublas_reference_bf16(h.cublas().get(), a[r], b[r], part.get(), rows, n, k);
    partials.push_back(to_float(test::download<__nv_bfloat16>(part.get(), size_t(rows) * n)));
  }
  return partials;
}

// The terms a GEMM+RS sums, by cuBLAS: each rank's partial, or where its small-M engine runs each
// rank's K slices (the op rounds each to bf16), as separate terms of the reference's sum and
// magnitude.
std::vector<std::vector<float>> gemm_rs_terms(Harness& h, const test::TestWorld& env, const GemmRs& op,
                                              const std::vector<const void*>& a, const std::vector<const void*>& b,
                                              uint32_t rows, uint32_t n, uint32_t k) {
  if (op.small_m() == nullptr) return cublas_partials(h, env, a, b, rows, n, k);
  const uint32_t splits = op.small_m()->splits(), ks = k / splits;
  DeviceBuffer slice = device_buffer(env, 0, size_t(rows) * n * 4);
  std::vector<std::vector<float>> terms;
  for (size_t r = 0; r < a.size(); ++r) {
    for (uint32_t s = 0; s < splits; ++s) {
      test::cublas_slice(h.cublas().get(), a[r], b[r], slice.get<float>(), rows, n, k, s * ks, ks);
      terms.push_back(test::download<float>(slice.get(), size_t(rows) * n));
    }
  }
  return terms;
}

}  // namespace

Outcome run_draw(Harness& h, const GemmRsDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  // Any M: owner q gets GemmRs::rows_of rows from q * pitch (pitch = ceil(M / P)); out has room
  // for a whole pitch, and the rows past the owner's must keep their poison.
  const uint32_t w = static_cast<uint32_t>(d.world);
  const size_t pitch = d.args.m == 0 ? 0 : GemmRs::buffer_rows(d.args.m, d.world) / w;
  const size_t partial_bytes = std::max<size_t>(pitch * w, 1) * d.args.n * 2, block = std::max<size_t>(pitch, 1) * d.args.n;
  SymmetricBuffer partial = symmetric(env, partial_bytes);
  SymmetricBuffer recv;
  std::vector<DeviceBuffer> a, b, out;
  GemmRsArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.partial = &partial;
  if (d.with_recv) {
    recv = symmetric(env, partial_bytes);
    args.recv = &recv;
  }
  for (int r = 0; r < d.world; ++r) {
    a.push_back(device_buffer(env, r, size_t(d.args.m) * d.args.k * 2));
    b.push_back(device_buffer(env, r, size_t(d.args.n) * d.args.k * 2));
    out.push_back(device_buffer(env, r, block * 2));
    args.a.push_back(a.back().get());
    args.b.push_back(b.back().get());
    args.out.push_back(out.back().get());
  }
  if (std::string why = GemmRs::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<GemmRs> op = construct<GemmRs>(env, args, "fuzz_gemm_rs", &error);
  if (!op) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  std::vector<std::vector<float>> want(size_t(d.world)), magnitude(size_t(d.world));
  std::vector<std::vector<__nv_bfloat16>> previous(size_t(d.world));
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      for (int r = 0; r < d.world; ++r) {
        upload_vector(a[r].get(), test::random_bf16(size_t(d.args.m) * d.args.k, rng));
        upload_vector(b[r].get(), test::random_bf16(size_t(d.args.n) * d.args.k, rng));
      }
    }
    for (int r = 0; r < d.world; ++r) {
      test::poison(out[r].get(), block * 2);
      fill(partial.data(r), kNanByte, partial_bytes);  // stale partials read as NaN
      if (d.with_recv) fill(recv.data(r), kNanByte, partial_bytes);
    }
    test::settle();
    op->run();
    world.synchronize();
    if (fresh_inputs(call)) {
      const auto partials = gemm_rs_terms(h, env, *op, args.a, args.b, d.args.m, d.args.n, d.args.k);
      for (int q = 0; q < d.world; ++q) {
        want[q] = test::reduce_scatter_range(partials, size_t(q) * pitch * d.args.n,
                                             size_t(GemmRs::rows_of(d.args.m, d.world, q)) * d.args.n, &magnitude[q]);
      }
    }
    for (int q = 0; q < d.world; ++q) {
      const auto whole = test::download<__nv_bfloat16>(out[q].get(), block);
      const std::vector<__nv_bfloat16> got(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(want[q].size()));
      const std::string where = at_call(call) + ", owner " + std::to_string(q);
      if (std::string e = check_poisoned(whole, want[q].size(), where + " past its rows"); !e.empty()) return failure(e, call);
      // Fresh inputs: the reference (each partial may differ from cuBLAS's by a bf16 rounding, the
      // sum by one more); the same inputs again: the previous call's bits.
      std::string e = fresh_inputs(call) ? compare_bf16(got, want[q], &magnitude[q], 2e-2f, 1e-2f, d.args.n, where)
                                         : compare_bits(got, previous[q], where);
      if (!e.empty()) return failure(e, call);
      previous[q] = got;
    }
  }
  return passed(h.repeat());
}

Outcome run_draw(Harness& h, const MlpDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const uint32_t w = static_cast<uint32_t>(d.world), rows = d.args.m / w, i_local = d.args.intermediate / w;
  const bool swiglu = d.args.config.activation == MlpActivation::kSwiGlu;
  const uint32_t fc1_cols = swiglu ? 2 * i_local : i_local;
  const size_t x_bytes = size_t(d.args.m) * d.args.hidden * 2, shard_bytes = size_t(rows) * d.args.hidden * 2;
  const size_t block = size_t(rows) * d.args.hidden;
  SymmetricBuffer x = symmetric(env, x_bytes), partial = symmetric(env, x_bytes), recv;
  std::vector<DeviceBuffer> w1, w2, out;
  MlpArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.x = &x;
  ShardSources shards(env, d.from_source, shard_bytes);
  args.x_source = shards.pointers();
  args.partial = &partial;
  if (d.with_recv) {
    recv = symmetric(env, x_bytes);
    args.recv = &recv;
  }
  for (int r = 0; r < d.world; ++r) {
    w1.push_back(device_buffer(env, r, size_t(fc1_cols) * d.args.hidden * 2));
    w2.push_back(device_buffer(env, r, size_t(d.args.hidden) * i_local * 2));
    out.push_back(device_buffer(env, r, block * 2));
    args.w1.push_back(w1.back().get());
    args.w2.push_back(w2.back().get());
    args.out.push_back(out.back().get());
  }
  if (std::string why = Mlp::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<Mlp> op = construct<Mlp>(env, args, "fuzz_mlp", &error);
  if (!op) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  DeviceBuffer x_full = device_buffer(env, 0, x_bytes), y_ref = device_buffer(env, 0, size_t(d.args.m) * fc1_cols * 2);
  std::vector<__nv_bfloat16> x_host;
  std::vector<std::vector<float>> want(size_t(d.world)), magnitude(size_t(d.world));
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      x_host = test::random_bf16(size_t(d.args.m) * d.args.hidden, rng);
      for (int r = 0; r < d.world; ++r) {
        upload_vector(w1[r].get(), test::random_bf16(size_t(fc1_cols) * d.args.hidden, rng));
        upload_vector(w2[r].get(), test::random_bf16(size_t(d.args.hidden) * i_local, rng));
      }
    }
    for (int r = 0; r < d.world; ++r) {
      char* g = x.as<char>(r);
      fill(g, kNanByte, x_bytes);  // peers' rows NaN until gathered
      shards.put(r, g + r * shard_bytes, reinterpret_cast<const char*>(x_host.data()) + r * shard_bytes, shard_bytes);
      test::poison(out[r].get(), block * 2);
    }
    test::settle();
    op->run();
    world.synchronize();
    if (fresh_inputs(call)) {
      // The independent chain: cuBLAS fc1 on all tokens, the activation on the host, cuBLAS fc2.
      upload_vector(x_full.get(), x_host);
      std::vector<const void*> hs, w2s;
      std::vector<DeviceBuffer> h_all;
      for (int r = 0; r < d.world; ++r) {
        test::cublas_reference_bf16(h.cublas().get(), x_full.get(), w1[r].get(), y_ref.get(), d.args.m, fc1_cols, d.args.hidden);
        const auto y = to_float(test::download<__nv_bfloat16>(y_ref.get(), size_t(d.args.m) * fc1_cols));
        std::vector<__nv_bfloat16> act(size_t(d.args.m) * i_local);
        for (size_t row = 0; row < d.args.m; ++row) {
          for (size_t col = 0; col < i_local; ++col) {
            const float g = y[row * fc1_cols + col], u = swiglu ? y[row * fc1_cols + i_local + col] : 0.f;
            act[row * i_local + col] = __float2bfloat16(test::host_activation(d.args.config.activation, g, u));
          }
        }
        h_all.push_back(device_buffer(env, 0, act.size() * 2));
        upload_vector(h_all.back().get(), act);
        hs.push_back(h_all.back().get());
        w2s.push_back(w2[r].get());
      }
      const auto partials = gemm_rs_terms(h, env, op->fc2(), hs, w2s, d.args.m, d.args.hidden, i_local);
      for (int q = 0; q < d.world; ++q) want[q] = test::reduce_scatter_reference(partials, size_t(q), block, &magnitude[q]);
    }
    for (int q = 0; q < d.world; ++q) {
      const auto got = test::download<__nv_bfloat16>(out[q].get(), block);
      // bf16 roundings of fc1's output (through the activation and fc2), of each partial, of the sum.
      if (std::string e = compare_bf16(got, want[q], &magnitude[q], 2e-2f, 2e-2f, d.args.hidden,
                                       at_call(call) + ", owner " + std::to_string(q));
          !e.empty()) {
        return failure(e, call);
      }
    }
  }
  return passed(h.repeat());
}

}  // namespace tilelink::fuzz
