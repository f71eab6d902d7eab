// CacheSecret: created once, private, reused, and refused when others could
// read it; real files in a temp dir.
#include "cache/cache_secret.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/cache/cache_test_util.h"

namespace lg::cache::testing {
namespace {

TEST(CacheSecretTest, CreatedPrivateReusedAndRefusedWhenOthersCanReadIt) {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/secrets/kv.key";
  auto first = CacheSecret::loadOrCreate(path);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(CacheSecret::kBytes));

  // A second start reads the same key: the same MACs.
  auto again = CacheSecret::loadOrCreate(path);
  ASSERT_TRUE(again.isOk());
  EXPECT_EQ(first->mac("block"), again->mac("block"));
  EXPECT_NE(first->mac("block"), first->mac("other block"));
  EXPECT_NE(first->keyedDigest("a", "bc"), first->keyedDigest("ab", "c"));  // domains are length-delimited

  // Another installation has another key.
  auto other = CacheSecret::loadOrCreate(dir.path() + "/other.key");
  ASSERT_TRUE(other.isOk());
  EXPECT_NE(first->mac("block"), other->mac("block"));

  // Readable by others: refused, named, not silently used.
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto open = CacheSecret::loadOrCreate(path);
  ASSERT_FALSE(open.isOk());
  EXPECT_EQ(open.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(open.status().message().find("0644"), std::string::npos) << open.status().message();

  // Truncated: refused.
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/short.key", "abc", 0600).isOk());
  EXPECT_EQ(CacheSecret::loadOrCreate(dir.path() + "/short.key").status().code(), StatusCode::kDataLoss);
  // One byte too long (the read that detects it once wrote past the key) and
  // far too long: refused, never truncated into a key.
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/long.key", std::string(CacheSecret::kBytes + 1, 'k'), 0600).isOk());
  EXPECT_EQ(CacheSecret::loadOrCreate(dir.path() + "/long.key").status().code(), StatusCode::kDataLoss);
  ASSERT_TRUE(writeFileAtomic(dir.path() + "/longer.key", std::string(4096, 'k'), 0600).isOk());
  EXPECT_EQ(CacheSecret::loadOrCreate(dir.path() + "/longer.key").status().code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace lg::cache::testing
