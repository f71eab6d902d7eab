#include "golden_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/safetensors.h"

namespace lg::engine::testing {

// LG_FIXTURES_DIR in the environment moves them (a test binary run on
// another machine, scripts/device-check.sh), else the source tree's.
std::string fixtureDir(const std::string& name) {
  const char* moved = std::getenv("LG_FIXTURES_DIR");
  return std::string(moved != nullptr ? moved : LG_FIXTURES_DIR) + "/" + name;
}

Golden loadGolden(const std::string& name) {
  Golden g;
  auto file = SafetensorsFile::open(fixtureDir(name) + "/golden.safetensors");
  EXPECT_TRUE(file.isOk()) << file.status().toString();
  if (!file.isOk()) return g;
  const TensorInfo* ids = file->find("ids");
  const TensorInfo* logits = file->find("logits");
  const TensorInfo* inv = file->find("rope_inv_freq");
  EXPECT_TRUE(ids && logits && inv);
  if (!ids || !logits || !inv) return g;
  EXPECT_EQ(ids->dtype, DType::kI64);
  for (int64_t i = 0; i < ids->numel(); ++i) {
    int64_t v;
    std::memcpy(&v, file->data(*ids) + 8 * i, 8);
    g.ids.push_back(static_cast<int32_t>(v));
  }
  g.vocab = logits->shape[1];
  g.logits.resize(static_cast<size_t>(logits->numel()));
  std::memcpy(g.logits.data(), file->data(*logits), g.logits.size() * 4);
  g.rope_inv_freq.resize(static_cast<size_t>(inv->numel()));
  std::memcpy(g.rope_inv_freq.data(), file->data(*inv), g.rope_inv_freq.size() * 4);
  g.prompt_len = std::stoll(file->metadata().at("prompt_len"));
  g.attn_scaling = std::stod(file->metadata().at("attn_scaling"));
  return g;
}

std::unique_ptr<Backend> makeBackend(const std::string& name, LatentDType dtype, int block_tokens, int threads) {
  BackendOptions options;
  options.threads = threads;
  options.block_tokens = block_tokens;
  options.latent_dtype = dtype;
  return makeBackend(name, options);
}

std::unique_ptr<Backend> makeBackend(const std::string& name, const BackendOptions& options) {
  auto model = Model::load(fixtureDir(name));
  EXPECT_TRUE(model.isOk()) << model.status().toString();
  if (!model.isOk()) return nullptr;
  auto backend = createCpuBackend(std::move(model).value(), options);
  EXPECT_TRUE(backend.isOk()) << backend.status().toString();
  if (!backend.isOk()) return nullptr;
  return std::move(backend).value();
}

std::unique_ptr<Backend> createCpuBackendForTest(std::unique_ptr<Model> model, const BackendOptions& options) {
  auto backend = createCpuBackend(std::move(model), options);
  EXPECT_TRUE(backend.isOk()) << backend.status().toString();
  if (!backend.isOk()) return nullptr;
  return std::move(backend).value();
}

double maxAbsDiff(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab, int64_t row0, int64_t row1) {
  double m = 0;
  for (int64_t i = row0 * vocab; i < row1 * vocab; ++i) {
    const double d = std::fabs(double(a[static_cast<size_t>(i)]) - double(b[static_cast<size_t>(i)]));
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;
  }
  return m;
}

}  // namespace lg::engine::testing
