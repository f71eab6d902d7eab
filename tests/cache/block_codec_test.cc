#include "cache/block_codec.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace lg::cache {
namespace {

struct Fixture {
  BlockGeometry geometry{3, 8, 80};
  std::vector<int32_t> ids{1, 2, 3, 4, 5, 6, 7, 8};
  Digest model = sha256("model");
  Digest key = sha256("key");
  Digest ns_tag = sha256("team:a");
  CacheSecret secret = CacheSecret::fromBytesForTest("installation");
  std::vector<float> latents;
  Fixture() {
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.f, 2.f);
    latents.resize(geometry.values());
    for (float& v : latents) v = dist(rng);
  }
  BlockIdentity identity() const { return {key, model, ns_tag, ids}; }
};

TEST(BlockCodecTest, RoundTripsEachDtype) {
  Fixture f;
  for (StoredDType dtype : {StoredDType::kF32, StoredDType::kBF16, StoredDType::kInt8}) {
    const std::string value = encodeBlock(f.geometry, f.identity(), f.latents, dtype, f.secret);
    EXPECT_EQ(value.size(), storedBlockBytes(f.geometry, dtype));
    std::vector<float> out(f.geometry.values());
    ASSERT_TRUE(decodeBlock(value, f.geometry, f.identity(), dtype, f.secret, out).isOk()) << storedDTypeName(dtype);
    double max_rel = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      max_rel = std::max(max_rel, std::fabs(double(out[i]) - f.latents[i]) / 8.0);  // |x| <~ 8
    }
    switch (dtype) {
      case StoredDType::kF32: EXPECT_EQ(out, f.latents); break;
      case StoredDType::kBF16: EXPECT_LT(max_rel, 1.0 / 256); break;
      case StoredDType::kInt8: EXPECT_LT(max_rel, 1.0 / 100); break;
    }
  }
  EXPECT_LT(storedBlockBytes(f.geometry, StoredDType::kInt8), storedBlockBytes(f.geometry, StoredDType::kBF16));
}

TEST(BlockCodecTest, EveryFlippedByteIsRejected) {
  Fixture f;
  const std::string good = encodeBlock(f.geometry, f.identity(), f.latents, StoredDType::kBF16, f.secret);
  std::vector<float> out(f.geometry.values());
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    EXPECT_EQ(decodeBlock(bad, f.geometry, f.identity(), StoredDType::kBF16, f.secret, out).code(), StatusCode::kDataLoss) << "byte " << i;
  }
}

TEST(BlockCodecTest, WrongExpectationsAreRejectedWithReasons) {
  Fixture f;
  const std::string good = encodeBlock(f.geometry, f.identity(), f.latents, StoredDType::kBF16, f.secret);
  std::vector<float> out(f.geometry.values());
  RejectReason reason{};

  BlockIdentity other = f.identity();
  other.model = sha256("other model");
  EXPECT_FALSE(decodeBlock(good, f.geometry, other, StoredDType::kBF16, f.secret, out, &reason).isOk());
  EXPECT_EQ(reason, RejectReason::kModel);

  other = f.identity();
  other.key = sha256("other key");
  EXPECT_FALSE(decodeBlock(good, f.geometry, other, StoredDType::kBF16, f.secret, out, &reason).isOk());
  EXPECT_EQ(reason, RejectReason::kKey);

  std::vector<int32_t> ids = f.ids;
  ids[3] = 42;
  other = f.identity();
  other.ids = ids;
  EXPECT_FALSE(decodeBlock(good, f.geometry, other, StoredDType::kBF16, f.secret, out, &reason).isOk());
  EXPECT_EQ(reason, RejectReason::kTokens);

  BlockGeometry g = f.geometry;
  g.layers = 4;
  std::vector<float> out4(g.values());
  EXPECT_FALSE(decodeBlock(good, g, f.identity(), StoredDType::kBF16, f.secret, out4, &reason).isOk());
  EXPECT_EQ(reason, RejectReason::kGeometry);

  EXPECT_FALSE(decodeBlock(good.substr(0, good.size() - 1), f.geometry, f.identity(), StoredDType::kBF16, f.secret, out, &reason).isOk());
  EXPECT_EQ(reason, RejectReason::kTruncated);
  EXPECT_FALSE(decodeBlock(good.substr(0, 10), f.geometry, f.identity(), StoredDType::kBF16, f.secret, out, &reason).isOk());
  EXPECT_EQ(reason, RejectReason::kTruncated);
  EXPECT_FALSE(decodeBlock("", f.geometry, f.identity(), StoredDType::kBF16, f.secret, out, &reason).isOk());
}

}  // namespace
}  // namespace lg::cache
