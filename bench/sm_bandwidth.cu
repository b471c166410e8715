// SM data-path bandwidth: k CTAs move one large buffer from rank 0's heap segment to rank 1's
// with tile_push_data (launched as rank 0) or tile_pull_data (launched as rank 1), each CTA a
// contiguous share, on the ld/st path (512 threads, 16-byte vectors) and the bulk path (TMA
// cp.async.bulk through shared memory, issued by thread 0). The copy-engine reference is
// cudaMemcpyAsync D2D of the same bytes. Bytes are counted once (moved, not read + written).
#include <string>
#include <vector>

#include "bench/primitives.hpp"
#include "tilelink/comm/collectives.hpp"
#include "bench/harness.hpp"
#include "bench/random.hpp"
#include "bench/world_choice.hpp"
#include "tilelink/comm/device_ctx.cuh"
#include "tilelink/core/error.hpp"
#include "tilelink/primitives/device.cuh"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"

namespace tilelink::bench {
namespace {

constexpr uint32_t kLdStThreads = 512;
constexpr uint32_t kBulkThreads = 32;  // thread 0 issues every bulk copy; one warp is the minimum
constexpr int kMaxBlocks = 128;

enum class Direction : uint32_t { kPush = 0, kPull = 1 };

struct Share {
  uint64_t offset;
  uint64_t bytes;
};

// CTA `block`'s contiguous share of `bytes` (a multiple of 16): equal 16-byte-aligned parts, the
// last CTA also takes the remainder.
TL_HOST_DEVICE Share share_of(uint64_t bytes, uint32_t block, uint32_t blocks) {
  const uint64_t per = (bytes / blocks) & ~uint64_t(15);
  const uint64_t offset = per * block;
  return {offset, block + 1 == blocks ? bytes - offset : per};
}

// `sym` is the buffer in the launching rank's segment: the source of a push, the destination of
// a pull. The share is one flat row, so the data primitives take their contiguous path.
__global__ void __launch_bounds__(kLdStThreads)
    ldst_copy_kernel(SymmetricView heap, char* sym, uint64_t bytes, int peer, Direction dir) {
  const Share share = share_of(bytes, blockIdx.x, gridDim.x);
  const TileRef tile{sym + share.offset, share.bytes};
  const TileShape shape{1, static_cast<uint32_t>(share.bytes)};
  const Lanes lanes{threadIdx.x, blockDim.x};
  if (dir == Direction::kPush) {
    tile_push_data(lanes, heap, tile, peer, shape, tile);
  } else {
    tile_pull_data(lanes, tile, heap, tile, peer, shape);
  }
}

__global__ void __launch_bounds__(kBulkThreads)
    bulk_copy_kernel(SymmetricView heap, char* sym, uint64_t bytes, int peer, Direction dir) {
  extern __shared__ __align__(128) char smem[];
  if (threadIdx.x != 0) return;
  BulkStaging staging = BulkSmem::init(smem);
  const Share share = share_of(bytes, blockIdx.x, gridDim.x);
  const TileRef tile{sym + share.offset, share.bytes};
  const TileShape shape{1, static_cast<uint32_t>(share.bytes)};
  if (dir == Direction::kPush) {
    tile_push_data(staging, heap, tile, peer, shape, tile);
  } else {
    tile_pull_data(staging, tile, heap, tile, peer, shape);
  }
}

}  // namespace

Table bench_sm_bandwidth(const PrimitiveOptions& options) {
  TL_REQUIRE(options.world >= 2, "bench_sm_bandwidth", "world", options.world, ">= 2");
  const size_t bytes = options.quick ? 64 * kMiB : 256 * kMiB;
  const int reps = options.quick ? 3 : 20;
  const int warmup = 1;

  World world = make_bench_world(options.world);
  SymmetricHeap heap(world, bytes + kMiB);
  SymmetricBuffer buffer = heap.allocate(bytes);
  char* const src = buffer.as<char>(0);
  char* const dst = buffer.as<char>(1);

  world.set_device(0);
  fill_random_words(src, bytes, rank_seed(options.seed, 0), world.compute_stream(0));
  world.synchronize();

  std::vector<int> block_counts;
  for (int k = 1; k <= kMaxBlocks && k <= world.num_sms(0); k *= 2) block_counts.push_back(k);

  TL_CUDA_CHECK(cudaFuncSetAttribute(bulk_copy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(BulkSmem::bytes())));

  Table table;
  table.name = "sm_bandwidth";
  table.title = "SM push/pull bandwidth, rank 0 -> rank 1, vs cudaMemcpyAsync D2D";
  table.params = {{"world", int64_t(options.world)},
                  {"bytes", int64_t(bytes)},
                  {"ldst_threads", int64_t(kLdStThreads)},
                  {"bulk_stages", int64_t(BulkSmem::kStages)},
                  {"bulk_stage_bytes", int64_t(BulkSmem::kStageBytes)},
                  {"reps", int64_t(reps)}};
  table.columns = {{"path", "path", 0},
                   {"method", "method", 0},
                   {"ctas", "CTAs", 0},
                   {"time_us", "time µs", 1},
                   {"gb_per_s", "GB/s", 1},
                   {"gb_per_s_per_cta", "GB/s/CTA", 1},
                   {"vs_memcpy", "vs memcpy", 2}};
  table.notes = {ranks_on_gpus()
                     ? "one rank per GPU: this is GPU 0 -> GPU 1 over NVLink through the SMs"
                     : "virtual ranks share one GPU: this is HBM -> HBM through the SMs, not NVLink",
                 "GB/s = bytes moved / time (each byte counted once), 10^9 bytes/s",
                 "vs memcpy = GB/s / cudaMemcpyAsync GB/s"};

  // Copy-engine reference on rank 0's stream.
  const cudaStream_t ce_stream = world.compute_stream(0);
  StreamTimer timer;
  auto time_on = [&](cudaStream_t stream, auto&& enqueue) {
    timer.start(stream);
    enqueue();
    timer.stop(stream);
    world.synchronize();
    return timer.microseconds();
  };
  auto memcpy_once = [&] {
    TL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ce_stream));
  };
  const Stats ce = repeat(warmup, reps, [&] { return time_on(ce_stream, memcpy_once); });
  const double ce_gbps = gb_per_s(double(bytes), ce.median);
  table.add_row({std::string("copy engine"), std::string("cudaMemcpyAsync"), Value{}, ce.median,
                 ce_gbps, Value{}, 1.0});

  for (const DataPath path : {DataPath::kLdSt, DataPath::kBulk}) {
    for (const Direction dir : {Direction::kPush, Direction::kPull}) {
      const int rank = dir == Direction::kPush ? 0 : 1;
      const int peer = 1 - rank;
      const cudaStream_t stream = world.compute_stream(rank);
      const SymmetricView view = heap.device_view(rank);
      char* const sym = buffer.as<char>(rank);
      const std::string path_name = path == DataPath::kLdSt ? "ld/st" : "bulk (TMA)";
      const std::string method = dir == Direction::kPush ? "push" : "pull";

      for (const int k : block_counts) {
        auto launch = [&] {
          world.set_device(rank);
          if (path == DataPath::kLdSt) {
            ldst_copy_kernel<<<k, kLdStThreads, 0, stream>>>(view, sym, bytes, peer, dir);
          } else {
            bulk_copy_kernel<<<k, kBulkThreads, BulkSmem::bytes(), stream>>>(view, sym, bytes, peer, dir);
          }
          TL_CUDA_CHECK(cudaGetLastError());
        };

        // Check once: poison the destination, move, compare with the source.
        TL_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, stream));
        launch();
        world.synchronize();
        const uint64_t bad = count_mismatches(src, dst, bytes, stream);
        if (bad != 0) {
          throw Error("sm_bandwidth: " + path_name + " " + method + " with " + std::to_string(k) +
                      " CTAs: " + std::to_string(bad) + " of " + std::to_string(bytes / 16) +
                      " 16-byte words differ from the source");
        }

        const Stats s = repeat(warmup, reps, [&] { return time_on(stream, launch); });
        const double gbps = gb_per_s(double(bytes), s.median);
        table.add_row({path_name, method, int64_t(k), s.median, gbps, gbps / k, gbps / ce_gbps});
      }
    }
  }
  return table;
}

}  // namespace tilelink::bench
