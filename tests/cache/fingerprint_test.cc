#include "cache/fingerprint.h"

#include <numeric>

#include <gtest/gtest.h>

namespace lg::cache {
namespace {

std::vector<int32_t> iota(size_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(FingerprintTest, Sha256KnownAnswer) {
  EXPECT_EQ(sha256("abc").hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256("").hex(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(FingerprintTest, ChainKeysCoverWholeBlocksOnly) {
  const Digest model = sha256("model");
  auto ids = iota(64 * 3 + 10);
  auto keys = chainBlockKeys("team-a", model, ids, 64);
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(chainBlockKeys("team-a", model, std::span(ids).first(63), 64).size(), 0u);
  // Block i's key depends on every earlier token.
  auto other = ids;
  other[5] = 999;
  auto other_keys = chainBlockKeys("team-a", model, other, 64);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(keys[i], other_keys[i]);
  // ...and not on later ones.
  other = ids;
  other[64 * 2 + 1] = 999;
  other_keys = chainBlockKeys("team-a", model, other, 64);
  EXPECT_EQ(keys[0], other_keys[0]);
  EXPECT_EQ(keys[1], other_keys[1]);
  EXPECT_NE(keys[2], other_keys[2]);
  // Incremental and batch computation agree.
  EXPECT_EQ(blockKey("team-a", model, keys[0], std::span(ids).subspan(64, 64)), keys[1]);
}

TEST(FingerprintTest, NamespaceAndModelSeparate) {
  auto ids = iota(128);
  const Digest m1 = sha256("m1"), m2 = sha256("m2");
  auto a = chainBlockKeys("team-a", m1, ids, 64);
  EXPECT_NE(a[0], chainBlockKeys("team-b", m1, ids, 64)[0]);
  EXPECT_NE(a[0], chainBlockKeys("team-a", m2, ids, 64)[0]);
  // Length-prefixed fields: ("ab","c...") and ("a","bc...") cannot collide by concatenation.
  EXPECT_NE(chainBlockKeys("ab", m1, ids, 64)[0], chainBlockKeys("a", m1, ids, 64)[0]);
}

}  // namespace
}  // namespace lg::cache
