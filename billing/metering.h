// Metering: billing's side of the requests the gateway serves, with no HTTP
// in it (docs/billing.md). It holds every billing policy that a request meets
// on its way through the edge:
//
//   - the rates a request pays (fixed when it arrives) and the most it may
//     cost, which is what its budget reservation holds (maxCost);
//   - the budget reservation and the quota refusal's wording;
//   - the Idempotency-Key protocol: a claim, a replay of the first response,
//     or a refusal (in use, reused with another body, spent);
//   - the request's ledger entry: the status of each choice and of the
//     request (entryStatus), and the commit before the client sees usage.
//
// The edge (proxy/gateway/) maps each outcome to HTTP: a QuotaRefusal to 429
// insufficient_quota, an IdempotencyDecision to a replay, 409 or 400.
//
// Entry status (docs/billing.md, "Entry status"): every choice of a request
// ends completed, cancelled, failed or refused; the request's status follows
// from its choices and from why its response ended early, if it did:
//
//   choice      its final event                         billed
//   completed   stop, length, tool calls                yes
//   refused     never admitted (queue full, timeout)    nothing ran
//   failed      engine error; or cancelled by the       no
//               server (its request timeout, shutdown,
//               a deadline)
//   cancelled   cancelled because the client left (it   yes: what it computed
//               closed, reset or stopped reading),
//               because a sibling was refused and the
//               response ended early, or because the
//               key was revoked while it ran
//
//   request: failed if any choice failed (the server's failure is never
//   billed); refused if every choice was, or none ran and one was refused;
//   completed if every choice completed; cancelled otherwise. A failed or
//   refused entry costs nothing; a completed or cancelled one costs what all
//   its choices computed (a choice refused in the queue computed nothing).
//
// Thread-safety: Metering's methods may be called concurrently. A
// MeteredRequest's methods may race (the I/O thread, the engine thread, the
// committer); a mutex orders them, and commit() runs once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "billing/budgets.h"
#include "billing/key_store.h"
#include "billing/ledger.h"
#include "billing/prices.h"
#include "billing/prompt_fingerprint.h"
#include "common/status.h"

namespace lg::billing {

// What the gateway meters with. A null ledger: nothing is metered (tests and
// tools); null prices: the built-in table; null budgets: none enforced.
struct MeteringServices {
  Ledger* ledger = nullptr;
  const PriceBook* prices = nullptr;
  Budgets* budgets = nullptr;
  const SystemPromptFingerprinter* fingerprints = nullptr;
};

// The most a generation of `prompt_tokens` capped at `max_tokens` can cost at
// `rates`: every prompt token at the higher of the cache-hit and cache-miss
// rates (what the cache will hold is not known when the request is admitted)
// and the cap at the output rate. A budget reservation holds this; the
// actual cost never exceeds it.
int64_t maxCost(const Rates& rates, int64_t prompt_tokens, int64_t max_tokens);

// ------------------------------------------------------------- idempotency

// An Idempotency-Key a request holds while it runs.
struct IdempotencyClaim {
  std::string key_hash;  // idempotencyKeyHash(header value)
  std::string digest;    // requestDigest(endpoint, body)
};

// What an Idempotency-Key header decides for a request.
struct IdempotencyDecision {
  enum class Kind : uint8_t {
    kClaimed,     // the request runs, holding `claim`
    kInvalidKey,  // not 1..255 printable ASCII characters
    kInFlight,    // another request holds the key now
    kReused,      // an earlier request used it with another endpoint or body (`record`)
    kReplay,      // an earlier request used it, and its whole response is kept (`record`)
    kSpent,       // an earlier request used it, billed once, response not kept (`record`)
  };
  Kind kind = Kind::kClaimed;
  IdempotencyClaim claim;                   // kClaimed
  std::optional<IdempotencyRecord> record;  // kReused, kReplay, kSpent
  // The client's message for the refusals (kInvalidKey, kInFlight, kReused, kSpent).
  std::string message() const;
};

// What an Idempotency-Key may be: 1..255 printable ASCII characters.
bool validIdempotencyKey(std::string_view key);

// ----------------------------------------------------------------- budgets

// Why a budget refused a request, with the client's message.
struct QuotaRefusal {
  BudgetRefusal refusal;
  std::string message;
};

// The quota refusal's message: which budget, what is left, what the request
// may cost and how it was reckoned.
std::string quotaMessage(const BudgetRefusal& refusal, const Principal& who);

// ----------------------------------------------------------- entry status

// How one choice ended, as its final event says.
enum class ChoiceEnd : uint8_t { kCompleted, kCancelled, kFailed, kRefused };

// Why a response ended before every choice finished; the first cause wins.
enum class EarlyEnd : uint8_t {
  kNone,
  kClientLeft,     // the client closed or reset the connection, or stopped reading
  kServerStopped,  // the server's request timeout, or a shutdown
  kPartRefused,    // a choice was refused, which ended the response; its siblings were cancelled
  kRevoked,        // the key was revoked (or its team deleted) while it ran
};
std::string_view earlyEndName(EarlyEnd why);  // "none", "client_left", ...

struct ChoiceUsage {
  int64_t prompt_tokens = 0;
  int64_t hit_tokens_tier0 = 0;
  int64_t hit_tokens_disk = 0;
  int64_t miss_tokens = 0;
  int64_t output_tokens = 0;
  // Whether the choice was admitted and computed (or reused) anything: a
  // request refused or cancelled in the queue reports its prompt's length
  // but neither hits nor misses.
  bool ran() const { return hit_tokens_tier0 + hit_tokens_disk + miss_tokens > 0 || output_tokens > 0; }
};

struct ChoiceResult {
  ChoiceEnd end = ChoiceEnd::kCompleted;
  std::string finish_reason;  // "stop", "length", "tool_calls", "cancelled", "error", "refused:queue_timeout", ...
  ChoiceUsage usage;
  double ttft_s = -1;         // submit to the first token; -1: none
  MissAnatomy miss;           // why its miss tokens missed (not recorded when it never ran)
};

// The status a choice is billed as, and the request's (the table above).
EntryStatus choiceStatus(const ChoiceResult& choice, EarlyEnd why);
EntryStatus entryStatus(const std::vector<ChoiceResult>& choices, EarlyEnd why);

// -------------------------------------------------------- a metered request

class MeteredRequest {
 public:
  struct Info {
    std::string request_id;       // the x-request-id the client is sent
    std::string response_id;      // chatcmpl-..., cmpl-..., resp_...
    Principal who;
    std::string model;            // the served model (what prices name)
    std::string requested_model;  // as the client named it
    std::string endpoint;
    std::string system_prompt;    // fingerprint; empty: none
    bool stream = false;
    int64_t start_us = 0;         // Unix microseconds the request arrived
  };

  // `choices`: the scheduler requests whose final events the entry waits for.
  MeteredRequest(Ledger& ledger, Info info, AppliedRates rates, size_t choices,
                 std::optional<IdempotencyClaim> claim, BudgetReservation reservation);
  // A request destroyed without commit() or abandon() (a handler threw, or
  // returned early, after admission) gives back what it held, as abandon()
  // does: its Idempotency-Key claim, which would otherwise answer every
  // retry "in progress" (409) until a restart, and its budget reservation.
  // No entry is written. The ledger must outlive the request.
  ~MeteredRequest();
  MeteredRequest(const MeteredRequest&) = delete;
  MeteredRequest& operator=(const MeteredRequest&) = delete;

  const Info& info() const { return info_; }
  const AppliedRates& rates() const { return rates_; }
  // What `hit`, `miss` and `output` tokens cost at this request's rates (usage.cost).
  Cost costOf(int64_t hit_tokens, int64_t miss_tokens, int64_t output_tokens) const;

  // The response is ending before every choice finished, for `why`; the
  // first cause recorded wins.
  void endedEarly(EarlyEnd why);
  // A choice's final event; true when it was the last one awaited.
  bool choiceEnded(size_t index, ChoiceResult result);
  // Bytes sent to a streaming client, kept for Idempotency-Key replays
  // (only with a claim; dropped past the ledger's max_replay_bytes).
  void keep(std::string_view bytes);

  // The request will not run after all (refused by a limit after it was
  // made): releases the Idempotency-Key claim and the budget reservation; no
  // entry is written.
  void abandon();

  // The entry as commit() would write it now (for tests and logs).
  LedgerEntry entry() const;
  // The status each choice is billed as, by index (those not ended yet: completed).
  std::vector<EntryStatus> choiceStatuses() const;

  // Commits the entry. `final_body` is the end of the response (kept for
  // replays, with what keep() saw); `then` (optional) runs once the entry is
  // durable or failed, on the ledger's committer thread, after the budget
  // reservation was released (the ledger counted the committed cost just
  // before).
  void commit(std::string_view final_body, std::string content_type, std::function<void(Status)> then);

 private:
  LedgerEntry entryLocked() const;

  Ledger& ledger_;
  const Info info_;
  const AppliedRates rates_;
  const std::optional<IdempotencyClaim> claim_;

  mutable std::mutex mu_;
  BudgetReservation reservation_;       // guarded by mu_; moved out by commit() or abandon()
  std::vector<ChoiceResult> choices_;   // guarded by mu_
  std::vector<bool> ended_;             // guarded by mu_
  size_t ended_count_ = 0;              // guarded by mu_
  EarlyEnd early_ = EarlyEnd::kNone;    // guarded by mu_
  std::string transcript_;              // guarded by mu_
  bool transcript_overflow_ = false;    // guarded by mu_
  bool committed_ = false;              // guarded by mu_
};

// ---------------------------------------------------------------- metering

class Metering {
 public:
  explicit Metering(MeteringServices services = {}) : services_(services) {}

  // Whether requests get ledger entries (a ledger is configured).
  bool enabled() const { return services_.ledger != nullptr; }
  const MeteringServices& services() const { return services_; }

  // The rates in force for `model` at `start_us`.
  AppliedRates ratesFor(std::string_view model, int64_t start_us) const;

  // The fingerprint of a prompt's leading (role, text) system and developer
  // messages as `team` sends them (a team id, common/team_id.h): the same
  // prompt has another fingerprint in every team. Empty without a
  // fingerprinter or such messages.
  std::string systemPromptFingerprint(std::string_view team,
                                      const std::vector<std::pair<std::string_view, std::string_view>>& messages) const;

  // Decides what the Idempotency-Key `header` means for a request of
  // `who` to `endpoint` with `body`. Error: the store could not be read.
  Result<IdempotencyDecision> claimIdempotencyKey(const Principal& who, std::string_view header,
                                                  std::string_view endpoint, std::string_view body) const;
  // Releases a claim whose request will not run.
  void releaseIdempotencyKey(const Principal& who, const IdempotencyClaim& claim) const;

  // Holds `amount` against the budgets of `who` (an empty reservation when
  // no budgets are enforced), or refuses holding nothing.
  std::variant<BudgetReservation, QuotaRefusal> reserve(const Principal& who, int64_t amount, int64_t now_s) const;

  // The request's metering, once it is admitted (null when not enabled()).
  std::shared_ptr<MeteredRequest> start(MeteredRequest::Info info, AppliedRates rates, size_t choices,
                                        std::optional<IdempotencyClaim> claim, BudgetReservation reservation) const;

 private:
  MeteringServices services_;
};

}  // namespace lg::billing
