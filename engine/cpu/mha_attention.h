// MLA attention in the standard ("MHA") form over the paged latent cache
// (CPU), for long sequence chunks (the choice: engine/attention_form.h).
//
// The sequence's cached latents c_kv are up-projected through kv_b_proj into
// per-head k_nope and v; k_pe, shared by all heads, is read from the latent
// rows. Then causal attention per head: scores over nope + rope values,
// outputs over v values, the mask bottom-right aligned exactly as in the
// absorbed kernel (query i at position P + i sees keys [0, P + i]).
//
// Shapes for one sequence with S new queries at positions P .. P+S-1:
//   q   [S, heads, nope + rope]  q_pe roped, all of it already multiplied by
//                                the softmax scale (the q projection's layout)
//   out [S, heads, v]            (o_proj's input layout)
//
// Memory: the context is processed in chunks of keys whose up-projected K/V
// ([heads, keys, nope + v] fp32) fit kUpProjectedBytes; the online softmax
// state of every query (running max, sum, output) is carried from chunk to
// chunk ([S, heads, v + 2] fp32), so scratch does not grow with the context
// beyond the chunk. Scratch lives in huge-page HostBuffers owned by the caller.
//
// Thread-safety: like runLinear, one caller at a time per pool.
#pragma once

#include <cstdint>
#include <span>

#include "engine/cpu/host_buffer.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/mla_attention.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model/weight_view.h"

namespace lg::engine::cpu {

// Bytes of up-projected K/V held at once: 4096 keys of the bench preset (16
// heads), 512 of DeepSeek-V3 (128 heads).
constexpr int64_t kUpProjectedBytes = int64_t{64} << 20;

struct MhaShape {
  int32_t heads = 0;
  int32_t nope = 0;  // qk_nope_head_dim
  int32_t rope = 0;  // qk_rope_head_dim
  int32_t v = 0;     // v_head_dim
};

struct MhaSequence {
  const float* q = nullptr;
  float* out = nullptr;
  int32_t num_queries = 0;
  int32_t first_position = 0;
  std::span<const BlockId> blocks;
};

// Scratch reused across calls (grown to the largest seen).
struct MhaScratch {
  HostBuffer<float> latents;  // [chunk keys, latent_dim] fp32 copies of the latent rows
  HostBuffer<float> kv;       // [heads][chunk keys][nope + v] up-projected k_nope | v
  HostBuffer<float> state;    // per (head, query block): O^T [v][64], max [64], sum [64]
};

// kv_b_proj: [heads * (nope + v), kv_lora] as in the checkpoint. chunk_keys:
// keys per chunk (rounded up to a multiple of 64); 0 derives it from
// kUpProjectedBytes (tests pass small values to cross chunk edges). The
// up-projection's products are added to *up_projection_stats when given.
void mhaAttention(ThreadPool& pool, const LatentPoolView& pool_view, int32_t layer, const WeightView& kv_b_proj,
                  const MhaShape& shape, const MhaSequence& sequence, MhaScratch& scratch, int32_t chunk_keys = 0,
                  LinearStats* up_projection_stats = nullptr);

}  // namespace lg::engine::cpu
