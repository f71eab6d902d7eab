#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <mutex>

#include "common/utf8.h"

namespace lg::metrics {

namespace {

bool nameChar(char c, bool first, bool colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

std::string validUtf8(std::string_view text) {
  if (utf8::isValid(text)) return std::string(text);
  std::string out;
  utf8::appendLossy(out, text);
  return out;
}

void appendLabels(std::string& out, const Labels& labels, const Label* extra) {
  if (labels.empty() && extra == nullptr) return;
  out += '{';
  bool first = true;
  auto one = [&](const Label& l) {
    if (!first) out += ',';
    first = false;
    out += l.name;
    out += "=\"";
    out += escapeLabelValue(l.value);
    out += '"';
  };
  for (const Label& l : labels) one(l);
  if (extra != nullptr) one(*extra);
  out += '}';
}

}  // namespace

std::string_view metricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

bool validMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!nameChar(name[i], i == 0, true)) return false;
  }
  return true;
}

bool validLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!nameChar(name[i], i == 0, false)) return false;
  }
  return true;
}

std::string escapeLabelValue(std::string_view value) {
  const std::string text = validUtf8(value);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string escapeHelp(std::string_view help) {
  const std::string text = validUtf8(help);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string formatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  return std::string(buf, end);
}

// ------------------------------------------------------------ ExpositionWriter

bool ExpositionWriter::family(std::string_view name, std::string_view help, MetricType type) {
  current_.clear();
  const bool counter_name_ok = type != MetricType::kCounter || name.ends_with("_total");
  if (!validMetricName(name) || !counter_name_ok || written_.contains(name)) {
    ++dropped_;
    return false;
  }
  written_.emplace(name);
  current_ = std::string(name);
  current_type_ = type;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += escapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += metricTypeName(type);
  out_ += '\n';
  return true;
}

bool ExpositionWriter::checkSample(bool histogram, const Labels& labels) {
  bool ok = !current_.empty() && (current_type_ == MetricType::kHistogram) == histogram;
  for (size_t i = 0; ok && i < labels.size(); ++i) {
    ok = validLabelName(labels[i].name) && !(histogram && labels[i].name == "le");
    for (size_t j = 0; ok && j < i; ++j) ok = labels[j].name != labels[i].name;
  }
  if (!ok) ++dropped_;
  return ok;
}

void ExpositionWriter::line(std::string_view suffix, const Labels& labels, const Label* extra, std::string_view value) {
  out_ += current_;
  out_ += suffix;
  appendLabels(out_, labels, extra);
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void ExpositionWriter::sample(const Labels& labels, double value) {
  if (checkSample(false, labels)) line("", labels, nullptr, formatValue(value));
}

void ExpositionWriter::sample(const Labels& labels, uint64_t value) {
  if (checkSample(false, labels)) line("", labels, nullptr, std::to_string(value));
}

void ExpositionWriter::sample(const Labels& labels, int64_t value) {
  if (checkSample(false, labels)) line("", labels, nullptr, std::to_string(value));
}

void ExpositionWriter::histogram(const Labels& labels, const Histogram& h) {
  if (!checkSample(true, labels)) return;
  Label le{"le", ""};
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += i < h.counts.size() ? h.counts[i] : 0;
    le.value = formatValue(h.bounds[i]);
    line("_bucket", labels, &le, std::to_string(cumulative));
  }
  if (h.counts.size() > h.bounds.size()) cumulative += h.counts[h.bounds.size()];
  le.value = "+Inf";
  line("_bucket", labels, &le, std::to_string(cumulative));
  line("_sum", labels, nullptr, formatValue(h.sum));
  // The count is the +Inf bucket by definition, whatever `h.count` says.
  line("_count", labels, nullptr, std::to_string(cumulative));
}

void ExpositionWriter::counter(std::string_view name, std::string_view help, uint64_t value) {
  if (family(name, help, MetricType::kCounter)) sample(value);
}

void ExpositionWriter::gauge(std::string_view name, std::string_view help, double value) {
  if (family(name, help, MetricType::kGauge)) sample(value);
}

void ExpositionWriter::gauge(std::string_view name, std::string_view help, int64_t value) {
  if (family(name, help, MetricType::kGauge)) sample(value);
}

void ExpositionWriter::gauge(std::string_view name, std::string_view help, uint64_t value) {
  if (family(name, help, MetricType::kGauge)) sample(value);
}

void ExpositionWriter::histogram(std::string_view name, std::string_view help, const Histogram& h) {
  if (family(name, help, MetricType::kHistogram)) histogram(h);
}

// ------------------------------------------------------------- AtomicHistogram

AtomicHistogram::AtomicHistogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void AtomicHistogram::observe(double v) noexcept {
  if (std::isnan(v)) return;
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  double seen = max_.load(std::memory_order_relaxed);
  while (v > seen && !max_.compare_exchange_weak(seen, v, std::memory_order_relaxed)) {
  }
}

Histogram AtomicHistogram::snapshot() const {
  Histogram h(bounds_);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    h.counts[i] = counts_[i].load(std::memory_order_relaxed);
    h.count += h.counts[i];
  }
  h.sum = sum_.load(std::memory_order_relaxed);
  h.max = max_.load(std::memory_order_relaxed);
  return h;
}

// --------------------------------------------------------- BoundedLabelCounter

BoundedLabelCounter::BoundedLabelCounter(std::string label_name, size_t max_series, std::string other_value)
    : label_name_(std::move(label_name)), max_series_(max_series), other_value_(std::move(other_value)) {}

void BoundedLabelCounter::add(std::string_view label_value, uint64_t amount) {
  if (label_value == other_value_) {
    other_used_.store(true, std::memory_order_relaxed);
    other_.fetch_add(amount, std::memory_order_relaxed);
    return;
  }
  {
    std::shared_lock lock(mu_);
    if (auto it = series_.find(label_value); it != series_.end()) {
      it->second->fetch_add(amount, std::memory_order_relaxed);
      return;
    }
  }
  std::unique_lock lock(mu_);
  if (auto it = series_.find(label_value); it != series_.end()) {
    it->second->fetch_add(amount, std::memory_order_relaxed);
    return;
  }
  if (series_.size() < max_series_) {
    series_.emplace(std::string(label_value), std::make_unique<std::atomic<uint64_t>>(amount));
    return;
  }
  other_used_.store(true, std::memory_order_relaxed);
  other_.fetch_add(amount, std::memory_order_relaxed);
}

std::vector<std::pair<std::string, uint64_t>> BoundedLabelCounter::values() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  {
    std::shared_lock lock(mu_);
    out.reserve(series_.size() + 1);
    for (const auto& [value, count] : series_) out.emplace_back(value, count->load(std::memory_order_relaxed));
  }
  if (other_used_.load(std::memory_order_relaxed)) out.emplace_back(other_value_, other_.load(std::memory_order_relaxed));
  return out;
}

void BoundedLabelCounter::collect(ExpositionWriter& w, std::string_view name, std::string_view help) const {
  if (!w.family(name, help, MetricType::kCounter)) return;
  for (const auto& [value, count] : values()) w.sample(Labels{{label_name_, value}}, count);
}

// -------------------------------------------------------------------- Registry

void Registry::add(Collector collector) {
  std::unique_lock lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string Registry::scrape() const {
  ExpositionWriter w;
  std::shared_lock lock(mu_);
  for (const Collector& c : collectors_) c(w);
  return w.take();
}

}  // namespace lg::metrics
