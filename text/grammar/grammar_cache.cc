#include "text/grammar/grammar_cache.h"

namespace lg::text::grammar {

std::string limitsKey(const Limits& l) {
  return std::to_string(l.max_schema_bytes) + "," + std::to_string(l.max_depth) + "," +
         std::to_string(l.max_nfa_states) + "," + std::to_string(l.max_nodes) + "," + std::to_string(l.max_rules) +
         "," + std::to_string(l.max_whitespace);
}

GrammarOrError GrammarCache::getOrCompile(const std::string& key, const std::function<GrammarOrError()>& compile) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++hits_;
      return it->second->second;
    }
    ++misses_;
  }
  GrammarOrError g = compile();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, g);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return g;
}

std::optional<GrammarOrError> GrammarCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++hits_;
  return it->second->second;
}

GrammarOrError GrammarCache::jsonSchema(const nlohmann::ordered_json& schema, const Limits& limits) {
  return getOrCompile("json_schema:" + limitsKey(limits) + ":" + schema.dump(),
                      [&] { return Grammar::fromJsonSchema(schema, limits); });
}
GrammarOrError GrammarCache::jsonSchema(const nlohmann::json& schema, const Limits& limits) {
  return jsonSchema(nlohmann::ordered_json::parse(schema.dump()), limits);
}
GrammarOrError GrammarCache::anyJsonObject(const Limits& limits) {
  return getOrCompile("json_object:" + limitsKey(limits), [&] { return Grammar::anyJsonObject(limits); });
}
GrammarOrError GrammarCache::regex(std::string_view regex, const Limits& limits) {
  return getOrCompile("regex:" + limitsKey(limits) + ":" + std::string(regex),
                      [&] { return Grammar::fromRegex(regex, limits); });
}
GrammarOrError GrammarCache::choices(const std::vector<std::string>& choices, const Limits& limits) {
  return getOrCompile("choice:" + limitsKey(limits) + ":" + nlohmann::json(choices).dump(),
                      [&] { return Grammar::fromChoices(choices, limits); });
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}
uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return hits_;
}
uint64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return misses_;
}

}  // namespace lg::text::grammar
