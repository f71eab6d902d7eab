// Histogram: counts of observations in fixed buckets, as Prometheus exposes
// them (cumulative `le` buckets, a sum and a count), plus the largest value
// seen. Not thread-safe: the owner guards it (the scheduler updates its
// histograms under its stats mutex and hands out copies).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace lg {

struct Histogram {
  Histogram() = default;
  explicit Histogram(std::vector<double> upper_bounds)
      : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

  // Buckets from `first` growing by `factor` (exclusive upper bounds), then +Inf.
  static Histogram exponential(double first, double factor, int buckets) {
    std::vector<double> b;
    double v = first;
    for (int i = 0; i < buckets; ++i, v *= factor) b.push_back(v);
    return Histogram(std::move(b));
  }

  void observe(double v) {
    const size_t i = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
    ++counts[i];
    sum += v;
    ++count;
    max = std::max(max, v);
  }

  // The value below which a fraction q of observations fall, interpolated
  // inside its bucket (as Prometheus' histogram_quantile does).
  double quantile(double q) const {
    if (count == 0) return 0;
    const double rank = q * static_cast<double>(count);
    uint64_t seen = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      if (static_cast<double>(seen + counts[i]) >= rank && counts[i] > 0) {
        const double lo = i == 0 ? 0 : bounds[i - 1];
        const double hi = i < bounds.size() ? bounds[i] : max;
        return lo + (hi - lo) * (rank - static_cast<double>(seen)) / static_cast<double>(counts[i]);
      }
      seen += counts[i];
    }
    return max;
  }

  std::vector<double> bounds;    // upper bounds, increasing
  std::vector<uint64_t> counts;  // per bucket (not cumulative); the last is +Inf
  double sum = 0;
  uint64_t count = 0;
  double max = 0;
};

}  // namespace lg
