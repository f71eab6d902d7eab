// The model fingerprint: which checkpoint (architecture, weights, tokenizer)
// and which engine numerics a cached latent block belongs to. It is mixed into
// every block key (fingerprint.h) and written into every stored block header
// (block_codec.h), so a block computed by another model, another revision of
// the same model or an engine whose latents differ is never served.
//
// What fingerprintModel(dir) covers, in this order (all length-delimited):
//   - a domain tag and the engine's kLatentFormatVersion (latent_pool.h);
//   - config.json (every byte);
//   - tokenizer files if present (tokenizer.json, tokenizer_config.json,
//     tokenizer.model, special_tokens_map.json; every byte; absence is hashed
//     too, so adding one changes the fingerprint);
//   - model.safetensors.index.json if present (every byte), then each weight
//     file the loader reads (the shards it names, sorted, or model.safetensors):
//     file name, file size, the whole safetensors header (tensor names,
//     dtypes, shapes, offsets, metadata) and a deterministic sample of the
//     tensor bytes: the whole data section when it is at most
//     `whole_data_limit` bytes, otherwise its first and last `edge_bytes` and
//     `sample_windows` windows of `window_bytes` at offsets derived from the
//     header's hash.
// Cost: a few hundred KB of reads per shard whatever its size (about 40 MB
// for a 163-shard DeepSeek-V3 checkpoint), so restarts stay fast. The price
// of sampling: an in-place edit of weight bytes outside the sample, keeping
// every header and size, is not detected by the fingerprint. Two things
// close that gap: `full` (cache.fingerprint = full) hashes every byte
// (docs/benchmarks.md has its cost), and a running server compares each
// file's identity (inode, size, mtime: Model::checkFilesUnchanged) with the
// file it mapped, at start and on a timer, and stops serving cached blocks
// under the old identity as soon as one differs (PrefixCache::guardIdentity).
// What neither can notice: an edit that restores the file's size and mtime
// and stays outside the sample (sampled mode), between two checks.
//
// fingerprintModel(const Model&) hashes the very bytes the engine computes
// with: the config.json text it parsed and the weight files as it mapped
// them, so a file replaced between loading and fingerprinting cannot give
// the loaded weights another file's identity.
//
// Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/block_codec.h"
#include "cache/fingerprint.h"
#include "common/status.h"
#include "engine/latent_pool.h"

namespace lg::engine {
class Model;
}

namespace lg::cache {

struct ModelFingerprintOptions {
  uint64_t whole_data_limit = uint64_t{8} << 20;  // data sections up to 8 MiB are hashed whole
  uint64_t edge_bytes = uint64_t{64} << 10;       // else: first and last 64 KiB...
  int sample_windows = 64;                        // ...and 64 windows...
  uint64_t window_bytes = 4096;                   // ...of 4 KiB
  bool full = false;                              // hash every byte of every data section
};

struct ModelFingerprint {
  Digest digest;
  uint64_t bytes_read = 0;         // file bytes hashed (for the log and the benchmark)
  std::vector<std::string> files;  // the files covered, in hashing order
};

// Fingerprints the checkpoint in `dir` (the layout Model::load reads). Errors:
// config.json or a weight file missing or unreadable, a malformed index or
// safetensors header (NotFound / DataLoss naming the file).
Result<ModelFingerprint> fingerprintModel(const std::string& dir, const ModelFingerprintOptions& options = {});
// The same fingerprint from a loaded model's own bytes (equal to the above
// when the files did not change in between).
Result<ModelFingerprint> fingerprintModel(const engine::Model& model, const ModelFingerprintOptions& options = {});

// The identity cached latents are keyed and stored under: the checkpoint's
// fingerprint plus everything that changes the latents a hit returns: the
// engine's latent format version, the pool's numerics class (which backend
// and kernels computed them), its dtype and geometry (layers, latent width,
// block size), and the stored dtype (lossy int8 or bf16 blocks are never
// served to a cache that stores f32, and the reverse). Switching any of these
// makes every old block a miss; the old blocks then age out of the store.
Digest latentIdentity(const Digest& model, const engine::LatentPool& pool, StoredDType stored);

}  // namespace lg::cache
