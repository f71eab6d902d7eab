#include "cache/kv_events/kv_event_publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <zmq.h>

#include "cache/cache_log.h"

namespace lg::cache::kv_events {
namespace {

using Clock = std::chrono::steady_clock;

// Merged events per message: bounds one message's size when a backlog or a
// re-announcement of a large pool is published at once.
constexpr size_t kMaxEventsPerBatch = 1024;
// How long the thread waits after a wake-up before taking the queue.
constexpr auto kCoalesce = std::chrono::microseconds(200);

// vLLM's ZmqEventPublisher binds when the endpoint names a wildcard or a
// local transport, and connects otherwise (to a router that binds).
bool vllmBinds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0;
}

std::string zmqError(const std::string& what) { return what + ": " + zmq_strerror(zmq_errno()); }

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool sendFrame(void* socket, const std::string& frame, bool more) {
  return zmq_send(socket, frame.data(), frame.size(), (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) >= 0;
}

}  // namespace

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(const PublisherOptions& options,
                                                                  std::function<size_t()> reannounce) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(options, std::move(reannounce)));
  LG_RETURN_IF_ERROR(p->open());
  // Sequence 0 tells every subscriber that this process starts with nothing.
  KvEvent cleared;
  cleared.kind = KvEvent::Kind::kAllBlocksCleared;
  p->push(std::move(cleared));
  p->thread_ = std::thread([raw = p.get()] { raw->run(); });
  return p;
}

KvEventPublisher::KvEventPublisher(const PublisherOptions& options, std::function<size_t()> reannounce)
    : options_(options), reannounce_(std::move(reannounce)) {}

Status KvEventPublisher::open() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return internalError(std::string("kv events: eventfd: ") + std::strerror(errno));
  context_ = zmq_ctx_new();
  if (context_ == nullptr) return internalError(zmqError("kv events: zmq context"));
  pub_ = zmq_socket(context_, ZMQ_PUB);
  if (pub_ == nullptr) return internalError(zmqError("kv events: PUB socket"));
  const int linger_ms = 500;  // what is still unsent at shutdown gets this long
  zmq_setsockopt(pub_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &options_.hwm, sizeof options_.hwm);
  const bool bind = options_.bind || vllmBinds(options_.endpoint);
  if ((bind ? zmq_bind(pub_, options_.endpoint.c_str()) : zmq_connect(pub_, options_.endpoint.c_str())) != 0) {
    return unavailable(zmqError("cache.kv_events.endpoint: cannot " + std::string(bind ? "bind " : "connect ") +
                                options_.endpoint));
  }
  if (!options_.replay_endpoint.empty()) {
    router_ = zmq_socket(context_, ZMQ_ROUTER);
    if (router_ == nullptr) return internalError(zmqError("kv events: ROUTER socket"));
    zmq_setsockopt(router_, ZMQ_LINGER, &linger_ms, sizeof linger_ms);
    // A replay is at most buffer_steps messages; it must not be cut short by
    // the default high-water mark (a ROUTER drops what exceeds it).
    const int unlimited = 0;
    zmq_setsockopt(router_, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    if (zmq_bind(router_, options_.replay_endpoint.c_str()) != 0) {
      return unavailable(zmqError("cache.kv_events.replay_endpoint: cannot bind " + options_.replay_endpoint));
    }
  }
  return Status::ok();
}

KvEventPublisher::~KvEventPublisher() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  if (router_ != nullptr) zmq_close(router_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (context_ != nullptr) zmq_ctx_term(context_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

const std::string& KvEventPublisher::medium(BlockTier tier) const {
  return tier == BlockTier::kPool ? options_.pool_medium : options_.disk_medium;
}

void KvEventPublisher::blockStored(BlockTier tier, const Digest& key, const Digest* parent,
                                   std::span<const int32_t> token_ids) {
  KvEvent e;
  e.kind = KvEvent::Kind::kBlockStored;
  e.block_hashes = {externalBlockHash(key)};
  if (parent != nullptr) e.parent_block_hash = externalBlockHash(*parent);
  e.token_ids.assign(token_ids.begin(), token_ids.end());
  e.block_size = options_.block_size;
  e.medium = medium(tier);
  push(std::move(e));
}

void KvEventPublisher::blockRemoved(BlockTier tier, const Digest& key) {
  KvEvent e;
  e.kind = KvEvent::Kind::kBlockRemoved;
  e.block_hashes = {externalBlockHash(key)};
  e.medium = medium(tier);
  push(std::move(e));
}

void KvEventPublisher::push(KvEvent event) {
  const KvEvent::Kind kind = event.kind;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    if (queue_.size() >= options_.max_queue_events) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    wake = queue_.empty();
    queue_.push_back(std::move(event));
  }
  switch (kind) {
    case KvEvent::Kind::kBlockStored: stored_.fetch_add(1, std::memory_order_relaxed); break;
    case KvEvent::Kind::kBlockRemoved: removed_.fetch_add(1, std::memory_order_relaxed); break;
    case KvEvent::Kind::kAllBlocksCleared: cleared_.fetch_add(1, std::memory_order_relaxed); break;
  }
  if (wake) {
    const uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof one);
  }
}

void KvEventPublisher::run() {
  auto next_reannounce = Clock::now() + options_.reannounce_interval;
  for (;;) {
    zmq_pollitem_t items[2] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {router_, 0, ZMQ_POLLIN, 0}};
    long timeout_ms = 1000;
    if (options_.reannounce_interval.count() > 0 && reannounce_) {
      timeout_ms = std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(next_reannounce - Clock::now()).count());
    }
    const int n = zmq_poll(items, router_ != nullptr ? 2 : 1, timeout_ms);
    if (n < 0 && zmq_errno() != EINTR) {
      cacheLog()->error("kv events: poll failed: {}", zmq_strerror(zmq_errno()));
      break;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof count);
      // The cache reports a request's blocks one at a time, a fraction of a
      // microsecond apart: a moment's wait lets them go out as one
      // BlockStored instead of the first alone.
      std::this_thread::sleep_for(kCoalesce);
    }
    publishQueued();
    if (router_ != nullptr && (items[1].revents & ZMQ_POLLIN)) answerReplay();
    if (options_.reannounce_interval.count() > 0 && reannounce_ && Clock::now() >= next_reannounce) {
      reannounced_.fetch_add(reannounce_(), std::memory_order_relaxed);
      next_reannounce = Clock::now() + options_.reannounce_interval;
      publishQueued();
    }
    std::lock_guard lock(mu_);
    if (stopping_ && queue_.empty()) break;
  }
}

void KvEventPublisher::publishQueued() {
  std::vector<KvEvent> events;
  {
    std::lock_guard lock(mu_);
    events.swap(queue_);
  }
  if (!events.empty()) publish(events);
}

void KvEventPublisher::publish(std::vector<KvEvent>& events) {
  // Consecutive blocks of one chain on one tier become one BlockStored, as
  // vLLM publishes a request's new blocks: hashes in order, the parent of the
  // first, all their tokens.
  std::vector<KvEvent> merged;
  merged.reserve(events.size());
  for (KvEvent& e : events) {
    if (!merged.empty()) {
      KvEvent& last = merged.back();
      if (e.kind == KvEvent::Kind::kBlockStored && last.kind == KvEvent::Kind::kBlockStored &&
          e.medium == last.medium && e.parent_block_hash == last.block_hashes.back()) {
        last.block_hashes.push_back(e.block_hashes.front());
        last.token_ids.insert(last.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
        continue;
      }
      if (e.kind == KvEvent::Kind::kBlockRemoved && last.kind == KvEvent::Kind::kBlockRemoved && e.medium == last.medium) {
        last.block_hashes.push_back(e.block_hashes.front());
        continue;
      }
    }
    merged.push_back(std::move(e));
  }
  for (size_t begin = 0; begin < merged.size(); begin += kMaxEventsPerBatch) {
    const size_t end = std::min(merged.size(), begin + kMaxEventsPerBatch);
    std::string payload = encodeBatch(unixSeconds(), std::span(merged).subspan(begin, end - begin), options_.encoding);
    const uint64_t seq = next_seq_++;
    // Counted before sending, so whoever has received a batch also sees it
    // in stats() (the count is the next sequence number).
    batches_.fetch_add(1, std::memory_order_relaxed);
    // A PUB socket never blocks: past its high-water mark a subscriber misses
    // messages (and sees the gap in the sequence numbers).
    if (!sendFrame(pub_, options_.topic, true) || !sendFrame(pub_, sequenceFrame(seq), true) ||
        !sendFrame(pub_, payload, false)) {
      cacheLog()->debug("kv events: batch {} not sent: {}", seq, zmq_strerror(zmq_errno()));
    }
    if (options_.buffer_steps > 0) {
      replay_.emplace_back(seq, std::move(payload));
      while (replay_.size() > options_.buffer_steps) replay_.pop_front();
    }
  }
}

void KvEventPublisher::answerReplay() {
  for (;;) {
    // Every part of the next message is read (ZMQ delivers a message whole);
    // only the first four are kept, which is enough to refuse any message
    // that is not a replay request.
    std::vector<std::string> frames;
    size_t parts = 0;
    for (int more = 1; more;) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, router_, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        if (parts == 0) return;  // nothing more to read
        break;
      }
      if (frames.size() < 4) frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      ++parts;
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    // [identity, "", start_seq]: what a REQ socket (or a DEALER sending an
    // empty delimiter) delivers through a ROUTER.
    if (parts != 3 || !frames[1].empty() || frames[2].size() != 8) {
      bad_replays_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    uint64_t start = 0;
    for (unsigned char c : frames[2]) start = (start << 8) | c;
    const std::string& identity = frames[0];
    replays_.fetch_add(1, std::memory_order_relaxed);  // before the answer, as batches_
    for (const auto& [seq, payload] : replay_) {
      if (seq < start) continue;
      sendFrame(router_, identity, true);
      sendFrame(router_, std::string(), true);
      sendFrame(router_, sequenceFrame(seq), true);
      sendFrame(router_, payload, false);
    }
    sendFrame(router_, identity, true);
    sendFrame(router_, std::string(), true);
    sendFrame(router_, sequenceFrame(kReplayEndSeq), true);
    sendFrame(router_, std::string(), false);
  }
}

PublisherStats KvEventPublisher::stats() const {
  PublisherStats s;
  s.batches = batches_.load(std::memory_order_relaxed);
  s.blocks_stored = stored_.load(std::memory_order_relaxed);
  s.blocks_removed = removed_.load(std::memory_order_relaxed);
  s.all_cleared = cleared_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  s.reannounced = reannounced_.load(std::memory_order_relaxed);
  s.replays = replays_.load(std::memory_order_relaxed);
  s.bad_replays = bad_replays_.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.queue_depth = queue_.size();
  return s;
}

void KvEventPublisher::collect(metrics::ExpositionWriter& w) const {
  const PublisherStats s = stats();
  w.counter("latentgate_kv_events_batches_total", "KV-event messages published (the next sequence number)", s.batches);
  if (w.family("latentgate_kv_events_blocks_total", "Blocks queued for publishing, by event", metrics::MetricType::kCounter)) {
    w.sample({{"event", "BlockStored"}}, s.blocks_stored);
    w.sample({{"event", "BlockRemoved"}}, s.blocks_removed);
    w.sample({{"event", "AllBlocksCleared"}}, s.all_cleared);
  }
  w.counter("latentgate_kv_events_dropped_total", "Block events dropped because the publisher's queue was full",
            s.dropped);
  w.gauge("latentgate_kv_events_queue_depth", "Block events waiting for the publisher's thread", s.queue_depth);
  w.counter("latentgate_kv_events_reannounced_blocks_total",
            "Blocks published again by the periodic re-announcement of tier 0", s.reannounced);
  if (w.family("latentgate_kv_events_replay_requests_total", "Replay requests on the ROUTER socket, by outcome",
               metrics::MetricType::kCounter)) {
    w.sample({{"outcome", "served"}}, s.replays);
    w.sample({{"outcome", "malformed"}}, s.bad_replays);
  }
}

}  // namespace lg::cache::kv_events
