#include "cache/write_back.h"

#include <utility>

#include "cache/cache_log.h"
#include "cache/pool_latents.h"
#include "common/check.h"

namespace lg::cache {

WriteBack::WriteBack(DiskTier& disk, const engine::LatentLayout& layout, const Digest& model,
                     const WriteBackOptions& options, WriteFailureCallback on_failed)
    : disk_(disk),
      layout_(layout),
      geometry_{static_cast<uint32_t>(layout.layers), static_cast<uint32_t>(layout.block_tokens),
                static_cast<uint32_t>(layout.latent_dim)},
      model_(model),
      options_(options),
      on_failed_(std::move(on_failed)) {
  // Every stored block is authenticated: a writer without the key is a bug.
  LG_CHECK(options_.secret != nullptr, "WriteBack needs the cache secret");
  thread_ = std::thread([this] { run(); });
}

WriteBack::~WriteBack() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

bool WriteBack::tryPush(WriteBackItem item) {
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= options_.capacity_blocks || stop_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    queue_.push_back(std::move(item));
    ++pushed_;
  }
  work_cv_.notify_one();
  return true;
}

void WriteBack::push(WriteBackItem item) {
  {
    std::unique_lock lock(mu_);
    space_cv_.wait(lock, [&] { return queue_.size() < options_.capacity_blocks || stop_; });
    if (stop_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(item));
    ++pushed_;
  }
  work_cv_.notify_one();
}

void WriteBack::drain() {
  std::unique_lock lock(mu_);
  const uint64_t target = pushed_;
  space_cv_.wait(lock, [&] { return done_ >= target; });
}

void WriteBack::setPausedForTest(bool paused) {
  {
    std::lock_guard lock(mu_);
    paused_ = paused;
  }
  work_cv_.notify_all();
}

void WriteBack::run() {
  std::vector<WriteBackItem> batch;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return (!queue_.empty() && !paused_) || stop_; });
      if (queue_.empty()) return;  // stopping, nothing left
      while (!queue_.empty() && batch.size() < options_.batch_blocks) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    space_cv_.notify_all();
    writeBatch(batch);
    {
      std::lock_guard lock(mu_);
      done_ += batch.size();
    }
    batch.clear();
    space_cv_.notify_all();
  }
}

void WriteBack::writeBatch(std::vector<WriteBackItem>& batch) {
  // Encoding (conversion + checksum) runs here, off the request threads.
  std::vector<std::pair<Digest, std::string>> values;
  values.reserve(batch.size());
  std::vector<Digest> tags;  // per value: its namespace tag (DiskTier::purge finds blocks by it)
  std::vector<Digest> failed;
  // Per value: its item, which the disk tier's sink is told about once stored.
  std::vector<const WriteBackItem*> encoded;
  encoded.reserve(batch.size());
  std::vector<float> f32(geometry_.values());
  uint64_t bytes = 0;
  for (WriteBackItem& item : batch) {
    if (item.latents.size() != layout_.blockBytes() || item.ids.size() != geometry_.block_tokens) {
      // A caller bug; never store a malformed block.
      cacheLog()->warn("latent write-back: malformed block {} ({} latent bytes, {} ids); not written",
                       item.key.hex().substr(0, 16), item.latents.size(), item.ids.size());
      failed.push_back(item.key);
      continue;
    }
    poolToF32(layout_, item.latents, f32);
    const BlockIdentity identity{item.key, model_, item.ns_tag, item.ids};
    values.emplace_back(item.key, encodeBlock(geometry_, identity, f32, options_.stored_dtype, *options_.secret));
    tags.push_back(item.ns_tag);
    encoded.push_back(&item);
    bytes += values.back().second.size();
  }
  BlockEventSink* events = disk_.blockEvents();
  auto announce = [&](size_t i) {
    const WriteBackItem& item = *encoded[i];
    events->blockStored(BlockTier::kDisk, item.key, item.has_parent ? &item.parent : nullptr, item.ids);
  };
  Status s = events != nullptr ? disk_.putBatch(values, tags, announce) : disk_.putBatch(values, tags);
  if (s.isOk()) {
    written_.fetch_add(values.size(), std::memory_order_relaxed);
    written_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  } else {
    // The disk tier logged the condition once when it began; not per batch.
    cacheLog()->debug("latent write-back of {} blocks failed: {}", values.size(), s.toString());
    for (const auto& [key, value] : values) failed.push_back(key);
  }
  errors_.fetch_add(failed.size(), std::memory_order_relaxed);
  if (!failed.empty() && on_failed_) on_failed_(failed);
  disk_.enforceLimits();
}

WriteBackStats WriteBack::stats() const {
  WriteBackStats s;
  {
    std::lock_guard lock(mu_);
    s.queue_depth = queue_.size();
    s.queued_blocks = pushed_;
  }
  s.written_blocks = written_.load(std::memory_order_relaxed);
  s.written_bytes = written_bytes_.load(std::memory_order_relaxed);
  s.dropped_blocks = dropped_.load(std::memory_order_relaxed);
  s.write_errors = errors_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace lg::cache
