// Prices: what a token costs, per model, per kind (cache-hit input,
// cache-miss input, output), optionally by time of day, and how that changes
// over time (docs/billing.md).
//
// Money is integer pico-dollars (1e-12 USD). A rate is pico-dollars per token,
// which is the same integer as micro-dollars per million tokens: $0.028 per
// 1M tokens is 28,000. Every price with up to 6 decimals per 1M tokens is
// exact, a cost is rate x tokens with no rounding, and a sum of costs is
// exact; rounding (to cents, say) happens only where a person reads it.
//
// PriceBook keeps the history of price tables in the billing store
// (price/<version>): each version is a whole table with the time it takes
// effect. The configured table (billing.prices) is recorded at start when it
// differs from the last configured one; PUT /admin/pricing schedules others.
// The table in force at time t is the version with the latest effective time
// <= t (the later version on a tie). A ledger entry records the rates it
// applied and the version they came from. Versions are control records
// (billing/control_plane.h): scheduled through the control plane, numbered
// in its transaction (so two replicas never record the same number), and
// taken into memory when it applies them, here or on every other replica.
//
// Thread-safety: PriceBook's methods may be called concurrently; the others
// are values.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "billing/billing_db.h"
#include "billing/control_plane.h"
#include "billing/settings.h"
#include "common/decimal.h"
#include "common/status.h"

namespace lg::billing {

inline constexpr int kPicoScale = 12;  // pico-dollars per dollar: 10^12

// Pico-dollars per token (= micro-dollars per 1M tokens).
struct Rates {
  int64_t input_cache_hit = 0;
  int64_t input_cache_miss = 0;
  int64_t output = 0;
  bool operator==(const Rates&) const = default;
};

// DeepSeek's list for deepseek-chat since 2025-09-29: $0.028 hit, $0.28 miss,
// $0.42 output per 1M tokens. The prices of every served model without its own.
inline constexpr Rates kDeepSeekRates{28'000, 280'000, 420'000};

// Pico-dollars.
struct Cost {
  int64_t input_cache_hit = 0;
  int64_t input_cache_miss = 0;
  int64_t output = 0;
  int64_t total() const { return input_cache_hit + input_cache_miss + output; }
  bool operator==(const Cost&) const = default;
};

// rates x tokens per kind. Token counts are a request's (below 2^31) and
// rates at most 10^9 (config), so nothing overflows.
Cost costOf(const Rates& rates, int64_t hit_tokens, int64_t miss_tokens, int64_t output_tokens);

// Pico-dollars as exact dollars: 1792000 -> "0.000001792", 0 -> "0".
std::string usd(Int128 pico);
// Rounded down to cents, for display: "0.00", "12.34".
std::string usdCents(Int128 pico);

struct PriceWindow {
  int start_minute = 0;  // UTC, minutes after midnight; [start, end), wrapping past midnight when end < start
  int end_minute = 0;
  Rates rates;
  bool contains(int minute_of_day) const;
  bool operator==(const PriceWindow&) const = default;
};

struct ModelPrices {
  Rates rates;
  std::vector<PriceWindow> windows;  // the first that contains the time applies
  bool operator==(const ModelPrices&) const = default;
};

// The rates a request pays, and where they came from.
struct AppliedRates {
  Rates rates;
  int64_t version = 0;     // the PriceBook version; 0: the built-in defaults
  std::string priced_as;   // the table's entry: the model id, "*", or "default" (DeepSeek's list)
  int window = -1;         // the index of the time window that applied; -1: the model's base rates
};

// One price table: model id -> prices; "*": every other model. A model in
// neither gets kDeepSeekRates.
struct PriceTable {
  std::map<std::string, ModelPrices> models;

  static PriceTable fromSetting(const PriceTableSetting& setting);
  PriceTableSetting toSetting() const;
  // For a request for `model` that started at `unix_us`.
  AppliedRates at(std::string_view model, int64_t unix_us) const;
  bool operator==(const PriceTable&) const = default;
};

struct PriceVersion {
  int64_t version = 0;       // 1, 2, ...: the order versions were recorded in
  int64_t effective_us = 0;  // Unix microseconds from which it applies
  int64_t recorded_us = 0;
  std::string source;        // "config" or "admin"
  PriceTable table;
};

class PriceBook final : public ControlApplier {
 public:
  // Loads the history from `db` (which must outlive the book) and records
  // `configured` (recordConfigured), through a LocalControlPlane of its own.
  static Result<std::unique_ptr<PriceBook>> open(BillingDb& db, const PriceTable& configured, int64_t now_us);
  // Loads the history from `db`; versions are scheduled through `control`
  // (whose store `db` is), which also hands the book the versions it
  // applies. Both must outlive the book.
  static Result<std::unique_ptr<PriceBook>> open(BillingDb& db, ControlPlane& control);

  // Records `configured` effective `now_us` when it differs from the last
  // version whose source was "config" (or there is none). With replicas,
  // the configured tables should agree: the one started last after a change
  // records its table.
  Status recordConfigured(const PriceTable& configured, int64_t now_us);

  // The rates for a request for `model` that started at `unix_us`.
  AppliedRates at(std::string_view model, int64_t unix_us) const;

  // Records `table` effective at `effective_us` (a change of the control
  // plane, in force here when it returns). InvalidArgument when effective_us
  // is before `now_us`: entries already priced by the table in force then
  // would disagree with the history. Unavailable: the control plane's source
  // of truth is unreachable.
  Result<PriceVersion> schedule(const PriceTable& table, int64_t effective_us, int64_t now_us, std::string source);

  std::vector<PriceVersion> history() const;  // by version
  // The version in force at `unix_us` (version 0, the defaults, before any).
  PriceVersion inForce(int64_t unix_us) const;

  // ControlApplier: price/ records into memory (versions are never erased).
  void applyControl(const std::vector<ControlRecord>& records) override;

 private:
  PriceBook(std::unique_ptr<LocalControlPlane> own, ControlPlane& control)
      : own_control_(std::move(own)), control_(control) {}
  static Result<std::unique_ptr<PriceBook>> load(BillingDb& db, std::unique_ptr<LocalControlPlane> own,
                                                 ControlPlane& control);
  const PriceVersion* inForceLocked(int64_t unix_us) const;

  std::unique_ptr<LocalControlPlane> own_control_;  // open() without a control plane: its own
  ControlPlane& control_;
  mutable std::mutex mu_;
  std::vector<PriceVersion> versions_;  // guarded by mu_, by version
};

// A price table as JSON text (PUT /admin/pricing's "prices", config's
// billing.prices) and back.
Result<PriceTable> parsePriceTableJson(std::string_view json_text, const std::string& path);
std::string priceTableJson(const PriceTable& table);

}  // namespace lg::billing
