// Builds against an installed TileLink: host runtime, device primitives and a protocol.
#include <tilelink/tilelink.hpp>
#include <tilelink/comm/device_ctx.cuh>

__global__ void probe(tilelink::SignalView sig) {
  if (threadIdx.x == 0) tilelink::producer_tile_notify(sig, 0);
}

int main() {
  tilelink::RowShardMapping map{64, 16, 2};
  return map.num_channels() == 8 ? 0 : 1;
}
