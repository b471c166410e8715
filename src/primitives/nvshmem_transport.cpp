#include "primitives/nvshmem_transport.hpp"

#include <nvshmem.h>
#include <nvshmemx.h>

#include "tilelink/core/error.hpp"

namespace tilelink::detail {

// NVSHMEM's stream operations return nothing: a failure to enqueue shows as the CUDA runtime's
// last error, checked after each.
void nvshmem_put_rows_signal(cudaStream_t stream, void* dst, const void* src, uint64_t pitch, TileShape shape,
                             uint64_t* signal, uint64_t value, int pe) {
  if (shape.rows == 0) {
    nvshmem_signal_set(stream, signal, value, pe);
    return;
  }
  const bool contiguous = pitch == shape.row_bytes;
  const uint32_t puts = contiguous ? 1 : shape.rows;
  const size_t bytes = contiguous ? size_t(shape.bytes()) : size_t(shape.row_bytes);
  for (uint32_t i = 0; i + 1 < puts; ++i) {
    nvshmemx_putmem_on_stream(static_cast<char*>(dst) + uint64_t(i) * pitch,
                              static_cast<const char*>(src) + uint64_t(i) * pitch, bytes, pe, stream);
    TL_CUDA_CHECK(cudaPeekAtLastError());
  }
  // The signal of the last put covers only its own rows: the earlier ones are delivered first.
  if (puts > 1) {
    nvshmemx_quiet_on_stream(stream);
    TL_CUDA_CHECK(cudaPeekAtLastError());
  }
  const uint64_t last = uint64_t(puts - 1) * pitch;
  nvshmemx_putmem_signal_on_stream(static_cast<char*>(dst) + last, static_cast<const char*>(src) + last, bytes,
                                   signal, value, NVSHMEM_SIGNAL_SET, pe, stream);
  TL_CUDA_CHECK(cudaPeekAtLastError());
}

void nvshmem_signal_set(cudaStream_t stream, uint64_t* signal, uint64_t value, int pe) {
  nvshmemx_quiet_on_stream(stream);
  TL_CUDA_CHECK(cudaPeekAtLastError());
  nvshmemx_signal_op_on_stream(signal, value, NVSHMEM_SIGNAL_SET, pe, stream);
  TL_CUDA_CHECK(cudaPeekAtLastError());
}

void nvshmem_signal_peers(cudaStream_t stream, uint64_t* signal, uint64_t value, NotifyMode mode, int me, int size) {
  const int op = mode == NotifyMode::kAdd ? NVSHMEM_SIGNAL_ADD : NVSHMEM_SIGNAL_SET;
  nvshmemx_quiet_on_stream(stream);
  TL_CUDA_CHECK(cudaPeekAtLastError());
  for (int pe = 0; pe < size; ++pe) {
    if (pe == me) continue;
    nvshmemx_signal_op_on_stream(signal, value, op, pe, stream);
    TL_CUDA_CHECK(cudaPeekAtLastError());
  }
}

}  // namespace tilelink::detail
