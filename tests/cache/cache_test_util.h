// Helpers shared by the prefix cache tests (also compiled into the
// ThreadSanitizer test): temp dirs and one simulated request over a
// FakeLatentPool.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cache/prefix_cache.h"
#include "engine/sequence_blocks.h"
#include "tests/support/fake_latent_pool.h"

namespace lg::cache::testing {

using lg::testing::FakeLatentPool;
using lg::testing::smallLayout;

class ScopedTempDir {
 public:
  ScopedTempDir() {
    char tmpl[] = "/tmp/lg_cache_test_XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The installation secret of every test cache (one fixed key, so stores
// written by one test process are read back by another).
inline std::shared_ptr<const CacheSecret> testSecret() {
  static const auto secret = std::make_shared<const CacheSecret>(CacheSecret::fromBytesForTest("test secret"));
  return secret;
}

// A team namespace for tests (the ids used here are valid).
inline TeamNamespace team(std::string_view id) { return TeamNamespace::ofTeam(id).value(); }
inline SharedNamespace shared(std::string_view name) { return SharedNamespace::named(name).value(); }

// The content key of each whole block as computed by team `computed_by`. Real
// latents depend on the tokens only; the fake's also depend on the team that
// computed them, so a block that crossed from one team to another (other than
// through a shared namespace the reader was granted) is detected as wrong.
inline std::vector<Digest> contentKeys(const FakeLatentPool& pool, std::string_view computed_by,
                                       std::span<const int32_t> ids) {
  const int bt = pool.layout().block_tokens;
  std::vector<int32_t> padded(ids.begin(), ids.end());
  padded.resize((ids.size() + bt - 1) / bt * bt, -1);  // the partial last block gets a key too
  return chainBlockKeys(computed_by, sha256("content"), padded, bt);
}

struct RequestResult {
  int32_t cached_tokens = 0;
  int32_t tier0_blocks = 0;
  int32_t disk_blocks = 0;
  bool served_right_blocks = true;  // every reused block held latents the team may read
  RestoreChoice decision = RestoreChoice::kNone;
  LookupMisses misses;  // why the blocks after the hit missed
};

// One request of team `team_id`: acquire, adopt the hit blocks, "compute" the
// rest, publish. A reused block must hold what `team_id` computed, or what a
// team in `may_read_from` computed (the publishers of the shared namespaces
// the team was granted).
inline RequestResult runRequest(PrefixCache& cache, FakeLatentPool& pool, std::string_view team_id,
                                std::span<const int32_t> ids, const LookupOptions& options = {},
                                const std::vector<std::string>& may_read_from = {}) {
  RequestResult r;
  PrefixLease lease = cache.acquire(team(team_id), ids, options);
  r.cached_tokens = lease.cachedTokens();
  r.tier0_blocks = lease.tier0Blocks();
  r.disk_blocks = lease.diskBlocks();
  r.decision = lease.decision().choice;
  r.misses = lease.misses();
  engine::SequenceBlocks seq(pool, 1 << 20);
  seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  const std::vector<Digest> content = contentKeys(pool, team_id, ids);
  std::vector<std::vector<Digest>> allowed;
  for (const std::string& other : may_read_from) allowed.push_back(contentKeys(pool, other, ids));
  for (int32_t i = 0; i < lease.hitBlocks(); ++i) {
    const auto b = static_cast<size_t>(i);
    bool ok = pool.holds(seq.blocks()[b], content[b]);
    for (const auto& keys : allowed) ok = ok || pool.holds(seq.blocks()[b], keys[b]);
    if (!ok) r.served_right_blocks = false;
  }
  if (!seq.reserve(static_cast<int32_t>(ids.size())).isOk()) {
    r.served_right_blocks = false;  // pool exhausted: reported as a failure to the test
    return r;
  }
  for (size_t i = static_cast<size_t>(lease.hitBlocks()); i < seq.blocks().size(); ++i) {
    pool.compute(seq.blocks()[i], content[i]);
  }
  seq.commit(static_cast<int32_t>(ids.size()) - seq.length());
  if (!lease.publish(seq.blocks(), seq.length()).isOk()) r.served_right_blocks = false;
  return r;
}

inline std::vector<int32_t> tokens(int32_t n, int32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint32_t x = static_cast<uint32_t>(seed) * 2654435761u + 1;
  for (auto& t : v) {
    x = x * 1103515245u + 12345u;
    t = static_cast<int32_t>((x >> 8) % 1000);
  }
  return v;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace lg::cache::testing
