#include "cache/miss_anatomy.h"

#include <chrono>
#include <new>

namespace lg::cache {

int64_t steadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string_view blockMissName(BlockMiss cause) {
  switch (cause) {
    case BlockMiss::kNew: return "new";
    case BlockMiss::kEvicted: return "evicted";
    case BlockMiss::kModelChanged: return "model_changed";
    case BlockMiss::kInFlight: return "in_flight";
    case BlockMiss::kRecomputed: return "recomputed";
    case BlockMiss::kCount: break;
  }
  return "?";
}

std::string_view blockTierName(BlockTier tier) { return tier == BlockTier::kPool ? "pool" : "disk"; }

EvictedBlocks::EvictedBlocks(size_t capacity) : capacity_(capacity) {
  if (capacity_ == 0) return;
  size_t slots = 16;
  while (slots < 2 * capacity_) slots *= 2;
  mask_ = slots - 1;
  table_.reset(static_cast<Slot*>(std::calloc(slots, sizeof(Slot))));
  ring_.reset(static_cast<uint64_t*>(std::calloc(capacity_, sizeof(uint64_t))));
  if (table_ == nullptr || ring_ == nullptr) throw std::bad_alloc();
}

size_t EvictedBlocks::slotOf(uint64_t key) const {
  size_t at = key & mask_;
  while (table_[at].key != 0 && table_[at].key != key) at = (at + 1) & mask_;
  return at;
}

void EvictedBlocks::eraseSlot(size_t at) {
  // Moves back every later entry of the run whose home is not between the
  // hole and it, so that every probe still finds its key without tombstones.
  for (size_t next = (at + 1) & mask_; table_[next].key != 0; next = (next + 1) & mask_) {
    const size_t home = table_[next].key & mask_;
    const bool stays = at <= next ? (home > at && home <= next) : (home > at || home <= next);
    if (stays) continue;
    table_[at] = table_[next];
    at = next;
  }
  table_[at] = Slot{};
  --size_;
}

void EvictedBlocks::record(const Digest& key, BlockTier tier, int64_t now_ms) {
  if (capacity_ == 0) return;
  const uint64_t k = shortKey(key);
  std::lock_guard lock(mu_);
  if (recorded_ == capacity_) {
    // The ring is full: its oldest record goes, unless its key was recorded
    // again since (then the key's slot names a later place).
    const uint64_t oldest = ring_[next_];
    const size_t at = slotOf(oldest);
    if (table_[at].key == oldest && table_[at].place == next_) eraseSlot(at);
  } else {
    ++recorded_;
  }
  const size_t at = slotOf(k);
  if (table_[at].key == 0) ++size_;
  table_[at] = Slot{k, now_ms, static_cast<uint32_t>(next_), tier};
  ring_[next_] = k;
  next_ = next_ + 1 == capacity_ ? 0 : next_ + 1;
}

std::optional<EvictedBlocks::Eviction> EvictedBlocks::find(const Digest& key) const {
  if (capacity_ == 0) return std::nullopt;
  const uint64_t k = shortKey(key);
  std::lock_guard lock(mu_);
  const Slot& slot = table_[slotOf(k)];
  if (slot.key != k) return std::nullopt;
  return Eviction{slot.tier, slot.at_ms};
}

size_t EvictedBlocks::size() const {
  std::lock_guard lock(mu_);
  return size_;
}

}  // namespace lg::cache
