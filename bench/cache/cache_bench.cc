// cache_bench: the prefix cache against an uncached prefill and against this
// machine's disk, all measured in one run (docs/benchmarks.md, "Prefix cache"):
//
//  (a) time to first token (TTFT: lookup, restore if any, prefill of what is
//      left, the last position's logits) of a ~8,000-token prompt whose first
//      7,900 tokens are a system prompt another request already sent:
//        uncached   a namespace that holds nothing (the same code path as any miss);
//        tier 0     the system prompt's blocks are in the pool;
//        disk warm  a restarted cache (empty tier 0) over the RocksDB tier,
//                   the store's files in the page cache (a process restart);
//        disk cold  the same with the store's pages dropped first
//                   (fdatasync + posix_fadvise DONTNEED: a machine restart);
//      and the restore bandwidth (stored bytes / restore time: MultiGet,
//      verification, import) against a sequential read of a file of the same
//      size on the same filesystem in the same page-cache state.
//  (b) a multi-turn agent workload (described in docs/benchmarks.md): hit
//      rate by tier, prefill time with and without the cache, and the bill at
//      DeepSeek's cache-hit / cache-miss input prices.
//
// Usage: cache_bench [--model DIR] [--workload-model DIR] [--store DIR]
//        [--threads N] [--prompt 8000] [--system 7900] [--repeats 5]
//        [--stored-dtype f32|bf16|int8] [--skip-ttft] [--skip-workload]
// A model directory without config.json is created from the `bench` (--model)
// or `demo` (--workload-model) preset with seed 0.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/cache_config.h"
#include "cache/disk_tier.h"
#include "cache/model_fingerprint.h"
#include "cache/prefix_cache.h"
#include "common/malloc_tuning.h"
#include "config/config.h"
#include "engine/cpu/cpu_backend.h"
#include "cli/terminal_progress.h"
#include "engine/model/presets.h"
#include "engine/sequence_blocks.h"

namespace lg::cache {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "cache_bench: %s\n", message.c_str());
  std::exit(1);
}

template <typename T>
T orDie(Result<T> r) {
  if (!r.isOk()) die(r.status().toString());
  return std::move(r).value();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

struct Args {
  std::string model_dir = "/tmp/lg-bench";
  std::string workload_model_dir = "/tmp/lg-demo";
  std::string store = "/tmp/lg-cache-bench";
  int threads = 0;
  int prompt = 8000;
  int system = 7900;
  int repeats = 5;
  std::string stored_dtype = "f32";
  bool ttft = true;
  bool workload = true;
  int child_seed = -1;  // internal: serve one prompt in a fresh process (a restart) and report
};

Args parseArgs(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + k);
      return argv[++i];
    };
    if (k == "--model") a.model_dir = value();
    else if (k == "--workload-model") a.workload_model_dir = value();
    else if (k == "--store") a.store = value();
    else if (k == "--threads") a.threads = std::stoi(value());
    else if (k == "--prompt") a.prompt = std::stoi(value());
    else if (k == "--system") a.system = std::stoi(value());
    else if (k == "--repeats") a.repeats = std::max(1, std::stoi(value()));
    else if (k == "--stored-dtype") a.stored_dtype = value();
    else if (k == "--skip-ttft") a.ttft = false;
    else if (k == "--skip-workload") a.workload = false;
    else if (k == "--child-serve") a.child_seed = std::stoi(value());
    else die("unknown argument " + k);
  }
  if (a.system >= a.prompt) die("--system must be shorter than --prompt");
  return a;
}

// ---- page cache -------------------------------------------------------------------

// Writes a file's dirty pages and asks the kernel to drop its cached pages, so
// the next read comes from the device. Returns false if the kernel refused.
bool dropPages(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fdatasync(fd) == 0 && ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0;
  ::close(fd);
  return ok;
}

void dropTreePages(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) (void)dropPages(e.path());
  }
}

// Sequential read of `path` with 1 MiB read() calls; bytes per second.
double sequentialRead(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("cannot open " + path.string());
  std::vector<char> buf(size_t{1} << 20);
  uint64_t total = 0;
  const auto t0 = Clock::now();
  for (ssize_t got; (got = ::read(fd, buf.data(), buf.size())) > 0;) total += static_cast<uint64_t>(got);
  const double s = seconds(t0, Clock::now());
  ::close(fd);
  return static_cast<double>(total) / s;
}

void writeFileOf(const fs::path& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("cannot create " + path.string());
  std::vector<char> buf(size_t{1} << 20);
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < buf.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(buf.data() + i, &v, 8);
  }
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - done));
    if (::write(fd, buf.data(), n) != static_cast<ssize_t>(n)) die("short write to " + path.string());
    done += n;
  }
  ::close(fd);
}

// ---- one request ------------------------------------------------------------------

struct Request {
  double ttft = 0;          // lookup + restore + prefill of the rest, to the last position's logits
  double prefill = 0;       // the forward call alone
  int32_t cached = 0;
  int32_t tier0_blocks = 0;
  int32_t disk_blocks = 0;
  double restore_seconds = 0;
  uint64_t restore_bytes = 0;
  RestoreChoice choice = RestoreChoice::kNone;
};

// Serves `ids` like the gateway will: acquire, adopt the hit, prefill the rest
// (logits of the last position only), publish the prompt's blocks.
Request serve(engine::Backend& backend, PrefixCache& cache, std::string_view ns, std::span<const int32_t> ids) {
  Request r;
  const auto t0 = Clock::now();
  PrefixLease lease = cache.acquire(orDie(TeamNamespace::ofTeam(ns)), ids);
  engine::SequenceBlocks seq(backend);
  seq.adopt(lease.takeBlocks(), lease.cachedTokens());
  r.cached = lease.cachedTokens();
  auto step = orDie(seq.step(ids.subspan(static_cast<size_t>(r.cached)), engine::LogitsWanted::kLast));
  engine::ForwardBatch batch;
  batch.sequences.push_back(step);
  const auto f0 = Clock::now();
  engine::ForwardOutput out = orDie(backend.forward(batch));
  const auto t1 = Clock::now();
  seq.commit(static_cast<int32_t>(ids.size()) - r.cached);
  r.ttft = seconds(t0, t1);
  r.prefill = seconds(f0, t1);
  cache.observePrefill(r.cached, static_cast<int64_t>(ids.size()), out.timing.total_seconds - out.timing.attention_seconds,
                       out.timing.attention_seconds);
  if (Status s = lease.publish(seq.blocks(), seq.length()); !s.isOk()) die(s.toString());
  r.tier0_blocks = lease.tier0Blocks();
  r.disk_blocks = lease.diskBlocks();
  r.restore_seconds = lease.restoreSeconds();
  r.restore_bytes = lease.restoreBytes();
  r.choice = lease.decision().choice;
  return r;
}

// The same request with no cache at all: the baseline of the workload.
double serveUncached(engine::Backend& backend, std::span<const int32_t> ids) {
  const auto t0 = Clock::now();
  engine::SequenceBlocks seq(backend);
  auto step = orDie(seq.step(ids, engine::LogitsWanted::kLast));
  engine::ForwardBatch batch;
  batch.sequences.push_back(step);
  (void)orDie(backend.forward(batch));
  return seconds(t0, Clock::now());
}

std::vector<int32_t> randomIds(int n, uint32_t seed, int64_t vocab) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  // Ordinary tokens (skip the lowest ids, where the specials live).
  for (auto& id : ids) id = static_cast<int32_t>(1000 + rng() % static_cast<uint32_t>(vocab - 2000));
  return ids;
}

std::vector<int32_t> concat(std::vector<int32_t> a, std::span<const int32_t> b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ---- a model, a disk tier and a cache -------------------------------------------

std::unique_ptr<engine::Backend> loadBackend(const std::string& dir, const char* preset, int threads,
                                             int64_t num_blocks) {
  if (::access((dir + "/config.json").c_str(), F_OK) != 0) {
    std::printf("writing the %s preset to %s\n", preset, dir.c_str());
    engine::CheckpointInitOptions init;
    init.progress = cli::terminalByteProgress(std::string(preset) + " preset");
    if (Status s = engine::writeRandomCheckpoint(*engine::presetConfig(preset), dir, init); !s.isOk()) die(s.toString());
  }
  engine::ModelLoadOptions load;
  load.prefetch = true;
  auto model = orDie(engine::Model::load(dir, load));
  engine::BackendOptions options;
  options.threads = threads;
  options.block_tokens = 64;
  options.num_blocks = num_blocks;
  return orDie(engine::createCpuBackend(std::move(model), options));
}

struct Stack {
  std::unique_ptr<DiskTier> disk;
  std::unique_ptr<PrefixCache> cache;
};

Stack openStack(engine::Backend& backend, const Digest& identity, const std::string& store,
                PrefixCacheOptions options, bool verify_store_checksums = true) {
  Stack s;
  DiskTierOptions d;
  d.path = store;
  d.verify_store_checksums = verify_store_checksums;
  // The installation secret beside the store, as latentgate keeps it; the
  // child processes read the same one.
  options.secret = std::make_shared<const CacheSecret>(orDie(CacheSecret::loadOrCreate(store + ".key")));
  s.disk = orDie(DiskTier::open(d));
  s.cache = orDie(PrefixCache::create(backend.latentPool(), s.disk.get(), identity, options));
  return s;
}

void closeStack(Stack& s) {
  s.cache.reset();  // writes what is queued, saves the cost model
  s.disk.reset();
}

// ---- (a) TTFT ---------------------------------------------------------------------

struct TtftSetup {
  std::unique_ptr<engine::Backend> backend;
  Digest identity;
  PrefixCacheOptions options;
  std::vector<int32_t> system;
  int64_t vocab = 0;

  // The system prompt, then a suffix of its own per seed.
  std::vector<int32_t> prompt(const Args& args, uint32_t seed) const {
    return concat(system, randomIds(args.prompt - args.system, 100 + seed, vocab));
  }
};

TtftSetup ttftSetup(const Args& args, StoredDType stored) {
  TtftSetup t;
  // The pool holds the stored prompt, a request being served and every
  // suffix the tier-0 runs publish.
  const int64_t blocks_per_prompt = args.prompt / 64 + 2;
  t.backend = loadBackend(args.model_dir, "bench", args.threads, blocks_per_prompt * (args.repeats + 4));
  t.vocab = t.backend->config().vocab_size;
  const ModelFingerprint fp = orDie(fingerprintModel(args.model_dir));
  t.identity = latentIdentity(fp.digest, t.backend->latentPool(), stored);
  t.options.stored_dtype = stored;
  t.options.write_through_hits = 0;  // the system prompt is written through when first published
  t.system = randomIds(args.system, 1, t.vocab);
  return t;
}

// --child-serve: one request in a fresh process over the store, the first
// request after a restart. Prints one line the parent parses.
int childServe(const Args& args, StoredDType stored) {
  TtftSetup t = ttftSetup(args, stored);
  Stack stack = openStack(*t.backend, t.identity, args.store, t.options);
  Request q = serve(*t.backend, *stack.cache, "team", t.prompt(args, static_cast<uint32_t>(args.child_seed)));
  std::printf("CHILD %.6f %.6f %llu %.6f %d %d %d\n", q.ttft, q.restore_seconds,
              static_cast<unsigned long long>(q.restore_bytes), q.prefill, q.cached, q.disk_blocks,
              static_cast<int>(q.choice));
  closeStack(stack);
  return 0;
}

Request spawnChild(const Args& args, int seed) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string cmd = self + " --child-serve " + std::to_string(seed) + " --model '" + args.model_dir +
                          "' --store '" + args.store + "' --threads " + std::to_string(args.threads) + " --prompt " +
                          std::to_string(args.prompt) + " --system " + std::to_string(args.system) + " --repeats " +
                          std::to_string(args.repeats) + " --stored-dtype " + args.stored_dtype;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) die("cannot start " + cmd);
  Request r;
  bool got = false;
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    unsigned long long bytes = 0;
    int choice = 0;
    if (std::sscanf(line, "CHILD %lf %lf %llu %lf %d %d %d", &r.ttft, &r.restore_seconds, &bytes, &r.prefill,
                    &r.cached, &r.disk_blocks, &choice) == 7) {
      r.restore_bytes = bytes;
      r.choice = static_cast<RestoreChoice>(choice);
      got = true;
    }
  }
  if (::pclose(p) != 0 || !got) die("the child run failed: " + cmd);
  return r;
}

void ttftBench(const Args& args, StoredDType stored) {
  std::printf("\n== (a) TTFT: %d-token prompt, first %d tokens a cached system prompt ==\n", args.prompt, args.system);
  TtftSetup t = ttftSetup(args, stored);
  engine::Backend& backend = *t.backend;
  fs::remove_all(args.store);
  auto prompt = [&](uint32_t seed) { return t.prompt(args, seed); };

  Stack stack = openStack(backend, t.identity, args.store, t.options);
  // The first request stores the system prompt; it is also the warm-up that
  // faults in the activation buffers of a full-size prefill (not reported).
  Request first = serve(backend, *stack.cache, "team", prompt(0));
  std::printf("store run (also warm-up): %.2f s, cached %d\n", first.ttft, first.cached);

  std::vector<double> uncached, tier0;
  int32_t cached_tokens = 0;
  uint64_t restore_bytes = 0;
  const int uncached_repeats = std::min(args.repeats, 2);  // tens of seconds each
  for (int r = 0; r < uncached_repeats; ++r) {
    // A namespace that holds nothing: a miss, through the same code path.
    Request q = serve(backend, *stack.cache, "cold-" + std::to_string(r), prompt(10 + r));
    if (q.cached != 0) die("an empty namespace hit");
    uncached.push_back(q.ttft);
    std::printf("uncached #%d: %.3f s\n", r, q.ttft);
  }
  for (int r = 0; r < args.repeats; ++r) {
    Request q = serve(backend, *stack.cache, "team", prompt(20 + r));
    if (q.tier0_blocks * 64 != q.cached || q.cached == 0) die("expected a tier-0 hit");
    cached_tokens = q.cached;
    tier0.push_back(q.ttft);
    std::printf("tier 0 #%d: %.4f s (cached %d, computed %d)\n", r, q.ttft, q.cached, args.prompt - q.cached);
  }
  if (Status s = stack.cache->persistAll(true); !s.isOk()) die(s.toString());
  closeStack(stack);

  // Kinds of restart, each run with a fresh suffix:
  //   reopen: a new DiskTier + PrefixCache (empty tier 0) in this process,
  //           whose allocator already holds memory from earlier restores;
  //           also with RocksDB's read checksums off (alternating runs), to
  //           measure what they cost;
  //   process, warm: a new process (model loaded, then the first request),
  //           the store's files in the page cache;
  //   process, cold: the same after dropping the store's pages.
  enum Kind { kReopen, kReopenUnverified, kProcessWarm, kProcessCold, kKinds };
  const char* kind_names[kKinds] = {"reopened cache, same process", "reopened cache, RocksDB read checksums off",
                                    "new process, warm page cache", "new process, store pages dropped"};
  std::vector<double> ttft[kKinds], bandwidth[kKinds];
  auto run = [&](int kind, int r) {
    const int seed = 40 + 10 * kind + r;
    Request q;
    if (kind == kReopen || kind == kReopenUnverified) {
      stack = openStack(backend, t.identity, args.store, t.options, kind != kReopenUnverified);
      q = serve(backend, *stack.cache, "team", prompt(static_cast<uint32_t>(seed)));
      closeStack(stack);
    } else {
      if (kind == kProcessCold) dropTreePages(args.store);
      q = spawnChild(args, seed);
    }
    if (q.choice != RestoreChoice::kRestore || q.disk_blocks * 64 != q.cached || q.cached == 0) {
      die("expected a restore from the disk tier, got " + std::string(restoreChoiceName(q.choice)));
    }
    restore_bytes = q.restore_bytes;
    ttft[kind].push_back(q.ttft);
    bandwidth[kind].push_back(static_cast<double>(q.restore_bytes) / q.restore_seconds);
    std::printf("%s #%d: TTFT %.4f s (restore %.4f s, %.1f MB, %.0f MB/s; prefill %.4f s)\n", kind_names[kind], r,
                q.ttft, q.restore_seconds, q.restore_bytes / 1e6, q.restore_bytes / q.restore_seconds / 1e6, q.prefill);
  };
  for (int r = 0; r < args.repeats; ++r) {
    run(kReopen, r);
    run(kReopenUnverified, r);
  }
  for (int kind : {kProcessWarm, kProcessCold}) {
    for (int r = 0; r < args.repeats; ++r) run(kind, r);
  }

  // The physical reference: a file of the restored size, same filesystem,
  // same page-cache state.
  const fs::path ref = fs::path(args.store).parent_path() / "lg-cache-bench-seqread.bin";
  writeFileOf(ref, restore_bytes);
  std::vector<double> seq_cold, seq_warm;
  for (int r = 0; r < args.repeats; ++r) {
    if (!dropPages(ref)) std::printf("note: posix_fadvise(DONTNEED) refused; cold figures are not cold\n");
    seq_cold.push_back(sequentialRead(ref));
    seq_warm.push_back(sequentialRead(ref));
  }
  fs::remove(ref);

  // What authenticating stored blocks costs: HMAC-SHA-256 (the codec's MAC)
  // and XXH3-128 (its torn-write checksum) over the restored bytes, block by
  // block, on one thread, against the restore's own time per byte.
  const CacheSecret secret = CacheSecret::fromBytesForTest("bench");
  const size_t block_bytes = storedBlockBytes(
      BlockGeometry{static_cast<uint32_t>(backend.latentLayout().layers), 64,
                    static_cast<uint32_t>(backend.latentLayout().latent_dim)},
      stored);
  std::string block(block_bytes, '\x5a');
  std::vector<double> mac_rate;
  for (int r = 0; r < args.repeats; ++r) {
    const auto m0 = std::chrono::steady_clock::now();
    uint8_t sink = 0;
    for (uint64_t done = 0; done < restore_bytes; done += block_bytes) sink ^= secret.mac(block).bytes[0];
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
    mac_rate.push_back(static_cast<double>(restore_bytes) / sec);
    block[0] = static_cast<char>(sink);
  }

  const double u = median(uncached), t0 = median(tier0);
  std::printf("\n| path | TTFT (median) | speed-up vs uncached |\n|---|---:|---:|\n");
  std::printf("| uncached (%d tokens computed) | %.3f s | 1.0x |\n", args.prompt, u);
  std::printf("| tier 0 (%d cached, %d computed) | %.4f s | %.1fx |\n", cached_tokens, args.prompt - cached_tokens, t0,
              u / t0);
  for (int kind = 0; kind < kKinds; ++kind) {
    const double d = median(ttft[kind]);
    std::printf("| disk tier, %s | %.4f s | %.1fx |\n", kind_names[kind], d, u / d);
  }
  const double sw = median(seq_warm), sc = median(seq_cold);
  std::printf("\n| restore of %.1f MB (%s) | restore bandwidth (median) | sequential read, same size | ratio |\n"
              "|---|---:|---:|---:|\n",
              restore_bytes / 1e6, std::string(storedDTypeName(stored)).c_str());
  for (int kind = 0; kind < kKinds; ++kind) {
    const double b = median(bandwidth[kind]);
    const double reference = kind == kProcessCold ? sc : sw;
    std::printf("| %s | %.0f MB/s | %.0f MB/s (%s) | %.0f%% |\n", kind_names[kind], b / 1e6, reference / 1e6,
                kind == kProcessCold ? "pages dropped" : "page cache", 100 * b / reference);
  }
  const double mac = median(mac_rate), reopen = median(bandwidth[kReopen]);
  std::printf("\nMAC: HMAC-SHA-256 over %.1f MB in %zu-byte blocks, one thread: %.0f MB/s; at that rate the MAC is "
              "%.0f%% of a reopened cache's restore time (%.0f MB/s)\n",
              restore_bytes / 1e6, block_bytes, mac / 1e6, 100 * reopen / mac, reopen / 1e6);
}

// ---- (b) agent workload -----------------------------------------------------------

// Two teams, each with its own system prompt and tool list; four agents per
// team run conversations of eight turns, interleaved (one turn of each agent
// in turn). A turn resends everything: system prompt, then for every earlier
// turn the user/tool message and the assistant's reply, then the new message.
struct Workload {
  int teams = 2;
  int agents_per_team = 4;
  int turns = 8;
  int system_tokens[2] = {3000, 1800};
  int reply_tokens = 120;
  int min_message = 80, max_message = 700;
};

void workloadBench(const Args& args) {
  const Workload w;
  std::printf("\n== (b) agent workload: %d teams x %d agents x %d turns ==\n", w.teams, w.agents_per_team, w.turns);
  auto backend = loadBackend(args.workload_model_dir, "demo", args.threads, 1024);
  const int64_t vocab = backend->config().vocab_size;
  const ModelFingerprint fp = orDie(fingerprintModel(args.workload_model_dir));
  const Digest identity = latentIdentity(fp.digest, backend->latentPool(), PrefixCacheOptions{}.stored_dtype);
  const std::string store = args.store + "-workload";
  fs::remove_all(store);
  PrefixCacheOptions options;
  // Tier 0 holds about a quarter of what the workload touches, so older
  // conversations spill to the disk tier and come back from it.
  options.tier0_budget_bytes = 160 * backend->latentLayout().blockBytes();
  options.write_back_queue_blocks = 256;
  Stack stack = openStack(*backend, identity, store, options);

  std::mt19937 rng(42);
  struct Conversation {
    int team;
    std::vector<int32_t> ids;
  };
  std::vector<Conversation> convs;
  std::vector<std::vector<int32_t>> systems;
  for (int t = 0; t < w.teams; ++t) systems.push_back(randomIds(w.system_tokens[t], 500 + t, vocab));
  for (int t = 0; t < w.teams; ++t) {
    for (int a = 0; a < w.agents_per_team; ++a) convs.push_back({t, systems[static_cast<size_t>(t)]});
  }
  uint64_t prompt_tokens = 0, hit_tokens = 0, tier0_tokens = 0, disk_tokens = 0;
  double cached_prefill = 0, uncached_prefill = 0;
  int requests = 0;
  std::unordered_set<Digest, DigestHash> distinct;  // every prompt block the workload touches
  for (int turn = 0; turn < w.turns; ++turn) {
    for (Conversation& c : convs) {
      const int msg = w.min_message + static_cast<int>(rng() % static_cast<uint32_t>(w.max_message - w.min_message));
      c.ids = concat(std::move(c.ids), randomIds(msg, rng(), vocab));
      const std::string ns = "team-" + std::to_string(c.team);
      Request q = serve(*backend, *stack.cache, ns, c.ids);
      for (const Digest& k : chainBlockKeys(ns, identity, c.ids, 64)) distinct.insert(k);
      // The same prompt without the cache: the compute the cache saved.
      cached_prefill += q.ttft;
      uncached_prefill += serveUncached(*backend, c.ids);
      prompt_tokens += c.ids.size();
      hit_tokens += static_cast<uint64_t>(q.cached);
      tier0_tokens += static_cast<uint64_t>(q.tier0_blocks) * 64;
      disk_tokens += static_cast<uint64_t>(q.disk_blocks) * 64;
      ++requests;
      // The assistant's reply joins the conversation for the next turn.
      c.ids = concat(std::move(c.ids), randomIds(w.reply_tokens, rng(), vocab));
    }
  }
  const CacheStats s = stack.cache->snapshot();
  closeStack(stack);
  fs::remove_all(store);
  // DeepSeek's input prices per million tokens: cache hit $0.028, miss $0.28.
  // Integer pico-dollars per token, as the ledger keeps them.
  constexpr uint64_t kHitPico = 28000, kMissPico = 280000;
  const uint64_t miss_tokens = prompt_tokens - hit_tokens;
  const double billed = static_cast<double>(hit_tokens * kHitPico + miss_tokens * kMissPico) * 1e-12;
  const double uncached_bill = static_cast<double>(prompt_tokens * kMissPico) * 1e-12;
  std::printf("requests %d, prompt tokens %llu, hit tokens %llu (tier 0 %llu, disk %llu): hit rate %.1f%%\n", requests,
              static_cast<unsigned long long>(prompt_tokens), static_cast<unsigned long long>(hit_tokens),
              static_cast<unsigned long long>(tier0_tokens), static_cast<unsigned long long>(disk_tokens),
              100.0 * hit_tokens / prompt_tokens);
  std::printf("tier-0 budget %llu blocks; the workload touches %zu distinct prompt blocks\n",
              static_cast<unsigned long long>(options.tier0_budget_bytes / backend->latentLayout().blockBytes()),
              distinct.size());
  std::printf("tier-0 evictions %llu, blocks written to disk %llu, restored %llu, dropped %llu\n",
              static_cast<unsigned long long>(s.tier0.evicted_blocks),
              static_cast<unsigned long long>(s.write_back_written_blocks),
              static_cast<unsigned long long>(s.restored_blocks),
              static_cast<unsigned long long>(s.write_back_dropped_blocks));
  std::printf("input bill: $%.6f with the cache vs $%.6f uncached: %.1f%% saved\n", billed, uncached_bill,
              100.0 * (1 - billed / uncached_bill));
  std::printf("sum of TTFT: %.2f s with the cache vs %.2f s uncached: %.1fx less prefill time\n", cached_prefill,
              uncached_prefill, uncached_prefill / cached_prefill);
}

}  // namespace
}  // namespace lg::cache

int main(int argc, char** argv) {
  using namespace lg::cache;
  lg::keepFreedMemoryForReuse();  // as latentgate does (common/malloc_tuning.h)
  const Args args = parseArgs(argc, argv);
  // --stored-dtype takes the names cache.stored_dtype takes ("pool": the
  // bench's f32 pool).
  lg::Config config;
  if (lg::Status st = lg::setConfigField("cache.stored_dtype", args.stored_dtype, config); !st.isOk()) die(st.toString());
  const StoredDType stored = storedDType(config.cache.stored_dtype, lg::engine::LatentDType::kF32);
  std::printf("cache_bench: threads %d (0 = all), stored dtype %s\n", args.threads, args.stored_dtype.c_str());
  if (args.child_seed >= 0) return childServe(args, stored);
  if (args.ttft) ttftBench(args, stored);
  if (args.workload) workloadBench(args);
  return 0;
}
