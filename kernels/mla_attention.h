// Absorbed multi-head latent attention over the paged latent pool, for decode
// steps and for prefill chunks over a cached prefix alike (docs/cuda.md).
//
// Every head of a query attends to the same keys: the latent rows
// [c_kv | k_pe] of its sequence's positions [0, position], read through the
// sequence's block table. With W_UK folded into the query and the softmax
// scale already applied, a score is one dot product of length latent_dim, and
// the output is the probability-weighted sum of the c_kv rows, in latent
// space (the caller applies W_UV).
//
//   q            [tokens, heads, latent_dim] fp32 (the SIMT path) or bf16 (the tensor-core path)
//   out          [tokens, heads, kv_lora] bf16
//   block_tables [sequences, max_blocks] int32
//   query_sequence, query_position [tokens] int32
//
// Long contexts are split: each of `splits` CTAs per (query, head group)
// handles a contiguous range of keys with its own online softmax and writes
// an unnormalized partial output with its max and sum; a merge kernel
// combines them with the log-sum-exp rule
//   m = max_z m_z,  l = sum_z l_z e^(m_z - m),  out = sum_z o_z e^(m_z - m) / l
// (mla_merge.h has the same arithmetic for the host, which the tests use).
//
// Two kernels compute it: a SIMT kernel (fp32 arithmetic, any pool dtype,
// any head count: the reference) and a tensor-core kernel (WMMA bf16 with
// fp32 accumulation, bf16 pools, latent_dim and kv_lora multiples of 16),
// chosen by `path`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace lg::kernels {

enum class MlaPath : uint8_t { kAuto, kSimt, kTensorCore };

struct MlaAttentionParams {
  const float* q = nullptr;              // the SIMT path's query
  const __nv_bfloat16* q_bf16 = nullptr; // the tensor-core path's query
  __nv_bfloat16* out = nullptr;
  const void* pool = nullptr;
  bool pool_bf16 = true;
  int64_t block_values = 0;  // elements per block
  int32_t layer = 0;
  int32_t block_tokens = 0;
  int32_t kv_lora = 0;       // at most 512
  int32_t latent_dim = 0;    // kv_lora + rope, at most 640
  const int32_t* block_tables = nullptr;
  int32_t max_blocks = 0;    // the block tables' row length
  const int32_t* query_sequence = nullptr;
  const int32_t* query_position = nullptr;
  int32_t tokens = 0;
  int32_t heads = 0;
  int32_t max_context = 0;   // max(position) + 1 over the queries
  // Scratch for split partials (mlaWorkspaceBytes); null or too small: no split.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int32_t splits = 0;        // 0: chosen from the shapes and the device's SM count
  MlaPath path = MlaPath::kAuto;
};

// Bytes of workspace `splits` partials need.
size_t mlaWorkspaceBytes(int32_t tokens, int32_t heads, int32_t kv_lora, int32_t splits);
// The splits `splits = 0` chooses: enough CTAs for two per SM, each split at
// least 512 keys (1 when the queries alone fill the device).
int32_t mlaDefaultSplits(int32_t tokens, int32_t heads, int32_t max_context);

// Which path kAuto takes for these parameters.
MlaPath mlaChosenPath(const MlaAttentionParams& p);

cudaError_t launchMlaAttention(const MlaAttentionParams& p, cudaStream_t stream);

}  // namespace lg::kernels
