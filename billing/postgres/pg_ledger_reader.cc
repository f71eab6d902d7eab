#include "billing/postgres/pg_ledger_reader.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "billing/postgres/pg_session.h"
#include "billing/postgres/pg_sql.h"
#include "common/check.h"
#include "common/url_redact.h"

namespace lg::billing::pg {
namespace {

std::string_view dimensionOf(GroupBy g) {
  switch (g) {
    case GroupBy::kKey: return "key";
    case GroupBy::kModel: return "model";
    case GroupBy::kSystemPrompt: return "system_prompt";
    case GroupBy::kTeam:
    case GroupBy::kNone: break;
  }
  return "team";
}

// A numeric(40,0) as text ("123") to a uint64 counter.
Status parseCounter(const pqxx::field& f, uint64_t* out) {
  const std::string s = f.is_null() ? "0" : f.as<std::string>();
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t v = 0;
  if (s.empty()) return dataLoss("empty counter");
  for (char c : s) {
    if (c < '0' || c > '9') return dataLoss("counter " + quoteValue(s) + " is not a non-negative integer");
    const auto digit = static_cast<uint64_t>(c - '0');
    if (v > (kMax - digit) / 10) return outOfRange("counter " + s + " exceeds the 64 bits a usage row holds");
    v = v * 10 + digit;
  }
  *out = v;
  return Status::ok();
}

Status readCounters(const pqxx::row& row, size_t first, Counters* c) {
  for (size_t i = 0; i < kCounterSlots; ++i) {
    LG_RETURN_IF_ERROR(parseCounter(row[static_cast<pqxx::row::size_type>(first + i)], &(*c)[i]));
  }
  return Status::ok();
}

std::string sumList() {
  std::string s;
  for (const CounterColumn& c : counterColumns()) s += ", sum(" + c.name + ")::text";
  return s;
}

// A row of kEntryColumns as the LedgerEntry it was written from.
Status entryOf(const pqxx::row& row, LedgerEntry* out) {
  LedgerEntry e;
  pqxx::row::size_type i = 0;
  auto text = [&] { return row[i++].as<std::string>(); };
  auto i64 = [&] { return row[i++].as<int64_t>(); };
  e.request_id = text();
  e.response_id = text();
  e.key_id = text();
  e.team = text();
  e.model = text();
  e.requested_model = text();
  e.endpoint = text();
  e.system_prompt = text();
  e.idempotency_key = text();
  e.start_us = i64();
  e.end_us = i64();
  e.ttft_us = i64();
  e.prompt_tokens = i64();
  e.hit_tokens_tier0 = i64();
  e.hit_tokens_disk = i64();
  e.miss_tokens = i64();
  e.output_tokens = i64();
  e.choices = row[i++].as<int32_t>();
  e.prices.rates.input_cache_hit = i64();
  e.prices.rates.input_cache_miss = i64();
  e.prices.rates.output = i64();
  e.prices.version = i64();
  e.prices.priced_as = text();
  e.prices.window = row[i++].as<int>();
  e.cost.input_cache_hit = i64();
  e.cost.input_cache_miss = i64();
  e.cost.output = i64();
  const std::string status = text();
  const auto parsed = parseEntryStatus(status);
  if (!parsed) return dataLoss("ledger entry " + quoteValue(e.request_id) + " has status " + quoteValue(status));
  e.status = *parsed;
  e.finish_reason = text();
  if (!row[i].is_null()) {
    auto miss = decodeMissAnatomy(row[i].as<std::string>());
    if (!miss.isOk()) return dataLoss("ledger entry " + quoteValue(e.request_id) + ": " + miss.status().message());
    e.miss = std::move(miss).value();
  }
  ++i;
  *out = std::move(e);
  return Status::ok();
}

// Entries of a result, in its order.
Status entriesOf(const pqxx::result& r, std::vector<LedgerEntry>* out) {
  out->clear();
  out->reserve(r.size());
  for (const pqxx::row& row : r) {
    LedgerEntry e;
    LG_RETURN_IF_ERROR(entryOf(row, &e));
    out->push_back(std::move(e));
  }
  return Status::ok();
}

}  // namespace

PgLedgerReader::PgLedgerReader(PostgresOptions options) : session_(std::make_unique<Session>(std::move(options))) {}

PgLedgerReader::~PgLedgerReader() = default;

Status PgLedgerReader::redacted(Status s) const {
  if (s.isOk()) return s;
  return Status(s.code(), redactPasswordIn(s.message(), session_->options().url));
}

Result<std::optional<LedgerEntry>> PgLedgerReader::find(const std::string& request_id) const {
  std::lock_guard lock(mu_);
  std::vector<LedgerEntry> found;
  Status bad;
  LG_RETURN_IF_ERROR(redacted(session_->run("reading a ledger entry", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    bad = entriesOf(
        tx.exec_params(std::string("SELECT ") + kEntryColumns + " FROM ledger_entries WHERE request_id = $1", request_id),
        &found);
  })));
  LG_RETURN_IF_ERROR(bad);
  if (found.empty()) return std::optional<LedgerEntry>();
  return std::optional<LedgerEntry>(std::move(found.front()));
}

Status PgLedgerReader::scanEntries(int64_t from_us, int64_t to_us,
                                   const std::function<bool(const LedgerEntry&)>& fn) const {
  // As the RocksDB ledger's keys: times before 1970 count as 0; (start_us,
  // request id byte by byte) is its key order. A page starts after the last
  // entry of the one before (a keyset, so pages never overlap however many
  // entries share a start time); `start_us >= greatest(...)` lets the index
  // on start_us find the page's first row.
  static const std::string sql = std::string("SELECT ") + kEntryColumns +
                                 " FROM ledger_entries WHERE start_us >= greatest($1::bigint, $3::bigint)"
                                 " AND start_us < $2::bigint AND (start_us, request_id COLLATE \"C\") > ($3::bigint, $4::text)"
                                 " ORDER BY start_us, request_id COLLATE \"C\" LIMIT $5::bigint";
  const int64_t from = std::max<int64_t>(from_us, 0);
  const int64_t to = std::max<int64_t>(to_us, 0);
  // The last entry handed to fn; first, a key before every entry in range.
  int64_t after_us = from - 1;
  std::string after_id;
  std::vector<LedgerEntry> page;
  for (;;) {
    Status bad;
    {
      std::lock_guard lock(mu_);
      LG_RETURN_IF_ERROR(redacted(session_->run("scanning ledger entries", [&](pqxx::connection& c) {
        pqxx::read_transaction tx(c);
        bad = entriesOf(tx.exec_params(sql, from, to, after_us, after_id, static_cast<int64_t>(kScanPage)), &page);
      })));
    }
    LG_RETURN_IF_ERROR(bad);
    // The callback runs outside the lock: a slow consumer holds no other read.
    for (LedgerEntry& e : page) {
      // Each entry sorts after the one before: none is handed out twice (an
      // export would bill it twice) and the scan ends.
      LG_CHECK(std::tie(e.start_us, e.request_id) > std::tie(after_us, after_id), "PostgreSQL ledger scan went back from ",
               after_us, "/", after_id, " to ", e.start_us, "/", e.request_id);
      after_us = e.start_us;
      after_id = e.request_id;
      if (!fn(e)) return Status::ok();
    }
    if (page.size() < kScanPage) return Status::ok();
  }
}

Result<std::vector<LedgerEntry>> PgLedgerReader::recentEntries(size_t limit, std::string_view team, int64_t from_us,
                                                               int64_t to_us, size_t /*max_examined*/) const {
  std::vector<LedgerEntry> out;
  if (limit == 0) return out;
  // Newest first, ties by request id descending: the RocksDB ledger's reverse key order.
  static const std::string sql = std::string("SELECT ") + kEntryColumns +
                                 " FROM ledger_entries WHERE start_us >= $1::bigint AND start_us < $2::bigint"
                                 " AND ($3::text = '' OR team = $3::text)"
                                 " ORDER BY start_us DESC, request_id COLLATE \"C\" DESC LIMIT $4::bigint";
  const int64_t from = std::max<int64_t>(from_us, 0);
  const int64_t to = std::max<int64_t>(to_us, 0);
  const auto n = static_cast<int64_t>(std::min<size_t>(limit, std::numeric_limits<int64_t>::max()));
  Status bad;
  std::lock_guard lock(mu_);
  LG_RETURN_IF_ERROR(redacted(session_->run("reading the newest ledger entries", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    bad = entriesOf(tx.exec_params(sql, from, to, std::string(team), n), &out);
  })));
  LG_RETURN_IF_ERROR(bad);
  return out;
}

Result<int64_t> PgLedgerReader::entryCount() const {
  std::lock_guard lock(mu_);
  int64_t n = 0;
  LG_RETURN_IF_ERROR(redacted(session_->run("counting ledger entries", [&](pqxx::connection& c) {
    pqxx::read_transaction tx(c);
    n = tx.exec("SELECT count(*) FROM ledger_entries")[0][0].as<int64_t>();
  })));
  return n;
}

Result<std::vector<UsageRow>> PgLedgerReader::usage(const UsageQuery& q) const {
  // The same rows as Ledger::usage (billing/ledger.cc): the same scan.
  LG_ASSIGN_OR_RETURN(const UsageScan scan, usageScan(q));
  if (q.granularity_s < 0) return invalidArgument("granularity must be >= 0");
  const GroupBy dim = scan.dimension;
  const int64_t from_hour = scan.from_hour;
  const int64_t to_hour = scan.to_hour;
  const bool grouped = q.group_by != GroupBy::kNone;
  // group, team, period: as the RocksDB ledger names them.
  const std::string group_expr = grouped ? "value" : "''::text";
  const std::string team_expr = !grouped ? "$5::text" : (dim == GroupBy::kModel ? "''::text" : "team");
  const std::string period_expr =
      q.granularity_s > 0 ? "hour_s / $6::bigint * $6::bigint" : "(-1)::bigint + 0 * $6::bigint";
  const std::string sql = "SELECT " + group_expr + ", " + team_expr + ", " + period_expr + sumList() +
                          " FROM usage_hourly WHERE dimension = $1 AND hour_s >= $2 AND hour_s < $3"
                          " AND ($4 = '' OR value = $4) AND ($5 = '' OR team = $5) GROUP BY 1, 2, 3";
  std::vector<UsageRow> rows;
  Status bad;
  {
    std::lock_guard lock(mu_);
    LG_RETURN_IF_ERROR(redacted(session_->run("reading usage", [&](pqxx::connection& c) {
      rows.clear();
      bad = Status::ok();
      pqxx::read_transaction tx(c);
      const pqxx::result r = tx.exec_params(sql, std::string(dimensionOf(dim)), from_hour * 3600, to_hour * 3600,
                                            q.key_id, q.team, std::max<int64_t>(q.granularity_s, 1));
      for (const pqxx::row& row : r) {
        UsageRow u;
        u.group = row[0].as<std::string>();
        u.team = row[1].as<std::string>();
        u.period_start_s = row[2].as<int64_t>();
        Status s = readCounters(row, 3, &u.counters);
        if (!s.isOk()) {
          bad = s;
          return;
        }
        rows.push_back(std::move(u));
      }
    })));
  }
  LG_RETURN_IF_ERROR(bad);
  // Byte order, as the RocksDB ledger's std::map gives (PostgreSQL's would follow a collation).
  std::sort(rows.begin(), rows.end(), [](const UsageRow& a, const UsageRow& b) {
    return std::tie(a.group, a.team, a.period_start_s) < std::tie(b.group, b.team, b.period_start_s);
  });
  return rows;
}

Result<VerifyReport> PgLedgerReader::verify() const {
  std::string mismatch_cond;
  std::string e_cols, u_cols;
  for (const CounterColumn& col : counterColumns()) {
    const std::string& c = col.name;
    if (!mismatch_cond.empty()) mismatch_cond += " OR ";
    mismatch_cond += "e." + c + " IS DISTINCT FROM u." + c;
    e_cols += ", coalesce(e." + c + ", 0)::text";
    u_cols += ", coalesce(u." + c + ", 0)::text";
  }
  const std::string sql = "WITH e AS (" + rollupSelect("ledger_entries") + ")"
                          " SELECT coalesce(e.dimension, u.dimension), coalesce(e.hour_s, u.hour_s),"
                          " coalesce(e.team, u.team), coalesce(e.value, u.value)" + e_cols + u_cols +
                          " FROM e FULL OUTER JOIN usage_hourly AS u USING (dimension, hour_s, team, value)"
                          " WHERE " + mismatch_cond + " ORDER BY 1, 2, 3, 4 LIMIT 10";
  VerifyReport report;
  std::lock_guard lock(mu_);
  LG_RETURN_IF_ERROR(redacted(session_->run("verifying usage rollups", [&](pqxx::connection& c) {
    report = VerifyReport{};
    pqxx::read_transaction tx(c);  // one snapshot: entries and rollups as of the same commit
    report.entries = tx.exec("SELECT count(*) FROM ledger_entries")[0][0].as<uint64_t>();
    report.aggregate_keys = tx.exec("SELECT count(*) FROM usage_hourly")[0][0].as<uint64_t>();
    for (const pqxx::row& row : tx.exec(sql)) {
      std::string m = row[0].as<std::string>() + "/" + row[1].as<std::string>() + "/" + row[2].as<std::string>() + "/" +
                      row[3].as<std::string>() + ": entries";
      for (size_t i = 0; i < kCounterSlots; ++i) m += " " + row[static_cast<pqxx::row::size_type>(4 + i)].as<std::string>();
      m += ", rollup";
      for (size_t i = 0; i < kCounterSlots; ++i) {
        m += " " + row[static_cast<pqxx::row::size_type>(4 + kCounterSlots + i)].as<std::string>();
      }
      report.mismatches.push_back(std::move(m));
    }
  })));
  return report;
}

}  // namespace lg::billing::pg
