#include "billing/postgres/ledger_drain.h"

#include <algorithm>
#include <utility>

#include "billing/postgres/pg_ledger_writer.h"
#include "billing/postgres/pg_schema.h"
#include "common/logging.h"
#include "common/unix_time.h"
#include "common/url_redact.h"

namespace lg::billing::pg {
namespace {

spdlog::logger* drainLog() {
  static spdlog::logger* logger = componentLogger("billing");
  return logger;
}

}  // namespace

std::string_view drainStateName(DrainState s) {
  switch (s) {
    case DrainState::kStarting: return "starting";
    case DrainState::kDraining: return "draining";
    case DrainState::kRetrying: return "retrying";
    case DrainState::kStopped: return "stopped";
  }
  return "stopped";
}

LedgerDrain::LedgerDrain(Ledger& ledger, DrainOptions options)
    : ledger_(ledger), options_(std::move(options)), writer_(std::make_unique<PgLedgerWriter>(options_.postgres)) {}

Result<std::unique_ptr<LedgerDrain>> LedgerDrain::start(Ledger& ledger, DrainOptions options) {
  if (options.postgres.url.empty()) return invalidArgument("ledger drain: no PostgreSQL URL");
  if (!ledger.options().outbox) return invalidArgument("ledger drain: the ledger was opened without its outbox");
  if (options.batch_size == 0) return invalidArgument("ledger drain: batch_size must be at least 1");
  if (options.interval.count() <= 0 || options.retry_min.count() <= 0 || options.retry_max < options.retry_min ||
      options.shutdown_drain.count() < 0) {
    return invalidArgument("ledger drain: intervals must be positive and retry_min <= retry_max");
  }
  std::unique_ptr<LedgerDrain> drain(new LedgerDrain(ledger, std::move(options)));
  drainLog()->info("ledger: draining the outbox ({} entries) into PostgreSQL at {}", ledger.outboxDepth(),
                   redactUrlPassword(drain->options_.postgres.url));
  drain->thread_ = std::thread([d = drain.get()] { d->run(); });
  return drain;
}

LedgerDrain::~LedgerDrain() { stop(); }

void LedgerDrain::stop() {
  if (stopped_) return;
  stopped_ = true;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  // The final attempt, on this thread now that the loop is gone: batches
  // until the outbox is empty, a batch fails, or the time is up.
  if (migrated_) {
    const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_drain;
    while (std::chrono::steady_clock::now() < deadline) {
      auto n = drainOnce();
      if (!n.isOk()) {
        failed(n.status(), "the final drain");
        break;
      }
      if (*n == 0) break;
    }
  }
  state_.store(DrainState::kStopped, std::memory_order_relaxed);
  const uint64_t left = ledger_.outboxDepth();
  if (left > 0) drainLog()->warn("ledger: {} entries stay in the outbox for the next start", left);
}

void LedgerDrain::wake() {
  {
    std::lock_guard lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

int64_t LedgerDrain::nowUs() const { return options_.now_us ? options_.now_us() : unixMicros(); }

bool LedgerDrain::waitFor(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [&] { return stopping_ || woken_; });
  woken_ = false;
  return !stopping_;
}

void LedgerDrain::failed(const Status& s, std::string_view what) {
  failures_.fetch_add(1, std::memory_order_relaxed);
  state_.store(DrainState::kRetrying, std::memory_order_relaxed);
  // One line per outage, not one per retry; the password never, whatever libpq quoted.
  if (!logged_failure_) {
    drainLog()->warn("ledger: {} failed; the outbox holds ({} entries) and is retried: {}", what,
                     ledger_.outboxDepth(), redactPasswordIn(s.toString(), options_.postgres.url));
    logged_failure_ = true;
  }
}

void LedgerDrain::run() {
  std::chrono::milliseconds backoff = options_.retry_min;
  const auto fail = [&](const Status& s, std::string_view what) {
    failed(s, what);
    const bool go_on = waitFor(backoff);
    backoff = std::min(backoff * 2, options_.retry_max);
    return go_on;
  };
  while (!migrated_) {
    auto report = migrate(options_.postgres);
    if (report.isOk()) {
      migrated_ = true;
      if (!report->applied.empty()) drainLog()->info("ledger: PostgreSQL schema migrated to version {}", report->version);
      break;
    }
    if (!fail(report.status(), "migrating the PostgreSQL schema")) return;
  }
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    auto n = drainOnce();
    if (!n.isOk()) {
      if (!fail(n.status(), "draining the ledger outbox")) return;
      continue;
    }
    if (logged_failure_) {
      drainLog()->info("ledger: PostgreSQL is back; draining the outbox ({} entries)", ledger_.outboxDepth());
      logged_failure_ = false;
    }
    backoff = options_.retry_min;
    state_.store(DrainState::kDraining, std::memory_order_relaxed);
    if (*n < options_.batch_size && !waitFor(options_.interval)) return;
  }
}

Result<size_t> LedgerDrain::drainOnce() {
  LG_ASSIGN_OR_RETURN(OutboxBatch batch, ledger_.readOutbox(options_.batch_size));
  oldest_waiting_commit_us_.store(batch.oldest_commit_us, std::memory_order_relaxed);
  std::vector<std::pair<std::string, std::string>> rejected = std::move(batch.broken);
  for (const auto& [marker, why] : rejected) drainLog()->error("ledger: outbox marker {} is dropped: {}", marker, why);
  const size_t read = batch.markers.size() + rejected.size();
  if (read == 0) return size_t{0};
  std::vector<std::string> drained;
  WriteResult written;
  auto r = writer_->write(batch.entries);
  if (r.isOk()) {
    written = *r;
    drained = std::move(batch.markers);
  } else if (r.status().code() == StatusCode::kInvalidArgument) {
    // Text PostgreSQL cannot hold: find the entries it refuses alone.
    for (size_t i = 0; i < batch.entries.size(); ++i) {
      auto one = writer_->write({batch.entries[i]});
      if (one.isOk()) {
        written.inserted += one->inserted;
        written.duplicates += one->duplicates;
        drained.push_back(batch.markers[i]);
      } else if (one.status().code() == StatusCode::kInvalidArgument) {
        drainLog()->error("ledger: entry {} can never be written to PostgreSQL; moved to led/outbox-rejected/: {}",
                          batch.entries[i].request_id, one.status().toString());
        rejected.emplace_back(batch.markers[i], one.status().toString());
      } else {
        // Keep what is done; the rest waits for the next attempt.
        LG_RETURN_IF_ERROR(ledger_.removeFromOutbox(drained, rejected));
        rejected_.fetch_add(rejected.size(), std::memory_order_relaxed);
        return one.status();
      }
    }
  } else {
    return r.status();
  }
  // Only now, after PostgreSQL's commit: a crash before this line leaves the
  // markers, and the batch is written again, adding nothing.
  LG_RETURN_IF_ERROR(ledger_.removeFromOutbox(drained, rejected));
  drained_.fetch_add(written.inserted + written.duplicates, std::memory_order_relaxed);
  duplicates_.fetch_add(written.duplicates, std::memory_order_relaxed);
  rejected_.fetch_add(rejected.size(), std::memory_order_relaxed);
  batches_.fetch_add(1, std::memory_order_relaxed);
  last_success_us_.store(nowUs(), std::memory_order_relaxed);
  if (ledger_.outboxDepth() == 0) oldest_waiting_commit_us_.store(0, std::memory_order_relaxed);
  return read;
}

DrainStats LedgerDrain::stats() const {
  DrainStats s;
  s.drained = drained_.load(std::memory_order_relaxed);
  s.duplicates = duplicates_.load(std::memory_order_relaxed);
  s.batches = batches_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.rejected = rejected_.load(std::memory_order_relaxed);
  s.last_success_us = last_success_us_.load(std::memory_order_relaxed);
  return s;
}

void LedgerDrain::collect(metrics::ExpositionWriter& w) const {
  const DrainStats s = stats();
  w.gauge("latentgate_ledger_outbox_entries",
          "Ledger entries committed on this replica and not yet in PostgreSQL (the outbox's depth).",
          ledger_.outboxDepth());
  w.counter("latentgate_ledger_drained_total",
            "Ledger entries whose PostgreSQL batch committed (including ones PostgreSQL already held).", s.drained);
  w.counter("latentgate_ledger_drain_duplicates_total",
            "Drained entries PostgreSQL already held (a batch written again after a crash or an in-doubt commit).",
            s.duplicates);
  w.counter("latentgate_ledger_drain_failures_total",
            "Failed drain attempts (schema migration or batch); the outbox holds and is retried with backoff.",
            s.failures);
  w.counter("latentgate_ledger_drain_rejected_total",
            "Ledger entries PostgreSQL can never hold, moved to led/outbox-rejected/ (see the billing log).",
            s.rejected);
  w.gauge("latentgate_ledger_drain_last_success_timestamp_seconds",
          "Unix time of the last committed drain batch (0: none since start).",
          static_cast<double>(s.last_success_us) / 1e6);
  const int64_t oldest = oldest_waiting_commit_us_.load(std::memory_order_relaxed);
  const double lag = oldest > 0 && ledger_.outboxDepth() > 0 ? std::max<double>(0, (nowUs() - oldest) / 1e6) : 0.0;
  w.gauge("latentgate_ledger_drain_lag_seconds",
          "Age of the oldest entry in the next batch to drain, from its commit (0: the outbox is empty).", lag);
  if (w.family("latentgate_ledger_drain_state", "The drain's state: 1 for the current one.",
               metrics::MetricType::kGauge)) {
    for (DrainState st : {DrainState::kStarting, DrainState::kDraining, DrainState::kRetrying, DrainState::kStopped}) {
      w.sample({{"state", std::string(drainStateName(st))}}, st == state() ? 1.0 : 0.0);
    }
  }
}

}  // namespace lg::billing::pg
