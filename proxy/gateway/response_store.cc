#include "proxy/gateway/response_store.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "common/unix_time.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr std::string_view kRecordPrefix = "resp/";
constexpr std::string_view kExpiryPrefix = "respexp/";
constexpr std::string_view kChildPrefix = "respkid/";
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

// The marker that a continuation refers to the record: its key under kChildPrefix.
std::string childKey(std::string_view owner, std::string_view id) {
  return std::string(kChildPrefix) + std::string(owner) + "/" + std::string(id);
}
std::string childKeyOfRecord(std::string_view record_key) {
  return std::string(kChildPrefix) + std::string(record_key.substr(kRecordPrefix.size()));
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

StoredTurn ResponseStore::turnFor(const StoredConversation* previous, const json& new_items) const {
  StoredTurn turn;
  if (previous == nullptr) {
    turn.items = promptItems(new_items);
    return turn;
  }
  // A reference while the walk stays short and the chain lives long enough
  // to be worth continuing; else the whole conversation once, as a new root
  // (at most one full copy per max_chain_depth turns or per half TTL).
  const bool deep = previous->depth + 1 >= std::max(options_.max_chain_depth, 1);
  const bool expiring = previous->expires_unix - now() < options_.ttl_s / 2;
  if (deep || expiring) {
    json all = previous->items;
    for (const json& item : inputItems(new_items)) all.push_back(item);
    turn.items = promptItems(all);
    return turn;
  }
  turn.items = promptItems(new_items);
  turn.parent = previous->id;
  turn.depth = previous->depth + 1;
  turn.expires_cap_unix = previous->expires_unix;
  return turn;
}

Status ResponseStore::checkSize(const StoredTurn& turn) const {
  const size_t bytes = turn.items.dump(-1, ' ', false, json::error_handler_t::replace).size();
  if (static_cast<int64_t>(bytes) > options_.max_record_bytes) {
    return invalidArgument("The input items to store are " + std::to_string(bytes) + " bytes, over the limit of " +
                           std::to_string(options_.max_record_bytes));
  }
  return Status::ok();
}

Status ResponseStore::record(std::string_view owner, bool store, const StoredTurn& turn, const json& response) {
  if (!store || !response.is_object()) return Status::ok();
  const std::string status = stringField(response, "status");
  if (status != "completed" && status != "incomplete") return Status::ok();
  const std::string id = stringField(response, "id");
  if (!validName(owner) || !validName(id)) return invalidArgument("a stored response needs a valid owner and id");
  if (!turn.parent.empty() && !validName(turn.parent)) return invalidArgument("a stored response's parent is invalid");
  const int64_t t = now();
  int64_t expires = t + options_.ttl_s;
  // A continuation never outlives the records it refers to.
  if (turn.expires_cap_unix > 0) expires = std::min(expires, turn.expires_cap_unix);
  json value{{"v", 2}, {"created", t}, {"expires", expires}, {"items", turn.items}, {"response", response}};
  if (!turn.parent.empty()) {
    value["parent"] = turn.parent;
    value["depth"] = turn.depth;
  }
  std::string bytes = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (static_cast<int64_t>(bytes.size()) > options_.max_record_bytes) {
    oversize_dropped_.fetch_add(1);
    return resourceExhausted("stored response " + id + " is " + std::to_string(bytes.size()) +
                             " bytes, over server.max_stored_response_bytes: not kept");
  }
  const std::string key = recordKey(owner, id);
  std::vector<std::string> deletes;
  // Sweeps ride on writes, at most one writer a minute, a bounded number of
  // records each: the table never grows past what expiry allows, and no
  // request pays for more than kSweepBatch deletions.
  int64_t due = next_sweep_unix_.load();
  if (t >= due && next_sweep_unix_.compare_exchange_strong(due, t + kSweepInterval_s)) {
    LG_RETURN_IF_ERROR(collectExpired(t, kSweepBatch, deletes));
  }
  std::vector<std::pair<std::string, std::string>> puts{{key, std::move(bytes)}, {expiryKey(expires, owner, id), key}};
  // The parent learns it has a continuation: a DELETE of it then keeps
  // what this chain reads. The parent outlives this record (expires_cap).
  if (!turn.parent.empty()) puts.emplace_back(childKey(owner, turn.parent), "");
  if (options_.index != nullptr) {
    puts.emplace_back(billing::responseIndexMarkerKey(owner, id), billing::responseIndexMarkerValue(expires, false));
  }
  LG_RETURN_IF_ERROR(db_.writeUnsynced(puts, deletes));
  if (options_.index != nullptr) options_.index->marked();
  return Status::ok();
}

Result<std::optional<StoredResponse>> ResponseStore::read(std::string_view owner, std::string_view id, bool* deleted) {
  *deleted = false;
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
    LG_RETURN_IF_ERROR(db_.writeUnsynced({}, {key, expiryKey(r.expires_unix, owner, id), childKey(owner, id)}));
    return std::optional<StoredResponse>();
  }
  // Version 2 keeps the turn's items; records from before it, the whole
  // effective input (a root).
  const char* items_key = j.contains("items") ? "items" : "input";
  r.input = j.contains(items_key) && j[items_key].is_array() ? j[items_key] : json::array();
  r.response = j["response"];
  if (auto it = j.find("parent"); it != j.end()) {
    if (!it->is_string() || !validName(it->get_ref<const std::string&>()) || !j.contains("depth") ||
        !j["depth"].is_number_integer()) {
      return dataLoss("stored response " + key + " has a damaged parent");
    }
    r.parent = it->get<std::string>();
    r.depth = j["depth"].get<int>();
  }
  *deleted = j.contains("deleted") && j["deleted"].is_boolean() && j["deleted"].get<bool>();
  return std::optional<StoredResponse>(std::move(r));
}

Result<std::optional<StoredResponse>> ResponseStore::get(std::string_view owner, std::string_view id) {
  bool deleted = false;
  LG_ASSIGN_OR_RETURN(std::optional<StoredResponse> r, read(owner, id, &deleted));
  if (deleted) return std::optional<StoredResponse>();
  return r;
}

Result<std::optional<StoredConversation>> ResponseStore::conversation(std::string_view owner, std::string_view id) {
  LG_ASSIGN_OR_RETURN(std::optional<StoredResponse> first, get(owner, id));
  if (!first) return std::optional<StoredConversation>();
  StoredConversation out;
  out.id = std::string(id);
  out.depth = first->depth;
  out.expires_unix = first->expires_unix;
  // Newest first, then reversed: each record's part is its items and output.
  std::vector<json> parts{first->conversation()};
  std::string parent = first->parent;
  int depth = first->depth;
  const int max_walk = std::max(options_.max_chain_depth, 1);
  while (!parent.empty()) {
    // Depths fall by one per step: a loop or an overlong chain is damage,
    // never a reason to read without bound.
    if (static_cast<int>(parts.size()) > max_walk || depth <= 0) {
      return dataLoss("stored response chain of " + std::string(id) + " is damaged");
    }
    bool deleted = false;  // a client's DELETE of an ancestor leaves what this chain reads
    LG_ASSIGN_OR_RETURN(std::optional<StoredResponse> up, read(owner, parent, &deleted));
    if (!up) return std::optional<StoredConversation>();  // expired or purged: the chain is gone
    if (up->depth != depth - 1) return dataLoss("stored response chain of " + std::string(id) + " is damaged");
    out.expires_unix = std::min(out.expires_unix, up->expires_unix);
    parts.push_back(up->conversation());
    parent = up->parent;
    depth = up->depth;
  }
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    for (json& item : *it) out.items.push_back(std::move(item));
  }
  return std::optional<StoredConversation>(std::move(out));
}

Result<bool> ResponseStore::remove(std::string_view owner, std::string_view id) {
  LG_ASSIGN_OR_RETURN(std::optional<StoredResponse> found, get(owner, id));
  if (!found) return false;
  LG_ASSIGN_OR_RETURN(std::optional<std::string> referred, db_.get(childKey(owner, id)));
  // The index learns it is gone, in the same write.
  std::vector<std::pair<std::string, std::string>> marker;
  if (options_.index != nullptr) {
    marker.emplace_back(billing::responseIndexMarkerKey(owner, id),
                        billing::responseIndexMarkerValue(found->expires_unix, true));
  }
  if (!referred) {
    LG_RETURN_IF_ERROR(db_.write(marker, {recordKey(owner, id), expiryKey(found->expires_unix, owner, id)}));
    if (options_.index != nullptr) options_.index->marked();
    return true;
  }
  // A tombstone: the response object goes, the part of the conversation a
  // later turn may refer to stays until the record expires.
  json output = json::array();
  if (auto it = found->response.find("output"); it != found->response.end() && it->is_array()) output = *it;
  json value{{"v", 2},           {"deleted", true},      {"created", found->created_unix},
             {"expires", found->expires_unix}, {"items", found->input}, {"response", json{{"output", output}}}};
  if (!found->parent.empty()) {
    value["parent"] = found->parent;
    value["depth"] = found->depth;
  }
  marker.emplace_back(recordKey(owner, id), value.dump(-1, ' ', false, json::error_handler_t::replace));
  LG_RETURN_IF_ERROR(db_.write(marker, {}));
  if (options_.index != nullptr) options_.index->marked();
  return true;
}

Result<std::optional<std::string>> ResponseStore::heldElsewhere(std::string_view owner, std::string_view id) const {
  if (options_.index == nullptr || !validName(owner) || !validName(id)) return std::optional<std::string>();
  LG_ASSIGN_OR_RETURN(std::optional<std::string> holder, options_.index->holder(owner, id));
  // This replica's own: the record is gone here (expired, purged) and its
  // marker not yet pushed.
  if (holder && *holder == options_.index->replica()) holder.reset();
  return holder;
}

Result<int64_t> ResponseStore::purgeOwner(std::string_view owner) {
  if (!validName(owner)) return int64_t{0};
  const std::string prefix = std::string(kRecordPrefix) + std::string(owner) + "/";
  int64_t purged = 0;
  // Batches bound a write's size; each batch's keys are gone from the scan
  // that follows it.
  constexpr size_t kBatch = 256;
  for (;;) {
    std::vector<std::string> deletes;
    std::vector<std::pair<std::string, std::string>> markers;  // the index learns each is gone
    Status bad;
    LG_RETURN_IF_ERROR(db_.scan(prefix, [&](std::string_view key, std::string_view value) {
      const std::string_view id = key.substr(prefix.size());
      deletes.emplace_back(key);
      // The expiry entry is named by the record's expiry; a damaged record
      // keeps its (harmless) expiry entry, which the sweep removes.
      const json j = json::parse(value, nullptr, false);
      const bool dated = j.is_object() && j.contains("expires") && j["expires"].is_number_integer();
      if (dated) deletes.push_back(expiryKey(j["expires"].get<int64_t>(), owner, id));
      if (options_.index != nullptr) {
        markers.emplace_back(billing::responseIndexMarkerKey(owner, id),
                             billing::responseIndexMarkerValue(dated ? j["expires"].get<int64_t>() : 0, true));
      }
      ++purged;
      return deletes.size() < 2 * kBatch;
    }));
    LG_RETURN_IF_ERROR(bad);
    if (deletes.empty()) break;
    LG_RETURN_IF_ERROR(db_.write(markers, deletes));
    if (options_.index != nullptr) options_.index->marked();
  }
  // The owner's continuation markers.
  for (;;) {
    std::vector<std::string> deletes;
    const std::string kids = childKey(owner, "");
    LG_RETURN_IF_ERROR(db_.scan(kids, [&](std::string_view key, std::string_view) {
      deletes.emplace_back(key);
      return deletes.size() < kBatch;
    }));
    if (deletes.empty()) break;
    LG_RETURN_IF_ERROR(db_.write({}, deletes));
  }
  return purged;
}

Result<int64_t> ResponseStore::purgeOwners(const std::vector<std::string>& owners) {
  int64_t records = 0;
  for (const std::string& owner : owners) {
    LG_ASSIGN_OR_RETURN(int64_t n, purgeOwner(owner));
    records += n;
  }
  return records;
}

Result<int64_t> ResponseStore::sweepExpired(int64_t max_records) {
  std::vector<std::string> deletes;
  LG_RETURN_IF_ERROR(collectExpired(now(), max_records, deletes));
  if (deletes.empty()) return int64_t{0};
  LG_RETURN_IF_ERROR(db_.writeUnsynced({}, deletes));
  return static_cast<int64_t>(std::count_if(deletes.begin(), deletes.end(),
                                            [](const std::string& k) { return k.starts_with(kExpiryPrefix); }));
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
    if (std::string_view(record_key).starts_with(kRecordPrefix)) keys.push_back(childKeyOfRecord(record_key));
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

namespace {

// A content field as the parser reads it: a string, or its text parts as
// {type, text} (other parts, images and files, never reach a prompt).
json textContent(const json& content) {
  if (content.is_string()) return content;
  json parts = json::array();
  if (!content.is_array()) return parts;
  for (const json& part : content) {
    if (!part.is_object()) continue;
    const std::string type = stringField(part, "type");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) continue;
    parts.push_back(json{{"type", type.empty() ? "input_text" : type}, {"text", *text}});
  }
  return parts;
}

// The named fields of `item` that are present, copied.
json pick(const json& item, std::initializer_list<const char*> fields) {
  json out = json::object();
  for (const char* f : fields) {
    if (auto it = item.find(f); it != item.end()) out[f] = *it;
  }
  return out;
}

}  // namespace

json promptItems(const json& items) {
  json out = json::array();
  for (const json& item : inputItems(items)) {
    if (!item.is_object()) continue;
    std::string type = stringField(item, "type");
    if (type.empty() && item.contains("role")) type = "message";  // an "easy input message"
    if (type == "message") {
      json m{{"type", "message"}, {"role", item.contains("role") ? item["role"] : json("user")}};
      m["content"] = textContent(item.contains("content") ? item["content"] : json());
      out.push_back(std::move(m));
    } else if (type == "function_call") {
      out.push_back(pick(item, {"type", "call_id", "name", "arguments"}));
    } else if (type == "custom_tool_call") {
      out.push_back(pick(item, {"type", "call_id", "name", "input"}));
    } else if (type == "function_call_output" || type == "custom_tool_call_output") {
      json o = pick(item, {"type", "call_id"});
      o["output"] = textContent(item.contains("output") ? item["output"] : json());
      out.push_back(std::move(o));
    }
    // Reasoning (never shown to the model again), hosted-tool items (their
    // tools are not in the prompt) and anything else: not kept.
  }
  return out;
}

json continuedInput(const StoredConversation& previous, const json& input) {
  json items = previous.items;
  for (const json& item : inputItems(input)) items.push_back(item);
  return items;
}

}  // namespace lg::proxy
