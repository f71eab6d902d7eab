#include "proxy/admin/budget_api.h"

#include <set>

#include <nlohmann/json.hpp>

#include "billing/settings_json.h"
#include "common/team_id.h"
#include "common/unix_time.h"
#include "proxy/admin/control_errors.h"
#include "proxy/openai/api_error.h"
#include "proxy/openai/sse.h"  // jsonText
#include "proxy/http/http_errors.h"
#include "proxy/http/proxy_log.h"

namespace lg::proxy {

namespace {

using nlohmann::json;

constexpr std::string_view kPrefix = "/admin/budgets/";

openai::ApiError notFound(std::string message) {
  openai::ApiError e = openai::invalidRequest("", "budget_not_found", std::move(message));
  e.http_status = 404;
  return e;
}

}  // namespace

json budgetStatusJson(const billing::BudgetStatus& b) {
  json out{{"scope", b.scope},
           {"period", b.period},
           {"period_start", b.period_start_s},
           {"period_end", b.period_end_s > 0 ? json(b.period_end_s) : json(nullptr)},
           {"limit", billing::usd(b.limit)},
           {"soft_limit", billing::usd(b.soft_limit)},
           {"spent", billing::usd(b.spent)},
           {"reserved", billing::usd(b.reserved)},
           {"remaining", billing::usd(b.remaining())}};
  // Only with limits.redis_url: without it there is one count, this replica's.
  if (const std::string_view counted = billing::budgetCountedName(b.counted); !counted.empty()) out["counted"] = counted;
  return out;
}

void BudgetApi::addRoutes(Router& router) const {
  // On the blocking pool: PUT and DELETE wait for a synced write, the list
  // walks every key, which is work in proportion to the keys, and the
  // statuses may be read from Redis.
  router.add("GET", "/admin/budgets",
             admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { list(r, std::move(e)); }),
             Runs::kBlocking);
  for (const char* method : {"GET", "PUT", "DELETE"}) {
    router.addPrefix(
        method, std::string(kPrefix),
        admission_.forAdmin([this](const HttpRequest& r, std::shared_ptr<Exchange> e) { one(r, std::move(e)); }),
        Runs::kBlocking);
  }
}

void BudgetApi::list(const HttpRequest&, std::shared_ptr<Exchange> exchange) const {
  const int64_t now = unixSeconds();
  json data = json::array();
  // The rows first, then every status at once (one round trip to Redis).
  std::vector<billing::BudgetSubject> subjects;
  auto add = [&](billing::BudgetScope scope, const std::string& id, const std::string& team) {
    const billing::Budgets::Assigned a = budgets_.effective(scope, id);
    // Only what a budget applies to: a key or team exempt or without one is not listed.
    if (!a.budget.enabled) return;
    json row{{"scope", billing::budgetScopeName(scope)}, {"id", id}, {"source", a.is_default ? "default" : "own"},
             {"budget", json::parse(budgetToJson(a.budget))}};
    if (scope == billing::BudgetScope::kKey) row["team"] = team;
    subjects.push_back({scope, id, team});
    data.push_back(std::move(row));
  };
  std::set<std::string> teams;
  for (const billing::ApiKeyInfo& k : keys_.list()) {
    add(billing::BudgetScope::kKey, k.id, k.team);
    teams.insert(k.team);
  }
  for (const billing::Budgets::Assigned& a : budgets_.assigned()) {
    if (a.scope == billing::BudgetScope::kTeam) teams.insert(a.id);
  }
  for (const std::string& t : teams) add(billing::BudgetScope::kTeam, t, t);
  const std::vector<std::optional<billing::BudgetStatus>> statuses = view_.statusesOf(subjects, now);
  for (size_t i = 0; i < statuses.size(); ++i) {
    data[i]["status"] = statuses[i] ? budgetStatusJson(*statuses[i]) : json(nullptr);
  }
  exchange->respond(200, jsonHeaders(),
                    openai::jsonText(json{{"object", "list"},
                                {"defaults", {{"key", json::parse(budgetToJson(budgets_.defaults().key_default))},
                                              {"team", json::parse(budgetToJson(budgets_.defaults().team_default))}}},
                                {"data", std::move(data)}}));
}

void BudgetApi::one(const HttpRequest& request, std::shared_ptr<Exchange> exchange) const {
  // keys/ID or teams/TEAM
  const std::string_view rest = std::string_view(request.path).substr(kPrefix.size());
  const size_t slash = rest.find('/');
  const std::string_view kind = rest.substr(0, slash);
  const std::string id(slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1));
  if ((kind != "keys" && kind != "teams") || id.empty() || id.find('/') != std::string::npos) {
    openai::ApiError e = openai::invalidRequest("", "invalid_path",
                                                "Expected /admin/budgets/keys/{key id} or /admin/budgets/teams/{team}.");
    e.http_status = 404;
    return respondWithApiError(*exchange, e);
  }
  const billing::BudgetScope scope = kind == "keys" ? billing::BudgetScope::kKey : billing::BudgetScope::kTeam;
  std::string team;  // a key's
  if (scope == billing::BudgetScope::kKey) {
    for (const billing::ApiKeyInfo& k : keys_.list()) {
      if (k.id == id) team = k.team;
    }
    if (team.empty()) return respondWithApiError(*exchange, notFound("No API key with this id."));
  } else if (!validTeamId(id)) {
    return respondWithApiError(*exchange, openai::invalidRequest("team", "invalid_value",
                                                                 "A team id is 1..128 of A-Z a-z 0-9 . _ -"));
  }

  if (request.method == "PUT") {
    auto budget = parseBudget(request.body, "budget");
    if (!budget.isOk()) {
      return respondWithApiError(*exchange, openai::invalidRequest("budget", "invalid_value", budget.status().message()));
    }
    if (Status s = budgets_.set(scope, id, *budget); !s.isOk()) {
      return respondWithApiError(*exchange, controlPlaneError(s, "setting a budget"));
    }
    proxyLog()->info("admin set the budget of {} {}: {}", billing::budgetScopeName(scope), id, budgetToJson(*budget));
  } else if (request.method == "DELETE") {
    auto cleared = budgets_.clear(scope, id);
    if (!cleared.isOk()) return respondWithApiError(*exchange, controlPlaneError(cleared.status(), "clearing a budget"));
    if (!*cleared) return respondWithApiError(*exchange, notFound("This " + std::string(billing::budgetScopeName(scope)) +
                                                                  " has no budget of its own."));
    proxyLog()->info("admin cleared the budget of {} {}", billing::budgetScopeName(scope), id);
  }
  const billing::Budgets::Assigned a = budgets_.effective(scope, id);
  json out{{"object", "budget"}, {"scope", billing::budgetScopeName(scope)}, {"id", id},
           {"source", a.is_default ? "default" : "own"}, {"budget", json::parse(budgetToJson(a.budget))}};
  if (scope == billing::BudgetScope::kKey) out["team"] = team;
  auto st = view_.statusOf(billing::BudgetSubject{scope, id, scope == billing::BudgetScope::kKey ? team : id},
                          unixSeconds());
  out["status"] = st ? budgetStatusJson(*st) : json(nullptr);
  exchange->respond(200, jsonHeaders(), openai::jsonText(out));
}

}  // namespace lg::proxy
