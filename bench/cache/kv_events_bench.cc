// kv_events_bench: what publishing KV events costs per block (issue 24,
// docs/benchmarks.md "KV events"), measured as CPU time: a KvEventPublisher on
// an ipc:// endpoint with a live subscriber (a thread of this process that
// receives every message), fed chains of blocks as the prefix cache reports
// them (64 token ids each). The process's CPU time over the run, divided by
// the blocks, is an upper bound of what one block costs the server: it
// includes the subscriber's receiving. The caller's own share (what the
// engine thread pays: building the event and queueing it) is timed apart.
//
// With --message-per-chain, each chain is published before the next is
// reported (one message per chain, as a request's blocks usually go out);
// otherwise chains queue up and go out together in large batches.
//
// Usage: kv_events_bench [--blocks N] [--chain C] [--rounds R] [--message-per-chain]
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <zmq.h>

#include "cache/kv_events/kv_event_publisher.h"

namespace {

using lg::cache::BlockTier;
using lg::cache::Digest;
using lg::cache::sha256;
namespace kv = lg::cache::kv_events;

double cpuSeconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 200000;
  int chain = 16;
  int rounds = 5;
  bool message_per_chain = false;
  CLI::App app{"CPU time per published KV-event block (docs/benchmarks.md)"};
  app.add_option("--blocks", blocks, "Blocks per round (default 200000)");
  app.add_option("--chain", chain, "Blocks per chain, as one request publishes them (default 16)");
  app.add_option("--rounds", rounds, "Rounds (default 5)");
  app.add_flag("--message-per-chain", message_per_chain, "Wait for each chain's message before the next chain");
  CLI11_PARSE(app, argc, argv);

  const std::string dir = std::filesystem::temp_directory_path() / ("lg-kv-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  kv::PublisherOptions o;
  o.endpoint = "ipc://" + dir + "/pub";
  o.topic = "kv@127.0.0.1:8443@demo";
  o.reannounce_interval = std::chrono::milliseconds(0);
  o.max_queue_events = static_cast<size_t>(blocks) + 16;
  auto started = kv::KvEventPublisher::start(o, {});
  if (!started.isOk()) {
    std::fprintf(stderr, "kv_events_bench: %s\n", started.status().toString().c_str());
    return 2;
  }
  auto& pub = *started;

  void* ctx = zmq_ctx_new();
  std::atomic<uint64_t> received{0};
  std::atomic<bool> stop{false};
  std::thread subscriber([&] {
    void* sub = zmq_socket(ctx, ZMQ_SUB);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    const int timeout = 100, hwm = 0;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    zmq_setsockopt(sub, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_connect(sub, o.endpoint.c_str());
    while (!stop.load()) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, sub, 0) >= 0 && !zmq_msg_more(&msg)) received.fetch_add(1);
      zmq_msg_close(&msg);
    }
    zmq_close(sub);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the subscription reaches the publisher

  // The blocks: chains of `chain` blocks with 64 token ids each.
  std::vector<Digest> keys(static_cast<size_t>(blocks));
  for (int i = 0; i < blocks; ++i) keys[static_cast<size_t>(i)] = sha256("block" + std::to_string(i));
  std::vector<int32_t> tokens(64);
  for (int i = 0; i < 64; ++i) tokens[static_cast<size_t>(i)] = 1000 + 37 * i;

  std::vector<double> per_block_us, caller_us;
  for (int r = 0; r < rounds; ++r) {
    const uint64_t batches_before = pub->stats().batches;
    const uint64_t received_before = received.load();
    const double cpu0 = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID);
    double caller0 = cpuSeconds(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < blocks; ++i) {
      const Digest* parent = i % chain == 0 ? nullptr : &keys[static_cast<size_t>(i - 1)];
      pub->blockStored(BlockTier::kPool, keys[static_cast<size_t>(i)], parent, tokens);
      if (message_per_chain && i % chain == chain - 1) {
        const double waited0 = cpuSeconds(CLOCK_THREAD_CPUTIME_ID);
        while (pub->stats().queue_depth > 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
        caller0 += cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - waited0;  // waiting is not the caller's cost
      }
    }
    const double caller = cpuSeconds(CLOCK_THREAD_CPUTIME_ID) - caller0;
    // Until every batch this round published has reached the subscriber.
    for (;;) {
      const kv::PublisherStats s = pub->stats();
      if (s.queue_depth == 0 && received.load() - received_before >= s.batches - batches_before &&
          s.batches > batches_before) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double cpu = cpuSeconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    per_block_us.push_back(cpu / blocks * 1e6);
    caller_us.push_back(caller / blocks * 1e6);
    std::printf("{\"round\":%d,\"blocks\":%d,\"cpu_us_per_block\":%.3f,\"caller_us_per_block\":%.3f,\"batches\":%llu}\n", r,
                blocks, per_block_us.back(), caller_us.back(),
                static_cast<unsigned long long>(pub->stats().batches - batches_before));
  }
  std::printf("{\"median_cpu_us_per_block\":%.3f,\"median_caller_us_per_block\":%.3f,\"dropped\":%llu}\n",
              median(per_block_us), median(caller_us), static_cast<unsigned long long>(pub->stats().dropped));
  stop = true;
  subscriber.join();
  pub.reset();
  zmq_ctx_term(ctx);
  std::filesystem::remove_all(dir);
  return 0;
}
