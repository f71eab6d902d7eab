// engine_bench: the CPU engine against this machine's physical limits, all
// measured in one run (docs/benchmarks.md, "Engine"):
//  (a) decode step time at batch 1 on the `bench` preset vs the memory-bandwidth
//      bound: (active weight bytes + latent bytes read) / copy bandwidth;
//  (b) prefill throughput and GEMM efficiency vs the best sgemm on this machine
//      (OpenBLAS, with its default and its AVX-512 kernels, large square);
//  (c) resident memory after loading vs the checkpoint size.
//
// Usage: engine_bench --model DIR [--threads N] [--prefill-tokens 8000]
//        [--decode-steps 16]
// DIR is created with the `bench` preset (seed 0) when it holds no config.json.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli/terminal_progress.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/simd.h"  // AVX-512 intrinsics (with GCC 12's header warnings silenced)
#include "engine/model/presets.h"
#include "engine/sequence_blocks.h"

#if LG_HAVE_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
#endif

extern char** environ;

namespace lg::engine {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

struct Args {
  std::string model_dir;
  int threads = 0;
  int prefill_tokens = 8000;
  int decode_steps = 6;  // per round; 5 rounds per context
  int short_context = 256;
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "engine_bench: %s\n", message.c_str());
  std::exit(1);
}

// ---- memory bandwidth ------------------------------------------------------------

struct Bandwidth {
  double copy_gbs = 0;  // STREAM convention: bytes read + bytes written per second
  double read_gbs = 0;  // bytes read per second (an AVX-512 sum)
};

Bandwidth measureBandwidth(int threads, size_t n = size_t{1} << 30) {
  std::vector<char> a(n, 1), b(n, 2);
  Bandwidth best;
  for (int th : {1, threads}) {
    for (int rep = 0; rep < 3; ++rep) {
      auto t0 = Clock::now();
      std::vector<std::thread> pool;
      for (int i = 0; i < th; ++i) {
        pool.emplace_back([&, i] { std::memcpy(b.data() + n / th * i, a.data() + n / th * i, n / th); });
      }
      for (auto& t : pool) t.join();
      best.copy_gbs = std::max(best.copy_gbs, 2.0 * n / seconds(t0, Clock::now()) / 1e9);
      t0 = Clock::now();
      std::vector<double> sums(static_cast<size_t>(th));
      pool.clear();
      for (int i = 0; i < th; ++i) {
        pool.emplace_back([&, i] {
          const float* p = reinterpret_cast<const float*>(a.data() + n / th * i);
          __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
          for (size_t j = 0; j < n / th / 4; j += 64) {
            s0 = _mm512_add_ps(s0, _mm512_loadu_ps(p + j));
            s1 = _mm512_add_ps(s1, _mm512_loadu_ps(p + j + 16));
            s2 = _mm512_add_ps(s2, _mm512_loadu_ps(p + j + 32));
            s3 = _mm512_add_ps(s3, _mm512_loadu_ps(p + j + 48));
          }
          sums[static_cast<size_t>(i)] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
        });
      }
      for (auto& t : pool) t.join();
      best.read_gbs = std::max(best.read_gbs, n / seconds(t0, Clock::now()) / 1e9);
    }
  }
  return best;
}

// ---- GEMM peaks --------------------------------------------------------------------

constexpr int kSquare = 3072;

#if LG_HAVE_OPENBLAS
// Child mode: OpenBLAS reads OPENBLAS_CORETYPE when it loads, so each kernel
// family is measured in its own process.
int sgemmChild() {
  const int n = kSquare;
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.1f;
    b[i] = static_cast<float>(i % 5) * 0.1f;
  }
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    if (rep > 0) best = std::min(best, seconds(t0, Clock::now()));
  }
  std::printf("%s %.3f\n", openblas_get_corename(), 2.0 * n * n * n / best / 1e9);
  return 0;
}

// Runs this binary as an sgemm child with OPENBLAS_CORETYPE set (or not).
std::pair<std::string, double> sgemmIn(const std::string& coretype, int threads) {
  int fds[2];
  if (::pipe(fds) != 0) return {"", 0};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "OPENBLAS_", 9) != 0) env_strings.emplace_back(*e);
  }
  if (!coretype.empty()) env_strings.push_back("OPENBLAS_CORETYPE=" + coretype);
  env_strings.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(threads));
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = "/proc/self/exe", flag = "--sgemm-child";
  char* argv[] = {self.data(), flag.data(), nullptr};
  pid_t pid;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  char buf[256];
  ssize_t r;
  while ((r = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(r));
  ::close(fds[0]);
  if (rc != 0) return {"", 0};
  int status = 0;
  ::waitpid(pid, &status, 0);
  char name[64] = {};
  double gflops = 0;
  if (std::sscanf(out.c_str(), "%63s %lf", name, &gflops) != 2) return {"", 0};
  return {name, gflops};
}
#endif

double ownGemm(DType dtype, int threads) {
  const int64_t n = kSquare;
  std::vector<uint8_t> w(static_cast<size_t>(n * n) * dtypeSize(dtype));
  for (size_t i = 0; i < w.size() / dtypeSize(dtype); ++i) {
    const float v = static_cast<float>(i % 5) * 0.1f;
    if (dtype == DType::kF32) {
      std::memcpy(&w[4 * i], &v, 4);
    } else {
      const uint16_t h = floatToBf16(v);
      std::memcpy(&w[2 * i], &h, 2);
    }
  }
  std::vector<float> x(static_cast<size_t>(n * n), 0.01f), y(static_cast<size_t>(n * n));
  WeightView view;
  view.dtype = dtype;
  view.data = w.data();
  view.ld = view.rows = view.cols = n;
  cpu::LinearProblem p{x.data(), n, n, view, cpu::WeightLayout::kOutIn, y.data(), n, false};
  ThreadPool pool(threads);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    auto t0 = Clock::now();
    cpu::runLinear(pool, std::span<const cpu::LinearProblem>(&p, 1));
    if (rep > 0) best = std::min(best, seconds(t0, Clock::now()));
  }
  return 2.0 * n * n * n / best / 1e9;
}

// ---- resident memory ---------------------------------------------------------------

struct Rss {
  double total_mb = 0, anon_mb = 0, file_mb = 0;
};

Rss rss() {
  Rss r;
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    double kb = 0;
    if (key == "VmRSS:" && in >> kb) r.total_mb = kb / 1024;
    if (key == "RssAnon:" && in >> kb) r.anon_mb = kb / 1024;
    if (key == "RssFile:" && in >> kb) r.file_mb = kb / 1024;
  }
  return r;
}

// ---- the model ---------------------------------------------------------------------

struct DecodeResult {
  double ms_per_token = 0;  // median over rounds of each round's median step
  double bound_ms = 0;      // median over rounds of (bytes / that round's copy bandwidth)
  double ratio = 0;         // median over rounds of bound / step
  double copy_gbs = 0;      // median over rounds
  double bytes = 0;
  int context = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rounds of (memory copy bandwidth, then a few decode steps). The machine is
// a shared VM whose memory bandwidth drifts by tens of percent over a minute,
// so each round's steps are compared with the bandwidth measured just before.
DecodeResult decode(Backend& backend, SequenceBlocks& seq, int32_t first_token, int rounds, int steps_per_round,
                    int threads, uint64_t weight_bytes) {
  const ModelConfig& c = backend.config();
  int32_t token = first_token;
  std::vector<double> step_ms, bounds, ratios, bws;
  double bytes = 0;
  for (int round = 0; round < rounds; ++round) {
    const Bandwidth bw = measureBandwidth(threads, size_t{256} << 20);
    std::vector<double> times;
    for (int i = 0; i < steps_per_round + 1; ++i) {
      auto step = seq.step(std::span<const int32_t>(&token, 1), LogitsWanted::kLast);
      if (!step.isOk()) die(step.status().toString());
      ForwardBatch batch;
      batch.sequences.push_back(*step);
      auto t0 = Clock::now();
      auto out = backend.forward(batch);
      const double dt = seconds(t0, Clock::now());
      if (!out.isOk()) die(out.status().toString());
      seq.commit(1);
      if (i >= 1) times.push_back(dt);  // one warm-up step per round
      const float* row = out->logits.data();
      token = static_cast<int32_t>(std::max_element(row, row + out->vocab_size) - row);
    }
    const double latent = double(seq.length()) * c.num_hidden_layers * c.latentDim() * backend.latentLayout().elementBytes();
    bytes = static_cast<double>(weight_bytes) + latent;
    const double ms = 1e3 * median(times);
    const double bound = 1e3 * bytes / (bw.copy_gbs * 1e9);
    step_ms.push_back(ms);
    bounds.push_back(bound);
    ratios.push_back(bound / ms);
    bws.push_back(bw.copy_gbs);
  }
  return {median(step_ms), median(bounds), median(ratios), median(bws), bytes, seq.length()};
}

int run(const Args& args) {
  const int threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("engine_bench: %d threads\n", threads);
  const Bandwidth bw = measureBandwidth(threads);
  std::printf("memory: copy %.1f GB/s (read+write bytes), read %.1f GB/s\n", bw.copy_gbs, bw.read_gbs);
  std::string blas_name = "none";
  double blas_gflops = 0;
#if LG_HAVE_OPENBLAS
  for (const std::string core : {"", "SkylakeX"}) {
    auto [name, gflops] = sgemmIn(core, threads);
    std::printf("OpenBLAS sgemm %d^3 (%s): %.1f GFLOPS\n", kSquare, name.c_str(), gflops);
    if (gflops > blas_gflops) {
      blas_gflops = gflops;
      blas_name = "OpenBLAS " + name;
    }
  }
#endif
  const double own_f32 = ownGemm(DType::kF32, threads);
  const double own_bf16 = ownGemm(DType::kBF16, threads);
  std::printf("engine linear %d^3: F32 weights %.1f GFLOPS, BF16 weights %.1f GFLOPS\n", kSquare, own_f32, own_bf16);

  if (::access((args.model_dir + "/config.json").c_str(), F_OK) != 0) {
    std::printf("writing the bench preset to %s\n", args.model_dir.c_str());
    CheckpointInitOptions init;
    init.progress = cli::terminalByteProgress("bench preset");
    if (Status s = writeRandomCheckpoint(*presetConfig("bench"), args.model_dir, init); !s.isOk()) die(s.toString());
  }
  const Rss before = rss();
  ModelLoadOptions load;
  load.prefetch = true;
  load.progress = cli::terminalLoadProgress("loading " + args.model_dir);
  auto t_load = Clock::now();
  auto model = Model::load(args.model_dir, load);
  if (!model.isOk()) die(model.status().toString());
  const double load_s = seconds(t_load, Clock::now());
  const uint64_t checkpoint = (*model)->checkpointBytes();
  const uint64_t active_weights = (*model)->activeWeightBytesPerToken();
  const Rss loaded = rss();
  BackendOptions options;
  options.threads = threads;
  options.num_blocks = 3 * ((args.prefill_tokens + args.decode_steps + 2 + args.short_context) / 64 + 4);
  auto backend_or = createCpuBackend(std::move(model).value(), options);
  if (!backend_or.isOk()) die(backend_or.status().toString());
  Backend& backend = **backend_or;
  const ModelConfig& c = backend.config();
  const Rss with_backend = rss();
  std::printf("checkpoint %.2f GB; RSS after load %.0f MiB (anon %.0f, file %.0f), load %.1f s\n", checkpoint / 1e9,
              loaded.total_mb, loaded.anon_mb, loaded.file_mb, load_s);

  std::mt19937 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(args.prefill_tokens));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  // The first prefill of a size also faults in its activation buffers; the
  // second is what a running server sees. Both are reported.
  double cold_s = 0;
  {
    SequenceBlocks warm(backend);
    auto step = warm.step(ids, LogitsWanted::kLast);
    if (!step.isOk()) die(step.status().toString());
    ForwardBatch batch;
    batch.sequences.push_back(*step);
    auto t0 = Clock::now();
    if (auto o = backend.forward(batch); !o.isOk()) die(o.status().toString());
    cold_s = seconds(t0, Clock::now());
    std::printf("prefill %d tokens, first call: %.2f s\n", args.prefill_tokens, cold_s);
  }
  SequenceBlocks seq(backend);
  auto step = seq.step(ids, LogitsWanted::kLast);
  if (!step.isOk()) die(step.status().toString());
  ForwardBatch batch;
  batch.sequences.push_back(*step);
  auto t0 = Clock::now();
  auto out = backend.forward(batch);
  const double prefill_s = seconds(t0, Clock::now());
  if (!out.isOk()) die(out.status().toString());
  seq.commit(args.prefill_tokens);
  const ForwardTiming& tm = out->timing;
  const Rss after_prefill = rss();
  const double prefill_tps = args.prefill_tokens / prefill_s;
  const double linear_gflops = tm.linear_flops / tm.linear_seconds / 1e9;
  const double attention_gflops = tm.attention_flops / tm.attention_seconds / 1e9;
  const double total_gflops = (tm.linear_flops + tm.attention_flops) / prefill_s / 1e9;
  std::printf("prefill %d tokens: %.2f s, %.0f tokens/s; linear %.1f GFLOPS (%.2f s), attention %.1f GFLOPS (%.2f s), "
              "other %.2f s\n",
              args.prefill_tokens, prefill_s, prefill_tps, linear_gflops, tm.linear_seconds, attention_gflops,
              tm.attention_seconds, prefill_s - tm.linear_seconds - tm.attention_seconds);

  const int32_t first = static_cast<int32_t>(std::max_element(out->logits.begin(), out->logits.end()) - out->logits.begin());
  const DecodeResult long_ctx = decode(backend, seq, first, 5, args.decode_steps, threads, active_weights);
  seq.reset();
  SequenceBlocks short_seq(backend);
  std::vector<int32_t> short_ids(ids.begin(), ids.begin() + args.short_context);
  auto short_step = short_seq.step(short_ids, LogitsWanted::kLast);
  if (!short_step.isOk()) die(short_step.status().toString());
  ForwardBatch short_batch;
  short_batch.sequences.push_back(*short_step);
  if (auto o = backend.forward(short_batch); !o.isOk()) die(o.status().toString());
  short_seq.commit(args.short_context);
  const DecodeResult short_ctx = decode(backend, short_seq, first, 5, args.decode_steps, threads, active_weights);

  for (const DecodeResult* d : {&short_ctx, &long_ctx}) {
    std::printf("decode batch 1, context %d: %.2f ms/token; bound %.2f ms (%.0f MB / %.1f GB/s) -> %.0f%% of bound\n",
                d->context, d->ms_per_token, d->bound_ms, d->bytes / 1e6, d->copy_gbs, 100 * d->ratio);
  }
  // The sgemm reference again after the long runs; the larger value is the reference.
#if LG_HAVE_OPENBLAS
  for (const std::string core : {"", "SkylakeX"}) {
    auto [name, gflops] = sgemmIn(core, threads);
    std::printf("OpenBLAS sgemm %d^3 (%s), after: %.1f GFLOPS\n", kSquare, name.c_str(), gflops);
    if (gflops > blas_gflops) {
      blas_gflops = gflops;
      blas_name = "OpenBLAS " + name;
    }
  }
#endif

  // The section for docs/benchmarks.md.
  std::printf("\n---- markdown ----\n");
  std::printf("| metric | measured | reference | ratio |\n|---|---|---|---|\n");
  std::printf("| memory copy bandwidth (memcpy 1 GiB, read+write bytes), at start | %.1f GB/s | | |\n", bw.copy_gbs);
  std::printf("| memory read bandwidth (sum 1 GiB), at start | %.1f GB/s | | |\n", bw.read_gbs);
  std::printf("| sgemm %d^3, best routine | %.1f GFLOPS | %s | |\n", kSquare, blas_gflops, blas_name.c_str());
  std::printf("| engine linear %d^3, F32 / BF16 weights | %.1f / %.1f GFLOPS | %.1f GFLOPS | %.0f%% / %.0f%% |\n", kSquare,
              own_f32, own_bf16, blas_gflops, blas_gflops > 0 ? 100 * own_f32 / blas_gflops : 0.0,
              blas_gflops > 0 ? 100 * own_bf16 / blas_gflops : 0.0);
  for (const DecodeResult* d : {&short_ctx, &long_ctx}) {
    std::printf("| (a) decode step, batch 1, context %d | %.2f ms | bound %.2f ms (%.0f MB at %.1f GB/s) | %.0f%% |\n",
                d->context, d->ms_per_token, d->bound_ms, d->bytes / 1e6, d->copy_gbs, 100 * d->ratio);
  }
  std::printf("| (b) prefill %d tokens (one call) | %.2f s, %.0f tokens/s (first call: %.2f s) | | |\n", args.prefill_tokens,
              prefill_s, prefill_tps, cold_s);
  std::printf("| (b) prefill weight GEMMs | %.1f GFLOPS (%.1f s) | %.1f GFLOPS | %.0f%% |\n", linear_gflops,
              tm.linear_seconds, blas_gflops, blas_gflops > 0 ? 100 * linear_gflops / blas_gflops : 0.0);
  std::printf("| (b) prefill attention (absorbed MLA) | %.1f GFLOPS (%.1f s) | %.1f GFLOPS | %.0f%% |\n", attention_gflops,
              tm.attention_seconds, blas_gflops, blas_gflops > 0 ? 100 * attention_gflops / blas_gflops : 0.0);
  std::printf("| (b) prefill, all arithmetic / wall time | %.1f GFLOPS | %.1f GFLOPS | %.0f%% |\n", total_gflops,
              blas_gflops, blas_gflops > 0 ? 100 * total_gflops / blas_gflops : 0.0);
  std::printf("| (c) RSS after load (weights prefetched) | %.0f MiB: %.0f anon + %.0f file-backed | checkpoint %.0f MiB | %.2fx |\n",
              loaded.total_mb - before.total_mb, loaded.anon_mb - before.anon_mb, loaded.file_mb - before.file_mb,
              checkpoint / 1e6 / 1.048576, (loaded.total_mb - before.total_mb) / (checkpoint / 1048576.0));
  std::printf("| (c) RSS after backend / after %d-token prefill | %.0f / %.0f MiB (anon %.0f / %.0f) | | |\n",
              args.prefill_tokens, with_backend.total_mb, after_prefill.total_mb, with_backend.anon_mb, after_prefill.anon_mb);
  return 0;
}

}  // namespace
}  // namespace lg::engine

int main(int argc, char** argv) {
  lg::engine::Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) lg::engine::die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--sgemm-child") {
#if LG_HAVE_OPENBLAS
      return lg::engine::sgemmChild();
#else
      return 1;
#endif
    } else if (a == "--model") {
      args.model_dir = next();
    } else if (a == "--threads") {
      args.threads = std::stoi(next());
    } else if (a == "--prefill-tokens") {
      args.prefill_tokens = std::stoi(next());
    } else if (a == "--decode-steps") {
      args.decode_steps = std::stoi(next());
    } else if (a == "--short-context") {
      args.short_context = std::stoi(next());
    } else {
      lg::engine::die("unknown argument " + a + " (usage: engine_bench --model DIR [--threads N] "
                      "[--prefill-tokens N] [--decode-steps N] [--short-context N])");
    }
  }
  if (args.model_dir.empty()) lg::engine::die("--model DIR is required");
  return lg::engine::run(args);
}
