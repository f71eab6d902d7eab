// YaRN RoPE on the query's rope part, completing the absorbed query.
//
// The rotation pairs adjacent elements (x[2i], x[2i+1]) (DeepSeek's complex
// form, not the half-split NeoX one) with cos/sin per token and frequency,
// computed on the host from the YaRN inverse frequencies and the attention
// factor (engine/model/rope.h) and uploaded per forward pass.
//
// For every token t and head h:
//   dst[t, h, dst_offset + 2i .. +1] = rotate(src[t, h, src_offset + 2i .. +1], cos[t, i], sin[t, i])
//   then dst[t, h, 0 .. dst_width) *= scale      (the softmax scale, folded into the query)
//   and, with dst_bf16, the finished row again in bf16 (the tensor-core attention's query)
//
//   src  [tokens, heads, src_head_stride] bf16 (q: [nope | rope] per head)
//   dst  [tokens, heads, dst_head_stride] fp32 (q_cat: [q_nope @ W_UK | rope] per head)
//   cos, sin [tokens, half] fp32
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct RopeQueryParams {
  const __nv_bfloat16* src = nullptr;
  int32_t src_head_stride = 0;  // elements between heads; tokens are heads * this apart
  int32_t src_offset = 0;       // where the rope part starts in a head
  float* dst = nullptr;
  __nv_bfloat16* dst_bf16 = nullptr;  // null, or the finished rows again in bf16 (same layout)
  int32_t dst_head_stride = 0;
  int32_t dst_offset = 0;
  int32_t dst_width = 0;        // elements of a dst head that are scaled
  const float* cos = nullptr;
  const float* sin = nullptr;
  int32_t half = 0;             // rope dim / 2
  int32_t tokens = 0;
  int32_t heads = 0;
  float scale = 1.0f;
};

cudaError_t launchRopeQuery(const RopeQueryParams& p, cudaStream_t stream);

}  // namespace lg::kernels
