// Absorbed multi-head latent attention over the paged latent cache (CPU).
//
// Every head attends to the same keys: the latent rows [c_kv | k_pe] of the
// sequence's positions, read from its blocks. With W_UK folded into the query
// (q_lat = q_nope @ W_UK) and q_pe appended, a score is one dot product of
// length kv_lora + rope with a cached row, and the output is the probability
// weighted sum of c_kv rows, in latent space (W_UV is applied by the caller).
//
// Shapes for one sequence with S new queries at positions P .. P+S-1:
//   q   [S, heads, latent_dim]  (already multiplied by the softmax scale)
//   out [S, heads, kv_lora]
//   query i sees keys [0, P + i] (the mask is bottom-right aligned).
// Keys are processed in tiles of 64 with an online softmax, so memory does not
// grow with the context; tiles are gathered across blocks, so any block size
// works.
#pragma once

#include <cstdint>
#include <span>

#include "engine/backend.h"
#include "engine/cpu/thread_pool.h"

namespace lg::engine::cpu {

// Read access to the latent pool's storage.
struct LatentPoolView {
  const uint8_t* base = nullptr;
  LatentLayout layout;

  const uint8_t* row(BlockId block, int32_t layer, int32_t slot) const {
    return base + static_cast<size_t>(block) * layout.blockBytes() + layout.offset(layer, slot) * layout.elementBytes();
  }
};

// fp32 copies of the latent rows of positions [first, first + count) of one
// layer, gathered across the sequence's blocks (BF16 rows are widened):
// dst [count][latent_dim].
void copyLatentRows(const LatentPoolView& pool_view, std::span<const BlockId> blocks, int32_t layer, int32_t first,
                    int32_t count, float* dst);

struct AttentionSequence {
  const float* q = nullptr;
  float* out = nullptr;
  int32_t num_queries = 0;
  int32_t first_position = 0;
  std::span<const BlockId> blocks;
};

void mlaAttention(ThreadPool& pool, const LatentPoolView& pool_view, int32_t layer, int32_t heads,
                  std::span<const AttentionSequence> sequences);

}  // namespace lg::engine::cpu
