// The fuzzer's runners of the standalone collectives: AllGather (byte-exact against the shards,
// and nothing written past the tensor) and ReduceScatter (bitwise equal to the rank-order float
// sum, tests/gpu/host_ref.hpp).
#include <string>
#include <vector>

#include "../gpu/host_ref.hpp"
#include "fuzz_harness.hpp"

namespace tilelink::fuzz {

Outcome run_draw(Harness& h, const AllGatherDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const size_t shard = size_t(d.args.rows_per_rank) * d.args.row_bytes, total = shard * size_t(d.world);
  constexpr size_t kGuard = 256;  // bytes past the tensor: poisoned, and must stay so
  SymmetricBuffer gathered = symmetric(env, d.args.gathered_offset + total + kGuard);
  AllGatherArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.gathered = &gathered;
  if (std::string why = AllGather::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<AllGather> op = construct<AllGather>(env, args, "fuzz_all_gather", &error);
  if (!op) return failure(error, 0);

  std::mt19937_64 rng = data_rng(seed);
  std::vector<uint8_t> want(total + kGuard, test::kPoison);
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      for (size_t i = 0; i < total; ++i) want[i] = static_cast<uint8_t>(rng());
    }
    for (int r = 0; r < d.world; ++r) {
      char* g = gathered.as<char>(r) + d.args.gathered_offset;
      test::poison(g, total + kGuard);
      test::upload(g + r * shard, want.data() + r * shard, shard);
    }
    test::settle();
    op->run();
    world.synchronize();
    for (int r = 0; r < d.world; ++r) {
      const auto got = test::download<uint8_t>(gathered.as<char>(r) + d.args.gathered_offset, total + kGuard);
      if (const ::testing::AssertionResult same = test::bytes_equal(got, want); !same) {
        return failure(at_call(call) + ", rank " + std::to_string(r) + " (" + std::to_string(total) +
                           " bytes gathered, then " + std::to_string(kGuard) + " guard bytes): " + same.message(),
                       call);
      }
    }
  }
  return passed(h.repeat());
}

Outcome run_draw(Harness& h, const ReduceScatterDraw& d, uint64_t seed) {
  test::TestWorld& env = h.world(d.world);
  const World& world = env.world;
  const size_t block = size_t(d.args.rows_per_rank) * d.args.cols, partial_elems = block * size_t(d.world);
  SymmetricBuffer partial = symmetric(env, partial_elems * sizeof(float));
  std::vector<DeviceBuffer> out;
  ReduceScatterArguments args = d.args;  // the drawn sizes, offsets and configuration
  args.partial = &partial;
  for (int r = 0; r < d.world; ++r) {
    out.push_back(device_buffer(env, r, block * sizeof(float)));
    args.out.push_back(out.back().get<float>());
  }
  if (std::string why = ReduceScatter::can_implement(world, env.heap, args); !why.empty()) return refusal(why);
  std::string error;
  const std::unique_ptr<ReduceScatter> op = construct<ReduceScatter>(env, args, "fuzz_reduce_scatter", &error);
  if (!op) return failure(error, 0);

  // Floats of varied magnitude and sign (test::random_floats): a sum in another order rounds
  // differently, so the bitwise comparison sees the order too.
  std::vector<std::vector<float>> inputs(size_t(d.world));
  for (int call = 1; call <= h.repeat(); ++call) {
    if (fresh_inputs(call)) {
      for (int r = 0; r < d.world; ++r) inputs[r] = test::random_floats(partial_elems, mix64(seed + 977 * call + r));
    }
    for (int r = 0; r < d.world; ++r) {
      upload_vector(partial.data(r), inputs[r]);
      test::poison(out[r].get(), block * sizeof(float));
    }
    test::settle();
    op->run();
    world.synchronize();
    for (int r = 0; r < d.world; ++r) {
      const std::vector<float> want = test::reduce_scatter_reference(inputs, size_t(r), block);
      const auto got = test::download<float>(out[r].get(), block);
      std::vector<uint8_t> got_bytes(block * sizeof(float)), want_bytes(block * sizeof(float));
      if (block > 0) {
        std::memcpy(got_bytes.data(), got.data(), got_bytes.size());
        std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
      }
      if (const ::testing::AssertionResult same = test::bytes_equal(got_bytes, want_bytes); !same) {
        return failure(at_call(call) + ", owner " + std::to_string(r) +
                           ": not the rank-order float sum bit for bit: " + same.message(),
                       call);
      }
    }
  }
  return passed(h.repeat());
}

}  // namespace tilelink::fuzz
