// LedgerMetrics: what the ledger reports to /metrics (docs/metrics.md):
//
//   latentgate_ledger_commit_seconds            histogram: one observation per
//                                               group commit, from the first
//                                               entry queued to the batch synced
//   latentgate_cost_picodollars_total{team=...} counter: the exact cost of the
//                                               committed entries, per team
//
// The ledger calls observeCommit() once per synced group commit and
// addCost() once per committed entry (never for an entry that failed to
// commit, so the counter follows what /admin/usage totals). The team label is
// bounded: the first `max_teams` teams to incur a cost get a series each,
// every later team is folded into team="other" (metrics::BoundedLabelCounter
// says why the set is fixed rather than recomputed as the top N at each
// scrape). Team ids are validated at key creation (1..128 of
// `A-Z a-z 0-9 . _ -`), never secrets or prompt text.
//
// Money is integer pico-dollars, as in the ledger; Prometheus stores samples
// as doubles, so a series stays exact up to 2^53 pico-dollars (about $9,007)
// and is rounded to 16 significant digits beyond.
//
// Thread-safety: both calls may come from any thread (the ledger's commit
// thread, the engine thread); observeCommit is one lock-free histogram
// update, addCost a shared lock and an atomic add (an exclusive lock the
// first time a team is seen). serve owns one and adds collect() to the
// /metrics registry; it must outlive the ledger and the registry's scrapes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/metrics.h"

namespace lg::billing {

class LedgerMetrics {
 public:
  static constexpr size_t kDefaultMaxTeams = 20;

  explicit LedgerMetrics(size_t max_teams = kDefaultMaxTeams)
      : commit_seconds_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
        cost_(std::string("team"), max_teams) {}

  void observeCommit(double seconds) { commit_seconds_.observe(seconds); }
  void addCost(std::string_view team, uint64_t picodollars) { cost_.add(team, picodollars); }

  void collect(metrics::ExpositionWriter& w) const {
    if (w.family("latentgate_ledger_commit_seconds",
                 "Ledger group commits: from the first entry queued to the batch synced to disk.",
                 metrics::MetricType::kHistogram)) {
      w.histogram(commit_seconds_.snapshot());
    }
    cost_.collect(w, "latentgate_cost_picodollars_total",
                  "Exact cost of committed ledger entries in pico-dollars (1e-12 USD), by team; teams beyond the "
                  "first " + std::to_string(cost_.maxSeries()) + " are counted as team=\"other\".");
  }

 private:
  metrics::AtomicHistogram commit_seconds_;
  metrics::BoundedLabelCounter cost_;
};

}  // namespace lg::billing
