// The SP attention kernel for head dim 64 (see sm90_flash_attention_kernel.cuh).
#include "ops/attention/sm90_flash_attention_kernel.cuh"

namespace tilelink::detail {

Sm90FlashAttentionConfigInfo sm90_flash_attention_hd64() { return Sm90FlashAttentionKernelImpl<64>::info(); }

}  // namespace tilelink::detail
