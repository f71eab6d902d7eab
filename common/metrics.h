// Metrics in the Prometheus text exposition format (version 0.0.4): a writer
// that emits well-formed families, lock-free metric types for the hot path,
// a counter with a bounded label set, and the registry /metrics scrapes.
// docs/metrics.md lists the families LatentGate exposes.
//
// The writer is the only place that produces exposition text, so every
// family gets its # HELP and # TYPE lines, names and labels are checked,
// label values and help text are escaped, and histograms are written as
// cumulative `_bucket{le=...}` series ending in `+Inf`, then `_sum` and
// `_count` (equal to the +Inf bucket).
//
// A module that exposes metrics owns them (atomics, AtomicHistogram,
// BoundedLabelCounter, or a stats snapshot it already keeps) and adds a
// Collector to the Registry that writes them at scrape time; the registry
// owns nothing but the collectors. Names follow Prometheus' conventions:
// `latentgate_<what>_<unit>` with the base unit spelled out (`_seconds`,
// `_bytes`) and counters ending in `_total`.
//
// Thread-safety: ExpositionWriter is a plain value used by one scrape.
// AtomicHistogram and BoundedLabelCounter may be updated and read from any
// thread at once. Registry::add and Registry::scrape may be called from any
// thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/histogram.h"

namespace lg::metrics {

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };
std::string_view metricTypeName(MetricType type);  // "counter", "gauge", "histogram"

struct Label {
  std::string name;
  std::string value;
};
using Labels = std::vector<Label>;

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool validMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__" (reserved by Prometheus).
bool validLabelName(std::string_view name);
// A label value as it goes between the quotes: backslash, double quote and
// line feed escaped (\\, \", \n); invalid UTF-8 replaced with U+FFFD.
std::string escapeLabelValue(std::string_view value);
// Help text: backslash and line feed escaped; invalid UTF-8 replaced.
std::string escapeHelp(std::string_view help);
// A sample value or `le` bound: the shortest text that reads back as the
// same double ("0.005", "1e-06", "42"), or +Inf, -Inf, NaN.
std::string formatValue(double value);

class ExpositionWriter {
 public:
  // Starts a family: writes its # HELP and # TYPE lines; the samples written
  // until the next family() belong to it. Returns false, and drops the
  // family's samples, when the name is not a valid metric name, a counter's
  // name does not end in `_total`, or a family of this name was already
  // written (every family must appear once per scrape); dropped() counts
  // those.
  bool family(std::string_view name, std::string_view help, MetricType type);

  // One sample of the current counter or gauge family. A sample with an
  // invalid label name, or with a repeated one, is dropped (counted).
  void sample(const Labels& labels, double value);
  void sample(const Labels& labels, uint64_t value);
  void sample(const Labels& labels, int64_t value);
  void sample(double value) { sample(Labels{}, value); }
  void sample(uint64_t value) { sample(Labels{}, value); }
  void sample(int64_t value) { sample(Labels{}, value); }

  // One histogram of the current histogram family: a `_bucket` line per
  // bound with the cumulative count, `le="+Inf"` with every observation,
  // then `_sum` and `_count`. The labels must not include `le`.
  void histogram(const Labels& labels, const Histogram& h);
  void histogram(const Histogram& h) { histogram(Labels{}, h); }

  // A family with one unlabelled sample (or histogram).
  void counter(std::string_view name, std::string_view help, uint64_t value);
  void gauge(std::string_view name, std::string_view help, double value);
  void gauge(std::string_view name, std::string_view help, int64_t value);
  void gauge(std::string_view name, std::string_view help, uint64_t value);  // sizes, depths
  void histogram(std::string_view name, std::string_view help, const Histogram& h);

  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }
  // Families and samples dropped because they were malformed (a bug in a
  // collector; the text stays well-formed).
  uint64_t dropped() const { return dropped_; }

 private:
  // Whether a sample (a histogram's lines, or not) may be written to the
  // current family with these labels; counts it as dropped otherwise.
  bool checkSample(bool histogram, const Labels& labels);
  void line(std::string_view suffix, const Labels& labels, const Label* extra, std::string_view value);

  std::string out_;
  std::string current_;  // the current family's name; empty: none, or dropped
  MetricType current_type_ = MetricType::kGauge;
  std::set<std::string, std::less<>> written_;
  uint64_t dropped_ = 0;
};

// A histogram that any thread may observe into without a lock: one atomic
// per bucket, an atomic sum. A snapshot taken while observations race may
// count an observation in its bucket but not yet in the sum (never the
// reverse of what was cumulated: the count is derived from the buckets, so
// `_count` always equals the +Inf bucket).
class AtomicHistogram {
 public:
  explicit AtomicHistogram(std::vector<double> upper_bounds);
  AtomicHistogram(const AtomicHistogram&) = delete;
  AtomicHistogram& operator=(const AtomicHistogram&) = delete;

  void observe(double v) noexcept;
  Histogram snapshot() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, the last is +Inf
  std::atomic<double> sum_{0};
  std::atomic<double> max_{0};
};

// A counter with one label whose values are not known in advance (a team),
// with bounded cardinality: the first `max_series` distinct values get a
// series each, for good; every later value is added to the series whose
// label value is `other_value`. Choosing the series by rank at scrape time
// ("the top N") would move amounts out of the `other` series when a value
// climbed into the top N, and a counter that decreases reads as a reset to
// Prometheus. A value equal to `other_value` is folded into `other` too.
// add() takes a shared lock and one atomic add for a value already seen,
// an exclusive lock the first time a value is seen.
class BoundedLabelCounter {
 public:
  BoundedLabelCounter(std::string label_name, size_t max_series, std::string other_value = "other");

  void add(std::string_view label_value, uint64_t amount);
  // The series, ordered by label value, `other` last when it was used.
  std::vector<std::pair<std::string, uint64_t>> values() const;
  // Writes the family (HELP, TYPE counter, one sample per series).
  void collect(ExpositionWriter& w, std::string_view name, std::string_view help) const;
  size_t maxSeries() const { return max_series_; }

 private:
  const std::string label_name_;
  const size_t max_series_;
  const std::string other_value_;
  mutable std::shared_mutex mu_;
  std::map<std::string, std::unique_ptr<std::atomic<uint64_t>>, std::less<>> series_;
  std::atomic<uint64_t> other_{0};
  std::atomic<bool> other_used_{false};
};

// The collectors /metrics calls, in the order they were added.
class Registry {
 public:
  // Writes some families; called on the scraping thread (an I/O thread), so
  // it must be quick and must not block on the engine thread: read atomics
  // or a stats snapshot. Must not call the registry.
  using Collector = std::function<void(ExpositionWriter&)>;

  // What a collector reads must stay alive while the registry may scrape.
  void add(Collector collector);
  // The exposition text of every collector's families.
  std::string scrape() const;

 private:
  mutable std::shared_mutex mu_;
  std::vector<Collector> collectors_;
};

// The Content-Type of the text format.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace lg::metrics
