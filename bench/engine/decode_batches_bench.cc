// engine_bench --decode-batches 1,4,16,64: decode throughput by batch size on
// the bench preset, against the memory-bandwidth bound of the bytes each step
// actually reads (ForwardTiming: every dense weight, the routed experts the
// batch went to, lm_head, the embedding rows, and the latents of every
// sequence), at the copy bandwidth measured just before each round.
//
// Every sequence holds --decode-context cached positions: the latents of one
// prefill, copied into each sequence's own blocks (so each sequence reads its
// own memory, as distinct requests would, without prefilling each one), and
// decodes its own tokens (distinct random first tokens, then greedy), so the
// experts the batch routes to are those of distinct requests.
//
// Past a few sequences a step is no longer bound by memory alone: the
// compute bound (the step's arithmetic at the best sgemm of the machine,
// measured before and after) is reported beside it, and the roofline is the
// larger of the two.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/engine/bench_util.h"
#include "bench/engine/engine_bench.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/sequence_blocks.h"

namespace lg::engine::bench {
namespace {

constexpr int kRounds = 3;

struct Step {
  double seconds = 0;
  ForwardTiming timing;
};

struct BatchResult {
  int batch = 0;
  double step_ms = 0;          // median over all measured steps
  double tokens_per_s = 0;     // batch / step
  double weight_mb = 0;        // median bytes read per step
  double latent_mb = 0;
  double experts_per_layer = 0;
  double bound_ms = 0;         // median over rounds: bytes / that round's copy bandwidth
  double ratio = 0;            // median over rounds: bound / that round's median step
  double copy_gbs = 0;
  double linear_ms = 0, attention_ms = 0;
  double gflops = 0;           // arithmetic of the step / its time
  double gflop = 0;            // arithmetic of the step
};

// The sequences of one batch: private copies of the base sequence's blocks.
std::vector<SequenceBlocks> copiesOf(Backend& backend, const SequenceBlocks& base, int count) {
  std::vector<SequenceBlocks> out;
  for (int i = 0; i < count; ++i) {
    std::vector<BlockId> blocks;
    if (Status s = backend.blocks().allocate(static_cast<int32_t>(base.blocks().size()), blocks); !s.isOk()) {
      die(s.toString());
    }
    std::vector<BlockCopy> copies;
    for (size_t b = 0; b < blocks.size(); ++b) copies.push_back({base.blocks()[b], blocks[b]});
    if (Status s = backend.latentPool().copyBlocks(copies); !s.isOk()) die(s.toString());
    out.emplace_back(backend);
    out.back().adopt(std::move(blocks), base.length());
  }
  return out;
}

BatchResult measureBatch(Backend& backend, const SequenceBlocks& base, int batch, int steps, int threads,
                         std::mt19937& rng) {
  const ModelConfig& c = backend.config();
  std::vector<double> step_s, weight, latent, experts, bounds, ratios, bws, linear, attention, gflops, gflop;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<SequenceBlocks> seqs = copiesOf(backend, base, batch);
    std::vector<int32_t> tokens(static_cast<size_t>(batch));
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
    const Bandwidth bw = measureBandwidth(threads, size_t{256} << 20);
    std::vector<double> round_s;
    double round_bytes = 0;
    for (int i = 0; i < steps + 1; ++i) {  // step 0 of a round: warm-up
      ForwardBatch fb;
      for (int s = 0; s < batch; ++s) {
        auto st = seqs[static_cast<size_t>(s)].step(std::span<const int32_t>(&tokens[static_cast<size_t>(s)], 1),
                                                    LogitsWanted::kLast);
        if (!st.isOk()) die(st.status().toString());
        fb.sequences.push_back(*st);
      }
      const auto t0 = Clock::now();
      auto out = backend.forward(fb);
      const double dt = seconds(t0, Clock::now());
      if (!out.isOk()) die(out.status().toString());
      for (int s = 0; s < batch; ++s) {
        seqs[static_cast<size_t>(s)].commit(1);
        const float* row = out->row(static_cast<size_t>(s), 0);
        tokens[static_cast<size_t>(s)] = static_cast<int32_t>(std::max_element(row, row + out->vocab_size) - row);
      }
      if (i == 0) continue;
      const ForwardTiming& tm = out->timing;
      round_s.push_back(dt);
      step_s.push_back(dt);
      weight.push_back(tm.weight_bytes_read);
      latent.push_back(tm.latent_bytes_read);
      experts.push_back(tm.experts_touched);
      linear.push_back(tm.linear_seconds);
      attention.push_back(tm.attention_seconds);
      gflops.push_back((tm.linear_flops + tm.attention_flops) / dt / 1e9);
      gflop.push_back((tm.linear_flops + tm.attention_flops) / 1e9);
      round_bytes = tm.weight_bytes_read + tm.latent_bytes_read;
    }
    const double bound = round_bytes / (bw.copy_gbs * 1e9);
    bounds.push_back(bound);
    ratios.push_back(bound / median(round_s));
    bws.push_back(bw.copy_gbs);
  }
  int moe_layers = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) moe_layers += backend.model().layer(l).moe ? 1 : 0;
  BatchResult r;
  r.batch = batch;
  r.step_ms = 1e3 * median(step_s);
  r.tokens_per_s = batch / median(step_s);
  r.weight_mb = median(weight) / 1e6;
  r.latent_mb = median(latent) / 1e6;
  r.experts_per_layer = median(experts) / std::max(1, moe_layers);
  r.bound_ms = 1e3 * median(bounds);
  r.ratio = median(ratios);
  r.copy_gbs = median(bws);
  r.linear_ms = 1e3 * median(linear);
  r.attention_ms = 1e3 * median(attention);
  r.gflops = median(gflops);
  r.gflop = median(gflop);
  return r;
}

}  // namespace

int runDecodeBatches(const Args& args) {
  const int threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  int largest = 1;
  for (int b : args.decode_batches) {
    if (b < 1) die("--decode-batches: batch sizes must be positive");
    largest = std::max(largest, b);
  }
  std::printf("engine_bench --decode-batches: %d threads, context %d, %d steps x %d rounds per batch size\n", threads,
              args.decode_context, args.decode_steps, kRounds);
  Sgemm sgemm = bestSgemm(threads, "");
  BackendOptions options;
  options.threads = threads;
  const int blocks_per_seq = (args.decode_context + args.decode_steps + 1) / 64 + 2;
  options.num_blocks = int64_t{largest + 2} * blocks_per_seq;
  auto backend_or = createCpuBackend(loadBenchModel(args.model_dir), options);
  if (!backend_or.isOk()) die(backend_or.status().toString());
  Backend& backend = **backend_or;

  std::mt19937 rng(7);
  std::vector<int32_t> ids(static_cast<size_t>(args.decode_context));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(backend.config().vocab_size));
  SequenceBlocks base(backend);
  {
    auto step = base.step(ids, LogitsWanted::kNone);
    if (!step.isOk()) die(step.status().toString());
    if (auto out = backend.forward(ForwardBatch{{*step}}); !out.isOk()) die(out.status().toString());
    base.commit(args.decode_context);
  }
  std::vector<BatchResult> results;
  for (int b : args.decode_batches) {
    results.push_back(measureBatch(backend, base, b, args.decode_steps, threads, rng));
    const BatchResult& r = results.back();
    std::printf("batch %d: %.2f ms/step, %.1f tokens/s; reads %.0f MB weights (%.1f experts/layer) + %.1f MB latents; "
                "bound %.2f ms at %.1f GB/s -> %.0f%%; linear %.2f ms, attention %.2f ms, %.1f GFLOPS\n",
                r.batch, r.step_ms, r.tokens_per_s, r.weight_mb, r.experts_per_layer, r.latent_mb, r.bound_ms,
                r.copy_gbs, 100 * r.ratio, r.linear_ms, r.attention_ms, r.gflops);
  }
  if (const Sgemm after = bestSgemm(threads, ", after"); after.gflops > sgemm.gflops) sgemm = after;
  std::printf("\n---- markdown ----\n");
  std::printf("| batch | step (median) | tokens/s | bytes read per step | experts per MoE layer | bandwidth bound | vs bound "
              "| compute bound | vs roofline | linear / attention / other |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const BatchResult& r : results) {
    const double compute_ms = sgemm.gflops > 0 ? 1e3 * r.gflop / sgemm.gflops : 0.0;
    const double roofline_ms = std::max(r.bound_ms, compute_ms);
    std::printf("| %d | %.2f ms | %.1f | %.0f MB weights + %.1f MB latents | %.1f | %.2f ms at %.1f GB/s | **%.0f%%** "
                "| %.2f ms (%.1f GFLOP) | %.0f%% | %.1f / %.1f / %.1f ms |\n",
                r.batch, r.step_ms, r.tokens_per_s, r.weight_mb, r.latent_mb, r.experts_per_layer, r.bound_ms, r.copy_gbs,
                100 * r.ratio, compute_ms, r.gflop, 100 * roofline_ms / r.step_ms, r.linear_ms, r.attention_ms,
                r.step_ms - r.linear_ms - r.attention_ms);
  }
  std::printf("\nsgemm %d^3, best routine (%s): %.1f GFLOPS; context %d per sequence; vs bound: median over %d rounds "
              "of (bytes / copy bandwidth measured before the round) / the round's median step\n",
              kSquare, sgemm.name.c_str(), sgemm.gflops, args.decode_context, kRounds);
  return 0;
}

}  // namespace lg::engine::bench
