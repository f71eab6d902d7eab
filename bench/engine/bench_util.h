// What every engine_bench mode shares: the machine's own limits measured in
// the same run (memory bandwidth, the best sgemm of this machine, the engine's
// own GEMM), the bench model, timing helpers.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/dtype.h"
#include "engine/model/model.h"

namespace lg::engine::bench {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b);
double median(std::vector<double> v);
[[noreturn]] void die(const std::string& message);

struct Bandwidth {
  double copy_gbs = 0;  // STREAM convention: bytes read + bytes written per second
  double read_gbs = 0;  // bytes read per second (an AVX-512 sum)
};
// Best of a few memcpy and read passes over n bytes, on 1 and on `threads` threads.
Bandwidth measureBandwidth(int threads, size_t n = size_t{1} << 30);

// The square sgemm every GEMM figure is compared with.
constexpr int kSquare = 3072;

struct Sgemm {
  std::string name = "none";
  double gflops = 0;
};
// The best OpenBLAS sgemm (auto-detected kernels and SkylakeX), each in a
// child process; prints each measurement with `label`. Zero without OpenBLAS.
Sgemm bestSgemm(int threads, const std::string& label);
// The child process's side (--sgemm-child): measures and prints "name gflops".
int sgemmChild();
// The engine's own runLinear on a kSquare^3 product with weights in `dtype`.
double ownGemm(DType dtype, int threads);

// Loads the model in DIR (weights prefetched), writing the bench preset there
// first when it holds no config.json.
std::unique_ptr<Model> loadBenchModel(const std::string& dir, double* load_seconds = nullptr);

}  // namespace lg::engine::bench
