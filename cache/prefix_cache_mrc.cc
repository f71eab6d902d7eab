// Part of PrefixCache (prefix_cache.h): the miss-ratio curves of each tier
// (miss_ratio_curve.h; docs/cache.md, "What more cache would buy"). A
// completed lookup reports its block accesses: tier 0's curve hears every
// full block of the prompt, the disk tier's those past the tier-0 hit (the
// accesses tier 0 missed). The sampling test is a hash comparison per block
// without a lock; only sampled blocks take the curve's own mutex, never mu_.
#include <algorithm>
#include <cmath>

#include "cache/prefix_cache.h"
#include "cache/prefix_cache_internal.h"

namespace lg::cache {
namespace {

// Half today's size holds MissRatioCurve::kMinSampledBelow sampled keys.
double autoRate(uint64_t today_blocks) {
  if (today_blocks == 0) return 1.0;
  return std::clamp(2.0 * MissRatioCurve::kMinSampledBelow / static_cast<double>(today_blocks), 1e-6, 1.0);
}

}  // namespace

void PrefixCache::setUpCurves() {
  if (!options_.mrc_enabled) return;
  mrc_started_ms_ = steadyMillis();
  mrc_tier0_blocks_ = static_cast<uint64_t>(allocator_.capacity());
  if (options_.tier0_budget_bytes > 0 && block_bytes_ > 0) {
    mrc_tier0_blocks_ = std::min<uint64_t>(mrc_tier0_blocks_, options_.tier0_budget_bytes / block_bytes_);
  }
  auto options = [&](uint64_t today) {
    MissRatioCurveOptions o;
    o.sampling_rate = options_.mrc_sampling_rate > 0 ? options_.mrc_sampling_rate : autoRate(today);
    o.max_samples = options_.mrc_max_samples;
    return o;
  };
  mrc_tier0_ = std::make_unique<MissRatioCurve>(options(mrc_tier0_blocks_));
  if (disk_ != nullptr) {
    const size_t stored = storedBlockBytes(geometry_, options_.stored_dtype);
    mrc_disk_blocks_ = stored > 0 ? disk_->maxBytes() / stored : 0;
    mrc_disk_ = std::make_unique<MissRatioCurve>(options(mrc_disk_blocks_));
  }
}

void PrefixCache::recordAccesses(const LeaseState& s) {
  if (mrc_tier0_ == nullptr || s.n_full <= 0) return;
  // The blocks this request used, as the index names them: the hit part
  // under the namespace it was found in (a shared one, maybe), the rest
  // under the team's own, where it is published.
  std::span<const Digest> keys(s.keys.data(), static_cast<size_t>(s.n_full));
  std::vector<Digest> mixed;
  if (s.hit_keys != &s.keys && s.hit_blocks > 0) {
    mixed.assign(s.keys.begin(), s.keys.begin() + s.n_full);
    std::copy(s.hit_keys->begin(), s.hit_keys->begin() + s.hit_blocks, mixed.begin());
    keys = mixed;
  }
  mrc_tier0_->record(keys);
  if (mrc_disk_ != nullptr && s.tier0_blocks < s.n_full) mrc_disk_->record(keys.subspan(static_cast<size_t>(s.tier0_blocks)));
}

MrcTierStats PrefixCache::curveStats(const MissRatioCurve& curve, uint64_t today_blocks, uint64_t block_bytes,
                                     std::span<const double> sizes, std::vector<double>* hit_ratio) const {
  std::vector<double> all(kMrcSizeFactors.size());
  for (size_t i = 0; i < kMrcSizeFactors.size(); ++i) all[i] = kMrcSizeFactors[i] * static_cast<double>(today_blocks);
  all.insert(all.end(), sizes.begin(), sizes.end());
  const MissRatioCurveSnapshot snap = curve.snapshot(all);
  MrcTierStats t;
  t.present = true;
  t.today_blocks = today_blocks;
  t.block_bytes = block_bytes;
  t.block_tokens = block_tokens_;
  t.counted_ms = std::max<int64_t>(0, steadyMillis() - mrc_started_ms_);
  t.sampling_rate = snap.sampling_rate;
  t.reliable_from_blocks = snap.reliable_from_blocks;
  t.accesses = snap.accesses;
  t.sampled_accesses = snap.sampled_accesses;
  t.samples = snap.samples;
  t.memory_bytes = snap.memory_bytes;
  for (size_t i = 0; i < kMrcSizeFactors.size(); ++i) t.hit_ratio[i] = snap.hit_ratio[i];
  if (hit_ratio != nullptr) hit_ratio->assign(snap.hit_ratio.begin() + kMrcSizeFactors.size(), snap.hit_ratio.end());
  return t;
}

std::vector<MrcCurve> PrefixCache::missRatioCurves() const {
  std::vector<MrcCurve> out;
  auto one = [&](const char* tier, const MissRatioCurve& curve, uint64_t today, uint64_t block_bytes) {
    MrcCurve c;
    c.tier = tier;
    std::vector<double> factors, sizes, ratios;
    for (int i = -16; i <= 16; ++i) {
      factors.push_back(std::exp2(i / 4.0));
      sizes.push_back(std::round(factors.back() * static_cast<double>(today)));
    }
    c.stats = curveStats(curve, today, block_bytes, sizes, &ratios);
    for (size_t i = 0; i < sizes.size(); ++i) {
      MrcCurvePoint p;
      p.size_factor = factors[i];
      p.blocks = static_cast<uint64_t>(sizes[i]);
      p.bytes = p.blocks * block_bytes;
      p.hit_ratio = ratios[i];
      p.reliable = sizes[i] >= c.stats.reliable_from_blocks;
      c.points.push_back(p);
    }
    out.push_back(std::move(c));
  };
  if (mrc_tier0_ != nullptr) one("tier0", *mrc_tier0_, mrc_tier0_blocks_, block_bytes_);
  if (mrc_disk_ != nullptr) {
    one("disk", *mrc_disk_, mrc_disk_blocks_, storedBlockBytes(geometry_, options_.stored_dtype));
  }
  return out;
}

}  // namespace lg::cache
