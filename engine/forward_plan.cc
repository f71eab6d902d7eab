#include "engine/forward_plan.h"

#include <string>
#include <unordered_map>

namespace lg::engine {

Result<ForwardPlan> planForward(const ForwardBatch& batch, const ModelConfig& config, const LatentLayout& layout,
                                const BlockAllocator& blocks, int max_context, int64_t max_batch_tokens) {
  if (batch.sequences.empty()) return invalidArgument("forward: empty batch");
  ForwardPlan plan;
  int64_t total = 0;
  for (const auto& s : batch.sequences) total += static_cast<int64_t>(s.tokens.size());
  if (total > max_batch_tokens) {
    return invalidArgument("forward: " + std::to_string(total) + " new tokens in one batch exceed the limit of " +
                           std::to_string(max_batch_tokens) + " (prefill in chunks)");
  }
  plan.tokens.reserve(static_cast<size_t>(total));
  plan.positions.reserve(static_cast<size_t>(total));
  plan.sequence_of.reserve(static_cast<size_t>(total));
  plan.write_block.reserve(static_cast<size_t>(total));
  plan.write_slot.reserve(static_cast<size_t>(total));
  std::unordered_map<BlockId, size_t> writer;  // block -> sequence writing it
  const int32_t bt = layout.block_tokens;
  int64_t logit_rows = 0;
  for (size_t i = 0; i < batch.sequences.size(); ++i) {
    const SequenceStep& s = batch.sequences[i];
    const std::string who = "forward: sequence " + std::to_string(i) + ": ";
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (n == 0) return invalidArgument(who + "no new tokens");
    if (s.cached_len < 0) return invalidArgument(who + "negative cached_len");
    const int64_t end = int64_t{s.cached_len} + n;
    if (end > max_context) {
      return outOfRange(who + "context of " + std::to_string(end) + " tokens exceeds the maximum of " +
                        std::to_string(max_context));
    }
    const int64_t needed_blocks = (end + bt - 1) / bt;
    if (static_cast<int64_t>(s.blocks.size()) < needed_blocks) {
      return invalidArgument(who + "block table has " + std::to_string(s.blocks.size()) + " blocks, " +
                             std::to_string(needed_blocks) + " needed for " + std::to_string(end) + " positions");
    }
    for (int64_t b = 0; b < needed_blocks; ++b) {
      const BlockId id = s.blocks[static_cast<size_t>(b)];
      if (!blocks.isLive(id)) return invalidArgument(who + "block " + std::to_string(id) + " is not allocated");
    }
    for (int64_t b = s.cached_len / bt; b < needed_blocks; ++b) {
      const BlockId id = s.blocks[static_cast<size_t>(b)];
      if (blocks.refCount(id) > 1) {
        return invalidArgument(who + "would write block " + std::to_string(id) + ", which is shared (" +
                               std::to_string(blocks.refCount(id)) + " references); copy it first");
      }
      auto [it, inserted] = writer.emplace(id, i);
      if (!inserted && it->second != i) {
        return invalidArgument(who + "writes block " + std::to_string(id) + ", which sequence " +
                               std::to_string(it->second) + " also writes");
      }
    }
    PlannedSequence ps;
    ps.cached_len = s.cached_len;
    ps.num_tokens = static_cast<int32_t>(n);
    ps.first_token = plan.numTokens();
    ps.blocks.assign(s.blocks.begin(), s.blocks.begin() + needed_blocks);
    ps.first_logit_row = logit_rows;
    ps.num_logit_rows = s.logits == LogitsWanted::kAll ? static_cast<int32_t>(n) : s.logits == LogitsWanted::kLast ? 1 : 0;
    for (int64_t t = 0; t < n; ++t) {
      const int32_t id = s.tokens[static_cast<size_t>(t)];
      if (id < 0 || id >= config.vocab_size) {
        return invalidArgument(who + "token id " + std::to_string(id) + " at index " + std::to_string(t) +
                               " is outside the vocabulary [0, " + std::to_string(config.vocab_size) + ")");
      }
      const int32_t pos = static_cast<int32_t>(s.cached_len + t);
      plan.tokens.push_back(id);
      plan.positions.push_back(pos);
      plan.sequence_of.push_back(static_cast<int32_t>(i));
      plan.write_block.push_back(ps.blocks[static_cast<size_t>(pos / bt)]);
      plan.write_slot.push_back(pos % bt);
    }
    if (s.logits == LogitsWanted::kAll) {
      for (int64_t t = 0; t < n; ++t) plan.logit_tokens.push_back(ps.first_token + t);
    } else if (s.logits == LogitsWanted::kLast) {
      plan.logit_tokens.push_back(ps.first_token + n - 1);
    }
    logit_rows += ps.num_logit_rows;
    plan.sequences.push_back(std::move(ps));
  }
  return plan;
}

Result<BackendShape> resolveBackendShape(const ModelConfig& c, const BackendOptions& options) {
  if (options.block_tokens < 1 || options.block_tokens > 4096) {
    return invalidArgument("block_tokens must be in [1, 4096] (got " + std::to_string(options.block_tokens) + ")");
  }
  if (options.max_batch_tokens < 1) return invalidArgument("max_batch_tokens must be positive");
  BackendShape s;
  s.max_context = options.max_context > 0 ? options.max_context : c.max_position_embeddings;
  if (s.max_context > c.max_position_embeddings) {
    return invalidArgument("max_context " + std::to_string(s.max_context) +
                           " exceeds the model's max_position_embeddings " + std::to_string(c.max_position_embeddings));
  }
  int64_t num_blocks = options.num_blocks;
  if (num_blocks <= 0) num_blocks = 4 * ((int64_t{s.max_context} + options.block_tokens - 1) / options.block_tokens);
  if (num_blocks > (int64_t{1} << 30)) return invalidArgument("num_blocks too large");
  s.num_blocks = static_cast<int32_t>(num_blocks);
  s.layout.layers = c.num_hidden_layers;
  s.layout.block_tokens = options.block_tokens;
  s.layout.kv_lora_rank = c.kv_lora_rank;
  s.layout.latent_dim = c.latentDim();
  s.layout.dtype = options.latent_dtype;
  return s;
}

void ForwardPlan::layOutLogitRows(int32_t vocab_size, ForwardOutput& out) const {
  out.vocab_size = vocab_size;
  out.first_row.clear();
  out.num_rows.clear();
  for (const PlannedSequence& s : sequences) {
    out.first_row.push_back(s.first_logit_row);
    out.num_rows.push_back(s.num_logit_rows);
  }
}

Result<ForwardOutput> Backend::forward(const ForwardBatch& batch) {
  LG_ASSIGN_OR_RETURN(ForwardPlan plan,
                      planForward(batch, config(), latentLayout(), blocks(), maxContext(), maxBatchTokens()));
  ForwardOutput out;
  LG_RETURN_IF_ERROR(run(plan, out));
  return out;
}

}  // namespace lg::engine
