#include "billing/postgres/pg_response_index.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "billing/postgres/pg_session.h"
#include "common/logging.h"
#include "common/unix_time.h"
#include "common/url_redact.h"

namespace lg::billing::pg {
namespace {

spdlog::logger* indexLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

// Ids come from clients (paths, previous_response_id): only ours reach a query.
bool plainId(std::string_view s) {
  return !s.empty() && s.size() <= 128 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

constexpr int64_t kCleanupEvery_s = 3600;
constexpr int64_t kKeepExpired_s = 86400;

}  // namespace

PgResponseIndex::PgResponseIndex(BillingDb& db, ResponseIndexOptions options)
    : db_(db),
      options_(std::move(options)),
      push_session_(std::make_unique<Session>(options_.postgres)),
      lookup_session_(std::make_unique<Session>(options_.postgres)) {}

Result<std::unique_ptr<PgResponseIndex>> PgResponseIndex::start(BillingDb& db, ResponseIndexOptions options) {
  if (options.postgres.url.empty()) return invalidArgument("response index: no PostgreSQL URL");
  if (options.replica.empty()) return invalidArgument("response index: no replica id");
  if (options.interval.count() <= 0 || options.batch == 0) {
    return invalidArgument("response index: the interval and the batch must be positive");
  }
  std::unique_ptr<PgResponseIndex> index(new PgResponseIndex(db, std::move(options)));
  index->thread_ = std::thread([i = index.get()] { i->run(); });
  return index;
}

PgResponseIndex::~PgResponseIndex() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t PgResponseIndex::nowS() const { return options_.now_s ? options_.now_s() : unixSeconds(); }

void PgResponseIndex::marked() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void PgResponseIndex::run() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, options_.interval, [&] { return stopping_ || woken_; });
      woken_ = false;
      if (stopping_) return;
    }
    for (;;) {
      auto n = pushNow();
      if (!n.isOk()) {
        if (!logged_failure_) {
          indexLog()->warn("stored responses' index: pushing to PostgreSQL failed; the markers wait and are retried: {}",
                           redactPasswordIn(n.status().toString(), options_.postgres.url));
          logged_failure_ = true;
        }
        break;
      }
      if (logged_failure_) {
        indexLog()->info("stored responses' index: PostgreSQL is back");
        logged_failure_ = false;
      }
      if (*n < options_.batch) break;  // a full batch: more may wait
    }
  }
}

Result<size_t> PgResponseIndex::pushNow() {
  std::lock_guard lock(push_mu_);
  auto n = pushLocked();
  if (!n.isOk()) push_failures_.fetch_add(1, std::memory_order_relaxed);
  return n;
}

Result<size_t> PgResponseIndex::pushLocked() {
  std::vector<std::string> keys;
  // The latest state of each response in this batch; deletion is final.
  std::map<std::pair<std::string, std::string>, ResponseIndexMarker> rows;
  LG_RETURN_IF_ERROR(db_.scan(kResponseIndexMarkers, [&](std::string_view key, std::string_view value) {
    keys.emplace_back(key);
    auto m = parseResponseIndexMarker(key, value);
    if (!m || !plainId(m->owner) || !plainId(m->response_id)) {
      indexLog()->error("stored responses' index: marker {} is damaged; dropped", key);
      return keys.size() < options_.batch;
    }
    auto [it, added] = rows.try_emplace({m->owner, m->response_id}, *m);
    if (!added) {
      it->second.expires_s = m->expires_s;
      it->second.deleted = it->second.deleted || m->deleted;
    }
    return keys.size() < options_.batch;
  }));
  if (!rows.empty()) {
    nlohmann::json batch = nlohmann::json::array();
    for (const auto& [id, m] : rows) {
      batch.push_back({{"k", m.owner}, {"r", m.response_id}, {"e", m.expires_s}, {"d", m.deleted}});
    }
    LG_RETURN_IF_ERROR(push_session_->run("pushing the stored responses' index", [&](pqxx::connection& c) {
      pqxx::work tx(c);
      tx.exec_params(
          "INSERT INTO stored_responses (key_id, response_id, replica, expires_s, deleted)"
          " SELECT b.k, b.r, $2, b.e, b.d FROM jsonb_to_recordset($1::jsonb) AS b(k text, r text, e bigint, d boolean)"
          " ORDER BY b.k COLLATE \"C\", b.r COLLATE \"C\""
          " ON CONFLICT (key_id, response_id) DO UPDATE SET replica = EXCLUDED.replica,"
          " expires_s = EXCLUDED.expires_s, deleted = stored_responses.deleted OR EXCLUDED.deleted",
          batch.dump(), options_.replica);
      tx.commit();
    }));
  }
  // Only now, after the commit; a deletion a crash loses pushes again, which
  // changes nothing.
  if (!keys.empty()) LG_RETURN_IF_ERROR(db_.writeUnsynced({}, keys));
  pushed_.fetch_add(rows.size(), std::memory_order_relaxed);
  const int64_t now = nowS();
  if (now >= next_cleanup_s_) {
    // Rows long expired answer nothing; a bounded delete now and then.
    const Status cleaned = push_session_->run("deleting expired stored responses' index rows", [&](pqxx::connection& c) {
      pqxx::work tx(c);
      tx.exec_params("DELETE FROM stored_responses WHERE ctid IN (SELECT ctid FROM stored_responses"
                     " WHERE expires_s < $1 LIMIT 10000)",
                     now - kKeepExpired_s);
      tx.commit();
    });
    if (cleaned.isOk()) next_cleanup_s_ = now + kCleanupEvery_s;
  }
  return keys.size();
}

Result<std::optional<std::string>> PgResponseIndex::holder(std::string_view owner, std::string_view response_id) {
  if (!plainId(owner) || !plainId(response_id)) return std::optional<std::string>();
  if (steadyMs() < lookups_refused_until_ms_.load(std::memory_order_relaxed)) {
    lookup_failures_.fetch_add(1, std::memory_order_relaxed);
    return unavailable("the stored responses' index in PostgreSQL failed a moment ago");
  }
  lookups_.fetch_add(1, std::memory_order_relaxed);
  std::optional<std::string> found;
  std::lock_guard lock(lookup_mu_);
  const Status s = lookup_session_->run("reading the stored responses' index", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    const pqxx::result r = tx.exec_params(
        "SELECT replica FROM stored_responses WHERE key_id = $1 AND response_id = $2 AND NOT deleted AND expires_s > $3",
        std::string(owner), std::string(response_id), nowS());
    found = r.empty() ? std::nullopt : std::optional<std::string>(r[0][0].as<std::string>());
  });
  if (!s.isOk()) {
    lookup_failures_.fetch_add(1, std::memory_order_relaxed);
    lookups_refused_until_ms_.store(steadyMs() + options_.lookup_backoff.count(), std::memory_order_relaxed);
    return unavailable(redactPasswordIn(s.message(), options_.postgres.url));
  }
  return found;
}

void PgResponseIndex::collect(metrics::ExpositionWriter& w) const {
  w.counter("latentgate_stored_response_index_pushed_total",
            "Stored responses whose place (this replica, or deleted) was written to the index in PostgreSQL.",
            pushed_.load(std::memory_order_relaxed));
  w.counter("latentgate_stored_response_index_push_failures_total",
            "Failed pushes to the stored responses' index (PostgreSQL unreachable); the markers wait and are retried.",
            push_failures_.load(std::memory_order_relaxed));
  w.counter("latentgate_stored_response_index_lookups_total",
            "Lookups of a stored response this replica does not hold (which replica does).",
            lookups_.load(std::memory_order_relaxed));
  w.counter("latentgate_stored_response_index_lookup_failures_total",
            "Lookups that failed (PostgreSQL unreachable): answered 503.", lookup_failures_.load(std::memory_order_relaxed));
}

}  // namespace lg::billing::pg
