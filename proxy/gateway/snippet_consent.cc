#include "proxy/gateway/snippet_consent.h"

#include <nlohmann/json.hpp>

#include "proxy/http/proxy_log.h"

namespace lg::proxy {

using nlohmann::json;

std::string snippetConsentToJson(const SnippetConsent& c) {
  return json{{"generation", c.generation},
              {"consent_by", c.consent_by},
              {"granted_at_us", c.granted_at_us},
              {"retention_seconds", c.retention_seconds}}
      .dump();
}

Result<SnippetConsent> parseSnippetConsent(std::string_view team, std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("generation") || !j["generation"].is_number_unsigned() ||
      !j.contains("consent_by") || !j["consent_by"].is_string() || !j.contains("granted_at_us") ||
      !j["granted_at_us"].is_number_integer() || !j.contains("retention_seconds") ||
      !j["retention_seconds"].is_number_integer()) {
    return dataLoss("the snippet consent of team " + std::string(team) + " is malformed");
  }
  SnippetConsent c;
  c.team = std::string(team);
  c.generation = j["generation"].get<uint32_t>();
  c.consent_by = j["consent_by"].get<std::string>();
  c.granted_at_us = j["granted_at_us"].get<int64_t>();
  c.retention_seconds = j["retention_seconds"].get<int64_t>();
  return c;
}

Result<std::unique_ptr<SnippetConsents>> SnippetConsents::open(billing::BillingDb& db, billing::ControlPlane& control) {
  std::unique_ptr<SnippetConsents> out(new SnippetConsents(control));
  Status parsed = Status::ok();
  LG_RETURN_IF_ERROR(db.scan(kSnippetConsentPrefix, [&](std::string_view key, std::string_view value) {
    const std::string_view team = key.substr(kSnippetConsentPrefix.size());
    auto c = parseSnippetConsent(team, value);
    if (!c.isOk()) {
      parsed = c.status();
      return false;
    }
    out->consents_.emplace(std::string(team), std::move(*c));
    return true;
  }));
  LG_RETURN_IF_ERROR(parsed);
  control.addApplier({std::string(kSnippetConsentPrefix)}, out.get());
  return out;
}

Status SnippetConsents::grant(const SnippetConsent& consent) {
  const std::string key = std::string(kSnippetConsentPrefix) + consent.team;
  const std::string value = snippetConsentToJson(consent);
  return control_.update("granting snippet consent", [&](billing::ControlTxn& txn) {
    txn.put(key, value);
    return Status::ok();
  });
}

Result<bool> SnippetConsents::withdraw(const std::string& team) {
  const std::string key = std::string(kSnippetConsentPrefix) + team;
  bool had = false;
  Status s = control_.update("withdrawing snippet consent", [&](billing::ControlTxn& txn) {
    LG_ASSIGN_OR_RETURN(auto current, txn.get(key));
    had = current.has_value();
    if (had) txn.erase(key);
    return Status::ok();
  });
  if (!s.isOk()) return s;
  return had;
}

std::optional<SnippetConsent> SnippetConsents::find(std::string_view team) const {
  std::lock_guard lock(mu_);
  const auto it = consents_.find(team);
  if (it == consents_.end()) return std::nullopt;
  return it->second;
}

int64_t SnippetConsents::retentionFor(std::string_view team, uint32_t generation) const {
  std::lock_guard lock(mu_);
  const auto it = consents_.find(team);
  if (it == consents_.end() || it->second.generation != generation) return 0;
  return it->second.retention_seconds;
}

std::vector<SnippetConsent> SnippetConsents::list() const {
  std::lock_guard lock(mu_);
  std::vector<SnippetConsent> out;
  for (const auto& [team, c] : consents_) out.push_back(c);
  return out;
}

void SnippetConsents::applyControl(const std::vector<billing::ControlRecord>& records) {
  std::vector<std::string> withdrawn;
  {
    std::lock_guard lock(mu_);
    for (const billing::ControlRecord& r : records) {
      const std::string team = r.key.substr(kSnippetConsentPrefix.size());
      if (!r.value) {
        if (consents_.erase(team) > 0) withdrawn.push_back(team);
        continue;
      }
      auto c = parseSnippetConsent(team, *r.value);
      if (!c.isOk()) {
        // Without a readable consent, none: no text is kept for the team.
        proxyLog()->error("{}; treating it as withdrawn", c.status().message());
        if (consents_.erase(team) > 0) withdrawn.push_back(team);
        continue;
      }
      consents_[team] = std::move(*c);
    }
  }
  if (on_withdrawn_) {
    for (const std::string& team : withdrawn) on_withdrawn_(team);
  }
}

}  // namespace lg::proxy
