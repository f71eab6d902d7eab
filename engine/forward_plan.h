// planForward: the backend-independent half of a forward call. It validates a
// batch against the model, the context limit and the block pool, and lays it
// out as flat per-token arrays (ids, positions, latent slots) that any backend
// can consume (the CUDA backend uploads them as they are).
//
// Rejected with a Status naming the sequence and value: empty batch or empty
// token list, token ids outside the vocabulary, cached_len out of range,
// context longer than the maximum, a block table too short or naming a free
// block, a write into a block shared with another sequence (refCount > 1), two
// sequences writing the same block, more new tokens than the batch limit.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"

namespace lg::engine {

struct PlannedSequence {
  int32_t cached_len = 0;
  int32_t num_tokens = 0;
  int64_t first_token = 0;  // index of its first new token in the flat arrays
  std::vector<BlockId> blocks;
  int64_t first_logit_row = 0;
  int32_t num_logit_rows = 0;
};

class ForwardPlan {
 public:
  std::vector<PlannedSequence> sequences;
  std::vector<int32_t> tokens;        // [T] new token ids, sequence after sequence
  std::vector<int32_t> positions;     // [T]
  std::vector<int32_t> sequence_of;   // [T]
  std::vector<BlockId> write_block;   // [T] block receiving the token's latents
  std::vector<int32_t> write_slot;    // [T] slot inside that block
  std::vector<int64_t> logit_tokens;  // flat token indices whose logits are wanted, in output order

  int64_t numTokens() const { return static_cast<int64_t>(tokens.size()); }
  // Where each sequence's logits rows lie in `out` (vocab_size, first_row,
  // num_rows): the same for every backend; the logits themselves are its own.
  void layOutLogitRows(int32_t vocab_size, ForwardOutput& out) const;
};

Result<ForwardPlan> planForward(const ForwardBatch& batch, const ModelConfig& config, const LatentLayout& layout,
                                const BlockAllocator& blocks, int max_context, int64_t max_batch_tokens);

}  // namespace lg::engine
