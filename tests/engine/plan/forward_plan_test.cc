// planForward: the validation every backend relies on (token ids, lengths,
// block tables, shared blocks, batch limits) and the flat layout it produces
// (ids, positions, write block and slot per token, logit rows). Needs no
// model: the planner reads only vocab_size, block_tokens and the allocator.
#include "engine/forward_plan.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace lg::engine {
namespace {

constexpr int kVocab = 100;
constexpr int32_t kBlockTokens = 4;
constexpr int kMaxContext = 64;
constexpr int64_t kMaxBatchTokens = 32;

// One sequence's inputs, owned here so that the SequenceStep spans stay valid.
struct Seq {
  std::vector<BlockId> blocks;
  int32_t cached_len = 0;
  std::vector<int32_t> tokens;
  LogitsWanted logits = LogitsWanted::kLast;
};

class ForwardPlanTest : public ::testing::Test {
 protected:
  ForwardPlanTest() : pool_(16) {
    config_.vocab_size = kVocab;
    layout_.block_tokens = kBlockTokens;
  }

  std::vector<BlockId> allocate(int32_t n) {
    std::vector<BlockId> ids;
    EXPECT_TRUE(pool_.allocate(n, ids).isOk());
    return ids;
  }

  Result<ForwardPlan> plan(const std::vector<Seq>& seqs, int max_context = kMaxContext,
                           int64_t max_batch_tokens = kMaxBatchTokens) {
    ForwardBatch batch;
    for (const Seq& s : seqs) batch.sequences.push_back({s.blocks, s.cached_len, s.tokens, s.logits});
    return planForward(batch, config_, layout_, pool_, max_context, max_batch_tokens);
  }

  // The plan must fail with `code` and a message containing `part`.
  void expectRejected(const std::vector<Seq>& seqs, StatusCode code, const std::string& part,
                      int max_context = kMaxContext, int64_t max_batch_tokens = kMaxBatchTokens) {
    auto r = plan(seqs, max_context, max_batch_tokens);
    ASSERT_FALSE(r.isOk()) << "expected a rejection containing \"" << part << "\"";
    EXPECT_EQ(r.status().code(), code) << r.status().toString();
    EXPECT_NE(r.status().message().find(part), std::string::npos) << r.status().toString();
  }

  ModelConfig config_;
  LatentLayout layout_;
  BlockAllocator pool_;
};

std::vector<int32_t> iota(int32_t first, int32_t n) {
  std::vector<int32_t> v;
  for (int32_t i = 0; i < n; ++i) v.push_back(first + i);
  return v;
}

TEST_F(ForwardPlanTest, LaysOutPrefillAndDecodeSequenceAfterSequence) {
  // Sequence 0: a 5-token prefill from position 0 (blocks 0 and 1, slots 0..3, 0).
  // Sequence 1: 3 tokens after 6 cached positions (positions 6, 7, 8: block 1
  // slots 2 and 3, block 2 slot 0), every row's logits.
  const std::vector<BlockId> a = allocate(2);
  const std::vector<BlockId> b = allocate(3);
  auto r = plan({{a, 0, {10, 11, 12, 13, 14}, LogitsWanted::kLast}, {b, 6, {20, 21, 22}, LogitsWanted::kAll}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const ForwardPlan& p = *r;

  EXPECT_EQ(p.numTokens(), 8);
  EXPECT_EQ(p.tokens, (std::vector<int32_t>{10, 11, 12, 13, 14, 20, 21, 22}));
  EXPECT_EQ(p.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 6, 7, 8}));
  EXPECT_EQ(p.sequence_of, (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(p.write_block, (std::vector<BlockId>{a[0], a[0], a[0], a[0], a[1], b[1], b[1], b[2]}));
  EXPECT_EQ(p.write_slot, (std::vector<int32_t>{0, 1, 2, 3, 0, 2, 3, 0}));
  // kLast: the last new token of sequence 0; kAll: every new token of sequence 1.
  EXPECT_EQ(p.logit_tokens, (std::vector<int64_t>{4, 5, 6, 7}));

  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(p.sequences[0].cached_len, 0);
  EXPECT_EQ(p.sequences[0].num_tokens, 5);
  EXPECT_EQ(p.sequences[0].first_token, 0);
  EXPECT_EQ(p.sequences[0].blocks, a);
  EXPECT_EQ(p.sequences[0].first_logit_row, 0);
  EXPECT_EQ(p.sequences[0].num_logit_rows, 1);
  EXPECT_EQ(p.sequences[1].cached_len, 6);
  EXPECT_EQ(p.sequences[1].num_tokens, 3);
  EXPECT_EQ(p.sequences[1].first_token, 5);
  EXPECT_EQ(p.sequences[1].blocks, b);
  EXPECT_EQ(p.sequences[1].first_logit_row, 1);
  EXPECT_EQ(p.sequences[1].num_logit_rows, 3);
}

TEST_F(ForwardPlanTest, LogitRowsFollowEachSequencesRequest) {
  const std::vector<BlockId> a = allocate(1), b = allocate(1), c = allocate(1), d = allocate(1);
  auto r = plan({{a, 0, {1, 2}, LogitsWanted::kAll},
                 {b, 0, {3, 4, 5}, LogitsWanted::kNone},
                 {c, 0, {6, 7}, LogitsWanted::kLast},
                 {d, 0, {8}, LogitsWanted::kNone}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const ForwardPlan& p = *r;
  // Rows in output order: sequence 0's two tokens, then sequence 2's last one.
  EXPECT_EQ(p.logit_tokens, (std::vector<int64_t>{0, 1, 6}));
  ASSERT_EQ(p.sequences.size(), 4u);
  const int64_t first_rows[] = {0, 2, 2, 3};
  const int32_t num_rows[] = {2, 0, 1, 0};
  const int64_t first_tokens[] = {0, 2, 5, 7};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(p.sequences[i].first_logit_row, first_rows[i]) << "sequence " << i;
    EXPECT_EQ(p.sequences[i].num_logit_rows, num_rows[i]) << "sequence " << i;
    EXPECT_EQ(p.sequences[i].first_token, first_tokens[i]) << "sequence " << i;
  }
}

TEST_F(ForwardPlanTest, KeepsOnlyTheBlocksTheContextNeeds) {
  // A table longer than needed (the scheduler allocates ahead): the plan keeps
  // the blocks covering cached_len + tokens, and entries past them are not
  // checked (here a block that was freed).
  std::vector<BlockId> blocks = allocate(4);
  pool_.release(blocks[3]);
  auto r = plan({{blocks, 4, {1, 2}, LogitsWanted::kLast}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->sequences[0].blocks, (std::vector<BlockId>{blocks[0], blocks[1]}));
  EXPECT_EQ(r->write_block, (std::vector<BlockId>{blocks[1], blocks[1]}));
  EXPECT_EQ(r->write_slot, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r->positions, (std::vector<int32_t>{4, 5}));
}

TEST_F(ForwardPlanTest, RejectsAnEmptyBatchAndAnEmptySequence) {
  expectRejected({}, StatusCode::kInvalidArgument, "empty batch");
  const std::vector<BlockId> a = allocate(1), b = allocate(1);
  expectRejected({{a, 0, {1}}, {b, 0, {}}}, StatusCode::kInvalidArgument, "sequence 1: no new tokens");
}

TEST_F(ForwardPlanTest, RejectsTokenIdsOutsideTheVocabulary) {
  const std::vector<BlockId> a = allocate(1);
  expectRejected({{a, 0, {1, kVocab, 2}}}, StatusCode::kInvalidArgument,
                 "sequence 0: token id 100 at index 1 is outside the vocabulary [0, 100)");
  expectRejected({{a, 0, {-1}}}, StatusCode::kInvalidArgument, "token id -1 at index 0");
  // Both ends of the vocabulary are accepted.
  auto r = plan({{a, 0, {0, kVocab - 1}}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->tokens, (std::vector<int32_t>{0, kVocab - 1}));
}

TEST_F(ForwardPlanTest, RejectsCachedLenOutOfRange) {
  const std::vector<BlockId> a = allocate(2);
  expectRejected({{a, -1, {1}}}, StatusCode::kInvalidArgument, "negative cached_len");
  // cached_len beyond what the table covers: 8 cached + 1 new = 9 positions need 3 blocks.
  expectRejected({{a, 8, {1}}}, StatusCode::kInvalidArgument, "block table has 2 blocks, 3 needed for 9 positions");
}

TEST_F(ForwardPlanTest, RejectsAContextLongerThanTheMaximum) {
  const std::vector<BlockId> blocks = allocate(4);  // 16 positions
  expectRejected({{blocks, 12, {1, 2}}}, StatusCode::kOutOfRange,
                 "sequence 0: context of 14 tokens exceeds the maximum of 13", /*max_context=*/13);
  EXPECT_TRUE(plan({{blocks, 12, {1}}}, /*max_context=*/13).isOk());
}

TEST_F(ForwardPlanTest, RejectsABlockTableTooShortOrNamingAFreeBlock) {
  const std::vector<BlockId> two = allocate(2);
  expectRejected({{two, 0, iota(1, 9)}}, StatusCode::kInvalidArgument, "block table has 2 blocks, 3 needed");
  expectRejected({{{}, 0, {1}}}, StatusCode::kInvalidArgument, "block table has 0 blocks, 1 needed");
  std::vector<BlockId> freed = allocate(2);
  pool_.release(freed[0]);  // a free block in the cached part is rejected too
  expectRejected({{freed, 4, {1}}}, StatusCode::kInvalidArgument,
                 "block " + std::to_string(freed[0]) + " is not allocated");
}

TEST_F(ForwardPlanTest, RejectsAWriteIntoASharedBlock) {
  std::vector<BlockId> blocks = allocate(2);
  pool_.retain(blocks[0]);  // another sequence (or the cache) holds block 0 too
  ASSERT_EQ(pool_.refCount(blocks[0]), 2);
  // Position 3 lies in block 0: rejected.
  expectRejected({{blocks, 3, {1, 2}}}, StatusCode::kInvalidArgument,
                 "would write block " + std::to_string(blocks[0]) + ", which is shared (2 references)");
  // A shared block that is only read (a full cached prefix block) is fine.
  auto r = plan({{blocks, 4, {1, 2}}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->write_block, (std::vector<BlockId>{blocks[1], blocks[1]}));
  // Once the other holder lets go, the block may be written again.
  pool_.release(blocks[0]);
  EXPECT_TRUE(plan({{blocks, 3, {1, 2}}}).isOk());
}

TEST_F(ForwardPlanTest, TwoSequencesMayReadButNotWriteTheSameBlock) {
  const std::vector<BlockId> prefix = allocate(1);
  pool_.retain(prefix[0]);  // two sequences share a full prefix block
  const std::vector<BlockId> tail_a = allocate(1), tail_b = allocate(1);
  const std::vector<BlockId> a = {prefix[0], tail_a[0]}, b = {prefix[0], tail_b[0]};
  auto r = plan({{a, 4, {1}}, {b, 4, {2}}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->write_block, (std::vector<BlockId>{tail_a[0], tail_b[0]}));

  // Two sequences whose tables name the same unshared tail block.
  const std::vector<BlockId> c = {prefix[0], tail_a[0]};
  expectRejected({{a, 4, {1}}, {c, 5, {2}}}, StatusCode::kInvalidArgument,
                 "sequence 1: writes block " + std::to_string(tail_a[0]) + ", which sequence 0 also writes");
}

TEST_F(ForwardPlanTest, RejectsMoreNewTokensThanTheBatchLimit) {
  const std::vector<BlockId> a = allocate(2), b = allocate(2);
  expectRejected({{a, 0, iota(1, 5)}, {b, 0, iota(1, 4)}}, StatusCode::kInvalidArgument,
                 "9 new tokens in one batch exceed the limit of 8", kMaxContext, /*max_batch_tokens=*/8);
  EXPECT_TRUE(plan({{a, 0, iota(1, 4)}, {b, 0, iota(1, 4)}}, kMaxContext, /*max_batch_tokens=*/8).isOk());
}

TEST_F(ForwardPlanTest, NamesTheOffendingSequence) {
  const std::vector<BlockId> a = allocate(1), b = allocate(1), c = allocate(1);
  expectRejected({{a, 0, {1}}, {b, 0, {2}}, {c, 0, {kVocab + 5}}}, StatusCode::kInvalidArgument,
                 "forward: sequence 2: token id 105");
}

}  // namespace
}  // namespace lg::engine
