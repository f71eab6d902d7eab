// Part of PrefixCache (prefix_cache.h): the guard of the latent identity. A
// check that the model's files are unchanged runs on the I/O pool's timer;
// once it fails the cache stops serving for good (tier 0's index is dropped,
// lookups hit nothing, publishes and write-backs stop).
#include "cache/prefix_cache.h"

#include <algorithm>
#include <chrono>

#include "cache/cache_log.h"

namespace lg::cache {
namespace {

using engine::BlockId;
using Clock = std::chrono::steady_clock;

}  // namespace

Status PrefixCache::guardIdentity(std::function<Status()> still_valid, std::chrono::milliseconds interval) {
  {
    std::lock_guard lock(mu_);
    identity_check_ = std::move(still_valid);
    identity_interval_ = std::max(interval, std::chrono::milliseconds(1));
  }
  checkIdentity();
  std::lock_guard lock(mu_);
  return stale() ? dataLoss(stale_reason_) : Status::ok();
}

void PrefixCache::checkIdentity() {
  std::function<Status()> check;
  std::chrono::milliseconds interval;
  {
    std::lock_guard lock(mu_);
    check = identity_check_;
    interval = identity_interval_;
  }
  if (stale() || !check) return;
  if (Status s = check(); !s.isOk()) {
    markStale(s);
    return;
  }
  io_->postAt(Clock::now() + interval, [this] { checkIdentity(); });
}

void PrefixCache::markStale(const Status& why) {
  std::vector<BlockId> release;
  {
    std::lock_guard lock(mu_);
    if (stale_.exchange(true, std::memory_order_acq_rel)) return;
    stale_reason_ = why.message();
    // Drop every ready entry (the index's references); blocks requests hold
    // stay theirs. Claims stay until their leases end: publishing is off.
    dropReadyLocked([](const Entry&) { return true; }, release);
  }
  for (BlockId b : release) allocator_.release(b);
  cacheLog()->error("prefix cache stopped: the latent identity no longer holds ({}); no cached block is served "
                    "until restart",
                    why.message());
}

}  // namespace lg::cache
