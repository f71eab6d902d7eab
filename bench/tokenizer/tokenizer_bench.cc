// Tokenizer benchmark: single-thread encoding throughput of LatentGate's
// tokenizer and of the Hugging Face `tokenizers` npm package on the same
// corpus in one run, with a check that both produce identical ids.
//
//   tokenizer_bench --corpus CORPUS.jsonl [--tokenizer DIR] [--reps N] [--no-reference]
//
// The corpus comes from scripts/tokenizer/make_corpus.mjs; the reference runs
// bench/tokenizer/hf_bench.mjs with node (npm ci in bench/tokenizer first).
// scripts/tokenizer/run_bench.sh does all of it. Documents are encoded one by
// one on one thread; each figure is the median of --reps timed passes after a
// warm-up pass.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer/bpe_tokenizer.h"
#include "text/tokenizer/tokenizer.h"

namespace {

using nlohmann::json;

struct Args {
  std::string corpus;
  std::string tokenizer_dir = std::string(LG_SOURCE_DIR) + "/assets/deepseek-v3-tokenizer";
  int reps = 5;
  bool reference = true;
};

// Same hash as hf_bench.mjs.
std::string hashIds(const std::vector<std::vector<int32_t>>& all) {
  uint32_t a = 0x811c9dc5u, b = 0x01000193u ^ 0x5bd1e995u;
  for (const auto& ids : all) {
    for (int32_t id : ids) {
      a = (a ^ static_cast<uint32_t>(id)) * 0x01000193u;
      b = (b ^ (static_cast<uint32_t>(id) + 0x9e3779b9u)) * 0x01000193u;
    }
    a = (a ^ 0xffffffffu) * 0x01000193u;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", a, b);
  return buf;
}

struct Measure {
  double median = 0;
  size_t tokens = 0;
  std::string hash;
};

Measure measure(const lg::text::Tokenizer& tokenizer, const std::vector<std::string>& docs, int reps) {
  Measure m;
  std::vector<std::vector<int32_t>> all;
  auto pass = [&](bool keep) {
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& d : docs) {
      auto ids = tokenizer.encode(d);
      if (!ids.isOk()) {
        std::cerr << "encode failed: " << ids.status().toString() << "\n";
        std::exit(1);
      }
      if (keep) all.push_back(std::move(ids).value());
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  pass(true);
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) times.push_back(pass(false));
  std::sort(times.begin(), times.end());
  m.median = times[times.size() / 2];
  for (const auto& ids : all) m.tokens += ids.size();
  m.hash = hashIds(all);
  return m;
}

void row(const char* name, size_t bytes, double seconds, size_t tokens) {
  std::printf("%-28s %9.2f MB/s %12.0f tokens/s  (median %.3f s)\n", name, bytes / seconds / 1e6, tokens / seconds,
              seconds);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--corpus") args.corpus = value();
    else if (a == "--tokenizer") args.tokenizer_dir = value();
    else if (a == "--reps") args.reps = std::max(1, std::stoi(value()));
    else if (a == "--no-reference") args.reference = false;
    else {
      std::cerr << "usage: tokenizer_bench --corpus CORPUS.jsonl [--tokenizer DIR] [--reps N] [--no-reference]\n";
      return 2;
    }
  }
  if (args.corpus.empty()) {
    std::cerr << "--corpus is required (scripts/tokenizer/make_corpus.mjs builds one)\n";
    return 2;
  }
  std::vector<std::string> docs;
  size_t bytes = 0;
  {
    std::ifstream in(args.corpus);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      docs.push_back(json::parse(line)["text"].get<std::string>());
      bytes += docs.back().size();
    }
  }
  if (docs.empty()) {
    std::cerr << "empty corpus " << args.corpus << "\n";
    return 1;
  }
  auto tokenizer = lg::text::Tokenizer::loadFromDir(args.tokenizer_dir);
  if (!tokenizer.isOk()) {
    std::cerr << tokenizer.status().toString() << "\n";
    return 1;
  }
  std::printf("corpus: %zu documents, %.2f MB; tokenizer: %s; %d timed passes each\n", docs.size(), bytes / 1e6,
              args.tokenizer_dir.c_str(), args.reps);
  const Measure mine = measure(**tokenizer, docs, args.reps);
  row("LatentGate", bytes, mine.median, mine.tokens);

  // The general (PCRE2) pre-tokenizer, for reference.
  {
    std::ifstream in(args.tokenizer_dir + "/tokenizer.json");
    const json root = json::parse(in);
    lg::text::TokenizerOptions options;
    options.allow_fast_path = false;
    auto general = lg::text::BpeTokenizer::fromJson(root, options);
    if (general.isOk()) {
      const Measure g = measure(**general, docs, std::max(1, args.reps / 2));
      row("LatentGate (PCRE2 path)", bytes, g.median, g.tokens);
      if (g.hash != mine.hash) std::printf("WARNING: the PCRE2 path gave different ids\n");
    }
  }
  if (!args.reference) return 0;

  const std::string command = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false node '" + std::string(LG_SOURCE_DIR) +
                              "/bench/tokenizer/hf_bench.mjs' '" + args.corpus + "' '" + args.tokenizer_dir + "' " +
                              std::to_string(args.reps);
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  if (pipe) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) output.append(buf, n);
    if (pclose(pipe) != 0) output.clear();
  }
  const json ref = json::parse(output, nullptr, false);
  if (ref.is_discarded() || !ref.contains("median_seconds")) {
    std::cerr << "the reference run failed (npm ci in bench/tokenizer?): " << output << "\n";
    return 1;
  }
  const double ref_median = ref["median_seconds"];
  row("tokenizers 0.23.2 (npm)", bytes, ref_median, ref["tokens"].get<size_t>());
  std::printf("speedup: %.2fx (MB/s ratio)\n", ref_median / mine.median);
  const bool same = ref["hash"].get<std::string>() == mine.hash && ref["tokens"].get<size_t>() == mine.tokens;
  std::printf("ids identical: %s (hash %s, %zu tokens; reference %s, %zu tokens)\n", same ? "yes" : "NO",
              mine.hash.c_str(), mine.tokens, ref["hash"].get<std::string>().c_str(), ref["tokens"].get<size_t>());
  return same ? 0 : 1;
}
