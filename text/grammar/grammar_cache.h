// GrammarCache: compiled grammars by their canonical text (the kind, the
// schema's compact dump or the regex/choices, the limits), so a repeated
// schema costs a lookup. Errors are cached too (a bad schema sent again fails
// just as fast). Bounded: least recently used entries are dropped.
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "text/grammar/grammar.h"

namespace lg::text::grammar {

class GrammarCache {
 public:
  explicit GrammarCache(size_t capacity = 256) : capacity_(capacity) {}

  // The grammar for `key`, compiled by `compile` on a miss (outside the lock:
  // two threads missing the same key may both compile; one result is kept).
  GrammarOrError getOrCompile(const std::string& key, const std::function<GrammarOrError()>& compile);
  // The entry for `key` if there is one (counted as a hit), without compiling.
  std::optional<GrammarOrError> find(const std::string& key);

  GrammarOrError jsonSchema(const nlohmann::ordered_json& schema, const Limits& limits = {});
  GrammarOrError jsonSchema(const nlohmann::json& schema, const Limits& limits = {});
  GrammarOrError anyJsonObject(const Limits& limits = {});
  GrammarOrError regex(std::string_view regex, const Limits& limits = {});
  GrammarOrError choices(const std::vector<std::string>& choices, const Limits& limits = {});

  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<std::string, GrammarOrError>> lru_;  // front: most recent
  std::unordered_map<std::string, std::list<std::pair<std::string, GrammarOrError>>::iterator> index_;
  uint64_t hits_ = 0, misses_ = 0;
};

// The part of a cache key that the limits contribute.
std::string limitsKey(const Limits& limits);

}  // namespace lg::text::grammar
