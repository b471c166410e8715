// TileLink host API: runtime, signals, mappings, protocols, collectives, overlapped ops.
// Device code includes tilelink/primitives/device.cuh (and comm/device_ctx.cuh) as well.
#pragma once

#include "tilelink/comm/all_gather.hpp"
#include "tilelink/comm/collectives.hpp"
#include "tilelink/comm/reduce_scatter.hpp"
#include "tilelink/core/error.hpp"
#include "tilelink/mapping/mapping.hpp"
#include "tilelink/ops/ag_gemm/ag_gemm.hpp"
#include "tilelink/ops/gemm_rs/gemm_rs.hpp"
#include "tilelink/ops/mlp/mlp.hpp"
#include "tilelink/ops/moe/moe_ag_gemm.hpp"
#include "tilelink/ops/moe/moe_gemm_rs.hpp"
#include "tilelink/ops/moe/moe_layer.hpp"
#include "tilelink/ops/moe/moe_mapping_device.hpp"
#include "tilelink/primitives/host.hpp"
#include "tilelink/primitives/signal.hpp"
#include "tilelink/primitives/symmetric.hpp"
#include "tilelink/runtime/device_buffer.hpp"
#include "tilelink/runtime/error_channel.hpp"
#include "tilelink/runtime/signal_set.hpp"
#include "tilelink/runtime/symmetric_heap.hpp"
#include "tilelink/runtime/world.hpp"
