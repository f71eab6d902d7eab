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
// The latent block pool (latent_pool.h) belongs to the backend; the prefix
// cache and SequenceBlocks see only that interface.
//
// Thread-safety: forward() and run() are called by one thread at a time (the
// engine thread). latentPool() and the const accessors may be called from any
// thread; the pool's own contract (latent_pool.h) says which blocks other
// threads may read and write while a forward pass runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/block_allocator.h"
#include "engine/latent_pool.h"
#include "engine/model/model.h"

namespace lg::engine {

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
  // Weight GEMMs / GEMVs that every attention form runs alike: q, kv_a and
  // o_proj, MLPs, experts, router, lm_head.
  double linear_seconds = 0;
  double linear_flops = 0;
  // Attention over the cache in the form each sequence chunk chose
  // (attention_form.h), with the products that belong to that form: absorbed,
  // q_nope @ W_UK, the kernel over the latents and o_lat @ W_UV^T; standard,
  // the up-projection of the context through kv_b_proj and the kernel.
  // attention_flops is attentionArithmetic() of the chosen forms.
  double attention_seconds = 0;
  double attention_flops = 0;
  int32_t standard_form_sequences = 0;  // sequence chunks that ran in the standard form
  // Memory the step read, for bandwidth bounds: every weight matrix a product
  // used, counted once per product (all dense weights, the routed experts the
  // batch actually went to, lm_head, the embedding rows), and the latent rows
  // attention read, counted once per layer and sequence.
  double weight_bytes_read = 0;
  double latent_bytes_read = 0;
  int32_t experts_touched = 0;  // distinct routed experts, summed over the MoE layers
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

// How attention is computed (attention_form.h): the cheaper form per sequence
// chunk, or one form forced for every chunk, decode steps included (to compare
// the two; the standard form is slow for decode).
enum class AttentionForm : uint8_t { kAuto, kAbsorbed, kStandard };

struct BackendOptions {
  int threads = 0;       // 0: one per hardware thread
  int block_tokens = 64;  // cache.block_tokens
  LatentDType latent_dtype = LatentDType::kF32;  // BF16 misses the 1e-3 golden bar (docs/engine.md)
  int64_t num_blocks = 0;  // pool capacity; 0: enough for 4 sequences of max_context
  int max_context = 0;     // 0: the model's max_position_embeddings
  int64_t max_batch_tokens = 16384;  // new tokens per forward() (bounds activation memory)
  AttentionForm attention_form = AttentionForm::kAuto;  // engine.prefill_attention
};

class ForwardPlan;

// What BackendOptions resolve to for a model, checked the same way for every
// backend: the context limit (the model's unless smaller), the pool's block
// count (default: 4 sequences of max_context) and its layout.
struct BackendShape {
  int max_context = 0;
  int32_t num_blocks = 0;
  LatentLayout layout;
};
Result<BackendShape> resolveBackendShape(const ModelConfig& config, const BackendOptions& options);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string_view name() const = 0;
  virtual const Model& model() const = 0;
  const ModelConfig& config() const { return model().config(); }
  virtual LatentPool& latentPool() = 0;
  virtual const LatentPool& latentPool() const = 0;
  virtual int maxContext() const = 0;
  virtual int64_t maxBatchTokens() const = 0;
  // Shorthands for the pool's layout and allocator.
  const LatentLayout& latentLayout() const { return latentPool().layout(); }
  BlockAllocator& blocks() { return latentPool().allocator(); }
  const BlockAllocator& blocks() const { return latentPool().allocator(); }

  // Validates the batch (token ids, lengths, block tables, shared blocks) and
  // runs it. On error nothing was written.
  Result<ForwardOutput> forward(const ForwardBatch& batch);

  // Runs a plan made by planForward against this backend's pool.
  virtual Status run(const ForwardPlan& plan, ForwardOutput& out) = 0;
};

}  // namespace lg::engine
