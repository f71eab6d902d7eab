// Admission (proxy/gateway/admission.h) over a real key store, ledger,
// budgets and rate limiter in a real RocksDB billing store, without a
// server: the route guards (API key, admin key, metrics token) and what each
// refusal of a generation request looks like to a client (status, OpenAI
// error, headers), and that a refusal gives back what the earlier steps held.
#include "proxy/gateway/admission.h"

#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include "billing/budgets.h"
#include "tests/proxy/http/recording_exchange.h"
#include "tests/support/temp_dir.h"

namespace lg::proxy {
namespace {

using testing::RecordingExchange;
using json = nlohmann::json;

constexpr const char* kAdminKey = "an-admin-key-for-admission-tests";
constexpr const char* kMetricsToken = "a-metrics-token-for-admission-tests";

HttpRequest requestWith(std::string key, std::string path = "/v1/chat/completions") {
  HttpRequest r;
  r.method = "POST";
  r.path = std::move(path);
  r.id = "req-admission";
  r.body = R"({"model":"demo"})";
  if (!key.empty()) r.headers.add("Authorization", "Bearer " + key);
  return r;
}

json errorOf(const RecordingExchange& e) {
  json j = json::parse(e.body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"] : json();
}

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override { open({}, {}); }
  void TearDown() override { close(); }

  void close() {
    admission_.reset();
    metering_.reset();
    ledger_.reset();
    budgets_.reset();
    keys_.reset();
    db_.reset();
  }
  void open(billing::RateLimitOptions limits, BudgetSetting team_budget) {
    close();
    auto db = billing::BillingDb::open(dir_.path() + "/billing");
    ASSERT_TRUE(db.isOk()) << db.status().toString();
    db_ = std::move(db).value();
    auto keys = billing::KeyStore::open(*db_);
    ASSERT_TRUE(keys.isOk());
    keys_ = std::move(keys).value();
    auto admin = billing::AdminKey::loadOrCreate(kAdminKey, "", nullptr);
    ASSERT_TRUE(admin.isOk());
    admin_.emplace(std::move(admin).value());
    auto ledger = billing::Ledger::open(*db_);
    ASSERT_TRUE(ledger.isOk());
    ledger_ = std::move(ledger).value();
    auto budgets = billing::Budgets::open(*db_, *ledger_, {{}, team_budget}, 1'767'225'600);
    ASSERT_TRUE(budgets.isOk());
    budgets_ = std::move(budgets).value();
    limiter_ = std::make_unique<billing::RateLimiter>(limits);
    metering_ = std::make_unique<billing::Metering>(
        billing::MeteringServices{ledger_.get(), nullptr, budgets_.get(), nullptr});
    auto token = Admission::metricsToken(kMetricsToken);
    ASSERT_TRUE(token.isOk());
    admission_ = std::make_unique<Admission>(*keys_, *admin_, std::move(token).value(), *limiter_, *metering_);
    if (key_.empty()) {
      auto created = keys_->create("team-a", "alice");
      ASSERT_TRUE(created.isOk());
      key_ = created->second;
      who_ = *keys_->authenticate(key_);
    }
  }

  // Runs `handler` for a request with `key`; returns the exchange and whether the handler ran.
  std::pair<std::shared_ptr<RecordingExchange>, bool> call(const Handler& handler, const std::string& key) {
    auto e = std::make_shared<RecordingExchange>(requestWith(key));
    ran_ = false;
    handler(e->request(), e);
    return {e, ran_};
  }

  AdmissionAsk ask(int64_t prompt, int64_t max_tokens, size_t choices = 1) {
    AdmissionAsk a;
    a.served_model = "demo";
    a.requested_model = "demo";
    a.response_id = "chatcmpl-1";
    for (size_t i = 0; i < choices; ++i) a.choices.push_back({prompt, max_tokens});
    return a;
  }

  test::TempDir dir_{"lg_admission"};
  std::unique_ptr<billing::BillingDb> db_;
  std::unique_ptr<billing::KeyStore> keys_;
  std::optional<billing::AdminKey> admin_;
  std::unique_ptr<billing::Ledger> ledger_;
  std::unique_ptr<billing::Budgets> budgets_;
  std::unique_ptr<billing::RateLimiter> limiter_;
  std::unique_ptr<billing::Metering> metering_;
  std::unique_ptr<Admission> admission_;
  std::string key_;
  billing::Principal who_;
  bool ran_ = false;
};

TEST_F(AdmissionTest, GuardsRunTheHandlerOnlyForTheRightCredentials) {
  const Handler for_key = admission_->forKey(
      [this](const HttpRequest&, std::shared_ptr<Exchange>, const billing::Principal& who) {
        ran_ = true;
        EXPECT_EQ(who.team, "team-a");
      });
  const Handler for_admin = admission_->forAdmin([this](const HttpRequest&, std::shared_ptr<Exchange>) { ran_ = true; });
  const Handler for_metrics =
      admission_->forMetrics([this](const HttpRequest&, std::shared_ptr<Exchange>) { ran_ = true; });
  const Handler for_any =
      admission_->forAnyCredential([this](const HttpRequest&, std::shared_ptr<Exchange>) { ran_ = true; });
  struct Case {
    const Handler* handler;
    std::string key;
    bool runs;
  };
  for (const Case& c : std::vector<Case>{{&for_key, key_, true},
                                         {&for_key, kAdminKey, false},  // the admin key is not an API key
                                         {&for_key, "lg-nope", false},
                                         {&for_key, "", false},
                                         {&for_admin, kAdminKey, true},
                                         {&for_admin, key_, false},
                                         {&for_admin, kMetricsToken, false},
                                         {&for_metrics, kAdminKey, true},
                                         {&for_metrics, kMetricsToken, true},
                                         {&for_metrics, key_, false},
                                         {&for_any, key_, true},
                                         {&for_any, kAdminKey, true},
                                         {&for_any, kMetricsToken, true},
                                         {&for_any, "lg-nope", false},
                                         {&for_any, std::string(kMetricsToken) + "x", false},
                                         {&for_any, "", false}}) {
    auto [e, ran] = call(*c.handler, c.key);
    EXPECT_EQ(ran, c.runs) << c.key;
    if (!c.runs) {
      EXPECT_EQ(e->status(), 401) << c.key;
      EXPECT_EQ(errorOf(*e)["code"], "invalid_api_key") << e->body;
      EXPECT_EQ(e->body.find(c.key.empty() ? std::string("\x01") : c.key), std::string::npos) << "echoes the key";
    }
  }
  // Identify: the dashboard's sign-in.
  EXPECT_EQ(admission_->identify(kAdminKey).kind, Caller::Kind::kAdmin);
  EXPECT_EQ(admission_->identify(key_).kind, Caller::Kind::kKey);
  EXPECT_EQ(admission_->identify(key_).who.key_id, who_.key_id);
  EXPECT_EQ(admission_->identify("").kind, Caller::Kind::kNobody);
  EXPECT_EQ(admission_->identify(requestWith("lg-nope")).kind, Caller::Kind::kNobody);
}

TEST_F(AdmissionTest, AShortMetricsTokenIsRefused) {
  EXPECT_FALSE(Admission::metricsToken("short").isOk());
  auto none = Admission::metricsToken("");
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->has_value());
}

TEST_F(AdmissionTest, AnAdmittedRequestIsMeteredAndHoldsItsReservation) {
  Admitted a = admission_->admit(requestWith(key_), who_, ask(100, 10, 2));
  ASSERT_TRUE(std::holds_alternative<Ticket>(a));
  const Ticket& t = std::get<Ticket>(a);
  ASSERT_NE(t.metered, nullptr);
  EXPECT_EQ(t.rate_tokens, 2 * 110);
  EXPECT_EQ(t.metered->info().request_id, "req-admission");
  EXPECT_EQ(t.metered->info().endpoint, "/v1/chat/completions");
  t.metered->abandon();
}

TEST_F(AdmissionTest, ABudgetThatCannotHoldTheRequestIs429InsufficientQuotaAndNotRetried) {
  BudgetSetting b;
  b.enabled = true;
  b.limit = 1'000'000;  // $0.000001
  b.period = BudgetPeriodSetting::kTotal;
  b.soft_limit = b.limit;
  open({}, b);
  Admitted a = admission_->admit(requestWith(key_), who_, ask(100, 10));
  ASSERT_TRUE(std::holds_alternative<Refused>(a));
  const Refused& r = std::get<Refused>(a);
  EXPECT_EQ(r.error.http_status, 429);
  EXPECT_EQ(r.error.code, "insufficient_quota");
  EXPECT_EQ(r.headers.get("x-should-retry"), "false");
  EXPECT_NE(r.error.message.find("team team-a's total budget"), std::string::npos) << r.error.message;
  // Nothing was charged to the per-minute limits or held by the budget.
  EXPECT_EQ(budgets_->statusOf(billing::BudgetScope::kTeam, "team-a", 1'767'225'600)->reserved, 0);
}

TEST_F(AdmissionTest, APerMinuteLimitIs429WithHeadersAndGivesTheBudgetAndTheClaimBack) {
  billing::RateLimitOptions limits;
  limits.per_key = {1, 0};  // one request per minute
  BudgetSetting b;
  b.enabled = true;
  b.limit = 1'000'000'000'000;
  b.period = BudgetPeriodSetting::kTotal;
  b.soft_limit = b.limit;
  open(limits, b);
  Admitted first = admission_->admit(requestWith(key_), who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Ticket>(first));
  EXPECT_EQ(std::get<Ticket>(first).headers.get("x-ratelimit-limit-requests"), "1");
  std::get<Ticket>(first).metered->abandon();

  HttpRequest retried = requestWith(key_);
  retried.headers.add("Idempotency-Key", "once");
  Admitted second = admission_->admit(retried, who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Refused>(second));
  const Refused& r = std::get<Refused>(second);
  EXPECT_EQ(r.error.http_status, 429);
  EXPECT_EQ(r.error.code, "rate_limit_exceeded");
  EXPECT_GE(r.error.retry_after_s, 1);
  EXPECT_EQ(r.headers.get("x-ratelimit-remaining-requests"), "0");
  EXPECT_EQ(budgets_->statusOf(billing::BudgetScope::kTeam, "team-a", 1'767'225'600)->reserved, 0);
  // The Idempotency-Key was given back: it is not "in use".
  auto claim = metering_->claimIdempotencyKey(who_, "once", retried.path, retried.body);
  ASSERT_TRUE(claim.isOk());
  EXPECT_EQ(claim->kind, billing::IdempotencyDecision::Kind::kClaimed);
  metering_->releaseIdempotencyKey(who_, claim->claim);
}

TEST_F(AdmissionTest, IdempotencyKeysAreClaimedReplayedAndRefused) {
  HttpRequest r = requestWith(key_);
  r.headers.add("Idempotency-Key", "k-1");
  Admitted first = admission_->admit(r, who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Ticket>(first));
  // In flight: 409 with Retry-After.
  Admitted busy = admission_->admit(r, who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Refused>(busy));
  EXPECT_EQ(std::get<Refused>(busy).error.http_status, 409);
  EXPECT_EQ(std::get<Refused>(busy).error.code, "idempotency_key_in_use");
  EXPECT_EQ(std::get<Refused>(busy).error.retry_after_s, 1);
  // Completed: the same request again is a replay, another body a 400.
  auto& metered = *std::get<Ticket>(first).metered;
  EXPECT_TRUE(metered.choiceEnded(0, {billing::ChoiceEnd::kCompleted, "stop", {10, 0, 0, 10, 10}, 0.01, {}}));
  std::promise<Status> done;
  metered.commit(R"({"id":"chatcmpl-1"})", "application/json", [&](Status s) { done.set_value(s); });
  ASSERT_TRUE(done.get_future().get().isOk());
  Admitted replay = admission_->admit(r, who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Replayed>(replay));
  EXPECT_EQ(std::get<Replayed>(replay).body, R"({"id":"chatcmpl-1"})");
  EXPECT_EQ(std::get<Replayed>(replay).headers.get("x-latentgate-idempotent-replay"), "req-admission");
  HttpRequest other = r;
  other.body = R"({"model":"other"})";
  Admitted reused = admission_->admit(other, who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Refused>(reused));
  EXPECT_EQ(std::get<Refused>(reused).error.http_status, 400);
  EXPECT_EQ(std::get<Refused>(reused).error.code, "idempotency_key_reused");
  // A malformed key: 400.
  HttpRequest bad = requestWith(key_);
  bad.headers.add("Idempotency-Key", std::string(256, 'x'));
  Admitted invalid = admission_->admit(bad, who_, ask(10, 10));
  ASSERT_TRUE(std::holds_alternative<Refused>(invalid));
  EXPECT_EQ(std::get<Refused>(invalid).error.code, "invalid_idempotency_key");
}

// Limits that answer from a thread of their own, as a shared store does
// (billing/redis/), with what the test sets.
class ThreadedLimits final : public billing::AdmissionLimits {
 public:
  std::function<billing::LimitOutcome()> answer;
  billing::LimitAsk asked;
  void admit(billing::LimitAsk ask, std::function<void(billing::LimitOutcome)> done) override {
    asked = ask;
    std::thread([this, done = std::move(done)] { done(answer()); }).join();
  }
  void giveBack(const billing::Principal&, const billing::RateCharge&, int64_t) override {}
  const billing::RateLimitOptions& rateOptions() const override { return options_; }

 private:
  billing::RateLimitOptions options_;
};

TEST_F(AdmissionTest, ABudgetStoreThatCannotBeReachedIs503AndGivesTheClaimBack) {
  ThreadedLimits limits;
  Admission admission(*keys_, *admin_, std::nullopt, limits, *metering_);
  limits.answer = [] { return billing::LimitsUnavailable{"Redis is unreachable", 2}; };
  HttpRequest r = requestWith(key_);
  r.headers.add("Idempotency-Key", "k-503");
  Admitted a = admission.admit(r, who_, ask(100, 10));
  ASSERT_TRUE(std::holds_alternative<Refused>(a));
  const ApiError& e = std::get<Refused>(a).error;
  EXPECT_EQ(e.http_status, 503);
  EXPECT_EQ(e.type, "server_error");
  EXPECT_EQ(e.code, "budget_store_unavailable");
  EXPECT_EQ(e.retry_after_s, 2);
  // The limits were asked with the request's id, its most and its tokens.
  EXPECT_EQ(limits.asked.request_id, "req-admission");
  EXPECT_GT(limits.asked.cost.value_or(0), 0);
  EXPECT_EQ(limits.asked.tokens, 110);
  // The claim was given back: a retry with the key runs.
  limits.answer = [] { return billing::LimitGrant{}; };
  Admitted retried = admission.admit(r, who_, ask(100, 10));
  ASSERT_TRUE(std::holds_alternative<Ticket>(retried));
  std::get<Ticket>(retried).metered->abandon();
}

}  // namespace
}  // namespace lg::proxy
