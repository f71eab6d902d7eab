// WriteBack: the asynchronous writer that moves latent blocks from tier 0 to
// the disk tier. Evicted blocks (write-back) and hot blocks (write-through)
// are exported by the caller and queued here; one writer thread encodes them
// (block_codec.h, in the configured stored dtype) and writes them to RocksDB
// in batches, then lets the disk tier enforce its byte cap and expiry.
//
// The queue is bounded (in blocks). tryPush never blocks a request: when the
// queue is full the block is dropped and counted (it is simply recomputed if
// it is needed again). push blocks and is for shutdown paths only
// (PrefixCache::persistAll).
//
// Blocks that could not be written (the disk tier failed or refused the
// batch, e.g. on a full disk; or a malformed item) are counted and reported
// to the on_failed callback, so that the prefix cache stops taking them for
// stored and writes them again later. The disk tier logs a failing disk once
// per episode; the writer keeps running meanwhile.
//
// Thread-safety: all methods may be called concurrently. The destructor
// writes what is queued, then joins the thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "cache/block_codec.h"
#include "cache/disk_tier.h"
#include "cache/fingerprint.h"
#include "engine/latent_pool.h"

namespace lg::cache {

struct WriteBackItem {
  Digest key;
  Digest ns_tag;                 // keyed tag of the block's namespace (block_codec.h)
  std::vector<int32_t> ids;      // the block's block_tokens token ids
  std::vector<uint8_t> latents;  // the block as LatentPool::exportBlocks wrote it (pool layout and dtype)
  // The block before it in its prompt (has_parent false for a prompt's
  // first): what the disk tier's sink reports with the block (block_events.h).
  Digest parent;
  bool has_parent = false;
};

struct WriteBackOptions {
  size_t capacity_blocks = 64;  // queued blocks; beyond this tryPush drops
  size_t batch_blocks = 16;     // blocks per RocksDB write batch
  StoredDType stored_dtype = StoredDType::kF32;
  std::shared_ptr<const CacheSecret> secret;  // authenticates every stored block; required
};

struct WriteBackStats {
  uint64_t queue_depth = 0;     // blocks waiting now
  uint64_t queued_blocks = 0;   // accepted so far
  uint64_t written_blocks = 0;
  uint64_t written_bytes = 0;   // encoded bytes handed to RocksDB
  uint64_t dropped_blocks = 0;  // refused because the queue was full
  uint64_t write_errors = 0;    // blocks not written: the disk tier failed or refused them, or malformed
};

// Called on the writer thread, without the writer's lock, with the keys of
// blocks that were not written.
using WriteFailureCallback = std::function<void(std::span<const Digest> keys)>;

class WriteBack {
 public:
  // `disk` must outlive this object. `model` is the latent identity written
  // into every stored header. `on_failed` (may be empty) hears about blocks
  // that were not written.
  WriteBack(DiskTier& disk, const engine::LatentLayout& layout, const Digest& model, const WriteBackOptions& options,
            WriteFailureCallback on_failed = {});
  ~WriteBack();
  WriteBack(const WriteBack&) = delete;
  WriteBack& operator=(const WriteBack&) = delete;

  // Queues a block unless the queue is full; false means dropped (counted).
  bool tryPush(WriteBackItem item);
  // Queues a block, waiting for room.
  void push(WriteBackItem item);
  // Returns once everything queued before the call has been written (do not
  // call while paused).
  void drain();
  // Holds the writer between batches (tests of a full queue and of a crash
  // with a backlog).
  void setPausedForTest(bool paused);

  WriteBackStats stats() const;
  StoredDType storedDType() const { return options_.stored_dtype; }
  const BlockGeometry& geometry() const { return geometry_; }

 private:
  void run();
  void writeBatch(std::vector<WriteBackItem>& batch);

  DiskTier& disk_;
  const engine::LatentLayout layout_;
  const BlockGeometry geometry_;
  const Digest model_;
  const WriteBackOptions options_;
  const WriteFailureCallback on_failed_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;   // items arrived or stopping
  std::condition_variable space_cv_;  // room in the queue, or a batch finished
  std::deque<WriteBackItem> queue_;   // guarded by mu_
  uint64_t pushed_ = 0;               // guarded by mu_: items accepted
  uint64_t done_ = 0;                 // guarded by mu_: items written or failed
  bool stop_ = false;                 // guarded by mu_
  bool paused_ = false;               // guarded by mu_
  std::atomic<uint64_t> written_{0}, written_bytes_{0}, dropped_{0}, errors_{0};
  std::thread thread_;
};

}  // namespace lg::cache
