// A bounded, thread-safe cache of BPE results per pre-token, shared by all
// callers of one tokenizer. Sharded by hash, one mutex per shard; a shard that
// fills up is cleared (the working set of words refills it quickly, and the
// bound holds without bookkeeping).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace lg::text {

class WordCache {
 public:
  // Words outside [kMinBytes, kMaxBytes] are never cached: short ones are
  // cheaper to merge than to look up, long ones would let a client fill memory.
  static constexpr size_t kMinBytes = 4;
  static constexpr size_t kMaxBytes = 64;

  explicit WordCache(size_t max_entries = 1 << 18);

  // Appends the cached ids of `word` to `out` and returns true on a hit.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, const int32_t* ids, size_t count) const;

  static bool cacheable(std::string_view word) { return word.size() >= kMinBytes && word.size() <= kMaxBytes; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, Hash, std::equal_to<>> map;
  };
  static constexpr size_t kShards = 64;

  size_t per_shard_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace lg::text
