// HostLatentPool: batched export, import and copy move exactly a block's
// bytes, all or nothing, and refuse what the pool's thread contract forbids
// (latent_pool.h): blocks that are not allocated, wrong sizes, and writes
// into a block someone else also holds.
#include "engine/cpu/host_latent_pool.h"

#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace lg::engine {
namespace {

LatentLayout tinyLayout(LatentDType dtype) {
  LatentLayout l;
  l.layers = 2;
  l.block_tokens = 4;
  l.kv_lora_rank = 6;
  l.latent_dim = 8;
  l.dtype = dtype;
  return l;
}

TEST(HostLatentPoolTest, ExportImportAndCopyRoundTripBatches) {
  auto pool = HostLatentPool::create(tinyLayout(LatentDType::kBF16), 8, "test");
  ASSERT_TRUE(pool.isOk());
  LatentPool& p = **pool;
  const size_t bb = p.layout().blockBytes();
  EXPECT_EQ(bb, 2u * 4 * 8 * 2);
  std::vector<BlockId> src;
  ASSERT_TRUE(p.allocator().allocate(3, src).isOk());
  std::vector<uint8_t> bytes(3 * bb);
  std::iota(bytes.begin(), bytes.end(), uint8_t{1});
  ASSERT_TRUE(p.importBlocks(src, bytes).isOk());

  std::vector<uint8_t> out(3 * bb);
  ASSERT_TRUE(p.exportBlocks(src, out).isOk());
  EXPECT_EQ(out, bytes);

  std::vector<BlockId> dst;
  ASSERT_TRUE(p.allocator().allocate(3, dst).isOk());
  std::vector<BlockCopy> copies;
  for (size_t i = 0; i < 3; ++i) copies.push_back({src[2 - i], dst[i]});  // reversed
  ASSERT_TRUE(p.copyBlocks(copies).isOk());
  std::vector<uint8_t> copied(3 * bb);
  ASSERT_TRUE(p.exportBlocks(dst, copied).isOk());
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(std::equal(copied.begin() + static_cast<ptrdiff_t>(i * bb), copied.begin() + static_cast<ptrdiff_t>((i + 1) * bb),
                           bytes.begin() + static_cast<ptrdiff_t>((2 - i) * bb)));
  }
  for (BlockId b : src) p.allocator().release(b);
  for (BlockId b : dst) p.allocator().release(b);
}

TEST(HostLatentPoolTest, RefusesWhatTheContractForbidsAndWritesNothing) {
  auto pool = HostLatentPool::create(tinyLayout(LatentDType::kF32), 4, "test");
  ASSERT_TRUE(pool.isOk());
  LatentPool& p = **pool;
  const size_t bb = p.layout().blockBytes();
  std::vector<BlockId> blocks;
  ASSERT_TRUE(p.allocator().allocate(2, blocks).isOk());
  std::vector<uint8_t> zeros(2 * bb, 0);
  ASSERT_TRUE(p.importBlocks(blocks, zeros).isOk());

  std::vector<uint8_t> short_buffer(2 * bb - 1);
  EXPECT_EQ(p.exportBlocks(blocks, short_buffer).code(), StatusCode::kInvalidArgument);
  const BlockId free_block = 3;
  std::vector<uint8_t> one(bb);
  EXPECT_EQ(p.exportBlocks(std::span(&free_block, 1), one).code(), StatusCode::kInvalidArgument);

  // blocks[1] is shared: importing into it, or copying onto it, is refused,
  // and the batch is all or nothing (blocks[0] keeps its bytes too).
  p.allocator().retain(blocks[1]);
  std::vector<uint8_t> ones(2 * bb, 1);
  const Status s = p.importBlocks(blocks, ones);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block " + std::to_string(blocks[1]) + " is shared (2 references)"), std::string::npos)
      << s.message();
  const BlockCopy onto_shared{blocks[0], blocks[1]};
  EXPECT_EQ(p.copyBlocks(std::span(&onto_shared, 1)).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> out(2 * bb, 9);
  ASSERT_TRUE(p.exportBlocks(blocks, out).isOk());
  EXPECT_EQ(out, zeros);
  p.allocator().release(blocks[1]);
  for (BlockId b : blocks) p.allocator().release(b);
}

}  // namespace
}  // namespace lg::engine
