// Shared helpers for the engine's golden tests: the fixture checkpoints and
// their transformers-generated golden.safetensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace lg::engine::testing {

struct Golden {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [ids.size(), vocab]
  std::vector<float> rope_inv_freq;
  int64_t vocab = 0;
  int64_t prompt_len = 0;
  double attn_scaling = 0;
};

std::string fixtureDir(const std::string& name);
Golden loadGolden(const std::string& name);  // fails the test on error
std::unique_ptr<Backend> makeBackend(const std::string& name, LatentDType dtype = LatentDType::kF32,
                                     int block_tokens = 64, int threads = 2);
std::unique_ptr<Backend> makeBackend(const std::string& name, const BackendOptions& options);
// createCpuBackend with EXPECTs (nullptr on failure).
std::unique_ptr<Backend> createCpuBackendForTest(std::unique_ptr<Model> model, const BackendOptions& options);
// Largest |a - b| over the rows [row0, row1) of two [rows, vocab] arrays.
double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab, int64_t row0, int64_t row1);

}  // namespace lg::engine::testing
