// The prefix-breaker report and the teams' consent to its snippets (docs/cache.md,
// "Prefix breakers"; proxy/gateway/prefix_breakers.h, snippet_consent.h). Admin key:
//
//   GET /admin/cache/prefix-breakers[?team=T]
//     -> 200 {"object": "list", "data": [{"key_id", "key_name", "team",
//          "system_prompt" (null: compared across system prompts), "flagged_requests",
//          "divergence": {"message", "message_token", "token", "part"},
//          "common_tokens", "saving_per_request", "saving_total", "saving_per_day" (USD strings),
//          "first_seen", "last_seen" (Unix seconds), "advice", "snippet" (only with consent)}, ...]}
//     Most saving per day first. This replica's requests only (each replica
//     compares the requests it serves; hashing on the API key sends a key's
//     requests to one replica).
//
//   GET    /admin/prefix-snippets          every team's consent
//   GET    /admin/prefix-snippets/{team}   its consent (404: none)
//   PUT    /admin/prefix-snippets/{team}   {"consent_by": "who agreed, and where it is written",
//                                           "retention_seconds": 1..2592000}
//   DELETE /admin/prefix-snippets/{team}   withdraws it; the snippets kept go at once
//     -> 200 {"object": "prefix_snippet_consent", "team", "enabled", "consent_by",
//             "granted_at", "retention_seconds", "generation"}
//
// The consent routes wait for a synced write (the control plane), so they
// run on the blocking pool; the report reads memory on the I/O thread.
//
// Thread-safety: routes may run on every thread at once.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "billing/key_store.h"
#include "proxy/gateway/admission.h"
#include "proxy/gateway/prefix_breakers.h"
#include "proxy/gateway/snippet_consent.h"
#include "proxy/http/router.h"

namespace lg::proxy {

// The rows as the route and the dashboard show them, with each key's name
// and the advice in words.
nlohmann::json prefixBreakersJson(const std::vector<PrefixBreakerReport>& rows, const billing::KeyStore& keys);
// "Requests of key K diverge at message 0, token 12 (system prompt): a
// timestamp or an id there? Stable, it would save about $X/day." (X rounded
// down: cents from a dollar up, else three significant digits)
std::string prefixBreakerAdvice(const PrefixBreakerReport& row, std::string_view key_name);

class PrefixBreakersApi {
 public:
  // Everything must outlive the server.
  PrefixBreakersApi(PrefixBreakers& breakers, SnippetConsents& consents, const billing::KeyStore& keys,
                    const Admission& admission)
      : breakers_(breakers), consents_(consents), keys_(keys), admission_(admission) {}
  void addRoutes(Router& router) const;

 private:
  void report(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;
  void consent(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

  PrefixBreakers& breakers_;
  SnippetConsents& consents_;
  const billing::KeyStore& keys_;
  const Admission& admission_;
};

}  // namespace lg::proxy
