// Part of PrefixCache (prefix_cache.h): one lookup, as steps that never block
// their caller. Chaining the keys, choosing the namespace with the longest
// hit, walking tier 0, claiming the blocks still to compute, parking on a
// block another request computes (resumed when it is published or
// abandoned, or at the deadline), then counting and making the lease ready.
// The restore from disk between those steps is in prefix_cache_restore.cc.
#include "cache/prefix_cache.h"

#include <chrono>
#include <limits>
#include <memory>

#include "cache/prefix_cache_internal.h"

namespace lg::cache {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

PrefixLease PrefixCache::lookup(const TeamNamespace& team, std::span<const int32_t> ids, LookupOptions options) {
  auto st = std::make_shared<LeaseState>();
  LeaseState& s = *st;
  const int32_t bt = block_tokens_;
  const int32_t n = static_cast<int32_t>(ids.size());
  s.ns = team.key();
  s.hit_ns = s.ns;
  s.ns_tag = namespaceTag(s.ns);
  s.hit_ns_tag = s.ns_tag;
  s.ids.assign(ids.begin(), ids.end());
  s.block_tokens = bt;
  s.n_full = n / bt;
  s.max_hit = n > 0 ? (n - 1) / bt : 0;
  // Only the shared namespaces granted to this team are read at all: one not
  // granted is neither looked up nor waited on, so it cannot leak even timing.
  std::vector<const SharedNamespace*> readable;
  {
    std::lock_guard lock(mu_);
    for (const SharedNamespace& shared : options.shared_namespaces) {
      if (grants_.count({shared.key(), team.key()}) != 0) {
        readable.push_back(&shared);
      } else {
        counters_->denied_shared_reads.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  // SHA-256 chains outside the lock.
  s.keys = chainBlockKeys(s.ns, model_, ids, bt);
  for (const SharedNamespace* shared : readable) {
    s.shared_keys.push_back(chainBlockKeys(shared->key(), model_, ids.first(static_cast<size_t>(s.max_hit) * bt), bt));
  }
  s.wait = options.in_flight_wait.count() < 0 ? options_.in_flight_wait : options.in_flight_wait;
  s.deadline = Clock::now() + s.wait;
  s.policy = options.restore_policy.value_or(options_.restore_policy);
  s.on_ready = std::move(options.on_ready);
  s.hit_keys = &s.keys;
  if (stale()) {
    // Nothing under this identity is trusted any more: no hits, no claims.
    s.max_hit = 0;
    s.n_full = 0;
    s.shared_keys.clear();
  }
  {
    std::lock_guard lock(mu_);
    s.id = next_lease_++;
    if (!s.shared_keys.empty()) {
      // The chain (own or shared namespace) with the longest available prefix.
      auto available = [&](const std::vector<Digest>& keys) {
        int32_t k = 0;
        while (k < s.max_hit) {
          const Digest& key = keys[static_cast<size_t>(k)];
          auto it = index_.find(key);
          const bool ready = it != index_.end() && it->second.state == State::kReady;
          if (!ready && !(it == index_.end() && disk_ != nullptr && disk_->contains(key))) break;
          ++k;
        }
        return k;
      };
      int32_t best = available(s.keys);
      for (size_t i = 0; i < s.shared_keys.size(); ++i) {
        if (const int32_t a = available(s.shared_keys[i]); a > best) {
          best = a;
          s.hit_keys = &s.shared_keys[i];
          s.hit_ns = readable[i]->key();
          s.hit_ns_tag = namespaceTag(s.hit_ns);
        }
      }
    }
  }
  PrefixLease lease(this, st);
  advance(st);
  return lease;
}

PrefixLease PrefixCache::acquire(const TeamNamespace& team, std::span<const int32_t> ids, LookupOptions options) {
  PrefixLease lease = lookup(team, ids, std::move(options));
  lease.wait();
  return lease;
}

void PrefixCache::advance(const StatePtr& st) {
  LeaseState& s = *st;
  const int32_t bt = block_tokens_;
  const bool through_on_hit = writer_ != nullptr && options_.write_through_hits > 0;
  std::vector<Victim> write_through;
  int32_t disk_end = 0;
  {
    std::unique_lock lock(mu_);
    if (s.cancelled) {
      s.phase = LeasePhase::kDone;
      lock.unlock();
      counters_->cancelled.fetch_add(1, std::memory_order_relaxed);
      cleanUp(s);
      return;
    }
    while (s.next < s.max_hit) {
      const Digest& key = (*s.hit_keys)[static_cast<size_t>(s.next)];
      auto it = index_.find(key);
      if (it == index_.end()) break;
      Entry& e = it->second;
      if (e.state == State::kInFlight) {
        // Another request is computing or restoring this block: rather than
        // compute it twice, park until it is published or abandoned (or the
        // wait budget ends); the I/O pool resumes the walk here.
        if (s.wait.count() <= 0) break;
        if (Clock::now() >= s.deadline) {
          counters_->wait_timeouts.fetch_add(1, std::memory_order_relaxed);
          break;
        }
        if (!s.waited) counters_->waits.fetch_add(1, std::memory_order_relaxed);
        s.waited = true;
        s.phase = LeasePhase::kWaiting;
        s.awaited = key;
        waiters_[key].push_back(st);
        if (!s.deadline_timer) {
          s.deadline_timer = true;
          io_->postAt(s.deadline, [this, weak = std::weak_ptr<LeaseState>(st)] { onWaitDeadline(weak); });
        }
        lock.unlock();
        writeThrough(write_through);
        return;
      }
      allocator_.retain(e.block);
      s.blocks.push_back(e.block);
      ++e.hits;
      if (through_on_hit && !e.on_disk && e.hits >= static_cast<uint32_t>(options_.write_through_hits)) {
        e.on_disk = true;
        write_through.push_back(victimOf(key, e, true));
      }
      ++s.next;
    }
    s.tier0_blocks = s.next;
    disk_end = s.next;
    if (disk_ != nullptr) {
      while (disk_end < s.max_hit && index_.count((*s.hit_keys)[static_cast<size_t>(disk_end)]) == 0 &&
             disk_->contains((*s.hit_keys)[static_cast<size_t>(disk_end)])) {
        ++disk_end;
      }
    }
    // Claim the prompt's remaining full blocks that nobody holds, so that
    // concurrent requests wait for this one instead of computing them too.
    for (int32_t j = s.next; j < s.n_full; ++j) {
      const Digest& key = s.keys[static_cast<size_t>(j)];
      if (index_.count(key) != 0) continue;
      Entry e;
      e.state = State::kInFlight;
      e.owner = s.id;
      e.ns_tag = s.ns_tag;
      e.ids = s.blockIds(j);
      index_.emplace(key, std::move(e));
      s.claimed.push_back(j);
      ++in_flight_;
    }
  }
  writeThrough(write_through);

  if (disk_end > s.next) {
    const uint64_t bytes = static_cast<uint64_t>(disk_end - s.next) * storedBlockBytes(geometry_, options_.stored_dtype);
    s.decision = cost_.decide(s.policy, bytes, int64_t{s.next} * bt, int64_t{disk_end} * bt);
    if (s.decision.choice == RestoreChoice::kRestore) {
      counters_->decisions_restore.fetch_add(1, std::memory_order_relaxed);
      startRestore(st, disk_end);
      return;
    }
    counters_->decisions_recompute.fetch_add(1, std::memory_order_relaxed);
  }
  finishLookup(st);
}

void PrefixCache::onWaitDeadline(const std::weak_ptr<LeaseState>& weak) {
  StatePtr st = weak.lock();
  if (st == nullptr) return;
  {
    std::lock_guard lock(mu_);
    if (st->phase != LeasePhase::kWaiting) return;  // resumed already; the walk checks the deadline itself
    unparkLocked(st);
    st->phase = LeasePhase::kRunning;
  }
  advance(st);  // finds the block still in flight, past the deadline: stops there
}

void PrefixCache::finishLookup(const StatePtr& st) {
  LeaseState& s = *st;
  const int32_t bt = block_tokens_;
  const int32_t n = static_cast<int32_t>(s.ids.size());
  s.hit_blocks = static_cast<int32_t>(s.blocks.size());
  std::vector<Victim> victims;
  std::vector<int32_t> unexplained;  // missed blocks that read as new
  bool cancelled = false;
  {
    std::lock_guard lock(mu_);
    // Deepest first, so a prefix's first blocks are the most recently used.
    for (int32_t k = s.hit_blocks - 1; k >= 0; --k) {
      auto it = index_.find((*s.hit_keys)[static_cast<size_t>(k)]);
      if (it != index_.end()) touchLocked(it->second, it->first);
    }
    victims = evictLocked(-1, std::numeric_limits<int32_t>::max());
    cancelled = s.cancelled;
    s.phase = cancelled ? LeasePhase::kDone : LeasePhase::kReady;
    if (!cancelled) classifyMissesLocked(s, unexplained);
  }
  finishEviction(victims);
  classifyAsOlderIdentity(s, unexplained);
  if (cancelled) {
    counters_->cancelled.fetch_add(1, std::memory_order_relaxed);
    cleanUp(s);
    return;
  }
  // Counted when a lookup completes, so that a snapshot's token counts add
  // up: prompt = tier-0 hits + disk hits + computed.
  const uint64_t tier0_tokens = static_cast<uint64_t>(s.tier0_blocks) * bt;
  const uint64_t hit_tokens = static_cast<uint64_t>(s.hit_blocks) * bt;
  counters_->lookups.fetch_add(1, std::memory_order_relaxed);
  counters_->prompt_tokens.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  counters_->tier0_hit.fetch_add(tier0_tokens, std::memory_order_relaxed);
  counters_->tier0_miss.fetch_add(static_cast<uint64_t>(n) - tier0_tokens, std::memory_order_relaxed);
  counters_->disk_hit.fetch_add(hit_tokens - tier0_tokens, std::memory_order_relaxed);
  counters_->disk_miss.fetch_add(static_cast<uint64_t>(n) - hit_tokens, std::memory_order_relaxed);
  recordAccesses(s);  // the miss-ratio curves: no lock of the index's
  {
    std::lock_guard lock(s.ready_mu);
    s.ready.store(true, std::memory_order_release);
  }
  s.ready_cv.notify_all();
  if (s.on_ready) s.on_ready();
}

void PrefixCache::resumeWaitersLocked(const Digest& key) {
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  for (StatePtr& w : it->second) {
    w->phase = LeasePhase::kRunning;
    io_->post([this, w] { advance(w); });
  }
  waiters_.erase(it);
}

void PrefixCache::unparkLocked(const StatePtr& st) {
  auto it = waiters_.find(st->awaited);
  if (it == waiters_.end()) return;
  std::erase(it->second, st);
  if (it->second.empty()) waiters_.erase(it);
}

}  // namespace lg::cache
