// Traces and the exact LRU stack the SHARDS estimator
// (cache/miss_ratio_curve.h) is checked against, shared by its test and its
// benchmark (bench/cache/mrc_bench.cc). Written plainly on purpose: a vector
// of keys, most recent first, searched and rotated at every access.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lg::cache::testing {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x = x ^ (x >> 31);
  return x == 0 ? 1 : x;
}

// Mattson's LRU stack, exact. A request is a batch: each key's distance is
// its position in the stack before the request (no position: a first
// access), then the request's keys move to the top, the first one on top.
class ExactLruStack {
 public:
  static constexpr uint64_t kCold = ~uint64_t{0};

  // Returns each key's distance (kCold for a first access).
  std::vector<uint64_t> record(std::span<const uint64_t> keys) {
    std::vector<uint64_t> dist;
    for (uint64_t k : keys) {
      auto it = std::find(stack_.begin(), stack_.end(), k);
      dist.push_back(it == stack_.end() ? kCold : static_cast<uint64_t>(it - stack_.begin()));
    }
    for (size_t i = keys.size(); i-- > 0;) {
      auto it = std::find(stack_.begin(), stack_.end(), keys[i]);
      if (it == stack_.end()) {
        stack_.insert(stack_.begin(), keys[i]);
      } else {
        std::rotate(stack_.begin(), it, it + 1);
      }
    }
    for (uint64_t d : dist) {
      ++accesses_;
      if (d == kCold) continue;
      if (d >= by_distance_.size()) by_distance_.resize(d + 1, 0);
      ++by_distance_[d];
    }
    return dist;
  }
  std::vector<uint64_t> recordOne(uint64_t key) { return record(std::span<const uint64_t>(&key, 1)); }

  // Hit ratio of an LRU cache of `size` blocks: accesses at a distance below it.
  double hitRatio(double size) const {
    if (accesses_ == 0) return 0;
    uint64_t hits = 0;
    for (size_t d = 0; d < by_distance_.size() && static_cast<double>(d) < size; ++d) hits += by_distance_[d];
    return static_cast<double>(hits) / static_cast<double>(accesses_);
  }
  uint64_t accesses() const { return accesses_; }
  size_t distinct() const { return stack_.size(); }

 private:
  std::vector<uint64_t> stack_;  // most recent first
  std::vector<uint64_t> by_distance_;
  uint64_t accesses_ = 0;
};

// A trace of single accesses with chosen reuse distances: each access reuses
// the key at a drawn depth of the current stack (a mix of near, middle and far
// reuse) or, with probability `p_new`, a new key. `distances` receives each
// access's distance as built (kCold for new keys): the known answer.
struct SyntheticTrace {
  std::vector<uint64_t> keys;
  std::vector<uint64_t> distances;
};

inline SyntheticTrace knownDistanceTrace(size_t accesses, uint64_t seed, double p_new = 0.08) {
  SyntheticTrace t;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<uint64_t> stack;  // most recent first
  uint64_t next_key = seed * 1000003;
  for (size_t i = 0; i < accesses; ++i) {
    const double r = u(rng);
    uint64_t depth = ExactLruStack::kCold;
    if (!stack.empty() && r >= p_new) {
      // Near (a working set of ~200), middle (~2,000..6,000), far (10,000..30,000).
      const double m = u(rng);
      double d;
      if (m < 0.45) {
        d = u(rng) * 200;
      } else if (m < 0.8) {
        d = 2000 + u(rng) * 4000;
      } else {
        d = 10000 + u(rng) * 20000;
      }
      depth = std::min<uint64_t>(static_cast<uint64_t>(d), stack.size() - 1);
    }
    uint64_t key;
    if (depth == ExactLruStack::kCold) {
      key = splitmix64(++next_key);
      stack.insert(stack.begin(), key);
    } else {
      key = stack[depth];
      std::rotate(stack.begin(), stack.begin() + static_cast<ptrdiff_t>(depth),
                  stack.begin() + static_cast<ptrdiff_t>(depth) + 1);
    }
    t.keys.push_back(key);
    t.distances.push_back(depth);
  }
  return t;
}

// An agent-like trace of requests (batches of block keys, chained as the
// cache chains them): `teams` teams, each with a system prompt of
// `system_blocks` blocks (its tool list too), shared by its conversations;
// conversations that grow by a few blocks a turn (the reply and the next
// input), several open at once, interleaved at random; a conversation ends
// after a random number of turns and a new one starts.
struct AgentTraceOptions {
  int teams = 6;
  int system_blocks = 40;
  int open_conversations = 24;  // across teams
  int min_turns = 3;
  int max_turns = 30;
  int blocks_per_turn = 3;
  size_t requests = 6000;
  uint64_t seed = 7;
};

inline std::vector<std::vector<uint64_t>> agentTrace(const AgentTraceOptions& o) {
  std::mt19937_64 rng(o.seed);
  struct Conversation {
    int team = 0;
    uint64_t id = 0;
    int turns_left = 0;
    int blocks = 0;  // conversation blocks after the system prompt
  };
  uint64_t next_id = 1;
  auto fresh = [&](int team) {
    Conversation c;
    c.team = team;
    c.id = next_id++;
    c.turns_left = std::uniform_int_distribution<int>(o.min_turns, o.max_turns)(rng);
    c.blocks = std::uniform_int_distribution<int>(0, o.blocks_per_turn)(rng);
    return c;
  };
  std::vector<Conversation> open;
  for (int i = 0; i < o.open_conversations; ++i) open.push_back(fresh(i % o.teams));
  std::vector<std::vector<uint64_t>> trace;
  trace.reserve(o.requests);
  for (size_t r = 0; r < o.requests; ++r) {
    Conversation& c = open[std::uniform_int_distribution<size_t>(0, open.size() - 1)(rng)];
    std::vector<uint64_t> keys;
    uint64_t prev = splitmix64(0xabcdef ^ static_cast<uint64_t>(c.team));
    for (int b = 0; b < o.system_blocks; ++b) {
      prev = splitmix64(prev ^ static_cast<uint64_t>(b + 1) * 0x100000001b3ULL);
      keys.push_back(prev);
    }
    for (int b = 0; b < c.blocks; ++b) {
      prev = splitmix64(prev ^ (c.id << 20) ^ static_cast<uint64_t>(b + 1));
      keys.push_back(prev);
    }
    trace.push_back(std::move(keys));
    c.blocks += std::uniform_int_distribution<int>(1, o.blocks_per_turn)(rng);
    if (--c.turns_left == 0) c = fresh(std::uniform_int_distribution<int>(0, o.teams - 1)(rng));
  }
  return trace;
}

// Sizes to compare curves at: from `lo` to `hi` blocks, four per doubling.
inline std::vector<double> geometricSizes(double lo, double hi) {
  std::vector<double> sizes;
  for (double s = lo; s <= hi * 1.0001; s *= std::pow(2.0, 0.25)) sizes.push_back(std::round(s));
  return sizes;
}

}  // namespace lg::cache::testing
