// Which of MLA's two equivalent attention forms a sequence chunk runs in, and
// what each costs. Backend-independent: every backend makes the same choice
// from the same arithmetic.
//
// - Absorbed: W_UK is folded into the query (q_lat = q_nope @ W_UK), scores
//   are taken against the cached latent rows [c_kv | k_pe] (kv_lora + rope
//   wide) and the output, in latent space, goes back through W_UV. Nothing
//   is materialized per key, so a step over a long cached prefix reads only
//   the latents: the form for decode and short suffixes.
// - Standard ("MHA"): the chunk's whole context c_kv is up-projected through
//   kv_b_proj into per-head k_nope and v, then ordinary causal attention with
//   head dim nope + rope for scores and v for values: the form for long fresh
//   chunks, where the per-pair work dominates.
#pragma once

#include <cstdint>

#include "engine/backend.h"
#include "engine/model/model_config.h"

namespace lg::engine {

struct AttentionArithmetic {
  double absorbed_flops = 0;
  double standard_flops = 0;
};

// Arithmetic (2 flops per multiply-add) of one sequence chunk of `num_tokens`
// queries over `cached_len` cached positions, in each form, counting exactly
// the products the CPU backend runs (cpu_backend.cc, mla_attention.cc,
// mha_attention.cc); `pairs` is the number of visible (query, key) pairs,
// query i seeing keys [0, cached_len + i]:
//   absorbed = S x heads x (nope x kv_lora + kv_lora x v)       q @ W_UK, o_lat @ W_UV^T
//            + pairs x heads x ((kv_lora + rope) + kv_lora)      scores, P @ c_kv
//   standard = ctx x kv_lora x heads x (nope + v)               c_kv @ kv_b_proj^T, every key
//            + pairs x heads x ((nope + rope) + v)               scores, P @ v
// with S = num_tokens, ctx = cached_len + S. The softmax (one exp per pair and
// head) is the same in both and left out. For the bench preset (kv_lora 512,
// nope = v = 128, rope 64) the pair term is 3.4x smaller in the standard form
// while its projection covers ctx keys instead of S queries, so a fresh chunk
// is always cheaper standard and a chunk over a long cached prefix pays off
// from about 170 new tokens on (independent of the head count).
AttentionArithmetic attentionArithmetic(const ModelConfig& config, int64_t cached_len, int64_t num_tokens);

// The form a chunk runs in: `option` when forced, else the cheaper one by
// attentionArithmetic (absorbed on a tie). Never returns kAuto.
AttentionForm chooseAttentionForm(AttentionForm option, const ModelConfig& config, int64_t cached_len,
                                  int64_t num_tokens);

}  // namespace lg::engine
