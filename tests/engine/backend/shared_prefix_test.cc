// The latent block pool seen through sequences: shared prefixes, forks of a
// partial block, export/import of block contents and mixed batches, each
// checked against a fresh full prefill of the same tokens.
#include <algorithm>
#include <cmath>

#include <gtest/gtest.h>

#include "engine/forward_plan.h"
#include "engine/forward_runner.h"
#include "engine/sequence_blocks.h"
#include "tests/engine/golden/golden_util.h"

namespace lg::engine::testing {
namespace {

constexpr int kBlock = 16;

std::vector<int32_t> concat(std::span<const int32_t> a, std::span<const int32_t> b) {
  std::vector<int32_t> out(a.begin(), a.end());
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Runs `tokens` after the sequence's cached positions; returns all their logits.
std::vector<float> extend(Backend& backend, SequenceBlocks& seq, std::span<const int32_t> tokens) {
  auto step = seq.step(tokens, LogitsWanted::kAll);
  EXPECT_TRUE(step.isOk()) << step.status().toString();
  ForwardBatch batch;
  batch.sequences.push_back(*step);
  auto out = backend.forward(batch);
  EXPECT_TRUE(out.isOk()) << out.status().toString();
  seq.commit(static_cast<int32_t>(tokens.size()));
  return out->logits;
}

class SharedPrefixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    golden_ = loadGolden("tiny-v3");
    backend_ = makeBackend("tiny-v3", LatentDType::kF32, kBlock);
    ASSERT_NE(backend_, nullptr);
    vocab_ = backend_->config().vocab_size;
  }
  // Logits of a fresh full prefill, on a separate sequence.
  std::vector<float> fresh(std::span<const int32_t> ids) {
    auto l = runForward(*backend_, ids, {});
    EXPECT_TRUE(l.isOk());
    return *l;
  }
  std::span<const int32_t> ids(size_t begin, size_t end) const {
    return std::span<const int32_t>(golden_.ids).subspan(begin, end - begin);
  }

  Golden golden_;
  std::unique_ptr<Backend> backend_;
  int64_t vocab_ = 0;
};

TEST_F(SharedPrefixTest, TwoSequencesShareAThreeBlockPrefix) {
  const size_t prefix = 3 * kBlock;
  SequenceBlocks a(*backend_);
  extend(*backend_, a, ids(0, prefix));
  EXPECT_EQ(backend_->blocks().numUsed(), 3);

  auto forked = a.fork(static_cast<int32_t>(prefix));
  ASSERT_TRUE(forked.isOk()) << forked.status().toString();
  SequenceBlocks b = std::move(forked).value();
  ASSERT_EQ(b.length(), static_cast<int32_t>(prefix));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b.blocks()[i], a.blocks()[i]);  // the same blocks, not copies
    EXPECT_EQ(backend_->blocks().refCount(a.blocks()[i]), 2);
  }
  EXPECT_EQ(backend_->blocks().numUsed(), 3);  // sharing allocated nothing

  // Different continuations: A follows the golden ids, B a permutation of them.
  std::vector<int32_t> suffix_b(golden_.ids.begin() + 100, golden_.ids.begin() + 150);
  std::reverse(suffix_b.begin(), suffix_b.end());
  const std::vector<float> la = extend(*backend_, a, ids(prefix, 120));
  const std::vector<float> lb = extend(*backend_, b, suffix_b);
  // Only the suffixes were computed: each step carried just its new tokens.
  EXPECT_EQ(la.size(), (120 - prefix) * vocab_);
  EXPECT_EQ(lb.size(), suffix_b.size() * vocab_);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(backend_->blocks().refCount(a.blocks()[i]), 2);
  EXPECT_NE(a.blocks()[3], b.blocks()[3]);

  const std::vector<float> fa = fresh(ids(0, 120));
  const std::vector<float> fb = fresh(concat(ids(0, prefix), suffix_b));
  const int64_t na = 120 - prefix, nb = static_cast<int64_t>(suffix_b.size());
  EXPECT_LE(maxAbsDiff(la, std::vector<float>(fa.begin() + prefix * vocab_, fa.end()), vocab_, 0, na), 1e-4);
  EXPECT_LE(maxAbsDiff(lb, std::vector<float>(fb.begin() + prefix * vocab_, fb.end()), vocab_, 0, nb), 1e-4);
  // And A against the transformers golden.
  EXPECT_LE(maxAbsDiff(la, std::vector<float>(golden_.logits.begin() + prefix * vocab_, golden_.logits.end()), vocab_, 0, na),
            1e-3);

  a.reset();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(backend_->blocks().refCount(b.blocks()[i]), 1);
  b.reset();
  EXPECT_EQ(backend_->blocks().numUsed(), 0);
}

TEST_F(SharedPrefixTest, ForkInsideABlockCopiesThePartialBlock) {
  SequenceBlocks a(*backend_);
  extend(*backend_, a, ids(0, 60));
  auto forked = a.fork(40);  // 2 full blocks + 8 positions of the third
  ASSERT_TRUE(forked.isOk());
  SequenceBlocks b = std::move(forked).value();
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(b.blocks()[1], a.blocks()[1]);
  EXPECT_NE(b.blocks()[2], a.blocks()[2]);
  EXPECT_EQ(backend_->blocks().refCount(a.blocks()[2]), 1);
  const std::vector<float> lb = extend(*backend_, b, ids(40, 90));
  const std::vector<float> f = fresh(ids(0, 90));
  EXPECT_LE(maxAbsDiff(lb, std::vector<float>(f.begin() + 40 * vocab_, f.end()), vocab_, 0, 50), 1e-4);
  // A is unaffected by B's writes into its copy.
  const std::vector<float> la = extend(*backend_, a, ids(60, 70));
  EXPECT_LE(maxAbsDiff(la, std::vector<float>(f.begin() + 60 * vocab_, f.begin() + 70 * vocab_), vocab_, 0, 10), 1e-4);
}

TEST_F(SharedPrefixTest, ExportedBlocksRestoreIntoNewBlocks) {
  SequenceBlocks a(*backend_);
  extend(*backend_, a, ids(0, 2 * kBlock));
  const size_t bytes = backend_->latentLayout().blockBytes();
  EXPECT_EQ(bytes, static_cast<size_t>(3 * kBlock * (64 + 16) * 4));  // [layers][tokens][kv_lora + rope] f32
  // One batched export of every block, one batched import into fresh blocks.
  LatentPool& pool = backend_->latentPool();
  std::vector<uint8_t> data(bytes * a.blocks().size());
  ASSERT_TRUE(pool.exportBlocks(a.blocks(), data).isOk());
  std::vector<BlockId> restored;
  ASSERT_TRUE(pool.allocator().allocate(static_cast<int32_t>(a.blocks().size()), restored).isOk());
  ASSERT_TRUE(pool.importBlocks(restored, data).isOk());
  a.reset();  // the original blocks are gone
  SequenceBlocks b(*backend_);
  b.adopt(restored, 2 * kBlock);
  const std::vector<float> lb = extend(*backend_, b, ids(2 * kBlock, 80));
  EXPECT_LE(maxAbsDiff(lb, std::vector<float>(golden_.logits.begin() + 2 * kBlock * vocab_, golden_.logits.begin() + 80 * vocab_),
                       vocab_, 0, 80 - 2 * kBlock),
            1e-3);
  // Wrong sizes, blocks that are not allocated and writes into a shared
  // block are refused.
  std::vector<uint8_t> wrong(bytes - 1);
  EXPECT_FALSE(pool.exportBlocks(std::span(b.blocks()).first(1), wrong).isOk());
  const BlockId unallocated = 12345;
  EXPECT_FALSE(pool.importBlocks(std::span(&unallocated, 1), std::vector<uint8_t>(bytes)).isOk());
  auto shared = b.fork(kBlock);
  ASSERT_TRUE(shared.isOk());
  const Status into_shared = pool.importBlocks(std::span(b.blocks()).first(1), std::vector<uint8_t>(bytes));
  EXPECT_EQ(into_shared.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(into_shared.message().find("shared"), std::string::npos) << into_shared.message();
}

TEST_F(SharedPrefixTest, MixedBatchOfDecodeAndPrefillMatchesSeparateRuns) {
  // Continuous batching shape: one sequence decodes a token while another
  // prefills a chunk over its own cached prefix, in one forward call.
  SequenceBlocks a(*backend_), b(*backend_), c(*backend_);
  extend(*backend_, a, ids(0, 70));
  extend(*backend_, b, ids(10, 40));
  ForwardBatch batch;
  auto sa = a.step(ids(70, 71), LogitsWanted::kLast);
  auto sb = b.step(ids(40, 75), LogitsWanted::kAll);
  auto sc = c.step(ids(100, 130), LogitsWanted::kLast);
  ASSERT_TRUE(sa.isOk() && sb.isOk() && sc.isOk());
  batch.sequences = {*sa, *sb, *sc};
  auto out = backend_->forward(batch);
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(out->num_rows, (std::vector<int32_t>{1, 35, 1}));
  const std::vector<float> fa = fresh(ids(0, 71));
  const std::vector<float> fb = fresh(ids(10, 75));
  const std::vector<float> fc = fresh(ids(100, 130));
  auto rowDiff = [&](const float* row, const std::vector<float>& ref, int64_t ref_row) {
    double m = 0;
    for (int64_t v = 0; v < vocab_; ++v) m = std::max(m, double(std::fabs(row[v] - ref[ref_row * vocab_ + v])));
    return m;
  };
  EXPECT_LE(rowDiff(out->row(0, 0), fa, 70), 1e-4);
  for (int32_t i = 0; i < 35; ++i) EXPECT_LE(rowDiff(out->row(1, i), fb, 30 + i), 1e-4) << i;
  EXPECT_LE(rowDiff(out->row(2, 0), fc, 29), 1e-4);
}

TEST_F(SharedPrefixTest, PlannerRefusesWritesIntoSharedBlocks) {
  SequenceBlocks a(*backend_);
  extend(*backend_, a, ids(0, 40));
  // A second reference to A's partly filled third block (a bug in a caller).
  backend_->blocks().retain(a.blocks()[2]);
  auto step = a.step(ids(40, 41), LogitsWanted::kLast);
  ASSERT_TRUE(step.isOk());
  ForwardBatch batch;
  batch.sequences.push_back(*step);
  auto out = backend_->forward(batch);
  ASSERT_FALSE(out.isOk());
  EXPECT_NE(out.status().message().find("shared"), std::string::npos) << out.status().toString();
  backend_->blocks().release(a.blocks()[2]);
  // Two sequences claiming the same block in one batch.
  ForwardBatch twice;
  twice.sequences = {*step, *step};
  auto out2 = backend_->forward(twice);
  ASSERT_FALSE(out2.isOk());
  EXPECT_NE(out2.status().message().find("also writes"), std::string::npos) << out2.status().toString();
}

TEST_F(SharedPrefixTest, PoolExhaustionIsAnErrorNotACrash) {
  BackendOptions options;
  options.block_tokens = kBlock;
  options.num_blocks = 3;
  auto model = Model::load(fixtureDir("tiny-v3"));
  ASSERT_TRUE(model.isOk());
  auto small = createCpuBackendForTest(std::move(model).value(), options);
  ASSERT_NE(small, nullptr);
  auto logits = runForward(*small, ids(0, 3 * kBlock + 1), {});
  ASSERT_FALSE(logits.isOk());
  EXPECT_EQ(logits.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(small->blocks().numUsed(), 0);
  EXPECT_TRUE(runForward(*small, ids(0, 3 * kBlock), {}).isOk());
}

}  // namespace
}  // namespace lg::engine::testing
