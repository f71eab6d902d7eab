// Sampling on the device, one token per logits row: greedy (argmax, ties to
// the lower id) at temperature 0, else a draw from softmax(logits / T) by the
// Gumbel-max rule, argmax(logits / T + G) with G = -log(-log(u)) from a
// counter-based generator (Philox) keyed by (seed, row), so a draw is
// reproducible and needs no state between steps. Top-p and top-k stay in the
// host sampler (engine/sampler.h), which the scheduler uses today; this
// kernel serves batched greedy and temperature sampling without copying the
// logits back.
//
//   logits [rows, vocab] fp32;  temperature, seed [rows];  out [rows] int32
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct SamplingParams {
  const float* logits = nullptr;
  int64_t ld = 0;
  int32_t rows = 0;
  int32_t vocab = 0;
  const float* temperature = nullptr;  // null: greedy for every row
  const uint64_t* seed = nullptr;
  int32_t* out = nullptr;
};

cudaError_t launchSampling(const SamplingParams& p, cudaStream_t stream);

}  // namespace lg::kernels
