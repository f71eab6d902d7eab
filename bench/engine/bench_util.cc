#include "bench/engine/bench_util.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "cli/terminal_progress.h"
#include "engine/cpu/linear.h"
#include "engine/cpu/simd.h"  // AVX-512 intrinsics (with GCC 12's header warnings silenced)
#include "engine/cpu/thread_pool.h"
#include "engine/model/presets.h"

#if LG_HAVE_OPENBLAS
#include <cblas.h>
extern "C" char* openblas_get_corename(void);
#endif

extern char** environ;

namespace lg::engine::bench {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void die(const std::string& message) {
  std::fprintf(stderr, "engine_bench: %s\n", message.c_str());
  std::exit(1);
}

// ---- memory bandwidth ------------------------------------------------------------

Bandwidth measureBandwidth(int threads, size_t n) {
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

namespace {
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
}  // namespace
#else
int sgemmChild() { return 1; }
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


Sgemm bestSgemm(int threads, const std::string& label) {
  Sgemm best;
#if LG_HAVE_OPENBLAS
  for (const std::string core : {"", "SkylakeX"}) {
    auto [name, gflops] = sgemmIn(core, threads);
    std::printf("OpenBLAS sgemm %d^3 (%s)%s: %.1f GFLOPS\n", kSquare, name.c_str(), label.c_str(), gflops);
    if (gflops > best.gflops) {
      best.gflops = gflops;
      best.name = "OpenBLAS " + name;
    }
  }
#else
  (void)threads;
  (void)label;
#endif
  return best;
}

std::unique_ptr<Model> loadBenchModel(const std::string& dir, double* load_seconds) {
  if (::access((dir + "/config.json").c_str(), F_OK) != 0) {
    std::printf("writing the bench preset to %s\n", dir.c_str());
    CheckpointInitOptions init;
    init.progress = cli::terminalByteProgress("bench preset");
    if (Status s = writeRandomCheckpoint(*presetConfig("bench"), dir, init); !s.isOk()) die(s.toString());
  }
  ModelLoadOptions load;
  load.prefetch = true;
  load.progress = cli::terminalLoadProgress("loading " + dir);
  const auto t0 = Clock::now();
  auto model = Model::load(dir, load);
  if (!model.isOk()) die(model.status().toString());
  if (load_seconds != nullptr) *load_seconds = seconds(t0, Clock::now());
  return std::move(model).value();
}

}  // namespace lg::engine::bench
