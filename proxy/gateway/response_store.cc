#include "proxy/gateway/response_store.h"

#include <charconv>
#include <cstdio>

#include "common/unix_time.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr std::string_view kRecordPrefix = "resp/";
constexpr std::string_view kExpiryPrefix = "respexp/";
constexpr size_t kExpiryDigits = 20;

// Ids come from clients (paths, previous_response_id): anything that is not
// one of ours, or would escape its place in a key, is simply not found.
bool validName(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string recordKey(std::string_view owner, std::string_view id) {
  return std::string(kRecordPrefix) + std::string(owner) + "/" + std::string(id);
}

// Zero-padded so that key order is expiry order.
std::string expiryKey(int64_t expires, std::string_view owner, std::string_view id) {
  char digits[kExpiryDigits + 1];
  std::snprintf(digits, sizeof digits, "%020lld", static_cast<long long>(expires));
  return std::string(kExpiryPrefix) + digits + "/" + std::string(owner) + "/" + std::string(id);
}

// A string field, or "" when absent or not a string (json::value would throw).
std::string stringField(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<int64_t> expiryOf(std::string_view expiry_key) {
  if (expiry_key.size() < kExpiryPrefix.size() + kExpiryDigits) return std::nullopt;
  const char* first = expiry_key.data() + kExpiryPrefix.size();
  int64_t value = 0;
  auto [end, ec] = std::from_chars(first, first + kExpiryDigits, value);
  if (ec != std::errc() || end != first + kExpiryDigits) return std::nullopt;
  return value;
}

}  // namespace

json StoredResponse::conversation() const {
  json items = input.is_array() ? input : json::array();
  if (response.is_object()) {
    if (auto it = response.find("output"); it != response.end() && it->is_array()) {
      for (const json& item : *it) items.push_back(item);
    }
  }
  return items;
}

ResponseStore::ResponseStore(billing::BillingDb& db, ResponseStoreOptions options)
    : db_(db), options_(std::move(options)) {}

int64_t ResponseStore::now() const {
  return options_.now ? options_.now() : unixSeconds();
}

Status ResponseStore::record(std::string_view owner, bool store, const json& input, const json& response) {
  if (!store || !response.is_object()) return Status::ok();
  const std::string status = stringField(response, "status");
  if (status != "completed" && status != "incomplete") return Status::ok();
  const std::string id = stringField(response, "id");
  if (!validName(owner) || !validName(id)) return invalidArgument("a stored response needs a valid owner and id");
  const int64_t t = now();
  const int64_t expires = t + options_.ttl_s;
  const json value{{"created", t}, {"expires", expires}, {"input", input}, {"response", response}};
  const std::string key = recordKey(owner, id);
  std::vector<std::string> deletes;
  // Sweeps ride on writes, at most one writer a minute, a bounded number of
  // records each: the table never grows past what expiry allows, and no
  // request pays for more than kSweepBatch deletions.
  int64_t due = next_sweep_unix_.load();
  if (t >= due && next_sweep_unix_.compare_exchange_strong(due, t + kSweepInterval_s)) {
    LG_RETURN_IF_ERROR(collectExpired(t, kSweepBatch, deletes));
  }
  return db_.writeUnsynced({{key, value.dump(-1, ' ', false, json::error_handler_t::replace)},
                            {expiryKey(expires, owner, id), key}},
                           deletes);
}

Result<std::optional<StoredResponse>> ResponseStore::get(std::string_view owner, std::string_view id) {
  if (!validName(owner) || !validName(id)) return std::optional<StoredResponse>();
  const std::string key = recordKey(owner, id);
  LG_ASSIGN_OR_RETURN(std::optional<std::string> value, db_.get(key));
  if (!value) return std::optional<StoredResponse>();
  const json j = json::parse(*value, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("response") || !j["response"].is_object() ||
      !j.contains("expires") || !j["expires"].is_number_integer() || !j.contains("created") ||
      !j["created"].is_number_integer()) {
    return dataLoss("stored response " + key + " is damaged");
  }
  StoredResponse r;
  r.created_unix = j["created"].get<int64_t>();
  r.expires_unix = j["expires"].get<int64_t>();
  if (r.expires_unix <= now()) {
    LG_RETURN_IF_ERROR(db_.writeUnsynced({}, {key, expiryKey(r.expires_unix, owner, id)}));
    return std::optional<StoredResponse>();
  }
  r.input = j.contains("input") && j["input"].is_array() ? j["input"] : json::array();
  r.response = j["response"];
  return std::optional<StoredResponse>(std::move(r));
}

Result<bool> ResponseStore::remove(std::string_view owner, std::string_view id) {
  LG_ASSIGN_OR_RETURN(std::optional<StoredResponse> found, get(owner, id));
  if (!found) return false;
  LG_RETURN_IF_ERROR(db_.write({}, {recordKey(owner, id), expiryKey(found->expires_unix, owner, id)}));
  return true;
}

Result<int64_t> ResponseStore::sweepExpired(int64_t max_records) {
  std::vector<std::string> deletes;
  LG_RETURN_IF_ERROR(collectExpired(now(), max_records, deletes));
  if (deletes.empty()) return int64_t{0};
  LG_RETURN_IF_ERROR(db_.writeUnsynced({}, deletes));
  return static_cast<int64_t>(deletes.size() / 2);
}

Status ResponseStore::collectExpired(int64_t now, int64_t max_records, std::vector<std::string>& keys) {
  int64_t found = 0;
  Status bad;
  LG_RETURN_IF_ERROR(db_.scan(kExpiryPrefix, [&](std::string_view key, std::string_view record_key) {
    if (found >= max_records) return false;
    const std::optional<int64_t> expires = expiryOf(key);
    if (!expires) {
      bad = dataLoss("stored responses: expiry entry " + std::string(key) + " is damaged");
      return false;
    }
    if (*expires > now) return false;  // key order is expiry order: the rest expire later
    keys.emplace_back(record_key);
    keys.emplace_back(key);
    ++found;
    return true;
  }));
  return bad;
}

json inputItems(const json& input) {
  if (input.is_string()) {
    return json::array({json{{"type", "message"},
                             {"role", "user"},
                             {"content", json::array({json{{"type", "input_text"}, {"text", input}}})}}});
  }
  return input.is_array() ? input : json::array();
}

json continuedInput(const StoredResponse& previous, const json& input) {
  json items = previous.conversation();
  for (const json& item : inputItems(input)) items.push_back(item);
  return items;
}

}  // namespace lg::proxy
