// The nine primitives on virtual ranks (world 1, 2, 4, 8):
//  - signal pairs (producer/peer notify -> consumer/peer wait, set and add modes) carry data
//    written before the notify to readers after the wait, over consecutive calls (epochs 1..3)
//    without any reset;
//  - tile_push_data / tile_pull_data, ld/st and bulk (TMA), pitched and contiguous tiles, move
//    exactly the tile's bytes and nothing else;
//  - the host primitives pair with kernels both ways (copy + rank_notify -> consumer_tile_wait,
//    producer/peer notify -> rank_wait -> copy).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/primitives/device.cuh"

// Everything lives in a named namespace of its own (not an anonymous one: nvcc warns about the
// registration statics of tests declared there).
namespace tilelink::test::primitives {

// ---- signals: data written before a notify is read after the matching wait --------------------

enum class SignalPattern {
  kLocal,  // producer_tile_notify -> consumer_tile_wait, same rank
  kPush,   // rank r writes into rank r+1, peer_tile_notify -> consumer_tile_wait on r+1
  kPull,   // rank r writes locally, producer_tile_notify -> peer_tile_wait on r+1, which reads r
};

struct SignalCase {
  const char* name;
  SignalPattern pattern;
  NotifyMode mode;
  uint32_t parts;  // producer blocks per tile, each notifying once: the waiters' `arrivals`
};

const SignalCase kSignalCases[] = {
    {"local_set", SignalPattern::kLocal, NotifyMode::kSet, 1},
    {"local_add", SignalPattern::kLocal, NotifyMode::kAdd, 3},
    {"push_set", SignalPattern::kPush, NotifyMode::kSet, 1},
    {"push_add", SignalPattern::kPush, NotifyMode::kAdd, 3},
    {"pull_set", SignalPattern::kPull, NotifyMode::kSet, 1},
    {"pull_add", SignalPattern::kPull, NotifyMode::kAdd, 3},
};

struct SignalParams {
  SignalView sig;
  SymmetricView heap;
  const char* src;  // this rank's tiles (device memory): tiles * parts * part_bytes
  char* box;        // symmetric, same size; the address in this rank's segment
  char* out;        // what the consumers read, same size
  uint32_t tiles;
  uint32_t parts;
  uint32_t part_bytes;
  SignalPattern pattern;
  NotifyMode mode;
  int rank;
  int world;
};

// Blocks [0, tiles * parts) produce part (b % parts) of tile (b / parts); blocks
// [tiles * parts, tiles * parts + tiles) consume one tile each. All blocks are resident at once.
__global__ void signal_pair_kernel(SignalParams p) {
  const int next = (p.rank + 1) % p.world;
  const int prev = (p.rank + p.world - 1) % p.world;
  const uint64_t tile_bytes = uint64_t(p.parts) * p.part_bytes;
  const uint32_t producers = p.tiles * p.parts;

  if (blockIdx.x < producers) {
    const uint32_t tile = blockIdx.x / p.parts;
    const uint64_t offset = tile * tile_bytes + uint64_t(blockIdx.x % p.parts) * p.part_bytes;
    char* box = p.pattern == SignalPattern::kPush ? p.heap.translate(p.box, next) : p.box;
    block_copy16(box + offset, p.src + offset, p.part_bytes);
    __syncthreads();
    if (threadIdx.x == 0) {
      if (p.pattern == SignalPattern::kPush) {
        peer_tile_notify(p.sig, tile, next, p.mode);
      } else {
        producer_tile_notify(p.sig, tile, p.mode);
      }
    }
    return;
  }

  const uint32_t tile = blockIdx.x - producers;
  if (threadIdx.x == 0) {
    if (p.pattern == SignalPattern::kPull) {
      peer_tile_wait(p.sig, tile, prev, p.parts, static_cast<int32_t>(tile));
    } else {
      // Channels [0, tile] at once: exercises count > 1.
      consumer_tile_wait(p.sig, 0, tile + 1, p.parts, static_cast<int32_t>(tile));
    }
  }
  __syncthreads();
  const char* box = p.pattern == SignalPattern::kPull ? p.heap.translate(p.box, prev) : p.box;
  block_copy16(p.out + tile * tile_bytes, box + tile * tile_bytes, tile_bytes);
}

class SignalTest : public ::testing::TestWithParam<std::tuple<int, SignalCase>> {};

TEST_P(SignalTest, DataWrittenBeforeNotifyIsReadAfterWait) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = std::get<0>(GetParam());
  const SignalCase c = std::get<1>(GetParam());
  constexpr uint32_t kTiles = 3;
  constexpr uint32_t kCalls = 3;
  const uint32_t part_bytes = (24 * 1024) / c.parts;
  const size_t bytes = size_t(kTiles) * c.parts * part_bytes;
  const uint32_t blocks = kTiles * c.parts + kTiles;

  TestWorld env(world_size, 4 << 20, 64);
  const World& world = env.world;
  ASSERT_LE(int(blocks), env.min_sm_budget()) << "the test needs every block resident";
  SymmetricBuffer box = env.heap.allocate(bytes);
  SignalSlice slice = env.signals.allocate(kTiles, c.name);
  std::vector<DeviceBuffer> src, out;
  for (int r = 0; r < world_size; ++r) {
    src.emplace_back(bytes, world.device(r));
    out.emplace_back(bytes, world.device(r));
  }

  for (uint32_t call = 1; call <= kCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<std::vector<uint8_t>> host_src(world_size);
    for (int r = 0; r < world_size; ++r) {
      host_src[r] = random_bytes(bytes, seed_of(1, r, call));
      upload(src[r].get(), host_src[r].data(), bytes);
      poison(box.data(r), bytes);
      poison(out[r].get(), bytes);
    }
    settle();

    ASSERT_EQ(slice.begin_call(), call);
    // Every view is checked before any rank launches: a launched rank spins on the others.
    std::vector<SignalParams> params;
    for (int r = 0; r < world_size; ++r) {
      params.push_back({slice.device_view(r), env.heap.device_view(r), src[r].get(),
                        box.as<char>(r), out[r].get(), kTiles, c.parts, part_bytes, c.pattern,
                        c.mode, r, world_size});
      ASSERT_EQ(params[r].sig.epoch, call);
      ASSERT_EQ(params[r].sig.rank, r);
      ASSERT_EQ(params[r].sig.world, world_size);
    }
    for (int r = 0; r < world_size; ++r) {
      world.set_device(r);
      signal_pair_kernel<<<blocks, 256, 0, world.compute_stream(r)>>>(params[r]);
      TL_CHECK_LAUNCH();
    }
    world.synchronize();

    for (int q = 0; q < world_size; ++q) {
      const int producer = c.pattern == SignalPattern::kLocal ? q : (q + world_size - 1) % world_size;
      EXPECT_TRUE(bytes_equal(download<uint8_t>(out[q].get(), bytes), host_src[producer]))
          << "consumer rank " << q << ", producer rank " << producer;
    }
  }

  // No reset between calls: set mode left the last epoch, add mode epoch * arrivals.
  for (int r = 0; r < world_size; ++r) {
    const std::vector<uint64_t> channels =
        download<uint64_t>(slice.host_view(r).local_channels, kTiles);
    for (uint32_t t = 0; t < kTiles; ++t) {
      EXPECT_EQ(channels[t], uint64_t(kCalls) * c.parts) << "rank " << r << ", channel " << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Primitives, SignalTest,
    ::testing::Combine(::testing::ValuesIn(kWorldSizes), ::testing::ValuesIn(kSignalCases)),
    [](const ::testing::TestParamInfo<SignalTest::ParamType>& info) {
      return "world" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
    });

// ---- data: tile_push_data / tile_pull_data move exactly the tile ------------------------------

enum class Direction { kPush, kPull };

struct TileCase {
  const char* name;
  uint32_t rows;
  uint32_t row_bytes;
  uint64_t src_pitch;
  uint64_t dst_pitch;
  uint64_t offset;  // of the tile's first byte within its slot
};

// The kernel moves each tile in two calls of half the rows. The bulk path's stage is
// BulkSmem::kStageBytes (16 KB) in a ring of 4: sizes are not multiples of a stage, and most calls
// need more chunks than the ring has stages.
const TileCase kTileCases[] = {
    {"one_vector", 1, 16, 16, 16, 0},                  // first call moves 0 rows
    {"contiguous_37x1040", 37, 1040, 1040, 1040, 0},   // halves of 18720 / 19760 B: 2 chunks
    {"contiguous_200x784", 200, 784, 784, 784, 0},     // halves of 78400 B: 5 chunks each
    {"pitched_37x1040", 37, 1040, 1088, 1296, 48},     // one chunk per row, 18 / 19 per call
    {"pitched_3x40976", 3, 40976, 41024, 40992, 16},   // rows of 2.5 stages
    {"src_pitched_64x512", 64, 512, 640, 512, 32},     // one side contiguous only: per row
};

struct SlotLayout {
  uint64_t pitch;
  uint64_t offset;
  uint64_t slot_bytes;

  TL_HOST_DEVICE TileRef tile(char* base, int slot, uint32_t first_row = 0) const {
    return {base + uint64_t(slot) * slot_bytes + offset + uint64_t(first_row) * pitch, pitch};
  }
};

SlotLayout make_layout(const TileCase& c, uint64_t pitch) {
  const uint64_t extent = c.offset + uint64_t(c.rows - 1) * pitch + c.row_bytes;
  return {pitch, c.offset, (extent + 255) / 256 * 256};
}

struct DataParams {
  SymmetricView heap;
  char* src;  // push: this rank's device memory; pull: symmetric (address in this rank's segment)
  char* dst;  // push: symmetric; pull: this rank's device memory
  SlotLayout src_layout;
  SlotLayout dst_layout;
  uint32_t rows;
  uint32_t row_bytes;
  int rank;
};

// Block `peer` moves one tile between this rank and `peer`, in two calls (the first half of the
// rows, then the rest) so that the bulk staging ring is reused across calls.
//   push: my src slot `peer`  -> peer's dst slot `rank`
//   pull: peer's src slot `rank` -> my dst slot `peer`
// Either way, rank t's dst slot f holds rank f's src slot t.
template <DataPath kPath, Direction kDir>
__global__ void move_tiles_kernel(DataParams p) {
  extern __shared__ __align__(128) char smem[];
  const int peer = static_cast<int>(blockIdx.x);
  const int src_slot = kDir == Direction::kPush ? peer : p.rank;
  const int dst_slot = kDir == Direction::kPush ? p.rank : peer;
  const uint32_t half = p.rows / 2;
  const TileShape shapes[2] = {{half, p.row_bytes}, {p.rows - half, p.row_bytes}};
  const uint32_t first_rows[2] = {0, half};

  if constexpr (kPath == DataPath::kBulk) {
    // One thread owns the staging ring and issues every bulk copy.
    if (threadIdx.x != 0) return;
    BulkStaging staging = BulkSmem::init(smem);
    for (int i = 0; i < 2; ++i) {
      const TileRef src = p.src_layout.tile(p.src, src_slot, first_rows[i]);
      const TileRef dst = p.dst_layout.tile(p.dst, dst_slot, first_rows[i]);
      if constexpr (kDir == Direction::kPush) {
        tile_push_data(staging, p.heap, dst, peer, shapes[i], src);
      } else {
        tile_pull_data(staging, dst, p.heap, src, peer, shapes[i]);
      }
    }
  } else {
    const Lanes lanes{threadIdx.x, blockDim.x};
    for (int i = 0; i < 2; ++i) {
      const TileRef src = p.src_layout.tile(p.src, src_slot, first_rows[i]);
      const TileRef dst = p.dst_layout.tile(p.dst, dst_slot, first_rows[i]);
      if constexpr (kDir == Direction::kPush) {
        tile_push_data(lanes, p.heap, dst, peer, shapes[i], src);
      } else {
        tile_pull_data(lanes, dst, p.heap, src, peer, shapes[i]);
      }
    }
  }
}

template <DataPath kPath, Direction kDir>
void launch_move_tiles(const DataParams& p, int world_size, cudaStream_t stream) {
  // 96 threads: not a power of two, so the ld/st path's unrolled body and its tail both run.
  const uint32_t threads = kPath == DataPath::kBulk ? 32 : 96;
  const size_t smem = kPath == DataPath::kBulk ? BulkSmem::bytes() : 0;
  if (smem > 0) {
    TL_CUDA_CHECK(cudaFuncSetAttribute(move_tiles_kernel<kPath, kDir>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  }
  move_tiles_kernel<kPath, kDir><<<world_size, threads, smem, stream>>>(p);
  TL_CHECK_LAUNCH();
}

class DataTest : public ::testing::TestWithParam<std::tuple<int, Direction, DataPath>> {};

TEST_P(DataTest, MovesExactlyTheTileBytes) {
  TL_SKIP_WITHOUT_GPU();
  const auto [world_size, dir, path] = GetParam();
  TestWorld env(world_size, 8 << 20, 64);
  const World& world = env.world;
  ASSERT_LE(world_size, env.min_sm_budget());

  for (const TileCase& c : kTileCases) {
    SCOPED_TRACE(c.name);
    const SlotLayout src_layout = make_layout(c, c.src_pitch);
    const SlotLayout dst_layout = make_layout(c, c.dst_pitch);
    const size_t src_bytes = src_layout.slot_bytes * world_size;
    const size_t dst_bytes = dst_layout.slot_bytes * world_size;
    // The symmetric side is the destination of a push and the source of a pull.
    SymmetricBuffer sym = env.heap.allocate(dir == Direction::kPush ? dst_bytes : src_bytes);
    std::vector<DeviceBuffer> local;
    std::vector<char*> src(world_size), dst(world_size);
    std::vector<std::vector<uint8_t>> host_src(world_size);
    for (int r = 0; r < world_size; ++r) {
      local.emplace_back(dir == Direction::kPush ? src_bytes : dst_bytes, world.device(r));
      src[r] = dir == Direction::kPush ? local[r].get() : sym.as<char>(r);
      dst[r] = dir == Direction::kPush ? sym.as<char>(r) : local[r].get();
      host_src[r] = random_bytes(src_bytes, seed_of(2, r, c.rows));
      upload(src[r], host_src[r].data(), src_bytes);
      poison(dst[r], dst_bytes);
    }
    settle();

    for (int r = 0; r < world_size; ++r) {
      const DataParams p{env.heap.device_view(r), src[r], dst[r], src_layout, dst_layout,
                         c.rows, c.row_bytes, r};
      world.set_device(r);
      const cudaStream_t stream = world.compute_stream(r);
      if (path == DataPath::kBulk) {
        if (dir == Direction::kPush) launch_move_tiles<DataPath::kBulk, Direction::kPush>(p, world_size, stream);
        else launch_move_tiles<DataPath::kBulk, Direction::kPull>(p, world_size, stream);
      } else {
        if (dir == Direction::kPush) launch_move_tiles<DataPath::kLdSt, Direction::kPush>(p, world_size, stream);
        else launch_move_tiles<DataPath::kLdSt, Direction::kPull>(p, world_size, stream);
      }
    }
    world.synchronize();

    // Rank t's dst slot f = rank f's src slot t, row by row; the bytes between rows stay poisoned.
    for (int t = 0; t < world_size; ++t) {
      std::vector<uint8_t> want(dst_bytes, kPoison);
      for (int f = 0; f < world_size; ++f) {
        for (uint32_t row = 0; row < c.rows; ++row) {
          std::memcpy(want.data() + f * dst_layout.slot_bytes + c.offset + row * c.dst_pitch,
                      host_src[f].data() + t * src_layout.slot_bytes + c.offset + row * c.src_pitch,
                      c.row_bytes);
        }
      }
      EXPECT_TRUE(bytes_equal(download<uint8_t>(dst[t], dst_bytes), want)) << "destination rank " << t;
    }
  }
}

std::string data_case_name(const ::testing::TestParamInfo<DataTest::ParamType>& info) {
  const auto& [world_size, dir, path] = info.param;
  return "world" + std::to_string(world_size) + (dir == Direction::kPush ? "_push" : "_pull") +
         (path == DataPath::kBulk ? "_bulk" : "_ldst");
}

INSTANTIATE_TEST_SUITE_P(Primitives, DataTest,
                         ::testing::Combine(::testing::ValuesIn(kWorldSizes),
                                            ::testing::Values(Direction::kPush, Direction::kPull),
                                            ::testing::Values(DataPath::kLdSt, DataPath::kBulk)),
                         data_case_name);

// ---- host primitives paired with kernels ------------------------------------------------------

// Rank p's block s waits for rank s's copy into p's inbox slot s (announced by rank_notify), then
// copies the slot out.
__global__ void drain_inbox_kernel(SignalView sig, const char* inbox, char* out, uint64_t slot_bytes,
                                   uint32_t bytes) {
  const uint32_t sender = blockIdx.x;
  if (threadIdx.x == 0) consumer_tile_wait(sig, sender, 1, 1, static_cast<int32_t>(sender));
  __syncthreads();
  block_copy16(out + sender * slot_bytes, inbox + sender * slot_bytes, bytes);
}

class HostPrimitiveTest : public ::testing::TestWithParam<int> {};

// rank_copy_data + rank_notify on comm_stream(r) -> consumer_tile_wait in a kernel.
TEST_P(HostPrimitiveTest, CopyThenRankNotifyReleasesTheCopyToKernels) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = GetParam();
  constexpr uint32_t kBytes = 40000;  // not a power of two; a multiple of 16 for the readers
  constexpr uint64_t kSlot = 40192;
  constexpr uint32_t kCalls = 3;

  TestWorld env(world_size, 4 << 20, 64);
  const World& world = env.world;
  ASSERT_LE(world_size, env.min_sm_budget());
  SymmetricBuffer inbox = env.heap.allocate(kSlot * world_size);
  SignalSlice slice = env.signals.allocate(world_size, "copy_then_notify");
  std::vector<DeviceBuffer> src, out;
  for (int r = 0; r < world_size; ++r) {
    src.emplace_back(kBytes, world.device(r));
    out.emplace_back(kSlot * world_size, world.device(r));
  }

  for (uint32_t call = 1; call <= kCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<std::vector<uint8_t>> host_src(world_size);
    for (int r = 0; r < world_size; ++r) {
      host_src[r] = random_bytes(kBytes, seed_of(3, r, call));
      upload(src[r].get(), host_src[r].data(), kBytes);
      poison(inbox.data(r), kSlot * world_size);
      poison(out[r].get(), kSlot * world_size);
    }
    settle();

    ASSERT_EQ(slice.begin_call(), call);
    // Kernels first, so that they are already waiting when the copies land.
    for (int p = 0; p < world_size; ++p) {
      world.set_device(p);
      drain_inbox_kernel<<<world_size, 128, 0, world.compute_stream(p)>>>(
          slice.device_view(p), inbox.as<char>(p), out[p].get(), kSlot, kBytes);
      TL_CHECK_LAUNCH();
    }
    for (int r = 0; r < world_size; ++r) {
      const SignalView sig = slice.host_view(r);
      ASSERT_EQ(sig.epoch, call);
      for (int p = 0; p < world_size; ++p) {
        rank_copy_data(world.comm_stream(r), inbox.as<char>(p) + r * kSlot, src[r].get(), kBytes);
        rank_notify(world.comm_stream(r), sig, static_cast<uint32_t>(r), p);
      }
    }
    world.synchronize();

    for (int p = 0; p < world_size; ++p) {
      const std::vector<uint8_t> got = download<uint8_t>(out[p].get(), kSlot * world_size);
      for (int s = 0; s < world_size; ++s) {
        const std::vector<uint8_t> slot(got.begin() + s * kSlot, got.begin() + s * kSlot + kBytes);
        EXPECT_TRUE(bytes_equal(slot, host_src[s])) << "rank " << p << " reading rank " << s;
      }
    }
  }
}

// Channels of the notify -> rank_wait test.
constexpr uint32_t kLocalSetChannel = 0;  // block 0: own box slot 0, producer_tile_notify (set)
constexpr uint32_t kPeerSetChannel = 1;   // block 1: next rank's slot 1, peer_tile_notify (set)
constexpr uint32_t kLocalAddChannel = 2;  // blocks 2..4: a third of own slot 2 each, add mode
constexpr uint32_t kAddParts = 3;

__global__ void publish_box_kernel(SignalView sig, SymmetricView heap, const char* src, char* box,
                                   uint64_t slot_bytes, uint32_t bytes, int rank, int world) {
  const int next = (rank + 1) % world;
  if (blockIdx.x == 0) {
    block_copy16(box + kLocalSetChannel * slot_bytes, src, bytes);
    __syncthreads();
    if (threadIdx.x == 0) producer_tile_notify(sig, kLocalSetChannel, NotifyMode::kSet);
  } else if (blockIdx.x == 1) {
    block_copy16(heap.translate(box, next) + kPeerSetChannel * slot_bytes, src, bytes);
    __syncthreads();
    if (threadIdx.x == 0) peer_tile_notify(sig, kPeerSetChannel, next, NotifyMode::kSet);
  } else {
    const uint32_t part = blockIdx.x - 2, part_bytes = bytes / kAddParts;
    block_copy16(box + kLocalAddChannel * slot_bytes + part * part_bytes, src + part * part_bytes,
                 part_bytes);
    __syncthreads();
    if (threadIdx.x == 0) producer_tile_notify(sig, kLocalAddChannel, NotifyMode::kAdd);
  }
}

// Kernel notifies (local set, peer set, local add x3) -> rank_wait on comm_stream -> rank_copy_data
// reads what the kernel wrote.
TEST_P(HostPrimitiveTest, KernelNotifyThenRankWaitOrdersTheCopy) {
  TL_SKIP_WITHOUT_GPU();
  const int world_size = GetParam();
  constexpr uint32_t kBytes = 48000;  // divisible by 3 * 16
  constexpr uint64_t kSlot = 48128;
  constexpr uint32_t kSlots = 3;
  constexpr uint32_t kCalls = 3;

  TestWorld env(world_size, 4 << 20, 64);
  const World& world = env.world;
  ASSERT_LE(int(2 + kAddParts), env.min_sm_budget());
  SymmetricBuffer box = env.heap.allocate(kSlot * kSlots);
  SignalSlice slice = env.signals.allocate(kSlots, "notify_then_rank_wait");
  std::vector<DeviceBuffer> src, out;
  for (int r = 0; r < world_size; ++r) {
    src.emplace_back(kBytes, world.device(r));
    out.emplace_back(kSlot * kSlots, world.device(r));
  }

  for (uint32_t call = 1; call <= kCalls; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    std::vector<std::vector<uint8_t>> host_src(world_size);
    for (int r = 0; r < world_size; ++r) {
      host_src[r] = random_bytes(kBytes, seed_of(4, r, call));
      upload(src[r].get(), host_src[r].data(), kBytes);
      poison(box.data(r), kSlot * kSlots);
      poison(out[r].get(), kSlot * kSlots);
    }
    settle();

    ASSERT_EQ(slice.begin_call(), call);
    // Stream waits first, so that the copies are held back until the kernels notify.
    for (int q = 0; q < world_size; ++q) {
      const SignalView sig = slice.host_view(q);
      const cudaStream_t stream = world.comm_stream(q);
      const uint32_t arrivals[kSlots] = {1, 1, kAddParts};
      for (uint32_t s = 0; s < kSlots; ++s) {
        rank_wait(stream, sig, s, arrivals[s]);
        rank_copy_data(stream, out[q].get() + s * kSlot, box.as<char>(q) + s * kSlot, kBytes);
      }
    }
    for (int r = 0; r < world_size; ++r) {
      world.set_device(r);
      publish_box_kernel<<<2 + kAddParts, 128, 0, world.compute_stream(r)>>>(
          slice.device_view(r), env.heap.device_view(r), src[r].get(), box.as<char>(r), kSlot,
          kBytes, r, world_size);
      TL_CHECK_LAUNCH();
    }
    world.synchronize();

    for (int q = 0; q < world_size; ++q) {
      const int prev = (q + world_size - 1) % world_size;
      const std::vector<uint8_t> got = download<uint8_t>(out[q].get(), kSlot * kSlots);
      const int writer[kSlots] = {q, prev, q};
      for (uint32_t s = 0; s < kSlots; ++s) {
        const std::vector<uint8_t> slot(got.begin() + s * kSlot, got.begin() + s * kSlot + kBytes);
        EXPECT_TRUE(bytes_equal(slot, host_src[writer[s]])) << "rank " << q << ", slot " << s;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Primitives, HostPrimitiveTest, ::testing::ValuesIn(kWorldSizes), world_name);

}  // namespace tilelink::test::primitives
