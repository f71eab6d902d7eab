// Part of PrefixCache (prefix_cache.h): PrefixLease, the handle a request
// holds (readiness, what it reports, the blocks it hands over), and what
// ending a lease does in the cache: releasing its references and abandoning
// its claims, or cancelling the lookup still in progress. Publishing through
// a lease is in prefix_cache_publish.cc.
#include "cache/prefix_cache.h"

#include <utility>

#include "cache/prefix_cache_internal.h"
#include "common/check.h"

namespace lg::cache {
namespace {

using engine::BlockId;

}  // namespace

PrefixLease::PrefixLease(PrefixCache* cache, std::shared_ptr<LeaseState> state)
    : cache_(cache), state_(std::move(state)) {}

PrefixLease::~PrefixLease() { reset(); }

PrefixLease::PrefixLease(PrefixLease&& other) noexcept
    : cache_(std::exchange(other.cache_, nullptr)), state_(std::move(other.state_)) {}

PrefixLease& PrefixLease::operator=(PrefixLease&& other) noexcept {
  if (this != &other) {
    reset();
    cache_ = std::exchange(other.cache_, nullptr);
    state_ = std::move(other.state_);
  }
  return *this;
}

void PrefixLease::reset() {
  if (cache_ != nullptr && state_ != nullptr) cache_->releaseLease(state_);
  state_.reset();
  cache_ = nullptr;
}

bool PrefixLease::ready() const { return state_ == nullptr || state_->ready.load(std::memory_order_acquire); }

void PrefixLease::wait() const {
  if (state_ == nullptr) return;
  std::unique_lock lock(state_->ready_mu);
  state_->ready_cv.wait(lock, [&] { return state_->ready.load(std::memory_order_acquire); });
}

bool PrefixLease::waitFor(std::chrono::milliseconds timeout) const {
  if (state_ == nullptr) return true;
  std::unique_lock lock(state_->ready_mu);
  return state_->ready_cv.wait_for(lock, timeout, [&] { return state_->ready.load(std::memory_order_acquire); });
}

const LeaseState& PrefixLease::readyState() const {
  static const LeaseState kEmpty;
  if (state_ == nullptr) return kEmpty;
  // Reading a pending lease would race with the I/O thread completing it.
  LG_CHECK(state_->ready.load(std::memory_order_acquire), "prefix lease ", state_->id, " read while still pending");
  return *state_;
}

int32_t PrefixLease::cachedTokens() const { return readyState().hit_blocks * readyState().block_tokens; }
int32_t PrefixLease::hitBlocks() const { return readyState().hit_blocks; }
int32_t PrefixLease::tier0Blocks() const { return readyState().tier0_blocks; }
int32_t PrefixLease::diskBlocks() const { return readyState().disk_blocks; }
const Decision& PrefixLease::decision() const { return readyState().decision; }
double PrefixLease::restoreSeconds() const { return readyState().restore_seconds; }
uint64_t PrefixLease::restoreBytes() const { return readyState().restore_bytes; }
bool PrefixLease::waited() const { return readyState().waited; }
const std::string& PrefixLease::hitNamespace() const { return readyState().hit_ns; }

int32_t PrefixLease::claimedBlocks() const {
  const LeaseState& s = readyState();
  if (cache_ == nullptr) return 0;
  std::lock_guard lock(cache_->mu_);  // publish() shrinks the claims
  return static_cast<int32_t>(s.claimed.size());
}

std::vector<BlockId> PrefixLease::takeBlocks() {
  if (state_ == nullptr) return {};
  readyState();  // checks readiness
  if (state_->taken) return {};
  state_->taken = true;
  return state_->blocks;
}

int32_t PrefixLease::coveredTokens() const { return static_cast<int32_t>(readyState().ids.size()); }

void PrefixCache::releaseLease(const StatePtr& st) {
  LeaseState& s = *st;
  bool clean_now = false;
  {
    std::lock_guard lock(mu_);
    switch (s.phase) {
      case LeasePhase::kReady:
        clean_now = true;
        break;
      case LeasePhase::kWaiting:
        unparkLocked(st);
        counters_->cancelled.fetch_add(1, std::memory_order_relaxed);
        clean_now = true;
        break;
      case LeasePhase::kRunning:
        s.cancelled = true;  // the step in progress cleans up when it ends
        break;
      case LeasePhase::kDone:
        break;
    }
    if (clean_now) s.phase = LeasePhase::kDone;
  }
  if (clean_now) cleanUp(s);
}

void PrefixCache::cleanUp(LeaseState& s) {
  {
    std::lock_guard lock(mu_);
    abandonClaimsLocked(s);
  }
  if (!s.taken) {
    for (BlockId b : s.blocks) allocator_.release(b);
  }
  s.blocks.clear();
}

void PrefixCache::abandonClaimsLocked(LeaseState& s) {
  for (int32_t j : s.claimed) {
    auto it = index_.find(s.keys[static_cast<size_t>(j)]);
    if (it != index_.end() && it->second.state == State::kInFlight && it->second.owner == s.id) eraseLocked(it);
  }
  s.claimed.clear();
}

}  // namespace lg::cache
