#include "cache/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace lg::cache {
namespace {

double ewma(double old, double sample, double alpha, int64_t count) {
  return count == 0 ? sample : old + alpha * (sample - old);
}

}  // namespace

std::string_view restorePolicyName(RestorePolicy policy) {
  switch (policy) {
    case RestorePolicy::kAuto: return "auto";
    case RestorePolicy::kAlways: return "always";
    case RestorePolicy::kNever: return "never";
  }
  return "?";
}

std::string_view restoreChoiceName(RestoreChoice choice) {
  switch (choice) {
    case RestoreChoice::kNone: return "none";
    case RestoreChoice::kRestore: return "restore";
    case RestoreChoice::kRecompute: return "recompute";
  }
  return "?";
}

CostModel::CostModel(const CostModelOptions& options) : options_(options) {
  e_.restore_bandwidth = options.prior_restore_bandwidth;
  e_.restore_latency = options.prior_restore_latency;
}

double CostModel::pairs(int64_t begin, int64_t end) {
  // sum_{p=begin}^{end-1} (p + 1): query p attends to keys 0..p.
  if (end <= begin) return 0;
  const double b = static_cast<double>(begin), e = static_cast<double>(end);
  return (e * (e + 1) - b * (b + 1)) / 2;
}

void CostModel::observeRestore(uint64_t bytes, double seconds) {
  if (bytes == 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  std::lock_guard lock(mu_);
  // Work in MB so the second moments stay well inside double precision.
  const double b = static_cast<double>(bytes) * 1e-6;
  m_.b = ewma(m_.b, b, options_.alpha, e_.restores);
  m_.s = ewma(m_.s, seconds, options_.alpha, e_.restores);
  m_.bb = ewma(m_.bb, b * b, options_.alpha, e_.restores);
  m_.bs = ewma(m_.bs, b * seconds, options_.alpha, e_.restores);
  ++e_.restores;
  fitRestoreLocked();
}

void CostModel::fitRestoreLocked() {
  const double var = m_.bb - m_.b * m_.b;
  const double cov = m_.bs - m_.b * m_.s;
  if (var > 1e-4 * m_.b * m_.b && cov > 0) {
    // seconds = latency + MB x slope, fitted over sizes that differ.
    double slope = cov / var;
    double intercept = m_.s - slope * m_.b;
    if (intercept < 0) {
      intercept = 0;
      slope = m_.s / m_.b;
    }
    e_.restore_latency = intercept;
    e_.restore_bandwidth = 1e6 / slope;
    return;
  }
  // One size only: keep the latency, let the bandwidth explain the rest.
  const double transfer = std::max(m_.s - e_.restore_latency, 0.05 * m_.s);
  e_.restore_bandwidth = m_.b * 1e6 / transfer;
}

void CostModel::observePrefill(int64_t tokens, double pairs, double other_seconds, double attention_seconds) {
  if (tokens <= 0 || other_seconds < 0 || attention_seconds < 0) return;
  std::lock_guard lock(mu_);
  const double per_token = other_seconds / static_cast<double>(tokens);
  const double per_pair = pairs > 0 ? attention_seconds / pairs : e_.per_pair;
  e_.per_token = ewma(e_.per_token, per_token, options_.alpha, e_.prefills);
  e_.per_pair = ewma(e_.per_pair, per_pair, options_.alpha, e_.prefills);
  ++e_.prefills;
}

double CostModel::restoreSecondsLocked(uint64_t bytes) const {
  return e_.restore_latency + static_cast<double>(bytes) / e_.restore_bandwidth;
}

double CostModel::recomputeSecondsLocked(int64_t begin, int64_t end) const {
  if (e_.prefills == 0) return -1;
  return e_.per_token * static_cast<double>(std::max<int64_t>(0, end - begin)) + e_.per_pair * pairs(begin, end);
}

double CostModel::restoreSeconds(uint64_t bytes) const {
  std::lock_guard lock(mu_);
  return restoreSecondsLocked(bytes);
}

double CostModel::recomputeSeconds(int64_t begin, int64_t end) const {
  std::lock_guard lock(mu_);
  return recomputeSecondsLocked(begin, end);
}

Decision CostModel::decide(RestorePolicy policy, uint64_t bytes, int64_t begin, int64_t end) const {
  Decision d;
  if (end <= begin) return d;
  {
    std::lock_guard lock(mu_);
    d.restore_seconds = restoreSecondsLocked(bytes);
    d.recompute_seconds = recomputeSecondsLocked(begin, end);
  }
  switch (policy) {
    case RestorePolicy::kAlways: d.choice = RestoreChoice::kRestore; break;
    case RestorePolicy::kNever: d.choice = RestoreChoice::kRecompute; break;
    case RestorePolicy::kAuto:
      d.choice = (d.recompute_seconds < 0 || d.restore_seconds <= d.recompute_seconds) ? RestoreChoice::kRestore
                                                                                        : RestoreChoice::kRecompute;
      break;
  }
  return d;
}

CostEstimates CostModel::estimates() const {
  std::lock_guard lock(mu_);
  return e_;
}

std::string CostModel::serialize() const {
  std::lock_guard lock(mu_);
  char buf[256];
  std::snprintf(buf, sizeof buf, "v2 %.17g %.17g %.17g %.17g %lld %lld %.17g %.17g %.17g %.17g", e_.restore_bandwidth,
                e_.restore_latency, e_.per_token, e_.per_pair, static_cast<long long>(e_.restores),
                static_cast<long long>(e_.prefills), m_.b, m_.s, m_.bb, m_.bs);
  return buf;
}

Status CostModel::deserialize(std::string_view text) {
  CostEstimates e;
  Moments m;
  long long restores = 0, prefills = 0;
  const std::string s(text.substr(0, 255));
  if (std::sscanf(s.c_str(), "v2 %lg %lg %lg %lg %lld %lld %lg %lg %lg %lg", &e.restore_bandwidth,
                  &e.restore_latency, &e.per_token, &e.per_pair, &restores, &prefills, &m.b, &m.s, &m.bb,
                  &m.bs) != 10 ||
      !std::isfinite(m.b) || !std::isfinite(m.s) || !std::isfinite(m.bb) || !std::isfinite(m.bs) ||
      !(e.restore_bandwidth > 0) || !std::isfinite(e.restore_bandwidth) || !(e.restore_latency >= 0) ||
      !(e.per_token >= 0) || !(e.per_pair >= 0) || !std::isfinite(e.per_token) || !std::isfinite(e.per_pair) ||
      restores < 0 || prefills < 0) {
    return invalidArgument("cost model state is malformed");
  }
  e.restores = restores;
  e.prefills = prefills;
  std::lock_guard lock(mu_);
  e_ = e;
  m_ = m;
  return Status::ok();
}

}  // namespace lg::cache
