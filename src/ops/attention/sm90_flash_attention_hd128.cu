// The SP attention kernel for head dim 128 (see sm90_flash_attention_kernel.cuh).
#include "ops/attention/sm90_flash_attention_kernel.cuh"

namespace tilelink::detail {

Sm90FlashAttentionConfigInfo sm90_flash_attention_hd128() { return Sm90FlashAttentionKernelImpl<128>::info(); }

}  // namespace tilelink::detail
