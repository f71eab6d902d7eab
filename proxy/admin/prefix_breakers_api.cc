#include "proxy/admin/prefix_breakers_api.h"

#include "common/team_id.h"
#include "common/unix_time.h"
#include "proxy/admin/control_errors.h"
#include "proxy/admin/usage_json.h"
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"
#include "proxy/openai/sse.h"  // jsonText

namespace lg::proxy {

using nlohmann::json;

namespace {

constexpr std::string_view kConsentPrefix = "/admin/prefix-snippets/";

std::string_view partWords(openai::PromptPart part) {
  switch (part) {
    case openai::PromptPart::kSystem: return "system prompt";
    case openai::PromptPart::kTools: return "tool definitions";
    case openai::PromptPart::kHistory: return "conversation history";
    case openai::PromptPart::kInput: return "new input";
    case openai::PromptPart::kNone: break;
  }
  return "prompt";
}

std::string_view partQuestion(openai::PromptPart part) {
  switch (part) {
    case openai::PromptPart::kTools: return "is the tool list built in a different order each time?";
    case openai::PromptPart::kHistory: return "is the history rewritten or trimmed from its start?";
    default: break;
  }
  return "a timestamp, a date or a request id there?";
}

json consentJson(const std::string& team, const std::optional<SnippetConsent>& c) {
  json out{{"object", "prefix_snippet_consent"}, {"team", team}, {"enabled", c.has_value()}};
  if (c) {
    out["consent_by"] = c->consent_by;
    out["granted_at"] = c->granted_at_us / 1'000'000;
    out["retention_seconds"] = c->retention_seconds;
    out["generation"] = c->generation;
  }
  return out;
}

openai::ApiError noConsent() {
  openai::ApiError e = openai::invalidRequest("", "not_found", "This team has not consented to prompt snippets.");
  e.http_status = 404;
  return e;
}

bool printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f; });
}

// Dollars for a sentence: cents from a dollar up, else three significant
// digits ("0.0162"), rounded down; the row's fields keep the exact amounts.
std::string roughUsd(int64_t pico) {
  if (pico >= int64_t{1'000'000'000'000}) return billing::usdCents(pico);
  std::string exact = billing::usd(pico);  // "0.016257024"
  const size_t dot = exact.find('.');
  if (dot == std::string::npos) return exact;
  const size_t first = exact.find_first_not_of('0', dot + 1);
  if (first == std::string::npos) return exact;
  return exact.substr(0, std::min(exact.size(), first + 3));
}

}  // namespace

std::string prefixBreakerAdvice(const PrefixBreakerReport& row, std::string_view key_name) {
  std::string where = row.message >= 0 ? "message " + std::to_string(row.message) + ", token " +
                                             std::to_string(row.message_token)
                                       : "token " + std::to_string(row.token);
  std::string who = key_name.empty() ? row.key_id : std::string(key_name) + " (" + row.key_id + ")";
  return "Requests of key " + who + " diverge at " + where + " (" + std::string(partWords(row.part)) + "): " +
         std::string(partQuestion(row.part)) + " Stable, it would save about $" + roughUsd(row.saving_per_day) +
         "/day (" + std::to_string(row.common_tokens) + " tokens a request would hit the cache).";
}

json prefixBreakersJson(const std::vector<PrefixBreakerReport>& rows, const billing::KeyStore& keys) {
  std::map<std::string, std::string> names;
  for (const billing::ApiKeyInfo& k : keys.list()) names.emplace(k.id, k.name);
  json data = json::array();
  for (const PrefixBreakerReport& r : rows) {
    const auto name = names.find(r.key_id);
    const std::string key_name = name == names.end() ? std::string() : name->second;
    json row{{"key_id", r.key_id},
             {"key_name", key_name.empty() ? json(nullptr) : json(key_name)},
             {"team", r.team},
             {"system_prompt", r.system_prompt.empty() ? json(nullptr) : json(r.system_prompt)},
             {"flagged_requests", r.flagged},
             {"divergence",
              {{"message", r.message >= 0 ? json(r.message) : json(nullptr)},
               {"message_token", r.message_token},
               {"token", r.token},
               {"part", openai::promptPartName(r.part)}}},
             {"common_tokens", r.common_tokens},
             {"saving_per_request", billing::usd(r.saving_per_request)},
             {"saving_total", billing::usd(r.saving_total)},
             {"saving_per_day", billing::usd(r.saving_per_day)},
             {"first_seen", r.first_seen_us / 1'000'000},
             {"last_seen", r.last_seen_us / 1'000'000},
             {"advice", prefixBreakerAdvice(r, key_name)}};
    if (r.snippet) row["snippet"] = *r.snippet;
    data.push_back(std::move(row));
  }
  return data;
}

void PrefixBreakersApi::addRoutes(Router& router) const {
  router.add("GET", "/admin/cache/prefix-breakers",
             admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { report(r, std::move(e)); }),
             Runs::kOnIoThread);
  router.add("GET", "/admin/prefix-snippets",
             admission_.forAdmin([this](const HttpRequest&, std::shared_ptr<Exchange> e) {
               json data = json::array();
               for (const SnippetConsent& c : consents_.list()) data.push_back(consentJson(c.team, c));
               e->respond(200, jsonHeaders(), openai::jsonText(json{{"object", "list"}, {"data", std::move(data)}}));
             }),
             Runs::kOnIoThread);
  for (const char* method : {"GET", "PUT", "DELETE"}) {
    router.addPrefix(
        method, std::string(kConsentPrefix),
        admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { consent(r, std::move(e)); }),
        Runs::kBlocking);  // a synced write of the control plane
  }
}

void PrefixBreakersApi::report(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  const std::map<std::string, std::string> query = parseQuery(request.query);
  std::string team;
  if (const auto it = query.find("team"); it != query.end()) {
    if (!validTeamId(it->second)) return respondWithApiError(*exchange, badParam("team", "A team id is 1..128 of A-Z a-z 0-9 . _ -"));
    team = it->second;
  }
  json out{{"object", "list"},
           {"enabled", breakers_.enabled()},
           {"data", prefixBreakersJson(breakers_.report(team), keys_)}};
  exchange->respond(200, jsonHeaders(), openai::jsonText(out));
}

void PrefixBreakersApi::consent(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  const std::string team(std::string_view(request.path).substr(kConsentPrefix.size()));
  if (!validTeamId(team)) {
    return respondWithApiError(*exchange, badParam("team", "A team id is 1..128 of A-Z a-z 0-9 . _ -"));
  }
  if (request.method == "GET") {
    const std::optional<SnippetConsent> c = consents_.find(team);
    if (!c) return respondWithApiError(*exchange, noConsent());
    return exchange->respond(200, jsonHeaders(), openai::jsonText(consentJson(team, c)));
  }
  if (request.method == "DELETE") {
    auto withdrawn = consents_.withdraw(team);
    if (!withdrawn.isOk()) {
      return respondWithApiError(*exchange, controlPlaneError(withdrawn.status(), "withdrawing snippet consent"));
    }
    if (!*withdrawn) return respondWithApiError(*exchange, noConsent());
    proxyLog()->info("admin withdrew team {}'s consent to prompt snippets", team);
    return exchange->respond(200, jsonHeaders(), openai::jsonText(consentJson(team, std::nullopt)));
  }
  // PUT: who consented and how long snippets are kept; the team must exist.
  const std::optional<billing::TeamInfo> info = keys_.team(team);
  if (!info || info->deleted()) {
    openai::ApiError e = openai::invalidRequest("team", "team_not_found", "No live team with this id.");
    e.http_status = 404;
    return respondWithApiError(*exchange, e);
  }
  json body = json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return respondWithApiError(*exchange, badParam("body", "Expected a JSON object."));
  if (!body.contains("consent_by") || !body["consent_by"].is_string() ||
      body["consent_by"].get<std::string>().empty() || body["consent_by"].get<std::string>().size() > 200 ||
      !printable(body["consent_by"].get<std::string>())) {
    return respondWithApiError(*exchange, badParam("consent_by",
                                                   "Who gave the team's consent, and where it is recorded: "
                                                   "1..200 printable characters."));
  }
  if (!body.contains("retention_seconds") || !body["retention_seconds"].is_number_integer() ||
      body["retention_seconds"].get<int64_t>() < 1 ||
      body["retention_seconds"].get<int64_t>() > kMaxSnippetRetentionSeconds) {
    return respondWithApiError(*exchange, badParam("retention_seconds",
                                                   "How long a snippet is kept: 1.." +
                                                       std::to_string(kMaxSnippetRetentionSeconds) + " seconds."));
  }
  SnippetConsent c;
  c.team = team;
  c.generation = info->generation;
  c.consent_by = body["consent_by"].get<std::string>();
  c.granted_at_us = unixMicros();
  c.retention_seconds = body["retention_seconds"].get<int64_t>();
  if (Status s = consents_.grant(c); !s.isOk()) {
    return respondWithApiError(*exchange, controlPlaneError(s, "granting snippet consent"));
  }
  proxyLog()->info("admin recorded team {}'s consent to prompt snippets (by {}, kept {} s)", team, c.consent_by,
                   c.retention_seconds);
  exchange->respond(200, jsonHeaders(), openai::jsonText(consentJson(team, c)));
}

}  // namespace lg::proxy
