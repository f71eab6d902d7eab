// Random weights made on the device from a seed (benchmarks at real model
// shapes without a checkpoint): element i = scale * u(seed, i) with u uniform
// in [-1, 1) from a counter-based hash, so a buffer is the same for the same
// seed on every run and device. bf16 or fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lg::kernels {

struct RandomFillParams {
  void* data = nullptr;
  bool bf16 = true;
  int64_t count = 0;
  uint64_t seed = 0;
  float scale = 1.0f;
  float offset = 0.0f;  // added after scaling (norm weights: 1 +- a little)
};

cudaError_t launchRandomFill(const RandomFillParams& p, cudaStream_t stream);

}  // namespace lg::kernels
