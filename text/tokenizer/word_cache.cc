#include "text/tokenizer/word_cache.h"

namespace lg::text {

WordCache::WordCache(size_t max_entries)
    : per_shard_(max_entries / kShards > 0 ? max_entries / kShards : 1), shards_(new Shard[kShards]) {}

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  const size_t h = Hash{}(word);
  Shard& shard = shards_[h % kShards];
  std::lock_guard<std::mutex> lock(shard.mutex);
  auto it = shard.map.find(word);
  if (it == shard.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t count) const {
  const size_t h = Hash{}(word);
  Shard& shard = shards_[h % kShards];
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.map.size() >= per_shard_) shard.map.clear();
  shard.map.try_emplace(std::string(word), ids, ids + count);
}

}  // namespace lg::text
