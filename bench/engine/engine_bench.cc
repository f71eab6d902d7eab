// engine_bench: the CPU engine against this machine's physical limits, all
// measured in one run (docs/benchmarks.md, "Engine"). The default mode:
//  (a) decode step time at batch 1 on the `bench` preset vs the memory-bandwidth
//      bound: (active weight bytes + latent bytes read) / copy bandwidth;
//  (b) prefill throughput and GEMM efficiency vs the best sgemm on this machine
//      (OpenBLAS, with its default and its AVX-512 kernels, large square);
//  (c) resident memory after loading vs the checkpoint size.
// The other modes are in engine_bench.h; usage: kUsage there.
// DIR is created with the `bench` preset (seed 0) when it holds no config.json.
#include "bench/engine/engine_bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/engine/bench_util.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/sequence_blocks.h"

namespace lg::engine::bench {
namespace {

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

}  // namespace

int runDefault(const Args& args) {
  const int threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  std::printf("engine_bench: %d threads\n", threads);
  const Bandwidth bw = measureBandwidth(threads);
  std::printf("memory: copy %.1f GB/s (read+write bytes), read %.1f GB/s\n", bw.copy_gbs, bw.read_gbs);
  const Sgemm sgemm_start = bestSgemm(threads, "");
  std::string blas_name = sgemm_start.name;
  double blas_gflops = sgemm_start.gflops;
  const double own_f32 = ownGemm(DType::kF32, threads);
  const double own_bf16 = ownGemm(DType::kBF16, threads);
  std::printf("engine linear %d^3: F32 weights %.1f GFLOPS, BF16 weights %.1f GFLOPS\n", kSquare, own_f32, own_bf16);

  const Rss before = rss();
  double load_s = 0;
  std::unique_ptr<Model> model = loadBenchModel(args.model_dir, &load_s);
  const uint64_t checkpoint = model->checkpointBytes();
  const uint64_t active_weights = model->activeWeightBytesPerToken();
  const Rss loaded = rss();
  BackendOptions options;
  options.threads = threads;
  options.num_blocks = 3 * ((args.prefill_tokens + args.decode_steps + 2 + args.short_context) / 64 + 4);
  options.attention_form = args.attention_form;
  auto backend_or = createCpuBackend(std::move(model), options);
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
  if (const Sgemm after = bestSgemm(threads, ", after"); after.gflops > blas_gflops) {
    blas_gflops = after.gflops;
    blas_name = after.name;
  }

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
  std::printf("| (b) prefill attention (%s form) | %.1f GFLOPS (%.1f s) | %.1f GFLOPS | %.0f%% |\n",
              tm.standard_form_sequences > 0 ? "standard" : "absorbed", attention_gflops, tm.attention_seconds, blas_gflops, blas_gflops > 0 ? 100 * attention_gflops / blas_gflops : 0.0);
  std::printf("| (b) prefill, all arithmetic / wall time | %.1f GFLOPS | %.1f GFLOPS | %.0f%% |\n", total_gflops,
              blas_gflops, blas_gflops > 0 ? 100 * total_gflops / blas_gflops : 0.0);
  std::printf("| (c) RSS after load (weights prefetched) | %.0f MiB: %.0f anon + %.0f file-backed | checkpoint %.0f MiB | %.2fx |\n",
              loaded.total_mb - before.total_mb, loaded.anon_mb - before.anon_mb, loaded.file_mb - before.file_mb,
              checkpoint / 1e6 / 1.048576, (loaded.total_mb - before.total_mb) / (checkpoint / 1048576.0));
  std::printf("| (c) RSS after backend / after %d-token prefill | %.0f / %.0f MiB (anon %.0f / %.0f) | | |\n",
              args.prefill_tokens, with_backend.total_mb, after_prefill.total_mb, with_backend.anon_mb, after_prefill.anon_mb);
  return 0;
}

}  // namespace lg::engine::bench

namespace {

std::vector<int> parseList(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoi(item));
  return out;
}

lg::engine::AttentionForm parseForm(const std::string& text) {
  if (text == "auto") return lg::engine::AttentionForm::kAuto;
  if (text == "absorbed") return lg::engine::AttentionForm::kAbsorbed;
  if (text == "standard") return lg::engine::AttentionForm::kStandard;
  lg::engine::bench::die("--attention-form: expected auto, absorbed or standard, got " + text);
}

}  // namespace

int main(int argc, char** argv) {
  namespace bench = lg::engine::bench;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines show up when redirected to a file
  bench::Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) bench::die("missing value after " + a);
      return argv[++i];
    };
    if (a == "--sgemm-child") {
      return bench::sgemmChild();
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
    } else if (a == "--attention-form") {
      args.attention_form = parseForm(next());
    } else if (a == "--attention-forms") {
      args.mode = bench::Mode::kAttentionForms;
    } else if (a == "--suffix-tokens") {
      args.suffix_tokens = std::stoi(next());
    } else if (a == "--repeats") {
      args.repeats = std::stoi(next());
    } else if (a == "--decode-batches") {
      args.mode = bench::Mode::kDecodeBatches;
      args.decode_batches = parseList(next());
    } else if (a == "--decode-context") {
      args.decode_context = std::stoi(next());
    } else {
      bench::die("unknown argument " + a + "\n" + bench::kUsage);
    }
  }
  if (args.model_dir.empty()) bench::die(std::string("--model DIR is required\n") + bench::kUsage);
  switch (args.mode) {
    case bench::Mode::kAttentionForms: return bench::runAttentionForms(args);
    case bench::Mode::kDecodeBatches: return bench::runDecodeBatches(args);
    case bench::Mode::kDefault: break;
  }
  return bench::runDefault(args);
}
