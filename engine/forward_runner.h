// runForward: feeds a whole token sequence through a backend and collects the
// logits of every position, in one of the modes the golden tests and
// `latentgate forward` use:
//   chunk == 0, decode_from < 0: one prefill of all tokens (split at the
//     backend's max_batch_tokens if longer);
//   chunk > 0: prefill in chunks of `chunk` tokens, each over the cached prefix;
//   decode_from = K: prefill the first K tokens (chunked if chunk > 0), then one
//     token per step through the latent cache.
// runForwardFrom starts from a sequence that already holds a prefix (blocks a
// prefix cache handed over, SequenceBlocks::adopt): only the positions after
// it are computed, in the same modes, and the prefix's logit rows are NaN.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/sequence_blocks.h"

namespace lg::engine {

struct ForwardRunOptions {
  int32_t chunk = 0;
  int32_t decode_from = -1;
};

struct ForwardRunStats {
  int64_t tokens = 0;
  int64_t cached_tokens = 0;    // held by the sequence before the run (reused, not computed)
  int64_t computed_tokens = 0;  // ran through the model
  int64_t prefill_calls = 0;
  int64_t decode_steps = 0;
  double prefill_seconds = 0;
  double prefill_attention_seconds = 0;  // the part of prefill_seconds spent in attention
  double decode_seconds = 0;
};

// Returns logits [ids.size(), vocab] (row-major). The sequence's blocks are
// released before returning.
Result<std::vector<float>> runForward(Backend& backend, std::span<const int32_t> ids, const ForwardRunOptions& options,
                                      ForwardRunStats* stats = nullptr);

// `seq` holds ids[0, seq.length()) already (seq.length() < ids.size()); runs
// the rest and returns logits [ids.size(), vocab] whose first seq.length()
// rows are NaN (never computed). `seq` keeps its blocks, now covering every
// position, so the caller can publish them to a prefix cache.
Result<std::vector<float>> runForwardFrom(Backend& backend, SequenceBlocks& seq, std::span<const int32_t> ids,
                                          const ForwardRunOptions& options, ForwardRunStats* stats = nullptr);

}  // namespace lg::engine
