#include "billing/response_index.h"

#include <atomic>
#include <cinttypes>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/unix_time.h"

namespace lg::billing {

std::string responseIndexMarkerKey(std::string_view owner, std::string_view response_id) {
  static std::atomic<uint64_t> next{static_cast<uint64_t>(unixMicros())};
  char unique[24];
  std::snprintf(unique, sizeof unique, "%020" PRIu64, next.fetch_add(1));
  return std::string(kResponseIndexMarkers) + std::string(owner) + "/" + std::string(response_id) + "/" + unique;
}

std::string responseIndexMarkerValue(int64_t expires_s, bool deleted) {
  return nlohmann::json{{"expires", expires_s}, {"deleted", deleted}}.dump();
}

std::optional<ResponseIndexMarker> parseResponseIndexMarker(std::string_view key, std::string_view value) {
  if (!key.starts_with(kResponseIndexMarkers)) return std::nullopt;
  std::string_view rest = key.substr(kResponseIndexMarkers.size());
  const size_t first = rest.find('/');
  const size_t last = rest.rfind('/');
  if (first == std::string_view::npos || last == first || first == 0 || last == first + 1) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(value, nullptr, false);
  if (!j.is_object() || !j.contains("expires") || !j["expires"].is_number_integer() || !j.contains("deleted") ||
      !j["deleted"].is_boolean()) {
    return std::nullopt;
  }
  ResponseIndexMarker m;
  m.owner = std::string(rest.substr(0, first));
  m.response_id = std::string(rest.substr(first + 1, last - first - 1));
  m.expires_s = j["expires"].get<int64_t>();
  m.deleted = j["deleted"].get<bool>();
  return m;
}

}  // namespace lg::billing
