// SnippetConsents: which teams agreed that the prefix-breaker report may show
// the few tokens of prompt text around a divergence (prefix_breakers.h,
// "Snippets"; docs/cache.md, "Prefix breakers"). Off unless an admin records
// a team's consent: who gave it (as the admin typed it, e.g. the team lead's
// name and the ticket), when, and how long a snippet may be kept.
//
// A consent is a control record (snippets/<team>: JSON {"generation",
// "consent_by", "granted_at", "retention_seconds"}), changed through the
// control plane like budgets, so every replica applies it and withdrawing it
// reaches every replica's memory (the observer drops the snippets there). A
// consent belongs to one generation of the team id: a deleted team's id,
// reused, starts without one (common/team_id.h).
//
// Thread-safety: every method may be called from any thread; applyControl()
// runs on the control plane's applying thread and calls the observer there.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "billing/billing_db.h"
#include "billing/control_plane.h"
#include "common/status.h"

namespace lg::proxy {

inline constexpr std::string_view kSnippetConsentPrefix = "snippets/";
// The longest retention an admin may set: 30 days.
inline constexpr int64_t kMaxSnippetRetentionSeconds = int64_t{30} * 86400;

struct SnippetConsent {
  std::string team;
  uint32_t generation = 0;      // the team's generation it was given in
  std::string consent_by;       // who gave it (1..200 printable characters)
  int64_t granted_at_us = 0;    // Unix microseconds
  int64_t retention_seconds = 0;  // how long a snippet is kept (1..kMaxSnippetRetentionSeconds)
  bool operator==(const SnippetConsent&) const = default;
};

std::string snippetConsentToJson(const SnippetConsent& consent);
Result<SnippetConsent> parseSnippetConsent(std::string_view team, std::string_view json);

class SnippetConsents final : public billing::ControlApplier {
 public:
  // Loads this replica's view of the records and registers with `control`
  // (whose store `db` is); both must outlive it.
  static Result<std::unique_ptr<SnippetConsents>> open(billing::BillingDb& db, billing::ControlPlane& control);

  // Records `consent` (replacing any), durably, on every replica.
  Status grant(const SnippetConsent& consent);
  // Withdraws the team's consent; false: it had none.
  Result<bool> withdraw(const std::string& team);

  std::optional<SnippetConsent> find(std::string_view team) const;
  // The seconds a snippet of `team` (at `generation`) may be kept; 0: none may.
  int64_t retentionFor(std::string_view team, uint32_t generation) const;
  std::vector<SnippetConsent> list() const;

  // Called with a team whose consent was withdrawn (here or elsewhere), on
  // the applying thread; set before the server starts. Must not block.
  void onWithdrawn(std::function<void(const std::string& team)> observer) { on_withdrawn_ = std::move(observer); }

  void applyControl(const std::vector<billing::ControlRecord>& records) override;

 private:
  explicit SnippetConsents(billing::ControlPlane& control) : control_(control) {}

  billing::ControlPlane& control_;
  std::function<void(const std::string&)> on_withdrawn_;
  mutable std::mutex mu_;
  std::map<std::string, SnippetConsent, std::less<>> consents_;  // guarded by mu_, by team
};

}  // namespace lg::proxy
