// The prefix cache's metric families (latentgate_cache_*: lookups, hit and
// miss tokens by tier, blocks and bytes held, eviction, in-flight waits,
// write-back, restores, rejected blocks, the disk tier's state, the cost
// model; docs/metrics.md lists them), written from one CacheStats snapshot.
// The cache owns its families as billing owns the ledger's
// (billing/ledger_metrics.h); the serving core writes them in the collector
// that takes its snapshots (serving/serving_metrics.h, addEngineCollectors).
//
// Labels carry only tier names, outcomes and enum names: never paths or
// error text (CacheStats::disk_error stays out of the exposition).
//
// Thread-safety: a pure function of the snapshot.
#pragma once

#include "cache/cache_stats.h"
#include "common/metrics.h"

namespace lg::cache {

void collectCacheStats(metrics::ExpositionWriter& w, const CacheStats& s);
// The miss-ratio curves' families (latentgate_cache_mrc_*), part of the above.
void collectMissRatioCurves(metrics::ExpositionWriter& w, const CacheStats& s);

}  // namespace lg::cache
