// ResponseStore: the stored responses of POST /v1/responses (`store`,
// `previous_response_id`, GET and DELETE /v1/responses/{id}), per API key,
// each kept until it expires (server.stored_response_ttl_s, 30 days by
// default as at OpenAI).
//
// Why here and not in billing/: a record is Responses API data (input items
// and the response object in OpenAI's JSON shape), and continuing from one is
// a matter of that schema, which billing/ should not know. It is kept in the
// billing store (billing::BillingDb) because that is the process's private,
// durable, per-key store; billing/ lends it a table ("resp/", "respexp/").
//
// Records are keyed by their owner, the API key id, then the response id:
//   resp/<key id>/<response id>                 -> {created, expires, input, response}
//   respexp/<expires, 20 digits>/<key id>/<id>  -> the record's key (expiry order)
// so a lookup by another key reads a key that does not exist: it takes the
// same path as an unknown id and cannot tell a client whether the id exists.
// A revoked key's records stay unreadable until they expire.
//
// Expired records are never returned: a read that finds one deletes it, and
// record() deletes up to kSweepBatch expired records at most once a minute,
// so the table stays bounded without a thread of its own; sweepExpired() at
// startup clears what expired while the server was down.
//
// Writes of new records are not synced (BillingDb::writeUnsynced): record()
// runs on the scheduler's engine thread, where an fsync would stall every
// running stream, and a record lost to a power failure costs its client a
// resend of the conversation, nothing more. DELETE, a client's explicit
// request, is synced.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "billing/billing_db.h"
#include "common/status.h"

namespace lg::proxy {

struct StoredResponse {
  nlohmann::json input = nlohmann::json::array();  // the request's effective input items
  nlohmann::json response;                         // the response object, as GET returns it
  int64_t created_unix = 0;
  int64_t expires_unix = 0;

  // The items a continuation starts from: the input, then the response's
  // output items (which the Responses parser reads as input items).
  nlohmann::json conversation() const;
};

struct ResponseStoreOptions {
  int64_t ttl_s = 30 * 24 * 3600;
  std::function<int64_t()> now;  // Unix seconds; empty: the system clock (tests pass their own)
};

class ResponseStore {
 public:
  static constexpr int64_t kSweepBatch = 64;
  static constexpr int64_t kSweepInterval_s = 60;

  // `db` must outlive the store.
  ResponseStore(billing::BillingDb& db, ResponseStoreOptions options);

  // Keeps a finished response for `owner` (an API key id), unless the
  // request said `store: false` or the response did not finish (only
  // "completed" and "incomplete" responses are kept, as at OpenAI; failed
  // and cancelled ones are not). `input`: the effective input items; the
  // response's `id` names the record. Not synced (see above).
  Status record(std::string_view owner, bool store, const nlohmann::json& input, const nlohmann::json& response);

  // The owner's unexpired record, or nothing: an unknown id, another key's
  // id and an expired record (deleted on the way) look the same.
  Result<std::optional<StoredResponse>> get(std::string_view owner, std::string_view id);

  // Deletes the owner's record, synced. False when get() would find none.
  Result<bool> remove(std::string_view owner, std::string_view id);

  // Deletes up to `max_records` expired records, oldest first; returns how
  // many. Not synced.
  Result<int64_t> sweepExpired(int64_t max_records);

 private:
  int64_t now() const;
  // The keys of up to `max_records` expired records, and their expiry keys.
  Status collectExpired(int64_t now, int64_t max_records, std::vector<std::string>& keys);

  billing::BillingDb& db_;
  const ResponseStoreOptions options_;
  std::atomic<int64_t> next_sweep_unix_{0};
};

// A Responses `input` as a list of items: a string is one user message.
nlohmann::json inputItems(const nlohmann::json& input);

// The input of a request that continues `previous`: its conversation, then
// the request's own items. The previous request's instructions are not
// carried over (OpenAI's semantics): they were never an input item.
nlohmann::json continuedInput(const StoredResponse& previous, const nlohmann::json& input);

}  // namespace lg::proxy
