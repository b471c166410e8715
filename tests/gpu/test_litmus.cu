// Message-passing litmus tests of the memory orders the primitives promise (DESIGN.md §1, §6):
// a producer writes a 4 KB tile whose contents depend on the trial, then signals; the consumer
// waits, reads the tile with ordinary loads and counts trials where any word is not this trial's;
// then it acks, and only then may the producer overwrite the tile. Epoch = base + trial, so no
// channel is ever reset. Zero failures over >= 100000 trials per transport.
//   - SM ld/st and SM bulk (TMA), push (tile_push_data + peer_tile_notify -> consumer_tile_wait)
//     and pull (producer_tile_notify -> peer_tile_wait + tile_pull_data): 32 independent pairs of
//     CTAs (rank 0 -> rank 1) x 3200 trials in one launch per rank.
//   - copy engine: kernel stores + producer_tile_notify -> rank_wait -> rank_copy_data ->
//     rank_notify -> consumer_tile_wait + loads, on 4 rank pairs in parallel.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/primitives/device.cuh"

namespace tilelink::test::litmus {

constexpr uint32_t kTileBytes = 4096;
constexpr uint32_t kTileWords = kTileBytes / 4;
constexpr uint32_t kThreads = 128;

// ---- SM transports -------------------------------------------------------------------------------

constexpr uint32_t kPairs = 32;
constexpr uint32_t kTrialsPerPair = 3200;  // 32 x 3200 = 102400 trials
constexpr int kProducerRank = 0;
constexpr int kConsumerRank = 1;

enum class Method { kPush, kPull };

// Channels of the slice: pair i signals data on channel i and acks on channel kPairs + i.
//   push: data channel in the consumer's memory, ack channel in the producer's.
//   pull: data channel in the producer's memory, ack channel in the producer's.
__host__ __device__ constexpr uint32_t data_channel(uint32_t pair) { return pair; }
__host__ __device__ constexpr uint32_t ack_channel(uint32_t pair) { return kPairs + pair; }

struct LitmusParams {
  SignalView sig;     // this rank's view; trial t uses a copy with epoch sig.epoch + t
  SymmetricView heap;
  char* data;         // symmetric, one tile per pair; the address in this rank's segment
  char* scratch;      // this rank's device memory, one tile per pair: push source / pull target
  uint64_t* failures;  // [kPairs] on the consumer: trials with at least one wrong word
  uint64_t* completed; // [kPairs] on the consumer: trials checked
  uint32_t trials;
  int peer;
};

__device__ void write_pattern(uint32_t* tile, uint32_t trial, uint32_t pair) {
  for (uint32_t w = threadIdx.x; w < kTileWords; w += blockDim.x) tile[w] = pattern_word(trial, pair, w);
}

// Every thread checks its words; returns (to all threads) whether any word of the tile is wrong.
__device__ bool tile_is_wrong(const uint32_t* tile, uint32_t trial, uint32_t pair) {
  int bad = 0;
  for (uint32_t w = threadIdx.x; w < kTileWords; w += blockDim.x) bad |= tile[w] != pattern_word(trial, pair, w);
  return __syncthreads_count(bad) != 0;
}

// This block's pair (one block per pair): its tile of the symmetric buffer, its scratch tile, and
// the bulk copies' shared-memory staging, set up (by thread 0) where `kStages` says this side
// issues bulk copies.
struct PairTiles {
  uint32_t pair;
  char* tile;
  char* scratch;
  TileShape shape;
  BulkStaging staging;
};

template <bool kStages>
__device__ PairTiles pair_tiles(const LitmusParams& p, char* smem) {
  const uint32_t pair = blockIdx.x;
  PairTiles t{pair, p.data + uint64_t(pair) * kTileBytes, p.scratch + uint64_t(pair) * kTileBytes,
              TileShape{1, kTileBytes}, BulkStaging{}};
  if constexpr (kStages) {
    if (threadIdx.x == 0) t.staging = BulkSmem::init(smem);
  }
  return t;
}

// The signals of trial t: epoch sig.epoch + t.
__device__ SignalView trial_signals(const LitmusParams& p, uint32_t t) {
  SignalView sig = p.sig;
  sig.epoch += t;
  return sig;
}

template <DataPath kPath, Method kMethod>
__global__ void litmus_producer_kernel(LitmusParams p) {
  extern __shared__ __align__(128) char smem[];
  auto [pair, tile, scratch, shape, staging] =
      pair_tiles<kPath == DataPath::kBulk && kMethod == Method::kPush>(p, smem);

  for (uint32_t t = 0; t < p.trials; ++t) {
    const SignalView sig = trial_signals(p, t);
    if constexpr (kMethod == Method::kPush) {
      write_pattern(reinterpret_cast<uint32_t*>(scratch), t, pair);
      if constexpr (kPath == DataPath::kBulk) {
        // Generic stores read next by the async proxy (the bulk copy): each writer fences.
        asm volatile("fence.proxy.async.global;" ::: "memory");
        __syncthreads();
        if (threadIdx.x == 0) {
          tile_push_data(staging, p.heap, TileRef{tile, kTileBytes}, p.peer, shape,
                         TileRef{scratch, kTileBytes});
          peer_tile_notify(sig, data_channel(pair), p.peer);
        }
      } else {
        __syncthreads();
        tile_push_data(Lanes{threadIdx.x, blockDim.x}, p.heap, TileRef{tile, kTileBytes}, p.peer,
                       shape, TileRef{scratch, kTileBytes});
        __syncthreads();
        if (threadIdx.x == 0) peer_tile_notify(sig, data_channel(pair), p.peer);
      }
    } else {
      write_pattern(reinterpret_cast<uint32_t*>(tile), t, pair);
      __syncthreads();
      if (threadIdx.x == 0) producer_tile_notify(sig, data_channel(pair));
    }
    // The consumer has read this trial's tile: only now may the next trial overwrite it.
    if (threadIdx.x == 0) consumer_tile_wait(sig, ack_channel(pair), 1, 1, static_cast<int32_t>(t));
    __syncthreads();
  }
}

template <DataPath kPath, Method kMethod>
__global__ void litmus_consumer_kernel(LitmusParams p) {
  extern __shared__ __align__(128) char smem[];
  auto [pair, tile, scratch, shape, staging] =
      pair_tiles<kPath == DataPath::kBulk && kMethod == Method::kPull>(p, smem);

  uint64_t failures = 0;
  for (uint32_t t = 0; t < p.trials; ++t) {
    const SignalView sig = trial_signals(p, t);
    const uint32_t* seen;
    if constexpr (kMethod == Method::kPush) {
      if (threadIdx.x == 0) consumer_tile_wait(sig, data_channel(pair), 1, 1, static_cast<int32_t>(t));
      __syncthreads();
      seen = reinterpret_cast<const uint32_t*>(tile);
    } else {
      if (threadIdx.x == 0) peer_tile_wait(sig, data_channel(pair), p.peer, 1, static_cast<int32_t>(t));
      __syncthreads();
      if constexpr (kPath == DataPath::kBulk) {
        if (threadIdx.x == 0) {
          tile_pull_data(staging, TileRef{scratch, kTileBytes}, p.heap, TileRef{tile, kTileBytes},
                         p.peer, shape);
        }
      } else {
        tile_pull_data(Lanes{threadIdx.x, blockDim.x}, TileRef{scratch, kTileBytes}, p.heap,
                       TileRef{tile, kTileBytes}, p.peer, shape);
      }
      __syncthreads();
      seen = reinterpret_cast<const uint32_t*>(scratch);
    }
    // Also the barrier that orders every thread's reads before the ack's release.
    const bool wrong = tile_is_wrong(seen, t, pair);
    if (threadIdx.x == 0) {
      failures += wrong ? 1 : 0;
      peer_tile_notify(sig, ack_channel(pair), p.peer);
    }
  }
  if (threadIdx.x == 0) {
    p.failures[pair] = failures;
    p.completed[pair] = p.trials;
  }
}

template <DataPath kPath, Method kMethod>
void launch_litmus(const LitmusParams& producer, const LitmusParams& consumer, const World& world) {
  const size_t smem = kPath == DataPath::kBulk ? BulkSmem::bytes() : 0;
  if (smem > 0) {
    TL_CUDA_CHECK(cudaFuncSetAttribute(litmus_producer_kernel<kPath, kMethod>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    TL_CUDA_CHECK(cudaFuncSetAttribute(litmus_consumer_kernel<kPath, kMethod>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  world.set_device(kConsumerRank);
  litmus_consumer_kernel<kPath, kMethod>
      <<<kPairs, kThreads, smem, world.compute_stream(kConsumerRank)>>>(consumer);
  TL_CHECK_LAUNCH();
  world.set_device(kProducerRank);
  litmus_producer_kernel<kPath, kMethod>
      <<<kPairs, kThreads, smem, world.compute_stream(kProducerRank)>>>(producer);
  TL_CHECK_LAUNCH();
}

class SmLitmusTest : public ::testing::TestWithParam<std::tuple<DataPath, Method>> {};

TEST_P(SmLitmusTest, DataBeforeFlagIsSeenAfterFlag) {
  TL_SKIP_WITHOUT_GPU();
  const auto [path, method] = GetParam();
  TestWorld env(2, 2 << 20, 2 * kPairs);
  const World& world = env.world;
  ASSERT_LE(int(kPairs), env.min_sm_budget()) << "every pair's two CTAs must be resident";

  SymmetricBuffer data = env.heap.allocate(kPairs * kTileBytes);
  SignalSlice slice = env.signals.allocate(2 * kPairs, "litmus_sm");
  const uint64_t base = slice.begin_call();
  DeviceBuffer scratch[2] = {DeviceBuffer(kPairs * kTileBytes, world.device(0)),
                             DeviceBuffer(kPairs * kTileBytes, world.device(1))};
  DeviceBuffer counters(2 * kPairs * sizeof(uint64_t), world.device(kConsumerRank));
  for (int r = 0; r < 2; ++r) {
    poison(data.data(r), kPairs * kTileBytes);
    poison(scratch[r].get(), kPairs * kTileBytes);
  }
  TL_CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  settle();

  LitmusParams params[2];
  for (int r = 0; r < 2; ++r) {
    params[r] = LitmusParams{slice.device_view(r), env.heap.device_view(r), data.as<char>(r),
                             scratch[r].get(), counters.get<uint64_t>(),
                             counters.get<uint64_t>() + kPairs, kTrialsPerPair, 1 - r};
    ASSERT_EQ(params[r].sig.epoch, base);
  }
  const LitmusParams& prod = params[kProducerRank];
  const LitmusParams& cons = params[kConsumerRank];
  if (path == DataPath::kLdSt) {
    if (method == Method::kPush) launch_litmus<DataPath::kLdSt, Method::kPush>(prod, cons, world);
    else launch_litmus<DataPath::kLdSt, Method::kPull>(prod, cons, world);
  } else {
    if (method == Method::kPush) launch_litmus<DataPath::kBulk, Method::kPush>(prod, cons, world);
    else launch_litmus<DataPath::kBulk, Method::kPull>(prod, cons, world);
  }
  world.synchronize();

  const std::vector<uint64_t> c = download<uint64_t>(counters.get(), 2 * kPairs);
  const uint64_t failures = std::accumulate(c.begin(), c.begin() + kPairs, uint64_t{0});
  const uint64_t trials = std::accumulate(c.begin() + kPairs, c.end(), uint64_t{0});
  RecordProperty("trials", std::to_string(trials));
  RecordProperty("failures", std::to_string(failures));
  EXPECT_EQ(trials, uint64_t(kPairs) * kTrialsPerPair);
  EXPECT_EQ(failures, 0u) << "trials where the consumer saw a word that was not this trial's";
}

std::string sm_litmus_name(const ::testing::TestParamInfo<SmLitmusTest::ParamType>& info) {
  const auto& [path, method] = info.param;
  return std::string(path == DataPath::kLdSt ? "ldst" : "bulk") +
         (method == Method::kPush ? "_push" : "_pull");
}

INSTANTIATE_TEST_SUITE_P(Litmus, SmLitmusTest,
                         ::testing::Combine(::testing::Values(DataPath::kLdSt, DataPath::kBulk),
                                            ::testing::Values(Method::kPush, Method::kPull)),
                         sm_litmus_name);

// ---- copy engine -----------------------------------------------------------------------------------

// Rank 2p produces for rank 2p + 1 (pair p). Channels: kernel -> stream in the producer's memory,
// stream -> consumer kernel in the consumer's memory, ack in the producer's memory.
constexpr int kCePairs = 4;
constexpr uint32_t kCeBatches = 10;
constexpr uint32_t kCeTrialsPerBatch = 2500;  // 4 pairs x 10 x 2500 = 100000 trials
constexpr uint32_t kKernelToStream = 0;
constexpr uint32_t kStreamToKernel = 1;
constexpr uint32_t kAck = 2;

// Trials [first, first + count) of one pair, producer side: store the pattern, notify the stream.
__global__ void ce_producer_kernel(SignalView sig, uint32_t* tile, uint32_t first, uint32_t count,
                                   uint32_t pair) {
  for (uint32_t t = first; t < first + count; ++t) {
    SignalView s = sig;
    s.epoch += t;
    write_pattern(tile, t, pair);
    __syncthreads();
    if (threadIdx.x == 0) {
      producer_tile_notify(s, kKernelToStream);
      consumer_tile_wait(s, kAck, 1, 1, static_cast<int32_t>(t));
    }
    __syncthreads();
  }
}

__global__ void ce_consumer_kernel(SignalView sig, const uint32_t* tile, uint32_t first, uint32_t count,
                                   uint32_t pair, int producer, uint64_t* failures) {
  uint64_t wrong_trials = 0;
  for (uint32_t t = first; t < first + count; ++t) {
    SignalView s = sig;
    s.epoch += t;
    if (threadIdx.x == 0) consumer_tile_wait(s, kStreamToKernel, 1, 1, static_cast<int32_t>(t));
    __syncthreads();
    const bool wrong = tile_is_wrong(tile, t, pair);
    if (threadIdx.x == 0) {
      wrong_trials += wrong ? 1 : 0;
      peer_tile_notify(s, kAck, producer);
    }
  }
  if (threadIdx.x == 0) *failures += wrong_trials;
}

TEST(CopyEngineLitmusTest, KernelStreamKernelMessagePassing) {
  TL_SKIP_WITHOUT_GPU();
  TestWorld env(2 * kCePairs, 1 << 20, 16);
  const World& world = env.world;
  SymmetricBuffer tiles = env.heap.allocate(kTileBytes);
  SignalSlice slice = env.signals.allocate(3, "litmus_copy_engine");
  const uint64_t base = slice.begin_call();
  DeviceBuffer failures(kCePairs * sizeof(uint64_t), world.device(0));
  for (int r = 0; r < world.size(); ++r) poison(tiles.data(r), kTileBytes);
  TL_CUDA_CHECK(cudaMemset(failures.get(), 0, failures.bytes()));
  settle();

  std::vector<SignalView> producer_views;
  for (int pair = 0; pair < kCePairs; ++pair) producer_views.push_back(slice.host_view(2 * pair));

  for (uint32_t batch = 0; batch < kCeBatches; ++batch) {
    const uint32_t first = batch * kCeTrialsPerBatch;
    // Kernels first: the stream work enqueued below waits on them.
    for (int pair = 0; pair < kCePairs; ++pair) {
      const int a = 2 * pair, b = 2 * pair + 1;
      world.set_device(a);
      ce_producer_kernel<<<1, 256, 0, world.compute_stream(a)>>>(
          slice.device_view(a), tiles.as<uint32_t>(a), first, kCeTrialsPerBatch, pair);
      TL_CHECK_LAUNCH();
      world.set_device(b);
      ce_consumer_kernel<<<1, 256, 0, world.compute_stream(b)>>>(
          slice.device_view(b), tiles.as<uint32_t>(b), first, kCeTrialsPerBatch, pair, a,
          failures.get<uint64_t>() + pair);
      TL_CHECK_LAUNCH();
    }
    // Interleaved over the pairs, so that every pair's stream makes progress while the host
    // enqueues.
    for (uint32_t t = first; t < first + kCeTrialsPerBatch; ++t) {
      for (int pair = 0; pair < kCePairs; ++pair) {
        const int a = 2 * pair, b = 2 * pair + 1;
        SignalView s = producer_views[pair];
        s.epoch = base + t;
        const cudaStream_t stream = world.comm_stream(a);
        rank_wait(stream, s, kKernelToStream);
        rank_copy_data(stream, tiles.data(b), tiles.data(a), kTileBytes);
        rank_notify(stream, s, kStreamToKernel, b);
      }
    }
    world.synchronize();
  }

  const std::vector<uint64_t> f = download<uint64_t>(failures.get(), kCePairs);
  const uint64_t total_failures = std::accumulate(f.begin(), f.end(), uint64_t{0});
  const uint64_t trials = uint64_t(kCePairs) * kCeBatches * kCeTrialsPerBatch;
  RecordProperty("trials", std::to_string(trials));
  RecordProperty("failures", std::to_string(total_failures));
  EXPECT_EQ(total_failures, 0u) << "trials where the consumer kernel saw a word that was not this trial's";
}

}  // namespace tilelink::test::litmus
