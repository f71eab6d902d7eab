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
//   resp/<key id>/<response id>                 -> {v: 2, created, expires, parent, depth, items, response}
//   respexp/<expires, 20 digits>/<key id>/<id>  -> the record's key (expiry order)
//   respkid/<key id>/<id>                       -> "" (a continuation refers to it)
// so a lookup by another key reads a key that does not exist: it takes the
// same path as an unknown id and cannot tell a client whether the id exists.
// A revoked key's records stay unreadable until they expire.
//
// What a record holds (issue 21, item 7). Only what reaches the prompt is
// kept: the turn's message and tool-call items reduced to the fields the
// Responses parser reads (promptItems: a 29 MB reasoning item, hosted-tool
// items and unknown fields of an item are never stored), and the response
// object. A continuation (previous_response_id) is stored as a reference to
// its parent plus its own new items, so a chain's stored bytes grow with
// each turn's new input, not with the whole conversation; reading a
// conversation walks the chain (conversation()). The walk is bounded: a
// continuation whose parent is `max_chain_depth` deep, or whose chain has
// less than half the TTL left, is stored whole instead (a new root), so a
// read is at most max_chain_depth + 1 point reads and a chain never outlives
// its records (a continuation expires no later than its parent). A record
// larger than `max_record_bytes` is refused (checkSize, before generation)
// or, if its output made it so, not kept.
//
// DELETE by the client removes a record outright unless a continuation
// refers to it (respkid/); then it leaves a tombstone: the id is gone at
// once for GET and previous_response_id, but the items the later turns of
// its chain read stay, unreadable by id, until the record expires (as they
// did before item 7, copied into every later turn). The admin's purge (purgeOwner)
// deletes a key's records outright.
//
// Records written before item 7 ({created, expires, input, response}, the
// whole conversation in `input`) read as roots.
//
// Replicas (billing.postgres_url; billing/response_index.h). Records stay in
// the billing store of the replica that made them; with an index, each write
// of a record, each DELETE and each purge also writes, in the same batch, a
// marker that the index pushes to PostgreSQL. heldElsewhere() tells the
// gateway, for an id this store does not hold, which other replica does, so
// that it refuses the request as misdirected rather than answer "not found".
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
#include "billing/response_index.h"
#include "common/status.h"

namespace lg::proxy {

struct StoredResponse {
  // This record's own prompt items: the turn's new items for a continuation,
  // the whole conversation before the turn for a root.
  nlohmann::json input = nlohmann::json::array();
  nlohmann::json response;  // the response object, as GET returns it
  std::string parent;       // the previous response's id; empty: a root
  int depth = 0;            // records above this one in its chain
  int64_t created_unix = 0;
  int64_t expires_unix = 0;

  // This record's part of a conversation: its input, then the response's
  // output items (which the Responses parser reads as input items).
  nlohmann::json conversation() const;
};

// The conversation a continuation of one stored response starts from.
struct StoredConversation {
  nlohmann::json items = nlohmann::json::array();  // every turn's items, oldest first
  std::string id;            // the response continued
  int depth = 0;             // its depth
  int64_t expires_unix = 0;  // the chain's: the earliest expiry of its records
};

// What record() keeps of one turn's input.
struct StoredTurn {
  nlohmann::json items = nlohmann::json::array();  // promptItems() of what the record holds
  std::string parent;                              // empty: a root
  int depth = 0;
  int64_t expires_cap_unix = 0;  // 0: none; a continuation never outlives its chain
};

struct ResponseStoreOptions {
  int64_t ttl_s = 30 * 24 * 3600;
  // A record's bytes (its items and the response object, as stored); larger
  // is refused before generation (checkSize) or not kept.
  int64_t max_record_bytes = int64_t{4} << 20;
  // Records in a chain before a continuation is stored whole (bounds a read).
  int max_chain_depth = 32;
  std::function<int64_t()> now;  // Unix seconds; empty: the system clock (tests pass their own)
  // Replicas: where each record lives (null: this replica alone). Must
  // outlive the store.
  billing::ResponseIndex* index = nullptr;
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
  // and cancelled ones are not). `turn`: what turnFor() chose; the
  // response's `id` names the record. A record over max_record_bytes is not
  // kept (ResourceExhausted; its client already has the response). Not
  // synced (see above).
  Status record(std::string_view owner, bool store, const StoredTurn& turn, const nlohmann::json& response);
  // A root record of `input` (its promptItems): record(turnFor(nullptr, input)).
  Status record(std::string_view owner, bool store, const nlohmann::json& input, const nlohmann::json& response) {
    return record(owner, store, turnFor(nullptr, input), response);
  }

  // What a new turn stores: a reference to `previous` and `new_items`, or
  // (previous null, too deep, or its chain too close to expiry) a root
  // holding the whole conversation.
  StoredTurn turnFor(const StoredConversation* previous, const nlohmann::json& new_items) const;
  // InvalidArgument when the turn's items alone pass max_record_bytes.
  Status checkSize(const StoredTurn& turn) const;

  // The owner's unexpired record, or nothing: an unknown id, another key's
  // id, a deleted and an expired record (deleted on the way) look the same.
  Result<std::optional<StoredResponse>> get(std::string_view owner, std::string_view id);

  // The conversation a continuation of the owner's response `id` starts
  // from, its chain walked; nothing when get() finds nothing or an ancestor
  // is gone. At most max_chain_depth + 1 point reads.
  Result<std::optional<StoredConversation>> conversation(std::string_view owner, std::string_view id);

  // Deletes the owner's record, synced: a tombstone that keeps only what a
  // later turn of its chain reads (see above). False when get() would find none.
  Result<bool> remove(std::string_view owner, std::string_view id);

  // For an id get() does not find: the other replica that holds the owner's
  // record, or nothing (no index, or no replica holds it). Unavailable: the
  // index cannot be read now. A query: call it on the blocking pool.
  Result<std::optional<std::string>> heldElsewhere(std::string_view owner, std::string_view id) const;

  // Deletes every record of `owner` (tombstones included) outright, synced,
  // in batches; returns how many. The admin's purge.
  Result<int64_t> purgeOwner(std::string_view owner);

  // Records not kept because they passed max_record_bytes (checkSize's
  // refusals are the gateway's to count).
  uint64_t oversizeDropped() const { return oversize_dropped_.load(); }
  int64_t maxRecordBytes() const { return options_.max_record_bytes; }
  // Deletes every record of these owners (the keys of a deleted team, issue
  // 21 item 10), synced; returns how many. A record being written while this
  // runs may survive it: stop the owners' requests first.
  Result<int64_t> purgeOwners(const std::vector<std::string>& owners);

  // Deletes up to `max_records` expired records, oldest first; returns how
  // many. Not synced.
  Result<int64_t> sweepExpired(int64_t max_records);

 private:
  int64_t now() const;
  // The keys of up to `max_records` expired records, and their expiry keys.
  Status collectExpired(int64_t now, int64_t max_records, std::vector<std::string>& keys);
  // The record as stored, tombstones included; nothing when absent or
  // expired (an expired one is deleted).
  Result<std::optional<StoredResponse>> read(std::string_view owner, std::string_view id, bool* deleted);

  billing::BillingDb& db_;
  const ResponseStoreOptions options_;
  std::atomic<int64_t> next_sweep_unix_{0};
  std::atomic<uint64_t> oversize_dropped_{0};
};

// A Responses `input` as a list of items: a string is one user message.
nlohmann::json inputItems(const nlohmann::json& input);

// The items of `items` that reach a prompt, reduced to the fields the
// Responses parser reads (messages, function and custom tool calls and their
// outputs; text content parts as {type, text}); reasoning items, hosted-tool
// items and anything unknown are left out. What a record stores.
nlohmann::json promptItems(const nlohmann::json& items);

// The input of a request that continues `previous`: its conversation, then
// the request's own items. The previous request's instructions are not
// carried over (OpenAI's semantics): they were never an input item.
nlohmann::json continuedInput(const StoredConversation& previous, const nlohmann::json& input);

}  // namespace lg::proxy
