#include "engine/sequence_blocks.h"

#include <string>
#include <utility>

namespace lg::engine {

SequenceBlocks::SequenceBlocks(SequenceBlocks&& other) noexcept
    : pool_(other.pool_), max_context_(other.max_context_), blocks_(std::move(other.blocks_)), length_(other.length_) {
  other.blocks_.clear();
  other.length_ = 0;
}

SequenceBlocks& SequenceBlocks::operator=(SequenceBlocks&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = other.pool_;
    max_context_ = other.max_context_;
    blocks_ = std::move(other.blocks_);
    length_ = other.length_;
    other.blocks_.clear();
    other.length_ = 0;
  }
  return *this;
}

Status SequenceBlocks::reserve(int32_t total) {
  const int32_t bt = pool_->layout().block_tokens;
  const int64_t needed = (int64_t{total} + bt - 1) / bt - static_cast<int64_t>(blocks_.size());
  if (needed <= 0) return Status::ok();
  return pool_->allocator().allocate(static_cast<int32_t>(needed), blocks_);
}

Result<SequenceStep> SequenceBlocks::step(std::span<const int32_t> tokens, LogitsWanted logits) {
  const int64_t end = int64_t{length_} + static_cast<int64_t>(tokens.size());
  if (end > max_context_) {
    return outOfRange("context of " + std::to_string(end) + " tokens exceeds the maximum of " +
                      std::to_string(max_context_));
  }
  LG_RETURN_IF_ERROR(reserve(static_cast<int32_t>(end)));
  SequenceStep s;
  s.blocks = blocks_;
  s.cached_len = length_;
  s.tokens = tokens;
  s.logits = logits;
  return s;
}

Result<SequenceBlocks> SequenceBlocks::fork(int32_t prefix) const {
  if (prefix < 0 || prefix > length_) {
    return invalidArgument("fork: prefix " + std::to_string(prefix) + " outside [0, " + std::to_string(length_) + "]");
  }
  SequenceBlocks out(*pool_, max_context_);
  const int32_t bt = pool_->layout().block_tokens;
  const int32_t full = prefix / bt;
  for (int32_t i = 0; i < full; ++i) {
    pool_->allocator().retain(blocks_[static_cast<size_t>(i)]);
    out.blocks_.push_back(blocks_[static_cast<size_t>(i)]);
  }
  if (prefix % bt != 0) {
    LG_ASSIGN_OR_RETURN(BlockId copy, pool_->allocator().allocate());
    out.blocks_.push_back(copy);  // owned by `out` from here: released on error
    const BlockCopy c{blocks_[static_cast<size_t>(full)], copy};
    LG_RETURN_IF_ERROR(pool_->copyBlocks(std::span(&c, 1)));
  }
  out.length_ = prefix;
  return out;
}

void SequenceBlocks::adopt(std::vector<BlockId> blocks, int32_t length) {
  reset();
  blocks_ = std::move(blocks);
  length_ = length;
}

void SequenceBlocks::reset() {
  if (pool_ != nullptr) {
    for (BlockId b : blocks_) pool_->allocator().release(b);
  }
  blocks_.clear();
  length_ = 0;
}

}  // namespace lg::engine
