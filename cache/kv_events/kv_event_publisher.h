// KvEventPublisher: the prefix cache's block events (cache/block_events.h) as
// vLLM's KV events on ZMQ, for prefix-aware routers (llm-d's precise prefix
// scorer, Dynamo, SGLang's router; docs/deploy.md, "Routing by prefix").
//
// Wire (kv_event_encoding.h; vLLM's ZmqEventPublisher): a PUB socket sends
// `[topic, 8-byte big-endian sequence number, msgpack batch]`; the sequence
// starts at 0 with each process, and the first batch is `AllBlocksCleared`,
// so a subscriber that sees the sequence go back knows the replica restarted
// with an empty pool. An optional ROUTER socket answers `[identity, "",
// start_seq]` with every buffered `[identity, "", seq, batch]` from start_seq
// on, then `[identity, "", ffffffffffffffff, ""]`. Every
// reannounce_interval, what tier 0 holds is published again as BlockStored,
// roots first (PrefixCache::announceResident), for subscribers that joined
// late (llm-d does not replay).
//
// Never blocks the cache: blockStored/blockRemoved append to a bounded queue
// (dropped and counted when full; a later re-announcement repairs a dropped
// BlockStored) and wake the publisher's thread through an eventfd; that
// thread alone owns the sockets, waits 200 µs after a wake-up so that a
// request's blocks (reported one by one) are queued together, merges
// consecutive blocks of one chain into one BlockStored as vLLM does per
// request, encodes and sends.
//
// Privacy: events carry the prompts' token ids (routers recompute their keys
// from them), so the endpoints must be reachable by the router only.
//
// Thread-safety: the sink methods from any thread; the rest from one.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_events.h"
#include "cache/kv_events/kv_event_encoding.h"
#include "common/metrics.h"
#include "common/status.h"

namespace lg::cache::kv_events {

struct PublisherOptions {
  std::string endpoint;         // PUB: bound or connected (see bind)
  bool bind = false;            // false: vLLM's rule (binds for '*', '::', ipc://, inproc://; else connects)
  std::string replay_endpoint;  // ROUTER, bound; empty: no replay
  std::string topic;
  EventEncoding encoding = EventEncoding::kArray;
  size_t buffer_steps = 10000;       // batches kept for replay
  size_t max_queue_events = 100000;  // blocks waiting; more are dropped
  int hwm = 100000;
  std::chrono::milliseconds reannounce_interval{30000};  // 0: never
  int32_t block_size = 64;
  std::string pool_medium = "CPU";  // "GPU" on the CUDA backend
  std::string disk_medium = "DISK";
};

struct PublisherStats {
  uint64_t batches = 0;  // messages published (the next sequence number)
  uint64_t blocks_stored = 0, blocks_removed = 0, all_cleared = 0;  // blocks per event type, as queued
  uint64_t dropped = 0;  // blocks not published: the queue was full
  uint64_t queue_depth = 0;
  uint64_t reannounced = 0;  // blocks published again by re-announcement
  uint64_t replays = 0, bad_replays = 0;
};

class KvEventPublisher final : public BlockEventSink {
 public:
  // Opens the sockets and starts the thread; the first batch it sends is
  // AllBlocksCleared. `reannounce` (may be empty) publishes what the cache
  // holds through this sink and returns how many blocks.
  static Result<std::unique_ptr<KvEventPublisher>> start(const PublisherOptions& options,
                                                         std::function<size_t()> reannounce);
  ~KvEventPublisher() override;  // sends what is queued, then closes
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  void blockStored(BlockTier tier, const Digest& key, const Digest* parent, std::span<const int32_t> token_ids) override;
  void blockRemoved(BlockTier tier, const Digest& key) override;

  PublisherStats stats() const;
  void collect(metrics::ExpositionWriter& w) const;  // latentgate_kv_events_*
  const std::string& topic() const { return options_.topic; }

 private:
  explicit KvEventPublisher(const PublisherOptions& options, std::function<size_t()> reannounce);
  Status open();
  void push(KvEvent event);
  void run();
  void publishQueued();
  void publish(std::vector<KvEvent>& events);
  void answerReplay();
  const std::string& medium(BlockTier tier) const;

  const PublisherOptions options_;
  const std::function<size_t()> reannounce_;
  void* context_ = nullptr;
  void* pub_ = nullptr;
  void* router_ = nullptr;
  int wake_fd_ = -1;  // eventfd: events queued, or stopping

  mutable std::mutex mu_;
  std::vector<KvEvent> queue_;  // guarded by mu_
  bool stopping_ = false;       // guarded by mu_

  // The publisher thread's own.
  uint64_t next_seq_ = 0;
  std::deque<std::pair<uint64_t, std::string>> replay_;  // (seq, batch), at most buffer_steps

  std::atomic<uint64_t> batches_{0}, stored_{0}, removed_{0}, cleared_{0}, dropped_{0}, reannounced_{0};
  std::atomic<uint64_t> replays_{0}, bad_replays_{0};
  std::thread thread_;
};

}  // namespace lg::cache::kv_events
