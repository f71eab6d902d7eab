// constrained_decode: decode throughput of constrained requests (a JSON
// Schema, through the same matcher the gateway gives the scheduler) against
// free ones, on one loaded model, at batch 1 and batch 16 (docs/benchmarks.md,
// "Constrained decoding"). Free and constrained runs alternate, `--rounds`
// times each; medians and their ratio are printed as JSON lines.
//
//   constrained_decode --model DIR [--schema FILE] [--batches 1,16]
//                      [--max-tokens 48] [--rounds 3] [--threads 2]
//
// Throughput is generated tokens over the wall time from submit to the last
// final event: the prompts are a dozen tokens, so decode dominates. With
// random weights a constrained reply may end sooner (its JSON is complete);
// tokens per second, not replies, are compared.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/model.h"
#include "proxy/gateway/structured_output.h"
#include "serving/scheduler.h"
#include "text/grammar/grammar.h"
#include "text/grammar/vocabulary.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using namespace lg;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct RunResult {
  double tokens_per_s = 0;
  int64_t tokens = 0;
};

RunResult runBatch(serving::Scheduler& scheduler, const std::vector<int32_t>& prompt, int batch, int max_tokens,
                   const serving::TokenConstraintFactory& constraint) {
  std::vector<std::unique_ptr<serving::EventQueue>> queues;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < batch; ++i) {
    serving::GenerationRequest r(cache::TeamNamespace::ofTeam("bench").value());
    r.prompt = prompt;
    r.prompt.push_back(static_cast<int32_t>(1000 + i));  // distinct prompts
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = static_cast<uint64_t>(i + 1);
    r.sampling.constraint = constraint;
    queues.push_back(std::make_unique<serving::EventQueue>());
    if (!scheduler.submit(std::move(r), queues.back()->sink())) {
      std::cerr << "constrained_decode: a request was refused at submit\n";
      std::exit(2);
    }
  }
  RunResult out;
  for (auto& q : queues) {
    for (;;) {
      std::optional<serving::StreamEvent> e = q->popFor(std::chrono::seconds(600));
      if (!e) {
        std::cerr << "constrained_decode: no final event\n";
        std::exit(2);
      }
      if (e->final) {
        if (e->finish_reason == serving::FinishReason::kError) {
          std::cerr << "constrained_decode: a request failed: " << e->message << "\n";
          std::exit(2);
        }
        out.tokens += e->usage.completion_tokens;
        break;
      }
    }
  }
  out.tokens_per_s = static_cast<double>(out.tokens) / std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("decode throughput of constrained against free requests");
  std::string model_dir, schema_file = std::string(LG_SOURCE_DIR) + "/bench/grammar/schemas/shell_tool.json";
  std::string batches_arg = "1,16";
  int max_tokens = 48, rounds = 3, threads = 2;
  app.add_option("--model", model_dir, "a model directory (latentgate model init)")->required();
  app.add_option("--schema", schema_file, "the JSON Schema the constrained replies follow");
  app.add_option("--batches", batches_arg, "batch sizes, comma-separated");
  app.add_option("--max-tokens", max_tokens, "tokens per reply at most");
  app.add_option("--rounds", rounds, "alternations of free and constrained runs");
  app.add_option("--threads", threads, "engine threads");
  CLI11_PARSE(app, argc, argv);

  auto tok = text::Tokenizer::loadFromDir(model_dir);
  if (!tok.isOk()) {
    std::cerr << "constrained_decode: " << tok.status().toString() << "\n";
    return 2;
  }
  std::ifstream in(schema_file);
  std::stringstream text;
  text << in.rdbuf();
  const auto schema = nlohmann::ordered_json::parse(text.str(), nullptr, false);
  if (schema.is_discarded()) {
    std::cerr << "constrained_decode: " << schema_file << " is not JSON\n";
    return 2;
  }
  auto vocab = text::grammar::Vocabulary::fromTokenizer(**tok);
  auto compiled = text::grammar::Grammar::fromJsonSchema(schema);
  if (auto* e = std::get_if<text::grammar::GrammarError>(&compiled)) {
    std::cerr << "constrained_decode: " << e->toString() << "\n";
    return 2;
  }
  auto grammar = std::get<std::shared_ptr<const text::grammar::Grammar>>(compiled);
  grammar->prepare(vocab);
  const serving::TokenConstraintFactory constraint = proxy::StructuredOutput::constraintFor(grammar, vocab);

  auto model = engine::Model::load(model_dir);
  if (!model.isOk()) {
    std::cerr << "constrained_decode: " << model.status().toString() << "\n";
    return 2;
  }
  engine::BackendOptions bo;
  bo.threads = threads;
  bo.block_tokens = 64;
  bo.max_context = 4096;
  bo.num_blocks = 256;
  auto backend = engine::createCpuBackend(std::move(model).value(), bo);
  if (!backend.isOk()) {
    std::cerr << "constrained_decode: " << backend.status().toString() << "\n";
    return 2;
  }
  serving::SchedulerOptions so;
  so.max_running = 64;
  so.eos_token_ids = {};  // random weights: free replies run to max_tokens
  auto scheduler = serving::Scheduler::create(**backend, nullptr, **tok, so).value();
  const std::vector<int32_t> prompt = (*tok)->encode("Run a shell command that lists the files here, as JSON.").value();

  std::vector<int> batches;
  for (std::stringstream ss(batches_arg); ss.good();) {
    std::string b;
    std::getline(ss, b, ',');
    if (!b.empty()) batches.push_back(std::stoi(b));
  }
  runBatch(*scheduler, prompt, 1, 8, {});  // warm-up: weights faulted in
  for (int batch : batches) {
    std::vector<double> free_tps, constrained_tps;
    int64_t free_tokens = 0, constrained_tokens = 0;
    for (int r = 0; r < rounds; ++r) {
      RunResult f = runBatch(*scheduler, prompt, batch, max_tokens, {});
      RunResult c = runBatch(*scheduler, prompt, batch, max_tokens, constraint);
      free_tps.push_back(f.tokens_per_s);
      constrained_tps.push_back(c.tokens_per_s);
      free_tokens += f.tokens;
      constrained_tokens += c.tokens;
    }
    const double fm = median(free_tps), cm = median(constrained_tps);
    nlohmann::json line = {{"bench", "constrained_decode"},
                           {"model", model_dir},
                           {"batch", batch},
                           {"rounds", rounds},
                           {"free_tokens_per_s_median", fm},
                           {"constrained_tokens_per_s_median", cm},
                           {"ratio", cm / fm},
                           {"free_tokens", free_tokens},
                           {"constrained_tokens", constrained_tokens}};
    std::cout << line.dump() << std::endl;
  }
  const serving::SchedulerStats stats = scheduler->schedulerStats();
  std::cout << nlohmann::json{{"constraint_masks", stats.constraint_mask_seconds.count},
                              {"constraint_mask_mean_us",
                               stats.constraint_mask_seconds.count
                                   ? 1e6 * stats.constraint_mask_seconds.sum / stats.constraint_mask_seconds.count
                                   : 0.0}}
                   .dump()
            << std::endl;
  return 0;
}
