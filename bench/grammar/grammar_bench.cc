// Grammar benchmark: schema compile time (cold, then through GrammarCache),
// Grammar::prepare (every node's token table for the vocabulary, cold, then
// repeated; cold compile + prepare is the median of --prepares fresh
// grammars), and the time of fillNextTokenMask per decode step after prepare
// on the DeepSeek V3 vocabulary (129,280 ids), over random generations that
// sample allowed tokens; p50/p99/max per schema.
// Usage: grammar_bench [--runs N] [--prepares N] [--profile] (--profile: per-node times of
// the lazy table build too).
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "text/grammar/grammar_cache.h"
#include "text/grammar/matcher.h"
#include "text/grammar/token_table.h"
#include "text/tokenizer/bpe_tokenizer.h"

using namespace lg::text;
using namespace lg::text::grammar;
using Clock = std::chrono::steady_clock;

namespace {

const char* kShellTool = R"({"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},
  "workdir":{"type":"string"},"timeout_ms":{"type":"integer"}},"required":["command","workdir","timeout_ms"],
  "additionalProperties":false})";
const char* kRecursive = R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},
  "kind":{"enum":["file","dir","link"]},"size":{"type":"integer","minimum":0},
  "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name","kind","children"],
  "additionalProperties":false}},"$ref":"#/$defs/node"})";

double ms(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 20;
  bool profile = false;
  int prepare_reps = 9;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--runs") runs = std::stoi(argv[i + 1]);
    if (std::string(argv[i]) == "--prepares") prepare_reps = std::stoi(argv[i + 1]);
  }
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--profile") profile = true;
  }
  auto text = lg::readFile(std::string(LG_SOURCE_DIR) + "/assets/deepseek-v3-tokenizer/tokenizer.json");
  auto tok = BpeTokenizer::fromJson(nlohmann::json::parse(*text));
  auto t0 = Clock::now();
  auto vocab = Vocabulary::fromTokenizer(*tok.value());
  std::printf("vocabulary: %d ids, built in %.1f ms\n", vocab->size(),
              std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  GrammarCache cache;
  for (auto [name, schema_text] : {std::pair{"shell tool", kShellTool}, std::pair{"recursive $ref", kRecursive},
                                    std::pair{"tool calls (auto, V3, shell strict)", kShellTool}}) {
    const auto schema = nlohmann::ordered_json::parse(schema_text);
    const bool tool_calls = std::string_view(name).starts_with("tool calls");
    // The third case: DeepSeek V3 tool calls with tool_choice auto (free text
    // that may open the section: the Knuth-Morris-Pratt states accept nearly
    // every token), the shell tool's arguments strict.
    auto compileFresh = [&]() -> GrammarOrError {
      if (!tool_calls) return Grammar::fromJsonSchema(schema);
      return Grammar::forToolCalls({ToolSpec{"shell", schema, true}}, ToolCallOptions{});
    };
    t0 = Clock::now();
    auto g = tool_calls ? cache.getOrCompile("tools", compileFresh) : cache.jsonSchema(schema);
    const double compile_ms = ms(t0);
    t0 = Clock::now();
    auto g2 = tool_calls ? cache.getOrCompile("tools", compileFresh) : cache.jsonSchema(schema);
    const double repeat_ms = ms(t0);
    if (auto* e = std::get_if<GrammarError>(&g)) {
      std::printf("%s: %s\n", name, e->toString().c_str());
      return 1;
    }
    auto grammar = std::get<std::shared_ptr<const Grammar>>(g);
    if (profile) {
      // Per-node build times of the lazy path (a fresh grammar: tables are per grammar).
      auto fresh = std::get<std::shared_ptr<const Grammar>>(compileFresh());
      auto table = fresh->tokenTable(vocab);
      std::vector<double> per;
      for (uint32_t n = 0; n < fresh->automaton().nodes.size(); ++n) {
        t0 = Clock::now();
        table->forNode(n);
        per.push_back(ms(t0));
        if (per.back() > 1.0) {
          const auto& nd = fresh->automaton().nodes[n];
          const auto& t = table->forNode(n);
          std::printf("  node %u: %.2f ms, %u byte edges, %u calls, final %d, always %zu/%zu, %zu suffixes, %zu suffix tokens\n", n, per.back(),
                      nd.bytes_end - nd.bytes_begin, nd.calls_end - nd.calls_begin, nd.final, t.always_list.size(), t.always_bits.size(),
                      t.suffixes.size(), t.suffix_tokens.size());
        }
      }
      double sum = 0;
      for (double x : per) sum += x;
      std::printf("%s: %zu nodes in %zu classes, lazy per-node table build p50 %.2f ms max %.2f ms, %.1f ms in all\n", name,
                  per.size(), table->classCount(), pct(per, 0.5), pct(per, 1.0), sum);
    }
    // Cold compile + prepare of fresh grammars (no cache), median of several:
    // the machine is shared and noisy.
    std::vector<double> compiles, prepares, totals;
    for (int k = 0; k < prepare_reps; ++k) {
      t0 = Clock::now();
      auto fresh = std::get<std::shared_ptr<const Grammar>>(compileFresh());
      compiles.push_back(ms(t0));
      const auto t1 = Clock::now();
      fresh->prepare(vocab);
      prepares.push_back(ms(t1));
      totals.push_back(ms(t0));
    }
    grammar->prepare(vocab);
    t0 = Clock::now();
    grammar->prepare(vocab);
    const double prepare_repeat_ms = ms(t0);
    std::vector<double> masks;
    std::vector<uint32_t> mask(vocab->maskWords());
    std::vector<int32_t> ids, closing;
    std::mt19937 rng(1);
    size_t tokens = 0;
    for (int r = 0; r < runs; ++r) {
      Matcher m(grammar, vocab);
      for (int step = 0; step < 200 && !m.mustEnd(); ++step) {
        const auto s0 = Clock::now();
        m.fillNextTokenMask(mask);
        masks.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s0).count());
        ids.clear();
        for (size_t w = 0; w < mask.size(); ++w) {
          for (uint32_t bits = mask[w]; bits != 0; bits &= bits - 1) {
            ids.push_back(static_cast<int32_t>(w * 32 + static_cast<size_t>(std::countr_zero(bits))));
          }
        }
        if (ids.empty() || (m.canEnd() && rng() % 4 == 0)) break;
        if (step > 24) {  // steer towards closing so that outputs end
          closing.clear();
          for (int32_t id : ids) {
            if (vocab->bytes(id).find_first_of("\"]}") != std::string_view::npos) closing.push_back(id);
          }
          if (!closing.empty()) ids.swap(closing);
        }
        if (!m.accept(ids[rng() % ids.size()])) return 2;
        ++tokens;
      }
    }
    std::printf("%s: compile %.3f ms (first, via GrammarCache), repeat (GrammarCache) %.4f ms; cold, median of "
                "%d: compile %.3f ms, prepare %.2f ms, compile+prepare %.2f ms (min %.2f); prepare repeat %.4f ms; mask per step after prepare: p50 %.1f us p99 %.1f us max %.1f us over "
                "%zu steps (%zu tokens, %d generations)\n",
                name, compile_ms, repeat_ms, prepare_reps, pct(compiles, 0.5), pct(prepares, 0.5), pct(totals, 0.5),
                pct(totals, 0.0), prepare_repeat_ms,
                pct(masks, 0.5), pct(masks, 0.99), pct(masks, 1.0), masks.size(), tokens, runs);
  }
  return 0;
}
