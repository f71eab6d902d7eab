// Writes one layer's latents of the new tokens into their slots of the paged
// latent pool: c_kv normalized (kv_a_layernorm), k_pe rotated (YaRN RoPE, the
// adjacent-pair form), in the pool's dtype. The pool's layout is the engine's
// (engine/latent_pool.h): block b holds [layers][block_tokens][latent_dim].
//
//   kv_a        [tokens, latent_dim] fp32, row stride kv_a_stride: [c_kv | k_pe]
//   norm_weight [kv_lora] fp32
//   cos, sin    [tokens, half] fp32
//   write_block, write_slot [tokens] int32: where each token's row goes
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct LatentStoreParams {
  const float* kv_a = nullptr;
  int64_t kv_a_stride = 0;
  const float* norm_weight = nullptr;
  float eps = 1e-6f;
  const float* cos = nullptr;
  const float* sin = nullptr;
  int32_t half = 0;
  const int32_t* write_block = nullptr;
  const int32_t* write_slot = nullptr;
  void* pool = nullptr;          // the pool's first block
  bool pool_bf16 = true;         // element type: bf16, else fp32
  int64_t block_values = 0;      // elements per block: layers * block_tokens * latent_dim
  int32_t layer = 0;
  int32_t block_tokens = 0;
  int32_t kv_lora = 0;
  int32_t latent_dim = 0;        // kv_lora + 2 * half
  int32_t tokens = 0;
};

cudaError_t launchLatentStore(const LatentStoreParams& p, cudaStream_t stream);

}  // namespace lg::kernels
