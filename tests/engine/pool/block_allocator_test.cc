// BlockAllocator: reference counting, all-or-nothing allocation, the
// reclaimer, and the invariants that must stop the process in every build
// (this suite runs in the default RelWithDebInfo build, where NDEBUG removes
// asserts: the death tests prove the checks are not asserts).
#include "engine/block_allocator.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace lg::engine {
namespace {

TEST(BlockAllocatorTest, CountsReferencesAndFreesAtZero) {
  BlockAllocator a(4);
  EXPECT_EQ(a.capacity(), 4);
  auto b = a.allocate();
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(a.refCount(*b), 1);
  EXPECT_EQ(a.numUsed(), 1);
  a.retain(*b);
  EXPECT_EQ(a.refCount(*b), 2);
  a.release(*b);
  EXPECT_TRUE(a.isLive(*b));
  a.release(*b);
  EXPECT_FALSE(a.isLive(*b));
  EXPECT_EQ(a.numFree(), 4);
  EXPECT_EQ(a.refCount(-1), 0);
  EXPECT_EQ(a.refCount(4), 0);
}

TEST(BlockAllocatorTest, AllocationIsAllOrNothing) {
  BlockAllocator a(4);
  std::vector<BlockId> got;
  ASSERT_TRUE(a.allocate(3, got).isOk());
  EXPECT_EQ(got.size(), 3u);
  std::vector<BlockId> more;
  const Status s = a.allocate(2, more);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("2 blocks needed, 1 free of 4"), std::string::npos) << s.message();
  EXPECT_TRUE(more.empty());
  EXPECT_EQ(a.numFree(), 1);
  for (BlockId b : got) a.release(b);
}

TEST(BlockAllocatorTest, ReclaimerFreesBlocksForAnAllocation) {
  BlockAllocator a(2);
  std::vector<BlockId> cached;
  ASSERT_TRUE(a.allocate(2, cached).isOk());
  int calls = 0;
  a.setReclaimer([&](int32_t needed) {
    ++calls;
    int32_t freed = 0;
    while (freed < needed && !cached.empty()) {
      a.release(cached.back());
      cached.pop_back();
      ++freed;
    }
    return freed;
  });
  std::vector<BlockId> got;
  ASSERT_TRUE(a.allocate(2, got).isOk());
  EXPECT_GE(calls, 1);
  EXPECT_TRUE(cached.empty());
  // Nothing left to reclaim: the allocation fails instead of looping.
  std::vector<BlockId> more;
  EXPECT_EQ(a.allocate(1, more).code(), StatusCode::kResourceExhausted);
  a.setReclaimer(nullptr);
  for (BlockId b : got) a.release(b);
}

TEST(BlockAllocatorTest, ConcurrentRetainAndReleaseBalance) {
  BlockAllocator a(8);
  std::vector<BlockId> blocks;
  ASSERT_TRUE(a.allocate(8, blocks).isOk());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        const BlockId b = blocks[static_cast<size_t>(i) % blocks.size()];
        a.retain(b);
        a.release(b);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (BlockId b : blocks) {
    EXPECT_EQ(a.refCount(b), 1);
    a.release(b);
  }
  EXPECT_EQ(a.numFree(), 8);
}

using BlockAllocatorDeathTest = ::testing::Test;

TEST_F(BlockAllocatorDeathTest, DoubleReleaseDiesWithTheBlockAndCount) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockAllocator a(2);
        const BlockId b = *a.allocate();
        a.release(b);
        a.release(b);  // would put b on the free list twice
      },
      "release of free block 0 \\(reference count was 0\\): a double release");
}

TEST_F(BlockAllocatorDeathTest, ReleaseOfANeverAllocatedBlockDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockAllocator a(2);
        a.release(1);
      },
      "release of free block 1");
}

TEST_F(BlockAllocatorDeathTest, RetainOfAFreeBlockDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockAllocator a(2);
        a.retain(0);  // a count rising from zero: the block may be handed out again
      },
      "retain of free block 0");
}

TEST_F(BlockAllocatorDeathTest, BlockOutsideThePoolDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockAllocator a(2);
        a.release(7);
      },
      "release of block 7 outside a pool of 2 blocks");
}

}  // namespace
}  // namespace lg::engine
