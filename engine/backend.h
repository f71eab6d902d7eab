// Backend: the engine's compute interface. A backend owns a loaded model, the
// latent block pool (tier 0 of the prefix cache) and the compute resources, and
// runs the forward pass for a batch of sequences.
//
// The batch shape is the scheduler's: any mix of decode steps (one new token
// over a cached prefix) and prefill chunks (many new tokens over a cached
// prefix) in one call, so that every weight GEMM is batched across sequences.
// Each sequence brings its block table, how many positions are already cached
// and its new tokens; the backend writes the new tokens' latents into the
// blocks and returns logits for the positions asked for.
//
// forward() = planForward() (backend-independent validation and layout, see
// forward_plan.h) + run(). The CPU backend (cpu_backend.h) is the reference and
// always builds; a CUDA backend implements the same interface, and only it and
// kernels/ include CUDA headers.
//
// Latent layout: block b holds, for every layer, the latents of positions
// [i*block_tokens, (i+1)*block_tokens) of the sequence whose table lists b at
// index i: [layers][block_tokens][kv_lora_rank + rope_dim] (normed c_kv, then
// roped k_pe, interleaved pairs) in the pool's dtype. exportBlock/importBlock
// move exactly these bytes, so the cache can store and restore blocks without
// knowing the backend's memory.
//
// Thread-safety: a Backend is used by one thread at a time (the engine thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/block_allocator.h"
#include "engine/model/model.h"

namespace lg::engine {

enum class LatentDType { kF32, kBF16 };

struct LatentLayout {
  int32_t layers = 0;
  int32_t block_tokens = 0;
  int32_t kv_lora_rank = 0;
  int32_t latent_dim = 0;  // kv_lora_rank + qk_rope_head_dim
  LatentDType dtype = LatentDType::kBF16;

  size_t elementBytes() const { return dtype == LatentDType::kF32 ? 4 : 2; }
  // Element offset of (layer, slot) inside a block.
  size_t offset(int32_t layer, int32_t slot) const {
    return (static_cast<size_t>(layer) * block_tokens + slot) * static_cast<size_t>(latent_dim);
  }
  size_t blockBytes() const {
    return static_cast<size_t>(layers) * block_tokens * static_cast<size_t>(latent_dim) * elementBytes();
  }
  // Bytes one token occupies across all layers.
  size_t tokenBytes() const { return static_cast<size_t>(layers) * latent_dim * elementBytes(); }
};

enum class LogitsWanted { kNone, kLast, kAll };

// One sequence's part of a batch. Spans must stay valid during forward().
struct SequenceStep {
  std::span<const BlockId> blocks;  // covers at least cached_len + tokens.size() positions
  int32_t cached_len = 0;           // positions [0, cached_len) already hold latents
  std::span<const int32_t> tokens;  // new tokens, at positions cached_len, cached_len + 1, ...
  LogitsWanted logits = LogitsWanted::kLast;
};

struct ForwardBatch {
  std::vector<SequenceStep> sequences;
};

// Where a forward call spent its time (wall clock) and arithmetic.
struct ForwardTiming {
  double total_seconds = 0;
  double linear_seconds = 0;  // weight GEMMs / GEMVs (attention projections, MLPs, experts, lm_head)
  double linear_flops = 0;
  double attention_seconds = 0;  // softmax(q . latents) . c_kv over the cache
  double attention_flops = 0;
};

struct ForwardOutput {
  ForwardTiming timing;
  int32_t vocab_size = 0;
  std::vector<float> logits;       // [rows, vocab_size]
  std::vector<int64_t> first_row;  // per sequence: its first row (rows follow position order)
  std::vector<int32_t> num_rows;   // per sequence: 0, 1 (kLast) or tokens.size() (kAll)

  const float* row(size_t sequence, int32_t i) const {
    return logits.data() + (first_row[sequence] + i) * static_cast<int64_t>(vocab_size);
  }
};

struct BackendOptions {
  int threads = 0;       // 0: one per hardware thread
  int block_tokens = 64;  // cache.block_tokens
  LatentDType latent_dtype = LatentDType::kF32;  // BF16 misses the 1e-3 golden bar (docs/engine.md)
  int64_t num_blocks = 0;  // pool capacity; 0: enough for 4 sequences of max_context
  int max_context = 0;     // 0: the model's max_position_embeddings
  int64_t max_batch_tokens = 16384;  // new tokens per forward() (bounds activation memory)
};

class ForwardPlan;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual const Model& model() const = 0;
  const ModelConfig& config() const { return model().config(); }
  virtual const LatentLayout& latentLayout() const = 0;
  virtual int maxContext() const = 0;
  virtual int64_t maxBatchTokens() const = 0;
  virtual BlockAllocator& blocks() = 0;
  virtual const BlockAllocator& blocks() const = 0;

  // Validates the batch (token ids, lengths, block tables, shared blocks) and
  // runs it. On error nothing was written.
  Result<ForwardOutput> forward(const ForwardBatch& batch);

  // Runs a plan made by planForward against this backend's pool.
  virtual Status run(const ForwardPlan& plan, ForwardOutput& out) = 0;

  // Block contents in the documented layout; `bytes` must be blockBytes() long.
  virtual Status exportBlock(BlockId id, std::span<uint8_t> bytes) const = 0;
  virtual Status importBlock(BlockId id, std::span<const uint8_t> bytes) = 0;
  virtual Status copyBlock(BlockId src, BlockId dst) = 0;
};

}  // namespace lg::engine
