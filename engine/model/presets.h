// Random-weight checkpoints for demos and benchmarks (`latentgate model init`).
//
// Presets (both the DeepSeek-V3 architecture: q LoRA, MLA with a 576-wide-class
// latent, sigmoid noaux_tc group routing, shared expert, yarn RoPE, the real
// V3 tokenizer with vocabulary 129,280):
//   demo:  small; loads and answers in seconds on two cores (the default model
//          of `latentgate serve`);
//   bench: V2-Lite-class attention (16 heads, kv_lora 512, rope 64) with fewer,
//          narrower layers; an 8,000-token prefill takes tens of seconds on a
//          2-core AVX-512 machine; used by the cache and gateway benchmarks.
// Random weights produce noise, not language: point --model at a real
// checkpoint for meaningful replies (docs/engine.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/model/model_config.h"

namespace lg::engine {

std::vector<std::string> presetNames();
Result<ModelConfig> presetConfig(std::string_view name);

struct CheckpointInitOptions {
  uint64_t seed = 0;
  // > 0: about this fraction of the ordinary tokens become end tokens,
  // after which EOS is likely (presets.cc: a shared embedding component that
  // the EOS row reads), so sampled replies end after roughly 1/rate tokens.
  // With plain random weights EOS is as rare as any of 129k tokens and
  // replies run to max_tokens, which clients such as Codex CLI treat as a
  // failed turn. 0: plain random weights (benchmarks want fixed lengths).
  float end_token_rate = 0.0f;
  // Called after each tensor with bytes written so far and the total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

// How `model init --preset NAME` and `serve`'s demo model fill the weights:
// demo replies end (end_token_rate), bench replies run to their length.
CheckpointInitOptions presetInitOptions(std::string_view name);

// Writes DIR/config.json, DIR/model.safetensors (BF16 weights, uniform with
// std 0.02 like transformers' initializer_range, end tokens as the options
// say; norms 1; router bias 0) and
// the embedded tokenizer files. Creates DIR if needed; the weights are
// deterministic for a given config and seed.
Status writeRandomCheckpoint(const ModelConfig& config, const std::string& dir, const CheckpointInitOptions& options);

// The embedded DeepSeek-V3 tokenizer files.
std::string_view embeddedTokenizerJson();
std::string_view embeddedTokenizerConfigJson();

}  // namespace lg::engine
