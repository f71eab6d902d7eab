// The Prometheus text writer (common/metrics.h), its lock-free metric types,
// the registry and the ledger's families (billing/ledger_metrics.h), each
// read back by a strict parser of the format (tests/support/prometheus_text.h),
// which is itself shown to reject what is malformed.
#include "common/metrics.h"

#include <thread>

#include <gtest/gtest.h>

#include "billing/ledger_metrics.h"
#include "tests/support/prometheus_text.h"

namespace lg::metrics {
namespace {

using test::parsePrometheusText;
using test::PromText;

std::string errorsOf(const PromText& p) {
  std::string out;
  for (const std::string& e : p.errors) out += e + "\n";
  return out;
}

TEST(MetricsTest, ValuesAreFormattedShortestAndExact) {
  EXPECT_EQ(formatValue(0.005), "0.005");
  EXPECT_EQ(formatValue(1e-6), "1e-06");
  EXPECT_EQ(formatValue(42), "42");
  EXPECT_EQ(formatValue(-2.5), "-2.5");
  EXPECT_EQ(formatValue(HUGE_VAL), "+Inf");
  EXPECT_EQ(formatValue(-HUGE_VAL), "-Inf");
  EXPECT_EQ(formatValue(std::nan("")), "NaN");
  EXPECT_EQ(std::stod(formatValue(0.1 + 0.2)), 0.1 + 0.2);  // round-trips
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(escapeLabelValue("plain"), "plain");
  EXPECT_EQ(escapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escapeHelp("say \"hi\"\\now\n"), "say \"hi\"\\\\now\\n");  // quotes stay in HELP
  EXPECT_EQ(escapeLabelValue("bad \xff byte"), "bad \xef\xbf\xbd byte");  // U+FFFD

  ExpositionWriter w;
  ASSERT_TRUE(w.family("lg_test_total", "Help with \\ and\na new line.", MetricType::kCounter));
  const std::string nasty = "quote \" backslash \\ newline \n end \\n";
  w.sample({{"team", nasty}, {"other", ""}}, uint64_t{7});
  EXPECT_EQ(w.text(),
            "# HELP lg_test_total Help with \\\\ and\\na new line.\n"
            "# TYPE lg_test_total counter\n"
            "lg_test_total{team=\"quote \\\" backslash \\\\ newline \\n end \\\\n\",other=\"\"} 7\n");
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p);
  // What a scraper reads back is the original value.
  EXPECT_EQ(p.value("lg_test_total", {{"team", nasty}, {"other", ""}}), 7);
  EXPECT_EQ(p.families.at("lg_test_total").help, "Help with \\ and\na new line.");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 5.0, 50.0, 0.1}) h.observe(v);  // 0.1 falls in le="0.1"
  ExpositionWriter w;
  ASSERT_TRUE(w.family("lg_latency_seconds", "A latency.", MetricType::kHistogram));
  w.histogram({{"endpoint", "/v1/chat/completions"}}, h);
  EXPECT_EQ(w.text(),
            "# HELP lg_latency_seconds A latency.\n"
            "# TYPE lg_latency_seconds histogram\n"
            "lg_latency_seconds_bucket{endpoint=\"/v1/chat/completions\",le=\"0.1\"} 3\n"
            "lg_latency_seconds_bucket{endpoint=\"/v1/chat/completions\",le=\"1\"} 4\n"
            "lg_latency_seconds_bucket{endpoint=\"/v1/chat/completions\",le=\"10\"} 5\n"
            "lg_latency_seconds_bucket{endpoint=\"/v1/chat/completions\",le=\"+Inf\"} 6\n"
            "lg_latency_seconds_sum{endpoint=\"/v1/chat/completions\"} " +
                formatValue(0.05 + 0.1 + 0.5 + 5.0 + 50.0 + 0.1) +
                "\n"
                "lg_latency_seconds_count{endpoint=\"/v1/chat/completions\"} 6\n");
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p);

  // The count is the +Inf bucket even when a snapshot's `count` lags.
  Histogram lagging = h;
  lagging.count = 2;
  ExpositionWriter w2;
  ASSERT_TRUE(w2.family("lg_lagging_seconds", "x", MetricType::kHistogram));
  w2.histogram(lagging);
  const PromText p2 = parsePrometheusText(w2.text());
  ASSERT_TRUE(p2.errors.empty()) << errorsOf(p2);
  EXPECT_EQ(p2.value("lg_lagging_seconds_count"), 6);
}

TEST(MetricsTest, OneSampleFamiliesWriteTheirHeaderAndTheirSample) {
  Histogram h({1});
  h.observe(0.5);
  ExpositionWriter w;
  w.counter("lg_c_total", "c", uint64_t{3});
  w.gauge("lg_g_bytes", "g", uint64_t{18'446'744'073'709'551'615u});
  w.gauge("lg_h_bytes", "h", int64_t{-1});
  w.gauge("lg_i_ratio", "i", 0.5);
  w.histogram("lg_j_seconds", "j", h);
  w.histogram("lg_j_seconds", "a second family of one name: dropped", h);
  EXPECT_EQ(w.dropped(), 1u);
  EXPECT_EQ(w.text(),
            "# HELP lg_c_total c\n# TYPE lg_c_total counter\nlg_c_total 3\n"
            "# HELP lg_g_bytes g\n# TYPE lg_g_bytes gauge\nlg_g_bytes 18446744073709551615\n"
            "# HELP lg_h_bytes h\n# TYPE lg_h_bytes gauge\nlg_h_bytes -1\n"
            "# HELP lg_i_ratio i\n# TYPE lg_i_ratio gauge\nlg_i_ratio 0.5\n"
            "# HELP lg_j_seconds j\n# TYPE lg_j_seconds histogram\n"
            "lg_j_seconds_bucket{le=\"1\"} 1\nlg_j_seconds_bucket{le=\"+Inf\"} 1\n"
            "lg_j_seconds_sum 0.5\nlg_j_seconds_count 1\n");
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p);
}

TEST(MetricsTest, MalformedFamiliesAndSamplesAreDroppedAndTheTextStaysWellFormed) {
  ExpositionWriter w;
  EXPECT_TRUE(w.family("lg_ok_total", "fine", MetricType::kCounter));
  w.sample(uint64_t{1});
  w.sample({{"bad-name", "x"}}, uint64_t{1});         // invalid label name
  w.sample({{"__reserved", "x"}}, uint64_t{1});       // reserved
  w.sample({{"a", "1"}, {"a", "2"}}, uint64_t{1});    // twice
  w.histogram(Histogram({1}));                        // a histogram in a counter family
  EXPECT_FALSE(w.family("lg_ok_total", "again", MetricType::kCounter));  // a second time
  w.sample(uint64_t{2});                               // belongs to the dropped family
  EXPECT_FALSE(w.family("lg_requests", "a counter without _total", MetricType::kCounter));
  EXPECT_FALSE(w.family("0starts_with_digit", "x", MetricType::kGauge));
  EXPECT_FALSE(w.family("has space", "x", MetricType::kGauge));
  EXPECT_TRUE(w.family("lg_h_seconds", "h", MetricType::kHistogram));
  w.histogram({{"le", "1"}}, Histogram({1}));         // le is the histogram's own
  w.sample(1.0);                                       // a plain sample in a histogram family
  EXPECT_EQ(w.dropped(), 11u);
  const PromText p = parsePrometheusText(w.text());
  EXPECT_TRUE(p.errors.empty()) << errorsOf(p) << w.text();
  EXPECT_EQ(p.value("lg_ok_total"), 1);
  EXPECT_EQ(p.families.at("lg_ok_total").samples.size(), 1u);
}

// The parser the tests rely on must itself reject malformed text.
TEST(MetricsTest, TheTestParserRejectsMalformedText) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"no HELP/TYPE", "lg_x_total 1\n"},
      {"TYPE only", "# TYPE lg_x_total counter\nlg_x_total 1\n"},
      {"counter name", "# HELP lg_x x\n# TYPE lg_x counter\nlg_x 1\n"},
      {"bad escape", "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x{a=\"\\t\"} 1\n"},
      {"unterminated", "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x{a=\"b} 1\n"},
      {"bad value", "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x one\n"},
      {"no newline at end", "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x 1"},
      {"series twice", "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x{a=\"1\"} 1\nlg_x{a=\"1\"} 2\n"},
      {"not contiguous",
       "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x{a=\"1\"} 1\n# HELP lg_y y\n# TYPE lg_y gauge\nlg_y 1\nlg_x{a=\"2\"} 1\n"},
      {"not cumulative",
       "# HELP lg_h h\n# TYPE lg_h histogram\nlg_h_bucket{le=\"1\"} 3\nlg_h_bucket{le=\"+Inf\"} 2\nlg_h_sum 1\n"
       "lg_h_count 2\n"},
      {"no +Inf",
       "# HELP lg_h h\n# TYPE lg_h histogram\nlg_h_bucket{le=\"1\"} 3\nlg_h_sum 1\nlg_h_count 3\n"},
      {"count differs",
       "# HELP lg_h h\n# TYPE lg_h histogram\nlg_h_bucket{le=\"1\"} 3\nlg_h_bucket{le=\"+Inf\"} 3\nlg_h_sum 1\n"
       "lg_h_count 4\n"},
      {"no sum", "# HELP lg_h h\n# TYPE lg_h histogram\nlg_h_bucket{le=\"+Inf\"} 3\nlg_h_count 3\n"},
      {"bare histogram sample", "# HELP lg_h h\n# TYPE lg_h histogram\nlg_h 3\n"},
  };
  for (const auto& [what, text] : bad) {
    EXPECT_FALSE(parsePrometheusText(text).errors.empty()) << what;
  }
  const PromText good = parsePrometheusText(
      "# HELP lg_x x\n# TYPE lg_x gauge\nlg_x{a=\"\\\"\"} -Inf\n# a comment\n# HELP lg_h h\n# TYPE lg_h "
      "histogram\nlg_h_bucket{le=\"0.5\"} 1\nlg_h_bucket{le=\"+Inf\"} 2\nlg_h_sum 3.5\nlg_h_count 2\n");
  EXPECT_TRUE(good.errors.empty()) << errorsOf(good);
}

TEST(MetricsTest, AtomicHistogramCountsEveryObservationFromManyThreads) {
  AtomicHistogram h({1, 10, 100});
  constexpr int kThreads = 8;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h] {
      for (int i = 0; i < kPerThread; ++i) h.observe(static_cast<double>(i % 4) * 50);  // 0, 50, 100, 150
    });
  }
  for (auto& t : threads) t.join();
  const Histogram s = h.snapshot();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kPerThread);
  EXPECT_EQ(s.counts[0], uint64_t{kThreads} * kPerThread / 4);      // 0 <= 1
  EXPECT_EQ(s.counts[1], 0u);                                       // none in (1, 10]
  EXPECT_EQ(s.counts[2], uint64_t{kThreads} * kPerThread / 2);      // 50 and 100 <= 100
  EXPECT_EQ(s.counts[3], uint64_t{kThreads} * kPerThread / 4);      // 150: +Inf
  EXPECT_EQ(s.sum, 75.0 * kThreads * kPerThread);                   // integers: exact
  EXPECT_EQ(s.max, 150);
  h.observe(std::nan(""));  // ignored
  EXPECT_EQ(h.snapshot().count, s.count);
}

TEST(MetricsTest, BoundedLabelCounterKeepsItsFirstSeriesAndFoldsTheRestIntoOther) {
  BoundedLabelCounter c("team", 2);
  c.add("team-a", 5);
  c.add("team-b", 7);
  c.add("team-c", 11);  // over the bound
  c.add("team-a", 1);
  c.add("other", 100);  // a team really named "other" is folded too
  c.add("team-d", 13);
  using V = std::vector<std::pair<std::string, uint64_t>>;
  EXPECT_EQ(c.values(), (V{{"team-a", 6}, {"team-b", 7}, {"other", 124}}));
  // Later teams never take a series: `other` only grows.
  c.add("team-e", 1);
  EXPECT_EQ(c.values().back(), (std::pair<std::string, uint64_t>("other", 125)));

  // Concurrent adds lose nothing, and the bound holds.
  BoundedLabelCounter many("team", 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&many, t] {
      for (int i = 0; i < 5000; ++i) many.add("team-" + std::to_string((i + t) % 50), 3);
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (const auto& [team, v] : many.values()) total += v;
  EXPECT_EQ(total, uint64_t{8} * 5000 * 3);
  EXPECT_EQ(many.values().size(), 21u);  // 20 teams and other

  ExpositionWriter w;
  many.collect(w, "lg_cost_total", "cost");
  const PromText p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p);
  EXPECT_EQ(p.families.at("lg_cost_total").samples.size(), 21u);
  EXPECT_EQ(p.sum("lg_cost_total"), 8.0 * 5000 * 3);
}

TEST(MetricsTest, LedgerMetricsExposeCommitLatencyAndCostByBoundedTeam) {
  billing::LedgerMetrics ledger(/*max_teams=*/3);
  ExpositionWriter empty;
  ledger.collect(empty);
  PromText p = parsePrometheusText(empty.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p);
  EXPECT_EQ(p.families.at("latentgate_ledger_commit_seconds").type, "histogram");
  EXPECT_EQ(p.value("latentgate_ledger_commit_seconds_count"), 0);
  EXPECT_EQ(p.families.at("latentgate_cost_picodollars_total").type, "counter");
  EXPECT_TRUE(p.families.at("latentgate_cost_picodollars_total").samples.empty());

  ledger.observeCommit(0.0008);
  ledger.observeCommit(0.003);
  ledger.observeCommit(7);  // beyond the last bound: +Inf only
  // $0.028 per 1M hit tokens = 28,000 pico-dollars per token.
  for (const char* team : {"team-a", "team-b", "team-c", "team-d", "team-e"}) ledger.addCost(team, 28000);
  ledger.addCost("team-a", 1);
  ExpositionWriter w;
  ledger.collect(w);
  p = parsePrometheusText(w.text());
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p);
  EXPECT_EQ(p.value("latentgate_ledger_commit_seconds_count"), 3);
  EXPECT_EQ(p.value("latentgate_ledger_commit_seconds_bucket", {{"le", "0.001"}}), 1);
  EXPECT_EQ(p.value("latentgate_ledger_commit_seconds_bucket", {{"le", "0.005"}}), 2);
  EXPECT_EQ(p.value("latentgate_ledger_commit_seconds_bucket", {{"le", "2.5"}}), 2);
  EXPECT_EQ(p.value("latentgate_ledger_commit_seconds_bucket", {{"le", "+Inf"}}), 3);
  EXPECT_EQ(p.value("latentgate_cost_picodollars_total", {{"team", "team-a"}}), 28001);
  EXPECT_EQ(p.value("latentgate_cost_picodollars_total", {{"team", "team-c"}}), 28000);
  EXPECT_EQ(p.value("latentgate_cost_picodollars_total", {{"team", "other"}}), 56000);
  EXPECT_FALSE(p.find("latentgate_cost_picodollars_total", {{"team", "team-d"}}).has_value());
}

TEST(MetricsTest, RegistryConcatenatesItsCollectorsFamilies) {
  Registry r;
  std::atomic<uint64_t> requests{3};
  r.add([&requests](ExpositionWriter& w) { w.counter("lg_a_total", "a", requests.load()); });
  r.add([](ExpositionWriter& w) { w.gauge("lg_b_bytes", "b", int64_t{-5}); });
  r.add([](ExpositionWriter& w) { w.gauge("lg_a_total", "a duplicate: dropped", 1.0); });
  std::string text = r.scrape();
  PromText p = parsePrometheusText(text);
  ASSERT_TRUE(p.errors.empty()) << errorsOf(p) << text;
  EXPECT_EQ(p.value("lg_a_total"), 3);
  EXPECT_EQ(p.value("lg_b_bytes"), -5);
  requests = 4;
  p = parsePrometheusText(r.scrape());
  EXPECT_EQ(p.value("lg_a_total"), 4);
  // Scrapes from many threads at once.
  std::vector<std::thread> threads;
  std::atomic<int> well_formed{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) well_formed += parsePrometheusText(r.scrape()).errors.empty() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(well_formed.load(), 400);
}

}  // namespace
}  // namespace lg::metrics
