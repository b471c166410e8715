// The SP attention kernel's epilogue, from a consumer thread's registers: O / l in bf16 and
// LSE = m * scale + log(l) at the end of an item's last pass; with the local pass first
// (FlashPass), the unnormalized state (fp32 o, m, l) parked at the end of pass 0 and taken back
// at the start of pass 1 by the same thread (an item stays with its CTA, and the consumer
// threads' rows with them). Rows past the shard's end have no slot and are not stored.
#pragma once

#include <cute/tensor.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "ops/attention/sm90_flash_attention_softmax.cuh"
#include "ops/attention/sm90_flash_attention_traits.cuh"

namespace tilelink::detail {

// Slots: the consumer kernel passes, per item, o_at(e, at) (this thread's element e of O: its
// offset in O and in the parked o, false for rows past the shard's end) and row_at(r, at) (its
// row r: the offset of the row's LSE, m and l, false past the shard's end).
template <class Traits>
struct Sm90FlashAttentionEpilogue {
  using Params = typename Traits::Params;

  const Params& p;
  uint64_t lse_elems;  // elements of LSE (and of m, and of l, in the scratch)
  bool quad_leader;    // the quad's first lane: writes the rows' LSE, m and l

  // The state this thread parked at the end of the previous pass. l is a sum over the quad's
  // four lanes: the quad's first lane takes the whole of it.
  template <class FrgO, class OAt, class RowAt>
  CUTE_DEVICE void resume(FrgO& tOrO, FlashSoftmax& softmax, OAt&& o_at, RowAt&& row_at) const {
    using namespace cute;
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < size(tOrO); e += 2) {
      uint64_t at;
      if (!o_at(e, at)) continue;
      const float2 v = *reinterpret_cast<const float2*>(p.o_acc + at);
      tOrO(e) = v.x;
      tOrO(e + 1) = v.y;
    }
    for (int r = 0; r < 2; ++r) {
      uint64_t at;
      if (!row_at(r, at)) continue;
      softmax.m[r] = p.ml[at];
      softmax.l[r] = quad_leader ? p.ml[lse_elems + at] : 0.f;
    }
  }

  // Parks the unnormalized state for the next pass (softmax.l already summed over the quad).
  template <class FrgO, class OAt, class RowAt>
  CUTE_DEVICE void park(FrgO const& tOrO, const FlashSoftmax& softmax, OAt&& o_at, RowAt&& row_at) const {
    using namespace cute;
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < size(tOrO); e += 2) {
      uint64_t at;
      if (o_at(e, at)) *reinterpret_cast<float2*>(p.o_acc + at) = make_float2(tOrO(e), tOrO(e + 1));
    }
    for (int r = 0; r < 2; ++r) {
      uint64_t at;
      if (quad_leader && row_at(r, at)) {
        p.ml[at] = softmax.m[r];
        p.ml[lse_elems + at] = softmax.l[r];
      }
    }
  }

  // O / l and LSE (softmax.l already summed over the quad). A row that saw no key (a ring step)
  // gets O = 0 and LSE = -inf.
  template <class FrgO, class OAt, class RowAt>
  CUTE_DEVICE void store(FrgO const& tOrO, const FlashSoftmax& softmax, OAt&& o_at, RowAt&& row_at) const {
    using namespace cute;
    float inv[2], lse[2];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < 2; ++r) {
      inv[r] = softmax.l[r] > 0.f ? 1.f / softmax.l[r] : 0.f;
      lse[r] = softmax.l[r] > 0.f ? softmax.m[r] * p.scale + logf(softmax.l[r]) : -INFINITY;
    }
    auto* o = reinterpret_cast<__nv_bfloat16*>(p.o);
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < size(tOrO); e += 2) {
      uint64_t at;
      if (!o_at(e, at)) continue;
      const int r = (e >> 1) & 1;
      *reinterpret_cast<__nv_bfloat162*>(o + at) = __floats2bfloat162_rn(tOrO(e) * inv[r], tOrO(e + 1) * inv[r]);
    }
    for (int r = 0; r < 2; ++r) {
      uint64_t at;
      if (quad_leader && row_at(r, at)) p.lse[at] = lse[r];
    }
  }
};

}  // namespace tilelink::detail
