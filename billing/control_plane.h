// ControlPlane: the one seam through which the billing store's control
// records change: API keys (key/), teams (team/), the budgets the admin set
// (budget/), price versions (price/), purges of stored responses
// (resppurge/) and the teams' consents to prompt snippets (snippets/,
// proxy/gateway/snippet_consent.h) (docs/billing.md, "The control plane").
//
// A change is a function run against the records as they are in the source
// of truth: it reads what it needs (ControlTxn::get) and says what to put
// and erase. update() runs it in one transaction, serialized with every
// other change (of this replica and, with PostgreSQL, of every replica),
// commits it durably, and applies the result to this replica before it
// returns: the billing store (one synced batch) and the memory of each store
// that registered for the records' prefixes (ControlApplier). The stores
// never write control records themselves, so their memory changes only
// through applyControl(), whether the change was made here or elsewhere.
//
// Implementations:
//   LocalControlPlane (here): the billing store is the source of truth (one
//     replica; what serve runs without billing.postgres_url).
//   pg::PgControlPlane (billing/postgres/pg_control_plane.h): PostgreSQL is,
//     and a follower thread applies the other replicas' changes.
//
// Thread-safety: update() may be called from any thread, concurrently; a
// change function must not take a lock that an applier takes (appliers run
// under the control plane's own lock), nor call update() itself.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "billing/billing_db.h"
#include "common/status.h"

namespace lg::billing {

// The prefixes of the control records in the billing store. Everything else
// in it (the ledger, stored responses, secrets) is this replica's own.
inline constexpr std::string_view kControlPrefixes[] = {"key/", "team/", "budget/", "price/", "resppurge/",
                                                        "snippets/"};
bool isControlKey(std::string_view key);

// One control record as committed: its value, or nullopt when it was erased.
struct ControlRecord {
  std::string key;
  std::optional<std::string> value;
  // Committed by another replica (the follower applied it); false for this
  // replica's own changes and for every change of a LocalControlPlane.
  bool remote = false;
};

// What a change reads and writes. Reads see the source of truth as of the
// transaction (serialized with every other change) and this change's own
// writes before them.
class ControlTxn {
 public:
  virtual ~ControlTxn() = default;

  // The current values of `keys` (nullopt: absent or erased), in order.
  Result<std::vector<std::optional<std::string>>> get(const std::vector<std::string>& keys);
  Result<std::optional<std::string>> get(const std::string& key);
  // Keys must be control keys of printable ASCII (an id that came from a
  // request and holds anything else is simply never found by get()).
  void put(std::string key, std::string value);
  void erase(std::string key);

  const std::vector<ControlRecord>& writes() const { return writes_; }
  // Forgets the writes (a change run again starts afresh).
  void reset() { writes_.clear(); }

 protected:
  // The committed values of `keys` (all well-formed), in order.
  virtual Result<std::vector<std::optional<std::string>>> read(const std::vector<std::string>& keys) = 0;

 private:
  std::vector<ControlRecord> writes_;
};

// A store that keeps control records in memory.
class ControlApplier {
 public:
  virtual ~ControlApplier() = default;
  // Records under the prefixes it registered, already durable in the billing
  // store, in commit order. Called under the control plane's apply lock, on
  // the thread that applies them (an update()'s caller, or the follower).
  // Must not block on I/O nor call update().
  virtual void applyControl(const std::vector<ControlRecord>& records) = 0;
};

class ControlPlane {
 public:
  using Change = std::function<Status(ControlTxn&)>;

  virtual ~ControlPlane() = default;
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // Runs `change` in one transaction and, unless it returns an error (which
  // update() returns, nothing written), commits its writes and applies them
  // (and whatever else this replica had not yet applied) here. `change` may
  // run more than once (a transaction retried); each run starts with no
  // writes. Unavailable: the source of truth could not be reached, or the
  // commit's outcome is unknown; `what` names the change in messages.
  virtual Status update(std::string_view what, const Change& change) = 0;

  // `applier` is given, from now on, every record whose key starts with one
  // of `prefixes`. Register before the first update() (and, with
  // PostgreSQL, before the follower starts); the applier must outlive this.
  void addApplier(std::vector<std::string> prefixes, ControlApplier* applier);

  BillingDb& db() const { return db_; }

 protected:
  explicit ControlPlane(BillingDb& db) : db_(db) {}
  // Writes `records` to the billing store (one synced batch, with `extra`
  // puts of the implementation's own), then hands each applier its records,
  // in order. The caller holds its apply lock.
  Status applyLocally(const std::vector<ControlRecord>& records,
                      const std::vector<std::pair<std::string, std::string>>& extra = {});

 private:
  BillingDb& db_;
  std::vector<std::pair<std::vector<std::string>, ControlApplier*>> appliers_;  // set before concurrent use
};

// The billing store as the source of truth: one replica. update() holds one
// mutex across the read, the synced write and the appliers, so changes are
// serialized and a change is in memory when update() returns.
class LocalControlPlane final : public ControlPlane {
 public:
  explicit LocalControlPlane(BillingDb& db) : ControlPlane(db) {}
  Status update(std::string_view what, const Change& change) override;

 private:
  std::mutex mu_;
};

// Whether `key` can name a control record (printable ASCII, 1..512 bytes):
// what ControlTxn::get reads and put writes.
bool wellFormedControlKey(std::string_view key);

}  // namespace lg::billing
