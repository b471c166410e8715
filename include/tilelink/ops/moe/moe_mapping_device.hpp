// The MoE dynamic mapping built on the device at run time, from routing ids already there: the
// same tables as build_moe_mapping / make_moe_tile_order (moe_mapping.hpp), bit for bit, with no
// host round trip, so a layer's routing feeds its grouped GEMM on the stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tilelink/ops/moe/moe_mapping.hpp"
#include "tilelink/ops/moe/moe_rs_protocol.hpp"
#include "tilelink/runtime/device_buffer.hpp"

namespace tilelink {

class MoeMappingBuffers {
 public:
  // Room for `tokens` tokens routed top-`topk` over `experts`, tiles of `bm` rows, on `device`.
  // Throws InvalidArgument for a zero size, topk > experts, or more than 1024 experts.
  MoeMappingBuffers(uint32_t tokens, uint32_t topk, uint32_t experts, uint32_t bm, int device);

  // Loads the kernels of build(), build_order() and build_combine_order() on the current device
  // (runtime/world.hpp's preload_kernel): MoE part 1 launches them beside the SM all-gather, which
  // spins on its peers, and a lazily loaded module's first launch would wait for that spin.
  static void preload();

  // Builds the tables from `ids` (tokens x topk int32 on the device, checked by nothing here:
  // see check_moe_routing) on `stream`: counts, padded offsets, the stable placement of every
  // pair, and the per-tile expert and token span. The tile count lands in num_tiles_device().
  void build(const int32_t* ids, cudaStream_t stream);
  // Rank `rank`'s tile order for the all-gather `ag` into order (max_tiles() entries on the
  // device; the first num_tiles are valid), on `stream` after build().
  void build_order(const AllGatherPlan& ag, uint32_t rank, uint32_t* order, cudaStream_t stream) const;

  // Part 2's tile order for rank `rank` into order (as build_order): tiles by when the rank's
  // combine needs their first token (plan.combine_key: round by round, owner rank+1 first), so
  // the combine's first rounds find their tiles done first. With 0 < sweeps < the rounds, the
  // rounds are cut into `sweeps` groups and within a group the tiles go expert by expert (an
  // expert's weights stream once per group instead of once per tile row; the combine of a group
  // waits for the group's end). Within buckets of equal keys the order is unspecified.
  void build_combine_order(const MoeRsPlan& plan, uint32_t rank, uint32_t* order, cudaStream_t stream,
                           uint32_t sweeps = 0) const;

  uint32_t tokens() const { return tokens_; }
  uint32_t topk() const { return topk_; }
  uint32_t experts() const { return experts_; }
  uint32_t bm() const { return bm_; }
  uint32_t max_rows() const { return max_tiles_ * bm_; }
  uint32_t max_tiles() const { return max_tiles_; }
  const uint32_t* num_tiles_device() const { return num_tiles_.get<uint32_t>(); }
  // The tables with `num_tiles` tiles (read back from num_tiles_device() or an upper bound).
  MoeMappingView view(uint32_t num_tiles) const;

 private:
  uint32_t tokens_, topk_, experts_, bm_, max_tiles_;
  DeviceBuffer count_, row_offset_, row_pair_, tile_expert_, tile_token0_, tile_span_, num_tiles_, pair_row_;
  DeviceBuffer chunk_bases_;  // per chunk of pairs and expert: its counts, then the scan's bases
};

}  // namespace tilelink
