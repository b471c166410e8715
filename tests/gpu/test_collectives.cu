// The standalone collectives on virtual ranks (world 1, 2, 4, 8), against host references:
//  - AllGather, every configuration can_implement accepts, four calls with fresh data, checked
//    in `gathered` and (calls 2..4) through a consumer kernel whose tiles (BM rows != comm_rows)
//    wait with all_gather_wait_rows before reading;
//  - ReduceScatter push/pull x ld/st/bulk, bitwise equal to a float sum in rank order 0..P-1, and
//    bitwise repeatable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "host_ref.hpp"
#include "tilelink/comm/device_ctx.cuh"

namespace tilelink::test::collectives {

struct AgCombo {
  CommResource resource;
  AgMethod method;
  DataPath path;
  CommOrder order;
};

std::vector<AgCombo> all_ag_combos() {
  std::vector<AgCombo> combos;
  for (CommResource resource : {CommResource::kSm, CommResource::kCopyEngine}) {
    for (AgMethod method : {AgMethod::kPull, AgMethod::kPush}) {
      for (DataPath path : {DataPath::kLdSt, DataPath::kBulk}) {
        for (CommOrder order : {CommOrder::kFullMesh, CommOrder::kRing}) {
          combos.push_back({resource, method, path, order});
        }
      }
    }
  }
  return combos;
}

// The copy engine moves whole tiles over a full mesh, pulled by the receiver (cudaMemcpyAsync) or
// pushed by the owner with the receiver's channel set behind them (rank_put_signal); a ring with
// the copy engine is refused by can_implement (AllGatherSupportTest).
bool copy_engine_supports(const AgCombo& c) { return c.order == CommOrder::kFullMesh; }

std::vector<AgCombo> runnable_ag_combos() {
  std::vector<AgCombo> combos;
  for (const AgCombo& c : all_ag_combos()) {
    if (c.resource == CommResource::kSm || copy_engine_supports(c)) combos.push_back(c);
  }
  return combos;
}

std::string combo_name(const AgCombo& c) {
  return std::string(c.resource == CommResource::kSm ? "sm" : "ce") +
         (c.method == AgMethod::kPull ? "_pull" : "_push") +
         (c.path == DataPath::kLdSt ? "_ldst" : "_bulk") +
         (c.order == CommOrder::kFullMesh ? "_mesh" : "_ring");
}

// Shape shared by the all-gather tests: 300 rows per rank is not a multiple of the 64-row
// communication tile (the last tile of each shard has 44 rows), and the consumer's 48-row tiles
// straddle communication tiles and shard boundaries.
constexpr uint32_t kAgRowsPerRank = 300;
constexpr uint32_t kAgCommRows = 64;
constexpr uint32_t kAgRowBytes = 1040;
constexpr uint32_t kAgConsumerRows = 48;

AllGatherArguments ag_arguments(const SymmetricBuffer& gathered, const AgCombo& c, uint32_t num_blocks) {
  AllGatherArguments args;
  args.gathered = &gathered;
  args.rows_per_rank = kAgRowsPerRank;
  args.row_bytes = kAgRowBytes;
  args.config.resource = c.resource;
  args.config.method = c.method;
  args.config.path = c.path;
  args.config.order = c.order;
  args.config.comm_rows = kAgCommRows;
  args.config.num_blocks = num_blocks;
  return args;
}

// A compute kernel's use of the gathered tensor: tile t covers rows [t * bm, (t + 1) * bm), waits
// for exactly the communication tiles under it, then reads the rows (copied to `out`).
__global__ void ag_consumer_kernel(AllGatherPlan plan, SignalView sig, const char* gathered, char* out,
                                   uint32_t bm, int rank, int world) {
  DeviceBlockCtx<false> ctx{rank, world, nullptr};
  const uint32_t total = plan.map.total_rows();
  const uint32_t tiles = (total + bm - 1) / bm;
  for (uint32_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const uint32_t row0 = t * bm;
    const uint32_t rows = min(bm, total - row0);
    all_gather_wait_rows(ctx, plan, sig, row0, rows, static_cast<int32_t>(t));
    for (uint32_t r = 0; r < rows; ++r) {
      block_copy16(out + uint64_t(row0 + r) * plan.row_bytes,
                   gathered + uint64_t(row0 + r) * plan.pitch, plan.row_bytes);
    }
  }
}

class AllGatherTest : public ::testing::TestWithParam<std::tuple<int, AgCombo>> {};

TEST_P(AllGatherTest, GathersFreshDataEveryCall) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = std::get<0>(GetParam());
  const AgCombo combo = std::get<1>(GetParam());
  // Call 1 runs without a consumer and must already be right. A protocol that loses tiles would
  // otherwise leave the consumer's bounded wait to trap, which poisons the CUDA context for every
  // later test of the process. Calls 2..4 (fresh data each) add the consumer.
  constexpr uint32_t kCalls = 4;
  const size_t shard_bytes = size_t(kAgRowsPerRank) * kAgRowBytes;
  const size_t total_bytes = shard_bytes * world_size;

  TestWorld env(world_size, total_bytes + (2 << 20), 1024);
  const World& world = env.world;
  // Half of each rank's SMs for the all-gather, the rest for the consumer kernel, so that both
  // (all ranks) are resident at once: the consumer spins on the all-gather's signals.
  const int budget = env.min_sm_budget();
  const uint32_t comm_blocks = static_cast<uint32_t>(std::max(1, budget / 2));
  SymmetricBuffer gathered = env.heap.allocate(total_bytes);
  const AllGatherArguments args = ag_arguments(gathered, combo, comm_blocks);
  ASSERT_EQ(AllGather::can_implement(world, env.heap, args), "");

  AllGather ag(world, env.heap, env.signals, args, "ag_test");
  const AllGatherPlan& plan = ag.plan();
  ASSERT_EQ(plan.pitch, kAgRowBytes);
  ASSERT_LE(ag.num_blocks(), comm_blocks);
  const uint32_t consumer_tiles = (kAgRowsPerRank * world_size + kAgConsumerRows - 1) / kAgConsumerRows;
  const uint32_t consumer_blocks =
      std::min<uint32_t>(consumer_tiles, static_cast<uint32_t>(budget) - ag.num_blocks());
  ASSERT_GE(consumer_blocks, 1u);

  std::vector<DeviceBuffer> out;
  for (int r = 0; r < world_size; ++r) out.emplace_back(total_bytes, world.device(r));

  for (uint32_t call = 1; call <= kCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<uint8_t> want(total_bytes);
    for (int r = 0; r < world_size; ++r) {
      const std::vector<uint8_t> shard = random_bytes(shard_bytes, seed_of(10, r, call));
      std::memcpy(want.data() + r * shard_bytes, shard.data(), shard_bytes);
    }
    for (int r = 0; r < world_size; ++r) {
      poison(gathered.data(r), total_bytes);
      upload(gathered.as<char>(r) + r * shard_bytes, want.data() + r * shard_bytes, shard_bytes);
      poison(out[r].get(), total_bytes);
    }
    settle();

    const bool with_consumer = call > 1;
    const uint64_t epoch = ag.run();
    ASSERT_EQ(epoch, call);
    for (int r = 0; r < world_size && with_consumer; ++r) {
      const SignalView sig = ag.signals().device_view(r);
      ASSERT_EQ(sig.epoch, epoch);
      world.set_device(r);
      ag_consumer_kernel<<<consumer_blocks, 256, 0, world.compute_stream(r)>>>(
          plan, sig, gathered.as<char>(r), out[r].get(), kAgConsumerRows, r, world_size);
      TL_CHECK_LAUNCH();
    }
    world.synchronize();

    for (int r = 0; r < world_size; ++r) {
      EXPECT_TRUE(bytes_equal(download<uint8_t>(gathered.data(r), total_bytes), want))
          << "gathered on rank " << r;
      if (with_consumer) {
        EXPECT_TRUE(bytes_equal(download<uint8_t>(out[r].get(), total_bytes), want))
            << "consumer of rank " << r;
      }
    }
    ASSERT_FALSE(HasFailure()) << "stopping before a consumer waits on a broken protocol";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, AllGatherTest,
    ::testing::Combine(::testing::ValuesIn(kWorldSizes), ::testing::ValuesIn(runnable_ag_combos())),
    [](const ::testing::TestParamInfo<AllGatherTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + combo_name(std::get<1>(info.param));
    });

class AllGatherSupportTest : public ::testing::TestWithParam<int> {};

// Every SM configuration and the copy-engine full mesh, pull or push (whatever the data path: the
// copy engine moves whole tiles) are accepted; a copy-engine ring is refused with a reason that
// names the field.
TEST_P(AllGatherSupportTest, AcceptsExactlyTheSupportedConfigurations) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = GetParam();
  TestWorld env(world_size, size_t(kAgRowsPerRank) * kAgRowBytes * world_size + (2 << 20), 1024);
  SymmetricBuffer gathered = env.heap.allocate(size_t(kAgRowsPerRank) * kAgRowBytes * world_size);
  for (const AgCombo& c : all_ag_combos()) {
    const std::string refused = AllGather::can_implement(env.world, env.heap, ag_arguments(gathered, c, 0));
    if (c.resource == CommResource::kSm || copy_engine_supports(c)) {
      EXPECT_EQ(refused, "") << combo_name(c);
    } else {
      EXPECT_NE(refused.find("config."), std::string::npos) << combo_name(c) << ": '" << refused << "'";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Collectives, AllGatherSupportTest, ::testing::ValuesIn(kWorldSizes), world_name);

// ---- reduce-scatter -----------------------------------------------------------------------------

// 200 rows per rank: three 64-row chunks and one of 8.
constexpr uint32_t kRsRowsPerRank = 200;
constexpr uint32_t kRsCommRows = 64;
constexpr uint32_t kRsCols = 96;

class ReduceScatterTest : public ::testing::TestWithParam<std::tuple<int, RsMethod, DataPath>> {};

TEST_P(ReduceScatterTest, SumsInRankOrderBitwise) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, method, path] = GetParam();
  constexpr uint32_t kFreshCalls = 3;
  constexpr uint32_t kRepeatCalls = 2;  // same inputs as the last fresh call
  const size_t out_elems = size_t(kRsRowsPerRank) * kRsCols;
  const size_t partial_elems = out_elems * world_size;

  TestWorld env(world_size, 2 * partial_elems * sizeof(float) + (2 << 20), 1024);
  const World& world = env.world;
  SymmetricBuffer partial = env.heap.allocate(partial_elems * sizeof(float));
  std::vector<DeviceBuffer> out;
  ReduceScatterArguments args;
  args.partial = &partial;
  for (int r = 0; r < world_size; ++r) {
    out.emplace_back(out_elems * sizeof(float), world.device(r));
    args.out.push_back(out[r].get<float>());
  }
  args.rows_per_rank = kRsRowsPerRank;
  args.cols = kRsCols;
  args.config.method = method;
  args.config.path = path;
  args.config.comm_rows = kRsCommRows;
  ASSERT_EQ(ReduceScatter::can_implement(world, env.heap, args), "");
  ReduceScatter rs(world, env.heap, env.signals, args, "rs_test");

  std::vector<std::vector<float>> inputs(world_size), previous;
  for (uint32_t call = 1; call <= kFreshCalls + kRepeatCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    if (call <= kFreshCalls) {
      for (int r = 0; r < world_size; ++r) inputs[r] = random_floats(partial_elems, seed_of(20, r, call));
    }
    for (int r = 0; r < world_size; ++r) {
      upload(partial.data(r), inputs[r].data(), partial_elems * sizeof(float));
      poison(out[r].get(), out_elems * sizeof(float));
    }
    settle();

    ASSERT_EQ(rs.run(), call);
    world.synchronize();

    std::vector<std::vector<float>> results(world_size);
    for (int r = 0; r < world_size; ++r) {
      // Reference: rows of rank r's shard, summed over ranks 0, 1, ..., P-1 in float.
      const std::vector<float> want = reduce_scatter_reference(inputs, size_t(r), out_elems);
      results[r] = download<float>(out[r].get(), out_elems);
      std::vector<uint8_t> got_bytes(out_elems * sizeof(float)), want_bytes(out_elems * sizeof(float));
      std::memcpy(got_bytes.data(), results[r].data(), got_bytes.size());
      std::memcpy(want_bytes.data(), want.data(), want_bytes.size());
      EXPECT_TRUE(bytes_equal(got_bytes, want_bytes)) << "rank " << r;
      if (call > kFreshCalls) {
        EXPECT_EQ(std::memcmp(results[r].data(), previous[r].data(), out_elems * sizeof(float)), 0)
            << "rank " << r << ": same inputs, different bits";
      }
    }
    previous = std::move(results);
  }
}

std::string rs_case_name(const ::testing::TestParamInfo<ReduceScatterTest::ParamType>& info) {
  const auto& [world_size, method, path] = info.param;
  return "world" + std::to_string(world_size) + (method == RsMethod::kPush ? "_push" : "_pull") +
         (path == DataPath::kLdSt ? "_ldst" : "_bulk");
}

INSTANTIATE_TEST_SUITE_P(
    Collectives, ReduceScatterTest,
    ::testing::Combine(::testing::ValuesIn(kWorldSizes), ::testing::Values(RsMethod::kPush, RsMethod::kPull),
                       ::testing::Values(DataPath::kLdSt, DataPath::kBulk)),
    rs_case_name);

}  // namespace tilelink::test::collectives
