// engine_bench --attention-forms: prefill in the attention form the engine
// chooses (engine/attention_form.h) against the other form forced, on two
// cases:
//  - a fresh prefill of --prefill-tokens (auto chooses standard; the other
//    form, absorbed, is what the engine did before the choice existed);
//  - a --suffix-tokens suffix over a cached prefix of the rest (auto chooses
//    absorbed; the other form is standard).
// Each case runs --repeats times per form after a warm-up call, alternating
// between the forms so that the machine's drifting load hits both alike; the
// medians are reported, with the chosen form's attention arithmetic per
// second against the best sgemm measured before and after in the same run.
// The machine is shared: each run also records the process's CPU time
// (descheduled time does not count), and the ratios between the forms are
// the median of the ratios of each alternating pair of runs.
#include <time.h>

#include <cstdio>
#include <fstream>
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

std::string loadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::unique_ptr<Backend> makeBackend(const Args& args, int threads, AttentionForm form) {
  BackendOptions options;
  options.threads = threads;
  options.num_blocks = 3 * (args.prefill_tokens / 64 + 4);
  options.attention_form = form;
  auto backend = createCpuBackend(loadBenchModel(args.model_dir), options);
  if (!backend.isOk()) die(backend.status().toString());
  return std::move(backend).value();
}

// One forward call of `tokens` after the positions `seq` holds; the sequence
// keeps the new positions only when `commit`.
struct Run {
  double seconds = 0;
  double cpu_seconds = 0;  // of the whole process (all threads)
  ForwardTiming timing;
};

double processCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

Run forwardOnce(Backend& backend, SequenceBlocks& seq, std::span<const int32_t> tokens, bool commit) {
  auto step = seq.step(tokens, LogitsWanted::kLast);
  if (!step.isOk()) die(step.status().toString());
  ForwardBatch batch;
  batch.sequences.push_back(*step);
  const double cpu0 = processCpuSeconds();
  const auto t0 = Clock::now();
  auto out = backend.forward(batch);
  const double s = seconds(t0, Clock::now());
  const double cpu = processCpuSeconds() - cpu0;
  if (!out.isOk()) die(out.status().toString());
  if (commit) seq.commit(static_cast<int32_t>(tokens.size()));
  return {s, cpu, out->timing};
}

struct CaseResult {
  std::string form;  // the form the runs used (auto: the one it chose)
  double tokens_per_s = 0;
  double seconds = 0;
  double cpu_seconds = 0;
  double attention_seconds = 0;
  double attention_gflops = 0;  // the form's arithmetic / its time
  double linear_seconds = 0;
};

CaseResult summarize(const std::vector<Run>& runs, int tokens, AttentionForm configured) {
  std::vector<double> s, cpu, att_s, att_gf, lin_s;
  for (const Run& r : runs) {
    s.push_back(r.seconds);
    cpu.push_back(r.cpu_seconds);
    att_s.push_back(r.timing.attention_seconds);
    att_gf.push_back(r.timing.attention_flops / r.timing.attention_seconds / 1e9);
    lin_s.push_back(r.timing.linear_seconds);
  }
  CaseResult c;
  const char* used = runs.front().timing.standard_form_sequences > 0 ? "standard" : "absorbed";
  c.form = configured == AttentionForm::kAuto ? std::string("auto (chose ") + used + ")" : std::string(used) + ", forced";
  c.seconds = median(s);
  c.cpu_seconds = median(cpu);
  c.tokens_per_s = tokens / c.seconds;
  c.attention_seconds = median(att_s);
  c.attention_gflops = median(att_gf);
  c.linear_seconds = median(lin_s);
  return c;
}

void printCase(const char* name, const CaseResult& r, double sgemm) {
  std::printf("| %s | %s | %.1f tokens/s (%.3f s) | %.3f s | %.3f s | %.1f GFLOPS | %.0f%% | %.3f s |\n", name,
              r.form.c_str(), r.tokens_per_s, r.seconds, r.cpu_seconds, r.attention_seconds, r.attention_gflops,
              sgemm > 0 ? 100 * r.attention_gflops / sgemm : 0.0, r.linear_seconds);
}

// Median over the alternating pairs of runs of slower / faster-form time.
struct PairRatios {
  double wall = 0, cpu = 0, attention = 0;
};

PairRatios pairRatios(const std::vector<Run>& chosen, const std::vector<Run>& other) {
  std::vector<double> wall, cpu, att;
  for (size_t i = 0; i < chosen.size() && i < other.size(); ++i) {
    wall.push_back(other[i].seconds / chosen[i].seconds);
    cpu.push_back(other[i].cpu_seconds / chosen[i].cpu_seconds);
    att.push_back(other[i].timing.attention_seconds / chosen[i].timing.attention_seconds);
  }
  return {median(wall), median(cpu), median(att)};
}

}  // namespace

int runAttentionForms(const Args& args) {
  const int threads = args.threads > 0 ? args.threads : static_cast<int>(std::thread::hardware_concurrency());
  const int total = args.prefill_tokens;
  const int prefix = total - args.suffix_tokens;
  if (args.suffix_tokens < 1 || prefix < 1 || args.repeats < 1) die("--attention-forms needs 0 < suffix < prefill tokens, repeats >= 1");
  std::printf("engine_bench --attention-forms: %d threads, load average %s\n", threads, loadAverage().c_str());
  const Sgemm sgemm_start = bestSgemm(threads, "");

  // The auto backend stays alive throughout, so the weight pages stay mapped
  // and the other backends' loads find them in the page cache.
  auto auto_backend = makeBackend(args, threads, AttentionForm::kAuto);
  std::mt19937 rng(1);
  std::vector<int32_t> ids(static_cast<size_t>(total));
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(auto_backend->config().vocab_size));

  // Case 1: a fresh prefill, auto against absorbed (the engine's behaviour before the choice).
  std::vector<Run> fresh_auto, fresh_other;
  {
    auto other = makeBackend(args, threads, AttentionForm::kAbsorbed);
    for (int rep = -1; rep < args.repeats; ++rep) {  // rep -1: warm-up (faults in the activation buffers)
      for (Backend* b : {auto_backend.get(), other.get()}) {
        SequenceBlocks seq(*b);
        const Run r = forwardOnce(*b, seq, ids, false);
        std::printf("fresh %d tokens, %s backend: %.2f s (attention %.2f s)%s\n", total,
                    b == other.get() ? "absorbed" : "auto", r.seconds, r.timing.attention_seconds,
                    rep < 0 ? ", warm-up" : "");
        if (rep >= 0) (b == other.get() ? fresh_other : fresh_auto).push_back(r);
      }
    }
  }

  // Case 2: a suffix over a cached prefix; both backends read the same prefix
  // latents (computed once, exported and imported).
  std::vector<Run> suffix_auto, suffix_other;
  {
    SequenceBlocks cached(*auto_backend);
    forwardOnce(*auto_backend, cached, std::span<const int32_t>(ids).first(static_cast<size_t>(prefix)), true);
    std::vector<uint8_t> bytes(auto_backend->latentLayout().blockBytes() * cached.blocks().size());
    if (Status s = auto_backend->latentPool().exportBlocks(cached.blocks(), bytes); !s.isOk()) die(s.toString());
    auto other = makeBackend(args, threads, AttentionForm::kStandard);
    std::vector<BlockId> blocks;
    if (Status s = other->blocks().allocate(static_cast<int32_t>(cached.blocks().size()), blocks); !s.isOk()) die(s.toString());
    if (Status s = other->latentPool().importBlocks(blocks, bytes); !s.isOk()) die(s.toString());
    SequenceBlocks other_cached(*other);
    other_cached.adopt(blocks, prefix);
    const std::span<const int32_t> suffix = std::span<const int32_t>(ids).subspan(static_cast<size_t>(prefix));
    for (int rep = -1; rep < args.repeats * 3; ++rep) {  // short runs: more of them
      for (auto [b, base] : {std::pair{auto_backend.get(), &cached}, std::pair{other.get(), &other_cached}}) {
        auto fork = base->fork(prefix);  // shares the prefix's full blocks
        if (!fork.isOk()) die(fork.status().toString());
        const Run r = forwardOnce(*b, *fork, suffix, false);
        if (rep >= 0) (b == other.get() ? suffix_other : suffix_auto).push_back(r);
      }
    }
  }
  Sgemm sgemm = sgemm_start;
  if (const Sgemm after = bestSgemm(threads, ", after"); after.gflops > sgemm.gflops) sgemm = after;

  const CaseResult fa = summarize(fresh_auto, total, AttentionForm::kAuto);
  const CaseResult fo = summarize(fresh_other, total, AttentionForm::kAbsorbed);
  const CaseResult sa = summarize(suffix_auto, args.suffix_tokens, AttentionForm::kAuto);
  const CaseResult so = summarize(suffix_other, args.suffix_tokens, AttentionForm::kStandard);
  std::printf("\n---- markdown ---- (load average at the end %s)\n", loadAverage().c_str());
  std::printf("| case | form | prefill, wall (median) | CPU time | attention time | attention arithmetic | vs sgemm | "
              "weight GEMMs |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  const std::string fresh_name = "fresh " + std::to_string(total) + " tokens";
  const std::string suffix_name =
      std::to_string(args.suffix_tokens) + " tokens over a cached " + std::to_string(prefix);
  printCase(fresh_name.c_str(), fa, sgemm.gflops);
  printCase(fresh_name.c_str(), fo, sgemm.gflops);
  printCase(suffix_name.c_str(), sa, sgemm.gflops);
  printCase(suffix_name.c_str(), so, sgemm.gflops);
  std::printf("\nsgemm %d^3, best routine (%s): %.1f GFLOPS; runs per form: %d fresh, %d suffix\n", kSquare,
              sgemm.name.c_str(), sgemm.gflops, args.repeats, args.repeats * 3);
  const PairRatios fr = pairRatios(fresh_auto, fresh_other), sr = pairRatios(suffix_auto, suffix_other);
  std::printf("fresh, absorbed / auto (median of pairs): wall %.2fx, CPU %.2fx, attention %.2fx; medians of wall: %.2fx\n",
              fr.wall, fr.cpu, fr.attention, fa.tokens_per_s / fo.tokens_per_s);
  std::printf("suffix, standard / auto (median of pairs): wall %.2fx, CPU %.2fx, attention %.2fx; medians of wall: %.2fx\n",
              sr.wall, sr.cpu, sr.attention, sa.tokens_per_s / so.tokens_per_s);
  return 0;
}

}  // namespace lg::engine::bench
